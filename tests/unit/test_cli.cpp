// The command-line app through cli::run(), the code main() calls
// (src/cli/cli.cpp): help, usage errors and exit codes, output files, the
// golden cases, the bad-input replay, the docs' console examples and the
// flags every command shares. The commands' own tests are in
// test_cli_<file>.cpp, after the file of src/cli/ that runs them.

#include "support/check_invariants.hpp"
#include "support/test_support.hpp"

#include <shardplan/report.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

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

TEST_CASE("cli: --help shows examples and exits 0", "[cli]") {
  Result r = run_cli(args("--help"));
  CHECK(r.code == 0);
  CHECK(r.out.find("Examples:") != std::string::npos);
  CHECK(r.out.find("mesh") != std::string::npos);
  Result sub = run_cli(args("mesh --help"));
  CHECK(sub.code == 0);
  CHECK(sub.out.find("--axis-names") != std::string::npos);
  CHECK(sub.out.find("shardplan mesh --mesh") != std::string::npos);
}

TEST_CASE("cli: the logger installed for a run does not outlive it", "[cli]") {
  auto before = spdlog::default_logger();
  Result r = run_cli(args("mesh --mesh dp:2 -v"));
  CHECK(r.code == 0);
  // The run's logger wrote to a stream that no longer exists.
  CHECK(spdlog::default_logger() == before);
}

TEST_CASE("cli: --version", "[cli]") {
  Result r = run_cli(args("--version"));
  CHECK(r.code == 0);
  CHECK(r.out == std::string("shardplan ") + SHARDPLAN_VERSION + "\n");
}

TEST_CASE("cli: usage errors exit 2 with a message on stderr", "[cli]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           args(""),
           args("frobnicate"),
           args("mesh"),
           args("mesh --mesh dp:2 --format xml"),
           args("mesh --mesh dp:2 --devices eight"),
           args("mesh --mesh dp:2 --bogus"),
           args("mesh --mesh dp:2 --color sometimes"),
           args("manifest"),
       }) {
    Result r = run_cli(args);
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find("shardplan: error: ") == 0);
  }
}

TEST_CASE("cli: --color always colours diagnostics, never does not", "[cli]") {
  Result c = run_cli(args("mesh --mesh dp:0 --color always"));
  CHECK(c.err.find("\x1b[1;31merror:") != std::string::npos);
  Result n = run_cli(args("mesh --mesh dp:0 --color never"));
  CHECK(n.err.find('\x1b') == std::string::npos);
}

TEST_CASE("cli: -o writes the result atomically and prints nothing", "[cli]") {
  fs::path dir = temp_dir("output");
  fs::path file = dir / "mesh.json";
  {
    std::ofstream old(file);
    old << "old contents";
  }
  Result r =
      run_cli(args("mesh --mesh dp:2,tp:4 --format json -o {}", file.string()));
  CHECK(r.code == 0);
  CHECK(r.out.empty());
  json j = parse_json(test::slurp(file.string()));
  CHECK(j["mesh"]["devices"] == 8);
  // No temporary file is left beside it.
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator{})
        == 1);

  // A bad input leaves the old output untouched.
  Result bad = run_cli(args("mesh --mesh dp:0 -o {}", file.string()));
  CHECK(bad.code == 2);
  CHECK(test::slurp(file.string()).find("\"devices\": 8") != std::string::npos);

  // An output in a missing directory is an error naming the path.
  std::string missing = (dir / "no" / "such" / "out.json").string();
  Result unwritable = run_cli(args("mesh --mesh dp:2 -o {}", missing));
  CHECK(unwritable.code == 2);
  CHECK(unwritable.err.find(missing) != std::string::npos);
  fs::remove_all(dir);
}

// Golden cases: tests/golden/<case>/args.txt holds one argument per line
// ("{dir}" stands for the case's folder); expected.json is the JSON the
// command writes, and exit_code.txt (optional, default 0) its exit code.
// UPDATE_GOLDEN=1 rewrites expected.json; review such diffs like code.
TEST_CASE("cli: golden cases", "[cli][golden]") {
  fs::path root = fs::path(SHARDPLAN_SOURCE_DIR) / "tests" / "golden";
  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) {
      cases.push_back(entry.path());
    }
  }
  std::sort(cases.begin(), cases.end());
  REQUIRE_FALSE(cases.empty());
  for (const fs::path& dir : cases) {
    DYNAMIC_SECTION(dir.filename().string()) {
      std::vector<std::string> args;
      std::istringstream lines(test::slurp((dir / "args.txt").string()));
      for (std::string line; std::getline(lines, line);) {
        if (line.empty() || line[0] == '#') {
          continue;
        }
        for (size_t at = line.find("{dir}"); at != std::string::npos;
             at = line.find("{dir}")) {
          line.replace(at, 5, dir.string());
        }
        args.push_back(line);
      }
      int expected_code = 0;
      if (fs::exists(dir / "exit_code.txt")) {
        expected_code =
            std::stoi(test::slurp((dir / "exit_code.txt").string()));
      }
      Result r = run_cli(args);
      INFO(r.err);
      CHECK(r.code == expected_code);
      // Paths of the case's own files print as {dir}, as args.txt writes them.
      std::string out = r.out;
      const std::string dir_text = dir.string();
      for (size_t at = out.find(dir_text); at != std::string::npos;
           at = out.find(dir_text, at)) {
        out.replace(at, dir_text.size(), "{dir}");
      }
      json actual = parse_json(out);
      for (const std::string& broken : test::check_invariants(actual)) {
        FAIL_CHECK("invariant: " << broken);
      }
      actual.erase("shardplan_version");
      fs::path expected_path = dir / "expected.json";
      const char* update = std::getenv("UPDATE_GOLDEN");
      if (update != nullptr && std::string(update) == "1") {
        std::ofstream(expected_path) << actual.dump(2) << "\n";
      }
      json expected = parse_json(test::slurp(expected_path.string()));
      if (actual != expected) {
        FAIL_CHECK("expected:\n"
                   << expected.dump(2) << "\nactual:\n"
                   << actual.dump(2));
      }
    }
  }
}

// Paste-back golden files: tests/golden_paste/<case>/args.txt as for the
// golden cases; expected.py is --format jax's document, expected.yaml
// --format maxtext's, byte for byte but the version (written {version})
// and the command line (the args as given). Their content is checked
// against plan's JSON by tests/paste_back/check_paste_back.py (the
// paste-back.* tests); these pin the text. UPDATE_GOLDEN=1 rewrites them.
TEST_CASE("cli: paste-back golden files", "[cli][golden]") {
  const fs::path root =
      fs::path(SHARDPLAN_SOURCE_DIR) / "tests" / "golden_paste";
  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) {
      cases.push_back(entry.path());
    }
  }
  std::sort(cases.begin(), cases.end());
  REQUIRE(cases.size() >= 2);
  for (const fs::path& dir : cases) {
    std::vector<std::string> args;
    std::istringstream lines(test::slurp((dir / "args.txt").string()));
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty() && line[0] != '#') {
        args.push_back(line);
      }
    }
    for (const auto& [format, file] :
         {std::pair<std::string, std::string>{"jax", "expected.py"},
          {"maxtext", "expected.yaml"}}) {
      DYNAMIC_SECTION(dir.filename().string() << " " << format) {
        std::vector<std::string> with_format = args;
        with_format.insert(with_format.end(), {"--format", format});
        Result r = run_cli(with_format);
        INFO(r.err);
        REQUIRE(r.code == 0);
        std::string out = r.out;
        const std::string version(shardplan::shardplan_version());
        const size_t at = out.find("shardplan " + version);
        REQUIRE(at != std::string::npos);
        out.replace(at + 10, version.size(), "{version}");
        const fs::path expected_path = dir / file;
        const char* update = std::getenv("UPDATE_GOLDEN");
        if (update != nullptr && std::string(update) == "1") {
          std::ofstream(expected_path) << out;
        }
        CHECK(out == test::slurp(expected_path.string()));
      }
    }
  }
}

// Every file under tests/data/bad_inputs/ must give exit 2 and a located
// message, never a crash. mesh/*.txt hold mesh strings; manifest/* are
// manifest files; topology/* are topology files; topology_name/* hold
// --topology names; specs/* are specs files, given to `check`; plan/* are
// manifests given to `plan`.
TEST_CASE("cli: bad-input corpus replays to located errors",
          "[cli][bad-inputs]") {
  fs::path root = test::data_path("bad_inputs");
  std::vector<fs::path> inputs;
  std::map<std::string, size_t> per_kind;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.is_regular_file() && entry.path().filename() != "README.md") {
      inputs.push_back(entry.path());
      ++per_kind[entry.path().parent_path().filename().string()];
    }
  }
  // Each kind this test knows has inputs (an empty folder replays nothing).
  for (const char* kind : {"mesh", "manifest", "specs", "topology"}) {
    INFO(kind);
    CHECK(per_kind[kind] > 0);
  }
  std::sort(inputs.begin(), inputs.end());
  // Catch runs the test once per section, each run one of them.
  size_t replayed = 0;
  for (const fs::path& input : inputs) {
    std::string kind = input.parent_path().filename().string();
    std::string path = input.string();
    DYNAMIC_SECTION(kind << "/" << input.filename().string()) {
      ++replayed;
      if (kind == "mesh") {
        std::string text = test::slurp(path);
        if (!text.empty() && text.back() == '\n') {
          text.pop_back();
        }
        Result r = run_cli(args("mesh --mesh {} --devices 8", text));
        CHECK(r.code == 2);
        CHECK(r.err.rfind("--mesh:1:", 0) == 0);
      } else if (kind == "manifest") {
        Result r = run_cli(args("manifest --manifest {}", path));
        INFO(r.err);
        CHECK(r.code == 2);
        CHECK(r.err.rfind(path + ":", 0) == 0);
      } else if (kind == "specs") {
        Result r = run_cli(args(
            "check --mesh fsdp:2,tp:4 --devices 8 --manifest {} --specs {}",
            std::string(SHARDPLAN_SOURCE_DIR)
                + "/configs/examples/tiny-llama.json",
            path));
        INFO(r.err);
        CHECK(r.code == 2);
        // A spec written as a string is located as "FILE:/specs/NAME".
        CHECK(r.err.rfind(path + ":", 0) == 0);
      } else if (kind == "topology") {
        Result r = run_cli(args("topology show {}", path));
        INFO(r.err);
        CHECK(r.code == 2);
        CHECK(r.err.rfind(path + ":", 0) == 0);
      } else if (kind == "topology_name") {
        std::string name = test::slurp(path);
        if (!name.empty() && name.back() == '\n') {
          name.pop_back();
        }
        Result r = run_cli(args("mesh --topology {} --mesh dp:-1", name));
        INFO(r.err);
        CHECK(r.code == 2);
        CHECK(r.err.rfind("--topology:", 0) == 0);
      } else if (kind == "plan") {
        Result r = run_cli(
            args("plan --manifest {} --devices 64 --mesh dp:2,fsdp:4,tp:8 "
                 "--rules fsdp-tp --recipe adam --zero 1",
                 path));
        INFO(r.err);
        CHECK(r.code == 2);
        CHECK(r.err.find(path + ": error: ") != std::string::npos);
        CHECK(r.err.find("\nerror: ") == std::string::npos);
        CHECK(r.err.rfind("error: ", 0) != 0);
      } else {
        FAIL("unknown bad-input kind " << kind << "; add it to this test");
      }
    }
  }
  // Catch enters one section per run of the test case: each run replayed
  // exactly one input (none would mean nothing was tested).
  CHECK(replayed == 1);
}

namespace {

// Splits a command line as a POSIX shell would for plain words, 'single' and
// "double" quotes and a "# comment" (no escapes or expansions needed in our
// docs).
std::vector<std::string> shell_split(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote_char = 0;
  for (char c : line) {
    if (quote_char != 0) {
      if (c == quote_char) {
        quote_char = 0;
      } else {
        word += c;
      }
    } else if (c == '#' && !in_word) {
      break;  // a comment runs to the end of the line
    } else if (c == '\'' || c == '"') {
      quote_char = c;
      in_word = true;
    } else if (c == ' ') {
      if (in_word) {
        words.push_back(word);
        word.clear();
        in_word = false;
      }
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) {
    words.push_back(word);
  }
  return words;
}

// The lines of `text`, each with its '\n' (the last one may lack it).
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size() - 1);
    lines.push_back(text.substr(at, end + 1 - at));
    at = end + 1;
  }
  return lines;
}

bool is_fence(const std::string& line) {
  const size_t first = line.find_first_not_of(' ');
  return first != std::string::npos && line.compare(first, 3, "```") == 0;
}

bool is_command(const std::string& line) {
  const size_t first = line.find_first_not_of(' ');
  return first != std::string::npos
         && line.compare(first, 12, "$ shardplan ") == 0;
}

}  // namespace

TEST_CASE("cli: shell_split reads words, quotes and a comment", "[cli][docs]") {
  CHECK(shell_split("shardplan mesh --mesh 'a b' \"c d\"e  # f = 8")
        == std::vector<std::string>{
            "shardplan", "mesh", "--mesh", "a b", "c de"});
  // '#' inside a word or quotes is part of it.
  CHECK(shell_split("a#b '#c'") == std::vector<std::string>{"a#b", "#c"});
}

// Docs hold real output. A checked block is a ```console fence whose first
// line is "$ shardplan ...": the rest shows exactly what the binary prints
// (stdout, then stderr) and, when it exits other than 0, ends with
// "$ echo $?" and the exit code (docs/contributing.md). Every "$ shardplan"
// line in any fence of README.md and docs/*.md must open a checked block: an
// example in a plain fence, or a second command in a block, fails.
// UPDATE_DOCS=1 rewrites the checked blocks.
TEST_CASE("cli: console examples in the docs match the binary", "[cli][docs]") {
  fs::path root(SHARDPLAN_SOURCE_DIR);
  // Examples use paths relative to the repository root.
  fs::current_path(root);
  std::vector<fs::path> files = {root / "README.md"};
  for (const auto& entry : fs::directory_iterator(root / "docs")) {
    if (entry.path().extension() == ".md") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() > 1);
  const char* update_env = std::getenv("UPDATE_DOCS");
  bool update = update_env != nullptr && std::string(update_env) == "1";
  size_t commands = 0;  // "$ shardplan" lines in fences
  size_t checked = 0;   // of them, those that open a checked block
  for (const fs::path& file : files) {
    const std::vector<std::string> lines = lines_of(test::slurp(file.string()));
    std::string rewritten;
    for (size_t i = 0; i < lines.size();) {
      if (!is_fence(lines[i])) {
        rewritten += lines[i++];
        continue;
      }
      size_t close = i + 1;
      while (close < lines.size() && !is_fence(lines[close])) {
        ++close;
      }
      INFO(file.filename().string() << ":" << i + 1);
      REQUIRE(close < lines.size());  // every fence is closed
      const bool console_block = lines[i] == "```console\n" && close > i + 1
                                 && lines[i + 1].starts_with("$ shardplan ");
      if (!console_block) {
        for (size_t k = i + 1; k < close; ++k) {
          if (is_command(lines[k])) {
            ++commands;
            FAIL_CHECK(file.filename().string()
                       << ":" << k + 1 << ": an example not run by this test "
                       << "(make it the first line of a ```console block): "
                       << lines[k]);
          }
        }
        for (size_t k = i; k <= close; ++k) {
          rewritten += lines[k];
        }
        i = close + 1;
        continue;
      }
      ++commands;
      std::string command = lines[i + 1].substr(2);
      command.pop_back();  // '\n'
      std::string shown;
      for (size_t k = i + 2; k < close; ++k) {
        shown += lines[k];
      }
      std::vector<std::string> args = shell_split(command);
      args.erase(args.begin());  // "shardplan"
      Result r = run_cli(args);
      std::string actual = r.out + r.err;
      if (r.code != 0) {
        actual += fmt::format("$ echo $?\n{}\n", r.code);
      }
      INFO("$ " << command);
      CHECK(shown == actual);
      ++checked;
      rewritten += lines[i] + lines[i + 1] + actual + lines[close];
      i = close + 1;
    }
    if (update) {
      std::ofstream(file) << rewritten;
    }
  }
  CHECK(checked > 0);
  CHECK(checked == commands);
}

TEST_CASE("cli: the invariant checker catches broken documents",
          "[cli][golden]") {
  json doc =
      parse_json(test::slurp(std::string(SHARDPLAN_SOURCE_DIR)
                             + "/tests/golden/check_tiny_llama/expected.json"));
  doc["schema_version"] = 1;
  REQUIRE(test::check_invariants(doc).empty());
  json parts = doc;
  parts["memory"]["per_device"]["grads"] = 1;
  CHECK(test::check_invariants(parts)
        == std::vector<std::string>{
            "memory: per_device parts do not sum to total"});
  json twice = doc;
  twice["tensors"][0]["spec"] = {"tp", "tp"};
  CHECK(test::check_invariants(twice).at(0)
        == "model.embed_tokens.weight: axis tp used twice");
  json bytes = doc;
  bytes["tensors"][2]["bytes_per_device"] = 1;
  CHECK(test::check_invariants(bytes)
        == std::vector<std::string>{"model.layers.0.self_attn.q_proj.weight: "
                                    "bytes per device x devices != bytes x "
                                    "replicas"});
  // i4 takes half a byte per element, rounded up per shard: [392] over
  // (tp, fsdp), 8 shards of 49 elements, 25 bytes each (not 196 / 8).
  json nibbles = doc;
  nibbles["tensors"][2]["dtype"] = "i4";
  nibbles["tensors"][2]["shape"] = {392};
  nibbles["tensors"][2]["spec"] = json::parse(R"([["tp", "fsdp"]])");
  nibbles["tensors"][2]["bytes"] = 196;
  nibbles["tensors"][2]["bytes_per_device"] = 25;
  CHECK(test::check_invariants(nibbles).empty());
  nibbles["tensors"][2]["bytes_per_device"] = 24;
  CHECK(test::check_invariants(nibbles)
        == std::vector<std::string>{"model.layers.0.self_attn.q_proj.weight: "
                                    "bytes per device 24 for 49 elements of "
                                    "i4, expected 25"});
  json counts = doc;
  counts["summary"]["errors"] = 1;
  CHECK(test::check_invariants(counts)
        == std::vector<std::string>{
            "summary: counts differ from tensors[] and diagnostics[]"});
  json mesh = doc;
  mesh["mesh"]["devices"] = 16;
  CHECK_FALSE(test::check_invariants(mesh).empty());
}

TEST_CASE("cli: flags mean the same in every command", "[cli]") {
  using Strings = std::vector<std::string>;
  const Strings on = args("--topology v5p-128 --mesh fsdp:-1,tp:4");
  auto with = [&](Strings args) {
    args.insert(args.end(), on.begin(), on.end());
    return args;
  };

  // memory --rules plans the specs as plan does: the same memory figures.
  Result plan = run_cli(
      with(args("plan --model llama-3-8b --recipe adam --format json")));
  Result memory = run_cli(
      with(args("memory --model llama-3-8b --rules fsdp-tp --recipe adam "
                "--format json")));
  REQUIRE(plan.code == 0);
  REQUIRE(memory.code == 0);
  // memory's object adds by_dtype and largest to plan's.
  const json plan_memory = json::parse(plan.out)["memory"];
  const json memory_memory = json::parse(memory.out)["memory"];
  REQUIRE(plan_memory.size() >= 10);
  for (const auto& [key, value] : plan_memory.items()) {
    INFO(key);
    CHECK(memory_memory[key] == value);
  }
  CHECK(json::parse(memory.out)["rules"]["source"]
        == "configs/rules/fsdp-tp.json");
  CHECK(json::parse(memory.out)["rules"]["name"] == "fsdp-tp");
  Result neither = run_cli(with(args("memory --model llama-3-8b")));
  CHECK(neither.code == 2);
  CHECK_THAT(neither.err,
             Catch::StartsWith("--specs: error: give --specs FILE or --rules "
                               "FILE|PRESET"));
  Result both =
      run_cli(with(args("memory --model llama-3-8b --rules fsdp --specs {}",
                        examples("tiny-llama.specs.json"))));
  CHECK(both.code == 2);
  CHECK_THAT(both.err, Catch::Contains("give --specs or --rules, not both"));

  // --from-hf-config wherever a manifest is taken: a built-in model's own
  // config gives the same tensors as --model.
  const std::string gpt2 =
      std::string(SHARDPLAN_SOURCE_DIR) + "/configs/models/gpt2.json";
  Result by_name = run_cli(with(args("plan --model gpt2 --format json")));
  Result by_config =
      run_cli(with(args("plan --from-hf-config {} --format json", gpt2)));
  REQUIRE(by_name.code == 0);
  REQUIRE(by_config.code == 0);
  CHECK(json::parse(by_config.out)["tensors"]
        == json::parse(by_name.out)["tensors"]);
  Result none = run_cli(with(args("plan")));
  CHECK(none.code == 2);
  CHECK_THAT(none.err,
             Catch::Contains("give --manifest PATH, --model NAME or "
                             "--from-hf-config FILE"));

  // reshard --mesh M stands for --from-mesh M --to-mesh M.
  const Strings one = args(
      "reshard --topology v5e-32 --shape 2048,8192 --dtype bf16 "
      "--from-spec Y,None --to-spec None,None --format json");
  Strings shared = one;
  shared.insert(shared.end(), {"--mesh", "X:8,Y:4"});
  Strings apart = one;
  apart.insert(apart.end(), {"--from-mesh", "X:8,Y:4", "--to-mesh", "X:8,Y:4"});
  Result a = run_cli(shared);
  Result b = run_cli(apart);
  REQUIRE(a.code == 0);
  CHECK(a.out == b.out);
  Strings half = one;
  half.insert(half.end(), {"--to-mesh", "X:8,Y:4"});
  Result no_source = run_cli(half);
  CHECK(no_source.code == 2);
  CHECK_THAT(no_source.err,
             Catch::StartsWith("--from-mesh: error: no mesh for the source"));

  // A mistyped long flag gets the nearest one the command has.
  Result typo =
      run_cli(args("plan --topolgy v5p-128 --mesh fsdp:64 --model gpt2"));
  CHECK(typo.code == 2);
  CHECK_THAT(typo.err, Catch::Contains("; did you mean --topology?"));
  Result far = run_cli(args("mesh --mesh a:8 --devices 8 --xyz 3"));
  CHECK(far.code == 2);
  CHECK(far.err.find("did you mean") == std::string::npos);
}

// The command table feeds the spell-checker: a first argument that names no
// command gets the nearest command, or the list of them.
TEST_CASE("cli: an unknown command gets the nearest one", "[cli]") {
  Result typo = run_cli(args("mesj --mesh dp:2 --devices 2"));
  CHECK(typo.code == 2);
  CHECK(typo.err
        == "shardplan: error: unknown command \"mesj\"; did you mean "
           "\"mesh\"?\nRun with --help for more information.\n");
  Result far = run_cli(args("xyzzy"));
  CHECK(far.code == 2);
  CHECK_THAT(far.err,
             Catch::StartsWith("shardplan: error: unknown command \"xyzzy\"; "
                               "the commands are mesh, topology, manifest, "
                               "plan, check, memory, reshard, search\n"));
  Result none = run_cli(args(""));
  CHECK(none.code == 2);
  CHECK_THAT(none.err,
             Catch::StartsWith("shardplan: error: A subcommand is required\n"));
}

TEST_CASE("cli: paste-back formats refuse what MaxText cannot name", "[cli]") {
  // An axis without a MaxText name, and two axes with one MaxText name (sp
  // and cp are both MaxText's context): exit 2, nothing on stdout.
  const Result unnamed = run_cli(
      args("plan --model llama-3-8b --topology v5p-128 --mesh foo:4,fsdp:16 "
           "--format maxtext"));
  CHECK(unnamed.code == 2);
  CHECK(unnamed.out.empty());
  CHECK(unnamed.err.substr(0, unnamed.err.find('\n'))
        == "--format maxtext: error: mesh axis \"foo\" has no MaxText name; "
           "name the axes as base.yml's mesh_axes do (diloco, data, stage, "
           "fsdp, fsdp_transpose, context, context_usp_ulysses, "
           "context_autoregressive, tensor, tensor_sequence, expert, "
           "autoregressive) or dp, tp, ep, sp, cp, pp [maxtext.axis-name]");
  const Result twice =
      run_cli(args("mesh --devices 8 --mesh sp:2,cp:4 --format maxtext"));
  CHECK(twice.code == 2);
  CHECK(twice.err.substr(0, twice.err.find('\n'))
        == "--format maxtext: error: mesh axis \"cp\" is MaxText's "
           "\"context\", as another axis of the mesh is [maxtext.axis-name]");
  // The same mesh as jax: every name is JAX's to take.
  const Result jax =
      run_cli(args("mesh --devices 8 --mesh sp:2,cp:4 --format jax"));
  CHECK(jax.code == 0);
  CHECK(jax.out.find("MESH_AXES = (\"sp\", \"cp\")\n") != std::string::npos);
  CHECK(jax.out.find("return jax.make_mesh(MESH_SHAPE, MESH_AXES")
        != std::string::npos);
  // Without a topology there is no device order to check.
  CHECK(jax.out.find("DEVICE_IDS") == std::string::npos);
}
