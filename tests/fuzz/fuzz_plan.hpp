#pragma once

// What `plan` does with what the readers give it, for the fuzz targets of
// manifests and rules files: the rules' specs for every tensor on a mesh of
// 64 devices (dp:2,fsdp:4,tp:8), checked as JAX would, then each device's
// memory with Adam and ZeRO-1 on 95 GiB. Problems in the plan are findings
// (errors or warnings, exit 1), never a crash; every step keeps its
// promises on sizes.

#include "fuzz_check.hpp"

#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/validate.hpp>

#include <optional>

namespace fuzz {

inline const shardplan::Mesh& plan_mesh() {
  static const shardplan::Mesh mesh = [] {
    shardplan::MeshOptions options;
    options.num_devices = 64;
    shardplan::Diagnostics diags;
    auto parsed = shardplan::parse_mesh("dp:2,fsdp:4,tp:8", options, diags);
    if (!parsed) {
      fail("the plan's mesh does not parse");
    }
    return *parsed;
  }();
  return mesh;
}

inline void plan(const shardplan::Manifest& manifest,
                 const shardplan::RuleSet& rules) {
  const shardplan::Mesh& mesh = plan_mesh();
  shardplan::Diagnostics diags;
  std::optional<shardplan::RulePlan> planned =
      shardplan::apply_rules(manifest, mesh, rules, diags);
  if (!planned) {
    if (!diags.has_errors()) {
      fail("apply_rules gave no plan and no error");
    }
    return;
  }
  if (planned->size() != manifest.size()) {
    fail("a plan of other than one spec per tensor");
  }
  shardplan::ValidateOptions check;
  check.mesh_at = shardplan::Location::of("--mesh");
  check.topology_devices.at = shardplan::Location::of("--devices");
  check.replicated_warning_bytes.at =
      shardplan::Location::of("--warn-replicated");
  const auto specs = planned->specs();
  const auto shardings = shardplan::validate_planned(
      manifest, mesh, specs, shardplan::Location::of("--rules"), check, diags);
  if (shardings.size() != manifest.size()) {
    fail("validate_planned gave other than one sharding per tensor");
  }
  shardplan::MemoryOptions memory;
  memory.recipe = shardplan::Recipe::adam;
  memory.zero.value = 1;
  memory.hbm_bytes.value = int64_t{95} << 30;
  memory.zero.at = shardplan::Location::of("--zero");
  memory.data_axes.at = shardplan::Location::of("--data-axes");
  auto estimate =
      shardplan::estimate_memory(manifest, mesh, shardings, memory, diags);
  if (estimate && estimate->max_device_total < 0) {
    fail("a negative memory estimate");
  }
}

}  // namespace fuzz
