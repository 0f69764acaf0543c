// The training step's estimate (include/shardplan/workload.hpp,
// estimate_step; docs/step.md). FLOPs are worked by hand from the model's
// dims in MaxText's convention (docs/sources.md#model-flops); the bubble from
// the 1F1B schedule (docs/sources.md#pipeline); overlap and monotonicity as
// properties.

#include "support/test_support.hpp"
#include "workload/internal.hpp"

#include <shardplan/cost.hpp>
#include <shardplan/io.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/models.hpp>
#include <shardplan/topology.hpp>
#include <shardplan/workload.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace shardplan;

namespace {

// One estimate: `model` on `mesh` laid out on `topology`, FSDP over the
// data axes, bf16 weights and grads.
struct Run {
  Run(std::string model_name,
      std::string topology_name,
      std::string mesh_text,
      int64_t seq_length,
      int64_t global_batch,
      int64_t microbatch_count = 1)
      : model(std::move(model_name)),
        topology(std::move(topology_name)),
        mesh(std::move(mesh_text)),
        seq(seq_length),
        batch(global_batch),
        microbatches(microbatch_count) {}

  std::string model;
  std::string topology;
  std::string mesh;
  int64_t seq;
  int64_t batch;
  int64_t microbatches;
  std::string remat = "full";
  int64_t interleave = 1;
  StepOptions options;
  // The axes the specs split some tensor over (StepInputs::split_axes).
  std::optional<std::vector<std::string>> split_axes;
};

StepEstimate estimate(const Run& run, Topology* topology_override = nullptr) {
  const ModelConfig model = test::model_config(run.model);
  Topology topology =
      topology_override ? *topology_override : test::topology_of(run.topology);
  Diagnostics diags;
  MeshOptions mesh_options;
  mesh_options.sources.mesh = "--mesh";
  mesh_options.num_devices = topology.devices();
  std::optional<Mesh> mesh = parse_mesh(run.mesh, mesh_options, diags);
  REQUIRE(mesh);
  std::optional<MeshLayout> layout =
      layout_mesh(topology, *mesh, LayoutOptions{}, diags);
  INFO(test::first_error(diags));
  REQUIRE(layout);
  std::optional<AxisRoles> roles =
      resolve_axis_roles(*mesh, AxisRoles{}, AxisRoleSources{}, diags);
  REQUIRE(roles);
  Workload w;
  w.seq.value = run.seq;
  w.batch.value = run.batch;
  w.microbatches.value = run.microbatches;
  w.remat.value = run.remat;
  w.stage_interleave.value = run.interleave;
  std::optional<ActivationEstimate> a =
      estimate_activations(model, *mesh, *roles, w, diags);
  INFO(test::first_error(diags));
  REQUIRE(a);
  StepInputs in;
  in.topology = &topology;
  in.links = layout->links;
  in.gather_axes = roles->data;
  in.split_axes = run.split_axes;
  std::optional<StepEstimate> step =
      estimate_step(model, *mesh, *roles, *a, in, run.options, diags);
  INFO(test::first_error(diags));
  REQUIRE(step);
  return *step;
}

}  // namespace

TEST_CASE("step: a dense model's FLOPs are 6 N D plus causal attention",
          "[workload][step]") {
  // Llama-3-8B: h 4096, 32 heads of 128, 8 KV heads, gated MLP 14336, 32
  // layers, vocab 128256. Matmul weights per layer: q, k, v 4096 x 6144
  // (25,165,824), o 4096 x 4096 (16,777,216), MLP 3 x 4096 x 14336
  // (176,160,768): 218,103,808; with the head's 4096 x 128256
  // (525,336,576), N = 32 x 218,103,808 + 525,336,576 = 7,504,658,432
  // (MaxText counts the logits, not the embedding lookup). Causal
  // attention: 12 x L x a x d x seq / 2 = 12 x 32 x 32 x 128 x 4096 =
  // 6,442,450,944 per token at seq 8192.
  const StepEstimate e =
      estimate(Run("llama-3-8b", "v5p-128", "fsdp:64", 8192, 256));
  const double per_token = 6.0 * 7'504'658'432 + 6'442'450'944;
  REQUIRE(e.tokens == 256 * 8192);
  CHECK(e.model_flops == Approx(per_token * 256 * 8192).epsilon(1e-12));
  // Full remat recomputes each layer's forward once more: + L x (2 x
  // 218,103,808 + 2 x 32 x 128 x 8192 / ... ) = the layers' forward, a
  // third of their training FLOPs. Per device: / 64.
  const double layers_forward = 32.0 * (2 * 218'103'808.0 + 67'108'864.0);
  CHECK(
      e.flops_per_device
      == Approx((per_token + layers_forward) * 256 * 8192 / 64).epsilon(1e-12));
  // Matmuls at v5p's 4.59e14 FLOP/s, the roofline.
  CHECK(e.matmul_seconds == Approx(e.flops_per_device / 4.59e14));
  CHECK(e.mfu == Approx(e.model_flops / (e.step_seconds * 64 * 4.59e14)));
  CHECK(e.tokens_per_second_per_device
        == Approx(256.0 * 8192 / e.step_seconds / 64));
}

TEST_CASE("step: an MoE layer's FLOPs count the top-k experts",
          "[workload][step]") {
  // Mixtral-8x7B: attention as Llama-3-8B's (41,943,040 weights), a router
  // 4096 x 8 (32,768) and 2 of 8 experts of 3 x 4096 x 14336
  // (352,321,536) per token: 394,297,344 a layer; x 32 plus the head's
  // 4096 x 32000 (131,072,000): N = 12,748,587,008 active. Attention at
  // seq 4096: 12 x 32 x 32 x 128 x 2048 = 3,221,225,472 per token.
  Run run{"mixtral-8x7b-v0.1", "v5p-128", "fsdp:16,ep:4", 4096, 64};
  run.remat = "none";
  const StepEstimate e = estimate(run);
  const double per_token = 6.0 * 12'748'587'008 + 3'221'225'472;
  CHECK(e.model_flops == Approx(per_token * 64 * 4096).epsilon(1e-12));
  // Without remat a device computes its 1/64 share.
  CHECK(e.flops_per_device
        == Approx(per_token * 64 * 4096 / 64).epsilon(1e-12));
  // The experts' all-to-all: dispatch and combine, forward and backward,
  // per layer: 4 x 32 calls over ep.
  bool found = false;
  for (const StepCollective& c : e.collectives) {
    if (collective_label(c) == "expert all-to-all") {
      found = true;
      CHECK(c.count == 128);
      CHECK(c.mesh_axes == std::vector<std::string>{"ep"});
      // The group's array: 4 ranks x (1 sequence x 4096 tokens x top-2 x
      // 4096 x 2 bytes); 64 sequences over 16 x 4 batch shards.
      CHECK(c.bytes_per_device == int64_t{4} * 4096 * 2 * 4096 * 2);
    }
  }
  CHECK(found);
}

TEST_CASE("step: kernel tiles, worked by hand", "[workload][step]") {
  using workload_detail::causal_block_ratio;
  using workload_detail::grouped_tile_ratio;
  using workload_detail::tokamax_tile_rows;
  // 4096 tokens in blocks of 2048: 3 of 4 blocks computed, 1.5 x the
  // causal half; of 8192: 10 of 16, 1.25 x; 512 blocks of 8192: 136 of
  // 256, 1.0625 x.
  CHECK(causal_block_ratio(4096, 2048, 2048) == 1.5);
  CHECK(causal_block_ratio(8192, 2048, 2048) == 1.25);
  CHECK(causal_block_ratio(8192, 512, 512) == 1.0625);
  // q blocks of 1024 by kv blocks of 2048: the four q blocks reach 1, 1,
  // 2 and 2 kv blocks: 1024 x 12,288 of 4096^2 / 2, 1.5 x.
  CHECK(causal_block_ratio(4096, 1024, 2048) == 1.5);
  // A block wider than the sequence is the sequence (MaxText's min): one
  // block, the whole square.
  CHECK(causal_block_ratio(1000, 2048, 2048) == 2);
  CHECK(causal_block_ratio(4096, 0, 0) == 1);
  // DeepSeek-V3 on a device of 7x-b: 32,768 tokens x top-8 = 262,144 rows
  // in 256 groups. 512-row tiles: 512 filled, 255 more: 767 / 512.
  CHECK(grouped_tile_ratio(262144, 256, 512) == 767.0 / 512);
  CHECK(grouped_tile_ratio(262144, 256, 256) == 1279.0 / 1024);
  // A partial last tile computes whole: 1000 rows in two 512-row tiles.
  CHECK(grouped_tile_ratio(1000, 1, 512) == 1024.0 / 1000);
  CHECK(grouped_tile_ratio(1000, 8, 0) == 1);
  // tokamax 0.0.10's tuned tiles for that shape (gate and up: k 7168, n
  // 2048): 256, 256, 512; the down projection's (k 2048, n 7168): 128,
  // 256, 256; its default elsewhere, 128.
  CHECK(tokamax_tile_rows(0, 262144, 7168, 2048, 256) == 256);
  CHECK(tokamax_tile_rows(2, 262144, 7168, 2048, 256) == 512);
  CHECK(tokamax_tile_rows(0, 262144, 2048, 7168, 256) == 128);
  CHECK(tokamax_tile_rows(1, 262144, 2048, 7168, 256) == 256);
  CHECK(tokamax_tile_rows(0, 8192, 4096, 14336, 2) == 128);
}

TEST_CASE("step: a TPU grouped matmul computes the row tiles it visits",
          "[workload][step]") {
  // Mixtral-8x7B as above: a device's 4096 tokens x top-2 = 8192 rows
  // into its 2 of 8 experts (ep:4). Megablox's 512-row tiles: 16 filled,
  // one more where the second expert's rows start inside a tile: 17 / 16.
  // Every pass of the experts' matmuls (forward, the input's gradient,
  // the weights'; remat none, no rerun) computes 1/16 more of the routed
  // FLOPs, 2 x 3 x 4096 x 14336 x 2 = 704,643,072 a token and layer.
  Run run{"mixtral-8x7b-v0.1", "v5p-128", "fsdp:16,ep:4", 4096, 64};
  run.remat = "none";
  const StepEstimate plain = estimate(run);
  GroupedTiles tiles;
  tiles.kernel = "megablox";
  for (auto& matrix : tiles.rows) {
    matrix = {512, 512, 512};
  }
  run.options.grouped_tiles = tiles;
  const double routed = 704'643'072.0 * 32 * 4096;
  CHECK(estimate(run).flops_per_device - plain.flops_per_device
        == Approx(3 * routed / 16));
  // tokamax's kernel picks 128 rows for a shape its table lacks: 64 tiles
  // and one more, 1/64.
  for (auto& matrix : run.options.grouped_tiles->rows) {
    matrix = {0, 0, 0};
  }
  CHECK(estimate(run).flops_per_device - plain.flops_per_device
        == Approx(3 * routed / 64));
  // A GPU's grouped GEMM is priced by its measured rates instead.
  Run gpu{"mixtral-8x7b-v0.1", "h100x64", "fsdp:16,ep:4", 4096, 64};
  gpu.remat = "none";
  const double before = estimate(gpu).flops_per_device;
  gpu.options.grouped_tiles = tiles;
  CHECK(estimate(gpu).flops_per_device == before);
}

TEST_CASE("step: routed experts at the grouped GEMM's measured rate",
          "[workload][step]") {
  // Mixtral-8x7B as fsdp:16,ep:4 on H100s, its experts as one grouped GEMM
  // (--grouped-gemm grouped): each of a device's 2 experts
  // receives 4096 tokens x top-2 x 4 expert shards / 8 experts = 4096
  // tokens, where the grouped curve gives 0.705 of the best. On a flat
  // matmul curve (every dense shape at the best), the shape factor is the
  // FLOP-weighted harmonic mean of 1 for the dense matmuls and 0.705 for
  // the routed: a token's forward, per layer, q k v 2 x 4096 x 6144
  // (50,331,648), o 2 x 4096 x 4096 (33,554,432), the router 2 x 4096 x 8
  // (65,536), x 32 layers, and the head 2 x 4096 x 32000 (262,144,000):
  // 2,948,595,712 dense; the routed 32 x 704,643,072 = 22,548,578,304.
  // The router's 8 outputs are below the curve's smallest dimension, 256:
  // each of its passes at 8 / 256 of the rate, its 2,097,152 FLOPs weigh
  // 32 times.
  Topology h100 = test::topology_of("h100x64");
  MatmulCurve& flat = h100.figures.matmul_curve;
  flat.dims = {256, 512};
  flat.rates.assign(8, 1e15);
  Run run{"mixtral-8x7b-v0.1", "h100x64", "fsdp:16,ep:4", 4096, 64};
  run.remat = "none";
  // A GEMM an expert (the default): each at its rows, flat here.
  const StepEstimate per_expert = estimate(run, &h100);
  CHECK(
      per_expert.matmul_seconds
      == Approx(
          (per_expert.flops_per_device - per_expert.attention_flops_per_device)
              / (9.89e14 * (2'948'595'712.0 + 22'548'578'304.0)
                 / (2'948'595'712.0 + 31 * 32 * 65'536.0 + 22'548'578'304.0))
          + per_expert.attention_flops_per_device / 9.89e14));
  run.options.grouped_gemm = true;
  const StepEstimate e = estimate(run, &h100);
  const double dense = 2'948'595'712.0;
  const double routed = 22'548'578'304.0;
  const double router = 32 * 65'536.0;
  const double factor =
      (dense + routed) / (dense - router + 32 * router + routed / 0.705);
  CHECK(e.matmul_seconds
        == Approx((e.flops_per_device - e.attention_flops_per_device)
                      / (9.89e14 * factor)
                  + e.attention_flops_per_device / 9.89e14));
}

TEST_CASE("step: a TPU flash kernel computes the blocks the mask crosses",
          "[workload][step]") {
  // Llama-3-8B at seq 8192 under full remat: the causal attention a token
  // and layer, 4 x 32 x 128 x 8192 / 2 = 67,108,864, four times (the
  // forward, its recompute, the backward's two): x 32 layers x 32,768
  // tokens a device. Blocks of 2048: 4 x 4 of which 10 computed where the
  // causal half counts 8: 1.25 x.
  Run run{"llama-3-8b", "v5p-128", "fsdp:64", 8192, 256};
  const double causal = 4 * 67'108'864.0 * 32 * 32768;
  REQUIRE(estimate(run).attention_flops_per_device == Approx(causal));
  run.options.flash_blocks =
      FlashBlocks{2048, 2048, 2048, 2048, 512, 512, true, {}};
  const StepEstimate blocks = estimate(run);
  CHECK(blocks.attention_flops_per_device == Approx(1.25 * causal));
  // Unfused, the backward's half on the dQ kernel's 512 blocks: 16 x 16,
  // 136 computed of 128: 1.0625; the backward at (1.25 + 1.0625) / 2.
  run.options.flash_blocks->fused_backward = false;
  CHECK(estimate(run).attention_flops_per_device
        == Approx(causal / 2 * 1.25 + causal / 2 * (1.25 + 1.0625) / 2));
}

TEST_CASE("step: the 1F1B bubble is (S - 1) / (M V) of the busy time",
          "[workload][step]") {
  // Llama-3-70B, 80 layers over pp:4: S = 4, M = 8.
  Run run{"llama-3-70b", "v5p-256", "pp:4,fsdp:8,tp:4", 4096, 128, 8};
  const StepEstimate one = estimate(run);
  const double busy1 = one.compute_seconds + one.exposed_comm_seconds;
  CHECK(one.bubble_seconds == Approx(busy1 * 3 / 8));
  CHECK(one.step_seconds == Approx(busy1 * 11 / 8));
  run.interleave = 2;
  const StepEstimate two = estimate(run);
  const double busy2 = two.compute_seconds + two.exposed_comm_seconds;
  CHECK(two.bubble_seconds == Approx(busy2 * 3 / 16));
  // Without stages there is none.
  const StepEstimate flat =
      estimate(Run("llama-3-70b", "v5p-256", "fsdp:32,tp:4", 4096, 128));
  CHECK(flat.bubble_seconds == 0);
  // The last stage also runs the head: per device (3 (L F / 4 + H) + R / 4)
  // x T / 32 against the flat mesh's (3 (L F + H) + R) x T / 128, which is
  // 9 H T / 128 more; H = 2 x 8192 x 128256 = 2,101,346,304 FLOPs a token,
  // T = 128 x 4096 tokens.
  CHECK(one.flops_per_device - flat.flops_per_device
        == Approx(9.0 * 2'101'346'304 * 128 * 4096 / 128).epsilon(1e-9));
}

TEST_CASE("step: overlap hides what the rules say, and only that",
          "[workload][step]") {
  Run run{"llama-3-8b", "v5p-128", "fsdp:16,tp:4", 8192, 64};
  const StepEstimate on = estimate(run);
  run.options.overlap_fsdp = false;
  run.options.overlap_grad_reduce = false;
  const StepEstimate off = estimate(run);
  for (size_t i = 0; i < on.collectives.size(); ++i) {
    const StepCollective& a = on.collectives[i];
    const StepCollective& b = off.collectives[i];
    INFO(collective_label(a));
    CHECK(a.seconds == Approx(b.seconds));
    CHECK(b.exposed_seconds == Approx(b.seconds));
    if (a.role == Parallelism::fsdp && a.op == Collective::all_gather
        && a.phase == StepPhase::forward) {
      // Prefetched behind the previous layer: only the first is exposed,
      // one of the 32 layers' calls.
      CHECK(a.exposed_seconds == Approx(a.seconds / 32));
    }
    if (a.role == Parallelism::tensor) {
      CHECK(a.exposed_seconds == Approx(a.seconds));  // exposed either way
    }
  }
  CHECK(off.step_seconds > on.step_seconds);
  CHECK(off.compute_seconds == Approx(on.compute_seconds));
}

TEST_CASE("step: a tensor axis no spec splits is named", "[workload][step]") {
  // fsdp:16,tp:4 counts tp as tensor parallelism; specs that split nothing
  // over tp (the fsdp preset) leave its devices repeating the same work.
  Run run{"llama-3-8b", "v5p-128", "fsdp:16,tp:4", 8192, 64};
  CHECK(estimate(run).unsplit_tensor_axes.empty());  // not known: no check
  run.split_axes = std::vector<std::string>{"fsdp", "tp"};
  CHECK(estimate(run).unsplit_tensor_axes.empty());
  run.split_axes = std::vector<std::string>{"fsdp"};
  CHECK(estimate(run).unsplit_tensor_axes == std::vector<std::string>{"tp"});
  // An axis of size 1 splits nothing and costs nothing.
  Run one{"llama-3-8b", "v5p-128", "fsdp:64,tp:1", 8192, 64};
  one.split_axes = std::vector<std::string>{"fsdp"};
  CHECK(estimate(one).unsplit_tensor_axes.empty());
}

TEST_CASE("step: a slower link never shortens the step", "[workload][step]") {
  Run run{"llama-3-8b", "v5p-128", "fsdp:16,tp:4", 8192, 64};
  Topology fast = test::topology_of("v5p-128");
  Topology slow = fast;
  slow.figures.ici_bytes_per_s_per_link.value /= 4;
  const StepEstimate a = estimate(run, &fast);
  const StepEstimate b = estimate(run, &slow);
  CHECK(b.step_seconds >= a.step_seconds);
  CHECK(b.comm_seconds > a.comm_seconds);
  CHECK(b.compute_seconds == Approx(a.compute_seconds));
}

TEST_CASE(
    "step: more data-parallel devices never lower the tokens per "
    "step's second when compute-bound",
    "[workload][step]") {
  // The same per-device batch (4 sequences) on 32 and 64 devices of pure
  // FSDP: twice the tokens in about the same time.
  Run small{"llama-3-8b", "v5p-64", "fsdp:32", 8192, 128};
  Run large{"llama-3-8b", "v5p-128", "fsdp:64", 8192, 256};
  const StepEstimate a = estimate(small);
  const StepEstimate b = estimate(large);
  CHECK(static_cast<double>(b.tokens) / b.step_seconds
        >= static_cast<double>(a.tokens) / a.step_seconds);
  CHECK(a.bottleneck.kind == BottleneckKind::compute);
}

TEST_CASE("step: the scaling book's LLaMA-3-70B training time",
          "[workload][step]") {
  // jax-ml/scaling-book applied-training.md: 6 x 70.4e9 x 15e12 = 6.3e24
  // FLOPs for 15T tokens; a v5p pod, 8960 chips at 4.59e14 and 40% MFU:
  // 6.336e24 / (8960 x 4.59e14 x 0.4) = 3.85e6 s = 44.6 days, the book's
  // "44 days". MaxText's convention, which model_flops follows, leaves
  // out the embedding lookup (128256 x 8192 = 1,050,673,152) and the norms
  // (80 x 2 x 8192 + 8192 = 1,318,912): N = 70,553,706,496 - those =
  // 69,501,714,432 matmul weights; and adds causal attention, at seq 4096
  // 12 x 80 x 64 x 128 x 2048 = 16,106,127,360 a token.
  const StepEstimate e =
      estimate(Run("llama-3-70b", "v5p-256", "fsdp:32,tp:4", 4096, 128));
  const double per_token = e.model_flops / static_cast<double>(e.tokens);
  CHECK(per_token
        == Approx(6.0 * 69'501'714'432 + 16'106'127'360).epsilon(1e-12));
  const double book_days = 6 * 70.4e9 * 15e12 / (8960 * 4.59e14 * 0.4) / 86400;
  CHECK(book_days == Approx(44.6).epsilon(0.002));
  // The same run in this convention: 3% more FLOPs (attention, less the
  // lookup), 45.7 days at 40% MFU.
  const double days = per_token * 15e12 / (8960 * 4.59e14 * 0.4) / 86400;
  CHECK(days == Approx(45.7).epsilon(0.002));
}
