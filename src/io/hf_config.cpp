// Hugging Face config.json files (docs/models.md): read into a ModelConfig
// with the located-JSON toolkit (io/json.hpp), then made into the tensors of
// the checkpoint (models.hpp, checkpoint_tensors); the built-in models
// (configs/models/*.json, compiled in) are such configs.

#include "embedded.hpp"
#include "io/json.hpp"

#include <shardplan/io.hpp>
#include <shardplan/models.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardplan {

namespace {

using io_detail::DomReader;
using io_detail::Json;

// Reads the keys each architecture's configuration class has, in the order
// the checkpoint's tensors need them. The first problem is reported and
// makes the reader fail; later reads give placeholders and report nothing,
// so one input gives one diagnostic (STYLE 2.4).
class HfConfigReader : public DomReader {
 public:
  HfConfigReader(std::string_view text,
                 std::string_view source,
                 Diagnostics& diags)
      : DomReader(text, source, "model", diags) {}

  std::optional<ModelConfig> run() {
    std::optional<Json> doc = parse();
    if (!doc) {
      return std::nullopt;
    }
    m_root = &*doc;
    ModelConfig c;
    c.source = m_source;
    if (!read_architecture(c.architecture)) {
      return std::nullopt;
    }
    switch (architecture_info(c.architecture).family) {
      case ModelFamily::llama:
        read_llama_family(c);
        break;
      case ModelFamily::gpt2:
        read_gpt2(c);
        break;
      case ModelFamily::deepseek_v3:
        read_deepseek_v3(c);
        break;
    }
    if (m_failed) {
      return std::nullopt;
    }
    return c;
  }

 private:
  static std::string pointer(std::string_view key) {
    return json_pointer_child("", key);
  }

  // Reports through `report` (a DomReader call returning false) unless a
  // problem was reported already.
  template <typename Report>
  void once(const Report& report) {
    if (!m_failed) {
      report();
      m_failed = true;
    }
  }

  // The value at `key`, or nullptr when absent or null.
  const Json* find(std::string_view key) const {
    auto it = m_root->find(key);
    if (it == m_root->end() || it->is_null()) {
      return nullptr;
    }
    return &*it;
  }

  bool read_architecture(Architecture& out) {
    const std::string supported = fmt::format(
        "supported: {}", fmt::join(supported_architectures(), ", "));
    const Json* list = find("architectures");
    if (list == nullptr) {
      return missing_key(
          "/architectures", "missing key \"architectures\"", supported);
    }
    constexpr std::string_view k_expected = "a list of architecture names";
    if (!list->is_array()) {
      return type_error(*list, "/architectures", k_expected);
    }
    if (list->empty()) {
      return bad_value("/architectures",
                       io_detail::expected_got(k_expected, "an empty list"));
    }
    const std::string* arch =
        get_string((*list)[0], "/architectures/0", "an architecture name");
    if (arch == nullptr) {
      return false;
    }
    const std::optional<Architecture> known = find_architecture(*arch);
    if (!known) {
      const std::vector<std::string> all = supported_architectures();
      // No edit-distance guess: a name near a supported one is often
      // another architecture (misspelt_architecture).
      std::string near = misspelt_architecture(*arch);
      return fail(
          "/architectures/0",
          "model.unknown-architecture",
          fmt::format("unknown architecture {}; supported: {}",
                      quote(*arch),
                      fmt::join(all, ", ")),
          near.empty() ? "" : fmt::format("did you mean {}?", quote(near)));
    }
    out = *known;
    return true;
  }

  // An integer of at least `min` at `key`; required.
  int64_t integer(std::string_view key, int64_t min = 1) {
    if (m_failed) {
      return min;
    }
    const Json* value = find(key);
    if (value == nullptr) {
      once([&] {
        return missing_key(
            pointer(key),
            m_root->contains(key) ? fmt::format(
                "{} is null, expected an integer >= {}", quote(key), min)
                                  : fmt::format("missing key {}", quote(key)));
      });
      return min;
    }
    return read_integer(*value, key, min);
  }

  // An integer of at least `min` at `key`; `fallback` when absent or null.
  int64_t integer_or(std::string_view key, int64_t fallback, int64_t min = 1) {
    const Json* value = find(key);
    return value == nullptr ? fallback : read_integer(*value, key, min);
  }

  int64_t read_integer(const Json& value, std::string_view key, int64_t min) {
    if (m_failed) {
      return min;
    }
    std::optional<int64_t> v = get_int(value, pointer(key), min);
    m_failed = !v;
    return v.value_or(min);
  }

  bool flag_or(std::string_view key, bool fallback) {
    const Json* value = find(key);
    if (m_failed || value == nullptr) {
      return fallback;
    }
    std::optional<bool> b = get_bool(*value, pointer(key));
    m_failed = !b;
    return b.value_or(fallback);
  }

  std::string string_or(std::string_view key, std::string fallback) {
    const Json* value = find(key);
    if (m_failed || value == nullptr) {
      return fallback;
    }
    const std::string* s = get_string(*value, pointer(key));
    m_failed = s == nullptr;
    return s != nullptr ? *s : fallback;
  }

  // A probability in [0, 1] at `key` (a dropout rate); `fallback` when
  // absent or null.
  double probability_or(std::string_view key, double fallback) {
    const Json* value = find(key);
    if (m_failed || value == nullptr) {
      return fallback;
    }
    std::optional<double> p = get_number(*value, pointer(key), 0);
    if (p && *p > 1) {
      bad_value(pointer(key),
                io_detail::expected_got("a probability between 0 and 1",
                                        describe(*value)));
      p.reset();
    }
    m_failed = !p;
    return p.value_or(fallback);
  }

  // A soft-capping value >= 0 at `key`: `fallback` when absent, 0 (none)
  // when null, as the configuration classes read None.
  double softcap_or(std::string_view key, double fallback) {
    auto it = m_root->find(key);
    if (m_failed || it == m_root->end()) {
      return fallback;
    }
    if (it->is_null()) {
      return 0;
    }
    std::optional<double> v = get_number(*it, pointer(key), 0);
    m_failed = !v;
    return v.value_or(fallback);
  }

  // num_experts_per_tok: from 1 to the expert count; when absent or null,
  // `fallback` (the configuration class's default) or the expert count if
  // that is smaller (a toy config with fewer experts than the default
  // top-k).
  int64_t experts_per_token_or(int64_t fallback, int64_t experts) {
    constexpr std::string_view k_key = "num_experts_per_tok";
    const int64_t k = integer_or(k_key, std::min(fallback, experts));
    if (!m_failed && k > experts) {
      once([&] {
        return bad_value(pointer(k_key),
                         fmt::format("num_experts_per_tok {} is more than the "
                                     "{} experts",
                                     k,
                                     experts));
      });
    }
    return k;
  }

  // torch_dtype (or its newer spelling dtype); `fallback` when absent.
  DType read_dtype(DType fallback) {
    for (std::string_view key : {"torch_dtype", "dtype"}) {
      const Json* value = find(key);
      if (m_failed || value == nullptr) {
        continue;
      }
      const std::string* text =
          get_string(*value, pointer(key), "a dtype name");
      if (text == nullptr) {
        m_failed = true;
        return fallback;
      }
      std::optional<DType> dtype = parse_dtype(*text);
      if (!dtype) {
        once([&] {
          return fail(pointer(key),
                      "model.unknown-dtype",
                      fmt::format("unknown dtype {}", quote(*text)),
                      fmt::format("expected one of {}",
                                  fmt::join(dtype_names(), ", ")));
        });
        return fallback;
      }
      return *dtype;
    }
    return fallback;
  }

  // quantization_config: only block-wise FP8 (DeepSeek-V3's format) changes
  // the tensors, and only it is accepted.
  std::optional<std::array<int64_t, 2>> read_quantization() {
    const Json* config = find("quantization_config");
    if (m_failed || config == nullptr) {
      return std::nullopt;
    }
    const std::string base = "/quantization_config";
    m_failed = true;  // until the end
    if (!config->is_object()) {
      type_error(*config, base, "an object");
      return std::nullopt;
    }
    auto method = config->find("quant_method");
    if (method == config->end()) {
      missing_key(base, "missing key \"quant_method\"");
      return std::nullopt;
    }
    const std::string* name = get_string(
        *method, base + "/quant_method", "a quantization method name");
    if (name == nullptr) {
      return std::nullopt;
    }
    if (*name != "fp8") {
      fail(base + "/quant_method",
           "model.unsupported-quantization",
           fmt::format("unsupported quant_method {}, expected \"fp8\"",
                       quote(*name)));
      return std::nullopt;
    }
    if (auto fmt_it = config->find("fmt");
        fmt_it != config->end()
        && !(fmt_it->is_string() && fmt_it->get<std::string>() == "e4m3")) {
      fail(base + "/fmt",
           "model.unsupported-quantization",
           "unsupported fp8 format, expected \"e4m3\"");
      return std::nullopt;
    }
    auto block = config->find("weight_block_size");
    const std::string block_pointer = base + "/weight_block_size";
    if (block == config->end()) {
      fail(base,
           "model.unsupported-quantization",
           "fp8 without \"weight_block_size\" is not supported (only "
           "block-wise scales)");
      return std::nullopt;
    }
    constexpr std::string_view k_expected = "two block sizes [out, in]";
    if (!block->is_array()) {
      type_error(*block, block_pointer, k_expected);
      return std::nullopt;
    }
    if (block->size() != 2) {
      bad_value(block_pointer,
                io_detail::expected_got(
                    k_expected, fmt::format("{} entries", block->size())));
      return std::nullopt;
    }
    std::array<int64_t, 2> sizes{1, 1};
    for (size_t i = 0; i < 2; ++i) {
      std::optional<int64_t> v =
          get_int((*block)[i], fmt::format("{}/{}", block_pointer, i), 1);
      if (!v) {
        return std::nullopt;
      }
      sizes[i] = *v;
    }
    m_failed = false;
    return sizes;
  }

  // What Llama's and DeepSeek-V3's configuration classes share, in the
  // order their tensors need it.
  void read_decoder(ModelConfig& c) {
    c.dtype = read_dtype(DType::bf16);
    c.fp8_block = read_quantization();
    c.vocab = integer("vocab_size");
    c.hidden = integer("hidden_size");
    c.intermediate = integer("intermediate_size");
    c.layers = integer("num_hidden_layers", 0);
    c.heads = integer("num_attention_heads");
  }

  // Llama and its relatives: Mistral, Mixtral, Qwen2, Qwen2-MoE, Gemma,
  // Gemma2, Phi-3 (transformers/models/<arch>/configuration_<arch>.py).
  void read_llama_family(ModelConfig& c) {
    using A = Architecture;
    const Architecture arch = c.architecture;
    const MoeBlock block = architecture_info(arch).moe;
    const bool gemma = arch == A::gemma || arch == A::gemma2;
    const bool qwen2_moe = arch == A::qwen2_moe;
    read_decoder(c);
    // Qwen2MoeConfig's num_key_value_heads defaults to 16; the others'
    // to num_attention_heads.
    c.kv_heads = integer_or("num_key_value_heads", qwen2_moe ? 16 : c.heads);
    // head_dim defaults to hidden_size // num_attention_heads, as in the
    // configuration classes.
    c.head_dim = integer_or("head_dim", c.hidden / c.heads);
    if (!m_failed && c.head_dim < 1) {
      once([&] {
        return bad_value(
            "/hidden_size",
            fmt::format("hidden_size {} is smaller than num_attention_heads {}",
                        c.hidden,
                        c.heads));
      });
    }
    // Gemma's configuration classes tie by default; the others do not.
    c.tied = flag_or("tie_word_embeddings", gemma);
    // Llama and Gemma read attention_bias (q/k/v and o). Qwen2 always has
    // q/k/v biases and none on o; Qwen2-MoE the same unless qkv_bias is
    // false. Mistral, Mixtral and Phi-3 have none (Phi-3's config carries
    // "attention_bias", which Phi3Attention never reads).
    c.attention_bias =
        (arch == A::llama || gemma) && flag_or("attention_bias", false);
    c.qkv_bias = arch == A::qwen2 || (qwen2_moe && flag_or("qkv_bias", true));
    c.mlp_bias = arch == A::llama && flag_or("mlp_bias", false);
    switch (block) {
      case MoeBlock::mixtral:
        c.experts = integer("num_local_experts");
        c.experts_per_token = experts_per_token_or(2, c.experts);
        break;
      case MoeBlock::qwen2_moe:
        read_qwen2_moe(c);
        break;
      case MoeBlock::none:
      case MoeBlock::deepseek_v3:  // read_deepseek_v3 reads its keys
        break;
    }
    read_llama_activations(c);
  }

  // What the activations need (docs/models.md, "Activation keys"): each
  // configuration class's defaults (transformers
  // models/<arch>/configuration_<arch>.py).
  void read_llama_activations(ModelConfig& c) {
    const Architecture arch = c.architecture;
    c.mlp = MlpKind::gated;
    c.norm = NormKind::rms_norm;
    if (arch == Architecture::gemma2) {
      c.activation = string_or("hidden_activation", "gelu_pytorch_tanh");
      c.post_norms = true;
      c.attention_softcap = softcap_or("attn_logit_softcapping", 50.0);
      c.final_softcap = softcap_or("final_logit_softcapping", 30.0);
    } else if (arch == Architecture::gemma) {
      // GemmaMLP used hidden_activation when given (the published configs
      // predate it and say "gelu" in hidden_act); GemmaConfig's hidden_act
      // defaults to gelu_pytorch_tanh.
      c.activation =
          string_or("hidden_activation",
                    string_or("hidden_act", std::string("gelu_pytorch_tanh")));
    } else {
      c.activation = string_or("hidden_act", "silu");
    }
    c.attention_dropout = probability_or("attention_dropout", 0.0);
    if (arch == Architecture::phi3) {
      c.residual_dropout = probability_or("resid_pdrop", 0.0);
      c.embedding_dropout = probability_or("embd_pdrop", 0.0);
    }
  }

  // Qwen2MoeSparseMoeBlock's keys. The sizes are required, as every dim of
  // a tensor is; num_experts 0 makes every layer dense (and needs no
  // sizes). num_experts_per_tok (default 4) changes no tensor, only the
  // activations; norm_topk_prob neither and is not read.
  void read_qwen2_moe(ModelConfig& c) {
    c.experts = integer("num_experts", 0);
    if (c.experts > 0) {
      c.moe_intermediate = integer("moe_intermediate_size");
      c.shared_intermediate = integer("shared_expert_intermediate_size");
      c.experts_per_token = experts_per_token_or(4, c.experts);
    }
    c.sparse_step = integer_or("decoder_sparse_step", 1);
    c.dense_layers = layer_list("mlp_only_layers");
  }

  // A list of layer indices (integers >= 0) at `key`; empty when absent or
  // null.
  std::vector<int64_t> layer_list(std::string_view key) {
    std::vector<int64_t> out;
    const Json* list = find(key);
    if (m_failed || list == nullptr) {
      return out;
    }
    if (!list->is_array()) {
      once([&] {
        return type_error(*list, pointer(key), "a list of layer indices");
      });
      return out;
    }
    out.reserve(list->size());
    for (size_t i = 0; i < list->size(); ++i) {
      std::optional<int64_t> index =
          get_int((*list)[i], fmt::format("{}/{}", pointer(key), i), 0);
      if (!index) {
        m_failed = true;
        return {};
      }
      out.push_back(*index);
    }
    return out;
  }

  // GPT-2 (transformers/models/gpt2/configuration_gpt2.py).
  void read_gpt2(ModelConfig& c) {
    // GPT-2's checkpoints predate torch_dtype and are float32.
    c.dtype = read_dtype(DType::f32);
    c.fp8_block = read_quantization();
    c.vocab = integer("vocab_size");
    c.hidden = integer("n_embd");
    c.layers = integer("n_layer", 0);
    c.positions = integer("n_positions");
    c.heads = integer("n_head");
    c.kv_heads = c.heads;
    c.intermediate = integer_or("n_inner", 0);  // 0: 4 x n_embd
    c.tied = flag_or("tie_word_embeddings", true);
    // GPT2Attention refuses an n_embd that n_head does not divide.
    if (!m_failed && c.hidden % c.heads != 0) {
      once([&] {
        return bad_value(
            "/n_head",
            fmt::format(
                "n_embd {} is not divisible by n_head {}", c.hidden, c.heads));
      });
    }
    c.head_dim = c.hidden / c.heads;
    // GPT2Config's defaults; GPT2MLP is c_fc, the activation, c_proj.
    c.mlp = MlpKind::plain;
    c.norm = NormKind::layer_norm;
    c.activation = string_or("activation_function", "gelu_new");
    c.attention_dropout = probability_or("attn_pdrop", 0.1);
    c.residual_dropout = probability_or("resid_pdrop", 0.1);
    c.embedding_dropout = probability_or("embd_pdrop", 0.1);
  }

  // DeepSeek-V3 (deepseek-ai/DeepSeek-V3 configuration_deepseek.py).
  void read_deepseek_v3(ModelConfig& c) {
    read_decoder(c);
    c.kv_heads = c.heads;
    c.q_lora_rank = integer_or("q_lora_rank", 0);
    c.kv_lora_rank = integer("kv_lora_rank");
    c.qk_nope = integer("qk_nope_head_dim", 0);
    c.qk_rope = integer("qk_rope_head_dim", 0);
    c.v_head = integer("v_head_dim");
    c.experts = integer_or("n_routed_experts", 0, 0);
    if (c.experts > 0) {
      c.moe_intermediate = integer("moe_intermediate_size");
      // DeepseekV3Config's default (transformers); the checkpoint's own
      // configuration_deepseek.py has None.
      c.experts_per_token = experts_per_token_or(8, c.experts);
    }
    c.shared_experts = integer_or("n_shared_experts", 0, 0);
    c.first_dense = integer_or("first_k_dense_replace", 0, 0);
    c.moe_freq = integer_or("moe_layer_freq", 1);
    c.mtp_layers = integer_or("num_nextn_predict_layers", 0, 0);
    c.attention_bias = flag_or("attention_bias", false);
    // The router's correction bias exists for the aux-loss-free top-k
    // method.
    c.correction_bias = string_or("topk_method", "noaux_tc") == "noaux_tc";
    c.tied = flag_or("tie_word_embeddings", false);
    c.mlp = MlpKind::gated;
    c.norm = NormKind::rms_norm;
    c.activation = string_or("hidden_act", "silu");
    c.attention_dropout = probability_or("attention_dropout", 0.0);
  }

  const Json* m_root = nullptr;
  bool m_failed = false;
};

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

std::optional<ModelConfig> read_hf_config(std::string_view json,
                                          std::string_view source,
                                          Diagnostics& diags) {
  try {
    return HfConfigReader(json, source, diags).run();
  } catch (const std::exception& e) {
    io_detail::report_exception(e, json.size(), source, diags);
    return std::nullopt;
  }
}

std::optional<std::vector<ModelTensor>> tensors_from_hf_config(
    std::string_view json, std::string_view source, Diagnostics& diags) {
  std::optional<ModelConfig> config = read_hf_config(json, source, diags);
  if (!config) {
    return std::nullopt;
  }
  return checkpoint_tensors(*config, diags);
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
      const std::string source = name + ".json";
      std::optional<ModelConfig> config = read_hf_config(text, source, diags);
      std::optional<std::vector<ModelTensor>> tensors =
          config ? checkpoint_tensors(*config, diags) : std::nullopt;
      if (!tensors) {
        throw std::logic_error("configs/models/" + source + " does not load: "
                               + (diags.items().empty()
                                      ? std::string("?")
                                      : render(diags.items().front())));
      }
      BuiltinModel model;
      model.name = name;
      model.architecture = to_string(config->architecture);
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

std::optional<Manifest> manifest_from_model(
    const std::vector<ModelTensor>& tensors,
    std::string_view source,
    Diagnostics& diags) {
  Manifest manifest;
  manifest.source = std::string(source);
  manifest.reserve(tensors.size());
  const Location where = Location::of(manifest.source);
  for (const ModelTensor& t : tensors) {
    TensorInput input;
    input.name = t.name;
    input.shape = t.shape;
    input.dtype = t.dtype;
    if (!manifest.add(std::move(input), diags, where)) {
      return std::nullopt;
    }
  }
  return manifest;
}

std::optional<Manifest> read_builtin_model(std::string_view name,
                                           std::string_view source,
                                           Diagnostics& diags) {
  std::optional<std::vector<ModelTensor>> tensors =
      tensors_for_builtin_model(name, source, diags);
  if (!tensors) {
    return std::nullopt;
  }
  return manifest_from_model(
      *tensors, fmt::format("{} {}", source, name), diags);
}

}  // namespace shardplan
