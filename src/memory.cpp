#include <shardplan/memory.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <unordered_map>

namespace shardplan {

namespace {

struct RecipeName {
  Recipe recipe;
  std::string_view name;
};

constexpr std::array<RecipeName, 5> k_recipes{{
    {Recipe::params_only, "params-only"},
    {Recipe::adam, "adam"},
    {Recipe::adam_fp32_grads, "adam-fp32-grads"},
    {Recipe::adam_fp32_accum, "adam-fp32-accum"},
    {Recipe::scaling_book, "scaling-book"},
}};

// Accumulates int64 sums; remembers an overflow instead of wrapping.
class Sum {
 public:
  void add(int64_t value) {
    std::optional<int64_t> r = checked_add(m_value, value);
    if (r) {
      m_value = *r;
    } else {
      m_overflow = true;
    }
  }
  // Adds value x times.
  void add(int64_t value, int64_t times) {
    std::optional<int64_t> product = checked_mul(value, times);
    if (product) {
      add(*product);
    } else {
      m_overflow = true;
    }
  }
  int64_t value() const { return m_value; }
  bool overflow() const { return m_overflow; }

 private:
  int64_t m_value = 0;
  bool m_overflow = false;
};

// The last component of a tensor name ("." or "/" separated).
std::string_view last_component(std::string_view name) {
  const size_t cut = name.find_last_of("./");
  return cut == std::string_view::npos ? name : name.substr(cut + 1);
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size()
         && text.substr(text.size() - suffix.size()) == suffix;
}

// How a tensor takes part in training: it decides the tensor's cost
// together with its layout (shape, dtype, spec).
enum class Role : uint8_t {
  weight,         // trained (when the recipe trains)
  expert_weight,  // trained; expert axes are expert parallelism
  frozen,         // integer, bool: weights only
  scale,          // quantization scale kept: weights only, as stored
  dropped_scale,  // quantization scale folded into its dequantized weight
};
constexpr size_t k_roles = 5;

// The training state of `elements` elements of one tensor held in `held`
// (its param dtype), with ZeRO sharding the state over `zero_shards` more
// devices. `grad` is the gradients' dtype (nullopt: `held`).
std::optional<StateBytes> state_of(int64_t elements,
                                   DType held,
                                   bool trained,
                                   Recipe recipe,
                                   std::optional<DType> grad,
                                   int zero,
                                   int64_t zero_shards) {
  const int64_t sharded = ceil_div(elements, zero_shards);
  const int64_t params_e = zero >= 3 ? sharded : elements;
  const int64_t grads_e = zero >= 2 ? sharded : elements;
  const int64_t optimizer_e = zero >= 1 ? sharded : elements;
  StateBytes out;
  std::optional<int64_t> params = bytes_for(params_e, held);
  if (!params) {
    return std::nullopt;
  }
  out.params = *params;
  if (recipe == Recipe::params_only || !trained) {
    return out;
  }
  std::optional<int64_t> grads = int64_t{0};
  switch (recipe) {
    case Recipe::adam:
      grads = bytes_for(grads_e, grad.value_or(held));
      break;
    case Recipe::adam_fp32_grads:
      grads = bytes_for(grads_e, grad.value_or(DType::f32));
      break;
    case Recipe::adam_fp32_accum: {
      std::optional<int64_t> low = bytes_for(grads_e, grad.value_or(held));
      std::optional<int64_t> accum = checked_mul(grads_e, 4);
      grads = low && accum ? checked_add(*low, *accum) : std::nullopt;
      break;
    }
    case Recipe::scaling_book:
    case Recipe::params_only:
      break;
  }
  // fp32 Adam moments m and v; an fp32 master copy of narrower parameters
  // (not in the scaling book's count).
  int64_t per_element = 8;
  if (recipe != Recipe::scaling_book && dtype_bits(held) < 32) {
    per_element += 4;
  }
  std::optional<int64_t> optimizer = checked_mul(optimizer_e, per_element);
  // The step's update of the optimizer's shard, fp32: the temporary of one
  // leaf's fused Adam update (docs/memory.md, "Optimizer step").
  std::optional<int64_t> update = checked_mul(optimizer_e, 4);
  if (!grads || !optimizer || !update) {
    return std::nullopt;
  }
  out.update = *update;
  // Their sum too: model_states() adds them unchecked.
  std::optional<int64_t> sum = checked_add(out.params, *grads);
  if (!sum || !checked_add(*sum, *optimizer)) {
    return std::nullopt;
  }
  out.grads = *grads;
  out.optimizer = *optimizer;
  return out;
}

bool has_grads(Recipe recipe) {
  return recipe != Recipe::params_only && recipe != Recipe::scaling_book;
}

}  // namespace

bool is_quantization_scale(std::string_view name, DType dtype) {
  if (dtype == DType::f8_e8m0) {
    return true;
  }
  const std::string_view last = last_component(name);
  if (ends_with(last, "_scale_inv")) {
    return true;
  }
  constexpr std::array<std::string_view, 6> k_names{"weight_scale",
                                                    "weight_scale_2",
                                                    "input_scale",
                                                    "output_scale",
                                                    "k_scale",
                                                    "v_scale"};
  return std::find(k_names.begin(), k_names.end(), last) != k_names.end();
}

std::string_view scaled_weight_name(std::string_view name) {
  for (std::string_view suffix : {"_scale_inv", "_scale_2", "_scale"}) {
    if (ends_with(name, suffix)) {
      const std::string_view weight =
          name.substr(0, name.size() - suffix.size());
      return last_component(weight) == "weight" ? weight : std::string_view();
    }
  }
  return {};
}

bool is_expert_weight(const Tensor& tensor) {
  if (tensor.logical_axes) {
    for (const std::optional<std::string>& axis : *tensor.logical_axes) {
      if (axis && (*axis == "exp" || *axis == "expert" || *axis == "experts")) {
        return true;
      }
    }
  }
  std::string_view rest = tensor.name;
  while (!rest.empty()) {
    const size_t cut = rest.find_first_of("./");
    if (rest.substr(0, cut) == "experts") {
      return true;
    }
    if (cut == std::string_view::npos) {
      break;
    }
    rest.remove_prefix(cut + 1);
  }
  return false;
}

std::string_view to_string(Recipe recipe) {
  for (const RecipeName& r : k_recipes) {
    if (r.recipe == recipe) {
      return r.name;
    }
  }
  return "?";
}

std::optional<Recipe> parse_recipe(std::string_view text) {
  if (text == "megatron") {
    return Recipe::adam_fp32_grads;
  }
  for (const RecipeName& r : k_recipes) {
    if (r.name == text) {
      return r.recipe;
    }
  }
  return std::nullopt;
}

std::vector<std::string> recipe_names() {
  std::vector<std::string> out;
  for (const RecipeName& r : k_recipes) {
    out.emplace_back(r.name);
  }
  out.emplace_back("megatron");
  return out;
}

MemoryFacts memory_facts(const Manifest& manifest) {
  MemoryFacts out;
  const std::vector<Tensor>& tensors = manifest.tensors();
  out.names.reserve(tensors.size());
  out.kinds.reserve(tensors.size());
  out.scaled_dtype.reserve(tensors.size());
  for (const Tensor& tensor : tensors) {
    out.names.push_back(name_facts(tensor.name));
    std::optional<DType> scaled;
    MemoryFacts::Kind kind = MemoryFacts::Kind::weight;
    if (is_quantization_scale(tensor.name, tensor.dtype)) {
      kind = MemoryFacts::Kind::scale;
      const std::string_view weight_name = scaled_weight_name(tensor.name);
      if (const Tensor* weight =
              weight_name.empty() ? nullptr : manifest.find(weight_name)) {
        scaled = weight->dtype;
      }
    } else if (!is_floating(tensor.dtype)) {
      kind = MemoryFacts::Kind::frozen;
    } else if (is_expert_weight(tensor)) {
      kind = MemoryFacts::Kind::expert_weight;
    }
    out.kinds.push_back(kind);
    out.scaled_dtype.push_back(scaled);
  }
  return out;
}

std::optional<MemoryEstimate> estimate_memory(
    const Manifest& manifest,
    const Mesh& mesh,
    const std::vector<TensorSharding>& shardings,
    const MemoryOptions& options,
    Diagnostics& diags) {
  Diagnostics own[1];
  std::vector<std::optional<MemoryEstimate>> out =
      estimate_memory(manifest,
                      mesh,
                      shardings,
                      options,
                      {&options.activations, 1},
                      diags,
                      own);
  for (const Diagnostic& d : own[0].items()) {
    diags.add(d);
  }
  if (out.empty()) {
    return std::nullopt;
  }
  return std::move(out[0]);
}

std::vector<std::optional<MemoryEstimate>> estimate_memory(
    const Manifest& manifest,
    const Mesh& mesh,
    const std::vector<TensorSharding>& shardings,
    const MemoryOptions& options,
    std::span<const std::vector<ActivationLoad>> activations,
    Diagnostics& diags,
    std::span<Diagnostics> activation_diags) {
  assert(activation_diags.size() == activations.size());
  assert(shardings.size() == manifest.size());
  assert(options.zero >= 0 && options.zero <= 3);
  assert(options.headroom >= 0 && options.headroom < 1);
  MemoryEstimate out;
  out.recipe = options.recipe;
  out.zero = options.zero;
  out.headroom = options.headroom;
  out.hbm_bytes = options.hbm_bytes;

  // A dtype to hold weights or gradients in must be floating point.
  bool bad_dtype = false;
  auto check_dtype = [&](std::optional<DType> dtype,
                         const std::string& source) {
    if (dtype && (!is_floating(*dtype) || *dtype == DType::f8_e8m0)) {
      diags
          .error("memory.dtype",
                 fmt::format("{} is not a floating-point dtype weights or "
                             "gradients are trained in",
                             quote(to_string(*dtype))),
                 Location::of(source))
          .hint = "e.g. f32, bf16, f16 or f8_e4m3";
      bad_dtype = true;
    }
  };
  check_dtype(options.param_dtype, options.param_dtype_source);
  check_dtype(options.grad_dtype, options.grad_dtype_source);
  if (bad_dtype) {
    return {};
  }

  // The data axes: --data-axes as given, else the data role's (mesh order).
  if (!options.data_axes.empty()) {
    std::vector<std::string> names = mesh.axis_names();
    for (const std::string& name : options.data_axes) {
      if (mesh.find(name) == nullptr) {
        Diagnostic& d = diags.error(
            "memory.data-axis",
            fmt::format("data axis {} is not an axis of the mesh {}",
                        quote(name),
                        to_string(mesh)),
            Location::of(options.data_axes_source));
        std::string best = closest_match(name, names);
        d.hint = best.empty() ? fmt::format("the mesh's axes are {}",
                                            fmt::join(names, ", "))
                              : fmt::format("did you mean {}?", quote(best));
        return {};
      }
      if (std::find(out.data_axes.begin(), out.data_axes.end(), name)
          == out.data_axes.end()) {
        out.data_axes.push_back(name);
      }
    }
  }
  // The roles of the axes: the caller's, or by name with the data axes
  // given (which cannot fail: they are the mesh's, and no other role is
  // given).
  std::optional<AxisRoles> resolved = options.roles;
  if (!resolved) {
    AxisRoles given;
    given.data = out.data_axes;
    AxisRoleSources sources;
    sources.data = options.data_axes_source;
    resolved = resolve_axis_roles(mesh, given, sources, diags);
    if (!resolved) {
      return {};
    }
  }
  const AxisRoles& roles = *resolved;
  if (options.data_axes.empty()) {
    for (const std::string& name : roles.data) {
      if (mesh.find(name) != nullptr) {
        out.data_axes.push_back(name);
      }
    }
  }
  for (const std::string& name : out.data_axes) {
    out.zero_shards *= mesh.find(name)->size;
  }
  if (options.zero > 0 && out.zero_shards == 1) {
    Diagnostic& d = diags.warning(
        "memory.zero-no-effect",
        out.data_axes.empty()
            ? fmt::format("{} {} shards nothing: the mesh {} has no data "
                          "axis (by name: dp, data, fsdp, fsdp_transpose)",
                          options.zero_source,
                          options.zero,
                          to_string(mesh))
            : fmt::format("{} {} shards nothing: the data axes ({}) have "
                          "size 1",
                          options.zero_source,
                          options.zero,
                          fmt::join(out.data_axes, ", ")),
        Location::of(options.zero_source));
    d.hint = fmt::format("name the data-parallel axes with {}",
                         options.data_axes_source);
  }

  // What each tensor's name says: its layer, its expert, an embedding; its
  // kind.
  const std::vector<Tensor>& tensors = manifest.tensors();
  std::optional<MemoryFacts> own_facts;
  if (options.facts == nullptr) {
    own_facts = memory_facts(manifest);
  }
  const MemoryFacts& facts = own_facts ? *own_facts : *options.facts;
  assert(facts.names.size() == tensors.size());
  const std::vector<NameFacts>& name_info = facts.names;

  // Where tensors live along the stage and expert axes.
  {
    const PlacementOptions placement{roles.stage,
                                     roles.expert,
                                     options.layers,
                                     options.experts,
                                     options.stage_axes_source,
                                     options.expert_axes_source};
    std::optional<Placement> placed =
        place_tensors(manifest, mesh, shardings, placement, name_info, diags);
    if (!placed) {
      return {};
    }
    out.placement = std::move(*placed);
  }
  const Placement& placement = out.placement;
  const int64_t stages = placement.stages;
  const int64_t ranks = placement.expert_ranks;

  auto is_data = [&](const std::string& axis) {
    return std::find(out.data_axes.begin(), out.data_axes.end(), axis)
           != out.data_axes.end();
  };
  auto listed = [](const std::vector<std::string>& list,
                   const std::string& axis) {
    return std::find(list.begin(), list.end(), axis) != list.end();
  };

  const bool training = options.recipe != Recipe::params_only;
  // The dtype a trained tensor stored as `stored` is held in.
  auto held_dtype = [&](DType stored) {
    if (options.param_dtype) {
      return *options.param_dtype;
    }
    return training && is_fp8(stored) ? DType::bf16 : stored;
  };
  out.param_dtype = options.param_dtype;
  out.grads_counted = has_grads(options.recipe);
  if (out.grads_counted) {
    out.grad_dtype = options.grad_dtype;
    if (!out.grad_dtype && options.recipe == Recipe::adam_fp32_grads) {
      out.grad_dtype = DType::f32;
    }
  } else if (options.grad_dtype) {
    diags
        .warning("memory.grad-dtype-unused",
                 fmt::format("{} {} has no effect: recipe {} counts no "
                             "gradients",
                             options.grad_dtype_source,
                             to_string(*options.grad_dtype),
                             to_string(options.recipe)),
                 Location::of(options.grad_dtype_source))
        .hint =
        "recipes with gradients: adam, adam-fp32-grads (megatron), "
        "adam-fp32-accum";
  }

  // Each tensor's role. A scale is dropped when the FP8 weight it scales is
  // held in a dtype other than FP8: dequantized, the weight needs it no more
  // (DeepSeek-V3's inference/fp8_cast_bf16.py drops every *_scale_inv).
  auto role_of = [&](size_t t) {
    switch (facts.kinds[t]) {
      case MemoryFacts::Kind::scale: {
        const std::optional<DType>& weight = facts.scaled_dtype[t];
        return weight && is_fp8(*weight) && !is_fp8(held_dtype(*weight))
                   ? Role::dropped_scale
                   : Role::scale;
      }
      case MemoryFacts::Kind::frozen:
        return Role::frozen;
      case MemoryFacts::Kind::expert_weight:
        return Role::expert_weight;
      case MemoryFacts::Kind::weight:
        break;
    }
    return Role::weight;
  };

  // The axes a matmul keeps a weight split over (tensor and pipeline
  // parallelism; expert parallelism for an expert weight): the others its
  // spec splits it over are gathered at use (FSDP).
  auto kept = [&](const std::string& axis, Role role) {
    return listed(roles.tensor, axis) || listed(roles.stage, axis)
           || (role == Role::expert_weight && listed(roles.expert, axis));
  };
  // The axes a tensor is gathered over at use, in spec order, then the
  // ZeRO-3 data axes.
  // The product of the data axes a tensor's spec leaves free: what ZeRO
  // shards its state over.
  auto free_data_of = [&](const PartitionSpec* spec) {
    int64_t free_data = out.zero_shards;
    if (spec) {
      for (const DimSharding& dim : spec->dims) {
        for (const std::string& axis : dim.axes) {
          if (is_data(axis)) {
            free_data /= mesh.find(axis)->size;
          }
        }
      }
    }
    return free_data;
  };
  auto gather_axes_of = [&](const TensorSharding& s, Role role) {
    std::vector<std::string> axes;
    const PartitionSpec* spec = s.spec();
    if (spec) {
      for (const DimSharding& dim : spec->dims) {
        for (const std::string& axis : dim.axes) {
          if (!kept(axis, role) && mesh.find(axis)->size > 1) {
            axes.push_back(axis);
          }
        }
      }
    }
    if (options.zero >= 3 && free_data_of(spec) > 1) {
      for (const std::string& axis : out.data_axes) {
        if (!listed(axes, axis) && mesh.find(axis)->size > 1
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
  };

  // What a tensor costs follows from its layout (spec, shape, dtype) and its
  // role: computed once per pair (a plan's layers and experts share a few).
  struct Cost {
    DType held = DType::f32;
    StateBytes state;
    StateBytes min_state;
    int64_t gather_buffer = 0;  // when used gathered: params (+ grads)
  };
  // Per mesh axis: the spec of some tensor held splits it over the axis.
  std::vector<bool> split(mesh.axes.size(), false);
  auto cost_of = [&](const TensorSharding& s,
                     const Tensor& tensor,
                     Role role) -> std::optional<Cost> {
    Cost cost;
    if (role == Role::dropped_scale) {
      return cost;  // nothing held
    }
    const bool trained = role == Role::weight || role == Role::expert_weight;
    cost.held = trained ? held_dtype(tensor.dtype) : tensor.dtype;
    // ZeRO shards over the data axes the spec leaves free.
    const PartitionSpec* spec = s.spec();
    if (spec) {
      for (const DimSharding& dim : spec->dims) {
        for (const std::string& axis : dim.axes) {
          split[static_cast<size_t>(mesh.index_of(axis))] = true;
        }
      }
    }
    const int64_t free_data = free_data_of(spec);
    std::optional<StateBytes> state = state_of(s.elements_per_device(),
                                               cost.held,
                                               trained,
                                               options.recipe,
                                               out.grad_dtype,
                                               options.zero,
                                               free_data);
    std::optional<StateBytes> min_state = state_of(s.min_elements_per_device(),
                                                   cost.held,
                                                   trained,
                                                   options.recipe,
                                                   out.grad_dtype,
                                                   options.zero,
                                                   free_data);
    if (!state || !min_state) {
      return {};
    }
    cost.state = *state;
    cost.min_state = *min_state;
    if (!gather_axes_of(s, role).empty()) {
      // Gathered: every dim split only over the axes kept.
      int64_t elements = 1;
      for (size_t d = 0; d < tensor.shape.size() && elements > 0; ++d) {
        int64_t shards = 1;
        if (spec && d < spec->dims.size()) {
          for (const std::string& axis : spec->dims[d].axes) {
            if (kept(axis, role)) {
              shards *= mesh.find(axis)->size;
            }
          }
        }
        elements *= ceil_div(tensor.shape[d], shards);  // <= dim
      }
      std::optional<int64_t> bytes = bytes_for(elements, cost.held);
      if (!bytes) {
        return {};
      }
      const int64_t copies = has_grads(options.recipe) && trained ? 2 : 1;
      std::optional<int64_t> gathered = checked_mul(*bytes, copies);
      if (!gathered) {
        return {};
      }
      cost.gather_buffer = *gathered;
    }
    return cost;
  };
  std::unordered_map<const ShardLayout*,
                     std::array<std::optional<Cost>, k_roles>>
      costs;

  // The units FSDP gathers one at a time, in execution order: each input
  // embedding of no layer, each layer by index, each other tensor of no
  // layer (docs/memory.md, "Gather buffer").
  std::vector<int64_t> layer_ids;
  size_t embeddings = 0;
  size_t others = 0;
  // An embedding of no layer comes first; one of a layer (DeepSeek-V3's MTP
  // embed_tokens) is its layer's.
  auto is_embedding = [&](size_t t) {
    return !name_info[t].layer && name_info[t].embedding;
  };
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (name_info[t].layer) {
      // A layer's tensors mostly come together: keep the list short.
      if (layer_ids.empty() || layer_ids.back() != *name_info[t].layer) {
        layer_ids.push_back(*name_info[t].layer);
      }
    } else if (is_embedding(t)) {
      ++embeddings;
    } else {
      ++others;
    }
  }
  std::sort(layer_ids.begin(), layer_ids.end());
  layer_ids.erase(std::unique(layer_ids.begin(), layer_ids.end()),
                  layer_ids.end());
  struct Unit {
    size_t first_tensor = 0;
    std::optional<int64_t> layer;
    int64_t stage = k_every;
    bool started = false;
    Sum common;  // its tensors on every expert rank
    // Its tensors placed on one rank: (rank, bytes), by rank; only the
    // ranks it has tensors on (a layer's experts cover a few).
    std::vector<std::pair<int64_t, Sum>> by_rank;
  };
  std::vector<Unit> units(embeddings + layer_ids.size() + others);
  std::vector<size_t> unit_of(tensors.size());
  {
    size_t next_embedding = 0;
    size_t next_other = embeddings + layer_ids.size();
    for (size_t t = 0; t < tensors.size(); ++t) {
      if (const std::optional<int64_t>& layer = name_info[t].layer) {
        unit_of[t] =
            embeddings
            + static_cast<size_t>(
                std::lower_bound(layer_ids.begin(), layer_ids.end(), *layer)
                - layer_ids.begin());
      } else if (is_embedding(t)) {
        unit_of[t] = next_embedding++;
      } else {
        unit_of[t] = next_other++;
      }
      Unit& unit = units[unit_of[t]];
      const int64_t stage =
          placement.placed() ? placement.tensors[t].stage : k_every;
      if (!unit.started) {
        unit.started = true;
        unit.first_tensor = t;
        unit.layer = name_info[t].layer;
        unit.stage = stage;
      } else if (unit.stage != stage) {
        unit.stage = k_every;  // its tensors live on different stages
      }
    }
  }

  // Per-device sums of the tensors of each bucket: those on every group
  // (bucket 0), on one stage and every rank (1 + s), on every stage and one
  // rank (1 + S + r), on one group (1 + S + R + s x R + r). A group's
  // devices hold the sum of its four buckets.
  struct Totals {
    Sum params, grads, optimizer, min_states;
    int64_t update = 0;  // the largest of its tensors' StateBytes::update
  };
  assert(!activations.empty());
  for (const std::vector<ActivationLoad>& loads : activations) {
    assert(loads.size() <= 1 || loads.size() == static_cast<size_t>(stages));
    (void)loads;
  }
  const size_t groups = static_cast<size_t>(stages * ranks);
  std::vector<Totals> buckets(static_cast<size_t>(1 + stages + ranks)
                              + (placement.placed() ? groups : 0));
  auto bucket_of = [&](const TensorPlacement& p) -> size_t {
    if (p.stage == k_every && p.expert_rank == k_every) {
      return 0;
    }
    if (p.expert_rank == k_every) {
      return static_cast<size_t>(1 + p.stage);
    }
    if (p.stage == k_every) {
      return static_cast<size_t>(1 + stages + p.expert_rank);
    }
    return static_cast<size_t>(1 + stages + ranks + p.stage * ranks
                               + p.expert_rank);
  };

  // Per tensor, what the most loaded group's lists need: counted as the
  // tensors come without placement (one group holds them all), else once
  // the group is known.
  struct Record {
    StateBytes state;
    DType held = DType::f32;
    int64_t count = 1;  // the tensors it stands for (MemoryFacts::counts)
    bool dropped = false;
    bool uneven = false;
  };
  std::vector<Record> records(placement.placed() ? tensors.size() : 0);
  // The `largest` tensors by model states (manifest order breaks ties),
  // kept as a heap whose top is the least of them; params by dtype.
  auto larger = [](const TensorMemory& a, const TensorMemory& b) {
    if (a.per_device.model_states() != b.per_device.model_states()) {
      return a.per_device.model_states() > b.per_device.model_states();
    }
    return a.tensor < b.tensor;
  };
  std::vector<TensorMemory> largest;
  largest.reserve(options.largest);
  auto account = [&](MemoryEstimate& est,
                     std::vector<TensorMemory>& heap,
                     size_t t,
                     const Record& record) {
    if (options.largest > 0) {
      const TensorMemory entry{t, record.state};
      if (heap.size() < options.largest) {
        heap.push_back(entry);
        std::push_heap(heap.begin(), heap.end(), larger);
      } else if (larger(entry, heap.front())) {
        std::pop_heap(heap.begin(), heap.end(), larger);
        heap.back() = entry;
        std::push_heap(heap.begin(), heap.end(), larger);
      }
    }
    est.uneven_tensors += record.uneven ? record.count : 0;
    if (record.dropped) {
      return;  // not held
    }
    auto dtype_it = std::find_if(
        est.by_dtype.begin(), est.by_dtype.end(), [&](const DtypeMemory& m) {
          return m.dtype == record.held;
        });
    if (dtype_it == est.by_dtype.end()) {
      est.by_dtype.push_back(DtypeMemory{record.held, 0, 0});
      dtype_it = est.by_dtype.end() - 1;
    }
    dtype_it->tensors += record.count;
    // A part of the group's params, whose sum was checked: no overflow.
    dtype_it->params_per_device += record.state.params * record.count;
  };

  bool overflow = false;
  bool any_by_rank = false;  // some unit has tensors placed on one rank
  for (size_t t = 0; t < shardings.size(); ++t) {
    const TensorSharding& s = shardings[t];
    const Tensor& tensor = tensors[t];
    const Role role = role_of(t);
    const int64_t count = facts.count(t);  // the tensors it stands for
    if (role == Role::scale || role == Role::dropped_scale) {
      out.scale_tensors += count;
      out.dropped_scale_tensors += role == Role::dropped_scale ? count : 0;
    } else if (is_fp8(tensor.dtype) && !out.fp8_param_dtype) {
      out.fp8_param_dtype = held_dtype(tensor.dtype);  // FP8 is trainable
    }
    std::optional<Cost> computed;
    const Cost* cost = nullptr;
    // A layout no other tensor holds (check's specs give each tensor its
    // own) is computed directly: remembering it could never pay.
    if (s.layout.use_count() > 1) {
      std::optional<Cost>& slot =
          costs[s.layout.get()][static_cast<size_t>(role)];
      if (!slot) {
        slot = cost_of(s, tensor, role);
      }
      cost = slot ? &*slot : nullptr;
    } else {
      computed = cost_of(s, tensor, role);
      cost = computed ? &*computed : nullptr;
    }
    if (!cost) {
      overflow = true;
      break;
    }
    const TensorPlacement where =
        placement.placed() ? placement.tensors[t] : TensorPlacement{};
    Totals& bucket = buckets[bucket_of(where)];
    bucket.params.add(cost->state.params, count);
    bucket.grads.add(cost->state.grads, count);
    bucket.optimizer.add(cost->state.optimizer, count);
    bucket.min_states.add(cost->min_state.model_states(), count);
    bucket.update = std::max(bucket.update, cost->state.update);
    const Record record{cost->state,
                        cost->held,
                        count,
                        role == Role::dropped_scale,
                        s.min_bytes_per_device() != s.bytes_per_device()};
    if (placement.placed()) {
      records[t] = record;
    } else {
      account(out, largest, t, record);
    }
    if (cost->gather_buffer > 0) {
      Unit& unit = units[unit_of[t]];
      if (where.expert_rank == k_every) {
        unit.common.add(cost->gather_buffer, count);
      } else {
        auto at = std::lower_bound(unit.by_rank.begin(),
                                   unit.by_rank.end(),
                                   where.expert_rank,
                                   [](const std::pair<int64_t, Sum>& e,
                                      int64_t r) { return e.first < r; });
        if (at == unit.by_rank.end() || at->first != where.expert_rank) {
          at = unit.by_rank.insert(at, {where.expert_rank, Sum{}});
        }
        at->second.add(cost->gather_buffer, count);
        any_by_rank = true;
      }
    }
  }
  for (const Unit& unit : units) {
    overflow = overflow || unit.common.overflow();
    for (const auto& [rank, sum] : unit.by_rank) {
      overflow = overflow || sum.overflow();
    }
  }
  for (const Totals& b : buckets) {
    overflow = overflow || b.params.overflow() || b.grads.overflow()
               || b.optimizer.overflow() || b.min_states.overflow();
  }
  for (size_t a = 0; a < mesh.axes.size(); ++a) {
    if (split[a]) {
      out.split_axes.push_back(mesh.axes[a].name);
    }
  }
  auto overflow_error = [&](Diagnostics& to) {
    to.error("memory.overflow",
             "the per-device memory does not fit in a 64-bit byte count",
             Location::of(manifest.source));
  };
  if (overflow) {
    overflow_error(diags);
    return {};
  }

  // The gather buffer of group (s, r): the largest sum of two consecutive
  // units its devices hold (one unit when they hold one), and those units.
  struct Gather {
    int64_t bytes = 0;
    size_t first = 0;
    size_t count = 0;  // 0, 1 or 2 units
  };
  // A unit's bytes on rank r's devices.
  auto unit_bytes = [&](const Unit& unit, int64_t r) -> std::optional<int64_t> {
    auto at = std::lower_bound(unit.by_rank.begin(),
                               unit.by_rank.end(),
                               r,
                               [](const std::pair<int64_t, Sum>& e, int64_t x) {
                                 return e.first < x;
                               });
    if (at == unit.by_rank.end() || at->first != r) {
      return unit.common.value();
    }
    return checked_add(unit.common.value(), at->second.value());
  };
  // The units each stage holds, in order (every unit on stage 0 without
  // stage axes).
  std::vector<std::vector<size_t>> stage_units(static_cast<size_t>(stages));
  for (size_t u = 0; u < units.size(); ++u) {
    for (int64_t st = 0; st < stages; ++st) {
      if (units[u].started
          && (units[u].stage == k_every || units[u].stage == st)) {
        stage_units[static_cast<size_t>(st)].push_back(u);
      }
    }
  }
  auto gather_of = [&](int64_t s, int64_t r) -> std::optional<Gather> {
    Gather best;
    std::optional<size_t> previous;
    int64_t previous_bytes = 0;
    for (size_t u : stage_units[static_cast<size_t>(s)]) {
      std::optional<int64_t> bytes = unit_bytes(units[u], r);
      if (!bytes) {
        return {};
      }
      if (!previous) {
        best = Gather{*bytes, u, 1};
      } else {
        std::optional<int64_t> pair = checked_add(previous_bytes, *bytes);
        if (!pair) {
          return {};
        }
        if (best.count < 2 || *pair > best.bytes) {
          best = Gather{*pair, *previous, 2};
        }
      }
      previous = u;
      previous_bytes = *bytes;
    }
    if (best.bytes == 0) {
      return Gather{};
    }
    return best;
  };
  // Without units placed on one rank every rank of a stage gathers alike:
  // computed once per stage.
  std::vector<std::optional<Gather>> stage_gather(static_cast<size_t>(stages));
  auto gather_for = [&](int64_t s, int64_t r) -> std::optional<Gather> {
    if (any_by_rank) {
      return gather_of(s, r);
    }
    std::optional<Gather>& cached = stage_gather[static_cast<size_t>(s)];
    if (!cached) {
      cached = gather_of(s, r);
    }
    return cached;
  };

  // The estimate with one set of activations: the model state above is
  // the same for each.
  auto finish = [&](const std::vector<ActivationLoad>& loads,
                    Diagnostics& found) -> std::optional<MemoryEstimate> {
    MemoryEstimate est = out;
    std::vector<TensorMemory> heap = largest;
    // Each group's memory; the most loaded one (stage-major order breaks
    // ties).
    auto group_memory =
        [&](int64_t s,
            int64_t r) -> std::optional<std::pair<GroupMemory, Gather>> {
      GroupMemory g;
      g.stage = s;
      g.expert_rank = r;
      Sum params, grads, optimizer, min_states;
      int64_t update = 0;
      auto add = [&](const Totals& b) {
        params.add(b.params.value());
        grads.add(b.grads.value());
        optimizer.add(b.optimizer.value());
        min_states.add(b.min_states.value());
        update = std::max(update, b.update);
      };
      add(buckets[0]);
      if (placement.placed()) {
        add(buckets[static_cast<size_t>(1 + s)]);
        add(buckets[static_cast<size_t>(1 + stages + r)]);
        add(buckets[static_cast<size_t>(1 + stages + ranks + s * ranks + r)]);
      }
      std::optional<Gather> gather = gather_for(s, r);
      if (!gather) {
        return {};
      }
      g.per_device =
          StateBytes{params.value(), grads.value(), optimizer.value()};
      g.gather_buffer = gather->bytes;
      if (!loads.empty()) {
        const ActivationLoad& a =
            loads[loads.size() == 1 ? 0 : static_cast<size_t>(s)];
        g.activations = a.hbm_bytes;
        g.host_offload = a.host_bytes;
      }
      g.optimizer_step = update;
      // The step runs after the backward has freed the gather buffer and the
      // activations: the peak is the larger of the two phases.
      Sum backward;
      backward.add(gather->bytes);
      backward.add(g.activations);
      const int64_t transient = std::max(backward.value(), update);
      Sum total, min_total;
      total.add(params.value());
      total.add(grads.value());
      total.add(optimizer.value());
      total.add(transient);
      min_total.add(min_states.value());
      min_total.add(transient);
      if (params.overflow() || grads.overflow() || optimizer.overflow()
          || min_states.overflow() || backward.overflow() || total.overflow()
          || min_total.overflow()) {
        return {};
      }
      g.total = total.value();
      g.min_total = min_total.value();
      return std::make_pair(g, *gather);
    };
    std::optional<std::pair<GroupMemory, Gather>> most;
    for (int64_t s = 0; s < stages; ++s) {
      std::optional<GroupMemory> stage_most;
      for (int64_t r = 0; r < ranks; ++r) {
        std::optional<std::pair<GroupMemory, Gather>> g = group_memory(s, r);
        if (!g) {
          overflow_error(found);
          return {};
        }
        if (!stage_most || g->first.total > stage_most->total) {
          stage_most = g->first;
        }
        if (!most || g->first.total > most->first.total) {
          most = std::move(g);
        }
      }
      if (placement.placed()) {
        est.stages.push_back(*stage_most);
      }
    }
    assert(most);
    const GroupMemory& group = most->first;
    const Gather& gather = most->second;
    est.stage = group.stage;
    est.expert_rank = group.expert_rank;
    est.per_device = group.per_device;
    est.gather_buffer = group.gather_buffer;
    est.activations_counted = !loads.empty();
    est.activations = group.activations;
    est.optimizer_step = group.optimizer_step;
    est.host_offload = group.host_offload;
    est.max_device_total = group.total;
    est.min_device_total = group.min_total;

    // A tensor the most loaded group holds.
    auto in_group = [&](size_t t) {
      if (!placement.placed()) {
        return true;
      }
      const TensorPlacement& p = placement.tensors[t];
      return (p.stage == k_every || p.stage == group.stage)
             && (p.expert_rank == k_every
                 || p.expert_rank == group.expert_rank);
    };

    // The gather buffer's units, and the axes their tensors are gathered over.
    for (size_t u = gather.first; u < gather.first + gather.count; ++u) {
      const Unit& unit = units[u];
      GatherUnit g;
      g.layer = unit.layer;
      const std::string_view name = tensors[unit.first_tensor].name;
      const size_t prefix = unit.layer
                                ? name_info[unit.first_tensor].layer_prefix_end
                                : name.size();
      g.name = std::string(name.substr(0, prefix));
      g.bytes = unit_bytes(unit, group.expert_rank).value_or(0);  // checked
      est.gather_units.push_back(std::move(g));
    }
    if (gather.count > 0) {
      std::vector<bool> gathered(mesh.axes.size(), false);
      for (size_t t = 0; t < tensors.size(); ++t) {
        if (unit_of[t] < gather.first
            || unit_of[t] >= gather.first + gather.count || !in_group(t)) {
          continue;
        }
        for (const std::string& axis :
             gather_axes_of(shardings[t], role_of(t))) {
          gathered[static_cast<size_t>(mesh.index_of(axis))] = true;
        }
      }
      for (size_t a = 0; a < mesh.axes.size(); ++a) {
        if (gathered[a]) {
          est.gather_axes.push_back(mesh.axes[a].name);
        }
      }
    }

    if (placement.placed()) {
      for (size_t t = 0; t < tensors.size(); ++t) {
        if (in_group(t)) {
          account(est, heap, t, records[t]);
        }
      }
    }
    std::sort_heap(heap.begin(), heap.end(), larger);
    est.largest = std::move(heap);

    // Where the estimate is, for the messages below.
    const std::string where =
        !placement.placed()       ? std::string()
        : stages > 1 && ranks > 1 ? fmt::format(
              " of stage {}, expert rank {}", est.stage, est.expert_rank)
        : stages > 1 ? fmt::format(" of stage {}", est.stage)
                     : fmt::format(" of expert rank {}", est.expert_rank);
    if (est.min_device_total != est.max_device_total) {
      Diagnostic& d = found.warning(
          "memory.uneven",
          placement.placed()
              ? fmt::format("devices{} hold different amounts: the most loaded "
                            "{} bytes, the least {} bytes ({} tensor{} with "
                            "uneven shards)",
                            where,
                            est.max_device_total,
                            est.min_device_total,
                            est.uneven_tensors,
                            est.uneven_tensors == 1 ? "" : "s")
              : fmt::format(
                  "devices hold different amounts: device 0 {} bytes, "
                  "the last device {} bytes ({} tensor{} with uneven "
                  "shards)",
                  est.max_device_total,
                  est.min_device_total,
                  est.uneven_tensors,
                  est.uneven_tensors == 1 ? "" : "s"));
      d.hint = "the estimate is for the most loaded device";
    }

    if (est.hbm_bytes) {
      const double hbm = static_cast<double>(*est.hbm_bytes);
      est.capacity_bytes =
          static_cast<int64_t>(std::floor(hbm * (1.0 - est.headroom)));
      est.utilization = static_cast<double>(est.max_device_total) / hbm;
      est.fits = est.max_device_total <= *est.capacity_bytes;
      if (!*est.fits) {
        Diagnostic& d = found.error(
            "memory.over-capacity",
            fmt::format("the most loaded device{} needs {} bytes, over the {} "
                        "bytes usable ({} bytes of HBM with {:g}% kept free)",
                        where,
                        est.max_device_total,
                        *est.capacity_bytes,
                        *est.hbm_bytes,
                        est.headroom * 100),
            Location::of(options.hbm_source));
        d.hint = est.activations > est.per_device.model_states() ? fmt::format(
                     "activations are {} bytes of it: keep less per layer (a "
                     "remat policy that saves less), run fewer sequences at a "
                     "time (more microbatches), or split the tokens further "
                     "(sequence parallelism, a sequence axis)",
                     est.activations)
                 : est.zero < 3 && has_grads(est.recipe)
                     ? fmt::format(
                         "shard further: more fsdp, {} 3, or a larger "
                         "slice",
                         options.zero_source)
                     : std::string(
                         "shard further (more fsdp or tp) or use a "
                         "larger slice");
      }
    }
    return est;
  };
  std::vector<std::optional<MemoryEstimate>> results;
  results.reserve(activations.size());
  for (size_t v = 0; v < activations.size(); ++v) {
    results.push_back(finish(activations[v], activation_diags[v]));
  }
  return results;
}

}  // namespace shardplan
