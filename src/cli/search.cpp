// `shardplan search` (DESIGN.md section 9; docs/search.md): the command
// line around search_meshes; the search's policy (default axes, workload
// variations, the slices of --devices) is src/search/'s.

#include "cli/commands.hpp"

#include <shardplan/io.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/search.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace shardplan::cli {

// The `search` row of the command table (cli.cpp).
Runner add_search(CLI::App& sub, CommonOptions& common) {
  return bind_options(sub, common, add_search_options, run_search);
}

void add_search_options(CLI::App& search,
                        SearchCommand& cmd,
                        CommonOptions& common) {
  CLI::App* sub = &search;
  sub->add_option("--topology", cmd.topology, "the hardware (required)")
      ->type_name("NAME|FILE")
      ->required();
  sub->add_option("--devices",
                  cmd.devices,
                  "device counts to search instead of --topology's: \"64\", "
                  "\"64,128\" or a range \"64-512\", each the catalogue "
                  "slice of --topology's chip (and slice count) with as many "
                  "devices")
      ->type_name("N,A-B,..");
  const std::vector<CLI::Option*> manifest =
      add_manifest_options(*sub, cmd.source);
  CLI::Option* config =
      sub->add_option("--config",
                      cmd.config,
                      "the model's config.json beside --manifest")
          ->type_name("FILE");
  for (size_t i = 1; i < manifest.size(); ++i) {
    config->excludes(manifest[i]);
  }
  sub->add_option("--rules", cmd.rules, "the preset each mesh is planned with")
      ->type_name("PRESET")
      ->default_str("fsdp-tp")
      ->each([&cmd](const std::string&) { cmd.rules_given = true; });
  sub->add_option("--axes",
                  cmd.axes,
                  "the axes to assign the devices of a slice to, in mesh "
                  "order (default: fsdp,tp, and ep for a model with "
                  "experts; dp across slices; MaxText's names with "
                  "--rules maxtext or --maxtext-config)")
      ->delimiter(',')
      ->type_name("A,B,..");
  sub->add_option("--dcn-axes",
                  cmd.dcn_axes,
                  "the axes the slices of a multi-slice topology go to "
                  "(default: dp, and fsdp and pp when in --axes)")
      ->delimiter(',')
      ->type_name("A,B,..");
  sub->add_option("--recipe", cmd.recipe, "training state per parameter")
      ->check(CLI::IsMember(recipe_names()))
      ->type_name("NAME")
      ->default_str("adam");
  sub->add_option("--zero", cmd.zero, "ZeRO stage over the data axes")
      ->check(CLI::Range(0, 3))
      ->type_name("0-3");
  sub->add_option("--headroom", cmd.headroom, "fraction of HBM kept free")
      ->check(CLI::Range(0.0, 0.99))
      ->type_name("F")
      ->default_str("0.1");
  sub->add_option("--seq",
                  cmd.seq,
                  "tokens per sequence (required, unless --maxtext-config "
                  "has max_target_length)")
      ->type_name("N");
  CLI::Option* batch =
      sub->add_option("--batch", cmd.batch, "global batch (sequences)")
          ->type_name("N");
  sub->add_option("--per-device-batch",
                  cmd.per_device_batch,
                  "instead of --batch: sequences per device; several values "
                  "are searched (e.g. 1,2,4)")
      ->delimiter(',')
      ->type_name("X,..")
      ->excludes(batch);
  sub->add_option("--microbatches", cmd.microbatches, "microbatches")
      ->type_name("M")
      ->default_str("1");
  sub->add_option(
         "--remat", cmd.remat, "remat policies to search (default full)")
      ->delimiter(',')
      ->type_name("POLICY,..")
      ->each([&cmd](const std::string&) { cmd.remat_given = true; });
  sub->add_option("--attention", cmd.attention, "flash or plain")
      ->type_name("KIND");
  sub->add_flag("--sequence-parallel",
                cmd.sequence_parallel,
                "Megatron's sequence parallelism");
  sub->add_option("--matmul-efficiency",
                  cmd.matmul_efficiency,
                  "fraction of the bf16 peak a matmul reaches (default 1)")
      ->check(CLI::Range(0.01, 1.0))
      ->type_name("F");
  sub->add_option("--top", cmd.top, "candidates shown (default 10)")
      ->check(CLI::Range(1, 1000000))
      ->type_name("N");
  sub->add_option("--objective",
                  cmd.objective,
                  "rank by tokens (tokens/s, default), step, memory or mfu")
      ->check(CLI::IsMember({"tokens", "step", "memory", "mfu"}))
      ->type_name("NAME");
  sub->add_flag("--allow-split-physical-axes",
                cmd.allow_split_physical_axes,
                "let a mesh axis take part of a physical torus axis");
  add_maxtext_option(*sub, cmd.maxtext);
  // jax and maxtext write the winner's plan (DESIGN.md 9, 10).
  add_common(*sub, common, {View::search}, {Format::jax, Format::maxtext});
  sub->footer(R"(
Exit codes: 0 a candidate fits, 1 none fits, 2 bad usage or input.

Examples:
  shardplan search --topology v5p-256 --model llama-3-70b --seq 8192 --batch 128
  shardplan search --topology v5p-512 --model deepseek-v3 --seq 4096 --per-device-batch 1 --remat full,minimal
  shardplan search --topology 2xv5p-256 --model llama-3-8b --seq 8192 --batch 512 --format json
  shardplan search --topology v5p-256 --devices 64-512 --model llama-3-70b --seq 8192 --per-device-batch 1)");
}

namespace {

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

// Reads the inputs (--devices' slices reported at `sources`); false after
// an input error (reported).
bool load_search_inputs(const SearchCommand& cmd,
                        const MeshSources& sources,
                        Diagnostics& diags,
                        SearchInputs& in) {
  in.topology = load_topology(cmd.topology, "--topology", diags);
  if (!in.topology) {
    return false;
  }
  in.slices = {*in.topology};
  if (!cmd.devices.empty()) {
    std::optional<std::vector<Topology>> chosen =
        device_slices(*in.topology, cmd.devices, sources, diags);
    if (!chosen) {
      return false;
    }
    in.slices = std::move(*chosen);
  }
  in.manifest = load_manifest(cmd.source, diags);
  bool failed = !in.manifest;
  if (!failed) {
    in.model = read_architecture(cmd.config, cmd.source, diags, failed);
  }
  if (!failed && !in.model) {
    diags
        .error("workload.no-architecture",
               "search needs the model's architecture, which a manifest's "
               "tensors alone do not give",
               Location::of("--manifest"))
        .hint = "give --config FILE beside --manifest, or --model NAME";
    failed = true;
  }
  // --maxtext-config: the rules, the workload and allow_split of a MaxText
  // config; the meshes are still search's, named as MaxText names axes.
  if (!failed && !cmd.maxtext.empty()) {
    in.maxtext = load_maxtext_config(cmd.maxtext, diags);
    failed = !in.maxtext;
  }
  if (failed) {
    return false;
  }
  if (in.maxtext && cmd.rules_given) {
    note_maxtext_rules_unused(*in.maxtext, "--rules", diags);
  }
  in.rules = in.maxtext && !cmd.rules_given
                 ? maxtext_rules(*in.maxtext, diags)
                 : load_rules(cmd.rules, "--rules", diags);
  return in.rules.has_value();
}

// The search's options: the flags, else a MaxText config's keys, else the
// search's defaults; the winner's plan reported at plan's flags, the plan it
// is. False after a usage error (reported).
bool search_options(const SearchCommand& cmd,
                    const SearchInputs& in,
                    Diagnostics& diags,
                    SearchOptions& options) {
  WorkloadFlags flags;
  flags.seq = cmd.seq;
  flags.batch = cmd.batch;
  if (!cmd.per_device_batch.empty()) {
    flags.per_device_batch = cmd.per_device_batch.front();
  }
  if (cmd.remat_given) {
    flags.remat = cmd.remat.front();
  }
  const std::optional<MaxTextConfig>& maxtext = in.maxtext;
  if (maxtext) {
    apply_maxtext_workload(*maxtext, true, flags, diags);
  }
  if (!flags.seq) {
    diags
        .error("cli.usage",
               "--seq is required (or max_target_length in --maxtext-config)",
               Location::of("--seq"))
        .hint = "e.g. --seq 8192 --batch 256";
    return false;
  }
  options.axes = cmd.axes;
  options.dcn_axes = cmd.dcn_axes;
  options.dcn_axes_source = "--dcn-axes";
  options.maxtext_axis_names =
      maxtext || (cmd.rules_given && cmd.rules == "maxtext");
  if (!resolve_search_axes(*in.model, options, diags)) {
    return false;
  }
  options.remat = cmd.remat_given ? cmd.remat : std::vector<std::string>();
  options.per_device_batch = cmd.per_device_batch;
  Workload& w = options.workload;
  w.seq = *flags.seq;
  w.seq_source = flags.seq_source;
  w.batch = cmd.batch;
  w.batch_source = "--batch";
  w.per_device_batch = flags.per_device_batch.value_or("");
  w.per_device_batch_source = flags.per_device_batch_source;
  w.microbatches = cmd.microbatches;
  w.microbatches_source = "--microbatches";
  w.remat = flags.remat.value_or("full");
  w.remat_source = flags.remat_source;
  w.attention = cmd.attention;
  w.attention_source = "--attention";
  w.sequence_parallel = cmd.sequence_parallel;
  if (!cmd.batch && w.per_device_batch.empty()) {
    diags
        .error("workload.missing-batch",
               "search needs --batch N or --per-device-batch X",
               Location::of("--batch"))
        .hint = "e.g. --seq 8192 --batch 256";
    return false;
  }
  options.memory.recipe = *parse_recipe(cmd.recipe);  // CLI11 checked it
  options.memory.zero = cmd.zero;
  options.memory.headroom = cmd.headroom;
  options.memory.zero_source = "--zero";
  if (maxtext && maxtext->weight_dtype) {
    options.memory.param_dtype = maxtext->weight_dtype->value;
    options.memory.param_dtype_source =
        maxtext_source(maxtext->weight_dtype->at);
  }
  options.step.matmul_efficiency = cmd.matmul_efficiency;
  options.step.matmul_efficiency_source = "--matmul-efficiency";
  options.allow_split_physical_axes =
      cmd.allow_split_physical_axes
      || (maxtext && maxtext->allow_split_physical_axes.value);
  options.objective =
      parse_search_objective(cmd.objective).value_or(SearchObjective::tokens);
  options.winner.sources = mesh_flags();
  options.winner.replicated_warning_source = "--warn-replicated";
  options.winner.data_axes_source = "--data-axes";
  return true;
}

}  // namespace

int run_search(const SearchCommand& cmd, Session& session) {
  Diagnostics& diags = session.diags();
  SearchOptions options;
  // Each candidate's mesh is its --axes; its slice, --topology or one of
  // --devices'.
  options.sources = MeshSources{"--axes",
                                "--dcn",
                                "--axis-names",
                                "--devices",
                                "--topology",
                                "--allow-split-physical-axes"};
  SearchInputs in;
  if (!load_search_inputs(cmd, options.sources, diags, in)
      || !search_options(cmd, in, diags, options)) {
    return session.fail_input();
  }
  // jax and maxtext write the winner's plan (DESIGN.md 9, 10).
  const Format format = session.format();
  options.winner.plan = format == Format::jax || format == Format::maxtext;
  // A count on stderr once the search has run a second (not with -q).
  const auto start = std::chrono::steady_clock::now();
  bool shown = false;
  if (!session.quiet()) {
    options.progress = [&](int64_t done, int64_t total) {
      if (std::chrono::steady_clock::now() - start >= std::chrono::seconds(1)) {
        session.err() << fmt::format("\rsearch: {}/{} meshes", done, total)
                      << std::flush;
        shown = true;
      }
    };
  }
  Stopwatch watch;
  std::optional<SearchResult> result = search_meshes(
      *in.manifest, *in.model, in.slices, *in.rules, options, diags);
  watch.lap("search");
  session.err() << (shown ? "\n" : "");
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
    const Provenance provenance{session.command_line(),
                                options.allow_split_physical_axes,
                                search_winner_note(*result, options.objective)};
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
