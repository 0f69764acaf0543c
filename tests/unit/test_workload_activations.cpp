// Activations per device (include/shardplan/workload.hpp, docs/memory.md
// "Activations"). The expected values are Korthikanti et al.'s formulas
// (docs/sources.md#korthikanti) evaluated by hand, MaxText's policies' saved
// names (docs/sources.md#maxtext-remat) and sums worked out in the comments.

#include "support/test_support.hpp"

#include <shardplan/io.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/models.hpp>
#include <shardplan/workload.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace shardplan;

namespace {

Mesh mesh_of(std::string_view text) {
  Diagnostics diags;
  MeshOptions options;
  options.sources.mesh = "--mesh";
  std::optional<Mesh> mesh = parse_mesh(text, options, diags);
  REQUIRE(mesh);
  return *mesh;
}

AxisRoles roles_of(const Mesh& mesh) {
  Diagnostics diags;
  AxisRoleSources sources{Location::of("--data-axes"),
                          Location::of("--tensor-axes"),
                          Location::of("--sequence-axes"),
                          Location::of("--expert-axes"),
                          Location::of("--stage-axes")};
  std::optional<AxisRoles> roles =
      resolve_axis_roles(mesh, AxisRoles{}, sources, diags);
  REQUIRE(roles);
  return *roles;
}

// A GPT-style config as Korthikanti et al. describe it: LayerNorm, a 4h GeLU
// MLP, MHA (a heads of h / a), dropout 0.1 on the attention probabilities,
// after attention and MLP, and on the embeddings.
ModelConfig gpt(int64_t h, int64_t a, int64_t layers, int64_t vocab) {
  ModelConfig c;
  c.source = "gpt.json";
  c.architecture = Architecture::gpt2;
  c.vocab = vocab;
  c.hidden = h;
  c.heads = a;
  c.kv_heads = a;
  c.head_dim = h / a;
  c.layers = layers;
  c.positions = 2048;
  c.tied = true;
  c.mlp = MlpKind::plain;
  c.norm = NormKind::layer_norm;
  c.activation = "gelu_new";
  c.attention_dropout = 0.1;
  c.residual_dropout = 0.1;
  c.embedding_dropout = 0.1;
  return c;
}

Workload workload(int64_t seq,
                  int64_t batch,
                  std::string remat,
                  std::string attention = "flash") {
  Workload w;
  w.seq = {seq, Location::of("--seq")};
  w.batch = {batch, Location::of("--batch")};
  w.per_device_batch.at = Location::of("--per-device-batch");
  w.microbatches.at = Location::of("--microbatches");
  w.remat = {std::move(remat), Location::of("--remat")};
  w.attention = {std::move(attention), Location::of("--attention")};
  w.stage_interleave.at = Location::of("--stage-interleave");
  w.activation_dtype.at = Location::of("--activation-dtype");
  w.mesh_at = Location::of("--mesh");
  return w;
}

ActivationEstimate estimate(const ModelConfig& model,
                            std::string_view mesh_text,
                            const Workload& w) {
  const Mesh mesh = mesh_of(mesh_text);
  Diagnostics diags;
  std::optional<ActivationEstimate> e =
      estimate_activations(model, mesh, roles_of(mesh), w, diags);
  INFO((diags.items().empty() ? std::string() : render(diags.items().front())));
  REQUIRE(e);
  REQUIRE(diags.items().empty());
  return *e;
}

// The one diagnostic of a workload that fails, rendered.
std::string error_of(const ModelConfig& model,
                     std::string_view mesh_text,
                     const Workload& w) {
  const Mesh mesh = mesh_of(mesh_text);
  Diagnostics diags;
  CHECK_FALSE(estimate_activations(model, mesh, roles_of(mesh), w, diags));
  REQUIRE(diags.items().size() == 1);
  return render(diags.items().front());
}

std::vector<std::string> names_of(const LayerActivations& layer) {
  std::vector<std::string> out;
  for (const SavedTensor& t : layer.saved) {
    out.push_back(t.name);
  }
  return out;
}

const SavedTensor& saved(const LayerActivations& layer, std::string_view name) {
  for (const SavedTensor& t : layer.saved) {
    if (t.name == name) {
      return t;
    }
  }
  FAIL("no saved tensor " << name);
  return layer.saved.front();
}

int64_t term(const ActivationEstimate& e, std::string_view name) {
  for (const ActivationTerm& t : e.terms) {
    if (t.name == name) {
      return t.bytes;
    }
  }
  FAIL("no term " << name);
  return -1;
}

bool has_term(const ActivationEstimate& e, std::string_view name) {
  for (const ActivationTerm& t : e.terms) {
    if (t.name == name) {
      return true;
    }
  }
  return false;
}

// GPT-3 175B (Korthikanti et al. Table 3): h 12288, a 96, 96 layers, s 2048,
// b 1; vocab 51200 (50257 padded, as Megatron does).
constexpr int64_t k_h = 12288;
constexpr int64_t k_a = 96;
constexpr int64_t k_s = 2048;
constexpr int64_t k_b = 1;
constexpr int64_t k_sbh = k_s * k_b * k_h;  // 25,165,824

}  // namespace

// ---------------------------------------------------------------------------
// Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
// Models", per-layer bytes (section 4, Table 2): every row.

TEST_CASE("workload: Korthikanti's per-layer rows for GPT-3 175B",
          "[workload][activations]") {
  const ModelConfig m = gpt(k_h, k_a, 96, 51200);
  // 5 a s / h = 5 * 96 * 2048 / 12288 = 80.
  static_assert(5 * k_a * k_s / k_h == 80);

  // No parallelism: s b h (34 + 5 a s / h) = 25,165,824 * 114
  // = 2,868,903,936.
  const ActivationEstimate none =
      estimate(m, "dp:1", workload(k_s, k_b, "none", "plain"));
  CHECK(none.per_layer_bytes == k_sbh * (34 + 5 * k_a * k_s / k_h));
  CHECK(none.per_layer_bytes == 2'868'903'936);

  // Tensor parallel, t = 8: s b h (10 + 24 / t + 5 a s / (h t))
  // = 25,165,824 * (10 + 3 + 10) = 578,813,952.
  const ActivationEstimate tp =
      estimate(m, "tp:8", workload(k_s, k_b, "none", "plain"));
  CHECK(tp.per_layer_bytes
        == k_sbh * (10 + 24 / 8 + 5 * k_a * k_s / (k_h * 8)));
  CHECK(tp.per_layer_bytes == 578'813'952);

  // Tensor + sequence parallel: s b h (34 / t + 5 a s / (h t))
  // = 25,165,824 * (4.25 + 10) = 358,612,992.
  Workload sp_none = workload(k_s, k_b, "none", "plain");
  sp_none.residual.value = ResidualLayout::sequence;
  const ActivationEstimate tp_sp = estimate(m, "tp:8", sp_none);
  CHECK(tp_sp.per_layer_bytes * 8
        == k_sbh * (34 + 5 * k_a * k_s / k_h));  // exact: 34 sbh / 8 is whole
  CHECK(tp_sp.per_layer_bytes == 358'612'992);

  // Tensor parallel + selective recompute: s b h (10 + 24 / t)
  // = 25,165,824 * 13 = 327,155,712.
  const ActivationEstimate tp_sel =
      estimate(m, "tp:8", workload(k_s, k_b, "selective", "plain"));
  CHECK(tp_sel.per_layer_bytes == k_sbh * (10 + 24 / 8));
  CHECK(tp_sel.per_layer_bytes == 327'155'712);

  // Tensor + sequence parallel + selective: 34 s b h / t
  // = 25,165,824 * 34 / 8 = 106,954,752.
  Workload sp_sel = workload(k_s, k_b, "selective", "plain");
  sp_sel.residual.value = ResidualLayout::sequence;
  const ActivationEstimate tp_sp_sel = estimate(m, "tp:8", sp_sel);
  CHECK(tp_sp_sel.per_layer_bytes * 8 == k_sbh * 34);
  CHECK(tp_sp_sel.per_layer_bytes == 106'954'752);

  // Full recompute: the layer input, 2 s b h = 50,331,648 (2 s b h / t =
  // 6,291,456 with sequence parallelism, as Megatron keeps it split).
  const ActivationEstimate full =
      estimate(m, "tp:8", workload(k_s, k_b, "full", "plain"));
  CHECK(full.per_layer_bytes == 2 * k_sbh);
  CHECK(names_of(*full.dense)
        == std::vector<std::string>{"decoder_layer_input"});
  Workload sp_full = workload(k_s, k_b, "full", "plain");
  sp_full.residual.value = ResidualLayout::sequence;
  CHECK(estimate(m, "tp:8", sp_full).per_layer_bytes == 2 * k_sbh / 8);
}

TEST_CASE("workload: Korthikanti's 34 s b h, tensor by tensor",
          "[workload][activations]") {
  // The 34 of section 4.1, for h 1024, a 16, s 512 and b 4 (8 sequences on
  // dp:2): s b h = 512 * 4 * 1024 = 2,097,152; a s^2 b = 16 * 512^2 * 4 =
  // 16,777,216.
  const ModelConfig m = gpt(1024, 16, 4, 1000);
  const ActivationEstimate e =
      estimate(m, "dp:2", workload(512, 8, "none", "plain"));
  CHECK(e.microbatch_size == 4);
  const int64_t sbh = 2'097'152;
  const int64_t as2b = 16'777'216;
  const LayerActivations& l = *e.dense;
  CHECK(names_of(l)
        == std::vector<std::string>{"decoder_layer_input",
                                    "attention_norm_output",
                                    "query_proj",
                                    "key_proj",
                                    "value_proj",
                                    "attention_softmax",
                                    "attention_dropout_mask",
                                    "attention_dropout_output",
                                    "context",
                                    "attention_residual_dropout_mask",
                                    "mlp_norm_input",
                                    "mlp_norm_output",
                                    "mlpwi",
                                    "mlp_activation",
                                    "mlp_residual_dropout_mask"});
  // Attention: QKV input 2sbh, Q and K 4sbh, V 2sbh, softmax 2as^2b, its
  // dropout mask as^2b and output 2as^2b, the output projection's input
  // 2sbh, the dropout mask sbh: 11 sbh + 5 as^2b.
  CHECK(saved(l, "attention_norm_output").bytes_per_layer == 2 * sbh);
  CHECK(saved(l, "query_proj").bytes_per_layer == 2 * sbh);
  CHECK(saved(l, "key_proj").bytes_per_layer == 2 * sbh);
  CHECK(saved(l, "value_proj").bytes_per_layer == 2 * sbh);
  CHECK(saved(l, "attention_softmax").bytes_per_layer == 2 * as2b);
  CHECK(saved(l, "attention_dropout_mask").bytes_per_layer == as2b);
  CHECK(saved(l, "attention_dropout_output").bytes_per_layer == 2 * as2b);
  CHECK(saved(l, "context").bytes_per_layer == 2 * sbh);
  CHECK(saved(l, "attention_residual_dropout_mask").bytes_per_layer == sbh);
  // MLP: input 2sbh, GeLU input 8sbh, GeLU output 8sbh, dropout mask sbh:
  // 19 sbh. The two LayerNorms' inputs: 4 sbh.
  CHECK(saved(l, "mlp_norm_output").bytes_per_layer == 2 * sbh);
  CHECK(saved(l, "mlpwi").bytes_per_layer == 8 * sbh);
  CHECK(saved(l, "mlp_activation").bytes_per_layer == 8 * sbh);
  CHECK(saved(l, "mlp_residual_dropout_mask").bytes_per_layer == sbh);
  CHECK(saved(l, "decoder_layer_input").bytes_per_layer == 2 * sbh);
  CHECK(saved(l, "mlp_norm_input").bytes_per_layer == 2 * sbh);
  CHECK(l.bytes == 34 * sbh + 5 * as2b);
  // Formulas and axes as the text table shows them.
  CHECK(saved(l, "query_proj").formula == "2*s*b*ceil(a/t)*d");
  CHECK(saved(l, "attention_softmax").formula == "2*ceil(a/t)*s*seq*b");
  CHECK(saved(l, "attention_dropout_mask").formula == "ceil(a/t)*s*seq*b");
  CHECK(saved(l, "query_proj").axes == std::vector<std::string>{"dp"});
}

TEST_CASE("workload: the embedding and the head, Korthikanti's 4.3",
          "[workload][activations]") {
  // GPT-3 175B on tp:8 with sequence parallelism, one stage. The head:
  // 4 s b h / t (1 + v / h) = the final norm's input and the head's input,
  // 2 s b h / t each = 6,291,456 each, plus the loss's fp32 logits,
  // 4 s b v / t = 4 * 2048 * 51200 / 8 = 52,428,800; and the head's own
  // bf16 output, 2 s b v / t = 26,214,400.
  const ModelConfig m = gpt(k_h, k_a, 96, 51200);
  Workload w = workload(k_s, k_b, "selective", "plain");
  w.residual.value = ResidualLayout::sequence;
  const ActivationEstimate e = estimate(m, "tp:8", w);
  CHECK(term(e, "final_norm_input") == 6'291'456);
  CHECK(term(e, "head_input") == 6'291'456);
  CHECK(term(e, "logits_fp32") == 52'428'800);
  CHECK(term(e, "final_norm_input") + term(e, "head_input")
            + term(e, "logits_fp32")
        == 4 * k_sbh / 8 + 4 * k_s * k_b * 51200 / 8);
  CHECK(term(e, "logits") == 26'214'400);
  CHECK(e.logits_bytes == 6'291'456 * 2 + 52'428'800 + 26'214'400);
  // The embedding: int32 token ids, 4 s b = 8,192, and the dropout mask,
  // s b h / t = 3,145,728.
  CHECK(term(e, "token_ids") == 8'192);
  CHECK(term(e, "embedding_dropout_mask") == 3'145'728);
  CHECK(e.embedding_bytes == 8'192 + 3'145'728);
  // One stage holds all: 96 layers of 34 s b h / t = 106,954,752 each.
  CHECK(e.layers_bytes == int64_t{96} * 106'954'752);
  // The backward of a layer recomputes its attention core: the selective
  // row's difference, 5 a s^2 b / t = 10 s b h = 251,658,240.
  CHECK(e.recompute_bytes == 10 * k_sbh);
  // The loss (91,226,112) and a layer's backward (251,658,240) come one
  // after the other: the larger is the peak's.
  CHECK(e.logits_bytes == 91'226'112);
  CHECK(e.total_bytes == e.layers_bytes + e.embedding_bytes + 251'658'240);
  CHECK(e.per_stage.size() == 1);
}

TEST_CASE("workload: the loss's kernel sets what the head holds",
          "[workload][activations]") {
  // Llama-3-8B on fsdp:4,tp:2, seq 8192, batch 8: 2 sequences a device,
  // T = 16,384 tokens; the vocab, 128,256, split over t = 2: 64,128. The
  // final norm's input and output, 2 T h each: 268,435,456 together.
  const ModelConfig m = test::model_config("llama-3-8b");
  Workload w = workload(8192, 8, "full");
  const int64_t norms = 268'435'456;
  const int64_t narrow = int64_t{2} * 16'384 * 64'128;  // 2,101,346,304
  const int64_t wide = int64_t{4} * 16'384 * 64'128;    // 4,202,692,608
  // Megatron's vocab-parallel kernel (the default): the logits and one
  // fp32 copy.
  const ActivationEstimate megatron = estimate(m, "fsdp:4,tp:2", w);
  CHECK(megatron.cross_entropy == CrossEntropy::vocab_parallel);
  CHECK(megatron.cross_entropy_source == "default");
  CHECK(megatron.logits_bytes == norms + narrow + wide);
  // XLA fuses the fp32 cast and softmax: the bf16 logits alone.
  w.cross_entropy = {CrossEntropy::fused, Location::of("--cross-entropy")};
  const ActivationEstimate xla = estimate(m, "fsdp:4,tp:2", w);
  CHECK(xla.logits_bytes == norms + 2'101'346'304);
  CHECK(xla.cross_entropy_source == "--cross-entropy");
  CHECK(term(xla, "logits") == narrow);
  CHECK(!has_term(xla, "logits_fp32"));
  // PyTorch's F.cross_entropy on fp32 logits: log_softmax's output, its
  // gradient and the logits' gradient, fp32, at once in the backward.
  w.cross_entropy.value = CrossEntropy::eager;
  const ActivationEstimate torch = estimate(m, "fsdp:4,tp:2", w);
  CHECK(torch.logits_bytes == norms + 3 * 4'202'692'608);
  CHECK(term(torch, "log_softmax") == wide);
  CHECK(term(torch, "log_softmax_grad") == wide);
  CHECK(term(torch, "logits_grad") == wide);
  CHECK(!has_term(torch, "logits"));
}

TEST_CASE("workload: eager PyTorch's norms and SwiGLU save more",
          "[workload][activations]") {
  // Llama-3-8B on fsdp:8, seq 1024, batch 8: T = 1024 tokens a device, h
  // 4096, I 14336. Eager (torchtitan's RMSNorm op by op) each norm saves
  // its f32 upcast (4 h) and its output before the weight (2 h) in place
  // of its bf16 input (2 h), and SwiGLU's product is the down projection's
  // input (2 I): 2 x 4 h + 2 I = 61,440 bytes a token, as measured on an
  // H200 (bench/gpu/README.md, "What autograd keeps": 56 h there, with
  // torchtitan's repeated K and V). x 1024 tokens: 62,914,560 a layer.
  const ModelConfig m = test::model_config("llama-3-8b");
  Workload w = workload(1024, 8, "none");
  const ActivationEstimate fused = estimate(m, "fsdp:8", w);
  w.eager_kernels = true;
  const ActivationEstimate eager = estimate(m, "fsdp:8", w);
  REQUIRE(fused.dense);
  REQUIRE(eager.dense);
  CHECK(eager.dense->bytes - fused.dense->bytes == 62'914'560);
  CHECK(saved(*eager.dense, "attention_norm_upcast").bytes_per_layer
        == 4 * 1024 * 4096);
  CHECK(saved(*eager.dense, "mlp_norm_normalized").bytes_per_layer
        == 2 * 1024 * 4096);
  CHECK(saved(*eager.dense, "mlp_product").bytes_per_layer == 2 * 1024 * 14336);
  const std::vector<std::string> names = names_of(*eager.dense);
  CHECK(std::find(names.begin(), names.end(), "decoder_layer_input")
        == names.end());
  // Full remat keeps the layer's input alone, eager or not.
  w.remat.value = "full";
  const ActivationEstimate full = estimate(m, "fsdp:8", w);
  CHECK(names_of(*full.dense)
        == std::vector<std::string>{"decoder_layer_input"});
}

TEST_CASE(
    "workload: torchtitan's op-level checkpointing keeps every other matmul",
    "[workload][activations]") {
  // torchtitan's Llama 3.1 8B benchmark: FSDP 8, local batch 2, seq 8192
  // (s b = 16,384 tokens). Its op SAC saves the layer input, wq's (1st mm)
  // and wv's (3rd) outputs, the flash kernel's output and logsumexp, w1's
  // (5th, gate) and w2's (7th, down): 2 s b (4 h + k d + I) + 4 b a s =
  // 32,768 x (16,384 + 1,024 + 14,336) + 2,097,152 = 1,042,284,544.
  const ModelConfig m = test::model_config("llama-3-8b");
  const ActivationEstimate e =
      estimate(m, "fsdp:8", workload(8192, 16, "selective_op"));
  CHECK(e.dense->bytes == 1'042'284'544);
  CHECK(names_of(*e.dense)
        == std::vector<std::string>{"decoder_layer_input",
                                    "query_proj",
                                    "value_proj",
                                    "attention_logsumexp",
                                    "context",
                                    "mlpwi_0",
                                    "mlpwo"});
  // One layer's backward recomputes what its backward needs and the policy
  // dropped: the key (33,554,432), the attention norm's output and the MLP
  // norm's input and output (3 x 134,217,728), up and the gated product
  // (2 x 469,762,048); wo's output, which the backward does not need, is
  // not among them.
  CHECK(e.recompute_bytes
        == 33'554'432 + 3 * int64_t{134'217'728} + 2 * int64_t{469'762'048});
  CHECK(parse_remat_policy("torchtitan_op") == RematPolicy::selective_op);
}

TEST_CASE("workload: MaxText's sparse_matmul names the experts' up moe_mlpwi_1",
          "[workload][activations]") {
  // Mixtral-8x7B on fsdp:128, seq 4096, 4 sequences a device (s b =
  // 16,384), remat minimal. MaxText's MoE path names the experts' gate
  // mlpwi_0 (and moe_mlpwi_0), their down mlpwo, but their up moe_mlpwi_1
  // alone (layers/moe.py gmm_up), which minimal does not save. A layer
  // keeps the input, q, out_proj (2 s b h = 134,217,728 each), k and v
  // (33,554,432 each), the gate (2 s b K Im = 2 x 16,384 x 2 x 14,336 =
  // 939,524,096) and the experts' outputs (2 s b K h = 268,435,456):
  // 1,677,721,600 bytes, 1600 MiB, not 2496 with the up projection.
  const ModelConfig m = test::model_config("mixtral-8x7b-v0.1");
  const ActivationEstimate e =
      estimate(m, "fsdp:128", workload(4096, 512, "minimal"));
  REQUIRE(e.moe);
  CHECK(e.moe->bytes == 1'677'721'600);
  const std::vector<std::string> names = names_of(*e.moe);
  CHECK(std::find(names.begin(), names.end(), "moe_mlpwi_1") == names.end());
  CHECK(std::find(names.begin(), names.end(), "moe_mlpwi_0") != names.end());
  // Remat none keeps it: the backward needs it.
  const ActivationEstimate none =
      estimate(m, "fsdp:128", workload(4096, 512, "none"));
  const std::vector<std::string> all = names_of(*none.moe);
  CHECK(std::find(all.begin(), all.end(), "moe_mlpwi_1") != all.end());
}

TEST_CASE("workload: pipeline in flight, 1F1B and interleaved",
          "[workload][activations]") {
  // GPT-3 175B, t 8 with SP and selective recompute (106,954,752 bytes a
  // layer), p 8 stages: 12 layers a stage.
  const ModelConfig m = gpt(k_h, k_a, 96, 51200);
  const int64_t layer = 106'954'752;
  auto run = [&](int64_t microbatches, int64_t interleave) {
    Workload w = workload(k_s, microbatches, "selective", "plain");
    w.residual.value = ResidualLayout::sequence;
    w.microbatches.value = microbatches;
    w.stage_interleave.value = interleave;
    return estimate(m, "pp:8,tp:8", w);
  };
  // 1F1B, 16 microbatches: the first stage holds min(8, 16) = 8
  // microbatches of its 12 layers, L = 96 layers' worth (Korthikanti 4.2.3).
  const ActivationEstimate a = run(16, 1);
  CHECK(a.layers_per_stage == 12);
  CHECK(a.in_flight_factor == 8.0);
  CHECK(a.per_stage[0].layers_bytes == 96 * layer);
  // The last stage holds one microbatch: 12 layers.
  CHECK(a.per_stage[7].in_flight == 1.0);
  CHECK(a.per_stage[7].layers_bytes == 12 * layer);
  // Stage r holds 8 - r microbatches.
  CHECK(a.per_stage[3].layers_bytes == 5 * 12 * layer);
  // The embedding is on the first stage, x 8 in flight; the head on the
  // last.
  CHECK(a.per_stage[0].embedding_bytes == 8 * (8'192 + 3'145'728));
  CHECK(a.per_stage[0].logits_bytes == 0);
  CHECK(a.per_stage[7].logits_bytes == 6'291'456 * 2 + 52'428'800 + 26'214'400);
  CHECK(a.max_stage == 0);
  CHECK(a.layers_bytes == 96 * layer);

  // Fewer microbatches than stages: min(8, 4) = 4 in flight, 48 layers.
  const ActivationEstimate b = run(4, 1);
  CHECK(b.in_flight_factor == 4.0);
  CHECK(b.layers_bytes == 48 * layer);

  // Interleaved, V = 2: L (1 + (p - 1) / (p V)) = 96 * (1 + 7 / 16) = 138
  // layers' worth. As Megatron schedules it: 2 (p - 1) + (V - 1) p + 1 =
  // 23 chunks of 96 / 16 = 6 layers in flight = 138 layers; in_flight_factor
  // 23 / 2 = 11.5 stages' worth.
  const ActivationEstimate c = run(16, 2);
  CHECK(c.in_flight_factor == 11.5);
  CHECK(c.layers_bytes == 138 * layer);
  CHECK(c.layers_bytes == 96 * layer + 96 * 7 * layer / 16);
  // The last stage: (V - 1) p + 1 = 9 chunks = 54 layers.
  CHECK(c.per_stage[7].layers_bytes == 54 * layer);
  // With 4 microbatches, every chunk of them: min(23, 4 * 2) = 8 chunks,
  // 48 layers.
  CHECK(run(4, 2).layers_bytes == 48 * layer);
  // The layers of a stage are by chunk: with V = 2, stage 0 holds layers
  // 0-5 and 48-53 (12 in all).
  CHECK(c.per_stage[0].dense_layers == 12);
}

// ---------------------------------------------------------------------------
// Llama: no dropout, a gated MLP, GQA, flash attention; MaxText's policies.

TEST_CASE("workload: MaxText's remat policies keep their named tensors",
          "[workload][activations]") {
  // Llama-3-8B: h 4096, 32 heads, 8 KV heads of 128, MLP 14336. fsdp:4,tp:2,
  // batch 8, seq 8192: b = 8 / 4 = 2, tokens T = 16384 per device.
  // decoder_layer_input, out_proj, mlpwo: T h 2 = 134,217,728 each;
  // query_proj, context: T ceil(32/2) 128 2 = 67,108,864; key_proj,
  // value_proj: T ceil(8/2) 128 2 = 16,777,216; mlpwi_0, mlpwi_1:
  // T 14336/2 2 = 234,881,024.
  const ModelConfig m = test::model_config("llama-3-8b");
  auto run = [&](std::string policy) {
    return estimate(m, "fsdp:4,tp:2", workload(8192, 8, std::move(policy)));
  };
  const int64_t input = 134'217'728;
  const int64_t q = 67'108'864;
  const int64_t kv = 16'777'216;
  const int64_t wi = 234'881'024;
  struct Row {
    std::string_view policy;
    std::vector<std::string> saved;
    int64_t bytes;
    int64_t host;
  };
  const Row rows[] = {
      {"full", {"decoder_layer_input"}, input, 0},
      {"save_qkv_proj",
       {"decoder_layer_input", "query_proj", "key_proj", "value_proj"},
       input + q + 2 * kv,  // 234,881,024
       0},
      {"save_out_proj", {"decoder_layer_input", "out_proj"}, 2 * input, 0},
      {"save_dot_except_mlp",
       {"decoder_layer_input",
        "query_proj",
        "key_proj",
        "value_proj",
        "out_proj"},
       2 * input + q + 2 * kv,  // 369,098,752
       0},
      {"save_dot_except_mlpwi",
       {"decoder_layer_input",
        "query_proj",
        "key_proj",
        "value_proj",
        "out_proj",
        "mlpwo"},
       3 * input + q + 2 * kv,  // 503,316,480
       0},
      {"save_dot_with_context_except_mlp",
       {"decoder_layer_input",
        "query_proj",
        "key_proj",
        "value_proj",
        "context",
        "out_proj"},
       2 * input + 2 * q + 2 * kv,  // 436,207,616
       0},
      {"minimal",
       {"decoder_layer_input",
        "query_proj",
        "key_proj",
        "value_proj",
        "out_proj",
        "mlpwi_0",
        "mlpwi_1",
        "mlpwo"},
       3 * input + q + 2 * kv + 2 * wi,  // 973,078,528
       0},
      {"minimal_with_context",
       {"decoder_layer_input",
        "query_proj",
        "key_proj",
        "value_proj",
        "context",
        "out_proj",
        "mlpwi_0",
        "mlpwi_1",
        "mlpwo"},
       3 * input + 2 * q + 2 * kv + 2 * wi,  // 1,040,187,392
       0},
      {"minimal_flash",  // MaxText's deprecated alias of the one above
       {"decoder_layer_input",
        "query_proj",
        "key_proj",
        "value_proj",
        "context",
        "out_proj",
        "mlpwi_0",
        "mlpwi_1",
        "mlpwo"},
       3 * input + 2 * q + 2 * kv + 2 * wi,
       0},
      {"qkv_proj_offloaded",
       {"decoder_layer_input", "query_proj", "key_proj", "value_proj"},
       input,
       q + 2 * kv},  // 100,663,296 on the host
      {"minimal_offloaded",
       {"decoder_layer_input",
        "query_proj",
        "key_proj",
        "value_proj",
        "out_proj",
        "mlpwi_0",
        "mlpwi_1",
        "mlpwo"},
       input,
       2 * input + q + 2 * kv + 2 * wi},  // 838,860,800 on the host
  };
  for (const Row& row : rows) {
    INFO(row.policy);
    const ActivationEstimate e = run(std::string(row.policy));
    REQUIRE(e.dense);
    CHECK(names_of(*e.dense) == row.saved);
    CHECK(e.dense->bytes == row.bytes);
    CHECK(e.dense->host_bytes == row.host);
    // 32 layers, one stage, one microbatch.
    CHECK(e.layers_bytes == 32 * row.bytes);
    CHECK(e.host_offload_bytes == 32 * row.host);
  }
  CHECK(run("minimal_flash").remat == RematPolicy::minimal_with_context);
  CHECK(run("minimal").dense->bytes == 973'078'528);
  CHECK(saved(*run("qkv_proj_offloaded").dense, "query_proj").offloaded);
}

TEST_CASE("workload: Llama keeps no dropout masks and three gated MLP tensors",
          "[workload][activations]") {
  // The Llama-3-8B layer of the test above with nothing recomputed (flash):
  // the layer input, the norm outputs and the MLP norm's input (T h 2 =
  // 134,217,728 each, four of them), q and the context (67,108,864 each), k
  // and v (16,777,216 each), flash's logsumexp (T x 16 heads x 4 bytes =
  // 1,048,576) and gate, up and their product (234,881,024 each):
  // 536,870,912 + 134,217,728 + 33,554,432 + 1,048,576 + 704,643,072 =
  // 1,410,334,720.
  const ModelConfig m = test::model_config("llama-3-8b");
  const ActivationEstimate none =
      estimate(m, "fsdp:4,tp:2", workload(8192, 8, "none"));
  CHECK(names_of(*none.dense)
        == std::vector<std::string>{"decoder_layer_input",
                                    "attention_norm_output",
                                    "query_proj",
                                    "key_proj",
                                    "value_proj",
                                    "attention_logsumexp",
                                    "context",
                                    "mlp_norm_input",
                                    "mlp_norm_output",
                                    "mlpwi_0",
                                    "mlpwi_1",
                                    "mlp_activation"});
  CHECK(saved(*none.dense, "attention_logsumexp").bytes_per_layer == 1'048'576);
  CHECK(none.dense->bytes == 1'410'334'720);
  // Selective recompute drops the attention core: the logsumexp here.
  CHECK(estimate(m, "fsdp:4,tp:2", workload(8192, 8, "selective")).dense->bytes
        == 1'410'334'720 - 1'048'576);
  // Plain attention keeps the softmax instead: 2 x ceil(32/2) x 8192 x 8192
  // x 2 (b) = 4,294,967,296; no dropout mask, no dropout output.
  const ActivationEstimate plain =
      estimate(m, "fsdp:4,tp:2", workload(8192, 8, "none", "plain"));
  CHECK(saved(*plain.dense, "attention_softmax").bytes_per_layer
        == 4'294'967'296);
  CHECK(plain.dense->bytes == 1'410'334'720 - 1'048'576 + 4'294'967'296);
  // With remat full, a layer's backward recomputes the rest of it first:
  // 1,410,334,720 - 134,217,728 = 1,276,116,992 bytes, live once (for one
  // layer at a time) on top of the 32 layer inputs.
  const ActivationEstimate full =
      estimate(m, "fsdp:4,tp:2", workload(8192, 8, "full"));
  CHECK(full.recompute_bytes == 1'276'116'992);
  // The loss holds more than that recompute: the final norm's input and
  // output, 2 x 2 s b h = 268,435,456, the logits, 2 s b v / t =
  // 2,101,346,304, and their fp32 copy, 4,202,692,608: 6,572,474,368, which
  // the peak takes instead of the recompute.
  CHECK(full.logits_bytes == 6'572'474'368);
  CHECK(full.total_bytes
        == 32 * int64_t{134'217'728} + full.embedding_bytes + 6'572'474'368);
  // Flash keeps no term that grows with seq^2.
  for (const SavedTensor& t : none.dense->saved) {
    CHECK(t.formula.find("seq") == std::string::npos);
  }
  // The default is MaxText's: remat full, flash attention, bf16.
  const Workload defaults;
  CHECK(defaults.remat.value == "full");
  CHECK(defaults.attention.value == "flash");
  CHECK(defaults.activation_dtype.value == "bf16");
}

TEST_CASE("workload: the scaling book's MLP checkpoints, 2 L B (D + 2F)",
          "[workload][activations]") {
  // The JAX scaling book (docs/sources.md#scaling-book-memory): keeping the
  // outputs of the three MLP matmuls (B x F, B x F, B x D in bf16) costs 2 L B
  // (D + 2F) bytes, B the tokens. minimal keeps them on top of
  // save_dot_except_mlp's set, so the difference is that. Llama-3-70B
  // (L 80, D 8192, F 28672) on fsdp:64, seq 4096, batch 64: B = 4096 tokens
  // a device: 2 x 80 x 4096 x (8192 + 57344) = 42,949,672,960 bytes.
  const ModelConfig m = test::model_config("llama-3-70b");
  const ActivationEstimate minimal =
      estimate(m, "fsdp:64", workload(4096, 64, "minimal"));
  const ActivationEstimate except =
      estimate(m, "fsdp:64", workload(4096, 64, "save_dot_except_mlp"));
  CHECK(minimal.layers_bytes - except.layers_bytes
        == 2 * 80 * int64_t{4096} * (8192 + 2 * 28672));
  CHECK(minimal.layers_bytes - except.layers_bytes == 42'949'672'960);
}

TEST_CASE("workload: a per-device batch, f32 activations, context parallel",
          "[workload][activations]") {
  const ModelConfig m = test::model_config("llama-3-8b");
  // MaxText's per_device_batch_size 0.5 on 16 devices: a global batch of
  // 8; on dp:8,cp:2 each device holds 1 sequence's half: T = 1 x 4096 / 2
  // = 2048 tokens; the layer input in f32: 2048 x 4096 x 4 = 33,554,432.
  Workload w = workload(4096, 0, "full");
  w.batch.value.reset();
  w.per_device_batch.value = "0.5";
  w.activation_dtype.value = "f32";
  const ActivationEstimate e = estimate(m, "dp:8,cp:2", w);
  CHECK(e.global_batch == 8);
  CHECK(e.microbatch_size == 1);
  CHECK(e.tokens == 2048);
  CHECK(e.per_layer_bytes == 33'554'432);
  CHECK(saved(*e.dense, "decoder_layer_input").axes
        == std::vector<std::string>{"dp", "cp"});
  // Plain attention on cp: queries split, keys whole: 2 bytes (bf16) x 32
  // heads x 2048 x 4096 x 1 = 536,870,912.
  Workload p = workload(4096, 8, "none", "plain");
  CHECK(saved(*estimate(m, "dp:8,cp:2", p).dense, "attention_softmax")
            .bytes_per_layer
        == 536'870'912);
}

// ---------------------------------------------------------------------------
// Mixture of experts, MLA, MTP; Gemma2 and Qwen2-MoE particulars.

TEST_CASE("workload: Mixtral's MoE layer, dispatched over an expert axis",
          "[workload][activations]") {
  // Mixtral-8x7B, top 2 of 8 experts of 14336, seq 4096, batch 4 on ep:4:
  // the batch splits over ep, b = 1, T = 4096 tokens, 2 x T = 8192 (token,
  // expert) pairs a device works on. Nothing recomputed (flash):
  //   router_probs           T x 8 x 4 (fp32)       =     131,072
  //   moe_dispatch           2 T x 4096 x 2         =  67,108,864
  //   moe_mlpwi_0, _1, act   2 T x 14336 x 2 each   = 234,881,024 each
  //   moe_mlpwo              2 T x 4096 x 2         =  67,108,864
  const ModelConfig m = test::model_config("mixtral-8x7b-v0.1");
  const ActivationEstimate e = estimate(m, "ep:4", workload(4096, 4, "none"));
  REQUIRE_FALSE(e.dense);
  REQUIRE(e.moe);
  CHECK(e.tokens == 4096);
  const LayerActivations& l = *e.moe;
  CHECK(saved(l, "router_probs").bytes_per_layer == 131'072);
  CHECK(saved(l, "moe_dispatch").bytes_per_layer == 67'108'864);
  CHECK(saved(l, "moe_mlpwi_0").bytes_per_layer == 234'881'024);
  CHECK(saved(l, "moe_mlpwi_1").bytes_per_layer == 234'881'024);
  CHECK(saved(l, "moe_mlp_activation").bytes_per_layer == 234'881'024);
  CHECK(saved(l, "moe_mlpwo").bytes_per_layer == 67'108'864);
  CHECK(e.per_layer_bytes == l.bytes);
  // Attention as Llama's (h 4096, 32 heads, 8 KV heads): T h 2 =
  // 33,554,432 four times, q and context 33,554,432 each, k and v T x 1024
  // x 2 = 8,388,608 each, logsumexp T x 32 x 4 = 524,288.
  CHECK(l.bytes
        == 4 * 33'554'432 + 2 * 33'554'432 + 2 * 8'388'608 + 524'288 + 131'072
               + 2 * 67'108'864 + 3 * 234'881'024);
  // minimal keeps the experts' gate (mlpwi_0) and down (mlpwo), MaxText's
  // names in moe.py; their up is named moe_mlpwi_1 alone, not saved.
  const ActivationEstimate minimal =
      estimate(m, "ep:4", workload(4096, 4, "minimal"));
  CHECK(names_of(*minimal.moe)
        == std::vector<std::string>{"decoder_layer_input",
                                    "query_proj",
                                    "key_proj",
                                    "value_proj",
                                    "out_proj",
                                    "moe_mlpwi_0",
                                    "moe_mlpwo"});
  // An expert axis larger than the 8 experts.
  CHECK(error_of(m, "ep:16", workload(4096, 16, "full"))
        == "--mesh: error: the expert axes' 16 shards exceed the model's 8 "
           "experts; expert axes: \"ep\" 16 [workload.expert-axis-too-large]");
}

TEST_CASE("workload: DeepSeek-V3's MLA, dense and MoE layers, and MTP",
          "[workload][activations]") {
  // DeepSeek-V3 on fsdp:8,tp:8 (64 devices), seq 4096, batch 8: b 1,
  // T = 4096. MLA with remat none (flash), per device:
  //   query_wa_proj, mla_q: T x 1536 x 2 = 12,582,912 each
  //   kv_wa_proj: T x (512 + 64) x 2 = 4,718,592; mla_kv: T x 512 x 2 =
  //   4,194,304
  //   query_proj, key_proj: T x 128/8 x 192 x 2 = 25,165,824 each
  //   value_proj, context: T x 16 x 128 x 2 = 16,777,216 each
  const ModelConfig m = test::model_config("deepseek-v3");
  const ActivationEstimate e =
      estimate(m, "fsdp:8,tp:8", workload(4096, 8, "none"));
  REQUIRE(e.dense);
  REQUIRE(e.moe);
  const LayerActivations& d = *e.dense;
  CHECK(saved(d, "query_wa_proj").bytes_per_layer == 12'582'912);
  CHECK(saved(d, "mla_q").bytes_per_layer == 12'582'912);
  CHECK(saved(d, "kv_wa_proj").bytes_per_layer == 4'718'592);
  CHECK(saved(d, "mla_kv").bytes_per_layer == 4'194'304);
  CHECK(saved(d, "query_proj").bytes_per_layer == 25'165'824);
  CHECK(saved(d, "key_proj").bytes_per_layer == 25'165'824);
  CHECK(saved(d, "value_proj").bytes_per_layer == 16'777'216);
  CHECK(saved(d, "context").bytes_per_layer == 16'777'216);
  // The dense MLP (18432 / 8 = 2304): T x 2304 x 2 = 18,874,368 x 3.
  CHECK(saved(d, "mlpwi_0").bytes_per_layer == 18'874'368);
  // The MoE MLP: top 8 of 256 experts of 2048 / 8 = 256: 8 T x 256 x 2 =
  // 16,777,216 each; a shared expert of 2048 / 8 = 256: T x 256 x 2 =
  // 2,097,152 each; the router's 256 fp32 probabilities T x 1024 =
  // 4,194,304; dispatch and expert outputs 8 T x 7168 x 2 = 469,762,048.
  const LayerActivations& moe = *e.moe;
  CHECK(saved(moe, "moe_mlpwi_0").bytes_per_layer == 16'777'216);
  CHECK(saved(moe, "shared_mlpwi_0").bytes_per_layer == 2'097'152);
  CHECK(saved(moe, "router_probs").bytes_per_layer == 4'194'304);
  CHECK(saved(moe, "moe_dispatch").bytes_per_layer == 469'762'048);
  // Its shared expert is not gated: its output is not kept.
  const std::vector<std::string> names = names_of(moe);
  CHECK(std::find(names.begin(), names.end(), "shared_mlpwo") == names.end());
  // Layers: 3 dense and 58 MoE; then one MTP module on the (only) stage:
  // an MoE layer, the inputs of its norms and projection (T x 4h x 2 =
  // 234,881,024) and a head of its own.
  CHECK(e.layers_bytes == 3 * d.bytes + 58 * moe.bytes);
  CHECK(e.mtp_bytes == moe.bytes + 234'881'024 + e.logits_bytes);
  CHECK(e.recompute_bytes == 0);  // remat none recomputes nothing
  CHECK(e.total_bytes
        == e.layers_bytes + e.embedding_bytes + e.logits_bytes + e.mtp_bytes);
  // 61 layers do not divide over 2 stages.
  CHECK(error_of(m, "pp:2,fsdp:4,tp:8", workload(4096, 8, "full"))
        == "--mesh: error: the model's 61 decoder layers are not divisible by "
           "2 stages; stage axes: \"pp\" 2 [workload.stages-indivisible]");
}

TEST_CASE("workload: Gemma2's sandwich norms and soft-caps, Qwen2-MoE's gate",
          "[workload][activations]") {
  // Gemma-2-2B (h 2304, 8 heads of 256, 4 KV heads, MLP 9216, vocab 256000)
  // on one device, seq 1024, batch 1, T = 1024. Its post-attention and
  // post-MLP norms keep out_proj and mlpwo (T h 2 = 4,718,592 each); plain
  // attention keeps the soft-cap's tanh output as well as the softmax:
  // 2 x 8 x 1024 x 1024 = 16,777,216 each; the head's soft-cap another
  // logits' worth: T x 256000 x 2 = 524,288,000.
  const ModelConfig g = test::model_config("gemma-2-2b");
  const ActivationEstimate e =
      estimate(g, "dp:1", workload(1024, 1, "none", "plain"));
  CHECK(saved(*e.dense, "out_proj").bytes_per_layer == 4'718'592);
  CHECK(saved(*e.dense, "mlpwo").bytes_per_layer == 4'718'592);
  CHECK(saved(*e.dense, "attention_softcap").bytes_per_layer == 16'777'216);
  CHECK(saved(*e.dense, "attention_softmax").bytes_per_layer == 16'777'216);
  CHECK(term(e, "logits_softcap") == 524'288'000);
  CHECK(term(e, "logits") == 524'288'000);
  CHECK(term(e, "logits_fp32") == 1'048'576'000);
  // Qwen2-57B-A14B: sigmoid(shared_expert_gate(x)) * shared_expert(x) keeps
  // the shared expert's output (T h 2) and the gate (T x 1 x 2).
  const ActivationEstimate q = estimate(
      test::model_config("qwen2-57b-a14b"), "dp:1", workload(1024, 1, "none"));
  CHECK(saved(*q.moe, "shared_mlpwo").bytes_per_layer == 1024 * 3584 * 2);
  CHECK(saved(*q.moe, "shared_expert_gate").bytes_per_layer == 1024 * 2);
}

// ---------------------------------------------------------------------------
// Properties.

namespace {

// Pairs (more remat, less remat): the first recomputes at least what the
// second does, so it keeps no more. Chains of MaxText's policies by their
// names' inclusion; selective keeps every tensor minimal_with_context
// names or the norm outputs and MLP inputs it recomputes them from
// (docs/memory.md, "Remat policies").
constexpr std::pair<std::string_view, std::string_view> k_more_remat[] = {
    {"selective", "none"},
    {"minimal_with_context", "selective"},
    {"minimal", "minimal_with_context"},
    {"save_dot_with_context_except_mlp", "minimal_with_context"},
    {"save_dot_except_mlpwi", "minimal"},
    {"save_dot_except_mlp", "save_dot_except_mlpwi"},
    {"save_dot_except_mlp", "save_dot_with_context_except_mlp"},
    {"save_qkv_proj", "save_dot_except_mlp"},
    {"save_out_proj", "save_dot_except_mlp"},
    {"full", "save_qkv_proj"},
    {"full", "save_out_proj"},
    {"qkv_proj_offloaded", "save_qkv_proj"},
    {"minimal_offloaded", "minimal"},
    {"full", "qkv_proj_offloaded"},
    {"full", "minimal_offloaded"},
};

}  // namespace

TEST_CASE("workload: more remat never increases activations",
          "[workload][activations][property]") {
  const std::string model = GENERATE(as<std::string>{},
                                     "gpt2",
                                     "llama-3-8b",
                                     "gemma-2-2b",
                                     "phi-3-mini-4k",
                                     "mixtral-8x7b-v0.1",
                                     "qwen2-57b-a14b",
                                     "deepseek-v3");
  const std::string attention = GENERATE(as<std::string>{}, "flash", "plain");
  const ResidualLayout sp = GENERATE(ResidualLayout::replicated,
                                     ResidualLayout::sequence,
                                     ResidualLayout::embed);
  const std::string mesh = GENERATE(as<std::string>{}, "dp:2,tp:4", "tp:8");
  const ModelConfig m = test::model_config(model);
  INFO(model << " " << attention << " layout " << to_string(sp) << " " << mesh);
  int checked = 0;
  for (const auto& [more, less] : k_more_remat) {
    INFO(more << " <= " << less);
    Workload a = workload(1024, 8, std::string(more), attention);
    Workload b = workload(1024, 8, std::string(less), attention);
    a.residual.value = b.residual.value = sp;
    const ActivationEstimate x = estimate(m, mesh, a);
    const ActivationEstimate y = estimate(m, mesh, b);
    CHECK(x.per_layer_bytes <= y.per_layer_bytes);
    if (x.moe) {
      CHECK(x.moe->bytes <= y.moe->bytes);
    }
    CHECK(x.total_bytes <= y.total_bytes);
    ++checked;
  }
  CHECK(checked == static_cast<int>(std::size(k_more_remat)));
}

TEST_CASE("workload: more sharding never increases per-device bytes",
          "[workload][activations][property]") {
  const std::string model = GENERATE(as<std::string>{},
                                     "gpt2",
                                     "llama-3-8b",
                                     "mixtral-8x7b-v0.1",
                                     "qwen2-57b-a14b");
  const std::string remat =
      GENERATE(as<std::string>{}, "none", "selective", "full", "minimal");
  const ResidualLayout sp = GENERATE(ResidualLayout::replicated,
                                     ResidualLayout::sequence,
                                     ResidualLayout::embed);
  const ModelConfig m = test::model_config(model);
  // One axis per role, each grown from 1 to 2 to 4 while the others stay.
  const std::vector<std::string> axes = {"dp", "tp", "sp", "ep", "pp"};
  int checked = 0;
  for (size_t grown = 0; grown < axes.size(); ++grown) {
    int64_t previous = -1;
    int64_t previous_layer = -1;
    for (int64_t size : {1, 2, 4}) {
      std::string mesh;
      for (size_t i = 0; i < axes.size(); ++i) {
        mesh += fmt::format(
            "{}{}:{}", i == 0 ? "" : ",", axes[i], i == grown ? size : 1);
      }
      INFO(model << " " << remat << " layout " << to_string(sp) << " " << mesh);
      Workload w = workload(4096, 16, remat);
      w.microbatches.value = 4;
      w.residual.value = sp;
      const ActivationEstimate e = estimate(m, mesh, w);
      // A stage axis splits the layers, not the tokens: its first stage
      // holds min(S, M) microbatches of L / S layers, never more than L
      // layers' worth, but min(S, M) microbatches of the embedding's token
      // ids (Megatron's 8 s b p grows with p too). So for it the layers'
      // bytes, for the others the total.
      const int64_t bytes =
          axes[grown] == "pp" ? e.layers_bytes : e.total_bytes;
      if (previous >= 0) {
        CHECK(bytes <= previous);
        CHECK(e.per_layer_bytes <= previous_layer);
        ++checked;
      }
      previous = bytes;
      previous_layer = e.per_layer_bytes;
    }
  }
  CHECK(checked == 10);
}

// ---------------------------------------------------------------------------
// Bad input: located, coded, and the exact text.

TEST_CASE("workload: bad input is a located error", "[workload][activations]") {
  const ModelConfig m = test::model_config("llama-3-8b");
  Workload w = workload(4096, 8, "minmal");
  CHECK(error_of(m, "dp:8", w)
        == "--remat: error: unknown remat policy \"minmal\"; expected one of "
           "none, full, selective, minimal, minimal_with_context, "
           "save_dot_except_mlp, save_dot_except_mlpwi, "
           "save_dot_with_context_except_mlp, save_qkv_proj, save_out_proj, "
           "qkv_proj_offloaded, minimal_offloaded, custom, selective_op; did you mean \"minimal\"? "
           "[workload.unknown-remat]");
  w = workload(4096, 8, "full", "flsh");
  CHECK(error_of(m, "dp:8", w)
        == "--attention: error: unknown attention \"flsh\"; expected flash or "
           "plain; did you mean \"flash\"? [workload.unknown-attention]");
  w = workload(4096, 8, "full");
  w.activation_dtype.value = "i8";
  CHECK(error_of(m, "dp:8", w)
        == "--activation-dtype: error: activation dtype \"i8\" is not "
           "floating point; expected bf16, f16, f32, f64 or an fp8 type "
           "[workload.unknown-dtype]");
  // The batch over microbatches x batch shards.
  w = workload(4096, 12, "full");
  w.microbatches.value = 2;
  CHECK(error_of(m, "dp:2,fsdp:4,tp:2", w)
        == "--batch: error: batch 12 is not divisible by 2 microbatches x 8 "
           "batch shards = 16; batch shards: the data and expert axes: \"dp\" "
           "2, \"fsdp\" 4 [workload.batch-indivisible]");
  w = workload(4096, 0, "full");
  w.batch.value.reset();
  w.per_device_batch.value = "0.3";
  CHECK(error_of(m, "dp:8", w)
        == "--per-device-batch: error: per-device batch 0.3 x 8 devices = 2.4 "
           "sequences, not a whole number [workload.batch-fractional]");
  // 1.25 x 16 = 20 sequences do not divide over dp:8.
  w.per_device_batch.value = "1.25";
  CHECK(error_of(m, "dp:8,tp:2", w)
        == "--per-device-batch: error: batch 20 (per-device batch 1.25 x 16 "
           "devices) is not divisible by 1 microbatches x 8 batch shards = 8; "
           "batch shards: the data and expert axes: \"dp\" 8 "
           "[workload.batch-indivisible]");
  w.per_device_batch.value = "-1";
  CHECK(error_of(m, "dp:8", w)
        == "--per-device-batch: error: expected a positive decimal number, "
           "got \"-1\" [workload.bad-value]");
  w.batch.value = 8;
  w.per_device_batch.value = "1";
  CHECK(error_of(m, "dp:8", w)
        == "--per-device-batch: error: --batch and --per-device-batch both "
           "set the batch; give one [workload.batch-conflict]");
  w.batch.value.reset();
  w.per_device_batch.value.clear();
  CHECK(error_of(m, "dp:8", w)
        == "--batch: error: a workload needs a batch: --batch or "
           "--per-device-batch [workload.missing-batch]");
  // The sequence over the sequence axes (and the tensor axes with SP).
  w = workload(1000, 8, "full");
  CHECK(error_of(m, "dp:8,sp:16", w)
        == "--seq: error: sequence length 1000 is not divisible by 16 "
           "sequence shards; sequence axes: \"sp\" 16 "
           "[workload.sequence-indivisible]");
  w = workload(1000, 8, "full");
  w.residual.value = ResidualLayout::sequence;
  CHECK(error_of(m, "dp:8,sp:2,tp:8", w)
        == "--seq: error: sequence length 1000 is not divisible by 2 sequence "
           "shards x 8 tensor shards (sequence parallelism) = 16; sequence "
           "and tensor axes: \"sp\" 2, \"tp\" 8 "
           "[workload.sequence-indivisible]");
  // Non-positive values.
  w = workload(0, 8, "full");
  CHECK(
      error_of(m, "dp:8", w)
      == "--seq: error: expected an integer >= 1, got 0 [workload.bad-value]");
  w = workload(4096, 8, "full");
  w.microbatches.value = -2;
  CHECK(error_of(m, "dp:8", w)
        == "--microbatches: error: expected an integer >= 1, got -2 "
           "[workload.bad-value]");
  // Stages: 32 layers over 3 stages; interleaving without a stage axis; 32
  // layers over 4 stages x 3 virtual stages.
  w = workload(4096, 8, "full");
  CHECK(error_of(m, "pp:3,dp:8", w)
        == "--mesh: error: the model's 32 decoder layers are not divisible by "
           "3 stages; stage axes: \"pp\" 3 [workload.stages-indivisible]");
  w.stage_interleave.value = 2;
  CHECK(error_of(m, "dp:8", w)
        == "--stage-interleave: error: stage interleave 2 needs a stage axis; "
           "the mesh has none [workload.interleave-without-stages]");
  w.stage_interleave.value = 3;
  CHECK(error_of(m, "pp:4,dp:2", w)
        == "--stage-interleave: error: the model's 32 decoder layers are not "
           "divisible by 4 stages x 3 virtual stages; stage axes: \"pp\" 4 "
           "[workload.stages-indivisible]");
  // Overflow: 2^40 tokens a sequence x 2^30 sequences.
  w = workload(int64_t{1} << 40, int64_t{1} << 30, "full");
  CHECK(error_of(m, "dp:1", w)
        == "--seq: error: the activations' bytes overflow int64 "
           "[workload.overflow]");
  // A head dim of 2^62 overflows the q width, 32 heads x 2^62.
  ModelConfig wide = m;
  wide.head_dim = int64_t{1} << 62;
  CHECK(error_of(wide, "dp:1", workload(16, 1, "full"))
        == "--seq: error: the activations' bytes overflow int64 "
           "[workload.overflow]");
}

TEST_CASE("workload: independent bad inputs are all reported",
          "[workload][activations]") {
  const ModelConfig m = test::model_config("llama-3-8b");
  Workload w = workload(0, 8, "fulll", "plane");
  const Mesh mesh = mesh_of("dp:8");
  Diagnostics diags;
  CHECK_FALSE(estimate_activations(m, mesh, roles_of(mesh), w, diags));
  REQUIRE(diags.items().size() == 3);
  CHECK(diags.items()[0].code == "workload.unknown-remat");
  CHECK(diags.items()[1].code == "workload.unknown-attention");
  CHECK(diags.items()[2].code == "workload.bad-value");
}
