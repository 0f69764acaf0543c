#pragma once

// Internal to the command-line front end: what every command runs in. The
// options every command takes, the session a command writes through (its
// result, its diagnostics, its exit code), and the stopwatch of -v.
// Defined in cli.cpp.

#include "cli/cli.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/report.hpp>

#include <chrono>
#include <initializer_list>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace CLI {
class App;
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

// --format, -o, -v, -q and --color on `app`, a command that shows `views`:
// --format takes the formats any of them has (formats_of).
void add_common(CLI::App& app,
                CommonOptions& common,
                std::initializer_list<View> views,
                std::initializer_list<Format> more_formats = {});

// Logs at debug level (-v) how long each phase of a command took and how
// many page faults it took (first touches of fresh memory, a large part of
// a big run's time): `lap("read manifest")` logs both since the last lap,
// or since the watch was made.
class Stopwatch {
 public:
  void lap(std::string_view phase);

 private:
  static long page_faults();

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
          const Environment& env);

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

  // Reports the diagnostics on stderr and writes nothing: a result that
  // does not exist for a plan error (search's winner when none fits).
  // Returns exit code 1.
  int fail_plan();

  // Reports the diagnostics on stderr and, to stdout, the document of bad
  // input in the command's --format (none for text; -o's file is left as it
  // was). Returns the exit code for an input failure.
  int fail_input();

  // Prints the diagnostics on stderr, then writes `report` in the command's
  // --format (render() decides how) to stdout or -o. Logs how long
  // formatting and writing took (a streamed document is formatted as it is
  // written).
  int finish(const Report& report, ExitCode code);

 private:
  int finish_written(const Document& document, ExitCode code);
  void print_diagnostics();

  std::string m_command;
  std::string m_note;
  const CommonOptions& m_common;
  Format m_format;
  std::ostream& m_out;
  std::ostream& m_err;
  Diagnostics m_diags;
  bool m_color = false;
};

}  // namespace shardplan::cli
