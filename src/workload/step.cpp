// The training step's time (include/shardplan/workload.hpp; docs/step.md
// gives every formula with its source).

#include "workload/internal.hpp"

#include <shardplan/workload.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shardplan {

namespace {

using workload_detail::causal_block_ratio;
using workload_detail::CollectiveInputs;
using workload_detail::grouped_tile_ratio;
using workload_detail::hide_behind_compute;
using workload_detail::LayerFlops;
using workload_detail::present;
using workload_detail::price_collectives;
using workload_detail::recomputed;
using workload_detail::reruns_forward;
using workload_detail::tokamax_tile_rows;

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
    f.key = 2 * h * k * d;
    f.out = 2 * a * d * h;
    f.attention = 4 * a * d * seq_half;  // x seq, below
    f.weights = h * (a + 2 * k) * d + a * d * h;
  }
  const double matrices_in = m.mlp == MlpKind::gated ? 2 : 1;
  f.gated = m.mlp == MlpKind::gated;
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
    const double before = f.mlp_in + f.mlp_out;
    f.expert_weights = mlp(s.routed_intermediate,
                           static_cast<double>(s.experts_per_token),
                           experts);
    f.routed = f.mlp_in + f.mlp_out - before;
    f.weights += f.expert_weights + h * experts;
    if (s.shared_intermediate > 0) {
      f.weights += mlp(s.shared_intermediate, 1, 1);
    }
  }
  return f;
}

// ---------------------------------------------------------------------------
// The estimate.

class StepEstimator {
 public:
  StepEstimator(const ModelConfig& model,
                const Mesh& mesh,
                const AxisRoles& roles,
                const ActivationEstimate& act,
                const StepInputs& in,
                const StepOptions& options,
                Diagnostics& diags)
      : m_model(model),
        m_mesh(mesh),
        m_roles(roles),
        m_act(act),
        m_in(in),
        m_options(options),
        m_diags(diags) {}

  std::optional<StepEstimate> run() {
    if (!read_figures() || !read_structure() || !count_tokens()) {
      return std::nullopt;
    }
    count_flops();
    time_memory_bound();
    time_collectives();
    finish_step();
    warn_fsdp_axes();
    warn_unsplit_tensor_axes();
    warn_tensor_axes();
    find_bottleneck();
    list_assumptions();
    return std::move(m_out);
  }

 private:
  // The devices' bf16 peak and HBM bandwidth, which every time needs.
  bool read_figures() {
    const Topology* topology = m_in.topology;
    m_peak = topology ? topology->figures.bf16_flops_per_s_per_device.value : 0;
    m_hbm = topology ? topology->figures.hbm_bytes_per_s_per_device.value : 0;
    if (topology == nullptr || !(m_peak > 0) || !(m_hbm > 0)) {
      m_diags
          .error("step.no-figure",
                 "the step estimate needs the devices' bf16 peak and HBM "
                 "bandwidth",
                 topology ? Location::of(topology->name) : m_in.topology_at)
          .hint =
          "give a catalogue topology, or set bf16_flops_per_s_per_device "
          "and hbm_bytes_per_s_per_device in the topology file's figures";
      return false;
    }
    m_topology = topology;
    return true;
  }

  bool read_structure() {
    Diagnostics ignored;
    std::optional<LayerStructure> s = layer_structure(m_model, ignored);
    if (!s) {
      return false;  // estimate_activations reported it
    }
    m_s = std::move(*s);
    return true;
  }

  bool count_tokens() {
    const std::optional<int64_t> global_tokens =
        checked_mul(m_act.global_batch, m_act.seq);
    if (!global_tokens) {
      m_diags.error("step.overflow",
                    fmt::format("a step of {} sequences of {} tokens is "
                                "beyond int64 tokens",
                                m_act.global_batch,
                                m_act.seq),
                    m_in.mesh_at);
      return false;
    }
    m_out.tokens = *global_tokens;
    m_tokens = static_cast<double>(m_out.tokens);
    m_devices = static_cast<double>(m_mesh.num_devices());
    m_h = static_cast<double>(m_model.hidden);
    m_stages = static_cast<double>(m_act.stages);
    m_microbatches = static_cast<double>(m_act.microbatches);
    m_dense_layers = static_cast<double>(m_s.dense_layers);
    m_moe_layers = static_cast<double>(m_s.moe_layers);
    // An axis without a role replicates the work: the tokens split over
    // every other axis with one.
    for (AxisRole role : {AxisRole::data,
                          AxisRole::tensor,
                          AxisRole::sequence,
                          AxisRole::expert}) {
      m_split *= static_cast<double>(m_roles.size(m_mesh, role));
    }
    return true;
  }

  // FLOPs per token, forward, by layer kind (attention scales with seq);
  // the model's, and a device's: a stage's layers (and, on the last stage,
  // the head: the most loaded) for its tokens, plus what the policy
  // recomputes of its layers.
  void count_flops() {
    const auto seq = static_cast<double>(m_act.seq);
    m_dense = layer_flops(m_model, m_s, false);
    m_moe = layer_flops(m_model, m_s, true);
    m_dense.attention *= seq;
    m_moe.attention *= seq;
    double head = 2 * m_h * static_cast<double>(m_model.vocab);
    const CustomRemat& custom = m_act.custom_remat;
    // DeepSeek-V3's MTP modules trained (last stage, with the head): each a
    // layer, its projection of [e; h] (2h x h) and a head of its own.
    const auto mtp = static_cast<double>(m_s.mtp_layers);
    const LayerFlops& mtp_layer = m_s.mtp_moe ? m_moe : m_dense;
    head += mtp * (mtp_layer.forward() + 2 * (2 * m_h) * m_h + head);
    const double forward = m_dense_layers * m_dense.forward()
                           + m_moe_layers * m_moe.forward() + head;
    m_out.model_flops = 3 * forward * m_tokens;
    const double layers_forward = forward - head;
    const double recompute =
        m_dense_layers * recomputed(m_act.remat, custom, m_dense)
        + m_moe_layers * recomputed(m_act.remat, custom, m_moe);
    const double device_tokens = m_tokens / m_split;
    // The hottest expert rank computes its routed tokens x the expert load
    // (a capacity factor pads every expert's buffer: MaxText's dense path
    // computes the padding too).
    const double routed_extra =
        (m_act.expert_load - 1) * 3 * m_moe_layers * m_moe.routed / m_stages;
    m_out.flops_per_device =
        (3 * (layers_forward / m_stages + head) + recompute / m_stages
         + mtp * recomputed(m_act.remat, custom, mtp_layer) + routed_extra)
        * device_tokens;
    // The attention kernel's share: its forward and its recompute where
    // the policy drops the context, and its backward.
    double attention_forward = 0;
    double attention_backward = 0;
    for (const auto& [f, count] :
         {std::pair{m_dense, m_dense_layers / m_stages},
          std::pair{m_moe, m_moe_layers / m_stages},
          std::pair{mtp_layer, mtp}}) {
      LayerFlops a;
      a.attention = f.attention;
      attention_forward +=
          count * (f.attention + recomputed(m_act.remat, custom, a));
      attention_backward += count * 2 * f.attention;
    }
    m_out.attention_flops_per_device =
        (attention_forward + attention_backward) * device_tokens;
    // Plain attention computes every score, the causal mask's half too
    // (Korthikanti et al. 2022's FLOPs count the full seq x seq products);
    // a flash kernel skips the masked blocks, but computes the blocks the
    // mask crosses whole. The model's FLOPs stay causal.
    const double executed =
        m_act.attention == AttentionKind::plain
            ? 2 * m_out.attention_flops_per_device
            : (attention_forward * flash_block_ratio(false)
               + attention_backward * flash_block_ratio(true))
                  * device_tokens;
    m_out.flops_per_device += executed - m_out.attention_flops_per_device;
    m_out.attention_flops_per_device = executed;
    const GroupedTileFlops tiles = grouped_tile_flops();
    m_grouped_ratio = tiles.ratio;
    m_out.flops_per_device += tiles.extra * device_tokens;
    m_shape_factor = shape_factor();
    m_out.matmul_seconds =
        (m_out.flops_per_device - m_out.attention_flops_per_device)
            / (matmul_peak() * m_options.matmul_efficiency.value
               * m_shape_factor)
        + m_out.attention_flops_per_device
              / (m_peak * m_options.attention_efficiency.value);
  }

  // What a causal flash kernel's blocks compute over the model's causal
  // half (docs/step.md, "Kernel tiles"): MaxText's splash attention on a
  // TPU; 1 elsewhere (a GPU's flash kernels' 128-row blocks are in their
  // measured efficiency) and with context parallelism (its own masks).
  double flash_block_ratio(bool backward) const {
    if (!m_options.flash_blocks || m_topology->kind != TopologyKind::tpu
        || m_act.sequence_shards > 1) {
      return 1;
    }
    const FlashBlocks& b = *m_options.flash_blocks;
    if (!backward) {
      return causal_block_ratio(m_act.seq, b.q, b.kv);
    }
    const double dkv = causal_block_ratio(m_act.seq, b.q_dkv, b.kv_dkv);
    return b.fused_backward
               ? dkv
               : (dkv + causal_block_ratio(m_act.seq, b.q_dq, b.kv_dq)) / 2;
  }

  // The routed experts' FLOPs per token of a device's share that a TPU
  // grouped matmul's row tiles add (docs/step.md, "Kernel tiles"): each
  // matrix (gate and up: k = h; down: k = the expert's width) in each pass
  // (the forward, with its recompute; the input's gradient; the weights')
  // at its tiles' ratio over the rows a device's experts receive; and the
  // routed FLOPs' executed over counted.
  struct GroupedTileFlops {
    double extra = 0;
    double ratio = 1;
  };
  GroupedTileFlops grouped_tile_flops() const {
    if (!m_options.grouped_tiles || m_topology->kind != TopologyKind::tpu
        || m_s.routed_experts <= 0 || m_moe_layers <= 0) {
      return {};
    }
    const GroupedTiles& tiles = *m_options.grouped_tiles;
    const int64_t ep =
        std::max<int64_t>(m_roles.size(m_mesh, AxisRole::expert), 1);
    const int64_t groups = std::max<int64_t>(m_s.routed_experts / ep, 1);
    const int64_t rows = m_act.tokens * m_s.experts_per_token;
    const int64_t width =
        m_s.routed_intermediate / std::max<int64_t>(m_act.tensor_shards, 1);
    const double in_share = m_moe.gated ? 2.0 / 3 : 0.5;
    double extra = 0;
    double routed = 0;
    for (size_t matrix : {size_t{0}, size_t{1}}) {
      LayerFlops r;
      r.gated = m_moe.gated;
      (matrix == 0 ? r.mlp_in : r.mlp_out) =
          m_moe.routed * (matrix == 0 ? in_share : 1 - in_share);
      const double pass = r.mlp_in + r.mlp_out;
      const double rerun = recomputed(m_act.remat, m_act.custom_remat, r);
      const int64_t k = matrix == 0 ? m_model.hidden : width;
      const int64_t n = matrix == 0 ? width : m_model.hidden;
      for (int p = 0; p < 3; ++p) {
        int64_t tile = tiles.rows[matrix][static_cast<size_t>(p)];
        if (tile == 0) {
          tile = tokamax_tile_rows(p, rows, k, n, groups);
        }
        const double ratio = grouped_tile_ratio(rows, groups, tile);
        const double flops = p == 0 ? pass + rerun : pass;
        extra += (ratio - 1) * flops;
        routed += flops;
      }
    }
    return {extra * m_moe_layers / m_stages,
            routed > 0 ? (routed + extra) / routed : 1};
  }

  // A measured fraction of a datasheet figure, 1 where none is measured.
  static double fraction(const Figure& measured) {
    return measured.value > 0 ? measured.value : 1.0;
  }

  // How much less of its peak an FP8 GEMM reaches than a bf16 one.
  double fp8_efficiency_ratio() const {
    return fraction(m_topology->figures.fp8_efficiency_ratio);
  }

  // The weights' matmuls' peak: the bf16 peak, or the FP8 peak when they
  // run in FP8 and the chip has one (else step.no-fp8 warns once and they
  // stay at the bf16 peak).
  double matmul_peak() {
    if (!m_options.fp8_matmuls.value) {
      return m_peak;
    }
    const double fp8 = m_topology->figures.fp8_flops_per_s_per_device.value;
    if (fp8 > 0) {
      return fp8 * fp8_efficiency_ratio();
    }
    if (!m_warned_fp8) {
      m_warned_fp8 = true;
      m_diags
          .warning("step.no-fp8",
                   fmt::format("{} has no FP8 matmul units: the matmuls are "
                               "estimated at the bf16 peak",
                               m_topology->name),
                   m_options.fp8_matmuls.at)
          .hint =
          "FP8 needs an H100 or later, or a TPU7x (docs/sources.md#fp8)";
    }
    return m_peak;
  }

  // The weights' matmuls on the chip's measured curve (docs/step.md,
  // "Matmul shapes"): the FLOP-weighted harmonic mean, over a stage's
  // layers and the head, of each matmul's rate over the curve's best; 1
  // without a curve.
  double shape_factor() const {
    const MatmulCurve& curve = m_topology->figures.matmul_curve;
    if (curve.empty()) {
      return 1;  // the catalogue's curves have rates > 0 (read_curve)
    }
    const double best = curve.best();
    double flops = 0;
    double weighted = 0;  // sum of flops / factor
    const auto add = [&](double f, double tokens, double k, double n) {
      if (!(f > 0)) {
        return;
      }
      // The forward (tokens x k by k x n) and the backward's two: the
      // input's gradient (tokens x n by n x k) and the weight's (k x
      // tokens by tokens x n); each a third of the FLOPs.
      double inverse = 0;
      for (const auto& [a, b, c] : {std::array<double, 3>{tokens, n, k},
                                    std::array<double, 3>{tokens, k, n},
                                    std::array<double, 3>{k, n, tokens}}) {
        inverse += best / std::max(curve.rate(a, b, c), 1.0) / 3;
      }
      flops += f;
      weighted += f * inverse;
    };
    // The routed experts on a chip with a measured grouped GEMM: its rate
    // at the tokens an expert receives, over the curve's best.
    const GroupedCurve& grouped = grouped_curve();
    const auto add_grouped = [&](double f, double rows) {
      if (f > 0) {
        flops += f;
        weighted += f / grouped.fraction(rows);
      }
    };
    const double t = static_cast<double>(m_act.tensor_shards);
    const auto tokens = static_cast<double>(m_act.tokens);
    const auto layer = [&](const LayerFlops& f, double count, bool moe) {
      const double qkv_width = f.qkv / (2 * m_h);
      const double out_width = f.out / (2 * m_h);
      add(count * f.qkv, tokens, m_h, qkv_width / t);
      add(count * f.out, tokens, out_width / t, m_h);
      const double routed = moe ? f.routed : 0;
      const double dense_mlp = f.mlp_in + f.mlp_out - routed;
      const auto width = static_cast<double>(moe ? m_s.shared_intermediate
                                                 : m_s.dense_intermediate);
      add(count * dense_mlp, tokens, m_h, width / t);
      if (routed > 0 && m_s.routed_experts > 0) {
        // A routed expert sees tokens x top-k x expert shards / experts
        // rows (its share of every expert rank's tokens).
        const double ep =
            static_cast<double>(m_roles.size(m_mesh, AxisRole::expert));
        const double rows = tokens * static_cast<double>(m_s.experts_per_token)
                            * ep / static_cast<double>(m_s.routed_experts);
        if (grouped.empty()) {
          add(count * routed,
              rows,
              m_h,
              static_cast<double>(m_s.routed_intermediate) / t);
        } else {
          add_grouped(count * routed, rows);
        }
      }
      add(count * f.router, tokens, m_h, f.router / (2 * m_h));
    };
    layer(m_dense, m_dense_layers / m_stages, false);
    layer(m_moe, m_moe_layers / m_stages, true);
    add(2 * m_h * static_cast<double>(m_model.vocab),
        tokens,
        m_h,
        static_cast<double>(m_model.vocab) / t);
    return weighted > 0 ? flops / weighted : 1;
  }

  // The grouped GEMM's measured rates when the routed experts run as one
  // (--grouped-gemm grouped) and the chip has them; else none.
  const GroupedCurve& grouped_curve() const {
    static const GroupedCurve none;
    return m_options.grouped_gemm ? m_topology->figures.grouped_curve : none;
  }

  // The memory-bound work's bandwidth: the datasheet's, times the
  // measured fraction eager PyTorch's elementwise kernels or fused kernels
  // reach, where the chip has one.
  const Figure& memory_figure() const {
    const TopologyFigures& f = m_topology->figures;
    return m_options.eager_kernels && f.eager_memory_efficiency.value > 0
               ? f.eager_memory_efficiency
               : f.memory_efficiency;
  }
  double memory_efficiency() const { return fraction(memory_figure()); }
  double memory_rate() const { return m_hbm * memory_efficiency(); }

  // Memory-bound work over HBM bandwidth (docs/step.md, "Memory-bound
  // work"): per layer, the elementwise passes of the residual stream, the
  // MLP's activation and, with plain attention, the scores' softmax and
  // dropout; the loss over the vocabulary; the optimizer's update.
  void time_memory_bound() {
    const int64_t elem_bytes = dtype_bits(m_act.activation_dtype) / 8;
    m_act_bytes = static_cast<double>(elem_bytes);
    // A device's share of the step's tokens (split over every axis with a
    // role) and of one stage's layers.
    const double device_tokens = m_tokens / m_split;
    const double layer_tokens = device_tokens / m_stages;
    const double per_token_bytes =
        m_dense_layers * layer_pass_bytes(m_s.dense_intermediate, 1)
        + m_moe_layers
              * (layer_pass_bytes(m_s.routed_intermediate,
                                  std::max<int64_t>(m_s.experts_per_token, 1))
                 + dispatch_bytes());
    m_out.memory_seconds =
        (per_token_bytes * layer_tokens + loss_bytes() * device_tokens
         + 2 * static_cast<double>(m_in.optimizer_state_bytes)
         + accumulation_bytes())
        / memory_rate();
    m_out.compute_seconds = m_out.matmul_seconds + m_out.memory_seconds;
  }

  // Gradient accumulation: each microbatch's weight gradients are added
  // into the gradient buffer (Megatron's gradient_accumulation_fusion
  // accumulates into main_grad in the weight-gradient GEMM; MaxText's
  // gradient accumulation adds each microbatch's): the buffer read and
  // written once a microbatch after the first, which writes it (the
  // optimizer's pass reads it once more).
  double accumulation_bytes() const {
    return 2 * (m_microbatches - 1)
           * static_cast<double>(m_in.grad_state_bytes);
  }

  // One layer's memory-bound bytes per token of a device's share: each
  // pass reads and writes its tensors in the activation dtype, three times
  // (the forward and the backward's two), and once more where the policy
  // reruns the forward. The residual stream's passes (two norms read and
  // write h; two residual adds read 2h and write h, with residual dropout
  // a 1-byte mask each) split over the tensor axes only when the residual
  // stream does (sequence parallelism): replicated, every tensor rank
  // repeats them (Korthikanti et al. 2022, section 4.2.2). The MLP's
  // activation (gated: reads 2w, writes w; else reads and writes w) is
  // split with its width.
  double layer_pass_bytes(int64_t width, int64_t copies) const {
    const double e = m_act_bytes;
    const double t = static_cast<double>(m_act.tensor_shards);
    const double replicated =
        m_act.residual == ResidualLayout::replicated ? t : 1;
    const double mask = m_model.residual_dropout > 0 ? 1 : 0;
    const double residual = (2 * 2 * e + 2 * (3 * e + mask)) * m_h;
    const double w = static_cast<double>(width) * static_cast<double>(copies);
    const double activation = (m_model.mlp == MlpKind::gated ? 3 : 2) * e * w;
    const double passes = reruns_forward(m_act.remat) ? 4 : 3;
    const auto [eager_stream, eager_heads] = eager_bytes(width, copies);
    return passes
               * ((residual + eager_stream) * replicated + activation
                  + eager_heads)
           + score_bytes() + fp8_cast_bytes(w);
  }

  // Routed experts' dispatch, per token of a device's share of an MoE
  // layer: the tokens permuted into their experts' order (each row read
  // and written once per expert it goes to: 2K h), the experts' outputs
  // permuted back (2K h) and summed with the router's weights (reads K h,
  // writes h): (5K + 1) h in the activation dtype, in the forward, the
  // backward and a rerun forward (MaxText's permute and unpermute in
  // layers/moe.py, Megatron's token dispatcher, torchtitan's token
  // reorderer). Over the tensor axes as the residual stream.
  double dispatch_bytes() const {
    if (m_s.routed_experts <= 0 || m_s.experts_per_token <= 0) {
      return 0;
    }
    const auto K = static_cast<double>(m_s.experts_per_token);
    const double replicated = m_act.residual == ResidualLayout::replicated
                                  ? static_cast<double>(m_act.tensor_shards)
                                  : 1;
    const double passes = reruns_forward(m_act.remat) ? 3 : 2;
    return passes * (5 * K + 1) * m_h * m_act_bytes * replicated;
  }

  // FP8 matmuls cast their inputs in the forward and their output
  // gradients in the backward: read e, write 1 byte an element, over the
  // QKV and FC1 inputs (h each), the attention output (a x d) and the MLP's
  // activation (w); twice (Transformer Engine's and MaxText's fp8 recipes
  // quantize both).
  double fp8_cast_bytes(double w) const {
    if (!m_options.fp8_matmuls.value) {
      return 0;
    }
    const double inputs = 2 * m_h
                          + static_cast<double>(m_model.heads)
                                * static_cast<double>(m_model.head_dim)
                          + w;
    return 2 * (m_act_bytes + 1) * inputs;
  }

  // What eager PyTorch adds to a layer's pass, per token (the residual
  // stream's part, and the part split with the heads and the MLP's
  // width): each op its own kernel. An RMSNorm (torchtitan's
  // models/norms.py) upcasts to f32, squares, takes the mean, scales,
  // casts back and multiplies by its weight: 4e + 24 bytes an element where
  // a fused norm reads and writes (2e); the rotary embedding
  // (apply_rotary_emb) upcasts q and k, multiplies by the complex
  // frequencies and casts back, 2e + 16 bytes an element (fused into its
  // neighbours otherwise); the gated MLP's silu and product, 5e against
  // 3e; residual dropout apart from its add, 2e more. SDPA's output comes
  // back laid out as the output projection reads it, no copy (the saved
  // tensors measured in bench/gpu share its storage).
  std::pair<double, double> eager_bytes(int64_t width, int64_t copies) const {
    if (!m_options.eager_kernels) {
      return {0, 0};
    }
    const double e = m_act_bytes;
    const double dropout = m_model.residual_dropout > 0 ? 2 * 2 * e : 0;
    const double stream = (2 * (2 * e + 24) + dropout) * m_h;
    const double qk = static_cast<double>(m_model.heads + m_model.kv_heads)
                      * static_cast<double>(m_model.head_dim);
    const double rotary = m_model.positions == 0 ? (2 * e + 16) * qk : 0;
    const double gated =
        m_model.mlp == MlpKind::gated
            ? 2 * e * static_cast<double>(width) * static_cast<double>(copies)
            : 0;
    return {stream, rotary + gated};
  }

  // Plain attention's passes over the seq x seq scores of a token's row
  // (every head: a token's heads split over the tensor axes as its rows
  // do not): the fused scale, mask and softmax read and write them (2e),
  // attention dropout reads them and writes its output and a 1-byte mask
  // (2e + 1); the backward's dropout reads the gradient and the mask and
  // writes (2e + 1), the softmax's reads the gradient and the
  // probabilities and writes (3e); a policy that recomputes the attention
  // core reruns the forward's. Megatron's fused softmax
  // (megatron/core/fusions/fused_softmax.py) and dropout; flash attention
  // keeps the scores on chip.
  double score_bytes() const {
    if (m_act.attention != AttentionKind::plain) {
      return 0;
    }
    const double e = m_act_bytes;
    const double dropout = m_model.attention_dropout > 0 ? 2 * e + 1 : 0;
    const double forward = 2 * e + dropout;
    const double backward = 3 * e + dropout;
    LayerFlops core;
    core.attention = 1;
    const bool rerun = recomputed(m_act.remat, m_act.custom_remat, core) > 0;
    const double row =
        static_cast<double>(m_model.heads) * static_cast<double>(m_act.seq);
    return row * (forward * (rerun ? 2 : 1) + backward);
  }

  // The loss over the vocabulary, per token of a device's share: the
  // logits (a token's row split over the tensor axes as the tokens are
  // not) read in the activation dtype and upcast to f32, read twice (the
  // max, the sum of exponentials), the backward's read and write of the
  // gradient: 2e + 16 bytes an element (Megatron's
  // vocab_parallel_cross_entropy, MaxText's cross_entropy_with_logits
  // compute it in f32). Tiles (num_vocab_tiling) move the same bytes.
  double loss_bytes() const {
    return (2 * m_act_bytes + 4 * 4) * static_cast<double>(m_model.vocab);
  }

  // Collectives, per device and step (collectives.cpp), what the compute
  // hides of them, and their sums.
  void time_collectives() {
    const double dense_share =
        m_model.layers > 0
            ? m_dense_layers / static_cast<double>(m_model.layers)
            : 0;
    const CollectiveInputs inputs{
        .mesh = m_mesh,
        .roles = m_roles,
        .act = m_act,
        .in = m_in,
        .options = m_options,
        .dense = m_dense,
        .moe = m_moe,
        .experts_per_token = m_s.experts_per_token,
        .hidden = m_h,
        .act_bytes = m_act_bytes,
        .microbatches = m_microbatches,
        .layers_per_stage = static_cast<double>(m_model.layers) / m_stages,
        .dense_share = dense_share,
        .moe_share = 1 - dense_share,
    };
    m_out.collectives = price_collectives(inputs, m_in.links);
    add_host_copies();
    hide_behind_compute(m_out.collectives, m_out.compute_seconds);
    for (const StepCollective& c : m_out.collectives) {
      m_out.comm_seconds += c.seconds;
      m_out.exposed_comm_seconds += c.exposed_seconds;
    }
  }

  // Host memory's traffic (docs/step.md, "Host transfers"): what the remat
  // policy offloads goes out in each microbatch's forward and comes back
  // in its backward, behind the compute (XLA's async copies); states kept
  // in host memory come in before the optimizer step and go back after it,
  // exposed. Unpriced when the topology gives no host link.
  void add_host_copies() {
    const double bw = m_in.host_bytes_per_s;
    const double per_microbatch =
        m_act.in_flight_factor > 0
            ? static_cast<double>(m_act.host_offload_bytes)
                  / m_act.in_flight_factor
            : 0;
    if (!(bw > 0)) {
      return;
    }
    auto copy = [&](StepPhase phase, double bytes, double count, bool overlap) {
      if (!(bytes > 0) || !(count > 0)) {
        return;
      }
      StepCollective c;
      c.role = Parallelism::host;
      c.op = Collective::host_copy;
      c.phase = phase;
      c.link = LinkClass::host;
      c.bytes_per_device = static_cast<int64_t>(bytes);
      c.count = static_cast<int64_t>(count);
      c.seconds = bytes * count / bw;
      c.overlapped = overlap;
      c.exposed_seconds = overlap ? 0 : c.seconds;
      m_out.collectives.push_back(std::move(c));
    };
    copy(StepPhase::forward, per_microbatch, m_microbatches, true);
    copy(StepPhase::backward, per_microbatch, m_microbatches, true);
    copy(StepPhase::every_pass,
         static_cast<double>(m_in.hosted_state_bytes),
         2,
         false);
  }

  // 1F1B's bubble: (S - 1) / M of the ideal step, / V interleaved
  // (Narayanan et al. 2021); the step and what follows from it.
  void finish_step() {
    const double busy = m_out.compute_seconds + m_out.exposed_comm_seconds;
    m_out.bubble_seconds =
        m_stages > 1 ? busy * (m_stages - 1)
                           / (m_microbatches
                              * static_cast<double>(m_act.stage_interleave))
                     : 0;
    m_out.step_seconds = busy + m_out.bubble_seconds;
    m_out.tokens_per_second_per_device =
        m_tokens / m_out.step_seconds / m_devices;
    m_out.mfu = m_out.model_flops / (m_out.step_seconds * m_devices * m_peak);
  }

  // The scaling book's rooflines (docs/sources.md#rooflines), as warnings at
  // the mesh.
  void warn(std::string code, std::string message, std::string hint) {
    m_diags.warning(std::move(code), std::move(message), m_in.mesh_at).hint =
        std::move(hint);
  }

  const AxisLink& link_of(const std::string& axis) const {
    return m_in.links[static_cast<size_t>(m_mesh.index_of(axis))];
  }

  // An FSDP axis over DCN, or whose link cannot hide its gathers behind a
  // microbatch's compute.
  void warn_fsdp_axes() {
    const bool gpu = m_topology->kind == TopologyKind::gpu;
    for (const std::string& axis : present(m_mesh, m_in.gather_axes)) {
      const AxisLink& link = link_of(axis);
      if (link.link == LinkClass::dcn
          || (!gpu && link.link == LinkClass::mixed)) {
        warn("step.over-dcn",
             fmt::format("FSDP axis {} spans slices: its gathers and "
                         "reduce-scatters of every layer cross DCN at {:g} "
                         "B/s",
                         axis,
                         link.bytes_per_s),
             "put data parallelism (dp) across slices and FSDP inside them "
             "(the scaling book, MaxText's dcn_data_parallelism)");
        continue;
      }
      // Across GPU nodes a collective reduces inside each NVLink domain
      // first, so the node's egress serves its GPUs: the book's critical
      // batch across H100 nodes is 990e12 / (8 x 50e9) = 2475
      // (docs/sources.md#rooflines).
      const double bandwidth =
          gpu && link.link == LinkClass::mixed
              ? link.bytes_per_s
                    * static_cast<double>(
                        std::min(m_topology->nvlink_domain, link.ring_size))
              : link.bytes_per_s;
      if (!(bandwidth > 0)) {
        continue;
      }
      // An MoE layer computes with K of E experts' weights: E / K times the
      // tokens to hide their gathers (docs/sources.md#rooflines).
      const double moe_factor =
          m_s.moe_layers > 0 && m_s.experts_per_token > 0
              ? static_cast<double>(m_s.routed_experts)
                    / static_cast<double>(m_s.experts_per_token)
              : 1.0;
      const double critical = m_peak / bandwidth * moe_factor;
      if (static_cast<double>(m_act.tokens) < critical) {
        warn("step.below-critical-batch",
             fmt::format("{} tokens per device and microbatch are below the "
                         "critical batch of FSDP axis {}: {:.0f} = {:g} "
                         "FLOP/s / {:g} B/s{}; its collectives cannot hide "
                         "behind the compute",
                         m_act.tokens,
                         axis,
                         critical,
                         m_peak,
                         bandwidth,
                         moe_factor > 1
                             ? fmt::format(" x {} experts / {} per token",
                                           m_s.routed_experts,
                                           m_s.experts_per_token)
                             : std::string()),
             "a larger per-device batch, fewer microbatches, or less FSDP "
             "and more data parallelism (docs/sources.md#rooflines)");
      }
    }
  }

  // Tensor axes no spec splits a tensor over: their devices hold whole
  // weights and would repeat the same work.
  void warn_unsplit_tensor_axes() {
    if (m_in.split_axes) {
      for (const std::string& axis : present(m_mesh, m_roles.tensor)) {
        if (m_mesh.find(axis)->size > 1
            && std::find(m_in.split_axes->begin(), m_in.split_axes->end(), axis)
                   == m_in.split_axes->end()) {
          m_out.unsplit_tensor_axes.push_back(axis);
        }
      }
    }
    if (m_out.unsplit_tensor_axes.empty()) {
      return;
    }
    std::vector<std::string> sizes;
    for (const std::string& axis : m_out.unsplit_tensor_axes) {
      sizes.push_back(
          fmt::format("{} ({})", quote(axis), m_mesh.find(axis)->size));
    }
    const bool one = sizes.size() == 1;
    warn("step.tensor-axis-unsplit",
         fmt::format("tensor ax{} {} split{} no tensor: the step counts {} as "
                     "tensor parallelism, each device a share of every "
                     "matmul, but with these specs {} devices hold whole "
                     "weights and would repeat the same work",
                     one ? "is" : "es",
                     fmt::join(sizes, ", "),
                     one ? "s" : "",
                     one ? "it" : "them",
                     one ? "its" : "their"),
         "split the weights over it (rules fsdp-tp; MaxText's rules split "
         "over \"tensor\"), or leave the axis out of the mesh");
  }

  // Tensor axes over DCN, or wider than their links keep compute-bound.
  void warn_tensor_axes() {
    const std::vector<std::string> tensor_axes =
        present(m_mesh, m_roles.tensor);
    if (tensor_axes.empty()) {
      return;
    }
    double tensor_bw = 0;
    bool over_dcn = false;
    for (const std::string& axis : tensor_axes) {
      const AxisLink& link = link_of(axis);
      over_dcn = over_dcn || link.link == LinkClass::dcn
                 || link.link == LinkClass::mixed;
      tensor_bw = tensor_bw == 0 ? link.bytes_per_s
                                 : std::min(tensor_bw, link.bytes_per_s);
    }
    const int64_t width =
        m_s.dense_layers > 0 ? m_s.dense_intermediate : m_s.routed_intermediate;
    const double limit = static_cast<double>(width) * tensor_bw / m_peak;
    const auto t = static_cast<double>(m_roles.size(m_mesh, AxisRole::tensor));
    const bool gpu = m_topology->kind == TopologyKind::gpu;
    if (over_dcn) {
      warn("step.over-dcn",
           fmt::format("tensor axes {} span {}: every layer's "
                       "all-reduces cross {}",
                       fmt::join(tensor_axes, ","),
                       gpu ? "NVLink domains" : "slices",
                       gpu ? "the network between them" : "DCN"),
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
                       m_peak),
           "fewer tensor shards, more FSDP (docs/sources.md#rooflines)");
    }
  }

  // The bottleneck: the largest of compute, exposed communication and the
  // bubble; communication with its most exposed collective.
  void find_bottleneck() {
    StepBottleneck& b = m_out.bottleneck;
    b.kind = BottleneckKind::compute;
    b.seconds = m_out.compute_seconds;
    std::optional<size_t> worst;
    for (size_t i = 0; i < m_out.collectives.size(); ++i) {
      if (!worst
          || m_out.collectives[i].exposed_seconds
                 > m_out.collectives[*worst].exposed_seconds) {
        worst = i;
      }
    }
    if (worst && m_out.exposed_comm_seconds > b.seconds) {
      b.kind = BottleneckKind::communication;
      b.seconds = m_out.exposed_comm_seconds;
      b.collective = worst;
      b.slice_batch = slice_batch(m_out.collectives[*worst]);
    }
    if (m_out.bubble_seconds > b.seconds) {
      b = StepBottleneck{};
      b.kind = BottleneckKind::bubble;
      b.seconds = m_out.bubble_seconds;
    }
  }

  // Data parallelism over DCN, the scaling book's test
  // (docs/sources.md#dcn): a slice's
  // tokens per microbatch against peak / DCN bandwidth per device (v5p:
  // 71,360).
  std::optional<StepBottleneck::SliceBatch> slice_batch(
      const StepCollective& worst) const {
    const bool tpu = m_topology->kind == TopologyKind::tpu;
    const int64_t slices = tpu ? m_topology->tpu.num_slices : 1;
    const double dcn =
        tpu ? m_topology->figures.dcn_bytes_per_s_per_chip.value
                  / static_cast<double>(m_topology->tpu.cores_per_chip)
            : 0;
    if ((worst.link == LinkClass::dcn || worst.link == LinkClass::mixed)
        && worst.role == Parallelism::data && worst.op == Collective::all_reduce
        && slices > 1 && dcn > 0) {
      return StepBottleneck::SliceBatch{
          m_tokens / m_microbatches / static_cast<double>(slices),
          m_peak / dcn};
    }
    return std::nullopt;
  }

  // An efficiency's assumption: the roofline, a flag, or a topology's
  // figure (fitted, with its source).
  static StepEstimate::Assumption efficiency(const char* name,
                                             const Sourced<double>& value) {
    return {name,
            fmt::format("{:g}", value.value),
            value.set() ? to_string(value.at)
                        : std::string("the roofline (jax-ml/scaling-book): "
                                      "no measured or fitted figure for "
                                      "this chip; set it from a profile")};
  }

  // Every constant the estimate assumed, with its value and source.
  void list_assumptions() {
    const StepOptions& o = m_options;
    m_out.assumptions = {
        {"peak_bf16_flops_per_s",
         fmt::format("{:g}", m_peak),
         m_topology->figures.bf16_flops_per_s_per_device.source},
        {"hbm_bytes_per_s",
         fmt::format("{:g}", m_hbm),
         m_topology->figures.hbm_bytes_per_s_per_device.source},
        efficiency("matmul_efficiency", o.matmul_efficiency),
        efficiency("attention_efficiency", o.attention_efficiency),
        {"memory_efficiency",
         fmt::format("{:g}", memory_efficiency()),
         memory_efficiency() < 1
             ? memory_figure().source
             : std::string("the datasheet's bandwidth: no measured figure "
                           "for this chip")},
        {"efficiency_spread",
         fmt::format("{:g}", o.efficiency_spread.value),
         o.efficiency_spread.set()
             ? to_string(o.efficiency_spread.at)
             : std::string("0: the efficiencies are given")},
        {"matmul_dtype",
         o.fp8_matmuls.value ? "fp8" : "bf16",
         o.fp8_matmuls.value
             ? fmt::format(
                 "{}: the weights' matmuls at the FP8 peak, {:g} "
                 "FLOP/s ({}){}",
                 to_string(o.fp8_matmuls.at),
                 m_topology->figures.fp8_flops_per_s_per_device.value,
                 m_topology->figures.fp8_flops_per_s_per_device.source,
                 fp8_efficiency_ratio() < 1 ? fmt::format(
                     ", x {:g}: FP8 GEMMs reach less of their peak ({})",
                     fp8_efficiency_ratio(),
                     m_topology->figures.fp8_efficiency_ratio.source)
                                            : std::string())
             : std::string("the weights' matmuls at the bf16 peak")},
        {"kernels",
         o.eager_kernels ? "eager" : "fused",
         o.eager_kernels
             ? "--kernels eager: PyTorch without torch.compile, each "
               "elementwise op its own kernel (docs/step.md, \"Memory-bound "
               "work\")"
             : "fused elementwise kernels: XLA's fusions, torch.compile, "
               "Transformer Engine (docs/step.md, \"Memory-bound work\")"},
        {"expert_load",
         fmt::format("{:g}", m_act.expert_load),
         m_act.expert_load_source.empty() ? std::string("no routed experts")
                                          : m_act.expert_load_source},
        {"overlap",
         fmt::format("fsdp gathers {}, gradient reduction {}, tensor "
                     "collectives {}, expert all-to-all {}",
                     !o.overlap_fsdp          ? "exposed"
                     : m_in.backward_prefetch ? "prefetched"
                                              : "prefetched in the forward "
                                                "(the backward's exposed: no "
                                                "room to prefetch)",
                     o.overlap_grad_reduce ? "behind the backward" : "exposed",
                     o.overlap_tensor ? "overlapped" : "exposed",
                     o.overlap_expert ? "overlapped" : "exposed"),
         "docs/step.md, \"Overlap\": XLA's async collectives (MaxText's "
         "defaults)"},
    };
    // The matmuls' shapes, when the chip has a measured curve.
    if (!m_topology->figures.matmul_curve.empty()) {
      m_out.assumptions.push_back(
          {"matmul_shape_factor",
           fmt::format("{:.3g}", m_shape_factor),
           "the weights' matmuls at their shapes' measured rates over the "
           "best (docs/step.md, \"Matmul shapes\"): "
               + m_topology->figures.matmul_curve.source
               + (m_s.routed_experts > 0 && !grouped_curve().empty()
                      ? "; the routed experts at the grouped GEMM's rate "
                        "for their tokens an expert (--grouped-gemm "
                        "grouped): "
                            + grouped_curve().source
                      : std::string())});
    }
    // The kernels' tiles, where they compute more than the model counts.
    const double forward = flash_block_ratio(false);
    const double backward = flash_block_ratio(true);
    if (m_act.attention == AttentionKind::flash
        && (forward != 1 || backward != 1)) {
      const FlashBlocks& b = *o.flash_blocks;
      m_out.assumptions.push_back(
          {"attention_blocks",
           fmt::format("{:.4g} forward, {:.4g} backward", forward, backward),
           fmt::format("{}: splash attention's {}x{} blocks (backward "
                       "{}x{}{}) compute each block the causal mask crosses "
                       "whole, over the half the model counts (docs/step.md, "
                       "\"Kernel tiles\")",
                       to_string(b.at),
                       b.q,
                       b.kv,
                       b.q_dkv,
                       b.kv_dkv,
                       b.fused_backward ? ", fused" : "")});
    }
    if (m_grouped_ratio != 1) {
      const GroupedTiles& g = *o.grouped_tiles;
      m_out.assumptions.push_back(
          {"grouped_tiles",
           fmt::format("{:.4g}", m_grouped_ratio),
           fmt::format("{}: {}'s grouped matmul visits a row tile more for "
                       "each expert whose rows start inside one; the routed "
                       "experts' FLOPs x this (docs/step.md, \"Kernel "
                       "tiles\")",
                       to_string(g.at),
                       g.kernel)});
    }
    // The host link, when something crosses it.
    if (m_act.host_offload_bytes > 0 || m_in.hosted_state_bytes > 0) {
      const bool known = m_in.host_bytes_per_s > 0;
      m_out.assumptions.push_back(
          {"host_bytes_per_s",
           known ? fmt::format("{:g}", m_in.host_bytes_per_s)
                 : std::string("unknown"),
           known ? m_topology->figures.host_bytes_per_s_per_chip.source
                 : std::string("the topology gives no host link: host "
                               "copies are not priced")});
    }
  }

  const ModelConfig& m_model;
  const Mesh& m_mesh;
  const AxisRoles& m_roles;
  const ActivationEstimate& m_act;
  const StepInputs& m_in;
  const StepOptions& m_options;
  Diagnostics& m_diags;
  StepEstimate m_out;
  const Topology* m_topology = nullptr;
  LayerStructure m_s;
  LayerFlops m_dense;  // per token, forward; attention at the seq
  LayerFlops m_moe;
  double m_peak = 0;  // bf16 FLOP/s of a device
  double m_hbm = 0;   // its HBM bytes/s
  double m_tokens = 0;
  double m_devices = 0;
  double m_h = 0;
  double m_stages = 1;
  double m_microbatches = 1;
  double m_dense_layers = 0;
  double m_moe_layers = 0;
  double m_split = 1;          // the tokens' shards: data, tensor, seq, expert
  double m_shape_factor = 1;   // shape_factor()
  double m_grouped_ratio = 1;  // grouped_tile_flops(): executed / routed
  bool m_warned_fp8 = false;
  double m_act_bytes = 0;  // of an activation element
};

}  // namespace

StepInputs step_inputs_for(const ModelConfig& model,
                           const Topology& topology,
                           std::span<const AxisLink> links,
                           const MemoryEstimate& memory,
                           Location mesh_at) {
  DType weights = memory.param_dtype.value_or(model.dtype);
  if (is_fp8(weights)) {
    weights = memory.fp8_param_dtype.value_or(DType::bf16);
  }
  StepInputs in;
  in.topology = &topology;
  in.links = links;
  in.gather_axes = memory.gather_axes;
  in.split_axes = memory.split_axes;
  // FSDP moves a weight held wider than the compute dtype in it, and its
  // gradient too unless the recipe holds gradients apart (fp32 grads).
  const DType moved = memory.gather_cast.value_or(weights);
  in.weight_bytes = dtype_bits(moved) / 8;
  in.grad_bytes = dtype_bits(memory.grad_dtype.value_or(moved)) / 8;
  in.optimizer_state_bytes = memory.per_device.model_states();
  in.grad_state_bytes = memory.per_device.grads;
  in.backward_prefetch = memory.prefetch_dropped == 0;
  const int64_t per_chip =
      topology.kind == TopologyKind::tpu
          ? std::max<int64_t>(topology.tpu.cores_per_chip, 1)
          : 1;
  in.host_bytes_per_s = topology.figures.host_bytes_per_s_per_chip.value
                        / static_cast<double>(per_chip);
  in.hosted_state_bytes = memory.hosted_params + memory.hosted_optimizer;
  in.pytorch_tensor_parallel = memory.runtime == Runtime::pytorch;
  in.sharded_optimizer = memory.zero >= 1 && memory.zero_shards > 1;
  in.mesh_at = std::move(mesh_at);
  return in;
}

std::optional<StepEstimate> estimate_step(const ModelConfig& model,
                                          const Mesh& mesh,
                                          const AxisRoles& roles,
                                          const ActivationEstimate& act,
                                          const StepInputs& in,
                                          const StepOptions& options,
                                          Diagnostics& diags) {
  std::optional<StepEstimate> out =
      StepEstimator(model, mesh, roles, act, in, options, diags).run();
  if (out) {
    out->step_seconds_low = out->step_seconds;
    out->step_seconds_high = out->step_seconds;
  }
  return out;
}

void estimate_step_band(const ModelConfig& model,
                        const Mesh& mesh,
                        const AxisRoles& roles,
                        const ActivationEstimate& act,
                        const StepInputs& in,
                        const StepOptions& options,
                        StepEstimate& step) {
  const double spread = options.efficiency_spread.value;
  if (spread <= 0) {
    return;
  }
  // The same step with both efficiencies at the ends of their spread (the
  // reruns' diagnostics are the point estimate's).
  const auto at = [&](double factor) {
    StepOptions o = options;
    o.efficiency_spread.value = 0;
    o.matmul_efficiency.value =
        std::clamp(options.matmul_efficiency.value * factor, 0.01, 1.0);
    o.attention_efficiency.value =
        std::clamp(options.attention_efficiency.value * factor, 0.01, 1.0);
    Diagnostics quiet;
    const std::optional<StepEstimate> e =
        StepEstimator(model, mesh, roles, act, in, o, quiet).run();
    return e ? e->step_seconds : step.step_seconds;
  };
  step.step_seconds_low = std::min(at(1 + spread), step.step_seconds);
  step.step_seconds_high = std::max(at(1 - spread), step.step_seconds);
}

}  // namespace shardplan
