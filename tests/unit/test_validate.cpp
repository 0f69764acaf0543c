// The validator: JAX's PartitionSpec rules (docs/sources.md#jax-partitionspec),
// every problem of a run reported, and exact per-device bytes.

#include "support/test_support.hpp"

#include <shardplan/io.hpp>
#include <shardplan/validate.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>

using namespace shardplan;

namespace {

struct Checked {
  std::vector<TensorSharding> shardings;
  Diagnostics diags;
};

Checked check(const Manifest& manifest,
              const Mesh& mesh,
              const SpecsFile& specs,
              ValidateOptions options = {}) {
  Checked out;
  out.shardings = validate_specs(manifest, mesh, specs, options, out.diags);
  REQUIRE(out.shardings.size() == manifest.size());
  return out;
}

std::vector<std::string> codes(const Diagnostics& diags) {
  std::vector<std::string> out;
  for (const Diagnostic& d : diags.items()) {
    out.push_back(d.code);
  }
  return out;
}

const Manifest& gpt2_like() {
  static const Manifest m = test::manifest_of(R"({"params": [
    {"name": "wte", "shape": [50257, 768], "dtype": "bf16"},
    {"name": "h.0.attn.c_attn.weight", "shape": [768, 2304], "dtype": "bf16"},
    {"name": "h.0.ln_1.weight", "shape": [768], "dtype": "f32"},
    {"name": "step", "shape": [], "dtype": "i32"}]})");
  return m;
}

}  // namespace

TEST_CASE("validate: exact bytes per device, even and uneven", "[validate]") {
  const Mesh mesh = test::mesh_of("fsdp:4,tp:8", 32);
  Checked r = check(gpt2_like(), mesh, test::specs_of(R"({"specs": {
      "wte": ["tp", null], "h.0.attn.c_attn.weight": ["fsdp", "tp"],
      "h.0.ln_1.weight": [], "step": []}})"));
  // wte: 50257 rows over tp=8 do not divide (an error), so device 0 holds
  // ceil(50257/8) = 6283 rows and the last device 50257 - 7*6283 = 6276.
  const TensorSharding& wte = r.shardings[0];
  CHECK(wte.shards() == std::vector<int64_t>{8, 1});
  CHECK(wte.shard_shape() == std::vector<int64_t>{6283, 768});
  CHECK(wte.bytes_per_device() == 6283 * 768 * 2);
  CHECK(wte.min_bytes_per_device() == 6276 * 768 * 2);
  CHECK(wte.replicas() == 4);
  CHECK_FALSE(wte.valid());
  // c_attn: 768/4 x 2304/8 = 192 x 288 bf16, on every device.
  const TensorSharding& attn = r.shardings[1];
  CHECK(attn.shard_shape() == std::vector<int64_t>{192, 288});
  CHECK(attn.bytes_per_device() == 192 * 288 * 2);
  CHECK(attn.min_bytes_per_device() == attn.bytes_per_device());
  CHECK(attn.replicas() == 1);
  CHECK(attn.valid());
  // Replicated: the whole tensor, 32 replicas; a scalar is 4 bytes.
  CHECK(r.shardings[2].bytes_per_device() == 768 * 4);
  CHECK(r.shardings[2].replicas() == 32);
  CHECK(r.shardings[3].bytes_per_device() == 4);
  REQUIRE(r.shardings[3].spec() != nullptr);
  CHECK(*r.shardings[3].spec() == PartitionSpec{});
  REQUIRE(codes(r.diags) == std::vector<std::string>{"spec.indivisible"});
  const Diagnostic& d = r.diags.items()[0];
  CHECK(d.message
        == "P('tp', None) implies that array axis 0 is partitioned 8 times, but "
           "the dimension size is 50257 (full shape: (50257, 768), "
           "per-dimension tiling factors: (8, 1) should evenly divide the shape)");
  CHECK(d.hint == "no free mesh axis divides 50257; or pad the dim to 50264 (a multiple of 8)");
  CHECK(d.tensor == "wte");
  CHECK(d.dim == 0);
  CHECK(d.location.source == "s.json");
  CHECK(d.location.pointer == "/specs/wte");
  CHECK(d.location.line == 2);
  CHECK(d.location.column == 14);
}

TEST_CASE("validate: every problem of a run, in one run", "[validate]") {
  const Manifest manifest = test::manifest_of(R"({"params": [
    {"name": "a", "shape": [64, 64], "dtype": "bf16"},
    {"name": "b", "shape": [64, 64], "dtype": "bf16"},
    {"name": "c", "shape": [64], "dtype": "bf16"},
    {"name": "d", "shape": [60, 64], "dtype": "bf16"},
    {"name": "e", "shape": [64, 64], "dtype": "bf16"},
    {"name": "f", "shape": [64, 64], "dtype": "bf16"},
    {"name": "g", "shape": [64, 64], "dtype": "bf16"}]})");
  const Mesh mesh = test::mesh_of("dp:2,fsdp:8,tp:4", 64);
  Diagnostics read;
  std::optional<SpecsFile> specs = read_specs(R"({"specs": {
    "a": ["tpp", null],
    "b": ["fsdp", "fsdp"],
    "c": ["fsdp", null],
    "d": ["fsdp", "tp"],
    "e": [["dp", ["fsdp"]], null],
    "h": ["fsdp", null],
    "g": [["dp", "fsdp"], "tp"]}})",
                                              "s.json",
                                              read);
  // The nested tuple is the spec's fault, not the file's: reading goes on.
  REQUIRE(specs);
  REQUIRE(codes(read) == std::vector<std::string>{"spec.nested-tuple"});
  CHECK(read.items()[0].location.pointer == "/specs/e/0/1");
  REQUIRE(specs->specs.size() == 7);
  CHECK_FALSE(specs->specs[4].valid);
  CHECK(specs->specs[5].valid);

  Checked r = check(manifest, mesh, *specs);
  CHECK(codes(r.diags)
        == std::vector<std::string>{"spec.unknown-tensor",
                                    "spec.unknown-axis",
                                    "spec.duplicate-axis",
                                    "spec.rank",
                                    "spec.indivisible",
                                    "spec.missing"});
  const auto& items = r.diags.items();
  CHECK(items[0].message
        == "spec for tensor \"h\", which the manifest m.json does not have");
  CHECK(items[0].location.pointer == "/specs/h");
  CHECK(items[1].message
        == "resource axis: tpp of P('tpp', None) is not found in mesh: ('dp', 'fsdp', 'tp')");
  CHECK(items[1].hint == "did you mean 'tp'?");
  CHECK(items[1].dim == 0);
  CHECK(items[2].message
        == "a single NamedSharding spec specification can map every mesh axis to "
           "at most one positional dimension, but P('fsdp', 'fsdp') has "
           "duplicate entries for `fsdp`");
  CHECK(items[2].dim == 1);
  CHECK(items[3].message
        == "sharding P('fsdp', None) is only valid for values of rank at least 2, "
           "but was applied to a value of rank 1");
  CHECK(items[3].hint == "the tensor's shape is (64,)");
  CHECK(items[4].tensor == "d");
  CHECK(items[4].hint
        == "mesh axes that divide 60: dp (2); or pad the dim to 64 (a multiple of 8)");
  CHECK(items[5].message == "tensor \"f\" has no spec in s.json");
  CHECK(items[5].tensor == "f");
  // Only g is valid; the others count as replicated.
  CHECK(r.shardings[6].valid());
  CHECK(r.shardings[6].shards() == std::vector<int64_t>{16, 4});
  for (size_t i = 0; i < 6; ++i) {
    CHECK_FALSE(r.shardings[i].valid());
  }
  CHECK(r.shardings[0].bytes_per_device() == 64 * 64 * 2);
  CHECK_FALSE(r.shardings[0].spec());
}

TEST_CASE("validate: a spec on a scalar", "[validate]") {
  const Manifest manifest = test::manifest_of(
      R"({"params": [{"name": "s", "shape": [], "dtype": "f32"}]})");
  Checked r = check(manifest,
                    test::mesh_of("dp:2", 2),
                    test::specs_of(R"j({"specs": {"s": "P('dp')"}})j"));
  REQUIRE(codes(r.diags) == std::vector<std::string>{"spec.rank"});
  CHECK(r.diags.items()[0].message
        == "sharding P('dp') is only valid for values of rank at least 1, but was "
           "applied to a value of rank 0");
  CHECK(r.diags.items()[0].hint
        == "for scalars the PartitionSpec should be P()");
}

TEST_CASE("validate: warnings for large replicated tensors and size-1 axes",
          "[validate]") {
  const Manifest manifest = test::manifest_of(R"({"params": [
    {"name": "big", "shape": [8192, 8192], "dtype": "bf16"},
    {"name": "small", "shape": [1024], "dtype": "bf16"},
    {"name": "w1", "shape": [64, 64], "dtype": "bf16"},
    {"name": "w2", "shape": [64, 64], "dtype": "bf16"}]})");
  const SpecsFile specs = test::specs_of(R"({"specs": {
    "big": [null, null], "small": [], "w1": ["dp", "tp"], "w2": ["dp", null]}})");
  ValidateOptions options;
  options.replicated_warning_bytes.value = 128 << 20;  // big is exactly 128 MiB
  Checked r = check(manifest, test::mesh_of("dp:1,tp:4", 4), specs, options);
  REQUIRE(codes(r.diags)
          == std::vector<std::string>{"spec.replicated-large",
                                      "spec.trivial-axis"});
  CHECK(r.diags.items()[0].severity == Severity::warning);
  CHECK(r.diags.items()[0].message
        == "tensor \"big\" (134217728 bytes) is fully replicated on all 4 devices");
  CHECK(r.diags.items()[1].message
        == "mesh axis 'dp' has size 1, yet 2 specs name it (first: \"w1\"); it "
           "splits nothing");
  CHECK(r.diags.items()[1].tensor == "w1");
  CHECK_FALSE(r.diags.has_errors());

  // One byte under the threshold, or a single device: no warning.
  options.replicated_warning_bytes.value = (128 << 20) + 1;
  CHECK(
      codes(
          check(manifest, test::mesh_of("dp:1,tp:4", 4), specs, options).diags)
      == std::vector<std::string>{"spec.trivial-axis"});
  options.replicated_warning_bytes.value = 1;
  const SpecsFile replicated = test::specs_of(R"({"specs": {
    "big": [], "small": [], "w1": [], "w2": []}})");
  CHECK(check(manifest, test::mesh_of("dp:1", 1), replicated, options)
            .diags.items()
            .empty());
}

TEST_CASE("validate: the mesh must cover the topology", "[validate]") {
  ValidateOptions options;
  options.topology_devices.value = 64;
  options.mesh_at = Location::of("--mesh");
  options.topology_devices.at = Location::of("--topology v5p-128");
  options.replicated_warning_bytes.value = 0;  // wte is 77 MB
  Checked r = check(
      gpt2_like(),
      test::mesh_of("fsdp:4,tp:8", 32),
      test::specs_of(R"({"specs": {"wte": [], "h.0.attn.c_attn.weight": [],
                                     "h.0.ln_1.weight": [], "step": []}})"),
      options);
  REQUIRE(codes(r.diags) == std::vector<std::string>{"mesh.device-count"});
  CHECK(render(r.diags.items()[0])
        == "--mesh: error: number of devices 64 must equal the product of mesh_shape "
           "(4, 8) = 32; --topology v5p-128 has 64 devices [mesh.device-count]");
}

TEST_CASE("validate: unknown tensors get the nearest manifest name",
          "[validate]") {
  ValidateOptions options;
  options.replicated_warning_bytes.value = 0;
  Checked r = check(gpt2_like(),
                    test::mesh_of("dp:2", 2),
                    test::specs_of(R"({"specs": {
      "wte": [], "h.0.attn.c_atn.weight": [], "h.0.ln_1.weight": [], "step": []}})"),
                    options);
  REQUIRE(codes(r.diags)
          == std::vector<std::string>{"spec.unknown-tensor", "spec.missing"});
  CHECK(r.diags.items()[0].hint == "did you mean \"h.0.attn.c_attn.weight\"?");
}

TEST_CASE(
    "validate: planned tensors of one spec shape and dtype share one layout",
    "[validate]") {
  // TensorSharding is only a pointer to its layout: what a layout holds
  // (spec, validity, shards, bytes) must be the same for every tensor that
  // shares it, and a tensor whose check reported something keeps its own.
  const Manifest manifest = test::manifest_of(R"({"params": [
    {"name": "a", "shape": [64, 64], "dtype": "bf16"},
    {"name": "b", "shape": [64, 64], "dtype": "bf16"},
    {"name": "c", "shape": [64, 64], "dtype": "f32"},
    {"name": "d", "shape": [6, 64], "dtype": "bf16"},
    {"name": "e", "shape": [6, 64], "dtype": "bf16"},
    {"name": "f", "shape": [64, 64], "dtype": "bf16"}]})");
  const Mesh mesh = test::mesh_of("dp:4,tp:2", 8);
  Diagnostics diags;
  const std::optional<PartitionSpec> dp_tp =
      parse_spec("P('dp', 'tp')", "test", diags);
  const std::optional<PartitionSpec> tp =
      parse_spec("P(None, 'tp')", "test", diags);
  REQUIRE(dp_tp);
  REQUIRE(tp);
  // d and e: 6 rows do not split 4 ways; f: another spec object.
  const std::vector<const PartitionSpec*> specs = {
      &*dp_tp, &*dp_tp, &*dp_tp, &*dp_tp, &*dp_tp, &*tp};
  const std::vector<TensorSharding> s = validate_planned(
      manifest, mesh, specs, Location::of("plan"), ValidateOptions{}, diags);
  REQUIRE(s.size() == 6);
  CHECK(codes(diags)
        == std::vector<std::string>{"spec.indivisible", "spec.indivisible"});
  CHECK(s[0].layout == s[1].layout);  // same spec, shape and dtype
  CHECK(s[0].layout != s[2].layout);  // another dtype
  CHECK(s[3].layout != s[4].layout);  // each reported: never shared
  CHECK(s[0].layout != s[5].layout);
  CHECK(s[1].valid());
  CHECK(s[1].bytes_per_device() == int64_t{16} * 32 * 2);
  CHECK(s[2].bytes_per_device() == int64_t{16} * 32 * 4);
  CHECK(s[1].shard_shape() == std::vector<int64_t>{16, 32});
  CHECK(s[2].shards() == std::vector<int64_t>{4, 2});
  for (size_t t : {size_t{3}, size_t{4}}) {
    CHECK_FALSE(s[t].valid());
    REQUIRE(s[t].spec() != nullptr);
    CHECK(*s[t].spec() == *dp_tp);
    CHECK(s[t].shard_shape() == std::vector<int64_t>{2, 32});
    CHECK(s[t].min_bytes_per_device()
          == 0);  // the last of 4 row shards is empty
  }
  CHECK(s[5].replicas() == 4);
  CHECK(*s[5].spec() == *tp);
}

TEST_CASE("validate: tensors of one spec in a specs file share one layout",
          "[validate]") {
  // The reader gives equal specs one object; each check that reports
  // nothing is then done once per spec, shape and dtype, as for planned
  // specs, and a tensor whose check reports keeps its own layout and its
  // own diagnostic, located at its own entry.
  const Manifest manifest = test::manifest_of(R"({"params": [
    {"name": "a", "shape": [64, 64], "dtype": "bf16"},
    {"name": "b", "shape": [64, 64], "dtype": "bf16"},
    {"name": "c", "shape": [64, 64], "dtype": "f32"},
    {"name": "d", "shape": [6, 64], "dtype": "bf16"},
    {"name": "e", "shape": [6, 64], "dtype": "bf16"},
    {"name": "f", "shape": [64, 64], "dtype": "bf16"}]})");
  const SpecsFile specs = test::specs_of(R"({"specs": {
    "a": ["dp", "tp"], "b": ["dp", "tp"], "c": ["dp", "tp"],
    "d": ["dp", "tp"], "e": ["dp", "tp"], "f": [null, "tp"]}})");
  REQUIRE(specs.specs[0].spec == specs.specs[4].spec);
  Checked r = check(manifest, test::mesh_of("dp:4,tp:2", 8), specs);
  const std::vector<TensorSharding>& s = r.shardings;
  REQUIRE(codes(r.diags)
          == std::vector<std::string>{"spec.indivisible", "spec.indivisible"});
  // d and e: 6 rows do not split 4 ways.
  CHECK(r.diags.items()[0].tensor == "d");
  CHECK(r.diags.items()[0].location.pointer == "/specs/d");
  CHECK(r.diags.items()[1].tensor == "e");
  CHECK(r.diags.items()[1].location.pointer == "/specs/e");
  CHECK(s[0].layout == s[1].layout);  // same spec, shape and dtype
  CHECK(s[0].layout != s[2].layout);  // another dtype
  CHECK(s[3].layout != s[4].layout);  // each reported: never shared
  CHECK(s[0].layout != s[5].layout);  // another spec
  // 64x64 over (dp=4, tp=2): 16x32 elements a device; bf16 2 bytes, f32 4.
  CHECK(s[1].bytes_per_device() == int64_t{16} * 32 * 2);
  CHECK(s[2].bytes_per_device() == int64_t{16} * 32 * 4);
  CHECK_FALSE(s[3].valid());
  CHECK_FALSE(s[4].valid());
  CHECK(s[5].replicas() == 4);
}
