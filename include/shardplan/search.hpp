#pragma once

// Layer 6: `shardplan search` (docs/search.md): the
// meshes of a topology for a model and a workload, each laid out as JAX
// would, planned with a rule preset, its memory (with activations) and its
// step estimated, ranked; the winner laid out and, when asked, planned over
// every tensor as `plan` plans it. The search's policy (default axes, the
// workload variations, the slices of --devices) is here too; the files are
// listed in src/search/internal.hpp.
//
// What it offers, by the file that implements it (the files share
// src/search/internal.hpp; candidates.cpp lists a slice's meshes and
// winner.cpp lays out and plans the winner):
//   search/policy.cpp
//     SearchObjective, parse_search_objective, DropReason, to_string
//     resolve_search_axes      the default axes and DCN axes
//     SearchVariations, search_variations   the workloads tried
//     device_slices            the catalogue slices --devices names
//   search/classes.cpp
//     TensorClasses, fold_tensor_classes   tensors that plan alike
//   search/search.cpp
//     SearchOptions, WinnerOptions, SearchCandidate, WinnerPlan
//     SearchResult, ranked, winner   the candidates, ranked
//     search_meshes            the search

#include <shardplan/diag.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/models.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/sharding.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/topology.hpp>
#include <shardplan/workload.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// What ranks the candidates that fit: tokens per second (the default), the
// step time, memory per device (least first) or MFU.
enum class SearchObjective { tokens, step, memory, mfu };
std::string_view to_string(SearchObjective objective);
std::optional<SearchObjective> parse_search_objective(std::string_view text);

// How the winner (rank 1) comes back: always laid out on its slice
// (SearchResult::winner_mesh); with `plan`, planned over every tensor of the
// manifest as `plan` plans a mesh (SearchResult::winner_plan), its
// diagnostics reported to the caller as that plan's.
struct WinnerOptions {
  bool plan = false;
  // Where the winner's plan reports: the caller's names for the inputs of
  // the plan it is (its mesh and slice), and where the replicated-tensor
  // threshold and the data axes would come from (the command line passes
  // plan's flags).
  MeshSources sources;
  Location replicated_warning_at;
  Location data_axes_at;
};

struct SearchOptions {
  // The mesh axes to assign the devices of a slice to, in mesh order
  // (empty: resolve_search_axes gives the default: fsdp, tp, and ep for a
  // model with experts).
  std::vector<std::string> axes;
  // The axes the slices of a multi-slice topology are assigned to (DCN),
  // every factorisation of the slice count over them; one that `axes` lacks
  // leads the mesh (dp). resolve_search_axes's default, for empty: dp, and
  // the axes of `axes` with the data or stage role (fsdp, pp): what
  // MaxText's dcn_*_parallelism keys are set to in practice.
  // Where they came from (the command line passes "--dcn-axes").
  Sourced<std::vector<std::string>> dcn_axes{{"dp"}, {}};
  // The default axes take MaxText's names (fsdp, tensor, expert; data
  // across slices): MaxText's rules split over those names only.
  bool maxtext_axis_names = false;
  // Workload variations (search_variations): every remat policy (empty:
  // the workload's) x every per-device batch (empty: the workload's, its
  // per_device_batch or "" for its global batch).
  std::vector<std::string> remat;
  std::vector<std::string> per_device_batch;
  Workload workload;  // the base workload (seq, batch, microbatches...)
  // recipe, zero, headroom (roles are set here); hbm_bytes, when not
  // given, each slice's (reported at "SOURCES.TOPOLOGY NAME").
  MemoryOptions memory;
  StepOptions step;
  bool allow_split_physical_axes = false;
  SearchObjective objective = SearchObjective::tokens;
  // Called after each mesh with (meshes done, meshes in all); may be empty.
  std::function<void(int64_t, int64_t)> progress;
  // Plan, validate and estimate each mesh over the manifest's tensor
  // classes (fold_tensor_classes), not its tensors: the same figures, in
  // time that grows with the classes. false: every tensor is walked on
  // every mesh (what the folded walk is tested against).
  bool fold_tensors = true;
  // Where the search's inputs are reported (the caller's names): each
  // candidate's mesh inputs (sources.mesh: the axes; sources.devices: the
  // device counts of device_slices; sources.topology: the topology).
  MeshSources sources;
  WinnerOptions winner;
};

// Why a candidate is not ranked.
enum class DropReason { layout, indivisible, plan, over_hbm };
std::string_view to_string(DropReason reason);  // "layout", ...

struct SearchCandidate {
  std::string topology;  // the slice's name ("v5p-256", "2xv5p-128")
  std::string mesh;      // canonical, "fsdp:16,tp:4"
  std::string dcn;       // "dp:2" or ""
  std::string remat;
  std::string per_device_batch;  // as given, or "" for the workload's batch
  std::optional<int64_t> rank;   // 1 = best; nullopt when dropped
  bool fits = false;
  // memory: the most loaded device's parts and total
  StateBytes per_device;
  int64_t gather_buffer = 0;
  int64_t prefetch_dropped = 0;  // MemoryEstimate::prefetch_dropped
  int64_t max_device_total = 0;
  std::optional<int64_t> hbm_bytes;
  std::optional<int64_t> capacity_bytes;  // usable: HBM less the headroom
  std::optional<double> utilization;
  int64_t activations = 0;
  // step
  std::optional<StepEstimate> step;
  // why dropped
  std::optional<DropReason> dropped;
  std::string message;  // the first error when dropped
};

// The winner planned over every tensor as `plan` plans its mesh: what
// `plan` reports for it (WinnerOptions::plan).
struct WinnerPlan {
  RulePlan rules;
  std::vector<TensorSharding> shardings;  // manifest order
  ActivationEstimate activations;
  MemoryEstimate memory;
  StepEstimate step;
};

struct SearchResult {
  std::vector<SearchCandidate> candidates;        // ranked first, then dropped
  std::map<std::string, int64_t> dropped_counts;  // by to_string(reason)
  int64_t meshes = 0;                             // distinct meshes tried
  // The work shared across candidates: the manifest's tensors, the keys
  // they share decisions by (RuleKeys), and the rule decisions made (one
  // per key and mesh planned).
  int64_t planned = 0;  // meshes laid out and planned
  int64_t tensors = 0;
  int64_t decision_keys = 0;
  int64_t decisions = 0;
  // The tensors (tensor classes, with SearchOptions::fold_tensors) the
  // planned meshes walked, summed over them, and the foldings made (one per
  // distinct expert rank count).
  int64_t walked = 0;
  int64_t foldings = 0;
  // The winner laid out on its slice (one of the topologies searched);
  // nullopt and null when none fits.
  std::optional<PlacedMesh> winner_mesh;
  const Topology* winner_slice = nullptr;
  // The winner's plan (WinnerOptions::plan); nullopt when not asked, when
  // none fits, or when its plan failed (reported).
  std::optional<WinnerPlan> winner_plan;

  // The candidates that fit, best first.
  std::span<const SearchCandidate> ranked() const;
  // Rank 1; null when none fits.
  const SearchCandidate* winner() const;
};

// Search policy (search/policy.cpp).

// Fills options.axes, when empty, with the default axes: fsdp and tp, ep
// between them for a model with experts; with options.maxtext_axis_names
// MaxText's names in its mesh_axes order (fsdp, tensor, then expert). Then
// options.dcn_axes, when empty, with dp (data) and the axes of options.axes
// with the data or stage role. False after a name that is empty or given
// twice [cli.usage], at options.sources.mesh or options.dcn_axes'
// location.
bool resolve_search_axes(const ModelConfig& model,
                         SearchOptions& options,
                         Diagnostics& diags);

// The workload variations a search tries for each mesh, in order: every
// remat policy x every per-device batch ("" for the workload's global
// batch).
struct SearchVariations {
  std::vector<std::string> remat;
  std::vector<std::string> per_device_batch;
};
SearchVariations search_variations(const SearchOptions& options);

// The catalogue slices of `topology`'s chip (and slice count) that `text`
// names ("64", "64,128", a range "64-512"): each count, or every catalogue
// slice within a range, smallest first. nullopt (reported at
// sources.devices) on a bad count or range [cli.usage], a count the
// catalogue has no slice of [topology.size], or a topology from a file.
std::optional<std::vector<Topology>> device_slices(const Topology& topology,
                                                   std::string_view text,
                                                   const MeshSources& sources,
                                                   Diagnostics& diags);

// A manifest's tensors folded into classes whose members every mesh with
// `expert_ranks` expert ranks plans, validates and places alike, so that one
// member, counted as many times as the class has members, gives the
// estimate all of them give: tensors of one decoder layer with the same
// rule key (RuleKeys: the same patterns match their names, the same shape,
// dtype and logical axes), the same MemoryFacts kind and scaled dtype, and,
// for per-expert tensors, the same expert rank (expert_rank_of: the
// contiguous experts of one rank). A tensor of no layer is a class of its
// own (FSDP gathers it alone; docs/memory.md, "Gather buffer"). Under
// fsdp-tp DeepSeek-V3's 91,991 tensors are 1,414 classes on a mesh without
// expert ranks, 3,066 with 8 and 61,594 with 256 (one expert a rank).
struct TensorClasses {
  // Each class's first tensor, in manifest order: its first tensor of a
  // layer, of a dtype, with an error, is the manifest's.
  Manifest representatives;
  RuleKeys keys;      // the representatives', with every key of the manifest
  MemoryFacts facts;  // the representatives', counts the classes' sizes
  // N as place_tensors takes it for the manifest: the larger of the model
  // config's experts and the manifest's largest expert index + 1 (the
  // representatives may lack that index). Pass it as MemoryOptions::experts.
  int64_t experts = 0;
};
// REQUIRES: keys and facts are rule_keys and memory_facts of `manifest`;
// expert_ranks >= 1.
TensorClasses fold_tensor_classes(const Manifest& manifest,
                                  const RuleKeys& keys,
                                  const MemoryFacts& facts,
                                  int64_t expert_ranks,
                                  int64_t config_experts);

// Every assignment of the topology's devices per slice to options.axes
// (sizes dividing what the model allows: tensor axes the heads and KV
// heads, expert axes the experts, stage axes the layers), each evaluated
// for every workload variation, ranked by options.objective among those
// that fit; then the winner laid out and, with options.winner.plan,
// planned. Reports (nullopt) an unknown remat policy of the variations
// before any mesh [workload.unknown-remat], and a rule pattern that does
// not compile; never throws.
// REQUIRES: `model` describes `manifest`'s tensors; rules a preset.
std::optional<SearchResult> search_meshes(const Manifest& manifest,
                                          const ModelConfig& model,
                                          const Topology& topology,
                                          const RuleSet& rules,
                                          const SearchOptions& options,
                                          Diagnostics& diags);
// The same over several slices (a --devices range: one topology per device
// count), each slice's meshes tried in turn, all ranked together.
// REQUIRES: topologies not empty.
std::optional<SearchResult> search_meshes(const Manifest& manifest,
                                          const ModelConfig& model,
                                          std::span<const Topology> topologies,
                                          const RuleSet& rules,
                                          const SearchOptions& options,
                                          Diagnostics& diags);

}  // namespace shardplan
