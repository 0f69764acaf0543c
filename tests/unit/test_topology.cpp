#include "support/test_support.hpp"

#include <shardplan/topology.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

using namespace shardplan;

TEST_CASE("topology: one slice without a topology is a plain reshape",
          "[topology]") {
  DeviceGrid g = generic_device_grid(test::mesh_of("dp:2,tp:4", 8));
  CHECK(g.shape == std::vector<int64_t>{2, 4});
  CHECK(g.ids == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(g.at({1, 2}) == 6);
}

TEST_CASE(
    "topology: slices are contiguous id blocks, DCN index major in each axis",
    "[topology]") {
  // create_hybrid_device_mesh with ici (2, 2), dcn (2, 1): slice 0 holds ids
  // 0-3 as [[0,1],[2,3]] at rows 0-1, slice 1 holds 4-7 at rows 2-3.
  DeviceGrid g = generic_device_grid(test::mesh_of("dp:4,tp:2", 8, "dp:2"));
  CHECK(g.ids == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});

  // DCN on the minor axis: ici (2, 2), dcn (1, 2). Slice 1 sits at columns
  // 2-3, so row 0 is [0, 1, 4, 5] and row 1 is [2, 3, 6, 7].
  DeviceGrid h = generic_device_grid(test::mesh_of("dp:2,tp:4", 8, "tp:2"));
  CHECK(h.ids == std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7});

  // Both axes across slices: ici (1, 2), dcn (2, 2): slices 0..3 at DCN
  // coordinates (0,0), (0,1), (1,0), (1,1), each [2s, 2s+1].
  DeviceGrid k =
      generic_device_grid(test::mesh_of("dp:2,tp:4", 8, "dp:2,tp:2"));
  CHECK(k.ids == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  DeviceGrid l =
      generic_device_grid(test::mesh_of("dp:4,tp:2", 8, "dp:2,tp:2"));
  // ici (2, 1): slice s holds [2s, 2s+1] down a column. Rows: dp coordinate
  // c -> slice row c / 2, local row c % 2.
  CHECK(l.ids == std::vector<int64_t>{0, 2, 1, 3, 4, 6, 5, 7});
}

TEST_CASE("topology: every device id appears exactly once",
          "[topology][property]") {
  for (auto [text, devices, dcn] :
       std::vector<std::tuple<std::string, int64_t, std::string>>{
           {"a:2,b:3,c:4", 24, "a:2,c:2"},
           {"a:8,b:1,c:6", 48, "c:3"},
           {"a:16", 16, "a:4"},
           {"x:1", 1, ""}}) {
    DeviceGrid g = generic_device_grid(test::mesh_of(text, devices, dcn));
    std::vector<int64_t> sorted = g.ids;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> expected(static_cast<size_t>(devices));
    std::iota(expected.begin(), expected.end(), 0);
    CHECK(sorted == expected);
  }
}
