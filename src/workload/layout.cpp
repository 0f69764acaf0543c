// The residual stream's layout over the tensor axes
// (include/shardplan/workload.hpp; docs/memory.md, "Activation layout"):
// replicated, split by token (sequence parallelism) or by embed (MaxText's
// activation_embed rule), and which one a rules file gives.

#include <shardplan/workload.hpp>

#include <fmt/format.h>

#include <array>
#include <string_view>

namespace shardplan {

namespace {

constexpr std::array<Named<ResidualLayout>, 3> k_layouts{{
    {ResidualLayout::replicated, "replicated"},
    {ResidualLayout::sequence, "sequence"},
    {ResidualLayout::embed, "embed"},
}};

// MaxText's logical axis of the residual stream's embed dim
// (layers/decoders.py constrains each layer's input to activation_batch,
// activation_norm_length, activation_embed).
constexpr std::string_view k_embed_axis = "activation_embed";

}  // namespace

std::string_view to_string(ResidualLayout layout) {
  return name_in(k_layouts, layout);
}

std::optional<ResidualLayout> parse_residual_layout(std::string_view text) {
  return value_in(k_layouts, text);
}

Sourced<ResidualLayout> residual_layout(const Sourced<ResidualLayout>& given,
                                        const RuleSet& rules,
                                        const Mesh& mesh,
                                        const AxisRoles& roles) {
  if (!given.at.empty()) {
    return given;
  }
  for (const LogicalAxisRule& rule : rules.logical_axis_rules) {
    if (rule.name != k_embed_axis) {
      continue;
    }
    // As the rules engine reads an entry: the axes the mesh lacks drop
    // out, and an entry left with none gives way to the next of its name.
    bool any_axis = false;
    for (const AxisRef& axis : rule.axes) {
      const MeshAxis* found = mesh.find(axis.name);
      if (found == nullptr) {
        continue;
      }
      any_axis = true;
      if (found->size > 1 && roles.role_of(axis.name) == AxisRole::tensor) {
        return {ResidualLayout::embed,
                Location::at(rules.source, rule.pointer)};
      }
    }
    if (any_axis || rule.axes.empty()) {
      break;
    }
  }
  return given;
}

}  // namespace shardplan
