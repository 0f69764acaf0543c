#pragma once

// Internal to the command-line front end: the training workload, the axis
// roles and the architecture file of `plan`, `check` and `memory` (DESIGN.md
// section 8; cli/workload.cpp).

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

// The workload's flags. Each workload value is nullopt when its flag was
// not given.
struct WorkloadFlags {
  std::string config;  // --config FILE: the architecture beside --manifest
  std::optional<int64_t> seq;
  std::optional<int64_t> batch;
  std::optional<std::string> per_device_batch;
  std::optional<int64_t> microbatches;
  std::optional<std::string> remat;
  std::optional<std::string> attention;
  bool sequence_parallel = false;
  std::optional<int64_t> stage_interleave;
  std::optional<std::string> activation_dtype;
  std::vector<std::string> tensor_axes;
  std::vector<std::string> sequence_axes;
  std::vector<std::string> expert_axes;
  std::vector<std::string> stage_axes;
  // Where seq, per_device_batch, remat and microbatches came from: their
  // flags, or a
  // MaxText config's keys (maxtext_source: "cfg.yml:12:24").
  std::string seq_source = "--seq";
  std::string per_device_batch_source = "--per-device-batch";
  std::string remat_source = "--remat";
  std::string microbatches_source = "--microbatches";
};

// Adds the workload's flags, the role flags but --data-axes (ZeRO's, which
// the check options add) and --config, which excludes the manifest options
// but --manifest (`manifest_options`: --manifest, --model, --from-hf-config).
void add_workload_options(CLI::App& app,
                          WorkloadFlags& flags,
                          const std::vector<CLI::Option*>& manifest_options);

// The architecture of whichever source was given: --model's built-in
// config, --from-hf-config's file, or `config` (--config) beside
// --manifest. nullopt with `failed` false for a manifest alone; with
// `failed` true after an error (reported).
std::optional<ModelConfig> read_architecture(const std::string& config,
                                             const ManifestSource& source,
                                             Diagnostics& diags,
                                             bool& failed);

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
