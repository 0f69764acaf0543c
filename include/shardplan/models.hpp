#pragma once

// Layer 1: model architectures. A Hugging Face config.json becomes the list of
// tensors its published checkpoint holds (names, shapes, dtypes, in checkpoint
// order), and a catalogue of built-in models (configs/models/*.json, compiled
// in) names real configs. Pure computation on text: no files, no Manifest.
// docs/models.md describes what each architecture generates.

#include <shardplan/diag.hpp>
#include <shardplan/tensor.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

struct ModelTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::bf16;
};

// The tensors of the checkpoint that `config_json` (the text of a Hugging Face
// config.json) describes, in the checkpoint's order: the order of
// model.named_parameters(), which single-file safetensors checkpoints keep;
// for multi-shard checkpoints the natural layer order (embeddings, each layer
// in order, final norm, lm_head unless tied).
//
// The architecture is the first entry of "architectures"; the dtype is
// "torch_dtype" (bfloat16 when absent; float32 for GPT2LMHeadModel, whose
// checkpoints predate the key). With a block-wise FP8 "quantization_config"
// (quant_method "fp8" and "weight_block_size" [bo, bi]) every linear weight
// inside the decoder layers is f8_e4m3 and followed by "<name>_scale_inv"
// (f32, ceil(out / bo) x ceil(in / bi)); routers, norms, embeddings and
// heads keep the model dtype.
//
// Example: gpt2's config gives 148 tensors, "wte.weight" [50257, 768] first,
// "h.0.attn.c_attn.weight" [768, 2304] (Conv1D stores [in, out]), no lm_head
// (tied to wte); 124,439,808 elements.
//
// Reports (and returns nullopt) at `source` with a JSON pointer, parsing
// stopping at the first problem: malformed JSON (line:column) [model.syntax],
// a root that is not an object [model.not-object], a missing key
// [model.missing-key], a value of the wrong type or range [model.bad-value],
// an architecture not in supported_architectures()
// [model.unknown-architecture], an unknown torch_dtype [model.unknown-dtype], a
// quantization_config other than block-wise fp8
// [model.unsupported-quantization], dims or totals beyond int64
// [model.overflow], more than k_max_model_tensors tensors
// [model.too-many-tensors]. Never throws.
std::optional<std::vector<ModelTensor>> tensors_from_hf_config(
    std::string_view config_json, std::string_view source, Diagnostics& diags);

// The most tensors tensors_from_hf_config generates (DeepSeek-V3 has 91,991).
inline constexpr int64_t k_max_model_tensors = int64_t{1} << 22;

// The "architectures" values tensors_from_hf_config accepts, sorted.
std::vector<std::string> supported_architectures();

// One entry of the built-in catalogue (configs/models/<name>.json).
struct BuiltinModel {
  std::string name;          // file stem, e.g. "llama-3-8b"
  std::string architecture;  // e.g. "LlamaForCausalLM"
  int64_t parameters = 0;    // elements of every tensor (FP8 scales included)
  int64_t tensors = 0;
};

// Every built-in model, in name order.
std::vector<BuiltinModel> builtin_models();

// The config.json text of built-in model `name`; nullopt when unknown.
std::optional<std::string_view> builtin_model_config(std::string_view name);

// The tensors of built-in model `name`. An unknown name is reported at
// `source` (e.g. "--model") with the nearest name as a hint
// [model.unknown-model].
std::optional<std::vector<ModelTensor>> tensors_for_builtin_model(
    std::string_view name, std::string_view source, Diagnostics& diags);

}  // namespace shardplan
