#include <shardplan/diag.hpp>

#include <catch2/catch.hpp>

#include <limits>

using namespace shardplan;

TEST_CASE("diag: checked arithmetic catches overflow at the edges", "[diag]") {
  constexpr int64_t max = std::numeric_limits<int64_t>::max();
  CHECK(checked_mul(int64_t{1} << 31, int64_t{1} << 31) == int64_t{1} << 62);
  CHECK_FALSE(checked_mul(int64_t{1} << 32, int64_t{1} << 31));  // 2^63
  CHECK(checked_mul(max, 1) == max);
  CHECK_FALSE(checked_mul(max, 2));
  CHECK(checked_mul(max, 0) == 0);
  CHECK(checked_add(max - 1, 1) == max);
  CHECK_FALSE(checked_add(max, 1));
  CHECK(checked_product({}) == 1);
  CHECK(checked_product({2, 3, 7}) == 42);
  CHECK(checked_product({0, max, max}) == 0);  // 0 first: no overflow
  CHECK_FALSE(
      checked_product({3037000500, 3037000500}));  // just above sqrt(2^63)
  CHECK(checked_product({3037000499, 3037000499})
        == int64_t{9223372030926249001});
}

TEST_CASE("diag: ceil_div", "[diag]") {
  CHECK(ceil_div(0, 4) == 0);
  CHECK(ceil_div(1, 4) == 1);
  CHECK(ceil_div(8, 4) == 2);
  CHECK(ceil_div(9, 4) == 3);
  CHECK(ceil_div(50257, 8) == 6283);
}

TEST_CASE("diag: rendering with a pointer, with line and caret, without source",
          "[diag]") {
  Diagnostic d;
  d.code = "sharding.indivisible";
  d.message = "dim 1 of \"w\" has size 1000, not divisible by 8";
  d.location.source = "model.json";
  d.location.pointer = "/params/12/shape/1";
  CHECK(render(d)
        == "model.json:/params/12/shape/1: error: dim 1 of \"w\" has size 1000, not "
           "divisible by 8 [sharding.indivisible]");

  Diagnostic w;
  w.severity = Severity::warning;
  w.code = "x.y";
  w.message = "careful";
  w.hint = "did you mean \"z\"?";
  CHECK(render(w) == "warning: careful; did you mean \"z\"? [x.y]");

  Diagnostic c;
  c.code = "json.syntax";
  c.message = "unexpected end";
  c.location = location_in_text("f.json", "{\n  \"a\": [1,\n", 13);
  CHECK(c.location.line == 3);
  CHECK(c.location.column == 1);
  CHECK(render(c) == "f.json:3:1: error: unexpected end [json.syntax]");
}

TEST_CASE("diag: location_in_text counts code points and clips long lines",
          "[diag]") {
  // "é" is two bytes; byte offset 3 is the character after "aé".
  Location loc = location_in_text("s", "aéb", 3);
  CHECK(loc.line == 1);
  CHECK(loc.column == 3);
  CHECK(loc.excerpt == "aéb");
  CHECK(loc.excerpt_column == 3);

  std::string long_line(200, 'x');
  long_line[100] = 'Y';
  Location clipped = location_in_text("s", long_line, 100);
  CHECK(clipped.column == 101);
  CHECK(clipped.excerpt.substr(0, 3) == "...");
  CHECK(clipped.excerpt.substr(clipped.excerpt.size() - 3) == "...");
  CHECK(clipped.excerpt[static_cast<size_t>(clipped.excerpt_column - 1)]
        == 'Y');
  // Offsets past the end clamp to the end.
  CHECK(location_in_text("s", "ab", 99).column == 3);
}

TEST_CASE("diag: bytes that are not UTF-8 text are shown escaped", "[diag]") {
  // "\xff" can begin no UTF-8 sequence; "\xc3\xa9" is "e acute" (kept);
  // "\xc0\xaf" is an overlong "/" (RFC 3629 forbids it: both escaped).
  CHECK(printable("w\xff") == "w\\xff");
  CHECK(printable("a\xc3\xa9" "b") == "a\xc3\xa9" "b");
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");
  CHECK(printable("a\nb") == "a\\x0ab");
  CHECK(quote("w\xff") == "\"w\\xff\"");
  CHECK(quote("\xc3\xa9") == "\"\xc3\xa9\"");

  // The caret sits under the byte the offset names, counted on the shown
  // text: "w\xff" shows as 5 characters, so offset 2 ("x") is column 6.
  Location loc = location_in_text("s", "w\xffx", 2);
  CHECK(loc.column == 3);
  CHECK(loc.excerpt == "w\\xffx");
  CHECK(loc.excerpt_column == 6);

  Diagnostic d;
  d.code = "c";
  d.message = "bad name \xfe";
  d.location.source = "f\xff.json";
  CHECK(render(d) == "f\\xff.json: error: bad name \\xfe [c]");
}

TEST_CASE("diag: colour wraps the severity and caret only", "[diag]") {
  Diagnostic d;
  d.code = "c";
  d.message = "m";
  d.location = location_in_text("--mesh", "ab", 1);
  CHECK(render(d, true)
        == "--mesh:1:2: \x1b[1;31merror:\x1b[0m m [c]\n  ab\n   \x1b[1;32m^\x1b[0m");
}

TEST_CASE("diag: the error cap keeps counting but stops storing", "[diag]") {
  Diagnostics diags(2);
  diags.error("a", "1");
  diags.warning("w", "w");
  diags.error("a", "2");
  CHECK(diags.full());
  diags.error("a", "3");
  CHECK(diags.error_count() == 3);
  CHECK(diags.dropped() == 1);
  CHECK(diags.items().size() == 3);  // two errors and the warning
}

TEST_CASE("diag: edit distance and suggestions", "[diag]") {
  CHECK(edit_distance("tp", "tp") == 0);
  CHECK(edit_distance("tpp", "tp") == 1);
  CHECK(edit_distance("fsdp", "dsfp") == 2);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("a", "abcdefgh", 3) == 4);  // capped
  CHECK(closest_match("tpp", {"dp", "fsdp", "tp"}) == "tp");
  CHECK(closest_match("explicitt", {"auto", "explicit", "manual"})
        == "explicit");
  CHECK(closest_match("zzzz", {"dp", "tp"}).empty());
  CHECK(closest_match("", {"dp"}).empty());
}

TEST_CASE("diag: JSON pointer escaping and quoting", "[diag]") {
  CHECK(json_pointer_escape("params/0~x") == "params~10~0x");
  CHECK(json_pointer_escape("model.layers.0") == "model.layers.0");
  CHECK(json_pointer_escape("~~//") == "~0~0~1~1");
  CHECK(json_pointer_escape("").empty());
  // RFC 6901 section 3: "/" within a token is "~1" and "~" is "~0".
  CHECK(json_pointer_child("", "a/b") == "/a~1b");
  CHECK(json_pointer_child("/params", "m~1") == "/params/m~01");
  CHECK(json_pointer_child("/x", "") == "/x/");
  CHECK(quote("a\"b\\c\n") == "\"a\\\"b\\\\c\\n\"");
  CHECK(quote(std::string("\x01", 1)) == "\"\\x01\"");
  CHECK(quote("é") == "\"é\"");
  // Python's tuple repr, as JAX prints shapes.
  CHECK(python_tuple(std::vector<int64_t>{}) == "()");
  CHECK(python_tuple(std::vector<int64_t>{8}) == "(8,)");
  CHECK(python_tuple(std::vector<int64_t>{4, 8}) == "(4, 8)");
}
