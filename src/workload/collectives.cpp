// The training step's collectives (include/shardplan/workload.hpp;
// docs/step.md, "Collectives" and "Overlap"): one function per kind of
// parallelism gives its typed rows (role, operation, phase, axes, bytes,
// calls, whether it may overlap); then each row is priced on its axes'
// links and hidden behind the compute of its phase. A row's label is made
// from its fields, never read back.

#include "workload/internal.hpp"

#include <shardplan/workload.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardplan {

namespace {

std::string_view role_word(Parallelism role) {
  switch (role) {
    case Parallelism::fsdp:
      return "fsdp";
    case Parallelism::data:
      return "data";
    case Parallelism::tensor:
      return "tp";
    case Parallelism::sequence:
      return "context";
    case Parallelism::expert:
      return "expert";
    case Parallelism::pipeline:
      return "pipeline";
    case Parallelism::host:
      return "host";
  }
  return "?";
}

std::string_view op_word(Collective op) {
  switch (op) {
    case Collective::all_gather:
      return "all-gather";
    case Collective::reduce_scatter:
      return "reduce-scatter";
    case Collective::all_reduce:
      return "all-reduce";
    case Collective::all_to_all:
      return "all-to-all";
    case Collective::collective_permute:
      return "permute";
    case Collective::send_recv:
      return "send";
    case Collective::host_copy:
      return "copy";
  }
  return "?";
}

std::string_view phase_suffix(StepPhase phase) {
  switch (phase) {
    case StepPhase::forward:
      return " (forward)";
    case StepPhase::backward:
      return " (backward)";
    case StepPhase::gradients:
      return " (gradients)";
    case StepPhase::every_pass:
      return "";
  }
  return "";
}

}  // namespace

std::string collective_label(const StepCollective& c) {
  if (c.role == Parallelism::host) {
    switch (c.phase) {
      case StepPhase::forward:
        return "host offload (forward)";
      case StepPhase::backward:
        return "host reload (backward)";
      case StepPhase::gradients:
      case StepPhase::every_pass:
        break;
    }
    return "host states (optimizer step)";
  }
  return fmt::format(
      "{} {}{}", role_word(c.role), op_word(c.op), phase_suffix(c.phase));
}

namespace workload_detail {

namespace {

// A layer's weights as FSDP gathers them, split over the tensor axes,
// routed experts also over the expert axes; elements, averaged over the
// layer kinds.
double layer_weights(const CollectiveInputs& c) {
  const auto ep = static_cast<double>(c.roles.size(c.mesh, AxisRole::expert));
  return c.dense_share * c.dense.weights
         + c.moe_share
               * (c.moe.weights - c.moe.expert_weights
                  + c.moe.expert_weights / ep);
}

double tensor_shards(const CollectiveInputs& c) {
  return static_cast<double>(c.roles.size(c.mesh, AxisRole::tensor));
}

// A microbatch's activations on a device: its tokens x h.
double micro_bytes(const CollectiveInputs& c) {
  return static_cast<double>(c.act.tokens) * c.hidden * c.act_bytes;
}

}  // namespace

std::vector<std::string> present(const Mesh& mesh,
                                 const std::vector<std::string>& axes) {
  std::vector<std::string> out;
  for (const MeshAxis& axis : mesh.axes) {
    if (axis.size > 1
        && std::find(axes.begin(), axes.end(), axis.name) != axes.end()) {
      out.push_back(axis.name);
    }
  }
  return out;
}

// FSDP: a layer's weights gathered at use, forward and again in the
// backward, and its gradients reduce-scattered; per layer and microbatch.
// Prefetched gathers expose the forward's first call; the gradients' last.
std::vector<CollectiveRow> fsdp_collectives(const CollectiveInputs& c) {
  const std::vector<std::string> gather = present(c.mesh, c.in.gather_axes);
  const double weights = layer_weights(c);
  const double t = tensor_shards(c);
  const double gathered = weights / t * static_cast<double>(c.in.weight_bytes);
  const double calls = c.layers_per_stage * c.microbatches;
  const bool prefetch = c.options.overlap_fsdp;
  return {
      {Parallelism::fsdp,
       Collective::all_gather,
       StepPhase::forward,
       gather,
       gathered,
       calls,
       prefetch,
       1},
      {Parallelism::fsdp,
       Collective::all_gather,
       StepPhase::backward,
       gather,
       gathered,
       calls,
       prefetch && c.in.backward_prefetch,
       0},
      {Parallelism::fsdp,
       Collective::reduce_scatter,
       StepPhase::gradients,
       gather,
       weights / t * static_cast<double>(c.in.grad_bytes),
       calls,
       c.options.overlap_grad_reduce,
       1},
  };
}

// Pure data parallelism (the data axes FSDP does not gather over): the
// stage's gradients on a device all-reduced once a step, behind the
// backward but the last layer's share.
std::vector<CollectiveRow> data_collectives(const CollectiveInputs& c) {
  const std::vector<std::string> gather = present(c.mesh, c.in.gather_axes);
  std::vector<std::string> pure_data;
  for (const std::string& axis : present(c.mesh, c.roles.data)) {
    if (std::find(gather.begin(), gather.end(), axis) == gather.end()) {
      pure_data.push_back(axis);
    }
  }
  double stage_weights = layer_weights(c) * c.layers_per_stage;
  for (const std::string& axis : gather) {
    stage_weights /= static_cast<double>(c.mesh.find(axis)->size);
  }
  const double elements = stage_weights / tensor_shards(c);
  const double last_layer = 1 / std::max(c.layers_per_stage, 1.0);
  if (!c.in.sharded_optimizer) {
    return {{Parallelism::data,
             Collective::all_reduce,
             StepPhase::gradients,
             std::move(pure_data),
             elements * static_cast<double>(c.in.grad_bytes),
             1,
             c.options.overlap_grad_reduce,
             last_layer}};
  }
  // A sharded optimizer: the gradients reduce-scattered behind the
  // backward, the updated weights gathered in the weights' dtype behind the
  // next forward (Megatron's --overlap-param-gather, with the FSDP
  // prefetch's overlap), the first layer's exposed.
  return {{Parallelism::data,
           Collective::reduce_scatter,
           StepPhase::gradients,
           pure_data,
           elements * static_cast<double>(c.in.grad_bytes),
           1,
           c.options.overlap_grad_reduce,
           last_layer},
          {Parallelism::data,
           Collective::all_gather,
           StepPhase::forward,
           pure_data,
           elements * static_cast<double>(c.in.weight_bytes),
           1,
           c.options.overlap_fsdp,
           last_layer}};
}

// Tensor parallelism: the attention and MLP outputs summed over the tensor
// axes, forward and backward, and again when the policy reruns the forward;
// with sequence parallelism a reduce-scatter and an all-gather each time.
std::vector<CollectiveRow> tensor_collectives(const CollectiveInputs& c) {
  const std::vector<std::string> axes = present(c.mesh, c.roles.tensor);
  const double per_layer = reruns_forward(c.act.remat) ? 6 : 4;
  const double calls = per_layer * (c.layers_per_stage * c.microbatches);
  const bool overlap = c.options.overlap_tensor;
  const double bytes = micro_bytes(c);
  if (c.act.residual == ResidualLayout::replicated) {
    return {{Parallelism::tensor,
             Collective::all_reduce,
             StepPhase::every_pass,
             axes,
             bytes,
             calls,
             overlap,
             0}};
  }
  // Megatron's backward gathers the QKV and FC1 inputs again: two more
  // all-gathers a layer.
  const double regathers = c.in.pytorch_tensor_parallel ? 2 : 0;
  return {
      {Parallelism::tensor,
       Collective::reduce_scatter,
       StepPhase::every_pass,
       axes,
       bytes,
       calls,
       overlap,
       0},
      {Parallelism::tensor,
       Collective::all_gather,
       StepPhase::every_pass,
       axes,
       bytes,
       calls,
       overlap,
       0},
      {Parallelism::tensor,
       Collective::all_gather,
       StepPhase::backward,
       axes,
       bytes,
       regathers * c.layers_per_stage * c.microbatches,
       overlap,
       0},
  };
}

// Sequence (context) parallelism: attention's exchange of K and V over the
// sequence axes, per layer and microbatch (docs/step.md, "Context
// parallelism"). all-gather: K and V gathered in the forward and again in
// the backward, their gradients reduce-scattered, on the critical path (the
// kernel waits for them). ring: C - 1 steps passing a chunk of K and V
// (the backward also its gradients) behind the attention's compute.
// ulysses: all-to-alls of q, k, v and the output, forward and backward,
// on the critical path. A forward rerun by the policy exchanges again.
std::vector<CollectiveRow> sequence_collectives(const CollectiveInputs& c) {
  const std::vector<std::string> axes = present(c.mesh, c.roles.sequence);
  const auto C = static_cast<double>(c.act.sequence_shards);
  if (axes.empty() || C <= 1) {
    return {};
  }
  const double layers = c.layers_per_stage * c.microbatches;
  const double forwards = reruns_forward(c.act.remat) ? 2 : 1;
  const auto kv = static_cast<double>(c.act.context_kv_bytes);
  const auto qkvo = static_cast<double>(c.act.context_qkvo_bytes);
  auto row = [&](Collective op,
                 StepPhase phase,
                 double bytes,
                 double calls,
                 bool overlap) {
    return CollectiveRow{
        Parallelism::sequence, op, phase, axes, bytes, calls, overlap, 0};
  };
  switch (c.act.context_strategy) {
    case ContextStrategy::all_gather:
      return {
          row(Collective::all_gather,
              StepPhase::forward,
              C * kv,
              forwards * layers,
              false),
          row(Collective::all_gather,
              StepPhase::backward,
              C * kv,
              layers,
              false),
          row(Collective::reduce_scatter,
              StepPhase::backward,
              C * kv,
              layers,
              false),
      };
    case ContextStrategy::ring:
      return {
          row(Collective::send_recv,
              StepPhase::forward,
              kv,
              (C - 1) * forwards * layers,
              true),
          row(Collective::send_recv,
              StepPhase::backward,
              2 * kv,
              (C - 1) * layers,
              true),
      };
    case ContextStrategy::ulysses:
      return {
          row(Collective::all_to_all,
              StepPhase::forward,
              qkvo,
              forwards * layers,
              false),
          row(Collective::all_to_all, StepPhase::backward, qkvo, layers, false),
      };
  }
  return {};
}

// Experts: each token's hidden state to its top-k experts and back
// (dispatch, combine), forward and backward, per MoE layer and microbatch;
// the group's array is every expert rank's tokens, x the capacity factor.
std::vector<CollectiveRow> expert_collectives(const CollectiveInputs& c) {
  const auto ep = static_cast<double>(c.roles.size(c.mesh, AxisRole::expert));
  const double bytes = ep * static_cast<double>(c.act.tokens)
                       * static_cast<double>(c.experts_per_token) * c.hidden
                       * c.act_bytes * c.act.expert_load;
  return {{Parallelism::expert,
           Collective::all_to_all,
           StepPhase::every_pass,
           present(c.mesh, c.roles.expert),
           bytes,
           4 * c.layers_per_stage * c.moe_share * c.microbatches,
           c.options.overlap_expert,
           0}};
}

// Pipeline: a microbatch's activations to the next stage, and their
// gradient back, once per virtual stage (interleaved 1F1B crosses each
// device's boundary V times each way); on the critical path. The
// activation is split over the tensor axes when the residual stream is,
// and by Megatron's scatter-gather sends in any case.
std::vector<CollectiveRow> pipeline_collectives(const CollectiveInputs& c) {
  const bool scattered = c.act.residual != ResidualLayout::replicated
                         || c.in.pytorch_tensor_parallel;
  return {{Parallelism::pipeline,
           Collective::send_recv,
           StepPhase::every_pass,
           present(c.mesh, c.roles.stage),
           micro_bytes(c) / (scattered ? tensor_shards(c) : 1),
           2 * c.microbatches * static_cast<double>(c.act.stage_interleave),
           false,
           0}};
}

std::vector<StepCollective> price_collectives(const CollectiveInputs& c,
                                              std::span<const AxisLink> links) {
  std::vector<CollectiveRow> rows;
  for (auto kind : {fsdp_collectives,
                    data_collectives,
                    tensor_collectives,
                    sequence_collectives,
                    expert_collectives,
                    pipeline_collectives}) {
    std::vector<CollectiveRow> more = kind(c);
    std::move(more.begin(), more.end(), std::back_inserter(rows));
  }
  std::vector<StepCollective> out;
  for (CollectiveRow& row : rows) {
    if (row.axes.empty() || row.count <= 0 || row.bytes <= 0) {
      continue;
    }
    std::vector<const AxisLink*> axis_links;
    for (const std::string& axis : row.axes) {
      const int64_t k = c.mesh.index_of(axis);
      if (k >= 0 && static_cast<size_t>(k) < links.size()) {
        axis_links.push_back(&links[static_cast<size_t>(k)]);
      }
    }
    const CollectiveCost one = collective_cost(row.op, row.bytes, axis_links);
    StepCollective s;
    s.role = row.role;
    s.op = row.op;
    s.phase = row.phase;
    s.mesh_axes = std::move(row.axes);
    s.link = one.link;
    s.bytes_per_device = static_cast<int64_t>(row.bytes);
    s.count = static_cast<int64_t>(row.count);
    s.seconds = one.seconds * row.count;
    s.overlapped = row.overlappable;
    s.exposed_seconds =
        row.overlappable ? one.seconds * row.exposed_calls : s.seconds;
    out.push_back(std::move(s));
  }
  return out;
}

void hide_behind_compute(std::vector<StepCollective>& collectives,
                         double compute_seconds) {
  // The forward's collectives hide behind the forward (one of the step's
  // three matmul passes), the rest behind the backward (two).
  for (const bool forward : {true, false}) {
    const double budget = compute_seconds * (forward ? 1.0 / 3 : 2.0 / 3);
    const auto hides = [&](const StepCollective& c) {
      return c.overlapped && (c.phase == StepPhase::forward) == forward;
    };
    double hidden = 0;
    for (const StepCollective& c : collectives) {
      if (hides(c)) {
        hidden += c.seconds - c.exposed_seconds;
      }
    }
    if (hidden > budget && hidden > 0) {
      const double excess = (hidden - budget) / hidden;
      for (StepCollective& c : collectives) {
        if (hides(c)) {
          c.exposed_seconds += (c.seconds - c.exposed_seconds) * excess;
        }
      }
    }
  }
}

}  // namespace workload_detail

}  // namespace shardplan
