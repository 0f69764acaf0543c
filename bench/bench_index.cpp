// bench_index: reading a sharded checkpoint's index the way --manifest does.
//
//   bench_index [--shards S] [--reps R] [--dir DIR]
//
// Writes DeepSeek-V3's published layout: its 91,991 tensors (the built-in
// deepseek-v3 model, FP8 with scales and the MTP layer) in weight_map order,
// cut into S shards (default 163, as model-00001-of-000163.safetensors ...)
// of about equal bytes, each a real .safetensors file: the 8-byte length,
// the header, and the data section as a hole (ftruncate), so the files have
// their full sizes (~4.2 GB each, 688 GB in all) but take no disk. Then
// times read_manifest_path on model.safetensors.index.json: R repetitions
// after one warm-up, median and max, and the per-shard cost.

#include "bench_util.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/models.hpp>
#include <shardplan/tensor.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

int usage(const char* why) {
  std::fprintf(stderr,
               "bench_index: %s\nusage: bench_index [--shards S] [--reps R] "
               "[--dir DIR]\n",
               why);
  return 2;
}

std::string dtype_tag(shardplan::DType dtype) {
  switch (dtype) {
    case shardplan::DType::bf16:
      return "BF16";
    case shardplan::DType::f32:
      return "F32";
    case shardplan::DType::f8_e4m3:
      return "F8_E4M3";
    default:
      return std::string(shardplan::to_string(dtype));
  }
}

// Writes one shard: the header of tensors [begin, end) and a data hole.
bool write_shard(const std::string& path,
                 const std::vector<shardplan::ModelTensor>& tensors,
                 const std::vector<int64_t>& bytes,
                 size_t begin,
                 size_t end) {
  // Built as text: nlohmann's ordered_json looks keys up linearly.
  std::string text = R"({"__metadata__":{"format":"pt"})";
  int64_t offset = 0;
  for (size_t i = begin; i < end; ++i) {
    text += fmt::format(
        R"(,{}:{{"dtype":"{}","shape":[{}],"data_offsets":[{},{}]}})",
        nlohmann::json(tensors[i].name).dump(),
        dtype_tag(tensors[i].dtype),
        fmt::join(tensors[i].shape, ","),
        offset,
        offset + bytes[i]);
    offset += bytes[i];
  }
  text += "}";
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string length(8, '\0');
  uint64_t n = text.size();
  for (char& c : length) {
    c = static_cast<char>(n & 0xFFU);
    n >>= 8U;
  }
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << length << text;
    if (!out) {
      return false;
    }
  }
  return ::truncate(path.c_str(), static_cast<off_t>(8 + text.size()) + offset)
         == 0;
}

}  // namespace

int main(int argc, char** argv) {
  int shards = 163;
  int reps = 11;
  std::string dir =
      (fs::temp_directory_path() / "shardplan-bench-index").string();
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if ((arg == "--shards" || arg == "--reps") && i + 1 < argc) {
      if (!bench::parse_int(argv[++i], arg == "--shards" ? shards : reps)) {
        return usage("expected a positive integer");
      }
    } else if (arg == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else {
      return usage("unknown argument");
    }
  }

  shardplan::Diagnostics diags;
  auto tensors =
      shardplan::tensors_for_builtin_model("deepseek-v3", "bench", diags);
  if (!tensors) {
    return usage("no built-in deepseek-v3");
  }
  std::vector<int64_t> bytes;
  int64_t total = 0;
  for (const auto& t : *tensors) {
    int64_t elements = 1;
    for (int64_t d : t.shape) {
      elements *= d;
    }
    bytes.push_back(*shardplan::bytes_for(elements, t.dtype));
    total += bytes.back();
  }

  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string weight_map;
  const int64_t per_shard = total / shards + 1;
  size_t begin = 0;
  for (int s = 0; s < shards; ++s) {
    size_t end = begin;
    int64_t filled = 0;
    const bool last = s + 1 == shards;
    while (end < tensors->size() && (last || filled < per_shard)) {
      filled += bytes[end++];
    }
    std::string name =
        fmt::format("model-{:05}-of-{:06}.safetensors", s + 1, shards);
    if (!write_shard(
            (fs::path(dir) / name).string(), *tensors, bytes, begin, end)) {
      return usage("cannot write a shard");
    }
    for (size_t i = begin; i < end; ++i) {
      weight_map += fmt::format("{}\n    {}: \"{}\"",
                                weight_map.empty() ? "" : ",",
                                nlohmann::json((*tensors)[i].name).dump(),
                                name);
    }
    begin = end;
  }
  const std::string index_path =
      (fs::path(dir) / "model.safetensors.index.json").string();
  std::ofstream(index_path) << fmt::format(
      "{{\n  \"metadata\": {{\"total_size\": {}}},\n  \"weight_map\": {{{}\n  "
      "}}\n}}\n",
      total,
      weight_map);

  std::vector<double> ms;
  size_t read_tensors = 0;
  for (int r = 0; r <= reps; ++r) {
    shardplan::Diagnostics d;
    auto start = Clock::now();
    auto manifest = shardplan::read_manifest_path(index_path, d);
    double elapsed =
        std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (!manifest || d.has_errors()) {
      std::fprintf(stderr, "bench_index: the index did not read\n");
      return 1;
    }
    read_tensors = manifest->size();
    if (r > 0) {
      ms.push_back(elapsed);
    }
  }
  std::sort(ms.begin(), ms.end());
  fmt::print(
      "index of {} shards, {} tensors, {} bytes of tensors ({}): median {:.1f} "
      "ms, "
      "max {:.1f} ms over {} runs; {:.2f} ms per shard\n",
      shards,
      read_tensors,
      total,
      index_path,
      ms[ms.size() / 2],
      ms.back(),
      reps,
      ms[ms.size() / 2] / shards);
  fs::remove_all(dir);
  return 0;
}
