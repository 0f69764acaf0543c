// `shardplan reshard`: moving a manifest's tensors (or one tensor given by
// flags) from one mesh and specs to another, possibly on another device set
// (DESIGN.md section 1, docs/reshard.md).

#include "cli/commands.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/report.hpp>
#include <shardplan/reshard.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/spec.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/topology.hpp>
#include <shardplan/validate.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <utility>

namespace shardplan::cli {

namespace {

// One side of the reshard: the flags that name its inputs, and what was read.
struct Side {
  std::string_view name;      // "source" or "target"
  std::string mesh_flag;      // "--from-mesh"
  std::string dcn_flag;       // "--from-dcn"
  std::string topology_flag;  // the flag its topology came from
  std::optional<Topology> topology;
  std::optional<Mesh> mesh;
  MeshLayout layout;
  std::vector<TensorSharding> shardings;
  std::vector<const PartitionSpec*> specs;  // full rank, one per tensor
};

// The side's topology: --from-topology/--to-topology, else --topology.
bool load_side_topology(const std::string& own_arg,
                        const std::string& own_flag,
                        const std::string& shared_arg,
                        Side& side,
                        Diagnostics& diags) {
  const std::string& arg = own_arg.empty() ? shared_arg : own_arg;
  side.topology_flag = own_arg.empty() ? "--topology" : own_flag;
  if (arg.empty()) {
    return true;
  }
  side.topology = load_topology(arg, side.topology_flag, diags);
  return side.topology.has_value();
}

// The side's mesh (its own --from-mesh/--to-mesh, else --mesh; the same for
// the DCN factors) and its device grid and links on the topology (or the
// plain grid of --devices).
bool load_side_mesh(const ReshardCommand& cmd,
                    const std::string& own_mesh,
                    const std::string& own_dcn,
                    Side& side,
                    Diagnostics& diags) {
  if (own_mesh.empty()) {
    side.mesh_flag = "--mesh";
  }
  if (own_dcn.empty() && !cmd.dcn.empty()) {
    side.dcn_flag = "--dcn";
  }
  const std::string& text = own_mesh.empty() ? cmd.mesh : own_mesh;
  if (text.empty()) {
    diags
        .error(
            "cli.usage",
            fmt::format("no mesh for the {}: give --mesh for both sides or "
                        "{}",
                        side.name,
                        side.name == "source" ? "--from-mesh" : "--to-mesh"),
            Location::of(side.name == "source" ? "--from-mesh" : "--to-mesh"))
        .hint = "e.g. --from-mesh fsdp:64 --to-mesh fsdp:16,tp:4";
    return false;
  }
  const MeshInput input{text,
                        own_dcn.empty() ? cmd.dcn : own_dcn,
                        {},
                        side.topology ? &*side.topology : nullptr,
                        cmd.devices,
                        cmd.allow_split_physical_axes,
                        MeshSources{side.mesh_flag,
                                    side.dcn_flag,
                                    "",
                                    "--devices",
                                    side.topology_flag,
                                    "--allow-split-physical-axes"}};
  std::optional<PlacedMesh> placed = place_mesh(input, diags);
  if (!placed) {
    return false;
  }
  side.mesh = std::move(placed->mesh);
  side.layout = std::move(placed->layout);
  return true;
}

// --shape "1024,4096" (also "[1024, 4096]", "(1024, 4096)"; "" or "[]" is a
// scalar). Errors carry the column and a caret [cli.shape]; so does the
// warning about a dim of 0 [manifest.empty-tensor], as a manifest's.
std::optional<std::vector<int64_t>> parse_shape(std::string_view text,
                                                Diagnostics& diags) {
  std::vector<int64_t> shape;
  size_t begin = 0;
  size_t end = text.size();
  auto skip_space = [&](size_t& i) {
    while (i < end && text[i] == ' ') {
      ++i;
    }
  };
  skip_space(begin);
  while (end > begin && text[end - 1] == ' ') {
    --end;
  }
  if (end > begin && (text[begin] == '[' || text[begin] == '(')) {
    const char close = text[begin] == '[' ? ']' : ')';
    if (text[end - 1] != close) {
      diags.error("cli.shape",
                  fmt::format("expected \"{}\" at the end of the shape", close),
                  location_in_text("--shape", text, end));
      return std::nullopt;
    }
    ++begin;
    --end;
    skip_space(begin);
    while (end > begin && text[end - 1] == ' ') {
      --end;
    }
  }
  if (begin == end) {
    return shape;
  }
  size_t i = begin;
  while (true) {
    skip_space(i);
    size_t start = i;
    while (i < end && text[i] != ',') {
      ++i;
    }
    size_t stop = i;
    while (stop > start && text[stop - 1] == ' ') {
      --stop;
    }
    std::string_view token = text.substr(start, stop - start);
    int64_t value = 0;
    auto [ptr, ec] =
        std::from_chars(token.data(), token.data() + token.size(), value);
    if (token.empty() || ec != std::errc() || ptr != token.data() + token.size()
        || value < 0) {
      diags.error("cli.shape",
                  fmt::format("expected a dim size (an integer >= 0), got {}",
                              quote(token)),
                  location_in_text("--shape", text, start));
      return std::nullopt;
    }
    if (value == 0 && std::find(shape.begin(), shape.end(), 0) == shape.end()) {
      Diagnostic& d = diags.warning(
          "manifest.empty-tensor",
          fmt::format("dim {} of the tensor is 0: it has no elements",
                      shape.size()),
          location_in_text("--shape", text, start));
      d.dim = static_cast<int64_t>(shape.size());
      d.hint = "it takes 0 bytes on every device";
    }
    shape.push_back(value);
    if (i == end) {
      return shape;
    }
    ++i;  // the comma
  }
}

// The manifest of one tensor given by --shape, --dtype and --name.
std::optional<Manifest> single_tensor_manifest(const ReshardCommand& cmd,
                                               Diagnostics& diags) {
  std::optional<std::vector<int64_t>> shape = parse_shape(cmd.shape, diags);
  if (!shape) {
    return std::nullopt;
  }
  if (cmd.dtype.empty()) {
    diags
        .error("cli.usage",
               "--dtype is required with --shape",
               Location::of("--dtype"))
        .hint = "e.g. --dtype bf16";
    return std::nullopt;
  }
  std::optional<DType> dtype = parse_dtype(cmd.dtype);
  if (!dtype) {
    diags
        .error("cli.dtype",
               fmt::format("unknown dtype {}", quote(cmd.dtype)),
               Location::of("--dtype"))
        .hint = dtype_hint(cmd.dtype);
    return std::nullopt;
  }
  Manifest manifest;
  manifest.source = "--shape";
  TensorInput input;
  input.name = cmd.name;
  input.shape = *shape;
  input.dtype = *dtype;
  // parse_shape warned about a dim of 0 at its column: only errors are new.
  Diagnostics added;
  const bool ok = manifest.add(input, added, Location::of("--name"));
  for (const Diagnostic& d : added.items()) {
    if (d.severity == Severity::error) {
      diags.add(d);
    }
  }
  if (!ok) {
    return std::nullopt;
  }
  return manifest;
}

// The side's specs: from --from-spec (single tensor), a specs file or a
// rules file/preset; validated against the side's mesh. Every problem is
// an input error here.
bool load_side_specs(const Manifest& manifest,
                     bool single,
                     const std::string& spec_text,
                     const std::string& spec_flag,
                     const std::string& specs_file,
                     const std::string& rules_arg,
                     const std::string& rules_flag,
                     Side& side,
                     Diagnostics& diags) {
  ValidateOptions validate;
  validate.replicated_warning_bytes =
      0;  // replicated is a layout like any other here
  const Mesh& mesh = *side.mesh;
  if (single) {
    std::optional<PartitionSpec> spec = parse_spec(spec_text, spec_flag, diags);
    if (!spec) {
      return false;
    }
    // Problems are located at the flag: a copy of the manifest named by it.
    Manifest named = manifest;
    named.source = spec_flag;
    const PartitionSpec* specs[] = {&*spec};
    side.shardings =
        validate_planned(named, mesh, specs, spec_flag, validate, diags);
  } else if (!specs_file.empty()) {
    std::optional<SpecsFile> specs = read_specs_path(specs_file, diags);
    if (!specs) {
      return false;
    }
    side.shardings = validate_specs(manifest, mesh, *specs, validate, diags);
  } else if (!rules_arg.empty()) {
    std::optional<RuleSet> rules = load_rules(rules_arg, rules_flag, diags);
    if (!rules) {
      return false;
    }
    std::optional<RulePlan> plan = apply_rules(manifest, mesh, *rules, diags);
    if (!plan) {
      return false;
    }
    const std::vector<const PartitionSpec*> specs = plan->specs();
    side.shardings =
        validate_planned(manifest, mesh, specs, rules->source, validate, diags);
  } else {
    diags
        .error("cli.usage",
               fmt::format(
                   "no specs for the {}: give {} FILE or {} FILE|PRESET",
                   side.name,
                   spec_flag == "--from-spec" ? "--from-specs" : "--to-specs",
                   rules_flag),
               Location::of(spec_flag == "--from-spec" ? "--from-specs"
                                                       : "--to-specs"))
        .hint = "a plan's --format json output is also a specs file";
    return false;
  }
  if (diags.has_errors()) {
    return false;
  }
  side.specs.resize(side.shardings.size());
  for (size_t t = 0; t < side.shardings.size(); ++t) {
    side.specs[t] = side.shardings[t].spec();  // no errors: every spec usable
  }
  return true;
}

// --partial "fsdp,dp": axes of the source mesh over which every tensor holds
// pending sums; none may be used by a source spec.
std::optional<std::vector<std::string>> parse_partial(std::string_view text,
                                                      const Side& source,
                                                      const Manifest& manifest,
                                                      Diagnostics& diags) {
  std::vector<std::string> axes;
  size_t i = 0;
  while (i <= text.size()) {
    size_t comma = text.find(',', i);
    if (comma == std::string_view::npos) {
      comma = text.size();
    }
    size_t start = i;
    size_t stop = comma;
    while (start < stop && text[start] == ' ') {
      ++start;
    }
    while (stop > start && text[stop - 1] == ' ') {
      --stop;
    }
    std::string axis(text.substr(start, stop - start));
    const Location where = location_in_text("--partial", text, start);
    if (axis.empty()) {
      diags.error("cli.partial", "expected a mesh axis name", where);
      return std::nullopt;
    }
    if (source.mesh->find(axis) == nullptr) {
      Diagnostic& d = diags.error(
          "reshard.partial-axis",
          fmt::format("unknown axis {}: the source mesh {} has no such axis",
                      quote(axis),
                      quote(to_string(*source.mesh))),
          where);
      std::string near = closest_match(axis, source.mesh->axis_names());
      if (!near.empty()) {
        d.hint = fmt::format("did you mean \"{}\"?", near);
      }
      return std::nullopt;
    }
    if (std::find(axes.begin(), axes.end(), axis) != axes.end()) {
      diags.error("reshard.partial-axis",
                  fmt::format("axis {} given twice", quote(axis)),
                  where);
      return std::nullopt;
    }
    for (size_t t = 0; t < source.specs.size(); ++t) {
      const PartitionSpec& spec = *source.specs[t];
      for (size_t d = 0; d < spec.dims.size(); ++d) {
        const auto& dim_axes = spec.dims[d].axes;
        if (std::find(dim_axes.begin(), dim_axes.end(), axis)
            != dim_axes.end()) {
          Diagnostic& e =
              diags.error("reshard.partial-axis",
                          fmt::format("axis {} holds pending sums, but the "
                                      "source spec {} of {} splits dim "
                                      "{} over it",
                                      quote(axis),
                                      quote(to_short(spec)),
                                      quote(manifest.tensors()[t].name),
                                      d),
                          where);
          e.tensor = std::string(manifest.tensors()[t].name);
          e.hint = "a partial axis must be unused by every source spec";
          return std::nullopt;
        }
      }
    }
    axes.push_back(std::move(axis));
    i = comma + 1;
  }
  return axes;
}

// 3538944 -> "3,538,944".
std::string with_commas(int64_t value) {
  std::string digits = fmt::format("{}", value);
  const size_t first = digits.starts_with('-') ? 1 : 0;
  for (size_t i = digits.size(); i > first + 3; i -= 3) {
    digits.insert(i - 3, 1, ',');
  }
  return digits;
}

// The sides' topologies (on both sides or neither, of one kind) and their
// meshes.
bool load_sides(const ReshardCommand& cmd,
                Side& source,
                Side& target,
                Diagnostics& diags) {
  if (!load_side_topology(
          cmd.from_topology, "--from-topology", cmd.topology, source, diags)
      || !load_side_topology(
          cmd.to_topology, "--to-topology", cmd.topology, target, diags)) {
    return false;
  }
  if (source.topology.has_value() != target.topology.has_value()) {
    const bool to_missing = !target.topology.has_value();
    diags
        .error("cli.usage",
               fmt::format(
                   "the {} has a topology ({}) but the {} has none",
                   to_missing ? "source" : "target",
                   to_missing ? source.topology->name : target.topology->name,
                   to_missing ? "target" : "source"),
               Location::of(to_missing ? "--to-topology" : "--from-topology"))
        .hint =
        "give both --from-topology and --to-topology, or --topology for both";
    return false;
  }
  if (source.topology && source.topology->kind != target.topology->kind) {
    diags
        .error(
            "reshard.kind",
            fmt::format("cannot reshard from {} topology {} to {} topology {}",
                        to_string(source.topology->kind),
                        quote(source.topology->name),
                        to_string(target.topology->kind),
                        quote(target.topology->name)),
            Location::of(target.topology_flag))
        .hint = "both sides must be TPU slices or both GPU clusters";
    return false;
  }
  return load_side_mesh(cmd, cmd.from_mesh, cmd.from_dcn, source, diags)
         && load_side_mesh(cmd, cmd.to_mesh, cmd.to_dcn, target, diags);
}

// The tensors (a manifest, or the one --shape gives) and each side's specs
// of them.
std::optional<Manifest> load_tensors(const ReshardCommand& cmd,
                                     Side& source,
                                     Side& target,
                                     Diagnostics& diags) {
  std::optional<Manifest> manifest = cmd.single
                                         ? single_tensor_manifest(cmd, diags)
                                         : load_manifest(cmd.source, diags);
  if (!manifest) {
    return std::nullopt;
  }
  if (!load_side_specs(*manifest,
                       cmd.single,
                       cmd.from_spec,
                       "--from-spec",
                       cmd.from_specs,
                       cmd.from_rules,
                       "--from-rules",
                       source,
                       diags)
      || !load_side_specs(*manifest,
                          cmd.single,
                          cmd.to_spec,
                          "--to-spec",
                          cmd.to_specs,
                          cmd.to_rules,
                          "--to-rules",
                          target,
                          diags)) {
    return std::nullopt;
  }
  return manifest;
}

// The plan's options: --donate, --transfers (always with --shape), the
// topologies and whether they share devices, --partial.
std::optional<ReshardOptions> reshard_options(const ReshardCommand& cmd,
                                              const Side& source,
                                              const Side& target,
                                              const Manifest& manifest,
                                              Diagnostics& diags) {
  ReshardOptions options;
  options.donate = cmd.donate;
  options.transfers = cmd.transfers || cmd.single;
  options.from_topology = source.topology ? &*source.topology : nullptr;
  options.to_topology = target.topology ? &*target.topology : nullptr;
  options.same_devices =
      same_devices(options.from_topology, options.to_topology);
  if (!cmd.partial.empty()) {
    std::optional<std::vector<std::string>> partial =
        parse_partial(cmd.partial, source, manifest, diags);
    if (!partial) {
      return std::nullopt;
    }
    options.partial = std::move(*partial);
  }
  return options;
}

// The source's and the target's mesh options (--mesh and --dcn for both),
// and the topologies or the device count.
void add_side_options(CLI::App& sub, ReshardCommand& cmd) {
  sub.add_option(
         "--from-mesh", cmd.from_mesh, "the source mesh, e.g. \"fsdp:64\"")
      ->type_name("STR");
  sub.add_option(
         "--to-mesh", cmd.to_mesh, "the target mesh, e.g. \"fsdp:16,tp:4\"")
      ->type_name("STR");
  sub.add_option("--mesh",
                 cmd.mesh,
                 "the mesh of both sides, when they share one (--from-mesh "
                 "and --to-mesh override it)")
      ->type_name("STR");
  sub.add_option("--dcn",
                 cmd.dcn,
                 "the DCN factor per axis of both sides (--from-dcn and "
                 "--to-dcn override it)")
      ->type_name("STR");
  CLI::Option* devices = sub.add_option("--devices",
                                        cmd.devices,
                                        "number of devices of both meshes, "
                                        "when no topology is known (no times)")
                             ->type_name("N");
  sub.add_option("--topology",
                 cmd.topology,
                 "the hardware of both sides: a catalogue name (v5p-128, "
                 "2xv5e-256, h100x64) "
                 "or a topology JSON file")
      ->type_name("NAME|FILE")
      ->excludes(devices);
  sub.add_option("--from-topology",
                 cmd.from_topology,
                 "the source's hardware, when it differs from --topology")
      ->type_name("NAME|FILE")
      ->excludes(devices);
  sub.add_option("--to-topology",
                 cmd.to_topology,
                 "the target's hardware (another slice size, fewer slices, "
                 "another GPU count)")
      ->type_name("NAME|FILE")
      ->excludes(devices);
  sub.add_option("--from-dcn",
                 cmd.from_dcn,
                 "the source mesh's DCN factor per axis, e.g. dp:2")
      ->type_name("STR");
  sub.add_option(
         "--to-dcn", cmd.to_dcn, "the target mesh's DCN factor per axis")
      ->type_name("STR");
}

// The tensors' options: a manifest and specs or rules for each side, or one
// tensor by --shape and its spec on each side.
void add_tensor_options(CLI::App& sub, ReshardCommand& cmd) {
  const std::vector<CLI::Option*> manifest_options =
      add_manifest_options(sub, cmd.source);
  CLI::Option* from_specs =
      sub.add_option(
             "--from-specs",
             cmd.from_specs,
             "the source specs: {\"specs\": {NAME: SPEC}} or a plan's JSON")
          ->type_name("FILE");
  CLI::Option* to_specs =
      sub.add_option(
             "--to-specs", cmd.to_specs, "the target specs (same forms)")
          ->type_name("FILE");
  CLI::Option* from_rules =
      sub.add_option(
             "--from-rules",
             cmd.from_rules,
             "source specs from rules, as plan --rules: a file or a preset")
          ->type_name("FILE|PRESET")
          ->excludes(from_specs);
  CLI::Option* to_rules =
      sub.add_option(
             "--to-rules", cmd.to_rules, "target specs from rules (same forms)")
          ->type_name("FILE|PRESET")
          ->excludes(to_specs);
  CLI::Option* shape =
      sub.add_option(
             "--shape",
             cmd.shape,
             "one tensor instead of a manifest: its shape, e.g. 1024,4096")
          ->type_name("DIMS");
  sub.add_option(
         "--dtype", cmd.dtype, "the tensor's dtype (with --shape), e.g. bf16")
      ->type_name("DTYPE")
      ->needs(shape);
  sub.add_option("--name",
                 cmd.name,
                 "the tensor's name (with --shape; default \"tensor\")")
      ->type_name("NAME")
      ->needs(shape);
  CLI::Option* from_spec =
      sub.add_option("--from-spec",
                     cmd.from_spec,
                     "the tensor's source spec (with --shape): 'fsdp,None', "
                     "\"P('fsdp', None)\"")
          ->type_name("SPEC")
          ->needs(shape);
  CLI::Option* to_spec =
      sub.add_option("--to-spec",
                     cmd.to_spec,
                     "the tensor's target spec (with --shape)")
          ->type_name("SPEC")
          ->needs(shape);
  for (CLI::Option* many : manifest_options) {
    shape->excludes(many);
  }
  for (CLI::Option* many : {from_specs, to_specs, from_rules, to_rules}) {
    shape->excludes(many);
  }
  shape->needs(from_spec);
  shape->needs(to_spec);
  sub.parse_complete_callback(
      [shape, &cmd] { cmd.single = shape->count() > 0; });
}

void add_reshard_command(CLI::App& sub,
                         ReshardCommand& cmd,
                         CommonOptions& common) {
  add_side_options(sub, cmd);
  add_tensor_options(sub, cmd);
  sub.add_option("--partial",
                 cmd.partial,
                 "source mesh axes over which every tensor holds pending sums "
                 "(reduce_scatter / all_reduce), e.g. tp")
      ->type_name("A,B,..");
  sub.add_flag(
      "--allow-split-physical-axes",
      cmd.allow_split_physical_axes,
      "let a mesh axis take part of a physical TPU axis on either side (JAX's "
      "allow_split_physical_axes)");
  sub.add_flag(
      "--donate",
      cmd.donate,
      "free each source buffer once a step no longer needs it (peak memory)");
  sub.add_flag("--transfers",
               cmd.transfers,
               "list every piece a device receives between meshes (always "
               "with --shape)");
  add_common(sub, common, {View::reshard});
  sub.footer(
      R"(Exit codes: 0 planned, 2 bad input (a spec that does not fit its mesh, a
tensor without a spec, an unknown --partial axis, topologies of different kinds).

Examples:
  shardplan reshard --topology v5e-32 --from-mesh X:8,Y:4 --to-mesh X:8,Y:4 --shape 2048,8192 --dtype bf16 --from-spec Y,None --to-spec None,None
  shardplan reshard --topology v5p-128 --model llama-3-8b --from-mesh fsdp:64 --from-rules fsdp --to-mesh fsdp:16,tp:4 --to-rules fsdp-tp
  shardplan reshard --from-topology 2xv5p-128 --to-topology v5p-128 --from-mesh dp:2,fsdp:64 --to-mesh fsdp:64 --manifest m.json --from-specs a.json --to-specs b.json
  shardplan reshard --devices 8 --from-mesh fsdp:8 --to-mesh fsdp:2,tp:4 --shape 4096,4096 --dtype bf16 --from-spec fsdp --to-spec fsdp,tp --format json)");
}

}  // namespace

void warn_transfers_size(const TransfersSize& size,
                         int64_t threshold,
                         const std::string& flag,
                         Diagnostics& diags) {
  if (size.json_bytes <= threshold) {
    return;
  }
  // Binary units, as the text reports give sizes: "541.45 MiB".
  constexpr std::array<const char*, 4> k_units = {"B", "KiB", "MiB", "GiB"};
  auto value = static_cast<double>(size.json_bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < k_units.size()) {
    value /= 1024.0;
    ++unit;
  }
  const std::string human =
      unit == 0 ? fmt::format("{} B", size.json_bytes)
                : fmt::format("{:.2f} {}", value, k_units[unit]);
  diags
      .warning("reshard.transfers-size",
               fmt::format("the JSON lists {} transfers: {} bytes ({}) of "
                           "output",
                           with_commas(size.transfers),
                           with_commas(size.json_bytes),
                           human),
               Location::of(flag))
      .hint = flag == "--transfers"
                  ? "without --transfers the JSON has the plan alone"
                  : "one tensor's JSON always lists its transfers; the text "
                    "output does not";
}

int run_reshard(const ReshardCommand& cmd, Session& session) {
  Diagnostics& diags = session.diags();
  Side source{"source", "--from-mesh", "--from-dcn", "", {}, {}, {}, {}, {}};
  Side target{"target", "--to-mesh", "--to-dcn", "", {}, {}, {}, {}, {}};
  if (!load_sides(cmd, source, target, diags)) {
    return session.fail_input();
  }
  std::optional<Manifest> manifest = load_tensors(cmd, source, target, diags);
  if (!manifest) {
    return session.fail_input();
  }
  std::optional<ReshardOptions> options =
      reshard_options(cmd, source, target, *manifest, diags);
  if (!options) {
    return session.fail_input();
  }
  spdlog::debug("reshard {} tensors: {} -> {}, same devices {}",
                manifest->size(),
                to_string(*source.mesh),
                to_string(*target.mesh),
                options->same_devices);
  const ReshardSide from_side{
      &*source.mesh, &source.layout.grid, source.layout.links};
  const ReshardSide to_side{
      &*target.mesh, &target.layout.grid, target.layout.links};
  std::optional<ReshardPlan> plan = plan_reshard(*manifest,
                                                 source.specs,
                                                 target.specs,
                                                 from_side,
                                                 to_side,
                                                 *options,
                                                 diags);
  if (!plan) {
    return session.fail_input();
  }
  const ReshardReport report{*manifest,
                             *source.mesh,
                             options->from_topology,
                             *target.mesh,
                             options->to_topology,
                             *options,
                             *plan,
                             source.topology ? &source.layout : nullptr,
                             target.topology ? &target.layout : nullptr};
  if (options->transfers && session.json()) {
    // Said before the output, which is written after the diagnostics.
    warn_transfers_size(reshard_transfers_size(report),
                        k_transfers_warning_bytes,
                        cmd.transfers ? "--transfers" : "--shape",
                        diags);
  }
  return session.finish(
      report, diags.has_errors() ? ExitCode::plan_errors : ExitCode::ok);
}

Runner add_reshard(CLI::App& sub, CommonOptions& common) {
  return bind_options(sub, common, add_reshard_command, run_reshard);
}

}  // namespace shardplan::cli
