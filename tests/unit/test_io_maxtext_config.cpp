// MaxText configs (--maxtext-config; docs/maxtext.md): the reader, MaxText's
// -1 fill of the ici_*/dcn_* parallelism keys with its own messages, and
// the KEY=VALUE overrides. Expected values are worked out by hand from
// MaxText's maxtext_utils.fill_unspecified_mesh_axes and base.yml. The
// command line that takes the mesh, the rules and the workload from a
// config is in test_cli_maxtext.cpp.

#include "support/test_support.hpp"

#include <shardplan/io.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <optional>
#include <string>
#include <vector>

using namespace shardplan;

namespace {

std::optional<MaxTextConfig> read(const std::string& yaml,
                                  Diagnostics& diags,
                                  std::vector<std::string> overrides = {}) {
  return read_maxtext_config_text(yaml, "cfg.yml", overrides, diags);
}

// The mesh of `yaml` on `devices` devices in `slices` slices; fails the
// test on an error.
MaxTextMesh mesh_of(const std::string& yaml,
                    int64_t devices,
                    std::optional<int64_t> slices = 1,
                    std::vector<std::string> overrides = {}) {
  Diagnostics diags;
  std::optional<MaxTextConfig> config = read(yaml, diags, overrides);
  INFO(test::first_error(diags));
  REQUIRE(config);
  std::optional<MaxTextMesh> mesh =
      maxtext_mesh(*config, devices, slices, diags);
  INFO(test::first_error(diags));
  REQUIRE(mesh);
  return *mesh;
}

// The first error of reading `yaml` and building its mesh, rendered.
std::string mesh_error(const std::string& yaml,
                       int64_t devices,
                       std::optional<int64_t> slices = 1,
                       std::vector<std::string> overrides = {}) {
  Diagnostics diags;
  std::optional<MaxTextConfig> config = read(yaml, diags, overrides);
  if (config) {
    CHECK_FALSE(maxtext_mesh(*config, devices, slices, diags));
  }
  return test::first_error(diags);
}

std::string data(const std::string& name) {
  return test::data_path("maxtext/" + name);
}

}  // namespace

TEST_CASE("maxtext: reads a base.yml-style file with its locations",
          "[io][maxtext_config]") {
  Diagnostics diags;
  std::optional<MaxTextConfig> c =
      read_maxtext_config(data("small.yml"), {}, diags);
  INFO(test::first_error(diags));
  REQUIRE(c);
  CHECK(c->source == data("small.yml"));
  // base.yml's mesh_axes (maxtext@e591f30c): diloco, data, stage, fsdp,
  // ..., tensor at index 8.
  REQUIRE(c->axes.size() == 12);
  CHECK(c->axes[0].name == "diloco");
  CHECK(c->axes[1].name == "data");
  CHECK(c->axes[2].name == "stage");
  CHECK(c->axes[2].key == "pipeline");
  const MaxTextAxis& fsdp = c->axes[3];
  CHECK(fsdp.ici.value == -1);
  CHECK(fsdp.ici.at.line == 3);
  CHECK(fsdp.ici.at.column == 23);
  const MaxTextAxis& tensor = c->axes[8];
  CHECK(tensor.name == "tensor");
  CHECK(tensor.ici.value == 4);
  CHECK(tensor.ici.at.line == 4);
  CHECK(tensor.ici.at.column == 25);
  CHECK_FALSE(tensor.dcn.set());  // MaxText's default
  CHECK(c->num_slices.value == -1);
  CHECK_FALSE(c->allow_split_physical_axes.value);
  REQUIRE(c->per_device_batch_size);
  CHECK(c->per_device_batch_size->value == "2.0");
  CHECK(c->per_device_batch_size->at.line == 6);
  REQUIRE(c->max_target_length);
  CHECK(c->max_target_length->value == 4096);
  CHECK(to_string(maxtext_location(c->max_target_length->at))
        == data("small.yml") + ":7:20");
  REQUIRE(c->remat_policy);
  CHECK(c->remat_policy->value == "full");
  REQUIRE(c->weight_dtype);
  CHECK(c->weight_dtype->value == DType::bf16);
  CHECK_FALSE(c->logical_axis_rules);
  CHECK(c->ignored_keys == std::vector<std::string>{"run_name"});
}

TEST_CASE("maxtext: unknown keys are one short info note",
          "[io][maxtext_config]") {
  Diagnostics diags;
  std::optional<MaxTextConfig> c =
      read_maxtext_config(data("large.yml"), {}, diags);
  INFO(test::first_error(diags));
  REQUIRE(c);
  // 74 keys, of which 53 are read: 26 ici/dcn keys, mesh_axes, shard_mode,
  // num_slices, allow_split_physical_axes, logical_axis_rules, the four
  // workload keys, decoder_layer_input (the custom remat policy's),
  // capacity_factor, dtype, quantization and scan_layers, and the model's
  // 13 (model_name, decoder_block, global_parameter_scale, the five base_*
  // dims, head_dim, mlp_activations, num_experts, num_experts_per_tok,
  // vocab_size).
  CHECK(c->ignored_keys.size() == 21);
  REQUIRE(diags.items().size() == 1);
  const Diagnostic& d = diags.items()[0];
  CHECK(d.severity == Severity::info);
  CHECK(d.code == "maxtext.ignored-keys");
  CHECK(d.message.starts_with(
      "21 keys shardplan does not read were ignored: run_name, "
      "override_model_config, override_logical_axis_rules, "
      "normalization_layer_epsilon, "));
  CHECK(d.location.source == data("large.yml"));
  // Its logical_axis_rules, in order, with MaxText's forms.
  REQUIRE(c->logical_axis_rules);
  REQUIRE(c->logical_axis_rules->size() == 9);
  const LogicalAxisRule& mlp = (*c->logical_axis_rules)[1];
  CHECK(mlp.name == "mlp");
  REQUIRE(mlp.axes.size() == 4);
  CHECK(mlp.axes[1].name == "tensor");
  CHECK(mlp.pointer == "/logical_axis_rules/1");
  CHECK((*c->logical_axis_rules)[7].name == "norm");
  CHECK((*c->logical_axis_rules)[7].axes.empty());
  CHECK((*c->logical_axis_rules)[8].axes.size() == 1);
  CHECK((*c->logical_axis_rules)[8].axes[0].name == "stage");
  CHECK(c->per_device_batch_size->value == "12.0");
  CHECK(c->weight_dtype->value == DType::f32);
}

TEST_CASE("maxtext: -1 fill as MaxText's fill_unspecified_mesh_axes",
          "[io][maxtext_config]") {
  const std::string yaml =
      "ici_fsdp_parallelism: -1\nici_tensor_parallelism: 4\n";
  SECTION("ICI: fsdp -1 with tensor 4 on 64 devices is fsdp 16") {
    MaxTextMesh m = mesh_of(yaml, 64);
    CHECK(m.mesh == "fsdp:16,tensor:4");
    CHECK(m.dcn == "");
    CHECK(m.num_slices == 1);
    CHECK(m.axes[3].ici.value == 16);  // fsdp
    CHECK(m.axes[1].dcn.value == 1);   // dcn_data -1 unused on one slice
  }
  SECTION("DCN: dcn_data -1 takes the 2 slices of the topology") {
    MaxTextMesh m = mesh_of(yaml, 128, 2);
    CHECK(m.mesh == "data:2,fsdp:16,tensor:4");
    CHECK(m.dcn == "data:2");
    CHECK(m.num_slices == 2);
  }
  SECTION("num_slices gives the slices of a bare device count") {
    MaxTextMesh m = mesh_of(yaml + "num_slices: 4\n", 256, std::nullopt);
    CHECK(m.mesh == "data:4,fsdp:16,tensor:4");
    CHECK(m.dcn == "data:4");
  }
  SECTION("DCN on fsdp, data set to 1") {
    MaxTextMesh m = mesh_of(
        yaml + "dcn_data_parallelism: 1\ndcn_fsdp_parallelism: 2\n", 128, 2);
    CHECK(m.mesh == "fsdp:32,tensor:4");
    CHECK(m.dcn == "fsdp:2");
  }
  SECTION("stage takes ici_pipeline_parallelism; mesh_axes gives the order") {
    MaxTextMesh m = mesh_of(
        "mesh_axes: [stage, fsdp, tensor]\nici_pipeline_parallelism: 2\n"
        "ici_tensor_parallelism: 4\n",
        64);
    CHECK(m.mesh == "stage:2,fsdp:8,tensor:4");
  }
  SECTION("one device keeps the -1 axis; explicit axis types") {
    CHECK(mesh_of("{}", 1).mesh == "fsdp:1");
    CHECK(mesh_of("shard_mode: explicit\nici_tensor_parallelism: 2\n", 8).mesh
          == "fsdp:4:explicit,tensor:2:explicit");
  }
  SECTION("allow_split_physical_axes is carried") {
    CHECK(mesh_of("allow_split_physical_axes: true\n", 8)
              .allow_split_physical_axes);
  }
}

TEST_CASE("maxtext: fill errors carry MaxText's words, located",
          "[io][maxtext_config]") {
  SECTION("more than one -1") {
    CHECK(mesh_error("ici_tensor_parallelism: -1\n", 64)
          == "cfg.yml:1:25: error: Found unspecified values (-1) for more "
             "than one ICI parallelism axis. At most one axis can be "
             "unspecified; -1: ici_fsdp_parallelism -1 (MaxText's default), "
             "ici_tensor_parallelism -1 (cfg.yml:1:25) [maxtext.mesh]\n"
             "  ici_tensor_parallelism: -1\n"
             "                          ^");
  }
  SECTION("a fill that does not divide is MaxText's current error") {
    // 64 / 3 = 21.33 is not an integer (maxtext@e591f30c
    // max_utils.fill_unspecified_mesh_axes); at the -1, base.yml's
    // ici_fsdp_parallelism.
    const std::string e = mesh_error("ici_tensor_parallelism: 3\n", 64);
    CHECK(
        e.starts_with("cfg.yml: error: Unspecified value unable to be "
                      "determined with the given ICI parallelism values"));
  }
  SECTION("others larger than the slice") {
    CHECK(mesh_error("ici_tensor_parallelism: 128\n", 64)
              .starts_with("cfg.yml: error: Unspecified value unable to be "
                           "determined with the "
                           "given ICI parallelism values"));
  }
  SECTION("a product without -1 that misses the device count") {
    // 8 x 4 = 32 on 64 devices: located at the last key set.
    CHECK(mesh_error("ici_fsdp_parallelism: 8\nici_tensor_parallelism: 4\n", 64)
              .starts_with("cfg.yml:2:25: error: Number of devices per slice "
                           "64 does not match the product of the ICI "
                           "parallelism 32; ici_fsdp_parallelism 8 "
                           "(cfg.yml:1:23), ici_tensor_parallelism 4 "
                           "(cfg.yml:2:25) [maxtext.mesh]"));
  }
  SECTION("DCN product against the slices") {
    CHECK(mesh_error("dcn_data_parallelism: 4\n", 128, 2)
              .starts_with("cfg.yml:1:23: error: Number of slices 2 does not "
                           "match the product of the DCN parallelism 4"));
  }
  SECTION("DCN on one slice") {
    CHECK(mesh_error("dcn_fsdp_parallelism: 2\n", 64)
              .starts_with("cfg.yml:1:23: error: DCN parallelism requested "
                           "but only one slice available; "
                           "dcn_fsdp_parallelism is 2"));
  }
  SECTION("num_slices other than the topology's") {
    CHECK(mesh_error("num_slices: 2\n", 64)
              .starts_with("cfg.yml:1:13: error: num_slices is 2, but the "
                           "topology has 1 slice"));
  }
}

TEST_CASE("maxtext: KEY=VALUE overrides win, parsed as YAML",
          "[io][maxtext_config]") {
  const std::string yaml =
      "ici_tensor_parallelism: 4\nmax_target_length: 2048\n";
  SECTION("an override wins over the file") {
    Diagnostics diags;
    std::optional<MaxTextConfig> c = read(
        yaml, diags, {"ici_tensor_parallelism=8", "max_target_length=1_024"});
    REQUIRE(c);
    CHECK(c->axes[8].ici.value == 8);
    CHECK(c->max_target_length->value == 1024);
    CHECK(to_string(maxtext_location(c->axes[8].ici.at))
          == "--maxtext-config ici_tensor_parallelism=8");
    CHECK(mesh_of(yaml, 64, 1, {"ici_tensor_parallelism=8"}).mesh
          == "fsdp:8,tensor:8");
  }
  SECTION("a bad override is located in the argument") {
    CHECK(mesh_error(yaml, 64, 1, {"ici_tensor_parallelism=x"})
          == "--maxtext-config:1:24: error: ici_tensor_parallelism must be "
             "an integer >= 1 or -1, got \"x\" [maxtext.bad-value]\n"
             "  ici_tensor_parallelism=x\n"
             "                         ^");
  }
  SECTION("a key MaxText's config lacks is pyconfig's error, with a hint") {
    Diagnostics diags;
    CHECK_FALSE(read(yaml, diags, {"ici_tensr_parallelism=2"}));
    REQUIRE(diags.has_errors());
    const Diagnostic& d = diags.items().back();
    CHECK(d.code == "maxtext.unknown-key");
    CHECK(d.message
          == "\"ici_tensr_parallelism\" is not a key of MaxText's config "
             "(types.py at e591f30c), so MaxText's pyconfig refuses it");
    CHECK(d.hint == "did you mean \"ici_tensor_parallelism\"?");
  }
  SECTION("not KEY=VALUE") {
    CHECK(mesh_error(yaml, 64, 1, {"ici_tensor_parallelism"})
              .starts_with("--maxtext-config:1:1: error: expected KEY=VALUE, "
                           "got \"ici_tensor_parallelism\""));
  }
  SECTION("keys shardplan reads may be overridden when the file lacks them") {
    Diagnostics diags;
    std::optional<MaxTextConfig> c =
        read(yaml, diags, {"dcn_fsdp_parallelism=2", "num_slices=2"});
    REQUIRE(c);
    CHECK(c->axes[3].dcn.value == 2);  // fsdp
    CHECK(c->num_slices.value == 2);
  }
}

TEST_CASE("maxtext: bad values are located errors", "[io][maxtext_config]") {
  struct Case {
    const char* yaml;
    const char* error;
  };
  const Case cases[] = {
      {"ici_fsdp_parallelism: \"4\"\n",
       "cfg.yml:1:23: error: ici_fsdp_parallelism must be an integer >= 1 or "
       "-1, got the string \"4\" [maxtext.bad-value]"},
      {"run_name: x\nici_data_parallelism: 0\n",
       "cfg.yml:2:23: error: ici_data_parallelism must be an integer >= 1 or "
       "-1, got \"0\" [maxtext.bad-value]"},
      {"ici_data_parallelism: 99999999999999999999\n",
       "cfg.yml:1:23: error: ici_data_parallelism must be an integer >= 1 or "
       "-1, got \"99999999999999999999\" (out of range) [maxtext.bad-value]"},
      {"max_target_length: 0\n",
       "cfg.yml:1:20: error: max_target_length must be an integer >= 1, got "
       "\"0\" [maxtext.bad-value]"},
      {"allow_split_physical_axes: maybe\n",
       "cfg.yml:1:28: error: allow_split_physical_axes must be true or false, "
       "got \"maybe\" [maxtext.bad-value]"},
      {"per_device_batch_size: -1\n",
       "cfg.yml:1:24: error: per_device_batch_size must be a number > 0, got "
       "\"-1\" [maxtext.bad-value]"},
      {"weight_dtype: float33\n",
       "cfg.yml:1:15: error: weight_dtype \"float33\" is not a dtype; did "
       "you mean \"float32\"? [maxtext.bad-value]"},
      {"mesh_axes: [data, data]\n",
       "cfg.yml:1:19: error: mesh_axes names axis \"data\" twice "
       "[maxtext.bad-value]"},
      {"shard_mode: manual\n",
       "cfg.yml:1:13: error: shard_mode must be \"auto\" or \"explicit\", got "
       "\"manual\" [maxtext.bad-value]"},
      {"logical_axis_rules: [[embed, tensr]]\n",
       "cfg.yml:1:30: error: logical_axis_rules[0] names \"tensr\", which is "
       "not in mesh_axes; did you mean \"tensor\"? [maxtext.bad-value]"},
      {"logical_axis_rules: [[embed]]\n",
       "cfg.yml:1:22: error: logical_axis_rules[0] must be a pair "
       "[logical_name, mesh_axes], got a list of 1 items "
       "[maxtext.bad-value]"},
      {"sa_block_q: 0\n",
       "cfg.yml:1:13: error: sa_block_q must be an integer >= 1, got \"0\" "
       "[maxtext.bad-value]"},
      {"wo_tile_drhs_batch_seq: big\n",
       "cfg.yml:1:25: error: wo_tile_drhs_batch_seq must be an integer >= 1, "
       "got \"big\" [maxtext.bad-value]"},
      {"use_tokamax_gmm: 1.5\n",
       "cfg.yml:1:18: error: use_tokamax_gmm must be true or false, got "
       "\"1.5\" [maxtext.bad-value]"},
      {"- a\n- b\n",
       "cfg.yml:1:1: error: expected a mapping of keys (\"key: value\" "
       "lines), got a list [maxtext.syntax]"},
  };
  for (const Case& c : cases) {
    INFO(c.yaml);
    Diagnostics diags;
    CHECK_FALSE(read(c.yaml, diags));
    const std::string e = test::first_error(diags);
    CHECK(e.substr(0, e.find('\n')) == c.error);
  }
  SECTION("hints") {
    Diagnostics diags;
    CHECK_FALSE(read("logical_axis_rules: [[embed, tensr]]\n", diags));
    CHECK(diags.items().back().hint == "did you mean \"tensor\"?");
    Diagnostics remat;
    CHECK_FALSE(read("remat_policy: minimall\n", remat));
    CHECK(remat.items().back().hint == "did you mean \"minimal\"?");
  }
}

TEST_CASE("maxtext: the kernels' tiles, base.yml's unless set",
          "[io][maxtext_config]") {
  // base.yml: sa_block_* 512, sa_use_fused_bwd_kernel false,
  // use_tokamax_gmm false, the grouped matmul's row tiles 512.
  Diagnostics diags;
  std::optional<MaxTextConfig> plain = read("run_name: x\n", diags);
  REQUIRE(plain);
  CHECK(plain->splash_blocks
        == std::array<int64_t, 6>{512, 512, 512, 512, 512, 512});
  CHECK_FALSE(plain->splash_fused_backward);
  CHECK_FALSE(plain->tokamax_gmm);
  CHECK(plain->gmm_tile_rows
        == std::array<int64_t, 6>{512, 512, 512, 512, 512, 512});
  CHECK_FALSE(plain->splash_at);
  CHECK_FALSE(plain->gmm_at);
  // Set, each in its place, located at the first of its kind.
  std::optional<MaxTextConfig> set = read(
      "sa_block_q: 2048\nsa_block_kv_dkv: 1024\n"
      "sa_use_fused_bwd_kernel: true\nuse_tokamax_gmm: true\n"
      "wo_tile_dlhs_batch_seq: 256\n",
      diags);
  REQUIRE(set);
  CHECK(set->splash_blocks
        == std::array<int64_t, 6>{2048, 512, 512, 1024, 512, 512});
  CHECK(set->splash_fused_backward);
  CHECK(set->tokamax_gmm);
  CHECK(set->gmm_tile_rows
        == std::array<int64_t, 6>{512, 512, 512, 512, 256, 512});
  REQUIRE(set->splash_at);
  CHECK(set->splash_at->line == 1);
  REQUIRE(set->gmm_at);
  CHECK(set->gmm_at->line == 4);
  CHECK(set->ignored_keys.empty());
}

TEST_CASE("maxtext: YAML syntax errors are located, never thrown",
          "[io][maxtext_config]") {
  for (const char* yaml : {"ici_fsdp_parallelism: [1, 2\n",
                           "a: b\n  c: d\n",
                           "a: *nowhere\n",
                           "\t- x\n"}) {
    INFO(yaml);
    Diagnostics diags;
    CHECK_FALSE(read(yaml, diags));
    REQUIRE(diags.has_errors());
    const Diagnostic& d = diags.items().back();
    CHECK(d.code == "maxtext.syntax");
    CHECK(d.location.source == "cfg.yml");
    CHECK(d.location.line >= 1);
    CHECK(d.message.starts_with("not valid YAML: "));
  }
  // An empty file is no mapping.
  Diagnostics diags;
  CHECK_FALSE(read("", diags));
  CHECK(test::first_error(diags)
        == "cfg.yml: error: expected a mapping of keys (\"key: value\" "
           "lines), got an empty document [maxtext.syntax]");
}

TEST_CASE("maxtext: base_config is read first, a missing one noted",
          "[io][maxtext_config]") {
  SECTION("missing beside the file") {
    Diagnostics diags;
    std::optional<MaxTextConfig> c =
        read_maxtext_config(data("child_missing_base.yml"), {}, diags);
    REQUIRE(c);
    REQUIRE_FALSE(diags.items().empty());
    CHECK(diags.items()[0].code == "maxtext.base-config");
    CHECK(diags.items()[0].severity == Severity::info);
    CHECK(c->axes[8].ici.value == 2);
  }
  SECTION("found beside the file: the child's keys win") {
    Diagnostics diags;
    std::optional<MaxTextConfig> c =
        read_maxtext_config(data("child.yml"), {}, diags);
    INFO(test::first_error(diags));
    REQUIRE(c);
    CHECK(c->axes[8].ici.value == 2);            // child
    CHECK(c->max_target_length->value == 4096);  // small.yml, the base
    CHECK(c->max_target_length->at.source == data("small.yml"));
  }
}

TEST_CASE("maxtext: num_pipeline_microbatches -1 is the stage count",
          "[io][maxtext_config]") {
  // base.yml's num_pipeline_microbatches: -1, "defaults to num_stages"
  // (MaxText's types.py): ici x dcn pipeline parallelism.
  Diagnostics diags;
  std::optional<MaxTextConfig> staged = read(
      "num_pipeline_microbatches: -1\nici_pipeline_parallelism: 4\n"
      "dcn_pipeline_parallelism: 2\n",
      diags);
  INFO(test::first_error(diags));
  REQUIRE(staged);
  REQUIRE(staged->num_pipeline_microbatches);
  CHECK(staged->num_pipeline_microbatches->value == 8);
  // Without a pipeline, one stage: no microbatches to split.
  std::optional<MaxTextConfig> flat =
      read("num_pipeline_microbatches: -1\n", diags);
  REQUIRE(flat);
  CHECK_FALSE(flat->num_pipeline_microbatches);
  // Below -1, or 0: MaxText's own error.
  Diagnostics bad;
  CHECK_FALSE(read("num_pipeline_microbatches: 0\n", bad));
  CHECK(test::first_error(bad).find("num_pipeline_microbatches must be an "
                                    "integer >= 1 or -1")
        != std::string::npos);
}
