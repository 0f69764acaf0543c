#include <shardplan/diag.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

namespace shardplan {

std::string_view to_string(Severity severity) {
  switch (severity) {
    case Severity::error:
      return "error";
    case Severity::warning:
      return "warning";
    case Severity::info:
      return "info";
  }
  return "error";
}

std::string to_string(const Location& at) {
  std::string out = at.source;
  if (!at.pointer.empty()) {
    out += ':';
    out += at.pointer;
  } else if (at.line > 0) {
    out += fmt::format(":{}:{}", at.line, at.column);
  }
  return out;
}

namespace {

bool is_continuation_byte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0U) == 0x80U;
}

// Number of UTF-8 code points in `s` (continuation bytes are not counted).
int64_t count_code_points(std::string_view s) {
  int64_t n = 0;
  for (char c : s) {
    n += is_continuation_byte(c) ? 0 : 1;
  }
  return n;
}

}  // namespace

size_t utf8_length(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    return 1;
  }
  size_t n = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    lo = b0 == 0xE0 ? 0xA0 : 0x80;
    hi = b0 == 0xED ? 0x9F : 0xBF;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    lo = b0 == 0xF0 ? 0x90 : 0x80;
    hi = b0 == 0xF4 ? 0x8F : 0xBF;
  } else {
    return 0;
  }
  if (i + n > s.size()) {
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) {
      return 0;
    }
  }
  return n;
}

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto u = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    if (n == 0 || u < 0x20 || u == 0x7F) {
      out += fmt::format("\\x{:02x}", u);
      ++i;
      continue;
    }
    out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

Location location_in_text(std::string source,
                          std::string_view text,
                          size_t offset) {
  offset = std::min(offset, text.size());
  Location loc;
  loc.source = std::move(source);
  size_t line_start = 0;
  int64_t line = 1;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  size_t line_end = text.find('\n', offset);
  if (line_end == std::string_view::npos) {
    line_end = text.size();
  }
  loc.line = line;
  loc.column =
      count_code_points(text.substr(line_start, offset - line_start)) + 1;

  // Excerpt: at most ~40 bytes either side of the offset, cut on code point
  // boundaries, with "..." where cut.
  constexpr size_t k_half = 40;
  size_t from = offset - std::min(offset - line_start, k_half);
  size_t to = std::min(line_end, offset + k_half);
  while (from > line_start && is_continuation_byte(text[from])) {
    --from;
  }
  while (to < line_end && is_continuation_byte(text[to])) {
    ++to;
  }
  std::string excerpt;
  if (from > line_start) {
    excerpt += "...";
  }
  // Tabs and carriage returns would misplace the caret: shown as spaces.
  // Bytes that are not UTF-8 text are shown escaped ("\xff"), never raw, and
  // the caret counts what is shown.
  auto shown = [](std::string_view part) {
    std::string text_part(part);
    std::replace(text_part.begin(), text_part.end(), '\t', ' ');
    std::replace(text_part.begin(), text_part.end(), '\r', ' ');
    return printable(text_part);
  };
  const std::string before = shown(text.substr(from, offset - from));
  const int64_t caret =
      static_cast<int64_t>(excerpt.size()) + count_code_points(before) + 1;
  excerpt += before;
  excerpt += shown(text.substr(offset, to - offset));
  if (to < line_end) {
    excerpt += "...";
  }
  loc.excerpt = std::move(excerpt);
  loc.excerpt_column = caret;
  return loc;
}

std::string render(const Diagnostic& d, bool color) {
  std::string out;
  const Location& loc = d.location;
  if (!loc.source.empty()) {
    out += printable(loc.source);
    if (!loc.pointer.empty()) {
      out += ':';
      out += loc.pointer;
    } else if (loc.line > 0) {
      out += fmt::format(":{}:{}", loc.line, loc.column);
    }
    out += ": ";
  } else if (!loc.pointer.empty()) {
    out += loc.pointer;
    out += ": ";
  }
  std::string_view sev = to_string(d.severity);
  if (color) {
    const char* code = d.severity == Severity::error     ? "\x1b[1;31m"
                       : d.severity == Severity::warning ? "\x1b[1;35m"
                                                         : "\x1b[1;36m";
    out += fmt::format("{}{}:\x1b[0m ", code, sev);
  } else {
    out += fmt::format("{}: ", sev);
  }
  out += printable(d.message);
  if (!d.hint.empty()) {
    out += "; ";
    out += printable(d.hint);
  }
  if (!d.code.empty()) {
    out += fmt::format(" [{}]", d.code);
  }
  if (!loc.excerpt.empty()) {
    out += "\n  ";
    out += loc.excerpt;
    if (loc.excerpt_column > 0) {
      out += "\n  ";
      out += std::string(static_cast<size_t>(loc.excerpt_column - 1), ' ');
      out += color ? "\x1b[1;32m^\x1b[0m" : "^";
    }
  }
  return out;
}

Diagnostic& Diagnostics::add(Diagnostic diagnostic) {
  if (diagnostic.severity == Severity::error) {
    if (full()) {
      ++m_dropped;
      ++m_errors;
      m_overflow = std::move(diagnostic);
      return m_overflow;
    }
    ++m_errors;
  } else if (diagnostic.severity == Severity::warning) {
    ++m_warnings;
  }
  m_items.push_back(std::move(diagnostic));
  return m_items.back();
}

Diagnostic& Diagnostics::error(std::string code,
                               std::string message,
                               Location location) {
  Diagnostic d;
  d.severity = Severity::error;
  d.code = std::move(code);
  d.message = std::move(message);
  d.location = std::move(location);
  return add(std::move(d));
}

Diagnostic& Diagnostics::warning(std::string code,
                                 std::string message,
                                 Location location) {
  Diagnostic d;
  d.severity = Severity::warning;
  d.code = std::move(code);
  d.message = std::move(message);
  d.location = std::move(location);
  return add(std::move(d));
}

std::optional<int64_t> checked_product(std::span<const int64_t> values) {
  int64_t r = 1;
  for (int64_t v : values) {
    if (__builtin_mul_overflow(r, v, &r)) {
      return std::nullopt;
    }
  }
  return r;
}

size_t edit_distance(std::string_view a,
                     std::string_view b,
                     size_t max_distance) {
  // Classic two-row Levenshtein with an early exit once a whole row exceeds
  // the cap (ninja's EditDistance does the same).
  if (a.size() > b.size()) {
    std::swap(a, b);
  }
  if (b.size() - a.size() > max_distance) {
    return max_distance + 1;
  }
  std::vector<size_t> row(a.size() + 1);
  for (size_t i = 0; i <= a.size(); ++i) {
    row[i] = i;
  }
  for (size_t j = 1; j <= b.size(); ++j) {
    size_t diagonal = row[0];
    row[0] = j;
    size_t best = row[0];
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t above = row[i];
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[i] = std::min({row[i - 1] + 1, above + 1, diagonal + cost});
      diagonal = above;
      best = std::min(best, row[i]);
    }
    if (best > max_distance) {
      return max_distance + 1;
    }
  }
  return std::min(row[a.size()], max_distance + 1);
}

std::string closest_match(std::string_view word,
                          const std::vector<std::string>& candidates) {
  // Allow about one edit per three characters, at least one, at most three.
  size_t allowed = std::clamp<size_t>(word.size() / 3, 1, 3);
  std::string best;
  size_t best_distance = allowed + 1;
  for (const std::string& candidate : candidates) {
    size_t d = edit_distance(word, candidate, allowed);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

namespace {

// Appends `token` to `out` escaped as RFC 6901 says. Manifest readers build
// one pointer per tensor: copy runs, not characters (find_first_of would call
// memchr once per character).
void append_escaped(std::string& out, std::string_view token) {
  auto special = [](char c) { return c == '~' || c == '/'; };
  auto run = token.begin();
  while (run != token.end()) {
    auto stop = std::find_if(run, token.end(), special);
    out.append(run, stop);
    if (stop == token.end()) {
      break;
    }
    out += *stop == '~' ? "~0" : "~1";
    run = stop + 1;
  }
}

}  // namespace

std::string json_pointer_escape(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  append_escaped(out, token);
  return out;
}

std::string json_pointer_child(std::string_view parent,
                               std::string_view token) {
  std::string out;
  out.reserve(parent.size() + 1 + token.size());
  out.append(parent);
  out += '/';
  append_escaped(out, token);
  return out;
}

std::string quote(std::string_view s, char quote_char) {
  std::string out(1, quote_char);
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if (c == quote_char || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      out += fmt::format("\\x{:02x}", u);
    } else if (u >= 0x80) {
      // A byte that is not part of UTF-8 text is shown escaped, never raw.
      const size_t n = utf8_length(s, i);
      if (n == 0) {
        out += fmt::format("\\x{:02x}", u);
      } else {
        out.append(s.substr(i, n));
        i += n - 1;
      }
    } else {
      out += c;
    }
  }
  out += quote_char;
  return out;
}

std::string python_tuple(std::span<const int64_t> values) {
  if (values.size() == 1) {
    return fmt::format("({},)", values[0]);
  }
  return fmt::format("({})", fmt::join(values, ", "));
}

std::string shape_text(std::span<const int64_t> values) {
  return fmt::format("[{}]", fmt::join(values, ", "));
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    c = to_lower(c);
  }
  return out;
}

}  // namespace shardplan
