// plan_reshard (docs/reshard.md): a plan per distinct (shape, dtype, specs),
// on one mesh, on the common mesh of two (the cheaper of its collectives and
// the transfers), or between two (reshard/one_mesh.cpp,
// reshard/two_meshes.cpp), then the totals and peaks of the whole manifest,
// tensors moved one after another ("Cost", "Peak memory and `--donate`");
// to_string(ReshardOp).

#include "reshard/internal.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <map>
#include <tuple>
#include <utility>

namespace shardplan {

std::string_view to_string(ReshardOp op) {
  switch (op) {
    case ReshardOp::noop:
      return "noop";
    case ReshardOp::dynamic_slice:
      return "dynamic_slice";
    case ReshardOp::all_gather:
      return "all_gather";
    case ReshardOp::all_to_all:
      return "all_to_all";
    case ReshardOp::collective_permute:
      return "collective_permute";
    case ReshardOp::reduce_scatter:
      return "reduce_scatter";
    case ReshardOp::all_reduce:
      return "all_reduce";
    case ReshardOp::send_recv:
      return "send_recv";
  }
  return "?";
}

namespace {

using namespace reshard_detail;

bool same_mesh(const ReshardSide& a,
               const ReshardSide& b,
               const ReshardOptions& options) {
  if (!options.same_devices || a.mesh->axes.size() != b.mesh->axes.size()
      || a.grid->ids != b.grid->ids) {
    return false;
  }
  for (size_t k = 0; k < a.mesh->axes.size(); ++k) {
    if (a.mesh->axes[k].name != b.mesh->axes[k].name
        || a.mesh->axes[k].size != b.mesh->axes[k].size) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<ReshardPlan> plan_reshard(
    const Manifest& manifest,
    std::span<const PartitionSpec* const> from,
    std::span<const PartitionSpec* const> to,
    const ReshardSide& source,
    const ReshardSide& target,
    const ReshardOptions& options,
    Diagnostics& diags) {
  assert(from.size() == manifest.size() && to.size() == manifest.size());
  ReshardPlan plan;
  plan.same_mesh = same_mesh(source, target, options);
  // Another mesh on the same devices: collectives on the common mesh when
  // both are re-labellings of one.
  std::vector<AxisList> common_of;  // per source axis, its common axes
  std::vector<AxisList> common_to;  // per target axis
  uint64_t fixed = 0;               // source axes fixed at one index
  if (!plan.same_mesh && options.same_devices) {
    plan.common = find_common_mesh(source, target, options.to_topology);
  }
  if (plan.common) {
    plan.same_mesh = true;
    const Mesh& cm = plan.common->mesh;
    auto indices = [&](const std::vector<std::string>& names) {
      AxisList out;
      for (const std::string& name : names) {
        out.push_back(static_cast<int>(cm.index_of(name)));
      }
      return out;
    };
    for (const std::vector<std::string>& names : plan.common->from_axes) {
      common_of.push_back(indices(names));
    }
    for (const std::vector<std::string>& names : plan.common->to_axes) {
      common_to.push_back(indices(names));
    }
    for (const auto& [name, index] : plan.common->fixed) {
      fixed |= uint64_t{1} << source.mesh->index_of(name);
    }
  }
  uint64_t partial = 0;
  for (const std::string& p : options.partial) {
    const int64_t a = source.mesh->index_of(p);
    assert(a >= 0);
    partial |= uint64_t{1} << a;
  }
  Overflow overflow;
  // Plans by (shape, dtype, from, to); a manifest repeats a few hundred.
  std::map<std::tuple<std::vector<int64_t>,
                      DType,
                      const PartitionSpec*,
                      const PartitionSpec*>,
           size_t>
      memo;
  // Equal specs given as different objects (a specs file has one per
  // tensor) share one memo entry: the first of them stands for all.
  using SpecPair = std::pair<const PartitionSpec*, const PartitionSpec*>;
  auto spec_less = [](const PartitionSpec* a, const PartitionSpec* b) {
    return std::lexicographical_compare(
        a->dims.begin(),
        a->dims.end(),
        b->dims.begin(),
        b->dims.end(),
        [](const DimSharding& x, const DimSharding& y) {
          return x.axes < y.axes;
        });
  };
  auto pair_less = [&](const SpecPair& a, const SpecPair& b) {
    if (spec_less(a.first, b.first) || spec_less(b.first, a.first)) {
      return spec_less(a.first, b.first);
    }
    return spec_less(a.second, b.second);
  };
  std::map<SpecPair, SpecPair, decltype(pair_less)> canonical(pair_less);
  std::vector<int64_t> source_extra;  // per distinct plan
  // Per distinct plan: the target is the source buffer (plan, naive).
  std::vector<std::array<bool, 2>> aliased;
  plan.plan_of.reserve(manifest.size());
  for (size_t t = 0; t < manifest.size(); ++t) {
    const Tensor& tensor = manifest.tensors()[t];
    const SpecPair specs{from[t], to[t]};
    const auto it = canonical.try_emplace(specs, specs).first;
    const auto key = std::tuple{
        std::vector<int64_t>(tensor.shape.begin(), tensor.shape.end()),
        tensor.dtype,
        it->second.first,
        it->second.second};
    auto [m, fresh] = memo.try_emplace(key, plan.plans.size());
    plan.plan_of.push_back(static_cast<uint32_t>(m->second));
    if (!fresh) {
      continue;
    }
    Context src_c{source.mesh,
                  source.grid,
                  source.links,
                  std::get<0>(key),
                  tensor.dtype,
                  &overflow};
    Context dst_c{target.mesh,
                  target.grid,
                  target.links,
                  std::get<0>(key),
                  tensor.dtype,
                  &overflow};
    const PartitionSpec from_spec =
        from[t]->padded(static_cast<size_t>(tensor.rank()));
    const PartitionSpec to_spec =
        to[t]->padded(static_cast<size_t>(tensor.rank()));
    Layout from_layout = layout_of(from_spec, *source.mesh);
    from_layout.partial = partial;
    const Layout to_layout = layout_of(to_spec, *target.mesh);
    uint64_t used = from_layout.partial;
    for (const AxisList& axes : from_layout.dims) {
      for (int a : axes) {
        used |= uint64_t{1} << a;
      }
    }
    TensorPlan one;
    if (tensor.num_elements == 0) {
      one.result.steps.emplace_back();
    } else if (plan.common && (used & fixed) == 0) {
      // Both layouts on the common mesh, then collectives there.
      const Context common_c{&plan.common->mesh,
                             &plan.common->grid,
                             plan.common->links,
                             std::get<0>(key),
                             tensor.dtype,
                             &overflow};
      auto on_common = [](const Layout& layout,
                          const std::vector<AxisList>& parts) {
        Layout out{std::vector<AxisList>(layout.dims.size()), 0};
        for (size_t d = 0; d < layout.dims.size(); ++d) {
          for (int a : layout.dims[d]) {
            const AxisList& p = parts[static_cast<size_t>(a)];
            out.dims[d].insert(out.dims[d].end(), p.begin(), p.end());
          }
        }
        for (size_t a = 0; a < parts.size(); ++a) {
          if ((layout.partial >> a & 1) != 0) {
            for (int p : parts[a]) {
              out.partial |= uint64_t{1} << p;
            }
          }
        }
        return out;
      };
      one = plan_one_mesh(common_c,
                          on_common(from_layout, common_of),
                          on_common(to_layout, common_to),
                          options);
      one.result.on_common_mesh = true;
      // Unless the exact-overlap transfers are cheaper (a reorder of axes
      // that per-axis collectives can only do through a gather).
      TensorPlan direct =
          plan_two_meshes(src_c, from_layout, dst_c, to_layout, options);
      const PlanCost& a = one.result.cost;
      const PlanCost& b = direct.result.cost;
      if (std::tie(b.seconds, b.bytes_per_device)
          < std::tie(a.seconds, a.bytes_per_device)) {
        one = std::move(direct);
      }
    } else if (plan.same_mesh && !plan.common) {
      one = plan_one_mesh(src_c, from_layout, to_layout, options);
    } else {
      one = plan_two_meshes(src_c, from_layout, dst_c, to_layout, options);
    }
    one.result.from = from_spec;
    one.result.to = to_spec;
    one.result.from_bytes_per_device = src_c.bytes(from_layout);
    one.result.to_bytes_per_device = dst_c.bytes(to_layout);
    if (one.result.steps.empty()) {
      one.result.steps.emplace_back();
    }
    plan.plans.push_back(std::move(one.result));
    source_extra.push_back(one.source_extra);
    aliased.push_back({one.target_is_source || tensor.num_elements == 0,
                       one.naive_target_is_source || tensor.num_elements == 0});
  }

  // Totals: tensors one after another.
  int64_t all_sources = 0;
  for (size_t t = 0; t < plan.size(); ++t) {
    all_sources =
        overflow.add(all_sources, plan.tensor(t).from_bytes_per_device);
  }
  for (PlanCost ReshardPlan::*total :
       {&ReshardPlan::totals, &ReshardPlan::naive_totals}) {
    const bool naive = total == &ReshardPlan::naive_totals;
    PlanCost& sum = plan.*total;
    int64_t done = 0;               // targets already made
    int64_t waiting = all_sources;  // sources not yet moved (with donate)
    int64_t peak = 0;
    for (size_t k = 0; k < plan.size(); ++k) {
      const TensorReshard& r = plan.tensor(k);
      const PlanCost& c = naive ? r.naive : r.cost;
      sum.bytes_per_device =
          overflow.add(sum.bytes_per_device, c.bytes_per_device);
      sum.seconds += c.seconds;
      const int64_t others = options.donate
                                 ? waiting - r.from_bytes_per_device
                                 : all_sources - r.from_bytes_per_device;
      int64_t during = 0;
      if (options.same_devices) {
        during =
            overflow.add(overflow.add(others, done), c.peak_bytes_per_device);
      } else {
        // Two device sets: the sources' devices and the targets'.
        const int64_t extra =
            naive ? c.peak_bytes_per_device - r.from_bytes_per_device
                  : source_extra[plan.plan_of[k]];
        const int64_t source_side =
            overflow.add(r.from_bytes_per_device, std::max<int64_t>(extra, 0));
        during = std::max(overflow.add(others, source_side),
                          overflow.add(done, r.to_bytes_per_device));
      }
      peak = std::max(peak, during);
      // A target that is its source buffer is already counted among the
      // sources kept; donated, it passes from one count to the other.
      if (!aliased[plan.plan_of[k]][naive ? 1 : 0] || options.donate) {
        done = overflow.add(done, r.to_bytes_per_device);
      }
      waiting -= r.from_bytes_per_device;
    }
    sum.peak_bytes_per_device = peak;
  }
  if (overflow.hit) {
    diags.error("reshard.overflow",
                "a byte count of the reshard plan does not fit in 64 bits",
                Location::of(manifest.source));
    return std::nullopt;
  }
  return plan;
}

}  // namespace shardplan
