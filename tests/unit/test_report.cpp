// The report module on its own, not through the CLI: the text primitives,
// dump()'s layout, the table of renderers, and documents worked out by hand.
// Folding rows across layers is in test_report_fold.cpp.

#include "report/json.hpp"
#include "report/renderers.hpp"
#include "report/text.hpp"
#include "support/test_support.hpp"

#include <shardplan/io.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/report.hpp>
#include <shardplan/reshard.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/spec.hpp>
#include <shardplan/topology.hpp>
#include <shardplan/validate.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

using namespace shardplan;
using namespace shardplan::report_detail;

// ---------------------------------------------------------------------------
// Text primitives

TEST_CASE("report: with_commas groups digits by three", "[report][text]") {
  CHECK(with_commas(0) == "0");
  CHECK(with_commas(7) == "7");
  CHECK(with_commas(999) == "999");
  CHECK(with_commas(1000) == "1,000");
  CHECK(with_commas(123456) == "123,456");
  CHECK(with_commas(1234567) == "1,234,567");
  CHECK(with_commas(-999) == "-999");
  CHECK(with_commas(-1000) == "-1,000");
  CHECK(with_commas(-1234567) == "-1,234,567");
  CHECK(with_commas(16060522496) == "16,060,522,496");
  // 2^63 - 1.
  CHECK(with_commas(std::numeric_limits<int64_t>::max())
        == "9,223,372,036,854,775,807");
}

TEST_CASE("report: human_bytes switches unit at 1024 of the one below",
          "[report][text]") {
  CHECK(human_bytes(0) == "0 B");
  CHECK(human_bytes(1) == "1 B");
  CHECK(human_bytes(1023) == "1023 B");
  CHECK(human_bytes(1024) == "1.00 KiB");
  CHECK(human_bytes(1536) == "1.50 KiB");
  // 1048575 / 1024 = 1023.999..., still KiB, rounded to two decimals.
  CHECK(human_bytes(1048575) == "1024.00 KiB");
  CHECK(human_bytes(1048576) == "1.00 MiB");
  CHECK(human_bytes(int64_t{1} << 30) == "1.00 GiB");
  // 16060522496 / 2^30 = 14.9575...
  CHECK(human_bytes(16060522496) == "14.96 GiB");
  CHECK(human_bytes(int64_t{1} << 40) == "1.00 TiB");
  CHECK(human_bytes(int64_t{1} << 50) == "1.00 PiB");
  // PiB is the largest unit: 2^60 bytes are 1024 PiB.
  CHECK(human_bytes(int64_t{1} << 60) == "1024.00 PiB");
  // Negative sizes (a reshard's savings) stay in bytes below 1024.
  CHECK(human_bytes(-5) == "-5 B");
}

TEST_CASE("report: capacities, rates and times as they are quoted",
          "[report][text]") {
  // Whole gigabytes as vendors quote HBM, else binary units.
  CHECK(capacity_text(80e9) == "80 GB");
  CHECK(capacity_text(16.0 * 1024 * 1024 * 1024) == "16.00 GiB");
  CHECK(capacity_text(0) == "0 B");
  CHECK(rate_text(180e9) == "180 GB/s");
  CHECK(rate_text(1.2e12) == "1.2 TB/s");
  CHECK(rate_text(1e12) == "1 TB/s");
  CHECK(rate_text(5e8) == "500 MB/s");
  CHECK(seconds_text(1e-3) == "1 ms");
  CHECK(seconds_text(0.25) == "250 ms");
  CHECK(seconds_text(2.5e-4) == "250 us");
  CHECK(seconds_text(1e-6) == "1 us");
}

TEST_CASE("report: times in the largest unit, three significant digits",
          "[report][text]") {
  // 11725.1 ms is 11.7251 s: seconds, 3 digits.
  CHECK(seconds_text(11.7251) == "11.7 s");
  // 9.5e-4 s = 950e-6 s.
  CHECK(seconds_text(9.5e-4) == "950 us");
  // 0.00235 s = 2.35e-3 s.
  CHECK(seconds_text(0.00235) == "2.35 ms");
  // 0.0869 s = 86.9 ms; 0.123456 s = 123.456 ms, 3 digits 123.
  CHECK(seconds_text(0.0869) == "86.9 ms");
  CHECK(seconds_text(0.123456) == "123 ms");
  // 90 s = 1.5 min; 5400 s = 1.5 h; 7,200,000 s = 2000 h (no exponent).
  CHECK(seconds_text(90) == "1.5 min");
  CHECK(seconds_text(5400) == "1.5 h");
  CHECK(seconds_text(7.2e6) == "2000 h");
  // 125 s = 2.0833 min.
  CHECK(seconds_text(125) == "2.08 min");
  // Rounding up to the next unit: 999.6 us to 3 digits is 1000 us = 1 ms;
  // 59.97 s is 60.0 s = 1 min; 3599.9 s is 59.998 min, 60.0 = 1 h.
  CHECK(seconds_text(999.6e-6) == "1 ms");
  CHECK(seconds_text(59.97) == "1 min");
  CHECK(seconds_text(3599.9) == "1 h");
  // Below a microsecond: us, 3 digits. 1.23456e-5 s = 12.3456 us.
  CHECK(seconds_text(5e-7) == "0.5 us");
  CHECK(seconds_text(1.23456e-5) == "12.3 us");
  // No time has no scale; a negative time (a saving that is a loss) keeps
  // its sign: -0.5 s = -500 ms.
  CHECK(seconds_text(0) == "0 s");
  CHECK(seconds_text(-0.5) == "-500 ms");
}

TEST_CASE("report: table right-aligns numeric columns only", "[report][text]") {
  CHECK(table({}).empty());
  // Column 0 has a word below the header: left-aligned, padded to 4
  // ("name"). Column 1 has only digits and commas: right-aligned to 5
  // ("1,000"). Two spaces between columns.
  CHECK(table({{"name", "n"}, {"a", "5"}, {"bbb", "1,000"}})
        == "name      n\n"
           "a         5\n"
           "bbb   1,000\n");
  // A left-aligned last column leaves no trailing spaces.
  CHECK(table({{"k", "value"}, {"x", "y"}}) == "k  value\nx  y\n");
  // Empty cells keep a column numeric; the header does not count; an empty
  // last cell leaves the row's end trimmed.
  CHECK(table({{"a", "b"}, {"x", ""}, {"y", "12"}})
        == "a   b\n"
           "x\n"
           "y  12\n");
  // A decimal point is numeric too; a unit is not.
  CHECK(table({{"f", "g"}, {"1.5", "2 B"}, {"10", "3 B"}})
        == "  f  g\n"
           "1.5  2 B\n"
           " 10  3 B\n");
}

TEST_CASE("report: verdict counts errors and warnings", "[report][text]") {
  Diagnostics diags;
  CHECK(verdict(diags) == "ok");
  diags.warning("w.one", "first");
  CHECK(verdict(diags) == "ok, 1 warning");
  diags.warning("w.two", "second");
  CHECK(verdict(diags) == "ok, 2 warnings");

  Diagnostics one_error;
  one_error.error("e.one", "first");
  CHECK(verdict(one_error) == "1 error, 0 warnings");
  one_error.error("e.two", "second");
  one_error.error("e.three", "third");
  one_error.warning("w.one", "first");
  CHECK(verdict(one_error) == "3 errors, 1 warning");
}

TEST_CASE("report: mesh_line names the topology when there is one",
          "[report][text]") {
  const Mesh mesh = test::mesh_of("dp:2,tp:4", 8);
  CHECK(mesh_line(mesh, nullptr) == "mesh dp:2,tp:4 (8 devices)");
  const Topology v5e = test::topology_of("v5e-8");
  CHECK(mesh_line(mesh, &v5e) == "mesh dp:2,tp:4 (8 devices) on v5e-8");
}

// ---------------------------------------------------------------------------
// dump()

TEST_CASE("report: dump keeps arrays of scalars on one line",
          "[report][json]") {
  const ordered_json j = ordered_json::parse(
      R"({"a": 1, "b": [1, 2], "c": {"d": "x", "e": []},
          "f": [{"g": null}], "h": {}, "i": [1, [2]]})");
  CHECK(dump(j)
        == "{\n"
           "  \"a\": 1,\n"
           "  \"b\": [1, 2],\n"
           "  \"c\": {\n"
           "    \"d\": \"x\",\n"
           "    \"e\": []\n"
           "  },\n"
           "  \"f\": [\n"
           "    {\n"
           "      \"g\": null\n"
           "    }\n"
           "  ],\n"
           "  \"h\": {},\n"
           "  \"i\": [\n"
           "    1,\n"
           "    [2]\n"
           "  ]\n"
           "}\n");
  CHECK(dump(ordered_json(5)) == "5\n");
  CHECK(dump(ordered_json::array()) == "[]\n");
}

TEST_CASE("report: append_spec_json writes what dump lays out",
          "[report][json]") {
  Diagnostics diags;
  std::optional<PartitionSpec> spec =
      parse_spec("(dp,tp),None,fsdp", "test", diags);
  REQUIRE(spec);
  std::string direct;
  append_spec_json(direct, *spec, 2);
  // Under a key at indent 2, as dump() would write {"spec": ...}'s value.
  const std::string dumped = dump(ordered_json{{"spec", spec_json(*spec)}});
  CHECK(dumped == "{\n  \"spec\": " + direct + "\n}\n");
  CHECK(direct == "[\n    [\"dp\", \"tp\"],\n    null,\n    \"fsdp\"\n  ]");
  std::string one_line;
  append_spec_json(one_line, *spec, k_one_line);
  CHECK(one_line == "[[\"dp\", \"tp\"], null, \"fsdp\"]");
}

// ---------------------------------------------------------------------------
// The table of renderers

TEST_CASE("report: format names round-trip and others are rejected",
          "[report][render]") {
  CHECK(to_string(Format::text) == "text");
  CHECK(to_string(Format::json) == "json");
  CHECK(to_string(Format::markdown) == "markdown");
  CHECK(to_string(Format::github) == "github");
  for (Format format : k_formats) {
    CHECK(parse_format(to_string(format)) == format);
  }
  CHECK_FALSE(parse_format("xml"));
  CHECK_FALSE(parse_format("JSON"));
  CHECK_FALSE(parse_format(""));
  CHECK_FALSE(parse_format("text "));
}

TEST_CASE("report: every view has text and json", "[report][render]") {
  for (View view : k_views) {
    INFO(static_cast<int>(view));
    CHECK(has_renderer(view, Format::text));
    CHECK(has_renderer(view, Format::json));
  }
}

TEST_CASE("report: each command's --format offers what its views render",
          "[report][render]") {
  using F = std::vector<Format>;
  const F text_json_html = {Format::text, Format::json, Format::html};
  const F all = {Format::text,
                 Format::json,
                 Format::markdown,
                 Format::github,
                 Format::jax,
                 Format::maxtext,
                 Format::html};
  // The views each subcommand shows, as src/cli/ passes them to add_common
  // (search adds jax and maxtext: its winner's plan).
  CHECK(formats_of({View::mesh})
        == F{Format::text,
             Format::json,
             Format::jax,
             Format::maxtext,
             Format::html});
  CHECK(formats_of({View::topology_list}) == text_json_html);
  CHECK(formats_of({View::topology_show}) == text_json_html);
  CHECK(formats_of({View::manifest, View::model_list}) == text_json_html);
  CHECK(formats_of({View::plan, View::explain, View::preset_list}) == all);
  CHECK(formats_of({View::check}) == all);
  CHECK(formats_of({View::memory}) == text_json_html);
  CHECK(formats_of({View::reshard}) == text_json_html);
  CHECK(formats_of({View::search}) == text_json_html);
  CHECK(formats_of({}).empty());
  // Every format a command offers has a renderer of the view it shows by
  // default; its other views fall back to text.
  CHECK(formats_of({View::manifest, View::model_list})
        == formats_of({View::manifest}));
  CHECK(formats_of({View::plan, View::explain, View::preset_list})
        == formats_of({View::plan}));
  CHECK_FALSE(has_renderer(View::explain, Format::markdown));
  CHECK_FALSE(has_renderer(View::preset_list, Format::github));
  CHECK_FALSE(has_renderer(View::memory, Format::markdown));
}

namespace {

// One report of every view, on a mesh dp:2,tp:4 of 8 devices and a
// manifest of one tensor "w" [8, 1024] bf16 (16,384 bytes) with spec
// P('dp', 'tp'): [4, 256] per device, 2,048 bytes.
struct Fixture {
  Mesh mesh = test::mesh_of("dp:2,tp:4", 8);
  MeshLayout layout;
  Topology topology = test::topology_of("v5e-8");
  std::vector<Topology> topologies = {topology};
  Manifest manifest = test::manifest_of(
      R"({"params": [{"name": "w", "shape": [8, 1024], "dtype": "bf16"}]})");
  SpecsFile specs = test::specs_of(R"({"specs": {"w": ["dp", "tp"]}})");
  std::vector<BuiltinModel> models = {{"tiny", "TinyForCausalLM", 1234, 2}};
  std::vector<RulePreset> presets = {{"p", "a short description", 2}};
  Diagnostics diags;
  std::vector<TensorSharding> shardings;
  std::optional<MemoryEstimate> memory;
  std::optional<RuleSet> rules;
  std::optional<RulePlan> plan;
  std::vector<TensorSharding> planned;
  std::optional<MemoryEstimate> planned_memory;
  std::optional<RuleTrace> trace;
  DeviceGrid grid;
  ReshardOptions reshard_options;
  std::optional<ReshardPlan> reshard;
  SearchResult search;
  Workload workload;

  Fixture() {
    SearchCandidate ranked;
    ranked.mesh = "dp:2,tp:4";
    ranked.remat = "full";
    ranked.rank = 1;
    ranked.fits = true;
    ranked.max_device_total = 4096;
    SearchCandidate dropped;
    dropped.mesh = "dp:8";
    dropped.remat = "full";
    dropped.dropped = DropReason::over_hbm;
    dropped.message = "needs 2 bytes a device of 1 usable";
    search.candidates = {ranked, dropped};
    search.dropped_counts = {{"over_hbm", 1}};
    search.meshes = 2;
    workload.seq = 8;
    workload.batch = 8;
    layout.grid = generic_device_grid(mesh);
    shardings = validate_specs(manifest, mesh, specs, ValidateOptions{}, diags);
    memory = estimate_memory(manifest, mesh, shardings, {}, diags);
    rules = read_rules_preset("fsdp-tp", Location::of("--rules"), diags);
    REQUIRE(rules);
    plan = apply_rules(manifest, mesh, *rules, diags);
    REQUIRE(plan);
    const std::vector<const PartitionSpec*> specs_of_plan = plan->specs();
    planned = validate_planned(
        manifest, mesh, specs_of_plan, rules->source, {}, diags);
    planned_memory = estimate_memory(manifest, mesh, planned, {}, diags);
    trace = explain_rules(manifest, mesh, *rules, "w", "--explain", diags);
    grid = generic_device_grid(mesh);
    const PartitionSpec* from[] = {shardings[0].spec()};
    const PartitionSpec* to[] = {planned[0].spec()};
    const ReshardSide side{&mesh, &grid, {}};
    reshard =
        plan_reshard(manifest, from, to, side, side, reshard_options, diags);
    INFO(test::first_error(diags));
    REQUIRE_FALSE(diags.has_errors());
    REQUIRE(memory);
    REQUIRE(planned_memory);
    REQUIRE(trace);
    REQUIRE(reshard);
  }

  CheckReport check_report(View view) const {
    const bool is_plan = view == View::plan;
    return CheckReport{view,
                       mesh,
                       nullptr,
                       manifest,
                       is_plan ? std::string_view(rules->source)
                               : std::string_view(specs.source),
                       is_plan ? planned : shardings,
                       is_plan ? *planned_memory : *memory,
                       is_plan ? &*rules : nullptr,
                       is_plan ? &*plan : nullptr};
  }

  Report report(View view) const {
    switch (view) {
      case View::mesh:
        return MeshReport{mesh, layout, nullptr};
      case View::topology_list:
        return TopologyListReport{topologies};
      case View::topology_show:
        return TopologyShowReport{topology};
      case View::manifest:
        return ManifestReport{manifest};
      case View::model_list:
        return ModelListReport{models};
      case View::preset_list:
        return PresetListReport{presets};
      case View::explain:
        return ExplainReport{*trace, *rules, mesh};
      case View::plan:
      case View::check:
      case View::memory:
        return check_report(view);
      case View::reshard:
        return ReshardReport{
            manifest, mesh, nullptr, mesh, nullptr, reshard_options, *reshard};
      case View::search:
        return SearchReport{
            search, topology, std::span(&topology, 1), "m.json", workload};
    }
    return MeshReport{mesh, layout, nullptr};
  }
};

}  // namespace

TEST_CASE("report: every view renders in every format, else as text",
          "[report][render]") {
  const Fixture f;
  const Diagnostics none;
  for (View view : k_views) {
    const Report report = f.report(view);
    INFO(static_cast<int>(view));
    CHECK(view_of(report) == view);
    const std::string text = render(report, Format::text, none).str();
    const std::string json = render(report, Format::json, none).str();
    CHECK_FALSE(text.empty());
    CHECK(text.back() == '\n');
    CHECK(json.starts_with("{\n  \"schema_version\": 1,\n"));
    CHECK(json.back() == '\n');
    CHECK(nlohmann::json::accept(json));
    for (Format format : {Format::markdown, Format::github, Format::html}) {
      const std::string doc = render(report, format, none).str();
      if (has_renderer(view, format)) {
        CHECK(doc != text);
      } else {
        CHECK(doc == text);
      }
    }
  }
}

TEST_CASE("report: the large JSON documents are streamed, the rest whole",
          "[report][render]") {
  const Fixture f;
  const Diagnostics none;
  for (View view : {View::plan, View::check, View::memory, View::reshard}) {
    INFO(static_cast<int>(view));
    CHECK(render(f.report(view), Format::json, none).streamed());
    CHECK_FALSE(render(f.report(view), Format::text, none).streamed());
  }
  CHECK_FALSE(render(f.report(View::mesh), Format::json, none).streamed());
  // A streamed document hands over the same text as str().
  const Document doc = render(f.report(View::check), Format::json, none);
  std::string written;
  size_t pieces = 0;
  doc.write([&](std::string_view piece) {
    written += piece;
    ++pieces;
  });
  CHECK(pieces >= 2);  // before the tensors, and the tensors and the rest
  CHECK(written == doc.str());
}

// ---------------------------------------------------------------------------
// Documents worked out by hand

TEST_CASE("report: mesh JSON without a topology, key by key",
          "[report][mesh]") {
  const Mesh mesh = test::mesh_of("dp:2,tp:4", 8);
  MeshLayout layout;
  layout.grid = generic_device_grid(mesh);
  const Diagnostics none;
  const std::string doc =
      render(MeshReport{mesh, layout, nullptr}, Format::json, none).str();
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(doc);

  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) {
    keys.push_back(key);
  }
  CHECK(keys
        == std::vector<std::string>{"schema_version",
                                    "shardplan_version",
                                    "command",
                                    "mesh",
                                    "device_ids",
                                    "diagnostics"});
  CHECK(j["schema_version"] == 1);
  CHECK(j["shardplan_version"] == std::string(shardplan_version()));
  CHECK(j["command"] == "mesh");
  const auto& m = j["mesh"];
  REQUIRE(m["axes"].size() == 2);
  CHECK(
      m["axes"][0]
      == nlohmann::ordered_json::parse(
          R"({"name": "dp", "size": 2, "type": "auto", "ici": 2, "dcn": 1})"));
  CHECK(
      m["axes"][1]
      == nlohmann::ordered_json::parse(
          R"({"name": "tp", "size": 4, "type": "auto", "ici": 4, "dcn": 1})"));
  CHECK(m["devices"] == 8);
  CHECK(m["slices"] == 1);
  CHECK(m["canonical"] == "dp:2,tp:4");
  CHECK(m["dcn"] == "");
  // Row-major, the last axis fastest: dp picks the row, tp the column.
  CHECK(j["device_ids"]
        == nlohmann::ordered_json::parse("[[0, 1, 2, 3], [4, 5, 6, 7]]"));
  CHECK(j["diagnostics"] == nlohmann::ordered_json::array());
  // The grid as dump() lays it out: rows of scalars on one line.
  CHECK(doc.find("\n  \"device_ids\": [\n    [0, 1, 2, 3],\n"
                 "    [4, 5, 6, 7]\n  ],\n")
        != std::string::npos);
  CHECK(doc.ends_with("  \"diagnostics\": []\n}\n"));
}

TEST_CASE("report: mesh text without a topology", "[report][mesh]") {
  const Mesh mesh = test::mesh_of("dp:2,tp:4", 8);
  MeshLayout layout;
  layout.grid = generic_device_grid(mesh);
  const Diagnostics none;
  CHECK(render(MeshReport{mesh, layout, nullptr}, Format::text, none).str()
        == "mesh dp:2,tp:4 on 8 devices\n"
           "\n"
           "axis  size  ici  dcn  type\n"
           "dp       2    2    1  auto\n"
           "tp       4    4    1  auto\n"
           "\n"
           "device ids (dp x tp):\n"
           "    0 1 2 3\n"
           "    4 5 6 7\n");
}

TEST_CASE("report: diagnostics_json of one error", "[report][json]") {
  Diagnostics diags;
  Location at = Location::of("--mesh");
  at.line = 1;
  at.column = 9;
  diags.error(
      "mesh.syntax", "expected an integer axis size, got \"x\"", std::move(at));
  CHECK(diagnostics_json("mesh", diags)
        == "{\n"
           "  \"schema_version\": 1,\n"
           "  \"shardplan_version\": \""
               + std::string(shardplan_version())
               + "\",\n"
                 "  \"command\": \"mesh\",\n"
                 "  \"diagnostics\": [\n"
                 "    {\n"
                 "      \"severity\": \"error\",\n"
                 "      \"code\": \"mesh.syntax\",\n"
                 "      \"message\": \"expected an integer axis size, got "
                 "\\\"x\\\"\",\n"
                 "      \"location\": {\n"
                 "        \"source\": \"--mesh\",\n"
                 "        \"line\": 1,\n"
                 "        \"column\": 9\n"
                 "      }\n"
                 "    }\n"
                 "  ]\n"
                 "}\n");
}

TEST_CASE("report: a diagnostic's tensor, dim, pointer and hint in JSON",
          "[report][json]") {
  Diagnostics diags;
  Diagnostic& d = diags.warning(
      "sharding.replicated", "w is replicated", Location::at("m.json", "/0"));
  d.tensor = "w";
  d.dim = 1;
  d.hint = "shard it";
  // Keys in this order; the hint after "; "; a pointer and no line.
  CHECK(diagnostics_array(diags)
        == ordered_json::parse(R"([{"severity": "warning",
                                     "code": "sharding.replicated",
                                     "message": "w is replicated; shard it",
                                     "tensor": "w",
                                     "dim": 1,
                                     "location": {"source": "m.json",
                                                  "pointer": "/0"}}])"));
  CHECK(diagnostics_array(Diagnostics()) == ordered_json::array());
}

TEST_CASE("report: check's text, markdown and github by hand",
          "[report][check]") {
  const Fixture f;
  const Report report = f.check_report(View::check);
  const Diagnostics none;
  // 16,384 bytes in all; 2,048 per device; params-only keeps no grads or
  // optimizer state. dp is a data axis (docs/memory.md, "Gather buffer"):
  // w, split over it, is gathered at use, still split over tp: [8, 256] x 2
  // bytes = 4,096 more, 6,144 in all. No HBM without a topology or --hbm.
  CHECK(render(report, Format::text, none).str()
        == "check: 1 tensors of m.json against s.json\n"
           "  mesh dp:2,tp:4 (8 devices)\n"
           "  specs: 1 valid, 0 with problems; 0 B of 16.00 KiB replicated "
           "on every device\n"
           "  memory per device, recipe params-only: params 2.00 KiB, grads "
           "0 B, optimizer 0 B, gather buffer 4.00 KiB\n"
           "  total 6.00 KiB per device (HBM unknown: give --topology or "
           "--hbm); counts weights + gather buffer; activations not "
           "counted: give --seq and --batch\n"
           "result: ok\n");
  CHECK(render(report, Format::markdown, none).str()
        == "## shardplan check: :white_check_mark: ok\n"
           "\n"
           "1 tensors of `m.json` with specs `s.json`; mesh dp:2,tp:4 (8 "
           "devices).\n"
           "\n"
           "| memory per device, recipe params-only | bytes | |\n"
           "|---|---:|---:|\n"
           "| params | 2,048 | 2.00 KiB |\n"
           "| grads | 0 | 0 B |\n"
           "| optimizer | 0 | 0 B |\n"
           "| gather buffer | 4,096 | 4.00 KiB |\n"
           "| **total** | **6,144** | **6.00 KiB** |\n"
           "\n"
           "Counts weights + gather buffer; activations not counted: give "
           "--seq and --batch.\n");

  Diagnostics diags;
  Location at = Location::of("s.json");
  at.line = 3;
  at.column = 5;
  diags.error("spec.x", "bad, really: 100%", std::move(at)).tensor = "w";
  // The tensor is named in front of a message that does not name it; '%'
  // escaped as a workflow command wants; ':' and ',' only in properties.
  CHECK(render(report, Format::github, diags).str()
        == "::error file=s.json,line=3,col=5,title=shardplan spec.x::tensor "
           "\"w\": bad, really: 100%25\n"
           "shardplan check: 1 error, 0 warnings; total 6.00 KiB per device "
           "(HBM unknown: give --topology or --hbm); counts weights + gather "
           "buffer; activations not counted: give --seq and --batch\n");
}

namespace {

// `n` spec.indivisible errors, tensor "l.I.w" at line I + 2 of s.json,
// column 12, and one spec.missing error with no line, after the first.
Diagnostics indivisible_errors(size_t n) {
  Diagnostics diags;
  for (size_t i = 0; i < n; ++i) {
    Location at = Location::at("s.json", fmt::format("/specs/l.{}.w", i));
    at.line = static_cast<int64_t>(i) + 2;
    at.column = 12;
    diags.error("spec.indivisible", "6 is not divisible by 4", std::move(at))
        .tensor = fmt::format("l.{}.w", i);
    if (i == 0) {
      diags.error("spec.missing", "no spec", Location::of("s.json")).tensor =
          "norm";
    }
  }
  return diags;
}

}  // namespace

TEST_CASE("report: github folds a kind of finding past the first three",
          "[report][ci]") {
  // 30 of one code: l.0.w, l.1.w and l.2.w one by one, then one annotation
  // at l.3.w (line 5) for the other 27, naming the first five of them
  // (l.3.w to l.7.w) and 27 - 5 = 22 others. spec.missing, one of its
  // kind, keeps its place after the first.
  CHECK(github_annotations(indivisible_errors(30))
        == "::error file=s.json,line=2,col=12,title=shardplan "
           "spec.indivisible::tensor \"l.0.w\": 6 is not divisible by 4\n"
           "::error file=s.json,title=shardplan spec.missing::tensor "
           "\"norm\": no spec\n"
           "::error file=s.json,line=3,col=12,title=shardplan "
           "spec.indivisible::tensor \"l.1.w\": 6 is not divisible by 4\n"
           "::error file=s.json,line=4,col=12,title=shardplan "
           "spec.indivisible::tensor \"l.2.w\": 6 is not divisible by 4\n"
           "::error file=s.json,line=5,col=12,title=shardplan "
           "spec.indivisible::and 27 more spec.indivisible errors: "
           "\"l.3.w\", \"l.4.w\", \"l.5.w\", \"l.6.w\", \"l.7.w\" and 22 "
           "others; shardplan's stderr lists every one\n");
  // Four of a kind are four annotations: a summary would take the fourth's
  // place. Five are three and a summary of two, both named.
  const std::string four = github_annotations(indivisible_errors(4));
  CHECK(four.find("more") == std::string::npos);
  CHECK(std::count(four.begin(), four.end(), '\n') == 5);
  const std::string five = github_annotations(indivisible_errors(5));
  CHECK(std::count(five.begin(), five.end(), '\n') == 5);
  CHECK_THAT(five,
             Catch::EndsWith("::error file=s.json,line=5,col=12,title="
                             "shardplan spec.indivisible::and 2 more "
                             "spec.indivisible errors: \"l.3.w\", \"l.4.w\"; "
                             "shardplan's stderr lists every one\n"));
  // A flag has no file: it leads the message, with its column.
  Diagnostics flag;
  Location mesh = Location::of("--mesh");
  mesh.line = 1;
  mesh.column = 9;
  flag.error("mesh.syntax", "expected an integer axis size", mesh);
  CHECK(github_annotations(flag)
        == "::error title=shardplan mesh.syntax::--mesh:1:9: expected an "
           "integer axis size\n");
}

TEST_CASE("report: markdown folds a kind of finding into <details>",
          "[report][ci]") {
  const std::string md = markdown_findings(indivisible_errors(30));
  const std::string row0 =
      "| `spec.indivisible` | `l.0.w` | `s.json:/specs/l.0.w` | 6 is not "
      "divisible by 4 |\n";
  const std::string head =
      "| code | tensor | where | message |\n|---|---|---|---|\n";
  // 31 errors: the table has l.0.w, the spec.missing row (where: the file),
  // l.1.w and l.2.w; the other 27 in a collapsed table of their own.
  CHECK_THAT(md,
             Catch::StartsWith(
                 "\n### Errors (31)\n\n" + head + row0
                 + "| `spec.missing` | `norm` | `s.json` | no spec |\n"
                   "| `spec.indivisible` | `l.1.w` | `s.json:/specs/l.1.w` | 6 "
                   "is not divisible by 4 |\n"
                   "| `spec.indivisible` | `l.2.w` | `s.json:/specs/l.2.w` | 6 "
                   "is not divisible by 4 |\n"
                   "\n<details><summary>27 more <code>spec.indivisible</code> "
                   "errors</summary>\n\n"
                 + head
                 + "| `spec.indivisible` | `l.3.w` | `s.json:/specs/l.3.w` | 6 "
                   "is not divisible by 4 |\n"));
  CHECK_THAT(md,
             Catch::EndsWith("| `spec.indivisible` | `l.29.w` | "
                             "`s.json:/specs/l.29.w` | 6 is not divisible by "
                             "4 |\n\n</details>\n"));
  // 4 + 27 = 31 rows of findings, every one listed.
  size_t rows = 0;
  for (size_t at = md.find("\n| `"); at != std::string::npos;
       at = md.find("\n| `", at + 1)) {
    ++rows;
  }
  CHECK(rows == 31);
  // At most 50 rows: 100 findings are 4 in the table and 46 of the other
  // 97 in <details>, the last 51 counted.
  const std::string many = markdown_findings(indivisible_errors(100));
  CHECK_THAT(many,
             Catch::Contains("<summary>97 more <code>spec.indivisible</code> "
                             "errors</summary>"));
  CHECK_THAT(many, Catch::Contains("`l.48.w`"));
  CHECK(many.find("`l.49.w`") == std::string::npos);
  CHECK_THAT(many, Catch::EndsWith("\n... and 51 more.\n\n</details>\n"));
}

TEST_CASE("report: the documents of an input error", "[report][json]") {
  Diagnostics diags;
  Location at = Location::of("s.json");
  at.line = 3;
  at.column = 9;
  diags.error("json.syntax", "invalid literal \"tp\"", std::move(at));
  // Text: nothing on stdout (the diagnostics go to stderr).
  CHECK(input_error_document("check", Format::text, diags).empty());
  CHECK(input_error_document("check", Format::json, diags)
        == diagnostics_json("check", diags));
  CHECK(input_error_document("check", Format::github, diags)
        == "::error file=s.json,line=3,col=9,title=shardplan "
           "json.syntax::invalid literal \"tp\"\n"
           "shardplan check: 1 error, 0 warnings; bad input: nothing was "
           "checked\n");
  CHECK(input_error_document("plan", Format::markdown, diags)
        == "## shardplan plan: :x: bad input\n\n"
           "The inputs could not be read as given: nothing was checked (exit "
           "code 2).\n\n"
           "### Errors (1)\n\n"
           "| code | tensor | where | message |\n|---|---|---|---|\n"
           "| `json.syntax` |  | `s.json:3:9` | invalid literal \"tp\" |\n");
}

TEST_CASE("report: the preset list, and its text for formats it lacks",
          "[report][render]") {
  const std::vector<RulePreset> presets = {{"p", "a short description", 2}};
  const Report report = PresetListReport{presets};
  const Diagnostics none;
  const std::string text = render(report, Format::text, none).str();
  CHECK(text == "p  (2 rules)\n  a short description\n");
  CHECK(render(report, Format::markdown, none).str() == text);
  CHECK(render(report, Format::github, none).str() == text);
  const ordered_json j =
      ordered_json::parse(render(report, Format::json, none).str());
  CHECK(j["command"] == "plan");
  CHECK(
      j["presets"]
      == ordered_json::parse(
          R"([{"name": "p", "rules": 2, "description": "a short description"}])"));
}
