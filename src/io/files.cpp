// Reading and writing whole files (include/shardplan/io.hpp): read_file,
// and atomic writes (a temporary file in the same folder, flushed, renamed
// over the target).

#include "io/files.hpp"

#include <shardplan/io.hpp>

#include <fmt/format.h>
#include <simdjson.h>

#include <array>
#include <cassert>
#include <cerrno>
#include <cstdlib>
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

std::optional<std::string> read_file(const std::string& path,
                                     Diagnostics& diags) {
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
  // Read st_size bytes in place, then on to the end of the file: pipes,
  // /proc files (st_size 0) and growing files have more than st_size says.
  std::string text;
  size_t filled = 0;
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    // Room for simdjson's padding after the text (see read_padding).
    text.reserve(static_cast<size_t>(st.st_size) + simdjson::SIMDJSON_PADDING);
    text.resize(static_cast<size_t>(st.st_size));
  }
  std::array<char, size_t{1} << 16U> chunk{};
  for (;;) {
    const bool in_place = filled < text.size();
    char* into = in_place ? text.data() + filled : chunk.data();
    size_t want = in_place ? text.size() - filled : chunk.size();
    ssize_t n = ::read(fd.get(), into, want);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return fail(errno);
    }
    if (n == 0) {
      break;
    }
    if (!in_place) {
      text.append(chunk.data(), static_cast<size_t>(n));
    }
    filled += static_cast<size_t>(n);
  }
  text.resize(filled);
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
