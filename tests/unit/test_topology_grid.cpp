// TPU device grids against JAX's jax.experimental.mesh_utils. Every expected
// value comes from JAX (tests/mesh_utils_test.py, the make_mesh docstring) or
// docs/topologies.md ("Device ids"), or is worked by hand from the algorithm
// (the comment says which).

#include "support/test_support.hpp"

#include <shardplan/topology.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

using namespace shardplan;

namespace {

using Ids = std::vector<int64_t>;
using Matrix = std::vector<std::vector<int64_t>>;

TpuSlice slice_of(TpuChip chip,
                  int64_t x,
                  int64_t y,
                  int64_t z,
                  int64_t cores,
                  int64_t slices = 1) {
  TpuSlice s;
  s.chip = chip;
  s.chips = {x, y, z};
  s.cores_per_chip = cores;
  s.host_bounds = {2, 2, 1};
  s.num_slices = slices;
  return s;
}

// create_device_mesh on one slice; fails the test on a diagnostic.
TpuGrid grid_of(const TpuSlice& slice,
                const Ids& mesh_shape,
                bool split = false) {
  Diagnostics diags;
  auto g = create_device_mesh(
      slice.chip, mesh_shape, tpu_devices(slice), split, diags);
  INFO(test::first_error(diags));
  REQUIRE(g);
  CHECK(g->grid.shape == mesh_shape);
  return *g;
}

// JAX's tests give assignments as the physical axes of each logical axis;
// this is the matrix they expand them to.
Matrix matrix_of(const Ids& physical,
                 const std::vector<std::vector<size_t>>& axes) {
  Matrix a(physical.size(), Ids(axes.size(), 1));
  for (size_t l = 0; l < axes.size(); ++l) {
    for (size_t p : axes[l]) {
      a[p][l] = physical[p];
    }
  }
  return a;
}

void check_each_id_once(const DeviceGrid& g, int64_t n) {
  Ids sorted = g.ids;
  std::sort(sorted.begin(), sorted.end());
  Ids expected(static_cast<size_t>(n));
  std::iota(expected.begin(), expected.end(), int64_t{0});
  CHECK(sorted == expected);
}

void check_assignment_products(const Matrix& a,
                               const Ids& physical,
                               const Ids& logical) {
  REQUIRE(a.size() == physical.size());
  for (size_t p = 0; p < a.size(); ++p) {
    REQUIRE(a[p].size() == logical.size());
    int64_t prod = 1;
    for (int64_t v : a[p]) {
      prod *= v;
    }
    CHECK(prod == physical[p]);
  }
  for (size_t l = 0; l < logical.size(); ++l) {
    int64_t prod = 1;
    for (const auto& row : a) {
      prod *= row[l];
    }
    CHECK(prod == logical[l]);
  }
}

}  // namespace

TEST_CASE("topology: tpu_devices lists devices host by host",
          "[topology][grid]") {
  auto devices = tpu_devices(slice_of(TpuChip::v4, 4, 4, 1, 1));
  Ids ids;
  Ids processes;
  for (const auto& d : devices) {
    ids.push_back(d.id);
    processes.push_back(d.process_index);
  }
  CHECK(ids == Ids{0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15});
  CHECK(processes == Ids{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  CHECK(devices[2].coords == std::array<int64_t, 3>{0, 1, 0});

  // Two slices of v3 2x2 (2 cores per chip): slice 1 follows slice 0.
  auto two = tpu_devices(slice_of(TpuChip::v3, 2, 2, 1, 2, 2));
  REQUIRE(two.size() == 16);
  CHECK(two[1].core_on_chip == 1);
  CHECK(two[8].id == 8);
  CHECK(two[8].slice_index == 1);
  CHECK(two[8].process_index == 1);
}

TEST_CASE("topology: TPU v3 tray ring (make_mesh docstring, mesh_utils_test)",
          "[topology][grid]") {
  // make_mesh docstring, TPU v3 with 8 devices.
  CHECK(grid_of(slice_of(TpuChip::v3, 2, 2, 1, 2), {8}).grid.ids
        == Ids{0, 1, 2, 3, 6, 7, 4, 5});
  // mesh_utils_test 2x2_2d.
  CHECK(grid_of(slice_of(TpuChip::v3, 2, 2, 1, 2), {2, 4}).grid.ids
        == Ids{0, 1, 2, 3, 6, 7, 4, 5});
  // mesh_utils_test 4x4_2d: a ring per tray.
  CHECK(grid_of(slice_of(TpuChip::v3, 4, 4, 1, 2), {4, 8}).grid.ids
        == Ids{0,  1,  2,  3,  10, 11, 8,  9,  4,  5,  6,  7,  14, 15, 12, 13,
               16, 17, 18, 19, 26, 27, 24, 25, 20, 21, 22, 23, 30, 31, 28, 29});
  // make_mesh docstring, 16 devices of TPU v3. Its ids are those of a slice of
  // 2x4 chips (jax.devices() is then 0..15; on 4x2 the (4, 4) mesh would
  // start 0,1,2,3,8,9).
  const TpuSlice v3_16 = slice_of(TpuChip::v3, 2, 4, 1, 2);
  CHECK(grid_of(v3_16, {2, 8}).grid.ids
        == Ids{0, 1, 2, 3, 6, 7, 4, 5, 8, 9, 10, 11, 14, 15, 12, 13});
  const TpuGrid plain = grid_of(v3_16, {4, 4});
  CHECK(plain.grid.ids
        == Ids{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  CHECK(plain.physical_assignment.empty());  // the handler built it
}

TEST_CASE(
    "topology: TPU v4 has no ring handler, and (8,) on 2x2x2 runs z fastest",
    "[topology][grid]") {
  // docs/topologies.md, "Device ids".
  const TpuGrid g = grid_of(slice_of(TpuChip::v4, 2, 2, 2, 1), {8});
  CHECK(g.grid.ids == Ids{0, 4, 2, 6, 1, 5, 3, 7});
  CHECK(g.physical_assignment == Matrix{{2}, {2}, {2}});
}

TEST_CASE("topology: v5e / v6e rings (mesh_utils_test and by hand)",
          "[topology][grid]") {
  // mesh_utils_test test_v5e_create_device_mesh.
  CHECK(grid_of(slice_of(TpuChip::v5e, 4, 2, 1, 1), {8}).grid.ids
        == Ids{0, 1, 2, 3, 7, 6, 5, 4});
  CHECK(grid_of(slice_of(TpuChip::v5e, 2, 2, 2, 1), {8}).grid.ids
        == Ids{0, 4, 2, 6, 1, 5, 3, 7});
  // By hand: 2x2 ring (0,1,3,2) over devices sorted x fastest (ids 0..3).
  CHECK(grid_of(slice_of(TpuChip::v6e, 2, 2, 1, 1), {2, 2}).grid.ids
        == Ids{0, 1, 3, 2});
  // By hand: 4x4 with a 16-wide axis takes the 16-cycle.
  CHECK(grid_of(slice_of(TpuChip::v5e, 4, 4, 1, 1), {16}).grid.ids
        == Ids{0, 1, 2, 3, 7, 6, 5, 9, 10, 11, 15, 14, 13, 12, 8, 4});
  CHECK(grid_of(slice_of(TpuChip::v6e, 4, 4, 1, 1), {1, 16}).grid.ids
        == Ids{0, 1, 2, 3, 7, 6, 5, 9, 10, 11, 15, 14, 13, 12, 8, 4});
}

TEST_CASE("topology: v5e 4x4 as (2, 8) needs a split", "[topology][grid]") {
  // By hand: max(mesh) != 16, so the torus path on (4, 4, 1); 8 is no
  // product of a subset of {4, 4, 1}.
  Diagnostics diags;
  const TpuSlice s = slice_of(TpuChip::v5e, 4, 4, 1, 1);
  CHECK_FALSE(create_device_mesh(s.chip, {2, 8}, tpu_devices(s), false, diags));
  REQUIRE(diags.error_count() == 1);
  CHECK(diags.items()[0].code == "topology.no-assignment");
  CHECK(diags.items()[0].message ==
        "failed to find assignment for logical_axis_index 1 of size 8 with remaining "
        "assignable mesh [4, 4, 1]. The size of each axis in your logical mesh must be "
        "equal to the product of some subset of the physical mesh axis sizes. E.g. "
        "logical mesh (4, 16) is compatible with physical mesh 4x4x4 since 4=4 and "
        "16=4x4. If you want to split physical axes, set  allow_split_physical_axes to "
        "True");

  // By hand, splitting: axis 1 (8) candidates [4,2,1] and [2,4,1] tie on whole
  // axes (4) and count (1); the larger tuple [4,2,1] wins; axis 0 gets
  // [1,2,1]. Row i is the high half of y; column j = 2x + (low bit of y).
  const TpuGrid g = grid_of(s, {2, 8}, true);
  CHECK(g.physical_assignment == Matrix{{1, 4}, {2, 2}, {1, 1}});
  CHECK(g.grid.ids
        == Ids{0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15});
}

TEST_CASE("topology: v5p and TPU7x handlers", "[topology][grid]") {
  // By hand: v5p 2x2x2 order (0,1,3,2,6,7,5,4) over ids sorted x fastest.
  CHECK(grid_of(slice_of(TpuChip::v5p, 2, 2, 2, 1), {8}).grid.ids
        == Ids{0, 1, 3, 2, 6, 7, 5, 4});
  // By hand: 2-core v5p has a (x, y, z, cores) array; 16 devices take all
  // four axes, so the grid is that array in row-major order.
  const TpuGrid v5p2 = grid_of(slice_of(TpuChip::v5p, 2, 2, 2, 2), {16});
  CHECK(v5p2.grid.ids
        == Ids{0, 1, 8, 9, 4, 5, 12, 13, 2, 3, 10, 11, 6, 7, 14, 15});
  CHECK(v5p2.physical_assignment == Matrix{{2}, {2}, {2}, {2}});

  // By hand: TPU7x applies (0,1,2,3,6,7,4,5) to each block of 8 listed
  // devices (one host of 2x2 chips x 2 cores).
  CHECK(grid_of(slice_of(TpuChip::tpu7x, 2, 2, 1, 2), {8}).grid.ids
        == Ids{0, 1, 2, 3, 6, 7, 4, 5});
  CHECK(grid_of(slice_of(TpuChip::tpu7x, 2, 2, 4, 2), {4, 8}).grid.ids
        == Ids{0,  1,  2,  3,  6,  7,  4,  5,  8,  9,  10, 11, 14, 15, 12, 13,
               16, 17, 18, 19, 22, 23, 20, 21, 24, 25, 26, 27, 30, 31, 28, 29});
}

TEST_CASE("topology: TPU7x beyond 32 devices puts the busiest axis on cores",
          "[topology][grid]") {
  // By hand from the newest mesh_utils (priority map: core axis, then x, y,
  // z): physical (2, 2, 8, 2); axis 1 (2) takes the core axis, axis 0 (32)
  // takes x, y, z, so the grid is the physical array in row-major order.
  const TpuGrid g = grid_of(slice_of(TpuChip::tpu7x, 2, 2, 8, 2), {32, 2});
  CHECK(g.physical_assignment == Matrix{{2, 1}, {2, 1}, {8, 1}, {1, 2}});
  CHECK(g.grid.at({0, 0}) == 0);
  CHECK(g.grid.at({0, 1}) == 1);
  CHECK(g.grid.at({1, 0}) == 8);   // z = 1
  CHECK(g.grid.at({8, 0}) == 4);   // y = 1
  CHECK(g.grid.at({16, 0}) == 2);  // x = 1
  check_each_id_once(g.grid, 64);
}

TEST_CASE("topology: torus assignment matches _create_device_mesh_for_nd_torus",
          "[topology][grid]") {
  // mesh_utils_test test_create_device_mesh_for_nd_torus (and its
  // _split_axes_backward_compatible twin: the splitting variant agrees).
  struct Case {
    Ids physical;
    Ids mesh;
    std::vector<std::vector<size_t>> axes;
  };
  const std::vector<Case> cases{
      {{2, 2, 1}, {1, 1, 4}, {{}, {}, {0, 1, 2}}},
      {{2, 2, 4}, {1, 4, 4}, {{}, {2}, {0, 1}}},
      {{4, 4, 4}, {1, 16, 4}, {{}, {1, 2}, {0}}},
      {{4, 4, 8}, {1, 16, 8}, {{}, {0, 1}, {2}}},
      {{4, 4, 8}, {1, 8, 16}, {{}, {2}, {0, 1}}},
      {{4, 4, 8}, {16, 8, 1}, {{0, 1}, {2}, {}}},
      {{4, 8, 8}, {1, 32, 8}, {{}, {0, 2}, {1}}},
      {{8, 8, 8}, {1, 64, 8}, {{}, {1, 2}, {0}}},
      {{8, 8, 16}, {1, 64, 16}, {{}, {0, 1}, {2}}},
      {{8, 8, 1}, {8, 8}, {{1}, {0, 2}}},
  };
  for (const Case& c : cases) {
    INFO("physical " << c.physical.size() << " axes, mesh size "
                     << c.mesh.size());
    const Matrix expected = matrix_of(c.physical, c.axes);
    Diagnostics diags;
    auto plain = assign_torus_axes(c.physical, c.mesh, false, diags);
    REQUIRE(plain);
    CHECK(plain->assignment == expected);
    auto split = split_torus_axes(c.physical, c.mesh, diags);
    REQUIRE(split);
    CHECK(split->assignment == expected);
    CHECK(split->order == plain->order);
    CHECK_FALSE(diags.has_errors());
  }
}

TEST_CASE("topology: splitting physical axes (mesh_utils_test)",
          "[topology][grid]") {
  // test_create_device_mesh_for_nd_torus_split_axes_can_handle_axes_split.
  struct Case {
    Ids physical;
    Ids mesh;
    Matrix expected;
  };
  const std::vector<Case> cases{
      {{4, 4, 4}, {2, 1, 32}, {{1, 1, 4}, {1, 1, 4}, {2, 1, 2}}},
      {{4, 4, 4}, {8, 8, 1}, {{1, 4, 1}, {2, 2, 1}, {4, 1, 1}}},
      {{4, 4, 8}, {2, 2, 8, 4}, {{1, 1, 1, 4}, {2, 2, 1, 1}, {1, 1, 8, 1}}},
      {{4, 4, 8}, {2, 4, 1, 16}, {{1, 1, 1, 4}, {1, 1, 1, 4}, {2, 4, 1, 1}}},
      {{4, 8, 8}, {1, 128, 2}, {{1, 2, 2}, {1, 8, 1}, {1, 8, 1}}},
      // mock_8x8_devices(True): TPU v3 kind, one device per chip -> (8, 8, 1).
      {{8, 8, 1}, {2, 1, 32, 1}, {{1, 1, 8, 1}, {2, 1, 4, 1}, {1, 1, 1, 1}}},
      // By hand, rule 3 (the product placed on already used physical axes
      // wins): on (4, 4), axis 2 takes [2,1]; axis 1 then prefers [2,1]
      // (on used axis 0: 2) over [1,2] (1).
      {{4, 4}, {4, 2, 2}, {{1, 2, 2}, {4, 1, 1}}},
      // On (8, 8): axis 2 takes [4,1]; axis 1 prefers [2,2] (2 on axis 0)
      // over [1,4] (1).
      {{8, 8}, {4, 4, 4}, {{1, 2, 4}, {4, 2, 1}}},
  };
  for (const Case& c : cases) {
    Diagnostics diags;
    auto layout = assign_torus_axes(c.physical, c.mesh, true, diags);
    INFO(test::first_error(diags));
    REQUIRE(layout);
    CHECK(layout->assignment == c.expected);
    check_assignment_products(layout->assignment, c.physical, c.mesh);
    Ids sorted = layout->order;
    std::sort(sorted.begin(), sorted.end());
    Ids iota(sorted.size());
    std::iota(iota.begin(), iota.end(), int64_t{0});
    CHECK(sorted == iota);
  }
}

TEST_CASE("topology: prime factors, including the upstream fix",
          "[topology][grid]") {
  // mesh_utils_test test_get_prime_factors.
  CHECK(prime_factors(1).empty());
  CHECK(prime_factors(2) == Ids{2});
  CHECK(prime_factors(4) == Ids{2, 2});
  CHECK(prime_factors(8) == Ids{2, 2, 2});
  CHECK(prime_factors(6) == Ids{2, 3});
  CHECK(prime_factors(16) == Ids{2, 2, 2, 2});
  CHECK(prime_factors(12) == Ids{2, 2, 3});
  CHECK(prime_factors(121) == Ids{11, 11});
  CHECK(prime_factors(43) == Ids{43});
  // jax-ml/jax#38286: the old helper returned {5}, {7}, {11}.
  CHECK(prime_factors(10) == Ids{2, 5});
  CHECK(prime_factors(14) == Ids{2, 7});
  CHECK(prime_factors(22) == Ids{2, 11});

  // By hand: these splits need both factors of 10, 14 and 22.
  Diagnostics diags;
  auto ten = assign_torus_axes({10, 2}, {5, 4}, true, diags);
  REQUIRE(ten);
  CHECK(ten->assignment == Matrix{{5, 2}, {1, 2}});
  Ids iota20(20);
  std::iota(iota20.begin(), iota20.end(), int64_t{0});
  CHECK(ten->order == iota20);
  auto fourteen = assign_torus_axes({14}, {7, 2}, true, diags);
  REQUIRE(fourteen);
  CHECK(fourteen->assignment == Matrix{{7, 2}});
  auto twenty_two = assign_torus_axes({22, 1}, {2, 11}, true, diags);
  REQUIRE(twenty_two);
  CHECK(twenty_two->assignment == Matrix{{2, 11}, {1, 1}});
  CHECK_FALSE(diags.has_errors());
}

TEST_CASE("topology: splitting is only a fallback", "[topology][grid]") {
  // JAX tries whole physical axes first; allow_split changes nothing when
  // they fit (test cases of test_create_device_mesh_for_nd_torus on v4).
  const std::vector<std::pair<TpuSlice, Ids>> cases{
      {slice_of(TpuChip::v4, 2, 2, 4, 1), {1, 4, 4}},
      {slice_of(TpuChip::v4, 4, 4, 4, 1), {1, 16, 4}},
      {slice_of(TpuChip::v4, 4, 4, 8, 1), {16, 8, 1}},
      {slice_of(TpuChip::v4, 4, 8, 8, 1), {1, 32, 8}},
  };
  for (const auto& [s, shape] : cases) {
    const TpuGrid plain = grid_of(s, shape, false);
    const TpuGrid split = grid_of(s, shape, true);
    CHECK(plain.grid.ids == split.grid.ids);
    CHECK(plain.physical_assignment == split.physical_assignment);
    check_each_id_once(plain.grid, static_cast<int64_t>(plain.grid.ids.size()));
    check_assignment_products(
        plain.physical_assignment, {s.chips[0], s.chips[1], s.chips[2]}, shape);
  }
}

TEST_CASE("topology: contiguous submeshes (transpose trick)",
          "[topology][grid]") {
  // mesh_utils_test test_create_contiguous_submeshes_for_tpu_v4 (+ leading
  // and trailing 1 dims): each host's devices form a box of the mesh.
  const std::vector<std::pair<std::array<int64_t, 3>, Ids>> tricks{
      {{2, 2, 1}, {2, 2}},
      {{2, 2, 4}, {4, 4}},
      {{4, 4, 4}, {16, 4}},
      {{4, 8, 8}, {64, 4}},
      {{4, 8, 8}, {4, 64}},
      {{8, 8, 8}, {64, 8}},
      {{8, 16, 16}, {256, 8}},
      {{8, 16, 16}, {8, 256}},
  };
  for (const auto& [chips, shape2] : tricks) {
    for (bool padded : {false, true}) {
      Ids shape = padded ? Ids{1, 1, shape2[0], shape2[1], 1, 1} : shape2;
      const TpuSlice s = slice_of(TpuChip::v4, chips[0], chips[1], chips[2], 1);
      const auto devices = tpu_devices(s);
      std::map<int64_t, int64_t> process_of;
      for (const auto& d : devices) {
        process_of[d.id] = d.process_index;
      }
      Diagnostics diags;
      auto g = create_device_mesh(s.chip, shape, devices, false, diags, true);
      INFO(test::first_error(diags));
      REQUIRE(g);
      REQUIRE(g->grid.ids.size() == devices.size());
      // Per process: the set of coordinates on each axis is a range and the
      // devices fill the box they span.
      std::map<int64_t, std::vector<std::set<int64_t>>> spans;
      std::map<int64_t, int64_t> counts;
      Ids coords(shape.size(), 0);
      for (int64_t id : g->grid.ids) {
        const int64_t p = process_of[id];
        auto& span = spans[p];
        span.resize(shape.size());
        for (size_t k = 0; k < shape.size(); ++k) {
          span[k].insert(coords[k]);
        }
        ++counts[p];
        for (size_t k = shape.size(); k-- > 0;) {
          if (++coords[k] < shape[k]) {
            break;
          }
          coords[k] = 0;
        }
      }
      for (const auto& [p, span] : spans) {
        int64_t box = 1;
        for (const auto& values : span) {
          box *= static_cast<int64_t>(values.size());
          CHECK(*values.rbegin() - *values.begin() + 1
                == static_cast<int64_t>(values.size()));
        }
        CHECK(box == counts[p]);
      }
      // A v4 host holds 4 chips (2x2x1): every host was checked.
      CHECK(spans.size() == devices.size() / 4);
    }
  }
}

TEST_CASE("topology: contiguous submesh errors (mesh_utils_test)",
          "[topology][grid]") {
  Diagnostics diags;
  const TpuSlice a = slice_of(TpuChip::v4, 4, 4, 8, 1);
  CHECK_FALSE(create_device_mesh(
      a.chip, {1, 16, 8}, tpu_devices(a), false, diags, true));
  const TpuSlice b = slice_of(TpuChip::v4, 4, 8, 8, 1);
  CHECK_FALSE(create_device_mesh(
      b.chip, {1, 128, 2}, tpu_devices(b), false, diags, true));
  REQUIRE(diags.error_count() == 2);
  CHECK(diags.items()[0].code == "topology.contiguous-submeshes");
  CHECK(diags.items()[0].message ==
        "create_device_mesh cannot create contiguous submeshes for physical mesh topology "
        "(4, 4, 8)");
  CHECK(diags.items()[1].message ==
        "create_device_mesh cannot create contiguous submeshes for mesh_shape (1, 128, 2) "
        "and physical mesh topology (4, 8, 8). Available mesh_shapes: [(64, 4), (4, 64)]");
}

TEST_CASE("topology: errors for device counts and megacore",
          "[topology][grid]") {
  Diagnostics diags;
  const TpuSlice v4 = slice_of(TpuChip::v4, 2, 2, 1, 1);
  CHECK_FALSE(create_device_mesh(v4.chip, {8}, tpu_devices(v4), false, diags));
  const TpuSlice v4_2core = slice_of(TpuChip::v4, 2, 2, 1, 2);
  CHECK_FALSE(create_device_mesh(
      v4_2core.chip, {2, 4}, tpu_devices(v4_2core), false, diags));
  REQUIRE(diags.error_count() == 2);
  CHECK(diags.items()[0].code == "topology.device-count");
  CHECK(diags.items()[0].message
        == "number of devices 4 must equal the product of mesh_shape (8,)");
  CHECK(diags.items()[1].code == "topology.megacore");
  CHECK(diags.items()[1].message.rfind(
            "creating meshes for TPU >v3 requires one device per chip "
            "(\"megacore\" mode). "
            "Got device id 1 for a device of kind TPU v4: ",
            0)
        == 0);
}

TEST_CASE("topology: hybrid mesh puts the DCN index major (mesh_utils_test)",
          "[topology][grid]") {
  // test_create_hybrid_device_mesh: two v4 4x4x4 slices; stepping the DCN
  // part of an axis keeps the coordinates and changes the slice (ids + 64).
  const auto devices = tpu_devices(slice_of(TpuChip::v4, 4, 4, 4, 1, 2));
  Diagnostics diags;
  auto a = create_hybrid_device_mesh(
      TpuChip::v4, {1, 16, 4}, {2, 1, 1}, devices, false, diags);
  REQUIRE(a);
  CHECK(a->grid.shape == Ids{2, 16, 4});
  CHECK(a->grid.at({1, 0, 0}) == a->grid.at({0, 0, 0}) + 64);
  check_each_id_once(a->grid, 128);
  auto b = create_hybrid_device_mesh(
      TpuChip::v4, {1, 4, 16}, {1, 2, 1}, devices, false, diags);
  REQUIRE(b);
  CHECK(b->grid.shape == Ids{1, 8, 16});
  CHECK(b->grid.at({0, 4, 0}) == b->grid.at({0, 0, 0}) + 64);
  CHECK(b->grid.at({0, 4, 7}) == b->grid.at({0, 0, 7}) + 64);
  CHECK_FALSE(diags.has_errors());

  auto bad = create_hybrid_device_mesh(
      TpuChip::v4, {1, 16, 4}, {4, 1, 1}, devices, false, diags);
  CHECK_FALSE(bad);
  REQUIRE(diags.error_count() == 1);
  CHECK(diags.items()[0].code == "topology.slice-count");
  CHECK(diags.items()[0].message ==
        "number of slices 2 must equal the product of dcn_mesh_shape (4, 1, 1)");
}

TEST_CASE("topology: tpu_device_grid from a mesh string", "[topology][grid]") {
  const TpuSlice v4 = slice_of(TpuChip::v4, 4, 4, 4, 1);

  SECTION("no assignment without splitting") {
    Diagnostics diags;
    CHECK_FALSE(
        tpu_device_grid(v4, test::mesh_of("dp:2,tp:32", 64), false, diags));
    REQUIRE(diags.error_count() == 1);
    const Diagnostic& d = diags.items()[0];
    CHECK(d.code == "topology.no-assignment");
    // The caller puts the mesh's source there (layout_mesh; see
    // test_topology_layout.cpp).
    CHECK(d.location.empty());
    CHECK(d.message.rfind("failed to find assignment for logical_axis_index 1 "
                          "of size 32 with "
                          "remaining assignable mesh [4, 4, 4]. ",
                          0)
          == 0);
    CHECK(d.message.find("set  allow_split_physical_axes to True")
          != std::string::npos);
  }

  SECTION("splitting") {
    // By hand: tp (32) gets [4,4,2] (whole 16, two axes, largest tuple), dp
    // gets the rest of z. Row = high bit of z; column = (4x + y)*2 + low bit.
    Diagnostics diags;
    auto g = tpu_device_grid(v4, test::mesh_of("dp:2,tp:32", 64), true, diags);
    REQUIRE(g);
    CHECK(g->physical_assignment == Matrix{{1, 4}, {1, 4}, {2, 2}});
    CHECK(g->grid.at({0, 0}) == 0);
    CHECK(g->grid.at({0, 1}) == 16);
    CHECK(g->grid.at({0, 2}) == 4);
    CHECK(g->grid.at({0, 8}) == 1);
    CHECK(g->grid.at({1, 0}) == 32);
    check_each_id_once(g->grid, 64);
  }

  SECTION("device count") {
    Diagnostics diags;
    CHECK_FALSE(
        tpu_device_grid(v4, test::mesh_of("dp:2,tp:16", 32), false, diags));
    REQUIRE(diags.error_count() == 1);
    CHECK(diags.items()[0].code == "topology.device-count");
    CHECK(diags.items()[0].location.empty());
    CHECK(diags.items()[0].message.rfind(
              "number of devices 64 must equal the product of mesh_shape "
              "(2, 16)",
              0)
          == 0);
  }

  SECTION("two slices with --dcn") {
    Diagnostics diags;
    auto g = tpu_device_grid(slice_of(TpuChip::v4, 4, 4, 4, 1, 2),
                             test::mesh_of("dp:2,fsdp:16,tp:4", 128, "dp:2"),
                             false,
                             diags);
    REQUIRE(g);
    CHECK(g->grid.shape == Ids{2, 16, 4});
    CHECK(g->grid.at({1, 3, 2}) == g->grid.at({0, 3, 2}) + 64);
    // mesh_utils_test 4x4x4 [1, 16, 4]: fsdp on (y, z), tp on x.
    CHECK(g->physical_assignment == matrix_of({4, 4, 4}, {{}, {1, 2}, {0}}));
  }

  SECTION("DCN factors on a single slice") {
    Diagnostics diags;
    CHECK_FALSE(tpu_device_grid(
        v4, test::mesh_of("dp:2,tp:32", 64, "dp:2"), false, diags));
    REQUIRE(diags.error_count() == 1);
    CHECK(diags.items()[0].code == "topology.slice-count");
  }
}

TEST_CASE("topology: GPU grid is a reshape of ids sorted (jax b1 step 4)",
          "[topology][grid]") {
  // 16 GPUs, 8 per node: tp inside a node, dp across nodes.
  DeviceGrid g = gpu_device_grid(test::mesh_of("dp:2,tp:8", 16), 8);
  CHECK(g.shape == Ids{2, 8});
  CHECK(g.at({1, 0}) == 8);
  CHECK(g.at({0, 7}) == 7);
  // DCN dp:2: each DCN block is a node's run of ids, DCN index major.
  DeviceGrid h = gpu_device_grid(test::mesh_of("dp:4,tp:4", 16, "dp:2"), 8);
  CHECK(h.ids == Ids{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
}

TEST_CASE("topology: allowing splits keeps the grid whenever both succeed",
          "[topology][grid][property]") {
  // Random mesh shapes of 1 to 4 axes over v4 slices and a v5p 4x4x4 slice
  // (large enough that no ring handler applies): the device count, a power
  // of 2, is dealt out to the axes one factor of 2 at a time.
  const std::vector<TpuSlice> slices = {slice_of(TpuChip::v4, 2, 2, 4, 1),
                                        slice_of(TpuChip::v4, 4, 4, 4, 1),
                                        slice_of(TpuChip::v4, 4, 4, 8, 1),
                                        slice_of(TpuChip::v5p, 4, 4, 4, 1)};
  const int seed = GENERATE(take(100, random(0, 1 << 30)));
  std::mt19937 rng(static_cast<unsigned>(seed));
  const TpuSlice& s = slices[static_cast<size_t>(seed) % slices.size()];
  const int64_t devices = s.chips[0] * s.chips[1] * s.chips[2];
  const int axes = std::uniform_int_distribution<int>(1, 4)(rng);
  Ids shape(static_cast<size_t>(axes), 1);
  for (int64_t rest = devices; rest > 1;
       rest /= 2) {  // every count is a power of 2
    shape[std::uniform_int_distribution<size_t>(0, shape.size() - 1)(rng)] *= 2;
  }
  INFO("slice " << s.chips[0] << "x" << s.chips[1] << "x" << s.chips[2]
                << ", mesh " << fmt::format("{}", fmt::join(shape, "x")));
  Diagnostics plain_diags;
  Diagnostics split_diags;
  auto plain =
      create_device_mesh(s.chip, shape, tpu_devices(s), false, plain_diags);
  auto split =
      create_device_mesh(s.chip, shape, tpu_devices(s), true, split_diags);
  // Splitting only adds layouts: whatever works without it works with it.
  if (plain) {
    REQUIRE(split);
    CHECK(plain->grid.ids == split->grid.ids);
    CHECK(plain->physical_assignment == split->physical_assignment);
  }
  if (split) {
    check_each_id_once(split->grid, devices);
  }
}
