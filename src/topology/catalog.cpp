// The topology catalogue (configs/topologies/*.json, compiled in), topology
// names (docs/topologies.md, "Names") and user topology files.

#include "embedded.hpp"

#include <shardplan/topology.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

namespace shardplan {

namespace {

using Json = nlohmann::json;
using Shape3 = std::array<int64_t, 3>;

// Which axes of a TPU slice close into a ring (a catalogue file's
// "wraparound": {"rule": ...}).
enum class WrapRule {
  full_cubes,  // "full-cubes": every axis, in whole 4x4x4 cubes (v4, v5p)
  axis_16,     // "axis-16": an axis of 16 chips (v5e, v6e)
  pod_axes,    // "pod-axes": an axis that spans the pod (v2, v3)
};

constexpr std::array<Named<WrapRule>, 3> k_wrap_rules{{
    {WrapRule::full_cubes, "full-cubes"},
    {WrapRule::axis_16, "axis-16"},
    {WrapRule::pod_axes, "pod-axes"},
}};

// GPU families in `topology list` order, after the TPU generations
// (tpu_chips()). A GPU's facts are all in its catalogue file; no code
// branches on one. A family missing here is listed last.
constexpr std::array<std::string_view, 5> k_gpu_families{
    "a100", "h100", "h200", "b200", "gb200"};

// One file of configs/topologies/: a chip family and its standard sizes.
struct Family {
  std::string name;
  TopologyKind kind = TopologyKind::tpu;
  std::string device_kind;
  std::vector<std::string> aliases;
  TopologyFigures figures;
  // TPU
  TpuChip chip = TpuChip::v4;
  bool counts_cores = true;  // "v5p-N" counts TensorCores, "v5e-N" chips
  int64_t tensorcores_per_chip = 1;
  int64_t devices_per_chip = 1;
  Shape3 host_bounds{2, 2, 1};
  int64_t single_host_chips = 4;  // slices this small are one host
  WrapRule wrap_rule = WrapRule::full_cubes;
  Shape3 pod_shape{0, 0, 0};
  Shape3 max_shape{0, 0, 0};
  bool two_d = false;  // v2, v3, v5e, v6e: shapes are AxB (is_2d)
  bool multislice = false;
  std::vector<Shape3> slices;
  // GPU
  int64_t gpus_per_host = 8;
  int64_t nvlink_domain = 8;
  std::vector<int64_t> standard_counts;

  // The number in "v5p-N": TensorCores or chips.
  int64_t name_count(const Shape3& shape) const {
    return shape[0] * shape[1] * shape[2]
           * (counts_cores ? tensorcores_per_chip : 1);
  }
};

// The catalogue files are ours: a malformed one is a bug, caught by the
// tests; it throws (exit 3), never reaches a user as an input error.
[[noreturn]] void bad_catalogue(const std::string& file,
                                const std::string& what) {
  throw std::logic_error(fmt::format("configs/topologies/{}: {}", file, what));
}

// Parses a positive decimal; nullopt on anything else (or above 2^31).
std::optional<int64_t> parse_count(std::string_view text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 1
      || v > (int64_t{1} << 31)) {
    return std::nullopt;
  }
  return v;
}

// "4x4x8" -> {4, 4, 8}, "16x16" -> {16, 16, 1}: exactly `dims` counts
// joined by 'x'; nullopt otherwise.
std::optional<Shape3> parse_chips(std::string_view text, size_t dims) {
  Shape3 shape{1, 1, 1};
  size_t k = 0;
  while (true) {
    size_t x = text.find('x');
    std::optional<int64_t> v = parse_count(text.substr(0, x));
    if (!v || k >= dims) {
      return std::nullopt;
    }
    shape[k++] = *v;
    if (x == std::string_view::npos) {
      break;
    }
    text = text.substr(x + 1);
  }
  return k == dims ? std::optional<Shape3>(shape) : std::nullopt;
}

TopologyFigures read_figures(const Json& figures) {
  TopologyFigures f;
  for (const FigureField& field : figure_fields()) {
    if (figures.contains(field.name)) {
      const Json& figure = figures.at(field.name);
      f.*field.member = Figure{figure.at("value").get<double>(),
                               figure.at("source").get<std::string>()};
    }
  }
  return f;
}

Shape3 read_shape3(const Json& j) {
  Shape3 s{1, 1, 1};
  for (size_t k = 0; k < j.size() && k < 3; ++k) {
    s[k] = j.at(k).get<int64_t>();
  }
  return s;
}

// The TPU half of a catalogue file, checked against the chip's row
// (tpu_chips()): the family names a generation, with its device_kind and
// its slices' dimensionality.
void parse_tpu(const std::string& file, const Json& j, Family& f) {
  const std::optional<TpuChip> chip = find_tpu_chip(f.name);
  if (!chip) {
    bad_catalogue(file, fmt::format("no TPU chip \"{}\"", f.name));
  }
  f.chip = *chip;
  const TpuChipInfo& row = chip_info(f.chip);
  if (f.device_kind != row.device_kind) {
    bad_catalogue(file,
                  fmt::format("device_kind \"{}\", but TPU {} reports \"{}\"",
                              f.device_kind,
                              f.name,
                              row.device_kind));
  }
  f.counts_cores = j.at("name_counts").get<std::string>() == "cores";
  f.tensorcores_per_chip = j.at("tensorcores_per_chip").get<int64_t>();
  f.devices_per_chip = j.at("devices_per_chip").get<int64_t>();
  f.host_bounds = read_shape3(j.at("host_bounds"));
  f.single_host_chips = j.at("single_host_chips").get<int64_t>();
  const Json& wrap = j.at("wraparound");
  const std::string rule = wrap.at("rule").get<std::string>();
  const std::optional<WrapRule> known = value_in(k_wrap_rules, rule);
  if (!known) {
    bad_catalogue(file, fmt::format("unknown wraparound rule \"{}\"", rule));
  }
  f.wrap_rule = *known;
  if (f.wrap_rule == WrapRule::pod_axes) {
    f.pod_shape = read_shape3(wrap.at("pod_shape"));
  }
  f.max_shape = read_shape3(j.at("max_shape"));
  f.multislice = j.at("multislice").get<bool>();
  f.two_d = row.torus_dims == 2;
  for (const Json& s : j.at("slices")) {
    const std::string text = s.get<std::string>();
    std::optional<Shape3> shape = parse_chips(text, f.two_d ? 2 : 3);
    if (!shape) {
      bad_catalogue(file, fmt::format("bad slice shape \"{}\"", text));
    }
    f.slices.push_back(*shape);
  }
}

// A family's measured GEMM rates: {"source", "dims": [...], "rates":
// [dims^3 FLOP/s, m-major]}.
MatmulCurve read_curve(const std::string& file, const Json& j) {
  MatmulCurve c;
  c.source = j.at("source").get<std::string>();
  c.dims = j.at("dims").get<std::vector<double>>();
  c.rates = j.at("rates").get<std::vector<double>>();
  const size_t d = c.dims.size();
  if (d < 2 || c.rates.size() != d * d * d
      || !std::is_sorted(c.dims.begin(), c.dims.end())
      || std::ranges::any_of(c.rates, [](double r) { return !(r > 0); })) {
    bad_catalogue(file, "bad matmul_curve: dims ascending, dims^3 rates > 0");
  }
  return c;
}

// A family's grouped GEMM rates: {"source", "tokens_per_expert": [...],
// "fractions": [of the matmul curve's best, one a point]}.
GroupedCurve read_grouped(const std::string& file, const Json& j) {
  GroupedCurve c;
  c.source = j.at("source").get<std::string>();
  c.tokens = j.at("tokens_per_expert").get<std::vector<double>>();
  c.fractions = j.at("fractions").get<std::vector<double>>();
  if (c.tokens.size() < 2 || c.fractions.size() != c.tokens.size()
      || !std::is_sorted(c.tokens.begin(), c.tokens.end())
      || std::ranges::any_of(c.tokens, [](double t) { return !(t > 0); })
      || std::ranges::any_of(c.fractions,
                             [](double r) { return !(r > 0 && r <= 1); })) {
    bad_catalogue(file,
                  "bad grouped_matmul_curve: tokens ascending > 0, one "
                  "fraction in (0, 1] each");
  }
  return c;
}

Family parse_family(const embedded::EmbeddedFile& file) {
  const std::string name(file.name);
  Family f;
  try {
    Json j = Json::parse(file.text);
    f.name = j.at("family").get<std::string>();
    f.device_kind = j.at("device_kind").get<std::string>();
    f.figures = read_figures(j.at("figures"));
    if (j.contains("matmul_curve")) {
      f.figures.matmul_curve = read_curve(name, j.at("matmul_curve"));
    }
    if (j.contains("grouped_matmul_curve")) {
      f.figures.grouped_curve =
          read_grouped(name, j.at("grouped_matmul_curve"));
    }
    if (j.contains("aliases")) {
      f.aliases = j.at("aliases").get<std::vector<std::string>>();
    }
    const std::string kind = j.at("kind").get<std::string>();
    if (kind == "gpu") {
      f.kind = TopologyKind::gpu;
      f.gpus_per_host = j.at("gpus_per_host").get<int64_t>();
      f.nvlink_domain = j.at("nvlink_domain").get<int64_t>();
      f.standard_counts = j.at("standard_counts").get<std::vector<int64_t>>();
      return f;
    }
    if (kind != "tpu") {
      bad_catalogue(name, fmt::format("unknown kind \"{}\"", kind));
    }
    f.kind = TopologyKind::tpu;
    parse_tpu(name, j, f);
  } catch (const Json::exception& e) {
    bad_catalogue(name, e.what());
  }
  return f;
}

// A family's place in `topology list`: the TPU generations in tpu_chips()
// order, then the GPUs in k_gpu_families order.
size_t list_rank(const Family& f) {
  if (f.kind == TopologyKind::tpu) {
    return static_cast<size_t>(f.chip);
  }
  const auto* it =
      std::find(k_gpu_families.begin(), k_gpu_families.end(), f.name);
  return tpu_chips().size() + static_cast<size_t>(it - k_gpu_families.begin());
}

const std::vector<Family>& families() {
  static const std::vector<Family> all = [] {
    std::vector<Family> out;
    for (const embedded::EmbeddedFile& file : embedded::topology_files()) {
      out.push_back(parse_family(file));
    }
    // TPUs first, by generation, then GPUs, as `topology list` shows them.
    std::stable_sort(
        out.begin(), out.end(), [&](const Family& a, const Family& b) {
          return list_rank(a) < list_rank(b);
        });
    return out;
  }();
  return all;
}

const Family* find_family(std::string_view name) {
  for (const Family& f : families()) {
    if (f.name == name
        || std::find(f.aliases.begin(), f.aliases.end(), name)
               != f.aliases.end()) {
      return &f;
    }
  }
  return nullptr;
}

std::array<bool, 3> wraparound_for(const Family& f, const Shape3& shape) {
  std::array<bool, 3> wrap{false, false, false};
  switch (f.wrap_rule) {
    case WrapRule::full_cubes: {
      // v4/v5p: tori only in whole 4x4x4 cubes
      // (docs/sources.md#tpu-wraparound: 4x4x8 wraps on every axis, 2x2x4 on
      // none).
      const bool cubes =
          shape[0] % 4 == 0 && shape[1] % 4 == 0 && shape[2] % 4 == 0;
      wrap = {cubes, cubes, cubes};
      break;
    }
    case WrapRule::axis_16:
      // v5e/v6e: only an axis of 16 chips closes (8x16 wraps on the 16).
      for (size_t k = 0; k < 3; ++k) {
        wrap[k] = shape[k] == 16;
      }
      break;
    case WrapRule::pod_axes:
      // v2/v3: the pod's 2D torus; an axis wraps when it spans the pod.
      for (size_t k = 0; k < 3; ++k) {
        wrap[k] = shape[k] > 2 && shape[k] == f.pod_shape[k];
      }
      break;
  }
  return wrap;
}

std::string shape_text(const Shape3& shape, bool two_d) {
  if (two_d) {
    return fmt::format("{}x{}", shape[0], shape[1]);
  }
  return fmt::format("{}x{}x{}", shape[0], shape[1], shape[2]);
}

std::string standard_name(const Family& f, const Shape3& shape) {
  return fmt::format("{}-{}", f.name, f.name_count(shape));
}

Topology make_tpu(const Family& f,
                  const Shape3& shape,
                  int64_t slices,
                  std::string name) {
  Topology t;
  t.name = std::move(name);
  t.kind = TopologyKind::tpu;
  t.chip = f.name;
  t.device_kind = f.device_kind;
  t.source = "catalogue";
  t.tpu.chip = f.chip;
  t.tpu.chips = shape;
  t.tpu.cores_per_chip = f.devices_per_chip;
  const int64_t chips = shape[0] * shape[1] * shape[2];
  t.tpu.host_bounds = chips <= f.single_host_chips ? shape : f.host_bounds;
  t.tpu.num_slices = slices;
  t.wraparound = wraparound_for(f, shape);
  t.figures = f.figures;
  return t;
}

Topology make_gpu(const Family& f, int64_t gpus, std::string name) {
  Topology t;
  t.name = std::move(name);
  t.kind = TopologyKind::gpu;
  t.chip = f.name;
  t.device_kind = f.device_kind;
  t.source = "catalogue";
  t.gpus = gpus;
  t.gpus_per_host = f.gpus_per_host;
  t.nvlink_domain = f.nvlink_domain;
  t.figures = f.figures;
  return t;
}

std::vector<std::string> catalogue_names() {
  std::vector<std::string> names;
  for (const Topology& t : catalogue_topologies()) {
    names.push_back(t.name);
  }
  return names;
}

// The hint of an unknown topology: the TPU names of the catalogue, those
// that count TensorCores and those that count chips, in generation order
// ("v2-N, ..., tpu7x-N (N TensorCores), v5e-N, v6e-N (N chips)").
std::string name_hint() {
  std::vector<std::string> cores;
  std::vector<std::string> chips;
  for (const Family& f : families()) {
    if (f.kind == TopologyKind::tpu) {
      (f.counts_cores ? cores : chips).push_back(f.name + "-N");
    }
  }
  return fmt::format(
      "topology names: {} (N TensorCores), {} (N chips), an explicit shape "
      "like v5p:4x4x8, Kx in front for K slices (2xv5p-256), and GPUs like "
      "h100x64, a100x8, h200x16, b200x64, gb200x72; `shardplan topology "
      "list` shows the catalogue",
      fmt::join(cores, ", "),
      fmt::join(chips, ", "));
}

// The TPU generations that join slices over DCN: "v4, v5e, v5p, v6e and
// tpu7x".
std::string multislice_families() {
  std::vector<std::string> names;
  for (const Family& f : families()) {
    if (f.kind == TopologyKind::tpu && f.multislice) {
      names.push_back(f.name);
    }
  }
  if (names.size() < 2) {
    return names.empty() ? "" : names.front();
  }
  const std::string last = names.back();
  names.pop_back();
  return fmt::format("{} and {}", fmt::join(names, ", "), last);
}

class NameResolver {
 public:
  NameResolver(std::string_view name, const Location& where, Diagnostics& diags)
      : m_original(name), m_where(where), m_diags(diags) {}

  std::optional<Topology> run() {
    std::string name = to_lower(m_original);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) {
      name.pop_back();
    }
    size_t first = name.find_first_not_of(" \t");
    name = first == std::string::npos ? "" : name.substr(first);

    // "2xv5p-256": a count, 'x', then a name that starts with a letter.
    int64_t slices = 1;
    bool sliced = false;
    size_t digits = 0;
    while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') {
      ++digits;
    }
    if (digits > 0 && digits + 1 < name.size() && name[digits] == 'x'
        && name[digits + 1] >= 'a' && name[digits + 1] <= 'z') {
      std::optional<int64_t> k =
          parse_count(std::string_view(name).substr(0, digits));
      if (!k) {
        return fail(
            "topology.slices",
            fmt::format("bad slice count in topology {}", quote(m_original)),
            "the slice count is a positive integer: 2xv5p-256");
      }
      slices = *k;
      sliced = true;
      name = name.substr(digits + 1);
    }

    if (size_t colon = name.find(':'); colon != std::string::npos) {
      return explicit_shape(
          name.substr(0, colon), name.substr(colon + 1), slices);
    }
    if (size_t dash = name.rfind('-'); dash != std::string::npos) {
      if (const Family* f = find_family(name.substr(0, dash));
          f != nullptr && f->kind == TopologyKind::tpu) {
        return counted_tpu(*f, name.substr(dash + 1), slices);
      }
    }
    for (const Family& f : families()) {
      if (f.kind == TopologyKind::gpu && name.size() > f.name.size() + 1
          && name.starts_with(f.name) && name[f.name.size()] == 'x') {
        if (sliced) {
          return fail("topology.slices",
                      fmt::format("{}: slices are a TPU notion; a GPU topology "
                                  "is a GPU count like {}x64",
                                  quote(m_original),
                                  f.name),
                      "");
        }
        return counted_gpu(f, name.substr(f.name.size() + 1));
      }
    }
    return unknown(name);
  }

 private:
  std::optional<Topology> fail(std::string code,
                               std::string message,
                               std::string hint) {
    Diagnostic& d = m_diags.error(std::move(code), std::move(message), m_where);
    d.hint = std::move(hint);
    return std::nullopt;
  }

  std::optional<Topology> unknown(const std::string& name) {
    std::vector<std::string> candidates = catalogue_names();
    for (const Family& f : families()) {
      candidates.push_back(f.name);
    }
    // Every candidate as close as the closest one (v5x-128: v5e-128, v5p-128).
    std::string hint;
    if (std::string best = closest_match(name, candidates); !best.empty()) {
      const size_t distance = edit_distance(name, best);
      std::vector<std::string> near;
      for (const std::string& c : candidates) {
        if (near.size() < 3 && edit_distance(name, c) == distance) {
          near.push_back(quote(c));
        }
      }
      hint = fmt::format("did you mean {}? ", fmt::join(near, " or "));
    }
    return fail("topology.unknown",
                fmt::format("unknown topology {}", quote(m_original)),
                hint + name_hint());
  }

  bool check_slices(const Family& f, int64_t slices) {
    if (slices > 1 && !f.multislice) {
      fail("topology.slices",
           fmt::format("{}: TPU {} has no multi-slice (DCN) support",
                       quote(m_original),
                       f.name),
           "multi-slice training runs on " + multislice_families());
      return false;
    }
    return true;
  }

  // K slices of a shape stay within k_max_devices (the count is at most 2^31
  // and a slice at most 16x24x24x2, so the product fits in int64).
  bool within_cap(const Shape3& shape,
                  int64_t devices_per_chip,
                  int64_t slices) {
    return within_cap(shape[0] * shape[1] * shape[2] * devices_per_chip
                      * slices);
  }

  // Every topology, TPU or GPU, has at most k_max_devices devices, as every
  // mesh has (mesh.hpp).
  bool within_cap(int64_t devices) {
    if (devices > k_max_devices) {
      fail("topology.size",
           fmt::format("{} has {} devices, more than the {} shardplan handles",
                       quote(m_original),
                       devices,
                       k_max_devices),
           "");
      return false;
    }
    return true;
  }

  std::optional<Topology> counted_tpu(const Family& f,
                                      std::string_view count_text,
                                      int64_t slices) {
    if (!check_slices(f, slices)) {
      return std::nullopt;
    }
    std::optional<int64_t> count = parse_count(count_text);
    const std::string unit = f.counts_cores ? "TensorCores" : "chips";
    if (!count) {
      return fail(
          "topology.size",
          fmt::format("bad size {} in topology {}: expected the number of "
                      "{}",
                      quote(count_text),
                      quote(m_original),
                      unit),
          fmt::format("for example {}", standard_name(f, f.slices[1])));
    }
    for (const Shape3& shape : f.slices) {
      if (f.name_count(shape) == *count) {
        if (!within_cap(shape, f.devices_per_chip, slices)) {
          return std::nullopt;
        }
        std::string name = standard_name(f, shape);
        if (slices > 1) {
          name = fmt::format("{}x{}", slices, name);
        }
        return make_tpu(f, shape, slices, std::move(name));
      }
    }
    // The standard sizes just below and above, with their shapes.
    std::vector<std::string> near;
    for (size_t i = 0; i < f.slices.size(); ++i) {
      const int64_t n = f.name_count(f.slices[i]);
      const bool below = n < *count
                         && (i + 1 == f.slices.size()
                             || f.name_count(f.slices[i + 1]) > *count);
      const bool above =
          n > *count && (i == 0 || f.name_count(f.slices[i - 1]) < *count);
      if (below || above) {
        near.push_back(fmt::format("{} ({})",
                                   standard_name(f, f.slices[i]),
                                   shape_text(f.slices[i], f.two_d)));
      }
    }
    std::string message =
        fmt::format("{}-{} is not a standard {} slice ({}-N counts {}",
                    f.name,
                    *count,
                    f.name,
                    f.name,
                    unit);
    if (f.counts_cores && f.tensorcores_per_chip > 1) {
      message += fmt::format(", {} per chip", f.tensorcores_per_chip);
    }
    message += ")";
    return fail("topology.size",
                std::move(message),
                fmt::format("nearest: {}; any other shape is {}:{}",
                            fmt::join(near, ", "),
                            f.name,
                            f.two_d ? "AxB" : "XxYxZ"));
  }

  std::optional<Topology> explicit_shape(const std::string& family_name,
                                         std::string_view text,
                                         int64_t slices) {
    const Family* f = find_family(family_name);
    if (f == nullptr || f->kind != TopologyKind::tpu) {
      return unknown(family_name);
    }
    if (!check_slices(*f, slices)) {
      return std::nullopt;
    }
    const std::string expected =
        f->two_d ? "AxB chips (x, y)"
                 : "XxYxZ chips (x, y, z; 2D shapes AxB mean z = 1)";
    std::optional<Shape3> parsed = parse_chips(text, f->two_d ? 2 : 3);
    if (!parsed) {
      return fail("topology.shape",
                  fmt::format("bad shape {} in topology {}: expected {}",
                              quote(text),
                              quote(m_original),
                              expected),
                  "");
    }
    const Shape3 shape = *parsed;
    for (size_t i = 0; i < 3; ++i) {
      if (shape[i] > f->max_shape[i]) {
        return fail("topology.shape",
                    fmt::format("{}: axis {} has {} chips; {} slices reach {}",
                                quote(m_original),
                                "xyz"[i],
                                shape[i],
                                f -> name,
                                shape_text(f->max_shape, f->two_d)),
                    "");
      }
    }
    if (!within_cap(shape, f->devices_per_chip, slices)) {
      return std::nullopt;
    }
    Topology t = make_tpu(*f, shape, slices, "");
    if (!whole_hosts(shape, t.tpu.host_bounds)) {
      return fail(
          "topology.shape",
          fmt::format("{}: a {} slice of {} is not made of whole hosts of {} "
                      "chips",
                      quote(m_original),
                      shape_text(shape, f->two_d),
                      f->name,
                      shape_text(f->host_bounds, f->two_d)),
          "");
    }
    t.name = fmt::format("{}:{}", f->name, shape_text(shape, f->two_d));
    if (slices > 1) {
      t.name = fmt::format("{}x{}", slices, t.name);
    }
    return t;
  }

  std::optional<Topology> counted_gpu(const Family& f,
                                      std::string_view count_text) {
    std::optional<int64_t> count = parse_count(count_text);
    if (!count) {
      return fail("topology.size",
                  fmt::format("bad GPU count {} in topology {}",
                              quote(count_text),
                              quote(m_original)),
                  fmt::format("for example {}x64", f.name));
    }
    if (!within_cap(*count)) {
      return std::nullopt;
    }
    // Whole hosts, and NVLink domains filled before the next one starts.
    const int64_t unit =
        *count > f.nvlink_domain ? f.nvlink_domain : f.gpus_per_host;
    if (*count > f.gpus_per_host && *count % unit != 0) {
      // The whole counts either side, those within the cap.
      const int64_t below = *count / unit * unit;
      const int64_t above = below + unit;
      std::string nearest = fmt::format("{}x{}", f.name, below);
      if (above <= k_max_devices) {
        nearest += fmt::format(", {}x{}", f.name, above);
      }
      return fail(
          "topology.size",
          fmt::format("{}x{} is not a whole number of {}: {} GPUs per {}",
                      f.name,
                      *count,
                      unit == f.nvlink_domain && unit != f.gpus_per_host
                          ? "NVLink domains"
                          : "nodes",
                      unit,
                      unit == f.nvlink_domain && unit != f.gpus_per_host
                          ? "NVL72 domain"
                          : "node"),
          "nearest: " + nearest);
    }
    return make_gpu(f, *count, fmt::format("{}x{}", f.name, *count));
  }

  std::string m_original;
  Location m_where;
  Diagnostics& m_diags;
};

}  // namespace

std::span<const FigureField> figure_fields() {
  using F = TopologyFigures;
  constexpr auto tpu = TopologyKind::tpu;
  constexpr auto gpu = TopologyKind::gpu;
  // 1 PB of HBM, 1 PB/s per link or chip, 1024 links, 1 s of latency:
  // each about 1000x any device made, and all exact in int64 and double.
  constexpr double pb = 1e15;
  constexpr double pb_per_s = 1e15;
  static const std::array<FigureField, 23> fields = {{
      {"hbm_bytes_per_device", &F::hbm_bytes_per_device, std::nullopt, pb, 1},
      {"ici_bytes_per_s_per_link", &F::ici_bytes_per_s_per_link, tpu, pb_per_s},
      {"ici_links_per_chip", &F::ici_links_per_chip, tpu, 1024, 1},
      {"ici_latency_s", &F::ici_latency_s, tpu, 1},
      {"dcn_bytes_per_s_per_chip", &F::dcn_bytes_per_s_per_chip, tpu, pb_per_s},
      {"dcn_latency_s", &F::dcn_latency_s, tpu, 1},
      {"nvlink_bytes_per_s_per_gpu",
       &F::nvlink_bytes_per_s_per_gpu,
       gpu,
       pb_per_s},
      {"nvlink_latency_s", &F::nvlink_latency_s, gpu, 1},
      {"nvlink_collective_bytes_per_s_per_gpu",
       &F::nvlink_collective_bytes_per_s_per_gpu,
       gpu,
       pb_per_s},
      {"network_bytes_per_s_per_gpu",
       &F::network_bytes_per_s_per_gpu,
       gpu,
       pb_per_s},
      {"network_latency_s", &F::network_latency_s, gpu, 1},
      // 1e18 FLOP/s: about 400x the fastest device.
      {"bf16_flops_per_s_per_device",
       &F::bf16_flops_per_s_per_device,
       std::nullopt,
       1e18},
      {"hbm_bytes_per_s_per_device",
       &F::hbm_bytes_per_s_per_device,
       std::nullopt,
       pb_per_s},
      {"fp8_flops_per_s_per_device",
       &F::fp8_flops_per_s_per_device,
       std::nullopt,
       1e18},
      {"host_memory_bytes_per_chip",
       &F::host_memory_bytes_per_chip,
       std::nullopt,
       pb,
       1},
      {"host_bytes_per_s_per_chip",
       &F::host_bytes_per_s_per_chip,
       std::nullopt,
       pb_per_s},
      // Fractions of the peak.
      {"matmul_efficiency", &F::matmul_efficiency, std::nullopt, 1},
      {"attention_efficiency", &F::attention_efficiency, std::nullopt, 1},
      {"xla_attention_efficiency",
       &F::xla_attention_efficiency,
       std::nullopt,
       1},
      {"memory_efficiency", &F::memory_efficiency, std::nullopt, 1},
      {"eager_memory_efficiency", &F::eager_memory_efficiency, std::nullopt, 1},
      {"fp8_efficiency_ratio", &F::fp8_efficiency_ratio, std::nullopt, 1},
      {"efficiency_spread", &F::efficiency_spread, std::nullopt, 1},
  }};
  return fields;
}

std::string_view to_string(TopologyKind kind) {
  return kind == TopologyKind::tpu ? "tpu" : "gpu";
}

int64_t Topology::chips() const {
  if (kind == TopologyKind::gpu) {
    return gpus;
  }
  return tpu.chips[0] * tpu.chips[1] * tpu.chips[2] * tpu.num_slices;
}

int64_t Topology::devices() const {
  if (kind == TopologyKind::gpu) {
    return gpus;
  }
  return chips() * tpu.cores_per_chip;
}

int64_t Topology::devices_per_host() const {
  if (kind == TopologyKind::gpu) {
    return std::min(gpus, gpus_per_host);
  }
  int64_t chips_per_host = 1;
  for (size_t k = 0; k < 3; ++k) {
    chips_per_host *= std::min(tpu.host_bounds[k], tpu.chips[k]);
  }
  return chips_per_host * tpu.cores_per_chip;
}

int64_t Topology::num_hosts() const {
  return devices() / devices_per_host();
}

std::optional<Topology> resolve_topology(std::string_view name,
                                         const Location& where,
                                         Diagnostics& diags) {
  return NameResolver(name, where, diags).run();
}

std::optional<ChipFamily> find_chip_family(std::string_view name) {
  const Family* f = find_family(name);
  if (f == nullptr) {
    return std::nullopt;
  }
  return ChipFamily{f->name, f->kind, f->multislice};
}

Topology family_tpu_slice(std::string_view family, const Shape3& chips) {
  const Family* f = find_family(family);
  assert(f != nullptr && f->kind == TopologyKind::tpu);
  return make_tpu(*f, chips, 1, "");
}

Topology family_gpus(std::string_view family, int64_t gpus) {
  const Family* f = find_family(family);
  assert(f != nullptr && f->kind == TopologyKind::gpu);
  return make_gpu(*f, gpus, "");
}

bool whole_hosts(const Shape3& chips, const Shape3& host_bounds) {
  for (size_t k = 0; k < 3; ++k) {
    if (chips[k] % std::min(host_bounds[k], chips[k]) != 0) {
      return false;
    }
  }
  return true;
}

std::vector<Topology> catalogue_topologies() {
  std::vector<Topology> out;
  for (const Family& f : families()) {
    if (f.kind == TopologyKind::tpu) {
      for (const Shape3& shape : f.slices) {
        out.push_back(make_tpu(f, shape, 1, standard_name(f, shape)));
      }
    } else {
      for (int64_t count : f.standard_counts) {
        out.push_back(make_gpu(f, count, fmt::format("{}x{}", f.name, count)));
      }
    }
  }
  return out;
}

std::vector<Topology> catalogue_slices_like(const Topology& topology) {
  std::vector<Topology> out;
  const Family* f = find_family(topology.chip);
  if (f == nullptr || f->kind != topology.kind) {
    return out;
  }
  if (f->kind == TopologyKind::gpu) {
    for (int64_t count : f->standard_counts) {
      out.push_back(make_gpu(*f, count, fmt::format("{}x{}", f->name, count)));
    }
    return out;
  }
  const int64_t slices = topology.tpu.num_slices;
  for (const Shape3& shape : f->slices) {
    // A slice is at most 16x24x24 chips of 2 devices, so the product fits.
    if (shape[0] * shape[1] * shape[2] * f->devices_per_chip * slices
        > k_max_devices) {
      break;  // the slices grow
    }
    std::string name = standard_name(*f, shape);
    if (slices > 1) {
      name = fmt::format("{}x{}", slices, name);
    }
    out.push_back(make_tpu(*f, shape, slices, std::move(name)));
  }
  return out;
}

std::vector<std::string> catalogue_families() {
  std::vector<std::string> names;
  for (const Family& f : families()) {
    names.push_back(f.name);
  }
  return names;
}

}  // namespace shardplan
