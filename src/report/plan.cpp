#include "report/json.hpp"
#include "report/renderers.hpp"
#include "report/text.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <cassert>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

// `shardplan plan` as text (its JSON, markdown and github are check's:
// report/check.cpp), `plan --explain` and `plan --rules list`.

namespace shardplan::report_detail {

std::string plan_text(const CheckReport& r, const Diagnostics& diags) {
  assert(r.rules != nullptr);  // a plan's report has its rules
  std::string out =
      fmt::format("plan: {} tensors of {} with {}\n",
                  with_commas(static_cast<int64_t>(r.manifest.size())),
                  r.manifest.source,
                  rules_text(*r.rules));
  out += fmt::format("  {}\n", mesh_line(r.mesh, r.topology));

  // Groups in order of the deciding rule (rules by index, then scalars,
  // min_size and unmatched), each group's rows folded across layers. The
  // group of each decision is found once, not per tensor.
  const std::vector<RuleDecision>& decisions = r.plan->decisions;
  std::map<std::pair<int, size_t>, size_t> group_of_rule;
  for (const RuleDecision& d : decisions) {
    group_of_rule.try_emplace({static_cast<int>(d.rule.decider), d.rule.index},
                              0);
  }
  size_t next = 0;
  for (auto& [rule, group] : group_of_rule) {
    group = next++;
  }
  std::vector<size_t> group_of_decision(decisions.size());
  for (size_t d = 0; d < decisions.size(); ++d) {
    group_of_decision[d] = group_of_rule.at(
        {static_cast<int>(decisions[d].rule.decider), decisions[d].rule.index});
  }
  std::vector<std::vector<size_t>> groups(group_of_rule.size());
  for (size_t t = 0; t < r.shardings.size(); ++t) {
    groups[group_of_decision[r.plan->decision_of[t]]].push_back(t);
  }
  constexpr char k_sep = '\x1f';
  // The shape, dtype, spec and bytes columns of each layout (its strings
  // stay where they are while rows view them).
  std::unordered_map<const ShardLayout*, std::string> rests;
  for (const std::vector<size_t>& members : groups) {
    if (members.empty()) {
      continue;
    }
    const RuleRef& rule = r.plan->rule(members.front());
    out += fmt::format("\n{}: {} tensor{}\n",
                       rule.description,
                       with_commas(static_cast<int64_t>(members.size())),
                       members.size() == 1 ? "" : "s");
    std::vector<NameRowRef> rows;
    rows.reserve(members.size());
    for (size_t t : members) {
      const Tensor& tensor = r.manifest.tensors()[t];
      const TensorSharding& sh = r.shardings[t];
      // Tensors that share a layout share shape, dtype and spec: their
      // columns are formatted once.
      auto [cached, inserted] = rests.try_emplace(sh.layout.get());
      if (inserted) {
        const PartitionSpec* spec = sh.spec();
        cached->second =
            fmt::format("{}{}{}{}{}{}{}",
                        shape_text(tensor.shape),
                        k_sep,
                        to_string(tensor.dtype),
                        k_sep,
                        spec ? to_short(*spec) : std::string("(invalid)"),
                        k_sep,
                        human_bytes(sh.bytes_per_device()));
      }
      rows.push_back({tensor.name, cached->second});
    }
    std::vector<std::vector<std::string>> cells = {
        {"  tensor", "count", "shape", "dtype", "spec", "per device"}};
    for (const FoldedRow& row : fold_row_refs(rows)) {
      std::vector<std::string> line = {
          "  " + row.name,
          row.count == 1 ? std::string() : fmt::format("x{}", row.count)};
      size_t start = 0;
      for (;;) {
        size_t sep = row.rest.find(k_sep, start);
        line.push_back(row.rest.substr(
            start, sep == std::string::npos ? sep : sep - start));
        if (sep == std::string::npos) {
          break;
        }
        start = sep + 1;
      }
      cells.push_back(std::move(line));
    }
    out += table(cells);
  }

  out += '\n';
  out += summary_text(r, diags);
  return out;
}

namespace {

ordered_json trace_json(const Trace& trace) {
  ordered_json steps = ordered_json::array();
  for (const TraceStep& step : trace) {
    ordered_json e;
    e["text"] = step.text;
    e["dim"] = step.dim ? ordered_json(*step.dim) : ordered_json(nullptr);
    e["axes"] = step.axes;
    e["ok"] = step.ok ? ordered_json(*step.ok) : ordered_json(nullptr);
    e["chosen"] = step.chosen;
    steps.push_back(std::move(e));
  }
  return steps;
}

}  // namespace

std::string explain_json(const ExplainReport& report) {
  const RuleTrace& trace = report.trace;
  const RuleSet& rules = report.rules;
  const Mesh& mesh = report.mesh;
  ordered_json j = header("plan");
  j["mesh"] = mesh_object(mesh);
  j["rules"] = rules_json(rules);
  ordered_json t;
  t["name"] = trace.tensor;
  t["shape"] = trace.shape;
  t["dtype"] = std::string(to_string(trace.dtype));
  t["elements"] = trace.num_elements;
  t["bytes"] = trace.num_bytes;
  if (trace.logical_axes) {
    ordered_json names = ordered_json::array();
    for (const auto& name : *trace.logical_axes) {
      names.push_back(name ? ordered_json(*name) : ordered_json(nullptr));
    }
    t["logical_axes"] = std::move(names);
  } else {
    t["logical_axes"] = nullptr;
  }
  j["tensor"] = std::move(t);
  j["before"] = trace_json(trace.before);
  ordered_json steps = ordered_json::array();
  for (const RuleStep& step : trace.rules) {
    ordered_json e;
    e["index"] = step.index;
    e["description"] = step.description;
    e["matched"] = step.matched;
    e["outcome"] = std::string(to_string(step.outcome));
    e["reason"] = step.reason;
    e["spec"] = step.spec ? spec_json(*step.spec) : ordered_json(nullptr);
    e["steps"] = trace_json(step.steps);
    steps.push_back(std::move(e));
  }
  j["rules_tried"] = std::move(steps);
  std::optional<size_t> index = trace.result.rule.rule_index();
  j["result"] = {
      {"spec", spec_json(trace.result.spec)},
      {"rule",
       {{"index", index ? ordered_json(*index) : ordered_json(nullptr)},
        {"description", trace.result.rule.description}}}};
  return dump(j);
}

std::string explain_text(const ExplainReport& report) {
  const RuleTrace& trace = report.trace;
  const RuleSet& rules = report.rules;
  const Mesh& mesh = report.mesh;
  std::string out = fmt::format("{}: {} {}, {} elements, {}\n",
                                trace.tensor,
                                shape_text(trace.shape),
                                to_string(trace.dtype),
                                with_commas(trace.num_elements),
                                human_bytes(trace.num_bytes));
  if (trace.logical_axes) {
    std::vector<std::string> names;
    for (const auto& name : *trace.logical_axes) {
      names.push_back(name.value_or("None"));
    }
    out += fmt::format("  logical axes: {}\n", fmt::join(names, ", "));
  }
  out += fmt::format("  mesh {}; {}\n", to_string(mesh), rules_text(rules));
  for (const TraceStep& step : trace.before) {
    out += fmt::format("  {}\n", step.text);
  }
  for (const RuleStep& step : trace.rules) {
    out += fmt::format("\n{}: {}", step.description, to_string(step.outcome));
    if (!step.reason.empty()) {
      out += fmt::format(" ({})", step.reason);
    }
    if (step.spec) {
      out += fmt::format(" -> {}", to_short(*step.spec));
    }
    out += "\n";
    for (const TraceStep& t : step.steps) {
      out += fmt::format(
          "  {} {}\n", t.chosen ? "*" : (t.ok && !*t.ok ? "x" : "-"), t.text);
    }
  }
  out += fmt::format("\nresult: {} ({})\n",
                     to_short(trace.result.spec),
                     trace.result.rule.description);
  return out;
}

std::string preset_list_json(const PresetListReport& report) {
  ordered_json j = header("plan");
  ordered_json list = ordered_json::array();
  for (const RulePreset& p : report.presets) {
    list.push_back(
        {{"name", p.name}, {"rules", p.rules}, {"description", p.description}});
  }
  j["presets"] = std::move(list);
  return dump(j);
}

std::string preset_list_text(const PresetListReport& report) {
  std::string out;
  for (const RulePreset& p : report.presets) {
    out += fmt::format("{}  ({} rules)\n", p.name, p.rules);
    // The description, wrapped at 78 columns under a 2-space indent.
    std::string line;
    size_t start = 0;
    while (start < p.description.size()) {
      size_t end = p.description.find(' ', start);
      std::string_view word =
          std::string_view(p.description)
              .substr(
                  start,
                  end == std::string::npos ? std::string::npos : end - start);
      if (!line.empty() && line.size() + 1 + word.size() > 76) {
        out += fmt::format("  {}\n", line);
        line.clear();
      }
      if (!word.empty()) {
        line += line.empty() ? std::string(word) : fmt::format(" {}", word);
      }
      start = end == std::string::npos ? p.description.size() : end + 1;
    }
    if (!line.empty()) {
      out += fmt::format("  {}\n", line);
    }
  }
  return out;
}

}  // namespace shardplan::report_detail
