// Any text as a partition spec: a spec that prints and parses back to itself,
// or a located error; never a crash.
#include <shardplan/spec.hpp>

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shardplan::Diagnostics diags;
  auto spec = shardplan::parse_spec(text, "fuzz", diags);
  if (spec.has_value() == diags.has_errors()) {
    std::abort();
  }
  if (spec) {
    shardplan::Diagnostics again;
    auto back =
        shardplan::parse_spec(shardplan::to_python(*spec), "fuzz", again);
    if (!back || !(*back == *spec)) {
      std::abort();
    }
  }
  return 0;
}
