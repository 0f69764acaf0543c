#include "cli/cli.hpp"

#include <cstdlib>
#include <exception>
#include <iostream>

#include <unistd.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace {

// A run builds a few large arrays one after another (the manifest's text,
// the parser's index of it, then the per-tensor arrays of each phase), most
// freed before the next phase. By default glibc gives each block of more
// than 128 KiB its own mapping, unmaps it when it is freed and trims the
// heap's free top, so each phase faults in fresh zeroed pages, and page
// faults were a quarter of `plan`'s time on 100k tensors. Kept in the heap,
// freed memory is reused by the next phase; the peak is unchanged.
void tune_allocator() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the largest glibc allows
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  tune_allocator();
  try {
    shardplan::cli::Environment env;
    env.stderr_is_tty = isatty(STDERR_FILENO) != 0;
    env.no_color = std::getenv("NO_COLOR") != nullptr;
    return shardplan::cli::run(
        std::vector<std::string>(argv, argv + argc), std::cout, std::cerr, env);
  } catch (const std::exception& e) {
    std::cerr << "shardplan: internal error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "shardplan: internal error: unknown exception\n";
  }
  return 3;
}
