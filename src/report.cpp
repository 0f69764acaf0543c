#include <shardplan/report.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <numeric>

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

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace

std::string diagnostics_json(std::string_view command, const Diagnostics& diags) {
  ordered_json j = header(command);
  j["diagnostics"] = diagnostics_array(diags);
  return dump(j);
}

std::string mesh_json(const Mesh& mesh, const DeviceGrid& grid,
                      const Diagnostics& diags) {
  ordered_json j = header("mesh");
  j["mesh"] = mesh_object(mesh);
  size_t next = 0;
  j["device_ids"] = nested(grid.shape, grid.ids, 0, next);
  j["diagnostics"] = diagnostics_array(diags);
  return dump(j);
}

std::string mesh_text(const Mesh& mesh, const DeviceGrid& grid) {
  std::string out;
  int64_t slices = mesh.num_slices();
  out += fmt::format("mesh {} on {} devices{}\n", to_string(mesh), mesh.num_devices(),
                     slices > 1 ? fmt::format(" in {} slices (--dcn {})", slices,
                                              dcn_string(mesh))
                                : std::string());
  out += "\n";
  std::vector<std::vector<std::string>> rows = {{"axis", "size", "ici", "dcn", "type"}};
  for (const MeshAxis& a : mesh.axes) {
    rows.push_back({a.name, std::to_string(a.size), std::to_string(a.ici),
                    std::to_string(a.dcn), std::string(to_string(a.type))});
  }
  out += table(rows);

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
    big.push_back({t.name, shape_text(t.shape), std::string(to_string(t.dtype)),
                   with_commas(t.num_bytes), human_bytes(t.num_bytes)});
  }
  out += table(big);
  return out;
}

}  // namespace shardplan
