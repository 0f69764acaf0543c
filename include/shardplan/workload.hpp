#pragma once

// Layer 5: the training step's workload and the activations it keeps on each
// device (docs/memory.md, "Activations", gives every
// formula with its source).
//
// For a model (models.hpp), a mesh whose axes have roles (mesh.hpp,
// AxisRoles) and a workload (sequence length, batch, microbatches, remat
// policy, attention kernel, sequence parallelism, pipeline interleaving),
// estimate_activations gives per device: the tensors each decoder layer keeps
// for the backward under the policy, by name, split by the axes that shard
// them; those times the layers a device holds and the microbatches in flight
// on it; the embedding's and the head's (the logits as the loss's kernel
// holds them: CrossEntropy); and what an offloading policy keeps in host
// memory instead. Pure
// computation: no text is parsed but the workload's own small values.
//
// What it offers, by the file that implements it (the files share
// src/workload/internal.hpp):
//   workload/remat.cpp
//     RematPolicy, parse_remat_policy, read_remat_policy,
//     remat_policy_names       the remat policies, one row each
//   workload/layout.cpp
//     ResidualLayout, parse_residual_layout, residual_layout
//                              the residual stream's layout, from the rules
//   workload/activations.cpp
//     Workload, AttentionKind, parse_attention   the step's inputs
//     ActivationEstimate, StageActivations, LayerActivations,
//     SavedTensor, ActivationTerm, TermPart
//     estimate_activations     what each device keeps for the backward
//     stage_terms              one stage's terms
//   workload/collectives.cpp
//     Parallelism, StepPhase, StepCollective, collective_label
//                              the step's collectives as typed rows
//   workload/step.cpp
//     StepOptions, StepInputs, step_inputs_for   what the step needs
//     StepEstimate, StepBottleneck, BottleneckKind, estimate_step,
//     estimate_step_band
//                              FLOPs, compute, bubble, MFU, bottleneck

#include <shardplan/cost.hpp>
#include <shardplan/diag.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/models.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/topology.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardplan {

// Which activations a decoder layer keeps for the backward; the rest are
// recomputed from what is kept (docs/memory.md, "Remat policies").
//   none        everything the backward needs (Korthikanti et al.'s "no
//               recompute": norm inputs, q/k/v, scores, masks, MLP inputs)
//   selective   none minus the attention core (scores, softmax, its dropout,
//               flash's logsumexp): Korthikanti et al.'s selective recompute
//   full        the layer input only (decoder_layer_input); MaxText's default
// and MaxText's policies (layers/decoders.py get_remat_policy), each keeping
// the layer input plus MaxText's checkpoint names:
//   minimal                           query_proj, key_proj, value_proj,
//                                     out_proj, mlpwi_0, mlpwi_1 (or mlpwi),
//                                     mlpwo
//   minimal_with_context              minimal + context (alias minimal_flash)
//   save_dot_with_context_except_mlp  q/k/v, context, out_proj
//   save_dot_except_mlpwi             q/k/v, out_proj, mlpwo
//   save_dot_except_mlp               q/k/v, out_proj
//   save_qkv_proj                     q/k/v
//   save_out_proj                     out_proj
//   qkv_proj_offloaded                q/k/v in host memory, not HBM
//   minimal_offloaded                 minimal's set in host memory
//   custom                            each checkpoint name where a
//                                     CustomRemat puts it: on the device,
//                                     offloaded to host memory, or
//                                     rematerialized (MaxText's
//                                     remat_policy 'custom')
// and torchtitan's op-level selective checkpointing (activation_checkpoint
// mode 'selective', selective_ac_option 'op'), which saves the output of
// every attention kernel and of every other matmul of a layer, in order:
//   selective_op                      the layer input, q, v, the attention's
//                                     output and logsumexp, the MLP's gate
//                                     (mlpwi_0) and down (mlpwo) projections
// Each is one row of the table in src/workload/remat.cpp, from which follow
// its name, what it keeps and where, and what its backward recomputes
// (docs/step.md, "FLOPs").
enum class RematPolicy {
  none,
  full,
  selective,
  minimal,
  minimal_with_context,
  save_dot_except_mlp,
  save_dot_except_mlpwi,
  save_dot_with_context_except_mlp,
  save_qkv_proj,
  save_out_proj,
  qkv_proj_offloaded,
  minimal_offloaded,
  custom,
  selective_op,
};

// Where MaxText's custom policy keeps a checkpoint name (base.yml: 'remat',
// 'device', 'offload': host memory, copied back for the backward).
enum class RematPlacement { remat, device, offload };
std::string_view to_string(RematPlacement placement);
std::optional<RematPlacement> parse_remat_placement(std::string_view text);

// The checkpoint names a custom policy places: MaxText's base.yml keys, in
// its order (decoder_layer_input, context, mlpwi, mlpwi_0, mlpwi_1, mlpwo,
// query_proj, key_proj, value_proj, qkv_proj, out_proj, mla_q, mla_kv), and
// the routed experts' moe_mlpwi_0, moe_mlpwi_1 and moe_mlpwo (layers/moe.py:
// the gate and down are also named mlpwi_0 and mlpwo).
const std::vector<std::string>& custom_remat_names();

// A custom policy: the placement of each name given; a name not given is
// rematerialized, but decoder_layer_input stays on the device (base.yml's
// defaults). qkv_proj and mlpwi name MaxText's fused projections
// (fused_qkv, fused_mlp), which the unfused layers shardplan models do not
// have.
struct CustomRemat {
  std::vector<std::pair<std::string, RematPlacement>> names;

  RematPlacement of(std::string_view name) const;
  bool operator==(const CustomRemat&) const = default;
};

// The policy of `text`: a name above, or "custom" with its placements,
// "custom:NAME=PLACE,NAME=PLACE" (PLACE: remat, device or offload);
// `custom` is filled for a custom policy. Reports an unknown policy
// [workload.unknown-remat], name or placement [workload.bad-remat] at `at`
// with "did you mean".
std::optional<RematPolicy> read_remat(std::string_view text,
                                      const Location& at,
                                      CustomRemat& custom,
                                      Diagnostics& diags);

// A policy as the output names it: its name, and for custom the names kept
// ("custom: decoder_layer_input=offload, query_proj=offload").
std::string describe_remat(RematPolicy policy, const CustomRemat& custom);

std::string_view to_string(RematPolicy policy);
// The names above, and "minimal_flash" for minimal_with_context (MaxText's
// deprecated alias).
std::optional<RematPolicy> parse_remat_policy(std::string_view text);
// parse_remat_policy, reporting an unknown name at `at` with the names
// and "did you mean" [workload.unknown-remat].
std::optional<RematPolicy> read_remat_policy(std::string_view text,
                                             const Location& at,
                                             Diagnostics& diags);
std::vector<std::string> remat_policy_names();  // for messages and --help

// plain keeps the seq x seq attention scores and their softmax (and the
// dropout mask and output with attention dropout); flash keeps only the
// softmax's logsumexp, fp32, one per head and query token (FlashAttention-2,
// Dao 2023, Algorithm 1: the backward recomputes the scores from Q, K, V
// and the logsumexp; the dropout mask is regenerated from the RNG state).
enum class AttentionKind { flash, plain };
std::string_view to_string(AttentionKind kind);  // "flash", "plain"
std::optional<AttentionKind> parse_attention(std::string_view text);

// How a layer's tensors outside tensor parallelism (the residual stream:
// the layer's input and output, the norms' inputs, dropout masks) lie on
// the tensor axes (docs/memory.md, "Activation layout").
//   replicated  whole on every tensor shard: plain Megatron tensor
//               parallelism (Shoeybi et al. 2019), no sequence parallelism
//   sequence    their tokens split over the tensor axes: Megatron's and
//               torchtitan's sequence parallelism (Korthikanti et al. 4.2.2)
//   embed       their embed dim split over the tensor axes: MaxText's
//               logical rule activation_embed -> tensor (base.yml)
// sequence and embed keep the same bytes, 1/t of replicated's; sequence
// needs the sequence divisible by the tensor shards, embed the width.
enum class ResidualLayout { replicated, sequence, embed };
std::string_view to_string(ResidualLayout layout);
std::optional<ResidualLayout> parse_residual_layout(std::string_view text);

// How the loss's softmax cross-entropy holds the head's logits
// (docs/memory.md, "The head"):
//   fused           XLA (JAX, MaxText): the fp32 cast, the softmax and its
//                   gradient fuse into the logits' consumers, so the logits
//                   are held once, in the activation dtype, and their
//                   gradient reuses the buffer
//   vocab_parallel  Megatron's vocab_parallel_cross_entropy: the logits and
//                   one fp32 copy, in which the softmax and its gradient are
//                   computed in place (Korthikanti et al. 4.3's 4*s*b*v/t)
//   eager           PyTorch's F.cross_entropy on logits.float() (torchtitan):
//                   log_softmax's fp32 output, which the loss saves, and the
//                   backward's two fp32 gradients, live together
enum class CrossEntropy { fused, vocab_parallel, eager };
std::string_view to_string(
    CrossEntropy kind);  // "fused", "vocab-parallel", ...
std::optional<CrossEntropy> parse_cross_entropy(std::string_view text);
std::vector<std::string> cross_entropy_names();

// How attention sees the whole sequence when sequence (context) axes split
// it (docs/memory.md, "Context parallelism"):
//   all_gather  K and V all-gathered over the sequence axes before the
//               kernel, their gradients reduce-scattered (MaxText's and
//               torchtitan's default; Megatron's --cp-comm-type all_gather)
//   ring        K and V passed around the ring a chunk at a time, behind
//               the attention's compute (MaxText's ring, Megatron's p2p,
//               its default; torchtitan's alltoall rotation)
//   ulysses     all-to-alls trade the sequence split for a heads split
//               around the attention (MaxText's ulysses, Megatron's a2a):
//               the heads on a device must divide over the sequence axes
enum class ContextStrategy { all_gather, ring, ulysses };
std::string_view to_string(ContextStrategy strategy);  // "all-gather", ...
std::optional<ContextStrategy> parse_context_strategy(std::string_view text);
std::vector<std::string> context_strategy_names();

// The workload's inputs as the caller got them, each with where it came
// from for diagnostics (the command line's flags: "--seq", "--batch", ...; a
// MaxText config's keys, at their line and column). The core never spells a
// flag.
struct Workload {
  Sourced<int64_t> seq;  // tokens per sequence, >= 1
  // The global batch (sequences per optimizer step), or MaxText's
  // per_device_batch_size as decimal text ("12", "0.5", "12.0"): global =
  // per_device_batch x every device of the mesh, which must be whole. Exactly
  // one of the two.
  Sourced<std::optional<int64_t>> batch;
  Sourced<std::string> per_device_batch;  // empty when not given
  // Gradient accumulation steps, and the pipeline's microbatches with a
  // stage axis: each step runs batch / microbatches sequences at a time.
  Sourced<int64_t> microbatches{1, {}};
  // A RematPolicy name. Default "full": MaxText's base.yml default
  // (remat_policy: 'full'), the policy that fits the most.
  Sourced<std::string> remat{"full", {}};
  Sourced<std::string> attention{"flash", {}};  // "flash" or "plain"
  // How the tensors outside tensor parallelism (the residual stream, the
  // norms' inputs, dropout masks) lie over the tensor axes; its location
  // says who decided: a flag, a rules file's activation_embed entry, or
  // nobody (empty: the default, replicated, which rules may replace; see
  // residual_layout).
  Sourced<ResidualLayout> residual{ResidualLayout::replicated, {}};
  // Virtual pipeline stages per device (Megatron's interleaved 1F1B); 1 is
  // plain 1F1B. > 1 needs a stage axis.
  Sourced<int64_t> stage_interleave{1, {}};
  // The dtype of the saved activations (MaxText's `dtype`, bf16 default).
  Sourced<std::string> activation_dtype{"bf16", {}};
  // The loss's kernel; its location says who decided (a flag, a MaxText
  // config, or nobody: Megatron's, the default).
  Sourced<CrossEntropy> cross_entropy{CrossEntropy::vocab_parallel, {}};
  // The loss over the tokens in this many chunks, one chunk's logits alive
  // at a time (MaxText's num_vocab_tiling; 1: all at once).
  Sourced<int64_t> vocab_tiles{1, {}};
  // How attention exchanges K and V over the sequence axes (with none,
  // nothing).
  Sourced<ContextStrategy> context_strategy{ContextStrategy::all_gather, {}};
  // Routed experts (docs/memory.md, "Mixture of experts"): capacity_factor
  // > 0 pads each expert's buffer to that many times its balanced share
  // and drops the rest (MaxText's dense_matmul path); <= 0 is dropless
  // routing (MaxText's -1, Megatron's and torchtitan's), where the hottest
  // expert rank receives routing_imbalance (>= 1) times the balanced
  // share. ragged_buffer: MaxText's sparse_matmul path with expert axes
  // receives its tokens into a buffer sized before routing: nullopt for
  // none (other frameworks size it from the counts), <= 0 for the worst
  // case (MaxText's ragged_buffer_factor -1), > 0 that many times the
  // balanced share.
  Sourced<double> capacity_factor{-1, {}};
  Sourced<double> routing_imbalance{1, {}};
  std::optional<Sourced<double>> ragged_buffer;
  // The framework keeps only the tensors the backward reads (JAX's remat
  // saves residuals: a policy's name on a tensor nothing reads, mlpwo's
  // output, keeps nothing); false: every tensor a policy names is kept
  // (PyTorch's selective checkpointing caches each saved op's output).
  bool residuals_only = false;
  // PyTorch without torch.compile (`--kernels eager`): each op saves its
  // own inputs, so an RMSNorm keeps its f32 upcast and its output before
  // the weight, and the gated MLP its product (docs/memory.md, "Eager
  // PyTorch"); false: fused kernels (XLA, torch.compile, Megatron's).
  bool eager_kernels = false;
  // Where the mesh came from ("--mesh"), for errors about its axes: a stage
  // axis that does not divide the layers, an expert axis larger than the
  // expert count.
  Location mesh_at;
};

// One tensor a decoder layer keeps, per device.
struct SavedTensor {
  // MaxText's checkpoint name where it has one (decoder_layer_input,
  // query_proj, key_proj, value_proj, context, out_proj, mlpwi_0, mlpwi_1,
  // mlpwi, mlpwo, query_wa_proj, mla_q, kv_wa_proj, mla_kv); otherwise
  // ours (docs/memory.md lists every name).
  std::string name;
  int64_t bytes_per_layer = 0;  // per device, one microbatch
  // The formula in the symbols of ActivationEstimate::symbols, e.g.
  // "2*s*b*h/t" (bytes per element first).
  std::string formula;
  std::string source;  // where the term comes from (docs/sources.md)
  // The mesh axes that split it, in mesh order: batch axes (data, expert),
  // sequence axes, tensor axes for heads and MLP width (and, with sequence
  // parallelism, for the regions outside tensor parallelism).
  std::vector<std::string> axes;
  bool offloaded = false;  // kept in host memory (an *_offloaded policy)
};

// What one decoder layer of a kind keeps, per device and microbatch.
struct LayerActivations {
  std::vector<SavedTensor> saved;  // in the layer's order, HBM and host
  int64_t bytes = 0;               // sum of the saved tensors in HBM
  int64_t host_bytes = 0;          // sum of the offloaded ones
};

// What a term of the estimate is part of: one decoder layer (per
// microbatch), the embedding (first stage, per microbatch), the head and
// MTP modules (last stage), or a stage's sums (stage_terms).
enum class TermPart { layer, embedding, head, stage };

// A term of the estimate, for the text table: its bytes, formula and source.
struct ActivationTerm {
  std::string name;  // "dense layer", "logits_fp32", "layers", ...
  int64_t bytes = 0;
  std::string formula;
  std::string source;
  TermPart part = TermPart::layer;
};

// One pipeline stage's activations (one entry without a stage axis).
struct StageActivations {
  int64_t stage = 0;
  int64_t dense_layers = 0;  // decoder layers of the stage, by kind
  int64_t moe_layers = 0;
  // Microbatches' worth of the stage's layers held at the peak (1F1B; see
  // ActivationEstimate::in_flight_factor); 1 without a stage axis.
  double in_flight = 1;
  int64_t layers_bytes = 0;     // its decoder layers x in_flight
  int64_t embedding_bytes = 0;  // first stage: the embedding's x in flight
  int64_t logits_bytes = 0;     // last stage: the head's, one microbatch
  int64_t mtp_bytes = 0;        // last stage: DeepSeek-V3's MTP modules
  // The backward of one layer at a time recomputes what the policy dropped:
  // that layer's bytes under remat none less what the policy keeps, for
  // the largest layer kind of the stage (0 with remat none).
  int64_t recompute_bytes = 0;
  // Beside it, the buffers a layer's backward exchanges tokens in
  // (ActivationEstimate::context_exchange_bytes).
  int64_t exchange_bytes = 0;
  int64_t host_bytes = 0;  // offloaded: layers' host bytes x in_flight
  // layers + embedding + mtp + max(logits, recompute + exchange): the
  // larger of the backward's two phases (docs/memory.md, "The peak"), the
  // loss and a layer's backward, each beside what the layers saved.
  int64_t total_bytes = 0;
};

// A stage's activations as the memory estimate's phases take them.
ActivationLoad activation_load(const StageActivations& stage);

struct ActivationEstimate {
  // The workload as resolved.
  RematPolicy remat = RematPolicy::full;
  CustomRemat custom_remat;  // with remat custom: each name's placement
  AttentionKind attention = AttentionKind::flash;
  // The residual stream's layout and who decided it (docs/memory.md,
  // "Activation layout"): a flag, a rules file's entry, or the default.
  ResidualLayout residual = ResidualLayout::replicated;
  std::string residual_source;
  CrossEntropy cross_entropy = CrossEntropy::vocab_parallel;
  std::string cross_entropy_source;  // a flag, a config, or empty (default)
  bool residuals_only = false;       // Workload::residuals_only
  int64_t vocab_tiles = 1;           // Workload::vocab_tiles
  // Context parallelism (sequence axes of `sequence_shards` > 1): the
  // strategy and who chose it, a layer's K and V and its q, k, v and
  // attention output on a device (one microbatch, in the activation
  // dtype), and what a layer's backward holds to exchange them
  // (docs/memory.md, "Context parallelism"; 0 without sequence axes).
  ContextStrategy context_strategy = ContextStrategy::all_gather;
  std::string context_strategy_source;
  int64_t context_kv_bytes = 0;
  int64_t context_qkvo_bytes = 0;
  int64_t context_exchange_bytes = 0;
  // Routed experts: the hottest expert rank's routed tokens (and the
  // buffers that hold them) over the balanced share, and where it comes
  // from: the capacity factor when > 0, else the routing imbalance with
  // expert axes, else 1. expert_exchange_bytes: MaxText's ragged receive
  // buffer, two of them in an MoE layer's backward (0 without one).
  double expert_load = 1;
  std::string expert_load_source;
  int64_t expert_exchange_bytes = 0;
  DType activation_dtype = DType::bf16;
  int64_t seq = 0;           // tokens per sequence
  int64_t global_batch = 0;  // sequences per optimizer step
  int64_t microbatches = 1;
  // Sequences of one microbatch on one device: global_batch /
  // (microbatches x batch shards), the batch shards being the product of
  // the data and expert axes' sizes.
  int64_t microbatch_size = 0;
  int64_t batch_shards = 1;
  int64_t sequence_shards = 1;  // product of the sequence axes' sizes
  int64_t tensor_shards = 1;    // product of the tensor axes' sizes
  int64_t stages = 1;           // product of the stage axes' sizes
  int64_t stage_interleave = 1;
  int64_t tokens = 0;  // per device and microbatch: microbatch_size x
                       // seq / sequence_shards
  // Pipeline: the decoder layers of a stage (layers / stages), and the
  // microbatches' worth of them the most loaded (first) stage holds at the
  // peak of 1F1B: min(stages, microbatches); interleaved with V virtual
  // stages, min(2 (S - 1) + (V - 1) S + 1, M V) / V chunks' worth, which is
  // 1 + (S - 1) / (S V) times S when M is large enough (Korthikanti et al.
  // 4.2.3; Megatron's schedules.py warm-up). 1 without a stage axis.
  int64_t layers_per_stage = 0;
  double in_flight_factor = 1;

  // What one decoder layer keeps, per kind (dense absent in an all-MoE
  // model and moe absent in a dense one).
  std::optional<LayerActivations> dense;
  std::optional<LayerActivations> moe;
  // dense->bytes, else moe->bytes: the per-layer figure of a one-kind model.
  int64_t per_layer_bytes = 0;

  // The most loaded stage's figures (HBM), the totals docs/memory.md,
  // "Activations", names.
  int64_t layers_bytes = 0;
  int64_t embedding_bytes = 0;
  int64_t logits_bytes = 0;
  int64_t mtp_bytes = 0;
  int64_t recompute_bytes = 0;
  int64_t host_offload_bytes = 0;  // host memory, not HBM
  // layers + embedding + mtp + max(logits, recompute)
  int64_t total_bytes = 0;
  int64_t max_stage = 0;  // the most loaded stage (first on a tie)

  std::vector<StageActivations> per_stage;  // every stage, in order
  // The terms of the estimate, each with its formula and source: "dense
  // layer: <name>" per saved tensor (" (host)" when offloaded) and "dense
  // layer", likewise "moe layer: ..." (TermPart::layer); token_ids,
  // embedding_dropout_mask (embedding); final_norm_input, head_input,
  // logits, logits_softcap, logits_fp32, mtp (head); each present when it
  // applies. A stage's sums are stage_terms'.
  std::vector<ActivationTerm> terms;
  // The formulas' symbols and their values: s (tokens of a sequence on a
  // device), seq, b (microbatch_size), h, a (heads), k (kv heads), d (head
  // dim), I (dense MLP width), t (tensor shards), v (vocab), ...
  std::vector<std::pair<std::string, int64_t>> symbols;
};

// The activations per device of `model` trained with `workload` on `mesh`,
// whose axes have `roles` (resolve_axis_roles). Reports (and returns
// nullopt), located at the workload's sources:
//   workload.bad-value          seq, batch, microbatches or stage_interleave
//                               < 1; a per-device batch that is not a
//                               positive decimal number
//   workload.batch-conflict     both a batch and a per-device batch
//   workload.missing-batch      neither
//   workload.batch-fractional   per-device batch x devices is not whole
//   workload.batch-indivisible  the batch does not divide over microbatches
//                               x the batch axes (data and expert)
//   workload.sequence-indivisible  seq does not divide over the sequence
//                               axes (with the sequence layout, x the
//                               tensor axes)
//   workload.unknown-remat      with "did you mean" (closest_match)
//   workload.unknown-attention, workload.unknown-dtype (a dtype that is not
//                               floating point too)
//   workload.interleave-without-stages  stage_interleave > 1, no stage axis
//   workload.stages-indivisible the stage axes x stage_interleave do not
//                               divide the decoder layers (at mesh_at, or
//                               stage_interleave's when > 1)
//   workload.expert-axis-too-large  the expert axes exceed the model's
//                               expert count (at mesh_at)
//   workload.overflow           a byte count beyond int64
// and the model's layer_structure errors. Never throws.
//
// Example (docs/memory.md works it): GPT-3 175B's layer (h 12288, a 96,
// s 2048, b 1, plain attention, dropout 0.1, no recompute) on tp:8 keeps
// s*b*h*(10 + 24/8 + 5*a*s/(h*8)) = 2048 * 12288 * 23 = 578,813,952 bytes,
// Korthikanti et al.'s "tensor parallel" row.
// REQUIRES: `model` as read_hf_config validates it; `roles` name axes of
// `mesh`.
std::optional<ActivationEstimate> estimate_activations(const ModelConfig& model,
                                                       const Mesh& mesh,
                                                       const AxisRoles& roles,
                                                       const Workload& workload,
                                                       Diagnostics& diags);

// The residual stream's layout for a workload planned by `rules` on `mesh`:
// `given` when someone decided it (its location is set: a flag); else
// embed when the rules' first activation_embed entry names a tensor axis
// (`roles`) of `mesh` larger than 1, located at that entry ("RULES
// /logical_axis_rules/N": MaxText's base.yml maps activation_embed to
// tensor and tensor_transpose); else `given` (replicated, the default).
Sourced<ResidualLayout> residual_layout(const Sourced<ResidualLayout>& given,
                                        const RuleSet& rules,
                                        const Mesh& mesh,
                                        const AxisRoles& roles);

// ---------------------------------------------------------------------------
// The training step's time (docs/step.md gives
// every formula with its source): the FLOPs a device computes, the
// collectives it runs on the links of their mesh axes, what overlaps the
// compute, the pipeline bubble, and the step time, tokens per second and
// MFU that follow.

// The estimate's settable constants, each named in StepEstimate::
// assumptions with its value and source.
// A flash attention kernel's blocks (MaxText's splash attention on a TPU:
// sa_block_q, sa_block_kv, ..., base.yml's 512 each): the kernel skips a
// block the causal mask hides and computes one it crosses whole, so a
// sequence of n blocks computes n (n + 1) / 2 of n^2 blocks where the
// model's FLOPs count half (docs/step.md, "Kernel tiles"). The backward's
// dK and dV kernel runs on its own blocks, and computes dQ too when fused
// (sa_use_fused_bwd_kernel); otherwise a dQ kernel on its own. 0: a block
// too small to matter.
struct FlashBlocks {
  int64_t q = 0;
  int64_t kv = 0;
  int64_t q_dkv = 0;
  int64_t kv_dkv = 0;
  int64_t q_dq = 0;
  int64_t kv_dq = 0;
  bool fused_backward = false;
  Location at;  // who set them: a config's key, or its defaults
};

// The routed experts' grouped matmul kernel on a TPU (MaxText's sparse_matmul
// path): megablox (and tokamax's v2 kernel) visit ceil(m / tm) row tiles plus
// one more for each group that starts inside a tile, computing each whole
// (megablox's make_group_metadata); `rows` are the tiles' rows, for the
// gate and up projections (wi) and the down projection (wo), in the
// forward, the input's gradient (dlhs) and the weights' (drhs); 0: tokamax's
// own choice for the shape (its tuned table, else 128 rows).
struct GroupedTiles {
  std::array<std::array<int64_t, 3>, 2> rows{};  // [wi, wo][fwd, dlhs, drhs]
  std::string kernel;                            // "megablox" or "tokamax"
  Location at;
};

struct StepOptions {
  // The fraction of the bf16 peak the weights' matmuls reach, and the
  // fraction the attention kernel's score and value matmuls reach (flash:
  // causal blocks, softmax between). 1: the roofline (the scaling book's
  // convention). The topology's figures when it has them (fitted to
  // published runs by bench/fit_step.py, docs/fidelity.md), else 1; a
  // flag (--matmul-efficiency, --attention-efficiency) wins. The source is
  // the assumption's.
  Sourced<double> matmul_efficiency{1.0, {}};
  Sourced<double> attention_efficiency{1.0, {}};
  // How far the efficiencies may be off, as a fraction: the band
  // (StepEstimate::step_seconds_low/high) is the step with both at
  // efficiency x (1 + spread), capped at 1, and x (1 - spread). The
  // topology's efficiency_spread for fitted figures (the fit's largest
  // error, at least 5%; 25% from fewer than three runs), 0.7 for the
  // roofline (a matmul at 0.3 of the peak to 1), 0 for a flag's.
  Sourced<double> efficiency_spread{0.0, {}};
  // Overlap rules (docs/step.md, "Overlap"): FSDP gathers prefetched
  // behind the previous layer's compute, gradient reduction behind the
  // backward (both but the first and last layer); tensor-parallel and
  // expert collectives on the critical path.
  bool overlap_fsdp = true;
  bool overlap_grad_reduce = true;
  bool overlap_tensor = false;
  bool overlap_expert = false;
  // PyTorch in eager mode (torchtitan without torch.compile): the norms,
  // the rotary embedding, the gated MLP's product and dropout run as
  // separate kernels, each reading and writing HBM, some in f32
  // (docs/step.md, "Memory-bound work"). false: fused kernels (XLA,
  // torch.compile, Megatron's Transformer Engine and apex kernels).
  bool eager_kernels = false;
  // The weights' matmuls in FP8 (--matmul-dtype fp8, MaxText's fp8
  // quantization): at the chip's FP8 peak, with their inputs and output
  // gradients cast to FP8 (docs/step.md, "FP8"); the attention kernel stays
  // in bf16. The source says who chose it.
  Sourced<bool> fp8_matmuls{false, {}};
  // The routed experts as one grouped GEMM (torch._grouped_mm, as
  // torchtitan calls it): at the chip's measured grouped_curve where it has
  // one; false: a GEMM an expert, each at its rows on the matmul curve
  // (Transformer Engine's GroupedLinear) (docs/step.md, "Matmul shapes").
  bool grouped_gemm = false;
  // The kernels' tiles where they cost time on a TPU (MaxText's config
  // sets them; nullopt: none priced).
  std::optional<FlashBlocks> flash_blocks;
  std::optional<GroupedTiles> grouped_tiles;
};

// The kind of parallelism a collective of the step serves: FSDP's gathers
// and reduce-scatters, pure data parallelism's all-reduce, tensor
// parallelism's (with sequence parallelism, its reduce-scatters and
// gathers), sequence (context) parallelism's, the experts' all-to-all, the
// pipeline's sends.
enum class Parallelism { fsdp, data, tensor, sequence, expert, pipeline, host };

// When a collective runs: in the forward, in the backward, reducing the
// gradients (during the backward), or in every pass (forward, backward and
// a recompute). The forward's overlapped collectives hide behind the
// forward's compute, the others behind the backward's (docs/step.md,
// "Overlap").
enum class StepPhase { forward, backward, gradients, every_pass };

// One kind of collective of the step.
struct StepCollective {
  Parallelism role = Parallelism::fsdp;
  Collective op = Collective::all_gather;
  StepPhase phase = StepPhase::every_pass;
  std::vector<std::string> mesh_axes;  // in mesh order
  LinkClass link = LinkClass::none;
  // One call's group bytes (cost.hpp's V): the gathered array, the summed
  // buffer, the all-to-all's whole array, a send's bytes.
  int64_t bytes_per_device = 0;
  int64_t count = 0;   // calls per step on a device
  double seconds = 0;  // all calls
  bool overlapped = false;
  double exposed_seconds = 0;  // what the compute does not hide
};

// A collective's label in the reports (the JSON's `what`): its kind of
// parallelism ("fsdp", "data", "tp", "context", "expert", "pipeline"), its
// operation ("all-gather", ..., "send") and its phase unless it runs in
// every pass: "fsdp all-gather (forward)", "data all-reduce (gradients)",
// "tp all-reduce", "pipeline send".
std::string collective_label(const StepCollective& collective);

// The largest part of the step: the compute, all exposed communication, or
// the pipeline bubble (docs/step.md, "Step").
enum class BottleneckKind { compute, communication, bubble };

struct StepBottleneck {
  BottleneckKind kind = BottleneckKind::compute;
  // The part's time: compute_seconds, exposed_comm_seconds or
  // bubble_seconds.
  double seconds = 0;
  // communication: the index in StepEstimate::collectives of the most
  // exposed collective (the first of equals).
  std::optional<size_t> collective;
  // communication, when that collective is data parallelism's all-reduce
  // over DCN (or mixed links) across TPU slices: the scaling book's test
  // (docs/sources.md#dcn), a slice's tokens per microbatch against peak / DCN
  // bandwidth per device.
  struct SliceBatch {
    double tokens = 0;
    double critical = 0;
  };
  std::optional<SliceBatch> slice_batch;
};

struct StepEstimate {
  int64_t tokens = 0;  // global tokens per step: global batch x seq
  // MaxText's convention (calculate_tflops_training_per_device): 3 x the
  // forward matmul FLOPs of the active weights (experts at top-k, the head)
  // plus causal attention, for the whole step on every device.
  double model_flops = 0;
  // What one device computes: model FLOPs' share plus the remat policy's
  // recomputation, on the most loaded stage.
  double flops_per_device = 0;
  // flops_per_device / (peak x efficiency), the attention kernel's part at
  // its own efficiency.
  double matmul_seconds = 0;
  double attention_flops_per_device = 0;  // of flops_per_device
  double memory_seconds = 0;   // elementwise work and the optimizer update
  double compute_seconds = 0;  // matmul + memory
  std::vector<StepCollective> collectives;
  double comm_seconds = 0;
  double exposed_comm_seconds = 0;
  double bubble_seconds = 0;
  double step_seconds = 0;
  double tokens_per_second_per_device = 0;
  double mfu = 0;
  // The band from StepOptions::efficiency_spread: the step at the faster
  // and the slower end, and the tokens/s and MFU that follow (low step:
  // high tokens/s). Equal to the point estimate without a spread.
  double step_seconds_low = 0;
  double step_seconds_high = 0;
  // The tokens/s and MFU of a step of `seconds` (a band's end): they scale
  // as one over the step.
  double tokens_per_second_at(double seconds) const {
    return seconds > 0 ? tokens_per_second_per_device * step_seconds / seconds
                       : tokens_per_second_per_device;
  }
  double mfu_at(double seconds) const {
    return seconds > 0 ? mfu * step_seconds / seconds : mfu;
  }
  // The largest part of the step; the reports word it ("compute-bound:
  // compute 10.9 s of the 13.8 s step").
  StepBottleneck bottleneck;
  // Tensor axes (size > 1) the specs split no tensor over
  // (StepInputs::split_axes): the estimate counts each as tensor
  // parallelism, but its devices hold whole weights and would repeat the
  // same matmuls, so the estimate does not hold [step.tensor-axis-unsplit].
  std::vector<std::string> unsplit_tensor_axes;
  // Every constant the estimate assumed: its name, value and source.
  struct Assumption {
    std::string name;
    std::string value;
    std::string source;
  };
  std::vector<Assumption> assumptions;
};

// What the step estimate reads beside the model and the activations.
struct StepInputs {
  const Topology* topology = nullptr;  // its bf16 peak and HBM bandwidth
  // The links of every mesh axis (MeshLayout::links), in mesh order.
  std::span<const AxisLink> links;
  // The axes FSDP gathers the weights over at use (MemoryEstimate::
  // gather_axes: from the specs).
  std::vector<std::string> gather_axes;
  // The axes the specs split some tensor over (MemoryEstimate::
  // split_axes); nullopt: not known, not checked.
  std::optional<std::vector<std::string>> split_axes;
  // Bytes per element of the weights as FSDP moves them (the param dtype,
  // or the compute dtype when that is narrower: MemoryEstimate::
  // gather_cast) and of their gradients.
  int64_t weight_bytes = 2;
  int64_t grad_bytes = 2;
  // Bytes of the model state a device updates in the optimizer step (its
  // params + grads + optimizer state), read and written once.
  int64_t optimizer_state_bytes = 0;
  // Of those, the gradients' (MemoryEstimate::per_device.grads): each
  // microbatch's weight gradients are added into them.
  int64_t grad_state_bytes = 0;
  // The backward prefetches the next layer's weights (false when the
  // memory fits only without: MemoryEstimate::prefetch_dropped; its
  // all-gathers are then exposed).
  bool backward_prefetch = true;
  // A device's link to its host's memory, one way (the topology's
  // host_bytes_per_s_per_chip over its devices; 0 when unknown), and the
  // model state kept there between steps (MemoryEstimate::hosted_params +
  // hosted_optimizer), moved in and out around the optimizer step.
  double host_bytes_per_s = 0;
  int64_t hosted_state_bytes = 0;
  // PyTorch's tensor parallelism (Megatron, MemoryEstimate::runtime
  // pytorch): with sequence parallelism the backward all-gathers the QKV
  // and FC1 inputs again for their weight gradients (Megatron's
  // LinearWithGradAccumulationAndAsyncCommunication keeps the scattered
  // input), and a pipeline send moves 1/t of the activation, gathered on
  // the receiver over the tensor group (--scatter-gather-tensors-in-
  // pipeline; inherent with sequence parallelism).
  bool pytorch_tensor_parallel = false;
  // The optimizer state is sharded over the data axes (ZeRO 1 or 2,
  // Megatron's distributed optimizer): pure data parallelism
  // reduce-scatters the gradients and all-gathers the updated weights
  // instead of all-reducing the gradients.
  bool sharded_optimizer = false;
  // Where the mesh came from ("--mesh"), for the roofline warnings.
  Location mesh_at;
  // Where the topology comes from ("--topology"), named by step.no-figure
  // when `topology` is null (a topology is named by its own name).
  Location topology_at;
};

// The step's inputs for a plan whose memory is `memory`: the gather axes,
// the weights' and gradients' bytes per element as trained (FP8 weights
// train in bf16 unless the memory estimate says otherwise) and the state
// the optimizer updates.
StepInputs step_inputs_for(const ModelConfig& model,
                           const Topology& topology,
                           std::span<const AxisLink> links,
                           const MemoryEstimate& memory,
                           Location mesh_at);

// The training step of `model` under `activations`' workload on `mesh`.
// nullopt (reported) when the topology lacks a figure the estimate needs
// [step.no-figure], or when the step's tokens overflow int64
// [step.overflow]. Warns, at inputs.mesh_at, from the scaling book's
// rooflines (docs/sources.md#rooflines): a microbatch's tokens per device
// below an FSDP axis's critical batch, peak / the axis's bandwidth
// [step.below-critical-batch]; tensor axes wider than MLP width x their
// bandwidth / peak [step.tensor-too-wide]; an FSDP or tensor axis over DCN
// [step.over-dcn]; a tensor axis no spec splits a tensor over
// [step.tensor-axis-unsplit] (StepEstimate::unsplit_tensor_axes). REQUIRES:
// `activations` from estimate_activations on
// the same model, mesh and roles; inputs.links.size() == mesh.axes.size().
std::optional<StepEstimate> estimate_step(const ModelConfig& model,
                                          const Mesh& mesh,
                                          const AxisRoles& roles,
                                          const ActivationEstimate& activations,
                                          const StepInputs& inputs,
                                          const StepOptions& options,
                                          Diagnostics& diags);

// The band around `step` (estimate_step's, on the same inputs): its
// step_seconds_low and _high, the step with both efficiencies x (1 +
// options.efficiency_spread), capped at 1, and x (1 - spread). Two more
// estimates, so only where a report shows the band (plan, memory; not
// search's candidates). Nothing without a spread.
void estimate_step_band(const ModelConfig& model,
                        const Mesh& mesh,
                        const AxisRoles& roles,
                        const ActivationEstimate& activations,
                        const StepInputs& inputs,
                        const StepOptions& options,
                        StepEstimate& step);

// The terms of one stage's activations for a table: the layer terms; the
// embedding's on the first stage and the head's on the last; then the
// stage's sums (TermPart::stage): "layers" (its decoder layers x the
// microbatches in flight), "embedding", "head", "recompute" (those above 0;
// the head's "mtp" term is its own sum), "total", and "host_offload" when a
// policy offloads. REQUIRES: 0 <= stage < estimate.per_stage.size().
std::vector<ActivationTerm> stage_terms(const ActivationEstimate& estimate,
                                        int64_t stage);

}  // namespace shardplan
