// The HTML reports (report/html.cpp, report/html_page.cpp): escaping,
// colours, and the structure of each page. tests/browser/check_html.py
// checks the pages as Chromium renders them.

#include "report/html.hpp"
#include "support/test_support.hpp"

#include <shardplan/report.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

using namespace shardplan;
using namespace shardplan::report_detail;

namespace {

size_t count_of(std::string_view text, std::string_view what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string_view::npos;
       at = text.find(what, at + what.size())) {
    ++n;
  }
  return n;
}

// Everything a page must not hold: a way to load or link to anything.
void check_no_url(const std::string& page) {
  for (std::string_view bad : {"//",
                               "src=",
                               "url(",
                               "@import",
                               "http:",
                               "https:",
                               "<link",
                               "<img",
                               "<iframe"}) {
    INFO(bad);
    CHECK(page.find(bad) == std::string::npos);
  }
  // Every href is a fragment.
  for (size_t at = page.find("href="); at != std::string::npos;
       at = page.find("href=", at + 1)) {
    CHECK(page.compare(at, 7, "href=\"#") == 0);
  }
}

// The values of attribute `name` in `page`, in order.
std::vector<std::string> attributes(const std::string& page,
                                    std::string_view name) {
  std::vector<std::string> out;
  const std::string key = fmt::format(" {}=\"", name);
  for (size_t at = page.find(key); at != std::string::npos;
       at = page.find(key, at + 1)) {
    const size_t start = at + key.size();
    out.push_back(page.substr(start, page.find('"', start) - start));
  }
  return out;
}

}  // namespace

TEST_CASE("html: escapes markup, quotes, slashes and bad bytes",
          "[report][html]") {
  CHECK(html("plain.name_0") == "plain.name_0");
  CHECK(html("a<b>&c") == "a&lt;b&gt;&amp;c");
  CHECK(html(R"(say "hi" 'there')") == "say &quot;hi&quot; &#39;there&#39;");
  // No input spells "//" or closes a tag in the page.
  CHECK(html("</script><script src=//x.js>")
        == "&lt;&#47;script&gt;&lt;script src=&#47;&#47;x.js&gt;");
  // Well-formed UTF-8 is kept; a stray byte and control characters are
  // shown as \xNN, as diagnostics show them.
  CHECK(html("caf\xc3\xa9") == "caf\xc3\xa9");
  CHECK(html("a\xff"
             "b")
        == "a\\xffb");
  CHECK(html("tab\there\n") == "tab\\x09here\\x0a");
  CHECK(html("\xc3") == "\\xc3");  // a truncated sequence
  std::string out = "x";
  append_html(out, "&");
  CHECK(out == "x&amp;");
}

TEST_CASE("html: colours from the published colour-blind-safe sets",
          "[report][html]") {
  // Up to eight coordinates: Okabe-Ito's colours in order, all distinct.
  CHECK(coordinate_colour(0, 4) == "#E69F00");
  CHECK(coordinate_colour(3, 4) == "#F0E442");
  std::set<std::string_view> eight;
  for (int64_t c = 0; c < 8; ++c) {
    eight.insert(coordinate_colour(c, 8));
  }
  CHECK(eight.size() == 8);
  // More: Tol's iridescent from its lightest to its darkest, each of its
  // 23 colours once for 23 coordinates.
  CHECK(coordinate_colour(0, 64) == "#FEFBE9");
  CHECK(coordinate_colour(63, 64) == "#46353A");
  std::set<std::string_view> all;
  for (int64_t c = 0; c < 23; ++c) {
    all.insert(coordinate_colour(c, 23));
  }
  CHECK(all.size() == 23);
  // Text on a fill: dark on light colours, light on dark ones.
  CHECK(text_colour("#F0E442") == "#000");
  CHECK(text_colour("#FEFBE9") == "#000");
  CHECK(text_colour("#000000") == "#fff");
  CHECK(text_colour("#46353A") == "#fff");
  CHECK(text_colour("#0072B2") == "#fff");
}

TEST_CASE("html: mesh draws one cell per device in each grid",
          "[report][html]") {
  // On a topology: where the devices sit and the mesh's grid, both of
  // every device; hosts of v5p (2x2x1 chips) outlined: 64 / 4 = 16.
  const test::CliResult r = test::run_cli(
      test::args("mesh --topology v5p-128 --mesh fsdp:16,tp:4 --format html"));
  REQUIRE(r.code == 0);
  const std::string& page = r.out;
  CHECK(page.starts_with("<!DOCTYPE html>\n"));
  CHECK(page.ends_with("</html>\n"));
  check_no_url(page);
  const std::vector<std::string> devices = attributes(page, "data-device");
  CHECK(devices.size() == 128);
  std::multiset<std::string> ids(devices.begin(), devices.end());
  for (int id = 0; id < 64; ++id) {
    INFO(id);
    CHECK(ids.count(std::to_string(id)) == 2);
  }
  CHECK(count_of(page, "<rect class=\"host\"") == 16);
  // The selector offers every axis, the last chosen; the links' table a
  // row per axis.
  CHECK(count_of(page, "<option value=") == 4);  // two selects of 2 axes
  CHECK(page.find("data-name=\"tp\" ") != std::string::npos);
  CHECK(count_of(page, "<tr data-axis=") == 2);
  // Device 5 = x + 4 (y + 4 z) is chip (1, 1, 0), on host 0 (hosts of
  // 2x2x1 chips, numbered x fastest). tp takes x and fsdp y and z, z
  // fastest (the physical array is indexed [x][y][z]): fsdp = 4 y + z = 4,
  // tp = x = 1, as `mesh --format json` has it (device_ids[4][1] == 5).
  CHECK(page.find("<g class=\"cell\" data-device=\"5\" data-c=\"4,1\"><title>"
                  "device 5; mesh fsdp 4, tp 1; chip (1, 1, 0); host 0"
                  "</title>")
        != std::string::npos);

  // Without a topology: the mesh's grid alone.
  const test::CliResult bare = test::run_cli(
      test::args("mesh --devices 8 --mesh dp:2,tp:4 --format html"));
  REQUIRE(bare.code == 0);
  CHECK(attributes(bare.out, "data-device").size() == 8);
  CHECK(bare.out.find("grid-physical") == std::string::npos);
  // Too many to draw: said, not drawn.
  const test::CliResult big = test::run_cli(
      test::args("mesh --devices 8192 --mesh fsdp:8192 --format html"));
  REQUIRE(big.code == 0);
  CHECK(attributes(big.out, "data-device").empty());
  CHECK(big.out.find("8,192 devices: too many to draw") != std::string::npos);
}

TEST_CASE("html: check's rows, specs, memory bars and diagnostic links",
          "[report][html]") {
  const std::string root = SHARDPLAN_SOURCE_DIR;
  const test::CliResult r = test::run_cli(
      test::args("check --topology v5e-8 --mesh fsdp:2,tp:4 --manifest {} "
                 "--specs {} --format html",
                 root + "/configs/examples/tiny-llama.json",
                 root + "/tests/data/check/tiny-llama.bad-specs.json"));
  REQUIRE(r.code == 1);
  const std::string& page = r.out;
  check_no_url(page);
  // 21 tensors, the two post_attention_layernorm weights folded into one
  // row: 20 rows, each with a spec.
  const std::vector<std::string> tensors = attributes(page, "data-tensor");
  CHECK(tensors.size() == 20);
  CHECK(attributes(page, "data-spec").size() == 20);
  CHECK(std::count(tensors.begin(),
                   tensors.end(),
                   "model.layers.{0..1}.post_attention_layernorm.weight")
        == 1);
  // The specs file gives q_proj of layer 1 as ["fsdp", "tp"].
  CHECK(page.find("data-tensor=\"model.layers.1.self_attn.q_proj.weight\" "
                  "data-spec=\"fsdp,tp\"")
        != std::string::npos);
  // Six diagnostics, five about a tensor of the manifest, each linked to
  // its row (layer 9's up_proj is not in the manifest: no link).
  CHECK(count_of(page, "<li id=\"diag-") == 6);
  CHECK(count_of(page, "class=\"tensor-link\"") == 5);
  // The bar: params and the gather buffer, no state (params-only).
  CHECK(count_of(page, "data-category=\"params\"") == 1);
  CHECK(count_of(page, "data-category=\"gather_buffer\"") == 1);
  CHECK(page.find("data-category=\"grads\"") == std::string::npos);
  CHECK(page.find("<div class=\"verdict bad\">result: 6 errors, 0 "
                  "warnings</div>")
        != std::string::npos);
}

TEST_CASE("html: a tensor name's markup stays text", "[report][html]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "shardplan-html-test";
  std::filesystem::create_directories(dir);
  const std::string manifest = (dir / "m.json").string();
  {
    std::ofstream f(manifest);
    f << R"({"params": [)"
      << R"({"name": "a<script>x</script>", "shape": [8], "dtype": "f32"},)"
      << R"({"name": "b\"&'/c", "shape": [8], "dtype": "f32"}]})";
  }
  const test::CliResult r = test::run_cli(
      test::args("plan --devices 2 --mesh fsdp:2 --manifest {} --rules fsdp "
                 "--format html",
                 manifest));
  std::filesystem::remove_all(dir);
  REQUIRE(r.code == 0);
  CHECK(count_of(r.out, "<script") == 1);  // the page's own
  CHECK(r.out.find("data-tensor=\"a&lt;script&gt;x&lt;&#47;script&gt;\"")
        != std::string::npos);
  CHECK(r.out.find("data-tensor=\"b&quot;&amp;&#39;&#47;c\"")
        != std::string::npos);
  check_no_url(r.out);
}

TEST_CASE("html: bad input writes nothing, to stdout or -o", "[report][html]") {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / "shardplan-html-bad.html";
  std::filesystem::remove(out);
  const test::CliResult r = test::run_cli(test::args(
      "mesh --devices 8 --mesh dp:2,tp:x --format html -o {}", out.string()));
  CHECK(r.code == 2);
  CHECK(r.out.empty());
  CHECK(r.err.find("--mesh:1:9: error:") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(out));
  CHECK(input_error_document("mesh", Format::html, Diagnostics()).empty());
}
