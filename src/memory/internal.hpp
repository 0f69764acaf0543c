#pragma once

// Layer 4, internal: what the files of the memory estimator share
// (include/shardplan/memory.hpp, docs/memory.md).
//
// Shared by all its files: Sum (int64 sums that remember an overflow) and
// Role (how a tensor takes part in training).
//
//   memory/state.cpp      recipes, the training state a tensor's elements
//                         hold per recipe and dtype (state_of, has_grads),
//                         quantization scales, expert weights, memory_facts
//   memory/gather.cpp     what FSDP gathers when: the axes a tensor is
//                         gathered over at use (AxisUse), the units in
//                         execution order and the consecutive units a
//                         group's gather buffer holds (GatherUnits, Gather)
//   memory/placement.cpp  name_facts, the pipeline stage and expert rank of
//                         each tensor (place_tensors)
//   memory/estimate.cpp   estimate_memory: MemoryEstimator's phases, from
//                         the dtypes and the axes' roles to each placement
//                         group's total

#include <shardplan/diag.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/sharding.hpp>
#include <shardplan/spec.hpp>
#include <shardplan/tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace shardplan::memory_detail {

// Accumulates int64 sums; remembers an overflow instead of wrapping.
class Sum {
 public:
  void add(int64_t value) {
    std::optional<int64_t> r = checked_add(m_value, value);
    if (r) {
      m_value = *r;
    } else {
      m_overflow = true;
    }
  }
  // Adds value x times.
  void add(int64_t value, int64_t times) {
    std::optional<int64_t> product = checked_mul(value, times);
    if (product) {
      add(*product);
    } else {
      m_overflow = true;
    }
  }
  int64_t value() const { return m_value; }
  bool overflow() const { return m_overflow; }

 private:
  int64_t m_value = 0;
  bool m_overflow = false;
};

// How a tensor takes part in training: it decides the tensor's cost
// together with its layout (shape, dtype, spec).
enum class Role : uint8_t {
  weight,         // trained (when the recipe trains)
  expert_weight,  // trained; expert axes are expert parallelism
  frozen,         // integer, bool: weights only
  scale,          // quantization scale kept: weights only, as stored
  dropped_scale,  // quantization scale folded into its dequantized weight
};
inline constexpr size_t k_roles = 5;

// state.cpp

// The training state of `elements` elements of one tensor held in `held`
// (its param dtype), with ZeRO sharding the state over `zero_shards` more
// devices. `grad` is the gradients' dtype (nullopt: `held`). nullopt when a
// byte count overflows.
// How the optimizer keeps its state, as MemoryEstimate resolves it.
struct OptimizerState {
  Optimizer optimizer = Optimizer::adamw;
  std::optional<DType> mu = DType::f32;  // nullopt: the param dtype
  std::optional<DType> nu = DType::f32;
  bool master = true;  // an f32 copy of weights held narrower
};

// `matrix`: the tensor has two dims or more (muon and adafactor treat
// matrices apart).
std::optional<StateBytes> state_of(int64_t elements,
                                   DType held,
                                   bool trained,
                                   Recipe recipe,
                                   const OptimizerState& state,
                                   bool matrix,
                                   std::optional<DType> grad,
                                   int zero,
                                   int64_t zero_shards);

// The optimizer state bytes of one element held in `held`.
int64_t optimizer_bytes(const OptimizerState& state, DType held, bool matrix);

// The recipe counts gradients (not params-only, not scaling-book).
bool has_grads(Recipe recipe);

// gather.cpp

// What a weight's use does with the mesh axes (docs/memory.md, "Gather
// buffer"): a matmul keeps it split over the tensor and stage axes (and the
// expert axes for an expert weight) and gathers it over every other axis
// its spec splits it over, and, under ZeRO-3, over the data axes its spec
// leaves free.
// REQUIRES: the axes named are the mesh's; the referenced values outlive
// this.
class AxisUse {
 public:
  AxisUse(const Mesh& mesh,
          const AxisRoles& roles,
          const std::vector<std::string>& data_axes,
          int64_t zero_shards,
          int zero)
      : m_mesh(mesh),
        m_roles(roles),
        m_data_axes(data_axes),
        m_zero_shards(zero_shards),
        m_zero(zero) {}

  // The axis is kept split at use (tensor, stage; expert for an expert
  // weight).
  bool kept(const std::string& axis, Role role) const;
  // The product of the data axes `spec` leaves free: what ZeRO shards a
  // tensor's state over (nullptr: all of them).
  int64_t free_data(const PartitionSpec* spec) const;
  // The axes a tensor is gathered over at use, in spec order, then the
  // ZeRO-3 data axes.
  std::vector<std::string> gathered(const TensorSharding& s, Role role) const;

 private:
  bool is_data(const std::string& axis) const;

  const Mesh& m_mesh;
  const AxisRoles& m_roles;
  const std::vector<std::string>& m_data_axes;
  int64_t m_zero_shards;
  int m_zero;
};

// What one placement group holds gathered at once, and those units (indices
// into GatherUnits' list, in order).
struct Gather {
  int64_t bytes = 0;
  std::vector<size_t> units;
  // Of `bytes`, the weights of the unit prefetched for the backward that
  // comes next, and that unit; nullopt when none is.
  int64_t prefetched = 0;
  std::optional<size_t> prefetched_unit;

  // Without the prefetch: the unit's own buffer alone.
  Gather without_prefetch() const;
};

// A group's two gather buffers (docs/memory.md, "The peak"), one per phase
// of the backward:
//   layers  a unit's backward: the largest sum over consecutive units (a,
//           b) in execution order of b's gathered weights and gradients
//           and a's weights, prefetched for the backward that comes next
//           (one unit when the group holds one)
//   loss    the loss: the units after the layers (the final norm, the
//           head), with the input embeddings when no unit after the layers
//           is as large as they are (a tied head), and the last layer's
//           weights, prefetched (not yet its gradients); nothing when the
//           group holds no layer or no unit after the layers
struct Gathers {
  Gather layers;
  Gather loss;
};

// The units FSDP gathers one at a time, in execution order: each input
// embedding of no layer, each layer by index, each other tensor of no layer
// in manifest order (docs/memory.md, "Gather buffer"); the bytes each holds
// gathered on each expert rank, and the gather buffer of each group.
class GatherUnits {
 public:
  // The units of the tensors `names` describe (one per manifest tensor),
  // with the stage of each as `placement` places it; `grads`: the bytes
  // added hold the gradients too, half of a trained unit's.
  GatherUnits(std::span<const NameFacts> names,
              const Placement& placement,
              bool grads);

  // The unit tensor t belongs to.
  size_t unit_of(size_t tensor) const { return m_unit_of[tensor]; }

  // Adds `bytes` x `count` of tensor t, gathered at use on the devices of
  // `expert_rank` (k_every: of every rank).
  void add(size_t tensor, int64_t expert_rank, int64_t bytes, int64_t count);

  // Some unit's sum overflowed int64.
  bool overflow() const;

  // The gather buffers of group (stage, expert_rank); nullopt on an
  // overflow. Computed once per stage when no unit has tensors placed on
  // one rank.
  std::optional<Gathers> gather(int64_t stage, int64_t expert_rank);

  // Unit u as the estimate lists it, with its bytes on `expert_rank`.
  // REQUIRES: its sums have not overflowed (gather(...) succeeded).
  GatherUnit describe(size_t unit,
                      int64_t expert_rank,
                      const std::vector<Tensor>& tensors,
                      std::span<const NameFacts> names) const;

 private:
  struct Unit {
    size_t first_tensor = 0;
    std::optional<int64_t> layer;
    int64_t stage = k_every;
    bool started = false;
    Sum common;  // its tensors on every expert rank
    // Its tensors placed on one rank: (rank, bytes), by rank; only the
    // ranks it has tensors on (a layer's experts cover a few).
    std::vector<std::pair<int64_t, Sum>> by_rank;
  };

  void list_units(std::span<const NameFacts> names, const Placement& placement);
  void list_stage_units(int64_t stages);
  // A unit's bytes on rank r's devices.
  static std::optional<int64_t> bytes(const Unit& unit, int64_t rank);
  std::optional<Gathers> best_pair(int64_t stage, int64_t expert_rank) const;
  // A unit's weights alone, of its `bytes` (half when they hold gradients).
  int64_t weights_of(int64_t bytes) const {
    return m_grads ? bytes / 2 : bytes;
  }

  std::vector<Unit> m_units;
  std::vector<size_t> m_unit_of;  // per tensor
  // The units each stage holds, in order (every unit on stage 0 without
  // stage axes).
  std::vector<std::vector<size_t>> m_stage_units;
  // Per stage, its gather buffer when every rank gathers alike.
  std::vector<std::optional<Gathers>> m_stage_gather;
  bool m_any_by_rank = false;  // some unit has tensors placed on one rank
  bool m_grads = false;
};

}  // namespace shardplan::memory_detail
