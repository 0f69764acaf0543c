#pragma once

// Layer 2: the logical device mesh and its string form
// (docs/mesh-syntax.md).
//
//   dp:2,fsdp:-1,tp:4          named; the string's order is the mesh order,
//                              major to minor (the last axis gets the fastest
//                              links)
//   2,-1,4 + --axis-names ...  positional
//   tp:4:explicit              an axis type: auto (default), explicit, manual
//   --dcn dp:2                 the DCN (multi-slice) factor of each axis
//
// Sizes in the mesh string are global sizes; an axis's ICI part is its size
// divided by its DCN factor. Example: `dp:4,tp:8` with `--dcn dp:2` on two
// slices of 16 devices gives dp = 2 (ICI) x 2 (DCN), tp = 8 x 1.
//
// What it offers (src/mesh.cpp implements all of it):
//   MeshAxis, Mesh             named axes, major to minor, with DCN factors
//   AxisType, parse_axis_type  auto, explicit, manual
//   MeshOptions, parse_mesh    the mesh string (and --dcn) parsed, -1 filled,
//                              reported at the locations its caller names
//   mesh_axis_offset           where axis i starts in the string (carets)
//   to_string, dcn_string      a mesh's canonical string and DCN part
//   AxisRole, AxisRoles        what each axis does in a training step
//   default_role_axes, has_default_role   the axis names of each role
//   resolve_axis_roles         the roles of a mesh's axes, from flags or
//                              the defaults

#include <shardplan/diag.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

enum class AxisType { automatic, explicit_, manual };

std::string_view to_string(AxisType type);  // "auto", "explicit", "manual"
std::optional<AxisType> parse_axis_type(std::string_view text);  // any case

struct MeshAxis {
  std::string name;
  int64_t size = 1;  // global size = ici * dcn, >= 1
  AxisType type = AxisType::automatic;
  int64_t ici = 1;  // part inside a slice
  int64_t dcn = 1;  // part across slices

  bool operator==(const MeshAxis&) const = default;
};

struct Mesh {
  std::vector<MeshAxis> axes;  // major to minor

  int64_t num_devices() const;  // product of sizes (checked when built)
  int64_t num_slices() const;   // product of dcn factors
  const MeshAxis* find(std::string_view name) const;
  // Index of the axis, or -1.
  int64_t index_of(std::string_view name) const;
  std::vector<std::string> axis_names() const;
  std::vector<int64_t> shape() const;
  std::vector<int64_t> ici_shape() const;
  std::vector<int64_t> dcn_shape() const;

  bool operator==(const Mesh&) const = default;
};

// The largest device count accepted anywhere (2^22; today's largest clusters
// have a few hundred thousand accelerators).
inline constexpr int64_t k_max_devices = int64_t{1} << 22;

// The most axes a mesh may have (MaxText's default mesh has 12).
inline constexpr size_t k_max_axes = 64;

// Where the inputs of a mesh come from, for diagnostics: the caller's names
// for them. The command line passes its flags ("--mesh", "--dcn",
// "--axis-names", "--devices", "--topology"; `reshard` its "--from-mesh",
// "--from-dcn", ...); the core never spells a flag itself.
struct MeshSources {
  std::string mesh;         // the mesh string
  std::string dcn;          // the DCN factors' string
  std::string axis_names;   // the names of a positional mesh
  std::string devices;      // a bare device count
  std::string topology;     // a topology, which gives the device count
  std::string allow_split;  // lets a mesh axis split a physical axis
};

struct MeshOptions {
  // Names for the positional form ("2,-1,4"); must be empty for the named form.
  std::vector<std::string> axis_names;
  // Devices the mesh must cover; required to fill a -1.
  std::optional<int64_t> num_devices;
  // Where num_devices comes from, for the hint of a count error
  // (Location::of("--topology v5p-128")); empty when it is the bare count
  // itself.
  Location devices_at;
  // Slices of the topology; nullopt when unknown (no topology given), in
  // which case the --dcn factors define the slice count.
  std::optional<int64_t> num_slices;
  // When true, a mesh without -1 whose product differs from num_devices is
  // accepted (`check` reports the difference as a plan error, with the rest).
  bool count_may_differ = false;
  // The DCN factors ("dp:2" or positional "2,1"), or empty. Without them on
  // a multi-slice topology, the slice count goes to the first axis whose
  // size it divides (eformer's create_mesh).
  std::string dcn;
  // What to call each input in diagnostics.
  MeshSources sources;
};

// Parses a mesh string and resolves it: fills -1 against num_devices, checks
// the product, splits each axis into ICI x DCN. Stops at the first problem,
// which is reported at the input's source (options.sources.mesh, .dcn or
// .axis_names), line 1, the column and a caret line. The device count is
// capped at k_max_devices.
std::optional<Mesh> parse_mesh(std::string_view text,
                               const MeshOptions& options,
                               Diagnostics& diags);

// Where axis `index` of a mesh string that parse_mesh accepted starts (its
// first non-space byte), for a caret under it; 0 when it has no such axis.
// mesh_axis_offset("dp:2, tp:4", 1) == 6.
size_t mesh_axis_offset(std::string_view text, size_t index);

// What a mesh axis does in a training step (docs/cli.md, `check`): data axes
// split the batch (and are what ZeRO shards over), tensor axes split heads and
// the MLP width, sequence axes split the tokens of a sequence (context
// parallelism), expert axes hold different experts (and split the batch for
// everything else, as MaxText's activation_batch and Megatron's expert-data
// parallel groups do), stage axes hold different layers (pipeline).
enum class AxisRole { data, tensor, sequence, expert, stage };

inline constexpr AxisRole k_axis_roles[] = {AxisRole::data,
                                            AxisRole::tensor,
                                            AxisRole::sequence,
                                            AxisRole::expert,
                                            AxisRole::stage};

std::string_view to_string(AxisRole role);  // "data", "tensor", ...

// The axis names that take a role when the caller names none: data dp, data,
// fsdp, fsdp_transpose; tensor tp, tensor, tensor_transpose,
// tensor_sequence, model, mp; sequence sp, cp, context, sequence; expert ep,
// expert; stage pp, stage, pipeline (eformer's and MaxText's axis names;
// docs/cli.md, `check`).
std::vector<std::string_view> default_role_axes(AxisRole role);
// Whether `axis` is one of default_role_axes(role).
bool has_default_role(AxisRole role, std::string_view axis);

// The axes of each role, each list in mesh order. An axis has at most one
// role; an axis with none holds replicas.
struct AxisRoles {
  std::vector<std::string> data;
  std::vector<std::string> tensor;
  std::vector<std::string> sequence;
  std::vector<std::string> expert;
  std::vector<std::string> stage;

  const std::vector<std::string>& of(AxisRole role) const;
  std::vector<std::string>& of(AxisRole role);
  // The role of `axis`, or nullopt.
  std::optional<AxisRole> role_of(std::string_view axis) const;
  // The product of the sizes of the role's axes in `mesh` (1 when none).
  int64_t size(const Mesh& mesh, AxisRole role) const;
};

// Where each role's list of names came from, for diagnostics
// (Location::of("--data-axes"), ...), by role.
struct AxisRoleSources {
  Location data;
  Location tensor;
  Location sequence;
  Location expert;
  Location stage;

  const Location& of(AxisRole role) const;
};

// The roles of `mesh`'s axes: a role whose list in `given` is non-empty
// takes exactly those axes (each must be an axis of the mesh: error
// mesh.role-axis at the role's source, with "did you mean"); a role whose
// list is empty takes the mesh's axes named in default_role_axes(role) that
// no given list claims. An axis given for two roles is an error
// (mesh.role-twice). Lists come back in mesh order.
// resolve_axis_roles(fsdp:16,tp:4, {}) == {data {fsdp}, tensor {tp}}.
std::optional<AxisRoles> resolve_axis_roles(const Mesh& mesh,
                                            const AxisRoles& given,
                                            const AxisRoleSources& sources,
                                            Diagnostics& diags);

// Canonical form: "dp:2,fsdp:8,tp:4:explicit" (the type only when not auto).
// parse_mesh(to_string(m)) with num_devices and dcn_string(m) gives m back.
std::string to_string(const Mesh& mesh);
// The DCN factors as a --dcn string, "dp:2"; empty when every factor is 1.
std::string dcn_string(const Mesh& mesh);

}  // namespace shardplan
