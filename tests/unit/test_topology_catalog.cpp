// The topology catalogue, names and user files. Expected figures come from
// docs/sources.md, Hardware (and jax's tpu_info.py); sizes from Cloud TPU
// naming (docs/topologies.md, "Names": v4/v5p/tpu7x count TensorCores,
// v5e/v6e chips); wraparound from docs/sources.md#tpu-wraparound.

#include "support/test_support.hpp"

#include <shardplan/report.hpp>
#include <shardplan/topology.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

using namespace shardplan;

namespace {

Diagnostic name_error(std::string_view name) {
  Diagnostics diags;
  std::optional<Topology> t =
      resolve_topology(name, Location{"--topology", "", 0, 0, "", 0}, diags);
  INFO(name);
  REQUIRE_FALSE(t);
  REQUIRE(diags.items().size() == 1);
  CHECK(diags.items()[0].location.source == "--topology");
  return diags.items()[0];
}

using Shape3 = std::array<int64_t, 3>;

}  // namespace

TEST_CASE("topology catalogue: Cloud TPU names count cores or chips",
          "[topology][catalog]") {
  struct Case {
    const char* name;
    Shape3 chips;
    int64_t devices;
    int64_t devices_per_host;
  };
  // v4-8 is 4 chips (8 TensorCores), one megacore device each; v5e-8 is 8
  // chips on one host; tpu7x-8 is 4 chips of 2 devices; v3-8 is 4 chips of
  // 2 devices (cores), one host.
  const std::vector<Case> cases = {
      {"v2-8", {2, 2, 1}, 8, 8},
      {"v3-8", {2, 2, 1}, 8, 8},
      {"v3-2048", {32, 32, 1}, 2048, 8},
      {"v4-8", {2, 2, 1}, 4, 4},
      {"v4-32", {2, 2, 4}, 16, 4},
      {"v4-8192", {16, 16, 16}, 4096, 4},
      {"v5p-8", {2, 2, 1}, 4, 4},
      {"v5p-128", {4, 4, 4}, 64, 4},
      {"v5p-12288", {16, 16, 24}, 6144, 4},
      {"v5e-1", {1, 1, 1}, 1, 1},
      {"v5e-4", {2, 2, 1}, 4, 4},
      {"v5e-8", {4, 2, 1}, 8, 8},
      {"v5e-16", {4, 4, 1}, 16, 4},
      {"v5e-256", {16, 16, 1}, 256, 4},
      {"v5litepod-16", {4, 4, 1}, 16, 4},
      {"v6e-8", {4, 2, 1}, 8, 8},
      {"v6e-256", {16, 16, 1}, 256, 4},
      {"tpu7x-8", {2, 2, 1}, 8, 8},
      {"tpu7x-128", {4, 4, 4}, 128, 8},
      {"V5P-128", {4, 4, 4}, 64, 4},
  };
  for (const Case& c : cases) {
    Topology t = test::topology_of(c.name);
    INFO(c.name);
    CHECK(t.kind == TopologyKind::tpu);
    CHECK(t.tpu.chips == c.chips);
    CHECK(t.devices() == c.devices);
    CHECK(t.devices_per_host() == c.devices_per_host);
    CHECK(t.num_hosts() * t.devices_per_host() == t.devices());
  }
  CHECK(test::topology_of("V5P-128").name == "v5p-128");
  CHECK(test::topology_of("v5litepod-16").name == "v5e-16");
}

TEST_CASE("topology catalogue: explicit shapes and slices",
          "[topology][catalog]") {
  Topology t = test::topology_of("v5p:4x4x8");
  CHECK(t.name == "v5p:4x4x8");
  CHECK(t.tpu.chips == Shape3{4, 4, 8});
  CHECK(t.devices() == 128);

  t = test::topology_of("v3:2x2");
  CHECK(t.name == "v3:2x2");
  CHECK(t.devices() == 8);

  t = test::topology_of("2xv5p-256");
  CHECK(t.name == "2xv5p-256");
  CHECK(t.num_slices() == 2);
  CHECK(t.tpu.chips == Shape3{4, 4, 8});
  CHECK(t.devices() == 256);
  CHECK(t.num_hosts() == 64);

  t = test::topology_of("4xv5e:16x16");
  CHECK(t.name == "4xv5e:16x16");
  CHECK(t.devices() == 1024);
}

TEST_CASE("topology catalogue: GPU clusters", "[topology][catalog]") {
  Topology t = test::topology_of("h100x64");
  CHECK(t.kind == TopologyKind::gpu);
  CHECK(t.devices() == 64);
  CHECK(t.num_hosts() == 8);
  CHECK(t.nvlink_domain == 8);

  t = test::topology_of("gb200x144");
  CHECK(t.devices() == 144);
  CHECK(t.nvlink_domain == 72);
  CHECK(t.devices_per_host()
        == 4);  // a compute tray (docs/sources.md#nvidia-gb200)
  CHECK(t.num_hosts() == 36);

  CHECK(test::topology_of("a100x4").devices() == 4);  // part of one node
  CHECK(test::topology_of("b200x8").devices() == 8);
  CHECK(test::topology_of("h200x16").num_hosts() == 2);
}

// Found by fuzz_topology_name: "h200x111147424" was accepted (`topology show`
// listed 111,147,424 GPUs, and `mesh --topology` blamed a --devices flag
// nobody gave), while TPU names and every mesh stop at k_max_devices.
TEST_CASE("topology catalogue: GPU counts stop at k_max_devices",
          "[topology][catalog]") {
  // k_max_devices = 2^22 = 4,194,304 = 524,288 nodes of 8 GPUs: accepted.
  CHECK(k_max_devices == 4'194'304);
  CHECK(test::topology_of("h100x4194304").devices() == 4'194'304);

  Diagnostic d = name_error("h200x111147424");
  CHECK(d.code == "topology.size");
  CHECK(d.message
        == "\"h200x111147424\" has 111147424 devices, more than the 4194304 "
           "shardplan handles");
  // 2^22 + 8: whole nodes, one node over.
  CHECK(name_error("h100x4194312").code == "topology.size");

  // The nearest whole counts are those within the cap: 4,194,303 lies
  // between 524,287 x 8 = 4,194,296 and 524,288 x 8 = 4,194,304, both in;
  // 4,194,300 GPUs of GB200 lie between 58,254 x 72 = 4,194,288 and
  // 58,255 x 72 = 4,194,360, which is over.
  CHECK(name_error("h100x4194303").hint
        == "nearest: h100x4194296, h100x4194304");
  CHECK(name_error("gb200x4194300").hint == "nearest: gb200x4194288");
}

TEST_CASE("topology catalogue: figures as docs/sources.md gives them",
          "[topology][catalog]") {
  // One unit everywhere: bytes, bytes per second (one way), seconds.
  CHECK(test::topology_of("v5p-8").figures.ici_bytes_per_s_per_link.value
        == 9e10);
  CHECK(test::topology_of("v5p-8").figures.dcn_bytes_per_s_per_chip.value
        == 6.25e9);
  CHECK(test::topology_of("v5e-4").figures.dcn_bytes_per_s_per_chip.value
        == 3.125e9);
  CHECK(test::topology_of("v6e-4").figures.dcn_bytes_per_s_per_chip.value
        == 12.5e9);
  CHECK(test::topology_of("v4-8").figures.ici_bytes_per_s_per_link.value
        == 4.5e10);
  CHECK(test::topology_of("v4-8").figures.ici_links_per_chip.value == 6);
  CHECK(test::topology_of("v5e-4").figures.ici_links_per_chip.value == 4);
  CHECK(test::topology_of("h100x8").figures.nvlink_bytes_per_s_per_gpu.value
        == 4.5e11);
  CHECK(test::topology_of("h100x8").figures.network_bytes_per_s_per_gpu.value
        == 5e10);
  CHECK(test::topology_of("b200x8").figures.nvlink_bytes_per_s_per_gpu.value
        == 9e11);
  CHECK(test::topology_of("a100x8").figures.nvlink_bytes_per_s_per_gpu.value
        == 3e11);
  // docs/sources.md#latency: T_min ~ 1 us per ICI hop.
  CHECK(test::topology_of("v5e-4").figures.ici_latency_s.value == 1e-6);
  // v2/v3 have no multi-slice, so no DCN figure.
  CHECK(test::topology_of("v3-8")
            .figures.dcn_bytes_per_s_per_chip.source.empty());
}

TEST_CASE("topology catalogue: HBM per device as the runtime reports it",
          "[topology][catalog]") {
  // Issue 17.9: one convention, the capacity the runtime reports per JAX
  // device, in bytes. TPUs: memory_stats()['bytes_limit'] (XLA's OOM report
  // and MaxText's print_mem_stats print it in GiB to 0.01); GPUs:
  // nvidia-smi's total, in MiB. Before, GPUs were the vendor's decimal GB
  // (H100 80e9) and TPUs the docs' GiB (v5p 95 GiB).
  constexpr double k_gib = 1024.0 * 1024 * 1024;
  constexpr double k_mib = 1024.0 * 1024;
  auto hbm = [](const std::string& name) {
    const Topology t = test::topology_of(name);
    INFO(name << ": " << t.figures.hbm_bytes_per_device.source);
    // Whole bytes, sourced.
    CHECK(t.figures.hbm_bytes_per_device.value
          == std::floor(t.figures.hbm_bytes_per_device.value));
    CHECK_FALSE(t.figures.hbm_bytes_per_device.source.empty());
    return t.figures.hbm_bytes_per_device.value;
  };
  // MaxText docs, v5p-8: "Using (GB) 44.63 / 95.74".
  CHECK(hbm("v5p-8") == std::round(95.74 * k_gib));  // 102,800,042,230
  // vllm#16211: bytes_limit 33,550,237,696 on v6e (31.25 GiB to 0.01).
  CHECK(hbm("v6e-4") == 33'550'237'696);
  CHECK(std::round(hbm("v6e-4") / k_gib * 100) / 100 == 31.25);
  // bytes_limit 16,909,332,480 on a v5e-8 (XLA prints "of 15.75G hbm").
  CHECK(hbm("v5e-4") == 16'909'332'480);
  CHECK(std::round(hbm("v5e-4") / k_gib * 100) / 100 == 15.75);
  // XLA's OOM reports: v4-32 "of 30.75G hbm", v3-8 "of 15.48G", v2-8
  // "of 8.00G" (per TensorCore: v2 and v3 run a device per core).
  CHECK(hbm("v4-8") == 30.75 * k_gib);  // 33,017,561,088
  CHECK(hbm("v3-8") == std::round(15.48 * k_gib));
  CHECK(hbm("v2-8") == 8 * k_gib);
  // TPU7x: no runtime reading; 192 GiB per chip over two devices.
  CHECK(hbm("tpu7x-8") == 96 * k_gib);
  // nvidia-smi totals: A100 80GB 81920 MiB, H100 81559 MiB, H200 143771
  // MiB, B200 183359 MiB, GB200 189471 MiB.
  CHECK(hbm("a100x8") == 81'920 * k_mib);     // 85,899,345,920
  CHECK(hbm("h100x8") == 81'559 * k_mib);     // 85,520,809,984
  CHECK(hbm("h200x8") == 143'771 * k_mib);    // 150,754,820,096
  CHECK(hbm("b200x8") == 183'359 * k_mib);    // 192,265,846,784
  CHECK(hbm("gb200x72") == 189'471 * k_mib);  // 198,674,743,296
}

TEST_CASE("topology catalogue: wraparound as the scaling book gives it",
          "[topology][catalog]") {
  using Wrap = std::array<bool, 3>;
  // v4/v5p: tori only in whole 4x4x4 cubes; 2x2x4 has none.
  CHECK(test::topology_of("v5p-128").wraparound == Wrap{true, true, true});
  CHECK(test::topology_of("v5p:4x4x8").wraparound == Wrap{true, true, true});
  CHECK(test::topology_of("v4-32").wraparound == Wrap{false, false, false});
  CHECK(test::topology_of("v5p-64").wraparound == Wrap{false, false, false});
  CHECK(test::topology_of("v4-4096").wraparound == Wrap{true, true, true});
  // v5e/v6e: only axes of 16 (8x16 wraps on the long axis only).
  CHECK(test::topology_of("v5e-256").wraparound == Wrap{true, true, false});
  CHECK(test::topology_of("v5e-128").wraparound == Wrap{true, false, false});
  CHECK(test::topology_of("v6e-16").wraparound == Wrap{false, false, false});
  // v3: the 32x32 pod's 2D torus.
  CHECK(test::topology_of("v3-2048").wraparound == Wrap{true, true, false});
  CHECK(test::topology_of("v3-32").wraparound == Wrap{false, false, false});
}

TEST_CASE("topology catalogue: every entry is consistent and sourced",
          "[topology][catalog]") {
  std::vector<Topology> all = catalogue_topologies();
  REQUIRE(all.size() > 60);
  std::set<std::string> names;
  for (const Topology& t : all) {
    INFO(t.name);
    CHECK(names.insert(t.name).second);
    // Each name resolves back to the same entry.
    Topology again = test::topology_of(t.name);
    CHECK(again.devices() == t.devices());
    CHECK(again.chip == t.chip);
    CHECK(t.devices() % t.devices_per_host() == 0);
    CHECK(t.figures.hbm_bytes_per_device.value > 0);
    CHECK_FALSE(t.figures.hbm_bytes_per_device.source.empty());
    if (t.kind == TopologyKind::tpu) {
      CHECK(t.figures.ici_bytes_per_s_per_link.value > 0);
      CHECK_FALSE(t.figures.ici_bytes_per_s_per_link.source.empty());
      CHECK_FALSE(t.figures.ici_latency_s.source.empty());
      for (size_t k = 0; k < 3; ++k) {
        CHECK(t.tpu.chips[k] % std::min(t.tpu.host_bounds[k], t.tpu.chips[k])
              == 0);
      }
    } else {
      CHECK(t.figures.nvlink_bytes_per_s_per_gpu.value > 0);
      CHECK(t.figures.network_bytes_per_s_per_gpu.value > 0);
      CHECK_FALSE(t.figures.network_latency_s.source.empty());
    }
  }
  // The standard slices the issue names.
  for (const char* name : {"v4-8",
                           "v5p-8",
                           "v5p-12288",
                           "v5e-1",
                           "v5e-256",
                           "v6e-1",
                           "v6e-256",
                           "v2-8",
                           "v3-8",
                           "tpu7x-8",
                           "a100x8",
                           "h100x8",
                           "h200x8",
                           "b200x8",
                           "gb200x72"}) {
    CHECK(names.count(name) == 1);
  }
}

TEST_CASE("topology names: errors say what is wrong and suggest",
          "[topology][catalog]") {
  Diagnostic d = name_error("v5x-128");
  CHECK(d.code == "topology.unknown");
  CHECK(d.message == "unknown topology \"v5x-128\"");
  CHECK_THAT(d.hint,
             Catch::StartsWith("did you mean \"v5e-128\" or \"v5p-128\"?"));

  d = name_error("tpu-v5p-128");
  CHECK(d.code == "topology.unknown");

  d = name_error("v5p-100");
  CHECK(d.code == "topology.size");
  CHECK(d.message
        == "v5p-100 is not a standard v5p slice (v5p-N counts TensorCores, 2 per chip)");
  CHECK(d.hint
        == "nearest: v5p-64 (2x4x4), v5p-128 (4x4x4); any other shape is v5p:XxYxZ");

  d = name_error("v5e-12");
  CHECK(d.message == "v5e-12 is not a standard v5e slice (v5e-N counts chips)");

  d = name_error("h100x60");
  CHECK(d.code == "topology.size");
  CHECK(d.message == "h100x60 is not a whole number of nodes: 8 GPUs per node");
  CHECK(d.hint == "nearest: h100x56, h100x64");

  d = name_error("gb200x100");
  CHECK(d.message
        == "gb200x100 is not a whole number of NVLink domains: 72 GPUs per NVL72 domain");

  CHECK(name_error("2xh100x64").code == "topology.slices");
  CHECK(name_error("2xv3-32").code == "topology.slices");
  CHECK(name_error("0xv5p-128").code == "topology.slices");
  CHECK(name_error("v5p:4x3x4").message
        == "\"v5p:4x3x4\": a 4x3x4 slice of v5p is not made of whole hosts of 2x2x1 chips");
  CHECK(name_error("v5p:0x4x4").code == "topology.shape");
  CHECK(name_error("v5p:4x4").code == "topology.shape");
  CHECK(name_error("v3:2x2x2").code == "topology.shape");
  CHECK(name_error("v5p:32x4x4").message
        == "\"v5p:32x4x4\": axis x has 32 chips; v5p slices reach 16x20x28");
  CHECK(name_error("v5p-").code == "topology.size");
  CHECK(name_error("v5p-99999999999999999999").code == "topology.size");
  CHECK(name_error("").code == "topology.unknown");
}

TEST_CASE("topology catalogue: compute figures are per JAX device",
          "[topology][catalog]") {
  // docs/sources.md (Hardware) gives bf16 peak and HBM bandwidth
  // per chip; a JAX device is a chip on v4, v5e, v5p, v6e and the GPUs,
  // half of one on v2, v3 and TPU7x (two devices per chip).
  struct Row {
    const char* topology;
    double flops;
    double hbm;
  };
  for (Row row : {Row{"v3-8", 1.23e14 / 2, 9.0e11 / 2},
                  Row{"v5p-8", 4.59e14, 2.765e12},
                  Row{"v5e-8", 1.97e14, 8.19e11},
                  Row{"tpu7x-8", 2.307e15 / 2, 7.37e12 / 2},
                  Row{"h100x8", 9.89e14, 3.35e12}}) {
    INFO(row.topology);
    const Topology t = shardplan::test::topology_of(row.topology);
    CHECK(t.figures.bf16_flops_per_s_per_device.value == row.flops);
    CHECK(t.figures.hbm_bytes_per_s_per_device.value == row.hbm);
    CHECK_FALSE(t.figures.bf16_flops_per_s_per_device.source.empty());
  }
}

TEST_CASE("topology catalogue: the slices like a topology",
          "[topology][catalog]") {
  // v5p's standard slices with 2 slices each: 2 x 4 chips first (v5p-8 is
  // 2x2x1), each named as resolve_topology names it.
  const std::vector<Topology> tpu =
      catalogue_slices_like(test::topology_of("2xv5p-256"));
  REQUIRE(tpu.size() >= 3);
  CHECK(tpu[0].name == "2xv5p-8");
  CHECK(tpu[0].devices() == 8);
  for (size_t i = 0; i < tpu.size(); ++i) {
    INFO(tpu[i].name);
    CHECK(tpu[i].tpu.num_slices == 2);
    CHECK(tpu[i].devices() == test::topology_of(tpu[i].name).devices());
    if (i > 0) {
      CHECK(tpu[i].devices() > tpu[i - 1].devices());
    }
  }
  // GPUs: the standard counts of the chip.
  const std::vector<Topology> gpu =
      catalogue_slices_like(test::topology_of("h100x64"));
  REQUIRE(gpu.size() == 8);
  CHECK(gpu.front().name == "h100x8");
  CHECK(gpu.back().name == "h100x1024");
  // No family: nothing.
  Topology lab = test::topology_of("v5p-8");
  lab.chip = "";
  CHECK(catalogue_slices_like(lab).empty());
}

TEST_CASE("catalogue: every figure field names a figure", "[topology]") {
  // A field list longer than its entries (a size bumped, an entry not
  // added) leaves a null member that crashes every report of figures.
  std::set<std::string_view> names;
  for (const FigureField& field : figure_fields()) {
    CHECK_FALSE(field.name.empty());
    CHECK(field.member != nullptr);
    CHECK(names.insert(field.name).second);
  }
  CHECK(names.count("fp8_efficiency_ratio") == 1);
  CHECK(names.count("memory_efficiency") == 1);
}
