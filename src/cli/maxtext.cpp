// --maxtext-config FILE [KEY=VALUE ...] on plan, check, memory and search
// (docs/maxtext.md): a MaxText config as the mesh, the rules and the
// workload.

#include "cli/maxtext.hpp"

#include "cli/inputs.hpp"

#include <shardplan/io.hpp>
#include <shardplan/rules.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

namespace shardplan::cli {

CLI::Option* add_maxtext_option(CLI::App& app, std::vector<std::string>& args) {
  return app
      .add_option("--maxtext-config",
                  args,
                  "a MaxText config (base.yml style) and MaxText's KEY=VALUE "
                  "overrides: the mesh (ici_*/dcn_* parallelism, num_slices), "
                  "logical_axis_rules and the workload keys "
                  "(docs/maxtext.md)")
      ->expected(1, -1)
      ->type_name("FILE [KEY=VALUE ...]");
}

std::optional<MaxTextConfig> load_maxtext_config(
    const std::vector<std::string>& args, Diagnostics& diags) {
  // CLI11 gives at least the file.
  const std::vector<std::string> overrides(args.begin() + 1, args.end());
  return read_maxtext_config(args.front(), overrides, diags);
}

namespace {

// "model_name \"llama3.1-8b\" (cfg.yml:2:13)", or for a config's dims
// without model_name "the model of cfg.yml".
std::string model_words(const MaxTextModel& model) {
  if (model.name == "default") {
    return fmt::format("the model of {}", to_string(model.at));
  }
  return fmt::format(
      "model_name {} ({})", quote(model.name), to_string(model.at));
}

// The first dim in which `a` (a flag's model) and `b` (the config's) differ:
// "hidden size 8192, the config's 4096"; "" when they agree.
std::string first_difference(const ModelConfig& a, const ModelConfig& b) {
  if (a.architecture != b.architecture) {
    return fmt::format("architecture {}, the config's {}",
                       to_string(a.architecture),
                       to_string(b.architecture));
  }
  struct Dim {
    const char* name;
    int64_t ModelConfig::*field;
  };
  static constexpr Dim k_dims[] = {
      {"hidden size (base_emb_dim)", &ModelConfig::hidden},
      {"layers (base_num_decoder_layers)", &ModelConfig::layers},
      {"query heads (base_num_query_heads)", &ModelConfig::heads},
      {"key/value heads (base_num_kv_heads)", &ModelConfig::kv_heads},
      {"head dim (head_dim)", &ModelConfig::head_dim},
      {"MLP width (base_mlp_dim)", &ModelConfig::intermediate},
      {"vocab (vocab_size)", &ModelConfig::vocab},
      {"experts (num_experts)", &ModelConfig::experts},
      {"experts per token (num_experts_per_tok)",
       &ModelConfig::experts_per_token},
      {"expert width (base_moe_mlp_dim)", &ModelConfig::moe_intermediate},
  };
  for (const Dim& d : k_dims) {
    if (a.*d.field != b.*d.field) {
      return fmt::format(
          "{} {}, the config's {}", d.name, a.*d.field, b.*d.field);
    }
  }
  if (a.tied != b.tied) {
    return fmt::format("tied embeddings {}, the config's {}", a.tied, b.tied);
  }
  return {};
}

// A --model or --from-hf-config against the config's model.
bool agrees(const ManifestSource& source,
            const MaxTextModel& model,
            Diagnostics& diags) {
  if (!model.config) {
    return true;
  }
  bool failed = false;
  const std::optional<ModelConfig> flag =
      read_architecture("", source, diags, failed);
  if (failed || !flag) {
    return !failed;
  }
  const std::string flag_text = source.model.empty()
                                    ? "--from-hf-config " + source.hf_config
                                    : "--model " + source.model;
  const std::string difference = first_difference(*flag, *model.config);
  if (difference.empty()) {
    return true;
  }
  if (model.name == "default") {
    // No model_name: the config's dims are base.yml's (or a few keys); the
    // flag names the model meant, but MaxText would train the config's.
    diags
        .warning(
            "maxtext.model-replaced",
            fmt::format("{} replaces {}: {}; MaxText would train the "
                        "config's model",
                        flag_text,
                        model_words(model),
                        difference),
            Location::of(source.model.empty() ? "--from-hf-config" : "--model"))
        .hint =
        "set model_name (or the model's keys) in the config to train "
        "this model with MaxText";
    return true;
  }
  diags
      .error(
          "maxtext.model-mismatch",
          fmt::format(
              "{} is not {}: {}", flag_text, model_words(model), difference),
          Location::of(source.model.empty() ? "--from-hf-config" : "--model"))
      .hint =
      "drop the flag to plan the config's model, or set model_name (or the "
      "model's keys) to the model you mean";
  return false;
}

}  // namespace

std::optional<Manifest> load_model_manifest(
    const ManifestSource& source,
    const std::optional<MaxTextConfig>& config,
    Diagnostics& diags) {
  const MaxTextModel* model =
      config && config->model ? &*config->model : nullptr;
  const bool flag_model = !source.model.empty() || !source.hf_config.empty();
  if (model == nullptr || !source.manifest.empty()) {
    return load_manifest(source, diags);
  }
  if (flag_model) {
    if (!agrees(source, *model, diags)) {
      return std::nullopt;
    }
    return load_manifest(source, diags);
  }
  if (!model->config) {
    diags.error("maxtext.model", model->missing, model->at).hint =
        "give --model NAME or --from-hf-config FILE (a Hugging Face "
        "config.json) for the tensors";
    return std::nullopt;
  }
  std::optional<std::vector<ModelTensor>> tensors =
      checkpoint_tensors(*model->config, diags);
  if (!tensors) {
    return std::nullopt;
  }
  const std::string name =
      model->name == "default"
          ? fmt::format("--maxtext-config {}", config->source)
          : fmt::format("--maxtext-config model_name={}", model->name);
  return manifest_from_model(*tensors, name, diags);
}

const ModelConfig* maxtext_model_config(
    const std::optional<MaxTextConfig>& config) {
  if (!config || !config->model || !config->model->config) {
    return nullptr;
  }
  return &*config->model->config;
}

MeshSources maxtext_flags() {
  // A config's allow_split_physical_axes: true, or the flag beside it,
  // lets an axis split a physical one: the hint names the flag.
  return MeshSources{"--maxtext-config",
                     "--maxtext-config",
                     "--maxtext-config",
                     "--devices",
                     "--topology",
                     "--allow-split-physical-axes"};
}

namespace {

// MaxText's routed experts (docs/maxtext.md): the dense_matmul path
// (sparse_matmul: false) applies capacity_factor; the sparse path (the
// default) ignores it and receives tokens across expert axes into a
// ragged buffer (ragged_buffer_factor, -1: the worst case).
void apply_maxtext_experts(const MaxTextConfig& config, WorkloadFlags& flags) {
  const bool sparse = !config.sparse_matmul || config.sparse_matmul->value;
  if (!sparse) {
    if (!flags.capacity_factor.value && config.capacity_factor) {
      flags.capacity_factor = {config.capacity_factor->value,
                               maxtext_location(config.capacity_factor->at)};
    }
    return;
  }
  if (!flags.ragged_buffer) {
    flags.ragged_buffer =
        config.ragged_buffer_factor
            ? Sourced<double>{config.ragged_buffer_factor->value,
                              maxtext_location(config.ragged_buffer_factor->at)}
            : Sourced<double>{-1, Location::of(config.source)};
  }
}

}  // namespace

void apply_maxtext_workload(const std::optional<MaxTextConfig>& maxtext,
                            bool has_architecture,
                            WorkloadFlags& flags,
                            Diagnostics& diags) {
  if (!maxtext) {
    return;
  }
  const MaxTextConfig& config = *maxtext;
  if (const ModelConfig* model = maxtext_model_config(maxtext)) {
    flags.maxtext_model = *model;
  }
  // MaxText's loss runs under XLA, which fuses it (docs/memory.md, "The
  // head").
  if (!flags.cross_entropy.value) {
    flags.cross_entropy = {std::string(to_string(CrossEntropy::fused)),
                           Location::of(config.source)};
  }
  if (!flags.context_strategy.value && config.context_parallel_strategy) {
    const std::string& value = config.context_parallel_strategy->value;
    flags.context_strategy = {
        value == "all_gather" ? std::string("all-gather") : value,
        maxtext_location(config.context_parallel_strategy->at)};
  }
  apply_maxtext_experts(config, flags);
  if (!flags.vocab_tiles.value && config.num_vocab_tiling) {
    flags.vocab_tiles = {config.num_vocab_tiling->value,
                         maxtext_location(config.num_vocab_tiling->at)};
  }
  // dtype: the activations' (and the matmuls').
  if (!flags.activation_dtype.value && config.dtype) {
    flags.activation_dtype = {std::string(to_string(config.dtype->value)),
                              maxtext_location(config.dtype->at)};
  }
  if (!flags.mtp_layers.value && config.mtp_num_layers) {
    flags.mtp_layers = {config.mtp_num_layers->value,
                        maxtext_location(config.mtp_num_layers->at)};
  }
  const bool any = config.max_target_length || config.per_device_batch_size
                   || config.remat_policy || config.gradient_accumulation_steps
                   || config.num_pipeline_microbatches;
  if (!any) {
    return;
  }
  if (!has_architecture) {
    Diagnostic d;
    d.severity = Severity::info;
    d.code = "maxtext.workload-ignored";
    d.message =
        "the config's workload keys (max_target_length, "
        "per_device_batch_size, remat_policy) are not used: a manifest "
        "alone has no architecture to estimate activations with";
    d.location = Location::of(config.source);
    d.hint =
        "give --config FILE (the Hugging Face config.json) beside "
        "--manifest, or --model NAME";
    diags.add(std::move(d));
    return;
  }
  // A key's value is located at the key (an override at the flag and the
  // override).
  if (!flags.seq.value && config.max_target_length) {
    flags.seq = {config.max_target_length->value,
                 maxtext_location(config.max_target_length->at)};
  }
  // MaxText's global batch is per_device_batch_size x devices x
  // gradient_accumulation_steps; shardplan's per-device batch counts the
  // whole step's sequences, which the microbatches split.
  const auto& accumulation = config.gradient_accumulation_steps;
  const auto& pipeline = config.num_pipeline_microbatches;
  if (!flags.batch.value && !flags.per_device_batch.value
      && config.per_device_batch_size) {
    std::string per_device = config.per_device_batch_size->value;
    if (accumulation) {
      per_device = fmt::format(
          "{}",
          std::stod(per_device) * static_cast<double>(accumulation->value));
    }
    flags.per_device_batch = {
        per_device, maxtext_location(config.per_device_batch_size->at)};
  }
  if (!flags.microbatches.value && (accumulation || pipeline)) {
    const Sourced<int64_t>& steps = accumulation ? *accumulation : *pipeline;
    flags.microbatches = {steps.value, maxtext_location(steps.at)};
  }
  if (!flags.remat.value && config.remat_policy) {
    std::string policy = config.remat_policy->value;
    if (policy == "custom" && !config.remat_names.empty()) {
      std::vector<std::string> names;
      for (const auto& [name, place] : config.remat_names) {
        names.push_back(fmt::format("{}={}", name, place.value));
      }
      policy = fmt::format("custom:{}", fmt::join(names, ","));
    }
    flags.remat = {policy, maxtext_location(config.remat_policy->at)};
  }
}

void apply_maxtext_param_dtype(const std::optional<MaxTextConfig>& config,
                               Sourced<std::optional<DType>>& dtype) {
  if (!dtype.value && config && config->weight_dtype) {
    dtype = {config->weight_dtype->value,
             maxtext_location(config->weight_dtype->at)};
  }
}

void apply_maxtext_kernels(const std::optional<MaxTextConfig>& config,
                           StepOptions& step) {
  if (!config) {
    return;
  }
  const MaxTextConfig& c = *config;
  const auto where = [](const std::optional<Location>& at) {
    return at ? maxtext_location(*at)
              : Location::of("--maxtext-config (base.yml's defaults)");
  };
  const auto& b = c.splash_blocks;
  step.flash_blocks = FlashBlocks{b[0],
                                  b[1],
                                  b[2],
                                  b[3],
                                  b[4],
                                  b[5],
                                  c.splash_fused_backward,
                                  where(c.splash_at)};
  if (c.sparse_matmul && !c.sparse_matmul->value) {
    return;  // the dense path: einsums, no grouped matmul
  }
  GroupedTiles tiles;
  tiles.kernel = c.tokamax_gmm ? "tokamax" : "megablox";
  tiles.at = where(c.gmm_at);
  if (!c.tokamax_gmm || c.gmm_v2 || c.fp8_quantization) {
    for (size_t i = 0; i < c.gmm_tile_rows.size(); ++i) {
      tiles.rows[i / 3][i % 3] = c.gmm_tile_rows[i];
    }
  }
  step.grouped_tiles = tiles;
}

void apply_maxtext_matmul_dtype(const std::optional<MaxTextConfig>& config,
                                bool given,
                                StepOptions& step) {
  if (!given && config && config->fp8_quantization) {
    step.fp8_matmuls = {true, maxtext_location(*config->fp8_quantization)};
  }
}

void apply_maxtext_optimizer(const std::optional<MaxTextConfig>& config,
                             MemoryOptions& memory,
                             const Mesh* mesh) {
  if (!config) {
    return;
  }
  memory.moments_like_params = true;
  if (!memory.master.value) {
    memory.master = {false, Location::of(config->source)};
  }
  // opt_type (adam_pax keeps Adam's two moments, as adamw) and mu_dtype,
  // each at its key, unless a flag set them.
  if (!memory.optimizer.value && config->opt_type) {
    const std::string& type = config->opt_type->value;
    memory.optimizer = {parse_optimizer(type == "adam_pax" ? "adamw" : type),
                        maxtext_location(config->opt_type->at)};
  }
  if (!memory.optimizer_host_offload.value && config->optimizer_host_offload) {
    memory.optimizer_host_offload = {
        true, maxtext_location(*config->optimizer_host_offload)};
  }
  if (!memory.parameter_host_offload.value && config->parameter_host_offload) {
    memory.parameter_host_offload = {
        true, maxtext_location(*config->parameter_host_offload)};
  }
  // shard_optimizer_over_data: ZeRO-1 over the data axis
  // (train.py shards the optimizer state over it).
  // On a mesh without a data axis (data parallelism 1) it shards nothing;
  // without a mesh (search's many) over the data role's axes.
  const auto has_data = [&] {
    return std::any_of(mesh->axes.begin(),
                       mesh->axes.end(),
                       [](const MeshAxis& a) { return a.name == "data"; });
  };
  if (memory.zero.value == 0 && config->shard_optimizer_over_data
      && (mesh == nullptr || has_data())) {
    const Location at = maxtext_location(*config->shard_optimizer_over_data);
    memory.zero = {1, at};
    if (mesh != nullptr && memory.data_axes.value.empty()) {
      memory.data_axes = {{"data"}, at};
    }
  }
  // dtype: the matmuls', so what the weights are gathered in.
  if (config->dtype) {
    memory.compute_dtype = config->dtype->value;
  }
  if (!memory.moment_dtype.value && config->mu_dtype) {
    memory.moment_dtype = {config->mu_dtype->value,
                           maxtext_location(config->mu_dtype->at)};
  }
}

std::optional<RuleSet> maxtext_rules(const MaxTextConfig& config,
                                     Diagnostics& diags) {
  std::optional<RuleSet> rules =
      read_rules_preset("maxtext", Location::of("--maxtext-config"), diags);
  if (!rules) {
    return rules;
  }
  if (!config.logical_axis_rules) {
    if (!config.logical_axis_rule_updates.empty()) {
      merge_logical_axis_rules(rules->logical_axis_rules,
                               config.logical_axis_rule_updates);
      rules->description = fmt::format(
          "{} (with the logical_axis_rules of {})",
          rules->description,
          to_string(maxtext_location(config.logical_axis_rule_updates_at)));
    }
    return rules;
  }
  rules->logical_axis_rules = *config.logical_axis_rules;
  rules->description =
      fmt::format("{} (logical_axis_rules from {})",
                  rules->description,
                  to_string(maxtext_location(config.logical_axis_rules_at)));
  return rules;
}

void note_maxtext_rules_unused(const MaxTextConfig& config,
                               const std::string& flag,
                               Diagnostics& diags) {
  if (!config.logical_axis_rules) {
    return;
  }
  Diagnostic d;
  d.severity = Severity::info;
  d.code = "maxtext.rules-ignored";
  d.message = fmt::format(
      "the config's logical_axis_rules are not used: {} gives the specs", flag);
  d.location = config.logical_axis_rules_at;
  diags.add(std::move(d));
}

}  // namespace shardplan::cli
