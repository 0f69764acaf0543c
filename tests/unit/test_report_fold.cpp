// Folding per-tensor rows across layers (report_fold.cpp).

#include <shardplan/report.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <string>
#include <vector>

using namespace shardplan;

// ---------------------------------------------------------------------------
// Folding rows across layers.

namespace {

std::vector<std::string> folded_names(const std::vector<NameRow>& rows) {
  std::vector<std::string> names;
  for (const FoldedRow& r : fold_rows(rows)) {
    names.push_back(fmt::format("{} | {} | {}", r.name, r.rest, r.count));
  }
  return names;
}

}  // namespace

TEST_CASE("report: rows fold across layers when all but the index agree", "[report][fold]") {
  std::vector<NameRow> rows = {{"model.embed_tokens.weight", "tp,fsdp"}};
  for (int layer = 0; layer < 32; ++layer) {
    rows.push_back({fmt::format("model.layers.{}.self_attn.q_proj.weight", layer), "tp,fsdp"});
    rows.push_back({fmt::format("model.layers.{}.input_layernorm.weight", layer), "None"});
  }
  rows.push_back({"lm_head.weight", "tp,fsdp"});
  CHECK(folded_names(rows)
        == std::vector<std::string>{
               "model.embed_tokens.weight | tp,fsdp | 1",
               "model.layers.{0..31}.self_attn.q_proj.weight | tp,fsdp | 32",
               "model.layers.{0..31}.input_layernorm.weight | None | 32",
               "lm_head.weight | tp,fsdp | 1"});
}

TEST_CASE("report: folding keeps rows apart that differ elsewhere", "[report][fold]") {
  // Layers 0..2 and 5 have one spec, 3 and 4 another; the sets print as runs.
  std::vector<NameRow> rows;
  for (int layer = 0; layer < 6; ++layer) {
    rows.push_back({fmt::format("h.{}.mlp.c_fc.weight", layer),
                    layer == 3 || layer == 4 ? "fsdp,tp" : "None,tp"});
  }
  rows.push_back({"h.7.mlp.c_fc.weight", "None,tp"});
  rows.push_back({"h.8.mlp.c_fc.weight", "None,tp"});
  rows.push_back({"h.9.mlp.c_fc.weight", "None,tp"});
  CHECK(folded_names(rows)
        == std::vector<std::string>{"h.{0..2,5,7..9}.mlp.c_fc.weight | None,tp | 7",
                                    "h.{3..4}.mlp.c_fc.weight | fsdp,tp | 2"});
}

TEST_CASE("report: experts fold inside layers", "[report][fold]") {
  std::vector<NameRow> rows;
  for (int layer = 3; layer < 5; ++layer) {
    for (int expert = 0; expert < 3; ++expert) {
      rows.push_back(
          {fmt::format("model.layers.{}.mlp.experts.{}.down_proj.weight", layer, expert), "x"});
    }
  }
  // Layer 5 has only two experts: its set differs, so it stays apart.
  rows.push_back({"model.layers.5.mlp.experts.0.down_proj.weight", "x"});
  rows.push_back({"model.layers.5.mlp.experts.1.down_proj.weight", "x"});
  CHECK(folded_names(rows)
        == std::vector<std::string>{
               "model.layers.{3..4}.mlp.experts.{0..2}.down_proj.weight | x | 6",
               "model.layers.5.mlp.experts.{0..1}.down_proj.weight | x | 2"});
}

TEST_CASE("report: words that look like numbers do not fold", "[report][fold]") {
  CHECK(folded_names({{"a.07.b", "x"}, {"a.08.b", "x"}, {"a.7b", "x"}, {"a.8b", "x"},
                      {"w", "x"}, {"", "x"}})
        == std::vector<std::string>{"a.07.b | x | 1", "a.08.b | x | 1", "a.7b | x | 1",
                                    "a.8b | x | 1", "w | x | 1", " | x | 1"});
  // A number of 19 digits is a word too (it would not fit the fold's sets).
  CHECK(folded_names({{"a.1234567890123456789", "x"}, {"a.1234567890123456788", "x"}}).size()
        == 2);
  CHECK(fold_rows({}).empty());
}

TEST_CASE("report: a number prints as a number, folded or not", "[report][fold]") {
  CHECK(folded_names({{"a.-07.b", "x"}, {"a.-7.b", "x"}, {"c.-0", "y"}})
        == std::vector<std::string>{"a.-7.b | x | 2", "c.0 | y | 1"});
}

TEST_CASE("report: rows that view their text fold as copies do", "[report][fold]") {
  std::vector<std::string> names;
  for (int layer = 0; layer < 4; ++layer) {
    for (int expert = 0; expert < 3; ++expert) {
      names.push_back(fmt::format("layers.{}.experts.{}.w", layer, expert));
    }
  }
  std::vector<NameRow> copies;
  std::vector<NameRowRef> refs;
  for (const std::string& name : names) {
    copies.push_back({name, name.starts_with("layers.3") ? "b" : "a"});
  }
  for (const NameRow& row : copies) {
    refs.push_back({row.name, row.rest});
  }
  std::vector<std::string> from_refs;
  for (const FoldedRow& r : fold_row_refs(refs)) {
    from_refs.push_back(fmt::format("{} | {} | {}", r.name, r.rest, r.count));
  }
  CHECK(from_refs == folded_names(copies));
  CHECK(from_refs
        == std::vector<std::string>{"layers.{0..2}.experts.{0..2}.w | a | 9",
                                    "layers.3.experts.{0..2}.w | b | 3"});
}
