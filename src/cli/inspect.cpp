// `shardplan mesh`, `topology` and `manifest` (docs/cli.md): one
// input resolved and shown, a mesh on its devices, the catalogue or a
// topology, a manifest.

#include "cli/commands.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/report.hpp>
#include <shardplan/topology.hpp>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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
  CLI::App* list = nullptr;  // parsed: `topology list`; else `topology show`
};

struct ManifestCommand {
  ManifestSource source;
  std::string from_safetensors;
};

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
      session.command_line(), cmd.allow_split_physical_axes, {}, {}};
  return session.finish(
      MeshReport{placed->mesh, placed->layout, input.topology, &provenance},
      ExitCode::ok);
}

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

int run_topology(const TopologyCommand& cmd, Session& session) {
  if (cmd.list->parsed()) {
    return run_topology_list(session);
  }
  return run_topology_show(cmd, session);
}

void add_mesh_command(CLI::App& sub, MeshCommand& cmd, CommonOptions& common) {
  sub.add_option("--mesh",
                 cmd.mesh,
                 "axes major to minor: \"dp:2,fsdp:-1,tp:4\", or sizes with "
                 "--axis-names; an axis may carry a type: \"tp:4:explicit\"")
      ->required()
      ->type_name("STR");
  CLI::Option* devices_opt =
      sub.add_option("--devices",
                     cmd.devices,
                     "number of devices the mesh covers (fills -1), when no "
                     "topology is known")
          ->type_name("N");
  sub.add_option(
         "--topology",
         cmd.topology,
         "the hardware: a catalogue name (v5p-128, 2xv5e-256, v5p:4x4x8, "
         "h100x64) or a topology JSON file")
      ->type_name("NAME|FILE")
      ->excludes(devices_opt);
  sub.add_flag("--allow-split-physical-axes",
               cmd.allow_split_physical_axes,
               "let a mesh axis take part of a physical torus axis (JAX's "
               "allow_split_physical_axes)");
  sub.add_option("--axis-names",
                 cmd.axis_names,
                 "names for a positional mesh, e.g. dp,fsdp,tp")
      ->delimiter(',')
      ->type_name("A,B,..");
  sub.add_option("--dcn",
                 cmd.dcn,
                 "the multi-slice (DCN) factor of each axis, e.g. \"dp:2\"")
      ->type_name("STR");
  add_common(sub, common, {View::mesh});
  sub.footer(R"(Examples:
  shardplan mesh --topology v5p-128 --mesh fsdp:-1,tp:4
  shardplan mesh --topology v4-32 --mesh 2,8 --axis-names data,model --allow-split-physical-axes
  shardplan mesh --mesh dp:2,fsdp:-1,tp:4 --devices 64
  shardplan mesh --mesh 2,4 --axis-names data,model --format json
  shardplan mesh --mesh dp:4,tp:8 --devices 32 --dcn dp:2)");
}

void add_topology_command(CLI::App& sub,
                          TopologyCommand& cmd,
                          CommonOptions& common) {
  sub.require_subcommand(1);
  cmd.list = sub.add_subcommand(
      "list", "a table of the catalogue: devices, shape, HBM, link bandwidths");
  add_common(*cmd.list, common, {View::topology_list});
  CLI::App* show = sub.add_subcommand(
      "show", "one topology with every figure and its source");
  show->add_option("name",
                   cmd.name,
                   "a catalogue name (v5p-128, 2xv5e-256, v5p:4x4x8, "
                   "h100x64) or a topology JSON file")
      ->required()
      ->type_name("NAME|FILE");
  add_common(*show, common, {View::topology_show});
  sub.footer(R"(Examples:
  shardplan topology list
  shardplan topology show v5p-128
  shardplan topology show 2xv6e-256 --format json
  shardplan topology show h100x64)");
}

void add_manifest_command(CLI::App& sub,
                          ManifestCommand& cmd,
                          CommonOptions& common) {
  CLI::Option* from_safetensors =
      sub.add_option("--from-safetensors",
                     cmd.from_safetensors,
                     "a .safetensors file, a model.safetensors.index.json, "
                     "or a checkpoint folder: only headers are read")
          ->type_name("PATH");
  for (CLI::Option* other : add_manifest_options(sub, cmd.source)) {
    from_safetensors->excludes(other);
  }
  add_common(sub, common, {View::manifest, View::model_list});
  sub.footer(R"(Examples:
  shardplan manifest --manifest model.json
  shardplan manifest --manifest header.json --format json -o manifest.json
  shardplan manifest --model list
  shardplan manifest --model llama-3-8b --format json -o llama-3-8b.json
  shardplan manifest --from-hf-config config.json
  shardplan manifest --from-safetensors model.safetensors.index.json -o manifest.json
  shardplan manifest --from-safetensors ./Llama-3-8B/    (the folder's index or file))");
}

}  // namespace

Runner add_mesh(CLI::App& sub, CommonOptions& common) {
  return bind_options(sub, common, add_mesh_command, run_mesh);
}

Runner add_topology(CLI::App& sub, CommonOptions& common) {
  return bind_options(sub, common, add_topology_command, run_topology);
}

Runner add_manifest(CLI::App& sub, CommonOptions& common) {
  return bind_options(sub, common, add_manifest_command, run_manifest);
}

}  // namespace shardplan::cli
