// The located-JSON toolkit (src/io/json.hpp), what both readers share:
// syntax errors in our words (nlohmann's SAX parser finds them), the
// describer of values, key hints. The readers are in io/json_input.cpp
// (simdjson) and io/json_dom.cpp (nlohmann's DOM).

#include "io/json.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace shardplan::io_detail {

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

namespace {

bool is_word_char(char c) {
  return is_alnum(c) || c == '_' || c == '-' || c == '+' || c == '.';
}

// ---------------------------------------------------------------------------
// JSON syntax errors, located by nlohmann's SAX parser.

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

const char* plain_json_end(const char* p, const char* end) {
  constexpr size_t k_max_depth = 64;
  std::array<char, k_max_depth> open{};  // '{' or '[' of each level
  size_t depth = 0;
  auto space = [&] {
    while (p < end && is_space(*p)) {
      ++p;
    }
  };
  auto hex = [](char c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  };
  // A string of ASCII (nlohmann checks UTF-8; the caller does) whose
  // escapes are JSON's, none a surrogate (nlohmann checks their pairs).
  auto string = [&] {
    if (p == end || *p != '"') {
      return false;
    }
    for (++p; p < end;) {
      const auto c = static_cast<unsigned char>(*p);
      if (c == '"') {
        ++p;
        return true;
      }
      if (c < 0x20U || c >= 0x80U) {
        return false;
      }
      if (c != '\\') {
        ++p;
        continue;
      }
      if (end - p < 2) {
        return false;
      }
      const char e = p[1];
      if (e == 'u') {
        if (end - p < 6 || !hex(p[2]) || !hex(p[3]) || !hex(p[4])
            || !hex(p[5])) {
          return false;
        }
        const char high = to_lower(p[2]);
        if (high == 'd' && to_lower(p[3]) >= '8') {
          return false;  // a surrogate
        }
        p += 6;
      } else if (std::string_view("\"\\/bfnrt").find(e)
                 != std::string_view::npos) {
        p += 2;
      } else {
        return false;
      }
    }
    return false;
  };
  // A number without an exponent, of at most 64 bytes: nlohmann refuses
  // one beyond a double's range.
  auto number = [&] {
    const char* begin = p;
    if (p < end && *p == '-') {
      ++p;
    }
    if (p == end || !is_digit(*p)) {
      return false;
    }
    if (*p == '0') {
      ++p;
    } else {
      while (p < end && is_digit(*p)) {
        ++p;
      }
    }
    if (p < end && *p == '.') {
      ++p;
      if (p == end || !is_digit(*p)) {
        return false;
      }
      while (p < end && is_digit(*p)) {
        ++p;
      }
    }
    return p - begin <= 64 && (p == end || (*p != 'e' && *p != 'E'));
  };
  auto literal = [&](std::string_view word) {
    if (static_cast<size_t>(end - p) < word.size()
        || std::string_view(p, word.size()) != word) {
      return false;
    }
    p += word.size();
    return true;
  };
  // `"key" :` of an object.
  auto key = [&] {
    if (!string()) {
      return false;
    }
    space();
    if (p == end || *p != ':') {
      return false;
    }
    ++p;
    space();
    return true;
  };

  space();
  for (;;) {
    // A value.
    if (p == end) {
      return nullptr;
    }
    const char c = *p;
    if (c == '{' || c == '[') {
      if (depth == k_max_depth) {
        return nullptr;
      }
      open[depth++] = c;
      ++p;
      space();
      if (p < end && *p == (c == '{' ? '}' : ']')) {
        ++p;
        --depth;
      } else if (c == '[' || key()) {
        continue;  // the first value of the container
      } else {
        return nullptr;
      }
    } else if (c == '"') {
      if (!string()) {
        return nullptr;
      }
    } else if (c == 't' || c == 'f' || c == 'n') {
      if (!literal(c == 't' ? "true" : c == 'f' ? "false" : "null")) {
        return nullptr;
      }
    } else if (!number()) {
      return nullptr;
    }
    // After a value: close containers, or go on after a comma.
    for (;;) {
      if (depth == 0) {
        return p;
      }
      space();
      if (p == end) {
        return nullptr;
      }
      const char container = open[depth - 1];
      if (*p == ',') {
        ++p;
        space();
        if (container == '{' && !key()) {
          return nullptr;
        }
        break;
      }
      if (*p != (container == '{' ? '}' : ']')) {
        return nullptr;
      }
      ++p;
      --depth;
    }
  }
}

bool is_plain_json(std::string_view text) {
  const char* const end = text.data() + text.size();
  const char* p = plain_json_end(text.data(), end);
  if (p == nullptr) {
    return false;
  }
  while (p < end && is_space(*p)) {
    ++p;
  }
  return p == end;
}

std::optional<SyntaxError> find_syntax_error(std::string_view text) {
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

void report_syntax_error(const SyntaxError& error,
                         std::string_view whole,
                         size_t skip,
                         std::string_view source,
                         Diagnostics& diags) {
  Diagnostic& d = diags.error(
      "json.syntax",
      error.message,
      location_in_text(std::string(source),
                       whole,
                       std::min(error.offset + skip, whole.size())));
  d.hint = error.hint;
}

namespace {

std::string_view kind_name(JsonKind kind) {
  switch (kind) {
    case JsonKind::object:
      return "object";
    case JsonKind::array:
      return "array";
    case JsonKind::string:
      return "string";
    case JsonKind::number:
      return "number";
    case JsonKind::boolean:
      return "boolean";
    case JsonKind::null:
      return "null";
  }
  return "value";
}

}  // namespace

bool report_if_blank(std::string_view text,
                     size_t skip,
                     std::string_view source,
                     Diagnostics& diags) {
  if (text.substr(skip).find_first_not_of(" \t\r\n")
      != std::string_view::npos) {
    return false;
  }
  Diagnostic& d =
      diags.error("json.syntax",
                  "expected a JSON object, got end of input",
                  location_in_text(std::string(source), text, text.size()));
  if (text.empty()) {
    d.hint = "the file is empty";
  }
  return true;
}

size_t bom_size(std::string_view text) {
  return text.starts_with("\xEF\xBB\xBF") ? 3 : 0;
}

std::string describe_json(JsonKind kind, std::string_view token) {
  if (kind == JsonKind::array || kind == JsonKind::object
      || kind == JsonKind::null) {
    return std::string(kind_name(kind));
  }
  bool clipped = false;
  std::string_view shown = clip(token, 48, clipped);
  if (!clipped) {
    return fmt::format("{} {}", kind_name(kind), shown);
  }
  return fmt::format("{} {}...{}",
                     kind_name(kind),
                     shown,
                     kind == JsonKind::string ? "\"" : "");
}

std::string expected_got(std::string_view expected, std::string_view got) {
  return fmt::format("expected {}, got {}", expected, got);
}

std::string list_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    out += i == 0 ? "" : (i + 1 == keys.size() ? " or " : ", ");
    out += quote(keys[i]);
  }
  return out;
}

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

std::string unknown_key_hint(std::string_view key,
                             const std::vector<std::string>& known,
                             std::string otherwise) {
  std::string best = suggest(key, known);
  if (!best.empty()) {
    return fmt::format("did you mean {}?", quote(best));
  }
  if (!otherwise.empty()) {
    return otherwise;
  }
  return fmt::format("expected {}", list_keys(known));
}

std::string duplicate_key_message(std::string_view key) {
  return fmt::format("duplicate key {}", quote(key));
}

std::string unknown_key_message(std::string_view key) {
  return fmt::format("unknown key {}", quote(key));
}

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

}  // namespace shardplan::io_detail
