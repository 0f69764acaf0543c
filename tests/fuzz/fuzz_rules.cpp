// Any bytes as a rules file (--rules FILE): a rule set or a located error,
// never a crash. A rule set plans two small manifests of the source tree
// (configs/examples/tiny-llama.json, with logical axes, and
// tests/data/manifests/small.json: FP8, a 0-size and a scalar tensor) on a
// mesh of 64 devices (fuzz_plan.hpp).
#include "fuzz_check.hpp"
#include "fuzz_plan.hpp"

#include <shardplan/io.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

const std::vector<shardplan::Manifest>& manifests() {
  static const std::vector<shardplan::Manifest> read = [] {
    std::vector<shardplan::Manifest> out;
    for (const char* path : {"/configs/examples/tiny-llama.json",
                             "/tests/data/manifests/small.json"}) {
      shardplan::Diagnostics diags;
      auto manifest = shardplan::read_manifest_path(
          std::string(SHARDPLAN_SOURCE_DIR) + path, diags);
      if (!manifest) {
        fuzz::fail("a manifest of the source tree does not read");
      }
      out.push_back(std::move(*manifest));
    }
    return out;
  }();
  return read;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shardplan::Diagnostics diags;
  auto rules = shardplan::read_rules(text, "rules.json", diags);
  fuzz::check_outcome(rules.has_value(), diags, "rules.json");
  if (rules) {
    for (const shardplan::Manifest& manifest : manifests()) {
      fuzz::plan(manifest, *rules);
    }
  }
  return 0;
}
