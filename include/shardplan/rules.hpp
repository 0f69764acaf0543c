#pragma once

// Layer 4: the rules engine (docs/rules.md has the file format,
// every algorithm with its seed and every seed defect we fixed).
//
// A RuleSet is an ordered list of rules. Rules are tried in order; the first
// rule whose selectors match a tensor decides it, unless it has
// `fallthrough` and leaves the tensor fully replicated, in which case the
// next rule is tried. Before any rule, scalars and tensors of fewer than
// `min_size` elements are replicated.
//
//   selectors   pattern (RE2, searched anywhere in the name like Python's
//               re.search), shape (equal rank, nullopt = any size),
//               min_elements
//   yields      spec, replicate, logical_axes (a list or the tensor's own
//               from the manifest, resolved through logical_axis_rules),
//               fsdp (nnx), auto, memory, mesh_helper, shape_patterns
//               (eformer)
//
// A RuleSet is either a user's file or a built-in preset. In a user's file an
// axis the mesh lacks is an input error, located at the rule's JSON pointer.
// A preset adapts to the mesh instead: axes the mesh lacks and axes of size 1
// are dropped from what it assigns, and a dim an axis does not divide falls
// back to the next axis of the dim, the next rule of the same logical name,
// or replicated; so a preset always yields specs that validate.
//
// Decisions are computed once per distinct (rules whose pattern matches,
// shape, dtype, logical axes) and shared by every tensor with that key; all
// patterns of a RuleSet are matched in one RE2::Set scan per name.
//
// What it offers, by the file that implements it (the files share
// src/rules/internal.hpp):
//   rules/yields.cpp
//     RuleYield and its XYield alternatives, yield_name, yield_names,
//     make_yield               what a rule gives (one struct per key)
//   rules/engine.cpp
//     Rule, RuleSet, LogicalAxisRule, AxisRef, RuleSpec, Unmatched
//     ApplyOptions, RulePlan, RuleDecision, apply_rules   a manifest planned
//     rule_keys, RuleKeys      the decision keys of a manifest
//     describe_rule            a rule as plan prints it: #3 pattern "mlp"
//   rules/explain.cpp
//     RuleTrace, RuleStep, TraceStep, explain_rules   --explain NAME
//   rules/algorithms.cpp
//     fsdp_tactic, replicate_tactic, auto_spec, memory_spec,
//     suggest_methods, mesh_helper_spec, shape_matches   the seeds
//     resolve_logical_axes, DroppedAxis   logical axis rules
//   rules/names.cpp
//     pattern_error            an RE2 pattern checked
//     detail::digit_use, distinguished_digits, digit_oblivious
//                              the digit templates of names

#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/spec.hpp>
#include <shardplan/tensor.hpp>

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace shardplan {

// ---------------------------------------------------------------------------
// The model of a rules file.

// A mesh axis named in a rule, with where it was written.
struct AxisRef {
  std::string name;
  std::string pointer;  // JSON pointer, e.g. "/rules/3/fsdp/axis/1"; may be ""

  bool operator==(const AxisRef&) const = default;
};

// A spec as a rule writes it: per dim the axes, major to minor (empty =
// replicated). It may be shorter than a tensor's rank (trailing dims are
// replicated); a mesh axis appears at most once (read_rules checks this).
struct RuleSpec {
  std::vector<std::vector<AxisRef>> dims;
  std::string pointer;

  bool operator==(const RuleSpec&) const = default;
};

// A shape selector: one entry per dim, nullopt matches any size.
using ShapePattern = std::vector<std::optional<int64_t>>;

// The yields: what a rule gives a tensor. Each carries k_name, its key in a
// rules file; yield_name() and yield_names() are built from them.

struct SpecYield {
  static constexpr std::string_view k_name = "spec";
  RuleSpec spec;
  bool operator==(const SpecYield&) const = default;
};

// nnx `replicate`: fully replicated.
struct ReplicateYield {
  static constexpr std::string_view k_name = "replicate";
  bool operator==(const ReplicateYield&) const = default;
};

// Logical axis names resolved through RuleSet::logical_axis_rules.
struct LogicalAxesYield {
  static constexpr std::string_view k_name = "logical_axes";
  bool from_manifest = false;  // "manifest": the tensor's own logical_axes
  LogicalAxes names;           // otherwise one per dim (nullopt: unnamed)
  std::string pointer;

  bool operator==(const LogicalAxesYield&) const = default;
};

// nnx `fsdp(axis, min_size_to_shard_mb)`: the largest dim not yet split whose
// size the axis (or the product of a tuple of axes) divides, for tensors of
// more than min_size_mb MiB.
struct FsdpYield {
  static constexpr std::string_view k_name = "fsdp";
  std::vector<AxisRef> axes;  // one axis, or a tuple (first axis major)
  double min_size_mb = 4;

  bool operator==(const FsdpYield&) const = default;
};

// eformer AutoShardingRule.
struct AutoYield {
  static constexpr std::string_view k_name = "auto";
  std::optional<std::vector<AxisRef>> axes;  // default: every mesh axis
  std::optional<int64_t> min_shard_size;     // default: the device count
  bool reverse = false;                      // smallest dims first

  bool operator==(const AutoYield&) const = default;
};

// eformer MemoryConstrainedShardingRule.
struct MemoryYield {
  static constexpr std::string_view k_name = "memory";
  int64_t max_bytes_per_device = 0;
  std::optional<std::vector<AxisRef>> axes;  // default: every mesh axis

  bool operator==(const MemoryYield&) const = default;
};

// eformer MeshPartitionHelper: suggested methods + create_partition_spec.
struct MeshHelperYield {
  static constexpr std::string_view k_name = "mesh_helper";
  int64_t min_shard_size = 1024;

  bool operator==(const MeshHelperYield&) const = default;
};

// eformer ShapeBasedShardingRule: the first pattern of equal rank whose sizes
// match gives the spec; no match gives a replicated spec.
struct ShapePatternsYield {
  static constexpr std::string_view k_name = "shape_patterns";
  struct Entry {
    ShapePattern shape;
    RuleSpec spec;
    std::string pointer;

    bool operator==(const Entry&) const = default;
  };
  std::vector<Entry> patterns;

  bool operator==(const ShapePatternsYield&) const = default;
};

using RuleYield = std::variant<SpecYield,
                               ReplicateYield,
                               LogicalAxesYield,
                               FsdpYield,
                               AutoYield,
                               MemoryYield,
                               MeshHelperYield,
                               ShapePatternsYield>;

// The key of a yield in a rules file, its alternative's k_name: "spec",
// "replicate", "logical_axes", "fsdp", "auto", "memory", "mesh_helper",
// "shape_patterns".
std::string_view yield_name(const RuleYield& yield);
// Every yield key, in the order of RuleYield's alternatives (above).
const std::vector<std::string>& yield_names();
// The yield whose key is `name`, default-constructed (readers fill it);
// nullopt for a name no yield has.
std::optional<RuleYield> make_yield(std::string_view name);

struct Rule {
  std::optional<std::string> pattern;  // RE2 syntax, searched in the name
  std::optional<ShapePattern> shape;
  std::optional<int64_t> min_elements;
  RuleYield yield = ReplicateYield{};
  bool fallthrough = false;
  std::string pointer;  // "/rules/3"

  bool operator==(const Rule&) const = default;
};

// One entry of logical_axis_rules: [name, axis | [axes] | []].
struct LogicalAxisRule {
  std::string name;
  std::vector<AxisRef> axes;  // empty: replicated (and blocks later entries)
  std::string pointer;        // "/logical_axis_rules/2"

  bool operator==(const LogicalAxisRule&) const = default;
};

enum class Unmatched { error, replicate };

struct RuleSet {
  // Where the rules were read from, for diagnostics: the file, or
  // "configs/rules/NAME.json" for a built-in preset.
  std::string source;
  bool preset = false;      // adaptive (see the top of this file)
  std::string name;         // a built-in preset's name ("fsdp-tp"); else empty
  std::string description;  // optional, for `--rules list` and docs
  std::vector<Rule> rules;
  std::vector<LogicalAxisRule> logical_axis_rules;
  int64_t min_size = 0;  // tensors of fewer elements are replicated
  Unmatched unmatched = Unmatched::error;

  bool operator==(const RuleSet&) const = default;
};

// The error RE2 gives for `pattern`, or nullopt when it compiles. With a
// hint for Python syntax RE2 lacks (lookaround, backreferences) in `hint`.
std::optional<std::string> pattern_error(std::string_view pattern,
                                         std::string* hint = nullptr);

// A short description of rule `index`, as plan output shows it:
//   #3 pattern "mlp" fsdp       #4 shape [null, 1024] spec       #5 auto
// The number is the rule's index in RuleSet::rules (its pointer /rules/3).
// Long patterns are cut to 40 characters with "...".
// REQUIRES: index < rules.rules.size().
std::string describe_rule(const RuleSet& rules, size_t index);

// ---------------------------------------------------------------------------
// Results.

// What decided a tensor.
enum class Decider {
  rule,       // RuleSet::rules[index]
  scalar,     // rank 0: replicated before any rule
  min_size,   // fewer than RuleSet::min_size elements: replicated
  unmatched,  // no rule matched; replicated (an error with unmatched: error)
};

struct RuleRef {
  Decider decider = Decider::unmatched;
  size_t index = 0;         // for Decider::rule
  std::string description;  // describe_rule(), or "scalar", "min_size",
                            // "unmatched"

  // The rule's index for Decider::rule, else nullopt (JSON: null).
  std::optional<size_t> rule_index() const {
    return decider == Decider::rule ? std::optional<size_t>(index)
                                    : std::nullopt;
  }
  bool operator==(const RuleRef&) const = default;
};

struct RuleDecision {
  PartitionSpec spec;  // full rank
  RuleRef rule;

  bool operator==(const RuleDecision&) const = default;
};

// The spec and deciding rule of every tensor of a manifest. Tensors with the
// same key share one RuleDecision: `decisions` holds the distinct ones and
// `decision_of` maps each tensor (manifest order) to its decision.
struct RulePlan {
  std::vector<RuleDecision> decisions;
  std::vector<uint32_t> decision_of;

  size_t size() const { return decision_of.size(); }
  // REQUIRES: tensor < size().
  const RuleDecision& decision(size_t tensor) const {
    return decisions[decision_of[tensor]];
  }
  const PartitionSpec& spec(size_t tensor) const {
    return decision(tensor).spec;
  }
  const RuleRef& rule(size_t tensor) const { return decision(tensor).rule; }
  // Each tensor's spec, in manifest order, as validate_planned takes them
  // (tensors that share a decision share the spec object).
  std::vector<const PartitionSpec*> specs() const {
    std::vector<const PartitionSpec*> out(size());
    for (size_t t = 0; t < out.size(); ++t) {
      out[t] = &spec(t);
    }
    return out;
  }
};

// Which tensors of a manifest share a decision on every mesh: their names
// match the same patterns of the rules, and their shape, dtype and (when a
// rule reads them) logical axes are the same. Mesh-independent: computed
// once (rule_keys), it lets apply_rules decide each key once per mesh
// without matching a name again (search plans many meshes).
struct RuleKeys {
  std::vector<uint32_t> key_of;  // per tensor, in manifest order
  // Per key: per rule, whether its pattern matches the key's names; empty
  // for a scalar or a tensor under min_size (decided before any rule).
  std::vector<std::vector<char>> matches;

  size_t keys() const { return matches.size(); }
};

// The keys of `manifest`'s tensors under `rules`; nullopt when a pattern
// does not compile [rules.bad-pattern].
std::optional<RuleKeys> rule_keys(const Manifest& manifest,
                                  const RuleSet& rules,
                                  Diagnostics& diags);

// What apply_rules may warn about beyond its own problems.
struct ApplyOptions {
  // A preset's plan: warn [rules.unsplit-large] about each tensor of at least
  // this many bytes that the preset leaves replicated over a mesh axis it
  // splits other tensors over, unless the rule that decided it meant that
  // (see apply_rules). 0 turns the warning off; a user's file never gets it.
  // Where it came from is named in the hint (the command line passes
  // "--warn-replicated").
  Sourced<int64_t> unsplit_warning_bytes;
  // rule_keys(manifest, rules) when computed already: each key is decided
  // once and no name is matched (the plan is the same as without).
  const RuleKeys* keys = nullptr;
};

// Applies `rules` to every tensor of `manifest` on `mesh`.
//
// Input errors make it return nullopt (exit 2): an axis the mesh lacks in a
// user's file [rules.unknown-axis] (every one is reported, each at its JSON
// pointer in rules.source, with the nearest mesh axis as hint), a pattern RE2
// cannot compile [rules.bad-pattern].
//
// Plan errors are reported and the plan is still returned (exit 1); the
// tensor concerned is replicated:
//   rules.unmatched                no rule matches the tensor (unmatched:
//                                  error), located at the tensor in the
//                                  manifest
//   rules.rank                     a user's spec or logical axis list is
//                                  longer than the tensor's rank
//   rules.duplicate-logical-axis   the tensor's own logical axes repeat a
//                                  name (Flax refuses this too)
//   rules.conflict                 nnx `replicate` met a split spec (see
//                                  replicate_tactic)
// Warnings: rules.memory-unmet, one per `memory` rule, when a tensor still
// exceeds max_bytes_per_device with every axis spent.
// rules.unsplit-large (a preset, options.unsplit_warning_bytes > 0): a tensor
// of at least that many bytes, split over some axis but replicated over a
// mesh axis the plan splits another tensor over, where either the rule that
// decided it asked for that axis and the preset dropped it (it does not
// divide the dim; the hint names the dim and the size that would take it),
// or the rule places tensors by size alone (fsdp, auto, memory,
// mesh_helper): no rule of the preset names the tensor's role. A rule whose
// spec or logical axes leave the axis out decided so on purpose: no warning.
// A fully replicated tensor is spec.replicated-large's (validate). One
// warning per tensor and axis, located at the tensor in the manifest.
// REQUIRES: mesh.num_devices() >= 1.
std::optional<RulePlan> apply_rules(const Manifest& manifest,
                                    const Mesh& mesh,
                                    const RuleSet& rules,
                                    Diagnostics& diags,
                                    const ApplyOptions& options = {});

// ---------------------------------------------------------------------------
// Explaining one tensor.

// One thing an algorithm or a selector considered. `text` is a line fit for
// display; the other fields are the same facts as data.
struct TraceStep {
  std::string text;               // e.g. "dim 1 (7168): fsdp (8) divides it"
  std::optional<int64_t> dim;     // the dim considered
  std::vector<std::string> axes;  // the mesh axes considered for it
  std::optional<bool> ok;         // whether the check passed
  bool chosen = false;            // this step assigned `axes` to `dim`

  bool operator==(const TraceStep&) const = default;
};

using Trace = std::vector<TraceStep>;

enum class RuleOutcome {
  no_match,        // a selector did not match (`reason` says which)
  not_applicable,  // selectors matched, the yield does not apply (no
                   // logical_axes in the manifest; a preset's spec longer
                   // than the rank); the next rule is tried
  fell_through,    // fallthrough and the result was replicated
  decided,         // this rule decided the tensor
  error,           // the yield failed for this tensor (see apply_rules)
  not_tried,       // an earlier rule decided; selectors shown for reference
};

std::string_view to_string(RuleOutcome outcome);

struct RuleStep {
  size_t index = 0;
  std::string description;  // describe_rule()
  bool matched = false;     // the selectors matched
  RuleOutcome outcome = RuleOutcome::no_match;
  std::string reason;  // why not matched / not applicable / error
  std::optional<PartitionSpec> spec;  // what the yield gave, when tried
  Trace steps;                        // what its algorithm considered
};

struct RuleTrace {
  std::string tensor;
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
  int64_t num_elements = 0;
  int64_t num_bytes = 0;
  std::optional<LogicalAxes> logical_axes;
  Trace before;                 // scalar / min_size, when they decided
  std::vector<RuleStep> rules;  // every rule, in order (empty if `before`
                                // decided)
  RuleDecision result;
};

// Why tensor `name` got its spec: every rule, matched or why not, and what
// the algorithm of each rule tried considered. The same decision as
// apply_rules. An unknown name is an error at `source` (where the name came
// from; the command line passes "--explain") with the nearest tensor name as
// hint [rules.unknown-tensor]; input errors as apply_rules.
std::optional<RuleTrace> explain_rules(const Manifest& manifest,
                                       const Mesh& mesh,
                                       const RuleSet& rules,
                                       std::string_view name,
                                       std::string_view source,
                                       Diagnostics& diags);

// ---------------------------------------------------------------------------
// The seed algorithms, one tensor at a time (the engine calls these; tests
// work them by hand). Each returns a spec of the tensor's full rank and, with
// `trace`, appends what it considered. Every one treats a mesh axis of size 1
// as absent: it splits nothing (JAX and MaxText drop such axes).
// REQUIRES for all: every axis named is in `mesh`, none twice.

// nnx `fsdp`: for a tensor of more than min_size_mb MiB, the dims by size,
// largest first (equal sizes: the later dim first, as numpy's
// argsort(shape)[::-1]), and the first one not yet split in `current` whose
// size the product of `axes` divides takes `axes`. Otherwise `current`.
// Example: (4096, 11008) bf16 on fsdp:8, axes {fsdp}: 86 MiB > 4, dim 1
// (11008 = 8 x 1376) comes first: P(None, 'fsdp').
PartitionSpec fsdp_tactic(ShapeView shape,
                          DType dtype,
                          const PartitionSpec& current,
                          const std::vector<std::string>& axes,
                          double min_size_mb,
                          const Mesh& mesh,
                          Trace* trace = nullptr);

// nnx `replicate`: `current` unchanged when it splits no dim, nullopt (the
// seed's "Conflict: ... already has a sharding spec") when it does. In a
// RuleSet a tensor only ever reaches a rule unsplit (the first match decides;
// fallthrough only continues after a replicated result), so apply_rules never
// meets the conflict; it would report it as rules.conflict.
std::optional<PartitionSpec> replicate_tactic(const PartitionSpec& current,
                                              size_t rank);

// eformer AutoShardingRule: replicated when the tensor has fewer than
// `min_shard_size` elements; else the dims by size, largest first (smallest
// with `reverse`; equal sizes in dim order), and each takes the first
// remaining axis, in mesh order, whose size divides it; each axis is used
// once. (eformer iterates a Python set: its order is arbitrary.)
// Example: (1024, 4096) on dp:2,tp:4: dim 1 takes dp, dim 0 takes tp:
// P('tp', 'dp').
PartitionSpec auto_spec(ShapeView shape,
                        const std::vector<std::string>& axes,
                        int64_t min_shard_size,
                        bool reverse,
                        const Mesh& mesh,
                        Trace* trace = nullptr);

// eformer MemoryConstrainedShardingRule: replicated when the tensor's bytes
// are at most `max_bytes_per_device`; else axes by size, largest first
// (stable: equal sizes keep the order of `axes`), dims by size, largest
// first, and while the bytes per device exceed the limit each dim takes the
// first unused axis that divides it. Where the seed stops with the tensor
// still over the limit, a second pass lets dims take further axes (minor
// to the first) while the product divides; `fits` tells whether it fits.
PartitionSpec memory_spec(ShapeView shape,
                          DType dtype,
                          int64_t max_bytes_per_device,
                          const std::vector<std::string>& axes,
                          const Mesh& mesh,
                          bool* fits = nullptr,
                          Trace* trace = nullptr);

// eformer MeshPartitionHelper._suggest_methods: from the axes named dp,
// fsdp, tp, sp (of size > 1): [fsdp, sp] for rank > 1 when dims 0 and 1
// hold at least fsdp x sp elements, [dp] for rank > 0, [sp] for rank > 1
// without the former, [tp], then [fsdp] when no method names fsdp yet.
std::vector<std::vector<std::string>> suggest_methods(ShapeView shape,
                                                      const Mesh& mesh);

// eformer MeshPartitionHelper.create_partition_spec, with its divisibility
// gaps closed (docs/rules.md): a first pass where a single axis takes the
// first free dim of at least max(min_shard_size, elements / (2 x devices))
// it divides, and a pair takes dims 0 and 1 (or dim 0 for both); if that
// splits nothing, a second pass with min_shard_size alone.
PartitionSpec mesh_helper_spec(
    ShapeView shape,
    const std::vector<std::vector<std::string>>& methods,
    int64_t min_shard_size,
    const Mesh& mesh,
    Trace* trace = nullptr);

// Whether `shape` has the pattern's rank and size wherever the pattern has
// one. Otherwise `why_not` (if given) says which: "rank 2 != 3",
// "dim 1 is 4096, not 1024".
bool shape_matches(ShapeView shape,
                   const ShapePattern& pattern,
                   std::string* why_not = nullptr);

// An axis a preset's rule asked for on a dim that the axis does not divide,
// so the preset dropped it (docs/rules.md, "Users' files and presets").
struct DroppedAxis {
  std::string axis;
  size_t dim = 0;
  // The shard count the dim would have needed: the axis's size times the
  // sizes of the axes kept before it on the dim.
  int64_t shards = 0;
  // Through logical axes: the logical name that asked for the axis and its
  // entry in logical_axis_rules.
  std::optional<std::string> logical;
  size_t logical_rule = 0;

  bool operator==(const DroppedAxis&) const = default;
};

// Flax linen logical_to_mesh_axes, then MaxText's remove_size_one_mesh_axis:
// rules in order; a rule applies to the dim carrying its name if that dim is
// still unassigned and none of the rule's axes is used by any dim; a rule
// with no axes assigns "replicated" and blocks later rules of the name;
// unassigned dims are replicated; finally axes of size 1 are removed.
// With `adaptive` (presets), a rule's axes the mesh lacks are dropped first,
// then any axis whose size (times the axes kept before it) does not divide
// the dim; a rule left with no axes that way does not apply, so a later rule
// of the same name can. With `dropped`, each axis dropped for not dividing
// its dim is appended there.
// Example (Flax's docstring): names (batch, length, heads, features), rules
// (batch X) (features X) (heads Y) (batch Z) give P('X', None, 'Y', None).
// REQUIRES: names.size() == shape.size(); no name twice; unless adaptive,
// every axis of `rules` is in `mesh`.
PartitionSpec resolve_logical_axes(const LogicalAxes& names,
                                   ShapeView shape,
                                   const std::vector<LogicalAxisRule>& rules,
                                   const Mesh& mesh,
                                   bool adaptive,
                                   Trace* trace = nullptr,
                                   std::vector<DroppedAxis>* dropped = nullptr);

namespace detail {

// The ASCII digits `pattern` (RE2 syntax) tells apart from the other
// digits, as a mask (bit d for digit d): every digit literal, and for each
// character class that holds some digits but not all, the digits it holds
// or those it lacks, whichever are fewer. Two digits
// outside the mask take the same path through the automaton (and both are
// word characters), so a name matches exactly when the name with one
// replaced by the other does: the engine matches "model.layers.0.mlp" once
// for every layer whose index uses only such digits. Conservative: nullopt
// for any construct it does not know (\p, \x, \Q, octal escapes, ...).
// Examples: "layers\.[0-9]+\.mlp" and "experts\.\d+" give 0;
// "layers\.1[0-9]" gives {1}, "[0-5]" {6,...,9}, "w1|w3" {1,3}.
std::optional<unsigned> distinguished_digits(std::string_view pattern);

// distinguished_digits, split by where a digit literal stands. A literal
// right after a literal ASCII character c (or after such a literal, as the
// "1" and "2" of "w12") matches only a digit that follows c in a name, so
// it never matches inside a run of digits that follows anything else
// ("model.layers.12" or a name's start). Such literals are `anchored`, and
// their characters are `anchors` (both cases of a letter, for (?i)); every
// other literal, and the classes' sides, are `anywhere`. Within a run of
// digits not after an anchor, only `anywhere` digits are told apart: with
// the fsdp-tp preset's "w1|w3", layer and expert numbers are all alike.
// Conservative the same way (nullopt for what it does not know).
struct DigitUse {
  unsigned anywhere = 0;
  unsigned anchored = 0;
  std::bitset<256> anchors;

  // What a set of patterns tells apart: each one's, together.
  DigitUse& operator|=(const DigitUse& other) {
    anywhere |= other.anywhere;
    anchored |= other.anchored;
    anchors |= other.anchors;
    return *this;
  }
};
std::optional<DigitUse> digit_use(std::string_view pattern);

// Whether `pattern` treats the ten ASCII digits alike:
// distinguished_digits(pattern) == 0.
bool digit_oblivious(std::string_view pattern);

}  // namespace detail

}  // namespace shardplan
