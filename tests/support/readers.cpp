#include "support/readers.hpp"

#include "support/test_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

namespace shardplan::test {

Manifest manifest_ok(std::string_view text, size_t empty) {
  Diagnostics diags;
  std::optional<Manifest> manifest = read_manifest(text, "m.json", diags);
  INFO("text: " << text);
  INFO(first_error(diags));
  REQUIRE(manifest.has_value());
  REQUIRE(diags.items().size() == empty);
  for (const Diagnostic& d : diags.items()) {
    CHECK(d.code == "manifest.empty-tensor");
  }
  return std::move(*manifest);
}

Diagnostic manifest_error(std::string_view text) {
  Diagnostics diags;
  std::optional<Manifest> manifest = read_manifest(text, "m.json", diags);
  INFO("text: " << text);
  CHECK_FALSE(manifest.has_value());
  REQUIRE(diags.error_count() >= 1);
  return diags.items()[0];
}

SpecsFile specs_ok(std::string_view text) {
  Diagnostics diags;
  std::optional<SpecsFile> specs = read_specs(text, "s.json", diags);
  INFO("text: " << text);
  INFO(first_error(diags));
  REQUIRE(specs.has_value());
  REQUIRE(diags.items().empty());
  return std::move(*specs);
}

bool refused(const std::optional<SpecsFile>& specs) {
  return !specs
         || std::any_of(specs->specs.begin(),
                        specs->specs.end(),
                        [](const NamedSpec& s) { return !s.valid; });
}

Diagnostic specs_error(std::string_view text) {
  Diagnostics diags;
  std::optional<SpecsFile> specs = read_specs(text, "s.json", diags);
  INFO("text: " << text);
  CHECK(refused(specs));
  REQUIRE(diags.error_count() >= 1);
  return diags.items()[0];
}

std::string first_line(const Diagnostic& d) {
  return first_line_without_code(d);
}

}  // namespace shardplan::test
