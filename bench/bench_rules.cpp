// bench_rules: the rules engine on generated manifests (docs/performance.md).
//
//   bench_rules FILE... [--reps R] [--mesh MESH]
//
// For each manifest (gen_manifest N writes DeepSeek-like ones), with a
// 20-rule fsdp-tp style rules file written for those names (below):
//
//   bare    the bare simdjson On-Demand walk of bench_read.cpp: copy, fresh
//           parser, every value touched
//   read    shardplan::read_manifest
//   rules   shardplan::apply_rules on the manifest already read
//   plan    read + rules: what `plan` does before validating, estimating
//           memory and rendering
//
// Prints the median of R repetitions of each (after a warm-up run), the
// time per tensor, the ratio plan / bare, and how many distinct decisions
// the engine computed (the rest were shared). The rules file and the mesh are
// read once, outside the timings.
//
// bare and read are timed first, in the state bench_read times them in.
// `plan` is their sum, not a loop of read + apply_rules: once apply_rules has
// run, glibc's heap is in another state and later read_manifest repetitions
// take about 8 times the page faults (19 ms becomes 34 ms on 100k tensors
// here), which a real run, reading once and before the rules, never sees.
// For the same reason bench/run.sh runs one process per file.

#include "bench_util.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/rules.hpp>

#include <fmt/format.h>
#include <simdjson.h>

#include <charconv>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace {

// An fsdp-tp plan for gen_manifest's DeepSeek-V3-like names: Megatron column
// and row splits on tp, fsdp on the other dim, routed experts also over ep,
// FP8 block scales and norms replicated, the rest by logical axes or memory.
constexpr std::string_view k_rules = R"({"rules": [
  {"pattern": "embed_tokens", "spec": ["tp", "fsdp"]},
  {"pattern": "^lm_head", "spec": ["tp", "fsdp"]},
  {"pattern": "(norm|layernorm)\\.weight$", "replicate": true},
  {"pattern": "weight_scale_inv$", "auto": {"axes": ["fsdp"], "min_shard_size": 65536}},
  {"pattern": "e_score_correction_bias$", "replicate": true},
  {"pattern": "self_attn\\.q_a_proj\\.weight$", "spec": [null, "fsdp"]},
  {"pattern": "self_attn\\.q_b_proj\\.weight$", "spec": ["tp", "fsdp"]},
  {"pattern": "self_attn\\.kv_a_proj_with_mqa\\.weight$", "spec": [null, "fsdp"]},
  {"pattern": "self_attn\\.kv_b_proj\\.weight$", "spec": ["tp", "fsdp"]},
  {"pattern": "self_attn\\.o_proj\\.weight$", "spec": ["fsdp", "tp"]},
  {"pattern": "self_attn\\.(q|k|v)_proj\\.weight$", "spec": ["tp", "fsdp"]},
  {"pattern": "experts\\.[0-9]+\\.(gate|up)_proj\\.weight$", "spec": ["tp", ["fsdp", "ep"]]},
  {"pattern": "experts\\.[0-9]+\\.down_proj\\.weight$", "spec": [["fsdp", "ep"], "tp"]},
  {"pattern": "shared_experts\\.(gate|up)_proj\\.weight$", "spec": ["tp", "fsdp"]},
  {"pattern": "shared_experts\\.down_proj\\.weight$", "spec": ["fsdp", "tp"]},
  {"pattern": "mlp\\.(gate|up)_proj\\.weight$", "spec": ["tp", "fsdp"]},
  {"pattern": "mlp\\.down_proj\\.weight$", "spec": ["fsdp", "tp"]},
  {"pattern": "mlp\\.gate\\.weight$", "logical_axes": "manifest"},
  {"pattern": "self_attn", "fsdp": {"axis": "fsdp", "min_size_mb": 1}},
  {"memory": {"max_bytes_per_device": 1048576}}],
 "logical_axis_rules": [["vocab", "tp"], ["embed", "fsdp"], ["mlp", "tp"],
                        ["exp", "ep"], ["q_heads", "tp"], ["kv_heads", "tp"],
                        ["heads", "tp"], ["norm", []]],
 "unmatched": "error"})";

int usage() {
  std::fputs("usage: bench_rules FILE... [--reps R] [--mesh MESH]\n", stderr);
  return 2;
}

void print_errors(const shardplan::Diagnostics& diags) {
  for (const shardplan::Diagnostic& d : diags.items()) {
    std::fprintf(stderr, "%s\n", shardplan::render(d).c_str());
  }
}

struct Row {
  std::string path;
  size_t tensors = 0;
  double mb = 0;
  double bare = 0;
  double read = 0;
  double rules = 0;
  double plan = 0;
  size_t decisions = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths;
  int reps = 11;
  std::string mesh_text = "dp:2,fsdp:16,tp:4,ep:8";
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      if (!bench::parse_int(argv[++i], reps)) {
        return usage();
      }
    } else if (arg == "--mesh" && i + 1 < argc) {
      mesh_text = argv[++i];
    } else if (!arg.starts_with("-")) {
      paths.emplace_back(arg);
    } else {
      return usage();
    }
  }
  if (paths.empty()) {
    return usage();
  }

  shardplan::Diagnostics setup;
  std::optional<shardplan::RuleSet> rules =
      shardplan::read_rules(k_rules, "bench_rules.json", setup);
  std::optional<shardplan::Mesh> mesh =
      shardplan::parse_mesh(mesh_text, shardplan::MeshOptions{}, setup);
  if (!rules || !mesh || setup.has_errors()) {
    print_errors(setup);
    return 1;
  }
  fmt::print(
      "rules: {} rules, {} logical axis rules; mesh {} ({} devices); "
      "simdjson {} kernel\n",
      rules->rules.size(),
      rules->logical_axis_rules.size(),
      shardplan::to_string(*mesh),
      mesh->num_devices(),
      simdjson::get_active_implementation()->name());

  // Phase 1, for every file: the bare walk and read_manifest, before any
  // apply_rules runs in this process (see the top of this file).
  std::vector<Row> rows;
  for (const std::string& path : paths) {
    simdjson::padded_string text;
    if (auto error = simdjson::padded_string::load(path).get(text)) {
      std::fprintf(stderr,
                   "bench_rules: cannot read \"%s\": %s\n",
                   path.c_str(),
                   simdjson::error_message(error));
      return 1;
    }
    const std::string_view view(text.data(), text.size());
    Row row;
    row.path = path;
    row.mb = static_cast<double>(text.size()) / 1e6;
    // A checked read, freed before the timings, as bench_read does.
    {
      shardplan::Diagnostics diags;
      std::optional<shardplan::Manifest> manifest =
          shardplan::read_manifest(view, path, diags);
      if (!manifest) {
        print_errors(diags);
        return 1;
      }
      row.tensors = manifest->size();
    }
    size_t values = 0;
    row.bare = bench::median_ms(reps, [&] {
      values = bench::on_demand_walk(view);
      return values;
    });
    if (values == 0) {
      std::fputs("bench_rules: bare simdjson parse failed\n", stderr);
      return 1;
    }
    row.read = bench::median_ms(reps, [&] {
      shardplan::Diagnostics d;
      return shardplan::read_manifest(view, path, d);
    });
    rows.push_back(std::move(row));
  }

  // Phase 2: the rules, on each manifest read once.
  for (Row& row : rows) {
    simdjson::padded_string text;
    if (simdjson::padded_string::load(row.path).get(text)) {
      return 1;
    }
    const std::string_view view(text.data(), text.size());
    {
      // A checked plan: the figures mean nothing on a plan with errors.
      shardplan::Diagnostics diags;
      const std::optional<shardplan::Manifest> manifest =
          shardplan::read_manifest(view, row.path, diags);
      std::optional<shardplan::RulePlan> plan =
          manifest ? shardplan::apply_rules(*manifest, *mesh, *rules, diags)
                   : std::nullopt;
      if (!plan || diags.has_errors()) {
        print_errors(diags);
        return 1;
      }
      row.decisions = plan->decisions.size();
      row.rules = bench::median_ms(reps, [&] {
        shardplan::Diagnostics d;
        return shardplan::apply_rules(*manifest, *mesh, *rules, d);
      });
    }
    row.plan = row.read + row.rules;
    const auto per_tensor_ns = [&](double ms) {
      return ms * 1e6 / static_cast<double>(row.tensors);
    };
    fmt::print("\n{} ({:.1f} MB, {} tensors, {} distinct decisions)\n",
               row.path,
               row.mb,
               row.tensors,
               row.decisions);
    fmt::print("  bare On-Demand walk   {:9.2f} ms  {:7.1f} ns/tensor\n",
               row.bare,
               per_tensor_ns(row.bare));
    fmt::print("  read_manifest         {:9.2f} ms  {:7.1f} ns/tensor\n",
               row.read,
               per_tensor_ns(row.read));
    fmt::print(
        "  apply_rules           {:9.2f} ms  {:7.1f} ns/tensor  = {:.2f} "
        "x bare\n",
        row.rules,
        per_tensor_ns(row.rules),
        row.rules / row.bare);
    fmt::print(
        "  read + apply_rules    {:9.2f} ms  {:7.1f} ns/tensor  = {:.2f} "
        "x bare (an earlier bound, docs/performance.md: <= 3 for all of "
        "plan)\n",
        row.plan,
        per_tensor_ns(row.plan),
        row.plan / row.bare);
  }
  if (rows.size() > 1) {
    fmt::print("\n{:>10} {:>10} {:>10} {:>11} {:>11} {:>13} {:>11}\n",
               "tensors",
               "bare ms",
               "rules ms",
               "rules ns/t",
               "rules/bare",
               "read+rules ms",
               "(r+r)/bare");
    for (const Row& r : rows) {
      const double n = static_cast<double>(r.tensors);
      fmt::print(
          "{:>10} {:>10.2f} {:>10.2f} {:>11.1f} {:>11.2f} {:>13.2f} "
          "{:>11.2f}\n",
          r.tensors,
          r.bare,
          r.rules,
          r.rules * 1e6 / n,
          r.rules / r.bare,
          r.plan,
          r.plan / r.bare);
    }
  }
  fmt::print("({} repetitions each, median)\n", reps);
  return 0;
}
