// The training workload on plan, check and memory through cli::run(): the
// activations memory counts, what the verdict says it counts, --config
// beside --manifest, and the located input errors (exit 2) of docs/memory.md
// ("Errors").

#include "support/test_support.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

using nlohmann::json;
namespace fs = std::filesystem;
using Strings = std::vector<std::string>;
using shardplan::test::args;
using shardplan::test::CliResult;
using shardplan::test::run_cli;

namespace {

// The JSON document of a run that exits 0, or 1 when `over` (a plan over
// capacity).
json run_json(Strings args, bool over = false) {
  args.insert(args.end(), {"--format", "json"});
  const CliResult r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == (over ? 1 : 0));
  REQUIRE(json::accept(r.out));
  return json::parse(r.out);
}

// Llama-3-70B (h 8192, 80 layers, vocab 128256) trained with Adam on
// v5p-256 (128 chips of 95.74 GiB) as fsdp:32,tp:4: the example.
// `more` is appended; a --mesh in it replaces the mesh.
Strings llama_70b(Strings more) {
  Strings args = shardplan::test::args(
      "memory --model llama-3-70b --rules fsdp-tp --topology v5p-256 "
      "--mesh fsdp:32,tp:4 --recipe adam");
  for (size_t i = 0; i < more.size(); ++i) {
    if (more[i] == "--mesh" && i + 1 < more.size()) {
      args[8] = more[++i];
    } else {
      args.push_back(more[i]);
    }
  }
  return args;
}

// The first line of stderr, for a located error.
std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

}  // namespace

TEST_CASE("cli workload: Llama-3-70B's activations worked by hand",
          "[cli][workload]") {
  // Batch 128 over the 32 fsdp shards: b = 4 sequences of s = 8192 tokens
  // per device; tp:4 splits heads and vocab, not the layer input.
  const json full =
      run_json(llama_70b(args("--seq 8192 --batch 128")))["memory"];
  const json none = run_json(
      llama_70b(args("--seq 8192 --batch 128 --remat none")), true)["memory"];
  const json& a = full["activations"];
  CHECK(a["microbatch_size"] == 4);
  CHECK(a["tokens"] == 32'768);
  // remat full keeps each layer's input: 2*s*b*h = 2 x 8192 x 4 x 8192.
  CHECK(a["per_layer_bytes"] == 536'870'912);
  CHECK(a["layers_bytes"] == 80 * int64_t{536'870'912});
  // token ids, int32: 4*s*b.
  CHECK(a["embedding_bytes"] == 131'072);
  // The head: final norm input and head input 2*s*b*h each, the logits
  // 2*s*b*v/t and their fp32 copy 4*s*b*v/t, v/t = 128256 / 4 = 32064.
  CHECK(a["logits_bytes"]
        == 2 * int64_t{536'870'912} + 2 * int64_t{32'768} * 32'064
               + 4 * int64_t{32'768} * 32'064);
  // The backward of one layer rebuilds what remat none would have kept.
  CHECK(a["recompute_bytes"].get<int64_t>()
        == none["activations"]["per_layer_bytes"].get<int64_t>() - 536'870'912);
  CHECK(none["activations"]["recompute_bytes"] == 0);
  // The loss, then each layer's backward: the larger, the head's here.
  CHECK(a["logits_bytes"].get<int64_t>() > a["recompute_bytes"].get<int64_t>());
  CHECK(a["total_bytes"].get<int64_t>()
        == a["layers_bytes"].get<int64_t>()
               + a["embedding_bytes"].get<int64_t>()
               + a["logits_bytes"].get<int64_t>());
  // Memory counts them beside the model state.
  const json& d = full["per_device"];
  CHECK(d["activations"] == a["total_bytes"]);
  CHECK(d["total"].get<int64_t>()
        == d["params"].get<int64_t>() + d["grads"].get<int64_t>()
               + d["optimizer"].get<int64_t>()
               + d["gather_buffer"].get<int64_t>()
               + d["activations"].get<int64_t>());
  CHECK(full["fits"] == true);
  // Twice the batch holds twice the layers' inputs: 80 GiB of them alone,
  // over the 86.17 GiB usable with the model state.
  const CliResult twice = run_cli(llama_70b(args("--seq 8192 --batch 256")));
  CHECK(twice.code == 1);
  // The hint points at the activations, most of the total.
  CHECK(twice.err.find("; activations are ") != std::string::npos);
  CHECK(twice.out.find("DOES NOT FIT (counts weights + grads + optimizer + "
                       "gather buffer + activations (remat full, 8 x 8192 "
                       "tokens))")
        != std::string::npos);
  // Without a workload the verdict says what it leaves out.
  const CliResult states = run_cli(llama_70b({}));
  CHECK(states.code == 0);
  CHECK(states.out.find("fits (counts weights + grads + optimizer + gather "
                        "buffer; activations not counted: give --seq and "
                        "--batch)")
        != std::string::npos);
}

TEST_CASE("cli workload: microbatches, remat and sequence parallelism",
          "[cli][workload]") {
  auto activations = [](Strings more, bool over = false) {
    Strings args = shardplan::test::args("--seq 8192 --batch 128");
    args.insert(args.end(), more.begin(), more.end());
    return run_json(llama_70b(args), over)["memory"]["activations"];
  };
  const json one = activations({});
  // 4 microbatches of 1 sequence: a quarter of each layer's input.
  const json four = activations(args("--microbatches 4"));
  CHECK(four["microbatch_size"] == 1);
  CHECK(four["layers_bytes"].get<int64_t>() * 4 == one["layers_bytes"]);
  // Megatron's sequence parallelism splits the layer input over tp:4.
  const json sp = activations(args("--sequence-parallel"));
  CHECK(sp["per_layer_bytes"].get<int64_t>() * 4 == one["per_layer_bytes"]);
  // More remat never keeps more.
  const json minimal = activations(args("--remat minimal"), true);
  const json none = activations(args("--remat none"), true);
  CHECK(one["per_layer_bytes"] <= minimal["per_layer_bytes"]);
  CHECK(minimal["per_layer_bytes"] <= none["per_layer_bytes"]);
  // An offloading policy keeps its tensors in host memory, not HBM.
  const json offloaded = activations(args("--remat minimal_offloaded"));
  CHECK(offloaded["per_layer_bytes"] == one["per_layer_bytes"]);
  CHECK(offloaded["host_offload_bytes"].get<int64_t>()
        == 80
               * (minimal["per_layer_bytes"].get<int64_t>()
                  - one["per_layer_bytes"].get<int64_t>()));
}

TEST_CASE("cli workload: pipeline stages count the most loaded stage",
          "[cli][workload]") {
  // pp:4 over 80 layers, 8 microbatches: stage r holds min(4 - r, 8)
  // microbatches of its 20 layers (1F1B); each layer input is 2*s*b*h with
  // b = 128 / (8 x 8 fsdp shards) = 2.
  const json m =
      run_json(llama_70b(args("--mesh pp:4,fsdp:8,tp:4 --seq 8192 --batch 128 "
                              "--microbatches 8")))["memory"];
  const json& a = m["activations"];
  const int64_t layer = int64_t{2} * 8192 * 2 * 8192;
  REQUIRE(a["per_stage"].size() == 4);
  for (int64_t r = 0; r < 4; ++r) {
    INFO("stage " << r);
    const json& st = a["per_stage"][static_cast<size_t>(r)];
    CHECK(st["in_flight"] == 4 - r);
    CHECK(st["layers_bytes"] == 20 * layer * (4 - r));
    CHECK(m["stages"][static_cast<size_t>(r)]["activations"]
          == st["total_bytes"]);
  }
  // The first stage holds the most and is the one counted.
  CHECK(m["placement"]["stage"] == 0);
  CHECK(a["stage"] == 0);
  CHECK(m["per_device"]["activations"] == a["per_stage"][0]["total_bytes"]);
  // Interleaved with V = 2 virtual stages: the first stage holds
  // min(2 (S-1) + (V-1) S + 1, M V) = 11 chunks of 10 layers, 110 layers'
  // worth: Korthikanti et al.'s L (1 + (S-1)/(S V)) = 80 x 1.375.
  const json v2 = run_json(llama_70b(
      args("--mesh pp:4,fsdp:8,tp:4 --seq 8192 --batch 128 "
           "--microbatches 8 --stage-interleave 2")))["memory"]["activations"];
  CHECK(v2["per_stage"][0]["in_flight"] == 5.5);
  CHECK(v2["per_stage"][0]["layers_bytes"] == 20 * layer * 11 / 2);
}

TEST_CASE("cli workload: --config gives a manifest its architecture",
          "[cli][workload]") {
  const fs::path dir =
      fs::temp_directory_path() / "shardplan_test_cli_workload";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string manifest = (dir / "llama-3-8b.json").string();
  REQUIRE(
      run_cli(args("manifest --model llama-3-8b --format json -o {}", manifest))
          .code
      == 0);
  const Strings workload =
      args("--topology v5p-128 --mesh fsdp:16,tp:4 --seq 4096 --batch 64");
  Strings by_model = args("plan --model llama-3-8b");
  by_model.insert(by_model.end(), workload.begin(), workload.end());
  Strings by_config = args(
      "plan --manifest {} --config {}",
      manifest,
      std::string(SHARDPLAN_SOURCE_DIR) + "/configs/models/llama-3-8b.json");
  by_config.insert(by_config.end(), workload.begin(), workload.end());
  const json a = run_json(by_model)["memory"];
  const json b = run_json(by_config)["memory"];
  CHECK(a["activations"] == b["activations"]);
  CHECK(a["per_device"] == b["per_device"]);
  fs::remove_all(dir);
}

TEST_CASE("cli workload: bad input is located, exit 2", "[cli][workload]") {
  const std::string tiny =
      std::string(SHARDPLAN_SOURCE_DIR) + "/configs/examples/tiny-llama.json";
  struct Case {
    Strings args;
    std::string first_line;
  };
  const std::vector<Case> cases = {
      {args("plan --manifest {} --devices 8 --mesh fsdp:2,tp:4 --seq 1024 "
            "--batch 8",
            tiny),
       "--seq: error: --seq needs the model's architecture (layers, hidden "
       "size, heads, MLP, dropout), which a manifest's tensors alone do not "
       "give; give --config FILE (the model's Hugging Face config.json) "
       "beside --manifest, or --model NAME or --from-hf-config FILE instead "
       "[workload.no-architecture]"},
      {llama_70b(args("--batch 128")),
       "--seq: error: --batch needs --seq N, the tokens per sequence; e.g. "
       "--seq 8192 --batch 256 [workload.missing-seq]"},
      {llama_70b(args("--seq 8192 --batch 100")),
       "--batch: error: batch 100 is not divisible by 1 microbatches x 32 "
       "batch shards = 32; batch shards: the data and expert axes: \"fsdp\" "
       "32 [workload.batch-indivisible]"},
      {llama_70b(args("--seq 8192 --batch 128 --microbatches 3")),
       "--batch: error: batch 128 is not divisible by 3 microbatches x 32 "
       "batch shards = 96; batch shards: the data and expert axes: \"fsdp\" "
       "32 [workload.batch-indivisible]"},
      {llama_70b(args("--seq 8192 --batch 128 --remat minmal")),
       "--remat: error: unknown remat policy \"minmal\"; expected one of "
       "none, full, selective, minimal, minimal_with_context, "
       "save_dot_except_mlp, save_dot_except_mlpwi, "
       "save_dot_with_context_except_mlp, save_qkv_proj, save_out_proj, "
       "qkv_proj_offloaded, minimal_offloaded, custom, selective_op; did you "
       "mean "
       "\"minimal\"? "
       "[workload.unknown-remat]"},
      {llama_70b(args("--seq 8190 --batch 128 --mesh fsdp:8,cp:4,tp:4")),
       "--seq: error: sequence length 8190 is not divisible by 4 sequence "
       "shards; sequence axes: \"cp\" 4 [workload.sequence-indivisible]"},
      {llama_70b(args("--stage-axes pq")),
       "--stage-axes: error: stage axis \"pq\" is not an axis of the mesh "
       "fsdp:32,tp:4; the mesh's axes are fsdp, tp [mesh.role-axis]"},
  };
  for (const Case& c : cases) {
    const CliResult r = run_cli(c.args);
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(first_line(r.err) == c.first_line);
  }
}

TEST_CASE(
    "cli workload: a stage axis that does not divide the layers is "
    "one error",
    "[cli][workload]") {
  // Llama-3-8B has 32 layers; pp:3 does not divide them.
  const Strings mesh =
      args("plan --model llama-3-8b --devices 48 --mesh pp:3,fsdp:16");
  Strings with = mesh;
  with.insert(with.end(), {"--seq", "4096", "--batch", "48"});
  for (const Strings& args : {mesh, with}) {
    const CliResult r = run_cli(args);
    INFO(r.err);
    CHECK(r.code == 2);
    size_t errors = 0;
    for (size_t at = r.err.find(": error: "); at != std::string::npos;
         at = r.err.find(": error: ", at + 1)) {
      ++errors;
    }
    CHECK(errors == 1);
    CHECK(r.err.find("32 decoder layers") != std::string::npos);
  }
}

TEST_CASE("cli workload: the optimizer step's peak after the backward",
          "[cli][workload]") {
  // GPT-2 (f32) on one device with Adam: nothing is gathered, so without a
  // workload the step's fp32 update of the largest tensor, wte [50257,
  // 768]: 4 x 38,597,376 = 154,389,504 bytes, is the transient peak.
  const Strings gpt2 = args(
      "memory --model gpt2 --rules fsdp --devices 1 --mesh dp:1 "
      "--recipe adam");
  const json m = run_json(gpt2)["memory"];
  const json& d = m["per_device"];
  CHECK(d["optimizer_step"] == 154'389'504);
  CHECK(d["gather_buffer"] == 0);
  CHECK(d["total"].get<int64_t>()
        == d["params"].get<int64_t>() + d["grads"].get<int64_t>()
               + d["optimizer"].get<int64_t>() + 154'389'504);
  const CliResult text = run_cli(gpt2);
  CHECK(text.out.find("optimizer step    154,389,504  147.24 MiB")
        != std::string::npos);
  CHECK(text.out.find("; counts weights + grads + optimizer + optimizer "
                      "step; activations not counted: give --seq and --batch")
        != std::string::npos);
  // With a workload the backward's activations are the larger phase.
  Strings workload = gpt2;
  workload.insert(workload.end(), {"--seq", "1024", "--batch", "8"});
  const json w = run_json(workload)["memory"]["per_device"];
  CHECK(w["activations"].get<int64_t>() > 154'389'504);
  CHECK(w["total"].get<int64_t>()
        == w["params"].get<int64_t>() + w["grads"].get<int64_t>()
               + w["optimizer"].get<int64_t>()
               + w["activations"].get<int64_t>());
}

TEST_CASE("cli workload: the step's roofline warnings", "[cli][workload]") {
  auto warnings = [](Strings args) {
    const CliResult r = run_cli(args);
    INFO(r.err);
    CHECK(r.code == 0);
    return r.err;
  };
  const Strings base = args("plan --model llama-3-8b --recipe adam");
  auto with = [&](Strings more) {
    Strings args = base;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  // fsdp:64 on v5p-128 (4x4x4) spans the three torus axes: 3 rings of 2 x
  // 9e10 B/s = 5.4e11 B/s; critical batch 4.59e14 / 5.4e11 = 850 tokens
  // (the scaling book's 850 on 3 axes, docs/sources.md#rooflines). One
  // sequence of 512 tokens a device is below it; 1024 is not.
  const std::string below = warnings(
      with(args("--topology v5p-128 --mesh fsdp:64 --seq 512 --batch 64")));
  CHECK(below.find("512 tokens per device and microbatch are below the "
                   "critical batch of FSDP axis fsdp: 850")
        != std::string::npos);
  CHECK(
      warnings(
          with(args("--topology v5p-128 --mesh fsdp:64 --seq 1024 --batch 64")))
          .find("step.below-critical-batch")
      == std::string::npos);
  // Tensor parallelism: MLP width x bandwidth / peak = 14336 x 3.6e11 /
  // 4.59e14 = 11.2 on a two-axis ring pair; 16-way is wider.
  CHECK(
      warnings(
          with(args(
              "--topology v5p-128 --mesh fsdp:4,tp:16 --seq 2048 --batch 16")))
          .find("tensor parallelism 16-way exceeds what its links keep "
                "compute-bound for an MLP width of 14336: 11.2")
      != std::string::npos);
  // H100 (docs/sources.md#rooflines): in a node at NCCL's measured 3.7e11
  // B/s (docs/sources.md#nccl-measured) 9.89e14 / 3.7e11 = 2673 (the book's
  // ~2200 is at the datasheet's 4.5e11); across nodes the node's 8 x 50e9
  // B/s serve its GPUs, 9.89e14 / 4e11 = 2472 (the book's 2475).
  CHECK(warnings(
            with(args("--topology h100x8 --mesh fsdp:8 --seq 2048 --batch 8")))
            .find("critical batch of FSDP axis fsdp: 2673 = 9.89e+14 FLOP/s "
                  "/ 3.7e+11 B/s")
        != std::string::npos);
  const std::string nodes = warnings(
      with(args("--topology h100x64 --mesh fsdp:64 --seq 2048 --batch 64")));
  CHECK(nodes.find("critical batch of FSDP axis fsdp: 2472 = 9.89e+14 "
                   "FLOP/s / 4e+11 B/s")
        != std::string::npos);
  CHECK(nodes.find("step.over-dcn") == std::string::npos);
  // An MoE model needs E / K times the tokens: Mixtral's 8 experts, top-2.
  CHECK(
      warnings(
          args(
              "plan --model mixtral-8x7b-v0.1 --recipe adam --topology v5p-128 "
              "--mesh fsdp:16,ep:4 --seq 2048 --batch 64"))
          .find(" x 8 experts / 2 per token; its collectives cannot hide")
      != std::string::npos);
  // FSDP across two slices crosses DCN.
  CHECK(warnings(
            with(args("--topology 2xv5p-256 --dcn fsdp:2 --mesh fsdp:64,tp:4 "
                      "--seq 4096 --batch 256")))
            .find("[step.over-dcn]")
        != std::string::npos);
}

TEST_CASE("cli workload: --overlap and --capacity-factor set the step's rules",
          "[cli][workload]") {
  auto step = [](Strings more) {
    Strings args = shardplan::test::args(
        "plan --model mixtral-8x7b-v0.1 --recipe adam --topology v5p-128 "
        "--mesh fsdp:16,ep:4 --seq 4096 --batch 64");
    args.insert(args.end(), more.begin(), more.end());
    return run_json(args)["step"];
  };
  const json base = step({});
  const json none = step(args("--overlap none"));
  const json all = step(args("--overlap fsdp,grads,tensor,expert"));
  // Exposing everything never shortens the step; hiding more never
  // lengthens it; the collectives' own times do not change.
  CHECK(none["step_seconds"].get<double>()
        >= base["step_seconds"].get<double>());
  CHECK(all["step_seconds"].get<double>()
        <= base["step_seconds"].get<double>());
  CHECK(none["comm_seconds"].get<double>()
        == Approx(base["comm_seconds"].get<double>()));
  CHECK(none["exposed_comm_seconds"].get<double>()
        == Approx(none["comm_seconds"].get<double>()));
  CHECK(base["assumptions"]["overlap"]["value"]
        == "fsdp gathers prefetched, gradient reduction behind the backward, "
           "tensor collectives exposed, expert all-to-all exposed");
  // A capacity factor of 2 doubles the all-to-all's bytes.
  const json doubled = step(args("--capacity-factor 2"));
  for (size_t i = 0; i < base["collectives"].size(); ++i) {
    if (base["collectives"][i]["what"] == "expert all-to-all") {
      CHECK(doubled["collectives"][i]["bytes_per_device"].get<int64_t>()
            == 2 * base["collectives"][i]["bytes_per_device"].get<int64_t>());
    }
  }
  CHECK(doubled["assumptions"]["expert_load"]["value"] == "2");
}

TEST_CASE("cli workload: the hottest expert rank's load",
          "[cli][workload][step]") {
  // Mixtral-8x7B (h 4096, 8 experts, top 2, Im 14336, 32 layers) on
  // v5p-128 as fsdp:16,ep:4, batch 64, seq 4096: one sequence a device,
  // 4,096 tokens. Under remat none an MoE layer keeps its routed tensors:
  // the dispatch and the experts' outputs 2 x 4096 x 2 x 4096 each
  // (67,108,864) and the gate, up and product 2 x 4096 x 2 x 14336 each
  // (234,881,024): 838,860,800 bytes. A capacity factor of 1.25 pads them
  // to 1.25 x, 209,715,200 more; a routing imbalance of 1.5 (dropless) puts
  // 1.5 x on the hottest rank, 419,430,400 more. The expert all-to-all
  // moves 4 x 4096 x 2 x 4096 x 2 = 268,435,456 bytes x the load, and the
  // hottest rank computes (load - 1) x 3 x 32 layers x 6 h Im K
  // (704,643,072) FLOPs a token more, over its 4,096 tokens.
  auto plan = [](const std::string& more) {
    return run_json(
        args("plan --model mixtral-8x7b-v0.1 --recipe adam --topology v5p-128 "
             "--mesh fsdp:16,ep:4 --seq 4096 --batch 64 --remat none "
             + more));
  };
  // Every Mixtral layer is an MoE layer: the per-layer figure is one's.
  auto moe_layer = [](const json& doc) {
    return doc["memory"]["activations"]["per_layer_bytes"].get<int64_t>();
  };
  auto all_to_all = [](const json& doc) {
    for (const json& c : doc["step"]["collectives"]) {
      if (c["what"] == "expert all-to-all") {
        return c["bytes_per_device"].get<int64_t>();
      }
    }
    return int64_t{0};
  };
  const json base = plan("");
  CHECK(base["memory"]["activations"]["expert_load"] == 1.0);
  CHECK(all_to_all(base) == 268'435'456);
  const json padded = plan("--capacity-factor 1.25");
  CHECK(padded["memory"]["activations"]["expert_load"] == 1.25);
  CHECK(moe_layer(padded) - moe_layer(base) == 209'715'200);
  CHECK(all_to_all(padded) == 335'544'320);
  CHECK(padded["step"]["flops_per_device"].get<double>()
            - base["step"]["flops_per_device"].get<double>()
        == Approx(0.25 * 3 * 32 * 704'643'072.0 * 4096));
  const json hot = plan("--routing-imbalance 1.5");
  CHECK(hot["memory"]["activations"]["expert_load_source"]
        == "routing imbalance 1.5 on the hottest expert rank, "
           "--routing-imbalance");
  CHECK(moe_layer(hot) - moe_layer(base) == 419'430'400);
  CHECK(all_to_all(hot) == 402'653'184);
  // Without expert axes every rank routes its own tokens: no hottest rank.
  const json flat = run_json(
      args("plan --model mixtral-8x7b-v0.1 --recipe adam --topology v5p-128 "
           "--mesh fsdp:64 --seq 4096 --batch 64 --remat none "
           "--routing-imbalance 1.5"));
  CHECK(flat["memory"]["activations"]["expert_load"] == 1.0);
}

TEST_CASE("cli workload: data parallelism over DCN names the per-slice batch",
          "[cli][workload]") {
  // The scaling book (docs/sources.md#dcn): pure data parallelism across slices
  // is compute-bound iff a slice's tokens exceed peak / DCN bandwidth per chip:
  // 4.59e14 / 6.25e9 = 73,440 on v5p (the book's 71,360 with 4.46e14).
  // 64 sequences of 256 tokens over 2 slices: 8192 tokens a slice.
  const CliResult r =
      run_cli(args("plan --model llama-3-8b --recipe adam --topology 2xv5p-256 "
                   "--dcn dp:2 --mesh dp:2,fsdp:32,tp:4 --seq 256 --batch 64"));
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("comm-bound: ") != std::string::npos);
  CHECK(r.out.find("data all-reduce (gradients) on dp over dcn")
        != std::string::npos);
  CHECK(r.out.find("; per-slice batch 8192 tokens < 73440")
        != std::string::npos);
}

TEST_CASE("cli workload: every format of plan shows the step",
          "[cli][workload]") {
  const Strings args = shardplan::test::args(
      "plan --model llama-3-8b --recipe adam --topology v5p-128 "
      "--mesh fsdp:16,tp:4 --seq 8192 --batch 64");
  auto run = [&](std::string format) {
    Strings a = args;
    a.insert(a.end(), {"--format", format});
    const CliResult r = run_cli(a);
    CHECK(r.code == 0);
    return r.out;
  };
  const json doc = json::parse(run("json"));
  const double seconds = doc["step"]["step_seconds"].get<double>();
  CHECK(seconds > 0);
  CHECK(run("text").find("\n  step ") != std::string::npos);
  CHECK(run("markdown").find("\nStep ") != std::string::npos);
  // Without a topology there is no step, and the text says why.
  Strings devices = shardplan::test::args(
      "plan --model llama-3-8b --devices 64 --mesh fsdp:16,tp:4 "
      "--seq 8192 --batch 64");
  const CliResult r = run_cli(devices);
  CHECK(r.out.find("step: not estimated; give --topology")
        != std::string::npos);
  devices.insert(devices.end(), {"--format", "json"});
  CHECK(json::parse(run_cli(devices).out)["step"].is_null());
}

TEST_CASE("cli workload: context parallelism's exchange, per strategy",
          "[cli][workload][step]") {
  // Llama-3-8B (32 heads, 8 kv heads of 128) on v5p-32 as
  // fsdp:4,context:4 with MaxText's rules, seq 8192, one sequence a
  // device: b = 16 / 4 = 4 sequences of 8192 / 4 = 2048 tokens, 8,192
  // tokens a device. A layer's K and V: 8,192 x (1024 + 1024) x 2 bytes =
  // 33,554,432. A layer's backward holds, beside its recompute:
  //   all-gather  K, V over all 4 shards and their gradients: 2 x 4 x
  //               33,554,432 = 268,435,456
  //   ring        two chunks of K, V and two of their gradients (TE's
  //               p2p backward): 4 x 33,554,432 = 134,217,728
  //   ulysses     q, k, v, out (4096 + 1024 + 1024 + 4096 a token) by
  //               heads and their gradients: 2 x 8,192 x 10,240 x 2 =
  //               335,544,320
  auto run = [](const std::string& strategy) {
    return run_json(args(
        "memory --topology v5p-32 --model llama-3-8b --mesh fsdp:4,context:4 "
        "--rules maxtext --seq 8192 --per-device-batch 1 --recipe adam "
        "--context-strategy "
        + strategy));
  };
  struct Case {
    const char* strategy;
    int64_t exchange;
  };
  for (const Case& c : {Case{"all-gather", 268'435'456},
                        Case{"ring", 134'217'728},
                        Case{"ulysses", 335'544'320}}) {
    INFO(c.strategy);
    const json doc = run(c.strategy);
    const json& a = doc["memory"]["activations"];
    CHECK(a["context_strategy"] == c.strategy);
    CHECK(a["context_strategy_source"] == "--context-strategy");
    CHECK(a["context_kv_bytes"] == 33'554'432);
    CHECK(a["context_exchange_bytes"] == c.exchange);
    // In the layer's backward phase, beside the recompute.
    const json& stage = a["per_stage"][0];
    CHECK(stage["total_bytes"].get<int64_t>()
          >= stage["layers_bytes"].get<int64_t>()
                 + stage["recompute_bytes"].get<int64_t>() + c.exchange);
    // The step's collectives over the context axis, 32 layers, remat full
    // (the forward runs twice): all-gather 2 x 32 forward gathers of
    // 4 x 33,554,432 bytes, 32 in the backward and 32 reduce-scatters;
    // ring 3 steps x 2 x 32 forward sends of a chunk, 3 x 32 backward
    // sends of a chunk and its gradient; ulysses 2 x 32 and 32 all-to-alls.
    std::vector<std::pair<std::string, int64_t>> rows;
    for (const json& row : doc["step"]["collectives"]) {
      if (row["what"].get<std::string>().starts_with("context")) {
        rows.emplace_back(row["what"], row["count"]);
      }
    }
    const std::string s = c.strategy;
    if (s == "all-gather") {
      CHECK(rows
            == std::vector<std::pair<std::string, int64_t>>{
                {"context all-gather (forward)", 64},
                {"context all-gather (backward)", 32},
                {"context reduce-scatter (backward)", 32}});
    } else if (s == "ring") {
      CHECK(rows
            == std::vector<std::pair<std::string, int64_t>>{
                {"context send (forward)", 192},
                {"context send (backward)", 96}});
    } else {
      CHECK(rows
            == std::vector<std::pair<std::string, int64_t>>{
                {"context all-to-all (forward)", 64},
                {"context all-to-all (backward)", 32}});
    }
  }
  // The default is MaxText's and torchtitan's: all-gather.
  const json plain = run_json(
      args("memory --topology v5p-32 --model llama-3-8b --mesh "
           "fsdp:4,context:4 --rules maxtext --seq 8192 --per-device-batch 1 "
           "--recipe adam"));
  CHECK(plain["memory"]["activations"]["context_strategy"] == "all-gather");
  CHECK(plain["memory"]["activations"]["context_strategy_source"] == "default");
  // Without a sequence axis nothing is exchanged.
  const json none = run_json(
      args("memory --topology v5p-32 --model llama-3-8b --mesh fsdp:16 "
           "--rules maxtext --seq 8192 --per-device-batch 1 --recipe adam"));
  CHECK(none["memory"]["activations"]["context_exchange_bytes"] == 0);
}

TEST_CASE("cli workload: ulysses needs the heads to divide over the sequence",
          "[cli][workload][errors]") {
  // 8 kv heads on a device do not divide over 16 sequence shards.
  const CliResult r = run_cli(
      args("memory --topology v5p-32 --model llama-3-8b --mesh context:16 "
           "--rules maxtext --seq 8192 --per-device-batch 1 "
           "--context-strategy ulysses"));
  CHECK(r.code == 2);
  CHECK(first_line(r.err)
        == "--context-strategy: error: ulysses lays attention out by heads: "
           "the 32 query and 8 key/value heads on a device do not divide "
           "over 16 sequence shards; use all-gather or ring, or fewer "
           "sequence shards [workload.ulysses-heads]");
}

TEST_CASE("cli workload: vocab tiles split the loss's logits",
          "[cli][workload][activations]") {
  // Llama-3-8B on v5p-32 as fsdp:16, seq 8192, one sequence a device:
  // the fused loss holds 8192 x 128,256 x 2 = 2,101,346,304 bytes of
  // logits at once; in 4 tiles, a quarter: 525,336,576.
  auto logits = [](const std::string& more) {
    const json doc = run_json(
        args("memory --topology v5p-32 --model llama-3-8b --mesh fsdp:16 "
             "--rules maxtext --seq 8192 --per-device-batch 1 --recipe adam "
             "--cross-entropy fused "
             + more));
    for (const json& t : doc["memory"]["activations"]["terms"]) {
      if (t["name"] == "logits") {
        return t;
      }
    }
    return json();
  };
  CHECK(logits("")["bytes"] == 2'101'346'304);
  const json tiled = logits("--vocab-tiles 4");
  CHECK(tiled["bytes"] == 525'336'576);
  CHECK(tiled["formula"] == "2*s*b*ceil(v/t)/T");
  // The tiles must divide a device's tokens (MaxText's own check).
  const CliResult bad = run_cli(
      args("memory --topology v5p-32 --model llama-3-8b --mesh fsdp:16 "
           "--rules maxtext --seq 8192 --per-device-batch 1 --vocab-tiles 3"));
  CHECK(bad.code == 2);
  CHECK(first_line(bad.err)
        == "--vocab-tiles: error: the 8192 tokens of a microbatch on a device "
           "are not divisible by 3 vocab tiles; MaxText: "
           "per_device_batch_size x max_target_length must divide by "
           "num_vocab_tiling [workload.vocab-tiles]");
}

namespace {

// The step of tests/data/maxtext/model-run.yml at seq 1024 and 1 sequence
// a device on v6e-8, with `extra` flags.
json model_run_step(const std::string& extra) {
  const CliResult r =
      run_cli(args("memory --topology v6e-8 --format json --maxtext-config {} "
                   "max_target_length=1024 per_device_batch_size=1 "
                       + extra,
                   shardplan::test::data_path("maxtext/model-run.yml")));
  INFO(r.err);
  REQUIRE(r.code == 0);
  return shardplan::test::parse_json_from(r.out, "step")["step"];
}

}  // namespace

// A figure of a catalogue family's file (configs/topologies/<family>.json):
// the fitted constants bench/fit_step.py writes there.
double catalogue_figure(const std::string& family, const std::string& name) {
  const json file = json::parse(
      shardplan::test::slurp(std::string(SHARDPLAN_SOURCE_DIR)
                             + "/configs/topologies/" + family + ".json"));
  return file["figures"][name]["value"].get<double>();
}

TEST_CASE("step: the topology's fitted efficiencies, attention apart",
          "[cli][step]") {
  // tests/data/maxtext/model-run.yml: 4 layers of 8 heads of 128, at seq
  // 1024 and 1 sequence per device on v6e-8 (remat full). The attention
  // kernel's FLOPs a token and layer, causal: 2 x 1024 x 8 x (128 + 128) /
  // 2 = 2,097,152; forward, backward and full remat's recompute: x 4; x 4
  // layers x 1024 tokens = 34,359,738,368. Splash attention's blocks
  // (base.yml: 512) split the 1024 x 1024 scores into 2 x 2 blocks, of
  // which the causal mask hides one: 3/4 of the square computed, 1.5 x the
  // causal half: 51,539,607,552.
  const json s = model_run_step("");
  const double attention = s["attention_flops_per_device"].get<double>();
  const double flops = s["flops_per_device"].get<double>();
  CHECK(attention == 51'539'607'552.0);
  // Blocks of the whole sequence compute it all: 2 x the causal half.
  CHECK(model_run_step("sa_block_q=1024 sa_block_kv=1024 sa_block_q_dkv=1024 "
                       "sa_block_kv_dkv=1024 sa_block_q_dq=1024 "
                       "sa_block_kv_dq=1024")["attention_flops_per_device"]
        == 2 * 34'359'738'368.0);
  // v6e's fitted figures (configs/topologies/v6e.json): the weights'
  // matmuls at matmul_efficiency of 9.18e14, the attention kernel at
  // attention_efficiency, each fitted apart.
  const double matmul = catalogue_figure("v6e", "matmul_efficiency");
  const double kernel = catalogue_figure("v6e", "attention_efficiency");
  CHECK(matmul != kernel);
  CHECK(s["matmul_seconds"].get<double>()
        == Approx((flops - attention) / (9.18e14 * matmul)
                  + attention / (9.18e14 * kernel)));
  CHECK(s["assumptions"]["matmul_efficiency"]["value"]
        == fmt::format("{:g}", matmul));
  CHECK_THAT(
      s["assumptions"]["attention_efficiency"]["source"].get<std::string>(),
      Catch::StartsWith("fitted to 5 published runs (v6e-a"));
  // Flags win: the roofline.
  const json roofline =
      model_run_step("--matmul-efficiency 1 --attention-efficiency 1");
  CHECK(roofline["matmul_seconds"].get<double>() == Approx(flops / 9.18e14));
  CHECK(roofline["assumptions"]["matmul_efficiency"]["source"]
        == "--matmul-efficiency");
  // A chip with no fitted or measured figure keeps the roofline, and says
  // so.
  const CliResult b200 =
      run_cli(args("memory --topology b200x8 --mesh fsdp:8 --model llama-3-8b "
                   "--rules fsdp --seq 1024 --batch 8 --format json"));
  REQUIRE(b200.code == 0);
  const json g = shardplan::test::parse_json_from(b200.out, "step")["step"];
  CHECK(g["assumptions"]["matmul_efficiency"]["value"] == "1");
  CHECK_THAT(g["assumptions"]["matmul_efficiency"]["source"].get<std::string>(),
             Catch::StartsWith("the roofline"));
  // The A100's is measured, not fitted: the maximum achievable matmul rate,
  // 267.9 of 312 TFLOP/s (docs/sources.md#mamf).
  const CliResult a100 =
      run_cli(args("memory --topology a100x8 --mesh fsdp:8 --model llama-3-8b "
                   "--rules fsdp --seq 1024 --batch 8 --format json"));
  REQUIRE(a100.code == 0);
  const json m = shardplan::test::parse_json_from(a100.out, "step")["step"];
  CHECK(m["assumptions"]["matmul_efficiency"]["value"] == "0.859");
  CHECK_THAT(m["assumptions"]["matmul_efficiency"]["source"].get<std::string>(),
             Catch::Contains("267.9 TFLOP/s of 312"));
}

TEST_CASE("step: the band is the step at the efficiencies' spread",
          "[cli][step]") {
  // The band's ends are the step with v6e's two efficiencies each x (1 +
  // efficiency_spread) and x (1 - efficiency_spread), given as flags.
  const json s = model_run_step("");
  const double matmul = catalogue_figure("v6e", "matmul_efficiency");
  const double kernel = catalogue_figure("v6e", "attention_efficiency");
  const double spread = catalogue_figure("v6e", "efficiency_spread");
  CHECK(s["assumptions"]["efficiency_spread"]["value"]
        == fmt::format("{:g}", spread));
  const auto at = [&](double factor) {
    return model_run_step(
        fmt::format("--matmul-efficiency {} --attention-efficiency {}",
                    matmul * factor,
                    kernel * factor));
  };
  const json fast = at(1 + spread);
  const json slow = at(1 - spread);
  CHECK(s["step_seconds_low"].get<double>()
        == Approx(fast["step_seconds"].get<double>()));
  CHECK(s["step_seconds_high"].get<double>()
        == Approx(slow["step_seconds"].get<double>()));
  CHECK(s["step_seconds_low"] < s["step_seconds"]);
  // Tokens/s and MFU at the band's ends: the point's x step / end.
  const double step = s["step_seconds"].get<double>();
  CHECK(s["tokens_per_second_per_device_high"].get<double>()
        == Approx(s["tokens_per_second_per_device"].get<double>() * step
                  / fast["step_seconds"].get<double>()));
  CHECK(s["mfu_low"].get<double>()
        == Approx(s["mfu"].get<double>() * step
                  / slow["step_seconds"].get<double>()));
  CHECK(s["mfu_low"] < s["mfu"]);
  CHECK(s["mfu"] < s["mfu_high"]);
  // Flags give the efficiencies: no band.
  CHECK(fast["step_seconds_low"] == fast["step_seconds"]);
  CHECK(fast["step_seconds_high"] == fast["step_seconds"]);
  CHECK(fast["assumptions"]["efficiency_spread"]["value"] == "0");
}
