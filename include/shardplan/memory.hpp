#pragma once

// Layer 4: the memory estimator (DESIGN.md section 5; docs/memory.md gives
// every formula with its source).
//
// Per device, a tensor holds itemsize x prod(ceil(dim / shards)) bytes of
// parameters; the sum over tensors is never divided by the device count
// again. A recipe adds training state per parameter element; --zero shards
// that state further over the data axes the tensor's spec leaves free.

#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/sharding.hpp>
#include <shardplan/tensor.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// Bytes of training state per parameter element (shared/reference/
// hardware-and-costs.md A.0). For a bf16 parameter:
//   params-only      2                        weights only (inference)
//   adam             2 + 2 + 4 + 8 = 16       grads in the param dtype, fp32
//                                             master copy, fp32 m and v
//                                             (ZeRO paper K=12, playbook 16N)
//   adam-fp32-grads  2 + 4 + 4 + 8 = 18       fp32 grads (Megatron, DeepSpeed;
//                                             alias megatron)
//   adam-fp32-accum  2 + 2+4 + 4 + 8 = 20     bf16 grads plus an fp32 grad
//                                             accumulation buffer
//                                             (playbook 20N)
//   scaling-book     2 + 8 = 10               m and v; grads not counted
// "Param dtype" is the dtype the weights are held and trained in
// (MemoryOptions::param_dtype; by default each tensor's own, except that a
// training recipe trains FP8 weights in bf16). The master copy exists only
// for parameters narrower than fp32. Integer and bool tensors and
// quantization scales (is_quantization_scale) are not trained: they hold
// their weights only.
enum class Recipe {
  params_only,
  adam,
  adam_fp32_grads,
  adam_fp32_accum,
  scaling_book
};

std::string_view to_string(Recipe recipe);
// Accepts the names above and "megatron".
std::optional<Recipe> parse_recipe(std::string_view text);
std::vector<std::string> recipe_names();  // for messages and --help

// A quantization scale: a tensor a quantized checkpoint stores beside its
// weights to dequantize them, never trained. By name: the last component of
// `name` ends with "_scale_inv" (DeepSeek-V3's block-wise FP8,
// README_WEIGHTS.md) or is weight_scale, weight_scale_2, input_scale,
// output_scale, k_scale or v_scale (FP8/NVFP4 checkpoints in the
// compressed-tensors and ModelOpt layouts); by dtype: any f8_e8m0 tensor
// (MX block scales). docs/memory.md, "FP8 checkpoints".
bool is_quantization_scale(std::string_view name, DType dtype);

// The name of the weight a scale tensor scales: "x.weight" for
// "x.weight_scale_inv", "x.weight_scale" and "x.weight_scale_2"; empty for
// any other name (activation scales such as input_scale scale no weight).
std::string_view scaled_weight_name(std::string_view name);

// An expert weight (MoE): a dim's logical axis is "exp", "expert" or
// "experts" (MaxText), or a component of `name` is "experts" (Hugging Face:
// "mlp.experts.3.gate_proj.weight", "mlp.experts.gate_up_proj").
bool is_expert_weight(const Tensor& tensor);

struct MemoryOptions {
  Recipe recipe = Recipe::params_only;
  // The dtype the weights are held and trained in, for every floating-point
  // tensor that is not a quantization scale. nullopt: each tensor's own,
  // except that a recipe with optimizer state trains FP8 weights in bf16.
  std::optional<DType> param_dtype;
  // The dtype gradients are held in. nullopt: the recipe's (the param dtype,
  // or f32 for adam-fp32-grads). Ignored, with a warning, by a recipe that
  // counts no gradients.
  std::optional<DType> grad_dtype;
  // ZeRO stage: 1 shards optimizer state, 2 also gradients, 3 also
  // parameters, over the data axes a tensor's spec does not already use.
  int zero = 0;
  // Mesh axes ZeRO shards over. Empty: the mesh's axes named dp, data, fsdp.
  std::vector<std::string> data_axes;
  // HBM per device (from the topology, or --hbm); nullopt when unknown.
  std::optional<int64_t> hbm_bytes;
  // The fraction of HBM kept free (XLA and runtime buffers, activations).
  double headroom = 0.1;
  // How many of the largest tensors to list.
  size_t largest = 20;
  // Mesh axes a matmul keeps its weight split over (tensor and pipeline
  // parallelism), and those it keeps split over for an expert weight only
  // (expert parallelism: tokens travel to the experts by all-to-all). Every
  // other axis a spec splits a weight over is gathered at use (FSDP);
  // docs/memory.md, "Gather buffer".
  std::vector<std::string> model_parallel_axes = {"tp",
                                                  "tensor",
                                                  "tensor_sequence",
                                                  "model",
                                                  "mp",
                                                  "pp",
                                                  "stage",
                                                  "pipeline"};
  std::vector<std::string> expert_axes = {"ep", "expert"};
  // What to call `zero`, `data_axes`, `param_dtype` and `grad_dtype` in
  // diagnostics (the command line passes "--zero", "--data-axes", ...).
  std::string zero_source;
  std::string data_axes_source;
  std::string param_dtype_source;
  std::string grad_dtype_source;
};

struct StateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;

  int64_t model_states() const { return params + grads + optimizer; }
};

struct TensorMemory {
  size_t tensor = 0;      // index in the manifest
  StateBytes per_device;  // on the most loaded device
};

struct DtypeMemory {
  DType dtype = DType::f32;
  int64_t tensors = 0;
  int64_t params_per_device = 0;
};

struct MemoryEstimate {
  Recipe recipe = Recipe::params_only;
  int zero = 0;
  std::vector<std::string> data_axes;  // as used (default resolved)
  int64_t zero_shards = 1;             // product of the data axes' sizes
  // Device 0, which holds the largest shard of every tensor.
  StateBytes per_device;
  // The assumptions the estimate made (docs/memory.md):
  std::optional<DType> param_dtype;  // as given; nullopt: each tensor's own
  // What the FP8 weights (not scales) are held in; nullopt when the manifest
  // has none.
  std::optional<DType> fp8_param_dtype;
  // Gradients are counted (the recipe has them), in `grad_dtype` or, when
  // that is nullopt, in each tensor's param dtype.
  bool grads_counted = false;
  std::optional<DType> grad_dtype;
  int64_t scale_tensors = 0;          // quantization scales: model state only
  int64_t dropped_scale_tensors = 0;  // of those, folded into their weights
  // The largest tensor gathered at use (FSDP, ZeRO-3): its parameters and,
  // when training, its gradients, in the param dtype (DeepSpeed's
  // largest_layer_memory, 4 x Lmax for fp16). 0 when no parameter is split
  // over an axis it is gathered over.
  int64_t gather_buffer = 0;
  size_t gather_tensor = 0;              // which tensor, when gather_buffer > 0
  std::vector<std::string> gather_axes;  // the axes it is gathered over
  int64_t max_device_total = 0;  // per_device model states + gather_buffer
  int64_t min_device_total = 0;  // the last device (smallest shards)
  std::optional<int64_t> hbm_bytes;
  double headroom = 0.1;
  std::optional<int64_t> capacity_bytes;  // floor(hbm x (1 - headroom))
  std::optional<double> utilization;      // max_device_total / hbm
  std::optional<bool> fits;               // max_device_total <= capacity
  std::vector<DtypeMemory> by_dtype;      // first appearance order
  std::vector<TensorMemory> largest;      // by model states, descending
  int64_t uneven_tensors = 0;             // tensors whose shards differ
};

// Estimates per-device memory of `shardings` (validate_specs's result, one per
// manifest tensor: shardings[t] is tensor t's). Reports an unknown data axis
// (error, at --data-axes), a param or grad dtype that is not floating point
// (error memory.dtype), a grad dtype the recipe does not use (warning
// memory.grad-dtype-unused), devices holding different amounts (warning
// memory.uneven) and a total over capacity (error memory.over-capacity).
// REQUIRES: shardings.size() == manifest.size(); 0 <= options.zero <= 3;
// 0 <= options.headroom < 1.
std::optional<MemoryEstimate> estimate_memory(
    const Manifest& manifest,
    const Mesh& mesh,
    const std::vector<TensorSharding>& shardings,
    const MemoryOptions& options,
    Diagnostics& diags);

}  // namespace shardplan
