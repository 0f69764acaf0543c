// The pathways intermediate sharding (docs/reshard.md, "Intermediate
// sharding"): MaxText's _maybe_find_intermediate_sharding, the variant
// docs/sources.md#intermediate-sharding pins, and why it differs from the
// seed's code.

#include <shardplan/reshard.hpp>

#include <algorithm>
#include <functional>
#include <numeric>

namespace shardplan {

std::optional<IntermediateSharding> find_intermediate_sharding(
    const Mesh& source_mesh,
    const DeviceGrid& source_grid,
    const PartitionSpec& from,
    const Mesh& target_mesh,
    const PartitionSpec& to) {
  if (from.size() != to.size()) {
    return std::nullopt;
  }
  auto shards = [](const Mesh& mesh, const DimSharding& dim) {
    int64_t n = 1;
    for (const std::string& a : dim.axes) {
      n *= mesh.find(a)->size;
    }
    return n;
  };
  std::vector<int64_t> src, dst;
  for (size_t d = 0; d < from.size(); ++d) {
    src.push_back(shards(source_mesh, from.dims[d]));
    dst.push_back(shards(target_mesh, to.dims[d]));
  }
  const int64_t src_largest =
      src.empty() ? 1 : *std::max_element(src.begin(), src.end());
  const int64_t dst_largest =
      dst.empty() ? 1 : *std::max_element(dst.begin(), dst.end());
  const int64_t src_total =
      std::accumulate(src.begin(), src.end(), int64_t{1}, std::multiplies<>());
  const int64_t dst_total =
      std::accumulate(dst.begin(), dst.end(), int64_t{1}, std::multiplies<>());
  if (src_largest % dst_largest != 0 || src_total <= dst_total
      || src_total % dst_total != 0) {
    return std::nullopt;
  }
  const int64_t replicas = src_largest / dst_largest;
  std::optional<size_t> split_dim;
  for (size_t d = 0; d < src.size(); ++d) {
    if (std::gcd(src[d], dst[d]) != 1) {
      // A dim is already compatible: no intermediate needed.
      return std::nullopt;
    }
    // MaxText keeps the last such dim; a dim on several axes is not split
    // (the pathways TODO b/473889684).
    if (src[d] > dst[d] && src[d] == src_largest
        && from.dims[d].axes.size() == 1) {
      split_dim = d;
    }
  }
  if (!split_dim) {
    return std::nullopt;
  }
  const std::string& axis = from.dims[*split_dim].axes[0];
  const size_t source_axis = static_cast<size_t>(source_mesh.index_of(axis));
  IntermediateSharding out;
  out.split_dim = *split_dim;
  out.source_axis = source_axis;
  for (size_t k = 0; k < source_mesh.axes.size(); ++k) {
    const MeshAxis& a = source_mesh.axes[k];
    if (k != source_axis) {
      out.mesh.axes.push_back(a);
      continue;
    }
    MeshAxis split = a;
    split.name = a.name + "_intermediate_split";
    split.size = a.size / replicas;
    MeshAxis replica = a;
    replica.name = a.name + "_intermediate_replica";
    replica.size = replicas;
    // The ICI/DCN split of the parts: the DCN factor stays major.
    split.dcn = std::gcd(a.dcn, split.size);
    split.ici = split.size / split.dcn;
    replica.dcn = a.dcn / split.dcn;
    replica.ici = replica.size / replica.dcn;
    out.mesh.axes.push_back(split);
    out.mesh.axes.push_back(replica);
  }
  out.grid.shape = out.mesh.shape();
  out.grid.ids = source_grid.ids;  // a plain reshape: the split axis major
  out.spec = from;
  out.spec.dims[*split_dim].axes = {axis + "_intermediate_split"};
  out.replicated_axes = {axis + "_intermediate_replica"};
  return out;
}

}  // namespace shardplan
