#pragma once

// Internal to report: every view's renderers, each defined in its command's
// file, and each an entry of the table in report/render.cpp (render() is
// the way in). A renderer returns its document whole, or, for the large
// JSON documents, hands it to `write` in pieces.

#include "report/text.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/report.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace shardplan::report_detail {

// The `command` key of a view's JSON and the name its text starts with:
// "topology" for both topology views, "manifest" for the model list, "plan"
// for the explanation and the preset list (report/render.cpp).
std::string_view command_name(View view);

// report/mesh.cpp
std::string mesh_json(const MeshReport& report, const Diagnostics& diags);
std::string mesh_text(const MeshReport& report);

// report/topology.cpp
std::string topology_list_json(const TopologyListReport& report);
// Their documents as summary lines and tables (text.hpp's TableDoc), which
// the text and HTML renderers share.
TableDoc topology_list_doc(const TopologyListReport& report);
TableDoc topology_show_doc(const TopologyShowReport& report);
std::string topology_list_text(const TopologyListReport& report);
std::string topology_show_json(const TopologyShowReport& report);
std::string topology_show_text(const TopologyShowReport& report);

// report/manifest.cpp
std::string manifest_json(const ManifestReport& report,
                          const Diagnostics& diags);
TableDoc manifest_doc(const ManifestReport& report);
TableDoc model_list_doc(const ModelListReport& report);
std::string manifest_text(const ManifestReport& report);
std::string model_list_json(const ModelListReport& report);
std::string model_list_text(const ModelListReport& report);

// report/check.cpp: check's, memory's and plan's JSON, and check's and
// plan's text, markdown and github.
void write_check_json(const CheckReport& report,
                      const Diagnostics& diags,
                      const WriteText& write);
std::string check_text(const CheckReport& report, const Diagnostics& diags);
std::string check_markdown(const CheckReport& report, const Diagnostics& diags);
std::string check_github(const CheckReport& report, const Diagnostics& diags);
// The end of check's and plan's text: specs, memory per device, capacity and
// the verdict.
std::string summary_text(const CheckReport& report, const Diagnostics& diags);

// report/ci.cpp: diagnostics as CI reads them, and the documents of an
// input error (exit 2) in markdown and github.
//
// Findings of one kind (a severity and a code) past the first
// k_shown_per_kind fold into one: GitHub shows 10 error and 10 warning
// annotations per step (actions/toolkit docs/problem-matchers.md), so 40
// spec.indivisible errors would hide every other kind. A kind of one more
// than that is not folded (the summary would take the last one's place).
inline constexpr size_t k_shown_per_kind = 3;
// One ::error/::warning/::notice workflow command per diagnostic, at its
// file, line and column (a flag such as --mesh leads the message); the rest
// of a folded kind as one annotation at the first of them, naming the first
// five by tensor.
std::string github_annotations(const Diagnostics& diags);
// Per severity, "### Errors (N)" and a table (code, tensor, where,
// message) of the first few of each kind; the rest of a folded kind in a
// collapsed <details> table; at most 50 rows per severity, the rest
// counted.
std::string markdown_findings(const Diagnostics& diags);
// `command`'s input errors: the annotations, then a line saying nothing was
// checked.
std::string github_input_errors(std::string_view command,
                                const Diagnostics& diags);
// `command`'s input errors: a heading, a sentence, the findings.
std::string markdown_input_errors(std::string_view command,
                                  const Diagnostics& diags);

// report/jax.cpp: the paste-back Python module (docs/paste-back.md).
std::string mesh_jax(const MeshReport& report);
std::string plan_jax(const CheckReport& report, const Diagnostics& diags);

// report/maxtext.cpp: the paste-back MaxText overrides (docs/paste-back.md).
std::string mesh_maxtext(const MeshReport& report);
std::string plan_maxtext(const CheckReport& report, const Diagnostics& diags);
// Whether every axis of `mesh` (and of the logical axis rules of `rules`,
// when they are logical) has a MaxText name, one axis per name; false with
// each that has none reported [maxtext.axis-name]. Warns
// [maxtext.renamed-axis] about an axis written under another name that the
// logical rules use: MaxText's specs will differ from the plan's.
bool maxtext_names_ok(const Mesh& mesh,
                      const RuleSet* rules,
                      Diagnostics& diags);

// report/plan.cpp
std::string plan_text(const CheckReport& report, const Diagnostics& diags);
std::string explain_json(const ExplainReport& report);
std::string explain_text(const ExplainReport& report);
std::string preset_list_json(const PresetListReport& report);
std::string preset_list_text(const PresetListReport& report);

// report/memory.cpp
std::string memory_text(const CheckReport& report);

// report/reshard.cpp
void write_reshard_json(const ReshardReport& report,
                        const Diagnostics& diags,
                        const WriteText& write);
std::string reshard_text(const ReshardReport& report, const Diagnostics& diags);

// report/html.cpp: every view's --format html (docs/html.md).
std::string mesh_html(const MeshReport& report, const Diagnostics& diags);
// check's, memory's and plan's.
std::string check_html(const CheckReport& report, const Diagnostics& diags);
std::string reshard_html(const ReshardReport& report, const Diagnostics& diags);
std::string search_html(const SearchReport& report, const Diagnostics& diags);
// A TableDoc as a page: topology list and show, manifest, the model list.
std::string table_doc_html(const TableDoc& doc);

// report/search.cpp
std::string search_text(const SearchReport& report, const Diagnostics& diags);
std::string search_json(const SearchReport& report, const Diagnostics& diags);

}  // namespace shardplan::report_detail
