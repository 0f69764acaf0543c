// The meshes a search tries on a slice (src/search/internal.hpp): every
// factorisation of its devices over the axes, and of its slices over the
// DCN axes, each axis's size dividing what the model allows.

#include "search/internal.hpp"

#include <shardplan/mesh.hpp>
#include <shardplan/models.hpp>
#include <shardplan/topology.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace shardplan::search_detail {

namespace {

// Every way to write `n` as a product of `count` factors, in order (the
// first factor varies slowest), each factor passing `allowed(i, factor)`.
std::vector<std::vector<int64_t>> factorisations(
    int64_t n,
    size_t count,
    const std::function<bool(size_t, int64_t)>& allowed) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> sizes(count, 1);
  std::function<void(size_t, int64_t)> assign = [&](size_t i,
                                                    int64_t remaining) {
    if (i == count) {
      if (remaining == 1) {
        out.push_back(sizes);
      }
      return;
    }
    if (i + 1 == count) {
      if (allowed(i, remaining)) {
        sizes[i] = remaining;
        out.push_back(sizes);
      }
      return;
    }
    for (int64_t d = 1; d <= remaining; ++d) {
      if (remaining % d == 0 && allowed(i, d)) {
        sizes[i] = d;
        assign(i + 1, remaining / d);
      }
    }
  };
  assign(0, n);
  return out;
}

}  // namespace

std::vector<MeshChoice> enumerate_meshes(
    const ModelConfig& model,
    const Topology& topology,
    const std::vector<std::string>& axes,
    const std::vector<std::string>& dcn_axes) {
  const int64_t slices = topology.num_slices();
  const int64_t per_slice = topology.devices() / slices;
  auto allowed = [&](const std::string& axis, int64_t size) {
    if (size == 1) {
      return true;
    }
    if (has_default_role(AxisRole::tensor, axis)) {
      return model.heads % size == 0;
    }
    if (has_default_role(AxisRole::expert, axis)) {
      return model.experts > 0 && model.experts % size == 0;
    }
    if (has_default_role(AxisRole::stage, axis)) {
      return model.layers % size == 0;
    }
    return true;
  };
  // The mesh's axes: a DCN axis that --axes lacks leads (dp), then --axes.
  std::vector<std::string> names;
  for (const std::string& axis : dcn_axes) {
    if (!has_name(axes, axis)) {
      names.push_back(axis);
    }
  }
  const size_t leading = names.size();
  names.insert(names.end(), axes.begin(), axes.end());
  auto index_of = [&](const std::string& axis) {
    return static_cast<size_t>(std::find(names.begin(), names.end(), axis)
                               - names.begin());
  };
  const std::vector<std::vector<int64_t>> dcn_choices =
      slices == 1
          ? std::vector<std::vector<int64_t>>{std::vector<int64_t>(
              dcn_axes.size(), 1)}
          : factorisations(slices, dcn_axes.size(), [&](size_t i, int64_t d) {
              return allowed(dcn_axes[i], d);
            });
  std::vector<MeshChoice> out;
  if (axes.empty()) {
    return out;
  }
  for (const std::vector<int64_t>& dcn : dcn_choices) {
    std::vector<int64_t> dcn_of(names.size(), 1);
    for (size_t k = 0; k < dcn_axes.size(); ++k) {
      dcn_of[index_of(dcn_axes[k])] = dcn[k];
    }
    const std::vector<std::vector<int64_t>> ici_choices =
        factorisations(per_slice, axes.size(), [&](size_t i, int64_t d) {
          return allowed(axes[i], d * dcn_of[leading + i]);
        });
    for (const std::vector<int64_t>& ici : ici_choices) {
      std::vector<std::string> parts;
      std::vector<std::string> dcn_parts;
      for (size_t k = 0; k < names.size(); ++k) {
        const int64_t size = (k < leading ? 1 : ici[k - leading]) * dcn_of[k];
        if (size > 1 || (parts.empty() && k + 1 == names.size())) {
          parts.push_back(fmt::format("{}:{}", names[k], size));
        }
        if (dcn_of[k] > 1) {
          dcn_parts.push_back(fmt::format("{}:{}", names[k], dcn_of[k]));
        }
      }
      out.push_back({fmt::format("{}", fmt::join(parts, ",")),
                     fmt::format("{}", fmt::join(dcn_parts, ",")),
                     &topology});
    }
  }
  return out;
}

}  // namespace shardplan::search_detail
