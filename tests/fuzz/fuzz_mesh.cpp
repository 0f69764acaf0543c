// Any text as --mesh (and, split at the first newline, as --dcn) on 64
// devices: a mesh or a located error, never a crash; a mesh prints and
// parses back to itself (mesh.hpp: to_string and dcn_string).
#include "fuzz_check.hpp"

#include <shardplan/mesh.hpp>

#include <cstdint>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  size_t newline = text.find('\n');
  shardplan::MeshOptions options;
  options.num_devices = 64;
  options.sources.mesh = "--mesh";
  options.sources.dcn = "--dcn";
  if (newline != std::string_view::npos) {
    options.dcn = std::string(text.substr(newline + 1));
    text = text.substr(0, newline);
  }
  shardplan::Diagnostics diags;
  auto mesh = shardplan::parse_mesh(text, options, diags);
  fuzz::check_outcome(mesh.has_value(), diags, {"--mesh", "--dcn"});
  if (!mesh) {
    return 0;
  }
  if (mesh->num_devices() != 64) {
    fuzz::fail("a mesh of other than --devices 64");
  }
  shardplan::MeshOptions again_options;
  again_options.num_devices = 64;
  again_options.dcn = shardplan::dcn_string(*mesh);
  shardplan::Diagnostics again_diags;
  auto again = shardplan::parse_mesh(
      shardplan::to_string(*mesh), again_options, again_diags);
  if (!again || !(*again == *mesh)) {
    fuzz::fail("a mesh that does not parse back from to_string");
  }
  return 0;
}
