// The specs-file reader (docs/manifest-format.md, "Specs
// files"; docs/partition-specs.md):
// {"specs": {NAME: SPEC}} or the JSON `plan` writes ({"tensors": [...]}).

#include "io/files.hpp"
#include "io/json.hpp"

#include <shardplan/io.hpp>
#include <shardplan/spec.hpp>

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace shardplan {

namespace {

namespace od = simdjson::ondemand;
using io_detail::JsonInput;
using io_detail::report_exception;
using io_detail::suggest;
using SharedSpec = std::shared_ptr<const PartitionSpec>;

// Reads the spec whose text starts at `p` when it is plain, as nearly every
// spec of a large file is: "[", entries separated by ",", "]", JSON
// whitespace between; an entry null, an axis name, or "[" axis names
// separated by "," "]"; an axis name a non-empty string without a backslash
// or a control character. Sets `end` past the spec's text and, when `spec`
// is given, fills it as read_spec would. Anything else returns false, and
// the caller reads the value the full way, which reports what is wrong.
// REQUIRES: p points into a padded buffer of JSON text (a NUL after it).
bool read_plain_spec(const char* p, const char*& end, PartitionSpec* spec) {
  auto skip_space = [&] {
    while (is_space(*p)) {
      ++p;
    }
  };
  // An axis name: its text is its value.
  auto name = [&](std::string* out) {
    if (*p != '"') {
      return false;
    }
    const char* begin = ++p;
    while (*p != '"') {
      if (*p == '\\' || static_cast<unsigned char>(*p) < 0x20U) {
        return false;
      }
      ++p;
    }
    if (p == begin) {
      return false;  // spec.empty-axis
    }
    if (out != nullptr) {
      out->assign(begin, p);
    }
    ++p;
    return true;
  };
  // "[" item ("," item)* "]" or "[]", each item read by `item`.
  auto list = [&](const auto& item) {
    if (*p != '[') {
      return false;
    }
    ++p;
    skip_space();
    if (*p == ']') {
      ++p;
      return true;
    }
    for (;;) {
      if (!item()) {
        return false;
      }
      skip_space();
      if (*p == ']') {
        ++p;
        return true;
      }
      if (*p != ',') {
        return false;
      }
      ++p;
      skip_space();
    }
  };
  if (spec != nullptr) {
    spec->dims.clear();
  }
  const bool plain = list([&] {
    DimSharding* dim = nullptr;
    if (spec != nullptr) {
      dim = &spec->dims.emplace_back();
    }
    auto axis = [&] {
      return name(dim != nullptr ? &dim->axes.emplace_back() : nullptr);
    };
    if (*p == 'n') {
      if (std::memcmp(p, "null", 4) != 0) {
        return false;
      }
      p += 4;
      return true;
    }
    if (*p == '[') {
      return list([&] { return axis(); });
    }
    return axis();
  });
  end = p;
  return plain;
}

// The entries of a specs file by name, to find a name given twice, in the
// way of Manifest's index: open addressing (linear probing) over 2^k slots,
// at most 3/4 full, with a tag byte per slot (0 when empty, else 0x80 | 7
// bits of the name's hash) and beside it the entry's number, read only on
// a matching tag; each entry's hash is kept in entry order, so growing
// reads no name. The tags of 100k names (128 KiB) stay in cache: a table
// of 16-byte slots, read at random, cost 14 ms of cache misses per 92k
// names, and std::unordered_map more (it hashed every name on a bucket's
// chain at each lookup).
class NameIndex {
 public:
  // The entry named `name` when there is one (names(i) is entry i's name);
  // else the next entry is recorded under `name` and nullopt returned.
  // REQUIRES: fewer than 2^32 entries.
  template <typename NameOf>
  std::optional<size_t> find_or_add(std::string_view name,
                                    const NameOf& names) {
    if ((m_hashes.size() + 1) * 4 > m_tags.size() * 3) {
      grow();
    }
    const size_t hash = detail::hash_bytes(name);
    const uint8_t tag = tag_of(hash);
    const size_t mask = m_tags.size() - 1;
    for (size_t i = slot_of(hash, mask);; i = (i + 1) & mask) {
      if (m_tags[i] == 0) {
        m_tags[i] = tag;
        m_entries[i] = static_cast<uint32_t>(m_hashes.size());
        m_hashes.push_back(hash);
        return std::nullopt;
      }
      if (m_tags[i] == tag && names(m_entries[i]) == name) {
        return m_entries[i];
      }
    }
  }

 private:
  static uint8_t tag_of(size_t hash) {
    return static_cast<uint8_t>(0x80U | (hash & 0x7FU));
  }
  static size_t slot_of(size_t hash, size_t mask) {
    return (hash >> 7U) & mask;
  }

  void grow() {
    const size_t slots = std::max<size_t>(64, m_tags.size() * 2);
    m_tags.assign(slots, 0);
    m_entries.resize(slots);
    const size_t mask = slots - 1;
    for (size_t entry = 0; entry < m_hashes.size(); ++entry) {
      size_t i = slot_of(m_hashes[entry], mask);
      while (m_tags[i] != 0) {
        i = (i + 1) & mask;
      }
      m_tags[i] = tag_of(m_hashes[entry]);
      m_entries[i] = static_cast<uint32_t>(entry);
    }
  }

  std::vector<uint8_t> m_tags;
  std::vector<uint32_t> m_entries;  // by slot
  std::vector<size_t> m_hashes;     // by entry
};

// Hash of a spec's value, for finding a spec read before.
struct SpecHash {
  size_t operator()(const PartitionSpec& spec) const noexcept {
    size_t h = spec.dims.size();
    for (const DimSharding& dim : spec.dims) {
      h = h * 1099511628211ULL ^ dim.axes.size();
      for (const std::string& axis : dim.axes) {
        h = h * 1099511628211ULL ^ detail::hash_bytes(axis);
      }
    }
    return h;
  }
};

class SpecsReader : public JsonInput {
 public:
  SpecsReader(std::string_view text,
              std::string_view source,
              Diagnostics& diags,
              size_t padding)
      : JsonInput(text, source, diags, padding) {}

  std::optional<SpecsFile> run() {
    od::object top;
    if (!open(top)) {
      return std::nullopt;
    }
    m_cursor = m_padded.data();
    m_column = m_skip > 0 ? 2 : 1;  // the byte order mark is a character
    // {"specs": {...}} wins over the plan output's {"tensors": [...]}.
    od::value found;
    std::string_view form = "specs";
    auto e = top.find_field_unordered("specs").get(found);
    if (e == simdjson::NO_SUCH_FIELD) {
      bool at_start = false;
      if (auto r = top.reset().get(at_start)) {
        fail_json(r, "");
        return std::nullopt;
      }
      form = "tensors";
      e = top.find_field_unordered("tensors").get(found);
    }
    if (e && e != simdjson::NO_SUCH_FIELD) {
      fail_json(e, "");
      return std::nullopt;
    }
    const bool missing = e == simdjson::NO_SUCH_FIELD;
    bool at_start = false;
    if (auto r = top.reset().get(at_start)) {
      fail_json(r, "");
      return std::nullopt;
    }
    std::vector<std::string> keys;
    bool seen = false;
    const bool read = for_each_field(
        top, "", nullptr, [&](std::string_view key, od::value& value) {
          std::string pointer = json_pointer_child("", key);
          if (!missing && key == form) {
            if (seen) {
              return fail_duplicate(key, pointer, start_of(value));
            }
            seen = true;
            return form == "specs" ? read_specs_object(value)
                                   : read_tensors_array(value);
          }
          if (missing) {
            keys.emplace_back(key);
          }
          return skip_value(value, [&] { return pointer; });
        });
    if (!read || !finish()) {
      return std::nullopt;
    }
    if (missing) {
      std::string hint;
      for (const std::string& key : keys) {
        std::string best = suggest(key, {"specs", "tensors"});
        if (!best.empty()) {
          hint = fmt::format(
              "did you mean {} instead of {}?", quote(best), quote(key));
          break;
        }
      }
      fail(
          "json.missing-key",
          "expected a \"specs\" object or a \"tensors\" array at the top level",
          "",
          m_padded.data(),
          std::move(hint));
      return std::nullopt;
    }
    if (m_input_errors) {
      return std::nullopt;  // every bad spec reported
    }
    m_file.source = m_source;
    return std::move(m_file);
  }

 private:
  // {"NAME": SPEC, ...}
  bool read_specs_object(od::value& value) {
    return for_each_member(
        value,
        "/specs",
        "an object mapping tensor names to specs",
        [&](std::string_view key, od::value& v) {
          return add(key, v, json_pointer_child("/specs", key), start_of(v));
        });
  }

  // [{"name": ..., "spec": ..., other keys ignored}, ...]
  bool read_tensors_array(od::value& value) {
    return for_each_element(
        value,
        "/tensors",
        "an array of tensor objects",
        [&](size_t index, od::value& entry) {
          io_detail::set_index_pointer(m_entry_pointer, "/tensors/", index);
          return read_tensor_entry(entry, index, m_entry_pointer);
        });
  }

  bool read_tensor_entry(od::value& value,
                         size_t index,
                         const std::string& pointer) {
    const char* at = start_of(value);
    if (PlainEntry plain; read_plain_entry(at, plain)) {
      // The value is left unread: the parser steps over it.
      return record(
          plain.name,
          plain_spec(plain.spec_at),
          pointer + "/spec",
          true,
          plain.spec_at,
          [&] { return pointer + "/name"; },
          plain.name_at);
    }
    od::object object;
    if (!get_as(
            value,
            object,
            "a tensor object with \"name\" and \"spec\"",
            [&] { return pointer; },
            at)) {
      return false;
    }
    // The name's text, in the document or unescaped in the parser's buffer
    // (both last as long as the document).
    std::optional<std::string_view> name;
    SharedSpec spec;
    const size_t first = m_diags.items().size();
    std::string spec_pointer = pointer + "/spec";
    const char* name_at = nullptr;
    const char* spec_at = nullptr;
    bool spec_valid = true;
    const bool read = for_each_field(
        object, pointer, at, [&](std::string_view key, od::value& v) {
          const char* v_at = start_of(v);
          if ((key == "name" && name) || (key == "spec" && spec)) {
            return fail_duplicate(
                key, fmt::format("{}/{}", pointer, key), v_at);
          }
          if (key == "name") {
            std::string_view text;
            if (!get_as(
                    v,
                    text,
                    "a tensor name string",
                    [&] { return pointer + "/name"; },
                    v_at)) {
              return false;
            }
            name = text;
            name_at = v_at;
            return true;
          }
          if (key == "spec") {
            if (!read_spec(v, spec_pointer, spec) && !take_soft_failure()) {
              return false;
            }
            spec_valid = !m_spec_invalid;
            spec_at = v_at;
            return true;
          }
          return skip_value(v, [&] {
            return fmt::format("{}/{}", pointer, json_pointer_escape(key));
          });
        });
    if (name) {
      name_tensor(first, *name);  // also when "spec" came before "name"
    }
    if (!read) {
      return false;
    }
    if (!name || !spec) {
      std::string who = name ? fmt::format("tensor {}", quote(*name))
                             : fmt::format("tensor {}", index);
      return fail("json.missing-key",
                  fmt::format("{} has no \"{}\"", who, name ? "spec" : "name"),
                  pointer,
                  at);
    }
    if (name->empty()) {
      return fail("specs.name", "tensor name is empty", pointer + "/name", at);
    }
    return record(
        *name,
        std::move(spec),
        std::move(spec_pointer),
        spec_valid,
        spec_at,
        [&] { return pointer + "/name"; },
        name_at);
  }

  // A tensor entry of plan output, as nearly every one is written: an
  // object whose keys are strings without a backslash, with "name" a
  // non-empty such string and "spec" a plain spec (read_plain_spec), each
  // once, and other values plain JSON (plain_json_end).
  struct PlainEntry {
    std::string_view name;
    const char* name_at = nullptr;
    const char* spec_at = nullptr;
  };

  // Reads the entry whose text starts at `p` without the parser when it is
  // plain; false for anything else, which the caller reads the full way,
  // reporting what is wrong.
  bool read_plain_entry(const char* p, PlainEntry& out) const {
    const char* const end = m_padded.data() + m_padded.size();
    auto skip_space = [&] {
      while (is_space(*p)) {
        ++p;
      }
    };
    // A string without a backslash or a control character at `p`, stepped
    // over (a byte by byte scan: memchr costs more on short strings).
    auto plain = [&](std::string_view& text) {
      if (*p != '"') {
        return false;
      }
      const char* begin = ++p;
      while (*p != '"') {
        if (*p == '\\' || static_cast<unsigned char>(*p) < 0x20U) {
          return false;  // also the NUL after the text
        }
        ++p;
      }
      text = std::string_view(begin, static_cast<size_t>(p - begin));
      ++p;
      return true;
    };
    if (*p != '{') {
      return false;
    }
    ++p;
    skip_space();
    for (;;) {
      std::string_view key;
      if (!plain(key)) {
        return false;
      }
      skip_space();
      if (*p != ':') {
        return false;
      }
      ++p;
      skip_space();
      if (key == "name") {
        const char* name_at = p;
        if (out.name_at != nullptr || !plain(out.name) || out.name.empty()) {
          return false;
        }
        out.name_at = name_at;
      } else if (key == "spec") {
        const char* spec_at = p;
        if (out.spec_at != nullptr || !read_plain_spec(p, p, nullptr)) {
          return false;
        }
        out.spec_at = spec_at;
      } else {
        p = io_detail::plain_json_end(p, end);
        if (p == nullptr) {
          return false;
        }
      }
      skip_space();
      if (*p == '}') {
        return out.name_at != nullptr && out.spec_at != nullptr;
      }
      if (*p != ',') {
        return false;
      }
      ++p;
      skip_space();
    }
  }

  bool add(std::string_view name,
           od::value& value,
           std::string pointer,
           const char* at) {
    if (name.empty()) {
      return fail("specs.name", "tensor name is empty", pointer, at);
    }
    SharedSpec spec;
    const size_t first = m_diags.items().size();
    const bool read = read_spec(value, pointer, spec);
    name_tensor(first, name);
    if (!read && !take_soft_failure()) {
      return false;
    }
    const bool valid = !m_spec_invalid;
    return record(
        name,
        std::move(spec),
        std::move(pointer),
        valid,
        at,
        [&] { return pointer; },
        at);
  }

  // Names `tensor` in the diagnostics reported since there were `first`.
  void name_tensor(size_t first, std::string_view tensor) {
    for (Diagnostic& d : m_diags.since(first)) {
      if (!d.tensor) {
        d.tensor = std::string(tensor);
      }
    }
  }

  // After read_spec failed: true when the failure was inside the spec only
  // (reported; the entry is kept as invalid and reading goes on). Sets
  // m_spec_invalid for the entry being read.
  bool take_soft_failure() {
    m_spec_invalid = m_soft_failure;
    m_soft_failure = false;
    return m_spec_invalid;
  }

  // A fault inside one spec: reported, the entry kept as invalid, and
  // reading goes on, so that every bad spec of the file is reported in one
  // run. A fault JAX reports for a well-formed spec (a nested tuple) is an
  // error of that spec (check goes on to validate the rest); any other is
  // an input error of the file (`input_error`: read_specs then returns
  // nullopt, after reading it all). Returns false, for `return
  // soft_fail(...)`.
  bool soft_fail(std::string code_text,
                 std::string message,
                 std::string pointer,
                 const char* at,
                 bool input_error = true) {
    fail(std::move(code_text), std::move(message), std::move(pointer), at);
    return soft_failed(input_error);
  }
  // soft_fail with json.type: "expected <expected>, got ...".
  bool soft_fail_type(od::value& value,
                      std::string_view expected,
                      std::string pointer,
                      const char* at) {
    fail_type(value, expected, std::move(pointer), at);
    return soft_failed(true);
  }
  bool soft_failed(bool input_error) {
    m_soft_failure = !m_syntax_found;
    m_input_errors = m_input_errors || (m_soft_failure && input_error);
    return false;
  }

  // Line and column of `at`, moving a cursor forward through the text: specs
  // come in file order, so locating all of them reads the text once. Lines
  // end at "\n"; a column counts code points.
  std::pair<int64_t, int64_t> advance_to(const char* at) {
    const char* end = m_padded.data() + m_padded.size();
    if (at == nullptr || at < m_cursor || at > end) {
      return {0, 0};
    }
    const auto span = static_cast<size_t>(at - m_cursor);
    // The last line break before `at` (memrchr scans back from it, over one
    // line), then the breaks before that, counted in one vectorised pass.
    if (const auto* last =
            static_cast<const char*>(::memrchr(m_cursor, '\n', span))) {
      m_line += std::count(m_cursor, last, '\n') + 1;
      m_column = 1;
      m_cursor = last + 1;
    }
    // The code points from the line's start (or the last spec) to `at`.
    m_column += std::count_if(m_cursor, at, [](char c) {
      return (static_cast<unsigned char>(c) & 0xC0U) != 0x80U;
    });
    m_cursor = at;
    return {m_line, m_column};
  }

  // Appends a spec found at `spec_at` under a copy of `name`; a repeated
  // name is reported at where() (the name's pointer) and `at`.
  template <typename WhereFn>
  bool record(std::string_view name,
              SharedSpec spec,
              std::string&& pointer,
              bool valid,
              const char* spec_at,
              const WhereFn& where,
              const char* at) {
    const std::optional<size_t> first =
        m_index.find_or_add(name, [&](size_t entry) -> std::string_view {
          return m_file.specs[entry].name;
        });
    if (first) {
      return fail("specs.duplicate-name",
                  fmt::format("duplicate tensor name {} (first at {})",
                              quote(name),
                              m_file.specs[*first].pointer),
                  where(),
                  at);
    }
    auto [line, column] = advance_to(spec_at);
    m_file.specs.push_back(NamedSpec{std::string(name),
                                     std::move(spec),
                                     std::move(pointer),
                                     line,
                                     column,
                                     valid});
    m_spec_invalid = false;
    return true;
  }

  // SPEC into `out`. A valid spec is the object of the first entry with an
  // equal spec: a file of a hundred thousand tensors has a handful of
  // specs, each written the same way each time, so each distinct text of a
  // spec is read once (a plain one without the parser, which steps over the
  // value left unread). An invalid spec (reported, as by read_spec_value)
  // has an object of its own.
  bool read_spec(od::value& value,
                 const std::string& pointer,
                 SharedSpec& out) {
    out = plain_spec(start_of(value));
    if (out) {
      return true;
    }
    PartitionSpec spec;
    std::string_view text;
    if (!read_spec_value(value, pointer, spec, text)) {
      out = std::make_shared<const PartitionSpec>(std::move(spec));
      return false;
    }
    if (auto hit = m_by_string.find(text);
        !text.empty() && hit != m_by_string.end()) {
      out = hit->second;
      return true;
    }
    out = intern(std::move(spec));
    if (!text.empty()) {
      m_by_string.emplace(text, out);
    }
    return true;
  }

  // The spec whose text starts at `at` when it is plain (read_plain_spec),
  // else null: the object of the first spec of the same text or value.
  SharedSpec plain_spec(const char* at) {
    const char* end = nullptr;
    if (!read_plain_spec(at, end, nullptr)) {
      return nullptr;
    }
    const std::string_view text(at, static_cast<size_t>(end - at));
    if (auto hit = m_by_text.find(text); hit != m_by_text.end()) {
      return hit->second;
    }
    PartitionSpec spec;
    read_plain_spec(at, end, &spec);
    SharedSpec shared = intern(std::move(spec));
    m_by_text.emplace(text, shared);
    return shared;
  }

  // The object of the first valid spec equal to `spec`.
  SharedSpec intern(PartitionSpec&& spec) {
    if (auto hit = m_by_value.find(spec); hit != m_by_value.end()) {
      return hit->second;
    }
    auto shared = std::make_shared<const PartitionSpec>(spec);
    m_by_value.emplace(std::move(spec), shared);
    return shared;
  }

  // SPEC: [null | "axis" | ["a", "b"], ...] or a string parse_spec accepts.
  // A string's text (valid as long as the document) is set in `text`; when
  // read_spec has read that text before, the string is not parsed again
  // and `spec` is left empty.
  bool read_spec_value(od::value& value,
                       const std::string& pointer,
                       PartitionSpec& spec,
                       std::string_view& text) {
    const char* at = start_of(value);
    od::json_type type{};
    if (auto e = value.type().get(type)) {
      return fail_json(e, pointer, at);
    }
    if (type == od::json_type::string) {
      if (auto e = value.get_string().get(text)) {
        return fail_json(e, pointer, at);
      }
      if (m_by_string.contains(text)) {
        return true;
      }
      Diagnostics scratch;
      const std::string text_source = fmt::format("{}:{}", m_source, pointer);
      std::optional<PartitionSpec> parsed =
          parse_spec(text, text_source, scratch);
      if (!parsed || scratch.has_errors()) {
        forward_in_string(scratch, text_source, text, at, pointer);
        return soft_failed(!std::all_of(
            scratch.items().begin(),
            scratch.items().end(),
            [](const Diagnostic& d) { return d.code == "spec.nested-tuple"; }));
      }
      spec = std::move(*parsed);
      return true;
    }
    if (type != od::json_type::array) {
      return soft_fail_type(
          value, "a partition spec (an array or a string)", pointer, at);
    }
    od::array array;
    if (auto e = value.get_array().get(array)) {
      return fail_json(e, pointer, at);
    }
    size_t index = 0;
    for (auto result : array) {
      auto entry_ptr = [&] { return fmt::format("{}/{}", pointer, index); };
      od::value entry;
      if (auto e = result.get(entry)) {
        return fail_json(e, entry_ptr(), at);
      }
      DimSharding dim;
      if (!read_dim(entry, entry_ptr, dim)) {
        return false;
      }
      spec.dims.push_back(std::move(dim));
      ++index;
    }
    return true;
  }

  template <typename PointerFn>
  bool read_axis_name(od::value& value,
                      const PointerFn& pointer,
                      std::string& out) {
    std::string_view text;
    if (auto e = value.get_string().get(text)) {
      return fail_json(e, pointer(), start_of(value));
    }
    if (text.empty()) {
      return soft_fail(
          "spec.empty-axis", "axis name is empty", pointer(), start_of(value));
    }
    out.assign(text);
    return true;
  }

  // null | "axis" | ["a", "b"] ([] is null and ["a"] is "a", as in jaxlib).
  // Problems inside a spec share parse_spec's codes (spec.*), whichever form
  // the spec was written in.
  template <typename PointerFn>
  bool read_dim(od::value& value, const PointerFn& pointer, DimSharding& dim) {
    const char* at = start_of(value);
    od::json_type type{};
    if (auto e = value.type().get(type)) {
      return fail_json(e, pointer(), at);
    }
    if (type == od::json_type::null) {
      return skip_value(value, pointer);
    }
    if (type == od::json_type::string) {
      dim.axes.emplace_back();
      return read_axis_name(value, pointer, dim.axes.back());
    }
    if (type != od::json_type::array) {
      return soft_fail_type(
          value, "null, an axis name or an array of axis names", pointer(), at);
    }
    od::array array;
    if (auto e = value.get_array().get(array)) {
      return fail_json(e, pointer(), at);
    }
    size_t index = 0;
    auto inner_pointer = [&] { return fmt::format("{}/{}", pointer(), index); };
    for (auto result : array) {
      od::value entry;
      if (auto e = result.get(entry)) {
        return fail_json(e, inner_pointer(), at);
      }
      const char* entry_at = start_of(entry);
      if (auto e = entry.type().get(type)) {
        return fail_json(e, inner_pointer(), entry_at);
      }
      if (type == od::json_type::null) {
        return soft_fail("spec.none-in-tuple",
                         "null cannot be one of the axes of a tuple; a tuple "
                         "lists mesh axes; write null for the whole dim",
                         inner_pointer(),
                         entry_at);
      }
      if (type == od::json_type::array) {
        return soft_fail("spec.nested-tuple",
                         "a tuple inside a PartitionSpec cannot contain a "
                         "nested tuple",
                         inner_pointer(),
                         entry_at,
                         false);
      }
      if (type != od::json_type::string) {
        return soft_fail_type(
            entry, "an axis name inside a tuple", inner_pointer(), entry_at);
      }
      dim.axes.emplace_back();
      if (!read_axis_name(entry, inner_pointer, dim.axes.back())) {
        return false;
      }
      ++index;
    }
    return true;
  }

  SpecsFile m_file;
  NameIndex m_index;  // the entries of m_file by name
  // Each valid spec read: by the text of a plain spec in the document (the
  // parser steps over it), by the string of a spec in text form (in the
  // document, or unescaped in the parser's buffer), and by its value.
  std::unordered_map<std::string_view, SharedSpec, detail::StringHash>
      m_by_text;
  std::unordered_map<std::string_view, SharedSpec, detail::StringHash>
      m_by_string;
  std::unordered_map<PartitionSpec, SharedSpec, SpecHash> m_by_value;
  std::string m_entry_pointer;     // "/tensors/N" of the entry being read
  bool m_soft_failure = false;     // the last failure was inside a spec only
  bool m_input_errors = false;     // a spec had a fault that is bad input
  bool m_spec_invalid = false;     // the entry being read has a bad spec
  const char* m_cursor = nullptr;  // advance_to's position, line and column
  int64_t m_line = 1;
  int64_t m_column = 1;
};

}  // namespace

namespace {

std::optional<SpecsFile> read_specs_in(std::string_view json,
                                       std::string_view source,
                                       Diagnostics& diags,
                                       size_t padding) {
  try {
    SpecsReader reader(json, source, diags, padding);
    return reader.run();
  } catch (const std::exception& e) {
    report_exception(e, json.size(), source, diags);
    return std::nullopt;
  }
}

}  // namespace

std::optional<SpecsFile> read_specs(std::string_view json,
                                    std::string_view source,
                                    Diagnostics& diags) {
  return read_specs_in(json, source, diags, 0);
}

std::optional<SpecsFile> read_specs_path(const std::string& path,
                                         Diagnostics& diags) {
  std::optional<io_detail::PaddedText> text =
      io_detail::PaddedText::load(path, input_limit(InputKind::specs), diags);
  if (!text) {
    return std::nullopt;
  }
  return read_specs_in(text->text(), path, diags, text->padding());
}

}  // namespace shardplan
