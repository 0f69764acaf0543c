// Any text as --mesh (and, split at the first newline, as --dcn): a mesh or
// exactly one located error, never a crash.
#include <shardplan/mesh.hpp>

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  size_t newline = text.find('\n');
  shardplan::MeshOptions options;
  options.num_devices = 64;
  if (newline != std::string_view::npos) {
    options.dcn = std::string(text.substr(newline + 1));
    text = text.substr(0, newline);
  }
  shardplan::Diagnostics diags;
  auto mesh = shardplan::parse_mesh(text, options, diags);
  if (mesh.has_value() == diags.has_errors()) {
    std::abort();
  }
  if (mesh && mesh->num_devices() != 64) {
    std::abort();
  }
  return 0;
}
