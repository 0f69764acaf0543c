// Any bytes as a rules file (--rules FILE): a rule set or a located error,
// never a crash.
#include "fuzz_check.hpp"

#include <shardplan/io.hpp>

#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shardplan::Diagnostics diags;
  auto rules = shardplan::read_rules(text, "rules.json", diags);
  fuzz::check_outcome(rules.has_value(), diags, "rules.json");
  return 0;
}
