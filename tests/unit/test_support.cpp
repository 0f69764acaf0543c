// The helpers of tests/support/test_support.hpp that tests lean on.

#include "support/test_support.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using shardplan::test::args;
using Strings = std::vector<std::string>;

TEST_CASE("support: args splits a command line on spaces and quotes",
          "[support]") {
  CHECK(args("plan --mesh fsdp:4  --model gpt2 ")
        == Strings{"plan", "--mesh", "fsdp:4", "--model", "gpt2"});
  CHECK(args("").empty());
  CHECK(args("   ").empty());
  // Quotes group words, spaces included, and are dropped; the other quote
  // and '#' are plain characters inside them.
  CHECK(args("--shape '[2048, 8192]' --name \"it's\" '#a' x'y z'")
        == Strings{"--shape", "[2048, 8192]", "--name", "it's", "#a", "xy z"});
  // An empty pair of quotes is an empty word.
  CHECK(args("--dcn-axes '' --shape \"\"")
        == Strings{"--dcn-axes", "", "--shape", ""});
  // No other shell syntax: backslashes, '#', '$' and '~' are characters.
  CHECK(args("a\\b #c $d ~e") == Strings{"a\\b", "#c", "$d", "~e"});
}

TEST_CASE("support: args puts each value in its {} unsplit", "[support]") {
  const std::string path = "/tmp/a dir/it's \"x\".json";
  CHECK(args("manifest --manifest {} --format json", path)
        == Strings{"manifest", "--manifest", path, "--format", "json"});
  CHECK(args("{} --out={}.json '{} {}'", "check", "o", "a", "{}")
        == Strings{"check", "--out=o.json", "a {}"});
  // Anything a std::string is made from: a C string, a std::string.
  const char* command = "mesh";
  CHECK(args("{} --mesh {}", command, std::string("dp:2"))
        == Strings{"mesh", "--mesh", "dp:2"});
}
