#include "io/files.hpp"
#include "io/json.hpp"
#include "support/test_support.hpp"

#include <shardplan/io.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace shardplan;

namespace {

const InputLimit k_manifest_limit = input_limit(InputKind::manifest);

// Reads a manifest that must be valid.
// Reads a manifest that must be read with no diagnostics but `empty`
// warnings about tensors with no elements [manifest.empty-tensor].
Manifest manifest_ok(std::string_view text, size_t empty = 0) {
  Diagnostics diags;
  std::optional<Manifest> manifest = read_manifest(text, "m.json", diags);
  INFO("text: " << text);
  INFO(test::first_error(diags));
  REQUIRE(manifest.has_value());
  REQUIRE(diags.items().size() == empty);
  for (const Diagnostic& d : diags.items()) {
    CHECK(d.code == "manifest.empty-tensor");
  }
  return std::move(*manifest);
}

// Reads a manifest that must fail; returns the first error.
Diagnostic manifest_error(std::string_view text) {
  Diagnostics diags;
  std::optional<Manifest> manifest = read_manifest(text, "m.json", diags);
  INFO("text: " << text);
  CHECK_FALSE(manifest.has_value());
  REQUIRE(diags.error_count() >= 1);
  return diags.items()[0];
}

SpecsFile specs_ok(std::string_view text) {
  Diagnostics diags;
  std::optional<SpecsFile> specs = read_specs(text, "s.json", diags);
  INFO("text: " << text);
  INFO(test::first_error(diags));
  REQUIRE(specs.has_value());
  REQUIRE(diags.items().empty());
  return std::move(*specs);
}

// A spec the reader keeps as invalid (a nested tuple: a fault of the spec, not
// of the file), or a file it refuses.
bool refused(const std::optional<SpecsFile>& specs) {
  return !specs
         || std::any_of(specs->specs.begin(),
                        specs->specs.end(),
                        [](const NamedSpec& s) { return !s.valid; });
}

Diagnostic specs_error(std::string_view text) {
  Diagnostics diags;
  std::optional<SpecsFile> specs = read_specs(text, "s.json", diags);
  INFO("text: " << text);
  CHECK(refused(specs));
  REQUIRE(diags.error_count() >= 1);
  return diags.items()[0];
}

std::string first_line(const Diagnostic& d) {
  return test::first_line_without_code(d);
}

PartitionSpec spec_of(std::initializer_list<std::vector<std::string>> dims) {
  PartitionSpec spec;
  for (const auto& axes : dims) {
    spec.dims.push_back(DimSharding{axes});
  }
  return spec;
}

// A fresh empty folder under the system's temporary folder.
std::string temp_dir() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "shardplan-io-XXXXXX").string();
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

// ---------------------------------------------------------------------------
// Manifests: the native form.

TEST_CASE("io: reads a native manifest in file order", "[io][manifest]") {
  Manifest m = manifest_ok(R"({"params": [
    {"name": "model.layers.0.mlp.up_proj.weight", "shape": [14336, 4096],
     "dtype": "bf16", "logical_axes": ["mlp", "embed"]},
    {"name": "b", "shape": [3], "dtype": "float32"},
    {"name": "a", "dtype": "F8_E4M3", "shape": [2, 5],
     "logical_axes": [null, "embed"]}
  ], "format": {"version": [1, 2]}})");
  REQUIRE(m.size() == 3);
  CHECK(m.source == "m.json");
  const Tensor& up = m.tensors()[0];
  CHECK(up.name == "model.layers.0.mlp.up_proj.weight");
  CHECK(up.shape == std::vector<int64_t>{14336, 4096});
  CHECK(up.dtype == DType::bf16);
  REQUIRE(up.logical_axes.has_value());
  CHECK(*up.logical_axes == LogicalAxes{"mlp", "embed"});
  CHECK(up.num_elements == 58720256);  // 14336 * 4096
  CHECK(up.num_bytes == 117440512);    // x 2 bytes
  CHECK(up.pointer() == "/params/0");
  // Order is the file's, not sorted: "b" before "a".
  CHECK(m.tensors()[1].name == "b");
  CHECK(m.tensors()[1].dtype == DType::f32);
  CHECK_FALSE(m.tensors()[1].logical_axes.has_value());
  CHECK(m.tensors()[1].num_bytes == 12);
  CHECK(m.tensors()[2].name == "a");
  CHECK(m.tensors()[2].dtype == DType::f8_e4m3);
  CHECK(m.tensors()[2].num_bytes == 10);
  CHECK(*m.tensors()[2].logical_axes == LogicalAxes{std::nullopt, "embed"});
  CHECK(m.tensors()[2].pointer() == "/params/2");
  CHECK(m.total_bytes() == 117440512 + 12 + 10);
  CHECK(m.find("a") == &m.tensors()[2]);
}

TEST_CASE("io: \"params\" anywhere among the top-level keys",
          "[io][manifest]") {
  // A key before "params" that looks like a safetensors entry must not
  // switch the reader to the safetensors form.
  Manifest m = manifest_ok(R"({"x": {"dtype": "BF16", "shape": [1],
    "data_offsets": [0, 2]}, "params": [{"name": "w", "shape": [2],
    "dtype": "bf16"}], "z": null})");
  REQUIRE(m.size() == 1);
  CHECK(m.tensors()[0].name == "w");
  // An invalid value before "params" is fine: only "params" is read.
  m = manifest_ok(R"({"version": 3, "params": [{"name": "w", "shape": [],
    "dtype": "i8"}]})");
  CHECK(m.tensors()[0].num_bytes == 1);
}

TEST_CASE("io: scalars and zero-size dims", "[io][manifest]") {
  Manifest m = manifest_ok(R"({"params": [
    {"name": "step", "shape": [], "dtype": "i32"},
    {"name": "empty", "shape": [0, 4096], "dtype": "bf16"},
    {"name": "bits", "shape": [3], "dtype": "int4"}]})",
                           1);
  CHECK(m.tensors()[0].rank() == 0);
  CHECK(m.tensors()[0].num_elements == 1);  // a scalar has one element
  CHECK(m.tensors()[0].num_bytes == 4);
  CHECK(m.tensors()[1].num_elements == 0);
  CHECK(m.tensors()[1].num_bytes == 0);
  CHECK(m.tensors()[2].num_bytes == 2);  // ceil(3 * 4 bits / 8)
  // A zero dim makes the tensor empty however large the others are.
  m = manifest_ok(R"({"params": [{"name": "z", "shape":
    [0, 9223372036854775807, 9223372036854775807], "dtype": "f64"}]})",
                  1);
  CHECK(m.tensors()[0].num_bytes == 0);
}

TEST_CASE("io: a tensor with no elements is a warning at its dim",
          "[io][manifest]") {
  // Line 2, column 3 is where the tensor's object starts.
  Diagnostics diags;
  std::optional<Manifest> m = read_manifest(
      "{\"params\": [\n"
      "  {\"name\": \"a\", \"shape\": [8, 0], \"dtype\": \"bf16\"},\n"
      "  {\"name\": \"b\", \"shape\": [8], \"dtype\": \"bf16\"}]}",
      "m.json",
      diags);
  REQUIRE(m);
  REQUIRE(diags.items().size() == 1);
  const Diagnostic& d = diags.items()[0];
  CHECK(d.severity == Severity::warning);
  CHECK(d.code == "manifest.empty-tensor");
  CHECK(d.location.source == "m.json");
  CHECK(d.location.pointer == "/params/0/shape/1");
  CHECK(d.location.line == 2);
  CHECK(d.location.column == 3);
  CHECK(d.tensor == "a");
  CHECK(d.dim == 1);

  // A safetensors header: the tensor's key, then shape/DIM.
  diags = Diagnostics();
  m = read_manifest(
      R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})",
      "h.json",
      diags);
  REQUIRE(m);
  REQUIRE(diags.items().size() == 1);
  CHECK(diags.items()[0].location.pointer == "/w/shape/0");

  // A text first read as a header, then again in the native form once
  // "params" turns up, warns about what the native form holds only: "a" is
  // not a tensor of the manifest.
  diags = Diagnostics();
  m = read_manifest(
      R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
          "params": [{"name": "b", "shape": [0, 2], "dtype": "f32"}]})",
      "m.json",
      diags);
  REQUIRE(m);
  REQUIRE(m->size() == 1);
  REQUIRE(diags.items().size() == 1);
  CHECK(diags.items()[0].tensor == "b");
  CHECK(diags.items()[0].location.pointer == "/params/0/shape/0");
}

TEST_CASE("io: dims in every spelling JSON allows", "[io][manifest]") {
  // Plain shapes take a shortcut; everything else the full reader. Both
  // must agree.
  Manifest m = manifest_ok(
      "{\"params\": [\n"
      "{\"name\": \"a\", \"shape\": [], \"dtype\": \"f32\"},\n"
      "{\"name\": \"b\", \"shape\": [ ], \"dtype\": \"f32\"},\n"
      "{\"name\": \"c\", \"shape\":[1,2,3], \"dtype\": \"f32\"},\n"
      "{\"name\": \"d\", \"shape\": [ 0 ,\t\n 7168\r\n ], \"dtype\": "
      "\"f32\"},\n"
      "{\"name\": \"e\", \"shape\": [999999999999999999], \"dtype\": \"u8\"},\n"
      "{\"name\": \"g\", \"shape\": [0, 9223372036854775807], "
      "\"dtype\": \"f32\"}]}",
      2);
  CHECK(m.tensors()[0].shape.empty());
  CHECK(m.tensors()[1].shape.empty());
  CHECK(m.tensors()[2].shape == std::vector<int64_t>{1, 2, 3});
  CHECK(m.tensors()[3].shape == std::vector<int64_t>{0, 7168});
  CHECK(m.tensors()[4].shape == std::vector<int64_t>{999999999999999999});
  CHECK(m.tensors()[5].shape == std::vector<int64_t>{0, 9223372036854775807});
  CHECK(m.tensors()[5].num_elements == 0);
  m = manifest_ok(
      R"({"params": [{"name": "f", "shape": [9223372036854775807], "dtype": "u8"}]})");
  CHECK(m.tensors()[0].shape == std::vector<int64_t>{9223372036854775807});

  // "-0" is 0; a negative dim is read, then refused by Manifest::add.
  m = manifest_ok(
      R"({"params": [{"name": "z", "shape": [-0], "dtype": "f32"}]})", 1);
  CHECK(m.tensors()[0].shape == std::vector<int64_t>{0});
  Diagnostic d = manifest_error(
      R"({"params": [{"name": "n", "shape": [4, -3], "dtype": "f32"}]})");
  CHECK(d.location.pointer == "/params/0/shape/1");
  CHECK(d.code == "manifest.bad-dim");

  // Not plain: the full reader reports, at the dim.
  for (const char* shape : {"[1.0]",
                            "[1e3]",
                            "[2, 1.5]",
                            "[true]",
                            "[\"4\"]",
                            "[[4]]",
                            "[9223372036854775808]",
                            "[4, null]"}) {
    d = manifest_error(fmt::format(
        R"({{"params": [{{"name": "x", "shape": {}, "dtype": "f32"}}]}})",
        shape));
    INFO(shape);
    CHECK(d.location.pointer.starts_with("/params/0/shape"));
    CHECK(d.location.line == 1);
  }
  // Syntax errors in a shape are syntax errors.
  for (const char* shape : {"[01]", "[-]", "[1,]", "[1 2]", "[,1]", "[1"}) {
    d = manifest_error(fmt::format(
        R"({{"params": [{{"name": "x", "shape": {}, "dtype": "f32"}}]}})",
        shape));
    INFO(shape);
    CHECK(d.code == "json.syntax");
  }
}

TEST_CASE("io: the largest int64 dim, and overflow", "[io][manifest]") {
  // 2^63 - 1 elements of one byte fit ...
  Manifest m = manifest_ok(R"({"params": [{"name": "x",
    "shape": [9223372036854775807], "dtype": "u8"}]})");
  CHECK(m.tensors()[0].num_bytes == INT64_MAX);
  // ... but not of two bytes; Manifest::add names the tensor.
  Diagnostic d = manifest_error(R"({"params": [{"name": "x",
    "shape": [9223372036854775807], "dtype": "bf16"}]})");
  CHECK(d.code == "manifest.overflow");
  CHECK(first_line(d).starts_with("m.json:/params/0: error: "));
  CHECK(d.tensor == std::optional<std::string>("x"));
  // 2^63 itself is not an int64.
  d = manifest_error(R"({"params": [{"name": "x",
    "shape": [4, 9223372036854775808], "dtype": "u8"}]})");
  CHECK(d.code == "manifest.bad-dim");
  CHECK(first_line(d)
        == "m.json:/params/0/shape/1: error: dim size 9223372036854775808 "
           "does not fit in int64 (max 9223372036854775807)");
}

TEST_CASE("io: the pointer of the 13th tensor's 2nd dim", "[io][manifest]") {
  std::string text = R"({"params": [)";
  for (int i = 0; i < 12; ++i) {
    text += R"({"name": "t)" + std::to_string(i)
            + R"(", "shape": [1, 2], "dtype": "f32"}, )";
  }
  text += R"({"name": "t12", "shape": [1, 1e3], "dtype": "f32"}]})";
  Diagnostic d = manifest_error(text);
  CHECK(d.code == "manifest.bad-dim");
  CHECK(d.location.pointer == "/params/12/shape/1");
  CHECK(first_line(d)
        == "m.json:/params/12/shape/1: error: expected an integer dim size, "
           "got 1e3");
  // The value's line and column come along, for the caret.
  CHECK(d.location.line == 1);
  CHECK(d.location.column == static_cast<int64_t>(text.find("1e3")) + 1);
}

TEST_CASE("io: pointers of entries 9, 99 and 100 and beyond",
          "[io][manifest]") {
  // The reader counts entries in the pointer text itself (9 -> 10, 99 ->
  // 100); an error at each shows the right one.
  for (int bad : {9, 10, 99, 100, 1000}) {
    std::string text = R"({"params": [)";
    for (int i = 0; i <= bad; ++i) {
      text +=
          fmt::format(R"({}{{"name": "t{}", "shape": [{}], "dtype": "f32"}})",
                      i == 0 ? "" : ",",
                      i,
                      i == bad ? -1 : 1);
    }
    text += "]}";
    Diagnostic d = manifest_error(text);
    CHECK(d.location.pointer == fmt::format("/params/{}/shape/0", bad));
  }
  // And duplicates name the first entry's pointer.
  std::string text = R"({"params": [)";
  for (int i = 0; i < 120; ++i) {
    text += fmt::format(R"({}{{"name": "t{}", "shape": [1], "dtype": "f32"}})",
                        i == 0 ? "" : ",",
                        i == 119 ? 99 : i);
  }
  text += "]}";
  CHECK(first_line(manifest_error(text))
        == "m.json:/params/119: error: duplicate tensor name \"t99\" (first at "
           "/params/99)");
}

TEST_CASE("io: value errors show the value under a caret", "[io][manifest]") {
  Diagnostic d = manifest_error(
      "{\"params\": [\n"
      "  {\"name\": \"w\", \"shape\": [4096, \"4096\"], \"dtype\": \"bf16\"}\n"
      "]}");
  CHECK(render(d)
        == "m.json:/params/0/shape/1: error: expected an integer dim size, "
           "got string \"4096\" [json.type]\n"
           "    {\"name\": \"w\", \"shape\": [4096, \"4096\"], \"dtype\": "
           "\"bf16\"}\n"
           "                                  ^");
  CHECK(d.location.line == 2);
  CHECK(d.location.column == 33);
}

TEST_CASE("io: unknown keys, dtypes and missing keys", "[io][manifest]") {
  Diagnostic d = manifest_error(
      R"({"params": [{"name": "w", "shpae": [2], "dtype": "bf16"}]})");
  CHECK(d.code == "json.unknown-key");
  CHECK(first_line(d)
        == "m.json:/params/0/shpae: error: unknown key \"shpae\"; did you "
           "mean \"shape\"?");

  d = manifest_error(
      R"({"params": [{"name": "w", "shape": [2], "dtype": "bfloat61"}]})");
  CHECK(d.code == "manifest.dtype");
  CHECK(first_line(d)
        == "m.json:/params/0/dtype: error: unknown dtype \"bfloat61\"; did you "
           "mean \"bfloat16\"?");

  // The suggestion keeps the safetensors upper case.
  d = manifest_error(
      R"({"w": {"dtype": "BF61", "shape": [2], "data_offsets": [0, 4]}})");
  CHECK(first_line(d)
        == "m.json:/w/dtype: error: unknown dtype \"BF61\"; did you mean "
           "\"BF16\"?");

  d = manifest_error(R"({"params": [{"name": "w", "dtype": "bf16"}]})");
  CHECK(d.code == "json.missing-key");
  CHECK(first_line(d)
        == "m.json:/params/0: error: tensor \"w\" has no \"shape\"");

  d = manifest_error(R"({"params": [{"shape": [1], "dtype": "bf16"}]})");
  CHECK(first_line(d) == "m.json:/params/0: error: tensor 0 has no \"name\"");
}

TEST_CASE("io: repeated dtypes, escaped and near misses", "[io][manifest]") {
  // The reader remembers spellings it has seen; a repeat, an escaped
  // spelling and a longer one that starts the same must each read right.
  Manifest m = manifest_ok(R"({"params": [
    {"name": "a", "shape": [1], "dtype": "bf16"},
    {"name": "b", "shape": [1], "dtype": "bf16"},
    {"name": "c", "shape": [1], "dtype": "bf\u0031\u0036"},
    {"name": "d", "shape": [1], "dtype": "f8_e4m3"},
    {"name": "e", "shape": [1], "dtype": "f8_e4m3fnuz"},
    {"name": "f", "shape": [1], "dtype": "f8_e4m3"}]})");
  CHECK(m.tensors()[0].dtype == DType::bf16);
  CHECK(m.tensors()[1].dtype == DType::bf16);
  CHECK(m.tensors()[2].dtype == DType::bf16);
  CHECK(m.tensors()[3].dtype == DType::f8_e4m3);
  CHECK(m.tensors()[4].dtype == DType::f8_e4m3fnuz);
  CHECK(m.tensors()[5].dtype == DType::f8_e4m3);

  Diagnostic d = manifest_error(R"({"params": [
    {"name": "a", "shape": [1], "dtype": "bf16"},
    {"name": "b", "shape": [1], "dtype": "bf16x"}]})");
  CHECK(first_line(d)
        == "m.json:/params/1/dtype: error: unknown dtype \"bf16x\"; did you "
           "mean \"bf16\"?");
  d = manifest_error(R"({"params": [
    {"name": "a", "shape": [1], "dtype": "bf16"},
    {"name": "b", "shape": [1], "dtype": ["bf16"]}]})");
  CHECK(first_line(d)
        == "m.json:/params/1/dtype: error: expected a dtype string, got array");
}

TEST_CASE("io: duplicate keys and duplicate names", "[io][manifest]") {
  Diagnostic d = manifest_error(
      R"({"params": [{"name": "w", "shape": [1], "shape": [2], "dtype": "f32"}]})");
  CHECK(d.code == "json.duplicate-key");
  CHECK(first_line(d)
        == "m.json:/params/0/shape: error: duplicate key \"shape\"");

  d = manifest_error(R"({"params": [], "params": []})");
  CHECK(d.code == "json.duplicate-key");

  d = manifest_error(R"({"params": [{"name": "w", "shape": [1], "dtype": "f32"},
    {"name": "v", "shape": [1], "dtype": "f32"},
    {"name": "w", "shape": [1], "dtype": "f32"}]})");
  CHECK(d.code == "manifest.duplicate-name");
  CHECK(first_line(d)
        == "m.json:/params/2: error: duplicate tensor name \"w\" (first at "
           "/params/0)");
  CHECK(d.location.line == 3);  // the second "w", for the caret

  // In a safetensors header the names are keys: a repeated key is a
  // repeated name.
  d = manifest_error(
      R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
    "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})");
  CHECK(d.code == "manifest.duplicate-name");
}

TEST_CASE("io: an empty manifest is an error", "[io][manifest]") {
  Diagnostic d = manifest_error(R"({"params": []})");
  CHECK(d.code == "manifest.empty");
  CHECK(first_line(d) == "m.json:/params: error: manifest has no tensors");
  d = manifest_error(R"({"__metadata__": {"format": "pt"}})");
  CHECK(d.code == "manifest.empty");
  d = manifest_error("{}");
  CHECK(first_line(d) == "m.json:1:1: error: manifest has no tensors");
}

// ---------------------------------------------------------------------------
// Manifests: the safetensors header form.

TEST_CASE("io: reads a safetensors header in file order", "[io][manifest]") {
  Manifest m = manifest_ok(R"({
    "z.weight": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
    "__metadata__": {"format": "pt", "note": ""},
    "a.scale": {"shape": [4], "data_offsets": [12, 28], "dtype": "F32"},
    "fp8": {"dtype": "F8_E4M3", "shape": [8], "data_offsets": [28, 36]},
    "flag": {"dtype": "BOOL", "shape": [], "data_offsets": [36, 37]}
  })");
  REQUIRE(m.size() == 4);
  CHECK(m.tensors()[0].name == "z.weight");
  CHECK(m.tensors()[0].dtype == DType::bf16);
  CHECK(m.tensors()[0].pointer() == "/z.weight");
  CHECK(m.tensors()[1].name == "a.scale");
  CHECK(m.tensors()[1].dtype == DType::f32);
  CHECK(m.tensors()[2].dtype == DType::f8_e4m3);
  CHECK(m.tensors()[3].dtype == DType::boolean);
  CHECK(m.tensors()[3].num_bytes == 1);
  CHECK(m.total_bytes() == 37);
}

TEST_CASE("io: safetensors data_offsets", "[io][manifest]") {
  Diagnostic d = manifest_error(
      R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 10]}})");
  CHECK(d.code == "manifest.data-offsets");
  CHECK(first_line(d)
        == "m.json:/w/data_offsets: error: data_offsets [0, 10] span 10 "
           "bytes, but a bf16 tensor of shape [2, 3] has 12 bytes");
  d = manifest_error(
      R"({"w": {"dtype": "BF16", "shape": [1], "data_offsets": [8, 6]}})");
  CHECK(
      first_line(d)
      == "m.json:/w/data_offsets: error: begin offset 8 is after end offset 6");
  d = manifest_error(
      R"({"w": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2, 4]}})");
  CHECK(first_line(d)
        == "m.json:/w/data_offsets: error: expected 2 offsets [begin, end], "
           "got 3");
  d = manifest_error(
      R"({"w": {"dtype": "BF16", "shape": [1], "data_offsets": [-2, 0]}})");
  CHECK(first_line(d)
        == "m.json:/w/data_offsets/0: error: offset -2 is negative");
  d = manifest_error(R"({"w": {"dtype": "BF16", "shape": [1]}})");
  CHECK(first_line(d)
        == "m.json:/w: error: tensor \"w\" has no \"data_offsets\"");
}

TEST_CASE("io: names with '/' and '~' are escaped in pointers",
          "[io][manifest]") {
  Manifest m = manifest_ok(
      R"({"enc/layer~1": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})");
  CHECK(m.tensors()[0].name == "enc/layer~1");
  CHECK(m.tensors()[0].pointer() == "/enc~1layer~01");
  Diagnostic d = manifest_error(
      R"({"enc/layer~1": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})");
  CHECK(d.location.pointer == "/enc~1layer~01/shape/0");
  // Unknown keys with those characters, too.
  d = manifest_error(R"({"params": [{"name": "w", "a/b": 1}]})");
  CHECK(d.location.pointer == "/params/0/a~1b");
}

TEST_CASE("io: unicode and escaped names", "[io][manifest]") {
  Manifest m = manifest_ok(
      "{\"params\": [{\"name\": \"\xE6\xA8\xA1\xE5\x9E\x8B.w\xC3\xA9ight\", "
      "\"shape\": [2], \"dtype\": \"f16\"},"
      "{\"name\": \"caf\\u00e9 \\\"q\\\" \\ud83d\\ude00\", \"shape\": [1], "
      "\"dtype\": \"f16\"}]}");
  CHECK(m.tensors()[0].name == "\xE6\xA8\xA1\xE5\x9E\x8B.w\xC3\xA9ight");
  CHECK(m.tensors()[1].name == "caf\xC3\xA9 \"q\" \xF0\x9F\x98\x80");
  // Columns count code points: the error is after 3 two-byte characters.
  Diagnostic d = manifest_error("{\"\xC3\xA9\xC3\xA9\xC3\xA9\": 1,}");
  CHECK(d.code == "json.syntax");
  CHECK(d.location.line == 1);
  CHECK(d.location.column == 11);  // {"ééé": 1,} : the '}' is character 11
}

// ---------------------------------------------------------------------------
// JSON syntax errors.

TEST_CASE("io: syntax errors give line, column and a caret", "[io][manifest]") {
  Diagnostic d = manifest_error(
      "{\"params\": [\n"
      "  {\"name\": \"w\", \"shape\": [1, 2] \"dtype\": \"f32\"}\n"
      "]}");
  CHECK(d.code == "json.syntax");
  CHECK(render(d)
        == "m.json:2:33: error: expected ',' or '}', got a string "
           "[json.syntax]\n"
           "    {\"name\": \"w\", \"shape\": [1, 2] \"dtype\": \"f32\"}\n"
           "                                  ^");
  CHECK(d.location.pointer.empty());
}

TEST_CASE("io: a syntax error wins over an earlier value error",
          "[io][manifest]") {
  // The dtype is unknown, but the file is not JSON at all: say that.
  Diagnostic d = manifest_error(
      R"({"params": [{"name": "w", "shape": [1], "dtype": "nope"}], "x": [1,]})");
  CHECK(d.code == "json.syntax");
  CHECK(d.hint == "JSON does not allow a trailing comma");
}

TEST_CASE("io: CRLF line endings", "[io][manifest]") {
  Diagnostic d = manifest_error(
      "{\"params\": [\r\n"
      "  {\"name\": \"w\", \"shape\": [1],\r\n"
      "   \"dtype\": tru}\r\n"
      "]}\r\n");
  CHECK(d.code == "json.syntax");
  CHECK(d.location.line == 3);
  CHECK(d.location.column == 13);
  // The excerpt shows the line without its '\r'.
  CHECK(render(d)
        == "m.json:3:13: error: invalid literal \"tru\" [json.syntax]\n"
           "     \"dtype\": tru} \n"
           "              ^");
}

TEST_CASE("io: a byte order mark is skipped", "[io][manifest]") {
  Manifest m = manifest_ok(
      "\xEF\xBB\xBF{\"params\": [{\"name\": \"w\", \"shape\": [1], \"dtype\": "
      "\"f32\"}]}");
  CHECK(m.size() == 1);
  // Columns still count from the start of the line: the BOM is U+FEFF,
  // one character.
  Diagnostic d = manifest_error("\xEF\xBB\xBF{\"params\" 1}");
  CHECK(d.code == "json.syntax");
  CHECK(d.location.column == 12);
}

TEST_CASE("io: empty and blank files", "[io][manifest]") {
  Diagnostic d = manifest_error("");
  CHECK(first_line(d)
        == "m.json:1:1: error: expected a JSON object, got end of input; the "
           "file is empty");
  d = manifest_error(" \n\t\n");
  CHECK(d.code == "json.syntax");
  CHECK(d.location.line == 3);
}

TEST_CASE("io: the top level must be an object", "[io][manifest]") {
  Diagnostic d = manifest_error("  [1, 2]");
  CHECK(d.code == "json.type");
  CHECK(first_line(d)
        == "m.json:1:3: error: expected a JSON object at the top level, got "
           "array");
  d = specs_error("\"P('x')\"");
  CHECK(d.code == "json.type");
  CHECK(first_line(d)
        == "s.json:1:1: error: expected a JSON object at the top level, got "
           "string \"P('x')\"");
}

TEST_CASE("io: invalid UTF-8", "[io][manifest]") {
  Diagnostic d = manifest_error(
      "{\"params\": [{\"name\": \"w\xFF\", \"shape\": [1], \"dtype\": "
      "\"f32\"}]}");
  CHECK(d.code == "json.syntax");
  CHECK(first_line(d)
        == "m.json:1:24: error: invalid string: ill-formed UTF-8 byte");
}

TEST_CASE("io: deep nesting neither crashes nor recurses", "[io][manifest]") {
  // A megabyte of '['.
  Diagnostic d = manifest_error(std::string(1 << 20, '['));
  CHECK(d.code == "json.syntax");
  CHECK(d.message == "expected a JSON value, got end of input");
  // Well-formed but 100000 deep, inside an ignored key: valid JSON.
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  Manifest m = manifest_ok(
      R"({"params": [{"name": "w", "shape": [1], "dtype": "f32"}], "x": )"
      + deep + "}");
  CHECK(m.size() == 1);
  // As a tensor entry, it is the wrong type.
  d = manifest_error(R"({"params": [)" + deep + "]}");
  CHECK(first_line(d)
        == "m.json:/params/0: error: expected a tensor object, got array");
}

TEST_CASE("io: ignored values must still be valid JSON", "[io][manifest]") {
  const std::string tensor =
      R"({"params": [{"name": "w", "shape": [1], "dtype": "f32"}], )";
  for (std::string bad : {R"("x": {"a": tru})",
                          R"("x": [1, 2,])",
                          R"("x": 01)",
                          R"("x": "\q")",
                          R"("x": -)",
                          R"("x": [1 2])",
                          R"("x": nul)"}) {
    Diagnostic d = manifest_error(tensor + bad + "}");
    INFO(bad);
    CHECK(d.code == "json.syntax");
  }
  // Big integers are valid JSON even where simdjson cannot hold them.
  Manifest m = manifest_ok(tensor + R"("x": 123456789012345678901234567890})");
  CHECK(m.size() == 1);
}

TEST_CASE("io: Python habits get a hint", "[io][manifest]") {
  Diagnostic d = manifest_error(
      R"({"params": [{"name": "w", "shape": [NaN], "dtype": "f32"}]})");
  CHECK(first_line(d)
        == "m.json:1:37: error: invalid literal \"NaN\"; NaN and Infinity are "
           "not valid JSON numbers");
  d = manifest_error(R"({"params": [{'name': 'w'}]})");
  CHECK(first_line(d)
        == "m.json:1:14: error: unexpected \"'\"; JSON strings use double "
           "quotes");
  d = manifest_error(
      R"({"params": [{"name": "w", "shape": [1], "dtype": None}]})");
  CHECK(d.hint == "JSON spells these true, false and null");
}

TEST_CASE("io: trailing content after the top-level object", "[io][manifest]") {
  Diagnostic d = manifest_error(
      R"({"params": [{"name": "w", "shape": [1], "dtype": "f32"}]} {})");
  CHECK(first_line(d)
        == "m.json:1:59: error: expected end of input after the top-level "
           "value, got '{'");
}

// ---------------------------------------------------------------------------
// Specs files.

TEST_CASE("io: reads a specs object", "[io][specs]") {
  SpecsFile f = specs_ok(R"json({"specs": {
    "w": ["fsdp", null],
    "v": [["dp", "fsdp"], "tp"],
    "a/b": [[], ["tp"], null],
    "s": "P(('dp', 'fsdp'), None)",
    "r": [],
    "short": "fsdp,None"}, "other": {"ignored": [1, 2]}})json");
  REQUIRE(f.specs.size() == 6);
  CHECK(f.source == "s.json");
  CHECK(f.specs[0].name == "w");
  CHECK(*f.specs[0].spec == spec_of({{"fsdp"}, {}}));
  CHECK(f.specs[0].pointer == "/specs/w");
  CHECK(*f.specs[1].spec == spec_of({{"dp", "fsdp"}, {"tp"}}));
  // [] is None and ["tp"] is "tp", as jaxlib canonicalises.
  CHECK(*f.specs[2].spec == spec_of({{}, {"tp"}, {}}));
  CHECK(f.specs[2].pointer == "/specs/a~1b");
  CHECK(*f.specs[3].spec == spec_of({{"dp", "fsdp"}, {}}));
  CHECK(*f.specs[4].spec == PartitionSpec{});
  CHECK(*f.specs[5].spec == spec_of({{"fsdp"}, {}}));
}

TEST_CASE("io: reads the tensors of plan output", "[io][specs]") {
  SpecsFile f = specs_ok(R"({"schema_version": 1, "command": "plan",
    "tensors": [
      {"name": "w", "shape": [8, 8], "dtype": "bf16", "spec": ["fsdp", "tp"],
       "rule": {"index": 0, "description": "fsdp"}, "bytes": 128},
      {"name": "b", "spec": [null]}],
    "summary": {"tensors": 2}})");
  REQUIRE(f.specs.size() == 2);
  CHECK(*f.specs[0].spec == spec_of({{"fsdp"}, {"tp"}}));
  CHECK(f.specs[0].pointer == "/tensors/0/spec");
  CHECK(f.specs[1].name == "b");
  CHECK(*f.specs[1].spec == spec_of({{}}));
}

TEST_CASE("io: equal specs of a specs file share one object", "[io][specs]") {
  // a, b, d and f are P('fsdp', None) written four ways (other spacing; [] is
  // None and ["fsdp"] is "fsdp", as jaxlib canonicalises), c and g in text
  // form; e is another spec.
  SpecsFile f = specs_ok(R"json({"specs": {
    "a": ["fsdp", null],
    "b": [ "fsdp" ,null ],
    "c": "P('fsdp', None)",
    "d": [["fsdp"], []],
    "e": ["tp", null],
    "f": ["fsdp", null],
    "g": "P('fsdp', None)"}})json");
  REQUIRE(f.specs.size() == 7);
  const PartitionSpec fsdp = spec_of({{"fsdp"}, {}});
  for (size_t i : {0U, 1U, 2U, 3U, 5U, 6U}) {
    INFO(f.specs[i].name);
    CHECK(*f.specs[i].spec == fsdp);
    CHECK(f.specs[i].spec == f.specs[0].spec);  // the same object
  }
  CHECK(*f.specs[4].spec == spec_of({{"tp"}, {}}));
  CHECK(f.specs[4].spec != f.specs[0].spec);

  // Many tensors, three specs in turn: tensor i has spec i % 3.
  const std::vector<PartitionSpec> three = {
      spec_of({{"fsdp"}, {"tp"}}), spec_of({{}, {"tp"}}), PartitionSpec{}};
  std::string text = R"({"tensors": [)";
  for (size_t i = 0; i < 3000; ++i) {
    const char* spec[] = {R"(["fsdp", "tp"])", R"([null, "tp"])", "[]"};
    text += fmt::format(R"({}{{"name": "w{}", "spec": {}, "shape": [8, 8]}})",
                        i == 0 ? "" : ",\n",
                        i,
                        spec[i % 3]);
  }
  text += "]}";
  SpecsFile many = specs_ok(text);
  REQUIRE(many.specs.size() == 3000);
  for (size_t i = 0; i < many.specs.size(); ++i) {
    INFO(i);
    REQUIRE(many.specs[i].name == fmt::format("w{}", i));
    REQUIRE(*many.specs[i].spec == three[i % 3]);
    REQUIRE(many.specs[i].spec == many.specs[i % 3].spec);
    REQUIRE(many.specs[i].pointer == fmt::format("/tensors/{}/spec", i));
    REQUIRE(many.specs[i].line == static_cast<int64_t>(i) + 1);
  }
}

TEST_CASE("io: tensors of plan output read alike in every form",
          "[io][specs]") {
  // Entries as plan writes them are read from their text; the others
  // (escapes in a name or a key, a text spec, a number with an exponent,
  // non-ASCII text) the full way. Each gives the same name and spec.
  // Columns count code points: line 7's spec starts at byte 33, after the
  // two bytes of "é", so at column 32.
  const std::string text = R"json({"tensors": [
{"name": "w0", "spec": ["fsdp", "tp"], "shape": [8, 8], "rule": {"index": 1, "description": "a \"b\" \\ c"}, "valid": true, "bytes": 128},
{"name": "w\u0031", "spec": ["fsdp", "tp"]},
{"spec": [["fsdp"], "tp"], "name": "w2"},
{"na\u006de": "w3", "spec": "P('fsdp', 'tp')"},
{"name": "w4", "spec": ["fsdp", "tp"], "bytes": 1.28e2, "x": "\u00e9"},
{"é": 1, "name": "w5", "spec": ["fsdp", "tp"]}]})json";
  SpecsFile f = specs_ok(text);
  REQUIRE(f.specs.size() == 6);
  const PartitionSpec fsdp_tp = spec_of({{"fsdp"}, {"tp"}});
  for (size_t i = 0; i < f.specs.size(); ++i) {
    INFO(i);
    CHECK(f.specs[i].name == fmt::format("w{}", i));
    CHECK(*f.specs[i].spec == fsdp_tp);
    CHECK(f.specs[i].spec == f.specs[0].spec);
    CHECK(f.specs[i].pointer == fmt::format("/tensors/{}/spec", i));
    CHECK(f.specs[i].line == static_cast<int64_t>(i) + 2);
  }
  // {"name": "w0", "spec": [  -> the spec at column 24
  CHECK(f.specs[0].column == 24);
  // {"spec": [  -> column 10
  CHECK(f.specs[2].column == 10);
  // {"é": 1, "name": "w5", "spec": [  -> 32 code points before it
  CHECK(f.specs[5].column == 32);
}

TEST_CASE("io: specs errors", "[io][specs]") {
  Diagnostic d = specs_error(R"({"specs": {"w": ["fsdp", [["a"]]]}})");
  CHECK(d.code == "spec.nested-tuple");
  CHECK(first_line(d)
        == "s.json:/specs/w/1/0: error: a tuple inside a PartitionSpec cannot "
           "contain a nested tuple");
  d = specs_error(R"({"specs": {"w": ["fsdp", ""]}})");
  CHECK(d.code == "spec.empty-axis");
  CHECK(first_line(d) == "s.json:/specs/w/1: error: axis name is empty");
  d = specs_error(R"({"specs": {"w": ["a"], "w": ["b"]}})");
  CHECK(d.code == "specs.duplicate-name");
  CHECK(first_line(d)
        == "s.json:/specs/w: error: duplicate tensor name \"w\" (first at "
           "/specs/w)");
  // A string spec is parsed by parse_spec, located in the file at the
  // character it points at: the string opens at column 17 and its text,
  // "P('fsdp', None" (14 characters), ends at column 17 + 1 + 14 = 32, the
  // closing quote, where ")" is missing.
  d = specs_error(R"json({"specs": {"w": "P('fsdp', None"}})json");
  CHECK(d.code == "spec.syntax");
  CHECK(d.location.source == "s.json");
  CHECK(d.location.pointer == "/specs/w");
  CHECK(d.location.line == 1);
  CHECK(d.location.column == 32);
  CHECK(d.tensor == "w");
  // Escapes count as written: in "P(\"a\",,)" the second comma is
  // character 7 of the text P("a",,) and column 17 + 7 + 2 = 26 of the
  // file (the quote, then the 7 characters, each \" one longer).
  d = specs_error(R"json({"specs": {"w": "P(\"a\",,)"}})json");
  CHECK(d.code == "spec.syntax");
  CHECK(d.location.column == 26);
  // \u00e9 is two bytes of text, six characters of the file: the é the
  // error is about is at column 17 + 1 + 2 = 20.
  d = specs_error(R"json({"specs": {"w": "P(\u00e9)"}})json");
  CHECK(d.code == "spec.syntax");
  CHECK(d.location.column == 20);
  d = specs_error(R"({"spec": {"w": []}})");
  CHECK(first_line(d)
        == "s.json:1:1: error: expected a \"specs\" object or a \"tensors\" "
           "array at the top level; did you mean \"specs\" instead of "
           "\"spec\"?");
}

TEST_CASE("io: the quick JSON check takes only valid JSON", "[io][json]") {
  using io_detail::find_syntax_error;
  using io_detail::is_plain_json;
  // What the readers step over in plan output: taken without nlohmann.
  const std::vector<std::string_view> plain = {
      "[]",
      "{}",
      " [8, 8] ",
      R"({"index": 12, "description": "#12 \"a\\.b\" \/ \u00e9 \n"})",
      R"([null, true, false, -0, 0, 12.5, -3.25, ""])",
      R"([[[]], {"a": {"b": [1]}, "c": []}])"};
  // Valid, but left to find_syntax_error: an exponent (nlohmann refuses
  // one beyond a double), raw UTF-8 and surrogates (nlohmann checks them),
  // nesting beyond 64 levels.
  const std::string deep = std::string(65, '[') + std::string(65, ']');
  const std::vector<std::string_view> unsure = {
      "1e3", "[2E-1]", "\"\xc3\xa9\"", R"("\ud83d\ude00")", deep};
  // Not JSON.
  const std::vector<std::string_view> invalid = {"[1,]",
                                                 R"({"a" 1})",
                                                 "[01]",
                                                 "[1.]",
                                                 "[-]",
                                                 R"("a\q")",
                                                 "\"\x01\"",
                                                 "[tru]",
                                                 R"({"a":1,})",
                                                 "[1] [2]",
                                                 "[",
                                                 R"("\u12")",
                                                 "{1: 2}",
                                                 "nul",
                                                 "",
                                                 "[1 2]",
                                                 R"({"a"})",
                                                 R"({"a": 1 "b": 2})"};
  for (std::string_view text : plain) {
    INFO(text);
    CHECK(is_plain_json(text));
    CHECK_FALSE(find_syntax_error(text));
  }
  for (std::string_view text : unsure) {
    INFO(text);
    CHECK_FALSE(is_plain_json(text));
    CHECK_FALSE(find_syntax_error(text));
  }
  for (std::string_view text : invalid) {
    INFO(text);
    CHECK_FALSE(is_plain_json(text));
    CHECK(find_syntax_error(text));
  }
  CHECK(plain.size() + unsure.size() + invalid.size() == 29);
  // plain_json_end stops right after the first value.
  const std::string_view two = "[1, 2], 3";
  CHECK(io_detail::plain_json_end(two.data(), two.data() + two.size())
        == two.data() + 6);
}

// ---------------------------------------------------------------------------
// Negative-case files and the bad-input corpus.

TEST_CASE("io: manifest negative cases", "[io][manifest]") {
  for (const test::NegativeCase& c : test::load_cases("manifest_errors.txt")) {
    DYNAMIC_SECTION(c.name << " (line " << c.line << ")") {
      Diagnostics diags;
      std::optional<Manifest> manifest =
          read_manifest(c.input, "m.json", diags);
      CHECK_FALSE(manifest.has_value());
      REQUIRE(diags.error_count() >= 1);
      CHECK(diags.items()[0].code == c.expect_code);
      CHECK(test::first_line_without_code(diags.items()[0])
            == c.expect_message);
    }
  }
}

TEST_CASE("io: specs negative cases", "[io][specs]") {
  for (const test::NegativeCase& c : test::load_cases("specs_errors.txt")) {
    DYNAMIC_SECTION(c.name << " (line " << c.line << ")") {
      Diagnostics diags;
      std::optional<SpecsFile> specs = read_specs(c.input, "s.json", diags);
      CHECK(refused(specs));
      CHECK(specs.has_value() == (c.expect_code == "spec.nested-tuple"));
      REQUIRE(diags.error_count() >= 1);
      CHECK(diags.items()[0].code == c.expect_code);
      CHECK(test::first_line_without_code(diags.items()[0])
            == c.expect_message);
    }
  }
}

TEST_CASE("io: bad-input corpus gives located errors in process",
          "[io][manifest]") {
  for (const char* kind : {"manifest", "specs"}) {
    const std::string dir = test::data_path(std::string("bad_inputs/") + kind);
    std::vector<std::string> names = files_in(dir);
    CHECK(names.size() >= (std::string_view(kind) == "manifest" ? 15U : 8U));
    for (const std::string& name : names) {
      const std::string path = dir + "/" + name;
      DYNAMIC_SECTION(kind << "/" << name) {
        Diagnostics diags;
        // A manifest as --manifest reads it, by its path (an index's shards
        // are relative to it); a specs file as --specs reads it.
        bool ok = false;
        if (std::string_view(kind) == "manifest") {
          ok = read_manifest_path(path, diags).has_value();
        } else {
          std::optional<std::string> text =
              read_file(path, InputKind::specs, diags);
          REQUIRE(text.has_value());
          ok = read_specs(*text, path, diags).has_value();
        }
        CHECK_FALSE(ok);
        REQUIRE(diags.has_errors());
        const Diagnostic& d = diags.items()[0];
        CHECK(d.location.source.starts_with(path));
        CHECK((!d.location.pointer.empty() || d.location.line > 0));
        CHECK(render(d).starts_with(path + ":"));
      }
    }
  }
}

// Every truncation of a valid manifest, and every byte replaced by a few
// troublemakers: never a crash, and when nlohmann says the text is not JSON,
// a json.syntax error.
TEST_CASE("io: mutated manifests never crash", "[io][manifest][property]") {
  const std::string valid =
      R"({"params": [{"name": "a/b", "shape": [2, 3], "dtype": "bf16",)"
      R"( "logical_axes": ["x", null]}, {"name": "c", "shape": [], "dtype": "f32"}],)"
      R"( "meta": {"k": [1.5, true, null, "s"]}})";
  REQUIRE(manifest_ok(valid).size() == 2);
  auto check = [](const std::string& text) {
    Diagnostics diags;
    std::optional<Manifest> m = read_manifest(text, "m.json", diags);
    const bool json_ok = nlohmann::json::accept(text);
    INFO("text: " << text);
    INFO(test::first_error(diags));
    CHECK(m.has_value() == !diags.has_errors());
    if (!json_ok) {
      CHECK_FALSE(m.has_value());
      REQUIRE(diags.has_errors());
      CHECK(diags.items()[0].code == "json.syntax");
      CHECK(diags.items()[0].location.line >= 1);
    }
    if (diags.has_errors()) {
      CHECK_FALSE(diags.items()[0].location.source.empty());
    }
  };
  for (size_t n = 0; n < valid.size(); ++n) {
    check(valid.substr(0, n));
  }
  for (size_t i = 0; i < valid.size(); ++i) {
    for (char c : {'"', ',', '[', '}', '\\', '\xff', '\0', '0', '-', ' '}) {
      std::string mutated = valid;
      mutated[i] = c;
      check(mutated);
    }
    std::string deleted = valid;
    deleted.erase(i, 1);
    check(deleted);
  }
}

// ---------------------------------------------------------------------------
// Files.

TEST_CASE("io: read_file", "[io][files]") {
  const std::string dir = temp_dir();
  const std::string path = dir + "/in.bin";
  const std::string bytes("a\0b\r\n\xff", 6);
  Diagnostics diags;
  REQUIRE(write_file_atomic(path, bytes, diags));
  std::optional<std::string> text = read_file(path, InputKind::manifest, diags);
  REQUIRE(text.has_value());
  CHECK(*text == bytes);
  // An empty file is an empty string, not an error.
  REQUIRE(write_file_atomic(path, "", diags));
  CHECK(read_file(path, InputKind::manifest, diags)
        == std::optional<std::string>(""));
  CHECK(diags.items().empty());

  std::optional<std::string> missing =
      read_file(dir + "/nope.json", InputKind::manifest, diags);
  CHECK_FALSE(missing.has_value());
  REQUIRE(diags.error_count() == 1);
  CHECK(diags.items()[0].code == "io.read");
  CHECK(render(diags.items()[0])
        == dir + "/nope.json: error: cannot read file: No such file or directory "
                 "[io.read]");
  CHECK(diags.items()[0].location.source == dir + "/nope.json");

  Diagnostics dir_diags;
  CHECK_FALSE(read_file(dir, InputKind::manifest, dir_diags).has_value());
  REQUIRE(dir_diags.error_count() == 1);
  CHECK(render(dir_diags.items()[0])
        == dir + ": error: cannot read file: Is a directory [io.read]");
  std::filesystem::remove_all(dir);
}

// The limits of docs/cli.md ("Input files and their sizes"), each from the
// largest real input of its kind: 1 GiB = 1024^3 = 1,073,741,824 bytes for
// manifests and specs files, 64 MiB = 67,108,864 for rules files, 1 MiB =
// 1,048,576 for topology files, 16 MiB = 16,777,216 for Hugging Face configs.
TEST_CASE("io: each kind of input has its limit", "[io][files]") {
  CHECK(input_limit(InputKind::manifest).max_bytes == 1'073'741'824U);
  CHECK(input_limit(InputKind::specs).max_bytes == 1'073'741'824U);
  CHECK(input_limit(InputKind::rules).max_bytes == 67'108'864U);
  CHECK(input_limit(InputKind::topology).max_bytes == 1'048'576U);
  CHECK(input_limit(InputKind::hf_config).max_bytes == 16'777'216U);
  CHECK(input_limit(InputKind::manifest).what == "manifest");
  CHECK(input_limit(InputKind::hf_config).what == "Hugging Face config");
}

// A sparse file of 1 TiB reads as zeros: were a byte of it read (or mapped
// with MAP_POPULATE), the test would run for minutes or fail to allocate.
TEST_CASE("io: a regular file over the limit is refused from its size, unread",
          "[io][files]") {
  const std::string dir = temp_dir();
  const std::string path = dir + "/huge.json";
  { std::ofstream(path).put('{'); }
  std::filesystem::resize_file(path, uintmax_t{1} << 40U);  // sparse, 1 TiB
  const std::string expected =
      path
      + ": error: the file has 1099511627776 bytes; a manifest may have at "
        "most 1 GiB (1073741824 bytes); none of it was read: the limit is far "
        "above any real manifest (docs/cli.md, \"Input files and their "
        "sizes\") [io.too-large]";
  Diagnostics diags;
  CHECK_FALSE(read_file(path, InputKind::manifest, diags).has_value());
  REQUIRE(diags.error_count() == 1);
  CHECK(render(diags.items()[0]) == expected);
  // Mapped inputs go by the same limit, and are not mapped.
  Diagnostics mapped;
  CHECK_FALSE(
      io_detail::PaddedText::load(path, k_manifest_limit, mapped).has_value());
  REQUIRE(mapped.error_count() == 1);
  CHECK(render(mapped.items()[0]) == expected);
  Diagnostics manifest;
  CHECK_FALSE(read_manifest_path(path, manifest).has_value());
  REQUIRE(manifest.error_count() == 1);
  CHECK(render(manifest.items()[0]) == expected);

  // At the limit a file is read; one byte over, refused.
  const InputLimit small{"rules file", 1000};
  REQUIRE(write_file_atomic(path, std::string(1000, ' '), diags));
  Diagnostics at_limit;
  CHECK(io_detail::read_file(path, small, at_limit)
        == std::optional<std::string>(std::string(1000, ' ')));
  CHECK(at_limit.items().empty());
  REQUIRE(write_file_atomic(path, std::string(1001, ' '), diags));
  Diagnostics over;
  CHECK_FALSE(io_detail::read_file(path, small, over).has_value());
  REQUIRE(over.error_count() == 1);
  CHECK(over.items()[0].message
        == "the file has 1001 bytes; a rules file may have at most 1000 bytes");
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "io: a device or a pipe is read one byte past the limit, then "
    "refused",
    "[io][files]") {
  // /dev/zero never ends: 1024 + 1 bytes read, then the error (1024 bytes
  // is 1 KiB).
  const InputLimit limit{"manifest", 1024};
  Diagnostics zero;
  CHECK_FALSE(io_detail::read_file("/dev/zero", limit, zero).has_value());
  REQUIRE(zero.error_count() == 1);
  CHECK(render(zero.items()[0])
        == "/dev/zero: error: the input has more than 1024 bytes; a manifest "
           "may have at most 1 KiB (1024 bytes); a pipe or a device is read up "
           "to the limit, then refused [io.too-large]");
  // The same through the mapped reader, which cannot map a device.
  Diagnostics padded;
  CHECK_FALSE(
      io_detail::PaddedText::load("/dev/zero", limit, padded).has_value());
  CHECK(padded.error_count() == 1);

  // A pipe, through its /proc/self/fd path as a shell's <(...) gives it.
  // The writer sends `bytes` bytes; after the reader stops at 1025 the rest
  // (under a pipe's 64 KiB buffer) is left in the pipe, so it never blocks.
  auto through_pipe = [&](const std::string& bytes, Diagnostics& diags) {
    std::array<int, 2> fds{};
    REQUIRE(::pipe(fds.data()) == 0);
    std::thread writer([&] {
      std::string_view rest = bytes;
      while (!rest.empty()) {
        const ssize_t n = ::write(fds[1], rest.data(), rest.size());
        if (n <= 0) {
          break;
        }
        rest.remove_prefix(static_cast<size_t>(n));
      }
      ::close(fds[1]);
    });
    std::optional<std::string> text = io_detail::read_file(
        "/proc/self/fd/" + std::to_string(fds[0]), limit, diags);
    writer.join();
    ::close(fds[0]);
    return text;
  };
  Diagnostics small;
  const std::string manifest = R"({"params": []})";
  CHECK(through_pipe(manifest, small) == std::optional<std::string>(manifest));
  CHECK(small.items().empty());
  Diagnostics full;
  CHECK(through_pipe(std::string(1024, ' '), full).has_value());
  CHECK(full.items().empty());
  Diagnostics endless;
  CHECK_FALSE(through_pipe(std::string(8192, ' '), endless).has_value());
  REQUIRE(endless.error_count() == 1);
  CHECK(endless.items()[0].code == "io.too-large");
  CHECK(endless.items()[0].message
        == "the input has more than 1024 bytes; a manifest may have at most 1 "
           "KiB (1024 bytes)");
}

TEST_CASE("io: write_file_atomic", "[io][files]") {
  const std::string dir = temp_dir();
  const std::string path = dir + "/out.json";
  Diagnostics diags;
  REQUIRE(write_file_atomic(path, "first", diags));
  CHECK(read_file(path, InputKind::manifest, diags)
        == std::optional<std::string>("first"));
  // Replacing keeps the file's mode and leaves no temporary file.
  REQUIRE(::chmod(path.c_str(), 0640) == 0);
  REQUIRE(write_file_atomic(path, "second", diags));
  CHECK(read_file(path, InputKind::manifest, diags)
        == std::optional<std::string>("second"));
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777U) == 0640U);
  CHECK(files_in(dir) == std::vector<std::string>{"out.json"});
  CHECK(diags.items().empty());

  // A missing folder: the path and the reason, nothing left behind.
  const std::string bad = dir + "/missing/out.json";
  CHECK_FALSE(write_file_atomic(bad, "x", diags));
  REQUIRE(diags.error_count() == 1);
  CHECK(diags.items()[0].code == "io.write");
  CHECK(render(diags.items()[0])
        == bad + ": error: cannot write file: No such file or directory [io.write]");

  // A folder in the way.
  Diagnostics dir_diags;
  REQUIRE(std::filesystem::create_directory(dir + "/sub"));
  CHECK_FALSE(write_file_atomic(dir + "/sub", "x", dir_diags));
  REQUIRE(dir_diags.error_count() == 1);
  CHECK(render(dir_diags.items()[0])
        == dir + "/sub: error: cannot write file: Is a directory [io.write]");
  CHECK(files_in(dir) == std::vector<std::string>{"out.json", "sub"});

  // Through a symlink, the target is replaced and the link kept.
  std::filesystem::create_symlink(path, dir + "/link.json");
  REQUIRE(write_file_atomic(dir + "/link.json", "third", diags));
  CHECK(std::filesystem::is_symlink(dir + "/link.json"));
  CHECK(read_file(path, InputKind::manifest, diags)
        == std::optional<std::string>("third"));
  // A device is written in place.
  CHECK(write_file_atomic("/dev/null", "discarded", diags));
  CHECK(diags.error_count() == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("io: AtomicFile writes in pieces and leaves nothing until commit",
          "[io][files]") {
  const std::string dir = temp_dir();
  const std::string path = dir + "/out.json";
  Diagnostics diags;
  REQUIRE(write_file_atomic(path, "old", diags));
  {
    AtomicFile file;
    REQUIRE(file.open(path, diags));
    file.write("new ");
    file.write("text");
    // Until commit() the old file stands, beside the temporary one.
    CHECK(read_file(path, InputKind::manifest, diags)
          == std::optional<std::string>("old"));
    CHECK(files_in(dir).size() == 2);
    REQUIRE(file.commit(diags));
  }
  CHECK(read_file(path, InputKind::manifest, diags)
        == std::optional<std::string>("new text"));
  {
    AtomicFile abandoned;
    REQUIRE(abandoned.open(path, diags));
    abandoned.write("half");
  }
  CHECK(read_file(path, InputKind::manifest, diags)
        == std::optional<std::string>("new text"));
  CHECK(files_in(dir) == std::vector<std::string>{"out.json"});
  CHECK(diags.items().empty());

  AtomicFile bad;
  CHECK_FALSE(bad.open(dir + "/missing/out.json", diags));
  REQUIRE(diags.error_count() == 1);
  CHECK(render(diags.items()[0])
        == dir + "/missing/out.json: error: cannot write file: No such file or directory "
                 "[io.write]");
  std::filesystem::remove_all(dir);
}

TEST_CASE("io: PaddedText maps a regular file and pads it with zeros",
          "[io][mapped]") {
  const std::string dir = temp_dir();
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  // Sizes around a page's end: the padding is the rest of the file's last
  // page, or runs on into the zeroed page after it.
  for (size_t size : {size_t{1},
                      page - 64,
                      page - 63,
                      page - 1,
                      page,
                      page + 1,
                      3 * page + 100}) {
    DYNAMIC_SECTION("size " << size) {
      std::string bytes(size, 'x');
      for (size_t i = 0; i < size; ++i) {
        bytes[i] = static_cast<char>('a' + i % 26);
      }
      const std::string path = dir + "/in.json";
      Diagnostics diags;
      REQUIRE(write_file_atomic(path, bytes, diags));
      std::optional<io_detail::PaddedText> text =
          io_detail::PaddedText::load(path, k_manifest_limit, diags);
      REQUIRE(text.has_value());
      CHECK(text->mapped());
      CHECK(text->text() == bytes);
      REQUIRE(text->padding() >= 64);
      const char* end = text->text().data() + size;
      CHECK(std::all_of(
          end, end + text->padding(), [](char c) { return c == 0; }));
      // A move keeps the mapping and its views.
      const char* data = text->text().data();
      io_detail::PaddedText moved(std::move(*text));
      CHECK(moved.text().data() == data);
      CHECK(moved.text() == bytes);
      CHECK(diags.items().empty());
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("io: PaddedText reads what it cannot map", "[io][mapped]") {
  Diagnostics diags;
  // /proc files say st_size 0: read to their end.
  std::optional<io_detail::PaddedText> proc =
      io_detail::PaddedText::load("/proc/self/status", k_manifest_limit, diags);
  REQUIRE(proc.has_value());
  CHECK_FALSE(proc->mapped());
  CHECK(proc->text().starts_with("Name:"));
  // An empty file maps to nothing: an empty text.
  const std::string dir = temp_dir();
  REQUIRE(write_file_atomic(dir + "/empty.json", "", diags));
  std::optional<io_detail::PaddedText> empty =
      io_detail::PaddedText::load(dir + "/empty.json", k_manifest_limit, diags);
  REQUIRE(empty.has_value());
  CHECK_FALSE(empty->mapped());
  CHECK(empty->text().empty());
  CHECK(diags.items().empty());
  // A missing file: read_file's error.
  CHECK_FALSE(
      io_detail::PaddedText::load(dir + "/nope.json", k_manifest_limit, diags)
          .has_value());
  REQUIRE(diags.error_count() == 1);
  CHECK(render(diags.items()[0])
        == dir + "/nope.json: error: cannot read file: No such file or directory [io.read]");
  std::filesystem::remove_all(dir);
}

TEST_CASE("io: PaddedText puts the SIGBUS handler back when its mappings end",
          "[io][mapped]") {
  const std::string dir = temp_dir();
  Diagnostics diags;
  REQUIRE(write_file_atomic(dir + "/a.json", "{}", diags));
  REQUIRE(write_file_atomic(dir + "/b.json", "[]", diags));
  struct sigaction before {};
  REQUIRE(::sigaction(SIGBUS, nullptr, &before) == 0);
  {
    std::optional<io_detail::PaddedText> a =
        io_detail::PaddedText::load(dir + "/a.json", k_manifest_limit, diags);
    std::optional<io_detail::PaddedText> b =
        io_detail::PaddedText::load(dir + "/b.json", k_manifest_limit, diags);
    REQUIRE((a && b && a->mapped() && b->mapped()));
    struct sigaction during {};
    REQUIRE(::sigaction(SIGBUS, nullptr, &during) == 0);
    CHECK((during.sa_flags & SA_SIGINFO) != 0);
    CHECK(during.sa_sigaction != before.sa_sigaction);
    a.reset();  // b's mapping still lives: its handler stays
    REQUIRE(::sigaction(SIGBUS, nullptr, &during) == 0);
    CHECK((during.sa_flags & SA_SIGINFO) != 0);
    CHECK(during.sa_sigaction != before.sa_sigaction);
  }
  struct sigaction after {};
  REQUIRE(::sigaction(SIGBUS, nullptr, &after) == 0);
  CHECK(after.sa_sigaction == before.sa_sigaction);
  CHECK((after.sa_flags & SA_SIGINFO) == (before.sa_flags & SA_SIGINFO));
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "io: a mapped file that shrinks while read ends the process with exit code "
    "2",
    "[io][mapped]") {
  // Truncating a mapped file makes its pages past the new end raise SIGBUS
  // on the next touch. In a child process: the handler reports the file and
  // exits 2, where it would otherwise dump core.
  const std::string dir = temp_dir();
  const std::string path = dir + "/big.json";
  Diagnostics diags;
  REQUIRE(write_file_atomic(path, std::string(size_t{1} << 20, ' '), diags));
  int pipe_fds[2] = {-1, -1};
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::dup2(pipe_fds[1], STDERR_FILENO);
    Diagnostics child_diags;
    // Another mapping made first and ended first: the handler still knows
    // this one.
    std::optional<io_detail::PaddedText> other =
        io_detail::PaddedText::load(path, k_manifest_limit, child_diags);
    std::optional<io_detail::PaddedText> text =
        io_detail::PaddedText::load(path, k_manifest_limit, child_diags);
    other.reset();
    if (!text || !text->mapped() || ::truncate(path.c_str(), 0) != 0) {
      ::_exit(10);
    }
    volatile char touched = text->text()[size_t{1} << 19];
    (void)touched;
    ::_exit(0);  // no SIGBUS: the test fails on this code
  }
  ::close(pipe_fds[1]);
  std::string err;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) {
    err.append(buffer, static_cast<size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  INFO(err);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(err
        == path + ": error: the file shrank while it was being read; nothing was written "
                  "[io.changed]\n");
  std::filesystem::remove_all(dir);
}

TEST_CASE("io: NUL bytes", "[io][manifest]") {
  // nlohmann would stop at the NUL as if the text ended there; the reader
  // does not.
  Diagnostic d =
      manifest_error(std::string("{\"params\": [{\"name\": \"w\", \"shape\": "
                                 "[1], \"dtype\": \"f32\"}]}\0x",
                                 59));
  CHECK(d.code == "json.syntax");
  CHECK(first_line(d)
        == "m.json:1:58: error: unexpected byte 0x00; JSON text has no NUL "
           "bytes; is this a binary file?");
  d = manifest_error(std::string("\0", 1));
  CHECK(first_line(d).starts_with("m.json:1:1: error: unexpected byte 0x00"));
  // Inside a string a raw NUL is a control character.
  d = manifest_error(std::string("{\"params\": [{\"name\": \"w\0\"}]}", 28));
  CHECK(first_line(d)
        == "m.json:1:24: error: invalid string: control character U+0000 "
           "(NUL) must be escaped to \\u0000");
}

TEST_CASE(
    "io: every bad spec of a specs file is reported, each naming its "
    "tensor",
    "[io][specs]") {
  // Three specs that do not parse and one nested tuple (a JAX error of a
  // well-formed spec): the reader goes on after each, so a user sees all
  // four in one run. With a spec that is bad input the file is refused.
  const std::string text = R"({"specs": {
    "a": "P('fsdp', ",
    "b": [1],
    "c": [["tp", null]],
    "d": [["tp", ["fsdp"]]],
    "e": ["fsdp"]}})";
  Diagnostics diags;
  CHECK_FALSE(read_specs(text, "s.json", diags));
  REQUIRE(diags.items().size() == 4);
  const std::vector<std::string> tensors = {"a", "b", "c", "d"};
  const std::vector<std::string> codes = {
      "spec.syntax", "json.type", "spec.none-in-tuple", "spec.nested-tuple"};
  for (size_t i = 0; i < 4; ++i) {
    INFO(render(diags.items()[i]));
    CHECK(diags.items()[i].tensor == tensors[i]);
    CHECK(diags.items()[i].code == codes[i]);
  }

  // A nested tuple alone is not bad input: the entry is kept as invalid
  // for check to report with the other plan errors; it names its tensor,
  // also in the tensors[] form where "spec" comes before "name".
  Diagnostics nested;
  std::optional<SpecsFile> file = read_specs(
      R"({"tensors": [{"spec": [["tp", ["fsdp"]]], "name": "w"},
                      {"name": "v", "spec": ["fsdp"]}]})",
      "p.json",
      nested);
  REQUIRE(file);
  REQUIRE(file->specs.size() == 2);
  CHECK_FALSE(file->specs[0].valid);
  CHECK(file->specs[1].valid);
  REQUIRE(nested.items().size() == 1);
  CHECK(nested.items()[0].code == "spec.nested-tuple");
  CHECK(nested.items()[0].tensor == std::optional<std::string>("w"));
}
