// `shardplan search` through cli::run() (docs/search.md): the
// candidates, their figures against `plan` run on each mesh alone, the
// dropped counts, and bad input.

#include "support/test_support.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using nlohmann::json;
using Strings = std::vector<std::string>;
using shardplan::test::args;
using shardplan::test::CliResult;
using shardplan::test::run_cli;

namespace {

json run_json(Strings args, int code = 0) {
  args.insert(args.end(), {"--format", "json"});
  const CliResult r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == code);
  REQUIRE(json::accept(r.out));
  return json::parse(r.out);
}

// search of Llama 3 8B on v5p-256 (128 devices), 4096 tokens, one sequence
// a device, then `extra`.
Strings llama_8b_search(const Strings& extra) {
  Strings args = shardplan::test::args(
      "search --topology v5p-256 --model llama-3-8b --seq 4096 "
      "--per-device-batch 1");
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

TEST_CASE("search: Llama-3-70B on v5p-256, every mesh of fsdp and tp",
          "[cli][search]") {
  // 128 devices over fsdp x tp with tp dividing the 64 heads: tp = 1, 2,
  // 4, ..., 64, seven meshes. On the 4x4x8 torus tp:2 and tp:64 (fsdp:64,
  // fsdp:2) cannot be laid out without splitting a physical axis; at 128
  // sequences of 8192 tokens the layer inputs (2 s b h a layer, not split
  // by tp without sequence parallelism) leave only fsdp:128 and
  // fsdp:32,tp:4 under HBM; pure FSDP wins: its gathers hide behind the
  // compute while tp's all-reduces are exposed.
  const Strings args = shardplan::test::args(
      "search --topology v5p-256 --model llama-3-70b --seq 8192 "
      "--batch 128");
  const json doc = run_json(args);
  CHECK(doc["meshes"] == 7);
  REQUIRE(doc["candidates"].size() == 7);
  CHECK(doc["candidates"][0]["rank"] == 1);
  CHECK(doc["candidates"][0]["mesh"] == "fsdp:128");
  CHECK(doc["candidates"][1]["mesh"] == "fsdp:32,tp:4");
  CHECK(doc["dropped_counts"] == json({{"layout", 2}, {"over_hbm", 3}}));
  // The counts add up: ranked + dropped = candidates.
  int64_t ranked = 0;
  for (const json& c : doc["candidates"]) {
    ranked += c["rank"].is_null() ? 0 : 1;
    CHECK(c["dropped"].is_null() == !c["rank"].is_null());
  }
  CHECK(ranked + 2 + 3 == 7);
  // Each ranked candidate's figures are what `plan` gives for its mesh.
  for (const json& c : doc["candidates"]) {
    if (c["rank"].is_null()) {
      continue;
    }
    INFO(c["mesh"]);
    const json plan = run_json(shardplan::test::args(
        "plan --topology v5p-256 --model llama-3-70b --mesh {} "
        "--recipe adam --seq 8192 --batch 128 --remat {}",
        c["mesh"].get<std::string>(),
        c["remat"].get<std::string>()));
    CHECK(plan["memory"]["max_device_total"]
          == c["memory"]["max_device_total"]);
    CHECK(plan["memory"]["per_device"]["activations"]
          == c["memory"]["per_device"]["activations"]);
    CHECK(plan["step"]["step_seconds"].get<double>()
          == Approx(c["step"]["step_seconds"].get<double>()));
  }
  // Ranked by memory instead, the smaller total comes first.
  Strings by_memory = args;
  by_memory.insert(by_memory.end(), {"--objective", "memory"});
  const json m = run_json(by_memory);
  CHECK(m["candidates"][0]["memory"]["max_device_total"]
        <= m["candidates"][1]["memory"]["max_device_total"]);
}

TEST_CASE("search: across slices the DCN axes take the slices",
          "[cli][search]") {
  // 2xv5p-256: 2 slices of 128 chips. Llama-3-8B has 32 heads: tp in 1, 2,
  // 4, 8, 16, 32 and fsdp the rest of a slice's 128, 6 meshes per slice;
  // the 2 slices go to dp (a leading axis) or to fsdp (the default DCN
  // axes: dp and the data axes of --axes): 12 meshes, each with 2 remat
  // policies x 2 per-device batches.
  std::vector<std::string> args = shardplan::test::args(
      "search --topology 2xv5p-256 --model llama-3-8b --seq 4096 "
      "--per-device-batch 1,2 --remat full,minimal");
  const json doc = run_json(args);
  CHECK(doc["meshes"] == 12);
  REQUIRE(doc["candidates"].size() == 48);
  std::map<std::string, int> by_dcn;
  for (const json& c : doc["candidates"]) {
    INFO(c["mesh"]);
    const std::string mesh = c["mesh"];
    ++by_dcn[c["dcn"].get<std::string>()];
    if (c["dcn"] == "dp:2") {
      CHECK(mesh.starts_with("dp:2,"));
    } else {
      CHECK(c["dcn"] == "fsdp:2");
      CHECK_FALSE(mesh.starts_with("dp"));
      // fsdp takes both slices: its size is even (2 x its part of a slice).
      const size_t at = mesh.find("fsdp:");
      if (at != std::string::npos) {
        CHECK(std::stoi(mesh.substr(at + 5)) % 2 == 0);
      } else {
        CHECK(false);
      }
    }
  }
  CHECK(by_dcn == std::map<std::string, int>{{"dp:2", 24}, {"fsdp:2", 24}});

  // --dcn-axes dp: a leading dp axis takes the slices, on every mesh.
  args.insert(args.end(), {"--dcn-axes", "dp"});
  const json dp = run_json(args);
  CHECK(dp["meshes"] == 6);
  REQUIRE(dp["candidates"].size() == 24);
  for (const json& c : dp["candidates"]) {
    INFO(c["mesh"]);
    CHECK(c["mesh"].get<std::string>().starts_with("dp:2"));
    CHECK(c["dcn"] == "dp:2");
  }
}

TEST_CASE("search: bad input is located, exit 2", "[cli][search]") {
  const std::string tiny =
      std::string(SHARDPLAN_SOURCE_DIR) + "/configs/examples/tiny-llama.json";
  struct Case {
    Strings args;
    std::string first_line;
  };
  const std::vector<Case> cases = {
      {args("search --topology v5p-8 --model llama-3-8b --seq 1024 "
            "--batch 8 --remat full,minmal"),
       "--remat: error: unknown remat policy \"minmal\"; expected one of "
       "none, full, selective, minimal, minimal_with_context, "
       "save_dot_except_mlp, save_dot_except_mlpwi, "
       "save_dot_with_context_except_mlp, save_qkv_proj, save_out_proj, "
       "qkv_proj_offloaded, minimal_offloaded, custom, selective_op; did you "
       "mean "
       "\"minimal\"? "
       "[workload.unknown-remat]"},
      {args("search --topology v5p-8 --model llama-3-8b --seq 1024"),
       "--batch: error: search needs --batch N or --per-device-batch X; "
       "e.g. --seq 8192 --batch 256 [workload.missing-batch]"},
      {args("search --topology v5e-8 --manifest {} --seq 1024 --batch 8", tiny),
       "--manifest: error: search needs the model's architecture, which a "
       "manifest's tensors alone do not give; give --config FILE beside "
       "--manifest, or --model NAME [workload.no-architecture]"},
      {args("search --topology v5p-8 --model llama-3-8b --seq 1024 "
            "--batch 8 --axes fsdp,tp,fsdp"),
       "--axes: error: axis \"fsdp\" given twice; e.g. --axes fsdp,ep,tp "
       "[cli.usage]"},
      {args("search --topology 2xv5p-8 --model llama-3-8b --seq 1024 "
            "--batch 8 --dcn-axes ''"),
       "--dcn-axes: error: an empty axis name; e.g. --dcn-axes dp,fsdp "
       "[cli.usage]"},
  };
  for (const Case& c : cases) {
    const CliResult r = run_cli(c.args);
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(r.err.substr(0, r.err.find('\n')) == c.first_line);
  }
}

TEST_CASE("search: a batch smaller than the devices needs tensor parallelism",
          "[cli][search]") {
  // 32 sequences on 128 devices: the batch axes (fsdp) must divide 32, so
  // fsdp:128 is dropped as indivisible and every mesh that fits has tp.
  const json doc =
      run_json(args("search --topology v5p-256 --model llama-3-70b --seq 8192 "
                    "--batch 32"));
  CHECK(doc["dropped_counts"]["indivisible"] == 1);
  for (const json& c : doc["candidates"]) {
    if (c["mesh"] == "fsdp:128") {
      CHECK(c["dropped"]["reason"] == "indivisible");
    }
    if (!c["rank"].is_null()) {
      CHECK(c["mesh"].get<std::string>().find("tp:") != std::string::npos);
    }
  }
  CHECK(doc["candidates"][0]["mesh"] == "fsdp:32,tp:4");
}

TEST_CASE("search: DeepSeek-V3's experts force an expert axis",
          "[cli][search]") {
  // v5p-512 (256 devices), one 4096-token sequence a device. With fsdp
  // alone, FSDP gathers MoE layers whole: 256 experts x 3 x 7168 x 2048 =
  // 11,274,289,152 weights a layer; a layer's backward holds them in bf16
  // with their gradients (4 bytes), 45,097,156,608 bytes of experts, and
  // the next layer's weights (2) would add 22,548,578,304: beyond the
  // 102.8e9 usable with the model state (42.8e9). XLA then gathers the
  // next layer after this one's backward: it fits, its all-gathers
  // exposed, and ranks below the meshes whose expert axis keeps the
  // experts split at use (/4 on ep:4).
  const json doc =
      run_json(args("search --topology v5p-512 --model deepseek-v3 --seq 4096 "
                    "--per-device-batch 1 --axes fsdp,ep"));
  bool seen = false;
  for (const json& c : doc["candidates"]) {
    if (c["mesh"] == "fsdp:256") {
      seen = true;
      REQUIRE(!c["rank"].is_null());
      const json& memory = c["memory"];
      CHECK(memory["prefetch_dropped"].get<int64_t>()
            > int64_t{22'548'578'304});
      const auto gathered =
          memory["per_device"]["gather_buffer"].get<int64_t>();
      CHECK(gathered > int64_t{45'097'156'608});
      CHECK(gathered < int64_t{67'645'734'912});
      CHECK(c["rank"].get<int64_t>() > 1);
    }
  }
  CHECK(seen);
  CHECK(doc["candidates"][0]["mesh"] == "fsdp:64,ep:4");
}

TEST_CASE("search: --format jax and maxtext write the winner's plan",
          "[cli][search]") {
  // The winner's document is plan's for its mesh, DCN factors, remat and
  // batch (the note line names them), with search's rules and recipe: the
  // two documents differ only in their command and note lines.
  const Strings search = args(
      "search --topology 2xv5p-256 --model llama-3-8b --seq 4096 "
      "--per-device-batch 1,2 --remat full,minimal");
  const json ranked = run_json(search);
  REQUIRE(ranked["candidates"][0]["rank"] == 1);
  const json& winner = ranked["candidates"][0];
  size_t ranked_count = 0;
  for (const json& c : ranked["candidates"]) {
    ranked_count += c["rank"].is_null() ? 0U : 1U;
  }
  for (const std::string format : {"jax", "maxtext"}) {
    Strings args = search;
    args.insert(args.end(), {"--format", format});
    const CliResult found = run_cli(args);
    INFO(found.err);
    REQUIRE(found.code == 0);
    const Strings plan = shardplan::test::args(
        "plan --topology 2xv5p-256 --model llama-3-8b --recipe adam "
        "--mesh {} --dcn {} --seq 4096 --per-device-batch {} "
        "--remat {} --format {}",
        winner["mesh"],
        winner["dcn"],
        winner["per_device_batch"],
        winner["remat"],
        format);
    const CliResult planned = run_cli(plan);
    REQUIRE(planned.code == 0);
    // Without the command and note lines, the documents are the same.
    auto body = [](const std::string& text) {
      std::string out;
      std::istringstream lines(text);
      for (std::string line; std::getline(lines, line);) {
        if (!line.starts_with("# Command:")
            && !line.starts_with("# search's winner")) {
          out += line + "\n";
        }
      }
      return out;
    };
    CHECK(body(found.out) == body(planned.out));
    CHECK(found.out.find(fmt::format(
              "# search's winner, rank 1 of {} by tokens: plan --mesh {} "
              "--dcn {} --remat {} --per-device-batch {}\n",
              ranked_count,
              winner["mesh"].get<std::string>(),
              winner["dcn"].get<std::string>(),
              winner["remat"].get<std::string>(),
              winner["per_device_batch"].get<std::string>()))
          != std::string::npos);
  }

  // No candidate fits: no winner, exit 1, nothing on stdout.
  const CliResult none =
      run_cli(args("search --topology v5p-8 --model llama-3-70b --seq 4096 "
                   "--batch 64 --format jax"));
  CHECK(none.code == 1);
  CHECK(none.out.empty());
  CHECK(none.err.substr(0, none.err.find('\n'))
        == "--format: error: no candidate fits, so there is no winner to "
           "write as jax [search.no-winner]");
}

TEST_CASE("search: a model of wide layers fits fsdp alone unprefetched",
          "[cli][search]") {
  // tests/data/search/wide-llama.json: 4 Llama layers of hidden 32768 and
  // MLP 131072 (64 heads). A layer's matrices: q, k, v, o 4 x 32768^2 =
  // 4,294,967,296 and gate, up, down 3 x 32768 x 131072 = 12,884,901,888,
  // 17,179,869,184 weights. FSDP gathers layers whole at use: a layer's
  // backward holds its bf16 weights and gradients (4 bytes),
  // 68,719,476,736 bytes, and the next one's weights (2) would add
  // 34,359,738,368: 103,079,215,104, over v5p's 95.74 GiB whatever the
  // fsdp size. XLA gives up the prefetch and fsdp:128 fits, its backward's
  // all-gathers exposed; a tensor axis keeps the weights split at use (/4
  // on tp:4: 25,769,803,776) and wins.
  // Parameters per device: 70,816,628,736 matrix weights x 2 bytes / 128 =
  // 1,106,509,824, plus 9 replicated norms of 32768 (589,824 bytes).
  const json doc = run_json(
      args("search --topology v5p-256 --from-hf-config {} --seq 2048 "
           "--batch 128",
           std::string(SHARDPLAN_TEST_DATA_DIR) + "/search/wide-llama.json"));
  bool seen = false;
  size_t ranked = 0;
  for (const json& c : doc["candidates"]) {
    INFO(c["mesh"]);
    if (c["mesh"] == "fsdp:128") {
      seen = true;
      CHECK(!c["rank"].is_null());
      CHECK(c["memory"]["per_device"]["gather_buffer"]
            == int64_t{68'719'476'736});
      CHECK(c["memory"]["prefetch_dropped"] == int64_t{34'359'738'368});
      CHECK(c["memory"]["per_device"]["params"] == int64_t{1'107'099'648});
    }
    if (!c["rank"].is_null()) {
      ++ranked;
    }
  }
  CHECK(seen);
  CHECK(ranked > 1);
  CHECK(doc["candidates"][0]["mesh"].get<std::string>().find("tp:")
        != std::string::npos);
  CHECK(doc["candidates"][0]["mesh"] == "fsdp:32,tp:4");
  CHECK(doc["candidates"][0]["memory"]["per_device"]["gather_buffer"]
        == int64_t{25'769'803'776});
}

TEST_CASE("search: MaxText's rules search MaxText's axis names",
          "[cli][search]") {
  // The maxtext preset splits over MaxText's names only ("tensor", not
  // "tp": other axes hold replicas), so its default axes are fsdp and
  // tensor (and data across slices): a tp axis would hold replicas of every
  // weight while the step counted it as tensor parallelism.
  const json doc = run_json(llama_8b_search(args("--rules maxtext")));
  bool tensor_mesh = false;
  for (const json& c : doc["candidates"]) {
    const std::string mesh = c["mesh"].get<std::string>();
    INFO(mesh);
    CHECK(mesh.find("tp:") == std::string::npos);
    tensor_mesh = tensor_mesh || mesh == "fsdp:32,tensor:4";
  }
  REQUIRE(tensor_mesh);
  // fsdp:32,tensor:4 splits each weight 4 ways more than fsdp:32,tp:4,
  // where MaxText's rules replicate over tp.
  auto total = [](const std::string& mesh) {
    return run_json(args(
        "plan --topology v5p-256 --model llama-3-8b --rules maxtext "
        "--recipe adam --mesh {}",
        mesh))["memory"]["per_device"]["params"]
        .get<int64_t>();
  };
  CHECK(total("fsdp:32,tensor:4") * 3 < total("fsdp:32,tp:4"));
}

TEST_CASE("search: a tensor axis the rules split nothing over is dropped",
          "[cli][search]") {
  // The fsdp preset splits over fsdp only: on a mesh with tp its tp devices
  // hold whole weights, so the step's tensor parallelism does not hold.
  // Every candidate with tp is dropped (reason plan) but the one JAX cannot
  // lay out (fsdp:64,tp:2 on the 4x4x8 torus); fsdp:128 alone ranks.
  const Strings args = llama_8b_search(shardplan::test::args("--rules fsdp"));
  const json doc = run_json(args);
  REQUIRE(doc["candidates"].size() == 6);
  CHECK(doc["candidates"][0]["mesh"] == "fsdp:128");
  CHECK(doc["candidates"][0]["rank"] == 1);
  CHECK(doc["dropped_counts"] == json({{"layout", 1}, {"plan", 4}}));
  for (const json& c : doc["candidates"]) {
    if (c["dropped"] == "plan") {
      INFO(c["mesh"]);
      CHECK(c["mesh"].get<std::string>().find(",tp:") != std::string::npos);
      CHECK(c["message"].get<std::string>().find("tensor axis \"tp\" (") == 0);
    }
  }
  const CliResult text = run_cli(args);
  CHECK(text.out.find("\nfirst plan: fsdp:4,tp:32 (full): tensor axis "
                      "\"tp\" (32) splits no tensor")
        != std::string::npos);
  // plan warns on the same mesh with a workload; fsdp-tp splits over tp.
  Strings plan = shardplan::test::args(
      "plan --topology v5p-256 --model llama-3-8b --mesh fsdp:32,tp:4 "
      "--seq 4096 --batch 128 --rules fsdp");
  const CliResult fsdp = run_cli(plan);
  CHECK(fsdp.code == 0);
  CHECK(fsdp.err.find("[step.tensor-axis-unsplit]") != std::string::npos);
  plan.back() = "fsdp-tp";
  const CliResult fsdp_tp = run_cli(plan);
  CHECK(fsdp_tp.code == 0);
  CHECK(fsdp_tp.err.find("step.tensor-axis-unsplit") == std::string::npos);
}

TEST_CASE("search: --devices searches the catalogue slices of the chip",
          "[cli][search]") {
  // v5p's catalogue slices of 64 to 256 devices: v5p-128 (64 chips, 4x4x4),
  // v5p-256 (128, 4x4x8), v5p-384 (192, 4x4x12), v5p-512 (256, 4x8x8).
  const Strings args = shardplan::test::args(
      "search --topology v5p-256 --devices 64-256 --model llama-3-70b "
      "--seq 8192 --per-device-batch 1");
  const json doc = run_json(args);
  CHECK(doc["slices"] == json({"v5p-128", "v5p-256", "v5p-384", "v5p-512"}));
  CHECK(doc["topology"]["name"] == "v5p-256");
  // Every slice's meshes are tried: the meshes of each, summed (a search
  // of one slice gives the same candidates for it).
  int64_t meshes = 0;
  std::map<std::string, size_t> per_slice;
  for (const json& c : doc["candidates"]) {
    ++per_slice[c["slice"].get<std::string>()];
  }
  for (const std::string slice : {"v5p-128", "v5p-256", "v5p-384", "v5p-512"}) {
    INFO(slice);
    Strings one = shardplan::test::args(
        "search --topology {} --model llama-3-70b --seq 8192 "
        "--per-device-batch 1",
        slice);
    // v5p-384 (4x4x12) fits nothing: 192 = 3 x 64 divides no dim of the
    // model (8192 = 2^13 wide), so each mesh leaves weights whole.
    const json alone = run_json(one, slice == "v5p-384" ? 1 : 0);
    CHECK(alone["slices"] == json({slice}));
    meshes += alone["meshes"].get<int64_t>();
    CHECK(per_slice[slice] == alone["candidates"].size());
    // Its best candidate has the same figures within the wider search.
    const json& best = alone["candidates"][0];
    if (best["rank"].is_null()) {
      continue;
    }
    bool found = false;
    for (const json& c : doc["candidates"]) {
      if (c["slice"] == slice && c["mesh"] == best["mesh"]
          && c["remat"] == best["remat"]) {
        found = true;
        CHECK(c["memory"] == best["memory"]);
        CHECK(c["step"] == best["step"]);
      }
    }
    CHECK(found);
  }
  CHECK(doc["meshes"] == meshes);
  // The winner's plan is written on the winner's slice.
  Strings yaml = args;
  yaml.insert(yaml.end(), {"--format", "maxtext"});
  const CliResult r = run_cli(yaml);
  REQUIRE(r.code == 0);
  const std::string winner_slice = doc["candidates"][0]["slice"];
  CHECK(r.out.find("# Topology: " + winner_slice + ":") != std::string::npos);
}

TEST_CASE("search: --devices errors are located", "[cli][search]") {
  const Strings base = args("search --model llama-3-8b --seq 4096 --batch 64");
  auto run = [&](Strings extra) {
    Strings args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  // No v5p slice of 48 devices: the counts the catalogue has.
  CliResult r = run(args("--topology v5p-256 --devices 48"));
  CHECK(r.code == 2);
  CHECK(r.err.find("--devices: error: the catalogue has no v5p slice of 48 "
                   "devices; v5p's slices have 4, 8, 16, 32, 64, 128, 192, "
                   "256,")
        != std::string::npos);
  CHECK(r.err.find("[topology.size]") != std::string::npos);
  // With two slices the counts are of both slices together.
  r = run(args("--topology 2xv5p-256 --devices 100-120"));
  CHECK(r.code == 2);
  CHECK(r.err.find("no v5p slice of 100 to 120 devices in 2 slices; 2 v5p "
                   "slices together have 8, 16, 32,")
        != std::string::npos);
  for (const char* bad : {"x", "64-", "-64", "128-64", "0", "64,,128"}) {
    INFO(bad);
    r = run(args("--topology v5p-256 --devices {}", bad));
    CHECK(r.code == 2);
    CHECK(r.err.find("--devices: error: ") != std::string::npos);
    CHECK(r.err.find("[cli.usage]") != std::string::npos);
  }
  // A topology file has no catalogue slices to choose from.
  const std::filesystem::path file = std::filesystem::temp_directory_path()
                                     / "shardplan-test-search-devices.json";
  {
    std::ofstream out(file);
    out << R"({"name": "lab", "chip": "v5p", "shape": [4, 4, 8]})";
  }
  r = run(args("--topology {} --devices 64", file.string()));
  std::filesystem::remove(file);
  CHECK(r.code == 2);
  CHECK(r.err.find("--devices: error: --devices takes catalogue slices of a "
                   "chip; --topology "
                   + file.string() + " is a file")
        != std::string::npos);
}

TEST_CASE("search: the loss's kernel and host offload as plan takes them",
          "[cli][search]") {
  // Llama-3-8B on v5p-8 (4 chips) as fsdp:4, one 2048-token sequence a
  // device: the loss's logits are 2048 x 128,256. Fused (XLA) holds them
  // once in bf16, 525,336,576 bytes; eager (PyTorch's F.cross_entropy)
  // three fp32 copies, 3,152,019,456: 2,626,682,880 more at the loss.
  auto winner = [](const std::string& more) {
    return run_json(
        args("search --topology v5p-8 --model llama-3-8b --seq "
             "2048 --batch 4 --axes fsdp "
             + more))["candidates"][0];
  };
  const json fused = winner("--cross-entropy fused");
  const json eager = winner("--cross-entropy eager");
  CHECK(fused["mesh"] == "fsdp:4");
  CHECK(eager["memory"]["per_device"]["activations"].get<int64_t>()
            - fused["memory"]["per_device"]["activations"].get<int64_t>()
        == 2'626'682'880);
  // In 2 vocab tiles the fused logits halve: 262,668,288 bytes less.
  const json tiled = winner("--cross-entropy fused --vocab-tiles 2");
  CHECK(fused["memory"]["per_device"]["activations"].get<int64_t>()
            - tiled["memory"]["per_device"]["activations"].get<int64_t>()
        == 262'668'288);
  // The optimizer state in host memory: HBM peaks at the optimizer step,
  // every state + the largest tensor's fp32 update (the embedding's
  // 128,256 x 4096 / 4 x 4 bytes = 525,336,576).
  const json hosted = winner("--cross-entropy fused --host-offload optimizer");
  const json& per_device = hosted["memory"]["per_device"];
  CHECK(hosted["memory"]["max_device_total"].get<int64_t>()
        == per_device["params"].get<int64_t>()
               + per_device["grads"].get<int64_t>()
               + per_device["optimizer"].get<int64_t>() + 525'336'576);
  CHECK(hosted["memory"]["max_device_total"].get<int64_t>()
        < fused["memory"]["max_device_total"].get<int64_t>());
}
