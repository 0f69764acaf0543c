// Reading and writing whole files (include/shardplan/io.hpp): read_file,
// and atomic writes (a temporary file in the same folder, flushed, renamed
// over the target).

#include "io/files.hpp"

#include <shardplan/io.hpp>

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace shardplan {

namespace {

using io_detail::errno_message;
using io_detail::FileDescriptor;
using io_detail::open_retry;

// Writes all of `data`; returns 0 or an errno value.
int write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

mode_t current_umask() {
  mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

}  // namespace

InputLimit input_limit(InputKind kind) {
  constexpr uint64_t k_mib = uint64_t{1} << 20U;
  switch (kind) {
    case InputKind::manifest:
      return {"manifest", 1024 * k_mib};
    case InputKind::specs:
      return {"specs file", 1024 * k_mib};
    case InputKind::rules:
      return {"rules file", 64 * k_mib};
    case InputKind::topology:
      return {"topology file", 1 * k_mib};
    case InputKind::hf_config:
      return {"Hugging Face config", 16 * k_mib};
    case InputKind::maxtext_config:
      return {"MaxText config", 4 * k_mib};
  }
  return {"file", 0};
}

std::optional<std::string> read_file(const std::string& path,
                                     InputKind kind,
                                     Diagnostics& diags) {
  return io_detail::read_file(path, input_limit(kind), diags);
}

namespace {

// A limit as the docs give it: "1 GiB (1073741824 bytes)", "1000 bytes".
std::string limit_text(uint64_t bytes) {
  constexpr std::array<const char*, 3> k_units = {"KiB", "MiB", "GiB"};
  const char* unit = nullptr;
  uint64_t value = bytes;
  for (const char* next : k_units) {
    if (value == 0 || value % 1024 != 0) {
      break;
    }
    value /= 1024;
    unit = next;
  }
  return unit == nullptr ? fmt::format("{} bytes", bytes)
                         : fmt::format("{} {} ({} bytes)", value, unit, bytes);
}

// The error of a file over its limit [io.too-large]: `size` bytes when its
// size is known (a regular file, refused unread), else read past the limit.
void report_too_large(const std::string& path,
                      const InputLimit& limit,
                      std::optional<uint64_t> size,
                      Diagnostics& diags) {
  const std::string has =
      size ? fmt::format("the file has {} bytes", *size)
           : fmt::format("the input has more than {} bytes", limit.max_bytes);
  diags
      .error("io.too-large",
             fmt::format("{}; a {} may have at most {}",
                         has,
                         limit.what,
                         limit_text(limit.max_bytes)),
             Location::of(path))
      .hint = size ? fmt::format(
                  "none of it was read: the limit is far above "
                  "any real {} (docs/cli.md, \"Input files and "
                  "their sizes\")",
                  limit.what)
                   : "a pipe or a device is read up to the limit, then refused";
}

}  // namespace

std::optional<std::string> io_detail::read_file(const std::string& path,
                                                const InputLimit& limit,
                                                Diagnostics& diags) {
  assert(limit.max_bytes < std::numeric_limits<size_t>::max() / 2);
  auto fail = [&](int error) -> std::optional<std::string> {
    diags.error("io.read",
                fmt::format("cannot read file: {}", errno_message(error)),
                Location::of(path));
    return std::nullopt;
  };
  if (path.empty()) {
    return fail(ENOENT);
  }
  FileDescriptor fd(open_retry(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return fail(errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return fail(errno);
  }
  if (S_ISDIR(st.st_mode)) {
    return fail(EISDIR);
  }
  // A regular file's size is known: over the limit, it is refused unread.
  if (S_ISREG(st.st_mode) && st.st_size > 0
      && static_cast<uint64_t>(st.st_size) > limit.max_bytes) {
    report_too_large(path, limit, static_cast<uint64_t>(st.st_size), diags);
    return std::nullopt;
  }
  // Read st_size bytes in place, then on to the end of the file: pipes,
  // /proc files (st_size 0) and growing files have more than st_size says.
  // Never more than one byte past the limit is read or held: that byte tells
  // an input over the limit (/dev/zero never ends) from one that fills it.
  // The buffer keeps room for simdjson's padding after the text (see
  // read_padding).
  constexpr size_t k_padding = simdjson::SIMDJSON_PADDING;
  constexpr size_t k_step = size_t{1} << 20U;  // bytes zeroed per read
  const auto cap = static_cast<size_t>(limit.max_bytes) + 1;
  std::string text;
  // A buffer of exactly `bytes` (std::string's reserve may round a growing
  // string's request up to twice its capacity; a new one takes it as is).
  auto grow = [&text](size_t bytes) {
    std::string bigger;
    bigger.reserve(bytes);
    bigger.append(text);
    text.swap(bigger);
  };
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    grow(static_cast<size_t>(st.st_size) + k_padding);
  }
  size_t filled = 0;
  std::array<char, size_t{1} << 16U> chunk{};
  while (filled < cap) {
    // Into the buffer while it has room; past its end (where a regular file
    // should end) into `chunk`, so that an end of file costs no growth.
    const size_t room =
        text.capacity() > filled + k_padding
            ? std::min(text.capacity() - k_padding, cap) - filled
            : 0;
    const size_t want = room > 0 ? std::min(room, k_step)
                                 : std::min(chunk.size(), cap - filled);
    if (room > 0) {
      text.resize(filled + want);
    }
    char* into = room > 0 ? text.data() + filled : chunk.data();
    const ssize_t n = ::read(fd.get(), into, want);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return fail(errno);
    }
    const auto got = static_cast<size_t>(n);
    if (room > 0) {
      text.resize(filled + got);
    } else if (got > 0) {
      // Doubling, never past the cap and the padding after it.
      grow(std::min(std::max(text.capacity() * 2, filled + got), cap)
           + k_padding);
      text.append(chunk.data(), got);
    }
    if (got == 0) {
      break;
    }
    filled += got;
  }
  if (filled > limit.max_bytes) {
    report_too_large(path, limit, std::nullopt, diags);
    return std::nullopt;
  }
  return text;
}

size_t io_detail::read_padding(std::string& text) {
  const size_t size = text.size();
  if (text.capacity() - size < simdjson::SIMDJSON_PADDING) {
    return 0;
  }
  // Zeros (resize writes them), not whatever the allocator left: the
  // parser reads them.
  text.resize(text.capacity());
  text.resize(size);
  return text.capacity() - size;
}

AtomicFile::~AtomicFile() {
  if (m_fd >= 0) {
    ::close(m_fd);
  }
  if (!m_temp.empty() && !m_committed) {
    ::unlink(m_temp.c_str());
  }
}

bool AtomicFile::fail(int error, Diagnostics& diags) {
  diags.error("io.write",
              fmt::format("cannot write file: {}", errno_message(error)),
              Location::of(m_path));
  if (m_fd >= 0) {
    ::close(m_fd);
    m_fd = -1;
  }
  if (!m_temp.empty()) {
    ::unlink(m_temp.c_str());
    m_temp.clear();
  }
  return false;
}

bool AtomicFile::open(const std::string& path, Diagnostics& diags) {
  assert(m_fd < 0);
  m_path = path;
  if (path.empty()) {
    return fail(ENOENT, diags);
  }
  // Replace what a symlink points to, not the link.
  m_target = path;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    if (char* resolved = ::realpath(path.c_str(), nullptr)) {
      m_target = resolved;
      std::free(resolved);  // NOLINT(cppcoreguidelines-no-malloc)
    }
  }
  const bool exists = ::stat(m_target.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) {
    return fail(EISDIR, diags);
  }
  if (exists && !S_ISREG(st.st_mode)) {
    // A device or a pipe (/dev/null, /dev/stdout): nothing to rename over.
    m_fd = open_retry(m_target.c_str(), O_WRONLY | O_CLOEXEC);
    return m_fd >= 0 || fail(errno, diags);
  }
  std::string temp = m_target + ".tmpXXXXXX";
  m_fd = ::mkstemp(temp.data());
  if (m_fd < 0) {
    return fail(errno, diags);
  }
  m_temp = std::move(temp);
  // mkstemp creates 0600; give the file the mode it had, or the usual one.
  const mode_t mode =
      exists ? (st.st_mode & 07777U) : (0666U & ~current_umask());
  if (::fchmod(m_fd, mode) != 0) {
    return fail(errno, diags);
  }
  return true;
}

void AtomicFile::write(std::string_view data) {
  if (m_fd < 0 || m_error != 0) {
    return;
  }
  m_error = write_all(m_fd, data);
  m_written += data.size();
#ifdef __linux__
  // Start writing back each few MiB of a temporary file as it is written:
  // the disk works while the rest is formatted, and commit's fsync waits
  // only for the tail (40 MB of plan JSON: about 20 ms less).
  constexpr size_t k_writeback_bytes = size_t{4} << 20U;
  if (!m_temp.empty() && m_error == 0
      && m_written - m_flushed >= k_writeback_bytes) {
    ::sync_file_range(m_fd,
                      static_cast<off_t>(m_flushed),
                      static_cast<off_t>(m_written - m_flushed),
                      SYNC_FILE_RANGE_WRITE);
    m_flushed = m_written;
  }
#endif
}

bool AtomicFile::commit(Diagnostics& diags) {
  assert(m_fd >= 0);
  if (m_error != 0) {
    return fail(m_error, diags);
  }
  if (m_temp.empty()) {
    const int fd = m_fd;
    m_fd = -1;
    return ::close(fd) == 0 || fail(errno, diags);
  }
  if (::fsync(m_fd) != 0) {
    return fail(errno, diags);
  }
  const int fd = m_fd;
  m_fd = -1;
  if (::close(fd) != 0) {
    return fail(errno, diags);
  }
  if (::rename(m_temp.c_str(), m_target.c_str()) != 0) {
    return fail(errno, diags);
  }
  m_committed = true;
  // Make the rename itself durable; a failure here loses nothing written.
  size_t slash = m_target.rfind('/');
  std::string folder =
      slash == std::string::npos
          ? std::string(".")
          : (slash == 0 ? std::string("/") : m_target.substr(0, slash));
  FileDescriptor dir(
      open_retry(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() >= 0) {
    ::fsync(dir.get());
  }
  return true;
}

bool write_file_atomic(const std::string& path,
                       std::string_view contents,
                       Diagnostics& diags) {
  AtomicFile file;
  if (!file.open(path, diags)) {
    return false;
  }
  file.write(contents);
  return file.commit(diags);
}

}  // namespace shardplan
