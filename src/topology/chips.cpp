// The TPU chip table: one row per generation, what the device grid and the
// catalogue branch on (include/shardplan/topology.hpp, TpuChipInfo).

#include <shardplan/topology.hpp>

#include <array>
#include <cassert>

namespace shardplan {

namespace {

using C = TpuChip;
using P = TpuPhysicalMesh;
using R = TpuRing;

// Row k is TpuChip k (checked below), oldest generation first. device_kind
// as jax.devices()[0].device_kind spells it (jax/_src/mesh_utils.py's
// _TPU_V2 ... _TPU_7X); the physical mesh and the ring as
// _get_physical_tpu_mesh and create_device_mesh's device-kind handlers
// treat the generation (shared/reference/sharding-anchors.md b2-b6).
// chip, name, device_kind, torus dims, physical mesh, ring, core axis first
constexpr std::array<TpuChipInfo, 7> k_tpu_chips{{
    {C::v2, "v2", "TPU v2", 2, P::xy_core, R::v2_v3, false},
    {C::v3, "v3", "TPU v3", 2, P::xy_core, R::v2_v3, false},
    {C::v4, "v4", "TPU v4", 3, P::xyz, R::none, false},
    {C::v5e, "v5e", "TPU v5 lite", 2, P::xyz, R::v5e, false},
    {C::v5p, "v5p", "TPU v5p", 3, P::xyz_core_if_two, R::v5p, false},
    {C::v6e, "v6e", "TPU v6 lite", 2, P::xyz, R::v5e, false},
    {C::tpu7x, "tpu7x", "TPU7x", 3, P::xyz_core, R::tpu7x, true},
}};

constexpr bool rows_in_enum_order() {
  for (size_t k = 0; k < k_tpu_chips.size(); ++k) {
    if (static_cast<size_t>(k_tpu_chips[k].chip) != k) {
      return false;
    }
  }
  return true;
}
static_assert(rows_in_enum_order(), "row k of k_tpu_chips is TpuChip k");

// Whether `chip` is a TpuChip value. A new value fails to compile here
// (-Wswitch) until it has its case, and then the static_assert below until
// it has its row.
constexpr bool is_value(TpuChip chip) {
  switch (chip) {
    case C::v2:
    case C::v3:
    case C::v4:
    case C::v5e:
    case C::v5p:
    case C::v6e:
    case C::tpu7x:
      return true;
  }
  return false;
}
static_assert(!is_value(static_cast<TpuChip>(k_tpu_chips.size())),
              "a TpuChip value without its row in k_tpu_chips");

}  // namespace

std::span<const TpuChipInfo> tpu_chips() {
  return k_tpu_chips;
}

const TpuChipInfo& chip_info(TpuChip chip) {
  const auto k = static_cast<size_t>(chip);
  assert(k < k_tpu_chips.size());
  return k_tpu_chips[k];
}

std::optional<TpuChip> find_tpu_chip(std::string_view name) {
  for (const TpuChipInfo& row : k_tpu_chips) {
    if (row.name == name) {
      return row.chip;
    }
  }
  return std::nullopt;
}

std::string_view to_string(TpuChip chip) {
  return chip_info(chip).name;
}

std::string_view device_kind(TpuChip chip) {
  return chip_info(chip).device_kind;
}

bool is_2d(TpuChip chip) {
  return chip_info(chip).torus_dims == 2;
}

}  // namespace shardplan
