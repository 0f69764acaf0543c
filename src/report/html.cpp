#include "report/html.hpp"

#include "report/renderers.hpp"
#include "report/text.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

// Every command's --format html (docs/html.md): one
// self-contained page per report, built from report/html_page.cpp's pieces.

namespace shardplan::report_detail {

namespace {

// The members of a folded group listed under its name, at most.
constexpr size_t k_listed_members = 64;
// Diagnostics listed, at most (the rest are counted; --format json has all).
constexpr size_t k_listed_diagnostics = 500;

std::string title_block(std::string_view heading,
                        const std::vector<std::string>& lines,
                        const Diagnostics* diags) {
  std::string out = "<header>\n<h1>";
  append_html(out, heading);
  out += "</h1>\n";
  out += summary_list(lines);
  if (diags != nullptr) {
    out += fmt::format("<div class=\"verdict {}\">result: {}</div>\n",
                       diags->error_count() == 0 ? "ok" : "bad",
                       html(verdict(*diags)));
  }
  out += "</header>\n";
  return out;
}

// Where a tensor's diagnostics link: the row of its folded group.
std::string row_id(size_t row) {
  return fmt::format("row-{}", row);
}

// The diagnostics as a list, each linking to the row of its tensor
// (`row_of` maps a tensor's name to its row), at most
// k_listed_diagnostics.
template <typename RowOf>
std::string diagnostics_section(const Diagnostics& diags, const RowOf& row_of) {
  if (diags.items().empty()) {
    return "";
  }
  std::string out = section_start(
      "diagnostics",
      fmt::format("Diagnostics ({})",
                  with_commas(static_cast<int64_t>(diags.items().size()))));
  out += "<ol class=\"diagnostics\">\n";
  size_t shown = 0;
  for (size_t i = 0; i < diags.items().size(); ++i) {
    const Diagnostic& d = diags.items()[i];
    if (shown++ == k_listed_diagnostics) {
      break;
    }
    const std::string_view severity = to_string(d.severity);
    fmt::format_to(std::back_inserter(out),
                   "<li id=\"diag-{}\" data-code=\"{}\"><span "
                   "class=\"sev-{}\">{}</span> <code>{}</code> ",
                   i,
                   html(d.code),
                   html(severity),
                   html(severity),
                   html(d.code));
    if (d.tensor) {
      const std::optional<size_t> row = row_of(*d.tensor);
      if (row) {
        fmt::format_to(std::back_inserter(out),
                       "<a href=\"#{}\" class=\"tensor-link\"><code>{}</code>"
                       "</a>: ",
                       row_id(*row),
                       html(*d.tensor));
      } else {
        fmt::format_to(
            std::back_inserter(out), "<code>{}</code>: ", html(*d.tensor));
      }
    }
    append_html(out, message_with_hint(d));
    if (!d.location.source.empty()) {
      out += " <span class=\"muted\">(";
      append_html(out, d.location.source);
      if (d.location.line > 0) {
        out += fmt::format(":{}:{}", d.location.line, d.location.column);
      }
      out += ")</span>";
    }
    out += "</li>\n";
  }
  out += "</ol>\n";
  if (diags.items().size() > k_listed_diagnostics) {
    out += fmt::format(
        "<p class=\"muted\">{} more not listed; --format json has them "
        "all.</p>\n",
        with_commas(
            static_cast<int64_t>(diags.items().size() - k_listed_diagnostics)));
  }
  if (diags.dropped() > 0) {
    out += fmt::format(
        "<p class=\"muted\">{} more errors not kept "
        "(--max-errors).</p>\n",
        with_commas(static_cast<int64_t>(diags.dropped())));
  }
  out += k_section_end;
  return out;
}

// The name cell of a folded row: the name, or the folded name with its
// members listed under a <details> (at most k_listed_members).
template <typename NameOf>
std::string name_cell(const FoldedRow& row, const NameOf& name_of) {
  std::string out = "<td class=\"name\">";
  if (row.count == 1) {
    out += "<code>";
    append_html(out, row.name);
    out += "</code></td>";
    return out;
  }
  out += "<details><summary><code>";
  append_html(out, row.name);
  out += "</code></summary><ul>";
  for (size_t i = 0; i < row.members.size() && i < k_listed_members; ++i) {
    out += "<li><code>";
    append_html(out, name_of(row.members[i]));
    out += "</code></li>";
  }
  out += "</ul>";
  if (row.members.size() > k_listed_members) {
    out += fmt::format("<span class=\"muted\">and {} more</span>",
                       with_commas(static_cast<int64_t>(row.members.size()
                                                        - k_listed_members)));
  }
  out += "</details></td>";
  return out;
}

// What the filter box matches in a row: its name (folded) and the members
// its cell lists.
template <typename NameOf>
std::string filter_name(const FoldedRow& row, const NameOf& name_of) {
  std::string out = row.name;
  for (size_t i = 1; i < row.members.size() && i < k_listed_members; ++i) {
    out += ' ';
    out += name_of(row.members[i]);
  }
  if (row.count == 1) {
    return out;
  }
  out += ' ';
  out += name_of(row.members[0]);
  return out;
}

std::string step_section(const StepEstimate& e) {
  std::string out = section_start("step", "Training step per device");
  out += plain_table(step_rows(e));
  out += "<p>" + html(step_line(e)) + "</p>\n";
  out += "<p class=\"muted\">"
         + html(fmt::format("assumed: {} (docs/step.md)", step_assumptions(e)))
         + "</p>\n";
  out += k_section_end;
  return out;
}

std::string activations_section(const ActivationEstimate& a,
                                const MemoryEstimate& m) {
  const int64_t stage = activations_stage(a, m);
  std::string out = section_start(
      "activations",
      a.stages > 1 ? fmt::format(
          "Activations per device, stage {} of {}", stage, a.stages)
                   : std::string("Activations per device"));
  out += plain_table(activation_rows(a, stage));
  out += "<p class=\"muted\">"
         + html(fmt::format("symbols: {} (docs/memory.md, \"Activations\")",
                            activation_symbols(a)))
         + "</p>\n";
  out += k_section_end;
  return out;
}

// A key of what a tensor row shows after its name: equal keys, equal rows.
struct RowKey {
  const ShardLayout* layout;
  uint32_t decision;
  bool operator<(const RowKey& o) const {
    return layout != o.layout ? layout < o.layout : decision < o.decision;
  }
};

// The per-tensor table of check, memory and plan: a row per folded group,
// sortable and filterable. Sets `row_of_tensor` (each tensor's row).
std::string tensors_section(
    const CheckReport& r,
    const std::vector<size_t>& diag_count,
    const std::vector<std::optional<size_t>>& first_diag,
    std::vector<size_t>& row_of_tensor,
    std::vector<FoldedRow>& folded) {
  const auto& tensors = r.manifest.tensors();
  constexpr char k_sep = '\x1f';
  // The columns after the name, formatted once per layout and rule (as
  // plan's text does), and compared as text by the fold.
  std::map<RowKey, std::string> rests;
  std::vector<NameRowRef> rows;
  rows.reserve(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorSharding& sh = r.shardings[t];
    const uint32_t decision = r.plan != nullptr ? r.plan->decision_of[t] : 0;
    auto [it, inserted] = rests.try_emplace(RowKey{sh.layout.get(), decision});
    if (inserted) {
      const PartitionSpec* spec = sh.spec();
      it->second = fmt::format(
          "{}{}{}{}{}{}{}{}{}",
          shape_text(tensors[t].shape),
          k_sep,
          to_string(tensors[t].dtype),
          k_sep,
          spec != nullptr ? to_short(*spec) : std::string("(invalid)"),
          k_sep,
          sh.bytes_per_device(),
          k_sep,
          r.plan != nullptr ? r.plan->rule(t).description : std::string());
    }
    rows.push_back({tensors[t].name, it->second});
  }
  folded = fold_row_refs(rows);
  row_of_tensor.assign(tensors.size(), 0);
  for (size_t k = 0; k < folded.size(); ++k) {
    for (size_t t : folded[k].members) {
      row_of_tensor[t] = k;
    }
  }
  auto name_of = [&](size_t t) { return tensors[t].name; };

  std::string out = section_start(
      "tensors",
      fmt::format("Tensors ({} in {} rows, layers folded)",
                  with_commas(static_cast<int64_t>(tensors.size())),
                  with_commas(static_cast<int64_t>(folded.size()))));
  std::vector<SortColumn> columns = {{"name", "tensor", false},
                                     {"count", "count", true},
                                     {"shape", "shape", false},
                                     {"dtype", "dtype", false},
                                     {"spec", "spec", false}};
  if (r.plan != nullptr) {
    columns.push_back({"rule", "rule", false});
  }
  columns.insert(columns.end(),
                 {{"bytes", "per device, each", true},
                  {"group_bytes", "per device, all", true},
                  {"findings", "findings", true}});
  out += sortable_table_start("tensors", "tensors", "tensor name", columns);
  for (size_t k = 0; k < folded.size(); ++k) {
    const FoldedRow& row = folded[k];
    const size_t t = row.members.front();
    const Tensor& tensor = tensors[t];
    const TensorSharding& sh = r.shardings[t];
    const PartitionSpec* spec = sh.spec();
    const std::string spec_text =
        spec != nullptr ? to_short(*spec) : std::string("(invalid)");
    const int64_t each = sh.bytes_per_device();
    const int64_t all = each * static_cast<int64_t>(row.count);
    size_t findings = 0;
    std::optional<size_t> first;
    for (size_t member : row.members) {
      findings += diag_count[member];
      if (!first && first_diag[member]) {
        first = first_diag[member];
      }
    }
    fmt::format_to(std::back_inserter(out),
                   "<tr id=\"{}\" data-tensor=\"{}\" data-spec=\"{}\" "
                   "data-count=\"{}\" data-bytes=\"{}\" data-name=\"{}\"{}>",
                   row_id(k),
                   html(row.name),
                   html(spec_text),
                   row.count,
                   each,
                   html(filter_name(row, name_of)),
                   sh.valid() ? "" : " class=\"invalid\"");
    out += name_cell(row, name_of);
    out += num_td(with_commas(static_cast<int64_t>(row.count)),
                  static_cast<int64_t>(row.count));
    out += "<td class=\"mono\" data-sort=\"";
    out += fmt::format("{:020}", tensor.num_elements);
    out += "\">";
    append_html(out, shape_text(tensor.shape));
    out += "</td><td>";
    append_html(out, to_string(tensor.dtype));
    out += "</td><td><code>";
    append_html(out, spec_text);
    out += "</code></td>";
    if (r.plan != nullptr) {
      out += "<td>";
      append_html(out, r.plan->rule(t).description);
      out += "</td>";
    }
    out += bytes_td(each);
    out += bytes_td(all);
    if (findings == 0) {
      out += "<td class=\"num\" data-sort=\"0\"></td>";
    } else {
      fmt::format_to(std::back_inserter(out),
                     "<td class=\"num\" data-sort=\"{}\"><a "
                     "href=\"#diag-{}\">{}</a></td>",
                     findings,
                     *first,
                     findings);
    }
    out += "</tr>\n";
  }
  out += k_sortable_table_end;
  out +=
      "<p class=\"muted\">Click a column's heading to sort by it; a "
      "folded row opens to list its tensors. \"per device, all\" is what "
      "every device holds of the row's tensors (their shards' "
      "parameters, without training state).</p>\n";
  out += k_section_end;
  return out;
}

std::string memory_tables(const CheckReport& r) {
  const MemoryEstimate& m = r.memory;
  std::string out = section_start("by-dtype", "Params per device by dtype");
  out += plain_table(dtype_rows(m));
  out += k_section_end;
  out += section_start(
      "largest",
      fmt::format("Largest tensors per device ({})", m.largest.size()));
  out += plain_table(largest_rows(m, r.manifest, r.shardings));
  out += k_section_end;
  return out;
}

}  // namespace

std::string check_html(const CheckReport& r, const Diagnostics& diags) {
  const std::string_view command = command_name(r.view);
  std::vector<std::string> lines;
  if (r.rules != nullptr) {
    lines.push_back(
        fmt::format("{} tensors of {} with {}",
                    with_commas(static_cast<int64_t>(r.manifest.size())),
                    r.manifest.source,
                    rules_text(*r.rules)));
  } else {
    lines.push_back(
        fmt::format("{} tensors of {} against {}",
                    with_commas(static_cast<int64_t>(r.manifest.size())),
                    r.manifest.source,
                    r.specs_source));
  }
  lines.push_back(mesh_line(r.mesh, r.topology));
  if (r.topology != nullptr) {
    lines.push_back("topology " + topology_summary(*r.topology));
  }
  lines.push_back(recipe_text(r.memory));
  if (r.activations != nullptr) {
    lines.push_back("workload: " + workload_text(*r.activations, r.mesh));
  }
  lines.push_back(capacity_line(r.memory, r.activations));
  if (r.step != nullptr) {
    lines.push_back(step_line(*r.step));
  }

  // Each tensor's diagnostics: how many, and the first.
  const size_t n = r.manifest.size();
  std::vector<size_t> diag_count(n, 0);
  std::vector<std::optional<size_t>> first_diag(n);
  for (size_t i = 0; i < diags.items().size(); ++i) {
    const Diagnostic& d = diags.items()[i];
    if (!d.tensor) {
      continue;
    }
    if (const Tensor* t = r.manifest.find(*d.tensor)) {
      const auto index = static_cast<size_t>(t - r.manifest.tensors().data());
      ++diag_count[index];
      if (!first_diag[index] && i < k_listed_diagnostics) {
        first_diag[index] = i;
      }
    }
  }
  std::vector<size_t> row_of_tensor;
  std::vector<FoldedRow> folded;
  const std::string tensors =
      tensors_section(r, diag_count, first_diag, row_of_tensor, folded);
  auto row_of = [&](const std::string& name) -> std::optional<size_t> {
    const Tensor* t = r.manifest.find(name);
    if (t == nullptr) {
      return std::nullopt;
    }
    return row_of_tensor[static_cast<size_t>(t - r.manifest.tensors().data())];
  };

  std::string out =
      page_start(fmt::format("shardplan {}: {}", command, r.manifest.source));
  out += title_block(fmt::format("shardplan {}", command), lines, &diags);
  out += diagnostics_section(diags, row_of);
  out += memory_section(r.memory, r.activations);
  if (r.view == View::memory) {
    if (r.activations != nullptr) {
      out += activations_section(*r.activations, r.memory);
    }
    if (r.step != nullptr) {
      out += step_section(*r.step);
    }
    out += memory_tables(r);
    out += tensors;
  } else {
    out += tensors;
    if (r.step != nullptr) {
      out += step_section(*r.step);
    }
    if (r.activations != nullptr) {
      out += activations_section(*r.activations, r.memory);
    }
  }
  out += device_grid_section(r.mesh, r.layout, r.topology);
  out += page_end();
  return out;
}

std::string table_doc_html(const TableDoc& doc) {
  std::string out = page_start(doc.title);
  out += title_block(doc.title, doc.lines, nullptr);
  for (size_t i = 0; i < doc.tables.size(); ++i) {
    const TableDoc::Table& t = doc.tables[i];
    // A table without a caption follows the title directly.
    out += t.caption.empty()
               ? fmt::format("<section id=\"sec-table-{}\">\n", i)
               : section_start(fmt::format("table-{}", i), t.caption);
    out += plain_table(t.rows);
    out += k_section_end;
  }
  if (!doc.note.empty()) {
    out += "<p>" + html(doc.note) + "</p>\n";
  }
  out += page_end();
  return out;
}

std::string mesh_html(const MeshReport& report, const Diagnostics& diags) {
  const Mesh& mesh = report.mesh;
  const MeshLayout& layout = report.layout;
  const Topology* topology = report.topology;
  std::vector<std::string> lines;
  const int64_t slices = mesh.num_slices();
  lines.push_back(fmt::format(
      "mesh {} on {} devices{}",
      to_string(mesh),
      mesh.num_devices(),
      slices > 1
          ? fmt::format(" in {} slices (--dcn {})", slices, dcn_string(mesh))
          : std::string()));
  if (topology != nullptr) {
    lines.push_back("topology " + topology_summary(*topology));
  }
  std::string out =
      page_start(fmt::format("shardplan mesh {}", to_string(mesh)));
  out += title_block("shardplan mesh", lines, &diags);
  out += diagnostics_section(
      diags, [](const std::string&) { return std::optional<size_t>(); });
  // The picture first: the axes' tables follow it.
  out += device_grid_section(
      mesh, topology != nullptr ? &layout : nullptr, topology);
  out += section_start("axes", "Axes");
  out += plain_table(mesh_axis_rows(mesh));
  if (topology != nullptr) {
    if (!layout.physical_assignment.empty()) {
      std::vector<std::vector<std::string>> assignment = {{"physical axis"}};
      for (const MeshAxis& a : mesh.axes) {
        assignment[0].push_back(a.name);
      }
      for (size_t p = 0; p < layout.physical_assignment.size(); ++p) {
        std::vector<std::string> row = {layout.physical_axis_names[p]};
        for (int64_t part : layout.physical_assignment[p]) {
          row.push_back(std::to_string(part));
        }
        assignment.push_back(std::move(row));
      }
      out +=
          "<h3>Physical assignment</h3>\n<p class=\"muted\">The part of "
          "each physical axis given to each mesh axis.</p>\n";
      out += plain_table(assignment);
    }
    const HostLayout& h = layout.hosts;
    std::string hosts =
        fmt::format("hosts: {} of {} devices; ", h.count, h.devices_per_host);
    if (h.not_contiguous_host) {
      hosts += fmt::format(
          "host {}'s devices do not form a block of the grid: no local mesh",
          *h.not_contiguous_host);
    } else {
      hosts += fmt::format("each host's local mesh: {}",
                           shape_text(h.local_mesh_shape));
    }
    out += "<p>" + html(hosts) + "</p>\n";
  }
  out += k_section_end;
  out += page_end();
  return out;
}

// ---------------------------------------------------------------------------
// reshard

namespace {

bool timed(const ReshardReport& r) {
  return r.from_topology != nullptr && r.to_topology != nullptr;
}

std::string steps_cell(const TensorReshard& tr, bool with_time) {
  if (tr.steps.empty()) {
    return "<td>-</td>";
  }
  std::string out = "<td><ol class=\"steps\">";
  for (const ReshardStep& step : tr.steps) {
    out += "<li><code>";
    append_html(out, to_string(step.op));
    out += "</code>";
    if (!step.mesh_axes.empty()) {
      out += " over ";
      append_html(out, fmt::format("{}", fmt::join(step.mesh_axes, ",")));
    }
    if (step.dim) {
      out += fmt::format(", dim {}", *step.dim);
    }
    if (step.to_dim && step.op == ReshardOp::all_to_all) {
      out += fmt::format(" to {}", *step.to_dim);
    }
    if (step.bytes_per_device > 0) {
      out += ", " + html(human_bytes(step.bytes_per_device)) + "/device";
      out += " on " + html(to_string(step.link));
      if (with_time) {
        out += ", " + html(seconds_text(step.seconds));
      }
    }
    out += "</li>";
  }
  out += "</ol>";
  if (tr.intermediate) {
    out += "<span class=\"muted\">via <code>"
           + html(to_short(tr.intermediate->spec)) + "</code> on "
           + html(to_string(tr.intermediate->mesh)) + "</span>";
  }
  out += "</td>";
  return out;
}

// reshard_html's totals next to the naive plan, as a table and as paired
// bars.
std::string reshard_totals_html(const ReshardReport& r, bool with_time) {
  std::string out;
  const PlanCost& p = r.plan.totals;
  const PlanCost& n = r.plan.naive_totals;
  out += section_start("totals", "Totals, next to the naive plan");
  out +=
      "<table id=\"totals\">\n<thead><tr><th></th><th class=\"num\">"
      "moved per device</th><th class=\"num\">time</th><th class=\"num\">"
      "peak per device</th></tr></thead>\n<tbody>\n";
  auto total_row =
      [&](std::string_view label, std::string_view key, const PlanCost& c) {
        fmt::format_to(std::back_inserter(out),
                       "<tr data-total=\"{}\" data-bytes=\"{}\" "
                       "data-peak=\"{}\"><td>{}</td>",
                       key,
                       c.bytes_per_device,
                       c.peak_bytes_per_device,
                       html(label));
        out += bytes_td(c.bytes_per_device);
        out += with_time ? num_td(seconds_text(c.seconds), c.seconds)
                         : std::string("<td class=\"num\">-</td>");
        out += bytes_td(c.peak_bytes_per_device);
        out += "</tr>\n";
      };
  total_row("plan", "plan", p);
  total_row("naive: all_gather to replicated, then slice", "naive", n);
  total_row("saved",
            "saved",
            {n.bytes_per_device - p.bytes_per_device,
             n.seconds - p.seconds,
             n.peak_bytes_per_device - p.peak_bytes_per_device});
  out += "</tbody>\n</table>\n";
  // Bars: moved bytes and peak, plan against naive.
  {
    const int64_t top = std::max<int64_t>({p.bytes_per_device,
                                           n.bytes_per_device,
                                           p.peak_bytes_per_device,
                                           n.peak_bytes_per_device,
                                           1});
    out +=
        "<figure>\n<svg id=\"totals-bars\" width=\"1040\" height=\"150\" "
        "viewBox=\"0 0 1040 150\" role=\"img\" aria-label=\"plan against "
        "naive\">\n";
    int64_t y = 8;
    const std::pair<const char*, int64_t> bars[] = {
        {"moved, plan", p.bytes_per_device},
        {"moved, naive", n.bytes_per_device},
        {"peak, plan", p.peak_bytes_per_device},
        {"peak, naive", n.peak_bytes_per_device}};
    size_t i = 0;
    for (const auto& [label, bytes] : bars) {
      const double w =
          static_cast<double>(bytes) / static_cast<double>(top) * 760;
      fmt::format_to(std::back_inserter(out),
                     "<text x=\"0\" y=\"{}\">{}</text><rect x=\"110\" "
                     "y=\"{}\" width=\"{:.2f}\" height=\"26\" fill=\"{}\" "
                     "data-bytes=\"{}\"><title>{}: {}</title></rect>"
                     "<text x=\"{:.2f}\" y=\"{}\">{}</text>\n",
                     y + 18,
                     label,
                     y,
                     std::max(w, 0.5),
                     i % 2 == 0 ? "#0072B2" : "#E69F00",
                     bytes,
                     label,
                     html(human_bytes(bytes)),
                     116 + w,
                     y + 18,
                     html(human_bytes(bytes)));
      y += 34;
      ++i;
    }
    out += "</svg>\n</figure>\n";
  }
  out += k_section_end;

  return out;
}

// reshard_html's steps per tensor, one row per folded row.
std::string reshard_tensors_html(const ReshardReport& r,
                                 const std::vector<FoldedRow>& folded,
                                 bool with_time) {
  const auto& tensors = r.manifest.tensors();
  auto name_of = [&](size_t t) { return tensors[t].name; };
  std::string out;
  out += section_start(
      "tensors",
      fmt::format("Steps per tensor ({} in {} rows, layers folded)",
                  with_commas(static_cast<int64_t>(tensors.size())),
                  with_commas(static_cast<int64_t>(folded.size()))));
  out += sortable_table_start("tensors",
                              "tensors",
                              "tensor name",
                              {{"name", "tensor", false},
                               {"count", "count", true},
                               {"shape", "shape", false},
                               {"from", "from spec", false},
                               {"to", "to spec", false},
                               {"steps", "steps", false},
                               {"bytes", "moved per device", true},
                               {"seconds", "time", true},
                               {"peak", "peak per device", true}});
  for (size_t k = 0; k < folded.size(); ++k) {
    const FoldedRow& row = folded[k];
    const size_t t = row.members.front();
    const TensorReshard& tr = r.plan.tensor(t);
    const std::string to_spec = to_short(tr.to);
    fmt::format_to(std::back_inserter(out),
                   "<tr id=\"{}\" data-tensor=\"{}\" data-spec=\"{}\" "
                   "data-from-spec=\"{}\" data-count=\"{}\" data-bytes=\"{}\" "
                   "data-name=\"{}\">",
                   row_id(k),
                   html(row.name),
                   html(to_spec),
                   html(to_short(tr.from)),
                   row.count,
                   tr.cost.bytes_per_device,
                   html(filter_name(row, name_of)));
    out += name_cell(row, name_of);
    out += num_td(with_commas(static_cast<int64_t>(row.count)),
                  static_cast<int64_t>(row.count));
    out += "<td class=\"mono\">" + html(shape_text(tensors[t].shape)) + "</td>";
    out += "<td><code>" + html(to_short(tr.from)) + "</code></td>";
    out += "<td><code>" + html(to_spec) + "</code></td>";
    out += steps_cell(tr, with_time);
    out += bytes_td(tr.cost.bytes_per_device);
    out += with_time ? num_td(seconds_text(tr.cost.seconds), tr.cost.seconds)
                     : std::string("<td class=\"num\">-</td>");
    out += bytes_td(tr.cost.peak_bytes_per_device);
    out += "</tr>\n";
  }
  out += k_sortable_table_end;
  out += k_section_end;
  return out;
}

// reshard_html's device grids of each side, on a topology.
std::string reshard_grids_html(const ReshardReport& r) {
  std::string out;
  if (r.from_layout != nullptr) {
    out += device_grid_section(
        r.from_mesh,
        r.from_layout,
        r.from_topology,
        "from-",
        "Devices of the source mesh " + to_string(r.from_mesh));
  }
  if (r.to_layout != nullptr) {
    out += device_grid_section(
        r.to_mesh,
        r.to_layout,
        r.to_topology,
        "to-",
        "Devices of the target mesh " + to_string(r.to_mesh));
  }
  return out;
}

}  // namespace

std::string reshard_html(const ReshardReport& r, const Diagnostics& diags) {
  const auto& tensors = r.manifest.tensors();
  const bool with_time = timed(r);
  std::vector<std::string> lines = {
      fmt::format("{} tensor{} of {}",
                  with_commas(static_cast<int64_t>(r.manifest.size())),
                  r.manifest.size() == 1 ? "" : "s",
                  r.manifest.source),
      "from " + mesh_line(r.from_mesh, r.from_topology),
      "to " + mesh_line(r.to_mesh, r.to_topology)};
  if (r.options.donate) {
    lines.emplace_back("source buffers donated");
  }
  if (!with_time) {
    lines.emplace_back("no topology: no times");
  }

  // Rows folded across layers by plan.
  std::vector<std::string> rests(r.plan.plans.size());
  for (size_t p = 0; p < rests.size(); ++p) {
    rests[p] = std::to_string(p);
  }
  std::vector<NameRowRef> rows;
  rows.reserve(r.plan.size());
  for (size_t t = 0; t < r.plan.size(); ++t) {
    rows.push_back({tensors[t].name, rests[r.plan.plan_of[t]]});
  }
  const std::vector<FoldedRow> folded = fold_row_refs(rows);
  std::vector<size_t> row_of_tensor(r.plan.size(), 0);
  for (size_t k = 0; k < folded.size(); ++k) {
    for (size_t t : folded[k].members) {
      row_of_tensor[t] = k;
    }
  }
  auto row_of = [&](const std::string& name) -> std::optional<size_t> {
    const Tensor* t = r.manifest.find(name);
    if (t == nullptr) {
      return std::nullopt;
    }
    return row_of_tensor[static_cast<size_t>(t - tensors.data())];
  };

  std::string out =
      page_start(fmt::format("shardplan reshard: {}", r.manifest.source));
  out += title_block("shardplan reshard", lines, &diags);
  out += diagnostics_section(diags, row_of);

  out += reshard_totals_html(r, with_time);
  out += reshard_tensors_html(r, folded, with_time);
  out += reshard_grids_html(r);
  out += page_end();
  return out;
}

// ---------------------------------------------------------------------------
// search

namespace {

// "1.2 s" ticks: `count` values from 0 to `top`, rounded to 1, 2 or 5 x a
// power of ten.
std::vector<double> ticks(double top, int count) {
  std::vector<double> out;
  if (top <= 0) {
    return {0};
  }
  const double raw = top / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  }
  for (double v = 0; v <= top * 1.0001; v += step) {
    out.push_back(v);
  }
  return out;
}

// The title block's lines: what was searched, the winner, the dropped.
std::vector<std::string> search_summary(const SearchReport& r) {
  const SearchResult& res = r.result;
  const SearchCandidate* winner = res.winner();
  std::vector<std::string> lines = {
      fmt::format("{} meshes of {}, {} candidates, {} fit; ranked by {}",
                  res.meshes,
                  r.model,
                  res.candidates.size(),
                  res.ranked().size(),
                  to_string(r.objective)),
      "topology " + slices_summary(r.slices)};
  if (winner != nullptr) {
    std::string line = r.slices.size() > 1 ? winner->topology + " " : "";
    line += winner->mesh;
    if (!winner->dcn.empty()) {
      line += " dcn ";
      line += winner->dcn;
    }
    line += fmt::format(" ({})", winner->remat);
    if (winner->step) {
      line += ", step ";
      line += step_summary(*winner->step);
    }
    lines.push_back(fmt::format("winner: {}", line));
  } else {
    lines.emplace_back("no candidate fits");
  }
  if (!res.dropped_counts.empty()) {
    std::vector<std::string> counts;
    counts.reserve(res.dropped_counts.size());
    for (const auto& [reason, n] : res.dropped_counts) {
      counts.push_back(fmt::format("{} {}", n, reason));
    }
    lines.push_back(fmt::format("dropped: {}", fmt::join(counts, ", ")));
  }
  return lines;
}

// The scatter's frame: step time against memory per device, from 0 to a
// little over the largest of each (and the usable HBM), in pixels.
struct Scatter {
  static constexpr double k_left = 80;
  static constexpr double k_top = 20;
  static constexpr double k_w = 900;
  static constexpr double k_h = 400;
  double max_x = 1;
  double max_y = 0;
  std::optional<int64_t> hbm;  // usable: HBM less the headroom

  explicit Scatter(const SearchResult& res) {
    for (const SearchCandidate& c : res.candidates) {
      if (c.capacity_bytes) {
        hbm = c.capacity_bytes;
      }
      if (!c.step) {
        continue;
      }
      max_x = std::max(max_x, static_cast<double>(c.max_device_total));
      max_y = std::max(max_y, c.step->step_seconds);
    }
    if (hbm) {
      max_x = std::max(max_x, static_cast<double>(*hbm));
    }
    max_x *= 1.05;
    max_y = max_y > 0 ? max_y * 1.1 : 1;
  }
  double px(double bytes) const { return k_left + bytes / max_x * k_w; }
  double py(double s) const { return k_top + k_h - s / max_y * k_h; }
};

// The svg's start, frame, ticks, axis labels and the usable-HBM line.
std::string scatter_axes(const Scatter& sc) {
  constexpr double k_left = Scatter::k_left;
  constexpr double k_top = Scatter::k_top;
  constexpr double k_w = Scatter::k_w;
  constexpr double k_h = Scatter::k_h;
  std::string out;
  fmt::format_to(std::back_inserter(out),
                 "<figure>\n<svg id=\"scatter\" width=\"1040\" height=\"{}\" "
                 "viewBox=\"0 0 1040 {}\" role=\"img\" aria-label=\"step "
                 "time against memory per device\">\n",
                 k_top + k_h + 50,
                 k_top + k_h + 50);
  fmt::format_to(std::back_inserter(out),
                 "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" "
                 "fill=\"none\" stroke=\"#999\"/>\n",
                 k_left,
                 k_top,
                 k_w,
                 k_h);
  for (double v : ticks(sc.max_x, 6)) {
    fmt::format_to(std::back_inserter(out),
                   "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" "
                   "stroke=\"#eee\"/><text x=\"{0:.1f}\" y=\"{3}\" "
                   "text-anchor=\"middle\">{4}</text>\n",
                   sc.px(v),
                   k_top,
                   k_top + k_h,
                   k_top + k_h + 15,
                   html(human_bytes(static_cast<int64_t>(v))));
  }
  for (double v : ticks(sc.max_y, 5)) {
    fmt::format_to(std::back_inserter(out),
                   "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" "
                   "stroke=\"#eee\"/><text x=\"{3}\" y=\"{4:.1f}\" "
                   "text-anchor=\"end\">{5}</text>\n",
                   k_left,
                   k_left + k_w,
                   sc.py(v),
                   k_left - 6,
                   sc.py(v) + 4,
                   html(seconds_text(v)));
  }
  fmt::format_to(std::back_inserter(out),
                 "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">memory per "
                 "device (the most loaded)</text><text x=\"14\" y=\"{}\" "
                 "transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">step "
                 "time</text>\n",
                 k_left + k_w / 2,
                 k_top + k_h + 38,
                 k_top + k_h / 2,
                 k_top + k_h / 2);
  if (sc.hbm) {
    fmt::format_to(std::back_inserter(out),
                   "<g class=\"capacity\" data-bytes=\"{0}\"><line "
                   "x1=\"{1:.1f}\" x2=\"{1:.1f}\" y1=\"{2}\" y2=\"{3}\" "
                   "stroke=\"#000\" stroke-width=\"2\" "
                   "stroke-dasharray=\"4 3\"/><text x=\"{4:.1f}\" y=\"{5}\" "
                   "text-anchor=\"end\">usable HBM {6}</text></g>\n",
                   *sc.hbm,
                   sc.px(static_cast<double>(*sc.hbm)),
                   k_top,
                   k_top + k_h,
                   sc.px(static_cast<double>(*sc.hbm)) - 4,
                   k_top + 12,
                   html(human_bytes(*sc.hbm)));
  }
  return out;
}

// One candidate's point: a diamond for the winner, a circle for one ranked,
// an x for one dropped; its figures as the tooltip.
std::string scatter_point(const SearchCandidate& c,
                          const Scatter& sc,
                          bool winner) {
  const double x = sc.px(static_cast<double>(c.max_device_total));
  const double y = sc.py(c.step->step_seconds);
  std::string mesh = c.mesh;
  if (!c.dcn.empty()) {
    mesh += " dcn ";
    mesh += c.dcn;
  }
  std::string tip = c.rank ? fmt::format("#{} ", *c.rank) : "dropped: ";
  tip += fmt::format("{} ({}): {} per device, step {}",
                     mesh,
                     c.remat,
                     human_bytes(c.max_device_total),
                     seconds_text(c.step->step_seconds));
  if (c.dropped) {
    tip += "; ";
    tip += c.message;
  }
  std::string out = fmt::format(
      "<g class=\"point\" data-mesh=\"{}\" data-rank=\"{}\" "
      "data-bytes=\"{}\" data-seconds=\"{}\"><title>{}</title>",
      html(c.mesh),
      c.rank ? std::to_string(*c.rank) : std::string(),
      c.max_device_total,
      c.step->step_seconds,
      html(tip));
  if (winner) {
    fmt::format_to(std::back_inserter(out),
                   "<path d=\"M{0:.1f} {1:.1f} l8 8 l-8 8 l-8 -8 z\" "
                   "fill=\"#D55E00\" stroke=\"#000\"/><text x=\"{2:.1f}\" "
                   "y=\"{3:.1f}\" class=\"winner\">winner: {4}</text>",
                   x,
                   y - 8,
                   x + 12,
                   y + 4,
                   html(c.mesh));
  } else if (c.rank) {
    fmt::format_to(std::back_inserter(out),
                   "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" "
                   "fill=\"#0072B2\"/>",
                   x,
                   y);
  } else {
    fmt::format_to(std::back_inserter(out),
                   "<path d=\"M{0:.1f} {1:.1f} l6 6 m0 -6 l-6 6\" "
                   "stroke=\"#777\" stroke-width=\"1.5\"/>",
                   x - 3,
                   y - 3);
  }
  out += "</g>\n";
  return out;
}

// The scatter: step time against memory per device, the usable-HBM line,
// the winner marked. Candidates without a step estimate are not drawn.
std::string scatter_section(const SearchResult& res) {
  const Scatter sc(res);
  const SearchCandidate* winner = res.winner();
  std::string out =
      section_start("scatter", "Step time against memory per device");
  out += scatter_axes(sc);
  // Dropped first, the ranked over them, the winner last (on top).
  for (const SearchCandidate& c : res.candidates) {
    if (c.step && !c.rank) {
      out += scatter_point(c, sc, false);
    }
  }
  for (const SearchCandidate& c : res.candidates) {
    if (c.step && c.rank && &c != winner) {
      out += scatter_point(c, sc, false);
    }
  }
  if (winner != nullptr && winner->step) {
    out += scatter_point(*winner, sc, true);
  }
  out +=
      "</svg>\n<figcaption class=\"muted\">Each point a candidate: "
      "ranked (filled circle), dropped (x), the winner (diamond); the "
      "dashed line is the usable HBM per device (less the headroom). Hover "
      "a point for its "
      "figures.</figcaption>\n</figure>\n";
  out += k_section_end;
  return out;
}

// One row of the candidates' table.
std::string candidate_row(const SearchCandidate& c, bool several_slices) {
  const StepEstimate* s = c.step ? &*c.step : nullptr;
  std::string mesh = c.mesh;
  if (!c.dcn.empty()) {
    mesh += fmt::format(" (dcn {})", c.dcn);
  }
  if (several_slices) {
    mesh = fmt::format("{} {}", c.topology, mesh);  // --devices: slice first
  }
  std::string remat = c.remat;
  if (!c.per_device_batch.empty()) {
    remat += fmt::format(", {}/dev", c.per_device_batch);
  }
  const std::string none = "<td class=\"num\">-</td>";
  std::string out = fmt::format(
      "<tr data-name=\"{}\" data-slice=\"{}\" data-mesh=\"{}\" "
      "data-rank=\"{}\"{}>",
      html(fmt::format("{} {}", mesh, remat)),
      html(c.topology),
      html(c.mesh),
      c.rank ? std::to_string(*c.rank) : std::string(),
      c.rank && *c.rank == 1 ? " class=\"winner\"" : "");
  // Dropped candidates sort after the ranked ones.
  out += c.rank ? num_td(std::to_string(*c.rank), *c.rank)
                : num_td("-", int64_t{1} << 40);
  out += "<td><code>" + html(mesh) + "</code></td>";
  out += "<td>" + html(remat) + "</td>";
  out += bytes_td(c.max_device_total);
  out += c.utilization ? num_td(fmt::format("{:.1f}%", *c.utilization * 100),
                                *c.utilization)
                       : none;
  out += s != nullptr ? num_td(seconds_text(s->step_seconds), s->step_seconds)
                      : none;
  out += s != nullptr ? num_td(with_commas(static_cast<int64_t>(std::llround(
                                   s->tokens_per_second_per_device))),
                               s->tokens_per_second_per_device)
                      : none;
  out += s != nullptr ? num_td(fmt::format("{:.1f}%", s->mfu * 100), s->mfu)
                      : none;
  out += "<td>";
  if (c.dropped) {
    out += "<span class=\"sev-warning\">dropped: " + html(to_string(*c.dropped))
           + "</span> " + html(c.message);
  } else if (s != nullptr) {
    append_html(out, bottleneck_text(*s));
  }
  out += "</td></tr>\n";
  return out;
}

std::string candidates_section(const SearchReport& r) {
  const SearchResult& res = r.result;
  std::string out = section_start(
      "candidates", fmt::format("Candidates ({})", res.candidates.size()));
  out += sortable_table_start("candidates",
                              "",
                              "mesh",
                              {{"rank", "rank", true},
                               {"mesh", "mesh", false},
                               {"remat", "remat", false},
                               {"memory", "memory per device", true},
                               {"of_hbm", "of HBM", true},
                               {"step", "step", true},
                               {"tokens", "tokens/s/device", true},
                               {"mfu", "MFU", true},
                               {"bottleneck", "bottleneck / dropped", false}});
  for (const SearchCandidate& c : res.candidates) {
    out += candidate_row(c, r.slices.size() > 1);
  }
  out += k_sortable_table_end;
  out += k_section_end;
  return out;
}

}  // namespace

std::string search_html(const SearchReport& r, const Diagnostics& diags) {
  const SearchResult& res = r.result;
  std::string out = page_start(fmt::format("shardplan search: {}", r.model));
  out += title_block("shardplan search", search_summary(r), nullptr);
  out += diagnostics_section(
      diags, [](const std::string&) { return std::optional<size_t>(); });
  out += scatter_section(res);
  out += candidates_section(r);
  // The winner's mesh on its slice, as the search laid it out.
  if (res.winner_mesh) {
    out += device_grid_section(
        res.winner_mesh->mesh,
        &res.winner_mesh->layout,
        res.winner_slice != nullptr ? res.winner_slice : &r.topology,
        "",
        "Devices of the winner's mesh " + to_string(res.winner_mesh->mesh));
  }
  out += page_end();
  return out;
}

}  // namespace shardplan::report_detail
