// The plan of one tensor on one mesh (docs/reshard.md, "How plans are
// chosen"): direct plans in XLA's order (no-op, collective_permute, a direct
// all_gather or dynamic_slice per dim), else Dijkstra over single per-axis
// moves, else (past k_max_states) the naive plan.

#include "reshard/internal.hpp"

#include <algorithm>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>

namespace shardplan::reshard_detail {

namespace {

// A layout as a key of the search's index of states.
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

}  // namespace

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
  plan.target_is_source = buffers.size() == 1;
  plan.naive_target_is_source = naive_buffers.size() == 1;
  return plan;
}

}  // namespace shardplan::reshard_detail
