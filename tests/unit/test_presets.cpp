// The built-in rule presets (configs/rules/*.json) on the built-in models
// and on small manifests of other architectures (tests/data/manifests/): the
// specs worked out by hand in tests/data/presets_expected.json (how, in
// docs/presets.md), and a plan with no errors for every preset, model and
// fitting mesh.

#include "support/test_support.hpp"

#include <shardplan/io.hpp>
#include <shardplan/models.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/validate.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

using namespace shardplan;
using nlohmann::json;

namespace {

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

// Built-in models, read once per test run (deepseek-v3 has 91,991 tensors).
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

// A manifest under tests/data/, read once per test run.
const Manifest& manifest_file(const std::string& relative) {
  static std::map<std::string, Manifest> cache;
  auto it = cache.find(relative);
  if (it == cache.end()) {
    it = cache
             .emplace(relative,
                      test::manifest_of(test::slurp(test::data_path(relative))))
             .first;
  }
  return it->second;
}

PartitionSpec spec_of_json(const json& dims, size_t rank) {
  PartitionSpec spec;
  for (const json& d : dims) {
    DimSharding dim;
    if (d.is_string()) {
      dim.axes.push_back(d.get<std::string>());
    } else if (d.is_array()) {
      for (const json& a : d) {
        dim.axes.push_back(a.get<std::string>());
      }
    }
    spec.dims.push_back(dim);
  }
  return spec.padded(rank);
}

// apply_rules and validate_planned; fails the test on any error.
struct Planned {
  RulePlan plan;
  std::vector<TensorSharding> shardings;
};

Planned plan_ok(const Manifest& manifest,
                const Mesh& mesh,
                const RuleSet& rules) {
  Diagnostics diags;
  std::optional<RulePlan> plan = apply_rules(manifest, mesh, rules, diags);
  INFO(test::first_error(diags));
  REQUIRE(plan);
  const std::vector<const PartitionSpec*> specs = plan->specs();
  ValidateOptions options;
  options.replicated_warning_bytes = 0;
  std::vector<TensorSharding> shardings =
      validate_planned(manifest, mesh, specs, rules.source, options, diags);
  INFO(test::first_error(diags));
  CHECK(diags.error_count() == 0);
  return {*std::move(plan), std::move(shardings)};
}

// The tensor of `manifest` named `name`, as an index.
size_t index_of(const Manifest& manifest, std::string_view name) {
  const Tensor* tensor = manifest.find(name);
  REQUIRE(tensor != nullptr);
  return static_cast<size_t>(tensor - manifest.tensors().data());
}

}  // namespace

TEST_CASE("presets: --rules list names fsdp, fsdp-tp and maxtext",
          "[presets]") {
  std::vector<std::string> names;
  for (const RulePreset& p : rule_presets()) {
    names.push_back(p.name);
    CHECK_FALSE(p.description.empty());
    CHECK(p.rules > 0);
  }
  CHECK(names == std::vector<std::string>{"fsdp", "fsdp-tp", "maxtext"});
  Diagnostics diags;
  CHECK_FALSE(read_rules_preset("fsdp_tp", Location::of("--rules"), diags));
  CHECK(test::first_error(diags)
        == "--rules: error: unknown rule preset \"fsdp_tp\"; the presets are fsdp, fsdp-tp, "
           "maxtext; did you mean \"fsdp-tp\"? [rules.unknown-preset]");
}

TEST_CASE("presets: the specs worked by hand in presets_expected.json",
          "[presets]") {
  const json expected =
      json::parse(test::slurp(test::data_path("presets_expected.json")));
  REQUIRE(expected["cases"].size() >= 31);
  for (const json& c : expected["cases"]) {
    // A built-in model, or a manifest under tests/data/.
    const bool builtin = c.contains("model");
    const std::string source = builtin ? c["model"].get<std::string>()
                                       : c["manifest"].get<std::string>();
    const std::string title = fmt::format("{} on {} with {}",
                                          c["preset"].get<std::string>(),
                                          source,
                                          c["mesh"].get<std::string>());
    DYNAMIC_SECTION(title) {
      const Manifest& manifest =
          builtin ? model(source) : manifest_file(source);
      const Mesh mesh = test::mesh_of(c["mesh"].get<std::string>(),
                                      c["devices"].get<int64_t>());
      const RuleSet rules = preset(c["preset"]);
      Planned p = plan_ok(manifest, mesh, rules);
      REQUIRE(c.contains("specs"));
      REQUIRE_FALSE(c["specs"].empty());  // a case checks something
      for (const auto& [name, dims] : c["specs"].items()) {
        const Tensor* tensor = manifest.find(name);
        INFO(name);
        REQUIRE(tensor != nullptr);
        const size_t t =
            static_cast<size_t>(tensor - manifest.tensors().data());
        CHECK(to_short(p.plan.spec(t))
              == to_short(
                  spec_of_json(dims, static_cast<size_t>(tensor->rank()))));
        if (c.contains("rules") && c["rules"].contains(name)) {
          CHECK(p.plan.rule(t).rule_index() == c["rules"][name].get<size_t>());
        }
      }
    }
  }
}

TEST_CASE("presets: every preset plans every built-in model without an error",
          "[presets][slow]") {
  // Meshes of the usual shapes, with odd and even sizes; axes a preset does
  // not know are held as replicas.
  const std::vector<std::pair<std::string, int64_t>> meshes = {
      {"fsdp:8", 8},
      {"fsdp:16,tp:4", 64},
      {"fsdp:4,ep:8,tp:2", 64},
      {"dp:2,fsdp:-1,tp:8", 256},
      {"fsdp:3", 3},
      {"tp:6", 6},
      {"fsdp:16,tensor:4", 64},
      {"fsdp:8,expert:8,tensor:2", 128},
      {"data:2,fsdp:32,tensor:4", 256},
      {"fsdp:512", 512}};
  for (const RulePreset& p : rule_presets()) {
    const RuleSet rules = preset(p.name);
    for (const BuiltinModel& m : builtin_models()) {
      for (const auto& [text, devices] : meshes) {
        DYNAMIC_SECTION(p.name << " on " << m.name << " with " << text) {
          Planned planned =
              plan_ok(model(m.name), test::mesh_of(text, devices), rules);
          // A sharding for every tensor, each valid.
          CHECK(planned.shardings.size() == model(m.name).size());
          CHECK(std::all_of(planned.shardings.begin(),
                            planned.shardings.end(),
                            [](const TensorSharding& s) { return s.valid(); }));
        }
      }
    }
  }
}

TEST_CASE("presets: fsdp-tp on gpt2 leaves the odd vocabulary unsplit",
          "[presets]") {
  // wte is [50257, 768]: 50257 = 29 x 1733 is odd, so no axis of size 2 or 4
  // splits it; the embedding dim 768 takes fsdp (768 / 4 = 192).
  const Manifest& gpt2 = model("gpt2");
  Planned p = plan_ok(gpt2, test::mesh_of("fsdp:4,tp:2", 8), preset("fsdp-tp"));
  const Tensor* wte = gpt2.find("wte.weight");
  REQUIRE(wte != nullptr);
  const size_t t = static_cast<size_t>(wte - gpt2.tensors().data());
  CHECK(to_short(p.plan.spec(t)) == "None,fsdp");
  // 50257 x 192 elements of f32.
  CHECK(p.shardings[t].bytes_per_device() == int64_t{50257} * 192 * 4);
}

TEST_CASE("presets: fsdp-tp splits fused projections over tp, column-parallel",
          "[presets]") {
  // Phi-3-mini's qkv_proj is [(32 + 2 x 32) x 96, 3072] = [9216, 3072] and
  // its gate_up_proj [2 x 8192, 3072] = [16384, 3072] (nn.Linear: [out,
  // in]). Column-parallel puts tp on the fused out dim and fsdp on the in
  // dim: on fsdp:2,tp:4 each device holds 9216 / 4 x 3072 / 2 = 2304 x 1536
  // and 16384 / 4 x 1536 = 4096 x 1536 bf16 elements. Before the fused
  // names had a rule they reached the plain-FSDP rule: fsdp on the larger
  // dim 0, replicated over tp (fsdp,None, 4608 x 3072 per device).
  const Manifest& phi = manifest_file("manifests/phi-3-mini.layer0.json");
  Planned p = plan_ok(phi, test::mesh_of("fsdp:2,tp:4", 8), preset("fsdp-tp"));
  const size_t qkv = index_of(phi, "model.layers.0.self_attn.qkv_proj.weight");
  const size_t gate_up =
      index_of(phi, "model.layers.0.mlp.gate_up_proj.weight");
  CHECK(to_short(p.plan.spec(qkv)) == "tp,fsdp");
  CHECK(p.shardings[qkv].bytes_per_device() == int64_t{2304} * 1536 * 2);
  CHECK(to_short(p.plan.spec(gate_up)) == "tp,fsdp");
  CHECK(p.shardings[gate_up].bytes_per_device() == int64_t{4096} * 1536 * 2);

  // GPT-2's Conv1D weights are [in, out]: c_attn [768, 3 x 768] and c_fc
  // [768, 3072] take tp on dim 1, 2304 / 4 = 576 and 3072 / 4 = 768, and
  // fsdp on dim 0, 768 / 2 = 384.
  const Manifest& gpt2 = model("gpt2");
  Planned g = plan_ok(gpt2, test::mesh_of("fsdp:2,tp:4", 8), preset("fsdp-tp"));
  CHECK(to_short(g.plan.spec(index_of(gpt2, "h.0.attn.c_attn.weight")))
        == "fsdp,tp");
  CHECK(g.shardings[index_of(gpt2, "h.0.attn.c_attn.weight")].bytes_per_device()
        == int64_t{384} * 576 * 4);
  CHECK(to_short(g.plan.spec(index_of(gpt2, "h.11.mlp.c_fc.weight")))
        == "fsdp,tp");
}
