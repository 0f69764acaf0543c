// Any bytes as a manifest file and as a specs file: a result or a located
// error, never a crash.
#include <shardplan/io.hpp>

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shardplan::Diagnostics diags;
  auto manifest = shardplan::read_manifest(text, "fuzz.json", diags);
  if (manifest.has_value() == diags.has_errors()) {
    std::abort();
  }
  shardplan::Diagnostics spec_diags;
  auto specs = shardplan::read_specs(text, "fuzz.json", spec_diags);
  if (specs.has_value() == spec_diags.has_errors()) {
    std::abort();
  }
  // As a .safetensors header with a data section of `size % 97` bytes.
  shardplan::Diagnostics header_diags;
  auto header = shardplan::read_safetensors_header(
      text, size % 97, "fuzz.safetensors", header_diags);
  if (header.has_value() == header_diags.has_errors()) {
    std::abort();
  }
  for (const auto& d : diags.items()) {
    if (d.location.source.empty()) {
      std::abort();
    }
  }
  return 0;
}
