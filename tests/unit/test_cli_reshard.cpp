// `shardplan reshard` through cli::run(): inputs, located input errors (exit
// 2), the JSON document and the text report.

#include "cli/commands.hpp"
#include "support/test_support.hpp"

#include <shardplan/report.hpp>
#include <shardplan/reshard.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

using nlohmann::json;
namespace fs = std::filesystem;
using Strings = std::vector<std::string>;
using shardplan::test::args;
using shardplan::test::CliResult;
using shardplan::test::examples;
using shardplan::test::parse_json;
using shardplan::test::run_cli;
using shardplan::test::temp_dir;

namespace {

// The scaling book's tensor: a bf16[2048, 8192] on v5e 8x4; `more` replaces
// the value of a flag already given, or is appended.
Strings one_tensor(Strings more) {
  Strings args = shardplan::test::args(
      "reshard --topology v5e-32 --from-mesh X:8,Y:4 --to-mesh X:8,Y:4 "
      "--shape 2048,8192 --dtype bf16");
  for (size_t i = 0; i < more.size(); ++i) {
    auto given = std::find(args.begin(), args.end(), more[i]);
    if (more[i].starts_with("--") && given != args.end()
        && i + 1 < more.size()) {
      *(given + 1) = more[++i];
    } else {
      args.push_back(more[i]);
    }
  }
  return args;
}

// tiny-llama from its specs file on fsdp:2,tp:4 (v5e-8) to fsdp-tp rules on
// the same mesh; `more` is appended.
Strings tiny(Strings more) {
  Strings args = shardplan::test::args(
      "reshard --topology v5e-8 --from-mesh fsdp:2,tp:4 --to-mesh fsdp:2,tp:4 "
      "--manifest {} --from-specs {}",
      examples("tiny-llama.json"),
      examples("tiny-llama.specs.json"));
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace

TEST_CASE("reshard: every bad input exits 2 with a located message",
          "[cli][reshard]") {
  fs::path dir = temp_dir("reshard_errors");
  const std::string specs = (dir / "to.json").string();
  std::ofstream(specs) << R"({"specs": {"model.norm.weight": ["zz"]}})";
  struct Case {
    const char* what;
    Strings args;
    std::string prefix;  // stderr starts with it
  };
  const std::vector<Case> cases = {
      {"source spec longer than the rank",
       one_tensor(args("--from-spec Y,None,None --to-spec None")),
       "--from-spec: error: sharding P('Y', None, None) is only valid for "
       "values of rank at "
       "least 3"},
      {"unknown axis in the target spec",
       one_tensor(args("--from-spec Y --to-spec None,Z")),
       "--to-spec: error: resource axis: Z of P(None, 'Z') is not found in "
       "mesh"},
      {"duplicate axis",
       one_tensor(args("--from-spec Y,Y --to-spec None")),
       "--from-spec: error: a single NamedSharding spec specification can map "
       "every mesh axis"},
      {"a dim that does not divide",
       args("reshard --topology v5e-32 --from-mesh X:8,Y:4 --to-mesh X:8,Y:4 "
            "--shape 2047,8192 --dtype bf16 --from-spec Y --to-spec None"),
       "--from-spec: error: P('Y') implies that array axis 0 is partitioned 4 "
       "times"},
      {"spec syntax: column and caret",
       one_tensor(args("--from-spec Y --to-spec None,(X")),
       "--to-spec:1:8: error: expected \")\" to close \"(\""},
      {"bad shape",
       one_tensor(args("--shape 2048,8x --from-spec Y --to-spec X")),
       "--shape:1:6: error: expected a dim size (an integer >= 0), got \"8x\" "
       "[cli.shape]\n"
       "  2048,8x\n"
       "       ^\n"},
      {"unknown dtype",
       one_tensor(args("--dtype bf17 --from-spec Y --to-spec X")),
       "--dtype: error: unknown dtype \"bf17\"; did you mean \"bf16\"? "
       "[cli.dtype]"},
      {"unknown dtype in safetensors case",
       one_tensor(args("--dtype BF61 --from-spec Y --to-spec X")),
       "--dtype: error: unknown dtype \"BF61\"; did you mean \"BF16\"? "
       "[cli.dtype]"},
      {"unknown partial axis",
       one_tensor(args("--from-spec Y --to-spec X --partial Q")),
       "--partial:1:1: error: unknown axis \"Q\": the source mesh \"X:8,Y:4\" "
       "has no such axis"},
      {"partial axis the source spec uses",
       one_tensor(args("--from-spec Y --to-spec X --partial X,Y")),
       "--partial:1:3: error: axis \"Y\" holds pending sums, but the source "
       "spec \"Y,None\" of "
       "\"tensor\" splits dim 0 over it"},
      {"topologies of different kinds",
       args("reshard --from-topology v5e-32 --to-topology h100x32 "
            "--from-mesh X:8,Y:4 --to-mesh X:8,Y:4 --shape 8,8 --dtype bf16 "
            "--from-spec X --to-spec Y"),
       "--to-topology: error: cannot reshard from tpu topology \"v5e-32\" to "
       "gpu topology "
       "\"h100x32\"; both sides must be TPU slices or both GPU clusters "
       "[reshard.kind]"},
      {"source mesh does not cover its topology",
       one_tensor(args("--from-mesh X:8,Y:2 --from-spec Y --to-spec X")),
       "--from-mesh:1:1: error: the mesh needs 16 devices (8 x 2) but there "
       "are 32"},
      {"target mesh does not cover its topology",
       args("reshard --from-topology v5e-32 --to-topology v5e-16 "
            "--from-mesh X:8,Y:4 --to-mesh X:8,Y:4 --shape 8,8 --dtype bf16 "
            "--from-spec X --to-spec Y"),
       "--to-mesh:1:1: error: the mesh needs 32 devices (8 x 4) but there are "
       "16; "
       "--to-topology v5e-16 has 16 devices"},
      {"unknown target topology",
       args(
           "reshard --topology v5e-32 --to-topology v5e-17 --from-mesh X:8,Y:4 "
           "--to-mesh X:4,Y:4 --shape 8,8 --dtype bf16 --from-spec X "
           "--to-spec Y"),
       "--to-topology: error: v5e-17 is not a standard v5e slice"},
      {"bad DCN string",
       one_tensor(args("--from-dcn X:2 --from-spec Y --to-spec X")),
       "--from-dcn:1:1: error: DCN factors multiply to 2"},
      // Messages name the flag the user typed, not the other commands'.
      {"DCN factor of an axis the mesh lacks",
       one_tensor(args("--to-dcn Z:2 --from-spec Y --to-spec X")),
       "--to-dcn:1:1: error: --to-dcn names axis \"Z\", which the mesh "
       "lacks"},
      {"a mesh of sizes has no --axis-names in reshard",
       one_tensor(args("--from-mesh 8,4 --from-spec Y --to-spec X")),
       "--from-mesh:1:1: error: a mesh of sizes has no axis names; name the "
       "axes: \"dp:2,tp:4\""},
      {"a tensor without a spec",
       tiny(args("--to-specs {}", specs)),
       specs + ": error: tensor \"model.embed_tokens.weight\" has no spec in "
           + specs},
      {"no specs for the target",
       tiny({}),
       "--to-specs: error: no specs for the target"},
      {"unknown rules preset",
       tiny(args("--to-rules fsdp_tp")),
       "--to-rules: error: unknown rule preset \"fsdp_tp\""},
      {"no topology on one side",
       args("reshard --from-topology v5e-8 --from-mesh a:8 --to-mesh a:8 "
            "--shape 8 --dtype f32 --from-spec a --to-spec None"),
       "--to-topology: error: the source has a topology (v5e-8) but the target "
       "has none"},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.what) {
      CliResult r = run_cli(c.args);
      INFO(r.err);
      CHECK(r.code == 2);
      CHECK(r.out.empty());
      CHECK_THAT(r.err, Catch::StartsWith(c.prefix));
    }
  }
  SECTION("every error of a specs file is reported, located by JSON pointer") {
    std::ofstream(specs) << R"({"specs": {"model.norm.weight": ["zz"]}})";
    CliResult r = run_cli(tiny(args("--to-specs {}", specs)));
    CHECK(r.code == 2);
    CHECK_THAT(
        r.err,
        Catch::Contains(specs
                        + ":/specs/model.norm.weight: error: resource axis: "
                          "zz"));
  }
  SECTION("--format json: a diagnostics document") {
    CliResult r = run_cli(one_tensor(
        args("--from-spec Y --to-spec X --partial Q --format json")));
    CHECK(r.code == 2);
    json j = parse_json(r.out);
    CHECK(j["command"] == "reshard");
    CHECK(j["diagnostics"][0]["code"] == "reshard.partial-axis");
    CHECK(j["diagnostics"][0]["location"]["source"] == "--partial");
    CHECK(j["diagnostics"][0]["location"]["column"] == 1);
  }
  SECTION("a side without a mesh is located at its flag") {
    // --mesh can give both sides theirs, so the parser cannot require
    // --to-mesh; the command says which side lacks one.
    CliResult r = run_cli(args("reshard --from-mesh a:8"));
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK_THAT(r.err,
               Catch::StartsWith("--to-mesh: error: no mesh for the target: "
                                 "give --mesh for both sides or --to-mesh"));
  }
  SECTION("usage errors from the option parser") {
    for (const Strings& args : std::vector<Strings>{
             one_tensor(args("--from-spec Y")),
             one_tensor(args("--from-spec Y --to-spec X --model gpt2")),
             args("reshard --devices 8 --topology v5e-8 --from-mesh a:8 "
                  "--to-mesh a:8 --model gpt2 --from-rules fsdp --to-rules "
                  "fsdp"),
         }) {
      CliResult r = run_cli(args);
      INFO(r.err);
      CHECK(r.code == 2);
      CHECK(r.out.empty());
      CHECK_THAT(r.err, Catch::StartsWith("shardplan: error: "));
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("reshard: JSON has the documented keys", "[cli][reshard]") {
  CliResult r = run_cli(
      args("reshard --topology v5p-128 --model llama-3-8b --from-mesh fsdp:64 "
           "--from-rules fsdp --to-mesh fsdp:16,tp:4 --to-rules fsdp-tp "
           "--format json"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  json j = parse_json(r.out);
  for (const char* key : {"schema_version",
                          "shardplan_version",
                          "command",
                          "from",
                          "to",
                          "manifest",
                          "donate",
                          "partial",
                          "same_mesh",
                          "same_devices",
                          "transfer_link",
                          "transfer_model",
                          "tensors",
                          "totals",
                          "naive_totals",
                          "saved",
                          "summary",
                          "diagnostics"}) {
    CHECK(j.contains(key));
  }
  CHECK(j["command"] == "reshard");
  CHECK(j["from"]["mesh"]["canonical"] == "fsdp:64");
  CHECK(j["to"]["mesh"]["canonical"] == "fsdp:16,tp:4");
  CHECK(j["from"]["topology"]["name"] == "v5p-128");
  CHECK(j["summary"]["tensors"] == 291);
  REQUIRE(j["tensors"].size() == 291);
  const json& up = j["tensors"][6];
  CHECK(up["name"] == "model.layers.0.mlp.up_proj.weight");
  CHECK(up["from_spec"] == json::parse(R"(["fsdp", null])"));
  CHECK(up["to_spec"] == json::parse(R"(["tp", "fsdp"])"));
  CHECK(up["shape"] == json::parse("[14336, 4096]"));
  CHECK(up["steps"].size() >= 1);
  for (const char* key :
       {"op", "mesh_axes", "dim", "bytes_per_device", "link", "seconds"}) {
    CHECK(up["steps"][0].contains(key));
  }
  for (const char* key : {"intermediate",
                          "bytes_per_device",
                          "seconds",
                          "peak_bytes_per_device",
                          "naive"}) {
    CHECK(up.contains(key));
  }
  // Same topology, TPU: ICI, one link of a route (v5p: 9e10 B/s one way,
  // docs/sources.md#tpu-v5p), not all six of a chip at once.
  CHECK(j["same_devices"] == true);
  CHECK(j["transfer_link"]
        == json::parse(
            R"({"link": "ici", "bytes_per_s": 9e10, "latency_s": 1e-6})"));
  CHECK(j["transfer_model"]["links"]
        == json::parse(R"([{"link": "ici", "between": "devices of one slice",
                            "per": "link", "bytes_per_s": 9e10,
                            "latency_s": 1e-6}])"));
  CHECK(j["transfer_model"]["assumptions"].size() >= 3);
  for (const char* key : {"totals", "naive_totals", "saved"}) {
    CHECK(j[key].contains("bytes_per_device"));
    CHECK(j[key].contains("seconds"));
    CHECK(j[key].contains("peak_bytes_per_device"));
  }
}

TEST_CASE("reshard: a plan's JSON output is a specs file", "[cli][reshard]") {
  fs::path dir = temp_dir("reshard_plan_specs");
  const std::string from = (dir / "from.json").string();
  const std::string to = (dir / "to.json").string();
  const Strings common = args("--devices 8 --manifest {} --format json",
                              examples("tiny-llama.json"));
  auto plan = [&](const std::string& mesh,
                  const std::string& rules,
                  const std::string& out) {
    Strings args = shardplan::test::args(
        "plan --mesh {} --rules {} -o {}", mesh, rules, out);
    args.insert(args.end(), common.begin(), common.end());
    CliResult r = run_cli(args);
    INFO(r.err);
    REQUIRE(r.code == 0);
  };
  plan("fsdp:8", "fsdp", from);
  plan("fsdp:2,tp:4", "fsdp-tp", to);
  Strings args = shardplan::test::args(
      "reshard --from-mesh fsdp:8 --to-mesh fsdp:2,tp:4 "
      "--from-specs {} --to-specs {}",
      from,
      to);
  args.insert(args.end(), common.begin(), common.end());
  CliResult r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  json j = parse_json(r.out);
  CHECK_FALSE(j["from"].contains("topology"));  // --devices: no topology
  CHECK(j["transfer_link"].is_null());
  CHECK(j["same_devices"] == true);
  CHECK(j["tensors"].size() == 21);
  // The same as the rules give directly.
  Strings direct = shardplan::test::args(
      "reshard --from-mesh fsdp:8 --to-mesh fsdp:2,tp:4 "
      "--from-rules fsdp --to-rules fsdp-tp");
  direct.insert(direct.end(), common.begin(), common.end());
  json k = parse_json(run_cli(direct).out);
  CHECK(j["tensors"] == k["tensors"]);
  fs::remove_all(dir);
}

TEST_CASE("reshard: one tensor by flags", "[cli][reshard]") {
  CliResult text = run_cli(
      one_tensor(args("--from-spec {} --to-spec None,None", "P('Y', None)")));
  INFO(text.err);
  REQUIRE(text.code == 0);
  CHECK_THAT(text.out,
             Catch::StartsWith("reshard: 1 tensor of --shape\n"
                               "  from mesh X:8,Y:4 (32 devices) on v5e-32\n"
                               "  to   mesh X:8,Y:4 (32 devices) on v5e-32\n"));
  CHECK_THAT(text.out, Catch::Contains("\n  tensor: Y,None -> None,None: "));

  CliResult named = run_cli(
      one_tensor(args("--name w --from-spec Y --to-spec None --format json")));
  REQUIRE(named.code == 0);
  json j = parse_json(named.out);
  CHECK(j["manifest"] == "--shape");
  REQUIRE(j["tensors"].size() == 1);
  CHECK(j["tensors"][0]["name"] == "w");
  CHECK(j["tensors"][0]["dtype"] == "bf16");
  CHECK(j["tensors"][0]["shape"] == json::parse("[2048, 8192]"));
  CHECK(j["tensors"][0]["from_spec"]
        == json::parse(R"(["Y", null])"));  // full rank
  CHECK(j["tensors"][0]["to_spec"] == json::parse("[null, null]"));

  SECTION("a shape in brackets, and a scalar") {
    CliResult brackets = run_cli(
        one_tensor(args("--shape '[2048, 8192]' --from-spec Y --to-spec X")));
    CHECK(brackets.code == 0);
    CliResult scalar = run_cli(one_tensor(
        args("--shape '' --from-spec P() --to-spec P() --format json")));
    INFO(scalar.err);
    REQUIRE(scalar.code == 0);
    CHECK(parse_json(scalar.out)["tensors"][0]["shape"] == json::array());
  }
  SECTION("a dim of 0: a warning at its column, once") {
    // "2048, 0": the 0 is byte 6 of the text, column 7.
    CliResult empty = run_cli(
        one_tensor(args("--shape '2048, 0' --from-spec Y --to-spec None")));
    INFO(empty.err);
    CHECK(empty.code == 0);
    CHECK(empty.err
          == "--shape:1:7: warning: dim 1 of the tensor is 0: it has no "
             "elements; it takes 0 bytes on every device "
             "[manifest.empty-tensor]\n"
             "  2048, 0\n"
             "        ^\n");
  }
  SECTION("--partial, --donate") {
    CliResult r = run_cli(one_tensor(args(
        "--from-spec None --to-spec Y --partial Y --donate --format json")));
    INFO(r.err);
    REQUIRE(r.code == 0);
    json p = parse_json(r.out);
    CHECK(p["partial"] == json::parse(R"(["Y"])"));
    CHECK(p["donate"] == true);
  }
}

TEST_CASE("reshard: same_devices and the transfer link", "[cli][reshard]") {
  auto doc = [](Strings topologies,
                const std::string& from_mesh,
                const std::string& to_mesh) {
    Strings args = shardplan::test::args(
        "reshard --from-mesh {} --to-mesh {} --shape 64,64 --dtype f32 "
        "--from-spec None --to-spec None --format json",
        from_mesh,
        to_mesh);
    args.insert(args.end(), topologies.begin(), topologies.end());
    CliResult r = run_cli(args);
    INFO(r.err);
    REQUIRE(r.code == 0);
    return parse_json(r.out);
  };
  SECTION("one GPU node: NVLink") {
    json j = doc(args("--topology h100x8"), "a:8", "a:2,b:4");
    CHECK(j["same_devices"] == true);
    CHECK(
        j["transfer_link"]
        == json::parse(
            R"({"link": "nvlink", "bytes_per_s": 4.5e11, "latency_s": 6e-7})"));
  }
  SECTION("several GPU nodes: NVLink inside a node, the network between") {
    json j = doc(args("--topology h100x64"), "a:64", "a:8,b:8");
    CHECK(
        j["transfer_link"]
        == json::parse(
            R"({"link": "nvlink", "bytes_per_s": 4.5e11, "latency_s": 6e-7})"));
    CHECK(j["transfer_model"]["links"][1]
          == json::parse(R"({"link": "network", "between": "NVLink domains",
                             "per": "device", "bytes_per_s": 5e10,
                             "latency_s": 2.7e-6})"));
  }
  SECTION("fewer GPU nodes: the same devices") {
    json j = doc(
        args("--from-topology h100x64 --to-topology h100x32"), "a:64", "a:32");
    CHECK(j["same_devices"] == true);
    CHECK(j["transfer_link"]["link"] == "nvlink");
    CHECK(j["transfer_model"]["links"][1]["link"] == "network");
  }
  SECTION("fewer TPU slices: the same devices, ICI inside, DCN between") {
    json j = doc(args("--from-topology 2xv5e-16 --to-topology v5e-16"),
                 "dp:2,a:16",
                 "a:16");
    CHECK(j["same_devices"] == true);
    CHECK(j["transfer_link"]
          == json::parse(
              R"({"link": "ici", "bytes_per_s": 4.5e10, "latency_s": 1e-6})"));
    CHECK(j["transfer_model"]["links"][1]
          == json::parse(R"({"link": "dcn", "between": "slices",
                             "per": "device", "bytes_per_s": 3.125e9,
                             "latency_s": 1e-5})"));
  }
  SECTION("another TPU slice shape: other devices; the slower side's DCN") {
    json j = doc(
        args("--from-topology v5p-128 --to-topology v5e-64"), "a:64", "a:64");
    CHECK(j["same_devices"] == false);
    CHECK(j["transfer_link"]
          == json::parse(
              R"({"link": "dcn", "bytes_per_s": 3.125e9, "latency_s": 1e-5})"));
  }
  SECTION("--devices: no link, no times") {
    json j = doc(args("--devices 8"), "a:8", "a:2,b:4");
    CHECK(j["same_devices"] == true);
    CHECK(j["transfer_link"].is_null());
    CHECK(j["transfer_model"].is_null());
  }
}

TEST_CASE("reshard: text folds layers and lists the most expensive tensors",
          "[cli][reshard]") {
  CliResult r = run_cli(
      args("reshard --topology v5p-128 --model llama-3-8b --from-mesh fsdp:64 "
           "--from-rules fsdp --to-mesh fsdp:16,tp:4 --to-rules fsdp-tp"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out,
             Catch::StartsWith("reshard: 291 tensors of --model llama-3-8b\n"));
  CHECK_THAT(r.out,
             Catch::Contains("\n  model.layers.{0..31}.mlp.up_proj.weight: "
                             "fsdp,None -> tp,fsdp: "));
  CHECK(r.out.find("model.layers.1.mlp.up_proj.weight:") == std::string::npos);
  CHECK_THAT(r.out,
             Catch::Contains(
                 "\ntotals (naive: all_gather to replicated, then slice):\n"));
  CHECK_THAT(r.out, Catch::Contains("\nmost expensive tensors (10):\n"));
  CHECK_THAT(r.out, Catch::EndsWith("result: ok\n"));
}

TEST_CASE("reshard: -o writes the result atomically and prints nothing",
          "[cli][reshard]") {
  fs::path dir = temp_dir("reshard_output");
  const std::string out = (dir / "plan.json").string();
  CliResult r = run_cli(
      one_tensor(args("--from-spec Y --to-spec X --format json -o {}", out)));
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out.empty());
  json j = parse_json(shardplan::test::slurp(out));
  CHECK(j["command"] == "reshard");
  // Bad input leaves the file as it was.
  CliResult bad =
      run_cli(one_tensor(args("--from-spec Q --to-spec X -o {}", out)));
  CHECK(bad.code == 2);
  CHECK(parse_json(shardplan::test::slurp(out)) == j);
  std::vector<fs::path> left;
  for (const auto& entry : fs::directory_iterator(dir)) {
    left.push_back(entry.path().filename());
  }
  CHECK(left == std::vector<fs::path>{"plan.json"});
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------
// Values from the planner, end to end.

TEST_CASE("reshard: the scaling book's all_gather on v5e 8x4",
          "[cli][reshard]") {
  // bf16[2048, 8192] sharded over Y (4) gathered on a 4x8 v5e with no
  // wraparound: 3 x 8 MiB received at 4.5e10 B/s one way ("560 us").
  CliResult r = run_cli(
      one_tensor(args("--from-spec Y,None --to-spec None,None --format json")));
  INFO(r.err);
  REQUIRE(r.code == 0);
  json j = parse_json(r.out);
  const json& t = j["tensors"][0];
  REQUIRE(t["steps"].size() == 1);
  const json& step = t["steps"][0];
  CHECK(step["op"] == "all_gather");
  CHECK(step["mesh_axes"] == json::parse(R"(["Y"])"));
  CHECK(step["dim"] == 0);
  CHECK_FALSE(step.contains("to_dim"));
  CHECK(step["link"] == "ici");
  CHECK(step["bytes_per_device"] == 25165824);
  CHECK(step["seconds"].get<double>() == Approx(3 * 8388608.0 / 4.5e10));
  CHECK(step["seconds"].get<double>() == Approx(5.5924e-4).epsilon(1e-4));
  CHECK(t["from_bytes_per_device"] == 8388608);
  CHECK(t["to_bytes_per_device"] == 33554432);
  CHECK(t["bytes_per_device"] == 25165824);
  CHECK(j["totals"]["bytes_per_device"] == 25165824);
  // The naive plan is the same gather here: nothing saved.
  CHECK(j["saved"]["bytes_per_device"] == 0);

  CliResult text =
      run_cli(one_tensor(args("--from-spec Y,None --to-spec None,None")));
  // 3 x 8388608 / 4.5e10 = 559.24 us, three significant digits.
  CHECK_THAT(text.out,
             Catch::Contains("\n  tensor: Y,None -> None,None: all_gather over "
                             "Y, 24.00 MiB/device, "
                             "559 us\n"));
}

TEST_CASE("reshard: an all_to_all carries to_dim, and totals and saved add up",
          "[cli][reshard]") {
  CliResult r = run_cli(
      args("reshard --devices 32 --from-mesh fsdp:8,tp:4 --to-mesh fsdp:8,tp:4 "
           "--shape 1024,4096 --dtype bf16 --from-spec fsdp,None "
           "--to-spec None,fsdp --format json"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  json j = parse_json(r.out);
  CHECK(j["same_mesh"] == true);
  const json& step = j["tensors"][0]["steps"][0];
  CHECK(step["op"] == "all_to_all");
  CHECK(step["dim"] == 0);
  CHECK(step["to_dim"] == 1);
  CHECK(step["bytes_per_device"] == 1048576 / 8 * 7);
  CHECK(step["link"] == "none");  // --devices: no links, no time
  CHECK(step["seconds"] == 0);
  CHECK(j["naive_totals"]["bytes_per_device"] == 7 * 1048576);
  CHECK(j["saved"]["bytes_per_device"] == 7 * 1048576 - 1048576 / 8 * 7);
  CHECK(j["saved"]["peak_bytes_per_device"]
        == j["naive_totals"]["peak_bytes_per_device"].get<int64_t>()
               - j["totals"]["peak_bytes_per_device"].get<int64_t>());

  // A whole model: the totals are the sums over tensors.
  CliResult model = run_cli(
      args("reshard --topology v5p-128 --model llama-3-8b --from-mesh fsdp:64 "
           "--from-rules fsdp --to-mesh fsdp:16,tp:4 --to-rules fsdp-tp "
           "--format json"));
  REQUIRE(model.code == 0);
  json m = parse_json(model.out);
  // Llama 3 8B: 32 layers x 9 tensors + embedding, final norm and lm_head.
  REQUIRE(m["tensors"].size() == 32 * 9 + 3);
  int64_t bytes = 0;
  double seconds = 0;
  for (const json& t : m["tensors"]) {
    bytes += t["bytes_per_device"].get<int64_t>();
    seconds += t["seconds"].get<double>();
    CHECK_FALSE(t["steps"][0].contains("transfers"));  // only with --transfers
  }
  CHECK(m["totals"]["bytes_per_device"] == bytes);
  CHECK(m["totals"]["seconds"].get<double>() == Approx(seconds));
  CHECK(m["saved"]["bytes_per_device"].get<int64_t>() > 0);
}

TEST_CASE("reshard: the pathways intermediate sharding, end to end",
          "[cli][reshard]") {
  // [fsdp:8, tp:1] -> [fsdp:1, tp:4]: through [split:4, replica:2, tp:1].
  CliResult r = run_cli(
      args("reshard --from-topology v5e-8 --to-topology v5e-4 "
           "--from-mesh fsdp:8,tp:1 --to-mesh fsdp:1,tp:4 --shape 64,64 "
           "--dtype f32 --from-spec fsdp,tp --to-spec fsdp,tp --format json"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  json j = parse_json(r.out);
  CHECK(j["same_mesh"] == false);
  CHECK(j["same_devices"] == false);  // 2x4 and 2x2 chips: other slices
  const json& t = j["tensors"][0];
  CHECK(
      t["intermediate"]
      == json::parse(
          R"({"mesh": {"axes": [{"name": "fsdp_intermediate_split", "size": 4},
                                             {"name": "fsdp_intermediate_replica", "size": 2},
                                             {"name": "tp", "size": 1}]},
                           "spec": ["fsdp_intermediate_split", "tp"],
                           "replicated_axes": ["fsdp_intermediate_replica"]})"));
  REQUIRE(t["steps"].size() == 2);
  CHECK(t["steps"][0]["op"] == "all_gather");
  CHECK(t["steps"][0]["mesh_axes"]
        == json::parse(R"(["fsdp_intermediate_replica"])"));
  CHECK(t["steps"][0]["bytes_per_device"] == 2048);
  const json& send = t["steps"][1];
  CHECK(send["op"] == "send_recv");
  CHECK(send["link"] == "dcn");
  CHECK(send["bytes_per_device"] == 4096);
  // One tensor by flags records every piece: each of the 4 target devices
  // gets its 64 x 16 block from the 4 replica-0 devices, the even positions
  // of v5e-8's ring 0,1,2,3,7,6,5,4.
  REQUIRE(send.contains("transfers"));
  CHECK(send["transfers"].size() == 16);
  int64_t received = 0;
  std::set<int64_t> senders;
  for (const json& piece : send["transfers"]) {
    senders.insert(piece["from_device"].get<int64_t>());
    CHECK(piece["box"].size() == 2);
    received += piece["bytes"].get<int64_t>();
  }
  CHECK(senders == std::set<int64_t>{0, 2, 7, 5});
  CHECK(received == 64 * 64 * 4);
}

TEST_CASE("reshard: --allow-split-physical-axes reaches both sides",
          "[cli][reshard]") {
  // dp:2,fsdp:64,tp:2 on two v5p-256 slices (4x4x8 chips): tp:2 fits no
  // physical axis unless one is split, as JAX's mesh_utils says.
  const std::vector<std::string> args = shardplan::test::args(
      "reshard --from-topology 2xv5p-256 --to-topology v5p-256 "
      "--from-mesh dp:2,fsdp:64,tp:2 --to-mesh fsdp:64,tp:2 "
      "--shape 4096,4096 --dtype bf16 --from-spec fsdp,tp "
      "--to-spec fsdp,tp");
  const CliResult refused = run_cli(args);
  CHECK(refused.code == 2);
  CHECK(refused.err.find("[topology.no-assignment]") != std::string::npos);
  std::vector<std::string> split = args;
  split.push_back("--allow-split-physical-axes");
  const CliResult planned = run_cli(split);
  INFO(planned.err);
  CHECK(planned.code == 0);
  CHECK(planned.out.find("result: ok") != std::string::npos);
}

TEST_CASE("reshard: a whole-model no-op from two slices to one",
          "[cli][reshard]") {
  CliResult r = run_cli(
      args("reshard --from-topology 2xv5p-512 --to-topology v5p-512 "
           "--model llama-3-70b --from-mesh dp:2,fsdp:64,tp:4 "
           "--from-dcn dp:2 --from-rules fsdp-tp --to-mesh fsdp:64,tp:4 "
           "--to-rules fsdp-tp --format json"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const json j = parse_json(r.out);
  // Llama 3 70B (hidden 8192, 80 layers, MLP 28672, 8 KV heads of 128,
  // vocab 128256): per layer q and o 8192^2, k and v 1024 x 8192, gate, up
  // and down 28672 x 8192 = 855,638,016 elements; x 80 plus embed and
  // lm_head 2 x 128256 x 8192 = 70,552,387,584 elements, 141,104,775,168 B
  // in bf16, split 256 ways: 551,190,528 B; the 161 norms of 8192 stay
  // whole, 161 x 16,384 = 2,637,824 B. Total 553,828,352 B (0.52 GiB), each
  // buffer held once: the targets are the sources.
  CHECK(j["totals"]["bytes_per_device"] == 0);
  CHECK(j["totals"]["peak_bytes_per_device"] == 553828352);
}

TEST_CASE("reshard: transfers between meshes cross the torus hop by hop",
          "[cli][reshard]") {
  // Issue 17's example. v5p-512 is 4x8x8 chips, rings on every axis.
  // fsdp:256 runs x, y, z (major to minor); fsdp:64,tp:4 has tp = x and
  // fsdp = y, z. Target (x, y, z) holds rows x/4 of 128256 and columns
  // (8y + z)/64 of 8192: 64 source row blocks of 501 rows, held by the 64
  // chips of its own x plane, 501 x 128 x 2 = 128,256 B from each, 63 of
  // them remote: 8,080,128 B. An all-to-all in an 8x8 plane: every directed
  // link carries 64 x 128,256 B (test_reshard.cpp works it out), at 9e10
  // B/s one way: 91.2043 us, not 8 MB at 540 GB/s (15 us).
  // A manifest rather than --shape, which lists all 16,128 pieces.
  const fs::path dir = temp_dir("reshard_torus");
  const std::string manifest = (dir / "m.json").string();
  const std::string from = (dir / "from.json").string();
  const std::string to = (dir / "to.json").string();
  std::ofstream(manifest) << R"({"params": [{"name": "embed",
      "shape": [128256, 8192], "dtype": "bf16"}]})";
  std::ofstream(from) << R"({"specs": {"embed": ["fsdp", null]}})";
  std::ofstream(to) << R"({"specs": {"embed": ["tp", "fsdp"]}})";
  CliResult r = run_cli(args(
      "reshard --topology v5p-512 --from-mesh fsdp:256 --to-mesh fsdp:64,tp:4 "
      "--manifest {} --from-specs {} --to-specs {} --format json",
      manifest,
      from,
      to));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const json j = parse_json(r.out);
  const json& step = j["tensors"][0]["steps"][0];
  CHECK(step["op"] == "send_recv");
  CHECK(step["link"] == "ici");
  CHECK(step["bytes_per_device"] == 8080128);
  CHECK(step["seconds"].get<double>() == Approx(64.0 * 128256 / 9e10));
  // fsdp:256 is the target mesh re-labelled (fsdp:256 = tp then fsdp), but
  // its all_to_all over fsdp is priced by the book's ring formula, V / (4
  // B) over the axis's two rings, 4x these transfers: they are kept.
  CHECK(j["common_mesh"]["mesh"]["canonical"] == "fsdp:64,tp:4");
  CHECK(j["common_mesh"]["from_axes"]
        == json::parse(R"({"fsdp": ["tp", "fsdp"]})"));
  CHECK(j["tensors"][0]["on_common_mesh"] == false);
}

TEST_CASE("reshard: two slices to one moves inside slice 0", "[cli][reshard]") {
  // Issue 17: 2xv5p-512 (dp over DCN) to v5p-512. Slice 0 holds a whole
  // copy, so no piece crosses DCN. The embedding (tp,fsdp -> fsdp,None) is
  // the all-to-all of the x planes of the example above: 91.2043 us over
  // ICI (it was 1.29 ms over DCN at 6.25 GB/s).
  CliResult r =
      run_cli(args("reshard --from-topology 2xv5p-512 --to-topology v5p-512 "
                   "--model llama-3-70b --from-mesh dp:2,fsdp:64,tp:4 "
                   "--from-dcn dp:2 --from-rules fsdp-tp --to-mesh fsdp:256 "
                   "--to-rules fsdp --format json"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const json j = parse_json(r.out);
  CHECK(j["common_mesh"]["fixed"] == json::parse(R"({"dp": 0})"));
  int steps = 0;
  for (const json& t : j["tensors"]) {
    for (const json& s : t["steps"]) {
      CHECK(s["link"] != "dcn");
      CHECK(s["link"] != "mixed");
      ++steps;
    }
  }
  CHECK(steps >= 723);
  const json& embed = j["tensors"][0];
  CHECK(embed["name"] == "model.embed_tokens.weight");
  CHECK(embed["steps"][0]["link"] == "ici");
  CHECK(embed["seconds"].get<double>() == Approx(64.0 * 128256 / 9e10));
}

// What --transfers adds to the JSON, worked out byte by byte. A transfer is
// a line of 12 spaces, its object and ",\n" (the last "\n"):
//   {"to_device": 1, "from_device": 0, "bytes": 16, "box": [[1, 2], [0, 4]]}
//   '{"to_device": ' 14 + "1" 1, ', "from_device": ' 17 + "0" 1,
//   ', "bytes": ' 11 + "16" 2, ', "box": [' 10, "[1, 2], [0, 4]" 14, "]}" 2:
//   72 bytes, 86 with its indent and ",\n";
//   {"to_device": 12, "from_device": 3, "bytes": 64, "box": [[0, 4], [0, 4]]}
//   is one digit longer, 73, and 86 with its indent and "\n".
// A list adds ",\n" + 8 spaces + '  "transfers": [' 16 + "\n" = 27 before
// its transfers and 8 spaces + "  ]" = 11 after them: 27 + 86 + 86 + 11 =
// 210 bytes. Tensors a and b share the plan, and the JSON repeats it: 420.
TEST_CASE("reshard: the size of the transfers lists, worked by hand",
          "[cli][reshard]") {
  using namespace shardplan;
  const Manifest manifest = test::manifest_of(R"({"params": [
      {"name": "a", "shape": [4, 4], "dtype": "f32"},
      {"name": "b", "shape": [4, 4], "dtype": "f32"},
      {"name": "c", "shape": [2], "dtype": "f32"}]})");
  const Mesh mesh = test::mesh_of("x:4", 4);
  ReshardStep send;
  send.op = ReshardOp::send_recv;
  send.transfers = {Transfer{1, 0, 16, {{{1, 2}}, {{0, 4}}}},
                    Transfer{12, 3, 64, {{{0, 4}}, {{0, 4}}}}};
  TensorReshard moved;
  moved.steps = {send};
  TensorReshard kept;
  kept.steps = {ReshardStep{}};
  ReshardPlan plan;
  plan.plans = {moved, kept};
  plan.plan_of = {0, 0, 1};
  ReshardOptions options;
  options.transfers = true;
  const ReshardReport report{
      manifest, mesh, nullptr, mesh, nullptr, options, plan};
  const TransfersSize size = reshard_transfers_size(report);
  CHECK(size.transfers == 4);
  CHECK(size.json_bytes == 420);
  // The document written is exactly that much longer than without them.
  ReshardPlan bare = plan;
  bare.plans[0].steps[0].transfers.clear();
  const ReshardReport bare_report{
      manifest, mesh, nullptr, mesh, nullptr, options, bare};
  const Diagnostics none;
  const std::string with = render(report, Format::json, none).str();
  const std::string without = render(bare_report, Format::json, none).str();
  CHECK(with.size() == without.size() + 420);

  // The same count on a real plan: a f32[4, 4] from the one device of v5e-1
  // to b:4 on v5e-4 (other devices: every row is sent). Device 0 sends row
  // r, 4 x 4 B = 16 bytes, box [[r, r + 1], [0, 4]], to the device holding
  // it; each line is 12 + 72 + 2 bytes as above, the last 12 + 72 + 1: 27 +
  // 3 x 86 + 85 + 11 = 381 bytes for the one tensor.
  CliResult r =
      run_cli(args("reshard --from-topology v5e-1 --to-topology v5e-4 "
                   "--from-mesh a:1 --to-mesh b:4 --shape 4,4 --dtype f32 "
                   "--from-spec None --to-spec b --format json"));
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());  // far under the threshold: no warning
  // From the "," before the key to the "]" after the last transfer's "\n".
  const size_t begin = r.out.find(",\n          \"transfers\": [\n");
  REQUIRE(begin != std::string::npos);
  const size_t end = r.out.find("\n          ]", begin);
  REQUIRE(end != std::string::npos);
  CHECK(end + 12 - begin == 381);
  CHECK(parse_json(r.out)["tensors"][0]["steps"][0]["transfers"].size() == 4);

  // The warning: over the threshold only, with the count and the size.
  Diagnostics under;
  cli::warn_transfers_size({4, 381}, 381, "--shape", under);
  CHECK(under.items().empty());
  Diagnostics over;
  cli::warn_transfers_size({4, 381}, 380, "--shape", over);
  REQUIRE(over.items().size() == 1);
  CHECK(render(over.items()[0])
        == "--shape: warning: the JSON lists 4 transfers: 381 bytes (381 B) of "
           "output; one tensor's JSON always lists its transfers; the text "
           "output does not [reshard.transfers-size]");
  // 256 MiB = 256 x 1,048,576 = 268,435,456 bytes; 567,751,648 bytes /
  // 1,048,576 = 541.4536 MiB.
  CHECK(cli::k_transfers_warning_bytes == 268'435'456);
  Diagnostics big;
  cli::warn_transfers_size({5'438'016, 567'751'648},
                           cli::k_transfers_warning_bytes,
                           "--transfers",
                           big);
  REQUIRE(big.items().size() == 1);
  CHECK(render(big.items()[0])
        == "--transfers: warning: the JSON lists 5,438,016 transfers: "
           "567,751,648 bytes (541.45 MiB) of output; without --transfers the "
           "JSON has the plan alone [reshard.transfers-size]");
}

// Issue 17's embedding move for every tensor of Llama 3 70B: the JSON's
// transfers lists take 567,751,648 bytes (568,305,358 bytes of JSON with
// --transfers less 553,710 without, as `wc -c` counts them) in 5,438,016
// transfers (its lines with "to_device"). The warning comes on stderr before
// the output is written; text lists no transfers, and says nothing.
TEST_CASE("reshard: --transfers on a whole model warns of the JSON's size",
          "[cli][reshard]") {
  const Strings args = shardplan::test::args(
      "reshard --topology v5p-512 --model llama-3-70b --from-mesh fsdp:256 "
      "--from-rules fsdp --to-mesh fsdp:64,tp:4 --to-rules fsdp-tp "
      "--transfers");
  Strings json_args = args;
  json_args.insert(json_args.end(), {"--format", "json", "-o", "/dev/null"});
  CliResult r = run_cli(json_args);
  REQUIRE(r.code == 0);
  CHECK(r.out.empty());
  CHECK(r.err
        == "--transfers: warning: the JSON lists 5,438,016 transfers: "
           "567,751,648 bytes (541.45 MiB) of output; without --transfers the "
           "JSON has the plan alone [reshard.transfers-size]\n");
  CliResult text = run_cli(args);
  REQUIRE(text.code == 0);
  CHECK(text.err.empty());
}
