// The specs-file reader (DESIGN.md 2.4, docs/partition-specs.md):
// {"specs": {NAME: SPEC}} or the JSON `plan` writes ({"tensors": [...]}).

#include "io/json.hpp"

#include <shardplan/io.hpp>
#include <shardplan/spec.hpp>

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
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

class SpecsReader : public JsonInput {
 public:
  SpecsReader(std::string_view text,
              std::string_view source,
              Diagnostics& diags)
      : JsonInput(text, source, diags) {}

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
          std::string pointer = "/specs/" + json_pointer_escape(key);
          return add(std::string(key), v, std::move(pointer), start_of(v));
        });
  }

  // [{"name": ..., "spec": ..., other keys ignored}, ...]
  bool read_tensors_array(od::value& value) {
    return for_each_element(
        value,
        "/tensors",
        "an array of tensor objects",
        [&](size_t index, od::value& entry) {
          return read_tensor_entry(
              entry, index, fmt::format("/tensors/{}", index));
        });
  }

  bool read_tensor_entry(od::value& value,
                         size_t index,
                         const std::string& pointer) {
    const char* at = start_of(value);
    od::object object;
    if (!get_as(
            value,
            object,
            "a tensor object with \"name\" and \"spec\"",
            [&] { return pointer; },
            at)) {
      return false;
    }
    std::optional<std::string> name;
    std::optional<PartitionSpec> spec;
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
            name = std::string(text);
            name_at = v_at;
            return true;
          }
          if (key == "spec") {
            PartitionSpec parsed;
            if (!read_spec(v, spec_pointer, parsed) && !take_soft_failure()) {
              return false;
            }
            spec = std::move(parsed);
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
    return record(std::move(*name),
                  std::move(*spec),
                  std::move(spec_pointer),
                  spec_valid,
                  spec_at,
                  pointer + "/name",
                  name_at);
  }

  bool add(std::string name,
           od::value& value,
           std::string pointer,
           const char* at) {
    if (name.empty()) {
      return fail("specs.name", "tensor name is empty", pointer, at);
    }
    PartitionSpec spec;
    const size_t first = m_diags.items().size();
    const bool read = read_spec(value, pointer, spec);
    name_tensor(first, name);
    if (!read && !take_soft_failure()) {
      return false;
    }
    const bool valid = !m_spec_invalid;
    std::string where = pointer;
    return record(std::move(name),
                  std::move(spec),
                  std::move(pointer),
                  valid,
                  at,
                  std::move(where),
                  at);
  }

  // Names `tensor` in the diagnostics reported since there were `first`.
  void name_tensor(size_t first, const std::string& tensor) {
    for (Diagnostic& d : m_diags.since(first)) {
      if (!d.tensor) {
        d.tensor = tensor;
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
  // come in file order, so locating all of them reads the text once.
  std::pair<int64_t, int64_t> advance_to(const char* at) {
    const char* end = m_padded.data() + m_padded.size();
    if (at == nullptr || at < m_cursor || at > end) {
      return {0, 0};
    }
    for (; m_cursor < at; ++m_cursor) {
      if (*m_cursor == '\n') {
        ++m_line;
        m_column = 1;
      } else if ((static_cast<unsigned char>(*m_cursor) & 0xC0U) != 0x80U) {
        ++m_column;
      }
    }
    return {m_line, m_column};
  }

  // Appends a spec found at `spec_at`; a repeated name is reported at `where`
  // (the name).
  bool record(std::string name,
              PartitionSpec spec,
              std::string pointer,
              bool valid,
              const char* spec_at,
              std::string where,
              const char* at) {
    auto [it, inserted] = m_index.try_emplace(name, m_file.specs.size());
    if (!inserted) {
      return fail("specs.duplicate-name",
                  fmt::format("duplicate tensor name {} (first at {})",
                              quote(name),
                              m_file.specs[it->second].pointer),
                  std::move(where),
                  at);
    }
    auto [line, column] = advance_to(spec_at);
    m_file.specs.push_back(NamedSpec{std::move(name),
                                     std::move(spec),
                                     std::move(pointer),
                                     line,
                                     column,
                                     valid});
    m_spec_invalid = false;
    return true;
  }

  // SPEC: [null | "axis" | ["a", "b"], ...] or a string parse_spec accepts.
  bool read_spec(od::value& value,
                 const std::string& pointer,
                 PartitionSpec& spec) {
    const char* at = start_of(value);
    od::json_type type{};
    if (auto e = value.type().get(type)) {
      return fail_json(e, pointer, at);
    }
    if (type == od::json_type::string) {
      std::string_view text;
      if (auto e = value.get_string().get(text)) {
        return fail_json(e, pointer, at);
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
  std::unordered_map<std::string, size_t, detail::StringHash, std::equal_to<>>
      m_index;
  bool m_soft_failure = false;     // the last failure was inside a spec only
  bool m_input_errors = false;     // a spec had a fault that is bad input
  bool m_spec_invalid = false;     // the entry being read has a bad spec
  const char* m_cursor = nullptr;  // advance_to's position, line and column
  int64_t m_line = 1;
  int64_t m_column = 1;
};

}  // namespace

std::optional<SpecsFile> read_specs(std::string_view json,
                                    std::string_view source,
                                    Diagnostics& diags) {
  try {
    SpecsReader reader(json, source, diags);
    return reader.run();
  } catch (const std::exception& e) {
    report_exception(e, json.size(), source, diags);
    return std::nullopt;
  }
}

}  // namespace shardplan
