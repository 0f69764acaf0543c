#include <shardplan/topology.hpp>

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <numeric>

namespace shardplan {

double MatmulCurve::best() const {
  return rates.empty() ? 0 : *std::max_element(rates.begin(), rates.end());
}

double GroupedCurve::fraction(double tokens_per_expert) const {
  if (tokens.empty() || fractions.size() != tokens.size()) {
    return 1;
  }
  const double t = std::max(tokens_per_expert, 1.0);
  if (t <= tokens.front()) {
    return fractions.front() * t / tokens.front();
  }
  if (t >= tokens.back()) {
    return fractions.back();
  }
  size_t i = 0;
  while (i + 2 < tokens.size() && tokens[i + 1] <= t) {
    ++i;
  }
  const double w = (std::log2(t) - std::log2(tokens[i]))
                   / (std::log2(tokens[i + 1]) - std::log2(tokens[i]));
  return fractions[i] + w * (fractions[i + 1] - fractions[i]);
}

double MatmulCurve::rate(double m, double n, double k) const {
  const size_t d = dims.size();
  if (d == 0 || rates.size() != d * d * d) {
    return 0;
  }
  // Each dimension's two neighbouring points and the weight of the upper,
  // in log2; below the table, the edge and the factor dim / smallest.
  double scale = 1;
  const auto place = [&](double x) {
    if (x <= dims.front()) {
      scale *= std::max(x, 1.0) / dims.front();
      return std::array<double, 3>{0, 0, 0};
    }
    if (x >= dims.back()) {
      const auto last = static_cast<double>(d - 1);
      return std::array<double, 3>{last, last, 0};
    }
    size_t i = 0;
    while (i + 2 < d && dims[i + 1] <= x) {
      ++i;
    }
    const double w = (std::log2(x) - std::log2(dims[i]))
                     / (std::log2(dims[i + 1]) - std::log2(dims[i]));
    return std::array<double, 3>{
        static_cast<double>(i), static_cast<double>(i + 1), w};
  };
  const std::array<std::array<double, 3>, 3> at = {
      place(m), place(n), place(k)};
  double out = 0;
  for (int corner = 0; corner < 8; ++corner) {
    double weight = 1;
    size_t index = 0;
    for (size_t axis = 0; axis < 3; ++axis) {
      const bool upper = ((corner >> axis) & 1) != 0;
      const double w = at[axis][2];
      weight *= upper ? w : 1 - w;
      index =
          index * d + static_cast<size_t>(upper ? at[axis][1] : at[axis][0]);
    }
    if (weight > 0) {
      out += weight * rates[index];
    }
  }
  return out * scale;
}

int64_t DeviceGrid::at(const std::vector<int64_t>& coords) const {
  assert(coords.size() == shape.size());
  int64_t flat = 0;
  for (size_t k = 0; k < shape.size(); ++k) {
    flat = flat * shape[k] + coords[k];
  }
  return ids[static_cast<size_t>(flat)];
}

DeviceGrid assemble_hybrid_grid(
    const std::vector<int64_t>& ici_shape,
    const std::vector<int64_t>& dcn_shape,
    const std::vector<std::vector<int64_t>>& slice_ids) {
  assert(ici_shape.size() == dcn_shape.size());
  const size_t rank = ici_shape.size();
  DeviceGrid grid;
  int64_t total = 1;
  for (size_t k = 0; k < rank; ++k) {
    grid.shape.push_back(ici_shape[k] * dcn_shape[k]);
    total *= grid.shape.back();
  }
  grid.ids.reserve(static_cast<size_t>(total));

  // Walk the global coordinates row-major; split each into its DCN part
  // (which slice) and ICI part (where inside the slice).
  std::vector<int64_t> coords(rank, 0);
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t slice = 0;
    int64_t local = 0;
    for (size_t k = 0; k < rank; ++k) {
      slice = slice * dcn_shape[k] + coords[k] / ici_shape[k];
      local = local * ici_shape[k] + coords[k] % ici_shape[k];
    }
    grid.ids.push_back(
        slice_ids[static_cast<size_t>(slice)][static_cast<size_t>(local)]);
    for (size_t k = rank; k-- > 0;) {
      if (++coords[k] < grid.shape[k]) {
        break;
      }
      coords[k] = 0;
    }
  }
  return grid;
}

DeviceGrid generic_device_grid(const Mesh& mesh) {
  // Without a topology each slice is a contiguous block of ids, laid out in
  // the ICI shape by a plain reshape.
  const int64_t slices = mesh.num_slices();
  const int64_t per_slice = mesh.num_devices() / slices;
  std::vector<std::vector<int64_t>> slice_ids(static_cast<size_t>(slices));
  for (int64_t s = 0; s < slices; ++s) {
    std::vector<int64_t>& ids = slice_ids[static_cast<size_t>(s)];
    ids.resize(static_cast<size_t>(per_slice));
    std::iota(ids.begin(), ids.end(), s * per_slice);
  }
  return assemble_hybrid_grid(mesh.ici_shape(), mesh.dcn_shape(), slice_ids);
}

}  // namespace shardplan
