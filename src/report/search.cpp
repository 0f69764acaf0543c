#include "report/json.hpp"
#include "report/renderers.hpp"
#include "report/text.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <string>
#include <vector>

// `shardplan search` as text and JSON (docs/search.md).

namespace shardplan::report_detail {

namespace {

ordered_json optional_number(const std::optional<double>& v) {
  return v ? ordered_json(*v) : ordered_json(nullptr);
}

ordered_json candidate_json(const SearchCandidate& c) {
  ordered_json j;
  j["rank"] = c.rank ? ordered_json(*c.rank) : ordered_json(nullptr);
  j["slice"] = c.topology;
  j["mesh"] = c.mesh;
  j["dcn"] = c.dcn;
  j["remat"] = c.remat;
  j["per_device_batch"] = c.per_device_batch.empty()
                              ? ordered_json(nullptr)
                              : ordered_json(c.per_device_batch);
  j["fits"] = c.fits;
  j["memory"] = {
      {"per_device",
       {{"params", c.per_device.params},
        {"grads", c.per_device.grads},
        {"optimizer", c.per_device.optimizer},
        {"gather_buffer", c.gather_buffer},
        {"activations", c.activations},
        {"total", c.max_device_total}}},
      {"max_device_total", c.max_device_total},
      {"prefetch_dropped", c.prefetch_dropped},
      {"hbm_bytes",
       c.hbm_bytes ? ordered_json(*c.hbm_bytes) : ordered_json(nullptr)},
      {"capacity_bytes",
       c.capacity_bytes ? ordered_json(*c.capacity_bytes)
                        : ordered_json(nullptr)},
      {"utilization", optional_number(c.utilization)}};
  if (c.step) {
    j["step"] = {
        {"step_seconds", c.step->step_seconds},
        {"mfu", c.step->mfu},
        {"tokens_per_second_per_device", c.step->tokens_per_second_per_device},
        {"bottleneck", bottleneck_text(*c.step)}};
  } else {
    j["step"] = nullptr;
  }
  j["dropped"] =
      c.dropped ? ordered_json({{"reason", std::string(to_string(*c.dropped))},
                                {"message", c.message}})
                : ordered_json(nullptr);
  return j;
}

}  // namespace

std::string search_json(const SearchReport& r, const Diagnostics& diags) {
  ordered_json j = header("search");
  j["topology"] = topology_object(r.topology);
  ordered_json slices = ordered_json::array();
  for (const Topology& t : r.slices) {
    slices.push_back(t.name);
  }
  j["slices"] = std::move(slices);
  j["model"] = std::string(r.model);
  const std::optional<int64_t>& batch = r.workload.batch.value;
  j["workload"] = {
      {"seq", r.workload.seq.value},
      {"batch", batch ? ordered_json(*batch) : ordered_json(nullptr)},
      {"microbatches", r.workload.microbatches.value}};
  j["objective"] = std::string(to_string(r.objective));
  j["meshes"] = r.result.meshes;
  ordered_json candidates = ordered_json::array();
  for (const SearchCandidate& c : r.result.candidates) {
    candidates.push_back(candidate_json(c));
  }
  j["candidates"] = std::move(candidates);
  ordered_json counts = ordered_json::object();
  for (const auto& [reason, n] : r.result.dropped_counts) {
    counts[reason] = n;
  }
  j["dropped_counts"] = std::move(counts);
  j["diagnostics"] = diagnostics_array(diags);
  return j.dump(2) + "\n";
}

std::string search_text(const SearchReport& r, const Diagnostics& diags) {
  (void)diags;
  const SearchResult& res = r.result;
  std::string out = fmt::format(
      "search: {} meshes of {} on {}, {} candidates, {} fit; ranked by {}\n\n",
      res.meshes,
      r.model,
      slices_summary(r.slices),
      res.candidates.size(),
      res.ranked().size(),
      to_string(r.objective));
  // Over several slices (--devices) each candidate names its slice.
  const bool several = r.slices.size() > 1;
  std::vector<std::vector<std::string>> rows = {{"rank",
                                                 "mesh",
                                                 "remat",
                                                 "memory",
                                                 "of HBM",
                                                 "step",
                                                 "tokens/s/dev",
                                                 "MFU",
                                                 "bottleneck"}};
  for (const SearchCandidate& c : res.candidates) {
    if (!c.rank || static_cast<size_t>(*c.rank) > r.top) {
      continue;
    }
    const StepEstimate* s = c.step ? &*c.step : nullptr;
    std::string mesh = c.mesh;
    if (!c.dcn.empty()) {
      mesh += fmt::format(" (dcn {})", c.dcn);
    }
    std::string remat = c.remat;
    if (!c.per_device_batch.empty()) {
      remat += fmt::format(", {}/dev", c.per_device_batch);
    }
    rows.push_back(
        {std::to_string(*c.rank),
         mesh,
         remat,
         human_bytes(c.max_device_total),
         c.utilization ? fmt::format("{:.1f}%", *c.utilization * 100) : "-",
         s ? seconds_text(s->step_seconds) : "-",
         s ? with_commas(static_cast<int64_t>(
             std::llround(s->tokens_per_second_per_device)))
           : "-",
         s ? fmt::format("{:.1f}%", s->mfu * 100) : "-",
         s ? std::string(bottleneck_kind_text(s->bottleneck.kind)) : "-"});
    if (several) {
      rows.back().insert(rows.back().begin() + 1, c.topology);
    }
  }
  if (several) {
    rows.front().insert(rows.front().begin() + 1, "slice");
  }
  if (rows.size() > 1) {
    out += table(rows);
  } else {
    out += "no candidate fits\n";
  }
  if (!res.dropped_counts.empty()) {
    std::vector<std::string> counts;
    for (const auto& [reason, n] : res.dropped_counts) {
      counts.push_back(fmt::format("{} {}", n, reason));
    }
    out += fmt::format("\ndropped: {}\n", fmt::join(counts, ", "));
    // The first candidate dropped for each reason, with why (its message's
    // first sentence; JSON has it whole): for a user deciding what to
    // change (over HBM: the closest miss).
    for (DropReason reason : {DropReason::layout,
                              DropReason::indivisible,
                              DropReason::plan,
                              DropReason::over_hbm}) {
      for (const SearchCandidate& c : res.candidates) {
        if (c.dropped == reason) {
          out += fmt::format("first {}: {}{} ({}): {}\n",
                             reason == DropReason::over_hbm
                                 ? std::string_view("over HBM")
                                 : to_string(reason),
                             several ? c.topology + " " : std::string(),
                             c.mesh,
                             c.remat,
                             first_sentence(c.message));
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace shardplan::report_detail

namespace shardplan {

CheckReport search_winner_report(const SearchResult& result,
                                 const Manifest& manifest,
                                 const RuleSet& rules,
                                 const Provenance& provenance) {
  const WinnerPlan& plan = *result.winner_plan;
  return CheckReport{View::plan,
                     result.winner_mesh->mesh,
                     result.winner_slice,
                     manifest,
                     rules.source,
                     plan.shardings,
                     plan.memory,
                     &rules,
                     &plan.rules,
                     &plan.activations,
                     &plan.step,
                     &result.winner_mesh->layout,
                     &provenance};
}

std::string search_winner_note(const SearchResult& result,
                               SearchObjective objective) {
  const SearchCandidate& w = *result.winner();
  return fmt::format(
      "search's winner, rank 1 of {} by {}: plan --mesh {}{} --remat {}{}",
      result.ranked().size(),
      to_string(objective),
      w.mesh,
      w.dcn.empty() ? std::string() : " --dcn " + w.dcn,
      w.remat,
      w.per_device_batch.empty() ? std::string()
                                 : " --per-device-batch " + w.per_device_batch);
}

}  // namespace shardplan
