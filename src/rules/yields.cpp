// The yields of the rules engine (include/shardplan/rules.hpp, docs/rules.md):
// their names, each one's checks against the mesh, and what each one gives
// for one tensor, through the seed algorithms of rules/algorithms.cpp.
//
// Both are a std::visit over RuleYield with one overload per alternative and
// no catch-all: an alternative added to RuleYield without its check or its
// application does not compile. The names come from each alternative's
// k_name, so the list follows the variant.

#include "rules/internal.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <utility>
#include <variant>

namespace shardplan {

namespace {

// The k_name of every alternative of RuleYield, in the variant's order.
template <size_t... I>
constexpr std::array<std::string_view, sizeof...(I)> alternative_names(
    std::index_sequence<I...> /*indices*/) {
  return {std::variant_alternative_t<I, RuleYield>::k_name...};
}

constexpr std::array k_yield_names = alternative_names(
    std::make_index_sequence<std::variant_size_v<RuleYield>>{});

constexpr bool distinct(
    const std::array<std::string_view, std::variant_size_v<RuleYield>>& a) {
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (a[i] == a[j]) {
        return false;
      }
    }
  }
  return true;
}
static_assert(distinct(k_yield_names), "two yields of RuleYield share a name");

}  // namespace

std::string_view yield_name(const RuleYield& yield) {
  return k_yield_names[yield.index()];
}

const std::vector<std::string>& yield_names() {
  static const std::vector<std::string> names(k_yield_names.begin(),
                                              k_yield_names.end());
  return names;
}

namespace {

template <size_t... I>
std::optional<RuleYield> make_yield_of(std::string_view name,
                                       std::index_sequence<I...> /*indices*/) {
  std::optional<RuleYield> out;
  ((name == k_yield_names[I] ? (void)out.emplace(std::in_place_index<I>)
                             : (void)0),
   ...);
  return out;
}

}  // namespace

std::optional<RuleYield> make_yield(std::string_view name) {
  return make_yield_of(
      name, std::make_index_sequence<std::variant_size_v<RuleYield>>{});
}

namespace rules_detail {

std::string shape_pattern_text(const ShapePattern& pattern) {
  std::vector<std::string> parts;
  parts.reserve(pattern.size());
  for (const std::optional<int64_t>& d : pattern) {
    parts.push_back(d ? std::to_string(*d) : "null");
  }
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

// ---------------------------------------------------------------------------
// Checks.

void report_bad_value(const RuleSet& rules,
                      const std::string& pointer,
                      std::string message,
                      Diagnostics& diags) {
  diags.error("rules.bad-value",
              std::move(message),
              Location::at(rules.source, pointer));
}

bool check_axes(const RuleContext& context,
                const std::vector<AxisRef>& axes,
                std::string_view what,
                bool report_unknown,
                Diagnostics& diags) {
  bool ok = true;
  for (size_t i = 0; i < axes.size(); ++i) {
    const AxisRef& a = axes[i];
    for (size_t j = 0; j < i; ++j) {
      if (axes[j].name == a.name) {
        diags.error(
            "rules.duplicate-axis",
            fmt::format("axis {} appears twice in {}", quote(a.name), what),
            Location::at(context.rules.source, a.pointer));
        ok = false;
      }
    }
    if (report_unknown && context.mesh.find(a.name) == nullptr) {
      Diagnostic& d =
          diags.error("rules.unknown-axis",
                      fmt::format("unknown axis {}", quote(a.name)),
                      Location::at(context.rules.source, a.pointer));
      const std::vector<std::string> names = context.mesh.axis_names();
      std::string near = closest_match(a.name, names);
      if (!near.empty()) {
        d.hint = fmt::format("did you mean {}?", quote(near));
      } else {
        std::vector<std::string> quoted;
        quoted.reserve(names.size());
        for (const std::string& n : names) {
          quoted.push_back(quote(n));
        }
        d.hint = fmt::format("the mesh's axes are {}", fmt::join(quoted, ", "));
      }
      ok = false;
    }
  }
  return ok;
}

namespace {

// The checks of one rule's yield, one overload per alternative: each reports
// its problems and returns false if any. A user's file must name only axes
// of the mesh; a preset may name others (it drops them).
class CheckYield {
 public:
  CheckYield(const RuleContext& context, const Rule& rule, Diagnostics& diags)
      : m_context(context), m_rule(rule), m_diags(diags) {}

  bool operator()(const SpecYield& s) const { return spec_ok(s.spec); }
  bool operator()(const ReplicateYield& /*r*/) const { return true; }
  // Its names are the tensor's, or resolved by logical_axis_rules (checked
  // with the rule set).
  bool operator()(const LogicalAxesYield& /*l*/) const { return true; }
  bool operator()(const FsdpYield& f) const {
    bool ok = axes_ok(f.axes, "the fsdp axis");
    if (f.axes.empty()) {
      bad_value("/fsdp/axis", "fsdp needs an axis");
      ok = false;
    }
    if (!(f.min_size_mb >= 0) || !std::isfinite(f.min_size_mb)) {
      bad_value("/fsdp/min_size_mb",
                fmt::format("min_size_mb must be a number >= 0, got {}",
                            f.min_size_mb));
      ok = false;
    }
    return ok;
  }
  bool operator()(const AutoYield& a) const {
    bool ok = !a.axes || axes_ok(*a.axes, "the axes of auto");
    if (a.min_shard_size && *a.min_shard_size < 0) {
      bad_value("/auto/min_shard_size", "min_shard_size must be >= 0");
      ok = false;
    }
    return ok;
  }
  bool operator()(const MemoryYield& m) const {
    bool ok = !m.axes || axes_ok(*m.axes, "the axes of memory");
    if (m.max_bytes_per_device < 0) {
      bad_value("/memory/max_bytes_per_device",
                "max_bytes_per_device must be >= 0");
      ok = false;
    }
    return ok;
  }
  bool operator()(const MeshHelperYield& h) const {
    if (h.min_shard_size < 0) {
      bad_value("/mesh_helper/min_shard_size", "min_shard_size must be >= 0");
      return false;
    }
    return true;
  }
  bool operator()(const ShapePatternsYield& p) const {
    bool ok = true;
    for (const ShapePatternsYield::Entry& e : p.patterns) {
      ok = spec_ok(e.spec) && ok;
    }
    return ok;
  }

 private:
  bool axes_ok(const std::vector<AxisRef>& axes, std::string_view what) const {
    return check_axes(m_context, axes, what, !m_context.rules.preset, m_diags);
  }
  bool spec_ok(const RuleSpec& spec) const {
    std::vector<AxisRef> all;
    for (const std::vector<AxisRef>& dim : spec.dims) {
      all.insert(all.end(), dim.begin(), dim.end());
    }
    return axes_ok(all, "one spec");
  }
  // `field`: the key of the yield and the value, "/fsdp/axis".
  void bad_value(std::string_view field, std::string message) const {
    report_bad_value(m_context.rules,
                     m_rule.pointer + std::string(field),
                     std::move(message),
                     m_diags);
  }

  const RuleContext& m_context;
  const Rule& m_rule;
  Diagnostics& m_diags;
};

}  // namespace

bool check_yield(const RuleContext& context,
                 const Rule& rule,
                 Diagnostics& diags) {
  return std::visit(CheckYield(context, rule, diags), rule.yield);
}

// ---------------------------------------------------------------------------
// What each yield gives for one tensor.

namespace {

// One rule's yield applied to one tensor, one overload per alternative.
class ApplyYield {
 public:
  ApplyYield(const RuleContext& context,
             const Rule& rule,
             const TensorFacts& t,
             Trace* steps)
      : m_mesh(context.mesh),
        m_rules(context.rules),
        m_rule(rule),
        m_t(t),
        m_rank(t.shape.size()),
        m_steps(steps) {}

  YieldResult operator()(const SpecYield& s) const {
    return apply_spec(s.spec);
  }
  YieldResult operator()(const ReplicateYield& r) const;
  YieldResult operator()(const LogicalAxesYield& l) const;
  YieldResult operator()(const FsdpYield& f) const {
    return gives(fsdp_tactic(m_t.shape,
                             m_t.dtype,
                             PartitionSpec::replicated_of(m_rank),
                             names_of(f.axes),
                             f.min_size_mb,
                             m_mesh,
                             m_steps));
  }
  YieldResult operator()(const AutoYield& a) const {
    return gives(auto_spec(m_t.shape,
                           axes_or_mesh(a.axes),
                           a.min_shard_size.value_or(m_mesh.num_devices()),
                           a.reverse,
                           m_mesh,
                           m_steps));
  }
  YieldResult operator()(const MemoryYield& m) const {
    bool fits = true;
    YieldResult out = gives(memory_spec(m_t.shape,
                                        m_t.dtype,
                                        m.max_bytes_per_device,
                                        axes_or_mesh(m.axes),
                                        m_mesh,
                                        &fits,
                                        m_steps));
    if (!fits) {
      out.unmet_max_bytes = m.max_bytes_per_device;
    }
    return out;
  }
  YieldResult operator()(const MeshHelperYield& h) const {
    return gives(mesh_helper_spec(m_t.shape,
                                  suggest_methods(m_t.shape, m_mesh),
                                  h.min_shard_size,
                                  m_mesh,
                                  m_steps));
  }
  YieldResult operator()(const ShapePatternsYield& p) const;

 private:
  static YieldResult gives(PartitionSpec spec) {
    YieldResult out;
    out.spec = std::move(spec);
    return out;
  }
  // A spec as a rule writes it.
  YieldResult apply_spec(const RuleSpec& spec) const;
  // The names of `axes`; in a preset without those the mesh lacks.
  std::vector<std::string> names_of(const std::vector<AxisRef>& axes) const;
  std::vector<std::string> axes_or_mesh(
      const std::optional<std::vector<AxisRef>>& axes) const {
    return axes ? names_of(*axes) : m_mesh.axis_names();
  }

  const Mesh& m_mesh;
  const RuleSet& m_rules;
  const Rule& m_rule;
  const TensorFacts& m_t;
  size_t m_rank = 0;
  Trace* m_steps = nullptr;
};

std::vector<std::string> ApplyYield::names_of(
    const std::vector<AxisRef>& axes) const {
  std::vector<std::string> out;
  out.reserve(axes.size());
  for (const AxisRef& a : axes) {
    if (m_rules.preset && m_mesh.find(a.name) == nullptr) {
      if (m_steps != nullptr) {
        m_steps->push_back(TraceStep{
            fmt::format("axis {} is not in the mesh: dropped (preset)", a.name),
            std::nullopt,
            {a.name},
            false,
            false});
      }
      continue;
    }
    out.push_back(a.name);
  }
  return out;
}

YieldResult ApplyYield::apply_spec(const RuleSpec& spec) const {
  YieldResult out;
  if (spec.dims.size() > m_rank) {
    PartitionSpec written;
    for (const std::vector<AxisRef>& dim : spec.dims) {
      DimSharding d;
      for (const AxisRef& a : dim) {
        d.axes.push_back(a.name);
      }
      written.dims.push_back(std::move(d));
    }
    const std::string text =
        fmt::format("sharding {} is only valid for values of rank at least {}",
                    to_python(written),
                    spec.dims.size());
    if (m_rules.preset) {
      out.status = YieldResult::Status::not_applicable;
      out.reason = fmt::format("{}; the tensor's rank is {}", text, m_rank);
    } else {
      // eformer's match_partition_rules cuts such a spec to the rank; JAX
      // refuses it, and so do we.
      out.status = YieldResult::Status::error;
      out.problem = Problem::rank;
      out.detail = text + ", but was applied to";
      out.pointer = spec.pointer;
      out.reason = fmt::format("{}, but the tensor's rank is {}", text, m_rank);
    }
    return out;
  }
  out.spec = PartitionSpec::replicated_of(m_rank);
  for (size_t d = 0; d < spec.dims.size(); ++d) {
    std::vector<std::string> axes = names_of(spec.dims[d]);
    if (m_rules.preset) {
      // Presets adapt: size-1 axes dropped, then any axis whose size (times
      // those kept before it) does not divide the dim.
      std::vector<std::string> kept;
      int64_t product = 1;
      for (const std::string& a : axes) {
        const int64_t size = m_mesh.find(a)->size;
        if (size == 1) {
          if (m_steps != nullptr) {
            m_steps->push_back(TraceStep{
                fmt::format(
                    "dim {}: axis {} has size 1: dropped (preset)", d, a),
                static_cast<int64_t>(d),
                {a},
                std::nullopt,
                false});
          }
          continue;
        }
        const bool divides = m_t.shape[d] % (product * size) == 0;
        if (!divides) {
          out.dropped.push_back(DroppedAxis{a, d, product * size, {}, 0});
        }
        if (m_steps != nullptr) {
          m_steps->push_back(TraceStep{
              fmt::format("dim {} ({}): {} ({}) {}",
                          d,
                          m_t.shape[d],
                          a,
                          size,
                          divides ? "divides it"
                                  : "does not divide it: dropped (preset)"),
              static_cast<int64_t>(d),
              {a},
              divides,
              divides});
        }
        if (divides) {
          product *= size;
          kept.push_back(a);
        }
      }
      axes = std::move(kept);
    }
    out.spec.dims[d].axes = std::move(axes);
  }
  return out;
}

YieldResult ApplyYield::operator()(const ReplicateYield& /*r*/) const {
  // A tensor reaches a rule unsplit, so nnx's conflict cannot arise here.
  std::optional<PartitionSpec> spec =
      replicate_tactic(PartitionSpec::replicated_of(m_rank), m_rank);
  if (!spec) {
    YieldResult out;
    out.status = YieldResult::Status::error;
    out.problem = Problem::conflict;
    out.pointer = m_rule.pointer;
    out.spec = PartitionSpec::replicated_of(m_rank);
    return out;
  }
  return gives(std::move(*spec));
}

YieldResult ApplyYield::operator()(const LogicalAxesYield& l) const {
  YieldResult out;
  LogicalAxes names;
  if (l.from_manifest) {
    if (m_t.logical_axes == nullptr) {
      out.status = YieldResult::Status::not_applicable;
      out.reason = "the tensor has no logical_axes in the manifest";
      return out;
    }
    names = *m_t.logical_axes;
  } else {
    if (l.names.size() > m_rank) {
      out.status = m_rules.preset ? YieldResult::Status::not_applicable
                                  : YieldResult::Status::error;
      out.problem = m_rules.preset ? Problem::none : Problem::rank;
      out.detail = fmt::format(
          "{} logical axis names are only valid for values of rank at "
          "least {}, but were applied to",
          l.names.size(),
          l.names.size());
      out.pointer = l.pointer;
      out.reason = fmt::format(
          "{} logical axis names, but the tensor's "
          "rank is {}",
          l.names.size(),
          m_rank);
      out.spec = PartitionSpec::replicated_of(m_rank);
      return out;
    }
    names = l.names;
    names.resize(m_rank);
  }
  // Flax refuses a name on two dims ("Dimensions ... occur more than once").
  for (size_t i = 0; i < names.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (names[i] && names[j] && *names[i] == *names[j]) {
        out.status = YieldResult::Status::error;
        out.problem = Problem::duplicate_logical;
        out.detail = fmt::format("dims {} and {}", j, i);
        out.pointer = *names[i];
        out.reason = fmt::format(
            "logical axis {} names dims {} and {}", quote(*names[i]), j, i);
        out.spec = PartitionSpec::replicated_of(m_rank);
        return out;
      }
    }
  }
  out.spec = resolve_logical_axes(names,
                                  m_t.shape,
                                  m_rules.logical_axis_rules,
                                  m_mesh,
                                  m_rules.preset,
                                  m_steps,
                                  &out.dropped);
  return out;
}

YieldResult ApplyYield::operator()(const ShapePatternsYield& p) const {
  for (size_t k = 0; k < p.patterns.size(); ++k) {
    const ShapePatternsYield::Entry& e = p.patterns[k];
    std::string why;
    if (shape_matches(m_t.shape, e.shape, &why)) {
      if (m_steps != nullptr) {
        m_steps->push_back(TraceStep{
            fmt::format(
                "shape pattern {} {} matches", k, shape_pattern_text(e.shape)),
            std::nullopt,
            {},
            true,
            false});
      }
      return apply_spec(e.spec);
    }
    if (m_steps != nullptr) {
      m_steps->push_back(TraceStep{
          fmt::format(
              "shape pattern {} {}: {}", k, shape_pattern_text(e.shape), why),
          std::nullopt,
          {},
          false,
          false});
    }
  }
  if (m_steps != nullptr) {
    m_steps->push_back(TraceStep{"no shape pattern matches: replicated",
                                 std::nullopt,
                                 {},
                                 std::nullopt,
                                 false});
  }
  return gives(PartitionSpec::replicated_of(m_rank));
}

// Whether a yield places tensors by size alone, one overload per
// alternative.
struct PlacesBySize {
  bool operator()(const SpecYield& /*s*/) const { return false; }
  bool operator()(const ReplicateYield& /*r*/) const { return false; }
  bool operator()(const LogicalAxesYield& /*l*/) const { return false; }
  bool operator()(const FsdpYield& /*f*/) const { return true; }
  bool operator()(const AutoYield& /*a*/) const { return true; }
  bool operator()(const MemoryYield& /*m*/) const { return true; }
  bool operator()(const MeshHelperYield& /*h*/) const { return true; }
  // A spec per shape: the rule says what each dim gets.
  bool operator()(const ShapePatternsYield& /*p*/) const { return false; }
};

}  // namespace

bool places_by_size(const RuleYield& yield) {
  return std::visit(PlacesBySize{}, yield);
}

YieldResult apply_yield(const RuleContext& context,
                        const Rule& rule,
                        const TensorFacts& t,
                        Trace* steps) {
  return std::visit(ApplyYield(context, rule, t, steps), rule.yield);
}

}  // namespace rules_detail

}  // namespace shardplan
