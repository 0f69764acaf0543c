#pragma once

// Internal to the command-line front end: the rows of the command table
// (k_commands in cli.cpp) and what the commands' files share with it and
// with each other: cli/inspect.cpp (mesh, topology, manifest), cli/check.cpp
// (plan, check, memory), cli/reshard.cpp, cli/search.cpp. The loaders they
// share are cli/inputs.hpp's; the session they run in, cli/session.hpp's.

#include "cli/inputs.hpp"
#include "cli/maxtext.hpp"
#include "cli/session.hpp"
#include "cli/workload.hpp"

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

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace shardplan::cli {

// How a parsed command runs: on one session, with the options it was given.
using Runner = std::function<int(Session&)>;

// A row of the command table, as ninja's kTools (src/ninja.cc): the run()
// loop adds a subcommand per row, in order (--help lists them so), and runs
// the one parsed.
struct Command {
  std::string_view name;         // `shardplan NAME`, and its session's name
  std::string_view description;  // its line in --help
  // Adds the command's options, formats and footer to `sub` (the row's
  // subcommand); returns how it runs once parsed.
  Runner (*add)(CLI::App& sub, CommonOptions& common);
};

// The runner of a command whose options fill an `Options` the runner owns:
// `add_options` adds them to `sub`, `run` runs with what they were given.
template <typename Options>
Runner bind_options(CLI::App& sub,
                    CommonOptions& common,
                    void (*add_options)(CLI::App&, Options&, CommonOptions&),
                    int (*run)(const Options&, Session&)) {
  auto options = std::make_shared<Options>();
  add_options(sub, *options, common);
  return [options, run](Session& session) { return run(*options, session); };
}

// The rows' functions, one per command, in their files.
Runner add_mesh(CLI::App& sub, CommonOptions& common);      // cli/inspect.cpp
Runner add_topology(CLI::App& sub, CommonOptions& common);  // cli/inspect.cpp
Runner add_manifest(CLI::App& sub, CommonOptions& common);  // cli/inspect.cpp
Runner add_plan(CLI::App& sub, CommonOptions& common);      // cli/check.cpp
Runner add_check(CLI::App& sub, CommonOptions& common);     // cli/check.cpp
Runner add_memory(CLI::App& sub, CommonOptions& common);    // cli/check.cpp
Runner add_reshard(CLI::App& sub, CommonOptions& common);   // cli/reshard.cpp
Runner add_search(CLI::App& sub, CommonOptions& common);    // cli/search.cpp

// `plan`: rules applied to a manifest on a mesh.
struct PlanCommand {
  CheckCommand check;
  std::string rules;  // empty: fsdp-tp, or with --maxtext-config its rules
  std::string explain;
};
// Runs `plan` (search writes its winner's paste-back document with it).
int run_plan(const PlanCommand& cmd, Session& session);

// `shardplan search` (cli/search.cpp).
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

// Adds search's options to `sub`, filling `cmd` and `common`.
void add_search_options(CLI::App& sub,
                        SearchCommand& cmd,
                        CommonOptions& common);
int run_search(const SearchCommand& cmd, Session& session);

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

// Adds reshard's options to `sub`, filling `cmd` and `common`.
void add_reshard_options(CLI::App& sub,
                         ReshardCommand& cmd,
                         CommonOptions& common);
int run_reshard(const ReshardCommand& cmd, Session& session);

}  // namespace shardplan::cli
