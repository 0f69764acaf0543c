#pragma once

// Internal to the command-line front end: --maxtext-config FILE
// [KEY=VALUE ...] on plan, check, memory and search (cli/maxtext.cpp;
// docs/maxtext.md).

#include "cli/inputs.hpp"
#include "cli/workload.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/rules.hpp>

#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace shardplan::cli {

// Adds --maxtext-config to `app`, filling `args` (the file, then overrides).
CLI::Option* add_maxtext_option(CLI::App& app, std::vector<std::string>& args);

// The MaxText config of `args` (read_maxtext_config).
std::optional<MaxTextConfig> load_maxtext_config(
    const std::vector<std::string>& args, Diagnostics& diags);

// The tensors to plan: the flags' (--manifest, --model, --from-hf-config),
// else the MaxText config's model (model_name, or its dims), else
// load_manifest's error. A --model or --from-hf-config whose dims are not
// those of the config's model_name is an error naming the first that
// differs [maxtext.model-mismatch]; of a config's dims without model_name
// (base.yml's default model), a warning that the flag's model replaces
// them [maxtext.model-replaced]; a config whose model shardplan cannot build,
// with no flag to give one, an error saying why [maxtext.model].
std::optional<Manifest> load_model_manifest(
    const ManifestSource& source,
    const std::optional<MaxTextConfig>& config,
    Diagnostics& diags);

// The config's model's architecture; nullptr without one.
const ModelConfig* maxtext_model_config(
    const std::optional<MaxTextConfig>& config);

// The flags a mesh built from a MaxText config is reported at.
MeshSources maxtext_flags();

// The workload keys of `config`, when there is one, as flags, where `flags`
// has none of its own (flags given win): max_target_length -> --seq,
// per_device_batch_size ->
// --per-device-batch (unless --batch), remat_policy -> --remat, each at
// its key's maxtext_location (line and column). Without an
// architecture (`has_architecture` false) the keys are not used and an
// info note says so [maxtext.workload-ignored].
void apply_maxtext_workload(const std::optional<MaxTextConfig>& maxtext,
                            bool has_architecture,
                            WorkloadFlags& flags,
                            Diagnostics& diags);

// The config's weight_dtype (the dtype MaxText trains the weights in) as
// --param-dtype, at its key, when there is a config and `dtype` (the flag)
// was not given.
void apply_maxtext_param_dtype(const std::optional<MaxTextConfig>& config,
                               Sourced<std::optional<DType>>& dtype);

// With a config, MaxText's optimizer state unless a flag set it: optax's
// adamw keeps mu (mu_dtype, default the weights') and nu like the params,
// and no master copy (docs/memory.md, "Optimizer state"); located at the
// config; opt_type and mu_dtype at their keys.
// shard_optimizer_over_data is ZeRO-1 over `mesh`'s data axis (nothing
// without one; without a mesh, over the data role's axes).
// MaxText's fp8 quantization: the step's matmuls in FP8, unless a flag
// said otherwise (`given`).
void apply_maxtext_matmul_dtype(const std::optional<MaxTextConfig>& config,
                                bool given,
                                StepOptions& step);

// A MaxText config's kernels: splash attention's blocks, and the sparse
// path's grouped matmul (megablox's row tiles; tokamax's v1 kernel,
// unquantized, picks its own) (docs/step.md, "Kernel tiles").
void apply_maxtext_kernels(const std::optional<MaxTextConfig>& config,
                           StepOptions& step);

void apply_maxtext_optimizer(const std::optional<MaxTextConfig>& config,
                             MemoryOptions& memory,
                             const Mesh* mesh = nullptr);

// The rules a MaxText config gives: the maxtext preset, its
// logical_axis_rules replaced by the config's when it has them (the preset's
// Hugging Face name -> logical axes mapping kept).
std::optional<RuleSet> maxtext_rules(const MaxTextConfig& config,
                                     Diagnostics& diags);

// An info note that the config's logical_axis_rules are not used because
// `flag` (--rules, --specs) gives the specs [maxtext.rules-ignored].
void note_maxtext_rules_unused(const MaxTextConfig& config,
                               const std::string& flag,
                               Diagnostics& diags);

}  // namespace shardplan::cli
