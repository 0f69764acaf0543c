#include <shardplan/spec.hpp>

#include <fmt/format.h>

#include <cassert>
#include <utility>

namespace shardplan {

bool PartitionSpec::replicated() const {
  for (const DimSharding& dim : dims) {
    if (!dim.replicated()) {
      return false;
    }
  }
  return true;
}

PartitionSpec PartitionSpec::padded(size_t rank) const {
  assert(size() <= rank);
  PartitionSpec out = *this;
  out.dims.resize(rank);
  return out;
}

PartitionSpec PartitionSpec::replicated_of(size_t rank) {
  PartitionSpec out;
  out.dims.resize(rank);
  return out;
}

std::vector<std::string> PartitionSpec::axes() const {
  std::vector<std::string> out;
  for (const DimSharding& dim : dims) {
    out.insert(out.end(), dim.axes.begin(), dim.axes.end());
  }
  return out;
}

namespace {

// Deep enough for any real spec; stops "((((((..." from exhausting the stack.
constexpr int k_max_depth = 64;

bool is_continuation_byte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0U) == 0x80U;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

void append_utf8(std::string& out, uint32_t cp) {
  auto byte = [&](uint32_t b) {
    out += static_cast<char>(static_cast<unsigned char>(b));
  };
  if (cp < 0x80) {
    byte(cp);
  } else if (cp < 0x800) {
    byte(0xC0 | (cp >> 6));
    byte(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    byte(0xE0 | (cp >> 12));
    byte(0x80 | ((cp >> 6) & 0x3F));
    byte(0x80 | (cp & 0x3F));
  } else {
    byte(0xF0 | (cp >> 18));
    byte(0x80 | ((cp >> 12) & 0x3F));
    byte(0x80 | ((cp >> 6) & 0x3F));
    byte(0x80 | (cp & 0x3F));
  }
}

// A parsed entry before canonicalisation: what the text literally says.
struct Value {
  enum class Kind { none, name, tuple };
  Kind kind = Kind::none;
  std::string name;
  std::vector<Value> items;
  size_t offset = 0;  // byte offset of the value in the text, for errors
};

class Parser {
 public:
  Parser(std::string_view text, std::string_view source, Diagnostics& diags)
      : m_text(text), m_source(source), m_diags(diags) {}

  std::optional<PartitionSpec> parse() {
    skip_ws();
    if (at_end()) {
      fail(m_pos,
           "spec.syntax",
           "expected a partition spec, got end of input",
           "write P() for a spec that replicates every dim");
      return std::nullopt;
    }
    std::optional<std::vector<Value>> entries;
    bool bare = false;
    if (peek() == '[') {
      ++m_pos;
      entries = parse_entries(']', "[");
    } else if (is_name_start(peek())) {
      size_t start = m_pos;
      std::string_view word = read_word();
      skip_ws();
      if (!at_end() && peek() == '(') {
        if (!is_spec_constructor(word)) {
          fail(start,
               "spec.syntax",
               fmt::format("expected P(...) or PartitionSpec(...), got {}",
                           quote(fmt::format("{}(", word))));
          return std::nullopt;
        }
        ++m_pos;
        entries = parse_entries(')', fmt::format("{}(", word));
      } else {
        m_pos = start;
        bare = true;
        entries = parse_entries('\0', "");
      }
    } else {
      bare = true;
      entries = parse_entries('\0', "");
    }
    if (!entries) {
      return std::nullopt;
    }
    skip_ws();
    if (!at_end()) {
      fail(m_pos,
           "spec.syntax",
           fmt::format("expected end of input, got {}", describe(m_pos)));
      return std::nullopt;
    }
    // "()" alone is P(), as to_short prints it (a bare spec with one entry
    // would be written "None").
    if (bare && entries->size() == 1 && !m_trailing_comma
        && (*entries)[0].kind == Value::Kind::tuple
        && (*entries)[0].items.empty()) {
      return PartitionSpec{};
    }
    PartitionSpec spec;
    spec.dims.reserve(entries->size());
    for (const Value& entry : *entries) {
      std::optional<DimSharding> dim = canonicalise(entry);
      if (!dim) {
        return std::nullopt;
      }
      spec.dims.push_back(std::move(*dim));
    }
    return spec;
  }

 private:
  bool at_end() const { return m_pos >= m_text.size(); }
  char peek() const { return m_text[m_pos]; }

  void skip_ws() {
    while (!at_end() && is_space(peek())) {
      ++m_pos;
    }
  }

  // A dotted name: ident ('.' ident)*.
  std::string_view read_word() {
    size_t start = m_pos;
    while (!at_end() && is_name_char(peek())) {
      ++m_pos;
    }
    while (m_pos + 1 < m_text.size() && peek() == '.'
           && is_name_start(m_text[m_pos + 1])) {
      ++m_pos;
      while (!at_end() && is_name_char(peek())) {
        ++m_pos;
      }
    }
    return m_text.substr(start, m_pos - start);
  }

  static bool ends_with_component(std::string_view word,
                                  std::string_view last) {
    return word == last
           || (word.size() > last.size() && word.ends_with(last)
               && word[word.size() - last.size() - 1] == '.');
  }

  static bool is_spec_constructor(std::string_view word) {
    return ends_with_component(word, "P")
           || ends_with_component(word, "PartitionSpec");
  }

  // The token at `offset` for a "got ..." message.
  std::string describe(size_t offset) const {
    if (offset >= m_text.size()) {
      return "end of input";
    }
    size_t end = offset + 1;
    if (is_name_char(m_text[offset])) {
      while (end < m_text.size() && is_name_char(m_text[end])) {
        ++end;
      }
    } else {
      while (end < m_text.size() && is_continuation_byte(m_text[end])) {
        ++end;
      }
    }
    return quote(m_text.substr(offset, end - offset));
  }

  void fail(size_t offset,
            std::string code,
            std::string message,
            std::string hint = {}) {
    Location loc = location_in_text(std::string(m_source), m_text, offset);
    Diagnostic& d =
        m_diags.error(std::move(code), std::move(message), std::move(loc));
    d.hint = std::move(hint);
  }

  void fail_unclosed(char close, std::string_view opener) {
    fail(m_pos,
         "spec.syntax",
         fmt::format("expected {} to close {}, got end of input",
                     quote(std::string_view(&close, 1)),
                     quote(opener)));
  }

  // entries := entry (',' entry)* ','?  up to `close`, or to the end of the
  // input when `close` is '\0'. The opening bracket is already consumed.
  std::optional<std::vector<Value>> parse_entries(char close,
                                                  std::string_view opener) {
    std::vector<Value> entries;
    m_trailing_comma = false;
    skip_ws();
    if (close != '\0' && !at_end() && peek() == close) {
      ++m_pos;
      return entries;
    }
    while (true) {
      std::optional<Value> value = parse_value(0);
      if (!value) {
        return std::nullopt;
      }
      entries.push_back(std::move(*value));
      skip_ws();
      if (!at_end() && peek() == '='
          && entries.back().kind == Value::Kind::name) {
        fail(entries.back().offset,
             "spec.syntax",
             fmt::format(
                 "keyword arguments such as {} are not supported",
                 quote(m_text.substr(entries.back().offset,
                                     m_pos + 1 - entries.back().offset))));
        return std::nullopt;
      }
      if (at_end()) {
        if (close == '\0') {
          return entries;
        }
        fail_unclosed(close, opener);
        return std::nullopt;
      }
      if (close != '\0' && peek() == close) {
        ++m_pos;
        return entries;
      }
      if (peek() != ',') {
        std::string expected = close == '\0'
                                   ? std::string("\",\" or end of input")
                                   : fmt::format("\",\" or \"{}\"", close);
        fail(m_pos,
             "spec.syntax",
             fmt::format("expected {}, got {}", expected, describe(m_pos)));
        return std::nullopt;
      }
      ++m_pos;
      skip_ws();
      if (at_end()) {
        if (close == '\0') {
          m_trailing_comma = true;
          return entries;
        }
        fail_unclosed(close, opener);
        return std::nullopt;
      }
      if (close != '\0' && peek() == close) {
        ++m_pos;
        m_trailing_comma = true;
        return entries;
      }
    }
  }

  std::optional<Value> parse_value(int depth) {
    skip_ws();
    if (depth > k_max_depth) {
      fail(m_pos, "spec.syntax", "parentheses nested too deeply");
      return std::nullopt;
    }
    if (at_end()) {
      fail(m_pos,
           "spec.syntax",
           "expected an axis name, None or a tuple, got end of input");
      return std::nullopt;
    }
    char c = peek();
    if (c == '\'' || c == '"') {
      return parse_string();
    }
    if (c == '(' || c == '[') {
      return parse_sequence(depth);
    }
    if (is_name_start(c)) {
      Value v;
      v.offset = m_pos;
      std::string_view word = read_word();
      if (word == "None" || word == "null") {
        v.kind = Value::Kind::none;
        return v;
      }
      if (word.find('.') != std::string_view::npos) {
        if (ends_with_component(word, "UNCONSTRAINED")) {
          fail(v.offset,
               "spec.unconstrained",
               "P.UNCONSTRAINED is not supported; use None");
        } else {
          fail(v.offset,
               "spec.syntax",
               fmt::format("expected an axis name, None or a tuple, got {}",
                           quote(word)),
               fmt::format("quote axis names that are not identifiers: '{}'",
                           word));
        }
        return std::nullopt;
      }
      v.kind = Value::Kind::name;
      v.name = std::string(word);
      return v;
    }
    fail(m_pos,
         "spec.syntax",
         fmt::format("expected an axis name, None or a tuple, got {}",
                     describe(m_pos)));
    return std::nullopt;
  }

  // '(' items ')' or '[' items ']'. As in Python, parentheses around a single
  // value without a trailing comma only group: ('x') is 'x', (('a', 'b')) is
  // ('a', 'b').
  std::optional<Value> parse_sequence(int depth) {
    Value v;
    v.kind = Value::Kind::tuple;
    v.offset = m_pos;
    const char open = peek();
    const char close = open == '(' ? ')' : ']';
    const std::string opener(1, open);
    ++m_pos;
    skip_ws();
    if (!at_end() && peek() == close) {
      ++m_pos;
      return v;
    }
    while (true) {
      std::optional<Value> item = parse_value(depth + 1);
      if (!item) {
        return std::nullopt;
      }
      skip_ws();
      if (at_end()) {
        fail_unclosed(close, opener);
        return std::nullopt;
      }
      if (peek() == close) {
        ++m_pos;
        if (open == '(' && v.items.empty()) {
          return item;  // grouping parentheses
        }
        v.items.push_back(std::move(*item));
        return v;
      }
      v.items.push_back(std::move(*item));
      if (peek() != ',') {
        fail(m_pos,
             "spec.syntax",
             fmt::format(
                 "expected \",\" or \"{}\", got {}", close, describe(m_pos)));
        return std::nullopt;
      }
      ++m_pos;
      skip_ws();
      if (at_end()) {
        fail_unclosed(close, opener);
        return std::nullopt;
      }
      if (peek() == close) {
        ++m_pos;
        return v;
      }
    }
  }

  // 'x' or "x" with Python/JSON escapes.
  std::optional<Value> parse_string() {
    Value v;
    v.kind = Value::Kind::name;
    v.offset = m_pos;
    const char q = peek();
    ++m_pos;
    while (true) {
      if (at_end()) {
        fail(v.offset, "spec.syntax", "unterminated string");
        return std::nullopt;
      }
      char c = peek();
      if (c == q) {
        ++m_pos;
        return v;
      }
      if (c != '\\') {
        // Python refuses source text that is not UTF-8; so does a spec, so
        // that every name it gives prints, and reads back, as itself.
        const size_t n = utf8_length(m_text, m_pos);
        if (n == 0) {
          fail(m_pos,
               "spec.syntax",
               fmt::format("invalid UTF-8 byte 0x{:02x} in a string",
                           static_cast<unsigned char>(c)));
          return std::nullopt;
        }
        v.name += m_text.substr(m_pos, n);
        m_pos += n;
        continue;
      }
      size_t escape = m_pos;
      ++m_pos;
      if (at_end()) {
        fail(v.offset, "spec.syntax", "unterminated string");
        return std::nullopt;
      }
      char e = peek();
      ++m_pos;
      switch (e) {
        case '\\':
        case '\'':
        case '"':
        case '/':
          v.name += e;
          break;
        case 'n':
          v.name += '\n';
          break;
        case 't':
          v.name += '\t';
          break;
        case 'r':
          v.name += '\r';
          break;
        case 'b':
          v.name += '\b';
          break;
        case 'f':
          v.name += '\f';
          break;
        case 'x':
        case 'u':
        case 'U': {
          std::optional<uint32_t> cp = read_code_point(e, escape);
          if (!cp) {
            return std::nullopt;
          }
          append_utf8(v.name, *cp);
          break;
        }
        default: {
          size_t end = m_pos;
          while (end < m_text.size() && is_continuation_byte(m_text[end])) {
            ++end;
          }
          fail(escape,
               "spec.syntax",
               fmt::format("unknown escape {} in a string",
                           quote(m_text.substr(escape, end - escape))));
          return std::nullopt;
        }
      }
    }
  }

  std::optional<uint32_t> read_hex(size_t digits) {
    uint32_t value = 0;
    for (size_t i = 0; i < digits; ++i) {
      int h = at_end() ? -1 : hex_value(peek());
      if (h < 0) {
        return std::nullopt;
      }
      value = value * 16 + static_cast<uint32_t>(h);
      ++m_pos;
    }
    return value;
  }

  // After "\x", "\u" or "\U": the code point, joining a JSON surrogate pair.
  std::optional<uint32_t> read_code_point(char kind, size_t escape) {
    size_t digits = kind == 'x' ? 2 : kind == 'u' ? 4 : 8;
    auto bad = [&]() {
      fail(escape,
           "spec.syntax",
           fmt::format(
               "invalid \\{} escape; expected {} hex digits", kind, digits));
      return std::nullopt;
    };
    std::optional<uint32_t> cp = read_hex(digits);
    if (!cp) {
      return bad();
    }
    if (kind == 'u' && *cp >= 0xD800 && *cp <= 0xDBFF
        && m_text.substr(m_pos, 2) == "\\u") {
      size_t save = m_pos;
      m_pos += 2;
      std::optional<uint32_t> low = read_hex(4);
      if (low && *low >= 0xDC00 && *low <= 0xDFFF) {
        return 0x10000 + ((*cp - 0xD800) << 10) + (*low - 0xDC00);
      }
      m_pos = save;
    }
    if ((*cp >= 0xD800 && *cp <= 0xDFFF) || *cp > 0x10FFFF) {
      fail(escape,
           "spec.syntax",
           fmt::format("escape {} is not a valid code point",
                       quote(m_text.substr(escape, m_pos - escape))));
      return std::nullopt;
    }
    return cp;
  }

  // jaxlib's CanonicalizePartition: None and () become None; a tuple may not
  // hold a tuple; a 1-tuple becomes its element.
  std::optional<DimSharding> canonicalise(const Value& entry) {
    DimSharding dim;
    switch (entry.kind) {
      case Value::Kind::none:
        return dim;
      case Value::Kind::name:
        if (entry.name.empty()) {
          fail(entry.offset, "spec.empty-axis", "axis name is empty");
          return std::nullopt;
        }
        dim.axes.push_back(entry.name);
        return dim;
      case Value::Kind::tuple:
        break;
    }
    for (const Value& item : entry.items) {
      if (item.kind == Value::Kind::tuple) {
        fail(item.offset,
             "spec.nested-tuple",
             "a tuple inside a PartitionSpec cannot contain a nested tuple");
        return std::nullopt;
      }
    }
    if (entry.items.size() == 1) {
      return canonicalise(entry.items[0]);
    }
    for (const Value& item : entry.items) {
      if (item.kind == Value::Kind::none) {
        fail(item.offset,
             "spec.none-in-tuple",
             "None cannot be one of the axes of a tuple",
             "a tuple lists mesh axes; write None for the whole dim");
        return std::nullopt;
      }
      if (item.name.empty()) {
        fail(item.offset, "spec.empty-axis", "axis name is empty");
        return std::nullopt;
      }
      dim.axes.push_back(item.name);
    }
    return dim;
  }

  std::string_view m_text;
  std::string_view m_source;
  Diagnostics& m_diags;
  size_t m_pos = 0;
  bool m_trailing_comma = false;  // of the last entries list parsed
};

// Python's repr of a str: single quotes unless the text holds ' and no ".
std::string python_quote(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  return quote(s, has_single && !has_double ? '"' : '\'');
}

// Names printed without quotes in the short form.
bool is_plain_name(std::string_view s) {
  if (s.empty() || !is_name_start(s[0]) || s == "None" || s == "null") {
    return false;
  }
  for (char c : s) {
    if (!is_name_char(c)) {
      return false;
    }
  }
  return true;
}

std::string short_name(std::string_view s) {
  return is_plain_name(s) ? std::string(s) : python_quote(s);
}

}  // namespace

std::optional<PartitionSpec> parse_spec(std::string_view text,
                                        std::string_view source,
                                        Diagnostics& diags) {
  return Parser(text, source, diags).parse();
}

namespace {

// The entries of `spec` joined by `separator`: None for a replicated dim, a
// name, or a parenthesised tuple of names, each name printed by `name_text`.
template <typename NameText>
std::string join_entries(const PartitionSpec& spec,
                         std::string_view separator,
                         const NameText& name_text) {
  std::string out;
  for (size_t i = 0; i < spec.dims.size(); ++i) {
    out += i > 0 ? separator : "";
    const std::vector<std::string>& axes = spec.dims[i].axes;
    if (axes.empty()) {
      out += "None";
    } else if (axes.size() == 1) {
      out += name_text(axes[0]);
    } else {
      out += '(';
      for (size_t j = 0; j < axes.size(); ++j) {
        out += j > 0 ? separator : "";
        out += name_text(axes[j]);
      }
      out += ')';
    }
  }
  return out;
}

}  // namespace

std::string to_python(const PartitionSpec& spec) {
  return "P(" + join_entries(spec, ", ", python_quote) + ")";
}

std::string to_short(const PartitionSpec& spec) {
  if (spec.dims.empty()) {
    return "()";
  }
  return join_entries(spec, ",", short_name);
}

}  // namespace shardplan
