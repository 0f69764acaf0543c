#pragma once

// Layer 7: renders results as JSON (schema_version 1) or text. Core code
// computes; this layer only formats. Every JSON document has schema_version,
// shardplan_version and command.

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/models.hpp>
#include <shardplan/reshard.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/topology.hpp>
#include <shardplan/validate.hpp>

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

inline constexpr int k_schema_version = 1;
std::string_view shardplan_version();

// `shardplan mesh`: the mesh object, device_ids and diagnostics; with a
// topology also the topology object, physical_assignment, axes_links and
// hosts (DESIGN.md section 3). `topology` is null for --devices.
std::string mesh_json(const Mesh& mesh,
                      const MeshLayout& layout,
                      const Topology* topology,
                      const Diagnostics& diags);
std::string mesh_text(const Mesh& mesh,
                      const MeshLayout& layout,
                      const Topology* topology);

// `shardplan topology list` and `show`.
std::string topology_list_json(const std::vector<Topology>& topologies);
std::string topology_list_text(const std::vector<Topology>& topologies);
std::string topology_show_json(const Topology& topology);
std::string topology_show_text(const Topology& topology);

// `shardplan manifest`: the native manifest form (read_manifest reads it
// back), with the common header keys, and a text summary.
std::string manifest_json(const Manifest& manifest, const Diagnostics& diags);
std::string manifest_text(const Manifest& manifest);

// `check` and `memory`: what was checked, and what was found.
struct CheckReport {
  std::string_view command;  // "check" or "memory"
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
};

// Where a document goes as it is written: called with each piece, in order.
using WriteText = std::function<void(std::string_view)>;

// DESIGN.md section 3: mesh, topology, tensors, diagnostics, memory, summary
// (`memory` adds by_dtype and largest to the memory object); for `plan`,
// `rules` (the rule set's source) instead of `specs_file`, and each tensor's
// `rule`: {index, description}, so that it is itself a valid --specs file.
// Handed to `write` in pieces of about a megabyte, so that a large plan is
// never held whole (`plan --format json` on 100k tensors writes ~32 MB).
void write_check_json(const CheckReport& report,
                      const Diagnostics& diags,
                      const WriteText& write);
// A short summary: what was checked, memory per device, the verdict.
std::string check_text(const CheckReport& report, const Diagnostics& diags);
// A summary a CI job can post on a pull request.
std::string check_markdown(const CheckReport& report, const Diagnostics& diags);
// GitHub Actions workflow commands: one ::error/::warning line per
// diagnostic, pointing at the specs file line where there is one.
std::string check_github(const CheckReport& report, const Diagnostics& diags);
// Per category with a bar against HBM, per dtype, the largest tensors.
std::string memory_text(const CheckReport& report);

// Tensors grouped by the rule that decided them, layers folded, with spec
// and bytes per device; then check_text's summary.
std::string plan_text(const CheckReport& report, const Diagnostics& diags);
// `plan --explain NAME`: every rule, whether it matched, what its algorithm
// considered, and the result.
std::string explain_json(const RuleTrace& trace,
                         const RuleSet& rules,
                         const Mesh& mesh);
std::string explain_text(const RuleTrace& trace,
                         const RuleSet& rules,
                         const Mesh& mesh);
// `plan --rules list`: the built-in presets.
std::string presets_list_json(const std::vector<RulePreset>& presets);
std::string presets_list_text(const std::vector<RulePreset>& presets);

// `shardplan manifest --model list`: the built-in models.
std::string models_list_json(const std::vector<BuiltinModel>& models);
std::string models_list_text(const std::vector<BuiltinModel>& models);

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
};

// Folds rows whose names differ only in dot-separated integer components
// ("model.layers.7.mlp.up_proj.weight") and whose `rest` is equal, into one
// row: "model.layers.{0..31}.mlp.up_proj.weight". Components are folded from
// the last to the first, so experts fold inside layers:
// "model.layers.{3..60}.mlp.experts.{0..255}.down_proj.weight". A set with
// gaps prints its runs: "{0..2,5,7..9}". A component with a leading zero
// ("07") is a word, not a number. Rows keep the order of their first member.
std::vector<FoldedRow> fold_row_refs(std::span<const NameRowRef> rows);

// The document written with --format json when the input was bad: the header
// keys and `diagnostics`.
std::string diagnostics_json(std::string_view command,
                             const Diagnostics& diags);

// `reshard` (src/report/reshard.cpp): a plan moving a manifest's tensors from
// one mesh (and topology) to another.
struct ReshardReport {
  const Manifest& manifest;
  const Mesh& from_mesh;
  const Topology* from_topology;  // null with --devices
  const Mesh& to_mesh;
  const Topology* to_topology;
  const ReshardOptions& options;
  const ReshardPlan& plan;
};

// DESIGN.md section 3 `reshard`: from, to, donate, partial, same_mesh,
// same_devices, transfer_link, tensors (written directly, not as a DOM),
// totals, naive_totals, saved, summary, diagnostics. Handed to `write` in
// pieces (never held whole).
void write_reshard_json(const ReshardReport& report,
                        const Diagnostics& diags,
                        const WriteText& write);
// The two sides, one line per tensor (folded across layers), the totals
// next to the naive plan's, and the ten most expensive tensors.
std::string reshard_text(const ReshardReport& report, const Diagnostics& diags);

}  // namespace shardplan
