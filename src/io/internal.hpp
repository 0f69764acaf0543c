#pragma once

// Shared by the io module's sources (io.cpp, io/safetensors.cpp); not a
// public header.

#include <shardplan/diag.hpp>
#include <shardplan/tensor.hpp>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

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

// How many bytes after `text`'s end its buffer holds, zeroed, when that is
// at least simdjson's padding (read_file leaves that much), else 0. The
// bytes stay valid until `text` is changed.
size_t read_padding(std::string& text);

// A file's text followed by at least simdjson's padding, all zero, so
// simdjson parses it in place. A regular file is mapped read-only
// (io/mapped.cpp): no buffer to zero, no copy. Anything else -- a pipe,
// /proc, an empty file, a file system that cannot map -- is read as
// read_file reads it.
//
// While a mapping lives, a SIGBUS in it (another process truncated the
// file) ends the process with exit code 2 and "PATH: error: the file shrank
// while it was being read; nothing was written [io.changed]" on stderr: the
// one input error reported outside Diagnostics, since the signal cannot
// unwind. Outputs are written after the inputs are released, so no
// half-written file is left.
class PaddedText {
 public:
  // The text of `path`, or nullopt with read_file's error reported.
  static std::optional<PaddedText> load(const std::string& path,
                                        Diagnostics& diags);

  PaddedText(PaddedText&& other) noexcept;
  PaddedText& operator=(PaddedText&&) = delete;
  PaddedText(const PaddedText&) = delete;
  PaddedText& operator=(const PaddedText&) = delete;
  ~PaddedText();

  std::string_view text() const { return m_text; }
  // Zero bytes readable after text(): at least simdjson's padding, or 0
  // when a read text had no room (the readers copy it then).
  size_t padding() const { return m_padding; }
  bool mapped() const { return m_map != nullptr; }

 private:
  static constexpr size_t k_no_slot = static_cast<size_t>(-1);

  PaddedText() = default;
  bool map(const std::string& path);
  // Makes the SIGBUS handler report the mapping; false when it already
  // watches as many mappings as it can (8).
  bool guard(const std::string& path);
  void release();

  std::string m_read;     // the text, when read
  void* m_map = nullptr;  // the mapping, when mapped
  size_t m_map_bytes = 0;
  std::string_view m_text;
  size_t m_padding = 0;
  size_t m_slot = k_no_slot;  // the handler's slot for the mapping
};

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

// The first JSON syntax error of a text, as every reader reports it: where
// (a byte offset) and what, in words ("expected ':', got a string"), with a
// hint for habits from other languages (trailing commas, single quotes, NaN).
struct SyntaxError {
  size_t offset = 0;  // byte offset of the caret in the checked text
  std::string message;
  std::string hint;
};

// nullopt when `text` is valid JSON. Builds nothing (nlohmann's SAX parser,
// iterative: deep nesting is harmless).
std::optional<SyntaxError> find_syntax_error(std::string_view text);

// The system's words for an errno value ("No such file or directory").
inline std::string errno_message(int error) {
  return std::generic_category().message(error);
}

// An owned file descriptor, closed on destruction.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : m_fd(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (m_fd >= 0) {
      ::close(m_fd);
    }
  }
  int get() const { return m_fd; }
  // Closes now and reports the error close() gives (NFS reports late).
  int close() {
    int result = ::close(m_fd);
    m_fd = -1;
    return result;
  }

 private:
  int m_fd;
};

// open(2), retried on EINTR.
inline int open_retry(const char* path, int flags, mode_t mode = 0) {
  int fd = -1;
  do {
    fd =
        ::open(path, flags, mode);  // NOLINT(cppcoreguidelines-pro-type-vararg)
  } while (fd < 0 && errno == EINTR);
  return fd;
}

}  // namespace shardplan::io_detail
