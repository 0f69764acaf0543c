#include <shardplan/cost.hpp>

#include <algorithm>
#include <array>

namespace shardplan {

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
};

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
    Level& level = levels[k];
    const double n = static_cast<double>(axis->ring_size);
    level.link = axis->link;
    level.torus = axis->link == LinkClass::ici;
    level.devices *= n;
    level.min_bytes_per_s =
        level.min_bytes_per_s == 0
            ? axis->bytes_per_s
            : std::min(level.min_bytes_per_s, axis->bytes_per_s);
    // A line of n devices moves (n-1)/n of the array at one-way bandwidth.
    level.ring_bytes_per_s +=
        axis->wraparound ? axis->bytes_per_s : axis->bytes_per_s * n / (n - 1);
    level.all_wrap = level.all_wrap && axis->wraparound;
    level.hops += level.torus ? (axis->wraparound ? n / 2 : n - 1) : 0;
    level.latency_s = std::max(level.latency_s, axis->latency_s);
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
    switch (op) {
      case Collective::all_gather:
      case Collective::reduce_scatter:
        t = gather_seconds(level, group_bytes);
        break;
      case Collective::all_reduce:
        t = 2 * gather_seconds(level, group_bytes);
        hops *= 2;
        break;
      case Collective::all_to_all:
        t = all_to_all_seconds(level, group_bytes);
        break;
      case Collective::collective_permute:
      case Collective::send_recv:
        t = group_bytes / level.min_bytes_per_s;
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

}  // namespace shardplan
