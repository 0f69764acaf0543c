// The reader of user topology files (DESIGN.md 2.2, docs/topologies.md): the
// schema `shardplan topology show --format json` writes, either the topology
// object alone or the whole document. Keys the file omits come from its
// chip's catalogue family (include/shardplan/topology.hpp).

#include "io/json.hpp"

#include <shardplan/io.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/topology.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardplan {

namespace {

using io_detail::DomReader;
using io_detail::Json;
using Shape3 = std::array<int64_t, 3>;

class TopologyReader : public DomReader {
 public:
  TopologyReader(std::string_view text,
                 std::string_view source,
                 Diagnostics& diags)
      : DomReader(text, source, "topology", diags) {}

  std::optional<Topology> run() {
    std::optional<Json> doc = parse();
    if (!doc) {
      return std::nullopt;
    }
    std::string base;
    const Json* object = &*doc;
    if (doc->contains("topology")) {
      object = &doc->at("topology");
      base = "/topology";
      if (!object->is_object()) {
        type_error(*object, base, "a topology object");
        return std::nullopt;
      }
    }
    return read(*object, base);
  }

 private:
  bool get_int_into(const Json& j,
                    const std::string& pointer,
                    int64_t& out,
                    int64_t min) {
    std::optional<int64_t> v = get_int(j, pointer, min);
    out = v.value_or(out);
    return v.has_value();
  }

  bool get_shape(const Json& j, const std::string& pointer, Shape3& out) {
    constexpr std::string_view k_expected = "[x, y] or [x, y, z] chip counts";
    if (!j.is_array()) {
      return type_error(j, pointer, k_expected);
    }
    if (j.size() < 2 || j.size() > 3) {
      return bad_value(pointer,
                       fmt::format("expected {}, got {} entr{}",
                                   k_expected,
                                   j.size(),
                                   j.size() == 1 ? "y" : "ies"));
    }
    out = {1, 1, 1};
    for (size_t k = 0; k < j.size(); ++k) {
      if (!get_int_into(j[k], fmt::format("{}/{}", pointer, k), out[k], 1)) {
        return false;
      }
    }
    return true;
  }

  bool read_figures(const Json& j,
                    const std::string& pointer,
                    TopologyKind kind,
                    TopologyFigures& f) {
    if (!j.is_object()) {
      return type_error(j, pointer, "an object of figures");
    }
    const std::span<const FigureField> known = figure_fields();
    std::vector<std::string> names;
    for (const FigureField& k : known) {
      names.emplace_back(k.name);
    }
    for (const auto& [key, value] : j.items()) {
      const std::string at = json_pointer_child(pointer, key);
      // By projection, not a lambda: clang 14 (the fuzz build's compiler)
      // cannot capture a structured binding, a C++20 addition.
      auto it =
          std::ranges::find(known, std::string_view(key), &FigureField::name);
      if (it == known.end()) {
        return unknown_key(key, at, names);
      }
      if (it->kind && *it->kind != kind) {
        return bad_value(at,
                         fmt::format("figure {} is for {} topologies, not {}",
                                     quote(key),
                                     to_string(*it->kind),
                                     to_string(kind)));
      }
      // A number, or {"value": number, "source": "..."}.
      const Json* number = &value;
      std::string number_at = at;
      std::string source = fmt::format("{}: {}", m_source, at);
      if (value.is_object()) {
        if (!value.contains("value")) {
          return missing_key(at, "a figure object needs \"value\"");
        }
        for (const auto& [inner, ignored] : value.items()) {
          if (inner != "value" && inner != "source") {
            return unknown_key(
                inner, json_pointer_child(at, inner), {"value", "source"});
          }
        }
        number = &value.at("value");
        number_at = at + "/value";
        if (value.contains("source")) {
          const std::string* text =
              get_string(value.at("source"), at + "/source");
          if (text == nullptr) {
            return false;
          }
          source = *text;
        }
      }
      std::optional<double> v = read_figure(*number, number_at, *it);
      if (!v) {
        return false;
      }
      f.*(it->member) = Figure{*v, std::move(source)};
    }
    return true;
  }

  // A figure's number within its field's bounds. A latency may be 0; a
  // capacity, a bandwidth or a link count of 0 would make every estimate
  // divide by zero or nothing fit.
  std::optional<double> read_figure(const Json& number,
                                    const std::string& at,
                                    const FigureField& field) {
    const bool may_be_zero = field.name.ends_with("_latency_s");
    const std::string expected =
        fmt::format("a number {} and <= {:g}",
                    field.min > 0 ? fmt::format(">= {:g}", field.min)
                    : may_be_zero ? std::string(">= 0")
                                  : std::string("> 0"),
                    field.max);
    if (!number.is_number()) {
      type_error(number, at, expected);
      return std::nullopt;
    }
    const auto v = number.get<double>();
    const bool in_range = (may_be_zero ? v >= 0 : v > 0)  // false for NaN
                          && v >= field.min;
    if (!in_range || !(v <= field.max)) {
      bad_value(at, io_detail::expected_got(expected, describe(number)));
      return std::nullopt;
    }
    return v;
  }

  std::optional<Topology> read(const Json& j, const std::string& base) {
    const std::string families_hint =
        fmt::format("chips: {}", fmt::join(catalogue_families(), ", "));
    if (!j.contains("chip")) {
      missing_key(base,
                  "a topology file needs \"chip\": a catalogue family",
                  families_hint);
      return std::nullopt;
    }
    const std::string* chip =
        get_string(j.at("chip"), base + "/chip", "a chip family name");
    if (chip == nullptr) {
      return std::nullopt;
    }
    std::optional<ChipFamily> f = find_chip_family(*chip);
    if (!f) {
      std::string near = closest_match(*chip, catalogue_families());
      bad_value(
          base + "/chip",
          fmt::format("unknown chip {}", quote(*chip)),
          (near.empty() ? "" : fmt::format("did you mean {}? ", quote(near)))
              + families_hint);
      return std::nullopt;
    }
    Topology t;
    Shape3 shape{0, 0, 0};
    if (f->kind == TopologyKind::tpu) {
      if (!j.contains("shape")) {
        missing_key(
            base,
            fmt::format("a {} topology needs \"shape\": [x, y, z] in chips",
                        f->name));
        return std::nullopt;
      }
      if (!get_shape(j.at("shape"), base + "/shape", shape)) {
        return std::nullopt;
      }
      for (size_t k = 0; k < 3; ++k) {
        if (shape[k] > k_max_devices) {
          bad_value(
              fmt::format("{}/shape/{}", base, k),
              fmt::format("{} chips on one axis is more than the {} devices "
                          "shardplan handles",
                          shape[k],
                          k_max_devices));
          return std::nullopt;
        }
      }
      t = family_tpu_slice(f->name, shape);
    } else {
      if (!j.contains("devices")) {
        missing_key(
            base,
            fmt::format("a {} topology needs \"devices\": the GPU count",
                        f->name));
        return std::nullopt;
      }
      int64_t gpus = 0;
      if (!get_int_into(j.at("devices"), base + "/devices", gpus, 1)) {
        return std::nullopt;
      }
      if (gpus > k_max_devices) {
        bad_value(
            base + "/devices",
            fmt::format("{} GPUs is more than the {} devices shardplan handles",
                        gpus,
                        k_max_devices));
        return std::nullopt;
      }
      t = family_gpus(f->name, gpus);
    }
    t.source = m_source;
    t.name = fmt::format("{}:{}", f->name, m_source);
    if (!read_keys(j, base, *f, t)) {
      return std::nullopt;
    }
    if (!check_counts(j, base, *f, shape, t)) {
      return std::nullopt;
    }
    return t;
  }

  // The keys besides chip and shape (TPU) or devices (GPU).
  bool read_keys(const Json& j,
                 const std::string& base,
                 const ChipFamily& f,
                 Topology& t) {
    const bool tpu = f.kind == TopologyKind::tpu;
    m_declared_devices = -1;
    for (const auto& [key, value] : j.items()) {
      const std::string at = json_pointer_child(base, key);
      // Keys `topology show --format json` writes that follow from the
      // others are checked, not read.
      if (key == "chip" || (key == "shape" && tpu) || key == "chips"
          || key == "hosts" || key == "devices_per_host" || key == "source"
          || key == "links") {
        continue;
      }
      bool ok = true;
      if (key == "name") {
        const std::string* name = get_string(value, at, "a non-empty string");
        ok = name != nullptr;
        if (ok && name->empty()) {
          ok = bad_value(
              at,
              io_detail::expected_got("a non-empty string", describe(value)));
        }
        if (ok) {
          t.name = *name;
        }
      } else if (key == "kind") {
        if (!value.is_string()
            || value.get<std::string>() != to_string(f.kind)) {
          ok = bad_value(at,
                         fmt::format("{} is a {} chip; kind must be \"{}\"",
                                     f.name,
                                     to_string(f.kind),
                                     to_string(f.kind)));
        }
      } else if (key == "device_kind") {
        const std::string* kind = get_string(value, at);
        ok = kind != nullptr;
        if (ok) {
          t.device_kind = *kind;
        }
      } else if (key == "devices") {
        ok = get_int_into(value, at, m_declared_devices, 1);
      } else if (key == "slices" && tpu) {
        ok = get_int_into(value, at, t.tpu.num_slices, 1)
             && check_slices(at, f, t.tpu.num_slices);
      } else if (key == "devices_per_chip" && tpu) {
        ok = get_int_into(value, at, t.tpu.cores_per_chip, 1);
        if (ok && t.tpu.cores_per_chip > 8) {
          ok = bad_value(at,
                         fmt::format("{} devices per chip; TPUs have 1 or 2",
                                     t.tpu.cores_per_chip));
        }
      } else if (key == "host_bounds" && tpu) {
        ok = get_shape(value, at, t.tpu.host_bounds);
      } else if (key == "wraparound" && tpu) {
        ok = read_wraparound(value, at, t);
      } else if ((key == "gpus_per_host" || key == "nvlink_domain") && !tpu) {
        ok = get_int_into(
            value,
            at,
            key == "gpus_per_host" ? t.gpus_per_host : t.nvlink_domain,
            1);
      } else if (key == "hbm_bytes_per_device") {
        ok = read_hbm(value, at, t);
      } else if (key == "figures") {
        ok = read_figures(value, at, f.kind, t.figures);
      } else {
        const std::vector<std::string> known = known_keys(f.kind);
        ok = unknown_key(key,
                         at,
                         known,
                         fmt::format("a {} topology has the keys {}",
                                     to_string(f.kind),
                                     io_detail::list_keys(known)));
      }
      if (!ok) {
        return false;
      }
    }
    return true;
  }

  static std::vector<std::string> known_keys(TopologyKind kind) {
    std::vector<std::string> keys = {"name",
                                     "kind",
                                     "chip",
                                     "device_kind",
                                     "devices",
                                     "hbm_bytes_per_device",
                                     "figures"};
    if (kind == TopologyKind::tpu) {
      keys.insert(
          keys.end(),
          {"shape", "slices", "devices_per_chip", "host_bounds", "wraparound"});
    } else {
      keys.insert(keys.end(), {"gpus_per_host", "nvlink_domain"});
    }
    return keys;
  }

  bool check_slices(const std::string& at,
                    const ChipFamily& f,
                    int64_t slices) {
    if (slices > k_max_devices) {
      return bad_value(
          at,
          fmt::format("{} slices is more than the {} devices shardplan handles",
                      slices,
                      k_max_devices));
    }
    if (slices > 1 && !f.multislice) {
      return bad_value(
          at, fmt::format("TPU {} has no multi-slice (DCN) support", f.name));
    }
    return true;
  }

  bool read_wraparound(const Json& value, const std::string& at, Topology& t) {
    constexpr std::string_view k_expected =
        "[bool, bool, bool] per physical axis";
    if (!value.is_array()) {
      return type_error(value, at, k_expected);
    }
    if (value.empty() || value.size() > 3) {
      return bad_value(
          at,
          fmt::format("expected {}, got {} entries", k_expected, value.size()));
    }
    t.wraparound = {false, false, false};
    for (size_t k = 0; k < value.size(); ++k) {
      std::optional<bool> b = get_bool(value[k], fmt::format("{}/{}", at, k));
      if (!b) {
        return false;
      }
      t.wraparound[k] = *b;
    }
    return true;
  }

  bool read_hbm(const Json& value, const std::string& at, Topology& t) {
    const auto field =
        std::ranges::find(figure_fields(),
                          std::string_view("hbm_bytes_per_device"),
                          &FigureField::name);
    std::optional<double> v = read_figure(value, at, *field);
    if (!v) {
      return false;
    }
    if (*v != t.figures.hbm_bytes_per_device.value) {
      t.figures.hbm_bytes_per_device = {*v,
                                        fmt::format("{}: {}", m_source, at)};
    }
    return true;
  }

  // Whole hosts, 2D chips flat, the device count within bounds and equal to
  // a declared "devices".
  bool check_counts(const Json& j,
                    const std::string& base,
                    const ChipFamily& f,
                    const Shape3& shape,
                    const Topology& t) {
    if (f.kind == TopologyKind::tpu) {
      if (!whole_hosts(shape, t.tpu.host_bounds)) {
        return bad_value(
            base + (j.contains("host_bounds") ? "/host_bounds" : "/shape"),
            fmt::format(
                "a {}x{}x{} slice is not made of whole hosts of {}x{}x{} "
                "chips",
                shape[0],
                shape[1],
                shape[2],
                t.tpu.host_bounds[0],
                t.tpu.host_bounds[1],
                t.tpu.host_bounds[2]));
      }
      if (chip_info(t.tpu.chip).physical_mesh == TpuPhysicalMesh::xy_core
          && shape[2] != 1) {
        return bad_value(
            base + "/shape",
            fmt::format("TPU {} slices are 2D: z must be 1", f.name));
      }
    }
    // Each factor is at most k_max_devices (2^22) and there are at most
    // four, but their product can still pass 2^63: multiply with checks.
    std::optional<int64_t> devices = checked_product(
        f.kind == TopologyKind::gpu ? std::vector<int64_t>{t.gpus}
                                    : std::vector<int64_t>{shape[0],
                                                           shape[1],
                                                           shape[2],
                                                           t.tpu.cores_per_chip,
                                                           t.tpu.num_slices});
    if (!devices || *devices > k_max_devices) {
      return bad_value(
          base,
          fmt::format("the topology has more than the {} devices shardplan "
                      "handles",
                      k_max_devices));
    }
    if (m_declared_devices >= 0 && m_declared_devices != t.devices()) {
      return bad_value(
          base + "/devices",
          fmt::format("\"devices\" is {} but the topology has {} devices",
                      m_declared_devices,
                      t.devices()),
          f.kind == TopologyKind::tpu
              ? "devices = chips x devices_per_chip x slices"
              : "");
    }
    return true;
  }

  int64_t m_declared_devices = -1;  // the file's "devices", when it has one
};

}  // namespace

std::optional<Topology> read_topology_file(std::string_view text,
                                           std::string_view source,
                                           Diagnostics& diags) {
  return TopologyReader(text, source, diags).run();
}

}  // namespace shardplan
