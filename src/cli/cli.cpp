#include "cli/cli.hpp"

#include "cli/commands.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/report.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/topology.hpp>
#include <shardplan/validate.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <ostream>
#include <sstream>

namespace shardplan::cli {

namespace {

struct MeshCommand {
  std::string mesh;
  std::optional<int64_t> devices;
  std::vector<std::string> axis_names;
  std::string dcn;
  std::string topology;
  bool allow_split_physical_axes = false;
};

struct TopologyCommand {
  std::string name;
};

struct ManifestCommand {
  ManifestSource source;
  std::string from_safetensors;
};

}  // namespace

void add_common(CLI::App& app,
                CommonOptions& common,
                std::initializer_list<View> views,
                std::initializer_list<Format> more_formats) {
  std::vector<std::string> formats;
  for (Format format : formats_of(views)) {
    formats.emplace_back(to_string(format));
  }
  for (Format format : more_formats) {
    formats.emplace_back(to_string(format));
  }
  app.add_option("--format",
                 common.format,
                 fmt::format("output format: {}", fmt::join(formats, ", ")))
      ->check(CLI::IsMember(formats))
      ->default_str("text");
  app.add_option("-o,--output",
                 common.output,
                 "write the result to FILE (atomically) instead of stdout")
      ->type_name("FILE");
  app.add_flag("-v,--verbose", common.verbose, "debug logs on stderr");
  app.add_flag("-q,--quiet", common.quiet, "only errors on stderr");
  app.add_option(
         "--color", common.color, "colour diagnostics: auto, always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->default_str("auto");
}

std::vector<CLI::Option*> add_manifest_options(CLI::App& app,
                                               ManifestSource& source) {
  CLI::Option* manifest =
      app.add_option("--manifest",
                     source.manifest,
                     "the tensors: a manifest {\"params\": [...]}, a "
                     "safetensors header JSON object, a .safetensors file, a "
                     "model.safetensors.index.json or a checkpoint folder")
          ->type_name("PATH");
  CLI::Option* model =
      app.add_option("--model",
                     source.model,
                     "a built-in model instead (gpt2, llama-3-8b, "
                     "deepseek-v3, ...; `shardplan manifest --model list`)")
          ->type_name("NAME")
          ->excludes(manifest);
  CLI::Option* hf_config = app.add_option("--from-hf-config",
                                          source.hf_config,
                                          "a Hugging Face config.json instead: "
                                          "the tensors of its checkpoint")
                               ->type_name("FILE")
                               ->excludes(manifest)
                               ->excludes(model);
  return {manifest, model, hf_config};
}

std::optional<Manifest> load_manifest(const ManifestSource& source,
                                      Diagnostics& diags) {
  if (!source.model.empty()) {
    return read_builtin_model(source.model, "--model", diags);
  }
  if (!source.hf_config.empty()) {
    std::optional<std::vector<ModelTensor>> tensors = read_path(
        source.hf_config, InputKind::hf_config, diags, tensors_from_hf_config);
    if (!tensors) {
      return std::nullopt;
    }
    return manifest_from_model(*tensors, source.hf_config, diags);
  }
  if (source.manifest.empty()) {
    diags
        .error("cli.no-manifest",
               "no parameters to read: give --manifest PATH, --model NAME or "
               "--from-hf-config FILE",
               Location::of("shardplan"))
        .hint = "shardplan manifest --model list shows the built-in models";
    return std::nullopt;
  }
  return read_manifest_path(source.manifest, diags);
}

// For options taking NAME|FILE (--topology, --rules): a path to an existing
// file, or one ending in .json, is a file; anything else a built-in name.
bool names_a_file(const std::string& arg) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(arg, ec);
  return arg.ends_with(".json")
         || (std::filesystem::exists(status)
             && !std::filesystem::is_directory(status));
}

std::optional<Topology> load_topology(const std::string& arg,
                                      const std::string& flag,
                                      Diagnostics& diags) {
  if (names_a_file(arg)) {
    return read_path(arg, InputKind::topology, diags, read_topology_file);
  }
  return resolve_topology(arg, Location::of(flag), diags);
}

MeshSources mesh_flags() {
  return MeshSources{"--mesh",
                     "--dcn",
                     "--axis-names",
                     "--devices",
                     "--topology",
                     "--allow-split-physical-axes"};
}

namespace {

int run_mesh(const MeshCommand& cmd, Session& session) {
  std::optional<Topology> topology;
  if (!cmd.topology.empty()) {
    topology = load_topology(cmd.topology, "--topology", session.diags());
    if (!topology) {
      return session.fail_input();
    }
  }
  const MeshInput input{cmd.mesh,
                        cmd.dcn,
                        cmd.axis_names,
                        topology ? &*topology : nullptr,
                        cmd.devices,
                        cmd.allow_split_physical_axes,
                        mesh_flags(),
                        true};
  std::optional<PlacedMesh> placed = place_mesh(input, session.diags());
  if (!placed) {
    return session.fail_input();
  }
  spdlog::debug(
      "mesh {} resolved to {} devices", cmd.mesh, placed->mesh.num_devices());
  const Provenance provenance{
      session.command_line(), cmd.allow_split_physical_axes, {}};
  return session.finish(
      MeshReport{placed->mesh, placed->layout, input.topology, &provenance},
      ExitCode::ok);
}

// A byte size: "1073741824", "80GB", "95GiB", "64 MiB", "1.5e9". Decimal
// units (kB, MB, GB, TB) are powers of 1000, binary ones (KiB, MiB, GiB,
// TiB) of 1024; case does not matter; rounded to whole bytes. With
// `positive`, a size that is 0 bytes is refused as well (--hbm: a device
// holds something). Reports at `flag`.
std::optional<int64_t> parse_size(std::string_view text,
                                  std::string_view flag,
                                  Diagnostics& diags,
                                  bool positive = false) {
  std::string trimmed;
  for (char c : text) {
    if (c != ' ') {
      trimmed += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  struct Unit {
    std::string_view suffix;
    double factor;
  };
  constexpr std::array<Unit, 9> k_units{{{"kib", 1024.0},
                                         {"mib", 1048576.0},
                                         {"gib", 1073741824.0},
                                         {"tib", 1099511627776.0},
                                         {"kb", 1e3},
                                         {"mb", 1e6},
                                         {"gb", 1e9},
                                         {"tb", 1e12},
                                         {"b", 1.0}}};
  double factor = 1.0;
  std::string_view number = trimmed;
  for (const Unit& u : k_units) {
    if (number.ends_with(u.suffix)) {
      number.remove_suffix(u.suffix.size());
      factor = u.factor;
      break;
    }
  }
  double value = 0;
  auto [end, ec] =
      std::from_chars(number.data(), number.data() + number.size(), value);
  const double bytes = value * factor;
  if (number.empty() || ec != std::errc()
      || end != number.data() + number.size() || !(bytes >= 0)
      || bytes >= 9.2e18) {
    diags.error(
        "cli.size",
        fmt::format(
            "expected a byte size such as 80GB, 95GiB or 1073741824, got {}",
            quote(text)),
        Location::of(std::string(flag)));
    return std::nullopt;
  }
  const auto rounded = static_cast<int64_t>(std::llround(bytes));
  if (positive && rounded == 0) {
    diags
        .error("cli.size",
               fmt::format("expected a byte size above 0, got {}", quote(text)),
               Location::of(std::string(flag)))
        .hint = "give the device's memory, such as 80GB or 95GiB";
    return std::nullopt;
  }
  return rounded;
}

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
  std::string mesh_text;
  std::string dcn_text;
};

// Reads the inputs; false after an input error (reported).
bool load_inputs(const CheckCommand& cmd, Diagnostics& diags, Inputs& in) {
  if (!cmd.topology.empty()) {
    in.topology = load_topology(cmd.topology, "--topology", diags);
    if (!in.topology) {
      return false;
    }
  }
  const std::optional<Topology>& topology = in.topology;
  in.mesh_text = cmd.mesh;
  in.dcn_text = cmd.dcn;
  bool allow_split = cmd.allow_split_physical_axes;
  MeshSources sources = mesh_flags();
  if (!cmd.maxtext.empty()) {
    in.maxtext = load_maxtext_config(cmd.maxtext, diags);
    if (!in.maxtext) {
      return false;
    }
  }
  if (!cmd.maxtext.empty() && cmd.mesh.empty()) {
    // The mesh MaxText builds from the config on these devices (search's
    // winner gives its own --mesh with the config's rules and workload).
    if (!topology && !cmd.devices) {
      diags
          .error("cli.usage",
                 "--maxtext-config needs the devices: --topology or --devices",
                 Location::of("--maxtext-config"))
          .hint = "e.g. --topology v5p-128 --maxtext-config my.yml";
      return false;
    }
    std::optional<MaxTextMesh> built =
        maxtext_mesh(*in.maxtext,
                     topology ? topology->devices() : *cmd.devices,
                     topology ? std::optional<int64_t>(topology->num_slices())
                              : std::nullopt,
                     diags);
    if (!built) {
      return false;
    }
    spdlog::debug(
        "--maxtext-config: mesh {} dcn \"{}\"", built->mesh, built->dcn);
    in.mesh_text = built->mesh;
    in.dcn_text = built->dcn;
    allow_split = allow_split || built->allow_split_physical_axes;
    sources = maxtext_flags();
  } else if (cmd.mesh.empty()) {
    diags
        .error("cli.usage",
               "--mesh is required (or --maxtext-config FILE)",
               Location::of("--mesh"))
        .hint = "e.g. --topology v5p-128 --mesh fsdp:-1,tp:4";
    return false;
  }
  in.allow_split_physical_axes = allow_split;
  // With a topology, a mesh of another device count is a plan error that
  // the validator reports with the others.
  const MeshInput input{in.mesh_text,
                        in.dcn_text,
                        cmd.axis_names,
                        topology ? &*topology : nullptr,
                        cmd.devices,
                        false,
                        sources};
  in.mesh = resolve_mesh(input, topology.has_value(), diags);
  if (!in.mesh) {
    return false;
  }
  if (topology && in.mesh->num_devices() == topology->devices()) {
    // Every command lays the mesh out as `mesh` does: a mesh JAX cannot
    // place on the topology is refused with the same error.
    in.layout =
        layout_mesh(*topology,
                    *in.mesh,
                    LayoutOptions{allow_split, sources, in.mesh_text, false},
                    diags);
    if (!in.layout || diags.has_errors()) {
      return false;
    }
  }

  std::optional<Recipe> recipe = parse_recipe(cmd.recipe);
  assert(recipe);  // CLI11 checked the name
  in.memory.recipe = *recipe;
  in.memory.zero = cmd.zero;
  in.memory.data_axes = cmd.data_axes;
  in.memory.headroom = cmd.headroom;
  in.memory.largest = cmd.largest;
  in.memory.zero_source = "--zero";
  in.memory.data_axes_source = "--data-axes";
  in.memory.param_dtype_source = "--param-dtype";
  in.memory.grad_dtype_source = "--grad-dtype";
  // --param-dtype, --grad-dtype: a dtype name; whether it is one the
  // estimate can train in is estimate_memory's to say.
  auto read_dtype = [&](const std::string& text,
                        const std::string& flag) -> std::optional<DType> {
    if (text.empty()) {
      return std::nullopt;
    }
    std::optional<DType> dtype = parse_dtype(text);
    if (!dtype) {
      diags
          .error("cli.dtype",
                 fmt::format("unknown dtype {}", quote(text)),
                 Location::of(flag))
          .hint = dtype_hint(text);
    }
    return dtype;
  };
  in.memory.param_dtype = read_dtype(cmd.param_dtype, "--param-dtype");
  if (!in.memory.param_dtype && in.maxtext && in.maxtext->weight_dtype) {
    // MaxText's weight_dtype: the dtype the weights are trained in.
    in.memory.param_dtype = in.maxtext->weight_dtype->value;
    in.memory.param_dtype_source = maxtext_source(in.maxtext->weight_dtype->at);
  }
  in.memory.grad_dtype = read_dtype(cmd.grad_dtype, "--grad-dtype");
  if (cmd.hbm) {
    in.memory.hbm_bytes = parse_size(*cmd.hbm, "--hbm", diags, true);
    in.memory.hbm_source = "--hbm";
  } else if (topology) {
    in.memory.hbm_bytes =
        static_cast<int64_t>(topology->figures.hbm_bytes_per_device.value);
    in.memory.hbm_source = "--topology " + topology->name;
  }
  std::optional<int64_t> warn =
      parse_size(cmd.warn_replicated, "--warn-replicated", diags);
  if (diags.has_errors()) {
    return false;
  }
  in.validate.replicated_warning_bytes = *warn;
  in.validate.replicated_warning_source = "--warn-replicated";
  in.validate.mesh_source = sources.mesh;
  if (topology) {
    in.validate.topology_devices = topology->devices();
    in.validate.devices_source = "--topology " + topology->name;
  }
  Stopwatch watch;
  in.manifest = load_manifest(cmd.source, diags);
  watch.lap("read the manifest");
  if (!in.manifest) {
    return false;
  }
  WorkloadFlags workload = cmd.workload;
  if (in.maxtext) {
    const bool has_architecture = !cmd.source.model.empty()
                                  || !cmd.source.hf_config.empty()
                                  || !cmd.workload.config.empty();
    apply_maxtext_workload(*in.maxtext, has_architecture, workload, diags);
  }
  if (!load_training(
          workload, cmd.source, cmd.data_axes, *in.mesh, diags, in.training)) {
    return false;
  }
  watch.lap("estimate activations");
  in.step_options.matmul_efficiency = cmd.matmul_efficiency;
  in.step_options.capacity_factor = cmd.capacity_factor;
  auto overlaps = [&](std::string_view kind) {
    return std::find(cmd.overlap.begin(), cmd.overlap.end(), kind)
           != cmd.overlap.end();
  };
  in.step_options.overlap_fsdp = overlaps("fsdp");
  in.step_options.overlap_grad_reduce = overlaps("grads");
  in.step_options.overlap_tensor = overlaps("tensor");
  in.step_options.overlap_expert = overlaps("expert");
  in.step_options.matmul_efficiency_source = "--matmul-efficiency";
  const Training& t = in.training;
  in.memory.roles = t.roles;
  in.memory.stage_axes_source = t.role_sources.stage;
  in.memory.expert_axes_source = t.role_sources.expert;
  if (t.model) {
    in.memory.layers = t.model->layers;
    in.memory.experts = t.model->experts;
  }
  if (t.activations) {
    for (const StageActivations& stage : t.activations->per_stage) {
      in.memory.activations.push_back(
          ActivationLoad{stage.total_bytes, stage.host_bytes});
    }
  }
  return true;
}

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
        model, *in.topology, in.layout->links, *memory, "--mesh");
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
    watch.lap("estimate the step");
  }
  const Provenance provenance{
      session.command_line(), in.allow_split_physical_axes, session.note()};
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
  Stopwatch watch;
  // A preset's tensors left unsplit over an axis it uses elsewhere are
  // warned about from the same size as fully replicated ones.
  const ApplyOptions options{in.validate.replicated_warning_bytes,
                             in.validate.replicated_warning_source};
  std::optional<RulePlan> plan =
      apply_rules(*in.manifest, *in.mesh, rules, diags, options);
  if (!plan) {
    return session.fail_input();
  }
  watch.lap("apply the rules");
  const std::vector<const PartitionSpec*> specs = plan->specs();
  std::vector<TensorSharding> shardings = validate_planned(
      *in.manifest, *in.mesh, specs, rules.source, in.validate, diags);
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

// --rules FILE|PRESET: a user's rules file, or a preset name.
std::optional<RuleSet> load_rules(const std::string& arg,
                                  const std::string& flag,
                                  Diagnostics& diags) {
  if (names_a_file(arg)) {
    return read_path(arg, InputKind::rules, diags, read_rules);
  }
  return read_rules_preset(arg, Location::of(flag), diags);
}

namespace {}  // namespace

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
  std::optional<RuleSet> rules;
  if (in.maxtext && cmd.rules.empty()) {
    rules = maxtext_rules(*in.maxtext, diags);
  } else {
    if (in.maxtext) {
      note_maxtext_rules_unused(*in.maxtext, "--rules", diags);
    }
    rules = load_rules(cmd.rules.empty() ? std::string("fsdp-tp") : cmd.rules,
                       "--rules",
                       diags);
  }
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

int run_topology_list(Session& session) {
  const std::vector<Topology> all = catalogue_topologies();
  return session.finish(TopologyListReport{all}, ExitCode::ok);
}

int run_topology_show(const TopologyCommand& cmd, Session& session) {
  std::optional<Topology> topology =
      load_topology(cmd.name, "--topology", session.diags());
  if (!topology) {
    return session.fail_input();
  }
  return session.finish(TopologyShowReport{*topology}, ExitCode::ok);
}

int run_manifest(const ManifestCommand& cmd, Session& session) {
  if (cmd.source.model == "list") {
    const std::vector<BuiltinModel> models = builtin_models();
    return session.finish(ModelListReport{models}, ExitCode::ok);
  }
  std::optional<Manifest> manifest =
      cmd.from_safetensors.empty()
          ? load_manifest(cmd.source, session.diags())
          : read_manifest_path(cmd.from_safetensors, session.diags());
  if (!manifest) {
    return session.fail_input();
  }
  return session.finish(ManifestReport{*manifest}, ExitCode::ok);
}

// The options `check` and `memory` share; `plan` has no --specs, and its
// --mesh is checked by run_plan (`plan --rules list` needs none).
void add_check_options(CLI::App& app,
                       CheckCommand& cmd,
                       bool plan = false,
                       bool memory = false) {
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
  const std::vector<CLI::Option*> manifest_options =
      add_manifest_options(app, cmd.source);
  if (!plan) {
    app.add_option(
           "--specs",
           cmd.specs,
           "the specs: {\"specs\": {NAME: SPEC}} or the JSON `plan` writes")
        ->required(!memory)
        ->type_name("FILE");
  }
  if (memory) {
    app.add_option("--rules",
                   cmd.rules,
                   "specs from rules instead of --specs, as plan --rules: a "
                   "rules file or a built-in preset")
        ->type_name("FILE|PRESET");
  }
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
                 "fraction of HBM kept free for XLA's buffers and the runtime "
                 "(and activations, without a workload)")
      ->check(CLI::Range(0.0, 0.99))
      ->type_name("F")
      ->default_str("0.1");
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
  add_workload_options(app, cmd.workload, manifest_options);
  app.add_option("--matmul-efficiency",
                 cmd.matmul_efficiency,
                 "the fraction of the bf16 peak a matmul reaches, for the "
                 "step time (default 1: the roofline; docs/step.md)")
      ->check(CLI::Range(0.01, 1.0))
      ->type_name("F")
      ->default_str("1")
      ->group("Workload (activations; docs/memory.md)");
  app.add_option("--capacity-factor",
                 cmd.capacity_factor,
                 "expert all-to-all bytes x F (MaxText's capacity_factor; "
                 "default 1, dropless)")
      ->check(CLI::Range(0.01, 64.0))
      ->type_name("F")
      ->default_str("1")
      ->group("Workload (activations; docs/memory.md)");
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

// Installs a logger writing to `err` for one run and puts the previous
// default logger back when the run ends, so no logger outlives its stream.
class ScopedLogging {
 public:
  ScopedLogging(const CommonOptions& common, std::ostream& err)
      : m_previous(spdlog::default_logger()) {
    configure(common, err);
  }
  ~ScopedLogging() { spdlog::set_default_logger(m_previous); }
  ScopedLogging(const ScopedLogging&) = delete;
  ScopedLogging& operator=(const ScopedLogging&) = delete;

 private:
  static void configure(const CommonOptions& common, std::ostream& err);
  std::shared_ptr<spdlog::logger> m_previous;
};

void ScopedLogging::configure(const CommonOptions& common, std::ostream& err) {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(err);
  auto logger = std::make_shared<spdlog::logger>("shardplan", sink);
  logger->set_pattern("shardplan: %l: %v");
  logger->set_level(common.verbose ? spdlog::level::debug
                    : common.quiet ? spdlog::level::err
                                   : spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

// "; did you mean --topology?" for each argument that looks like a long
// flag the chosen (sub)command does not have but has one close to (edit
// distance, as for every other name); empty when there is none.
std::string misspelt_flags(const CLI::App& app,
                           const std::vector<std::string>& args) {
  const CLI::App* command = &app;
  for (;;) {
    std::vector<const CLI::App*> chosen = command->get_subcommands(
        [](const CLI::App* sub) { return sub->parsed(); });
    if (chosen.empty()) {
      break;
    }
    command = chosen.front();
  }
  std::vector<std::string> known;
  for (const CLI::App* a = command; a != nullptr; a = a->get_parent()) {
    for (const CLI::Option* option : a->get_options()) {
      for (const std::string& name : option->get_lnames()) {
        known.push_back("--" + name);
      }
    }
  }
  std::vector<std::string> hints;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (!arg.starts_with("--")) {
      continue;
    }
    arg = arg.substr(0, arg.find('='));
    if (std::find(known.begin(), known.end(), arg) != known.end()) {
      continue;
    }
    std::string near = closest_match(arg, known);
    if (!near.empty()) {
      hints.push_back(fmt::format("{} for {}", near, arg));
    }
  }
  if (hints.empty()) {
    return "";
  }
  if (hints.size() == 1) {
    return fmt::format("; did you mean {}?",
                       hints[0].substr(0, hints[0].find(' ')));
  }
  return fmt::format("; did you mean {}?", fmt::join(hints, ", "));
}

constexpr const char* k_examples = R"(Examples:
  shardplan mesh --mesh dp:2,fsdp:-1,tp:4 --devices 64
  shardplan mesh --mesh 2,-1,4 --axis-names dp,fsdp,tp --devices 64 --format json
  shardplan mesh --mesh dp:4,fsdp:4,tp:4 --devices 64 --dcn dp:2
  shardplan mesh --topology v5p-128 --mesh fsdp:-1,tp:4
  shardplan mesh --topology 2xv5e-256 --mesh dp:2,fsdp:-1,tp:16
  shardplan check --topology v5p-128 --mesh fsdp:-1,tp:4 --manifest m.json --specs s.json
  shardplan memory --topology v5p-128 --mesh fsdp:-1,tp:4 --manifest m.json --specs s.json --recipe adam
  shardplan reshard --topology v5p-128 --model llama-3-8b --from-mesh fsdp:64 --from-rules fsdp --to-mesh fsdp:16,tp:4 --to-rules fsdp-tp
  shardplan search --topology v5p-256 --model llama-3-70b --seq 8192 --batch 128
  shardplan topology list
  shardplan topology show h100x64 --format json
  shardplan manifest --manifest model.json
  shardplan manifest --manifest header.json --format json -o manifest.json

Exit codes: 0 done, 1 the plan has errors, 2 bad usage or input, 3 internal error.
Docs: docs/cli.md, docs/mesh-syntax.md, docs/topologies.md, docs/manifest-format.md)";

}  // namespace

// `args` as a shell would take them back: "shardplan" and each argument,
// single-quoted unless it is plain; bytes that are not printable as \xNN
// (the line goes into comments).
std::string command_line(const std::vector<std::string>& args) {
  std::string out = "shardplan";
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const bool plain =
        !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) != 0
                 || std::string_view("_@%+=:,./-").find(c)
                        != std::string_view::npos;
        });
    out += ' ';
    if (plain) {
      out += arg;
    } else {
      out += '\'';
      for (char c : arg) {
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      }
      out += '\'';
    }
  }
  return printable(out);
}

int run(const std::vector<std::string>& args,
        std::ostream& out,
        std::ostream& err,
        const Environment& env) {
  CLI::App app{
      "shardplan: plan how model parameters shard over a TPU or GPU mesh",
      "shardplan"};
  app.set_version_flag("--version",
                       fmt::format("shardplan {}", shardplan_version()));
  app.require_subcommand(1);
  app.footer(k_examples);

  CommonOptions common;

  MeshCommand mesh_cmd;
  CLI::App* mesh = app.add_subcommand("mesh",
                                      "resolve a mesh string: axis sizes (-1 "
                                      "filled), ICI/DCN split, device ids");
  mesh->add_option("--mesh",
                   mesh_cmd.mesh,
                   "axes major to minor: \"dp:2,fsdp:-1,tp:4\", or sizes with "
                   "--axis-names; an axis may carry a type: \"tp:4:explicit\"")
      ->required()
      ->type_name("STR");
  CLI::Option* devices_opt =
      mesh->add_option("--devices",
                       mesh_cmd.devices,
                       "number of devices the mesh covers (fills -1), when no "
                       "topology is known")
          ->type_name("N");
  mesh->add_option(
          "--topology",
          mesh_cmd.topology,
          "the hardware: a catalogue name (v5p-128, 2xv5e-256, v5p:4x4x8, "
          "h100x64) or a topology JSON file")
      ->type_name("NAME|FILE")
      ->excludes(devices_opt);
  mesh->add_flag("--allow-split-physical-axes",
                 mesh_cmd.allow_split_physical_axes,
                 "let a mesh axis take part of a physical torus axis (JAX's "
                 "allow_split_physical_axes)");
  mesh->add_option("--axis-names",
                   mesh_cmd.axis_names,
                   "names for a positional mesh, e.g. dp,fsdp,tp")
      ->delimiter(',')
      ->type_name("A,B,..");
  mesh->add_option("--dcn",
                   mesh_cmd.dcn,
                   "the multi-slice (DCN) factor of each axis, e.g. \"dp:2\"")
      ->type_name("STR");
  add_common(*mesh, common, {View::mesh});
  mesh->footer(R"(Examples:
  shardplan mesh --topology v5p-128 --mesh fsdp:-1,tp:4
  shardplan mesh --topology v4-32 --mesh 2,8 --axis-names data,model --allow-split-physical-axes
  shardplan mesh --mesh dp:2,fsdp:-1,tp:4 --devices 64
  shardplan mesh --mesh 2,4 --axis-names data,model --format json
  shardplan mesh --mesh dp:4,tp:8 --devices 32 --dcn dp:2)");

  TopologyCommand topology_cmd;
  CLI::App* topology = app.add_subcommand(
      "topology",
      "the built-in topology catalogue: TPU slices and GPU clusters");
  topology->require_subcommand(1);
  CLI::App* topology_list = topology->add_subcommand(
      "list", "a table of the catalogue: devices, shape, HBM, link bandwidths");
  add_common(*topology_list, common, {View::topology_list});
  CLI::App* topology_show = topology->add_subcommand(
      "show", "one topology with every figure and its source");
  topology_show
      ->add_option("name",
                   topology_cmd.name,
                   "a catalogue name (v5p-128, 2xv5e-256, v5p:4x4x8, "
                   "h100x64) or a topology JSON file")
      ->required()
      ->type_name("NAME|FILE");
  add_common(*topology_show, common, {View::topology_show});
  topology->footer(R"(Examples:
  shardplan topology list
  shardplan topology show v5p-128
  shardplan topology show 2xv6e-256 --format json
  shardplan topology show h100x64)");

  ManifestCommand manifest_cmd;
  CLI::App* manifest = app.add_subcommand(
      "manifest",
      "read a manifest (native JSON, safetensors headers, a Hugging Face "
      "config.json or a built-in model) and summarise it, or write it in the "
      "native form");
  CLI::Option* from_safetensors =
      manifest
          ->add_option("--from-safetensors",
                       manifest_cmd.from_safetensors,
                       "a .safetensors file, a model.safetensors.index.json, "
                       "or a checkpoint folder: only headers are read")
          ->type_name("PATH");
  for (CLI::Option* other :
       add_manifest_options(*manifest, manifest_cmd.source)) {
    from_safetensors->excludes(other);
  }
  add_common(*manifest, common, {View::manifest, View::model_list});
  manifest->footer(R"(Examples:
  shardplan manifest --manifest model.json
  shardplan manifest --manifest header.json --format json -o manifest.json
  shardplan manifest --model list
  shardplan manifest --model llama-3-8b --format json -o llama-3-8b.json
  shardplan manifest --from-hf-config config.json
  shardplan manifest --from-safetensors model.safetensors.index.json -o manifest.json
  shardplan manifest --from-safetensors ./Llama-3-8B/    (the folder's index or file))");

  PlanCommand plan_cmd;
  CLI::App* plan = app.add_subcommand("plan",
                                      "apply sharding rules to a manifest on a "
                                      "mesh: a spec per tensor, validated, "
                                      "with per-device memory");
  add_check_options(*plan, plan_cmd.check, true);
  plan->add_option(
          "--rules",
          plan_cmd.rules,
          "a rules file (docs/rules.md) or a built-in preset: fsdp, fsdp-tp, "
          "maxtext; \"list\" lists the presets")
      ->type_name("FILE|PRESET")
      ->default_str("fsdp-tp");
  plan->add_option(
          "--explain",
          plan_cmd.explain,
          "for one tensor: every rule, whether it matched, and what its "
          "algorithm considered")
      ->type_name("NAME");
  add_common(*plan, common, {View::plan, View::explain, View::preset_list});
  plan->footer(
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

  CheckCommand check_cmd;
  CLI::App* check = app.add_subcommand("check",
                                       "validate given specs for a manifest on "
                                       "a mesh, and estimate memory (for CI)");
  add_check_options(*check, check_cmd);
  add_common(*check, common, {View::check});
  check->footer(
      R"(Exit codes: 0 no errors (warnings allowed), 1 invalid specs or over HBM
capacity, 2 unreadable or malformed input.

Examples:
  shardplan check --topology v5p-128 --mesh fsdp:-1,tp:4 --manifest m.json --specs s.json
  shardplan check --devices 8 --mesh dp:2,tp:4 --hbm 80GB --manifest m.json --specs s.json
  shardplan check ... --recipe adam --zero 1 --format github
  shardplan check ... --format markdown -o summary.md)");

  CheckCommand memory_cmd;
  CLI::App* memory =
      app.add_subcommand("memory",
                         "per-device memory: per category against HBM, per "
                         "dtype, largest tensors");
  add_check_options(*memory, memory_cmd, false, true);
  memory
      ->add_option("--largest",
                   memory_cmd.largest,
                   "how many of the largest tensors to list")
      ->type_name("N")
      ->default_str("20");
  add_common(*memory, common, {View::memory});
  memory->footer(R"(Examples:
  shardplan memory --topology v5p-128 --mesh fsdp:-1,tp:4 --manifest m.json --specs s.json
  shardplan memory --topology v5p-128 --mesh fsdp:-1,tp:4 --model llama-3-8b --rules fsdp-tp --recipe adam
  shardplan memory --topology v5p-256 --mesh pp:4,fsdp:8,tp:4 --model llama-3-70b --rules fsdp-tp --recipe adam --seq 8192 --batch 128 --microbatches 8 --remat minimal
  shardplan memory --topology h100x64 --mesh dp:8,tp:8 --manifest m.json --specs s.json --recipe adam --zero 3)");

  ReshardCommand reshard_cmd;
  CLI::App* reshard = add_reshard_command(app, reshard_cmd, common);
  SearchCommand search_cmd;
  CLI::App* search = add_search_command(app, search_cmd, common);

  std::vector<const char*> argv;
  argv.reserve(args.size());
  for (const std::string& a : args) {
    argv.push_back(a.c_str());
  }
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    err << "shardplan: error: " << e.what() << misspelt_flags(app, args) << "\n"
        << "Run with --help for more information.\n";
    return static_cast<int>(ExitCode::bad_input);
  }

  ScopedLogging logging(common, err);
  common.command_line = command_line(args);
  if (mesh->parsed()) {
    Session session("mesh", common, out, err, env);
    return run_mesh(mesh_cmd, session);
  }
  if (plan->parsed()) {
    Session session("plan", common, out, err, env);
    return run_plan(plan_cmd, session);
  }
  if (check->parsed()) {
    Session session("check", common, out, err, env);
    return run_check(check_cmd, View::check, session);
  }
  if (memory->parsed()) {
    Session session("memory", common, out, err, env);
    return run_check(memory_cmd, View::memory, session);
  }
  if (reshard->parsed()) {
    Session session("reshard", common, out, err, env);
    return run_reshard(reshard_cmd, session);
  }
  if (search->parsed()) {
    Session session("search", common, out, err, env);
    return run_search(search_cmd, session);
  }
  if (topology->parsed()) {
    Session session("topology", common, out, err, env);
    if (topology_list->parsed()) {
      return run_topology_list(session);
    }
    return run_topology_show(topology_cmd, session);
  }
  Session session("manifest", common, out, err, env);
  return run_manifest(manifest_cmd, session);
}

}  // namespace shardplan::cli
