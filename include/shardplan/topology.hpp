#pragma once

// Layer 3: where mesh axes land on devices.
//
// So far: the device grid for a bare device count (`--devices N`), which is
// what JAX does for devices it knows nothing about (CPU, or a plain list):
// create_device_mesh reshapes the device list, and create_hybrid_device_mesh
// gives each slice a contiguous block of ids, DCN index major within each axis.

#include <shardplan/mesh.hpp>

#include <cstdint>
#include <vector>

namespace shardplan {

// Device ids laid out in the mesh's shape, row-major (last axis fastest).
struct DeviceGrid {
  std::vector<int64_t> shape;
  std::vector<int64_t> ids;

  // Id at a mesh coordinate. REQUIRES: coords.size() == shape.size().
  int64_t at(const std::vector<int64_t>& coords) const;
};

// The grid for devices 0..N-1 without a topology. Slice s (of
// mesh.num_slices()) holds ids [s*P, (s+1)*P) with P devices per slice, laid
// out in the ICI shape; slice s sits at the DCN coordinate unravel(s,
// dcn_shape), and global coordinate c of axis k is dcn_k * ici_size_k + ici_k.
//
// Example: mesh dp:4,tp:2 with dcn dp:2 (two slices of 4):
//   slice 0 = ids 0..3 as [[0,1],[2,3]], slice 1 = ids 4..7;
//   grid = [[0,1],[2,3],[4,5],[6,7]].
DeviceGrid generic_device_grid(const Mesh& mesh);

}  // namespace shardplan
