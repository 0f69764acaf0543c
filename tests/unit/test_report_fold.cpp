// Folding per-tensor rows across layers (report_fold.cpp).

#include <shardplan/report.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace shardplan;

// ---------------------------------------------------------------------------
// Folding rows across layers.

namespace {

// A row that owns its text, each row its own rest string.
struct NameRow {
  std::string name;
  std::string rest;
};

std::vector<std::string> texts_of(const std::vector<FoldedRow>& folded) {
  std::vector<std::string> names;
  for (const FoldedRow& r : folded) {
    names.push_back(fmt::format("{} | {} | {}", r.name, r.rest, r.count));
  }
  return names;
}

std::vector<std::string> folded_names(const std::vector<NameRow>& rows) {
  std::vector<NameRowRef> refs;
  for (const NameRow& r : rows) {
    refs.push_back({r.name, r.rest});
  }
  return texts_of(fold_row_refs(refs));
}

}  // namespace

TEST_CASE("report: rows fold across layers when all but the index agree",
          "[report][fold]") {
  std::vector<NameRow> rows = {{"model.embed_tokens.weight", "tp,fsdp"}};
  for (int layer = 0; layer < 32; ++layer) {
    rows.push_back(
        {fmt::format("model.layers.{}.self_attn.q_proj.weight", layer),
         "tp,fsdp"});
    rows.push_back(
        {fmt::format("model.layers.{}.input_layernorm.weight", layer), "None"});
  }
  rows.push_back({"lm_head.weight", "tp,fsdp"});
  CHECK(folded_names(rows)
        == std::vector<std::string>{
            "model.embed_tokens.weight | tp,fsdp | 1",
            "model.layers.{0..31}.self_attn.q_proj.weight | tp,fsdp | 32",
            "model.layers.{0..31}.input_layernorm.weight | None | 32",
            "lm_head.weight | tp,fsdp | 1"});
}

TEST_CASE("report: folding keeps rows apart that differ elsewhere",
          "[report][fold]") {
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
        == std::vector<std::string>{
            "h.{0..2,5,7..9}.mlp.c_fc.weight | None,tp | 7",
            "h.{3..4}.mlp.c_fc.weight | fsdp,tp | 2"});
}

TEST_CASE("report: experts fold inside layers", "[report][fold]") {
  std::vector<NameRow> rows;
  for (int layer = 3; layer < 5; ++layer) {
    for (int expert = 0; expert < 3; ++expert) {
      rows.push_back(
          {fmt::format("model.layers.{}.mlp.experts.{}.down_proj.weight",
                       layer,
                       expert),
           "x"});
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

TEST_CASE("report: words that look like numbers do not fold",
          "[report][fold]") {
  CHECK(folded_names({{"a.07.b", "x"},
                      {"a.08.b", "x"},
                      {"a.7b", "x"},
                      {"a.8b", "x"},
                      {"w", "x"},
                      {"", "x"}})
        == std::vector<std::string>{"a.07.b | x | 1",
                                    "a.08.b | x | 1",
                                    "a.7b | x | 1",
                                    "a.8b | x | 1",
                                    "w | x | 1",
                                    " | x | 1"});
  // A number of 19 digits is a word too (it would not fit the fold's sets).
  CHECK(folded_names(
            {{"a.1234567890123456789", "x"}, {"a.1234567890123456788", "x"}})
            .size()
        == 2);
  CHECK(fold_row_refs({}).empty());
}

TEST_CASE("report: a number prints as a number, folded or not",
          "[report][fold]") {
  CHECK(folded_names({{"a.-07.b", "x"}, {"a.-7.b", "x"}, {"c.-0", "y"}})
        == std::vector<std::string>{"a.-7.b | x | 2", "c.0 | y | 1"});
}

TEST_CASE("report: rows that view one rest fold as rows with copies of it do",
          "[report][fold]") {
  // The fold knows a shared rest by its address; rows with equal rests at
  // other addresses must fold the same.
  std::vector<std::string> names;
  for (int layer = 0; layer < 4; ++layer) {
    for (int expert = 0; expert < 3; ++expert) {
      names.push_back(fmt::format("layers.{}.experts.{}.w", layer, expert));
    }
  }
  std::vector<NameRow> copies;
  const std::string a = "a";
  const std::string b = "b";
  std::vector<NameRowRef> shared;
  for (const std::string& name : names) {
    copies.push_back({name, name.starts_with("layers.3") ? "b" : "a"});
    shared.push_back({name, name.starts_with("layers.3") ? b : a});
  }
  const std::vector<std::string> from_refs = texts_of(fold_row_refs(shared));
  CHECK(from_refs == folded_names(copies));
  CHECK(from_refs
        == std::vector<std::string>{"layers.{0..2}.experts.{0..2}.w | a | 9",
                                    "layers.3.experts.{0..2}.w | b | 3"});
}

namespace {

// The fold as report_fold.cpp's header describes it, written the plain way:
// names split at '.', a component numeric when it is an integer ("-07" is
// -7; no leading zero otherwise), one pass per numeric component from the
// right, each pass merging rows equal in everything but that component
// (the rest included) into the first of them.
struct RefRow {
  std::vector<std::string> parts;
  std::vector<std::vector<int64_t>> values;  // per part; empty when not numeric
  std::string rest;
  size_t count = 1;
};

bool ref_number(const std::string& s, int64_t& value) {
  const bool shape = !s.empty() && s.size() <= 18
                     && s.find_first_not_of("0123456789", s[0] == '-' ? 1 : 0)
                            == std::string::npos
                     && s != "-" && !(s.size() > 1 && s[0] == '0');
  if (!shape) {
    return false;
  }
  value = std::stoll(s);
  return true;
}

std::string ref_render(const std::vector<int64_t>& v) {
  if (v.size() == 1) {
    return std::to_string(v[0]);
  }
  std::string out = "{";
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) {
      ++j;
    }
    out += (i > 0 ? "," : "") + std::to_string(v[i]);
    if (j > i) {
      out += ".." + std::to_string(v[j]);
    }
    i = j + 1;
  }
  return out + "}";
}

std::vector<std::string> reference_fold(const std::vector<NameRow>& input) {
  std::vector<RefRow> rows;
  size_t passes = 0;
  for (const NameRow& r : input) {
    RefRow row;
    row.rest = r.rest;
    size_t start = 0;
    size_t numerics = 0;
    for (;;) {
      const size_t dot = r.name.find('.', start);
      row.parts.push_back(
          r.name.substr(start, dot == std::string::npos ? dot : dot - start));
      int64_t value = 0;
      row.values.emplace_back();
      if (ref_number(row.parts.back(), value)) {
        row.values.back() = {value};
        row.parts.back() = std::to_string(value);
        ++numerics;
      }
      if (dot == std::string::npos) {
        break;
      }
      start = dot + 1;
    }
    passes = std::max(passes, numerics);
    rows.push_back(std::move(row));
  }
  for (size_t k = 0; k < passes; ++k) {
    std::vector<RefRow> merged;
    for (RefRow& row : rows) {
      std::vector<size_t> numeric;
      for (size_t p = 0; p < row.parts.size(); ++p) {
        if (!row.values[p].empty()) {
          numeric.push_back(p);
        }
      }
      if (k >= numeric.size()) {
        merged.push_back(row);
        continue;
      }
      const size_t j = numeric[numeric.size() - 1 - k];
      auto same = [&](const RefRow& g) {
        if (g.rest != row.rest || g.parts.size() != row.parts.size()) {
          return false;
        }
        for (size_t p = 0; p < row.parts.size(); ++p) {
          if (p != j && g.parts[p] != row.parts[p]) {
            return false;
          }
        }
        return !g.values[j].empty();
      };
      auto g = std::find_if(merged.begin(), merged.end(), same);
      if (g == merged.end()) {
        merged.push_back(row);
        continue;
      }
      std::vector<int64_t>& v = g->values[j];
      v.insert(v.end(), row.values[j].begin(), row.values[j].end());
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
      g->parts[j] = ref_render(v);
      g->count += row.count;
    }
    rows = std::move(merged);
  }
  std::vector<std::string> out;
  for (const RefRow& row : rows) {
    out.push_back(fmt::format(
        "{} | {} | {}", fmt::join(row.parts, "."), row.rest, row.count));
  }
  return out;
}

}  // namespace

TEST_CASE("report: property: folding agrees with the plain fold",
          "[report][fold][property]") {
  const int seed = GENERATE(take(40, random(0, 1 << 30)));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const std::vector<std::string> words = {"model",
                                          "layers",
                                          "experts",
                                          "w",
                                          "07",
                                          "-07",
                                          "-3",
                                          "0",
                                          "x1",
                                          "",
                                          "-",
                                          "1e3"};
  std::vector<NameRow> rows;
  const size_t n = 1 + rng() % 300;
  for (size_t i = 0; i < n; ++i) {
    const size_t parts = 1 + rng() % 5;
    std::vector<std::string> name;
    for (size_t p = 0; p < parts; ++p) {
      // Mostly small numbers, so that rows share all but one of them.
      name.push_back(rng() % 2 == 0 ? std::to_string(rng() % 6)
                                    : words[rng() % words.size()]);
    }
    rows.push_back(
        {fmt::format("{}", fmt::join(name, ".")), rng() % 4 == 0 ? "b" : "a"});
  }
  INFO(fmt::format("{}", fmt::join(folded_names(rows), "\n")));
  CHECK(folded_names(rows) == reference_fold(rows));
}

TEST_CASE("report: a folded row lists the input rows it stands for",
          "[report][fold]") {
  // Rows 0..5: experts {0,1} of layers {0,1,2} in layer-major order, then an
  // unrelated row, then layer 3 with experts {0,1} of another rest; the
  // members of each folded row are the input indices, ascending, whatever
  // the order the passes merged them in.
  std::vector<NameRow> rows;
  for (int layer = 0; layer < 3; ++layer) {
    for (int expert = 0; expert < 2; ++expert) {
      rows.push_back(
          {fmt::format("layers.{}.experts.{}.w", layer, expert), "ep"});
    }
  }
  rows.push_back({"head", "tp"});
  rows.push_back({"layers.3.experts.0.w", "tp"});
  rows.push_back({"layers.3.experts.1.w", "tp"});
  std::vector<NameRowRef> refs;
  for (const NameRow& r : rows) {
    refs.push_back({r.name, r.rest});
  }
  const std::vector<FoldedRow> folded = fold_row_refs(refs);
  REQUIRE(folded.size() == 3);
  CHECK(folded[0].name == "layers.{0..2}.experts.{0..1}.w");
  CHECK(folded[0].members == std::vector<size_t>{0, 1, 2, 3, 4, 5});
  CHECK(folded[1].name == "head");
  CHECK(folded[1].members == std::vector<size_t>{6});
  CHECK(folded[2].name == "layers.3.experts.{0..1}.w");
  CHECK(folded[2].members == std::vector<size_t>{7, 8});
  // Every input row is a member of exactly one row, and count says how
  // many (random names, some folding, some not).
  std::mt19937 rng(7);
  std::vector<NameRow> random_rows;
  for (int i = 0; i < 500; ++i) {
    random_rows.push_back({fmt::format("a.{}.b.{}.c", rng() % 7, rng() % 5),
                           rng() % 3 == 0 ? "x" : "y"});
  }
  std::vector<NameRowRef> random_refs;
  for (const NameRow& r : random_rows) {
    random_refs.push_back({r.name, r.rest});
  }
  std::vector<int> seen(random_rows.size(), 0);
  for (const FoldedRow& r : fold_row_refs(random_refs)) {
    CHECK(r.members.size() == r.count);
    CHECK(std::is_sorted(r.members.begin(), r.members.end()));
    for (size_t m : r.members) {
      ++seen[m];
      CHECK(random_rows[m].rest == r.rest);
    }
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}
