#include <shardplan/reshard.hpp>

namespace shardplan {

std::string_view to_string(ReshardOp op) {
  switch (op) {
    case ReshardOp::noop: return "noop";
    case ReshardOp::dynamic_slice: return "dynamic_slice";
    case ReshardOp::all_gather: return "all_gather";
    case ReshardOp::all_to_all: return "all_to_all";
    case ReshardOp::collective_permute: return "collective_permute";
    case ReshardOp::reduce_scatter: return "reduce_scatter";
    case ReshardOp::all_reduce: return "all_reduce";
    case ReshardOp::send_recv: return "send_recv";
  }
  return "?";
}

// STUB: replaced by the planner in the next commit.
std::optional<IntermediateSharding> find_intermediate_sharding(const Mesh&, const DeviceGrid&,
                                                               const PartitionSpec&, const Mesh&,
                                                               const PartitionSpec&) {
  return std::nullopt;
}

std::optional<ReshardPlan> plan_reshard(const Manifest& manifest,
                                        std::span<const PartitionSpec* const> from,
                                        std::span<const PartitionSpec* const> to,
                                        const ReshardSide&, const ReshardSide&,
                                        const ReshardOptions&, Diagnostics&) {
  ReshardPlan plan;
  for (size_t t = 0; t < manifest.size(); ++t) {
    TensorReshard& r = plan.tensors.emplace_back();
    r.tensor = t;
    r.from = *from[t];
    r.to = *to[t];
    r.steps.emplace_back();
  }
  return plan;
}

}  // namespace shardplan
