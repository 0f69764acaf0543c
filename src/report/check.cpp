#include "report/json.hpp"
#include "report/renderers.hpp"
#include "report/text.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

// `check`, `memory` and `plan` as JSON, and `check` and `plan` as markdown
// and GitHub workflow commands; check's text and the summary plan's text
// ends with.

namespace shardplan::report_detail {

namespace {

ordered_json optional_json(const std::optional<int64_t>& v) {
  return v ? ordered_json(*v) : ordered_json(nullptr);
}

ordered_json term_json(const ActivationTerm& t) {
  return {{"name", t.name},
          {"bytes", t.bytes},
          {"formula", t.formula},
          {"source", t.source}};
}

// memory.activations (docs/memory.md, "Activations"): the stage the memory
// estimate counts, the workload as resolved, each layer kind's saved tensors,
// every stage's sums, and the terms of the counted stage.
ordered_json activations_object(const ActivationEstimate& a,
                                const MemoryEstimate& m) {
  const int64_t stage = std::min<int64_t>(m.stage, std::ssize(a.per_stage) - 1);
  const StageActivations& st = a.per_stage[static_cast<size_t>(stage)];
  ordered_json j;
  j["remat"] = std::string(to_string(a.remat));
  if (a.remat == RematPolicy::custom) {
    ordered_json custom = ordered_json::object();
    for (const std::string& name : custom_remat_names()) {
      custom[name] = std::string(to_string(a.custom_remat.of(name)));
    }
    j["custom_remat"] = std::move(custom);
  }
  j["attention"] = std::string(to_string(a.attention));
  j["sequence_parallel"] = a.residual == ResidualLayout::sequence;
  j["activation_layout"] = std::string(to_string(a.residual));
  j["activation_layout_source"] = a.residual_source;
  j["cross_entropy"] = std::string(to_string(a.cross_entropy));
  j["cross_entropy_source"] = a.cross_entropy_source;
  j["residuals_only"] = a.residuals_only;
  j["vocab_tiles"] = a.vocab_tiles;
  j["context_strategy"] = std::string(to_string(a.context_strategy));
  j["context_strategy_source"] = a.context_strategy_source;
  j["context_kv_bytes"] = a.context_kv_bytes;
  j["context_exchange_bytes"] = a.context_exchange_bytes;
  j["expert_load"] = a.expert_load;
  j["expert_load_source"] = a.expert_load_source.empty()
                                ? ordered_json(nullptr)
                                : ordered_json(a.expert_load_source);
  j["expert_exchange_bytes"] = a.expert_exchange_bytes;
  j["activation_dtype"] = std::string(to_string(a.activation_dtype));
  j["seq"] = a.seq;
  j["global_batch"] = a.global_batch;
  j["microbatch_size"] = a.microbatch_size;
  j["microbatches"] = a.microbatches;
  j["batch_shards"] = a.batch_shards;
  j["sequence_shards"] = a.sequence_shards;
  j["tensor_shards"] = a.tensor_shards;
  j["tokens"] = a.tokens;
  j["stages"] = a.stages;
  j["stage_interleave"] = a.stage_interleave;
  j["layers_per_stage"] = a.layers_per_stage;
  j["stage"] = stage;
  j["in_flight_factor"] = st.in_flight;
  j["per_layer_bytes"] = a.per_layer_bytes;
  j["layers_bytes"] = st.layers_bytes;
  j["embedding_bytes"] = st.embedding_bytes;
  j["logits_bytes"] = st.logits_bytes;
  j["mtp_bytes"] = st.mtp_bytes;
  j["recompute_bytes"] = st.recompute_bytes;
  j["host_offload_bytes"] = st.host_bytes;
  j["total_bytes"] = st.total_bytes;
  ordered_json saved = ordered_json::array();
  for (const auto* kind : {&a.dense, &a.moe}) {
    if (!*kind) {
      continue;
    }
    for (const SavedTensor& t : (*kind)->saved) {
      saved.push_back({{"name", t.name},
                       {"layer", kind == &a.dense ? "dense" : "moe"},
                       {"bytes_per_layer", t.bytes_per_layer},
                       {"axes", t.axes},
                       {"offloaded", t.offloaded},
                       {"formula", t.formula},
                       {"source", t.source}});
    }
  }
  j["saved"] = std::move(saved);
  ordered_json stages = ordered_json::array();
  for (const StageActivations& s : a.per_stage) {
    stages.push_back({{"stage", s.stage},
                      {"dense_layers", s.dense_layers},
                      {"moe_layers", s.moe_layers},
                      {"in_flight", s.in_flight},
                      {"layers_bytes", s.layers_bytes},
                      {"embedding_bytes", s.embedding_bytes},
                      {"logits_bytes", s.logits_bytes},
                      {"mtp_bytes", s.mtp_bytes},
                      {"recompute_bytes", s.recompute_bytes},
                      {"host_offload_bytes", s.host_bytes},
                      {"total_bytes", s.total_bytes}});
  }
  j["per_stage"] = std::move(stages);
  ordered_json terms = ordered_json::array();
  for (const ActivationTerm& t : stage_terms(a, stage)) {
    terms.push_back(term_json(t));
  }
  j["terms"] = std::move(terms);
  ordered_json symbols = ordered_json::object();
  for (const auto& [name, value] : a.symbols) {
    symbols[name] = value;
  }
  j["symbols"] = std::move(symbols);
  return j;
}

// The training step's estimate (docs/step.md), null without one.
ordered_json step_object(const StepEstimate* step) {
  if (step == nullptr) {
    return nullptr;
  }
  const StepEstimate& e = *step;
  ordered_json collectives = ordered_json::array();
  for (const StepCollective& c : e.collectives) {
    collectives.push_back({{"what", collective_label(c)},
                           {"op", std::string(to_string(c.op))},
                           {"mesh_axes", c.mesh_axes},
                           {"link", std::string(to_string(c.link))},
                           {"bytes_per_device", c.bytes_per_device},
                           {"count", c.count},
                           {"seconds", c.seconds},
                           {"overlapped", c.overlapped},
                           {"exposed_seconds", c.exposed_seconds}});
  }
  ordered_json assumptions = ordered_json::object();
  for (const StepEstimate::Assumption& a : e.assumptions) {
    assumptions[a.name] = {{"value", a.value}, {"source", a.source}};
  }
  return {{"tokens", e.tokens},
          {"model_flops", e.model_flops},
          {"flops_per_device", e.flops_per_device},
          {"attention_flops_per_device", e.attention_flops_per_device},
          {"matmul_seconds", e.matmul_seconds},
          {"memory_seconds", e.memory_seconds},
          {"compute_seconds", e.compute_seconds},
          {"collectives", std::move(collectives)},
          {"comm_seconds", e.comm_seconds},
          {"exposed_comm_seconds", e.exposed_comm_seconds},
          {"bubble_seconds", e.bubble_seconds},
          {"step_seconds", e.step_seconds},
          {"step_seconds_low", e.step_seconds_low},
          {"step_seconds_high", e.step_seconds_high},
          {"tokens_per_second_per_device", e.tokens_per_second_per_device},
          {"tokens_per_second_per_device_low",
           e.tokens_per_second_at(e.step_seconds_high)},
          {"tokens_per_second_per_device_high",
           e.tokens_per_second_at(e.step_seconds_low)},
          {"mfu", e.mfu},
          {"mfu_low", e.mfu_at(e.step_seconds_high)},
          {"mfu_high", e.mfu_at(e.step_seconds_low)},
          {"bottleneck", bottleneck_text(e)},
          {"assumptions", std::move(assumptions)}};
}

// The workload a plan assumed (null without one).
ordered_json workload_object(const ActivationEstimate* a, const Mesh& mesh) {
  if (a == nullptr) {
    return nullptr;
  }
  return {{"seq", a->seq},
          {"global_batch", a->global_batch},
          {"per_device_batch",
           static_cast<double>(a->global_batch)
               / static_cast<double>(mesh.num_devices())},
          {"microbatches", a->microbatches},
          {"remat", std::string(to_string(a->remat))},
          {"attention", std::string(to_string(a->attention))},
          {"sequence_parallel", a->residual == ResidualLayout::sequence},
          {"activation_layout", std::string(to_string(a->residual))},
          {"cross_entropy", std::string(to_string(a->cross_entropy))},
          {"stage_interleave", a->stage_interleave},
          {"activation_dtype", std::string(to_string(a->activation_dtype))}};
}

ordered_json memory_object(const CheckReport& r) {
  const MemoryEstimate& m = r.memory;
  ordered_json j;
  j["recipe"] = std::string(to_string(m.recipe));
  const auto dtype_or_params = [](std::optional<DType> d) {
    return d ? ordered_json(std::string(to_string(*d))) : ordered_json(nullptr);
  };
  j["optimizer"] = {
      {"name", std::string(to_string(m.optimizer))},
      {"first_moment_dtype", dtype_or_params(m.first_moment_dtype)},
      {"second_moment_dtype", dtype_or_params(m.second_moment_dtype)},
      {"master", m.master}};
  j["zero"] = m.zero;
  j["data_axes"] = m.data_axes;
  j["param_dtype"] = m.param_dtype
                         ? ordered_json(std::string(to_string(*m.param_dtype)))
                         : ordered_json(nullptr);
  j["fp8_param_dtype"] =
      m.fp8_param_dtype
          ? ordered_json(std::string(to_string(*m.fp8_param_dtype)))
          : ordered_json(nullptr);
  j["grad_dtype"] = !m.grads_counted ? ordered_json(nullptr)
                    : m.grad_dtype
                        ? ordered_json(std::string(to_string(*m.grad_dtype)))
                        : ordered_json("param");
  j["scale_tensors"] = {{"count", m.scale_tensors},
                        {"dropped", m.dropped_scale_tensors}};
  j["per_device"] = {{"params", m.per_device.params},
                     {"grads", m.per_device.grads},
                     {"optimizer", m.per_device.optimizer},
                     {"gather_buffer", m.gather_buffer},
                     {"activations", m.activations},
                     {"host_offload", m.host_offload},
                     {"optimizer_step", m.optimizer_step},
                     {"total", m.max_device_total}};
  ordered_json units = ordered_json::array();
  for (const GatherUnit& u : m.gather_units) {
    units.push_back(
        {{"name", u.name},
         {"layer", u.layer ? ordered_json(*u.layer) : ordered_json(nullptr)},
         {"bytes", u.bytes}});
  }
  j["gather_units"] = std::move(units);
  j["prefetch_dropped"] = m.prefetch_dropped;
  j["hosted_params"] = m.hosted_params;
  j["hosted_optimizer"] = m.hosted_optimizer;
  j["peak_phase"] = m.activations_counted
                        ? ordered_json(std::string(to_string(m.peak_phase)))
                        : ordered_json(nullptr);
  j["gather_axes"] = m.gather_axes;
  j["untrained_tensors"] = m.untrained_tensors;
  j["gather_dtype"] = m.gather_cast
                          ? ordered_json(std::string(to_string(*m.gather_cast)))
                          : ordered_json(nullptr);
  const Placement& p = m.placement;
  if (p.placed()) {
    j["placement"] = {{"stage_axes", p.stage_axes},
                      {"stages", p.stages},
                      {"layers", p.layers},
                      {"expert_axes", p.expert_axes},
                      {"expert_ranks", p.expert_ranks},
                      {"experts", p.experts},
                      {"stage", m.stage},
                      {"expert_rank", m.expert_rank}};
    ordered_json stages = ordered_json::array();
    for (const GroupMemory& g : m.stages) {
      stages.push_back({{"stage", g.stage},
                        {"expert_rank", g.expert_rank},
                        {"params", g.per_device.params},
                        {"grads", g.per_device.grads},
                        {"optimizer", g.per_device.optimizer},
                        {"gather_buffer", g.gather_buffer},
                        {"activations", g.activations},
                        {"host_offload", g.host_offload},
                        {"optimizer_step", g.optimizer_step},
                        {"total", g.total}});
    }
    j["stages"] = std::move(stages);
  }
  j["activations"] = r.activations != nullptr
                         ? activations_object(*r.activations, m)
                         : ordered_json(nullptr);
  j["max_device_total"] = m.max_device_total;
  j["min_device_total"] = m.min_device_total;
  j["runtime"] = std::string(to_string(m.runtime));
  j["reserve"] = m.reserve;
  j["reserve_source"] = m.reserve_source.empty()
                            ? ordered_json(nullptr)
                            : ordered_json(m.reserve_source);
  j["reserved_bytes"] = m.reserved_total;
  j["hbm_bytes"] = optional_json(m.hbm_bytes);
  j["headroom"] = m.headroom;
  j["headroom_source"] = m.headroom_source;
  j["capacity_bytes"] = optional_json(m.capacity_bytes);
  j["headroom_left_bytes"] = optional_json(m.headroom_left);
  j["utilization"] =
      m.utilization ? ordered_json(*m.utilization) : ordered_json(nullptr);
  j["fits"] = m.fits ? ordered_json(*m.fits) : ordered_json(nullptr);
  j["devices_per_host"] = m.devices_per_host;
  j["host_bytes_per_host"] = m.host_bytes_per_host;
  j["host_memory_bytes"] = optional_json(m.host_memory_bytes);
  j["host_fits"] =
      m.host_fits ? ordered_json(*m.host_fits) : ordered_json(nullptr);
  if (r.view == View::memory) {
    ordered_json dtypes = ordered_json::array();
    for (const DtypeMemory& d : m.by_dtype) {
      dtypes.push_back({{"dtype", std::string(to_string(d.dtype))},
                        {"tensors", d.tensors},
                        {"params", d.params_per_device}});
    }
    j["by_dtype"] = std::move(dtypes);
    ordered_json largest = ordered_json::array();
    for (const TensorMemory& t : m.largest) {
      const Tensor& tensor = r.manifest.tensors()[t.tensor];
      const TensorSharding& s = r.shardings[t.tensor];
      largest.push_back(
          {{"name", std::string(tensor.name)},
           {"shape", tensor.shape},
           {"dtype", std::string(to_string(tensor.dtype))},
           {"spec", s.spec() ? spec_json(*s.spec()) : ordered_json(nullptr)},
           {"params", t.per_device.params},
           {"grads", t.per_device.grads},
           {"optimizer", t.per_device.optimizer},
           {"total", t.per_device.model_states()}});
    }
    j["largest"] = std::move(largest);
  }
  return j;
}

void append_int(std::string& out, int64_t value) {
  const fmt::format_int text(value);
  out.append(text.data(), text.size());
}

// What an entry of check_json's tensors[] holds after the name follows from
// the tensor's layout (its spec, shape and dtype, and all that follows from
// them: tensors share a layout only when those are equal) and the rule that
// decided it.
struct TailKey {
  const ShardLayout* layout;
  uint32_t decision;  // a plan's; 0 for check

  bool operator==(const TailKey&) const = default;
};

struct TailKeyHash {
  size_t operator()(const TailKey& k) const noexcept {
    return std::hash<const void*>{}(k.layout)
           ^ (size_t{k.decision} * 0x9E3779B97F4A7C15ULL);
  }
};

// Appends check_json's tensors[] at `indent` to `out`, one line per tensor
// (`grep` finds a tensor's whole entry; a diff of two plans shows one line
// per changed tensor), calling flush() after each tensor (it may empty
// `out`).
template <typename Flush>
void append_tensors_json(const CheckReport& r,
                         size_t indent,
                         std::string& out,
                         const Flush& flush) {
  if (r.shardings.empty()) {
    out += "[]";
    return;
  }
  const std::string in1(indent + 2, ' ');
  out += "[\n";
  // A plan's rule descriptions are shared: each is written once.
  std::vector<std::string> rules;
  if (r.plan != nullptr) {
    rules.reserve(r.plan->decisions.size());
    for (const RuleDecision& d : r.plan->decisions) {
      std::string text = "{\"index\": ";
      std::optional<size_t> index = d.rule.rule_index();
      text += index ? std::to_string(*index) : std::string("null");
      text += ", \"description\": ";
      append_json_string(text, d.rule.description);
      text += '}';
      rules.push_back(std::move(text));
    }
  }
  // Everything of an entry after its name, from the tensor's shape, dtype and
  // sharding and the deciding rule.
  auto append_tail = [&](size_t i,
                         const TensorSharding& s,
                         const Tensor& t,
                         std::string& text) {
    text += ", \"shape\": [";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      text += d == 0 ? "" : ", ";
      append_int(text, t.shape[d]);
    }
    text += "], \"dtype\": \"";
    text += to_string(t.dtype);
    text += "\", \"spec\": ";
    if (s.spec() != nullptr) {
      append_spec_json(text, *s.spec(), report_detail::k_one_line);
    } else {
      text += "null";
    }
    text += ", \"rule\": ";
    text +=
        r.plan != nullptr ? rules[r.plan->decision_of[i]] : std::string("null");
    text += ", \"valid\": ";
    text += s.valid() ? "true" : "false";
    text += ", \"bytes\": ";
    append_int(text, t.num_bytes);
    text += ", \"bytes_per_device\": ";
    append_int(text, s.bytes_per_device());
    text += ", \"replicas\": ";
    append_int(text, s.replicas());
    text += '}';
  };
  // Tensors of a shared layout and rule (a plan's experts, its layers) have
  // the same tail: each is written once, for the first few thousand met.
  constexpr size_t k_max_tails = 4096;
  std::unordered_map<TailKey, std::string, TailKeyHash> tails;
  for (size_t i = 0; i < r.shardings.size(); ++i) {
    const TensorSharding& s = r.shardings[i];
    const Tensor& t = r.manifest.tensors()[i];
    out += in1;
    out += "{\"name\": ";
    append_json_string(out, t.name);
    // A tail is shared only by tensors that share a layout: one that no
    // other tensor holds (check's specs) is written directly.
    if (s.layout.use_count() == 1) {
      append_tail(i, s, t, out);
    } else {
      const TailKey key{s.layout.get(),
                        r.plan != nullptr ? r.plan->decision_of[i] : 0};
      if (auto hit = tails.find(key); hit != tails.end()) {
        out += hit->second;
      } else if (tails.size() < k_max_tails) {
        std::string tail;
        append_tail(i, s, t, tail);
        out += tail;
        tails.emplace(key, std::move(tail));
      } else {
        append_tail(i, s, t, out);
      }
    }
    out += i + 1 < r.shardings.size() ? ",\n" : "\n";
    flush();
  }
  out.append(indent, ' ');
  out += ']';
}

}  // namespace

// The end of check's and plan's text: specs, memory per device, capacity and
// the verdict.
std::string summary_text(const CheckReport& r, const Diagnostics& diags) {
  const ShardingTotals s = sharding_totals(r.manifest, r.mesh, r.shardings);
  const MemoryEstimate& m = r.memory;
  std::string out;
  out += fmt::format(
      "  specs: {} valid, {} with problems; {} of {} replicated on "
      "every device\n",
      with_commas(static_cast<int64_t>(r.manifest.size()) - s.invalid),
      with_commas(s.invalid),
      human_bytes(s.replicated_bytes),
      human_bytes(r.manifest.total_bytes()));
  if (r.activations != nullptr) {
    out +=
        fmt::format("  workload: {}\n", workload_text(*r.activations, r.mesh));
  }
  out += fmt::format(
      "  memory per device, {}: params {}, grads {}, optimizer {}, gather "
      "buffer {}{}\n",
      recipe_text(m),
      human_bytes(m.per_device.params),
      human_bytes(m.per_device.grads),
      human_bytes(m.per_device.optimizer),
      human_bytes(m.gather_buffer),
      (m.activations_counted
           ? fmt::format(", activations {}", human_bytes(m.activations))
           : std::string())
          + (step_is_peak(m) ? fmt::format(", optimizer step {}",
                                           human_bytes(m.optimizer_step))
                             : std::string()));
  if (m.placement.placed()) {
    out += fmt::format("  {}\n", placement_line(m));
    for (const std::string& line : stage_lines(m)) {
      out += fmt::format("    {}\n", line);
    }
  }
  out += fmt::format("  {}\n", capacity_line(m, r.activations));
  if (r.step != nullptr) {
    out += fmt::format("  {}\n", step_line(*r.step));
  } else if (r.activations != nullptr) {
    out +=
        "  step: not estimated; give --topology (the devices' peak and "
        "links)\n";
  }
  out += fmt::format("result: {}\n", verdict(diags));
  return out;
}

void write_check_json(const CheckReport& r,
                      const Diagnostics& diags,
                      const WriteText& write) {
  ordered_json j = header(command_name(r.view));
  j["mesh"] = mesh_object(r.mesh);
  if (r.topology != nullptr) {
    j["topology"] = topology_object(*r.topology);
  }
  j["manifest"] = r.manifest.source;
  if (r.plan != nullptr && r.rules != nullptr) {
    j["rules"] = rules_json(*r.rules);
  } else {
    j["specs_file"] = std::string(
        r.specs_source);  // not "specs": that key makes a specs file
  }
  // One entry per tensor: written directly (nlohmann's objects cost a few
  // microseconds each, most of a 100k-tensor plan), in dump()'s layout.
  j["workload"] = workload_object(r.activations, r.mesh);
  j["tensors"] = raw_marker();
  j["diagnostics"] = diagnostics_array(diags);
  j["memory"] = memory_object(r);
  j["step"] = step_object(r.step);
  const ShardingTotals s = sharding_totals(r.manifest, r.mesh, r.shardings);
  j["summary"] = {{"tensors", r.manifest.size()},
                  {"errors", diags.error_count()},
                  {"warnings", diags.warning_count()},
                  {"invalid_tensors", s.invalid},
                  {"parameters", r.manifest.total_elements()},
                  {"total_bytes", r.manifest.total_bytes()},
                  {"replicated_bytes", s.replicated_bytes},
                  {"params_bytes_per_device", r.memory.per_device.params}};
  // A 100k-tensor plan is ~40 MB of text: handed over in pieces.
  write_spliced(dump(j),
                write,
                [&](std::string& piece, const std::function<void()>& flush) {
                  append_tensors_json(r, 2, piece, flush);
                });
}

std::string check_text(const CheckReport& r, const Diagnostics& diags) {
  std::string out =
      fmt::format("{}: {} tensors of {} against {}\n",
                  command_name(r.view),
                  with_commas(static_cast<int64_t>(r.manifest.size())),
                  r.manifest.source,
                  r.specs_source);
  out += fmt::format("  {}\n", mesh_line(r.mesh, r.topology));
  out += summary_text(r, diags);
  return out;
}

std::string check_markdown(const CheckReport& r, const Diagnostics& diags) {
  const MemoryEstimate& m = r.memory;
  const bool ok = diags.error_count() == 0;
  std::string out = fmt::format("## shardplan {}: {} {}\n\n",
                                command_name(r.view),
                                ok ? ":white_check_mark:" : ":x:",
                                verdict(diags));
  const std::string specs =
      r.rules == nullptr      ? fmt::format("specs `{}`", r.specs_source)
      : r.rules->name.empty() ? fmt::format("rules `{}`", r.rules->source)
                              : fmt::format("rules preset `{}`", r.rules->name);
  out += fmt::format("{} tensors of `{}` with {}; {}.\n\n",
                     with_commas(static_cast<int64_t>(r.manifest.size())),
                     r.manifest.source,
                     specs,
                     mesh_line(r.mesh, r.topology));
  out += fmt::format("| memory per device, {} | bytes | |\n|---|---:|---:|\n",
                     recipe_text(m));
  for (const Category& c : categories(m)) {
    out += fmt::format("| {} | {} | {} |\n",
                       c.name,
                       with_commas(c.bytes),
                       human_bytes(c.bytes));
  }
  out += fmt::format("| **total** | **{}** | **{}** |\n",
                     with_commas(m.max_device_total),
                     human_bytes(m.max_device_total));
  if (m.hbm_bytes) {
    out += fmt::format("| usable HBM ({:g}% kept free) | {} | {} |\n",
                       m.headroom * 100,
                       with_commas(*m.capacity_bytes),
                       human_bytes(*m.capacity_bytes));
    out += fmt::format("\n{}: {:.1f}% of HBM. Counts {}.\n",
                       *m.fits ? "Fits" : "**Does not fit**",
                       *m.utilization * 100,
                       counted_text(m, r.activations));
  } else {
    out += fmt::format("\nCounts {}.\n", counted_text(m, r.activations));
  }
  if (r.step != nullptr) {
    out += fmt::format("\nStep {}.\n", step_summary(*r.step));
  }
  out += markdown_findings(diags);
  return out;
}

std::string check_github(const CheckReport& r, const Diagnostics& diags) {
  return github_annotations(diags)
         + fmt::format("shardplan {}: {}; {}\n",
                       command_name(r.view),
                       verdict(diags),
                       capacity_line(r.memory, r.activations));
}

}  // namespace shardplan::report_detail
