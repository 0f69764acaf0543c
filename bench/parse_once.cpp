// parse_once: the baseline process for whole-command timings: loads FILE and
// parses it once with simdjson's DOM parser (a fresh parser, as any program
// that reads one file pays), then exits. `plan` end to end is compared with
// this process (bench/run.sh).
//
//   parse_once FILE

#include <simdjson.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fputs("usage: parse_once FILE\n", stderr);
    return 2;
  }
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto error = parser.load(argv[1]).get(root)) {
    std::fprintf(stderr, "parse_once: %s\n", simdjson::error_message(error));
    return 1;
  }
  return root.is_object() ? 0 : 1;
}
