// The JSON Schemas in docs/schema/ (docs/output-schema.md): the validator
// itself, the topology files, and real output of every command checked
// against its schema.

#include "support/json_schema.hpp"
#include "support/test_support.hpp"

#include <shardplan/io.hpp>
#include <shardplan/topology.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

using namespace shardplan;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string k_schema_dir =
    std::string(SHARDPLAN_SOURCE_DIR) + "/docs/schema";

// "POINTER KEYWORD" for each error, to compare in one line.
std::vector<std::string> failures(
    const std::vector<test::SchemaError>& errors) {
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

// Validates `instance` against `ref` with a fresh validator; the errors are
// shown on failure.
void require_valid(const json& instance, const std::string& ref) {
  test::SchemaValidator validator(k_schema_dir);
  std::vector<test::SchemaError> errors = validator.validate(instance, ref);
  INFO(ref << ":\n" << test::to_string(errors));
  CHECK(errors.empty());
}

Strings errors_for(const json& instance, const std::string& ref) {
  test::SchemaValidator validator(k_schema_dir);
  return failures(validator.validate(instance, ref));
}

json run_json(const std::vector<std::string>& args, int expected_code = 0) {
  test::CliResult r = test::run_cli(args);
  INFO(r.err);
  CHECK(r.code == expected_code);
  REQUIRE(json::accept(r.out));
  return json::parse(r.out);
}

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
  CHECK(s.check(R"({"a": "x", "b": {}, "extra": 1})")
        == Strings{"/extra additionalProperties"});
  CHECK(s.check(R"({"a": "x", "b": {"c": 1.5}})") == Strings{"/b/c type"});
  CHECK(s.check(R"({"a": "x", "b": {"d/e": 1}})")
        == Strings{"/b/d~1e additionalProperties"});
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
  CHECK(b.check(R"("not a number")")
        == Strings{});  // bounds apply to numbers only
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
  CHECK(str.check(R"("é")")
        == Strings{" minLength"});  // one character, two bytes
}

TEST_CASE("schema: allOf, anyOf, oneOf and not", "[schema]") {
  Scratch one(R"({"oneOf": [{"type": "integer"}, {"minimum": 0}]})");
  CHECK(one.check("-1") == Strings{});
  CHECK(one.check("0.5") == Strings{});
  CHECK(one.check("1") == Strings{" oneOf"});     // both match
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
  v.add("t.schema.json",
        json::parse(R"({"oneOf": [{"type": "integer"}, {"const": "x"}]})"));
  std::vector<test::SchemaError> errors =
      v.validate(json::parse("1.5"), "t.schema.json");
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
  CHECK(failures(
            v.validate(json::parse("[[0, 1], [2, [3]]]"), "grid.schema.json"))
        == Strings{});
  // The outermost oneOf fails; its message leads to the value at fault.
  errors = v.validate(json::parse("[[0, 1], [2, \"x\"]]"), "grid.schema.json");
  REQUIRE(failures(errors) == Strings{" oneOf"});
  CHECK_THAT(errors[0].message,
             Catch::Contains("[1] /1/1: oneOf: matches none"));
}

TEST_CASE("schema: schema problems are errors, never skipped", "[schema]") {
  test::SchemaValidator v(k_schema_dir);
  // An unsupported keyword fails even when the value would pass.
  v.add("pattern.schema.json",
        json::parse(R"({"type": "string", "pattern": "^a"})"));
  std::vector<test::SchemaError> errors =
      v.validate(json::parse(R"("abc")"), "pattern.schema.json");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].in_schema);
  CHECK(errors[0].keyword == "pattern");
  CHECK(errors[0].message == "keyword \"pattern\": unsupported keyword");

  // ... and inside a branch of anyOf, where a miss would otherwise hide it.
  v.add("branch.schema.json",
        json::parse(R"({"anyOf": [{"format": "uri"}, {"type": "integer"}]})"));
  CHECK(failures(v.validate(json::parse("1"), "branch.schema.json"))
        == Strings{" format"});

  // check_schema walks subschemas no instance reaches.
  v.add("unused.schema.json", json::parse(R"({
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$defs": {"never": {"properties": {"x": {"uniqueItems": true}}},
              "typo": {"type": "integr"},
              "dangling": {"$ref": "#/$defs/nowhere"},
              "elsewhere": {"$ref": "missing.schema.json#/$defs/x"}}})"));
  CHECK(failures(v.validate(json::parse("1"), "unused.schema.json"))
        == Strings{});
  CHECK(failures(v.check_schema("unused.schema.json"))
        == (Strings{" $ref", " $ref", " type", " uniqueItems"}));

  // Refs outside the schema folder are not followed; a cycle is caught.
  v.add("far.schema.json",
        json::parse(R"({"$ref": "https://example.com/x.json"})"));
  CHECK(failures(v.validate(json::parse("1"), "far.schema.json"))
        == Strings{" $ref"});
  v.add("cycle.schema.json", json::parse(R"({"$ref": "#"})"));
  CHECK(failures(v.validate(json::parse("1"), "cycle.schema.json"))
        == Strings{" $ref"});
}

// ---------------------------------------------------------------------------
// The schema files.

TEST_CASE("schema: docs/schema files use only supported keywords", "[schema]") {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(k_schema_dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  CHECK(names
        == Strings{"check.schema.json",
                   "common.schema.json",
                   "diagnostics.schema.json",
                   "manifest.schema.json",
                   "mesh.schema.json",
                   "reshard.schema.json",
                   "search.schema.json",
                   "topology-list.schema.json",
                   "topology-show.schema.json",
                   "topology.schema.json"});
  for (const std::string& name : names) {
    test::SchemaValidator validator(k_schema_dir);
    std::vector<test::SchemaError> errors = validator.check_schema(name);
    INFO(name << ":\n" << test::to_string(errors));
    CHECK(errors.empty());
  }
}

TEST_CASE("schema: the catalogue files validate against topology.schema.json",
          "[schema]") {
  fs::path dir = fs::path(SHARDPLAN_SOURCE_DIR) / "configs" / "topologies";
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    ++files;
    DYNAMIC_SECTION(entry.path().filename().string()) {
      json family = json::parse(test::slurp(entry.path().string()));
      require_valid(family, "topology.schema.json");
      require_valid(family, "topology.schema.json#/$defs/catalogue_family");
    }
  }
  CHECK(files > 0);
  CHECK(files == catalogue_families().size());
}

TEST_CASE("schema: broken catalogue files fail topology.schema.json",
          "[schema]") {
  const std::string ref = "topology.schema.json#/$defs/catalogue_family";
  json v5p = json::parse(test::slurp(std::string(SHARDPLAN_SOURCE_DIR)
                                     + "/configs/topologies/v5p.json"));
  json h100 = json::parse(test::slurp(std::string(SHARDPLAN_SOURCE_DIR)
                                      + "/configs/topologies/h100.json"));
  require_valid(v5p, ref);

  // Each copy breaks one thing; the failing branch is the family's own.
  json no_source = v5p;
  no_source["figures"]["ici_latency_s"].erase("source");
  CHECK(errors_for(no_source, "topology.schema.json#/$defs/tpu_family")
        == Strings{"/figures/ici_latency_s required"});
  CHECK(errors_for(no_source, ref) == Strings{" oneOf"});
  CHECK(errors_for(no_source, "topology.schema.json") == Strings{" oneOf"});

  json bare_figure = h100;
  bare_figure["figures"]["nvlink_latency_s"] = 6e-7;
  CHECK(errors_for(bare_figure, "topology.schema.json#/$defs/gpu_family")
        == Strings{"/figures/nvlink_latency_s type"});

  json unknown_kind = v5p;
  unknown_kind["kind"] = "fpga";
  CHECK(errors_for(unknown_kind, "topology.schema.json#/$defs/tpu_family")
        == Strings{"/kind const"});
  CHECK(errors_for(unknown_kind, ref) == Strings{" oneOf"});

  json float_count = v5p;
  float_count["tensorcores_per_chip"] = 2.0;
  CHECK(errors_for(float_count, "topology.schema.json#/$defs/tpu_family")
        == Strings{"/tensorcores_per_chip type"});

  json bad_rule = v5p;
  bad_rule["wraparound"]["rule"] = "always";
  CHECK(errors_for(bad_rule, "topology.schema.json#/$defs/tpu_family")
        == Strings{"/wraparound oneOf"});

  json unknown_key = h100;
  unknown_key["gpus_per_node"] = 8;
  CHECK(errors_for(unknown_key, "topology.schema.json#/$defs/gpu_family")
        == Strings{"/gpus_per_node additionalProperties"});

  json unknown_figure = h100;
  unknown_figure["figures"]["ici_latency_s"] =
      h100["figures"]["nvlink_latency_s"];
  CHECK(errors_for(unknown_figure, "topology.schema.json#/$defs/gpu_family")
        == Strings{"/figures/ici_latency_s additionalProperties"});
}

TEST_CASE("schema: user topology files", "[schema]") {
  // What docs/topologies.md shows, and what `topology show` writes: each is
  // valid and the reader accepts it.
  Strings valid = {
      R"({"chip": "v5e", "shape": [4, 4]})",
      R"({"name": "lab", "chip": "v5litepod", "shape": [4, 4], "slices": 2,
          "hbm_bytes_per_device": 1.6e10})",
      R"({"chip": "v5p", "shape": [4, 4, 8], "host_bounds": [2, 2, 1],
          "wraparound": [true, true, false], "devices": 128, "kind": "tpu",
          "figures": {"ici_latency_s": 2e-6,
                      "hbm_bytes_per_device": {"value": 9e10, "source": "our pod"}}})",
      R"({"chip": "h100", "devices": 16, "gpus_per_host": 4, "nvlink_domain": 4,
          "figures": {"network_bytes_per_s_per_gpu": {"value": 2.5e10}}})",
  };
  for (const std::string& text : valid) {
    INFO(text);
    require_valid(json::parse(text), "topology.schema.json");
    require_valid(json::parse(text),
                  "topology.schema.json#/$defs/topology_file");
    Diagnostics diags;
    CHECK(read_topology_file(text, "user.json", diags));
    CHECK(test::first_error(diags).empty());
  }
  for (const char* name :
       {"v5p-128", "2xv5e-256", "v2-8", "h100x64", "gb200x144"}) {
    INFO(name);
    json shown = run_json(test::args("topology show {} --format json", name));
    require_valid(shown, "topology.schema.json");
    require_valid(shown["topology"], "topology.schema.json");
    Diagnostics diags;
    CHECK(read_topology_file(shown.dump(), "shown.json", diags));
    CHECK(test::first_error(diags).empty());
  }

  const std::string ref = "topology.schema.json#/$defs/tpu_file";
  CHECK(errors_for(json::parse(R"({"shape": [4, 4]})"), ref)
        == Strings{" required"});
  CHECK(errors_for(json::parse(R"({"chip": "v5e", "shape": [4.0, 4]})"), ref)
        == Strings{"/shape/0 type"});
  CHECK(errors_for(
            json::parse(R"({"chip": "v5e", "shape": [4, 4], "kind": "gpu"})"),
            ref)
        == Strings{"/kind const"});
  CHECK(
      errors_for(json::parse(
                     R"({"chip": "v5e", "shape": [4, 4], "nvlink_domain": 8})"),
                 ref)
      == Strings{"/nvlink_domain additionalProperties"});
  CHECK(errors_for(json::parse(R"({"chip": "v5e", "shape": [4, 4],
                                   "figures": {"ici_latency_s": {"source": "x"}}})"),
                   ref)
        == Strings{"/figures/ici_latency_s oneOf"});
  CHECK(errors_for(json::parse(R"({"chip": "h100", "shape": [4, 4]})"),
                   "topology.schema.json")
        == Strings{" oneOf"});
}

// ---------------------------------------------------------------------------
// Real output of the command line.

TEST_CASE("schema: mesh output validates", "[schema]") {
  SECTION("--devices") {
    json doc = run_json(
        test::args("mesh --mesh dp:4,tp:2:explicit --devices 8 --dcn dp:2 "
                   "--format json"));
    CHECK_FALSE(doc.contains("topology"));
    require_valid(doc, "mesh.schema.json");
    json one_axis =
        run_json(test::args("mesh --mesh fsdp:-1 --devices 4 --format json"));
    require_valid(one_axis, "mesh.schema.json");
  }
  SECTION("--topology v5p-128: a torus assignment") {
    json doc = run_json(test::args(
        "mesh --topology v5p-128 --mesh fsdp:-1,tp:4 --format json"));
    CHECK(doc["physical_assignment"].is_array());
    require_valid(doc, "mesh.schema.json");
  }
  SECTION("--topology v5e-16: a ring order, no assignment") {
    json doc = run_json(
        test::args("mesh --topology v5e-16 --mesh a:16 --format json"));
    CHECK(doc["physical_assignment"].is_null());
    require_valid(doc, "mesh.schema.json");
  }
  SECTION("--topology h100x64") {
    json doc = run_json(test::args(
        "mesh --topology h100x64 --mesh dp:2,fsdp:4,tp:8 --format json"));
    CHECK(doc["topology"]["kind"] == "gpu");
    require_valid(doc, "mesh.schema.json");
  }
  SECTION("--topology 2xv5e-256: two slices") {
    json doc = run_json(
        test::args("mesh --topology 2xv5e-256 --mesh dp:2,fsdp:16,tp:16 "
                   "--format json"));
    CHECK(doc["axes_links"][0]["link"] == "dcn");
    require_valid(doc, "mesh.schema.json");
  }
}

TEST_CASE("schema: a renamed, dropped or retyped output key fails",
          "[schema]") {
  json doc = run_json(
      test::args("mesh --topology v5p-128 --mesh fsdp:-1,tp:4 --format json"));
  require_valid(doc, "mesh.schema.json");

  json renamed = doc;
  renamed["axes_links"][1]["ring"] = renamed["axes_links"][1]["ring_size"];
  renamed["axes_links"][1].erase("ring_size");
  CHECK(errors_for(renamed, "mesh.schema.json")
        == (Strings{"/axes_links/1 required",
                    "/axes_links/1/ring additionalProperties"}));

  json dropped = doc;
  dropped.erase("hosts");
  CHECK(errors_for(dropped, "mesh.schema.json") == Strings{" oneOf"});

  json float_bytes = doc;
  float_bytes["topology"]["hbm_bytes_per_device"] = 102005473280.0;
  CHECK(errors_for(float_bytes["topology"],
                   "common.schema.json#/$defs/tpu_topology")
        == Strings{"/hbm_bytes_per_device type"});

  json wrong_link = doc;
  wrong_link["axes_links"][0]["link"] = "torus";
  CHECK(errors_for(wrong_link, "mesh.schema.json")
        == Strings{"/axes_links/0/link enum"});

  json ragged = doc;
  ragged["device_ids"][0][0] = "0";
  CHECK(errors_for(ragged, "mesh.schema.json")
        == Strings{"/device_ids/0 oneOf"});
}

TEST_CASE("schema: topology list and show output validates", "[schema]") {
  json list = run_json(test::args("topology list --format json"));
  CHECK(list["topologies"].size() > 60);
  require_valid(list, "topology-list.schema.json");
  for (const char* name :
       {"v5p-128", "v2-8", "2xv5e-256", "h100x64", "gb200x144"}) {
    INFO(name);
    require_valid(run_json(test::args("topology show {} --format json", name)),
                  "topology-show.schema.json");
  }
}

TEST_CASE("schema: manifest output validates", "[schema]") {
  json doc = run_json(test::args("manifest --manifest {} --format json",
                                 test::data_path("manifests/small.json")));
  CHECK(doc["params"][1]["logical_axes"][0].is_null());
  CHECK(doc["params"][4]["shape"] == json::array());
  require_valid(doc, "manifest.schema.json");
  require_valid(run_json(test::args("manifest --manifest {} --format json",
                                    std::string(SHARDPLAN_SOURCE_DIR)
                                        + "/configs/examples/tiny-llama.json")),
                "manifest.schema.json");
}

TEST_CASE("schema: plan output validates", "[schema]") {
  const std::string examples =
      std::string(SHARDPLAN_SOURCE_DIR) + "/configs/examples/";
  json doc = run_json(
      test::args("plan --manifest {} --topology v5e-8 --mesh fsdp:2,tp:4 "
                 "--format json",
                 examples + "tiny-llama.json"));
  CHECK(doc["rules"]["source"] == "configs/rules/fsdp-tp.json");
  CHECK(doc["rules"]["name"] == "fsdp-tp");
  CHECK(doc["tensors"][0]["rule"]["index"].is_number_integer());
  require_valid(doc, "check.schema.json");
  // A plan document with both a rules object and specs_file does not.
  doc["specs_file"] = "s.json";
  CHECK_FALSE(errors_for(doc, "check.schema.json").empty());
}

TEST_CASE("schema: check and memory output validates", "[schema]") {
  const std::string examples =
      std::string(SHARDPLAN_SOURCE_DIR) + "/configs/examples/";
  auto args = [&](std::string command,
                  std::string specs,
                  std::vector<std::string> more) {
    std::vector<std::string> out =
        test::args("{} --manifest {} --specs {} --format json",
                   command,
                   examples + "tiny-llama.json",
                   specs);
    out.insert(out.end(), more.begin(), more.end());
    return out;
  };
  const std::string good = examples + "tiny-llama.specs.json";
  const std::string bad = test::data_path("check/tiny-llama.bad-specs.json");
  SECTION("check on a topology, no problems") {
    json doc = run_json(args(
        "check",
        good,
        test::args(
            "--topology v5e-8 --mesh fsdp:2,tp:4 --recipe adam --zero 3")));
    CHECK(doc["memory"]["fits"] == true);
    require_valid(doc, "check.schema.json");
  }
  SECTION("check with every fault: null specs, located diagnostics") {
    json doc = run_json(
        args("check", bad, test::args("--topology v5e-8 --mesh fsdp:2,tp:4")),
        1);
    CHECK(doc["tensors"][2]["spec"].is_null());
    require_valid(doc, "check.schema.json");
  }
  SECTION("memory with --devices: HBM unknown") {
    json doc = run_json(
        args("memory", good, test::args("--devices 8 --mesh fsdp:2,tp:4")));
    CHECK(doc["memory"]["hbm_bytes"].is_null());
    CHECK(doc["memory"]["fits"].is_null());
    CHECK(doc["memory"]["largest"].size() == 20);
    require_valid(doc, "check.schema.json");
    // A memory document without by_dtype still validates; one with a
    // misspelt key does not.
    doc["memory"]["by_dtypes"] = doc["memory"]["by_dtype"];
    CHECK_FALSE(errors_for(doc, "check.schema.json").empty());
  }
  SECTION("memory with stage and expert axes: placement and stages") {
    json doc =
        run_json(args("memory",
                      good,
                      test::args("--devices 16 --mesh pp:2,ep:2,fsdp:2,tp:2")));
    CHECK(doc["memory"]["placement"]["stages"] == 2);
    CHECK(doc["memory"]["placement"]["expert_ranks"] == 2);
    CHECK(doc["memory"]["stages"].size() == 2);
    require_valid(doc, "check.schema.json");
    doc["memory"]["stages"][0]["layers"] = 1;
    CHECK_FALSE(errors_for(doc, "check.schema.json").empty());
  }
  SECTION("without a workload: workload and activations are null") {
    json doc = run_json(
        args("check", good, test::args("--topology v5e-8 --mesh fsdp:2,tp:4")));
    CHECK(doc["workload"].is_null());
    CHECK(doc["memory"]["activations"].is_null());
    CHECK(doc["memory"]["per_device"]["activations"] == 0);
    require_valid(doc, "check.schema.json");
  }
}

TEST_CASE("schema: plan and memory with a workload validate", "[schema]") {
  SECTION("pipeline stages and an offloading policy") {
    json doc = run_json(test::args(
        "memory --model llama-3-8b --rules fsdp-tp --topology v5p-128 "
        "--mesh pp:4,fsdp:4,tp:4 --seq 4096 --batch 64 "
        "--microbatches 8 --remat minimal_offloaded --recipe adam "
        "--format json"));
    const json& a = doc["memory"]["activations"];
    CHECK(a["stages"] == 4);
    CHECK(a["per_stage"].size() == 4);
    CHECK(doc["memory"]["per_device"]["host_offload"].get<int64_t>() > 0);
    CHECK(doc["workload"]["remat"] == "minimal_offloaded");
    require_valid(doc, "check.schema.json");
    json bad = doc;
    bad["memory"]["activations"]["saved"][0]["bytes"] = 1;
    CHECK_FALSE(errors_for(bad, "check.schema.json").empty());
    bad = doc;
    bad["workload"]["remat"] = "fulll";
    CHECK_FALSE(errors_for(bad, "check.schema.json").empty());
  }
  SECTION("a mixture-of-experts model on a plan") {
    json doc = run_json(test::args(
        "plan --model mixtral-8x7b-v0.1 --topology v5p-128 --mesh fsdp:16,ep:4 "
        "--seq 4096 --per-device-batch 1 --format json"));
    CHECK(doc["workload"]["global_batch"] == 64);
    CHECK(doc["memory"]["activations"]["saved"][0]["layer"] == "moe");
    require_valid(doc, "check.schema.json");
  }
}

TEST_CASE("schema: search output validates", "[schema]") {
  json doc = run_json(
      test::args("search --topology 2xv5p-256 --model llama-3-8b --seq 4096 "
                 "--per-device-batch 1 --remat full,minimal --format json"));
  CHECK(doc["command"] == "search");
  REQUIRE_FALSE(doc["candidates"].empty());
  require_valid(doc, "search.schema.json");
  // A candidate with a misspelt reason does not.
  for (json& c : doc["candidates"]) {
    if (!c["dropped"].is_null()) {
      c["dropped"]["reason"] = "layouts";
      CHECK_FALSE(errors_for(doc, "search.schema.json").empty());
      break;
    }
  }
}

TEST_CASE("schema: reshard output validates", "[schema]") {
  SECTION("a model with rules on one topology") {
    json doc = run_json(test::args(
        "reshard --topology v5p-128 --model llama-3-8b --from-mesh fsdp:64 "
        "--from-rules fsdp --to-mesh fsdp:16,tp:4 --to-rules fsdp-tp "
        "--donate --format json"));
    CHECK(doc["tensors"].size() == 291);
    require_valid(doc, "reshard.schema.json");
    // A misspelt key, or a float byte count, does not.
    json renamed = doc;
    renamed["tensors"][0]["step"] = renamed["tensors"][0]["steps"];
    renamed["tensors"][0].erase("steps");
    CHECK(errors_for(renamed, "reshard.schema.json")
          == (Strings{"/tensors/0 required",
                      "/tensors/0/step additionalProperties"}));
    json float_bytes = doc;
    float_bytes["totals"]["bytes_per_device"] = 1.5;
    CHECK(errors_for(float_bytes, "reshard.schema.json")
          == Strings{"/totals/bytes_per_device type"});
  }
  SECTION("one tensor with --devices, --partial and tuple specs") {
    json doc = run_json(test::args(
        "reshard --devices 8 --from-mesh dp:2,fsdp:2,tp:2 --to-mesh fsdp:8 "
        "--shape 64,32 --dtype f32 --from-spec (dp,fsdp),None "
        "--to-spec fsdp --partial tp --format json"));
    CHECK_FALSE(doc["from"].contains("topology"));
    CHECK(doc["tensors"][0]["from_spec"]
          == json::parse(R"([["dp", "fsdp"], null])"));
    require_valid(doc, "reshard.schema.json");
  }
  SECTION("two topologies of one family") {
    json doc = run_json(
        test::args("reshard --from-topology 2xv5e-16 --to-topology v5e-16 "
                   "--from-mesh dp:2,fsdp:16 --to-mesh fsdp:16 --model gpt2 "
                   "--from-rules fsdp --to-rules fsdp --format json"));
    require_valid(doc, "reshard.schema.json");
  }
  SECTION("bad input: a diagnostics document") {
    json doc = run_json(
        test::args(
            "reshard --devices 8 --from-mesh a:8 --to-mesh a:8 --shape 8 "
            "--dtype f32 --from-spec b --to-spec a --format json"),
        2);
    require_valid(doc, "diagnostics.schema.json");
    CHECK_FALSE(errors_for(doc, "reshard.schema.json").empty());
  }
}

TEST_CASE(
    "schema: bad-input documents validate against diagnostics.schema.json",
    "[schema][bad-inputs]") {
  SECTION("a bad mesh: line and column") {
    json doc = run_json(
        test::args("mesh --mesh dp:2,tp:x --devices 8 --format json"), 2);
    CHECK(doc["diagnostics"][0]["location"].contains("column"));
    require_valid(doc, "diagnostics.schema.json");
  }
  SECTION("plan check and memory with a bad mesh") {
    for (const char* command : {"plan", "check", "memory"}) {
      std::vector<std::string> args = test::args(
          "{} --devices 8 --mesh dp:3 --model gpt2 --format json", command);
      if (std::string(command) != "plan") {
        args.insert(
            args.end(),
            {"--specs", test::data_path("check/tiny-llama.bad-specs.json")});
      }
      json doc = run_json(args, 2);
      INFO(command);
      CHECK(doc["command"] == command);
      require_valid(doc, "diagnostics.schema.json");
    }
  }
  SECTION("an unknown topology: a flag, no position") {
    json doc = run_json(
        test::args("mesh --topology v5x-128 --mesh a:128 --format json"), 2);
    require_valid(doc, "diagnostics.schema.json");
    // Not a mesh document: the mesh schema rejects it.
    CHECK_FALSE(errors_for(doc, "mesh.schema.json").empty());
  }
  // Every file of the bad-input corpus a command reads.
  fs::path root = test::data_path("bad_inputs");
  for (const std::string& kind : Strings{"mesh", "manifest", "topology"}) {
    size_t files = 0;
    for (const auto& entry : fs::directory_iterator(root / kind)) {
      ++files;
      const std::string path = entry.path().string();
      DYNAMIC_SECTION(kind << "/" << entry.path().filename().string()) {
        std::vector<std::string> args;
        if (kind == "mesh") {
          std::string text = test::slurp(path);
          if (!text.empty() && text.back() == '\n') {
            text.pop_back();
          }
          args = test::args("mesh --mesh {} --devices 8", text);
        } else if (kind == "manifest") {
          args = test::args("manifest --manifest {}", path);
        } else {
          args = test::args("topology show {}", path);
        }
        args.insert(args.end(), {"--format", "json"});
        require_valid(run_json(args, 2), "diagnostics.schema.json");
      }
    }
    INFO(kind);
    CHECK(files > 0);  // an empty folder would validate nothing
  }
}
