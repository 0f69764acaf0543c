// The manifest reader (docs/manifest-format.md): the native
// form {"params": [...]} and safetensors headers, read by one forward pass of
// simdjson's On-Demand API straight into a Manifest (io/json.hpp, JsonInput).

#include "io/internal.hpp"
#include "io/json.hpp"

#include <shardplan/io.hpp>

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace shardplan {

namespace {

using io_detail::DataOffsets;
using io_detail::increment_index_pointer;
using io_detail::JsonInput;
using io_detail::read_plain_dims;
using io_detail::set_index_pointer;
using io_detail::set_key_pointer;
namespace od = simdjson::ondemand;
using io_detail::clip;
using io_detail::suggest;
using io_detail::trim;

// Spellings offered by "did you mean" for an unknown dtype (lowercase).
const std::vector<std::string>& dtype_suggestions() {
  static const std::vector<std::string> k_names = [] {
    std::vector<std::string> names = dtype_names();
    for (const char* extra :
         {"float64",       "float32",     "float16",        "bfloat16",
          "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "int64",
          "int32",         "int16",       "int8",           "int4",
          "uint64",        "uint32",      "uint16",         "uint8",
          "uint4",         "complex64",   "complex128",     "double",
          "float",         "half"}) {
      names.emplace_back(extra);
    }
    return names;
  }();
  return k_names;
}

}  // namespace

std::string dtype_hint(std::string_view text) {
  std::string lower(text);
  bool has_lower = false;
  bool has_upper = false;
  for (char& c : lower) {
    has_lower = has_lower || (c >= 'a' && c <= 'z');
    if (c >= 'A' && c <= 'Z') {
      has_upper = true;
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  std::string best = suggest(lower, dtype_suggestions());
  if (best.empty()) {
    std::string names;
    for (const std::string& name : dtype_names()) {
      names += names.empty() ? "" : ", ";
      names += name;
    }
    return fmt::format(
        "expected one of {} (or a usual spelling such as "
        "\"float32\" or \"BF16\")",
        names);
  }
  if (has_upper && !has_lower) {  // safetensors style: "BF61" -> "BF16"
    for (char& c : best) {
      if (c >= 'a' && c <= 'z') {
        c = static_cast<char>(c - 'a' + 'A');
      }
    }
  }
  return fmt::format("did you mean {}?", quote(best));
}

namespace {

enum class TensorKey : uint8_t {
  name,
  shape,
  dtype,
  logical_axes,
  data_offsets,
  unknown
};

// Works on a raw (still escaped) key straight from the parser, which is the
// fast path, and on an unescaped std::string_view.
template <typename Key>
TensorKey classify(const Key& key) {
  // Two compares at most: the first byte picks the candidate. A raw key
  // starts after its opening quote; an empty one ends at the closing quote.
  char first = 0;
  if constexpr (std::is_same_v<Key, od::raw_json_string>) {
    first = *key.raw();
  } else {
    first = key.empty() ? '\0' : key.front();
  }
  if (first != 'n' && first != 's' && first != 'd' && first != 'l') {
    return TensorKey::unknown;
  }
  if (key == "name") {
    return TensorKey::name;
  }
  if (key == "shape") {
    return TensorKey::shape;
  }
  if (key == "dtype") {
    return TensorKey::dtype;
  }
  if (key == "logical_axes") {
    return TensorKey::logical_axes;
  }
  if (key == "data_offsets") {
    return TensorKey::data_offsets;
  }
  return TensorKey::unknown;
}

constexpr unsigned bit(TensorKey key) {
  return 1U << static_cast<unsigned>(key);
}

std::string_view key_name(TensorKey key) {
  switch (key) {
    case TensorKey::name:
      return "name";
    case TensorKey::shape:
      return "shape";
    case TensorKey::dtype:
      return "dtype";
    case TensorKey::logical_axes:
      return "logical_axes";
    case TensorKey::data_offsets:
      return "data_offsets";
    case TensorKey::unknown:
      break;
  }
  return "";
}

class ManifestReader : public JsonInput {
 public:
  ManifestReader(std::string_view text,
                 std::string_view source,
                 Diagnostics& diags,
                 size_t padding = 0)
      : JsonInput(text, source, diags, padding) {
    m_where.source = m_source;
  }

  std::optional<Manifest> run() {
    od::object top;
    if (!open(top)) {
      return std::nullopt;
    }
    // The native form has a "params" key; anything else is a safetensors
    // header. One pass reads the text as a header, with failures held back;
    // if it meets "params", or fails where "params" comes later, the text
    // is read again in the native form. A native file with "params" first
    // costs nothing extra, and a header is read in one pass.
    m_defer = true;
    bool ok = read_safetensors(top) && finish();
    m_defer = false;
    bool native = m_saw_params;
    // Whether the text was searched to its end for "params" and has none.
    bool no_params = false;
    if (!ok && !native && m_pending.kind != Pending::Kind::json) {
      bool at_start = false;
      od::value params;
      if (!top.reset().get(at_start)) {
        auto e = top.find_field_unordered("params").get(params);
        native = e == simdjson::SUCCESS;
        no_params = e == simdjson::NO_SUCH_FIELD;
      }
    }
    if (native) {
      m_pending = Pending{};
      m_scratch = Diagnostics();
      m_warnings = Diagnostics();
      m_manifest = Manifest();
      bool at_start = false;
      if (auto e = top.reset().get(at_start)) {
        fail_json(e, "");
        return std::nullopt;
      }
      ok = read_native(top) && finish();
    } else if (!ok && no_params && looks_like_index(top)) {
      m_pending = Pending{};
      m_is_index = true;
      return std::nullopt;
    } else if (!ok) {
      replay();
    }
    if (!ok) {
      return std::nullopt;
    }
    return finish_manifest(native);
  }

  // A .safetensors file's header: always the safetensors form (a tensor may
  // be named "params" there), with each tensor's data_offsets appended to
  // `offsets` in header order.
  std::optional<Manifest> run_header(std::vector<DataOffsets>& offsets) {
    m_header_only = true;
    m_offsets = &offsets;
    od::object top;
    if (!open(top) || !read_safetensors(top) || !finish()) {
      return std::nullopt;
    }
    return finish_manifest(false);
  }

  // True after run() met a safetensors index ({"weight_map": ...}) and
  // returned nullopt without reporting anything.
  bool is_index() const { return m_is_index; }

 private:
  std::optional<Manifest> finish_manifest(bool native) {
    if (m_manifest.empty()) {
      fail("manifest.empty",
           "manifest has no tensors",
           native ? "/params" : "",
           native ? m_params_at : m_padded.data());
      return std::nullopt;
    }
    m_manifest.source = m_source;
    for (const Diagnostic& d : m_warnings.items()) {
      m_diags.add(d);
    }
    return std::move(m_manifest);
  }

  // After a failed first pass over a text with no "params": a
  // model.safetensors.index.json has "weight_map" instead.
  bool looks_like_index(od::object& top) {
    bool at_start = false;
    od::object weight_map;
    return !top.reset().get(at_start)
           && !top.find_field_unordered("weight_map")
                   .get_object()
                   .get(weight_map);
  }

  // {"params": [...], other keys ignored}
  bool read_native(od::object& top) {
    bool seen = false;
    for (auto result : top) {
      od::field field;
      if (auto e = std::move(result).get(field)) {
        return fail_json(e, "");
      }
      od::value& value = field.value();
      if (field.key() == "params") {
        if (seen) {
          return fail_duplicate("params", "/params", start_of(value));
        }
        seen = true;
        if (!read_params(value)) {
          return false;
        }
        continue;
      }
      std::string_view key;
      if (auto e = field.unescaped_key().get(key)) {
        return fail_json(e, "");
      }
      std::string pointer = json_pointer_child("", key);
      if (!skip_value(value, [&] { return pointer; })) {
        return false;
      }
    }
    return true;
  }

  bool read_params(od::value& value) {
    m_params_at = start_of(value);
    reserve_for_text(96);
    return for_each_element(value,
                            "/params",
                            "an array of tensor objects",
                            [&](size_t index, od::value& entry) {
                              return read_native_tensor(entry, index);
                            });
  }

  bool read_native_tensor(od::value& value, size_t index) {
    // The tensor's pointer, where Manifest::add reports: the last one's,
    // incremented, for consecutive entries (this runs once per tensor).
    constexpr std::string_view k_prefix = "/params/";
    if (index != 0 && index == m_where_index + 1) {
      increment_index_pointer(m_where.pointer, k_prefix.size());
    } else {
      set_index_pointer(m_where.pointer, k_prefix, index);
    }
    m_where_index = index;
    const std::string& pointer = m_where.pointer;
    const char* at = start_of(value);
    od::object object;
    if (!get_as(
            value, object, "a tensor object", [&] { return pointer; }, at)) {
      return false;
    }
    TensorInput tensor;
    tensor.pointer_form = PointerForm::params;
    tensor.params_index = static_cast<uint32_t>(index);
    unsigned seen = 0;
    for (auto result : object) {
      od::field field;
      if (auto e = std::move(result).get(field)) {
        return fail_json(e, pointer, at);
      }
      od::value& v = field.value();
      TensorKey key = TensorKey::unknown;
      if (!tensor_key(field, k_native, seen, pointer, at, key)) {
        return false;
      }
      bool ok = true;
      switch (key) {
        case TensorKey::name:
          ok = read_name(v, pointer, tensor.name);
          m_manifest.prefetch(tensor.name);
          break;
        case TensorKey::shape:
          ok = read_shape(v, pointer);
          tensor.shape = m_dims;
          break;
        case TensorKey::dtype:
          ok = read_dtype(v, pointer, tensor.dtype);
          break;
        case TensorKey::logical_axes:
          ok = read_logical_axes(v, pointer, tensor.logical_axes);
          break;
        case TensorKey::data_offsets:
        case TensorKey::unknown:
          break;
      }
      if (!ok) {
        return false;
      }
    }
    for (TensorKey required :
         {TensorKey::name, TensorKey::shape, TensorKey::dtype}) {
      if ((seen & bit(required)) == 0) {
        std::string who =
            tensor.name.empty() && (seen & bit(TensorKey::name)) == 0
                ? fmt::format("tensor {}", index)
                : fmt::format("tensor {}", quote(tensor.name));
        return fail("json.missing-key",
                    fmt::format("{} has no \"{}\"", who, key_name(required)),
                    pointer,
                    at);
      }
    }
    return add(std::move(tensor), at);
  }

  // {"NAME": {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}
  bool read_safetensors(od::object& top) {
    bool seen_metadata = false;
    return for_each_field(
        top, "", nullptr, [&](std::string_view key, od::value& value) {
          if (key == "params" && !m_header_only) {
            m_saw_params = true;
            return false;
          }
          if (key != "__metadata__") {
            return read_safetensors_tensor(key, value);
          }
          if (seen_metadata) {
            return fail_duplicate(
                "__metadata__", "/__metadata__", start_of(value));
          }
          seen_metadata = true;
          return read_metadata(value);
        });
  }

  // safetensors: "__metadata__" maps strings to strings.
  bool read_metadata(od::value& value) {
    return for_each_member(
        value,
        "/__metadata__",
        "an object of strings",
        [&](std::string_view key, od::value& v) {
          std::string pointer = "/__metadata__/" + json_pointer_escape(key);
          od::json_type type{};
          if (auto e = v.type().get(type)) {
            return fail_json(e, pointer, start_of(v));
          }
          if (type != od::json_type::string) {
            return fail_type(v,
                             "a string",
                             pointer,
                             start_of(v),
                             "safetensors metadata maps strings to strings");
          }
          return skip_value(v, [&] { return pointer; });
        });
  }

  // `name` is a key unescaped by the parser: it stays valid while the
  // document is read.
  bool read_safetensors_tensor(std::string_view name, od::value& value) {
    // The tensor's pointer, where Manifest::add reports.
    set_key_pointer(m_where.pointer, name);
    m_where_index = std::numeric_limits<size_t>::max();
    const std::string& pointer = m_where.pointer;
    const char* at = start_of(value);
    od::json_type type{};
    if (auto e = value.type().get(type)) {
      return fail_json(e, pointer, at);
    }
    if (type != od::json_type::object) {
      std::string hint;
      if (!suggest(name, {"params"}).empty() || type == od::json_type::array) {
        hint = "a native manifest lists its tensors under \"params\"";
      }
      return fail_type(value,
                       "a tensor object with \"dtype\", \"shape\" and "
                       "\"data_offsets\"",
                       pointer,
                       at,
                       std::move(hint));
    }
    od::object object;
    if (auto e = value.get_object().get(object)) {
      return fail_json(e, pointer, at);
    }
    if (m_manifest.empty()) {
      reserve_for_text(128);
    }
    TensorInput tensor;
    tensor.name = name;
    m_manifest.prefetch(name);
    tensor.pointer_form = PointerForm::key;
    std::array<int64_t, 2> offsets{};
    unsigned seen = 0;
    for (auto result : object) {
      od::field field;
      if (auto e = std::move(result).get(field)) {
        return fail_json(e, pointer, at);
      }
      od::value& v = field.value();
      TensorKey key = TensorKey::unknown;
      if (!tensor_key(field, k_safetensors, seen, pointer, at, key)) {
        return false;
      }
      bool ok = true;
      if (key == TensorKey::shape) {
        ok = read_shape(v, pointer);
        tensor.shape = m_dims;
      } else if (key == TensorKey::dtype) {
        ok = read_dtype(v, pointer, tensor.dtype);
      } else {
        ok = read_data_offsets(v, pointer, offsets);
      }
      if (!ok) {
        return false;
      }
    }
    for (TensorKey required :
         {TensorKey::dtype, TensorKey::shape, TensorKey::data_offsets}) {
      if ((seen & bit(required)) == 0) {
        return fail("json.missing-key",
                    fmt::format("tensor {} has no \"{}\"",
                                quote(tensor.name),
                                key_name(required)),
                    pointer,
                    at);
      }
    }
    if (!add(std::move(tensor), at)) {
      return false;
    }
    if (m_offsets != nullptr) {
      m_offsets->push_back(offsets);
    }
    const Tensor& added = m_manifest.tensors().back();
    if (offsets[1] - offsets[0] != added.num_bytes) {
      return fail("manifest.data-offsets",
                  fmt::format("data_offsets [{}, {}] span {} bytes, but a {} "
                              "tensor of shape {} has {} bytes",
                              offsets[0],
                              offsets[1],
                              offsets[1] - offsets[0],
                              to_string(added.dtype),
                              shape_text(added.shape),
                              added.num_bytes),
                  added.pointer() + "/data_offsets",
                  m_offsets_at);
    }
    return true;
  }

  // The keys of a tensor object in each form: a mask of TensorKey bits and
  // the names the hint of an unknown key offers.
  struct TensorForm {
    unsigned keys = 0;
    std::vector<std::string> names;
  };
  static inline const TensorForm k_native{
      bit(TensorKey::name) | bit(TensorKey::shape) | bit(TensorKey::dtype)
          | bit(TensorKey::logical_axes),
      {"name", "shape", "dtype", "logical_axes"}};
  static inline const TensorForm k_safetensors{
      bit(TensorKey::dtype) | bit(TensorKey::shape)
          | bit(TensorKey::data_offsets),
      {"dtype", "shape", "data_offsets"}};

  // The key of `field` of a tensor object at `pointer`: one of `form`'s,
  // not seen before in the object; otherwise reported (json.unknown-key,
  // json.duplicate-key) and false. A key the raw text already identifies
  // is not unescaped.
  bool tensor_key(od::field& field,
                  const TensorForm& form,
                  unsigned& seen,
                  const std::string& pointer,
                  const char* at,
                  TensorKey& key) {
    key = classify(field.key());
    std::string_view unescaped;
    if ((form.keys & bit(key)) == 0) {
      if (auto e = field.unescaped_key().get(unescaped)) {
        return fail_json(e, pointer, at);
      }
      key = classify(unescaped);
    }
    if ((form.keys & bit(key)) == 0) {
      return fail_unknown_key(unescaped,
                              json_pointer_child(pointer, unescaped),
                              form.names,
                              start_of(field.value()));
    }
    return check_duplicate(seen, key, pointer, field.value());
  }

  // Reserves room for the tensors the text likely holds, from the typical
  // size of an entry: ~100 bytes native, ~130 in a safetensors header,
  // which adds "data_offsets" (generated DeepSeek-V3 manifests: ~107 and
  // ~134). A guess, not a bound: too high leaves memory untouched but
  // spreads the index, which is read at random (twice its size cost a
  // quarter of the read); too low costs a regrowth. Counting the entries
  // first cost a pass over the whole structure, a fifth of the read.
  void reserve_for_text(size_t entry_bytes) {
    m_manifest.reserve(
        std::min<size_t>(body_size() / entry_bytes + 1, 1U << 22U));
  }

  // Runs for every key of every tensor: the report is out of line.
  bool check_duplicate(unsigned& seen,
                       TensorKey key,
                       const std::string& pointer,
                       od::value& value) {
    if ((seen & bit(key)) != 0) [[unlikely]] {
      return duplicate_key(key, pointer, value);
    }
    seen |= bit(key);
    return true;
  }

  [[gnu::noinline]] bool duplicate_key(TensorKey key,
                                       const std::string& pointer,
                                       od::value& value) {
    return fail_duplicate(key_name(key),
                          fmt::format("{}/{}", pointer, key_name(key)),
                          start_of(value));
  }

  // Manifest::add checks names, dims and sizes; its reports (at m_where, the
  // tensor's pointer) get the line, column and excerpt of the tensor's object
  // (`at`) here.
  bool add(TensorInput tensor, const char* at) {
    if (m_manifest.add(std::move(tensor), m_scratch, m_where)) {
      if (!m_scratch.items().empty()) {
        keep_warnings(at);
      }
      return true;
    }
    if (m_defer) {
      m_pending =
          Pending{Pending::Kind::lower, simdjson::SUCCESS, {}, {}, {}, {}, at};
    } else {
      forward_lower(at);
    }
    return false;
  }

  // What an add() that succeeded warned about (a tensor with no elements),
  // located at `at` (the tensor), kept until the manifest is read whole: a
  // first pass in the wrong form is read again.
  void keep_warnings(const char* at) {
    for (Diagnostic d : m_scratch.items()) {
      if (d.location.line == 0 && d.location.source == m_source) {
        d.location = location(std::move(d.location.pointer), at);
      }
      m_warnings.add(std::move(d));
    }
    m_scratch = Diagnostics();
  }

  // `name` views the text or the parser's copy of it: valid while the
  // document is read.
  bool read_name(od::value& value,
                 const std::string& base,
                 std::string_view& name) {
    const char* at = start_of(value);
    if (*at == '"' && plain_string(at + 1, name)) {
      return true;  // the value is left unread: the parser steps over it
    }
    return get_as(
        value,
        name,
        "a tensor name string",
        [&] { return base + "/name"; },
        start_of(value));
  }

  // A dim or an offset: an integer in int64.
  template <typename PointerFn>
  bool read_integer(od::value& value,
                    int64_t& out,
                    std::string_view what,
                    const PointerFn& pointer) {
    if (value.get_int64().get(out) == simdjson::SUCCESS) {
      return true;
    }
    // A failed get_int64 leaves the value where it was: find out why.
    const char* at = start_of(value);
    od::json_type type{};
    if (auto e = value.type().get(type)) {
      return fail_json(e, pointer(), at);
    }
    if (type != od::json_type::number) {
      return fail(
          code_for(what, "type"),
          fmt::format("expected an integer {}, got {}", what, describe(value)),
          pointer(),
          at);
    }
    std::string_view token = trim(value.raw_json_token());
    bool integral = !token.empty();
    for (size_t i = 0; i < token.size(); ++i) {
      integral =
          integral && (is_digit(token[i]) || (i == 0 && token[i] == '-'));
    }
    bool clipped = false;
    std::string_view shown = clip(token, 48, clipped);
    if (integral) {
      return fail(code_for(what, "range"),
                  fmt::format("{} {}{} does not fit in int64 (max {})",
                              what,
                              shown,
                              clipped ? "..." : "",
                              std::numeric_limits<int64_t>::max()),
                  pointer(),
                  at);
    }
    return fail(code_for(what, "range"),
                fmt::format("expected an integer {}, got {}{}",
                            what,
                            shown,
                            clipped ? "..." : ""),
                pointer(),
                at);
  }

  // A value of the wrong type is json.type; a bad number is
  // manifest.bad-dim for a dim, manifest.data-offsets for an offset.
  static std::string code_for(std::string_view what, std::string_view kind) {
    if (kind == "type") {
      return "json.type";
    }
    return what == "offset" ? "manifest.data-offsets" : "manifest.bad-dim";
  }

  // Reads the dims into m_dims.
  bool read_shape(od::value& value, const std::string& base) {
    const char* at = start_of(value);
    if (read_plain_dims(at, m_dims)) {
      return true;  // the value is left unread: the parser steps over it
    }
    od::array array;
    if (!get_as(
            value,
            array,
            "an array of integers",
            [&] { return base + "/shape"; },
            at)) {
      return false;
    }
    m_dims.clear();
    size_t index = 0;
    auto pointer = [&] { return fmt::format("{}/shape/{}", base, index); };
    for (auto result : array) {
      od::value dim;
      if (auto e = result.get(dim)) {
        return fail_json(e, pointer(), at);
      }
      int64_t size = 0;
      if (!read_integer(dim, size, "dim size", pointer)) {
        return false;
      }
      m_dims.push_back(size);
      ++index;
    }
    return true;
  }

  bool read_dtype(od::value& value, const std::string& base, DType& dtype) {
    const char* at = start_of(value);
    // Manifests spell a handful of dtypes 100k times: remember the last few
    // as they appear in the text, quotes included, so that a repeat is
    // recognized in place, neither unescaped nor parsed again. A token that
    // starts with "bf16" and its closing quote is the string bf16.
    std::string_view raw = value.raw_json_token();
    for (const auto& [quoted, cached] : m_dtype_cache) {
      if (raw.starts_with(quoted)) {
        od::raw_json_string skipped;
        if (auto e = value.get_raw_json_string().get(skipped)) {
          return fail_json(e, base + "/dtype", at);
        }
        dtype = cached;
        return true;
      }
    }
    std::string_view text;
    if (!get_as(
            value,
            text,
            "a dtype string",
            [&] { return base + "/dtype"; },
            at)) {
      return false;
    }
    std::optional<DType> parsed = parse_dtype(text);
    // Only a spelling without escapes reads the same in the text.
    if (parsed && m_dtype_cache.size() < 8
        && text.find_first_of("\"\\") == std::string_view::npos) {
      m_dtype_cache.emplace_back(fmt::format("\"{}\"", text), *parsed);
    }
    if (!parsed) {
      return fail("manifest.dtype",
                  fmt::format("unknown dtype {}", quote(text)),
                  base + "/dtype",
                  at,
                  dtype_hint(text));
    }
    dtype = *parsed;
    return true;
  }

  bool read_logical_axes(od::value& value,
                         const std::string& base,
                         std::optional<LogicalAxes>& axes) {
    std::string pointer = base + "/logical_axes";
    const char* at = start_of(value);
    od::json_type type{};
    if (auto e = value.type().get(type)) {
      return fail_json(e, pointer, at);
    }
    if (type == od::json_type::null) {
      return skip_value(value, [&] { return pointer; });
    }
    if (type != od::json_type::array) {
      return fail_type(value, "an array of logical axis names", pointer, at);
    }
    od::array array;
    if (auto e = value.get_array().get(array)) {
      return fail_json(e, pointer, at);
    }
    LogicalAxes names;
    size_t index = 0;
    for (auto result : array) {
      od::value entry;
      if (auto e = result.get(entry)) {
        return fail_json(e, fmt::format("{}/{}", pointer, index), at);
      }
      const char* entry_at = start_of(entry);
      if (auto e = entry.type().get(type)) {
        return fail_json(e, fmt::format("{}/{}", pointer, index), entry_at);
      }
      if (type == od::json_type::null) {
        if (!skip_value(entry,
                        [&] { return fmt::format("{}/{}", pointer, index); })) {
          return false;
        }
        names.emplace_back(std::nullopt);
      } else if (type == od::json_type::string) {
        std::string_view text;
        if (auto e = entry.get_string().get(text)) {
          return fail_json(e, fmt::format("{}/{}", pointer, index), entry_at);
        }
        if (text.empty()) {
          return fail("manifest.logical-axes",
                      "empty logical axis name; use null for a dim without one",
                      fmt::format("{}/{}", pointer, index),
                      entry_at);
        }
        names.emplace_back(std::string(text));
      } else {
        return fail_type(entry,
                         "a logical axis name or null",
                         fmt::format("{}/{}", pointer, index),
                         entry_at);
      }
      ++index;
    }
    axes = std::move(names);
    return true;
  }

  // safetensors: [begin, end], 0 <= begin <= end.
  bool read_data_offsets(od::value& value,
                         const std::string& base,
                         std::array<int64_t, 2>& offsets) {
    // Built only when something is reported.
    auto pointer = [&] { return base + "/data_offsets"; };
    m_offsets_at = start_of(value);
    // The common case, two plain integers in order, without the parser's
    // generic array reading (as read_shape does); anything else is read
    // the full way below, which reports what is wrong.
    std::vector<int64_t>& plain = m_plain_offsets;
    if (read_plain_dims(m_offsets_at, plain) && plain.size() == 2
        && plain[0] >= 0 && plain[0] <= plain[1]) {
      offsets = {plain[0], plain[1]};
      return true;  // the value is left unread: the parser steps over it
    }
    od::array array;
    if (!get_as(
            value, array, "[begin, end] byte offsets", pointer, m_offsets_at)) {
      return false;
    }
    size_t index = 0;
    auto entry_pointer = [&] { return fmt::format("{}/{}", pointer(), index); };
    for (auto result : array) {
      od::value entry;
      if (auto e = result.get(entry)) {
        return fail_json(e, entry_pointer(), m_offsets_at);
      }
      int64_t offset = 0;
      if (index < 2) {
        if (!read_integer(entry, offset, "offset", entry_pointer)) {
          return false;
        }
        if (offset < 0) {
          return fail("manifest.data-offsets",
                      fmt::format("offset {} is negative", offset),
                      entry_pointer(),
                      start_of(entry));
        }
        offsets[index] = offset;
      } else if (!skip_value(entry, entry_pointer)) {
        return false;
      }
      ++index;
    }
    if (index != 2) {
      return fail("manifest.data-offsets",
                  fmt::format("expected 2 offsets [begin, end], got {}", index),
                  pointer(),
                  m_offsets_at);
    }
    if (offsets[0] > offsets[1]) {
      return fail(
          "manifest.data-offsets",
          fmt::format(
              "begin offset {} is after end offset {}", offsets[0], offsets[1]),
          pointer(),
          m_offsets_at);
    }
    return true;
  }

  Manifest m_manifest;
  Diagnostics m_warnings;  // see keep_warnings()
  // Where Manifest::add reports: the pointer of the tensor being read, its
  // buffer reused for every tensor.
  Location m_where;
  // The entry of params whose pointer m_where holds, if it holds one.
  size_t m_where_index = std::numeric_limits<size_t>::max();
  bool m_saw_params = false;
  bool m_is_index = false;
  // run_header(): the safetensors form only, offsets kept.
  bool m_header_only = false;
  std::vector<DataOffsets>* m_offsets = nullptr;
  std::vector<int64_t>
      m_dims;  // the shape being read; a tensor's shape views it
  std::vector<int64_t> m_plain_offsets;  // read_data_offsets' fast path
  std::vector<std::pair<std::string, DType>> m_dtype_cache;
  const char* m_params_at = nullptr;
  const char* m_offsets_at = nullptr;
};

}  // namespace

std::optional<Manifest> read_manifest(std::string_view json,
                                      std::string_view source,
                                      Diagnostics& diags) {
  bool is_index = false;
  std::optional<Manifest> manifest =
      io_detail::read_manifest_or_index(json, source, is_index, diags);
  if (is_index) {
    diags
        .error("manifest.index",
               "this is a safetensors index (it has \"weight_map\"), not a "
               "manifest",
               Location::of(std::string(source)))
        .hint =
        "read it by its path (read_manifest_path), which reads its shard "
        "files too";
  }
  return manifest;
}

namespace io_detail {

std::optional<Manifest> read_header_text(std::string_view header,
                                         std::string_view source,
                                         std::vector<DataOffsets>& offsets,
                                         Diagnostics& diags) {
  try {
    ManifestReader reader(header, source, diags);
    return reader.run_header(offsets);
  } catch (const std::exception& e) {
    report_exception(e, header.size(), source, diags);
    return std::nullopt;
  }
}

std::optional<Manifest> read_manifest_or_index(std::string_view json,
                                               std::string_view source,
                                               bool& is_index,
                                               Diagnostics& diags,
                                               size_t padding) {
  is_index = false;
  try {
    ManifestReader reader(json, source, diags, padding);
    std::optional<Manifest> manifest = reader.run();
    is_index = reader.is_index();
    return manifest;
  } catch (const std::exception& e) {
    report_exception(e, json.size(), source, diags);
    return std::nullopt;
  }
}

}  // namespace io_detail

}  // namespace shardplan
