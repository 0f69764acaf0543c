// Hugging Face config.json -> the tensors of the published checkpoint, and the
// built-in model catalogue (configs/models/*.json, compiled in).
// docs/models.md lists, per architecture, the names, shapes and dtypes made
// here and where each rule comes from.

#include "embedded.hpp"

#include <shardplan/models.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>

namespace shardplan {

namespace {

using Json = nlohmann::json;

constexpr std::string_view k_llama = "LlamaForCausalLM";
constexpr std::string_view k_mistral = "MistralForCausalLM";
constexpr std::string_view k_mixtral = "MixtralForCausalLM";
constexpr std::string_view k_qwen2 = "Qwen2ForCausalLM";
constexpr std::string_view k_gemma = "GemmaForCausalLM";
constexpr std::string_view k_gemma2 = "Gemma2ForCausalLM";
constexpr std::string_view k_gpt2 = "GPT2LMHeadModel";
constexpr std::string_view k_deepseek_v3 = "DeepseekV3ForCausalLM";

constexpr std::string_view k_architectures[] = {k_deepseek_v3,
                                                k_gpt2,
                                                k_gemma2,
                                                k_gemma,
                                                k_llama,
                                                k_mistral,
                                                k_mixtral,
                                                k_qwen2};

std::string type_words(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::number_float:
      return "a fractional number";
    default:
      return "a number";
  }
}

// Reads the config and collects tensors. The first problem is reported and
// makes the builder fail; later reads return placeholders and report nothing,
// so one input gives one diagnostic (STYLE 2.4).
class Builder {
 public:
  Builder(const Json& root, std::string_view source, Diagnostics& diags)
      : m_root(root), m_source(source), m_diags(diags) {}

  bool failed() const { return m_failed; }

  void fail(std::string code,
            std::string message,
            std::string pointer,
            std::string hint = {},
            std::optional<std::string> tensor = {}) {
    if (m_failed) {
      return;
    }
    m_failed = true;
    Diagnostic& d =
        m_diags.error(std::move(code),
                      std::move(message),
                      Location::at(std::string(m_source), std::move(pointer)));
    d.hint = std::move(hint);
    d.tensor = std::move(tensor);
  }

  static std::string pointer(std::string_view key) {
    return json_pointer_child("", key);
  }

  // The value at `key`, or nullptr when absent or null.
  const Json* find(std::string_view key) const {
    auto it = m_root.find(key);
    if (it == m_root.end() || it->is_null()) {
      return nullptr;
    }
    return &*it;
  }

  // An integer of at least `min` at `key`; required.
  int64_t integer(std::string_view key, int64_t min = 1) {
    const Json* value = find(key);
    if (value == nullptr) {
      if (!m_failed) {
        const bool is_null = m_root.contains(key);
        fail("model.missing-key",
             is_null ? fmt::format(
                 "{} is null, expected an integer >= {}", quote(key), min)
                     : fmt::format("missing key {}", quote(key)),
             pointer(key));
      }
      return min;
    }
    return read_integer(*value, key, min);
  }

  // An integer of at least `min` at `key`; `fallback` when absent or null.
  int64_t integer_or(std::string_view key, int64_t fallback, int64_t min = 1) {
    const Json* value = find(key);
    return value == nullptr ? fallback : read_integer(*value, key, min);
  }

  bool flag_or(std::string_view key, bool fallback) {
    const Json* value = find(key);
    if (value == nullptr) {
      return fallback;
    }
    if (!value->is_boolean()) {
      fail("model.bad-value",
           fmt::format("expected true or false, got {}", type_words(*value)),
           pointer(key));
      return fallback;
    }
    return value->get<bool>();
  }

  std::string string_or(std::string_view key, std::string fallback) {
    const Json* value = find(key);
    if (value == nullptr) {
      return fallback;
    }
    if (!value->is_string()) {
      fail("model.bad-value",
           fmt::format("expected a string, got {}", type_words(*value)),
           pointer(key));
      return fallback;
    }
    return value->get<std::string>();
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
           pointer(key));
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
           pointer(key));
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
    if (quantized && m_fp8_block) {
      tensor(prefix + ".weight", {out, in}, DType::f8_e4m3);
      tensor(prefix + ".weight_scale_inv",
             {ceil_div(out, m_fp8_block->first),
              ceil_div(in, m_fp8_block->second)},
             DType::f32);
    } else {
      tensor(prefix + ".weight", {out, in}, m_dtype);
    }
    if (bias) {
      tensor(prefix + ".bias", {out}, m_dtype);
    }
  }

  void vector(const std::string& name, int64_t size) {
    tensor(name, {size}, m_dtype);
  }

  // torch_dtype (or its newer spelling dtype); `fallback` when absent.
  void read_dtype(DType fallback) {
    m_dtype = fallback;
    for (std::string_view key : {"torch_dtype", "dtype"}) {
      const Json* value = find(key);
      if (value == nullptr) {
        continue;
      }
      if (!value->is_string()) {
        fail("model.bad-value",
             fmt::format("expected a dtype name, got {}", type_words(*value)),
             pointer(key));
        return;
      }
      const std::string text = value->get<std::string>();
      std::optional<DType> dtype = parse_dtype(text);
      if (!dtype) {
        fail("model.unknown-dtype",
             fmt::format("unknown dtype {}", quote(text)),
             pointer(key),
             fmt::format("expected one of {}", fmt::join(dtype_names(), ", ")));
        return;
      }
      m_dtype = *dtype;
      return;
    }
  }

  // quantization_config: only block-wise FP8 (DeepSeek-V3's format) changes
  // the tensors, and only it is accepted.
  void read_quantization() {
    const Json* config = find("quantization_config");
    if (config == nullptr) {
      return;
    }
    const std::string base = "/quantization_config";
    if (!config->is_object()) {
      fail("model.bad-value",
           fmt::format("expected an object, got {}", type_words(*config)),
           base);
      return;
    }
    auto method = config->find("quant_method");
    if (method == config->end() || !method->is_string()
        || method->get<std::string>() != "fp8") {
      fail("model.unsupported-quantization",
           method == config->end()
               ? std::string("missing key \"quant_method\"")
               : fmt::format("unsupported quant_method {}, expected \"fp8\"",
                             method->is_string()
                                 ? quote(method->get<std::string>())
                                 : type_words(*method)),
           method == config->end() ? base : base + "/quant_method");
      return;
    }
    if (auto fmt_it = config->find("fmt");
        fmt_it != config->end()
        && !(fmt_it->is_string() && fmt_it->get<std::string>() == "e4m3")) {
      fail("model.unsupported-quantization",
           "unsupported fp8 format, expected \"e4m3\"",
           base + "/fmt");
      return;
    }
    auto block = config->find("weight_block_size");
    const std::string block_pointer = base + "/weight_block_size";
    if (block == config->end()) {
      fail("model.unsupported-quantization",
           "fp8 without \"weight_block_size\" is not supported (only "
           "block-wise scales)",
           base);
      return;
    }
    if (!block->is_array() || block->size() != 2) {
      fail("model.bad-value",
           "expected two block sizes [out, in]",
           block_pointer);
      return;
    }
    std::pair<int64_t, int64_t> sizes{1, 1};
    for (size_t i = 0; i < 2; ++i) {
      const Json& v = (*block)[i];
      const std::string p = block_pointer + "/" + std::to_string(i);
      if (!v.is_number_integer()
          || (v.is_number_unsigned()
              && v.get<uint64_t>() > static_cast<uint64_t>(
                     std::numeric_limits<int64_t>::max()))
          || v.get<int64_t>() < 1) {
        fail("model.bad-value",
             fmt::format("expected an integer >= 1, got {}",
                         v.is_number_integer() ? v.dump() : type_words(v)),
             p);
        return;
      }
      (i == 0 ? sizes.first : sizes.second) = v.get<int64_t>();
    }
    m_fp8_block = sizes;
  }

  DType dtype() const { return m_dtype; }
  std::vector<ModelTensor> take() { return std::move(m_tensors); }

 private:
  int64_t read_integer(const Json& value, std::string_view key, int64_t min) {
    if (m_failed) {
      return min;
    }
    if (!value.is_number_integer()) {
      fail("model.bad-value",
           fmt::format(
               "expected an integer >= {}, got {}", min, type_words(value)),
           pointer(key));
      return min;
    }
    if (value.is_number_unsigned()
        && value.get<uint64_t>()
               > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail("model.bad-value",
           fmt::format("{} is beyond int64", value.dump()),
           pointer(key));
      return min;
    }
    const int64_t v = value.get<int64_t>();
    if (v < min) {
      fail("model.bad-value",
           fmt::format("expected an integer >= {}, got {}", min, v),
           pointer(key));
      return min;
    }
    return v;
  }

  const Json& m_root;
  std::string_view m_source;
  Diagnostics& m_diags;
  bool m_failed = false;
  DType m_dtype = DType::bf16;
  std::optional<std::pair<int64_t, int64_t>> m_fp8_block;
  std::vector<ModelTensor> m_tensors;
  int64_t m_elements = 0;
  int64_t m_bytes = 0;
};

// ---------------------------------------------------------------------------
// Llama and its relatives: Mistral, Mixtral, Qwen2, Gemma, Gemma2
// (transformers/models/<arch>/modeling_<arch>.py; checkpoint names).

struct DecoderDims {
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

DecoderDims read_decoder_dims(Builder& b) {
  DecoderDims d;
  d.vocab = b.integer("vocab_size");
  d.hidden = b.integer("hidden_size");
  d.intermediate = b.integer("intermediate_size");
  d.layers = b.integer("num_hidden_layers", 0);
  d.heads = b.integer("num_attention_heads");
  d.kv_heads = b.integer_or("num_key_value_heads", d.heads);
  // head_dim defaults to hidden_size // num_attention_heads, as in the
  // configuration classes.
  d.head_dim = b.integer_or("head_dim", d.hidden / d.heads);
  if (!b.failed() && d.head_dim < 1) {
    b.fail("model.bad-value",
           fmt::format("hidden_size {} is smaller than num_attention_heads {}",
                       d.hidden,
                       d.heads),
           "/hidden_size");
  }
  return d;
}

std::optional<std::vector<ModelTensor>> llama_family(Builder& b,
                                                     std::string_view arch) {
  const bool gemma = arch == k_gemma || arch == k_gemma2;
  const bool qwen2 = arch == k_qwen2;
  const bool mixtral = arch == k_mixtral;
  b.read_dtype(DType::bf16);
  b.read_quantization();
  DecoderDims d = read_decoder_dims(b);
  // Gemma's configuration classes tie by default; the others do not.
  const bool tied = b.flag_or("tie_word_embeddings", gemma);
  // Llama and Gemma read attention_bias (q, k, v and o); Qwen2 has q/k/v
  // biases always and none on o; Mistral and Mixtral have none.
  const bool attention_bias =
      (arch == k_llama || gemma) && b.flag_or("attention_bias", false);
  const bool mlp_bias = arch == k_llama && b.flag_or("mlp_bias", false);
  int64_t experts = 0;
  if (mixtral) {
    experts = b.integer("num_local_experts");
  }
  const int64_t q_out = b.mul(d.heads, d.head_dim, "num_attention_heads");
  const int64_t kv_out = b.mul(d.kv_heads, d.head_dim, "num_key_value_heads");
  // At most 18 tensors besides the experts (weights, biases, norms).
  const int64_t per_layer =
      b.add(b.mul(experts, 3, "num_local_experts"), 18, "num_local_experts");
  if (b.failed()
      || !b.room_for(
          d.layers, per_layer, "num_hidden_layers", "num_local_experts")) {
    return std::nullopt;
  }

  b.tensor("model.embed_tokens.weight", {d.vocab, d.hidden}, b.dtype());
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    b.linear(
        p + "self_attn.q_proj", q_out, d.hidden, attention_bias || qwen2, true);
    b.linear(p + "self_attn.k_proj",
             kv_out,
             d.hidden,
             attention_bias || qwen2,
             true);
    b.linear(p + "self_attn.v_proj",
             kv_out,
             d.hidden,
             attention_bias || qwen2,
             true);
    b.linear(p + "self_attn.o_proj", d.hidden, q_out, attention_bias, true);
    if (mixtral) {
      // MixtralSparseMoeBlock: the router, then the experts (w1 gate,
      // w2 down, w3 up).
      b.linear(p + "block_sparse_moe.gate", experts, d.hidden, false, false);
      for (int64_t e = 0; e < experts; ++e) {
        const std::string x =
            fmt::format("{}block_sparse_moe.experts.{}.", p, e);
        b.linear(x + "w1", d.intermediate, d.hidden, false, true);
        b.linear(x + "w2", d.hidden, d.intermediate, false, true);
        b.linear(x + "w3", d.intermediate, d.hidden, false, true);
      }
    } else {
      b.linear(p + "mlp.gate_proj", d.intermediate, d.hidden, mlp_bias, true);
      b.linear(p + "mlp.up_proj", d.intermediate, d.hidden, mlp_bias, true);
      b.linear(p + "mlp.down_proj", d.hidden, d.intermediate, mlp_bias, true);
    }
    b.vector(p + "input_layernorm.weight", d.hidden);
    b.vector(p + "post_attention_layernorm.weight", d.hidden);
    if (arch == k_gemma2) {
      b.vector(p + "pre_feedforward_layernorm.weight", d.hidden);
      b.vector(p + "post_feedforward_layernorm.weight", d.hidden);
    }
  }
  b.vector("model.norm.weight", d.hidden);
  if (!tied) {
    b.tensor("lm_head.weight", {d.vocab, d.hidden}, b.dtype());
  }
  if (b.failed()) {
    return std::nullopt;
  }
  return b.take();
}

// ---------------------------------------------------------------------------
// GPT-2 (transformers/models/gpt2/modeling_gpt2.py). The published
// checkpoints name tensors without the "transformer." prefix, and Conv1D
// stores weights as [in, out].

std::optional<std::vector<ModelTensor>> gpt2(Builder& b) {
  // GPT-2's checkpoints predate torch_dtype and are float32.
  b.read_dtype(DType::f32);
  b.read_quantization();
  const int64_t vocab = b.integer("vocab_size");
  const int64_t embed = b.integer("n_embd");
  const int64_t layers = b.integer("n_layer", 0);
  const int64_t positions = b.integer("n_positions");
  b.integer("n_head");
  const int64_t inner = b.integer_or("n_inner", b.mul(4, embed, "n_embd"));
  const bool tied = b.flag_or("tie_word_embeddings", true);
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

struct DeepseekDims {
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t moe_intermediate = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t q_lora_rank = 0;  // 0: no low-rank query (q_proj)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope = 0;
  int64_t qk_rope = 0;
  int64_t v_head = 0;
  int64_t routed_experts = 0;  // 0: every layer dense
  int64_t shared_experts = 0;
  int64_t first_dense = 0;
  int64_t moe_freq = 1;
  int64_t mtp_layers = 0;
  bool attention_bias = false;
  bool correction_bias = true;
  // Derived, overflow-checked.
  int64_t q_out = 0;
  int64_t kv_a_out = 0;
  int64_t kv_b_out = 0;
  int64_t o_in = 0;
  int64_t shared_intermediate = 0;
};

void deepseek_layer(Builder& b,
                    const DeepseekDims& d,
                    int64_t index,
                    const std::string& p) {
  const std::string a = p + "self_attn.";
  if (d.q_lora_rank > 0) {
    b.linear(a + "q_a_proj", d.q_lora_rank, d.hidden, d.attention_bias, true);
    b.vector(a + "q_a_layernorm.weight", d.q_lora_rank);
    b.linear(a + "q_b_proj", d.q_out, d.q_lora_rank, false, true);
  } else {
    b.linear(a + "q_proj", d.q_out, d.hidden, false, true);
  }
  b.linear(
      a + "kv_a_proj_with_mqa", d.kv_a_out, d.hidden, d.attention_bias, true);
  b.vector(a + "kv_a_layernorm.weight", d.kv_lora_rank);
  b.linear(a + "kv_b_proj", d.kv_b_out, d.kv_lora_rank, false, true);
  b.linear(a + "o_proj", d.hidden, d.o_in, d.attention_bias, true);

  const std::string m = p + "mlp.";
  const bool moe =
      d.routed_experts > 0 && index >= d.first_dense && index % d.moe_freq == 0;
  if (!moe) {
    b.linear(m + "gate_proj", d.intermediate, d.hidden, false, true);
    b.linear(m + "up_proj", d.intermediate, d.hidden, false, true);
    b.linear(m + "down_proj", d.hidden, d.intermediate, false, true);
  } else {
    // DeepseekV3MoE: experts, the router (gate), then the shared experts.
    for (int64_t e = 0; e < d.routed_experts; ++e) {
      const std::string x = fmt::format("{}experts.{}.", m, e);
      b.linear(x + "gate_proj", d.moe_intermediate, d.hidden, false, true);
      b.linear(x + "up_proj", d.moe_intermediate, d.hidden, false, true);
      b.linear(x + "down_proj", d.hidden, d.moe_intermediate, false, true);
    }
    b.linear(m + "gate", d.routed_experts, d.hidden, false, false);
    if (d.correction_bias) {
      // float32 in the published checkpoint, whatever torch_dtype says.
      b.tensor(
          m + "gate.e_score_correction_bias", {d.routed_experts}, DType::f32);
    }
    if (d.shared_experts > 0) {
      const std::string s = m + "shared_experts.";
      b.linear(s + "gate_proj", d.shared_intermediate, d.hidden, false, true);
      b.linear(s + "up_proj", d.shared_intermediate, d.hidden, false, true);
      b.linear(s + "down_proj", d.hidden, d.shared_intermediate, false, true);
    }
  }
  b.vector(p + "input_layernorm.weight", d.hidden);
  b.vector(p + "post_attention_layernorm.weight", d.hidden);
}

std::optional<std::vector<ModelTensor>> deepseek_v3(Builder& b) {
  b.read_dtype(DType::bf16);
  b.read_quantization();
  DeepseekDims d;
  d.vocab = b.integer("vocab_size");
  d.hidden = b.integer("hidden_size");
  d.intermediate = b.integer("intermediate_size");
  d.layers = b.integer("num_hidden_layers", 0);
  d.heads = b.integer("num_attention_heads");
  d.q_lora_rank = b.integer_or("q_lora_rank", 0);
  d.kv_lora_rank = b.integer("kv_lora_rank");
  d.qk_nope = b.integer("qk_nope_head_dim", 0);
  d.qk_rope = b.integer("qk_rope_head_dim", 0);
  d.v_head = b.integer("v_head_dim");
  d.routed_experts = b.integer_or("n_routed_experts", 0, 0);
  if (d.routed_experts > 0) {
    d.moe_intermediate = b.integer("moe_intermediate_size");
  }
  d.shared_experts = b.integer_or("n_shared_experts", 0, 0);
  d.first_dense = b.integer_or("first_k_dense_replace", 0, 0);
  d.moe_freq = b.integer_or("moe_layer_freq", 1);
  d.mtp_layers = b.integer_or("num_nextn_predict_layers", 0, 0);
  d.attention_bias = b.flag_or("attention_bias", false);
  // The router's correction bias exists for the aux-loss-free top-k method.
  d.correction_bias = b.string_or("topk_method", "noaux_tc") == "noaux_tc";
  const bool tied = b.flag_or("tie_word_embeddings", false);

  const int64_t qk_head = b.add(d.qk_nope, d.qk_rope, "qk_rope_head_dim");
  d.q_out = b.mul(d.heads, qk_head, "num_attention_heads");
  d.kv_a_out = b.add(d.kv_lora_rank, d.qk_rope, "kv_lora_rank");
  d.kv_b_out = b.mul(
      d.heads, b.add(d.qk_nope, d.v_head, "v_head_dim"), "num_attention_heads");
  d.o_in = b.mul(d.heads, d.v_head, "num_attention_heads");
  d.shared_intermediate =
      b.mul(d.moe_intermediate, d.shared_experts, "n_shared_experts");
  const int64_t eh_in = b.mul(2, d.hidden, "hidden_size");
  const int64_t per_layer = b.add(
      b.mul(d.routed_experts, 6, "n_routed_experts"), 40, "n_routed_experts");
  const int64_t all_layers =
      b.add(d.layers, d.mtp_layers, "num_nextn_predict_layers");
  if (b.failed()
      || !b.room_for(
          all_layers, per_layer, "num_hidden_layers", "n_routed_experts")) {
    return std::nullopt;
  }

  b.tensor("model.embed_tokens.weight", {d.vocab, d.hidden}, b.dtype());
  for (int64_t i = 0; i < all_layers; ++i) {
    const bool mtp = i >= d.layers;
    const std::string p = fmt::format("model.layers.{}.", i);
    if (mtp) {
      // The MTP module (README_WEIGHTS.md): its own copies of the embedding
      // and the head, two norms and the projection of [e; h].
      b.tensor(p + "embed_tokens.weight", {d.vocab, d.hidden}, b.dtype());
      b.vector(p + "enorm.weight", d.hidden);
      b.vector(p + "hnorm.weight", d.hidden);
      b.linear(p + "eh_proj", d.hidden, eh_in, false, false);
    }
    deepseek_layer(b, d, i, p);
    if (mtp) {
      b.vector(p + "shared_head.norm.weight", d.hidden);
      b.tensor(p + "shared_head.head.weight", {d.vocab, d.hidden}, b.dtype());
    }
  }
  b.vector("model.norm.weight", d.hidden);
  if (!tied) {
    b.tensor("lm_head.weight", {d.vocab, d.hidden}, b.dtype());
  }
  if (b.failed()) {
    return std::nullopt;
  }
  return b.take();
}

// ---------------------------------------------------------------------------

std::optional<Json> parse_config(std::string_view text,
                                 std::string_view source,
                                 Diagnostics& diags) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    // e.byte is 1-based: the byte at which the parser stopped.
    const size_t offset = e.byte == 0 ? 0 : std::min(e.byte - 1, text.size());
    std::string_view what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: X"
    if (size_t colon = what.find(": "); colon != std::string_view::npos) {
      what.remove_prefix(colon + 2);
    }
    constexpr std::string_view k_prefix = "syntax error while parsing value - ";
    if (what.starts_with(k_prefix)) {
      what.remove_prefix(k_prefix.size());
    }
    std::string message(what);
    if (size_t last = message.find("; last read: ");
        last != std::string::npos) {
      message.erase(last);
    }
    if (!message.empty()) {
      message[0] = static_cast<char>(
          std::tolower(static_cast<unsigned char>(message[0])));
    }
    diags.error("model.syntax",
                "invalid JSON: " + message,
                location_in_text(std::string(source), text, offset));
  } catch (const Json::exception& e) {
    diags.error("model.syntax",
                fmt::format("invalid JSON: {}", e.what()),
                Location::of(std::string(source)));
  }
  return std::nullopt;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const embedded::EmbeddedFile& file : embedded::model_files()) {
    std::string_view stem = file.name;
    stem.remove_suffix(std::string_view(".json").size());
    names.emplace_back(stem);
  }
  return names;
}

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out(std::begin(k_architectures),
                               std::end(k_architectures));
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::vector<ModelTensor>> tensors_from_hf_config(
    std::string_view config_json, std::string_view source, Diagnostics& diags) {
  std::optional<Json> root = parse_config(config_json, source, diags);
  if (!root) {
    return std::nullopt;
  }
  if (!root->is_object()) {
    diags.error(
        "model.not-object",
        fmt::format("expected a config.json object, got {}", type_words(*root)),
        Location::of(std::string(source)));
    return std::nullopt;
  }
  Builder b(*root, source, diags);
  auto it = root->find("architectures");
  if (it == root->end() || it->is_null()) {
    b.fail("model.missing-key",
           "missing key \"architectures\"",
           "/architectures",
           fmt::format("supported: {}",
                       fmt::join(supported_architectures(), ", ")));
    return std::nullopt;
  }
  if (!it->is_array() || it->empty() || !(*it)[0].is_string()) {
    b.fail("model.bad-value",
           fmt::format("expected a list of architecture names, got {}",
                       it->is_array() && it->empty() ? "an empty list"
                       : it->is_array() ? type_words((*it)[0]) + " entry"
                                        : type_words(*it)),
           "/architectures");
    return std::nullopt;
  }
  const std::string arch = (*it)[0].get<std::string>();
  const std::vector<std::string> supported = supported_architectures();
  if (std::find(supported.begin(), supported.end(), arch) == supported.end()) {
    std::string near = closest_match(arch, supported);
    b.fail("model.unknown-architecture",
           fmt::format("unknown architecture {}; supported: {}",
                       quote(arch),
                       fmt::join(supported, ", ")),
           "/architectures/0",
           near.empty() ? "" : fmt::format("did you mean {}?", quote(near)));
    return std::nullopt;
  }
  if (arch == k_gpt2) {
    return gpt2(b);
  }
  if (arch == k_deepseek_v3) {
    return deepseek_v3(b);
  }
  return llama_family(b, arch);
}

std::optional<std::string_view> builtin_model_config(std::string_view name) {
  for (const embedded::EmbeddedFile& file : embedded::model_files()) {
    std::string_view stem = file.name;
    stem.remove_suffix(std::string_view(".json").size());
    if (stem == name) {
      return file.text;
    }
  }
  return std::nullopt;
}

std::vector<BuiltinModel> builtin_models() {
  // The catalogue files are ours: one that does not load is a bug, caught by
  // the tests; it throws (exit 3) and never reaches a user as an input error.
  static const std::vector<BuiltinModel> all = [] {
    std::vector<BuiltinModel> out;
    for (const std::string& name : model_names()) {
      std::string_view text = *builtin_model_config(name);
      Diagnostics diags;
      std::optional<std::vector<ModelTensor>> tensors =
          tensors_from_hf_config(text, name + ".json", diags);
      if (!tensors) {
        throw std::logic_error(
            "configs/models/" + name + ".json does not load: "
            + (diags.items().empty() ? std::string("?")
                                     : render(diags.items().front())));
      }
      BuiltinModel model;
      model.name = name;
      model.architecture =
          Json::parse(text).at("architectures").at(0).get<std::string>();
      model.tensors = static_cast<int64_t>(tensors->size());
      for (const ModelTensor& t : *tensors) {
        model.parameters += *checked_product(t.shape);
      }
      out.push_back(std::move(model));
    }
    return out;
  }();
  return all;
}

std::optional<std::vector<ModelTensor>> tensors_for_builtin_model(
    std::string_view name, std::string_view source, Diagnostics& diags) {
  std::optional<std::string_view> text = builtin_model_config(name);
  if (!text) {
    const std::vector<std::string> names = model_names();
    std::string near = closest_match(name, names);
    Diagnostic& d =
        diags.error("model.unknown-model",
                    fmt::format("unknown model {}; built-in models: {}",
                                quote(name),
                                fmt::join(names, ", ")),
                    Location::of(std::string(source)));
    if (!near.empty()) {
      d.hint = fmt::format("did you mean {}?", quote(near));
    }
    return std::nullopt;
  }
  return tensors_from_hf_config(*text, fmt::format("{}.json", name), diags);
}

}  // namespace shardplan
