// `shardplan plan`, `check` and `memory` (docs/cli.md): specs for
// a manifest on a mesh, planned by rules or given, validated, with their
// memory and, with a workload, the step's time.

#include "cli/commands.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/report.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/sharding.hpp>
#include <shardplan/validate.hpp>
#include <shardplan/workload.hpp>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan::cli {

namespace {

// Estimates memory for `shardings` and writes the document of `view` (check,
// memory or plan); `rules` and `plan` for plan.
int finish_check(View view,
                 const Inputs& in,
                 const std::vector<TensorSharding>& shardings,
                 std::string_view specs_source,
                 const RuleSet* rules,
                 const RulePlan* plan,
                 Session& session) {
  Diagnostics& diags = session.diags();
  Stopwatch watch;
  Diagnostics memory_diags;
  std::optional<MemoryEstimate> memory = estimate_memory(
      *in.manifest, *in.mesh, shardings, in.memory, memory_diags);
  watch.lap("estimate memory");
  for (const Diagnostic& d : memory_diags.items()) {
    diags.add(d);
  }
  if (!memory) {
    return session.fail_input();
  }
  // With a workload and a layout on a topology: the step's time.
  std::optional<StepEstimate> step;
  if (in.training.activations && in.layout && in.topology) {
    const ModelConfig& model = *in.training.model;
    const StepInputs step_in = step_inputs_for(
        model, *in.topology, in.layout->links, *memory, Location::of("--mesh"));
    StepOptions options = in.step_options;
    step = estimate_step(model,
                         *in.mesh,
                         in.training.roles,
                         *in.training.activations,
                         step_in,
                         options,
                         diags);
    if (!step) {
      return session.fail_input();
    }
    estimate_step_band(model,
                       *in.mesh,
                       in.training.roles,
                       *in.training.activations,
                       step_in,
                       options,
                       *step);
    watch.lap("estimate the step");
  }
  const Provenance provenance{session.command_line(),
                              in.allow_split_physical_axes,
                              {},
                              in.maxtext_model};
  const CheckReport report{
      view,
      *in.mesh,
      in.topology ? &*in.topology : nullptr,
      *in.manifest,
      specs_source,
      shardings,
      *memory,
      rules,
      plan,
      in.training.activations ? &*in.training.activations : nullptr,
      step ? &*step : nullptr,
      in.layout ? &*in.layout : nullptr,
      &provenance};
  return session.finish(
      report, diags.has_errors() ? ExitCode::plan_errors : ExitCode::ok);
}

// Applies `rules` to the inputs, validates the specs they give, and renders
// `view` (plan's, or memory's with --rules).
int run_rules(const RuleSet& rules, View view, Inputs& in, Session& session) {
  Diagnostics& diags = session.diags();
  if (!apply_rules_layout(rules, in, diags)) {
    return session.fail_input();
  }
  Stopwatch watch;
  // A preset's tensors left unsplit over an axis it uses elsewhere are
  // warned about from the same size as fully replicated ones.
  const ApplyOptions options{in.validate.replicated_warning_bytes};
  std::optional<RulePlan> plan =
      apply_rules(*in.manifest, *in.mesh, rules, diags, options);
  if (!plan) {
    return session.fail_input();
  }
  watch.lap("apply the rules");
  const std::vector<const PartitionSpec*> specs = plan->specs();
  std::vector<TensorSharding> shardings =
      validate_planned(*in.manifest,
                       *in.mesh,
                       specs,
                       Location::of(rules.source),
                       in.validate,
                       diags);
  watch.lap("validate");
  return finish_check(
      view, in, shardings, rules.source, &rules, &*plan, session);
}

int run_check(const CheckCommand& cmd, View view, Session& session) {
  Diagnostics& diags = session.diags();
  // memory with --maxtext-config alone plans with the config's rules.
  const bool maxtext_rules_only =
      !cmd.maxtext.empty() && cmd.specs.empty() && cmd.rules.empty();
  if (!maxtext_rules_only && cmd.specs.empty() == cmd.rules.empty()) {
    // Only `memory` takes both; CLI11 makes --specs required for check.
    diags
        .error("cli.usage",
               cmd.specs.empty() ? "give --specs FILE or --rules FILE|PRESET"
                                 : "give --specs or --rules, not both",
               Location::of("--specs"))
        .hint = "--rules plans the specs as `plan` does";
    return session.fail_input();
  }
  Inputs in;
  if (!load_inputs(cmd, diags, in)) {
    return session.fail_input();
  }
  if (maxtext_rules_only) {
    std::optional<RuleSet> rules = maxtext_rules(*in.maxtext, diags);
    if (!rules) {
      return session.fail_input();
    }
    return run_rules(*rules, view, in, session);
  }
  if (in.maxtext) {
    note_maxtext_rules_unused(
        *in.maxtext, cmd.rules.empty() ? "--specs" : "--rules", diags);
  }
  if (!cmd.rules.empty()) {
    std::optional<RuleSet> rules = load_rules(cmd.rules, "--rules", diags);
    if (!rules) {
      return session.fail_input();
    }
    return run_rules(*rules, view, in, session);
  }
  Stopwatch watch;
  std::optional<SpecsFile> specs = read_specs_path(cmd.specs, diags);
  if (!specs) {
    return session.fail_input();
  }
  watch.lap("read the specs");
  spdlog::debug("{} tensors, {} specs, mesh {}",
                in.manifest->size(),
                specs->specs.size(),
                to_string(*in.mesh));
  std::vector<TensorSharding> shardings =
      validate_specs(*in.manifest, *in.mesh, *specs, in.validate, diags);
  watch.lap("validate");
  return finish_check(
      view, in, shardings, specs->source, nullptr, nullptr, session);
}

}  // namespace

int run_plan(const PlanCommand& cmd, Session& session) {
  Diagnostics& diags = session.diags();
  if (cmd.rules == "list") {
    const std::vector<RulePreset> presets = rule_presets();
    return session.finish(PresetListReport{presets}, ExitCode::ok);
  }
  if (cmd.check.mesh.empty() && cmd.check.maxtext.empty()) {
    diags.error("cli.usage", "--mesh is required", Location::of("--mesh"))
        .hint =
        "shardplan plan --topology v5p-128 --mesh fsdp:-1,tp:4 --model "
        "llama-3-8b";
    return session.fail_input();
  }
  Inputs in;
  if (!load_inputs(cmd.check, diags, in)) {
    return session.fail_input();
  }
  // --rules given wins; with --maxtext-config alone, the config's rules.
  std::optional<RuleSet> rules =
      load_plan_rules(cmd.rules.empty() ? std::string("fsdp-tp") : cmd.rules,
                      !cmd.rules.empty(),
                      in.maxtext,
                      diags);
  if (!rules) {
    return session.fail_input();
  }
  if (!cmd.explain.empty()) {
    std::optional<RuleTrace> trace = explain_rules(
        *in.manifest, *in.mesh, *rules, cmd.explain, "--explain", diags);
    if (!trace) {
      return session.fail_input();
    }
    return session.finish(ExplainReport{*trace, *rules, *in.mesh},
                          ExitCode::ok);
  }
  return run_rules(*rules, View::plan, in, session);
}

namespace {

// The mesh's options, and --maxtext-config, which gives a mesh instead.
void add_mesh_options(CLI::App& app, CheckCommand& cmd) {
  CLI::Option* mesh =
      app.add_option("--mesh",
                     cmd.mesh,
                     "axes major to minor: \"dp:2,fsdp:-1,tp:4\", or sizes "
                     "with --axis-names (required, unless --maxtext-config)")
          ->type_name("STR");
  CLI::Option* devices = app.add_option("--devices",
                                        cmd.devices,
                                        "number of devices, when no topology "
                                        "is known (no HBM: give --hbm)")
                             ->type_name("N");
  CLI::Option* topology =
      app.add_option("--topology",
                     cmd.topology,
                     "the hardware: a catalogue name (v5p-128, 2xv5e-256, "
                     "h100x64) or a "
                     "topology JSON file; gives the device count and HBM")
          ->type_name("NAME|FILE")
          ->excludes(devices);
  devices->excludes(topology);
  app.add_flag("--allow-split-physical-axes",
               cmd.allow_split_physical_axes,
               "let a mesh axis take part of a physical torus axis (JAX's "
               "allow_split_physical_axes)");
  CLI::Option* axis_names =
      app.add_option("--axis-names",
                     cmd.axis_names,
                     "names for a positional mesh, e.g. dp,fsdp,tp")
          ->delimiter(',')
          ->type_name("A,B,..");
  CLI::Option* dcn =
      app.add_option("--dcn",
                     cmd.dcn,
                     "the multi-slice (DCN) factor of each axis, e.g. \"dp:2\"")
          ->type_name("STR");
  add_maxtext_option(app, cmd.maxtext)
      ->excludes(mesh)
      ->excludes(dcn)
      ->excludes(axis_names);
}

// The options of the memory estimate and of the validator.
void add_estimate_options(CLI::App& app, CheckCommand& cmd) {
  app.add_option(
         "--recipe",
         cmd.recipe,
         "training state per parameter: params-only (default), adam (16 "
         "B/param "
         "for bf16), adam-fp32-grads or megatron (18), adam-fp32-accum (20), "
         "scaling-book (10)")
      ->check(CLI::IsMember(recipe_names()))
      ->type_name("NAME")
      ->default_str("params-only");
  app.add_option("--param-dtype",
                 cmd.param_dtype,
                 "dtype the weights are held and trained in (default: each "
                 "tensor's own; training recipes train FP8 weights in bf16; "
                 "MaxText trains in f32)")
      ->type_name("DTYPE");
  app.add_option("--grad-dtype",
                 cmd.grad_dtype,
                 "dtype gradients are held in (default: the recipe's: the "
                 "param dtype, or f32 for adam-fp32-grads)")
      ->type_name("DTYPE");
  app.add_option("--optimizer",
                 cmd.optimizer,
                 "the optimizer whose state the recipe keeps: adamw "
                 "(default: two moments), adafactor (factored), sgd (none), "
                 "muon (one momentum)")
      ->check(CLI::IsMember(optimizer_names()))
      ->type_name("NAME");
  app.add_option("--moment-dtype",
                 cmd.moment_dtype,
                 "dtype of the optimizer's moments (default f32; with "
                 "--maxtext-config the weights', and this is mu_dtype)")
      ->type_name("DTYPE");
  app.add_option("--master-weights",
                 cmd.master,
                 "f32: an f32 master copy of weights held narrower (the "
                 "default but with scaling-book); none: no copy (MaxText's "
                 "default)")
      ->check(CLI::IsMember({"f32", "none"}))
      ->type_name("f32|none");
  app.add_option("--zero",
                 cmd.zero,
                 "ZeRO stage: 1 shards optimizer state, 2 also grads, 3 also "
                 "params over "
                 "the data axes")
      ->check(CLI::Range(0, 3))
      ->type_name("0-3")
      ->default_str("0");
  app.add_option("--data-axes",
                 cmd.data_axes,
                 "the data-parallel axes: they split the batch, and ZeRO "
                 "shards over them (default: dp, data, fsdp, fsdp_transpose)")
      ->delimiter(',')
      ->type_name("A,B,..");
  app.add_option("--headroom",
                 cmd.headroom,
                 "fraction of HBM kept free for what the runtime holds "
                 "outside its allocator (and activations, without a "
                 "workload); default the runtime's: 0 on a TPU, 0.25 for "
                 "JAX on a GPU, 0.1 for PyTorch")
      ->check(CLI::Range(0.0, 0.99))
      ->type_name("F");
  app.add_option(
         "--host-offload",
         cmd.host_offload,
         "model states kept in host memory between steps, in HBM for "
         "the optimizer step alone: optimizer, params (MaxText's "
         "optimizer_memory_host_offload, parameter_memory_host_offload)")
      ->delimiter(',')
      ->check(CLI::IsMember({"optimizer", "params"}))
      ->type_name("STATES");
  app.add_option("--runtime",
                 cmd.runtime,
                 "what runs the step: xla (JAX; the default on a TPU or with "
                 "--maxtext-config) or pytorch (its caching allocator "
                 "reserves more than it allocates; the default on a GPU)")
      ->check(CLI::IsMember(runtime_names()))
      ->type_name("RUNTIME");
  app.add_option("--hbm",
                 cmd.hbm,
                 "HBM per device, overriding the topology's (80GB, 95GiB)")
      ->type_name("SIZE");
  app.add_option(
         "--warn-replicated",
         cmd.warn_replicated,
         "warn about tensors of at least SIZE that are fully replicated, or "
         "that a preset leaves whole over an axis it splits others over "
         "(0: never)")
      ->type_name("SIZE")
      ->default_str("64MiB");
}

// The options of the step's time.
void add_step_options(CLI::App& app, CheckCommand& cmd) {
  app.add_option("--matmul-efficiency",
                 cmd.matmul_efficiency,
                 "the fraction of the bf16 peak the weights' matmuls reach, "
                 "for the step time (default: the topology's figure, fitted "
                 "to published runs, else 1; docs/step.md)")
      ->check(CLI::Range(0.01, 1.0))
      ->type_name("F")
      ->group("Workload (activations; docs/memory.md)");
  app.add_option("--attention-efficiency",
                 cmd.attention_efficiency,
                 "the fraction of the bf16 peak the attention kernel's "
                 "matmuls reach (default: the topology's figure, else 1)")
      ->check(CLI::Range(0.01, 1.0))
      ->type_name("F")
      ->group("Workload (activations; docs/memory.md)");
  for (CLI::Option* option : add_kernel_options(app, cmd.kernel)) {
    option->group("Workload (activations; docs/memory.md)");
  }
  app.add_option("--overlap",
                 cmd.overlap,
                 "the collectives that overlap compute: fsdp (gathers "
                 "prefetched), grads (reduction behind the backward), tensor, "
                 "expert, or none (default fsdp,grads; docs/step.md)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fsdp", "grads", "tensor", "expert", "none"}))
      ->type_name("KINDS")
      ->group("Workload (activations; docs/memory.md)");
}

// The options `plan`, `check` and `memory` share (`view`: which one): plan
// has no --specs, and its --mesh is checked by run_plan (`plan --rules list`
// needs none); memory takes --specs or --rules.
void add_check_options(CLI::App& app, CheckCommand& cmd, View view) {
  add_mesh_options(app, cmd);
  const std::vector<CLI::Option*> manifest_options =
      add_manifest_options(app, cmd.source);
  if (view != View::plan) {
    app.add_option(
           "--specs",
           cmd.specs,
           "the specs: {\"specs\": {NAME: SPEC}} or the JSON `plan` writes")
        ->required(view == View::check)
        ->type_name("FILE");
  }
  if (view == View::memory) {
    app.add_option("--rules",
                   cmd.rules,
                   "specs from rules instead of --specs, as plan --rules: a "
                   "rules file or a built-in preset")
        ->type_name("FILE|PRESET");
  }
  add_estimate_options(app, cmd);
  add_workload_options(app, cmd.workload, manifest_options);
  add_step_options(app, cmd);
}

void add_plan_command(CLI::App& sub, PlanCommand& cmd, CommonOptions& common) {
  add_check_options(sub, cmd.check, View::plan);
  sub.add_option(
         "--rules",
         cmd.rules,
         "a rules file (docs/rules.md) or a built-in preset: fsdp, fsdp-tp, "
         "maxtext; \"list\" lists the presets")
      ->type_name("FILE|PRESET")
      ->default_str("fsdp-tp");
  sub.add_option("--explain",
                 cmd.explain,
                 "for one tensor: every rule, whether it matched, and what its "
                 "algorithm considered")
      ->type_name("NAME");
  add_common(sub, common, {View::plan, View::explain, View::preset_list});
  sub.footer(
      R"(Exit codes: 0 no errors (warnings allowed), 1 unmatched tensors, invalid
specs or over HBM capacity, 2 unreadable or malformed input.

Examples:
  shardplan plan --topology v5p-128 --mesh fsdp:-1,tp:4 --model llama-3-8b
  shardplan plan --topology v5p-128 --mesh fsdp:16,ep:2,tp:2 --model deepseek-v3 --recipe adam
  shardplan plan --topology v5p-256 --mesh fsdp:32,tp:4 --model llama-3-70b --recipe adam --seq 8192 --batch 128
  shardplan plan --devices 8 --mesh fsdp:8 --hbm 80GB --manifest m.json --rules my-rules.json
  shardplan plan ... --format json -o plan.json && shardplan check ... --specs plan.json
  shardplan plan ... --explain model.layers.0.mlp.up_proj.weight
  shardplan plan --rules list)");
}

void add_check_command(CLI::App& sub,
                       CheckCommand& cmd,
                       CommonOptions& common) {
  add_check_options(sub, cmd, View::check);
  add_common(sub, common, {View::check});
  sub.footer(
      R"(Exit codes: 0 no errors (warnings allowed), 1 invalid specs or over HBM
capacity, 2 unreadable or malformed input.

Examples:
  shardplan check --topology v5p-128 --mesh fsdp:-1,tp:4 --manifest m.json --specs s.json
  shardplan check --devices 8 --mesh dp:2,tp:4 --hbm 80GB --manifest m.json --specs s.json
  shardplan check ... --recipe adam --zero 1 --format github
  shardplan check ... --format markdown -o summary.md)");
}

void add_memory_command(CLI::App& sub,
                        CheckCommand& cmd,
                        CommonOptions& common) {
  add_check_options(sub, cmd, View::memory);
  sub.add_option(
         "--largest", cmd.largest, "how many of the largest tensors to list")
      ->type_name("N")
      ->default_str("20");
  add_common(sub, common, {View::memory});
  sub.footer(R"(Examples:
  shardplan memory --topology v5p-128 --mesh fsdp:-1,tp:4 --manifest m.json --specs s.json
  shardplan memory --topology v5p-128 --mesh fsdp:-1,tp:4 --model llama-3-8b --rules fsdp-tp --recipe adam
  shardplan memory --topology v5p-256 --mesh pp:4,fsdp:8,tp:4 --model llama-3-70b --rules fsdp-tp --recipe adam --seq 8192 --batch 128 --microbatches 8 --remat minimal
  shardplan memory --topology h100x64 --mesh dp:8,tp:8 --manifest m.json --specs s.json --recipe adam --zero 3)");
}

int run_check_command(const CheckCommand& cmd, Session& session) {
  return run_check(cmd, View::check, session);
}

int run_memory_command(const CheckCommand& cmd, Session& session) {
  return run_check(cmd, View::memory, session);
}

}  // namespace

Runner add_plan(CLI::App& sub, CommonOptions& common) {
  return bind_options(sub, common, add_plan_command, run_plan);
}

Runner add_check(CLI::App& sub, CommonOptions& common) {
  return bind_options(sub, common, add_check_command, run_check_command);
}

Runner add_memory(CLI::App& sub, CommonOptions& common) {
  return bind_options(sub, common, add_memory_command, run_memory_command);
}

}  // namespace shardplan::cli
