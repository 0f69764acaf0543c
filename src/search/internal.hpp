#pragma once

// Layer 6, internal: what the files of the search share
// (include/shardplan/search.hpp, docs/search.md).
//
//   search/policy.cpp      the search's policy: objectives and drop reasons
//                          by name, the default axes and DCN axes, the
//                          workload variations, the slices of --devices;
//                          check_remat_policies, slice_memory,
//                          variation_workload
//   search/candidates.cpp  the meshes of a slice (MeshChoice,
//                          enumerate_meshes): every factorisation of its
//                          devices over the axes (and of its slices over the
//                          DCN axes) that the model's dims allow
//   search/classes.cpp     the manifest's tensors folded into classes
//                          (fold_tensor_classes), per expert rank count
//   search/search.cpp      search_meshes: the work shared across meshes, each
//                          mesh evaluated for every variation, the ranking
//   search/winner.cpp      the winner laid out (lay_out_winner) and planned
//                          as `plan` plans it (plan_winner)

#include <shardplan/diag.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/models.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/search.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/topology.hpp>

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan::search_detail {

inline bool has_name(const std::vector<std::string>& names,
                     std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// One mesh: axis sizes in options.axes order (within a slice), and the
// slices' factors over the DCN axes.
struct MeshChoice {
  std::string mesh;
  std::string dcn;
  const Topology* topology = nullptr;  // the slice it is laid out on
};

// Every mesh of `topology` over `axes` (within a slice) and `dcn_axes`
// (across slices), each axis's size dividing what `model` allows: tensor
// axes the heads, expert axes the experts, stage axes the layers.
std::vector<MeshChoice> enumerate_meshes(
    const ModelConfig& model,
    const Topology& topology,
    const std::vector<std::string>& axes,
    const std::vector<std::string>& dcn_axes);

// Reports (false) the first of `remat` that is no remat policy
// [workload.unknown-remat], at options.workload.remat's location.
bool check_remat_policies(const std::vector<std::string>& remat,
                          const SearchOptions& options,
                          Diagnostics& diags);

// options.memory on `slice`: the slice's HBM per device, reported at
// "SOURCES.TOPOLOGY NAME", unless the caller gave one.
MemoryOptions slice_memory(const SearchOptions& options, const Topology& slice);

// A mesh as the rules plan it: what decides the activation layout.
struct LaidOut {
  const RuleSet& rules;
  const Mesh& mesh;
  const AxisRoles& roles;
};

// The workload of one variation: options.workload with `remat`, and `batch`
// as its per-device batch unless empty; its mesh reported at `mesh_at`;
// its activation layout the rules' on the mesh (residual_layout) unless a
// flag set it.
Workload variation_workload(const SearchOptions& options,
                            const std::string& remat,
                            const std::string& batch,
                            const Location& mesh_at,
                            const LaidOut& laid_out);

// The winner of `result` (which has one) laid out on its slice, one of
// `topologies`, with options.winner.sources; the layout's diagnostics go to
// `layout_diags`.
void lay_out_winner(std::span<const Topology> topologies,
                    const SearchOptions& options,
                    SearchResult& result,
                    Diagnostics& layout_diags);

// The winner of `result`, laid out (lay_out_winner), planned over every
// tensor of `manifest` as `plan` plans its mesh, reporting to `diags` as
// that plan does, at options.winner.sources; nullopt after an error.
std::optional<WinnerPlan> plan_winner(const Manifest& manifest,
                                      const ModelConfig& model,
                                      const RuleSet& rules,
                                      const SearchOptions& options,
                                      const SearchResult& result,
                                      Diagnostics& diags);

}  // namespace shardplan::search_detail
