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

// `layout` on the common mesh: each source (or target) axis becomes the
// common axes it is made of, `parts[a]`.
Layout on_common(const Layout& layout, const std::vector<AxisList>& parts) {
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
}

using SpecPair = std::pair<const PartitionSpec*, const PartitionSpec*>;

bool spec_less(const PartitionSpec* a, const PartitionSpec* b) {
  return std::lexicographical_compare(
      a->dims.begin(),
      a->dims.end(),
      b->dims.begin(),
      b->dims.end(),
      [](const DimSharding& x, const DimSharding& y) {
        return x.axes < y.axes;
      });
}

// Orders spec pairs by value, so that equal specs given as different
// objects (a specs file has one per tensor) share one memo entry.
struct SpecPairLess {
  bool operator()(const SpecPair& a, const SpecPair& b) const {
    if (spec_less(a.first, b.first) || spec_less(b.first, a.first)) {
      return spec_less(a.first, b.first);
    }
    return spec_less(a.second, b.second);
  }
};

// Builds a ReshardPlan in phases: the common mesh of the two sides (when
// there is one), a plan per distinct (shape, dtype, specs), then the
// manifest's totals and peaks.
class Planner {
 public:
  Planner(const Manifest& manifest,
          std::span<const PartitionSpec* const> from,
          std::span<const PartitionSpec* const> to,
          const ReshardSide& source,
          const ReshardSide& target,
          const ReshardOptions& options)
      : m_manifest(manifest),
        m_from(from),
        m_to(to),
        m_source(source),
        m_target(target),
        m_options(options) {}

  std::optional<ReshardPlan> run(Diagnostics& diags) {
    find_common_axes();
    mark_partial_axes();
    plan_tensors();
    add_totals(&ReshardPlan::totals, false);
    add_totals(&ReshardPlan::naive_totals, true);
    if (m_overflow.hit) {
      diags.error("reshard.overflow",
                  "a byte count of the reshard plan does not fit in 64 bits",
                  Location::of(m_manifest.source));
      return std::nullopt;
    }
    return std::move(m_plan);
  }

 private:
  // Another mesh on the same devices: collectives on the common mesh when
  // both are re-labellings of one.
  void find_common_axes() {
    m_plan.same_mesh = same_mesh(m_source, m_target, m_options);
    if (!m_plan.same_mesh && m_options.same_devices) {
      m_plan.common =
          find_common_mesh(m_source, m_target, m_options.to_topology);
    }
    if (!m_plan.common) {
      return;
    }
    m_plan.same_mesh = true;
    const Mesh& cm = m_plan.common->mesh;
    auto indices = [&](const std::vector<std::string>& names) {
      AxisList out;
      for (const std::string& name : names) {
        out.push_back(static_cast<int>(cm.index_of(name)));
      }
      return out;
    };
    for (const std::vector<std::string>& names : m_plan.common->from_axes) {
      m_common_of.push_back(indices(names));
    }
    for (const std::vector<std::string>& names : m_plan.common->to_axes) {
      m_common_to.push_back(indices(names));
    }
    for (const auto& [name, index] : m_plan.common->fixed) {
      m_fixed |= uint64_t{1} << m_source.mesh->index_of(name);
    }
  }

  void mark_partial_axes() {
    for (const std::string& p : m_options.partial) {
      const int64_t a = m_source.mesh->index_of(p);
      assert(a >= 0);
      m_partial |= uint64_t{1} << a;
    }
  }

  // A plan per distinct (shape, dtype, from, to); a manifest repeats a few
  // hundred.
  void plan_tensors() {
    m_plan.plan_of.reserve(m_manifest.size());
    for (size_t t = 0; t < m_manifest.size(); ++t) {
      const Tensor& tensor = m_manifest.tensors()[t];
      const SpecPair specs{m_from[t], m_to[t]};
      const SpecPair& canonical =
          m_canonical.try_emplace(specs, specs).first->second;
      const auto key = std::tuple{
          std::vector<int64_t>(tensor.shape.begin(), tensor.shape.end()),
          tensor.dtype,
          canonical.first,
          canonical.second};
      auto [m, fresh] = m_memo.try_emplace(key, m_plan.plans.size());
      m_plan.plan_of.push_back(static_cast<uint32_t>(m->second));
      if (fresh) {
        plan_tensor(tensor, std::get<0>(key), t);
      }
    }
  }

  // The plan of tensor `t` (of shape `shape`), appended to m_plan.plans.
  void plan_tensor(const Tensor& tensor,
                   const std::vector<int64_t>& shape,
                   size_t t) {
    Context src_c{m_source.mesh,
                  m_source.grid,
                  m_source.links,
                  shape,
                  tensor.dtype,
                  &m_overflow};
    Context dst_c{m_target.mesh,
                  m_target.grid,
                  m_target.links,
                  shape,
                  tensor.dtype,
                  &m_overflow};
    const PartitionSpec from_spec =
        m_from[t]->padded(static_cast<size_t>(tensor.rank()));
    const PartitionSpec to_spec =
        m_to[t]->padded(static_cast<size_t>(tensor.rank()));
    Layout from_layout = layout_of(from_spec, *m_source.mesh);
    from_layout.partial = m_partial;
    const Layout to_layout = layout_of(to_spec, *m_target.mesh);
    uint64_t used = from_layout.partial;
    for (const AxisList& axes : from_layout.dims) {
      for (int a : axes) {
        used |= uint64_t{1} << a;
      }
    }
    TensorPlan one;
    if (tensor.num_elements == 0) {
      one.result.steps.emplace_back();
    } else if (m_plan.common && (used & m_fixed) == 0) {
      one = plan_on_common(src_c, from_layout, dst_c, to_layout);
    } else if (m_plan.same_mesh && !m_plan.common) {
      one = plan_one_mesh(src_c, from_layout, to_layout, m_options);
    } else {
      one = plan_two_meshes(src_c, from_layout, dst_c, to_layout, m_options);
    }
    one.result.from = from_spec;
    one.result.to = to_spec;
    one.result.from_bytes_per_device = src_c.bytes(from_layout);
    one.result.to_bytes_per_device = dst_c.bytes(to_layout);
    if (one.result.steps.empty()) {
      one.result.steps.emplace_back();
    }
    m_plan.plans.push_back(std::move(one.result));
    m_source_extra.push_back(one.source_extra);
    m_aliased.push_back(
        {one.target_is_source || tensor.num_elements == 0,
         one.naive_target_is_source || tensor.num_elements == 0});
  }

  // Both layouts on the common mesh, then collectives there; unless the
  // exact-overlap transfers are cheaper (a reorder of axes that per-axis
  // collectives can only do through a gather).
  TensorPlan plan_on_common(const Context& src_c,
                            const Layout& from_layout,
                            const Context& dst_c,
                            const Layout& to_layout) {
    const Context common_c{&m_plan.common->mesh,
                           &m_plan.common->grid,
                           m_plan.common->links,
                           src_c.shape,
                           src_c.dtype,
                           &m_overflow};
    TensorPlan one = plan_one_mesh(common_c,
                                   on_common(from_layout, m_common_of),
                                   on_common(to_layout, m_common_to),
                                   m_options);
    one.result.on_common_mesh = true;
    TensorPlan direct =
        plan_two_meshes(src_c, from_layout, dst_c, to_layout, m_options);
    const PlanCost& a = one.result.cost;
    const PlanCost& b = direct.result.cost;
    if (std::tie(b.seconds, b.bytes_per_device)
        < std::tie(a.seconds, a.bytes_per_device)) {
      return direct;
    }
    return one;
  }

  // Totals: tensors one after another (`naive`: of the naive plans).
  void add_totals(PlanCost ReshardPlan::*total, bool naive) {
    int64_t all_sources = 0;
    for (size_t t = 0; t < m_plan.size(); ++t) {
      all_sources =
          m_overflow.add(all_sources, m_plan.tensor(t).from_bytes_per_device);
    }
    PlanCost& sum = m_plan.*total;
    int64_t done = 0;               // targets already made
    int64_t waiting = all_sources;  // sources not yet moved (with donate)
    int64_t peak = 0;
    for (size_t k = 0; k < m_plan.size(); ++k) {
      const TensorReshard& r = m_plan.tensor(k);
      const PlanCost& c = naive ? r.naive : r.cost;
      sum.bytes_per_device =
          m_overflow.add(sum.bytes_per_device, c.bytes_per_device);
      sum.seconds += c.seconds;
      const int64_t others = m_options.donate
                                 ? waiting - r.from_bytes_per_device
                                 : all_sources - r.from_bytes_per_device;
      peak = std::max(peak, peak_during(k, naive, others, done));
      // A target that is its source buffer is already counted among the
      // sources kept; donated, it passes from one count to the other.
      if (!m_aliased[m_plan.plan_of[k]][naive ? 1 : 0] || m_options.donate) {
        done = m_overflow.add(done, r.to_bytes_per_device);
      }
      waiting -= r.from_bytes_per_device;
    }
    sum.peak_bytes_per_device = peak;
  }

  // What a device holds while tensor k moves: the `others` sources still
  // kept, the `done` targets already made, and the move's own peak.
  int64_t peak_during(size_t k, bool naive, int64_t others, int64_t done) {
    const TensorReshard& r = m_plan.tensor(k);
    const PlanCost& c = naive ? r.naive : r.cost;
    if (m_options.same_devices) {
      return m_overflow.add(m_overflow.add(others, done),
                            c.peak_bytes_per_device);
    }
    // Two device sets: the sources' devices and the targets'.
    const int64_t extra =
        naive ? c.peak_bytes_per_device - r.from_bytes_per_device
              : m_source_extra[m_plan.plan_of[k]];
    const int64_t source_side =
        m_overflow.add(r.from_bytes_per_device, std::max<int64_t>(extra, 0));
    return std::max(m_overflow.add(others, source_side),
                    m_overflow.add(done, r.to_bytes_per_device));
  }

  const Manifest& m_manifest;
  std::span<const PartitionSpec* const> m_from;
  std::span<const PartitionSpec* const> m_to;
  const ReshardSide& m_source;
  const ReshardSide& m_target;
  const ReshardOptions& m_options;
  ReshardPlan m_plan;
  std::vector<AxisList> m_common_of;  // per source axis, its common axes
  std::vector<AxisList> m_common_to;  // per target axis
  uint64_t m_fixed = 0;               // source axes fixed at one index
  uint64_t m_partial = 0;             // source axes holding pending sums
  Overflow m_overflow;
  std::map<std::tuple<std::vector<int64_t>,
                      DType,
                      const PartitionSpec*,
                      const PartitionSpec*>,
           size_t>
      m_memo;
  std::map<SpecPair, SpecPair, SpecPairLess> m_canonical;
  std::vector<int64_t> m_source_extra;  // per distinct plan
  // Per distinct plan: the target is the source buffer (plan, naive).
  std::vector<std::array<bool, 2>> m_aliased;
};

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
  return Planner(manifest, from, to, source, target, options).run(diags);
}

}  // namespace shardplan
