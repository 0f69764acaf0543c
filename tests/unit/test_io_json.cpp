// The located-JSON toolkit (src/io/json.hpp: json.cpp, json_input.cpp),
// through the manifest and specs readers: syntax errors in our words with
// their line, column and caret, what the readers accept around the JSON
// (CRLF, a byte order mark), the hints for Python habits, and the quick
// check of JSON that is only valid.

#include "io/json.hpp"
#include "support/readers.hpp"
#include "support/test_support.hpp"

#include <shardplan/io.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <string_view>

using namespace shardplan;

namespace {

using test::first_line;
using test::manifest_error;
using test::manifest_ok;
using test::specs_error;

}  // namespace

TEST_CASE("io: syntax errors give line, column and a caret", "[io][json]") {
  Diagnostic d = manifest_error(
      "{\"params\": [\n"
      "  {\"name\": \"w\", \"shape\": [1, 2] \"dtype\": \"f32\"}\n"
      "]}");
  CHECK(d.code == "json.syntax");
  CHECK(render(d)
        == "m.json:2:33: error: expected ',' or '}', got a string "
           "[json.syntax]\n"
           "    {\"name\": \"w\", \"shape\": [1, 2] \"dtype\": \"f32\"}\n"
           "                                  ^");
  CHECK(d.location.pointer.empty());
}

TEST_CASE("io: a syntax error wins over an earlier value error", "[io][json]") {
  // The dtype is unknown, but the file is not JSON at all: say that.
  Diagnostic d = manifest_error(
      R"({"params": [{"name": "w", "shape": [1], "dtype": "nope"}], "x": [1,]})");
  CHECK(d.code == "json.syntax");
  CHECK(d.hint == "JSON does not allow a trailing comma");
}

TEST_CASE("io: CRLF line endings", "[io][json]") {
  Diagnostic d = manifest_error(
      "{\"params\": [\r\n"
      "  {\"name\": \"w\", \"shape\": [1],\r\n"
      "   \"dtype\": tru}\r\n"
      "]}\r\n");
  CHECK(d.code == "json.syntax");
  CHECK(d.location.line == 3);
  CHECK(d.location.column == 13);
  // The excerpt shows the line without its '\r'.
  CHECK(render(d)
        == "m.json:3:13: error: invalid literal \"tru\" [json.syntax]\n"
           "     \"dtype\": tru} \n"
           "              ^");
}

TEST_CASE("io: a byte order mark is skipped", "[io][json]") {
  Manifest m = manifest_ok(
      "\xEF\xBB\xBF{\"params\": [{\"name\": \"w\", \"shape\": [1], \"dtype\": "
      "\"f32\"}]}");
  CHECK(m.size() == 1);
  // Columns still count from the start of the line: the BOM is U+FEFF,
  // one character.
  Diagnostic d = manifest_error("\xEF\xBB\xBF{\"params\" 1}");
  CHECK(d.code == "json.syntax");
  CHECK(d.location.column == 12);
}

TEST_CASE("io: empty and blank files", "[io][json]") {
  Diagnostic d = manifest_error("");
  CHECK(first_line(d)
        == "m.json:1:1: error: expected a JSON object, got end of input; the "
           "file is empty");
  d = manifest_error(" \n\t\n");
  CHECK(d.code == "json.syntax");
  CHECK(d.location.line == 3);
}

TEST_CASE("io: the top level must be an object", "[io][json]") {
  Diagnostic d = manifest_error("  [1, 2]");
  CHECK(d.code == "json.type");
  CHECK(first_line(d)
        == "m.json:1:3: error: expected a JSON object at the top level, got "
           "array");
  d = specs_error("\"P('x')\"");
  CHECK(d.code == "json.type");
  CHECK(first_line(d)
        == "s.json:1:1: error: expected a JSON object at the top level, got "
           "string \"P('x')\"");
}

TEST_CASE("io: invalid UTF-8", "[io][json]") {
  Diagnostic d = manifest_error(
      "{\"params\": [{\"name\": \"w\xFF\", \"shape\": [1], \"dtype\": "
      "\"f32\"}]}");
  CHECK(d.code == "json.syntax");
  CHECK(first_line(d)
        == "m.json:1:24: error: invalid string: ill-formed UTF-8 byte");
}

TEST_CASE("io: deep nesting neither crashes nor recurses", "[io][json]") {
  // A megabyte of '['.
  Diagnostic d = manifest_error(std::string(1 << 20, '['));
  CHECK(d.code == "json.syntax");
  CHECK(d.message == "expected a JSON value, got end of input");
  // Well-formed but 100000 deep, inside an ignored key: valid JSON.
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  Manifest m = manifest_ok(
      R"({"params": [{"name": "w", "shape": [1], "dtype": "f32"}], "x": )"
      + deep + "}");
  CHECK(m.size() == 1);
  // As a tensor entry, it is the wrong type.
  d = manifest_error(R"({"params": [)" + deep + "]}");
  CHECK(first_line(d)
        == "m.json:/params/0: error: expected a tensor object, got array");
}

TEST_CASE("io: ignored values must still be valid JSON", "[io][json]") {
  const std::string tensor =
      R"({"params": [{"name": "w", "shape": [1], "dtype": "f32"}], )";
  for (std::string bad : {R"("x": {"a": tru})",
                          R"("x": [1, 2,])",
                          R"("x": 01)",
                          R"("x": "\q")",
                          R"("x": -)",
                          R"("x": [1 2])",
                          R"("x": nul)"}) {
    Diagnostic d = manifest_error(tensor + bad + "}");
    INFO(bad);
    CHECK(d.code == "json.syntax");
  }
  // Big integers are valid JSON even where simdjson cannot hold them.
  Manifest m = manifest_ok(tensor + R"("x": 123456789012345678901234567890})");
  CHECK(m.size() == 1);
}

TEST_CASE("io: Python habits get a hint", "[io][json]") {
  Diagnostic d = manifest_error(
      R"({"params": [{"name": "w", "shape": [NaN], "dtype": "f32"}]})");
  CHECK(first_line(d)
        == "m.json:1:37: error: invalid literal \"NaN\"; NaN and Infinity are "
           "not valid JSON numbers");
  d = manifest_error(R"({"params": [{'name': 'w'}]})");
  CHECK(first_line(d)
        == "m.json:1:14: error: unexpected \"'\"; JSON strings use double "
           "quotes");
  d = manifest_error(
      R"({"params": [{"name": "w", "shape": [1], "dtype": None}]})");
  CHECK(d.hint == "JSON spells these true, false and null");
}

TEST_CASE("io: trailing content after the top-level object", "[io][json]") {
  Diagnostic d = manifest_error(
      R"({"params": [{"name": "w", "shape": [1], "dtype": "f32"}]} {})");
  CHECK(first_line(d)
        == "m.json:1:59: error: expected end of input after the top-level "
           "value, got '{'");
}

TEST_CASE("io: the quick JSON check takes only valid JSON", "[io][json]") {
  using io_detail::find_syntax_error;
  using io_detail::is_plain_json;
  // What the readers step over in plan output: taken without nlohmann.
  const std::vector<std::string_view> plain = {
      "[]",
      "{}",
      " [8, 8] ",
      R"({"index": 12, "description": "#12 \"a\\.b\" \/ \u00e9 \n"})",
      R"([null, true, false, -0, 0, 12.5, -3.25, ""])",
      R"([[[]], {"a": {"b": [1]}, "c": []}])"};
  // Valid, but left to find_syntax_error: an exponent (nlohmann refuses
  // one beyond a double), raw UTF-8 and surrogates (nlohmann checks them),
  // nesting beyond 64 levels.
  const std::string deep = std::string(65, '[') + std::string(65, ']');
  const std::vector<std::string_view> unsure = {
      "1e3", "[2E-1]", "\"\xc3\xa9\"", R"("\ud83d\ude00")", deep};
  // Not JSON.
  const std::vector<std::string_view> invalid = {"[1,]",
                                                 R"({"a" 1})",
                                                 "[01]",
                                                 "[1.]",
                                                 "[-]",
                                                 R"("a\q")",
                                                 "\"\x01\"",
                                                 "[tru]",
                                                 R"({"a":1,})",
                                                 "[1] [2]",
                                                 "[",
                                                 R"("\u12")",
                                                 "{1: 2}",
                                                 "nul",
                                                 "",
                                                 "[1 2]",
                                                 R"({"a"})",
                                                 R"({"a": 1 "b": 2})"};
  for (std::string_view text : plain) {
    INFO(text);
    CHECK(is_plain_json(text));
    CHECK_FALSE(find_syntax_error(text));
  }
  for (std::string_view text : unsure) {
    INFO(text);
    CHECK_FALSE(is_plain_json(text));
    CHECK_FALSE(find_syntax_error(text));
  }
  for (std::string_view text : invalid) {
    INFO(text);
    CHECK_FALSE(is_plain_json(text));
    CHECK(find_syntax_error(text));
  }
  CHECK(plain.size() + unsure.size() + invalid.size() == 29);
  // plain_json_end stops right after the first value.
  const std::string_view two = "[1, 2], 3";
  CHECK(io_detail::plain_json_end(two.data(), two.data() + two.size())
        == two.data() + 6);
}

TEST_CASE("io: NUL bytes", "[io][json]") {
  // nlohmann would stop at the NUL as if the text ended there; the reader
  // does not.
  Diagnostic d =
      manifest_error(std::string("{\"params\": [{\"name\": \"w\", \"shape\": "
                                 "[1], \"dtype\": \"f32\"}]}\0x",
                                 59));
  CHECK(d.code == "json.syntax");
  CHECK(first_line(d)
        == "m.json:1:58: error: unexpected byte 0x00; JSON text has no NUL "
           "bytes; is this a binary file?");
  d = manifest_error(std::string("\0", 1));
  CHECK(first_line(d).starts_with("m.json:1:1: error: unexpected byte 0x00"));
  // Inside a string a raw NUL is a control character.
  d = manifest_error(std::string("{\"params\": [{\"name\": \"w\0\"}]}", 28));
  CHECK(first_line(d)
        == "m.json:1:24: error: invalid string: control character U+0000 "
           "(NUL) must be escaped to \\u0000");
}
