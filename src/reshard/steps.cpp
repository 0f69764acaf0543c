// What both paths of the reshard planner build plans from
// (src/reshard/internal.hpp lists the files): a spec as a layout of mesh axis
// indices and back, a move as a step with its bytes, link and seconds
// (docs/reshard.md, "Steps" and "Cost"), runs of moves merged into steps,
// the cost and peak of a plan ("Peak memory and `--donate`"), the naive
// plan's moves, and which block of a tensor each device holds.

#include "reshard/internal.hpp"

#include <algorithm>
#include <cassert>

namespace shardplan::reshard_detail {

Layout layout_of(const PartitionSpec& spec, const Mesh& mesh) {
  Layout layout;
  layout.dims.resize(spec.size());
  for (size_t d = 0; d < spec.size(); ++d) {
    for (const std::string& name : spec.dims[d].axes) {
      const int64_t a = mesh.index_of(name);
      assert(a >= 0);
      layout.dims[d].push_back(static_cast<int>(a));
    }
  }
  return layout;
}

PartitionSpec spec_of(const Layout& layout, const Mesh& mesh) {
  PartitionSpec spec;
  spec.dims.resize(layout.dims.size());
  for (size_t d = 0; d < layout.dims.size(); ++d) {
    for (int a : layout.dims[d]) {
      spec.dims[d].axes.push_back(mesh.axes[static_cast<size_t>(a)].name);
    }
  }
  return spec;
}

ReshardStep make_step(const Context& c,
                      const Move& m,
                      int64_t in,
                      int64_t* out) {
  ReshardStep step;
  step.op = m.op;
  step.mesh_axes = c.names(m.axes);
  if (m.dim >= 0) {
    step.dim = m.dim;
  }
  if (m.to_dim >= 0) {
    step.to_dim = m.to_dim;
  }
  const int64_t n = c.shards(m.axes);
  const std::vector<const AxisLink*> links = c.links_of(m.axes);
  CollectiveCost cost;
  *out = in;
  switch (m.op) {
    case ReshardOp::all_gather:
      *out = c.overflow->mul(in, n);
      step.bytes_per_device = *out - in;
      cost = collective_cost(
          Collective::all_gather, static_cast<double>(*out), links);
      break;
    case ReshardOp::dynamic_slice:
      *out = in / n;
      break;
    case ReshardOp::all_to_all:
      step.bytes_per_device = in - in / n;
      cost = collective_cost(Collective::all_to_all,
                             static_cast<double>(in) * static_cast<double>(n),
                             links);
      break;
    case ReshardOp::reduce_scatter:
      *out = in / n;
      step.bytes_per_device = in - in / n;
      cost = collective_cost(
          Collective::reduce_scatter, static_cast<double>(in), links);
      break;
    case ReshardOp::all_reduce:
      // A ring all-reduce: a reduce-scatter, then an all-gather.
      step.bytes_per_device = c.overflow->mul(in - in / n, 2);
      cost = collective_cost(
          Collective::all_reduce, static_cast<double>(in), links);
      break;
    case ReshardOp::collective_permute:
    case ReshardOp::send_recv:
    case ReshardOp::noop:
      break;
  }
  step.seconds = cost.seconds;
  step.link = cost.link;
  return step;
}

std::vector<ReshardStep> steps_of(const Context& c,
                                  const std::vector<Move>& moves,
                                  std::vector<int64_t>& buffers) {
  std::vector<Move> merged;
  for (const Move& m : moves) {
    Move* last = merged.empty() ? nullptr : &merged.back();
    if (last != nullptr && last->op == m.op && last->dim == m.dim
        && (m.op == ReshardOp::all_gather
            || m.op == ReshardOp::dynamic_slice)) {
      // Gathers drop minor axes first: a later one is more major.
      if (m.op == ReshardOp::all_gather) {
        last->axes.insert(last->axes.begin(), m.axes.begin(), m.axes.end());
      } else {
        last->axes.insert(last->axes.end(), m.axes.begin(), m.axes.end());
      }
      continue;
    }
    merged.push_back(m);
  }
  std::vector<ReshardStep> steps;
  for (const Move& m : merged) {
    int64_t out = 0;
    steps.push_back(make_step(c, m, buffers.back(), &out));
    buffers.push_back(out);
  }
  return steps;
}

namespace {

// The most a device holds during a plan whose buffers are b[0] (the source)
// .. b[k] (the target). A step holds its input and output; the source stays
// until the end unless donated. `disjoint_from` is the first step whose
// output lives on other devices than its input (a move to another device
// set), or b.size() when there is none.
int64_t peak_of(const std::vector<int64_t>& b,
                bool donate,
                size_t disjoint_from,
                Overflow& overflow) {
  int64_t peak = b[0];
  for (size_t i = 1; i < b.size(); ++i) {
    const bool keep_source = !donate && i >= 2;
    int64_t held_before = keep_source ? overflow.add(b[0], b[i - 1]) : b[i - 1];
    int64_t live = 0;
    if (i == disjoint_from) {
      live = std::max(held_before, b[i]);  // input and output on other devices
    } else {
      live = overflow.add(held_before, b[i]);
    }
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace

PlanCost cost_of(const std::vector<ReshardStep>& steps,
                 const std::vector<int64_t>& buffers,
                 bool donate,
                 size_t disjoint_from,
                 Overflow& overflow) {
  PlanCost cost;
  for (const ReshardStep& s : steps) {
    cost.bytes_per_device =
        overflow.add(cost.bytes_per_device, s.bytes_per_device);
    cost.seconds += s.seconds;
  }
  cost.peak_bytes_per_device =
      peak_of(buffers, donate, disjoint_from, overflow);
  return cost;
}

std::vector<Move> naive_moves(const Context& c,
                              const Layout& from,
                              const Layout& to) {
  std::vector<Move> moves;
  for (int p = 0; p < static_cast<int>(c.mesh->axes.size()); ++p) {
    if ((from.partial >> p & 1) != 0) {
      moves.push_back(Move{ReshardOp::all_reduce, {p}, -1, -1});
    }
  }
  AxisList all;
  for (const AxisList& list : from.dims) {
    all.insert(all.end(), list.begin(), list.end());
  }
  if (!all.empty()) {
    moves.push_back(Move{ReshardOp::all_gather, all, -1, -1});
  }
  for (size_t d = 0; d < to.dims.size(); ++d) {
    if (!to.dims[d].empty()) {
      moves.push_back(
          Move{ReshardOp::dynamic_slice, to.dims[d], static_cast<int>(d), -1});
    }
  }
  return moves;
}

// ---------------------------------------------------------------------------
// Devices and blocks: which block of the tensor each device holds.

std::vector<int64_t> blocks_per_device(const Mesh& mesh,
                                       const std::vector<AxisList>& dims) {
  const size_t rank = mesh.axes.size();
  std::vector<int64_t> coords(rank, 0);
  const int64_t devices = mesh.num_devices();
  std::vector<int64_t> out(static_cast<size_t>(devices));
  for (int64_t p = 0; p < devices; ++p) {
    int64_t block = 0;
    for (const AxisList& axes : dims) {
      int64_t index = 0;
      int64_t count = 1;
      for (int a : axes) {
        const int64_t n = mesh.axes[static_cast<size_t>(a)].size;
        index = index * n + coords[static_cast<size_t>(a)];
        count *= n;
      }
      block = block * count + index;
    }
    out[static_cast<size_t>(p)] = block;
    for (size_t k = rank; k-- > 0;) {
      if (++coords[k] < mesh.axes[k].size) {
        break;
      }
      coords[k] = 0;
    }
  }
  return out;
}

std::vector<int64_t> counts_of(const Context& c,
                               const std::vector<AxisList>& dims) {
  std::vector<int64_t> counts;
  counts.reserve(dims.size());
  for (const AxisList& axes : dims) {
    counts.push_back(c.shards(axes));
  }
  return counts;
}

}  // namespace shardplan::reshard_detail
