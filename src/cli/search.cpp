// `shardplan search` (docs/search.md): the command line around
// search_meshes, its inputs read by load_search_inputs (cli/inputs.cpp); the
// search's policy (default axes, workload variations, the slices of
// --devices) is src/search/'s.

#include "cli/commands.hpp"

#include <shardplan/io.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/search.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

namespace shardplan::cli {

// The `search` row of the command table (cli.cpp).
Runner add_search(CLI::App& sub, CommonOptions& common) {
  return bind_options(sub, common, add_search_options, run_search);
}

void add_search_options(CLI::App& sub,
                        SearchCommand& cmd,
                        CommonOptions& common) {
  sub.add_option("--topology", cmd.topology, "the hardware (required)")
      ->type_name("NAME|FILE")
      ->required();
  sub.add_option("--devices",
                 cmd.devices,
                 "device counts to search instead of --topology's: \"64\", "
                 "\"64,128\" or a range \"64-512\", each the catalogue "
                 "slice of --topology's chip (and slice count) with as many "
                 "devices")
      ->type_name("N,A-B,..");
  const std::vector<CLI::Option*> manifest =
      add_manifest_options(sub, cmd.source);
  CLI::Option* config =
      sub.add_option("--config",
                     cmd.config,
                     "the model's config.json beside --manifest")
          ->type_name("FILE");
  for (size_t i = 1; i < manifest.size(); ++i) {
    config->excludes(manifest[i]);
  }
  sub.add_option("--rules", cmd.rules, "the preset each mesh is planned with")
      ->type_name("PRESET")
      ->default_str("fsdp-tp")
      ->each([&cmd](const std::string&) { cmd.rules_given = true; });
  sub.add_option("--axes",
                 cmd.axes,
                 "the axes to assign the devices of a slice to, in mesh "
                 "order (default: fsdp,tp, and ep for a model with "
                 "experts; dp across slices; MaxText's names with "
                 "--rules maxtext or --maxtext-config)")
      ->delimiter(',')
      ->type_name("A,B,..");
  sub.add_option("--dcn-axes",
                 cmd.dcn_axes,
                 "the axes the slices of a multi-slice topology go to "
                 "(default: dp, and fsdp and pp when in --axes)")
      ->delimiter(',')
      ->type_name("A,B,..");
  sub.add_option("--recipe", cmd.recipe, "training state per parameter")
      ->check(CLI::IsMember(recipe_names()))
      ->type_name("NAME")
      ->default_str("adam");
  sub.add_option("--zero", cmd.zero, "ZeRO stage over the data axes")
      ->check(CLI::Range(0, 3))
      ->type_name("0-3");
  sub.add_option("--headroom",
                 cmd.headroom,
                 "fraction of HBM kept free (default the runtime's: 0 on a "
                 "TPU, 0.25 for JAX on a GPU, 0.1 for PyTorch)")
      ->check(CLI::Range(0.0, 0.99))
      ->type_name("F");
  sub.add_option("--runtime",
                 cmd.runtime,
                 "xla (default on a TPU or with --maxtext-config) or pytorch "
                 "(default on a GPU)")
      ->check(CLI::IsMember(runtime_names()))
      ->type_name("RUNTIME");
  sub.add_option("--seq",
                 cmd.seq,
                 "tokens per sequence (required, unless --maxtext-config "
                 "has max_target_length)")
      ->type_name("N");
  CLI::Option* batch =
      sub.add_option("--batch", cmd.batch, "global batch (sequences)")
          ->type_name("N");
  sub.add_option("--per-device-batch",
                 cmd.per_device_batch,
                 "instead of --batch: sequences per device; several values "
                 "are searched (e.g. 1,2,4)")
      ->delimiter(',')
      ->type_name("X,..")
      ->excludes(batch);
  sub.add_option("--microbatches", cmd.microbatches, "microbatches")
      ->type_name("M")
      ->default_str("1");
  sub.add_option(
         "--remat", cmd.remat, "remat policies to search (default full)")
      ->delimiter(',')
      ->type_name("POLICY,..")
      ->each([&cmd](const std::string&) { cmd.remat_given = true; });
  sub.add_option("--attention", cmd.attention, "flash or plain")
      ->type_name("KIND");
  sub.add_flag("--sequence-parallel",
               cmd.sequence_parallel,
               "Megatron's sequence parallelism");
  sub.add_option("--mtp-layers",
                 cmd.mtp_layers,
                 "multi-token-prediction modules trained (default 0)")
      ->check(CLI::Range(0, 64))
      ->type_name("N");
  add_exchange_options(sub, cmd.exchange, sub.option_defaults()->get_group());
  sub.add_option("--host-offload",
                 cmd.host_offload,
                 "model states in host memory between steps: optimizer, "
                 "params")
      ->delimiter(',')
      ->check(CLI::IsMember({"optimizer", "params"}))
      ->type_name("STATES");
  sub.add_option("--matmul-efficiency",
                 cmd.matmul_efficiency,
                 "fraction of the bf16 peak the weights' matmuls reach "
                 "(default: the topology's fitted figure, else 1)")
      ->check(CLI::Range(0.01, 1.0))
      ->type_name("F");
  sub.add_option("--attention-efficiency",
                 cmd.attention_efficiency,
                 "fraction of the bf16 peak the attention kernel reaches "
                 "(default: the topology's fitted figure, else 1)")
      ->check(CLI::Range(0.01, 1.0))
      ->type_name("F");
  add_kernel_options(sub, cmd.kernel);
  sub.add_option("--top", cmd.top, "candidates shown (default 10)")
      ->check(CLI::Range(1, 1000000))
      ->type_name("N");
  sub.add_option("--objective",
                 cmd.objective,
                 "rank by tokens (tokens/s, default), step, memory or mfu")
      ->check(CLI::IsMember({"tokens", "step", "memory", "mfu"}))
      ->type_name("NAME");
  sub.add_flag("--allow-split-physical-axes",
               cmd.allow_split_physical_axes,
               "let a mesh axis take part of a physical torus axis");
  add_maxtext_option(sub, cmd.maxtext);
  // jax and maxtext write the winner's plan (docs/search.md,
  // docs/paste-back.md).
  add_common(sub, common, {View::search}, {Format::jax, Format::maxtext});
  sub.footer(R"(
Exit codes: 0 a candidate fits, 1 none fits, 2 bad usage or input.

Examples:
  shardplan search --topology v5p-256 --model llama-3-70b --seq 8192 --batch 128
  shardplan search --topology v5p-512 --model deepseek-v3 --seq 4096 --per-device-batch 1 --remat full,minimal
  shardplan search --topology 2xv5p-256 --model llama-3-8b --seq 8192 --batch 512 --format json
  shardplan search --topology v5p-256 --devices 64-512 --model llama-3-70b --seq 8192 --per-device-batch 1)");
}

namespace {

// --remat's policies as given: its commas split the list, so the
// NAME=PLACE items of a custom policy join the custom: item before them.
std::vector<std::string> remat_policies(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& item : items) {
    if (!out.empty() && out.back().starts_with("custom")
        && item.find('=') != std::string::npos) {
      out.back() += "," + item;
    } else {
      out.push_back(item);
    }
  }
  return out;
}

// The search's options: the flags, else a MaxText config's keys, else the
// search's defaults; the winner's plan reported at plan's flags, the plan it
// is. False after a usage error (reported).
bool search_options(const SearchCommand& cmd,
                    const SearchInputs& in,
                    Diagnostics& diags,
                    SearchOptions& options) {
  WorkloadFlags flags = cmd.exchange;  // the loss's, context's, experts'
  flags.seq.value = cmd.seq;
  flags.batch.value = cmd.batch;
  if (!cmd.per_device_batch.empty()) {
    flags.per_device_batch.value = cmd.per_device_batch.front();
  }
  flags.microbatches.value = cmd.microbatches;
  const std::vector<std::string> remat = remat_policies(cmd.remat);
  if (cmd.remat_given) {
    flags.remat.value = remat.front();
  }
  flags.attention.value = cmd.attention;
  flags.sequence_parallel = cmd.sequence_parallel;
  const std::optional<MaxTextConfig>& maxtext = in.maxtext;
  apply_maxtext_workload(maxtext, true, flags, diags);
  if (!flags.seq.value) {
    diags
        .error("cli.usage",
               "--seq is required (or max_target_length in --maxtext-config)",
               Location::of("--seq"))
        .hint = "e.g. --seq 8192 --batch 256";
    return false;
  }
  options.axes = cmd.axes;
  options.dcn_axes = {cmd.dcn_axes, Location::of("--dcn-axes")};
  options.maxtext_axis_names =
      maxtext || (cmd.rules_given && cmd.rules == "maxtext");
  if (!resolve_search_axes(*in.model, options, diags)) {
    return false;
  }
  options.remat = cmd.remat_given ? remat : std::vector<std::string>();
  options.per_device_batch = cmd.per_device_batch;
  options.workload = workload_of(flags);
  if (!cmd.batch && options.workload.per_device_batch.value.empty()) {
    diags
        .error("workload.missing-batch",
               "search needs --batch N or --per-device-batch X",
               Location::of("--batch"))
        .hint = "e.g. --seq 8192 --batch 256";
    return false;
  }
  options.memory.recipe = *parse_recipe(cmd.recipe);  // CLI11 checked it
  options.memory.zero = {cmd.zero, Location::of("--zero")};
  apply_runtime(cmd.runtime,
                cmd.headroom,
                in.topology         ? &*in.topology
                : in.slices.empty() ? nullptr
                                    : &in.slices.front(),
                maxtext.has_value(),
                options.memory);
  apply_host_memory(in.topology         ? &*in.topology
                    : in.slices.empty() ? nullptr
                                        : &in.slices.front(),
                    options.memory);
  options.workload.residuals_only = options.memory.runtime == Runtime::xla;
  options.workload.eager_kernels = cmd.kernel.kernels == "eager";
  apply_host_offload(cmd.host_offload, options.memory);
  apply_maxtext_param_dtype(maxtext, options.memory.param_dtype);
  apply_maxtext_optimizer(maxtext, options.memory);
  apply_efficiencies(cmd.matmul_efficiency,
                     cmd.attention_efficiency,
                     &*in.topology,
                     options.memory.runtime,
                     options.step);
  apply_kernel_options(cmd.kernel, maxtext, options.step);
  options.allow_split_physical_axes =
      cmd.allow_split_physical_axes
      || (maxtext && maxtext->allow_split_physical_axes.value);
  options.objective =
      parse_search_objective(cmd.objective).value_or(SearchObjective::tokens);
  options.winner.sources = mesh_flags();
  options.winner.replicated_warning_at = Location::of("--warn-replicated");
  options.winner.data_axes_at = Location::of("--data-axes");
  return true;
}

}  // namespace

int run_search(const SearchCommand& cmd, Session& session) {
  Diagnostics& diags = session.diags();
  SearchOptions options;
  // Each candidate's mesh is its --axes; its slice, --topology or one of
  // --devices'.
  options.sources = mesh_flags();
  options.sources.mesh = "--axes";
  SearchInputs in;
  if (!load_search_inputs(cmd, options.sources, diags, in)
      || !search_options(cmd, in, diags, options)) {
    return session.fail_input();
  }
  // jax and maxtext write the winner's plan (docs/search.md,
  // docs/paste-back.md).
  const Format format = session.format();
  options.winner.plan = format == Format::jax || format == Format::maxtext;
  options.progress = session.progress("search", "meshes");
  Stopwatch watch;
  std::optional<SearchResult> result = search_meshes(
      *in.manifest, *in.model, in.slices, *in.rules, options, diags);
  watch.lap("search");
  session.end_progress();
  if (!result) {
    return session.fail_input();
  }
  const bool any = result->winner() != nullptr;
  if (options.winner.plan && !any) {
    diags.error(
        "search.no-winner",
        fmt::format("no candidate fits, so there is no winner to write as {}",
                    to_string(format)),
        Location::of("--format"));
    return session.fail_plan();
  }
  if (options.winner.plan) {
    if (!result->winner_plan) {
      return session.fail_input();  // its plan failed (reported)
    }
    // Its paste-back document is plan's for its mesh, DCN factors, remat
    // and batch, with search's rules, recipe and workload.
    const auto& mt = in.maxtext;
    const Provenance provenance{session.command_line(),
                                options.allow_split_physical_axes,
                                search_winner_note(*result, options.objective),
                                mt && mt->model && mt->model->name != "default"
                                    ? mt->model->name
                                    : maxtext_model_name(cmd.source.model)};
    return session.finish(
        search_winner_report(*result, *in.manifest, *in.rules, provenance),
        diags.has_errors() ? ExitCode::plan_errors : ExitCode::ok);
  }
  return session.finish(SearchReport{*result,
                                     *in.topology,
                                     in.slices,
                                     in.manifest->source,
                                     options.workload,
                                     options.objective,
                                     cmd.top},
                        any ? ExitCode::ok : ExitCode::plan_errors);
}

}  // namespace shardplan::cli
