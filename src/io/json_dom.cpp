// DomReader, the base of the readers of small files (src/io/json.hpp): the
// whole text in nlohmann's ordered DOM, every object checked for a key given
// twice, typed getters with located reports.

#include "io/json.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace shardplan::io_detail {

namespace {

// What the parser callback records: the first key given twice, with its
// JSON pointer.
class KeyTracker {
 public:
  bool on_event(Json::parse_event_t event, const Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        begin_element();
        m_stack.push_back(Frame{false, 0, {}, {}});
        break;
      case Json::parse_event_t::array_start:
        begin_element();
        m_stack.push_back(Frame{true, 0, {}, {}});
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        if (!m_stack.empty()) {
          m_stack.pop_back();
        }
        break;
      case Json::parse_event_t::key: {
        if (m_stack.empty() || !parsed.is_string()) {
          break;
        }
        Frame& f = m_stack.back();
        f.token = parsed.get<std::string>();
        if (!f.keys.insert(f.token).second && !m_duplicate) {
          m_duplicate = pointer();
          m_duplicate_key = f.token;
        }
        break;
      }
      case Json::parse_event_t::value:
        begin_element();
        break;
    }
    return true;
  }

  const std::optional<std::string>& duplicate() const { return m_duplicate; }
  const std::string& duplicate_key() const { return m_duplicate_key; }

 private:
  struct Frame {
    bool array = false;
    size_t next = 0;
    std::string token;  // the current key, or the current index as text
    std::unordered_set<std::string> keys;
  };

  void begin_element() {
    if (!m_stack.empty() && m_stack.back().array) {
      Frame& f = m_stack.back();
      f.token = std::to_string(f.next++);
    }
  }

  std::string pointer() const {
    std::string out;
    for (const Frame& f : m_stack) {
      out = json_pointer_child(out, f.token);
    }
    return out;
  }

  std::vector<Frame> m_stack;
  std::optional<std::string> m_duplicate;
  std::string m_duplicate_key;
};

}  // namespace

std::optional<Json> DomReader::parse() {
  if (report_if_blank(m_text, bom_size(m_text), m_source, m_diags)) {
    return std::nullopt;
  }
  // Syntax first, worded as every reader words it; the DOM parser then
  // builds what is known to be valid.
  if (std::optional<SyntaxError> error = find_syntax_error(m_text)) {
    io_detail::report_syntax_error(*error, m_text, 0, m_source, m_diags);
    return std::nullopt;
  }
  Json doc;
  KeyTracker keys;
  try {
    doc = Json::parse(
        m_text.begin(),
        m_text.end(),
        [&keys](int /*depth*/, Json::parse_event_t event, Json& parsed) {
          return keys.on_event(event, parsed);
        });
  } catch (const std::exception& e) {
    report_exception(e, m_text.size(), m_source, m_diags);
    return std::nullopt;
  }
  if (keys.duplicate()) {
    fail(*keys.duplicate(),
         "json.duplicate-key",
         duplicate_key_message(keys.duplicate_key()));
    return std::nullopt;
  }
  if (!doc.is_object()) {
    fail_at_start("json.type", expected_got(k_top_level_object, describe(doc)));
    return std::nullopt;
  }
  return doc;
}

std::string DomReader::describe(const Json& j) {
  switch (j.type()) {
    case Json::value_t::object:
      return describe_json(JsonKind::object, {});
    case Json::value_t::array:
      return describe_json(JsonKind::array, {});
    case Json::value_t::null:
      return describe_json(JsonKind::null, {});
    case Json::value_t::boolean:
      return describe_json(JsonKind::boolean, j.get<bool>() ? "true" : "false");
    case Json::value_t::string:
      return describe_json(
          JsonKind::string,
          j.dump(-1, ' ', false, Json::error_handler_t::replace));
    default:
      return describe_json(JsonKind::number, j.dump());
  }
}

bool DomReader::fail(std::string_view pointer,
                     std::string code,
                     std::string message,
                     std::string hint) {
  if (pointer.empty()) {
    return fail_at_start(std::move(code), std::move(message), std::move(hint));
  }
  Diagnostic& d = m_diags.error(std::move(code),
                                std::move(message),
                                Location::at(m_source, std::string(pointer)));
  d.hint = std::move(hint);
  return false;
}

void DomReader::warn(std::string_view pointer,
                     std::string code,
                     std::string message,
                     std::string hint) {
  Diagnostic& d = m_diags.warning(std::move(code),
                                  std::move(message),
                                  Location::at(m_source, std::string(pointer)));
  d.hint = std::move(hint);
}

bool DomReader::fail_at_start(std::string code,
                              std::string message,
                              std::string hint) {
  size_t offset = bom_size(m_text);
  while (offset < m_text.size() && is_space(m_text[offset])) {
    ++offset;
  }
  Diagnostic& d = m_diags.error(std::move(code),
                                std::move(message),
                                location_in_text(m_source, m_text, offset));
  d.hint = std::move(hint);
  return false;
}

bool DomReader::bad_value(std::string_view pointer,
                          std::string message,
                          std::string hint) {
  return fail(
      pointer, m_kind + ".bad-value", std::move(message), std::move(hint));
}

bool DomReader::type_error(const Json& j,
                           std::string_view pointer,
                           std::string_view expected,
                           std::string hint) {
  return fail(pointer,
              "json.type",
              expected_got(expected, describe(j)),
              std::move(hint));
}

bool DomReader::unknown_key(std::string_view key,
                            std::string_view pointer,
                            const std::vector<std::string>& known,
                            std::string otherwise) {
  return fail(pointer,
              "json.unknown-key",
              unknown_key_message(key),
              unknown_key_hint(key, known, std::move(otherwise)));
}

bool DomReader::missing_key(std::string_view pointer,
                            std::string message,
                            std::string hint) {
  return fail(pointer, "json.missing-key", std::move(message), std::move(hint));
}

std::optional<int64_t> DomReader::get_int(const Json& j,
                                          std::string_view pointer,
                                          int64_t min) {
  const std::string expected = fmt::format("an integer >= {}", min);
  int64_t value = 0;
  if (j.is_number_unsigned()) {
    const auto v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      bad_value(pointer,
                fmt::format("{} does not fit in int64 (max {})",
                            v,
                            std::numeric_limits<int64_t>::max()));
      return std::nullopt;
    }
    value = static_cast<int64_t>(v);
  } else if (j.is_number_integer()) {
    value = j.get<int64_t>();
  } else if (j.is_number_float()) {
    bad_value(pointer, expected_got(expected, describe(j)));
    return std::nullopt;
  } else {
    type_error(j, pointer, expected);
    return std::nullopt;
  }
  if (value < min) {
    bad_value(pointer, expected_got(expected, describe(j)));
    return std::nullopt;
  }
  return value;
}

std::optional<double> DomReader::get_number(const Json& j,
                                            std::string_view pointer,
                                            double min) {
  const std::string expected = fmt::format("a number >= {}", min);
  if (!j.is_number()) {
    type_error(j, pointer, expected);
    return std::nullopt;
  }
  const auto value = j.get<double>();
  if (!(value >= min) || !std::isfinite(value)) {
    bad_value(pointer, expected_got(expected, describe(j)));
    return std::nullopt;
  }
  return value;
}

std::optional<bool> DomReader::get_bool(const Json& j,
                                        std::string_view pointer) {
  if (!j.is_boolean()) {
    type_error(j, pointer, "true or false");
    return std::nullopt;
  }
  return j.get<bool>();
}

const std::string* DomReader::get_string(const Json& j,
                                         std::string_view pointer,
                                         std::string_view expected) {
  if (!j.is_string()) {
    type_error(j, pointer, expected);
    return nullptr;
  }
  return &j.get_ref<const std::string&>();
}

}  // namespace shardplan::io_detail
