#pragma once

// Layer 3: model architectures. What a Hugging Face config.json says (read by
// io, read_hf_config) becomes the list of tensors its published checkpoint
// holds (names, shapes, dtypes, in checkpoint order). Pure computation: no
// text, no files, no Manifest. docs/models.md describes what each
// architecture generates; the built-in models (configs/models/*.json) are
// io's (builtin_models).

#include <shardplan/diag.hpp>
#include <shardplan/tensor.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// What the MLP of a decoder layer computes: the activation keys of a
// Hugging Face config (docs/models.md, "Activation keys").
enum class MlpKind {
  // act(x W_gate) * (x W_up), then W_down: SwiGLU with silu (Llama, Mistral,
  // Mixtral, Qwen2, Qwen2-MoE, Phi-3's fused gate_up_proj, DeepSeek-V3),
  // GeGLU with a GeLU (Gemma, Gemma2).
  gated,
  // act(x W_in), then W_out: GPT-2's 4h GeLU MLP (c_fc, c_proj).
  plain,
};
std::string_view to_string(MlpKind kind);  // "gated", "plain"

// The norm of each sublayer: LayerNorm with a bias (GPT-2's ln_1, ln_2,
// ln_f) or RMSNorm (Llama and the others). Both keep their input for the
// backward.
enum class NormKind { layer_norm, rms_norm };
std::string_view to_string(NormKind kind);  // "layer_norm", "rms_norm"

// The architectures read_hf_config accepts, one per Hugging Face
// "architectures" name (ArchitectureInfo::name), in the order of their names.
enum class Architecture {
  deepseek_v3,  // DeepseekV3ForCausalLM
  gpt2,         // GPT2LMHeadModel
  gemma2,       // Gemma2ForCausalLM
  gemma,        // GemmaForCausalLM
  llama,        // LlamaForCausalLM
  mistral,      // MistralForCausalLM
  mixtral,      // MixtralForCausalLM
  phi3,         // Phi3ForCausalLM
  qwen2,        // Qwen2ForCausalLM
  qwen2_moe,    // Qwen2MoeForCausalLM
};

// Which configuration reader and tensor generator an architecture takes
// (docs/models.md).
enum class ModelFamily {
  // Llama's decoder and its relatives: q/k/v/o projections (Phi-3 fused),
  // a gated MLP or a MoE block, RMSNorms; config keys per architecture.
  llama,
  // GPT-2: Conv1D weights [in, out], learned positions, LayerNorms, a 4h
  // GeLU MLP; the n_embd, n_layer, n_head keys.
  gpt2,
  // DeepSeek-V3: multi-head latent attention (low-rank q and kv), the
  // DeepseekV3MoE block, multi-token-prediction modules.
  deepseek_v3,
};

// The mixture-of-experts block of an architecture's MoE layers: which
// layers are MoE, how wide the experts are, and the shared expert.
enum class MoeBlock {
  none,
  // MixtralSparseMoeBlock: every layer; num_local_experts experts of
  // intermediate_size (w1, w2, w3); no shared expert.
  mixtral,
  // Qwen2MoeSparseMoeBlock: layer i when (i + 1) % decoder_sparse_step == 0
  // and i is not in mlp_only_layers; num_experts of moe_intermediate_size,
  // one gated shared expert of shared_expert_intermediate_size.
  qwen2_moe,
  // DeepseekV3MoE: from first_k_dense_replace on, every moe_layer_freq
  // layers; n_routed_experts of moe_intermediate_size, n_shared_experts
  // as one MLP.
  deepseek_v3,
};

// One row per architecture: what the code branches on beyond the
// configuration keys. A new architecture is an Architecture value and its
// row in src/models.cpp; a new family or MoE block adds the cases the
// compiler names.
struct ArchitectureInfo {
  Architecture architecture = Architecture::llama;
  std::string_view name;  // as config.json's "architectures" spells it
  ModelFamily family = ModelFamily::llama;
  MoeBlock moe = MoeBlock::none;
};

// Every architecture, in the order of their names. Row k is Architecture k.
std::span<const ArchitectureInfo> architectures();
const ArchitectureInfo& architecture_info(Architecture architecture);
// The Hugging Face name: "LlamaForCausalLM", "GPT2LMHeadModel".
std::string_view to_string(Architecture architecture);
// The architecture named exactly `name`; nullopt for none.
std::optional<Architecture> find_architecture(std::string_view name);

struct ModelTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::bf16;
};

// What a Hugging Face config.json says about the tensors of its checkpoint
// (read by io's read_hf_config; docs/models.md lists the keys per
// architecture). Dims are validated (>= 1 where a size, >= 0 where a count);
// what a key's absence means is the configuration class's default.
struct ModelConfig {
  std::string source;  // the file, for diagnostics ("config.json")
  Architecture architecture = Architecture::llama;
  // torch_dtype (or dtype): bfloat16 when absent, float32 for GPT-2.
  DType dtype = DType::bf16;
  // A block-wise FP8 quantization_config's weight_block_size [out, in].
  std::optional<std::array<int64_t, 2>> fp8_block;

  int64_t vocab = 0;   // vocab_size
  int64_t hidden = 0;  // hidden_size, n_embd
  int64_t intermediate =
      0;                  // intermediate_size; GPT-2: n_inner (0: 4 x hidden)
  int64_t layers = 0;     // num_hidden_layers, n_layer
  int64_t heads = 0;      // num_attention_heads, n_head
  int64_t kv_heads = 0;   // num_key_value_heads (default: heads)
  int64_t head_dim = 0;   // head_dim (default: hidden / heads)
  int64_t positions = 0;  // GPT-2: n_positions (learned positions)
  bool tied = false;      // tie_word_embeddings
  bool attention_bias = false;  // biases on q/k/v and o_proj (Llama, Gemma)
  // Biases on q/k/v_proj and none on o_proj: Qwen2 always, Qwen2-MoE by
  // qkv_bias (default true).
  bool qkv_bias = false;
  bool mlp_bias = false;  // Llama
  // Mixture of experts: Mixtral's num_local_experts, Qwen2-MoE's
  // num_experts, DeepSeek-V3's n_routed_experts (0: every layer dense).
  int64_t experts = 0;
  int64_t moe_intermediate = 0;  // moe_intermediate_size (routed experts)
  // Qwen2-MoE (Qwen2MoeSparseMoeBlock): one shared expert of
  // shared_expert_intermediate_size; layer i is sparse when experts > 0,
  // (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers.
  int64_t shared_intermediate = 0;    // shared_expert_intermediate_size
  int64_t sparse_step = 1;            // decoder_sparse_step
  std::vector<int64_t> dense_layers;  // mlp_only_layers
  // DeepSeek-V3 (MLA and DeepseekV3MoE).
  int64_t shared_experts = 0;  // n_shared_experts
  int64_t first_dense = 0;     // first_k_dense_replace
  int64_t moe_freq = 1;        // moe_layer_freq
  int64_t q_lora_rank = 0;     // 0: no low-rank query (q_proj)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope = 0;          // qk_nope_head_dim
  int64_t qk_rope = 0;          // qk_rope_head_dim
  int64_t v_head = 0;           // v_head_dim
  int64_t mtp_layers = 0;       // num_nextn_predict_layers
  bool correction_bias = true;  // topk_method "noaux_tc"

  // What the activations need beyond the dims (docs/models.md, "Activation
  // keys"; each default is the configuration class's).
  MlpKind mlp = MlpKind::gated;  // by architecture: GPT-2 plain, else gated
  // hidden_act; Gemma2's hidden_activation; Gemma's hidden_activation when
  // given, else hidden_act; GPT-2's activation_function. As given (e.g.
  // "silu", "gelu_pytorch_tanh", "gelu_new"); it names the MLP, its bytes
  // do not depend on it.
  std::string activation;
  NormKind norm = NormKind::rms_norm;  // by architecture: GPT-2 layer_norm
  // Gemma2's sandwich norms: post_attention_layernorm normalises the
  // attention output and post_feedforward_layernorm the MLP output, so both
  // outputs are kept for the backward (Gemma2DecoderLayer).
  bool post_norms = false;
  // Dropout probabilities in [0, 1]. attention_dropout: on the attention
  // probabilities (GPT-2's attn_pdrop, the others' attention_dropout);
  // residual_dropout: on the attention and MLP outputs before each residual
  // add (resid_pdrop: GPT-2, Phi-3); embedding_dropout: on the embedding
  // output (embd_pdrop: GPT-2, Phi-3).
  double attention_dropout = 0;
  double residual_dropout = 0;
  double embedding_dropout = 0;
  // Routed experts each token goes to (num_experts_per_tok); 0 without
  // experts. 1 <= experts_per_token <= experts otherwise.
  int64_t experts_per_token = 0;
  // Gemma2's tanh soft-capping of the attention scores
  // (attn_logit_softcapping) and of the logits (final_logit_softcapping);
  // 0: none (the key is null).
  double attention_softcap = 0;
  double final_softcap = 0;
};

// Whether decoder layer `index` has a mixture-of-experts MLP: Mixtral every
// layer; Qwen2-MoE when (index + 1) % decoder_sparse_step == 0 and index is
// not in mlp_only_layers; DeepSeek-V3 when index >= first_k_dense_replace
// and index % moe_layer_freq == 0 (MTP layers, index >= layers, included).
// Always false without experts. The same rule checkpoint_tensors uses.
bool is_moe_layer(const ModelConfig& config, int64_t index);

// The layer structure the activation estimate needs (workload.hpp).
struct LayerStructure {
  // One entry per decoder layer, 0 .. layers - 1: true for an MoE layer.
  std::vector<bool> moe;
  int64_t dense_layers = 0;  // entries of `moe` that are false
  int64_t moe_layers = 0;    // entries of `moe` that are true
  // DeepSeek-V3's multi-token-prediction modules after the main layers
  // (num_nextn_predict_layers), each a decoder layer of kind
  // is_moe_layer(layers + k) plus its own norms, projection and head.
  int64_t mtp_layers = 0;
  bool mtp_moe = false;  // the MTP modules' layers are MoE layers
  // Width of a dense layer's MLP (intermediate_size; GPT-2's n_inner or
  // 4 x n_embd).
  int64_t dense_intermediate = 0;
  int64_t routed_experts = 0;       // experts of an MoE layer
  int64_t experts_per_token = 0;    // top-k
  int64_t routed_intermediate = 0;  // one routed expert's MLP width
  // Width of the shared expert MLP of an MoE layer, 0 for none: Qwen2-MoE's
  // shared_expert_intermediate_size, DeepSeek-V3's moe_intermediate_size x
  // n_shared_experts (one MLP of the experts' total width).
  int64_t shared_intermediate = 0;
  // Qwen2-MoE scales the shared expert's output by
  // sigmoid(shared_expert_gate(x)), which keeps that output for the
  // backward.
  bool shared_expert_gate = false;
};

// The structure of `config`'s decoder: which layers are dense and which MoE,
// and the MLP widths. Reports at config.source: a width beyond int64
// [model.overflow] at the key that makes it, more than k_max_model_tensors
// layers [model.too-many-tensors] at /num_hidden_layers (or /n_layer).
// REQUIRES: `config` as read_hf_config validates it.
std::optional<LayerStructure> layer_structure(const ModelConfig& config,
                                              Diagnostics& diags);

// The tensors of the checkpoint `config` describes, in the checkpoint's
// order: the order of model.named_parameters(), which single-file
// safetensors checkpoints keep; for multi-shard checkpoints the natural layer
// order (embeddings, each layer in order, final norm, lm_head unless tied).
//
// With a block-wise FP8 quantization every linear weight inside the decoder
// layers is f8_e4m3 and followed by "<name>_scale_inv" (f32, ceil(out / bo) x
// ceil(in / bi)); routers, norms, embeddings and heads keep the model dtype.
//
// Example: gpt2's config gives 148 tensors, "wte.weight" [50257, 768] first,
// "h.0.attn.c_attn.weight" [768, 2304] (Conv1D stores [in, out]), no lm_head
// (tied to wte); 124,439,808 elements.
//
// Reports (and returns nullopt) at config.source with the JSON pointer of the
// key whose value causes it: dims or totals beyond int64 [model.overflow],
// more than k_max_model_tensors tensors [model.too-many-tensors]. Never
// throws. REQUIRES: `config` as read_hf_config validates it.
std::optional<std::vector<ModelTensor>> checkpoint_tensors(
    const ModelConfig& config, Diagnostics& diags);

// The most tensors checkpoint_tensors generates (DeepSeek-V3 has 91,991).
inline constexpr int64_t k_max_model_tensors = int64_t{1} << 22;

// The "architectures" values read_hf_config accepts, sorted.
std::vector<std::string> supported_architectures();

// The supported architecture that `name` misspells, for a "did you mean"
// hint; empty when there is none (docs/models.md, "Unknown
// architectures"). A Hugging Face architecture name is a model name and a
// head ("Llama" + "ForCausalLM", "GPT2" + "LMHeadModel"), and a name one
// edit from a supported one is often another architecture (Qwen3ForCausalLM
// is not Qwen2ForCausalLM, Qwen2MoeForCausalLM not Qwen2ForCausalLM). So
// only a misspelt head counts: `name` must be a supported architecture's
// model name (letter case ignored) followed by text that starts with the
// letter its head starts with and is within 3 edits of that head.
// misspelt_architecture("LlamaForCausalLLM") == "LlamaForCausalLM";
// misspelt_architecture("Qwen3ForCausalLM") == "".
std::string misspelt_architecture(std::string_view name);

// One entry of the built-in catalogue (configs/models/<name>.json).
struct BuiltinModel {
  std::string name;          // file stem, e.g. "llama-3-8b"
  std::string architecture;  // e.g. "LlamaForCausalLM"
  int64_t parameters = 0;    // elements of every tensor (FP8 scales included)
  int64_t tensors = 0;
};

}  // namespace shardplan
