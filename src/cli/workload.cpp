// The training workload's flags on plan, check and memory (DESIGN.md
// section 8): the architecture, the axis roles, the workload itself, and
// the activations estimate they give.

#include "cli/workload.hpp"

#include "cli/inputs.hpp"

#include <shardplan/io.hpp>
#include <shardplan/models.hpp>
#include <shardplan/workload.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <string>
#include <vector>

namespace shardplan::cli {

void add_workload_options(CLI::App& app,
                          WorkloadFlags& flags,
                          const std::vector<CLI::Option*>& manifest_options) {
  CLI::Option* config =
      app.add_option("--config",
                     flags.config,
                     "the model's Hugging Face config.json beside --manifest: "
                     "its architecture, for the workload and for placing "
                     "layers and experts (--model and --from-hf-config have "
                     "one)")
          ->type_name("FILE");
  for (size_t i = 1; i < manifest_options.size(); ++i) {
    config->excludes(manifest_options[i]);
  }
  const std::string group = "Workload (activations; docs/memory.md)";
  app.add_option("--seq", flags.seq, "tokens per sequence")
      ->type_name("N")
      ->group(group);
  CLI::Option* batch =
      app.add_option("--batch",
                     flags.batch,
                     "global batch: sequences per optimizer step")
          ->type_name("N")
          ->group(group);
  app.add_option("--per-device-batch",
                 flags.per_device_batch,
                 "instead of --batch: sequences per device (MaxText's "
                 "per_device_batch_size; may be fractional, e.g. 0.5)")
      ->type_name("X")
      ->excludes(batch)
      ->group(group);
  app.add_option("--microbatches",
                 flags.microbatches,
                 "gradient accumulation steps, and the pipeline's "
                 "microbatches with a stage axis (default 1)")
      ->type_name("M")
      ->group(group);
  app.add_option("--remat",
                 flags.remat,
                 fmt::format("what each layer keeps for the backward "
                             "(default full): {}",
                             fmt::join(remat_policy_names(), ", ")))
      ->type_name("POLICY")
      ->group(group);
  app.add_option("--attention",
                 flags.attention,
                 "flash (default: keeps the softmax's logsumexp) or plain "
                 "(keeps the seq x seq scores)")
      ->type_name("KIND")
      ->group(group);
  app.add_flag("--sequence-parallel",
               flags.sequence_parallel,
               "Megatron's sequence parallelism: norms and dropout split "
               "their tokens over the tensor axes")
      ->group(group);
  app.add_option("--stage-interleave",
                 flags.stage_interleave,
                 "virtual pipeline stages per device (interleaved 1F1B; "
                 "default 1)")
      ->type_name("V")
      ->group(group);
  app.add_option("--activation-dtype",
                 flags.activation_dtype,
                 "dtype of the saved activations (default bf16, MaxText's "
                 "dtype)")
      ->type_name("DTYPE")
      ->group(group);
  const std::string roles = "Axis roles (default: by name; docs/memory.md)";
  auto role =
      [&](const char* name, std::vector<std::string>& axes, const char* help) {
        app.add_option(name, axes, help)
            ->delimiter(',')
            ->type_name("A,B,..")
            ->group(roles);
      };
  role("--tensor-axes",
       flags.tensor_axes,
       "axes that split heads and MLP width (default: tp, tensor, model)");
  role("--sequence-axes",
       flags.sequence_axes,
       "axes that split the sequence (default: sp, context, cp)");
  role("--expert-axes",
       flags.expert_axes,
       "axes that split the experts (default: ep, expert)");
  role("--stage-axes",
       flags.stage_axes,
       "axes that split the layers into pipeline stages (default: pp, "
       "stage)");
}

namespace {

// The first workload flag given, by its name; empty when none was.
std::string first_workload_flag(const WorkloadFlags& f) {
  const std::pair<bool, const char*> given[] = {
      {f.seq.has_value(), f.seq_source.c_str()},
      {f.batch.has_value(), "--batch"},
      {f.per_device_batch.has_value(), f.per_device_batch_source.c_str()},
      {f.microbatches.has_value(), f.microbatches_source.c_str()},
      {f.remat.has_value(), f.remat_source.c_str()},
      {f.attention.has_value(), "--attention"},
      {f.sequence_parallel, "--sequence-parallel"},
      {f.stage_interleave.has_value(), "--stage-interleave"},
      {f.activation_dtype.has_value(), "--activation-dtype"},
  };
  for (const auto& [is_given, name] : given) {
    if (is_given) {
      return name;
    }
  }
  return {};
}

}  // namespace

std::optional<ModelConfig> read_architecture(const std::string& config,
                                             const ManifestSource& source,
                                             Diagnostics& diags,
                                             bool& failed) {
  failed = false;
  std::optional<ModelConfig> model;
  if (!source.model.empty()) {
    // load_manifest has read the name: it is a built-in model.
    std::optional<std::string_view> text = builtin_model_config(source.model);
    if (text) {
      model = read_hf_config(*text, source.model + ".json", diags);
      failed = !model;
    }
  } else if (!source.hf_config.empty()) {
    model = read_path(
        source.hf_config, InputKind::hf_config, diags, read_hf_config);
    failed = !model;
  } else if (!config.empty()) {
    model = read_path(config, InputKind::hf_config, diags, read_hf_config);
    failed = !model;
  }
  return model;
}

bool load_training(const WorkloadFlags& flags,
                   const ManifestSource& source,
                   const std::vector<std::string>& data_axes,
                   const Mesh& mesh,
                   Diagnostics& diags,
                   Training& out) {
  bool failed = false;
  out.model = read_architecture(flags.config, source, diags, failed);
  if (failed) {
    return false;
  }
  out.role_sources = AxisRoleSources{"--data-axes",
                                     "--tensor-axes",
                                     "--sequence-axes",
                                     "--expert-axes",
                                     "--stage-axes"};
  // A role taken by name is located at the mesh that named the axis.
  const std::vector<std::string>* given_axes[] = {&data_axes,
                                                  &flags.tensor_axes,
                                                  &flags.sequence_axes,
                                                  &flags.expert_axes,
                                                  &flags.stage_axes};
  std::string* sources[] = {&out.role_sources.data,
                            &out.role_sources.tensor,
                            &out.role_sources.sequence,
                            &out.role_sources.expert,
                            &out.role_sources.stage};
  for (size_t i = 0; i < 5; ++i) {
    if (given_axes[i]->empty()) {
      *sources[i] = "--mesh";
    }
  }
  AxisRoles given;
  given.data = data_axes;
  given.tensor = flags.tensor_axes;
  given.sequence = flags.sequence_axes;
  given.expert = flags.expert_axes;
  given.stage = flags.stage_axes;
  std::optional<AxisRoles> roles =
      resolve_axis_roles(mesh, given, out.role_sources, diags);
  if (!roles) {
    return false;
  }
  out.roles = std::move(*roles);

  const std::string flag = first_workload_flag(flags);
  if (flag.empty()) {
    return true;
  }
  if (!out.model) {
    diags
        .error("workload.no-architecture",
               fmt::format("{} needs the model's architecture (layers, "
                           "hidden size, heads, MLP, dropout), which a "
                           "manifest's tensors alone do not give",
                           flag),
               Location::of(flag))
        .hint =
        "give --config FILE (the model's Hugging Face config.json) beside "
        "--manifest, or --model NAME or --from-hf-config FILE instead";
    return false;
  }
  if (!flags.seq) {
    diags
        .error("workload.missing-seq",
               fmt::format("{} needs --seq N, the tokens per sequence", flag),
               Location::of("--seq"))
        .hint = "e.g. --seq 8192 --batch 256";
    return false;
  }
  Workload w;
  w.seq = *flags.seq;
  w.seq_source = flags.seq_source;
  w.batch = flags.batch;
  w.batch_source = "--batch";
  w.per_device_batch = flags.per_device_batch.value_or("");
  w.per_device_batch_source = flags.per_device_batch_source;
  w.microbatches = flags.microbatches.value_or(1);
  w.microbatches_source = flags.microbatches_source;
  w.remat = flags.remat.value_or("full");
  w.remat_source = flags.remat_source;
  w.attention = flags.attention.value_or("flash");
  w.attention_source = "--attention";
  w.sequence_parallel = flags.sequence_parallel;
  w.stage_interleave = flags.stage_interleave.value_or(1);
  w.stage_interleave_source = "--stage-interleave";
  w.activation_dtype = flags.activation_dtype.value_or("bf16");
  w.activation_dtype_source = "--activation-dtype";
  w.mesh_source = "--mesh";
  out.activations = estimate_activations(*out.model, mesh, out.roles, w, diags);
  if (!out.activations) {
    return false;
  }
  out.workload = std::move(w);
  return true;
}

}  // namespace shardplan::cli
