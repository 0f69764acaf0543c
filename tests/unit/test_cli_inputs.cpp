// The loaders the commands share, through cli::run() (src/cli/inputs.cpp):
// a manifest from --manifest, --model or --from-hf-config, the size limit
// of each kind of input file, and the mesh laid out on the topology as
// `mesh` lays it out.

#include "support/test_support.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace shardplan;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using Result = test::CliResult;
using test::args;
using test::examples;
using test::parse_json;
using test::run_cli;
using test::temp_dir;

}  // namespace

TEST_CASE("cli: a missing manifest names its path", "[cli][inputs]") {
  Result r = run_cli(args("manifest --manifest /nonexistent/dir/model.json"));
  CHECK(r.code == 2);
  CHECK(r.out.empty());
  CHECK(r.err.rfind("/nonexistent/dir/model.json: error: cannot read file", 0)
        == 0);
  CHECK(r.err.find("[io.read]") != std::string::npos);
}

TEST_CASE("cli: built-in models and Hugging Face configs as manifests",
          "[cli][inputs]") {
  Result list = run_cli(args("manifest --model list --format json"));
  CHECK(list.code == 0);
  json models = parse_json(list.out)["models"];
  REQUIRE(models.size() >= 10);
  // The issue's acceptance figures, through the command line.
  Result llama = run_cli(args("manifest --model llama-3-8b --format json"));
  CHECK(llama.code == 0);
  json summary = parse_json(llama.out)["summary"];
  CHECK(summary["tensors"] == 291);
  CHECK(summary["parameters"] == 8030261248LL);
  CHECK(summary["bytes"] == 16060522496LL);

  Result unknown = run_cli(args("manifest --model lama-3-8b"));
  CHECK(unknown.code == 2);
  CHECK(unknown.err.rfind("--model: error: unknown model \"lama-3-8b\"", 0)
        == 0);
  CHECK(unknown.err.find("did you mean \"llama-3-8b\"?") != std::string::npos);

  // --from-hf-config: GPT-2's published config gives its 124,439,808.
  fs::path dir = temp_dir("hf_config");
  const std::string config = (dir / "config.json").string();
  std::ofstream(config)
      << R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
    "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
    "vocab_size": 50257, "layer_norm_epsilon": 1e-05})";
  Result gpt2 =
      run_cli(args("manifest --from-hf-config {} --format json", config));
  INFO(gpt2.err);
  CHECK(gpt2.code == 0);
  CHECK(parse_json(gpt2.out)["summary"]["parameters"] == 124439808);
  std::ofstream(config) << R"({"architectures": ["FalconForCausalLM"]})";
  Result falcon = run_cli(args("manifest --from-hf-config {}", config));
  CHECK(falcon.code == 2);
  CHECK(falcon.err.find("[model.unknown-architecture]") != std::string::npos);
  fs::remove_all(dir);

  // check and memory take --model wherever --manifest goes.
  Result check =
      run_cli(args("check --model gpt2 --devices 4 --mesh dp:4 --specs {} "
                   "--format json",
                   examples("tiny-llama.specs.json")));
  CHECK(check.code == 1);  // tiny-llama's specs name none of gpt2's tensors
  json doc = parse_json(check.out);
  CHECK(doc["manifest"] == "--model gpt2");
  CHECK(doc["summary"]["parameters"] == 124439808);
  Result none = run_cli(args("check --devices 4 --mesh dp:4 --specs {}",
                             examples("tiny-llama.specs.json")));
  CHECK(none.code == 2);
  CHECK(none.err.find("give --manifest PATH, --model NAME or "
                      "--from-hf-config FILE")
        != std::string::npos);
}

TEST_CASE("cli: plan and check and memory lay the mesh out as mesh does",
          "[cli][inputs]") {
  using Strings = std::vector<std::string>;
  // v5p-256 is 4x4x8 chips: tp:2 is no product of whole physical axes, so
  // JAX's create_device_mesh refuses fsdp:64,tp:2 unless axes may split.
  const Strings where = args("--topology v5p-256 --mesh fsdp:64,tp:2");
  Strings mesh_args = args("mesh");
  mesh_args.insert(mesh_args.end(), where.begin(), where.end());
  Result mesh = run_cli(mesh_args);
  REQUIRE(mesh.code == 2);
  CHECK_THAT(mesh.err,
             Catch::StartsWith("--mesh:1:9: error: failed to find assignment "
                               "for logical_axis_index 1 of size 2"));
  CHECK_THAT(mesh.err, Catch::Contains("  fsdp:64,tp:2\n          ^"));
  const std::string specs = examples("tiny-llama.specs.json");
  for (const Strings& command : {args("plan --model llama-3-8b"),
                                 args("check --manifest {} --specs {}",
                                      examples("tiny-llama.json"),
                                      specs),
                                 args("memory --manifest {} --specs {}",
                                      examples("tiny-llama.json"),
                                      specs)}) {
    INFO(command[0]);
    Strings args = command;
    args.insert(args.end(), where.begin(), where.end());
    Result r = run_cli(args);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err == mesh.err);  // the same error, location and caret
    args.push_back("--allow-split-physical-axes");
    Result split = run_cli(args);
    CHECK(split.code != 2);
    CHECK(split.err.find("[topology.no-assignment]") == std::string::npos);
  }
}

// Every file a command reads goes by the limit of its kind (docs/cli.md,
// "Input files and their sizes"): a sparse file one byte over it is refused
// from its size, exit 2, before a byte is read; /dev/zero and a pipe are
// read one byte past the limit, then refused.
TEST_CASE("cli: every input file is refused over its kind's limit",
          "[cli][inputs]") {
  using Strings = std::vector<std::string>;
  const fs::path dir = temp_dir("limits");
  // Sparse files of limit + 1 bytes: 1 GiB + 1 = 1,073,741,825 for
  // manifests and specs, 64 MiB + 1 = 67,108,865 for rules, 1 MiB + 1 =
  // 1,048,577 for topologies, 16 MiB + 1 = 16,777,217 for configs.
  auto sparse = [&](const std::string& name, uintmax_t bytes) {
    const std::string path = (dir / name).string();
    { std::ofstream(path).put('{'); }
    fs::resize_file(path, bytes);
    return path;
  };
  const std::string manifest = sparse("m.json", 1'073'741'825);
  const std::string specs = sparse("s.json", 1'073'741'825);
  const std::string rules = sparse("r.json", 67'108'865);
  const std::string topology = sparse("t.json", 1'048'577);
  const std::string config = sparse("config.json", 16'777'217);
  fs::create_directories(dir / "folder");
  const std::string index =
      sparse("folder/model.safetensors.index.json", 1'073'741'825);
  const std::string tiny = examples("tiny-llama.json");
  const std::string tiny_specs = examples("tiny-llama.specs.json");
  const Strings on = args("--devices 8 --mesh fsdp:2,tp:4");
  auto with = [&](Strings args) {
    args.insert(args.end(), on.begin(), on.end());
    return args;
  };
  struct Case {
    Strings args;
    std::string file;
    std::string first_line;
  };
  auto message = [](const std::string& file,
                    uintmax_t bytes,
                    const std::string& what,
                    const std::string& limit) {
    return fmt::format(
        "{}: error: the file has {} bytes; a {} may have at most {}; none of "
        "it was read: the limit is far above any real {} (docs/cli.md, "
        "\"Input files and their sizes\") [io.too-large]",
        file,
        bytes,
        what,
        limit,
        what);
  };
  const std::string gib = "1 GiB (1073741824 bytes)";
  const std::vector<Case> cases = {
      {args("manifest --manifest {}", manifest),
       manifest,
       message(manifest, 1'073'741'825, "manifest", gib)},
      {args("manifest --manifest {}", (dir / "folder").string()),
       index,
       message(index, 1'073'741'825, "manifest", gib)},
      {args("manifest --from-hf-config {}", config),
       config,
       message(config,
               16'777'217,
               "Hugging Face config",
               "16 MiB (16777216 bytes)")},
      {with(args("check --manifest {} --specs {}", tiny, specs)),
       specs,
       message(specs, 1'073'741'825, "specs file", gib)},
      {with(args("memory --manifest {} --specs {}", tiny, specs)),
       specs,
       message(specs, 1'073'741'825, "specs file", gib)},
      {with(args("plan --manifest {} --rules {}", tiny, rules)),
       rules,
       message(rules, 67'108'865, "rules file", "64 MiB (67108864 bytes)")},
      {args("mesh --topology {} --mesh dp:-1", topology),
       topology,
       message(topology, 1'048'577, "topology file", "1 MiB (1048576 bytes)")},
      {args("topology show {}", topology),
       topology,
       message(topology, 1'048'577, "topology file", "1 MiB (1048576 bytes)")},
      {with(args("reshard --manifest {} --from-specs {} --to-specs {}",
                 tiny,
                 tiny_specs,
                 specs)),
       specs,
       message(specs, 1'073'741'825, "specs file", gib)},
      {with(args("reshard --manifest {} --from-rules {} --to-specs {}",
                 tiny,
                 rules,
                 tiny_specs)),
       rules,
       message(rules, 67'108'865, "rules file", "64 MiB (67108864 bytes)")},
      // /dev/zero never ends: 1,048,577 bytes read, then refused.
      {args("topology show /dev/zero"),
       "/dev/zero",
       "/dev/zero: error: the input has more than 1048576 bytes; a topology "
       "file may have at most 1 MiB (1048576 bytes); a pipe or a device is "
       "read up to the limit, then refused [io.too-large]"},
  };
  REQUIRE(cases.size() == 11);
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.args[0] << " " << c.args[1] << " " << c.file) {
      Result r = run_cli(c.args);
      INFO(r.err);
      CHECK(r.code == 2);
      CHECK(r.out.empty());
      CHECK(r.err.substr(0, r.err.find('\n')) == c.first_line);
    }
  }
  fs::remove_all(dir);
}
