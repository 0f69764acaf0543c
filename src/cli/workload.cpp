// The training workload's flags on plan, check and memory
// (docs/memory.md, "Activations"; docs/step.md): the architecture, the axis
// roles, the workload itself, and the activations estimate they give.

#include "cli/workload.hpp"

#include "cli/inputs.hpp"

#include <shardplan/io.hpp>
#include <shardplan/models.hpp>
#include <shardplan/workload.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cassert>
#include <string>
#include <utility>
#include <vector>

namespace shardplan::cli {

namespace {

constexpr std::string_view k_workload_group =
    "Workload (activations; docs/memory.md)";

// --seq, the batch and the microbatches.
void add_batch_options(CLI::App& app, WorkloadFlags& flags) {
  const std::string group(k_workload_group);
  app.add_option("--seq", flags.seq.value, "tokens per sequence")
      ->type_name("N")
      ->group(group);
  CLI::Option* batch =
      app.add_option("--batch",
                     flags.batch.value,
                     "global batch: sequences per optimizer step")
          ->type_name("N")
          ->group(group);
  app.add_option("--per-device-batch",
                 flags.per_device_batch.value,
                 "instead of --batch: sequences per device (MaxText's "
                 "per_device_batch_size; may be fractional, e.g. 0.5)")
      ->type_name("X")
      ->excludes(batch)
      ->group(group);
  app.add_option("--microbatches",
                 flags.microbatches.value,
                 "gradient accumulation steps, and the pipeline's "
                 "microbatches with a stage axis (default 1)")
      ->type_name("M")
      ->group(group);
}

// What a layer keeps: the remat policy, the attention, the residual
// stream's layout, the pipeline's interleave, the MTP modules, the dtype.
void add_layer_options(CLI::App& app, WorkloadFlags& flags) {
  const std::string group(k_workload_group);
  app.add_option("--remat",
                 flags.remat.value,
                 fmt::format("what each layer keeps for the backward "
                             "(default full): {}; custom:NAME=PLACE,... "
                             "places MaxText's checkpoint names (PLACE: "
                             "remat, device, offload)",
                             fmt::join(remat_policy_names(), ", ")))
      ->type_name("POLICY")
      ->group(group);
  app.add_option("--attention",
                 flags.attention.value,
                 "flash (default: keeps the softmax's logsumexp) or plain "
                 "(keeps the seq x seq scores)")
      ->type_name("KIND")
      ->group(group);
  CLI::Option* sequence_parallel =
      app.add_flag("--sequence-parallel",
                   flags.sequence_parallel,
                   "Megatron's sequence parallelism: norms and dropout split "
                   "their tokens over the tensor axes (--activation-layout "
                   "sequence)")
          ->group(group);
  app.add_option("--activation-layout",
                 flags.activation_layout.value,
                 "how the residual stream lies on the tensor axes: "
                 "replicated, sequence (its tokens split) or embed (its "
                 "embed dim split, MaxText's activation_embed); default: "
                 "the rules' activation_embed entry, else replicated")
      ->check(CLI::IsMember({"replicated", "sequence", "embed"}))
      ->excludes(sequence_parallel)
      ->type_name("LAYOUT")
      ->group(group);
  app.add_option("--stage-interleave",
                 flags.stage_interleave.value,
                 "virtual pipeline stages per device (interleaved 1F1B; "
                 "default 1)")
      ->type_name("V")
      ->group(group);
  app.add_option("--mtp-layers",
                 flags.mtp_layers.value,
                 "multi-token-prediction modules trained (DeepSeek-V3's "
                 "num_nextn_predict_layers; default 0, as MaxText's "
                 "mtp_num_layers and Megatron's --mtp-num-layers): the "
                 "checkpoint's others are not built")
      ->check(CLI::Range(0, 64))
      ->type_name("N")
      ->group(group);
  app.add_option("--activation-dtype",
                 flags.activation_dtype.value,
                 "dtype of the saved activations (default bf16, MaxText's "
                 "dtype)")
      ->type_name("DTYPE")
      ->group(group);
}

// The axis roles.
void add_role_options(CLI::App& app, WorkloadFlags& flags) {
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

}  // namespace

void add_exchange_options(CLI::App& app,
                          WorkloadFlags& flags,
                          const std::string& group) {
  app.add_option("--cross-entropy",
                 flags.cross_entropy.value,
                 "the loss's kernel, which sets what the head holds of the "
                 "logits: fused (XLA: once, in the activation dtype), "
                 "vocab-parallel (Megatron: and one fp32 copy; the "
                 "default) or eager (PyTorch's F.cross_entropy on fp32 "
                 "logits, torchtitan: three fp32 copies); a MaxText config "
                 "makes it fused")
      ->check(CLI::IsMember(cross_entropy_names()))
      ->type_name("KERNEL")
      ->group(group);
  app.add_option("--vocab-tiles",
                 flags.vocab_tiles.value,
                 "the loss over the tokens in T chunks, one chunk's logits "
                 "alive at a time (MaxText's num_vocab_tiling; default 1)")
      ->check(CLI::Range(1, 65536))
      ->type_name("T")
      ->group(group);
  app.add_option("--context-strategy",
                 flags.context_strategy.value,
                 "how attention sees the whole sequence when sequence axes "
                 "split it: all-gather (K and V gathered; MaxText's and "
                 "torchtitan's default, the default), ring (K and V passed "
                 "around, behind the compute; Megatron's p2p) or ulysses "
                 "(all-to-alls to a heads split; Megatron's a2a); a "
                 "MaxText config's context_parallel_strategy sets it")
      ->check(CLI::IsMember(context_strategy_names()))
      ->type_name("STRATEGY")
      ->group(group);
  app.add_option("--capacity-factor",
                 flags.capacity_factor.value,
                 "routed experts: F > 0 pads each expert's buffer to F x "
                 "its balanced share and drops the rest (MaxText's "
                 "capacity_factor on its dense_matmul path); <= 0 routes "
                 "dropless (the default, MaxText's -1)")
      ->check(CLI::Range(-1.0, 64.0))
      ->type_name("F")
      ->group(group);
  app.add_option("--routing-imbalance",
                 flags.routing_imbalance.value,
                 "dropless routing: the hottest expert rank's tokens over "
                 "the balanced share (default 1), for its memory and the "
                 "step")
      ->check(CLI::Range(1.0, 1024.0))
      ->type_name("F")
      ->group(group);
}

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
  add_batch_options(app, flags);
  add_layer_options(app, flags);
  add_exchange_options(app, flags, std::string(k_workload_group));
  add_role_options(app, flags);
}

namespace {

// Where the first workload value given came from; empty when none was.
Location first_workload_value(const WorkloadFlags& f) {
  const Location sequence_parallel = Location::of("--sequence-parallel");
  const std::pair<bool, const Location*> given[] = {
      {f.seq.value.has_value(), &f.seq.at},
      {f.batch.value.has_value(), &f.batch.at},
      {f.per_device_batch.value.has_value(), &f.per_device_batch.at},
      {f.microbatches.value.has_value(), &f.microbatches.at},
      {f.remat.value.has_value(), &f.remat.at},
      {f.attention.value.has_value(), &f.attention.at},
      {f.sequence_parallel, &sequence_parallel},
      {f.activation_layout.value.has_value(), &f.activation_layout.at},
      {f.stage_interleave.value.has_value(), &f.stage_interleave.at},
      {f.activation_dtype.value.has_value(), &f.activation_dtype.at},
      {f.context_strategy.value.has_value()
           && f.context_strategy.at.source == "--context-strategy",
       &f.context_strategy.at},
      {f.capacity_factor.value.has_value()
           && f.capacity_factor.at.source == "--capacity-factor",
       &f.capacity_factor.at},
      {f.vocab_tiles.value.has_value()
           && f.vocab_tiles.at.source == "--vocab-tiles",
       &f.vocab_tiles.at},
      {f.routing_imbalance.value.has_value(), &f.routing_imbalance.at},
      // A MaxText config's kernel asks for no workload.
      {f.cross_entropy.value.has_value()
           && f.cross_entropy.at.source == "--cross-entropy",
       &f.cross_entropy.at},
  };
  for (const auto& [is_given, at] : given) {
    if (is_given) {
      return *at;
    }
  }
  return {};
}

}  // namespace

Workload workload_of(const WorkloadFlags& flags) {
  assert(flags.seq.value);
  Workload w;
  w.seq = {*flags.seq.value, flags.seq.at};
  w.batch = flags.batch;
  w.per_device_batch = {flags.per_device_batch.value.value_or(""),
                        flags.per_device_batch.at};
  w.microbatches = {flags.microbatches.value.value_or(1),
                    flags.microbatches.at};
  w.remat = {flags.remat.value.value_or("full"), flags.remat.at};
  w.attention = {flags.attention.value.value_or("flash"), flags.attention.at};
  if (flags.sequence_parallel) {
    w.residual = {ResidualLayout::sequence,
                  Location::of("--sequence-parallel")};
  } else if (flags.activation_layout.value) {
    w.residual = {parse_residual_layout(*flags.activation_layout.value)
                      .value_or(ResidualLayout::replicated),
                  flags.activation_layout.at};
  }
  w.stage_interleave = {flags.stage_interleave.value.value_or(1),
                        flags.stage_interleave.at};
  w.activation_dtype = {flags.activation_dtype.value.value_or("bf16"),
                        flags.activation_dtype.at};
  if (flags.cross_entropy.value) {
    // --cross-entropy's values are checked; a MaxText config's is "fused".
    w.cross_entropy = {parse_cross_entropy(*flags.cross_entropy.value)
                           .value_or(CrossEntropy::vocab_parallel),
                       flags.cross_entropy.at};
  }
  if (flags.context_strategy.value) {
    // --context-strategy's values are checked, a config's too.
    w.context_strategy = {parse_context_strategy(*flags.context_strategy.value)
                              .value_or(ContextStrategy::all_gather),
                          flags.context_strategy.at};
  }
  if (flags.vocab_tiles.value) {
    w.vocab_tiles = {*flags.vocab_tiles.value, flags.vocab_tiles.at};
  }
  if (flags.capacity_factor.value) {
    w.capacity_factor = {*flags.capacity_factor.value,
                         flags.capacity_factor.at};
  }
  if (flags.routing_imbalance.value) {
    w.routing_imbalance = {*flags.routing_imbalance.value,
                           flags.routing_imbalance.at};
  }
  w.ragged_buffer = flags.ragged_buffer;
  w.residuals_only = flags.residuals_only;
  w.eager_kernels = flags.eager_kernels;
  w.mesh_at = Location::of("--mesh");
  return w;
}

std::optional<ModelConfig> read_architecture(
    const std::string& config,
    const ManifestSource& source,
    Diagnostics& diags,
    bool& failed,
    const std::optional<ModelConfig>& fallback) {
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
  } else {
    model = fallback;
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
  out.model = read_architecture(
      flags.config, source, diags, failed, flags.maxtext_model);
  if (failed) {
    return false;
  }
  if (out.model) {
    // The frameworks train no MTP module unless asked (MaxText's
    // mtp_num_layers 0, Megatron's --mtp-num-layers unset).
    out.model->mtp_layers = flags.mtp_layers.value.value_or(0);
  }
  out.role_sources = AxisRoleSources{Location::of("--data-axes"),
                                     Location::of("--tensor-axes"),
                                     Location::of("--sequence-axes"),
                                     Location::of("--expert-axes"),
                                     Location::of("--stage-axes")};
  // A role taken by name is located at the mesh that named the axis.
  const std::vector<std::string>* given_axes[] = {&data_axes,
                                                  &flags.tensor_axes,
                                                  &flags.sequence_axes,
                                                  &flags.expert_axes,
                                                  &flags.stage_axes};
  Location* sources[] = {&out.role_sources.data,
                         &out.role_sources.tensor,
                         &out.role_sources.sequence,
                         &out.role_sources.expert,
                         &out.role_sources.stage};
  for (size_t i = 0; i < 5; ++i) {
    if (given_axes[i]->empty()) {
      *sources[i] = Location::of("--mesh");
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

  const Location first = first_workload_value(flags);
  if (first.empty()) {
    return true;
  }
  const std::string flag = to_string(first);
  if (!out.model) {
    diags
        .error("workload.no-architecture",
               fmt::format("{} needs the model's architecture (layers, "
                           "hidden size, heads, MLP, dropout), which a "
                           "manifest's tensors alone do not give",
                           flag),
               first)
        .hint =
        "give --config FILE (the model's Hugging Face config.json) beside "
        "--manifest, or --model NAME or --from-hf-config FILE instead";
    return false;
  }
  if (!flags.seq.value) {
    diags
        .error("workload.missing-seq",
               fmt::format("{} needs --seq N, the tokens per sequence", flag),
               Location::of("--seq"))
        .hint = "e.g. --seq 8192 --batch 256";
    return false;
  }
  Workload w = workload_of(flags);
  out.activations = estimate_activations(*out.model, mesh, out.roles, w, diags);
  if (!out.activations) {
    return false;
  }
  out.workload = std::move(w);
  return true;
}

}  // namespace shardplan::cli
