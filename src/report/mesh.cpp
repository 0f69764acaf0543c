#include "report/json.hpp"
#include "report/renderers.hpp"
#include "report/text.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

// `shardplan mesh` as JSON and text.

namespace shardplan::report_detail {

namespace {

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

}  // namespace

std::string mesh_json(const MeshReport& report, const Diagnostics& diags) {
  const Mesh& mesh = report.mesh;
  const MeshLayout& layout = report.layout;
  const Topology* topology = report.topology;
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
    auto shape_or_null = [](const std::vector<int64_t>& shape) {
      return shape.empty() ? ordered_json(nullptr) : ordered_json(shape);
    };
    hosts["local_mesh_shape"] = shape_or_null(h.local_mesh_shape);
    hosts["eformer_host_mesh_shape"] = shape_or_null(h.eformer_host_mesh_shape);
    hosts["scattered_host"] = h.not_contiguous_host
                                  ? ordered_json(*h.not_contiguous_host)
                                  : ordered_json(nullptr);
    hosts["device_ids"] = h.device_ids;
    j["hosts"] = std::move(hosts);
  }
  j["diagnostics"] = diagnostics_array(diags);
  return dump(j);
}

std::string mesh_text(const MeshReport& report) {
  const Mesh& mesh = report.mesh;
  const MeshLayout& layout = report.layout;
  const Topology* topology = report.topology;
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
  out += table(mesh_axis_rows(mesh));

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
    out +=
        fmt::format("\nhosts: {} of {} devices; ", h.count, h.devices_per_host);
    if (h.not_contiguous_host) {
      out += fmt::format(
          "host {}'s devices do not form a block of the grid: no local mesh "
          "(see the warning)\n",
          *h.not_contiguous_host);
    } else {
      out += fmt::format("each host's local mesh: {}\n",
                         shape_text(h.local_mesh_shape));
    }
    if (h.eformer_host_mesh_shape != h.local_mesh_shape) {
      out += fmt::format("eformer's calculate_host_mesh_shape: {}\n",
                         h.eformer_host_mesh_shape.empty()
                             ? std::string("fails (see the diagnostics)")
                             : shape_text(h.eformer_host_mesh_shape));
    }
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
        std::string part = fmt::format("{}={}", names[k], rest % grid.shape[k]);
        if (!label.empty()) {
          part += ", ";
          part += label;
        }
        label = std::move(part);
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

}  // namespace shardplan::report_detail
