#include "report/json.hpp"

#include "report/text.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

// report's JSON writer (report/json.hpp): the header keys, dump()'s layout,
// diagnostics, the mesh and topology objects, specs, and the splicing of
// text written directly into a document.

namespace shardplan::report_detail {

namespace {

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

// A figure as JSON: an integer when it is a whole number (byte counts, link
// counts), else a float.
ordered_json number_json(double value) {
  if (std::fabs(value) < 9007199254740992.0 && std::trunc(value) == value) {
    return static_cast<int64_t>(value);
  }
  return value;
}

// A value dump() writes as a marker, to be replaced by text written
// directly: for arrays too large to build as ordered_json.
constexpr const char* k_raw_marker = "\x01raw\x01";

}  // namespace

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
    e["message"] = message_with_hint(d);
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

ordered_json rules_json(const RuleSet& rules) {
  return {
      {"source", rules.source},
      {"preset", rules.preset},
      {"name",
       rules.name.empty() ? ordered_json(nullptr) : ordered_json(rules.name)}};
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
  if (flat || indent == k_one_line) {
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

ordered_json raw_marker() {
  return k_raw_marker;
}

void write_spliced(const std::string& doc,
                   const WriteText& write,
                   const FillPieces& fill) {
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

}  // namespace shardplan::report_detail

namespace shardplan {

std::string_view shardplan_version() {
  return SHARDPLAN_VERSION;
}

std::string diagnostics_json(std::string_view command,
                             const Diagnostics& diags) {
  report_detail::ordered_json j = report_detail::header(command);
  j["diagnostics"] = report_detail::diagnostics_array(diags);
  return report_detail::dump(j);
}

}  // namespace shardplan
