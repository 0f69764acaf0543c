#pragma once
// Layer 4: how long a collective takes on the links of the mesh axes it runs
// over (DESIGN.md 5; shared/reference/hardware-and-costs.md B.1, B.2).
//
// `group_bytes` is the scaling book's V, the bytes of the array one
// collective group works on:
//   all_gather       the gathered array (what each device holds after)
//   reduce_scatter   the unreduced array (what each device holds before)
//   all_reduce       the buffer being summed
//   all_to_all       the group's whole array (n x each device's buffer)
//   collective_permute, send_recv   the bytes one device receives
//
// Per link class, with n devices in the group and B = AxisLink::bytes_per_s
// (bidirectional on a TPU ring with wraparound, one way otherwise):
//   TPU ICI ring with wraparound   all_gather V / B            (|X|/2 hops)
//   TPU ICI line, no wraparound    all_gather V (n-1) / (n B)  (n-1 hops)
//   several ICI axes at once       V / sum of their B  (book: V / (W n_axes))
//   switched (NVLink, scale-out, DCN)
//                                  all_gather V (n-1) / (n B)  (gpus.md)
//   reduce_scatter = all_gather; all_reduce = 2 x all_gather
//   all_to_all: V / (4 B) on a ring with wraparound, half an all_gather on a
//               line, V (n-1) / (n^2 B) switched
// Each is floored by the per-hop latency times the hops (the book's
// T = max(T_min |X| / 2, V / W)). Axes of different link classes (ICI and
// DCN, NVLink and the network) run as one hierarchical collective whose time
// is that of its slowest level (gpus.md's max over tree levels).
#include <shardplan/topology.hpp>

#include <span>
#include <string_view>

namespace shardplan {

enum class Collective {
  all_gather,
  reduce_scatter,
  all_reduce,
  all_to_all,
  collective_permute,
  send_recv,
};

struct CollectiveCost {
  double seconds = 0;
  LinkClass link = LinkClass::none;  // of the axes; mixed when they differ
};

// The time of `op` over the mesh axes `axes` (size-1 axes and axes without a
// bandwidth, as with --devices, add nothing). For collective_permute and
// send_recv, `group_bytes` is what one device receives and the slowest of
// the axes' links carries it, one hop.
CollectiveCost collective_cost(Collective op,
                               double group_bytes,
                               std::span<const AxisLink* const> axes);

// A point-to-point transfer of `bytes` over one link (send_recv between
// device sets): bytes / bandwidth, floored by the link's latency.
double transfer_seconds(double bytes, const AxisLink& link);

}  // namespace shardplan
