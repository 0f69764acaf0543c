// The plan of one tensor on one mesh (docs/reshard.md, "How plans are
// chosen"): direct plans in XLA's order (no-op, collective_permute, a direct
// all_gather or dynamic_slice per dim), else Dijkstra over single per-axis
// moves, else (past k_max_states) the naive plan. And the common mesh two
// meshes re-label, on which such plans run ("A common mesh").

#include "reshard/internal.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
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

// The pieces of a collective_permute: each device that lacks its target
// block takes it whole from the nearest device holding it (the q-th of
// equally near ones).
std::vector<Flow> permute_flows(const Context& c,
                                const Layout& from,
                                const Layout& to,
                                int64_t in,
                                const TransferNetwork& network) {
  const std::vector<int64_t> a = blocks_per_device(*c.mesh, from.dims);
  const std::vector<int64_t> b = blocks_per_device(*c.mesh, to.dims);
  const std::vector<int64_t>& ids = c.grid->ids;
  std::unordered_map<int64_t, std::vector<size_t>> holders;
  for (size_t p = 0; p < a.size(); ++p) {
    holders[a[p]].push_back(p);
  }
  std::vector<Flow> flows;
  for (size_t q = 0; q < b.size(); ++q) {
    if (a[q] == b[q]) {
      continue;
    }
    int64_t best = std::numeric_limits<int64_t>::max();
    std::vector<size_t> nearest;
    for (size_t p : holders[b[q]]) {
      const int64_t rank = transfer_route(network, ids[p], ids[q]).rank();
      if (rank < best) {
        best = rank;
        nearest.clear();
      }
      if (rank == best) {
        nearest.push_back(p);
      }
    }
    flows.push_back(Flow{ids[nearest[q % nearest.size()]], ids[q], in});
  }
  return flows;
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
      // Point-to-point pieces: priced by the links between their own
      // devices, as transfers between meshes are.
      const TransferNetwork network = options.network();
      if (network.from != nullptr && network.to != nullptr) {
        const TransferCost cost = transfer_cost(
            permute_flows(c, from, to, buffers[0], network), network);
        step.seconds = cost.seconds;
        step.link = cost.link;
      } else {
        const CollectiveCost cost =
            collective_cost(Collective::collective_permute,
                            static_cast<double>(bytes),
                            c.links_of(axes));
        step.seconds = cost.seconds;
        step.link = cost.link;
      }
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

// ---------------------------------------------------------------------------
// The common mesh of two meshes (reshard.hpp, find_common_mesh).

namespace shardplan {

namespace {

// A part of the device ids: digit value (id - first) / stride % size.
struct Digit {
  int64_t stride = 1;
  int64_t size = 1;
};

// A grid whose ids are linear in its coordinates: per axis its digits,
// major to minor.
struct LinearGrid {
  int64_t first = 0;
  std::vector<std::vector<Digit>> axes;
};

// The digits of each axis, from the ids along the axis from the first
// device; nullopt when some id does not follow them.
std::optional<LinearGrid> linear_grid(const std::vector<int64_t>& shape,
                                      const std::vector<int64_t>& ids) {
  LinearGrid g;
  g.first = ids.empty() ? 0 : ids[0];
  const size_t rank = shape.size();
  std::vector<int64_t> stride(rank, 1);
  for (size_t k = rank; k-- > 1;) {
    stride[k - 1] = stride[k] * shape[k];
  }
  for (size_t k = 0; k < rank; ++k) {
    const int64_t n = shape[k];
    auto delta = [&](int64_t c) {
      return ids[static_cast<size_t>(c * stride[k])] - g.first;
    };
    std::vector<Digit> minor_first;
    for (int64_t place = 1; place < n;) {
      const int64_t unit = delta(place);
      if (unit <= 0) {
        return std::nullopt;
      }
      int64_t t = 2;
      while (place * t < n && delta(place * t) == t * unit) {
        ++t;
      }
      if (n % (place * t) != 0) {
        return std::nullopt;
      }
      minor_first.push_back(Digit{unit, t});
      place *= t;
    }
    g.axes.emplace_back(minor_first.rbegin(), minor_first.rend());
  }
  // Every device where the digits put it.
  std::vector<int64_t> coords(rank, 0);
  for (size_t p = 0; p < ids.size(); ++p) {
    int64_t id = g.first;
    for (size_t k = 0; k < rank; ++k) {
      int64_t c = coords[k];
      for (size_t d = g.axes[k].size(); d-- > 0;) {
        id += c % g.axes[k][d].size * g.axes[k][d].stride;
        c /= g.axes[k][d].size;
      }
    }
    if (id != ids[p]) {
      return std::nullopt;
    }
    for (size_t k = rank; k-- > 0;) {
      if (++coords[k] < shape[k]) {
        break;
      }
      coords[k] = 0;
    }
  }
  return g;
}

// The strides at which the digits of `g` start, when they tile the ids
// 0..n-1 (each starting where the previous one ends).
std::optional<std::vector<int64_t>> cuts_of(const LinearGrid& g, int64_t n) {
  std::vector<Digit> all;
  for (const std::vector<Digit>& axis : g.axes) {
    all.insert(all.end(), axis.begin(), axis.end());
  }
  std::sort(all.begin(), all.end(), [](const Digit& a, const Digit& b) {
    return a.stride < b.stride;
  });
  std::vector<int64_t> cuts;
  int64_t next = 1;
  for (const Digit& d : all) {
    if (d.stride != next) {
      return std::nullopt;
    }
    cuts.push_back(d.stride);
    next = d.stride * d.size;
  }
  if (next != n) {
    return std::nullopt;
  }
  return cuts;
}

// The common digits inside `d`, most significant first.
std::vector<Digit> split(const Digit& d, const std::vector<int64_t>& cuts) {
  std::vector<Digit> out;
  for (size_t i = cuts.size() - 1; i-- > 0;) {
    if (cuts[i] >= d.stride && cuts[i + 1] <= d.stride * d.size) {
      out.push_back(Digit{cuts[i], cuts[i + 1] / cuts[i]});
    }
  }
  return out;
}

}  // namespace

std::optional<CommonMesh> find_common_mesh(const ReshardSide& source,
                                           const ReshardSide& target,
                                           const Topology* topology) {
  const Mesh& from = *source.mesh;
  const Mesh& to = *target.mesh;
  const std::vector<int64_t>& to_ids = target.grid->ids;
  const int64_t n = static_cast<int64_t>(to_ids.size());
  if (from.axes.size() > k_max_axes || to.axes.size() > k_max_axes
      || static_cast<int64_t>(source.grid->ids.size()) < n) {
    return std::nullopt;
  }
  // Source axes on which every target device sits at one index are fixed
  // there; the rest must cover the target's devices.
  std::unordered_map<int64_t, size_t> position;
  for (size_t p = 0; p < source.grid->ids.size(); ++p) {
    position.emplace(source.grid->ids[p], p);
  }
  const std::vector<int64_t> shape = from.shape();
  std::vector<int64_t> lo(shape.size(), std::numeric_limits<int64_t>::max());
  std::vector<int64_t> hi(shape.size(), -1);
  for (int64_t id : to_ids) {
    const auto it = position.find(id);
    if (it == position.end()) {
      return std::nullopt;
    }
    int64_t rest = static_cast<int64_t>(it->second);
    for (size_t k = shape.size(); k-- > 0;) {
      const int64_t c = rest % shape[k];
      rest /= shape[k];
      lo[k] = std::min(lo[k], c);
      hi[k] = std::max(hi[k], c);
    }
  }
  CommonMesh common;
  std::vector<int64_t> sub_shape;
  std::vector<size_t> kept;
  int64_t covered = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (lo[k] == hi[k] && shape[k] > 1) {
      common.fixed.emplace_back(from.axes[k].name, lo[k]);
    } else {
      kept.push_back(k);
      sub_shape.push_back(shape[k]);
      covered *= shape[k];
    }
  }
  if (covered != n) {
    return std::nullopt;
  }
  // The source's devices with the fixed axes at their index.
  std::vector<int64_t> sub_ids;
  sub_ids.reserve(static_cast<size_t>(n));
  std::vector<int64_t> coords(shape.size(), 0);
  for (size_t k = 0; k < shape.size(); ++k) {
    coords[k] = lo[k] == hi[k] ? lo[k] : 0;
  }
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i;
    for (size_t j = kept.size(); j-- > 0;) {
      coords[kept[j]] = rest % sub_shape[j];
      rest /= sub_shape[j];
    }
    int64_t p = 0;
    for (size_t k = 0; k < shape.size(); ++k) {
      p = p * shape[k] + coords[k];
    }
    sub_ids.push_back(source.grid->ids[static_cast<size_t>(p)]);
  }
  const std::optional<LinearGrid> a = linear_grid(sub_shape, sub_ids);
  const std::optional<LinearGrid> b = linear_grid(to.shape(), to_ids);
  if (!a || !b || a->first != b->first) {
    return std::nullopt;
  }
  // Both sides' digit boundaries (and a slice's, so that no common axis
  // spans ICI and DCN) must divide one another.
  std::optional<std::vector<int64_t>> cuts_a = cuts_of(*a, n);
  std::optional<std::vector<int64_t>> cuts_b = cuts_of(*b, n);
  if (!cuts_a || !cuts_b) {
    return std::nullopt;
  }
  std::vector<int64_t> cuts = *cuts_a;
  cuts.insert(cuts.end(), cuts_b->begin(), cuts_b->end());
  cuts.push_back(n);
  int64_t per_slice = n;
  if (topology != nullptr && topology->num_slices() > 1) {
    per_slice = topology->devices() / topology->num_slices();
    if (per_slice < n) {
      cuts.push_back(per_slice);
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  for (size_t i = 1; i < cuts.size(); ++i) {
    if (cuts[i] % cuts[i - 1] != 0) {
      return std::nullopt;
    }
  }
  // Each side's axes as runs of the common digits, most significant first.
  auto parts_of = [&](const std::vector<Digit>& digits) {
    std::vector<Digit> out;
    for (const Digit& d : digits) {
      for (const Digit& part : split(d, cuts)) {
        out.push_back(part);
      }
    }
    return out;
  };
  std::vector<std::vector<Digit>> source_parts;
  std::unordered_map<int64_t, int64_t> next_in_source;  // by stride
  for (const std::vector<Digit>& digits : a->axes) {
    source_parts.push_back(parts_of(digits));
    const std::vector<Digit>& list = source_parts.back();
    for (size_t i = 0; i + 1 < list.size(); ++i) {
      next_in_source[list[i].stride] = list[i + 1].stride;
    }
  }
  // The common mesh: the target's axes, each cut where the source does not
  // follow it (parts the source also holds in a row stay one axis).
  std::vector<std::string> names;
  for (const MeshAxis& axis : to.axes) {
    names.push_back(axis.name);
  }
  std::unordered_map<int64_t, std::string> name_of;  // by first part's stride
  bool split_any = false;
  for (size_t k = 0; k < to.axes.size(); ++k) {
    const std::vector<Digit> parts = parts_of(b->axes[k]);
    std::vector<std::vector<Digit>> groups;
    for (size_t i = 0; i < parts.size(); ++i) {
      const auto it = next_in_source.find(i > 0 ? parts[i - 1].stride : -1);
      if (i == 0 || it == next_in_source.end()
          || it->second != parts[i].stride) {
        groups.emplace_back();
      }
      groups.back().push_back(parts[i]);
    }
    std::vector<std::string>& list = common.to_axes.emplace_back();
    if (groups.size() <= 1) {
      MeshAxis axis = to.axes[k];
      common.mesh.axes.push_back(axis);
      list.push_back(axis.name);
      if (!groups.empty()) {
        name_of[groups[0][0].stride] = axis.name;
      }
      continue;
    }
    split_any = true;
    for (size_t i = 0; i < groups.size(); ++i) {
      std::string name = fmt::format("{}_{}", to.axes[k].name, i);
      while (std::find(names.begin(), names.end(), name) != names.end()) {
        name += '_';
      }
      names.push_back(name);
      MeshAxis axis = to.axes[k];
      axis.name = name;
      axis.size = 1;
      axis.dcn = 1;
      for (const Digit& part : groups[i]) {
        axis.size *= part.size;
        axis.dcn *= part.stride >= per_slice ? part.size : 1;
      }
      axis.ici = axis.size / axis.dcn;
      common.mesh.axes.push_back(axis);
      list.push_back(name);
      name_of[groups[i][0].stride] = name;
    }
  }
  size_t next_kept = 0;
  for (size_t k = 0; k < from.axes.size(); ++k) {
    std::vector<std::string>& list = common.from_axes.emplace_back();
    if (next_kept >= kept.size() || kept[next_kept] != k) {
      continue;  // fixed
    }
    // A group's first part names it; the rest follow it in the source.
    for (const Digit& part : source_parts[next_kept]) {
      const auto it = name_of.find(part.stride);
      if (it != name_of.end()) {
        list.push_back(it->second);
      }
    }
    ++next_kept;
  }
  if (common.mesh.axes.size() > k_max_axes) {
    return std::nullopt;  // pending sums are one bit per axis
  }
  common.grid.shape = common.mesh.shape();
  common.grid.ids = to_ids;
  if (!split_any) {
    common.links.assign(target.links.begin(), target.links.end());
  } else if (topology != nullptr) {
    common.links = mesh_links(*topology, common.mesh, common.grid);
  }
  return common;
}

}  // namespace shardplan
