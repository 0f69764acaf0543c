// `shardplan search` (include/shardplan/search.hpp; docs/search.md):
// search_meshes as a Searcher of named phases: the variations checked, the
// work shared across meshes, the meshes listed, each planned and evaluated
// for every workload variation, the ranking, the winner.

#include "search/internal.hpp"

#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/search.hpp>
#include <shardplan/validate.hpp>
#include <shardplan/workload.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardplan {

namespace {

using search_detail::has_name;
using search_detail::MeshChoice;

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

// Marks `c` dropped for `reason`, with `message`.
void drop(SearchCandidate& c, DropReason reason, std::string message) {
  c.dropped = reason;
  c.message = std::move(message);
}

// What ranks a candidate that fits, least first: the objective, or +inf
// when it needs a step estimate the candidate lacks (a topology without
// the figures), so such candidates rank after every estimated one, in the
// order tried.
double objective_value(const SearchCandidate& c, SearchObjective o) {
  if (o == SearchObjective::memory) {
    return static_cast<double>(c.max_device_total);
  }
  if (!c.step) {
    return std::numeric_limits<double>::infinity();
  }
  const StepEstimate& s = *c.step;
  switch (o) {
    case SearchObjective::step:
      return s.step_seconds;
    case SearchObjective::mfu:
      return -s.mfu;
    case SearchObjective::tokens:
    case SearchObjective::memory:
      break;
  }
  return -s.tokens_per_second_per_device;
}

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

// The tensors a mesh walks: the manifest's classes for its expert rank
// count, or every tensor.
struct Walk {
  const Manifest* tensors = nullptr;
  const MemoryFacts* facts = nullptr;
  const RuleKeys* keys = nullptr;
  int64_t experts = 0;  // MemoryOptions::experts
};

// A mesh laid out, its axis roles, and the shardings of the tensors it
// walks.
struct PlannedMesh {
  const MeshChoice* choice = nullptr;
  PlacedMesh placed;
  AxisRoles roles;
  Walk walk;
  std::vector<TensorSharding> shardings;
};

// The candidates of one mesh, one per variation in the order tried, and
// the activations of those that have them.
struct Variants {
  std::vector<SearchCandidate> candidates;
  std::vector<size_t> estimated;  // the candidates with activations
  std::vector<ActivationEstimate> activations;
  std::vector<std::vector<ActivationLoad>> loads;
};

class Searcher {
 public:
  Searcher(const Manifest& manifest,
           const ModelConfig& model,
           std::span<const Topology> topologies,
           const RuleSet& rules,
           const SearchOptions& options,
           Diagnostics& diags)
      : m_manifest(manifest),
        m_model(model),
        m_topologies(topologies),
        m_rules(rules),
        m_options(options),
        m_diags(diags),
        m_mesh_at(Location::of(options.sources.mesh)) {}

  std::optional<SearchResult> run() {
    if (!check_variations() || !share_work()) {
      return std::nullopt;
    }
    list_meshes();
    for (const MeshChoice& choice : m_meshes) {
      report_progress();
      if (std::optional<PlannedMesh> planned = plan_mesh(choice)) {
        Variants variants = estimate_activations_of(*planned);
        estimate_states(*planned, variants);
        std::move(variants.candidates.begin(),
                  variants.candidates.end(),
                  std::back_inserter(m_out.candidates));
      }
    }
    m_out.foldings = static_cast<int64_t>(m_folds.size());
    rank();
    finish_winner();
    log_work();
    return std::move(m_out);
  }

 private:
  // Every remat policy is checked before the search: an unknown one would
  // drop every candidate.
  bool check_variations() {
    m_variations = search_variations(m_options);
    return search_detail::check_remat_policies(
        m_variations.remat, m_options, m_diags);
  }

  // Shared by every mesh: which tensors share a rule decision (names are
  // matched once), and what memory reads from each name.
  bool share_work() {
    m_keys = rule_keys(m_manifest, m_rules, m_diags);
    if (!m_keys) {
      return false;
    }
    m_facts = memory_facts(m_manifest);
    m_out.tensors = static_cast<int64_t>(m_manifest.size());
    m_out.decision_keys = static_cast<int64_t>(m_keys->keys());
    return true;
  }

  // Every slice's meshes, slice by slice.
  void list_meshes() {
    for (const Topology& topology : m_topologies) {
      std::vector<MeshChoice> of_slice = search_detail::enumerate_meshes(
          m_model, topology, m_options.axes, m_options.dcn_axes.value);
      std::move(of_slice.begin(), of_slice.end(), std::back_inserter(m_meshes));
    }
    m_out.meshes = static_cast<int64_t>(m_meshes.size());
  }

  void report_progress() {
    if (m_options.progress && m_done > 0) {
      m_options.progress(m_done, m_out.meshes);
    }
    ++m_done;
  }

  SearchCandidate candidate(const MeshChoice& m,
                            const std::string& remat,
                            const std::string& batch) const {
    SearchCandidate c;
    c.topology = m.topology->name;
    c.mesh = m.mesh;
    c.dcn = m.dcn;
    c.remat = remat;
    c.per_device_batch = batch;
    return c;
  }

  // Every variation of `m`, dropped for `reason`.
  void drop_all(const MeshChoice& m,
                DropReason reason,
                const std::string& message) {
    for (const std::string& remat : m_variations.remat) {
      for (const std::string& batch : m_variations.per_device_batch) {
        SearchCandidate c = candidate(m, remat, batch);
        drop(c, reason, message);
        m_out.candidates.push_back(std::move(c));
      }
    }
  }

  // The tensors a mesh with `roles` walks: the manifest's classes for its
  // expert rank count (folded once per count), or every tensor.
  Walk walk_of(const Mesh& mesh, const AxisRoles& roles) {
    if (!m_options.fold_tensors) {
      return Walk{&m_manifest, &m_facts, &*m_keys, m_model.experts};
    }
    const int64_t ranks = expert_ranks_of(mesh, roles);
    auto it = m_folds.find(ranks);
    if (it == m_folds.end()) {
      it = m_folds
               .emplace(
                   ranks,
                   fold_tensor_classes(
                       m_manifest, *m_keys, m_facts, ranks, m_model.experts))
               .first;
    }
    const TensorClasses& classes = it->second;
    return Walk{&classes.representatives,
                &classes.facts,
                &classes.keys,
                classes.experts};
  }

  // The mesh laid out, its roles, planned and validated over the tensors it
  // walks; nullopt, every variation dropped, when one of those fails.
  std::optional<PlannedMesh> plan_mesh(const MeshChoice& choice) {
    Diagnostics local;
    const MeshInput input{choice.mesh,
                          choice.dcn,
                          {},
                          choice.topology,
                          std::nullopt,
                          m_options.allow_split_physical_axes,
                          m_options.sources};
    std::optional<PlacedMesh> placed = place_mesh(input, local);
    if (!placed || local.has_errors()) {
      drop_all(choice, DropReason::layout, first_error(local));
      return std::nullopt;
    }
    std::optional<AxisRoles> roles =
        resolve_axis_roles(placed->mesh, AxisRoles{}, AxisRoleSources{}, local);
    if (!roles) {
      drop_all(choice, DropReason::plan, first_error(local));
      return std::nullopt;
    }
    const Walk walk = walk_of(placed->mesh, *roles);
    ApplyOptions apply;
    apply.keys = walk.keys;
    std::optional<RulePlan> plan =
        apply_rules(*walk.tensors, placed->mesh, m_rules, local, apply);
    if (!plan) {
      drop_all(choice, DropReason::plan, first_error(local));
      return std::nullopt;
    }
    ++m_out.planned;
    m_out.walked += static_cast<int64_t>(walk.tensors->size());
    m_out.decisions += static_cast<int64_t>(plan->decisions.size());
    std::vector<TensorSharding> shardings =
        validate_planned(*walk.tensors,
                         placed->mesh,
                         plan->specs(),
                         Location::of(m_rules.source),
                         ValidateOptions{},
                         local);
    if (local.has_errors()) {
      drop_all(choice, DropReason::plan, first_error(local));
      return std::nullopt;
    }
    return PlannedMesh{&choice,
                       std::move(*placed),
                       std::move(*roles),
                       walk,
                       std::move(shardings)};
  }

  // The workload variations' activations on the mesh: a variation whose
  // batch or sequence the mesh does not divide is dropped (indivisible).
  Variants estimate_activations_of(const PlannedMesh& p) const {
    Variants out;
    for (const std::string& remat : m_variations.remat) {
      for (const std::string& batch : m_variations.per_device_batch) {
        SearchCandidate c = candidate(*p.choice, remat, batch);
        const Workload w = search_detail::variation_workload(
            m_options,
            remat,
            batch,
            m_mesh_at,
            {m_rules, p.placed.mesh, p.roles});
        Diagnostics run;
        std::optional<ActivationEstimate> act =
            estimate_activations(m_model, p.placed.mesh, p.roles, w, run);
        if (!act) {
          drop(c, DropReason::indivisible, first_error(run));
          out.candidates.push_back(std::move(c));
          continue;
        }
        std::vector<ActivationLoad>& load = out.loads.emplace_back();
        load.reserve(act->per_stage.size());
        for (const StageActivations& st : act->per_stage) {
          load.push_back(activation_load(st));
        }
        out.activations.push_back(std::move(*act));
        out.estimated.push_back(out.candidates.size());
        out.candidates.push_back(std::move(c));
      }
    }
    return out;
  }

  // The memory of the variations with activations (the model state's is
  // computed once for all of them), then each one's step.
  void estimate_states(const PlannedMesh& p, Variants& v) const {
    if (v.estimated.empty()) {
      return;
    }
    MemoryOptions m =
        search_detail::slice_memory(m_options, *p.choice->topology);
    m.roles = p.roles;
    m.layers = m_model.layers;
    m.mtp_layers = m_model.mtp_layers;
    m.experts = p.walk.experts;
    m.largest = 0;
    m.facts = p.walk.facts;
    Diagnostics state_diags;
    std::vector<Diagnostics> found(v.estimated.size());
    const std::vector<std::optional<MemoryEstimate>> memories =
        estimate_memory(*p.walk.tensors,
                        p.placed.mesh,
                        p.shardings,
                        m,
                        v.loads,
                        state_diags,
                        found);
    for (size_t i = 0; i < v.estimated.size(); ++i) {
      SearchCandidate& c = v.candidates[v.estimated[i]];
      if (memories.empty() || !memories[i]) {
        drop(c,
             DropReason::plan,
             first_error(memories.empty() ? state_diags : found[i]));
        continue;
      }
      price(p, *memories[i], v.activations[i], c);
    }
  }

  // A candidate's memory and step: dropped when the rules leave a tensor
  // axis holding whole weights (the step's figures do not hold for the
  // mesh) or when it does not fit.
  void price(const PlannedMesh& p,
             const MemoryEstimate& mem,
             const ActivationEstimate& act,
             SearchCandidate& c) const {
    c.per_device = mem.per_device;
    c.gather_buffer = mem.gather_buffer;
    c.prefetch_dropped = mem.prefetch_dropped;
    c.max_device_total = mem.max_device_total;
    c.hbm_bytes = mem.hbm_bytes;
    c.capacity_bytes = mem.capacity_bytes;
    c.utilization = mem.utilization;
    c.activations = mem.activations;
    c.fits = mem.fits.value_or(true);
    Diagnostics step_diags;
    c.step = estimate_step(m_model,
                           p.placed.mesh,
                           p.roles,
                           act,
                           step_inputs_for(m_model,
                                           *p.choice->topology,
                                           p.placed.layout.links,
                                           mem,
                                           m_mesh_at),
                           m_options.step,
                           step_diags);
    if (c.step && !c.step->unsplit_tensor_axes.empty()) {
      drop(c,
           DropReason::plan,
           first_of(step_diags, "step.tensor-axis-unsplit"));
    } else if (!c.fits) {
      drop(c,
           DropReason::over_hbm,
           fmt::format("needs {} bytes a device of {} usable",
                       mem.max_device_total,
                       mem.capacity_bytes.value_or(0)));
    }
  }

  // Those that fit ranked by the objective; the dropped after them, in the
  // order tried, and counted per reason.
  void rank() {
    std::vector<SearchCandidate>& all = m_out.candidates;
    std::stable_partition(all.begin(), all.end(), [](const SearchCandidate& c) {
      return !c.dropped;
    });
    const auto ranked_end =
        std::find_if(all.begin(), all.end(), [](const SearchCandidate& c) {
          return c.dropped.has_value();
        });
    const SearchObjective o = m_options.objective;
    std::stable_sort(all.begin(),
                     ranked_end,
                     [o](const SearchCandidate& a, const SearchCandidate& b) {
                       return objective_value(a, o) < objective_value(b, o);
                     });
    int64_t rank = 1;
    for (auto it = all.begin(); it != ranked_end; ++it) {
      it->rank = rank++;
    }
    for (const SearchCandidate& c : all) {
      if (c.dropped) {
        ++m_out.dropped_counts[std::string(to_string(*c.dropped))];
      }
    }
  }

  // The winner laid out (what html draws) and, when asked, planned over
  // every tensor (what its paste-back documents write), reporting as that
  // plan would.
  void finish_winner() {
    if (m_out.winner() == nullptr) {
      return;
    }
    Diagnostics layout;
    search_detail::lay_out_winner(m_topologies, m_options, m_out, layout);
    if (!m_options.winner.plan) {
      return;
    }
    for (const Diagnostic& d : layout.items()) {
      m_diags.add(d);
    }
    if (m_out.winner_mesh) {
      m_out.winner_plan = search_detail::plan_winner(
          m_manifest, m_model, m_rules, m_options, m_out, m_diags);
    }
  }

  void log_work() const {
    const SearchResult& r = m_out;
    spdlog::debug(
        "search: {} of {} meshes planned; {} tensors share {} decision keys: "
        "{} rule decisions made, not {} (tensors x meshes)",
        r.planned,
        r.meshes,
        r.tensors,
        r.decision_keys,
        r.decisions,
        r.tensors * r.planned);
    spdlog::debug(
        "search: the meshes walked {} tensor classes in all, not {} tensors "
        "(tensors x meshes; {} folding{} of the manifest, one per expert "
        "rank count)",
        r.walked,
        r.tensors * r.planned,
        r.foldings,
        r.foldings == 1 ? "" : "s");
  }

  const Manifest& m_manifest;
  const ModelConfig& m_model;
  std::span<const Topology> m_topologies;
  const RuleSet& m_rules;
  const SearchOptions& m_options;
  Diagnostics& m_diags;
  const Location m_mesh_at;  // where each candidate's mesh comes from
  SearchVariations m_variations;
  std::optional<RuleKeys> m_keys;
  MemoryFacts m_facts;
  // The manifest folded into tensor classes, per expert rank count.
  std::map<int64_t, TensorClasses> m_folds;
  std::vector<MeshChoice> m_meshes;
  int64_t m_done = 0;  // meshes started
  SearchResult m_out;
};

}  // namespace

std::span<const SearchCandidate> SearchResult::ranked() const {
  const auto end = std::find_if(
      candidates.begin(), candidates.end(), [](const SearchCandidate& c) {
        return !c.rank;
      });
  return {candidates.begin(), end};
}

const SearchCandidate* SearchResult::winner() const {
  const std::span<const SearchCandidate> best = ranked();
  return best.empty() ? nullptr : &best.front();
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
  return Searcher(manifest, model, topologies, rules, options, diags).run();
}

}  // namespace shardplan
