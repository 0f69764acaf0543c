// Any bytes as a safetensors header (the JSON after the 8-byte length): a
// manifest or a located error, never a crash, whatever the size of the data
// section after it. Each input is read with three data sections: the one its
// data_offsets describe (so that a well-formed header reaches the checks of
// order, gaps and overlaps and passes), one from the input's size (mostly
// too short or too long), and the largest a file can have.
#include "fuzz_check.hpp"
#include "io/internal.hpp"

#include <shardplan/io.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

namespace {

void read_with(std::string_view header, uint64_t data_bytes) {
  shardplan::Diagnostics diags;
  auto manifest = shardplan::read_safetensors_header(
      header, data_bytes, "fuzz.safetensors", diags);
  fuzz::check_outcome(manifest.has_value(), diags, "fuzz.safetensors");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view header(reinterpret_cast<const char*>(data), size);
  std::vector<shardplan::io_detail::DataOffsets> offsets;
  shardplan::Diagnostics diags;
  auto described = shardplan::io_detail::read_header_text(
      header, "fuzz.safetensors", offsets, diags);
  fuzz::check_outcome(described.has_value(), diags, "fuzz.safetensors");
  if (described && offsets.size() != described->size()) {
    fuzz::fail("data_offsets not one pair per tensor");
  }
  int64_t end = 0;
  for (const auto& o : offsets) {
    end = std::max(end, o[1]);
  }
  read_with(header, static_cast<uint64_t>(end));
  read_with(header, size % 97);
  read_with(header, std::numeric_limits<uint64_t>::max());
  return 0;
}
