#include "support/test_support.hpp"

#include <shardplan/mesh.hpp>

#include <catch2/catch.hpp>

#include <random>

using namespace shardplan;

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma - start));
    if (comma == std::string::npos) {
      return out;
    }
    start = comma + 1;
  }
}

Mesh must_parse(std::string_view text,
                const MeshOptions& options = test::flag_options()) {
  Diagnostics diags;
  auto mesh = parse_mesh(text, options, diags);
  INFO(test::first_error(diags));
  REQUIRE(mesh);
  REQUIRE_FALSE(diags.has_errors());
  return *mesh;
}

MeshOptions with_devices(int64_t n) {
  MeshOptions o = test::flag_options();
  o.num_devices = n;
  return o;
}

}  // namespace

TEST_CASE("mesh: every negative case gives its exact located error", "[mesh]") {
  for (const test::NegativeCase& c : test::load_cases("mesh_errors.txt")) {
    DYNAMIC_SECTION("line " << c.line << ": " << c.name) {
      MeshOptions options = test::flag_options();
      if (c.args.count("devices")) {
        options.num_devices = std::stoll(c.args.at("devices"));
      }
      if (c.args.count("names")) {
        options.axis_names = split_commas(c.args.at("names"));
      }
      if (c.args.count("dcn")) {
        options.dcn = c.args.at("dcn");
      }
      if (c.args.count("slices")) {
        options.num_slices = std::stoll(c.args.at("slices"));
      }
      Diagnostics diags;
      auto mesh = parse_mesh(c.input, options, diags);
      CHECK_FALSE(mesh);
      REQUIRE(diags.error_count() == 1);
      const Diagnostic& d = diags.items().front();
      CHECK(d.code == c.expect_code);
      CHECK(test::first_line_without_code(d) == c.expect_message);
    }
  }
}

TEST_CASE("mesh: the caret sits under the offending character", "[mesh]") {
  Diagnostics diags;
  CHECK_FALSE(parse_mesh("dp:2,tp:x", with_devices(8), diags));
  CHECK(render(diags.items().front())
        == "--mesh:1:9: error: expected an integer axis size, got \"x\" [mesh.syntax]\n"
           "  dp:2,tp:x\n"
           "          ^");
}

TEST_CASE("mesh: the caret counts characters after multi-byte UTF-8",
          "[mesh]") {
  Diagnostics diags;
  CHECK_FALSE(parse_mesh("données:2", test::flag_options(), diags));
  // "donn" is 4 characters; the caret goes under the 5th, "é".
  CHECK(render(diags.items().front())
        == "--mesh:1:5: error: invalid character \"é\" (U+00E9) in axis name; names "
           "are [A-Za-z_][A-Za-z0-9_]* [mesh.syntax]\n"
           "  données:2\n"
           "      ^");
}

TEST_CASE("mesh: named form keeps the string's order", "[mesh]") {
  Mesh m = must_parse("tp:4,dp:2", with_devices(8));
  REQUIRE(m.axes.size() == 2);
  CHECK(m.axes[0].name == "tp");
  CHECK(m.axes[0].size == 4);
  CHECK(m.axes[1].name == "dp");
  CHECK(m.axes[1].size == 2);
  CHECK(m.num_devices() == 8);
  CHECK(m.axes[0].type == AxisType::automatic);
  CHECK(m.axes[0].ici == 4);
  CHECK(m.axes[0].dcn == 1);
}

TEST_CASE("mesh: -1 is filled against the device count", "[mesh]") {
  Mesh m = must_parse("dp:2,fsdp:-1,tp:4", with_devices(64));
  CHECK(m.shape() == std::vector<int64_t>{2, 8, 4});
  CHECK(must_parse("fsdp:-1", with_devices(1)).shape()
        == std::vector<int64_t>{1});
  CHECK(must_parse("dp:8,fsdp:-1", with_devices(8)).shape()
        == std::vector<int64_t>{8, 1});
}

TEST_CASE("mesh: without a device count the mesh's product is its size",
          "[mesh]") {
  Mesh m = must_parse("dp:3,tp:5");
  CHECK(m.num_devices() == 15);
}

TEST_CASE("mesh: positional form takes names from --axis-names", "[mesh]") {
  MeshOptions o = with_devices(64);
  o.axis_names = {"dp", "fsdp", "tp"};
  Mesh m = must_parse("2,-1,4", o);
  CHECK(m.axis_names() == std::vector<std::string>{"dp", "fsdp", "tp"});
  CHECK(m.shape() == std::vector<int64_t>{2, 8, 4});
}

TEST_CASE("mesh: named form with --axis-names must use exactly those names",
          "[mesh]") {
  MeshOptions o = with_devices(8);
  o.axis_names = {"dp", "tp"};
  // The string's order wins over --axis-names' order (eformer does the same).
  Mesh m = must_parse("tp:4,dp:2", o);
  CHECK(m.axis_names() == std::vector<std::string>{"tp", "dp"});
}

TEST_CASE("mesh: whitespace around tokens is ignored", "[mesh]") {
  Mesh m =
      must_parse("  dp : 2 ,\tfsdp:-1 , tp:4 : Explicit  ", with_devices(16));
  CHECK(to_string(m) == "dp:2,fsdp:2,tp:4:explicit");
}

TEST_CASE("mesh: axis types, any case", "[mesh]") {
  Mesh m = must_parse("a:1:AUTO,b:2:explicit,c:2:Manual", with_devices(4));
  CHECK(m.axes[0].type == AxisType::automatic);
  CHECK(m.axes[1].type == AxisType::explicit_);
  CHECK(m.axes[2].type == AxisType::manual);
  CHECK(to_string(m) == "a:1,b:2:explicit,c:2:manual");
}

TEST_CASE("mesh: leading zeros read as decimal, as Python's int() does",
          "[mesh]") {
  CHECK(must_parse("dp:08,tp:01").shape() == std::vector<int64_t>{8, 1});
}

TEST_CASE("mesh: names may use underscores and digits", "[mesh]") {
  Mesh m = must_parse("_x:2,fsdp_transpose:2,tp2:1");
  CHECK(m.axis_names()
        == std::vector<std::string>{"_x", "fsdp_transpose", "tp2"});
}

TEST_CASE("mesh: --dcn splits each axis into ICI x DCN", "[mesh]") {
  MeshOptions o = with_devices(32);
  o.dcn = "dp:2";
  Mesh m = must_parse("dp:4,tp:8", o);
  CHECK(m.axes[0].ici == 2);
  CHECK(m.axes[0].dcn == 2);
  CHECK(m.axes[1].ici == 8);
  CHECK(m.axes[1].dcn == 1);
  CHECK(m.num_slices() == 2);
  CHECK(dcn_string(m) == "dp:2");
}

TEST_CASE("mesh: positional --dcn and -1 against the slice count", "[mesh]") {
  MeshOptions o = with_devices(64);
  o.num_slices = 4;
  o.dcn = "-1,1,1";
  o.axis_names = {"dp", "fsdp", "tp"};
  Mesh m = must_parse("4,4,4", o);
  CHECK(m.dcn_shape() == std::vector<int64_t>{4, 1, 1});
  CHECK(m.ici_shape() == std::vector<int64_t>{1, 4, 4});
}

TEST_CASE(
    "mesh: multi-slice without --dcn puts the slices on the first divisible "
    "axis",
    "[mesh]") {
  // eformer's create_mesh:
  //   next(i for i, dim in enumerate(shape) if dim % n == 0)
  MeshOptions o = with_devices(24);
  o.num_slices = 2;
  Mesh m = must_parse("dp:1,fsdp:3,tp:8", o);
  CHECK(m.dcn_shape() == std::vector<int64_t>{1, 1, 2});
  CHECK(m.ici_shape() == std::vector<int64_t>{1, 3, 4});
  // dp:1 is divisible by 1 slice: nothing changes with one slice.
  o.num_slices = 1;
  o.num_devices = 24;
  CHECK(must_parse("dp:1,fsdp:3,tp:8", o).dcn_shape()
        == std::vector<int64_t>{1, 1, 1});
}

TEST_CASE("mesh: the largest accepted device count", "[mesh]") {
  Mesh m = must_parse("a:4194304");
  CHECK(m.num_devices() == k_max_devices);
}

TEST_CASE("mesh: canonical printing parses back to an equal mesh",
          "[mesh][property]") {
  std::mt19937_64 rng(Catch::rngSeed());
  const std::vector<int64_t> sizes = {1, 2, 3, 4, 5, 8, 16};
  for (int round = 0; round < 300; ++round) {
    std::uniform_int_distribution<int> rank_dist(1, 5);
    int rank = rank_dist(rng);
    Mesh m;
    for (int i = 0; i < rank; ++i) {
      MeshAxis a;
      a.name = "ax" + std::to_string(i) + (i % 2 ? "_x" : "");
      a.size = sizes[rng() % sizes.size()];
      a.type = static_cast<AxisType>(rng() % 3);
      // A DCN factor that divides the size.
      std::vector<int64_t> divisors;
      for (int64_t d = 1; d <= a.size; ++d) {
        if (a.size % d == 0) {
          divisors.push_back(d);
        }
      }
      a.dcn = divisors[rng() % divisors.size()];
      a.ici = a.size / a.dcn;
      m.axes.push_back(a);
    }
    MeshOptions o = test::flag_options();
    o.num_devices = m.num_devices();
    o.num_slices = m.num_slices();
    o.dcn = dcn_string(m);
    std::string text = to_string(m);
    INFO(text << " --dcn " << o.dcn);
    Diagnostics diags;
    auto back = parse_mesh(text, o, diags);
    INFO(test::first_error(diags));
    REQUIRE(back);
    CHECK(*back == m);
  }
}

TEST_CASE("mesh: random mutations of a mesh string never crash",
          "[mesh][property]") {
  std::mt19937_64 rng(Catch::rngSeed());
  const std::string alphabet = "dpt:,-1 09x\t_:,é\xff";
  for (int round = 0; round < 2000; ++round) {
    std::string s = "dp:2,fsdp:-1,tp:4:explicit";
    int edits = static_cast<int>(rng() % 6);
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % (s.size() + 1);
      switch (rng() % 3) {
        case 0:
          s.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
        case 1:
          if (pos < s.size()) {
            s.erase(pos, 1);
          }
          break;
        default:
          if (pos < s.size()) {
            s[pos] = alphabet[rng() % alphabet.size()];
          }
      }
    }
    Diagnostics diags;
    auto m = parse_mesh(s, with_devices(64), diags);
    // Either a mesh of 64 devices or exactly one located error.
    if (m) {
      CHECK(m->num_devices() == 64);
      CHECK_FALSE(diags.has_errors());
    } else {
      REQUIRE(diags.error_count() == 1);
      CHECK_FALSE(diags.items().front().location.source.empty());
      CHECK_FALSE(diags.items().front().code.empty());
    }
  }
}

TEST_CASE("mesh: axis roles by name, by the caller, and their errors",
          "[mesh]") {
  const Mesh mesh = test::mesh_of("dp:2,fsdp:4,ep:2,tp:2,pp:2,cp:1", 64);
  AxisRoleSources sources{Location::of("--data-axes"),
                          Location::of("--tensor-axes"),
                          Location::of("--sequence-axes"),
                          Location::of("--expert-axes"),
                          Location::of("--stage-axes")};
  Diagnostics diags;
  std::optional<AxisRoles> roles =
      resolve_axis_roles(mesh, AxisRoles{}, sources, diags);
  REQUIRE(roles);
  CHECK(roles->data == std::vector<std::string>{"dp", "fsdp"});
  CHECK(roles->tensor == std::vector<std::string>{"tp"});
  CHECK(roles->sequence == std::vector<std::string>{"cp"});
  CHECK(roles->expert == std::vector<std::string>{"ep"});
  CHECK(roles->stage == std::vector<std::string>{"pp"});
  // 2 x 4 = 8 devices hold different batches; cp:1 splits nothing.
  CHECK(roles->size(mesh, AxisRole::data) == 8);
  CHECK(roles->size(mesh, AxisRole::sequence) == 1);
  CHECK(roles->role_of("ep") == AxisRole::expert);

  // Naming a role's axes replaces its defaults, and takes the axis from the
  // role that would have had it by name: ep becomes a data axis here, so
  // the expert role has none left.
  AxisRoles given;
  given.data = {"ep", "dp"};
  roles = resolve_axis_roles(mesh, given, sources, diags);
  REQUIRE(roles);
  CHECK(roles->data == std::vector<std::string>{"dp", "ep"});  // mesh order
  CHECK(roles->expert.empty());
  CHECK_FALSE(roles->role_of("fsdp"));  // a replica axis now

  given.tensor = {"tpp"};
  given.stage = {"dp"};
  CHECK_FALSE(resolve_axis_roles(mesh, given, sources, diags));
  REQUIRE(diags.error_count() == 2);
  CHECK(render(diags.items()[0])
        == "--tensor-axes: error: tensor axis \"tpp\" is not an axis of the "
           "mesh dp:2,fsdp:4,ep:2,tp:2,pp:2,cp:1; did you mean \"tp\"? "
           "[mesh.role-axis]");
  CHECK(render(diags.items()[1])
        == "--stage-axes: error: axis \"dp\" is given as a data axis and as "
           "a stage axis; an axis has one role; --data-axes names it too "
           "[mesh.role-twice]");
}
