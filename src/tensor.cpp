#include <shardplan/tensor.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cstring>
#include <memory>
#include <utility>

namespace shardplan {

namespace {

constexpr std::array k_all_dtypes = {
    DType::f64,     DType::f32,     DType::f16,         DType::bf16,
    DType::f8_e4m3, DType::f8_e5m2, DType::f8_e4m3fnuz, DType::f8_e5m2fnuz,
    DType::f8_e8m0, DType::i64,     DType::i32,         DType::i16,
    DType::i8,      DType::i4,      DType::u64,         DType::u32,
    DType::u16,     DType::u8,      DType::u4,          DType::boolean,
    DType::c64,     DType::c128,
};

struct Spelling {
  std::string_view name;  // lowercase
  DType dtype;
};

// Every accepted spelling, lowercase, after a module prefix ("torch.", ...)
// is stripped, grouped by dtype. "float" is f32 and "int" is i32, as
// torch.float / torch.int and JAX without x64 read them; NumPy's
// np.dtype("float") is float64 and np.dtype("int") is int64.
constexpr std::array k_spellings = {
    // f64: NumPy/JAX, short, PyTorch, safetensors/XLA (F64/f64).
    Spelling{"float64", DType::f64},
    Spelling{"f64", DType::f64},
    Spelling{"fp64", DType::f64},
    Spelling{"double", DType::f64},
    // f32: "float" is f32, as torch.float is.
    Spelling{"float32", DType::f32},
    Spelling{"f32", DType::f32},
    Spelling{"fp32", DType::f32},
    Spelling{"float", DType::f32},
    // f16
    Spelling{"float16", DType::f16},
    Spelling{"f16", DType::f16},
    Spelling{"fp16", DType::f16},
    Spelling{"half", DType::f16},
    // bf16
    Spelling{"bfloat16", DType::bf16},
    Spelling{"bf16", DType::bf16},
    // f8_e4m3 (the "fn" variant: finite, NaN only; safetensors F8_E4M3)
    Spelling{"float8_e4m3fn", DType::f8_e4m3},
    Spelling{"f8_e4m3", DType::f8_e4m3},
    Spelling{"f8_e4m3fn", DType::f8_e4m3},
    Spelling{"f8e4m3fn", DType::f8_e4m3},
    Spelling{"fp8_e4m3", DType::f8_e4m3},
    Spelling{"fp8_e4m3fn", DType::f8_e4m3},
    Spelling{"e4m3", DType::f8_e4m3},
    Spelling{"e4m3fn", DType::f8_e4m3},
    // f8_e5m2
    Spelling{"float8_e5m2", DType::f8_e5m2},
    Spelling{"f8_e5m2", DType::f8_e5m2},
    Spelling{"f8e5m2", DType::f8_e5m2},
    Spelling{"fp8_e5m2", DType::f8_e5m2},
    Spelling{"e5m2", DType::f8_e5m2},
    // f8_e4m3fnuz, f8_e5m2fnuz
    Spelling{"float8_e4m3fnuz", DType::f8_e4m3fnuz},
    Spelling{"f8_e4m3fnuz", DType::f8_e4m3fnuz},
    Spelling{"f8e4m3fnuz", DType::f8_e4m3fnuz},
    Spelling{"float8_e5m2fnuz", DType::f8_e5m2fnuz},
    Spelling{"f8_e5m2fnuz", DType::f8_e5m2fnuz},
    Spelling{"f8e5m2fnuz", DType::f8_e5m2fnuz},
    // f8_e8m0
    Spelling{"float8_e8m0fnu", DType::f8_e8m0},
    Spelling{"f8_e8m0", DType::f8_e8m0},
    Spelling{"f8_e8m0fnu", DType::f8_e8m0},
    Spelling{"f8e8m0fnu", DType::f8_e8m0},
    Spelling{"e8m0", DType::f8_e8m0},
    // signed integers: NumPy, short, XLA (s64 ...), PyTorch (long int short).
    // "int" is i32 as in PyTorch (torch.int).
    Spelling{"int64", DType::i64},
    Spelling{"i64", DType::i64},
    Spelling{"s64", DType::i64},
    Spelling{"long", DType::i64},
    Spelling{"int32", DType::i32},
    Spelling{"i32", DType::i32},
    Spelling{"s32", DType::i32},
    Spelling{"int", DType::i32},
    Spelling{"int16", DType::i16},
    Spelling{"i16", DType::i16},
    Spelling{"s16", DType::i16},
    Spelling{"short", DType::i16},
    Spelling{"int8", DType::i8},
    Spelling{"i8", DType::i8},
    Spelling{"s8", DType::i8},
    Spelling{"int4", DType::i4},
    Spelling{"i4", DType::i4},
    Spelling{"s4", DType::i4},
    // unsigned integers
    Spelling{"uint64", DType::u64},
    Spelling{"u64", DType::u64},
    Spelling{"uint32", DType::u32},
    Spelling{"u32", DType::u32},
    Spelling{"uint16", DType::u16},
    Spelling{"u16", DType::u16},
    Spelling{"uint8", DType::u8},
    Spelling{"u8", DType::u8},
    Spelling{"uint4", DType::u4},
    Spelling{"u4", DType::u4},
    // bool: NumPy bool_, XLA pred.
    Spelling{"bool", DType::boolean},
    Spelling{"bool_", DType::boolean},
    Spelling{"pred", DType::boolean},
    // complex
    Spelling{"complex64", DType::c64},
    Spelling{"c64", DType::c64},
    Spelling{"cfloat", DType::c64},
    Spelling{"complex128", DType::c128},
    Spelling{"c128", DType::c128},
    Spelling{"cdouble", DType::c128},
};

// Module prefixes stripped before lookup (lowercase), longest first where
// one could be read as another.
constexpr std::array<std::string_view, 7> k_prefixes = {
    "jax.numpy.",
    "ml_dtypes.",
    "numpy.",
    "torch.",
    "jnp.",
    "np.",
    "tf.",
};

constexpr size_t k_max_spelling = 32;

// What C's isspace accepts: JSON's whitespace plus form feed and vertical tab.
bool is_c_space(char c) {
  return is_space(c) || c == '\f' || c == '\v';
}

// "bytes" for whole-byte dtypes, "bits" for i4/u4, in messages.
std::string element_size_text(DType dtype) {
  int64_t bits = dtype_bits(dtype);
  if (bits % 8 == 0) {
    return fmt::format("{} bytes", bits / 8);
  }
  return fmt::format("{} bits", bits);
}

// The index of a Manifest holds positions in 32 bits, so 2^31 tensors is its
// limit (far beyond any model).
constexpr size_t k_max_tensors = size_t{1} << 31U;
constexpr size_t k_min_slots = 16;
// A probe reads the tags of this many slots at once.
constexpr size_t k_group = 8;

// Slots for `n` tensors at most 7/8 full (a power of 2 is taken later).
size_t slots_for(size_t n) {
  return n + n / 7 + 1;
}

// The tags of slots i to i + 7 (read from m_tags.data() + i), slot i + k in
// bits 8k to 8k + 7.
uint64_t load_group(const uint8_t* tags) {
  uint64_t group = 0;
  std::memcpy(&group, tags, k_group);
  if constexpr (std::endian::native == std::endian::big) {
    group = __builtin_bswap64(group);
  }
  return group;
}

// The slots of `group` whose tag is `byte`, as the high bit of their byte.
// Exact up to the first such slot; a slot after it may be flagged too
// (a borrow), which a probe tolerates.
uint64_t bytes_equal(uint64_t group, uint8_t byte) {
  constexpr uint64_t k_ones = 0x0101010101010101U;
  constexpr uint64_t k_highs = 0x8080808080808080U;
  const uint64_t x = group ^ (k_ones * byte);
  return (x - k_ones) & ~x & k_highs;
}

// The first flagged slot of a group (0 to 7). REQUIRES: flags != 0.
size_t first_flagged(uint64_t flags) {
  return static_cast<size_t>(std::countr_zero(flags)) / 8;
}

// The byte of m_tags for a name's hash: never 0, which marks an empty slot.
uint8_t tag_of(uint32_t hash) {
  return static_cast<uint8_t>(0x80U | (hash >> 25U));
}

__extension__ using Uint128 = unsigned __int128;

// A 64 x 64 -> 128-bit product folded to 64 bits: wyhash's mixing step.
uint64_t mix(uint64_t a, uint64_t b) {
  const Uint128 product = static_cast<Uint128>(a) * b;
  return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64U);
}

uint64_t load64(const char* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, 8);
  return v;
}

uint64_t load32(const char* p) {
  uint32_t v = 0;
  std::memcpy(&v, p, 4);
  return v;
}

// A 64-bit hash of a tensor name, the way wyhash (final version 4) reads
// it: 16 bytes per multiply, the last 16 (or the 1 to 16 bytes of a short
// name) in overlapping loads, no loop over single bytes. Names are long and
// share prefixes ("model.layers.17.mlp.up_proj.weight"), so this runs on
// ~45 bytes 100k times; it was a tenth of reading a manifest with a
// multiply per 8 bytes in one chain.
uint64_t hash_of(std::string_view name) {
  constexpr uint64_t k_s0 = 0xA0761D6478BD642FU;
  constexpr uint64_t k_s1 = 0xE7037ED1A0B428DBU;
  constexpr uint64_t k_s2 = 0x8EBC6AF09C88C6E3U;
  const char* p = name.data();
  const size_t n = name.size();
  uint64_t seed = k_s0;
  uint64_t a = 0;
  uint64_t b = 0;
  if (n <= 16) {
    if (n >= 4) {
      const size_t step = (n >> 3U) << 2U;  // 0 or 4
      a = (load32(p) << 32U) | load32(p + step);
      b = (load32(p + n - 4) << 32U) | load32(p + n - 4 - step);
    } else if (n > 0) {
      a = (uint64_t{static_cast<unsigned char>(p[0])} << 16U)
          | (uint64_t{static_cast<unsigned char>(p[n >> 1U])} << 8U)
          | uint64_t{static_cast<unsigned char>(p[n - 1])};
    }
  } else {
    size_t left = n;
    while (left > 16) {
      seed = mix(load64(p) ^ k_s1, load64(p + 8) ^ seed);
      p += 16;
      left -= 16;
    }
    a = load64(p + left - 16);
    b = load64(p + left - 8);
  }
  return mix(k_s1 ^ n, mix(a ^ k_s1, b ^ seed ^ k_s2));
}

// 32 bits of hash_of(name), for the index's tags and slots.
uint32_t hash_name(std::string_view name) {
  const uint64_t h = hash_of(name);
  return static_cast<uint32_t>(h ^ (h >> 32U));
}

}  // namespace

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return "f64";
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::f8_e4m3:
      return "f8_e4m3";
    case DType::f8_e5m2:
      return "f8_e5m2";
    case DType::f8_e4m3fnuz:
      return "f8_e4m3fnuz";
    case DType::f8_e5m2fnuz:
      return "f8_e5m2fnuz";
    case DType::f8_e8m0:
      return "f8_e8m0";
    case DType::i64:
      return "i64";
    case DType::i32:
      return "i32";
    case DType::i16:
      return "i16";
    case DType::i8:
      return "i8";
    case DType::i4:
      return "i4";
    case DType::u64:
      return "u64";
    case DType::u32:
      return "u32";
    case DType::u16:
      return "u16";
    case DType::u8:
      return "u8";
    case DType::u4:
      return "u4";
    case DType::boolean:
      return "bool";
    case DType::c64:
      return "c64";
    case DType::c128:
      return "c128";
  }
  return "f32";
}

int64_t dtype_bits(DType dtype) {
  switch (dtype) {
    case DType::c128:
      return 128;
    case DType::f64:
    case DType::i64:
    case DType::u64:
    case DType::c64:
      return 64;
    case DType::f32:
    case DType::i32:
    case DType::u32:
      return 32;
    case DType::f16:
    case DType::bf16:
    case DType::i16:
    case DType::u16:
      return 16;
    case DType::f8_e4m3:
    case DType::f8_e5m2:
    case DType::f8_e4m3fnuz:
    case DType::f8_e5m2fnuz:
    case DType::f8_e8m0:
    case DType::i8:
    case DType::u8:
    case DType::boolean:
      return 8;
    case DType::i4:
    case DType::u4:
      return 4;
  }
  return 32;
}

std::optional<DType> parse_dtype(std::string_view text) {
  while (!text.empty() && is_c_space(text.front())) {
    text.remove_prefix(1);
  }
  while (!text.empty() && is_c_space(text.back())) {
    text.remove_suffix(1);
  }
  // Lowercase into a fixed buffer: no allocation on this hot path.
  std::array<char, k_max_spelling + 16> buffer{};
  if (text.empty() || text.size() > buffer.size()) {
    return std::nullopt;
  }
  for (size_t i = 0; i < text.size(); ++i) {
    buffer[i] = to_lower(text[i]);
  }
  std::string_view lower(buffer.data(), text.size());
  for (std::string_view prefix : k_prefixes) {
    if (lower.starts_with(prefix)) {
      lower.remove_prefix(prefix.size());
      break;
    }
  }
  for (const Spelling& spelling : k_spellings) {
    if (spelling.name == lower) {
      return spelling.dtype;
    }
  }
  return std::nullopt;
}

bool is_floating(DType dtype) {
  return dtype == DType::f64 || dtype == DType::f32 || dtype == DType::f16
         || dtype == DType::bf16 || dtype == DType::f8_e8m0 || is_fp8(dtype);
}

bool is_fp8(DType dtype) {
  return dtype == DType::f8_e4m3 || dtype == DType::f8_e5m2
         || dtype == DType::f8_e4m3fnuz || dtype == DType::f8_e5m2fnuz;
}

std::vector<std::string> dtype_names() {
  std::vector<std::string> names;
  names.reserve(k_all_dtypes.size());
  for (DType dtype : k_all_dtypes) {
    names.emplace_back(to_string(dtype));
  }
  return names;
}

std::optional<int64_t> bytes_for(int64_t num_elements, DType dtype) {
  // ceil(n * bits / 8) without forming n * bits, which may overflow when the
  // result does not: n / 8 * bits + ceil(n % 8 * bits / 8).
  int64_t bits = dtype_bits(dtype);
  std::optional<int64_t> whole = checked_mul(num_elements / 8, bits);
  if (!whole) {
    return std::nullopt;
  }
  return checked_add(*whole, ceil_div(num_elements % 8 * bits, 8));
}

bool Manifest::add(TensorInput tensor,
                   Diagnostics& diags,
                   const Location& where) {
  const size_t errors_before = diags.error_count();
  auto report = [&](std::string code,
                    std::string message,
                    const Location& location) -> Diagnostic& {
    Diagnostic& d = diags.error(std::move(code), std::move(message), location);
    if (!tensor.name.empty()) {
      d.tensor = std::string(tensor.name);
    }
    return d;
  };
  auto sub_location = [&](std::string_view suffix) {
    Location location = where;
    if (!location.pointer.empty()) {
      location.pointer += suffix;
    }
    return location;
  };

  uint32_t hash = 0;
  size_t slot = 0;
  if (tensor.name.empty()) {
    report("manifest.name", "tensor name is empty", where);
  } else if (m_tensors.size() >= k_max_tensors) {
    report("manifest.overflow",
           fmt::format("a manifest holds at most {} tensors", k_max_tensors),
           where);
  } else {
    if (slots_for(m_tensors.size() + 1) > slot_count()) {
      grow_index(std::max(slot_count() * 2, k_min_slots));
    }
    hash = hash_name(tensor.name);
    slot = probe(tensor.name, hash);
    if (m_tags[slot] != 0) {
      const std::string first = m_tensors[m_positions[slot]].pointer();
      std::string message =
          fmt::format("duplicate tensor name {}", quote(tensor.name));
      if (!first.empty()) {
        message += fmt::format(" (first at {})", first);
      }
      report("manifest.duplicate-name", std::move(message), where);
    }
  }

  bool dims_ok = true;
  bool any_zero = false;
  for (size_t i = 0; i < tensor.shape.size(); ++i) {
    int64_t dim = tensor.shape[i];
    if (dim < 0) {
      dims_ok = false;
      Diagnostic& d =
          report("manifest.bad-dim",
                 fmt::format("dim {} of {} is {}; dims must be >= 0",
                             i,
                             quote(tensor.name),
                             dim),
                 sub_location(fmt::format("/shape/{}", i)));
      d.dim = static_cast<int64_t>(i);
    }
    any_zero = any_zero || dim == 0;
  }

  if (tensor.logical_axes
      && tensor.logical_axes->size() != tensor.shape.size()) {
    report("manifest.logical-axes",
           fmt::format("{} has {} logical axes for rank {}",
                       quote(tensor.name),
                       tensor.logical_axes->size(),
                       tensor.shape.size()),
           sub_location("/logical_axes"));
  }

  int64_t num_elements = 0;
  int64_t num_bytes = 0;
  if (dims_ok) {
    // A zero dim makes the tensor empty however large the other dims are.
    num_elements = any_zero ? 0 : 1;
    for (size_t i = 0; i < tensor.shape.size() && !any_zero; ++i) {
      std::optional<int64_t> next = checked_mul(num_elements, tensor.shape[i]);
      if (!next) {
        report("manifest.overflow",
               fmt::format("{} has more elements than fit in 64 bits: {} x {} "
                           "overflows",
                           quote(tensor.name),
                           num_elements,
                           tensor.shape[i]),
               where);
        dims_ok = false;
        break;
      }
      num_elements = *next;
    }
  }
  if (dims_ok) {
    std::optional<int64_t> bytes = bytes_for(num_elements, tensor.dtype);
    if (!bytes) {
      report("manifest.overflow",
             fmt::format("bytes of {} overflow 64 bits: {} elements x {}",
                         quote(tensor.name),
                         num_elements,
                         element_size_text(tensor.dtype)),
             where);
      dims_ok = false;
    } else {
      num_bytes = *bytes;
    }
  }

  std::optional<int64_t> total_elements;
  std::optional<int64_t> total_bytes;
  if (dims_ok) {
    total_elements = checked_add(m_total_elements, num_elements);
    total_bytes = checked_add(m_total_bytes, num_bytes);
    if (!total_elements) {
      report("manifest.overflow",
             fmt::format("total elements of the manifest overflow 64 bits at "
                         "{}: {} + {}",
                         quote(tensor.name),
                         m_total_elements,
                         num_elements),
             where);
    } else if (!total_bytes) {
      report("manifest.overflow",
             fmt::format("total bytes of the manifest overflow 64 bits at "
                         "{}: {} + {}",
                         quote(tensor.name),
                         m_total_bytes,
                         num_bytes),
             where);
    }
  }

  if (diags.error_count() != errors_before || !total_elements || !total_bytes) {
    return false;
  }
  if (any_zero) {
    // Legal (safetensors and JAX have zero-size arrays), but no weight of a
    // model is empty: most often a dim lost on the way into the manifest.
    const auto zero = static_cast<size_t>(
        std::find(tensor.shape.begin(), tensor.shape.end(), int64_t{0})
        - tensor.shape.begin());
    Diagnostic& d = diags.warning(
        "manifest.empty-tensor",
        fmt::format("dim {} of {} is 0: the tensor has no elements (shape {})",
                    zero,
                    quote(tensor.name),
                    shape_text(tensor.shape)),
        sub_location(fmt::format("/shape/{}", zero)));
    d.tensor = std::string(tensor.name);
    d.dim = static_cast<int64_t>(zero);
    d.hint = "it takes 0 bytes on every device";
  }
  const LogicalAxes* axes = nullptr;
  if (tensor.logical_axes) {
    m_logical_axes.push_back(
        std::make_unique<const LogicalAxes>(std::move(*tensor.logical_axes)));
    axes = m_logical_axes.back().get();
  }
  const auto position = static_cast<uint32_t>(m_tensors.size());
  store(Tensor{tensor.name,
               tensor.shape,
               OptionalRef<LogicalAxes>(axes),
               num_elements,
               num_bytes,
               tensor.dtype,
               tensor.pointer_form,
               tensor.params_index});
  m_total_elements = *total_elements;
  m_total_bytes = *total_bytes;
  set_tag(slot, tag_of(hash));
  m_positions[slot] = position;
  return true;
}

std::string Tensor::pointer() const {
  switch (pointer_form) {
    case PointerForm::none:
      break;
    case PointerForm::params:
      return fmt::format("/params/{}", params_index);
    case PointerForm::key:
      return json_pointer_child("", name);
    case PointerForm::weight_map:
      return json_pointer_child("/weight_map", name);
  }
  return {};
}

namespace detail {

size_t hash_bytes(std::string_view text) noexcept {
  return static_cast<size_t>(hash_of(text));
}

Arena::Arena(Arena&& other) noexcept
    : m_chunks(std::move(other.m_chunks)),
      m_next(std::exchange(other.m_next, nullptr)),
      m_left(std::exchange(other.m_left, 0)),
      m_chunk_bytes(std::exchange(other.m_chunk_bytes, 0)) {
  other.m_chunks.clear();
}

Arena& Arena::operator=(Arena&& other) noexcept {
  if (this != &other) {
    m_chunks = std::move(other.m_chunks);
    other.m_chunks.clear();
    m_next = std::exchange(other.m_next, nullptr);
    m_left = std::exchange(other.m_left, 0);
    m_chunk_bytes = std::exchange(other.m_chunk_bytes, 0);
  }
  return *this;
}

void* Arena::allocate_in_new_chunk(size_t bytes) {
  constexpr size_t k_first_chunk = size_t{4} << 10U;
  constexpr size_t k_max_chunk = size_t{1} << 20U;
  const size_t size =
      std::min(std::max(m_chunk_bytes * 2, k_first_chunk), k_max_chunk);
  if (bytes > size) {
    // A chunk of its own; the current chunk keeps serving small requests.
    m_chunks.push_back(std::make_unique_for_overwrite<std::byte[]>(bytes));
    return m_chunks.back().get();
  }
  // new[] aligns to alignof(std::max_align_t).
  m_chunks.push_back(std::make_unique_for_overwrite<std::byte[]>(size));
  m_chunk_bytes = size;
  std::byte* out = m_chunks.back().get();
  m_next = out + bytes;
  m_left = size - bytes;
  return out;
}

}  // namespace detail

Manifest::Manifest(const Manifest& other)
    : source(other.source),
      m_tags(other.m_tags),
      m_total_elements(other.m_total_elements),
      m_total_bytes(other.m_total_bytes) {
  if (slot_count() != 0) {
    m_positions = std::make_unique_for_overwrite<uint32_t[]>(slot_count());
    for (size_t i = 0; i < slot_count(); ++i) {
      if (m_tags[i] != 0) {
        m_positions[i] = other.m_positions[i];
      }
    }
  }
  m_tensors.reserve(other.m_tensors.size());
  for (Tensor tensor : other.m_tensors) {
    if (tensor.logical_axes) {
      m_logical_axes.push_back(
          std::make_unique<const LogicalAxes>(*tensor.logical_axes));
      tensor.logical_axes =
          OptionalRef<LogicalAxes>(m_logical_axes.back().get());
    }
    store(tensor);
  }
}

Manifest& Manifest::operator=(const Manifest& other) {
  if (this != &other) {
    *this = Manifest(other);
  }
  return *this;
}

void Manifest::store(const Tensor& tensor) {
  // One block per tensor: the dims, then the name's bytes.
  const size_t rank = tensor.shape.size();
  const size_t dims_bytes = rank * sizeof(int64_t);
  auto* block = static_cast<std::byte*>(
      m_arena.allocate(dims_bytes + tensor.name.size(), alignof(int64_t)));
  if (rank != 0) {
    std::memcpy(block, tensor.shape.data(), dims_bytes);
  }
  if (!tensor.name.empty()) {
    std::memcpy(block + dims_bytes, tensor.name.data(), tensor.name.size());
  }
  // Written in place, member by member: no temporary Tensor to copy.
  Tensor& stored = m_tensors.emplace_back();
  stored.name = std::string_view(
      reinterpret_cast<const char*>(block + dims_bytes), tensor.name.size());
  stored.shape = ShapeView(reinterpret_cast<const int64_t*>(block), rank);
  stored.logical_axes = tensor.logical_axes;
  stored.num_elements = tensor.num_elements;
  stored.num_bytes = tensor.num_bytes;
  stored.dtype = tensor.dtype;
  stored.pointer_form = tensor.pointer_form;
  stored.params_index = tensor.params_index;
}

const Tensor* Manifest::find(std::string_view name) const {
  if (slot_count() == 0) {
    return nullptr;
  }
  size_t slot = probe(name, hash_name(name));
  return m_tags[slot] == 0 ? nullptr : &m_tensors[m_positions[slot]];
}

Manifest Manifest::subset(std::span<const size_t> indices) const {
  Manifest out;
  out.source = source;
  out.reserve(indices.size());
  for (size_t i : indices) {
    assert(i < m_tensors.size());
    Tensor tensor = m_tensors[i];
    if (tensor.logical_axes) {
      out.m_logical_axes.push_back(
          std::make_unique<const LogicalAxes>(*tensor.logical_axes));
      tensor.logical_axes =
          OptionalRef<LogicalAxes>(out.m_logical_axes.back().get());
    }
    const uint32_t hash = hash_name(tensor.name);
    const size_t slot = out.probe(tensor.name, hash);
    assert(out.m_tags[slot] == 0);  // names are unique here already
    const auto position = static_cast<uint32_t>(out.m_tensors.size());
    out.store(tensor);
    out.set_tag(slot, tag_of(hash));
    out.m_positions[slot] = position;
    // A part of sums that fit in int64, each term >= 0: no overflow.
    out.m_total_elements += tensor.num_elements;
    out.m_total_bytes += tensor.num_bytes;
  }
  return out;
}

void Manifest::reserve(size_t n) {
  m_tensors.reserve(n);
  n = std::min(n, k_max_tensors);
  if (slots_for(n) > slot_count()) {
    grow_index(slots_for(n));
  }
}

void Manifest::prefetch(std::string_view name) const {
  if (slot_count() == 0) {
    return;
  }
  const size_t slot = hash_name(name) & (slot_count() - 1);
  __builtin_prefetch(m_tags.data() + slot);
  __builtin_prefetch(m_positions.get() + slot, 1);
}

size_t Manifest::probe(std::string_view name, uint32_t hash) const {
  const size_t mask = slot_count() - 1;
  const uint8_t tag = tag_of(hash);
  for (size_t i = hash & mask;; i = (i + k_group) & mask) {
    const uint64_t group = load_group(m_tags.data() + i);
    // Tags are never 0 (their high bit is set), so `empty` is exact.
    const uint64_t empty = bytes_equal(group, 0);
    uint64_t matches = bytes_equal(group, tag);
    if (empty != 0) {
      // The run of this probe ends at the first empty slot.
      const size_t end = first_flagged(empty);
      matches &= end == 0 ? 0 : ~uint64_t{0} >> (64 - 8 * end);
    }
    for (; matches != 0; matches &= matches - 1) {
      const size_t slot = (i + first_flagged(matches)) & mask;
      if (m_tensors[m_positions[slot]].name == name) {
        return slot;
      }
    }
    if (empty != 0) {
      return (i + first_flagged(empty)) & mask;
    }
  }
}

void Manifest::set_tag(size_t slot, uint8_t tag) {
  m_tags[slot] = tag;
  static_assert(k_tag_copies == k_group - 1);
  if (slot < k_tag_copies) {
    m_tags[slot_count() + slot] = tag;  // the copy read by groups that wrap
  }
}

void Manifest::grow_index(size_t slots) {
  const size_t size = std::bit_ceil(std::max(slots, k_min_slots));
  m_tags.assign(size + k_tag_copies, 0);
  m_positions = std::make_unique_for_overwrite<uint32_t[]>(size);
  const size_t mask = size - 1;
  for (size_t position = 0; position < m_tensors.size(); ++position) {
    const uint32_t hash = hash_name(m_tensors[position].name);
    size_t i = hash & mask;
    while (m_tags[i] != 0) {
      i = (i + 1) & mask;
    }
    set_tag(i, tag_of(hash));
    m_positions[i] = static_cast<uint32_t>(position);
  }
}

}  // namespace shardplan
