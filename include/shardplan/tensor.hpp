#pragma once

// Layer 1: element types, tensors and manifests.
//
// What it offers (src/tensor.cpp implements all of it):
//   DType, parse_dtype, dtype_names   element types and their spellings
//   bytes_for, is_floating, is_fp8    what a dtype takes and is
//   LogicalAxes                a logical axis name per dim (MaxText/Flax)
//   ShapeView                  a tensor's dims, comparable to any range
//   Tensor                     a view of one tensor: name, dims, dtype,
//                              logical axes, where it was read (pointer())
//   TensorInput                what Manifest::add copies in
//   Manifest                   the tensors of a model, in input order, their
//                              names and dims packed in an arena; find()
//   detail::Arena, hash_bytes, StringHash   the Manifest's storage and index

#include <shardplan/diag.hpp>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// Element types. The canonical names (to_string) are the ones
// docs/manifest-format.md, "dtypes", lists; parse_dtype accepts the usual
// spellings of NumPy/JAX, PyTorch, safetensors and XLA.
enum class DType : uint8_t {
  f64,
  f32,
  f16,
  bf16,
  f8_e4m3,  // float8_e4m3fn (safetensors F8_E4M3)
  f8_e5m2,  // float8_e5m2 (safetensors F8_E5M2)
  f8_e4m3fnuz,
  f8_e5m2fnuz,
  f8_e8m0,  // float8_e8m0fnu (safetensors F8_E8M0), MX scales
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
// A floating-point dtype: f64, f32, f16, bf16 and every f8 (f8_e8m0, the
// exponent-only MX scale type, included).
bool is_floating(DType dtype);
// An 8-bit float that holds values (f8_e4m3, f8_e5m2 and their fnuz forms);
// not f8_e8m0, which holds scales only.
bool is_fp8(DType dtype);
// Every canonical name, in enum order (for messages and docs).
std::vector<std::string> dtype_names();

// Bytes of `num_elements` elements: ceil(num_elements * bits / 8).
// nullopt on overflow. REQUIRES: num_elements >= 0.
std::optional<int64_t> bytes_for(int64_t num_elements, DType dtype);

// A logical axis name per dim (MaxText/Flax): nullopt for an unnamed dim.
using LogicalAxes = std::vector<std::optional<std::string>>;

// The dims of a tensor, viewed (see Tensor): a std::span that also compares
// equal to any contiguous range of the same dims, e.g. a std::vector<int64_t>.
class ShapeView : public std::span<const int64_t> {
 public:
  using std::span<const int64_t>::span;
  ShapeView() = default;
  ShapeView(std::span<const int64_t> dims) : span(dims) {}  // NOLINT: implicit

  friend bool operator==(ShapeView a, ShapeView b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
};

// How the JSON pointer of a tensor (where it was read from, for diagnostics)
// is formed. Readers give the form; Tensor::pointer() derives the text, so no
// tensor stores one.
enum class PointerForm : uint8_t {
  none,        // no pointer: the tensor was not read from JSON
  params,      // a native manifest's entry: "/params/<params_index>"
  key,         // a safetensors header's key: "/" + json_pointer_escape(name)
  weight_map,  // a safetensors index's entry: "/weight_map/" + escaped name
};

// Read access to an optional value held elsewhere, with std::optional's
// reading interface: has_value(), `if (ref)`, `*ref`, `ref->`.
template <typename T>
class OptionalRef {
 public:
  OptionalRef() = default;
  explicit OptionalRef(const T* value) : m_value(value) {}

  bool has_value() const { return m_value != nullptr; }
  explicit operator bool() const { return m_value != nullptr; }
  // REQUIRES: has_value().
  const T& operator*() const {
    assert(m_value != nullptr);
    return *m_value;
  }
  const T* operator->() const {
    assert(m_value != nullptr);
    return m_value;
  }

 private:
  const T* m_value = nullptr;
};

// What Manifest::add takes: views of the caller's data, copied by add().
struct TensorInput {
  std::string_view name;
  std::span<const int64_t> shape;
  DType dtype = DType::f32;
  std::optional<LogicalAxes> logical_axes;  // when present, one per dim
  PointerForm pointer_form = PointerForm::none;
  uint32_t params_index = 0;  // for PointerForm::params
};

// A tensor of a Manifest.
//
// LIFETIME: a Tensor is a view. `name`, `shape` and `logical_axes` point into
// storage its Manifest owns, and stay valid, at the same addresses, while
// that Manifest lives: adding more tensors and moving the Manifest keep them
// valid; destroying it (or assigning to it) ends them. A copy of a Manifest
// has its own storage and its own Tensors. Copy a name into a std::string to
// keep it longer.
struct Tensor {
  std::string_view name;
  ShapeView shape;                        // every dim >= 0
  OptionalRef<LogicalAxes> logical_axes;  // when present, one per dim
  // Filled by Manifest::add, checked against overflow there.
  int64_t num_elements = 0;
  int64_t num_bytes = 0;
  DType dtype = DType::f32;
  // Where the tensor was read from: see pointer().
  PointerForm pointer_form = PointerForm::none;
  uint32_t params_index = 0;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  // The JSON pointer the tensor was read from ("/params/3", "/a~1b"), or ""
  // for PointerForm::none.
  std::string pointer() const;
};

namespace detail {
// A fast hash of `text` (wyhash's reading and mixing: 16 bytes per
// multiply); not for anything an adversary controls the cost of.
size_t hash_bytes(std::string_view text) noexcept;

// Hash for heterogeneous lookup: find(std::string_view) without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return hash_bytes(s); }
};

// A bump allocator over chunks that never move: what it hands out stays at
// its address until the Arena is destroyed (a move hands the chunks over).
// Chunks double from 4 KiB to 1 MiB; a larger request gets a chunk of its own.
class Arena {
 public:
  Arena() = default;
  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&& other) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() = default;

  // `bytes` bytes aligned to `align`. REQUIRES: align is a power of two, at
  // most alignof(std::max_align_t).
  void* allocate(size_t bytes, size_t align) {
    // Inline: it runs once per tensor, and nearly always fits.
    assert(std::has_single_bit(align) && align <= alignof(std::max_align_t));
    const size_t pad =
        (align - reinterpret_cast<uintptr_t>(m_next) % align) % align;
    if (m_next != nullptr && pad + bytes <= m_left) {
      std::byte* out = m_next + pad;
      m_next = out + bytes;
      m_left -= pad + bytes;
      return out;
    }
    return allocate_in_new_chunk(bytes);
  }

 private:
  // Starts a chunk for `bytes` (aligned to alignof(std::max_align_t)).
  void* allocate_in_new_chunk(size_t bytes);

  std::vector<std::unique_ptr<std::byte[]>> m_chunks;
  std::byte* m_next = nullptr;  // free space of the last chunk
  size_t m_left = 0;
  size_t m_chunk_bytes = 0;  // size of the last regular chunk
};
}  // namespace detail

// An ordered list of uniquely named tensors. Order is the input's order and is
// kept in every output.
//
// The Manifest owns every tensor's name, dims and logical axes, packed in an
// arena (see Tensor for how long the views stay valid). Copying deep-copies
// them, so the copy's Tensors point into the copy.
class Manifest {
 public:
  Manifest() = default;
  Manifest(const Manifest& other);
  Manifest& operator=(const Manifest& other);
  Manifest(Manifest&& other) noexcept = default;
  Manifest& operator=(Manifest&& other) noexcept = default;
  ~Manifest() = default;

  // Appends a copy of `tensor` after checking it: name not empty and not
  // taken, dims >= 0, logical_axes (if any) of the tensor's rank, element and
  // byte counts within int64. On a problem it reports to `diags` (at `where`,
  // with the tensor's name) and returns false; the manifest is unchanged.
  // A tensor with a dim of 0 is added, with a warning at `where` plus
  // "/shape/DIM" when `where` has a pointer [manifest.empty-tensor].
  // Nothing of `tensor` is referenced after it returns.
  bool add(TensorInput tensor, Diagnostics& diags, const Location& where);

  const std::vector<Tensor>& tensors() const { return m_tensors; }
  size_t size() const { return m_tensors.size(); }
  bool empty() const { return m_tensors.empty(); }
  const Tensor* find(std::string_view name) const;
  // A hint that `name` is about to be added or found: starts loading the
  // part of the index it will probe. A reader that knows a tensor's name
  // before its other fields calls this first, so that add() does not wait
  // on memory (the index of 1M tensors is 10 MB, read at random).
  void prefetch(std::string_view name) const;
  // Room for `n` tensors in all, so that adding them moves nothing.
  void reserve(size_t n);
  // A manifest of the tensors at `indices` (positions in tensors()), in the
  // order given, with the same source: the tensors are copied as they are
  // (names, dims, logical axes, where they were read from), not checked
  // again. REQUIRES: every index < size(), none repeated.
  Manifest subset(std::span<const size_t> indices) const;

  // Sums over all tensors; each fits in int64 (checked as tensors are added).
  int64_t total_elements() const { return m_total_elements; }
  int64_t total_bytes() const { return m_total_bytes; }

  std::string source;  // the file it came from, for diagnostics

 private:
  // The index of names: open addressing with linear probing over 2^k slots,
  // at most 7/8 full. A probe reads m_tags, one byte per slot (0 when empty,
  // else 0x80 | 7 bits of the name's hash), 8 slots per load, so the long
  // runs of a full table cost little; the index of 100k tensors is 128k
  // slots. m_tags repeats its first 7 bytes at the end, so that the 8 bytes
  // from any slot can be read at once. Only on a matching tag (1 in 128 for
  // another name) does a probe read the slot's entry of m_positions, the
  // tensor's position in m_tensors, and compare names. One probe sequence
  // per add: no node, no copy of the name. An entry is read only when its
  // tag is set, so m_positions is left uninitialized. Its size counts: the
  // index is read at random, and at half full (256k slots for 100k tensors)
  // its cache misses took a tenth of reading a manifest.

  // The slot holding `name`, or the empty slot where it would go.
  // REQUIRES: the index has an empty slot.
  size_t probe(std::string_view name, uint32_t hash) const;
  // Rebuilds the index with at least `slots` slots (hashing every name).
  void grow_index(size_t slots);
  // The slots of the index: a power of 2, or 0 before the first add.
  size_t slot_count() const {
    return m_tags.empty() ? 0 : m_tags.size() - k_tag_copies;
  }
  // Sets the tag of `slot` (and its copy at the end of m_tags).
  void set_tag(size_t slot, uint8_t tag);
  // Appends `tensor` with its name and dims copied into m_arena. REQUIRES:
  // its logical_axes, if any, are owned by this manifest.
  void store(const Tensor& tensor);

  static constexpr size_t k_tag_copies = 7;  // see m_tags

  std::vector<Tensor> m_tensors;
  detail::Arena m_arena;  // names and dims of m_tensors
  std::vector<std::unique_ptr<const LogicalAxes>> m_logical_axes;
  // slot_count() + 7 bytes, or none before the first add.
  std::vector<uint8_t> m_tags;
  std::unique_ptr<uint32_t[]> m_positions;  // slot_count() entries
  int64_t m_total_elements = 0;
  int64_t m_total_bytes = 0;
};

}  // namespace shardplan
