#include "report/internal.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <iterator>
#include <map>
#include <numeric>
#include <span>
#include <unordered_map>

namespace shardplan {

using nlohmann::ordered_json;

std::string_view shardplan_version() {
  return SHARDPLAN_VERSION;
}

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

bool is_scalar(const ordered_json& j) {
  return !j.is_array() && !j.is_object();
}

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
      out +=
          std::string(indent + 2, ' ') + dump_scalar(ordered_json(key)) + ": ";
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
                    const std::vector<int64_t>& ids,
                    size_t axis,
                    size_t& next) {
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
  constexpr std::array<const char*, 6> k_units = {
      "B", "KiB", "MiB", "GiB", "TiB", "PiB"};
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
          && rows[r][c].find_first_not_of("0123456789,.")
                 != std::string::npos) {
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
std::vector<std::pair<std::string_view, const Figure*>> figure_list(
    const Topology& t) {
  std::vector<std::pair<std::string_view, const Figure*>> out;
  for (const FigureField& field : figure_fields()) {
    const Figure* figure = &(t.figures.*field.member);
    if ((!field.kind || field.kind == t.kind) && !figure->source.empty()) {
      out.emplace_back(field.name, figure);
    }
  }
  return out;
}

// A figure as JSON: an integer when it is a whole number (byte counts, link
// counts), else a float.
ordered_json number_json(double value) {
  if (std::fabs(value) < 9007199254740992.0 && std::trunc(value) == value) {
    return static_cast<int64_t>(value);
  }
  return value;
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
  j["hbm_bytes_per_device"] =
      static_cast<int64_t>(t.figures.hbm_bytes_per_device.value);
  const TopologyFigures& f = t.figures;
  ordered_json links;
  if (t.kind == TopologyKind::tpu) {
    links["ici"] = {{"bytes_per_s_per_link", f.ici_bytes_per_s_per_link.value},
                    {"links_per_chip", number_json(f.ici_links_per_chip.value)},
                    {"latency_s", f.ici_latency_s.value}};
    if (!f.dcn_bytes_per_s_per_chip.source.empty()) {
      links["dcn"] = {
          {"bytes_per_s_per_chip", f.dcn_bytes_per_s_per_chip.value},
          {"latency_s", f.dcn_latency_s.value}};
    }
  } else {
    links["nvlink"] = {
        {"bytes_per_s_per_gpu", f.nvlink_bytes_per_s_per_gpu.value},
        {"latency_s", f.nvlink_latency_s.value}};
    links["network"] = {
        {"bytes_per_s_per_gpu", f.network_bytes_per_s_per_gpu.value},
        {"latency_s", f.network_latency_s.value}};
  }
  j["links"] = std::move(links);
  ordered_json figures;
  for (const auto& [name, figure] : figure_list(t)) {
    figures[std::string(name)] = {{"value", number_json(figure->value)},
                                  {"source", figure->source}};
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
  std::string shape = is_2d(t.tpu.chip)
                          ? fmt::format("{}x{}", c[0], c[1])
                          : fmt::format("{}x{}x{}", c[0], c[1], c[2]);
  return t.num_slices() > 1 ? fmt::format("{} x {}", t.num_slices(), shape)
                            : shape;
}

std::string links_text(const Topology& t) {
  const TopologyFigures& f = t.figures;
  if (t.kind == TopologyKind::gpu) {
    return fmt::format("nvlink {}, network {}",
                       rate_text(f.nvlink_bytes_per_s_per_gpu.value),
                       rate_text(f.network_bytes_per_s_per_gpu.value));
  }
  std::string out = fmt::format("ici {} x {}",
                                rate_text(f.ici_bytes_per_s_per_link.value),
                                f.ici_links_per_chip.value);
  if (!f.dcn_bytes_per_s_per_chip.source.empty()) {
    out += fmt::format(", dcn {}", rate_text(f.dcn_bytes_per_s_per_chip.value));
  }
  return out;
}

std::string topology_summary(const Topology& t) {
  return fmt::format("{}: {} {} devices ({}), {} of HBM each",
                     t.name,
                     t.devices(),
                     t.device_kind,
                     topology_shape_text(t),
                     capacity_text(t.figures.hbm_bytes_per_device.value));
}

}  // namespace

std::string diagnostics_json(std::string_view command,
                             const Diagnostics& diags) {
  ordered_json j = header(command);
  j["diagnostics"] = diagnostics_array(diags);
  return dump(j);
}

std::string mesh_json(const Mesh& mesh,
                      const MeshLayout& layout,
                      const Topology* topology,
                      const Diagnostics& diags) {
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
    hosts["local_mesh_shape"] = h.local_mesh_shape.empty()
                                    ? ordered_json(nullptr)
                                    : ordered_json(h.local_mesh_shape);
    hosts["device_ids"] = h.device_ids;
    j["hosts"] = std::move(hosts);
  }
  j["diagnostics"] = diagnostics_array(diags);
  return dump(j);
}

std::string mesh_text(const Mesh& mesh,
                      const MeshLayout& layout,
                      const Topology* topology) {
  const DeviceGrid& grid = layout.grid;
  std::string out;
  int64_t slices = mesh.num_slices();
  out += fmt::format("mesh {} on {} devices{}\n",
                     to_string(mesh),
                     mesh.num_devices(),
                     slices > 1 ? fmt::format(
                         " in {} slices (--dcn {})", slices, dcn_string(mesh))
                                : std::string());
  if (topology != nullptr) {
    out += fmt::format("topology {}\n", topology_summary(*topology));
  }
  out += "\n";
  std::vector<std::vector<std::string>> rows = {
      {"axis", "size", "ici", "dcn", "type"}};
  for (const MeshAxis& a : mesh.axes) {
    rows.push_back({a.name,
                    std::to_string(a.size),
                    std::to_string(a.ici),
                    std::to_string(a.dcn),
                    std::string(to_string(a.type))});
  }
  out += table(rows);

  if (topology != nullptr) {
    out +=
        "\nlinks per axis (bandwidth: what one device sends per second along "
        "it):\n";
    std::vector<std::vector<std::string>> links = {
        {"axis", "size", "link", "ring", "physical", "bandwidth", "latency"}};
    for (const AxisLink& l : layout.links) {
      links.push_back(
          {l.axis,
           std::to_string(l.ring_size),
           std::string(to_string(l.link)),
           l.link == LinkClass::none ? "-" : (l.wraparound ? "yes" : "no"),
           l.physical_axes.empty()
               ? "-"
               : fmt::format("{}", fmt::join(l.physical_axes, "+")),
           l.link == LinkClass::none ? "-" : rate_text(l.bytes_per_s),
           l.link == LinkClass::none ? "-" : seconds_text(l.latency_s)});
    }
    out += table(links);
    if (!layout.physical_assignment.empty()) {
      out +=
          "\nphysical assignment (physical axis: part given to each mesh "
          "axis):\n";
      for (size_t p = 0; p < layout.physical_assignment.size(); ++p) {
        out += fmt::format("  {:<4} {}\n",
                           layout.physical_axis_names[p],
                           shape_text(layout.physical_assignment[p]));
      }
    }
    const HostLayout& h = layout.hosts;
    out += fmt::format(
        "\nhosts: {} of {} devices; each host's local mesh: {}\n",
        h.count,
        h.devices_per_host,
        h.local_mesh_shape.empty() ? "none (see the diagnostics)"
                                   : shape_text(h.local_mesh_shape));
  }

  // The device grid: the last axis across, the one before it down, and one
  // block per index of the leading axes.
  constexpr int64_t k_max_drawn = 512;
  if (mesh.num_devices() > k_max_drawn) {
    out += fmt::format(
        "\ndevice ids: {} devices, too many to draw; see --format json\n",
        mesh.num_devices());
    return out;
  }
  const size_t rank = grid.shape.size();
  int64_t cols = rank >= 1 ? grid.shape[rank - 1] : 1;
  int64_t rows_per_block = rank >= 2 ? grid.shape[rank - 2] : 1;
  int64_t blocks =
      static_cast<int64_t>(grid.ids.size()) / (cols * rows_per_block);
  size_t id_width = std::to_string(mesh.num_devices() - 1).size();
  std::vector<std::string> names = mesh.axis_names();
  out += fmt::format("\ndevice ids ({}):\n", fmt::join(names, " x "));
  for (int64_t b = 0; b < blocks; ++b) {
    if (rank > 2) {
      // The block's coordinates on the leading axes.
      std::string label;
      int64_t rest = b;
      for (size_t k = rank - 2; k-- > 0;) {
        label = fmt::format("{}={}{}",
                            names[k],
                            rest % grid.shape[k],
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
  std::vector<std::vector<std::string>> rows = {{"name",
                                                 "kind",
                                                 "devices",
                                                 "shape",
                                                 "hbm/device",
                                                 "link bandwidth (one way)"}};
  for (const Topology& t : topologies) {
    rows.push_back({t.name,
                    std::string(to_string(t.kind)),
                    std::to_string(t.devices()),
                    topology_shape_text(t),
                    capacity_text(t.figures.hbm_bytes_per_device.value),
                    links_text(t)});
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
    rows.push_back(
        {"wraparound (x, y, z)",
         fmt::format(
             "{}, {}, {}", t.wraparound[0], t.wraparound[1], t.wraparound[2])});
    rows.push_back({"host bounds (chips)",
                    fmt::format("{}x{}x{}",
                                t.tpu.host_bounds[0],
                                t.tpu.host_bounds[1],
                                t.tpu.host_bounds[2])});
  } else {
    rows.push_back({"GPUs per host", std::to_string(t.gpus_per_host)});
    rows.push_back({"NVLink domain", std::to_string(t.nvlink_domain)});
  }
  rows.push_back(
      {"hosts",
       fmt::format("{} of {} devices", t.num_hosts(), t.devices_per_host())});
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
  std::string out =
      fmt::format("manifest {}: {} tensors, {} parameters, {} bytes ({})\n\n",
                  manifest.source,
                  with_commas(static_cast<int64_t>(manifest.size())),
                  with_commas(manifest.total_elements()),
                  with_commas(manifest.total_bytes()),
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
  std::vector<std::vector<std::string>> rows = {
      {"dtype", "tensors", "parameters", "bytes", ""}};
  for (const auto& [dtype, s] : by_dtype) {
    rows.push_back({dtype,
                    with_commas(s.tensors),
                    with_commas(s.elements),
                    with_commas(s.bytes),
                    human_bytes(s.bytes)});
  }
  out += table(rows);

  std::vector<size_t> order(manifest.size());
  std::iota(order.begin(), order.end(), size_t{0});
  size_t top = std::min<size_t>(10, order.size());
  const auto& tensors = manifest.tensors();
  std::partial_sort(order.begin(),
                    order.begin() + static_cast<std::ptrdiff_t>(top),
                    order.end(),
                    [&](size_t a, size_t b) {
                      if (tensors[a].num_bytes != tensors[b].num_bytes) {
                        return tensors[a].num_bytes > tensors[b].num_bytes;
                      }
                      return a < b;
                    });
  out += fmt::format("\nlargest tensors:\n");
  std::vector<std::vector<std::string>> big = {
      {"tensor", "shape", "dtype", "bytes", ""}};
  for (size_t i = 0; i < top; ++i) {
    const Tensor& t = tensors[order[i]];
    big.push_back({std::string(t.name),
                   shape_text(t.shape),
                   std::string(to_string(t.dtype)),
                   with_commas(t.num_bytes),
                   human_bytes(t.num_bytes)});
  }
  out += table(big);
  return out;
}

// ---------------------------------------------------------------------------
// check and memory

namespace {

// A spec as JSON (DESIGN.md 2.4): null, "axis" or ["a", "b"] per dim.
ordered_json spec_json(const PartitionSpec& spec) {
  ordered_json arr = ordered_json::array();
  for (const DimSharding& dim : spec.dims) {
    if (dim.axes.empty()) {
      arr.push_back(nullptr);
    } else if (dim.axes.size() == 1) {
      arr.push_back(dim.axes[0]);
    } else {
      arr.push_back(dim.axes);
    }
  }
  return arr;
}

ordered_json optional_json(const std::optional<int64_t>& v) {
  return v ? ordered_json(*v) : ordered_json(nullptr);
}

ordered_json memory_object(const CheckReport& r) {
  const MemoryEstimate& m = r.memory;
  ordered_json j;
  j["recipe"] = std::string(to_string(m.recipe));
  j["zero"] = m.zero;
  j["data_axes"] = m.data_axes;
  j["per_device"] = {{"params", m.per_device.params},
                     {"grads", m.per_device.grads},
                     {"optimizer", m.per_device.optimizer},
                     {"gather_buffer", m.gather_buffer},
                     {"total", m.max_device_total}};
  j["gather_tensor"] = m.gather_buffer > 0 ? ordered_json(std::string(
                           r.manifest.tensors()[m.gather_tensor].name))
                                           : ordered_json(nullptr);
  j["max_device_total"] = m.max_device_total;
  j["min_device_total"] = m.min_device_total;
  j["hbm_bytes"] = optional_json(m.hbm_bytes);
  j["headroom"] = m.headroom;
  j["capacity_bytes"] = optional_json(m.capacity_bytes);
  j["utilization"] =
      m.utilization ? ordered_json(*m.utilization) : ordered_json(nullptr);
  j["fits"] = m.fits ? ordered_json(*m.fits) : ordered_json(nullptr);
  if (r.command == "memory") {
    ordered_json dtypes = ordered_json::array();
    for (const DtypeMemory& d : m.by_dtype) {
      dtypes.push_back({{"dtype", std::string(to_string(d.dtype))},
                        {"tensors", d.tensors},
                        {"params", d.params_per_device}});
    }
    j["by_dtype"] = std::move(dtypes);
    ordered_json largest = ordered_json::array();
    for (const TensorMemory& t : m.largest) {
      const Tensor& tensor = r.manifest.tensors()[t.tensor];
      const TensorSharding& s = r.shardings[t.tensor];
      largest.push_back(
          {{"name", std::string(tensor.name)},
           {"shape", tensor.shape},
           {"dtype", std::string(to_string(tensor.dtype))},
           {"spec", s.spec() ? spec_json(*s.spec()) : ordered_json(nullptr)},
           {"params", t.per_device.params},
           {"grads", t.per_device.grads},
           {"optimizer", t.per_device.optimizer},
           {"total", t.per_device.model_states()}});
    }
    j["largest"] = std::move(largest);
  }
  return j;
}

std::string verdict(const Diagnostics& diags) {
  if (diags.error_count() == 0) {
    return diags.warning_count() == 0
               ? "ok"
               : fmt::format("ok, {} warning{}",
                             diags.warning_count(),
                             diags.warning_count() == 1 ? "" : "s");
  }
  return fmt::format("{} error{}, {} warning{}",
                     diags.error_count(),
                     diags.error_count() == 1 ? "" : "s",
                     diags.warning_count(),
                     diags.warning_count() == 1 ? "" : "s");
}

// "mesh fsdp:16,tp:4 (64 devices) on v5p-128".
std::string mesh_line(const Mesh& mesh, const Topology* topology) {
  std::string out =
      fmt::format("mesh {} ({} devices)", to_string(mesh), mesh.num_devices());
  if (topology != nullptr) {
    out += fmt::format(" on {}", topology->name);
  }
  return out;
}

std::string where_text(const CheckReport& r) {
  return mesh_line(r.mesh, r.topology);
}

std::string recipe_text(const MemoryEstimate& m) {
  std::string out = fmt::format("recipe {}", to_string(m.recipe));
  if (m.zero > 0) {
    out += fmt::format(" with ZeRO-{} over {} ({} devices)",
                       m.zero,
                       m.data_axes.empty()
                           ? std::string("no data axes")
                           : fmt::format("{}", fmt::join(m.data_axes, ",")),
                       m.zero_shards);
  }
  return out;
}

std::string capacity_line(const MemoryEstimate& m) {
  if (!m.hbm_bytes) {
    return fmt::format(
        "total {} per device (HBM unknown: give --topology or --hbm)",
        human_bytes(m.max_device_total));
  }
  return fmt::format(
      "total {} per device of {} usable ({} HBM, {:g}% kept free): {:.1f}% of "
      "HBM, {}",
      human_bytes(m.max_device_total),
      human_bytes(*m.capacity_bytes),
      human_bytes(*m.hbm_bytes),
      m.headroom * 100,
      *m.utilization * 100,
      *m.fits ? "fits" : "DOES NOT FIT");
}

struct Category {
  const char* name;
  int64_t bytes;
};

std::vector<Category> categories(const MemoryEstimate& m) {
  return {{"params", m.per_device.params},
          {"grads", m.per_device.grads},
          {"optimizer", m.per_device.optimizer},
          {"gather buffer", m.gather_buffer}};
}

// GitHub workflow command escaping (actions/toolkit, command.ts).
std::string github_data(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '%':
        out += "%25";
        break;
      case '\r':
        out += "%0D";
        break;
      case '\n':
        out += "%0A";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string github_property(std::string_view s) {
  std::string out;
  for (char c : github_data(s)) {
    switch (c) {
      case ':':
        out += "%3A";
        break;
      case ',':
        out += "%2C";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A Markdown table cell: pipes escaped, newlines as spaces.
std::string md_cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string message_with_hint(const Diagnostic& d) {
  return d.hint.empty() ? d.message : d.message + "; " + d.hint;
}

// A value dump() writes as a marker, to be replaced by text written
// directly: for arrays too large to build as ordered_json.
constexpr const char* k_raw_marker = "\x01raw\x01";

// A JSON string: quotes, backslashes and control characters escaped. Text
// with bytes above 0x7F goes through nlohmann (UTF-8 checked, invalid
// sequences replaced), as dump() does.
void append_json_string(std::string& out, std::string_view s) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x80 && c != '"' && c != '\\';
  });
  if (plain) {
    out += '"';
    out += s;
    out += '"';
  } else {
    out += dump_scalar(ordered_json(std::string(s)));
  }
}

void append_int(std::string& out, int64_t value) {
  const fmt::format_int text(value);
  out.append(text.data(), text.size());
}

// dump_to(spec_json(spec), indent, out), written directly: this runs once
// per tensor.
void append_spec_json(std::string& out,
                      const PartitionSpec& spec,
                      size_t indent) {
  if (spec.dims.empty()) {
    out += "[]";
    return;
  }
  const bool flat = std::none_of(
      spec.dims.begin(), spec.dims.end(), [](const DimSharding& d) {
        return d.axes.size() > 1;
      });
  auto append_dim = [&](const DimSharding& dim) {
    if (dim.axes.empty()) {
      out += "null";
    } else if (dim.axes.size() == 1) {
      append_json_string(out, dim.axes[0]);
    } else {
      out += '[';
      for (size_t a = 0; a < dim.axes.size(); ++a) {
        out += a == 0 ? "" : ", ";
        append_json_string(out, dim.axes[a]);
      }
      out += ']';
    }
  };
  if (flat || indent == report_detail::k_one_line) {
    out += '[';
    for (size_t d = 0; d < spec.dims.size(); ++d) {
      out += d == 0 ? "" : ", ";
      append_dim(spec.dims[d]);
    }
    out += ']';
    return;
  }
  out += "[\n";
  for (size_t d = 0; d < spec.dims.size(); ++d) {
    out.append(indent + 2, ' ');
    append_dim(spec.dims[d]);
    out += d + 1 < spec.dims.size() ? ",\n" : "\n";
  }
  out.append(indent, ' ');
  out += ']';
}

// What an entry of check_json's tensors[] holds after the name follows from
// the tensor's layout (its spec, shape and dtype, and all that follows from
// them: tensors share a layout only when those are equal) and the rule that
// decided it.
struct TailKey {
  const ShardLayout* layout;
  uint32_t decision;  // a plan's; 0 for check

  bool operator==(const TailKey&) const = default;
};

struct TailKeyHash {
  size_t operator()(const TailKey& k) const noexcept {
    return std::hash<const void*>{}(k.layout)
           ^ (size_t{k.decision} * 0x9E3779B97F4A7C15ULL);
  }
};

// Appends check_json's tensors[] at `indent` to `out`, one line per tensor
// (`grep` finds a tensor's whole entry; a diff of two plans shows one line
// per changed tensor), calling flush() after each tensor (it may empty
// `out`).
template <typename Flush>
void append_tensors_json(const CheckReport& r,
                         size_t indent,
                         std::string& out,
                         const Flush& flush) {
  if (r.shardings.empty()) {
    out += "[]";
    return;
  }
  const std::string in1(indent + 2, ' ');
  out += "[\n";
  // A plan's rule descriptions are shared: each is written once.
  std::vector<std::string> rules;
  if (r.plan != nullptr) {
    rules.reserve(r.plan->decisions.size());
    for (const RuleDecision& d : r.plan->decisions) {
      std::string text = "{\"index\": ";
      std::optional<size_t> index = d.rule.rule_index();
      text += index ? std::to_string(*index) : std::string("null");
      text += ", \"description\": ";
      append_json_string(text, d.rule.description);
      text += '}';
      rules.push_back(std::move(text));
    }
  }
  // Everything of an entry after its name, from the tensor's shape, dtype and
  // sharding and the deciding rule.
  auto append_tail = [&](size_t i,
                         const TensorSharding& s,
                         const Tensor& t,
                         std::string& text) {
    text += ", \"shape\": [";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      text += d == 0 ? "" : ", ";
      append_int(text, t.shape[d]);
    }
    text += "], \"dtype\": \"";
    text += to_string(t.dtype);
    text += "\", \"spec\": ";
    if (s.spec() != nullptr) {
      append_spec_json(text, *s.spec(), report_detail::k_one_line);
    } else {
      text += "null";
    }
    text += ", \"rule\": ";
    text +=
        r.plan != nullptr ? rules[r.plan->decision_of[i]] : std::string("null");
    text += ", \"valid\": ";
    text += s.valid() ? "true" : "false";
    text += ", \"bytes\": ";
    append_int(text, t.num_bytes);
    text += ", \"bytes_per_device\": ";
    append_int(text, s.bytes_per_device());
    text += ", \"replicas\": ";
    append_int(text, s.replicas());
    text += '}';
  };
  // Tensors of a shared layout and rule (a plan's experts, its layers) have
  // the same tail: each is written once, for the first few thousand met.
  constexpr size_t k_max_tails = 4096;
  std::unordered_map<TailKey, std::string, TailKeyHash> tails;
  for (size_t i = 0; i < r.shardings.size(); ++i) {
    const TensorSharding& s = r.shardings[i];
    const Tensor& t = r.manifest.tensors()[i];
    out += in1;
    out += "{\"name\": ";
    append_json_string(out, t.name);
    // A tail is shared only by tensors that share a layout: one that no
    // other tensor holds (check's specs) is written directly.
    if (s.layout.use_count() == 1) {
      append_tail(i, s, t, out);
    } else {
      const TailKey key{s.layout.get(),
                        r.plan != nullptr ? r.plan->decision_of[i] : 0};
      if (auto hit = tails.find(key); hit != tails.end()) {
        out += hit->second;
      } else if (tails.size() < k_max_tails) {
        std::string tail;
        append_tail(i, s, t, tail);
        out += tail;
        tails.emplace(key, std::move(tail));
      } else {
        append_tail(i, s, t, out);
      }
    }
    out += i + 1 < r.shardings.size() ? ",\n" : "\n";
    flush();
  }
  out.append(indent, ' ');
  out += ']';
}

}  // namespace

namespace {

// The end of check's and plan's text: specs, memory per device, capacity and
// the verdict.
std::string summary_text(const CheckReport& r, const Diagnostics& diags) {
  const ShardingTotals s = sharding_totals(r.manifest, r.mesh, r.shardings);
  const MemoryEstimate& m = r.memory;
  std::string out;
  out += fmt::format(
      "  specs: {} valid, {} with problems; {} of {} replicated on "
      "every device\n",
      with_commas(static_cast<int64_t>(r.manifest.size()) - s.invalid),
      with_commas(s.invalid),
      human_bytes(s.replicated_bytes),
      human_bytes(r.manifest.total_bytes()));
  out += fmt::format(
      "  memory per device, {}: params {}, grads {}, optimizer {}, gather "
      "buffer {}\n",
      recipe_text(m),
      human_bytes(m.per_device.params),
      human_bytes(m.per_device.grads),
      human_bytes(m.per_device.optimizer),
      human_bytes(m.gather_buffer));
  out += fmt::format("  {}\n", capacity_line(m));
  out += fmt::format("result: {}\n", verdict(diags));
  return out;
}

}  // namespace

namespace {

void write_spliced(const std::string& doc,
                   const WriteText& write,
                   const report_detail::FillPieces& fill) {
  const std::string marker = dump_scalar(ordered_json(k_raw_marker));
  const size_t at = doc.find(marker);
  assert(at != std::string::npos);
  write(std::string_view(doc).substr(0, at));
  constexpr size_t k_piece_bytes = size_t{1} << 20U;
  std::string piece;
  piece.reserve(k_piece_bytes + 8192);
  fill(piece, [&] {
    if (piece.size() >= k_piece_bytes) {
      write(piece);
      piece.clear();
    }
  });
  piece.append(doc, at + marker.size());
  write(piece);
}

}  // namespace

void write_check_json(const CheckReport& r,
                      const Diagnostics& diags,
                      const WriteText& write) {
  ordered_json j = header(r.command);
  j["mesh"] = mesh_object(r.mesh);
  if (r.topology != nullptr) {
    j["topology"] = topology_object(*r.topology);
  }
  j["manifest"] = r.manifest.source;
  if (r.plan != nullptr && r.rules != nullptr) {
    j["rules"] = {{"source", r.rules->source}, {"preset", r.rules->preset}};
  } else {
    j["specs_file"] = std::string(
        r.specs_source);  // not "specs": that key makes a specs file
  }
  // One entry per tensor: written directly (nlohmann's objects cost a few
  // microseconds each, most of a 100k-tensor plan), in dump()'s layout.
  j["tensors"] = k_raw_marker;
  j["diagnostics"] = diagnostics_array(diags);
  j["memory"] = memory_object(r);
  const ShardingTotals s = sharding_totals(r.manifest, r.mesh, r.shardings);
  j["summary"] = {{"tensors", r.manifest.size()},
                  {"errors", diags.error_count()},
                  {"warnings", diags.warning_count()},
                  {"invalid_tensors", s.invalid},
                  {"parameters", r.manifest.total_elements()},
                  {"total_bytes", r.manifest.total_bytes()},
                  {"replicated_bytes", s.replicated_bytes},
                  {"params_bytes_per_device", r.memory.per_device.params}};
  // A 100k-tensor plan is ~40 MB of text: handed over in pieces.
  write_spliced(dump(j),
                write,
                [&](std::string& piece, const std::function<void()>& flush) {
                  append_tensors_json(r, 2, piece, flush);
                });
}

std::string check_text(const CheckReport& r, const Diagnostics& diags) {
  std::string out =
      fmt::format("{}: {} tensors of {} against {}\n",
                  r.command,
                  with_commas(static_cast<int64_t>(r.manifest.size())),
                  r.manifest.source,
                  r.specs_source);
  out += fmt::format("  {}\n", where_text(r));
  out += summary_text(r, diags);
  return out;
}

std::string check_markdown(const CheckReport& r, const Diagnostics& diags) {
  const MemoryEstimate& m = r.memory;
  const bool ok = diags.error_count() == 0;
  std::string out = fmt::format("## shardplan {}: {} {}\n\n",
                                r.command,
                                ok ? ":white_check_mark:" : ":x:",
                                verdict(diags));
  out += fmt::format("{} tensors of `{}` with specs `{}`; {}.\n\n",
                     with_commas(static_cast<int64_t>(r.manifest.size())),
                     r.manifest.source,
                     r.specs_source,
                     where_text(r));
  out += fmt::format("| memory per device, {} | bytes | |\n|---|---:|---:|\n",
                     recipe_text(m));
  for (const Category& c : categories(m)) {
    out += fmt::format("| {} | {} | {} |\n",
                       c.name,
                       with_commas(c.bytes),
                       human_bytes(c.bytes));
  }
  out += fmt::format("| **total** | **{}** | **{}** |\n",
                     with_commas(m.max_device_total),
                     human_bytes(m.max_device_total));
  if (m.hbm_bytes) {
    out += fmt::format("| usable HBM ({:g}% kept free) | {} | {} |\n",
                       m.headroom * 100,
                       with_commas(*m.capacity_bytes),
                       human_bytes(*m.capacity_bytes));
    out += fmt::format("\n{}: {:.1f}% of HBM.\n",
                       *m.fits ? "Fits" : "**Does not fit**",
                       *m.utilization * 100);
  }
  constexpr size_t k_max_rows = 50;
  for (Severity severity : {Severity::error, Severity::warning}) {
    size_t count = severity == Severity::error ? diags.error_count()
                                               : diags.warning_count();
    if (count == 0) {
      continue;
    }
    out += fmt::format(
        "\n### {} ({})\n\n| code | tensor | where | message "
        "|\n|---|---|---|---|\n",
        severity == Severity::error ? "Errors" : "Warnings",
        count);
    size_t shown = 0;
    for (const Diagnostic& d : diags.items()) {
      if (d.severity != severity || shown == k_max_rows) {
        continue;
      }
      ++shown;
      std::string where = d.location.source;
      if (!d.location.pointer.empty()) {
        where += ":" + d.location.pointer;
      }
      out +=
          fmt::format("| `{}` | {} | {} | {} |\n",
                      d.code,
                      d.tensor ? fmt::format("`{}`", md_cell(*d.tensor)) : "",
                      where.empty() ? "" : fmt::format("`{}`", md_cell(where)),
                      md_cell(message_with_hint(d)));
    }
    if (count > shown) {
      out += fmt::format("\n... and {} more.\n", count - shown);
    }
  }
  return out;
}

std::string check_github(const CheckReport& r, const Diagnostics& diags) {
  std::string out;
  for (const Diagnostic& d : diags.items()) {
    const char* kind = d.severity == Severity::error     ? "error"
                       : d.severity == Severity::warning ? "warning"
                                                         : "notice";
    std::vector<std::string> props;
    // Annotations point at files; flags such as --mesh have none.
    if (!d.location.source.empty() && !d.location.source.starts_with("--")) {
      props.push_back("file=" + github_property(d.location.source));
      if (d.location.line > 0) {
        props.push_back(fmt::format("line={}", d.location.line));
        props.push_back(fmt::format("col={}", d.location.column));
      }
    }
    props.push_back("title=" + github_property("shardplan " + d.code));
    std::string message = message_with_hint(d);
    if (d.tensor && message.find(*d.tensor) == std::string::npos) {
      message = fmt::format("tensor {}: {}", quote(*d.tensor), message);
    }
    out += fmt::format(
        "::{} {}::{}\n", kind, fmt::join(props, ","), github_data(message));
  }
  out += fmt::format("shardplan {}: {}; {}\n",
                     r.command,
                     verdict(diags),
                     capacity_line(r.memory));
  return out;
}

std::string memory_text(const CheckReport& r) {
  const MemoryEstimate& m = r.memory;
  std::string out =
      fmt::format("memory per device: {} tensors of {}, {}\n",
                  with_commas(static_cast<int64_t>(r.manifest.size())),
                  r.manifest.source,
                  where_text(r));
  out += fmt::format("{}\n\n", recipe_text(m));
  // Bars against HBM when known, else against the total.
  const int64_t scale =
      m.hbm_bytes ? *m.hbm_bytes : std::max<int64_t>(m.max_device_total, 1);
  constexpr int k_bar = 40;
  auto bar = [&](int64_t bytes) {
    const double f = std::clamp(
        static_cast<double>(bytes) / static_cast<double>(scale), 0.0, 1.0);
    const int filled = static_cast<int>(std::lround(f * k_bar));
    return fmt::format("[{}{}] {:5.1f}%",
                       std::string(static_cast<size_t>(filled), '#'),
                       std::string(static_cast<size_t>(k_bar - filled), '.'),
                       f * 100);
  };
  std::vector<std::vector<std::string>> rows = {
      {"category",
       "bytes",
       "",
       m.hbm_bytes ? "share of HBM" : "share of total"}};
  for (const Category& c : categories(m)) {
    rows.push_back(
        {c.name, with_commas(c.bytes), human_bytes(c.bytes), bar(c.bytes)});
  }
  rows.push_back({"total",
                  with_commas(m.max_device_total),
                  human_bytes(m.max_device_total),
                  bar(m.max_device_total)});
  if (m.capacity_bytes) {
    rows.push_back({"usable",
                    with_commas(*m.capacity_bytes),
                    human_bytes(*m.capacity_bytes),
                    bar(*m.capacity_bytes)});
  }
  out += table(rows);
  out += fmt::format("{}\n", capacity_line(m));
  if (m.min_device_total != m.max_device_total) {
    out += fmt::format(
        "the least loaded device holds {} ({} tensors have uneven shards)\n",
        human_bytes(m.min_device_total),
        m.uneven_tensors);
  }
  if (m.gather_buffer > 0) {
    out += fmt::format("gather buffer: {} gathered at use\n",
                       r.manifest.tensors()[m.gather_tensor].name);
  }

  out += "\nparams per device by dtype:\n";
  std::vector<std::vector<std::string>> dtypes = {
      {"dtype", "tensors", "bytes", ""}};
  for (const DtypeMemory& d : m.by_dtype) {
    dtypes.push_back({std::string(to_string(d.dtype)),
                      with_commas(d.tensors),
                      with_commas(d.params_per_device),
                      human_bytes(d.params_per_device)});
  }
  out += table(dtypes);

  out += fmt::format("\nlargest tensors per device ({}):\n", m.largest.size());
  std::vector<std::vector<std::string>> big = {
      {"tensor", "shape", "dtype", "spec", "params", "with state"}};
  for (const TensorMemory& t : m.largest) {
    const Tensor& tensor = r.manifest.tensors()[t.tensor];
    const TensorSharding& s = r.shardings[t.tensor];
    big.push_back({std::string(tensor.name),
                   shape_text(tensor.shape),
                   std::string(to_string(tensor.dtype)),
                   s.spec() ? to_short(*s.spec()) : "-",
                   human_bytes(t.per_device.params),
                   human_bytes(t.per_device.model_states())});
  }
  out += table(big);
  return out;
}

std::string models_list_json(const std::vector<BuiltinModel>& models) {
  ordered_json j = header("manifest");
  ordered_json list = ordered_json::array();
  for (const BuiltinModel& m : models) {
    list.push_back({{"name", m.name},
                    {"architecture", m.architecture},
                    {"parameters", m.parameters},
                    {"tensors", m.tensors}});
  }
  j["models"] = std::move(list);
  j["diagnostics"] = ordered_json::array();
  return dump(j);
}

std::string models_list_text(const std::vector<BuiltinModel>& models) {
  std::vector<std::vector<std::string>> rows = {
      {"model", "architecture", "parameters", "tensors"}};
  for (const BuiltinModel& m : models) {
    rows.push_back({m.name,
                    m.architecture,
                    with_commas(m.parameters),
                    with_commas(m.tensors)});
  }
  return table(rows);
}

}  // namespace shardplan

namespace shardplan {

std::string plan_text(const CheckReport& r, const Diagnostics& diags) {
  std::string out =
      fmt::format("plan: {} tensors of {} with rules {}\n",
                  with_commas(static_cast<int64_t>(r.manifest.size())),
                  r.manifest.source,
                  r.rules != nullptr ? r.rules->source : "");
  out += fmt::format("  {}\n", where_text(r));

  // Groups in order of the deciding rule (rules by index, then scalars,
  // min_size and unmatched), each group's rows folded across layers. The
  // group of each decision is found once, not per tensor.
  const std::vector<RuleDecision>& decisions = r.plan->decisions;
  std::map<std::pair<int, size_t>, size_t> group_of_rule;
  for (const RuleDecision& d : decisions) {
    group_of_rule.try_emplace({static_cast<int>(d.rule.decider), d.rule.index},
                              0);
  }
  size_t next = 0;
  for (auto& [rule, group] : group_of_rule) {
    group = next++;
  }
  std::vector<size_t> group_of_decision(decisions.size());
  for (size_t d = 0; d < decisions.size(); ++d) {
    group_of_decision[d] = group_of_rule.at(
        {static_cast<int>(decisions[d].rule.decider), decisions[d].rule.index});
  }
  std::vector<std::vector<size_t>> groups(group_of_rule.size());
  for (size_t t = 0; t < r.shardings.size(); ++t) {
    groups[group_of_decision[r.plan->decision_of[t]]].push_back(t);
  }
  constexpr char k_sep = '\x1f';
  // The shape, dtype, spec and bytes columns of each layout (its strings
  // stay where they are while rows view them).
  std::unordered_map<const ShardLayout*, std::string> rests;
  for (const std::vector<size_t>& members : groups) {
    if (members.empty()) {
      continue;
    }
    const RuleRef& rule = r.plan->rule(members.front());
    out += fmt::format("\n{}: {} tensor{}\n",
                       rule.description,
                       with_commas(static_cast<int64_t>(members.size())),
                       members.size() == 1 ? "" : "s");
    std::vector<NameRowRef> rows;
    rows.reserve(members.size());
    for (size_t t : members) {
      const Tensor& tensor = r.manifest.tensors()[t];
      const TensorSharding& sh = r.shardings[t];
      // Tensors that share a layout share shape, dtype and spec: their
      // columns are formatted once.
      auto [cached, inserted] = rests.try_emplace(sh.layout.get());
      if (inserted) {
        const PartitionSpec* spec = sh.spec();
        cached->second =
            fmt::format("{}{}{}{}{}{}{}",
                        shape_text(tensor.shape),
                        k_sep,
                        to_string(tensor.dtype),
                        k_sep,
                        spec ? to_short(*spec) : std::string("(invalid)"),
                        k_sep,
                        human_bytes(sh.bytes_per_device()));
      }
      rows.push_back({tensor.name, cached->second});
    }
    std::vector<std::vector<std::string>> cells = {
        {"  tensor", "count", "shape", "dtype", "spec", "per device"}};
    for (const FoldedRow& row : fold_row_refs(rows)) {
      std::vector<std::string> line = {
          "  " + row.name,
          row.count == 1 ? std::string() : fmt::format("x{}", row.count)};
      size_t start = 0;
      for (;;) {
        size_t sep = row.rest.find(k_sep, start);
        line.push_back(row.rest.substr(
            start, sep == std::string::npos ? sep : sep - start));
        if (sep == std::string::npos) {
          break;
        }
        start = sep + 1;
      }
      cells.push_back(std::move(line));
    }
    out += table(cells);
  }

  out += '\n';
  out += summary_text(r, diags);
  return out;
}

namespace {

ordered_json trace_json(const Trace& trace) {
  ordered_json steps = ordered_json::array();
  for (const TraceStep& step : trace) {
    ordered_json e;
    e["text"] = step.text;
    e["dim"] = step.dim ? ordered_json(*step.dim) : ordered_json(nullptr);
    e["axes"] = step.axes;
    e["ok"] = step.ok ? ordered_json(*step.ok) : ordered_json(nullptr);
    e["chosen"] = step.chosen;
    steps.push_back(std::move(e));
  }
  return steps;
}

}  // namespace

std::string explain_json(const RuleTrace& trace,
                         const RuleSet& rules,
                         const Mesh& mesh) {
  ordered_json j = header("plan");
  j["mesh"] = mesh_object(mesh);
  j["rules"] = {{"source", rules.source}, {"preset", rules.preset}};
  ordered_json t;
  t["name"] = trace.tensor;
  t["shape"] = trace.shape;
  t["dtype"] = std::string(to_string(trace.dtype));
  t["elements"] = trace.num_elements;
  t["bytes"] = trace.num_bytes;
  if (trace.logical_axes) {
    ordered_json names = ordered_json::array();
    for (const auto& name : *trace.logical_axes) {
      names.push_back(name ? ordered_json(*name) : ordered_json(nullptr));
    }
    t["logical_axes"] = std::move(names);
  } else {
    t["logical_axes"] = nullptr;
  }
  j["tensor"] = std::move(t);
  j["before"] = trace_json(trace.before);
  ordered_json steps = ordered_json::array();
  for (const RuleStep& step : trace.rules) {
    ordered_json e;
    e["index"] = step.index;
    e["description"] = step.description;
    e["matched"] = step.matched;
    e["outcome"] = std::string(to_string(step.outcome));
    e["reason"] = step.reason;
    e["spec"] = step.spec ? spec_json(*step.spec) : ordered_json(nullptr);
    e["steps"] = trace_json(step.steps);
    steps.push_back(std::move(e));
  }
  j["rules_tried"] = std::move(steps);
  std::optional<size_t> index = trace.result.rule.rule_index();
  j["result"] = {
      {"spec", spec_json(trace.result.spec)},
      {"rule",
       {{"index", index ? ordered_json(*index) : ordered_json(nullptr)},
        {"description", trace.result.rule.description}}}};
  return dump(j);
}

std::string explain_text(const RuleTrace& trace,
                         const RuleSet& rules,
                         const Mesh& mesh) {
  std::string out = fmt::format("{}: {} {}, {} elements, {}\n",
                                trace.tensor,
                                shape_text(trace.shape),
                                to_string(trace.dtype),
                                with_commas(trace.num_elements),
                                human_bytes(trace.num_bytes));
  if (trace.logical_axes) {
    std::vector<std::string> names;
    for (const auto& name : *trace.logical_axes) {
      names.push_back(name.value_or("None"));
    }
    out += fmt::format("  logical axes: {}\n", fmt::join(names, ", "));
  }
  out += fmt::format("  mesh {}; rules {}\n", to_string(mesh), rules.source);
  for (const TraceStep& step : trace.before) {
    out += fmt::format("  {}\n", step.text);
  }
  for (const RuleStep& step : trace.rules) {
    out += fmt::format("\n{}: {}", step.description, to_string(step.outcome));
    if (!step.reason.empty()) {
      out += fmt::format(" ({})", step.reason);
    }
    if (step.spec) {
      out += fmt::format(" -> {}", to_short(*step.spec));
    }
    out += "\n";
    for (const TraceStep& t : step.steps) {
      out += fmt::format(
          "  {} {}\n", t.chosen ? "*" : (t.ok && !*t.ok ? "x" : "-"), t.text);
    }
  }
  out += fmt::format("\nresult: {} ({})\n",
                     to_short(trace.result.spec),
                     trace.result.rule.description);
  return out;
}

std::string presets_list_json(const std::vector<RulePreset>& presets) {
  ordered_json j = header("plan");
  ordered_json list = ordered_json::array();
  for (const RulePreset& p : presets) {
    list.push_back(
        {{"name", p.name}, {"rules", p.rules}, {"description", p.description}});
  }
  j["presets"] = std::move(list);
  return dump(j);
}

std::string presets_list_text(const std::vector<RulePreset>& presets) {
  std::string out;
  for (const RulePreset& p : presets) {
    out += fmt::format("{}  ({} rules)\n", p.name, p.rules);
    // The description, wrapped at 78 columns under a 2-space indent.
    std::string line;
    size_t start = 0;
    while (start < p.description.size()) {
      size_t end = p.description.find(' ', start);
      std::string_view word =
          std::string_view(p.description)
              .substr(
                  start,
                  end == std::string::npos ? std::string::npos : end - start);
      if (!line.empty() && line.size() + 1 + word.size() > 76) {
        out += fmt::format("  {}\n", line);
        line.clear();
      }
      if (!word.empty()) {
        line += line.empty() ? std::string(word) : fmt::format(" {}", word);
      }
      start = end == std::string::npos ? p.description.size() : end + 1;
    }
    if (!line.empty()) {
      out += fmt::format("  {}\n", line);
    }
  }
  return out;
}

}  // namespace shardplan

// ---------------------------------------------------------------------------
// The helpers other report/*.cpp files share (report/internal.hpp).

namespace shardplan::report_detail {

ordered_json header(std::string_view command) {
  return shardplan::header(command);
}
std::string dump(const ordered_json& j) {
  return shardplan::dump(j);
}
std::string dump_scalar(const ordered_json& j) {
  return shardplan::dump_scalar(j);
}
ordered_json diagnostics_array(const Diagnostics& diags) {
  return shardplan::diagnostics_array(diags);
}
ordered_json mesh_object(const Mesh& mesh) {
  return shardplan::mesh_object(mesh);
}
ordered_json topology_object(const Topology& topology) {
  return shardplan::topology_object(topology);
}
ordered_json spec_json(const PartitionSpec& spec) {
  return shardplan::spec_json(spec);
}
void append_json_string(std::string& out, std::string_view s) {
  shardplan::append_json_string(out, s);
}
ordered_json raw_marker() {
  return shardplan::k_raw_marker;
}
void append_spec_json(std::string& out,
                      const PartitionSpec& spec,
                      size_t indent) {
  shardplan::append_spec_json(out, spec, indent);
}
void write_spliced(const std::string& doc,
                   const WriteText& write,
                   const FillPieces& fill) {
  shardplan::write_spliced(doc, write, fill);
}
std::string with_commas(int64_t value) {
  return shardplan::with_commas(value);
}
std::string human_bytes(int64_t bytes) {
  return shardplan::human_bytes(bytes);
}
std::string seconds_text(double seconds) {
  return shardplan::seconds_text(seconds);
}
std::string rate_text(double bytes_per_s) {
  return shardplan::rate_text(bytes_per_s);
}
std::string table(const std::vector<std::vector<std::string>>& rows) {
  return shardplan::table(rows);
}
std::string verdict(const Diagnostics& diags) {
  return shardplan::verdict(diags);
}
std::string mesh_line(const Mesh& mesh, const Topology* topology) {
  return shardplan::mesh_line(mesh, topology);
}

}  // namespace shardplan::report_detail
