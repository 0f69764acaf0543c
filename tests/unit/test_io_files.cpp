// Reading and writing whole files (src/io/files.hpp: files.cpp and
// mapped.cpp): read_file and each kind's size limit, atomic writes, and the
// mapped, padded text the simdjson readers parse.

#include "io/files.hpp"
#include "support/test_support.hpp"

#include <shardplan/io.hpp>

#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace shardplan;

namespace {

using test::files_in;

const InputLimit k_manifest_limit = input_limit(InputKind::manifest);

// A fresh empty folder under the system's temporary folder.
std::string temp_dir() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "shardplan-io-XXXXXX").string();
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

}  // namespace

TEST_CASE("io: read_file", "[io][files]") {
  const std::string dir = temp_dir();
  const std::string path = dir + "/in.bin";
  const std::string bytes("a\0b\r\n\xff", 6);
  Diagnostics diags;
  REQUIRE(write_file_atomic(path, bytes, diags));
  std::optional<std::string> text = read_file(path, InputKind::manifest, diags);
  REQUIRE(text.has_value());
  CHECK(*text == bytes);
  // An empty file is an empty string, not an error.
  REQUIRE(write_file_atomic(path, "", diags));
  CHECK(read_file(path, InputKind::manifest, diags)
        == std::optional<std::string>(""));
  CHECK(diags.items().empty());

  std::optional<std::string> missing =
      read_file(dir + "/nope.json", InputKind::manifest, diags);
  CHECK_FALSE(missing.has_value());
  REQUIRE(diags.error_count() == 1);
  CHECK(diags.items()[0].code == "io.read");
  CHECK(render(diags.items()[0])
        == dir + "/nope.json: error: cannot read file: No such file or directory "
                 "[io.read]");
  CHECK(diags.items()[0].location.source == dir + "/nope.json");

  Diagnostics dir_diags;
  CHECK_FALSE(read_file(dir, InputKind::manifest, dir_diags).has_value());
  REQUIRE(dir_diags.error_count() == 1);
  CHECK(render(dir_diags.items()[0])
        == dir + ": error: cannot read file: Is a directory [io.read]");
  std::filesystem::remove_all(dir);
}

// The limits of docs/cli.md ("Input files and their sizes"), each from the
// largest real input of its kind: 1 GiB = 1024^3 = 1,073,741,824 bytes for
// manifests and specs files, 64 MiB = 67,108,864 for rules files, 1 MiB =
// 1,048,576 for topology files, 16 MiB = 16,777,216 for Hugging Face configs.
TEST_CASE("io: each kind of input has its limit", "[io][files]") {
  CHECK(input_limit(InputKind::manifest).max_bytes == 1'073'741'824U);
  CHECK(input_limit(InputKind::specs).max_bytes == 1'073'741'824U);
  CHECK(input_limit(InputKind::rules).max_bytes == 67'108'864U);
  CHECK(input_limit(InputKind::topology).max_bytes == 1'048'576U);
  CHECK(input_limit(InputKind::hf_config).max_bytes == 16'777'216U);
  CHECK(input_limit(InputKind::manifest).what == "manifest");
  CHECK(input_limit(InputKind::hf_config).what == "Hugging Face config");
}

// A sparse file of 1 TiB reads as zeros: were a byte of it read (or mapped
// with MAP_POPULATE), the test would run for minutes or fail to allocate.
TEST_CASE("io: a regular file over the limit is refused from its size, unread",
          "[io][files]") {
  const std::string dir = temp_dir();
  const std::string path = dir + "/huge.json";
  { std::ofstream(path).put('{'); }
  std::filesystem::resize_file(path, uintmax_t{1} << 40U);  // sparse, 1 TiB
  const std::string expected =
      path
      + ": error: the file has 1099511627776 bytes; a manifest may have at "
        "most 1 GiB (1073741824 bytes); none of it was read: the limit is far "
        "above any real manifest (docs/cli.md, \"Input files and their "
        "sizes\") [io.too-large]";
  Diagnostics diags;
  CHECK_FALSE(read_file(path, InputKind::manifest, diags).has_value());
  REQUIRE(diags.error_count() == 1);
  CHECK(render(diags.items()[0]) == expected);
  // Mapped inputs go by the same limit, and are not mapped.
  Diagnostics mapped;
  CHECK_FALSE(
      io_detail::PaddedText::load(path, k_manifest_limit, mapped).has_value());
  REQUIRE(mapped.error_count() == 1);
  CHECK(render(mapped.items()[0]) == expected);
  Diagnostics manifest;
  CHECK_FALSE(read_manifest_path(path, manifest).has_value());
  REQUIRE(manifest.error_count() == 1);
  CHECK(render(manifest.items()[0]) == expected);

  // At the limit a file is read; one byte over, refused.
  const InputLimit small{"rules file", 1000};
  REQUIRE(write_file_atomic(path, std::string(1000, ' '), diags));
  Diagnostics at_limit;
  CHECK(io_detail::read_file(path, small, at_limit)
        == std::optional<std::string>(std::string(1000, ' ')));
  CHECK(at_limit.items().empty());
  REQUIRE(write_file_atomic(path, std::string(1001, ' '), diags));
  Diagnostics over;
  CHECK_FALSE(io_detail::read_file(path, small, over).has_value());
  REQUIRE(over.error_count() == 1);
  CHECK(over.items()[0].message
        == "the file has 1001 bytes; a rules file may have at most 1000 bytes");
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "io: a device or a pipe is read one byte past the limit, then "
    "refused",
    "[io][files]") {
  // /dev/zero never ends: 1024 + 1 bytes read, then the error (1024 bytes
  // is 1 KiB).
  const InputLimit limit{"manifest", 1024};
  Diagnostics zero;
  CHECK_FALSE(io_detail::read_file("/dev/zero", limit, zero).has_value());
  REQUIRE(zero.error_count() == 1);
  CHECK(render(zero.items()[0])
        == "/dev/zero: error: the input has more than 1024 bytes; a manifest "
           "may have at most 1 KiB (1024 bytes); a pipe or a device is read up "
           "to the limit, then refused [io.too-large]");
  // The same through the mapped reader, which cannot map a device.
  Diagnostics padded;
  CHECK_FALSE(
      io_detail::PaddedText::load("/dev/zero", limit, padded).has_value());
  CHECK(padded.error_count() == 1);

  // A pipe, through its /proc/self/fd path as a shell's <(...) gives it.
  // The writer sends `bytes` bytes; after the reader stops at 1025 the rest
  // (under a pipe's 64 KiB buffer) is left in the pipe, so it never blocks.
  auto through_pipe = [&](const std::string& bytes, Diagnostics& diags) {
    std::array<int, 2> fds{};
    REQUIRE(::pipe(fds.data()) == 0);
    std::thread writer([&] {
      std::string_view rest = bytes;
      while (!rest.empty()) {
        const ssize_t n = ::write(fds[1], rest.data(), rest.size());
        if (n <= 0) {
          break;
        }
        rest.remove_prefix(static_cast<size_t>(n));
      }
      ::close(fds[1]);
    });
    std::optional<std::string> text = io_detail::read_file(
        "/proc/self/fd/" + std::to_string(fds[0]), limit, diags);
    writer.join();
    ::close(fds[0]);
    return text;
  };
  Diagnostics small;
  const std::string manifest = R"({"params": []})";
  CHECK(through_pipe(manifest, small) == std::optional<std::string>(manifest));
  CHECK(small.items().empty());
  Diagnostics full;
  CHECK(through_pipe(std::string(1024, ' '), full).has_value());
  CHECK(full.items().empty());
  Diagnostics endless;
  CHECK_FALSE(through_pipe(std::string(8192, ' '), endless).has_value());
  REQUIRE(endless.error_count() == 1);
  CHECK(endless.items()[0].code == "io.too-large");
  CHECK(endless.items()[0].message
        == "the input has more than 1024 bytes; a manifest may have at most 1 "
           "KiB (1024 bytes)");
}

TEST_CASE("io: write_file_atomic", "[io][files]") {
  const std::string dir = temp_dir();
  const std::string path = dir + "/out.json";
  Diagnostics diags;
  REQUIRE(write_file_atomic(path, "first", diags));
  CHECK(read_file(path, InputKind::manifest, diags)
        == std::optional<std::string>("first"));
  // Replacing keeps the file's mode and leaves no temporary file.
  REQUIRE(::chmod(path.c_str(), 0640) == 0);
  REQUIRE(write_file_atomic(path, "second", diags));
  CHECK(read_file(path, InputKind::manifest, diags)
        == std::optional<std::string>("second"));
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777U) == 0640U);
  CHECK(files_in(dir) == std::vector<std::string>{"out.json"});
  CHECK(diags.items().empty());

  // A missing folder: the path and the reason, nothing left behind.
  const std::string bad = dir + "/missing/out.json";
  CHECK_FALSE(write_file_atomic(bad, "x", diags));
  REQUIRE(diags.error_count() == 1);
  CHECK(diags.items()[0].code == "io.write");
  CHECK(render(diags.items()[0])
        == bad + ": error: cannot write file: No such file or directory [io.write]");

  // A folder in the way.
  Diagnostics dir_diags;
  REQUIRE(std::filesystem::create_directory(dir + "/sub"));
  CHECK_FALSE(write_file_atomic(dir + "/sub", "x", dir_diags));
  REQUIRE(dir_diags.error_count() == 1);
  CHECK(render(dir_diags.items()[0])
        == dir + "/sub: error: cannot write file: Is a directory [io.write]");
  CHECK(files_in(dir) == std::vector<std::string>{"out.json", "sub"});

  // Through a symlink, the target is replaced and the link kept.
  std::filesystem::create_symlink(path, dir + "/link.json");
  REQUIRE(write_file_atomic(dir + "/link.json", "third", diags));
  CHECK(std::filesystem::is_symlink(dir + "/link.json"));
  CHECK(read_file(path, InputKind::manifest, diags)
        == std::optional<std::string>("third"));
  // A device is written in place.
  CHECK(write_file_atomic("/dev/null", "discarded", diags));
  CHECK(diags.error_count() == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("io: AtomicFile writes in pieces and leaves nothing until commit",
          "[io][files]") {
  const std::string dir = temp_dir();
  const std::string path = dir + "/out.json";
  Diagnostics diags;
  REQUIRE(write_file_atomic(path, "old", diags));
  {
    AtomicFile file;
    REQUIRE(file.open(path, diags));
    file.write("new ");
    file.write("text");
    // Until commit() the old file stands, beside the temporary one.
    CHECK(read_file(path, InputKind::manifest, diags)
          == std::optional<std::string>("old"));
    CHECK(files_in(dir).size() == 2);
    REQUIRE(file.commit(diags));
  }
  CHECK(read_file(path, InputKind::manifest, diags)
        == std::optional<std::string>("new text"));
  {
    AtomicFile abandoned;
    REQUIRE(abandoned.open(path, diags));
    abandoned.write("half");
  }
  CHECK(read_file(path, InputKind::manifest, diags)
        == std::optional<std::string>("new text"));
  CHECK(files_in(dir) == std::vector<std::string>{"out.json"});
  CHECK(diags.items().empty());

  AtomicFile bad;
  CHECK_FALSE(bad.open(dir + "/missing/out.json", diags));
  REQUIRE(diags.error_count() == 1);
  CHECK(render(diags.items()[0])
        == dir + "/missing/out.json: error: cannot write file: No such file or directory "
                 "[io.write]");
  std::filesystem::remove_all(dir);
}

TEST_CASE("io: PaddedText maps a regular file and pads it with zeros",
          "[io][mapped]") {
  const std::string dir = temp_dir();
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  // Sizes around a page's end: the padding is the rest of the file's last
  // page, or runs on into the zeroed page after it.
  for (size_t size : {size_t{1},
                      page - 64,
                      page - 63,
                      page - 1,
                      page,
                      page + 1,
                      3 * page + 100}) {
    DYNAMIC_SECTION("size " << size) {
      std::string bytes(size, 'x');
      for (size_t i = 0; i < size; ++i) {
        bytes[i] = static_cast<char>('a' + i % 26);
      }
      const std::string path = dir + "/in.json";
      Diagnostics diags;
      REQUIRE(write_file_atomic(path, bytes, diags));
      std::optional<io_detail::PaddedText> text =
          io_detail::PaddedText::load(path, k_manifest_limit, diags);
      REQUIRE(text.has_value());
      CHECK(text->mapped());
      CHECK(text->text() == bytes);
      REQUIRE(text->padding() >= 64);
      const char* end = text->text().data() + size;
      CHECK(std::all_of(
          end, end + text->padding(), [](char c) { return c == 0; }));
      // A move keeps the mapping and its views.
      const char* data = text->text().data();
      io_detail::PaddedText moved(std::move(*text));
      CHECK(moved.text().data() == data);
      CHECK(moved.text() == bytes);
      CHECK(diags.items().empty());
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("io: PaddedText reads what it cannot map", "[io][mapped]") {
  Diagnostics diags;
  // /proc files say st_size 0: read to their end.
  std::optional<io_detail::PaddedText> proc =
      io_detail::PaddedText::load("/proc/self/status", k_manifest_limit, diags);
  REQUIRE(proc.has_value());
  CHECK_FALSE(proc->mapped());
  CHECK(proc->text().starts_with("Name:"));
  // An empty file maps to nothing: an empty text.
  const std::string dir = temp_dir();
  REQUIRE(write_file_atomic(dir + "/empty.json", "", diags));
  std::optional<io_detail::PaddedText> empty =
      io_detail::PaddedText::load(dir + "/empty.json", k_manifest_limit, diags);
  REQUIRE(empty.has_value());
  CHECK_FALSE(empty->mapped());
  CHECK(empty->text().empty());
  CHECK(diags.items().empty());
  // A missing file: read_file's error.
  CHECK_FALSE(
      io_detail::PaddedText::load(dir + "/nope.json", k_manifest_limit, diags)
          .has_value());
  REQUIRE(diags.error_count() == 1);
  CHECK(render(diags.items()[0])
        == dir + "/nope.json: error: cannot read file: No such file or directory [io.read]");
  std::filesystem::remove_all(dir);
}

TEST_CASE("io: PaddedText puts the SIGBUS handler back when its mappings end",
          "[io][mapped]") {
  const std::string dir = temp_dir();
  Diagnostics diags;
  REQUIRE(write_file_atomic(dir + "/a.json", "{}", diags));
  REQUIRE(write_file_atomic(dir + "/b.json", "[]", diags));
  struct sigaction before {};
  REQUIRE(::sigaction(SIGBUS, nullptr, &before) == 0);
  {
    std::optional<io_detail::PaddedText> a =
        io_detail::PaddedText::load(dir + "/a.json", k_manifest_limit, diags);
    std::optional<io_detail::PaddedText> b =
        io_detail::PaddedText::load(dir + "/b.json", k_manifest_limit, diags);
    REQUIRE((a && b && a->mapped() && b->mapped()));
    struct sigaction during {};
    REQUIRE(::sigaction(SIGBUS, nullptr, &during) == 0);
    CHECK((during.sa_flags & SA_SIGINFO) != 0);
    CHECK(during.sa_sigaction != before.sa_sigaction);
    a.reset();  // b's mapping still lives: its handler stays
    REQUIRE(::sigaction(SIGBUS, nullptr, &during) == 0);
    CHECK((during.sa_flags & SA_SIGINFO) != 0);
    CHECK(during.sa_sigaction != before.sa_sigaction);
  }
  struct sigaction after {};
  REQUIRE(::sigaction(SIGBUS, nullptr, &after) == 0);
  CHECK(after.sa_sigaction == before.sa_sigaction);
  CHECK((after.sa_flags & SA_SIGINFO) == (before.sa_flags & SA_SIGINFO));
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "io: a mapped file that shrinks while read ends the process with exit code "
    "2",
    "[io][mapped]") {
  // Truncating a mapped file makes its pages past the new end raise SIGBUS
  // on the next touch. In a child process: the handler reports the file and
  // exits 2, where it would otherwise dump core.
  const std::string dir = temp_dir();
  const std::string path = dir + "/big.json";
  Diagnostics diags;
  REQUIRE(write_file_atomic(path, std::string(size_t{1} << 20, ' '), diags));
  int pipe_fds[2] = {-1, -1};
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::dup2(pipe_fds[1], STDERR_FILENO);
    Diagnostics child_diags;
    // Another mapping made first and ended first: the handler still knows
    // this one.
    std::optional<io_detail::PaddedText> other =
        io_detail::PaddedText::load(path, k_manifest_limit, child_diags);
    std::optional<io_detail::PaddedText> text =
        io_detail::PaddedText::load(path, k_manifest_limit, child_diags);
    other.reset();
    if (!text || !text->mapped() || ::truncate(path.c_str(), 0) != 0) {
      ::_exit(10);
    }
    volatile char touched = text->text()[size_t{1} << 19];
    (void)touched;
    ::_exit(0);  // no SIGBUS: the test fails on this code
  }
  ::close(pipe_fds[1]);
  std::string err;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) {
    err.append(buffer, static_cast<size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  INFO(err);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(err
        == path + ": error: the file shrank while it was being read; nothing was written "
                  "[io.changed]\n");
  std::filesystem::remove_all(dir);
}
