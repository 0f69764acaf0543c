// Placement of tensors on pipeline stages and of whole experts on expert
// ranks, memory per placement group, and the per-layer gather buffer
// (docs/memory.md, "Pipeline stages and expert placement" and "Gather
// buffer"). Every expected value is worked out by hand in the comments.

#include "support/test_support.hpp"

#include <shardplan/memory.hpp>
#include <shardplan/validate.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

using namespace shardplan;

namespace {

// The toy MoE model: 4 decoder layers, 8 routed experts, bf16, in
// checkpoint order. Bytes (2 per element):
//   model.embed_tokens.weight                [64, 16]  2,048
//   per layer i (0..3):
//     model.layers.i.self_attn.q_proj.weight [16, 16]    512
//     model.layers.i.mlp.gate.weight         [8, 16]     256  (the router)
//     model.layers.i.mlp.experts.E.up_proj.weight
//                                            [32, 16]  1,024  (E = 0..7)
//     model.layers.i.input_layernorm.weight  [16]         32
//   model.norm.weight                        [16]         32
//   lm_head.weight                           [64, 16]  2,048
// A layer: 800 bytes of dense weights and 8 x 1,024 = 8,192 of experts.
std::string toy_manifest() {
  std::string json = R"({"params": [
    {"name": "model.embed_tokens.weight", "shape": [64, 16], "dtype": "bf16"})";
  for (int i = 0; i < 4; ++i) {
    json += fmt::format(
        R"(,
    {{"name": "model.layers.{0}.self_attn.q_proj.weight", "shape": [16, 16], "dtype": "bf16"}},
    {{"name": "model.layers.{0}.mlp.gate.weight", "shape": [8, 16], "dtype": "bf16"}})",
        i);
    for (int e = 0; e < 8; ++e) {
      json += fmt::format(
          R"(,
    {{"name": "model.layers.{}.mlp.experts.{}.up_proj.weight", "shape": [32, 16], "dtype": "bf16"}})",
          i,
          e);
    }
    json += fmt::format(
        R"(,
    {{"name": "model.layers.{}.input_layernorm.weight", "shape": [16], "dtype": "bf16"}})",
        i);
  }
  json += R"(,
    {"name": "model.norm.weight", "shape": [16], "dtype": "bf16"},
    {"name": "lm_head.weight", "shape": [64, 16], "dtype": "bf16"}]})";
  return json;
}

struct Laid {
  Manifest manifest;
  Mesh mesh;
  std::vector<TensorSharding> shardings;
};

// `manifest_json` on `mesh`, every tensor replicated except those `specs`
// (a JSON object of name: spec, may be empty) names.
Laid lay(const std::string& manifest_json,
         std::string_view mesh,
         int64_t devices,
         const std::string& specs = "") {
  Laid out{test::manifest_of(manifest_json), test::mesh_of(mesh, devices), {}};
  std::string json = R"({"specs": {)";
  bool first = true;
  for (const Tensor& t : out.manifest.tensors()) {
    if (specs.find(fmt::format("\"{}\"", t.name)) != std::string::npos) {
      continue;
    }
    json += fmt::format(R"x({}"{}": "P()")x", first ? "" : ",", t.name);
    first = false;
  }
  if (!specs.empty()) {
    json += (first ? "" : ",") + specs;
  }
  json += "}}";
  Diagnostics diags;
  out.shardings = validate_specs(
      out.manifest, out.mesh, test::specs_of(json), ValidateOptions{}, diags);
  INFO(test::first_error(diags));
  REQUIRE_FALSE(diags.has_errors());
  return out;
}

MemoryOptions options_for(Recipe recipe = Recipe::params_only) {
  MemoryOptions options;
  options.recipe = recipe;
  options.zero.at = Location::of("--zero");
  options.data_axes.at = Location::of("--data-axes");
  options.stage_axes_at = Location::of("--mesh");
  options.expert_axes_at = Location::of("--mesh");
  return options;
}

MemoryEstimate estimate(const Laid& laid, const MemoryOptions& options) {
  Diagnostics diags;
  std::optional<MemoryEstimate> e =
      estimate_memory(laid.manifest, laid.mesh, laid.shardings, options, diags);
  INFO(test::first_error(diags));
  REQUIRE(e);
  return *e;
}

// The placement of the tensor named `name`.
TensorPlacement where(const MemoryEstimate& e,
                      const Laid& laid,
                      std::string_view name) {
  const Tensor* tensor = laid.manifest.find(name);
  REQUIRE(tensor != nullptr);
  const size_t t = static_cast<size_t>(tensor - laid.manifest.tensors().data());
  REQUIRE(t < e.placement.tensors.size());
  return e.placement.tensors[t];
}

}  // namespace

TEST_CASE("memory: layer and expert indices from tensor names",
          "[memory][placement]") {
  size_t end = 0;
  CHECK(layer_index("model.layers.12.mlp.up_proj.weight", &end) == 12);
  CHECK(end == std::string_view("model.layers.12").size());
  CHECK(layer_index("h.0.attn.c_attn.weight") == 0);  // GPT-2
  CHECK(layer_index("transformer.h.11.mlp.c_fc.bias") == 11);
  CHECK(layer_index("layers.3.attention.wq.weight") == 3);         // Meta
  CHECK(layer_index("encoder.layer.5.output.dense.weight") == 5);  // BERT
  CHECK(layer_index("model.blocks.7.attn.weight") == 7);
  CHECK(layer_index("params/decoder/layers/2/mlp/wi") == 2);
  CHECK(layer_index("model.layers.01.x") == 1);
  CHECK_FALSE(layer_index("model.embed_tokens.weight"));
  CHECK_FALSE(layer_index("decoder.layers.mlp.wi_0.kernel"));  // stacked
  CHECK_FALSE(layer_index("model.layers.-1.x"));
  CHECK_FALSE(layer_index("model.layers.1234567890123456789.x"));  // 19
  CHECK(is_stacked_layers_name("decoder.layers.mlp.wi_0.kernel"));
  CHECK_FALSE(is_stacked_layers_name("model.layers.0.mlp.up_proj.weight"));
  CHECK_FALSE(is_stacked_layers_name("lm_head.weight"));

  CHECK(expert_index("model.layers.3.mlp.experts.17.down_proj.weight") == 17);
  CHECK(expert_index("model.layers.0.block_sparse_moe.experts.7.w1.weight")
        == 7);
  CHECK_FALSE(
      expert_index("model.layers.3.mlp.shared_experts.gate_proj.weight"));
  CHECK_FALSE(expert_index("model.layers.3.mlp.experts.gate_up_proj"));

  CHECK(is_embedding_name("model.embed_tokens.weight"));
  CHECK(is_embedding_name("wte.weight"));
  CHECK(is_embedding_name("transformer.wpe.weight"));
  CHECK(is_embedding_name("gpt_neox.embed_in.weight"));
  CHECK(is_embedding_name("transformer.word_embeddings.weight"));
  CHECK(is_embedding_name("tok_embeddings.weight"));
  CHECK_FALSE(is_embedding_name("embed_out.weight"));  // GPT-NeoX's head
  CHECK_FALSE(is_embedding_name("lm_head.weight"));
  CHECK_FALSE(is_embedding_name("model.norm.weight"));
}

TEST_CASE("memory: pipeline stages place layers by index",
          "[memory][placement]") {
  // pp:2 on the toy model: S = 2, L = 4 (the largest index 3, plus 1).
  // Layer i on stage floor(i x 2 / 4): layers 0, 1 on stage 0, 2, 3 on
  // stage 1; the embedding on stage 0, the final norm and lm_head on 1.
  // Every tensor replicated, params only (2 bytes per element):
  //   stage 0: embedding 2,048 + 2 layers x (800 + 8,192) = 20,032
  //   stage 1: 2 x 8,992 + norm 32 + lm_head 2,048        = 20,064
  const Laid laid = lay(toy_manifest(), "pp:2", 2);
  const MemoryEstimate e = estimate(laid, options_for());
  CHECK(e.placement.stages == 2);
  CHECK(e.placement.layers == 4);
  CHECK_FALSE(e.placement.layers_from_config);
  CHECK(e.placement.expert_ranks == 1);
  CHECK(where(e, laid, "model.embed_tokens.weight")
        == TensorPlacement{0, k_every});
  CHECK(where(e, laid, "model.layers.1.mlp.experts.7.up_proj.weight")
        == TensorPlacement{0, k_every});
  CHECK(where(e, laid, "model.layers.2.self_attn.q_proj.weight")
        == TensorPlacement{1, k_every});
  CHECK(where(e, laid, "model.norm.weight") == TensorPlacement{1, k_every});
  CHECK(where(e, laid, "lm_head.weight") == TensorPlacement{1, k_every});
  REQUIRE(e.stages.size() == 2);
  CHECK(e.stages[0].stage == 0);
  CHECK(e.stages[0].per_device.params == 20'032);
  CHECK(e.stages[0].total == 20'032);
  CHECK(e.stages[1].stage == 1);
  CHECK(e.stages[1].total == 20'064);
  CHECK(e.stage == 1);
  CHECK(e.per_device.params == 20'064);
  CHECK(e.max_device_total == 20'064);
  CHECK(e.min_device_total == 20'064);  // no uneven shards
  // The largest tensors and dtypes are stage 1's: layers 2 and 3 with 11
  // tensors each (q_proj, router, 8 experts, norm), the final norm and
  // lm_head: 24 tensors.
  REQUIRE(e.by_dtype.size() == 1);
  CHECK(e.by_dtype[0].tensors == 24);
  CHECK(e.by_dtype[0].params_per_device == 20'064);
  REQUIRE_FALSE(e.largest.empty());
  CHECK(laid.manifest.tensors()[e.largest[0].tensor].name == "lm_head.weight");
  {
    // 20,000 bytes of HBM, none kept free: stage 1's 20,064 do not fit
    // (stage 0's 20,032 neither; the message names the most loaded).
    MemoryOptions small = options_for();
    small.hbm_bytes.value = 20'000;
    small.headroom = 0;
    Diagnostics diags;
    std::optional<MemoryEstimate> over =
        estimate_memory(laid.manifest, laid.mesh, laid.shardings, small, diags);
    REQUIRE(over);
    CHECK(over->fits == false);
    REQUIRE(diags.items().size() == 1);
    // 20,064 - 20,000 = 64 bytes over, all of it params.
    CHECK(diags.items()[0].message
          == "the most loaded device of stage 1 needs 20064 bytes, over the "
             "20000 bytes usable (20000 bytes of HBM with 0% kept free) by 64 "
             "bytes; its largest part is params, 20064 bytes");
  }

  SECTION("a spec that splits a tensor over the stage axis spreads it") {
    // q_proj of layer 0 split over pp on dim 0: every stage holds half of
    // it (256 bytes) and it is not placed: stage 0 20,032 - 256 = 19,776,
    // stage 1 20,064 + 256 = 20,320.
    const Laid split =
        lay(toy_manifest(),
            "pp:2",
            2,
            R"("model.layers.0.self_attn.q_proj.weight": ["pp", null])");
    const MemoryEstimate s = estimate(split, options_for());
    CHECK(where(s, split, "model.layers.0.self_attn.q_proj.weight")
          == TensorPlacement{k_every, k_every});
    REQUIRE(s.stages.size() == 2);
    CHECK(s.stages[0].total == 19'776);
    CHECK(s.stages[1].total == 20'320);
  }
  SECTION("layers from the model config, an index past them on the last") {
    // With L = 4 from a config, DeepSeek-V3's MTP layer is index L: a
    // tensor of layer 4 (here 16 x 16 bf16, 512 bytes) goes to the last
    // stage, which then holds 20,064 + 512 = 20,576.
    std::string manifest = toy_manifest();
    manifest.insert(manifest.size() - 2,
                    R"(, {"name": "model.layers.4.eh_proj.weight",
                          "shape": [16, 16], "dtype": "bf16"})");
    const Laid mtp = lay(manifest, "pp:2", 2);
    MemoryOptions options = options_for();
    options.layers = 4;
    const MemoryEstimate m = estimate(mtp, options);
    CHECK(m.placement.layers == 4);
    CHECK(m.placement.layers_from_config);
    CHECK(where(m, mtp, "model.layers.4.eh_proj.weight")
          == TensorPlacement{1, k_every});
    CHECK(m.stages[1].total == 20'576);
  }
  SECTION("the caller's roles name the stage axis") {
    // "x" takes no role by name; given as the stage axis it places layers
    // as pp does.
    const Laid x = lay(toy_manifest(), "x:2", 2);
    MemoryOptions options = options_for();
    AxisRoles roles;
    roles.stage = {"x"};
    options.roles = roles;
    const MemoryEstimate m = estimate(x, options);
    CHECK(m.placement.stage_axes == std::vector<std::string>{"x"});
    REQUIRE(m.stages.size() == 2);
    CHECK(m.stages[1].total == 20'064);
    // Without roles, "x" holds replicas: one group holds everything,
    // 2,048 + 4 x 8,992 + 32 + 2,048 = 40,096.
    const MemoryEstimate plain = estimate(x, options_for());
    CHECK_FALSE(plain.placement.placed());
    CHECK(plain.stages.empty());
    CHECK(plain.max_device_total == 40'096);
  }
}

TEST_CASE("memory: expert axes place whole experts", "[memory][placement]") {
  SECTION("ep:4, 8 experts: two per rank") {
    // Expert E on rank floor(E x 4 / 8) = E / 2. Each rank holds 2 of the 8
    // experts of each layer (2 x 1,024 bytes) and every dense tensor:
    //   2,048 + 4 x (800 + 2,048) + 32 + 2,048 = 15,520 on every rank;
    // the ranks tie and rank 0 is reported.
    const Laid laid = lay(toy_manifest(), "ep:4", 4);
    const MemoryEstimate e = estimate(laid, options_for());
    CHECK(e.placement.experts == 8);
    CHECK(e.placement.expert_ranks == 4);
    CHECK(e.placement.stages == 1);
    CHECK(where(e, laid, "model.layers.0.mlp.experts.0.up_proj.weight")
          == TensorPlacement{k_every, 0});
    CHECK(where(e, laid, "model.layers.0.mlp.experts.3.up_proj.weight")
          == TensorPlacement{k_every, 1});
    CHECK(where(e, laid, "model.layers.3.mlp.experts.5.up_proj.weight")
          == TensorPlacement{k_every, 2});
    CHECK(where(e, laid, "model.layers.3.mlp.experts.7.up_proj.weight")
          == TensorPlacement{k_every, 3});
    CHECK(where(e, laid, "model.layers.3.mlp.gate.weight")
          == TensorPlacement{k_every, k_every});
    CHECK(e.expert_rank == 0);
    CHECK(e.max_device_total == 15'520);
    // No stage axis: one entry, the most loaded rank's.
    REQUIRE(e.stages.size() == 1);
    CHECK(e.stages[0].total == 15'520);
  }
  SECTION("ep:3 does not divide 8 experts: contiguous blocks of 3, 3, 2") {
    // floor(E x 3 / 8) for E = 0..7: 0, 0, 0, 1, 1, 1, 2, 2. Ranks 0 and 1
    // hold 3 experts per layer: 2,048 + 4 x (800 + 3,072) + 2,080 = 19,616;
    // rank 2 holds 2: 15,520. Rank 0 is the first most loaded.
    const Laid laid = lay(toy_manifest(), "ep:3", 3);
    const MemoryEstimate e = estimate(laid, options_for());
    CHECK(where(e, laid, "model.layers.0.mlp.experts.2.up_proj.weight")
          == TensorPlacement{k_every, 0});
    CHECK(where(e, laid, "model.layers.0.mlp.experts.3.up_proj.weight")
          == TensorPlacement{k_every, 1});
    CHECK(where(e, laid, "model.layers.0.mlp.experts.6.up_proj.weight")
          == TensorPlacement{k_every, 2});
    CHECK(e.expert_rank == 0);
    CHECK(e.max_device_total == 19'616);
  }
  SECTION("pp:2 and ep:4: groups of a stage and a rank") {
    // Stage 0: embedding 2,048 + layers 0, 1 x (800 + 2,048) = 7,744;
    // stage 1: layers 2, 3 x 2,848 + norm 32 + lm_head 2,048 = 7,776.
    // Within a stage the ranks tie: rank 0.
    const Laid laid = lay(toy_manifest(), "pp:2,ep:4", 8);
    const MemoryEstimate e = estimate(laid, options_for());
    CHECK(e.placement.groups() == 8);
    CHECK(where(e, laid, "model.layers.2.mlp.experts.5.up_proj.weight")
          == TensorPlacement{1, 2});
    CHECK(where(e, laid, "model.layers.1.mlp.experts.7.up_proj.weight")
          == TensorPlacement{0, 3});
    CHECK(where(e, laid, "model.embed_tokens.weight")
          == TensorPlacement{0, k_every});
    CHECK(where(e, laid, "model.layers.3.mlp.gate.weight")
          == TensorPlacement{1, k_every});
    REQUIRE(e.stages.size() == 2);
    CHECK(e.stages[0].total == 7'744);
    CHECK(e.stages[0].expert_rank == 0);
    CHECK(e.stages[1].total == 7'776);
    CHECK(e.stage == 1);
    CHECK(e.expert_rank == 0);
    CHECK(e.max_device_total == 7'776);
    // The largest tensors are the group's 12: layers 2 and 3 with q_proj,
    // router, experts 0 and 1 and a norm each, the final norm and lm_head;
    // lm_head (2,048 bytes) first, then the experts (1,024) in manifest
    // order.
    REQUIRE(e.largest.size() == 12);
    CHECK(laid.manifest.tensors()[e.largest[0].tensor].name
          == "lm_head.weight");
    CHECK(laid.manifest.tensors()[e.largest[1].tensor].name
          == "model.layers.2.mlp.experts.0.up_proj.weight");
  }
  SECTION("a dense model has no experts to place") {
    // Without per-expert tensors ep places nothing and is no error: the
    // 40,096 bytes of the toy model less its experts, 4 x 8,192:
    // 7,328 on every device.
    std::string manifest;
    {
      const Manifest toy = test::manifest_of(toy_manifest());
      manifest = R"({"params": [)";
      bool first = true;
      for (const Tensor& t : toy.tensors()) {
        if (expert_index(t.name)) {
          continue;
        }
        manifest +=
            fmt::format(R"({}{{"name": "{}", "shape": [{}], "dtype": "bf16"}})",
                        first ? "" : ",",
                        t.name,
                        fmt::join(t.shape, ", "));
        first = false;
      }
      manifest += "]}";
    }
    const Laid laid = lay(manifest, "ep:4", 4);
    const MemoryEstimate e = estimate(laid, options_for());
    CHECK(e.placement.experts == 0);
    CHECK(e.max_device_total == 7'328);
  }
}

TEST_CASE("memory: stage and expert axes that do not fit the model",
          "[memory][placement]") {
  auto error_of = [](const Laid& laid, const MemoryOptions& options) {
    Diagnostics diags;
    std::optional<MemoryEstimate> e = estimate_memory(
        laid.manifest, laid.mesh, laid.shardings, options, diags);
    CHECK_FALSE(e);
    REQUIRE(diags.items().size() == 1);
    return render(diags.items()[0]);
  };
  CHECK(error_of(lay(toy_manifest(), "pp:3", 3), options_for())
        == "--mesh: error: stage axis \"pp\" (3 stages) does not divide the "
           "4 decoder layers (the manifest's largest layer index 3, plus 1); "
           "a stage holds L / S whole layers: use stages that divide 4 "
           "[memory.stage-indivisible]");
  MemoryOptions config = options_for();
  config.layers = 6;
  config.stage_axes_at = Location::of("--stage-axes");
  CHECK(error_of(lay(toy_manifest(), "pp:4", 4), config)
        == "--stage-axes: error: stage axis \"pp\" (4 stages) does not "
           "divide the 6 decoder layers (of the model config); a stage holds "
           "L / S whole layers: use stages that divide 6 "
           "[memory.stage-indivisible]");
  CHECK(error_of(lay(toy_manifest(), "ep:16", 16), options_for())
        == "--mesh: error: expert axis \"ep\" (16 ranks) is larger than the "
           "8 experts (the manifest's largest expert index 7, plus 1); a rank "
           "holds whole experts: use at most 8 expert ranks "
           "[memory.expert-axis-too-large]");
  AxisRoles two;
  two.expert = {"ep", "expert"};
  MemoryOptions both = options_for();
  both.roles = two;
  both.experts = 12;
  CHECK(error_of(lay(toy_manifest(), "ep:4,expert:4", 16), both)
        == "--mesh: error: expert axes \"ep\" x \"expert\" (16 ranks) are "
           "larger than the 12 experts (of the model config); a rank holds "
           "whole experts: use at most 12 expert ranks "
           "[memory.expert-axis-too-large]");
}

TEST_CASE("memory: the gather buffer holds a layer and the one prefetched",
          "[memory][gather]") {
  // One 1-D weight per layer split over fsdp (gathered whole at use), the
  // embedding and lm_head split too, the final norm replicated; adam: a
  // gathered element costs 2 bytes of bf16 params and 2 of grads. Elements:
  // embedding 200, layers 0..3: 100, 400, 200, 360, lm_head 100. The
  // manifest lists them out of order (as sorted safetensors headers do);
  // the execution order is the embedding, layers 0..3, then lm_head and the
  // norm in manifest order.
  const std::string manifest = R"({"params": [
    {"name": "lm_head.weight", "shape": [100], "dtype": "bf16"},
    {"name": "model.embed_tokens.weight", "shape": [200], "dtype": "bf16"},
    {"name": "model.layers.3.mlp.w", "shape": [360], "dtype": "bf16"},
    {"name": "model.layers.1.mlp.w", "shape": [400], "dtype": "bf16"},
    {"name": "model.layers.0.mlp.w", "shape": [100], "dtype": "bf16"},
    {"name": "model.layers.2.mlp.w", "shape": [200], "dtype": "bf16"},
    {"name": "model.norm.weight", "shape": [16], "dtype": "bf16"}]})";
  const std::string specs =
      R"("lm_head.weight": ["fsdp"], "model.embed_tokens.weight": ["fsdp"],
         "model.layers.0.mlp.w": ["fsdp"], "model.layers.1.mlp.w": ["fsdp"],
         "model.layers.2.mlp.w": ["fsdp"], "model.layers.3.mlp.w": ["fsdp"])";
  SECTION("one group") {
    // A unit's backward holds its weights and grads (4 bytes an element)
    // and the previous unit's weights, prefetched (2): the embedding 800,
    // layer 0 400 + 400 = 800, layer 1 200 + 1,600 = 1,800, layer 2 800 +
    // 800 = 1,600, layer 3 400 + 1,440 = 1,840, lm_head 720 + 400 = 1,120,
    // the norm (not gathered) 200. The largest, layer 3 with layer 2's
    // weights: 1,840 bytes. (Both with their grads would be 2,240; the
    // largest tensor alone, before issue 18, 1,600.)
    const Laid laid = lay(manifest, "fsdp:2", 2, specs);
    const MemoryEstimate e = estimate(laid, options_for(Recipe::adam));
    CHECK(e.gather_buffer == 1'840);
    REQUIRE(e.gather_units.size() == 2);
    CHECK(e.gather_units[0].name == "model.layers.2");
    CHECK(e.gather_units[0].layer == 2);
    CHECK(e.gather_units[0].bytes == 800);
    CHECK(e.gather_units[1].name == "model.layers.3");
    CHECK(e.gather_units[1].bytes == 1'440);
    CHECK(e.gather_axes == std::vector<std::string>{"fsdp"});
    // Params only: no gradients, 2 bytes per element: 1,200.
    CHECK(estimate(laid, options_for()).gather_buffer == 1'200);
  }
  SECTION("per stage: pairs do not cross stages") {
    // pp:2: stage 0 holds the embedding and layers 0, 1 (800, 800, 1,800
    // bytes: 1,800), stage 1 layers 2, 3, lm_head and the norm (layer 2
    // first, alone, 800; 1,840, 1,120, 200: 1,840). Model states: stage 0
    // holds 200 + 100 + 400 = 700 elements split over fsdp, 350 per device
    // x 16 bytes = 5,600; stage 1 holds 200 + 360 + 100 = 660 elements, 330
    // x 16 = 5,280, plus the norm 16 x 16 = 256: 5,536. Totals: 5,600 +
    // 1,800 = 7,400 and 5,536 + 1,840 = 7,376.
    const Laid laid = lay(manifest, "pp:2,fsdp:2", 4, specs);
    const MemoryEstimate e = estimate(laid, options_for(Recipe::adam));
    REQUIRE(e.stages.size() == 2);
    CHECK(e.stages[0].gather_buffer == 1'800);
    CHECK(e.stages[0].per_device.model_states() == 5'600);
    CHECK(e.stages[0].total == 7'400);
    CHECK(e.stages[1].gather_buffer == 1'840);
    CHECK(e.stages[1].per_device.model_states() == 5'536);
    CHECK(e.stages[1].total == 7'376);
    CHECK(e.stage == 0);
    CHECK(e.gather_buffer == 1'800);
    REQUIRE(e.gather_units.size() == 2);
    CHECK(e.gather_units[0].name == "model.layers.0");
    CHECK(e.gather_units[1].name == "model.layers.1");
  }
  SECTION("a rank's experts are part of its layer") {
    // The toy MoE model on ep:4,fsdp:2 with adam, every expert and the
    // router split over fsdp on dim 0 (gathered whole), the rest replicated
    // (never gathered). A layer on rank r gathers its router (128 elements)
    // and its 2 experts (2 x 512): 1,152 x 4 bytes = 4,608, and the previous
    // layer's weights, 2,304. The embedding and head are replicated: not
    // gathered.
    std::string specs_json;
    const Manifest toy = test::manifest_of(toy_manifest());
    for (const Tensor& t : toy.tensors()) {
      if (expert_index(t.name) || t.name.ends_with("mlp.gate.weight")) {
        specs_json += fmt::format(
            R"({}"{}": ["fsdp", null])", specs_json.empty() ? "" : ",", t.name);
      }
    }
    const Laid laid = lay(toy_manifest(), "ep:4,fsdp:2", 8, specs_json);
    const MemoryEstimate e = estimate(laid, options_for(Recipe::adam));
    CHECK(e.gather_buffer == 6'912);
    REQUIRE(e.gather_units.size() == 2);
    CHECK(e.gather_units[0].name == "model.layers.0");
    CHECK(e.gather_units[0].bytes == 4'608);
    CHECK(e.gather_axes == std::vector<std::string>{"fsdp"});
  }
}

TEST_CASE("memory: one line per pipeline stage in text, stages in JSON",
          "[memory][placement]") {
  // tiny-llama (2 layers) with the fsdp-tp preset on pp:2,fsdp:2,tp:2,
  // adam: every matrix split 4 ways (tp x fsdp), the norms replicated.
  //   stage 0: embed_tokens 256,000 / 4 = 64,000 + layer 0's matrices
  //     724,992 / 4 = 181,248 + 2 norms 512 = 245,760 elements: params and
  //     grads 491,520 bytes (480.00 KiB), optimizer 12 x 245,760 =
  //     2,949,120; gather buffer layer 0's weights and grads with
  //     embed_tokens' weights, prefetched, gathered over fsdp and still
  //     split over tp: 724,992 / 2 x 4 + 256,000 / 2 x 2 = 1,705,984; total
  //     5,638,144 (5.38 MiB). The optimizer step's largest update,
  //     embed_tokens' 64,000 elements in fp32, 256,000 bytes, is below the
  //     gather buffer.
  //   stage 1: layer 1 181,248 + 512 + the final norm 256 + lm_head 64,000
  //     = 246,016 elements: 492,032 (480.50 KiB), optimizer 2,952,192;
  //     gather buffer layer 1 alone, the first of its stage: 724,992 / 2 x
  //     4 = 1,449,984 (lm_head's 512,000 with the norm's weights, which
  //     gather nothing); total 5,386,240 (5.14 MiB).
  const std::string manifest =
      std::string(SHARDPLAN_SOURCE_DIR) + "/configs/examples/tiny-llama.json";
  const std::vector<std::string> args = test::args(
      "plan --devices 8 --mesh pp:2,fsdp:2,tp:2 --manifest {} "
      "--recipe adam",
      manifest);
  const test::CliResult text = test::run_cli(args);
  INFO(text.err);
  REQUIRE(text.code == 0);
  CHECK(text.out.find(
            "  most loaded: stage 0 of 2 (pp)\n"
            "    stage 0 (layer 0): params 480.00 KiB, grads 480.00 KiB, "
            "optimizer 2.81 MiB, gather buffer 1.63 MiB, total 5.38 MiB\n"
            "    stage 1 (layer 1): params 480.50 KiB, grads 480.50 KiB, "
            "optimizer 2.82 MiB, gather buffer 1.38 MiB, total 5.14 MiB\n"
            "  total 5.38 MiB per device")
        != std::string::npos);

  std::vector<std::string> json_args = args;
  json_args.insert(json_args.end(), {"--format", "json"});
  const test::CliResult json = test::run_cli(json_args);
  REQUIRE(json.code == 0);
  const nlohmann::json memory = nlohmann::json::parse(json.out)["memory"];
  CHECK(memory["placement"]
        == nlohmann::json({{"stage_axes", {"pp"}},
                           {"stages", 2},
                           {"layers", 2},
                           {"expert_axes", nlohmann::json::array()},
                           {"expert_ranks", 1},
                           {"experts", 0},
                           {"stage", 0},
                           {"expert_rank", 0}}));
  REQUIRE(memory["stages"].size() == 2);
  CHECK(memory["stages"][0]
        == nlohmann::json({{"stage", 0},
                           {"expert_rank", 0},
                           {"params", 491'520},
                           {"grads", 491'520},
                           {"optimizer", 2'949'120},
                           {"gather_buffer", 1'705'984},
                           {"activations", 0},
                           {"host_offload", 0},
                           {"optimizer_step", 256'000},
                           {"total", 5'638'144}}));
  CHECK(memory["stages"][1]["total"] == 5'386'240);
  CHECK(memory["per_device"]["total"] == 5'638'144);
  CHECK(memory["gather_units"][0]["name"] == "model.embed_tokens.weight");
  CHECK(memory["gather_units"][0]["layer"].is_null());
  CHECK(memory["gather_units"][1]["name"] == "model.layers.0");
}

TEST_CASE("memory: estimates for several activations share the model state",
          "[memory][estimate]") {
  // pp:2 on the toy model, params only: stage 0 holds 20,032 bytes, stage
  // 1 20,064 (see "pipeline stages place layers by index"). Three sets of
  // activations, each estimated alone and together:
  //   none                      -> stage 1 most loaded, 20,064
  //   100 on stage 0, 0 on 1    -> stage 0: 20,032 + 100 = 20,132
  //   50 (7 offloaded) on each  -> stage 1: 20,064 + 50 = 20,114
  const Laid laid = lay(toy_manifest(), "pp:2", 2);
  MemoryOptions options = options_for();
  const std::vector<std::vector<ActivationLoad>> loads{
      {}, {{100, 0, 0, 0}, {0, 0, 0, 0}}, {{50, 0, 0, 7}}};
  const MemoryFacts facts = memory_facts(laid.manifest);
  options.facts = &facts;
  Diagnostics diags;
  std::vector<Diagnostics> found(loads.size());
  const std::vector<std::optional<MemoryEstimate>> together = estimate_memory(
      laid.manifest, laid.mesh, laid.shardings, options, loads, diags, found);
  CHECK(diags.items().empty());
  REQUIRE(together.size() == 3);
  const int64_t totals[] = {20'064, 20'132, 20'114};
  const int64_t stages[] = {1, 0, 1};
  for (size_t v = 0; v < loads.size(); ++v) {
    REQUIRE(together[v]);
    const MemoryEstimate& e = *together[v];
    CHECK(e.max_device_total == totals[v]);
    CHECK(e.stage == stages[v]);
    MemoryOptions alone_options = options_for();
    alone_options.activations = loads[v];
    const MemoryEstimate alone = estimate(laid, alone_options);
    CHECK(alone.max_device_total == e.max_device_total);
    CHECK(alone.stage == e.stage);
    CHECK(alone.activations == e.activations);
    CHECK(alone.host_offload == e.host_offload);
    REQUIRE(alone.by_dtype.size() == e.by_dtype.size());
    CHECK(alone.by_dtype[0].tensors == e.by_dtype[0].tensors);
    CHECK(alone.largest.size() == e.largest.size());
    CHECK(alone.stages.size() == e.stages.size());
  }
  // Stage 0 holds the embedding and layers 0, 1 (11 tensors each): 23.
  CHECK(together[1]->by_dtype[0].tensors == 23);
  CHECK(together[2]->host_offload == 7);
}
