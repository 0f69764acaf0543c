#pragma once

// Internal to the command-line front end: what cli.cpp shares with the
// commands defined in their own files (cli/reshard.cpp).

#include "cli/cli.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/report.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/topology.hpp>
#include <shardplan/workload.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/resource.h>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace shardplan::cli {

// Options every command takes (DESIGN.md section 1).
struct CommonOptions {
  std::string format = "text";
  std::string output;
  bool verbose = false;
  bool quiet = false;
  std::string color = "auto";
  // The command as typed, for the paste-back formats' headers ("shardplan
  // plan --model ..."; run() sets it).
  std::string command_line;
};

// Logs at debug level (-v) how long each phase of a command took and how
// many page faults it took (first touches of fresh memory, a large part of
// a big run's time): `lap("read manifest")` logs both since the last lap,
// or since the watch was made.
class Stopwatch {
 public:
  void lap(std::string_view phase) {
    const auto now = std::chrono::steady_clock::now();
    const std::chrono::duration<double, std::milli> elapsed = now - m_last;
    const long faults = page_faults();
    spdlog::debug("{}: {:.1f} ms, {} page faults",
                  phase,
                  elapsed.count(),
                  faults - m_faults);
    m_last = now;
    m_faults = faults;
  }

 private:
  static long page_faults() {
    struct rusage usage {};
    return ::getrusage(RUSAGE_SELF, &usage) == 0
               ? usage.ru_minflt + usage.ru_majflt
               : 0;
  }

  std::chrono::steady_clock::time_point m_last =
      std::chrono::steady_clock::now();
  long m_faults = page_faults();
};

// Where the command writes: its result, then diagnostics, then the exit code.
class Session {
 public:
  Session(std::string command,
          const CommonOptions& common,
          std::ostream& out,
          std::ostream& err,
          const Environment& env)
      : m_command(std::move(command)),
        m_common(common),
        // CLI11 checked the name against the command's formats.
        m_format(parse_format(common.format).value_or(Format::text)),
        m_out(out),
        m_err(err) {
    m_color = common.color == "always"
              || (common.color == "auto" && env.stderr_is_tty && !env.no_color);
  }

  Diagnostics& diags() { return m_diags; }
  const std::string& command_line() const { return m_common.command_line; }
  // A line the paste-back formats add to their header (search's winner).
  const std::string& note() const { return m_note; }
  void set_note(std::string note) { m_note = std::move(note); }
  Format format() const { return m_format; }
  bool json() const { return m_format == Format::json; }
  // Where progress goes (stderr), and whether -q silenced it.
  std::ostream& err() { return m_err; }
  bool quiet() const { return m_common.quiet; }

  // Reports the diagnostics on stderr and, to stdout, the document of bad
  // input in the command's --format (none for text; -o's file is left as it
  // was). Returns the exit code for an input failure.
  // Reports the diagnostics on stderr and writes nothing: a result that
  // does not exist for a plan error (search's winner when none fits).
  // Returns exit code 1.
  int fail_plan() {
    print_diagnostics();
    return static_cast<int>(ExitCode::plan_errors);
  }

  int fail_input() {
    print_diagnostics();
    m_out << input_error_document(m_command, m_format, m_diags);
    return static_cast<int>(ExitCode::bad_input);
  }

  // Prints the diagnostics on stderr, then writes `report` in the command's
  // --format (render() decides how) to stdout or -o. Logs how long
  // formatting and writing took (a streamed document is formatted as it is
  // written).
  int finish(const Report& report, ExitCode code) {
    // A format the report cannot be written in (a mesh axis MaxText has no
    // name for): nothing is written.
    if (!can_render(report, m_format, m_diags)) {
      return fail_input();
    }
    Stopwatch watch;
    const Document document = render(report, m_format, m_diags);
    if (!document.streamed()) {
      watch.lap("format the report");
    }
    const int exit_code = finish_written(document, code);
    watch.lap("write the report");
    return exit_code;
  }

 private:
  int finish_written(const Document& document, ExitCode code) {
    print_diagnostics();
    if (!m_common.output.empty()) {
      Diagnostics write_diags;
      AtomicFile file;
      bool written = file.open(m_common.output, write_diags);
      if (written) {
        document.write([&](std::string_view text) { file.write(text); });
        written = file.commit(write_diags);
      }
      if (!written) {
        for (const Diagnostic& d : write_diags.items()) {
          m_err << render(d, m_color) << "\n";
        }
        return static_cast<int>(ExitCode::bad_input);
      }
    } else {
      document.write([&](std::string_view text) {
        m_out.write(text.data(), static_cast<std::streamsize>(text.size()));
      });
    }
    return static_cast<int>(code);
  }

  void print_diagnostics() {
    for (const Diagnostic& d : m_diags.items()) {
      if (m_common.quiet && d.severity != Severity::error) {
        continue;
      }
      m_err << render(d, m_color) << "\n";
    }
    if (m_diags.dropped() > 0) {
      m_err << fmt::format("shardplan: {} more errors not shown\n",
                           m_diags.dropped());
    }
  }

  std::string m_command;
  std::string m_note;
  const CommonOptions& m_common;
  Format m_format;
  std::ostream& m_out;
  std::ostream& m_err;
  Diagnostics m_diags;
  bool m_color = false;
};

// Reads the file at `path`, an input of kind `kind` (within its size
// limit), with `read` (read_specs, read_rules, ...).
template <typename Reader>
auto read_path(const std::string& path,
               InputKind kind,
               Diagnostics& diags,
               Reader read)
    -> decltype(read(std::string_view(), std::string_view(), diags)) {
  std::optional<std::string> text = read_file(path, kind, diags);
  if (!text) {
    return std::nullopt;
  }
  return read(*text, path, diags);
}

// --format, -o, -v, -q and --color on `app`, a command that shows `views`:
// --format takes the formats any of them has (formats_of).
void add_common(CLI::App& app,
                CommonOptions& common,
                std::initializer_list<View> views,
                std::initializer_list<Format> more_formats = {});

// Where a command's tensors come from: one of --manifest PATH, --model NAME
// and --from-hf-config FILE.
struct ManifestSource {
  std::string manifest;
  std::string model;
  std::string hf_config;
};

// Adds --manifest, --model and --from-hf-config to `app`, each excluding the
// others; returns them, for the command's own excludes.
std::vector<CLI::Option*> add_manifest_options(CLI::App& app,
                                               ManifestSource& source);

// The manifest of whichever source was given; an error naming the three
// when none was [cli.no-manifest].
std::optional<Manifest> load_manifest(const ManifestSource& source,
                                      Diagnostics& diags);

// The training workload, the axis roles and the architecture file of
// `plan`, `check` and `memory` (DESIGN.md section 8; cli/workload.cpp).
// Each workload value is nullopt when its flag was not given.
struct WorkloadFlags {
  std::string config;  // --config FILE: the architecture beside --manifest
  std::optional<int64_t> seq;
  std::optional<int64_t> batch;
  std::optional<std::string> per_device_batch;
  std::optional<int64_t> microbatches;
  std::optional<std::string> remat;
  std::optional<std::string> attention;
  bool sequence_parallel = false;
  std::optional<int64_t> stage_interleave;
  std::optional<std::string> activation_dtype;
  std::vector<std::string> tensor_axes;
  std::vector<std::string> sequence_axes;
  std::vector<std::string> expert_axes;
  std::vector<std::string> stage_axes;
  // Where seq, per_device_batch, remat and microbatches came from: their
  // flags, or a
  // MaxText config's keys (maxtext_source: "cfg.yml:12:24").
  std::string seq_source = "--seq";
  std::string per_device_batch_source = "--per-device-batch";
  std::string remat_source = "--remat";
  std::string microbatches_source = "--microbatches";
};

// Adds the workload's flags, the role flags but --data-axes (ZeRO's, which
// the check options add) and --config, which excludes the manifest options
// but --manifest (`manifest_options`: --manifest, --model, --from-hf-config).
void add_workload_options(CLI::App& app,
                          WorkloadFlags& flags,
                          const std::vector<CLI::Option*>& manifest_options);

// The architecture of whichever source was given: --model's built-in
// config, --from-hf-config's file, or `config` (--config) beside
// --manifest. nullopt with `failed` false for a manifest alone; with
// `failed` true after an error (reported).
std::optional<ModelConfig> read_architecture(const std::string& config,
                                             const ManifestSource& source,
                                             Diagnostics& diags,
                                             bool& failed);

// `shardplan search` (cli/search.cpp).
// `check` and `memory`: specs for a manifest on a mesh.
struct CheckCommand {
  std::string mesh;
  std::optional<int64_t> devices;
  std::vector<std::string> axis_names;
  std::string dcn;
  std::string topology;
  ManifestSource source;
  std::string specs;
  std::string recipe = "params-only";
  std::string param_dtype;
  std::string grad_dtype;
  int zero = 0;
  std::vector<std::string> data_axes;
  double headroom = 0.1;
  std::optional<std::string> hbm;  // given, even as "" (refused)
  std::string warn_replicated = "64MiB";
  size_t largest = 20;
  bool allow_split_physical_axes = false;
  std::string rules;  // `memory --rules`: specs from rules instead of a file
  WorkloadFlags workload;
  double matmul_efficiency = 1.0;
  double capacity_factor = 1.0;
  std::vector<std::string> overlap = {"fsdp", "grads"};
  std::vector<std::string> maxtext;  // --maxtext-config FILE [KEY=VALUE ...]
};

// `plan`: rules applied to a manifest on a mesh.
struct PlanCommand {
  CheckCommand check;
  std::string rules;  // empty: fsdp-tp, or with --maxtext-config its rules
  std::string explain;
};
// Runs `plan` (search writes its winner's paste-back document with it).
int run_plan(const PlanCommand& cmd, Session& session);

struct SearchCommand {
  std::string topology;
  // --devices: device counts to search, "64", "64,128" or "64-512": a
  // catalogue slice of --topology's chip for each (search.cpp).
  std::string devices;
  ManifestSource source;
  std::string config;
  std::string rules = "fsdp-tp";
  std::vector<std::string> axes;
  std::vector<std::string> dcn_axes;
  std::string recipe = "adam";
  int zero = 0;
  double headroom = 0.1;
  std::optional<int64_t> seq;
  std::optional<int64_t> batch;
  std::vector<std::string> per_device_batch;
  int64_t microbatches = 1;
  std::vector<std::string> remat = {"full"};
  std::string attention = "flash";
  bool sequence_parallel = false;
  double matmul_efficiency = 1.0;
  size_t top = 10;
  std::string objective = "tokens";
  bool allow_split_physical_axes = false;
  std::vector<std::string> maxtext;  // --maxtext-config FILE [KEY=VALUE ...]
  bool remat_given = false;          // --remat was given (search.cpp)
  bool rules_given = false;          // --rules was given
};
CLI::App* add_search_command(CLI::App& app,
                             SearchCommand& cmd,
                             CommonOptions& common);
int run_search(const SearchCommand& cmd, Session& session);

// What the workload flags resolve to for one mesh.
struct Training {
  // The architecture: --model's or --from-hf-config's config, or --config's;
  // nullopt for a manifest alone.
  std::optional<ModelConfig> model;
  AxisRoles roles;
  AxisRoleSources role_sources;
  // With a workload (any workload flag given):
  std::optional<Workload> workload;
  std::optional<ActivationEstimate> activations;
};

// Reads the architecture, resolves the axis roles of `mesh` (`data_axes`:
// --data-axes) and, with a workload, estimates its activations. False after
// an error (reported): workload flags without an architecture
// [workload.no-architecture] or without --seq [workload.missing-seq], and
// read_hf_config's, resolve_axis_roles's and estimate_activations's.
bool load_training(const WorkloadFlags& flags,
                   const ManifestSource& source,
                   const std::vector<std::string>& data_axes,
                   const Mesh& mesh,
                   Diagnostics& diags,
                   Training& out);

// For options taking NAME|FILE (--topology, --rules): a path to an existing
// file (a pipe or a device too: /dev/stdin, <(...)), or one ending in
// .json, is a file; anything else a built-in name (a folder as well).
bool names_a_file(const std::string& arg);

// --topology NAME|FILE (or `flag`, e.g. --from-topology): a user topology
// file, or a catalogue name (errors located at `flag`).
std::optional<Topology> load_topology(const std::string& arg,
                                      const std::string& flag,
                                      Diagnostics& diags);

// The flags a mesh's inputs come from in every command but reshard, which
// has its own for each side.
MeshSources mesh_flags();

// --rules FILE|PRESET (or `flag`, e.g. --from-rules): a user's rules file,
// or a preset name.
std::optional<RuleSet> load_rules(const std::string& arg,
                                  const std::string& flag,
                                  Diagnostics& diags);

// --maxtext-config FILE [KEY=VALUE ...] (cli/maxtext.cpp; docs/maxtext.md).

// Adds --maxtext-config to `app`, filling `args` (the file, then overrides).
CLI::Option* add_maxtext_option(CLI::App& app, std::vector<std::string>& args);

// The MaxText config of `args` (read_maxtext_config).
std::optional<MaxTextConfig> load_maxtext_config(
    const std::vector<std::string>& args, Diagnostics& diags);

// The flags a mesh built from a MaxText config is reported at.
MeshSources maxtext_flags();

// The config's workload keys as flags, where `flags` has none of its own
// (flags given win): max_target_length -> --seq, per_device_batch_size ->
// --per-device-batch (unless --batch), remat_policy -> --remat. Without an
// architecture (`has_architecture` false) the keys are not used and an
// info note says so [maxtext.workload-ignored].
void apply_maxtext_workload(const MaxTextConfig& config,
                            bool has_architecture,
                            WorkloadFlags& flags,
                            Diagnostics& diags);

// The rules a MaxText config gives: the maxtext preset, its
// logical_axis_rules replaced by the config's when it has them (the preset's
// Hugging Face name -> logical axes mapping kept).
std::optional<RuleSet> maxtext_rules(const MaxTextConfig& config,
                                     Diagnostics& diags);

// An info note that the config's logical_axis_rules are not used because
// `flag` (--rules, --specs) gives the specs [maxtext.rules-ignored].
void note_maxtext_rules_unused(const MaxTextConfig& config,
                               const std::string& flag,
                               Diagnostics& diags);

// `shardplan reshard` (cli/reshard.cpp).
struct ReshardCommand {
  std::string from_mesh;
  std::string to_mesh;
  std::string mesh;  // both sides, unless from_mesh/to_mesh say otherwise
  std::string dcn;   // both sides, unless from_dcn/to_dcn say otherwise
  std::string topology;
  std::string from_topology;
  std::string to_topology;
  std::optional<int64_t> devices;
  std::string from_dcn;
  std::string to_dcn;
  ManifestSource source;
  std::string from_specs;
  std::string to_specs;
  std::string from_rules;
  std::string to_rules;
  std::string shape;
  bool single =
      false;  // --shape was given (one tensor by flags; "" is a scalar)
  std::string dtype;
  std::string name = "tensor";
  std::string from_spec;
  std::string to_spec;
  std::string partial;
  bool donate = false;
  bool allow_split_physical_axes = false;
  bool transfers = false;
};

// Above this many bytes of transfers lists in reshard's JSON, a warning
// states their count and size before the output is written (docs/reshard.md,
// "Listing the transfers"): 256 MiB, over 3x the whole JSON of a reshard of
// DeepSeek-V3 without them (70.5 MB for its 91,991 tensors), so that past it
// the listing, not the plan, is most of the output.
inline constexpr int64_t k_transfers_warning_bytes = int64_t{256} << 20U;

// Warns [reshard.transfers-size] at `flag` (--transfers, or --shape, which
// always lists them) when `size.json_bytes` is over `threshold`.
void warn_transfers_size(const TransfersSize& size,
                         int64_t threshold,
                         const std::string& flag,
                         Diagnostics& diags);

// Adds the `reshard` subcommand to `app`, filling `cmd` and `common`.
CLI::App* add_reshard_command(CLI::App& app,
                              ReshardCommand& cmd,
                              CommonOptions& common);
int run_reshard(const ReshardCommand& cmd, Session& session);

}  // namespace shardplan::cli
