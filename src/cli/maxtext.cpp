// --maxtext-config FILE [KEY=VALUE ...] on plan, check, memory and search
// (docs/maxtext.md): a MaxText config as the mesh, the rules and the
// workload.

#include "cli/maxtext.hpp"

#include "cli/inputs.hpp"

#include <shardplan/io.hpp>
#include <shardplan/rules.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

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

void apply_maxtext_workload(const MaxTextConfig& config,
                            bool has_architecture,
                            WorkloadFlags& flags,
                            Diagnostics& diags) {
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
  if (!flags.seq && config.max_target_length) {
    flags.seq = config.max_target_length->value;
    flags.seq_source = maxtext_source(config.max_target_length->at);
  }
  // MaxText's global batch is per_device_batch_size x devices x
  // gradient_accumulation_steps; shardplan's per-device batch counts the
  // whole step's sequences, which the microbatches split.
  const auto& accumulation = config.gradient_accumulation_steps;
  const auto& pipeline = config.num_pipeline_microbatches;
  if (!flags.batch && !flags.per_device_batch && config.per_device_batch_size) {
    flags.per_device_batch = config.per_device_batch_size->value;
    if (accumulation) {
      flags.per_device_batch =
          fmt::format("{}",
                      std::stod(config.per_device_batch_size->value)
                          * static_cast<double>(accumulation->value));
    }
    flags.per_device_batch_source =
        maxtext_source(config.per_device_batch_size->at);
  }
  if (!flags.microbatches && (accumulation || pipeline)) {
    flags.microbatches = accumulation ? accumulation->value : pipeline->value;
    flags.microbatches_source =
        maxtext_source(accumulation ? accumulation->at : pipeline->at);
  }
  if (!flags.remat && config.remat_policy) {
    flags.remat = config.remat_policy->value;
    flags.remat_source = maxtext_source(config.remat_policy->at);
  }
}

std::optional<RuleSet> maxtext_rules(const MaxTextConfig& config,
                                     Diagnostics& diags) {
  std::optional<RuleSet> rules =
      read_rules_preset("maxtext", Location::of("--maxtext-config"), diags);
  if (!rules || !config.logical_axis_rules) {
    return rules;
  }
  rules->logical_axis_rules = *config.logical_axis_rules;
  rules->description =
      fmt::format("{} (logical_axis_rules from {})",
                  rules->description,
                  maxtext_source(config.logical_axis_rules_at));
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
