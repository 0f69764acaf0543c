// `--format jax` (DESIGN.md 10; docs/paste-back.md): a Python module that
// builds the mesh a plan assumed, in the device order shardplan computed,
// and maps a params pytree to the plan's NamedShardings. It imports jax
// only (numpy never: the device order is JAX's own calls').

#include "report/renderers.hpp"
#include "report/text.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan::report_detail {

namespace {

// At most this many device ids are written for check_device_order (the
// largest TPU pods have 9,216 chips).
constexpr int64_t k_max_listed_devices = 16384;

// A Python string literal of `text`, in double quotes: backslash, quote
// and control bytes escaped; UTF-8 kept as is (the file is UTF-8); a byte
// that is not UTF-8 becomes \xNN (the name then differs: Python names are
// text).
std::string py_str(std::string_view text) {
  std::string out = "\"";
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else {
      // A UTF-8 sequence: its length from the lead byte, each continuation
      // byte 10xxxxxx.
      const size_t length = (c & 0xE0U) == 0xC0U   ? 2
                            : (c & 0xF0U) == 0xE0U ? 3
                            : (c & 0xF8U) == 0xF0U ? 4
                                                   : 0;
      bool valid = length > 0 && i + length <= text.size();
      for (size_t k = 1; valid && k < length; ++k) {
        valid = (static_cast<unsigned char>(text[i + k]) & 0xC0U) == 0x80U;
      }
      if (valid) {
        out += text.substr(i, length);
        i += length;
      } else {
        out += fmt::format("\\x{:02x}", c);
        ++i;
      }
    }
  }
  return out + "\"";
}

// "(16, 4)", "(8,)", "()".
std::string py_tuple(const std::vector<std::string>& items) {
  if (items.size() == 1) {
    return "(" + items[0] + ",)";
  }
  return fmt::format("({})", fmt::join(items, ", "));
}

std::string py_ints(const std::vector<int64_t>& values) {
  std::vector<std::string> items;
  items.reserve(values.size());
  for (int64_t v : values) {
    items.push_back(std::to_string(v));
  }
  return py_tuple(items);
}

std::string_view axis_type_name(AxisType type) {
  switch (type) {
    case AxisType::automatic:
      return "AxisType.Auto";
    case AxisType::explicit_:
      return "AxisType.Explicit";
    case AxisType::manual:
      return "AxisType.Manual";
  }
  return "AxisType.Auto";
}

// "model.layers.{0..31}.mlp.up_proj.weight" (fold_row_refs's form) as a
// format pattern and the Python of each set: ("model.layers.{}.mlp...",
// {"range(0, 32)"}). A set with gaps is a list of ranges and numbers:
// [*range(0, 3), 5, *range(7, 10)].
struct Pattern {
  std::string format;
  std::vector<std::string> sets;
};

Pattern pattern_of(std::string_view folded) {
  Pattern out;
  size_t i = 0;
  while (i < folded.size()) {
    if (folded[i] != '{') {
      out.format += folded[i];
      ++i;
      continue;
    }
    const size_t end = folded.find('}', i);
    const std::string_view body = folded.substr(i + 1, end - i - 1);
    std::vector<std::string> parts;
    size_t start = 0;
    while (start <= body.size()) {
      size_t comma = body.find(',', start);
      comma = comma == std::string_view::npos ? body.size() : comma;
      const std::string_view run = body.substr(start, comma - start);
      const size_t dots = run.find("..");
      if (dots == std::string_view::npos) {
        parts.emplace_back(run);
      } else {
        const int64_t last = std::stoll(std::string(run.substr(dots + 2)));
        parts.push_back(
            fmt::format("range({}, {})", run.substr(0, dots), last + 1));
      }
      start = comma + 1;
    }
    if (parts.size() == 1 && parts[0].starts_with("range(")) {
      out.sets.push_back(parts[0]);
    } else {
      for (std::string& p : parts) {
        if (p.starts_with("range(")) {
          p.insert(0, 1, '*');
        }
      }
      out.sets.push_back(fmt::format("[{}]", fmt::join(parts, ", ")));
    }
    out.format += "{}";
    i = end + 1;
  }
  return out;
}

// How JAX builds the mesh in shardplan's device order.
enum class MeshCall { make_mesh, create_device_mesh, hybrid };

MeshCall mesh_call(const Mesh& mesh,
                   const Topology* topology,
                   bool allow_split) {
  if (topology == nullptr || topology->kind == TopologyKind::gpu) {
    return MeshCall::make_mesh;  // GPUs: ids sorted, reshaped (b1, step 4)
  }
  if (mesh.num_slices() > 1) {
    return MeshCall::hybrid;  // make_mesh refuses several slices (b7)
  }
  // make_mesh passes allow_split_physical_axes=True on v5e only (b7);
  // without a split the result is the same either way (b1, step 3).
  const bool v5e = topology->device_kind == "TPU v5 lite"
                   || topology->device_kind == "TPU v5e";
  return allow_split && !v5e ? MeshCall::create_device_mesh
                             : MeshCall::make_mesh;
}

// The header, the imports and the mesh: shared by every document.
std::string mesh_module(const Mesh& mesh,
                        const Topology* topology,
                        const MeshLayout* layout,
                        const Provenance* provenance,
                        std::string_view what) {
  const bool allow_split =
      provenance != nullptr && provenance->allow_split_physical_axes;
  const MeshCall call = mesh_call(mesh, topology, allow_split);
  std::string out;
  out += fmt::format(
      "# {}, written by shardplan {}.\n", what, shardplan_version());
  if (provenance != nullptr && !provenance->command_line.empty()) {
    out += fmt::format("# Command: {}\n", provenance->command_line);
  }
  if (provenance != nullptr && !provenance->note.empty()) {
    out += fmt::format("# {}\n", provenance->note);
  }
  out += fmt::format("# Topology: {}\n",
                     topology != nullptr
                         ? topology_summary(*topology)
                         : fmt::format("none ({} devices in the order JAX "
                                       "gives them on the hardware it runs "
                                       "on)",
                                       mesh.num_devices()));
  out += fmt::format("# Mesh: {}\n", to_string(mesh));
  out += "# Re-run the command to update this file.\n\n";
  out += "import jax\n";
  if (call != MeshCall::make_mesh) {
    out += "from jax.experimental import mesh_utils\n";
  }
  out += fmt::format(
      "from jax.sharding import AxisType, {}NamedSharding\n"
      "from jax.sharding import PartitionSpec as P\n\n",
      call == MeshCall::make_mesh ? "" : "Mesh, ");

  std::vector<std::string> names;
  std::vector<std::string> types;
  for (const MeshAxis& axis : mesh.axes) {
    names.push_back(py_str(axis.name));
    types.emplace_back(axis_type_name(axis.type));
  }
  out += fmt::format("MESH_SHAPE = {}\n", py_ints(mesh.shape()));
  out += fmt::format("MESH_AXES = {}\n", py_tuple(names));
  out += fmt::format("AXIS_TYPES = {}\n", py_tuple(types));
  if (call == MeshCall::hybrid) {
    out += fmt::format("ICI_SHAPE = {}\n", py_ints(mesh.ici_shape()));
    out += fmt::format("DCN_SHAPE = {}\n", py_ints(mesh.dcn_shape()));
  }
  const bool listed = layout != nullptr && topology != nullptr
                      && mesh.num_devices() <= k_max_listed_devices;
  if (listed) {
    // Sixteen ids a line.
    out +=
        "# Device ids in mesh order (row-major), as shardplan laid them "
        "out.\nDEVICE_IDS = (";
    const std::vector<int64_t>& ids = layout->grid.ids;
    for (size_t i = 0; i < ids.size(); ++i) {
      out += i % 16 == 0 ? "\n    " : " ";
      out += fmt::format("{},", ids[i]);
    }
    out += "\n)\n";
  }
  out += "\n\ndef make_mesh(devices=None):\n";
  switch (call) {
    case MeshCall::make_mesh:
      out += fmt::format(
          "    \"\"\"The plan's mesh: jax.make_mesh{}.\"\"\"\n"
          "    return jax.make_mesh(MESH_SHAPE, MESH_AXES, "
          "axis_types=AXIS_TYPES,\n"
          "                         devices=devices)\n",
          topology != nullptr && topology->kind == TopologyKind::tpu
              ? " lays it out as shardplan did"
              : "");
      break;
    case MeshCall::create_device_mesh:
      out +=
          "    \"\"\"The plan's mesh, an axis split over physical ones "
          "(make_mesh\n"
          "    would not split them on this TPU).\"\"\"\n"
          "    device_array = mesh_utils.create_device_mesh(\n"
          "        MESH_SHAPE, jax.devices() if devices is None else "
          "devices,\n"
          "        allow_split_physical_axes=True)\n"
          "    return Mesh(device_array, MESH_AXES, axis_types=AXIS_TYPES)\n";
      break;
    case MeshCall::hybrid:
      out += fmt::format(
          "    \"\"\"The plan's mesh over {} slices (make_mesh refuses "
          "several).\"\"\"\n"
          "    device_array = mesh_utils.create_hybrid_device_mesh(\n"
          "        ICI_SHAPE, DCN_SHAPE,\n"
          "        jax.devices() if devices is None else devices,\n"
          "        allow_split_physical_axes={})\n"
          "    return Mesh(device_array, MESH_AXES, axis_types=AXIS_TYPES)\n",
          mesh.num_slices(),
          allow_split ? "True" : "False");
      break;
  }
  if (listed) {
    out +=
        "\n\ndef check_device_order(mesh):\n"
        "    \"\"\"Raises unless `mesh` holds the devices in the order the "
        "plan assumed.\"\"\"\n"
        "    ids = tuple(d.id for d in mesh.devices.flat)\n"
        "    if ids != DEVICE_IDS:\n"
        "        first = next(i for i, (a, b) in enumerate(zip(ids, "
        "DEVICE_IDS)) if a != b)\n"
        "        raise ValueError(\n"
        "            f\"mesh device {first} is id {ids[first]}; the plan "
        "assumed \"\n"
        "            f\"{DEVICE_IDS[first]}\")\n";
  }
  return out;
}

}  // namespace

std::string mesh_jax(const MeshReport& report) {
  return mesh_module(report.mesh,
                     report.topology,
                     report.topology != nullptr ? &report.layout : nullptr,
                     report.provenance,
                     "The mesh of a plan");
}

std::string plan_jax(const CheckReport& report, const Diagnostics& diags) {
  (void)diags;
  std::string out = mesh_module(report.mesh,
                                report.topology,
                                report.layout,
                                report.provenance,
                                "The mesh and partition specs of a plan");
  // One row per tensor with a spec, folded across layers and experts.
  const std::vector<Tensor>& tensors = report.manifest.tensors();
  std::vector<NameRowRef> rows;
  std::vector<std::string> spec_text(tensors.size());
  size_t without = 0;
  std::vector<std::string> literal;  // names with braces: never folded
  for (size_t t = 0; t < tensors.size(); ++t) {
    const PartitionSpec* spec = report.shardings[t].spec();
    if (spec == nullptr) {
      ++without;
      continue;
    }
    spec_text[t] = to_python(*spec);
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (spec_text[t].empty()) {
      continue;
    }
    const std::string_view name = tensors[t].name;
    if (name.find_first_of("{}") != std::string_view::npos) {
      literal.push_back(
          fmt::format("    {}: {},\n", py_str(name), spec_text[t]));
      continue;
    }
    rows.push_back(NameRowRef{name, spec_text[t]});
  }
  const std::vector<FoldedRow> folded = fold_row_refs(rows);
  out += "\n\n# The partition spec of every tensor, by name";
  out += without > 0 ? fmt::format(
             " ({} tensor{} without a valid spec left out: "
             "see the plan's diagnostics)",
             without,
             without == 1 ? "" : "s")
                     : std::string();
  out += ".\nSPECS = {\n";
  for (const FoldedRow& row : folded) {
    if (row.count == 1) {
      out += fmt::format("    {}: {},\n", py_str(row.name), row.rest);
    }
  }
  for (const std::string& line : literal) {
    out += line;
  }
  out += "}\n";
  bool any_folded = false;
  for (const FoldedRow& row : folded) {
    any_folded = any_folded || row.count > 1;
  }
  if (any_folded) {
    out +=
        "\n# Tensors of many layers (and experts): a name pattern, the "
        "indices\n# of each {} in it, and their spec.\n_FOLDED = (\n";
    for (const FoldedRow& row : folded) {
      if (row.count == 1) {
        continue;
      }
      const Pattern p = pattern_of(row.name);
      out += fmt::format(
          "    ({}, {}, {}),\n", py_str(p.format), py_tuple(p.sets), row.rest);
    }
    out +=
        ")\n\n\n"
        "def _names(pattern, sets, index=()):\n"
        "    if len(index) == len(sets):\n"
        "        yield pattern.format(*index)\n"
        "        return\n"
        "    for i in sets[len(index)]:\n"
        "        yield from _names(pattern, sets, index + (i,))\n\n\n"
        "for _pattern, _sets, _spec in _FOLDED:\n"
        "    for _name in _names(_pattern, _sets):\n"
        "        SPECS[_name] = _spec\n";
  }
  out +=
      "\n\ndef _path_name(path, sep):\n"
      "    parts = []\n"
      "    for key in path:\n"
      "        for field in (\"key\", \"name\", \"idx\"):\n"
      "            if hasattr(key, field):\n"
      "                parts.append(str(getattr(key, field)))\n"
      "                break\n"
      "        else:\n"
      "            parts.append(str(key))\n"
      "    return sep.join(parts)\n\n\n"
      "def named_shardings(mesh, params, sep=\".\"):\n"
      "    \"\"\"A NamedSharding for each leaf of `params`, whose path joined "
      "with\n"
      "    `sep` is its tensor's name (\".\" as in Hugging Face names). "
      "Raises\n"
      "    KeyError naming every path without a spec.\"\"\"\n"
      "    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)\n"
      "    names = [_path_name(path, sep) for path, _ in leaves]\n"
      "    missing = [name for name in names if name not in SPECS]\n"
      "    if missing:\n"
      "        raise KeyError(\n"
      "            f\"no partition spec for {len(missing)} of {len(names)} "
      "parameters: \"\n"
      "            + \", \".join(missing[:10]) + (\" ...\" if len(missing) > "
      "10 else \"\"))\n"
      "    return jax.tree_util.tree_unflatten(\n"
      "        treedef, [NamedSharding(mesh, SPECS[name]) for name in "
      "names])\n";
  return out;
}

}  // namespace shardplan::report_detail
