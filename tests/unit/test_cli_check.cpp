// `shardplan plan`, `check` and `memory` through cli::run()
// (src/cli/check.cpp): located faults and exit codes, the CI formats,
// capacity, output files, and the plan's groups, JSON, explanations and
// dtypes.

#include "support/check_invariants.hpp"
#include "support/test_support.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
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

std::vector<std::string> check_args(const std::string& specs,
                                    std::vector<std::string> more) {
  std::vector<std::string> args =
      test::args("check --mesh fsdp:2,tp:4 --manifest {} --specs {}",
                 examples("tiny-llama.json"),
                 specs);
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace

TEST_CASE("cli: check reports every fault, located, and exits 1",
          "[cli][check]") {
  const std::string bad = test::data_path("check/tiny-llama.bad-specs.json");
  Result r = run_cli(check_args(bad, args("--topology v5e-8")));
  CHECK(r.code == 1);
  CHECK(r.out.find("result: 6 errors, 0 warnings\n") != std::string::npos);
  CHECK(r.out.find("specs: 16 valid, 5 with problems") != std::string::npos);
  CHECK(r.err.find(
            bad
            + ":/specs/model.layers.0.self_attn.q_proj.weight: error: resource "
              "axis: tpp of P('tpp', 'fsdp') is not found in mesh: ('fsdp', "
              "'tp'); "
              "did you mean 'tp'? [spec.unknown-axis]\n")
        != std::string::npos);
  CHECK(
      r.err.find(
          bad
          + ": error: tensor \"model.layers.1.self_attn.o_proj.weight\" has no "
            "spec in "
          + bad)
      != std::string::npos);
  // -q keeps the errors; warnings would go.
  Result quiet = run_cli(check_args(bad, args("--topology v5e-8 -q")));
  CHECK(quiet.err == r.err);
}

TEST_CASE("cli: check --format github annotates the specs file",
          "[cli][check]") {
  const std::string bad = test::data_path("check/tiny-llama.bad-specs.json");
  Result r = run_cli(check_args(bad, args("--topology v5e-8 --format github")));
  CHECK(r.code == 1);
  // Line 4 of the file, the '[' of the spec at column 45 (counted by hand).
  CHECK(r.out.find("::error file=" + bad
                   + ",line=4,col=45,title=shardplan spec.unknown-axis::"
                     "tensor \"model.layers.0.self_attn.q_proj.weight\": "
                     "resource axis: tpp of "
                     "P('tpp', 'fsdp') is not found in mesh: ('fsdp', 'tp'); "
                     "did you mean 'tp'?\n")
        != std::string::npos);
  CHECK(r.out.find("::error file=" + bad + ",title=shardplan spec.missing::")
        != std::string::npos);
  const std::string last_line =
      r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  CHECK(last_line.rfind("shardplan check: 6 errors, 0 warnings; total ", 0)
        == 0);

  // Workflow-command escaping: %, CR and LF in data; also ':' and ',' in
  // properties (actions/toolkit command.ts).
  fs::path dir = temp_dir("github,esc:ape");
  const std::string specs = (dir / "s.json").string();
  std::ofstream(specs) << R"({"specs": {"w%1": []}})";
  const std::string manifest = (dir / "m.json").string();
  std::ofstream(manifest)
      << R"({"params": [{"name": "w", "shape": [4], "dtype": "f32"}]})";
  Result e =
      run_cli(args("check --mesh a:2 --manifest {} --specs {} --format github",
                   manifest,
                   specs));
  CHECK(e.code == 1);
  std::string escaped_dir = dir.string();
  for (auto [from, to] :
       {std::pair<std::string, std::string>{",", "%2C"}, {":", "%3A"}}) {
    for (size_t at = escaped_dir.find(from); at != std::string::npos;
         at = escaped_dir.find(from, at + to.size())) {
      escaped_dir.replace(at, from.size(), to);
    }
  }
  CHECK(e.out.find("::error file=" + escaped_dir
                   + "/s.json,line=1,col=19,title=shardplan "
                     "spec.unknown-tensor::spec for tensor \"w%251\"")
        != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("cli: check --format github and markdown report bad input too",
          "[cli][check]") {
  // Line 2 lacks its comma: JSON's error is at the string that starts line
  // 3, column 3 (two spaces in).
  const std::string syntax =
      test::data_path("bad_inputs/specs/missing_comma.json");
  Result r = run_cli(check_args(syntax, args("--format github")));
  CHECK(r.code == 2);
  CHECK(r.out
        == "::error file=" + syntax
               + ",line=3,col=3,title=shardplan json.syntax::expected ',' or "
                 "'}', got a string\n"
                 "shardplan check: 1 error, 0 warnings; bad input: nothing "
                 "was checked\n");
  // stderr has the diagnostic as ever.
  CHECK_THAT(r.err,
             Catch::StartsWith(syntax
                               + ":3:3: error: expected ',' or '}', "
                                 "got a string [json.syntax]\n"));

  // Line 3: `  "lm_head.weight": "P('tp',, 'fsdp')"`: the string opens at
  // column 21 (2 spaces, 16 for the quoted name, ':' and a space), and the
  // second comma, 8th character of its text, is at column 21 + 8 = 29.
  const std::string spec =
      test::data_path("bad_inputs/specs/string_spec_two_commas.json");
  Result s = run_cli(check_args(spec, args("--format github")));
  CHECK(s.code == 2);
  CHECK(s.out
        == "::error file=" + spec
               + ",line=3,col=29,title=shardplan spec.syntax::tensor "
                 "\"lm_head.weight\": expected an axis name, None or a "
                 "tuple, got \",\"\n"
                 "shardplan check: 1 error, 0 warnings; bad input: nothing "
                 "was checked\n");

  // Markdown: the heading says so, and the table has the error, located.
  Result md = run_cli(check_args(syntax, args("--format markdown")));
  CHECK(md.code == 2);
  CHECK(md.out
        == "## shardplan check: :x: bad input\n\n"
           "The inputs could not be read as given: nothing was checked (exit "
           "code 2).\n\n"
           "### Errors (1)\n\n"
           "| code | tensor | where | message |\n|---|---|---|---|\n"
           "| `json.syntax` |  | `"
               + syntax
               + ":3:3` | expected ',' or '}', got a string |\n");
  // A flag's error: no file, the flag leads the message.
  Result hbm = run_cli(check_args(examples("tiny-llama.specs.json"),
                                  args("--hbm 0 --format github")));
  CHECK(hbm.code == 2);
  CHECK_THAT(hbm.out,
             Catch::StartsWith("::error title=shardplan cli.size::--hbm: "
                               "expected a byte size above 0"));
  // Text writes nothing to stdout on bad input; -o's file is not written.
  Result text = run_cli(check_args(syntax, {}));
  CHECK(text.code == 2);
  CHECK(text.out.empty());
}

TEST_CASE("cli: check --format github folds 30 findings of one kind",
          "[cli][check]") {
  // 30 tensors [6, 8] split over fsdp:4 on dim 0: 6 % 4 = 2, 30 x
  // spec.indivisible, the spec of l.I.w on line I + 2 at column 12.
  fs::path dir = temp_dir("github_fold");
  const std::string manifest = (dir / "m.json").string();
  const std::string specs = (dir / "s.json").string();
  {
    std::ofstream m(manifest);
    std::ofstream s(specs);
    m << R"({"params": [)";
    s << "{\"specs\": {\n";
    for (int i = 0; i < 30; ++i) {
      m << (i ? ", " : "")
        << fmt::format(R"({{"name": "l.{}.w", "shape": [6, 8], "dtype": )"
                       R"("bf16"}})",
                       i);
      s << fmt::format(
          "  \"l.{}.w\": [\"fsdp\", null]{}\n", i, i < 29 ? "," : "");
    }
    m << "]}";
    s << "}}\n";
  }
  Result r = run_cli(
      args("check --devices 8 --mesh fsdp:4,tp:2 --manifest {} --specs {} "
           "--format github",
           manifest,
           specs));
  CHECK(r.code == 1);
  // Three annotations, then one for the 27 others at l.3.w (line 5).
  size_t errors = 0;
  for (size_t at = r.out.find("::error "); at != std::string::npos;
       at = r.out.find("::error ", at + 1)) {
    ++errors;
  }
  CHECK(errors == 4);
  CHECK_THAT(r.out,
             Catch::Contains("::error file=" + specs
                             + ",line=4,col=12,title=shardplan "
                               "spec.indivisible::tensor \"l.2.w\": "));
  CHECK_THAT(r.out,
             Catch::Contains("::error file=" + specs
                             + ",line=5,col=12,title=shardplan "
                               "spec.indivisible::and 27 more "
                               "spec.indivisible errors: \"l.3.w\", "
                               "\"l.4.w\", \"l.5.w\", \"l.6.w\", \"l.7.w\" "
                               "and 22 others; shardplan's stderr lists "
                               "every one\n"));
  // Every finding stays in the text on stderr and in the JSON.
  size_t on_stderr = 0;
  for (size_t at = r.err.find("[spec.indivisible]"); at != std::string::npos;
       at = r.err.find("[spec.indivisible]", at + 1)) {
    ++on_stderr;
  }
  CHECK(on_stderr == 30);
  fs::remove_all(dir);
}

TEST_CASE("cli: check --format markdown", "[cli][check]") {
  Result ok = run_cli(check_args(examples("tiny-llama.specs.json"),
                                 args("--topology v5e-8 --format markdown")));
  CHECK(ok.code == 0);
  CHECK(ok.out.rfind("## shardplan check: :white_check_mark: ok\n", 0) == 0);
  // params-only: params 493,056 (check_tiny_llama) + gather buffer: layers
  // 0 and 1, each 724,992 elements (q 65,536 + k, v 2 x 32,768 + o 65,536
  // + gate, up, down 3 x 176,128) gathered over fsdp and split over tp:4
  // at 2 bytes: 2 x 724,992 / 4 x 2 = 724,992; 1,218,048 bytes (1.16 MiB).
  CHECK(ok.out.find("| **total** | **1,218,048** | **1.16 MiB** |")
        != std::string::npos);
  CHECK(ok.out.find("### Errors") == std::string::npos);
  Result bad =
      run_cli(check_args(test::data_path("check/tiny-llama.bad-specs.json"),
                         args("--topology v5e-8 --format markdown")));
  CHECK(bad.code == 1);
  CHECK(bad.out.rfind("## shardplan check: :x: 6 errors, 0 warnings\n", 0)
        == 0);
  CHECK(bad.out.find("### Errors (6)\n\n| code | tensor | where | message |\n")
        != std::string::npos);
}

TEST_CASE("cli: check over capacity, and the device count", "[cli][check]") {
  // 5,024,256 bytes per device with adam and ZeRO-1 (the check_tiny_llama
  // golden); 4,000,000 bytes of HBM leave 3,600,000 usable (no topology:
  // 10% kept free).
  Result r =
      run_cli(check_args(examples("tiny-llama.specs.json"),
                         args("--devices 8 --recipe adam --zero 1 --hbm 4MB")));
  CHECK(r.code == 1);
  // Located at where the HBM figure came from.
  CHECK(r.err.find("--hbm: error: the most loaded device needs 5024256 "
                   "bytes, over "
                   "the 3600000 bytes "
                   "usable (4000000 bytes of HBM with 10% kept free)")
        != std::string::npos);
  CHECK(r.out.find("DOES NOT FIT") != std::string::npos);
  Result headroom = run_cli(check_args(
      examples("tiny-llama.specs.json"),
      args("--devices 8 --recipe adam --zero 1 --hbm 4MB --headroom 0")));
  CHECK(headroom.code == 1);  // 5,024,256 > 4,000,000 still
  Result fits = run_cli(
      check_args(examples("tiny-llama.specs.json"),
                 args("--devices 8 --recipe adam --zero 1 --hbm 5024256B "
                      "--headroom 0")));
  CHECK(fits.code == 0);

  Result count = run_cli(
      check_args(examples("tiny-llama.specs.json"), args("--topology v5e-16")));
  CHECK(count.code == 1);
  CHECK(count.err.find(
            "--mesh: error: number of devices 16 must equal the product of "
            "mesh_shape (2, 4) = 8; --topology v5e-16 has 16 devices "
            "[mesh.device-count]")
        != std::string::npos);

  Result size = run_cli(
      check_args(examples("tiny-llama.specs.json"), args("--hbm 12XB")));
  CHECK(size.code == 2);
  CHECK(size.err.rfind("--hbm: error: expected a byte size such as 80GB, 95GiB "
                       "or 1073741824, "
                       "got \"12XB\" [cli.size]",
                       0)
        == 0);
  // No HBM at all is no device: 0 bytes, and 0.4 bytes (rounded to whole
  // bytes: 0), are refused at the flag; so are a negative size and a word.
  for (const char* zero : {"0", "0GB", "0.4"}) {
    INFO(zero);
    Result none = run_cli(
        check_args(examples("tiny-llama.specs.json"), args("--hbm {}", zero)));
    CHECK(none.code == 2);
    CHECK(none.out.empty());
    CHECK(none.err
          == fmt::format("--hbm: error: expected a byte size above 0, got "
                         "\"{}\"; give the device's memory, such as 80GB or "
                         "95GiB [cli.size]\n",
                         zero));
  }
  for (const char* bad : {"-5", "-1GB", "abc", ""}) {
    INFO(bad);
    Result wrong = run_cli(
        check_args(examples("tiny-llama.specs.json"), args("--hbm {}", bad)));
    CHECK(wrong.code == 2);
    CHECK(wrong.err
          == fmt::format("--hbm: error: expected a byte size such as 80GB, "
                         "95GiB or 1073741824, got \"{}\" [cli.size]\n",
                         bad));
  }
  // One byte is a size (a device that fits nothing: exit 1, not 2).
  Result one =
      run_cli(check_args(examples("tiny-llama.specs.json"), args("--hbm 1")));
  CHECK(one.code == 1);
  CHECK_THAT(one.err, Catch::Contains("[memory.over-capacity]"));
}

TEST_CASE("cli: memory draws each category against HBM", "[cli][check]") {
  // Total 5,024,256 bytes (the check_tiny_llama golden) against 10,048,512
  // of HBM: 50%, 20 of 40 marks.
  std::vector<std::string> args = check_args(
      examples("tiny-llama.specs.json"),
      test::args("--devices 8 --recipe adam --zero 1 --hbm 10048512"));
  args[0] = "memory";
  Result r = run_cli(args);
  CHECK(r.code == 0);
  CHECK(r.out.find("total          5,024,256  4.79 MiB    [####################"
                   "....................]  50.0%\n")
        != std::string::npos);
  CHECK(r.out.find("recipe adam with ZeRO-1 over fsdp (2 devices)\n")
        != std::string::npos);
  CHECK(r.out.find("largest tensors per device (20):") != std::string::npos);
  // The first of the largest: embed_tokens, 64,000 bytes and 500 KiB with
  // grads (64,000) and optimizer (12 x 32,000).
  CHECK(
      r.out.find(
          "model.embed_tokens.weight                       [1000, 256]  bf16   "
          "tp,fsdp  62.50 KiB  500.00 KiB\n")
      != std::string::npos);
}

TEST_CASE("cli: check -o writes the result atomically, even with errors",
          "[cli][check]") {
  fs::path dir = temp_dir("check_output");
  const std::string out = (dir / "check.json").string();
  Result r =
      run_cli(check_args(test::data_path("check/tiny-llama.bad-specs.json"),
                         args("--topology v5e-8 --format json -o {}", out)));
  CHECK(r.code == 1);
  CHECK(r.out.empty());
  json doc = parse_json(test::slurp(out));
  CHECK(doc["summary"]["errors"] == 6);
  CHECK(doc["command"] == "check");
  CHECK(fs::directory_iterator(dir) != fs::directory_iterator());
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator())
        == 1);

  // The JSON written by check is itself a specs file (tensors[].spec): check
  // it again and get the same result.
  Result good =
      run_cli(check_args(examples("tiny-llama.specs.json"),
                         args("--topology v5e-8 --format json -o {}", out)));
  CHECK(good.code == 0);
  Result again =
      run_cli(check_args(out, args("--topology v5e-8 --format json")));
  CHECK(again.code == 0);
  json first = parse_json(test::slurp(out));
  json second = parse_json(again.out);
  CHECK(first["tensors"] == second["tensors"]);
  CHECK(first["memory"] == second["memory"]);
  fs::remove_all(dir);
}

TEST_CASE("cli: specs JAX refuses but that read are plan errors (exit 1)",
          "[cli][check]") {
  fs::path dir = temp_dir("invalid_specs");
  const std::string manifest = (dir / "m.json").string();
  std::ofstream(manifest)
      << R"({"params": [{"name": "w", "shape": [64, 64], "dtype": "f32"}]})";
  size_t seen = 0;
  for (const auto& entry :
       fs::directory_iterator(test::data_path("invalid_specs"))) {
    const std::string path = entry.path().string();
    DYNAMIC_SECTION(entry.path().filename().string()) {
      ++seen;
      Result r = run_cli(args(
          "check --mesh dp:2,fsdp:4 --manifest {} --specs {}", manifest, path));
      INFO(r.err);
      CHECK(r.code == 1);
      CHECK(r.err.rfind(path + ":/specs/w/0/", 0) == 0);
      CHECK(r.err.find("[spec.nested-tuple]") != std::string::npos);
    }
  }
  CHECK(seen >= 1);
  fs::remove_all(dir);
}

// Random manifests and specs that disagree (unknown and missing names, ranks,
// unknown and repeated axes, uneven dims): check never crashes, exits 0 or
// 1, and its JSON holds every invariant.
TEST_CASE("cli: check on random disagreeing inputs", "[cli][check][property]") {
  const int seed = GENERATE(take(60, random(0, 1 << 30)));
  std::mt19937 rng(static_cast<unsigned>(seed));
  auto pick = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const std::vector<std::string> axes = {"dp", "fsdp", "tp", "zz"};
  const std::vector<std::string> dtypes = {
      "bf16", "f32", "i4", "bool", "f8_e4m3"};
  json manifest = {{"params", json::array()}};
  json specs = {{"specs", json::object()}};
  const int tensors = pick(1, 6);
  for (int i = 0; i < tensors; ++i) {
    json shape = json::array();
    const int rank = pick(0, 3);
    for (int d = 0; d < rank; ++d) {
      shape.push_back(pick(0, 3) == 0 ? pick(1, 7) : 8 * pick(1, 64));
    }
    const std::string name = fmt::format("t{}", i);
    manifest["params"].push_back(
        {{"name", name},
         {"shape", shape},
         {"dtype", dtypes[static_cast<size_t>(pick(0, 4))]}});
    if (pick(0, 5) == 0) {
      continue;  // no spec
    }
    json spec = json::array();
    const int entries = pick(0, rank + 1);
    for (int d = 0; d < entries; ++d) {
      const int kind = pick(0, 3);
      if (kind == 0) {
        spec.push_back(nullptr);
      } else if (kind == 1) {
        spec.push_back(axes[static_cast<size_t>(pick(0, 3))]);
      } else {
        spec.push_back({axes[static_cast<size_t>(pick(0, 3))],
                        axes[static_cast<size_t>(pick(0, 3))]});
      }
    }
    specs["specs"][pick(0, 7) == 0 ? name + "_x" : name] = spec;
  }
  fs::path dir = temp_dir("random_check");
  const std::string m = (dir / "m.json").string();
  const std::string s = (dir / "s.json").string();
  std::ofstream(m) << manifest.dump();
  std::ofstream(s) << specs.dump();
  const std::vector<std::string> recipes = {
      "params-only", "adam", "megatron", "scaling-book"};
  // Two picks in a fixed order (a function's arguments have none).
  const std::string recipe = recipes[static_cast<size_t>(pick(0, 3))];
  const std::string zero = std::to_string(pick(0, 3));
  Result r =
      run_cli(args("check --mesh dp:2,fsdp:4,tp:2 --devices 16 --manifest {} "
                   "--specs {} --recipe {} --zero {} --hbm 1MB --format json",
                   m,
                   s,
                   recipe,
                   zero));
  INFO(manifest.dump() << "\n" << specs.dump() << "\n" << r.err);
  CHECK((r.code == 0 || r.code == 1));
  json doc = parse_json(r.out);
  for (const std::string& broken : test::check_invariants(doc)) {
    FAIL_CHECK("invariant: " << broken);
  }
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------
// plan

TEST_CASE("cli: plan groups tensors by rule and folds layers", "[cli][check]") {
  Result r = run_cli(
      args("plan --topology v5p-128 --mesh fsdp:-1,tp:4 --model llama-3-8b"));
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  // The default preset, by its name (not configs/rules/fsdp-tp.json, a
  // path in shardplan's source tree).
  CHECK_THAT(r.out,
             Catch::StartsWith("plan: 291 tensors of --model llama-3-8b with "
                               "rules preset fsdp-tp\n"));
  // q_proj [4096, 4096] bf16 as tp,fsdp on tp:4, fsdp:16: 1024 x 256 x 2 B.
  CHECK_THAT(
      r.out,
      Catch::Contains("model.layers.{0..31}.self_attn.q_proj.weight  x32    "
                      "[4096, 4096]   bf16   tp,fsdp  512.00 KiB"));
  // down_proj is row-parallel: [4096, 14336] as fsdp,tp: 256 x 3584 x 2 B.
  CHECK_THAT(
      r.out,
      Catch::Contains("model.layers.{0..31}.mlp.down_proj.weight     x32    "
                      "[4096, 14336]  bf16   fsdp,tp  1.75 MiB"));
  CHECK_THAT(r.out, Catch::EndsWith("result: ok\n"));
}

TEST_CASE("cli: plan JSON is a specs file check accepts", "[cli][check]") {
  fs::path dir = temp_dir("plan_roundtrip");
  const std::string plan_file = (dir / "plan.json").string();
  Result plan =
      run_cli(args("plan --topology v5e-8 --mesh fsdp:2,tp:4 --manifest {} "
                   "--rules fsdp-tp --format json -o {}",
                   examples("tiny-llama.json"),
                   plan_file));
  INFO(plan.err);
  REQUIRE(plan.code == 0);
  json doc = json::parse(test::slurp(plan_file));
  CHECK(doc["command"] == "plan");
  REQUIRE(doc["tensors"].size() == 21);
  // The embedding [1000, 256]: vocab over tp (1000 / 4 = 250), embed over
  // fsdp (256 / 2): rule 12 of fsdp-tp.
  CHECK(doc["tensors"][0]["spec"] == json::parse(R"(["tp", "fsdp"])"));
  CHECK(doc["tensors"][0]["rule"]["index"] == 12);
  CHECK(doc["tensors"][0]["bytes_per_device"] == 250 * 128 * 2);
  // The norm [256] is replicated by rule 0.
  CHECK(doc["tensors"][1]["spec"] == json::parse("[null]"));
  CHECK(doc["tensors"][1]["rule"]["index"] == 0);

  Result check =
      run_cli(args("check --topology v5e-8 --mesh fsdp:2,tp:4 --manifest {} "
                   "--specs {} --format json",
                   examples("tiny-llama.json"),
                   plan_file));
  INFO(check.err);
  CHECK(check.code == 0);
  json checked = json::parse(check.out);
  REQUIRE(checked["tensors"].size() == 21);
  for (size_t t = 0; t < 21; ++t) {
    CHECK(checked["tensors"][t]["spec"] == doc["tensors"][t]["spec"]);
    CHECK(checked["tensors"][t]["bytes_per_device"]
          == doc["tensors"][t]["bytes_per_device"]);
  }
  CHECK(checked["memory"] == doc["memory"]);
  fs::remove_all(dir);
}

TEST_CASE("cli: plan JSON writes each tensor on a line of its own",
          "[cli][check]") {
  // One line per entry, tuple specs included (fsdp-tp puts ("fsdp", "ep")
  // on a dim when the mesh has ep), each line the entry itself: grep finds a
  // whole entry and a diff of two plans shows one line per changed tensor.
  Result plan = run_cli(
      args("plan --topology v5e-8 --mesh fsdp:2,ep:2,tp:2 --manifest {} "
           "--rules fsdp-tp --format json",
           examples("tiny-llama.json")));
  INFO(plan.err);
  REQUIRE(plan.code == 0);
  const json doc = json::parse(plan.out);
  std::vector<json> lines;
  std::istringstream in(plan.out);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("    {\"name\": ")) {
      if (line.ends_with(',')) {
        line.pop_back();
      }
      lines.push_back(json::parse(line));
    }
  }
  REQUIRE(lines.size() == doc["tensors"].size());
  bool tuple = false;
  for (size_t t = 0; t < lines.size(); ++t) {
    CHECK(lines[t] == doc["tensors"][t]);
    for (const json& dim : doc["tensors"][t]["spec"]) {
      tuple = tuple || dim.is_array();
    }
  }
  CHECK(tuple);
}

TEST_CASE("cli: plan -v logs each phase's time on stderr only",
          "[cli][check]") {
  const std::vector<std::string> args = test::args(
      "plan --topology v5e-8 --mesh fsdp:2,tp:4 --manifest {} "
      "--rules fsdp-tp",
      examples("tiny-llama.json"));
  std::vector<std::string> verbose = args;
  verbose.push_back("-v");
  Result quiet = run_cli(args);
  Result loud = run_cli(verbose);
  REQUIRE(quiet.code == 0);
  REQUIRE(loud.code == 0);
  CHECK(loud.out == quiet.out);  // stdout carries the result only
  for (const char* phase : {"read the manifest: ",
                            "apply the rules: ",
                            "validate: ",
                            "estimate memory: ",
                            "format the report: ",
                            "write the report: "}) {
    INFO(phase);
    CHECK(loud.err.find(std::string("debug: ") + phase) != std::string::npos);
    CHECK(quiet.err.find(phase) == std::string::npos);
  }
}

TEST_CASE("cli: plan --rules list and --explain", "[cli][check]") {
  Result list = run_cli(args("plan --rules list"));
  CHECK(list.code == 0);
  CHECK_THAT(list.out, Catch::StartsWith("fsdp  ("));
  CHECK_THAT(list.out, Catch::Contains("\nfsdp-tp  ("));
  CHECK_THAT(list.out, Catch::Contains("\nmaxtext  ("));

  Result explain =
      run_cli(args("plan --devices 8 --mesh fsdp:8 --manifest {} --rules fsdp "
                   "--explain model.layers.0.mlp.up_proj.weight",
                   examples("tiny-llama.json")));
  INFO(explain.err);
  CHECK(explain.code == 0);
  CHECK_THAT(
      explain.out,
      Catch::StartsWith("model.layers.0.mlp.up_proj.weight: [688, 256] bf16"));
  CHECK_THAT(explain.out, Catch::Contains("result: "));

  Result json_explain =
      run_cli(args("plan --devices 8 --mesh fsdp:8 --manifest {} --explain "
                   "model.norm.weight "
                   "--format json",
                   examples("tiny-llama.json")));
  CHECK(json_explain.code == 0);
  json e = json::parse(json_explain.out);
  CHECK(e["tensor"]["name"] == "model.norm.weight");
  CHECK(e["result"]["spec"] == json::parse("[null]"));

  Result unknown =
      run_cli(args("plan --devices 8 --mesh fsdp:8 --manifest {} --explain "
                   "model.norm.weigth",
                   examples("tiny-llama.json")));
  CHECK(unknown.code == 2);
  CHECK_THAT(unknown.err,
             Catch::Contains("model.norm.weight"));  // the nearest name
}

TEST_CASE("cli: --param-dtype and --grad-dtype", "[cli][check]") {
  auto plan = [](std::vector<std::string> more) {
    std::vector<std::string> args =
        test::args("plan --devices 8 --mesh fsdp:8 --manifest {}",
                   examples("tiny-llama.json"));
    args.insert(args.end(), more.begin(), more.end());
    return run_cli(args);
  };
  Result typo = plan(args("--param-dtype bf61 --grad-dtype flaot32"));
  CHECK(typo.code == 2);
  CHECK(typo.out.empty());
  CHECK(typo.err
        == "--param-dtype: error: unknown dtype \"bf61\"; did you mean "
           "\"bf16\"? [cli.dtype]\n"
           "--grad-dtype: error: unknown dtype \"flaot32\"; did you mean "
           "\"float32\"? [cli.dtype]\n");
  Result integer = plan(args("--param-dtype int8"));
  CHECK(integer.code == 2);
  CHECK_THAT(integer.err,
             Catch::StartsWith("--param-dtype: error: \"i8\" is not a "
                               "floating-point dtype"));

  // tiny-llama: 1,963,264 bf16 parameters over fsdp:8. With f32 weights
  // (MaxText's weight_dtype default) adam holds 4 + 4 + 8 bytes each.
  Result f32 = plan(args("--recipe adam --param-dtype float32 --format json"));
  REQUIRE(f32.code == 0);
  const json memory = parse_json(f32.out)["memory"];
  CHECK(memory["param_dtype"] == "f32");
  CHECK(memory["grad_dtype"] == "param");
  CHECK(memory["fp8_param_dtype"].is_null());
  const int64_t params = memory["per_device"]["params"].get<int64_t>();
  CHECK(memory["per_device"]["grads"] == params);
  CHECK(memory["per_device"]["optimizer"] == 2 * params);
  Result unused = plan(args("--recipe scaling-book --grad-dtype f32"));
  CHECK(unused.code == 0);
  CHECK_THAT(unused.err,
             Catch::StartsWith("--grad-dtype: warning: --grad-dtype f32 has "
                               "no effect: recipe scaling-book counts no "
                               "gradients"));
}

TEST_CASE("cli: deepseek-v3's gather buffer and FP8 weights (issue 17)",
          "[cli][check]") {
  // The command of issue 17, points 6 and 7, with the per-layer gather
  // buffer of issue 18. Every weight the fsdp-tp preset splits (dense ones
  // over (fsdp,ep), routed experts over fsdp, each rank holding 256 / 64 =
  // 4 whole experts) is gathered whole at use: 4 bytes per element (bf16
  // params and grads; the FP8 weights train in bf16), per layer:
  //   attention: q_a 1536x7168 11,010,048 + q_b 24576x1536 37,748,736
  //     + kv_a 576x7168 4,128,768 + kv_b 32768x512 16,777,216
  //     + o 7168x16384 117,440,512 = 187,105,280 elements;
  //   MoE layer: + router 256x7168 1,835,008 + shared expert 3 x 2048x7168
  //     44,040,192 + 4 routed experts x 3 x 2048x7168 176,160,768
  //     = 409,141,248 elements, 1,636,564,992 bytes (layer 60);
  //   MTP layer 61: that + embed_tokens and shared_head.head 2 x 129280x7168
  //     1,853,358,080 + eh_proj 7168x14336 102,760,448 = 2,365,259,776
  //     elements, 9,461,039,104 bytes.
  // The most a unit's backward holds is layer 61's weights and grads with
  // layer 60's weights, prefetched: 9,461,039,104 + 1,636,564,992 / 2 =
  // 10,279,321,600 bytes (9.57 GiB).
  // (Dense layers 0-2: 187,105,280 + 3 x 18432x7168 = 583,467,008 elements;
  // the embedding and layer 0 are 4 x (926,679,040 + 583,467,008) =
  // 6,040,584,192; the norm and lm_head 3,706,716,160.)
  // With the MTP module trained (--mtp-layers 1).
  auto memory_of = [](const std::string& extra) {
    Result r = run_cli(
        args("plan --topology h100x256 --mesh fsdp:4,ep:64 --model deepseek-v3 "
             "--recipe megatron --zero 1 --format json "
             + extra));
    REQUIRE(r.code == 0);
    return test::parse_json_from(r.out, "memory")["memory"];
  };
  const json memory = memory_of("--mtp-layers 1");
  CHECK(memory["untrained_tensors"] == 0);
  CHECK(memory["per_device"]["gather_buffer"] == 10'279'321'600);
  REQUIRE(memory["gather_units"].size() == 2);
  CHECK(memory["gather_units"][0]
        == json({{"name", "model.layers.60"},
                 {"layer", 60},
                 {"bytes", 1'636'564'992}}));
  CHECK(memory["gather_units"][1]
        == json({{"name", "model.layers.61"},
                 {"layer", 61},
                 {"bytes", 9'461'039'104}}));
  CHECK(memory["gather_axes"] == json::array({"fsdp", "ep"}));
  // 256 experts (the largest index, 255, + 1) on 64 ranks; every rank holds
  // 4 experts of each layer alike, so rank 0 is the most loaded.
  CHECK(memory["placement"]["experts"] == 256);
  CHECK(memory["placement"]["expert_ranks"] == 64);
  CHECK(memory["placement"]["expert_rank"] == 0);
  // The FP8 weights train in bf16, and their weight_scale_inv tensors, one
  // per FP8 linear weight, are folded into them: 62 layers (61 and the MTP
  // layer) x 5 attention projections (q_a, q_b, kv_a, kv_b, o) + 3 dense
  // layers x 3 (gate, up, down) + 59 MoE layers x (256 routed + 1 shared
  // expert) x 3 = 310 + 9 + 45,489 = 45,808.
  CHECK(memory["fp8_param_dtype"] == "bf16");
  CHECK(memory["grad_dtype"] == "f32");
  CHECK(memory["scale_tensors"]["count"] == 45'808);
  CHECK(memory["scale_tensors"]["dropped"] == 45'808);

  // By default no MTP module trains (MaxText's mtp_num_layers 0, Megatron's
  // --mtp-num-layers unset): layer 61's 1,564 tensors (7 attention
  // weights and their 5 scales, 2 norms, the router and its bias, 256 x 3
  // expert weights and 3 shared ones, each with a scale, and enorm, hnorm,
  // eh_proj, embed_tokens, shared_head.norm, shared_head.head) are not
  // held, and the most is layer 0's backward with the embedding's weights:
  // 2,333,868,032 + 3,706,716,160 / 2 = 4,187,226,112 bytes. Their scales
  // go with them: 45,808 - (5 + 768 + 3) = 45,032.
  const json none = memory_of("");
  CHECK(none["untrained_tensors"] == 1'564);
  CHECK(none["per_device"]["gather_buffer"] == 4'187'226'112);
  REQUIRE(none["gather_units"].size() == 2);
  CHECK(none["gather_units"][0]["name"] == "model.embed_tokens.weight");
  CHECK(none["gather_units"][1]["bytes"] == 2'333'868'032);
  CHECK(none["scale_tensors"]["count"] == 45'032);
}

TEST_CASE("cli: plan names a preset by its name, a rules file by its path",
          "[cli][check]") {
  fs::path dir = temp_dir("plan_rules_names");
  const std::string rules = (dir / "rules.json").string();
  std::ofstream(rules)
      << R"({"rules": [{"pattern": ".*", "replicate": true}]})";
  auto plan = [&](const std::string& given, std::vector<std::string> more) {
    std::vector<std::string> args = test::args(
        "plan --devices 8 --mesh fsdp:8 --model gpt2 --rules {}", given);
    args.insert(args.end(), more.begin(), more.end());
    Result r = run_cli(args);
    INFO(r.err);
    CHECK(r.code == 0);
    return r.out;
  };
  // gpt2: 12 layers of 12 tensors (ln_1, attn.c_attn, attn.c_proj, ln_2,
  // mlp.c_fc, mlp.c_proj, each a weight and a bias) + wte, wpe and ln_f's
  // weight and bias = 148.
  CHECK_THAT(plan("maxtext", {}),
             Catch::StartsWith("plan: 148 tensors of --model gpt2 with rules "
                               "preset maxtext\n"));
  CHECK_THAT(plan(rules, {}),
             Catch::StartsWith("plan: 148 tensors of --model gpt2 with rules "
                               + rules + "\n"));
  CHECK_THAT(plan("maxtext", args("--explain wte.weight")),
             Catch::Contains("\n  mesh fsdp:8; rules preset maxtext\n"));
  CHECK_THAT(plan(rules, args("--explain wte.weight")),
             Catch::Contains("\n  mesh fsdp:8; rules " + rules + "\n"));
  CHECK_THAT(plan("maxtext", args("--format markdown")),
             Catch::Contains("148 tensors of `--model gpt2` with rules preset "
                             "`maxtext`; mesh fsdp:8 (8 devices).\n"));
  CHECK_THAT(plan(rules, args("--format markdown")),
             Catch::Contains("148 tensors of `--model gpt2` with rules `"
                             + rules + "`; mesh fsdp:8 (8 devices).\n"));
  // JSON keeps `source` (docs/output-schema.md: the rule set's source) and
  // adds the preset's name.
  const json preset = json::parse(plan("maxtext", args("--format json")));
  CHECK(preset["rules"] == json::parse(R"({"source":
      "configs/rules/maxtext.json", "preset": true, "name": "maxtext"})"));
  const json file = json::parse(plan(rules, args("--format json")));
  CHECK(file["rules"]
        == json({{"source", rules}, {"preset", false}, {"name", nullptr}}));
  const json explained =
      json::parse(plan("maxtext", args("--explain wte.weight --format json")));
  CHECK(explained["rules"]["name"] == "maxtext");
  fs::remove_all(dir);
}

TEST_CASE("cli: plan input errors exit 2 with a location", "[cli][check]") {
  fs::path dir = temp_dir("plan_errors");
  const std::string rules = (dir / "rules.json").string();
  auto plan = [&](std::vector<std::string> more) {
    std::vector<std::string> args =
        test::args("plan --devices 8 --mesh fsdp:8 --manifest {}",
                   examples("tiny-llama.json"));
    args.insert(args.end(), more.begin(), more.end());
    return run_cli(args);
  };
  Result preset = plan(args("--rules fsdp_tp"));
  CHECK(preset.code == 2);
  CHECK_THAT(
      preset.err,
      Catch::StartsWith("--rules: error: unknown rule preset \"fsdp_tp\""));

  std::ofstream(rules)
      << R"({"rules": [{"pattern": "mlp", "spec": ["tp", null]}]})";
  Result axis = plan(args("--rules {}", rules));
  CHECK(axis.code == 2);
  CHECK_THAT(axis.err, Catch::StartsWith(rules + ":/rules/0/spec/0: error:"));

  std::ofstream(rules)
      << R"({"rules": [{"pattern": "(?<=a)b", "replicate": true}]})";
  Result pattern = plan(args("--rules {}", rules));
  CHECK(pattern.code == 2);
  CHECK_THAT(pattern.err,
             Catch::StartsWith(rules + ":/rules/0/pattern: error:"));

  std::ofstream(rules)
      << R"({"rules": [{"pattern": "mlp", "spec": ["fsdp"]}]})";
  Result unmatched = plan(args("--rules {}", rules));
  CHECK(unmatched.code == 1);  // unmatched tensors are plan errors
  CHECK_THAT(unmatched.err, Catch::Contains("[rules.unmatched]"));

  Result no_mesh = run_cli(args("plan --model gpt2 --devices 8"));
  CHECK(no_mesh.code == 2);
  fs::remove_all(dir);
}
