#include "io/files.hpp"
#include "io/internal.hpp"

#include <shardplan/io.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

// safetensors files and indexes (docs/manifest-format.md).
//
// A .safetensors file is an 8-byte little-endian header length N, N bytes of
// JSON header, then the tensor data. Only the first 8 + N bytes are read.
// The checks are those of safetensors' own loader (safetensors/src/tensor.rs,
// SafeTensors::read_metadata and Metadata::validate): N at most 100,000,000;
// 8 + N within the file; the header valid UTF-8 JSON; each tensor's offsets
// spanning its bytes; sorted by offset, the tensors cover the data section
// from its first byte to the file's last with no overlap and no gap.

namespace shardplan {

namespace {

using io_detail::DataOffsets;
using io_detail::FileDescriptor;
using io_detail::open_retry;

using io_detail::errno_message;

// Reads exactly `size` bytes at `offset`; returns 0, an errno value, or -1
// when the file ended first.
int read_at(int fd, uint64_t offset, char* into, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(
        fd, into + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno;
    }
    if (n == 0) {
      return -1;
    }
    done += static_cast<size_t>(n);
  }
  return 0;
}

// A location in the file `source` at a tensor's data_offsets.
Location offsets_location(const std::string& source, const Tensor& tensor) {
  Location where = Location::of(source);
  where.pointer = tensor.pointer() + "/data_offsets";
  return where;
}

std::string offsets_text(const DataOffsets& o) {
  return fmt::format("[{}, {}]", o[0], o[1]);
}

// safetensors' Metadata::validate, reporting every problem.
bool check_data_offsets(const Manifest& manifest,
                        const std::vector<DataOffsets>& offsets,
                        uint64_t data_bytes,
                        Diagnostics& diags) {
  const size_t errors_before = diags.error_count();
  const std::vector<Tensor>& tensors = manifest.tensors();
  const auto data_end = static_cast<int64_t>(
      std::min<uint64_t>(data_bytes, std::numeric_limits<int64_t>::max()));
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return offsets[a] < offsets[b];
  });
  int64_t covered =
      0;            // the data section's bytes [0, covered) belong to tensors
  size_t last = 0;  // the tensor that ends at `covered`
  bool out_of_bounds = false;
  for (size_t i : order) {
    const Tensor& tensor = tensors[i];
    const DataOffsets& o = offsets[i];
    if (o[1] > data_end) {
      out_of_bounds = true;
      Diagnostic& d =
          diags.error("safetensors.out-of-bounds",
                      fmt::format("data_offsets {} run past the end of the "
                                  "data section, which has {} "
                                  "bytes",
                                  offsets_text(o),
                                  data_bytes),
                      offsets_location(manifest.source, tensor));
      d.tensor = std::string(tensor.name);
      d.hint = "the file is truncated, or the header belongs to another file";
    } else if (o[0] < covered) {
      Diagnostic& d =
          diags.error("safetensors.overlap",
                      fmt::format("data_offsets {} overlap those of {}, {}",
                                  offsets_text(o),
                                  quote(tensors[last].name),
                                  offsets_text(offsets[last])),
                      offsets_location(manifest.source, tensor));
      d.tensor = std::string(tensor.name);
    } else if (o[0] > covered) {
      Diagnostic& d =
          diags.error("safetensors.gap",
                      fmt::format("data_offsets {} leave bytes [{}, {}) of the "
                                  "data section to no tensor",
                                  offsets_text(o),
                                  covered,
                                  o[0]),
                      offsets_location(manifest.source, tensor));
      d.tensor = std::string(tensor.name);
      d.hint =
          "safetensors' loader refuses a gap between tensors (InvalidOffset)";
    }
    if (o[1] > covered) {
      covered = o[1];
      last = i;
    }
  }
  if (!out_of_bounds && covered < data_end) {
    diags
        .error(
            "safetensors.incomplete",
            fmt::format(
                "the tensors end at byte {} of the data section, but it has {} "
                "bytes: the last {} belong to no tensor",
                covered,
                data_bytes,
                data_end - covered),
            Location::of(manifest.source))
        .hint =
        "safetensors' loader refuses trailing bytes (MetadataIncompleteBuffer)";
  }
  return diags.error_count() == errors_before;
}

// Whether the first bytes look like text rather than a little-endian length.
bool looks_like_text(const std::array<unsigned char, 8>& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](unsigned char c) {
    return c == '\t' || c == '\n' || c == '\r' || (c >= 0x20 && c < 0x7F);
  });
}

// read_safetensors_file, with `io_where` the location of a read failure and
// `io_what` its message's subject (the file itself, or a shard of an index).
std::optional<Manifest> read_header_file(const std::string& path,
                                         const Location& io_where,
                                         std::string_view io_what,
                                         Diagnostics& diags) {
  auto io_fail = [&](int error) -> std::optional<Manifest> {
    diags.error(
        "io.read",
        fmt::format("cannot read {}: {}", io_what, errno_message(error)),
        io_where);
    return std::nullopt;
  };
  auto fail = [&](std::string code,
                  std::string message,
                  std::string hint = {}) -> std::optional<Manifest> {
    diags.error(std::move(code), std::move(message), Location::of(path)).hint =
        std::move(hint);
    return std::nullopt;
  };
  FileDescriptor fd(open_retry(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return io_fail(errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return io_fail(errno);
  }
  if (S_ISDIR(st.st_mode)) {
    return io_fail(EISDIR);
  }
  if (!S_ISREG(st.st_mode)) {
    return fail(
        "safetensors.not-a-file",
        "a safetensors file is read in place: this is not a regular file");
  }
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  std::array<unsigned char, 8> length_bytes{};
  if (file_bytes < length_bytes.size()) {
    return fail(
        "safetensors.header-length",
        fmt::format(
            "the file has {} bytes; a safetensors file starts with an 8-byte "
            "header length",
            file_bytes),
        file_bytes == 0 ? "the file is empty" : "");
  }
  if (int e = read_at(fd.get(),
                      0,
                      reinterpret_cast<char*>(length_bytes.data()),
                      length_bytes.size())) {
    return e < 0 ? fail("safetensors.header-length",
                        "the file ended while being read")
                 : io_fail(e);
  }
  uint64_t header_bytes = 0;
  for (size_t i = length_bytes.size(); i-- > 0;) {
    header_bytes = (header_bytes << 8U) | length_bytes[i];
  }
  const std::string text_hint =
      looks_like_text(length_bytes)
          ? "the file starts with text, not a length: a JSON manifest or index "
            "is not a "
            ".safetensors file"
          : "";
  if (header_bytes > k_safetensors_max_header_bytes) {
    return fail(
        "safetensors.header-too-large",
        fmt::format("header length {} is over safetensors' limit of {} bytes",
                    header_bytes,
                    k_safetensors_max_header_bytes),
        text_hint);
  }
  if (header_bytes > file_bytes - length_bytes.size()) {
    return fail(
        "safetensors.header-length",
        fmt::format(
            "header length {} runs past the end of the file, which has {} "
            "bytes after the length",
            header_bytes,
            file_bytes - length_bytes.size()),
        text_hint.empty() ? "the file is truncated, or not a safetensors file"
                          : text_hint);
  }
  std::string header(static_cast<size_t>(header_bytes), '\0');
  if (int e = read_at(
          fd.get(), length_bytes.size(), header.data(), header.size())) {
    return e < 0 ? fail("safetensors.header-length",
                        "the file ended while being read")
                 : io_fail(e);
  }
  const uint64_t data_bytes = file_bytes - length_bytes.size() - header_bytes;
  return read_safetensors_header(header, data_bytes, path, diags);
}

bool is_directory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

bool exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

}  // namespace

std::optional<Manifest> read_safetensors_header(std::string_view header,
                                                uint64_t data_bytes,
                                                std::string_view source,
                                                Diagnostics& diags) {
  std::vector<DataOffsets> offsets;
  std::optional<Manifest> manifest =
      io_detail::read_header_text(header, source, offsets, diags);
  if (!manifest || !check_data_offsets(*manifest, offsets, data_bytes, diags)) {
    return std::nullopt;
  }
  return manifest;
}

std::optional<Manifest> read_safetensors_file(const std::string& path,
                                              Diagnostics& diags) {
  return read_header_file(path, Location::of(path), "file", diags);
}

namespace {

// read_safetensors_index, with read_padding's figure for the buffer `json`
// is in (0: unknown).
std::optional<Manifest> read_index(std::string_view json,
                                   const std::string& path,
                                   Diagnostics& diags,
                                   size_t padding) {
  std::optional<io_detail::IndexFile> index =
      io_detail::read_index_text(json, path, diags, padding);
  if (!index) {
    return std::nullopt;
  }
  const std::filesystem::path folder =
      std::filesystem::path(path).parent_path();
  auto entry_location = [&](std::string_view name) {
    Location where = Location::of(path);
    where.pointer = json_pointer_child("/weight_map", name);
    return where;
  };
  // Each shard's header, read once; the first entry naming a shard is where
  // a failure to read it is reported.
  std::vector<std::optional<Manifest>> shards(index->shards.size());
  std::vector<size_t> mapped(index->shards.size(), 0);
  std::vector<bool> read(index->shards.size(), false);
  bool ok = true;
  for (const io_detail::IndexEntry& entry : index->entries) {
    ++mapped[entry.shard];
    if (read[entry.shard]) {
      continue;
    }
    read[entry.shard] = true;
    const std::string& file = index->shards[entry.shard];
    const std::string shard_path = (folder / file).string();
    shards[entry.shard] =
        read_header_file(shard_path,
                         entry_location(entry.name),
                         fmt::format("shard {} ({})", quote(file), shard_path),
                         diags);
    ok = ok && shards[entry.shard].has_value();
  }
  if (!ok) {
    return std::nullopt;
  }
  Manifest manifest;
  manifest.source = path;
  manifest.reserve(index->entries.size());
  // "Did you mean" costs an edit distance per name of the shard: given for
  // the first few missing tensors only (a weight_map that names the wrong
  // shards misses every tensor).
  constexpr size_t k_max_hints = 20;
  size_t hints = 0;
  for (const io_detail::IndexEntry& entry : index->entries) {
    const Manifest& shard = *shards[entry.shard];
    const Tensor* tensor = shard.find(entry.name);
    if (tensor == nullptr) {
      ok = false;
      Diagnostic& d = diags.error(
          "safetensors.missing-tensor",
          fmt::format(
              "weight_map puts {} in {}, whose header has no such tensor",
              quote(entry.name),
              quote(index->shards[entry.shard])),
          entry_location(entry.name));
      d.tensor = entry.name;
      if (hints++ >= k_max_hints) {
        continue;
      }
      std::vector<std::string> names;
      names.reserve(shard.size());
      for (const Tensor& t : shard.tensors()) {
        names.emplace_back(t.name);
      }
      if (std::string near = closest_match(entry.name, names); !near.empty()) {
        d.hint = fmt::format("the shard has {}", quote(near));
      }
      continue;
    }
    TensorInput input;
    input.name = tensor->name;
    input.shape = tensor->shape;
    input.dtype = tensor->dtype;
    input.pointer_form = PointerForm::weight_map;
    // The tensor was checked as its shard was read, where a warning about
    // it (a tensor with no elements) points at its shape: only errors are
    // new here (a name in two shards).
    Diagnostics merged;
    if (!manifest.add(input, merged, entry_location(entry.name))) {
      ok = false;
    }
    for (const Diagnostic& d : merged.items()) {
      if (d.severity == Severity::error) {
        diags.add(d);
      }
    }
  }
  if (!ok) {
    return std::nullopt;
  }
  for (size_t s = 0; s < shards.size(); ++s) {
    if (shards[s]->size() > mapped[s]) {
      diags.warning(
          "safetensors.unmapped",
          fmt::format(
              "shard {} holds {} tensors the index does not map; they are "
              "left out",
              quote(index->shards[s]),
              shards[s]->size() - mapped[s]),
          Location::of((folder / index->shards[s]).string()));
    }
  }
  if (index->total_size && *index->total_size != manifest.total_bytes()) {
    Location where = Location::of(path);
    where.pointer = "/metadata/total_size";
    diags.warning(
        "safetensors.total-size",
        fmt::format("metadata.total_size is {} bytes, but the tensors have {}",
                    *index->total_size,
                    manifest.total_bytes()),
        where);
  }
  return manifest;
}

}  // namespace

std::optional<Manifest> read_safetensors_index(std::string_view json,
                                               const std::string& path,
                                               Diagnostics& diags) {
  return read_index(json, path, diags, 0);
}

std::optional<Manifest> read_manifest_path(const std::string& path,
                                           Diagnostics& diags) {
  if (is_directory(path)) {
    const std::string slash = path.ends_with('/') ? path : path + "/";
    for (const char* name :
         {"model.safetensors.index.json", "model.safetensors"}) {
      if (exists(slash + name)) {
        return read_manifest_path(slash + name, diags);
      }
    }
    diags.error("io.read",
                "cannot read a folder as a manifest: it has no "
                "model.safetensors.index.json "
                "and no model.safetensors",
                Location::of(path));
    return std::nullopt;
  }
  if (path.ends_with(".safetensors")) {
    return read_safetensors_file(path, diags);
  }
  std::optional<io_detail::PaddedText> text = io_detail::PaddedText::load(
      path, input_limit(InputKind::manifest), diags);
  if (!text) {
    return std::nullopt;
  }
  bool is_index = false;
  std::optional<Manifest> manifest = io_detail::read_manifest_or_index(
      text->text(), path, is_index, diags, text->padding());
  if (is_index) {
    return read_index(text->text(), path, diags, text->padding());
  }
  return manifest;
}

}  // namespace shardplan
