#include <shardplan/report.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <array>
#include <map>
#include <numeric>
#include <span>

namespace shardplan {

using nlohmann::ordered_json;

std::string_view shardplan_version() { return SHARDPLAN_VERSION; }

namespace {

ordered_json header(std::string_view command) {
  ordered_json j;
  j["schema_version"] = k_schema_version;
  j["shardplan_version"] = std::string(shardplan_version());
  j["command"] = std::string(command);
  return j;
}

std::string dump_scalar(const ordered_json& j) {
  // Invalid UTF-8 (possible in echoed command-line input) is replaced rather
  // than thrown on.
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

bool is_scalar(const ordered_json& j) { return !j.is_array() && !j.is_object(); }

// Pretty JSON with two-space indents, except that an array of scalars stays
// on one line ("shape": [4096, 14336]), which keeps shapes and device grids
// readable.
void dump_to(const ordered_json& j, size_t indent, std::string& out) {
  if (j.is_array()) {
    if (j.empty()) {
      out += "[]";
      return;
    }
    if (std::all_of(j.begin(), j.end(), is_scalar)) {
      out += '[';
      for (size_t i = 0; i < j.size(); ++i) {
        out += (i ? ", " : "") + dump_scalar(j[i]);
      }
      out += ']';
      return;
    }
    out += "[\n";
    for (size_t i = 0; i < j.size(); ++i) {
      out += std::string(indent + 2, ' ');
      dump_to(j[i], indent + 2, out);
      out += i + 1 < j.size() ? ",\n" : "\n";
    }
    out += std::string(indent, ' ') + "]";
    return;
  }
  if (j.is_object()) {
    if (j.empty()) {
      out += "{}";
      return;
    }
    out += "{\n";
    size_t i = 0;
    for (const auto& [key, value] : j.items()) {
      out += std::string(indent + 2, ' ') + dump_scalar(ordered_json(key)) + ": ";
      dump_to(value, indent + 2, out);
      out += ++i < j.size() ? ",\n" : "\n";
    }
    out += std::string(indent, ' ') + "}";
    return;
  }
  out += dump_scalar(j);
}

std::string dump(const ordered_json& j) {
  std::string out;
  dump_to(j, 0, out);
  out += '\n';
  return out;
}

ordered_json diagnostics_array(const Diagnostics& diags) {
  ordered_json arr = ordered_json::array();
  for (const Diagnostic& d : diags.items()) {
    ordered_json e;
    e["severity"] = std::string(to_string(d.severity));
    e["code"] = d.code;
    e["message"] = d.hint.empty() ? d.message : d.message + "; " + d.hint;
    if (d.tensor) {
      e["tensor"] = *d.tensor;
    }
    if (d.dim) {
      e["dim"] = *d.dim;
    }
    if (!d.location.empty()) {
      ordered_json loc;
      loc["source"] = d.location.source;
      if (!d.location.pointer.empty()) {
        loc["pointer"] = d.location.pointer;
      }
      if (d.location.line > 0) {
        loc["line"] = d.location.line;
        loc["column"] = d.location.column;
      }
      e["location"] = std::move(loc);
    }
    arr.push_back(std::move(e));
  }
  return arr;
}

ordered_json mesh_object(const Mesh& mesh) {
  ordered_json axes = ordered_json::array();
  for (const MeshAxis& a : mesh.axes) {
    axes.push_back({{"name", a.name},
                    {"size", a.size},
                    {"type", std::string(to_string(a.type))},
                    {"ici", a.ici},
                    {"dcn", a.dcn}});
  }
  ordered_json m;
  m["axes"] = std::move(axes);
  m["devices"] = mesh.num_devices();
  m["slices"] = mesh.num_slices();
  m["canonical"] = to_string(mesh);
  m["dcn"] = dcn_string(mesh);
  return m;
}

// Nested arrays shaped like `shape` from the row-major `ids`.
ordered_json nested(const std::vector<int64_t>& shape,
                    const std::vector<int64_t>& ids, size_t axis, size_t& next) {
  if (axis == shape.size()) {
    return ids[next++];
  }
  ordered_json arr = ordered_json::array();
  for (int64_t i = 0; i < shape[axis]; ++i) {
    arr.push_back(nested(shape, ids, axis + 1, next));
  }
  return arr;
}

// 16060522496 -> "16,060,522,496".
std::string with_commas(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) {
      out += ',';
    }
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

// Binary units, as HBM capacities are quoted: "14.96 GiB".
std::string human_bytes(int64_t bytes) {
  constexpr std::array<const char*, 6> k_units = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  auto value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < k_units.size()) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) {
    return fmt::format("{} B", bytes);
  }
  return fmt::format("{:.2f} {}", value, k_units[unit]);
}

// A plain text table: the first row is the header; columns whose cells are
// all numbers (or empty) are right-aligned.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  if (rows.empty()) {
    return "";
  }
  size_t cols = rows.front().size();
  std::vector<size_t> width(cols, 0);
  std::vector<bool> numeric(cols, true);
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t c = 0; c < cols; ++c) {
      width[c] = std::max(width[c], rows[r][c].size());
      if (r > 0 && !rows[r][c].empty()
          && rows[r][c].find_first_not_of("0123456789,.") != std::string::npos) {
        numeric[c] = false;
      }
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < cols; ++c) {
      std::string cell = row[c];
      std::string pad(width[c] - cell.size(), ' ');
      line += (c ? "  " : "") + (numeric[c] ? pad + cell : cell + pad);
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }
  return out;
}

std::string shape_text(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}


// HBM as vendors quote it: "80 GB" for a whole number of 1e9 bytes, else
// binary units ("95.00 GiB").
std::string capacity_text(double bytes) {
  if (bytes > 0 && std::fmod(bytes, 1e9) == 0) {
    return fmt::format("{:g} GB", bytes / 1e9);
  }
  return human_bytes(static_cast<int64_t>(bytes));
}

// Decimal rates, as link bandwidths are quoted: "180 GB/s".
std::string rate_text(double bytes_per_s) {
  if (bytes_per_s >= 1e12) {
    return fmt::format("{:g} TB/s", bytes_per_s / 1e12);
  }
  if (bytes_per_s >= 1e9) {
    return fmt::format("{:g} GB/s", bytes_per_s / 1e9);
  }
  return fmt::format("{:g} MB/s", bytes_per_s / 1e6);
}

std::string seconds_text(double seconds) {
  if (seconds >= 1e-3) {
    return fmt::format("{:g} ms", seconds * 1e3);
  }
  return fmt::format("{:g} us", seconds * 1e6);
}

// The figures that apply to `t` (its kind's, and DCN only where it has some).
std::vector<std::pair<std::string_view, const Figure*>> figure_list(const Topology& t) {
  std::vector<std::pair<std::string_view, const Figure*>> out;
  for (const FigureField& field : figure_fields()) {
    const Figure* figure = &(t.figures.*field.member);
    if ((!field.kind || field.kind == t.kind) && !figure->source.empty()) {
      out.emplace_back(field.name, figure);
    }
  }
  return out;
}

ordered_json topology_object(const Topology& t) {
  ordered_json j;
  j["name"] = t.name;
  j["kind"] = std::string(to_string(t.kind));
  j["chip"] = t.chip;
  j["device_kind"] = t.device_kind;
  j["source"] = t.source;
  j["devices"] = t.devices();
  if (t.kind == TopologyKind::tpu) {
    j["chips"] = t.chips();
    j["slices"] = t.num_slices();
    j["shape"] = t.tpu.chips;
    j["wraparound"] = t.wraparound;
    j["devices_per_chip"] = t.tpu.cores_per_chip;
    j["host_bounds"] = t.tpu.host_bounds;
  } else {
    j["gpus_per_host"] = t.gpus_per_host;
    j["nvlink_domain"] = t.nvlink_domain;
  }
  j["hosts"] = t.num_hosts();
  j["devices_per_host"] = t.devices_per_host();
  j["hbm_bytes_per_device"] = static_cast<int64_t>(t.figures.hbm_bytes_per_device.value);
  const TopologyFigures& f = t.figures;
  ordered_json links;
  if (t.kind == TopologyKind::tpu) {
    links["ici"] = {{"bytes_per_s_per_link", f.ici_bytes_per_s_per_link.value},
                    {"links_per_chip", f.ici_links_per_chip.value},
                    {"latency_s", f.ici_latency_s.value}};
    if (!f.dcn_bytes_per_s_per_chip.source.empty()) {
      links["dcn"] = {{"bytes_per_s_per_chip", f.dcn_bytes_per_s_per_chip.value},
                      {"latency_s", f.dcn_latency_s.value}};
    }
  } else {
    links["nvlink"] = {{"bytes_per_s_per_gpu", f.nvlink_bytes_per_s_per_gpu.value},
                       {"latency_s", f.nvlink_latency_s.value}};
    links["network"] = {{"bytes_per_s_per_gpu", f.network_bytes_per_s_per_gpu.value},
                        {"latency_s", f.network_latency_s.value}};
  }
  j["links"] = std::move(links);
  ordered_json figures;
  for (const auto& [name, figure] : figure_list(t)) {
    figures[std::string(name)] = {{"value", figure->value}, {"source", figure->source}};
  }
  j["figures"] = std::move(figures);
  return j;
}

std::string topology_shape_text(const Topology& t) {
  if (t.kind == TopologyKind::gpu) {
    const int64_t hosts = t.num_hosts();
    return fmt::format("{} x {} GPUs", hosts, t.devices_per_host());
  }
  const auto& c = t.tpu.chips;
  std::string shape = is_2d(t.tpu.chip) ? fmt::format("{}x{}", c[0], c[1])
                          : fmt::format("{}x{}x{}", c[0], c[1], c[2]);
  return t.num_slices() > 1 ? fmt::format("{} x {}", t.num_slices(), shape) : shape;
}

std::string links_text(const Topology& t) {
  const TopologyFigures& f = t.figures;
  if (t.kind == TopologyKind::gpu) {
    return fmt::format("nvlink {}, network {}", rate_text(f.nvlink_bytes_per_s_per_gpu.value),
                       rate_text(f.network_bytes_per_s_per_gpu.value));
  }
  std::string out = fmt::format("ici {} x {}", rate_text(f.ici_bytes_per_s_per_link.value),
                                f.ici_links_per_chip.value);
  if (!f.dcn_bytes_per_s_per_chip.source.empty()) {
    out += fmt::format(", dcn {}", rate_text(f.dcn_bytes_per_s_per_chip.value));
  }
  return out;
}

std::string topology_summary(const Topology& t) {
  return fmt::format("{}: {} {} devices ({}), {} of HBM each", t.name, t.devices(),
                     t.device_kind, topology_shape_text(t),
                     capacity_text(t.figures.hbm_bytes_per_device.value));
}

}  // namespace

std::string diagnostics_json(std::string_view command, const Diagnostics& diags) {
  ordered_json j = header(command);
  j["diagnostics"] = diagnostics_array(diags);
  return dump(j);
}

std::string mesh_json(const Mesh& mesh, const MeshLayout& layout,
                      const Topology* topology, const Diagnostics& diags) {
  ordered_json j = header("mesh");
  j["mesh"] = mesh_object(mesh);
  if (topology != nullptr) {
    j["topology"] = topology_object(*topology);
  }
  size_t next = 0;
  j["device_ids"] = nested(layout.grid.shape, layout.grid.ids, 0, next);
  if (topology != nullptr) {
    if (layout.physical_assignment.empty()) {
      j["physical_assignment"] = nullptr;
    } else {
      j["physical_assignment"] = layout.physical_assignment;
      j["physical_axes"] = layout.physical_axis_names;
    }
    ordered_json links = ordered_json::array();
    for (const AxisLink& l : layout.links) {
      ordered_json e;
      e["axis"] = l.axis;
      e["link"] = std::string(to_string(l.link));
      e["wraparound"] = l.wraparound;
      e["ring_size"] = l.ring_size;
      e["bytes_per_s"] = l.bytes_per_s;
      e["latency_s"] = l.latency_s;
      e["physical_axes"] = l.physical_axes;
      links.push_back(std::move(e));
    }
    j["axes_links"] = std::move(links);
    const HostLayout& h = layout.hosts;
    ordered_json hosts;
    hosts["count"] = h.count;
    hosts["devices_per_host"] = h.devices_per_host;
    hosts["local_mesh_shape"] =
        h.local_mesh_shape.empty() ? ordered_json(nullptr) : ordered_json(h.local_mesh_shape);
    hosts["device_ids"] = h.device_ids;
    j["hosts"] = std::move(hosts);
  }
  j["diagnostics"] = diagnostics_array(diags);
  return dump(j);
}

std::string mesh_text(const Mesh& mesh, const MeshLayout& layout,
                      const Topology* topology) {
  const DeviceGrid& grid = layout.grid;
  std::string out;
  int64_t slices = mesh.num_slices();
  out += fmt::format("mesh {} on {} devices{}\n", to_string(mesh), mesh.num_devices(),
                     slices > 1 ? fmt::format(" in {} slices (--dcn {})", slices,
                                              dcn_string(mesh))
                                : std::string());
  if (topology != nullptr) {
    out += fmt::format("topology {}\n", topology_summary(*topology));
  }
  out += "\n";
  std::vector<std::vector<std::string>> rows = {{"axis", "size", "ici", "dcn", "type"}};
  for (const MeshAxis& a : mesh.axes) {
    rows.push_back({a.name, std::to_string(a.size), std::to_string(a.ici),
                    std::to_string(a.dcn), std::string(to_string(a.type))});
  }
  out += table(rows);

  if (topology != nullptr) {
    out += "\nlinks per axis (bandwidth: what one device sends per second along it):\n";
    std::vector<std::vector<std::string>> links = {
        {"axis", "size", "link", "ring", "physical", "bandwidth", "latency"}};
    for (const AxisLink& l : layout.links) {
      links.push_back({l.axis, std::to_string(l.ring_size), std::string(to_string(l.link)),
                       l.link == LinkClass::none ? "-" : (l.wraparound ? "yes" : "no"),
                       l.physical_axes.empty() ? "-" : fmt::format("{}", fmt::join(l.physical_axes, "+")),
                       l.link == LinkClass::none ? "-" : rate_text(l.bytes_per_s),
                       l.link == LinkClass::none ? "-" : seconds_text(l.latency_s)});
    }
    out += table(links);
    if (!layout.physical_assignment.empty()) {
      out += "\nphysical assignment (physical axis: part given to each mesh axis):\n";
      for (size_t p = 0; p < layout.physical_assignment.size(); ++p) {
        out += fmt::format("  {:<4} {}\n", layout.physical_axis_names[p],
                           shape_text(layout.physical_assignment[p]));
      }
    }
    const HostLayout& h = layout.hosts;
    out += fmt::format("\nhosts: {} of {} devices; each host's local mesh: {}\n", h.count,
                       h.devices_per_host,
                       h.local_mesh_shape.empty() ? "none (see the diagnostics)"
                                                  : shape_text(h.local_mesh_shape));
  }

  // The device grid: the last axis across, the one before it down, and one
  // block per index of the leading axes.
  constexpr int64_t k_max_drawn = 512;
  if (mesh.num_devices() > k_max_drawn) {
    out += fmt::format("\ndevice ids: {} devices, too many to draw; see --format json\n",
                       mesh.num_devices());
    return out;
  }
  const size_t rank = grid.shape.size();
  int64_t cols = rank >= 1 ? grid.shape[rank - 1] : 1;
  int64_t rows_per_block = rank >= 2 ? grid.shape[rank - 2] : 1;
  int64_t blocks = static_cast<int64_t>(grid.ids.size()) / (cols * rows_per_block);
  size_t id_width = std::to_string(mesh.num_devices() - 1).size();
  std::vector<std::string> names = mesh.axis_names();
  out += fmt::format("\ndevice ids ({}):\n", fmt::join(names, " x "));
  for (int64_t b = 0; b < blocks; ++b) {
    if (rank > 2) {
      // The block's coordinates on the leading axes.
      std::string label;
      int64_t rest = b;
      for (size_t k = rank - 2; k-- > 0;) {
        label = fmt::format("{}={}{}", names[k], rest % grid.shape[k],
                            label.empty() ? "" : ", " + label);
        rest /= grid.shape[k];
      }
      out += fmt::format("  [{}]\n", label);
    }
    for (int64_t r = 0; r < rows_per_block; ++r) {
      out += "   ";
      for (int64_t c = 0; c < cols; ++c) {
        auto index = static_cast<size_t>((b * rows_per_block + r) * cols + c);
        out += fmt::format(" {:>{}}", grid.ids[index], id_width);
      }
      out += "\n";
    }
  }
  return out;
}

std::string topology_list_json(const std::vector<Topology>& topologies) {
  ordered_json j = header("topology");
  ordered_json arr = ordered_json::array();
  for (const Topology& t : topologies) {
    arr.push_back(topology_object(t));
  }
  j["topologies"] = std::move(arr);
  return dump(j);
}

std::string topology_list_text(const std::vector<Topology>& topologies) {
  std::vector<std::vector<std::string>> rows = {
      {"name", "kind", "devices", "shape", "hbm/device", "link bandwidth (one way)"}};
  for (const Topology& t : topologies) {
    rows.push_back({t.name, std::string(to_string(t.kind)), std::to_string(t.devices()),
                    topology_shape_text(t),
                    capacity_text(t.figures.hbm_bytes_per_device.value), links_text(t)});
  }
  return table(rows)
         + "\nAny size of these families also works by shape (v5p:4x4x12), and Kx "
           "in front makes K slices (2xv5p-256).\n";
}

std::string topology_show_json(const Topology& topology) {
  ordered_json j = header("topology");
  j["topology"] = topology_object(topology);
  return dump(j);
}

std::string topology_show_text(const Topology& topology) {
  const Topology& t = topology;
  std::string out = fmt::format("topology {}\n\n", topology_summary(t));
  std::vector<std::vector<std::string>> rows = {{"property", "value"}};
  rows.push_back({"kind", std::string(to_string(t.kind))});
  rows.push_back({"device_kind", t.device_kind});
  rows.push_back({"devices", std::to_string(t.devices())});
  if (t.kind == TopologyKind::tpu) {
    rows.push_back({"slice shape (chips)", topology_shape_text(t)});
    rows.push_back({"slices", std::to_string(t.num_slices())});
    rows.push_back({"devices per chip", std::to_string(t.tpu.cores_per_chip)});
    rows.push_back({"wraparound (x, y, z)",
                    fmt::format("{}, {}, {}", t.wraparound[0], t.wraparound[1],
                                t.wraparound[2])});
    rows.push_back({"host bounds (chips)",
                    fmt::format("{}x{}x{}", t.tpu.host_bounds[0], t.tpu.host_bounds[1],
                                t.tpu.host_bounds[2])});
  } else {
    rows.push_back({"GPUs per host", std::to_string(t.gpus_per_host)});
    rows.push_back({"NVLink domain", std::to_string(t.nvlink_domain)});
  }
  rows.push_back({"hosts", fmt::format("{} of {} devices", t.num_hosts(),
                                       t.devices_per_host())});
  out += table(rows);
  out += "\nfigures:\n";
  std::vector<std::vector<std::string>> figs = {{"figure", "value", "source"}};
  for (const auto& [name, f] : figure_list(t)) {
    // Capacities exactly (a byte count), rates and times as %g.
    figs.push_back({std::string(name),
                    name.ends_with("_bytes_per_device")
                        ? with_commas(static_cast<int64_t>(f->value))
                        : fmt::format("{:g}", f->value),
                    f->source});
  }
  out += table(figs);
  return out;
}

std::string manifest_json(const Manifest& manifest, const Diagnostics& diags) {
  ordered_json j = header("manifest");
  j["source"] = manifest.source;
  j["summary"] = {{"tensors", manifest.size()},
                  {"parameters", manifest.total_elements()},
                  {"bytes", manifest.total_bytes()}};
  ordered_json params = ordered_json::array();
  for (const Tensor& t : manifest.tensors()) {
    ordered_json e;
    e["name"] = t.name;
    e["shape"] = t.shape;
    e["dtype"] = std::string(to_string(t.dtype));
    if (t.logical_axes) {
      ordered_json axes = ordered_json::array();
      for (const auto& a : *t.logical_axes) {
        axes.push_back(a ? ordered_json(*a) : ordered_json(nullptr));
      }
      e["logical_axes"] = std::move(axes);
    }
    params.push_back(std::move(e));
  }
  j["params"] = std::move(params);
  j["diagnostics"] = diagnostics_array(diags);
  return dump(j);
}

std::string manifest_text(const Manifest& manifest) {
  std::string out = fmt::format(
      "manifest {}: {} tensors, {} parameters, {} bytes ({})\n\n", manifest.source,
      with_commas(static_cast<int64_t>(manifest.size())),
      with_commas(manifest.total_elements()), with_commas(manifest.total_bytes()),
      human_bytes(manifest.total_bytes()));

  struct Totals {
    int64_t tensors = 0;
    int64_t elements = 0;
    int64_t bytes = 0;
  };
  std::map<std::string, Totals> by_dtype;
  for (const Tensor& t : manifest.tensors()) {
    Totals& s = by_dtype[std::string(to_string(t.dtype))];
    ++s.tensors;
    s.elements += t.num_elements;  // sums bounded by the manifest totals
    s.bytes += t.num_bytes;
  }
  std::vector<std::vector<std::string>> rows = {{"dtype", "tensors", "parameters", "bytes", ""}};
  for (const auto& [dtype, s] : by_dtype) {
    rows.push_back({dtype, with_commas(s.tensors), with_commas(s.elements),
                    with_commas(s.bytes), human_bytes(s.bytes)});
  }
  out += table(rows);

  std::vector<size_t> order(manifest.size());
  std::iota(order.begin(), order.end(), size_t{0});
  size_t top = std::min<size_t>(10, order.size());
  const auto& tensors = manifest.tensors();
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top),
                    order.end(), [&](size_t a, size_t b) {
                      if (tensors[a].num_bytes != tensors[b].num_bytes) {
                        return tensors[a].num_bytes > tensors[b].num_bytes;
                      }
                      return a < b;
                    });
  out += fmt::format("\nlargest tensors:\n");
  std::vector<std::vector<std::string>> big = {{"tensor", "shape", "dtype", "bytes", ""}};
  for (size_t i = 0; i < top; ++i) {
    const Tensor& t = tensors[order[i]];
    big.push_back({std::string(t.name), shape_text(t.shape), std::string(to_string(t.dtype)),
                   with_commas(t.num_bytes), human_bytes(t.num_bytes)});
  }
  out += table(big);
  return out;
}

}  // namespace shardplan
