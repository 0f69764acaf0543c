#include <shardplan/sharding.hpp>

#include <cassert>
#include <span>
#include <string>

namespace shardplan {

std::shared_ptr<ShardLayout> make_layout(const Tensor& tensor,
                                         const PartitionSpec& spec,
                                         const Mesh& mesh) {
  assert(spec.size() <= static_cast<size_t>(tensor.rank()));
  const size_t rank = static_cast<size_t>(tensor.rank());
  auto layout = std::make_shared<ShardLayout>();
  layout->spec = spec.padded(rank);
  layout->dims.assign(2 * rank, 0);
  const std::span<int64_t> shards(layout->dims.data(), rank);
  const std::span<int64_t> shard_shape(layout->dims.data() + rank, rank);
  // What the last device holds: per dim, what the other shards leave.
  std::optional<int64_t> min_elements = 1;
  int64_t split = 1;
  for (size_t d = 0; d < rank; ++d) {
    shards[d] = 1;
    for (const std::string& name : layout->spec->dims[d].axes) {
      const MeshAxis* axis = mesh.find(name);
      assert(axis != nullptr);
      shards[d] *= axis->size;  // distinct axes: at most the device count
    }
    split *= shards[d];
    const int64_t size = tensor.shape[d];
    const int64_t largest = ceil_div(size, shards[d]);
    shard_shape[d] = largest;
    // The last shard holds what the others leave, or nothing.
    std::optional<int64_t> before = checked_mul(largest, shards[d] - 1);
    const int64_t last = before && *before < size ? size - *before : 0;
    min_elements =
        min_elements ? checked_mul(*min_elements, last) : std::nullopt;
  }
  std::optional<int64_t> elements = checked_product(shard_shape);
  if (!elements || !min_elements) {
    return nullptr;
  }
  std::optional<int64_t> bytes = bytes_for(*elements, tensor.dtype);
  std::optional<int64_t> min_bytes = bytes_for(*min_elements, tensor.dtype);
  if (!bytes || !min_bytes) {
    return nullptr;
  }
  layout->elements_per_device = *elements;
  layout->min_elements_per_device = *min_elements;
  layout->bytes_per_device = *bytes;
  layout->min_bytes_per_device = *min_bytes;
  layout->replicas = mesh.num_devices() / split;
  layout->valid = true;
  return layout;
}

std::optional<TensorSharding> shard_tensor(const Tensor& tensor,
                                           const PartitionSpec& spec,
                                           const Mesh& mesh) {
  std::shared_ptr<ShardLayout> layout = make_layout(tensor, spec, mesh);
  if (!layout) {
    return std::nullopt;
  }
  return TensorSharding{std::move(layout)};
}

ShardingTotals sharding_totals(const Manifest& manifest,
                               const Mesh& mesh,
                               const std::vector<TensorSharding>& shardings) {
  ShardingTotals totals;
  const int64_t devices = mesh.num_devices();
  for (size_t t = 0; t < shardings.size(); ++t) {
    const TensorSharding& s = shardings[t];
    if (s.replicas() == devices) {
      // At most the manifest's total, which fits in int64.
      totals.replicated_bytes += manifest.tensors()[t].num_bytes;
    }
    totals.invalid += s.valid() ? 0 : 1;
  }
  return totals;
}

}  // namespace shardplan
