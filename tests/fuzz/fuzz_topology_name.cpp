// Any text as --topology NAME (a catalogue name, "2xv5p-512", an explicit
// shape "v5p:4x4x8"): a topology or a located error, never a crash. A small
// topology resolved also takes a mesh over all its devices (JAX's layout,
// host blocks, links), as `mesh --topology NAME --mesh fsdp:-1` does.
#include "fuzz_check.hpp"

#include <shardplan/mesh.hpp>
#include <shardplan/topology.hpp>

#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shardplan::Diagnostics diags;
  auto topology = shardplan::resolve_topology(
      text, shardplan::Location::of("--topology"), diags);
  fuzz::check_outcome(topology.has_value(), diags, "--topology");
  if (!topology) {
    return 0;
  }
  const int64_t devices = topology->devices();
  if (devices < 1 || devices > shardplan::k_max_devices) {
    fuzz::fail("a topology with no devices or more than k_max_devices");
  }
  // Laying out 4M devices takes seconds: the layout is fuzzed on small ones.
  if (devices > 4096) {
    return 0;
  }
  shardplan::MeshInput input;
  input.mesh = "fsdp:-1";
  input.topology = &*topology;
  input.sources.mesh = "--mesh";
  input.sources.dcn = "--dcn";
  input.sources.topology = "--topology";
  input.sources.allow_split = "--allow-split-physical-axes";
  shardplan::Diagnostics place_diags;
  auto placed = shardplan::place_mesh(input, place_diags);
  fuzz::check_outcome(
      placed.has_value(),
      place_diags,
      {"--mesh", "--dcn", "--topology", "--allow-split-physical-axes"});
  return 0;
}
