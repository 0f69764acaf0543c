#pragma once

// What the io module's readers share across their files: the readers of
// safetensors headers and indexes that io/safetensors.cpp calls. Not a
// public header.
//
//   io/manifest.cpp   DataOffsets, read_header_text (a safetensors header's
//                     JSON), read_manifest_or_index (a manifest, or word
//                     that the text is an index)
//   io/index.cpp      IndexEntry, IndexFile, read_index_text (a
//                     model.safetensors.index.json's weight_map)
//   io/maxtext_model.cpp  MaxTextModelKeys, maxtext_hf_config (a MaxText
//                     config's model as a config.json), maxtext_stand_in

#include <shardplan/diag.hpp>
#include <shardplan/tensor.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan::io_detail {

// A tensor's [begin, end) byte offsets in a safetensors data section.
using DataOffsets = std::array<int64_t, 2>;

// Reads a safetensors header (the JSON text) in the safetensors form only,
// appending each tensor's data_offsets to `offsets` in header order. Checks
// each tensor's offsets span its bytes; not where they lie.
std::optional<Manifest> read_header_text(std::string_view header,
                                         std::string_view source,
                                         std::vector<DataOffsets>& offsets,
                                         Diagnostics& diags);

// read_manifest, except that a safetensors index ({"weight_map": ...}) sets
// `is_index` and returns nullopt with nothing reported. `padding` is
// read_padding's figure for the buffer `json` is in (0: unknown): with
// enough, the text is parsed in place instead of copied.
std::optional<Manifest> read_manifest_or_index(std::string_view json,
                                               std::string_view source,
                                               bool& is_index,
                                               Diagnostics& diags,
                                               size_t padding = 0);

// A model.safetensors.index.json as written: weight_map's entries in file
// order, each with the index of its shard in `shards` (first-seen order).
struct IndexEntry {
  std::string name;
  uint32_t shard = 0;
};
struct IndexFile {
  std::vector<std::string> shards;
  std::vector<IndexEntry> entries;
  std::optional<int64_t> total_size;  // metadata.total_size, when an integer
};

// Reads an index's text; errors are located in `source` [index.*].
// `padding` as for read_manifest_or_index: with room after the text it is
// parsed in place.
std::optional<IndexFile> read_index_text(std::string_view json,
                                         std::string_view source,
                                         Diagnostics& diags,
                                         size_t padding = 0);

// The model keys of a MaxText config as merged (base.yml's defaults where
// nothing sets them; types.py at e591f30c).
struct MaxTextModelKeys {
  Sourced<std::string> decoder_block{"llama2", {}};
  Sourced<int64_t> scale{1, {}};  // global_parameter_scale
  Sourced<int64_t> emb{2048, {}};
  Sourced<int64_t> heads{16, {}};
  Sourced<int64_t> kv_heads{16, {}};
  Sourced<int64_t> mlp{7168, {}};
  Sourced<int64_t> layers{16, {}};
  Sourced<int64_t> head_dim{128, {}};
  Sourced<int64_t> vocab{32000, {}};
  Sourced<int64_t> experts{1, {}};
  Sourced<int64_t> experts_per_token{1, {}};
  Sourced<int64_t> moe_mlp{-1, {}};  // base_moe_mlp_dim
  Sourced<int64_t> shared_experts{0, {}};
  Sourced<int64_t> first_dense{0, {}};  // first_num_dense_layers
  Sourced<int64_t> q_lora{0, {}};
  Sourced<int64_t> kv_lora{512, {}};
  Sourced<int64_t> qk_nope{128, {}};
  Sourced<int64_t> qk_rope{64, {}};
  Sourced<int64_t> v_head{128, {}};
  Sourced<bool> tied{false, {}};  // logits_via_embedding
  Sourced<bool> attention_bias{false, {}};
  Sourced<bool> routed_bias{false, {}};
  Sourced<double> attention_softcap{0, {}};  // attn_logits_soft_cap
  Sourced<double> final_softcap{0, {}};      // final_logits_soft_cap
  // mlp_activations: how many (base.yml: ["silu", "linear"], a gated
  // MLP); one is a plain MLP, which the decoder blocks built here lack.
  Sourced<int64_t> mlp_activations{2, {}};
};

// The config.json (Hugging Face) of the tensors `keys` describe; nullopt
// with `failure` set when shardplan builds no such model.
// REQUIRES: keys.scale valid_parameter_scale, decoder_block one of
// maxtext_decoder_blocks().
std::optional<std::string> maxtext_hf_config(const MaxTextModelKeys& keys,
                                             std::string& failure);

// The decoder_block values maxtext_hf_config builds.
std::vector<std::string> maxtext_decoder_blocks();

// Whether global_parameter_scale `scale` is one types.py accepts: a power
// of two.
bool valid_parameter_scale(int64_t scale);

// The built-in model (configs/models/) with the tensors of MaxText's model
// `model_name`; "" for none.
std::string maxtext_stand_in(std::string_view model_name);

}  // namespace shardplan::io_detail
