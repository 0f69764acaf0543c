#include "io/files.hpp"

#include <shardplan/io.hpp>

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <limits>
#include <utility>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// Input files mapped instead of read (io/files.hpp, PaddedText).
//
// Reading a 10 MB manifest with read(2) costs a zeroed buffer, a page fault
// per 4 KiB of it and a copy; a private read-only mapping costs neither:
// the text of a 100k-tensor manifest took 1 ms instead of 7.5.
// The price of a mapping is SIGBUS when another process truncates the file
// while it is mapped: the handler here turns that into exit code 2 and a
// message naming the file, instead of a crash.

namespace shardplan::io_detail {

namespace {

// The live mappings the SIGBUS handler knows, each with its message. A
// slot is filled before it is marked live and marked dead before its range
// is unmapped, so the handler never reads one half-written.
struct SigbusSlot {
  const char* begin = nullptr;
  const char* end = nullptr;
  std::array<char, 1024> message{};
  size_t length = 0;
  volatile sig_atomic_t live = 0;
};
std::array<SigbusSlot, 8> g_slots;
struct sigaction g_previous {};
int g_live_mappings = 0;

void on_sigbus(int signal, siginfo_t* info, void* context) {
  const auto* at = static_cast<const char*>(info->si_addr);
  for (const SigbusSlot& slot : g_slots) {
    if (slot.live != 0 && at >= slot.begin && at < slot.end) {
      // write(2) and _exit(2) are async-signal-safe; nothing else is done.
      ssize_t ignored =
          ::write(STDERR_FILENO, slot.message.data(), slot.length);
      (void)ignored;
      ::_exit(2);
    }
  }
  // Not ours: what the process did before, or the default (a core dump).
  if ((g_previous.sa_flags & SA_SIGINFO) != 0
      && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(signal);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);
}

}  // namespace

std::optional<PaddedText> PaddedText::load(const std::string& path,
                                           const InputLimit& limit,
                                           Diagnostics& diags) {
  PaddedText out;
  if (out.map(path, limit.max_bytes)) {
    return out;
  }
  std::optional<std::string> text = read_file(path, limit, diags);
  if (!text) {
    return std::nullopt;
  }
  out.m_read = std::move(*text);
  out.m_padding = read_padding(out.m_read);
  out.m_text = out.m_read;
  return out;
}

bool PaddedText::map(const std::string& path, uint64_t max_bytes) {
  if (path.empty()) {
    return false;
  }
  FileDescriptor fd(open_retry(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)
      || st.st_size <= 0 || static_cast<uint64_t>(st.st_size) > max_bytes) {
    // read_file opens it again and reports what is wrong: over the limit,
    // from its size, before a byte is mapped or read.
    return false;
  }
  const auto size = static_cast<size_t>(st.st_size);
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (size > std::numeric_limits<size_t>::max() - simdjson::SIMDJSON_PADDING
                 - page) {
    return false;
  }
  // Zeroed pages for the whole span, then the file over their start: the
  // rest of the file's last page reads as zeros too, so the text is followed
  // by at least the padding, all zero.
  const size_t span =
      (size + simdjson::SIMDJSON_PADDING + page - 1) / page * page;
  void* base =
      ::mmap(nullptr, span, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    return false;
  }
  if (::mmap(base,
             size,
             PROT_READ,
             MAP_PRIVATE | MAP_FIXED | MAP_POPULATE,
             fd.get(),
             0)
      == MAP_FAILED) {
    ::munmap(base, span);
    return false;  // a file system that cannot map: read it
  }
  m_map = base;
  m_map_bytes = span;
  m_text = std::string_view(static_cast<const char*>(base), size);
  m_padding = span - size;
  if (!guard(path)) {
    release();
    return false;  // every slot taken: read it
  }
  return true;
}

bool PaddedText::guard(const std::string& path) {
  size_t free = g_slots.size();
  for (size_t i = 0; i < g_slots.size() && free == g_slots.size(); ++i) {
    free = g_slots[i].live == 0 ? i : free;
  }
  if (free == g_slots.size()) {
    return false;
  }
  SigbusSlot& slot = g_slots[free];
  // The message as a diagnostic prints it (diag.cpp's format).
  auto result =
      fmt::format_to_n(slot.message.data(),
                       slot.message.size(),
                       "{}: error: the file shrank while it was being read; "
                       "nothing was written [io.changed]\n",
                       path);
  slot.length = std::min(result.size, slot.message.size());
  if (result.size > slot.message.size()) {
    slot.message.back() = '\n';
  }
  slot.begin = m_text.data();
  slot.end = m_text.data() + m_text.size();
  slot.live = 1;
  m_slot = free;
  if (g_live_mappings++ == 0) {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous);
  }
  return true;
}

void PaddedText::release() {
  if (m_map == nullptr) {
    return;
  }
  const bool guarded = m_slot != k_no_slot;
  if (guarded) {
    g_slots[m_slot].live = 0;
    m_slot = k_no_slot;
  }
  ::munmap(m_map, m_map_bytes);
  m_map = nullptr;
  if (guarded && --g_live_mappings == 0) {
    ::sigaction(SIGBUS, &g_previous, nullptr);
  }
}

PaddedText::PaddedText(PaddedText&& other) noexcept
    : m_read(std::move(other.m_read)),
      m_map(std::exchange(other.m_map, nullptr)),
      m_map_bytes(other.m_map_bytes),
      m_text(other.m_text),
      m_padding(other.m_padding),
      m_slot(std::exchange(other.m_slot, k_no_slot)) {
  if (m_map == nullptr) {
    m_text = m_read;  // the string's buffer moved with it, or is inline
  }
}

PaddedText::~PaddedText() {
  release();
}

}  // namespace shardplan::io_detail
