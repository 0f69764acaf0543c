// The training state per recipe and dtype (docs/memory.md, "Recipes"): the
// recipes' names, state_of, and what a tensor's name and dtype say about
// it: quantization scales, expert weights, memory_facts.

#include "memory/internal.hpp"

#include <algorithm>
#include <array>

namespace shardplan {

namespace {

constexpr std::array<Named<Optimizer>, 4> k_optimizers{{
    {Optimizer::adamw, "adamw"},
    {Optimizer::adafactor, "adafactor"},
    {Optimizer::sgd, "sgd"},
    {Optimizer::muon, "muon"},
}};

constexpr std::array<Named<Recipe>, 5> k_recipes{{
    {Recipe::params_only, "params-only"},
    {Recipe::adam, "adam"},
    {Recipe::adam_fp32_grads, "adam-fp32-grads"},
    {Recipe::adam_fp32_accum, "adam-fp32-accum"},
    {Recipe::scaling_book, "scaling-book"},
}};

// The last component of a tensor name ("." or "/" separated).
std::string_view last_component(std::string_view name) {
  const size_t cut = name.find_last_of("./");
  return cut == std::string_view::npos ? name : name.substr(cut + 1);
}

}  // namespace

namespace memory_detail {

int64_t optimizer_bytes(const OptimizerState& state, DType held, bool matrix) {
  const auto bytes = [&](std::optional<DType> dtype) {
    return int64_t{dtype_bits(dtype.value_or(held)) / 8};
  };
  int64_t moments = 0;
  switch (state.optimizer) {
    case Optimizer::adamw:
      moments = bytes(state.mu) + bytes(state.nu);
      break;
    case Optimizer::adafactor:
      moments = matrix ? 0 : bytes(state.nu);
      break;
    case Optimizer::sgd:
      break;
    case Optimizer::muon:
      moments = matrix ? bytes(state.mu) : bytes(state.mu) + bytes(state.nu);
      break;
  }
  const bool master = state.master && dtype_bits(held) < 32;
  return moments + (master ? 4 : 0);
}

std::optional<StateBytes> state_of(int64_t elements,
                                   DType held,
                                   bool trained,
                                   Recipe recipe,
                                   const OptimizerState& state,
                                   bool matrix,
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
  const int64_t per_element = optimizer_bytes(state, held, matrix);
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

}  // namespace memory_detail

bool is_quantization_scale(std::string_view name, DType dtype) {
  if (dtype == DType::f8_e8m0) {
    return true;
  }
  const std::string_view last = last_component(name);
  if (last.ends_with("_scale_inv")) {
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
    if (name.ends_with(suffix)) {
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

std::string_view to_string(Optimizer optimizer) {
  return name_in(k_optimizers, optimizer);
}

std::optional<Optimizer> parse_optimizer(std::string_view text) {
  return value_in(k_optimizers, text);
}

std::vector<std::string> optimizer_names() {
  return names_in(k_optimizers);
}

std::string_view to_string(Recipe recipe) {
  return name_in(k_recipes, recipe);
}

std::optional<Recipe> parse_recipe(std::string_view text) {
  if (text == "megatron") {
    return Recipe::adam_fp32_grads;
  }
  return value_in(k_recipes, text);
}

std::vector<std::string> recipe_names() {
  std::vector<std::string> out = names_in(k_recipes);
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

}  // namespace shardplan
