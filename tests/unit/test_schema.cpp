// The JSON Schemas in docs/schema/ (DESIGN.md section 3): the validator
// itself, the topology files, and real output of every command checked
// against its schema.

#include <shardplan/topology.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support/json_schema.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

using namespace shardplan;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string k_schema_dir = std::string(SHARDPLAN_SOURCE_DIR) + "/docs/schema";

// "POINTER KEYWORD" for each error, to compare in one line.
std::vector<std::string> failures(const std::vector<test::SchemaError>& errors) {
  std::vector<std::string> out;
  for (const test::SchemaError& e : errors) {
    out.push_back(e.pointer + " " + e.keyword);
  }
  // Keywords are met in the order nlohmann::json keeps keys (sorted), which
  // is no contract: compare sorted lists.
  std::sort(out.begin(), out.end());
  return out;
}

using Strings = std::vector<std::string>;

// A validator with one in-memory schema "t.schema.json" (and any others).
struct Scratch {
  test::SchemaValidator validator{k_schema_dir};

  explicit Scratch(const std::string& schema) {
    validator.add("t.schema.json", json::parse(schema));
  }
  Strings check(const std::string& instance) {
    return failures(validator.validate(json::parse(instance), "t.schema.json"));
  }
};

}  // namespace

// ---------------------------------------------------------------------------
// The validator: each keyword passes what it should and fails what it should.

TEST_CASE("schema: type tells integers from numbers", "[schema]") {
  Scratch s(R"({"type": "integer"})");
  CHECK(s.check("3") == Strings{});
  CHECK(s.check("-3") == Strings{});
  CHECK(s.check("3.0") == Strings{" type"});
  CHECK(s.check("3.5") == Strings{" type"});
  CHECK(s.check(R"("3")") == Strings{" type"});

  Scratch n(R"({"type": "number"})");
  CHECK(n.check("3") == Strings{});
  CHECK(n.check("3.5e10") == Strings{});
  CHECK(n.check("null") == Strings{" type"});

  Scratch either(R"({"type": ["array", "null"]})");
  CHECK(either.check("[]") == Strings{});
  CHECK(either.check("null") == Strings{});
  CHECK(either.check("{}") == Strings{" type"});
  CHECK(either.check("false") == Strings{" type"});
}

TEST_CASE("schema: properties, required and additionalProperties", "[schema]") {
  Scratch s(R"({
    "type": "object",
    "required": ["a", "b"],
    "properties": {"a": {"type": "string"}, "b": {"type": "object",
                   "properties": {"c": {"type": "integer"}}, "additionalProperties": false},
                   "gone": false},
    "additionalProperties": false})");
  CHECK(s.check(R"({"a": "x", "b": {}})") == Strings{});
  CHECK(s.check(R"({"a": "x", "b": {"c": 1}})") == Strings{});
  CHECK(s.check(R"({"a": "x"})") == Strings{" required"});
  CHECK(s.check(R"({"b": {}})") == Strings{" required"});
  CHECK(s.check(R"({"a": "x", "b": {}, "extra": 1})") == Strings{"/extra additionalProperties"});
  CHECK(s.check(R"({"a": "x", "b": {"c": 1.5}})") == Strings{"/b/c type"});
  CHECK(s.check(R"({"a": "x", "b": {"d/e": 1}})") == Strings{"/b/d~1e additionalProperties"});
  CHECK(s.check(R"({"a": "x", "b": {}, "gone": 1})") == Strings{"/gone false"});
  CHECK(s.check(R"({"a": 1, "b": []})") == (Strings{"/a type", "/b type"}));
  CHECK(s.check("[]") == Strings{" type"});

  // additionalProperties as a schema applies to the keys properties lacks.
  Scratch map(R"({"properties": {"n": {"type": "string"}},
                  "additionalProperties": {"type": "integer", "minimum": 0}})");
  CHECK(map.check(R"({"n": "x", "a": 1, "b": 2})") == Strings{});
  CHECK(map.check(R"({"n": "x", "a": -1})") == Strings{"/a minimum"});
}

TEST_CASE("schema: enum, const and number bounds", "[schema]") {
  Scratch e(R"({"enum": ["ici", "dcn", 3]})");
  CHECK(e.check(R"("dcn")") == Strings{});
  CHECK(e.check("3") == Strings{});
  CHECK(e.check(R"("nvlink")") == Strings{" enum"});
  CHECK(e.check(R"("ICI")") == Strings{" enum"});

  Scratch c(R"({"const": 1})");
  CHECK(c.check("1") == Strings{});
  CHECK(c.check("2") == Strings{" const"});

  Scratch b(R"({"minimum": 1, "maximum": 8})");
  CHECK(b.check("1") == Strings{});
  CHECK(b.check("8") == Strings{});
  CHECK(b.check("0") == Strings{" minimum"});
  CHECK(b.check("8.5") == Strings{" maximum"});
  CHECK(b.check(R"("not a number")") == Strings{});  // bounds apply to numbers only
  Scratch x(R"({"exclusiveMinimum": 0})");
  CHECK(x.check("1e-9") == Strings{});
  CHECK(x.check("0") == Strings{" exclusiveMinimum"});
  // Integers beyond 2^53 are compared exactly.
  Scratch big(R"({"minimum": 9007199254740993})");
  CHECK(big.check("9007199254740993") == Strings{});
  CHECK(big.check("9007199254740992") == Strings{" minimum"});
}

TEST_CASE("schema: arrays and strings", "[schema]") {
  Scratch s(R"({"type": "array", "minItems": 2, "maxItems": 3,
                "prefixItems": [{"type": "string"}], "items": {"type": "integer"}})");
  CHECK(s.check(R"(["x", 1])") == Strings{});
  CHECK(s.check(R"(["x", 1, 2])") == Strings{});
  CHECK(s.check(R"(["x"])") == Strings{" minItems"});
  CHECK(s.check(R"(["x", 1, 2, 3])") == Strings{" maxItems"});
  CHECK(s.check(R"([1, 1])") == Strings{"/0 type"});
  CHECK(s.check(R"(["x", "y"])") == Strings{"/1 type"});

  Scratch str(R"({"type": "string", "minLength": 2})");
  CHECK(str.check(R"("ab")") == Strings{});
  CHECK(str.check(R"("é")") == Strings{" minLength"});  // one character, two bytes
}

TEST_CASE("schema: allOf, anyOf, oneOf and not", "[schema]") {
  Scratch one(R"({"oneOf": [{"type": "integer"}, {"minimum": 0}]})");
  CHECK(one.check("-1") == Strings{});
  CHECK(one.check("0.5") == Strings{});
  CHECK(one.check("1") == Strings{" oneOf"});   // both match
  CHECK(one.check("-0.5") == Strings{" oneOf"});  // neither
  Scratch any(R"({"anyOf": [{"type": "integer"}, {"minimum": 0}]})");
  CHECK(any.check("1") == Strings{});
  CHECK(any.check("-0.5") == Strings{" anyOf"});
  Scratch all(R"({"allOf": [{"type": "integer"}, {"minimum": 0}]})");
  CHECK(all.check("1") == Strings{});
  CHECK(all.check("-1") == Strings{" minimum"});
  Scratch no(R"({"not": {"type": "string"}})");
  CHECK(no.check("1") == Strings{});
  CHECK(no.check(R"("s")") == Strings{" not"});

  // The message names what each branch missed.
  test::SchemaValidator v(k_schema_dir);
  v.add("t.schema.json", json::parse(R"({"oneOf": [{"type": "integer"}, {"const": "x"}]})"));
  std::vector<test::SchemaError> errors = v.validate(json::parse("1.5"), "t.schema.json");
  REQUIRE(errors.size() == 1);
  CHECK(test::to_string(errors[0])
        == "(root): oneOf: matches none of the 2 subschemas; [0] (root): type: expected "
           "integer, got number 1.5; [1] (root): const: got 1.5, expected \"x\" (at "
           "t.schema.json#/oneOf)");
}

TEST_CASE("schema: $ref within a file and to another file", "[schema]") {
  test::SchemaValidator v(k_schema_dir);
  v.add("other.schema.json", json::parse(R"({
    "$defs": {"size": {"type": "integer", "minimum": 1},
              "axis": {"type": "object", "required": ["size"],
                       "properties": {"size": {"$ref": "#/$defs/size"}}}}})"));
  v.add("t.schema.json", json::parse(R"({
    "type": "array",
    "items": {"$ref": "#/$defs/entry"},
    "$defs": {"entry": {"$ref": "other.schema.json#/$defs/axis"}}})"));
  auto check = [&](const std::string& instance) {
    return failures(v.validate(json::parse(instance), "t.schema.json"));
  };
  std::vector<test::SchemaError> errors;
  CHECK(check(R"([{"size": 2}, {"size": 1}])") == Strings{});
  // "#/$defs/size" inside other.schema.json resolves in other.schema.json.
  CHECK(check(R"([{"size": 2}, {"size": 0}])") == Strings{"/1/size minimum"});
  CHECK(check(R"([{"size": 2.0}])") == Strings{"/0/size type"});
  CHECK(check(R"([{}])") == Strings{"/0 required"});
  // A fragment of a file is a valid starting point too.
  CHECK(failures(v.validate(json::parse("0"), "other.schema.json#/$defs/size"))
        == Strings{" minimum"});

  // A recursive schema: nested arrays of integers.
  v.add("grid.schema.json", json::parse(R"({"$ref": "#/$defs/g", "$defs": {"g":
    {"oneOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#/$defs/g"}}]}}})"));
  CHECK(failures(v.validate(json::parse("[[0, 1], [2, [3]]]"), "grid.schema.json")) == Strings{});
  // The outermost oneOf fails; its message leads to the value at fault.
  errors = v.validate(json::parse("[[0, 1], [2, \"x\"]]"), "grid.schema.json");
  REQUIRE(failures(errors) == Strings{" oneOf"});
  CHECK_THAT(errors[0].message, Catch::Contains("[1] /1/1: oneOf: matches none"));
}

TEST_CASE("schema: schema problems are errors, never skipped", "[schema]") {
  test::SchemaValidator v(k_schema_dir);
  // An unsupported keyword fails even when the value would pass.
  v.add("pattern.schema.json", json::parse(R"({"type": "string", "pattern": "^a"})"));
  std::vector<test::SchemaError> errors =
      v.validate(json::parse(R"("abc")"), "pattern.schema.json");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].in_schema);
  CHECK(errors[0].keyword == "pattern");
  CHECK(errors[0].message == "keyword \"pattern\": unsupported keyword");

  // ... and inside a branch of anyOf, where a miss would otherwise hide it.
  v.add("branch.schema.json",
        json::parse(R"({"anyOf": [{"format": "uri"}, {"type": "integer"}]})"));
  CHECK(failures(v.validate(json::parse("1"), "branch.schema.json")) == Strings{" format"});

  // check_schema walks subschemas no instance reaches.
  v.add("unused.schema.json", json::parse(R"({
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$defs": {"never": {"properties": {"x": {"uniqueItems": true}}},
              "typo": {"type": "integr"},
              "dangling": {"$ref": "#/$defs/nowhere"},
              "elsewhere": {"$ref": "missing.schema.json#/$defs/x"}}})"));
  CHECK(failures(v.validate(json::parse("1"), "unused.schema.json")) == Strings{});
  CHECK(failures(v.check_schema("unused.schema.json"))
        == (Strings{" $ref", " $ref", " type", " uniqueItems"}));

  // Refs outside the schema folder are not followed; a cycle is caught.
  v.add("far.schema.json", json::parse(R"({"$ref": "https://example.com/x.json"})"));
  CHECK(failures(v.validate(json::parse("1"), "far.schema.json")) == Strings{" $ref"});
  v.add("cycle.schema.json", json::parse(R"({"$ref": "#"})"));
  CHECK(failures(v.validate(json::parse("1"), "cycle.schema.json")) == Strings{" $ref"});
}
