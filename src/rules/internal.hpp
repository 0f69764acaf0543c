#pragma once

// Layer 4, internal: what the files of the rules engine share
// (include/shardplan/rules.hpp, docs/rules.md). Shared by all its files:
// TensorFacts (facts_of), RuleContext, Problem, YieldResult, Outcome.
//
//   rules/engine.cpp     Engine: the checks of a RuleSet, the decision loop;
//                        apply_rules with its decision cache, describe_rule;
//                        DecisionTracer, reads_logical_axes
//   rules/yields.cpp     each yield: its checks against the mesh and what it
//                        gives for one tensor (check_yield, apply_yield:
//                        std::visit over RuleYield); check_axes,
//                        report_bad_value, places_by_size
//   rules/names.cpp      NameClassifier (rules/names.hpp), pattern_error,
//                        the digit templates (detail::digit_use)
//   rules/explain.cpp    the tracer explain_rules records a decision with
//   rules/algorithms.cpp the seed algorithms

#include "rules/names.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/spec.hpp>
#include <shardplan/tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan::rules_detail {

// What the engine needs of a tensor.
struct TensorFacts {
  ShapeView shape;
  DType dtype = DType::f32;
  int64_t num_elements = 0;
  const LogicalAxes* logical_axes = nullptr;
};

TensorFacts facts_of(const Tensor& t);

// What the checks and the yields read besides a rule: the mesh, and the
// rule set (its source for diagnostics, whether it is a preset, its logical
// axis rules).
struct RuleContext {
  const Mesh& mesh;
  const RuleSet& rules;
};

// A problem a decision causes for every tensor that has it.
enum class Problem { none, unmatched, rank, duplicate_logical, conflict };

// What a yield gave for one tensor.
struct YieldResult {
  enum class Status { ok, not_applicable, error } status = Status::ok;
  PartitionSpec spec;
  std::string reason;  // not_applicable / error
  Problem problem = Problem::none;
  std::string detail;   // what the message needs besides the tensor
  std::string pointer;  // where in the rules file (rank), or the logical
                        // name (duplicate_logical)
  // A memory yield's max_bytes_per_device, when the tensor still exceeds it.
  std::optional<int64_t> unmet_max_bytes;
  // In a preset: the axes the yield asked for that did not divide their dim.
  std::vector<DroppedAxis> dropped;
};

// The decision of a tensor, and the problem it reports.
struct Outcome {
  RuleDecision decision;
  Problem problem = Problem::none;
  std::string detail;                      // as YieldResult
  std::string pointer;                     // as YieldResult
  std::optional<int64_t> unmet_max_bytes;  // as YieldResult
  std::vector<DroppedAxis> dropped;        // as YieldResult, of the decider
};

// ---------------------------------------------------------------------------
// rules/yields.cpp

// Reports rules.bad-value at `pointer` in the rules file.
void report_bad_value(const RuleSet& rules,
                      const std::string& pointer,
                      std::string message,
                      Diagnostics& diags);

// Reports an axis named twice in `axes` (rules.duplicate-axis) and, with
// `report_unknown`, an axis the mesh lacks (rules.unknown-axis, with the
// nearest axis as hint); false if any. `what` names the list ("one spec").
bool check_axes(const RuleContext& context,
                const std::vector<AxisRef>& axes,
                std::string_view what,
                bool report_unknown,
                Diagnostics& diags);

// Checks the yield of `rule` against the mesh (axes unknown in a user's
// file, or named twice) and its values (rules.bad-value); false if any
// problem, each reported.
bool check_yield(const RuleContext& context,
                 const Rule& rule,
                 Diagnostics& diags);

// What the yield of `rule` gives for tensor `t`; with `steps`, what its
// algorithm considered is appended there.
// REQUIRES: check_yield(context, rule) passed.
YieldResult apply_yield(const RuleContext& context,
                        const Rule& rule,
                        const TensorFacts& t,
                        Trace* steps);

// Whether the yield places a tensor by its size alone (fsdp, auto, memory,
// mesh_helper), not by what the rule's selectors say it is: such a rule
// does not mean to leave any axis out (rules.unsplit-large).
bool places_by_size(const RuleYield& yield);

// "[null, 1024]".
std::string shape_pattern_text(const ShapePattern& pattern);

// ---------------------------------------------------------------------------
// rules/engine.cpp

// What the decision loop tells of one tensor as it goes. This base class
// ignores it all (apply_rules); explain_rules records it (rules/explain.cpp).
class DecisionTracer {
 public:
  DecisionTracer() = default;
  DecisionTracer(const DecisionTracer&) = delete;
  DecisionTracer& operator=(const DecisionTracer&) = delete;
  virtual ~DecisionTracer() = default;

  // A scalar, or a tensor under RuleSet::min_size: replicated before any
  // rule (`decider` says which).
  virtual void before_rules(Decider /*decider*/, const TensorFacts& /*t*/) {}
  // Whether the loop goes on after the decision, to show the selectors of
  // the rules it did not try.
  virtual bool shows_untried_rules() const { return false; }
  // Rule `index` is next; its selectors are matched.
  virtual void rule(size_t /*index*/) {}
  // Where the selectors of the current rule say why they do not match;
  // nullptr: they need not say.
  virtual std::string* why_not() { return nullptr; }
  // Whether the selectors matched; `after_decision`: an earlier rule
  // decided, so this one is not tried.
  virtual void selectors(bool /*matched*/, bool /*after_decision*/) {}
  // Where the yield appends what its algorithm considers; nullptr: nowhere.
  virtual Trace* steps() { return nullptr; }
  // What the yield gave.
  virtual void yield_result(const YieldResult& /*result*/) {}
  // How the current rule ended.
  virtual void outcome(RuleOutcome /*outcome*/) {}
  // Every rule that applied fell through; rule `index`, the last, decided.
  virtual void fell_through_to(size_t /*index*/) {}
};

// Whether a rule of `rules` reads the tensors' own logical axes (a decision
// then depends on them).
bool reads_logical_axes(const RuleSet& rules);

class Engine {
 public:
  // REQUIRES: the arguments outlive the engine.
  Engine(const Mesh& mesh, const RuleSet& rules, Diagnostics& diags)
      : m_mesh(mesh), m_rules(rules), m_diags(diags), m_names(rules) {}

  // Checks the rules against the mesh and, unless the names were matched
  // already (RuleKeys), compiles the patterns; false (reported) on an input
  // error.
  bool prepare(bool compile_patterns = true);

  // Whether any rule reads the tensor's own logical axes.
  bool reads_logical_axes() const { return m_reads_logical_axes; }

  // The class of the patterns `name` matches: tensors of one class, shape,
  // dtype (and logical axes) share a decision.
  // REQUIRES: prepare() returned true.
  uint64_t classify(std::string_view name) { return m_names.classify(name); }

  // Decides a tensor whose pattern matches are class `cls`
  // (NameClassifier::k_no_scan_class when it is a scalar or under
  // min_size), telling `tracer` how.
  // REQUIRES: prepare() returned true.
  Outcome decide(const TensorFacts& t,
                 uint64_t cls,
                 DecisionTracer& tracer) const;
  // The same for a tensor whose name matches the patterns of the rules
  // `flags` (NameClassifier::flags_of; empty when it is a scalar or
  // under min_size).
  Outcome decide_matched(const TensorFacts& t,
                         const std::vector<char>& flags,
                         DecisionTracer& tracer) const;

 private:
  RuleRef ref(size_t index) const {
    return RuleRef{Decider::rule, index, describe_rule(m_rules, index)};
  }
  bool selectors_match(size_t index,
                       const TensorFacts& t,
                       const std::vector<char>& matched,
                       std::string* why_not) const;

  const Mesh& m_mesh;
  const RuleSet& m_rules;
  Diagnostics& m_diags;
  NameClassifier m_names;
  bool m_reads_logical_axes = false;
};

}  // namespace shardplan::rules_detail
