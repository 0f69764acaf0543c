// Layouts of tensors on a mesh (include/shardplan/sharding.hpp): shards,
// shard shapes, bytes per device and replicas, and their totals.

#include "support/test_support.hpp"

#include <shardplan/sharding.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>

using namespace shardplan;

TEST_CASE("sharding: shard_tensor covers the global shape",
          "[sharding][property]") {
  // Local shape times shard counts covers the global shape; bytes summed over
  // devices equal the total times the replication factor when dims divide.
  const Mesh mesh = test::mesh_of("a:2,b:3,c:4", 24);
  const int64_t rows = GENERATE(take(40, random(1, 500)));
  const int64_t cols = GENERATE(take(3, random(1, 50)));
  const Manifest manifest = test::manifest_of(fmt::format(
      R"({{"params": [{{"name": "w", "shape": [{}, {}], "dtype": "f32"}}]}})",
      rows,
      cols));
  const Tensor& t = manifest.tensors()[0];
  for (const char* text :
       {"a,b", "(a,c),b", "None,(c,b)", "b", "(a,b,c)", "()"}) {
    Diagnostics diags;
    std::optional<PartitionSpec> spec = parse_spec(text, "t", diags);
    REQUIRE(spec);
    std::optional<TensorSharding> s = shard_tensor(t, *spec, mesh);
    REQUIRE(s);
    for (size_t d = 0; d < 2; ++d) {
      CHECK(s->shard_shape()[d] * s->shards()[d] >= t.shape[d]);
      CHECK((s->shard_shape()[d] - 1) * s->shards()[d] < t.shape[d]);
    }
    CHECK(s->replicas() * s->shards()[0] * s->shards()[1] == 24);
    if (rows % s->shards()[0] == 0 && cols % s->shards()[1] == 0) {
      CHECK(s->bytes_per_device() * 24 == t.num_bytes * s->replicas());
      CHECK(s->min_bytes_per_device() == s->bytes_per_device());
    } else {
      CHECK(s->min_bytes_per_device() < s->bytes_per_device());
    }
    // Sharding one more axis never increases the bytes per device.
    PartitionSpec more = s->spec()->padded(2);
    for (const MeshAxis& axis : mesh.axes) {
      std::vector<std::string> used = more.axes();
      if (std::find(used.begin(), used.end(), axis.name) == used.end()) {
        more.dims[1].axes.push_back(axis.name);
        std::optional<TensorSharding> finer = shard_tensor(t, more, mesh);
        REQUIRE(finer);
        CHECK(finer->bytes_per_device() <= s->bytes_per_device());
        break;
      }
    }
  }
}

TEST_CASE("sharding: a layout of an uneven split, worked by hand",
          "[sharding]") {
  // 50257 rows over tp=8: ceil(50257 / 8) = 6283 rows on device 0, and the
  // last device holds what the other 7 leave: 50257 - 7 x 6283 = 6276.
  // 768 columns over fsdp=4: 192 each. bf16: 2 bytes an element.
  const Mesh mesh = test::mesh_of("fsdp:4,tp:8", 32);
  const Manifest manifest = test::manifest_of(
      R"({"params": [{"name": "wte", "shape": [50257, 768], "dtype": "bf16"}]})");
  PartitionSpec spec;
  spec.dims = {DimSharding{{"tp"}}, DimSharding{{"fsdp"}}};
  std::shared_ptr<ShardLayout> layout =
      make_layout(manifest.tensors()[0], spec, mesh);
  REQUIRE(layout);
  CHECK(layout->valid);
  CHECK(layout->shards() == std::vector<int64_t>{8, 4});
  CHECK(layout->shard_shape() == std::vector<int64_t>{6283, 192});
  CHECK(layout->bytes_per_device == 6283 * 192 * 2);
  CHECK(layout->min_bytes_per_device == 6276 * 192 * 2);
  CHECK(layout->replicas == 1);
}

TEST_CASE("sharding: totals count replicated bytes and invalid specs",
          "[sharding]") {
  // On dp:2,tp:2 a [4, 4] f32 tensor split over tp has 2 replicas (not
  // replicated on every device); a replicated [2] f32 tensor (8 bytes) is
  // held by all 4 devices; a tensor whose layout was refused counts as
  // invalid and, laid out as replicated, adds its 4 x 2 bf16 = 16 bytes.
  const Mesh mesh = test::mesh_of("dp:2,tp:2", 4);
  const Manifest manifest = test::manifest_of(R"({"params": [
      {"name": "w", "shape": [4, 4], "dtype": "f32"},
      {"name": "b", "shape": [2], "dtype": "f32"},
      {"name": "x", "shape": [4, 2], "dtype": "bf16"}]})");
  PartitionSpec tp;
  tp.dims = {DimSharding{}, DimSharding{{"tp"}}};
  std::vector<TensorSharding> shardings;
  shardings.push_back(
      TensorSharding{make_layout(manifest.tensors()[0], tp, mesh)});
  shardings.push_back(TensorSharding{
      make_layout(manifest.tensors()[1], PartitionSpec{}, mesh)});
  std::shared_ptr<ShardLayout> refused =
      make_layout(manifest.tensors()[2], PartitionSpec{}, mesh);
  refused->valid = false;
  refused->spec.reset();
  shardings.push_back(TensorSharding{refused});
  CHECK(shardings[0].replicas() == 2);
  const ShardingTotals totals = sharding_totals(manifest, mesh, shardings);
  CHECK(totals.replicated_bytes == 8 + 16);
  CHECK(totals.invalid == 1);
}
