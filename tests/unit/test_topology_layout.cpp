// Meshes laid on catalogue topologies: device ids as JAX numbers them
// (docs/sources.md#jax-device-mesh, docs/sources.md#jax-make_mesh;
// docs/topologies.md, "Device ids"), links per axis (the scaling book's ring
// rules, docs/sources.md#ici-collectives, docs/sources.md#gpu-collectives),
// hosts (eformer's calculate_host_mesh_shape), and properties over the whole
// catalogue.

#include "support/test_support.hpp"

#include <shardplan/topology.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

using namespace shardplan;

namespace {

using Ids = std::vector<int64_t>;

Mesh mesh_on(const Topology& t, std::string_view text, std::string dcn = "") {
  Diagnostics diags;
  MeshOptions options = test::flag_options();
  options.num_devices = t.devices();
  options.num_slices = t.num_slices();
  options.dcn = std::move(dcn);
  std::optional<Mesh> mesh = parse_mesh(text, options, diags);
  INFO(text << ": " << test::first_error(diags));
  REQUIRE(mesh);
  return *mesh;
}

MeshLayout laid(std::string_view topology,
                std::string_view mesh,
                bool split = false) {
  Topology t = test::topology_of(topology);
  Diagnostics diags;
  std::optional<MeshLayout> layout =
      layout_mesh(t, mesh_on(t, mesh), test::flag_layout(split), diags);
  INFO(topology << " " << mesh << ": " << test::first_error(diags));
  REQUIRE(layout);
  REQUIRE_FALSE(diags.has_errors());
  return *layout;
}

const AxisLink& link_of(const MeshLayout& layout, std::string_view axis) {
  for (const AxisLink& l : layout.links) {
    if (l.axis == axis) {
      return l;
    }
  }
  FAIL("no axis " << axis);
  return layout.links.front();
}

}  // namespace

TEST_CASE("mesh on topology: the make_mesh docstring's TPU v3 ids",
          "[topology][layout]") {
  // jax.make_mesh on a TPU v3 with 8 and 16 devices
  // (docs/sources.md#jax-make_mesh).
  CHECK(laid("v3-8", "a:8").grid.ids == Ids{0, 1, 2, 3, 6, 7, 4, 5});
  CHECK(laid("v3:2x4", "a:2,b:8").grid.ids
        == Ids{0, 1, 2, 3, 6, 7, 4, 5, 8, 9, 10, 11, 14, 15, 12, 13});
  Ids iota(16);
  std::iota(iota.begin(), iota.end(), 0);
  CHECK(laid("v3:2x4", "a:4,b:4").grid.ids == iota);
}

TEST_CASE("mesh on topology: v4 2x2x2 as (8,) runs z fastest",
          "[topology][layout]") {
  MeshLayout layout = laid("v4-16", "a:8");
  CHECK(layout.grid.ids == Ids{0, 4, 2, 6, 1, 5, 3, 7});
  // The torus path: one mesh axis takes all three physical axes.
  CHECK(layout.physical_assignment == std::vector<Ids>{{2}, {2}, {2}});
  CHECK(layout.physical_axis_names == std::vector<std::string>{"x", "y", "z"});
}

TEST_CASE("mesh on topology: links on a v5p 4x4x4 torus",
          "[topology][layout]") {
  // Last axis first (docs/sources.md#jax-device-mesh): tp=4 takes x; fsdp=16
  // takes y and z. All three wrap (a full cube), so tp is one ring of
  // bidirectional 9e10 links and fsdp runs on two rings at once
  // (docs/sources.md#ici-collectives: V / (W * n_axes)).
  MeshLayout layout = laid("v5p-128", "fsdp:16,tp:4");
  CHECK(layout.physical_assignment == std::vector<Ids>{{1, 4}, {4, 1}, {4, 1}});
  const AxisLink& tp = link_of(layout, "tp");
  CHECK(tp.link == LinkClass::ici);
  CHECK(tp.wraparound);
  CHECK(tp.ring_size == 4);
  CHECK(tp.physical_axes == std::vector<std::string>{"x"});
  CHECK(tp.bytes_per_s == 2 * 9e10);
  CHECK(tp.latency_s == 1e-6);
  const AxisLink& fsdp = link_of(layout, "fsdp");
  CHECK(fsdp.wraparound);
  CHECK(fsdp.physical_axes == std::vector<std::string>{"y", "z"});
  CHECK(fsdp.bytes_per_s == 2 * 2 * 9e10);
}

TEST_CASE("mesh on topology: no wraparound below a full cube",
          "[topology][layout]") {
  // v4 2x2x4: no torus (docs/sources.md#tpu-wraparound). tp=4 on z is a line:
  // one direction, ~2x slower.
  MeshLayout layout = laid("v4-32", "dp:4,tp:4");
  const AxisLink& tp = link_of(layout, "tp");
  CHECK(tp.physical_axes == std::vector<std::string>{"x", "y"});
  // x and y are 2 long: a 2x2 square walked x-major, y-minor is
  // (0,0),(0,1),(1,0),(1,1): not a closed ring of neighbours, and x, y are
  // whole axes of 2 (a pair is a ring), so two rings.
  CHECK(tp.wraparound);
  CHECK(tp.bytes_per_s == 2 * 2 * 4.5e10);
  const AxisLink& dp = link_of(layout, "dp");
  CHECK(dp.physical_axes == std::vector<std::string>{"z"});
  CHECK_FALSE(dp.wraparound);
  CHECK(dp.bytes_per_s == 4.5e10);
}

TEST_CASE("mesh on topology: JAX's ring orders close a ring",
          "[topology][layout]") {
  // v5e 4x4 as (16,): the 16-cycle, a ring without wraparound links.
  const AxisLink a = link_of(laid("v5e-16", "a:16"), "a");
  CHECK(a.wraparound);
  CHECK(a.bytes_per_s == 2 * 4.5e10);
  // v3-8 as (8,): the tray ring over both cores of four chips.
  const AxisLink b = link_of(laid("v3-8", "b:8"), "b");
  CHECK(b.wraparound);
  CHECK(b.physical_axes == std::vector<std::string>{"x", "y", "core"});
}

TEST_CASE("mesh on topology: a chip's devices share its links",
          "[topology][layout]") {
  // TPU7x 2x2x2, two devices a chip: a:8 takes one device of each chip
  // over x, y and z (three closed rings of 2, 2 x 1e11 each: 6e11 a chip),
  // and b:2 the chip's two cores. Each chip's two a-groups run their
  // rings over the same links at once: 3e11 each.
  MeshLayout layout = laid("tpu7x-16", "a:8,b:2");
  const AxisLink& a = link_of(layout, "a");
  CHECK(a.physical_axes == std::vector<std::string>{"x", "y", "z"});
  CHECK(a.bytes_per_s == 3 * 2 * 1e11 / 2);
  CHECK(link_of(layout, "b").physical_axes == std::vector<std::string>{"core"});
  // An axis over a chip's cores too keeps the chip's links to itself.
  const AxisLink whole = link_of(laid("tpu7x-16", "a:16"), "a");
  CHECK(whole.physical_axes == std::vector<std::string>{"x", "y", "z", "core"});
  CHECK(whole.bytes_per_s == 3 * 2 * 1e11);
}

TEST_CASE("mesh on topology: DCN and mixed axes", "[topology][layout]") {
  MeshLayout layout = laid("2xv5p-256", "dp:2,fsdp:-1,tp:4");
  const AxisLink& dp = link_of(layout, "dp");
  CHECK(dp.link == LinkClass::dcn);
  CHECK(dp.bytes_per_s == 6.25e9);
  CHECK(dp.ring_size == 2);
  CHECK(link_of(layout, "fsdp").link == LinkClass::ici);

  // One axis over both slices: mixed, as slow as its DCN part.
  Topology t = test::topology_of("2xv5e-256");
  Diagnostics diags;
  std::optional<MeshLayout> mixed =
      layout_mesh(t, mesh_on(t, "fsdp:512"), test::flag_layout(), diags);
  REQUIRE(mixed);
  CHECK(mixed->links[0].link == LinkClass::mixed);
  CHECK(mixed->links[0].bytes_per_s == 3.125e9);
}

TEST_CASE("mesh on topology: GPU links by NVLink domain",
          "[topology][layout]") {
  MeshLayout layout = laid("h100x64", "dp:2,fsdp:4,tp:8");
  CHECK(link_of(layout, "tp").link == LinkClass::nvlink);
  // NVLink collectives at NCCL's measured bus bandwidth (370 GB/s,
  // docs/sources.md#nccl-measured), not the datasheet's 450 GB/s.
  CHECK(link_of(layout, "tp").bytes_per_s == 3.7e11);
  CHECK(link_of(layout, "fsdp").link == LinkClass::network);
  CHECK(link_of(layout, "fsdp").bytes_per_s == 5e10);
  CHECK(link_of(layout, "dp").link == LinkClass::network);
  // 4 x 4 on two nodes: b (stride 1) stays in a node; a (stride 4) has two
  // members in each of two nodes.
  MeshLayout two = laid("h100x16", "a:4,b:4");
  CHECK(link_of(two, "b").link == LinkClass::nvlink);
  CHECK(link_of(two, "a").link == LinkClass::mixed);
  // GB200: 72 GPUs share NVLink across 18 hosts.
  MeshLayout gb = laid("gb200x144", "dp:2,fsdp:72");
  CHECK(link_of(gb, "fsdp").link == LinkClass::nvlink);
  CHECK(link_of(gb, "dp").link == LinkClass::network);
  // Size-1 axes move nothing.
  CHECK(link_of(laid("h100x8", "dp:1,tp:8"), "dp").link == LinkClass::none);
}

TEST_CASE("mesh on topology: hosts and their local mesh",
          "[topology][layout]") {
  MeshLayout layout = laid("v5p-128", "fsdp:16,tp:4");
  CHECK(layout.hosts.count == 16);
  CHECK(layout.hosts.devices_per_host == 4);
  // Host 0 holds chips (0..1, 0..1, 0): ids x + 4y.
  CHECK(layout.hosts.device_ids[0] == Ids{0, 1, 4, 5});
  // tp takes x (4 chips), fsdp (y, z): device x + 4y + 16z sits at row
  // y + 4z, column x. Host 0's 0, 1 are row 0 and its 4, 5 row 4: the
  // smallest block holding them (rows 0..4, columns 0..1) has 10 devices, so
  // JAX's local_mesh refuses the mesh and there is no local mesh; eformer's
  // calculate_host_mesh_shape, which only splits the leading axis, says
  // (1, 4).
  CHECK(layout.grid.at({4, 0}) == 4);
  CHECK(layout.hosts.local_mesh_shape.empty());
  CHECK(layout.hosts.not_contiguous_host == std::optional<int64_t>(0));
  CHECK(layout.hosts.eformer_host_mesh_shape == Ids{1, 4});
  {
    Topology t = test::topology_of("v5p-128");
    Diagnostics diags;
    LayoutOptions options = test::flag_layout();
    // Only `shardplan mesh` asks for reports on hosts.
    REQUIRE(layout_mesh(t, test::mesh_of("fsdp:16,tp:4", 64), options, diags));
    CHECK(diags.items().empty());
    options.report_hosts = true;
    REQUIRE(layout_mesh(t, test::mesh_of("fsdp:16,tp:4", 64), options, diags));
    REQUIRE(diags.items().size() == 1);
    CHECK(diags.items()[0].severity == Severity::warning);
    CHECK(diags.items()[0].code == "topology.host-block");
    CHECK(diags.items()[0].location.source == "--mesh");
    CHECK_THAT(diags.items()[0].message,
               Catch::StartsWith("the devices of host 0 (0, 1, 4, 5) do not "
                                 "form a block of the device grid"));
  }

  // v4-32: 2x2x4 chips, a host per z-plane (ids 4z..4z+3). tp takes (x, y)
  // and dp takes z, so host 0 is row 0 of the grid: a [1, 4] block.
  MeshLayout v4 = laid("v4-32", "dp:4,tp:4");
  CHECK(v4.hosts.device_ids[0] == Ids{0, 1, 2, 3});
  CHECK(v4.hosts.local_mesh_shape == Ids{1, 4});
  CHECK_FALSE(v4.hosts.not_contiguous_host);

  MeshLayout gpu = laid("h100x64", "dp:2,fsdp:4,tp:8");
  CHECK(gpu.hosts.count == 8);
  CHECK(gpu.hosts.device_ids[1] == Ids{8, 9, 10, 11, 12, 13, 14, 15});
  // GPUs of one node are consecutive ids: the last axis (tp:8) is a node.
  CHECK(gpu.hosts.local_mesh_shape == Ids{1, 1, 8});
  CHECK(gpu.hosts.eformer_host_mesh_shape == Ids{1, 1, 8});
}

TEST_CASE("calculate_host_mesh_shape: eformer's examples and errors",
          "[topology][layout]") {
  Diagnostics diags;
  // The docstring: (2, 4) over 2 processes of 4 devices -> (1, 4).
  CHECK(calculate_host_mesh_shape({2, 4}, 4, 2, diags)
        == std::optional<Ids>(Ids{1, 4}));
  // A leading axis smaller than the process count is used whole.
  CHECK(calculate_host_mesh_shape({2, 8, 4}, 4, 16, diags)
        == std::optional<Ids>(Ids{1, 1, 4}));
  CHECK(calculate_host_mesh_shape({16, 4}, 4, 16, diags)
        == std::optional<Ids>(Ids{1, 4}));
  CHECK_FALSE(diags.has_errors());

  CHECK_FALSE(calculate_host_mesh_shape({2, 4}, 4, 3, diags));
  REQUIRE(diags.items().size() == 1);
  CHECK(
      diags.items()[0].message
      == "Mesh size 8 doesn't match available devices 12 (local x processes)");

  Diagnostics uneven;
  // 8 processes of 3: 3 < 8 takes axis 0 whole (8 // 3 = 2 left), then 8 // 2.
  CHECK_FALSE(calculate_host_mesh_shape({3, 8}, 3, 8, uneven));
  REQUIRE(uneven.items().size() == 1);
  CHECK(uneven.items()[0].code == "topology.host-mesh");
  CHECK(uneven.items()[0].message
        == "Host mesh shape (1, 4) uses 4 devices instead of 3. Ensure that "
           "num_processes factors the global mesh shape.");
}

TEST_CASE("mesh on topology: errors", "[topology][layout]") {
  Topology t = test::topology_of("v5p-128");
  Diagnostics diags;
  CHECK_FALSE(layout_mesh(
      t, test::mesh_of("dp:2,tp:4", 8), test::flag_layout(), diags));
  REQUIRE(diags.items().size() == 1);
  CHECK(diags.items()[0].code == "topology.device-count");
  CHECK(diags.items()[0].message
        == "mesh dp:2,tp:4 has 8 devices but v5p-128 has 64");

  Diagnostics no_fit;
  CHECK_FALSE(
      layout_mesh(t, mesh_on(t, "a:2,b:32"), test::flag_layout(), no_fit));
  REQUIRE(no_fit.items().size() == 1);
  CHECK(no_fit.items()[0].code == "topology.no-assignment");
  CHECK_THAT(no_fit.items()[0].message,
             Catch::Contains(
                 "logical_axis_index 1 of size 32 with remaining assignable "
                 "mesh [4, 4, 4]"));
  CHECK(no_fit.items()[0].location.source == "--mesh");
  CHECK(no_fit.items()[0].hint
        == "pass --allow-split-physical-axes (jax.make_mesh sets it by itself "
           "on v5e), or choose axis sizes that are products of the physical "
           "axes (4, 4, 4)");
  // With splitting allowed it fits.
  CHECK(laid("v5p-128", "a:2,b:32", true).grid.ids.size() == 64);

  Topology two = test::topology_of("2xv5p-256");
  Diagnostics slices;
  CHECK_FALSE(layout_mesh(two,
                          test::mesh_of("dp:4,fsdp:32", 128, "dp:4"),
                          test::flag_layout(),
                          slices));
  REQUIRE(slices.items().size() == 1);
  CHECK(slices.items()[0].code == "topology.device-count");
}

TEST_CASE("mesh on topology: properties over the catalogue",
          "[topology][layout]") {
  // Every id once; each physical axis's assignment multiplies to its size;
  // with and without splitting the same grid whenever both succeed.
  const std::vector<std::string> meshes = {"a:-1",
                                           "a:2,b:-1",
                                           "a:-1,b:2",
                                           "a:-1,b:4",
                                           "a:4,b:-1",
                                           "a:2,b:-1,c:2",
                                           "a:-1,b:8"};
  int checked = 0;
  for (const Topology& t : catalogue_topologies()) {
    if (t.devices() > 512) {
      continue;
    }
    for (const std::string& text : meshes) {
      MeshOptions options = test::flag_options();
      options.num_devices = t.devices();
      Diagnostics parse;
      std::optional<Mesh> mesh = parse_mesh(text, options, parse);
      if (!mesh) {
        continue;  // -1 does not divide
      }
      INFO(t.name << " " << text);
      Diagnostics plain;
      Diagnostics split;
      std::optional<MeshLayout> a =
          layout_mesh(t, *mesh, test::flag_layout(), plain);
      std::optional<MeshLayout> b =
          layout_mesh(t, *mesh, test::flag_layout(true), split);
      for (const std::optional<MeshLayout>& layout : {a, b}) {
        if (!layout) {
          continue;
        }
        Ids sorted = layout->grid.ids;
        std::sort(sorted.begin(), sorted.end());
        Ids iota(static_cast<size_t>(t.devices()));
        std::iota(iota.begin(), iota.end(), 0);
        CHECK(sorted == iota);
        CHECK(layout->links.size() == mesh->axes.size());
        // Each physical axis's row multiplies to that axis's size.
        for (size_t p = 0; p < layout->physical_assignment.size(); ++p) {
          const Ids& row = layout->physical_assignment[p];
          const std::string& axis = layout->physical_axis_names[p];
          const int64_t size = axis == "x"   ? t.tpu.chips[0]
                               : axis == "y" ? t.tpu.chips[1]
                               : axis == "z" ? t.tpu.chips[2]
                                             : t.tpu.cores_per_chip;
          CHECK(std::accumulate(
                    row.begin(), row.end(), int64_t{1}, std::multiplies<>())
                == size);
        }
        ++checked;
      }
      if (a && b) {
        CHECK(a->grid.ids == b->grid.ids);
      }
      // Splitting only ever adds layouts.
      CHECK((!a || b));
    }
  }
  CHECK(checked > 300);
}
