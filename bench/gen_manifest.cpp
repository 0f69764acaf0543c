// gen_manifest: writes a synthetic manifest of N tensors for benchmarks.
//
//   gen_manifest N [--seed S] [-o FILE] [--form native|safetensors]
//
// The tensors look like a real checkpoint's: Llama-style dense decoders or
// DeepSeek-V3-style MoE decoders (MLA attention, 256 routed experts in FP8
// with f32 `weight_scale_inv` block scales, shared experts), with
// embed_tokens first and the final norm and lm_head last. Most weights are
// bf16; some dense weights carry MaxText-style `logical_axes`. The output is
// a pure function of N, the seed and the form (no std::*_distribution, whose
// results differ between standard libraries).

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

// splitmix64: tiny, portable, good enough to pick sizes.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31U);
  }
  // Uniform-enough pick in [0, n).
  size_t pick(size_t n) { return static_cast<size_t>(next() % n); }
};

struct Config {
  bool moe = false;
  int64_t hidden = 4096;
  int64_t intermediate = 14336;     // dense MLP
  int64_t moe_intermediate = 2048;  // one routed expert
  int64_t heads = 32;
  int64_t kv_heads = 8;
  int64_t head_dim = 128;
  int64_t vocab = 128256;
  int64_t experts = 256;
  int64_t shared_experts = 1;
  int64_t first_dense_layers = 3;
  // MLA (DeepSeek-V3)
  int64_t q_lora_rank = 1536;
  int64_t kv_lora_rank = 512;
  int64_t qk_rope_dim = 64;
  int64_t qk_nope_dim = 128;
  int64_t v_head_dim = 128;
};

Config make_config(uint64_t seed) {
  Rng rng{seed};
  Config c;
  // Seed 0 (the default) is the DeepSeek-like MoE: FP8, scales, experts.
  c.moe = seed % 2 == 0;
  if (c.moe) {
    // Seed 0 has DeepSeek-V3's sizes; other even seeds vary the width.
    const int64_t hidden[] = {7168, 5120, 4096};
    c.hidden = seed == 0 ? 7168 : hidden[rng.pick(3)];
    c.heads = 128;
    c.intermediate = 18432;
    c.moe_intermediate = 2048;
    c.vocab = 129280;
  } else {
    const int64_t hidden[] = {4096, 5120, 8192};
    const int64_t intermediate[] = {14336, 13824, 28672};
    size_t i = rng.pick(3);
    c.hidden = hidden[i];
    c.intermediate = intermediate[i];
    c.heads = c.hidden / c.head_dim;
    c.vocab = rng.pick(2) == 0 ? 128256 : 152064;
  }
  return c;
}

struct Entry {
  std::string name;
  std::vector<int64_t> shape;
  std::string_view dtype;  // native spelling: bf16, f32, f8_e4m3
  std::vector<std::string_view> logical_axes;  // empty: none
};

class Generator {
 public:
  Generator(size_t n, const Config& config) : m_n(n), m_c(config) {}

  std::vector<Entry> run() {
    // Reserve room for the final norm and lm_head.
    const size_t tail = m_n >= 3 ? 2 : 0;
    add("model.embed_tokens.weight",
        {m_c.vocab, m_c.hidden},
        "bf16",
        {"vocab", "embed"});
    for (int64_t layer = 0; m_out.size() + tail < m_n; ++layer) {
      add_layer(layer, m_n - tail);
    }
    if (tail != 0) {
      m_out.resize(std::min(m_out.size(), m_n - tail));
      add("model.norm.weight", {m_c.hidden}, "f32", {"norm"});
      add("lm_head.weight",
          {m_c.vocab, m_c.hidden},
          "bf16",
          {"vocab", "embed"});
    }
    m_out.resize(std::min(m_out.size(), m_n));
    return std::move(m_out);
  }

 private:
  void add(std::string name,
           std::vector<int64_t> shape,
           std::string_view dtype,
           std::vector<std::string_view> logical_axes = {}) {
    m_out.push_back(Entry{
        std::move(name), std::move(shape), dtype, std::move(logical_axes)});
  }

  // A linear layer; FP8 weights get a block-scale tensor (128x128 blocks).
  void linear(const std::string& prefix,
              int64_t out,
              int64_t in,
              bool fp8,
              std::vector<std::string_view> logical_axes = {}) {
    add(prefix + ".weight",
        {out, in},
        fp8 ? "f8_e4m3" : "bf16",
        std::move(logical_axes));
    if (fp8) {
      add(prefix + ".weight_scale_inv",
          {(out + 127) / 128, (in + 127) / 128},
          "f32");
    }
  }

  void add_layer(int64_t layer, size_t limit) {
    const std::string p = fmt::format("model.layers.{}", layer);
    const Config& c = m_c;
    add(p + ".input_layernorm.weight", {c.hidden}, "bf16", {"norm"});
    if (c.moe) {
      const std::string a = p + ".self_attn";
      const int64_t qk_head = c.qk_nope_dim + c.qk_rope_dim;
      linear(a + ".q_a_proj", c.q_lora_rank, c.hidden, true);
      add(a + ".q_a_layernorm.weight", {c.q_lora_rank}, "bf16");
      linear(a + ".q_b_proj", c.heads * qk_head, c.q_lora_rank, true);
      linear(a + ".kv_a_proj_with_mqa",
             c.kv_lora_rank + c.qk_rope_dim,
             c.hidden,
             true);
      add(a + ".kv_a_layernorm.weight", {c.kv_lora_rank}, "bf16");
      linear(a + ".kv_b_proj",
             c.heads * (c.qk_nope_dim + c.v_head_dim),
             c.kv_lora_rank,
             true);
      linear(a + ".o_proj", c.hidden, c.heads * c.v_head_dim, true);
    } else {
      const std::string a = p + ".self_attn";
      linear(a + ".q_proj",
             c.heads * c.head_dim,
             c.hidden,
             false,
             {"q_heads", "embed"});
      linear(a + ".k_proj",
             c.kv_heads * c.head_dim,
             c.hidden,
             false,
             {"kv_heads", "embed"});
      linear(a + ".v_proj",
             c.kv_heads * c.head_dim,
             c.hidden,
             false,
             {"kv_heads", "embed"});
      linear(a + ".o_proj",
             c.hidden,
             c.heads * c.head_dim,
             false,
             {"embed", "heads"});
    }
    add(p + ".post_attention_layernorm.weight", {c.hidden}, "bf16", {"norm"});
    const std::string m = p + ".mlp";
    if (!c.moe || layer < c.first_dense_layers) {
      linear(
          m + ".gate_proj", c.intermediate, c.hidden, c.moe, {"mlp", "embed"});
      linear(m + ".up_proj", c.intermediate, c.hidden, c.moe, {"mlp", "embed"});
      linear(
          m + ".down_proj", c.hidden, c.intermediate, c.moe, {"embed", "mlp"});
      return;
    }
    add(m + ".gate.weight", {c.experts, c.hidden}, "bf16", {"exp", "embed"});
    add(m + ".gate.e_score_correction_bias", {c.experts}, "f32");
    for (int64_t e = 0; e < c.experts && m_out.size() < limit; ++e) {
      const std::string x = fmt::format("{}.experts.{}", m, e);
      linear(x + ".gate_proj", c.moe_intermediate, c.hidden, true);
      linear(x + ".up_proj", c.moe_intermediate, c.hidden, true);
      linear(x + ".down_proj", c.hidden, c.moe_intermediate, true);
    }
    const int64_t shared = c.moe_intermediate * c.shared_experts;
    linear(m + ".shared_experts.gate_proj", shared, c.hidden, true);
    linear(m + ".shared_experts.up_proj", shared, c.hidden, true);
    linear(m + ".shared_experts.down_proj", c.hidden, shared, true);
  }

  size_t m_n;
  Config m_c;
  std::vector<Entry> m_out;
};

std::string_view safetensors_dtype(std::string_view dtype) {
  if (dtype == "bf16") {
    return "BF16";
  }
  if (dtype == "f8_e4m3") {
    return "F8_E4M3";
  }
  return "F32";
}

int64_t dtype_bytes(std::string_view dtype) {
  return dtype == "f32" ? 4 : dtype == "bf16" ? 2 : 1;
}

void append_shape(std::string& out, const std::vector<int64_t>& shape) {
  out += '[';
  for (size_t i = 0; i < shape.size(); ++i) {
    out += i == 0 ? "" : ", ";
    out += fmt::format("{}", shape[i]);
  }
  out += ']';
}

std::string render_native(const std::vector<Entry>& entries) {
  std::string out = "{\"format\": \"shardplan-manifest\", \"params\": [\n";
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    out += fmt::format("  {{\"name\": \"{}\", \"shape\": ", e.name);
    append_shape(out, e.shape);
    out += fmt::format(", \"dtype\": \"{}\"", e.dtype);
    if (!e.logical_axes.empty()) {
      out += ", \"logical_axes\": [";
      for (size_t j = 0; j < e.logical_axes.size(); ++j) {
        out += fmt::format("{}\"{}\"", j == 0 ? "" : ", ", e.logical_axes[j]);
      }
      out += ']';
    }
    out += i + 1 < entries.size() ? "},\n" : "}\n";
  }
  out += "]}\n";
  return out;
}

std::string render_safetensors(const std::vector<Entry>& entries) {
  std::string out = "{\"__metadata__\":{\"format\":\"pt\"}";
  int64_t offset = 0;
  for (const Entry& e : entries) {
    int64_t bytes = dtype_bytes(e.dtype);
    for (int64_t d : e.shape) {
      bytes *= d;
    }
    out += fmt::format(",\"{}\":{{\"dtype\":\"{}\",\"shape\":",
                       e.name,
                       safetensors_dtype(e.dtype));
    append_shape(out, e.shape);
    out += fmt::format(",\"data_offsets\":[{},{}]}}", offset, offset + bytes);
    offset += bytes;
  }
  out += "}";
  return out;
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    return std::nullopt;
  }
  return v;
}

int usage() {
  std::fputs(
      "usage: gen_manifest N [--seed S] [-o FILE] [--form "
      "native|safetensors]\n",
      stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<uint64_t> n;
  uint64_t seed = 0;
  std::string output;
  std::string form = "native";
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    bool has_value = i + 1 < argc;
    if (arg == "--seed" && has_value) {
      auto v = parse_u64(argv[++i]);
      if (!v) {
        return usage();
      }
      seed = *v;
    } else if ((arg == "-o" || arg == "--output") && has_value) {
      output = argv[++i];
    } else if (arg == "--form" && has_value) {
      form = argv[++i];
      if (form != "native" && form != "safetensors") {
        return usage();
      }
    } else if (!n && !arg.starts_with("-")) {
      n = parse_u64(arg);
      if (!n) {
        return usage();
      }
    } else {
      return usage();
    }
  }
  if (!n) {
    return usage();
  }
  std::vector<Entry> entries =
      Generator(static_cast<size_t>(*n), make_config(seed)).run();
  std::string text =
      form == "native" ? render_native(entries) : render_safetensors(entries);
  std::FILE* f = output.empty() ? stdout : std::fopen(output.c_str(), "wb");
  if (f == nullptr) {
    std::fprintf(stderr,
                 "gen_manifest: cannot write \"%s\": %s\n",
                 output.c_str(),
                 std::strerror(errno));
    return 1;
  }
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = (f == stdout ? std::fflush(f) : std::fclose(f)) == 0 && ok;
  if (!ok) {
    std::fprintf(stderr, "gen_manifest: write failed\n");
    return 1;
  }
  return 0;
}
