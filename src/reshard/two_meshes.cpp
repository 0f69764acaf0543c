// The plan of one tensor between two meshes (docs/reshard.md, "How plans are
// chosen" and "Transfers between meshes"): pending sums reduced on the
// source, the pathways intermediate sharding when it applies (its replica
// axis gathered, on links of its own), then the exact overlap of source and
// target blocks as send_recv or collective_permute pieces; the naive plan
// beside it; the pieces priced by the links between their own devices
// (transfer_cost). And whether ids name the same devices: same_devices.

#include "reshard/internal.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <limits>
#include <unordered_map>
#include <utility>

namespace shardplan {

namespace reshard_detail {

namespace {

struct Placement {
  const Mesh* mesh = nullptr;
  const std::vector<int64_t>* ids = nullptr;  // row-major device ids
  std::vector<AxisList> dims;
  int replica_axis = -1;  // only devices at 0 on it send
};

struct OverlapResult {
  int64_t max_received = 0;
  bool whole_blocks = true;  // every piece a whole source block
  std::vector<Flow> flows;   // every piece: from, to, bytes
  std::vector<Transfer> transfers;
};

// Of the devices `h` holding a block, the one target device `to` (the q-th)
// takes it from: the nearest (transfer_route), the q-th of equally near
// ones so that replicas share the sending.
size_t nearest_holder(const std::vector<size_t>& h,
                      const std::vector<int64_t>& ids,
                      const TransferNetwork& network,
                      int64_t to,
                      size_t q) {
  if (h.size() == 1 || network.from == nullptr || !network.same_devices) {
    return h[q % h.size()];  // all equally far
  }
  int64_t best = std::numeric_limits<int64_t>::max();
  std::vector<size_t> nearest;
  for (size_t p : h) {
    const int64_t rank = transfer_route(network, ids[p], to).rank();
    if (rank < best) {
      best = rank;
      nearest.clear();
    }
    if (rank == best) {
      nearest.push_back(p);
    }
  }
  return nearest[q % nearest.size()];
}

OverlapResult overlap(const Context& src_c,
                      const Placement& src,
                      const Context& dst_c,
                      const Placement& dst,
                      const TransferNetwork& network,
                      bool record) {
  const bool same_devices = network.same_devices;
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
        const size_t from = nearest_holder(h, *src.ids, network, target_id, q);
        const int64_t bytes = bytes_for(elements, src_c.dtype).value_or(0);
        received = src_c.overflow->add(received, bytes);
        result.flows.push_back(Flow{(*src.ids)[from], target_id, bytes});
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

}  // namespace

TensorPlan plan_two_meshes(const Context& src_c,
                           Layout from,
                           const Context& dst_c,
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
  for (int p = 0; p < static_cast<int>(src_c.mesh->axes.size()); ++p) {
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

  Placement src{src_c.mesh, &src_c.grid->ids, from.dims, -1};
  std::vector<AxisLink> intermediate_links;
  Context int_c = src_c;
  const PartitionSpec from_spec = spec_of(from, *src_c.mesh);
  r.intermediate = find_intermediate_sharding(*src_c.mesh,
                                              *src_c.grid,
                                              from_spec,
                                              *dst_c.mesh,
                                              spec_of(to, *dst_c.mesh));
  if (r.intermediate) {
    const IntermediateSharding& im = *r.intermediate;
    const Mesh& mesh = im.mesh;
    // The links of the intermediate mesh: the source's, the split axis's
    // replica part as its own (smaller) group.
    if (!src_c.links.empty()) {
      for (size_t k = 0; k < src_c.mesh->axes.size(); ++k) {
        if (k == im.source_axis) {
          AxisLink split = src_c.links[k];
          split.axis = mesh.axes[k].name;
          intermediate_links.push_back(split);
          AxisLink replica =
              replica_link(src_c.links[k], mesh.axes[k + 1].size);
          replica.axis = mesh.axes[k + 1].name;
          intermediate_links.push_back(replica);
        } else {
          intermediate_links.push_back(src_c.links[k]);
        }
      }
    }
    int_c.mesh = &r.intermediate->mesh;
    int_c.grid = &r.intermediate->grid;
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

  Placement dst{dst_c.mesh, &dst_c.grid->ids, to.dims, -1};
  const TransferNetwork network = options.network();
  OverlapResult moved =
      overlap(int_c, src, dst_c, dst, network, options.transfers);
  ReshardStep& step = r.steps.emplace_back();
  const size_t disjoint_from =
      options.same_devices ? buffers.size() + 1 : buffers.size();
  const bool narrows = target_bytes < buffers.back();
  if (moved.max_received > 0 || narrows) {
    buffers.push_back(target_bytes);  // a new buffer on each target device
  }
  // Otherwise every target device already holds exactly its target block:
  // the target is that buffer, not a copy of it.
  if (moved.max_received > 0) {
    const bool permute = options.same_devices && moved.whole_blocks
                         && counts_of(int_c, src.dims) == dst_counts
                         && src.replica_axis < 0;
    step.op = permute ? ReshardOp::collective_permute : ReshardOp::send_recv;
    step.bytes_per_device = moved.max_received;
    const TransferCost cost = transfer_cost(moved.flows, network);
    step.link = cost.link;
    step.seconds = cost.seconds;
    step.transfers = std::move(moved.transfers);
  } else if (narrows) {
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
  Placement full{src_c.mesh,
                 &src_c.grid->ids,
                 std::vector<AxisList>(from.dims.size()),
                 -1};
  OverlapResult naive_moved = overlap(src_c, full, dst_c, dst, network, false);
  ReshardStep& copy = naive.emplace_back();
  copy.op = ReshardOp::send_recv;
  copy.bytes_per_device = naive_moved.max_received;
  const TransferCost naive_cost = transfer_cost(naive_moved.flows, network);
  copy.link = naive_cost.link;
  copy.seconds = naive_cost.seconds;
  const size_t naive_disjoint =
      options.same_devices ? naive_buffers.size() + 1 : naive_buffers.size();
  if (naive_moved.max_received > 0 || target_bytes < naive_buffers.back()) {
    naive_buffers.push_back(target_bytes);
  }
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
  plan.target_is_source = buffers.size() == 1;
  plan.naive_target_is_source = naive_buffers.size() == 1;
  return plan;
}

}  // namespace reshard_detail

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
