// The model of a MaxText config through cli::run() (src/io/maxtext_model.cpp,
// src/cli/maxtext.cpp; docs/maxtext.md, "The model"): model_name's
// models/<name>.yml as MaxText's pyconfig finds and merges it,
// global_parameter_scale as types.py's get_individual_scales scales the
// dims, a --model that disagrees, overrides of the model's keys, and the
// training state a config implies. The configs are written here with
// current MaxText's keys (AI-Hypercomputer/maxtext at e591f30c).

#include "support/test_support.hpp"

#include <shardplan/io.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace shardplan;
using nlohmann::json;

namespace {

void write(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A small Llama-style model: 4 layers of width 1024, 8 query heads and 4
// key/value heads of 128, an MLP of 4096, a 32000-token vocab, untied.
// Parameters, by hand: per layer q and o 1024 x 1024, k and v 1024 x 512
// (3,145,728), the MLP 3 x 1024 x 4096 (12,582,912) and two norms (2,048):
// 15,730,688; x 4 = 62,922,752; the embedding and the head 2 x 32000 x 1024
// (65,536,000) and the final norm (1,024): 128,459,776.
constexpr const char* k_tiny = R"(base_emb_dim: 1024
base_num_query_heads: 8
base_num_kv_heads: 4
base_mlp_dim: 4096
base_num_decoder_layers: 4
head_dim: 128
vocab_size: 32000
mlp_activations: ["silu", "linear"]
logits_via_embedding: false
decoder_block: "llama2"
logical_axis_rules: [['norm', 'fsdp']]
)";
constexpr int64_t k_tiny_params = 128'459'776;

// configs/run.yml naming model_name `name`, configs/models/tiny.yml beside.
std::filesystem::path layout(const std::string& test,
                             const std::string& run_yml) {
  const std::filesystem::path dir = test::temp_dir(test);
  write(dir / "configs" / "models" / "tiny.yml", k_tiny);
  write(dir / "configs" / "run.yml", run_yml);
  return dir / "configs" / "run.yml";
}

json plan(std::vector<std::string> args, int expect = 0) {
  args.emplace_back("--format");
  args.emplace_back("json");
  test::CliResult r = test::run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == expect);
  return json::parse(r.out);
}

const json& tensor(const json& doc, const std::string& name) {
  for (const json& t : doc.at("tensors")) {
    if (t.at("name") == name) {
      return t;
    }
  }
  FAIL("no tensor " << name);
  return doc;
}

}  // namespace

TEST_CASE("maxtext model: model_name reads models/<name>.yml beside the config",
          "[cli][maxtext][maxtext_model]") {
  const auto run = layout("model_name",
                          "model_name: tiny\nper_device_batch_size: 1\n"
                          "max_target_length: 1024\n");
  json doc = plan(test::args("plan --topology v5p-8 --maxtext-config {}", run));
  CHECK(doc["summary"]["parameters"] == k_tiny_params);
  CHECK(doc["manifest"] == "--maxtext-config model_name=tiny");
  CHECK(tensor(doc, "model.layers.0.self_attn.k_proj.weight")["shape"]
        == json::array({512, 1024}));
  // The model's logical_axis_rules merge into base.yml's by name: norm goes
  // to fsdp, not tensor; mlp keeps base.yml's rule.
  CHECK(tensor(doc, "model.norm.weight")["spec"] == json::array({"fsdp"}));

  SECTION("in the models/ folder of the config's folder's parent") {
    const std::filesystem::path dir = test::temp_dir("model_name_parent");
    write(dir / "models" / "tiny.yml", k_tiny);
    write(dir / "runs" / "run.yml", "model_name: tiny\n");
    json up = plan(test::args("plan --topology v5p-8 --maxtext-config {}",
                              (dir / "runs" / "run.yml").string()));
    CHECK(up["summary"]["parameters"] == k_tiny_params);
  }
  SECTION("an -Instruct model has its base model's file (pyconfig)") {
    json instruct =
        plan(test::args("plan --topology v5p-8 --maxtext-config {} "
                        "model_name=tiny-Instruct",
                        run));
    CHECK(instruct["summary"]["parameters"] == k_tiny_params);
  }
  SECTION("without model_name, the config's dims are the model") {
    const std::filesystem::path dir = test::temp_dir("model_dims");
    write(dir / "dims.yml",
          "base_emb_dim: 1024\nbase_num_query_heads: 8\n"
          "base_num_kv_heads: 4\nbase_mlp_dim: 4096\n"
          "base_num_decoder_layers: 4\n");
    json dims = plan(test::args("plan --topology v5p-8 --maxtext-config {}",
                                (dir / "dims.yml").string()));
    CHECK(dims["summary"]["parameters"] == k_tiny_params);
  }
}

TEST_CASE(
    "maxtext model: global_parameter_scale scales as get_individual_scales",
    "[cli][maxtext][maxtext_model]") {
  const auto run = layout("scale", "model_name: tiny\n");
  // 2 = 2^1: divmod(1, 3) = (0, 1): heads and MLP x 2, emb and layers x 1.
  json two = plan(test::args(
      "plan --topology v5p-8 --maxtext-config {} global_parameter_scale=2",
      run));
  CHECK(tensor(two, "model.layers.0.self_attn.q_proj.weight")["shape"]
        == json::array({2048, 1024}));
  CHECK(tensor(two, "model.layers.0.mlp.up_proj.weight")["shape"]
        == json::array({8192, 1024}));
  CHECK(two["summary"]["tensors"] == 39);  // 4 layers x 9 + 3
  // 8 = 2^3: (1, 0): everything x 2, the layers too.
  json eight = plan(test::args(
      "plan --topology v5p-8 --maxtext-config {} global_parameter_scale=8",
      run));
  CHECK(tensor(eight, "model.layers.0.self_attn.k_proj.weight")["shape"]
        == json::array({1024, 2048}));
  CHECK(eight["summary"]["tensors"] == 75);  // 8 layers x 9 + 3
  // 3 is no power of two: types.py's ValueError.
  test::CliResult three = test::run_cli(test::args(
      "plan --topology v5p-8 --maxtext-config {} global_parameter_scale=3",
      run));
  CHECK(three.code == 2);
  CHECK_THAT(three.err,
             Catch::Contains("Global parameter scale should be a power of "
                             "two [maxtext.bad-value]"));
}

TEST_CASE("maxtext model: a --model that is not model_name's is an error",
          "[cli][maxtext][maxtext_model]") {
  const auto run = layout("mismatch", "model_name: tiny\n");
  test::CliResult r = test::run_cli(test::args(
      "plan --topology v5p-8 --maxtext-config {} --model llama-3-8b", run));
  CHECK(r.code == 2);
  CHECK_THAT(r.err,
             Catch::Contains("--model: error: --model llama-3-8b is not "
                             "model_name \"tiny\""));
  CHECK_THAT(r.err,
             Catch::Contains("hidden size (base_emb_dim) 4096, the config's "
                             "1024"));
  CHECK_THAT(r.err, Catch::Contains("[maxtext.model-mismatch]"));

  SECTION("a --model with the same tensors is the config's") {
    const std::filesystem::path dir = test::temp_dir("same_model");
    write(dir / "run.yml", "model_name: llama3.1-8b\n");
    test::CliResult same =
        test::run_cli(test::args("plan --topology v5p-8 --maxtext-config {} "
                                 "--model llama-3-8b",
                                 (dir / "run.yml").string()));
    INFO(same.err);
    CHECK(same.code == 0);
  }
  SECTION("without model_name a --model replaces the dims, with a warning") {
    const std::filesystem::path dir = test::temp_dir("replace_dims");
    write(dir / "dims.yml", "base_emb_dim: 1024\n");
    test::CliResult dims =
        test::run_cli(test::args("plan --topology v5p-8 --maxtext-config {} "
                                 "--model llama-3-8b --format json",
                                 (dir / "dims.yml").string()));
    CHECK(dims.code == 0);
    CHECK_THAT(dims.err, Catch::Contains("[maxtext.model-replaced]"));
    CHECK(json::parse(dims.out)["summary"]["parameters"] == 8'030'261'248);
  }
}

TEST_CASE("maxtext model: an override of a model key, as pyconfig allows it",
          "[cli][maxtext][maxtext_model]") {
  const auto run = layout("override", "model_name: tiny\n");
  test::CliResult r = test::run_cli(test::args(
      "plan --topology v5p-8 --maxtext-config {} base_num_decoder_layers=8",
      run));
  CHECK(r.code == 2);
  CHECK_THAT(r.err,
             Catch::Contains("Keys ['base_num_decoder_layers'] are overridden "
                             "by both model config and CLI/kwargs with "
                             "different values"));
  // The same value is no conflict; override_model_config allows another.
  json same = plan(test::args(
      "plan --topology v5p-8 --maxtext-config {} base_num_decoder_layers=4",
      run));
  CHECK(same["summary"]["parameters"] == k_tiny_params);
  json allowed = plan(test::args(
      "plan --topology v5p-8 --maxtext-config {} base_num_decoder_layers=8 "
      "override_model_config=true",
      run));
  CHECK(allowed["summary"]["tensors"] == 75);
}

TEST_CASE("maxtext model: a name with no file, a block shardplan lacks",
          "[cli][maxtext][maxtext_model]") {
  const std::filesystem::path dir = test::temp_dir("stand_in");
  SECTION("a built-in model with the same tensors stands in") {
    write(dir / "run.yml", "model_name: llama3.1-8b\n");
    test::CliResult r = test::run_cli(
        test::args("plan --topology v5p-8 --maxtext-config {} --format json",
                   (dir / "run.yml").string()));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.err, Catch::Contains("built-in llama-3-8b"));
    // Llama 3 8B's published count.
    CHECK(json::parse(r.out)["summary"]["parameters"] == 8'030'261'248);
  }
  SECTION("no file and no stand-in: an error unless --model gives one") {
    write(dir / "run.yml", "model_name: gemma3-4b\n");
    test::CliResult r =
        test::run_cli(test::args("plan --topology v5p-8 --maxtext-config {}",
                                 (dir / "run.yml").string()));
    CHECK(r.code == 2);
    CHECK_THAT(r.err,
               Catch::Contains("model_name \"gemma3-4b\" has no "
                               "models/gemma3-4b.yml"));
    CHECK_THAT(r.err, Catch::Contains("[maxtext.model]"));
    CHECK(test::run_cli(test::args("plan --topology v5p-8 --maxtext-config {} "
                                   "--model gemma-7b",
                                   (dir / "run.yml").string()))
              .code
          == 0);
  }
  SECTION("a plain MLP (one activation) is not a block shardplan builds") {
    write(dir / "models" / "plain.yml",
          "decoder_block: llama2\nmlp_activations: [\"gelu\"]\n");
    write(dir / "run.yml", "model_name: plain\n");
    test::CliResult r =
        test::run_cli(test::args("plan --topology v5p-8 --maxtext-config {}",
                                 (dir / "run.yml").string()));
    CHECK(r.code == 2);
    CHECK_THAT(r.err,
               Catch::Contains("mlp_activations with 1 entry is a "
                               "plain MLP"));
  }
  SECTION("a decoder_block shardplan does not build") {
    write(dir / "models" / "q.yml", "decoder_block: qwen3\n");
    write(dir / "run.yml", "model_name: q\n");
    test::CliResult r =
        test::run_cli(test::args("plan --topology v5p-8 --maxtext-config {}",
                                 (dir / "run.yml").string()));
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("decoder_block \"qwen3\""));
  }
}

TEST_CASE("maxtext model: a config trains with its optimizer's state",
          "[cli][maxtext][maxtext_model]") {
  const auto run = layout(
      "recipe",
      "model_name: tiny\nweight_dtype: bfloat16\nper_device_batch_size: 1\n"
      "max_target_length: 1024\n");
  json doc =
      plan(test::args("memory --topology v5p-8 --maxtext-config {}", run));
  // optax adamw on bf16 weights: weights, grads, mu and nu in bf16, no
  // master: 8 bytes a parameter over the 4 chips' fsdp.
  const json& m = doc["memory"];
  CHECK(m["recipe"] == "adam");
  CHECK(m["optimizer"]["master"] == false);
  CHECK(m["per_device"]["params"] == k_tiny_params * 2 / 4);
  CHECK(m["per_device"]["grads"] == k_tiny_params * 2 / 4);
  CHECK(m["per_device"]["optimizer"] == k_tiny_params * 4 / 4);

  SECTION("without a config a workload says it counts no training state") {
    test::CliResult r = test::run_cli(
        test::args("memory --topology v5p-8 --mesh fsdp:4 --model llama-3-8b "
                   "--rules fsdp --seq 1024 --batch 4"));
    CHECK(r.code == 0);
    CHECK_THAT(r.err, Catch::Contains("[memory.params-only]"));
  }
}

TEST_CASE("maxtext model: keys that change memory, honoured or warned",
          "[cli][maxtext][maxtext_model]") {
  const auto run = layout(
      "keys",
      "model_name: tiny\nweight_dtype: bfloat16\nper_device_batch_size: 1\n"
      "max_target_length: 1024\nici_data_parallelism: 2\n");
  auto memory = [&](const std::string& overrides) {
    return test::run_cli(
        test::args("memory --topology v5p-8 --format json --maxtext-config {} "
                       + overrides,
                   run));
  };
  SECTION("shard_optimizer_over_data: ZeRO-1 over the data axis") {
    // adamw's mu and nu in bf16, 4 bytes a parameter, over fsdp 2 and then
    // over data 2 too: 1 byte a parameter.
    test::CliResult off = memory("");
    test::CliResult on = memory("shard_optimizer_over_data=true");
    REQUIRE(off.code == 0);
    REQUIRE(on.code == 0);
    CHECK(test::parse_json_from(off.out,
                                "memory")["memory"]["per_device"]["optimizer"]
          == k_tiny_params * 4 / 2);
    CHECK(test::parse_json_from(on.out,
                                "memory")["memory"]["per_device"]["optimizer"]
          == k_tiny_params);
  }
  SECTION("dtype: the saved activations' dtype") {
    test::CliResult r = memory("dtype=float32");
    REQUIRE(r.code == 0);
    CHECK(test::parse_json_from(
              r.out, "memory")["memory"]["activations"]["activation_dtype"]
          == "f32");
  }
  SECTION("what shardplan does not model is a warning saying what changes") {
    for (const char* key : {"quantization=int8",
                            "scan_layers=false",
                            "custom_mesh=hybrid_ring_64x4",
                            "megablox=false",
                            "remat_policy=custom kv_proj=offload"}) {
      INFO(key);
      test::CliResult r = memory(key);
      CHECK(r.code == 0);
      CHECK_THAT(r.err, Catch::Contains("[maxtext.unmodelled]"));
    }
    // base.yml's values are no warning.
    test::CliResult quiet =
        memory("quantization='' scan_layers=true megablox=true");
    CHECK_THAT(quiet.err, !Catch::Contains("[maxtext.unmodelled]"));
  }
  SECTION("a key MaxText's config does not have is pyconfig's error") {
    const std::filesystem::path dir = test::temp_dir("unknown_key");
    write(dir / "run.yml",
          "model_name: llama3.1-8b\nici_tensor_transpose_"
          "parallelism: 1\n");
    test::CliResult r =
        test::run_cli(test::args("memory --topology v5p-8 --maxtext-config {}",
                                 (dir / "run.yml").string()));
    CHECK(r.code == 2);
    CHECK_THAT(r.err,
               Catch::Contains("run.yml:2:1: error: "
                               "\"ici_tensor_transpose_parallelism\" "
                               "is not a key of MaxText's config"));
  }
}

TEST_CASE("maxtext model: every key --format maxtext writes is MaxText's",
          "[cli][maxtext][maxtext_model]") {
  // The fields of MaxText's types.py at the commit they were read at
  // (configs/maxtext/fields.json, scripts/maxtext_fields.py).
  CHECK(maxtext_fields_commit() == "e591f30cbbf217ed67ef71263ec0538239f9c3b8");
  CHECK(maxtext_fields().size() == 787);
  // Plans that write each kind of key: the mesh on two slices with MaxText
  // and shardplan names, the rules, a workload with accumulation, vocab
  // tiles and a custom policy, a pipeline, and the training state.
  const char* plans[] = {
      "plan --model llama-3-8b --topology 2xv5p-128 --mesh data:2,fsdp:16,"
      "tensor:4 --dcn data:2 --rules maxtext --seq 4096 --batch 256 "
      "--microbatches 2 --vocab-tiles 4 --recipe adam --remat "
      "custom:decoder_layer_input=offload,out_proj=device,moe_mlpwo=offload",
      "plan --model mixtral-8x7b-v0.1 --topology v5p-128 --mesh "
      "stage:4,fsdp:4,ep:4 --rules maxtext --seq 4096 --batch 128 "
      "--microbatches 8 --recipe adam --optimizer sgd",
      ("plan --model llama-3-8b --topology v5p-128 --mesh fsdp:-1,tp:4 "
       "--rules fsdp-tp"),
  };
  for (const char* args : plans) {
    INFO(args);
    test::CliResult r =
        test::run_cli(test::args(std::string(args) + " --format maxtext"));
    REQUIRE(r.code == 0);
    std::istringstream lines(r.out);
    int keys = 0;
    for (std::string line; std::getline(lines, line);) {
      const size_t colon = line.find(':');
      if (line.empty() || line[0] == '#' || line[0] == ' ' || line[0] == ']'
          || colon == std::string::npos) {
        continue;
      }
      const std::string key = line.substr(0, colon);
      INFO(key);
      CHECK(maxtext_fields().contains(key));
      ++keys;
    }
    CHECK(keys > 20);
    // Every axis a rule names is one of base.yml's mesh_axes.
    for (const char* gone : {"'sequence'", "'tensor_transpose'"}) {
      CHECK_THAT(r.out, !Catch::Contains(gone));
    }
  }
}

TEST_CASE("maxtext model: a base.yml-style config writes back and errs once",
          "[cli][maxtext][maxtext_model]") {
  // large.yml has current base.yml's keys, mesh_axes and rules: its own
  // rules name context_usp_ulysses and diloco-era axes, all MaxText's.
  test::CliResult r = test::run_cli(
      test::args("plan --topology v5p-128 --maxtext-config {} --format maxtext",
                 test::data_path("maxtext/large.yml")));
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("ici_context_usp_ulysses_parallelism: 1"));
  // A rules file that names an axis MaxText lacks in two rules: one error,
  // located in that file.
  const std::filesystem::path dir = test::temp_dir("rules_once");
  write(dir / "rules.json",
        R"({"rules": [{"pattern": "weight$", "logical_axes": ["embed"]}],
            "logical_axis_rules": [["embed", ["foo"]], ["mlp", ["foo"]]]})");
  test::CliResult once = test::run_cli(test::args(
      "plan --topology v5p-128 --model llama-3-8b --mesh foo:4,fsdp:16 "
      "--rules {} --format maxtext",
      (dir / "rules.json").string()));
  CHECK(once.code == 2);
  size_t errors = 0;
  for (size_t at = once.err.find("names mesh axis \"foo\"");
       at != std::string::npos;
       at = once.err.find("names mesh axis \"foo\"", at + 1)) {
    ++errors;
  }
  CHECK(errors == 1);
}

TEST_CASE("maxtext model: model_name through a base_config chain",
          "[cli][maxtext][maxtext_model]") {
  // configs/base.yml sets base.yml's default dims; configs/run.yml chains
  // to it and names the model, whose file is found beside run.yml (the
  // config pyconfig was given), and whose dims win over base.yml's.
  const std::filesystem::path dir = test::temp_dir("chain");
  write(dir / "configs" / "base.yml",
        "base_emb_dim: 2048\nbase_num_query_heads: 16\nbase_num_kv_heads: 16\n"
        "base_mlp_dim: 7168\nbase_num_decoder_layers: 16\nhead_dim: 128\n"
        "vocab_size: 32000\ndecoder_block: llama2\nweight_dtype: float32\n"
        "opt_type: adamw\nmu_dtype: ''\n");
  write(dir / "configs" / "models" / "tiny.yml", k_tiny);
  write(dir / "configs" / "run.yml",
        "base_config: base.yml\nmodel_name: tiny\nweight_dtype: bfloat16\n");
  json doc = plan(test::args("plan --topology v5p-8 --maxtext-config {}",
                             (dir / "configs" / "run.yml").string()));
  CHECK(doc["summary"]["parameters"] == k_tiny_params);
  // Without model_name, base.yml's default model: 16 layers of width 2048,
  // 16 heads of 128, an MLP of 7168, 32000 tokens, untied: 16 x (4 x 2048
  // x 2048 + 3 x 2048 x 7168 + 2 x 2048) + 2 x 32000 x 2048 + 2048.
  json dflt = plan(test::args("plan --topology v5p-8 --maxtext-config {}",
                              (dir / "configs" / "base.yml").string()));
  CHECK(dflt["summary"]["parameters"]
        == 16 * (4 * 2048 * 2048 + 3 * 2048 * 7168 + 2 * 2048)
               + 2 * 32000 * 2048 + 2048);
}
