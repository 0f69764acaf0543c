// The search's policy (include/shardplan/search.hpp; docs/search.md): what
// the objectives and drop reasons are called, the axes searched by default,
// the workload variations, and the slices --devices names.

#include "search/internal.hpp"

#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/search.hpp>
#include <shardplan/workload.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace shardplan {

namespace {

using search_detail::has_name;

// Reports (true) the first name of `names` that is empty or given twice,
// at `at`, with `example` as the hint's value.
bool bad_names(const std::vector<std::string>& names,
               const Location& at,
               std::string_view example,
               Diagnostics& diags) {
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& axis = names[i];
    const auto end = names.begin() + static_cast<std::ptrdiff_t>(i);
    if (axis.empty() || std::find(names.begin(), end, axis) != end) {
      diags
          .error("cli.usage",
                 axis.empty() ? std::string("an empty axis name")
                              : fmt::format("axis {} given twice", quote(axis)),
                 at)
          .hint = fmt::format("e.g. {} {}", to_string(at), example);
      return true;
    }
  }
  return false;
}

// A device count of --devices: digits only, at least 1.
std::optional<int64_t> device_count(std::string_view part) {
  int64_t n = 0;
  const auto [end, ec] =
      std::from_chars(part.data(), part.data() + part.size(), n);
  if (ec != std::errc() || end != part.data() + part.size() || n < 1) {
    return std::nullopt;
  }
  return n;
}

// `text` split at each comma ("64,,128": "64", "", "128").
std::vector<std::string> comma_parts(std::string_view text) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    parts.emplace_back(text.substr(start, comma - start));
    if (comma == std::string_view::npos) {
      return parts;
    }
    start = comma + 1;
  }
}

// The error for a count or range that names no slice of `family`, the
// chip's slices with `topology`'s slice count.
void no_slice(const Topology& topology,
              const std::vector<Topology>& family,
              std::string_view asked,
              const std::string& source,
              Diagnostics& diags) {
  const int64_t slices = topology.num_slices();
  std::vector<std::string> counts;
  counts.reserve(family.size());
  for (const Topology& t : family) {
    counts.push_back(std::to_string(t.devices()));
  }
  diags
      .error("topology.size",
             fmt::format("the catalogue has no {} slice of {} devices{}",
                         topology.chip,
                         asked,
                         slices > 1 ? fmt::format(" in {} slices", slices)
                                    : std::string()),
             Location::of(source))
      .hint = slices > 1 ? fmt::format("{} {} slices together have {} devices",
                                       slices,
                                       topology.chip,
                                       fmt::join(counts, ", "))
                         : fmt::format("{}'s slices have {} devices",
                                       topology.chip,
                                       fmt::join(counts, ", "));
}

}  // namespace

std::string_view to_string(SearchObjective objective) {
  switch (objective) {
    case SearchObjective::tokens:
      return "tokens";
    case SearchObjective::step:
      return "step";
    case SearchObjective::memory:
      return "memory";
    case SearchObjective::mfu:
      return "mfu";
  }
  return "tokens";
}

std::optional<SearchObjective> parse_search_objective(std::string_view text) {
  for (SearchObjective o : {SearchObjective::tokens,
                            SearchObjective::step,
                            SearchObjective::memory,
                            SearchObjective::mfu}) {
    if (text == to_string(o)) {
      return o;
    }
  }
  return std::nullopt;
}

std::string_view to_string(DropReason reason) {
  switch (reason) {
    case DropReason::layout:
      return "layout";
    case DropReason::indivisible:
      return "indivisible";
    case DropReason::plan:
      return "plan";
    case DropReason::over_hbm:
      return "over_hbm";
  }
  return "layout";
}

bool resolve_search_axes(const ModelConfig& model,
                         SearchOptions& options,
                         Diagnostics& diags) {
  // MaxText's rules split over MaxText's axis names only ("tensor", not
  // "tp": other axes hold replicas), so with them the axes are named so.
  const bool maxtext = options.maxtext_axis_names;
  if (options.axes.empty()) {
    const bool moe = model.experts > 0;
    options.axes = maxtext ? std::vector<std::string>{"fsdp", "tensor"}
                   : moe   ? std::vector<std::string>{"fsdp", "ep", "tp"}
                           : std::vector<std::string>{"fsdp", "tp"};
    if (maxtext && moe) {
      options.axes.emplace_back("expert");
    }
  }
  std::vector<std::string>& dcn_axes = options.dcn_axes.value;
  if (dcn_axes.empty()) {
    dcn_axes = {maxtext ? "data" : "dp"};
    for (const std::string& axis : options.axes) {
      const bool data = has_default_role(AxisRole::data, axis);
      if (axis != dcn_axes.front()
          && (data || has_default_role(AxisRole::stage, axis))) {
        dcn_axes.push_back(axis);
      }
    }
  }
  return !bad_names(options.axes,
                    Location::of(options.sources.mesh),
                    "fsdp,ep,tp",
                    diags)
         && !bad_names(dcn_axes, options.dcn_axes.at, "dp,fsdp", diags);
}

SearchVariations search_variations(const SearchOptions& options) {
  SearchVariations out{options.remat, options.per_device_batch};
  if (out.remat.empty()) {
    out.remat.push_back(options.workload.remat.value);
  }
  if (out.per_device_batch.empty()) {
    out.per_device_batch.push_back(options.workload.per_device_batch.value);
  }
  return out;
}

namespace search_detail {

bool check_remat_policies(const std::vector<std::string>& remat,
                          const SearchOptions& options,
                          Diagnostics& diags) {
  // Checked before the search: an unknown one would drop every candidate.
  for (const std::string& policy : remat) {
    if (!read_remat_policy(policy, options.workload.remat.at, diags)) {
      return false;
    }
  }
  return true;
}

MemoryOptions slice_memory(const SearchOptions& options,
                           const Topology& slice) {
  MemoryOptions m = options.memory;
  if (!m.hbm_bytes.value) {
    m.hbm_bytes = {
        static_cast<int64_t>(slice.figures.hbm_bytes_per_device.value),
        Location::of(
            fmt::format("{} {}", options.sources.topology, slice.name))};
  }
  return m;
}

Workload variation_workload(const SearchOptions& options,
                            const std::string& remat,
                            const std::string& batch,
                            const Location& mesh_at,
                            const LaidOut& laid_out) {
  Workload w = options.workload;
  w.remat.value = remat;
  w.mesh_at = mesh_at;
  w.residual = residual_layout(
      w.residual, laid_out.rules, laid_out.mesh, laid_out.roles);
  if (!batch.empty()) {
    w.per_device_batch.value = batch;
    w.batch.value.reset();
  }
  return w;
}

}  // namespace search_detail

std::optional<std::vector<Topology>> device_slices(const Topology& topology,
                                                   std::string_view text,
                                                   const MeshSources& sources,
                                                   Diagnostics& diags) {
  const Location where = Location::of(sources.devices);
  if (topology.source != "catalogue") {
    diags
        .error("cli.usage",
               fmt::format("{} takes catalogue slices of a chip; {} {} is a "
                           "file",
                           sources.devices,
                           sources.topology,
                           topology.source),
               where)
        .hint = fmt::format(
        "give {} a catalogue name of the chip (v5p-256, h100x64), or search "
        "the file's topology without {}",
        sources.topology,
        sources.devices);
    return std::nullopt;
  }
  // The chip's slices with the topology's slice count, fewest devices first.
  std::vector<Topology> family = catalogue_slices_like(topology);
  std::vector<bool> chosen(family.size(), false);
  for (const std::string& part : comma_parts(text)) {
    const size_t dash = part.find('-');
    const std::optional<int64_t> low =
        device_count(std::string_view(part).substr(0, dash));
    const std::optional<int64_t> high =
        dash == std::string::npos
            ? low
            : device_count(std::string_view(part).substr(dash + 1));
    if (!low || !high || *low > *high) {
      diags
          .error("cli.usage",
                 fmt::format("{} is not a device count or a range A-B of "
                             "counts (A <= B)",
                             quote(part)),
                 where)
          .hint = fmt::format(
          "e.g. {} 64,128 or {} 64-512", sources.devices, sources.devices);
      return std::nullopt;
    }
    bool any = false;
    for (size_t i = 0; i < family.size(); ++i) {
      const int64_t n = family[i].devices();
      if (n >= *low && n <= *high) {
        chosen[i] = true;
        any = true;
      }
    }
    if (!any) {
      no_slice(topology,
               family,
               dash == std::string::npos ? std::to_string(*low)
                                         : fmt::format("{} to {}", *low, *high),
               sources.devices,
               diags);
      return std::nullopt;
    }
  }
  std::vector<Topology> out;
  for (size_t i = 0; i < family.size(); ++i) {
    if (chosen[i]) {
      out.push_back(std::move(family[i]));
    }
  }
  return out;
}

}  // namespace shardplan
