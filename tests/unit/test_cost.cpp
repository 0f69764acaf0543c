// Collective times against the scaling book's worked figures
// (docs/sources.md#ici-collectives, docs/sources.md#gpu-collectives;
// jax-ml/scaling-book sharding.md "Pop Quiz 2" and "Question 2", gpus.md
// "Quiz 2 Q3" and "Pop
// Quiz 1"). The book rounds
// its bytes (34e6 for 33,554,432); the expectations below redo its
// arithmetic with exact bytes, and the book's figure is in the comment.

#include "support/test_support.hpp"

#include <shardplan/cost.hpp>
#include <shardplan/topology.hpp>

#include <catch2/catch.hpp>

#include <vector>

using namespace shardplan;

namespace {

// An axis of `n` devices on a link of `kind`.
AxisLink link_of(
    LinkClass kind, int64_t n, bool wrap, double bytes_per_s, double latency) {
  AxisLink link;
  link.link = kind;
  link.ring_size = n;
  link.wraparound = wrap;
  link.bytes_per_s = bytes_per_s;
  link.latency_s = latency;
  return link;
}

AxisLink ici(int64_t n, bool wrap, double bytes_per_s, double latency = 1e-6) {
  return link_of(LinkClass::ici, n, wrap, bytes_per_s, latency);
}

double cost(Collective op, double bytes, const std::vector<AxisLink>& links) {
  std::vector<const AxisLink*> ptrs;
  for (const AxisLink& l : links) {
    ptrs.push_back(&l);
  }
  return collective_cost(op, bytes, ptrs).seconds;
}

// bf16[2048, 8192] gathered over an axis of 4 on a v5e (Pop Quiz 2, part 1).
constexpr double k_quiz2_bytes = 2048.0 * 8192 * 2;  // 33,554,432

}  // namespace

TEST_CASE(
    "cost: all_gather over a v5e axis of 4 without wraparound (book: 560 us)",
    "[cost]") {
  // 3 hops x 8,388,608 B / 4.5e10 B/s one way.
  const double t =
      cost(Collective::all_gather, k_quiz2_bytes, {ici(4, false, 4.5e10)});
  CHECK(t == Approx(3 * 8388608.0 / 4.5e10));
  CHECK(t == Approx(560e-6).epsilon(0.01));
}

TEST_CASE(
    "cost: all_gather over a v5e axis of 4 with wraparound (book: 377 us)",
    "[cost]") {
  // V / W with W the bidirectional 9e10 B/s.
  const double t =
      cost(Collective::all_gather, k_quiz2_bytes, {ici(4, true, 9e10)});
  CHECK(t == Approx(k_quiz2_bytes / 9e10));
  CHECK(t == Approx(377e-6).epsilon(0.015));
}

TEST_CASE("cost: a small all_gather is latency-bound (book: 3 hops x 1 us)",
          "[cost]") {
  // bf16[256, 256]: 32 kB shards, 0.7 us per hop of bandwidth; 3 hops of 1 us.
  const double t =
      cost(Collective::all_gather, 256.0 * 256 * 2, {ici(4, false, 4.5e10)});
  CHECK(t == Approx(3e-6));
}

TEST_CASE(
    "cost: all_gather over two wraparound axes of a v4p 4x4x4 (book: 46 us)",
    "[cost]") {
  // AllGather_XY([B_X, D_Y]) with B=1024, D=4096 bf16: 2BD / (2 W_ICI).
  const double v = 2.0 * 1024 * 4096;
  const double t =
      cost(Collective::all_gather, v, {ici(4, true, 9e10), ici(4, true, 9e10)});
  CHECK(t == Approx(v / 1.8e11));
  CHECK(t == Approx(46.6e-6).epsilon(0.01));
  // One of the axes alone gathers a quarter of the array (book: 23 us).
  CHECK(cost(Collective::all_gather, v / 4, {ici(4, true, 9e10)})
        == Approx(23.3e-6).epsilon(0.01));
}

TEST_CASE(
    "cost: reduce_scatter all_reduce and all_to_all follow the book's ratios",
    "[cost]") {
  const std::vector<AxisLink> ring{ici(8, true, 9e10)};
  const std::vector<AxisLink> line{ici(8, false, 4.5e10)};
  const double v = 64.0 * 1024 * 1024;
  const double ag_ring = cost(Collective::all_gather, v, ring);
  CHECK(cost(Collective::reduce_scatter, v, ring) == Approx(ag_ring));
  CHECK(cost(Collective::all_reduce, v, ring) == Approx(2 * ag_ring));
  // "AllGather / 4 for a bidirectional ring", half of it on a line.
  CHECK(cost(Collective::all_to_all, v, ring) == Approx(ag_ring / 4));
  CHECK(cost(Collective::all_to_all, v, line)
        == Approx(cost(Collective::all_gather, v, line) / 2));
}

TEST_CASE("cost: all_gather on 8xH100 over NVLink (book: 1.04 ms and 65 us)",
          "[cost]") {
  const AxisLink nvlink = link_of(LinkClass::nvlink, 8, true, 450e9, 1e-6);
  // bf16[4096, 65536]: B (N-1) / (N W) = 536,870,912 x 7 / 3.6e12.
  const double big = 4096.0 * 65536 * 2;
  CHECK(cost(Collective::all_gather, big, {nvlink})
        == Approx(big * 7 / 3.6e12));
  CHECK(cost(Collective::all_gather, big, {nvlink})
        == Approx(1.04e-3).epsilon(0.01));
  // bf16[1024, 16384]: "more precisely" 65 us with the 7/8.
  CHECK(cost(Collective::all_gather, 2.0 * 1024 * 16384, {nvlink})
        == Approx(65e-6).epsilon(0.01));
  // AllToAll inside a node: B (N-1) / (W N^2).
  CHECK(cost(Collective::all_to_all, big, {nvlink})
        == Approx(big * 7 / (450e9 * 64)));
}

TEST_CASE("cost: the links of a real v5e-32 mesh give the book's 560 us",
          "[cost]") {
  // The book's mesh {'X': 8, 'Y': 4} on a v5e: no wraparound below 16.
  Topology t = test::topology_of("v5e-32");
  Diagnostics diags;
  std::optional<MeshLayout> layout =
      layout_mesh(t, test::mesh_of("X:8,Y:4", 32), test::flag_layout(), diags);
  REQUIRE(layout);
  const AxisLink& y = layout->links[1];
  REQUIRE(y.axis == "Y");
  CHECK_FALSE(y.wraparound);
  const AxisLink* axes[] = {&y};
  CHECK(collective_cost(Collective::all_gather, k_quiz2_bytes, axes).seconds
        == Approx(3 * 8388608.0 / 4.5e10));
  CHECK(collective_cost(Collective::all_gather, k_quiz2_bytes, axes).link
        == LinkClass::ici);
}

TEST_CASE("cost: axes without links or of size 1 cost nothing", "[cost]") {
  AxisLink none;
  const AxisLink one = ici(1, false, 4.5e10);
  const AxisLink* axes[] = {&none, &one};
  const CollectiveCost c = collective_cost(Collective::all_gather, 1e9, axes);
  CHECK(c.seconds == 0);
  CHECK(c.link == LinkClass::none);
  CHECK(transfer_seconds(1e9, none) == 0);
}

TEST_CASE("cost: ICI and DCN axes together take the slower level", "[cost]") {
  const AxisLink dcn = link_of(LinkClass::dcn, 2, true, 6.25e9, 10e-6);
  const AxisLink fast = ici(4, true, 1.8e11);
  const AxisLink* both[] = {&fast, &dcn};
  const double v = 1e9;
  const CollectiveCost c = collective_cost(Collective::all_gather, v, both);
  CHECK(c.link == LinkClass::mixed);
  CHECK(c.seconds == Approx(v * 1 / (2 * 6.25e9)));
}

TEST_CASE("reshard: transfer_cost follows the links between two devices",
          "[cost]") {
  SECTION("the book's point-to-point example: both ports of a 2D move") {
    // docs/sources.md#ici-collectives: 1.7e7 B between opposite corners of a
    // v5e 4x4 (no wraparound) uses 2 ports x 4.5e10 B/s: 188 us; 6 hops. Device
    // 0 is chip (0,0), device 15 chip (3,3); the two dimension orders carry
    // 8.5e6 B each.
    const Topology t = test::topology_of("v5e-16");
    const TransferNetwork net{&t, &t, true};
    const Flow flows[] = {{0, 15, 17000000}};
    const TransferCost c = transfer_cost(flows, net);
    CHECK(c.link == LinkClass::ici);
    CHECK(c.max_hops == 6);
    CHECK(c.busiest_link_bytes == Approx(8.5e6));
    CHECK(c.seconds == Approx(8.5e6 / 4.5e10));  // 188.9 us
  }
  SECTION("an all-to-all in an 8x8 plane of a v5p-512 torus") {
    // v5p-512 is 4x8x8 chips, every axis a ring. The 64 chips with x = 0
    // (ids 4 * (y + 8 z)) each send 128,256 B to the 63 others. Along a
    // ring of 8 the distances from one chip sum to 0+1+2+3+4+3+2+1 = 16, so
    // a chip's pieces cross 8 x 16 = 128 y-hops and 128 z-hops; 64 chips x
    // 256 hops x 128,256 B spread evenly over the plane's 256 directed
    // links (ties of 4 split both ways): 64 x 128,256 = 8,208,384 B per
    // link, / 9e10 B/s = 91.2043 us; the longest route 4 + 4 = 8 hops.
    const Topology t = test::topology_of("v5p-512");
    const TransferNetwork net{&t, &t, true};
    std::vector<Flow> flows;
    for (int64_t a = 0; a < 64; ++a) {
      for (int64_t b = 0; b < 64; ++b) {
        if (a != b) {
          flows.push_back(Flow{4 * a, 4 * b, 128256});
        }
      }
    }
    const TransferCost c = transfer_cost(flows, net);
    CHECK(c.link == LinkClass::ici);
    CHECK(c.max_hops == 8);
    CHECK(c.busiest_link_bytes == Approx(64.0 * 128256));
    CHECK(c.seconds == Approx(64.0 * 128256 / 9e10));
  }
  SECTION("DCN between slices, NVLink and the network on GPUs") {
    // 2xv5e-16: device 16 is slice 1; 1e9 B at 3.125e9 B/s per chip = 0.32 s.
    const Topology two = test::topology_of("2xv5e-16");
    const Flow across[] = {{0, 16, 1000000000}};
    const TransferCost dcn = transfer_cost(across, {&two, &two, true});
    CHECK(dcn.link == LinkClass::dcn);
    CHECK(dcn.seconds == Approx(0.32));
    // h100x16: 0 -> 1 inside a node over NVLink, 4.5e9 B / 4.5e11 = 10 ms;
    // 0 -> 8 across nodes, 1e9 B / 5e10 = 20 ms; at once: the slower.
    const Topology gpus = test::topology_of("h100x16");
    const TransferNetwork net{&gpus, &gpus, true};
    const Flow inside[] = {{0, 1, 4500000000}};
    CHECK(transfer_cost(inside, net).link == LinkClass::nvlink);
    CHECK(transfer_cost(inside, net).seconds == Approx(0.01));
    const Flow both[] = {{0, 1, 4500000000}, {0, 8, 1000000000}};
    CHECK(transfer_cost(both, net).link == LinkClass::mixed);
    CHECK(transfer_cost(both, net).seconds == Approx(0.02));
    // Two cores of one chip (v2: 2 per chip) use no ICI link.
    const Topology v2 = test::topology_of("v2-8");
    const Flow core[] = {{0, 1, 1000}};
    CHECK(transfer_cost(core, {&v2, &v2, true}).seconds == 0);
  }
}

TEST_CASE("cost: an axis across slices gathers hierarchically", "[cost]") {
  // One axis of 8 devices: 4 in each of 2 slices, ICI a closed ring at
  // 1e11 B/s inside, DCN 1e10 B/s per device across. XLA gathers inside
  // the slice (the whole 8e9 bytes over the ring: 8e9 / 1e11 = 0.08 s)
  // while each device's share crosses DCN (the 4 devices of a slice split
  // the other slice's half: 8e9 / 4 x 1/2 / 1e10 = 0.1 s): 0.1 s, not the
  // 8e9 x 7/8 / 1e10 = 0.7 s of all the bytes at the DCN rate.
  AxisLink mixed = link_of(LinkClass::mixed, 8, true, 1e10, 0);
  mixed.inner_size = 4;
  mixed.inner_bytes_per_s = 1e11;
  mixed.inner_wraparound = true;
  const AxisLink* axes[] = {&mixed};
  const CollectiveCost gather =
      collective_cost(Collective::all_gather, 8e9, axes);
  CHECK(gather.seconds == Approx(0.1));
  CHECK(gather.link == LinkClass::mixed);
  CHECK(collective_cost(Collective::all_reduce, 8e9, axes).seconds
        == Approx(0.2));
  // A slow ICI ring makes the inner level the longer: 8e9 / 4e10 = 0.2 s.
  mixed.inner_bytes_per_s = 4e10;
  CHECK(collective_cost(Collective::all_gather, 8e9, axes).seconds
        == Approx(0.2));
}
