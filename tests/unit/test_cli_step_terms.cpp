// The step's terms that frameworks pay beyond the matmuls (docs/step.md):
// plain attention's full products and score passes, the residual stream's
// passes with and without sequence parallelism, Megatron's re-gathers and
// pipeline sends, the distributed optimizer's collectives, the routed
// experts' dispatch. Every figure is worked by hand, most from GPT-2
// (configs/models/gpt2.json: 12 layers, h 768, 12 heads of 64, MLP 3072,
// vocab 50257, dropout 0.1 on the attention probabilities and the residual
// stream).

#include "support/test_support.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using nlohmann::json;
using shardplan::test::args;
using shardplan::test::CliResult;
using shardplan::test::run_cli;

namespace {

// The step of a `memory` command line that exits 0.
json step_of(const std::string& command) {
  const CliResult r = run_cli(args(command + " --format json"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  return json::parse(r.out)["step"];
}

// The step of GPT-2 at seq 1024 on an A100 x 8 (HBM 2.039e12 B/s), `more`
// appended.
json gpt2_step(const std::string& more) {
  return step_of(
      "memory --topology a100x8 --model gpt2 --rules fsdp-tp --seq 1024 "
      "--batch 8 "
      + more);
}

// The step of Llama 3 8B on `topology` (eight GPUs) as fsdp:8, one
// sequence of 1024 tokens a device, `more` appended.
json llama_step(const std::string& topology, const std::string& more) {
  return step_of("memory --topology " + topology
                 + " --model llama-3-8b --rules fsdp --mesh fsdp:8 --seq "
                   "1024 --batch 8 "
                 + more);
}

double seconds(const json& step, const char* key) {
  return step[key].get<double>();
}

// The collectives whose label starts with `prefix`: label, count, bytes.
std::vector<std::tuple<std::string, int64_t, int64_t>> rows(
    const json& step, const std::string& prefix) {
  std::vector<std::tuple<std::string, int64_t, int64_t>> out;
  for (const json& row : step["collectives"]) {
    const std::string what = row["what"];
    if (what.starts_with(prefix)) {
      out.emplace_back(what, row["count"], row["bytes_per_device"]);
    }
  }
  return out;
}

constexpr double k_hbm = 2.039e12;

}  // namespace

TEST_CASE("step terms: plain attention computes every score", "[cli][step]") {
  // One sequence of 1024 tokens a device (dp:8), remat none. Causal (flash)
  // forward FLOPs a token and layer: 4 x 12 heads x 64 x 1024 / 2 =
  // 1,572,864; plain computes the masked half too: 3,145,728. Forward and
  // backward (x 3), 12 layers, 1024 tokens: 57,982,058,496 flash,
  // 115,964,116,992 plain. The model's FLOPs stay causal.
  const json flash = gpt2_step("--mesh dp:8 --remat none --attention flash");
  const json plain = gpt2_step("--mesh dp:8 --remat none --attention plain");
  CHECK(seconds(flash, "attention_flops_per_device") == 57'982'058'496.0);
  CHECK(seconds(plain, "attention_flops_per_device") == 115'964'116'992.0);
  CHECK(seconds(plain, "flops_per_device") - seconds(flash, "flops_per_device")
        == 57'982'058'496.0);
  CHECK(plain["model_flops"] == flash["model_flops"]);
}

TEST_CASE("step terms: plain attention's passes over the scores",
          "[cli][step]") {
  // A token's row of scores: 12 heads x 1024 keys = 12,288 elements, 2
  // bytes each. Forward: the fused softmax reads and writes (4), dropout
  // reads, writes and writes a 1-byte mask (5); backward: dropout's (5),
  // the softmax's reads two and writes one (6): 20 bytes an element,
  // 245,760 a token and layer; x 12 layers x 1024 tokens = 3,019,898,880
  // bytes over 2.039e12 B/s. Remat full recomputes the core: its forward
  // (9 bytes) again, 29 an element.
  const json flash = gpt2_step("--mesh dp:8 --remat none --attention flash");
  const json plain = gpt2_step("--mesh dp:8 --remat none --attention plain");
  CHECK(seconds(plain, "memory_seconds") - seconds(flash, "memory_seconds")
        == Approx(3'019'898'880.0 / k_hbm));
  const json flash_full = gpt2_step("--mesh dp:8 --remat full");
  const json plain_full =
      gpt2_step("--mesh dp:8 --remat full --attention plain");
  CHECK(seconds(plain_full, "memory_seconds")
            - seconds(flash_full, "memory_seconds")
        == Approx(12'288.0 * 29 * 12 * 1024 / k_hbm));
}

TEST_CASE(
    "step terms: the residual stream's passes without sequence "
    "parallelism",
    "[cli][step]") {
  // dp:2,tp:4, 4 sequences a data shard: 1,024 of a device's 4,096 tokens
  // are its share. The residual stream's passes a token and layer: two
  // norms 2 x 2 x 2 x 768, two residual adds 2 x (3 x 2 + 1 mask byte) x
  // 768: 16,896 bytes, three times (remat none). Replicated over tp:4,
  // every tensor rank passes all 4,096 tokens: 3 more shares, 3 x 16,896 x
  // 3 x 12 layers x 1,024 = 1,868,562,432 bytes.
  const json replicated = gpt2_step("--mesh dp:2,tp:4 --remat none");
  const json sequence =
      gpt2_step("--mesh dp:2,tp:4 --remat none --sequence-parallel");
  CHECK(seconds(replicated, "memory_seconds")
            - seconds(sequence, "memory_seconds")
        == Approx(1'868'562'432.0 / k_hbm));
}

TEST_CASE("step terms: Megatron's sequence-parallel re-gathers",
          "[cli][step]") {
  // dp:2,tp:4 with sequence parallelism: a microbatch's 4 x 1024 tokens x
  // 768 x 2 bytes = 6,291,456 a collective. PyTorch (Megatron) gathers the
  // QKV and FC1 inputs again in the backward: 2 x 12 layers = 24 more
  // all-gathers; XLA keeps what its policy saves.
  const std::string mesh = "--mesh dp:2,tp:4 --remat none --sequence-parallel";
  const json megatron = gpt2_step(mesh + " --runtime pytorch");
  const json xla = gpt2_step(mesh + " --runtime xla");
  using Row = std::tuple<std::string, int64_t, int64_t>;
  CHECK(rows(megatron, "tp all-gather (backward)")
        == std::vector<Row>{{"tp all-gather (backward)", 24, 6'291'456}});
  CHECK(rows(xla, "tp all-gather (backward)").empty());
  // The forward's and backward's reduce-scatters and gathers: 4 a layer.
  CHECK(rows(megatron, "tp reduce-scatter")
        == std::vector<Row>{{"tp reduce-scatter", 48, 6'291'456}});
}

TEST_CASE("step terms: pipeline sends, scattered and per virtual stage",
          "[cli][step]") {
  // pp:2,tp:4 on 8 devices, 8 sequences in 4 microbatches of 2: a
  // microbatch's activation is 2 x 1024 x 768 x 2 = 3,145,728 bytes; with
  // sequence parallelism a device sends its quarter, 786,432. Interleaved
  // over 3 virtual stages each microbatch crosses a device's boundary 3
  // times each way: 2 x 4 x 3 = 24 sends. A GPU topology runs PyTorch by
  // default, whose sends are scattered in any case; replicated under XLA,
  // the whole
  // activation, 2 x 4 = 8 times.
  using Row = std::tuple<std::string, int64_t, int64_t>;
  const json sp = gpt2_step(
      "--mesh pp:2,tp:4 --microbatches 4 --stage-interleave 3 "
      "--sequence-parallel --runtime pytorch");
  CHECK(rows(sp, "pipeline send")
        == std::vector<Row>{{"pipeline send", 24, 786'432}});
  const json whole =
      gpt2_step("--mesh pp:2,tp:4 --microbatches 4 --runtime xla");
  CHECK(rows(whole, "pipeline send")
        == std::vector<Row>{{"pipeline send", 8, 3'145'728}});
}

TEST_CASE("step terms: the distributed optimizer's collectives",
          "[cli][step]") {
  // dp:8 with the optimizer sharded over it (ZeRO 1, Megatron's
  // distributed optimizer): the layers' weights (12 x 12 x 768^2 =
  // 84,934,656 elements) have their f32 gradients reduce-scattered
  // (339,738,624 bytes) and their bf16 weights gathered after the update
  // (169,869,312), instead of one all-reduce of the gradients.
  using Row = std::tuple<std::string, int64_t, int64_t>;
  const std::string base =
      "--mesh dp:8 --recipe megatron --param-dtype bf16 --remat none";
  const json sharded = gpt2_step(base + " --zero 1");
  CHECK(rows(sharded, "data")
        == std::vector<Row>{{"data reduce-scatter (gradients)", 1, 339'738'624},
                            {"data all-gather (forward)", 1, 169'869'312}});
  const json replicated = gpt2_step(base);
  CHECK(rows(replicated, "data")
        == std::vector<Row>{{"data all-reduce (gradients)", 1, 339'738'624}});
}

TEST_CASE("step terms: eager PyTorch's elementwise kernels", "[cli][step]") {
  // Llama 3 8B (h 4096, 32 heads and 8 KV heads of 128, MLP 14336, RoPE,
  // no dropout) on h100x8 as fsdp:8, one sequence of 1024 tokens a device,
  // remat none (three passes). Eager adds a token and layer: two RMSNorms
  // at 4e + 24 = 32 bytes an element where fused reads and writes 4, 2 x 28
  // x 4096 = 229,376; the rotary embedding's 2e + 16 = 20 bytes over q and
  // k, 20 x 40 x 128 = 102,400; SwiGLU's silu and product apart, 2e x
  // 14336 = 57,344: 389,120 bytes, x 3 x 32 layers x 1024 tokens =
  // 38,252,052,480 over 3.35e12 B/s (the H100 has no measured memory
  // efficiency: the datasheet's).
  const json fused = llama_step("h100x8", "--remat none --kernels fused");
  const json eager = llama_step("h100x8", "--remat none --kernels eager");
  CHECK(seconds(eager, "memory_seconds") - seconds(fused, "memory_seconds")
        == Approx(38'252'052'480.0 / 3.35e12));
  CHECK(eager["assumptions"]["kernels"]["value"] == "eager");
  CHECK(fused["assumptions"]["kernels"]["value"] == "fused");
  // A bad mode is refused at the flag.
  const CliResult bad = run_cli(
      args("memory --topology h100x8 --model llama-3-8b --rules fsdp --mesh "
           "fsdp:8 --seq 1024 --batch 8 --kernels compiled"));
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--kernels"));
}

TEST_CASE("step terms: the H200's measured memory-bound rates", "[cli][step]") {
  // The same run on h200x8: the memory-bound work at the measured
  // fractions of the 4.8e12 B/s datasheet (bench/gpu/derive.py): a
  // device-to-device copy's 0.886 fused, eager PyTorch's elementwise
  // kernels' 0.658 eager; eager moves the 38,252,052,480 bytes above more.
  const json fused = llama_step("h200x8", "--remat none --kernels fused");
  const json eager = llama_step("h200x8", "--remat none --kernels eager");
  CHECK(fused["assumptions"]["memory_efficiency"]["value"] == "0.886");
  CHECK(eager["assumptions"]["memory_efficiency"]["value"] == "0.658");
  CHECK_THAT(
      eager["assumptions"]["memory_efficiency"]["source"].get<std::string>(),
      Catch::Contains("bench/gpu/measure.py"));
  const double fused_bytes = seconds(fused, "memory_seconds") * 4.8e12 * 0.886;
  const double eager_bytes = seconds(eager, "memory_seconds") * 4.8e12 * 0.658;
  CHECK(eager_bytes - fused_bytes == Approx(38'252'052'480.0));
  // No measured figure: the datasheet's, said so.
  const json h100 = llama_step("h100x8", "--remat none");
  CHECK(h100["assumptions"]["memory_efficiency"]["value"] == "1");
  CHECK_THAT(
      h100["assumptions"]["memory_efficiency"]["source"].get<std::string>(),
      Catch::Contains("datasheet"));
}

TEST_CASE("step terms: JAX's attention kernel on the H200", "[cli][step]") {
  // Measured on an H200 (bench/gpu/derive.py): PyTorch's SDPA runs the
  // causal flash forward and backward at the small Llama's shape in 1.908
  // ms, JAX's jax.nn.dot_product_attention (cuDNN) in 2.368: 0.437 and
  // 0.352 of the peak by the step's count. Runtime xla takes JAX's; a flag
  // wins over both.
  const auto attention = [](const std::string& topology,
                            const std::string& more) {
    return llama_step(
        topology,
        "--remat none " + more)["assumptions"]["attention_efficiency"];
  };
  CHECK(attention("h200x8", "--runtime pytorch")["value"] == "0.437");
  const json jax = attention("h200x8", "--runtime xla");
  CHECK(jax["value"] == "0.352");
  CHECK_THAT(jax["source"].get<std::string>(),
             Catch::Contains("jax.nn.dot_product_attention"));
  CHECK(attention("h200x8", "--runtime xla --attention-efficiency 0.5")["value"]
        == "0.5");
  // The H100 has no JAX figure: its fitted one under either runtime.
  CHECK(attention("h100x8", "--runtime xla")["value"]
        == attention("h100x8", "--runtime pytorch")["value"]);
}

TEST_CASE("step terms: the matmuls' shapes on the H100's curve",
          "[cli][step]") {
  // GPT-2's matmuls are 768 wide: on XLA's sm_90 table a 1024 x 768 x 768
  // GEMM runs at about a third of the 4096-cube's rate, so the shape
  // factor is well under 1, and the weights' matmul time is their FLOPs
  // over peak x efficiency x factor (the attention kernel's apart).
  const json step = step_of(
      "memory --topology h100x8 --model gpt2 --rules fsdp-tp --mesh "
      "dp:8 --seq 1024 --batch 8 --remat none "
      "--matmul-efficiency 0.5 --attention-efficiency 0.5");
  const double factor = std::stod(
      step["assumptions"]["matmul_shape_factor"]["value"].get<std::string>());
  CHECK(factor > 0.2);
  CHECK(factor < 0.6);
  const double attention = seconds(step, "attention_flops_per_device");
  const double flops = seconds(step, "flops_per_device");
  CHECK(seconds(step, "matmul_seconds")
        == Approx((flops - attention) / (9.89e14 * 0.5 * factor)
                  + attention / (9.89e14 * 0.5))
               .epsilon(0.002));
  // The A100 has no curve: no factor.
  const json a100 = gpt2_step("--mesh dp:8 --remat none");
  CHECK_FALSE(a100["assumptions"].contains("matmul_shape_factor"));
}

TEST_CASE("step terms: FP8 matmuls at the chip's FP8 peak", "[cli][step]") {
  // Llama 3 8B on b200x8 as fsdp:8 (no measured curve): the weights'
  // matmuls at the FP8 peak, 4.5e15 (docs/sources.md#fp8), the attention
  // kernel at the bf16 peak, 2.25e15, both at efficiency 0.5. Their inputs
  // and output gradients cast to FP8, (2 + 1) bytes an element twice, over
  // 2 x 4096 + 32 x 128 + 14336 = 26,624 elements a token and layer: x 32
  // layers x 1024 tokens = 5,234,491,392 bytes over 8e12 B/s.
  const std::string base =
      "--remat none --matmul-efficiency 0.5 --attention-efficiency 0.5 ";
  const json bf16 = llama_step("b200x8", base + "--matmul-dtype bf16");
  const json fp8 = llama_step("b200x8", base + "--matmul-dtype fp8");
  const double attention = seconds(fp8, "attention_flops_per_device");
  const double flops = seconds(fp8, "flops_per_device");
  CHECK(seconds(fp8, "matmul_seconds")
        == Approx((flops - attention) / (4.5e15 * 0.5)
                  + attention / (2.25e15 * 0.5)));
  CHECK(seconds(bf16, "matmul_seconds") == Approx(flops / (2.25e15 * 0.5)));
  CHECK(seconds(fp8, "memory_seconds") - seconds(bf16, "memory_seconds")
        == Approx(5'234'491'392.0 / 8e12));
  CHECK(fp8["assumptions"]["matmul_dtype"]["value"] == "fp8");
  // MFU stays against the bf16 peak (MaxText's and Megatron's convention).
  CHECK(fp8["mfu"].get<double>()
        == Approx(bf16["mfu"].get<double>() * seconds(bf16, "step_seconds")
                  / seconds(fp8, "step_seconds")));
}

TEST_CASE("step terms: FP8 GEMMs reach less of their peak on the H200",
          "[cli][step]") {
  // The H200's best FP8 GEMMs reach 0.698 of the 1.979e15 FP8 peak where
  // bf16 reaches 0.811 of 9.89e14 (bench/gpu/derive.py): the weights'
  // FP8 matmuls run at 1.979e15 x 0.86, at the same efficiency and shape
  // factor as bf16's; the attention kernel stays at the bf16 peak.
  const std::string base =
      "--remat none --matmul-efficiency 0.5 --attention-efficiency 0.5 ";
  const json bf16 = llama_step("h200x8", base + "--matmul-dtype bf16");
  const json fp8 = llama_step("h200x8", base + "--matmul-dtype fp8");
  const double attention = seconds(fp8, "attention_flops_per_device");
  const double weights_bf16 =
      seconds(bf16, "matmul_seconds") - attention / (9.89e14 * 0.5);
  CHECK(seconds(fp8, "matmul_seconds") - attention / (9.89e14 * 0.5)
        == Approx(weights_bf16 * 9.89e14 / (1.979e15 * 0.86)));
  CHECK_THAT(fp8["assumptions"]["matmul_dtype"]["source"].get<std::string>(),
             Catch::Contains("x 0.86"));
}

TEST_CASE("step terms: FP8 on a chip without FP8 units, and MaxText's",
          "[cli][step]") {
  // The A100 has no FP8: a warning at the flag, the bf16 peak.
  const CliResult a100 = run_cli(
      args("memory --topology a100x8 --model gpt2 --rules fsdp-tp --mesh dp:8 "
           "--seq 1024 --batch 8 --matmul-dtype fp8"));
  CHECK(a100.code == 0);
  CHECK_THAT(a100.err, Catch::Contains("step.no-fp8"));
  CHECK_THAT(a100.err, Catch::Contains("--matmul-dtype"));
  // MaxText's quantization: fp8 runs the matmuls in FP8 (its source the
  // key); int8 is not modelled (a warning, the bf16 peak).
  const auto maxtext = [](const std::string& quantization) {
    return run_cli(
        args("memory --topology tpu7x-16 --format json --maxtext-config {} "
             "max_target_length=1024 per_device_batch_size=1 quantization="
                 + quantization,
             shardplan::test::data_path("maxtext/model-run.yml")));
  };
  const CliResult fp8 = maxtext("fp8_full");
  REQUIRE(fp8.code == 0);
  const json step = json::parse(fp8.out)["step"];
  CHECK(step["assumptions"]["matmul_dtype"]["value"] == "fp8");
  CHECK_THAT(step["assumptions"]["matmul_dtype"]["source"].get<std::string>(),
             Catch::Contains("quantization") && Catch::Contains("2.307e+15"));
  const CliResult int8 = maxtext("int8");
  REQUIRE(int8.code == 0);
  CHECK_THAT(int8.err, Catch::Contains("maxtext.unmodelled"));
  CHECK(json::parse(int8.out)["step"]["assumptions"]["matmul_dtype"]["value"]
        == "bf16");
}

TEST_CASE("step terms: gradient accumulation over microbatches",
          "[cli][step]") {
  // GPT-2's 124,439,808 parameters with Megatron's f32 gradients on dp:8:
  // 497,759,232 bytes of gradients a device. Four microbatches add three
  // into the buffer after the first writes it: 3 x 2 x 497,759,232 =
  // 2,986,555,392 bytes more than one microbatch of the same tokens.
  const std::string base =
      "--mesh dp:8 --recipe megatron --param-dtype bf16 --remat none "
      "--batch 32 --microbatches ";
  const json one = step_of(
      "memory --topology a100x8 --model gpt2 --rules fsdp-tp --seq 1024 " + base
      + "1");
  const json four = step_of(
      "memory --topology a100x8 --model gpt2 --rules fsdp-tp --seq 1024 " + base
      + "4");
  CHECK(seconds(four, "memory_seconds") - seconds(one, "memory_seconds")
        == Approx(2'986'555'392.0 / k_hbm));
}

TEST_CASE("step terms: routed experts' dispatch", "[cli][step]") {
  // Mixtral 8x7B (h 4096, experts of 14336, top-2, no dropout) as fsdp:8,
  // 1,024 tokens a device. A rerun forward (full remat) adds one pass of
  // every layer's memory-bound work a token: the residual stream's norms
  // and adds (2 x 2 x 2 + 2 x 3 x 2) x 4096 = 81,920 bytes, the two
  // experts' gated activations 3 x 2 x 14336 x 2 = 172,032, and the
  // dispatch, the tokens permuted to and from their experts and summed,
  // (5 x 2 + 1) x 4096 x 2 = 90,112: 344,064 bytes x 32 layers x 1,024
  // tokens.
  const auto mixtral = [](const std::string& remat) {
    return step_of(
        "memory --topology a100x8 --model mixtral-8x7b-v0.1 --rules fsdp "
        "--mesh fsdp:8 --seq 1024 --batch 8 --remat "
        + remat);
  };
  CHECK(seconds(mixtral("full"), "memory_seconds")
            - seconds(mixtral("none"), "memory_seconds")
        == Approx(344'064.0 * 32 * 1024 / k_hbm));
}

TEST_CASE("step terms: --grouped-gemm picks the routed experts' kernel",
          "[cli][step]") {
  // Mixtral 8x7B as fsdp:8,ep:8 on 64 H200s, 4096 tokens a device: each
  // expert receives 4096 x 2 x 8 / 8 = 8192 tokens, where the measured
  // grouped GEMM reaches 0.705 of the best (its last point), below what
  // the dense curve gives a GEMM of 8192 rows: the grouped step is slower.
  const auto mixtral = [](const std::string& kernel) {
    return step_of(
        "memory --topology h200x64 --model mixtral-8x7b-v0.1 --rules fsdp "
        "--mesh fsdp:8,ep:8 --seq 4096 --batch 64 --grouped-gemm "
        + kernel);
  };
  const json grouped = mixtral("grouped");
  const json per_expert = mixtral("per-expert");
  CHECK(seconds(grouped, "matmul_seconds")
        > seconds(per_expert, "matmul_seconds"));
  CHECK_THAT(grouped["assumptions"]["matmul_shape_factor"]["source"]
                 .get<std::string>(),
             Catch::Contains("--grouped-gemm grouped"));
  CHECK_THAT(per_expert["assumptions"]["matmul_shape_factor"]["source"]
                 .get<std::string>(),
             !Catch::Contains("grouped GEMM"));
  // A kernel it does not know is the flag's error.
  const CliResult bad = run_cli(
      args("memory --topology h200x8 --model llama-3-8b --rules fsdp "
           "--mesh fsdp:8 --seq 1024 --batch 8 --grouped-gemm cutlass"));
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--grouped-gemm"));
}
