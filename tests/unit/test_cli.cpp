// End-to-end tests through cli::run(), the code main() calls: exit codes,
// output documents, golden cases and the bad-input replay.

#include "support/check_invariants.hpp"
#include "support/test_support.hpp"

#include <shardplan/io.hpp>
#include <shardplan/report.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

using namespace shardplan;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using Result = test::CliResult;
using test::run_cli;

json parse_json(const std::string& text) {
  INFO(text);
  REQUIRE(json::accept(text));
  return json::parse(text);
}

// A fresh empty directory under the system temp folder.
fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("shardplan_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("cli: --help shows examples and exits 0", "[cli]") {
  Result r = run_cli({"--help"});
  CHECK(r.code == 0);
  CHECK(r.out.find("Examples:") != std::string::npos);
  CHECK(r.out.find("mesh") != std::string::npos);
  Result sub = run_cli({"mesh", "--help"});
  CHECK(sub.code == 0);
  CHECK(sub.out.find("--axis-names") != std::string::npos);
  CHECK(sub.out.find("shardplan mesh --mesh") != std::string::npos);
}

TEST_CASE("cli: the logger installed for a run does not outlive it", "[cli]") {
  auto before = spdlog::default_logger();
  Result r = run_cli({"mesh", "--mesh", "dp:2", "-v"});
  CHECK(r.code == 0);
  // The run's logger wrote to a stream that no longer exists.
  CHECK(spdlog::default_logger() == before);
}

TEST_CASE("cli: --version", "[cli]") {
  Result r = run_cli({"--version"});
  CHECK(r.code == 0);
  CHECK(r.out == std::string("shardplan ") + SHARDPLAN_VERSION + "\n");
}

TEST_CASE("cli: usage errors exit 2 with a message on stderr", "[cli]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {},
           {"frobnicate"},
           {"mesh"},
           {"mesh", "--mesh", "dp:2", "--format", "xml"},
           {"mesh", "--mesh", "dp:2", "--devices", "eight"},
           {"mesh", "--mesh", "dp:2", "--bogus"},
           {"mesh", "--mesh", "dp:2", "--color", "sometimes"},
           {"manifest"},
       }) {
    Result r = run_cli(args);
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find("shardplan: error: ") == 0);
  }
}

TEST_CASE("cli: mesh text output is a table and the device grid", "[cli]") {
  Result r = run_cli({"mesh", "--mesh", "dp:2,fsdp:-1,tp:2", "--devices", "8"});
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
          "[cli]") {
  Result r = run_cli({"mesh",
                      "--mesh",
                      "dp:4,tp:2:explicit",
                      "--devices",
                      "8",
                      "--dcn",
                      "dp:2",
                      "--format",
                      "json"});
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
    "[cli]") {
  Result text = run_cli({"mesh", "--mesh", "dp:2,tp:x", "--devices", "8"});
  CHECK(text.code == 2);
  CHECK(text.out.empty());
  CHECK(text.err
        == "--mesh:1:9: error: expected an integer axis size, got \"x\" [mesh.syntax]\n"
           "  dp:2,tp:x\n"
           "          ^\n");

  Result js = run_cli(
      {"mesh", "--mesh", "dp:2,tp:x", "--devices", "8", "--format", "json"});
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

TEST_CASE("cli: --color always colours diagnostics, never does not", "[cli]") {
  Result c = run_cli({"mesh", "--mesh", "dp:0", "--color", "always"});
  CHECK(c.err.find("\x1b[1;31merror:") != std::string::npos);
  Result n = run_cli({"mesh", "--mesh", "dp:0", "--color", "never"});
  CHECK(n.err.find('\x1b') == std::string::npos);
}

TEST_CASE("cli: -o writes the result atomically and prints nothing", "[cli]") {
  fs::path dir = temp_dir("output");
  fs::path file = dir / "mesh.json";
  {
    std::ofstream old(file);
    old << "old contents";
  }
  Result r = run_cli(
      {"mesh", "--mesh", "dp:2,tp:4", "--format", "json", "-o", file.string()});
  CHECK(r.code == 0);
  CHECK(r.out.empty());
  json j = parse_json(test::slurp(file.string()));
  CHECK(j["mesh"]["devices"] == 8);
  // No temporary file is left beside it.
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator{})
        == 1);

  // A bad input leaves the old output untouched.
  Result bad = run_cli({"mesh", "--mesh", "dp:0", "-o", file.string()});
  CHECK(bad.code == 2);
  CHECK(test::slurp(file.string()).find("\"devices\": 8") != std::string::npos);

  // An output in a missing directory is an error naming the path.
  std::string missing = (dir / "no" / "such" / "out.json").string();
  Result unwritable = run_cli({"mesh", "--mesh", "dp:2", "-o", missing});
  CHECK(unwritable.code == 2);
  CHECK(unwritable.err.find(missing) != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("cli: a missing manifest names its path", "[cli]") {
  Result r = run_cli({"manifest", "--manifest", "/nonexistent/dir/model.json"});
  CHECK(r.code == 2);
  CHECK(r.out.empty());
  CHECK(r.err.rfind("/nonexistent/dir/model.json: error: cannot read file", 0)
        == 0);
  CHECK(r.err.find("[io.read]") != std::string::npos);
}

TEST_CASE("cli: manifest JSON output reads back as the same manifest",
          "[cli]") {
  fs::path dir = temp_dir("manifest");
  fs::path in = dir / "in.json";
  {
    std::ofstream f(in);
    f << R"({"params": [
      {"name": "embed", "shape": [50257, 768], "dtype": "float32"},
      {"name": "h.0.ln.weight", "shape": [768], "dtype": "BF16", "logical_axes": ["embed"]},
      {"name": "step", "shape": [], "dtype": "int32"}]})";
  }
  Result r =
      run_cli({"manifest", "--manifest", in.string(), "--format", "json"});
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
        Result r = run_cli({"mesh", "--mesh", text, "--devices", "8"});
        CHECK(r.code == 2);
        CHECK(r.err.rfind("--mesh:1:", 0) == 0);
      } else if (kind == "manifest") {
        Result r = run_cli({"manifest", "--manifest", path});
        INFO(r.err);
        CHECK(r.code == 2);
        CHECK(r.err.rfind(path + ":", 0) == 0);
      } else if (kind == "specs") {
        Result r = run_cli({"check",
                            "--mesh",
                            "fsdp:2,tp:4",
                            "--devices",
                            "8",
                            "--manifest",
                            std::string(SHARDPLAN_SOURCE_DIR)
                                + "/configs/examples/tiny-llama.json",
                            "--specs",
                            path});
        INFO(r.err);
        CHECK(r.code == 2);
        // A spec written as a string is located as "FILE:/specs/NAME".
        CHECK(r.err.rfind(path + ":", 0) == 0);
      } else if (kind == "topology") {
        Result r = run_cli({"topology", "show", path});
        INFO(r.err);
        CHECK(r.code == 2);
        CHECK(r.err.rfind(path + ":", 0) == 0);
      } else if (kind == "topology_name") {
        std::string name = test::slurp(path);
        if (!name.empty() && name.back() == '\n') {
          name.pop_back();
        }
        Result r = run_cli({"mesh", "--topology", name, "--mesh", "dp:-1"});
        INFO(r.err);
        CHECK(r.code == 2);
        CHECK(r.err.rfind("--topology:", 0) == 0);
      } else if (kind == "plan") {
        Result r = run_cli({"plan",
                            "--manifest",
                            path,
                            "--devices",
                            "64",
                            "--mesh",
                            "dp:2,fsdp:4,tp:8",
                            "--rules",
                            "fsdp-tp",
                            "--recipe",
                            "adam",
                            "--zero",
                            "1"});
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

TEST_CASE("cli: topology list and show", "[cli][topology]") {
  Result list = run_cli({"topology", "list"});
  CHECK(list.code == 0);
  CHECK_THAT(list.out, Catch::Contains("v5p-128      tpu        64  4x4x4"));
  CHECK_THAT(list.out,
             Catch::Contains("h100x64      gpu        64  8 x 8 GPUs"));

  Result all = run_cli({"topology", "list", "--format", "json"});
  REQUIRE(all.code == 0);
  json doc = json::parse(all.out);
  CHECK(doc["command"] == "topology");
  CHECK(doc["topologies"].size() > 60);

  Result show = run_cli({"topology", "show", "2xv5e-256", "--format", "json"});
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
  // 1.97e14 and 8.19e11, one device per chip); each sourced.
  CHECK(t["figures"].size() == 8);
  CHECK(t["figures"]["bf16_flops_per_s_per_device"]["value"] == 1.97e14);
  CHECK(t["figures"]["hbm_bytes_per_s_per_device"]["value"] == 8.19e11);
  for (const auto& [name, figure] : t["figures"].items()) {
    INFO(name);
    CHECK_FALSE(figure["source"].get<std::string>().empty());
  }

  Result text = run_cli({"topology", "show", "h100x64"});
  CHECK(text.code == 0);
  CHECK_THAT(text.out, Catch::Contains("nvlink_bytes_per_s_per_gpu   4.5e+11"));

  Result unknown = run_cli({"topology", "show", "v9-8"});
  CHECK(unknown.code == 2);
  CHECK_THAT(unknown.err,
             Catch::StartsWith("--topology: error: unknown topology \"v9-8\""));
}

TEST_CASE("cli: mesh --topology", "[cli][topology]") {
  Result r =
      run_cli({"mesh", "--topology", "v5p-128", "--mesh", "fsdp:-1,tp:4"});
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
  Result both = run_cli(
      {"mesh", "--topology", "v5p-128", "--devices", "64", "--mesh", "a:64"});
  CHECK(both.code == 2);

  Result count =
      run_cli({"mesh", "--topology", "v5p-128", "--mesh", "dp:2,tp:4"});
  CHECK(count.code == 2);
  CHECK_THAT(count.err, Catch::Contains("--topology v5p-128 has 64 devices"));

  Result torus =
      run_cli({"mesh", "--topology", "v5p-128", "--mesh", "a:2,b:32"});
  CHECK(torus.code == 2);
  CHECK_THAT(torus.err, Catch::Contains("[topology.no-assignment]"));
  CHECK(run_cli({"mesh",
                 "--topology",
                 "v5p-128",
                 "--mesh",
                 "a:2,b:32",
                 "--allow-split-physical-axes"})
            .code
        == 0);

  // A topology file works wherever a name does.
  fs::path file = fs::temp_directory_path() / "shardplan-test-topology.json";
  {
    std::ofstream f(file);
    f << R"({"name": "lab", "chip": "v5e", "shape": [4, 4]})";
  }
  Result from_file = run_cli({"mesh",
                              "--topology",
                              file.string(),
                              "--mesh",
                              "a:16",
                              "--format",
                              "json"});
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

namespace {

std::string examples(const std::string& file) {
  return std::string(SHARDPLAN_SOURCE_DIR) + "/configs/examples/" + file;
}

std::vector<std::string> check_args(const std::string& specs,
                                    std::vector<std::string> more) {
  std::vector<std::string> args = {"check",
                                   "--mesh",
                                   "fsdp:2,tp:4",
                                   "--manifest",
                                   examples("tiny-llama.json"),
                                   "--specs",
                                   specs};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace

TEST_CASE("cli: check reports every fault, located, and exits 1",
          "[cli][check]") {
  const std::string bad = test::data_path("check/tiny-llama.bad-specs.json");
  Result r = run_cli(check_args(bad, {"--topology", "v5e-8"}));
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
  Result quiet = run_cli(check_args(bad, {"--topology", "v5e-8", "-q"}));
  CHECK(quiet.err == r.err);
}

TEST_CASE("cli: check --format github annotates the specs file",
          "[cli][check]") {
  const std::string bad = test::data_path("check/tiny-llama.bad-specs.json");
  Result r =
      run_cli(check_args(bad, {"--topology", "v5e-8", "--format", "github"}));
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
  Result e = run_cli({"check",
                      "--mesh",
                      "a:2",
                      "--manifest",
                      manifest,
                      "--specs",
                      specs,
                      "--format",
                      "github"});
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
  Result r = run_cli(check_args(syntax, {"--format", "github"}));
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
  Result s = run_cli(check_args(spec, {"--format", "github"}));
  CHECK(s.code == 2);
  CHECK(s.out
        == "::error file=" + spec
               + ",line=3,col=29,title=shardplan spec.syntax::tensor "
                 "\"lm_head.weight\": expected an axis name, None or a "
                 "tuple, got \",\"\n"
                 "shardplan check: 1 error, 0 warnings; bad input: nothing "
                 "was checked\n");

  // Markdown: the heading says so, and the table has the error, located.
  Result md = run_cli(check_args(syntax, {"--format", "markdown"}));
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
                                  {"--hbm", "0", "--format", "github"}));
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
  Result r = run_cli({"check",
                      "--devices",
                      "8",
                      "--mesh",
                      "fsdp:4,tp:2",
                      "--manifest",
                      manifest,
                      "--specs",
                      specs,
                      "--format",
                      "github"});
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
  Result ok =
      run_cli(check_args(examples("tiny-llama.specs.json"),
                         {"--topology", "v5e-8", "--format", "markdown"}));
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
                         {"--topology", "v5e-8", "--format", "markdown"}));
  CHECK(bad.code == 1);
  CHECK(bad.out.rfind("## shardplan check: :x: 6 errors, 0 warnings\n", 0)
        == 0);
  CHECK(bad.out.find("### Errors (6)\n\n| code | tensor | where | message |\n")
        != std::string::npos);
}

TEST_CASE("cli: check over capacity, and the device count", "[cli][check]") {
  // 5,386,752 bytes per device with adam and ZeRO-1 (the check_tiny_llama
  // golden); 4,000,000 bytes of HBM leave 3,600,000 usable.
  Result r = run_cli(check_args(
      examples("tiny-llama.specs.json"),
      {"--devices", "8", "--recipe", "adam", "--zero", "1", "--hbm", "4MB"}));
  CHECK(r.code == 1);
  // Located at where the HBM figure came from.
  CHECK(r.err.find("--hbm: error: the most loaded device needs 5386752 "
                   "bytes, over "
                   "the 3600000 bytes "
                   "usable (4000000 bytes of HBM with 10% kept free)")
        != std::string::npos);
  CHECK(r.out.find("DOES NOT FIT") != std::string::npos);
  Result headroom = run_cli(check_args(examples("tiny-llama.specs.json"),
                                       {"--devices",
                                        "8",
                                        "--recipe",
                                        "adam",
                                        "--zero",
                                        "1",
                                        "--hbm",
                                        "4MB",
                                        "--headroom",
                                        "0"}));
  CHECK(headroom.code == 1);  // 5,386,752 > 4,000,000 still
  Result fits = run_cli(check_args(examples("tiny-llama.specs.json"),
                                   {"--devices",
                                    "8",
                                    "--recipe",
                                    "adam",
                                    "--zero",
                                    "1",
                                    "--hbm",
                                    "5386752B",
                                    "--headroom",
                                    "0"}));
  CHECK(fits.code == 0);

  Result count = run_cli(
      check_args(examples("tiny-llama.specs.json"), {"--topology", "v5e-16"}));
  CHECK(count.code == 1);
  CHECK(count.err.find(
            "--mesh: error: number of devices 16 must equal the product of "
            "mesh_shape (2, 4) = 8; --topology v5e-16 has 16 devices "
            "[mesh.device-count]")
        != std::string::npos);

  Result size =
      run_cli(check_args(examples("tiny-llama.specs.json"), {"--hbm", "12XB"}));
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
    Result none =
        run_cli(check_args(examples("tiny-llama.specs.json"), {"--hbm", zero}));
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
    Result wrong =
        run_cli(check_args(examples("tiny-llama.specs.json"), {"--hbm", bad}));
    CHECK(wrong.code == 2);
    CHECK(wrong.err
          == fmt::format("--hbm: error: expected a byte size such as 80GB, "
                         "95GiB or 1073741824, got \"{}\" [cli.size]\n",
                         bad));
  }
  // One byte is a size (a device that fits nothing: exit 1, not 2).
  Result one =
      run_cli(check_args(examples("tiny-llama.specs.json"), {"--hbm", "1"}));
  CHECK(one.code == 1);
  CHECK_THAT(one.err, Catch::Contains("[memory.over-capacity]"));
}

TEST_CASE("cli: memory draws each category against HBM", "[cli][memory]") {
  // Total 5,386,752 bytes (the check_tiny_llama golden) against 10,773,504
  // of HBM: 50%, 20 of 40 marks.
  std::vector<std::string> args = check_args(examples("tiny-llama.specs.json"),
                                             {"--devices",
                                              "8",
                                              "--recipe",
                                              "adam",
                                              "--zero",
                                              "1",
                                              "--hbm",
                                              "10773504"});
  args[0] = "memory";
  Result r = run_cli(args);
  CHECK(r.code == 0);
  CHECK(r.out.find("total          5,386,752  5.14 MiB    [####################"
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
  Result r = run_cli(
      check_args(test::data_path("check/tiny-llama.bad-specs.json"),
                 {"--topology", "v5e-8", "--format", "json", "-o", out}));
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
  Result good = run_cli(
      check_args(examples("tiny-llama.specs.json"),
                 {"--topology", "v5e-8", "--format", "json", "-o", out}));
  CHECK(good.code == 0);
  Result again =
      run_cli(check_args(out, {"--topology", "v5e-8", "--format", "json"}));
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
      Result r = run_cli({"check",
                          "--mesh",
                          "dp:2,fsdp:4",
                          "--manifest",
                          manifest,
                          "--specs",
                          path});
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
  Result r = run_cli({"check",
                      "--mesh",
                      "dp:2,fsdp:4,tp:2",
                      "--devices",
                      "16",
                      "--manifest",
                      m,
                      "--specs",
                      s,
                      "--recipe",
                      recipes[static_cast<size_t>(pick(0, 3))],
                      "--zero",
                      std::to_string(pick(0, 3)),
                      "--hbm",
                      "1MB",
                      "--format",
                      "json"});
  INFO(manifest.dump() << "\n" << specs.dump() << "\n" << r.err);
  CHECK((r.code == 0 || r.code == 1));
  json doc = parse_json(r.out);
  for (const std::string& broken : test::check_invariants(doc)) {
    FAIL_CHECK("invariant: " << broken);
  }
  fs::remove_all(dir);
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

TEST_CASE("cli: built-in models and Hugging Face configs as manifests",
          "[cli][models]") {
  Result list = run_cli({"manifest", "--model", "list", "--format", "json"});
  CHECK(list.code == 0);
  json models = parse_json(list.out)["models"];
  REQUIRE(models.size() >= 10);
  // The issue's acceptance figures, through the command line.
  Result llama =
      run_cli({"manifest", "--model", "llama-3-8b", "--format", "json"});
  CHECK(llama.code == 0);
  json summary = parse_json(llama.out)["summary"];
  CHECK(summary["tensors"] == 291);
  CHECK(summary["parameters"] == 8030261248LL);
  CHECK(summary["bytes"] == 16060522496LL);

  Result unknown = run_cli({"manifest", "--model", "lama-3-8b"});
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
      run_cli({"manifest", "--from-hf-config", config, "--format", "json"});
  INFO(gpt2.err);
  CHECK(gpt2.code == 0);
  CHECK(parse_json(gpt2.out)["summary"]["parameters"] == 124439808);
  std::ofstream(config) << R"({"architectures": ["FalconForCausalLM"]})";
  Result falcon = run_cli({"manifest", "--from-hf-config", config});
  CHECK(falcon.code == 2);
  CHECK(falcon.err.find("[model.unknown-architecture]") != std::string::npos);
  fs::remove_all(dir);

  // check and memory take --model wherever --manifest goes.
  Result check = run_cli({"check",
                          "--model",
                          "gpt2",
                          "--devices",
                          "4",
                          "--mesh",
                          "dp:4",
                          "--specs",
                          examples("tiny-llama.specs.json"),
                          "--format",
                          "json"});
  CHECK(check.code == 1);  // tiny-llama's specs name none of gpt2's tensors
  json doc = parse_json(check.out);
  CHECK(doc["manifest"] == "--model gpt2");
  CHECK(doc["summary"]["parameters"] == 124439808);
  Result none = run_cli({"check",
                         "--devices",
                         "4",
                         "--mesh",
                         "dp:4",
                         "--specs",
                         examples("tiny-llama.specs.json")});
  CHECK(none.code == 2);
  CHECK(none.err.find("give --manifest PATH, --model NAME or "
                      "--from-hf-config FILE")
        != std::string::npos);
}

// ---------------------------------------------------------------------------
// plan

TEST_CASE("cli: plan groups tensors by rule and folds layers", "[cli][plan]") {
  Result r = run_cli({"plan",
                      "--topology",
                      "v5p-128",
                      "--mesh",
                      "fsdp:-1,tp:4",
                      "--model",
                      "llama-3-8b"});
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

TEST_CASE("cli: plan JSON is a specs file check accepts", "[cli][plan]") {
  fs::path dir = temp_dir("plan_roundtrip");
  const std::string plan_file = (dir / "plan.json").string();
  Result plan = run_cli({"plan",
                         "--topology",
                         "v5e-8",
                         "--mesh",
                         "fsdp:2,tp:4",
                         "--manifest",
                         examples("tiny-llama.json"),
                         "--rules",
                         "fsdp-tp",
                         "--format",
                         "json",
                         "-o",
                         plan_file});
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

  Result check = run_cli({"check",
                          "--topology",
                          "v5e-8",
                          "--mesh",
                          "fsdp:2,tp:4",
                          "--manifest",
                          examples("tiny-llama.json"),
                          "--specs",
                          plan_file,
                          "--format",
                          "json"});
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
          "[cli][plan]") {
  // One line per entry, tuple specs included (fsdp-tp puts ("fsdp", "ep")
  // on a dim when the mesh has ep), each line the entry itself: grep finds a
  // whole entry and a diff of two plans shows one line per changed tensor.
  Result plan = run_cli({"plan",
                         "--topology",
                         "v5e-8",
                         "--mesh",
                         "fsdp:2,ep:2,tp:2",
                         "--manifest",
                         examples("tiny-llama.json"),
                         "--rules",
                         "fsdp-tp",
                         "--format",
                         "json"});
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

TEST_CASE("cli: plan -v logs each phase's time on stderr only", "[cli][plan]") {
  const std::vector<std::string> args = {"plan",
                                         "--topology",
                                         "v5e-8",
                                         "--mesh",
                                         "fsdp:2,tp:4",
                                         "--manifest",
                                         examples("tiny-llama.json"),
                                         "--rules",
                                         "fsdp-tp"};
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

TEST_CASE("cli: plan --rules list and --explain", "[cli][plan]") {
  Result list = run_cli({"plan", "--rules", "list"});
  CHECK(list.code == 0);
  CHECK_THAT(list.out, Catch::StartsWith("fsdp  ("));
  CHECK_THAT(list.out, Catch::Contains("\nfsdp-tp  ("));
  CHECK_THAT(list.out, Catch::Contains("\nmaxtext  ("));

  Result explain = run_cli({"plan",
                            "--devices",
                            "8",
                            "--mesh",
                            "fsdp:8",
                            "--manifest",
                            examples("tiny-llama.json"),
                            "--rules",
                            "fsdp",
                            "--explain",
                            "model.layers.0.mlp.up_proj.weight"});
  INFO(explain.err);
  CHECK(explain.code == 0);
  CHECK_THAT(
      explain.out,
      Catch::StartsWith("model.layers.0.mlp.up_proj.weight: [688, 256] bf16"));
  CHECK_THAT(explain.out, Catch::Contains("result: "));

  Result json_explain = run_cli({"plan",
                                 "--devices",
                                 "8",
                                 "--mesh",
                                 "fsdp:8",
                                 "--manifest",
                                 examples("tiny-llama.json"),
                                 "--explain",
                                 "model.norm.weight",
                                 "--format",
                                 "json"});
  CHECK(json_explain.code == 0);
  json e = json::parse(json_explain.out);
  CHECK(e["tensor"]["name"] == "model.norm.weight");
  CHECK(e["result"]["spec"] == json::parse("[null]"));

  Result unknown = run_cli({"plan",
                            "--devices",
                            "8",
                            "--mesh",
                            "fsdp:8",
                            "--manifest",
                            examples("tiny-llama.json"),
                            "--explain",
                            "model.norm.weigth"});
  CHECK(unknown.code == 2);
  CHECK_THAT(unknown.err,
             Catch::Contains("model.norm.weight"));  // the nearest name
}

TEST_CASE("cli: --param-dtype and --grad-dtype", "[cli][memory]") {
  auto plan = [](std::vector<std::string> more) {
    std::vector<std::string> args = {"plan",
                                     "--devices",
                                     "8",
                                     "--mesh",
                                     "fsdp:8",
                                     "--manifest",
                                     examples("tiny-llama.json")};
    args.insert(args.end(), more.begin(), more.end());
    return run_cli(args);
  };
  Result typo = plan({"--param-dtype", "bf61", "--grad-dtype", "flaot32"});
  CHECK(typo.code == 2);
  CHECK(typo.out.empty());
  CHECK(typo.err
        == "--param-dtype: error: unknown dtype \"bf61\"; did you mean "
           "\"bf16\"? [cli.dtype]\n"
           "--grad-dtype: error: unknown dtype \"flaot32\"; did you mean "
           "\"float32\"? [cli.dtype]\n");
  Result integer = plan({"--param-dtype", "int8"});
  CHECK(integer.code == 2);
  CHECK_THAT(integer.err,
             Catch::StartsWith("--param-dtype: error: \"i8\" is not a "
                               "floating-point dtype"));

  // tiny-llama: 1,963,264 bf16 parameters over fsdp:8. With f32 weights
  // (MaxText's weight_dtype default) adam holds 4 + 4 + 8 bytes each.
  Result f32 = plan(
      {"--recipe", "adam", "--param-dtype", "float32", "--format", "json"});
  REQUIRE(f32.code == 0);
  const json memory = parse_json(f32.out)["memory"];
  CHECK(memory["param_dtype"] == "f32");
  CHECK(memory["grad_dtype"] == "param");
  CHECK(memory["fp8_param_dtype"].is_null());
  const int64_t params = memory["per_device"]["params"].get<int64_t>();
  CHECK(memory["per_device"]["grads"] == params);
  CHECK(memory["per_device"]["optimizer"] == 2 * params);
  Result unused = plan({"--recipe", "scaling-book", "--grad-dtype", "f32"});
  CHECK(unused.code == 0);
  CHECK_THAT(unused.err,
             Catch::StartsWith("--grad-dtype: warning: --grad-dtype f32 has "
                               "no effect: recipe scaling-book counts no "
                               "gradients"));
}

TEST_CASE("cli: deepseek-v3's gather buffer and FP8 weights (issue 17)",
          "[cli][memory]") {
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
  // The largest two consecutive units are layers 60 and 61:
  // 1,636,564,992 + 9,461,039,104 = 11,097,604,096 bytes (10.34 GiB).
  // (Dense layers 0-2: 187,105,280 + 3 x 18432x7168 = 583,467,008 elements;
  // the embedding and layer 0 are 4 x (926,679,040 + 583,467,008) =
  // 6,040,584,192; the norm and lm_head 3,706,716,160.)
  Result r = run_cli({"plan",
                      "--topology",
                      "h100x256",
                      "--mesh",
                      "fsdp:4,ep:64",
                      "--model",
                      "deepseek-v3",
                      "--recipe",
                      "megatron",
                      "--zero",
                      "1",
                      "--format",
                      "json"});
  REQUIRE(r.code == 0);
  // Only the memory object is read: the 91,991 tensors before it take
  // seconds to parse in a debug build.
  const size_t from = r.out.find("\n  \"memory\": ");
  const size_t to = r.out.find(",\n  \"step\": ");
  REQUIRE(from != std::string::npos);
  REQUIRE(to != std::string::npos);
  const json memory = parse_json(
      r.out.substr(from + 13, to - (from + 13)));  // after `  "memory": `
  CHECK(memory["per_device"]["gather_buffer"] == 11'097'604'096);
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
}

TEST_CASE("cli: plan names a preset by its name, a rules file by its path",
          "[cli][plan]") {
  fs::path dir = temp_dir("plan_rules_names");
  const std::string rules = (dir / "rules.json").string();
  std::ofstream(rules)
      << R"({"rules": [{"pattern": ".*", "replicate": true}]})";
  auto plan = [&](const std::string& given, std::vector<std::string> more) {
    std::vector<std::string> args = {"plan",
                                     "--devices",
                                     "8",
                                     "--mesh",
                                     "fsdp:8",
                                     "--model",
                                     "gpt2",
                                     "--rules",
                                     given};
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
  CHECK_THAT(plan("maxtext", {"--explain", "wte.weight"}),
             Catch::Contains("\n  mesh fsdp:8; rules preset maxtext\n"));
  CHECK_THAT(plan(rules, {"--explain", "wte.weight"}),
             Catch::Contains("\n  mesh fsdp:8; rules " + rules + "\n"));
  CHECK_THAT(plan("maxtext", {"--format", "markdown"}),
             Catch::Contains("148 tensors of `--model gpt2` with rules preset "
                             "`maxtext`; mesh fsdp:8 (8 devices).\n"));
  CHECK_THAT(plan(rules, {"--format", "markdown"}),
             Catch::Contains("148 tensors of `--model gpt2` with rules `"
                             + rules + "`; mesh fsdp:8 (8 devices).\n"));
  // JSON keeps `source` (docs/output-schema.md: the rule set's source) and
  // adds the preset's name.
  const json preset = json::parse(plan("maxtext", {"--format", "json"}));
  CHECK(preset["rules"] == json::parse(R"({"source":
      "configs/rules/maxtext.json", "preset": true, "name": "maxtext"})"));
  const json file = json::parse(plan(rules, {"--format", "json"}));
  CHECK(file["rules"]
        == json({{"source", rules}, {"preset", false}, {"name", nullptr}}));
  const json explained = json::parse(
      plan("maxtext", {"--explain", "wte.weight", "--format", "json"}));
  CHECK(explained["rules"]["name"] == "maxtext");
  fs::remove_all(dir);
}

TEST_CASE("cli: plan input errors exit 2 with a location", "[cli][plan]") {
  fs::path dir = temp_dir("plan_errors");
  const std::string rules = (dir / "rules.json").string();
  auto plan = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {"plan",
                                     "--devices",
                                     "8",
                                     "--mesh",
                                     "fsdp:8",
                                     "--manifest",
                                     examples("tiny-llama.json")};
    args.insert(args.end(), more.begin(), more.end());
    return run_cli(args);
  };
  Result preset = plan({"--rules", "fsdp_tp"});
  CHECK(preset.code == 2);
  CHECK_THAT(
      preset.err,
      Catch::StartsWith("--rules: error: unknown rule preset \"fsdp_tp\""));

  std::ofstream(rules)
      << R"({"rules": [{"pattern": "mlp", "spec": ["tp", null]}]})";
  Result axis = plan({"--rules", rules});
  CHECK(axis.code == 2);
  CHECK_THAT(axis.err, Catch::StartsWith(rules + ":/rules/0/spec/0: error:"));

  std::ofstream(rules)
      << R"({"rules": [{"pattern": "(?<=a)b", "replicate": true}]})";
  Result pattern = plan({"--rules", rules});
  CHECK(pattern.code == 2);
  CHECK_THAT(pattern.err,
             Catch::StartsWith(rules + ":/rules/0/pattern: error:"));

  std::ofstream(rules)
      << R"({"rules": [{"pattern": "mlp", "spec": ["fsdp"]}]})";
  Result unmatched = plan({"--rules", rules});
  CHECK(unmatched.code == 1);  // unmatched tensors are plan errors
  CHECK_THAT(unmatched.err, Catch::Contains("[rules.unmatched]"));

  Result no_mesh = run_cli({"plan", "--model", "gpt2", "--devices", "8"});
  CHECK(no_mesh.code == 2);
  fs::remove_all(dir);
}

TEST_CASE("cli: plan and check and memory lay the mesh out as mesh does",
          "[cli][topology]") {
  using Strings = std::vector<std::string>;
  // v5p-256 is 4x4x8 chips: tp:2 is no product of whole physical axes, so
  // JAX's create_device_mesh refuses fsdp:64,tp:2 unless axes may split.
  const Strings where = {"--topology", "v5p-256", "--mesh", "fsdp:64,tp:2"};
  Strings mesh_args = {"mesh"};
  mesh_args.insert(mesh_args.end(), where.begin(), where.end());
  Result mesh = run_cli(mesh_args);
  REQUIRE(mesh.code == 2);
  CHECK_THAT(mesh.err,
             Catch::StartsWith("--mesh:1:9: error: failed to find assignment "
                               "for logical_axis_index 1 of size 2"));
  CHECK_THAT(mesh.err, Catch::Contains("  fsdp:64,tp:2\n          ^"));
  const std::string specs = examples("tiny-llama.specs.json");
  for (const Strings& command : {Strings{"plan", "--model", "llama-3-8b"},
                                 Strings{"check",
                                         "--manifest",
                                         examples("tiny-llama.json"),
                                         "--specs",
                                         specs},
                                 Strings{"memory",
                                         "--manifest",
                                         examples("tiny-llama.json"),
                                         "--specs",
                                         specs}}) {
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

TEST_CASE("cli: flags mean the same in every command", "[cli]") {
  using Strings = std::vector<std::string>;
  const Strings on = {"--topology", "v5p-128", "--mesh", "fsdp:-1,tp:4"};
  auto with = [&](Strings args) {
    args.insert(args.end(), on.begin(), on.end());
    return args;
  };

  // memory --rules plans the specs as plan does: the same memory figures.
  Result plan = run_cli(with({"plan",
                              "--model",
                              "llama-3-8b",
                              "--recipe",
                              "adam",
                              "--format",
                              "json"}));
  Result memory = run_cli(with({"memory",
                                "--model",
                                "llama-3-8b",
                                "--rules",
                                "fsdp-tp",
                                "--recipe",
                                "adam",
                                "--format",
                                "json"}));
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
  Result neither = run_cli(with({"memory", "--model", "llama-3-8b"}));
  CHECK(neither.code == 2);
  CHECK_THAT(neither.err,
             Catch::StartsWith("--specs: error: give --specs FILE or --rules "
                               "FILE|PRESET"));
  Result both = run_cli(with({"memory",
                              "--model",
                              "llama-3-8b",
                              "--rules",
                              "fsdp",
                              "--specs",
                              examples("tiny-llama.specs.json")}));
  CHECK(both.code == 2);
  CHECK_THAT(both.err, Catch::Contains("give --specs or --rules, not both"));

  // --from-hf-config wherever a manifest is taken: a built-in model's own
  // config gives the same tensors as --model.
  const std::string gpt2 =
      std::string(SHARDPLAN_SOURCE_DIR) + "/configs/models/gpt2.json";
  Result by_name =
      run_cli(with({"plan", "--model", "gpt2", "--format", "json"}));
  Result by_config =
      run_cli(with({"plan", "--from-hf-config", gpt2, "--format", "json"}));
  REQUIRE(by_name.code == 0);
  REQUIRE(by_config.code == 0);
  CHECK(json::parse(by_config.out)["tensors"]
        == json::parse(by_name.out)["tensors"]);
  Result none = run_cli(with({"plan"}));
  CHECK(none.code == 2);
  CHECK_THAT(none.err,
             Catch::Contains("give --manifest PATH, --model NAME or "
                             "--from-hf-config FILE"));

  // reshard --mesh M stands for --from-mesh M --to-mesh M.
  const Strings one = {"reshard",
                       "--topology",
                       "v5e-32",
                       "--shape",
                       "2048,8192",
                       "--dtype",
                       "bf16",
                       "--from-spec",
                       "Y,None",
                       "--to-spec",
                       "None,None",
                       "--format",
                       "json"};
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
  Result typo = run_cli(
      {"plan", "--topolgy", "v5p-128", "--mesh", "fsdp:64", "--model", "gpt2"});
  CHECK(typo.code == 2);
  CHECK_THAT(typo.err, Catch::Contains("; did you mean --topology?"));
  Result far =
      run_cli({"mesh", "--mesh", "a:8", "--devices", "8", "--xyz", "3"});
  CHECK(far.code == 2);
  CHECK(far.err.find("did you mean") == std::string::npos);
}

// The command table feeds the spell-checker: a first argument that names no
// command gets the nearest command, or the list of them.
TEST_CASE("cli: an unknown command gets the nearest one", "[cli]") {
  Result typo = run_cli({"mesj", "--mesh", "dp:2", "--devices", "2"});
  CHECK(typo.code == 2);
  CHECK(typo.err
        == "shardplan: error: unknown command \"mesj\"; did you mean "
           "\"mesh\"?\nRun with --help for more information.\n");
  Result far = run_cli({"xyzzy"});
  CHECK(far.code == 2);
  CHECK_THAT(far.err,
             Catch::StartsWith("shardplan: error: unknown command \"xyzzy\"; "
                               "the commands are mesh, topology, manifest, "
                               "plan, check, memory, reshard, search\n"));
  Result none = run_cli({});
  CHECK(none.code == 2);
  CHECK_THAT(none.err,
             Catch::StartsWith("shardplan: error: A subcommand is required\n"));
}

// Every file a command reads goes by the limit of its kind (docs/cli.md,
// "Input files and their sizes"): a sparse file one byte over it is refused
// from its size, exit 2, before a byte is read; /dev/zero and a pipe are
// read one byte past the limit, then refused.
TEST_CASE("cli: every input file is refused over its kind's limit",
          "[cli][io]") {
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
  const Strings on = {"--devices", "8", "--mesh", "fsdp:2,tp:4"};
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
      {{"manifest", "--manifest", manifest},
       manifest,
       message(manifest, 1'073'741'825, "manifest", gib)},
      {{"manifest", "--manifest", (dir / "folder").string()},
       index,
       message(index, 1'073'741'825, "manifest", gib)},
      {{"manifest", "--from-hf-config", config},
       config,
       message(config,
               16'777'217,
               "Hugging Face config",
               "16 MiB (16777216 bytes)")},
      {with({"check", "--manifest", tiny, "--specs", specs}),
       specs,
       message(specs, 1'073'741'825, "specs file", gib)},
      {with({"memory", "--manifest", tiny, "--specs", specs}),
       specs,
       message(specs, 1'073'741'825, "specs file", gib)},
      {with({"plan", "--manifest", tiny, "--rules", rules}),
       rules,
       message(rules, 67'108'865, "rules file", "64 MiB (67108864 bytes)")},
      {{"mesh", "--topology", topology, "--mesh", "dp:-1"},
       topology,
       message(topology, 1'048'577, "topology file", "1 MiB (1048576 bytes)")},
      {{"topology", "show", topology},
       topology,
       message(topology, 1'048'577, "topology file", "1 MiB (1048576 bytes)")},
      {with({"reshard",
             "--manifest",
             tiny,
             "--from-specs",
             tiny_specs,
             "--to-specs",
             specs}),
       specs,
       message(specs, 1'073'741'825, "specs file", gib)},
      {with({"reshard",
             "--manifest",
             tiny,
             "--from-rules",
             rules,
             "--to-specs",
             tiny_specs}),
       rules,
       message(rules, 67'108'865, "rules file", "64 MiB (67108864 bytes)")},
      // /dev/zero never ends: 1,048,577 bytes read, then refused.
      {{"topology", "show", "/dev/zero"},
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

TEST_CASE("cli: paste-back formats refuse what MaxText cannot name", "[cli]") {
  // An axis without a MaxText name, and two axes with one MaxText name (sp
  // and cp are both MaxText's context): exit 2, nothing on stdout.
  const Result unnamed = run_cli({"plan",
                                  "--model",
                                  "llama-3-8b",
                                  "--topology",
                                  "v5p-128",
                                  "--mesh",
                                  "foo:4,fsdp:16",
                                  "--format",
                                  "maxtext"});
  CHECK(unnamed.code == 2);
  CHECK(unnamed.out.empty());
  CHECK(unnamed.err.substr(0, unnamed.err.find('\n'))
        == "--format maxtext: error: mesh axis \"foo\" has no MaxText name; "
           "name the axes as MaxText does (data, stage, fsdp, "
           "fsdp_transpose, sequence, context, context_autoregressive, "
           "tensor, tensor_transpose, tensor_sequence, expert, "
           "autoregressive) or dp, tp, ep, sp, cp, pp [maxtext.axis-name]");
  const Result twice = run_cli(
      {"mesh", "--devices", "8", "--mesh", "sp:2,cp:4", "--format", "maxtext"});
  CHECK(twice.code == 2);
  CHECK(twice.err.substr(0, twice.err.find('\n'))
        == "--format maxtext: error: mesh axis \"cp\" is MaxText's "
           "\"context\", as another axis of the mesh is [maxtext.axis-name]");
  // The same mesh as jax: every name is JAX's to take.
  const Result jax = run_cli(
      {"mesh", "--devices", "8", "--mesh", "sp:2,cp:4", "--format", "jax"});
  CHECK(jax.code == 0);
  CHECK(jax.out.find("MESH_AXES = (\"sp\", \"cp\")\n") != std::string::npos);
  CHECK(jax.out.find("return jax.make_mesh(MESH_SHAPE, MESH_AXES")
        != std::string::npos);
  // Without a topology there is no device order to check.
  CHECK(jax.out.find("DEVICE_IDS") == std::string::npos);
}
