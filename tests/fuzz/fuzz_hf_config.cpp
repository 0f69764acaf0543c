// Any bytes as a Hugging Face config.json (--config): a model or a located
// error, never a crash; then, for a config of at most a few thousand
// tensors, its checkpoint's tensors and their manifest, as --config builds
// them (a config may describe up to k_max_model_tensors, 4M tensors: that
// bound and its arithmetic have unit tests; generating millions of names per
// input would leave the fuzzer no time for anything else).
#include "fuzz_check.hpp"

#include <shardplan/io.hpp>
#include <shardplan/models.hpp>

#include <cstdint>
#include <string_view>

namespace {

// A generous estimate of the tensors a config generates (docs/models.md):
// per layer 3 per routed or shared expert and 32 others; the MTP layers are
// layers too; x2 for FP8 scales.
bool small(const shardplan::ModelConfig& c) {
  const double layers =
      static_cast<double>(c.layers) + static_cast<double>(c.mtp_layers);
  const double experts =
      static_cast<double>(c.experts) + static_cast<double>(c.shared_experts);
  return layers * (3 * experts + 32) * 2 <= 8192;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shardplan::Diagnostics diags;
  auto config = shardplan::read_hf_config(text, "config.json", diags);
  fuzz::check_outcome(config.has_value(), diags, "config.json");
  if (!config || !small(*config)) {
    return 0;
  }
  shardplan::Diagnostics tensor_diags;
  auto tensors = shardplan::checkpoint_tensors(*config, tensor_diags);
  fuzz::check_outcome(tensors.has_value(), tensor_diags, "config.json");
  if (!tensors) {
    return 0;
  }
  if (tensors->empty()) {
    fuzz::fail("a model without tensors");
  }
  shardplan::Diagnostics manifest_diags;
  auto manifest =
      shardplan::manifest_from_model(*tensors, "config.json", manifest_diags);
  fuzz::check_outcome(manifest.has_value(), manifest_diags, "config.json");
  return 0;
}
