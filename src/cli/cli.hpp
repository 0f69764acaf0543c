#pragma once

// The command-line front end: argument parsing (CLI11), reading inputs,
// calling the core, writing results, exit codes. main() is a few lines around
// run(); tests call run() directly with their own streams.

#include <iosfwd>
#include <string>
#include <vector>

namespace shardplan::cli {

struct Environment {
  bool stderr_is_tty = false;  // for --color auto
  bool no_color = false;       // NO_COLOR is set
};

// Runs one invocation. `args` includes the program name. Results go to
// `out`, diagnostics and logs to `err`. Returns the process exit code
// (docs/cli.md, "Exit codes"). Never throws for bad input.
int run(const std::vector<std::string>& args,
        std::ostream& out,
        std::ostream& err,
        const Environment& env = {});

}  // namespace shardplan::cli
