// The model of a MaxText config (docs/maxtext.md, "The model"): the dims
// MaxText's pyconfig merges from base.yml, models/<model_name>.yml and the
// overrides, scaled by global_parameter_scale (types.py's
// get_individual_scales), as the Hugging Face config.json of the same
// tensors, read by read_hf_config.

#include "io/internal.hpp"

#include <shardplan/io.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <string>
#include <string_view>

namespace shardplan::io_detail {

// MaxText's model names whose tensors a built-in model has: the same dims,
// vocab and decoder (configs/models/; MaxText's configs/models/<name>.yml
// at e591f30c compared key by key). Gemma's MaxText vocab (256128) is
// padded past the checkpoint's 256000, so no Gemma stands in.
struct StandIn {
  std::string_view maxtext;
  std::string_view builtin;
};
constexpr std::array<StandIn, 12> k_stand_ins{{
    {"deepseek3-671b", "deepseek-v3"},
    {"llama2-70b", "llama-2-70b"},
    {"llama3-405b", "llama-3.1-405b"},
    {"llama3-70b", "llama-3-70b"},
    {"llama3-8b", "llama-3-8b"},
    {"llama3.1-405b", "llama-3.1-405b"},
    {"llama3.1-70b", "llama-3-70b"},
    {"llama3.1-8b", "llama-3-8b"},
    {"llama3.3-70b", "llama-3-70b"},
    {"mistral-7b", "mistral-7b-v0.1"},
    {"mixtral-8x7b", "mixtral-8x7b-v0.1"},
    {"qwen2.5-7b", "qwen2.5-7b"},
}};

namespace {

// decoder_block -> the Hugging Face architecture of the same tensors.
struct Block {
  std::string_view name;
  std::string_view architecture;
};
constexpr std::array<Block, 7> k_blocks{{
    {"llama2", "LlamaForCausalLM"},
    {"mistral", "MistralForCausalLM"},
    {"mixtral", "MixtralForCausalLM"},
    {"deepseek", "DeepseekV3ForCausalLM"},
    {"gemma", "GemmaForCausalLM"},
    {"gemma2", "Gemma2ForCausalLM"},
    {"qwen2", "Qwen2ForCausalLM"},
}};

// types.py's get_individual_scales: {emb, heads and mlp, layers} exponents.
struct Scales {
  int emb = 0;
  int width = 0;
  int layers = 0;
};

Scales individual_scales(int64_t scale) {
  int log2 = 0;
  while ((int64_t{1} << (log2 + 1)) <= scale) {
    ++log2;
  }
  const int base = log2 / 3;
  const int rem = log2 % 3;
  return Scales{base + (rem > 1 ? 1 : 0), base + (rem > 0 ? 1 : 0), base};
}

// `value` x 2^`exponent`, or nullopt past int64's range.
std::optional<int64_t> scaled(int64_t value, int exponent) {
  if (exponent >= 62 || value > (INT64_MAX >> exponent)) {
    return std::nullopt;
  }
  return value << exponent;
}

}  // namespace

std::string maxtext_stand_in(std::string_view model_name) {
  for (const StandIn& s : k_stand_ins) {
    if (s.maxtext == model_name) {
      return std::string(s.builtin);
    }
  }
  return {};
}

std::string maxtext_architecture(std::string_view decoder_block) {
  for (const Block& b : k_blocks) {
    if (b.name == decoder_block) {
      return std::string(b.architecture);
    }
  }
  return {};
}

std::vector<std::string> maxtext_decoder_blocks() {
  std::vector<std::string> out;
  out.reserve(k_blocks.size());
  for (const Block& b : k_blocks) {
    out.emplace_back(b.name);
  }
  return out;
}

bool valid_parameter_scale(int64_t scale) {
  return scale >= 1 && (scale & (scale - 1)) == 0;
}

std::optional<std::string> maxtext_hf_config(const MaxTextModelKeys& k,
                                             std::string& failure) {
  const std::string arch = maxtext_architecture(k.decoder_block.value);
  if (k.mlp_activations.value != 2) {
    failure = fmt::format(
        "mlp_activations with {} entr{} is {} MLP; shardplan builds "
        "decoder_block {} with a gated one (two entries, base.yml's "
        "[\"silu\", \"linear\"])",
        k.mlp_activations.value,
        k.mlp_activations.value == 1 ? "y" : "ies",
        k.mlp_activations.value == 1 ? "a plain" : "not a gated",
        k.decoder_block.value);
    return std::nullopt;
  }
  const Scales s = individual_scales(k.scale.value);
  const std::optional<int64_t> emb = scaled(k.emb.value, s.emb);
  const std::optional<int64_t> heads = scaled(k.heads.value, s.width);
  const std::optional<int64_t> kv_heads = scaled(k.kv_heads.value, s.width);
  const std::optional<int64_t> mlp = scaled(k.mlp.value, s.width);
  const std::optional<int64_t> moe_mlp =
      k.moe_mlp.value > 0 ? scaled(k.moe_mlp.value, s.width) : int64_t{0};
  std::optional<int64_t> layers = scaled(k.layers.value, s.layers);
  if (!emb || !heads || !kv_heads || !mlp || !moe_mlp || !layers) {
    failure = fmt::format(
        "global_parameter_scale {} takes the dims past 64-bit integers",
        k.scale.value);
    return std::nullopt;
  }
  nlohmann::json j;
  j["architectures"] = {arch};
  j["torch_dtype"] = "bfloat16";
  j["vocab_size"] = k.vocab.value;
  j["hidden_size"] = *emb;
  j["num_attention_heads"] = *heads;
  j["num_key_value_heads"] = *kv_heads;
  j["head_dim"] = k.head_dim.value;
  j["intermediate_size"] = *mlp;
  j["tie_word_embeddings"] = k.tied.value;
  const bool moe = k.experts.value > 1;
  if (arch == "MixtralForCausalLM") {
    // MaxText's mixtral experts are base_moe_mlp_dim wide (base_mlp_dim
    // when unset); Mixtral's intermediate_size is the experts' width.
    j["intermediate_size"] = *moe_mlp > 0 ? *moe_mlp : *mlp;
    j["num_local_experts"] = k.experts.value;
    j["num_experts_per_tok"] = k.experts_per_token.value;
  } else if (arch == "DeepseekV3ForCausalLM") {
    j["num_key_value_heads"] = *heads;
    j["q_lora_rank"] = k.q_lora.value;
    j["kv_lora_rank"] = k.kv_lora.value;
    j["qk_nope_head_dim"] = k.qk_nope.value;
    j["qk_rope_head_dim"] = k.qk_rope.value;
    j["v_head_dim"] = k.v_head.value;
    j["n_routed_experts"] = moe ? k.experts.value : 0;
    j["num_experts_per_tok"] = k.experts_per_token.value;
    j["moe_intermediate_size"] = *moe_mlp > 0 ? *moe_mlp : *mlp;
    j["n_shared_experts"] = k.shared_experts.value;
    j["first_k_dense_replace"] = k.first_dense.value;
    j["moe_layer_freq"] = 1;
    j["num_nextn_predict_layers"] = 0;
    j["topk_method"] = k.routed_bias.value ? "noaux_tc" : "greedy";
  } else if (moe) {
    failure = fmt::format(
        "decoder_block {} with num_experts {} is not a model shardplan "
        "builds (routed experts: mixtral or deepseek)",
        k.decoder_block.value,
        k.experts.value);
    return std::nullopt;
  }
  if (arch == "LlamaForCausalLM" || arch == "GemmaForCausalLM"
      || arch == "Gemma2ForCausalLM") {
    j["attention_bias"] = k.attention_bias.value;
  }
  if (arch == "Gemma2ForCausalLM") {
    // MaxText's gemma2 layer is a local and a global attention layer
    // (configs/models/gemma2-*.yml: "half of the real number of layers").
    j["num_hidden_layers"] = *layers * 2;
    j["attn_logit_softcapping"] = k.attention_softcap.value;
    j["final_logit_softcapping"] = k.final_softcap.value;
  } else {
    j["num_hidden_layers"] = *layers;
  }
  return j.dump(2);
}

}  // namespace shardplan::io_detail

namespace shardplan {

std::string maxtext_model_name(std::string_view builtin) {
  for (const io_detail::StandIn& s : io_detail::k_stand_ins) {
    if (s.builtin == builtin) {
      return std::string(s.maxtext);
    }
  }
  return {};
}

}  // namespace shardplan
