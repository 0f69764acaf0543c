#pragma once

// Helpers shared by the unit tests: test data files, negative-case files,
// the inputs several test files build (meshes, topologies, models,
// presets), and runs of the command line, their arguments written as one
// string (args) and their output.

#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/models.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/spec.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/topology.hpp>

#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan::test {

// Absolute path of a file under tests/data/.
std::string data_path(std::string_view relative);
// Contents of a file; fails the current test when it cannot be read.
std::string slurp(const std::string& path);

// One case of a negative-case file. The file is a list of cases separated by
// lines "# -----". In a case:
//   # case: NAME            a name for the DYNAMIC_SECTION
//   # args: key=value ...   options for the code under test (free form)
//   # expect: CODE MESSAGE  the diagnostic code and the exact first line of
//                           the rendered diagnostic, without " [CODE]"
//   other lines             the input, joined with "\n" (no final newline)
struct NegativeCase {
  std::string name;
  std::map<std::string, std::string> args;
  std::string input;
  std::string expect_code;
  std::string expect_message;
  int line = 0;  // line of the case in the file, for failure messages
};
std::vector<NegativeCase> load_cases(std::string_view relative);

// The names the command line gives a mesh's inputs (--mesh, --dcn,
// --axis-names, --devices, --topology, --allow-split-physical-axes), so that
// tests of the core see the diagnostics a user sees.
MeshSources flag_sources();
// MeshOptions with flag_sources().
MeshOptions flag_options();
// LayoutOptions with flag_sources().
LayoutOptions flag_layout(bool allow_split_physical_axes = false);

// The mesh `text` on `devices` devices with the --dcn string `dcn`; fails
// the current test (showing the error) when it does not parse.
Mesh mesh_of(std::string_view text, int64_t devices, std::string dcn = "");

// The catalogue topology `name`; fails the current test when it does not
// resolve or reports anything.
Topology topology_of(std::string_view name);

// The built-in model `name`'s config (configs/models/NAME.json) as
// read_hf_config reads it from "NAME.json"; fails the current test when
// there is none or reading it reports anything.
ModelConfig model_config(std::string_view name);

// The built-in model `name` as a manifest, read once per test run
// (deepseek-v3 has 91,991 tensors); fails the current test when it does not
// read.
const Manifest& model(const std::string& name);

// The rule preset `name`; fails the current test when there is none, and
// checks that it reads as a preset without a warning.
RuleSet preset(const std::string& name);

// A manifest read from JSON text as "m.json", and a specs file read as
// "s.json"; fail the current test when the text has any problem (a tensor
// with no elements, which tests build on purpose, is none).
Manifest manifest_of(std::string_view json);
SpecsFile specs_of(std::string_view json);

// One run of the command line through cli::run(), the code main() calls.
struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};
// `args` without the program name.
CliResult run_cli(std::vector<std::string> args);

// `text` parsed as JSON; fails the current test, showing the text, when it
// is not JSON.
nlohmann::json parse_json(const std::string& text);

// A command's JSON from its top-level `key` on (`{"key": ..., the keys
// after it}`): a large plan's tensors before it (DeepSeek-V3's 91,991)
// take seconds to parse in a debug build.
nlohmann::json parse_json_from(const std::string& out, std::string_view key);

// A fresh empty folder shardplan_test_NAME under the system's temporary
// folder.
std::filesystem::path temp_dir(const std::string& name);

// The names in the folder `dir`, sorted.
std::vector<std::string> files_in(const std::string& dir);

// The path of configs/examples/FILE.
std::string examples(const std::string& file);

// A command line written as one string: args("plan --mesh fsdp:4 --model
// gpt2"). Words are split on spaces; 'single' or "double" quotes make one
// word of what they enclose, spaces included ('' is an empty word), and are
// dropped; there is no other shell syntax (no escapes, comments or
// expansions). Each "{}" in a word stands for the next of `values`, which is
// never split: computed words such as paths go there,
// args("check --manifest {} --specs {}", manifest, specs). A count of "{}"
// other than the count of values fails the current test.
std::vector<std::string> args_with(std::string_view line,
                                   std::vector<std::string> values);
template <typename... Values>
std::vector<std::string> args(std::string_view line, const Values&... values) {
  return args_with(line, std::vector<std::string>{values...});
}

// The first error in `diags` rendered without colour; empty when none.
std::string first_error(const Diagnostics& diags);
// The first line of render(d) without the trailing " [code]".
std::string first_line_without_code(const Diagnostic& d);

}  // namespace shardplan::test
