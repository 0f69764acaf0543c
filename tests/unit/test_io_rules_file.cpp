// The rules-file reader (include/shardplan/io_rules.hpp): the example of
// docs/rules.md read key by key, located errors for every kind of problem (the
// negative cases live in tests/data/bad_rules/, one file per case), warnings,
// and inputs that must never crash it.

#include "support/test_support.hpp"

#include <shardplan/io.hpp>
#include <shardplan/rules.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

using namespace shardplan;

namespace {

RuleSet rules_ok(std::string_view text, Diagnostics* warnings = nullptr) {
  Diagnostics diags;
  std::optional<RuleSet> rules = read_rules(text, "r.json", diags);
  INFO("text: " << text);
  INFO(test::first_error(diags));
  REQUIRE(rules);
  REQUIRE_FALSE(diags.has_errors());
  if (warnings != nullptr) {
    *warnings = diags;
  } else {
    REQUIRE(diags.items().empty());
  }
  return std::move(*rules);
}

Diagnostic rules_error(std::string_view text) {
  Diagnostics diags;
  std::optional<RuleSet> rules = read_rules(text, "r.json", diags);
  INFO("text: " << text);
  CHECK_FALSE(rules);
  REQUIRE(diags.error_count() >= 1);
  return diags.items()[0];
}

std::vector<AxisRef> axes(
    std::initializer_list<std::pair<const char*, const char*>> list) {
  std::vector<AxisRef> out;
  for (const auto& [name, pointer] : list) {
    out.push_back(AxisRef{name, pointer});
  }
  return out;
}

}  // namespace

TEST_CASE("io_rules: reads the docs/rules.md example key by key",
          "[io][rules_file]") {
  const RuleSet r = rules_ok(R"({"rules": [
  {"pattern": "embed_tokens", "spec": ["tp", "fsdp"]},
  {"pattern": "norm", "spec": []},
  {"pattern": "(q|k|v)_proj", "logical_axes": ["q_heads", "embed"]},
  {"pattern": "mlp", "fsdp": {"axis": "fsdp", "min_size_mb": 4}},
  {"shape": [null, 1024], "spec": ["tp", null]},
  {"auto": {"axes": ["fsdp", "tp"], "min_shard_size": 1024, "reverse": false}, "fallthrough": true},
  {"memory": {"max_bytes_per_device": 4194304}},
  {"mesh_helper": {"min_shard_size": 1024}},
  {"pattern": ".*", "replicate": true}],
 "logical_axis_rules": [["embed", "fsdp"], ["mlp", ["tp"]], ["q_heads", "tp"], ["norm", []]],
 "min_size": 0,
 "unmatched": "error"})");
  CHECK(r.source == "r.json");
  CHECK_FALSE(r.preset);
  CHECK(r.min_size == 0);
  CHECK(r.unmatched == Unmatched::error);
  REQUIRE(r.rules.size() == 9);

  CHECK(r.rules[0].pattern == "embed_tokens");
  CHECK(r.rules[0].pointer == "/rules/0");
  CHECK(r.rules[0].yield
        == RuleYield{SpecYield{RuleSpec{{axes({{"tp", "/rules/0/spec/0"}}),
                                         axes({{"fsdp", "/rules/0/spec/1"}})},
                                        "/rules/0/spec"}}});
  CHECK(r.rules[1].yield
        == RuleYield{SpecYield{RuleSpec{{}, "/rules/1/spec"}}});
  const auto& logical = std::get<LogicalAxesYield>(r.rules[2].yield);
  CHECK_FALSE(logical.from_manifest);
  CHECK(logical.names == LogicalAxes{"q_heads", "embed"});
  CHECK(r.rules[3].yield
        == RuleYield{FsdpYield{axes({{"fsdp", "/rules/3/fsdp/axis"}}), 4.0}});
  CHECK(r.rules[4].shape == ShapePattern{std::nullopt, 1024});
  CHECK_FALSE(r.rules[4].pattern);
  CHECK(std::get<SpecYield>(r.rules[4].yield).spec.dims.size() == 2);
  const auto& a = std::get<AutoYield>(r.rules[5].yield);
  REQUIRE(a.axes);
  CHECK(*a.axes
        == axes({{"fsdp", "/rules/5/auto/axes/0"},
                 {"tp", "/rules/5/auto/axes/1"}}));
  CHECK(a.min_shard_size == std::optional<int64_t>(1024));
  CHECK_FALSE(a.reverse);
  CHECK(r.rules[5].fallthrough);
  CHECK(r.rules[6].yield == RuleYield{MemoryYield{4194304, std::nullopt}});
  CHECK(r.rules[7].yield == RuleYield{MeshHelperYield{1024}});
  CHECK(std::holds_alternative<ReplicateYield>(r.rules[8].yield));
  CHECK_FALSE(r.rules[8].fallthrough);

  REQUIRE(r.logical_axis_rules.size() == 4);
  CHECK(r.logical_axis_rules[0]
        == LogicalAxisRule{"embed",
                           axes({{"fsdp", "/logical_axis_rules/0/1"}}),
                           "/logical_axis_rules/0"});
  CHECK(r.logical_axis_rules[1].axes
        == axes({{"tp", "/logical_axis_rules/1/1/0"}}));
  CHECK(r.logical_axis_rules[3].name == "norm");
  CHECK(r.logical_axis_rules[3].axes.empty());
}

TEST_CASE("io_rules: defaults and the other forms", "[io][rules_file]") {
  const RuleSet r =
      rules_ok(R"json({"unmatched": "replicate", "min_size": 16, "rules": [
      {"fsdp": {"axis": ["dp", "fsdp"]}},
      {"auto": {}},
      {"memory": {"max_bytes_per_device": 0, "axes": ["tp"]}},
      {"mesh_helper": {}},
      {"logical_axes": "manifest"},
      {"spec": "P(('dp', 'fsdp'), None)"},
      {"min_elements": 7, "shape_patterns": [{"spec": [null, "tp"], "shape": [null, 1024]}]}],
    "logical_axis_rules": [["norm", null]]})json");
  CHECK(r.unmatched == Unmatched::replicate);
  CHECK(r.min_size == 16);
  const auto& f = std::get<FsdpYield>(r.rules[0].yield);
  CHECK(f.axes
        == axes({{"dp", "/rules/0/fsdp/axis/0"},
                 {"fsdp", "/rules/0/fsdp/axis/1"}}));
  CHECK(f.min_size_mb == 4.0);  // nnx's default
  CHECK(r.rules[1].yield == RuleYield{AutoYield{}});
  CHECK(r.rules[2].yield
        == RuleYield{MemoryYield{0, axes({{"tp", "/rules/2/memory/axes/0"}})}});
  CHECK(r.rules[3].yield == RuleYield{MeshHelperYield{1024}});
  CHECK(std::get<LogicalAxesYield>(r.rules[4].yield).from_manifest);
  // A spec in Python text is read by parse_spec; its axes point at the string.
  CHECK(r.rules[5].yield
        == RuleYield{SpecYield{RuleSpec{
            {axes({{"dp", "/rules/5/spec"}, {"fsdp", "/rules/5/spec"}}), {}},
            "/rules/5/spec"}}});
  CHECK(r.rules[6].min_elements == std::optional<int64_t>(7));
  const auto& p = std::get<ShapePatternsYield>(r.rules[6].yield);
  REQUIRE(p.patterns.size() == 1);
  CHECK(p.patterns[0].shape == ShapePattern{std::nullopt, 1024});
  CHECK(p.patterns[0].pointer == "/rules/6/shape_patterns/0");
  CHECK(p.patterns[0].spec.dims.size() == 2);
  // null for the mesh axes is [] (Flax's None).
  CHECK(r.logical_axis_rules[0].axes.empty());
  // An empty list of rules reads; every tensor is then unmatched.
  CHECK(rules_ok(R"({"rules": []})").rules.empty());
}

TEST_CASE("io_rules: syntax errors give line column and a caret",
          "[io][rules_file]") {
  const Diagnostic d =
      rules_error("{\"rules\": [\n  {\"pattern\": \"a\" \"spec\": []}]}");
  CHECK(d.code == "json.syntax");
  CHECK(render(d)
        == "r.json:2:19: error: expected ',' or '}', got a string "
           "[json.syntax]\n"
           "    {\"pattern\": \"a\" \"spec\": []}]}\n"
           "                    ^");
}

TEST_CASE("io_rules: a spec in Python text with a syntax error",
          "[io][rules_file]") {
  const Diagnostic d =
      rules_error(R"json({"rules": [{"spec": "P('fsdp', None"}]})json");
  CHECK(d.code == "spec.syntax");
  // In the file at the spec; its text, with a caret at its end (column 15
  // of "P('fsdp', None"), is the excerpt.
  CHECK(d.location.source == "r.json");
  CHECK(d.location.pointer == "/rules/0/spec");
  CHECK(d.location.line == 0);
  CHECK(d.location.excerpt == "P('fsdp', None");
  CHECK(d.location.excerpt_column == 15);
}

TEST_CASE("io_rules: warnings for likely mistakes", "[io][rules_file]") {
  Diagnostics warnings;
  const RuleSet r = rules_ok(R"({"rules": [
      {"pattern": "q", "logical_axes": ["q_head", null, "embed"]},
      {"replicate": true, "fallthrough": true}],
    "logical_axis_rules": [["q_heads", "tp"], ["embed", "fsdp"]]})",
                             &warnings);
  CHECK(r.rules.size() == 2);
  REQUIRE(warnings.items().size() == 2);
  CHECK(render(warnings.items()[0])
        == "r.json:/rules/1/fallthrough: warning: a replicate rule with "
           "fallthrough never decides a tensor; remove \"fallthrough\" or the "
           "rule [rules.useless-fallthrough]");
  CHECK(render(warnings.items()[1])
        == "r.json:/rules/0/logical_axes/0: warning: no logical_axis_rules entry "
           "for \"q_head\": its dim stays replicated; did you mean \"q_heads\"? "
           "[rules.unknown-logical-axis]");
}

TEST_CASE("io_rules: bad rules files", "[io][rules_file]") {
  const std::string dir = test::data_path("bad_rules");
  std::set<std::string> stems;
  std::set<std::string> expects;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::filesystem::path p = entry.path();
    if (p.extension() == ".json") {
      stems.insert(p.stem().string());
    } else if (p.extension() == ".expect") {
      expects.insert(p.stem().string());
    }
  }
  CHECK(stems == expects);  // every case has its expectation
  CHECK(stems.size() >= 40);
  // The manifest cases that need a mesh are applied to.
  const Manifest manifest = test::manifest_of(
      R"({"params": [{"name": "w", "shape": [8, 8], "dtype": "bf16",
                      "logical_axes": ["embed", null]}]})");
  for (const std::string& stem : stems) {
    DYNAMIC_SECTION(stem) {
      const std::vector<test::NegativeCase> cases =
          test::load_cases("bad_rules/" + stem + ".expect");
      REQUIRE(cases.size() == 1);
      const test::NegativeCase& c = cases[0];
      const std::string text = test::slurp(dir + "/" + stem + ".json");
      const std::string source = stem + ".json";
      Diagnostics diags;
      std::optional<RuleSet> rules = read_rules(text, source, diags);
      if (c.args.count("mesh") != 0) {
        INFO(test::first_error(diags));
        REQUIRE(rules);
        const Mesh mesh = test::mesh_of(c.args.at("mesh"), [&] {
          int64_t n = 1;
          for (size_t at = 0;
               (at = c.args.at("mesh").find(':', at)) != std::string::npos;) {
            n *= std::stoll(c.args.at("mesh").substr(++at));
          }
          return n;
        }());
        CHECK_FALSE(apply_rules(manifest, mesh, *rules, diags));
      } else {
        CHECK_FALSE(rules);
      }
      REQUIRE(diags.error_count() >= 1);
      const Diagnostic& d = *std::find_if(
          diags.items().begin(), diags.items().end(), [](const Diagnostic& x) {
            return x.severity == Severity::error;
          });
      CHECK(d.code == c.expect_code);
      CHECK(test::first_line_without_code(d) == c.expect_message);
      CHECK(render(d).starts_with(source + ":"));
    }
  }
}

// Every truncation of a valid file, and every byte replaced by a few
// troublemakers: a RuleSet or a located error, never a crash.
TEST_CASE("io_rules: mutated files never crash", "[io][rules_file][property]") {
  const std::string valid =
      R"({"rules": [{"pattern": "(q|k)_proj", "shape": [null, 8], "spec": ["tp", ["dp", "fsdp"]]},)"
      R"( {"fsdp": {"axis": ["fsdp"], "min_size_mb": 0.5}, "fallthrough": true},)"
      R"( {"logical_axes": ["embed", null]}], "logical_axis_rules": [["embed", "fsdp"]],)"
      R"( "min_size": 4, "unmatched": "replicate"})";
  REQUIRE(rules_ok(valid).rules.size() == 3);
  auto check = [](const std::string& text) {
    Diagnostics diags;
    std::optional<RuleSet> r = read_rules(text, "r.json", diags);
    INFO("text: " << text);
    INFO(test::first_error(diags));
    CHECK(r.has_value() == !diags.has_errors());
    if (!nlohmann::json::accept(text)) {
      CHECK_FALSE(r.has_value());
    }
    if (diags.has_errors()) {
      const Location& loc = diags.items()[0].location;
      CHECK(loc.source.starts_with("r.json"));
      CHECK((!loc.pointer.empty() || loc.line > 0 || loc.source != "r.json"));
    }
  };
  for (size_t n = 0; n < valid.size(); ++n) {
    check(valid.substr(0, n));
  }
  for (size_t i = 0; i < valid.size(); ++i) {
    for (char c :
         {'"', ',', '[', '}', '\\', '\xff', '\0', '0', '-', ' ', 'x'}) {
      std::string mutated = valid;
      mutated[i] = c;
      check(mutated);
    }
    std::string deleted = valid;
    deleted.erase(i, 1);
    check(deleted);
  }
}

TEST_CASE("io_rules: deep nesting and large inputs", "[io][rules_file]") {
  // Closed nesting parses, then fails as a value; nothing recurses.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  Diagnostic d = rules_error(deep);
  CHECK(d.code == "json.type");
  const std::string in_rules =
      "{\"rules\": " + std::string(50000, '[') + std::string(50000, ']') + "}";
  d = rules_error(in_rules);
  CHECK(test::first_line_without_code(d)
        == "r.json:/rules/0: error: expected a rule object, got array");
}

TEST_CASE("rules: defect fix: duplicate axes in a spec are rejected",
          "[io][rules_file]") {
  // eformer's get_corrected_named_sharding drops unknown axes and
  // indivisible dims but never checks that an axis appears once; JAX then
  // raises DuplicateSpecError when the spec is used. A rules file with such
  // a spec is refused where it is written.
  Diagnostics diags;
  CHECK_FALSE(read_rules(
      R"({"rules": [{"spec": [["dp", "fsdp"], "fsdp"]}]})", "r.json", diags));
  REQUIRE(diags.error_count() == 1);
  CHECK(render(diags.items()[0])
        == "r.json:/rules/0/spec/1: error: axis \"fsdp\" appears twice in one "
           "spec; first at /rules/0/spec/0/1 [rules.duplicate-axis]");
}
