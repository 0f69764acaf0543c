#pragma once

// Layer 4: the memory estimator (docs/memory.md gives
// every formula with its source).
//
// Per device, a tensor holds itemsize x prod(ceil(dim / shards)) bytes of
// parameters; the sum over tensors is never divided by the device count
// again. A recipe adds training state per parameter element; --zero shards
// that state further over the data axes the tensor's spec leaves free.
//
// What it offers, by the file that implements it (the files share
// src/memory/internal.hpp):
//   memory/state.cpp
//     Recipe, parse_recipe, recipe_names   the training-state recipes
//     is_quantization_scale, scaled_weight_name, is_expert_weight
//                              what a tensor's name and dtype say
//     MemoryFacts, memory_facts   what a manifest holds, for the summary
//   memory/placement.cpp
//     NameFacts, name_facts    a name's layer and expert index
//     is_stacked_layers_name, is_embedding_name
//     PlacementOptions, Placement, place_tensors   tensors on pipeline
//                              stages, whole experts on expert ranks
//   memory/gather.cpp          (internal) the units FSDP gathers, in order
//   memory/estimate.cpp
//     MemoryOptions, ActivationLoad   recipe, dtypes, ZeRO, roles,
//                              activations, HBM
//     MemoryEstimate, GroupMemory, TensorMemory, DtypeMemory, StateBytes,
//     GatherUnit               per device, per placement group, per dtype
//     estimate_memory          MemoryEstimator's phases: the estimate

#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/sharding.hpp>
#include <shardplan/tensor.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// Bytes of training state per parameter element
// (docs/sources.md#bytes-per-parameter). For a bf16 parameter:
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

// The optimizer whose state a recipe with optimizer state keeps per
// parameter (docs/memory.md, "Optimizer state"):
//   adamw      two moments, mu and nu (optax.adamw, torch.optim.AdamW,
//              Megatron's Adam); MaxText's adam_pax keeps the same
//   adafactor  no first moment and a factored second one: rows + columns
//              of a matrix, counted as none, a vector's whole
//              (optax.adafactor's defaults)
//   sgd        none (optax.sgd without momentum: MaxText's opt_type sgd)
//   muon       one momentum buffer for a matrix (mu); AdamW's two for a
//              vector (optax.contrib.muon)
enum class Optimizer { adamw, adafactor, sgd, muon };
std::string_view to_string(Optimizer optimizer);
std::optional<Optimizer> parse_optimizer(std::string_view text);
std::vector<std::string> optimizer_names();

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

// Placement (docs/memory.md, "Pipeline stages and expert
// placement"): besides what its spec splits, a tensor may live at only one
// coordinate of some mesh axes. The stage axes (AxisRoles::stage, sizes
// multiplied in mesh order, first major: S stages) split the decoder layers;
// the expert axes (AxisRoles::expert: R ranks) hold whole experts of a
// checkpoint that stores one tensor per expert. A placement group is one
// (stage, expert rank) pair: the devices at that coordinate of the stage and
// expert axes, S x R groups in all.

// The decoder layer a tensor belongs to: the number that follows a name
// component "layers", "layer", "h", "blocks" or "block" (components are "."
// or "/" separated; the first such pair wins): Hugging Face's
// "model.layers.12.mlp.up_proj.weight" and GPT-2's "h.0.attn.c_attn.weight"
// (12, 0), Meta's "layers.3.attention.wq.weight" (3), BERT's
// "encoder.layer.5..." (5). nullopt when there is none. The number is digits
// only, no sign, at most 18 of them (leading zeros allowed: "01" is 1).
// `prefix_end`, when given, receives where the number ends in `name`:
// name.substr(0, *prefix_end) is "model.layers.12".
std::optional<int64_t> layer_index(std::string_view name,
                                   size_t* prefix_end = nullptr);

// Whether `name` has a layer component ("layers", "layer", "h", "blocks",
// "block") that no number follows: a stacked (scanned) tensor holding every
// layer, as MaxText's "decoder.layers.mlp.wi_0.kernel".
bool is_stacked_layers_name(std::string_view name);

// The expert a per-expert tensor holds: the number that follows a name
// component "experts" ("model.layers.3.mlp.experts.17.down_proj.weight" ->
// 17, Mixtral's "block_sparse_moe.experts.7.w1.weight" -> 7). nullopt for
// stacked experts ("mlp.experts.gate_up_proj") and shared experts
// ("mlp.shared_experts.gate_proj.weight").
std::optional<int64_t> expert_index(std::string_view name);

// An input embedding, which the first pipeline stage holds: a name
// component that starts with "embed" (embed_tokens, embed_in, embeddings;
// not GPT-NeoX's output head "embed_out"), ends with "_embeddings" or
// "_embedding" (word_embeddings, tok_embeddings), or is "wte" or "wpe"
// (GPT-2's token and position embeddings).
bool is_embedding_name(std::string_view name);

// All of the above from one scan of `name` (what the functions above
// return; layer_prefix_end as layer_index's prefix_end).
struct NameFacts {
  std::optional<int64_t> layer;
  size_t layer_prefix_end = 0;
  std::optional<int64_t> expert;
  bool embedding = false;
  bool stacked = false;
};
NameFacts name_facts(std::string_view name);

// Every stage, or every expert rank: the tensor is not placed along them.
inline constexpr int64_t k_every = -1;

struct TensorPlacement {
  int64_t stage = k_every;        // 0 .. S-1, or k_every
  int64_t expert_rank = k_every;  // 0 .. R-1, or k_every

  bool operator==(const TensorPlacement&) const = default;
};

struct PlacementOptions {
  // AxisRoles::stage and ::expert, each located for diagnostics (the
  // command line passes "--mesh", or "--stage-axes" / "--expert-axes" when
  // given).
  Sourced<std::vector<std::string>> stage_axes;
  Sourced<std::vector<std::string>> expert_axes;
  // L, the decoder layers (ModelConfig::layers). nullopt: the largest layer
  // index in the manifest + 1.
  std::optional<int64_t> layers;
  // N, the routed experts of a layer (ModelConfig::experts). nullopt, or
  // fewer than the manifest's largest expert index + 1: that.
  std::optional<int64_t> experts;
};

struct Placement {
  std::vector<std::string> stage_axes;   // those of the mesh, mesh order
  int64_t stages = 1;                    // S: product of their sizes
  std::vector<std::string> expert_axes;  // those of the mesh, mesh order
  int64_t expert_ranks = 1;              // R: product of their sizes
  // L and N as used, when S x R > 1 (0 otherwise: not needed; L is 0 too
  // for a manifest with no layer index, N for one with no per-expert
  // tensor).
  int64_t layers = 0;
  bool layers_from_config = false;  // PlacementOptions::layers given
  int64_t experts = 0;
  // One per manifest tensor when S x R > 1; empty otherwise (every tensor
  // on the one group).
  std::vector<TensorPlacement> tensors;

  int64_t groups() const { return stages * expert_ranks; }
  bool placed() const { return groups() > 1; }
};

// The expert rank expert E of N lives on among R ranks: floor(E x R / N),
// computed in 128 bits (Megatron's and MaxText's contiguous blocks of N/R
// experts). REQUIRES: 0 <= E < N; R >= 1.
int64_t expert_rank_of(int64_t expert, int64_t ranks, int64_t experts);

// The stage and expert rank of each tensor of `manifest` (shardings[t] is
// tensor t's, as validate gives them):
// - stage, when S > 1 and the tensor's spec splits it over no stage axis:
//   a tensor with layer index i < L lives on stage floor(i x S / L)
//   (Megatron's contiguous blocks of L/S layers); an input embedding
//   (is_embedding_name) without a layer index on stage 0; a stacked layer
//   tensor (is_stacked_layers_name) on every stage; any other tensor
//   without a layer index (the final norm, the head), and any index >= L
//   (DeepSeek-V3's multi-token-prediction layer 61), on stage S - 1;
// - expert rank, when R > 1 and the tensor's spec splits it over no expert
//   axis: expert E of a per-expert tensor (expert_index) lives on rank
//   floor(E x R / N) (Megatron's and MaxText's contiguous blocks of N/R
//   experts); every other tensor on every rank.
// A spec that splits a tensor over a stage (expert) axis decides its layout
// there itself: the tensor is spread over the stages (ranks) as the spec
// says and is not placed along them.
// Example: L = 4, S = 2, N = 8, R = 4: "model.layers.2.mlp.experts.5.w1"
// lives on stage floor(2 x 2 / 4) = 1, rank floor(5 x 4 / 8) = 2.
// Errors (nullopt): S does not divide L, L > 0 [memory.stage-indivisible,
// at stage_axes' location]; R > N, N > 0 [memory.expert-axis-too-large, at
// expert_axes'].
// REQUIRES: shardings.size() == manifest.size(); the axes are the mesh's.
std::optional<Placement> place_tensors(
    const Manifest& manifest,
    const Mesh& mesh,
    const std::vector<TensorSharding>& shardings,
    const PlacementOptions& options,
    Diagnostics& diags);
// The same with each tensor's name_facts computed by the caller (facts[t]
// is tensor t's): one scan of the names for a caller that needs them too.
// REQUIRES: facts.size() == manifest.size()
std::optional<Placement> place_tensors(
    const Manifest& manifest,
    const Mesh& mesh,
    const std::vector<TensorSharding>& shardings,
    const PlacementOptions& options,
    std::span<const NameFacts> facts,
    Diagnostics& diags);

// What estimate_memory reads from each tensor's name and dtype, none of it
// depending on the mesh: computed once (memory_facts) it is shared by the
// estimates of many meshes (search).
struct MemoryFacts {
  enum class Kind : uint8_t {
    weight,         // floating point: trained when the recipe trains
    expert_weight,  // the same, of one expert (is_expert_weight)
    frozen,         // integer or bool: weights only
    scale,          // a quantization scale (is_quantization_scale)
  };
  std::vector<NameFacts> names;  // per tensor, in manifest order
  std::vector<Kind> kinds;
  // Per tensor: for a scale, the dtype of the weight it scales
  // (scaled_weight_name), when the manifest has that weight.
  std::vector<std::optional<DType>> scaled_dtype;
  // Per tensor: how many tensors it stands for, when the manifest holds
  // one representative of each class of tensors an estimate treats alike
  // (search's fold_tensor_classes): estimate_memory counts its bytes, and
  // it in its counts of tensors, that many times. Empty: one each.
  std::vector<int64_t> counts;

  int64_t count(size_t tensor) const {
    return counts.empty() ? 1 : counts[tensor];
  }
};
MemoryFacts memory_facts(const Manifest& manifest);

// One pipeline stage's activations per device: in HBM, and kept in host
// memory by an offloading remat policy.
// One stage's activations (workload.hpp's StageActivations) as the phases
// of the backward see them (docs/memory.md, "The peak"): what the layers,
// the embedding and the MTP modules saved for the backward, alive in both
// phases; the loss's own (the head's logits and their gradient); one
// layer's recomputed tensors; and what is offloaded to host memory.
struct ActivationLoad {
  int64_t saved_bytes = 0;
  int64_t loss_bytes = 0;
  int64_t recompute_bytes = 0;
  int64_t host_bytes = 0;
};

// What runs the step, for what it keeps beyond what the step allocates
// (docs/memory.md, "Per device, capacity, fits"):
//   xla      JAX/XLA: the buffers are planned when the step compiles; the
//            runtime's own reserve is outside the limit it reports
//   pytorch  PyTorch's caching allocator: what it reserves exceeds the
//            tensors allocated (cached blocks, rounding, fragmentation)
enum class Runtime { xla, pytorch };
std::string_view to_string(Runtime runtime);  // "xla", "pytorch"
std::optional<Runtime> parse_runtime(std::string_view text);
std::vector<std::string> runtime_names();  // for --help and its check

// Where a device's memory peaks (docs/memory.md, "The peak"): in a layer's
// backward (the saved activations, one layer's recompute, two layers
// gathered), in the loss (the saved activations, the head's logits and
// their gradient, the head gathered and the last layer prefetched), or in
// the optimizer
// step (one tensor's update beside the model states).
enum class MemoryPhase { layer_backward, loss, optimizer_step };
std::string_view to_string(MemoryPhase phase);

struct MemoryOptions {
  Recipe recipe = Recipe::params_only;
  // Each value a diagnostic may concern comes with where it came from (the
  // command line passes "--zero", "--data-axes", ...; a MaxText config its
  // weight_dtype key).
  //
  // The dtype the weights are held and trained in, for every floating-point
  // tensor that is not a quantization scale. nullopt: each tensor's own,
  // except that a recipe with optimizer state trains FP8 weights in bf16.
  Sourced<std::optional<DType>> param_dtype;
  // The dtype gradients are held in. nullopt: the recipe's (the param dtype,
  // or f32 for adam-fp32-grads). Ignored, with a warning, by a recipe that
  // counts no gradients.
  Sourced<std::optional<DType>> grad_dtype;
  // The optimizer state (docs/memory.md, "Optimizer state"), each nullopt
  // for the recipe's: adamw; moments in f32; an f32 master copy of the
  // weights held narrower (not with scaling-book). `moments_like_params`
  // (optax: nu, and mu unless mu_dtype says, have the params' dtype)
  // makes the param dtype the moments' default; `moment_dtype` is then
  // mu's alone (MaxText's mu_dtype).
  Sourced<std::optional<Optimizer>> optimizer;
  Sourced<std::optional<DType>> moment_dtype;
  bool moments_like_params = false;
  Sourced<std::optional<bool>> master;
  // The dtype the matmuls compute in: FSDP all-gathers a weight held wider
  // in it, and reduce-scatters its gradient in it (MaxText casts each f32
  // weight to `dtype`, bfloat16, before the layer uses it; torchtitan's
  // FSDP2 gathers in mixed_precision_param, bfloat16; docs/memory.md,
  // "Gather buffer"). A weight held narrower moves as held.
  DType compute_dtype = DType::bf16;
  // ZeRO stage: 1 shards optimizer state, 2 also gradients, 3 also
  // parameters, over the data axes a tensor's spec does not already use.
  Sourced<int> zero;
  // Mesh axes ZeRO shards over. Empty: the data role's axes (`roles`).
  Sourced<std::vector<std::string>> data_axes;
  // The role of each mesh axis (resolve_axis_roles). nullopt: by name
  // (default_role_axes), with `data_axes`, when given, as the data axes.
  // The data axes are ZeRO's (unless `data_axes` is given); a weight is kept
  // split over the tensor and stage axes at use, an expert weight also over
  // the expert axes, and gathered over every other axis its spec splits it
  // over (docs/memory.md, "Gather buffer"); the stage and expert axes place
  // tensors (place_tensors).
  std::optional<AxisRoles> roles;
  // For place_tensors: the decoder layers and routed experts when a model
  // config says (ModelConfig::layers, ModelConfig::experts), and where the
  // stage and expert axes came from, for its diagnostics.
  std::optional<int64_t> layers;
  std::optional<int64_t> experts;
  // The multi-token-prediction modules trained (ModelConfig::mtp_layers as
  // the workload sets it): with `layers`, a tensor of a layer index at or
  // beyond layers + mtp_layers (DeepSeek-V3's MTP layer 61 with 0) belongs
  // to a module the framework does not build and is not held. nullopt:
  // every tensor of the manifest is.
  std::optional<int64_t> mtp_layers;
  Location stage_axes_at;
  Location expert_axes_at;
  // The activations of a training step on each device of each pipeline
  // stage (workload.hpp's estimate_activations: StageActivations'
  // total_bytes and host_bytes), one entry per stage, or one for every
  // stage. Added to each group's total, so the most loaded group is the one
  // with the most model state and activations together. Empty: activations
  // are not counted (no workload).
  std::vector<ActivationLoad> activations;
  // HBM per device (from the topology, or --hbm); nullopt when unknown. A
  // total over capacity is reported where it came from ("--hbm",
  // "--topology v5p-128").
  Sourced<std::optional<int64_t>> hbm_bytes;
  // The RAM of a host and the devices it serves (the topology's
  // host_memory_bytes_per_chip x its chips a host); nullopt when unknown:
  // the host's share of offloaded tensors is then not checked.
  Sourced<std::optional<int64_t>> host_memory_bytes;
  int64_t devices_per_host = 1;
  // The runtime, and what it adds: `reserve`, what its allocator reserves
  // beyond the peak allocated, as a fraction of it; `headroom`, the
  // fraction of HBM kept free (what the runtime holds outside its
  // allocator, and activations without a workload). Each source says where
  // the figure comes from, for the output ("--headroom", a fit, a runtime's
  // documented limit).
  Runtime runtime = Runtime::xla;
  double reserve = 0;
  std::string reserve_source;
  double headroom = 0.1;
  std::string headroom_source = "--headroom";
  // Model states kept in host memory between steps and brought to HBM for
  // the optimizer step alone (MaxText's optimizer_memory_host_offload,
  // parameter_memory_host_offload); each located where it was asked.
  Sourced<bool> optimizer_host_offload{false, {}};
  Sourced<bool> parameter_host_offload{false, {}};
  // How many of the largest tensors to list.
  size_t largest = 20;
  // memory_facts(manifest) when computed already; nullptr: computed here.
  const MemoryFacts* facts = nullptr;
};

struct StateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
  // Not a state: the optimizer step's update of this tensor's optimizer
  // shard in fp32, the temporary of its fused Adam update (0 without
  // optimizer state).
  int64_t update = 0;

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

// One unit FSDP gathers at a time (docs/memory.md, "Gather buffer"): the
// tensors of one decoder layer, or one tensor of no layer (an embedding, the
// final norm, the head).
struct GatherUnit {
  // A layer's name up to its index ("model.layers.3"), or the tensor's name.
  std::string name;
  std::optional<int64_t> layer;  // nullopt for a tensor of no layer
  // Its weights gathered at use on one device of the group (split only over
  // the axes kept: tensor, stage, and expert axes for expert weights), in
  // the param dtype, and as much again for their gradients when the recipe
  // has gradients: sum over its tensors of elements x itemsize x (1 or 2).
  int64_t bytes = 0;
};

// The memory of one placement group's devices (one stage x expert rank).
struct GroupMemory {
  int64_t stage = 0;
  int64_t expert_rank = 0;
  StateBytes per_device;  // the group's most loaded device
  // The larger backward phase (`phase`, or the larger of the two when the
  // optimizer step is the peak): its gather buffer and its activations.
  MemoryPhase phase = MemoryPhase::layer_backward;
  // Of per_device, what lives in host memory until the optimizer step.
  int64_t hosted_params = 0;
  int64_t hosted_optimizer = 0;
  int64_t gather_buffer = 0;
  int64_t activations = 0;
  int64_t host_offload = 0;
  int64_t optimizer_step = 0;  // the largest tensor's StateBytes::update
  // per_device model states + max(gather_buffer + activations,
  // optimizer_step)
  int64_t total = 0;
  int64_t min_total = 0;  // the group's device with the smallest shards
};

struct MemoryEstimate {
  Recipe recipe = Recipe::params_only;
  // Tensors of untrained MTP modules (MemoryOptions::mtp_layers), not held.
  int64_t untrained_tensors = 0;
  // The optimizer state as resolved (with a recipe that has one): the
  // optimizer, the moments' dtypes (nullopt: the param dtype of each
  // tensor) and whether weights held narrower than f32 have an f32 master.
  Optimizer optimizer = Optimizer::adamw;
  std::optional<DType> first_moment_dtype = DType::f32;
  std::optional<DType> second_moment_dtype = DType::f32;
  bool master = true;
  int zero = 0;
  std::vector<std::string> data_axes;  // as used (default resolved)
  int64_t zero_shards = 1;             // product of the data axes' sizes
  // The most loaded device: in the most loaded placement group (`stage`,
  // `expert_rank`), the device at coordinate 0 of every other axis, which
  // holds the largest shard of every tensor. Without stage or expert axes,
  // device 0.
  StateBytes per_device;
  // Where tensors live along the stage and expert axes (place_tensors).
  Placement placement;
  // The most loaded group's coordinates (0, 0 without placement).
  int64_t stage = 0;
  int64_t expert_rank = 0;
  // Per stage, its most loaded group (stage 0 first); empty when the mesh
  // has no stage or expert axis of size > 1.
  std::vector<GroupMemory> stages;
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
  // Where the most loaded group peaks (the larger backward phase when the
  // optimizer step is the peak: gather_buffer and activations are its).
  MemoryPhase peak_phase = MemoryPhase::layer_backward;
  // The gather buffer of the most loaded group at that phase: in a unit's
  // backward FSDP holds the unit (a layer) gathered with, when training,
  // its gradients, and prefetches the unit before it (its weights alone):
  // the largest such sum over the group's units in execution order
  // (embeddings, layers 0, 1, ..., then the other tensors of no layer in
  // manifest order). In the loss, the head (and the embedding when it is
  // the head) with its gradients and the last layer's weights. 0 when no
  // parameter is split over an axis it is gathered over. (DeepSpeed's
  // largest_layer_memory, 4 x Lmax for fp16, counts one unit; PyTorch FSDP2
  // keeps two all-gather outputs alive; docs/sources.md#gather-buffer.)
  int64_t gather_buffer = 0;
  std::vector<GatherUnit> gather_units;  // those units, in order
  // The prefetched unit's weights the estimate left out: XLA's scheduler
  // holds a memory limit (its latency-hiding scheduler's memory_limit;
  // MaxText's large runs track memory pressure), so when the backward
  // with the prefetch does not fit it gathers the next unit after this
  // one's buffers are freed, and that all-gather is exposed (0: the
  // prefetch is counted; runtime xla only; docs/memory.md, "The peak").
  int64_t prefetch_dropped = 0;
  // The mesh axes their tensors are gathered over, in mesh order.
  std::vector<std::string> gather_axes;
  // The dtype a weight held wider than the compute dtype moves in
  // (options.compute_dtype), when the gather buffer holds one; else
  // nullopt (every weight gathered as held).
  std::optional<DType> gather_cast;
  // The mesh axes the spec of some tensor held splits it over, in mesh
  // order (a tensor axis none splits holds whole weights: estimate_step
  // warns).
  std::vector<std::string> split_axes;
  // The most loaded group's activations (options.activations) in HBM at
  // the peak phase (saved + loss or saved + recompute), and in host memory;
  // activations_counted: options.activations was given.
  bool activations_counted = false;
  int64_t activations = 0;
  int64_t host_offload = 0;
  // The optimizer step's temporaries on the most loaded group: optax
  // updates the parameters leaf by leaf, and XLA fuses each leaf's Adam
  // update into one loop whose outputs alias the donated state, so the step
  // holds one leaf's fp32 update beside the state: the largest
  // StateBytes::update. It runs after the backward has freed the gather
  // buffer and the activations.
  int64_t optimizer_step = 0;
  // Of per_device, what lives in host memory between steps (the optimizer
  // state, the params: MemoryOptions::*_host_offload), in HBM only for the
  // optimizer step.
  int64_t hosted_params = 0;
  int64_t hosted_optimizer = 0;
  // The peak: the larger of the backward (per_device model states less
  // what is hosted, + gather_buffer + activations) and the optimizer step
  // (every model state + optimizer_step), the larger backward phase's
  // gather buffer and activations.
  int64_t max_device_total = 0;
  // The most loaded group's device with the smallest shards (the last one).
  int64_t min_device_total = 0;
  // What the runtime holds at the peak: max_device_total x (1 + reserve),
  // rounded up (max_device_total when reserve is 0).
  Runtime runtime = Runtime::xla;
  double reserve = 0;
  std::string reserve_source;
  int64_t reserved_total = 0;
  std::optional<int64_t> hbm_bytes;
  double headroom = 0.1;
  std::string headroom_source;
  std::optional<int64_t> capacity_bytes;  // floor(hbm x (1 - headroom))
  std::optional<double> utilization;      // reserved_total / hbm
  std::optional<bool> fits;               // reserved_total <= capacity
  // capacity - reserved_total: the room left (negative: the overflow).
  std::optional<int64_t> headroom_left;
  // Host memory (docs/memory.md, "Host memory"): a device's host_offload +
  // hosted_params + hosted_optimizer x the devices a host serves, against
  // the host's RAM (options.host_memory_bytes; host_fits nullopt when it
  // is unknown).
  int64_t devices_per_host = 1;
  int64_t host_bytes_per_host = 0;
  std::optional<int64_t> host_memory_bytes;
  std::optional<bool> host_fits;
  // Of the tensors the most loaded group holds:
  std::vector<DtypeMemory> by_dtype;  // first appearance order
  // By model states, descending (a tensor standing for several, as
  // MemoryFacts::counts has it, is listed once).
  std::vector<TensorMemory> largest;
  int64_t uneven_tensors = 0;  // tensors whose shards differ
};

// Estimates per-device memory of `shardings` (validate_specs's result, one per
// manifest tensor: shardings[t] is tensor t's), per placement group
// (place_tensors): each group's devices hold the tensors placed on it and
// those on every group; the estimate is the most loaded group's. Reports an
// unknown data axis (error, at --data-axes), a param or grad dtype that is
// not floating point (error memory.dtype), a grad dtype the recipe does not
// use (warning memory.grad-dtype-unused), place_tensors's errors, devices
// of the most loaded group holding different amounts (warning
// memory.uneven) and a total over capacity (error memory.over-capacity).
// REQUIRES: shardings.size() == manifest.size(); 0 <= options.zero <= 3;
// 0 <= options.headroom < 1; options.activations has 0, 1 or as many
// entries as the stage axes have stages.
std::optional<MemoryEstimate> estimate_memory(
    const Manifest& manifest,
    const Mesh& mesh,
    const std::vector<TensorSharding>& shardings,
    const MemoryOptions& options,
    Diagnostics& diags);

// estimate_memory once per entry of `activations` (options.activations is
// not read): the model state, the same for each, is computed once (search's
// workload variations on one mesh). The model state's diagnostics go to
// `diags`, and then an empty result; each estimate's own (memory.uneven,
// memory.over-capacity, an overflow with its activations) to
// activation_diags at its index, and a nullopt estimate on an error.
// REQUIRES: as estimate_memory's; activation_diags.size() ==
// activations.size().
std::vector<std::optional<MemoryEstimate>> estimate_memory(
    const Manifest& manifest,
    const Mesh& mesh,
    const std::vector<TensorSharding>& shardings,
    const MemoryOptions& options,
    std::span<const std::vector<ActivationLoad>> activations,
    Diagnostics& diags,
    std::span<Diagnostics> activation_diags);

}  // namespace shardplan
