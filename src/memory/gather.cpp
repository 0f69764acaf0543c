// What FSDP gathers when (docs/memory.md, "Gather buffer"): the axes a
// weight is gathered over at use, the units gathered one at a time in
// execution order, and the consecutive units a group's gather buffer
// holds.

#include "memory/internal.hpp"

#include <algorithm>
#include <cassert>

namespace shardplan::memory_detail {

namespace {

bool listed(const std::vector<std::string>& list, const std::string& axis) {
  return std::find(list.begin(), list.end(), axis) != list.end();
}

// An input embedding of no layer: gathered first. One of a layer
// (DeepSeek-V3's MTP embed_tokens) is its layer's.
bool is_embedding(const NameFacts& name) {
  return !name.layer && name.embedding;
}

// The units of no layer on one side of the layers, and the largest of them.
struct Side {
  Gather gather;
  int64_t largest = 0;
};

// The loss's buffer: the units after the layers (the head) with their
// gradients, the input embeddings too when no unit after the layers is as
// large (a tied head), and the last layer's weights, prefetched. nullopt on
// an overflow.
std::optional<Gather> loss_buffer(Side outputs,
                                  const Side& inputs,
                                  size_t last_layer,
                                  int64_t last_layer_weights) {
  Gather loss = std::move(outputs.gather);
  std::optional<int64_t> bytes = loss.bytes;
  if (outputs.largest < inputs.largest) {
    loss.units.insert(loss.units.end(),
                      inputs.gather.units.begin(),
                      inputs.gather.units.end());
    bytes = checked_add(*bytes, inputs.gather.bytes);
  }
  if (bytes) {
    bytes = checked_add(*bytes, last_layer_weights);
  }
  if (!bytes) {
    return {};
  }
  loss.bytes = *bytes;
  loss.units.push_back(last_layer);
  std::sort(loss.units.begin(), loss.units.end());
  loss.prefetched = last_layer_weights;
  loss.prefetched_unit = last_layer;
  return loss;
}

// Orders a unit's (rank, bytes) entries by rank.
bool rank_before(const std::pair<int64_t, Sum>& entry, int64_t rank) {
  return entry.first < rank;
}

}  // namespace

Gather Gather::without_prefetch() const {
  Gather out = *this;
  out.bytes -= prefetched;
  if (prefetched_unit) {
    out.units.erase(
        std::find(out.units.begin(), out.units.end(), *prefetched_unit));
  }
  out.prefetched = 0;
  out.prefetched_unit.reset();
  return out;
}

bool AxisUse::kept(const std::string& axis, Role role) const {
  return listed(m_roles.tensor, axis) || listed(m_roles.stage, axis)
         || (role == Role::expert_weight && listed(m_roles.expert, axis));
}

bool AxisUse::is_data(const std::string& axis) const {
  return listed(m_data_axes, axis);
}

int64_t AxisUse::free_data(const PartitionSpec* spec) const {
  int64_t free_data = m_zero_shards;
  if (spec) {
    for (const DimSharding& dim : spec->dims) {
      for (const std::string& axis : dim.axes) {
        if (is_data(axis)) {
          free_data /= m_mesh.find(axis)->size;
        }
      }
    }
  }
  return free_data;
}

std::vector<std::string> AxisUse::gathered(const TensorSharding& s,
                                           Role role) const {
  std::vector<std::string> axes;
  const PartitionSpec* spec = s.spec();
  if (spec) {
    for (const DimSharding& dim : spec->dims) {
      for (const std::string& axis : dim.axes) {
        if (!kept(axis, role) && m_mesh.find(axis)->size > 1) {
          axes.push_back(axis);
        }
      }
    }
  }
  if (m_zero >= 3 && free_data(spec) > 1) {
    for (const std::string& axis : m_data_axes) {
      if (!listed(axes, axis) && m_mesh.find(axis)->size > 1
          && !(spec
               && std::any_of(spec->dims.begin(),
                              spec->dims.end(),
                              [&](const DimSharding& d) {
                                return listed(d.axes, axis);
                              }))) {
        axes.push_back(axis);
      }
    }
  }
  return axes;
}

GatherUnits::GatherUnits(std::span<const NameFacts> names,
                         const Placement& placement,
                         bool grads)
    : m_grads(grads) {
  list_units(names, placement);
  list_stage_units(placement.stages);
  m_stage_gather.resize(static_cast<size_t>(placement.stages));
}

void GatherUnits::list_units(std::span<const NameFacts> names,
                             const Placement& placement) {
  std::vector<int64_t> layer_ids;
  size_t embeddings = 0;
  size_t others = 0;
  for (const NameFacts& name : names) {
    if (name.layer) {
      // A layer's tensors mostly come together: keep the list short.
      if (layer_ids.empty() || layer_ids.back() != *name.layer) {
        layer_ids.push_back(*name.layer);
      }
    } else if (is_embedding(name)) {
      ++embeddings;
    } else {
      ++others;
    }
  }
  std::sort(layer_ids.begin(), layer_ids.end());
  layer_ids.erase(std::unique(layer_ids.begin(), layer_ids.end()),
                  layer_ids.end());
  m_units.resize(embeddings + layer_ids.size() + others);
  m_unit_of.resize(names.size());
  size_t next_embedding = 0;
  size_t next_other = embeddings + layer_ids.size();
  for (size_t t = 0; t < names.size(); ++t) {
    if (const std::optional<int64_t>& layer = names[t].layer) {
      m_unit_of[t] =
          embeddings
          + static_cast<size_t>(
              std::lower_bound(layer_ids.begin(), layer_ids.end(), *layer)
              - layer_ids.begin());
    } else if (is_embedding(names[t])) {
      m_unit_of[t] = next_embedding++;
    } else {
      m_unit_of[t] = next_other++;
    }
    Unit& unit = m_units[m_unit_of[t]];
    const int64_t stage =
        placement.placed() ? placement.tensors[t].stage : k_every;
    if (!unit.started) {
      unit.started = true;
      unit.first_tensor = t;
      unit.layer = names[t].layer;
      unit.stage = stage;
    } else if (unit.stage != stage) {
      unit.stage = k_every;  // its tensors live on different stages
    }
  }
}

void GatherUnits::list_stage_units(int64_t stages) {
  m_stage_units.resize(static_cast<size_t>(stages));
  for (size_t u = 0; u < m_units.size(); ++u) {
    for (int64_t st = 0; st < stages; ++st) {
      if (m_units[u].started
          && (m_units[u].stage == k_every || m_units[u].stage == st)) {
        m_stage_units[static_cast<size_t>(st)].push_back(u);
      }
    }
  }
}

void GatherUnits::add(size_t tensor,
                      int64_t expert_rank,
                      int64_t bytes,
                      int64_t count) {
  Unit& unit = m_units[m_unit_of[tensor]];
  if (expert_rank == k_every) {
    unit.common.add(bytes, count);
    return;
  }
  auto at = std::lower_bound(
      unit.by_rank.begin(), unit.by_rank.end(), expert_rank, rank_before);
  if (at == unit.by_rank.end() || at->first != expert_rank) {
    at = unit.by_rank.insert(at, {expert_rank, Sum{}});
  }
  at->second.add(bytes, count);
  m_any_by_rank = true;
}

bool GatherUnits::overflow() const {
  for (const Unit& unit : m_units) {
    if (unit.common.overflow()) {
      return true;
    }
    for (const auto& [rank, sum] : unit.by_rank) {
      if (sum.overflow()) {
        return true;
      }
    }
  }
  return false;
}

std::optional<int64_t> GatherUnits::bytes(const Unit& unit, int64_t rank) {
  auto at = std::lower_bound(
      unit.by_rank.begin(), unit.by_rank.end(), rank, rank_before);
  if (at == unit.by_rank.end() || at->first != rank) {
    return unit.common.value();
  }
  return checked_add(unit.common.value(), at->second.value());
}

std::optional<Gathers> GatherUnits::best_pair(int64_t stage,
                                              int64_t expert_rank) const {
  const std::vector<size_t>& units = m_stage_units[static_cast<size_t>(stage)];
  const bool layered = std::any_of(units.begin(), units.end(), [&](size_t u) {
    return m_units[u].layer.has_value();
  });
  Gathers best;
  std::optional<size_t> previous;
  std::optional<size_t> last_layer;
  int64_t previous_bytes = 0;
  int64_t last_layer_bytes = 0;
  Side inputs, outputs;  // the units of no layer before and after layers
  for (size_t u : units) {
    std::optional<int64_t> unit_bytes = bytes(m_units[u], expert_rank);
    if (!unit_bytes) {
      return {};
    }
    if (m_units[u].layer) {
      last_layer = u;
      last_layer_bytes = *unit_bytes;
    } else if (layered) {
      Side& side = last_layer ? outputs : inputs;
      std::optional<int64_t> sum = checked_add(side.gather.bytes, *unit_bytes);
      if (!sum) {
        return {};
      }
      side.gather.bytes = *sum;
      side.gather.units.push_back(u);
      side.largest = std::max(side.largest, *unit_bytes);
    }
    // The backward of u holds its weights and gradients while the previous
    // unit's weights, prefetched, arrive (its gradients come with its own
    // backward); the first unit of the group has none before it.
    std::optional<int64_t> held =
        previous ? checked_add(weights_of(previous_bytes), *unit_bytes)
                 : unit_bytes;
    if (!held) {
      return {};
    }
    if (best.layers.units.empty() || *held > best.layers.bytes) {
      best.layers = previous ? Gather{*held,
                                      {*previous, u},
                                      weights_of(previous_bytes),
                                      previous}
                             : Gather{*held, {u}, 0, std::nullopt};
    }
    previous = u;
    previous_bytes = *unit_bytes;
  }
  if (last_layer && !outputs.gather.units.empty()) {
    std::optional<Gather> loss = loss_buffer(
        std::move(outputs), inputs, *last_layer, weights_of(last_layer_bytes));
    if (!loss) {
      return {};
    }
    best.loss = std::move(*loss);
  }
  for (Gather* g : {&best.layers, &best.loss}) {
    if (g->bytes == 0) {
      *g = Gather{};
    }
  }
  return best;
}

std::optional<Gathers> GatherUnits::gather(int64_t stage, int64_t expert_rank) {
  // Without units placed on one rank every rank of a stage gathers alike.
  if (m_any_by_rank) {
    return best_pair(stage, expert_rank);
  }
  std::optional<Gathers>& cached = m_stage_gather[static_cast<size_t>(stage)];
  if (!cached) {
    cached = best_pair(stage, expert_rank);
  }
  return cached;
}

GatherUnit GatherUnits::describe(size_t unit,
                                 int64_t expert_rank,
                                 const std::vector<Tensor>& tensors,
                                 std::span<const NameFacts> names) const {
  const Unit& u = m_units[unit];
  GatherUnit out;
  out.layer = u.layer;
  const std::string_view name = tensors[u.first_tensor].name;
  const size_t prefix =
      u.layer ? names[u.first_tensor].layer_prefix_end : name.size();
  out.name = std::string(name.substr(0, prefix));
  out.bytes = bytes(u, expert_rank).value_or(0);  // checked
  return out;
}

}  // namespace shardplan::memory_detail
