// The activations a training step keeps on each device
// (include/shardplan/workload.hpp; docs/memory.md, "Activations", gives every
// term's formula and source).
//
// A decoder layer is a list of candidate tensors: everything its backward
// needs when nothing is recomputed (Korthikanti et al., arXiv 2205.05198,
// section 4.1, generalised to GQA, MLA, gated MLPs and MoE), each tagged with
// MaxText's checkpoint name where it has one. A remat policy picks the ones
// kept; their bytes follow from the tokens on a device and the axes that
// split each. Layers are priced once per kind (dense, MoE), then multiplied
// by the layers each pipeline stage holds and the microbatches in flight.

#include "workload/internal.hpp"

#include <shardplan/workload.hpp>

#include <climits>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardplan {

namespace {

using workload_detail::Tag;

// ---------------------------------------------------------------------------
// The candidate tensors of a layer.

// How a tensor's size scales with the tokens on a device.
enum class Scale {
  // tokens x width, outside tensor parallelism: split over the tensor axes
  // only with sequence parallelism
  outside,
  // tokens x width, width already split over the tensor axes
  inside,
  // microbatch x s x seq x heads on a device: the attention scores
  scores,
  // tokens x top-k x width (routed experts), outside / inside
  routed_outside,
  routed_inside,
};

struct Candidate {
  std::string name;
  Tag tag = Tag::other;
  bool needed = true;  // kept when nothing is recomputed (remat none)
  // A tensor the backward does not need that a needed one is recomputed
  // from (out_proj's output: the MLP norm's input is the residual plus
  // it): saved by a policy that names it even under JAX.
  bool feeds_recompute = false;
  bool core = false;  // the attention core: recomputed by selective
  Scale scale = Scale::outside;
  int64_t width = 0;       // elements per token (or per pair, or heads)
  int64_t elem_bytes = 0;  // bytes per element
  std::string width_text;  // the width in symbols: "h", "ceil(a/t)*d"
  std::string source;
};

constexpr std::string_view k_korthikanti =
    "Korthikanti et al. 2022, 4.1 (docs/sources.md#korthikanti)";
constexpr std::string_view k_korthikanti_other =
    "Korthikanti et al. 2022, 4.3 (docs/sources.md#korthikanti)";
constexpr std::string_view k_maxtext =
    "MaxText checkpoint name (docs/sources.md#maxtext-remat)";
constexpr std::string_view k_flash =
    "FlashAttention-2 (Dao 2023): fp32 logsumexp per head and token";
constexpr std::string_view k_gated =
    "gated MLP: act(gate) * up keeps gate, up and their product";
constexpr std::string_view k_moe = "MoE: tokens x top-k through the experts";
// The loss's kernels (docs/memory.md, "The head").
constexpr std::string_view k_xla_loss =
    "XLA fuses the fp32 cast, softmax and gradient; the gradient reuses the "
    "logits' buffer (docs/sources.md#loss-kernels)";
constexpr std::string_view k_megatron_loss =
    "Korthikanti et al. 2022, 4.3 (docs/sources.md#korthikanti): the loss's "
    "fp32 logits, softmax and gradient in place";
constexpr std::string_view k_softcap =
    "Gemma2 final_logit_softcapping: tanh output";
constexpr std::string_view k_eager_norm =
    "eager PyTorch: each op saves its inputs (measured, bench/gpu/README.md)";
constexpr std::string_view k_eager_saved =
    "F.cross_entropy on logits.float(): log_softmax's fp32 output, saved "
    "(docs/sources.md#loss-kernels)";
constexpr std::string_view k_eager_grad =
    "nll_loss's backward: log_softmax's output gradient, fp32";
constexpr std::string_view k_eager_input =
    "log_softmax's backward: the fp32 logits' gradient";

// What a layer's shapes give, per device where split.
struct Dims {
  int64_t h = 0;
  int64_t heads = 0;     // ceil(a / t)
  int64_t kv_heads = 0;  // ceil(k / t)
  int64_t q_head = 0;    // per-head width of q and k
  int64_t v_head = 0;    // per-head width of v and the context
  int64_t mlp = 0;       // ceil(I / t), dense
  int64_t routed = 0;    // ceil(Im / t)
  int64_t shared = 0;    // ceil(Is / t)
  int64_t experts = 0;   // E
  int64_t q_lora = 0;    // MLA
  int64_t kv_lora = 0;   // MLA
  int64_t rope = 0;      // MLA's qk_rope_head_dim
  bool mla = false;
  // Per-token widths on a device, overflow-checked: q and k, v, the
  // context, MLA's kv latent with its rope part.
  int64_t q_width = 0;
  int64_t k_width = 0;
  int64_t v_width = 0;
  int64_t context_width = 0;
  int64_t kv_a_width = 0;
};

class LayerBuilder {
 public:
  LayerBuilder(const ModelConfig& model,
               const Dims& dims,
               AttentionKind attention,
               int64_t act_bytes,
               bool eager)
      : m_model(model),
        m_dims(dims),
        m_attention(attention),
        m_act(act_bytes),
        m_eager(eager && model.norm == NormKind::rms_norm) {}

  std::vector<Candidate> dense(int64_t mlp_width) {
    m_out.clear();
    attention_block();
    mlp_norms();
    if (m_model.mlp == MlpKind::plain) {
      // GPT-2: c_fc's output is the GeLU's input (8sbh for 4h), the GeLU's
      // output c_proj's input (8sbh).
      add("mlpwi",
          Tag::mlpwi,
          Scale::inside,
          mlp_width,
          "ceil(I/t)",
          k_korthikanti);
      add("mlp_activation",
          Tag::other,
          Scale::inside,
          mlp_width,
          "ceil(I/t)",
          k_korthikanti);
    } else {
      add("mlpwi_0",
          Tag::mlpwi_0,
          Scale::inside,
          mlp_width,
          "ceil(I/t)",
          k_gated);
      add("mlpwi_1",
          Tag::mlpwi_1,
          Scale::inside,
          mlp_width,
          "ceil(I/t)",
          k_gated);
      add("mlp_activation",
          Tag::other,
          Scale::inside,
          mlp_width,
          "ceil(I/t)",
          k_gated);
      if (m_eager) {
        // Eager: act(gate) and up are saved by their product, which the
        // down projection saves apart.
        add("mlp_product",
            Tag::other,
            Scale::inside,
            mlp_width,
            "ceil(I/t)",
            k_eager_norm);
      }
    }
    mlpwo(m_model.post_norms);
    mlp_dropout();
    return std::move(m_out);
  }

  std::vector<Candidate> moe(const LayerStructure& s) {
    m_out.clear();
    attention_block();
    mlp_norms();
    // The router's probabilities, fp32 (Mixtral's softmax(..., dtype=float),
    // DeepSeek-V3's sigmoid of fp32 logits).
    add_bytes("router_probs",
              Tag::other,
              Scale::outside,
              m_dims.experts,
              4,
              "E",
              k_moe);
    // Each token's copy per chosen expert (the experts' input), the experts'
    // MLP, and each expert's output (kept to weight and combine them).
    add("moe_dispatch",
        Tag::other,
        Scale::routed_outside,
        m_dims.h,
        "K*h",
        k_moe);
    add("moe_mlpwi_0",
        Tag::moe_mlpwi_0,
        Scale::routed_inside,
        m_dims.routed,
        "K*ceil(Im/t)",
        k_moe);
    add("moe_mlpwi_1",
        Tag::moe_mlpwi_1,
        Scale::routed_inside,
        m_dims.routed,
        "K*ceil(Im/t)",
        k_moe);
    add("moe_mlp_activation",
        Tag::other,
        Scale::routed_inside,
        m_dims.routed,
        "K*ceil(Im/t)",
        k_moe);
    add("moe_mlpwo",
        Tag::moe_mlpwo,
        Scale::routed_outside,
        m_dims.h,
        "K*h",
        k_moe);
    if (s.shared_intermediate > 0) {
      add("shared_mlpwi_0",
          Tag::mlpwi_0,
          Scale::inside,
          m_dims.shared,
          "ceil(Is/t)",
          k_gated);
      add("shared_mlpwi_1",
          Tag::mlpwi_1,
          Scale::inside,
          m_dims.shared,
          "ceil(Is/t)",
          k_gated);
      add("shared_mlp_activation",
          Tag::other,
          Scale::inside,
          m_dims.shared,
          "ceil(Is/t)",
          k_gated);
      // Qwen2-MoE: sigmoid(shared_expert_gate(x)) * shared_expert(x) keeps
      // both factors.
      Candidate& out =
          add("shared_mlpwo", Tag::mlpwo, Scale::outside, m_dims.h, "h", k_moe);
      out.needed = s.shared_expert_gate;
      if (s.shared_expert_gate) {
        add("shared_expert_gate", Tag::other, Scale::outside, 1, "1", k_moe);
      }
    }
    mlp_dropout();
    return std::move(m_out);
  }

 private:
  Candidate& add(std::string name,
                 Tag tag,
                 Scale scale,
                 int64_t width,
                 std::string width_text,
                 std::string_view source) {
    return add_bytes(std::move(name),
                     tag,
                     scale,
                     width,
                     m_act,
                     std::move(width_text),
                     source);
  }

  Candidate& add_bytes(std::string name,
                       Tag tag,
                       Scale scale,
                       int64_t width,
                       int64_t elem_bytes,
                       std::string width_text,
                       std::string_view source) {
    Candidate c;
    c.name = std::move(name);
    c.tag = tag;
    c.scale = scale;
    c.width = width;
    c.elem_bytes = elem_bytes;
    c.width_text = std::move(width_text);
    c.source = std::string(source);
    m_out.push_back(std::move(c));
    return m_out.back();
  }

  void attention_block() {
    const Dims& d = m_dims;
    add("decoder_layer_input",
        Tag::decoder_layer_input,
        Scale::outside,
        d.h,
        "h",
        k_korthikanti)
        .needed = !m_eager;
    eager_norm("attention_norm");
    // The first norm's output: the q/k/v projections' input.
    add("attention_norm_output",
        Tag::other,
        Scale::outside,
        d.h,
        "h",
        k_korthikanti);
    if (d.mla) {
      // MLA's latents (attention_mla.py names them): q_a's output is its
      // norm's input, the norm's output q_b's input; the same for kv.
      if (d.q_lora > 0) {
        add("query_wa_proj",
            Tag::other,
            Scale::outside,
            d.q_lora,
            "rq",
            k_maxtext);
        add("mla_q", Tag::mla_q, Scale::outside, d.q_lora, "rq", k_maxtext);
      }
      add("kv_wa_proj",
          Tag::other,
          Scale::outside,
          d.kv_a_width,
          "(rkv+dr)",
          k_maxtext);
      add("mla_kv", Tag::mla_kv, Scale::outside, d.kv_lora, "rkv", k_maxtext);
    }
    const std::string qk = d.mla ? "dq" : "d";
    const std::string v = d.mla ? "dv" : "d";
    add("query_proj",
        Tag::query_proj,
        Scale::inside,
        d.q_width,
        "ceil(a/t)*" + qk,
        k_korthikanti);
    add("key_proj",
        Tag::key_proj,
        Scale::inside,
        d.k_width,
        "ceil(k/t)*" + qk,
        k_korthikanti);
    add("value_proj",
        Tag::value_proj,
        Scale::inside,
        d.v_width,
        "ceil(k/t)*" + v,
        k_korthikanti);
    if (m_attention == AttentionKind::plain) {
      if (m_model.attention_softcap > 0) {
        // Gemma2: tanh(scores / cap) * cap keeps the tanh's output.
        core(add("attention_softcap",
                 Tag::other,
                 Scale::scores,
                 d.heads,
                 "ceil(a/t)",
                 "Gemma2 attn_logit_softcapping: tanh output"));
      }
      core(add("attention_softmax",
               Tag::other,
               Scale::scores,
               d.heads,
               "ceil(a/t)",
               k_korthikanti));
      if (m_model.attention_dropout > 0) {
        core(add_bytes("attention_dropout_mask",
                       Tag::other,
                       Scale::scores,
                       d.heads,
                       1,
                       "ceil(a/t)",
                       k_korthikanti));
        core(add("attention_dropout_output",
                 Tag::other,
                 Scale::scores,
                 d.heads,
                 "ceil(a/t)",
                 k_korthikanti));
      }
    } else {
      core(add_bytes("attention_logsumexp",
                     Tag::other,
                     Scale::inside,
                     d.heads,
                     4,
                     "ceil(a/t)",
                     k_flash));
    }
    add("context",
        Tag::context,
        Scale::inside,
        d.context_width,
        "ceil(a/t)*" + v,
        k_korthikanti);
    // out_proj's output: the backward needs it only as Gemma2's
    // post-attention norm's input; policies may keep it anyway.
    Candidate& out_proj =
        add("out_proj", Tag::out_proj, Scale::outside, d.h, "h", k_maxtext);
    out_proj.needed = m_model.post_norms;
    out_proj.feeds_recompute = true;
    if (m_model.residual_dropout > 0) {
      add_bytes("attention_residual_dropout_mask",
                Tag::other,
                Scale::outside,
                d.h,
                1,
                "h",
                k_korthikanti);
    }
  }

  void mlp_norms() {
    add("mlp_norm_input",
        Tag::other,
        Scale::outside,
        m_dims.h,
        "h",
        k_korthikanti)
        .needed = !m_eager;
    eager_norm("mlp_norm");
    add("mlp_norm_output",
        Tag::other,
        Scale::outside,
        m_dims.h,
        "h",
        k_korthikanti);
  }

  // Eager PyTorch's RMSNorm (torchtitan's, op by op) saves its input
  // upcast to f32 (for the square and the product) and its normalised
  // output before the weight (for the weight's gradient); its bf16 input
  // then is not saved (measured: bench/gpu/README.md, "What autograd
  // keeps").
  void eager_norm(const std::string& norm) {
    if (!m_eager) {
      return;
    }
    add_bytes(norm + "_upcast",
              Tag::other,
              Scale::outside,
              m_dims.h,
              4,
              "h",
              k_eager_norm);
    add(norm + "_normalized",
        Tag::other,
        Scale::outside,
        m_dims.h,
        "h",
        k_eager_norm);
  }

  void mlpwo(bool needed) {
    add("mlpwo", Tag::mlpwo, Scale::outside, m_dims.h, "h", k_maxtext).needed =
        needed;
  }

  void mlp_dropout() {
    if (m_model.residual_dropout > 0) {
      add_bytes("mlp_residual_dropout_mask",
                Tag::other,
                Scale::outside,
                m_dims.h,
                1,
                "h",
                k_korthikanti);
    }
  }

  static void core(Candidate& c) { c.core = true; }

  const ModelConfig& m_model;
  const Dims& m_dims;
  AttentionKind m_attention;
  int64_t m_act;
  bool m_eager;  // PyTorch eager with an RMSNorm: eager_norm, mlp_product
  std::vector<Candidate> m_out;
};

// ---------------------------------------------------------------------------
// Arithmetic and text.

// Checked products and sums; the first overflow is remembered.
class Arith {
 public:
  int64_t mul(int64_t a, int64_t b) {
    std::optional<int64_t> r = checked_mul(a, b);
    m_overflow = m_overflow || !r;
    return r.value_or(0);
  }
  int64_t mul(std::initializer_list<int64_t> values) {
    int64_t r = 1;
    for (int64_t v : values) {
      r = mul(r, v);
    }
    return r;
  }
  int64_t add(int64_t a, int64_t b) {
    std::optional<int64_t> r = checked_add(a, b);
    m_overflow = m_overflow || !r;
    return r.value_or(0);
  }
  bool overflow() const { return m_overflow; }

 private:
  bool m_overflow = false;
};

// `"pp" 4, "x" 2` for the axes of a role; "none" when there are none.
std::string axes_text(const Mesh& mesh, const std::vector<std::string>& names) {
  std::vector<std::string> parts;
  for (const std::string& name : names) {
    const MeshAxis* axis = mesh.find(name);
    parts.push_back(
        fmt::format("{} {}", quote(name), axis != nullptr ? axis->size : 1));
  }
  return parts.empty() ? std::string("none")
                       : fmt::format("{}", fmt::join(parts, ", "));
}

// A decimal number as text without trailing zeros: 192 / 10 -> "19.2".
std::string decimal_text(int64_t numerator, int64_t scale) {
  std::string out = std::to_string(numerator / scale);
  int64_t rest = numerator % scale;
  if (rest == 0) {
    return out;
  }
  std::string digits;
  for (int64_t s = scale / 10; s > 0; s /= 10) {
    digits.push_back(static_cast<char>('0' + rest / s));
    rest %= s;
  }
  while (!digits.empty() && digits.back() == '0') {
    digits.pop_back();
  }
  return out + "." + digits;
}

// "12", "0.5", "12.0": digits with at most one point, as numerator / scale
// (scale a power of ten). nullopt for anything else or beyond 18 digits.
std::optional<std::pair<int64_t, int64_t>> parse_decimal(std::string_view s) {
  int64_t numerator = 0;
  int64_t scale = 1;
  bool point = false;
  int digits = 0;
  for (char c : s) {
    if (c == '.' && !point) {
      point = true;
      continue;
    }
    if (!is_digit(c) || ++digits > 18) {
      return std::nullopt;
    }
    numerator = numerator * 10 + (c - '0');
    if (point) {
      scale *= 10;
    }
  }
  if (digits == 0 || s.front() == '.' || s.back() == '.') {
    return std::nullopt;
  }
  return std::pair{numerator, scale};
}

bool is_activation_dtype(DType dtype) {
  return is_floating(dtype) && dtype != DType::f8_e8m0;
}

// ---------------------------------------------------------------------------
// The estimate.

class Estimator {
 public:
  Estimator(const ModelConfig& model,
            const Mesh& mesh,
            const AxisRoles& roles,
            const Workload& workload,
            Diagnostics& diags)
      : m_model(model),
        m_mesh(mesh),
        m_roles(roles),
        m_w(workload),
        m_diags(diags) {}

  std::optional<ActivationEstimate> run() {
    if (!read_inputs() || !read_structure() || !check_mesh() || !resolve_batch()
        || !check_sequence()) {
      return std::nullopt;
    }
    set_dims();
    if (!price_context()) {
      return std::nullopt;
    }
    resolve_experts();
    price_layers();
    price_stages();
    if (m_arith.overflow()) {
      m_diags.error("workload.overflow",
                    "the activations' bytes overflow int64",
                    m_w.seq.at);
      return std::nullopt;
    }
    return std::move(m_e);
  }

 private:
  Diagnostic& error(std::string code, std::string message, const Location& at) {
    return m_diags.error(std::move(code), std::move(message), at);
  }

  bool at_least_one(int64_t value, const Location& at) {
    if (value >= 1) {
      return true;
    }
    error("workload.bad-value",
          fmt::format("expected an integer >= 1, got {}", value),
          at);
    return false;
  }

  // The inputs that stand alone: each reported, all checked.
  bool read_inputs() {
    const size_t before = m_diags.error_count();
    const Sourced<std::string>& dtype_text = m_w.activation_dtype;
    std::optional<DType> dtype = parse_dtype(dtype_text.value);
    if (!dtype || !is_activation_dtype(*dtype)) {
      Diagnostic& d = error(
          "workload.unknown-dtype",
          dtype ? fmt::format("activation dtype {} is not floating point",
                              quote(dtype_text.value))
                : fmt::format("unknown dtype {}", quote(dtype_text.value)),
          dtype_text.at);
      d.hint = "expected bf16, f16, f32, f64 or an fp8 type";
    } else {
      m_e.activation_dtype = *dtype;
    }
    std::optional<RematPolicy> remat =
        read_remat(m_w.remat.value, m_w.remat.at, m_e.custom_remat, m_diags);
    if (remat) {
      m_e.remat = *remat;
    }
    std::optional<AttentionKind> attention =
        parse_attention(m_w.attention.value);
    if (!attention) {
      Diagnostic& d = error("workload.unknown-attention",
                            fmt::format("unknown attention {}; expected flash "
                                        "or plain",
                                        quote(m_w.attention.value)),
                            m_w.attention.at);
      std::string near = closest_match(m_w.attention.value, {"flash", "plain"});
      if (!near.empty()) {
        d.hint = fmt::format("did you mean {}?", quote(near));
      }
    } else {
      m_e.attention = *attention;
    }
    at_least_one(m_w.seq.value, m_w.seq.at);
    at_least_one(m_w.microbatches.value, m_w.microbatches.at);
    at_least_one(m_w.stage_interleave.value, m_w.stage_interleave.at);
    const Sourced<std::optional<int64_t>>& batch = m_w.batch;
    const Sourced<std::string>& per_device = m_w.per_device_batch;
    if (batch.value && !per_device.value.empty()) {
      error("workload.batch-conflict",
            fmt::format("{} and {} both set the batch; give one",
                        to_string(batch.at),
                        to_string(per_device.at)),
            per_device.at);
    } else if (!batch.value && per_device.value.empty()) {
      error("workload.missing-batch",
            fmt::format("a workload needs a batch: {} or {}",
                        to_string(batch.at),
                        to_string(per_device.at)),
            batch.at);
    } else if (batch.value) {
      at_least_one(*batch.value, batch.at);
    } else {
      m_per_device = parse_decimal(per_device.value);
      if (!m_per_device || m_per_device->first == 0) {
        error("workload.bad-value",
              fmt::format("expected a positive decimal number, got {}",
                          quote(per_device.value)),
              per_device.at);
      }
    }
    m_e.residual = m_w.residual.value;
    m_e.residual_source =
        m_w.residual.at.empty() ? "default" : to_string(m_w.residual.at);
    m_e.cross_entropy = m_w.cross_entropy.value;
    m_e.cross_entropy_source = m_w.cross_entropy.at.empty()
                                   ? "default"
                                   : to_string(m_w.cross_entropy.at);
    m_e.residuals_only = m_w.residuals_only;
    m_e.seq = m_w.seq.value;
    m_e.microbatches = m_w.microbatches.value;
    m_e.stage_interleave = m_w.stage_interleave.value;
    return m_diags.error_count() == before;
  }

  bool read_structure() {
    std::optional<LayerStructure> s = layer_structure(m_model, m_diags);
    if (!s) {
      return false;
    }
    m_s = std::move(*s);
    return true;
  }

  bool check_mesh() {
    m_e.batch_shards = m_arith.mul(m_roles.size(m_mesh, AxisRole::data),
                                   m_roles.size(m_mesh, AxisRole::expert));
    m_e.sequence_shards = m_roles.size(m_mesh, AxisRole::sequence);
    m_e.tensor_shards = m_roles.size(m_mesh, AxisRole::tensor);
    m_e.stages = m_roles.size(m_mesh, AxisRole::stage);
    const int64_t experts_axes = m_roles.size(m_mesh, AxisRole::expert);
    if (m_s.routed_experts > 0 && experts_axes > m_s.routed_experts) {
      Diagnostic& d =
          error("workload.expert-axis-too-large",
                fmt::format("the expert axes' {} shards exceed the model's "
                            "{} experts",
                            experts_axes,
                            m_s.routed_experts),
                m_w.mesh_at);
      d.hint =
          fmt::format("expert axes: {}", axes_text(m_mesh, m_roles.expert));
      return false;
    }
    const int64_t S = m_e.stages;
    const int64_t V = m_w.stage_interleave.value;
    if (V > 1 && S == 1) {
      error("workload.interleave-without-stages",
            fmt::format("stage interleave {} needs a stage axis; the mesh has "
                        "none",
                        V),
            m_w.stage_interleave.at);
      return false;
    }
    // V > layers never divides them (and keeps S x V within int64: S and
    // the layers are at most 2^22).
    const int64_t chunks =
        V > std::max<int64_t>(m_model.layers, 1) ? m_model.layers + 1 : S * V;
    if (V > std::max<int64_t>(m_model.layers, 1)
        || (chunks > 1 && m_model.layers % chunks != 0)) {
      Diagnostic& d = error(
          "workload.stages-indivisible",
          V > 1 ? fmt::format("the model's {} decoder layers are not divisible "
                              "by {} stages x {} virtual stages",
                              m_model.layers,
                              S,
                              V)
                : fmt::format("the model's {} decoder layers are not divisible "
                              "by {} stages",
                              m_model.layers,
                              S),
          V > 1 ? m_w.stage_interleave.at : m_w.mesh_at);
      d.hint = fmt::format("stage axes: {}", axes_text(m_mesh, m_roles.stage));
      return false;
    }
    return true;
  }

  bool resolve_batch() {
    const int64_t devices = m_mesh.num_devices();
    const Sourced<std::string>& per_device = m_w.per_device_batch;
    Location at = m_w.batch.at;
    std::string what;
    if (m_w.batch.value) {
      m_e.global_batch = *m_w.batch.value;
      what = fmt::format("batch {}", m_e.global_batch);
    } else {
      at = per_device.at;
      const auto [numerator, scale] = *m_per_device;
      std::optional<int64_t> product = checked_mul(numerator, devices);
      if (!product) {
        error("workload.overflow", "the global batch overflows int64", at);
        return false;
      }
      if (*product % scale != 0) {
        error("workload.batch-fractional",
              fmt::format("per-device batch {} x {} devices = {} sequences, "
                          "not a whole number",
                          per_device.value,
                          devices,
                          decimal_text(*product, scale)),
              at);
        return false;
      }
      m_e.global_batch = *product / scale;
      what = fmt::format("batch {} (per-device batch {} x {} devices)",
                         m_e.global_batch,
                         per_device.value,
                         devices);
    }
    const int64_t M = m_w.microbatches.value;
    // Beyond int64 is beyond any batch: not divisible.
    const std::optional<int64_t> product = checked_mul(M, m_e.batch_shards);
    const int64_t shards = product.value_or(0);
    if (!product || m_e.global_batch % shards != 0) {
      std::vector<std::string> names = m_roles.data;
      names.insert(names.end(), m_roles.expert.begin(), m_roles.expert.end());
      Diagnostic& d = error(
          "workload.batch-indivisible",
          fmt::format("{} is not divisible by {} microbatches x {} batch "
                      "shards{}",
                      what,
                      M,
                      m_e.batch_shards,
                      product ? fmt::format(" = {}", shards) : std::string()),
          at);
      d.hint = fmt::format("batch shards: the data and expert axes: {}",
                           axes_text(m_mesh, names));
      return false;
    }
    m_e.microbatch_size = m_e.global_batch / shards;
    return true;
  }

  bool check_sequence() {
    const int64_t C = m_e.sequence_shards;
    const bool by_token = m_w.residual.value == ResidualLayout::sequence;
    const int64_t t = by_token ? m_e.tensor_shards : 1;
    const int64_t shards = C * t;  // both within the device count
    const int64_t seq = m_w.seq.value;
    if (seq % shards != 0) {
      Diagnostic& d = error(
          "workload.sequence-indivisible",
          by_token ? fmt::format("sequence length {} is not divisible by {} "
                                 "sequence shards x {} tensor shards "
                                 "(sequence parallelism) = {}",
                                 seq,
                                 C,
                                 t,
                                 shards)
                   : fmt::format("sequence length {} is not divisible by "
                                 "{} sequence shards",
                                 seq,
                                 C),
          m_w.seq.at);
      std::vector<std::string> names = m_roles.sequence;
      if (by_token) {
        names.insert(names.end(), m_roles.tensor.begin(), m_roles.tensor.end());
      }
      d.hint = fmt::format("{} axes: {}",
                           by_token ? "sequence and tensor" : "sequence",
                           axes_text(m_mesh, names));
      return false;
    }
    m_s_dev = seq / C;
    m_e.tokens = m_arith.mul(m_e.microbatch_size, m_s_dev);
    const Sourced<int64_t>& tiles = m_w.vocab_tiles;
    if (tiles.value < 1 || m_e.tokens % tiles.value != 0) {
      error("workload.vocab-tiles",
            fmt::format("the {} tokens of a microbatch on a device are not "
                        "divisible by {} vocab tiles",
                        m_e.tokens,
                        tiles.value),
            tiles.at)
          .hint =
          "MaxText: per_device_batch_size x max_target_length must divide "
          "by num_vocab_tiling";
      return false;
    }
    m_e.vocab_tiles = tiles.value;
    m_tokens_outside = by_token ? m_e.tokens / m_e.tensor_shards : m_e.tokens;
    return true;
  }

  void set_dims() {
    const ModelConfig& c = m_model;
    const int64_t t = m_e.tensor_shards;
    m_act = *bytes_for(1, m_e.activation_dtype);
    Dims& d = m_dims;
    d.h = c.hidden;
    d.heads = ceil_div(c.heads, t);
    d.mla =
        architecture_info(c.architecture).family == ModelFamily::deepseek_v3;
    d.kv_heads = d.mla ? d.heads : ceil_div(c.kv_heads, t);
    d.q_head = d.mla ? m_arith.add(c.qk_nope, c.qk_rope) : c.head_dim;
    d.v_head = d.mla ? c.v_head : c.head_dim;
    d.mlp = ceil_div(m_s.dense_intermediate, t);
    d.routed = ceil_div(m_s.routed_intermediate, t);
    d.shared = ceil_div(m_s.shared_intermediate, t);
    d.experts = m_s.routed_experts;
    d.q_lora = c.q_lora_rank;
    d.kv_lora = c.kv_lora_rank;
    d.rope = c.qk_rope;
    d.q_width = m_arith.mul(d.heads, d.q_head);
    d.k_width = m_arith.mul(d.kv_heads, d.q_head);
    d.v_width = m_arith.mul(d.kv_heads, d.v_head);
    d.context_width = m_arith.mul(d.heads, d.v_head);
    d.kv_a_width = m_arith.add(d.kv_lora, d.rope);
    m_e.symbols = {{"s", m_s_dev},
                   {"seq", m_w.seq.value},
                   {"b", m_e.microbatch_size},
                   {"h", c.hidden},
                   {"a", c.heads},
                   {"t", t},
                   {"v", c.vocab}};
    auto symbol = [&](std::string name, int64_t value) {
      m_e.symbols.emplace_back(std::move(name), value);
    };
    if (d.mla) {
      symbol("dq", d.q_head);
      symbol("dv", d.v_head);
      symbol("rq", d.q_lora);
      symbol("rkv", d.kv_lora);
      symbol("dr", d.rope);
    } else {
      symbol("k", c.kv_heads);
      symbol("d", c.head_dim);
    }
    if (m_s.dense_layers > 0) {
      symbol("I", m_s.dense_intermediate);
    }
    if (m_s.routed_experts > 0) {
      symbol("E", m_s.routed_experts);
      symbol("K", m_s.experts_per_token);
      symbol("Im", m_s.routed_intermediate);
    }
    if (m_s.shared_intermediate > 0) {
      symbol("Is", m_s.shared_intermediate);
    }
    if (m_e.vocab_tiles > 1) {
      symbol("T", m_e.vocab_tiles);
    }
  }

  // Whether the residual stream's tensors are split over the tensor axes.
  bool split_outside() const {
    return m_w.residual.value != ResidualLayout::replicated;
  }

  // The elements on a device of a tokens x `width` tensor outside tensor
  // parallelism: whole (replicated), 1/t of the tokens (sequence) or
  // ceil(width / t) of each token's (embed).
  int64_t outside(int64_t width) {
    if (m_w.residual.value == ResidualLayout::embed) {
      return m_arith.mul(m_e.tokens, ceil_div(width, m_e.tensor_shards));
    }
    return m_arith.mul(m_tokens_outside, width);
  }

  // The mesh axes of the roles that split a tensor of `scale`, mesh order.
  std::vector<std::string> axes_of(Scale scale) const {
    const bool tensor = scale == Scale::inside || scale == Scale::scores
                        || scale == Scale::routed_inside || split_outside();
    std::vector<std::string> out;
    for (const MeshAxis& axis : m_mesh.axes) {
      std::optional<AxisRole> role = m_roles.role_of(axis.name);
      if (axis.size <= 1 || !role) {
        continue;
      }
      if (*role == AxisRole::data || *role == AxisRole::expert
          || *role == AxisRole::sequence
          || (*role == AxisRole::tensor && tensor)) {
        out.push_back(axis.name);
      }
    }
    return out;
  }

  // A routed tensor's bytes on the hottest expert rank: x the expert load,
  // rounded up.
  int64_t loaded(int64_t bytes) {
    if (m_e.expert_load == 1.0) {
      return bytes;
    }
    const double scaled =
        std::ceil(static_cast<double>(bytes) * m_e.expert_load);
    if (scaled >= 9.2e18) {
      return m_arith.mul(INT64_MAX, 2);  // overflow, remembered
    }
    return static_cast<int64_t>(scaled);
  }

  std::string load_text() const {
    return m_e.expert_load == 1.0 ? std::string()
                                  : fmt::format("*{:g}", m_e.expert_load);
  }

  // The hottest expert rank's routed share (ActivationEstimate::
  // expert_load), and MaxText's ragged receive buffer.
  void resolve_experts() {
    if (m_s.routed_experts == 0) {
      return;
    }
    const int64_t ep = m_roles.size(m_mesh, AxisRole::expert);
    const Sourced<double>& capacity = m_w.capacity_factor;
    const Sourced<double>& imbalance = m_w.routing_imbalance;
    if (capacity.value > 0) {
      m_e.expert_load = capacity.value;
      m_e.expert_load_source = fmt::format(
          "capacity factor {:g}, {}", capacity.value, to_string(capacity.at));
    } else if (ep > 1 && imbalance.value != 1.0) {
      m_e.expert_load = imbalance.value;
      m_e.expert_load_source =
          fmt::format("routing imbalance {:g} on the hottest expert rank, {}",
                      imbalance.value,
                      to_string(imbalance.at));
    } else {
      m_e.expert_load_source = "dropless routing, balanced";
    }
    if (ep > 1 && m_w.ragged_buffer) {
      // rows: the worst case, every token's K choices on this rank's
      // experts: tokens x min(E, EP x K); or tokens x K x the factor.
      const double factor = m_w.ragged_buffer->value;
      const int64_t K = m_s.experts_per_token;
      const int64_t rows =
          factor > 0
              ? static_cast<int64_t>(std::ceil(
                  static_cast<double>(m_arith.mul(m_e.tokens, K)) * factor))
              : m_arith.mul(m_e.tokens,
                            std::min(m_s.routed_experts, m_arith.mul(ep, K)));
      m_e.expert_exchange_bytes = m_arith.mul({2, rows, m_model.hidden, m_act});
    }
  }

  SavedTensor saved_of(const Candidate& c) {
    SavedTensor out;
    out.name = c.name;
    out.source = c.source;
    out.axes = axes_of(c.scale);
    const std::string per =
        c.elem_bytes == 1 ? std::string() : fmt::format("{}*", c.elem_bytes);
    const bool sp = split_outside();
    switch (c.scale) {
      case Scale::outside:
        out.bytes_per_layer = m_arith.mul(outside(c.width), c.elem_bytes);
        out.formula =
            fmt::format("{}s*b*{}{}", per, c.width_text, sp ? "/t" : "");
        break;
      case Scale::inside:
        out.bytes_per_layer = m_arith.mul({m_e.tokens, c.width, c.elem_bytes});
        out.formula = fmt::format("{}s*b*{}", per, c.width_text);
        break;
      case Scale::scores:
        out.bytes_per_layer = m_arith.mul({m_e.microbatch_size,
                                           m_s_dev,
                                           m_w.seq.value,
                                           c.width,
                                           c.elem_bytes});
        out.formula = fmt::format("{}{}*s*seq*b", per, c.width_text);
        break;
      case Scale::routed_outside:
        out.bytes_per_layer = loaded(m_arith.mul(
            {outside(c.width), m_s.experts_per_token, c.elem_bytes}));
        out.formula = fmt::format(
            "{}s*b*{}{}{}", per, c.width_text, sp ? "/t" : "", load_text());
        break;
      case Scale::routed_inside:
        out.bytes_per_layer = loaded(m_arith.mul(
            {m_e.tokens, m_s.experts_per_token, c.width, c.elem_bytes}));
        out.formula = fmt::format("{}s*b*{}{}", per, c.width_text, load_text());
        break;
    }
    return out;
  }

  LayerActivations price(const std::vector<Candidate>& candidates,
                         RematPolicy policy) {
    LayerActivations layer;
    for (const Candidate& c : candidates) {
      const auto [device, host] = workload_detail::kept(
          policy, m_e.custom_remat, c.tag, c.needed, c.core);
      // JAX saves residuals only: a named tensor nothing in the backward
      // reads is not kept (PyTorch's SAC caches every saved op's output).
      const bool read = c.needed || c.feeds_recompute || !m_w.residuals_only;
      if ((!device && !host) || !read) {
        continue;
      }
      SavedTensor t = saved_of(c);
      t.offloaded = host;
      if (host) {
        layer.host_bytes = m_arith.add(layer.host_bytes, t.bytes_per_layer);
      } else {
        layer.bytes = m_arith.add(layer.bytes, t.bytes_per_layer);
      }
      layer.saved.push_back(std::move(t));
    }
    return layer;
  }

  void price_layers() {
    LayerBuilder builder(
        m_model, m_dims, m_e.attention, m_act, m_w.eager_kernels);
    const bool any_moe = m_s.moe_layers > 0 || m_s.mtp_moe;
    const bool any_dense = m_s.dense_layers > 0
                           || (m_s.mtp_layers > 0 && !m_s.mtp_moe) || !any_moe;
    // A layer's backward first recomputes what the policy dropped: the
    // tensors the backward needs (what remat none keeps) that the policy
    // does not keep in HBM (the offloaded ones come back too), live while
    // that layer's backward runs. A tensor kept but not needed (out_proj's
    // output under minimal, mlpwo's under selective_op) saves nothing here.
    auto recompute = [&](const std::vector<Candidate>& candidates,
                         const LayerActivations&) {
      int64_t sum = 0;
      for (const Candidate& c : candidates) {
        const bool needed =
            workload_detail::kept(
                RematPolicy::none, m_e.custom_remat, c.tag, c.needed, c.core)
                .device;
        const bool on_device =
            workload_detail::kept(
                m_e.remat, m_e.custom_remat, c.tag, c.needed, c.core)
                .device;
        if (needed && !on_device) {
          sum = m_arith.add(sum, saved_of(c).bytes_per_layer);
        }
      }
      return sum;
    };
    if (any_dense) {
      const std::vector<Candidate> candidates = builder.dense(m_dims.mlp);
      m_e.dense = price(candidates, m_e.remat);
      m_recompute_dense = recompute(candidates, *m_e.dense);
    }
    if (any_moe) {
      const std::vector<Candidate> candidates = builder.moe(m_s);
      m_e.moe = price(candidates, m_e.remat);
      m_recompute_moe = recompute(candidates, *m_e.moe);
    }
    m_e.per_layer_bytes = m_e.dense ? m_e.dense->bytes : m_e.moe->bytes;
    const std::string policy(to_string(m_e.remat));
    for (const auto* kind : {&m_e.dense, &m_e.moe}) {
      if (!*kind) {
        continue;
      }
      const bool dense = kind == &m_e.dense;
      for (const SavedTensor& t : (*kind)->saved) {
        m_e.terms.push_back({fmt::format("{} layer: {}{}",
                                         dense ? "dense" : "moe",
                                         t.name,
                                         t.offloaded ? " (host)" : ""),
                             t.bytes_per_layer,
                             t.formula,
                             t.source});
      }
      m_e.terms.push_back({fmt::format("{} layer", dense ? "dense" : "moe"),
                           (*kind)->bytes,
                           "sum of the tensors the policy keeps",
                           fmt::format("remat {}", policy)});
    }

    // The embedding (first stage): the token ids (int32, as MaxText casts
    // them; Megatron counts 8 bytes, int64) and the embedding dropout's
    // mask (Korthikanti et al. 4.3).
    const bool sp = split_outside();
    m_embedding = m_arith.mul(m_e.tokens, 4);
    m_e.terms.push_back({"token_ids",
                         m_embedding,
                         "4*s*b",
                         "int32 token ids (MaxText; Megatron: 8*s*b)",
                         TermPart::embedding});
    if (m_model.embedding_dropout > 0) {
      const int64_t mask = outside(m_model.hidden);
      m_embedding = m_arith.add(m_embedding, mask);
      m_e.terms.push_back({"embedding_dropout_mask",
                           mask,
                           sp ? "s*b*h/t" : "s*b*h",
                           std::string(k_korthikanti_other),
                           TermPart::embedding});
    }

    // The head (last stage): the final norm's input and output (the head's
    // input) and what the loss's kernel holds of the logits, split over the
    // tensor axes (a vocab-parallel head).
    m_logits = head_terms("", true);

    // DeepSeek-V3's MTP modules (last stage): each a decoder layer, the
    // inputs of its two norms and of its projection of [e; h] (4h), and a
    // head of its own.
    if (m_s.mtp_layers > 0) {
      const LayerActivations& layer = m_s.mtp_moe ? *m_e.moe : *m_e.dense;
      const int64_t inputs = m_arith.mul({outside(m_model.hidden), 4, m_act});
      const int64_t head = head_terms("mtp ", false);
      const int64_t one = m_arith.add(m_arith.add(layer.bytes, inputs), head);
      m_mtp = m_arith.mul(one, m_s.mtp_layers);
      m_mtp_host = m_arith.mul(layer.host_bytes, m_s.mtp_layers);
      m_e.terms.push_back({"mtp",
                           m_mtp,
                           fmt::format("{} x ({} layer + {}*s*b*4h{} + head)",
                                       m_s.mtp_layers,
                                       m_s.mtp_moe ? "moe" : "dense",
                                       m_act,
                                       sp ? "/t" : ""),
                           "DeepSeek-V3 MTP module (README_WEIGHTS.md)",
                           TermPart::head});
    }
  }

  // Context parallelism's exchange (docs/memory.md, "Context
  // parallelism"): a layer's K + V and q + k + v + out on a device, and
  // what its backward holds to exchange them. False after an error.
  bool price_context() {
    const int64_t C = m_e.sequence_shards;
    m_e.context_strategy = m_w.context_strategy.value;
    m_e.context_strategy_source = m_w.context_strategy.at.empty()
                                      ? "default"
                                      : to_string(m_w.context_strategy.at);
    if (C <= 1) {
      return true;
    }
    const Dims& d = m_dims;
    if (m_e.context_strategy == ContextStrategy::ulysses
        && (d.heads % C != 0 || d.kv_heads % C != 0)) {
      Diagnostic& e =
          error("workload.ulysses-heads",
                fmt::format("ulysses lays attention out by heads: the {} "
                            "query and {} key/value heads on a device do "
                            "not divide over {} sequence shards",
                            d.heads,
                            d.kv_heads,
                            C),
                m_w.context_strategy.at.empty() ? m_w.mesh_at
                                                : m_w.context_strategy.at);
      e.hint = "use all-gather or ring, or fewer sequence shards";
      return false;
    }
    const int64_t kv = m_arith.add(d.k_width, d.v_width);
    const int64_t qkvo =
        m_arith.add(m_arith.add(d.q_width, kv), d.context_width);
    m_e.context_kv_bytes = m_arith.mul({m_e.tokens, kv, m_act});
    m_e.context_qkvo_bytes = m_arith.mul({m_e.tokens, qkvo, m_act});
    switch (m_e.context_strategy) {
      case ContextStrategy::all_gather:
        m_e.context_exchange_bytes = m_arith.mul({2, C, m_e.context_kv_bytes});
        break;
      case ContextStrategy::ring:
        m_e.context_exchange_bytes = m_arith.mul(4, m_e.context_kv_bytes);
        break;
      case ContextStrategy::ulysses:
        m_e.context_exchange_bytes = m_arith.mul(2, m_e.context_qkvo_bytes);
        break;
    }
    m_e.symbols.emplace_back("C", C);
    return true;
  }

  struct HeadTerm {
    std::string_view name;
    int64_t bytes;
    std::string formula;
    std::string_view source;
  };

  // The head's terms (docs/memory.md, "The head"), added to `terms` when
  // `record`; their sum, the loss's peak: the final norm's input and output
  // and what the loss's kernel holds of the logits at once.
  int64_t head_terms(std::string_view prefix, bool record) {
    const bool sp = split_outside();
    const int64_t hidden = m_arith.mul(outside(m_model.hidden), m_act);
    const std::string h_text = fmt::format("{}*s*b*h{}", m_act, sp ? "/t" : "");
    std::vector<HeadTerm> terms = {
        {"final_norm_input", hidden, h_text, k_korthikanti_other},
        {"head_input", hidden, h_text, k_korthikanti_other},
    };
    loss_terms(terms);
    int64_t sum = 0;
    for (const HeadTerm& term : terms) {
      sum = m_arith.add(sum, term.bytes);
      if (record) {
        m_e.terms.push_back({fmt::format("{}{}", prefix, term.name),
                             term.bytes,
                             term.formula,
                             std::string(term.source),
                             TermPart::head});
      }
    }
    return sum;
  }

  // What the loss's kernel holds of the logits at its peak (s*b*ceil(v/t)
  // elements each).
  void loss_terms(std::vector<HeadTerm>& terms) {
    const int64_t vocab = ceil_div(m_model.vocab, m_e.tensor_shards);
    // MaxText's num_vocab_tiling: the loss runs over the tokens in T chunks,
    // one chunk's logits alive at a time (checked to divide the tokens).
    const int64_t T = m_w.vocab_tiles.value;
    const int64_t tokens = m_e.tokens / T;
    const int64_t narrow = m_arith.mul({tokens, vocab, m_act});
    const int64_t wide = m_arith.mul({tokens, vocab, 4});
    const std::string tiled = T > 1 ? "/T" : "";
    const std::string narrow_text =
        fmt::format("{}*s*b*ceil(v/t){}", m_act, tiled);
    const std::string wide_text = "4*s*b*ceil(v/t)" + tiled;
    const bool softcap = m_model.final_softcap > 0;
    switch (m_e.cross_entropy) {
      case CrossEntropy::fused:
        // The softcap's tanh fuses with the rest.
        terms.push_back({"logits", narrow, narrow_text, k_xla_loss});
        return;
      case CrossEntropy::vocab_parallel:
        terms.push_back({"logits",
                         narrow,
                         narrow_text,
                         "the head's output, live beside its fp32 copy"});
        if (softcap) {
          terms.push_back({"logits_softcap", narrow, narrow_text, k_softcap});
        }
        terms.push_back({"logits_fp32", wide, wide_text, k_megatron_loss});
        return;
      case CrossEntropy::eager:
        if (softcap) {
          terms.push_back({"logits_softcap", narrow, narrow_text, k_softcap});
        }
        terms.push_back({"log_softmax", wide, wide_text, k_eager_saved});
        terms.push_back({"log_softmax_grad", wide, wide_text, k_eager_grad});
        terms.push_back({"logits_grad", wide, wide_text, k_eager_input});
        return;
    }
  }

  // bytes x chunks / V, rounded up.
  int64_t in_flight(int64_t bytes, int64_t chunks, int64_t V) {
    return ceil_div(m_arith.mul(bytes, chunks), V);
  }

  void price_stages() {
    const int64_t S = m_e.stages;
    const int64_t V = m_w.stage_interleave.value;
    const int64_t M = m_w.microbatches.value;
    const int64_t L = m_model.layers;
    const int64_t per_chunk = L / (S * V);
    m_e.layers_per_stage = L / S;
    std::vector<StageActivations> stages(to_size(S));
    for (int64_t r = 0; r < S; ++r) {
      stages[to_size(r)].stage = r;
    }
    for (int64_t i = 0; i < L; ++i) {
      const int64_t stage = per_chunk > 0 ? (i / per_chunk) % S : 0;
      StageActivations& st = stages[to_size(stage)];
      ++(m_s.moe[to_size(i)] ? st.moe_layers : st.dense_layers);
    }
    const int64_t dense = m_e.dense ? m_e.dense->bytes : 0;
    const int64_t moe = m_e.moe ? m_e.moe->bytes : 0;
    const int64_t dense_host = m_e.dense ? m_e.dense->host_bytes : 0;
    const int64_t moe_host = m_e.moe ? m_e.moe->host_bytes : 0;
    for (StageActivations& st : stages) {
      const int64_t r = st.stage;
      // Chunks (a stage's layers / V) in flight at the peak: 1F1B's
      // warm-up plus one (Megatron's schedules.py), capped by the
      // microbatches.
      const int64_t chunks =
          V == 1 ? std::min(S - r, M)
                 : std::min(2 * (S - r - 1) + (V - 1) * S + 1,
                            checked_mul(M, V).value_or(INT64_MAX));
      st.in_flight = static_cast<double>(chunks) / static_cast<double>(V);
      const int64_t layers = m_arith.add(m_arith.mul(st.dense_layers, dense),
                                         m_arith.mul(st.moe_layers, moe));
      const int64_t host = m_arith.add(m_arith.mul(st.dense_layers, dense_host),
                                       m_arith.mul(st.moe_layers, moe_host));
      st.layers_bytes = in_flight(layers, chunks, V);
      st.host_bytes = in_flight(host, chunks, V);
      if (r == 0) {
        st.embedding_bytes = in_flight(m_embedding, chunks, V);
      }
      const bool last = r == S - 1;
      if (last) {
        st.logits_bytes = m_logits;
        st.mtp_bytes = m_mtp;
        st.host_bytes = m_arith.add(st.host_bytes, m_mtp_host);
      }
      // One layer at a time is recomputed: the largest kind the stage has.
      if (st.dense_layers > 0 || (last && m_s.mtp_layers > 0 && !m_s.mtp_moe)) {
        st.recompute_bytes = m_recompute_dense;
      }
      if (st.moe_layers > 0 || (last && m_s.mtp_moe)) {
        st.recompute_bytes = std::max(st.recompute_bytes, m_recompute_moe);
      }
      st.exchange_bytes = m_e.context_exchange_bytes;
      if (st.moe_layers > 0 || (last && m_s.mtp_moe)) {
        st.exchange_bytes =
            m_arith.add(st.exchange_bytes, m_e.expert_exchange_bytes);
      }
      // The loss and a layer's backward come one after the other.
      st.total_bytes = m_arith.add(
          m_arith.add(m_arith.add(st.layers_bytes, st.embedding_bytes),
                      st.mtp_bytes),
          std::max(st.logits_bytes,
                   m_arith.add(st.recompute_bytes, st.exchange_bytes)));
    }
    size_t max = 0;
    for (size_t i = 1; i < stages.size(); ++i) {
      if (stages[i].total_bytes > stages[max].total_bytes) {
        max = i;
      }
    }
    const StageActivations& top = stages[max];
    m_e.in_flight_factor = stages.front().in_flight;
    m_e.max_stage = top.stage;
    m_e.layers_bytes = top.layers_bytes;
    m_e.embedding_bytes = top.embedding_bytes;
    m_e.logits_bytes = top.logits_bytes;
    m_e.mtp_bytes = top.mtp_bytes;
    m_e.recompute_bytes = top.recompute_bytes;
    m_e.host_offload_bytes = top.host_bytes;
    m_e.total_bytes = top.total_bytes;
    m_e.per_stage = std::move(stages);
  }

  const ModelConfig& m_model;
  const Mesh& m_mesh;
  const AxisRoles& m_roles;
  const Workload& m_w;
  Diagnostics& m_diags;
  Arith m_arith;
  ActivationEstimate m_e;
  LayerStructure m_s;
  Dims m_dims;
  std::optional<std::pair<int64_t, int64_t>> m_per_device;
  int64_t m_act = 2;
  int64_t m_s_dev = 0;           // tokens of a sequence on a device
  int64_t m_tokens_outside = 0;  // tokens outside tensor parallelism
  int64_t m_embedding = 0;
  int64_t m_logits = 0;
  int64_t m_mtp = 0;
  int64_t m_mtp_host = 0;
  int64_t m_recompute_dense = 0;
  int64_t m_recompute_moe = 0;
};

}  // namespace

std::string_view to_string(AttentionKind kind) {
  return kind == AttentionKind::flash ? "flash" : "plain";
}

std::optional<AttentionKind> parse_attention(std::string_view text) {
  if (text == "flash") {
    return AttentionKind::flash;
  }
  if (text == "plain") {
    return AttentionKind::plain;
  }
  return std::nullopt;
}

ActivationLoad activation_load(const StageActivations& stage) {
  // Each a part of total_bytes, which did not overflow.
  return ActivationLoad{
      stage.layers_bytes + stage.embedding_bytes + stage.mtp_bytes,
      stage.logits_bytes,
      stage.recompute_bytes + stage.exchange_bytes,
      stage.host_bytes};
}

namespace {

constexpr std::array<Named<CrossEntropy>, 3> k_cross_entropy{{
    {CrossEntropy::fused, "fused"},
    {CrossEntropy::vocab_parallel, "vocab-parallel"},
    {CrossEntropy::eager, "eager"},
}};

constexpr std::array<Named<ContextStrategy>, 3> k_context_strategies{{
    {ContextStrategy::all_gather, "all-gather"},
    {ContextStrategy::ring, "ring"},
    {ContextStrategy::ulysses, "ulysses"},
}};

}  // namespace

std::string_view to_string(CrossEntropy kind) {
  return name_in(k_cross_entropy, kind);
}

std::optional<CrossEntropy> parse_cross_entropy(std::string_view text) {
  return value_in(k_cross_entropy, text);
}

std::vector<std::string> cross_entropy_names() {
  return names_in(k_cross_entropy);
}

std::string_view to_string(ContextStrategy strategy) {
  return name_in(k_context_strategies, strategy);
}

std::optional<ContextStrategy> parse_context_strategy(std::string_view text) {
  return value_in(k_context_strategies, text);
}

std::vector<std::string> context_strategy_names() {
  return names_in(k_context_strategies);
}

namespace {

std::string context_exchange_formula(ContextStrategy strategy) {
  switch (strategy) {
    case ContextStrategy::all_gather:
      return "K, V gathered over the sequence and their gradients: "
             "2*C*(K+V)";
    case ContextStrategy::ring:
      return "two chunks of K, V and of their gradients in flight: 4*(K+V)";
    case ContextStrategy::ulysses:
      return "q, k, v, out laid out by heads and their gradients: "
             "2*(q+k+v+out)";
  }
  return {};
}

}  // namespace

std::vector<ActivationTerm> stage_terms(const ActivationEstimate& estimate,
                                        int64_t stage) {
  assert(stage >= 0 && static_cast<size_t>(stage) < estimate.per_stage.size());
  const StageActivations& st = estimate.per_stage[static_cast<size_t>(stage)];
  const bool first = stage == 0;
  const bool last = stage + 1 == estimate.stages;
  std::vector<ActivationTerm> out;
  std::vector<std::string> embedding_terms, head_terms;
  for (const ActivationTerm& t : estimate.terms) {
    if (t.part == TermPart::layer || (t.part == TermPart::embedding && first)
        || (t.part == TermPart::head && last)) {
      out.push_back(t);
    }
    if (t.part == TermPart::embedding) {
      embedding_terms.push_back(t.name);
    } else if (t.part == TermPart::head && t.name != "mtp") {
      head_terms.push_back(t.name);
    }
  }
  std::vector<std::string> kinds;
  if (st.dense_layers > 0) {
    kinds.push_back(fmt::format("{} x dense layer", st.dense_layers));
  }
  if (st.moe_layers > 0) {
    kinds.push_back(fmt::format("{} x moe layer", st.moe_layers));
  }
  const bool pipelined = estimate.stages > 1;
  // "a + b", times the microbatches in flight when pipelined.
  auto in_flight = [&](const std::vector<std::string>& parts) {
    std::string sum = fmt::format("{}", fmt::join(parts, " + "));
    if (!pipelined) {
      return sum;
    }
    return parts.size() > 1
               ? fmt::format("({}) x {:g} in flight", sum, st.in_flight)
               : fmt::format("{} x {:g} in flight", sum, st.in_flight);
  };
  auto add = [&](std::string name,
                 int64_t bytes,
                 std::string formula,
                 std::string source) {
    out.push_back({std::move(name),
                   bytes,
                   std::move(formula),
                   std::move(source),
                   TermPart::stage});
  };
  add("layers",
      st.layers_bytes,
      in_flight(kinds),
      pipelined ? "1F1B in flight (Korthikanti et al. 4.2.3)"
                : "one microbatch in flight");
  if (st.embedding_bytes > 0) {
    add("embedding",
        st.embedding_bytes,
        in_flight(embedding_terms),
        "first stage");
  }
  if (st.logits_bytes > 0) {
    add("head",
        st.logits_bytes,
        fmt::format("{}", fmt::join(head_terms, " + ")),
        "last stage, one microbatch");
  }
  if (st.recompute_bytes > 0) {
    add("recompute",
        st.recompute_bytes,
        "what remat none keeps that the policy drops",
        "Chen et al. 2016, arXiv 1604.06174");
  }
  const int64_t context =
      std::min(st.exchange_bytes, estimate.context_exchange_bytes);
  if (context > 0) {
    add("context_exchange",
        context,
        context_exchange_formula(estimate.context_strategy),
        fmt::format("context parallelism, {} (docs/memory.md, \"Context "
                    "parallelism\")",
                    to_string(estimate.context_strategy)));
  }
  if (st.exchange_bytes > context) {
    add("expert_exchange",
        st.exchange_bytes - context,
        "2 x the ragged receive buffer: s*b x min(E, EP*K) (or x K x the "
        "buffer factor) x h",
        "MaxText sparse_matmul's ragged_all_to_all (docs/memory.md, "
        "\"Mixture of experts\")");
  }
  add("total",
      st.total_bytes,
      st.exchange_bytes > 0
          ? "layers + embedding + mtp + max(head, recompute + exchange)"
          : "layers + embedding + mtp + max(head, recompute)",
      "HBM: the loss, then each layer's backward");
  if (st.host_bytes > 0) {
    add("host_offload",
        st.host_bytes,
        "offloaded tensors x layers x in flight",
        "MaxText offload policy: host memory, not HBM");
  }
  return out;
}

std::optional<ActivationEstimate> estimate_activations(const ModelConfig& model,
                                                       const Mesh& mesh,
                                                       const AxisRoles& roles,
                                                       const Workload& workload,
                                                       Diagnostics& diags) {
  return Estimator(model, mesh, roles, workload, diags).run();
}

}  // namespace shardplan
