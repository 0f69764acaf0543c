#pragma once

// Internal to report: the JSON writer the views' renderers share
// (report/json.cpp). Documents are built as nlohmann ordered_json and laid
// out by dump(); arrays too large for ordered_json (a plan's and a reshard's
// tensors[]) are written directly and spliced in by write_spliced().

#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/report.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/spec.hpp>
#include <shardplan/topology.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardplan::report_detail {

using nlohmann::ordered_json;

// schema_version, shardplan_version and command.
ordered_json header(std::string_view command);
// Pretty JSON, two-space indents, arrays of scalars on one line
// ("shape": [4096, 14336]); a final newline.
std::string dump(const ordered_json& j);
// One JSON value on one line (invalid UTF-8 replaced).
std::string dump_scalar(const ordered_json& j);
// Each diagnostic as {severity, code, message (with its hint), tensor, dim,
// location}, the last three where known.
ordered_json diagnostics_array(const Diagnostics& diags);

// The `mesh` object of mesh, check, plan and reshard: axes, devices,
// slices, canonical, dcn.
ordered_json mesh_object(const Mesh& mesh);
// The `rules` object of plan, memory --rules and plan --explain: source,
// preset, name (null for a user's file).
ordered_json rules_json(const RuleSet& rules);
// The `topology` object of mesh, topology, check, plan and reshard.
ordered_json topology_object(const Topology& topology);
// The figures that apply to `topology` (its kind's, and DCN only where it
// has some), named: the topology object's `figures`, and topology show's.
std::vector<std::pair<std::string_view, const Figure*>> figure_list(
    const Topology& topology);

// A spec as JSON (docs/partition-specs.md): null, "axis" or ["a", "b"] per dim.
ordered_json spec_json(const PartitionSpec& spec);
// Appends `s` as a JSON string.
void append_json_string(std::string& out, std::string_view s);
// A spec as dump() lays out spec_json(spec) under a key at `indent`,
// written directly (it runs once per tensor); on one line when `indent` is
// k_one_line.
inline constexpr size_t k_one_line = static_cast<size_t>(-1);
void append_spec_json(std::string& out,
                      const PartitionSpec& spec,
                      size_t indent);

// A value to put where text written directly goes (arrays too large for
// ordered_json): dump() writes it as dump_scalar(raw_marker()), which
// write_spliced() then replaces.
ordered_json raw_marker();
// Hands `doc` to `write` with its raw_marker() replaced by what
// fill(piece, flush) appends to `piece`; `fill` calls flush() after each
// entry, and the text goes out in pieces of about a megabyte, never whole.
using FillPieces =
    std::function<void(std::string& piece, const std::function<void()>& flush)>;
void write_spliced(const std::string& doc,
                   const WriteText& write,
                   const FillPieces& fill);

}  // namespace shardplan::report_detail
