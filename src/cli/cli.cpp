// The command-line front end's app: the session a command runs in
// (cli/session.hpp), the table of commands, and run(), which adds a
// subcommand per row, parses, and runs the one parsed.

#include "cli/cli.hpp"

#include "cli/commands.hpp"
#include "cli/session.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/report.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/resource.h>

namespace shardplan::cli {

void Stopwatch::lap(std::string_view phase) {
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

long Stopwatch::page_faults() {
  struct rusage usage {};
  return ::getrusage(RUSAGE_SELF, &usage) == 0
             ? usage.ru_minflt + usage.ru_majflt
             : 0;
}

Session::Session(std::string command,
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

int Session::fail_plan() {
  print_diagnostics();
  return static_cast<int>(ExitCode::plan_errors);
}

int Session::fail_input() {
  print_diagnostics();
  m_out << input_error_document(m_command, m_format, m_diags);
  return static_cast<int>(ExitCode::bad_input);
}

int Session::finish(const Report& report, ExitCode code) {
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

int Session::finish_written(const Document& document, ExitCode code) {
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

std::function<void(int64_t, int64_t)> Session::progress(std::string what,
                                                        std::string items) {
  if (m_common.quiet) {
    return {};
  }
  const auto start = std::chrono::steady_clock::now();
  return [this, start, what = std::move(what), items = std::move(items)](
             int64_t done, int64_t total) {
    if (std::chrono::steady_clock::now() - start >= std::chrono::seconds(1)) {
      m_err << fmt::format("\r{}: {}/{} {}", what, done, total, items)
            << std::flush;
      m_progress_shown = true;
    }
  };
}

void Session::end_progress() {
  if (m_progress_shown) {
    m_err << "\n";
    m_progress_shown = false;
  }
}

void Session::print_diagnostics() {
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

namespace {

// The commands, in the order --help lists them: a row per command, as
// ninja's kTools (src/ninja.cc). run() adds a subcommand per row, named and
// described by it, and runs the one parsed.
constexpr std::array<Command, 8> k_commands{{
    {"mesh",
     "resolve a mesh string: axis sizes (-1 filled), ICI/DCN split, device ids",
     add_mesh},
    {"topology",
     "the built-in topology catalogue: TPU slices and GPU clusters",
     add_topology},
    {"manifest",
     "read a manifest (native JSON, safetensors headers, a Hugging Face "
     "config.json or a built-in model) and summarise it, or write it in the "
     "native form",
     add_manifest},
    {"plan",
     "apply sharding rules to a manifest on a mesh: a spec per tensor, "
     "validated, with per-device memory",
     add_plan},
    {"check",
     "validate given specs for a manifest on a mesh, and estimate memory (for "
     "CI)",
     add_check},
    {"memory",
     "per-device memory: per category against HBM, per dtype, largest tensors",
     add_memory},
    {"reshard",
     "plan moving tensors from one mesh and specs to another: steps, "
     "collectives, bytes, time and peak memory per device",
     add_reshard},
    {"search",
     "rank the meshes of a topology for a model and a workload: memory with "
     "activations, step time, MFU",
     add_search},
}};

// The error for a first argument that is not an option and names no
// command: "unknown command "mesj"; did you mean "mesh"?" (the commands of
// k_commands, by edit distance), or the list of commands when none is
// close; empty when the first argument is a command or an option.
std::string unknown_command(const std::vector<std::string>& args) {
  if (args.size() < 2 || args[1].empty() || args[1].front() == '-') {
    return "";
  }
  std::vector<std::string> names;
  names.reserve(k_commands.size());
  for (const Command& command : k_commands) {
    if (command.name == args[1]) {
      return "";
    }
    names.emplace_back(command.name);
  }
  const std::string near = closest_match(args[1], names);
  return near.empty() ? fmt::format("unknown command {}; the commands are {}",
                                    quote(args[1]),
                                    fmt::join(names, ", "))
                      : fmt::format("unknown command {}; did you mean {}?",
                                    quote(args[1]),
                                    quote(near));
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
  // Each misspelt flag with the known flag closest to it.
  std::vector<std::pair<std::string, std::string_view>> hints;
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
      hints.emplace_back(std::move(near), arg);
    }
  }
  if (hints.empty()) {
    return "";
  }
  if (hints.size() == 1) {
    return fmt::format("; did you mean {}?", hints[0].first);
  }
  std::vector<std::string> each;
  each.reserve(hints.size());
  for (const auto& [near, arg] : hints) {
    each.push_back(fmt::format("{} for {}", near, arg));
  }
  return fmt::format("; did you mean {}?", fmt::join(each, ", "));
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

}  // namespace

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
  std::array<CLI::App*, k_commands.size()> subs{};
  std::array<Runner, k_commands.size()> runners;
  for (size_t i = 0; i < k_commands.size(); ++i) {
    const Command& command = k_commands[i];
    subs[i] = app.add_subcommand(std::string(command.name),
                                 std::string(command.description));
    runners[i] = command.add(*subs[i], common);
  }

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
    const std::string unknown = unknown_command(args);
    err << "shardplan: error: "
        << (unknown.empty() ? e.what() + misspelt_flags(app, args) : unknown)
        << "\n"
        << "Run with --help for more information.\n";
    return static_cast<int>(ExitCode::bad_input);
  }

  ScopedLogging logging(common, err);
  common.command_line = command_line(args);
  for (size_t i = 0; i < k_commands.size(); ++i) {
    if (subs[i]->parsed()) {
      Session session(std::string(k_commands[i].name), common, out, err, env);
      return runners[i](session);
    }
  }
  return static_cast<int>(ExitCode::internal_error);  // CLI11 required one
}

}  // namespace shardplan::cli
