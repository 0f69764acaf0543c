// bench_read: how read_manifest compares with a bare simdjson parse.
//
//   bench_read FILE [--reps R] [--mode reader|bare|both]
//
// The file is loaded once into a simdjson::padded_string; neither timing
// includes reading the disk.
//
// Two bare parses (--mode bare runs both):
//
// "dom": simdjson's DOM parser (simdjson::dom::parser::parse) on that padded
// string, with one parser reused across repetitions so its buffers are
// allocated once. The fastest complete parse simdjson offers: it validates
// the whole document and writes every value to its tape with the best kernel
// for this CPU (runtime dispatch, stage 2 included). The strictest baseline.
//
// "dom, one-shot": the same DOM parse as a program that parses one file
// pays it: a copy into a fresh padded_string and a fresh parser (its tape and
// string buffer allocated and first touched).
//
// "on-demand": what read_manifest cannot avoid. Each repetition copies the
// text into a fresh padded_string, allocates a fresh ondemand::parser, and
// walks the document touching every value (every string unescaped, every
// number parsed). read_manifest does exactly that setup (its API takes a
// string_view), so this is the strictest "bare parse" for it: what is left
// of the reader's time past the walk is building the Manifest.
//
// The target of docs/performance.md and issue 2 (reading a manifest within
// 2x a bare simdjson parse of the file) is measured by bench/run.sh on whole
// processes, as the tool runs: read_once (the file read as the CLI reads
// it, the Manifest built) against parse_once (simdjson loads and parses the
// file). The ratios printed here are steady-state diagnostics of where the
// time goes, not that target.
//
// "reader" is shardplan::read_manifest on the same bytes, as the tool calls
// it: copy, parser, On-Demand pass, and the Manifest built (names, shapes,
// dtypes, Manifest::add's duplicate check and checked byte counts).
//
// Prints the median of R repetitions of each (after one warm-up run) and the
// ratios. These are steady-state figures: the heap is warm after the first
// run. A one-shot process also pays page faults for every fresh page (with
// malloc_trim(0) between repetitions both the walk and the reader take about
// twice as long). They depend on glibc's heap between repetitions: with the
// CLI's settings (src/cli/main.cpp; GLIBC_TUNABLES=glibc.malloc.mmap_threshold=
// 33554432:glibc.malloc.trim_threshold=1073741824 gives the same) the reader
// keeps its freed pages and the reader / walk ratio roughly halves.

#include "bench_util.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace {

using bench::median_ms;
using bench::on_demand_walk;

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
      if (!bench::parse_int(argv[++i], reps)) {
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
    std::fprintf(stderr,
                 "bench_read: cannot read \"%s\": %s\n",
                 path.c_str(),
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
  fmt::print("file: {} ({:.1f} MB, {} tensors), simdjson {} kernel\n",
             path,
             mb,
             tensors,
             simdjson::get_active_implementation()->name());

  double dom = 0;
  double dom_fresh = 0;
  double bare = 0;
  double reader = 0;
  if (mode != "reader") {
    simdjson::dom::parser parser;
    bool ok = true;
    dom = median_ms(reps, [&] {
      simdjson::dom::element root;
      ok = ok && parser.parse(text).get(root) == simdjson::SUCCESS;
      return root;
    });
    dom_fresh = median_ms(reps, [&] {
      simdjson::padded_string copy(view.data(), view.size());
      simdjson::dom::parser fresh;
      simdjson::dom::element root;
      ok = ok && fresh.parse(copy).get(root) == simdjson::SUCCESS;
      return 0;
    });
    size_t values = 0;
    bare = median_ms(reps, [&] {
      values = on_demand_walk(view);
      return values;
    });
    if (!ok || values == 0) {
      std::fputs("bench_read: bare simdjson parse failed\n", stderr);
      return 1;
    }
    fmt::print(
        "bare DOM parse (reused parser):   median {:8.2f} ms ({:.0f} MB/s)\n",
        dom,
        mb / dom * 1e3);
    fmt::print(
        "bare DOM parse (copy, fresh parser): median {:8.2f} ms ({:.0f} "
        "MB/s)\n",
        dom_fresh,
        mb / dom_fresh * 1e3);
    fmt::print(
        "bare On-Demand walk (copy, fresh parser, {} values): median "
        "{:8.2f} ms ({:.0f} MB/s)\n",
        values,
        bare,
        mb / bare * 1e3);
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
    fmt::print(
        "read_manifest:                    median {:8.2f} ms ({:.0f} MB/s)\n",
        reader,
        mb / reader * 1e3);
  }
  if (mode == "both") {
    fmt::print(
        "ratio reader / On-Demand walk: {:.2f} (in process; the target's "
        "measure is run.sh's whole-process read_once / parse_once)\n",
        reader / bare);
    fmt::print(
        "ratio reader / DOM parse:      {:.2f} (reused parser), {:.2f} "
        "(copy, fresh parser)\n",
        reader / dom,
        reader / dom_fresh);
  }
  fmt::print("({} repetitions each, median)\n", reps);
  return 0;
}
