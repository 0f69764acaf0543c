#include <shardplan/reshard.hpp>

#include <algorithm>
#include <cassert>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <unordered_map>

namespace shardplan {

std::string_view to_string(ReshardOp op) {
  switch (op) {
    case ReshardOp::noop:
      return "noop";
    case ReshardOp::dynamic_slice:
      return "dynamic_slice";
    case ReshardOp::all_gather:
      return "all_gather";
    case ReshardOp::all_to_all:
      return "all_to_all";
    case ReshardOp::collective_permute:
      return "collective_permute";
    case ReshardOp::reduce_scatter:
      return "reduce_scatter";
    case ReshardOp::all_reduce:
      return "all_reduce";
    case ReshardOp::send_recv:
      return "send_recv";
  }
  return "?";
}

namespace {

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

std::string key_of(const Layout& layout) {
  std::string key;
  for (const AxisList& axes : layout.dims) {
    for (int a : axes) {
      key.push_back(static_cast<char>(a));
    }
    key.push_back('\x7f');
  }
  key.append(reinterpret_cast<const char*>(&layout.partial),
             sizeof layout.partial);
  return key;
}

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

// One tensor on one mesh.
struct Context {
  const Mesh* mesh = nullptr;
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

// What a step does to the bytes a device holds, and its step record.
// `in` is the buffer before the step.
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

// Runs the moves from `in` bytes, merging consecutive all_gathers (or
// dynamic_slices) of one dim into one step over their axes, as XLA emits one
// collective for them.
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

// ---------------------------------------------------------------------------
// Devices and blocks: which block of the tensor each device holds.

// For every device of a mesh (row-major, as DeviceGrid::ids), the linear
// index of the block it holds under `layout` (dims row-major, each dim's
// index mixed-radix over its axes, first axis major).
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
  for (const AxisList& axes : dims) {
    counts.push_back(c.shards(axes));
  }
  return counts;
}

// ---------------------------------------------------------------------------
// One mesh: direct plans in XLA's order, else Dijkstra over single moves.

struct PathCost {
  double seconds = 0;
  int64_t bytes = 0;
  int steps = 0;
  bool operator<(const PathCost& o) const {
    if (seconds != o.seconds) {
      return seconds < o.seconds;
    }
    if (bytes != o.bytes) {
      return bytes < o.bytes;
    }
    return steps < o.steps;
  }
};

// The states a search may visit before it gives up (and the naive plan is
// used): far more than any spec of a real mesh needs.
constexpr size_t k_max_states = 20000;

template <typename F>
void for_each_move(const Context& c,
                   const Layout& s,
                   uint64_t relevant,
                   F&& emit) {
  const size_t rank = s.dims.size();
  const int axes = static_cast<int>(c.mesh->axes.size());
  // Pending sums: reduce-scatter onto a dim, or all-reduce.
  for (int p = 0; p < axes; ++p) {
    if ((s.partial >> p & 1) == 0) {
      continue;
    }
    for (size_t e = 0; e < rank; ++e) {
      Layout next = s;
      next.partial &= ~(uint64_t{1} << p);
      next.dims[e].push_back(p);
      if (c.divides(next, e)) {
        emit(Move{ReshardOp::reduce_scatter, {p}, static_cast<int>(e), -1},
             next);
      }
    }
    Layout next = s;
    next.partial &= ~(uint64_t{1} << p);
    emit(Move{ReshardOp::all_reduce, {p}, -1, -1}, next);
  }
  // The minor-most axis of a dim: to another dim, or gathered.
  for (size_t d = 0; d < rank; ++d) {
    if (s.dims[d].empty()) {
      continue;
    }
    const int a = s.dims[d].back();
    for (size_t e = 0; e < rank; ++e) {
      if (e == d) {
        continue;
      }
      Layout next = s;
      next.dims[d].pop_back();
      next.dims[e].push_back(a);
      if (c.divides(next, e)) {
        emit(Move{ReshardOp::all_to_all,
                  {a},
                  static_cast<int>(d),
                  static_cast<int>(e)},
             next);
      }
    }
    Layout next = s;
    next.dims[d].pop_back();
    emit(Move{ReshardOp::all_gather, {a}, static_cast<int>(d), -1}, next);
  }
  // An unused axis splits a dim, locally.
  uint64_t used = s.partial;
  for (const AxisList& list : s.dims) {
    for (int a : list) {
      used |= uint64_t{1} << a;
    }
  }
  for (int a = 0; a < axes; ++a) {
    if ((relevant >> a & 1) == 0 || (used >> a & 1) != 0) {
      continue;
    }
    for (size_t e = 0; e < rank; ++e) {
      Layout next = s;
      next.dims[e].push_back(a);
      if (c.divides(next, e)) {
        emit(Move{ReshardOp::dynamic_slice, {a}, static_cast<int>(e), -1},
             next);
      }
    }
  }
}

// The cheapest sequence of moves from `from` to `to`; nullopt when the search
// passes k_max_states.
std::optional<std::vector<Move>> search_moves(const Context& c,
                                              const Layout& from,
                                              const Layout& to) {
  uint64_t relevant = from.partial;
  for (const Layout* l : {&from, &to}) {
    for (const AxisList& list : l->dims) {
      for (int a : list) {
        relevant |= uint64_t{1} << a;
      }
    }
  }
  struct Node {
    Layout layout;
    PathCost cost;
    int64_t bytes = 0;  // held per device in this state
    int parent = -1;
    Move move;
    bool settled = false;
  };
  std::vector<Node> nodes;
  std::unordered_map<std::string, size_t> index;
  using Entry = std::pair<PathCost, size_t>;
  auto later = [](const Entry& a, const Entry& b) {
    return b.first < a.first || (!(a.first < b.first) && a.second > b.second);
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(later)> queue(later);
  nodes.push_back(Node{from, {}, c.bytes(from), -1, {}, false});
  index.emplace(key_of(from), 0);
  queue.push({PathCost{}, 0});
  while (!queue.empty()) {
    const PathCost cost = queue.top().first;
    const size_t i = queue.top().second;
    queue.pop();
    if (nodes[i].settled) {
      continue;
    }
    nodes[i].settled = true;
    if (nodes[i].layout == to) {
      std::vector<Move> moves;
      for (int k = static_cast<int>(i);
           nodes[static_cast<size_t>(k)].parent >= 0;
           k = nodes[static_cast<size_t>(k)].parent) {
        moves.push_back(nodes[static_cast<size_t>(k)].move);
      }
      std::reverse(moves.begin(), moves.end());
      return moves;
    }
    const Layout current = nodes[i].layout;
    const int64_t in = nodes[i].bytes;
    bool full = false;
    for_each_move(c, current, relevant, [&](const Move& m, const Layout& next) {
      if (full) {
        return;
      }
      int64_t out = 0;
      const ReshardStep step = make_step(c, m, in, &out);
      PathCost next_cost = cost;
      next_cost.seconds += step.seconds;
      next_cost.bytes = c.overflow->add(next_cost.bytes, step.bytes_per_device);
      next_cost.steps += 1;
      auto [it, added] = index.emplace(key_of(next), nodes.size());
      if (added) {
        if (nodes.size() >= k_max_states) {
          full = true;
          return;
        }
        nodes.push_back(
            Node{next, next_cost, out, static_cast<int>(i), m, false});
      } else {
        Node& node = nodes[it->second];
        if (node.settled || !(next_cost < node.cost)) {
          return;
        }
        node.cost = next_cost;
        node.parent = static_cast<int>(i);
        node.move = m;
      }
      queue.push({next_cost, it->second});
    });
    if (full) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

bool is_prefix(const AxisList& a, const AxisList& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// The naive plan: sum what is pending, gather everything, slice the target.
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

struct TensorPlan {
  TensorReshard result;
  // The most one source device holds at once beyond its own source buffer
  // (for the manifest's peak on a device set that loses its tensors).
  int64_t source_extra = 0;
};

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

// The bytes a device receives when the same mesh's blocks move between
// devices (collective_permute): its whole buffer unless it keeps its block.
int64_t permute_bytes(const Context& c,
                      const Layout& from,
                      const Layout& to,
                      int64_t in) {
  const std::vector<int64_t> a = blocks_per_device(*c.mesh, from.dims);
  const std::vector<int64_t> b = blocks_per_device(*c.mesh, to.dims);
  return a == b ? 0 : in;
}

TensorPlan plan_one_mesh(const Context& c,
                         const Layout& from,
                         const Layout& to,
                         const ReshardOptions& options) {
  TensorPlan plan;
  TensorReshard& r = plan.result;
  std::vector<int64_t> buffers{c.bytes(from)};
  std::vector<Move> moves;
  if (from.partial == 0 && counts_of(c, from.dims) == counts_of(c, to.dims)) {
    // No-op, or the same tile counts on other devices.
    const int64_t bytes =
        from == to ? 0 : permute_bytes(c, from, to, buffers[0]);
    ReshardStep& step = r.steps.emplace_back();
    if (bytes > 0) {
      AxisList axes;
      for (size_t d = 0; d < from.dims.size(); ++d) {
        if (from.dims[d] != to.dims[d]) {
          axes.insert(axes.end(), from.dims[d].begin(), from.dims[d].end());
          axes.insert(axes.end(), to.dims[d].begin(), to.dims[d].end());
        }
      }
      std::sort(axes.begin(), axes.end());
      axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
      step.op = ReshardOp::collective_permute;
      step.mesh_axes = c.names(axes);
      step.bytes_per_device = bytes;
      const CollectiveCost cost =
          collective_cost(Collective::collective_permute,
                          static_cast<double>(bytes),
                          c.links_of(axes));
      step.seconds = cost.seconds;
      step.link = cost.link;
      buffers.push_back(buffers[0]);
    }
  } else {
    bool gathers = from.partial == 0;
    bool slices = from.partial == 0;
    for (size_t d = 0; d < from.dims.size(); ++d) {
      gathers = gathers && is_prefix(to.dims[d], from.dims[d]);
      slices = slices && is_prefix(from.dims[d], to.dims[d]);
    }
    if (gathers || slices) {
      // The target drops (or adds) minor axes: one step per dim.
      for (size_t d = 0; d < from.dims.size(); ++d) {
        const AxisList& longer = gathers ? from.dims[d] : to.dims[d];
        const size_t keep = gathers ? to.dims[d].size() : from.dims[d].size();
        if (longer.size() > keep) {
          moves.push_back(
              Move{gathers ? ReshardOp::all_gather : ReshardOp::dynamic_slice,
                   AxisList(longer.begin() + static_cast<std::ptrdiff_t>(keep),
                            longer.end()),
                   static_cast<int>(d),
                   -1});
        }
      }
    } else {
      std::optional<std::vector<Move>> found = search_moves(c, from, to);
      moves = found ? std::move(*found) : naive_moves(c, from, to);
    }
    r.steps = steps_of(c, moves, buffers);
  }
  r.cost =
      cost_of(r.steps, buffers, options.donate, buffers.size(), *c.overflow);
  std::vector<int64_t> naive_buffers{buffers[0]};
  const std::vector<ReshardStep> naive =
      steps_of(c, naive_moves(c, from, to), naive_buffers);
  r.naive = cost_of(
      naive, naive_buffers, options.donate, naive_buffers.size(), *c.overflow);
  plan.source_extra = r.cost.peak_bytes_per_device - buffers[0];
  return plan;
}

// ---------------------------------------------------------------------------
// Between meshes: exact overlap of source and target blocks.

struct Placement {
  const Mesh* mesh = nullptr;
  const std::vector<int64_t>* ids = nullptr;  // row-major device ids
  std::vector<AxisList> dims;
  int replica_axis = -1;  // only devices at 0 on it send
};

struct OverlapResult {
  int64_t max_received = 0;
  int64_t max_sent = 0;
  bool whole_blocks = true;  // every piece a whole source block
  std::vector<Transfer> transfers;
};

OverlapResult overlap(const Context& src_c,
                      const Placement& src,
                      const Context& dst_c,
                      const Placement& dst,
                      bool same_devices,
                      bool record) {
  OverlapResult result;
  const std::vector<int64_t>& shape = src_c.shape;
  const size_t rank = shape.size();
  const std::vector<int64_t> src_counts = counts_of(src_c, src.dims);
  const std::vector<int64_t> dst_counts = counts_of(dst_c, dst.dims);
  const std::vector<int64_t> src_blocks =
      blocks_per_device(*src.mesh, src.dims);
  const std::vector<int64_t> dst_blocks =
      blocks_per_device(*dst.mesh, dst.dims);

  // Holders of every source block, in device order.
  int64_t n_src_blocks = 1;
  for (int64_t n : src_counts) {
    n_src_blocks *= n;
  }
  std::vector<std::vector<size_t>> holders(static_cast<size_t>(n_src_blocks));
  int64_t replica_stride = 1;
  if (src.replica_axis >= 0) {
    for (size_t k = static_cast<size_t>(src.replica_axis) + 1;
         k < src.mesh->axes.size();
         ++k) {
      replica_stride *= src.mesh->axes[k].size;
    }
  }
  const int64_t replica_size =
      src.replica_axis >= 0
          ? src.mesh->axes[static_cast<size_t>(src.replica_axis)].size
          : 1;
  std::unordered_map<int64_t, size_t> src_position;
  for (size_t p = 0; p < src_blocks.size(); ++p) {
    if (same_devices) {
      src_position.emplace((*src.ids)[p], p);
    }
    const int64_t replica =
        (static_cast<int64_t>(p) / replica_stride) % replica_size;
    if (replica == 0) {
      holders[static_cast<size_t>(src_blocks[p])].push_back(p);
    }
  }
  std::vector<int64_t> sent(src_blocks.size(), 0);
  std::vector<int64_t> src_size(rank), dst_size(rank);
  for (size_t d = 0; d < rank; ++d) {
    src_size[d] = shape[d] / src_counts[d];
    dst_size[d] = shape[d] / dst_counts[d];
  }
  std::vector<int64_t> j(rank), lo(rank), first(rank), last(rank), i(rank);
  for (size_t q = 0; q < dst_blocks.size(); ++q) {
    // The target block's index per dim.
    int64_t rest = dst_blocks[q];
    for (size_t d = rank; d-- > 0;) {
      j[d] = rest % dst_counts[d];
      rest /= dst_counts[d];
    }
    for (size_t d = 0; d < rank; ++d) {
      lo[d] = j[d] * dst_size[d];
      first[d] = lo[d] / src_size[d];
      last[d] = (lo[d] + dst_size[d] - 1) / src_size[d];
      i[d] = first[d];
    }
    const int64_t target_id = (*dst.ids)[q];
    const auto here =
        same_devices ? src_position.find(target_id) : src_position.end();
    int64_t received = 0;
    while (true) {
      int64_t block = 0;
      int64_t elements = 1;
      std::vector<std::array<int64_t, 2>> box(rank);
      for (size_t d = 0; d < rank; ++d) {
        block = block * src_counts[d] + i[d];
        const int64_t b = std::max(lo[d], i[d] * src_size[d]);
        const int64_t e =
            std::min(lo[d] + dst_size[d], (i[d] + 1) * src_size[d]);
        box[d] = {b, e};
        elements *= e - b;
        result.whole_blocks = result.whole_blocks && e - b == src_size[d];
      }
      const bool local =
          here != src_position.end() && src_blocks[here->second] == block;
      if (!local && elements > 0) {
        const std::vector<size_t>& h = holders[static_cast<size_t>(block)];
        assert(!h.empty());
        const size_t from = h[q % h.size()];
        const int64_t bytes = bytes_for(elements, src_c.dtype).value_or(0);
        received = src_c.overflow->add(received, bytes);
        sent[from] = src_c.overflow->add(sent[from], bytes);
        if (record) {
          result.transfers.push_back(
              Transfer{target_id, (*src.ids)[from], bytes, box});
        }
      }
      size_t d = rank;
      while (d-- > 0) {
        if (++i[d] <= last[d]) {
          break;
        }
        i[d] = first[d];
      }
      if (d == static_cast<size_t>(-1)) {
        break;
      }
    }
    result.max_received = std::max(result.max_received, received);
  }
  for (int64_t s : sent) {
    result.max_sent = std::max(result.max_sent, s);
  }
  return result;
}

// The AxisLink of the replica part of `link`: `replicas` neighbouring
// devices of the axis, a line unless it is the whole axis (or two devices).
AxisLink replica_link(const AxisLink& link, int64_t replicas) {
  AxisLink out = link;
  out.ring_size = replicas;
  if (link.link == LinkClass::ici && replicas != link.ring_size) {
    const double one_way =
        link.wraparound ? link.bytes_per_s / 2 : link.bytes_per_s;
    out.wraparound = replicas <= 2;
    out.bytes_per_s = out.wraparound ? one_way * 2 : one_way;
  }
  return out;
}

TensorPlan plan_two_meshes(const Context& src_c,
                           const ReshardSide& source,
                           Layout from,
                           const Context& dst_c,
                           const ReshardSide& target,
                           const Layout& to,
                           const ReshardOptions& options) {
  TensorPlan plan;
  TensorReshard& r = plan.result;
  std::vector<int64_t> buffers{src_c.bytes(from)};
  const int64_t source_bytes = buffers[0];
  const int64_t target_bytes = dst_c.bytes(to);
  const std::vector<int64_t> dst_counts = counts_of(dst_c, to.dims);
  const Layout given = from;  // before the reductions below

  // Pending sums first, on the source: onto a dim the target splits if one
  // divides, else any dim that divides, else an all-reduce.
  std::vector<Move> moves;
  for (int p = 0; p < static_cast<int>(source.mesh->axes.size()); ++p) {
    if ((from.partial >> p & 1) == 0) {
      continue;
    }
    from.partial &= ~(uint64_t{1} << p);
    int chosen = -1;
    for (int pass = 0; pass < 2 && chosen < 0; ++pass) {
      for (size_t e = 0; e < from.dims.size() && chosen < 0; ++e) {
        Layout next = from;
        next.dims[e].push_back(p);
        if ((pass == 1 || dst_counts[e] > 1) && src_c.divides(next, e)) {
          chosen = static_cast<int>(e);
        }
      }
    }
    if (chosen >= 0) {
      from.dims[static_cast<size_t>(chosen)].push_back(p);
      moves.push_back(Move{ReshardOp::reduce_scatter, {p}, chosen, -1});
    } else {
      moves.push_back(Move{ReshardOp::all_reduce, {p}, -1, -1});
    }
  }
  r.steps = steps_of(src_c, moves, buffers);

  Placement src{source.mesh, &source.grid->ids, from.dims, -1};
  std::vector<AxisLink> intermediate_links;
  Context int_c = src_c;
  const PartitionSpec from_spec = spec_of(from, *source.mesh);
  r.intermediate = find_intermediate_sharding(*source.mesh,
                                              *source.grid,
                                              from_spec,
                                              *target.mesh,
                                              spec_of(to, *target.mesh));
  if (r.intermediate) {
    const IntermediateSharding& im = *r.intermediate;
    const Mesh& mesh = im.mesh;
    // The links of the intermediate mesh: the source's, the split axis's
    // replica part as its own (smaller) group.
    if (!source.links.empty()) {
      for (size_t k = 0; k < source.mesh->axes.size(); ++k) {
        if (k == im.source_axis) {
          AxisLink split = source.links[k];
          split.axis = mesh.axes[k].name;
          intermediate_links.push_back(split);
          AxisLink replica =
              replica_link(source.links[k], mesh.axes[k + 1].size);
          replica.axis = mesh.axes[k + 1].name;
          intermediate_links.push_back(replica);
        } else {
          intermediate_links.push_back(source.links[k]);
        }
      }
    }
    int_c.mesh = &r.intermediate->mesh;
    int_c.links = intermediate_links;
    Layout in = layout_of(im.spec, mesh);
    const int replica = static_cast<int>(mesh.index_of(im.replicated_axes[0]));
    // Gathering the replica part: every replica group holds the split block.
    int64_t out = 0;
    r.steps.push_back(make_step(int_c,
                                Move{ReshardOp::all_gather,
                                     {replica},
                                     static_cast<int>(im.split_dim),
                                     -1},
                                buffers.back(),
                                &out));
    buffers.push_back(out);
    src = Placement{
        &r.intermediate->mesh, &r.intermediate->grid.ids, in.dims, replica};
  }

  Placement dst{target.mesh, &target.grid->ids, to.dims, -1};
  OverlapResult moved =
      overlap(int_c, src, dst_c, dst, options.same_devices, options.transfers);
  ReshardStep& step = r.steps.emplace_back();
  const size_t disjoint_from =
      options.same_devices ? buffers.size() + 1 : buffers.size();
  buffers.push_back(target_bytes);
  if (moved.max_received > 0) {
    const bool permute = options.same_devices && moved.whole_blocks
                         && counts_of(int_c, src.dims) == dst_counts
                         && src.replica_axis < 0;
    step.op = permute ? ReshardOp::collective_permute : ReshardOp::send_recv;
    step.bytes_per_device = moved.max_received;
    step.link = options.transfer_link.link;
    step.seconds = transfer_seconds(
        static_cast<double>(std::max(moved.max_received, moved.max_sent)),
        options.transfer_link);
    step.transfers = std::move(moved.transfers);
  } else if (target_bytes < buffers[buffers.size() - 2]) {
    // Every device already holds its target block inside its own: a local
    // slice on the target mesh.
    step.op = ReshardOp::dynamic_slice;
    AxisList axes;
    for (const AxisList& list : to.dims) {
      axes.insert(axes.end(), list.begin(), list.end());
    }
    step.mesh_axes = dst_c.names(axes);
  } else if (r.steps.size() > 1) {
    r.steps.pop_back();  // everything already in place after the reductions
  }
  r.cost =
      cost_of(r.steps, buffers, options.donate, disjoint_from, *src_c.overflow);

  // The naive plan: gather on the source, each target device copies its block
  // from one source device.
  std::vector<int64_t> naive_buffers{source_bytes};
  const Layout replicated{std::vector<AxisList>(to.dims.size()), 0};
  std::vector<ReshardStep> naive =
      steps_of(src_c, naive_moves(src_c, given, replicated), naive_buffers);
  Placement full{source.mesh,
                 &source.grid->ids,
                 std::vector<AxisList>(from.dims.size()),
                 -1};
  OverlapResult naive_moved =
      overlap(src_c, full, dst_c, dst, options.same_devices, false);
  ReshardStep& copy = naive.emplace_back();
  copy.op = ReshardOp::send_recv;
  copy.bytes_per_device = naive_moved.max_received;
  copy.seconds =
      transfer_seconds(static_cast<double>(std::max(naive_moved.max_received,
                                                    naive_moved.max_sent)),
                       options.transfer_link);
  const size_t naive_disjoint =
      options.same_devices ? naive_buffers.size() + 1 : naive_buffers.size();
  naive_buffers.push_back(target_bytes);
  r.naive = cost_of(
      naive, naive_buffers, options.donate, naive_disjoint, *src_c.overflow);
  int64_t source_peak = buffers[0];
  for (size_t k = 1; k + 1 < buffers.size(); ++k) {
    source_peak =
        std::max(source_peak, src_c.overflow->add(buffers[k - 1], buffers[k]));
  }
  plan.source_extra = options.same_devices
                          ? r.cost.peak_bytes_per_device - source_bytes
                          : source_peak - source_bytes;
  return plan;
}

bool same_mesh(const ReshardSide& a,
               const ReshardSide& b,
               const ReshardOptions& options) {
  if (!options.same_devices || a.mesh->axes.size() != b.mesh->axes.size()
      || a.grid->ids != b.grid->ids) {
    return false;
  }
  for (size_t k = 0; k < a.mesh->axes.size(); ++k) {
    if (a.mesh->axes[k].name != b.mesh->axes[k].name
        || a.mesh->axes[k].size != b.mesh->axes[k].size) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<IntermediateSharding> find_intermediate_sharding(
    const Mesh& source_mesh,
    const DeviceGrid& source_grid,
    const PartitionSpec& from,
    const Mesh& target_mesh,
    const PartitionSpec& to) {
  if (from.size() != to.size()) {
    return std::nullopt;
  }
  auto shards = [](const Mesh& mesh, const DimSharding& dim) {
    int64_t n = 1;
    for (const std::string& a : dim.axes) {
      n *= mesh.find(a)->size;
    }
    return n;
  };
  std::vector<int64_t> src, dst;
  for (size_t d = 0; d < from.size(); ++d) {
    src.push_back(shards(source_mesh, from.dims[d]));
    dst.push_back(shards(target_mesh, to.dims[d]));
  }
  const int64_t src_largest =
      src.empty() ? 1 : *std::max_element(src.begin(), src.end());
  const int64_t dst_largest =
      dst.empty() ? 1 : *std::max_element(dst.begin(), dst.end());
  const int64_t src_total =
      std::accumulate(src.begin(), src.end(), int64_t{1}, std::multiplies<>());
  const int64_t dst_total =
      std::accumulate(dst.begin(), dst.end(), int64_t{1}, std::multiplies<>());
  if (src_largest % dst_largest != 0 || src_total <= dst_total
      || src_total % dst_total != 0) {
    return std::nullopt;
  }
  const int64_t replicas = src_largest / dst_largest;
  std::optional<size_t> split_dim;
  for (size_t d = 0; d < src.size(); ++d) {
    if (std::gcd(src[d], dst[d]) != 1) {
      // A dim is already compatible: no intermediate needed.
      return std::nullopt;
    }
    // MaxText keeps the last such dim; a dim on several axes is not split
    // (the pathways TODO b/473889684).
    if (src[d] > dst[d] && src[d] == src_largest
        && from.dims[d].axes.size() == 1) {
      split_dim = d;
    }
  }
  if (!split_dim) {
    return std::nullopt;
  }
  const std::string& axis = from.dims[*split_dim].axes[0];
  const size_t source_axis = static_cast<size_t>(source_mesh.index_of(axis));
  IntermediateSharding out;
  out.split_dim = *split_dim;
  out.source_axis = source_axis;
  for (size_t k = 0; k < source_mesh.axes.size(); ++k) {
    const MeshAxis& a = source_mesh.axes[k];
    if (k != source_axis) {
      out.mesh.axes.push_back(a);
      continue;
    }
    MeshAxis split = a;
    split.name = a.name + "_intermediate_split";
    split.size = a.size / replicas;
    MeshAxis replica = a;
    replica.name = a.name + "_intermediate_replica";
    replica.size = replicas;
    // The ICI/DCN split of the parts: the DCN factor stays major.
    split.dcn = std::gcd(a.dcn, split.size);
    split.ici = split.size / split.dcn;
    replica.dcn = a.dcn / split.dcn;
    replica.ici = replica.size / replica.dcn;
    out.mesh.axes.push_back(split);
    out.mesh.axes.push_back(replica);
  }
  out.grid.shape = out.mesh.shape();
  out.grid.ids = source_grid.ids;  // a plain reshape: the split axis major
  out.spec = from;
  out.spec.dims[*split_dim].axes = {axis + "_intermediate_split"};
  out.replicated_axes = {axis + "_intermediate_replica"};
  return out;
}

std::optional<ReshardPlan> plan_reshard(
    const Manifest& manifest,
    std::span<const PartitionSpec* const> from,
    std::span<const PartitionSpec* const> to,
    const ReshardSide& source,
    const ReshardSide& target,
    const ReshardOptions& options,
    Diagnostics& diags) {
  assert(from.size() == manifest.size() && to.size() == manifest.size());
  ReshardPlan plan;
  plan.same_mesh = same_mesh(source, target, options);
  uint64_t partial = 0;
  for (const std::string& p : options.partial) {
    const int64_t a = source.mesh->index_of(p);
    assert(a >= 0);
    partial |= uint64_t{1} << a;
  }
  Overflow overflow;
  // Plans by (shape, dtype, from, to); a manifest repeats a few hundred.
  std::map<std::tuple<std::vector<int64_t>,
                      DType,
                      const PartitionSpec*,
                      const PartitionSpec*>,
           size_t>
      memo;
  // Equal specs given as different objects (a specs file has one per
  // tensor) share one memo entry: the first of them stands for all.
  using SpecPair = std::pair<const PartitionSpec*, const PartitionSpec*>;
  auto spec_less = [](const PartitionSpec* a, const PartitionSpec* b) {
    return std::lexicographical_compare(
        a->dims.begin(),
        a->dims.end(),
        b->dims.begin(),
        b->dims.end(),
        [](const DimSharding& x, const DimSharding& y) {
          return x.axes < y.axes;
        });
  };
  auto pair_less = [&](const SpecPair& a, const SpecPair& b) {
    if (spec_less(a.first, b.first) || spec_less(b.first, a.first)) {
      return spec_less(a.first, b.first);
    }
    return spec_less(a.second, b.second);
  };
  std::map<SpecPair, SpecPair, decltype(pair_less)> canonical(pair_less);
  std::vector<int64_t> source_extra;  // per distinct plan
  plan.plan_of.reserve(manifest.size());
  for (size_t t = 0; t < manifest.size(); ++t) {
    const Tensor& tensor = manifest.tensors()[t];
    const SpecPair specs{from[t], to[t]};
    const auto it = canonical.try_emplace(specs, specs).first;
    const auto key = std::tuple{
        std::vector<int64_t>(tensor.shape.begin(), tensor.shape.end()),
        tensor.dtype,
        it->second.first,
        it->second.second};
    auto [m, fresh] = memo.try_emplace(key, plan.plans.size());
    plan.plan_of.push_back(static_cast<uint32_t>(m->second));
    if (!fresh) {
      continue;
    }
    Context src_c{
        source.mesh, source.links, std::get<0>(key), tensor.dtype, &overflow};
    Context dst_c{
        target.mesh, target.links, std::get<0>(key), tensor.dtype, &overflow};
    const PartitionSpec from_spec =
        from[t]->padded(static_cast<size_t>(tensor.rank()));
    const PartitionSpec to_spec =
        to[t]->padded(static_cast<size_t>(tensor.rank()));
    Layout from_layout = layout_of(from_spec, *source.mesh);
    from_layout.partial = partial;
    const Layout to_layout = layout_of(to_spec, *target.mesh);
    TensorPlan one;
    if (tensor.num_elements == 0) {
      one.result.steps.emplace_back();
    } else if (plan.same_mesh) {
      one = plan_one_mesh(src_c, from_layout, to_layout, options);
    } else {
      one = plan_two_meshes(
          src_c, source, from_layout, dst_c, target, to_layout, options);
    }
    one.result.from = from_spec;
    one.result.to = to_spec;
    one.result.from_bytes_per_device = src_c.bytes(from_layout);
    one.result.to_bytes_per_device = dst_c.bytes(to_layout);
    if (one.result.steps.empty()) {
      one.result.steps.emplace_back();
    }
    plan.plans.push_back(std::move(one.result));
    source_extra.push_back(one.source_extra);
  }

  // Totals: tensors one after another.
  int64_t all_sources = 0;
  for (size_t t = 0; t < plan.size(); ++t) {
    all_sources =
        overflow.add(all_sources, plan.tensor(t).from_bytes_per_device);
  }
  for (PlanCost ReshardPlan::*total :
       {&ReshardPlan::totals, &ReshardPlan::naive_totals}) {
    const bool naive = total == &ReshardPlan::naive_totals;
    PlanCost& sum = plan.*total;
    int64_t done = 0;               // targets already made
    int64_t waiting = all_sources;  // sources not yet moved (with donate)
    int64_t peak = 0;
    for (size_t k = 0; k < plan.size(); ++k) {
      const TensorReshard& r = plan.tensor(k);
      const PlanCost& c = naive ? r.naive : r.cost;
      sum.bytes_per_device =
          overflow.add(sum.bytes_per_device, c.bytes_per_device);
      sum.seconds += c.seconds;
      const int64_t others = options.donate
                                 ? waiting - r.from_bytes_per_device
                                 : all_sources - r.from_bytes_per_device;
      int64_t during = 0;
      if (options.same_devices) {
        during =
            overflow.add(overflow.add(others, done), c.peak_bytes_per_device);
      } else {
        // Two device sets: the sources' devices and the targets'.
        const int64_t extra =
            naive ? c.peak_bytes_per_device - r.from_bytes_per_device
                  : source_extra[plan.plan_of[k]];
        const int64_t source_side =
            overflow.add(r.from_bytes_per_device, std::max<int64_t>(extra, 0));
        during = std::max(overflow.add(others, source_side),
                          overflow.add(done, r.to_bytes_per_device));
      }
      peak = std::max(peak, during);
      done = overflow.add(done, r.to_bytes_per_device);
      waiting -= r.from_bytes_per_device;
    }
    sum.peak_bytes_per_device = peak;
  }
  if (overflow.hit) {
    diags.error("reshard.overflow",
                "a byte count of the reshard plan does not fit in 64 bits",
                Location::of(manifest.source));
    return std::nullopt;
  }
  return plan;
}

AxisLink transfer_link(const Topology& from, const Topology& to) {
  AxisLink link;
  link.axis = "transfer";
  link.ring_size = 2;
  link.wraparound = false;
  const TopologyFigures& f = from.figures;
  if (from.name == to.name) {
    if (from.kind == TopologyKind::tpu) {
      link.link = LinkClass::ici;
      link.bytes_per_s = f.ici_bytes_per_s_per_link.value
                         * f.ici_links_per_chip.value
                         / static_cast<double>(from.tpu.cores_per_chip);
      link.latency_s = f.ici_latency_s.value;
    } else if (from.gpus <= from.nvlink_domain) {
      link.link = LinkClass::nvlink;
      link.bytes_per_s = f.nvlink_bytes_per_s_per_gpu.value;
      link.latency_s = f.nvlink_latency_s.value;
    } else {
      link.link = LinkClass::network;
      link.bytes_per_s = f.network_bytes_per_s_per_gpu.value;
      link.latency_s = f.network_latency_s.value;
    }
    return link;
  }
  // Another device set: the data-centre network, at the slower side's rate.
  auto per_device = [](const Topology& t) {
    if (t.kind == TopologyKind::tpu) {
      return std::pair{t.figures.dcn_bytes_per_s_per_chip.value
                           / static_cast<double>(t.tpu.cores_per_chip),
                       t.figures.dcn_latency_s.value};
    }
    return std::pair{t.figures.network_bytes_per_s_per_gpu.value,
                     t.figures.network_latency_s.value};
  };
  const auto [from_rate, from_latency] = per_device(from);
  const auto [to_rate, to_latency] = per_device(to);
  link.link =
      from.kind == TopologyKind::tpu ? LinkClass::dcn : LinkClass::network;
  link.bytes_per_s = std::min(from_rate, to_rate);
  link.latency_s = std::max(from_latency, to_latency);
  return link;
}

bool same_devices(const Topology* from, const Topology* to) {
  if (from == nullptr || to == nullptr) {
    return true;  // both --devices (or neither side has a topology)
  }
  if (from->name == to->name) {
    return true;
  }
  if (from->kind != to->kind || from->chip != to->chip) {
    return false;
  }
  if (from->kind == TopologyKind::tpu) {
    // Slices of one shape: ids run slice by slice, so the slices both have
    // keep their ids.
    return from->tpu.chips == to->tpu.chips
           && from->tpu.cores_per_chip == to->tpu.cores_per_chip;
  }
  return from->gpus_per_host
         == to->gpus_per_host;  // whole nodes, ids node by node
}

}  // namespace shardplan
