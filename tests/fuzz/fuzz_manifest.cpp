// Any bytes as a manifest file: a manifest or a located error, never a
// crash. Read twice, as a copy (read_manifest) and in place with simdjson's
// padding after the text (how --manifest reads a file): both readings agree.
// A manifest renders as text, and as JSON in the native form, which
// read_manifest reads back to the same tensors (report.hpp, ManifestReport);
// each built-in preset plans it (fuzz_plan.hpp).
#include "fuzz_check.hpp"
#include "fuzz_plan.hpp"
#include "io/internal.hpp"

#include <shardplan/io.hpp>
#include <shardplan/report.hpp>

#include <simdjson.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

void check_same(const shardplan::Diagnostics& a,
                const shardplan::Diagnostics& b) {
  if (a.items().size() != b.items().size()) {
    fuzz::fail("the copy and the in-place reading report differently");
  }
  for (size_t i = 0; i < a.items().size(); ++i) {
    if (shardplan::render(a.items()[i]) != shardplan::render(b.items()[i])) {
      fuzz::fail("the copy and the in-place reading report differently");
    }
  }
}

// `manifest --format json` read back: the same names, shapes, dtypes and
// logical axes, in the same order.
void check_round_trip(const shardplan::Manifest& manifest) {
  shardplan::Diagnostics none;
  const shardplan::ManifestReport report{manifest};
  (void)shardplan::render(report, shardplan::Format::text, none).str();
  const std::string json =
      shardplan::render(report, shardplan::Format::json, none).str();
  shardplan::Diagnostics diags;
  auto back = shardplan::read_manifest(json, "back.json", diags);
  if (!back || back->size() != manifest.size()) {
    fuzz::fail("manifest --format json does not read back");
  }
  for (size_t i = 0; i < manifest.size(); ++i) {
    const shardplan::Tensor& a = manifest.tensors()[i];
    const shardplan::Tensor& b = back->tensors()[i];
    if (a.name != b.name || !(a.shape == b.shape) || a.dtype != b.dtype
        || a.logical_axes.has_value() != b.logical_axes.has_value()
        || (a.logical_axes && *a.logical_axes != *b.logical_axes)) {
      fuzz::fail("manifest --format json reads back to other tensors");
    }
  }
}

// The built-in presets, read once.
const std::vector<shardplan::RuleSet>& presets() {
  static const std::vector<shardplan::RuleSet> sets = [] {
    std::vector<shardplan::RuleSet> out;
    for (const shardplan::RulePreset& p : shardplan::rule_presets()) {
      shardplan::Diagnostics diags;
      auto rules = shardplan::read_rules_preset(
          p.name, shardplan::Location::of("--rules"), diags);
      if (!rules) {
        fuzz::fail("a built-in preset does not read");
      }
      out.push_back(std::move(*rules));
    }
    return out;
  }();
  return sets;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shardplan::Diagnostics diags;
  auto manifest = shardplan::read_manifest(text, "fuzz.json", diags);
  fuzz::check_outcome(manifest.has_value(), diags, "fuzz.json");
  if (manifest && manifest->empty()) {
    fuzz::fail("a manifest without tensors");
  }
  if (manifest) {
    check_round_trip(*manifest);
    for (const shardplan::RuleSet& rules : presets()) {
      fuzz::plan(*manifest, rules);
    }
  }

  // In place: exactly the padding after the text, zeroed, so that ASan sees
  // any read past it.
  std::vector<char> padded(size + simdjson::SIMDJSON_PADDING, '\0');
  if (size != 0) {
    std::memcpy(padded.data(), data, size);
  }
  std::string_view in_place(padded.data(), size);
  bool is_index = false;
  shardplan::Diagnostics place_diags;
  auto placed = shardplan::io_detail::read_manifest_or_index(
      in_place, "fuzz.json", is_index, place_diags, simdjson::SIMDJSON_PADDING);
  if (is_index) {
    // read_manifest reports an index as an error; the path reader goes on
    // to read_index_text.
    if (placed || place_diags.has_errors()) {
      fuzz::fail("an index with a manifest or an error");
    }
    shardplan::Diagnostics index_diags;
    auto index = shardplan::io_detail::read_index_text(
        in_place, "fuzz.json", index_diags, simdjson::SIMDJSON_PADDING);
    fuzz::check_outcome(index.has_value(), index_diags, "fuzz.json");
    return 0;
  }
  fuzz::check_outcome(placed.has_value(), place_diags, "fuzz.json");
  if (placed.has_value() != manifest.has_value()) {
    fuzz::fail("the copy and the in-place reading disagree");
  }
  check_same(diags, place_diags);
  return 0;
}
