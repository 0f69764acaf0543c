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
// The master copy exists only for parameters narrower than fp32. Integer and
// bool tensors are not trained: they hold their weights only.
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

struct MemoryOptions {
  Recipe recipe = Recipe::params_only;
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
  // What to call `zero` and `data_axes` in diagnostics (the command line
  // passes "--zero" and "--data-axes").
  std::string zero_source;
  std::string data_axes_source;
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
  // The largest tensor gathered over the data axes at use (FSDP, ZeRO-3):
  // its parameters and, when training, its gradients in the param dtype
  // (DeepSpeed's largest_layer_memory, 4 x Lmax for fp16). 0 when no
  // parameter is sharded over a data axis.
  int64_t gather_buffer = 0;
  size_t gather_tensor = 0;      // which tensor, when gather_buffer > 0
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
// (error, at --data-axes), devices holding different amounts (warning
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
