// JsonInput, the base of the simdjson readers (src/io/json.hpp): the padded
// text, the parser, locations, and reports with syntax errors first.

#include "io/json.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardplan::io_detail {

namespace {

std::string simdjson_words(simdjson::error_code error) {
  std::string text = simdjson::error_message(error);
  if (!text.empty() && text.back() == '.') {
    text.pop_back();
  }
  // "The JSON element ..." -> "the JSON element ..."; "JSON document ..."
  // keeps its acronym.
  if (text.size() > 1 && text[0] >= 'A' && text[0] <= 'Z'
      && !(text[1] >= 'A' && text[1] <= 'Z')) {
    text[0] = static_cast<char>(text[0] - 'A' + 'a');
  }
  return text;
}

// The byte offset in `text` of `line` and `column` (1-based, the column in
// code points), as location_in_text() counts them; text.size() past its end.
size_t offset_of(std::string_view text, int64_t line, int64_t column) {
  size_t i = 0;
  for (int64_t l = 1; l < line && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++l;
    }
  }
  for (int64_t c = 1; c < column && i < text.size(); ++c) {
    ++i;
    while (i < text.size()
           && (static_cast<unsigned char>(text[i]) & 0xC0U) == 0x80U) {
      ++i;
    }
  }
  return i;
}

// The value of the 4 hex digits at `p`; 0 for anything else.
uint32_t hex4(const char* p, const char* end) {
  uint32_t value = 0;
  if (end - p < 4) {
    return 0;
  }
  auto [next, ec] = std::from_chars(p, p + 4, value, 16);
  return ec == std::errc() && next == p + 4 ? value : 0;
}

// Where in a JSON string's token, which starts at `quote`, byte `offset`
// of its value is written: a plain byte is itself, an escape ("\n",
// "\u00e9", a surrogate pair) the bytes of what it stands for. Stops at
// the closing quote or `end`.
const char* token_position(const char* quote, const char* end, size_t offset) {
  const char* p = quote + 1;
  size_t value = 0;
  while (value < offset && p < end && *p != '"') {
    if (*p != '\\' || end - p < 2) {
      ++p;
      ++value;
      continue;
    }
    if (p[1] != 'u') {
      p += 2;
      ++value;
      continue;
    }
    uint32_t code = hex4(p + 2, end);
    size_t length = 6;
    if (code >= 0xD800 && code < 0xDC00 && end - p >= 12 && p[6] == '\\'
        && p[7] == 'u') {
      code = 0x10000;  // a pair: four bytes of UTF-8
      length = 12;
    }
    value += code < 0x80 ? 1 : code < 0x800 ? 2 : code < 0x10000 ? 3 : 4;
    p += length;
  }
  return p;
}

}  // namespace

JsonKind JsonInput::kind_of(od::json_type type) {
  switch (type) {
    case od::json_type::array:
      return JsonKind::array;
    case od::json_type::object:
      return JsonKind::object;
    case od::json_type::number:
      return JsonKind::number;
    case od::json_type::string:
      return JsonKind::string;
    case od::json_type::boolean:
      return JsonKind::boolean;
    case od::json_type::null:
      return JsonKind::null;
  }
  return JsonKind::null;
}

bool JsonInput::open(od::object& top) {
  m_skip = bom_size(m_text);
  if (report_if_blank(m_text, m_skip, m_source, m_diags)) {
    return false;
  }
  std::string_view body = m_text.substr(m_skip);
  const size_t first = body.find_first_not_of(" \t\r\n");
  if (m_padding >= simdjson::SIMDJSON_PADDING) {
    m_padded = simdjson::padded_string_view(
        body.data(), body.size(), body.size() + m_padding);
  } else {
    m_copy = simdjson::padded_string(body.data(), body.size());
    if (m_copy.size() != body.size()) {
      m_diags.error("json.memory",
                    fmt::format("out of memory reading {} bytes", body.size()),
                    location(""));
      return false;
    }
    m_padded = m_copy;
  }
  const char* start = m_padded.data() + first;
  if (auto e = m_parser.iterate(m_padded).get(m_doc)) {
    return fail_json(e, "", start);
  }
  od::json_type type{};
  if (auto e = m_doc.type().get(type)) {
    return fail_json(e, "", start);
  }
  if (type != od::json_type::object) {
    return fail_type(m_doc, k_top_level_object, "", start);
  }
  if (auto e = m_doc.get_object().get(top)) {
    return fail_json(e, "", start);
  }
  return true;
}

bool JsonInput::finish() {
  const char* at = nullptr;
  auto e = m_doc.current_location().get(at);
  if (e == simdjson::OUT_OF_BOUNDS) {
    return true;
  }
  return fail_json(simdjson::TRAILING_CONTENT, "", e ? nullptr : at);
}

Location JsonInput::location(std::string pointer, const char* at) const {
  Location loc;
  if (at != nullptr && at >= m_padded.data()
      && at <= m_padded.data() + m_padded.size()) {
    size_t offset = static_cast<size_t>(at - m_padded.data()) + m_skip;
    loc = location_in_text(m_source, m_text, offset);
  } else {
    loc.source = m_source;
  }
  loc.pointer = std::move(pointer);
  return loc;
}

bool JsonInput::report_syntax_error() {
  if (!m_syntax_checked) {
    m_syntax_checked = true;
    if (auto error = find_syntax_error(m_text.substr(m_skip))) {
      m_syntax_found = true;
      io_detail::report_syntax_error(*error, m_text, m_skip, m_source, m_diags);
    }
  }
  return m_syntax_found;
}

bool JsonInput::fail(std::string code,
                     std::string message,
                     std::string pointer,
                     const char* at,
                     std::string hint) {
  if (m_defer) {
    m_pending = Pending{Pending::Kind::value,
                        simdjson::SUCCESS,
                        std::move(code),
                        std::move(message),
                        std::move(pointer),
                        std::move(hint),
                        at};
    return false;
  }
  if (report_syntax_error()) {
    return false;
  }
  Diagnostic& d = m_diags.error(
      std::move(code), std::move(message), location(std::move(pointer), at));
  d.hint = std::move(hint);
  return false;
}

simdjson::error_code JsonInput::key_text(od::field& field,
                                         std::string_view& key) {
  if (plain_string(field.key().raw(), key)) {
    return simdjson::SUCCESS;
  }
  return field.unescaped_key().get(key);
}

bool JsonInput::plain_string(const char* begin, std::string_view& out) const {
  const char* end = m_padded.data() + m_padded.size();
  if (begin < m_padded.data() || begin >= end) {
    return false;
  }
  std::string_view rest(begin, static_cast<size_t>(end - begin));
  std::string_view text = rest.substr(0, rest.find('"'));
  if (text.size() == rest.size() || text.find('\\') != std::string_view::npos) {
    return false;
  }
  out = text;
  return true;
}

bool JsonInput::fail_json(simdjson::error_code error,
                          std::string pointer,
                          const char* at) {
  if (m_defer) {
    m_pending =
        Pending{Pending::Kind::json, error, {}, {}, std::move(pointer), {}, at};
    return false;
  }
  if (error == simdjson::CAPACITY) {
    m_diags.error("json.too-large",
                  fmt::format("the file has {} bytes; JSON inputs are "
                              "limited to {} bytes",
                              m_text.size(),
                              simdjson::SIMDJSON_MAXSIZE_BYTES),
                  location(""));
    return false;
  }
  if (error == simdjson::MEMALLOC) {
    m_diags.error("json.memory",
                  fmt::format("out of memory parsing {} bytes", m_text.size()),
                  location(""));
    return false;
  }
  if (report_syntax_error()) {
    return false;
  }
  if (error == simdjson::DEPTH_ERROR) {
    m_diags.error(
        "json.depth",
        fmt::format("JSON nested deeper than {} levels", m_parser.max_depth()),
        location(std::move(pointer), at));
    return false;
  }
  m_diags.error("json.syntax",
                fmt::format("malformed JSON: {}", simdjson_words(error)),
                location(std::move(pointer), at));
  return false;
}

simdjson::error_code JsonInput::skip(od::value& value) {
  od::json_type type{};
  if (auto e = value.type().get(type)) {
    return e;
  }
  simdjson::error_code e = simdjson::SUCCESS;
  switch (type) {
    case od::json_type::array:
    case od::json_type::object: {
      // The container's raw text, skipped by simdjson, then checked whole.
      std::string_view raw;
      if (type == od::json_type::array) {
        od::array array;
        e = value.get_array().get(array);
        if (!e) {
          e = array.raw_json().get(raw);
        }
      } else {
        od::object object;
        e = value.get_object().get(object);
        if (!e) {
          e = object.raw_json().get(raw);
        }
      }
      if (!e && !is_plain_json(raw) && find_syntax_error(raw)) {
        e = simdjson::TAPE_ERROR;
      }
      break;
    }
    case od::json_type::string: {
      std::string_view s;
      e = value.get_string().get(s);
      break;
    }
    case od::json_type::number: {
      // simdjson refuses integers beyond 64 bits that JSON allows.
      std::string_view raw = value.raw_json_token();
      od::number n;
      if (value.get_number().get(n) && find_syntax_error(raw)) {
        e = simdjson::NUMBER_ERROR;
      }
      break;
    }
    case od::json_type::boolean: {
      bool b = false;
      e = value.get_bool().get(b);
      break;
    }
    case od::json_type::null: {
      bool is_null = false;
      e = value.is_null().get(is_null);
      if (!e && !is_null) {
        e = simdjson::N_ATOM_ERROR;
      }
      break;
    }
  }
  return e;
}

void JsonInput::forward(const Diagnostics& scratch) {
  if (report_syntax_error()) {
    return;
  }
  for (const Diagnostic& d : scratch.items()) {
    m_diags.add(d);
  }
}

void JsonInput::forward_in_string(const Diagnostics& scratch,
                                  std::string_view text_source,
                                  std::string_view text,
                                  const char* at,
                                  const std::string& pointer) {
  if (report_syntax_error()) {
    return;
  }
  const char* end = m_padded.data() + m_padded.size();
  for (Diagnostic d : scratch.items()) {
    if (d.location.source == text_source) {
      const char* where =
          d.location.line > 0 ? token_position(
              at, end, offset_of(text, d.location.line, d.location.column))
                              : at;
      d.location = location(pointer, where);
    }
    m_diags.add(std::move(d));
  }
}

void JsonInput::replay() {
  Pending pending = std::move(m_pending);
  m_pending = Pending{};
  switch (pending.kind) {
    case Pending::Kind::value:
      fail(std::move(pending.code),
           std::move(pending.message),
           std::move(pending.pointer),
           pending.at,
           std::move(pending.hint));
      break;
    case Pending::Kind::json:
      fail_json(pending.error, std::move(pending.pointer), pending.at);
      break;
    case Pending::Kind::lower:
      forward_lower(pending.at);
      break;
    case Pending::Kind::none:
      break;
  }
}

void JsonInput::forward_lower(const char* at) {
  if (report_syntax_error()) {
    return;
  }
  for (Diagnostic d : m_scratch.items()) {
    if (d.location.line == 0 && d.location.source == m_source) {
      Location located = location(std::move(d.location.pointer), at);
      d.location = std::move(located);
    }
    m_diags.add(std::move(d));
  }
}

// ---------------------------------------------------------------------------
// Fast paths of the readers that run once per tensor.

// out = prefix + index without fmt, reusing out's buffer.
void set_index_pointer(std::string& out,
                       std::string_view prefix,
                       size_t index) {
  constexpr size_t k_max_digits = 20;
  out.assign(prefix);
  out.resize(prefix.size() + k_max_digits);
  char* digits = out.data() + prefix.size();
  char* end = std::to_chars(digits, digits + k_max_digits, index).ptr;
  out.resize(static_cast<size_t>(end - out.data()));
}

// The decimal number at the end of `out`, after `prefix`, plus one, in place
// (an odometer: 199 -> 200, 99 -> 100). REQUIRES: out is prefix and digits.
void increment_index_pointer(std::string& out, size_t prefix) {
  size_t i = out.size();
  while (i > prefix && out[i - 1] == '9') {
    out[--i] = '0';
  }
  if (i == prefix) {
    out.insert(i, 1, '1');
  } else {
    ++out[i - 1];
  }
}

// Reads the array at `p` into `dims` when it is plain, as nearly every shape
// is: "[", JSON integers of at most 18 digits (no sign but "-", no leading
// zero, fraction or exponent) separated by ",", "]", JSON whitespace
// between. That is about 50 instructions for "[7168, 1536]", against ~250
// through the parser's generic array and number reading. Anything else
// returns false, and the caller reads the value the full way, which reports
// what is wrong. REQUIRES: p points into a padded buffer of JSON text.
bool read_plain_dims(const char* p, std::vector<int64_t>& dims) {
  constexpr int k_max_digits = 18;  // below 2^63
  dims.clear();
  if (*p != '[') {
    return false;
  }
  ++p;
  while (is_space(*p)) {
    ++p;
  }
  if (*p == ']') {
    return true;
  }
  for (;;) {
    const bool negative = *p == '-';
    if (negative) {
      ++p;
    }
    if (!is_digit(*p)) {
      return false;
    }
    uint64_t value = 0;
    if (*p == '0') {
      ++p;
    } else {
      for (int digits = 0; is_digit(*p); ++p) {
        if (++digits > k_max_digits) {
          return false;
        }
        value = value * 10 + static_cast<uint64_t>(*p - '0');
      }
    }
    const auto dim = static_cast<int64_t>(value);
    dims.push_back(negative ? -dim : dim);
    while (is_space(*p)) {
      ++p;
    }
    if (*p == ']') {
      return true;
    }
    if (*p != ',') {
      return false;
    }
    ++p;
    while (is_space(*p)) {
      ++p;
    }
  }
}

// out = json_pointer_child("", key), reusing out's buffer: this runs once per
// tensor of a safetensors header, whose keys rarely need escaping.
void set_key_pointer(std::string& out, std::string_view key) {
  // Two memchr scans: a byte-by-byte test of both characters took ~300
  // instructions on a 45-byte name.
  if (key.find('/') != std::string_view::npos
      || key.find('~') != std::string_view::npos) {
    out = json_pointer_child("", key);
    return;
  }
  out.assign(1, '/');
  out.append(key);
}

}  // namespace shardplan::io_detail
