#pragma once

// Layer 4: the validator. Checks partition specs for a manifest on a mesh the
// way JAX would (docs/sources.md#jax-partitionspec) and reports every
// problem of a run, each with a stable code, the tensor, the dim and a hint.
//
// Errors (exit 1 from `check`):
//   spec.unknown-axis     an axis the mesh lacks (JAX: "Resource axis: ...")
//   spec.duplicate-axis   a mesh axis used twice in one spec
//                         (DuplicateSpecError)
//   spec.rank             a spec longer than the tensor's rank
//   spec.indivisible      a dim not divisible by the product of its axes
//                         (IndivisibleError), with the axes or sizes that
//                         divide
//   spec.nested-tuple     (reported by the specs reader; the tensor is skipped)
//   spec.unknown-tensor   a spec for a tensor the manifest lacks
//   spec.missing          a manifest tensor with no spec
//   mesh.device-count     the mesh does not cover the topology's devices
// Warnings:
//   spec.replicated-large a large tensor fully replicated on a mesh of more
//                         than one device
//   spec.trivial-axis     a spec names a mesh axis of size 1
//
// What it offers (src/validate.cpp implements all of it):
//   ValidateOptions            the replicated-tensor threshold, the
//                              topology's device count
//   validate_specs             a specs file's specs, every problem reported
//   validate_planned           the rules' specs, each check done once per
//                              spec, shape and dtype

#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/sharding.hpp>
#include <shardplan/spec.hpp>
#include <shardplan/tensor.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

struct ValidateOptions {
  // Each with where it came from, for diagnostics (the command line passes
  // "--warn-replicated", "--topology v5p-128" and "--mesh").
  //
  // Warn when a fully replicated tensor is at least this large (bytes) on a
  // mesh of more than one device; 0 turns the warning off.
  Sourced<int64_t> replicated_warning_bytes{int64_t{64} << 20, {}};
  // Devices the topology has, to compare with the mesh; nullopt without one.
  Sourced<std::optional<int64_t>> topology_devices;
  Location mesh_at;  // where the mesh came from
};

// The sharding of every manifest tensor (manifest order). Tensors without a
// spec default to replicated for memory purposes, but are reported. Specs of
// `specs` whose `valid` is false were reported by the reader; their tensors
// are treated as replicated and not reported again.
// REQUIRES: mesh.num_devices() >= 1.
std::vector<TensorSharding> validate_specs(const Manifest& manifest,
                                           const Mesh& mesh,
                                           const SpecsFile& specs,
                                           const ValidateOptions& options,
                                           Diagnostics& diags);

// The same checks for specs a planner made, one per manifest tensor (manifest
// order; specs[t] may be shared between tensors). Problems are located at
// the tensor in the manifest; size-1 axes are reported at `plan_at`.
// The check of a spec, shape and dtype that reported nothing is done once.
// REQUIRES: specs.size() == manifest.size(); mesh.num_devices() >= 1.
std::vector<TensorSharding> validate_planned(
    const Manifest& manifest,
    const Mesh& mesh,
    std::span<const PartitionSpec* const> specs,
    const Location& plan_at,
    const ValidateOptions& options,
    Diagnostics& diags);

}  // namespace shardplan
