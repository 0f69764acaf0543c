// The specs-file reader (src/io/specs.cpp; docs/partition-specs.md): a
// specs object or the tensors of plan's JSON, specs shared between tensors,
// located errors, and the negative-case file.

#include "support/readers.hpp"
#include "support/test_support.hpp"

#include <shardplan/io.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

using namespace shardplan;

namespace {

using test::first_line;
using test::refused;
using test::specs_error;
using test::specs_ok;

PartitionSpec spec_of(std::initializer_list<std::vector<std::string>> dims) {
  PartitionSpec spec;
  for (const auto& axes : dims) {
    spec.dims.push_back(DimSharding{axes});
  }
  return spec;
}

}  // namespace

TEST_CASE("io: reads a specs object", "[io][specs]") {
  SpecsFile f = specs_ok(R"json({"specs": {
    "w": ["fsdp", null],
    "v": [["dp", "fsdp"], "tp"],
    "a/b": [[], ["tp"], null],
    "s": "P(('dp', 'fsdp'), None)",
    "r": [],
    "short": "fsdp,None"}, "other": {"ignored": [1, 2]}})json");
  REQUIRE(f.specs.size() == 6);
  CHECK(f.source == "s.json");
  CHECK(f.specs[0].name == "w");
  CHECK(*f.specs[0].spec == spec_of({{"fsdp"}, {}}));
  CHECK(f.specs[0].pointer == "/specs/w");
  CHECK(*f.specs[1].spec == spec_of({{"dp", "fsdp"}, {"tp"}}));
  // [] is None and ["tp"] is "tp", as jaxlib canonicalises.
  CHECK(*f.specs[2].spec == spec_of({{}, {"tp"}, {}}));
  CHECK(f.specs[2].pointer == "/specs/a~1b");
  CHECK(*f.specs[3].spec == spec_of({{"dp", "fsdp"}, {}}));
  CHECK(*f.specs[4].spec == PartitionSpec{});
  CHECK(*f.specs[5].spec == spec_of({{"fsdp"}, {}}));
}

TEST_CASE("io: reads the tensors of plan output", "[io][specs]") {
  SpecsFile f = specs_ok(R"({"schema_version": 1, "command": "plan",
    "tensors": [
      {"name": "w", "shape": [8, 8], "dtype": "bf16", "spec": ["fsdp", "tp"],
       "rule": {"index": 0, "description": "fsdp"}, "bytes": 128},
      {"name": "b", "spec": [null]}],
    "summary": {"tensors": 2}})");
  REQUIRE(f.specs.size() == 2);
  CHECK(*f.specs[0].spec == spec_of({{"fsdp"}, {"tp"}}));
  CHECK(f.specs[0].pointer == "/tensors/0/spec");
  CHECK(f.specs[1].name == "b");
  CHECK(*f.specs[1].spec == spec_of({{}}));
}

TEST_CASE("io: equal specs of a specs file share one object", "[io][specs]") {
  // a, b, d and f are P('fsdp', None) written four ways (other spacing; [] is
  // None and ["fsdp"] is "fsdp", as jaxlib canonicalises), c and g in text
  // form; e is another spec.
  SpecsFile f = specs_ok(R"json({"specs": {
    "a": ["fsdp", null],
    "b": [ "fsdp" ,null ],
    "c": "P('fsdp', None)",
    "d": [["fsdp"], []],
    "e": ["tp", null],
    "f": ["fsdp", null],
    "g": "P('fsdp', None)"}})json");
  REQUIRE(f.specs.size() == 7);
  const PartitionSpec fsdp = spec_of({{"fsdp"}, {}});
  for (size_t i : {0U, 1U, 2U, 3U, 5U, 6U}) {
    INFO(f.specs[i].name);
    CHECK(*f.specs[i].spec == fsdp);
    CHECK(f.specs[i].spec == f.specs[0].spec);  // the same object
  }
  CHECK(*f.specs[4].spec == spec_of({{"tp"}, {}}));
  CHECK(f.specs[4].spec != f.specs[0].spec);

  // Many tensors, three specs in turn: tensor i has spec i % 3.
  const std::vector<PartitionSpec> three = {
      spec_of({{"fsdp"}, {"tp"}}), spec_of({{}, {"tp"}}), PartitionSpec{}};
  std::string text = R"({"tensors": [)";
  for (size_t i = 0; i < 3000; ++i) {
    const char* spec[] = {R"(["fsdp", "tp"])", R"([null, "tp"])", "[]"};
    text += fmt::format(R"({}{{"name": "w{}", "spec": {}, "shape": [8, 8]}})",
                        i == 0 ? "" : ",\n",
                        i,
                        spec[i % 3]);
  }
  text += "]}";
  SpecsFile many = specs_ok(text);
  REQUIRE(many.specs.size() == 3000);
  for (size_t i = 0; i < many.specs.size(); ++i) {
    INFO(i);
    REQUIRE(many.specs[i].name == fmt::format("w{}", i));
    REQUIRE(*many.specs[i].spec == three[i % 3]);
    REQUIRE(many.specs[i].spec == many.specs[i % 3].spec);
    REQUIRE(many.specs[i].pointer == fmt::format("/tensors/{}/spec", i));
    REQUIRE(many.specs[i].line == static_cast<int64_t>(i) + 1);
  }
}

TEST_CASE("io: tensors of plan output read alike in every form",
          "[io][specs]") {
  // Entries as plan writes them are read from their text; the others
  // (escapes in a name or a key, a text spec, a number with an exponent,
  // non-ASCII text) the full way. Each gives the same name and spec.
  // Columns count code points: line 7's spec starts at byte 33, after the
  // two bytes of "é", so at column 32.
  const std::string text = R"json({"tensors": [
{"name": "w0", "spec": ["fsdp", "tp"], "shape": [8, 8], "rule": {"index": 1, "description": "a \"b\" \\ c"}, "valid": true, "bytes": 128},
{"name": "w\u0031", "spec": ["fsdp", "tp"]},
{"spec": [["fsdp"], "tp"], "name": "w2"},
{"na\u006de": "w3", "spec": "P('fsdp', 'tp')"},
{"name": "w4", "spec": ["fsdp", "tp"], "bytes": 1.28e2, "x": "\u00e9"},
{"é": 1, "name": "w5", "spec": ["fsdp", "tp"]}]})json";
  SpecsFile f = specs_ok(text);
  REQUIRE(f.specs.size() == 6);
  const PartitionSpec fsdp_tp = spec_of({{"fsdp"}, {"tp"}});
  for (size_t i = 0; i < f.specs.size(); ++i) {
    INFO(i);
    CHECK(f.specs[i].name == fmt::format("w{}", i));
    CHECK(*f.specs[i].spec == fsdp_tp);
    CHECK(f.specs[i].spec == f.specs[0].spec);
    CHECK(f.specs[i].pointer == fmt::format("/tensors/{}/spec", i));
    CHECK(f.specs[i].line == static_cast<int64_t>(i) + 2);
  }
  // {"name": "w0", "spec": [  -> the spec at column 24
  CHECK(f.specs[0].column == 24);
  // {"spec": [  -> column 10
  CHECK(f.specs[2].column == 10);
  // {"é": 1, "name": "w5", "spec": [  -> 32 code points before it
  CHECK(f.specs[5].column == 32);
}

TEST_CASE("io: specs errors", "[io][specs]") {
  Diagnostic d = specs_error(R"({"specs": {"w": ["fsdp", [["a"]]]}})");
  CHECK(d.code == "spec.nested-tuple");
  CHECK(first_line(d)
        == "s.json:/specs/w/1/0: error: a tuple inside a PartitionSpec cannot "
           "contain a nested tuple");
  d = specs_error(R"({"specs": {"w": ["fsdp", ""]}})");
  CHECK(d.code == "spec.empty-axis");
  CHECK(first_line(d) == "s.json:/specs/w/1: error: axis name is empty");
  d = specs_error(R"({"specs": {"w": ["a"], "w": ["b"]}})");
  CHECK(d.code == "specs.duplicate-name");
  CHECK(first_line(d)
        == "s.json:/specs/w: error: duplicate tensor name \"w\" (first at "
           "/specs/w)");
  // A string spec is parsed by parse_spec, located in the file at the
  // character it points at: the string opens at column 17 and its text,
  // "P('fsdp', None" (14 characters), ends at column 17 + 1 + 14 = 32, the
  // closing quote, where ")" is missing.
  d = specs_error(R"json({"specs": {"w": "P('fsdp', None"}})json");
  CHECK(d.code == "spec.syntax");
  CHECK(d.location.source == "s.json");
  CHECK(d.location.pointer == "/specs/w");
  CHECK(d.location.line == 1);
  CHECK(d.location.column == 32);
  CHECK(d.tensor == "w");
  // Escapes count as written: in "P(\"a\",,)" the second comma is
  // character 7 of the text P("a",,) and column 17 + 7 + 2 = 26 of the
  // file (the quote, then the 7 characters, each \" one longer).
  d = specs_error(R"json({"specs": {"w": "P(\"a\",,)"}})json");
  CHECK(d.code == "spec.syntax");
  CHECK(d.location.column == 26);
  // \u00e9 is two bytes of text, six characters of the file: the é the
  // error is about is at column 17 + 1 + 2 = 20.
  d = specs_error(R"json({"specs": {"w": "P(\u00e9)"}})json");
  CHECK(d.code == "spec.syntax");
  CHECK(d.location.column == 20);
  d = specs_error(R"({"spec": {"w": []}})");
  CHECK(first_line(d)
        == "s.json:1:1: error: expected a \"specs\" object or a \"tensors\" "
           "array at the top level; did you mean \"specs\" instead of "
           "\"spec\"?");
}

TEST_CASE("io: specs negative cases", "[io][specs]") {
  for (const test::NegativeCase& c : test::load_cases("specs_errors.txt")) {
    DYNAMIC_SECTION(c.name << " (line " << c.line << ")") {
      Diagnostics diags;
      std::optional<SpecsFile> specs = read_specs(c.input, "s.json", diags);
      CHECK(refused(specs));
      CHECK(specs.has_value() == (c.expect_code == "spec.nested-tuple"));
      REQUIRE(diags.error_count() >= 1);
      CHECK(diags.items()[0].code == c.expect_code);
      CHECK(test::first_line_without_code(diags.items()[0])
            == c.expect_message);
    }
  }
}

TEST_CASE(
    "io: every bad spec of a specs file is reported, each naming its "
    "tensor",
    "[io][specs]") {
  // Three specs that do not parse and one nested tuple (a JAX error of a
  // well-formed spec): the reader goes on after each, so a user sees all
  // four in one run. With a spec that is bad input the file is refused.
  const std::string text = R"({"specs": {
    "a": "P('fsdp', ",
    "b": [1],
    "c": [["tp", null]],
    "d": [["tp", ["fsdp"]]],
    "e": ["fsdp"]}})";
  Diagnostics diags;
  CHECK_FALSE(read_specs(text, "s.json", diags));
  REQUIRE(diags.items().size() == 4);
  const std::vector<std::string> tensors = {"a", "b", "c", "d"};
  const std::vector<std::string> codes = {
      "spec.syntax", "json.type", "spec.none-in-tuple", "spec.nested-tuple"};
  for (size_t i = 0; i < 4; ++i) {
    INFO(render(diags.items()[i]));
    CHECK(diags.items()[i].tensor == tensors[i]);
    CHECK(diags.items()[i].code == codes[i]);
  }

  // A nested tuple alone is not bad input: the entry is kept as invalid
  // for check to report with the other plan errors; it names its tensor,
  // also in the tensors[] form where "spec" comes before "name".
  Diagnostics nested;
  std::optional<SpecsFile> file = read_specs(
      R"({"tensors": [{"spec": [["tp", ["fsdp"]]], "name": "w"},
                      {"name": "v", "spec": ["fsdp"]}]})",
      "p.json",
      nested);
  REQUIRE(file);
  REQUIRE(file->specs.size() == 2);
  CHECK_FALSE(file->specs[0].valid);
  CHECK(file->specs[1].valid);
  REQUIRE(nested.items().size() == 1);
  CHECK(nested.items()[0].code == "spec.nested-tuple");
  CHECK(nested.items()[0].tensor == std::optional<std::string>("w"));
}
