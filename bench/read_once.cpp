// read_once: the whole-process counterpart of parse_once for the manifest
// reader: reads FILE as the CLI does (read_manifest_path: the file read into
// a padded buffer, then the On-Demand pass that builds the Manifest), then
// exits. bench/run.sh times it against parse_once.
//
//   read_once FILE

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fputs("usage: read_once FILE\n", stderr);
    return 2;
  }
  shardplan::Diagnostics diags;
  auto manifest = shardplan::read_manifest_path(argv[1], diags);
  if (!manifest || diags.has_errors()) {
    for (const auto& d : diags.items()) {
      std::fprintf(stderr, "%s\n", shardplan::render(d).c_str());
    }
    return 1;
  }
  return manifest->empty() ? 1 : 0;
}
