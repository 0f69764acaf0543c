// The seed algorithms of the rules engine, one tensor at a time
// (include/shardplan/rules.hpp; docs/rules.md gives each with its seed). The
// yields call them (rules/yields.cpp); tests call them by hand.
//
// Sources (docs/sources.md#seeds): the nnx FSDP rule (`fsdp`, `replicate`;
// docs/sources.md#nnx-fsdp), eformer's AutoShardingRule,
// MemoryConstrainedShardingRule, ShapeBasedShardingRule and
// MeshPartitionHelper (docs/sources.md#eformer); and Flax linen
// `_logical_to_mesh_axes` (docs/sources.md#logical-axis-rules).

#include <shardplan/rules.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <numeric>

namespace shardplan {

namespace {

constexpr int64_t k_int64_max = std::numeric_limits<int64_t>::max();

int64_t axis_size(const Mesh& mesh, std::string_view name) {
  const MeshAxis* axis = mesh.find(name);
  assert(axis != nullptr);
  return axis->size;
}

// Elements of `shape`; int64 max when the product overflows (a shape that no
// manifest accepts, but the functions here take any shape).
int64_t element_count(ShapeView shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    std::optional<int64_t> next = checked_mul(n, d);
    if (!next) {
      // A zero dim later on still makes the product 0.
      return std::find(shape.begin(), shape.end(), 0) != shape.end()
                 ? 0
                 : k_int64_max;
    }
    n = *next;
  }
  return n;
}

int64_t byte_count(int64_t elements, DType dtype) {
  return bytes_for(elements, dtype).value_or(k_int64_max);
}

// "fsdp" or "(dp, fsdp)".
std::string axes_text(const std::vector<std::string>& axes) {
  if (axes.size() == 1) {
    return axes[0];
  }
  return fmt::format("({})", fmt::join(axes, ", "));
}

// "fsdp (8)" or "(dp, fsdp) (16)".
std::string axes_with_size(const std::vector<std::string>& axes, int64_t size) {
  return fmt::format("{} ({})", axes_text(axes), size);
}

void note(Trace* trace, std::string text) {
  if (trace != nullptr) {
    trace->push_back(
        TraceStep{std::move(text), std::nullopt, {}, std::nullopt, false});
  }
}

// A divisibility check of `dim` against `axes`; `chosen` when it assigned.
void check_step(Trace* trace,
                size_t dim,
                int64_t dim_size,
                const std::vector<std::string>& axes,
                int64_t shards,
                bool ok,
                bool chosen,
                std::string_view extra = {}) {
  if (trace == nullptr) {
    return;
  }
  std::string text = fmt::format("dim {} ({}): {} {}",
                                 dim,
                                 dim_size,
                                 axes_with_size(axes, shards),
                                 ok ? "divides it" : "does not divide it");
  if (!extra.empty()) {
    text += fmt::format(" ({})", extra);
  }
  if (chosen) {
    text += fmt::format(": dim {} -> {}", dim, axes_text(axes));
  }
  trace->push_back(
      TraceStep{std::move(text), static_cast<int64_t>(dim), axes, ok, chosen});
}

// Dim indices ordered by size, largest first (smallest first when
// `ascending`); equal sizes in dim order, or in reverse dim order with
// `later_first`.
std::vector<size_t> dims_by_size(ShapeView shape,
                                 bool ascending,
                                 bool later_first) {
  std::vector<size_t> order(shape.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (shape[a] != shape[b]) {
      return ascending ? shape[a] < shape[b] : shape[a] > shape[b];
    }
    return later_first ? a > b : a < b;
  });
  return order;
}

std::string order_text(ShapeView shape, const std::vector<size_t>& order) {
  std::vector<std::string> parts;
  parts.reserve(order.size());
  for (size_t d : order) {
    parts.push_back(fmt::format("{} ({})", d, shape[d]));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// `axes` without those of size 1 (noted in the trace).
std::vector<std::string> without_size_one(const std::vector<std::string>& axes,
                                          const Mesh& mesh,
                                          Trace* trace) {
  std::vector<std::string> out;
  out.reserve(axes.size());
  for (const std::string& a : axes) {
    if (axis_size(mesh, a) == 1) {
      note(trace,
           fmt::format("axis {} has size 1: it splits nothing, skipped", a));
      continue;
    }
    out.push_back(a);
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------
// nnx tactics.

PartitionSpec fsdp_tactic(ShapeView shape,
                          DType dtype,
                          const PartitionSpec& current,
                          const std::vector<std::string>& axes,
                          double min_size_mb,
                          const Mesh& mesh,
                          Trace* trace) {
  assert(min_size_mb >= 0);
  const size_t rank = shape.size();
  PartitionSpec spec = current.padded(rank);
  std::vector<std::string> used = without_size_one(axes, mesh, trace);
  int64_t shards = 1;
  for (const std::string& a : used) {
    shards *= axis_size(mesh, a);  // distinct axes: at most the device count
  }
  if (used.empty()) {
    note(trace, "no axis of size > 1 to shard over: left as is");
    return spec;
  }
  // The seed skips a tensor of at most min_size_mb * 2^20 bytes. The
  // threshold is exact: a power-of-two multiple of a double, compared with
  // an integer byte count through its floor.
  const int64_t bytes = byte_count(element_count(shape), dtype);
  const double threshold = min_size_mb * 1048576.0;
  const bool small = threshold >= 9.2e18
                     || bytes <= static_cast<int64_t>(std::floor(threshold));
  if (small) {
    note(trace,
         fmt::format("{} bytes <= min_size_mb {} ({} bytes): left as is",
                     bytes,
                     min_size_mb,
                     std::floor(threshold)));
    return spec;
  }
  note(trace,
       fmt::format("{} bytes > min_size_mb {}: shard the largest free "
                   "dim {} divides",
                   bytes,
                   min_size_mb,
                   axes_with_size(used, shards)));
  // np.argsort(shape)[::-1]: largest first, equal sizes the later dim first.
  const std::vector<size_t> order = dims_by_size(shape, false, true);
  note(trace, "dims by size: " + order_text(shape, order));
  for (size_t d : order) {
    if (!spec.dims[d].replicated()) {
      note(trace, fmt::format("dim {} ({}): already split", d, shape[d]));
      continue;
    }
    const bool ok = shape[d] % shards == 0;
    check_step(trace, d, shape[d], used, shards, ok, ok);
    if (ok) {
      spec.dims[d].axes = used;
      return spec;
    }
  }
  note(trace, "no free dim divisible: left as is");
  return spec;
}

std::optional<PartitionSpec> replicate_tactic(const PartitionSpec& current,
                                              size_t rank) {
  assert(current.size() <= rank);
  if (!current.replicated()) {
    return std::nullopt;
  }
  return current.padded(rank);
}

// ---------------------------------------------------------------------------
// eformer rules.

PartitionSpec auto_spec(ShapeView shape,
                        const std::vector<std::string>& axes,
                        int64_t min_shard_size,
                        bool reverse,
                        const Mesh& mesh,
                        Trace* trace) {
  PartitionSpec spec = PartitionSpec::replicated_of(shape.size());
  const int64_t elements = element_count(shape);
  if (elements < min_shard_size) {
    note(trace,
         fmt::format("{} elements < min_shard_size {}: replicated",
                     elements,
                     min_shard_size));
    return spec;
  }
  note(trace,
       fmt::format(
           "{} elements >= min_shard_size {}", elements, min_shard_size));
  // eformer walks a Python set of the axes, in no defined order; we walk
  // them in mesh order.
  std::vector<std::string> remaining = without_size_one(axes, mesh, trace);
  std::stable_sort(remaining.begin(),
                   remaining.end(),
                   [&](const std::string& a, const std::string& b) {
                     return mesh.index_of(a) < mesh.index_of(b);
                   });
  note(trace,
       fmt::format("axes in mesh order: {}",
                   remaining.empty()
                       ? "none"
                       : fmt::format("{}", fmt::join(remaining, ", "))));
  const std::vector<size_t> order = dims_by_size(shape, reverse, false);
  note(trace,
       fmt::format("dims by size, {} first: {}",
                   reverse ? "smallest" : "largest",
                   order_text(shape, order)));
  for (size_t d : order) {
    if (remaining.empty()) {
      note(trace, "every axis is used");
      break;
    }
    bool assigned = false;
    for (auto it = remaining.begin(); it != remaining.end(); ++it) {
      const int64_t size = axis_size(mesh, *it);
      const bool ok = shape[d] % size == 0;
      check_step(trace, d, shape[d], {*it}, size, ok, ok);
      if (ok) {
        spec.dims[d].axes = {*it};
        remaining.erase(it);
        assigned = true;
        break;
      }
    }
    if (!assigned) {
      note(trace,
           fmt::format(
               "dim {} ({}): no remaining axis divides it", d, shape[d]));
    }
  }
  return spec;
}

namespace {

// Bytes per device when `shape` is split into `shards` per dim.
// REQUIRES: every shards[d] divides shape[d].
int64_t bytes_per_device(ShapeView shape,
                         const std::vector<int64_t>& shards,
                         DType dtype) {
  int64_t elements = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    std::optional<int64_t> next = checked_mul(elements, shape[d] / shards[d]);
    if (!next) {
      return k_int64_max;
    }
    elements = *next;
  }
  return byte_count(elements, dtype);
}

}  // namespace

PartitionSpec memory_spec(ShapeView shape,
                          DType dtype,
                          int64_t max_bytes_per_device,
                          const std::vector<std::string>& axes,
                          const Mesh& mesh,
                          bool* fits,
                          Trace* trace) {
  const size_t rank = shape.size();
  PartitionSpec spec = PartitionSpec::replicated_of(rank);
  const int64_t bytes = byte_count(element_count(shape), dtype);
  if (bytes <= max_bytes_per_device) {
    note(trace,
         fmt::format("{} bytes <= max_bytes_per_device {}: replicated",
                     bytes,
                     max_bytes_per_device));
    if (fits != nullptr) {
      *fits = true;
    }
    return spec;
  }
  note(trace,
       fmt::format(
           "{} bytes > max_bytes_per_device {}", bytes, max_bytes_per_device));
  // Largest axes first; sorted() is stable, so equal sizes keep their order.
  std::vector<std::string> sorted = without_size_one(axes, mesh, trace);
  std::stable_sort(sorted.begin(),
                   sorted.end(),
                   [&](const std::string& a, const std::string& b) {
                     return axis_size(mesh, a) > axis_size(mesh, b);
                   });
  note(
      trace,
      fmt::format("axes by size, largest first: {}",
                  sorted.empty() ? "none"
                                 : fmt::format("{}", fmt::join(sorted, ", "))));
  // np.argsort([-d for d in shape]): largest first, equal sizes in dim order.
  const std::vector<size_t> order = dims_by_size(shape, false, false);
  note(trace, "dims by size: " + order_text(shape, order));
  std::vector<int64_t> shards(rank, 1);
  int64_t remaining = bytes;
  for (size_t d : order) {
    if (remaining <= max_bytes_per_device) {
      break;
    }
    for (auto it = sorted.begin(); it != sorted.end(); ++it) {
      const int64_t size = axis_size(mesh, *it);
      const bool ok = shape[d] % size == 0;
      check_step(trace, d, shape[d], {*it}, size, ok, ok);
      if (ok) {
        spec.dims[d].axes = {*it};
        shards[d] = size;
        remaining = bytes_per_device(shape, shards, dtype);
        note(trace, fmt::format("{} bytes per device", remaining));
        sorted.erase(it);
        break;
      }
    }
  }
  // The seed stops here, at most one axis per dim, whether or not the tensor
  // fits. We go on: a dim may take further axes, minor to its first, while
  // the product divides it.
  if (remaining > max_bytes_per_device && !sorted.empty()) {
    note(trace, "still over the limit: dims may take further axes");
    for (size_t d : order) {
      for (auto it = sorted.begin();
           it != sorted.end() && remaining > max_bytes_per_device;) {
        const int64_t size = axis_size(mesh, *it);
        const int64_t product = shards[d] * size;
        std::vector<std::string> with = spec.dims[d].axes;
        with.push_back(*it);
        const bool ok = shape[d] % product == 0;
        check_step(trace, d, shape[d], with, product, ok, ok);
        if (ok) {
          spec.dims[d].axes = with;
          shards[d] = product;
          remaining = bytes_per_device(shape, shards, dtype);
          note(trace, fmt::format("{} bytes per device", remaining));
          it = sorted.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  const bool fit = remaining <= max_bytes_per_device;
  if (!fit) {
    note(trace,
         fmt::format("{} bytes per device: still over the limit, no "
                     "axis left that divides",
                     remaining));
  }
  if (fits != nullptr) {
    *fits = fit;
  }
  return spec;
}

// ---------------------------------------------------------------------------
// eformer MeshPartitionHelper.

namespace {

// Size of a mesh axis the helper may use: 0 when the mesh lacks it or its
// size is 1 (the seed's `name in self.axis_sizes`).
int64_t helper_size(const Mesh& mesh, std::string_view name) {
  const MeshAxis* axis = mesh.find(name);
  return axis != nullptr && axis->size > 1 ? axis->size : 0;
}

std::string methods_text(const std::vector<std::vector<std::string>>& methods) {
  std::vector<std::string> parts;
  parts.reserve(methods.size());
  for (const auto& m : methods) {
    parts.push_back(fmt::format("[{}]", fmt::join(m, ", ")));
  }
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, " "));
}

}  // namespace

std::vector<std::vector<std::string>> suggest_methods(ShapeView shape,
                                                      const Mesh& mesh) {
  std::vector<std::vector<std::string>> methods;
  const size_t dims = shape.size();
  const int64_t fsdp = helper_size(mesh, "fsdp");
  const int64_t sp = helper_size(mesh, "sp");
  bool combined = false;
  if (dims > 1 && fsdp > 0 && sp > 0) {
    std::optional<int64_t> area = checked_mul(shape[0], shape[1]);
    if (!area || *area >= fsdp * sp) {
      methods.push_back({"fsdp", "sp"});
      combined = true;
    }
  }
  if (dims > 0 && helper_size(mesh, "dp") > 0) {
    methods.push_back({"dp"});
  }
  if (dims > 1 && sp > 0 && !combined) {
    methods.push_back({"sp"});
  }
  if (helper_size(mesh, "tp") > 0) {
    methods.push_back({"tp"});
  }
  if (fsdp > 0 && !combined) {
    methods.push_back({"fsdp"});
  }
  return methods;
}

PartitionSpec mesh_helper_spec(
    ShapeView shape,
    const std::vector<std::vector<std::string>>& methods,
    int64_t min_shard_size,
    const Mesh& mesh,
    Trace* trace) {
  const size_t rank = shape.size();
  PartitionSpec spec = PartitionSpec::replicated_of(rank);
  if (rank == 0) {
    note(trace, "a scalar: P()");
    return spec;
  }
  note(trace, "methods: " + methods_text(methods));
  auto is_free = [&](size_t d) { return spec.dims[d].replicated(); };
  // One pass over the methods: a single axis takes the first free dim of at
  // least `min_dim` it divides; a pair takes dims 0 and 1, or dim 0 for both.
  // `first` selects the seed's first pass (its conditions on the pair's
  // element count) over its fallback pass.
  auto pass = [&](int64_t min_dim, bool first) {
    for (const std::vector<std::string>& method : methods) {
      if (method.size() == 1) {
        const int64_t size = axis_size(mesh, method[0]);
        for (size_t d = 0; d < rank; ++d) {
          if (!is_free(d)) {
            continue;
          }
          const bool big = shape[d] >= min_dim;
          const bool ok = big && shape[d] % size == 0;
          check_step(
              trace,
              d,
              shape[d],
              method,
              size,
              shape[d] % size == 0,
              ok,
              big ? std::string_view{} : std::string_view{"below the minimum"});
          if (ok) {
            spec.dims[d].axes = method;
            break;
          }
        }
        continue;
      }
      if (method.size() != 2 || rank < 2) {
        continue;
      }
      const int64_t s0 = axis_size(mesh, method[0]);
      const int64_t s1 = axis_size(mesh, method[1]);
      const int64_t combined = s0 * s1;
      bool both = is_free(0) && is_free(1);
      bool on_dim0 = false;
      if (first) {
        // The seed: if dims 0 and 1 hold a multiple of s0 x s1 elements,
        // both dims if each is at least its axis's size, else nothing; if
        // not, dim 0 alone when s0 x s1 divides it.
        std::optional<int64_t> area = checked_mul(shape[0], shape[1]);
        const bool area_ok = area && *area >= combined && *area % combined == 0;
        if (area_ok) {
          both = both && shape[0] >= s0 && shape[1] >= s1;
        } else {
          both = false;
          on_dim0 = is_free(0) && shape[0] >= combined;
        }
      } else {
        // The seed's fallback: both dims without a check, else dim 0.
        on_dim0 = is_free(0);
      }
      // Fixed: each axis must divide its dim, and the pair dim 0 (the seed
      // checked only the product of dims 0 and 1).
      const bool divides = shape[0] % s0 == 0 && shape[1] % s1 == 0;
      if (both) {
        check_step(
            trace, 0, shape[0], {method[0]}, s0, shape[0] % s0 == 0, divides);
        check_step(
            trace, 1, shape[1], {method[1]}, s1, shape[1] % s1 == 0, divides);
        if (divides) {
          spec.dims[0].axes = {method[0]};
          spec.dims[1].axes = {method[1]};
          return;  // the seed's `break` leaves the loop over methods
        }
        on_dim0 = is_free(0) && !first;
      }
      if (on_dim0) {
        const bool ok = shape[0] % combined == 0;
        check_step(trace, 0, shape[0], method, combined, ok, ok);
        if (ok) {
          spec.dims[0].axes = method;
          return;
        }
      }
    }
  };
  const int64_t devices = mesh.num_devices();
  const int64_t min_dim =
      std::max(min_shard_size, element_count(shape) / (devices * 2));
  note(trace,
       fmt::format("first pass: dims of at least {} (max of "
                   "min_shard_size {} and elements / (2 x {} devices))",
                   min_dim,
                   min_shard_size,
                   devices));
  pass(min_dim, true);
  if (spec.replicated()) {
    note(trace,
         fmt::format("nothing split: second pass, dims of at least "
                     "min_shard_size {}",
                     min_shard_size));
    pass(min_shard_size, false);
  }
  return spec;
}

// ---------------------------------------------------------------------------
// Shapes and logical axes.

bool shape_matches(ShapeView shape,
                   const ShapePattern& pattern,
                   std::string* why_not) {
  if (shape.size() != pattern.size()) {
    if (why_not != nullptr) {
      *why_not = fmt::format("rank {} != {}", shape.size(), pattern.size());
    }
    return false;
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (pattern[d] && *pattern[d] != shape[d]) {
      if (why_not != nullptr) {
        *why_not =
            fmt::format("dim {} is {}, not {}", d, shape[d], *pattern[d]);
      }
      return false;
    }
  }
  return true;
}

PartitionSpec resolve_logical_axes(const LogicalAxes& names,
                                   ShapeView shape,
                                   const std::vector<LogicalAxisRule>& rules,
                                   const Mesh& mesh,
                                   bool adaptive,
                                   Trace* trace,
                                   std::vector<DroppedAxis>* dropped) {
  assert(names.size() == shape.size());
  const size_t rank = shape.size();
  // Per dim: unassigned (nullopt), or the axes a rule gave it (empty for
  // replicated), and the rule that did.
  std::vector<std::optional<std::vector<std::string>>> assigned(rank);
  std::vector<size_t> by_rule(rank, 0);
  for (size_t k = 0; k < rules.size(); ++k) {
    const LogicalAxisRule& rule = rules[k];
    auto named = std::find_if(
        names.begin(), names.end(), [&](const std::optional<std::string>& n) {
          return n && *n == rule.name;
        });
    if (named == names.end()) {
      continue;
    }
    const size_t d = static_cast<size_t>(named - names.begin());
    std::vector<std::string> axes;
    axes.reserve(rule.axes.size());
    for (const AxisRef& a : rule.axes) {
      axes.push_back(a.name);
    }
    const std::string head = fmt::format(
        "logical rule {} [{}, {}]",
        k,
        rule.name,
        axes.empty() ? "[]" : fmt::format("[{}]", fmt::join(axes, ", ")));
    if (assigned[d]) {
      note(trace,
           fmt::format("{}: dim {} already assigned by logical rule {}",
                       head,
                       d,
                       by_rule[d]));
      continue;
    }
    if (adaptive && !axes.empty()) {
      // Presets: drop what the mesh lacks, then what does not divide.
      std::vector<std::string> kept;
      int64_t product = 1;
      for (const std::string& a : axes) {
        const MeshAxis* axis = mesh.find(a);
        if (axis == nullptr) {
          note(trace,
               fmt::format("{}: axis {} is not in the mesh: dropped", head, a));
          continue;
        }
        if (shape[d] % (product * axis->size) != 0) {
          check_step(trace,
                     d,
                     shape[d],
                     {a},
                     axis->size,
                     false,
                     false,
                     product > 1 ? "after the axes kept before it" : "");
          if (dropped != nullptr && axis->size > 1) {
            dropped->push_back(
                DroppedAxis{a, d, product * axis->size, rule.name, k});
          }
          continue;
        }
        product *= axis->size;
        kept.push_back(a);
      }
      if (kept.empty()) {
        note(trace,
             fmt::format(
                 "{}: no axis left for dim {}: does not apply", head, d));
        continue;
      }
      axes = std::move(kept);
    }
    const std::string* taken = nullptr;
    size_t taken_by = 0;
    for (size_t e = 0; e < rank && taken == nullptr; ++e) {
      if (!assigned[e]) {
        continue;
      }
      for (const std::string& a : axes) {
        if (std::find(assigned[e]->begin(), assigned[e]->end(), a)
            != assigned[e]->end()) {
          taken = &a;
          taken_by = e;
          break;
        }
      }
    }
    if (taken != nullptr) {
      note(
          trace,
          fmt::format(
              "{}: axis {} is already used by dim {}", head, *taken, taken_by));
      continue;
    }
    if (trace != nullptr) {
      trace->push_back(
          TraceStep{fmt::format("{}: dim {} ({}) -> {}",
                                head,
                                d,
                                rule.name,
                                axes.empty() ? "replicated" : axes_text(axes)),
                    static_cast<int64_t>(d),
                    axes,
                    true,
                    true});
    }
    assigned[d] = std::move(axes);
    by_rule[d] = k;
  }
  PartitionSpec spec = PartitionSpec::replicated_of(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (!assigned[d]) {
      if (names[d]) {
        note(trace,
             fmt::format(
                 "dim {} ({}): no rule applies: replicated", d, *names[d]));
      }
      continue;
    }
    for (const std::string& a : *assigned[d]) {
      if (axis_size(mesh, a) == 1) {
        note(trace, fmt::format("dim {}: axis {} has size 1: removed", d, a));
        continue;
      }
      spec.dims[d].axes.push_back(a);
    }
  }
  return spec;
}

}  // namespace shardplan
