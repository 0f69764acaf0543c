// Any bytes as a specs file (--specs): the specs or a located error, never a
// crash. A spec that cannot be read is reported and kept with valid ==
// false (io.hpp), so a result may come with errors: exactly when one of its
// specs is invalid.
#include "fuzz_check.hpp"

#include <shardplan/io.hpp>

#include <algorithm>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shardplan::Diagnostics diags;
  auto specs = shardplan::read_specs(text, "specs.json", diags);
  const bool invalid =
      specs
      && std::any_of(specs->specs.begin(),
                     specs->specs.end(),
                     [](const shardplan::NamedSpec& s) { return !s.valid; });
  if (invalid && !diags.has_errors()) {
    fuzz::fail("an invalid spec without an error");
  }
  // Apart from the invalid specs' errors, a result or an error.
  fuzz::check_outcome(specs.has_value() && !invalid, diags, "specs.json");
  return 0;
}
