#include <shardplan/cost.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

namespace shardplan {

std::string_view to_string(Collective op) {
  switch (op) {
    case Collective::all_gather:
      return "all_gather";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::all_to_all:
      return "all_to_all";
    case Collective::collective_permute:
      return "collective_permute";
    case Collective::send_recv:
      return "send_recv";
    case Collective::host_copy:
      return "host_copy";
  }
  return "all_gather";
}

namespace {

// One level of a collective: the axes of one link class.
struct Level {
  LinkClass link = LinkClass::none;
  bool torus = false;  // TPU ICI: rings and lines, per axis
  double devices = 1;  // switched: devices in the group
  double min_bytes_per_s = 0;
  double ring_bytes_per_s = 0;  // torus: sum of the axes' effective bandwidths
  bool all_wrap = true;         // torus: every axis a closed ring
  double hops = 0;
  double latency_s = 0;
  // The fraction of the group's bytes that crosses this level: 1, but a
  // hierarchical axis's outer part carries each inner group's share.
  double share = 1;
};

// Adds an axis part of `n` devices at `bytes_per_s` to `level`.
void add_part(Level& level,
              LinkClass link,
              double n,
              double bytes_per_s,
              bool wraparound,
              double latency_s) {
  level.link = link;
  level.torus = link == LinkClass::ici;
  level.devices *= n;
  level.min_bytes_per_s = level.min_bytes_per_s == 0
                              ? bytes_per_s
                              : std::min(level.min_bytes_per_s, bytes_per_s);
  // A line of n devices moves (n-1)/n of the array at one-way bandwidth.
  level.ring_bytes_per_s +=
      wraparound ? bytes_per_s : bytes_per_s * n / (n - 1);
  level.all_wrap = level.all_wrap && wraparound;
  level.hops += level.torus ? (wraparound ? n / 2 : n - 1) : 0;
  level.latency_s = std::max(level.latency_s, latency_s);
}

// The all_gather time of `v` bytes on one level, bandwidth term only.
double gather_seconds(const Level& level, double v) {
  if (level.torus) {
    return v / level.ring_bytes_per_s;
  }
  return v * (level.devices - 1) / (level.devices * level.min_bytes_per_s);
}

double all_to_all_seconds(const Level& level, double v) {
  const double gather = gather_seconds(level, v);
  if (level.torus) {
    return level.all_wrap ? gather / 4 : gather / 2;
  }
  return gather / level.devices;
}

}  // namespace

CollectiveCost collective_cost(Collective op,
                               double group_bytes,
                               std::span<const AxisLink* const> axes) {
  // Levels in a fixed order so results never depend on the axes' order.
  constexpr std::array<LinkClass, 5> k_order = {LinkClass::ici,
                                                LinkClass::nvlink,
                                                LinkClass::mixed,
                                                LinkClass::dcn,
                                                LinkClass::network};
  std::array<Level, k_order.size()> levels{};
  CollectiveCost cost;
  bool any = false;
  for (const AxisLink* axis : axes) {
    if (axis->ring_size <= 1 || axis->bytes_per_s <= 0
        || axis->link == LinkClass::none) {
      continue;
    }
    const size_t k = static_cast<size_t>(
        std::find(k_order.begin(), k_order.end(), axis->link)
        - k_order.begin());
    if (k == k_order.size()) {
      continue;
    }
    cost.link = !any || cost.link == axis->link ? axis->link : LinkClass::mixed;
    any = true;
    const double n = static_cast<double>(axis->ring_size);
    if (axis->link == LinkClass::mixed && axis->inner_size > 1
        && axis->inner_bytes_per_s > 0) {
      // Hierarchical: the inner part on the ICI level with the whole
      // array; the outer part (n / inner devices) carries each inner
      // group's share.
      const auto inner = static_cast<double>(axis->inner_size);
      add_part(levels[0],
               LinkClass::ici,
               inner,
               axis->inner_bytes_per_s,
               axis->inner_wraparound,
               axis->latency_s);
      Level& outer = levels[k];
      add_part(outer,
               LinkClass::mixed,
               n / inner,
               axis->bytes_per_s,
               true,
               axis->latency_s);
      outer.torus = false;
      outer.share /= inner;
      continue;
    }
    add_part(levels[k],
             axis->link,
             n,
             axis->bytes_per_s,
             axis->wraparound,
             axis->latency_s);
  }
  if (!any) {
    return cost;
  }
  double bandwidth_s = 0;
  double latency_s = 0;
  for (Level& level : levels) {
    if (level.link == LinkClass::none) {
      continue;
    }
    if (!level.torus) {
      level.hops = level.devices - 1;
    }
    double t = 0;
    double hops = level.hops;
    const double v = group_bytes * level.share;
    switch (op) {
      case Collective::all_gather:
      case Collective::reduce_scatter:
        t = gather_seconds(level, v);
        break;
      case Collective::all_reduce:
        t = 2 * gather_seconds(level, v);
        hops *= 2;
        break;
      case Collective::all_to_all:
        t = all_to_all_seconds(level, v);
        break;
      case Collective::collective_permute:
      case Collective::send_recv:
      case Collective::host_copy:
        t = v / level.min_bytes_per_s;
        hops = 1;
        break;
    }
    bandwidth_s = std::max(bandwidth_s, t);
    latency_s = std::max(latency_s, level.latency_s * hops);
  }
  cost.seconds = std::max(bandwidth_s, latency_s);
  return cost;
}

double transfer_seconds(double bytes, const AxisLink& link) {
  if (bytes <= 0 || link.bytes_per_s <= 0) {
    return 0;
  }
  return std::max(bytes / link.bytes_per_s, link.latency_s);
}

// ---------------------------------------------------------------------------
// Point-to-point traffic (cost.hpp; docs/reshard.md, "Transfers between
// meshes").

namespace {

// Where a device sits: TPU slice, chip coordinates and core; GPU NVLink
// domain. Ids as docs/topologies.md, "Device ids", numbers them:
// id = core + cores_per_chip * (x + X * (y + Y * (z + Z * slice))).
struct Place {
  int64_t group = 0;  // TPU slice, GPU NVLink domain
  std::array<int64_t, 3> chip{0, 0, 0};
  int64_t chip_index = 0;  // x + X * (y + Y * z) inside the slice
};

Place place_of(const Topology& t, int64_t id) {
  Place p;
  if (t.kind == TopologyKind::gpu) {
    p.group = id / std::max<int64_t>(t.nvlink_domain, 1);
    return p;
  }
  const std::array<int64_t, 3>& n = t.tpu.chips;
  const int64_t chip = id / t.tpu.cores_per_chip;
  const int64_t per_slice = n[0] * n[1] * n[2];
  p.group = chip / per_slice;
  p.chip_index = chip % per_slice;
  p.chip = {p.chip_index % n[0],
            p.chip_index / n[0] % n[1],
            p.chip_index / (n[0] * n[1])};
  return p;
}

bool same_chip(const Topology& t, int64_t a, int64_t b) {
  return t.kind == TopologyKind::tpu
         && a / t.tpu.cores_per_chip == b / t.tpu.cores_per_chip;
}

// One way along one torus axis: direction (+1 or -1), hops, share of the
// piece.
struct Leg {
  int dir = 1;
  int64_t hops = 0;
  double share = 1;
};

// The ways from coordinate a to b on an axis of n chips: the shorter way
// round with a wraparound link (a tie split equally), else the only way.
std::array<Leg, 2> legs(
    int64_t a, int64_t b, int64_t n, bool wrap, int* count) {
  std::array<Leg, 2> out{};
  *count = 1;
  const int64_t forward = ((b - a) % n + n) % n;
  if (forward == 0) {
    return out;  // no move on this axis
  }
  if (!wrap) {
    out[0] = Leg{b > a ? 1 : -1, b > a ? b - a : a - b, 1};
    return out;
  }
  const int64_t backward = n - forward;
  if (forward < backward) {
    out[0] = Leg{1, forward, 1};
  } else if (backward < forward) {
    out[0] = Leg{-1, backward, 1};
  } else {
    out[0] = Leg{1, forward, 0.5};
    out[1] = Leg{-1, backward, 0.5};
    *count = 2;
  }
  return out;
}

// The ICI traffic of one slice (or several with equal shapes): bytes per
// directed link, index (slice * chips + chip) * 6 + axis * 2 + (dir < 0).
struct IciLoads {
  const Topology* t = nullptr;
  std::vector<double> bytes;
  int64_t max_hops = 0;

  void route(const Place& a, const Place& b, double piece) {
    const std::array<int64_t, 3>& n = t->tpu.chips;
    std::array<std::array<Leg, 2>, 3> ways{};
    std::array<int, 3> count{1, 1, 1};
    std::array<size_t, 3> moving{};
    size_t m = 0;
    int64_t hops = 0;
    for (size_t k = 0; k < 3; ++k) {
      ways[k] = legs(a.chip[k], b.chip[k], n[k], t->wraparound[k], &count[k]);
      if (ways[k][0].hops > 0) {
        moving[m++] = k;
        hops += ways[k][0].hops;
      }
    }
    max_hops = std::max(max_hops, hops);
    // Every order of the moving axes, every choice at a tie.
    std::array<size_t, 3> order = moving;
    int orders = 1;
    for (size_t i = 2; i <= m; ++i) {
      orders *= static_cast<int>(i);
    }
    const int64_t chips = n[0] * n[1] * n[2];
    const int64_t base = a.group * chips;
    std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(m));
    do {
      const int choices = count[order[0]] * (m > 1 ? count[order[1]] : 1)
                          * (m > 2 ? count[order[2]] : 1);
      for (int c = 0; c < choices; ++c) {
        double share = piece / orders;
        std::array<const Leg*, 3> pick{};
        int rest = c;
        for (size_t i = 0; i < m; ++i) {
          const size_t k = order[i];
          pick[i] = &ways[k][static_cast<size_t>(rest % count[k])];
          rest /= count[k];
          share *= pick[i]->share;
        }
        std::array<int64_t, 3> at = a.chip;
        for (size_t i = 0; i < m; ++i) {
          const size_t k = order[i];
          const Leg& leg = *pick[i];
          for (int64_t h = 0; h < leg.hops; ++h) {
            const int64_t chip = at[0] + n[0] * (at[1] + n[1] * at[2]);
            bytes[static_cast<size_t>((base + chip) * 6
                                      + static_cast<int64_t>(k) * 2
                                      + (leg.dir < 0 ? 1 : 0))] += share;
            at[k] = ((at[k] + leg.dir) % n[k] + n[k]) % n[k];
          }
        }
      }
    } while (std::next_permutation(
        order.begin(), order.begin() + static_cast<std::ptrdiff_t>(m)));
  }
};

// Per device bytes sent and received over one switched link class.
struct DeviceLoads {
  std::vector<double> sent, received;
  void add(int64_t from, int64_t to, double bytes) {
    grow(sent, from) += bytes;
    grow(received, to) += bytes;
  }
  static double& grow(std::vector<double>& v, int64_t id) {
    if (v.size() <= static_cast<size_t>(id)) {
      v.resize(static_cast<size_t>(id) + 1, 0);
    }
    return v[static_cast<size_t>(id)];
  }
  bool empty() const { return sent.empty(); }
  // The busiest device's time at `send_rate` out and `receive_rate` in
  // (a rate of 0, a figure the topology lacks, prices nothing).
  double seconds(double send_rate, double receive_rate) const {
    double t = 0;
    for (double b : sent) {
      t = send_rate > 0 ? std::max(t, b / send_rate) : t;
    }
    for (double b : received) {
      t = receive_rate > 0 ? std::max(t, b / receive_rate) : t;
    }
    return t;
  }
};

// The per-device rate of the class that joins slices or device sets.
double dcn_rate(const Topology& t) {
  return t.kind == TopologyKind::tpu
             ? t.figures.dcn_bytes_per_s_per_chip.value
                   / static_cast<double>(t.tpu.cores_per_chip)
             : t.figures.network_bytes_per_s_per_gpu.value;
}
double dcn_latency(const Topology& t) {
  return t.kind == TopologyKind::tpu ? t.figures.dcn_latency_s.value
                                     : t.figures.network_latency_s.value;
}

}  // namespace

int64_t TransferRoute::rank() const {
  switch (link) {
    case LinkClass::none:
      return 0;
    case LinkClass::ici:
    case LinkClass::nvlink:
      return hops;
    default:
      return int64_t{1} << 40;  // DCN, the network: farther than any torus
  }
}

TransferRoute transfer_route(const TransferNetwork& network,
                             int64_t from,
                             int64_t to) {
  if (network.from == nullptr || network.to == nullptr) {
    return {};
  }
  const Topology& t = *network.from;
  const LinkClass far =
      t.kind == TopologyKind::tpu ? LinkClass::dcn : LinkClass::network;
  if (!network.same_devices) {
    return {far, 1};
  }
  if (from == to || same_chip(t, from, to)) {
    return {};
  }
  const Place a = place_of(t, from);
  const Place b = place_of(*network.to, to);
  if (a.group != b.group) {
    return {far, 1};
  }
  if (t.kind == TopologyKind::gpu) {
    return {LinkClass::nvlink, 1};
  }
  int64_t hops = 0;
  for (size_t k = 0; k < 3; ++k) {
    int count = 0;
    hops +=
        legs(a.chip[k], b.chip[k], t.tpu.chips[k], t.wraparound[k], &count)[0]
            .hops;
  }
  return {LinkClass::ici, hops};
}

TransferCost transfer_cost(std::span<const Flow> flows,
                           const TransferNetwork& network) {
  TransferCost cost;
  if (network.from == nullptr || network.to == nullptr) {
    return cost;
  }
  const Topology& from = *network.from;
  const Topology& to = *network.to;
  const bool tpu = from.kind == TopologyKind::tpu;
  IciLoads ici{&from, {}, 0};
  DeviceLoads near;  // NVLink
  DeviceLoads far;   // DCN, the network
  for (const Flow& f : flows) {
    if (f.bytes <= 0 || (network.same_devices && f.from == f.to)) {
      continue;
    }
    const auto bytes = static_cast<double>(f.bytes);
    const TransferRoute route = transfer_route(network, f.from, f.to);
    switch (route.link) {
      case LinkClass::ici:
        if (ici.bytes.empty()) {
          const int64_t slices = std::max(from.num_slices(), to.num_slices());
          ici.bytes.assign(
              static_cast<size_t>(slices * from.tpu.chips[0] * from.tpu.chips[1]
                                  * from.tpu.chips[2] * 6),
              0);
        }
        ici.route(place_of(from, f.from), place_of(to, f.to), bytes);
        break;
      case LinkClass::nvlink:
        near.add(f.from, f.to, bytes);
        break;
      case LinkClass::dcn:
      case LinkClass::network:
        far.add(f.from, f.to, bytes);
        break;
      default:
        break;  // one chip: no link
    }
  }
  auto use = [&](LinkClass link, double seconds) {
    cost.link = cost.link == LinkClass::none || cost.link == link
                    ? link
                    : LinkClass::mixed;
    cost.seconds = std::max(cost.seconds, seconds);
  };
  if (!ici.bytes.empty()) {
    cost.busiest_link_bytes =
        *std::max_element(ici.bytes.begin(), ici.bytes.end());
    cost.max_hops = ici.max_hops;
    const double rate = from.figures.ici_bytes_per_s_per_link.value;
    use(LinkClass::ici,
        std::max(rate > 0 ? cost.busiest_link_bytes / rate : 0,
                 static_cast<double>(ici.max_hops)
                     * from.figures.ici_latency_s.value));
  }
  if (!near.empty()) {
    const double rate = from.figures.nvlink_bytes_per_s_per_gpu.value;
    use(LinkClass::nvlink,
        std::max(near.seconds(rate, rate),
                 from.figures.nvlink_latency_s.value));
  }
  if (!far.empty()) {
    use(tpu ? LinkClass::dcn : LinkClass::network,
        std::max(far.seconds(dcn_rate(from), dcn_rate(to)),
                 std::max(dcn_latency(from), dcn_latency(to))));
  }
  return cost;
}

std::vector<TransferLinkFigure> transfer_links(const TransferNetwork& network) {
  std::vector<TransferLinkFigure> out;
  if (network.from == nullptr || network.to == nullptr) {
    return out;
  }
  const Topology& from = *network.from;
  const Topology& to = *network.to;
  const bool tpu = from.kind == TopologyKind::tpu;
  const TransferLinkFigure far{tpu ? LinkClass::dcn : LinkClass::network,
                               "",
                               "device",
                               std::min(dcn_rate(from), dcn_rate(to)),
                               std::max(dcn_latency(from), dcn_latency(to))};
  if (!network.same_devices) {
    TransferLinkFigure f = far;
    f.between = "device sets";
    out.push_back(f);
    return out;
  }
  const TopologyFigures& fig = from.figures;
  if (tpu) {
    out.push_back({LinkClass::ici,
                   "devices of one slice",
                   "link",
                   fig.ici_bytes_per_s_per_link.value,
                   fig.ici_latency_s.value});
    if (from.num_slices() > 1 || to.num_slices() > 1) {
      TransferLinkFigure f = far;
      f.between = "slices";
      out.push_back(f);
    }
    return out;
  }
  out.push_back({LinkClass::nvlink,
                 "GPUs of one NVLink domain",
                 "device",
                 fig.nvlink_bytes_per_s_per_gpu.value,
                 fig.nvlink_latency_s.value});
  if (std::max(from.gpus, to.gpus) > from.nvlink_domain) {
    TransferLinkFigure f = far;
    f.between = "NVLink domains";
    out.push_back(f);
  }
  return out;
}

std::vector<std::string_view> transfer_assumptions(
    const TransferNetwork& network) {
  std::vector<std::string_view> out;
  if (network.from == nullptr || network.to == nullptr) {
    return out;
  }
  const bool tpu = network.from->kind == TopologyKind::tpu;
  if (network.same_devices && tpu) {
    out.insert(out.end(),
               {"ICI routes are dimension-ordered, the shorter way round each "
                "axis (wraparound as the topology has it; a tie split equally "
                "between both ways)",
                "a piece is spread equally over the orders of the axes it "
                "crosses",
                "each directed ICI link carries its share of every route "
                "through it at its one-way rate: the time is the busiest "
                "link's bytes over that rate, at least the longest route's "
                "hops times the per-hop latency",
                "two cores of one chip exchange without ICI (not priced)"});
  }
  if (network.same_devices && !tpu) {
    out.emplace_back(
        "NVLink is switched: each GPU sends and receives at its own NVLink "
        "rate, one hop");
  }
  out.emplace_back(
      tpu ? "over DCN each device sends and receives at its chip's DCN share, "
            "the network behind the hosts never the bottleneck"
          : "the scale-out network is a full-bisection fat tree: each GPU "
            "sends and receives at its own rate, one hop");
  out.emplace_back(
      "link classes are separate hardware: traffic on several takes the time "
      "of the slowest");
  return out;
}

}  // namespace shardplan
