#pragma once

// Layer 1: diagnostics, their locations, exit codes and checked arithmetic.
//
// Core functions never throw across the API: they return std::optional<T> or
// bool and append to a Diagnostics sink. A diagnostic names where the problem
// is (a file with a JSON pointer or line:column, or a flag such as "--mesh")
// and carries a stable code that tests and JSON consumers match on.
//
// What it offers (src/diag.cpp implements all of it):
//   ExitCode                   the process's exit codes, 0 to 3
//   Location                   where a problem is: source, JSON pointer,
//                              line:column, excerpt and caret column
//   location_in_text           the Location of a byte offset in a text
//   to_string(Location)        a location as a message names it
//   Sourced<T>                 a value with the Location it came from
//   Diagnostic, Diagnostics    one located, coded problem; the sink of all
//   render                     a diagnostic as a compiler prints it
//   checked_add, checked_mul, checked_product, ceil_div
//                              int64 arithmetic that reports overflow
//   edit_distance, closest_match   "did you mean" suggestions
//   quote, printable, utf8_length  text of inputs made safe for messages
//   python_tuple, shape_text   shapes as JAX's messages and ours print them
//   json_pointer_escape, json_pointer_child   RFC 6901 pointers
//   is_digit, is_name_start, is_space, to_lower, to_size   ASCII classes
//                              and small conversions
//   Named, name_in, value_in, names_in   an enum's names as one table

#include <algorithm>
#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardplan {

// Process exit codes (docs/cli.md, "Exit codes").
enum class ExitCode : int {
  ok = 0,             // done, no errors (warnings allowed)
  plan_errors = 1,    // the plan has errors: invalid specs, over capacity, ...
  bad_input = 2,      // bad usage or input
  internal_error = 3  // a bug in shardplan
};

enum class Severity { error, warning, info };

std::string_view to_string(Severity severity);

// Where a diagnostic points. Any part may be empty or zero.
struct Location {
  std::string source;  // a file path, or a flag name such as "--mesh"
  std::string
      pointer;       // RFC 6901 JSON pointer inside `source`, e.g. "/params/3"
  int64_t line = 0;  // 1-based; 0 when unknown
  int64_t column = 0;  // 1-based, in characters (UTF-8 code points)
  // The text of the line (or an excerpt of it) for the caret display.
  std::string excerpt;
  // Column of the caret inside `excerpt`, 1-based; 0 for no caret.
  int64_t excerpt_column = 0;

  bool empty() const { return source.empty() && pointer.empty() && line == 0; }
  // A whole source with no position in it: a flag ("--mesh") or a file.
  static Location of(std::string source) {
    Location loc;
    loc.source = std::move(source);
    return loc;
  }
  // A value inside a JSON source: "rules.json" at "/rules/3/pattern".
  static Location at(std::string source, std::string pointer) {
    Location loc;
    loc.source = std::move(source);
    loc.pointer = std::move(pointer);
    return loc;
  }
};

// `at` as a diagnostic's first line names it, for a message that names
// where a value came from: "--seq", "cfg.yml:12:24", "rules.json:/rules/3";
// empty for an empty location.
std::string to_string(const Location& at);

// A value and where it came from: a flag (Location::of("--seq")), a key of
// a config file (its line, column and excerpt). The core reports a problem
// with the value at `at`, and names it in a message with to_string(at).
template <typename T>
struct Sourced {
  T value{};
  Location at;

  // Whether anything set the value (`at` is empty for a default).
  bool set() const { return !at.empty(); }
};

// Builds the location of `offset` (a byte offset) inside `text`: line, column
// in code points, and an excerpt of at most ~80 characters around it.
// REQUIRES: offset <= text.size().
Location location_in_text(std::string source,
                          std::string_view text,
                          size_t offset);

struct Diagnostic {
  Severity severity = Severity::error;
  std::string code;     // stable, e.g. "mesh.syntax"
  std::string message;  // lowercase start, no final period
  Location location;
  std::optional<std::string> tensor;
  std::optional<int64_t> dim;
  std::string hint;  // optional extra sentence, e.g. "did you mean ..."
};

// Renders one diagnostic the way compilers do:
//   --mesh:1:9: error: expected an integer axis size, got "x" [mesh.syntax]
//     dp:2,tp:x
//             ^
// With `color`, severity words and the caret are coloured with ANSI codes.
std::string render(const Diagnostic& diagnostic, bool color = false);

// The single sink for problems found in inputs and plans.
class Diagnostics {
 public:
  explicit Diagnostics(size_t max_errors = 0) : m_max_errors(max_errors) {}

  Diagnostic& add(Diagnostic diagnostic);
  Diagnostic& error(std::string code,
                    std::string message,
                    Location location = {});
  Diagnostic& warning(std::string code,
                      std::string message,
                      Location location = {});

  const std::vector<Diagnostic>& items() const { return m_items; }
  // The diagnostics added since items().size() was `first`, for a caller
  // that adds context on the way up (the tensor they concern).
  std::span<Diagnostic> since(size_t first) {
    return std::span<Diagnostic>(m_items).subspan(
        std::min(first, m_items.size()));
  }
  size_t error_count() const { return m_errors; }
  size_t warning_count() const { return m_warnings; }
  bool has_errors() const { return m_errors > 0; }
  // True once max_errors errors were recorded (never when max_errors is 0).
  bool full() const { return m_max_errors != 0 && m_errors >= m_max_errors; }
  // Errors beyond max_errors are counted here but not stored.
  size_t dropped() const { return m_dropped; }

 private:
  std::vector<Diagnostic> m_items;
  size_t m_max_errors;
  size_t m_errors = 0;
  size_t m_warnings = 0;
  size_t m_dropped = 0;
  Diagnostic m_overflow;  // returned by add() once full
};

// Checked arithmetic on int64_t: nullopt on overflow.
// Inline: the manifest reader calls these once per dim of every tensor.
inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    return std::nullopt;
  }
  return r;
}
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    return std::nullopt;
  }
  return r;
}
// Product of `values`; 1 for an empty list; nullopt on overflow.
std::optional<int64_t> checked_product(std::span<const int64_t> values);
inline std::optional<int64_t> checked_product(
    std::initializer_list<int64_t> values) {
  return checked_product(
      std::span<const int64_t>(values.begin(), values.size()));
}

// Ceiling division for a >= 0, b > 0.
constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return a / b + (a % b != 0);
}

// Levenshtein distance, capped: returns max_distance + 1 when larger.
size_t edit_distance(std::string_view a,
                     std::string_view b,
                     size_t max_distance = 3);
// The candidate closest to `word` within a distance scaled to its length
// (like ninja's SpellcheckString), or empty when none is close.
std::string closest_match(std::string_view word,
                          const std::vector<std::string>& candidates);

// Escapes one reference token of a JSON pointer ("~" -> "~0", "/" -> "~1").
std::string json_pointer_escape(std::string_view token);
// `parent` + "/" + the escaped `token`, in one allocation:
// json_pointer_child("/params", "a/b") == "/params/a~1b".
std::string json_pointer_child(std::string_view parent, std::string_view token);

// `s` in double quotes (or `quote_char`) with control characters, the quote
// and backslashes escaped, for messages: quote("a\"b") == "\"a\\\"b\"".
// A byte that is not part of well-formed UTF-8 is shown as "\xff".
std::string quote(std::string_view s, char quote_char = '"');

// The length of the well-formed UTF-8 sequence starting at s[i] (RFC 3629:
// no overlong forms, no surrogates, at most U+10FFFF), or 0 when none starts
// there. REQUIRES: i < s.size().
size_t utf8_length(std::string_view s, size_t i);

// `s` for a terminal: well-formed UTF-8 kept, every other byte and every
// control character shown as "\xNN" (render() passes diagnostics through
// it, so that no message echoes raw input bytes).
std::string printable(std::string_view s);

// Python's repr of a tuple of ints, as JAX's messages print shapes: "()",
// "(8,)", "(4, 8)".
std::string python_tuple(std::span<const int64_t> values);

// A shape as text output and messages print it: "[4096, 14336]", "[]".
std::string shape_text(std::span<const int64_t> values);

// ASCII character classes, the same in every locale, for the parsers of
// mesh strings, specs, names and JSON.
constexpr bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
constexpr bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
constexpr bool is_alnum(char c) {
  return is_digit(c) || is_alpha(c);
}
// Names of mesh axes and Python identifiers in specs: [A-Za-z_][A-Za-z0-9_]*.
constexpr bool is_name_start(char c) {
  return is_alpha(c) || c == '_';
}
constexpr bool is_name_char(char c) {
  return is_alnum(c) || c == '_';
}
constexpr char to_lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}
// `s` with ASCII letters in lower case.
std::string to_lower(std::string_view s);
// JSON's whitespace (RFC 8259): space, tab, line feed, carriage return.
constexpr bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// A count or index known to be >= 0, as a size_t for containers.
// REQUIRES: value >= 0.
inline size_t to_size(int64_t value) {
  assert(value >= 0);
  return static_cast<size_t>(value);
}

// An enum's values and their names in one table, read both ways:
//   constexpr std::array<Named<Recipe>, 2> k_recipes{{
//       {Recipe::adam, "adam"}, {Recipe::params_only, "params-only"}}};
template <typename Enum>
struct Named {
  Enum value;
  std::string_view name;
};

// The name of `value` in `table`; "?" when the table lacks it.
template <typename Enum, size_t N>
constexpr std::string_view name_in(const std::array<Named<Enum>, N>& table,
                                   Enum value) {
  for (const Named<Enum>& entry : table) {
    if (entry.value == value) {
      return entry.name;
    }
  }
  return "?";
}

// The value named `name` in `table`, or nullopt.
template <typename Enum, size_t N>
constexpr std::optional<Enum> value_in(const std::array<Named<Enum>, N>& table,
                                       std::string_view name) {
  for (const Named<Enum>& entry : table) {
    if (entry.name == name) {
      return entry.value;
    }
  }
  return std::nullopt;
}

// The names of `table`, in its order (for messages and --help).
template <typename Enum, size_t N>
std::vector<std::string> names_in(const std::array<Named<Enum>, N>& table) {
  std::vector<std::string> out;
  out.reserve(N);
  for (const Named<Enum>& entry : table) {
    out.emplace_back(entry.name);
  }
  return out;
}

}  // namespace shardplan
