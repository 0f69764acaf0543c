#include <shardplan/topology.hpp>

#include <cassert>

namespace shardplan {

int64_t DeviceGrid::at(const std::vector<int64_t>& coords) const {
  assert(coords.size() == shape.size());
  int64_t flat = 0;
  for (size_t k = 0; k < shape.size(); ++k) {
    flat = flat * shape[k] + coords[k];
  }
  return ids[static_cast<size_t>(flat)];
}

DeviceGrid generic_device_grid(const Mesh& mesh) {
  DeviceGrid grid;
  grid.shape = mesh.shape();
  std::vector<int64_t> ici = mesh.ici_shape();
  std::vector<int64_t> dcn = mesh.dcn_shape();
  const int64_t total = mesh.num_devices();
  const int64_t per_slice = total / mesh.num_slices();
  const size_t rank = grid.shape.size();
  grid.ids.resize(static_cast<size_t>(total));

  // Walk the global coordinates row-major; split each into its DCN part
  // (which slice) and ICI part (where inside the slice).
  std::vector<int64_t> coords(rank, 0);
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t slice = 0;
    int64_t local = 0;
    for (size_t k = 0; k < rank; ++k) {
      slice = slice * dcn[k] + coords[k] / ici[k];
      local = local * ici[k] + coords[k] % ici[k];
    }
    grid.ids[static_cast<size_t>(flat)] = slice * per_slice + local;
    for (size_t k = rank; k-- > 0;) {
      if (++coords[k] < grid.shape[k]) {
        break;
      }
      coords[k] = 0;
    }
  }
  return grid;
}

}  // namespace shardplan
