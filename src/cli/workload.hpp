#pragma once

// Internal to the command-line front end: the training workload, the axis
// roles and the architecture file of `plan`, `check` and `memory`
// (docs/memory.md, "Activations"; cli/workload.cpp).

#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/models.hpp>
#include <shardplan/workload.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace shardplan::cli {

struct ManifestSource;  // cli/inputs.hpp

// The workload's flags, each value with where it came from: its flag, or
// a MaxText config's key (apply_maxtext_workload). A value is nullopt when
// not given.
struct WorkloadFlags {
  std::string config;  // --config FILE: the architecture beside --manifest
  // A MaxText config's model (model_name, or its dims): the architecture
  // when no flag gives one (apply_maxtext_workload).
  std::optional<ModelConfig> maxtext_model;
  Sourced<std::optional<int64_t>> seq{{}, Location::of("--seq")};
  Sourced<std::optional<int64_t>> batch{{}, Location::of("--batch")};
  Sourced<std::optional<std::string>> per_device_batch{
      {}, Location::of("--per-device-batch")};
  Sourced<std::optional<int64_t>> microbatches{{},
                                               Location::of("--microbatches")};
  Sourced<std::optional<std::string>> remat{{}, Location::of("--remat")};
  Sourced<std::optional<std::string>> attention{{},
                                                Location::of("--attention")};
  bool sequence_parallel = false;
  Sourced<std::optional<std::string>> activation_layout{
      {}, Location::of("--activation-layout")};
  Sourced<std::optional<int64_t>> stage_interleave{
      {}, Location::of("--stage-interleave")};
  Sourced<std::optional<std::string>> activation_dtype{
      {}, Location::of("--activation-dtype")};
  Sourced<std::optional<std::string>> cross_entropy{
      {}, Location::of("--cross-entropy")};
  Sourced<std::optional<std::string>> context_strategy{
      {}, Location::of("--context-strategy")};
  Sourced<std::optional<int64_t>> vocab_tiles{{},
                                              Location::of("--vocab-tiles")};
  Sourced<std::optional<double>> capacity_factor{
      {}, Location::of("--capacity-factor")};
  Sourced<std::optional<double>> routing_imbalance{
      {}, Location::of("--routing-imbalance")};
  // MaxText's ragged receive buffer factor (its config alone sets it).
  std::optional<Sourced<double>> ragged_buffer;
  // The MTP modules trained (0 unless given: every framework's default).
  Sourced<std::optional<int64_t>> mtp_layers{{}, Location::of("--mtp-layers")};
  // Workload::residuals_only: the runtime's (XLA: JAX), set by the caller.
  bool residuals_only = false;
  // Workload::eager_kernels: --kernels eager, set by the caller.
  bool eager_kernels = false;
  std::vector<std::string> tensor_axes;
  std::vector<std::string> sequence_axes;
  std::vector<std::string> expert_axes;
  std::vector<std::string> stage_axes;
};

// Adds the flags of the loss's kernel and tiles, the context exchange and
// the routed experts' load (--cross-entropy, --vocab-tiles,
// --context-strategy, --capacity-factor, --routing-imbalance) in `group`:
// plan's workload and search share them.
void add_exchange_options(CLI::App& app,
                          WorkloadFlags& flags,
                          const std::string& group);

// Adds the workload's flags, the role flags but --data-axes (ZeRO's, which
// the check options add) and --config, which excludes the manifest options
// but --manifest (`manifest_options`: --manifest, --model, --from-hf-config).
void add_workload_options(CLI::App& app,
                          WorkloadFlags& flags,
                          const std::vector<CLI::Option*>& manifest_options);

// The architecture of whichever source was given: --model's built-in
// config, --from-hf-config's file, or `config` (--config) beside
// --manifest, else `fallback` (a MaxText config's model). nullopt with
// `failed` false for a manifest alone; with `failed` true after an error
// (reported).
std::optional<ModelConfig> read_architecture(
    const std::string& config,
    const ManifestSource& source,
    Diagnostics& diags,
    bool& failed,
    const std::optional<ModelConfig>& fallback = std::nullopt);

// What the workload flags resolve to for one mesh.
struct Training {
  // The architecture: --model's or --from-hf-config's config, or --config's;
  // nullopt for a manifest alone.
  std::optional<ModelConfig> model;
  AxisRoles roles;
  AxisRoleSources role_sources;
  // With a workload (any workload flag given):
  std::optional<Workload> workload;
  std::optional<ActivationEstimate> activations;
};

// The workload `flags` give, each value at its location, and the defaults
// of those not given (1 microbatch, remat full, flash attention, stage
// interleave 1, bf16 activations); the mesh at --mesh. REQUIRES:
// flags.seq.value.
Workload workload_of(const WorkloadFlags& flags);

// Reads the architecture, resolves the axis roles of `mesh` (`data_axes`:
// --data-axes) and, with a workload, estimates its activations. False after
// an error (reported): workload flags without an architecture
// [workload.no-architecture] or without --seq [workload.missing-seq], and
// read_hf_config's, resolve_axis_roles's and estimate_activations's.
bool load_training(const WorkloadFlags& flags,
                   const ManifestSource& source,
                   const std::vector<std::string>& data_axes,
                   const Mesh& mesh,
                   Diagnostics& diags,
                   Training& out);

}  // namespace shardplan::cli
