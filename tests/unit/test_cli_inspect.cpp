// `shardplan mesh`, `topology` and `manifest` through cli::run()
// (src/cli/inspect.cpp): the mesh's table, device grid and JSON, the
// catalogue and a topology's figures, a manifest written and read back.

#include "support/test_support.hpp"

#include <shardplan/io.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

using namespace shardplan;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using Result = test::CliResult;
using test::args;
using test::parse_json;
using test::run_cli;
using test::temp_dir;

}  // namespace

TEST_CASE("cli: mesh text output is a table and the device grid",
          "[cli][inspect]") {
  Result r = run_cli(args("mesh --mesh dp:2,fsdp:-1,tp:2 --devices 8"));
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  CHECK(r.out
        == "mesh dp:2,fsdp:2,tp:2 on 8 devices\n"
           "\n"
           "axis  size  ici  dcn  type\n"
           "dp       2    2    1  auto\n"
           "fsdp     2    2    1  auto\n"
           "tp       2    2    1  auto\n"
           "\n"
           "device ids (dp x fsdp x tp):\n"
           "  [dp=0]\n"
           "    0 1\n"
           "    2 3\n"
           "  [dp=1]\n"
           "    4 5\n"
           "    6 7\n");
}

TEST_CASE("cli: mesh JSON has the documented keys and nested device ids",
          "[cli][inspect]") {
  Result r =
      run_cli(args("mesh --mesh dp:4,tp:2:explicit --devices 8 --dcn dp:2 "
                   "--format json"));
  REQUIRE(r.code == 0);
  json j = parse_json(r.out);
  CHECK(j["schema_version"] == 1);
  CHECK(j["command"] == "mesh");
  CHECK(j["shardplan_version"] == SHARDPLAN_VERSION);
  CHECK(j["mesh"]["devices"] == 8);
  CHECK(j["mesh"]["slices"] == 2);
  CHECK(j["mesh"]["canonical"] == "dp:4,tp:2:explicit");
  CHECK(j["mesh"]["axes"]
        == json::parse(R"([{"name":"dp","size":4,"type":"auto","ici":2,"dcn":2},
                           {"name":"tp","size":2,"type":"explicit","ici":2,"dcn":1}])"));
  CHECK(j["device_ids"] == json::parse("[[0,1],[2,3],[4,5],[6,7]]"));
  CHECK(j["diagnostics"] == json::array());
}

TEST_CASE(
    "cli: bad mesh exits 2 with caret on stderr and JSON diagnostics on stdout",
    "[cli][inspect]") {
  Result text = run_cli(args("mesh --mesh dp:2,tp:x --devices 8"));
  CHECK(text.code == 2);
  CHECK(text.out.empty());
  CHECK(text.err
        == "--mesh:1:9: error: expected an integer axis size, got \"x\" [mesh.syntax]\n"
           "  dp:2,tp:x\n"
           "          ^\n");

  Result js = run_cli(args("mesh --mesh dp:2,tp:x --devices 8 --format json"));
  CHECK(js.code == 2);
  json j = parse_json(js.out);
  CHECK(j["schema_version"] == 1);
  CHECK(j["command"] == "mesh");
  REQUIRE(j["diagnostics"].size() == 1);
  CHECK(j["diagnostics"][0]["severity"] == "error");
  CHECK(j["diagnostics"][0]["code"] == "mesh.syntax");
  CHECK(j["diagnostics"][0]["location"]
        == json::parse(R"({"source":"--mesh","line":1,"column":9})"));
}

TEST_CASE("cli: manifest JSON output reads back as the same manifest",
          "[cli][inspect]") {
  fs::path dir = temp_dir("manifest");
  fs::path in = dir / "in.json";
  {
    std::ofstream f(in);
    f << R"({"params": [
      {"name": "embed", "shape": [50257, 768], "dtype": "float32"},
      {"name": "h.0.ln.weight", "shape": [768], "dtype": "BF16", "logical_axes": ["embed"]},
      {"name": "step", "shape": [], "dtype": "int32"}]})";
  }
  Result r = run_cli(args("manifest --manifest {} --format json", in.string()));
  REQUIRE(r.code == 0);
  json j = parse_json(r.out);
  CHECK(j["command"] == "manifest");
  // 50257*768 + 768 + 1 elements; 4*50257*768 + 2*768 + 4 bytes.
  CHECK(j["summary"]
        == json::parse(
            R"({"tensors":3,"parameters":38598145,"bytes":154391044})"));
  CHECK(
      j["params"][0]
      == json::parse(R"({"name":"embed","shape":[50257,768],"dtype":"f32"})"));
  CHECK(j["params"][1]["logical_axes"] == json::parse(R"(["embed"])"));
  CHECK(j["params"][2]["shape"] == json::array());

  Diagnostics diags;
  auto back = read_manifest(r.out, "out.json", diags);
  INFO(test::first_error(diags));
  REQUIRE(back);
  REQUIRE(back->size() == 3);
  CHECK(back->tensors()[1].dtype == DType::bf16);
  CHECK(back->total_bytes() == 154391044);
  fs::remove_all(dir);
}

TEST_CASE("cli: topology list and show", "[cli][inspect]") {
  Result list = run_cli(args("topology list"));
  CHECK(list.code == 0);
  CHECK_THAT(list.out, Catch::Contains("v5p-128      tpu        64  4x4x4"));
  CHECK_THAT(list.out,
             Catch::Contains("h100x64      gpu        64  8 x 8 GPUs"));

  Result all = run_cli(args("topology list --format json"));
  REQUIRE(all.code == 0);
  json doc = json::parse(all.out);
  CHECK(doc["command"] == "topology");
  CHECK(doc["topologies"].size() > 60);

  Result show = run_cli(args("topology show 2xv5e-256 --format json"));
  REQUIRE(show.code == 0);
  json t = json::parse(show.out)["topology"];
  CHECK(t["name"] == "2xv5e-256");
  CHECK(t["devices"] == 512);
  CHECK(t["slices"] == 2);
  CHECK(t["shape"] == json::array({16, 16, 1}));
  CHECK(t["wraparound"] == json::array({true, true, false}));
  // v5e: memory_stats()['bytes_limit'] (test_topology_catalog.cpp).
  CHECK(t["hbm_bytes_per_device"] == 16909332480LL);
  CHECK(t["links"]["dcn"]["bytes_per_s_per_chip"] == 3.125e9);
  // A multi-slice TPU's figures: HBM, ICI bandwidth per link, links per
  // chip, ICI latency, DCN bandwidth per chip, DCN latency, and the
  // compute figures: bf16 peak and HBM bandwidth per device (v5e's
  // 1.97e14 and 8.19e11, one device per chip), and the host's RAM per
  // chip (ct5lp-hightpu-4t's 192 GB over 4 chips) and its link to it
  // (the scaling book's 1.6e10 B/s); each sourced.
  CHECK(t["figures"].size() == 10);
  CHECK(t["figures"]["host_bytes_per_s_per_chip"]["value"] == 1.6e10);
  CHECK(t["figures"]["bf16_flops_per_s_per_device"]["value"] == 1.97e14);
  CHECK(t["figures"]["hbm_bytes_per_s_per_device"]["value"] == 8.19e11);
  CHECK(t["figures"]["host_memory_bytes_per_chip"]["value"] == 48e9);
  for (const auto& [name, figure] : t["figures"].items()) {
    INFO(name);
    CHECK_FALSE(figure["source"].get<std::string>().empty());
  }

  Result text = run_cli(args("topology show h100x64"));
  CHECK(text.code == 0);
  CHECK_THAT(text.out,
             Catch::Matches("[^]*nvlink_bytes_per_s_per_gpu +4\\.5e\\+11[^]*"));
  CHECK_THAT(text.out,
             Catch::Matches(
                 "[^]*nvlink_collective_bytes_per_s_per_gpu +3\\.7e\\+11[^]*"));

  Result unknown = run_cli(args("topology show v9-8"));
  CHECK(unknown.code == 2);
  CHECK_THAT(unknown.err,
             Catch::StartsWith("--topology: error: unknown topology \"v9-8\""));
}

TEST_CASE("cli: mesh --topology", "[cli][inspect]") {
  Result r = run_cli(args("mesh --topology v5p-128 --mesh fsdp:-1,tp:4"));
  CHECK(r.code == 0);
  CHECK_THAT(
      r.out,
      Catch::Contains("tp       4  ici   yes   x         180 GB/s   1 us"));
  // Host 0's devices (0, 1, 4, 5) are rows 0 and 4 of the grid: no block
  // (worked in test_topology_layout.cpp), said on stderr as a warning.
  CHECK_THAT(r.out,
             Catch::Contains("hosts: 16 of 4 devices; host 0's devices do not "
                             "form a block of the grid: no local mesh"));
  CHECK_THAT(r.out,
             Catch::Contains("eformer's calculate_host_mesh_shape: [1, 4]"));
  CHECK_THAT(r.err, Catch::Contains("[topology.host-block]"));

  // A topology fixes the device count: --devices is a usage error with it.
  Result both =
      run_cli(args("mesh --topology v5p-128 --devices 64 --mesh a:64"));
  CHECK(both.code == 2);

  Result count = run_cli(args("mesh --topology v5p-128 --mesh dp:2,tp:4"));
  CHECK(count.code == 2);
  CHECK_THAT(count.err, Catch::Contains("--topology v5p-128 has 64 devices"));

  Result torus = run_cli(args("mesh --topology v5p-128 --mesh a:2,b:32"));
  CHECK(torus.code == 2);
  CHECK_THAT(torus.err, Catch::Contains("[topology.no-assignment]"));
  CHECK(run_cli(args("mesh --topology v5p-128 --mesh a:2,b:32 "
                     "--allow-split-physical-axes"))
            .code
        == 0);

  // A topology file works wherever a name does.
  fs::path file = fs::temp_directory_path() / "shardplan-test-topology.json";
  {
    std::ofstream f(file);
    f << R"({"name": "lab", "chip": "v5e", "shape": [4, 4]})";
  }
  Result from_file = run_cli(
      args("mesh --topology {} --mesh a:16 --format json", file.string()));
  fs::remove(file);
  REQUIRE(from_file.code == 0);
  json doc = json::parse(from_file.out);
  CHECK(doc["topology"]["name"] == "lab");
  // The v5e 4x4 16-cycle (mesh_utils' ring for 16 devices).
  CHECK(doc["device_ids"]
        == json::array({0, 1, 2, 3, 7, 6, 5, 9, 10, 11, 15, 14, 13, 12, 8, 4}));
  CHECK(doc["physical_assignment"].is_null());
  CHECK(doc["axes_links"][0]["wraparound"] == true);
}
