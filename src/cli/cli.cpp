#include "cli/cli.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/report.hpp>
#include <shardplan/topology.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <ostream>
#include <sstream>

namespace shardplan::cli {

namespace {

// Options every command takes (DESIGN.md section 1).
struct CommonOptions {
  std::string format = "text";
  std::string output;
  bool verbose = false;
  bool quiet = false;
  std::string color = "auto";
};

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
  std::string manifest;
};

void add_common(CLI::App& app, CommonOptions& common,
                const std::vector<std::string>& formats) {
  app.add_option("--format", common.format,
                 fmt::format("output format: {}", fmt::join(formats, ", ")))
      ->check(CLI::IsMember(formats))
      ->default_str("text");
  app.add_option("-o,--output", common.output,
                 "write the result to FILE (atomically) instead of stdout")
      ->type_name("FILE");
  app.add_flag("-v,--verbose", common.verbose, "debug logs on stderr");
  app.add_flag("-q,--quiet", common.quiet, "only errors on stderr");
  app.add_option("--color", common.color, "colour diagnostics: auto, always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->default_str("auto");
}

// Where the command writes: its result, then diagnostics, then the exit code.
class Session {
 public:
  Session(std::string command, const CommonOptions& common, std::ostream& out,
          std::ostream& err, const Environment& env)
      : m_command(std::move(command)), m_common(common), m_out(out), m_err(err) {
    m_color = common.color == "always"
              || (common.color == "auto" && env.stderr_is_tty && !env.no_color);
  }

  Diagnostics& diags() { return m_diags; }
  bool json() const { return m_common.format == "json"; }

  // Reports the diagnostics and, for bad input, the JSON diagnostics
  // document. Returns the exit code for an input failure.
  int fail_input() {
    print_diagnostics();
    if (json()) {
      m_out << diagnostics_json(m_command, m_diags);
    }
    return static_cast<int>(ExitCode::bad_input);
  }

  // Writes the result to stdout or -o, then the diagnostics to stderr.
  int finish(const std::string& document, ExitCode code) {
    print_diagnostics();
    if (!m_common.output.empty()) {
      Diagnostics write_diags;
      if (!write_file_atomic(m_common.output, document, write_diags)) {
        for (const Diagnostic& d : write_diags.items()) {
          m_err << render(d, m_color) << "\n";
        }
        return static_cast<int>(ExitCode::bad_input);
      }
    } else {
      m_out << document;
    }
    return static_cast<int>(code);
  }

 private:
  void print_diagnostics() {
    for (const Diagnostic& d : m_diags.items()) {
      if (m_common.quiet && d.severity != Severity::error) {
        continue;
      }
      m_err << render(d, m_color) << "\n";
    }
    if (m_diags.dropped() > 0) {
      m_err << fmt::format("shardplan: {} more errors not shown\n", m_diags.dropped());
    }
  }

  std::string m_command;
  const CommonOptions& m_common;
  std::ostream& m_out;
  std::ostream& m_err;
  Diagnostics m_diags;
  bool m_color = false;
};

// --topology NAME|FILE: a path to an existing file (or one ending in .json)
// is a user topology file; anything else a catalogue name.
std::optional<Topology> load_topology(const std::string& arg, Diagnostics& diags) {
  std::error_code ec;
  if (arg.ends_with(".json") || std::filesystem::is_regular_file(arg, ec)) {
    std::optional<std::string> text = read_file(arg, diags);
    if (!text) {
      return std::nullopt;
    }
    return parse_topology_json(*text, arg, diags);
  }
  return resolve_topology(arg, Location{"--topology", "", 0, 0, "", 0}, diags);
}

int run_mesh(const MeshCommand& cmd, Session& session) {
  std::optional<Topology> topology;
  if (!cmd.topology.empty()) {
    topology = load_topology(cmd.topology, session.diags());
    if (!topology) {
      return session.fail_input();
    }
  }
  MeshOptions options;
  options.axis_names = cmd.axis_names;
  options.num_devices = topology ? std::optional<int64_t>(topology->devices()) : cmd.devices;
  if (topology) {
    options.num_slices = topology->num_slices();
    options.devices_source = "--topology " + topology->name;
  }
  options.dcn = cmd.dcn;
  auto mesh = parse_mesh(cmd.mesh, options, session.diags());
  if (!mesh) {
    return session.fail_input();
  }
  spdlog::debug("mesh {} resolved to {} devices", cmd.mesh, mesh->num_devices());
  MeshLayout layout;
  if (topology) {
    std::optional<MeshLayout> laid =
        layout_mesh(*topology, *mesh, cmd.allow_split_physical_axes, session.diags());
    if (!laid || session.diags().has_errors()) {
      return session.fail_input();
    }
    layout = std::move(*laid);
  } else {
    layout.grid = generic_device_grid(*mesh);
  }
  const Topology* t = topology ? &*topology : nullptr;
  std::string doc = session.json() ? mesh_json(*mesh, layout, t, session.diags())
                                   : mesh_text(*mesh, layout, t);
  return session.finish(doc, ExitCode::ok);
}

int run_topology_list(Session& session) {
  std::vector<Topology> all = catalogue_topologies();
  std::string doc = session.json() ? topology_list_json(all) : topology_list_text(all);
  return session.finish(doc, ExitCode::ok);
}

int run_topology_show(const TopologyCommand& cmd, Session& session) {
  std::optional<Topology> topology = load_topology(cmd.name, session.diags());
  if (!topology) {
    return session.fail_input();
  }
  std::string doc = session.json() ? topology_show_json(*topology)
                                   : topology_show_text(*topology);
  return session.finish(doc, ExitCode::ok);
}

int run_manifest(const ManifestCommand& cmd, Session& session) {
  auto text = read_file(cmd.manifest, session.diags());
  if (!text) {
    return session.fail_input();
  }
  auto manifest = read_manifest(*text, cmd.manifest, session.diags());
  if (!manifest) {
    return session.fail_input();
  }
  std::string doc = session.json() ? manifest_json(*manifest, session.diags())
                                   : manifest_text(*manifest);
  return session.finish(doc, ExitCode::ok);
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

constexpr const char* k_examples = R"(Examples:
  shardplan mesh --mesh dp:2,fsdp:-1,tp:4 --devices 64
  shardplan mesh --mesh 2,-1,4 --axis-names dp,fsdp,tp --devices 64 --format json
  shardplan mesh --mesh dp:4,fsdp:4,tp:4 --devices 64 --dcn dp:2
  shardplan mesh --topology v5p-128 --mesh fsdp:-1,tp:4
  shardplan mesh --topology 2xv5e-256 --mesh dp:2,fsdp:-1,tp:8
  shardplan topology list
  shardplan topology show h100x64 --format json
  shardplan manifest --manifest model.json
  shardplan manifest --manifest header.json --format json -o manifest.json

Exit codes: 0 done, 1 the plan has errors, 2 bad usage or input, 3 internal error.
Docs: docs/cli.md, docs/mesh-syntax.md, docs/topologies.md, docs/manifest-format.md)";

}  // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
        const Environment& env) {
  CLI::App app{"shardplan: plan how model parameters shard over a TPU or GPU mesh",
               "shardplan"};
  app.set_version_flag("--version", fmt::format("shardplan {}", shardplan_version()));
  app.require_subcommand(1);
  app.footer(k_examples);

  CommonOptions common;

  MeshCommand mesh_cmd;
  CLI::App* mesh = app.add_subcommand(
      "mesh", "resolve a mesh string: axis sizes (-1 filled), ICI/DCN split, device ids");
  mesh->add_option("--mesh", mesh_cmd.mesh,
                   "axes major to minor: \"dp:2,fsdp:-1,tp:4\", or sizes with "
                   "--axis-names; an axis may carry a type: \"tp:4:explicit\"")
      ->required()
      ->type_name("STR");
  CLI::Option* devices_opt =
      mesh->add_option("--devices", mesh_cmd.devices,
                       "number of devices the mesh covers (fills -1), when no "
                       "topology is known")
          ->type_name("N");
  mesh->add_option("--topology", mesh_cmd.topology,
                   "the hardware: a catalogue name (v5p-128, 2xv5e-256, v5p:4x4x8, "
                   "h100x64) or a topology JSON file")
      ->type_name("NAME|FILE")
      ->excludes(devices_opt);
  mesh->add_flag("--allow-split-physical-axes", mesh_cmd.allow_split_physical_axes,
                 "let a mesh axis take part of a physical torus axis (JAX's "
                 "allow_split_physical_axes)");
  mesh->add_option("--axis-names", mesh_cmd.axis_names,
                   "names for a positional mesh, e.g. dp,fsdp,tp")
      ->delimiter(',')
      ->type_name("A,B,..");
  mesh->add_option("--dcn", mesh_cmd.dcn,
                   "the multi-slice (DCN) factor of each axis, e.g. \"dp:2\"")
      ->type_name("STR");
  add_common(*mesh, common, {"text", "json"});
  mesh->footer(R"(Examples:
  shardplan mesh --topology v5p-128 --mesh fsdp:-1,tp:4
  shardplan mesh --topology v4-32 --mesh 2,8 --axis-names data,model --allow-split-physical-axes
  shardplan mesh --mesh dp:2,fsdp:-1,tp:4 --devices 64
  shardplan mesh --mesh 2,4 --axis-names data,model --format json
  shardplan mesh --mesh dp:4,tp:8 --devices 32 --dcn dp:2)");

  TopologyCommand topology_cmd;
  CLI::App* topology = app.add_subcommand(
      "topology", "the built-in topology catalogue: TPU slices and GPU clusters");
  topology->require_subcommand(1);
  CLI::App* topology_list = topology->add_subcommand(
      "list", "a table of the catalogue: devices, shape, HBM, link bandwidths");
  add_common(*topology_list, common, {"text", "json"});
  CLI::App* topology_show = topology->add_subcommand(
      "show", "one topology with every figure and its source");
  topology_show->add_option("name", topology_cmd.name,
                            "a catalogue name (v5p-128, 2xv5e-256, v5p:4x4x8, "
                            "h100x64) or a topology JSON file")
      ->required()
      ->type_name("NAME|FILE");
  add_common(*topology_show, common, {"text", "json"});
  topology->footer(R"(Examples:
  shardplan topology list
  shardplan topology show v5p-128
  shardplan topology show 2xv6e-256 --format json
  shardplan topology show h100x64)");

  ManifestCommand manifest_cmd;
  CLI::App* manifest = app.add_subcommand(
      "manifest", "read a manifest (native JSON or a safetensors header object) and "
                  "summarise it, or write it in the native form");
  manifest->add_option("--manifest", manifest_cmd.manifest,
                       "the manifest file: {\"params\": [...]} or a safetensors "
                       "header JSON object")
      ->required()
      ->type_name("FILE");
  add_common(*manifest, common, {"text", "json"});
  manifest->footer(R"(Examples:
  shardplan manifest --manifest model.json
  shardplan manifest --manifest header.json --format json -o manifest.json)");

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
    err << "shardplan: error: " << e.what() << "\n"
        << "Run with --help for more information.\n";
    return static_cast<int>(ExitCode::bad_input);
  }

  ScopedLogging logging(common, err);
  if (mesh->parsed()) {
    Session session("mesh", common, out, err, env);
    return run_mesh(mesh_cmd, session);
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
