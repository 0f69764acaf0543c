// The training step's time (include/shardplan/workload.hpp; docs/step.md
// gives every formula with its source).

#include "workload/internal.hpp"

#include <shardplan/workload.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shardplan {

namespace {

using workload_detail::LayerFlops;
using workload_detail::recomputed;
using workload_detail::reruns_forward;

LayerFlops layer_flops(const ModelConfig& m,
                       const LayerStructure& s,
                       bool moe) {
  LayerFlops f;
  const auto h = static_cast<double>(m.hidden);
  const auto a = static_cast<double>(m.heads);
  const auto seq_half = 0.5;  // causal: half the seq x seq products
  if (m.kv_lora_rank > 0) {
    // MLA (MaxText's calculate_mla_tflops_per_device).
    const auto dqk = static_cast<double>(m.qk_nope + m.qk_rope);
    const auto dv = static_cast<double>(m.v_head);
    const auto rq = static_cast<double>(m.q_lora_rank);
    const auto rkv = static_cast<double>(m.kv_lora_rank);
    const double q = rq > 0 ? h * rq + rq * a * dqk : h * a * dqk;
    const double kv = h * (rkv + static_cast<double>(m.qk_rope))
                      + rkv * a * (static_cast<double>(m.qk_nope) + dv);
    f.qkv = 2 * (q + kv);
    f.out = 2 * a * dv * h;
    f.attention = 2 * a * (dqk + dv) * seq_half;  // x seq, below
    f.weights = q + kv + a * dv * h;
  } else {
    const auto d = static_cast<double>(m.head_dim);
    const auto k = static_cast<double>(m.kv_heads);
    f.qkv = 2 * h * (a + 2 * k) * d;
    f.out = 2 * a * d * h;
    f.attention = 4 * a * d * seq_half;  // x seq, below
    f.weights = h * (a + 2 * k) * d + a * d * h;
  }
  const double matrices_in = m.mlp == MlpKind::gated ? 2 : 1;
  auto mlp = [&](int64_t width, double copies, double stored) {
    const auto w = static_cast<double>(width);
    f.mlp_in += 2 * matrices_in * h * w * copies;
    f.mlp_out += 2 * h * w * copies;
    return (matrices_in + 1) * h * w * stored;
  };
  if (!moe) {
    f.weights += mlp(s.dense_intermediate, 1, 1);
  } else {
    const auto experts = static_cast<double>(s.routed_experts);
    f.router = 2 * h * experts;
    f.expert_weights = mlp(s.routed_intermediate,
                           static_cast<double>(s.experts_per_token),
                           experts);
    f.weights += f.expert_weights + h * experts;
    if (s.shared_intermediate > 0) {
      f.weights += mlp(s.shared_intermediate, 1, 1);
    }
  }
  return f;
}

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

std::string seconds_text(double s) {
  return s >= 1      ? fmt::format("{:.3g} s", s)
         : s >= 1e-3 ? fmt::format("{:.3g} ms", s * 1e3)
                     : fmt::format("{:.3g} us", s * 1e6);
}

}  // namespace

StepInputs step_inputs_for(const ModelConfig& model,
                           const Topology& topology,
                           std::span<const AxisLink> links,
                           const MemoryEstimate& memory,
                           std::string mesh_source) {
  DType weights = memory.param_dtype.value_or(model.dtype);
  if (is_fp8(weights)) {
    weights = memory.fp8_param_dtype.value_or(DType::bf16);
  }
  StepInputs in;
  in.topology = &topology;
  in.links = links;
  in.gather_axes = memory.gather_axes;
  in.split_axes = memory.split_axes;
  in.weight_bytes = dtype_bits(weights) / 8;
  in.grad_bytes = dtype_bits(memory.grad_dtype.value_or(weights)) / 8;
  in.optimizer_state_bytes = memory.per_device.model_states();
  in.mesh_source = std::move(mesh_source);
  return in;
}

std::optional<StepEstimate> estimate_step(const ModelConfig& model,
                                          const Mesh& mesh,
                                          const AxisRoles& roles,
                                          const ActivationEstimate& act,
                                          const StepInputs& in,
                                          const StepOptions& options,
                                          Diagnostics& diags) {
  const Topology* topology = in.topology;
  const double peak =
      topology ? topology->figures.bf16_flops_per_s_per_device.value : 0;
  const double hbm =
      topology ? topology->figures.hbm_bytes_per_s_per_device.value : 0;
  if (topology == nullptr || !(peak > 0) || !(hbm > 0)) {
    diags
        .error(
            "step.no-figure",
            "the step estimate needs the devices' bf16 peak and HBM "
            "bandwidth",
            Location::of(topology ? topology->name : std::string("--topology")))
        .hint =
        "give a catalogue topology, or set bf16_flops_per_s_per_device "
        "and hbm_bytes_per_s_per_device in the topology file's figures";
    return std::nullopt;
  }
  Diagnostics ignored;
  std::optional<LayerStructure> s = layer_structure(model, ignored);
  if (!s) {
    return std::nullopt;  // estimate_activations reported it
  }

  StepEstimate out;
  const auto seq = static_cast<double>(act.seq);
  const std::optional<int64_t> global_tokens =
      checked_mul(act.global_batch, act.seq);
  if (!global_tokens) {
    diags.error("step.overflow",
                fmt::format("a step of {} sequences of {} tokens is beyond "
                            "int64 tokens",
                            act.global_batch,
                            act.seq),
                Location::of(in.mesh_source));
    return std::nullopt;
  }
  out.tokens = *global_tokens;
  const auto tokens = static_cast<double>(out.tokens);
  const auto devices = static_cast<double>(mesh.num_devices());
  const auto h = static_cast<double>(model.hidden);
  const auto vocab = static_cast<double>(model.vocab);

  // FLOPs per token, forward, by layer kind; attention scales with seq.
  LayerFlops dense = layer_flops(model, *s, false);
  LayerFlops moe = layer_flops(model, *s, true);
  dense.attention *= seq;
  moe.attention *= seq;
  const double head = 2 * h * vocab;
  const auto L_dense = static_cast<double>(s->dense_layers);
  const auto L_moe = static_cast<double>(s->moe_layers);
  const double forward =
      L_dense * dense.forward() + L_moe * moe.forward() + head;
  out.model_flops = 3 * forward * tokens;

  // The work of a device: a stage's layers (and, on the last stage, the
  // head: the most loaded) for the tokens split over every other axis with
  // a role (an axis without one replicates the work), plus what the policy
  // recomputes of its layers.
  double split = 1;
  for (AxisRole role : {AxisRole::data,
                        AxisRole::tensor,
                        AxisRole::sequence,
                        AxisRole::expert}) {
    split *= static_cast<double>(roles.size(mesh, role));
  }
  const double stages = static_cast<double>(act.stages);
  const double layers_forward = forward - head;
  const double recompute = L_dense * recomputed(act.remat, dense)
                           + L_moe * recomputed(act.remat, moe);
  const double device_tokens = tokens / split;
  out.flops_per_device =
      (3 * (layers_forward / stages + head) + recompute / stages)
      * device_tokens;
  out.matmul_seconds =
      out.flops_per_device / (peak * options.matmul_efficiency);

  // Memory-bound work over HBM bandwidth: per layer and token, the
  // elementwise passes (two norms, two residual adds, the MLP's
  // activation) read and write their tensors in the activation dtype,
  // three times (forward, backward's two); then the optimizer reads and
  // writes the state once.
  const auto act_bytes =
      static_cast<double>(dtype_bits(act.activation_dtype) / 8);
  auto elementwise = [&](int64_t width) {
    const auto w = static_cast<double>(width);
    const double gated = model.mlp == MlpKind::gated ? 3 : 2;
    return (2 * 2 * h + 2 * 3 * h + gated * w) * act_bytes;
  };
  const double per_token_bytes =
      L_dense * elementwise(s->dense_intermediate)
      + L_moe
            * elementwise(s->routed_intermediate
                          * std::max<int64_t>(s->experts_per_token, 1));
  out.memory_seconds = (3 * per_token_bytes * tokens / (split * stages)
                        + 2 * static_cast<double>(in.optimizer_state_bytes))
                       / hbm;
  out.compute_seconds = out.matmul_seconds + out.memory_seconds;

  // Collectives, per device and step.
  const auto M = static_cast<double>(act.microbatches);
  const double layers_per_stage = static_cast<double>(model.layers) / stages;
  const double dense_share =
      model.layers > 0 ? L_dense / static_cast<double>(model.layers) : 0;
  const double moe_share = 1 - dense_share;
  auto links_of = [&](const std::vector<std::string>& axes) {
    std::vector<const AxisLink*> out_links;
    for (const std::string& axis : axes) {
      const int64_t k = mesh.index_of(axis);
      if (k >= 0 && static_cast<size_t>(k) < in.links.size()) {
        out_links.push_back(&in.links[static_cast<size_t>(k)]);
      }
    }
    return out_links;
  };
  enum class Phase { forward_pass, backward_pass };
  std::vector<Phase> hidden_by;  // per collective
  auto add = [&](std::string what,
                 Collective op,
                 const std::vector<std::string>& axes,
                 double bytes,
                 double count,
                 bool overlapped,
                 double exposed_calls) {
    if (axes.empty() || count <= 0 || bytes <= 0) {
      return;
    }
    const std::vector<const AxisLink*> links = links_of(axes);
    const CollectiveCost one = collective_cost(op, bytes, links);
    StepCollective c;
    c.what = std::move(what);
    c.op = op;
    c.mesh_axes = axes;
    c.link = one.link;
    c.bytes_per_device = static_cast<int64_t>(bytes);
    c.count = static_cast<int64_t>(count);
    c.seconds = one.seconds * count;
    c.overlapped = overlapped;
    c.exposed_seconds = overlapped ? one.seconds * exposed_calls : c.seconds;
    // What the compute can hide of the rest: the forward's gathers behind
    // the forward, the rest behind the backward.
    hidden_by.push_back(c.what.find("(forward)") != std::string::npos
                            ? Phase::forward_pass
                            : Phase::backward_pass);
    out.collectives.push_back(std::move(c));
  };

  const std::vector<std::string> tensor_axes = present(mesh, roles.tensor);
  const std::vector<std::string> expert_axes = present(mesh, roles.expert);
  const std::vector<std::string> stage_axes = present(mesh, roles.stage);
  const std::vector<std::string> gather = present(mesh, in.gather_axes);
  std::vector<std::string> pure_data;
  for (const std::string& axis : present(mesh, roles.data)) {
    if (std::find(gather.begin(), gather.end(), axis) == gather.end()) {
      pure_data.push_back(axis);
    }
  }
  const auto t = static_cast<double>(roles.size(mesh, AxisRole::tensor));
  const auto ep = static_cast<double>(roles.size(mesh, AxisRole::expert));

  // FSDP: a layer's weights gathered at use (split over the tensor axes,
  // experts over the expert axes), forward and again in the backward, and
  // its gradients reduce-scattered; per microbatch.
  const double layer_weights =
      dense_share * dense.weights
      + moe_share
            * (moe.weights - moe.expert_weights + moe.expert_weights / ep);
  const double gathered =
      layer_weights / t * static_cast<double>(in.weight_bytes);
  const double calls = layers_per_stage * M;
  add("fsdp all-gather (forward)",
      Collective::all_gather,
      gather,
      gathered,
      calls,
      options.overlap_fsdp,
      1);
  add("fsdp all-gather (backward)",
      Collective::all_gather,
      gather,
      gathered,
      calls,
      options.overlap_fsdp,
      0);
  add("fsdp reduce-scatter (gradients)",
      Collective::reduce_scatter,
      gather,
      layer_weights / t * static_cast<double>(in.grad_bytes),
      calls,
      options.overlap_grad_reduce,
      1);
  // Pure data parallelism: the stage's gradients all-reduced once a step.
  double stage_weights = layer_weights * layers_per_stage;
  for (const std::string& axis : gather) {
    stage_weights /= static_cast<double>(mesh.find(axis)->size);
  }
  add("data all-reduce (gradients)",
      Collective::all_reduce,
      pure_data,
      stage_weights / t * static_cast<double>(in.grad_bytes),
      1,
      options.overlap_grad_reduce,
      1 / std::max(layers_per_stage, 1.0));

  // Tensor parallelism: the attention and MLP outputs summed over the
  // tensor axes, forward, backward, and in a full recompute.
  const double micro_tokens = static_cast<double>(act.tokens);
  const double tp_bytes = micro_tokens * h * act_bytes;
  const double tp_per_layer = reruns_forward(act.remat) ? 6 : 4;
  if (act.sequence_parallel) {
    add("tp reduce-scatter",
        Collective::reduce_scatter,
        tensor_axes,
        tp_bytes,
        tp_per_layer * calls,
        options.overlap_tensor,
        0);
    add("tp all-gather",
        Collective::all_gather,
        tensor_axes,
        tp_bytes,
        tp_per_layer * calls,
        options.overlap_tensor,
        0);
  } else {
    add("tp all-reduce",
        Collective::all_reduce,
        tensor_axes,
        tp_bytes,
        tp_per_layer * calls,
        options.overlap_tensor,
        0);
  }
  // Experts: each token's hidden state to its top-k experts and back
  // (dispatch, combine), forward and backward.
  const double a2a_bytes = ep * micro_tokens
                           * static_cast<double>(s->experts_per_token) * h
                           * act_bytes * options.capacity_factor;
  add("expert all-to-all",
      Collective::all_to_all,
      expert_axes,
      a2a_bytes,
      4 * layers_per_stage * moe_share * M,
      options.overlap_expert,
      0);
  // Pipeline: a microbatch's activations to the next stage, and their
  // gradient back.
  add("pipeline send",
      Collective::send_recv,
      stage_axes,
      tp_bytes,
      2 * M,
      false,
      0);

  // Overlapped collectives hide behind the compute of their phase: the
  // forward a third of the step's compute (one of its three matmul
  // passes), the backward two thirds. What a phase's overlapped
  // collectives take beyond its compute is exposed too, shared in
  // proportion to their time.
  for (Phase phase : {Phase::forward_pass, Phase::backward_pass}) {
    const double budget = out.compute_seconds
                          * (phase == Phase::forward_pass ? 1.0 / 3 : 2.0 / 3);
    double hidden = 0;
    for (size_t i = 0; i < out.collectives.size(); ++i) {
      const StepCollective& c = out.collectives[i];
      if (c.overlapped && hidden_by[i] == phase) {
        hidden += c.seconds - c.exposed_seconds;
      }
    }
    if (hidden > budget && hidden > 0) {
      const double excess = (hidden - budget) / hidden;
      for (size_t i = 0; i < out.collectives.size(); ++i) {
        StepCollective& c = out.collectives[i];
        if (c.overlapped && hidden_by[i] == phase) {
          c.exposed_seconds += (c.seconds - c.exposed_seconds) * excess;
        }
      }
    }
  }
  for (const StepCollective& c : out.collectives) {
    out.comm_seconds += c.seconds;
    out.exposed_comm_seconds += c.exposed_seconds;
  }
  // 1F1B's bubble: (S - 1) / M of the ideal step, / V interleaved
  // (Narayanan et al. 2021).
  const double busy = out.compute_seconds + out.exposed_comm_seconds;
  out.bubble_seconds =
      stages > 1 ? busy * (stages - 1)
                       / (M * static_cast<double>(act.stage_interleave))
                 : 0;
  out.step_seconds = busy + out.bubble_seconds;
  out.tokens_per_second_per_device = tokens / out.step_seconds / devices;
  out.mfu = out.model_flops / (out.step_seconds * devices * peak);

  // The scaling book's rooflines (B.5), as warnings.
  const auto warn = [&](std::string code,
                        std::string message,
                        std::string hint) {
    diags
        .warning(
            std::move(code), std::move(message), Location::of(in.mesh_source))
        .hint = std::move(hint);
  };
  for (const std::string& axis : gather) {
    const AxisLink& link = in.links[static_cast<size_t>(mesh.index_of(axis))];
    const bool gpu = topology->kind == TopologyKind::gpu;
    if (link.link == LinkClass::dcn
        || (!gpu && link.link == LinkClass::mixed)) {
      warn("step.over-dcn",
           fmt::format("FSDP axis {} spans slices: its gathers and "
                       "reduce-scatters of every layer cross DCN at {:g} B/s",
                       axis,
                       link.bytes_per_s),
           "put data parallelism (dp) across slices and FSDP inside them "
           "(the scaling book, MaxText's dcn_data_parallelism)");
      continue;
    }
    // Across GPU nodes a collective reduces inside each NVLink domain
    // first, so the node's egress serves its GPUs: the book's critical
    // batch across H100 nodes is 990e12 / (8 x 50e9) = 2475 (B.5).
    const double bandwidth =
        gpu && link.link == LinkClass::mixed
            ? link.bytes_per_s
                  * static_cast<double>(
                      std::min(topology->nvlink_domain, link.ring_size))
            : link.bytes_per_s;
    if (!(bandwidth > 0)) {
      continue;
    }
    // An MoE layer computes with K of E experts' weights: E / K times the
    // tokens to hide their gathers (B.5, gpus.md).
    const double moe_factor =
        s->moe_layers > 0 && s->experts_per_token > 0
            ? static_cast<double>(s->routed_experts)
                  / static_cast<double>(s->experts_per_token)
            : 1.0;
    const double critical = peak / bandwidth * moe_factor;
    if (static_cast<double>(act.tokens) < critical) {
      warn("step.below-critical-batch",
           fmt::format("{} tokens per device and microbatch are below the "
                       "critical batch of FSDP axis {}: {:.0f} = {:g} FLOP/s "
                       "/ {:g} B/s{}; its collectives cannot hide behind the "
                       "compute",
                       act.tokens,
                       axis,
                       critical,
                       peak,
                       bandwidth,
                       moe_factor > 1
                           ? fmt::format(" x {} experts / {} per token",
                                         s->routed_experts,
                                         s->experts_per_token)
                           : std::string()),
           "a larger per-device batch, fewer microbatches, or less FSDP "
           "and more data parallelism (hardware-and-costs.md B.5)");
    }
  }
  if (in.split_axes) {
    for (const std::string& axis : tensor_axes) {
      if (mesh.find(axis)->size > 1
          && std::find(in.split_axes->begin(), in.split_axes->end(), axis)
                 == in.split_axes->end()) {
        out.unsplit_tensor_axes.push_back(axis);
      }
    }
  }
  if (!out.unsplit_tensor_axes.empty()) {
    std::vector<std::string> sizes;
    for (const std::string& axis : out.unsplit_tensor_axes) {
      sizes.push_back(
          fmt::format("{} ({})", quote(axis), mesh.find(axis)->size));
    }
    warn("step.tensor-axis-unsplit",
         fmt::format("tensor ax{} {} split{} no tensor: the step counts {} as "
                     "tensor parallelism, each device a share of every "
                     "matmul, but with these specs {} devices hold whole "
                     "weights and would repeat the same work",
                     sizes.size() == 1 ? "is" : "es",
                     fmt::join(sizes, ", "),
                     sizes.size() == 1 ? "s" : "",
                     sizes.size() == 1 ? "it" : "them",
                     sizes.size() == 1 ? "its" : "their"),
         "split the weights over it (rules fsdp-tp; MaxText's rules split "
         "over \"tensor\"), or leave the axis out of the mesh");
  }
  if (!tensor_axes.empty()) {
    double tensor_bw = 0;
    bool over_dcn = false;
    for (const std::string& axis : tensor_axes) {
      const AxisLink& link = in.links[static_cast<size_t>(mesh.index_of(axis))];
      over_dcn = over_dcn || link.link == LinkClass::dcn
                 || link.link == LinkClass::mixed;
      tensor_bw = tensor_bw == 0 ? link.bytes_per_s
                                 : std::min(tensor_bw, link.bytes_per_s);
    }
    const int64_t width =
        s->dense_layers > 0 ? s->dense_intermediate : s->routed_intermediate;
    const double limit = static_cast<double>(width) * tensor_bw / peak;
    if (over_dcn) {
      warn(
          "step.over-dcn",
          fmt::format(
              "tensor axes {} span {}: every layer's "
              "all-reduces cross {}",
              fmt::join(tensor_axes, ","),
              topology->kind == TopologyKind::gpu ? "NVLink domains" : "slices",
              topology->kind == TopologyKind::gpu ? "the network between them"
                                                  : "DCN"),
          "keep tensor parallelism inside a slice (or an NVLink domain)");
    } else if (tensor_bw > 0 && t > limit) {
      warn("step.tensor-too-wide",
           fmt::format("tensor parallelism {:g}-way exceeds what its links "
                       "keep compute-bound for an MLP width of {}: {:.1f} = "
                       "{} x {:g} B/s / {:g} FLOP/s",
                       t,
                       width,
                       limit,
                       width,
                       tensor_bw,
                       peak),
           "fewer tensor shards, more FSDP (hardware-and-costs.md B.5)");
    }
  }

  // The bottleneck: the largest of compute, exposed communication and the
  // bubble; communication named by its most exposed collective.
  const StepCollective* worst = nullptr;
  for (const StepCollective& c : out.collectives) {
    if (worst == nullptr || c.exposed_seconds > worst->exposed_seconds) {
      worst = &c;
    }
  }
  std::string what = fmt::format("compute-bound: compute {}",
                                 seconds_text(out.compute_seconds));
  double largest = out.compute_seconds;
  if (worst != nullptr && out.exposed_comm_seconds > largest) {
    largest = out.exposed_comm_seconds;
    what = fmt::format(
        "comm-bound: {} of exposed communication, most of it {} on {} over "
        "{} ({})",
        seconds_text(out.exposed_comm_seconds),
        worst->what,
        fmt::join(worst->mesh_axes, ","),
        to_string(worst->link),
        seconds_text(worst->exposed_seconds));
    // Data parallelism over DCN, the scaling book's test (B.1): a slice's
    // tokens per microbatch against peak / DCN bandwidth per device (v5p:
    // 71,360).
    const int64_t slices =
        topology->kind == TopologyKind::tpu ? topology->tpu.num_slices : 1;
    const double dcn =
        topology->kind == TopologyKind::tpu
            ? topology->figures.dcn_bytes_per_s_per_chip.value
                  / static_cast<double>(topology->tpu.cores_per_chip)
            : 0;
    if ((worst->link == LinkClass::dcn || worst->link == LinkClass::mixed)
        && worst->what.starts_with("data all-reduce") && slices > 1
        && dcn > 0) {
      const double slice_tokens = tokens / M / static_cast<double>(slices);
      what += fmt::format("; per-slice batch {:.0f} tokens {} {:.0f}",
                          slice_tokens,
                          slice_tokens < peak / dcn ? "<" : ">=",
                          peak / dcn);
    }
  }
  if (out.bubble_seconds > largest) {
    what = fmt::format("bubble-bound: pipeline bubble {}",
                       seconds_text(out.bubble_seconds));
  }
  out.bottleneck =
      fmt::format("{} of the {} step", what, seconds_text(out.step_seconds));

  out.assumptions = {
      {"peak_bf16_flops_per_s",
       fmt::format("{:g}", peak),
       topology->figures.bf16_flops_per_s_per_device.source},
      {"hbm_bytes_per_s",
       fmt::format("{:g}", hbm),
       topology->figures.hbm_bytes_per_s_per_device.source},
      {"matmul_efficiency",
       fmt::format("{:g}", options.matmul_efficiency),
       options.matmul_efficiency == 1.0
           ? "the roofline (jax-ml/scaling-book); the references give no "
             "measured figure for XLA's matmuls: set it from a profile"
           : options.matmul_efficiency_source},
      {"capacity_factor",
       fmt::format("{:g}", options.capacity_factor),
       "MaxText's capacity_factor; 1: dropless routing, balanced"},
      {"overlap",
       fmt::format(
           "fsdp gathers {}, gradient reduction {}, tensor "
           "collectives {}, expert all-to-all {}",
           options.overlap_fsdp ? "prefetched" : "exposed",
           options.overlap_grad_reduce ? "behind the backward" : "exposed",
           options.overlap_tensor ? "overlapped" : "exposed",
           options.overlap_expert ? "overlapped" : "exposed"),
       "docs/step.md, \"Overlap\": XLA's async collectives (MaxText's "
       "defaults)"},
  };
  return out;
}

}  // namespace shardplan
