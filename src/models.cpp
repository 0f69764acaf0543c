// The tensors of a Hugging Face checkpoint from what its config.json says
// (include/shardplan/models.hpp; io/hf_config.cpp reads the config).
// docs/models.md lists, per architecture, the names, shapes and dtypes made
// here and where each rule comes from.

#include <shardplan/models.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cstdint>
#include <utility>

namespace shardplan {

namespace {

using A = Architecture;
using F = ModelFamily;
using M = MoeBlock;

// Row k is Architecture k (checked below), in the order of the names.
// architecture, name, family, MoE block
constexpr std::array<ArchitectureInfo, 10> k_architectures{{
    {A::deepseek_v3, "DeepseekV3ForCausalLM", F::deepseek_v3, M::deepseek_v3},
    {A::gpt2, "GPT2LMHeadModel", F::gpt2, M::none},
    {A::gemma2, "Gemma2ForCausalLM", F::llama, M::none},
    {A::gemma, "GemmaForCausalLM", F::llama, M::none},
    {A::llama, "LlamaForCausalLM", F::llama, M::none},
    {A::mistral, "MistralForCausalLM", F::llama, M::none},
    {A::mixtral, "MixtralForCausalLM", F::llama, M::mixtral},
    {A::phi3, "Phi3ForCausalLM", F::llama, M::none},
    {A::qwen2, "Qwen2ForCausalLM", F::llama, M::none},
    {A::qwen2_moe, "Qwen2MoeForCausalLM", F::llama, M::qwen2_moe},
}};

constexpr bool rows_in_enum_order() {
  for (size_t k = 0; k < k_architectures.size(); ++k) {
    if (static_cast<size_t>(k_architectures[k].architecture) != k) {
      return false;
    }
  }
  return true;
}
static_assert(rows_in_enum_order(), "row k of k_architectures is value k");

// Whether `a` is an Architecture value. A new value fails to compile here
// (-Wswitch) until it has its case, and then the static_assert below until
// it has its row.
constexpr bool is_value(Architecture a) {
  switch (a) {
    case A::deepseek_v3:
    case A::gpt2:
    case A::gemma2:
    case A::gemma:
    case A::llama:
    case A::mistral:
    case A::mixtral:
    case A::phi3:
    case A::qwen2:
    case A::qwen2_moe:
      return true;
  }
  return false;
}
static_assert(!is_value(static_cast<Architecture>(k_architectures.size())),
              "an Architecture value without its row in k_architectures");

// is_moe_layer for every layer of one config, with mlp_only_layers sorted
// once (a config may list many).
class MoeLayers {
 public:
  explicit MoeLayers(const ModelConfig& config)
      : m_config(config), m_dense(config.dense_layers) {
    std::sort(m_dense.begin(), m_dense.end());
  }

  bool operator()(int64_t index) const {
    const ModelConfig& c = m_config;
    if (c.experts <= 0) {
      return false;
    }
    switch (architecture_info(c.architecture).moe) {
      case MoeBlock::none:
        return false;
      case MoeBlock::mixtral:
        return true;
      case MoeBlock::qwen2_moe:
        // Qwen2MoeDecoderLayer: sparse when (i + 1) % decoder_sparse_step
        // == 0 and i is not in mlp_only_layers.
        return (index + 1) % c.sparse_step == 0
               && !std::binary_search(m_dense.begin(), m_dense.end(), index);
      case MoeBlock::deepseek_v3:
        // DeepseekV3DecoderLayer: MoE from first_k_dense_replace on, every
        // moe_layer_freq layers.
        return index >= c.first_dense && index % c.moe_freq == 0;
    }
    return false;
  }

 private:
  const ModelConfig& m_config;
  std::vector<int64_t> m_dense;
};

// Collects tensors. The first problem is reported and makes the builder
// fail; later calls do nothing, so one input gives one diagnostic (STYLE
// 2.4). A problem is located at the config key whose value caused it.
class Builder {
 public:
  Builder(const ModelConfig& config, Diagnostics& diags)
      : m_config(config), m_diags(diags) {}

  bool failed() const { return m_failed; }

  void fail(std::string code,
            std::string message,
            std::string_view key,
            std::optional<std::string> tensor = {}) {
    if (m_failed) {
      return;
    }
    m_failed = true;
    Diagnostic& d =
        m_diags.error(std::move(code),
                      std::move(message),
                      Location::at(m_config.source,
                                   key.empty() ? std::string()
                                               : json_pointer_child("", key)));
    d.tensor = std::move(tensor);
  }

  // a * b and a + b; an overflow is reported at `key`, the value that made
  // it, and gives 1 so generation can go on to the end of the check.
  int64_t mul(int64_t a, int64_t b, std::string_view key) {
    return checked(checked_mul(a, b), a, '*', b, key);
  }
  int64_t add(int64_t a, int64_t b, std::string_view key) {
    return checked(checked_add(a, b), a, '+', b, key);
  }
  int64_t checked(std::optional<int64_t> r,
                  int64_t a,
                  char op,
                  int64_t b,
                  std::string_view key) {
    if (!r) {
      fail("model.overflow",
           fmt::format(
               "a dim computed from this value overflows int64: {} {} {}",
               a,
               op,
               b),
           key);
      return 1;
    }
    return *r;
  }
  // Fails unless `layers` layers of at most `per_layer` tensors each (plus
  // a few outside the layers) stay within k_max_model_tensors. Blames
  // `per_layer_key` when one layer is already too many, else `layers_key`.
  // Checked before generating anything, so a huge config costs no time.
  bool room_for(int64_t layers,
                int64_t per_layer,
                std::string_view layers_key,
                std::string_view per_layer_key) {
    if (m_failed) {
      return false;
    }
    constexpr int64_t k_outside = 8;
    std::optional<int64_t> total = checked_mul(layers, per_layer);
    std::string_view key =
        per_layer > k_max_model_tensors ? per_layer_key : layers_key;
    if (!total || *total > k_max_model_tensors - k_outside) {
      fail("model.too-many-tensors",
           fmt::format("the model would have more than {} tensors",
                       k_max_model_tensors),
           key);
      return false;
    }
    return true;
  }

  void tensor(std::string name, std::vector<int64_t> shape, DType dtype) {
    if (m_failed) {
      return;
    }
    std::optional<int64_t> elements = checked_product(shape);
    std::optional<int64_t> total =
        elements ? checked_add(m_elements, *elements) : std::nullopt;
    std::optional<int64_t> bytes =
        elements ? bytes_for(*elements, dtype) : std::nullopt;
    std::optional<int64_t> total_bytes =
        bytes ? checked_add(m_bytes, *bytes) : std::nullopt;
    if (!total || !total_bytes) {
      fail("model.overflow",
           fmt::format("{} elements or bytes overflow int64",
                       elements ? "the model's" : "the tensor's"),
           "",
           name);
      return;
    }
    m_elements = *total;
    m_bytes = *total_bytes;
    m_tensors.push_back(ModelTensor{std::move(name), std::move(shape), dtype});
  }

  // `prefix`.weight [out, in] (nn.Linear layout) and, with `bias`,
  // `prefix`.bias [out]. A `quantized` weight under a block-wise FP8
  // quantization_config is f8_e4m3, followed by its weight_scale_inv.
  void linear(const std::string& prefix,
              int64_t out,
              int64_t in,
              bool bias,
              bool quantized) {
    if (quantized && m_config.fp8_block) {
      tensor(prefix + ".weight", {out, in}, DType::f8_e4m3);
      tensor(prefix + ".weight_scale_inv",
             {ceil_div(out, (*m_config.fp8_block)[0]),
              ceil_div(in, (*m_config.fp8_block)[1])},
             DType::f32);
    } else {
      tensor(prefix + ".weight", {out, in}, m_config.dtype);
    }
    if (bias) {
      tensor(prefix + ".bias", {out}, m_config.dtype);
    }
  }

  void vector(const std::string& name, int64_t size) {
    tensor(name, {size}, m_config.dtype);
  }

  DType dtype() const { return m_config.dtype; }
  std::vector<ModelTensor> take() { return std::move(m_tensors); }

 private:
  const ModelConfig& m_config;
  Diagnostics& m_diags;
  bool m_failed = false;
  std::vector<ModelTensor> m_tensors;
  int64_t m_elements = 0;
  int64_t m_bytes = 0;
};

// The end of a Llama-like decoder: the final norm, then the head unless it
// is tied to the embedding; the tensors, or nullopt after a failure.
std::optional<std::vector<ModelTensor>> finish_decoder(Builder& b,
                                                       const ModelConfig& c) {
  b.vector("model.norm.weight", c.hidden);
  if (!c.tied) {
    b.tensor("lm_head.weight", {c.vocab, c.hidden}, b.dtype());
  }
  if (b.failed()) {
    return std::nullopt;
  }
  return b.take();
}

// ---------------------------------------------------------------------------
// Llama and its relatives: Mistral, Mixtral, Qwen2, Qwen2-MoE, Gemma, Gemma2,
// Phi-3 (transformers/models/<arch>/modeling_<arch>.py; checkpoint names).

// Qwen2MoeSparseMoeBlock (modeling_qwen2_moe.py), in the order its __init__
// creates the modules: the router (gate), the routed experts, the shared
// expert and its sigmoid gate. The two gates are routers: not quantized.
void qwen2_moe_block(Builder& b, const ModelConfig& d, const std::string& m) {
  b.linear(m + "gate", d.experts, d.hidden, false, false);
  for (int64_t e = 0; e < d.experts; ++e) {
    const std::string x = fmt::format("{}experts.{}.", m, e);
    b.linear(x + "gate_proj", d.moe_intermediate, d.hidden, false, true);
    b.linear(x + "up_proj", d.moe_intermediate, d.hidden, false, true);
    b.linear(x + "down_proj", d.hidden, d.moe_intermediate, false, true);
  }
  const std::string s = m + "shared_expert.";
  b.linear(s + "gate_proj", d.shared_intermediate, d.hidden, false, true);
  b.linear(s + "up_proj", d.shared_intermediate, d.hidden, false, true);
  b.linear(s + "down_proj", d.hidden, d.shared_intermediate, false, true);
  b.linear(m + "shared_expert_gate", 1, d.hidden, false, false);
}

// MixtralSparseMoeBlock: the router, then the experts (w1 gate, w2 down,
// w3 up).
void mixtral_block(Builder& b, const ModelConfig& d, const std::string& p) {
  b.linear(p + "block_sparse_moe.gate", d.experts, d.hidden, false, false);
  for (int64_t e = 0; e < d.experts; ++e) {
    const std::string x = fmt::format("{}block_sparse_moe.experts.{}.", p, e);
    b.linear(x + "w1", d.intermediate, d.hidden, false, true);
    b.linear(x + "w2", d.hidden, d.intermediate, false, true);
    b.linear(x + "w3", d.intermediate, d.hidden, false, true);
  }
}

// The MLP of layer `p` (not Phi-3's): `block` on every layer (Mixtral) or
// on the MoE layers (Qwen2-MoE, `moe_layer`), else the gated MLP with
// Llama's mlp_bias.
void llama_mlp(Builder& b,
               const ModelConfig& d,
               MoeBlock block,
               bool moe_layer,
               const std::string& p) {
  switch (block) {
    case MoeBlock::mixtral:
      mixtral_block(b, d, p);
      return;
    case MoeBlock::qwen2_moe:
      if (moe_layer) {
        qwen2_moe_block(b, d, p + "mlp.");
        return;
      }
      break;
    case MoeBlock::none:
    case MoeBlock::deepseek_v3:  // DeepSeek-V3's family, not this one
      break;
  }
  const bool bias = d.mlp_bias;
  b.linear(p + "mlp.gate_proj", d.intermediate, d.hidden, bias, true);
  b.linear(p + "mlp.up_proj", d.intermediate, d.hidden, bias, true);
  b.linear(p + "mlp.down_proj", d.hidden, d.intermediate, bias, true);
}

std::optional<std::vector<ModelTensor>> llama_family(Builder& b,
                                                     const ModelConfig& d) {
  const Architecture arch = d.architecture;
  // Llama and Gemma read attention_bias (q, k, v and o); Qwen2 and
  // Qwen2-MoE have q/k/v biases (qkv_bias) and none on o; Mistral, Mixtral
  // and Phi-3 have none.
  const bool qkv_bias = d.attention_bias || d.qkv_bias;
  const MoeBlock block = architecture_info(arch).moe;
  const bool mixtral = block == MoeBlock::mixtral;
  const bool qwen2_moe = block == MoeBlock::qwen2_moe;
  const bool phi3 = arch == Architecture::phi3;
  const bool attention_bias = d.attention_bias;
  const int64_t experts = mixtral || qwen2_moe ? d.experts : 0;
  const std::string_view experts_key =
      mixtral ? "num_local_experts" : "num_experts";
  // Qwen2-MoE's layer i is sparse when experts > 0, (i + 1) %
  // decoder_sparse_step == 0 and i is not in mlp_only_layers.
  const MoeLayers sparse(d);
  const int64_t q_out = b.mul(d.heads, d.head_dim, "num_attention_heads");
  const int64_t kv_out = b.mul(d.kv_heads, d.head_dim, "num_key_value_heads");
  // Phi-3 fuses q, k and v into qkv_proj and gate and up into gate_up_proj
  // (Phi3Attention, Phi3MLP).
  const int64_t qkv_out =
      phi3 ? b.add(
          q_out, b.mul(2, kv_out, "num_key_value_heads"), "num_key_value_heads")
           : 0;
  const int64_t gate_up_out =
      phi3 ? b.mul(2, d.intermediate, "intermediate_size") : 0;
  // At most 18 tensors besides the experts (weights, biases, norms).
  const int64_t per_layer =
      b.add(b.mul(experts, 3, experts_key), 18, experts_key);
  if (b.failed()
      || !b.room_for(d.layers, per_layer, "num_hidden_layers", experts_key)) {
    return std::nullopt;
  }

  b.tensor("model.embed_tokens.weight", {d.vocab, d.hidden}, b.dtype());
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    if (phi3) {
      // Phi3Attention creates o_proj before qkv_proj; no biases.
      b.linear(p + "self_attn.o_proj", d.hidden, q_out, false, true);
      b.linear(p + "self_attn.qkv_proj", qkv_out, d.hidden, false, true);
    } else {
      b.linear(p + "self_attn.q_proj", q_out, d.hidden, qkv_bias, true);
      b.linear(p + "self_attn.k_proj", kv_out, d.hidden, qkv_bias, true);
      b.linear(p + "self_attn.v_proj", kv_out, d.hidden, qkv_bias, true);
      b.linear(p + "self_attn.o_proj", d.hidden, q_out, attention_bias, true);
    }
    if (phi3) {
      // Phi3MLP: gate and up as one [2 * intermediate, hidden] weight.
      b.linear(p + "mlp.gate_up_proj", gate_up_out, d.hidden, false, true);
      b.linear(p + "mlp.down_proj", d.hidden, d.intermediate, false, true);
    } else {
      llama_mlp(b, d, block, sparse(i), p);
    }
    b.vector(p + "input_layernorm.weight", d.hidden);
    b.vector(p + "post_attention_layernorm.weight", d.hidden);
    if (arch == Architecture::gemma2) {
      b.vector(p + "pre_feedforward_layernorm.weight", d.hidden);
      b.vector(p + "post_feedforward_layernorm.weight", d.hidden);
    }
  }
  return finish_decoder(b, d);
}

// ---------------------------------------------------------------------------
// GPT-2 (transformers/models/gpt2/modeling_gpt2.py). The published
// checkpoints name tensors without the "transformer." prefix, and Conv1D
// stores weights as [in, out].

std::optional<std::vector<ModelTensor>> gpt2(Builder& b, const ModelConfig& d) {
  const int64_t vocab = d.vocab;
  const int64_t embed = d.hidden;
  const int64_t layers = d.layers;
  const int64_t positions = d.positions;
  const int64_t inner =
      d.intermediate > 0 ? d.intermediate : b.mul(4, embed, "n_embd");
  const bool tied = d.tied;
  const int64_t qkv = b.mul(3, embed, "n_embd");
  if (b.failed() || !b.room_for(layers, 12, "n_layer", "n_layer")) {
    return std::nullopt;
  }
  const DType t = b.dtype();
  b.tensor("wte.weight", {vocab, embed}, t);
  b.tensor("wpe.weight", {positions, embed}, t);
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = fmt::format("h.{}.", i);
    b.tensor(p + "ln_1.weight", {embed}, t);
    b.tensor(p + "ln_1.bias", {embed}, t);
    b.tensor(p + "attn.c_attn.weight", {embed, qkv}, t);
    b.tensor(p + "attn.c_attn.bias", {qkv}, t);
    b.tensor(p + "attn.c_proj.weight", {embed, embed}, t);
    b.tensor(p + "attn.c_proj.bias", {embed}, t);
    b.tensor(p + "ln_2.weight", {embed}, t);
    b.tensor(p + "ln_2.bias", {embed}, t);
    b.tensor(p + "mlp.c_fc.weight", {embed, inner}, t);
    b.tensor(p + "mlp.c_fc.bias", {inner}, t);
    b.tensor(p + "mlp.c_proj.weight", {inner, embed}, t);
    b.tensor(p + "mlp.c_proj.bias", {embed}, t);
  }
  b.tensor("ln_f.weight", {embed}, t);
  b.tensor("ln_f.bias", {embed}, t);
  if (!tied) {
    b.tensor("lm_head.weight", {vocab, embed}, t);
  }
  if (b.failed()) {
    return std::nullopt;
  }
  return b.take();
}

// ---------------------------------------------------------------------------
// DeepSeek-V3 (deepseek-ai/DeepSeek-V3 modeling_deepseek.py and its
// README_WEIGHTS.md; names and dtypes as model.safetensors.index.json lists).

// The dims of a DeepSeek-V3 layer derived from the config, overflow-checked.
struct DeepseekDims {
  int64_t q_out = 0;
  int64_t kv_a_out = 0;
  int64_t kv_b_out = 0;
  int64_t o_in = 0;
  int64_t shared_intermediate = 0;
};

void deepseek_layer(Builder& b,
                    const ModelConfig& c,
                    const DeepseekDims& d,
                    bool moe,
                    const std::string& p) {
  const std::string a = p + "self_attn.";
  if (c.q_lora_rank > 0) {
    b.linear(a + "q_a_proj", c.q_lora_rank, c.hidden, c.attention_bias, true);
    b.vector(a + "q_a_layernorm.weight", c.q_lora_rank);
    b.linear(a + "q_b_proj", d.q_out, c.q_lora_rank, false, true);
  } else {
    b.linear(a + "q_proj", d.q_out, c.hidden, false, true);
  }
  b.linear(
      a + "kv_a_proj_with_mqa", d.kv_a_out, c.hidden, c.attention_bias, true);
  b.vector(a + "kv_a_layernorm.weight", c.kv_lora_rank);
  b.linear(a + "kv_b_proj", d.kv_b_out, c.kv_lora_rank, false, true);
  b.linear(a + "o_proj", c.hidden, d.o_in, c.attention_bias, true);

  const std::string m = p + "mlp.";
  if (!moe) {
    b.linear(m + "gate_proj", c.intermediate, c.hidden, false, true);
    b.linear(m + "up_proj", c.intermediate, c.hidden, false, true);
    b.linear(m + "down_proj", c.hidden, c.intermediate, false, true);
  } else {
    // DeepseekV3MoE: experts, the router (gate), then the shared experts.
    for (int64_t e = 0; e < c.experts; ++e) {
      const std::string x = fmt::format("{}experts.{}.", m, e);
      b.linear(x + "gate_proj", c.moe_intermediate, c.hidden, false, true);
      b.linear(x + "up_proj", c.moe_intermediate, c.hidden, false, true);
      b.linear(x + "down_proj", c.hidden, c.moe_intermediate, false, true);
    }
    b.linear(m + "gate", c.experts, c.hidden, false, false);
    if (c.correction_bias) {
      // float32 in the published checkpoint, whatever torch_dtype says.
      b.tensor(m + "gate.e_score_correction_bias", {c.experts}, DType::f32);
    }
    if (c.shared_experts > 0) {
      const std::string s = m + "shared_experts.";
      b.linear(s + "gate_proj", d.shared_intermediate, c.hidden, false, true);
      b.linear(s + "up_proj", d.shared_intermediate, c.hidden, false, true);
      b.linear(s + "down_proj", c.hidden, d.shared_intermediate, false, true);
    }
  }
  b.vector(p + "input_layernorm.weight", c.hidden);
  b.vector(p + "post_attention_layernorm.weight", c.hidden);
}

std::optional<std::vector<ModelTensor>> deepseek_v3(Builder& b,
                                                    const ModelConfig& c) {
  DeepseekDims d;
  const int64_t qk_head = b.add(c.qk_nope, c.qk_rope, "qk_rope_head_dim");
  d.q_out = b.mul(c.heads, qk_head, "num_attention_heads");
  d.kv_a_out = b.add(c.kv_lora_rank, c.qk_rope, "kv_lora_rank");
  d.kv_b_out = b.mul(
      c.heads, b.add(c.qk_nope, c.v_head, "v_head_dim"), "num_attention_heads");
  d.o_in = b.mul(c.heads, c.v_head, "num_attention_heads");
  d.shared_intermediate =
      b.mul(c.moe_intermediate, c.shared_experts, "n_shared_experts");
  const int64_t eh_in = b.mul(2, c.hidden, "hidden_size");
  const int64_t per_layer =
      b.add(b.mul(c.experts, 6, "n_routed_experts"), 40, "n_routed_experts");
  const int64_t all_layers =
      b.add(c.layers, c.mtp_layers, "num_nextn_predict_layers");
  if (b.failed()
      || !b.room_for(
          all_layers, per_layer, "num_hidden_layers", "n_routed_experts")) {
    return std::nullopt;
  }

  const MoeLayers moe(c);
  b.tensor("model.embed_tokens.weight", {c.vocab, c.hidden}, b.dtype());
  for (int64_t i = 0; i < all_layers; ++i) {
    const bool mtp = i >= c.layers;
    const std::string p = fmt::format("model.layers.{}.", i);
    if (mtp) {
      // The MTP module (README_WEIGHTS.md): its own copies of the embedding
      // and the head, two norms and the projection of [e; h].
      b.tensor(p + "embed_tokens.weight", {c.vocab, c.hidden}, b.dtype());
      b.vector(p + "enorm.weight", c.hidden);
      b.vector(p + "hnorm.weight", c.hidden);
      b.linear(p + "eh_proj", c.hidden, eh_in, false, false);
    }
    deepseek_layer(b, c, d, moe(i), p);
    if (mtp) {
      b.vector(p + "shared_head.norm.weight", c.hidden);
      b.tensor(p + "shared_head.head.weight", {c.vocab, c.hidden}, b.dtype());
    }
  }
  return finish_decoder(b, c);
}

// The head of a supported architecture's name: what follows the model name.
std::string_view head_of(std::string_view architecture) {
  for (std::string_view head : {"ForCausalLM", "LMHeadModel"}) {
    if (architecture.ends_with(head)) {
      return head;
    }
  }
  return {};
}

}  // namespace

std::string_view to_string(MlpKind kind) {
  switch (kind) {
    case MlpKind::gated:
      return "gated";
    case MlpKind::plain:
      return "plain";
  }
  return "?";
}

std::string_view to_string(NormKind kind) {
  switch (kind) {
    case NormKind::layer_norm:
      return "layer_norm";
    case NormKind::rms_norm:
      return "rms_norm";
  }
  return "?";
}

bool is_moe_layer(const ModelConfig& config, int64_t index) {
  return MoeLayers(config)(index);
}

std::optional<LayerStructure> layer_structure(const ModelConfig& config,
                                              Diagnostics& diags) {
  const ModelConfig& c = config;
  const ArchitectureInfo& info = architecture_info(c.architecture);
  const bool gpt2 = info.family == ModelFamily::gpt2;
  auto fail = [&](std::string code, std::string message, std::string_view key) {
    diags.error(std::move(code),
                std::move(message),
                Location::at(c.source, json_pointer_child("", key)));
    return std::nullopt;
  };
  const std::string_view layers_key = gpt2 ? "n_layer" : "num_hidden_layers";
  std::optional<int64_t> all_layers = checked_add(c.layers, c.mtp_layers);
  if (!all_layers || *all_layers > k_max_model_tensors) {
    return fail("model.too-many-tensors",
                fmt::format("the model would have more than {} layers",
                            k_max_model_tensors),
                layers_key);
  }
  LayerStructure s;
  s.dense_intermediate = c.intermediate;
  if (gpt2 && c.intermediate == 0) {
    std::optional<int64_t> inner = checked_mul(4, c.hidden);
    if (!inner) {
      return fail("model.overflow",
                  fmt::format("a dim computed from this value overflows "
                              "int64: 4 * {}",
                              c.hidden),
                  "n_embd");
    }
    s.dense_intermediate = *inner;
  }
  const MoeLayers moe(c);
  s.moe.resize(to_size(c.layers));
  for (int64_t i = 0; i < c.layers; ++i) {
    const bool sparse = moe(i);
    s.moe[to_size(i)] = sparse;
    ++(sparse ? s.moe_layers : s.dense_layers);
  }
  s.mtp_layers = info.family == ModelFamily::deepseek_v3 ? c.mtp_layers : 0;
  s.mtp_moe = s.mtp_layers > 0 && moe(c.layers);
  // Without experts every layer is dense, whatever the block.
  const MoeBlock block = c.experts > 0 ? info.moe : MoeBlock::none;
  if (block != MoeBlock::none) {
    s.routed_experts = c.experts;
    s.experts_per_token = c.experts_per_token;
  }
  switch (block) {
    case MoeBlock::none:
      break;
    case MoeBlock::mixtral:
      // Mixtral's experts are intermediate_size wide.
      s.routed_intermediate = c.intermediate;
      break;
    case MoeBlock::qwen2_moe:
      s.routed_intermediate = c.moe_intermediate;
      s.shared_intermediate = c.shared_intermediate;
      s.shared_expert_gate = true;
      break;
    case MoeBlock::deepseek_v3: {
      s.routed_intermediate = c.moe_intermediate;
      std::optional<int64_t> shared =
          checked_mul(c.moe_intermediate, c.shared_experts);
      if (!shared) {
        return fail("model.overflow",
                    fmt::format("a dim computed from this value overflows "
                                "int64: {} * {}",
                                c.moe_intermediate,
                                c.shared_experts),
                    "n_shared_experts");
      }
      s.shared_intermediate = *shared;
      break;
    }
  }
  return s;
}

std::span<const ArchitectureInfo> architectures() {
  return k_architectures;
}

const ArchitectureInfo& architecture_info(Architecture architecture) {
  const auto k = static_cast<size_t>(architecture);
  assert(k < k_architectures.size());
  return k_architectures[k];
}

std::string_view to_string(Architecture architecture) {
  return architecture_info(architecture).name;
}

std::optional<Architecture> find_architecture(std::string_view name) {
  for (const ArchitectureInfo& row : k_architectures) {
    if (row.name == name) {
      return row.architecture;
    }
  }
  return std::nullopt;
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  out.reserve(k_architectures.size());
  for (const ArchitectureInfo& row : k_architectures) {
    out.emplace_back(row.name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string misspelt_architecture(std::string_view name) {
  const std::string lower = to_lower(name);
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& architecture : supported_architectures()) {
    const std::string head = to_lower(head_of(architecture));
    const std::string model =
        to_lower(std::string_view(architecture)
                     .substr(0, architecture.size() - head.size()));
    if (head.empty() || !lower.starts_with(model)) {
      continue;
    }
    // The rest must start where a head starts: "Gemma3ForCausalLM" is not
    // "Gemma" + a misspelt "ForCausalLM".
    const std::string_view rest = std::string_view(lower).substr(model.size());
    if (rest.empty() || rest.front() != head.front()) {
      continue;
    }
    constexpr size_t k_max_edits = 3;
    const size_t distance = edit_distance(rest, head, k_max_edits);
    if (distance <= k_max_edits && distance < best_distance) {
      best_distance = distance;
      best = architecture;
    }
  }
  return best;
}

std::optional<std::vector<ModelTensor>> checkpoint_tensors(
    const ModelConfig& config, Diagnostics& diags) {
  Builder b(config, diags);
  switch (architecture_info(config.architecture).family) {
    case ModelFamily::llama:
      return llama_family(b, config);
    case ModelFamily::gpt2:
      return gpt2(b, config);
    case ModelFamily::deepseek_v3:
      return deepseek_v3(b, config);
  }
  return llama_family(b, config);
}

}  // namespace shardplan
