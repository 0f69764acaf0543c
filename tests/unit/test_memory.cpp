// The memory estimator against published figures, one test per source:
// docs/sources.md#deepspeed, docs/sources.md#ultra-scale-playbook,
// docs/sources.md#scaling-book-memory, docs/sources.md#zero.

#include "support/test_support.hpp"

#include <shardplan/memory.hpp>
#include <shardplan/validate.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>

using namespace shardplan;

namespace {

// A manifest of `count` tensors of `elements` elements each (one dim) plus,
// when `rest` > 0, one tensor of `rest` elements, all of `dtype`.
Manifest model(int64_t count,
               int64_t elements,
               int64_t rest,
               std::string_view dtype) {
  std::string json = R"({"params": [)";
  for (int64_t i = 0; i < count; ++i) {
    json +=
        fmt::format(R"({}{{"name": "layer.{}", "shape": [{}], "dtype": "{}"}})",
                    i == 0 ? "" : ",",
                    i,
                    elements,
                    dtype);
  }
  if (rest > 0) {
    json += fmt::format(
        R"(,{{"name": "rest", "shape": [{}], "dtype": "{}"}})", rest, dtype);
  }
  json += "]}";
  return test::manifest_of(json);
}

// Every tensor with the spec `spec` (a text form).
std::vector<TensorSharding> all_with(const Manifest& manifest,
                                     const Mesh& mesh,
                                     std::string_view spec) {
  std::string json = R"({"specs": {)";
  for (size_t i = 0; i < manifest.size(); ++i) {
    json += fmt::format(
        R"({}"{}": "{}")", i == 0 ? "" : ",", manifest.tensors()[i].name, spec);
  }
  json += "}}";
  Diagnostics diags;
  std::vector<TensorSharding> out = validate_specs(
      manifest, mesh, test::specs_of(json), ValidateOptions{}, diags);
  INFO(test::first_error(diags));
  REQUIRE_FALSE(diags.has_errors());
  return out;
}

MemoryEstimate estimate(const Manifest& manifest,
                        const Mesh& mesh,
                        const std::vector<TensorSharding>& shardings,
                        Recipe recipe,
                        int zero,
                        std::optional<int64_t> hbm = std::nullopt) {
  MemoryOptions options;
  options.zero.at = Location::of("--zero");
  options.data_axes.at = Location::of("--data-axes");
  options.recipe = recipe;
  options.zero.value = zero;
  options.hbm_bytes.value = hbm;
  Diagnostics diags;
  std::optional<MemoryEstimate> e =
      estimate_memory(manifest, mesh, shardings, options, diags);
  INFO(test::first_error(diags));
  REQUIRE(e);
  return *e;
}

double gb(int64_t bytes) {
  return static_cast<double>(bytes) / 1e9;
}
double gib(int64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024 * 1024);
}
double round_to(double v, int digits) {
  const double f = std::pow(10.0, digits);
  return std::round(v * f) / f;
}

}  // namespace

TEST_CASE("memory: ZeRO paper Figure 1 (7.5B parameters, 64 devices, K=12)",
          "[memory]") {
  // Rajbhandari et al., arXiv 1910.02054, Figure 1: baseline 120 GB, P_os
  // 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB per device (decimal GB, model
  // states only: fp16 params and grads, K = 12 bytes of fp32 Adam state).
  const Manifest m = model(75, 100'000'000, 0, "f16");  // 7.5e9 parameters
  const Mesh mesh = test::mesh_of("dp:64", 64);
  const auto shardings = all_with(m, mesh, "P()");
  const double expected[] = {120.0, 31.4, 16.6, 1.9};
  // Exactly (2 + 2 + 12) x 7.5e9 split as the paper's formulas say.
  const int64_t psi = 7'500'000'000;
  const int64_t exact[] = {16 * psi,
                           2 * psi + 2 * psi + 12 * psi / 64,
                           2 * psi + 14 * psi / 64,
                           16 * psi / 64};
  for (int zero = 0; zero <= 3; ++zero) {
    DYNAMIC_SECTION("stage " << zero) {
      MemoryEstimate e = estimate(m, mesh, shardings, Recipe::adam, zero);
      CHECK(e.per_device.model_states() == exact[zero]);
      CHECK(round_to(gb(e.per_device.model_states()), 1) == expected[zero]);
      CHECK(e.data_axes == std::vector<std::string>{"dp"});
      CHECK(e.zero_shards == 64);
    }
  }
}

TEST_CASE("memory: DeepSpeed's documented ZeRO-3 per-GPU figures", "[memory]") {
  // DeepSpeed docs (memory.rst), estimate_zero3_model_states_mem_needs with no
  // offload: per GPU = 4 x Lmax + 18 x P / N (largest layer gathered in fp16
  // with its fp16 grads; 18 bytes per parameter partitioned), in 2^30 "GB".
  // DeepSpeed's estimate gathers one layer; shardplan's gather buffer holds
  // a layer in its backward, weights and grads (4 x Lmax), and the next one's
  // fp16 weights, prefetched (docs/memory.md, "Gather buffer"): 2 x Lmax
  // more. So the model states match DeepSpeed's 18 x P / N exactly, and
  // DeepSpeed's figure is shardplan's total less the prefetched 2 x Lmax.
  SECTION("t5-3b, 1 node x 8 GPUs: 6.09 GB") {
    // P = 2851M, Lmax = 32M: 89 layers ("layer.0" ...) of 32M and one
    // tensor of no layer of 3M.
    const Manifest m = model(89, 32'000'000, 3'000'000, "f16");
    REQUIRE(m.total_elements() == 2'851'000'000);
    const Mesh mesh = test::mesh_of("dp:8", 8);
    MemoryEstimate e =
        estimate(m, mesh, all_with(m, mesh, "P()"), Recipe::adam_fp32_grads, 3);
    CHECK(e.per_device.model_states() == 18 * 2'851'000'000 / 8);
    CHECK(e.gather_buffer == 6 * 32'000'000);  // layers 0 and 1
    REQUIRE(e.gather_units.size() == 2);
    CHECK(e.gather_units[0].name == "layer.0");
    CHECK(e.gather_units[1].name == "layer.1");
    CHECK(e.max_device_total == 6 * 32'000'000 + 18 * 2'851'000'000 / 8);
    CHECK(round_to(gib(e.max_device_total - 2 * 32'000'000), 2) == 6.09);
  }
  SECTION("t5-large, 4 GPUs: 3291 MiB") {
    // The docs' hand example: 737.67M parameters, largest layer 32.90M.
    const Manifest m = model(22, 32'900'000, 13'870'000, "f16");
    REQUIRE(m.total_elements() == 737'670'000);
    const Mesh mesh = test::mesh_of("dp:4", 4);
    MemoryEstimate e = estimate(
        m, mesh, all_with(m, mesh, "P()"), *parse_recipe("megatron"), 3);
    CHECK(e.gather_buffer == 6 * 32'900'000);
    CHECK(std::floor(static_cast<double>(e.max_device_total - 2 * 32'900'000)
                     / (1 << 20))
          == 3291);
  }
}

TEST_CASE("memory: Ultra-Scale Playbook model-state table", "[memory]") {
  // docs/sources.md#ultra-scale-playbook: bf16 mixed precision, 16N bytes
  // without and 20N with fp32 gradient accumulation: 1B 16/20 GB, 7B 112/140,
  // 70B 1120/1400, 405B 6480/8100 (decimal GB, one device).
  struct Row {
    int64_t billions;
    double without, with;
  };
  const Mesh mesh = test::mesh_of("dp:1", 1);
  for (Row row : {Row{1, 16, 20},
                  Row{7, 112, 140},
                  Row{70, 1120, 1400},
                  Row{405, 6480, 8100}}) {
    DYNAMIC_SECTION(row.billions << "B") {
      const Manifest m = model(row.billions, 1'000'000'000, 0, "bf16");
      const auto shardings = all_with(m, mesh, "P()");
      const MemoryEstimate adam = estimate(m, mesh, shardings, Recipe::adam, 0);
      CHECK(gb(adam.per_device.model_states()) == row.without);
      CHECK(gb(estimate(m, mesh, shardings, Recipe::adam_fp32_accum, 0)
                   .per_device.model_states())
            == row.with);
      // The table is model states; the peak adds the optimizer step's fp32
      // update of the largest tensor (10^9 elements here, 4 GB), nothing
      // being gathered.
      CHECK(adam.optimizer_step == 4'000'000'000);
      CHECK(adam.max_device_total
            == adam.per_device.model_states() + 4'000'000'000);
    }
  }
}

TEST_CASE("memory: scaling book, 10 bytes per parameter sharded over FSDP x TP",
          "[memory]") {
  // docs/sources.md#scaling-book-memory: bf16 params + fp32 Adam m and v, grads
  // not counted: 10 P / (X Y) per device with FSDP over X and TP over Y.
  // LLaMA-3-70B-sized: params 140 GB and optimizer 560 GB in all.
  const Manifest m = model(70, 1'000'000'000, 0, "bf16");
  const Mesh mesh = test::mesh_of("fsdp:64,tp:4", 256);
  MemoryEstimate e = estimate(
      m, mesh, all_with(m, mesh, "P(('fsdp','tp'))"), Recipe::scaling_book, 0);
  CHECK(e.per_device.params * 256 == 140'000'000'000);
  CHECK(e.per_device.optimizer * 256 == 560'000'000'000);
  CHECK(e.per_device.grads == 0);
  CHECK(e.per_device.model_states() == 10 * 70'000'000'000 / 256);
  // Sharded over fsdp by its spec, each tensor ("layer.0" ... "layer.69")
  // is gathered at use, still split over tp, with no gradients in this
  // recipe: two consecutive layers, 2 x (2 bytes x 10^9 / 4).
  CHECK(e.gather_buffer == 2 * (2 * 1'000'000'000 / 4));
}

TEST_CASE("memory: Megatron's distributed optimizer is 6 + 12/DP bytes",
          "[memory]") {
  // docs/sources.md#megatron-memory: bf16 weights and fp32 grads stay, the fp32
  // master copy and Adam state (12 bytes) are split over DP.
  const Manifest m = model(8, 1'000'000, 0, "bf16");
  const Mesh mesh = test::mesh_of("dp:8", 8);
  MemoryEstimate e =
      estimate(m, mesh, all_with(m, mesh, "P()"), *parse_recipe("megatron"), 1);
  CHECK(e.per_device.params == 2 * 8'000'000);
  CHECK(e.per_device.grads == 4 * 8'000'000);
  CHECK(e.per_device.optimizer == 12 * 8'000'000 / 8);
  CHECK(e.gather_buffer == 0);  // nothing sharded over dp
}

TEST_CASE("memory: recipes per parameter dtype", "[memory][state]") {
  const Mesh mesh = test::mesh_of("dp:1", 1);
  struct Case {
    const char* dtype;
    Recipe recipe;
    int64_t params, grads, optimizer;
  };
  for (Case c : {Case{"bf16", Recipe::params_only, 2, 0, 0},
                 Case{"bf16", Recipe::adam, 2, 2, 12},
                 Case{"bf16", Recipe::adam_fp32_grads, 2, 4, 12},
                 Case{"bf16", Recipe::adam_fp32_accum, 2, 6, 12},
                 Case{"bf16", Recipe::scaling_book, 2, 0, 8},
                 Case{"f32", Recipe::adam, 4, 4, 8},  // no master copy of fp32
                 // An FP8 checkpoint trains in bf16 (docs/memory.md, "FP8
                 // checkpoints"): 2 + 2 + (4 master + 8 moments).
                 Case{"f8_e4m3", Recipe::adam, 2, 2, 12},
                 Case{"f8_e4m3", Recipe::params_only, 1, 0, 0},  // as stored
                 Case{"i8", Recipe::adam, 1, 0, 0},              // not trained
                 Case{"bool", Recipe::adam_fp32_grads, 1, 0, 0}}) {
    DYNAMIC_SECTION(c.dtype << " " << to_string(c.recipe)) {
      const Manifest m = model(1, 1000, 0, c.dtype);
      MemoryEstimate e =
          estimate(m, mesh, all_with(m, mesh, "P()"), c.recipe, 0);
      CHECK(e.per_device.params == c.params * 1000);
      CHECK(e.per_device.grads == c.grads * 1000);
      CHECK(e.per_device.optimizer == c.optimizer * 1000);
    }
  }
  CHECK(parse_recipe("megatron") == Recipe::adam_fp32_grads);
  CHECK_FALSE(parse_recipe("Adam"));
}

TEST_CASE("memory: capacity with headroom decides fits", "[memory]") {
  const Manifest m = model(1, 450, 0, "bf16");  // 900 bytes
  const Mesh mesh = test::mesh_of("dp:1", 1);
  const auto shardings = all_with(m, mesh, "P()");
  MemoryOptions options;
  options.zero.at = Location::of("--zero");
  options.data_axes.at = Location::of("--data-axes");
  options.hbm_bytes.value = 1000;  // 10% kept free: 900 usable
  Diagnostics diags;
  auto e = estimate_memory(m, mesh, shardings, options, diags);
  REQUIRE(e);
  CHECK(e->capacity_bytes == 900);
  CHECK(e->fits == true);
  CHECK(*e->utilization == Approx(0.9));
  CHECK(diags.items().empty());

  options.hbm_bytes.value = 999;  // 899.1 -> 899 usable
  e = estimate_memory(m, mesh, shardings, options, diags);
  REQUIRE(e);
  CHECK(e->fits == false);
  REQUIRE(diags.error_count() == 1);
  CHECK(render(diags.items()[0])
        == "error: the most loaded device needs 900 bytes, over the 899 bytes usable "
           "(999 bytes of HBM with 10% kept free) by 1 byte; its largest part is "
           "params, 900 bytes; shard further (more fsdp or tp) or "
           "use a larger slice [memory.over-capacity]");

  options.hbm_bytes.value.reset();
  Diagnostics none;
  e = estimate_memory(m, mesh, shardings, options, none);
  REQUIRE(e);
  CHECK_FALSE(e->fits);
  CHECK_FALSE(e->capacity_bytes);
}

TEST_CASE("memory: uneven shards, the most and least loaded device",
          "[memory]") {
  // 10 rows over 4 devices: device 0 holds ceil(10/4) = 3 rows, the last 1.
  const Manifest m = test::manifest_of(R"({"params": [
    {"name": "w", "shape": [10, 100], "dtype": "f32"},
    {"name": "b", "shape": [100], "dtype": "f32"}]})");
  const Mesh mesh = test::mesh_of("tp:4", 4);
  Diagnostics diags;
  auto shardings =
      validate_specs(m,
                     mesh,
                     test::specs_of(R"({"specs": {"w": ["tp"], "b": []}})"),
                     {},
                     diags);
  REQUIRE(diags.error_count() == 1);  // spec.indivisible
  Diagnostics mem;
  auto e = estimate_memory(m, mesh, shardings, MemoryOptions{}, mem);
  REQUIRE(e);
  CHECK(e->max_device_total == 3 * 100 * 4 + 400);
  CHECK(e->min_device_total == 1 * 100 * 4 + 400);
  CHECK(e->uneven_tensors == 1);
  REQUIRE(mem.warning_count() == 1);
  CHECK(mem.items()[0].code == "memory.uneven");
}

TEST_CASE("memory: data axes", "[memory]") {
  const Manifest m = model(2, 64, 0, "bf16");
  const Mesh mesh = test::mesh_of("data:2,fsdp:4,tp:2", 16);
  const auto shardings = all_with(m, mesh, "P('fsdp')");
  MemoryOptions options;
  options.zero.at = Location::of("--zero");
  options.data_axes.at = Location::of("--data-axes");
  options.recipe = Recipe::adam;
  options.zero.value = 1;
  Diagnostics diags;
  auto e = estimate_memory(m, mesh, shardings, options, diags);
  REQUIRE(e);
  CHECK(e->data_axes == std::vector<std::string>{"data", "fsdp"});
  CHECK(e->zero_shards == 8);
  // fsdp is already in the spec: ZeRO-1 shards the 16 local elements of each
  // tensor over data (2) only: 8 elements x 12 bytes.
  CHECK(e->per_device.optimizer == 2 * 8 * 12);
  CHECK(e->per_device.params == 2 * 16 * 2);

  options.data_axes.value = {"dat"};
  auto bad = estimate_memory(m, mesh, shardings, options, diags);
  CHECK_FALSE(bad);
  CHECK(render(diags.items().back())
        == "--data-axes: error: data axis \"dat\" is not an axis of the mesh "
           "data:2,fsdp:4,tp:2; did you mean \"data\"? [memory.data-axis]");

  options.data_axes.value = {"tp"};
  options.zero.value = 3;
  const Mesh no_data = test::mesh_of("tp:2", 2);
  options.data_axes.value.clear();
  Diagnostics warn;
  auto e2 =
      estimate_memory(m, no_data, all_with(m, no_data, "P()"), options, warn);
  REQUIRE(e2);
  REQUIRE(warn.items().size() == 1);
  CHECK(warn.items()[0].code == "memory.zero-no-effect");
}

TEST_CASE("memory: the largest tensors, ties in manifest order", "[memory]") {
  // Six bf16 tensors, replicated on one device, params_only recipe (params
  // only): 2 x elements bytes each. Sizes 8, 32, 16, 32, 8, 32 elements.
  const Manifest manifest = test::manifest_of(R"({"params": [
    {"name": "a", "shape": [8], "dtype": "bf16"},
    {"name": "b", "shape": [32], "dtype": "bf16"},
    {"name": "c", "shape": [16], "dtype": "bf16"},
    {"name": "d", "shape": [32], "dtype": "bf16"},
    {"name": "e", "shape": [8], "dtype": "bf16"},
    {"name": "f", "shape": [4, 8], "dtype": "bf16"}]})");
  const Mesh mesh = test::mesh_of("x:1", 1);
  Diagnostics diags;
  std::vector<TensorSharding> shardings = validate_specs(
      manifest,
      mesh,
      test::specs_of(R"({"specs": {"a": "None", "b": "None", "c": "None",
          "d": "None", "e": "None", "f": "None,None"}})"),
      ValidateOptions{},
      diags);
  REQUIRE_FALSE(diags.has_errors());
  auto names = [&](size_t keep) {
    MemoryOptions options;
    options.zero.at = Location::of("--zero");
    options.data_axes.at = Location::of("--data-axes");
    options.recipe = Recipe::params_only;
    options.largest = keep;
    std::optional<MemoryEstimate> e =
        estimate_memory(manifest, mesh, shardings, options, diags);
    REQUIRE(e);
    std::vector<std::string> out;
    for (const TensorMemory& m : e->largest) {
      out.push_back(fmt::format("{}:{}",
                                manifest.tensors()[m.tensor].name,
                                m.per_device.model_states()));
    }
    return out;
  };
  CHECK(names(4) == std::vector<std::string>{"b:64", "d:64", "f:64", "c:32"});
  CHECK(names(2) == std::vector<std::string>{"b:64", "d:64"});
  CHECK(names(10)
        == std::vector<std::string>{
            "b:64", "d:64", "f:64", "c:32", "a:16", "e:16"});
  CHECK(names(0).empty());
}

namespace {

// `json`'s tensors with the specs `specs` (a JSON object of name: spec).
struct Laid {
  Manifest manifest;
  Mesh mesh;
  std::vector<TensorSharding> shardings;
};
Laid lay(std::string_view manifest_json,
         std::string_view mesh,
         int64_t devices,
         std::string_view specs) {
  Laid out{test::manifest_of(manifest_json), test::mesh_of(mesh, devices), {}};
  Diagnostics diags;
  out.shardings =
      validate_specs(out.manifest,
                     out.mesh,
                     test::specs_of(fmt::format(R"({{"specs": {}}})", specs)),
                     ValidateOptions{},
                     diags);
  INFO(test::first_error(diags));
  REQUIRE_FALSE(diags.has_errors());
  return out;
}

MemoryEstimate estimate_with(const Laid& laid, const MemoryOptions& options) {
  Diagnostics diags;
  std::optional<MemoryEstimate> e =
      estimate_memory(laid.manifest, laid.mesh, laid.shardings, options, diags);
  INFO(test::first_error(diags));
  REQUIRE(e);
  return *e;
}

MemoryOptions training(Recipe recipe, int zero = 0) {
  MemoryOptions options;
  options.zero.at = Location::of("--zero");
  options.data_axes.at = Location::of("--data-axes");
  options.param_dtype.at = Location::of("--param-dtype");
  options.grad_dtype.at = Location::of("--grad-dtype");
  options.recipe = recipe;
  options.zero.value = zero;
  return options;
}

}  // namespace

TEST_CASE("memory: the gather buffer covers every axis a spec splits for FSDP",
          "[memory][gather]") {
  SECTION("deepseek-v3's embedding split over (fsdp, ep) (issue 17.6)") {
    // plan --topology h100x256 --mesh fsdp:4,ep:64 --model deepseek-v3
    // --recipe megatron --zero 1: the fsdp-tp preset gives the embedding
    // (vocab 129280 x hidden 7168, bf16) the spec None,(fsdp,ep) (tp is not
    // in the mesh). A matmul gathers it over fsdp and over ep, whose
    // devices hold different tokens of the batch like fsdp's (MaxText's
    // logical rules put 'expert' among the batch and embed axes):
    //   129280 x 7168 = 926,679,040 elements x 2 bytes = 1,853,358,080
    //   params + grads in the param dtype: x 2 = 3,706,716,160 = 3.45 GiB.
    // Before: gathered over fsdp only, still split over ep: 129280 x 112 x
    // 2 x 2 = 57,917,440 bytes (55.23 MiB).
    const Laid laid = lay(
        R"({"params": [{"name": "model.embed_tokens.weight",
                        "shape": [129280, 7168], "dtype": "bf16"}]})",
        "fsdp:4,ep:64",
        256,
        R"({"model.embed_tokens.weight": [null, ["fsdp", "ep"]]})");
    const MemoryEstimate e =
        estimate_with(laid, training(Recipe::adam_fp32_grads, 1));
    CHECK(e.gather_buffer == 3'706'716'160);
    CHECK(round_to(gib(e.gather_buffer), 2) == 3.45);
    CHECK(e.gather_axes == std::vector<std::string>{"fsdp", "ep"});
    CHECK(e.data_axes == std::vector<std::string>{"fsdp"});  // ZeRO's
  }
  SECTION("a tensor-parallel split stays at use") {
    // [1000, 256] bf16 on fsdp:2,tp:4 with spec tp,fsdp: gathered over fsdp
    // only, still split over tp: 250 x 256 x 2 bytes x 2 (grads) = 256,000.
    const Laid laid = lay(R"({"params": [{"name": "w", "shape": [1000, 256],
                            "dtype": "bf16"}]})",
                          "fsdp:2,tp:4",
                          8,
                          R"({"w": ["tp", "fsdp"]})");
    const MemoryEstimate e = estimate_with(laid, training(Recipe::adam));
    CHECK(e.gather_buffer == 256'000);
    CHECK(e.gather_axes == std::vector<std::string>{"fsdp"});
  }
  SECTION("an expert weight keeps its expert-parallel axis") {
    // Hugging Face per-expert tensors, [2048, 7168] FP8 (trained in bf16),
    // spec None,(ep,fsdp) on fsdp:4,ep:64 (a specs file may still split
    // each expert over ep, as the fsdp-tp preset did before issue 18): ep
    // is expert parallelism (the expert's tokens travel to it by
    // all-to-all), fsdp is gathered:
    //   2048 x 7168 / 64 = 229,376 elements x 2 bytes x 2 = 917,504.
    // The shared expert is a dense weight: gathered over ep too:
    //   2048 x 7168 x 2 x 2 = 58,720,256.
    // Both are layer 3's: one unit, 917,504 + 58,720,256 = 59,637,760.
    // DeepSeek-V3 has 256 routed experts (a model config says so; the
    // manifest's largest expert index, 7, would make ep:64 too large).
    const std::string shape = R"("shape": [2048, 7168], "dtype": "f8_e4m3")";
    const std::string manifest = fmt::format(
        R"({{"params": [
          {{"name": "model.layers.3.mlp.experts.7.gate_proj.weight", {0}}},
          {{"name": "model.layers.3.mlp.shared_experts.gate_proj.weight",
            {0}}}]}})",
        shape);
    const std::string routed =
        R"("model.layers.3.mlp.experts.7.gate_proj.weight": [null, ["ep", "fsdp"]])";
    const Laid only_routed = lay(
        R"({"params": [{"name": "model.layers.3.mlp.experts.7.gate_proj.weight",
                            "shape": [2048, 7168], "dtype": "f8_e4m3"}]})",
        "fsdp:4,ep:64",
        256,
        "{" + routed + "}");
    MemoryOptions options = training(Recipe::adam);
    options.experts = 256;
    MemoryEstimate e = estimate_with(only_routed, options);
    CHECK(e.gather_buffer == 917'504);
    CHECK(e.gather_axes == std::vector<std::string>{"fsdp"});
    // Split over ep by its spec, it is not placed on one rank as well.
    REQUIRE(e.placement.tensors.size() == 1);
    CHECK(e.placement.tensors[0] == TensorPlacement{k_every, k_every});

    const Laid both = lay(
        manifest,
        "fsdp:4,ep:64",
        256,
        "{" + routed
            + R"(, "model.layers.3.mlp.shared_experts.gate_proj.weight": [null, ["fsdp", "ep"]]})");
    e = estimate_with(both, options);
    CHECK(e.gather_buffer == 59'637'760);
    REQUIRE(e.gather_units.size() == 1);
    CHECK(e.gather_units[0].name == "model.layers.3");
    CHECK(e.gather_units[0].layer == 3);
    CHECK(e.gather_axes == std::vector<std::string>{"fsdp", "ep"});
  }
  SECTION("MaxText's logical axis 'exp' marks the experts dim") {
    // wi_0 [8 experts, 64 embed, 128 mlp] f32 on ep:2,fsdp:2,tp:2, spec
    // ep,fsdp,tp: gathered over fsdp only, in the compute dtype (bf16)
    // with its gradients: 4 x 64 x 64 x 2 bytes x 2 = 65,536; computing
    // in f32, 131,072.
    const Laid laid = lay(
        R"({"params": [{"name": "decoder/moe/wi_0", "shape": [8, 64, 128],
             "dtype": "f32", "logical_axes": ["exp", "embed", "mlp"]}]})",
        "ep:2,fsdp:2,tp:2",
        8,
        R"({"decoder/moe/wi_0": ["ep", "fsdp", "tp"]})");
    MemoryOptions options = training(Recipe::adam);
    MemoryEstimate e = estimate_with(laid, options);
    CHECK(e.gather_buffer == 65'536);
    CHECK(e.gather_cast == DType::bf16);
    CHECK(e.gather_axes == std::vector<std::string>{"fsdp"});
    options.compute_dtype = DType::f32;
    e = estimate_with(laid, options);
    CHECK(e.gather_buffer == 131'072);
    CHECK(!e.gather_cast);
  }
  SECTION("a split over an axis of size 1 gathers nothing") {
    const Laid laid =
        lay(R"({"params": [{"name": "w", "shape": [8, 8], "dtype": "bf16"}]})",
            "fsdp:1,tp:2",
            2,
            R"({"w": ["fsdp", "tp"]})");
    CHECK(estimate_with(laid, training(Recipe::adam)).gather_buffer == 0);
  }
}

TEST_CASE("memory: FP8 checkpoints train in bf16, their scales are not trained",
          "[memory]") {
  // DeepSeek-V3 layout: an FP8 weight [256, 512] (131,072 elements) and its
  // block-wise f32 scale [2, 4] (8 elements, 32 bytes), one device; and a
  // bf16 weight with a static activation scale (a scalar f32: 4 bytes).
  const Laid laid = lay(R"({"params": [
      {"name": "x.weight", "shape": [256, 512], "dtype": "f8_e4m3"},
      {"name": "x.weight_scale_inv", "shape": [2, 4], "dtype": "f32"},
      {"name": "y.weight", "shape": [16], "dtype": "bf16"},
      {"name": "y.input_scale", "shape": [], "dtype": "f32"}]})",
                        "dp:1",
                        1,
                        R"({"x.weight": [], "x.weight_scale_inv": [],
                            "y.weight": [], "y.input_scale": []})");
  const int64_t w = 131'072;
  SECTION("adam: the weight in bf16, its scale folded in, the other kept") {
    // x.weight: 2 + 2 + 12 bytes per element. The scale is dropped (as
    // DeepSeek's fp8_cast_bf16.py drops *_scale_inv); y.input_scale is
    // model state only: 4 bytes, no grads, no optimizer state.
    // Before: x.weight 1 + 1 + 12, and both scales got grads and Adam state:
    // params 131,072 + 32 + 32 + 4, optimizer 12 x 131,072 + 8 x 9 + ...
    const MemoryEstimate e = estimate_with(laid, training(Recipe::adam));
    CHECK(e.per_device.params == 2 * w + 32 + 4);
    CHECK(e.per_device.grads == 2 * w + 32);
    CHECK(e.per_device.optimizer == 12 * w + 12 * 16);
    CHECK(e.fp8_param_dtype == DType::bf16);
    CHECK(e.scale_tensors == 2);
    CHECK(e.dropped_scale_tensors == 1);
    CHECK(e.grads_counted);
    CHECK_FALSE(e.grad_dtype);  // each tensor's param dtype
  }
  SECTION("params-only: as stored, scales and all") {
    const MemoryEstimate e = estimate_with(laid, training(Recipe::params_only));
    CHECK(e.per_device.params == w + 32 + 32 + 4);
    CHECK(e.fp8_param_dtype == DType::f8_e4m3);
    CHECK(e.dropped_scale_tensors == 0);
  }
  SECTION("--param-dtype f32, MaxText's default weight_dtype") {
    // 4 + 4 + 8 bytes per element (no master copy of f32 weights).
    MemoryOptions options = training(Recipe::adam);
    options.param_dtype.value = DType::f32;
    const MemoryEstimate e = estimate_with(laid, options);
    CHECK(e.per_device.params == 4 * w + 4 * 16 + 4);
    CHECK(e.per_device.grads == 4 * w + 4 * 16);
    CHECK(e.per_device.optimizer == 8 * w + 8 * 16);
    CHECK(e.param_dtype == DType::f32);
  }
  SECTION("--param-dtype f8_e4m3: FP8 training keeps the scales as state") {
    MemoryOptions options = training(Recipe::adam);
    options.param_dtype.value = DType::f8_e4m3;
    const MemoryEstimate e = estimate_with(laid, options);
    CHECK(e.per_device.params == w + 16 + 32 + 4);
    CHECK(e.per_device.grads == w + 16);
    CHECK(e.per_device.optimizer == 12 * w + 12 * 16);
    CHECK(e.dropped_scale_tensors == 0);
  }
  SECTION("--grad-dtype f32 with adam; adam-fp32-grads defaults to f32") {
    MemoryOptions options = training(Recipe::adam);
    options.grad_dtype.value = DType::f32;
    MemoryEstimate e = estimate_with(laid, options);
    CHECK(e.per_device.grads == 4 * w + 4 * 16);
    CHECK(e.grad_dtype == DType::f32);
    e = estimate_with(laid, training(Recipe::adam_fp32_grads));
    CHECK(e.per_device.grads == 4 * w + 4 * 16);
    CHECK(e.grad_dtype == DType::f32);
    options = training(Recipe::adam_fp32_grads);
    options.grad_dtype.value = DType::bf16;
    CHECK(estimate_with(laid, options).per_device.grads == 2 * w + 2 * 16);
  }
  SECTION("a dtype that cannot be trained is an error at its flag") {
    MemoryOptions options = training(Recipe::adam);
    options.param_dtype.value = DType::i8;
    options.grad_dtype.value = DType::f8_e8m0;
    Diagnostics diags;
    CHECK_FALSE(estimate_memory(
        laid.manifest, laid.mesh, laid.shardings, options, diags));
    REQUIRE(diags.error_count() == 2);
    CHECK(render(diags.items()[0])
          == "--param-dtype: error: \"i8\" is not a floating-point dtype "
             "weights or gradients are trained in; e.g. f32, bf16, f16 or "
             "f8_e4m3 [memory.dtype]");
    CHECK(diags.items()[1].location.source == "--grad-dtype");
  }
  SECTION("a grad dtype the recipe does not count warns") {
    MemoryOptions options = training(Recipe::scaling_book);
    options.grad_dtype.value = DType::f32;
    Diagnostics diags;
    auto e = estimate_memory(
        laid.manifest, laid.mesh, laid.shardings, options, diags);
    REQUIRE(e);
    CHECK(e->per_device.grads == 0);
    CHECK_FALSE(e->grads_counted);
    REQUIRE(diags.warning_count() == 1);
    CHECK(diags.items()[0].code == "memory.grad-dtype-unused");
  }
}

TEST_CASE("memory: scales and expert weights by name", "[memory][state]") {
  CHECK(is_quantization_scale("model.layers.0.mlp.gate_proj.weight_scale_inv",
                              DType::f32));
  CHECK(is_quantization_scale("a.weight_scale", DType::f32));
  CHECK(is_quantization_scale("a.weight_scale_2", DType::f32));
  CHECK(is_quantization_scale("a.k_scale", DType::f32));
  CHECK(is_quantization_scale("blocks/0/mx", DType::f8_e8m0));
  CHECK_FALSE(is_quantization_scale("a.layer_scale", DType::f32));
  CHECK_FALSE(is_quantization_scale("norm/scale", DType::f32));
  CHECK(scaled_weight_name("x.weight_scale_inv") == "x.weight");
  CHECK(scaled_weight_name("x.weight_scale_2") == "x.weight");
  CHECK(scaled_weight_name("x.weight_scale") == "x.weight");
  CHECK(scaled_weight_name("x.input_scale").empty());

  const Manifest m = test::manifest_of(R"({"params": [
    {"name": "model.layers.3.mlp.experts.0.w1.weight", "shape": [2], "dtype": "bf16"},
    {"name": "model.layers.3.mlp.experts.gate_up_proj", "shape": [2], "dtype": "bf16"},
    {"name": "model.layers.3.mlp.shared_experts.up_proj.weight", "shape": [2], "dtype": "bf16"},
    {"name": "model.layers.3.mlp.gate.weight", "shape": [2], "dtype": "bf16"}]})");
  CHECK(is_expert_weight(m.tensors()[0]));
  CHECK(is_expert_weight(m.tensors()[1]));
  CHECK_FALSE(is_expert_weight(m.tensors()[2]));
  CHECK_FALSE(is_expert_weight(m.tensors()[3]));
}

// Found by fuzz_manifest (which plans each manifest read): one tensor whose
// parts fit in int64 but whose sum does not was added unchecked
// (StateBytes::model_states(), undefined behaviour: the asan preset aborts
// here without the check). 2^62 - 1 bf16 elements: params 2 x (2^62 - 1) =
// 2^63 - 2 bytes, the largest even int64; Adam's bf16 grads the same again,
// so params + grads = 2^64 - 4 > 2^63 - 1. Reported as memory.overflow at
// the manifest, as a sum over tensors that overflows is.
TEST_CASE("memory: one tensor's model states over 2^63 bytes is an overflow",
          "[memory]") {
  const Manifest m = test::manifest_of(
      R"({"params": [{"name": "w", "shape": [4611686018427387903, 1],
                      "dtype": "bf16"}]})");
  REQUIRE(m.total_bytes()
          == std::numeric_limits<int64_t>::max() - 1);  // 2^63 - 2
  const Mesh mesh = test::mesh_of("dp:1", 1);
  const auto shardings = all_with(m, mesh, "P()");
  MemoryOptions options;
  options.recipe = Recipe::adam;
  options.zero.at = Location::of("--zero");
  options.data_axes.at = Location::of("--data-axes");
  Diagnostics diags;
  CHECK_FALSE(estimate_memory(m, mesh, shardings, options, diags));
  REQUIRE(diags.error_count() == 1);
  CHECK(diags.items()[0].code == "memory.overflow");
  CHECK(diags.items()[0].location.source == m.source);

  // Weights alone (2^63 - 2 bytes) still fit.
  options.recipe = Recipe::params_only;
  Diagnostics none;
  auto e = estimate_memory(m, mesh, shardings, options, none);
  REQUIRE(e);
  CHECK(e->max_device_total == std::numeric_limits<int64_t>::max() - 1);
}
