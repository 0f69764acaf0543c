#pragma once

// The located-JSON toolkit every reader of the io module uses (manifests,
// safetensors headers and indexes, specs, rules, topology files, Hugging Face
// configs). Not a public header.
//
// One path for each kind of fault, with one code and one wording in every
// kind of file (docs/cli.md, "Error codes"):
//   json.syntax         the text is not JSON: file:line:column, an excerpt
//                       and a caret, nlohmann's SAX parser's first error in
//                       our words (find_syntax_error)
//   json.duplicate-key  a key twice in one object: "duplicate key \"k\""
//   json.type           a value of the wrong JSON type:
//                       "expected <what>, got <describe_json(value)>"
//   json.unknown-key    a key the format does not have, with the nearest
//                       key as hint (unknown_key_hint)
//   json.missing-key    a key the format requires
//   json.too-large, json.memory, json.depth   limits of the parser
// Faults of a value's meaning (a range, an unknown word) keep the code of
// their file kind (manifest.bad-dim, rules.bad-value, ...).
//
// Two readers share these: JsonInput (simdjson On-Demand, one forward pass
// that reads values straight into their destination, for inputs that can be
// large) and DomReader (nlohmann's ordered DOM, for small files read whole).

#include <shardplan/diag.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace shardplan::io_detail {

namespace od = simdjson::ondemand;

// ---------------------------------------------------------------------------
// Words shared by both readers.

// The first JSON syntax error of a text, as every reader reports it: where
// (a byte offset) and what, in words ("expected ':', got a string"), with a
// hint for habits from other languages (trailing commas, single quotes, NaN).
struct SyntaxError {
  size_t offset = 0;  // byte offset of the caret in the checked text
  std::string message;
  std::string hint;
};

// nullopt when `text` is valid JSON. Builds nothing (nlohmann's SAX parser,
// iterative: deep nesting is harmless).
std::optional<SyntaxError> find_syntax_error(std::string_view text);

// A quick check, with no allocation, of the values the simdjson readers
// step over. The end of the JSON value at `p` (after JSON whitespace), when
// it is plain: strings of ASCII with JSON's escapes (no surrogate), numbers
// without an exponent, at most 64 levels of nesting; nullptr when it is not
// or when the text ends (`end`) first. nullptr is "not sure":
// find_syntax_error says. What it takes, find_syntax_error takes.
const char* plain_json_end(const char* p, const char* end);

// True when `text` is one plain JSON value, whitespace around it allowed.
bool is_plain_json(std::string_view text);

// Reports `text`'s syntax error [json.syntax] at `source`, line and column
// of `skip + error.offset` in `whole` (the text as read, `text` being its
// part after `skip` bytes such as a byte order mark).
void report_syntax_error(const SyntaxError& error,
                         std::string_view whole,
                         size_t skip,
                         std::string_view source,
                         Diagnostics& diags);

// The length of a UTF-8 byte order mark at the start of `text` (3), or 0.
// Readers skip one, as RFC 8259 section 8.1 allows.
size_t bom_size(std::string_view text);

// A text that holds nothing but whitespace after `skip` bytes is reported
// [json.syntax] "expected a JSON object, got end of input" (with "the file
// is empty" when it is); returns whether it was.
bool report_if_blank(std::string_view text,
                     size_t skip,
                     std::string_view source,
                     Diagnostics& diags);

// What a reader expects at the top level, in its type error.
inline constexpr std::string_view k_top_level_object =
    "a JSON object at the top level";

enum class JsonKind : uint8_t { object, array, string, number, boolean, null };

// What a value is, for "expected ..., got ..." messages: "object", "array",
// "null", or the kind and the value's text for scalars: "string \"abc\"",
// "number 4096.0", "boolean true" (cut at 48 bytes with "...").
std::string describe_json(JsonKind kind, std::string_view token);

// "expected <expected>, got <got>".
std::string expected_got(std::string_view expected, std::string_view got);

// "\"a\", \"b\" or \"c\"".
std::string list_keys(const std::vector<std::string>& keys);

// The candidate closest to `word`: like closest_match, but it allows one
// more edit (so a swap of two letters, "shpae", still finds "shape") and
// breaks ties by the longer common prefix ("bfloat61" is "bfloat16", not
// "float64"). Empty when none is close.
std::string suggest(std::string_view word,
                    const std::vector<std::string>& candidates);

// The hint of an unknown key: "did you mean \"shape\"?", or when no key is
// close, `otherwise` (by default "expected \"a\", \"b\" or \"c\"").
std::string unknown_key_hint(std::string_view key,
                             const std::vector<std::string>& known,
                             std::string otherwise = {});

// The messages of a key given twice [json.duplicate-key] and of a key the
// format does not have [json.unknown-key].
std::string duplicate_key_message(std::string_view key);
std::string unknown_key_message(std::string_view key);

// The last line of defence: an exception a reader let through becomes an
// error at `source` (out of memory: json.memory), never a crash.
void report_exception(const std::exception& e,
                      size_t size,
                      std::string_view source,
                      Diagnostics& diags);

// At most `limit` bytes of `s`, cut on a UTF-8 code point boundary.
std::string_view clip(std::string_view s, size_t limit, bool& clipped);

std::string_view trim(std::string_view s);

// ---------------------------------------------------------------------------
// Fast paths for the readers of large inputs, which run once per tensor
// (io/json_input.cpp).

// out = prefix + index, reusing out's buffer.
void set_index_pointer(std::string& out, std::string_view prefix, size_t index);

// The decimal number at the end of `out`, after `prefix`, plus one, in place
// (an odometer: 199 -> 200, 99 -> 100). REQUIRES: out is prefix and digits.
void increment_index_pointer(std::string& out, size_t prefix);

// out = json_pointer_child("", key), reusing out's buffer.
void set_key_pointer(std::string& out, std::string_view key);

// Reads the array at `p` into `dims` when it is plain, as nearly every shape
// is: "[", JSON integers of at most 18 digits (no sign but "-", no leading
// zero, fraction or exponent) separated by ",", "]", JSON whitespace
// between. Anything else returns false, and the caller reads the value the
// full way, which reports what is wrong. REQUIRES: p points into a padded
// buffer of JSON text.
bool read_plain_dims(const char* p, std::vector<int64_t>& dims);

// ---------------------------------------------------------------------------
// JsonInput: the base of the simdjson readers.
//
// The text goes into a padded buffer (a manifest file is mapped, see
// io/mapped.cpp; other texts are copied once, or parsed in place when their
// buffer has room after them), then one forward pass reads each value.
// On-Demand checks only what it reads, so a value the reader ignores is
// checked by skip_value.
//
// A JSON syntax error takes precedence over any value error: before a
// problem is reported, the text is run once through find_syntax_error, and
// its first syntax error, if any, is reported instead. Value errors carry a
// JSON pointer, and also the line, column and excerpt of the value, so the
// caret shows it.
class JsonInput {
 public:
  // `padding`: how many bytes after `text` in its buffer may be read. With
  // simdjson's padding or more, the text is parsed where it is; else it is
  // copied into a padded buffer.
  JsonInput(std::string_view text,
            std::string_view source,
            Diagnostics& diags,
            size_t padding = 0)
      : m_text(text), m_source(source), m_diags(diags), m_padding(padding) {}

 protected:
  // Parses the text and opens its top-level object; reports and returns
  // false when there is none.
  bool open(od::object& top);

  // After the top-level object: nothing but whitespace may follow.
  bool finish();

  // Where `at` (a byte of the padded copy) is, under `pointer`.
  Location location(std::string pointer, const char* at = nullptr) const;

  // Reports the first JSON syntax error of the text, if it has one (checked
  // once). Every other report calls this first.
  bool report_syntax_error();

  // Reports a problem with a value, unless the text is not valid JSON.
  // Returns false, for `return fail(...)`.
  bool fail(std::string code,
            std::string message,
            std::string pointer,
            const char* at = nullptr,
            std::string hint = {});

  // fail() with json.type: "expected <expected>, got <what value is>".
  template <typename Value>
  bool fail_type(Value& value,
                 std::string_view expected,
                 std::string pointer,
                 const char* at,
                 std::string hint = {}) {
    return fail("json.type",
                expected_got(expected, describe(value)),
                std::move(pointer),
                at,
                std::move(hint));
  }

  // fail() with json.duplicate-key, at the key's pointer.
  bool fail_duplicate(std::string_view key,
                      std::string pointer,
                      const char* at) {
    return fail("json.duplicate-key",
                duplicate_key_message(key),
                std::move(pointer),
                at);
  }

  // fail() with json.unknown-key at the key's pointer, with
  // unknown_key_hint as hint.
  bool fail_unknown_key(std::string_view key,
                        std::string pointer,
                        const std::vector<std::string>& known,
                        const char* at) {
    return fail("json.unknown-key",
                unknown_key_message(key),
                std::move(pointer),
                at,
                unknown_key_hint(key, known));
  }

  // Reports what simdjson refused, as a syntax error when the text has one.
  bool fail_json(simdjson::error_code error,
                 std::string pointer,
                 const char* at = nullptr);

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

  // The object `value` at `pointer` (else json.type "expected <expected>,
  // got ..."), each of its fields visited as for_each_field does.
  template <typename Visit>
  bool for_each_member(od::value& value,
                       const std::string& pointer,
                       std::string_view expected,
                       Visit&& visit) {
    const char* at = start_of(value);
    od::object object;
    if (!get_as(
            value, object, expected, [&] { return pointer; }, at)) {
      return false;
    }
    return for_each_field(object, pointer, at, std::forward<Visit>(visit));
  }

  // The array `value` at `pointer` (else json.type "expected <expected>,
  // got ..."), visit(index, element) for each element until it returns
  // false.
  template <typename Visit>
  bool for_each_element(od::value& value,
                        std::string_view pointer,
                        std::string_view expected,
                        Visit&& visit) {
    const char* at = start_of(value);
    od::array array;
    if (!get_as(
            value, array, expected, [&] { return std::string(pointer); }, at)) {
      return false;
    }
    size_t index = 0;
    for (auto result : array) {
      od::value element;
      if (auto e = result.get(element)) {
        return fail_json(e, fmt::format("{}/{}", pointer, index), at);
      }
      if (!visit(index, element)) {
        return false;
      }
      ++index;
    }
    return true;
  }

  // The unescaped key of `field`, valid while the document is read. A key
  // without a backslash, as nearly every key is, is its own text: it is
  // viewed in the padded copy rather than copied into the parser's string
  // buffer (a header's 100k tensor names would fill megabytes of it). Stage
  // 1 has checked the text's UTF-8 and refused raw control characters in
  // strings, as unescaping would.
  simdjson::error_code key_text(od::field& field, std::string_view& key);

  // The string whose text starts at `begin` (after its opening quote), when
  // it has no backslash: then its text is its value.
  bool plain_string(const char* begin, std::string_view& out) const;

  // describe_json of a value (od::value or od::document).
  template <typename Value>
  static std::string describe(Value& value) {
    od::json_type type{};
    if (value.type().get(type)) {
      return "an invalid value";
    }
    std::string_view token;
    if constexpr (std::is_same_v<Value, od::value>) {
      token = value.raw_json_token();
    } else if (value.raw_json_token().get(token)) {
      token = {};
    }
    return describe_json(kind_of(type), trim(token));
  }

  static JsonKind kind_of(od::json_type type);

  static const char* start_of(od::value& value) {
    return value.raw_json_token().data();
  }

  // Gets `value` as an array, object or string view (by the type of `out`),
  // or reports json.type "expected <expected>, got <what it is>" at
  // pointer(). The pointer is built only when something is reported.
  template <typename Out, typename PointerFn>
  bool get_as(od::value& value,
              Out& out,
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
      return fail_type(value, expected, pointer(), at);
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

  // Checks a value the reader does not use: it must still be valid JSON.
  template <typename PointerFn>
  bool skip_value(od::value& value, const PointerFn& pointer) {
    const char* at = start_of(value);
    simdjson::error_code e = skip(value);
    if (e) {
      return fail_json(e, pointer(), at);
    }
    return true;
  }

  // Copies the diagnostics of a lower layer (Manifest::add, parse_spec) that
  // reported into `scratch`, unless the text has a syntax error.
  void forward(const Diagnostics& scratch);
  // forward() for what a parser of one string value's text (parse_spec)
  // reported at `text_source`, with a line and column inside `text`, the
  // string's value: located in this file instead, at `pointer`, with the
  // line, column and excerpt of the character in the file that the line
  // and column point at (escapes in the string's token, which starts at
  // `at` with its quote, counted as written).
  void forward_in_string(const Diagnostics& scratch,
                         std::string_view text_source,
                         std::string_view text,
                         const char* at,
                         const std::string& pointer);

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
  void replay();

  // What a lower layer reported into m_scratch, with the line, column and
  // excerpt of `at` added where it has none.
  void forward_lower(const char* at);

  std::string_view m_text;
  std::string m_source;
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

 private:
  // Steps over `value`, checking it is valid JSON.
  static simdjson::error_code skip(od::value& value);
};

// ---------------------------------------------------------------------------
// DomReader: the base of the readers of small files (rules, topology files,
// Hugging Face configs), read whole into nlohmann's ordered DOM.
//
// Its problems are located by JSON pointer; a syntax error by line and
// column. `kind` names the file kind for the codes of value faults
// ("rules" gives rules.bad-value).

using Json = nlohmann::ordered_json;

class DomReader {
 public:
  DomReader(std::string_view text,
            std::string_view source,
            std::string_view kind,
            Diagnostics& diags)
      : m_text(text), m_source(source), m_kind(kind), m_diags(diags) {}

  // Parses the text: its first syntax error [json.syntax], a key twice in
  // one object [json.duplicate-key], or a top level that is not an object
  // [json.type] is reported, and nullopt returned.
  std::optional<Json> parse();

  // describe_json of a DOM value.
  static std::string describe(const Json& j);

  // Reports an error at `pointer`; returns false, for `return fail(...)`.
  // A fault of the whole document (pointer "") is shown at its first value,
  // with line and column (fail_at_start).
  bool fail(std::string_view pointer,
            std::string code,
            std::string message,
            std::string hint = {});
  void warn(std::string_view pointer,
            std::string code,
            std::string message,
            std::string hint = {});
  // A problem with the whole document, shown at its first value.
  bool fail_at_start(std::string code,
                     std::string message,
                     std::string hint = {});

  // <kind>.bad-value: a value of the right type that the format refuses.
  bool bad_value(std::string_view pointer,
                 std::string message,
                 std::string hint = {});
  // json.type: "expected <expected>, got <describe(j)>".
  bool type_error(const Json& j,
                  std::string_view pointer,
                  std::string_view expected,
                  std::string hint = {});
  // json.unknown-key at `pointer` (the key's own), with unknown_key_hint.
  bool unknown_key(std::string_view key,
                   std::string_view pointer,
                   const std::vector<std::string>& known,
                   std::string otherwise = {});
  // json.missing-key: `message` ("missing key \"rules\"") at `pointer`.
  bool missing_key(std::string_view pointer,
                   std::string message,
                   std::string hint = {});

  // Typed getters: the value, or nullopt with the fault reported at
  // `pointer`: the wrong type [json.type]; a fraction, a value below `min`
  // or beyond int64 [<kind>.bad-value].
  std::optional<int64_t> get_int(const Json& j,
                                 std::string_view pointer,
                                 int64_t min);
  // A finite number >= `min`.
  std::optional<double> get_number(const Json& j,
                                   std::string_view pointer,
                                   double min);
  std::optional<bool> get_bool(const Json& j, std::string_view pointer);
  // A string; `expected` names it in the type error ("a dtype name").
  const std::string* get_string(const Json& j,
                                std::string_view pointer,
                                std::string_view expected = "a string");

  std::string_view source() const { return m_source; }
  Diagnostics& diags() { return m_diags; }

 protected:
  std::string_view m_text;
  std::string m_source;
  std::string m_kind;
  Diagnostics& m_diags;
};

}  // namespace shardplan::io_detail
