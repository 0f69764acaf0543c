// The rules engine (include/shardplan/rules.hpp, docs/rules.md): the checks
// of a RuleSet against the mesh, the decision loop (selectors, yields,
// fallthrough), the decision cache, apply_rules and the reporting of the
// problems a decision causes; describe_rule. What the files of src/rules/
// hold is listed in rules/internal.hpp.
//
// Speed (docs/performance.md; docs/rules.md, "Speed"). Per tensor: one RE2::Set
// scan of the name gives every rule whose pattern matches (rules/names.cpp);
// those rules, the shape, the dtype and (when a rule reads them) the logical
// axes form the key of a decision, computed once and shared by every tensor
// with the same key. A DeepSeek-like manifest of 100k tensors has a few hundred
// keys.

#include "rules/internal.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <limits>
#include <unordered_map>
#include <utility>
#include <variant>

namespace shardplan {

namespace {

constexpr size_t k_description_pattern_bytes = 40;

// At most `limit` bytes of `s`, cut on a UTF-8 code point boundary.
std::string clip(std::string_view s, size_t limit) {
  if (s.size() <= limit) {
    return std::string(s);
  }
  size_t n = limit;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0U) == 0x80U) {
    --n;
  }
  return std::string(s.substr(0, n)) + "...";
}

}  // namespace

std::string describe_rule(const RuleSet& rules, size_t index) {
  assert(index < rules.rules.size());
  const Rule& rule = rules.rules[index];
  std::string out = fmt::format("#{}", index);
  if (rule.pattern) {
    out +=
        " pattern " + quote(clip(*rule.pattern, k_description_pattern_bytes));
  }
  if (rule.shape) {
    out += " shape " + rules_detail::shape_pattern_text(*rule.shape);
  }
  if (rule.min_elements) {
    out += fmt::format(" min_elements {}", *rule.min_elements);
  }
  out += ' ';
  out += yield_name(rule.yield);
  return out;
}

std::string_view to_string(RuleOutcome outcome) {
  switch (outcome) {
    case RuleOutcome::no_match:
      return "no_match";
    case RuleOutcome::not_applicable:
      return "not_applicable";
    case RuleOutcome::fell_through:
      return "fell_through";
    case RuleOutcome::decided:
      return "decided";
    case RuleOutcome::error:
      return "error";
    case RuleOutcome::not_tried:
      return "not_tried";
  }
  return "no_match";
}

namespace {

using rules_detail::mix;

// Key of a decision: the class of pattern matches, dtype, shape and (when a
// rule reads them) logical axes.
struct KeyView {
  uint64_t match_class = 0;
  DType dtype = DType::f32;
  ShapeView shape;
  const LogicalAxes* logical_axes = nullptr;
};

struct Key {
  uint64_t match_class = 0;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::optional<LogicalAxes> logical_axes;

  explicit Key(const KeyView& v)
      : match_class(v.match_class),
        dtype(v.dtype),
        shape(v.shape.begin(), v.shape.end()) {
    if (v.logical_axes != nullptr) {
      logical_axes = *v.logical_axes;
    }
  }
  KeyView view() const {
    return KeyView{match_class,
                   dtype,
                   ShapeView(shape),
                   logical_axes ? &*logical_axes : nullptr};
  }
};

struct KeyHash {
  using is_transparent = void;
  size_t operator()(const KeyView& k) const noexcept {
    uint64_t h = mix(k.match_class, static_cast<uint64_t>(k.dtype));
    h = mix(h, k.shape.size());
    for (int64_t d : k.shape) {
      h = mix(h, static_cast<uint64_t>(d));
    }
    if (k.logical_axes != nullptr) {
      for (const std::optional<std::string>& name : *k.logical_axes) {
        h = mix(h, name ? std::hash<std::string>{}(*name) : 0x51ULL);
      }
    }
    return static_cast<size_t>(h);
  }
  size_t operator()(const Key& k) const noexcept { return (*this)(k.view()); }
};

struct KeyEqual {
  using is_transparent = void;
  static bool same(const KeyView& a, const KeyView& b) {
    if (a.match_class != b.match_class || a.dtype != b.dtype
        || !(a.shape == b.shape)
        || (a.logical_axes == nullptr) != (b.logical_axes == nullptr)) {
      return false;
    }
    return a.logical_axes == nullptr || *a.logical_axes == *b.logical_axes;
  }
  bool operator()(const Key& a, const Key& b) const {
    return same(a.view(), b.view());
  }
  bool operator()(const KeyView& a, const Key& b) const {
    return same(a, b.view());
  }
  bool operator()(const Key& a, const KeyView& b) const {
    return same(a.view(), b);
  }
};

}  // namespace

namespace rules_detail {

bool reads_logical_axes(const RuleSet& rules) {
  return std::any_of(
      rules.rules.begin(), rules.rules.end(), [](const Rule& rule) {
        const auto* logical = std::get_if<LogicalAxesYield>(&rule.yield);
        return logical != nullptr && logical->from_manifest;
      });
}

TensorFacts facts_of(const Tensor& t) {
  return TensorFacts{t.shape,
                     t.dtype,
                     t.num_elements,
                     t.logical_axes ? &*t.logical_axes : nullptr};
}

bool Engine::prepare(bool compile_patterns) {
  const RuleContext context{m_mesh, m_rules};
  bool ok = true;
  if (m_rules.min_size < 0) {
    report_bad_value(
        m_rules,
        "/min_size",
        fmt::format("min_size must be >= 0, got {}", m_rules.min_size),
        m_diags);
    ok = false;
  }
  for (const Rule& rule : m_rules.rules) {
    if (rule.min_elements && *rule.min_elements < 0) {
      report_bad_value(
          m_rules,
          rule.pointer + "/min_elements",
          fmt::format("min_elements must be >= 0, got {}", *rule.min_elements),
          m_diags);
      ok = false;
    }
    ok = check_yield(context, rule, m_diags) && ok;
  }
  m_reads_logical_axes = rules_detail::reads_logical_axes(m_rules);
  for (const LogicalAxisRule& rule : m_rules.logical_axis_rules) {
    ok = check_axes(context,
                    rule.axes,
                    "one logical axis rule",
                    !m_rules.preset,
                    m_diags)
         && ok;
  }
  // Every pattern is compiled, so that each bad one is reported.
  if (compile_patterns) {
    ok = m_names.compile(m_diags) && ok;
  }
  return ok;
}

bool Engine::selectors_match(size_t index,
                             const TensorFacts& t,
                             const std::vector<char>& matched,
                             std::string* why_not) const {
  const Rule& rule = m_rules.rules[index];
  if (rule.pattern && matched[index] == 0) {
    if (why_not != nullptr) {
      *why_not = fmt::format("pattern {} does not match", quote(*rule.pattern));
    }
    return false;
  }
  if (rule.shape) {
    std::string why;
    if (!shape_matches(
            t.shape, *rule.shape, why_not != nullptr ? &why : nullptr)) {
      if (why_not != nullptr) {
        *why_not =
            fmt::format("shape {}: {}", shape_pattern_text(*rule.shape), why);
      }
      return false;
    }
  }
  if (rule.min_elements && t.num_elements < *rule.min_elements) {
    if (why_not != nullptr) {
      *why_not = fmt::format(
          "{} elements < min_elements {}", t.num_elements, *rule.min_elements);
    }
    return false;
  }
  return true;
}

Outcome Engine::decide(const TensorFacts& t,
                       uint64_t cls,
                       DecisionTracer& tracer) const {
  if (t.shape.empty() || t.num_elements < m_rules.min_size) {
    return decide_matched(t, {}, tracer);
  }
  return decide_matched(t, m_names.flags_of(cls), tracer);
}

Outcome Engine::decide_matched(const TensorFacts& t,
                               const std::vector<char>& flags,
                               DecisionTracer& tracer) const {
  Outcome out;
  const size_t rank = t.shape.size();
  if (rank == 0) {
    out.decision =
        RuleDecision{PartitionSpec{}, RuleRef{Decider::scalar, 0, "scalar"}};
    tracer.before_rules(Decider::scalar, t);
    return out;
  }
  if (t.num_elements < m_rules.min_size) {
    out.decision = RuleDecision{PartitionSpec::replicated_of(rank),
                                RuleRef{Decider::min_size, 0, "min_size"}};
    tracer.before_rules(Decider::min_size, t);
    return out;
  }
  // Every tensor that reaches the rules had its name scanned.
  assert(flags.size() == m_rules.rules.size());
  const RuleContext context{m_mesh, m_rules};

  bool decided = false;
  std::optional<size_t> last_fallthrough;
  for (size_t i = 0; i < m_rules.rules.size(); ++i) {
    if (decided && !tracer.shows_untried_rules()) {
      break;
    }
    tracer.rule(i);
    const bool selected = selectors_match(i, t, flags, tracer.why_not());
    tracer.selectors(selected, decided);
    if (decided || !selected) {
      continue;
    }
    const Rule& rule = m_rules.rules[i];
    YieldResult y = apply_yield(context, rule, t, tracer.steps());
    tracer.yield_result(y);
    if (y.status == YieldResult::Status::not_applicable) {
      tracer.outcome(RuleOutcome::not_applicable);
      continue;
    }
    if (y.status == YieldResult::Status::error) {
      out.decision = RuleDecision{PartitionSpec::replicated_of(rank), ref(i)};
      out.problem = y.problem;
      out.detail = std::move(y.detail);
      out.pointer = std::move(y.pointer);
      decided = true;
      tracer.outcome(RuleOutcome::error);
    } else if (rule.fallthrough && y.spec.replicated()) {
      last_fallthrough = i;
      tracer.outcome(RuleOutcome::fell_through);
    } else {
      out.decision = RuleDecision{std::move(y.spec), ref(i)};
      out.unmet_max_bytes = y.unmet_max_bytes;
      out.dropped = std::move(y.dropped);
      decided = true;
      tracer.outcome(RuleOutcome::decided);
    }
  }
  if (decided) {
    return out;
  }
  if (last_fallthrough) {
    // Only fallthrough rules matched, each leaving the tensor replicated:
    // replicated, as eformer's CompositeShardingRule gives P() when every
    // rule does; the last of them decided.
    out.decision = RuleDecision{PartitionSpec::replicated_of(rank),
                                ref(*last_fallthrough)};
    tracer.fell_through_to(*last_fallthrough);
    return out;
  }
  out.decision = RuleDecision{PartitionSpec::replicated_of(rank),
                              RuleRef{Decider::unmatched, 0, "unmatched"}};
  if (m_rules.unmatched == Unmatched::error) {
    out.problem = Problem::unmatched;
  }
  return out;
}

}  // namespace rules_detail

namespace {

using rules_detail::DecisionTracer;
using rules_detail::Engine;
using rules_detail::facts_of;
using rules_detail::NameClassifier;
using rules_detail::Outcome;
using rules_detail::Problem;

// Reports the problem of `outcome` for `tensor`.
void report(const Outcome& outcome,
            const Tensor& tensor,
            const Manifest& manifest,
            const RuleSet& rules,
            Diagnostics& diags) {
  Diagnostic d;
  d.severity = Severity::error;
  d.tensor = std::string(tensor.name);
  switch (outcome.problem) {
    case Problem::none:
      return;
    case Problem::unmatched:
      d.code = "rules.unmatched";
      d.message = fmt::format("no rule matches tensor {}", quote(tensor.name));
      d.location = Location::at(manifest.source, tensor.pointer());
      d.hint = "add a rule for it, or set \"unmatched\": \"replicate\"";
      break;
    case Problem::rank:
      d.code = "rules.rank";
      d.message = fmt::format("{} {} of rank {}",
                              outcome.detail,
                              quote(tensor.name),
                              tensor.rank());
      d.location = Location::at(rules.source, outcome.pointer);
      d.hint =
          fmt::format("the tensor's shape is {}", python_tuple(tensor.shape));
      break;
    case Problem::duplicate_logical:
      d.code = "rules.duplicate-logical-axis";
      d.message = fmt::format("logical axis {} names {} of {}",
                              quote(outcome.pointer),
                              outcome.detail,
                              quote(tensor.name));
      d.location = Location::at(manifest.source,
                                tensor.pointer().empty()
                                    ? std::string()
                                    : tensor.pointer() + "/logical_axes");
      d.hint =
          "a logical axis may name one dim (Flax: \"Unsupported: "
          "Dimensions ... occur more than once\")";
      break;
    case Problem::conflict:
      d.code = "rules.conflict";
      d.message = fmt::format(
          "conflict: {} already has a sharding spec, "
          "cannot replicate ({})",
          quote(tensor.name),
          outcome.decision.rule.description);
      d.location = Location::at(rules.source, outcome.pointer);
      break;
  }
  diags.add(std::move(d));
}

// Elements per device of `spec` over `shape` (every dim divides).
int64_t elements_per_device(ShapeView shape,
                            const PartitionSpec& spec,
                            const Mesh& mesh) {
  int64_t elements = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t shards = 1;
    for (const std::string& a : spec.dims[d].axes) {
      shards *= mesh.find(a)->size;
    }
    elements = checked_mul(elements, ceil_div(shape[d], shards))
                   .value_or(std::numeric_limits<int64_t>::max());
  }
  return elements;
}

// Whether `spec` splits a dim over `axis`.
bool splits_over(const PartitionSpec& spec, std::string_view axis) {
  return std::any_of(
      spec.dims.begin(), spec.dims.end(), [&](const DimSharding& dim) {
        return std::find(dim.axes.begin(), dim.axes.end(), axis)
               != dim.axes.end();
      });
}

// Why rule `rule` of `rules` left tensor `t` unsplit over `axis`: the axis
// it asked for and the preset dropped (`drop`), or a rule that places by
// size (`drop` null).
std::string unsplit_reason(const RuleSet& rules,
                           size_t rule,
                           const Tensor& t,
                           const MeshAxis& axis,
                           const DroppedAxis* drop) {
  if (drop == nullptr) {
    // describe_rule() is "#26 fsdp": the number, then what the rule is.
    const std::string described = describe_rule(rules, rule);
    return fmt::format(
        "rule #{} ({}) decided it by size alone, not by what the tensor is; a "
        "rules file with a rule for it can split it over {}",
        rule,
        described.substr(described.find(' ') + 1),
        quote(axis.name, '\''));
  }
  const int64_t size = t.shape[drop->dim];
  std::string out = fmt::format("rule #{} asks for {} on dim {}",
                                rule,
                                quote(axis.name, '\''),
                                drop->dim);
  if (drop->logical) {
    out += fmt::format(" through logical axis {} (logical_axis_rules entry {})",
                       quote(*drop->logical),
                       drop->logical_rule);
  }
  out += fmt::format(", but {} is not a multiple of {}", size, drop->shards);
  if (drop->shards != axis.size) {
    out += fmt::format(" ({} times the axes kept before it on the dim)",
                       quote(axis.name, '\''));
  }
  if (std::optional<int64_t> padded =
          checked_mul(ceil_div(size, drop->shards), drop->shards)) {
    out += fmt::format("; padded to {} the dim would take it", *padded);
  }
  return out;
}

// rules.unsplit-large (apply_rules): each tensor of at least the threshold,
// split over something, that a preset leaves replicated over a mesh axis it
// splits another tensor over, unless its rule meant that. `first_of[k]` is
// the first tensor of decision k (manifest order).
void warn_unsplit(const Manifest& manifest,
                  const Mesh& mesh,
                  const RuleSet& rules,
                  const RulePlan& plan,
                  const std::vector<Outcome>& outcomes,
                  const std::vector<size_t>& first_of,
                  const ApplyOptions& options,
                  Diagnostics& diags) {
  if (!rules.preset || options.unsplit_warning_bytes.value <= 0
      || mesh.num_devices() <= 1) {
    return;
  }
  const std::vector<Tensor>& tensors = manifest.tensors();
  // The first tensor split over each mesh axis, if any.
  std::vector<std::optional<size_t>> first_split(mesh.axes.size());
  for (size_t k = 0; k < plan.decisions.size(); ++k) {
    for (size_t a = 0; a < mesh.axes.size(); ++a) {
      if (splits_over(plan.decisions[k].spec, mesh.axes[a].name)
          && (!first_split[a] || first_of[k] < *first_split[a])) {
        first_split[a] = first_of[k];
      }
    }
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    const Tensor& tensor = tensors[t];
    if (tensor.num_bytes < options.unsplit_warning_bytes.value) {
      continue;
    }
    const uint32_t k = plan.decision_of[t];
    const RuleDecision& decision = plan.decisions[k];
    // Fully replicated: spec.replicated-large says so.
    if (decision.rule.decider != Decider::rule || decision.spec.replicated()) {
      continue;
    }
    const size_t rule = decision.rule.index;
    const bool by_size = rules_detail::places_by_size(rules.rules[rule].yield);
    for (size_t a = 0; a < mesh.axes.size(); ++a) {
      const MeshAxis& axis = mesh.axes[a];
      if (!first_split[a] || splits_over(decision.spec, axis.name)) {
        continue;
      }
      const std::vector<DroppedAxis>& dropped = outcomes[k].dropped;
      auto drop = std::find_if(
          dropped.begin(), dropped.end(), [&](const DroppedAxis& x) {
            return x.axis == axis.name;
          });
      if (drop == dropped.end() && !by_size) {
        continue;  // the rule's spec or logical axes leave it out
      }
      Diagnostic d;
      d.severity = Severity::warning;
      d.code = "rules.unsplit-large";
      d.message = fmt::format(
          "tensor {} ({} bytes) is replicated over mesh axis {} ({}), which "
          "the preset splits other tensors over (first: {})",
          quote(tensor.name),
          tensor.num_bytes,
          quote(axis.name, '\''),
          axis.size,
          quote(tensors[*first_split[a]].name));
      d.hint =
          fmt::format("{}; the warning starts at {} bytes ({})",
                      unsplit_reason(rules,
                                     rule,
                                     tensor,
                                     axis,
                                     drop == dropped.end() ? nullptr : &*drop),
                      options.unsplit_warning_bytes.value,
                      to_string(options.unsplit_warning_bytes.at));
      d.location = Location::at(manifest.source, tensor.pointer());
      d.tensor = std::string(tensor.name);
      if (drop != dropped.end()) {
        d.dim = static_cast<int64_t>(drop->dim);
      }
      diags.add(std::move(d));
    }
  }
}

}  // namespace

std::optional<RulePlan> apply_rules(const Manifest& manifest,
                                    const Mesh& mesh,
                                    const RuleSet& rules,
                                    Diagnostics& diags,
                                    const ApplyOptions& options) {
  const RuleKeys* keys = options.keys;
  assert(keys == nullptr || keys->key_of.size() == manifest.size());
  Engine engine(mesh, rules, diags);
  if (!engine.prepare(keys == nullptr)) {
    return std::nullopt;
  }
  const std::vector<Tensor>& tensors = manifest.tensors();
  RulePlan plan;
  // reserve + push_back: GCC 12 -O3 warns (-Wnull-dereference, a false
  // positive) on resize() of a vector<uint32_t>.
  plan.decision_of.reserve(tensors.size());
  std::vector<Outcome> outcomes;  // parallel to plan.decisions
  std::vector<size_t> first_of;   // the first tensor of each decision
  std::unordered_map<Key, uint32_t, KeyHash, KeyEqual> cache;
  const bool logical = engine.reads_logical_axes();
  // Per memory rule: its limit, the tensors over it, and the largest of them.
  struct Unmet {
    int64_t max_bytes = 0;
    size_t tensors = 0;
    size_t largest = 0;
    int64_t largest_bytes = -1;
  };
  std::unordered_map<size_t, Unmet> unmet;
  DecisionTracer no_trace;

  auto add_decision = [&](Outcome outcome, size_t tensor) {
    const auto index = static_cast<uint32_t>(plan.decisions.size());
    plan.decisions.push_back(outcome.decision);
    outcomes.push_back(std::move(outcome));
    first_of.push_back(tensor);
    return index;
  };
  // With the keys given, each key's decision (+1; 0: not decided yet).
  std::vector<uint32_t> decision_of_key(keys ? keys->keys() : 0, 0);

  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    uint32_t index = 0;
    if (keys) {
      const uint32_t k = keys->key_of[i];
      if (decision_of_key[k] == 0) {
        decision_of_key[k] =
            1
            + add_decision(
                engine.decide_matched(facts_of(t), keys->matches[k], no_trace),
                i);
      }
      index = decision_of_key[k] - 1;
    } else {
      uint64_t cls = NameClassifier::k_no_scan_class;
      if (t.rank() > 0 && t.num_elements >= rules.min_size) {
        cls = engine.classify(t.name);
      }
      const KeyView key{cls,
                        t.dtype,
                        t.shape,
                        logical && t.logical_axes ? &*t.logical_axes : nullptr};
      if (auto it = cache.find(key); it != cache.end()) {
        index = it->second;
      } else {
        index = add_decision(engine.decide(facts_of(t), cls, no_trace), i);
        cache.emplace(Key(key), index);
      }
    }
    plan.decision_of.push_back(index);
    const Outcome& outcome = outcomes[index];
    if (outcome.problem != Problem::none) {
      report(outcome, t, manifest, rules, diags);
    }
    if (outcome.unmet_max_bytes) {
      const int64_t bytes =
          bytes_for(elements_per_device(t.shape, outcome.decision.spec, mesh),
                    t.dtype)
              .value_or(std::numeric_limits<int64_t>::max());
      Unmet& u = unmet[outcome.decision.rule.index];
      u.max_bytes = *outcome.unmet_max_bytes;
      ++u.tensors;
      if (bytes > u.largest_bytes) {
        u.largest_bytes = bytes;
        u.largest = i;
      }
    }
  }

  std::vector<size_t> unmet_rules;
  unmet_rules.reserve(unmet.size());
  for (const auto& [rule, u] : unmet) {
    unmet_rules.push_back(rule);
  }
  std::sort(unmet_rules.begin(), unmet_rules.end());
  for (size_t r : unmet_rules) {
    const Unmet& u = unmet[r];
    Diagnostic& d = diags.warning(
        "rules.memory-unmet",
        fmt::format("{} tensor{} still exceed{} max_bytes_per_device {} "
                    "with every axis that divides spent ({}); the largest, "
                    "{}, holds {} bytes per device",
                    u.tensors,
                    u.tensors == 1 ? "" : "s",
                    u.tensors == 1 ? "s" : "",
                    u.max_bytes,
                    describe_rule(rules, r),
                    quote(tensors[u.largest].name),
                    u.largest_bytes),
        Location::at(rules.source,
                     rules.rules[r].pointer + "/memory/max_bytes_per_device"));
    d.tensor = std::string(tensors[u.largest].name);
  }
  warn_unsplit(manifest, mesh, rules, plan, outcomes, first_of, options, diags);
  return plan;
}

std::optional<RuleKeys> rule_keys(const Manifest& manifest,
                                  const RuleSet& rules,
                                  Diagnostics& diags) {
  NameClassifier names(rules);
  if (!names.compile(diags)) {
    return std::nullopt;
  }
  const bool logical = rules_detail::reads_logical_axes(rules);
  RuleKeys out;
  out.key_of.reserve(manifest.size());
  std::unordered_map<Key, uint32_t, KeyHash, KeyEqual> index_of;
  for (const Tensor& t : manifest.tensors()) {
    const bool scanned = t.rank() > 0 && t.num_elements >= rules.min_size;
    const uint64_t cls =
        scanned ? names.classify(t.name) : NameClassifier::k_no_scan_class;
    const KeyView key{cls,
                      t.dtype,
                      t.shape,
                      logical && t.logical_axes ? &*t.logical_axes : nullptr};
    auto it = index_of.find(key);
    if (it == index_of.end()) {
      it = index_of.emplace(Key(key), static_cast<uint32_t>(out.keys())).first;
      out.matches.push_back(scanned ? names.flags_of(cls)
                                    : std::vector<char>());
    }
    out.key_of.push_back(it->second);
  }
  return out;
}

}  // namespace shardplan
