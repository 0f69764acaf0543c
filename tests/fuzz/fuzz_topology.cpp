// Any bytes as a topology file (--topology FILE): a topology or a located
// error, never a crash; a topology has between 1 and k_max_devices devices.
#include "fuzz_check.hpp"

#include <shardplan/io.hpp>
#include <shardplan/mesh.hpp>

#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shardplan::Diagnostics diags;
  auto topology = shardplan::read_topology_file(text, "topology.json", diags);
  fuzz::check_outcome(topology.has_value(), diags, "topology.json");
  if (topology
      && (topology->devices() < 1
          || topology->devices() > shardplan::k_max_devices)) {
    fuzz::fail("a topology with no devices or more than k_max_devices");
  }
  return 0;
}
