// `shardplan search` (include/shardplan/search.hpp; docs/search.md).

#include <shardplan/mesh.hpp>
#include <shardplan/search.hpp>
#include <shardplan/validate.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace shardplan {

namespace {

bool has_name(const std::vector<std::string>& names, const std::string& n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

// The first error of `diags`, without its location, for a dropped
// candidate's message.
std::string first_error(const Diagnostics& diags) {
  for (const Diagnostic& d : diags.items()) {
    if (d.severity == Severity::error) {
      return d.message;
    }
  }
  return {};
}

// The message of the first diagnostic of `diags` with `code`.
std::string first_of(const Diagnostics& diags, std::string_view code) {
  for (const Diagnostic& d : diags.items()) {
    if (d.code == code) {
      return d.message;
    }
  }
  return {};
}

// One mesh: axis sizes in options.axes order (within a slice), and the
// slices' factors over the DCN axes.
struct MeshChoice {
  std::string mesh;
  std::string dcn;
  const Topology* topology = nullptr;  // the slice it is laid out on
};

// Every way to write `n` as a product of `count` factors, in order (the
// first factor varies slowest), each factor passing `allowed(i, factor)`.
std::vector<std::vector<int64_t>> factorisations(
    int64_t n,
    size_t count,
    const std::function<bool(size_t, int64_t)>& allowed) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> sizes(count, 1);
  std::function<void(size_t, int64_t)> assign = [&](size_t i,
                                                    int64_t remaining) {
    if (i == count) {
      if (remaining == 1) {
        out.push_back(sizes);
      }
      return;
    }
    if (i + 1 == count) {
      if (allowed(i, remaining)) {
        sizes[i] = remaining;
        out.push_back(sizes);
      }
      return;
    }
    for (int64_t d = 1; d <= remaining; ++d) {
      if (remaining % d == 0 && allowed(i, d)) {
        sizes[i] = d;
        assign(i + 1, remaining / d);
      }
    }
  };
  assign(0, n);
  return out;
}

std::vector<MeshChoice> enumerate_meshes(
    const ModelConfig& model,
    const Topology& topology,
    const std::vector<std::string>& axes,
    const std::vector<std::string>& dcn_axes) {
  const int64_t slices =
      topology.kind == TopologyKind::tpu ? topology.tpu.num_slices : 1;
  const int64_t per_slice = topology.devices() / slices;
  auto allowed = [&](const std::string& axis, int64_t size) {
    if (size == 1) {
      return true;
    }
    if (has_default_role(AxisRole::tensor, axis)) {
      return model.heads % size == 0;
    }
    if (has_default_role(AxisRole::expert, axis)) {
      return model.experts > 0 && model.experts % size == 0;
    }
    if (has_default_role(AxisRole::stage, axis)) {
      return model.layers % size == 0;
    }
    return true;
  };
  // The mesh's axes: a DCN axis that --axes lacks leads (dp), then --axes.
  std::vector<std::string> names;
  for (const std::string& axis : dcn_axes) {
    if (!has_name(axes, axis)) {
      names.push_back(axis);
    }
  }
  const size_t leading = names.size();
  names.insert(names.end(), axes.begin(), axes.end());
  auto index_of = [&](const std::string& axis) {
    return static_cast<size_t>(std::find(names.begin(), names.end(), axis)
                               - names.begin());
  };
  const std::vector<std::vector<int64_t>> dcn_choices =
      slices == 1
          ? std::vector<std::vector<int64_t>>{std::vector<int64_t>(
              dcn_axes.size(), 1)}
          : factorisations(slices, dcn_axes.size(), [&](size_t i, int64_t d) {
              return allowed(dcn_axes[i], d);
            });
  std::vector<MeshChoice> out;
  if (axes.empty()) {
    return out;
  }
  for (const std::vector<int64_t>& dcn : dcn_choices) {
    std::vector<int64_t> dcn_of(names.size(), 1);
    for (size_t k = 0; k < dcn_axes.size(); ++k) {
      dcn_of[index_of(dcn_axes[k])] = dcn[k];
    }
    const std::vector<std::vector<int64_t>> ici_choices =
        factorisations(per_slice, axes.size(), [&](size_t i, int64_t d) {
          return allowed(axes[i], d * dcn_of[leading + i]);
        });
    for (const std::vector<int64_t>& ici : ici_choices) {
      std::vector<std::string> parts;
      std::vector<std::string> dcn_parts;
      for (size_t k = 0; k < names.size(); ++k) {
        const int64_t size = (k < leading ? 1 : ici[k - leading]) * dcn_of[k];
        if (size > 1 || (parts.empty() && k + 1 == names.size())) {
          parts.push_back(fmt::format("{}:{}", names[k], size));
        }
        if (dcn_of[k] > 1) {
          dcn_parts.push_back(fmt::format("{}:{}", names[k], dcn_of[k]));
        }
      }
      out.push_back({fmt::format("{}", fmt::join(parts, ",")),
                     fmt::format("{}", fmt::join(dcn_parts, ",")),
                     &topology});
    }
  }
  return out;
}

// What ranks a candidate that fits, least first: the objective, or +inf
// when it needs a step estimate the candidate lacks (a topology without
// the figures), so such candidates rank after every estimated one, in the
// order tried.
double objective_value(const SearchCandidate& c, SearchObjective o) {
  constexpr double k_unknown = std::numeric_limits<double>::infinity();
  switch (o) {
    case SearchObjective::tokens:
      return c.step ? -c.step->tokens_per_second_per_device : k_unknown;
    case SearchObjective::step:
      return c.step ? c.step->step_seconds : k_unknown;
    case SearchObjective::memory:
      return static_cast<double>(c.max_device_total);
    case SearchObjective::mfu:
      return c.step ? -c.step->mfu : k_unknown;
  }
  return k_unknown;
}

// What makes tensors of one layer a class (fold_tensor_classes).
struct ClassKey {
  uint32_t key = 0;  // RuleKeys::key_of
  MemoryFacts::Kind kind = MemoryFacts::Kind::weight;
  std::optional<DType> scaled;
  int64_t layer = 0;
  int64_t expert_rank = -1;  // -1: not a per-expert tensor

  bool operator==(const ClassKey&) const = default;
};

struct ClassKeyHash {
  size_t operator()(const ClassKey& k) const noexcept {
    // Each field mixed in (boost's hash_combine, then splitmix64's
    // finalizer steps).
    auto mix = [](uint64_t h, uint64_t v) {
      h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6U) + (h >> 2U);
      h ^= h >> 30U;
      h *= 0xbf58476d1ce4e5b9ULL;
      h ^= h >> 27U;
      return h;
    };
    uint64_t h = mix(0, k.key);
    h = mix(h, static_cast<uint64_t>(k.kind));
    h = mix(h, k.scaled ? static_cast<uint64_t>(*k.scaled) + 1 : 0);
    h = mix(h, static_cast<uint64_t>(k.layer));
    h = mix(h, static_cast<uint64_t>(k.expert_rank));
    return static_cast<size_t>(h);
  }
};

// The product of the sizes of the mesh's expert axes (not also stage axes):
// R as place_tensors computes it.
int64_t expert_ranks_of(const Mesh& mesh, const AxisRoles& roles) {
  int64_t ranks = 1;
  for (const MeshAxis& axis : mesh.axes) {
    if (has_name(roles.expert, axis.name)
        && !has_name(roles.stage, axis.name)) {
      ranks *= axis.size;
    }
  }
  return ranks;
}

}  // namespace

TensorClasses fold_tensor_classes(const Manifest& manifest,
                                  const RuleKeys& keys,
                                  const MemoryFacts& facts,
                                  int64_t expert_ranks,
                                  int64_t config_experts) {
  assert(expert_ranks >= 1);
  assert(keys.key_of.size() == manifest.size());
  assert(facts.names.size() == manifest.size());
  TensorClasses out;
  int64_t largest_expert = -1;
  for (const NameFacts& name : facts.names) {
    largest_expert = std::max(largest_expert, name.expert.value_or(-1));
  }
  out.experts = std::max(config_experts, largest_expert + 1);
  std::vector<size_t> members;  // each class's first tensor
  std::vector<int64_t> counts;
  std::unordered_map<ClassKey, size_t, ClassKeyHash> class_of;
  for (size_t t = 0; t < manifest.size(); ++t) {
    const NameFacts& name = facts.names[t];
    if (!name.layer) {
      members.push_back(t);
      counts.push_back(facts.count(t));
      continue;
    }
    ClassKey key{keys.key_of[t],
                 facts.kinds[t],
                 facts.scaled_dtype[t],
                 *name.layer,
                 name.expert
                     ? expert_rank_of(*name.expert, expert_ranks, out.experts)
                     : -1};
    auto [it, added] = class_of.try_emplace(key, members.size());
    if (added) {
      members.push_back(t);
      counts.push_back(0);
    }
    counts[it->second] += facts.count(t);
  }
  out.representatives = manifest.subset(members);
  out.keys.matches = keys.matches;
  out.keys.key_of.reserve(members.size());
  out.facts.names.reserve(members.size());
  out.facts.kinds.reserve(members.size());
  out.facts.scaled_dtype.reserve(members.size());
  for (size_t t : members) {
    out.keys.key_of.push_back(keys.key_of[t]);
    out.facts.names.push_back(facts.names[t]);
    out.facts.kinds.push_back(facts.kinds[t]);
    out.facts.scaled_dtype.push_back(facts.scaled_dtype[t]);
  }
  out.facts.counts = std::move(counts);
  return out;
}

std::string_view to_string(SearchObjective objective) {
  switch (objective) {
    case SearchObjective::tokens:
      return "tokens";
    case SearchObjective::step:
      return "step";
    case SearchObjective::memory:
      return "memory";
    case SearchObjective::mfu:
      return "mfu";
  }
  return "tokens";
}

std::optional<SearchObjective> parse_search_objective(std::string_view text) {
  for (SearchObjective o : {SearchObjective::tokens,
                            SearchObjective::step,
                            SearchObjective::memory,
                            SearchObjective::mfu}) {
    if (text == to_string(o)) {
      return o;
    }
  }
  return std::nullopt;
}

std::string_view to_string(DropReason reason) {
  switch (reason) {
    case DropReason::layout:
      return "layout";
    case DropReason::indivisible:
      return "indivisible";
    case DropReason::plan:
      return "plan";
    case DropReason::over_hbm:
      return "over_hbm";
  }
  return "layout";
}

std::optional<SearchResult> search_meshes(const Manifest& manifest,
                                          const ModelConfig& model,
                                          const Topology& topology,
                                          const RuleSet& rules,
                                          const SearchOptions& options,
                                          Diagnostics& diags) {
  return search_meshes(
      manifest, model, std::span(&topology, 1), rules, options, diags);
}

std::optional<SearchResult> search_meshes(const Manifest& manifest,
                                          const ModelConfig& model,
                                          std::span<const Topology> topologies,
                                          const RuleSet& rules,
                                          const SearchOptions& options,
                                          Diagnostics& diags) {
  SearchResult out;
  // Shared by every mesh: which tensors share a rule decision (names are
  // matched once), and what memory reads from each name.
  const std::optional<RuleKeys> keys = rule_keys(manifest, rules, diags);
  if (!keys) {
    return std::nullopt;
  }
  const MemoryFacts facts = memory_facts(manifest);
  ApplyOptions apply;
  // The manifest folded into tensor classes, per expert rank count.
  std::map<int64_t, TensorClasses> folds;
  out.tensors = static_cast<int64_t>(manifest.size());
  out.decision_keys = static_cast<int64_t>(keys->keys());
  // Every slice's meshes, slice by slice.
  std::vector<MeshChoice> meshes;
  for (const Topology& topology : topologies) {
    std::vector<MeshChoice> of_slice =
        enumerate_meshes(model, topology, options.axes, options.dcn_axes);
    std::move(of_slice.begin(), of_slice.end(), std::back_inserter(meshes));
  }
  out.meshes = static_cast<int64_t>(meshes.size());
  std::vector<std::string> remats = options.remat;
  if (remats.empty()) {
    remats.push_back(options.workload.remat);
  }
  std::vector<std::string> batches = options.per_device_batch;
  if (batches.empty()) {
    batches.emplace_back();
  }
  const MeshSources sources{"--axes",
                            "--dcn",
                            "--axis-names",
                            "--devices",
                            "--topology",
                            "--allow-split-physical-axes"};
  auto candidate = [](const MeshChoice& m,
                      const std::string& remat,
                      const std::string& batch) {
    SearchCandidate c;
    c.topology = m.topology->name;
    c.mesh = m.mesh;
    c.dcn = m.dcn;
    c.remat = remat;
    c.per_device_batch = batch;
    return c;
  };
  auto drop_all =
      [&](const MeshChoice& m, DropReason reason, const std::string& message) {
        for (const std::string& remat : remats) {
          for (const std::string& batch : batches) {
            SearchCandidate c = candidate(m, remat, batch);
            c.dropped = reason;
            c.message = message;
            out.candidates.push_back(std::move(c));
          }
        }
      };
  int64_t done = 0;
  for (const MeshChoice& choice : meshes) {
    if (options.progress && done > 0) {
      options.progress(done, out.meshes);
    }
    ++done;
    Diagnostics local;
    const MeshInput input{choice.mesh,
                          choice.dcn,
                          {},
                          choice.topology,
                          std::nullopt,
                          options.allow_split_physical_axes,
                          sources};
    std::optional<PlacedMesh> placed = place_mesh(input, local);
    if (!placed || local.has_errors()) {
      drop_all(choice, DropReason::layout, first_error(local));
      continue;
    }
    const Mesh* mesh = &placed->mesh;
    const MeshLayout* layout = &placed->layout;
    std::optional<AxisRoles> roles =
        resolve_axis_roles(*mesh, AxisRoles{}, AxisRoleSources{}, local);
    if (!roles) {
      drop_all(choice, DropReason::plan, first_error(local));
      continue;
    }
    // The tensors this mesh walks: the manifest's classes for its expert
    // rank count (folded once per count), or every tensor.
    const Manifest* tensors = &manifest;
    const MemoryFacts* tensor_facts = &facts;
    int64_t experts = model.experts;
    apply.keys = &*keys;
    if (options.fold_tensors) {
      const int64_t ranks = expert_ranks_of(*mesh, *roles);
      auto it = folds.find(ranks);
      if (it == folds.end()) {
        it = folds
                 .emplace(ranks,
                          fold_tensor_classes(
                              manifest, *keys, facts, ranks, model.experts))
                 .first;
      }
      tensors = &it->second.representatives;
      tensor_facts = &it->second.facts;
      experts = it->second.experts;
      apply.keys = &it->second.keys;
    }
    std::optional<RulePlan> plan =
        apply_rules(*tensors, *mesh, rules, local, apply);
    if (!plan) {
      drop_all(choice, DropReason::plan, first_error(local));
      continue;
    }
    ++out.planned;
    out.walked += static_cast<int64_t>(tensors->size());
    out.decisions += static_cast<int64_t>(plan->decisions.size());
    const std::vector<const PartitionSpec*> specs = plan->specs();
    const std::vector<TensorSharding> shardings = validate_planned(
        *tensors, *mesh, specs, rules.source, ValidateOptions{}, local);
    if (local.has_errors()) {
      drop_all(choice, DropReason::plan, first_error(local));
      continue;
    }
    // The workload variations' activations; the model state's memory is
    // computed once for all of them.
    std::vector<SearchCandidate> variants;  // in the order tried
    std::vector<size_t> estimated;          // those with activations
    std::vector<ActivationEstimate> acts;
    std::vector<std::vector<ActivationLoad>> loads;
    for (const std::string& remat : remats) {
      for (const std::string& batch : batches) {
        SearchCandidate c = candidate(choice, remat, batch);
        Workload w = options.workload;
        w.remat = remat;
        w.mesh_source = "--axes";
        if (!batch.empty()) {
          w.per_device_batch = batch;
          w.batch.reset();
        }
        Diagnostics run;
        std::optional<ActivationEstimate> act =
            estimate_activations(model, *mesh, *roles, w, run);
        if (!act) {
          c.dropped = DropReason::indivisible;
          c.message = first_error(run);
          variants.push_back(std::move(c));
          continue;
        }
        std::vector<ActivationLoad>& load = loads.emplace_back();
        for (const StageActivations& st : act->per_stage) {
          load.push_back(ActivationLoad{st.total_bytes, st.host_bytes});
        }
        acts.push_back(std::move(*act));
        estimated.push_back(variants.size());
        variants.push_back(std::move(c));
      }
    }
    MemoryOptions m = options.memory;
    m.roles = *roles;
    m.layers = model.layers;
    m.experts = experts;
    m.largest = 0;
    m.facts = tensor_facts;
    Diagnostics state_diags;
    std::vector<Diagnostics> found(estimated.size());
    const std::vector<std::optional<MemoryEstimate>> memories =
        estimated.empty()
            ? std::vector<std::optional<MemoryEstimate>>()
            : estimate_memory(
                *tensors, *mesh, shardings, m, loads, state_diags, found);
    for (size_t v = 0; v < estimated.size(); ++v) {
      SearchCandidate& c = variants[estimated[v]];
      const std::optional<MemoryEstimate>* memory =
          memories.empty() ? nullptr : &memories[v];
      if (memory == nullptr || !*memory) {
        c.dropped = DropReason::plan;
        c.message = first_error(memory == nullptr ? state_diags : found[v]);
        continue;
      }
      const MemoryEstimate& mem = **memory;
      c.per_device = mem.per_device;
      c.gather_buffer = mem.gather_buffer;
      c.max_device_total = mem.max_device_total;
      c.hbm_bytes = mem.hbm_bytes;
      c.capacity_bytes = mem.capacity_bytes;
      c.utilization = mem.utilization;
      c.activations = mem.activations;
      c.fits = mem.fits.value_or(true);
      Diagnostics step_diags;
      c.step = estimate_step(
          model,
          *mesh,
          *roles,
          acts[v],
          step_inputs_for(
              model, *choice.topology, layout->links, mem, "--axes"),
          options.step,
          step_diags);
      if (c.step && !c.step->unsplit_tensor_axes.empty()) {
        // The rules leave a tensor axis holding whole weights: the step's
        // figures do not hold for this mesh.
        c.dropped = DropReason::plan;
        c.message = first_of(step_diags, "step.tensor-axis-unsplit");
      } else if (!c.fits) {
        c.dropped = DropReason::over_hbm;
        c.message = fmt::format("needs {} bytes a device of {} usable",
                                mem.max_device_total,
                                mem.capacity_bytes.value_or(0));
      }
    }
    std::move(
        variants.begin(), variants.end(), std::back_inserter(out.candidates));
  }
  out.foldings = static_cast<int64_t>(folds.size());
  // Rank those that fit; keep the dropped after them, in the order tried.
  std::stable_partition(out.candidates.begin(),
                        out.candidates.end(),
                        [](const SearchCandidate& c) { return !c.dropped; });
  const auto ranked_end = std::find_if(
      out.candidates.begin(),
      out.candidates.end(),
      [](const SearchCandidate& c) { return c.dropped.has_value(); });
  std::stable_sort(out.candidates.begin(),
                   ranked_end,
                   [&](const SearchCandidate& a, const SearchCandidate& b) {
                     return objective_value(a, options.objective)
                            < objective_value(b, options.objective);
                   });
  int64_t rank = 1;
  for (auto it = out.candidates.begin(); it != ranked_end; ++it) {
    it->rank = rank++;
  }
  for (const SearchCandidate& c : out.candidates) {
    if (c.dropped) {
      ++out.dropped_counts[std::string(to_string(*c.dropped))];
    }
  }
  return out;
}

}  // namespace shardplan
