// The winner of a search laid out on its slice and planned over every
// tensor as `plan` plans its mesh (src/search/internal.hpp): what html's
// device grid and the paste-back documents show, without laying it out or
// planning it again.

#include "search/internal.hpp"

#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/search.hpp>
#include <shardplan/validate.hpp>
#include <shardplan/workload.hpp>

#include <fmt/format.h>

#include <cassert>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace shardplan::search_detail {

void lay_out_winner(std::span<const Topology> topologies,
                    const SearchOptions& options,
                    SearchResult& result,
                    Diagnostics& layout_diags) {
  const SearchCandidate* winner = result.winner();
  assert(winner != nullptr);
  for (const Topology& t : topologies) {
    if (t.name == winner->topology) {
      result.winner_slice = &t;
    }
  }
  result.winner_mesh = place_mesh(MeshInput{winner->mesh,
                                            winner->dcn,
                                            {},
                                            result.winner_slice,
                                            std::nullopt,
                                            options.allow_split_physical_axes,
                                            options.winner.sources},
                                  layout_diags);
}

std::optional<WinnerPlan> plan_winner(const Manifest& manifest,
                                      const ModelConfig& model,
                                      const RuleSet& rules,
                                      const SearchOptions& options,
                                      const SearchResult& result,
                                      Diagnostics& diags) {
  const SearchCandidate& winner = *result.winner();
  const Topology& slice = *result.winner_slice;
  const PlacedMesh& placed = *result.winner_mesh;
  const Mesh& mesh = placed.mesh;
  const MeshSources& sources = options.winner.sources;
  const Location mesh_at = Location::of(sources.mesh);
  // Where the slice's device count comes from: the topology source and
  // the slice's name.
  const Location slice_at =
      Location::of(fmt::format("{} {}", sources.topology, slice.name));
  // The axis roles by name, each located at the mesh that names its axes;
  // then the workload's activations on it.
  const AxisRoleSources role_sources{
      mesh_at, mesh_at, mesh_at, mesh_at, mesh_at};
  std::optional<AxisRoles> roles =
      resolve_axis_roles(mesh, AxisRoles{}, role_sources, diags);
  if (!roles) {
    return std::nullopt;
  }
  std::optional<ActivationEstimate> activations =
      estimate_activations(model,
                           mesh,
                           *roles,
                           variation_workload(options,
                                              winner.remat,
                                              winner.per_device_batch,
                                              mesh_at,
                                              {rules, mesh, *roles}),
                           diags);
  if (!activations) {
    return std::nullopt;
  }
  // The rules applied to every tensor and their specs validated, warning
  // about large tensors left replicated.
  ValidateOptions validate;
  validate.replicated_warning_bytes.at = options.winner.replicated_warning_at;
  validate.mesh_at = mesh_at;
  validate.topology_devices = {slice.devices(), slice_at};
  std::optional<RulePlan> plan =
      apply_rules(manifest,
                  mesh,
                  rules,
                  diags,
                  ApplyOptions{validate.replicated_warning_bytes});
  if (!plan) {
    return std::nullopt;
  }
  std::vector<TensorSharding> shardings =
      validate_planned(manifest,
                       mesh,
                       plan->specs(),
                       Location::of(rules.source),
                       validate,
                       diags);
  // Memory, with the activations, and the step.
  MemoryOptions m = slice_memory(options, slice);
  m.roles = *roles;
  m.stage_axes_at = mesh_at;
  m.expert_axes_at = mesh_at;
  m.data_axes.at = options.winner.data_axes_at;
  m.layers = model.layers;
  m.mtp_layers = model.mtp_layers;
  m.experts = model.experts;
  for (const StageActivations& stage : activations->per_stage) {
    m.activations.push_back(activation_load(stage));
  }
  Diagnostics memory_diags;
  std::optional<MemoryEstimate> memory =
      estimate_memory(manifest, mesh, shardings, m, memory_diags);
  for (const Diagnostic& d : memory_diags.items()) {
    diags.add(d);
  }
  if (!memory) {
    return std::nullopt;
  }
  std::optional<StepEstimate> step = estimate_step(
      model,
      mesh,
      *roles,
      *activations,
      step_inputs_for(model, slice, placed.layout.links, *memory, mesh_at),
      options.step,
      diags);
  if (!step) {
    return std::nullopt;
  }
  return WinnerPlan{std::move(*plan),
                    std::move(shardings),
                    std::move(*activations),
                    std::move(*memory),
                    std::move(*step)};
}

}  // namespace shardplan::search_detail
