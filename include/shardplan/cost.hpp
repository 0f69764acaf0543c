#pragma once
// Layer 4: how long a collective takes on the links of the mesh axes it runs
// over (docs/reshard.md, "Cost"; docs/sources.md#ici-collectives and
// docs/sources.md#gpu-collectives).
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
//                                  all_gather V (n-1) / (n B)  (GPUs)
//   reduce_scatter = all_gather; all_reduce = 2 x all_gather
//   all_to_all: V / (4 B) on a ring with wraparound, half an all_gather on a
//               line, V (n-1) / (n^2 B) switched
// Each is floored by the per-hop latency times the hops (the book's
// T = max(T_min |X| / 2, V / W)). Axes of different link classes (ICI and
// DCN, NVLink and the network) run as one hierarchical collective whose time
// is that of its slowest level (the book's max over tree levels).
//
// What it offers (src/cost.cpp implements all of it):
//   Collective, CollectiveCost, collective_cost   one collective on the
//                              links of its axes, with its latency floor
//   transfer_seconds           bytes over one AxisLink
//   TransferNetwork, Flow, TransferCost, transfer_cost   point-to-point
//                              pieces by their own routes, busiest link
//   TransferRoute, transfer_route   the hops of one piece
//   TransferLinkFigure, transfer_links, transfer_assumptions   the links a
//                              transfer uses and what its price assumes
#include <shardplan/topology.hpp>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace shardplan {

enum class Collective {
  all_gather,
  reduce_scatter,
  all_reduce,
  all_to_all,
  collective_permute,
  send_recv,
  // A copy between a device and its host's memory (PCIe, host DMA): not a
  // collective; collective_cost does not price it (the step does).
  host_copy,
};

// "all_gather", "reduce_scatter", ... (the enumerator's name).
std::string_view to_string(Collective op);

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

// A point-to-point transfer of `bytes` over one link: bytes / bandwidth,
// floored by the link's latency.
double transfer_seconds(double bytes, const AxisLink& link);

// ---------------------------------------------------------------------------
// Point-to-point traffic between devices (a reshard between meshes;
// docs/reshard.md, "Transfers between meshes"). Each piece takes the links
// between its own two devices:
//   TPU, one slice    ICI: a route over the torus
//                     (docs/sources.md#tpu-wraparound), dimension-ordered along
//                     the shorter way round each axis (wraparound per the
//                     topology; a tie is split equally between both ways), the
//                     piece spread equally over the orders of the axes it
//                     crosses (the book's point-to-point example uses both
//                     ports of a 2D move). Every directed link carries what
//                     crosses it at ici_bytes_per_s_per_link: T = max(busiest
//                     link's bytes / that rate, longest route's hops x
//                     ici_latency_s). Two cores of one chip use no ICI link
//                     (not priced).
//   TPU, two slices   DCN: each device sends and receives at its chip's
//   or device sets    DCN share (dcn_bytes_per_s_per_chip / devices per
//                     chip), the network behind it never the bottleneck;
//                     T = max(the busiest device's bytes / rate, latency).
//   GPU               NVLink within an NVLink domain, the scale-out network
//                     between domains (or device sets): both switched, each
//                     GPU sending and receiving at its own rate (the
//                     full-bisection fat tree of
//                     docs/sources.md#gpu-collectives), one hop of latency.
// Link classes are separate hardware and run at once: the traffic takes the
// time of its slowest class.

// Where the devices of point-to-point traffic are.
struct TransferNetwork {
  const Topology* from = nullptr;  // the senders' topology; null: no times
  const Topology* to = nullptr;    // the receivers'
  // A device id names the same device on both sides; false: the senders
  // and receivers are two device sets joined by DCN (or the network).
  bool same_devices = true;
};

// One piece of traffic: `bytes` from device `from` to device `to` (JAX
// ids on their topologies).
struct Flow {
  int64_t from = 0;
  int64_t to = 0;
  int64_t bytes = 0;
};

struct TransferCost {
  double seconds = 0;
  LinkClass link = LinkClass::none;  // of the links used; mixed when several
  int64_t max_hops = 0;              // the longest route (ICI hops)
  double busiest_link_bytes = 0;     // on the ICI link carrying the most
};

// The time of `flows` moved at once. Flows between one device and itself
// cost nothing. Without topologies, zero.
TransferCost transfer_cost(std::span<const Flow> flows,
                           const TransferNetwork& network);

// How far device `from` is from device `to`: the class of links between
// them (none for one device or one chip) and the route's hops on ICI (1
// over a switched network or DCN). For choosing the nearest holder.
struct TransferRoute {
  LinkClass link = LinkClass::none;
  int64_t hops = 0;
  // Orders routes: nearer first (one chip, then ICI by hops, NVLink, then
  // DCN or the network).
  int64_t rank() const;
};
TransferRoute transfer_route(const TransferNetwork& network,
                             int64_t from,
                             int64_t to);

// The links point-to-point traffic can take on `network`, fastest first,
// with their figures, as the report lists them.
struct TransferLinkFigure {
  LinkClass link = LinkClass::none;
  std::string_view between;  // "devices of one slice", "slices", ...
  std::string_view per;      // "link" (a route crosses several) or "device"
  double bytes_per_s = 0;    // one way
  double latency_s = 0;      // per hop
};
std::vector<TransferLinkFigure> transfer_links(const TransferNetwork& network);

// The model's assumptions, one sentence each, for the report.
std::vector<std::string_view> transfer_assumptions(
    const TransferNetwork& network);

}  // namespace shardplan
