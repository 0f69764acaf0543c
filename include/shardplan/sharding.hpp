#pragma once

// Layer 4: how tensors are laid out on a mesh under a partition spec: per
// dim the shard count and the largest shard, bytes per device, replicas.
// The validator (validate.hpp) checks specs and hands out these layouts;
// the memory estimator and the reports read them.
//
// What it offers (src/sharding.cpp implements all of it):
//   ShardLayout, make_layout   the shards of one (spec, shape, dtype)
//   TensorSharding             a tensor with its spec and its layout
//   shard_tensor               one tensor sharded, without validation
//   ShardingTotals, sharding_totals   totals over a manifest

#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/spec.hpp>
#include <shardplan/tensor.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace shardplan {

// How a tensor of one spec, shape and dtype is laid out on a mesh:
// everything about its sharding that follows from (spec, shape, dtype, mesh),
// so tensors can share it. validate_planned gives the tensors of one planned
// spec, shape and dtype one (a plan's layers and experts share a few);
// validate_specs gives each tensor its own (a specs file names each tensor's
// spec apart, and its problems are reported per tensor).
struct ShardLayout {
  // The spec padded to the tensor's rank; nullopt when the tensor has no
  // usable spec (missing, unreadable, or longer than the rank; it is then
  // laid out as replicated).
  std::optional<PartitionSpec> spec;
  bool valid = false;  // spec present and free of errors
  // Per dim the shard count, then per dim the largest shard (rank values
  // each): see shards() and shard_shape().
  std::vector<int64_t> dims;
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

  // Per dim: the product of its axis sizes.
  ShapeView shards() const { return std::span(dims).first(dims.size() / 2); }
  // Per dim, the largest shard: ceil(dim / shards). Device 0 holds it.
  ShapeView shard_shape() const {
    return std::span(dims).last(dims.size() / 2);
  }
};

// How one tensor is laid out on the mesh: its shared layout, read through
// the accessors below (each names the ShardLayout field it returns).
//
// Which tensor it is follows from its place: validate_specs and
// validate_planned return one per manifest tensor, in manifest order, so
// shardings[t] is tensor t's and no index is stored.
//
// LIFETIME: spec(), shards() and shard_shape() view `layout`, which copies
// share, so a copy is cheap and those views stay valid as long as it (or
// another holder of the layout) lives. Tensors that share a layout have the
// same spec, shape and dtype.
// REQUIRES (of every accessor): layout is set; every TensorSharding that
// validate_specs, validate_planned and shard_tensor return has one.
struct TensorSharding {
  std::shared_ptr<const ShardLayout> layout;

  // The padded spec; null when the tensor has no usable spec.
  const PartitionSpec* spec() const {
    return layout->spec ? &*layout->spec : nullptr;
  }
  bool valid() const { return layout->valid; }
  ShapeView shards() const { return layout->shards(); }
  ShapeView shard_shape() const { return layout->shard_shape(); }
  int64_t elements_per_device() const { return layout->elements_per_device; }
  int64_t bytes_per_device() const { return layout->bytes_per_device; }
  int64_t min_elements_per_device() const {
    return layout->min_elements_per_device;
  }
  int64_t min_bytes_per_device() const { return layout->min_bytes_per_device; }
  int64_t replicas() const { return layout->replicas; }
};
// One per manifest tensor: at 112 bytes, a million-tensor manifest's vector
// (112 MB) was mmapped and faulted in fresh, doubling validate's time.
static_assert(sizeof(TensorSharding) <= 16,
              "TensorSharding must stay one shared pointer");

// The layout of `tensor` under `spec`, as shard_tensor computes it, in a
// layout the caller owns and may still adjust (the validators clear
// `valid` and `spec` for a tensor whose spec they refused). null when a
// count overflows.
// REQUIRES: spec.size() <= tensor.rank(); every axis of `spec` is in
// `mesh`, none used twice.
std::shared_ptr<ShardLayout> make_layout(const Tensor& tensor,
                                         const PartitionSpec& spec,
                                         const Mesh& mesh);

// Totals over validate_specs's or validate_planned's result.
struct ShardingTotals {
  int64_t replicated_bytes = 0;  // tensors every device holds whole
  int64_t invalid = 0;           // tensors without a valid spec
};
ShardingTotals sharding_totals(const Manifest& manifest,
                               const Mesh& mesh,
                               const std::vector<TensorSharding>& shardings);

// The layout of one tensor under `spec` (at most the tensor's rank, every
// axis in `mesh`, none used twice): shards, shard shape and bytes, in a
// layout of its own. Nothing is checked: valid() is true even when a dim
// does not divide (validate_specs and validate_planned check and report).
// The validators' layout arithmetic, for tests and callers that need one
// tensor's shards. nullopt when a count overflows (not possible for a
// manifest's tensor, whose full size fits in int64).
std::optional<TensorSharding> shard_tensor(const Tensor& tensor,
                                           const PartitionSpec& spec,
                                           const Mesh& mesh);

}  // namespace shardplan
