#pragma once

// Layer 1: element types, tensors and manifests.

#include <shardplan/diag.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace shardplan {

// Element types. The canonical names (to_string) are the ones DESIGN.md 2.3
// lists; parse_dtype accepts the usual spellings of NumPy/JAX, PyTorch,
// safetensors and XLA.
enum class DType {
  f64,
  f32,
  f16,
  bf16,
  f8_e4m3,      // float8_e4m3fn (safetensors F8_E4M3)
  f8_e5m2,      // float8_e5m2 (safetensors F8_E5M2)
  f8_e4m3fnuz,
  f8_e5m2fnuz,
  f8_e8m0,      // float8_e8m0fnu (safetensors F8_E8M0), MX scales
  i64,
  i32,
  i16,
  i8,
  i4,
  u64,
  u32,
  u16,
  u8,
  u4,
  boolean,
  c64,
  c128,
};

// Canonical short name: "bf16", "f8_e4m3", "bool", ...
std::string_view to_string(DType dtype);
// Storage size in bits (bool is 8, as in NumPy and safetensors; i4/u4 are 4).
int64_t dtype_bits(DType dtype);
// Case-insensitive; accepts "bfloat16", "BF16", "bf16", "torch.bfloat16",
// "jnp.bfloat16", "float8_e4m3fn", "F8_E4M3", "fp32", "S32", "PRED", ...
std::optional<DType> parse_dtype(std::string_view text);
// Every canonical name, in enum order (for messages and docs).
std::vector<std::string> dtype_names();

// Bytes of `num_elements` elements: ceil(num_elements * bits / 8).
// nullopt on overflow. REQUIRES: num_elements >= 0.
std::optional<int64_t> bytes_for(int64_t num_elements, DType dtype);

// A logical axis name per dim (MaxText/Flax): nullopt for an unnamed dim.
using LogicalAxes = std::vector<std::optional<std::string>>;

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;  // every dim >= 0
  DType dtype = DType::f32;
  std::optional<LogicalAxes> logical_axes;  // when present, one per dim
  // Filled by Manifest::add, checked against overflow there.
  int64_t num_elements = 0;
  int64_t num_bytes = 0;
  // Where the tensor was read from (a JSON pointer), for diagnostics.
  std::string pointer;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
};

namespace detail {
// Hash for heterogeneous lookup: find(std::string_view) without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
}  // namespace detail

// An ordered list of uniquely named tensors. Order is the input's order and is
// kept in every output.
class Manifest {
 public:
  // Appends `tensor` after checking it: name not empty and not taken, dims
  // >= 0, logical_axes (if any) of the tensor's rank, element and byte counts
  // within int64. On a problem it reports to `diags` (at `where`, with the
  // tensor's name) and returns false; the manifest is unchanged.
  bool add(Tensor tensor, Diagnostics& diags, const Location& where);

  const std::vector<Tensor>& tensors() const { return m_tensors; }
  size_t size() const { return m_tensors.size(); }
  bool empty() const { return m_tensors.empty(); }
  const Tensor* find(std::string_view name) const;
  void reserve(size_t n);

  // Sums over all tensors; each fits in int64 (checked as tensors are added).
  int64_t total_elements() const { return m_total_elements; }
  int64_t total_bytes() const { return m_total_bytes; }

  std::string source;  // the file it came from, for diagnostics

 private:
  // The index of names: open addressing with linear probing over 2^k slots,
  // at most half full. A probe reads m_tags, one byte per slot (0 when empty,
  // else 0x80 | 7 bits of the name's hash): small enough to stay in cache.
  // Only on a matching tag does it read the slot, which holds 32 bits of the
  // hash (their low bits pick the first slot, so growing rehashes no name)
  // and the tensor's position in m_tensors. One probe sequence per add: no
  // node, no copy of the name.
  struct Slot {
    uint32_t hash = 0;
    uint32_t position = 0;
  };

  // The slot holding `name`, or the empty slot where it would go.
  // REQUIRES: the index has an empty slot.
  size_t probe(std::string_view name, uint32_t hash) const;
  // Rebuilds the index with at least `slots` slots.
  void grow_index(size_t slots);

  std::vector<Tensor> m_tensors;
  std::vector<uint8_t> m_tags;
  std::vector<Slot> m_slots;
  int64_t m_total_elements = 0;
  int64_t m_total_bytes = 0;
};

}  // namespace shardplan
