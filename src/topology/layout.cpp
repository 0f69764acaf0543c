// A mesh on a topology: the device grid (topology/grid.cpp), the links each
// mesh axis's collectives use, and the hosts.

#include <shardplan/topology.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>
#include <utility>

namespace shardplan {

namespace {

// Row-major stride of mesh axis `axis` in the grid.
int64_t axis_stride(const DeviceGrid& grid, size_t axis) {
  int64_t stride = 1;
  for (size_t k = axis + 1; k < grid.shape.size(); ++k) {
    stride *= grid.shape[k];
  }
  return stride;
}

// The first `count` devices of the collective group along mesh axis `axis`
// that starts at row-major position `first` (all other coordinates fixed).
std::vector<int64_t> axis_group(const DeviceGrid& grid,
                                size_t axis,
                                int64_t first,
                                int64_t count) {
  const int64_t stride = axis_stride(grid, axis);
  std::vector<int64_t> ids;
  ids.reserve(to_size(count));
  for (int64_t i = 0; i < count; ++i) {
    ids.push_back(grid.ids[to_size(first + i * stride)]);
  }
  return ids;
}

// Calls fn(group) for every whole collective group along mesh axis `axis`.
template <typename Fn>
void for_each_group(const DeviceGrid& grid, size_t axis, const Fn& fn) {
  const int64_t stride = axis_stride(grid, axis);
  const int64_t n = grid.shape[axis];
  const auto total = static_cast<int64_t>(grid.ids.size());
  for (int64_t first = 0; first < total; ++first) {
    if ((first / stride) % n == 0) {  // the group's first member
      fn(axis_group(grid, axis, first, n));
    }
  }
}

// Physical coordinates of a TPU device: x, y, z, core.
using Coord = std::array<int64_t, 4>;

struct TpuPhysical {
  std::array<int64_t, 4> size{1, 1, 1, 1};
  std::array<bool, 4> wrap{false, false, false, false};
  std::vector<Coord> coords;  // indexed by device id (ids are 0..N-1)
};

TpuPhysical tpu_physical(const Topology& t,
                         const std::vector<TpuDevice>& devices) {
  TpuPhysical p;
  for (size_t k = 0; k < 3; ++k) {
    p.size[k] = t.tpu.chips[k];
    p.wrap[k] = t.wraparound[k];
  }
  p.size[3] = t.tpu.cores_per_chip;
  p.coords.resize(devices.size());
  for (const TpuDevice& d : devices) {
    p.coords[to_size(d.id)] = {
        d.coords[0], d.coords[1], d.coords[2], d.core_on_chip};
  }
  return p;
}

// One hop: two cores of one chip, or chips one step apart on one physical
// axis (or across its wraparound link when it has one), whichever cores.
bool neighbours(const TpuPhysical& p, const Coord& a, const Coord& b) {
  int differing = 0;
  bool hop = false;
  for (size_t k = 0; k < 3; ++k) {
    if (a[k] == b[k]) {
      continue;
    }
    ++differing;
    const int64_t d = std::abs(a[k] - b[k]);
    hop = d == 1 || (p.wrap[k] && d == p.size[k] - 1);
  }
  return differing == 0 ? a[3] != b[3] : differing == 1 && hop;
}

constexpr std::array<const char*, 4> k_physical_names = {"x", "y", "z", "core"};

struct IciLink {
  bool wraparound = false;
  int64_t rings = 0;  // physical rings a collective runs on at once
  std::vector<std::string> physical_axes;
};

// The ICI part of a mesh axis: `group` holds its first `ici` devices (the DCN
// index is major within an axis, so they share a slice).
IciLink ici_link(const TpuPhysical& p,
                 const std::vector<int64_t>& group,
                 int64_t ici) {
  IciLink link;
  std::array<std::set<int64_t>, 4> values;
  std::vector<Coord> coords;
  for (int64_t i = 0; i < ici; ++i) {
    const Coord& c = p.coords[to_size(group[to_size(i)])];
    coords.push_back(c);
    for (size_t k = 0; k < 4; ++k) {
      values[k].insert(c[k]);
    }
  }
  std::vector<size_t> spanned;
  for (size_t k = 0; k < 4; ++k) {
    if (values[k].size() > 1) {
      spanned.push_back(k);
      link.physical_axes.emplace_back(k_physical_names[k]);
    }
  }
  // A closed ring: each device's successor, the last's being the first, is
  // one hop away. That is one physical axis with its wraparound link (or of
  // two devices), or a ring order JAX picked for a small slice.
  bool closed = true;
  for (size_t i = 0; i < coords.size() && closed; ++i) {
    closed = neighbours(p, coords[i], coords[(i + 1) % coords.size()]);
  }
  if (closed) {
    link.wraparound = true;
    link.rings = 1;
    return link;
  }
  // Whole physical axes, each a ring: the collective runs on all of them at
  // once (the scaling book's V / (W * n_axes)).
  bool whole_rings = true;
  int64_t covered = 1;
  for (size_t k : spanned) {
    const bool whole = to_size(p.size[k]) == values[k].size();
    whole_rings =
        whole_rings && whole && (k == 3 || p.wrap[k] || p.size[k] <= 2);
    covered *= static_cast<int64_t>(values[k].size());
  }
  link.wraparound = whole_rings && covered == ici;
  // Rings over chip axes; the cores of a chip add no ICI link.
  link.rings = static_cast<int64_t>(std::count_if(
      spanned.begin(), spanned.end(), [](size_t k) { return k < 3; }));
  return link;
}

// One AxisLink per mesh axis; `fill(l, axis, link)` classifies the axes
// that move data (size > 1), the others stay LinkClass::none.
template <typename Fill>
std::vector<AxisLink> links_per_axis(const Mesh& mesh, const Fill& fill) {
  std::vector<AxisLink> links;
  for (size_t l = 0; l < mesh.axes.size(); ++l) {
    const MeshAxis& axis = mesh.axes[l];
    AxisLink& link = links.emplace_back();
    link.axis = axis.name;
    link.ring_size = axis.size;
    if (axis.size > 1) {
      fill(l, axis, link);
    }
  }
  return links;
}

std::vector<AxisLink> tpu_links(const Topology& t,
                                const std::vector<TpuDevice>& devices,
                                const Mesh& mesh,
                                const DeviceGrid& grid) {
  const TpuPhysical p = tpu_physical(t, devices);
  const TopologyFigures& f = t.figures;
  return links_per_axis(
      mesh, [&](size_t l, const MeshAxis& axis, AxisLink& link) {
        double ici_bw = 0;
        if (axis.ici > 1) {
          IciLink ici = ici_link(p, axis_group(grid, l, 0, axis.ici), axis.ici);
          link.wraparound = ici.wraparound;
          link.physical_axes = std::move(ici.physical_axes);
          // A ring uses both directions of its links; a line, one (~2x slower).
          ici_bw = f.ici_bytes_per_s_per_link.value
                   * (ici.wraparound ? 2.0 : 1.0)
                   * static_cast<double>(std::max<int64_t>(ici.rings, 1));
          // A chip's links are its devices': groups that leave the chip's
          // other devices to other groups (an axis over chips but not
          // cores, on a TPU7x or a v3) run their rings over the same links
          // at once, each at its share (docs/step.md, "Links").
          const bool spans_cores =
              std::find(
                  link.physical_axes.begin(), link.physical_axes.end(), "core")
              != link.physical_axes.end();
          if (t.tpu.cores_per_chip > 1 && ici.rings > 0 && !spans_cores) {
            ici_bw /= static_cast<double>(t.tpu.cores_per_chip);
          }
          link.link = LinkClass::ici;
          link.bytes_per_s = ici_bw;
          link.latency_s = f.ici_latency_s.value;
        }
        if (axis.dcn > 1) {
          // The chip's DCN share, split among its devices.
          const double dcn_bw = f.dcn_bytes_per_s_per_chip.value
                                / static_cast<double>(t.tpu.cores_per_chip);
          if (axis.ici > 1) {
            // Inside a slice over ICI, across slices each device's share
            // over DCN (hierarchical, as XLA runs it).
            link.link = LinkClass::mixed;
            link.inner_size = axis.ici;
            link.inner_bytes_per_s = ici_bw;
            link.inner_wraparound = link.wraparound;
            link.bytes_per_s = dcn_bw;
          } else {
            link.link = LinkClass::dcn;
            link.bytes_per_s = dcn_bw;
            link.wraparound = true;  // a switched network: the ring closes
          }
          link.latency_s = std::max(link.latency_s, f.dcn_latency_s.value);
        }
      });
}

std::vector<AxisLink> gpu_links(const Topology& t,
                                const Mesh& mesh,
                                const DeviceGrid& grid) {
  const TopologyFigures& f = t.figures;
  return links_per_axis(mesh, [&](size_t l, const MeshAxis&, AxisLink& link) {
    bool all_inside = true;    // every group inside one NVLink domain
    bool all_distinct = true;  // every member of every group in its own domain
    for_each_group(grid, l, [&](const std::vector<int64_t>& g) {
      std::set<int64_t> domains;
      for (int64_t id : g) {
        domains.insert(id / t.nvlink_domain);
      }
      all_inside = all_inside && domains.size() == 1;
      all_distinct = all_distinct && domains.size() == g.size();
    });
    link.wraparound =
        true;  // NVSwitch and a fat tree are switched: rings close
    if (all_inside) {
      link.link = LinkClass::nvlink;
      // Collectives at NCCL's measured bus bandwidth where the catalogue
      // has it (docs/step.md, "Links").
      link.bytes_per_s = f.nvlink_collective_bytes_per_s_per_gpu.value > 0
                             ? f.nvlink_collective_bytes_per_s_per_gpu.value
                             : f.nvlink_bytes_per_s_per_gpu.value;
      link.latency_s = f.nvlink_latency_s.value;
    } else {
      link.link = all_distinct ? LinkClass::network : LinkClass::mixed;
      link.bytes_per_s = f.network_bytes_per_s_per_gpu.value;
      link.latency_s = f.network_latency_s.value;
    }
  });
}

// `devices`: the TPU devices in jax.devices() order (empty on GPU).
// JAX's _get_local_mesh (jax/_src/mesh.py) for every host: along each mesh
// axis the smallest range of indices that holds all of the host's devices;
// the host's local mesh is that block of the grid, when it holds only the
// host's devices. The first host whose block holds others goes to `hosts`
// as not_contiguous_host; otherwise local_mesh_shape is host 0's block.
void local_blocks(const DeviceGrid& grid, HostLayout& hosts) {
  const size_t rank = grid.shape.size();
  // The grid position of each device id, row-major.
  std::vector<size_t> position(grid.ids.size());
  for (size_t i = 0; i < grid.ids.size(); ++i) {
    position[to_size(grid.ids[i])] = i;
  }
  for (size_t h = 0; h < hosts.device_ids.size(); ++h) {
    std::vector<int64_t> low(rank, std::numeric_limits<int64_t>::max());
    std::vector<int64_t> high(rank, -1);
    for (int64_t id : hosts.device_ids[h]) {
      size_t flat = position[to_size(id)];
      for (size_t k = rank; k-- > 0;) {
        const auto size = to_size(grid.shape[k]);
        const auto coord = static_cast<int64_t>(flat % size);
        flat /= size;
        low[k] = std::min(low[k], coord);
        high[k] = std::max(high[k], coord);
      }
    }
    std::vector<int64_t> block(rank);
    int64_t cells = 1;
    for (size_t k = 0; k < rank; ++k) {
      block[k] = high[k] - low[k] + 1;
      cells *= block[k];  // <= the device count: no overflow
    }
    if (cells != static_cast<int64_t>(hosts.device_ids[h].size())) {
      hosts.not_contiguous_host = static_cast<int64_t>(h);
      hosts.local_mesh_shape.clear();
      return;
    }
    if (h == 0) {
      hosts.local_mesh_shape = std::move(block);
    }
  }
}

// The hosts of `t` and how `mesh`'s grid falls on them; with
// options.report_hosts, what JAX's and eformer's host meshes make of it is
// reported.
HostLayout host_layout(const Topology& t,
                       const std::vector<TpuDevice>& devices,
                       const Mesh& mesh,
                       const DeviceGrid& grid,
                       const LayoutOptions& options,
                       Diagnostics& diags) {
  const MeshSources& sources = options.sources;
  HostLayout hosts;
  hosts.devices_per_host = t.devices_per_host();
  hosts.count = t.num_hosts();
  hosts.device_ids.resize(to_size(hosts.count));
  if (t.kind == TopologyKind::tpu) {
    for (const TpuDevice& d : devices) {
      hosts.device_ids[to_size(d.process_index)].push_back(d.id);
    }
  } else {
    for (int64_t id = 0; id < t.gpus; ++id) {
      hosts.device_ids[to_size(id / hosts.devices_per_host)].push_back(id);
    }
  }
  if (hosts.count == 1) {
    hosts.local_mesh_shape = mesh.shape();
    hosts.eformer_host_mesh_shape = mesh.shape();
    return hosts;
  }
  local_blocks(grid, hosts);
  if (!options.report_hosts) {
    Diagnostics ignored;
    hosts.eformer_host_mesh_shape =
        calculate_host_mesh_shape(
            mesh.shape(), hosts.devices_per_host, hosts.count, ignored)
            .value_or(std::vector<int64_t>());
    return hosts;
  }
  if (hosts.not_contiguous_host) {
    const std::vector<int64_t>& ids =
        hosts.device_ids[to_size(*hosts.not_contiguous_host)];
    Diagnostic& d = diags.warning(
        "topology.host-block",
        fmt::format("the devices of host {} ({}) do not form a block of the "
                    "device grid, so the mesh has no host-local mesh: JAX's "
                    "Mesh.local_mesh refuses it (\"devices connected to a "
                    "single host must form a contiguous subcube of the global "
                    "device mesh\")",
                    *hosts.not_contiguous_host,
                    fmt::join(ids, ", ")),
        Location::of(sources.mesh));
    const std::string owns =
        t.kind == TopologyKind::tpu
            ? fmt::format("{}x{}x{} chips of the {}x{}x{} slice",
                          std::min(t.tpu.host_bounds[0], t.tpu.chips[0]),
                          std::min(t.tpu.host_bounds[1], t.tpu.chips[1]),
                          std::min(t.tpu.host_bounds[2], t.tpu.chips[2]),
                          t.tpu.chips[0],
                          t.tpu.chips[1],
                          t.tpu.chips[2])
            : fmt::format("{} consecutive GPU ids", hosts.devices_per_host);
    d.hint = fmt::format(
        "a host holds {}; only host-local data loading (e.g. "
        "multihost_utils.host_local_array_to_global_array) needs its devices "
        "in one block",
        owns);
  }
  // eformer calls calculate_host_mesh_shape on one slice with several
  // processes and fails there; across slices it does not use it.
  Diagnostics local;
  std::optional<std::vector<int64_t>> shape = calculate_host_mesh_shape(
      mesh.shape(), hosts.devices_per_host, hosts.count, local);
  if (shape) {
    hosts.eformer_host_mesh_shape = std::move(*shape);
  }
  for (Diagnostic d : local.items()) {
    d.location.source = sources.mesh;
    if (t.num_slices() > 1) {
      d.severity = Severity::warning;
      d.hint =
          "eformer's create_mesh builds multi-slice meshes without it, so "
          "only code that calls calculate_host_mesh_shape itself is affected";
    }
    diags.add(std::move(d));
  }
  return hosts;
}

}  // namespace

std::string_view to_string(LinkClass link) {
  switch (link) {
    case LinkClass::none:
      return "none";
    case LinkClass::ici:
      return "ici";
    case LinkClass::dcn:
      return "dcn";
    case LinkClass::nvlink:
      return "nvlink";
    case LinkClass::network:
      return "network";
    case LinkClass::mixed:
      return "mixed";
    case LinkClass::host:
      return "host";
  }
  return "none";
}

std::optional<MeshLayout> layout_mesh(const Topology& topology,
                                      const Mesh& mesh,
                                      const LayoutOptions& options,
                                      Diagnostics& diags) {
  const MeshSources& sources = options.sources;
  // At the mesh string's axis `axis` (its start), or at the source alone.
  auto at_axis = [&](size_t axis) {
    return options.mesh_text.empty()
               ? Location::of(sources.mesh)
               : location_in_text(sources.mesh,
                                  options.mesh_text,
                                  mesh_axis_offset(options.mesh_text, axis));
  };
  const Location at_mesh = at_axis(0);
  if (mesh.num_devices() != topology.devices()) {
    Diagnostic& d =
        diags.error("topology.device-count",
                    fmt::format("mesh {} has {} devices but {} has {}",
                                to_string(mesh),
                                mesh.num_devices(),
                                topology.name,
                                topology.devices()),
                    at_mesh);
    d.hint = fmt::format(
        "the mesh's sizes must multiply to {}; one -1 fills the "
        "rest (fsdp:-1)",
        topology.devices());
    return std::nullopt;
  }
  if (mesh.num_slices() != topology.num_slices()) {
    Diagnostic& d = diags.error(
        "topology.slice-count",
        fmt::format("the mesh's DCN factors ({}) make {} slices but {} has {}",
                    dcn_string(mesh),
                    mesh.num_slices(),
                    topology.name,
                    topology.num_slices()),
        Location::of(sources.dcn));
    d.hint = fmt::format("{} factors multiply to the slice count, {}",
                         sources.dcn,
                         topology.num_slices());
    return std::nullopt;
  }
  MeshLayout layout;
  const std::vector<TpuDevice> devices = topology.kind == TopologyKind::tpu
                                             ? tpu_devices(topology.tpu)
                                             : std::vector<TpuDevice>();
  if (topology.kind == TopologyKind::tpu) {
    Diagnostics local;
    std::optional<TpuGrid> grid = tpu_device_grid(
        topology.tpu, mesh, options.allow_split_physical_axes, local);
    for (Diagnostic d : local.items()) {
      if (d.location.empty()) {
        d.location = at_axis(d.dim ? to_size(*d.dim) : 0);
        d.dim.reset();
      }
      if (d.code == "topology.no-assignment" && !sources.allow_split.empty()) {
        d.hint = fmt::format(
            "pass {} (jax.make_mesh sets it by itself on v5e), or {}",
            sources.allow_split,
            d.hint);
      }
      diags.add(std::move(d));
    }
    if (!grid) {
      return std::nullopt;
    }
    layout.grid = std::move(grid->grid);
    layout.physical_assignment = std::move(grid->physical_assignment);
    const size_t rows = layout.physical_assignment.size();
    // v2/v3 physical meshes are (x, y, core)
    // (docs/sources.md#jax-device-mesh).
    const bool two_d =
        chip_info(topology.tpu.chip).physical_mesh == TpuPhysicalMesh::xy_core;
    for (size_t p = 0; p < rows; ++p) {
      layout.physical_axis_names.emplace_back(
          two_d && p == 2 ? "core" : k_physical_names[p]);
    }
    layout.links = tpu_links(topology, devices, mesh, layout.grid);
  } else {
    layout.grid = gpu_device_grid(mesh, topology.gpus_per_host);
    layout.links = gpu_links(topology, mesh, layout.grid);
  }
  layout.hosts =
      host_layout(topology, devices, mesh, layout.grid, options, diags);
  return layout;
}

std::vector<AxisLink> mesh_links(const Topology& topology,
                                 const Mesh& mesh,
                                 const DeviceGrid& grid) {
  if (topology.kind == TopologyKind::tpu) {
    return tpu_links(topology, tpu_devices(topology.tpu), mesh, grid);
  }
  return gpu_links(topology, mesh, grid);
}

std::optional<Mesh> resolve_mesh(const MeshInput& input,
                                 bool count_may_differ,
                                 Diagnostics& diags) {
  MeshOptions options;
  options.axis_names = input.axis_names;
  options.num_devices = input.topology != nullptr
                            ? std::optional<int64_t>(input.topology->devices())
                            : input.devices;
  options.count_may_differ = count_may_differ;
  if (input.topology != nullptr) {
    options.num_slices = input.topology->num_slices();
    options.devices_at = Location::of(
        fmt::format("{} {}", input.sources.topology, input.topology->name));
  }
  options.dcn = std::string(input.dcn);
  options.sources = input.sources;
  return parse_mesh(input.mesh, options, diags);
}

std::optional<PlacedMesh> place_mesh(const MeshInput& input,
                                     Diagnostics& diags) {
  std::optional<Mesh> mesh = resolve_mesh(input, false, diags);
  if (!mesh) {
    return std::nullopt;
  }
  PlacedMesh placed{std::move(*mesh), {}};
  if (input.topology == nullptr) {
    placed.layout.grid = generic_device_grid(placed.mesh);
    return placed;
  }
  Diagnostics local;
  std::optional<MeshLayout> layout =
      layout_mesh(*input.topology,
                  placed.mesh,
                  LayoutOptions{input.allow_split_physical_axes,
                                input.sources,
                                input.mesh,
                                input.report_hosts},
                  local);
  const bool failed = !layout || local.has_errors();
  for (const Diagnostic& d : local.items()) {
    diags.add(d);
  }
  if (failed) {
    return std::nullopt;
  }
  placed.layout = std::move(*layout);
  return placed;
}

}  // namespace shardplan
