// The rules engine (docs/rules.md): each seed algorithm against cases
// worked by hand from the seed text (docs/sources.md#seeds), each eformer
// defect that we fix (docs/rules.md, "Seed defects fixed"), logical-axis
// resolution against the Flax docstring and MaxText's base.yml rules
// (docs/sources.md#logical-axis-rules), the
// engine (order, fallthrough, min_size, unmatched, presets), explain, and a
// property: preset specs always validate.
//
// Every expected value is worked out in the comment beside it.

#include "support/test_support.hpp"

#include <shardplan/io.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/validate.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

using namespace shardplan;

namespace {

// A mesh from "a:2,b:4" on exactly its product of devices.
Mesh mesh(std::string_view text) {
  int64_t devices = 1;
  size_t at = 0;
  while ((at = text.find(':', at)) != std::string_view::npos) {
    ++at;
    int64_t size = 0;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
      size = size * 10 + (text[at++] - '0');
    }
    devices *= size;
  }
  return test::mesh_of(text, devices);
}

std::string py(const PartitionSpec& spec) {
  return to_python(spec);
}

PartitionSpec spec_of(std::initializer_list<std::vector<std::string>> dims) {
  PartitionSpec spec;
  for (const auto& axes : dims) {
    spec.dims.push_back(DimSharding{axes});
  }
  return spec;
}

const std::vector<int64_t> k_scalar{};

RuleSet rules_of(std::string_view json, bool preset = false) {
  Diagnostics diags;
  std::optional<RuleSet> rules = read_rules(json, "r.json", diags);
  INFO(json);
  INFO(test::first_error(diags));
  REQUIRE(rules);
  REQUIRE_FALSE(diags.has_errors());
  rules->preset = preset;
  return std::move(*rules);
}

struct Applied {
  std::optional<RulePlan> plan;
  Diagnostics diags;
};

Applied apply(const Manifest& manifest, const Mesh& m, const RuleSet& rules) {
  Applied out;
  out.plan = apply_rules(manifest, m, rules, out.diags);
  return out;
}

// The spec of tensor `name` in `plan`.
std::string spec_text(const Manifest& manifest,
                      const RulePlan& plan,
                      std::string_view name) {
  const Tensor* t = manifest.find(name);
  REQUIRE(t != nullptr);
  return py(plan.spec(static_cast<size_t>(t - manifest.tensors().data())));
}

std::string rule_text(const Manifest& manifest,
                      const RulePlan& plan,
                      std::string_view name) {
  const Tensor* t = manifest.find(name);
  REQUIRE(t != nullptr);
  return plan.rule(static_cast<size_t>(t - manifest.tensors().data()))
      .description;
}

std::vector<std::string> codes(const Diagnostics& diags) {
  std::vector<std::string> out;
  for (const Diagnostic& d : diags.items()) {
    out.push_back(d.code);
  }
  return out;
}

// A manifest of one tensor per (name, shape, dtype).
struct T {
  T() = default;
  T(std::string n,
    std::vector<int64_t> s,
    std::string d = "bf16",
    std::vector<std::string> l = {})
      : name(std::move(n)),
        shape(std::move(s)),
        dtype(std::move(d)),
        logical(std::move(l)) {}

  std::string name;
  std::vector<int64_t> shape;
  std::string dtype = "bf16";
  std::vector<std::string> logical;  // "" for null; empty: none
};
Manifest manifest_of(const std::vector<T>& tensors) {
  std::string json = "{\"params\": [";
  for (size_t i = 0; i < tensors.size(); ++i) {
    const T& t = tensors[i];
    json +=
        fmt::format("{}{{\"name\": \"{}\", \"shape\": [{}], \"dtype\": \"{}\"",
                    i == 0 ? "" : ", ",
                    t.name,
                    fmt::join(t.shape, ", "),
                    t.dtype);
    if (!t.logical.empty()) {
      std::vector<std::string> names;
      for (const std::string& n : t.logical) {
        names.push_back(n.empty() ? "null" : "\"" + n + "\"");
      }
      json += fmt::format(", \"logical_axes\": [{}]", fmt::join(names, ", "));
    }
    json += "}";
  }
  json += "]}";
  return test::manifest_of(json);
}

}  // namespace

// ===========================================================================
// nnx `fsdp` (docs/sources.md#nnx-fsdp): skip tensors of at most
// min_size_to_shard_mb MiB; np.argsort(shape)[::-1]; the first dim not yet
// split that the axis size (product for a tuple) divides.

TEST_CASE("rules: nnx fsdp worked cases", "[rules][algorithms]") {
  const Mesh m = mesh("dp:2,fsdp:8,tp:4");
  const std::vector<std::string> fsdp{"fsdp"};
  auto run = [&](std::vector<int64_t> shape,
                 DType dtype,
                 const std::vector<std::string>& axes,
                 double mb = 4,
                 PartitionSpec current = {}) {
    return py(fsdp_tactic(shape, dtype, current, axes, mb, m));
  };
  // 4096 x 11008 bf16 = 90177536 bytes > 4 MiB; dims by size: 1 (11008),
  // 0 (4096); 11008 = 8 x 1376.
  CHECK(run({4096, 11008}, DType::bf16, fsdp) == "P(None, 'fsdp')");
  // A scalar: 4 bytes <= 4 MiB.
  CHECK(run(k_scalar, DType::f32, fsdp) == "P()");
  // 1024 x 1024 bf16 = 2 MiB <= 4 MiB: left as is.
  CHECK(run({1024, 1024}, DType::bf16, fsdp) == "P(None, None)");
  // Exactly 4 MiB (2048 x 1024 x 2 = 4194304): `<=` keeps it whole; one
  // column more (4198400 bytes) is sharded, dim 0 (2048) being the largest.
  CHECK(run({2048, 1024}, DType::bf16, fsdp) == "P(None, None)");
  CHECK(run({2048, 1025}, DType::bf16, fsdp) == "P('fsdp', None)");
  // Equal sizes: argsort is stable for small ranks, reversed: dim 1 first.
  CHECK(run({4096, 4096}, DType::bf16, fsdp) == "P(None, 'fsdp')");
  CHECK(run({8, 4096, 4096}, DType::bf16, fsdp) == "P(None, None, 'fsdp')");
  // Nothing divides: 50257 = 8 x 6282 + 1, 771 = 8 x 96 + 3.
  CHECK(run({50257, 771}, DType::bf16, fsdp) == "P(None, None)");
  // The largest does not divide, the next does: 768 = 8 x 96.
  CHECK(run({50257, 768}, DType::bf16, fsdp) == "P(None, 'fsdp')");
  // A tuple of axes splits over the product, dp x fsdp = 16: 11008 = 16 x 688.
  CHECK(run({4096, 11008}, DType::bf16, {"dp", "fsdp"})
        == "P(None, ('dp', 'fsdp'))");
  // 4104 = 16 x 256 + 8 does not take 16; 2048 does (f32: 33.6 MB).
  CHECK(run({4104, 2048}, DType::f32, {"dp", "fsdp"})
        == "P(None, ('dp', 'fsdp'))");
  // Size-1 dims (min_size_mb 0: any non-empty tensor): order 2, 1, 0.
  CHECK(run({1, 1, 8192}, DType::bf16, fsdp, 0) == "P(None, None, 'fsdp')");
  // 3 and 1 are not multiples of 8.
  CHECK(run({1, 3}, DType::f32, fsdp, 0) == "P(None, None)");
  // Zero bytes are never more than 0 MiB.
  CHECK(run({0, 8}, DType::f32, fsdp, 0) == "P(None, None)");
  // A dim already split is passed over: dim 1 holds tp, dim 0 takes fsdp.
  CHECK(run({4096, 11008}, DType::bf16, fsdp, 4, spec_of({{}, {"tp"}}))
        == "P('fsdp', 'tp')");
  // Half a MiB: 512 x 512 bf16 is exactly 524288 bytes (kept); 512 x 513 is
  // more; 513 = 8 x 64 + 1 fails, 512 takes fsdp.
  CHECK(run({512, 512}, DType::bf16, fsdp, 0.5) == "P(None, None)");
  CHECK(run({512, 513}, DType::bf16, fsdp, 0.5) == "P('fsdp', None)");
}

TEST_CASE("rules: nnx fsdp skips axes of size 1", "[rules][algorithms]") {
  const Mesh m = mesh("fsdp:8,one:1");
  // Only a size-1 axis: nothing to split.
  CHECK(py(fsdp_tactic(
            std::vector<int64_t>{4096, 11008}, DType::bf16, {}, {"one"}, 4, m))
        == "P(None, None)");
  // (one, fsdp) splits 8 ways, as fsdp alone does.
  CHECK(py(fsdp_tactic(std::vector<int64_t>{4096, 11008},
                       DType::bf16,
                       {},
                       {"one", "fsdp"},
                       4,
                       m))
        == "P(None, 'fsdp')");
}

TEST_CASE("rules: nnx replicate conflicts with a split spec",
          "[rules][algorithms]") {
  // The seed: "Conflict: {name} already has a sharding spec {cur_spec},
  // cannot replicate" unless every entry is None.
  CHECK(replicate_tactic(spec_of({{}, {}}), 2) == spec_of({{}, {}}));
  CHECK(replicate_tactic(PartitionSpec{}, 2) == spec_of({{}, {}}));
  CHECK(replicate_tactic(PartitionSpec{}, 0) == PartitionSpec{});
  CHECK_FALSE(replicate_tactic(spec_of({{"fsdp"}, {}}), 2).has_value());
  CHECK_FALSE(replicate_tactic(spec_of({{}, {"dp", "tp"}}), 2).has_value());
}

// ===========================================================================
// eformer AutoShardingRule (eformer-sharding-rules.txt): skip arrays smaller
// than min_shard_size (default: the device count); dims largest first
// (smallest with reverse); each takes the first remaining axis that divides
// it; each axis once. The seed's docstring mesh: dp:2, tp:4.

TEST_CASE("rules: eformer auto worked cases", "[rules][algorithms]") {
  const Mesh m = mesh("dp:2,tp:4");
  const std::vector<std::string> axes = m.axis_names();
  auto run = [&](std::vector<int64_t> shape,
                 bool reverse = false,
                 int64_t min = 8,
                 std::vector<std::string> a = {}) {
    return py(auto_spec(shape, a.empty() ? axes : a, min, reverse, m));
  };
  // Dims: 1 (4096), 0 (1024). Dim 1 takes dp (the first axis, 2 | 4096),
  // dim 0 takes tp (4 | 1024).
  CHECK(run({1024, 4096}) == "P('tp', 'dp')");
  // reverse: dim 0 first takes dp, dim 1 takes tp.
  CHECK(run({1024, 4096}, true) == "P('dp', 'tp')");
  // A scalar has 1 element < 8 devices.
  CHECK(run(k_scalar) == "P()");
  // 6 elements < 8.
  CHECK(run({2, 3}) == "P(None, None)");
  // 8 elements >= 8: the one dim takes dp; tp is left over.
  CHECK(run({8}) == "P('dp')");
  // 63 elements, but 7 and 9 are odd: nothing divides.
  CHECK(run({7, 9}) == "P(None, None)");
  // Equal sizes go in dim order, either way.
  CHECK(run({4096, 4096}) == "P('dp', 'tp')");
  CHECK(run({4096, 4096}, true) == "P('dp', 'tp')");
  // Axes run out: dim 2 gets nothing.
  CHECK(run({64, 64, 64}) == "P('dp', 'tp', None)");
  // Size-1 dims: dim 1 (4096) takes dp; 1 is divisible by neither 2 nor 4.
  CHECK(run({1, 4096, 1}) == "P(None, 'dp', None)");
  // The order of the rule's axes does not matter: mesh order.
  CHECK(run({1024, 4096}, false, 8, {"tp", "dp"}) == "P('tp', 'dp')");
  // Only tp offered: dim 1 takes it, dim 0 has none left.
  CHECK(run({1024, 4096}, false, 8, {"tp"}) == "P(None, 'tp')");
  // An explicit min_shard_size: 64 elements is enough, 63 is not.
  CHECK(run({8, 8}, false, 64) == "P('dp', 'tp')");
  CHECK(run({7, 9}, false, 64) == "P(None, None)");
}

TEST_CASE("rules: eformer auto on a 3x2 mesh", "[rules][algorithms]") {
  const Mesh m = mesh("a:3,b:2");
  const std::vector<std::string> axes = m.axis_names();
  // Dim 1 (9) first: a (3) divides it; dim 0 (4) takes b (2).
  CHECK(py(auto_spec(std::vector<int64_t>{4, 9}, axes, 6, false, m))
        == "P('b', 'a')");
  // Dim 0 (10): a (3) fails, b (2) divides; dim 1 (2): a (3) fails.
  CHECK(py(auto_spec(std::vector<int64_t>{10, 2}, axes, 6, false, m))
        == "P('b', None)");
}

TEST_CASE("rules: defect fix: auto walks axes in mesh order not a Python set",
          "[rules][algorithms]") {
  // eformer iterates `set(self.axis_names)`, whose order varies between
  // runs; the answer below depended on it (tp first gives P('dp', 'tp')).
  // We walk mesh order, whatever order the rule lists the axes in.
  const Mesh m = mesh("dp:2,tp:4");
  for (const auto& listed :
       std::vector<std::vector<std::string>>{{"dp", "tp"}, {"tp", "dp"}}) {
    CHECK(py(auto_spec(std::vector<int64_t>{1024, 4096}, listed, 8, false, m))
          == "P('tp', 'dp')");
  }
  // A size-1 axis first in the mesh would take the largest dim and split
  // nothing; it is skipped.
  const Mesh with_one = mesh("one:1,tp:4");
  CHECK(py(auto_spec(std::vector<int64_t>{1024, 4096},
                     with_one.axis_names(),
                     4,
                     false,
                     with_one))
        == "P(None, 'tp')");
}

// ===========================================================================
// eformer MemoryConstrainedShardingRule (eformer-sharding-rules.txt): P()
// when the bytes fit; axes by size, largest first; dims largest first; each
// dim the first unused dividing axis while over the limit.

TEST_CASE("rules: eformer memory worked cases", "[rules][algorithms]") {
  const Mesh m = mesh("fsdp:4,tp:2");
  const std::vector<std::string> axes = m.axis_names();
  auto run = [&](std::vector<int64_t> shape,
                 DType dtype,
                 int64_t max,
                 bool expect_fit,
                 std::vector<std::string> a = {}) {
    bool fits = !expect_fit;
    std::string out =
        py(memory_spec(shape, dtype, max, a.empty() ? axes : a, m, &fits));
    CHECK(fits == expect_fit);
    return out;
  };
  // 1024 x 1024 f32 = 4 MiB fits in 8 MiB.
  CHECK(run({1024, 1024}, DType::f32, 8 << 20, true) == "P(None, None)");
  // Max 1 MiB: dim 0 (tie: dim order) takes fsdp (the largest axis): 1 MiB.
  CHECK(run({1024, 1024}, DType::f32, 1 << 20, true) == "P('fsdp', None)");
  // Max 0.5 MiB: then dim 1 takes tp: 512 KiB.
  CHECK(run({1024, 1024}, DType::f32, 512 << 10, true) == "P('fsdp', 'tp')");
  // Max 256 KiB: every axis spent, 512 KiB per device: over.
  CHECK(run({1024, 1024}, DType::f32, 256 << 10, false) == "P('fsdp', 'tp')");
  // A scalar of 4 bytes fits in 4.
  CHECK(run(k_scalar, DType::f32, 4, true) == "P()");
  // 7 x 9 f32 = 252 bytes > 100, but nothing divides 9 or 7.
  CHECK(run({7, 9}, DType::f32, 100, false) == "P(None, None)");
  // Size-1 dims: 1 x 4096 bf16 = 8192 bytes; dim 1 takes fsdp: 2048 <= 2048.
  CHECK(run({1, 4096}, DType::bf16, 2048, true) == "P(None, 'fsdp')");
  // Only tp offered: 2 MiB per device > 1 MiB and no axis left.
  CHECK(run({1024, 1024}, DType::f32, 1 << 20, false, {"tp"})
        == "P('tp', None)");
  // i4: 3 x 4 = 12 elements, 6 bytes; dim 1 takes fsdp: 3 elements are
  // ceil(12 bits / 8) = 2 bytes <= 2.
  CHECK(run({3, 4}, DType::i4, 2, true) == "P(None, 'fsdp')");
}

TEST_CASE("rules: eformer memory keeps the order of equal axes",
          "[rules][algorithms]") {
  const Mesh m = mesh("a:2,b:2,c:4");
  // 16 x 16 bf16 = 512 bytes, max 100. Axes by size: c, then a and b in the
  // order given. Dim 0 takes c (128 bytes), dim 1 the next: 64 bytes.
  bool fits = false;
  CHECK(py(memory_spec(std::vector<int64_t>{16, 16},
                       DType::bf16,
                       100,
                       {"a", "b", "c"},
                       m,
                       &fits))
        == "P('c', 'a')");
  CHECK(fits);
  CHECK(py(memory_spec(std::vector<int64_t>{16, 16},
                       DType::bf16,
                       100,
                       {"b", "a", "c"},
                       m,
                       &fits))
        == "P('c', 'b')");
  // The largest axis does not divide: on a:3,b:2, 8 x 6 f32 = 192 bytes, max
  // 64. Dim 0 (8): a fails, b divides (96 bytes); dim 1 (6) takes a: 32.
  const Mesh odd = mesh("a:3,b:2");
  CHECK(py(memory_spec(std::vector<int64_t>{8, 6},
                       DType::f32,
                       64,
                       odd.axis_names(),
                       odd,
                       &fits))
        == "P('b', 'a')");
  CHECK(fits);
}

TEST_CASE("rules: defect fix: memory lets a dim take a second axis",
          "[rules][algorithms]") {
  // eformer gives each dim at most one axis and stops, fitting or not. On
  // fsdp:4,tp:2, 1024 x 3 f32 = 12288 bytes, max 2000: dim 0 takes fsdp
  // (3072 bytes), tp does not divide 3, and the seed stops at P('fsdp',
  // None), over the limit. We let dim 0 take tp too: 1024 / 8 x 3 x 4 =
  // 1536 bytes.
  const Mesh m = mesh("fsdp:4,tp:2");
  bool fits = false;
  Trace trace;
  CHECK(py(memory_spec(std::vector<int64_t>{1024, 3},
                       DType::f32,
                       2000,
                       m.axis_names(),
                       m,
                       &fits,
                       &trace))
        == "P(('fsdp', 'tp'), None)");
  CHECK(fits);
  CHECK(std::any_of(trace.begin(), trace.end(), [](const TraceStep& s) {
    return s.text == "still over the limit: dims may take further axes";
  }));
}

// ===========================================================================
// eformer MeshPartitionHelper (eformer-mesh-helpers.txt).

TEST_CASE("rules: eformer mesh helper suggested methods",
          "[rules][algorithms]") {
  using Methods = std::vector<std::vector<std::string>>;
  const Mesh m = mesh("dp:2,fsdp:4,tp:2,sp:2");
  // Rank 2 with 1024 x 4096 >= fsdp x sp: [fsdp, sp]; [dp]; no [sp] (the
  // pair has it); [tp]; no [fsdp] (the pair names it).
  CHECK(suggest_methods(std::vector<int64_t>{1024, 4096}, m)
        == Methods{{"fsdp", "sp"}, {"dp"}, {"tp"}});
  // Rank 1: [dp], [tp], [fsdp].
  CHECK(suggest_methods(std::vector<int64_t>{4096}, m)
        == Methods{{"dp"}, {"tp"}, {"fsdp"}});
  // A scalar: no dp (rank > 0 needed), still tp and fsdp.
  CHECK(suggest_methods(k_scalar, m) == Methods{{"tp"}, {"fsdp"}});
  // 2 x 3 = 6 < 4 x 2: no pair, so [sp] and [fsdp] appear.
  CHECK(suggest_methods(std::vector<int64_t>{2, 3}, m)
        == Methods{{"dp"}, {"sp"}, {"tp"}, {"fsdp"}});
  // The seed's docstring mesh (dp 2, fsdp 4, ep 1, tp 2, sp 1): sp has size
  // 1, so no pair (the seed would offer [fsdp, sp], splitting nothing on sp).
  const Mesh doc = mesh("dp:2,fsdp:4,ep:1,tp:2,sp:1");
  CHECK(suggest_methods(std::vector<int64_t>{1024, 4096}, doc)
        == Methods{{"dp"}, {"tp"}, {"fsdp"}});
  // No helper axis at all.
  CHECK(suggest_methods(std::vector<int64_t>{1024, 4096}, mesh("x:8")).empty());
}

TEST_CASE("rules: eformer mesh helper create_partition_spec worked cases",
          "[rules][algorithms]") {
  const Mesh a = mesh("dp:2,fsdp:4,tp:2,sp:2");  // 32 devices
  const Mesh c = mesh("dp:2,fsdp:4,tp:2");       // 16 devices
  auto run = [](const Mesh& m, std::vector<int64_t> shape, int64_t min = 1024) {
    return py(mesh_helper_spec(shape, suggest_methods(shape, m), min, m));
  };
  // [fsdp, sp] first: 1024 x 4096 is a multiple of 8, 1024 >= 4, 4096 >= 2,
  // 4 | 1024, 2 | 4096: dims 0 and 1; the seed's `break` ends the pass.
  CHECK(run(a, {1024, 4096}) == "P('fsdp', 'sp')");
  // Rank 1: dims of at least max(1024, 4096 / 64) = 1024; dp takes dim 0.
  CHECK(run(a, {4096}) == "P('dp')");
  CHECK(run(a, k_scalar) == "P()");
  // 2 x 3: no dim reaches 1024 in either pass.
  CHECK(run(a, {2, 3}) == "P(None, None)");
  // On 16 devices, 8192 x 16: the minimum is max(1024, 131072 / 32) = 4096;
  // dp takes dim 0; 16 is below it for tp and fsdp.
  CHECK(run(c, {8192, 16}) == "P('dp', None)");
  // 4096 x 4096: the minimum is 16777216 / 32 = 524288, beyond both dims;
  // the second pass (1024) gives dim 0 to dp and dim 1 to tp.
  CHECK(run(c, {4096, 4096}) == "P('dp', 'tp')");
  // 512 x 512 with min_shard_size 1024: nothing in either pass; with 256,
  // the second pass gives dp and tp.
  CHECK(run(c, {512, 512}) == "P(None, None)");
  CHECK(run(c, {512, 512}, 256) == "P('dp', 'tp')");
  // Size-1 dim: dim 0 (1) is below 1024; dp takes dim 1.
  CHECK(run(c, {1, 8192}) == "P(None, 'dp')");
  // A mesh with none of dp, fsdp, tp, sp.
  CHECK(run(mesh("x:8"), {4096, 4096}) == "P(None, None)");
  // Nothing divides: 1031 and 1033 are odd; the first pass wants dims of
  // 1065023 / 32 = 33281, the second finds no even dim.
  CHECK(run(c, {1031, 1033}) == "P(None, None)");
  // The first pass's pair on dim 0 alone (dims 0 x 1 hold fewer than 8
  // elements; 8 | 64): only reachable with the methods given by hand.
  CHECK(py(mesh_helper_spec(
            std::vector<int64_t>{64, 0}, {{"fsdp", "sp"}}, 1024, a))
        == "P(('fsdp', 'sp'), None)");
}

TEST_CASE("rules: defect fix: mesh helper checks each axis of the pair divides",
          "[rules][algorithms]") {
  const Mesh a = mesh("dp:2,fsdp:4,tp:2,sp:2");
  auto run = [&](std::vector<int64_t> shape, int64_t min) {
    return py(mesh_helper_spec(shape, suggest_methods(shape, a), min, a));
  };
  // First pass: 6 x 4 = 24 is a multiple of 8 and 6 >= 4, 4 >= 2, so the
  // seed gives P('fsdp', 'sp'), but 4 does not divide 6. We skip the pair;
  // with min_shard_size 1, dp takes dim 0 and tp dim 1.
  CHECK(run({6, 4}, 1) == "P('dp', 'tp')");
  // Fallback pass: 1030 x 1031 f32. The first pass finds nothing (the area
  // is not a multiple of 8, 8 does not divide 1030, no dim reaches
  // 1061930 / 64 = 16592); the seed's fallback then writes P('fsdp', 'sp')
  // with no check at all (4 does not divide 1030, 2 not 1031). We skip the
  // pair and dim 0 alone (8 does not divide 1030): dp takes dim 0.
  CHECK(run({1030, 1031}, 1024) == "P('dp', None)");
  // 1032 x 1031: the area is a multiple of 8 (8 | 1032) but 2 does not
  // divide 1031; the fallback puts the pair on dim 0 (8 | 1032).
  CHECK(run({1032, 1031}, 1024) == "P(('fsdp', 'sp'), None)");
}

// ===========================================================================
// eformer ShapeBasedShardingRule: equal rank, null is a wildcard, the first
// pattern wins, else P().

TEST_CASE("rules: shape patterns match by rank and size",
          "[rules][algorithms]") {
  std::string why;
  CHECK(shape_matches(std::vector<int64_t>{4096, 1024}, {std::nullopt, 1024}));
  CHECK(shape_matches(std::vector<int64_t>{1024, 1024}, {1024, 1024}));
  CHECK(shape_matches(k_scalar, {}));
  CHECK_FALSE(shape_matches(
      std::vector<int64_t>{4096, 1024}, {std::nullopt, 2048}, &why));
  CHECK(why == "dim 1 is 1024, not 2048");
  CHECK_FALSE(
      shape_matches(std::vector<int64_t>{4096, 1024}, {std::nullopt}, &why));
  CHECK(why == "rank 2 != 1");
  CHECK_FALSE(
      shape_matches(std::vector<int64_t>{1024}, {1024, std::nullopt}, &why));
  CHECK(why == "rank 1 != 2");
}

TEST_CASE("rules: eformer shape-based rule from its docstring",
          "[rules][algorithms]") {
  // patterns = {(None, 1024): P('tp', None), (1024, 1024): P('tp', None)}
  // on a tp:4 mesh; the first match wins; no match gives P().
  const RuleSet rules = rules_of(R"({"rules": [{"shape_patterns": [
      {"shape": [null, 1024], "spec": ["tp", null]},
      {"shape": [1024, 1024], "spec": [null, "tp"]}]}]})");
  const Manifest manifest = manifest_of({{"embed", {50000, 1024}},
                                         {"square", {1024, 1024}},
                                         {"other", {1024, 4096}},
                                         {"vector", {1024}}});
  Applied r = apply(manifest, mesh("tp:4"), rules);
  REQUIRE(r.plan);
  CHECK(r.diags.items().empty());
  CHECK(spec_text(manifest, *r.plan, "embed") == "P('tp', None)");
  // (1024, 1024) matches the first pattern too: it wins.
  CHECK(spec_text(manifest, *r.plan, "square") == "P('tp', None)");
  CHECK(spec_text(manifest, *r.plan, "other") == "P(None, None)");
  CHECK(spec_text(manifest, *r.plan, "vector") == "P(None)");
  CHECK(rule_text(manifest, *r.plan, "other") == "#0 shape_patterns");
}

TEST_CASE("rules: a shape selector with a spec is the same rule",
          "[rules][algorithms]") {
  const RuleSet rules = rules_of(R"({"rules": [
      {"shape": [null, 1024], "spec": ["tp", null]},
      {"shape": [1024, 1024], "spec": [null, "tp"]},
      {"replicate": true}]})");
  const Manifest manifest =
      manifest_of({{"embed", {50000, 1024}}, {"other", {1024, 4096}}});
  Applied r = apply(manifest, mesh("tp:4"), rules);
  REQUIRE(r.plan);
  CHECK(spec_text(manifest, *r.plan, "embed") == "P('tp', None)");
  CHECK(rule_text(manifest, *r.plan, "embed") == "#0 shape [null, 1024] spec");
  CHECK(rule_text(manifest, *r.plan, "other") == "#2 replicate");
}

// ===========================================================================
// Logical axis rules: Flax linen _logical_to_mesh_axes, then MaxText's
// remove_size_one_mesh_axis (docs/sources.md#logical-axis-rules).

namespace {

std::vector<LogicalAxisRule> logical_rules(
    std::initializer_list<std::pair<std::string, std::vector<std::string>>>
        entries) {
  std::vector<LogicalAxisRule> out;
  for (const auto& [name, axes] : entries) {
    LogicalAxisRule r;
    r.name = name;
    for (const std::string& a : axes) {
      r.axes.push_back(AxisRef{a, ""});
    }
    out.push_back(std::move(r));
  }
  return out;
}

LogicalAxes names_of(std::initializer_list<const char*> names) {
  LogicalAxes out;
  for (const char* n : names) {
    out.push_back(n == nullptr ? std::nullopt : std::optional<std::string>(n));
  }
  return out;
}

}  // namespace

TEST_CASE("rules: logical axes the Flax docstring example",
          "[rules][algorithms]") {
  // flax/linen/spmd.py logical_to_mesh_axes: array_dim_names = ('batch',
  // 'length', 'heads', 'features'), rules (('batch', 'X'), ('features',
  // 'X'), ('heads', 'Y'), ('batch', 'Z')) give PartitionSpec('X', None,
  // 'Y', None): batch takes X; features cannot (X is used); heads takes Y;
  // the second batch rule finds batch assigned.
  const Mesh m = mesh("X:2,Y:2,Z:2");
  const auto rules = logical_rules({{"batch", {"X"}},
                                    {"features", {"X"}},
                                    {"heads", {"Y"}},
                                    {"batch", {"Z"}}});
  CHECK(py(resolve_logical_axes(
            names_of({"batch", "length", "heads", "features"}),
            std::vector<int64_t>{8, 16, 8, 8},
            rules,
            m,
            false))
        == "P('X', None, 'Y', None)");
}

TEST_CASE("rules: logical axes fallbacks blocking and unnamed dims",
          "[rules][algorithms]") {
  const Mesh m = mesh("X:2,Y:4,one:1");
  const std::vector<int64_t> shape{64, 64};
  auto run = [&](LogicalAxes names,
                 std::vector<LogicalAxisRule> rules,
                 bool adaptive = false,
                 std::vector<int64_t> s = {}) {
    return py(
        resolve_logical_axes(names, s.empty() ? shape : s, rules, m, adaptive));
  };
  // A repeated name is a fallback: embed's first rule takes (X, Y), so mlp
  // cannot have Y; embed's second rule finds embed assigned.
  CHECK(run(names_of({"embed", "mlp"}),
            logical_rules(
                {{"embed", {"X", "Y"}}, {"mlp", {"Y"}}, {"embed", {"X"}}}))
        == "P(('X', 'Y'), None)");
  // mlp first takes Y, so embed's first rule is blocked (Y used) and its
  // fallback gives X: MaxText's reason for listing embed twice.
  CHECK(run(names_of({"embed", "mlp"}),
            logical_rules(
                {{"mlp", {"Y"}}, {"embed", {"X", "Y"}}, {"embed", {"X"}}}))
        == "P('X', 'Y')");
  // [] assigns replicated and blocks later rules of the name.
  CHECK(run(names_of({"norm", "mlp"}),
            logical_rules({{"norm", {}}, {"norm", {"X"}}, {"mlp", {"Y"}}}))
        == "P(None, 'Y')");
  // Unnamed dims and names without a rule stay replicated.
  CHECK(run(names_of({nullptr, "mystery"}), logical_rules({{"mlp", {"Y"}}}))
        == "P(None, None)");
  // Size-1 axes are resolved like the others, then removed (MaxText).
  CHECK(run(names_of({"embed", "mlp"}),
            logical_rules({{"embed", {"X", "one"}}, {"mlp", {"one", "Y"}}}))
        == "P('X', None)");
  // Adaptive (presets): a missing axis is dropped; an axis that does not
  // divide is dropped (Y = 4 does not divide 6); a rule left empty does
  // not apply, so the next rule of the name does.
  CHECK(run(names_of({"embed", "mlp"}),
            logical_rules({{"embed", {"gone", "X"}}, {"mlp", {"Y"}}}),
            true)
        == "P('X', 'Y')");
  CHECK(
      run(names_of({"embed", "vocab"}),
          logical_rules({{"vocab", {"Y"}}, {"vocab", {"X"}}, {"embed", {"X"}}}),
          true,
          {64, 6})
      == "P(None, 'X')");
  // Greedy in order: X (2) divides 6, then Y: 2 x 4 does not.
  CHECK(run(names_of({"vocab"}),
            logical_rules({{"vocab", {"X", "Y"}}}),
            true,
            {6})
        == "P('X')");
}

TEST_CASE("rules: logical axes MaxText base.yml weight rules",
          "[rules][algorithms]") {
  // MaxText's mesh_axes, with fsdp 4, tensor 2, expert 2 and the rest 1,
  // and the weight entries of base.yml's logical_axis_rules in their order.
  const Mesh m = mesh(
      "diloco:1,data:1,stage:1,fsdp:4,fsdp_transpose:1,context:1,"
      "context_usp_ulysses:1,context_autoregressive:1,tensor:2,"
      "tensor_sequence:1,expert:2,autoregressive:1");
  const RuleSet rules = rules_of(R"({"rules": [{"logical_axes": "manifest"}],
    "logical_axis_rules": [
      ["circular_repeats", []],
      ["vocab", ["tensor", "tensor_sequence", "autoregressive"]],
      ["embed_vocab", ["fsdp", "fsdp_transpose", "context", "context_usp_ulysses", "expert"]],
      ["heads", ["tensor", "tensor_sequence", "autoregressive"]],
      ["q_heads", ["tensor", "tensor_sequence", "autoregressive"]],
      ["kv_heads", ["tensor", "tensor_sequence", "autoregressive"]],
      ["qkv", []],
      ["kv", []],
      ["kv_head_dim", []],
      ["q_lora", ["fsdp", "fsdp_transpose", "context", "context_usp_ulysses", "expert"]],
      ["q_lora", ["fsdp", "context", "context_usp_ulysses", "expert"]],
      ["q_lora_up_proj", []],
      ["kv_lora", ["fsdp", "fsdp_transpose", "context", "context_usp_ulysses", "expert"]],
      ["kv_lora", ["fsdp", "context", "context_usp_ulysses", "expert"]],
      ["kv_lora_up_proj", []],
      ["exp", "expert"],
      ["mlp_moe", ["fsdp_transpose", "tensor", "tensor_sequence", "autoregressive"]],
      ["embed_moe", ["fsdp", "fsdp_transpose", "context", "context_usp_ulysses"]],
      ["embed_moe", ["fsdp", "context", "context_usp_ulysses"]],
      ["mlp", ["fsdp_transpose", "tensor", "tensor_sequence", "autoregressive"]],
      ["embed", ["fsdp", "fsdp_transpose", "context", "context_usp_ulysses", "expert"]],
      ["embed", ["fsdp", "context", "context_usp_ulysses", "expert"]],
      ["norm", ["tensor"]],
      ["layers", "stage"]]})");
  const Manifest manifest = manifest_of({
      {"mlp.wi", {4096, 14336}, "bf16", {"embed", "mlp"}},
      {"mlp.wo", {14336, 4096}, "bf16", {"mlp", "embed"}},
      {"token_embedder", {32000, 4096}, "bf16", {"vocab", "embed"}},
      {"pre_norm", {4096}, "bf16", {"norm"}},
      {"query", {4096, 32, 128}, "bf16", {"embed", "q_heads", "kv"}},
      {"moe.wi", {8, 4096, 14336}, "bf16", {"exp", "embed_moe", "mlp_moe"}},
      {"scanned.wi", {32, 4096, 14336}, "bf16", {"layers", "embed", "mlp"}},
  });
  Applied r = apply(manifest, m, rules);
  REQUIRE(r.plan);
  INFO(test::first_error(r.diags));
  CHECK(r.diags.items().empty());
  // mlp's rule comes before embed's: dim 1 gets (fsdp_transpose, tensor,
  // tensor_sequence, autoregressive). embed's first rule needs
  // fsdp_transpose, now used: blocked; its second gives (fsdp, context,
  // context_usp_ulysses, expert). Size-1 axes removed: (fsdp, expert), tensor.
  CHECK(spec_text(manifest, *r.plan, "mlp.wi")
        == "P(('fsdp', 'expert'), 'tensor')");
  CHECK(spec_text(manifest, *r.plan, "mlp.wo")
        == "P('tensor', ('fsdp', 'expert'))");
  // vocab first: (tensor, ...); embed's first rule is free: (fsdp,
  // fsdp_transpose, context, context_usp_ulysses, expert) -> (fsdp, expert).
  CHECK(spec_text(manifest, *r.plan, "token_embedder")
        == "P('tensor', ('fsdp', 'expert'))");
  // MaxText shards norm scales over tensor.
  CHECK(spec_text(manifest, *r.plan, "pre_norm") == "P('tensor')");
  // q_heads -> tensor, kv -> [] (replicated), embed -> (fsdp, expert).
  CHECK(spec_text(manifest, *r.plan, "query")
        == "P(('fsdp', 'expert'), 'tensor', None)");
  // exp -> expert; mlp_moe -> (fsdp_transpose, tensor, ...); embed_moe's
  // first rule is blocked by fsdp_transpose, its second gives fsdp.
  CHECK(spec_text(manifest, *r.plan, "moe.wi")
        == "P('expert', 'fsdp', 'tensor')");
  // layers -> stage, of size 1: removed.
  CHECK(spec_text(manifest, *r.plan, "scanned.wi")
        == "P(None, ('fsdp', 'expert'), 'tensor')");
}

// ===========================================================================
// The engine.

TEST_CASE("rules: the first matching rule decides with re.search semantics",
          "[rules][engine]") {
  const RuleSet rules = rules_of(R"({"rules": [
      {"pattern": "embed_tokens", "spec": ["tp", "fsdp"]},
      {"pattern": "^norm", "spec": []},
      {"pattern": "(q|k|v)_proj", "spec": ["tp", null]},
      {"pattern": "proj", "spec": [null, "tp"]},
      {"pattern": ".*", "replicate": true}]})");
  const Manifest manifest = manifest_of({
      {"model.embed_tokens.weight", {32000, 4096}},
      {"model.layers.0.self_attn.q_proj.weight", {4096, 4096}},
      {"model.layers.0.self_attn.o_proj.weight", {4096, 4096}},
      {"model.norm.weight", {4096}},
      {"norm.weight", {4096}},
  });
  Applied r = apply(manifest, mesh("fsdp:4,tp:2"), rules);
  REQUIRE(r.plan);
  CHECK(r.diags.items().empty());
  // Searched anywhere in the name, like re.search.
  CHECK(spec_text(manifest, *r.plan, "model.embed_tokens.weight")
        == "P('tp', 'fsdp')");
  CHECK(rule_text(manifest, *r.plan, "model.embed_tokens.weight")
        == "#0 pattern \"embed_tokens\" spec");
  // Both #2 and #3 match q_proj: #2 comes first.
  CHECK(spec_text(manifest, *r.plan, "model.layers.0.self_attn.q_proj.weight")
        == "P('tp', None)");
  CHECK(spec_text(manifest, *r.plan, "model.layers.0.self_attn.o_proj.weight")
        == "P(None, 'tp')");
  // "^norm" anchors at the start: model.norm.weight falls to #4.
  CHECK(rule_text(manifest, *r.plan, "model.norm.weight")
        == "#4 pattern \".*\" replicate");
  CHECK(rule_text(manifest, *r.plan, "norm.weight")
        == "#1 pattern \"^norm\" spec");
  CHECK(spec_text(manifest, *r.plan, "norm.weight") == "P(None)");
  // The plan's rule index is the rule's position.
  const RuleRef& ref = r.plan->rule(0);
  CHECK(ref.decider == Decider::rule);
  CHECK(ref.rule_index() == std::optional<size_t>(0));
}

TEST_CASE("rules: min_elements and shape selectors combine",
          "[rules][engine]") {
  const RuleSet rules = rules_of(R"({"rules": [
      {"pattern": "w", "shape": [null, 1024], "min_elements": 1048576, "spec": ["x", null]},
      {"pattern": "w", "min_elements": 1024, "spec": [null, "x"]},
      {"replicate": true}]})");
  const Manifest manifest = manifest_of({{"w.big", {1024, 1024}},
                                         {"w.narrow", {1023, 1024}},
                                         {"w.tiny", {2, 2}}});
  Applied r = apply(manifest, mesh("x:2"), rules);
  REQUIRE(r.plan);
  // 1048576 elements: #0. 1023 x 1024 = 1047552 < 1048576: #1.
  CHECK(spec_text(manifest, *r.plan, "w.big") == "P('x', None)");
  CHECK(rule_text(manifest, *r.plan, "w.big")
        == "#0 pattern \"w\" shape [null, 1024] min_elements 1048576 spec");
  CHECK(spec_text(manifest, *r.plan, "w.narrow") == "P(None, 'x')");
  CHECK(rule_text(manifest, *r.plan, "w.tiny") == "#2 replicate");
}

TEST_CASE("rules: scalars and min_size are replicated before any rule",
          "[rules][engine]") {
  const RuleSet rules =
      rules_of(R"({"rules": [{"pattern": ".*", "spec": ["x"]}],
                                    "min_size": 1024})");
  const Manifest manifest = manifest_of({{"step", {}, "i32"},
                                         {"bias", {1023}},
                                         {"edge", {1024}},
                                         {"empty", {0}}});
  Applied r = apply(manifest, mesh("x:2"), rules);
  REQUIRE(r.plan);
  CHECK(r.diags.items().empty());
  CHECK(spec_text(manifest, *r.plan, "step") == "P()");
  CHECK(rule_text(manifest, *r.plan, "step") == "scalar");
  CHECK(r.plan->rule(0).decider == Decider::scalar);
  CHECK_FALSE(r.plan->rule(0).rule_index().has_value());
  // 1023 < 1024 elements; 1024 is not under min_size.
  CHECK(spec_text(manifest, *r.plan, "bias") == "P(None)");
  CHECK(rule_text(manifest, *r.plan, "bias") == "min_size");
  CHECK(spec_text(manifest, *r.plan, "edge") == "P('x')");
  CHECK(rule_text(manifest, *r.plan, "empty") == "min_size");
}

TEST_CASE("rules: unmatched tensors are errors or replicated",
          "[rules][engine]") {
  const Manifest manifest =
      manifest_of({{"a.weight", {8, 8}}, {"b.weight", {8, 8}}, {"c", {8}}});
  RuleSet rules = rules_of(R"({"rules": [{"pattern": "^a", "spec": ["x"]}]})");
  Applied r = apply(manifest, mesh("x:2"), rules);
  REQUIRE(r.plan);
  REQUIRE(codes(r.diags)
          == std::vector<std::string>{"rules.unmatched", "rules.unmatched"});
  CHECK(render(r.diags.items()[0])
        == "m.json:/params/1: error: no rule matches tensor \"b.weight\"; add a "
           "rule for it, or set \"unmatched\": \"replicate\" [rules.unmatched]");
  CHECK(r.diags.items()[0].tensor == "b.weight");
  CHECK(r.diags.items()[1].tensor == "c");
  CHECK(spec_text(manifest, *r.plan, "b.weight") == "P(None, None)");
  CHECK(rule_text(manifest, *r.plan, "b.weight") == "unmatched");
  CHECK(r.plan->rule(1).decider == Decider::unmatched);

  rules.unmatched = Unmatched::replicate;
  Applied quiet = apply(manifest, mesh("x:2"), rules);
  REQUIRE(quiet.plan);
  CHECK(quiet.diags.items().empty());
  CHECK(rule_text(manifest, *quiet.plan, "c") == "unmatched");
}

TEST_CASE("rules: fallthrough tries the next rule after a replicated result",
          "[rules][engine]") {
  const RuleSet rules = rules_of(R"({"rules": [
      {"pattern": "w", "auto": {"axes": ["x"]}, "fallthrough": true},
      {"pattern": "w", "spec": [null, "y"]},
      {"pattern": "v", "auto": {"axes": ["x"]}, "fallthrough": true}]})");
  const Manifest manifest =
      manifest_of({{"w.even", {8, 3}}, {"w.odd", {7, 4}}, {"v.odd", {7, 9}}});
  Applied r = apply(manifest, mesh("x:2,y:2"), rules);
  REQUIRE(r.plan);
  // auto on x:2: 8 divides, so #0 decides.
  CHECK(spec_text(manifest, *r.plan, "w.even") == "P('x', None)");
  CHECK(rule_text(manifest, *r.plan, "w.even") == "#0 pattern \"w\" auto");
  // 7 x 4: dim 1 (4) takes x, so #0 decides this one too.
  CHECK(spec_text(manifest, *r.plan, "w.odd") == "P(None, 'x')");
  // 7 x 9: x divides neither; #2 falls through and nothing follows: it
  // stays replicated, decided by #2, and is not unmatched.
  CHECK(spec_text(manifest, *r.plan, "v.odd") == "P(None, None)");
  CHECK(rule_text(manifest, *r.plan, "v.odd") == "#2 pattern \"v\" auto");
  CHECK(r.diags.items().empty());
}

TEST_CASE(
    "rules: defect fix: fallthrough treats an all-null spec as replicated",
    "[rules][engine]") {
  // eformer's CompositeShardingRule takes the first spec != P(); when no
  // axis divides, AutoShardingRule returns P(None, None), which is != P(),
  // so the composite stops there and the next rule never runs. Here auto
  // finds nothing for 7 x 9 on x:2 and the next rule decides.
  const Manifest manifest = manifest_of({{"odd", {7, 9}}});
  const RuleSet only_x = rules_of(R"({"rules": [
      {"auto": {"axes": ["x"]}, "fallthrough": true},
      {"spec": [null, "y"]}]})");
  Applied s = apply(manifest, mesh("x:2,y:3"), only_x);
  REQUIRE(s.plan);
  CHECK(spec_text(manifest, *s.plan, "odd") == "P(None, 'y')");
  CHECK(rule_text(manifest, *s.plan, "odd") == "#1 spec");
}

TEST_CASE(
    "rules: defect fix: a spec longer than the rank is an error not truncated",
    "[rules][engine]") {
  // eformer's match_partition_rules cuts such a spec to the rank; JAX
  // refuses it, and a user's file gets an error naming the tensor.
  const RuleSet rules =
      rules_of(R"({"rules": [{"pattern": "b", "spec": ["x", null]}]})");
  const Manifest manifest = manifest_of({{"bias", {8}}});
  Applied r = apply(manifest, mesh("x:2"), rules);
  REQUIRE(r.plan);
  REQUIRE(codes(r.diags) == std::vector<std::string>{"rules.rank"});
  CHECK(render(r.diags.items()[0])
        == "r.json:/rules/0/spec: error: sharding P('x', None) is only valid "
           "for values of rank at least 2, but was applied to \"bias\" of rank "
           "1; the tensor's shape is (8,) [rules.rank]");
  CHECK(spec_text(manifest, *r.plan, "bias") == "P(None)");
  // A preset's spec that is too long does not apply: the next rule decides.
  RuleSet preset = rules_of(R"({"rules": [{"pattern": "b", "spec": ["x", null]},
                                          {"spec": ["x"]}]})",
                            true);
  Applied p = apply(manifest, mesh("x:2"), preset);
  REQUIRE(p.plan);
  CHECK(p.diags.items().empty());
  CHECK(spec_text(manifest, *p.plan, "bias") == "P('x')");
}

TEST_CASE("rules: defect fix: unknown axes in a user's file are located errors",
          "[rules][engine]") {
  // eformer's ShardingAnalyzer raised KeyError on such names (and never
  // checked unknown or duplicate axes); a user's rules file naming an axis
  // the mesh lacks is an input error at its JSON pointer, every one of them.
  const RuleSet rules = rules_of(R"({"rules": [
      {"pattern": "a", "spec": ["tpp", null]},
      {"pattern": "b", "fsdp": {"axis": ["dp", "fsdq"]}},
      {"pattern": "c", "auto": {"axes": ["zz"]}}],
    "logical_axis_rules": [["embed", ["fsdp", "data"]]]})");
  const Manifest manifest = manifest_of({{"a", {8, 8}}});
  Applied r = apply(manifest, mesh("dp:2,fsdp:2,tp:2"), rules);
  CHECK_FALSE(r.plan);
  REQUIRE(codes(r.diags) == std::vector<std::string>(4, "rules.unknown-axis"));
  CHECK(render(r.diags.items()[0])
        == "r.json:/rules/0/spec/0: error: unknown axis \"tpp\"; did you mean "
           "\"tp\"? [rules.unknown-axis]");
  CHECK(r.diags.items()[1].location.pointer == "/rules/1/fsdp/axis/1");
  CHECK(r.diags.items()[1].hint == "did you mean \"fsdp\"?");
  CHECK(render(r.diags.items()[2])
        == "r.json:/rules/2/auto/axes/0: error: unknown axis \"zz\"; the mesh's "
           "axes are \"dp\", \"fsdp\", \"tp\" [rules.unknown-axis]");
  CHECK(r.diags.items()[3].location.pointer == "/logical_axis_rules/0/1/1");
  // The same rules as a preset: the missing axes are dropped, no error.
  RuleSet preset = rules;
  preset.preset = true;
  Applied p = apply(manifest, mesh("dp:2,fsdp:2,tp:2"), preset);
  REQUIRE(p.plan);
  CHECK(p.diags.items().empty());
  // tpp is dropped from #0's spec.
  CHECK(spec_text(manifest, *p.plan, "a") == "P(None, None)");
}

TEST_CASE("rules: defect fix: min_size comes from the file not the environment",
          "[rules][engine]") {
  // eformer's match_partition_rules reads MIN_SHARDING_SIZE (default 16384)
  // when min_size is not given. Here min_size defaults to 0 whatever the
  // environment says: an 8-element tensor is decided by the rule.
  ::setenv("MIN_SHARDING_SIZE", "16384", 1);
  const RuleSet rules = rules_of(R"({"rules": [{"spec": ["x"]}]})");
  CHECK(rules.min_size == 0);
  const Manifest manifest = manifest_of({{"w", {8}}});
  Applied r = apply(manifest, mesh("x:2"), rules);
  ::unsetenv("MIN_SHARDING_SIZE");
  REQUIRE(r.plan);
  CHECK(spec_text(manifest, *r.plan, "w") == "P('x')");
  CHECK(rule_text(manifest, *r.plan, "w") == "#0 spec");
}

TEST_CASE("rules: presets drop missing axes and fall back on indivisible dims",
          "[rules][engine]") {
  // An fsdp-tp style preset: on fsdp:64 it is plain FSDP; gpt2's vocabulary
  // of 50257 (prime to 2) takes no axis on dim 0.
  const RuleSet preset = rules_of(R"({"rules": [
      {"pattern": "wte", "spec": ["tp", "fsdp"]},
      {"pattern": "c_attn", "spec": ["fsdp", ["tp", "ep"]]},
      {"pattern": "experts", "spec": ["ep", "fsdp", "tp"]},
      {"pattern": ".*", "replicate": true}]})",
                                  true);
  const Manifest manifest =
      manifest_of({{"wte", {50257, 768}},
                   {"h.0.attn.c_attn.weight", {768, 2304}},
                   {"experts.0.w", {8, 768, 3072}}});
  Applied only_fsdp = apply(manifest, mesh("fsdp:64"), preset);
  REQUIRE(only_fsdp.plan);
  CHECK(only_fsdp.diags.items().empty());
  // wte: tp is missing; 64 divides 768 = 64 x 12.
  CHECK(spec_text(manifest, *only_fsdp.plan, "wte") == "P(None, 'fsdp')");
  CHECK(spec_text(manifest, *only_fsdp.plan, "h.0.attn.c_attn.weight")
        == "P('fsdp', None)");
  // experts: ep and tp are missing; 64 | 768.
  CHECK(spec_text(manifest, *only_fsdp.plan, "experts.0.w")
        == "P(None, 'fsdp', None)");

  Applied tp = apply(manifest, mesh("fsdp:4,tp:8,ep:1"), preset);
  REQUIRE(tp.plan);
  CHECK(tp.diags.items().empty());
  // wte: 8 does not divide 50257: dropped; 4 | 768.
  CHECK(spec_text(manifest, *tp.plan, "wte") == "P(None, 'fsdp')");
  // c_attn: (tp, ep) with ep of size 1 dropped: tp; 8 | 2304.
  CHECK(spec_text(manifest, *tp.plan, "h.0.attn.c_attn.weight")
        == "P('fsdp', 'tp')");
  // experts: ep has size 1: dropped; 4 | 768, 8 | 3072.
  CHECK(spec_text(manifest, *tp.plan, "experts.0.w")
        == "P(None, 'fsdp', 'tp')");
}

TEST_CASE("rules: logical_axes from the manifest or a list",
          "[rules][engine]") {
  const RuleSet rules = rules_of(R"({"rules": [
      {"logical_axes": "manifest"},
      {"pattern": "q_proj", "logical_axes": ["q_heads", "embed"]},
      {"replicate": true}],
    "logical_axis_rules": [["embed", "fsdp"], ["mlp", ["tp"]], ["q_heads", "tp"],
                           ["norm", []]]})");
  const Manifest manifest = manifest_of({
      {"up_proj", {14336, 4096}, "bf16", {"mlp", "embed"}},
      {"norm", {4096}, "bf16", {"norm"}},
      {"q_proj", {4096, 4096}},
      {"other", {4096, 4096}},
  });
  Applied r = apply(manifest, mesh("fsdp:4,tp:2"), rules);
  REQUIRE(r.plan);
  CHECK(r.diags.items().empty());
  CHECK(spec_text(manifest, *r.plan, "up_proj") == "P('tp', 'fsdp')");
  CHECK(spec_text(manifest, *r.plan, "norm") == "P(None)");
  // No logical_axes in the manifest: #0 does not apply; #1 does.
  CHECK(spec_text(manifest, *r.plan, "q_proj") == "P('tp', 'fsdp')");
  CHECK(rule_text(manifest, *r.plan, "q_proj")
        == "#1 pattern \"q_proj\" logical_axes");
  CHECK(rule_text(manifest, *r.plan, "other") == "#2 replicate");
}

TEST_CASE("rules: a manifest's repeated logical name is an error",
          "[rules][engine]") {
  const RuleSet rules = rules_of(R"({"rules": [{"logical_axes": "manifest"}],
                                    "logical_axis_rules": [["embed", "x"]]})");
  const Manifest manifest =
      manifest_of({{"w", {8, 8}, "bf16", {"embed", "embed"}}});
  Applied r = apply(manifest, mesh("x:2"), rules);
  REQUIRE(r.plan);
  REQUIRE(codes(r.diags)
          == std::vector<std::string>{"rules.duplicate-logical-axis"});
  CHECK(test::first_line_without_code(r.diags.items()[0])
        == "m.json:/params/0/logical_axes: error: logical axis \"embed\" names "
           "dims 0 and 1 of \"w\"; a logical axis may name one dim (Flax: "
           "\"Unsupported: Dimensions ... occur more than once\")");
  CHECK(spec_text(manifest, *r.plan, "w") == "P(None, None)");
}

TEST_CASE("rules: the other yields through the engine", "[rules][yields]") {
  const RuleSet rules = rules_of(R"({"rules": [
      {"pattern": "fsdp", "fsdp": {"axis": "x", "min_size_mb": 0}},
      {"pattern": "mem", "memory": {"max_bytes_per_device": 2048}},
      {"pattern": "helper", "mesh_helper": {"min_shard_size": 4}},
      {"pattern": "auto", "auto": {"reverse": true, "min_shard_size": 1}}]})");
  const Manifest manifest = manifest_of({{"fsdp", {6, 4}, "f32"},
                                         {"mem", {64, 64}, "f32"},
                                         {"helper", {16, 16}, "f32"},
                                         {"auto", {16, 4}, "f32"}});
  Applied r = apply(manifest, mesh("x:2,tp:4"), rules);
  REQUIRE(r.plan);
  INFO(test::first_error(r.diags));
  CHECK(r.diags.items().empty());
  // fsdp on x (2): dims by size, dim 0 (6) first: 2 | 6.
  CHECK(spec_text(manifest, *r.plan, "fsdp") == "P('x', None)");
  // 64 x 64 f32 = 16384 bytes > 2048: axes by size tp (4), x (2); dim 0
  // takes tp (4096 bytes), dim 1 takes x: 2048, which fits.
  CHECK(spec_text(manifest, *r.plan, "mem") == "P('tp', 'x')");
  // Methods: [tp] (no dp, fsdp, sp). The minimum: max(4, 256 / 16) = 16:
  // tp takes dim 0 (16).
  CHECK(spec_text(manifest, *r.plan, "helper") == "P('tp', None)");
  // reverse: dim 1 (4) first takes x; dim 0 (16) takes tp.
  CHECK(spec_text(manifest, *r.plan, "auto") == "P('tp', 'x')");
}

TEST_CASE("rules: memory warns once per rule about tensors over the limit",
          "[rules][engine]") {
  const RuleSet rules = rules_of(R"({"rules": [
      {"memory": {"max_bytes_per_device": 1024}}]})");
  const Manifest manifest = manifest_of(
      {{"a", {64, 64}, "f32"}, {"b", {64, 32}, "f32"}, {"c", {16, 16}, "f32"}});
  Applied r = apply(manifest, mesh("x:2,tp:4"), rules);
  REQUIRE(r.plan);
  // a: 16384 bytes over 8 devices = 2048 > 1024. b: 8192 / 8 = 1024 fits.
  // c: 1024 bytes fit whole.
  REQUIRE(codes(r.diags) == std::vector<std::string>{"rules.memory-unmet"});
  const Diagnostic& d = r.diags.items()[0];
  CHECK(d.severity == Severity::warning);
  CHECK(render(d)
        == "r.json:/rules/0/memory/max_bytes_per_device: warning: 1 tensor still "
           "exceeds max_bytes_per_device 1024 with every axis that divides "
           "spent (#0 memory); the largest, \"a\", holds 2048 bytes per device "
           "[rules.memory-unmet]");
  CHECK(d.tensor == "a");
}

TEST_CASE(
    "rules: a preset warns about large tensors it leaves unsplit over "
    "an axis it splits others over",
    "[rules][engine]") {
  const std::string json = R"({"rules": [
      {"pattern": "^a$", "spec": ["tp", null]},
      {"pattern": "^b$", "spec": ["tp", "x"]},
      {"pattern": "^c$", "spec": [null, "x"]},
      {"pattern": "^d$", "auto": {"axes": ["x"], "min_shard_size": 1}},
      {"pattern": "^e$", "spec": [["x", "tp"], null]},
      {"pattern": "^v$", "logical_axes": ["vocab", "embed"]}],
    "logical_axis_rules": [["vocab", "tp"], ["embed", "x"]]})";
  // On x:2,tp:4, f32:
  //   a [8, 4]  tp | 8: P('tp', None); whole over x, which its spec leaves
  //             out: no warning
  //   b [6, 4]  4 does not divide 6: tp dropped; x | 4: P(None, 'x'); 96
  //             bytes: warned (dim 0; 8 is the next multiple of 4)
  //   c [8, 8]  P(None, 'x') by its spec: no warning
  //   d [8, 8]  auto over x, equal dims in dim order: P('x', None); auto
  //             places by size: warned, no dim
  //   e [6, 4]  x | 6 is kept, then x * tp = 8 does not divide 6: tp
  //             dropped: P('x', None), warned (8 is also the next multiple)
  //   v [6, 8]  "vocab" asks for tp, 4 does not divide 6: the entry has no
  //             axis left and does not apply; "embed" x | 8: P(None, 'x');
  //             warned through the logical name
  const Manifest manifest = manifest_of({{"a", {8, 4}, "f32"},
                                         {"b", {6, 4}, "f32"},
                                         {"c", {8, 8}, "f32"},
                                         {"d", {8, 8}, "f32"},
                                         {"e", {6, 4}, "f32"},
                                         {"v", {6, 8}, "f32"}});
  const Mesh m = mesh("x:2,tp:4");
  const ApplyOptions options{1, "--warn-replicated"};
  Diagnostics diags;
  std::optional<RulePlan> plan =
      apply_rules(manifest, m, rules_of(json, true), diags, options);
  REQUIRE(plan);
  CHECK(spec_text(manifest, *plan, "b") == "P(None, 'x')");
  CHECK(spec_text(manifest, *plan, "d") == "P('x', None)");
  CHECK(spec_text(manifest, *plan, "e") == "P('x', None)");
  CHECK(spec_text(manifest, *plan, "v") == "P(None, 'x')");
  std::vector<std::string> lines;
  for (const Diagnostic& d : diags.items()) {
    CHECK(d.code == "rules.unsplit-large");
    CHECK(d.severity == Severity::warning);
    lines.push_back(test::first_line_without_code(d));
  }
  CHECK(lines
        == std::vector<std::string>{
            "m.json:/params/1: warning: tensor \"b\" (96 bytes) is replicated "
            "over mesh axis 'tp' (4), which the preset splits other tensors "
            "over (first: \"a\"); rule #1 asks for 'tp' on dim 0, but 6 is "
            "not a multiple of 4; padded to 8 the dim would take it; the "
            "warning starts at 1 bytes (--warn-replicated)",
            "m.json:/params/3: warning: tensor \"d\" (256 bytes) is "
            "replicated over mesh axis 'tp' (4), which the preset splits "
            "other tensors over (first: \"a\"); rule #3 (pattern \"^d$\" "
            "auto) decided it by size alone, not by what the tensor is; a "
            "rules file with a rule for it can split it over 'tp'; the "
            "warning starts at 1 bytes (--warn-replicated)",
            "m.json:/params/4: warning: tensor \"e\" (96 bytes) is replicated "
            "over mesh axis 'tp' (4), which the preset splits other tensors "
            "over (first: \"a\"); rule #4 asks for 'tp' on dim 0, but 6 is "
            "not a multiple of 8 ('tp' times the axes kept before it on the "
            "dim); padded to 8 the dim would take it; the warning starts at "
            "1 bytes (--warn-replicated)",
            "m.json:/params/5: warning: tensor \"v\" (192 bytes) is "
            "replicated over mesh axis 'tp' (4), which the preset splits "
            "other tensors over (first: \"a\"); rule #5 asks for 'tp' on dim "
            "0 through logical axis \"vocab\" (logical_axis_rules entry 0), "
            "but 6 is not a multiple of 4; padded to 8 the dim would take "
            "it; the warning starts at 1 bytes (--warn-replicated)"});
  REQUIRE(diags.items().size() == 4);
  CHECK(diags.items()[0].dim == 0);
  CHECK_FALSE(diags.items()[1].dim);

  // 96 bytes is the smallest warned tensor: from 97 bytes only d and v.
  Diagnostics above;
  REQUIRE(apply_rules(manifest,
                      m,
                      rules_of(json, true),
                      above,
                      ApplyOptions{97, "--warn-replicated"}));
  std::vector<std::string> tensors;
  for (const Diagnostic& d : above.items()) {
    tensors.push_back(d.tensor.value_or(""));
  }
  CHECK(tensors == std::vector<std::string>{"d", "v"});

  // A user's file: nothing is dropped behind the user's back (b's and e's
  // specs are left to the validator, which reports them indivisible), and
  // the file says what each tensor gets: no warning.
  Diagnostics user;
  REQUIRE(apply_rules(manifest, m, rules_of(json, false), user, options));
  CHECK(user.items().empty());
}

TEST_CASE("rules: identical keys share one decision", "[rules][engine]") {
  std::vector<T> tensors;
  for (int layer = 0; layer < 50; ++layer) {
    tensors.push_back(
        {fmt::format("layers.{}.mlp.up_proj", layer), {4096, 14336}});
    tensors.push_back(
        {fmt::format("layers.{}.mlp.down_proj", layer), {14336, 4096}});
    tensors.push_back({fmt::format("layers.{}.norm", layer), {4096}, "f32"});
  }
  const Manifest manifest = manifest_of(tensors);
  const RuleSet rules = rules_of(R"({"rules": [
      {"pattern": "up_proj", "spec": ["tp", "fsdp"]},
      {"pattern": "mlp", "fsdp": {"axis": "fsdp"}},
      {"replicate": true}]})");
  Applied r = apply(manifest, mesh("fsdp:4,tp:2"), rules);
  REQUIRE(r.plan);
  REQUIRE(r.plan->size() == 150);
  // Three keys: (up_proj + mlp, 4096 x 14336), (mlp, 14336 x 4096), (none,
  // 4096 f32).
  CHECK(r.plan->decisions.size() == 3);
  CHECK(py(r.plan->spec(149 - 2)) == "P('tp', 'fsdp')");
  // down_proj: 14336 x 4096 bf16 is 112 MiB; dim 0 is the largest.
  CHECK(py(r.plan->spec(149 - 1)) == "P('fsdp', None)");
  CHECK(py(r.plan->spec(149)) == "P(None)");
}

TEST_CASE("rules: more than 63 patterns", "[rules][engine]") {
  // Up to 63 patterned rules the engine keys decisions by a bitmask of the
  // patterns that match; beyond, by an interned list. Rule i matches names
  // ending in ".t<i>"; rule 70 matches "both", as does rule 69 ("t69").
  std::string json = "{\"rules\": [";
  for (int i = 0; i < 70; ++i) {
    json += fmt::format("{{\"pattern\": \"\\\\.t{}$\", \"spec\": [{}]}}, ",
                        i,
                        i % 2 == 0 ? "\"x\"" : "null");
  }
  json += "{\"pattern\": \"both\", \"spec\": [\"x\"]}]}";
  const RuleSet rules = rules_of(json);
  REQUIRE(rules.rules.size() == 71);
  const Manifest manifest = manifest_of({{"a.t0", {8}},
                                         {"a.t1", {8}},
                                         {"a.t68", {8}},
                                         {"both.t69", {8}},
                                         {"both", {8}},
                                         {"b.t1", {8}}});
  Applied r = apply(manifest, mesh("x:2"), rules);
  REQUIRE(r.plan);
  CHECK(r.diags.items().empty());
  CHECK(rule_text(manifest, *r.plan, "a.t0") == "#0 pattern \"\\\\.t0$\" spec");
  CHECK(spec_text(manifest, *r.plan, "a.t0") == "P('x')");
  CHECK(spec_text(manifest, *r.plan, "a.t1") == "P(None)");
  CHECK(spec_text(manifest, *r.plan, "a.t68") == "P('x')");
  // Rules 69 and 70 both match: 69 comes first.
  CHECK(r.plan->rule(3).rule_index() == std::optional<size_t>(69));
  CHECK(spec_text(manifest, *r.plan, "both.t69") == "P(None)");
  CHECK(r.plan->rule(4).rule_index() == std::optional<size_t>(70));
  // a.t1 and b.t1 share a decision.
  CHECK(r.plan->decision_of[1] == r.plan->decision_of[5]);
}

TEST_CASE("rules: describe_rule", "[rules][engine]") {
  const RuleSet rules = rules_of(R"({"rules": [
      {"pattern": "mlp", "fsdp": {"axis": "fsdp"}},
      {"shape": [null, 1024], "min_elements": 7, "spec": []},
      {"auto": {}},
      {"pattern": "model\\.layers\\.[0-9]+\\.mlp\\.experts\\.[0-9]+\\.(gate|up)_proj", "replicate": true}]})");
  CHECK(describe_rule(rules, 0) == "#0 pattern \"mlp\" fsdp");
  CHECK(describe_rule(rules, 1) == "#1 shape [null, 1024] min_elements 7 spec");
  CHECK(describe_rule(rules, 2) == "#2 auto");
  // Cut at 40 bytes.
  CHECK(describe_rule(rules, 3)
        == "#3 pattern \"model\\\\.layers\\\\.[0-9]+\\\\.mlp\\\\.experts\\\\.[0-...\" "
           "replicate");
}

TEST_CASE("rules: bad patterns and duplicate axes in a RuleSet built in code",
          "[rules][engine]") {
  RuleSet rules;
  rules.source = "preset x";
  rules.preset = true;
  Rule bad;
  bad.pattern = "(q|k";
  bad.pointer = "/rules/0";
  rules.rules.push_back(bad);
  Rule dup;
  dup.yield = SpecYield{RuleSpec{
      {{AxisRef{"x", "/rules/1/spec/0"}}, {AxisRef{"x", "/rules/1/spec/1"}}},
      "/rules/1/spec"}};
  dup.pointer = "/rules/1";
  rules.rules.push_back(dup);
  Applied r = apply(manifest_of({{"w", {8, 8}}}), mesh("x:2"), rules);
  CHECK_FALSE(r.plan);
  REQUIRE(
      codes(r.diags)
      == std::vector<std::string>{"rules.duplicate-axis", "rules.bad-pattern"});
  CHECK(render(r.diags.items()[1])
        == "preset x:/rules/0/pattern: error: pattern \"(q|k\" does not "
           "compile: missing ): (q|k [rules.bad-pattern]");
  std::string hint;
  CHECK(pattern_error("(?=x)y", &hint).has_value());
  CHECK(hint == "RE2 has no lookahead or lookbehind (Python's re has)");
  CHECK(pattern_error("(a)\\1", &hint).has_value());
  CHECK(hint == "RE2 has no backreferences (Python's re has)");
  CHECK_FALSE(pattern_error("(?P<name>q|k)_proj").has_value());
}

// ===========================================================================
// Explain.

TEST_CASE("rules: explain shows each rule and what the algorithm considered",
          "[rules][explain]") {
  const RuleSet rules = rules_of(R"({"rules": [
      {"pattern": "attn", "spec": ["tp"]},
      {"shape": [null, 3], "spec": []},
      {"pattern": "mlp", "auto": {"axes": ["tp"]}, "fallthrough": true},
      {"pattern": "mlp", "fsdp": {"axis": "fsdp", "min_size_mb": 0}},
      {"replicate": true}]})");
  const Manifest manifest = manifest_of({{"layers.0.mlp.w", {7, 4096}}});
  Diagnostics diags;
  std::optional<RuleTrace> trace = explain_rules(manifest,
                                                 mesh("fsdp:4,tp:8"),
                                                 rules,
                                                 "layers.0.mlp.w",
                                                 "--explain",
                                                 diags);
  REQUIRE(trace);
  CHECK(diags.items().empty());
  CHECK(trace->tensor == "layers.0.mlp.w");
  CHECK(trace->shape == std::vector<int64_t>{7, 4096});
  REQUIRE(trace->rules.size() == 5);
  const auto& steps = trace->rules;
  CHECK(steps[0].outcome == RuleOutcome::no_match);
  CHECK(steps[0].reason == "pattern \"attn\" does not match");
  CHECK(steps[1].outcome == RuleOutcome::no_match);
  CHECK(steps[1].reason == "shape [null, 3]: dim 1 is 4096, not 3");
  // auto on tp (8): 28672 elements >= 32; dim 1 (4096) takes tp... so it
  // does not fall through.
  CHECK(steps[2].outcome == RuleOutcome::decided);
  REQUIRE(steps[2].spec);
  CHECK(py(*steps[2].spec) == "P(None, 'tp')");
  // The chosen step names the dim and the axis.
  auto chosen = std::find_if(steps[2].steps.begin(),
                             steps[2].steps.end(),
                             [](const TraceStep& s) { return s.chosen; });
  REQUIRE(chosen != steps[2].steps.end());
  CHECK(chosen->text == "dim 1 (4096): tp (8) divides it: dim 1 -> tp");
  CHECK(chosen->dim == 1);
  CHECK(chosen->axes == std::vector<std::string>{"tp"});
  // Later rules: selectors shown, not tried.
  CHECK(steps[3].matched);
  CHECK(steps[3].outcome == RuleOutcome::not_tried);
  CHECK(steps[4].outcome == RuleOutcome::not_tried);
  CHECK(trace->result.rule.description == "#2 pattern \"mlp\" auto");
  CHECK(py(trace->result.spec) == "P(None, 'tp')");
}

TEST_CASE("rules: explain agrees with apply_rules", "[rules][explain]") {
  const RuleSet rules = rules_of(R"({"rules": [
      {"pattern": "w", "auto": {"axes": ["tp"]}, "fallthrough": true},
      {"pattern": "w", "fsdp": {"axis": "fsdp", "min_size_mb": 0}}],
    "min_size": 4})");
  const Manifest manifest = manifest_of(
      {{"w.odd", {7, 9}}, {"w.small", {3}}, {"w.even", {8, 8}}, {"x", {5, 5}}});
  const Mesh m = mesh("fsdp:3,tp:2");
  Applied r = apply(manifest, m, rules);
  REQUIRE(r.plan);
  for (size_t i = 0; i < manifest.size(); ++i) {
    Diagnostics diags;
    std::optional<RuleTrace> t = explain_rules(
        manifest, m, rules, manifest.tensors()[i].name, "--explain", diags);
    REQUIRE(t);
    CHECK(t->result == r.plan->decision(i));
  }
  // w.odd: auto (tp = 2 divides neither 7 nor 9) falls through; fsdp (3)
  // takes dim 1 (9).
  Diagnostics diags;
  std::optional<RuleTrace> odd =
      explain_rules(manifest, m, rules, "w.odd", "--explain", diags);
  REQUIRE(odd);
  CHECK(odd->rules[0].outcome == RuleOutcome::fell_through);
  CHECK(odd->rules[1].outcome == RuleOutcome::decided);
  CHECK(py(odd->result.spec) == "P(None, 'fsdp')");
  // w.small: 3 elements < min_size 4, before any rule.
  std::optional<RuleTrace> small =
      explain_rules(manifest, m, rules, "w.small", "--explain", diags);
  REQUIRE(small);
  CHECK(small->rules.empty());
  REQUIRE(small->before.size() == 1);
  CHECK(small->before[0].text
        == "3 elements < min_size 4: replicated before any rule");
  // An unknown name: the nearest one as hint.
  Diagnostics missing;
  CHECK_FALSE(explain_rules(manifest, m, rules, "w.od", "--explain", missing));
  REQUIRE(missing.error_count() == 1);
  CHECK(render(missing.items()[0])
        == "--explain: error: no tensor \"w.od\" in m.json; did you mean "
           "\"w.odd\"? [rules.unknown-tensor]");
}

// ===========================================================================
// Properties.

namespace {

// The axes of the random meshes and rule sets: the names MeshPartitionHelper
// looks for, and ep.
const std::vector<std::string> k_axis_pool = {"dp", "fsdp", "tp", "sp", "ep"};

// Random preset rule sets over k_axis_pool, some of which the mesh lacks.
std::string random_rules(std::mt19937& rng) {
  const std::vector<std::string>& axes = k_axis_pool;
  auto pick = [&](size_t n) {
    return static_cast<size_t>(
        std::uniform_int_distribution<size_t>(0, n - 1)(rng));
  };
  auto axis = [&] { return "\"" + axes[pick(axes.size())] + "\""; };
  auto axis_list = [&](size_t max) {
    std::vector<std::string> chosen;
    std::vector<std::string> pool = axes;
    std::shuffle(pool.begin(), pool.end(), rng);
    size_t n = 1 + pick(max);
    for (size_t i = 0; i < n && i < pool.size(); ++i) {
      chosen.push_back("\"" + pool[i] + "\"");
    }
    return fmt::format("[{}]", fmt::join(chosen, ", "));
  };
  auto spec = [&] {
    // Distinct axes across the spec.
    std::vector<std::string> pool = axes;
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<std::string> dims;
    size_t next = 0;
    const size_t rank = pick(4);
    for (size_t d = 0; d < rank; ++d) {
      const size_t k = pick(3);
      std::vector<std::string> dim;
      for (size_t i = 0; i < k && next < pool.size(); ++i) {
        dim.push_back("\"" + pool[next++] + "\"");
      }
      dims.push_back(dim.empty() ? "null"
                                 : fmt::format("[{}]", fmt::join(dim, ", ")));
    }
    return fmt::format("[{}]", fmt::join(dims, ", "));
  };
  std::vector<std::string> rules;
  const size_t count = 1 + pick(6);
  for (size_t i = 0; i < count; ++i) {
    std::string selector;
    switch (pick(3)) {
      case 0:
        selector = fmt::format(
            "\"pattern\": \"{}\", ",
            std::vector<std::string>{"w", "^t1", "[02468]$", "t"}[pick(4)]);
        break;
      case 1:
        selector = fmt::format("\"shape\": [{}], ",
                               pick(2) == 0 ? "null, null" : "null");
        break;
      default:
        break;
    }
    std::string yield;
    switch (pick(9)) {
      case 0:
        yield = "\"spec\": " + spec();
        break;
      case 1:
        yield = "\"replicate\": true";
        break;
      case 2:
        yield = fmt::format("\"fsdp\": {{\"axis\": {}, \"min_size_mb\": 0}}",
                            pick(2) == 0 ? axis() : axis_list(3));
        break;
      case 3:
        yield = fmt::format(
            "\"auto\": {{\"axes\": {}, \"reverse\": {}, "
            "\"min_shard_size\": {}}}",
            axis_list(5),
            pick(2) == 0 ? "true" : "false",
            pick(3) * 8);
        break;
      case 4:
        yield = "\"auto\": {}";
        break;
      case 5:
        yield = fmt::format("\"memory\": {{\"max_bytes_per_device\": {}}}",
                            pick(5) * 64);
        break;
      case 6:
        yield = fmt::format("\"mesh_helper\": {{\"min_shard_size\": {}}}",
                            pick(4) * 4);
        break;
      case 7:
        yield = "\"logical_axes\": \"manifest\"";
        break;
      default:
        yield = fmt::format(
            "\"shape_patterns\": [{{\"shape\": [null, {}], \"spec\": {}}}, "
            "{{\"shape\": [null], \"spec\": {}}}]",
            std::vector<int>{6, 12, 7}[pick(3)],
            spec(),
            spec());
        break;
    }
    rules.push_back(fmt::format("{{{}{}{}}}",
                                selector,
                                yield,
                                pick(3) == 0 ? ", \"fallthrough\": true" : ""));
  }
  std::vector<std::string> logical;
  for (const char* name : {"embed", "mlp", "vocab", "heads"}) {
    const size_t n = 1 + pick(2);
    for (size_t i = 0; i < n; ++i) {
      logical.push_back(fmt::format(
          "[\"{}\", {}]", name, pick(4) == 0 ? "[]" : axis_list(3)));
    }
  }
  return fmt::format(
      "{{\"rules\": [{}], \"logical_axis_rules\": [{}], \"unmatched\": "
      "\"replicate\", \"min_size\": {}}}",
      fmt::join(rules, ", "),
      fmt::join(logical, ", "),
      pick(2) * 16);
}

}  // namespace

TEST_CASE("rules: property: preset specs always validate",
          "[rules][engine][property]") {
  // Random manifests, meshes and preset rule sets: every spec has full rank,
  // names only mesh axes, none twice, and divides its dims, so validate_specs
  // finds no error.
  const int seed = GENERATE(take(150, random(0, 1 << 30)));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  auto pick = [&](size_t n) {
    return static_cast<size_t>(
        std::uniform_int_distribution<size_t>(0, n - 1)(rng));
  };
  // A mesh of 1 to 4 of the pool's axes, sizes 1, 2, 3, 4, 8.
  const std::vector<int64_t> sizes = {1, 2, 3, 4, 8};
  std::vector<std::string> names = k_axis_pool;
  std::shuffle(names.begin(), names.end(), rng);
  std::vector<std::string> parts;
  const size_t n_axes = 1 + pick(4);
  for (size_t i = 0; i < n_axes; ++i) {
    parts.push_back(fmt::format("{}:{}", names[i], sizes[pick(sizes.size())]));
  }
  const Mesh m = mesh(fmt::format("{}", fmt::join(parts, ",")));
  // Tensors with dims from a mix of primes, powers of two and 1.
  const std::vector<int64_t> dims = {
      1, 2, 3, 6, 7, 8, 12, 16, 24, 50257, 4096, 0};
  const std::vector<std::string> logical_names = {
      "embed", "mlp", "vocab", "heads", "other"};
  std::vector<T> tensors;
  const size_t n_tensors = 1 + pick(12);
  for (size_t i = 0; i < n_tensors; ++i) {
    T t;
    t.name = fmt::format("t{}{}", i, pick(2) == 0 ? ".w" : "");
    const size_t rank = pick(4);
    for (size_t d = 0; d < rank; ++d) {
      t.shape.push_back(dims[pick(dims.size())]);
    }
    t.dtype = std::vector<std::string>{"bf16", "f32", "i4", "f8_e4m3"}[pick(4)];
    if (rank > 0 && pick(2) == 0) {
      std::vector<std::string> pool = logical_names;
      std::shuffle(pool.begin(), pool.end(), rng);
      for (size_t d = 0; d < rank; ++d) {
        t.logical.push_back(pick(4) == 0 ? "" : pool[d]);
      }
    }
    tensors.push_back(std::move(t));
  }
  const Manifest manifest = manifest_of(tensors);
  const std::string json = random_rules(rng);
  INFO("mesh: " << to_string(m));
  INFO("rules: " << json);
  const RuleSet rules = rules_of(json, true);
  Applied r = apply(manifest, m, rules);
  INFO(test::first_error(r.diags));
  REQUIRE(r.plan);
  CHECK_FALSE(r.diags.has_errors());
  SpecsFile specs;
  specs.source = "plan";
  for (size_t i = 0; i < manifest.size(); ++i) {
    const Tensor& t = manifest.tensors()[i];
    CHECK(r.plan->spec(i).size() == static_cast<size_t>(t.rank()));
    specs.specs.push_back(
        NamedSpec{std::string(t.name),
                  std::make_shared<const PartitionSpec>(r.plan->spec(i)),
                  "",
                  0,
                  0,
                  true});
  }
  ValidateOptions options;
  options.replicated_warning_bytes = 0;
  Diagnostics validation;
  std::vector<TensorSharding> shardings =
      validate_specs(manifest, m, specs, options, validation);
  for (const Diagnostic& d : validation.items()) {
    INFO(render(d));
    CHECK(d.severity != Severity::error);
    // Presets drop size-1 axes, and algorithms never use them.
    CHECK(d.code != "spec.trivial-axis");
  }
}

TEST_CASE("rules: which patterns treat all digits alike", "[rules][names]") {
  // A name matches such a pattern exactly when the name with its digits made
  // '0' does, so the engine matches each layer's names once.
  for (const char* yes : {"mlp",
                          "layers\\.[0-9]+\\.mlp",
                          "experts\\.\\d+\\.",
                          "\\bw\\b",
                          "[^.]+_proj$",
                          "(?P<g>q|k)_proj",
                          "(?i)Norm",
                          "a{2,3}",
                          "x{1}y",
                          "[[:alnum:]]+",
                          "[^0-9]",
                          "\\D",
                          ".*",
                          "[a-z0-9_]",
                          "[\\d.]",
                          "[0-9a-f]+",
                          "[]a]",
                          "[a-]",
                          "(?s:.)",
                          "[^\\w]",
                          "\\.\\-"}) {
    INFO(yes);
    CHECK(detail::digit_oblivious(yes));
  }
  // A digit literal, a class holding some digits, or a construct the check
  // does not know.
  for (const char* no : {"layers\\.1[0-9]",
                         "[0-5]",
                         "a1",
                         "[1-9]",
                         "[^1]",
                         "a{1x}",
                         "\\x30",
                         "\\pN",
                         "\\Q1\\E",
                         "[[:foo:]]",
                         "(?P=g)",
                         "\\1",
                         "[a-\\d]",
                         "[",
                         "\\",
                         "(?<g>x)",
                         "[\\x30]"}) {
    INFO(no);
    CHECK_FALSE(detail::digit_oblivious(no));
  }
}

namespace {

// The mask of `digits` (bit d for digit d), as distinguished_digits gives.
unsigned digit_mask(std::initializer_list<unsigned> digits) {
  unsigned m = 0;
  for (unsigned d : digits) {
    m |= 1U << d;
  }
  return m;
}

// A rules file of one `spec: []` rule per pattern, and a manifest of
// `count` random dotted names of words and numbers (the seed's): every
// tensor must get the first rule whose pattern std::regex_search finds in
// its own name, whatever shortcut the engine takes.
void check_first_search_wins(const std::vector<std::string>& patterns,
                             uint32_t seed,
                             size_t count) {
  std::string json = "{\"rules\": [";
  for (size_t i = 0; i < patterns.size(); ++i) {
    std::string escaped;
    for (char c : patterns[i]) {
      escaped += c == '\\' ? "\\\\" : std::string(1, c);
    }
    json += fmt::format(
        "{}{{\"pattern\": \"{}\", \"spec\": []}}", i ? ", " : "", escaped);
  }
  json += "], \"unmatched\": \"replicate\"}";
  const RuleSet rules = rules_of(json);
  std::mt19937 rng(seed);
  const std::vector<std::string> words = {
      "model", "layers", "mlp", "experts", "w", "norm", "up_proj", "ax", "b"};
  std::vector<T> tensors;
  for (size_t i = 0; i < count; ++i) {
    std::vector<std::string> parts;
    const size_t n = 1 + rng() % 5;
    for (size_t k = 0; k < n; ++k) {
      std::string part = words[rng() % words.size()];
      if (rng() % 2 == 0) {
        part = std::to_string(rng() % 1000);  // 1 to 3 digits
      } else if (rng() % 3 == 0) {
        part += std::to_string(rng() % 100);
      }
      parts.push_back(part);
    }
    tensors.push_back({fmt::format("{}.{}", fmt::join(parts, "."), i), {4}});
  }
  const Manifest manifest = manifest_of(tensors);
  Applied r = apply(manifest, mesh("x:2"), rules);
  REQUIRE(r.plan);
  for (size_t i = 0; i < manifest.size(); ++i) {
    const std::string name(manifest.tensors()[i].name);
    std::optional<size_t> expected;
    for (size_t p = 0; p < patterns.size() && !expected; ++p) {
      if (std::regex_search(name, std::regex(patterns[p]))) {
        expected = p;
      }
    }
    INFO(name);
    CHECK(r.plan->rule(i).rule_index() == expected);
  }
}

}  // namespace

TEST_CASE("rules: property: matching by digit-normalised name changes nothing",
          "[rules][names][property]") {
  // With only digit-oblivious patterns the engine matches each name once
  // per digit-normalised form.
  const std::vector<std::string> patterns = {"layers\\.[0-9]+\\.mlp",
                                             "experts\\.[0-9]{2}\\.",
                                             "^model\\.",
                                             "proj$",
                                             "\\bw[0-9]\\b",
                                             "[a-z]+[0-9]+x",
                                             "\\.[0-9]\\.",
                                             "norm"};
  for (const std::string& p : patterns) {
    REQUIRE(detail::digit_oblivious(p));
  }
  const int seed = GENERATE(take(20, random(0, 1 << 30)));
  check_first_search_wins(patterns, static_cast<uint32_t>(seed), 60);
}

TEST_CASE("rules: the digits a pattern tells apart", "[rules][names]") {
  // Worked from the pattern text: literal digits, and a side of each class
  // that holds some digits but not all ten.
  CHECK(detail::distinguished_digits("layers\\.[0-9]+\\.mlp") == 0U);
  CHECK(detail::distinguished_digits("layers\\.1[0-9]") == digit_mask({1}));
  // A class splits the digits in two; the smaller side is marked.
  CHECK(detail::distinguished_digits("[0-5]") == digit_mask({6, 7, 8, 9}));
  CHECK(detail::distinguished_digits("[^1]") == digit_mask({1}));
  CHECK(detail::distinguished_digits("[0-4]") == digit_mask({0, 1, 2, 3, 4}));
  CHECK(detail::distinguished_digits("\\.experts\\.[0-9]+\\.(w1|w3|up_proj)")
        == digit_mask({1, 3}));
  CHECK(detail::distinguished_digits("a{12,34}7")
        == digit_mask({7}));  // counts are not literals
  CHECK(detail::distinguished_digits("(?P<g9>x)[5-z]")
        == digit_mask({5, 6, 7, 8, 9}));
  CHECK(detail::distinguished_digits("[+-9]x\\d")
        == 0U);  // the range holds all ten
  CHECK_FALSE(detail::distinguished_digits("\\x30").has_value());
  CHECK_FALSE(detail::distinguished_digits("\\1").has_value());
  CHECK_FALSE(detail::distinguished_digits("[[:foo:]]").has_value());
}

TEST_CASE(
    "rules: property: names that differ in digits no pattern tells apart share "
    "a match",
    "[rules][names][property]") {
  // Patterns with digit literals and partial classes (the fsdp-tp preset's
  // "w1|w3" among them): the engine matches one name per class of digits
  // the patterns treat alike.
  const std::vector<std::string> patterns = {"\\.experts\\.[0-9]+\\.(w1|w3)\\.",
                                             "layers\\.1[0-9]\\.",
                                             "\\.2\\.",
                                             "w2$",
                                             "[a-z]3",
                                             "experts\\.[0-9]{2}\\.",
                                             "\\.[0-9]\\.norm",
                                             "\\.[^0-3]\\.",
                                             "\\.[0-6]{2}\\.",
                                             "mlp"};
  // Digits 4-6 are alike: the shortcut is on.
  unsigned distinguished = 0;
  for (const std::string& p : patterns) {
    std::optional<unsigned> d = detail::distinguished_digits(p);
    REQUIRE(d.has_value());
    distinguished |= *d;
  }
  CHECK(distinguished == 0x38FU);  // 0-3 and 7-9
  const int seed = GENERATE(take(20, random(0, 1 << 30)));
  check_first_search_wins(patterns, static_cast<uint32_t>(seed), 80);
}

TEST_CASE("rules: where a pattern's digit literals stand", "[rules][names]") {
  // Worked from the pattern texts: a literal right after a literal ASCII
  // character (or after such a literal) is anchored to that character.
  auto anchors = [](const detail::DigitUse& u) {
    std::string out;
    for (size_t c = 0; c < u.anchors.size(); ++c) {
      if (u.anchors[c]) {
        out += static_cast<char>(c);
      }
    }
    return out;
  };
  struct Case {
    std::string pattern;
    unsigned anywhere;
    unsigned anchored;
    std::string anchors;
  };
  const std::vector<Case> cases = {
      {"\\.experts\\.[0-9]+\\.(w1|w3|gate_proj)", 0, digit_mask({1, 3}), "Ww"},
      {"w12", 0, digit_mask({1, 2}), "Ww"},  // the 2 follows an anchored 1
      {"\\.1\\.", 0, digit_mask({1}), "."},  // an escaped '.' is the character
      {"layers\\.1[0-9]", 0, digit_mask({1}), "."},  // the class holds all ten
      {"_7$", 0, digit_mask({7}), "_"},
      {"{3", 0, digit_mask({3}), "{"},   // a '{' that starts no count
      {"(w)1", digit_mask({1}), 0, ""},  // after a group
      {"w|1", digit_mask({1}), 0, ""},   // an alternative of its own
      {"w?1", digit_mask({1}), 0, ""},   // w may be absent
      {"w*1", digit_mask({1}), 0, ""},
      {"w{2}1", digit_mask({1}), 0, ""},   // after a count
      {"[a-z]3", digit_mask({3}), 0, ""},  // after a class
      {"\\w5", digit_mask({5}), 0, ""},    // after an escaped class
      {"^7", digit_mask({7}), 0, ""},
      {".7", digit_mask({7}), 0, ""},
      {"(?i)w1", 0, digit_mask({1}), "Ww"},
      {"x[0-4]",
       digit_mask({0, 1, 2, 3, 4}),
       0,
       ""},  // classes are never anchored
      {"\xc3\xa9"
       "1",
       digit_mask({1}),
       0,
       ""},  // after a non-ASCII character
  };
  for (const Case& c : cases) {
    INFO(c.pattern);
    std::optional<detail::DigitUse> use = detail::digit_use(c.pattern);
    REQUIRE(use.has_value());
    CHECK(use->anywhere == c.anywhere);
    CHECK(use->anchored == c.anchored);
    CHECK(anchors(*use) == c.anchors);
    CHECK(detail::distinguished_digits(c.pattern) == (c.anywhere | c.anchored));
  }
  CHECK_FALSE(detail::digit_use("\\1").has_value());
}

TEST_CASE(
    "rules: property: digits after an anchor and elsewhere are told apart as "
    "the patterns do",
    "[rules][names][property]") {
  // Literals anchored after w, x, b and '_' tell 1, 2, 3 and 7 apart only in
  // runs of digits after those characters ("w17", "ax12"); 4, 5 and 9 stand
  // where any run can meet them; 0, 6 and 8 are alike everywhere.
  const std::vector<std::string> patterns = {"w1",
                                             "ax12",
                                             "b3$",
                                             "_7\\.",
                                             "(w)5",
                                             "w|9",
                                             "w?4",
                                             "\\.experts\\.[0-9]+\\.w2",
                                             "layers\\.[0-9]\\.",
                                             "mlp"};
  detail::DigitUse all;
  for (const std::string& p : patterns) {
    std::optional<detail::DigitUse> u = detail::digit_use(p);
    REQUIRE(u.has_value());
    all |= *u;
  }
  CHECK(all.anywhere == 0x230U);  // 4, 5, 9
  CHECK(all.anchored == 0x8EU);   // 1, 2, 3, 7
  const int seed = GENERATE(take(20, random(0, 1 << 30)));
  check_first_search_wins(patterns, static_cast<uint32_t>(seed), 80);
}

TEST_CASE("rules: property: the RE2 set agrees with one search per pattern",
          "[rules][names][property]") {
  // apply_rules matches all patterns in one RE2::Set scan; the result must be
  // what re.search per pattern gives: the first rule whose pattern is found.
  const std::vector<std::string> patterns = {"mlp",
                                             "^model\\.",
                                             "proj$",
                                             "(q|k|v)_proj",
                                             "experts\\.[0-9]+\\.",
                                             "layers\\.1[0-9]\\.",
                                             "norm",
                                             "[0-9]{3}",
                                             "a.b",
                                             "\\bw\\b"};
  std::string json = "{\"rules\": [";
  for (size_t i = 0; i < patterns.size(); ++i) {
    json += fmt::format(
        "{}{{\"pattern\": \"{}\", \"spec\": []}}", i ? ", " : "", [&] {
          std::string escaped;
          for (char c : patterns[i]) {
            escaped += c == '\\' ? "\\\\" : std::string(1, c);
          }
          return escaped;
        }());
  }
  json += "], \"unmatched\": \"replicate\"}";
  const RuleSet rules = rules_of(json);
  const int seed = GENERATE(take(20, random(0, 1 << 30)));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const std::vector<std::string> words = {"model",
                                          "layers",
                                          "12",
                                          "mlp",
                                          "experts",
                                          "7",
                                          "q_proj",
                                          "w",
                                          "norm",
                                          "123",
                                          "a",
                                          "xb",
                                          "proj",
                                          "k"};
  std::vector<T> tensors;
  for (size_t i = 0; i < 40; ++i) {
    std::vector<std::string> parts;
    const size_t n = 1 + rng() % 5;
    for (size_t k = 0; k < n; ++k) {
      parts.push_back(words[rng() % words.size()]);
    }
    tensors.push_back({fmt::format("{}.{}", fmt::join(parts, "."), i), {4}});
  }
  const Manifest manifest = manifest_of(tensors);
  Applied r = apply(manifest, mesh("x:2"), rules);
  REQUIRE(r.plan);
  for (size_t i = 0; i < manifest.size(); ++i) {
    const std::string name(manifest.tensors()[i].name);
    std::optional<size_t> expected;
    for (size_t p = 0; p < patterns.size() && !expected; ++p) {
      // std::regex's ECMAScript search agrees with RE2 on these patterns.
      if (std::regex_search(name, std::regex(patterns[p]))) {
        expected = p;
      }
    }
    INFO(name);
    CHECK(r.plan->rule(i).rule_index() == expected);
  }
}

TEST_CASE("rules: yield names follow RuleYield and make_yield inverts them",
          "[rules][yields]") {
  // The keys of docs/rules.md, in the order of RuleYield's alternatives.
  const std::vector<std::string> keys = {"spec",
                                         "replicate",
                                         "logical_axes",
                                         "fsdp",
                                         "auto",
                                         "memory",
                                         "mesh_helper",
                                         "shape_patterns"};
  CHECK(yield_names() == keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    INFO(keys[i]);
    std::optional<RuleYield> yield = make_yield(keys[i]);
    REQUIRE(yield);
    CHECK(yield->index() == i);
    CHECK(yield_name(*yield) == keys[i]);
  }
  CHECK_FALSE(make_yield("fsdpp"));
  CHECK_FALSE(make_yield(""));
}

TEST_CASE("rules: rule keys are matched once and give the same plan",
          "[rules][engine]") {
  // 71 patterned rules (more than a bitmask holds, so the classes are
  // interned), and one that reads logical axes: the keys split tensors of
  // one class by shape, dtype and logical axes, and a plan decided per key
  // is the plan decided per name.
  std::string json = "{\"rules\": [";
  for (int i = 0; i < 70; ++i) {
    json += fmt::format("{{\"pattern\": \"\\\\.t{}$\", \"spec\": [{}]}}, ",
                        i,
                        i % 2 == 0 ? "\"x\"" : "null");
  }
  json += "{\"pattern\": \"both\", \"spec\": [\"x\"]}]}";
  const RuleSet rules = rules_of(json);
  const Manifest manifest = manifest_of({{"a.t0", {8}},
                                         {"a.t1", {8}},
                                         {"b.t0", {8}},
                                         {"c.t0", {16}},
                                         {"both.t69", {8}},
                                         {"both", {8}},
                                         {"b.t1", {8}},
                                         {"s", {}}});
  Diagnostics diags;
  const std::optional<RuleKeys> keys = rule_keys(manifest, rules, diags);
  REQUIRE(keys);
  CHECK(diags.items().empty());
  // a.t0 = b.t0 (class t0, [8]); c.t0 has another shape; a.t1 = b.t1;
  // both.t69, both and the scalar s each alone: 6 keys.
  CHECK(keys->keys() == 6);
  CHECK(keys->key_of == std::vector<uint32_t>{0, 1, 0, 2, 3, 4, 1, 5});
  // Per rule, whether its pattern matches: class t0 matches rule 0 only;
  // both.t69 rules 69 and 70; the scalar reaches no rule.
  REQUIRE(keys->matches[0].size() == 71);
  CHECK(std::count(keys->matches[0].begin(), keys->matches[0].end(), 1) == 1);
  CHECK(keys->matches[0][0] == 1);
  CHECK(keys->matches[3][69] == 1);
  CHECK(keys->matches[3][70] == 1);
  CHECK(keys->matches[5].empty());

  for (const char* text : {"x:2", "x:4", "x:8"}) {
    const Mesh m = mesh(text);
    Applied by_name = apply(manifest, m, rules);
    Diagnostics keyed_diags;
    ApplyOptions options;
    options.keys = &*keys;
    const std::optional<RulePlan> by_key =
        apply_rules(manifest, m, rules, keyed_diags, options);
    REQUIRE(by_name.plan);
    REQUIRE(by_key);
    for (size_t t = 0; t < manifest.size(); ++t) {
      CHECK(by_key->decision(t) == by_name.plan->decision(t));
    }
    CHECK(keyed_diags.items().size() == by_name.diags.items().size());
  }
}

TEST_CASE("rules: rule keys report a pattern that does not compile",
          "[rules][engine]") {
  RuleSet rules;
  rules.source = "preset x";
  rules.preset = true;
  Rule bad;
  bad.pattern = "(q|k";
  bad.pointer = "/rules/0";
  rules.rules.push_back(bad);
  Diagnostics diags;
  CHECK_FALSE(rule_keys(manifest_of({{"q", {8}}}), rules, diags));
  REQUIRE(diags.error_count() == 1);
  CHECK(diags.items()[0].code == "rules.bad-pattern");
}
