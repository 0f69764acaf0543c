#pragma once

// Layer 5, internal: what the files of the reshard planner share
// (include/shardplan/reshard.hpp, docs/reshard.md).
//
// Shared by all its files: AxisList, Layout (a spec as axis indices, with
// pending sums), Context (one tensor on one mesh), Move, TensorPlan,
// Overflow.
//
//   reshard/steps.cpp        layouts and specs (layout_of, spec_of), a move
//                            as a priced step (make_step), runs of moves as
//                            steps (steps_of), cost and peak of a plan
//                            (cost_of), the naive plan's moves (naive_moves),
//                            which block each device holds
//                            (blocks_per_device, counts_of)
//   reshard/one_mesh.cpp     plan_one_mesh: XLA's order, else Dijkstra over
//                            per-axis moves; a permute's pieces priced by
//                            transfer_cost; find_common_mesh
//   reshard/two_meshes.cpp   plan_two_meshes: exact-overlap transfers between
//                            meshes, each from the nearest holder, priced by
//                            transfer_cost; same_devices
//   reshard/intermediate.cpp find_intermediate_sharding (the pathways seed)
//   reshard/plan.cpp         plan_reshard: a plan per distinct tensor, the
//                            totals and peaks; to_string(ReshardOp)

#include <shardplan/cost.hpp>
#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/reshard.hpp>
#include <shardplan/spec.hpp>
#include <shardplan/tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace shardplan::reshard_detail {

// Mesh axes by index, major to minor.
using AxisList = std::vector<int>;

// A tensor's layout on one mesh: the axes splitting each dim, and the axes
// over which every device holds a pending sum (one bit per mesh axis;
// k_max_axes is 64).
struct Layout {
  std::vector<AxisList> dims;
  uint64_t partial = 0;
  bool operator==(const Layout&) const = default;
};

// Set when a byte count passed int64; the plan then reports reshard.overflow.
struct Overflow {
  bool hit = false;
  int64_t add(int64_t a, int64_t b) {
    std::optional<int64_t> r = checked_add(a, b);
    hit = hit || !r;
    return r.value_or(std::numeric_limits<int64_t>::max());
  }
  int64_t mul(int64_t a, int64_t b) {
    std::optional<int64_t> r = checked_mul(a, b);
    hit = hit || !r;
    return r.value_or(std::numeric_limits<int64_t>::max());
  }
};

// One tensor on one mesh (and its devices).
struct Context {
  const Mesh* mesh = nullptr;
  const DeviceGrid* grid = nullptr;
  std::span<const AxisLink> links;
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
  Overflow* overflow = nullptr;

  int64_t size(int a) const { return mesh->axes[static_cast<size_t>(a)].size; }
  int64_t shards(const AxisList& axes) const {
    int64_t n = 1;
    for (int a : axes) {
      n *= size(a);  // <= the device count: no overflow
    }
    return n;
  }
  bool divides(const Layout& layout, size_t d) const {
    return shape[d] % shards(layout.dims[d]) == 0;
  }
  int64_t bytes(const Layout& layout) const {
    int64_t elements = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      elements *= shape[d] / shards(layout.dims[d]);  // <= the tensor's count
    }
    return bytes_for(elements, dtype).value_or(0);
  }
  std::vector<const AxisLink*> links_of(const AxisList& axes) const {
    std::vector<const AxisLink*> out;
    if (!links.empty()) {
      for (int a : axes) {
        out.push_back(&links[static_cast<size_t>(a)]);
      }
    }
    return out;
  }
  std::vector<std::string> names(const AxisList& axes) const {
    std::vector<std::string> out;
    for (int a : axes) {
      out.push_back(mesh->axes[static_cast<size_t>(a)].name);
    }
    return out;
  }
};

// One move of the search (or a merged run of them).
struct Move {
  ReshardOp op = ReshardOp::noop;
  AxisList axes;
  int dim = -1;
  int to_dim = -1;
};

struct TensorPlan {
  TensorReshard result;
  // The most one source device holds at once beyond its own source buffer
  // (for the manifest's peak on a device set that loses its tensors).
  int64_t source_extra = 0;
  // No step makes a new buffer (a noop): the target is the source buffer
  // itself, and the manifest's peak counts it once. Likewise for the naive
  // plan.
  bool target_is_source = false;
  bool naive_target_is_source = false;
};

// ---------------------------------------------------------------------------
// reshard/steps.cpp

// The layout of `spec` on `mesh`, with nothing pending.
// REQUIRES: `spec` names axes of `mesh` only.
Layout layout_of(const PartitionSpec& spec, const Mesh& mesh);

// The spec of `layout` on `mesh` (its pending sums are not part of it).
PartitionSpec spec_of(const Layout& layout, const Mesh& mesh);

// What a step does to the bytes a device holds, and its step record.
// `in` is the buffer before the step.
ReshardStep make_step(const Context& c,
                      const Move& m,
                      int64_t in,
                      int64_t* out);

// Runs the moves from `in` bytes, merging consecutive all_gathers (or
// dynamic_slices) of one dim into one step over their axes, as XLA emits one
// collective for them.
std::vector<ReshardStep> steps_of(const Context& c,
                                  const std::vector<Move>& moves,
                                  std::vector<int64_t>& buffers);

// The bytes and seconds of `steps`, summed, and the most a device holds
// over their buffers, source to target (docs/reshard.md, "Peak memory and
// `--donate`"); `disjoint_from` as for peak_of in reshard/steps.cpp.
PlanCost cost_of(const std::vector<ReshardStep>& steps,
                 const std::vector<int64_t>& buffers,
                 bool donate,
                 size_t disjoint_from,
                 Overflow& overflow);

// The naive plan: sum what is pending, gather everything, slice the target.
std::vector<Move> naive_moves(const Context& c,
                              const Layout& from,
                              const Layout& to);

// For every device of a mesh (row-major, as DeviceGrid::ids), the linear
// index of the block it holds under `layout` (dims row-major, each dim's
// index mixed-radix over its axes, first axis major).
std::vector<int64_t> blocks_per_device(const Mesh& mesh,
                                       const std::vector<AxisList>& dims);

// The shards of each dim.
std::vector<int64_t> counts_of(const Context& c,
                               const std::vector<AxisList>& dims);

// ---------------------------------------------------------------------------
// reshard/one_mesh.cpp

// The plan of one tensor when both sides are one mesh (docs/reshard.md, "How
// plans are chosen"): no-op or collective_permute when the tile counts are
// the same, a direct all_gather or dynamic_slice per dim, else the cheapest
// sequence of per-axis moves (the naive plan when the search gives up).
TensorPlan plan_one_mesh(const Context& c,
                         const Layout& from,
                         const Layout& to,
                         const ReshardOptions& options);

// ---------------------------------------------------------------------------
// reshard/two_meshes.cpp

// The plan of one tensor between two meshes (docs/reshard.md, "Transfers
// between meshes"): pending sums reduced on the source, the intermediate
// sharding when it applies, then exact-overlap transfers to the target.
TensorPlan plan_two_meshes(const Context& src_c,
                           Layout from,
                           const Context& dst_c,
                           const Layout& to,
                           const ReshardOptions& options);

}  // namespace shardplan::reshard_detail
