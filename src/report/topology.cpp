#include "report/json.hpp"
#include "report/renderers.hpp"
#include "report/text.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

// `shardplan topology list` and `topology show` as JSON and text.

namespace shardplan::report_detail {

namespace {

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

}  // namespace

std::string topology_list_json(const TopologyListReport& report) {
  ordered_json j = header("topology");
  ordered_json arr = ordered_json::array();
  for (const Topology& t : report.topologies) {
    arr.push_back(topology_object(t));
  }
  j["topologies"] = std::move(arr);
  return dump(j);
}

TableDoc topology_list_doc(const TopologyListReport& report) {
  TableDoc doc;
  doc.title = "shardplan topology list";
  std::vector<std::vector<std::string>> rows = {{"name",
                                                 "kind",
                                                 "devices",
                                                 "shape",
                                                 "hbm/device",
                                                 "link bandwidth (one way)"}};
  for (const Topology& t : report.topologies) {
    rows.push_back({t.name,
                    std::string(to_string(t.kind)),
                    std::to_string(t.devices()),
                    topology_shape_text(t),
                    capacity_text(t.figures.hbm_bytes_per_device.value),
                    links_text(t)});
  }
  doc.tables.push_back({"", std::move(rows)});
  doc.note =
      "Any size of these families also works by shape (v5p:4x4x12), and Kx "
      "in front makes K slices (2xv5p-256).";
  return doc;
}

std::string topology_list_text(const TopologyListReport& report) {
  return table_doc_text(topology_list_doc(report));
}

std::string topology_show_json(const TopologyShowReport& report) {
  ordered_json j = header("topology");
  j["topology"] = topology_object(report.topology);
  return dump(j);
}

TableDoc topology_show_doc(const TopologyShowReport& report) {
  const Topology& t = report.topology;
  TableDoc doc;
  doc.title = "shardplan topology " + t.name;
  doc.lines.push_back("topology " + topology_summary(t));
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
  doc.tables.push_back({"", std::move(rows)});
  std::vector<std::vector<std::string>> figs = {{"figure", "value", "source"}};
  for (const auto& [name, f] : figure_list(t)) {
    // Capacities exactly (a byte count), rates and times as %g.
    figs.push_back({std::string(name),
                    name.ends_with("_bytes_per_device")
                        ? with_commas(static_cast<int64_t>(f->value))
                        : fmt::format("{:g}", f->value),
                    f->source});
  }
  doc.tables.push_back({"figures", std::move(figs)});
  return doc;
}

std::string topology_show_text(const TopologyShowReport& report) {
  return table_doc_text(topology_show_doc(report));
}

}  // namespace shardplan::report_detail
