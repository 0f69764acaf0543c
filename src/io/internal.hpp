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

}  // namespace shardplan::io_detail
