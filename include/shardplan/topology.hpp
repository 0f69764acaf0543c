#pragma once

// Layer 3: where mesh axes land on devices (docs/topologies.md): the
// topologies (the catalogue of configs/topologies/, names such as
// "v5p-128", user files), the device grids JAX's mesh_utils builds on them,
// and a mesh laid on a topology: its grid, the links of each axis, hosts.
//
// Without a topology, the device grid for a bare device count (`--devices
// N`) is what JAX does for devices it knows nothing about (CPU, or a plain
// list): create_device_mesh reshapes the device list, and
// create_hybrid_device_mesh gives each slice a contiguous block of ids, DCN
// index major within each axis.
//
// What it offers, by the file that implements it:
//   topology/topology.cpp
//     DeviceGrid, generic_device_grid, assemble_hybrid_grid
//                              ids in mesh shape for a bare device count
//   topology/chips.cpp
//     TpuChip, TpuChipInfo, tpu_chips, chip_info   the TPU chip table, one
//                              row per generation: names, device kind,
//                              torus, rings
//     find_tpu_chip, to_string, is_2d, device_kind
//   topology/grid.cpp
//     tpu_devices, physical_tpu_mesh    a slice's devices and their array
//     assign_torus_axes, split_torus_axes   mesh axes on the torus axes
//     create_device_mesh, create_hybrid_device_mesh, tpu_device_grid
//                              JAX's mesh_utils, id for id
//     gpu_device_grid          GPUs: ids sorted and reshaped
//   topology/catalog.cpp
//     TopologyKind, Figure, TopologyFigures, figure_fields, Topology
//                              a topology, its figures and their sources
//     resolve_topology         a catalogue name or an explicit shape
//     ChipFamily, find_chip_family, family_tpu_slice, family_gpus
//                              the catalogue's families, for topology files
//     catalogue_topologies, catalogue_slices_like, catalogue_families,
//     whole_hosts              the catalogue's entries, for list and search
//   topology/layout.cpp
//     LinkClass, AxisLink, HostLayout, MeshLayout, LayoutOptions
//     layout_mesh, mesh_links  a mesh on a topology: grid, links, hosts
//     MeshInput, resolve_mesh, PlacedMesh, place_mesh
//                              a command's mesh inputs, resolved and laid
//                              out on a topology or a device count

#include <shardplan/diag.hpp>
#include <shardplan/mesh.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// Device ids laid out in the mesh's shape, row-major (last axis fastest).
struct DeviceGrid {
  std::vector<int64_t> shape;
  std::vector<int64_t> ids;

  // Id at a mesh coordinate. REQUIRES: coords.size() == shape.size().
  int64_t at(const std::vector<int64_t>& coords) const;
};

// The grid for devices 0..N-1 without a topology. Slice s (of
// mesh.num_slices()) holds ids [s*P, (s+1)*P) with P devices per slice, laid
// out in the ICI shape; slice s sits at the DCN coordinate unravel(s,
// dcn_shape), and global coordinate c of axis k is dcn_k * ici_size_k + ici_k.
//
// Example: mesh dp:4,tp:2 with dcn dp:2 (two slices of 4):
//   slice 0 = ids 0..3 as [[0,1],[2,3]], slice 1 = ids 4..7;
//   grid = [[0,1],[2,3],[4,5],[6,7]].
DeviceGrid generic_device_grid(const Mesh& mesh);

// The assembly step of JAX's create_hybrid_device_mesh: slice s's grid
// (`slice_ids[s]`, row-major in `ici_shape`) goes to DCN coordinate
// unravel(s, dcn_shape), and global coordinate c of axis k is
// dcn_k * ici_shape[k] + ici_k (the DCN index is major within each axis).
// REQUIRES: ici_shape.size() == dcn_shape.size(); slice_ids.size() ==
// prod(dcn_shape); each slice_ids[s].size() == prod(ici_shape).
DeviceGrid assemble_hybrid_grid(
    const std::vector<int64_t>& ici_shape,
    const std::vector<int64_t>& dcn_shape,
    const std::vector<std::vector<int64_t>>& slice_ids);

// ---------------------------------------------------------------------------
// TPU device grids: JAX's jax.experimental.mesh_utils (create_device_mesh,
// create_hybrid_device_mesh) reproduced on a synthetic device list, down to
// iteration order and tie-breaks (src/topology/grid.cpp;
// docs/sources.md#jax-device-mesh, docs/sources.md#jax-split-physical-axes,
// docs/sources.md#jax-contiguous-submeshes,
// docs/sources.md#jax-hybrid-mesh).

enum class TpuChip { v2, v3, v4, v5e, v5p, v6e, tpu7x };

// The array JAX's _get_physical_tpu_mesh builds from a slice's devices.
enum class TpuPhysicalMesh {
  xy_core,   // (x, y, core); every device has z = 0 (v2, v3)
  xyz,       // (x, y, z); one device per chip ("megacore") required
  xyz_core,  // (x, y, z, core)
  // (x, y, z, core) with 2 devices per chip, else (x, y, z) (v5p)
  xyz_core_if_two,
};

// The device-kind handler JAX's create_device_mesh tries before the torus
// assignment: rings laid by hand for small slices (src/topology/grid.cpp).
enum class TpuRing {
  none,   // v4: the torus assignment only
  v2_v3,  // _tpu_v2_v3_create_device_mesh: the tray ring, never declines
  v5e,    // _v5e_create_device_mesh: 2x2, 8 devices, 4x4 with an axis of 16
  v5p,    // _v5p_create_device_mesh: the 2x2x2 cube
  tpu7x,  // TPU7x: the 2x2x2 ring on every block of 8 devices, up to 32
};

// One row per TPU generation: what the code branches on. The catalogue file
// configs/topologies/<name>.json holds the rest (name count, devices per
// chip, hosts, wraparound rule, slices, figures); its device_kind and its
// slices' dimensionality must agree with the row, which the catalogue
// checks when it loads. A new generation is a TpuChip value, its row in
// src/topology/chips.cpp and its catalogue file.
struct TpuChipInfo {
  TpuChip chip = TpuChip::v4;
  std::string_view name;         // "v5p": the catalogue family
  std::string_view device_kind;  // what JAX reports and dispatches on
  int64_t torus_dims = 3;        // 2: slices are x by y (z = 1), shapes AxB
  TpuPhysicalMesh physical_mesh = TpuPhysicalMesh::xyz;
  TpuRing ring = TpuRing::none;
  // A 4-d physical mesh tries the core axis first, then x, y, z (TPU7x;
  // assign_torus_axes' core_axis_first).
  bool core_axis_first = false;
};

// Every generation, oldest first: the order `topology list` shows them in.
// Row k is TpuChip k.
std::span<const TpuChipInfo> tpu_chips();
const TpuChipInfo& chip_info(TpuChip chip);
// The generation named `name` ("v5p"); nullopt for none.
std::optional<TpuChip> find_tpu_chip(std::string_view name);

// "v2", "v3", "v4", "v5e", "v5p", "v6e", "tpu7x".
std::string_view to_string(TpuChip chip);
// v2, v3, v5e and v6e slices are 2D (z = 1); their shapes print as AxB.
bool is_2d(TpuChip chip);
// The device_kind string JAX reports and dispatches on: "TPU v2", "TPU v3",
// "TPU v4", "TPU v5 lite", "TPU v5p", "TPU v6 lite", "TPU7x".
std::string_view device_kind(TpuChip chip);

// One TPU slice shape (times num_slices identical slices).
struct TpuSlice {
  TpuChip chip = TpuChip::v4;
  std::array<int64_t, 3> chips{1, 1, 1};        // physical x, y, z in chips
  int64_t cores_per_chip = 1;                   // devices per chip
  std::array<int64_t, 3> host_bounds{2, 2, 1};  // chips per host
  int64_t num_slices = 1;
};

struct TpuDevice {
  int64_t id = 0;
  std::array<int64_t, 3> coords{0, 0, 0};
  int64_t core_on_chip = 0;
  int64_t slice_index = 0;
  int64_t process_index = 0;

  bool operator==(const TpuDevice&) const = default;
};

// The devices of `slice` in jax.devices() order: slice by slice, host by host
// (hosts numbered x fastest, then y, then z), inside a host core fastest, then
// x, y, z. id = core + cores_per_chip*(x + X*(y + Y*(z + Z*slice))). A host
// bound larger than the slice is clipped to it (a sub-host slice is one host),
// as JAX's mock_tpu_devices does.
// Example: chips 4x4x1, 1 core, hosts 2x2x1 lists ids
//   0,1,4,5, 2,3,6,7, 8,9,12,13, 10,11,14,15.
// REQUIRES: every chips[k] >= 1 and divisible by min(host_bounds[k], chips[k]);
// cores_per_chip >= 1; num_slices >= 1.
std::vector<TpuDevice> tpu_devices(const TpuSlice& slice);

// A device grid plus the physical assignment matrix A[p][l]
// (docs/output-schema.md, "mesh"):
// the part of physical axis p given to mesh axis l; the product over l of
// A[p][.] is physical axis p's size. Empty when a per-chip ring handler (not
// the torus assignment) built the grid.
struct TpuGrid {
  DeviceGrid grid;
  std::vector<std::vector<int64_t>> physical_assignment;
};

// How a logical mesh sits on a physical array: assignment[p][l] as above, and
// order[k] = the row-major flat index into the physical array of the device
// at row-major position k of the logical mesh.
struct TorusLayout {
  std::vector<std::vector<int64_t>> assignment;
  std::vector<int64_t> order;
};

// Prime factors of x in ascending order, with repeats; {} for 1.
// prime_factors(10) == {2, 5} (JAX's old _get_prime_factors returned {5}).
// REQUIRES: x >= 1.
std::vector<int64_t> prime_factors(int64_t x);

// JAX's _create_device_mesh_for_nd_torus: assigns mesh axes (last, the most
// network-intensive, first) to whole physical axes: subsets of ndim down to 1
// axes in itertools.combinations order, first exact product wins. With
// `core_axis_first` (TPU7x 4-d meshes) candidates of one size are tried with
// the core axis (3) first, then x, y, z. When an axis > 1 fits no subset:
// with allow_split_physical_axes, falls back to split_torus_axes; otherwise
// error "topology.no-assignment" with JAX's NotImplementedError text, its
// `dim` the index of the mesh axis that fits nowhere.
std::optional<TorusLayout> assign_torus_axes(
    const std::vector<int64_t>& physical_shape,
    const std::vector<int64_t>& mesh_shape,
    bool allow_split_physical_axes,
    Diagnostics& diags,
    bool core_axis_first = false);

// JAX's _create_device_mesh_for_nd_torus_splitting_axes: every mesh axis
// takes a factor of each physical axis, chosen by JAX's preference order
// (whole physical axes by product, then by count, then the product placed on
// already used physical axes, then the lexicographically larger vector).
// Error "topology.device-count" when the products differ.
std::optional<TorusLayout> split_torus_axes(
    const std::vector<int64_t>& physical_shape,
    const std::vector<int64_t>& mesh_shape,
    Diagnostics& diags);

// The physical array JAX builds from a device list (_get_physical_tpu_mesh):
// shape (x, y, cores) on v2/v3, (x, y, z, cores) on TPU7x and 2-core v5p,
// else (x, y, z) (one device per chip required: "topology.megacore");
// coordinates are taken relative to their minimum. ids are row-major.
// Error "topology.hole" when the devices are not a full cuboid.
struct PhysicalTpuMesh {
  std::vector<int64_t> shape;
  std::vector<int64_t> ids;
};
std::optional<PhysicalTpuMesh> physical_tpu_mesh(
    TpuChip chip, const std::vector<TpuDevice>& devices, Diagnostics& diags);

// JAX's create_device_mesh for the devices of one slice (in jax.devices()
// order): the device-kind ring handlers (v2/v3, v5e/v6e, v5p, TPU7x), then the
// torus assignment on the physical array. `contiguous_submeshes` applies
// JAX's transpose trick (error "topology.contiguous-submeshes" where it has
// none). Errors: "topology.device-count" (product of mesh_shape differs from
// the device count), "topology.no-assignment", "topology.megacore",
// "topology.hole". Locations are left empty for the caller to fill.
std::optional<TpuGrid> create_device_mesh(
    TpuChip chip,
    const std::vector<int64_t>& mesh_shape,
    const std::vector<TpuDevice>& devices,
    bool allow_split_physical_axes,
    Diagnostics& diags,
    bool contiguous_submeshes = false);

// JAX's create_hybrid_device_mesh: devices grouped by slice_index (sorted),
// one create_device_mesh(ici_shape) per slice, slice i placed at
// unravel(i, dcn_shape); global index of axis k = dcn_k * ici_k + ici_k, so the
// DCN index is major within each axis. Error "topology.slice-count" when the
// slice count differs from the product of dcn_shape. The assignment matrix is
// slice 0's.
std::optional<TpuGrid> create_hybrid_device_mesh(
    TpuChip chip,
    const std::vector<int64_t>& ici_shape,
    const std::vector<int64_t>& dcn_shape,
    const std::vector<TpuDevice>& devices,
    bool allow_split_physical_axes,
    Diagnostics& diags);

// The grid of `mesh` on `slice`: create_device_mesh(mesh.shape()) for one
// slice, create_hybrid_device_mesh(ici_shape, dcn_shape) when the slice or the
// mesh has more than one slice. Locations are left empty for the caller to
// fill (layout_mesh puts the mesh's source there).
std::optional<TpuGrid> tpu_device_grid(const TpuSlice& slice,
                                       const Mesh& mesh,
                                       bool allow_split_physical_axes,
                                       Diagnostics& diags);

// GPUs: JAX sorts GPU devices by id and reshapes (no topology awareness);
// with id = node * gpus_per_node + local_rank that is a reshape of 0..N-1,
// so a node's GPUs are consecutive and the last mesh axes stay inside a node.
// With DCN factors each DCN block is a contiguous run of N / num_slices ids
// (whole nodes when gpus_per_node divides it), DCN index major within each
// axis, like create_hybrid_device_mesh with process_is_granule. Same result as
// generic_device_grid. REQUIRES: gpus_per_node >= 1.
DeviceGrid gpu_device_grid(const Mesh& mesh, int64_t gpus_per_node);

// ---------------------------------------------------------------------------
// Topologies (docs/topologies.md): the catalogue in configs/topologies/
// (compiled in, src/topology/catalog.cpp), names like "v5p-128", "2xv5e-256",
// "v5p:4x4x8", "h100x64", and user files of the same schema.

enum class TopologyKind { tpu, gpu };
std::string_view to_string(TopologyKind kind);

// A figure and where it comes from (docs/sources.md, "Hardware", or
// "unverified: ..." / "assumption: ..." where the references have none).
struct Figure {
  double value = 0;
  std::string source;
};

// A chip's measured GEMM rates by shape (one batch): rates[m][n][k] in
// FLOP/s over `dims` (ascending powers of two) for each of m, n, k. The step
// scales its matmul efficiency by rate(m, n, k) / best() for each matmul's
// shape (docs/step.md, "Matmul shapes"). Empty: no curve, every shape at
// the efficiency.
struct MatmulCurve {
  std::vector<double> dims;
  std::vector<double> rates;  // dims^3, m-major, then n, then k
  std::string source;

  bool empty() const { return dims.empty(); }
  // The largest rate of the table.
  double best() const;
  // The rate at (m, n, k), interpolated in log2 of each dimension between
  // the table's points; beyond its largest dimension, the edge's rate; below
  // its smallest, the edge's rate scaled by dim / smallest (a smaller matmul
  // takes about as long as the smallest measured).
  double rate(double m, double n, double k) const;
};

// A grouped GEMM's rate (routed experts' grouped matmuls, the forward and
// the backward's two) by the tokens an expert receives, as a fraction of
// the matmul curve's best (docs/step.md, "Matmul shapes"). Empty: each
// expert priced as a dense GEMM of its rows on the matmul curve.
struct GroupedCurve {
  std::vector<double> tokens;     // tokens an expert, ascending
  std::vector<double> fractions;  // of MatmulCurve::best(), one a point
  std::string source;

  bool empty() const { return tokens.empty(); }
  // The fraction at `tokens_per_expert`, interpolated in log2 between the
  // points; beyond the last, the last; below the first, the first scaled
  // by tokens / first (a smaller expert batch takes about as long).
  double fraction(double tokens_per_expert) const;
};

// The figures of a topology, in one unit each: bytes, bytes per second,
// seconds. Link bandwidths are one way: ICI per link, DCN per chip, NVLink
// per GPU, scale-out ("network") per GPU. Absent figures have an empty
// source and value 0 (DCN on v2/v3).
struct TopologyFigures {
  Figure hbm_bytes_per_device;
  Figure ici_bytes_per_s_per_link;
  Figure ici_links_per_chip;
  Figure ici_latency_s;
  Figure dcn_bytes_per_s_per_chip;
  Figure dcn_latency_s;
  Figure nvlink_bytes_per_s_per_gpu;
  Figure nvlink_latency_s;
  // The bus bandwidth NCCL's collectives reach over NVLink on large
  // messages (nccl-tests' busbw), measured: what the step prices NVLink
  // collectives at (docs/step.md, "Links"); absent: the datasheet's
  // nvlink_bytes_per_s_per_gpu.
  Figure nvlink_collective_bytes_per_s_per_gpu;
  Figure network_bytes_per_s_per_gpu;
  Figure network_latency_s;
  // Compute (the training step's estimate, docs/step.md): dense
  // bf16 matmul peak and HBM bandwidth of one JAX device (a chip's over its
  // devices: v2, v3 and TPU7x have two).
  Figure bf16_flops_per_s_per_device;
  Figure hbm_bytes_per_s_per_device;
  // Dense FP8 matmul peak of a device, where the chip computes in FP8
  // (H100 and later, TPU7x): the step's weights' matmuls with
  // `--matmul-dtype fp8` or MaxText's fp8 quantization (docs/step.md,
  // "FP8"). Absent: no FP8 units.
  Figure fp8_flops_per_s_per_device;
  // The host's RAM per chip (a GPU is a chip): the VM's or the server's
  // memory over the chips it serves, which a host's share of offloaded
  // activations and model states must fit (docs/memory.md, "Host memory").
  Figure host_memory_bytes_per_chip;
  // A chip's link to its host's memory (PCIe, host DMA), one way: what
  // offloaded activations and hosted states move over.
  Figure host_bytes_per_s_per_chip;
  // The fractions of bf16_flops_per_s_per_device the step's matmuls reach:
  // the weights' matmuls, and the attention kernel's (docs/step.md,
  // "Efficiencies"). Fitted to published runs of the chip
  // (bench/fit_step.py, docs/fidelity.md) or measured; absent: the
  // roofline, 1.
  Figure matmul_efficiency;
  Figure attention_efficiency;
  // The attention kernel's as JAX calls it (jax.nn.dot_product_attention,
  // cuDNN), where measured apart: the step's under runtime xla.
  Figure xla_attention_efficiency;
  // The fractions of hbm_bytes_per_s_per_device the step's memory-bound
  // work reaches: fused kernels (a device-to-device copy), and eager
  // PyTorch's elementwise kernels (`--kernels eager`; absent: the fused
  // figure). Measured (docs/step.md, "Memory-bound work"); absent: 1.
  Figure memory_efficiency;
  Figure eager_memory_efficiency;
  // The best FP8 GEMM's fraction of the FP8 peak over the best bf16 GEMM's
  // of the bf16 peak (measured): the FP8 matmuls' peak is scaled by it
  // (docs/step.md, "FP8"); absent: 1.
  Figure fp8_efficiency_ratio;
  // The catalogue's measured GEMM rates by shape, where it has them.
  MatmulCurve matmul_curve;
  GroupedCurve grouped_curve;
  // How far those may be off, a fraction (the step's band): the fit's
  // largest error on its runs, at least 0.05; 0.25 from fewer than three.
  Figure efficiency_spread;
};

// Every figure of TopologyFigures with its name (as files and the JSON
// output spell it), and the kind of topology it belongs to: the one list the
// catalogue, topology files and the report all walk. `max` and `min` bound
// what a file may give: beyond them a figure is a typo, and a capacity
// must stay exact as an int64 byte count.
struct FigureField {
  std::string_view name;
  Figure TopologyFigures::*member;
  std::optional<TopologyKind> kind;  // nullopt: both kinds
  double max;
  // A count (HBM bytes, links) is at least 1: show writes it as an integer,
  // so a fraction of one would read back as 0. 0 for the others.
  double min = 0;
};
std::span<const FigureField> figure_fields();

struct Topology {
  std::string
      name;  // canonical: "v5p-128", "2xv5p-256", "v5p:4x4x8", "h100x64"
  TopologyKind kind = TopologyKind::tpu;
  std::string chip;  // catalogue family: "v5p", "h100", ...
  std::string
      device_kind;     // what JAX reports: "TPU v5p", "NVIDIA H100 80GB HBM3"
  std::string source;  // "catalogue" or the file it was read from

  // TPU: one slice's shape in chips (x, y, z), devices per chip, chips per
  // host, slice count; wraparound per physical axis (x, y, z).
  TpuSlice tpu;
  std::array<bool, 3> wraparound{false, false, false};

  // GPU: gpus in all; gpus per host (process); GPUs per NVLink domain.
  int64_t gpus = 0;
  int64_t gpus_per_host = 8;
  int64_t nvlink_domain = 8;

  TopologyFigures figures;

  int64_t num_slices() const {
    return kind == TopologyKind::tpu ? tpu.num_slices : 1;
  }
  int64_t devices() const;
  int64_t devices_per_host() const;
  int64_t num_hosts() const;
  int64_t chips() const;  // TPU chips (all slices); GPUs on GPU
};

// A catalogue name or an explicit shape (docs/topologies.md, "Names").
// Errors (located at `where`): "topology.unknown" with the nearest names,
// "topology.size" for a count with no standard slice (listing the nearest),
// "topology.shape" for a bad explicit shape, "topology.slices" for a bad "Kx"
// prefix.
std::optional<Topology> resolve_topology(std::string_view name,
                                         const Location& where,
                                         Diagnostics& diags);

// A catalogue chip family ("v5p", "h100"), as a topology file's "chip"
// names it (by its name or an alias).
struct ChipFamily {
  std::string name;  // the family's own name, after aliases
  TopologyKind kind = TopologyKind::tpu;
  bool multislice = false;  // TPU: slices can be joined over DCN
};
std::optional<ChipFamily> find_chip_family(std::string_view name);

// What the catalogue makes of a chip family, before a topology file changes
// it: one slice of `chips` (x, y, z) of TPU family `family`, with its host
// bounds (the slice itself when it fits one host), wraparound and figures;
// or `gpus` GPUs of GPU family `family`. Empty name, source "catalogue".
// REQUIRES: find_chip_family(family) is a TPU (GPU) family; chips >= 1.
Topology family_tpu_slice(std::string_view family,
                          const std::array<int64_t, 3>& chips);
Topology family_gpus(std::string_view family, int64_t gpus);

// Whether a slice of `chips` is made of whole hosts of `host_bounds` chips
// (a bound larger than the slice is clipped to it).
bool whole_hosts(const std::array<int64_t, 3>& chips,
                 const std::array<int64_t, 3>& host_bounds);

// The catalogue's standard entries, family by family, smallest first.
std::vector<Topology> catalogue_topologies();
// The catalogue's standard slices of `topology`'s chip family with its
// slice count (a TPU topology of 2 slices gives "2xv5p-8", "2xv5p-16",
// ...), fewest devices first, those within the device cap: the sizes a
// search over device counts tries. Empty when the chip is no catalogue
// family. REQUIRES: topology.chip names a family (by name or alias) or is
// empty.
std::vector<Topology> catalogue_slices_like(const Topology& topology);
// The family names: "v2", ..., "tpu7x", "a100", ..., "gb200".
std::vector<std::string> catalogue_families();

// ---------------------------------------------------------------------------
// A mesh laid on a topology: the device grid, and for every mesh axis the
// links its collectives use (docs/output-schema.md, "mesh", `axes_links`;
// docs/topologies.md, "Links per axis").

// host: a device's link to its host's memory (PCIe, host DMA).
enum class LinkClass { none, ici, dcn, nvlink, network, mixed, host };
std::string_view to_string(LinkClass link);

struct AxisLink {
  std::string axis;
  LinkClass link = LinkClass::none;  // none: an axis of size 1
  bool wraparound = false;           // the axis's devices form a closed ring
  int64_t ring_size = 1;  // devices in one collective group (the axis size)
  std::vector<std::string> physical_axes;  // TPU ICI: "x", "y", "z", "core"
  double bytes_per_s = 0;  // what one device sends per second along the axis
  double latency_s = 0;    // per hop
  // A TPU axis across slices (`mixed`): its part inside a slice,
  // `inner_size` devices of each group on ICI at `inner_bytes_per_s` (a
  // closed ring when `inner_wraparound`); `bytes_per_s` is then the DCN
  // share of a device. XLA runs such a collective hierarchically: only a
  // device's share crosses DCN (collective_cost, docs/step.md). 1: none.
  int64_t inner_size = 1;
  double inner_bytes_per_s = 0;
  bool inner_wraparound = false;
};

struct HostLayout {
  int64_t count = 1;
  int64_t devices_per_host = 1;
  std::vector<std::vector<int64_t>>
      device_ids;  // per host, jax.devices() order
  // JAX's Mesh.local_mesh (jax/_src/mesh.py, _get_local_mesh): the block of
  // the device grid that holds host 0's devices and no other, the same shape
  // for every host; empty when some host's devices do not form a block.
  std::vector<int64_t> local_mesh_shape;
  // The first host whose devices do not form a block of the grid.
  std::optional<int64_t> not_contiguous_host;
  // eformer's calculate_host_mesh_shape(mesh.shape, devices_per_host, count)
  // (processes split the leading axes, whatever the grid); empty when it
  // fails (a diagnostic says why).
  std::vector<int64_t> eformer_host_mesh_shape;
};

struct MeshLayout {
  DeviceGrid grid;
  std::vector<std::vector<int64_t>> physical_assignment;  // TPU torus path only
  std::vector<std::string> physical_axis_names;           // rows of the above
  std::vector<AxisLink> links;                            // one per mesh axis
  HostLayout hosts;
};

// eformer's calculate_host_mesh_shape (docs/sources.md#eformer):
// processes split the mesh's leading axes. nullopt, with eformer's message as
// "topology.host-mesh", when the product differs from devices x processes or
// the split leaves a host shape of another size.
std::optional<std::vector<int64_t>> calculate_host_mesh_shape(
    const std::vector<int64_t>& global_mesh_shape,
    int64_t devices_per_host,
    int64_t num_processes,
    Diagnostics& diags);

struct LayoutOptions {
  // JAX's allow_split_physical_axes: a mesh axis may take part of a
  // physical torus axis.
  bool allow_split_physical_axes = false;
  // What to call the mesh's inputs in diagnostics (mesh, dcn, allow_split).
  MeshSources sources;
  // The mesh string, when there is one: errors about the mesh then point
  // at it with a caret (under the axis that fits nowhere).
  std::string_view mesh_text;
  // Report what JAX's and eformer's host meshes make of the layout
  // ("topology.host-block", "topology.host-mesh"): `shardplan mesh` does;
  // commands that only need the grid and its links do not.
  bool report_hosts = false;
};

// Lays `mesh` on `topology`: device count and slice count checked (errors
// "topology.device-count" at sources.mesh, "topology.slice-count" at
// sources.dcn), the device grid as JAX builds it (its errors at
// sources.mesh; "topology.no-assignment" hints at sources.allow_split),
// links per axis, hosts. With options.report_hosts, also a warning
// "topology.host-block" when a host's devices do not form a block of the
// grid (JAX has no local mesh), and eformer's calculate_host_mesh_shape's
// error "topology.host-mesh" (a warning across slices).
std::optional<MeshLayout> layout_mesh(const Topology& topology,
                                      const Mesh& mesh,
                                      const LayoutOptions& options,
                                      Diagnostics& diags);

// The links of every axis of `mesh` laid as `grid` on `topology`, as
// layout_mesh computes MeshLayout::links, for a grid built elsewhere (a
// reshard's common mesh of two meshes). REQUIRES: grid.shape ==
// mesh.shape() and its ids are devices of `topology`.
std::vector<AxisLink> mesh_links(const Topology& topology,
                                 const Mesh& mesh,
                                 const DeviceGrid& grid);

// A mesh's inputs as a command gives them: the mesh string, its DCN factors
// and axis names, and the topology it goes on (or only a device count).
struct MeshInput {
  std::string_view mesh;                // "fsdp:-1,tp:4"
  std::string_view dcn;                 // "" or "dp:2"
  std::vector<std::string> axis_names;  // for the positional form
  const Topology* topology = nullptr;   // null: a bare device count
  std::optional<int64_t> devices;       // without a topology
  bool allow_split_physical_axes = false;
  MeshSources sources;
  bool report_hosts = false;  // as LayoutOptions::report_hosts
};

// parse_mesh with the device and slice counts of input.topology (and
// "SOURCES.TOPOLOGY NAME" as where they come from), or input.devices.
// `count_may_differ` as MeshOptions has it.
std::optional<Mesh> resolve_mesh(const MeshInput& input,
                                 bool count_may_differ,
                                 Diagnostics& diags);

// A mesh and where its devices are.
struct PlacedMesh {
  Mesh mesh;
  MeshLayout layout;
};

// resolve_mesh, then the mesh laid on input.topology as JAX lays it
// (layout_mesh), or without a topology the plain grid of devices
// 0..N-1 (generic_device_grid). nullopt after an error (reported).
std::optional<PlacedMesh> place_mesh(const MeshInput& input,
                                     Diagnostics& diags);

}  // namespace shardplan
