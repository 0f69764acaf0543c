#pragma once

// Layer 7: renders results as JSON (schema_version 1) or text. Core code
// computes; this layer only formats. Every JSON document has schema_version,
// shardplan_version and command.

#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/topology.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

inline constexpr int k_schema_version = 1;
std::string_view shardplan_version();

// `shardplan mesh`: the mesh object, device_ids and diagnostics; with a
// topology also the topology object, physical_assignment, axes_links and
// hosts (DESIGN.md section 3). `topology` is null for --devices.
std::string mesh_json(const Mesh& mesh, const MeshLayout& layout,
                      const Topology* topology, const Diagnostics& diags);
std::string mesh_text(const Mesh& mesh, const MeshLayout& layout,
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

// The document written with --format json when the input was bad: the header
// keys and `diagnostics`.
std::string diagnostics_json(std::string_view command, const Diagnostics& diags);

}  // namespace shardplan
