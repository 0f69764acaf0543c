// User topology files (docs/topologies.md): read by io's
// read_topology_file, with the located-JSON toolkit's codes; what a file
// omits comes from its chip's catalogue family (docs/sources.md, Hardware).

#include "support/test_support.hpp"

#include <shardplan/io.hpp>
#include <shardplan/report.hpp>
#include <shardplan/topology.hpp>

#include <catch2/catch.hpp>

using namespace shardplan;

TEST_CASE("topology files: show's JSON reads back as the same topology",
          "[io][topology_file]") {
  for (const char* name :
       {"v5p-128", "2xv5e-256", "v3:2x4", "tpu7x-64", "h100x64", "gb200x144"}) {
    INFO(name);
    Topology t = test::topology_of(name);
    Diagnostics diags;
    std::string json = render(TopologyShowReport{t}, Format::json, diags).str();
    std::optional<Topology> back = read_topology_file(json, "t.json", diags);
    INFO(test::first_error(diags));
    REQUIRE(back);
    CHECK(back->name == t.name);
    CHECK(back->kind == t.kind);
    CHECK(back->devices() == t.devices());
    CHECK(back->num_slices() == t.num_slices());
    CHECK(back->tpu.chips == t.tpu.chips);
    CHECK(back->tpu.host_bounds == t.tpu.host_bounds);
    CHECK(back->wraparound == t.wraparound);
    CHECK(back->nvlink_domain == t.nvlink_domain);
    CHECK(back->figures.hbm_bytes_per_device.value
          == t.figures.hbm_bytes_per_device.value);
    CHECK(back->figures.hbm_bytes_per_device.source
          == t.figures.hbm_bytes_per_device.source);
    CHECK(back->figures.ici_bytes_per_s_per_link.value
          == t.figures.ici_bytes_per_s_per_link.value);
    CHECK(back->source == "t.json");
  }
}

TEST_CASE("topology files: a short file inherits its chip's figures",
          "[io][topology_file]") {
  Diagnostics diags;
  std::optional<Topology> t = read_topology_file(
      R"({"name": "lab", "chip": "v5p", "shape": [4, 4, 8], "slices": 2,
          "figures": {"dcn_bytes_per_s_per_chip": 1.25e10}})",
      "lab.json",
      diags);
  REQUIRE(t);
  CHECK(t->name == "lab");
  CHECK(t->devices() == 256);
  CHECK(t->figures.dcn_bytes_per_s_per_chip.value == 1.25e10);
  CHECK(t->figures.dcn_bytes_per_s_per_chip.source
        == "lab.json: /figures/dcn_bytes_per_s_per_chip");
  CHECK(t->figures.ici_bytes_per_s_per_link.value == 9e10);  // from v5p
}

TEST_CASE("topology files: located errors", "[io][topology_file]") {
  // Faults of JSON itself carry the toolkit's json.* codes, as in every
  // kind of file; a value the schema refuses is topology.bad-value. A fault
  // of the whole document is located at its first value (pointer "").
  struct Case {
    const char* text;
    const char* code;
    const char* pointer;
    const char* message;
  };
  const std::vector<Case> cases = {
      {R"({"chip": "v5x", "shape": [4, 4, 4]})",
       "topology.bad-value",
       "/chip",
       "unknown chip \"v5x\""},
      {R"({"shape": [4, 4, 4]})",
       "json.missing-key",
       "",
       "a topology file needs \"chip\": a catalogue family"},
      {R"({"chip": "v5p"})",
       "json.missing-key",
       "",
       "a v5p topology needs \"shape\": [x, y, z] in chips"},
      {R"({"chip": "v5p", "shape": [4, 0, 4]})",
       "topology.bad-value",
       "/shape/1",
       "expected an integer >= 1, got number 0"},
      {R"({"chip": "v5p", "shape": [4, 4, 4], "devices": 128})",
       "topology.bad-value",
       "/devices",
       "\"devices\" is 128 but the topology has 64 devices"},
      {R"({"chip": "v5p", "shape": [4, 4, 4], "shapes": 1})",
       "json.unknown-key",
       "/shapes",
       "unknown key \"shapes\""},
      {R"({"chip": "h100", "devices": 16, "figures": {"nvlink": 1}})",
       "json.unknown-key",
       "/figures/nvlink",
       "unknown key \"nvlink\""},
      {R"({"chip": "h100", "devices": 16, "figures": {"nvlink_latency_s": -1}})",
       "topology.bad-value",
       "/figures/nvlink_latency_s",
       "expected a number >= 0 and <= 1, got number -1"},
      // Found by fuzz_topology: a zero capacity read from "figures" (the
      // top-level key refused it) and then failed to read back from show's
      // JSON. A bandwidth, link count or HBM of 0 is refused; a latency of 0
      // is fine.
      {R"({"chip": "v5p", "shape": [2, 2, 2], "figures":
           {"hbm_bytes_per_device": {"value": 0e11, "source": "s"}}})",
       "topology.bad-value",
       "/figures/hbm_bytes_per_device/value",
       "expected a number >= 1 and <= 1e+15, got number 0.0"},
      {R"({"chip": "h100", "devices": 16, "figures":
           {"network_bytes_per_s_per_gpu": 0}})",
       "topology.bad-value",
       "/figures/network_bytes_per_s_per_gpu",
       "expected a number > 0 and <= 1e+15, got number 0"},
      // Found by fuzz_topology: 9e31 bytes of HBM read, then overflowed the
      // int64 byte count the report prints. Every figure has a ceiling
      // about 1000x any device made (1 PB of HBM, 1 PB/s, 1 s latency).
      {R"({"chip": "v5p", "shape": [2, 2, 2], "figures":
           {"hbm_bytes_per_device": {"value": 9e31, "source": "s"}}})",
       "topology.bad-value",
       "/figures/hbm_bytes_per_device/value",
       "expected a number >= 1 and <= 1e+15, got number 9e+31"},
      {R"({"chip": "h100", "devices": 8, "hbm_bytes_per_device": 1e300})",
       "topology.bad-value",
       "/hbm_bytes_per_device",
       "expected a number >= 1 and <= 1e+15, got number 1e+300"},
      // Found by fuzz_topology: 8e-303 bytes of HBM read (> 0), then show
      // wrote the integer 0, which does not read back. A count (HBM bytes,
      // ICI links) is at least 1.
      {R"({"chip": "h100", "devices": 8, "hbm_bytes_per_device": 800001e-308})",
       "topology.bad-value",
       "/hbm_bytes_per_device",
       "expected a number >= 1 and <= 1e+15, got number 8.00001e-303"},
      {R"({"chip": "v5p", "shape": [2, 2, 2], "figures":
           {"ici_links_per_chip": 0.5}})",
       "topology.bad-value",
       "/figures/ici_links_per_chip",
       "expected a number >= 1 and <= 1024, got number 0.5"},
      {R"({"chip": "h100", "devices": 16, "figures":
           {"nvlink_latency_s": 2}})",
       "topology.bad-value",
       "/figures/nvlink_latency_s",
       "expected a number >= 0 and <= 1, got number 2"},
      {R"({"chip": "v3", "shape": [4, 4, 4]})",
       "topology.bad-value",
       "/shape",
       "TPU v3 slices are 2D: z must be 1"},
      {R"({"topology": {"chip": "v5p", "shape": [4, 4, 4], "slices": 0}})",
       "topology.bad-value",
       "/topology/slices",
       "expected an integer >= 1, got number 0"},
      {R"({"chip": "h100", "kind": "tpu", "devices": 8})",
       "topology.bad-value",
       "/kind",
       "h100 is a gpu chip; kind must be \"gpu\""},
      {R"({"chip": "h100", "devices": "16"})",
       "json.type",
       "/devices",
       "expected an integer >= 1, got string \"16\""},
      {R"({"chip": "h100", "devices": 16, "devices": 8})",
       "json.duplicate-key",
       "/devices",
       "duplicate key \"devices\""},
      {R"({"topology": [1]})",
       "json.type",
       "/topology",
       "expected a topology object, got array"},
      {R"([1, 2])",
       "json.type",
       "",
       "expected a JSON object at the top level, got array"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    Diagnostics diags;
    CHECK_FALSE(read_topology_file(c.text, "t.json", diags));
    REQUIRE(diags.items().size() == 1);
    const Diagnostic& d = diags.items()[0];
    CHECK(d.code == c.code);
    CHECK(d.location.source == "t.json");
    CHECK(d.location.pointer == c.pointer);
    CHECK(d.message == c.message);
    // The whole document's faults are shown at its first byte.
    CHECK((d.location.line == 1) == (std::string_view(c.pointer).empty()));
  }

  Diagnostics diags;
  CHECK_FALSE(read_topology_file(
      "{\n  \"chip\": \"v5p\",\n  \"shape\": [4, 4,]\n}", "t.json", diags));
  REQUIRE(diags.items().size() == 1);
  CHECK(diags.items()[0].code == "json.syntax");
  CHECK(diags.items()[0].location.line == 3);
}

TEST_CASE("topology files: a latency of 0 is a figure like any",
          "[io][topology_file]") {
  Diagnostics diags;
  std::optional<Topology> t = read_topology_file(
      R"({"chip": "v5p", "shape": [2, 2, 2], "figures": {"ici_latency_s": 0}})",
      "t.json",
      diags);
  REQUIRE(t);
  CHECK(t->figures.ici_latency_s.value == 0);
}
