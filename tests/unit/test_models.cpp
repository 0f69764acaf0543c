// Hugging Face config.json -> tensors, and the built-in models. The figures
// are the published checkpoints' (the issue's acceptance list): tensor count,
// elements and bytes of model.safetensors(.index.json).

#include "support/test_support.hpp"

#include <shardplan/io.hpp>
#include <shardplan/models.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

using namespace shardplan;

namespace {

struct Totals {
  int64_t tensors = 0;
  int64_t elements = 0;
  int64_t bytes = 0;
};

std::vector<ModelTensor> builtin(std::string_view name) {
  Diagnostics diags;
  std::optional<std::vector<ModelTensor>> tensors =
      tensors_for_builtin_model(name, "--model", diags);
  INFO((diags.items().empty() ? std::string() : render(diags.items().front())));
  REQUIRE(tensors);
  REQUIRE(diags.items().empty());
  return *tensors;
}

Totals totals(const std::vector<ModelTensor>& tensors) {
  Totals t;
  t.tensors = static_cast<int64_t>(tensors.size());
  for (const ModelTensor& tensor : tensors) {
    std::optional<int64_t> n = checked_product(tensor.shape);
    REQUIRE(n);
    std::optional<int64_t> bytes = bytes_for(*n, tensor.dtype);
    REQUIRE(bytes);
    t.elements += *n;
    t.bytes += *bytes;
  }
  return t;
}

Totals builtin_totals(std::string_view name) {
  return totals(builtin(name));
}

const ModelTensor* find(const std::vector<ModelTensor>& tensors,
                        std::string_view name) {
  for (const ModelTensor& t : tensors) {
    if (t.name == name) {
      return &t;
    }
  }
  return nullptr;
}

// The tensor `name`, its shape and dtype.
void check_tensor(const std::vector<ModelTensor>& tensors,
                  std::string_view name,
                  std::vector<int64_t> shape,
                  DType dtype) {
  INFO(name);
  const ModelTensor* t = find(tensors, name);
  REQUIRE(t != nullptr);
  CHECK(t->shape == shape);
  CHECK(to_string(t->dtype) == to_string(dtype));
}

// The one diagnostic `text` yields, rendered.
std::string error_of(std::string_view text) {
  Diagnostics diags;
  std::optional<std::vector<ModelTensor>> tensors =
      tensors_from_hf_config(text, "config.json", diags);
  CHECK_FALSE(tensors);
  REQUIRE(diags.items().size() == 1);
  return render(diags.items().front());
}

}  // namespace

// ---------------------------------------------------------------------------
// Acceptance figures.

TEST_CASE("models: gpt2 has 124,439,808 parameters", "[models]") {
  Totals t = builtin_totals("gpt2");
  CHECK(t.elements == 124'439'808);
  CHECK(t.tensors == 148);
  CHECK(t.bytes == 4 * t.elements);  // float32
}

TEST_CASE(
    "models: Llama-3-8B is 8,030,261,248 parameters in 291 tensors and "
    "16,060,522,496 bytes",
    "[models]") {
  Totals t = builtin_totals("llama-3-8b");
  CHECK(t.elements == 8'030'261'248);
  CHECK(t.tensors == 291);
  CHECK(t.bytes == 16'060'522'496);
}

// Llama 2 70B, by hand: the embedding and the head 2 x 32000 x 8192, and 80
// layers of q and o 8192 x 8192, k and v 1024 x 8192, the MLP 3 x 8192 x
// 28672 and two norms (855,654,400 each), and the final norm.
TEST_CASE("models: Llama-2-70B has 68,976,648,192 parameters", "[models]") {
  Totals t = builtin_totals("llama-2-70b");
  CHECK(t.elements == 2 * 32'000 * 8192 + 80 * int64_t{855'654'400} + 8192);
  CHECK(t.elements == 68'976'648'192);
  CHECK(t.tensors == 723);
}

TEST_CASE("models: Llama-3-70B has 70,553,706,496 parameters", "[models]") {
  CHECK(builtin_totals("llama-3-70b").elements == 70'553'706'496);
}

TEST_CASE("models: Llama-3.1-405B has 405,853,388,800 parameters", "[models]") {
  CHECK(builtin_totals("llama-3.1-405b").elements == 405'853'388'800);
}

TEST_CASE("models: Mistral-7B-v0.1 is 7,241,732,096 parameters in 291 tensors",
          "[models]") {
  Totals t = builtin_totals("mistral-7b-v0.1");
  CHECK(t.elements == 7'241'732'096);
  CHECK(t.tensors == 291);
}

TEST_CASE("models: Mixtral-8x7B is 46,702,792,704 parameters in 995 tensors",
          "[models]") {
  Totals t = builtin_totals("mixtral-8x7b-v0.1");
  CHECK(t.elements == 46'702'792'704);
  CHECK(t.tensors == 995);
}

TEST_CASE("models: Gemma-7B has 8,537,680,896 parameters", "[models]") {
  CHECK(builtin_totals("gemma-7b").elements == 8'537'680'896);
}

TEST_CASE("models: Gemma-2-2B has 2,614,341,888 parameters", "[models]") {
  CHECK(builtin_totals("gemma-2-2b").elements == 2'614'341'888);
}

TEST_CASE(
    "models: Phi-3-mini-4k is 3,821,079,552 parameters in 195 tensors and "
    "7,642,159,104 bytes",
    "[models]") {
  // The published figure: the Hub's safetensors metadata of
  // microsoft/Phi-3-mini-4k-instruct gives BF16 3,821,079,552 parameters
  // (keras-hub's phi3_mini_4k_instruct_en preset quotes the same), and its
  // model.safetensors.index.json total_size 7,642,159,104 = 2 bytes each.
  // By hand: embedding and head 2 x 32064 x 3072 = 197,001,216; a layer
  // qkv_proj (3 x 3072) x 3072 = 28,311,552 + o_proj 3072 x 3072 =
  // 9,437,184 + gate_up_proj (2 x 8192) x 3072 = 50,331,648 + down_proj
  // 3072 x 8192 = 25,165,824 + two norms 6,144 = 113,252,352; x 32 layers =
  // 3,624,075,264; + the final norm 3,072: 3,821,079,552. Tensors: 3 + 32 x 6.
  Totals t = builtin_totals("phi-3-mini-4k");
  CHECK(t.elements == 3'821'079'552);
  CHECK(t.tensors == 195);
  CHECK(t.bytes == 7'642'159'104);
}

TEST_CASE(
    "models: Qwen2-57B-A14B is 57,408,658,944 parameters in 5,771 tensors",
    "[models]") {
  // The published figure: the Hub's safetensors metadata of
  // Qwen/Qwen2-57B-A14B gives a total of 57,408,658,944 parameters. By hand
  // (hidden 3584, 28 heads of 128, 4 kv heads, 64 experts of 2560, a shared
  // expert of 20480, vocab 151936, 28 layers, every layer sparse):
  //   embedding and head  2 x 151936 x 3584                   1,089,077,248
  //   q 3584 x 3584 + 3584, k and v 2 x (512 x 3584 + 512),
  //   o 3584 x 3584                                          29,364,736
  //   router 64 x 3584                                          229,376
  //   experts 64 x 3 x 2560 x 3584                       1,761,607,680
  //   shared expert 3 x 20480 x 3584                        220,200,960
  //   shared_expert_gate 1 x 3584, two norms 2 x 3584            10,752
  //   a layer                                             2,011,413,504
  // 28 layers 56,319,578,112 + 1,089,077,248 + the final norm 3,584 =
  // 57,408,658,944. Tensors: 3 + 28 x (7 + 1 + 192 + 3 + 1 + 2) = 5,771.
  Totals t = builtin_totals("qwen2-57b-a14b");
  CHECK(t.elements == 57'408'658'944);
  CHECK(t.tensors == 5'771);
  CHECK(t.bytes == 2 * t.elements);  // bfloat16
}

TEST_CASE(
    "models: Qwen1.5-MoE-A2.7B's dims give its published 4,659 tensors and "
    "28,631,568,384 bytes",
    "[models]") {
  // The dims of Qwen/Qwen1.5-MoE-A2.7B's config.json (MHA, 60 experts of
  // 1408, a shared expert of 5632). Its model.safetensors.index.json lists
  // 4,659 tensors (72 q/k/v biases, no o_proj bias, one mlp.gate,
  // shared_expert and shared_expert_gate per layer) and total_size
  // 28,631,568,384 bytes; the model card says 14.3B parameters. By hand: a
  // layer is 4 x 2048^2 + 3 x 2048 (attention) + 60 x 2048 (router) +
  // 60 x 3 x 1408 x 2048 + 3 x 5632 x 2048 + 2048 + 2 x 2048 = 570,560,512;
  // x 24 + 2 x 151936 x 2048 + 2048 = 14,315,784,192 parameters, x 2 bytes
  // = 28,631,568,384. Tensors: 3 + 24 x (7 + 1 + 180 + 3 + 1 + 2) = 4,659.
  Diagnostics diags;
  std::optional<std::vector<ModelTensor>> t = tensors_from_hf_config(
      R"({"architectures": ["Qwen2MoeForCausalLM"], "decoder_sparse_step": 1,
          "hidden_size": 2048, "intermediate_size": 5632,
          "moe_intermediate_size": 1408, "num_attention_heads": 16,
          "num_experts": 60, "num_experts_per_tok": 4,
          "num_hidden_layers": 24, "num_key_value_heads": 16,
          "shared_expert_intermediate_size": 5632,
          "tie_word_embeddings": false, "torch_dtype": "bfloat16",
          "vocab_size": 151936})",
      "config.json",
      diags);
  REQUIRE(t);
  Totals totals_a27 = totals(*t);
  CHECK(totals_a27.tensors == 4'659);
  CHECK(totals_a27.elements == 14'315'784'192);
  CHECK(totals_a27.bytes == 28'631'568'384);
}

TEST_CASE("models: Qwen2.5-7B has 7,615,616,512 parameters", "[models]") {
  CHECK(builtin_totals("qwen2.5-7b").elements == 7'615'616'512);
}

TEST_CASE(
    "models: DeepSeek-V3 as published is 91,991 tensors, "
    "684,531,386,000 elements and 688,574,839,360 bytes",
    "[models]") {
  Totals t = builtin_totals("deepseek-v3");
  CHECK(t.tensors == 91'991);
  CHECK(t.elements == 684'531'386'000);
  CHECK(t.bytes == 688'574'839'360);
}

TEST_CASE("models: the built-in list carries each model's figures",
          "[models]") {
  std::vector<BuiltinModel> models = builtin_models();
  std::vector<std::string> names;
  for (const BuiltinModel& m : models) {
    names.push_back(m.name);
  }
  CHECK(names
        == std::vector<std::string>{"deepseek-v3",
                                    "gemma-2-2b",
                                    "gemma-7b",
                                    "gpt2",
                                    "llama-2-70b",
                                    "llama-3-70b",
                                    "llama-3-8b",
                                    "llama-3.1-405b",
                                    "mistral-7b-v0.1",
                                    "mixtral-8x7b-v0.1",
                                    "phi-3-mini-4k",
                                    "qwen2-57b-a14b",
                                    "qwen2.5-7b"});
  for (const BuiltinModel& m : models) {
    INFO(m.name);
    Totals t = builtin_totals(m.name);
    CHECK(m.parameters == t.elements);
    CHECK(m.tensors == t.tensors);
  }
  CHECK(models[0].architecture == "DeepseekV3ForCausalLM");
  CHECK(models[0].tensors == 91'991);
  CHECK(models[3].architecture == "GPT2LMHeadModel");
  CHECK(models[3].parameters == 124'439'808);
  REQUIRE(builtin_model_config("gpt2"));
  CHECK(builtin_model_config("gpt2")->find("\"n_embd\": 768")
        != std::string_view::npos);
  CHECK_FALSE(builtin_model_config("gpt3"));
}

// ---------------------------------------------------------------------------
// Names, shapes and dtypes against the published checkpoints.

TEST_CASE("models: gpt2 names, Conv1D layout, biases and tied wte",
          "[models]") {
  std::vector<ModelTensor> t = builtin("gpt2");
  CHECK(t.front().name == "wte.weight");
  CHECK(t[1].name == "wpe.weight");
  check_tensor(t, "wte.weight", {50257, 768}, DType::f32);
  check_tensor(t, "wpe.weight", {1024, 768}, DType::f32);
  check_tensor(t, "h.0.ln_1.weight", {768}, DType::f32);
  check_tensor(t, "h.0.attn.c_attn.weight", {768, 2304}, DType::f32);
  check_tensor(t, "h.0.attn.c_attn.bias", {2304}, DType::f32);
  check_tensor(t, "h.0.attn.c_proj.weight", {768, 768}, DType::f32);
  check_tensor(t, "h.11.mlp.c_fc.weight", {768, 3072}, DType::f32);
  check_tensor(t, "h.11.mlp.c_proj.weight", {3072, 768}, DType::f32);
  check_tensor(t, "h.11.mlp.c_proj.bias", {768}, DType::f32);
  CHECK(t.back().name == "ln_f.bias");
  CHECK(find(t, "lm_head.weight") == nullptr);
}

TEST_CASE("models: Llama-3-8B names, GQA shapes and checkpoint order",
          "[models]") {
  std::vector<ModelTensor> t = builtin("llama-3-8b");
  REQUIRE(t.size() == 291);
  CHECK(t[0].name == "model.embed_tokens.weight");
  CHECK(t[1].name == "model.layers.0.self_attn.q_proj.weight");
  CHECK(t[2].name == "model.layers.0.self_attn.k_proj.weight");
  CHECK(t[5].name == "model.layers.0.mlp.gate_proj.weight");
  CHECK(t[9].name == "model.layers.0.post_attention_layernorm.weight");
  CHECK(t[289].name == "model.norm.weight");
  CHECK(t[290].name == "lm_head.weight");
  check_tensor(t, "model.embed_tokens.weight", {128256, 4096}, DType::bf16);
  check_tensor(
      t, "model.layers.31.self_attn.k_proj.weight", {1024, 4096}, DType::bf16);
  check_tensor(
      t, "model.layers.0.mlp.down_proj.weight", {4096, 14336}, DType::bf16);
  check_tensor(t, "lm_head.weight", {128256, 4096}, DType::bf16);
  CHECK(find(t, "model.layers.0.self_attn.q_proj.bias") == nullptr);
}

TEST_CASE("models: Mixtral experts and router", "[models]") {
  std::vector<ModelTensor> t = builtin("mixtral-8x7b-v0.1");
  check_tensor(
      t, "model.layers.0.block_sparse_moe.gate.weight", {8, 4096}, DType::bf16);
  check_tensor(t,
               "model.layers.0.block_sparse_moe.experts.7.w1.weight",
               {14336, 4096},
               DType::bf16);
  check_tensor(t,
               "model.layers.31.block_sparse_moe.experts.0.w2.weight",
               {4096, 14336},
               DType::bf16);
  check_tensor(t,
               "model.layers.31.block_sparse_moe.experts.0.w3.weight",
               {14336, 4096},
               DType::bf16);
  CHECK(find(t, "model.layers.0.mlp.gate_proj.weight") == nullptr);
}

TEST_CASE("models: Qwen2 has q/k/v biases and no o_proj bias", "[models]") {
  std::vector<ModelTensor> t = builtin("qwen2.5-7b");
  check_tensor(t, "model.layers.0.self_attn.q_proj.bias", {3584}, DType::bf16);
  check_tensor(
      t, "model.layers.0.self_attn.k_proj.weight", {512, 3584}, DType::bf16);
  check_tensor(t, "model.layers.0.self_attn.k_proj.bias", {512}, DType::bf16);
  check_tensor(t, "model.layers.27.self_attn.v_proj.bias", {512}, DType::bf16);
  CHECK(find(t, "model.layers.0.self_attn.o_proj.bias") == nullptr);
  check_tensor(t, "lm_head.weight", {152064, 3584}, DType::bf16);
  CHECK(t.size() == 3 + 28 * 12);
}

TEST_CASE("models: Phi-3 fuses qkv_proj and gate_up_proj, without biases",
          "[models]") {
  std::vector<ModelTensor> t = builtin("phi-3-mini-4k");
  // qkv_proj stacks q (32 heads x 96), k and v (32 x 96 each): 9216 rows;
  // gate_up_proj stacks gate and up: 2 x 8192 rows.
  check_tensor(
      t, "model.layers.0.self_attn.qkv_proj.weight", {9216, 3072}, DType::bf16);
  check_tensor(
      t, "model.layers.0.self_attn.o_proj.weight", {3072, 3072}, DType::bf16);
  check_tensor(
      t, "model.layers.31.mlp.gate_up_proj.weight", {16384, 3072}, DType::bf16);
  check_tensor(
      t, "model.layers.31.mlp.down_proj.weight", {3072, 8192}, DType::bf16);
  check_tensor(t, "lm_head.weight", {32064, 3072}, DType::bf16);
  CHECK(find(t, "model.layers.0.self_attn.q_proj.weight") == nullptr);
  CHECK(find(t, "model.layers.0.self_attn.qkv_proj.bias") == nullptr);
  CHECK(find(t, "model.layers.0.mlp.gate_proj.weight") == nullptr);
}

TEST_CASE("models: a small Phi-3 config by hand (GQA, fused projections)",
          "[models]") {
  // hidden 8 with 4 heads: head_dim 2; q 4 x 2 = 8 rows, k and v 2 x 2 = 4
  // rows each: qkv_proj [16, 8]. gate_up_proj [2 x 6, 8]. Phi3Attention
  // creates o_proj before qkv_proj, so named_parameters() lists it first.
  Diagnostics diags;
  std::optional<std::vector<ModelTensor>> t = tensors_from_hf_config(
      R"({"architectures": ["Phi3ForCausalLM"], "vocab_size": 10,
          "hidden_size": 8, "intermediate_size": 6, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2,
          "attention_bias": true})",
      "config.json",
      diags);
  REQUIRE(t);
  std::vector<std::string> names;
  for (const ModelTensor& x : *t) {
    names.push_back(x.name);
    CHECK(x.dtype == DType::bf16);
  }
  CHECK(names
        == std::vector<std::string>{
            "model.embed_tokens.weight",
            "model.layers.0.self_attn.o_proj.weight",
            "model.layers.0.self_attn.qkv_proj.weight",
            "model.layers.0.mlp.gate_up_proj.weight",
            "model.layers.0.mlp.down_proj.weight",
            "model.layers.0.input_layernorm.weight",
            "model.layers.0.post_attention_layernorm.weight",
            "model.layers.1.self_attn.o_proj.weight",
            "model.layers.1.self_attn.qkv_proj.weight",
            "model.layers.1.mlp.gate_up_proj.weight",
            "model.layers.1.mlp.down_proj.weight",
            "model.layers.1.input_layernorm.weight",
            "model.layers.1.post_attention_layernorm.weight",
            "model.norm.weight",
            "lm_head.weight"});
  check_tensor(
      *t, "model.layers.0.self_attn.o_proj.weight", {8, 8}, DType::bf16);
  check_tensor(
      *t, "model.layers.1.self_attn.qkv_proj.weight", {16, 8}, DType::bf16);
  check_tensor(
      *t, "model.layers.0.mlp.gate_up_proj.weight", {12, 8}, DType::bf16);
  check_tensor(*t, "model.layers.0.mlp.down_proj.weight", {8, 6}, DType::bf16);
  // 80 + 2 x (64 + 128 + 96 + 48 + 8 + 8) + 8 + 80.
  CHECK(totals(*t).elements == 872);
}

TEST_CASE("models: Qwen2-MoE router, experts, shared expert and its gate",
          "[models]") {
  std::vector<ModelTensor> t = builtin("qwen2-57b-a14b");
  const DType bf16 = DType::bf16;
  // GQA with q/k/v biases: 28 x 128 = 3584 rows for q, 4 x 128 = 512 for
  // k and v; no o_proj bias.
  check_tensor(t, "model.layers.0.self_attn.q_proj.bias", {3584}, bf16);
  check_tensor(t, "model.layers.0.self_attn.k_proj.weight", {512, 3584}, bf16);
  check_tensor(t, "model.layers.27.self_attn.v_proj.bias", {512}, bf16);
  CHECK(find(t, "model.layers.0.self_attn.o_proj.bias") == nullptr);
  check_tensor(t, "model.layers.0.mlp.gate.weight", {64, 3584}, bf16);
  check_tensor(
      t, "model.layers.0.mlp.experts.63.gate_proj.weight", {2560, 3584}, bf16);
  check_tensor(
      t, "model.layers.27.mlp.experts.0.down_proj.weight", {3584, 2560}, bf16);
  check_tensor(t,
               "model.layers.27.mlp.shared_expert.up_proj.weight",
               {20480, 3584},
               bf16);
  check_tensor(
      t, "model.layers.27.mlp.shared_expert_gate.weight", {1, 3584}, bf16);
  CHECK(find(t, "model.layers.0.mlp.gate_proj.weight") == nullptr);
  CHECK(find(t, "model.layers.0.mlp.experts.64.up_proj.weight") == nullptr);
}

TEST_CASE(
    "models: a small Qwen2-MoE config by hand (mlp_only_layers, "
    "decoder_sparse_step, qkv_bias)",
    "[models]") {
  // hidden 8 with 2 heads: head_dim 4, q 8 rows, k and v 1 x 4 = 4 rows.
  // 2 experts of 4, a shared expert of 6, tied; layer 1 in mlp_only_layers
  // is dense (intermediate 12), layers 0 and 2 sparse.
  const std::string base =
      R"({"architectures": ["Qwen2MoeForCausalLM"], "vocab_size": 10,
          "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 3,
          "num_attention_heads": 2, "num_experts": 2,
          "moe_intermediate_size": 4, "shared_expert_intermediate_size": 6,
          "tie_word_embeddings": true, )";
  Diagnostics diags;
  std::optional<std::vector<ModelTensor>> t = tensors_from_hf_config(
      base + R"("num_key_value_heads": 1, "mlp_only_layers": [1]})",
      "config.json",
      diags);
  REQUIRE(t);
  std::vector<std::string> names;
  for (const ModelTensor& x : *t) {
    names.push_back(x.name);
  }
  // Sparse layers: 7 attention + 1 router + 6 expert + 3 shared + 1 shared
  // gate + 2 norms = 20 tensors; the dense one 7 + 3 + 2 = 12; 1 + 20 + 12
  // + 20 + 1 in all (no lm_head: tied).
  REQUIRE(names.size() == 54);
  CHECK(std::vector<std::string>(names.begin(), names.begin() + 21)
        == std::vector<std::string>{
            "model.embed_tokens.weight",
            "model.layers.0.self_attn.q_proj.weight",
            "model.layers.0.self_attn.q_proj.bias",
            "model.layers.0.self_attn.k_proj.weight",
            "model.layers.0.self_attn.k_proj.bias",
            "model.layers.0.self_attn.v_proj.weight",
            "model.layers.0.self_attn.v_proj.bias",
            "model.layers.0.self_attn.o_proj.weight",
            "model.layers.0.mlp.gate.weight",
            "model.layers.0.mlp.experts.0.gate_proj.weight",
            "model.layers.0.mlp.experts.0.up_proj.weight",
            "model.layers.0.mlp.experts.0.down_proj.weight",
            "model.layers.0.mlp.experts.1.gate_proj.weight",
            "model.layers.0.mlp.experts.1.up_proj.weight",
            "model.layers.0.mlp.experts.1.down_proj.weight",
            "model.layers.0.mlp.shared_expert.gate_proj.weight",
            "model.layers.0.mlp.shared_expert.up_proj.weight",
            "model.layers.0.mlp.shared_expert.down_proj.weight",
            "model.layers.0.mlp.shared_expert_gate.weight",
            "model.layers.0.input_layernorm.weight",
            "model.layers.0.post_attention_layernorm.weight"});
  CHECK(names[28] == "model.layers.1.mlp.gate_proj.weight");
  CHECK(names[29] == "model.layers.1.mlp.up_proj.weight");
  CHECK(names[30] == "model.layers.1.mlp.down_proj.weight");
  CHECK(names[40] == "model.layers.2.mlp.gate.weight");
  CHECK(names.back() == "model.norm.weight");
  check_tensor(
      *t, "model.layers.0.self_attn.k_proj.weight", {4, 8}, DType::bf16);
  check_tensor(*t, "model.layers.0.mlp.gate.weight", {2, 8}, DType::bf16);
  check_tensor(
      *t, "model.layers.2.mlp.experts.1.down_proj.weight", {8, 4}, DType::bf16);
  check_tensor(*t,
               "model.layers.0.mlp.shared_expert.up_proj.weight",
               {6, 8},
               DType::bf16);
  check_tensor(
      *t, "model.layers.0.mlp.shared_expert_gate.weight", {1, 8}, DType::bf16);
  check_tensor(*t, "model.layers.1.mlp.down_proj.weight", {8, 12}, DType::bf16);
  // Attention 64 + 8 + 2 x (32 + 4) + 64 = 208, norms 16. Sparse MLP: router
  // 16 + experts 2 x 3 x 32 + shared 3 x 48 + gate 8 = 360; dense 3 x 96 =
  // 288. 80 + 2 x (208 + 360 + 16) + (208 + 288 + 16) + 8 = 1768.
  CHECK(totals(*t).elements == 1768);

  // decoder_sparse_step 2: layer i is sparse when (i + 1) % 2 == 0, so only
  // layer 1. qkv_bias false drops the q/k/v biases. Without
  // num_key_value_heads Qwen2MoeConfig's default is 16 heads, not
  // num_attention_heads: k_proj has 16 x 4 = 64 rows.
  t = tensors_from_hf_config(
      base + R"("decoder_sparse_step": 2, "qkv_bias": false})",
      "config.json",
      diags);
  REQUIRE(t);
  CHECK(find(*t, "model.layers.0.mlp.gate_proj.weight") != nullptr);
  CHECK(find(*t, "model.layers.1.mlp.gate.weight") != nullptr);
  CHECK(find(*t, "model.layers.1.mlp.gate_proj.weight") == nullptr);
  CHECK(find(*t, "model.layers.2.mlp.gate_proj.weight") != nullptr);
  CHECK(find(*t, "model.layers.0.self_attn.q_proj.bias") == nullptr);
  check_tensor(
      *t, "model.layers.0.self_attn.k_proj.weight", {64, 8}, DType::bf16);

  // num_experts 0: every layer dense, and no expert sizes needed.
  t = tensors_from_hf_config(
      R"({"architectures": ["Qwen2MoeForCausalLM"], "vocab_size": 10,
          "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 2,
          "num_attention_heads": 2, "num_key_value_heads": 2,
          "num_experts": 0})",
      "config.json",
      diags);
  REQUIRE(t);
  CHECK(t->size() == 3 + 2 * 12);
  CHECK(diags.items().empty());
}

TEST_CASE(
    "models: Gemma ties embeddings and takes head_dim 256 from the config",
    "[models]") {
  std::vector<ModelTensor> t = builtin("gemma-7b");
  CHECK(t.size() == 2 + 28 * 9);
  check_tensor(t, "model.embed_tokens.weight", {256000, 3072}, DType::bf16);
  check_tensor(
      t, "model.layers.0.self_attn.q_proj.weight", {4096, 3072}, DType::bf16);
  check_tensor(
      t, "model.layers.0.self_attn.o_proj.weight", {3072, 4096}, DType::bf16);
  CHECK(find(t, "lm_head.weight") == nullptr);
  CHECK(t.back().name == "model.norm.weight");
}

TEST_CASE("models: Gemma-2 has four norms per layer and float32 weights",
          "[models]") {
  std::vector<ModelTensor> t = builtin("gemma-2-2b");
  CHECK(t.size() == 2 + 26 * 11);
  check_tensor(
      t, "model.layers.0.self_attn.q_proj.weight", {2048, 2304}, DType::f32);
  check_tensor(
      t, "model.layers.0.self_attn.k_proj.weight", {1024, 2304}, DType::f32);
  check_tensor(t,
               "model.layers.25.pre_feedforward_layernorm.weight",
               {2304},
               DType::f32);
  check_tensor(t,
               "model.layers.25.post_feedforward_layernorm.weight",
               {2304},
               DType::f32);
  CHECK(t[10].name == "model.layers.0.pre_feedforward_layernorm.weight");
  CHECK(find(t, "lm_head.weight") == nullptr);
}

TEST_CASE("models: DeepSeek-V3 MLA, experts, FP8 scales and the MTP layer",
          "[models]") {
  std::vector<ModelTensor> t = builtin("deepseek-v3");
  const DType f8 = DType::f8_e4m3;
  // MLA.
  check_tensor(t, "model.layers.0.self_attn.q_a_proj.weight", {1536, 7168}, f8);
  check_tensor(t,
               "model.layers.0.self_attn.q_a_proj.weight_scale_inv",
               {12, 56},
               DType::f32);
  check_tensor(
      t, "model.layers.0.self_attn.q_a_layernorm.weight", {1536}, DType::bf16);
  check_tensor(
      t, "model.layers.0.self_attn.q_b_proj.weight", {24576, 1536}, f8);
  check_tensor(
      t, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", {576, 7168}, f8);
  check_tensor(t,
               "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv",
               {5, 56},
               DType::f32);
  check_tensor(
      t, "model.layers.0.self_attn.kv_b_proj.weight", {32768, 512}, f8);
  check_tensor(t,
               "model.layers.0.self_attn.kv_b_proj.weight_scale_inv",
               {256, 4},
               DType::f32);
  check_tensor(t, "model.layers.0.self_attn.o_proj.weight", {7168, 16384}, f8);
  // first_k_dense_replace = 3: layers 0-2 dense, 3 on MoE.
  check_tensor(t, "model.layers.2.mlp.down_proj.weight", {7168, 18432}, f8);
  check_tensor(t,
               "model.layers.2.mlp.down_proj.weight_scale_inv",
               {56, 144},
               DType::f32);
  CHECK(find(t, "model.layers.2.mlp.gate.weight") == nullptr);
  CHECK(find(t, "model.layers.3.mlp.gate_proj.weight") == nullptr);
  check_tensor(t, "model.layers.3.mlp.gate.weight", {256, 7168}, DType::bf16);
  check_tensor(
      t, "model.layers.3.mlp.gate.e_score_correction_bias", {256}, DType::f32);
  check_tensor(
      t, "model.layers.3.mlp.experts.255.down_proj.weight", {7168, 2048}, f8);
  check_tensor(t,
               "model.layers.60.mlp.experts.0.up_proj.weight_scale_inv",
               {16, 56},
               DType::f32);
  check_tensor(t,
               "model.layers.3.mlp.shared_experts.gate_proj.weight",
               {2048, 7168},
               f8);
  CHECK(find(t, "model.layers.3.mlp.gate.weight_scale_inv") == nullptr);
  // The MTP layer.
  check_tensor(
      t, "model.layers.61.embed_tokens.weight", {129280, 7168}, DType::bf16);
  check_tensor(t, "model.layers.61.enorm.weight", {7168}, DType::bf16);
  check_tensor(t, "model.layers.61.hnorm.weight", {7168}, DType::bf16);
  check_tensor(t, "model.layers.61.eh_proj.weight", {7168, 14336}, DType::bf16);
  CHECK(find(t, "model.layers.61.eh_proj.weight_scale_inv") == nullptr);
  check_tensor(
      t, "model.layers.61.mlp.experts.0.gate_proj.weight", {2048, 7168}, f8);
  check_tensor(
      t, "model.layers.61.shared_head.norm.weight", {7168}, DType::bf16);
  check_tensor(t,
               "model.layers.61.shared_head.head.weight",
               {129280, 7168},
               DType::bf16);
  CHECK(find(t, "model.layers.62.enorm.weight") == nullptr);
  CHECK(t.front().name == "model.embed_tokens.weight");
  CHECK(t[t.size() - 2].name == "model.norm.weight");
  CHECK(t.back().name == "lm_head.weight");
}

TEST_CASE("models: without quantization_config DeepSeek-V3 is all bf16",
          "[models]") {
  std::string text(*builtin_model_config("deepseek-v3"));
  const size_t from = text.find("  \"quantization_config\"");
  const size_t to = text.find("  \"rms_norm_eps\"");
  REQUIRE(from != std::string::npos);
  text.erase(from, to - from);
  Diagnostics diags;
  std::optional<std::vector<ModelTensor>> t =
      tensors_from_hf_config(text, "config.json", diags);
  REQUIRE(t);
  Totals totals_bf16 = totals(*t);
  // 91,991 minus one scale per FP8 weight: 8 in each of the 3 dense layers,
  // 5 + 257 * 3 in each of the 58 + 1 (MTP) MoE layers.
  CHECK(totals_bf16.tensors == 91'991 - (3 * 8 + 59 * (5 + 257 * 3)));
  for (const ModelTensor& tensor : *t) {
    if (tensor.name.ends_with("e_score_correction_bias")) {
      CHECK(tensor.dtype == DType::f32);
    } else {
      CHECK(tensor.dtype == DType::bf16);
    }
  }
}

TEST_CASE("models: a small config by hand (tied Llama with biases)",
          "[models]") {
  Diagnostics diags;
  std::optional<std::vector<ModelTensor>> t = tensors_from_hf_config(
      R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10,
          "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
          "num_attention_heads": 2, "num_key_value_heads": 1,
          "attention_bias": true, "mlp_bias": true,
          "tie_word_embeddings": true, "torch_dtype": "float16"})",
      "config.json",
      diags);
  REQUIRE(t);
  std::vector<std::string> names;
  for (const ModelTensor& x : *t) {
    names.push_back(x.name);
    CHECK(x.dtype == DType::f16);
  }
  CHECK(names
        == std::vector<std::string>{
            "model.embed_tokens.weight",
            "model.layers.0.self_attn.q_proj.weight",
            "model.layers.0.self_attn.q_proj.bias",
            "model.layers.0.self_attn.k_proj.weight",
            "model.layers.0.self_attn.k_proj.bias",
            "model.layers.0.self_attn.v_proj.weight",
            "model.layers.0.self_attn.v_proj.bias",
            "model.layers.0.self_attn.o_proj.weight",
            "model.layers.0.self_attn.o_proj.bias",
            "model.layers.0.mlp.gate_proj.weight",
            "model.layers.0.mlp.gate_proj.bias",
            "model.layers.0.mlp.up_proj.weight",
            "model.layers.0.mlp.up_proj.bias",
            "model.layers.0.mlp.down_proj.weight",
            "model.layers.0.mlp.down_proj.bias",
            "model.layers.0.input_layernorm.weight",
            "model.layers.0.post_attention_layernorm.weight",
            "model.norm.weight"});
  check_tensor(
      *t, "model.layers.0.self_attn.k_proj.weight", {4, 8}, DType::f16);
}

TEST_CASE(
    "models: DeepSeek-V3 variants: no q_lora_rank, moe_layer_freq, "
    "partial FP8 blocks",
    "[models]") {
  Diagnostics diags;
  std::optional<std::vector<ModelTensor>> t = tensors_from_hf_config(
      R"({"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 10,
          "hidden_size": 200, "intermediate_size": 300, "num_hidden_layers": 4,
          "num_attention_heads": 2, "q_lora_rank": null, "kv_lora_rank": 64,
          "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
          "n_routed_experts": 2, "n_shared_experts": 2,
          "moe_intermediate_size": 100, "first_k_dense_replace": 1,
          "moe_layer_freq": 2, "tie_word_embeddings": true,
          "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                  "weight_block_size": [128, 128]}})",
      "config.json",
      diags);
  REQUIRE(t);
  check_tensor(
      *t, "model.layers.0.self_attn.q_proj.weight", {48, 200}, DType::f8_e4m3);
  check_tensor(*t,
               "model.layers.0.self_attn.q_proj.weight_scale_inv",
               {1, 2},
               DType::f32);
  CHECK(find(*t, "model.layers.0.self_attn.q_a_proj.weight") == nullptr);
  // Layer 0 dense (first_k_dense_replace), 1 and 3 dense (odd), 2 MoE.
  check_tensor(
      *t, "model.layers.1.mlp.down_proj.weight_scale_inv", {2, 3}, DType::f32);
  check_tensor(
      *t, "model.layers.3.mlp.up_proj.weight", {300, 200}, DType::f8_e4m3);
  check_tensor(*t,
               "model.layers.2.mlp.experts.1.down_proj.weight",
               {200, 100},
               DType::f8_e4m3);
  check_tensor(*t,
               "model.layers.2.mlp.shared_experts.up_proj.weight",
               {200, 200},
               DType::f8_e4m3);
  check_tensor(*t, "model.layers.2.mlp.gate.weight", {2, 200}, DType::bf16);
  CHECK(find(*t, "lm_head.weight") == nullptr);
  CHECK(find(*t, "model.layers.4.enorm.weight") == nullptr);
}

// ---------------------------------------------------------------------------
// Errors.

TEST_CASE("models: an unknown architecture lists the supported ones",
          "[models]") {
  CHECK(error_of(R"({"architectures": ["LlamaForCausalLLM"]})")
        == "config.json:/architectures/0: error: unknown architecture "
           "\"LlamaForCausalLLM\"; supported: DeepseekV3ForCausalLM, "
           "GPT2LMHeadModel, Gemma2ForCausalLM, GemmaForCausalLM, "
           "LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, "
           "Phi3ForCausalLM, Qwen2ForCausalLM, Qwen2MoeForCausalLM; did you "
           "mean \"LlamaForCausalLM\"? "
           "[model.unknown-architecture]");
  CHECK(error_of(R"({"architectures": ["T5ForConditionalGeneration"]})")
            .find("[model.unknown-architecture]")
        != std::string::npos);
  CHECK(supported_architectures().size() == 10);
}

TEST_CASE(
    "models: another architecture's name is refused without a did-you-mean",
    "[models]") {
  // An edit away from a supported name is often a different architecture
  // (Qwen3 has q/k norms Qwen2 lacks; Gemma3 is not Gemma2): such a name
  // gets the list of supported ones and no hint (docs/models.md, "Unknown
  // architectures"). Qwen3ForCausalLM is 1 edit from Qwen2ForCausalLM and
  // Gemma3ForCausalLM 1 from Gemma2ForCausalLM, PhiForCausalLM (Phi-1/2:
  // biased q/k/v and dense, fc1/fc2, LayerNorm) 1 from Phi3ForCausalLM, so an
  // edit-distance hint named those; the others are transformers classes
  // with other heads.
  for (std::string_view other : {"Qwen3ForCausalLM",
                                 "Gemma3ForCausalLM",
                                 "PhiForCausalLM",
                                 "LlamaForSequenceClassification",
                                 "Qwen3MoeForCausalLM",
                                 "MistralModel",
                                 "GPT2DoubleHeadsModel"}) {
    INFO(other);
    const std::string error =
        error_of(fmt::format(R"({{"architectures": ["{}"]}})", other));
    CHECK(error.starts_with(fmt::format(
        "config.json:/architectures/0: error: unknown architecture \"{}\"; "
        "supported: ",
        other)));
    CHECK(error.find("did you mean") == std::string::npos);
    CHECK(error.ends_with("[model.unknown-architecture]"));
    CHECK(misspelt_architecture(other).empty());
  }
}

TEST_CASE("models: a supported architecture misspelt in its head or case",
          "[models]") {
  // The model name is a supported one and only the head (ForCausalLM,
  // LMHeadModel) is misspelt, within 3 edits, or only the letter case
  // differs.
  CHECK(misspelt_architecture("LlamaForCausalLLM") == "LlamaForCausalLM");
  CHECK(misspelt_architecture("MistralForCasualLM") == "MistralForCausalLM");
  CHECK(misspelt_architecture("llamaforcausallm") == "LlamaForCausalLM");
  CHECK(misspelt_architecture("GPT2LMHeadModle") == "GPT2LMHeadModel");
  // "Gemma" + "2ForCasualLM" is not Gemma's head misspelt (the rest must
  // start with the head's first letter); "Gemma2" + "ForCasualLM" is.
  CHECK(misspelt_architecture("Gemma2ForCasualLM") == "Gemma2ForCausalLM");
  CHECK(misspelt_architecture("Gemma3ForCasualLM").empty());
  // More than 3 edits in the head.
  CHECK(misspelt_architecture("LlamaForCausalLanguageModel").empty());
  CHECK(error_of(R"({"architectures": ["MistralForCasualLM"]})")
            .ends_with("; did you mean \"MistralForCausalLM\"? "
                       "[model.unknown-architecture]"));
}

TEST_CASE("models: a missing key is located by its JSON pointer", "[models]") {
  CHECK(error_of(R"({"architectures": ["MistralForCausalLM"],
                     "vocab_size": 32000, "hidden_size": 4096,
                     "intermediate_size": 14336, "num_attention_heads": 32})")
        == "config.json:/num_hidden_layers: error: missing key "
           "\"num_hidden_layers\" [json.missing-key]");
  CHECK(error_of(R"({"model_type": "llama"})")
        == "config.json:/architectures: error: missing key \"architectures\"; "
           "supported: DeepseekV3ForCausalLM, GPT2LMHeadModel, "
           "Gemma2ForCausalLM, GemmaForCausalLM, LlamaForCausalLM, "
           "MistralForCausalLM, MixtralForCausalLM, Phi3ForCausalLM, "
           "Qwen2ForCausalLM, Qwen2MoeForCausalLM [json.missing-key]");
  CHECK(error_of(R"({"architectures": ["DeepseekV3ForCausalLM"],
                     "vocab_size": 1, "hidden_size": 8,
                     "intermediate_size": 8, "num_hidden_layers": 1,
                     "num_attention_heads": 1, "qk_nope_head_dim": 1,
                     "qk_rope_head_dim": 1, "v_head_dim": 1})")
        == "config.json:/kv_lora_rank: error: missing key \"kv_lora_rank\" "
           "[json.missing-key]");
}

TEST_CASE("models: JSON that is not a config object", "[models]") {
  // The faults of JSON itself are worded and coded as in every file kind
  // (src/io/json.hpp).
  CHECK(error_of("[1, 2]")
        == "config.json:1:1: error: expected a JSON object at the top level, "
           "got array [json.type]\n"
           "  [1, 2]\n"
           "  ^");
  CHECK(error_of("42").find("got number 42 [json.type]") != std::string::npos);
  CHECK(error_of("{\"architectures\": [\"X\",]}")
        == "config.json:1:24: error: expected a JSON value, got ']'; JSON "
           "does not allow a trailing comma [json.syntax]\n"
           "  {\"architectures\": [\"X\",]}\n"
           "                         ^");
  CHECK(error_of("").starts_with(
      "config.json:1:1: error: expected a JSON object, got end of input"));
  CHECK(error_of(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 1,
                     "vocab_size": 2})")
            .starts_with("config.json:/vocab_size: error: duplicate key "
                         "\"vocab_size\" [json.duplicate-key]"));
}

TEST_CASE("models: values of the wrong type or range", "[models]") {
  const std::string llama =
      R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10,
          "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
          "num_attention_heads": 2, )";
  CHECK(error_of(llama + R"("num_key_value_heads": 0})")
        == "config.json:/num_key_value_heads: error: expected an integer >= 1, "
           "got number 0 [model.bad-value]");
  CHECK(error_of(llama + R"("num_key_value_heads": 2.5})")
        == "config.json:/num_key_value_heads: error: expected an integer >= 1, "
           "got number 2.5 [model.bad-value]");
  CHECK(error_of(llama + R"("num_key_value_heads": 99999999999999999999})")
            .find("/num_key_value_heads: error:")
        != std::string::npos);
  CHECK(error_of(llama + R"("tie_word_embeddings": "no"})")
        == "config.json:/tie_word_embeddings: error: expected true or false, "
           "got string \"no\" [json.type]");
  CHECK(error_of(llama + R"("torch_dtype": "bfloat17"})")
            .starts_with("config.json:/torch_dtype: error: unknown dtype "
                         "\"bfloat17\"; expected one of f64, f32, "));
  CHECK(error_of(llama + R"("quantization_config": {"quant_method": "gptq"}})")
        == "config.json:/quantization_config/quant_method: error: unsupported "
           "quant_method \"gptq\", expected \"fp8\" "
           "[model.unsupported-quantization]");
  CHECK(error_of(R"({"architectures": "LlamaForCausalLM"})")
        == "config.json:/architectures: error: expected a list of "
           "architecture names, got string \"LlamaForCausalLM\" [json.type]");
}

TEST_CASE("models: Qwen2-MoE keys of the wrong type or range", "[models]") {
  const std::string moe =
      R"({"architectures": ["Qwen2MoeForCausalLM"], "vocab_size": 10,
          "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 2,
          "num_attention_heads": 2, )";
  CHECK(error_of(moe + R"("num_experts": 2, "moe_intermediate_size": 4})")
        == "config.json:/shared_expert_intermediate_size: error: missing key "
           "\"shared_expert_intermediate_size\" [json.missing-key]");
  const std::string sized = moe + R"("num_experts": 2,
      "moe_intermediate_size": 4, "shared_expert_intermediate_size": 6, )";
  // decoder_sparse_step 0 would divide by zero in (i + 1) % step.
  CHECK(error_of(sized + R"("decoder_sparse_step": 0})")
        == "config.json:/decoder_sparse_step: error: expected an integer >= 1, "
           "got number 0 [model.bad-value]");
  CHECK(error_of(sized + R"("mlp_only_layers": 1})")
        == "config.json:/mlp_only_layers: error: expected a list of layer "
           "indices, got number 1 [json.type]");
  CHECK(error_of(sized + R"("mlp_only_layers": [0, -1]})")
        == "config.json:/mlp_only_layers/1: error: expected an integer >= 0, "
           "got number -1 [model.bad-value]");
  CHECK(error_of(sized + R"("qkv_bias": "yes"})")
        == "config.json:/qkv_bias: error: expected true or false, got string "
           "\"yes\" [json.type]");
  CHECK(error_of(moe + R"("num_experts": 100000000000,
      "moe_intermediate_size": 4, "shared_expert_intermediate_size": 6})")
        == "config.json:/num_experts: error: the model would have more than "
           "4194304 tensors [model.too-many-tensors]");
}

TEST_CASE("models: dims beyond int64 and huge models are errors, not crashes",
          "[models]") {
  const std::string big = "4611686018427387904";  // 2^62
  CHECK(error_of(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10,
                     "hidden_size": )"
                 + big + R"(, "intermediate_size": 16,
                     "num_hidden_layers": 1, "num_attention_heads": 1})")
            .find("[model.overflow]")
        != std::string::npos);
  CHECK(error_of(R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 10,
                     "n_embd": )" + big + R"(, "n_layer": 1, "n_positions": 1,
                     "n_head": 1})")
        == "config.json:/n_embd: error: a dim computed from this value "
           "overflows int64: 4 * 4611686018427387904 [model.overflow]");
  CHECK(error_of(R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 10,
                     "n_embd": 8, "n_layer": 1000000000, "n_positions": 1,
                     "n_head": 1})")
        == "config.json:/n_layer: error: the model would have more than "
           "4194304 tensors [model.too-many-tensors]");
  CHECK(error_of(R"({"architectures": ["MixtralForCausalLM"], "vocab_size": 10,
                     "hidden_size": 8, "intermediate_size": 16,
                     "num_hidden_layers": 1, "num_attention_heads": 1,
                     "num_local_experts": 100000000000})")
        == "config.json:/num_local_experts: error: the model would have more "
           "than 4194304 tensors [model.too-many-tensors]");
}

TEST_CASE("models: an unknown built-in model suggests the nearest name",
          "[models]") {
  Diagnostics diags;
  CHECK_FALSE(tensors_for_builtin_model("llama-3-8", "--model", diags));
  REQUIRE(diags.items().size() == 1);
  CHECK(render(diags.items().front())
        == "--model: error: unknown model \"llama-3-8\"; built-in models: "
           "deepseek-v3, gemma-2-2b, gemma-7b, gpt2, llama-2-70b, llama-3-70b, "
           "llama-3-8b, "
           "llama-3.1-405b, mistral-7b-v0.1, mixtral-8x7b-v0.1, phi-3-mini-4k, "
           "qwen2-57b-a14b, qwen2.5-7b; did you mean \"llama-3-8b\"? [model.unknown-model]");
}

// ---------------------------------------------------------------------------
// The architecture model of the activations: MLP and norm kinds, dropout,
// top-k, the layer structure (docs/models.md, "Activation keys").

namespace {

ModelConfig config_of(std::string_view text,
                      std::string_view source = "config.json") {
  Diagnostics diags;
  std::optional<ModelConfig> config = read_hf_config(text, source, diags);
  INFO((diags.items().empty() ? std::string() : render(diags.items().front())));
  REQUIRE(config);
  REQUIRE(diags.items().empty());
  return *config;
}

// The one diagnostic read_hf_config gives for `text`, rendered.
std::string config_error(std::string_view text) {
  Diagnostics diags;
  CHECK_FALSE(read_hf_config(text, "config.json", diags));
  REQUIRE(diags.items().size() == 1);
  return render(diags.items().front());
}

LayerStructure structure_of(const ModelConfig& config) {
  Diagnostics diags;
  std::optional<LayerStructure> s = layer_structure(config, diags);
  REQUIRE(s);
  REQUIRE(diags.items().empty());
  return *s;
}

struct Activations {
  std::string_view model;
  MlpKind mlp;
  NormKind norm;
  std::string_view activation;
  double attention_dropout;
  double residual_dropout;
  double embedding_dropout;
  int64_t experts_per_token;
};

}  // namespace

TEST_CASE("models: every built-in model gives the activation keys",
          "[models]") {
  // From each configs/models/<name>.json: gpt2 says activation_function
  // "gelu_new" and attn_pdrop, resid_pdrop, embd_pdrop 0.1; gemma-7b says
  // hidden_act "gelu" and no hidden_activation; gemma-2-2b
  // hidden_activation "gelu_pytorch_tanh"; phi-3 attention_dropout,
  // resid_pdrop, embd_pdrop 0.0; mixtral num_experts_per_tok 2, qwen2-57b
  // 8, deepseek-v3 8. Mistral's config has no attention_dropout: the
  // class's 0.0.
  const Activations expected[] = {
      {"deepseek-v3", MlpKind::gated, NormKind::rms_norm, "silu", 0, 0, 0, 8},
      {"gemma-2-2b",
       MlpKind::gated,
       NormKind::rms_norm,
       "gelu_pytorch_tanh",
       0,
       0,
       0,
       0},
      {"gemma-7b", MlpKind::gated, NormKind::rms_norm, "gelu", 0, 0, 0, 0},
      {"gpt2",
       MlpKind::plain,
       NormKind::layer_norm,
       "gelu_new",
       0.1,
       0.1,
       0.1,
       0},
      {"llama-2-70b", MlpKind::gated, NormKind::rms_norm, "silu", 0, 0, 0, 0},
      {"llama-3-70b", MlpKind::gated, NormKind::rms_norm, "silu", 0, 0, 0, 0},
      {"llama-3-8b", MlpKind::gated, NormKind::rms_norm, "silu", 0, 0, 0, 0},
      {"llama-3.1-405b",
       MlpKind::gated,
       NormKind::rms_norm,
       "silu",
       0,
       0,
       0,
       0},
      {"mistral-7b-v0.1",
       MlpKind::gated,
       NormKind::rms_norm,
       "silu",
       0,
       0,
       0,
       0},
      {"mixtral-8x7b-v0.1",
       MlpKind::gated,
       NormKind::rms_norm,
       "silu",
       0,
       0,
       0,
       2},
      {"phi-3-mini-4k", MlpKind::gated, NormKind::rms_norm, "silu", 0, 0, 0, 0},
      {"qwen2-57b-a14b",
       MlpKind::gated,
       NormKind::rms_norm,
       "silu",
       0,
       0,
       0,
       8},
      {"qwen2.5-7b", MlpKind::gated, NormKind::rms_norm, "silu", 0, 0, 0, 0},
  };
  std::vector<std::string> names;
  for (const BuiltinModel& m : builtin_models()) {
    names.push_back(m.name);
  }
  REQUIRE(names.size() == std::size(expected));
  for (const Activations& e : expected) {
    INFO(e.model);
    CHECK(std::find(names.begin(), names.end(), e.model) != names.end());
    const ModelConfig c = test::model_config(e.model);
    CHECK(c.mlp == e.mlp);
    CHECK(c.norm == e.norm);
    CHECK(c.activation == e.activation);
    CHECK(c.attention_dropout == e.attention_dropout);
    CHECK(c.residual_dropout == e.residual_dropout);
    CHECK(c.embedding_dropout == e.embedding_dropout);
    CHECK(c.experts_per_token == e.experts_per_token);
    CHECK(c.post_norms == (e.model == "gemma-2-2b"));
    // Gemma2Config's softcaps (50.0 and 30.0; gemma-2-2b's config says the
    // same); the others have none.
    CHECK(c.attention_softcap == (e.model == "gemma-2-2b" ? 50.0 : 0.0));
    CHECK(c.final_softcap == (e.model == "gemma-2-2b" ? 30.0 : 0.0));
  }
  CHECK(test::model_config("gpt2").head_dim == 64);  // 768 / 12
}

TEST_CASE("models: activation keys default to the configuration classes'",
          "[models]") {
  // GPT2Config: activation_function "gelu_new", attn_pdrop, resid_pdrop and
  // embd_pdrop 0.1.
  const ModelConfig gpt2 = config_of(
      R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 10,
          "n_embd": 8, "n_layer": 1, "n_positions": 4, "n_head": 2})");
  CHECK(gpt2.activation == "gelu_new");
  CHECK(gpt2.attention_dropout == 0.1);
  CHECK(gpt2.residual_dropout == 0.1);
  CHECK(gpt2.embedding_dropout == 0.1);
  CHECK(gpt2.head_dim == 4);
  const std::string llama =
      R"({"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
          "num_hidden_layers": 1, "num_attention_heads": 2, )";
  // LlamaConfig: hidden_act "silu", attention_dropout 0.0.
  const ModelConfig l =
      config_of(llama + R"("architectures": ["LlamaForCausalLM"]})");
  CHECK(l.activation == "silu");
  CHECK(l.attention_dropout == 0.0);
  CHECK(l.mlp == MlpKind::gated);
  CHECK(l.norm == NormKind::rms_norm);
  // Phi3Config: resid_pdrop, embd_pdrop, attention_dropout 0.0; given
  // values are read.
  const ModelConfig phi3 = config_of(
      llama + R"("architectures": ["Phi3ForCausalLM"], "resid_pdrop": 0.1,
                 "embd_pdrop": 0.05, "attention_dropout": 0.2})");
  CHECK(phi3.residual_dropout == 0.1);
  CHECK(phi3.embedding_dropout == 0.05);
  CHECK(phi3.attention_dropout == 0.2);
  // Mistral reads no resid_pdrop: it has no such dropout.
  CHECK(config_of(llama + R"("architectures": ["MistralForCausalLM"],
                             "resid_pdrop": 0.1})")
            .residual_dropout
        == 0.0);
  // GemmaConfig: hidden_act "gelu_pytorch_tanh"; hidden_activation wins.
  CHECK(
      config_of(llama + R"("architectures": ["GemmaForCausalLM"]})").activation
      == "gelu_pytorch_tanh");
  CHECK(config_of(llama + R"("architectures": ["GemmaForCausalLM"],
                             "hidden_act": "gelu",
                             "hidden_activation": "gelu_pytorch_tanh"})")
            .activation
        == "gelu_pytorch_tanh");
  // Gemma2Config: softcaps 50.0 and 30.0 when absent, none when null.
  const ModelConfig g2 =
      config_of(llama + R"("architectures": ["Gemma2ForCausalLM"]})");
  CHECK(g2.attention_softcap == 50.0);
  CHECK(g2.final_softcap == 30.0);
  CHECK(g2.post_norms);
  const ModelConfig g2_null =
      config_of(llama + R"("architectures": ["Gemma2ForCausalLM"],
                 "attn_logit_softcapping": null,
                 "final_logit_softcapping": null})");
  CHECK(g2_null.attention_softcap == 0.0);
  CHECK(g2_null.final_softcap == 0.0);
  // MixtralConfig: num_experts_per_tok 2.
  CHECK(config_of(llama + R"("architectures": ["MixtralForCausalLM"],
                             "num_local_experts": 8})")
            .experts_per_token
        == 2);
  // Qwen2MoeConfig: 4; a toy config with fewer experts gets them all.
  const std::string qwen = llama + R"("architectures": ["Qwen2MoeForCausalLM"],
      "moe_intermediate_size": 4, "shared_expert_intermediate_size": 6, )";
  CHECK(config_of(qwen + R"("num_experts": 60})").experts_per_token == 4);
  CHECK(config_of(qwen + R"("num_experts": 2})").experts_per_token == 2);
  CHECK(config_of(qwen + R"("num_experts": 0})").experts_per_token == 0);
  // DeepseekV3Config: 8.
  CHECK(config_of(R"({"architectures": ["DeepseekV3ForCausalLM"],
                      "vocab_size": 10, "hidden_size": 8,
                      "intermediate_size": 16, "num_hidden_layers": 2,
                      "num_attention_heads": 2, "kv_lora_rank": 4,
                      "qk_nope_head_dim": 2, "qk_rope_head_dim": 2,
                      "v_head_dim": 2, "n_routed_experts": 16,
                      "moe_intermediate_size": 4})")
            .experts_per_token
        == 8);
}

TEST_CASE("models: bad activation keys are located errors", "[models]") {
  const std::string gpt2 =
      R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 10,
          "n_layer": 1, "n_positions": 4, )";
  CHECK(config_error(gpt2 + R"("n_embd": 8, "n_head": 2, "attn_pdrop": 1.5})")
        == "config.json:/attn_pdrop: error: expected a probability between 0 "
           "and 1, got number 1.5 [model.bad-value]");
  CHECK(config_error(gpt2 + R"("n_embd": 8, "n_head": 2, "resid_pdrop": -0.1})")
        == "config.json:/resid_pdrop: error: expected a number >= 0, got "
           "number -0.1 [model.bad-value]");
  CHECK(config_error(gpt2 + R"("n_embd": 8, "n_head": 2, "embd_pdrop": "x"})")
        == "config.json:/embd_pdrop: error: expected a number >= 0, got "
           "string \"x\" [json.type]");
  // GPT2Attention: "embed_dim must be divisible by num_heads".
  CHECK(config_error(gpt2 + R"("n_embd": 10, "n_head": 4})")
        == "config.json:/n_head: error: n_embd 10 is not divisible by n_head "
           "4 [model.bad-value]");
  CHECK(config_error(
            R"({"architectures": ["MixtralForCausalLM"], "vocab_size": 10,
                "hidden_size": 8, "intermediate_size": 16,
                "num_hidden_layers": 1, "num_attention_heads": 2,
                "num_local_experts": 8, "num_experts_per_tok": 9})")
        == "config.json:/num_experts_per_tok: error: num_experts_per_tok 9 is "
           "more than the 8 experts [model.bad-value]");
  CHECK(config_error(
            R"({"architectures": ["Gemma2ForCausalLM"], "vocab_size": 10,
                "hidden_size": 8, "intermediate_size": 16,
                "num_hidden_layers": 1, "num_attention_heads": 2,
                "final_logit_softcapping": -1})")
        == "config.json:/final_logit_softcapping: error: expected a number "
           ">= 0, got number -1 [model.bad-value]");
}

TEST_CASE("models: the layer structure of the built-in MoE models",
          "[models]") {
  // DeepSeek-V3: first_k_dense_replace 3, moe_layer_freq 1: layers 0-2
  // dense, 3-60 MoE (58); the MTP layer 61 >= 3 is MoE. 256 experts of
  // 2048, top 8; one shared expert: 2048 x 1.
  const ModelConfig ds = test::model_config("deepseek-v3");
  const LayerStructure d = structure_of(ds);
  REQUIRE(d.moe.size() == 61);
  CHECK(d.dense_layers == 3);
  CHECK(d.moe_layers == 58);
  CHECK_FALSE(d.moe[2]);
  CHECK(d.moe[3]);
  CHECK(d.mtp_layers == 1);
  CHECK(d.mtp_moe);
  CHECK(d.routed_experts == 256);
  CHECK(d.experts_per_token == 8);
  CHECK(d.routed_intermediate == 2048);
  CHECK(d.shared_intermediate == 2048);
  CHECK_FALSE(d.shared_expert_gate);
  CHECK(d.dense_intermediate == 18432);
  CHECK(is_moe_layer(ds, 61));
  // Mixtral: every layer MoE, experts of intermediate_size 14336, no shared
  // expert.
  const LayerStructure m =
      structure_of(test::model_config("mixtral-8x7b-v0.1"));
  CHECK(m.moe_layers == 32);
  CHECK(m.dense_layers == 0);
  CHECK(m.routed_intermediate == 14336);
  CHECK(m.shared_intermediate == 0);
  CHECK(m.experts_per_token == 2);
  // Qwen2-57B-A14B: decoder_sparse_step 1, no mlp_only_layers: 28 MoE
  // layers; 64 experts of 2560, top 8; a gated shared expert of 20480.
  const LayerStructure q = structure_of(test::model_config("qwen2-57b-a14b"));
  CHECK(q.moe_layers == 28);
  CHECK(q.routed_experts == 64);
  CHECK(q.routed_intermediate == 2560);
  CHECK(q.shared_intermediate == 20480);
  CHECK(q.shared_expert_gate);
  // GPT-2: 12 dense layers of 4 x 768 = 3072.
  const LayerStructure g = structure_of(test::model_config("gpt2"));
  CHECK(g.dense_layers == 12);
  CHECK(g.moe_layers == 0);
  CHECK(g.dense_intermediate == 3072);
  CHECK(g.mtp_layers == 0);
  CHECK(structure_of(test::model_config("llama-3-8b")).dense_layers == 32);
}

TEST_CASE(
    "models: Qwen2-MoE's sparse layers by decoder_sparse_step and "
    "mlp_only_layers",
    "[models]") {
  // 6 layers, decoder_sparse_step 2: (i + 1) % 2 == 0 for i = 1, 3, 5;
  // mlp_only_layers [3] makes 3 dense: MoE layers 1 and 5.
  const ModelConfig c = config_of(
      R"({"architectures": ["Qwen2MoeForCausalLM"], "vocab_size": 10,
          "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 6,
          "num_attention_heads": 2, "num_experts": 4,
          "moe_intermediate_size": 4, "shared_expert_intermediate_size": 6,
          "decoder_sparse_step": 2, "mlp_only_layers": [3]})");
  const LayerStructure s = structure_of(c);
  CHECK(s.moe == std::vector<bool>{false, true, false, false, false, true});
  CHECK(s.moe_layers == 2);
  CHECK(s.dense_layers == 4);
  for (int64_t i = 0; i < 6; ++i) {
    CHECK(is_moe_layer(c, i) == s.moe[to_size(i)]);
  }
  // Without experts every layer is dense.
  CHECK_FALSE(is_moe_layer(test::model_config("llama-3-8b"), 0));
}
