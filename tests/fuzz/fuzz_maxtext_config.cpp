// Any bytes as a MaxText config (--maxtext-config FILE): a config or a
// located error, never a crash or a hang; the first line of the input, when
// it starts with "#!", is taken as KEY=VALUE overrides split on spaces, so
// the override parser is fuzzed too. A config read is then made into meshes
// on 64 devices in one slice and on 128 devices in 2 slices.
#include "fuzz_check.hpp"

#include <shardplan/io.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  if (text.starts_with("#!")) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(
        2, end == std::string_view::npos ? std::string_view::npos : end - 2);
    while (!line.empty()) {
      const size_t space = line.find(' ');
      std::string_view word = line.substr(0, space);
      if (!word.empty()) {
        overrides.emplace_back(word);
      }
      line.remove_prefix(space == std::string_view::npos ? line.size()
                                                         : space + 1);
    }
  }
  shardplan::Diagnostics diags;
  auto config =
      shardplan::read_maxtext_config_text(text, "cfg.yml", overrides, diags);
  fuzz::check_outcome(
      config.has_value(), diags, {"cfg.yml", "--maxtext-config"});
  if (!config) {
    return 0;
  }
  for (auto [devices, slices] : {std::pair<int64_t, int64_t>{64, 1},
                                 std::pair<int64_t, int64_t>{128, 2}}) {
    shardplan::Diagnostics mesh_diags;
    auto mesh = shardplan::maxtext_mesh(
        *config, devices, std::optional<int64_t>(slices), mesh_diags);
    fuzz::check_outcome(
        mesh.has_value(), mesh_diags, {"cfg.yml", "--maxtext-config"});
  }
  return 0;
}
