// TPU and GPU device grids, matching jax.experimental.mesh_utils
// (jax/_src/mesh_utils.py: create_device_mesh, create_hybrid_device_mesh and
// their helpers). Where JAX has a choice to make (handler conditions, subset
// order, tie-breaks) this file makes the same one; see
// shared/reference/sharding-anchors.md b1-b6.

#include <shardplan/topology.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

namespace shardplan {

namespace {

using Ids = std::vector<int64_t>;
using Matrix = std::vector<std::vector<int64_t>>;

int64_t to_i64(size_t v) {
  return static_cast<int64_t>(v);
}

int64_t product(const std::vector<int64_t>& values) {
  int64_t p = 1;
  for (int64_t v : values) {
    p *= v;
  }
  return p;
}

// Python's repr of a list of ints: "[4, 0, 0]".
std::string py_list(const std::vector<int64_t>& values) {
  return fmt::format("[{}]", fmt::join(values, ", "));
}

// Row-major flat source indices of `shape` transposed by `perm`: element k of
// the result is the source index of the k-th element of the transposed array.
Ids transpose_order(const std::vector<int64_t>& shape,
                    const std::vector<size_t>& perm) {
  const size_t rank = shape.size();
  assert(perm.size() == rank);
  std::vector<int64_t> strides(rank, 1);
  for (size_t k = rank; k-- > 1;) {
    strides[k - 1] = strides[k] * shape[k];
  }
  std::vector<int64_t> out_shape(rank);
  for (size_t i = 0; i < rank; ++i) {
    out_shape[i] = shape[perm[i]];
  }
  const int64_t total = product(shape);
  Ids order;
  order.reserve(to_size(total));
  std::vector<int64_t> coords(rank, 0);
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t source = 0;
    for (size_t i = 0; i < rank; ++i) {
      source += coords[i] * strides[perm[i]];
    }
    order.push_back(source);
    for (size_t i = rank; i-- > 0;) {
      if (++coords[i] < out_shape[i]) {
        break;
      }
      coords[i] = 0;
    }
  }
  return order;
}

// All k-subsets of {0..n-1} in itertools.combinations order.
std::vector<std::vector<size_t>> combinations(size_t n, size_t k) {
  std::vector<std::vector<size_t>> out;
  if (k > n) {
    return out;
  }
  std::vector<size_t> c(k);
  std::iota(c.begin(), c.end(), size_t{0});
  while (true) {
    out.push_back(c);
    size_t i = k;
    while (i > 0 && c[i - 1] == i - 1 + n - k) {
      --i;
    }
    if (i == 0) {
      return out;
    }
    ++c[i - 1];
    for (size_t j = i; j < k; ++j) {
      c[j] = c[j - 1] + 1;
    }
  }
}

std::string no_assignment_message(size_t logical_axis,
                                  int64_t size,
                                  const std::vector<int64_t>& remaining) {
  // JAX's NotImplementedError text, first letter lowered and the final period
  // dropped (STYLE 2.2); the double space before the flag name is JAX's.
  return fmt::format(
      "failed to find assignment for logical_axis_index {} of size {} with "
      "remaining "
      "assignable mesh {}. The size of each axis in your logical mesh must be "
      "equal to "
      "the product of some subset of the physical mesh axis sizes. E.g. "
      "logical mesh "
      "(4, 16) is compatible with physical mesh 4x4x4 since 4=4 and 16=4x4. If "
      "you want "
      "to split physical axes, set  allow_split_physical_axes to True",
      logical_axis,
      size,
      py_list(remaining));
}

// Physical axis order of the TPU7x candidates: core (3), then x, y, z.
int64_t core_first_rank(size_t axis) {
  static constexpr std::array<int64_t, 4> k_rank{1, 2, 3, 0};
  return k_rank[axis];
}

// One ring handler's reorder: positions into `devices`, or nullopt when JAX's
// handler returns None (fall through to the torus assignment).
using Reorder = std::optional<std::vector<size_t>>;

constexpr std::array<size_t, 8> k_tray_ring{0, 1, 2, 3, 6, 7, 4, 5};
constexpr std::array<size_t, 4> k_tray_2x2_ring{0, 1, 3, 2};
constexpr std::array<size_t, 16> k_tray_4x4_ring{
    0, 1, 2, 3, 7, 6, 5, 9, 10, 11, 15, 14, 13, 12, 8, 4};
constexpr std::array<size_t, 8> k_v5e_tray_ring{0, 1, 2, 3, 7, 6, 5, 4};
constexpr std::array<size_t, 8> k_v5e_tray_iota{0, 4, 2, 6, 1, 5, 3, 7};
constexpr std::array<size_t, 8> k_v5p_2x2x2{0, 1, 3, 2, 6, 7, 5, 4};
constexpr std::array<size_t, 8> k_7x_2x2x2_ring{0, 1, 2, 3, 6, 7, 4, 5};

template <size_t N>
std::vector<size_t> pick(const std::vector<size_t>& base,
                         const std::array<size_t, N>& order) {
  std::vector<size_t> out;
  out.reserve(N);
  for (size_t i : order) {
    out.push_back(base[i]);
  }
  return out;
}

std::vector<size_t> identity(size_t n) {
  std::vector<size_t> out(n);
  std::iota(out.begin(), out.end(), size_t{0});
  return out;
}

// _tpu_v2_v3_create_device_mesh: never falls through.
std::vector<size_t> v2_v3_reorder(const std::vector<int64_t>& mesh_shape,
                                  size_t n) {
  std::vector<size_t> base = identity(n);
  if (n == 8) {
    return pick(base, k_tray_ring);
  }
  if (!mesh_shape.empty() && mesh_shape.back() == 8) {
    // Reshape first, then permute the last axis of every row of 8.
    std::vector<size_t> out(n);
    for (size_t row = 0; row < n / 8; ++row) {
      for (size_t j = 0; j < 8; ++j) {
        out[row * 8 + j] = row * 8 + k_tray_ring[j];
      }
    }
    return out;
  }
  return base;
}

// Positions of `devices` sorted by (z, y, x), stable: x runs fastest.
std::vector<size_t> sequential(const std::vector<TpuDevice>& devices) {
  std::vector<size_t> order = identity(devices.size());
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& ca = devices[a].coords;
    const auto& cb = devices[b].coords;
    return std::tie(ca[2], ca[1], ca[0]) < std::tie(cb[2], cb[1], cb[0]);
  });
  return order;
}

// 1 + the lexicographically largest coordinate triple, as JAX's
// max(d.coords) unpacked into bounds.
std::array<int64_t, 3> bounds_of(const std::vector<TpuDevice>& devices) {
  std::array<int64_t, 3> most{0, 0, 0};
  bool first = true;
  for (const TpuDevice& d : devices) {
    if (first || d.coords > most) {
      most = d.coords;
      first = false;
    }
  }
  return {most[0] + 1, most[1] + 1, most[2] + 1};
}

// _v5e_create_device_mesh (TPU v5 lite, v5e, v6 lite).
Reorder v5e_reorder(const std::vector<int64_t>& mesh_shape,
                    const std::vector<TpuDevice>& devices) {
  const auto [bx, by, bz] = bounds_of(devices);
  const size_t n = devices.size();
  if (bx == 2 && by == 2 && bz == 1 && n == 4) {
    return pick(sequential(devices), k_tray_2x2_ring);
  }
  if (n == 8) {
    if (bx == 2 && by == 2 && bz == 2) {
      return pick(sequential(devices), k_v5e_tray_iota);
    }
    return pick(sequential(devices), k_v5e_tray_ring);
  }
  if (bx == 4 && by == 4 && bz == 1 && n == 16) {
    const int64_t largest =
        mesh_shape.empty()
            ? 0
            : *std::max_element(mesh_shape.begin(), mesh_shape.end());
    if (largest == 16) {
      return pick(sequential(devices), k_tray_4x4_ring);
    }
  }
  return std::nullopt;
}

// _v5p_create_device_mesh.
Reorder v5p_reorder(const std::vector<TpuDevice>& devices) {
  const auto [bx, by, bz] = bounds_of(devices);
  if (bx == 2 && by == 2 && bz == 2 && devices.size() == 8) {
    return pick(sequential(devices), k_v5p_2x2x2);
  }
  return std::nullopt;
}

}  // namespace

std::vector<TpuDevice> tpu_devices(const TpuSlice& slice) {
  const auto& c = slice.chips;
  std::array<int64_t, 3> host{};   // chips per host, clipped to the slice
  std::array<int64_t, 3> hosts{};  // hosts per axis
  for (size_t k = 0; k < 3; ++k) {
    assert(c[k] >= 1 && slice.host_bounds[k] >= 1);
    host[k] = std::min(slice.host_bounds[k], c[k]);
    assert(c[k] % host[k] == 0);
    hosts[k] = c[k] / host[k];
  }
  const int64_t cores = slice.cores_per_chip;
  std::vector<TpuDevice> out;
  out.reserve(to_size(slice.num_slices * c[0] * c[1] * c[2] * cores));
  for (int64_t s = 0; s < slice.num_slices; ++s) {
    for (int64_t hz = 0; hz < hosts[2]; ++hz) {
      for (int64_t hy = 0; hy < hosts[1]; ++hy) {
        for (int64_t hx = 0; hx < hosts[0]; ++hx) {
          const int64_t process =
              hx + hosts[0] * (hy + hosts[1] * (hz + hosts[2] * s));
          for (int64_t dz = 0; dz < host[2]; ++dz) {
            for (int64_t dy = 0; dy < host[1]; ++dy) {
              for (int64_t dx = 0; dx < host[0]; ++dx) {
                const int64_t x = hx * host[0] + dx;
                const int64_t y = hy * host[1] + dy;
                const int64_t z = hz * host[2] + dz;
                for (int64_t core = 0; core < cores; ++core) {
                  TpuDevice d;
                  d.id =
                      core + cores * (x + c[0] * (y + c[1] * (z + c[2] * s)));
                  d.coords = {x, y, z};
                  d.core_on_chip = core;
                  d.slice_index = s;
                  d.process_index = process;
                  out.push_back(d);
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

std::vector<int64_t> prime_factors(int64_t x) {
  assert(x >= 1);
  std::vector<int64_t> factors;
  for (int64_t p = 2; p * p <= x; ++p) {
    while (x % p == 0) {
      factors.push_back(p);
      x /= p;
    }
  }
  if (x > 1) {
    factors.push_back(x);
  }
  return factors;
}

std::optional<TorusLayout> split_torus_axes(
    const std::vector<int64_t>& physical_shape,
    const std::vector<int64_t>& mesh_shape,
    Diagnostics& diags) {
  if (product(physical_shape) != product(mesh_shape)) {
    diags.error(
        "topology.device-count",
        fmt::format(
            "the number of devices in physical mesh {} does not match the "
            "number of devices in logical mesh {}",
            python_tuple(physical_shape),
            python_tuple(mesh_shape)));
    return std::nullopt;
  }
  const size_t np = physical_shape.size();
  const size_t nl = mesh_shape.size();
  Matrix a(np, std::vector<int64_t>(nl, 1));

  for (size_t l = nl; l-- > 0;) {
    // Capacity left on each physical axis and what is already used.
    std::vector<int64_t> used(np, 1);
    std::vector<int64_t> avail(np);
    for (size_t p = 0; p < np; ++p) {
      for (size_t j = 0; j < nl; ++j) {
        used[p] *= a[p][j];
      }
      avail[p] = physical_shape[p] / used[p];
    }
    // Prime -> multiplicity in the axis size; prime -> physical axes, once
    // per occurrence of the prime in the axis's capacity.
    std::map<int64_t, size_t> multiplicity;
    for (int64_t f : prime_factors(mesh_shape[l])) {
      ++multiplicity[f];
    }
    std::vector<std::pair<int64_t, std::vector<std::vector<size_t>>>> choices;
    for (const auto& [prime, m] : multiplicity) {
      std::vector<size_t> slots;
      for (size_t p = 0; p < np; ++p) {
        for (int64_t f : prime_factors(avail[p])) {
          if (f == prime) {
            slots.push_back(p);
          }
        }
      }
      std::vector<std::vector<size_t>> picks;
      for (const auto& c : combinations(slots.size(), m)) {
        std::vector<size_t> axes;
        axes.reserve(c.size());
        for (size_t i : c) {
          axes.push_back(slots[i]);
        }
        picks.push_back(std::move(axes));
      }
      std::sort(picks.begin(), picks.end());
      picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
      choices.emplace_back(prime, std::move(picks));
    }

    // JAX's preference as a key; larger wins. The last component makes the
    // order total, so the enumeration order does not matter.
    auto key = [&](const std::vector<int64_t>& z) {
      int64_t whole = 1;
      int64_t whole_count = 0;
      int64_t on_used = 1;
      for (size_t p = 0; p < np; ++p) {
        if (z[p] == physical_shape[p]) {
          whole *= z[p];
          whole_count += z[p] > 1 ? 1 : 0;
        }
        if (used[p] > 1) {
          on_used *= z[p];
        }
      }
      return std::make_tuple(whole, whole_count, on_used, z);
    };

    std::optional<std::vector<int64_t>> best;
    bool empty = false;
    for (const auto& choice : choices) {
      empty = empty || choice.second.empty();
    }
    if (!empty) {
      // Cartesian product over primes (odometer).
      std::vector<size_t> at(choices.size(), 0);
      while (true) {
        std::vector<int64_t> z(np, 1);
        for (size_t i = 0; i < choices.size(); ++i) {
          for (size_t p : choices[i].second[at[i]]) {
            z[p] *= choices[i].first;
          }
        }
        if (!best || key(z) > key(*best)) {
          best = std::move(z);
        }
        bool done = true;
        for (size_t i = choices.size(); i-- > 0;) {
          if (++at[i] < choices[i].second.size()) {
            done = false;
            break;
          }
          at[i] = 0;
        }
        if (done) {
          break;
        }
      }
    }
    if (!best) {
      diags.error(
          "topology.no-assignment",
          fmt::format(
              "cannot split physical mesh {} to fit logical axis {} of size {}",
              python_tuple(physical_shape),
              l,
              mesh_shape[l]));
      return std::nullopt;
    }
    for (size_t p = 0; p < np; ++p) {
      a[p][l] = (*best)[p];
    }
  }

  // Each physical axis p splits into sub-axes A[p][0..L-1] (logical 0 most
  // major); the sub-axes are then grouped by logical axis, physical axes in
  // ascending order within each.
  std::vector<int64_t> split_shape;
  for (size_t p = 0; p < np; ++p) {
    for (size_t l = 0; l < nl; ++l) {
      split_shape.push_back(a[p][l]);
    }
  }
  std::vector<size_t> perm;
  for (size_t l = 0; l < nl; ++l) {
    for (size_t p = 0; p < np; ++p) {
      perm.push_back(p * nl + l);
    }
  }
  return TorusLayout{std::move(a), transpose_order(split_shape, perm)};
}

std::optional<TorusLayout> assign_torus_axes(
    const std::vector<int64_t>& physical_shape,
    const std::vector<int64_t>& mesh_shape,
    bool allow_split_physical_axes,
    Diagnostics& diags,
    bool core_axis_first) {
  const size_t np = physical_shape.size();
  const size_t nl = mesh_shape.size();
  assert(!core_axis_first || np == 4);
  std::vector<int64_t> remaining = physical_shape;
  std::vector<std::vector<size_t>> subsets(nl);

  for (size_t l = nl; l-- > 0;) {
    const int64_t size = mesh_shape[l];
    bool found = false;
    for (size_t k = np; k >= 1 && !found; --k) {
      auto candidates = combinations(np, k);
      if (core_axis_first) {
        auto rank = [](const std::vector<size_t>& c) {
          int64_t best = 4;
          int64_t sum = 0;
          for (size_t i : c) {
            best = std::min(best, core_first_rank(i));
            sum += core_first_rank(i);
          }
          return std::make_pair(best, sum);
        };
        std::stable_sort(
            candidates.begin(),
            candidates.end(),
            [&](const auto& x, const auto& y) { return rank(x) < rank(y); });
      }
      for (const auto& c : candidates) {
        int64_t prod = 1;
        for (size_t i : c) {
          prod *= remaining[i];
        }
        if (prod == size) {
          subsets[l] = c;
          for (size_t i : c) {
            remaining[i] = 0;
          }
          found = true;
          break;
        }
      }
    }
    if (!found && size > 1) {
      if (!allow_split_physical_axes) {
        Diagnostic& d = diags.error("topology.no-assignment",
                                    no_assignment_message(l, size, remaining));
        d.dim = static_cast<int64_t>(l);  // the mesh axis, for the caller
        d.hint = fmt::format(
            "choose axis sizes that are products of the physical axes {}",
            python_tuple(physical_shape));
        return std::nullopt;
      }
      return split_torus_axes(physical_shape, mesh_shape, diags);
    }
  }

  Matrix a(np, std::vector<int64_t>(nl, 1));
  std::vector<size_t> perm;
  std::vector<bool> taken(np, false);
  for (size_t l = 0; l < nl; ++l) {
    for (size_t p : subsets[l]) {
      a[p][l] = physical_shape[p];
      perm.push_back(p);
      taken[p] = true;
    }
  }
  // Physical axes no mesh axis took have size 1 (the products match); numpy
  // would reject the short permutation, here they go last, which changes
  // nothing in the order.
  for (size_t p = 0; p < np; ++p) {
    if (!taken[p]) {
      assert(physical_shape[p] == 1);
      perm.push_back(p);
    }
  }
  return TorusLayout{std::move(a), transpose_order(physical_shape, perm)};
}

namespace {

// JAX's error for a second device on a chip of a generation whose physical
// mesh has no core axis, first letter lowered.
std::string megacore_message(TpuChip chip, const TpuDevice& d) {
  return fmt::format(
      "creating meshes for TPU >v3 requires one device per chip "
      "(\"megacore\" mode). Got device id {} for a device of kind "
      "{}: TpuDevice(id={}, process_index={}, coords=({},{},{}), "
      "core_on_chip={})",
      d.core_on_chip,
      device_kind(chip),
      d.id,
      d.process_index,
      d.coords[0],
      d.coords[1],
      d.coords[2],
      d.core_on_chip);
}

}  // namespace

std::optional<PhysicalTpuMesh> physical_tpu_mesh(
    TpuChip chip, const std::vector<TpuDevice>& devices, Diagnostics& diags) {
  assert(!devices.empty());
  std::array<int64_t, 3> lo = devices[0].coords;
  std::array<int64_t, 3> hi = devices[0].coords;
  int64_t core_lo = devices[0].core_on_chip;
  int64_t core_hi = devices[0].core_on_chip;
  for (const TpuDevice& d : devices) {
    for (size_t k = 0; k < 3; ++k) {
      lo[k] = std::min(lo[k], d.coords[k]);
      hi[k] = std::max(hi[k], d.coords[k]);
    }
    core_lo = std::min(core_lo, d.core_on_chip);
    core_hi = std::max(core_hi, d.core_on_chip);
  }
  const std::array<int64_t, 3> dims{
      hi[0] - lo[0] + 1, hi[1] - lo[1] + 1, hi[2] - lo[2] + 1};
  const int64_t cores = core_hi - core_lo + 1;
  const std::string hole_message =
      "constructed mesh contains a \"hole\"; probable cause: coordinates of "
      "jax_devices "
      "are not a contiguous cuboid";
  if (to_i64(devices.size()) != dims[0] * dims[1] * dims[2] * cores) {
    diags.error("topology.hole", hole_message);
    return std::nullopt;
  }

  PhysicalTpuMesh mesh;
  bool two_d = false;       // (x, y, core)
  bool with_cores = false;  // (x, y, z, core); neither: (x, y, z)
  switch (chip_info(chip).physical_mesh) {
    case TpuPhysicalMesh::xy_core:
      two_d = true;
      break;
    case TpuPhysicalMesh::xyz:
      break;
    case TpuPhysicalMesh::xyz_core:
      with_cores = true;
      break;
    case TpuPhysicalMesh::xyz_core_if_two:
      with_cores = cores == 2;
      break;
  }
  if (two_d) {
    mesh.shape = {dims[0], dims[1], cores};
  } else if (with_cores) {
    mesh.shape = {dims[0], dims[1], dims[2], cores};
  } else {
    mesh.shape = {dims[0], dims[1], dims[2]};
  }
  mesh.ids.assign(to_size(product(mesh.shape)), -1);
  for (const TpuDevice& d : devices) {
    const int64_t x = d.coords[0] - lo[0];
    const int64_t y = d.coords[1] - lo[1];
    const int64_t z = d.coords[2] - lo[2];
    const int64_t core = d.core_on_chip - core_lo;
    int64_t flat = 0;
    if (two_d) {
      if (d.coords[2] != 0) {
        diags.error(
            "topology.hole",
            fmt::format("a TPU {} device has z coordinate {}, expected 0",
                        to_string(chip),
                        d.coords[2]));
        return std::nullopt;
      }
      flat = (x * dims[1] + y) * cores + core;
    } else if (with_cores) {
      flat = ((x * dims[1] + y) * dims[2] + z) * cores + core;
    } else {
      if (d.core_on_chip != 0) {
        diags.error("topology.megacore", megacore_message(chip, d));
        return std::nullopt;
      }
      flat = (x * dims[1] + y) * dims[2] + z;
    }
    mesh.ids[to_size(flat)] = d.id;
  }
  if (std::find(mesh.ids.begin(), mesh.ids.end(), -1) != mesh.ids.end()) {
    diags.error("topology.hole", hole_message);
    return std::nullopt;
  }
  return mesh;
}

namespace {

// _TRANSPOSE_TRICKS: physical shape -> (mesh shape without 1s -> permutation).
const std::vector<std::pair<
    std::vector<int64_t>,
    std::vector<std::pair<std::vector<int64_t>, std::vector<size_t>>>>>&
transpose_tricks() {
  static const std::vector<std::pair<
      std::vector<int64_t>,
      std::vector<std::pair<std::vector<int64_t>, std::vector<size_t>>>>>
      k_tricks{
          {{2, 2, 1}, {{{2, 2}, {0, 1, 2}}}},
          {{2, 2, 4}, {{{4, 4}, {0, 1, 2}}}},
          {{4, 4, 4}, {{{16, 4}, {0, 2, 1}}}},
          {{4, 8, 8}, {{{64, 4}, {0, 2, 1}}, {{4, 64}, {0, 2, 1}}}},
          {{8, 8, 8}, {{{64, 8}, {0, 2, 1}}}},
          {{8, 16, 16}, {{{256, 8}, {0, 2, 1}}, {{8, 256}, {0, 2, 1}}}},
      };
  return k_tricks;
}

std::optional<PhysicalTpuMesh> transpose_trick(
    PhysicalTpuMesh physical,
    const std::vector<int64_t>& mesh_shape,
    Diagnostics& diags) {
  const auto& tricks = transpose_tricks();
  auto topo = std::find_if(tricks.begin(), tricks.end(), [&](const auto& t) {
    return t.first == physical.shape;
  });
  if (topo == tricks.end()) {
    diags.error(
        "topology.contiguous-submeshes",
        fmt::format("create_device_mesh cannot create contiguous submeshes for "
                    "physical mesh topology {}",
                    python_tuple(physical.shape)));
    return std::nullopt;
  }
  std::vector<int64_t> nontrivial;
  std::copy_if(mesh_shape.begin(),
               mesh_shape.end(),
               std::back_inserter(nontrivial),
               [](int64_t v) { return v != 1; });
  auto entry = std::find_if(
      topo->second.begin(), topo->second.end(), [&](const auto& e) {
        return e.first == nontrivial;
      });
  if (entry == topo->second.end()) {
    std::vector<std::string> shapes;
    for (const auto& e : topo->second) {
      shapes.push_back(python_tuple(e.first));
    }
    diags.error(
        "topology.contiguous-submeshes",
        fmt::format("create_device_mesh cannot create contiguous submeshes for "
                    "mesh_shape {} and physical mesh topology {}. Available "
                    "mesh_shapes: [{}]",
                    python_tuple(mesh_shape),
                    python_tuple(physical.shape),
                    fmt::join(shapes, ", ")));
    return std::nullopt;
  }
  const Ids order = transpose_order(physical.shape, entry->second);
  PhysicalTpuMesh out;
  for (size_t i : entry->second) {
    out.shape.push_back(physical.shape[i]);
  }
  for (int64_t src : order) {
    out.ids.push_back(physical.ids[to_size(src)]);
  }
  return out;
}

// The TPU7x handler: the 2x2x2 ring on every block of 8 devices in list
// order, for 8 to 32 devices whose chips span at most 2x2 in x and y. false
// after an error (reported).
bool tpu7x_reorder(TpuChip chip,
                   const std::vector<TpuDevice>& devices,
                   Diagnostics& diags,
                   Reorder& reorder) {
  const size_t n = devices.size();
  if (n % 8 != 0 || n > 32) {
    return true;
  }
  std::optional<PhysicalTpuMesh> physical =
      physical_tpu_mesh(chip, devices, diags);
  if (!physical) {
    return false;
  }
  if (physical->shape[0] <= 2 && physical->shape[1] <= 2) {
    std::vector<size_t> order;
    order.reserve(n);
    for (size_t block = 0; block < n; block += 8) {
      for (size_t i : k_7x_2x2x2_ring) {
        order.push_back(block + i);
      }
    }
    reorder = std::move(order);
  }
  return true;
}

// create_device_mesh's device-kind handler for `chip` (its row's ring):
// `reorder` is left empty when the handler declines. false after an error
// (reported).
bool ring_reorder(TpuChip chip,
                  const std::vector<int64_t>& mesh_shape,
                  const std::vector<TpuDevice>& devices,
                  Diagnostics& diags,
                  Reorder& reorder) {
  switch (chip_info(chip).ring) {
    case TpuRing::none:
      return true;
    case TpuRing::v2_v3:
      reorder = v2_v3_reorder(mesh_shape, devices.size());
      return true;
    case TpuRing::v5e:
      reorder = v5e_reorder(mesh_shape, devices);
      return true;
    case TpuRing::v5p:
      reorder = v5p_reorder(devices);
      return true;
    case TpuRing::tpu7x:
      return tpu7x_reorder(chip, devices, diags, reorder);
  }
  return true;
}

}  // namespace

std::optional<TpuGrid> create_device_mesh(
    TpuChip chip,
    const std::vector<int64_t>& mesh_shape,
    const std::vector<TpuDevice>& devices,
    bool allow_split_physical_axes,
    Diagnostics& diags,
    bool contiguous_submeshes) {
  const std::optional<int64_t> wanted = checked_product(mesh_shape);
  if (!wanted || *wanted != to_i64(devices.size())) {
    diags.error(
        "topology.device-count",
        fmt::format(
            "number of devices {} must equal the product of mesh_shape {}",
            devices.size(),
            python_tuple(mesh_shape)));
    return std::nullopt;
  }

  // Device-kind handlers first; a handler may decline (JAX's None).
  Reorder reorder;
  if (!ring_reorder(chip, mesh_shape, devices, diags, reorder)) {
    return std::nullopt;
  }
  TpuGrid result;
  result.grid.shape = mesh_shape;
  if (reorder) {
    for (size_t i : *reorder) {
      result.grid.ids.push_back(devices[i].id);
    }
    return result;
  }

  std::optional<PhysicalTpuMesh> physical =
      physical_tpu_mesh(chip, devices, diags);
  if (!physical) {
    return std::nullopt;
  }
  if (contiguous_submeshes) {
    physical = transpose_trick(std::move(*physical), mesh_shape, diags);
    if (!physical) {
      return std::nullopt;
    }
  }
  const bool core_axis_first =
      chip_info(chip).core_axis_first && physical->shape.size() == 4;
  std::optional<TorusLayout> layout =
      assign_torus_axes(physical->shape,
                        mesh_shape,
                        allow_split_physical_axes,
                        diags,
                        core_axis_first);
  if (!layout) {
    return std::nullopt;
  }
  for (int64_t src : layout->order) {
    result.grid.ids.push_back(physical->ids[to_size(src)]);
  }
  result.physical_assignment = std::move(layout->assignment);
  return result;
}

std::optional<TpuGrid> create_hybrid_device_mesh(
    TpuChip chip,
    const std::vector<int64_t>& ici_shape,
    const std::vector<int64_t>& dcn_shape,
    const std::vector<TpuDevice>& devices,
    bool allow_split_physical_axes,
    Diagnostics& diags) {
  assert(ici_shape.size() == dcn_shape.size());
  std::map<int64_t, std::vector<TpuDevice>> granules;  // sorted by slice_index
  for (const TpuDevice& d : devices) {
    granules[d.slice_index].push_back(d);
  }
  const std::optional<int64_t> slices = checked_product(dcn_shape);
  if (!slices || *slices != to_i64(granules.size())) {
    diags.error(
        "topology.slice-count",
        fmt::format(
            "number of slices {} must equal the product of dcn_mesh_shape {}",
            granules.size(),
            python_tuple(dcn_shape)));
    return std::nullopt;
  }
  std::vector<TpuGrid> per_slice;
  for (const auto& [index, members] : granules) {
    std::optional<TpuGrid> g = create_device_mesh(
        chip, ici_shape, members, allow_split_physical_axes, diags);
    if (!g) {
      return std::nullopt;
    }
    per_slice.push_back(std::move(*g));
  }

  std::vector<std::vector<int64_t>> slice_ids;
  slice_ids.reserve(per_slice.size());
  for (const TpuGrid& g : per_slice) {
    slice_ids.push_back(g.grid.ids);
  }
  TpuGrid out;
  out.grid = assemble_hybrid_grid(ici_shape, dcn_shape, slice_ids);
  out.physical_assignment = per_slice.front().physical_assignment;
  return out;
}

std::optional<TpuGrid> tpu_device_grid(const TpuSlice& slice,
                                       const Mesh& mesh,
                                       bool allow_split_physical_axes,
                                       Diagnostics& diags) {
  const std::vector<TpuDevice> devices = tpu_devices(slice);
  if (slice.num_slices > 1 || mesh.num_slices() > 1) {
    return create_hybrid_device_mesh(slice.chip,
                                     mesh.ici_shape(),
                                     mesh.dcn_shape(),
                                     devices,
                                     allow_split_physical_axes,
                                     diags);
  }
  return create_device_mesh(
      slice.chip, mesh.shape(), devices, allow_split_physical_axes, diags);
}

DeviceGrid gpu_device_grid(const Mesh& mesh, int64_t gpus_per_node) {
  assert(gpus_per_node >= 1);
  (void)gpus_per_node;  // ids already run node-major; see the header
  return generic_device_grid(mesh);
}

std::optional<std::vector<int64_t>> calculate_host_mesh_shape(
    const std::vector<int64_t>& global_mesh_shape,
    int64_t devices_per_host,
    int64_t num_processes,
    Diagnostics& diags) {
  // eformer.escale.mesh.creation.calculate_host_mesh_shape, statement for
  // statement (its floor divisions included): processes take the leading
  // axes, a whole axis while it is smaller than what is left to split.
  const int64_t total = product(global_mesh_shape);
  if (total != devices_per_host * num_processes) {
    diags.error("topology.host-mesh",
                fmt::format("Mesh size {} doesn't match available devices {} "
                            "(local x processes)",
                            total,
                            devices_per_host * num_processes));
    return std::nullopt;
  }
  std::vector<int64_t> host_mesh = global_mesh_shape;
  int64_t remaining = num_processes;
  for (size_t idx = 0; remaining > 1 && idx < host_mesh.size(); ++idx) {
    const int64_t dim = host_mesh[idx];
    if (dim >= remaining) {
      host_mesh[idx] = dim / remaining;
      remaining = 1;
    } else {
      host_mesh[idx] = 1;
      remaining /= dim;
    }
  }
  const int64_t host_total = product(host_mesh);
  if (host_total != devices_per_host) {
    Diagnostic& d = diags.error(
        "topology.host-mesh",
        fmt::format("Host mesh shape {} uses {} devices instead of {}. Ensure "
                    "that num_processes factors the global mesh shape.",
                    python_tuple(host_mesh),
                    host_total,
                    devices_per_host));
    d.hint = fmt::format(
        "eformer's create_mesh gives each of the {} processes a block of the "
        "leading mesh axes; order the axes so that the first ones multiply to "
        "the process count",
        num_processes);
    return std::nullopt;
  }
  return host_mesh;
}

}  // namespace shardplan
