#include "support/test_support.hpp"

#include "cli/cli.hpp"

#include <shardplan/io.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace shardplan::test {

std::string data_path(std::string_view relative) {
  return std::string(SHARDPLAN_TEST_DATA_DIR) + "/" + std::string(relative);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    FAIL("cannot read test file " << path);
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CliResult run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "shardplan");
  std::ostringstream out;
  std::ostringstream err;
  CliResult r;
  r.code = cli::run(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

nlohmann::json parse_json(const std::string& text) {
  INFO(text);
  REQUIRE(nlohmann::json::accept(text));
  return nlohmann::json::parse(text);
}

nlohmann::json parse_json_from(const std::string& out, std::string_view key) {
  const size_t from = out.find(fmt::format("\n  \"{}\": ", key));
  REQUIRE(from != std::string::npos);
  return parse_json("{" + out.substr(from));
}

std::filesystem::path temp_dir(const std::string& name) {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("shardplan_test_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string examples(const std::string& file) {
  return std::string(SHARDPLAN_SOURCE_DIR) + "/configs/examples/" + file;
}

std::vector<std::string> args_with(std::string_view line,
                                   std::vector<std::string> values) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (char c : line) {
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        word += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
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
  if (quote != 0) {
    FAIL("args: an unclosed " << quote << " in: " << line);
  }
  if (in_word) {
    words.push_back(word);
  }
  size_t used = 0;
  for (std::string& w : words) {
    for (size_t at = w.find("{}"); at != std::string::npos;
         at = w.find("{}", at)) {
      if (used == values.size()) {
        FAIL("args: more {} than values in: " << line);
      }
      w.replace(at, 2, values[used]);
      at += values[used].size();
      ++used;
    }
  }
  if (used != values.size()) {
    FAIL("args: " << values.size() << " values for " << used
                  << " {} in: " << line);
  }
  return words;
}

std::vector<NegativeCase> load_cases(std::string_view relative) {
  std::string text = slurp(data_path(relative));
  std::vector<NegativeCase> cases;
  NegativeCase current;
  std::vector<std::string> input_lines;
  bool any = false;
  auto flush = [&]() {
    if (any) {
      std::string joined;
      for (size_t i = 0; i < input_lines.size(); ++i) {
        joined += (i ? "\n" : "") + input_lines[i];
      }
      current.input = joined;
      cases.push_back(current);
    }
    current = NegativeCase{};
    input_lines.clear();
    any = false;
  };
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.rfind("# -----", 0) == 0) {
      flush();
      continue;
    }
    if (!any) {
      current.line = line_no;
    }
    if (line.rfind("# case:", 0) == 0) {
      current.name = line.substr(7);
      current.name.erase(0, current.name.find_first_not_of(' '));
      any = true;
    } else if (line.rfind("# args:", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string word;
      while (words >> word) {
        auto eq = word.find('=');
        current.args[word.substr(0, eq)] =
            eq == std::string::npos ? "" : word.substr(eq + 1);
      }
      any = true;
    } else if (line.rfind("# expect:", 0) == 0) {
      std::string rest = line.substr(9);
      rest.erase(0, rest.find_first_not_of(' '));
      auto space = rest.find(' ');
      current.expect_code = rest.substr(0, space);
      current.expect_message =
          space == std::string::npos ? "" : rest.substr(space + 1);
      any = true;
    } else if (line.rfind("#", 0) == 0 && !any && input_lines.empty()) {
      // a comment before the case starts
    } else {
      input_lines.push_back(line);
      any = true;
    }
  }
  flush();
  if (cases.empty()) {
    FAIL("no cases in " << relative);
  }
  return cases;
}

MeshSources flag_sources() {
  return MeshSources{"--mesh",
                     "--dcn",
                     "--axis-names",
                     "--devices",
                     "--topology",
                     "--allow-split-physical-axes"};
}

MeshOptions flag_options() {
  MeshOptions options;
  options.sources = flag_sources();
  return options;
}

LayoutOptions flag_layout(bool allow_split_physical_axes) {
  return LayoutOptions{allow_split_physical_axes, flag_sources(), {}, false};
}

Mesh mesh_of(std::string_view text, int64_t devices, std::string dcn) {
  MeshOptions o = flag_options();
  o.num_devices = devices;
  o.dcn = std::move(dcn);
  Diagnostics diags;
  auto m = parse_mesh(text, o, diags);
  INFO(first_error(diags));
  REQUIRE(m);
  return *m;
}

Topology topology_of(std::string_view name) {
  Diagnostics diags;
  std::optional<Topology> t = resolve_topology(name, {}, diags);
  INFO(name << ": " << first_error(diags));
  REQUIRE(t);
  REQUIRE(diags.items().empty());
  return *t;
}

ModelConfig model_config(std::string_view name) {
  const std::optional<std::string_view> text = builtin_model_config(name);
  INFO(name);
  REQUIRE(text);
  Diagnostics diags;
  std::optional<ModelConfig> config =
      read_hf_config(*text, std::string(name) + ".json", diags);
  INFO(first_error(diags));
  REQUIRE(config);
  REQUIRE(diags.items().empty());
  return *config;
}

const Manifest& model(const std::string& name) {
  static std::map<std::string, Manifest> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    Diagnostics diags;
    std::optional<Manifest> m = read_builtin_model(name, "--model", diags);
    INFO(test::first_error(diags));
    REQUIRE(m);
    it = cache.emplace(name, *std::move(m)).first;
  }
  return it->second;
}

RuleSet preset(const std::string& name) {
  Diagnostics diags;
  std::optional<RuleSet> rules =
      read_rules_preset(name, Location::of("--rules"), diags);
  INFO(test::first_error(diags));
  REQUIRE(rules);
  CHECK(rules->preset);
  CHECK(diags.items().empty());  // a preset reads without a warning
  return *std::move(rules);
}

Manifest manifest_of(std::string_view json) {
  Diagnostics diags;
  std::optional<Manifest> m = read_manifest(json, "m.json", diags);
  INFO(first_error(diags));
  REQUIRE(m);
  // Tests of empty tensors build them on purpose: that warning only.
  for (const Diagnostic& d : diags.items()) {
    REQUIRE(d.code == "manifest.empty-tensor");
  }
  return std::move(*m);
}

SpecsFile specs_of(std::string_view json) {
  Diagnostics diags;
  std::optional<SpecsFile> s = read_specs(json, "s.json", diags);
  INFO(first_error(diags));
  REQUIRE(s);
  REQUIRE(diags.items().empty());
  return std::move(*s);
}

std::string first_error(const Diagnostics& diags) {
  for (const Diagnostic& d : diags.items()) {
    if (d.severity == Severity::error) {
      return render(d);
    }
  }
  return "";
}

std::string first_line_without_code(const Diagnostic& d) {
  std::string r = render(d);
  r = r.substr(0, r.find('\n'));
  std::string suffix = " [" + d.code + "]";
  if (r.size() >= suffix.size()
      && r.compare(r.size() - suffix.size(), suffix.size(), suffix) == 0) {
    r.erase(r.size() - suffix.size());
  }
  return r;
}

}  // namespace shardplan::test
