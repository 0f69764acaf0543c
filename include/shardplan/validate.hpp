#pragma once

// Layer 4: the validator. Checks partition specs for a manifest on a mesh the
// way JAX would (shared/reference/sharding-anchors.md b8) and reports every
// problem of a run, each with a stable code, the tensor, the dim and a hint.
//
// Errors (exit 1 from `check`):
//   spec.unknown-axis     an axis the mesh lacks (JAX: "Resource axis: ...")
//   spec.duplicate-axis   a mesh axis used twice in one spec (DuplicateSpecError)
//   spec.rank             a spec longer than the tensor's rank
//   spec.indivisible      a dim not divisible by the product of its axes
//                         (IndivisibleError), with the axes or sizes that divide
//   spec.nested-tuple     (reported by the specs reader; the tensor is skipped)
//   spec.unknown-tensor   a spec for a tensor the manifest lacks
//   spec.missing          a manifest tensor with no spec
//   mesh.device-count     the mesh does not cover the topology's devices
// Warnings:
//   spec.replicated-large a large tensor fully replicated on a mesh of > 1 device
//   spec.trivial-axis     a spec names a mesh axis of size 1

#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>
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

// What a TensorSharding views: the padded spec, and per dim the shard count
// and the largest shard (`dims` holds both, rank values each).
struct ShardLayout {
  PartitionSpec spec;
  std::vector<int64_t> dims;
};

// How one tensor is laid out on the mesh.
//
// LIFETIME: `spec`, `shards` and `shard_shape` view `layout`, which copies
// share, so a copy is cheap and its views stay valid as long as it lives.
// validate_planned gives the tensors of one spec, shape and dtype one layout;
// tensors that share a layout have the same spec, shape and dtype.
struct TensorSharding {
  size_t tensor = 0;                 // index in the manifest
  // The spec padded to the tensor's rank; null when the tensor has no usable
  // spec (missing, unreadable, or longer than the rank).
  const PartitionSpec* spec = nullptr;
  bool valid = false;                // spec present and free of errors
  ShapeView shards;                  // per dim: product of its axis sizes
  // Per dim, the largest shard: ceil(dim / shards). Device 0 holds it.
  ShapeView shard_shape;
  // prod(shard_shape) elements and their bytes: the most any device holds
  // (with an uneven dim, XLA pads every shard to this size).
  int64_t elements_per_device = 0;
  int64_t bytes_per_device = 0;
  // What the last device of the mesh holds (the smallest shard of every
  // dim); equal to the above when every dim divides.
  int64_t min_elements_per_device = 0;
  int64_t min_bytes_per_device = 0;
  // Devices holding the same shard: mesh devices / prod(shards).
  int64_t replicas = 1;
  std::shared_ptr<const ShardLayout> layout;  // what the views above point into
};

struct ValidateOptions {
  // Warn when a fully replicated tensor is at least this large (bytes) on a
  // mesh of more than one device; 0 turns the warning off.
  int64_t replicated_warning_bytes = int64_t{64} << 20;
  // Devices the topology has, to compare with the mesh; nullopt without one.
  std::optional<int64_t> topology_devices;
  std::string topology_name;  // for the message
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
// the tensor in the manifest; size-1 axes are reported at `plan_source`.
// The check of a spec, shape and dtype that reported nothing is done once.
// REQUIRES: specs.size() == manifest.size(); mesh.num_devices() >= 1.
std::vector<TensorSharding> validate_planned(const Manifest& manifest, const Mesh& mesh,
                                             std::span<const PartitionSpec* const> specs,
                                             std::string_view plan_source,
                                             const ValidateOptions& options,
                                             Diagnostics& diags);

// Totals over validate_specs's result.
struct ShardingTotals {
  int64_t replicated_bytes = 0;  // tensors every device holds whole
  int64_t invalid = 0;           // tensors without a valid spec
};
ShardingTotals sharding_totals(const Manifest& manifest, const Mesh& mesh,
                               const std::vector<TensorSharding>& shardings);

// The layout of one tensor under `spec` (at most the tensor's rank, every
// axis in `mesh`, none used twice): shards, shard shape and bytes.
// nullopt when a count overflows (not possible for a manifest's tensor,
// whose full size fits in int64).
std::optional<TensorSharding> shard_tensor(const Tensor& tensor,
                                           const PartitionSpec& spec,
                                           const Mesh& mesh);

}  // namespace shardplan
