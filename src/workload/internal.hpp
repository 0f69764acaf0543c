#pragma once

// Layer 5, internal: what the files of the workload module share
// (include/shardplan/workload.hpp; docs/memory.md, "Activations";
// docs/step.md).
//
// Shared by all its files: Tag (MaxText's checkpoint names) and LayerFlops.
//
//   workload/remat.cpp        the remat policies, one row each: what a policy
//                             keeps (on the device or the host: Kept, kept)
//                             and, from the same row, what it recomputes
//                             (recomputed, reruns_forward); names, parsing
//   workload/activations.cpp  estimate_activations: the tensors a layer kind
//                             keeps, per stage and in flight; stage_terms
//   workload/collectives.cpp  the step's collectives as typed rows
//                             (CollectiveInputs, CollectiveRow), one function
//                             per kind of parallelism (fsdp_collectives, ...,
//                             pipeline_collectives); priced on their axes'
//                             links (price_collectives), hidden behind the
//                             compute (hide_behind_compute); their labels
//   workload/kernels.cpp      what a kernel's tiles compute beyond the model's
//                             FLOPs: flash attention's causal blocks, the
//                             grouped matmul's row tiles (docs/step.md,
//                             "Kernel tiles")
//   workload/step.cpp         estimate_step: FLOPs, compute, the collectives,
//                             the bubble, the roofline warnings, the
//                             bottleneck

#include <shardplan/cost.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/models.hpp>
#include <shardplan/workload.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shardplan::workload_detail {

// ---------------------------------------------------------------------------
// What a layer computes and keeps.

// MaxText's checkpoint names (checkpoint_name in layers/decoders.py,
// attentions.py, attention_mla.py, linears.py, moe.py) that its policies
// select by; `other` for a tensor no built-in policy names.
enum class Tag {
  other,
  decoder_layer_input,
  query_proj,
  key_proj,
  value_proj,
  context,
  out_proj,
  mlpwi_0,
  mlpwi_1,
  // The routed experts' up projection on MaxText's sparse_matmul path
  // (layers/moe.py gmm_up): named moe_mlpwi_1 alone, so no policy that
  // saves mlpwi_1 keeps it (its gate is named mlpwi_0 and moe_mlpwi_0, its
  // down mlpwo and moe_mlpwo).
  moe_mlpwi_1,
  mlpwi,
  mlpwo,
  mla_q,
  mla_kv,
  // The routed experts' gate and down projections (layers/moe.py): named
  // mlpwi_0 and moe_mlpwi_0, mlpwo and moe_mlpwo; a custom policy keeps
  // them where either name says.
  moe_mlpwi_0,
  moe_mlpwo,
};

// Forward matmul FLOPs per token of one decoder layer's parts, and the
// parameters (elements) they touch: 2 FLOPs per multiply-add, so a weight
// of P elements costs 2 P per token (MaxText's calculate_*_tflops).
struct LayerFlops {
  double qkv = 0;        // q, k, v projections (MLA: its low-rank chain)
  double attention = 0;  // causal scores and values: 2 seq a (dqk + dv) / 2
  double out = 0;        // the output projection
  double mlp_in = 0;     // gate and up (mlpwi_0, mlpwi_1) or fc_in
  double mlp_out = 0;    // down (mlpwo)
  double router = 0;     // MoE gate: 2 h E
  double routed = 0;     // of mlp_in + mlp_out, the routed experts' (x K)
  double key = 0;        // of qkv, the key projection's (0 with MLA)
  bool gated = true;     // the MLP's input is gate and up
  // Weights (elements) gathered for the layer: every expert, not top-k.
  double weights = 0;
  double expert_weights = 0;  // of those, routed experts' (split over ep)

  double matmuls() const { return qkv + out + mlp_in + mlp_out + router; }
  double forward() const { return matmuls() + attention; }
};

// ---------------------------------------------------------------------------
// Remat policies (remat.cpp): both answers below come from the policy's one
// row of the table there.

// Where a policy keeps a tensor: on the device, in host memory (an
// *_offloaded policy), or neither (recomputed in the backward).
struct Kept {
  bool device = false;
  bool host = false;
};

// Whether `policy` keeps a tensor tagged `tag`; `needed`: the backward needs
// it when nothing is recomputed (remat none); `core`: it is the attention
// core (scores, softmax, logsumexp), which selective recomputes.
// `custom`: a custom policy's placements.
Kept kept(RematPolicy policy,
          const CustomRemat& custom,
          Tag tag,
          bool needed,
          bool core);

// The forward FLOPs per token `policy` recomputes in one layer's backward:
// the parts whose outputs it does not keep (docs/step.md,
// "FLOPs").
double recomputed(RematPolicy policy,
                  const CustomRemat& custom,
                  const LayerFlops& flops);

// Whether `policy` runs the whole layer's forward again, its collectives
// with it (full: it keeps the layer input only).
bool reruns_forward(RematPolicy policy);

// ---------------------------------------------------------------------------
// The step's collectives (collectives.cpp).

// The names of `axes` that `mesh` has with a size above 1, in mesh order.
std::vector<std::string> present(const Mesh& mesh,
                                 const std::vector<std::string>& axes);

// What the collectives of a step are computed from; step.cpp fills it.
struct CollectiveInputs {
  const Mesh& mesh;
  const AxisRoles& roles;
  const ActivationEstimate& act;
  const StepInputs& in;
  const StepOptions& options;
  // Per token and layer, forward, by kind.
  const LayerFlops& dense;
  const LayerFlops& moe;
  int64_t experts_per_token = 0;
  double hidden = 0;            // h
  double act_bytes = 0;         // bytes of an activation element
  double microbatches = 1;      // M
  double layers_per_stage = 0;  // the model's layers / stages
  double dense_share = 0;       // of the layers, dense
  double moe_share = 0;         // and MoE
};

// One kind of collective of the step, before it is priced.
struct CollectiveRow {
  Parallelism role = Parallelism::fsdp;
  Collective op = Collective::all_gather;
  StepPhase phase = StepPhase::every_pass;
  std::vector<std::string> axes;  // with a size above 1, mesh order
  double bytes = 0;               // one call's group bytes (cost.hpp's V)
  double count = 0;               // calls per step on a device
  bool overlappable = false;      // the overlap rules let it hide
  // When it overlaps, the calls that stay exposed (the first, the last).
  double exposed_calls = 0;
};

// The rows of each kind of parallelism (docs/step.md, "Collectives"), in
// the step's order; a kind without axes gives rows without axes.
std::vector<CollectiveRow> fsdp_collectives(const CollectiveInputs& c);
std::vector<CollectiveRow> data_collectives(const CollectiveInputs& c);
std::vector<CollectiveRow> tensor_collectives(const CollectiveInputs& c);
std::vector<CollectiveRow> sequence_collectives(const CollectiveInputs& c);
std::vector<CollectiveRow> expert_collectives(const CollectiveInputs& c);
std::vector<CollectiveRow> pipeline_collectives(const CollectiveInputs& c);

// Every row above priced on the links of its axes (collective_cost); rows
// without axes, calls or bytes are left out. `links` in mesh order.
std::vector<StepCollective> price_collectives(const CollectiveInputs& c,
                                              std::span<const AxisLink> links);

// Overlapped collectives hide behind the compute of their phase: the
// forward a third of `compute_seconds`, the rest two thirds. What a phase's
// overlapped collectives take beyond its compute is exposed too, shared in
// proportion to their time.
void hide_behind_compute(std::vector<StepCollective>& collectives,
                         double compute_seconds);

// ---------------------------------------------------------------------------
// Kernel tiles (kernels.cpp).

// What a causal flash kernel on blocks of `block_q` x `block_kv` computes
// of a `seq` x `seq` score matrix, over the half the model's FLOPs count
// (seq^2 / 2): every block the mask does not hide whole, each whole. A
// block is min(block, seq) (MaxText's attention_op); 1 with a block of 0.
double causal_block_ratio(int64_t seq, int64_t block_q, int64_t block_kv);

// The row tiles a grouped matmul of `rows` rows in `groups` groups visits
// over the ceil(rows / tile) its rows fill: megablox's make_group_metadata
// adds a tile for each group that starts inside one, which a routing
// whose counts vary does for all but the first. 1 with a tile of 0.
double grouped_tile_ratio(int64_t rows, int64_t groups, int64_t tile);

// The rows of tokamax's TPU ragged_dot tile for a grouped matmul of `rows`
// x `k` by `groups` x `k` x `n`, pass 0 (forward), 1 (the input's
// gradient) or 2 (the weights'): its tuned table's entry for the shape,
// else its default, 128 (tokamax 0.0.10, ops/ragged_dot/pallas_mosaic_tpu.py).
int64_t tokamax_tile_rows(
    int pass, int64_t rows, int64_t k, int64_t n, int64_t groups);

}  // namespace shardplan::workload_detail
