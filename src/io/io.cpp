#include "io/internal.hpp"

#include <shardplan/io.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

// Readers of input files (DESIGN.md 2.3, 2.4; docs/manifest-format.md).
//
// Large inputs go through simdjson's On-Demand API: the text in a padded
// buffer (a manifest file is mapped, see io/mapped.cpp; other texts are
// copied once), then a single forward pass that reads each value straight
// into the Manifest. On-Demand checks what it reads, so a value the readers
// ignore is checked separately (nlohmann's SAX parser over its raw text).
//
// Errors. A JSON syntax error takes precedence over any value error: before a
// problem is reported, the text is run once through nlohmann's SAX parser
// (iterative, builds nothing, so a megabyte of '[' is harmless), and its
// first syntax error, if any, is reported instead with line, column and a
// caret. Value errors carry a JSON pointer, and also the line, column and
// excerpt of the value, so the caret shows it.

namespace shardplan {

namespace {

namespace od = simdjson::ondemand;
using io_detail::DataOffsets;
using io_detail::FileDescriptor;
using io_detail::open_retry;

using io_detail::errno_message;

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c)
         || c == '_' || c == '-' || c == '+' || c == '.';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) {
    s.remove_prefix(1);
  }
  while (!s.empty() && is_space(s.back())) {
    s.remove_suffix(1);
  }
  return s;
}

// At most `limit` bytes of `s`, cut on a UTF-8 code point boundary.
std::string_view clip(std::string_view s, size_t limit, bool& clipped) {
  clipped = s.size() > limit;
  if (!clipped) {
    return s;
  }
  size_t n = limit;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0U) == 0x80U) {
    --n;
  }
  return s.substr(0, n);
}

// ---------------------------------------------------------------------------
// JSON syntax errors, located by nlohmann's SAX parser.

using io_detail::SyntaxError;

// Builds nothing; records the first error.
class SyntaxChecker final : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return true; }
  bool boolean(bool /*value*/) override { return true; }
  bool number_integer(number_integer_t /*value*/) override { return true; }
  bool number_unsigned(number_unsigned_t /*value*/) override { return true; }
  bool number_float(number_float_t /*value*/,
                    const string_t& /*text*/) override {
    return true;
  }
  bool string(string_t& /*value*/) override { return true; }
  bool binary(binary_t& /*value*/) override { return true; }
  bool start_object(std::size_t /*size*/) override { return true; }
  bool key(string_t& /*value*/) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t /*size*/) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t byte,
                   const std::string& last_token,
                   const nlohmann::detail::exception& error) override {
    failed = true;
    position = byte;
    token = last_token;
    what = error.what();
    id = error.id;
    return false;
  }

  bool failed = false;
  size_t position = 0;  // 1-based index of the last byte read
  std::string token;
  std::string what;
  int id = 0;
};

// nlohmann's token names, as our messages say them.
std::string token_words(std::string_view token) {
  if (token == "number literal") {
    return "a number";
  }
  if (token == "string literal") {
    return "a string";
  }
  if (token == "true literal") {
    return "true";
  }
  if (token == "false literal") {
    return "false";
  }
  if (token == "null literal") {
    return "null";
  }
  if (token == "'[', '{', or a literal") {
    return "a JSON value";
  }
  return std::string(token);
}

// Hints for what people paste from Python or write by habit.
std::string literal_hint(std::string_view word) {
  if (word == "NaN" || word == "nan" || word == "Infinity" || word == "inf"
      || word == "-Infinity" || word == "-inf") {
    return "NaN and Infinity are not valid JSON numbers";
  }
  if (word == "True" || word == "False" || word == "None") {
    return "JSON spells these true, false and null";
  }
  return "";
}

SyntaxError describe_syntax_error(std::string_view text,
                                  const SyntaxChecker& sax) {
  SyntaxError out;
  const size_t last = sax.position == 0 ? 0 : sax.position - 1;
  out.offset = std::min(last, text.size());
  const size_t token_start =
      sax.position >= sax.token.size() ? sax.position - sax.token.size() : 0;
  bool clipped = false;

  if (sax.id == 406) {  // out_of_range.406: number overflow
    std::string_view number = clip(sax.token, 40, clipped);
    out.offset = std::min(token_start, text.size());
    out.message = fmt::format(
        "number {}{} is out of range", number, clipped ? "..." : "");
    return out;
  }

  std::string_view what = sax.what;
  constexpr std::string_view k_syntax = "syntax error while parsing ";
  size_t at = what.find(k_syntax);
  if (at == std::string_view::npos) {
    // "parse error at line 1, column 2: <detail>"
    size_t colon = what.find(": ");
    out.message = std::string(
        colon == std::string_view::npos ? what : what.substr(colon + 2));
    return out;
  }
  std::string_view rest = what.substr(at + k_syntax.size());
  size_t dash = rest.find(" - ");
  std::string_view context = rest.substr(0, dash);
  std::string detail(dash == std::string_view::npos ? rest
                                                    : rest.substr(dash + 3));
  // Drop "; last read: '<token>'": raw bytes, possibly a megabyte of them.
  std::string last_read = "; last read: '" + sax.token + "'";
  if (size_t p = detail.find(last_read); p != std::string::npos) {
    detail.erase(p, last_read.size());
  }
  const bool expects_end = detail.ends_with("; expected end of input");

  constexpr std::string_view k_unexpected = "unexpected ";
  constexpr std::string_view k_expected = "; expected ";
  if (detail.starts_with(k_unexpected)) {
    size_t semi = detail.find(k_expected);
    std::string_view d = detail;
    std::string_view got =
        d.substr(k_unexpected.size(),
                 semi == std::string::npos ? std::string_view::npos
                                           : semi - k_unexpected.size());
    std::string_view expected = semi == std::string::npos
                                    ? std::string_view()
                                    : d.substr(semi + k_expected.size());
    if (got.ends_with(" literal")) {
      out.offset = std::min(token_start, text.size());
    }
    if (got == "end of input") {
      out.offset = text.size();
    }
    std::string expected_words;
    if (expected == "end of input") {
      expected_words = "end of input after the top-level value";
    } else if (expected == "string literal" && context == "object key") {
      expected_words = "an object key (a string)";
    } else if (expected == "']'") {
      expected_words = "',' or ']'";
    } else if (expected == "'}'") {
      expected_words = "',' or '}'";
    } else {
      expected_words = token_words(expected);
    }
    out.message =
        expected.empty()
            ? fmt::format("unexpected {}", token_words(got))
            : fmt::format(
                "expected {}, got {}", expected_words, token_words(got));
    if (got == "'}'" || got == "']'") {
      size_t p = out.offset;
      while (p > 0 && is_space(text[p - 1])) {
        --p;
      }
      if (p > 0 && text[p - 1] == ',') {
        out.hint = "JSON does not allow a trailing comma";
      }
    }
    return out;
  }

  if (detail.starts_with("invalid literal")) {
    // The lexer stops at the first byte that cannot continue a literal; show
    // the whole word it was reading ("tru", "NaN", "None").
    size_t begin = out.offset;
    while (begin > 0 && begin <= text.size() && is_word_char(text[begin - 1])) {
      --begin;
    }
    size_t end = begin;
    while (end < text.size() && is_word_char(text[end])) {
      ++end;
    }
    std::string_view word = text.substr(begin, end - begin);
    std::string got;
    if (!word.empty()) {
      out.offset = begin;
      got = quote(clip(word, 40, clipped));
    } else if (out.offset < text.size()) {
      auto byte = static_cast<unsigned char>(text[out.offset]);
      if (byte >= 0x80) {
        got = fmt::format("byte 0x{:02x}", byte);
        out.hint = "outside strings, JSON text is ASCII";
      } else {
        got = quote(text.substr(out.offset, 1));
        if (byte == '\'') {
          out.hint = "JSON strings use double quotes";
        } else if (byte == '/' || byte == '#') {
          out.hint = "JSON does not allow comments";
        }
      }
    } else {
      got = "end of input";
    }
    if (out.hint.empty()) {
      out.hint = literal_hint(word);
    }
    out.message = expects_end
                      ? fmt::format(
                          "expected end of input after the top-level value, "
                          "got {}",
                          got)
                      : (word.empty() ? fmt::format("unexpected {}", got)
                                      : fmt::format("invalid literal {}", got));
    return out;
  }

  // "invalid string: ...", "invalid number; expected digit after '-'", ...:
  // nlohmann's words are already ours (lowercase, no period). What the
  // parser wanted next ("; expected string literal") adds nothing to a bad
  // string.
  if (detail.starts_with("invalid string")) {
    detail = detail.substr(0, detail.find("; expected "));
  }
  out.message = std::move(detail);
  // "-Infinity" fails as a number: still say why.
  size_t begin = out.offset;
  while (begin > 0 && begin <= text.size() && is_word_char(text[begin - 1])) {
    --begin;
  }
  size_t end = std::min(out.offset, text.size());
  while (end < text.size() && is_word_char(text[end])) {
    ++end;
  }
  out.hint = literal_hint(text.substr(begin, end - begin));
  return out;
}

}  // namespace

std::optional<SyntaxError> io_detail::find_syntax_error(std::string_view text) {
  SyntaxChecker sax;
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const std::exception& e) {
    return SyntaxError{
        0, fmt::format("cannot check the JSON: {}", e.what()), ""};
  }
  // nlohmann stops at a NUL byte as if the input ended there; JSON allows
  // none outside strings (and none raw inside them).
  const size_t nul = text.find('\0');
  if (nul != std::string_view::npos
      && (ok || !sax.failed || sax.position > nul + 1
          || sax.what.find("end of input") != std::string::npos)) {
    return SyntaxError{nul,
                       "unexpected byte 0x00",
                       "JSON text has no NUL bytes; is this a binary file?"};
  }
  if (ok || !sax.failed) {
    return std::nullopt;
  }
  return describe_syntax_error(text, sax);
}

namespace {

using io_detail::find_syntax_error;

// ---------------------------------------------------------------------------
// The part common to every reader: the padded copy, the parser, locations,
// error reporting with syntax errors first.

std::string_view type_name(od::json_type type) {
  switch (type) {
    case od::json_type::array:
      return "array";
    case od::json_type::object:
      return "object";
    case od::json_type::number:
      return "number";
    case od::json_type::string:
      return "string";
    case od::json_type::boolean:
      return "boolean";
    case od::json_type::null:
      return "null";
  }
  return "value";
}

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

class JsonInput {
 public:
  // `padding`: how many bytes after `text` in its buffer may be read. With
  // simdjson's padding or more, the text is parsed where it is; else it is
  // copied into a padded buffer.
  JsonInput(std::string_view text,
            std::string_view source,
            std::string_view prefix,
            Diagnostics& diags,
            size_t padding = 0)
      : m_text(text),
        m_source(source),
        m_prefix(prefix),
        m_diags(diags),
        m_padding(padding) {}

 protected:
  // Parses the text and opens its top-level object; reports and returns
  // false when there is none.
  bool open(od::object& top) {
    // A UTF-8 byte order mark (Windows editors write one) is skipped, as RFC
    // 8259 section 8.1 allows.
    if (m_text.starts_with("\xEF\xBB\xBF")) {
      m_skip = 3;
    }
    std::string_view body = m_text.substr(m_skip);
    size_t first = body.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos) {
      Diagnostic& d =
          m_diags.error("json.syntax",
                        "expected a JSON object, got end of input",
                        location_in_text(m_source, m_text, m_text.size()));
      if (m_text.empty()) {
        d.hint = "the file is empty";
      }
      return false;
    }
    if (m_padding >= simdjson::SIMDJSON_PADDING) {
      m_padded = simdjson::padded_string_view(
          body.data(), body.size(), body.size() + m_padding);
    } else {
      m_copy = simdjson::padded_string(body.data(), body.size());
      if (m_copy.size() != body.size()) {
        m_diags.error(
            "json.memory",
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
      return fail(code("type"),
                  fmt::format("expected a JSON object at the top level, got {}",
                              describe(m_doc)),
                  "",
                  start);
    }
    if (auto e = m_doc.get_object().get(top)) {
      return fail_json(e, "", start);
    }
    return true;
  }

  // After the top-level object: nothing but whitespace may follow.
  bool finish() {
    const char* at = nullptr;
    auto e = m_doc.current_location().get(at);
    if (e == simdjson::OUT_OF_BOUNDS) {
      return true;
    }
    return fail_json(simdjson::TRAILING_CONTENT, "", e ? nullptr : at);
  }

  std::string code(std::string_view what) const {
    return fmt::format("{}.{}", m_prefix, what);
  }

  // Where `at` (a byte of the padded copy) is, under `pointer`.
  Location location(std::string pointer, const char* at = nullptr) const {
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

  // Reports the first JSON syntax error of the text, if it has one (checked
  // once). Every other report calls this first.
  bool report_syntax_error() {
    if (!m_syntax_checked) {
      m_syntax_checked = true;
      if (auto error = find_syntax_error(m_text.substr(m_skip))) {
        m_syntax_found = true;
        Diagnostic& d = m_diags.error(
            "json.syntax",
            std::move(error->message),
            location_in_text(m_source, m_text, error->offset + m_skip));
        d.hint = std::move(error->hint);
      }
    }
    return m_syntax_found;
  }

  // Reports a problem with a value, unless the text is not valid JSON.
  // Returns false, for `return fail(...)`.
  bool fail(std::string code_text,
            std::string message,
            std::string pointer,
            const char* at = nullptr,
            std::string hint = {}) {
    if (m_defer) {
      m_pending = Pending{Pending::Kind::value,
                          simdjson::SUCCESS,
                          std::move(code_text),
                          std::move(message),
                          std::move(pointer),
                          std::move(hint),
                          at};
      return false;
    }
    if (report_syntax_error()) {
      return false;
    }
    Diagnostic& d = m_diags.error(std::move(code_text),
                                  std::move(message),
                                  location(std::move(pointer), at));
    d.hint = std::move(hint);
    return false;
  }

  // Calls visit(key, value) for each field of `object`, key unescaped, until
  // visit returns false. A field simdjson cannot read is reported at
  // `pointer` (and `at`). Returns false when iteration stopped early.
  template <typename Visit>
  bool for_each_field(od::object& object,
                      std::string_view pointer,
                      const char* at,
                      Visit&& visit) {
    for (auto result : object) {
      od::field field;
      std::string_view key;
      if (auto e = std::move(result).get(field)) {
        return fail_json(e, std::string(pointer), at);
      }
      if (auto e = key_text(field, key)) {
        return fail_json(e, std::string(pointer), at);
      }
      if (!visit(key, field.value())) {
        return false;
      }
    }
    return true;
  }

  // The unescaped key of `field`, valid while the document is read. A key
  // without a backslash, as nearly every key is, is its own text: it is
  // viewed in the padded copy rather than copied into the parser's string
  // buffer (a header's 100k tensor names would fill megabytes of it). Stage
  // 1 has checked the text's UTF-8 and refused raw control characters in
  // strings, as unescaping would.
  simdjson::error_code key_text(od::field& field, std::string_view& key) {
    if (plain_string(field.key().raw(), key)) {
      return simdjson::SUCCESS;
    }
    return field.unescaped_key().get(key);
  }

  // The string whose text starts at `begin` (after its opening quote), when
  // it has no backslash: then its text is its value.
  bool plain_string(const char* begin, std::string_view& out) const {
    const char* end = m_padded.data() + m_padded.size();
    if (begin < m_padded.data() || begin >= end) {
      return false;
    }
    std::string_view rest(begin, static_cast<size_t>(end - begin));
    std::string_view text = rest.substr(0, rest.find('"'));
    if (text.size() == rest.size()
        || text.find('\\') != std::string_view::npos) {
      return false;
    }
    out = text;
    return true;
  }

  // Reports what simdjson refused, as a syntax error when the text has one.
  bool fail_json(simdjson::error_code error,
                 std::string pointer,
                 const char* at = nullptr) {
    if (m_defer) {
      m_pending = Pending{
          Pending::Kind::json, error, {}, {}, std::move(pointer), {}, at};
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
      m_diags.error(
          "json.memory",
          fmt::format("out of memory parsing {} bytes", m_text.size()),
          location(""));
      return false;
    }
    if (report_syntax_error()) {
      return false;
    }
    if (error == simdjson::DEPTH_ERROR) {
      m_diags.error("json.depth",
                    fmt::format("JSON nested deeper than {} levels",
                                m_parser.max_depth()),
                    location(std::move(pointer), at));
      return false;
    }
    m_diags.error("json.syntax",
                  fmt::format("malformed JSON: {}", simdjson_words(error)),
                  location(std::move(pointer), at));
    return false;
  }

  // "array", "object", "string \"abc\"", "number 4096.0", "boolean true",
  // "null": what a value is, for "expected ..., got ..." messages.
  template <typename Value>
  static std::string describe(Value& value) {
    od::json_type type{};
    if (value.type().get(type)) {
      return "an invalid value";
    }
    if (type == od::json_type::array || type == od::json_type::object
        || type == od::json_type::null) {
      return std::string(type_name(type));
    }
    std::string_view token;
    if constexpr (std::is_same_v<Value, od::value>) {
      token = trim(value.raw_json_token());
    } else {
      if (value.raw_json_token().get(token)) {
        return std::string(type_name(type));
      }
      token = trim(token);
    }
    bool clipped = false;
    std::string_view shown = clip(token, 48, clipped);
    if (!clipped) {
      return fmt::format("{} {}", type_name(type), shown);
    }
    return fmt::format("{} {}...{}",
                       type_name(type),
                       shown,
                       type == od::json_type::string ? "\"" : "");
  }

  static const char* start_of(od::value& value) {
    return value.raw_json_token().data();
  }

  // Checks a value the reader does not use: it must still be valid JSON.
  // Gets `value` as an array, object or string view (by the type of `out`),
  // or reports "expected <expected>, got <what it is>" under `code` at
  // pointer(). The pointer is built only when something is reported.
  template <typename Out, typename PointerFn>
  bool get_as(od::value& value,
              Out& out,
              std::string_view code,
              std::string_view expected,
              const PointerFn& pointer,
              const char* at) {
    constexpr od::json_type want =
        std::is_same_v<Out, od::array>    ? od::json_type::array
        : std::is_same_v<Out, od::object> ? od::json_type::object
                                          : od::json_type::string;
    od::json_type type{};
    if (auto e = value.type().get(type)) {
      return fail_json(e, pointer(), at);
    }
    if (type != want) {
      return fail(std::string(code),
                  fmt::format("expected {}, got {}", expected, describe(value)),
                  pointer(),
                  at);
    }
    simdjson::error_code e = simdjson::SUCCESS;
    if constexpr (want == od::json_type::array) {
      e = value.get_array().get(out);
    } else if constexpr (want == od::json_type::object) {
      e = value.get_object().get(out);
    } else {
      e = value.get_string().get(out);
    }
    if (e) {
      return fail_json(e, pointer(), at);
    }
    return true;
  }

  template <typename PointerFn>
  bool skip_value(od::value& value, const PointerFn& pointer) {
    od::json_type type{};
    const char* at = start_of(value);
    if (auto e = value.type().get(type)) {
      return fail_json(e, pointer(), at);
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
        if (!e && !raw_is_valid(raw)) {
          return fail_json(simdjson::TAPE_ERROR, pointer(), at);
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
        if (value.get_number().get(n) && !raw_is_valid(raw)) {
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
    if (e) {
      return fail_json(e, pointer(), at);
    }
    return true;
  }

  static bool raw_is_valid(std::string_view raw) {
    return !find_syntax_error(raw);
  }

  // Copies the diagnostics of a lower layer (Manifest::add, parse_spec) that
  // reported into `scratch`, unless the text has a syntax error.
  void forward(const Diagnostics& scratch) {
    if (report_syntax_error()) {
      return;
    }
    for (const Diagnostic& d : scratch.items()) {
      m_diags.add(d);
    }
  }

  // Where the body of the text starts in m_text (after a byte order mark).
  size_t body_size() const { return m_text.size() - m_skip; }

  // A failure held back while the reader is not yet sure of the form of the
  // input (see ManifestReader::run): no syntax check, nothing reported.
  struct Pending {
    enum class Kind : uint8_t { none, value, json, lower };
    Kind kind = Kind::none;
    simdjson::error_code error = simdjson::SUCCESS;
    std::string code;
    std::string message;
    std::string pointer;
    std::string hint;
    const char* at = nullptr;
  };

  // Reports the held-back failure.
  void replay() {
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

  // What a lower layer reported into m_scratch, with the line, column and
  // excerpt of `at` added where it has none.
  void forward_lower(const char* at) {
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

  std::string_view m_text;
  std::string m_source;
  std::string_view m_prefix;  // "manifest" or "specs", for codes
  Diagnostics& m_diags;
  size_t m_padding = 0;
  size_t m_skip = 0;
  simdjson::padded_string
      m_copy;  // the text, when it has no padding of its own
  simdjson::padded_string_view m_padded;  // the text parsed: m_copy or in place
  od::parser m_parser;
  od::document m_doc;
  bool m_syntax_checked = false;
  bool m_syntax_found = false;
  bool m_defer = false;
  Pending m_pending;
  Diagnostics m_scratch;  // what lower layers report, before forward_lower()
};

std::string list_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    out += i == 0 ? "" : (i + 1 == keys.size() ? " or " : ", ");
    out += quote(keys[i]);
  }
  return out;
}

// The candidate closest to `word`: like closest_match, but it allows one
// more edit (so a swap of two letters, "shpae", still finds "shape") and
// breaks ties by the longer common prefix ("bfloat61" is "bfloat16", not
// "float64").
std::string suggest(std::string_view word,
                    const std::vector<std::string>& candidates) {
  const size_t allowed = std::clamp<size_t>((word.size() + 2) / 3, 1, 3);
  std::string best;
  size_t best_distance = allowed + 1;
  size_t best_prefix = 0;
  for (const std::string& candidate : candidates) {
    size_t distance = edit_distance(word, candidate, allowed);
    size_t prefix = 0;
    while (prefix < word.size() && prefix < candidate.size()
           && word[prefix] == candidate[prefix]) {
      ++prefix;
    }
    if (distance < best_distance
        || (distance == best_distance && distance <= allowed
            && prefix > best_prefix)) {
      best = candidate;
      best_distance = distance;
      best_prefix = prefix;
    }
  }
  return best;
}

// "unknown key \"shpae\"" with "did you mean \"shape\"?" or the list.
std::string unknown_key_hint(std::string_view key,
                             const std::vector<std::string>& known) {
  std::string best = suggest(key, known);
  if (!best.empty()) {
    return fmt::format("did you mean {}?", quote(best));
  }
  return fmt::format("expected {}", list_keys(known));
}

// ---------------------------------------------------------------------------
// Manifests.

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

class ManifestReader : public JsonInput {
 public:
  ManifestReader(std::string_view text,
                 std::string_view source,
                 Diagnostics& diags,
                 size_t padding = 0)
      : JsonInput(text, source, "manifest", diags, padding) {
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
          return fail("manifest.duplicate-key",
                      "duplicate key \"params\"",
                      "/params",
                      start_of(value));
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
      std::string pointer = "/" + json_pointer_escape(key);
      if (!skip_value(value, [&] { return pointer; })) {
        return false;
      }
    }
    return true;
  }

  bool read_params(od::value& value) {
    m_params_at = start_of(value);
    od::array array;
    if (!get_as(
            value,
            array,
            "manifest.type",
            "an array of tensor objects",
            [] { return std::string("/params"); },
            m_params_at)) {
      return false;
    }
    reserve_for_text(96);
    size_t index = 0;
    for (auto result : array) {
      od::value entry;
      if (auto e = result.get(entry)) {
        return fail_json(e, fmt::format("/params/{}", index));
      }
      if (!read_native_tensor(entry, index)) {
        return false;
      }
      ++index;
    }
    return true;
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
            value,
            object,
            "manifest.type",
            "a tensor object",
            [&] { return pointer; },
            at)) {
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
      TensorKey key = classify(field.key());
      std::string_view unescaped;
      if (key == TensorKey::unknown || key == TensorKey::data_offsets) {
        if (auto e = field.unescaped_key().get(unescaped)) {
          return fail_json(e, pointer, at);
        }
        key = classify(unescaped);
      }
      od::value& v = field.value();
      if (key == TensorKey::unknown || key == TensorKey::data_offsets) {
        return fail("manifest.unknown-key",
                    fmt::format("unknown key {}", quote(unescaped)),
                    pointer + "/" + json_pointer_escape(unescaped),
                    start_of(v),
                    unknown_key_hint(unescaped, k_native_keys()));
      }
      if (!check_duplicate(seen, key, pointer, v)) {
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
        return fail("manifest.missing-key",
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
            return fail("manifest.duplicate-key",
                        "duplicate key \"__metadata__\"",
                        "/__metadata__",
                        start_of(value));
          }
          seen_metadata = true;
          return read_metadata(value);
        });
  }

  // safetensors: "__metadata__" maps strings to strings.
  bool read_metadata(od::value& value) {
    const char* at = start_of(value);
    od::object object;
    if (!get_as(
            value,
            object,
            "manifest.type",
            "an object of strings",
            [] { return std::string("/__metadata__"); },
            at)) {
      return false;
    }
    return for_each_field(
        object, "/__metadata__", at, [&](std::string_view key, od::value& v) {
          std::string pointer = "/__metadata__/" + json_pointer_escape(key);
          od::json_type type{};
          if (auto e = v.type().get(type)) {
            return fail_json(e, pointer, start_of(v));
          }
          if (type != od::json_type::string) {
            return fail("manifest.type",
                        fmt::format("expected a string, got {}", describe(v)),
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
      return fail("manifest.type",
                  fmt::format("expected a tensor object with \"dtype\", "
                              "\"shape\" and \"data_offsets\", got {}",
                              describe(value)),
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
      TensorKey key = classify(field.key());
      std::string_view unescaped;
      if (key == TensorKey::unknown || key == TensorKey::name
          || key == TensorKey::logical_axes) {
        if (auto e = field.unescaped_key().get(unescaped)) {
          return fail_json(e, pointer, at);
        }
        key = classify(unescaped);
      }
      od::value& v = field.value();
      if (key == TensorKey::unknown || key == TensorKey::name
          || key == TensorKey::logical_axes) {
        return fail("manifest.unknown-key",
                    fmt::format("unknown key {}", quote(unescaped)),
                    pointer + "/" + json_pointer_escape(unescaped),
                    start_of(v),
                    unknown_key_hint(unescaped, k_safetensors_keys()));
      }
      if (!check_duplicate(seen, key, pointer, v)) {
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
        return fail("manifest.missing-key",
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

  static const std::vector<std::string>& k_native_keys() {
    static const std::vector<std::string> keys = {
        "name", "shape", "dtype", "logical_axes"};
    return keys;
  }
  static const std::vector<std::string>& k_safetensors_keys() {
    static const std::vector<std::string> keys = {
        "dtype", "shape", "data_offsets"};
    return keys;
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

  static unsigned bit(TensorKey key) {
    return 1U << static_cast<unsigned>(key);
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
    return fail("manifest.duplicate-key",
                fmt::format("duplicate key \"{}\"", key_name(key)),
                fmt::format("{}/{}", pointer, key_name(key)),
                start_of(value));
  }

  // Manifest::add checks names, dims and sizes; its reports (at m_where, the
  // tensor's pointer) get the line, column and excerpt of the tensor's object
  // (`at`) here.
  bool add(TensorInput tensor, const char* at) {
    if (m_manifest.add(std::move(tensor), m_scratch, m_where)) {
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
        "manifest.type",
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

  // Dims report manifest.type / manifest.bad-dim; offsets report
  // manifest.data-offsets for everything.
  static std::string code_for(std::string_view what, std::string_view kind) {
    if (what == "offset") {
      return "manifest.data-offsets";
    }
    return kind == "type" ? "manifest.type" : "manifest.bad-dim";
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
            "manifest.type",
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
            "manifest.type",
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
    const std::string pointer = base + "/logical_axes";
    const char* at = start_of(value);
    od::json_type type{};
    if (auto e = value.type().get(type)) {
      return fail_json(e, pointer, at);
    }
    if (type == od::json_type::null) {
      return skip_value(value, [&] { return pointer; });
    }
    if (type != od::json_type::array) {
      return fail("manifest.type",
                  fmt::format("expected an array of logical axis names, got {}",
                              describe(value)),
                  pointer,
                  at);
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
        return fail("manifest.logical-axes",
                    fmt::format("expected a logical axis name or null, got {}",
                                describe(entry)),
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
    if (!get_as(value,
                array,
                "manifest.data-offsets",
                "[begin, end] byte offsets",
                pointer,
                m_offsets_at)) {
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

// ---------------------------------------------------------------------------
// safetensors index files.

// {"metadata": {"total_size": N, ...}, "weight_map": {"NAME": "SHARD", ...}}
class IndexReader : public JsonInput {
 public:
  IndexReader(std::string_view text,
              std::string_view source,
              Diagnostics& diags,
              size_t padding)
      : JsonInput(text, source, "index", diags, padding) {}

  std::optional<io_detail::IndexFile> run() {
    od::object top;
    if (!open(top)) {
      return std::nullopt;
    }
    bool seen_map = false;
    bool seen_metadata = false;
    const bool read = for_each_field(
        top, "", nullptr, [&](std::string_view key, od::value& value) {
          std::string pointer = json_pointer_child("", key);
          if (key == "weight_map" || key == "metadata") {
            bool& seen = key == "weight_map" ? seen_map : seen_metadata;
            if (seen) {
              return fail("index.duplicate-key",
                          fmt::format("duplicate key {}", quote(key)),
                          pointer,
                          start_of(value));
            }
            seen = true;
            return key == "weight_map" ? read_weight_map(value)
                                       : read_metadata(value);
          }
          return skip_value(value, [&] { return pointer; });
        });
    if (!read || !finish()) {
      return std::nullopt;
    }
    if (!seen_map) {
      fail("index.missing-key",
           "a safetensors index needs \"weight_map\"",
           "",
           m_padded.data(),
           "{\"weight_map\": {\"TENSOR\": \"SHARD.safetensors\", ...}}");
      return std::nullopt;
    }
    if (m_index.entries.empty()) {
      fail(
          "index.empty", "weight_map maps no tensors", "/weight_map", m_map_at);
      return std::nullopt;
    }
    return std::move(m_index);
  }

 private:
  bool read_weight_map(od::value& value) {
    m_map_at = start_of(value);
    od::object map;
    if (!get_as(
            value,
            map,
            "index.type",
            "an object mapping tensor names to shard files",
            [] { return std::string("/weight_map"); },
            m_map_at)) {
      return false;
    }
    std::unordered_map<std::string, uint32_t> shard_of_file;
    return for_each_field(
        map,
        "/weight_map",
        m_map_at,
        [&](std::string_view name, od::value& file_value) {
          auto pointer = [&] {
            return json_pointer_child("/weight_map", name);
          };
          std::string_view file;
          if (!get_as(file_value,
                      file,
                      "index.type",
                      "a shard file name string",
                      pointer,
                      start_of(file_value))) {
            return false;
          }
          if (file.empty()) {
            return fail("index.shard",
                        "shard file name is empty",
                        pointer(),
                        start_of(file_value));
          }
          auto [slot, inserted] = shard_of_file.try_emplace(
              std::string(file), static_cast<uint32_t>(m_index.shards.size()));
          if (inserted) {
            m_index.shards.emplace_back(file);
          }
          // `name` views the parser's copy of the key, valid while the
          // document is read.
          if (!m_names.insert(name).second) {
            return fail("index.duplicate-key",
                        fmt::format("duplicate tensor {}", quote(name)),
                        pointer(),
                        start_of(file_value));
          }
          m_index.entries.push_back({std::string(name), slot->second});
          return true;
        });
  }

  bool read_metadata(od::value& value) {
    const char* at = start_of(value);
    od::object metadata;
    if (!get_as(
            value,
            metadata,
            "index.type",
            "an object",
            [] { return std::string("/metadata"); },
            at)) {
      return false;
    }
    return for_each_field(
        metadata, "/metadata", at, [&](std::string_view key, od::value& v) {
          std::string pointer = json_pointer_child("/metadata", key);
          int64_t total = 0;
          if (key == "total_size"
              && v.get_int64().get(total) == simdjson::SUCCESS) {
            m_index.total_size = total;
            return true;
          }
          return skip_value(v, [&] { return pointer; });
        });
  }

  io_detail::IndexFile m_index;
  std::unordered_set<std::string_view> m_names;
  const char* m_map_at = nullptr;
};

// ---------------------------------------------------------------------------
// Specs files.

class SpecsReader : public JsonInput {
 public:
  SpecsReader(std::string_view text,
              std::string_view source,
              Diagnostics& diags)
      : JsonInput(text, source, "specs", diags) {}

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
          std::string pointer = "/" + json_pointer_escape(key);
          if (!missing && key == form) {
            if (seen) {
              return fail("specs.duplicate-key",
                          fmt::format("duplicate key {}", quote(key)),
                          pointer,
                          start_of(value));
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
          "specs.missing-key",
          "expected a \"specs\" object or a \"tensors\" array at the top level",
          "",
          m_padded.data(),
          std::move(hint));
      return std::nullopt;
    }
    m_file.source = m_source;
    return std::move(m_file);
  }

 private:
  // {"NAME": SPEC, ...}
  bool read_specs_object(od::value& value) {
    const char* at = start_of(value);
    od::object object;
    if (!get_as(
            value,
            object,
            "specs.type",
            "an object mapping tensor names to specs",
            [] { return std::string("/specs"); },
            at)) {
      return false;
    }
    return for_each_field(
        object, "/specs", at, [&](std::string_view key, od::value& v) {
          std::string pointer = "/specs/" + json_pointer_escape(key);
          return add(std::string(key), v, std::move(pointer), start_of(v));
        });
  }

  // [{"name": ..., "spec": ..., other keys ignored}, ...]
  bool read_tensors_array(od::value& value) {
    const char* at = start_of(value);
    od::array array;
    if (!get_as(
            value,
            array,
            "specs.type",
            "an array of tensor objects",
            [] { return std::string("/tensors"); },
            at)) {
      return false;
    }
    size_t index = 0;
    for (auto result : array) {
      std::string pointer = fmt::format("/tensors/{}", index);
      od::value entry;
      if (auto e = result.get(entry)) {
        return fail_json(e, pointer, at);
      }
      if (!read_tensor_entry(entry, index, pointer)) {
        return false;
      }
      ++index;
    }
    return true;
  }

  bool read_tensor_entry(od::value& value,
                         size_t index,
                         const std::string& pointer) {
    const char* at = start_of(value);
    od::object object;
    if (!get_as(
            value,
            object,
            "specs.type",
            "a tensor object with \"name\" and \"spec\"",
            [&] { return pointer; },
            at)) {
      return false;
    }
    std::optional<std::string> name;
    std::optional<PartitionSpec> spec;
    std::string spec_pointer = pointer + "/spec";
    const char* name_at = nullptr;
    const char* spec_at = nullptr;
    bool spec_valid = true;
    const bool read = for_each_field(
        object, pointer, at, [&](std::string_view key, od::value& v) {
          const char* v_at = start_of(v);
          if ((key == "name" && name) || (key == "spec" && spec)) {
            return fail("specs.duplicate-key",
                        fmt::format("duplicate key {}", quote(key)),
                        fmt::format("{}/{}", pointer, key),
                        v_at);
          }
          if (key == "name") {
            std::string_view text;
            if (!get_as(
                    v,
                    text,
                    "specs.type",
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
    if (!read) {
      return false;
    }
    if (!name || !spec) {
      std::string who = name ? fmt::format("tensor {}", quote(*name))
                             : fmt::format("tensor {}", index);
      return fail("specs.missing-key",
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
    if (!read_spec(value, pointer, spec) && !take_soft_failure()) {
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

  // After read_spec failed: true when the failure was inside the spec only
  // (reported; the entry is kept as invalid and reading goes on). Sets
  // m_spec_invalid for the entry being read.
  bool take_soft_failure() {
    m_spec_invalid = m_soft_failure;
    m_soft_failure = false;
    return m_spec_invalid;
  }

  // A fault JAX reports for a well-formed spec (a nested tuple): an error of
  // that spec, not of the file. Returns false, for `return soft_fail(...)`.
  bool soft_fail(std::string code_text,
                 std::string message,
                 std::string pointer,
                 const char* at) {
    fail(std::move(code_text), std::move(message), std::move(pointer), at);
    m_soft_failure = !m_syntax_found;
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
      std::optional<PartitionSpec> parsed =
          parse_spec(text, fmt::format("{}:{}", m_source, pointer), scratch);
      if (!parsed || scratch.has_errors()) {
        forward(scratch);
        m_soft_failure = !m_syntax_found && scratch.has_errors()
                         && std::all_of(scratch.items().begin(),
                                        scratch.items().end(),
                                        [](const Diagnostic& d) {
                                          return d.code == "spec.nested-tuple";
                                        });
        return false;
      }
      spec = std::move(*parsed);
      return true;
    }
    if (type != od::json_type::array) {
      return fail("specs.type",
                  fmt::format("expected a partition spec (an array or a "
                              "string), got {}",
                              describe(value)),
                  pointer,
                  at);
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
      return fail(
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
      return fail("specs.type",
                  fmt::format("expected null, an axis name or an array of "
                              "axis names, got {}",
                              describe(value)),
                  pointer(),
                  at);
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
        return fail("spec.none-in-tuple",
                    "null cannot be one of the axes of a tuple; a tuple lists "
                    "mesh axes; write null for the whole dim",
                    inner_pointer(),
                    entry_at);
      }
      if (type == od::json_type::array) {
        return soft_fail(
            "spec.nested-tuple",
            "a tuple inside a PartitionSpec cannot contain a nested "
            "tuple",
            inner_pointer(),
            entry_at);
      }
      if (type != od::json_type::string) {
        return fail("specs.type",
                    fmt::format("expected an axis name inside a tuple, got {}",
                                describe(entry)),
                    inner_pointer(),
                    entry_at);
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
  bool m_spec_invalid = false;     // the entry being read has a bad spec
  const char* m_cursor = nullptr;  // advance_to's position, line and column
  int64_t m_line = 1;
  int64_t m_column = 1;
};

// ---------------------------------------------------------------------------
// Files.

// Writes all of `data`; returns 0 or an errno value.
int write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

// The last line of defence: no exception leaves the readers.
void report_exception(const std::exception& e,
                      size_t size,
                      std::string_view source,
                      Diagnostics& diags) {
  Location where;
  where.source = std::string(source);
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    diags.error("json.memory",
                fmt::format("out of memory reading {} bytes", size),
                where);
  } else {
    diags.error("internal", fmt::format("internal error: {}", e.what()), where);
  }
}

mode_t current_umask() {
  mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

}  // namespace

std::optional<std::string> read_file(const std::string& path,
                                     Diagnostics& diags) {
  auto fail = [&](int error) -> std::optional<std::string> {
    diags.error("io.read",
                fmt::format("cannot read file: {}", errno_message(error)),
                Location::of(path));
    return std::nullopt;
  };
  if (path.empty()) {
    return fail(ENOENT);
  }
  FileDescriptor fd(open_retry(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return fail(errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return fail(errno);
  }
  if (S_ISDIR(st.st_mode)) {
    return fail(EISDIR);
  }
  // Read st_size bytes in place, then on to the end of the file: pipes,
  // /proc files (st_size 0) and growing files have more than st_size says.
  std::string text;
  size_t filled = 0;
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    // Room for simdjson's padding after the text (see read_padding).
    text.reserve(static_cast<size_t>(st.st_size) + simdjson::SIMDJSON_PADDING);
    text.resize(static_cast<size_t>(st.st_size));
  }
  std::array<char, size_t{1} << 16U> chunk{};
  for (;;) {
    const bool in_place = filled < text.size();
    char* into = in_place ? text.data() + filled : chunk.data();
    size_t want = in_place ? text.size() - filled : chunk.size();
    ssize_t n = ::read(fd.get(), into, want);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return fail(errno);
    }
    if (n == 0) {
      break;
    }
    if (!in_place) {
      text.append(chunk.data(), static_cast<size_t>(n));
    }
    filled += static_cast<size_t>(n);
  }
  text.resize(filled);
  return text;
}

size_t io_detail::read_padding(std::string& text) {
  const size_t size = text.size();
  if (text.capacity() - size < simdjson::SIMDJSON_PADDING) {
    return 0;
  }
  // Zeros (resize writes them), not whatever the allocator left: the
  // parser reads them.
  text.resize(text.capacity());
  text.resize(size);
  return text.capacity() - size;
}

AtomicFile::~AtomicFile() {
  if (m_fd >= 0) {
    ::close(m_fd);
  }
  if (!m_temp.empty() && !m_committed) {
    ::unlink(m_temp.c_str());
  }
}

bool AtomicFile::fail(int error, Diagnostics& diags) {
  diags.error("io.write",
              fmt::format("cannot write file: {}", errno_message(error)),
              Location::of(m_path));
  if (m_fd >= 0) {
    ::close(m_fd);
    m_fd = -1;
  }
  if (!m_temp.empty()) {
    ::unlink(m_temp.c_str());
    m_temp.clear();
  }
  return false;
}

bool AtomicFile::open(const std::string& path, Diagnostics& diags) {
  assert(m_fd < 0);
  m_path = path;
  if (path.empty()) {
    return fail(ENOENT, diags);
  }
  // Replace what a symlink points to, not the link.
  m_target = path;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    if (char* resolved = ::realpath(path.c_str(), nullptr)) {
      m_target = resolved;
      std::free(resolved);  // NOLINT(cppcoreguidelines-no-malloc)
    }
  }
  const bool exists = ::stat(m_target.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) {
    return fail(EISDIR, diags);
  }
  if (exists && !S_ISREG(st.st_mode)) {
    // A device or a pipe (/dev/null, /dev/stdout): nothing to rename over.
    m_fd = open_retry(m_target.c_str(), O_WRONLY | O_CLOEXEC);
    return m_fd >= 0 || fail(errno, diags);
  }
  std::string temp = m_target + ".tmpXXXXXX";
  m_fd = ::mkstemp(temp.data());
  if (m_fd < 0) {
    return fail(errno, diags);
  }
  m_temp = std::move(temp);
  // mkstemp creates 0600; give the file the mode it had, or the usual one.
  const mode_t mode =
      exists ? (st.st_mode & 07777U) : (0666U & ~current_umask());
  if (::fchmod(m_fd, mode) != 0) {
    return fail(errno, diags);
  }
  return true;
}

void AtomicFile::write(std::string_view data) {
  if (m_fd < 0 || m_error != 0) {
    return;
  }
  m_error = write_all(m_fd, data);
  m_written += data.size();
#ifdef __linux__
  // Start writing back each few MiB of a temporary file as it is written:
  // the disk works while the rest is formatted, and commit's fsync waits
  // only for the tail (40 MB of plan JSON: about 20 ms less).
  constexpr size_t k_writeback_bytes = size_t{4} << 20U;
  if (!m_temp.empty() && m_error == 0
      && m_written - m_flushed >= k_writeback_bytes) {
    ::sync_file_range(m_fd,
                      static_cast<off_t>(m_flushed),
                      static_cast<off_t>(m_written - m_flushed),
                      SYNC_FILE_RANGE_WRITE);
    m_flushed = m_written;
  }
#endif
}

bool AtomicFile::commit(Diagnostics& diags) {
  assert(m_fd >= 0);
  if (m_error != 0) {
    return fail(m_error, diags);
  }
  if (m_temp.empty()) {
    const int fd = m_fd;
    m_fd = -1;
    return ::close(fd) == 0 || fail(errno, diags);
  }
  if (::fsync(m_fd) != 0) {
    return fail(errno, diags);
  }
  const int fd = m_fd;
  m_fd = -1;
  if (::close(fd) != 0) {
    return fail(errno, diags);
  }
  if (::rename(m_temp.c_str(), m_target.c_str()) != 0) {
    return fail(errno, diags);
  }
  m_committed = true;
  // Make the rename itself durable; a failure here loses nothing written.
  size_t slash = m_target.rfind('/');
  std::string folder =
      slash == std::string::npos
          ? std::string(".")
          : (slash == 0 ? std::string("/") : m_target.substr(0, slash));
  FileDescriptor dir(
      open_retry(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() >= 0) {
    ::fsync(dir.get());
  }
  return true;
}

bool write_file_atomic(const std::string& path,
                       std::string_view contents,
                       Diagnostics& diags) {
  AtomicFile file;
  if (!file.open(path, diags)) {
    return false;
  }
  file.write(contents);
  return file.commit(diags);
}

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
        "give its path to --manifest or --from-safetensors: its shard files "
        "are read too";
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

std::optional<IndexFile> read_index_text(std::string_view json,
                                         std::string_view source,
                                         Diagnostics& diags,
                                         size_t padding) {
  try {
    IndexReader reader(json, source, diags, padding);
    return reader.run();
  } catch (const std::exception& e) {
    report_exception(e, json.size(), source, diags);
    return std::nullopt;
  }
}

}  // namespace io_detail

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

std::optional<Manifest> manifest_from_model(
    const std::vector<ModelTensor>& tensors,
    std::string_view source,
    Diagnostics& diags) {
  Manifest manifest;
  manifest.source = std::string(source);
  manifest.reserve(tensors.size());
  const Location where = Location::of(manifest.source);
  for (const ModelTensor& t : tensors) {
    TensorInput input;
    input.name = t.name;
    input.shape = t.shape;
    input.dtype = t.dtype;
    if (!manifest.add(std::move(input), diags, where)) {
      return std::nullopt;
    }
  }
  return manifest;
}

std::optional<Manifest> read_builtin_model(std::string_view name,
                                           Diagnostics& diags) {
  std::optional<std::vector<ModelTensor>> tensors =
      tensors_for_builtin_model(name, "--model", diags);
  if (!tensors) {
    return std::nullopt;
  }
  return manifest_from_model(*tensors, fmt::format("--model {}", name), diags);
}

}  // namespace shardplan
