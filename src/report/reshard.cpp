#include "report/json.hpp"
#include "report/renderers.hpp"
#include "report/text.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

// `shardplan reshard` as JSON and text (docs/output-schema.md,
// docs/reshard.md).

namespace shardplan::report_detail {

namespace {

// A float as JSON: shortest round-trip form; null if not finite (never for
// a plan's figures: the schema then fails the document).
void append_number(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  fmt::format_to(std::back_inserter(out), "{}", value);
}

void append_strings(std::string& out, const std::vector<std::string>& items) {
  out += '[';
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) {
      out += ", ";
    }
    append_json_string(out, items[i]);
  }
  out += ']';
}

void append_optional(std::string& out, const std::optional<int64_t>& value) {
  if (value) {
    fmt::format_to(std::back_inserter(out), "{}", *value);
  } else {
    out += "null";
  }
}

// {"bytes_per_device": .., "seconds": .., "peak_bytes_per_device": ..} on
// one line.
void append_cost(std::string& out, const PlanCost& cost) {
  fmt::format_to(std::back_inserter(out),
                 "{{\"bytes_per_device\": {}, \"seconds\": ",
                 cost.bytes_per_device);
  append_number(out, cost.seconds);
  fmt::format_to(std::back_inserter(out),
                 ", \"peak_bytes_per_device\": {}}}",
                 cost.peak_bytes_per_device);
}

// A step's "transfers" key and list, one transfer a line, after its
// "seconds" (nothing when it has none). Also what reshard_transfers_size
// measures.
void append_transfers(std::string& out,
                      const ReshardStep& step,
                      const std::string& in) {
  if (step.transfers.empty()) {
    return;
  }
  const auto o = std::back_inserter(out);
  fmt::format_to(o, ",\n{}  \"transfers\": [\n", in);
  for (size_t i = 0; i < step.transfers.size(); ++i) {
    const Transfer& t = step.transfers[i];
    fmt::format_to(o,
                   "{}    {{\"to_device\": {}, \"from_device\": {}, "
                   "\"bytes\": {}, \"box\": [",
                   in,
                   t.to_device,
                   t.from_device,
                   t.bytes);
    for (size_t d = 0; d < t.box.size(); ++d) {
      fmt::format_to(
          o, "{}[{}, {}]", d > 0 ? ", " : "", t.box[d][0], t.box[d][1]);
    }
    out += i + 1 < step.transfers.size() ? "]},\n" : "]}\n";
  }
  fmt::format_to(o, "{}  ]", in);
}

void append_step(std::string& out,
                 const ReshardStep& step,
                 const std::string& in) {
  const auto o = std::back_inserter(out);
  fmt::format_to(o,
                 "{{\n{}  \"op\": \"{}\",\n{}  \"mesh_axes\": ",
                 in,
                 to_string(step.op),
                 in);
  append_strings(out, step.mesh_axes);
  fmt::format_to(o, ",\n{}  \"dim\": ", in);
  append_optional(out, step.dim);
  if (step.op == ReshardOp::all_to_all) {
    fmt::format_to(o, ",\n{}  \"to_dim\": ", in);
    append_optional(out, step.to_dim);
  }
  fmt::format_to(o,
                 ",\n{0}  \"bytes_per_device\": {1},\n{0}  \"link\": "
                 "\"{2}\",\n{0}  \"seconds\": ",
                 in,
                 step.bytes_per_device,
                 to_string(step.link));
  append_number(out, step.seconds);
  append_transfers(out, step, in);
  fmt::format_to(o, "\n{}}}", in);
}

void append_intermediate(std::string& out,
                         const IntermediateSharding& im,
                         const std::string& in) {
  const auto o = std::back_inserter(out);
  fmt::format_to(o, "{{\n{}  \"mesh\": {{\"axes\": [", in);
  for (size_t a = 0; a < im.mesh.axes.size(); ++a) {
    out += a > 0 ? ", " : "";
    out += "{\"name\": ";
    append_json_string(out, im.mesh.axes[a].name);
    fmt::format_to(o, ", \"size\": {}}}", im.mesh.axes[a].size);
  }
  fmt::format_to(o, "]}},\n{}  \"spec\": ", in);
  append_spec_json(out, im.spec, in.size() + 2);
  fmt::format_to(o, ",\n{}  \"replicated_axes\": ", in);
  append_strings(out, im.replicated_axes);
  fmt::format_to(o, "\n{}}}", in);
}

// The indent of a step's keys in tensors[].steps[].
constexpr size_t k_step_indent = 8;

// What tensors[] writes after a tensor's dtype: its plan, from from_spec to
// the closing brace. Tensors sharing a plan share this text.
std::string plan_tail(const TensorReshard& tr) {
  const std::string in1(4, ' ');
  const std::string in2(6, ' ');
  const std::string in3(k_step_indent, ' ');
  std::string out;
  const auto o = std::back_inserter(out);
  fmt::format_to(o, ",\n{}\"from_spec\": ", in2);
  append_spec_json(out, tr.from, in2.size());
  fmt::format_to(o, ",\n{}\"to_spec\": ", in2);
  append_spec_json(out, tr.to, in2.size());
  fmt::format_to(o, ",\n{}\"steps\": [\n", in2);
  for (size_t s = 0; s < tr.steps.size(); ++s) {
    out += in3;
    append_step(out, tr.steps[s], in3);
    out += s + 1 < tr.steps.size() ? ",\n" : "\n";
  }
  fmt::format_to(o,
                 "{}],\n{}\"on_common_mesh\": {},\n{}\"intermediate\": ",
                 in2,
                 in2,
                 tr.on_common_mesh,
                 in2);
  if (tr.intermediate) {
    append_intermediate(out, *tr.intermediate, in2);
  } else {
    out += "null";
  }
  fmt::format_to(
      o,
      ",\n{0}\"from_bytes_per_device\": {1},\n{0}\"to_bytes_per_device\": {2},"
      "\n{0}\"bytes_per_device\": {3},\n{0}\"seconds\": ",
      in2,
      tr.from_bytes_per_device,
      tr.to_bytes_per_device,
      tr.cost.bytes_per_device);
  append_number(out, tr.cost.seconds);
  fmt::format_to(o,
                 ",\n{0}\"peak_bytes_per_device\": {1},\n{0}\"naive\": ",
                 in2,
                 tr.cost.peak_bytes_per_device);
  append_cost(out, tr.naive);
  fmt::format_to(o, "\n{}}}", in1);
  return out;
}

// tensors[] at indent 2, in dump()'s layout; flush() after each tensor.
void append_tensors(const ReshardReport& r,
                    std::string& out,
                    const std::function<void()>& flush) {
  const size_t count = r.plan.size();
  if (count == 0) {
    out += "[]";
    return;
  }
  const std::string in1(4, ' ');
  const std::string in2(6, ' ');
  std::vector<std::string> tails(r.plan.plans.size());
  const auto o = std::back_inserter(out);
  out += "[\n";
  for (size_t i = 0; i < count; ++i) {
    const Tensor& t = r.manifest.tensors()[i];
    std::string& tail = tails[r.plan.plan_of[i]];
    if (tail.empty()) {
      tail = plan_tail(r.plan.tensor(i));
    }
    out += in1;
    out += "{\n";
    out += in2;
    out += "\"name\": ";
    append_json_string(out, t.name);
    fmt::format_to(o,
                   ",\n{0}\"shape\": [{1}],\n{0}\"dtype\": \"{2}\"",
                   in2,
                   fmt::join(t.shape, ", "),
                   to_string(t.dtype));
    out += tail;
    out += i + 1 < count ? ",\n" : "\n";
    flush();
  }
  out += "  ]";
}

ordered_json cost_object(const PlanCost& c) {
  ordered_json j;
  j["bytes_per_device"] = c.bytes_per_device;
  j["seconds"] = c.seconds;
  j["peak_bytes_per_device"] = c.peak_bytes_per_device;
  return j;
}

ordered_json side_object(const Mesh& mesh, const Topology* topology) {
  ordered_json j;
  j["mesh"] = mesh_object(mesh);
  if (topology != nullptr) {
    j["topology"] = topology_object(*topology);
  }
  return j;
}

bool timed(const ReshardReport& r) {
  return r.from_topology != nullptr && r.to_topology != nullptr;
}

// "all_to_all over fsdp + dynamic_slice over tp"; "noop".
std::string steps_text(const TensorReshard& tr) {
  std::string out;
  for (const ReshardStep& step : tr.steps) {
    if (!out.empty()) {
      out += " + ";
    }
    out += to_string(step.op);
    if (!step.mesh_axes.empty()) {
      fmt::format_to(
          std::back_inserter(out), " over {}", fmt::join(step.mesh_axes, ","));
    }
  }
  if (tr.intermediate) {
    fmt::format_to(std::back_inserter(out),
                   " (via {} on {})",
                   to_short(tr.intermediate->spec),
                   to_string(tr.intermediate->mesh));
  }
  return out;
}

// "64.00 MiB/device, 0.7 ms"; without topologies, the bytes alone.
std::string cost_text(const ReshardReport& r, const PlanCost& c) {
  std::string out = fmt::format("{}/device", human_bytes(c.bytes_per_device));
  if (timed(r)) {
    out += fmt::format(", {}", seconds_text(c.seconds));
  }
  return out;
}

}  // namespace

void write_reshard_json(const ReshardReport& r,
                        const Diagnostics& diags,
                        const WriteText& write) {
  ordered_json j = header("reshard");
  j["from"] = side_object(r.from_mesh, r.from_topology);
  j["to"] = side_object(r.to_mesh, r.to_topology);
  j["manifest"] = r.manifest.source;
  j["donate"] = r.options.donate;
  j["partial"] = r.options.partial;
  j["same_mesh"] = r.plan.same_mesh;
  j["same_devices"] = r.options.same_devices;
  const TransferNetwork network = r.options.network();
  const std::vector<TransferLinkFigure> links = transfer_links(network);
  if (links.empty()) {
    j["transfer_link"] = nullptr;
    j["transfer_model"] = nullptr;
  } else {
    // The first (fastest) link class, as before the model had several.
    j["transfer_link"] = {{"link", std::string(to_string(links[0].link))},
                          {"bytes_per_s", links[0].bytes_per_s},
                          {"latency_s", links[0].latency_s}};
    ordered_json model;
    model["links"] = ordered_json::array();
    for (const TransferLinkFigure& l : links) {
      model["links"].push_back({{"link", std::string(to_string(l.link))},
                                {"between", std::string(l.between)},
                                {"per", std::string(l.per)},
                                {"bytes_per_s", l.bytes_per_s},
                                {"latency_s", l.latency_s}});
    }
    model["assumptions"] = ordered_json::array();
    for (std::string_view a : transfer_assumptions(network)) {
      model["assumptions"].push_back(std::string(a));
    }
    j["transfer_model"] = std::move(model);
  }
  if (r.plan.common) {
    const CommonMesh& c = *r.plan.common;
    ordered_json common;
    common["mesh"] = mesh_object(c.mesh);
    auto parts = [](const Mesh& mesh,
                    const std::vector<std::vector<std::string>>& lists) {
      ordered_json out = ordered_json::object();
      for (size_t k = 0; k < mesh.axes.size(); ++k) {
        out[mesh.axes[k].name] = lists[k];
      }
      return out;
    };
    common["from_axes"] = parts(r.from_mesh, c.from_axes);
    common["to_axes"] = parts(r.to_mesh, c.to_axes);
    common["fixed"] = ordered_json::object();
    for (const auto& [name, index] : c.fixed) {
      common["fixed"][name] = index;
    }
    j["common_mesh"] = std::move(common);
  } else {
    j["common_mesh"] = nullptr;
  }
  j["tensors"] = raw_marker();
  j["totals"] = cost_object(r.plan.totals);
  j["naive_totals"] = cost_object(r.plan.naive_totals);
  const PlanCost& p = r.plan.totals;
  const PlanCost& n = r.plan.naive_totals;
  j["saved"] = cost_object({n.bytes_per_device - p.bytes_per_device,
                            n.seconds - p.seconds,
                            n.peak_bytes_per_device - p.peak_bytes_per_device});
  j["summary"] = {{"tensors", r.manifest.size()},
                  {"errors", diags.error_count()},
                  {"warnings", diags.warning_count()}};
  j["diagnostics"] = diagnostics_array(diags);

  // 100k tensors are ~70 MB of text: handed over in pieces.
  write_spliced(dump(j),
                write,
                [&](std::string& piece, const std::function<void()>& flush) {
                  append_tensors(r, piece, flush);
                });
}

namespace {

// reshard_text's line under the meshes: where the collectives run, the
// links transfers take, pending sums, donation, and whether times are known.
std::vector<std::string> reshard_notes(const ReshardReport& r) {
  std::vector<std::string> notes;
  bool between = !r.plan.same_mesh;  // some plan sends between the meshes
  for (const TensorReshard& tr : r.plan.plans) {
    between = between || (r.plan.common && !tr.on_common_mesh);
  }
  if (r.plan.common) {
    const CommonMesh& c = *r.plan.common;
    std::vector<std::string> how;
    auto describe = [&](const char* side,
                        const Mesh& mesh,
                        const std::vector<std::vector<std::string>>& lists) {
      for (size_t k = 0; k < mesh.axes.size(); ++k) {
        if (lists[k].size() > 1
            || (lists[k].size() == 1 && lists[k][0] != mesh.axes[k].name)) {
          how.push_back(fmt::format(
              "{} {} = {}", side, mesh.axes[k].name, fmt::join(lists[k], ",")));
        }
      }
    };
    describe("from", r.from_mesh, c.from_axes);
    describe("to", r.to_mesh, c.to_axes);
    for (const auto& [name, index] : c.fixed) {
      how.push_back(fmt::format("from {} fixed at {}", name, index));
    }
    notes.push_back(
        fmt::format("collectives on the common mesh {}{}",
                    to_string(c.mesh),
                    how.empty() ? std::string()
                                : fmt::format(" ({})", fmt::join(how, "; "))));
  } else {
    notes.emplace_back(r.plan.same_mesh ? "collectives on one mesh"
                                        : (r.options.same_devices
                                               ? "between meshes, same devices"
                                               : "between device sets"));
  }
  if (between) {
    std::vector<std::string> over;
    for (const TransferLinkFigure& l : transfer_links(r.options.network())) {
      over.push_back(fmt::format("{} between {} at {} per {}",
                                 to_string(l.link),
                                 l.between,
                                 rate_text(l.bytes_per_s),
                                 l.per));
    }
    if (!over.empty()) {
      notes.push_back(fmt::format("{}transfers over {}",
                                  r.plan.common ? "where cheaper, " : "",
                                  fmt::join(over, ", ")));
    }
  }
  if (!r.options.partial.empty()) {
    notes.push_back(
        fmt::format("pending sums over {}", fmt::join(r.options.partial, ",")));
  }
  if (r.options.donate) {
    notes.emplace_back("source buffers donated");
  }
  if (!timed(r)) {
    notes.emplace_back("no topology: no times");
  }
  return notes;
}

// One row per tensor (folded where rows repeat): its specs, steps and cost.
std::string reshard_rows_text(const ReshardReport& r) {
  const auto& tensors = r.manifest.tensors();
  std::string out;
  // Tensors that share a plan share the rest of their row: formatted once
  // per plan, and viewed by the rows.
  std::vector<std::string> rests(r.plan.plans.size());
  for (size_t p = 0; p < rests.size(); ++p) {
    const TensorReshard& tr = r.plan.plans[p];
    rests[p] = fmt::format("{} -> {}: {}, {}",
                           to_short(tr.from),
                           to_short(tr.to),
                           steps_text(tr),
                           cost_text(r, tr.cost));
  }
  std::vector<NameRowRef> rows;
  rows.reserve(r.plan.size());
  for (size_t t = 0; t < r.plan.size(); ++t) {
    rows.push_back({tensors[t].name, rests[r.plan.plan_of[t]]});
  }
  for (const FoldedRow& row : fold_row_refs(rows)) {
    out += fmt::format(
        "  {}: {}{}\n",
        row.name,
        row.rest,
        row.count > 1 ? fmt::format(" (x{})", row.count) : std::string());
  }

  return out;
}

// The plan's totals beside the naive gather-then-slice.
std::string reshard_totals_text(const ReshardReport& r) {
  std::string out;
  const PlanCost& p = r.plan.totals;
  const PlanCost& n = r.plan.naive_totals;
  std::vector<std::vector<std::string>> totals = {
      {"", "moved/device", "", "time", "peak/device", ""}};
  auto total_row = [&](const char* label, const PlanCost& c) {
    totals.push_back({label,
                      with_commas(c.bytes_per_device),
                      human_bytes(c.bytes_per_device),
                      timed(r) ? seconds_text(c.seconds) : "-",
                      with_commas(c.peak_bytes_per_device),
                      human_bytes(c.peak_bytes_per_device)});
  };
  total_row("plan", p);
  total_row("naive", n);
  total_row("saved",
            {n.bytes_per_device - p.bytes_per_device,
             n.seconds - p.seconds,
             n.peak_bytes_per_device - p.peak_bytes_per_device});
  out += "\ntotals (naive: all_gather to replicated, then slice):\n";
  out += table(totals);

  return out;
}

// The ten most expensive tensors, when there is more than one.
std::string reshard_expensive_text(const ReshardReport& r) {
  const auto& tensors = r.manifest.tensors();
  std::string out;
  // The most expensive tensors: by seconds, then bytes, then manifest order.
  std::vector<size_t> order(r.plan.size());
  std::iota(order.begin(), order.end(), size_t{0});
  const size_t top = std::min<size_t>(10, order.size());
  auto planned = [&](size_t t) -> const TensorReshard& {
    return r.plan.tensor(t);
  };
  std::partial_sort(order.begin(),
                    order.begin() + static_cast<std::ptrdiff_t>(top),
                    order.end(),
                    [&](size_t a, size_t b) {
                      if (planned(a).cost.seconds != planned(b).cost.seconds) {
                        return planned(a).cost.seconds
                               > planned(b).cost.seconds;
                      }
                      if (planned(a).cost.bytes_per_device
                          != planned(b).cost.bytes_per_device) {
                        return planned(a).cost.bytes_per_device
                               > planned(b).cost.bytes_per_device;
                      }
                      return a < b;
                    });
  if (top > 1) {
    out += fmt::format("\nmost expensive tensors ({}):\n", top);
    std::vector<std::vector<std::string>> big = {
        {"tensor", "steps", "moved/device", "time", "peak/device"}};
    for (size_t i = 0; i < top; ++i) {
      const TensorReshard& tr = planned(order[i]);
      big.push_back({std::string(tensors[order[i]].name),
                     steps_text(tr),
                     human_bytes(tr.cost.bytes_per_device),
                     timed(r) ? seconds_text(tr.cost.seconds) : "-",
                     human_bytes(tr.cost.peak_bytes_per_device)});
    }
    out += table(big);
  }
  return out;
}

}  // namespace

std::string reshard_text(const ReshardReport& r, const Diagnostics& diags) {
  std::string out =
      fmt::format("reshard: {} tensor{} of {}\n",
                  with_commas(static_cast<int64_t>(r.manifest.size())),
                  r.manifest.size() == 1 ? "" : "s",
                  r.manifest.source);
  out += fmt::format("  from {}\n", mesh_line(r.from_mesh, r.from_topology));
  out += fmt::format("  to   {}\n", mesh_line(r.to_mesh, r.to_topology));
  out += fmt::format("  {}\n\n", fmt::join(reshard_notes(r), "; "));
  out += reshard_rows_text(r);
  out += reshard_totals_text(r);
  out += reshard_expensive_text(r);
  out += fmt::format("result: {}\n", verdict(diags));
  return out;
}

}  // namespace shardplan::report_detail

namespace shardplan {

TransfersSize reshard_transfers_size(const ReshardReport& report) {
  // Each distinct plan's lists formatted once, as tensors[] writes them,
  // then counted for every tensor that has the plan.
  const std::string in(report_detail::k_step_indent, ' ');
  std::vector<TransfersSize> of_plan(report.plan.plans.size());
  std::string text;
  for (size_t p = 0; p < report.plan.plans.size(); ++p) {
    for (const ReshardStep& step : report.plan.plans[p].steps) {
      text.clear();
      report_detail::append_transfers(text, step, in);
      of_plan[p].transfers += static_cast<int64_t>(step.transfers.size());
      of_plan[p].json_bytes += static_cast<int64_t>(text.size());
    }
  }
  // Saturated: a figure past int64 is over any threshold all the same.
  auto add = [](int64_t a, int64_t b) {
    return checked_add(a, b).value_or(std::numeric_limits<int64_t>::max());
  };
  TransfersSize total;
  for (uint32_t p : report.plan.plan_of) {
    total.transfers = add(total.transfers, of_plan[p].transfers);
    total.json_bytes = add(total.json_bytes, of_plan[p].json_bytes);
  }
  return total;
}

}  // namespace shardplan
