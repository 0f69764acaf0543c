#pragma once

// Layer 6: `shardplan search` (DESIGN.md section 9; docs/search.md): the
// meshes of a topology for a model and a workload, each laid out as JAX
// would, planned with a rule preset, its memory (with activations) and its
// step estimated, ranked.

#include <shardplan/diag.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/models.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/topology.hpp>
#include <shardplan/workload.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace shardplan {

// What ranks the candidates that fit: tokens per second (the default), the
// step time, memory per device (least first) or MFU.
enum class SearchObjective { tokens, step, memory, mfu };
std::string_view to_string(SearchObjective objective);
std::optional<SearchObjective> parse_search_objective(std::string_view text);

struct SearchOptions {
  // The mesh axes to assign the devices of a slice to, in mesh order
  // (default: fsdp, tp, and ep for a model with experts).
  std::vector<std::string> axes;
  // The axes the slices of a multi-slice topology are assigned to (DCN),
  // every factorisation of the slice count over them; one that `axes` lacks
  // leads the mesh (dp). Default (the command line's): dp, and the axes of
  // `axes` with the data or stage role (fsdp, pp): what MaxText's
  // dcn_*_parallelism keys are set to in practice.
  std::vector<std::string> dcn_axes{"dp"};
  // Workload variations: every remat policy (at least one) x every
  // per-device batch (empty: the workload's own batch).
  std::vector<std::string> remat;
  std::vector<std::string> per_device_batch;
  Workload workload;     // the base workload (seq, batch, microbatches...)
  MemoryOptions memory;  // recipe, zero, hbm, headroom (roles are set here)
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
};

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
// that fit. Reports (nullopt) an unknown axis role name only through the
// caller's checks; never throws.
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
