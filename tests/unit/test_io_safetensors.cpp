// safetensors files and indexes: files written here (a length, a header and
// zero bytes for the data), read back through io and through the CLI.

#include "support/test_support.hpp"

#include <shardplan/io.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace shardplan;
namespace fs = std::filesystem;

namespace {

// A fresh empty folder under the system temp folder, removed at the end.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : m_path(fs::temp_directory_path() / ("shardplan_safetensors_" + name)) {
    fs::remove_all(m_path);
    fs::create_directories(m_path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(m_path, ec);
  }
  std::string file(const std::string& name) const {
    return (m_path / name).string();
  }

 private:
  fs::path m_path;
};

// The 8 bytes of `n`, little-endian.
std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (char& c : out) {
    c = static_cast<char>(n & 0xFFU);
    n >>= 8U;
  }
  return out;
}

// Writes `length` (the header's own length unless given), the header, and
// `data_bytes` zero bytes.
void write_raw(const std::string& path,
               const std::string& header,
               uint64_t data_bytes,
               std::optional<uint64_t> length = std::nullopt) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << le64(length.value_or(header.size())) << header
      << std::string(static_cast<size_t>(data_bytes), '\0');
  REQUIRE(out.good());
}

Diagnostic only_error(const Diagnostics& diags) {
  REQUIRE(diags.error_count() >= 1);
  for (const Diagnostic& d : diags.items()) {
    if (d.severity == Severity::error) {
      return d;
    }
  }
  return {};
}

// The first line of the rendered diagnostic without its code or hint.
std::string message_of(Diagnostic d) {
  d.hint.clear();
  return test::first_line_without_code(d);
}

// Two tensors, 12 + 16 = 28 bytes of data, as safetensors writes them.
const std::string k_two_tensors =
    R"({"__metadata__":{"format":"pt"},"a.weight":{"dtype":"BF16","shape":[2,3],)"
    R"("data_offsets":[0,12]},"b.bias":{"dtype":"F32","shape":[4],"data_offsets":[12,28]}})";

}  // namespace

TEST_CASE("safetensors: a written file reads back in header order",
          "[io][safetensors]") {
  TempDir dir("roundtrip");
  // safetensors pads the header with spaces to a multiple of 8 bytes.
  std::string header = k_two_tensors;
  header.append((8 - header.size() % 8) % 8, ' ');
  write_raw(dir.file("m.safetensors"), header, 28);
  Diagnostics diags;
  std::optional<Manifest> m =
      read_safetensors_file(dir.file("m.safetensors"), diags);
  INFO(test::first_error(diags));
  REQUIRE(m);
  REQUIRE(m->size() == 2);
  CHECK(m->tensors()[0].name == "a.weight");
  CHECK(m->tensors()[0].shape == std::vector<int64_t>{2, 3});
  CHECK(m->tensors()[0].dtype == DType::bf16);
  CHECK(m->tensors()[1].name == "b.bias");
  CHECK(m->tensors()[1].dtype == DType::f32);
  CHECK(m->total_bytes() == 28);
  CHECK(m->source == dir.file("m.safetensors"));
  CHECK(diags.items().empty());

  // Header order need not be data order: safetensors sorts by offset.
  write_raw(dir.file("r.safetensors"),
            R"({"late":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
            R"("early":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
            R"("params":{"dtype":"U8","shape":[0],"data_offsets":[12,12]}})",
            12);
  m = read_manifest_path(dir.file("r.safetensors"), diags);
  INFO(test::first_error(diags));
  REQUIRE(m);
  REQUIRE(m->size() == 3);
  CHECK(m->tensors()[0].name == "late");
  CHECK(m->tensors()[2].name
        == "params");  // a tensor name in a file, not the native form
}

TEST_CASE("safetensors: bad files are located errors", "[io][safetensors]") {
  TempDir dir("bad");
  const std::string path = dir.file("bad.safetensors");
  auto error_of = [&] {
    Diagnostics diags;
    CHECK_FALSE(read_safetensors_file(path, diags));
    return only_error(diags);
  };

  SECTION("shorter than the length") {
    std::ofstream(path, std::ios::binary) << "abc";
    Diagnostic d = error_of();
    CHECK(d.code == "safetensors.header-length");
    CHECK(message_of(d)
          == path + ": error: the file has 3 bytes; a safetensors file starts with an "
                    "8-byte header length");
  }
  SECTION("empty") {
    std::ofstream(path, std::ios::binary).flush();
    Diagnostic d = error_of();
    CHECK(d.code == "safetensors.header-length");
    CHECK(d.hint == "the file is empty");
  }
  SECTION("a length that runs past the end (truncated header)") {
    write_raw(path, k_two_tensors, 0, k_two_tensors.size() + 100);
    Diagnostic d = error_of();
    CHECK(d.code == "safetensors.header-length");
    CHECK(message_of(d)
          == path + ": error: header length "
                 + std::to_string(k_two_tensors.size() + 100)
                 + " runs past the end of the file, which has "
                 + std::to_string(k_two_tensors.size())
                 + " bytes after the length");
  }
  SECTION("a length that cuts the header short") {
    write_raw(path, k_two_tensors, 28, k_two_tensors.size() - 10);
    Diagnostic d = error_of();
    CHECK(d.code == "json.syntax");
    CHECK(d.location.source == path);
    CHECK(d.location.line == 1);
  }
  SECTION("a header over safetensors' 100,000,000-byte cap") {
    // Only the length is written: the cap is checked before any header is read.
    write_raw(path, "", 0, 100'000'001);
    Diagnostic d = error_of();
    CHECK(d.code == "safetensors.header-too-large");
    CHECK(message_of(d)
          == path + ": error: header length 100000001 is over safetensors' limit of "
                    "100000000 bytes");
  }
  SECTION("a JSON file is not a .safetensors file") {
    std::ofstream(path, std::ios::binary) << R"({"params": [{"name": "w"}]})";
    Diagnostic d = error_of();
    CHECK(d.code == "safetensors.header-too-large");
    CHECK(d.hint.find("starts with text") != std::string::npos);
  }
  SECTION("the data is truncated: offsets out of bounds") {
    write_raw(path, k_two_tensors, 20);
    Diagnostic d = error_of();
    CHECK(d.code == "safetensors.out-of-bounds");
    CHECK(d.tensor == "b.bias");
    CHECK(message_of(d)
          == path + ":/b.bias/data_offsets: error: data_offsets [12, 28] run past the end "
                    "of the data section, which has 20 bytes");
  }
  SECTION("overlapping offsets") {
    write_raw(path,
              R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
              16);
    Diagnostic d = error_of();
    CHECK(d.code == "safetensors.overlap");
    CHECK(message_of(d)
          == path + ":/b/data_offsets: error: data_offsets [8, 16] overlap those of \"a\", "
                    "[0, 16]");
  }
  SECTION("a gap between tensors") {
    write_raw(path,
              R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
              12);
    Diagnostic d = error_of();
    CHECK(d.code == "safetensors.gap");
    CHECK(message_of(d)
          == path + ":/b/data_offsets: error: data_offsets [8, 12] leave bytes [4, 8) of "
                    "the data section to no tensor");
  }
  SECTION("bytes after the last tensor") {
    write_raw(path, k_two_tensors, 30);
    Diagnostic d = error_of();
    CHECK(d.code == "safetensors.incomplete");
    CHECK(message_of(d)
          == path + ": error: the tensors end at byte 28 of the data section, but it has "
                    "30 bytes: the last 2 belong to no tensor");
  }
  SECTION("offsets that do not span the tensor's bytes") {
    write_raw(
        path, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4);
    Diagnostic d = error_of();
    CHECK(d.code == "manifest.data-offsets");
    CHECK(d.location.pointer == "/a/data_offsets");
  }
  SECTION("invalid UTF-8 in the header") {
    write_raw(
        path,
        "{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        4);
    Diagnostic d = error_of();
    CHECK(d.code == "json.syntax");
    CHECK(message_of(d)
          == path + ":1:4: error: invalid string: ill-formed UTF-8 byte");
  }
  SECTION("a header that is not an object") {
    write_raw(path, "[1, 2]", 0);
    Diagnostic d = error_of();
    CHECK(d.code == "json.type");
    CHECK(message_of(d)
          == path + ":1:1: error: expected a JSON object at the top level, got array");
  }
  SECTION("a missing file names its path") {
    Diagnostics diags;
    CHECK_FALSE(read_safetensors_file(dir.file("none.safetensors"), diags));
    CHECK(message_of(only_error(diags))
          == dir.file("none.safetensors")
                 + ": error: cannot read file: No such file or directory");
  }
}

TEST_CASE("safetensors: read_safetensors_header checks offsets without a file",
          "[io][safetensors]") {
  Diagnostics diags;
  std::optional<Manifest> m =
      read_safetensors_header(k_two_tensors, 28, "h.json", diags);
  REQUIRE(m);
  CHECK(m->size() == 2);
  // Every offset problem of a header in one run.
  Diagnostics all;
  CHECK_FALSE(read_safetensors_header(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
      R"("c":{"dtype":"F32","shape":[1],"data_offsets":[96,100]}})",
      64,
      "h.json",
      all));
  REQUIRE(all.error_count() == 3);
  CHECK(all.items()[0].code == "safetensors.gap");            // a starts at 4
  CHECK(all.items()[1].code == "safetensors.overlap");        // b on a
  CHECK(all.items()[2].code == "safetensors.out-of-bounds");  // c past 64
}

TEST_CASE("safetensors: an index reads each shard's header",
          "[io][safetensors]") {
  TempDir dir("index");
  write_raw(dir.file("model-00001-of-00002.safetensors"),
            R"({"embed":{"dtype":"BF16","shape":[8,4],"data_offsets":[0,64]},)"
            R"("norm":{"dtype":"F32","shape":[4],"data_offsets":[64,80]}})",
            80);
  write_raw(dir.file("model-00002-of-00002.safetensors"),
            R"({"head":{"dtype":"BF16","shape":[8,4],"data_offsets":[0,64]}})",
            64);
  const std::string index = dir.file("model.safetensors.index.json");
  // weight_map order is the manifest's order, across shards.
  std::ofstream(index) << R"({"metadata": {"total_size": 144}, "weight_map": {
    "head": "model-00002-of-00002.safetensors",
    "embed": "model-00001-of-00002.safetensors",
    "norm": "model-00001-of-00002.safetensors"}})";

  Diagnostics diags;
  std::optional<Manifest> m = read_manifest_path(index, diags);
  INFO(test::first_error(diags));
  REQUIRE(m);
  REQUIRE(m->size() == 3);
  CHECK(m->tensors()[0].name == "head");
  CHECK(m->tensors()[1].name == "embed");
  CHECK(m->tensors()[2].name == "norm");
  CHECK(m->tensors()[2].dtype == DType::f32);
  CHECK(m->tensors()[1].pointer() == "/weight_map/embed");
  CHECK(m->total_bytes() == 144);
  CHECK(m->source == index);
  CHECK(diags.items().empty());

  SECTION("a tensor with no elements is warned about once, in its shard") {
    write_raw(dir.file("model-00002-of-00002.safetensors"),
              R"({"head":{"dtype":"BF16","shape":[0,4],"data_offsets":[0,0]}})",
              0);
    Diagnostics d2;
    std::optional<Manifest> empty = read_manifest_path(index, d2);
    REQUIRE(empty);
    CHECK(empty->total_bytes() == 80);  // embed 64 + norm 16
    // The index's total_size, 144, is now 64 more than the tensors' 80
    // (its own warning), and head is empty (one warning, at the shard).
    REQUIRE(d2.items().size() == 2);
    CHECK(d2.items()[0].code == "manifest.empty-tensor");
    CHECK(d2.items()[0].location.source
          == dir.file("model-00002-of-00002.safetensors"));
    CHECK(d2.items()[0].location.pointer == "/head/shape/0");
    CHECK(d2.items()[1].code == "safetensors.total-size");
  }
  SECTION("a folder is read through its index") {
    Diagnostics d2;
    std::optional<Manifest> folder =
        read_manifest_path(fs::path(index).parent_path().string(), d2);
    REQUIRE(folder);
    CHECK(folder->size() == 3);
  }
  SECTION("a missing shard is an error naming it") {
    fs::remove(dir.file("model-00002-of-00002.safetensors"));
    Diagnostics d2;
    CHECK_FALSE(read_manifest_path(index, d2));
    Diagnostic d = only_error(d2);
    CHECK(d.code == "io.read");
    CHECK(message_of(d)
          == index + ":/weight_map/head: error: cannot read shard "
                     "\"model-00002-of-00002.safetensors\" ("
                 + dir.file("model-00002-of-00002.safetensors")
                 + "): No such file or directory");
  }
  SECTION("a tensor its shard does not hold") {
    std::ofstream(index) << R"({"weight_map": {
      "embed": "model-00001-of-00002.safetensors",
      "norms": "model-00001-of-00002.safetensors"}})";
    Diagnostics d2;
    CHECK_FALSE(read_manifest_path(index, d2));
    Diagnostic d = only_error(d2);
    CHECK(d.code == "safetensors.missing-tensor");
    CHECK(message_of(d)
          == index + ":/weight_map/norms: error: weight_map puts \"norms\" in "
                     "\"model-00001-of-00002.safetensors\", whose header has no such tensor");
    CHECK(d.hint == "the shard has \"norm\"");
  }
  SECTION("only the first 20 missing tensors get a hint") {
    // A weight_map naming the wrong shards misses every tensor: each hint
    // costs a pass over the shard's names, so they stop after 20.
    std::string map = R"({"weight_map": {)";
    for (int i = 0; i < 25; ++i) {
      map += fmt::format(
          R"({}"norm{}": "model-00001-of-00002.safetensors")", i ? "," : "", i);
    }
    std::ofstream(index) << map + "}}";
    Diagnostics d2;
    CHECK_FALSE(read_manifest_path(index, d2));
    size_t missing = 0;
    size_t hinted = 0;
    for (const Diagnostic& d : d2.items()) {
      if (d.code == "safetensors.missing-tensor") {
        ++missing;
        hinted += d.hint.empty() ? 0U : 1U;
        CHECK(d.hint == (missing <= 20 ? "the shard has \"norm\"" : ""));
      }
    }
    CHECK(missing == 25);
    CHECK(hinted == 20);
  }
  SECTION("unmapped tensors and a wrong total_size are warnings") {
    std::ofstream(index) << R"({"metadata": {"total_size": 100}, "weight_map": {
      "embed": "model-00001-of-00002.safetensors"}})";
    Diagnostics d2;
    std::optional<Manifest> part = read_manifest_path(index, d2);
    REQUIRE(part);
    CHECK(part->size() == 1);
    CHECK(d2.error_count() == 0);
    REQUIRE(d2.warning_count() == 2);
    CHECK(d2.items()[0].code == "safetensors.unmapped");
    CHECK(d2.items()[0].message
          == "shard \"model-00001-of-00002.safetensors\" holds 1 tensors the index does not "
             "map; they are left out");
    CHECK(d2.items()[1].code == "safetensors.total-size");
    CHECK(d2.items()[1].message
          == "metadata.total_size is 100 bytes, but the tensors have 64");
  }
  SECTION("a bad shard header is reported in the shard") {
    write_raw(dir.file("model-00002-of-00002.safetensors"), "[]", 0);
    Diagnostics d2;
    CHECK_FALSE(read_manifest_path(index, d2));
    CHECK(only_error(d2).location.source
          == dir.file("model-00002-of-00002.safetensors"));
  }
  SECTION("index value errors carry a pointer") {
    std::ofstream(index) << R"({"weight_map": {"embed": 3}})";
    Diagnostics d2;
    CHECK_FALSE(read_manifest_path(index, d2));
    Diagnostic d = only_error(d2);
    CHECK(d.code == "json.type");
    CHECK(d.location.pointer == "/weight_map/embed");
  }
  SECTION("a shard path must stay inside the index's folder") {
    // Judged on the text, before any shard is opened, as huggingface_hub's
    // _get_pointer_path judges a repository's file names. A readable file
    // waits outside the folder, so that only the check refuses it.
    write_raw(
        dir.file("../outside.safetensors"),
        R"({"embed":{"dtype":"BF16","shape":[8,4],"data_offsets":[0,64]}})",
        64);
    const std::string hint =
        "weight_map names files relative to the index's folder, and Hugging "
        "Face's loaders read only inside it";
    struct Bad {
      std::string json_path;  // as the JSON string spells it
      std::string message;
    };
    const std::vector<Bad> bad = {
        {"../outside.safetensors",
         R"(shard path "../outside.safetensors" leads out of the index's folder)"},
        {"sub/../../outside.safetensors",
         R"(shard path "sub/../../outside.safetensors" leads out of the index's folder)"},
        {"./../outside.safetensors",
         R"(shard path "./../outside.safetensors" leads out of the index's folder)"},
        {"/etc/passwd", R"(shard path "/etc/passwd" is absolute)"},
        {"sub/..",
         R"(shard path "sub/.." names the index's folder, not a file)"},
        // JSON's \u0000: a NUL, at which open(2) would cut the name.
        {"model-00001-of-00002.safetensors\\u0000x",
         "shard path \"model-00001-of-00002.safetensors\\x00x\" has a NUL "
         "byte"},
    };
    REQUIRE(bad.size() == 6);
    for (const Bad& b : bad) {
      INFO(b.json_path);
      std::ofstream(index, std::ios::trunc)
          << R"({"weight_map": {"embed": "model-00001-of-00002.safetensors", )"
          << R"("head": ")" << b.json_path << R"("}})";
      Diagnostics d2;
      CHECK_FALSE(read_manifest_path(index, d2));
      Diagnostic d = only_error(d2);
      CHECK(d.code == "index.shard");
      CHECK(d.location.pointer == "/weight_map/head");
      CHECK(d.message == b.message);
      CHECK(d.hint == hint);
    }
    // Inside the folder, a path may go down and back up.
    fs::create_directories(dir.file("sub"));
    std::ofstream(index, std::ios::trunc)
        << R"({"weight_map": {"head": "sub/../model-00002-of-00002.safetensors",)"
        << R"( "embed": "./model-00001-of-00002.safetensors"}})";
    Diagnostics d3;
    std::optional<Manifest> inside = read_manifest_path(index, d3);
    INFO(test::first_error(d3));
    REQUIRE(inside);
    CHECK(inside->size() == 2);
    fs::remove(dir.file("../outside.safetensors"));
  }
  SECTION("read as text, an index asks for its path") {
    Diagnostics d2;
    CHECK_FALSE(read_manifest(test::slurp(index), "i.json", d2));
    CHECK(only_error(d2).code == "manifest.index");
  }
}

TEST_CASE(
    "safetensors: every bad file exits 2 with a located message on each "
    "command",
    "[io][safetensors]") {
  TempDir dir("cli");
  struct Bad {
    std::string name;
    std::string header;
    uint64_t data;
    std::optional<uint64_t> length;
  };
  const std::vector<Bad> bad = {
      {"truncated", k_two_tensors, 10, std::nullopt},
      {"lying-length", k_two_tensors, 0, 4096},
      {"over-cap", "", 0, 100'000'001},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       16,
       std::nullopt},
      {"out-of-bounds",
       R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
       8,
       std::nullopt},
      {"invalid-utf8",
       "{\"\xc3\x28\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"
       "}",
       4,
       std::nullopt},
      {"not-an-object", "\"text\"", 0, std::nullopt},
  };
  for (const Bad& b : bad) {
    DYNAMIC_SECTION(b.name) {
      const std::string path = dir.file(b.name + ".safetensors");
      write_raw(path, b.header, b.data, b.length);
      for (std::vector<std::string> args :
           {test::args("manifest --from-safetensors {}", path),
            test::args("manifest --manifest {}", path),
            test::args("check --devices 1 --mesh dp:1 --manifest {} --specs {}",
                       path,
                       path)}) {
        test::CliResult r = test::run_cli(args);
        INFO(r.err);
        CHECK(r.code == 2);
        CHECK(r.out.empty());
        CHECK(r.err.rfind(path + ":", 0)
              == 0);  // the first line names the file
      }
    }
  }
}

TEST_CASE("safetensors: --manifest takes an index on check",
          "[io][safetensors]") {
  TempDir dir("cli_index");
  write_raw(dir.file("s1.safetensors"),
            R"({"w":{"dtype":"BF16","shape":[8,4],"data_offsets":[0,64]}})",
            64);
  std::ofstream(dir.file("model.safetensors.index.json"))
      << R"({"weight_map": {"w": "s1.safetensors"}})";
  std::ofstream(dir.file("specs.json")) << R"({"specs": {"w": ["dp", null]}})";
  test::CliResult r = test::run_cli(
      test::args("check --devices 2 --mesh dp:2 --manifest {} --specs {} "
                 "--format json",
                 dir.file("model.safetensors.index.json"),
                 dir.file("specs.json")));
  INFO(r.err);
  CHECK(r.code == 0);
  // 8x4 bf16 = 64 bytes, split in two over dp.
  CHECK(r.out.find("\"bytes_per_device\": 32") != std::string::npos);
}

TEST_CASE("safetensors: mutated headers and indexes never crash",
          "[io][safetensors][property]") {
  const std::string index =
      R"({"metadata": {"total_size": 28}, "weight_map": {"a.weight": "s.safetensors"}})";
  auto check =
      [](const Diagnostics& diags, bool read, const std::string& text) {
        INFO("text: " << text);
        INFO(test::first_error(diags));
        CHECK(read == !diags.has_errors());
        for (const Diagnostic& d : diags.items()) {
          CHECK_FALSE(d.location.source.empty());
        }
      };
  for (const std::string* valid : {&k_two_tensors, &index}) {
    for (size_t i = 0; i < valid->size(); ++i) {
      for (char c : {'"', ',', '[', '}', '\xff', '\0', '9', ' '}) {
        std::string mutated = *valid;
        mutated[i] = c;
        Diagnostics header_diags;
        check(header_diags,
              read_safetensors_header(mutated, 28, "h.json", header_diags)
                  .has_value(),
              mutated);
        // As text, a (mutated) index is refused with manifest.index or read
        // as a header; never a crash.
        Diagnostics text_diags;
        check(text_diags,
              read_manifest(mutated, "m.json", text_diags).has_value(),
              mutated);
      }
    }
  }
}
