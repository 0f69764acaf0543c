// The reader of model.safetensors.index.json (docs/manifest-format.md):
// weight_map's entries in file order; io/safetensors.cpp then reads the
// headers of the shards they name.

#include "io/internal.hpp"
#include "io/json.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace shardplan::io_detail {

namespace {

// Why the shard path `file` of an index is refused, or "": it must name a
// file inside the index's folder, judged on the text alone, without
// resolving symlinks, as huggingface_hub's _get_pointer_path judges a
// repository's file names (src/huggingface_hub/file_download.py: the joined
// path, normalised by os.path.abspath, must lie under the snapshot folder).
// "a/../b.safetensors" is inside; "../b.safetensors", "/etc/x" and "a/.."
// are not.
std::string shard_path_problem(std::string_view file) {
  if (file.find('\0') != std::string_view::npos) {
    return fmt::format("shard path {} has a NUL byte", quote(file));
  }
  if (file.starts_with('/')) {
    return fmt::format("shard path {} is absolute", quote(file));
  }
  // Lexically, as os.path.abspath normalises: components below the folder.
  size_t depth = 0;
  size_t begin = 0;
  while (begin <= file.size()) {
    size_t end = file.find('/', begin);
    if (end == std::string_view::npos) {
      end = file.size();
    }
    const std::string_view part = file.substr(begin, end - begin);
    if (part == "..") {
      if (depth == 0) {
        return fmt::format("shard path {} leads out of the index's folder",
                           quote(file));
      }
      --depth;
    } else if (!part.empty() && part != ".") {
      ++depth;
    }
    begin = end + 1;
  }
  if (depth == 0) {
    return fmt::format("shard path {} names the index's folder, not a file",
                       quote(file));
  }
  return "";
}

// {"metadata": {"total_size": N, ...}, "weight_map": {"NAME": "SHARD", ...}}
class IndexReader : public JsonInput {
 public:
  IndexReader(std::string_view text,
              std::string_view source,
              Diagnostics& diags,
              size_t padding)
      : JsonInput(text, source, diags, padding) {}

  std::optional<IndexFile> run() {
    od::object top;
    if (!open(top)) {
      return std::nullopt;
    }
    bool seen_map = false;
    bool seen_metadata = false;
    const bool read = for_each_field(
        top, "", nullptr, [&](std::string_view key, od::value& value) {
          std::string pointer = json_pointer_child("", key);
          if (key == "weight_map" || key == "metadata") {
            bool& seen = key == "weight_map" ? seen_map : seen_metadata;
            if (seen) {
              return fail_duplicate(key, pointer, start_of(value));
            }
            seen = true;
            return key == "weight_map" ? read_weight_map(value)
                                       : read_metadata(value);
          }
          return skip_value(value, [&] { return pointer; });
        });
    if (!read || !finish()) {
      return std::nullopt;
    }
    if (!seen_map) {
      fail("json.missing-key",
           "a safetensors index needs \"weight_map\"",
           "",
           m_padded.data(),
           "{\"weight_map\": {\"TENSOR\": \"SHARD.safetensors\", ...}}");
      return std::nullopt;
    }
    if (m_index.entries.empty()) {
      fail(
          "index.empty", "weight_map maps no tensors", "/weight_map", m_map_at);
      return std::nullopt;
    }
    return std::move(m_index);
  }

 private:
  bool read_weight_map(od::value& value) {
    m_map_at = start_of(value);
    std::unordered_map<std::string, uint32_t> shard_of_file;
    return for_each_member(
        value,
        "/weight_map",
        "an object mapping tensor names to shard files",
        [&](std::string_view name, od::value& file_value) {
          auto pointer = [&] {
            return json_pointer_child("/weight_map", name);
          };
          std::string_view file;
          if (!get_as(file_value,
                      file,
                      "a shard file name string",
                      pointer,
                      start_of(file_value))) {
            return false;
          }
          if (file.empty()) {
            return fail("index.shard",
                        "shard file name is empty",
                        pointer(),
                        start_of(file_value));
          }
          auto [slot, inserted] = shard_of_file.try_emplace(
              std::string(file), static_cast<uint32_t>(m_index.shards.size()));
          if (inserted) {
            if (std::string problem = shard_path_problem(file);
                !problem.empty()) {
              return fail("index.shard",
                          std::move(problem),
                          pointer(),
                          start_of(file_value),
                          "weight_map names files relative to the index's "
                          "folder, and Hugging Face's loaders read only "
                          "inside it");
            }
            m_index.shards.emplace_back(file);
          }
          // `name` views the parser's copy of the key, valid while the
          // document is read.
          if (!m_names.insert(name).second) {
            return fail_duplicate(name, pointer(), start_of(file_value));
          }
          m_index.entries.push_back({std::string(name), slot->second});
          return true;
        });
  }

  bool read_metadata(od::value& value) {
    return for_each_member(
        value,
        "/metadata",
        "an object",
        [&](std::string_view key, od::value& v) {
          std::string pointer = json_pointer_child("/metadata", key);
          int64_t total = 0;
          if (key == "total_size"
              && v.get_int64().get(total) == simdjson::SUCCESS) {
            m_index.total_size = total;
            return true;
          }
          return skip_value(v, [&] { return pointer; });
        });
  }

  IndexFile m_index;
  std::unordered_set<std::string_view> m_names;
  const char* m_map_at = nullptr;
};

}  // namespace

std::optional<IndexFile> read_index_text(std::string_view json,
                                         std::string_view source,
                                         Diagnostics& diags,
                                         size_t padding) {
  try {
    IndexReader reader(json, source, diags, padding);
    return reader.run();
  } catch (const std::exception& e) {
    report_exception(e, json.size(), source, diags);
    return std::nullopt;
  }
}

}  // namespace shardplan::io_detail
