#pragma once

// Layer 7, internal: the JSON and text helpers of report.cpp that the other
// report/*.cpp files share (report/reshard.cpp). Defined in report.cpp.

#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/report.hpp>
#include <shardplan/spec.hpp>
#include <shardplan/topology.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan::report_detail {

using nlohmann::ordered_json;

// schema_version, shardplan_version and command.
ordered_json header(std::string_view command);
// Pretty JSON, two-space indents, arrays of scalars on one line; a final
// newline.
std::string dump(const ordered_json& j);
// One JSON value on one line (invalid UTF-8 replaced).
std::string dump_scalar(const ordered_json& j);
ordered_json diagnostics_array(const Diagnostics& diags);
// The `mesh` and `topology` objects of check and mesh.
ordered_json mesh_object(const Mesh& mesh);
ordered_json topology_object(const Topology& topology);
// A spec as JSON: null, "axis" or ["a", "b"] per dim.
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
// ordered_json): dump() writes it as dump_scalar(raw_marker()), which the
// caller then replaces.
ordered_json raw_marker();
// Hands `doc` to `write` with its raw_marker() replaced by what
// fill(piece, flush) appends to `piece`; `fill` calls flush() after each
// entry, and the text goes out in pieces of about a megabyte, never whole.
using FillPieces =
    std::function<void(std::string& piece, const std::function<void()>& flush)>;
void write_spliced(const std::string& doc,
                   const WriteText& write,
                   const FillPieces& fill);

// Text: "16,060,522,496", "14.96 GiB", "0.56 ms", "[4096, 14336]", and a
// table whose first row is the header (numeric columns right-aligned).
std::string with_commas(int64_t value);
std::string human_bytes(int64_t bytes);
std::string seconds_text(double seconds);
std::string rate_text(double bytes_per_s);
std::string table(const std::vector<std::vector<std::string>>& rows);
// The end of a text report: "ok", "ok, 2 warnings", "3 errors, 1 warning".
std::string verdict(const Diagnostics& diags);
// "mesh fsdp:16,tp:4 (64 devices) on v5p-128" (no " on ..." without a
// topology).
std::string mesh_line(const Mesh& mesh, const Topology* topology);

}  // namespace shardplan::report_detail
