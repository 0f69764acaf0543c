// The built-in rule presets (configs/rules/*.json) on the built-in models
// and on small manifests of other architectures (tests/data/manifests/): the
// specs worked out by hand in tests/data/presets_expected.json (how, in
// docs/presets.md), a plan with no errors for every preset, model and
// fitting mesh, and the rules.unsplit-large warnings a preset gives.

#include "support/test_support.hpp"

#include <shardplan/io.hpp>
#include <shardplan/memory.hpp>
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

using test::model;
using test::preset;

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

// The command line's default --warn-replicated, 64 MiB.
constexpr int64_t k_default_warning_bytes = int64_t{64} << 20;

// apply_rules, warning about unsplit tensors from `warning_bytes` as the
// command line does, and validate_planned; fails the test on any error.
struct Planned {
  RulePlan plan;
  std::vector<TensorSharding> shardings;
  std::vector<Diagnostic> unsplit;  // the rules.unsplit-large warnings
};

Planned plan_ok(const Manifest& manifest,
                const Mesh& mesh,
                const RuleSet& rules,
                int64_t warning_bytes = k_default_warning_bytes) {
  Diagnostics diags;
  std::optional<RulePlan> plan =
      apply_rules(manifest,
                  mesh,
                  rules,
                  diags,
                  ApplyOptions{warning_bytes, "--warn-replicated"});
  INFO(test::first_error(diags));
  REQUIRE(plan);
  std::vector<Diagnostic> unsplit;
  for (const Diagnostic& d : diags.items()) {
    if (d.code == "rules.unsplit-large") {
      unsplit.push_back(d);
    }
  }
  const std::vector<const PartitionSpec*> specs = plan->specs();
  ValidateOptions options;
  options.replicated_warning_bytes = 0;
  std::vector<TensorSharding> shardings =
      validate_planned(manifest, mesh, specs, rules.source, options, diags);
  INFO(test::first_error(diags));
  CHECK(diags.error_count() == 0);
  return {*std::move(plan), std::move(shardings), std::move(unsplit)};
}

// The rules.unsplit-large warnings of a plan as "TENSOR over AXIS".
std::vector<std::string> unsplit_of(const Planned& p) {
  std::vector<std::string> out;
  for (const Diagnostic& d : p.unsplit) {
    const size_t at = d.message.find("mesh axis '");
    REQUIRE(at != std::string::npos);
    const size_t from = at + std::string_view("mesh axis '").size();
    REQUIRE(d.tensor);
    out.push_back(*d.tensor + " over "
                  + d.message.substr(from, d.message.find('\'', from) - from));
  }
  return out;
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
      // The tensors the preset leaves unsplit over an axis it splits others
      // over, at the default threshold (none unless listed).
      std::vector<std::string> unsplit;
      if (c.contains("unsplit")) {
        for (const auto& [name, axis] : c["unsplit"].items()) {
          unsplit.push_back(name + " over " + axis.get<std::string>());
        }
      }
      CHECK(unsplit_of(p) == unsplit);
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
          // No built-in model has a tensor of 64 MiB or more that a preset
          // leaves unsplit over an axis it splits others over, but GPT-2's
          // embedding: wte.weight [50257, 768] f32 is 50257 x 768 x 4 =
          // 154,389,504 bytes, and its vocabulary 50257 = 29 x 1733 is odd,
          // so neither fsdp-tp's 'tp' nor maxtext's 'tensor' (through
          // "vocab") divides it, while both split other tensors (c_attn,
          // wpe). Every other tensor a preset keeps whole over such an axis
          // is small (norms, biases, routers) or kept whole on purpose by
          // its rule (DeepSeek-V3's eh_proj, 196 MiB, None,fsdp over tp).
          // wte keeps fsdp on its dim of 768 on every mesh here with an
          // fsdp axis; on tp:6 alone it is fully replicated, which
          // spec.replicated-large reports instead.
          std::vector<std::string> expected;
          const Mesh mesh = test::mesh_of(text, devices);
          const std::string axis = p.name == "fsdp-tp" ? "tp" : "tensor";
          const MeshAxis* split = mesh.find(axis);
          if (m.name == "gpt2" && p.name != "fsdp" && split != nullptr
              && split->size > 1 && mesh.find("fsdp") != nullptr) {
            expected.push_back("wte.weight over " + axis);
          }
          CHECK(unsplit_of(planned) == expected);
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
  // 50257 x 768 x 4 = 154,389,504 bytes, at least 64 MiB, held whole by
  // both tp ranks while tp splits c_attn (the first such tensor): warned,
  // with 50258 = 2 x 25129 as the size that would take tp.
  REQUIRE(p.unsplit.size() == 1);
  CHECK(test::first_line_without_code(p.unsplit[0])
        == "--model gpt2: warning: tensor \"wte.weight\" (154389504 bytes) is "
           "replicated over mesh axis 'tp' (2), which the preset splits other "
           "tensors over (first: \"h.0.attn.c_attn.weight\"); rule #12 asks "
           "for 'tp' on dim 0, but 50257 is not a multiple of 2; padded to "
           "50258 the dim would take it; the warning starts at 67108864 bytes "
           "(--warn-replicated)");
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
  CHECK(p.unsplit.empty());

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

TEST_CASE("presets: a tensor a preset leaves unsplit over tp is warned about",
          "[presets]") {
  // Phi-3-mini on fsdp:2,tp:3: 3 divides qkv_proj's 9216, o_proj's 3072 and
  // the vocabulary 32064 (= 3 x 10688), but not gate_up_proj's 16384 = 2^14
  // nor down_proj's 8192 = 2^13, so those two lose tp (the preset's
  // fallback) and keep fsdp on their other dim.
  // gate_up_proj: 16384 x 3072 x 2 = 100,663,296 bytes >= 64 MiB (67,108,864):
  // warned. down_proj: 3072 x 8192 x 2 = 50,331,648 bytes < 64 MiB: silent.
  const Manifest& phi = manifest_file("manifests/phi-3-mini.layer0.json");
  const Mesh mesh = test::mesh_of("fsdp:2,tp:3", 6);
  const RuleSet fsdp_tp = preset("fsdp-tp");
  Planned p = plan_ok(phi, mesh, fsdp_tp);
  REQUIRE(p.unsplit.size() == 1);
  const Diagnostic& d = p.unsplit[0];
  CHECK(d.severity == Severity::warning);
  CHECK(d.dim == 0);
  // The first tensor split over tp is the embedding; 16386 = 3 x 5462 is
  // the next multiple of 3.
  CHECK(test::first_line_without_code(d)
        == "m.json:/params/3: warning: "
           "tensor \"model.layers.0.mlp.gate_up_proj.weight\" (100663296 "
           "bytes) is replicated over mesh axis 'tp' (3), which the preset "
           "splits other tensors over (first: \"model.embed_tokens.weight\"); "
           "rule #8 asks for 'tp' on dim 0, but 16384 is not a multiple of 3; "
           "padded to 16386 the dim would take it; the warning starts at "
           "67108864 bytes (--warn-replicated)");

  // At 48 MiB = 50,331,648 bytes down_proj is warned about too (from the
  // threshold on, as spec.replicated-large); one byte more and it is not.
  CHECK(unsplit_of(plan_ok(phi, mesh, fsdp_tp, int64_t{48} << 20))
        == std::vector<std::string>{
            "model.layers.0.mlp.gate_up_proj.weight over tp",
            "model.layers.0.mlp.down_proj.weight over tp"});
  CHECK(unsplit_of(plan_ok(phi, mesh, fsdp_tp, (int64_t{48} << 20) + 1))
        == std::vector<std::string>{
            "model.layers.0.mlp.gate_up_proj.weight over tp"});
  // From 1 byte: still only those two. qkv_proj, o_proj and the embeddings
  // use tp; the norms are fully replicated, which spec.replicated-large
  // reports, not this warning.
  CHECK(unsplit_of(plan_ok(phi, mesh, fsdp_tp, 1)).size() == 2);
  // 0 turns it off.
  CHECK(plan_ok(phi, mesh, fsdp_tp, 0).unsplit.empty());

  // On tp:3 alone gate_up_proj is fully replicated: no rules.unsplit-large
  // (spec.replicated-large is the validator's).
  CHECK(plan_ok(phi, test::mesh_of("tp:3", 3), fsdp_tp, 1).unsplit.size() == 0);
}

TEST_CASE(
    "presets: a tensor a preset keeps whole on purpose is not warned "
    "about",
    "[presets]") {
  // DeepSeek-V3's MTP eh_proj [7168, 14336] bf16 = 205,520,896 bytes is a
  // plain nn.Linear in vLLM, replicated over tp; fsdp-tp's rule 14 gives it
  // None,fsdp on purpose while tp splits q_b_proj and the rest.
  const Manifest& ds = model("deepseek-v3");
  Planned p =
      plan_ok(ds, test::mesh_of("fsdp:16,tp:4", 64), preset("fsdp-tp"), 1);
  const size_t eh = index_of(ds, "model.layers.61.eh_proj.weight");
  REQUIRE(to_short(p.plan.spec(eh)) == "None,fsdp");
  REQUIRE(ds.tensors()[eh].num_bytes == int64_t{7168} * 14336 * 2);
  // From 1 byte on, only FP8 scale tensors are warned about, each over
  // fsdp: their small dims lose it (q_b_proj's scale is [192, 12], and 16
  // does not divide 12), while their weights take it.
  REQUIRE_FALSE(p.unsplit.empty());
  for (const Diagnostic& d : p.unsplit) {
    INFO(d.message);
    REQUIRE(d.tensor);
    CHECK(d.tensor->ends_with(".weight_scale_inv"));
    CHECK(d.message.find("mesh axis 'fsdp' (16)") != std::string::npos);
  }
}

TEST_CASE("presets: a tensor no rule of a preset names is warned about",
          "[presets]") {
  // A fused projection fsdp-tp has no rule for reaches its plain-FSDP rule
  // #26, which places tensors by size alone: [16384, 3072] bf16 (96 MiB)
  // takes fsdp on dim 0 (the larger) and stays whole over tp, which the
  // preset uses for o_proj.
  const Manifest m = test::manifest_of(
      R"({"params": [
        {"name": "model.layers.0.self_attn.o_proj.weight", "shape": [3072, 3072], "dtype": "bf16"},
        {"name": "model.layers.0.mlp.fused_in_proj.weight", "shape": [16384, 3072], "dtype": "bf16"}]})");
  Planned p = plan_ok(m, test::mesh_of("fsdp:2,tp:4", 8), preset("fsdp-tp"));
  CHECK(to_short(p.plan.spec(1)) == "fsdp,None");
  REQUIRE(p.unsplit.size() == 1);
  CHECK_FALSE(p.unsplit[0].dim);
  CHECK(test::first_line_without_code(p.unsplit[0])
        == "m.json:/params/1: warning: tensor "
           "\"model.layers.0.mlp.fused_in_proj.weight\" (100663296 bytes) is "
           "replicated over mesh axis 'tp' (4), which the preset splits other "
           "tensors over (first: \"model.layers.0.self_attn.o_proj.weight\"); "
           "rule #26 (fsdp) decided it by size alone, not by what the tensor "
           "is; a rules file with a rule for it can split it over 'tp'; the "
           "warning starts at 67108864 bytes (--warn-replicated)");
}

TEST_CASE("presets: a plan decided per rule key is the plan per name",
          "[presets]") {
  // search computes rule_keys once and plans many meshes with them.
  for (const RulePreset& p : rule_presets()) {
    const RuleSet rules = preset(p.name);
    for (const BuiltinModel& m : builtin_models()) {
      {
        const std::string text = "fsdp:4,ep:8,tp:2";
        // Everything inside the section: Catch runs the test case once per
        // section, and the keys of a large model take a while.
        DYNAMIC_SECTION(p.name << " on " << m.name << " with " << text) {
          const Manifest& manifest = model(m.name);
          Diagnostics diags;
          const std::optional<RuleKeys> keys =
              rule_keys(manifest, rules, diags);
          REQUIRE(keys);
          REQUIRE(keys->key_of.size() == manifest.size());
          CHECK(keys->keys() <= manifest.size());
          const Mesh mesh = test::mesh_of(text, 64);
          Diagnostics by_name_diags;
          Diagnostics by_key_diags;
          ApplyOptions keyed;
          keyed.keys = &*keys;
          const std::optional<RulePlan> by_name =
              apply_rules(manifest, mesh, rules, by_name_diags);
          const std::optional<RulePlan> by_key =
              apply_rules(manifest, mesh, rules, by_key_diags, keyed);
          REQUIRE(by_name);
          REQUIRE(by_key);
          // As many decisions as keys at most: one per key.
          CHECK(by_key->decisions.size() <= keys->keys());
          size_t differ = 0;
          for (size_t t = 0; t < manifest.size(); ++t) {
            differ += by_key->decision(t) == by_name->decision(t) ? 0U : 1U;
          }
          CHECK(differ == 0);
          CHECK(by_key_diags.items().size() == by_name_diags.items().size());
        }
      }
    }
  }
}
