// The search (src/search/; docs/search.md) on its own, not through the
// command line: tensor classes against the estimate per tensor, the walk
// over classes against the walk over every tensor, and progress reports.

#include "support/test_support.hpp"

#include <shardplan/io.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/models.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/search.hpp>
#include <shardplan/validate.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

using namespace shardplan;

namespace {

using test::model;
using test::preset;

// Plans, validates and estimates `manifest` on `mesh`, its memory facts
// `facts` (with counts when it holds tensor classes); nullopt with the
// first error on a problem.
std::optional<MemoryEstimate> estimate_on(const Manifest& manifest,
                                          const MemoryFacts& facts,
                                          const RuleKeys& keys,
                                          const Mesh& mesh,
                                          const RuleSet& rules,
                                          std::optional<int64_t> experts,
                                          int zero,
                                          Diagnostics& memory_diags) {
  Diagnostics diags;
  ApplyOptions keyed;
  keyed.keys = &keys;
  const std::optional<RulePlan> plan =
      apply_rules(manifest, mesh, rules, diags, keyed);
  REQUIRE(plan);
  const std::vector<const PartitionSpec*> specs = plan->specs();
  const std::vector<TensorSharding> shardings = validate_planned(
      manifest, mesh, specs, rules.source, ValidateOptions{}, diags);
  INFO(test::first_error(diags));
  REQUIRE_FALSE(diags.has_errors());
  MemoryOptions options;
  options.recipe = Recipe::adam;
  options.zero = zero;
  options.experts = experts;
  options.largest = 0;  // a class is listed once: not compared
  options.hbm_bytes = int64_t{95} << 30;
  options.activations = {ActivationLoad{int64_t{3} << 30, 0}};
  options.facts = &facts;
  return estimate_memory(manifest, mesh, shardings, options, memory_diags);
}

std::vector<std::string> messages(const Diagnostics& diags) {
  std::vector<std::string> out;
  for (const Diagnostic& d : diags.items()) {
    out.push_back(d.code + ": " + d.message);
  }
  return out;
}

void check_same_estimate(const MemoryEstimate& a, const MemoryEstimate& b) {
  auto state = [](const StateBytes& s) {
    return std::vector<int64_t>{s.params, s.grads, s.optimizer, s.update};
  };
  CHECK(state(a.per_device) == state(b.per_device));
  CHECK(a.stage == b.stage);
  CHECK(a.expert_rank == b.expert_rank);
  CHECK(a.placement.stages == b.placement.stages);
  CHECK(a.placement.expert_ranks == b.placement.expert_ranks);
  CHECK(a.placement.layers == b.placement.layers);
  CHECK(a.placement.experts == b.placement.experts);
  auto group = [&](const GroupMemory& g) {
    std::vector<int64_t> out{g.stage,
                             g.expert_rank,
                             g.gather_buffer,
                             g.optimizer_step,
                             g.total,
                             g.min_total};
    for (int64_t bytes : state(g.per_device)) {
      out.push_back(bytes);
    }
    return out;
  };
  REQUIRE(a.stages.size() == b.stages.size());
  for (size_t s = 0; s < a.stages.size(); ++s) {
    CHECK(group(a.stages[s]) == group(b.stages[s]));
  }
  CHECK(a.gather_buffer == b.gather_buffer);
  REQUIRE(a.gather_units.size() == b.gather_units.size());
  for (size_t u = 0; u < a.gather_units.size(); ++u) {
    CHECK(a.gather_units[u].name == b.gather_units[u].name);
    CHECK(a.gather_units[u].layer == b.gather_units[u].layer);
    CHECK(a.gather_units[u].bytes == b.gather_units[u].bytes);
  }
  CHECK(a.gather_axes == b.gather_axes);
  CHECK(a.optimizer_step == b.optimizer_step);
  CHECK(a.max_device_total == b.max_device_total);
  CHECK(a.min_device_total == b.min_device_total);
  CHECK(a.fits == b.fits);
  REQUIRE(a.by_dtype.size() == b.by_dtype.size());
  for (size_t d = 0; d < a.by_dtype.size(); ++d) {
    CHECK(a.by_dtype[d].dtype == b.by_dtype[d].dtype);
    CHECK(a.by_dtype[d].tensors == b.by_dtype[d].tensors);
    CHECK(a.by_dtype[d].params_per_device == b.by_dtype[d].params_per_device);
  }
  CHECK(a.uneven_tensors == b.uneven_tensors);
  CHECK(a.scale_tensors == b.scale_tensors);
  CHECK(a.dropped_scale_tensors == b.dropped_scale_tensors);
  CHECK(a.fp8_param_dtype == b.fp8_param_dtype);
}

}  // namespace

TEST_CASE("search: progress is reported after each mesh but the last",
          "[search]") {
  using namespace shardplan;
  Diagnostics diags;
  std::optional<Manifest> manifest =
      read_builtin_model("llama-3-70b", "--model", diags);
  REQUIRE(manifest);
  const ModelConfig model = test::model_config("llama-3-70b");
  const Topology topology = test::topology_of("v5p-256");
  std::optional<RuleSet> rules =
      read_rules_preset("fsdp-tp", Location::of("--rules"), diags);
  REQUIRE(rules);
  SearchOptions options;
  options.axes = {"fsdp", "tp"};
  options.workload.seq = 8192;
  options.workload.batch = 128;
  options.memory.recipe = Recipe::adam;
  options.memory.hbm_bytes =
      static_cast<int64_t>(topology.figures.hbm_bytes_per_device.value);
  std::vector<std::pair<int64_t, int64_t>> calls;
  options.progress = [&](int64_t done, int64_t total) {
    calls.emplace_back(done, total);
  };
  std::optional<SearchResult> result =
      search_meshes(*manifest, model, topology, *rules, options, diags);
  REQUIRE(result);
  REQUIRE(result->meshes == 7);
  REQUIRE(calls.size() == 6);
  CHECK(calls.front() == std::make_pair(int64_t{1}, int64_t{7}));
  CHECK(calls.back() == std::make_pair(int64_t{6}, int64_t{7}));
}

TEST_CASE(
    "presets: an estimate over tensor classes is the estimate per "
    "tensor",
    "[search][classes]") {
  // search plans, validates and estimates each mesh over the manifest's
  // tensor classes (fold_tensor_classes), one member counted as many times
  // as its class has members. Every figure must be the one the manifest's
  // tensors give, on meshes with and without expert ranks and stages, and
  // with ZeRO-3 (which gathers over the data axes too).
  struct Case {
    const char* mesh;
    int64_t expert_ranks;
    int zero;
  };
  const std::vector<Case> cases{{"fsdp:8,tp:8", 1, 0},
                                {"fsdp:4,ep:8,tp:2", 8, 0},
                                {"pp:2,fsdp:4,ep:4,tp:2", 4, 3}};
  for (const RulePreset& p : rule_presets()) {
    const RuleSet rules = preset(p.name);
    for (const BuiltinModel& m : builtin_models()) {
      for (const Case& c : cases) {
        DYNAMIC_SECTION(p.name << " on " << m.name << " with " << c.mesh) {
          const Manifest& manifest = model(m.name);
          Diagnostics diags;
          const std::optional<RuleKeys> keys =
              rule_keys(manifest, rules, diags);
          REQUIRE(keys);
          const MemoryFacts facts = memory_facts(manifest);
          const Mesh mesh = test::mesh_of(c.mesh, 64);
          const TensorClasses classes =
              fold_tensor_classes(manifest, *keys, facts, c.expert_ranks, 0);
          // Every tensor is in one class.
          int64_t members = 0;
          for (int64_t n : classes.facts.counts) {
            members += n;
          }
          CHECK(members == static_cast<int64_t>(manifest.size()));
          CHECK(classes.representatives.size() == classes.facts.counts.size());
          Diagnostics per_tensor_diags;
          Diagnostics folded_diags;
          const std::optional<MemoryEstimate> per_tensor =
              estimate_on(manifest,
                          facts,
                          *keys,
                          mesh,
                          rules,
                          std::nullopt,
                          c.zero,
                          per_tensor_diags);
          const std::optional<MemoryEstimate> folded =
              estimate_on(classes.representatives,
                          classes.facts,
                          classes.keys,
                          mesh,
                          rules,
                          classes.experts,
                          c.zero,
                          folded_diags);
          REQUIRE(per_tensor);
          REQUIRE(folded);
          check_same_estimate(*per_tensor, *folded);
          // The same diagnostics, word for word (memory.uneven counts the
          // tensors with uneven shards).
          CHECK(messages(folded_diags) == messages(per_tensor_diags));
        }
      }
    }
  }
}

TEST_CASE("search: DeepSeek-V3's tensors fold into a few classes",
          "[search][classes]") {
  // Layers 3 to 60 and the MTP layer 61 are MoE layers of 256 experts, each
  // expert stored as gate_proj, up_proj and down_proj with a weight_scale_inv
  // each (README_WEIGHTS.md): 59 x 256 x 6 = 90,624 per-expert tensors. Under
  // fsdp-tp gate_proj and up_proj share a rule key (same patterns, shape
  // [2048, 7168], dtype), and so do their scales: per layer and expert rank,
  // four classes. The other tensors fold alike for any rank count.
  const Manifest& manifest = model("deepseek-v3");
  const RuleSet rules = preset("fsdp-tp");
  Diagnostics diags;
  const std::optional<RuleKeys> keys = rule_keys(manifest, rules, diags);
  REQUIRE(keys);
  const MemoryFacts facts = memory_facts(manifest);
  std::optional<size_t> other_classes;
  for (int64_t ranks : {1, 8, 256}) {
    CAPTURE(ranks);
    const TensorClasses classes =
        fold_tensor_classes(manifest, *keys, facts, ranks, 256);
    CHECK(classes.experts == 256);
    size_t expert_classes = 0;
    int64_t expert_members = 0;
    size_t other = 0;
    int64_t other_members = 0;
    for (size_t c = 0; c < classes.representatives.size(); ++c) {
      const int64_t n = classes.facts.count(c);
      if (classes.facts.names[c].expert) {
        ++expert_classes;
        expert_members += n;
        // One weight (down_proj) or two (gate_proj and up_proj) of the
        // 256 / R experts of a rank.
        CHECK((n == 256 / ranks || n == 2 * 256 / ranks));
      } else {
        ++other;
        other_members += n;
      }
    }
    CHECK(expert_classes == static_cast<size_t>(59 * 4 * ranks));
    CHECK(expert_members == 59 * 256 * 6);
    CHECK(other_members == 91991 - 59 * 256 * 6);
    if (!other_classes) {
      other_classes = other;
    }
    CHECK(other == *other_classes);
    CHECK(other < static_cast<size_t>(other_members));
  }
}

TEST_CASE("search: the folded walk ranks as the per-tensor walk does",
          "[search]") {
  // Every candidate of a search over pp, fsdp, ep and tp for two MoE models
  // (per-expert tensors; DeepSeek-V3's FP8 scales) has the figures of the
  // search that walks every tensor on every mesh.
  const std::vector<std::pair<const char*, const char*>> cases{
      {"mixtral-8x7b-v0.1", "v5p-64"}, {"deepseek-v3", "v5p-512"}};
  for (const auto& [name, topology_name] : cases) {
    DYNAMIC_SECTION(name << " on " << topology_name) {
      Diagnostics diags;
      const Manifest& manifest = model(name);
      const ModelConfig config = test::model_config(name);
      const Topology topology = test::topology_of(topology_name);
      const RuleSet rules = preset("fsdp-tp");
      SearchOptions options;
      options.axes = {"pp", "fsdp", "ep", "tp"};
      options.workload.seq = 4096;
      options.workload.batch = 256;
      options.remat = {"full", "minimal"};
      options.memory.recipe = Recipe::adam;
      options.memory.zero = 1;
      options.memory.hbm_bytes =
          static_cast<int64_t>(topology.figures.hbm_bytes_per_device.value);
      std::optional<SearchResult> folded =
          search_meshes(manifest, config, topology, rules, options, diags);
      options.fold_tensors = false;
      std::optional<SearchResult> per_tensor =
          search_meshes(manifest, config, topology, rules, options, diags);
      REQUIRE(folded);
      REQUIRE(per_tensor);
      CHECK(folded->walked < per_tensor->walked);
      CHECK(per_tensor->walked == per_tensor->tensors * per_tensor->planned);
      REQUIRE(folded->candidates.size() == per_tensor->candidates.size());
      size_t ranked = 0;
      for (size_t i = 0; i < folded->candidates.size(); ++i) {
        const SearchCandidate& a = folded->candidates[i];
        const SearchCandidate& b = per_tensor->candidates[i];
        CAPTURE(a.mesh, a.remat, b.mesh, b.message);
        CHECK(a.mesh == b.mesh);
        CHECK(a.remat == b.remat);
        CHECK(a.rank == b.rank);
        CHECK(a.dropped == b.dropped);
        CHECK(a.message == b.message);
        CHECK(a.max_device_total == b.max_device_total);
        CHECK(a.gather_buffer == b.gather_buffer);
        CHECK(a.per_device.model_states() == b.per_device.model_states());
        CHECK(a.activations == b.activations);
        CHECK(a.step.has_value() == b.step.has_value());
        if (a.step && b.step) {
          CHECK(a.step->step_seconds == b.step->step_seconds);
        }
        ranked += a.rank ? 1U : 0U;
      }
      CHECK(ranked > 0);
      CHECK(folded->dropped_counts == per_tensor->dropped_counts);
    }
  }
}
