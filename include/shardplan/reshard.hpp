#pragma once
// Layer 5: reshard plans. Moving each tensor from one (mesh, spec) to
// another, possibly on another device set: the steps and the collective each
// needs, the bytes each device receives, the time and the peak memory.
//
// On one mesh (both sides the same axes and devices) a plan is a list of
// per-axis moves, tried in the order XLA's SPMD partitioner tries them
// (docs/sources.md#xla-reshard): no-op; collective_permute when only the
// devices of the shards differ; a direct all_gather (the target drops minor
// axes) or dynamic_slice (the target adds minor axes); otherwise the
// cheapest sequence of single moves found by Dijkstra over specs (DTensor's
// planner, docs/sources.md#dtensor-redistribute):
//   all_gather      drop the minor-most axis of a dim
//   all_to_all      move the minor-most axis of a dim to the minor end of
//                   another
//   dynamic_slice   add an unused axis at the minor end of a dim (no traffic)
//   reduce_scatter  a pending sum over an axis becomes a split of a dim
//   all_reduce      a pending sum over an axis is summed, replicated
// Consecutive all_gathers (or dynamic_slices) of one dim merge into one step
// over several axes, as XLA emits them.
//
// Another mesh on the same devices that re-labels one common mesh with the
// source (find_common_mesh) is planned as on one mesh, on the common mesh,
// unless the transfers below cost less.
//
// Between meshes (another device set, or another mesh on the same devices),
// pending sums are reduced on the source first, then each target device
// receives the exact pieces of its shard from the nearest source devices that
// hold them (send_recv; collective_permute when the shards are whole and the
// devices are the same set), priced by the links between each piece's own two
// devices (transfer_cost in cost.hpp). When the source has more shards than
// the target and no dim is compatible, the plan first goes through the
// pathways intermediate sharding (find_intermediate_sharding).
//
// Every plan is priced next to the naive one (all_gather to replicated, then
// slice) so the report can say what it saves.
//
// What it offers, by the file that implements it (the files share
// src/reshard/internal.hpp; steps.cpp builds the steps of every plan):
//   reshard/plan.cpp
//     ReshardSide, ReshardOptions, ReshardPlan, plan_reshard
//                              a manifest's plan, its totals and peaks
//     TensorReshard, ReshardStep, Transfer, PlanCost, ReshardOp, to_string
//                              one tensor's plan, step by step
//   reshard/one_mesh.cpp
//     CommonMesh, find_common_mesh   two meshes as re-labels of one
//   reshard/two_meshes.cpp
//     same_devices             whether two sides are one device set
//   reshard/intermediate.cpp
//     IntermediateSharding, find_intermediate_sharding   pathways' step
#include <shardplan/cost.hpp>
#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/spec.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/topology.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardplan {

enum class ReshardOp {
  noop,
  dynamic_slice,
  all_gather,
  all_to_all,
  collective_permute,
  reduce_scatter,
  all_reduce,
  send_recv,
};

// "noop", "dynamic_slice", ... as in docs/output-schema.md, "reshard".
std::string_view to_string(ReshardOp op);

// One piece a device receives: the box (per dim [begin, end) of the whole
// tensor) from another device. Ids are the devices' JAX ids.
struct Transfer {
  int64_t to_device = 0;
  int64_t from_device = 0;
  int64_t bytes = 0;
  std::vector<std::array<int64_t, 2>> box;
};

struct ReshardStep {
  ReshardOp op = ReshardOp::noop;
  std::vector<std::string> mesh_axes;  // major to minor
  std::optional<int64_t> dim;          // the tensor dim split or gathered
  std::optional<int64_t> to_dim;       // all_to_all: where the axis goes
  // The most bytes any one device receives in this step.
  int64_t bytes_per_device = 0;
  LinkClass link = LinkClass::none;
  double seconds = 0;
  // send_recv and collective_permute between meshes: every piece, in target
  // device order; filled only with ReshardOptions::transfers.
  std::vector<Transfer> transfers;
};

// The pathways intermediate sharding (docs/reshard.md, "Intermediate
// sharding"; docs/sources.md#intermediate-sharding): the source mesh with one
// axis split into <axis>_intermediate_split (major) and
// <axis>_intermediate_replica (minor) in its place, the source spec with that
// dim on the split axis, and the replica axes. The devices are the source's,
// reshaped.
struct IntermediateSharding {
  Mesh mesh;
  DeviceGrid grid;
  PartitionSpec spec;
  std::vector<std::string> replicated_axes;
  size_t split_dim = 0;
  size_t source_axis = 0;  // index in the source mesh of the axis split
};

// MaxText's _maybe_find_intermediate_sharding, the variant
// docs/sources.md#intermediate-sharding pins:
// with src[i] / dst[i] the shards of dim i on each side, it applies when
// max(src) % max(dst) == 0, prod(src) > prod(dst), prod(src) % prod(dst) ==
// 0, every gcd(src[i], dst[i]) is 1, and some dim has src[i] == max(src) >
// dst[i] on a single axis (the last such dim is split). The split axis
// keeps max(dst) shards; the replica axis takes max(src) / max(dst).
// REQUIRES: both specs have the tensor's rank and name axes of their mesh.
std::optional<IntermediateSharding> find_intermediate_sharding(
    const Mesh& source_mesh,
    const DeviceGrid& source_grid,
    const PartitionSpec& from,
    const Mesh& target_mesh,
    const PartitionSpec& to);

struct PlanCost {
  int64_t bytes_per_device = 0;  // summed over steps
  double seconds = 0;
  int64_t peak_bytes_per_device = 0;  // the most one device holds at once
};

// The plan of one tensor (shared by every tensor of the same shape, dtype
// and specs).
struct TensorReshard {
  PartitionSpec from;  // full rank
  PartitionSpec to;
  std::vector<ReshardStep>
      steps;  // never empty: a single noop when nothing moves
  std::optional<IntermediateSharding> intermediate;
  // Planned with collectives on ReshardPlan::common (steps name its axes).
  bool on_common_mesh = false;
  int64_t from_bytes_per_device = 0;
  int64_t to_bytes_per_device = 0;
  PlanCost cost;
  PlanCost naive;  // all_gather to replicated, then slice
};

// One side of a reshard: its mesh, device grid and the link of every mesh
// axis (empty without a topology: no times).
struct ReshardSide {
  const Mesh* mesh = nullptr;
  const DeviceGrid* grid = nullptr;
  std::span<const AxisLink> links;
};

struct ReshardOptions {
  // Source buffers are freed as soon as a step no longer needs them (the
  // pathways seed's donate): the peak counts them only until then.
  bool donate = false;
  // Record every piece of send_recv and cross-mesh collective_permute steps.
  bool transfers = false;
  // True when a device id names the same device on both sides (one
  // topology, or a part of the source's); false for disjoint device sets.
  bool same_devices = true;
  // The two sides' topologies (null with --devices: no times): the links
  // point-to-point transfers between the meshes take (transfer_cost).
  const Topology* from_topology = nullptr;
  const Topology* to_topology = nullptr;
  // Mesh axes of the source over which every tensor holds pending sums.
  std::vector<std::string> partial;

  TransferNetwork network() const {
    return TransferNetwork{from_topology, to_topology, same_devices};
  }
};

// Whether a device id names the same device on both sides: one topology,
// no topology on either side (--devices), or TPU slices of one shape (ids
// run slice by slice, so the slices both have keep their ids), or GPU
// clusters of whole nodes of one size.
bool same_devices(const Topology* from, const Topology* to);

// Two meshes on the same devices that are both re-labellings of one mesh
// (docs/reshard.md, "A common mesh"): every axis of each is a run of the
// common mesh's axes, and the device at each coordinate agrees. The common
// mesh is the target's, an axis split into parts (`fsdp_0`, `fsdp_1`, major
// first) where the source cuts it finer. A reshard between such meshes is
// planned with collectives on the common mesh. When the target has fewer
// devices (two slices to one), source axes the tensors are replicated over
// may be fixed at one index so that the rest covers the target's devices.
struct CommonMesh {
  Mesh mesh;
  DeviceGrid grid;  // the target's grid, reshaped
  std::vector<AxisLink> links;
  // Per source (target) axis, in mesh order: the common axes it is made of,
  // major to minor; empty for a fixed source axis.
  std::vector<std::vector<std::string>> from_axes;
  std::vector<std::vector<std::string>> to_axes;
  // Source axes fixed at one index (name, index), in mesh order.
  std::vector<std::pair<std::string, int64_t>> fixed;
};

// The common mesh of `source` and `target` when there is one: the ids must
// name the same devices on both sides, and each side's grid must be linear
// in the device ids (id = first + sum over axes of a mixed-radix digit
// times its stride, as JAX's torus assignment and reshapes give) with
// strides that refine each other. `topology` is the target's, for the links
// of the axes split in parts (null: no links). nullopt otherwise.
std::optional<CommonMesh> find_common_mesh(const ReshardSide& source,
                                           const ReshardSide& target,
                                           const Topology* topology);

struct ReshardPlan {
  bool same_mesh = true;  // planned with collectives on one mesh
  // Set when the two meshes differ but have a common mesh: same_mesh, and
  // the plans of tensors that use no fixed axis run on it.
  std::optional<CommonMesh> common;
  // The distinct plans, and for each manifest tensor the index of its own: a
  // model repeats a few hundred plans over its layers.
  std::vector<TensorReshard> plans;
  std::vector<uint32_t> plan_of;
  size_t size() const { return plan_of.size(); }
  const TensorReshard& tensor(size_t t) const { return plans[plan_of[t]]; }
  // Over the whole manifest, tensors moved one after another: bytes and
  // seconds add up; the peak is the most a device holds at any point, with
  // every source buffer kept (or, with donate, freed once moved).
  PlanCost totals;
  PlanCost naive_totals;
};

// Plans every tensor of `manifest` from from[t] on `source` to to[t] on
// `target`. Plans for tensors with the same shape, dtype and specs are made
// once. Error "reshard.overflow" when a byte total passes int64.
// REQUIRES: from/to have manifest.size() entries, each valid for its mesh
// (rank, axes, divisibility: validate_planned reports nothing); partial
// axes are axes of the source mesh that from[t] does not use.
std::optional<ReshardPlan> plan_reshard(
    const Manifest& manifest,
    std::span<const PartitionSpec* const> from,
    std::span<const PartitionSpec* const> to,
    const ReshardSide& source,
    const ReshardSide& target,
    const ReshardOptions& options,
    Diagnostics& diags);

}  // namespace shardplan
