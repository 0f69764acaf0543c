// `shardplan search` (DESIGN.md section 9; docs/search.md): the command
// line around search_meshes.

#include "cli/commands.hpp"

#include <shardplan/io.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/search.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
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

// The catalogue slices of `topology`'s chip (and slice count) that --devices
// names: each count, or every catalogue slice within a range, smallest
// first. nullopt (reported at --devices) on a bad count or range, a count
// the catalogue has no slice of, or a topology from a file.
std::optional<std::vector<Topology>> device_slices(const Topology& topology,
                                                   std::string_view text,
                                                   Diagnostics& diags) {
  const Location where = Location::of("--devices");
  if (topology.source != "catalogue") {
    diags
        .error("cli.usage",
               fmt::format("--devices takes catalogue slices of a chip; "
                           "--topology {} is a file",
                           topology.source),
               where)
        .hint =
        "give --topology a catalogue name of the chip (v5p-256, "
        "h100x64), or search the file's topology without --devices";
    return std::nullopt;
  }
  const int64_t slices =
      topology.kind == TopologyKind::tpu ? topology.tpu.num_slices : 1;
  // The chip's slices with --topology's slice count, fewest devices first.
  std::vector<Topology> family = catalogue_slices_like(topology);
  std::vector<std::string> counts;
  for (const Topology& t : family) {
    counts.push_back(std::to_string(t.devices()));
  }
  const std::string per_slice =
      slices > 1 ? fmt::format(" in {} slices", slices) : std::string();
  std::vector<bool> chosen(family.size(), false);
  auto number = [](std::string_view part) -> std::optional<int64_t> {
    int64_t n = 0;
    const auto [end, ec] =
        std::from_chars(part.data(), part.data() + part.size(), n);
    if (ec != std::errc() || end != part.data() + part.size() || n < 1) {
      return std::nullopt;
    }
    return n;
  };
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    parts.emplace_back(text.substr(start, comma - start));
    if (comma == std::string_view::npos) {
      break;
    }
    start = comma + 1;
  }
  for (const std::string& part : parts) {
    const size_t dash = part.find('-');
    const std::optional<int64_t> low =
        number(std::string_view(part).substr(0, dash));
    const std::optional<int64_t> high =
        dash == std::string::npos
            ? low
            : number(std::string_view(part).substr(dash + 1));
    if (!low || !high || *low > *high) {
      diags
          .error("cli.usage",
                 fmt::format("{} is not a device count or a range A-B of "
                             "counts (A <= B)",
                             quote(part)),
                 where)
          .hint = "e.g. --devices 64,128 or --devices 64-512";
      return std::nullopt;
    }
    bool any = false;
    for (size_t i = 0; i < family.size(); ++i) {
      const int64_t n = family[i].devices();
      if (n >= *low && n <= *high) {
        chosen[i] = true;
        any = true;
      }
    }
    if (!any) {
      diags
          .error("topology.size",
                 fmt::format("the catalogue has no {} slice of {} devices{}",
                             topology.chip,
                             dash == std::string::npos
                                 ? std::to_string(*low)
                                 : fmt::format("{} to {}", *low, *high),
                             per_slice),
                 where)
          .hint = slices > 1 ? fmt::format(
                      "{} {} slices together have {} "
                      "devices",
                      slices,
                      topology.chip,
                      fmt::join(counts, ", "))
                             : fmt::format("{}'s slices have {} devices",
                                           topology.chip,
                                           fmt::join(counts, ", "));
      return std::nullopt;
    }
  }
  std::vector<Topology> out;
  for (size_t i = 0; i < family.size(); ++i) {
    if (chosen[i]) {
      out.push_back(std::move(family[i]));
    }
  }
  return out;
}

// The winner (rank 1) planned as `plan --mesh MESH --dcn DCN` plans it with
// search's rules, recipe and workload: its paste-back document is plan's.
int write_winner(const SearchCommand& cmd,
                 const SearchResult& result,
                 const SearchOptions& options,
                 Session& session) {
  const SearchCandidate& winner = result.candidates.front();
  PlanCommand plan;
  // The rules search used: --rules, else a MaxText config's, else fsdp-tp
  // (plan's empty --rules means the same).
  plan.rules = cmd.rules_given || cmd.maxtext.empty() ? cmd.rules : "";
  plan.check.maxtext = cmd.maxtext;  // its rules and workload; not its mesh
  CheckCommand& c = plan.check;
  c.mesh = winner.mesh;
  c.dcn = winner.dcn;
  // Its slice: --topology, or the catalogue slice --devices chose.
  c.topology = cmd.devices.empty() ? cmd.topology : winner.topology;
  c.source = cmd.source;
  c.recipe = cmd.recipe;
  c.zero = cmd.zero;
  c.headroom = cmd.headroom;
  c.allow_split_physical_axes = options.allow_split_physical_axes;
  c.matmul_efficiency = cmd.matmul_efficiency;
  WorkloadFlags& w = c.workload;
  w.config = cmd.config;
  w.seq = cmd.seq;
  if (!winner.per_device_batch.empty()) {
    w.per_device_batch = winner.per_device_batch;
  } else {
    w.batch = cmd.batch;
  }
  w.microbatches = cmd.microbatches;
  w.remat = winner.remat;
  w.attention = cmd.attention;
  w.sequence_parallel = cmd.sequence_parallel;
  session.set_note(fmt::format(
      "search's winner, rank 1 of {} by {}: plan --mesh {}{} --remat {}{}",
      std::count_if(
          result.candidates.begin(),
          result.candidates.end(),
          [](const SearchCandidate& x) { return x.rank.has_value(); }),
      to_string(options.objective),
      winner.mesh,
      winner.dcn.empty() ? std::string() : " --dcn " + winner.dcn,
      winner.remat,
      winner.per_device_batch.empty()
          ? std::string()
          : " --per-device-batch " + winner.per_device_batch));
  return run_plan(plan, session);
}

}  // namespace

int run_search(const SearchCommand& cmd, Session& session) {
  Diagnostics& diags = session.diags();
  std::optional<Topology> topology =
      load_topology(cmd.topology, "--topology", diags);
  if (!topology) {
    return session.fail_input();
  }
  // The slices searched: --topology's, or those --devices names.
  std::vector<Topology> slices{*topology};
  if (!cmd.devices.empty()) {
    std::optional<std::vector<Topology>> chosen =
        device_slices(*topology, cmd.devices, diags);
    if (!chosen) {
      return session.fail_input();
    }
    slices = std::move(*chosen);
  }
  std::optional<Manifest> manifest = load_manifest(cmd.source, diags);
  if (!manifest) {
    return session.fail_input();
  }
  bool failed = false;
  std::optional<ModelConfig> model =
      read_architecture(cmd.config, cmd.source, diags, failed);
  if (failed) {
    return session.fail_input();
  }
  if (!model) {
    diags
        .error("workload.no-architecture",
               "search needs the model's architecture, which a manifest's "
               "tensors alone do not give",
               Location::of("--manifest"))
        .hint = "give --config FILE beside --manifest, or --model NAME";
    return session.fail_input();
  }
  // --maxtext-config: the rules, the workload and allow_split of a MaxText
  // config; the meshes are still search's, named as MaxText names axes.
  std::optional<MaxTextConfig> maxtext;
  if (!cmd.maxtext.empty()) {
    maxtext = load_maxtext_config(cmd.maxtext, diags);
    if (!maxtext) {
      return session.fail_input();
    }
  }
  std::optional<RuleSet> rules;
  if (maxtext && !cmd.rules_given) {
    rules = maxtext_rules(*maxtext, diags);
  } else {
    if (maxtext) {
      note_maxtext_rules_unused(*maxtext, "--rules", diags);
    }
    rules = load_rules(cmd.rules, "--rules", diags);
  }
  if (!rules) {
    return session.fail_input();
  }
  WorkloadFlags workload;
  workload.seq = cmd.seq;
  workload.batch = cmd.batch;
  if (!cmd.per_device_batch.empty()) {
    workload.per_device_batch = cmd.per_device_batch.front();
  }
  if (cmd.remat_given) {
    workload.remat = cmd.remat.front();
  }
  if (maxtext) {
    apply_maxtext_workload(*maxtext, true, workload, diags);
  }
  std::vector<std::string> per_device_batch = cmd.per_device_batch;
  if (per_device_batch.empty() && workload.per_device_batch) {
    per_device_batch = {*workload.per_device_batch};
  }
  std::vector<std::string> remat = cmd.remat;
  if (!cmd.remat_given && workload.remat) {
    remat = {*workload.remat};
  }
  if (!workload.seq) {
    diags
        .error("cli.usage",
               "--seq is required (or max_target_length in --maxtext-config)",
               Location::of("--seq"))
        .hint = "e.g. --seq 8192 --batch 256";
    return session.fail_input();
  }
  SearchOptions options;
  options.axes = cmd.axes;
  // MaxText's rules split over MaxText's axis names only ("tensor", not
  // "tp": other axes hold replicas), so with them the axes are named so.
  const bool maxtext_names =
      maxtext || (cmd.rules_given && cmd.rules == "maxtext");
  if (options.axes.empty()) {
    // fsdp, ep, tp; with MaxText's rules MaxText's names in its mesh_axes
    // order: fsdp, tensor, expert.
    const bool moe = model->experts > 0;
    options.axes = maxtext_names ? std::vector<std::string>{"fsdp", "tensor"}
                   : moe         ? std::vector<std::string>{"fsdp", "ep", "tp"}
                                 : std::vector<std::string>{"fsdp", "tp"};
    if (maxtext_names && moe) {
      options.axes.push_back("expert");
    }
  }
  options.dcn_axes = cmd.dcn_axes;
  if (options.dcn_axes.empty()) {
    options.dcn_axes = {maxtext_names ? "data" : "dp"};
    for (const std::string& axis : options.axes) {
      const bool data = has_default_role(AxisRole::data, axis);
      if (axis != options.dcn_axes.front()
          && (data || has_default_role(AxisRole::stage, axis))) {
        options.dcn_axes.push_back(axis);
      }
    }
  }
  // Names: none empty, none twice.
  auto bad_names = [&](const std::vector<std::string>& names,
                       std::string_view flag,
                       std::string_view example) {
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string& axis = names[i];
      const bool twice =
          std::find(names.begin(), names.begin() + static_cast<long>(i), axis)
          != names.begin() + static_cast<long>(i);
      if (axis.empty() || twice) {
        diags
            .error("cli.usage",
                   axis.empty()
                       ? std::string("an empty axis name")
                       : fmt::format("axis {} given twice", quote(axis)),
                   Location::of(std::string(flag)))
            .hint = fmt::format("e.g. {} {}", flag, example);
        return true;
      }
    }
    return false;
  };
  if (bad_names(options.axes, "--axes", "fsdp,ep,tp")
      || bad_names(options.dcn_axes, "--dcn-axes", "dp,fsdp")) {
    return session.fail_input();
  }
  options.remat = remat;
  options.per_device_batch = per_device_batch;
  options.workload.seq = *workload.seq;
  options.workload.seq_source = workload.seq_source;
  options.workload.batch = cmd.batch;
  options.workload.batch_source = "--batch";
  options.workload.per_device_batch_source = workload.per_device_batch_source;
  options.workload.microbatches = cmd.microbatches;
  options.workload.microbatches_source = "--microbatches";
  options.workload.remat_source = workload.remat_source;
  options.workload.attention = cmd.attention;
  options.workload.attention_source = "--attention";
  options.workload.sequence_parallel = cmd.sequence_parallel;
  if (!cmd.batch && per_device_batch.empty()) {
    diags
        .error("workload.missing-batch",
               "search needs --batch N or --per-device-batch X",
               Location::of("--batch"))
        .hint = "e.g. --seq 8192 --batch 256";
    return session.fail_input();
  }
  // Every remat name is checked before the search: an unknown one would
  // drop every candidate.
  for (const std::string& policy : remat) {
    if (!read_remat_policy(policy, workload.remat_source, diags)) {
      return session.fail_input();
    }
  }
  options.memory.recipe = *parse_recipe(cmd.recipe);  // CLI11 checked it
  options.memory.zero = cmd.zero;
  options.memory.headroom = cmd.headroom;
  options.memory.zero_source = "--zero";
  options.memory.hbm_bytes =
      static_cast<int64_t>(topology->figures.hbm_bytes_per_device.value);
  options.memory.hbm_source = "--topology " + topology->name;
  options.step.matmul_efficiency = cmd.matmul_efficiency;
  options.allow_split_physical_axes =
      cmd.allow_split_physical_axes
      || (maxtext && maxtext->allow_split_physical_axes.value);
  if (maxtext && maxtext->weight_dtype) {
    options.memory.param_dtype = maxtext->weight_dtype->value;
    options.memory.param_dtype_source =
        maxtext_source(maxtext->weight_dtype->at);
  }
  options.objective =
      parse_search_objective(cmd.objective).value_or(SearchObjective::tokens);
  // A count on stderr once the search has run a second (not with -q).
  const auto start = std::chrono::steady_clock::now();
  bool shown = false;
  std::ostream& progress_out = session.err();
  if (!session.quiet()) {
    options.progress = [&](int64_t done, int64_t total) {
      if (std::chrono::steady_clock::now() - start >= std::chrono::seconds(1)) {
        progress_out << fmt::format("\rsearch: {}/{} meshes", done, total)
                     << std::flush;
        shown = true;
      }
    };
  }
  Stopwatch watch;
  std::optional<SearchResult> result =
      search_meshes(*manifest, *model, slices, *rules, options, diags);
  watch.lap("search");
  if (shown) {
    progress_out << "\n";
  }
  if (!result) {
    return session.fail_input();
  }
  spdlog::debug(
      "search: {} of {} meshes planned; {} tensors share {} decision keys: "
      "{} rule decisions made, not {} (tensors x meshes)",
      result->planned,
      result->meshes,
      result->tensors,
      result->decision_keys,
      result->decisions,
      result->tensors * result->planned);
  spdlog::debug(
      "search: the meshes walked {} tensor classes in all, not {} tensors "
      "(tensors x meshes; {} folding{} of the manifest, one per expert rank "
      "count)",
      result->walked,
      result->tensors * result->planned,
      result->foldings,
      result->foldings == 1 ? "" : "s");
  bool any = false;
  for (const SearchCandidate& c : result->candidates) {
    any = any || c.rank.has_value();
  }
  if (session.format() == Format::jax || session.format() == Format::maxtext) {
    if (!any) {
      diags.error("search.no-winner",
                  fmt::format("no candidate fits, so there is no winner to "
                              "write as {}",
                              to_string(session.format())),
                  Location::of("--format"));
      return session.fail_plan();
    }
    return write_winner(cmd, *result, options, session);
  }
  // html draws the winner's mesh on the topology: laid out again (it fits,
  // so it lays out).
  std::optional<PlacedMesh> winner;
  const Topology* winner_slice = nullptr;
  if (any && session.format() == Format::html) {
    const SearchCandidate& best = result->candidates.front();
    for (const Topology& t : slices) {
      winner_slice = t.name == best.topology ? &t : winner_slice;
    }
    Diagnostics quiet;
    winner = place_mesh(MeshInput{best.mesh,
                                  best.dcn,
                                  {},
                                  winner_slice,
                                  std::nullopt,
                                  options.allow_split_physical_axes,
                                  MeshSources{}},
                        quiet);
  }
  const SearchReport report{*result,
                            *topology,
                            slices,
                            manifest->source,
                            options.workload,
                            options.objective,
                            cmd.top,
                            winner ? &winner->mesh : nullptr,
                            winner ? &winner->layout : nullptr,
                            winner ? winner_slice : nullptr};
  return session.finish(report, any ? ExitCode::ok : ExitCode::plan_errors);
}

}  // namespace shardplan::cli
