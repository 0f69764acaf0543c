#pragma once

// Layer 6 (module io): the reader of rules files (DESIGN.md 2.5; the format,
// key by key, is in docs/rules.md).
//
//   {"rules": [{"pattern": "mlp", "fsdp": {"axis": "fsdp"}}, ...],
//    "logical_axis_rules": [["embed", "fsdp"], ["mlp", ["tp"]]],
//    "min_size": 0, "unmatched": "error"}
//
// Problems stop the reader at the first error, located as
//   rules.json:3:17: error: ...            JSON syntax (with an excerpt and
//   caret) rules.json:/rules/3/pattern: error: ... a value, by JSON pointer
// Codes:
//   rules.syntax           not JSON
//   rules.duplicate-key    a key twice in one object
//   rules.type             a value of the wrong JSON type
//   rules.unknown-key      a key the format does not have (nearest key as hint)
//   rules.missing-key      "rules", fsdp "axis", memory "max_bytes_per_device",
//                          a shape pattern's "shape" or "spec"
//   rules.missing-yield    a rule that yields nothing
//   rules.two-yields       a rule with two yields
//   rules.bad-value        out of range, empty names, an unknown word
//   rules.bad-pattern      RE2 cannot compile the pattern (RE2's message)
//   rules.duplicate-axis   an axis twice in one spec, tuple or axis list
//   rules.duplicate-logical-axis   a logical name twice in one list
// Warnings (reading goes on):
//   rules.unknown-logical-axis     a name no logical_axis_rules entry has
//   rules.useless-fallthrough      fallthrough on a rule that always
//                                  replicates
// Axes are not checked against a mesh here: apply_rules does that.

#include <shardplan/diag.hpp>
#include <shardplan/rules.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// Reads a rules file given as JSON text; `source` names it in diagnostics
// and becomes RuleSet::source. The result is a user's RuleSet (preset ==
// false); a caller reading a built-in preset sets `preset` itself.
std::optional<RuleSet> read_rules(std::string_view json,
                                  std::string_view source,
                                  Diagnostics& diags);

// A built-in preset (configs/rules/NAME.json, compiled in).
struct RulePreset {
  std::string name;         // "fsdp-tp"
  std::string description;  // the file's "description"
  size_t rules = 0;         // how many rules it has
};

// The built-in presets, in name order.
std::vector<RulePreset> rule_presets();

// The preset `name`, as a RuleSet with preset == true and source
// "configs/rules/NAME.json". An unknown name is an error at --rules that
// lists the presets, with the nearest as hint [rules.unknown-preset].
std::optional<RuleSet> read_rules_preset(std::string_view name,
                                         Diagnostics& diags);

}  // namespace shardplan
