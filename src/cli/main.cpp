#include "cli/cli.hpp"

#include <cstdlib>
#include <exception>
#include <iostream>
#include <unistd.h>

int main(int argc, char** argv) {
  try {
    shardplan::cli::Environment env;
    env.stderr_is_tty = isatty(STDERR_FILENO) != 0;
    env.no_color = std::getenv("NO_COLOR") != nullptr;
    return shardplan::cli::run(std::vector<std::string>(argv, argv + argc), std::cout,
                               std::cerr, env);
  } catch (const std::exception& e) {
    std::cerr << "shardplan: internal error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "shardplan: internal error: unknown exception\n";
  }
  return 3;
}
