// Files from configs/ compiled into the binary (cmake/embed_configs.cmake).
#pragma once

#include <array>
#include <span>
#include <string_view>

namespace shardplan::embedded {

struct EmbeddedFile {
  std::string_view name;  // file name, e.g. "v5p.json"
  std::string_view text;
};

// configs/topologies/*.json, in file-name order.
std::span<const EmbeddedFile> topology_files();
// configs/models/*.json (Hugging Face config.json files), in file-name order.
std::span<const EmbeddedFile> model_files();
// configs/rules/*.json (rule presets), in file-name order.
std::span<const EmbeddedFile> rule_files();
// configs/maxtext/fields.json: the fields of MaxText's config
// (scripts/maxtext_fields.py).
std::span<const EmbeddedFile> maxtext_files();

}  // namespace shardplan::embedded
