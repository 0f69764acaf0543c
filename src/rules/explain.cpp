// Explaining one tensor (explain_rules, include/shardplan/rules.hpp): the
// engine's decision loop (rules/engine.cpp) run with a tracer that records
// every rule, its selectors, what its yield gave and how it ended, into a
// RuleTrace.

#include "rules/internal.hpp"

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

namespace shardplan {

namespace {

using rules_detail::DecisionTracer;
using rules_detail::TensorFacts;
using rules_detail::YieldResult;

// Records a decision into `trace`: a RuleStep per rule, in order (the loop
// goes on past the decision, so rule i is trace.rules[i]).
class ExplainTracer final : public DecisionTracer {
 public:
  ExplainTracer(const RuleSet& rules, RuleTrace& trace)
      : m_rules(rules), m_trace(trace) {}

  void before_rules(Decider decider, const TensorFacts& t) override {
    std::string text =
        decider == Decider::scalar
            ? std::string("a scalar: replicated before any rule")
            : fmt::format(
                "{} elements < min_size {}: replicated before any rule",
                t.num_elements,
                m_rules.min_size);
    m_trace.before.push_back(
        TraceStep{std::move(text), std::nullopt, {}, true, false});
  }
  bool shows_untried_rules() const override { return true; }
  void rule(size_t index) override {
    m_step = &m_trace.rules.emplace_back();
    m_step->index = index;
    m_step->description = describe_rule(m_rules, index);
  }
  std::string* why_not() override { return &m_step->reason; }
  void selectors(bool matched, bool after_decision) override {
    m_step->matched = matched;
    m_step->outcome =
        after_decision ? RuleOutcome::not_tried : RuleOutcome::no_match;
  }
  Trace* steps() override { return &m_step->steps; }
  void yield_result(const YieldResult& result) override {
    m_step->reason = result.reason;
    if (result.status != YieldResult::Status::not_applicable) {
      m_step->spec = result.spec;
    }
  }
  void outcome(RuleOutcome outcome) override { m_step->outcome = outcome; }
  void fell_through_to(size_t index) override {
    RuleStep& step = m_trace.rules[index];
    step.outcome = RuleOutcome::decided;
    step.reason = "fell through, and no later rule decided: replicated";
  }

 private:
  const RuleSet& m_rules;
  RuleTrace& m_trace;
  RuleStep* m_step = nullptr;  // the rule being tried, in m_trace.rules
};

}  // namespace

std::optional<RuleTrace> explain_rules(const Manifest& manifest,
                                       const Mesh& mesh,
                                       const RuleSet& rules,
                                       std::string_view name,
                                       std::string_view source,
                                       Diagnostics& diags) {
  const Tensor* tensor = manifest.find(name);
  if (tensor == nullptr) {
    Diagnostic& d = diags.error(
        "rules.unknown-tensor",
        manifest.source.empty()
            ? fmt::format("no tensor {} in the manifest", quote(name))
            : fmt::format("no tensor {} in {}", quote(name), manifest.source),
        Location::of(std::string(source)));
    std::vector<std::string> names;
    names.reserve(manifest.size());
    for (const Tensor& t : manifest.tensors()) {
      names.emplace_back(t.name);
    }
    std::string near = closest_match(name, names);
    if (!near.empty()) {
      d.hint = fmt::format("did you mean {}?", quote(near));
    }
    return std::nullopt;
  }
  rules_detail::Engine engine(mesh, rules, diags);
  if (!engine.prepare()) {
    return std::nullopt;
  }
  RuleTrace trace;
  trace.tensor = std::string(tensor->name);
  trace.shape.assign(tensor->shape.begin(), tensor->shape.end());
  trace.dtype = tensor->dtype;
  trace.num_elements = tensor->num_elements;
  trace.num_bytes = tensor->num_bytes;
  if (tensor->logical_axes) {
    trace.logical_axes = *tensor->logical_axes;
  }
  const uint64_t cls = engine.classify(tensor->name);
  ExplainTracer tracer(rules, trace);
  trace.result =
      engine.decide(rules_detail::facts_of(*tensor), cls, tracer).decision;
  return trace;
}

}  // namespace shardplan
