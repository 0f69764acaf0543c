// bench_read: how read_manifest compares with a bare simdjson parse.
//
//   bench_read FILE [--reps R] [--mode reader|bare|both]
//
// The file is loaded once into a simdjson::padded_string; neither timing
// includes reading the disk.
//
// "bare" is simdjson's DOM parser (simdjson::dom::parser::parse) on that
// padded string, with one parser reused across repetitions so its buffers are
// allocated once. That is the fastest complete parse simdjson offers: it
// validates the whole document (UTF-8, structure, every number and string)
// and writes every value to its tape, using the best kernel for this CPU
// (runtime dispatch). An On-Demand loop that touches every value would do
// the same work less directly, so the DOM parse is the stricter baseline.
//
// "reader" is shardplan::read_manifest on the same bytes, as the tool calls
// it: it copies the text into its own padded buffer, allocates its parser,
// iterates with On-Demand, and builds the Manifest (names, shapes, dtypes,
// duplicate check, checked byte counts).
//
// Prints the median of R repetitions of each (after one warm-up run) and the
// ratio reader/bare.

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

namespace {

using Clock = std::chrono::steady_clock;

// Median wall time of `run`. What `run` returns is destroyed after the clock
// stops: freeing a result is not part of reading it (the DOM parser's tape is
// not freed either, it is reused).
template <typename F>
double median_ms(int reps, F&& run) {
  { [[maybe_unused]] auto warm_up = run(); }  // page faults, caches, first allocations
  std::vector<double> times;
  times.reserve(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    [[maybe_unused]] auto result = run();
    std::chrono::duration<double, std::milli> elapsed = Clock::now() - start;
    times.push_back(elapsed.count());
  }
  std::sort(times.begin(), times.end());
  size_t mid = times.size() / 2;
  return times.size() % 2 == 1 ? times[mid] : (times[mid - 1] + times[mid]) / 2;
}

int usage() {
  std::fputs("usage: bench_read FILE [--reps R] [--mode reader|bare|both]\n",
             stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  int reps = 11;
  std::string mode = "both";
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      std::string_view v = argv[++i];
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), reps);
      if (ec != std::errc() || end != v.data() + v.size() || reps < 1) {
        return usage();
      }
    } else if (arg == "--mode" && i + 1 < argc) {
      mode = argv[++i];
      if (mode != "reader" && mode != "bare" && mode != "both") {
        return usage();
      }
    } else if (path.empty() && !arg.starts_with("-")) {
      path = arg;
    } else {
      return usage();
    }
  }
  if (path.empty()) {
    return usage();
  }

  simdjson::padded_string text;
  if (auto error = simdjson::padded_string::load(path).get(text)) {
    std::fprintf(stderr, "bench_read: cannot read \"%s\": %s\n", path.c_str(),
                 simdjson::error_message(error));
    return 1;
  }
  const std::string_view view(text.data(), text.size());
  const double mb = static_cast<double>(text.size()) / 1e6;

  // One checked run first: the benchmark is meaningless on a bad file.
  size_t tensors = 0;
  {
    shardplan::Diagnostics diags;
    auto manifest = shardplan::read_manifest(view, path, diags);
    if (!manifest || diags.has_errors()) {
      for (const auto& d : diags.items()) {
        std::fprintf(stderr, "%s\n", shardplan::render(d).c_str());
      }
      return 1;
    }
    tensors = manifest->size();
  }
  fmt::print("file: {} ({:.1f} MB, {} tensors), simdjson {} kernel\n", path, mb,
             tensors, simdjson::get_active_implementation()->name());

  double bare = 0;
  double reader = 0;
  if (mode != "reader") {
    simdjson::dom::parser parser;
    bool ok = true;
    bare = median_ms(reps, [&] {
      simdjson::dom::element root;
      ok = ok && parser.parse(text).get(root) == simdjson::SUCCESS;
      return root;
    });
    if (!ok) {
      std::fputs("bench_read: simdjson DOM parse failed\n", stderr);
      return 1;
    }
    fmt::print("bare simdjson DOM parse: median {:8.2f} ms ({:.0f} MB/s), {} reps\n",
               bare, mb / bare * 1e3, reps);
  }
  if (mode != "bare") {
    size_t count = 0;
    reader = median_ms(reps, [&] {
      shardplan::Diagnostics diags;
      auto manifest = shardplan::read_manifest(view, path, diags);
      count = manifest ? manifest->size() : 0;
      return manifest;
    });
    if (count != tensors) {
      std::fputs("bench_read: read_manifest result changed between runs\n",
                 stderr);
      return 1;
    }
    fmt::print("read_manifest:           median {:8.2f} ms ({:.0f} MB/s), {} reps\n",
               reader, mb / reader * 1e3, reps);
  }
  if (mode == "both") {
    fmt::print("ratio reader/bare: {:.2f} (target <= 2)\n", reader / bare);
  }
  return 0;
}
