#pragma once

// Files for the io module's readers and writers (io/files.cpp,
// io/mapped.cpp): descriptors, padded texts of input files. Not a public
// header.

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

namespace shardplan::io_detail {

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

// read_file (io.hpp) within `limit`: tests give small limits. At most
// limit.max_bytes + 1 bytes are ever read or held.
// REQUIRES: limit.max_bytes < SIZE_MAX / 2
std::optional<std::string> read_file(const std::string& path,
                                     const InputLimit& limit,
                                     Diagnostics& diags);

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
  // The text of `path` within `limit`, or nullopt with read_file's error
  // reported (a regular file over the limit is neither mapped nor read).
  static std::optional<PaddedText> load(const std::string& path,
                                        const InputLimit& limit,
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
  bool map(const std::string& path, uint64_t max_bytes);
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

}  // namespace shardplan::io_detail
