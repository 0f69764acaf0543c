// Any text as a partition spec: a spec that prints and parses back to itself,
// or a located error; never a crash.
#include "fuzz_check.hpp"

#include <shardplan/spec.hpp>

#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shardplan::Diagnostics diags;
  auto spec = shardplan::parse_spec(text, "--spec", diags);
  fuzz::check_outcome(spec.has_value(), diags, "--spec");
  if (spec) {
    shardplan::Diagnostics again;
    auto back =
        shardplan::parse_spec(shardplan::to_python(*spec), "--spec", again);
    if (!back || !(*back == *spec)) {
      fuzz::fail("a spec that does not parse back from to_python");
    }
  }
  return 0;
}
