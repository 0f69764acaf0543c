#include "report/renderers.hpp"
#include "report/text.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

// `shardplan memory` as text (its JSON is check's: report/check.cpp).

namespace shardplan::report_detail {

std::string memory_text(const CheckReport& r) {
  const MemoryEstimate& m = r.memory;
  std::string out =
      fmt::format("memory per device: {} tensors of {}, {}\n",
                  with_commas(static_cast<int64_t>(r.manifest.size())),
                  r.manifest.source,
                  mesh_line(r.mesh, r.topology));
  out += fmt::format("{}\n", recipe_text(m));
  if (r.activations != nullptr) {
    out += fmt::format("workload: {}\n", workload_text(*r.activations, r.mesh));
  }
  out += "\n";
  // Bars against HBM when known, else against the total.
  const int64_t scale =
      m.hbm_bytes ? *m.hbm_bytes : std::max<int64_t>(m.max_device_total, 1);
  constexpr int k_bar = 40;
  auto bar = [&](int64_t bytes) {
    const double f = std::clamp(
        static_cast<double>(bytes) / static_cast<double>(scale), 0.0, 1.0);
    const int filled = static_cast<int>(std::lround(f * k_bar));
    return fmt::format("[{}{}] {:5.1f}%",
                       std::string(static_cast<size_t>(filled), '#'),
                       std::string(static_cast<size_t>(k_bar - filled), '.'),
                       f * 100);
  };
  std::vector<std::vector<std::string>> rows = {
      {"category",
       "bytes",
       "",
       m.hbm_bytes ? "share of HBM" : "share of total"}};
  for (const Category& c : categories(m)) {
    rows.push_back(
        {c.name, with_commas(c.bytes), human_bytes(c.bytes), bar(c.bytes)});
  }
  rows.push_back({"total",
                  with_commas(m.max_device_total),
                  human_bytes(m.max_device_total),
                  bar(m.max_device_total)});
  if (m.capacity_bytes) {
    rows.push_back({"usable",
                    with_commas(*m.capacity_bytes),
                    human_bytes(*m.capacity_bytes),
                    bar(*m.capacity_bytes)});
  }
  out += table(rows);
  out += fmt::format("{}\n", capacity_line(m, r.activations));
  if (m.min_device_total != m.max_device_total) {
    out += fmt::format(
        "the least loaded device holds {} ({} tensors have uneven shards)\n",
        human_bytes(m.min_device_total),
        m.uneven_tensors);
  }
  if (const std::string step = optimizer_step_line(m); !step.empty()) {
    out += step + "\n";
  }
  if (r.activations != nullptr && m.activations_counted) {
    out += peak_line(m, *r.activations) + "\n";
  }
  if (const std::string prefetch = prefetch_line(m); !prefetch.empty()) {
    out += prefetch + "\n";
  }
  if (m.gather_buffer > 0) {
    out +=
        fmt::format("gather buffer: {} gathered over {} at use{}\n",
                    gather_units_text(m),
                    fmt::join(m.gather_axes, ","),
                    m.gather_cast ? fmt::format(", in {} (the compute dtype)",
                                                to_string(*m.gather_cast))
                                  : std::string());
  }
  if (m.placement.placed()) {
    out += fmt::format("{}\n", placement_line(m));
    for (const std::string& line : stage_lines(m)) {
      out += fmt::format("  {}\n", line);
    }
  }
  if (m.host_offload > 0) {
    out += fmt::format("host memory per device: {} offloaded by remat {}\n",
                       human_bytes(m.host_offload),
                       to_string(r.activations->remat));
  }
  if (m.hosted_params + m.hosted_optimizer > 0) {
    out += fmt::format(
        "host memory per device: {} of model state ({}{}{}), in HBM for the "
        "optimizer step only\n",
        human_bytes(m.hosted_params + m.hosted_optimizer),
        m.hosted_optimizer > 0 ? "optimizer state" : "",
        m.hosted_optimizer > 0 && m.hosted_params > 0 ? " and " : "",
        m.hosted_params > 0 ? "params" : "");
  }
  if (const std::string host = host_line(m); !host.empty()) {
    out += host + "\n";
  }
  if (r.activations != nullptr) {
    out += '\n';
    out += activations_table(*r.activations, m);
  }
  if (r.step != nullptr) {
    out += '\n';
    out += step_table(*r.step);
  } else if (r.activations != nullptr) {
    out +=
        "\nstep: not estimated; give --topology (the devices' peak and "
        "links)\n";
  }

  out += "\nparams per device by dtype:\n";
  out += table(dtype_rows(m));
  out += fmt::format("\nlargest tensors per device ({}):\n", m.largest.size());
  out += table(largest_rows(m, r.manifest, r.shardings));
  return out;
}

}  // namespace shardplan::report_detail
