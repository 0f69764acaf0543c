// The manifest reader (src/io/manifest.cpp; docs/manifest-format.md): the
// native form and safetensors headers, every spelling of a dim, the pointer
// of each value in its errors, the negative-case file, the bad-input corpus
// and mutated manifests.

#include "support/readers.hpp"
#include "support/test_support.hpp"

#include <shardplan/io.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

using namespace shardplan;

namespace {

using test::files_in;
using test::first_line;
using test::manifest_error;
using test::manifest_ok;
using test::refused;
using test::specs_error;

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
// The negative-case file and the bad-input corpus.

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
