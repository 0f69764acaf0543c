#pragma once

// Internal to the command-line front end: the loaders the commands share
// (cli/inputs.cpp). A manifest, a topology or a rule set from its flag; the
// rules `plan` and `search` plan with; the options `check`, `memory` and
// `plan` take, and what they read from them before they differ
// (load_inputs); the options of `search`, and what it reads
// (load_search_inputs).

#include "cli/maxtext.hpp"
#include "cli/workload.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/topology.hpp>
#include <shardplan/validate.hpp>
#include <shardplan/workload.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace shardplan::cli {

// Reads the file at `path`, an input of kind `kind` (within its size
// limit), with `read` (read_specs, read_rules, ...).
template <typename Reader>
auto read_path(const std::string& path,
               InputKind kind,
               Diagnostics& diags,
               Reader read)
    -> decltype(read(std::string_view(), std::string_view(), diags)) {
  std::optional<std::string> text = read_file(path, kind, diags);
  if (!text) {
    return std::nullopt;
  }
  return read(*text, path, diags);
}

// Where a command's tensors come from: one of --manifest PATH, --model NAME
// and --from-hf-config FILE.
struct ManifestSource {
  std::string manifest;
  std::string model;
  std::string hf_config;
};

// Adds --manifest, --model and --from-hf-config to `app`, each excluding the
// others; returns them, for the command's own excludes.
std::vector<CLI::Option*> add_manifest_options(CLI::App& app,
                                               ManifestSource& source);

// The manifest of whichever source was given; an error naming the three
// when none was [cli.no-manifest].
std::optional<Manifest> load_manifest(const ManifestSource& source,
                                      Diagnostics& diags);

// For options taking NAME|FILE (--topology, --rules): a path to an existing
// file (a pipe or a device too: /dev/stdin, <(...)), or one ending in
// .json, is a file; anything else a built-in name (a folder as well).
bool names_a_file(const std::string& arg);

// --topology NAME|FILE (or `flag`, e.g. --from-topology): a user topology
// file, or a catalogue name (errors located at `flag`).
std::optional<Topology> load_topology(const std::string& arg,
                                      const std::string& flag,
                                      Diagnostics& diags);

// The flags a mesh's inputs come from in every command but reshard, which
// has its own for each side.
MeshSources mesh_flags();

// --rules FILE|PRESET (or `flag`, e.g. --from-rules): a user's rules file,
// or a preset name.
std::optional<RuleSet> load_rules(const std::string& arg,
                                  const std::string& flag,
                                  Diagnostics& diags);

// The rules `plan` and `search` plan with: --rules FILE|PRESET when `given`
// (`arg`; a MaxText config's logical_axis_rules are then noted as unused),
// else the MaxText config's rules (maxtext_rules), else `arg`, the default
// preset.
std::optional<RuleSet> load_plan_rules(
    const std::string& arg,
    bool given,
    const std::optional<MaxTextConfig>& maxtext,
    Diagnostics& diags);

// The kernels the step prices (add_kernel_options): --kernels, fused (the
// default) or eager; --matmul-dtype, "" (bf16 unless a MaxText config's
// quantization says fp8), bf16 or fp8; --grouped-gemm, per-expert (the
// default) or grouped.
struct KernelFlags {
  std::string kernels = "fused";
  std::string matmul_dtype;
  std::string grouped_gemm = "per-expert";
};

// `check` and `memory`: specs for a manifest on a mesh.
struct CheckCommand {
  std::string mesh;
  std::optional<int64_t> devices;
  std::vector<std::string> axis_names;
  std::string dcn;
  std::string topology;
  ManifestSource source;
  std::string specs;
  // --recipe; "" when not given: MaxText's training state (adam, its
  // opt_type's) with --maxtext-config, else params-only.
  std::string recipe;
  std::string param_dtype;
  std::string grad_dtype;
  std::string optimizer;     // --optimizer: "" for the recipe's
  std::string moment_dtype;  // --moment-dtype
  std::string master;        // --master-weights: "", "f32" or "none"
  int zero = 0;
  std::vector<std::string> data_axes;
  std::optional<double> headroom;  // --headroom: nullopt for the runtime's
  std::string runtime;             // --runtime: "" for the default
  std::vector<std::string> host_offload;  // --host-offload: optimizer, params
  std::optional<std::string> hbm;         // given, even as "" (refused)
  std::string warn_replicated = "64MiB";
  size_t largest = 20;
  bool allow_split_physical_axes = false;
  std::string rules;  // `memory --rules`: specs from rules instead of a file
  WorkloadFlags workload;
  // --matmul-efficiency, --attention-efficiency; nullopt: the topology's.
  std::optional<double> matmul_efficiency;
  std::optional<double> attention_efficiency;
  std::vector<std::string> overlap = {"fsdp", "grads"};
  KernelFlags kernel;                // --kernels, --matmul-dtype, ...
  std::vector<std::string> maxtext;  // --maxtext-config FILE [KEY=VALUE ...]
};

// What check, memory and plan read before they differ: the topology, the
// mesh, the options of the validator and the memory estimator, and the
// manifest.
struct Inputs {
  std::optional<Topology> topology;
  std::optional<Mesh> mesh;
  // The mesh on the topology, as `mesh` lays it out; empty without a
  // topology, or when the mesh does not cover its devices (the validator
  // reports that with the plan's other errors).
  std::optional<MeshLayout> layout;
  bool allow_split_physical_axes = false;
  MemoryOptions memory;
  ValidateOptions validate;
  std::optional<Manifest> manifest;
  Training training;
  StepOptions step_options;
  // With --maxtext-config: the config, and the mesh strings it gave.
  std::optional<MaxTextConfig> maxtext;
  // MaxText's model_name for the plan's model: the config's, or the one a
  // built-in --model is; "" for none.
  std::string maxtext_model;
  std::string mesh_text;
  std::string dcn_text;
};

// Reads the inputs of `cmd`; false after an input error (reported).
bool load_inputs(const CheckCommand& cmd, Diagnostics& diags, Inputs& in);

// The workload planned by `rules`: when no flag set the activation layout
// and the rules' activation_embed entry splits the residual stream over a
// tensor axis (residual_layout), the activations estimated again with that
// layout and the memory estimate's loads with them. False after an error
// (reported).
bool apply_rules_layout(const RuleSet& rules, Inputs& in, Diagnostics& diags);

// `search`: the meshes of a topology for a model and a workload (its
// options are cli/search.cpp's).
struct SearchCommand {
  std::string topology;
  // --devices: device counts to search, "64", "64,128" or "64-512": a
  // catalogue slice of --topology's chip for each (search.cpp).
  std::string devices;
  ManifestSource source;
  std::string config;
  std::string rules = "fsdp-tp";
  std::vector<std::string> axes;
  std::vector<std::string> dcn_axes;
  std::string recipe = "adam";
  int zero = 0;
  std::optional<double> headroom;  // --headroom: nullopt for the runtime's
  std::string runtime;             // --runtime: "" for the default
  std::optional<int64_t> seq;
  std::optional<int64_t> batch;
  std::vector<std::string> per_device_batch;
  int64_t microbatches = 1;
  std::vector<std::string> remat = {"full"};
  std::string attention = "flash";
  bool sequence_parallel = false;
  std::optional<int64_t> mtp_layers;  // --mtp-layers
  // --cross-entropy, --vocab-tiles, --context-strategy, --capacity-factor,
  // --routing-imbalance (add_exchange_options: plan's, the only fields of
  // it search sets) and --host-offload, as plan's.
  WorkloadFlags exchange;
  std::vector<std::string> host_offload;
  // --matmul-efficiency, --attention-efficiency; nullopt: the topology's.
  std::optional<double> matmul_efficiency;
  std::optional<double> attention_efficiency;
  KernelFlags kernel;  // --kernels, --matmul-dtype, --grouped-gemm
  size_t top = 10;
  std::string objective = "tokens";
  bool allow_split_physical_axes = false;
  std::vector<std::string> maxtext;  // --maxtext-config FILE [KEY=VALUE ...]
  bool remat_given = false;          // --remat was given (search.cpp)
  bool rules_given = false;          // --rules was given
};

// What search reads: the slices, the tensors and their architecture, a
// MaxText config, the rules.
struct SearchInputs {
  std::optional<Topology> topology;  // --topology
  std::vector<Topology> slices;      // --topology's, or those --devices names
  std::optional<Manifest> manifest;
  std::optional<ModelConfig> model;
  std::optional<MaxTextConfig> maxtext;
  std::optional<RuleSet> rules;
};

// The runtime and what it keeps beyond the step's tensors (docs/memory.md,
// "Per device, capacity, fits"), into `memory`: `runtime` (--runtime's
// value; "" for the default: xla with a MaxText config or on a TPU, pytorch
// on a GPU), its allocator's reserve (PyTorch's, fitted), and `headroom`
// (--headroom's; nullopt for the runtime's: none on a TPU, whose catalogue
// HBM is the runtime's own limit; JAX's preallocated 75% on a GPU; 10%
// for PyTorch or without a topology).
void apply_runtime(const std::string& runtime,
                   std::optional<double> headroom,
                   const Topology* topology,
                   bool maxtext,
                   MemoryOptions& memory);

// --host-offload's states (optimizer, params; CLI11 checked them) into
// `memory`, located at the flag.
void apply_host_offload(const std::vector<std::string>& states,
                        MemoryOptions& memory);

// The RAM of a host of `topology` and the devices it serves, into `memory`
// (docs/memory.md, "Host memory"): nothing when the topology has no
// host_memory_bytes_per_chip.
void apply_host_memory(const Topology* topology, MemoryOptions& memory);

// --kernels fused|eager (whether PyTorch runs eager), --matmul-dtype
// bf16|fp8 (the weights' matmuls' dtype) and --grouped-gemm
// per-expert|grouped (the routed experts' kernel), for plan, check, memory
// and search (docs/step.md); and the step's options from them and a MaxText
// config's quantization and kernels.
std::vector<CLI::Option*> add_kernel_options(CLI::App& app, KernelFlags& flags);
void apply_kernel_options(const KernelFlags& flags,
                          const std::optional<MaxTextConfig>& maxtext,
                          StepOptions& step);

// The step's efficiencies: a flag's (at the flag), else `topology`'s
// figure (its source as the location; under `runtime` xla the attention
// kernel's as JAX calls it, where the chip has one measured), else the
// roofline's 1.
void apply_efficiencies(std::optional<double> matmul,
                        std::optional<double> attention,
                        const Topology* topology,
                        Runtime runtime,
                        StepOptions& step);

// Reads what `search` reads (--devices' slices reported at `sources`);
// false after an input error (reported).
bool load_search_inputs(const SearchCommand& cmd,
                        const MeshSources& sources,
                        Diagnostics& diags,
                        SearchInputs& in);

}  // namespace shardplan::cli
