// Any bytes as a topology file (--topology FILE): a topology or a located
// error, never a crash; a topology has between 1 and k_max_devices devices.
// It renders as text, and as the JSON of `topology show --format json`,
// which is a topology file (docs/topologies.md) that reads back to the same
// topology.
#include "fuzz_check.hpp"

#include <shardplan/io.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/report.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace {

bool same_figures(const shardplan::TopologyFigures& a,
                  const shardplan::TopologyFigures& b) {
  for (const shardplan::FigureField& f : shardplan::figure_fields()) {
    if ((a.*f.member).value != (b.*f.member).value
        || (a.*f.member).source != (b.*f.member).source) {
      return false;
    }
  }
  return true;
}

void check_round_trip(const shardplan::Topology& t) {
  shardplan::Diagnostics none;
  const shardplan::TopologyShowReport report{t};
  (void)shardplan::render(report, shardplan::Format::text, none).str();
  const std::string json =
      shardplan::render(report, shardplan::Format::json, none).str();
  shardplan::Diagnostics diags;
  auto back = shardplan::read_topology_file(json, "back.json", diags);
  if (!back) {
    fuzz::fail("topology show --format json does not read back");
  }
  if (back->name != t.name || back->kind != t.kind || back->chip != t.chip
      || back->tpu.chips != t.tpu.chips
      || back->tpu.cores_per_chip != t.tpu.cores_per_chip
      || back->tpu.host_bounds != t.tpu.host_bounds
      || back->tpu.num_slices != t.tpu.num_slices
      || back->wraparound != t.wraparound || back->gpus != t.gpus
      || back->gpus_per_host != t.gpus_per_host
      || back->nvlink_domain != t.nvlink_domain
      || back->devices() != t.devices()) {
    fuzz::fail("topology show --format json reads back to another topology");
  }
  if (!same_figures(back->figures, t.figures)) {
    fuzz::fail("topology show --format json reads back to other figures");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shardplan::Diagnostics diags;
  auto topology = shardplan::read_topology_file(text, "topology.json", diags);
  fuzz::check_outcome(topology.has_value(), diags, "topology.json");
  if (!topology) {
    return 0;
  }
  if (topology->devices() < 1
      || topology->devices() > shardplan::k_max_devices) {
    fuzz::fail("a topology with no devices or more than k_max_devices");
  }
  check_round_trip(*topology);
  return 0;
}
