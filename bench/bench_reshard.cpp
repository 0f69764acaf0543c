// bench_reshard: the reshard planner on generated manifests (issue 7's
// target: a whole-model plan for 100k tensors, fsdp to fsdp-tp on the same
// devices, in under one second; time per tensor flat).
//
//   bench_reshard FILE... [--reps R] [--topology NAME] [--mesh MESH]
//
// For each manifest (gen_manifest N writes DeepSeek-like ones): the specs of
// the `fsdp` preset and of the `fsdp-tp` preset are made once (apply_rules),
// then plan_reshard from the first to the second is timed, with the
// topology's links so every step is priced (default: v5p-128, whose 64
// devices the mesh fsdp:16,tp:4 covers).
// Prints the median of R repetitions, the time per tensor and the distinct
// plans (the rest were shared). Reading and rendering are not included:
// `reshard` end to end adds what `plan` spends on them.

#include "bench_util.hpp"

#include <shardplan/io.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/reshard.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/topology.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

namespace {

int fail(const shardplan::Diagnostics& diags) {
  for (const shardplan::Diagnostic& d : diags.items()) {
    std::fprintf(stderr, "%s\n", shardplan::render(d).c_str());
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shardplan;
  std::vector<std::string> files;
  int reps = 5;
  std::string topology_name = "v5p-128";
  std::string mesh_text = "fsdp:16,tp:4";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      if (!bench::parse_int(argv[++i], reps)) {
        std::fprintf(stderr,
                     "bench_reshard: --reps takes a positive integer\n");
        return 2;
      }
    } else if (arg == "--topology" && i + 1 < argc) {
      topology_name = argv[++i];
    } else if (arg == "--mesh" && i + 1 < argc) {
      mesh_text = argv[++i];
    } else {
      files.push_back(arg);
    }
  }
  if (files.empty()) {
    std::fprintf(
        stderr,
        "usage: bench_reshard FILE... [--reps R] [--topology T] [--mesh M]\n");
    return 2;
  }
  Diagnostics diags;
  std::optional<Topology> topology =
      resolve_topology(topology_name, Location::of("--topology"), diags);
  if (!topology) {
    return fail(diags);
  }
  MeshInput input;
  input.mesh = mesh_text;
  input.topology = &*topology;
  std::optional<PlacedMesh> placed = place_mesh(input, diags);
  if (!placed) {
    return fail(diags);
  }
  const Mesh& mesh = placed->mesh;
  const MeshLayout& layout = placed->layout;
  std::optional<RuleSet> fsdp =
      read_rules_preset("fsdp", Location::of("--rules"), diags);
  std::optional<RuleSet> fsdp_tp =
      read_rules_preset("fsdp-tp", Location::of("--rules"), diags);
  if (!fsdp || !fsdp_tp) {
    return fail(diags);
  }
  const ReshardSide side{&mesh, &layout.grid, layout.links};
  for (const std::string& file : files) {
    std::optional<Manifest> manifest = read_manifest_path(file, diags);
    if (!manifest) {
      return fail(diags);
    }
    Diagnostics rule_diags;
    std::optional<RulePlan> from_plan =
        apply_rules(*manifest, mesh, *fsdp, rule_diags);
    std::optional<RulePlan> to_plan =
        apply_rules(*manifest, mesh, *fsdp_tp, rule_diags);
    if (!from_plan || !to_plan) {
      return fail(rule_diags);
    }
    std::vector<const PartitionSpec*> from(manifest->size()),
        to(manifest->size());
    for (size_t t = 0; t < manifest->size(); ++t) {
      from[t] = &from_plan->spec(t);
      to[t] = &to_plan->spec(t);
    }
    size_t moved = 0;
    const double ms = bench::median_ms(reps, [&] {
      Diagnostics plan_diags;
      std::optional<ReshardPlan> plan = plan_reshard(
          *manifest, from, to, side, side, ReshardOptions{}, plan_diags);
      moved = 0;
      for (size_t t = 0; t < plan->size(); ++t) {
        moved += plan->tensor(t).steps[0].op != ReshardOp::noop;
      }
      return plan;
    });
    const double n = static_cast<double>(manifest->size());
    fmt::print(
        "{}: {} tensors ({} moved), plan_reshard median {:.1f} ms over {} "
        "runs, "
        "{:.2f} us/tensor\n",
        file,
        manifest->size(),
        moved,
        ms,
        reps,
        ms * 1000 / n);
  }
  return 0;
}
