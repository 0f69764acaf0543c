// estimate_memory (docs/memory.md): MemoryEstimator's phases, from the
// dtypes and the roles of the axes through each tensor's cost, the
// placement groups' buckets and gather buffers, to the most loaded group's
// total and its capacity.

#include "memory/internal.hpp"

#include <climits>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <unordered_map>

namespace shardplan {

namespace {

using memory_detail::AxisUse;
using memory_detail::Gather;
using memory_detail::Gathers;
using memory_detail::GatherUnits;
using memory_detail::has_grads;
using memory_detail::k_roles;
using memory_detail::OptimizerState;
using memory_detail::Role;
using memory_detail::state_of;
using memory_detail::Sum;

// What a tensor costs follows from its layout (spec, shape, dtype) and its
// role: computed once per pair (a plan's layers and experts share a few).
struct Cost {
  DType held = DType::f32;
  StateBytes state;
  StateBytes min_state;
  int64_t gather_buffer = 0;  // when used gathered: params (+ grads)
};

// The per-device sums of the tensors of one bucket
// (MemoryEstimator::bucket_of).
struct Totals {
  Sum params, grads, optimizer, min_states;
  int64_t update = 0;  // the largest of its tensors' StateBytes::update
};

// Per tensor, what the most loaded group's lists need: counted as the
// tensors come without placement (one group holds them all), else once the
// group is known.
struct Record {
  StateBytes state;
  DType held = DType::f32;
  int64_t count = 1;  // the tensors it stands for (MemoryFacts::counts)
  bool dropped = false;
  bool uneven = false;
};

// The order of MemoryEstimate::largest: by model states, descending;
// manifest order breaks ties.
bool larger(const TensorMemory& a, const TensorMemory& b) {
  if (a.per_device.model_states() != b.per_device.model_states()) {
    return a.per_device.model_states() > b.per_device.model_states();
  }
  return a.tensor < b.tensor;
}

void overflow_error(const Manifest& manifest, Diagnostics& to) {
  to.error("memory.overflow",
           "the per-device memory does not fit in a 64-bit byte count",
           Location::of(manifest.source));
}

// One estimate_memory call: the model state, the same for every set of
// activations, is computed once (run's phases up to add_tensors), then
// finished once per set of activations.
class MemoryEstimator {
 public:
  MemoryEstimator(const Manifest& manifest,
                  const Mesh& mesh,
                  const std::vector<TensorSharding>& shardings,
                  const MemoryOptions& options,
                  Diagnostics& diags)
      : m_manifest(manifest),
        m_tensors(manifest.tensors()),
        m_mesh(mesh),
        m_shardings(shardings),
        m_options(options),
        m_diags(diags),
        m_split(mesh.axes.size(), false) {
    m_out.recipe = options.recipe;
    m_out.zero = options.zero.value;
    m_out.headroom = options.headroom;
    m_out.headroom_source = options.headroom_source;
    m_out.runtime = options.runtime;
    m_out.reserve = options.reserve;
    m_out.reserve_source = options.reserve_source;
    m_out.hbm_bytes = options.hbm_bytes.value;
    m_out.host_memory_bytes = options.host_memory_bytes.value;
    m_out.devices_per_host = options.devices_per_host;
  }
  MemoryEstimator(const MemoryEstimator&) = delete;
  MemoryEstimator& operator=(const MemoryEstimator&) = delete;

  // The estimate per entry of `activations`, each one's own diagnostics in
  // activation_diags at its index; empty when the model state fails.
  std::vector<std::optional<MemoryEstimate>> run(
      std::span<const std::vector<ActivationLoad>> activations,
      std::span<Diagnostics> activation_diags) {
    if (!check_dtypes() || !resolve_data_axes() || !resolve_roles()) {
      return {};
    }
    warn_zero_no_effect();
    read_facts();
    if (!place()) {
      return {};
    }
    resolve_grads();
    resolve_optimizer();
    m_units.emplace(
        m_facts->names, m_out.placement, has_grads(m_options.recipe));
    if (!add_tensors() || !sums_fit()) {
      overflow_error(m_manifest, m_diags);
      return {};
    }
    list_split_axes();
    std::vector<std::optional<MemoryEstimate>> results;
    results.reserve(activations.size());
    for (size_t v = 0; v < activations.size(); ++v) {
      results.push_back(finish(activations[v], activation_diags[v]));
    }
    return results;
  }

 private:
  // dtypes: a dtype to hold weights or gradients in must be floating point.
  bool check_dtype(const Sourced<std::optional<DType>>& given,
                   std::string_view what =
                       "weights or gradients are "
                       "trained in") {
    const std::optional<DType>& dtype = given.value;
    if (!dtype || (is_floating(*dtype) && *dtype != DType::f8_e8m0)) {
      return true;
    }
    m_diags
        .error("memory.dtype",
               fmt::format("{} is not a floating-point dtype {}",
                           quote(to_string(*dtype)),
                           what),
               given.at)
        .hint = "e.g. f32, bf16, f16 or f8_e4m3";
    return false;
  }

  // Both reported.
  bool check_dtypes() {
    const bool param = check_dtype(m_options.param_dtype);
    const bool grad = check_dtype(m_options.grad_dtype);
    const bool moments =
        check_dtype(m_options.moment_dtype, "optimizer moments are kept in");
    return param && grad && moments;
  }

  // roles: the data axes as given, each once, in their order.
  bool resolve_data_axes() {
    const Sourced<std::vector<std::string>>& data_axes = m_options.data_axes;
    if (data_axes.value.empty()) {
      return true;
    }
    std::vector<std::string> names = m_mesh.axis_names();
    for (const std::string& name : data_axes.value) {
      if (m_mesh.find(name) == nullptr) {
        Diagnostic& d = m_diags.error(
            "memory.data-axis",
            fmt::format("data axis {} is not an axis of the mesh {}",
                        quote(name),
                        to_string(m_mesh)),
            data_axes.at);
        std::string best = closest_match(name, names);
        d.hint = best.empty() ? fmt::format("the mesh's axes are {}",
                                            fmt::join(names, ", "))
                              : fmt::format("did you mean {}?", quote(best));
        return false;
      }
      if (std::find(m_out.data_axes.begin(), m_out.data_axes.end(), name)
          == m_out.data_axes.end()) {
        m_out.data_axes.push_back(name);
      }
    }
    return true;
  }

  // The roles of the axes: the caller's, or by name with the data axes
  // given (which cannot fail: they are the mesh's, and no other role is
  // given). Without data axes given, the data role's (mesh order); ZeRO
  // shards over their sizes' product.
  bool resolve_roles() {
    m_roles = m_options.roles;
    if (!m_roles) {
      AxisRoles given;
      given.data = m_out.data_axes;
      AxisRoleSources sources;
      sources.data = m_options.data_axes.at;
      m_roles = resolve_axis_roles(m_mesh, given, sources, m_diags);
      if (!m_roles) {
        return false;
      }
    }
    if (m_options.data_axes.value.empty()) {
      for (const std::string& name : m_roles->data) {
        if (m_mesh.find(name) != nullptr) {
          m_out.data_axes.push_back(name);
        }
      }
    }
    for (const std::string& name : m_out.data_axes) {
      m_out.zero_shards *= m_mesh.find(name)->size;
    }
    m_use.emplace(
        m_mesh, *m_roles, m_out.data_axes, m_out.zero_shards, m_out.zero);
    return true;
  }

  void warn_zero_no_effect() {
    const Sourced<int>& zero = m_options.zero;
    if (zero.value == 0 || m_out.zero_shards != 1) {
      return;
    }
    Diagnostic& d = m_diags.warning(
        "memory.zero-no-effect",
        m_out.data_axes.empty()
            ? fmt::format("{} {} shards nothing: the mesh {} has no data "
                          "axis (by name: dp, data, fsdp, fsdp_transpose)",
                          to_string(zero.at),
                          zero.value,
                          to_string(m_mesh))
            : fmt::format("{} {} shards nothing: the data axes ({}) have "
                          "size 1",
                          to_string(zero.at),
                          zero.value,
                          fmt::join(m_out.data_axes, ", ")),
        zero.at);
    d.hint = fmt::format("name the data-parallel axes with {}",
                         to_string(m_options.data_axes.at));
  }

  // What each tensor's name says: its layer, its expert, an embedding; its
  // kind. The caller's when given.
  void read_facts() {
    if (m_options.facts == nullptr) {
      m_own_facts = memory_facts(m_manifest);
      m_facts = &*m_own_facts;
    } else {
      m_facts = m_options.facts;
    }
    assert(m_facts->names.size() == m_tensors.size());
  }

  // Where tensors live along the stage and expert axes.
  bool place() {
    const PlacementOptions options{{m_roles->stage, m_options.stage_axes_at},
                                   {m_roles->expert, m_options.expert_axes_at},
                                   m_options.layers,
                                   m_options.experts};
    std::optional<Placement> placed = place_tensors(
        m_manifest, m_mesh, m_shardings, options, m_facts->names, m_diags);
    if (!placed) {
      return false;
    }
    m_out.placement = std::move(*placed);
    m_stages = m_out.placement.stages;
    m_ranks = m_out.placement.expert_ranks;
    return true;
  }

  // dtypes: the optimizer's state, the recipe's unless given: adamw,
  // moments in f32 (or, like optax, in the param dtype, mu in mu_dtype),
  // an f32 master of narrower weights but with scaling-book.
  void resolve_optimizer() {
    const MemoryOptions& o = m_options;
    OptimizerState& s = m_state;
    s.optimizer = o.optimizer.value.value_or(Optimizer::adamw);
    if (o.moments_like_params) {
      s.mu = o.moment_dtype.value;
      s.nu = std::nullopt;
    } else {
      s.mu = s.nu = o.moment_dtype.value.value_or(DType::f32);
    }
    s.master = o.master.value.value_or(o.recipe != Recipe::scaling_book);
    m_out.optimizer = s.optimizer;
    m_out.first_moment_dtype = s.mu;
    m_out.second_moment_dtype = s.nu;
    m_out.master = s.master;
  }

  // dtypes: the param dtype as given, and the gradients' when the recipe
  // counts them.
  void resolve_grads() {
    const Sourced<std::optional<DType>>& grad_dtype = m_options.grad_dtype;
    m_out.param_dtype = m_options.param_dtype.value;
    m_out.grads_counted = has_grads(m_options.recipe);
    if (m_out.grads_counted) {
      m_out.grad_dtype = grad_dtype.value;
      if (!m_out.grad_dtype && m_options.recipe == Recipe::adam_fp32_grads) {
        m_out.grad_dtype = DType::f32;
      }
    } else if (grad_dtype.value) {
      m_diags
          .warning("memory.grad-dtype-unused",
                   fmt::format("{} {} has no effect: recipe {} counts no "
                               "gradients",
                               to_string(grad_dtype.at),
                               to_string(*grad_dtype.value),
                               to_string(m_options.recipe)),
                   grad_dtype.at)
          .hint =
          "recipes with gradients: adam, adam-fp32-grads (megatron), "
          "adam-fp32-accum";
    }
  }

  // The dtype a trained tensor stored as `stored` is held in.
  DType held_dtype(DType stored) const {
    if (m_options.param_dtype.value) {
      return *m_options.param_dtype.value;
    }
    const bool training = m_options.recipe != Recipe::params_only;
    return training && is_fp8(stored) ? DType::bf16 : stored;
  }

  // Tensor t's role. A scale is dropped when the FP8 weight it scales is
  // held in a dtype other than FP8: dequantized, the weight needs it no
  // more (DeepSeek-V3's inference/fp8_cast_bf16.py drops every
  // *_scale_inv).
  Role role_of(size_t t) const {
    switch (m_facts->kinds[t]) {
      case MemoryFacts::Kind::scale: {
        const std::optional<DType>& weight = m_facts->scaled_dtype[t];
        return weight && is_fp8(*weight) && !is_fp8(held_dtype(*weight))
                   ? Role::dropped_scale
                   : Role::scale;
      }
      case MemoryFacts::Kind::frozen:
        return Role::frozen;
      case MemoryFacts::Kind::expert_weight:
        return Role::expert_weight;
      case MemoryFacts::Kind::weight:
        break;
    }
    return Role::weight;
  }

  // dtypes: the scales counted, and what the first FP8 weight is held in.
  void count_dtypes(size_t t, Role role, int64_t count) {
    if (role == Role::scale || role == Role::dropped_scale) {
      m_out.scale_tensors += count;
      m_out.dropped_scale_tensors += role == Role::dropped_scale ? count : 0;
    } else if (is_fp8(m_tensors[t].dtype) && !m_out.fp8_param_dtype) {
      m_out.fp8_param_dtype = held_dtype(m_tensors[t].dtype);  // trainable
    }
  }

  // cost of a tensor: its state on the device with the largest shard and
  // on the one with the smallest, and its bytes in its unit's gather
  // buffer. nullopt on an overflow.
  std::optional<Cost> cost_of(const TensorSharding& s,
                              const Tensor& tensor,
                              Role role) {
    Cost cost;
    if (role == Role::dropped_scale) {
      return cost;  // nothing held
    }
    const bool trained = role == Role::weight || role == Role::expert_weight;
    cost.held = trained ? held_dtype(tensor.dtype) : tensor.dtype;
    const PartitionSpec* spec = s.spec();
    if (spec) {
      for (const DimSharding& dim : spec->dims) {
        for (const std::string& axis : dim.axes) {
          m_split[static_cast<size_t>(m_mesh.index_of(axis))] = true;
        }
      }
    }
    // ZeRO shards over the data axes the spec leaves free.
    const int64_t free_data = m_use->free_data(spec);
    const bool matrix = tensor.shape.size() >= 2;
    std::optional<StateBytes> state = state_of(s.elements_per_device(),
                                               cost.held,
                                               trained,
                                               m_options.recipe,
                                               m_state,
                                               matrix,
                                               m_out.grad_dtype,
                                               m_out.zero,
                                               free_data);
    std::optional<StateBytes> min_state = state_of(s.min_elements_per_device(),
                                                   cost.held,
                                                   trained,
                                                   m_options.recipe,
                                                   m_state,
                                                   matrix,
                                                   m_out.grad_dtype,
                                                   m_out.zero,
                                                   free_data);
    if (!state || !min_state) {
      return {};
    }
    cost.state = *state;
    cost.min_state = *min_state;
    if (!m_use->gathered(s, role).empty()) {
      std::optional<int64_t> gathered =
          gathered_bytes(s, tensor, role, cost.held, trained);
      if (!gathered) {
        return {};
      }
      cost.gather_buffer = *gathered;
    }
    return cost;
  }

  // The dtype a weight held in `held` is all-gathered and its gradient
  // reduce-scattered in: the compute dtype when narrower.
  DType moved_dtype(DType held) const {
    const DType compute = m_options.compute_dtype;
    return is_floating(held) && dtype_bits(held) > dtype_bits(compute) ? compute
                                                                       : held;
  }

  // A tensor gathered at use: every dim split only over the axes kept, in
  // the dtype it moves in; as much again for its gradients when they are
  // counted.
  std::optional<int64_t> gathered_bytes(const TensorSharding& s,
                                        const Tensor& tensor,
                                        Role role,
                                        DType held,
                                        bool trained) const {
    const PartitionSpec* spec = s.spec();
    int64_t elements = 1;
    for (size_t d = 0; d < tensor.shape.size() && elements > 0; ++d) {
      int64_t shards = 1;
      if (spec && d < spec->dims.size()) {
        for (const std::string& axis : spec->dims[d].axes) {
          if (m_use->kept(axis, role)) {
            shards *= m_mesh.find(axis)->size;
          }
        }
      }
      elements *= ceil_div(tensor.shape[d], shards);  // <= dim
    }
    std::optional<int64_t> bytes =
        bytes_for(elements, trained ? moved_dtype(held) : held);
    if (!bytes) {
      return {};
    }
    const int64_t copies = has_grads(m_options.recipe) && trained ? 2 : 1;
    return checked_mul(*bytes, copies);
  }

  // Tensor t's cost: remembered per layout and role when its layout is
  // shared; a layout no other tensor holds (check's specs give each tensor
  // its own) is computed directly, as remembering it could never pay.
  // nullptr on an overflow.
  const Cost* tensor_cost(size_t t, Role role) {
    const TensorSharding& s = m_shardings[t];
    if (s.layout.use_count() > 1) {
      std::optional<Cost>& slot =
          m_costs[s.layout.get()][static_cast<size_t>(role)];
      if (!slot) {
        slot = cost_of(s, m_tensors[t], role);
      }
      return slot ? &*slot : nullptr;
    }
    m_computed = cost_of(s, m_tensors[t], role);
    return m_computed ? &*m_computed : nullptr;
  }

  // buckets: the per-device sums of the tensors on every group (bucket 0),
  // on one stage and every rank (1 + s), on every stage and one rank
  // (1 + S + r), on one group (1 + S + R + s x R + r). A group's devices
  // hold the sum of its four buckets.
  size_t bucket_of(const TensorPlacement& p) const {
    if (p.stage == k_every && p.expert_rank == k_every) {
      return 0;
    }
    if (p.expert_rank == k_every) {
      return static_cast<size_t>(1 + p.stage);
    }
    if (p.stage == k_every) {
      return static_cast<size_t>(1 + m_stages + p.expert_rank);
    }
    return static_cast<size_t>(1 + m_stages + m_ranks + p.stage * m_ranks
                               + p.expert_rank);
  }

  // A tensor of an MTP module the framework does not build: a layer index
  // at or beyond the decoder layers plus the MTP modules trained.
  bool untrained(size_t t) const {
    const std::optional<int64_t>& layer = m_facts->names[t].layer;
    // Both non-negative: the difference cannot overflow where a sum could.
    return m_options.mtp_layers && m_options.layers && layer
           && *layer - *m_options.layers >= *m_options.mtp_layers;
  }

  // Each tensor's cost, as many times as it stands for, into its bucket,
  // its record (without placement: the lists) and its gather unit. False
  // on an overflow of a tensor's cost.
  bool add_tensors() {
    const Placement& placement = m_out.placement;
    m_buckets.resize(
        static_cast<size_t>(1 + m_stages + m_ranks)
        + (placement.placed() ? static_cast<size_t>(m_stages * m_ranks) : 0));
    m_records.resize(placement.placed() ? m_tensors.size() : 0);
    m_largest.reserve(m_options.largest);
    for (size_t t = 0; t < m_shardings.size(); ++t) {
      const TensorSharding& s = m_shardings[t];
      const Role role = role_of(t);
      const int64_t count = m_facts->count(t);
      if (untrained(t)) {
        m_out.untrained_tensors += count;
        const Record record{{}, m_tensors[t].dtype, count, true, false};
        if (placement.placed()) {
          m_records[t] = record;
        } else {
          account(m_out, m_largest, t, record);
        }
        continue;
      }
      count_dtypes(t, role, count);
      const Cost* cost = tensor_cost(t, role);
      if (!cost) {
        return false;
      }
      const TensorPlacement where =
          placement.placed() ? placement.tensors[t] : TensorPlacement{};
      Totals& bucket = m_buckets[bucket_of(where)];
      bucket.params.add(cost->state.params, count);
      bucket.grads.add(cost->state.grads, count);
      bucket.optimizer.add(cost->state.optimizer, count);
      bucket.min_states.add(cost->min_state.model_states(), count);
      bucket.update = std::max(bucket.update, cost->state.update);
      const Record record{cost->state,
                          cost->held,
                          count,
                          role == Role::dropped_scale,
                          s.min_bytes_per_device() != s.bytes_per_device()};
      if (placement.placed()) {
        m_records[t] = record;
      } else {
        account(m_out, m_largest, t, record);
      }
      if (cost->gather_buffer > 0) {
        m_units->add(t, where.expert_rank, cost->gather_buffer, count);
      }
    }
    return true;
  }

  // No bucket's or unit's sum overflowed.
  bool sums_fit() const {
    if (m_units->overflow()) {
      return false;
    }
    return std::none_of(
        m_buckets.begin(), m_buckets.end(), [](const Totals& b) {
          return b.params.overflow() || b.grads.overflow()
                 || b.optimizer.overflow() || b.min_states.overflow();
        });
  }

  void list_split_axes() {
    for (size_t a = 0; a < m_mesh.axes.size(); ++a) {
      if (m_split[a]) {
        m_out.split_axes.push_back(m_mesh.axes[a].name);
      }
    }
  }

  // Tensor t into the lists of `est`: the `largest` tensors by model
  // states, kept in `heap` whose top is the least of them, and params by
  // dtype.
  void account(MemoryEstimate& est,
               std::vector<TensorMemory>& heap,
               size_t t,
               const Record& record) const {
    if (m_options.largest > 0) {
      const TensorMemory entry{t, record.state};
      if (heap.size() < m_options.largest) {
        heap.push_back(entry);
        std::push_heap(heap.begin(), heap.end(), larger);
      } else if (larger(entry, heap.front())) {
        std::pop_heap(heap.begin(), heap.end(), larger);
        heap.back() = entry;
        std::push_heap(heap.begin(), heap.end(), larger);
      }
    }
    est.uneven_tensors += record.uneven ? record.count : 0;
    if (record.dropped) {
      return;  // not held
    }
    auto dtype_it = std::find_if(
        est.by_dtype.begin(), est.by_dtype.end(), [&](const DtypeMemory& m) {
          return m.dtype == record.held;
        });
    if (dtype_it == est.by_dtype.end()) {
      est.by_dtype.push_back(DtypeMemory{record.held, 0, 0});
      dtype_it = est.by_dtype.end() - 1;
    }
    dtype_it->tensors += record.count;
    // A part of the group's params, whose sum was checked: no overflow.
    dtype_it->params_per_device += record.state.params * record.count;
  }

  // finish: the estimate with one set of activations; the model state
  // above is the same for each.
  std::optional<MemoryEstimate> finish(const std::vector<ActivationLoad>& loads,
                                       Diagnostics& found) {
    assert(loads.size() <= 1 || loads.size() == static_cast<size_t>(m_stages));
    MemoryEstimate est = m_out;
    std::optional<std::pair<GroupMemory, Gather>> most =
        most_loaded_group(est, loads, true);
    if (most && m_options.runtime == Runtime::xla
        && !within_capacity(est, most->first.total)) {
      // XLA schedules under a memory limit: without the prefetch, if that
      // fits (docs/memory.md, "The peak").
      MemoryEstimate lean = m_out;
      std::optional<std::pair<GroupMemory, Gather>> without =
          most_loaded_group(lean, loads, false);
      if (without && within_capacity(lean, without->first.total)) {
        lean.prefetch_dropped = most->first.total - without->first.total;
        est = std::move(lean);
        most = std::move(without);
      }
    }
    if (!most) {
      overflow_error(m_manifest, found);
      return {};
    }
    const GroupMemory& group = most->first;
    est.stage = group.stage;
    est.expert_rank = group.expert_rank;
    est.per_device = group.per_device;
    est.peak_phase = group.phase;
    est.hosted_params = group.hosted_params;
    est.hosted_optimizer = group.hosted_optimizer;
    est.gather_buffer = group.gather_buffer;
    est.activations_counted = !loads.empty();
    est.activations = group.activations;
    est.optimizer_step = group.optimizer_step;
    est.host_offload = group.host_offload;
    est.max_device_total = group.total;
    est.min_device_total = group.min_total;
    describe_gather(est, group, most->second);
    list_tensors(est, group);
    const std::string where = where_text(est);
    warn_uneven(est, where, found);
    check_capacity(est, where, found);
    check_host(est, found);
    return est;
  }

  // Each group's memory; the most loaded one (stage-major order breaks
  // ties) with its gather buffer, and with placement each stage's most
  // loaded group in est.stages. nullopt on an overflow.
  std::optional<std::pair<GroupMemory, Gather>> most_loaded_group(
      MemoryEstimate& est,
      const std::vector<ActivationLoad>& loads,
      bool prefetch) {
    std::optional<std::pair<GroupMemory, Gather>> most;
    for (int64_t s = 0; s < m_stages; ++s) {
      std::optional<GroupMemory> stage_most;
      for (int64_t r = 0; r < m_ranks; ++r) {
        std::optional<std::pair<GroupMemory, Gather>> g =
            group_memory(s, r, loads, prefetch);
        if (!g) {
          return {};
        }
        if (!stage_most || g->first.total > stage_most->total) {
          stage_most = g->first;
        }
        if (!most || g->first.total > most->first.total) {
          most = std::move(g);
        }
      }
      if (m_out.placement.placed()) {
        est.stages.push_back(*stage_most);
      }
    }
    assert(most);
    return most;
  }

  static void add_bucket(Totals& sum, const Totals& bucket) {
    sum.params.add(bucket.params.value());
    sum.grads.add(bucket.grads.value());
    sum.optimizer.add(bucket.optimizer.value());
    sum.min_states.add(bucket.min_states.value());
    sum.update = std::max(sum.update, bucket.update);
  }

  // gather buffer: group (s, r)'s memory: its buckets, its gather buffer
  // (with the next unit prefetched, or not), its stage's activations.
  // nullopt on an overflow.
  std::optional<std::pair<GroupMemory, Gather>> group_memory(
      int64_t s,
      int64_t r,
      const std::vector<ActivationLoad>& loads,
      bool prefetch) {
    GroupMemory g;
    g.stage = s;
    g.expert_rank = r;
    Totals sum;
    add_bucket(sum, m_buckets[0]);
    if (m_out.placement.placed()) {
      add_bucket(sum, m_buckets[static_cast<size_t>(1 + s)]);
      add_bucket(sum, m_buckets[static_cast<size_t>(1 + m_stages + r)]);
      add_bucket(sum,
                 m_buckets[static_cast<size_t>(1 + m_stages + m_ranks
                                               + s * m_ranks + r)]);
    }
    std::optional<Gathers> gathers = m_units->gather(s, r);
    if (!gathers) {
      return {};
    }
    if (!prefetch) {
      gathers = Gathers{gathers->layers.without_prefetch(),
                        gathers->loss.without_prefetch()};
    }
    g.per_device = StateBytes{
        sum.params.value(), sum.grads.value(), sum.optimizer.value()};
    ActivationLoad a;
    if (!loads.empty()) {
      a = loads[loads.size() == 1 ? 0 : static_cast<size_t>(s)];
      g.host_offload = a.host_bytes;
    }
    // The backward's two phases, each beside the saved activations: a
    // layer's (its recompute, two layers gathered) and the loss's (the
    // logits and their gradient, the units of no layer gathered).
    Sum layer, loss;
    layer.add(a.saved_bytes);
    layer.add(a.recompute_bytes);
    loss.add(a.saved_bytes);
    loss.add(a.loss_bytes);
    const int64_t layer_acts = layer.value();
    const int64_t loss_acts = loss.value();
    layer.add(gathers->layers.bytes);
    loss.add(gathers->loss.bytes);
    // Only the stage that holds the head has a loss.
    const bool in_loss = a.loss_bytes > 0 && loss.value() > layer.value();
    Gather& gather = in_loss ? gathers->loss : gathers->layers;
    g.gather_buffer = gather.bytes;
    g.activations = in_loss ? loss_acts : layer_acts;
    g.optimizer_step = sum.update;
    // The step runs after the backward has freed the gather buffer and the
    // activations: the peak is the larger of the phases.
    const int64_t backward = in_loss ? loss.value() : layer.value();
    // States kept in host memory come to HBM for the optimizer step alone.
    g.hosted_params =
        m_options.parameter_host_offload.value ? sum.params.value() : 0;
    g.hosted_optimizer =
        m_options.optimizer_host_offload.value ? sum.optimizer.value() : 0;
    const int64_t hosted = g.hosted_params + g.hosted_optimizer;
    const bool step_peak = sum.update + hosted > backward;
    g.phase = step_peak ? MemoryPhase::optimizer_step
              : in_loss ? MemoryPhase::loss
                        : MemoryPhase::layer_backward;
    Sum total, min_total;
    total.add(sum.params.value());
    total.add(sum.grads.value());
    total.add(sum.optimizer.value());
    total.add(step_peak ? sum.update : backward - hosted);
    min_total.add(sum.min_states.value());
    min_total.add(step_peak ? sum.update : backward - hosted);
    if (sum.params.overflow() || sum.grads.overflow()
        || sum.optimizer.overflow() || sum.min_states.overflow()
        || layer.overflow() || loss.overflow() || total.overflow()
        || min_total.overflow()) {
      return {};
    }
    g.total = total.value();
    g.min_total = min_total.value();
    return std::make_pair(g, std::move(gather));
  }

  // A tensor the group holds.
  bool in_group(size_t t, const GroupMemory& group) const {
    if (!m_out.placement.placed()) {
      return true;
    }
    const TensorPlacement& p = m_out.placement.tensors[t];
    return (p.stage == k_every || p.stage == group.stage)
           && (p.expert_rank == k_every || p.expert_rank == group.expert_rank);
  }

  // The gather buffer's units, and the axes their tensors the group holds
  // are gathered over.
  void describe_gather(MemoryEstimate& est,
                       const GroupMemory& group,
                       const Gather& gather) const {
    for (size_t u : gather.units) {
      est.gather_units.push_back(
          m_units->describe(u, group.expert_rank, m_tensors, m_facts->names));
    }
    if (gather.units.empty()) {
      return;
    }
    std::vector<bool> gathered(m_mesh.axes.size(), false);
    for (size_t t = 0; t < m_tensors.size(); ++t) {
      const size_t unit = m_units->unit_of(t);
      if (std::find(gather.units.begin(), gather.units.end(), unit)
              == gather.units.end()
          || !in_group(t, group)) {
        continue;
      }
      const std::vector<std::string> axes =
          m_use->gathered(m_shardings[t], role_of(t));
      for (const std::string& axis : axes) {
        gathered[static_cast<size_t>(m_mesh.index_of(axis))] = true;
      }
      const Role role = role_of(t);
      const DType held = held_dtype(m_tensors[t].dtype);
      if (!axes.empty() && (role == Role::weight || role == Role::expert_weight)
          && moved_dtype(held) != held) {
        est.gather_cast = moved_dtype(held);
      }
    }
    for (size_t a = 0; a < m_mesh.axes.size(); ++a) {
      if (gathered[a]) {
        est.gather_axes.push_back(m_mesh.axes[a].name);
      }
    }
  }

  // The lists of the tensors the group holds (without placement, counted
  // already).
  void list_tensors(MemoryEstimate& est, const GroupMemory& group) const {
    std::vector<TensorMemory> heap = m_largest;
    if (m_out.placement.placed()) {
      for (size_t t = 0; t < m_tensors.size(); ++t) {
        if (in_group(t, group)) {
          account(est, heap, t, m_records[t]);
        }
      }
    }
    std::sort_heap(heap.begin(), heap.end(), larger);
    est.largest = std::move(heap);
  }

  // Where the estimate is, for the messages: " of stage 1, expert rank 2",
  // " of stage 1", " of expert rank 2", or nothing without placement.
  std::string where_text(const MemoryEstimate& est) const {
    if (!m_out.placement.placed()) {
      return std::string();
    }
    if (m_stages > 1 && m_ranks > 1) {
      return fmt::format(
          " of stage {}, expert rank {}", est.stage, est.expert_rank);
    }
    return m_stages > 1 ? fmt::format(" of stage {}", est.stage)
                        : fmt::format(" of expert rank {}", est.expert_rank);
  }

  void warn_uneven(const MemoryEstimate& est,
                   const std::string& where,
                   Diagnostics& found) const {
    if (est.min_device_total == est.max_device_total) {
      return;
    }
    Diagnostic& d = found.warning(
        "memory.uneven",
        m_out.placement.placed()
            ? fmt::format("devices{} hold different amounts: the most loaded "
                          "{} bytes, the least {} bytes ({} tensor{} with "
                          "uneven shards)",
                          where,
                          est.max_device_total,
                          est.min_device_total,
                          est.uneven_tensors,
                          est.uneven_tensors == 1 ? "" : "s")
            : fmt::format("devices hold different amounts: device 0 {} bytes, "
                          "the last device {} bytes ({} tensor{} with uneven "
                          "shards)",
                          est.max_device_total,
                          est.min_device_total,
                          est.uneven_tensors,
                          est.uneven_tensors == 1 ? "" : "s"));
    d.hint = "the estimate is for the most loaded device";
  }

  // The capacity, utilization and fit when the HBM is known; a total over
  // capacity is an error at where the HBM came from.
  // The largest of the parts the most loaded device holds at its peak.
  static std::pair<std::string_view, int64_t> largest_part(
      const MemoryEstimate& est) {
    const StateBytes& p = est.per_device;
    const std::pair<std::string_view, int64_t> parts[] = {
        {"params", p.params},
        {"grads", p.grads},
        {"optimizer", p.optimizer},
        {"gather buffer", est.gather_buffer},
        {"activations", est.activations},
    };
    return *std::max_element(
        std::begin(parts), std::end(parts), [](const auto& a, const auto& b) {
          return a.second < b.second;
        });
  }

  // Whether `total` allocated, with the runtime's reserve, fits the usable
  // HBM; true when the HBM is unknown.
  static bool within_capacity(const MemoryEstimate& est, int64_t total) {
    if (!est.hbm_bytes) {
      return true;
    }
    const double reserved =
        std::ceil(static_cast<double>(total) * (1.0 + est.reserve));
    return reserved <= std::floor(static_cast<double>(*est.hbm_bytes)
                                  * (1.0 - est.headroom));
  }

  // A host's share of what its devices keep in host memory, against its
  // RAM: a warning when over (the figure is a machine type's; a topology
  // file gives another machine's).
  void check_host(MemoryEstimate& est, Diagnostics& found) const {
    std::optional<int64_t> per_device =
        checked_add(est.host_offload, est.hosted_params);
    if (per_device) {
      per_device = checked_add(*per_device, est.hosted_optimizer);
    }
    const std::optional<int64_t> per_host =
        per_device ? checked_mul(*per_device, est.devices_per_host)
                   : std::nullopt;
    est.host_bytes_per_host = per_host.value_or(INT64_MAX);
    if (!est.host_memory_bytes || est.host_bytes_per_host == 0) {
      return;
    }
    est.host_fits = est.host_bytes_per_host <= *est.host_memory_bytes;
    if (*est.host_fits) {
      return;
    }
    Diagnostic& d = found.warning(
        "memory.host-over-capacity",
        fmt::format("a host keeps {} bytes in host memory ({} devices x {} "
                    "offloaded or hosted), over its {} bytes of RAM",
                    est.host_bytes_per_host,
                    est.devices_per_host,
                    *per_device,
                    *est.host_memory_bytes),
        m_options.host_memory_bytes.at);
    d.hint =
        "offload fewer tensors (a remat policy that keeps or recomputes "
        "more), or give the machine's RAM in a topology file "
        "(host_memory_bytes_per_chip)";
  }

  void check_capacity(MemoryEstimate& est,
                      const std::string& where,
                      Diagnostics& found) const {
    // Below 2^53 the product is exact enough; the cap keeps it in range.
    const double reserved = std::ceil(static_cast<double>(est.max_device_total)
                                      * (1.0 + est.reserve));
    est.reserved_total =
        reserved >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(reserved);
    if (!est.hbm_bytes) {
      return;
    }
    const double hbm = static_cast<double>(*est.hbm_bytes);
    est.capacity_bytes =
        static_cast<int64_t>(std::floor(hbm * (1.0 - est.headroom)));
    est.utilization = static_cast<double>(est.reserved_total) / hbm;
    est.fits = est.reserved_total <= *est.capacity_bytes;
    est.headroom_left = *est.capacity_bytes - est.reserved_total;
    if (*est.fits) {
      return;
    }
    const auto [largest, largest_bytes] = largest_part(est);
    const std::string reserve =
        est.reserve > 0
            ? fmt::format(" ({} allocated, {} reserved by {}'s allocator)",
                          est.max_device_total,
                          est.reserved_total,
                          to_string(est.runtime))
            : std::string();
    Diagnostic& d = found.error(
        "memory.over-capacity",
        fmt::format("the most loaded device{} needs {} bytes{}, over the {} "
                    "bytes usable ({} bytes of HBM with {:g}% kept free) by "
                    "{} byte{}; its largest part is {}, {} bytes",
                    where,
                    est.reserved_total,
                    reserve,
                    *est.capacity_bytes,
                    *est.hbm_bytes,
                    est.headroom * 100,
                    est.reserved_total - *est.capacity_bytes,
                    est.reserved_total - *est.capacity_bytes == 1 ? "" : "s",
                    largest,
                    largest_bytes),
        m_options.hbm_bytes.at);
    d.hint = est.activations > est.per_device.model_states() ? fmt::format(
                 "activations are {} bytes of it: keep less per layer (a "
                 "remat policy that saves less), run fewer sequences at a "
                 "time (more microbatches), or split the tokens further "
                 "(sequence parallelism, a sequence axis)",
                 est.activations)
             : est.zero < 3 && has_grads(est.recipe)
                 ? fmt::format(
                     "shard further: more fsdp, {} 3, or a larger "
                     "slice",
                     to_string(m_options.zero.at))
                 : std::string(
                     "shard further (more fsdp or tp) or use a larger slice");
  }

  const Manifest& m_manifest;
  const std::vector<Tensor>& m_tensors;
  const Mesh& m_mesh;
  const std::vector<TensorSharding>& m_shardings;
  const MemoryOptions& m_options;
  Diagnostics& m_diags;
  // The part of every estimate the model state decides.
  MemoryEstimate m_out;
  OptimizerState m_state;  // resolve_optimizer
  std::optional<AxisRoles> m_roles;
  std::optional<AxisUse> m_use;  // once the roles are known
  std::optional<MemoryFacts> m_own_facts;
  const MemoryFacts* m_facts = nullptr;  // the caller's, or m_own_facts
  int64_t m_stages = 1;                  // S
  int64_t m_ranks = 1;                   // R
  std::unordered_map<const ShardLayout*,
                     std::array<std::optional<Cost>, k_roles>>
      m_costs;
  std::optional<Cost> m_computed;  // the last cost of an unshared layout
  // Per mesh axis: the spec of some tensor held splits it over the axis.
  std::vector<bool> m_split;
  std::optional<GatherUnits> m_units;  // once placed
  std::vector<Totals> m_buckets;       // bucket_of
  // Per tensor with placement (accounted once the group is known).
  std::vector<Record> m_records;
  // Without placement, the `largest` heap of every tensor (account).
  std::vector<TensorMemory> m_largest;
};

}  // namespace

namespace {

constexpr std::array<Named<Runtime>, 2> k_runtimes{{
    {Runtime::xla, "xla"},
    {Runtime::pytorch, "pytorch"},
}};

constexpr std::array<Named<MemoryPhase>, 3> k_phases{{
    {MemoryPhase::layer_backward, "layer_backward"},
    {MemoryPhase::loss, "loss"},
    {MemoryPhase::optimizer_step, "optimizer_step"},
}};

}  // namespace

std::string_view to_string(Runtime runtime) {
  return name_in(k_runtimes, runtime);
}

std::optional<Runtime> parse_runtime(std::string_view text) {
  return value_in(k_runtimes, text);
}

std::vector<std::string> runtime_names() {
  return names_in(k_runtimes);
}

std::string_view to_string(MemoryPhase phase) {
  return name_in(k_phases, phase);
}

std::optional<MemoryEstimate> estimate_memory(
    const Manifest& manifest,
    const Mesh& mesh,
    const std::vector<TensorSharding>& shardings,
    const MemoryOptions& options,
    Diagnostics& diags) {
  Diagnostics own[1];
  std::vector<std::optional<MemoryEstimate>> out =
      estimate_memory(manifest,
                      mesh,
                      shardings,
                      options,
                      {&options.activations, 1},
                      diags,
                      own);
  for (const Diagnostic& d : own[0].items()) {
    diags.add(d);
  }
  if (out.empty()) {
    return std::nullopt;
  }
  return std::move(out[0]);
}

std::vector<std::optional<MemoryEstimate>> estimate_memory(
    const Manifest& manifest,
    const Mesh& mesh,
    const std::vector<TensorSharding>& shardings,
    const MemoryOptions& options,
    std::span<const std::vector<ActivationLoad>> activations,
    Diagnostics& diags,
    std::span<Diagnostics> activation_diags) {
  assert(activation_diags.size() == activations.size());
  assert(shardings.size() == manifest.size());
  assert(options.zero.value >= 0 && options.zero.value <= 3);
  assert(options.headroom >= 0 && options.headroom < 1);
  assert(options.reserve >= 0);
  assert(!activations.empty());
  MemoryEstimator estimator(manifest, mesh, shardings, options, diags);
  return estimator.run(activations, activation_diags);
}

}  // namespace shardplan
