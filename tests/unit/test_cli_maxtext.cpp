// --maxtext-config FILE [KEY=VALUE ...] through cli::run()
// (src/cli/maxtext.cpp; docs/maxtext.md): the mesh, the rules and the
// workload a config gives plan, memory and search, flags that win over it,
// and its exit codes and messages.

#include "support/test_support.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

using namespace shardplan;
using nlohmann::json;

namespace {

std::string data(const std::string& name) {
  return test::data_path("maxtext/" + name);
}

const json* tensor_of(const json& doc, const std::string& name) {
  for (const json& t : doc.at("tensors")) {
    if (t.at("name") == name) {
      return &t;
    }
  }
  return nullptr;
}

}  // namespace

TEST_CASE("maxtext cli: plan takes the mesh and the rules of a config",
          "[cli][maxtext]") {
  const std::string config = data("small.yml");
  test::CliResult r =
      test::run_cli(test::args("plan --topology v5p-128 --model llama-3-8b "
                               "--maxtext-config {} --format json",
                               config));
  INFO(r.err);
  REQUIRE(r.code == 0);
  json doc = json::parse(r.out);
  // fsdp -1 and tensor 4 on the 64 devices of v5p-128.
  REQUIRE(doc["mesh"]["axes"].size() == 2);
  CHECK(doc["mesh"]["axes"][0]["name"] == "fsdp");
  CHECK(doc["mesh"]["axes"][0]["size"] == 16);
  CHECK(doc["mesh"]["axes"][1]["name"] == "tensor");
  CHECK(doc["mesh"]["axes"][1]["size"] == 4);
  // base.yml's rules: mlp -> tensor first, embed -> fsdp; norm -> tensor.
  const json* up = tensor_of(doc, "model.layers.0.mlp.up_proj.weight");
  REQUIRE(up);
  CHECK((*up)["spec"] == json::array({"tensor", "fsdp"}));
  const json* norm = tensor_of(doc, "model.norm.weight");
  REQUIRE(norm);
  CHECK((*norm)["spec"] == json::array({"tensor"}));

  SECTION("logical_axis_rules of the config replace the preset's") {
    // embed -> tensor comes first, then mlp -> fsdp: up_proj [mlp, embed]
    // becomes [fsdp, tensor]; norm -> [] is replicated.
    test::CliResult custom = test::run_cli(
        test::args("plan --topology v5p-128 --model llama-3-8b "
                   "--maxtext-config {} 'logical_axis_rules=[[embed, tensor], "
                   "[mlp, fsdp], [norm, []]]' "
                   "--format json",
                   config));
    INFO(custom.err);
    REQUIRE(custom.code == 0);
    json c = json::parse(custom.out);
    const json* cup = tensor_of(c, "model.layers.0.mlp.up_proj.weight");
    REQUIRE(cup);
    CHECK((*cup)["spec"] == json::array({"fsdp", "tensor"}));
    const json* cnorm = tensor_of(c, "model.norm.weight");
    REQUIRE(cnorm);
    CHECK((*cnorm)["spec"] == json::array({nullptr}));
  }
  SECTION("--rules wins over the config's rules") {
    test::CliResult given = test::run_cli(
        test::args("plan --topology v5p-128 --model llama-3-8b "
                   "--maxtext-config {} --rules fsdp --format json",
                   data("large.yml")));
    INFO(given.err);
    REQUIRE(given.code == 0);
    CHECK(given.err.find("[maxtext.rules-ignored]") != std::string::npos);
  }
}

TEST_CASE("maxtext cli: the workload keys flow into memory, flags win",
          "[cli][maxtext]") {
  auto memory = [](std::vector<std::string> extra) {
    std::vector<std::string> args = test::args(
        "memory --topology v5p-128 --model llama-3-8b --recipe adam "
        "--format json");
    args.insert(args.end(), extra.begin(), extra.end());
    test::CliResult r = test::run_cli(args);
    INFO(r.err);
    REQUIRE(r.code == 0);
    return json::parse(r.out)["memory"];
  };
  // small.yml: max_target_length 4096, per_device_batch_size 2.0, remat
  // full, weight_dtype bfloat16, on fsdp:16,tensor:4. MaxText's adamw
  // keeps its moments like the bf16 params and no master copy; its loss
  // runs under XLA, fused.
  json from_config =
      memory(test::args("--maxtext-config {}", data("small.yml")));
  json from_flags =
      memory(test::args("--mesh fsdp:16,tensor:4 --rules maxtext --seq 4096 "
                        "--per-device-batch 2 --remat full --param-dtype bf16 "
                        "--moment-dtype bf16 --master-weights none "
                        "--cross-entropy fused"));
  REQUIRE(from_config.contains("activations"));
  CHECK(from_config["activations"]["cross_entropy_source"]
        == data("small.yml"));
  CHECK(from_flags["activations"]["cross_entropy_source"] == "--cross-entropy");
  from_config["activations"].erase("cross_entropy_source");
  from_flags["activations"].erase("cross_entropy_source");
  CHECK(from_config["activations"] == from_flags["activations"]);
  CHECK(from_config["per_device"] == from_flags["per_device"]);
  CHECK(from_config["per_device"]["activations"].get<int64_t>() > 0);

  json seq_flag =
      memory(test::args("--maxtext-config {} --seq 1024", data("small.yml")));
  json seq_1024 =
      memory(test::args("--mesh fsdp:16,tensor:4 --rules maxtext --seq 1024 "
                        "--per-device-batch 2 --param-dtype bf16 "
                        "--cross-entropy fused"));
  seq_flag["activations"].erase("cross_entropy_source");
  seq_1024["activations"].erase("cross_entropy_source");
  CHECK(seq_flag["activations"] == seq_1024["activations"]);
  // A quarter of the tokens: fewer bytes of activations.
  CHECK(seq_flag["per_device"]["activations"].get<int64_t>()
        < from_config["per_device"]["activations"].get<int64_t>());
  // weight_dtype float32 against bfloat16: the same specs, and the params
  // themselves take twice the bytes.
  const json f32 = memory(test::args("--maxtext-config {} weight_dtype=float32",
                                     data("small.yml")));
  CHECK(f32["per_device"]["params"].get<int64_t>()
        == 2 * from_config["per_device"]["params"].get<int64_t>());
  // gradient_accumulation_steps=4: MaxText's global batch is
  // per_device_batch_size x devices x steps = 2 x 64 x 4 = 512 sequences,
  // run 4 microbatches of 128: --batch 512 --microbatches 4.
  json accumulated = memory(test::args(
      "--maxtext-config {} gradient_accumulation_steps=4", data("small.yml")));
  json batch_512 = memory(test::args(
      "--mesh fsdp:16,tensor:4 --rules maxtext --seq 4096 --batch 512 "
      "--microbatches 4 --param-dtype bf16 --cross-entropy fused"));
  accumulated["activations"].erase("cross_entropy_source");
  batch_512["activations"].erase("cross_entropy_source");
  CHECK(accumulated["activations"] == batch_512["activations"]);
  CHECK(accumulated["activations"]["global_batch"] == 512);
  CHECK(accumulated["activations"]["microbatches"] == 4);
  // A stage axis splits per_device_batch_size x devices (128) into
  // num_pipeline_microbatches: no more sequences a step.
  const json pipelined = memory(test::args(
      "--maxtext-config {} num_pipeline_microbatches=4", data("small.yml")));
  CHECK(pipelined["activations"]["global_batch"] == 128);
  CHECK(pipelined["activations"]["microbatches"] == 4);
}

TEST_CASE("maxtext cli: exit codes and messages", "[cli][maxtext]") {
  const std::string config = data("small.yml");
  SECTION("bad input is exit 2 with a located message") {
    test::CliResult r =
        test::run_cli(test::args("plan --topology v5p-128 --model llama-3-8b "
                                 "--maxtext-config {} ici_tensor_parallelism=3",
                                 config));
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find(config
                     + ":3:23: error: Unspecified value unable to be "
                       "determined with the given ICI parallelism values")
          != std::string::npos);
  }
  SECTION("a workload key's error points at the key's line and column") {
    // small.yml line 6 is `per_device_batch_size: 2.0`: the value starts at
    // column 24. 2.0 x 64 devices = 128 sequences; 3 microbatches x 16
    // fsdp shards = 48 does not divide it.
    test::CliResult r =
        test::run_cli(test::args("memory --topology v5p-128 --model llama-3-8b "
                                 "--maxtext-config {} --microbatches 3",
                                 config));
    CHECK(r.code == 2);
    CHECK(r.err.find(config + ":6:24: error: batch 128 ") != std::string::npos);
    CHECK(r.err.find("[workload.batch-indivisible]") != std::string::npos);
  }
  SECTION("an override's error points at the override") {
    // 0.3 x 64 = 19.2 sequences.
    test::CliResult r = test::run_cli(
        test::args("memory --topology v5p-128 --model llama-3-8b "
                   "--maxtext-config {} per_device_batch_size=0.3",
                   config));
    CHECK(r.code == 2);
    CHECK(r.err.find("--maxtext-config per_device_batch_size=0.3: error: "
                     "per-device batch 0.3 x 64 devices = 19.2 sequences")
          != std::string::npos);
  }
  SECTION("--mesh and --maxtext-config exclude each other") {
    test::CliResult r = test::run_cli(
        test::args("check --topology v5p-128 --model llama-3-8b --mesh fsdp:64 "
                   "--maxtext-config {} --specs s.json",
                   config));
    CHECK(r.code == 2);
    CHECK(r.err.find("excludes") != std::string::npos);
  }
  SECTION("--axis-names and --maxtext-config exclude each other") {
    // The config names its axes as MaxText does.
    test::CliResult r =
        test::run_cli(test::args("plan --topology v5p-128 --model llama-3-8b "
                                 "--maxtext-config {} --axis-names a,b",
                                 config));
    CHECK(r.code == 2);
    CHECK(r.err.find("--axis-names excludes --maxtext-config")
          != std::string::npos);
  }
  SECTION("the devices are needed") {
    test::CliResult r = test::run_cli(
        test::args("plan --model llama-3-8b --maxtext-config {}", config));
    CHECK(r.code == 2);
    CHECK(r.err.find("--maxtext-config needs the devices")
          != std::string::npos);
  }
  SECTION("a missing file names its path") {
    test::CliResult r = test::run_cli(test::args(
        "plan --devices 8 --model llama-3-8b --maxtext-config no-such.yml"));
    CHECK(r.code == 2);
    CHECK(r.err.find("no-such.yml: error: cannot read file")
          != std::string::npos);
  }
  SECTION("check and memory need --mesh without a config") {
    test::CliResult r = test::run_cli(
        test::args("memory --devices 8 --model llama-3-8b --rules fsdp"));
    CHECK(r.code == 2);
    CHECK(r.err.find("--mesh is required") != std::string::npos);
  }
  SECTION("a manifest alone: the workload keys are noted, not used") {
    test::CliResult r = test::run_cli(test::args(
        "plan --devices 64 --manifest {} --maxtext-config {}",
        std::string(SHARDPLAN_SOURCE_DIR) + "/configs/examples/tiny-llama.json",
        config));
    CHECK(r.code == 0);
    CHECK(r.err.find("[maxtext.workload-ignored]") != std::string::npos);
  }
}

TEST_CASE("maxtext cli: search takes the workload and names axes as MaxText",
          "[cli][maxtext]") {
  test::CliResult r =
      test::run_cli(test::args("search --topology v5p-128 --model llama-3-8b "
                               "--maxtext-config {} --top 3 --format json",
                               test::data_path("maxtext/small.yml")));
  INFO(r.err);
  REQUIRE(r.code == 0);
  json doc = json::parse(r.out);
  CHECK(doc["workload"]["seq"] == 4096);
  bool tensor_named = false;
  for (const json& c : doc["candidates"]) {
    const std::string mesh = c["mesh"];
    CHECK(mesh.find("tp") == std::string::npos);
    tensor_named = tensor_named || mesh.find("tensor:") != std::string::npos;
  }
  CHECK(tensor_named);
}

TEST_CASE(
    "maxtext cli: the residual stream lies as the rules' activation_embed",
    "[cli][maxtext][activations]") {
  // MaxText's 32B model (emb 8192, 64 heads of 128, 64 kv heads, MLP 28672,
  // 32 layers) on v5p-128 as fsdp:16,tensor:4, per_device_batch_size 6,
  // seq 2048, remat minimal. base.yml maps activation_embed to tensor, so
  // every h-wide tensor a layer keeps is split 4 ways with the heads and
  // the MLP: with s 2048, b 6 x 64 / 16 = 24, t 4, per layer (the input,
  // q, k, v, out_proj's output, the MLP's two up projections)
  // 2*s*b*(h/t + a*d/t + 2*k*d/t + h/t + 2*I/t)
  // = 2 * 2048 * 24 * (2048 + 2048 + 4096 + 2048 + 14336)
  // = 2,415,919,104 bytes; 32 layers 77,309,411,328 (72.00 GiB). The
  // issue's figure, 2,617,245,696, also counts mlpwo's output (h/t), which
  // minimal names but JAX does not keep: nothing in the layer's backward
  // reads it, and jax.checkpoint's policy picks among residuals only.
  auto activations = [](const std::vector<std::string>& extra) {
    std::vector<std::string> args = test::args(
        "memory --topology v5p-128 --from-hf-config {} --recipe adam "
        "--format json",
        data("maxtext-32b.json"));
    args.insert(args.end(), extra.begin(), extra.end());
    test::CliResult r = test::run_cli(args);
    INFO(r.err);
    REQUIRE(!r.out.empty());
    return json::parse(r.out)["memory"]["activations"];
  };
  const std::string config = data("32b-v5p-128.yml");
  const json a = activations(test::args("--maxtext-config {}", config));
  CHECK(a["activation_layout"] == "embed");
  CHECK(a["activation_layout_source"]
        == "configs/rules/maxtext.json:/logical_axis_rules/45");
  CHECK(a["per_layer_bytes"] == 2'415'919'104);
  CHECK(a["layers_bytes"] == 77'309'411'328);
  // The same mesh with flags and --rules maxtext: the same layout.
  const json flags = activations(
      test::args("--mesh fsdp:16,tensor:4 --rules maxtext --seq 2048 "
                 "--per-device-batch 6 --remat minimal"));
  CHECK(flags["per_layer_bytes"] == 2'415'919'104);
  // A flag overrides the rules: replicated keeps the two h-wide tensors
  // whole, 2 x 2*s*b*h*(1 - 1/t) = 2 x 603,979,776 more per layer.
  const json replicated = activations(
      test::args("--maxtext-config {} --activation-layout replicated", config));
  CHECK(replicated["activation_layout"] == "replicated");
  CHECK(replicated["activation_layout_source"] == "--activation-layout");
  CHECK(replicated["per_layer_bytes"] == 2'415'919'104 + 2 * 603'979'776);
  // fsdp-tp names no activation_embed: replicated, by default.
  const json preset = activations(
      test::args("--mesh fsdp:16,tensor:4 --rules fsdp-tp --seq 2048 "
                 "--per-device-batch 6 --remat minimal"));
  CHECK(preset["activation_layout"] == "replicated");
  CHECK(preset["activation_layout_source"] == "default");
  // Megatron's sequence parallelism: the same bytes, split by token.
  const json sequence = activations(
      test::args("--mesh fsdp:16,tensor:4 --rules fsdp-tp --seq 2048 "
                 "--per-device-batch 6 --remat minimal --sequence-parallel"));
  CHECK(sequence["activation_layout"] == "sequence");
  CHECK(sequence["per_layer_bytes"] == 2'415'919'104);
  // PyTorch's selective checkpointing caches every saved op's output:
  // mlpwo's too, 2*s*b*h/t = 201,326,592 more.
  const json torch =
      activations(test::args("--maxtext-config {} --runtime pytorch", config));
  CHECK(torch["per_layer_bytes"] == 2'617'245'696);
}

TEST_CASE("maxtext cli: f32 weights move in the compute dtype, bf16",
          "[cli][maxtext][memory][step]") {
  // MaxText's weight_dtype float32 with dtype bfloat16: each weight is cast
  // to bf16 before its layer uses it, so FSDP all-gathers bf16 (MaxText's
  // sharding guide: "All gather params EM in (bf16): 2EM bytes") and
  // reduce-scatters bf16 gradients. A Llama-3-70B layer has 855,638,016
  // parameters: 1,711,276,032 bytes a gather, not 3,422,552,064. Under
  // pure FSDP the peak is the loss's, whose buffer holds the head
  // (128,256 x 8,192 = 1,050,673,152) with its gradient, 4,202,692,608
  // bytes, and the last layer's weights, prefetched: 1,711,276,032; in all
  // 5,913,968,640 (the final norm is not split: not gathered).
  auto run = [](const std::string& dtype) {
    test::CliResult r = test::run_cli(test::args(
        "memory --topology v5p-1024 --model llama-3-70b --mesh fsdp:512 "
        "--rules maxtext --recipe adam --seq 4096 --per-device-batch 2 "
        "--format json --param-dtype {}",
        dtype));
    INFO(r.err);
    REQUIRE(r.code == 0);
    return json::parse(r.out);
  };
  const json f32 = run("f32");
  CHECK(f32["memory"]["per_device"]["gather_buffer"] == 5'913'968'640);
  CHECK(f32["memory"]["peak_phase"] == "loss");
  CHECK(f32["memory"]["gather_dtype"] == "bf16");
  const json& gather = f32["step"]["collectives"][0];
  CHECK(gather["what"] == "fsdp all-gather (forward)");
  CHECK(gather["bytes_per_device"] == 1'711'276'032);
  CHECK(f32["step"]["collectives"][2]["bytes_per_device"] == 1'711'276'032);
  // bf16 weights move as held: the same bytes, no cast named.
  const json bf16 = run("bf16");
  CHECK(bf16["memory"]["per_device"]["gather_buffer"] == 5'913'968'640);
  CHECK(bf16["memory"]["gather_dtype"].is_null());
}

TEST_CASE("maxtext cli: XLA gives up the prefetch before it runs out",
          "[cli][maxtext][memory][step]") {
  // Llama 3.1 405B on v5p-1024 as MaxText's llama3_1_405b_8192_v5p_1024
  // runs it (bench/measured/v5p-405b.yml: pure FSDP over 512 chips, pdb
  // 2, seq 8192, f32 weights, custom remat with context and mlpwo
  // offloaded): it ran (tpu-recipes, 131.474 s a step). Worked by hand:
  // state 16 bytes a parameter, 796,819,456 parameters a device (the
  // 126 x 2 + 1 norms of 16,384 whole, the rest / 512): 12,749,111,296;
  // saved inputs 126 x 2*8192*2*16384 = 67,645,734,912; token ids 65,536;
  // a layer's recompute 16,384 tokens x 487,936 bytes (2 x (5h + a*d + 2kd
  // + 3I) + 4a) = 7,994,343,424; a layer gathered in bf16 with its
  // gradients, 2 x 2 x 3,187,671,040 (its norms are not split) =
  // 12,750,684,160. With the next layer's weights prefetched (another
  // 6,375,342,080) the backward needs 107,515,281,408 bytes of the chip's
  // 102,800,042,230; without, 101,139,939,328: XLA schedules under its
  // memory limit, so it fits and the backward's all-gathers are exposed.
  const test::CliResult r = test::run_cli(test::args(
      "memory --topology v5p-1024 --model llama-3.1-405b --recipe adam "
      "--format json --maxtext-config {}/bench/measured/v5p-405b.yml",
      SHARDPLAN_SOURCE_DIR));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const json doc = test::parse_json_from(r.out, "memory");
  const json& memory = doc["memory"];
  CHECK(memory["fits"] == true);
  CHECK(memory["peak_phase"] == "layer_backward");
  CHECK(memory["prefetch_dropped"] == 6'375'342'080);
  CHECK(memory["per_device"]["gather_buffer"] == 12'750'684'160);
  CHECK(memory["per_device"]["activations"] == 75'640'143'872);
  CHECK(memory["max_device_total"] == 101'139'939'328);
  // num_vocab_tiling 4: the loss's logits a quarter at a time, 16,384 / 4
  // tokens x 128,256 x 2 bytes = 1,050,673,152, beside the final norm's
  // input and the head's input (536,870,912 each).
  CHECK(memory["activations"]["vocab_tiles"] == 4);
  CHECK(memory["activations"]["logits_bytes"] == 2'124'414'976);
  const json& gathers = doc["step"]["collectives"];
  CHECK(gathers[0]["what"] == "fsdp all-gather (forward)");
  CHECK(gathers[0]["exposed_seconds"] < gathers[0]["seconds"]);
  CHECK(gathers[1]["what"] == "fsdp all-gather (backward)");
  CHECK(gathers[1]["exposed_seconds"] == gathers[1]["seconds"]);
  // Host memory: context offloaded, 126 x 536,870,912 = 67,645,734,912 a
  // chip (mlpwo's offload moves nothing: JAX keeps no tensor nothing
  // reads), 4 chips a host: 270,582,939,648 of ct5p-hightpu-4t's 448 GB.
  CHECK(memory["activations"]["host_offload_bytes"] == 67'645'734'912);
  CHECK(memory["devices_per_host"] == 4);
  CHECK(memory["host_bytes_per_host"] == 270'582'939'648);
  CHECK(memory["host_memory_bytes"] == 448'000'000'000);
  CHECK(memory["host_fits"] == true);
  // PyTorch's FSDP2 prefetches whatever the memory: it does not fit; its
  // selective checkpointing keeps what a policy names, mlpwo's output
  // too: twice the host memory, 541,165,879,296 bytes a host, over its
  // RAM (a warning).
  const test::CliResult torch = test::run_cli(test::args(
      "memory --topology v5p-1024 --model llama-3.1-405b --recipe adam "
      "--format json --runtime pytorch --maxtext-config "
      "{}/bench/measured/v5p-405b.yml",
      SHARDPLAN_SOURCE_DIR));
  CHECK(torch.code == 1);
  const json pytorch = test::parse_json_from(torch.out, "memory")["memory"];
  CHECK(pytorch["prefetch_dropped"] == 0);
  CHECK(pytorch["fits"] == false);
  CHECK(pytorch["host_bytes_per_host"] == 541'165'879'296);
  CHECK(pytorch["host_fits"] == false);
  CHECK(torch.err.find("[memory.host-over-capacity]") != std::string::npos);
}

TEST_CASE("maxtext cli: the custom remat policy places each name",
          "[cli][maxtext][activations]") {
  // custom-remat.yml offloads decoder_layer_input and q/k/v (Llama 3.1 70B
  // on v6e-32, pdb 2, seq 8192, fsdp 32: b 2, t 1). Per layer in host
  // memory: 2*s*b*h (input) + 2*s*b*a*d (q) + 2 x 2*s*b*k*d (k, v)
  // = 268,435,456 + 268,435,456 + 2 x 33,554,432 = 603,979,776; 80 layers
  // 48,318,382,080. Nothing of a layer stays in HBM.
  auto memory = [](const std::vector<std::string>& extra) {
    std::vector<std::string> args = test::args(
        "memory --topology v6e-32 --model llama-3-70b --format json");
    args.insert(args.end(), extra.begin(), extra.end());
    test::CliResult r = test::run_cli(args);
    INFO(r.err);
    // Exit 1 when it does not fit (the state alone nearly fills v6e's
    // 32 GB here): the estimate is written all the same.
    REQUIRE((r.code == 0 || r.code == 1));
    return json::parse(r.out);
  };
  const json config =
      memory(test::args("--maxtext-config {}", data("custom-remat.yml")));
  const json& a = config["memory"]["activations"];
  CHECK(a["remat"] == "custom");
  CHECK(a["custom_remat"]["decoder_layer_input"] == "offload");
  CHECK(a["custom_remat"]["out_proj"] == "remat");
  CHECK(a["per_layer_bytes"] == 0);
  CHECK(a["host_offload_bytes"] == 48'318'382'080);
  // The flag form says the same.
  const std::string flags =
      "--mesh fsdp:32 --rules maxtext --seq 8192 --per-device-batch 2";
  const json flag =
      memory(test::args(
          flags
          + " --remat custom:decoder_layer_input=offload,query_proj=offload,"
            "key_proj=offload,value_proj=offload"));
  CHECK(flag["memory"]["activations"]["host_offload_bytes"] == 48'318'382'080);
  // MaxText's qkv_proj_offloaded is save_and_offload_only_these_names of
  // query_proj, key_proj and value_proj with the layer input on the device
  // (layers/decoders.py): custom with those placements keeps, offloads
  // and recomputes exactly what it does.
  const json named = memory(test::args(flags + " --remat qkv_proj_offloaded"));
  const json same =
      memory(test::args(flags
                        + " --remat custom:query_proj=offload,key_proj=offload,"
                          "value_proj=offload"));
  for (const char* key :
       {"per_layer_bytes", "host_offload_bytes", "recompute_bytes"}) {
    CHECK(named["memory"]["activations"][key]
          == same["memory"]["activations"][key]);
  }
  CHECK(named["step"]["model_flops"] == same["step"]["model_flops"]);
  CHECK(named["step"]["flops_per_device"] == same["step"]["flops_per_device"]);
}

TEST_CASE("maxtext cli: a custom remat name or placement that is wrong",
          "[cli][maxtext][errors]") {
  const std::string base =
      "memory --topology v6e-32 --model llama-3-70b --mesh fsdp:32 "
      "--rules maxtext --seq 8192 --batch 64 --remat ";
  test::CliResult name =
      test::run_cli(test::args(base + "custom:query_prj=offload"));
  CHECK(name.code == 2);
  CHECK(name.err.find("--remat: error: custom remat: \"query_prj\" is not a "
                      "checkpoint name")
        != std::string::npos);
  CHECK(name.err.find("did you mean \"query_proj\"?") != std::string::npos);
  test::CliResult place =
      test::run_cli(test::args(base + "custom:query_proj=host"));
  CHECK(place.code == 2);
  CHECK(place.err.find("custom remat: query_proj=host places it nowhere; "
                       "expected remat, device or offload")
        != std::string::npos);
  // A MaxText key's bad value points at the value.
  test::CliResult key = test::run_cli(test::args(
      "memory --topology v6e-32 --model llama-3-70b --maxtext-config {} "
      "query_proj=host",
      data("custom-remat.yml")));
  CHECK(key.code == 2);
  CHECK(key.err.find("--maxtext-config:1:12: error: query_proj must be "
                     "'remat', 'device' or 'offload', got \"host\"")
        != std::string::npos);
}

TEST_CASE("maxtext cli: optax's adamw keeps its moments like the params",
          "[cli][maxtext][memory]") {
  // Llama-3-8B on v5p-128 as fsdp:16,tensor:4 (small.yml, weight_dtype
  // bfloat16): 8,030,261,248 parameters / 64 = 125,535,232 a device (the
  // 251,070,464 bytes of bf16 params). MaxText's adamw keeps mu
  // (mu_dtype, default the weights') and nu like the params and no master
  // copy: 2 + 2 bytes each, 502,140,928; the adam recipe's own count is
  // 4 + 4 + an f32 master 4 = 12 bytes, 1,506,422,784.
  auto memory = [](const std::string& extra) {
    test::CliResult r = test::run_cli(
        test::args("memory --topology v5p-128 --model llama-3-8b --recipe "
                   "adam --format json --maxtext-config {} "
                       + extra,
                   data("small.yml")));
    INFO(r.err);
    REQUIRE(r.code == 0);
    return json::parse(r.out)["memory"];
  };
  const json maxtext = memory("");
  CHECK(maxtext["per_device"]["params"] == 251'070'464);
  CHECK(maxtext["per_device"]["optimizer"] == 502'140'928);
  CHECK(maxtext["optimizer"]["name"] == "adamw");
  CHECK(maxtext["optimizer"]["first_moment_dtype"].is_null());
  CHECK(maxtext["optimizer"]["master"] == false);
  // Flags win. With a config --moment-dtype is MaxText's mu_dtype, nu
  // stays like the params: mu f32 4 + nu bf16 2 + master 4 = 10 bytes.
  const json flags = memory("--moment-dtype f32 --master-weights f32");
  CHECK(flags["per_device"]["optimizer"] == 1'255'352'320);
  // weight_dtype float32: f32 moments, 8 bytes, and no copy to keep.
  const json f32 = memory("weight_dtype=float32");
  CHECK(f32["per_device"]["params"] == 502'140'928);
  CHECK(f32["per_device"]["optimizer"] == 1'004'281'856);
  // MaxText's sgd keeps no state.
  const json sgd = memory("--optimizer sgd");
  CHECK(sgd["per_device"]["optimizer"] == 0);
}

TEST_CASE("maxtext cli: no MTP module trains unless mtp_num_layers says",
          "[cli][maxtext][activations][step]") {
  // DeepSeek-V3's checkpoint has one MTP module (layer 61); MaxText builds
  // mtp_num_layers of them, 0 by default (base.yml), and so do the memory,
  // the activations and the FLOPs here.
  auto run = [](const std::string& extra) {
    test::CliResult r = test::run_cli(
        test::args("memory --topology v5p-1024 --model deepseek-v3 --mesh "
                   "fsdp:64,expert:8 --rules maxtext --seq 4096 "
                   "--per-device-batch 1 --format json "
                   + extra));
    INFO(r.err);
    REQUIRE((r.code == 0 || r.code == 1));
    return test::parse_json_from(r.out, "memory");
  };
  const json none = run("");
  CHECK(none["memory"]["activations"]["mtp_bytes"] == 0);
  CHECK(none["memory"]["untrained_tensors"] == 1'564);
  const json one = run("--mtp-layers 1");
  CHECK(one["memory"]["activations"]["mtp_bytes"].get<int64_t>() > 0);
  CHECK(one["memory"]["untrained_tensors"] == 0);
  CHECK(one["step"]["model_flops"].get<double>()
        > none["step"]["model_flops"].get<double>());
  // The config's key says the same as the flag.
  auto config = [](const std::string& extra) {
    test::CliResult r = test::run_cli(
        test::args("memory --topology v5p-128 --model deepseek-v3 "
                   "--format json --maxtext-config {} "
                       + extra,
                   data("small.yml")));
    INFO(r.err);
    REQUIRE((r.code == 0 || r.code == 1));
    return test::parse_json_from(r.out, "memory")["memory"];
  };
  // (Each run plans DeepSeek-V3's 91,991 tensors: a few, not many.)
  CHECK(config("mtp_num_layers=1")["untrained_tensors"] == 0);
  // A depth that is no depth is refused at its flag.
  const test::CliResult bad = test::run_cli(
      test::args("memory --topology v5p-128 --model deepseek-v3 --mesh fsdp:64 "
                 "--rules fsdp --mtp-layers -1"));
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--mtp-layers: Value -1 not in range 0 to 64")
        != std::string::npos);
}

TEST_CASE("maxtext cli: the measured runs fit, as they ran",
          "[cli][maxtext][memory]") {
  // The MaxText rows of the calibration set (bench/measured/, the
  // tpu-recipes logs in docs/memory.md, "Measured runs"): every one ran, so
  // each must fit.
  // Each as its users run it: the config alone (model_name, the keys) on
  // its topology, no --model, no --recipe.
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"v6e-a", "v6e-8"},
      {"v6e-b", "v6e-32"},
      {"v6e-c", "v6e-128"},
      {"v6e-d", "v6e-32"},
      {"v6e-e", "v6e-128"},
      {"7x-a", "tpu7x-512"},
      {"7x-b", "tpu7x-512"},
  };
  for (const auto& [id, topology] : runs) {
    INFO(id);
    const test::CliResult r =
        test::run_cli(test::args("memory --format json --topology {} "
                                 "--maxtext-config {}/bench/measured/{}.yml",
                                 topology,
                                 SHARDPLAN_SOURCE_DIR,
                                 id));
    INFO(r.err);
    REQUIRE(r.code == 0);
    const json memory = test::parse_json_from(r.out, "memory")["memory"];
    CHECK(memory["fits"] == true);
    CHECK(memory["recipe"] == "adam");  // MaxText trains: optax adamw
    // XLA on a TPU: nothing kept free beyond the runtime's own limit.
    CHECK(memory["runtime"] == "xla");
    CHECK(memory["headroom"] == 0.0);
    CHECK(memory["capacity_bytes"] == memory["hbm_bytes"]);
    CHECK(memory["activations"]["cross_entropy"] == "fused");
  }
  // v5p-a, Llama 2 70B on v5p-1024, and the 405B check row: they ran, so
  // they fit.
  for (const char* id : {"v5p-a", "v5p-405b"}) {
    INFO(id);
    const test::CliResult r =
        test::run_cli(test::args("memory --format json --topology v5p-1024 "
                                 "--maxtext-config {}/bench/measured/{}.yml",
                                 SHARDPLAN_SOURCE_DIR,
                                 id));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(test::parse_json_from(r.out, "memory")["memory"]["fits"] == true);
  }
  // tt-a, torchtitan's Llama 3.1 8B on 8 H100s (96 GB): its logged peak,
  // 82.4 GiB reserved, within 5% (the allocator's reserve is fitted to it:
  // bench/fit_allocator.py).
  const test::CliResult tt = test::run_cli(test::args(
      "memory --recipe adam --format json --topology h100x8 --hbm 96GiB "
      "--model llama-3-8b --mesh fsdp:8 --rules fsdp --param-dtype f32 "
      "--seq 8192 --batch 16 --remat selective_op --cross-entropy eager"));
  REQUIRE(tt.code == 0);
  const json tt_memory = test::parse_json_from(tt.out, "memory")["memory"];
  CHECK(tt_memory["fits"] == true);
  CHECK(tt_memory["reserved_bytes"].get<double>()
        == Approx(82.4 * 1073741824.0).epsilon(0.05));
}

TEST_CASE("maxtext cli: the runtime sets the reserve and the headroom",
          "[cli][memory]") {
  auto memory = [](const std::string& extra) {
    const test::CliResult r = test::run_cli(
        test::args("memory --model llama-3-8b --mesh fsdp:8 --rules fsdp "
                   "--recipe adam --format json "
                   + extra));
    INFO(r.err);
    REQUIRE(r.code == 0);
    return json::parse(r.out)["memory"];
  };
  // On a GPU, PyTorch: its caching allocator reserves 14.3% more than the
  // peak allocated (fitted, bench/fit_allocator.py), and 10% of HBM stays
  // free for what it holds outside the allocator. h100x8: 81,559 MiB =
  // 85,520,809,984 bytes; usable floor(x 0.9) = 76,968,728,985.
  const json gpu = memory("--topology h100x8");
  CHECK(gpu["runtime"] == "pytorch");
  CHECK(gpu["reserve"] == 0.143);
  const auto allocated = gpu["max_device_total"].get<int64_t>();
  CHECK(gpu["reserved_bytes"].get<int64_t>()
        == static_cast<int64_t>(
            std::ceil(static_cast<double>(allocated) * 1.143)));
  CHECK(gpu["capacity_bytes"] == 76'968'728'985);
  CHECK(gpu["headroom_left_bytes"].get<int64_t>()
        == 76'968'728'985 - gpu["reserved_bytes"].get<int64_t>());
  // JAX on a GPU preallocates 75% of it: 64,140,607,488 usable.
  const json jax = memory("--topology h100x8 --runtime xla");
  CHECK(jax["reserve"] == 0.0);
  CHECK(jax["reserved_bytes"] == jax["max_device_total"]);
  CHECK(jax["capacity_bytes"] == 64'140'607'488);
  // --headroom says otherwise.
  const json given = memory("--topology v5p-16 --headroom 0.2");
  CHECK(given["headroom_source"] == "--headroom");
  CHECK(given["runtime"] == "xla");
}

TEST_CASE("maxtext cli: opt_type and mu_dtype set the optimizer state",
          "[cli][maxtext][memory]") {
  auto memory = [](const std::string& keys) {
    const test::CliResult r = test::run_cli(
        test::args("memory --topology v5p-128 --model llama-3-8b --recipe adam "
                   "--format json --maxtext-config {} ici_fsdp_parallelism=-1 "
                   "weight_dtype=bfloat16 "
                       + keys,
                   data("small.yml")));
    INFO(r.err);
    REQUIRE(r.code == 0);
    return json::parse(r.out)["memory"];
  };
  // bf16 weights: optax's adamw keeps nu like the params (2 bytes) and mu
  // in mu_dtype, float32 (4): 6 bytes a parameter, three times the params.
  const json f32_mu = memory("mu_dtype=float32");
  const auto params = f32_mu["per_device"]["params"].get<int64_t>();
  CHECK(f32_mu["per_device"]["optimizer"].get<int64_t>() == 3 * params);
  // mu_dtype "" (base.yml): the weights' dtype, 4 bytes, twice the params.
  CHECK(memory("")["per_device"]["optimizer"].get<int64_t>() == 2 * params);
  // opt_type sgd: optax.sgd without momentum keeps nothing.
  const json sgd = memory("opt_type=sgd");
  CHECK(sgd["per_device"]["optimizer"] == 0);
  CHECK(sgd["optimizer"]["name"] == "sgd");
  // An optimizer MaxText does not build is refused at its key.
  const test::CliResult bad = test::run_cli(
      test::args("memory --topology v5p-128 --model llama-3-8b --recipe adam "
                 "--maxtext-config {} opt_type=adamx",
                 data("small.yml")));
  CHECK(bad.code == 2);
  CHECK(bad.err.find("opt_type \"adamx\" is not an optimizer MaxText builds")
        != std::string::npos);
}

TEST_CASE("maxtext cli: model states kept in host memory until the step",
          "[cli][maxtext][memory]") {
  // Llama-3-8B on v5p-128 as fsdp:64 with bf16 weights and moments, no
  // workload: the backward holds the params, the grads and the gather
  // buffer (2,101,346,304 bytes: the head's backward with the last layer
  // prefetched), which exceeds the optimizer step's fp32 update
  // (32,833,536) plus the optimizer state (502,939,648); so with the state
  // in host memory the peak is the backward's, without it.
  auto memory = [](const std::string& extra) {
    const test::CliResult r = test::run_cli(
        test::args("memory --topology v5p-128 --model llama-3-8b --mesh "
                   "fsdp:64 --rules fsdp --recipe adam --param-dtype bf16 "
                   "--moment-dtype bf16 --master-weights none --format json "
                   + extra));
    INFO(r.err);
    REQUIRE(r.code == 0);
    return json::parse(r.out)["memory"];
  };
  const json resident = memory("");
  const json offloaded = memory("--host-offload optimizer");
  const auto optimizer = resident["per_device"]["optimizer"].get<int64_t>();
  CHECK(optimizer == 502'939'648);
  CHECK(offloaded["hosted_optimizer"] == optimizer);
  CHECK(offloaded["hosted_params"] == 0);
  CHECK(offloaded["max_device_total"].get<int64_t>()
        == resident["max_device_total"].get<int64_t>() - optimizer);
  // The params too (251,469,824 bytes).
  const json both = memory("--host-offload optimizer,params");
  CHECK(both["max_device_total"].get<int64_t>()
        == resident["max_device_total"].get<int64_t>() - optimizer
               - 251'469'824);
  // MaxText's keys say the same, located at the key.
  const test::CliResult r = test::run_cli(
      test::args("memory --topology v5p-128 --model llama-3-8b --recipe adam "
                 "--format json --maxtext-config {} ici_fsdp_parallelism=-1 "
                 "ici_tensor_parallelism=1 weight_dtype=bfloat16 "
                 "optimizer_memory_host_offload=true",
                 data("small.yml")));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const json config = json::parse(r.out)["memory"];
  CHECK(config["hosted_optimizer"] == config["per_device"]["optimizer"]);
  CHECK(config["hosted_optimizer"].get<int64_t>() > 0);
  const test::CliResult text = test::run_cli(test::args(
      "memory --topology v5p-128 --model llama-3-8b --mesh fsdp:64 --rules "
      "fsdp --recipe adam --host-offload optimizer"));
  CHECK(text.out.find("of model state (optimizer state), in HBM for the "
                      "optimizer step only")
        != std::string::npos);
}

TEST_CASE("maxtext cli: sparse_matmul's ragged buffer and capacity_factor",
          "[cli][maxtext][activations]") {
  // Mixtral-8x7B (h 4096, 8 experts, top 2) on v5p-128 as fsdp 16, expert
  // 4, pdb 1, seq 4096: 4,096 tokens a device. MaxText's sparse path (the
  // default) receives them across the expert axis into a buffer sized for
  // the worst case, tokens x min(E, EP x K) = 4096 x 8 = 32,768 rows of
  // h; an MoE layer's backward holds two: 2 x 32768 x 4096 x 2 =
  // 536,870,912 bytes. ragged_buffer_factor 1.5: 4096 x 2 x 1.5 = 12,288
  // rows, 201,326,592. capacity_factor is the dense path's alone.
  auto activations = [](const std::string& keys) {
    const test::CliResult r = test::run_cli(test::args(
        "memory --topology v5p-128 --model mixtral-8x7b-v0.1 --recipe adam "
        "--format json --maxtext-config {} ici_tensor_parallelism=1 "
        "ici_fsdp_parallelism=16 ici_expert_parallelism=4 "
        "per_device_batch_size=1 "
            + keys,
        data("small.yml")));
    INFO(r.err);
    REQUIRE(r.code == 0);
    return test::parse_json_from(r.out, "memory")["memory"]["activations"];
  };
  const json worst = activations("capacity_factor=1.25");
  CHECK(worst["expert_exchange_bytes"] == 536'870'912);
  CHECK(worst["expert_load"] == 1.0);
  CHECK(activations("ragged_buffer_factor=1.5")["expert_exchange_bytes"]
        == 201'326'592);
  // sparse_matmul false: the dense path pads to capacity_factor, with no
  // ragged buffer.
  const json dense = activations("sparse_matmul=false capacity_factor=1.25");
  CHECK(dense["expert_exchange_bytes"] == 0);
  CHECK(dense["expert_load"] == 1.25);
  CHECK(dense["expert_load_source"].get<std::string>().find("capacity_factor")
        != std::string::npos);
}

TEST_CASE("maxtext cli: context_parallel_strategy sets the exchange",
          "[cli][maxtext][activations]") {
  // small.yml with tensor 1 and context 4 on v5p-32 (16 chips): fsdp 4,
  // context 4; pdb 2 x 16 / 4 = 8 sequences of 4096 / 4 = 1024 tokens,
  // 8,192 tokens a device. Llama-3-8B's K and V: 8,192 x 2048 x 2 =
  // 33,554,432 bytes a layer; ring holds 4 x that in a layer's backward.
  auto memory = [](const std::string& keys) {
    return test::run_cli(test::args(
        "memory --topology v5p-32 --model llama-3-8b --recipe adam --format "
        "json --maxtext-config {} ici_tensor_parallelism=1 "
        "ici_context_parallelism=4 "
            + keys,
        data("small.yml")));
  };
  const test::CliResult ring = memory("context_parallel_strategy=ring");
  INFO(ring.err);
  REQUIRE(ring.code == 0);
  const json a =
      test::parse_json_from(ring.out, "memory")["memory"]["activations"];
  CHECK(a["context_strategy"] == "ring");
  CHECK(a["context_strategy_source"].get<std::string>().find(
            "context_parallel_strategy")
        != std::string::npos);
  CHECK(a["context_kv_bytes"] == 33'554'432);
  CHECK(a["context_exchange_bytes"] == 134'217'728);
  // all_gather is MaxText's spelling of all-gather.
  const test::CliResult gather = memory("context_parallel_strategy=all_gather");
  REQUIRE(gather.code == 0);
  CHECK(test::parse_json_from(
            gather.out, "memory")["memory"]["activations"]["context_strategy"]
        == "all-gather");
  // usp (ulysses within ring) is not modelled: refused at the key.
  const test::CliResult usp = memory("context_parallel_strategy=usp");
  CHECK(usp.code == 2);
  CHECK(usp.err.find("context_parallel_strategy \"usp\" is not one shardplan "
                     "models; expected all_gather, ring or ulysses")
        != std::string::npos);
}

TEST_CASE("maxtext cli: offloaded tensors cross the host link in the step",
          "[cli][maxtext][step]") {
  // v6e-a (Llama 3.1 8B on v6e-8, pdb 3, seq 8192, custom remat offloading
  // decoder_layer_input, out_proj, query_proj, key_proj, value_proj): a
  // device's 24,576 tokens x (4096 + 4096 + 4096 + 1024 + 1024) x 2 bytes
  // = 704,643,072 a layer, 22,548,578,304 for 32 layers: out in the
  // forward and back in the backward over v6e's 3.2e10 B/s host link,
  // 0.7046 s each way, behind the compute. With the optimizer state in
  // host memory it also comes in and goes out around the optimizer step,
  // exposed.
  auto step = [](const std::string& keys) {
    const test::CliResult r = test::run_cli(test::args(
        "memory --topology v6e-8 --model llama-3-8b --recipe adam --format "
        "json --maxtext-config {}/bench/measured/v6e-a.yml "
            + keys,
        SHARDPLAN_SOURCE_DIR));
    INFO(r.err);
    REQUIRE(r.code == 0);
    return test::parse_json_from(r.out, "memory")["step"];
  };
  auto find = [](const json& s, const std::string& what) {
    for (const json& c : s["collectives"]) {
      if (c["what"] == what) {
        return c;
      }
    }
    return json();
  };
  const json s = step("");
  const json out = find(s, "host offload (forward)");
  REQUIRE(out.is_object());
  CHECK(out["op"] == "host_copy");
  CHECK(out["link"] == "host");
  CHECK(out["mesh_axes"].empty());
  CHECK(out["bytes_per_device"] == 22'548'578'304);
  CHECK(out["count"] == 1);
  CHECK(out["seconds"].get<double>() == Approx(22'548'578'304 / 3.2e10));
  CHECK(out["overlapped"] == true);
  CHECK(find(s, "host reload (backward)")["bytes_per_device"]
        == 22'548'578'304);
  CHECK(s["assumptions"]["host_bytes_per_s"]["value"] == "3.2e+10");
  CHECK(find(s, "host states (optimizer step)").is_null());
  // The optimizer state in host memory: bf16 weights, optax's moments
  // like them, 4 bytes a parameter over 8 chips, in and out: exposed.
  const json hosted = step("optimizer_memory_host_offload=true");
  const json states = find(hosted, "host states (optimizer step)");
  REQUIRE(states.is_object());
  CHECK(states["count"] == 2);
  CHECK(states["overlapped"] == false);
  CHECK(states["exposed_seconds"].get<double>()
        == Approx(states["seconds"].get<double>()));
  CHECK(states["seconds"].get<double>()
        == Approx(2 * states["bytes_per_device"].get<double>() / 3.2e10));
}
