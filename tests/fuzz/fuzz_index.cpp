// Any bytes as a model.safetensors.index.json: its weight_map and metadata
// or a located error, never a crash. Only the text: read_safetensors_index
// then opens the shards the index names, which a fuzzer must not steer.
// Read as a copy and in place, with simdjson's padding after the text (how
// --manifest reads a file): both readings agree.
#include "fuzz_check.hpp"
#include "io/internal.hpp"

#include <simdjson.h>

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shardplan::Diagnostics diags;
  auto index = shardplan::io_detail::read_index_text(text, "index.json", diags);
  fuzz::check_outcome(index.has_value(), diags, "index.json");
  if (index) {
    if (index->entries.empty()) {
      fuzz::fail("an index that maps no tensor");
    }
    for (const auto& entry : index->entries) {
      if (entry.shard >= index->shards.size()) {
        fuzz::fail("an entry whose shard is not in the list");
      }
    }
  }

  std::vector<char> padded(size + simdjson::SIMDJSON_PADDING, '\0');
  if (size != 0) {
    std::memcpy(padded.data(), data, size);
  }
  shardplan::Diagnostics place_diags;
  auto placed = shardplan::io_detail::read_index_text(
      std::string_view(padded.data(), size),
      "index.json",
      place_diags,
      simdjson::SIMDJSON_PADDING);
  fuzz::check_outcome(placed.has_value(), place_diags, "index.json");
  if (placed.has_value() != index.has_value()
      || place_diags.items().size() != diags.items().size()) {
    fuzz::fail("the copy and the in-place reading disagree");
  }
  return 0;
}
