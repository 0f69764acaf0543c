#pragma once

// Layer 8: renders what the core computed. Core code computes; this layer
// only formats. Every JSON document has schema_version, shardplan_version and
// command.
//
// Each command shows one or more views (a mesh, a plan, the preset list, ...)
// and each view has a renderer per output format it supports, all in one
// table (src/report/render.cpp; docs/architecture.md). Every view has text and
// json. A view asked for a format it has no renderer for is rendered as text:
// `plan` offers markdown and github for its plan, so `plan --rules list
// --format markdown` and `plan --explain NAME --format github` print the
// preset list's and the explanation's text.
//
// What it offers, by the file that implements it (the renderers, one file
// per command's views, are declared in src/report/renderers.hpp):
//   report/render.cpp
//     Format, k_formats, parse_format, to_string   what --format takes
//     View, k_views, view_of, Report   the views and their report structs
//     render, Document, WriteText   a report in a format (the table)
//     can_render, has_renderer, formats_of   what the table offers
//     input_error_document     the document of bad input (exit 2)
//   report/json.cpp
//     k_schema_version, shardplan_version, diagnostics_json
//   report/reshard.cpp
//     reshard_transfers_size   the size of reshard's transfer list
//   report/search.cpp
//     search_winner_report, search_winner_note   the winner as a plan
//   report/fold.cpp
//     NameRowRef, FoldedRow, fold_row_refs   rows folded across layers

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/models.hpp>
#include <shardplan/reshard.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/search.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/topology.hpp>
#include <shardplan/validate.hpp>
#include <shardplan/workload.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace shardplan {

inline constexpr int k_schema_version = 1;
std::string_view shardplan_version();

// ---------------------------------------------------------------------------
// Formats and views

// What --format takes.
// jax and maxtext are the paste-back formats (docs/paste-back.md), html the
// self-contained report (docs/html.md).
enum class Format { text, json, markdown, github, jax, maxtext, html };
inline constexpr std::array<Format, 7> k_formats = {Format::text,
                                                    Format::json,
                                                    Format::markdown,
                                                    Format::github,
                                                    Format::jax,
                                                    Format::maxtext,
                                                    Format::html};
// "text", "json", "markdown", "github", "jax", "maxtext", "html".
std::string_view to_string(Format format);
// The format of that name; nullopt for any other name.
std::optional<Format> parse_format(std::string_view name);

// What a command shows: `topology list` and `topology show`, `manifest` and
// `manifest --model list`, `plan`, `plan --explain` and `plan --rules list`
// are views of their own.
enum class View {
  mesh,
  topology_list,
  topology_show,
  manifest,
  model_list,
  preset_list,
  plan,
  explain,
  check,
  memory,
  reshard,
  search,
};
inline constexpr std::array<View, 12> k_views = {View::mesh,
                                                 View::topology_list,
                                                 View::topology_show,
                                                 View::manifest,
                                                 View::model_list,
                                                 View::preset_list,
                                                 View::plan,
                                                 View::explain,
                                                 View::check,
                                                 View::memory,
                                                 View::reshard,
                                                 View::search};

// ---------------------------------------------------------------------------
// What each view renders. Each refers to data its caller holds.

// What the paste-back formats (jax, maxtext; docs/paste-back.md) write beyond
// the report: the command that made it, and whether JAX is to let mesh axes
// split physical ones.
struct Provenance {
  std::string command_line;  // "shardplan plan --model llama-3-8b ..."
  bool allow_split_physical_axes = false;
  // A line for the header (search: which candidate this is).
  std::string note;
  // MaxText's model_name for the plan's model ("llama3.1-8b"): a MaxText
  // config's, or the MaxText model a built-in model is; "" when none.
  std::string maxtext_model;
};

// `shardplan mesh`: the mesh object, device_ids and diagnostics; with a
// topology also the topology object, physical_assignment, axes_links and
// hosts (docs/output-schema.md, "mesh"). Text: the axes, the links per axis,
// the device grid.
struct MeshReport {
  const Mesh& mesh;
  const MeshLayout& layout;
  const Topology* topology;                // null for --devices
  const Provenance* provenance = nullptr;  // for jax and maxtext
};

// `shardplan topology list`: a table of the catalogue.
struct TopologyListReport {
  const std::vector<Topology>& topologies;
};

// `shardplan topology show`: one topology with every figure and its source.
struct TopologyShowReport {
  const Topology& topology;
};

// `shardplan manifest`: the native manifest form (read_manifest reads it
// back), with the common header keys; text: a summary per dtype and the
// largest tensors.
struct ManifestReport {
  const Manifest& manifest;
};

// `shardplan manifest --model list`: the built-in models.
struct ModelListReport {
  const std::vector<BuiltinModel>& models;
};

// `plan --rules list`: the built-in presets.
struct PresetListReport {
  const std::vector<RulePreset>& presets;
};

// `plan --explain NAME`: every rule, whether it matched, what its algorithm
// considered, and the result.
struct ExplainReport {
  const RuleTrace& trace;
  const RuleSet& rules;
  const Mesh& mesh;
};

// `check`, `memory` and `plan`: what was checked, and what was found.
//
// JSON (docs/output-schema.md): mesh, topology, tensors, diagnostics, memory,
// summary (`memory` adds by_dtype and largest to the memory object); for
// `plan`, `rules` (the rule set's source) instead of `specs_file`, and each
// tensor's `rule`: {index, description}, so that it is itself a valid
// --specs file. Streamed in pieces of about a megabyte, so that a large plan
// is never held whole (`plan --format json` on 100k tensors writes ~32 MB).
// Text: check's is a short summary (what was checked, memory per device, the
// verdict); plan's groups the tensors by the rule that decided them, layers
// folded, with spec and bytes per device, then check's summary; memory's
// shows each category with a bar against HBM, per dtype, the largest
// tensors. Markdown (check, plan): a summary a CI job can post on a pull
// request. GitHub (check, plan): GitHub Actions workflow commands, one
// ::error/::warning line per diagnostic, pointing at the specs file line
// where there is one. Both fold a kind of finding (a code) past its first
// three (src/report/ci.cpp).
struct CheckReport {
  View view;  // REQUIRES: View::check, View::memory or View::plan
  const Mesh& mesh;
  const Topology* topology;  // null with --devices
  const Manifest& manifest;
  std::string_view specs_source;
  const std::vector<TensorSharding>&
      shardings;  // shardings[t]: manifest tensor t's
  const MemoryEstimate& memory;
  // `plan` only: the rules applied and what each tensor got from them.
  const RuleSet* rules = nullptr;
  const RulePlan* plan = nullptr;
  // With a workload: its activations (memory.activations counts them),
  // and on a topology the step's time.
  const ActivationEstimate* activations = nullptr;
  const StepEstimate* step = nullptr;
  // The mesh laid on the topology (html draws its device grid); null
  // without a topology, or when the mesh does not cover its devices.
  const MeshLayout* layout = nullptr;
  // For jax and maxtext: the command, the layout. With a workload, the
  // workload as given (MaxText's per_device_batch_size, remat_policy).
  const Provenance* provenance = nullptr;
};

// `reshard` (docs/reshard.md): a plan moving a manifest's tensors from one
// mesh (and topology) to another. JSON (docs/output-schema.md): from, to,
// donate, partial, same_mesh, same_devices, transfer_link, tensors (written
// directly, not as a DOM), totals, naive_totals, saved, summary,
// diagnostics; streamed in pieces (never held whole). Text: the two sides,
// one line per tensor (folded across layers), the totals next to the naive
// plan's, and the ten most expensive tensors.
struct ReshardReport {
  const Manifest& manifest;
  const Mesh& from_mesh;
  const Topology* from_topology;  // null with --devices
  const Mesh& to_mesh;
  const Topology* to_topology;
  const ReshardOptions& options;
  const ReshardPlan& plan;
  // Each side's mesh laid on its topology (html draws both grids); null
  // without a topology.
  const MeshLayout* from_layout = nullptr;
  const MeshLayout* to_layout = nullptr;
};

// What the transfers lists of a reshard's JSON hold (steps[].transfers of
// every tensor, written with --transfers or --shape): how many transfers,
// and the bytes the JSON spends on them (each list with its key), exactly
// as the JSON renderer writes them. A plan shared by tensors counts once
// per tensor, as the JSON repeats it.
struct TransfersSize {
  int64_t transfers = 0;
  int64_t json_bytes = 0;
};
TransfersSize reshard_transfers_size(const ReshardReport& report);

// `shardplan search` (docs/search.md): the ranked
// candidates and the dropped ones, per reason. JSON: candidates (every one,
// ranked first), dropped_counts, meshes, workload, topology, model. Text:
// the top `top` as a table, then the dropped counts.
struct SearchReport {
  const SearchResult& result;
  const Topology& topology;  // --topology
  // The slices searched: --topology alone, or the catalogue slices of its
  // chip --devices names (SearchCandidate::topology names each one's).
  std::span<const Topology> slices;
  std::string_view model;  // the manifest's source
  const Workload& workload;
  SearchObjective objective = SearchObjective::tokens;
  size_t top = 10;
  // html draws the winner's mesh on its slice from result.winner_mesh.
};

// search's winner as `plan` reports its mesh (what --format jax and maxtext
// write): the mesh and plan `result` carries (SearchResult::winner_mesh,
// winner_plan), planned with `rules` over `manifest`.
// REQUIRES: result.winner_plan.
CheckReport search_winner_report(const SearchResult& result,
                                 const Manifest& manifest,
                                 const RuleSet& rules,
                                 const Provenance& provenance);
// The header's line that names the winner as the plan it is: "search's
// winner, rank 1 of 20 by tokens: plan --mesh dp:2,fsdp:128 --dcn dp:2
// --remat full --per-device-batch 2". REQUIRES: result.winner().
std::string search_winner_note(const SearchResult& result,
                               SearchObjective objective);

using Report = std::variant<MeshReport,
                            TopologyListReport,
                            TopologyShowReport,
                            ManifestReport,
                            ModelListReport,
                            PresetListReport,
                            ExplainReport,
                            CheckReport,
                            ReshardReport,
                            SearchReport>;

// The view `report` shows: its alternative's, or a CheckReport's `view`.
View view_of(const Report& report);

// Whether `report` can be written in `format`; false, with the reason
// reported in `diags`, when it cannot: the maxtext format of a mesh (or of
// logical axis rules) with an axis MaxText has no name for
// [maxtext.axis-name].
bool can_render(const Report& report, Format format, Diagnostics& diags);

// ---------------------------------------------------------------------------
// Rendering

// Whether `view` has a renderer of its own for `format` (render() falls back
// to text where it has not).
bool has_renderer(View view, Format format);

// The formats that at least one of `views` has a renderer for, in the order
// of k_formats: what --format offers on a command that shows `views`.
// formats_of({View::topology_list}) is {text, json}; formats_of({View::plan,
// View::explain, View::preset_list}) is {text, json, markdown, github,
// html}.
std::vector<Format> formats_of(std::initializer_list<View> views);

// Where a document goes as it is written: called with each piece, in order.
using WriteText = std::function<void(std::string_view)>;

// A rendered document: its whole text, or, from a renderer that streams (the
// JSON of check, memory, plan and reshard), what writes it in pieces as it
// formats them. A streamed document keeps a copy of the report struct (the
// report variant may be a temporary) but refers to the data it reports on and
// to the diagnostics: write it while those live.
class Document {
 public:
  explicit Document(std::string text) : m_text(std::move(text)) {}
  explicit Document(std::function<void(const WriteText&)> stream)
      : m_stream(std::move(stream)) {}

  // True when write() does the formatting (nothing is formatted yet).
  bool streamed() const { return static_cast<bool>(m_stream); }
  // Hands the document to `write`: whole, or in pieces when streamed.
  void write(const WriteText& write) const;
  // The whole document as one string (a streamed one is collected).
  std::string str() const;

 private:
  std::string m_text;
  std::function<void(const WriteText&)> m_stream;
};

// `report` in `format`, or as text when its view has no renderer for
// `format`. `diags` are the command's diagnostics (JSON lists them; text ends
// with the verdict they give).
Document render(const Report& report, Format format, const Diagnostics& diags);

// The document written with --format json when the input was bad: the header
// keys and `diagnostics`.
std::string diagnostics_json(std::string_view command,
                             const Diagnostics& diags);

// What `command` writes to stdout in `format` when its input was bad (exit
// 2), `diags` holding why: nothing for text (the diagnostics go to stderr
// alone); diagnostics_json for json; for github, an ::error annotation per
// diagnostic (the file, line and column of a JSON syntax error, of a spec
// that does not parse) and a line saying nothing was checked; for markdown,
// a heading and the table of errors. Findings of one kind fold as the
// documents of check and plan fold them.
std::string input_error_document(std::string_view command,
                                 Format format,
                                 const Diagnostics& diags);

// ---------------------------------------------------------------------------
// Folding per-tensor rows across layers (src/report/fold.cpp)

// One row of a per-tensor text table, viewing the tensor's name and the
// rest of the row (`rest`, compared whole), which outlive the fold. Rows
// that share a rest should view one string: it is hashed once.
struct NameRowRef {
  std::string_view name;
  std::string_view rest;
};

// A row after folding: `name` with folded components ("{0..31}"), and how
// many rows it stands for.
struct FoldedRow {
  std::string name;
  std::string rest;
  size_t count = 1;
  // The input rows it stands for (indices into the rows given), ascending;
  // count of them.
  std::vector<size_t> members;
};

// Folds rows whose names differ only in dot-separated integer components
// ("model.layers.7.mlp.up_proj.weight") and whose `rest` is equal, into one
// row: "model.layers.{0..31}.mlp.up_proj.weight". Components are folded from
// the last to the first, so experts fold inside layers:
// "model.layers.{3..60}.mlp.experts.{0..255}.down_proj.weight". A set with
// gaps prints its runs: "{0..2,5,7..9}". A component with a leading zero
// ("07") is a word, not a number. Rows keep the order of their first member.
std::vector<FoldedRow> fold_row_refs(std::span<const NameRowRef> rows);

}  // namespace shardplan
