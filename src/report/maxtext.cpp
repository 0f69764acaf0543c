// `--format maxtext` (docs/paste-back.md): YAML overrides
// for MaxText's base.yml that give MaxText the plan's mesh (its ici_* and
// dcn_* parallelism, num_slices, allow_split_physical_axes, and mesh_axes
// when the plan orders its axes otherwise), the logical axis rules when the
// plan's rules are logical, and the workload's keys.

#include "report/renderers.hpp"
#include "report/text.hpp"

#include <shardplan/report.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan::report_detail {

namespace {

// shardplan's short names (docs/paste-back.md) and their MaxText axes.
struct Alias {
  std::string_view name;
  std::string_view maxtext;
};
constexpr std::array<Alias, 7> k_aliases{{
    {"dp", "data"},
    {"tp", "tensor"},
    {"ep", "expert"},
    {"sp", "context"},
    {"cp", "context"},
    {"pp", "stage"},
    {"pipeline", "stage"},
}};

// MaxText's remat_policy values (base.yml's comment, decoders.py); none
// and selective are shardplan's (Korthikanti et al.), not MaxText's.
constexpr std::array<std::string_view, 10> k_maxtext_remat{
    "full",
    "minimal",
    "minimal_with_context",
    "save_dot_except_mlp",
    "save_dot_except_mlpwi",
    "save_dot_with_context_except_mlp",
    "save_qkv_proj",
    "save_out_proj",
    "qkv_proj_offloaded",
    "minimal_offloaded"};

// "'text'", YAML's single-quoted scalar ('' for a quote).
std::string yaml_str(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    out += c;
    if (c == '\'') {
      out += '\'';
    }
  }
  return out + "'";
}

// MaxText's name of a dtype (types.py's DType values); "" for one MaxText's
// weight_dtype and mu_dtype do not take.
std::string_view maxtext_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "float32";
    case DType::bf16:
      return "bfloat16";
    case DType::f16:
      return "float16";
    default:
      return "";
  }
}

// The dtype the plan holds the weights in: the estimate's, else the
// manifest's first floating-point tensor's.
std::optional<DType> weight_dtype(const CheckReport& report) {
  if (report.memory.param_dtype) {
    return report.memory.param_dtype;
  }
  for (const Tensor& t : report.manifest.tensors()) {
    if (is_floating(t.dtype)) {
      return t.dtype;
    }
  }
  return std::nullopt;
}

// The model, the weights' dtype and the optimizer's state as MaxText's
// keys (model_name, weight_dtype, opt_type, mu_dtype).
std::string state_yaml(const CheckReport& report) {
  std::string out;
  const Provenance* p = report.provenance;
  if (p != nullptr && !p->maxtext_model.empty()) {
    out += fmt::format("model_name: {}\n", yaml_str(p->maxtext_model));
  }
  const std::optional<DType> weights = weight_dtype(report);
  const std::string_view weights_name =
      weights ? maxtext_dtype(*weights) : std::string_view();
  if (!weights_name.empty()) {
    out += fmt::format("weight_dtype: {}\n", yaml_str(weights_name));
  } else if (weights) {
    out += fmt::format(
        "# The weights are {}, which MaxText's weight_dtype does not take.\n",
        to_string(*weights));
  }
  const MemoryEstimate& m = report.memory;
  if (m.recipe == Recipe::params_only) {
    out +=
        "# The plan counts no training state (recipe params-only): "
        "opt_type is base.yml's.\n";
    return out;
  }
  if (m.optimizer == Optimizer::adamw || m.optimizer == Optimizer::sgd
      || m.optimizer == Optimizer::muon) {
    out += fmt::format("opt_type: {}\n", yaml_str(to_string(m.optimizer)));
  } else {
    out += fmt::format(
        "# The optimizer {} is not one of MaxText's opt_type values.\n",
        to_string(m.optimizer));
  }
  // optax keeps nu like the params; mu in mu_dtype, "" for the params'.
  if (m.optimizer == Optimizer::adamw && m.first_moment_dtype
      && m.first_moment_dtype != weights
      && !maxtext_dtype(*m.first_moment_dtype).empty()) {
    out += fmt::format("mu_dtype: {}\n",
                       yaml_str(maxtext_dtype(*m.first_moment_dtype)));
  }
  if (m.master && weights && *weights != DType::f32) {
    out +=
        "# The plan keeps an f32 master copy of the weights, which MaxText "
        "does not:\n# MaxText trains them in weight_dtype.\n";
  }
  return out;
}

// remat_policy, and a custom policy's placement of each name.
std::string remat_yaml(const ActivationEstimate& act) {
  const std::string_view remat = to_string(act.remat);
  if (act.remat == RematPolicy::custom) {
    std::string out = "remat_policy: 'custom'\n";
    for (const std::string& name : custom_remat_names()) {
      out += fmt::format(
          "{}: {}\n", name, yaml_str(to_string(act.custom_remat.of(name))));
    }
    return out;
  }
  if (std::find(k_maxtext_remat.begin(), k_maxtext_remat.end(), remat)
      != k_maxtext_remat.end()) {
    return fmt::format("remat_policy: {}\n", yaml_str(remat));
  }
  return fmt::format(
      "# remat {} is not a MaxText remat_policy: left as base.yml's.\n", remat);
}

// The MaxText axis of a mesh axis name; nullopt for a name MaxText lacks.
std::optional<std::string_view> maxtext_name(std::string_view axis) {
  for (const std::string& name : maxtext_mesh_axes()) {
    if (name == axis) {
      return name;
    }
  }
  for (const Alias& a : k_aliases) {
    if (a.name == axis) {
      return a.maxtext;
    }
  }
  return std::nullopt;
}

// The rules' logical axis rules, when they are what decides the specs (the
// maxtext preset, or a user's logical rules).
bool logical_rules(const RuleSet* rules) {
  return rules != nullptr && !rules->logical_axis_rules.empty();
}

std::string mesh_yaml(const Mesh& mesh,
                      const Topology* topology,
                      const Provenance* provenance,
                      std::string_view what) {
  std::string out;
  out += fmt::format(
      "# MaxText overrides for base.yml: {}, written by "
      "shardplan {}.\n",
      what,
      shardplan_version());
  if (provenance != nullptr && !provenance->command_line.empty()) {
    out += fmt::format("# Command: {}\n", provenance->command_line);
  }
  if (provenance != nullptr && !provenance->note.empty()) {
    out += fmt::format("# {}\n", provenance->note);
  }
  if (topology != nullptr) {
    out += fmt::format("# Topology: {}\n", topology_summary(*topology));
  }
  // Each MaxText axis's ICI and DCN parts (can_render checked the names).
  const std::vector<std::string>& maxtext_axes = maxtext_mesh_axes();
  std::vector<int64_t> ici(maxtext_axes.size(), 1);
  std::vector<int64_t> dcn(maxtext_axes.size(), 1);
  std::vector<std::string> mapped;
  std::vector<std::string> order;  // the mesh's axes of size > 1, mapped
  for (const MeshAxis& axis : mesh.axes) {
    const std::string_view name = maxtext_name(axis.name).value_or("");
    const auto at = static_cast<size_t>(
        std::find(maxtext_axes.begin(), maxtext_axes.end(), name)
        - maxtext_axes.begin());
    if (at == maxtext_axes.size()) {
      continue;
    }
    ici[at] = axis.ici;
    dcn[at] = axis.dcn;
    mapped.push_back(fmt::format("{}:{}", name, axis.size));
    if (axis.size > 1) {
      order.emplace_back(name);
    }
  }
  out += fmt::format(
      "# Mesh: {} (MaxText's {})\n", to_string(mesh), fmt::join(mapped, ","));
  out += "# Re-run the command to update this file.\n\n";
  out += fmt::format("num_slices: {}\n", mesh.num_slices());
  out += fmt::format(
      "allow_split_physical_axes: {}\n",
      provenance != nullptr && provenance->allow_split_physical_axes ? "true"
                                                                     : "false");
  // MaxText lays out its axes in mesh_axes order: the plan's order of the
  // axes that split devices must be the same, or mesh_axes says it.
  std::vector<std::string> default_order;
  for (size_t a = 0; a < maxtext_axes.size(); ++a) {
    if (ici[a] * dcn[a] > 1) {
      default_order.push_back(maxtext_axes[a]);
    }
  }
  if (order != default_order) {
    std::vector<std::string> axes;
    axes.reserve(maxtext_axes.size());
    for (const std::string& name : order) {
      axes.push_back(yaml_str(name));
    }
    for (const std::string& name : maxtext_axes) {
      if (std::find(order.begin(), order.end(), name) == order.end()) {
        axes.push_back(yaml_str(name));
      }
    }
    out += fmt::format(
        "# The plan orders its axes {}, not base.yml's order: mesh_axes "
        "keeps the plan's device layout.\nmesh_axes: [{}]\n",
        fmt::join(order, ", "),
        fmt::join(axes, ", "));
  }
  for (const std::string_view part : {"ici", "dcn"}) {
    const std::vector<int64_t>& sizes = part == "ici" ? ici : dcn;
    for (size_t a = 0; a < maxtext_axes.size(); ++a) {
      out += fmt::format("{}_{}_parallelism: {}\n",
                         part,
                         maxtext_key_stem(maxtext_axes[a]),
                         sizes[a]);
    }
  }
  return out;
}

}  // namespace

bool maxtext_names_ok(const Mesh& mesh,
                      const RuleSet* rules,
                      Diagnostics& diags) {
  bool ok = true;
  std::vector<std::string_view> seen;
  for (const MeshAxis& axis : mesh.axes) {
    const std::optional<std::string_view> name = maxtext_name(axis.name);
    if (!name) {
      diags
          .error(
              "maxtext.axis-name",
              fmt::format("mesh axis {} has no MaxText name", quote(axis.name)),
              Location::of("--format maxtext"))
          .hint = fmt::format(
          "name the axes as base.yml's mesh_axes do ({}) or dp, tp, ep, sp, "
          "cp, pp",
          fmt::join(maxtext_mesh_axes(), ", "));
      ok = false;
    } else if (std::find(seen.begin(), seen.end(), *name) != seen.end()) {
      diags.error("maxtext.axis-name",
                  fmt::format("mesh axis {} is MaxText's {}, as another axis "
                              "of the mesh is",
                              quote(axis.name),
                              quote(*name)),
                  Location::of("--format maxtext"));
      ok = false;
    } else {
      seen.push_back(*name);
      if (*name != axis.name && logical_rules(rules)
          && std::any_of(rules->logical_axis_rules.begin(),
                         rules->logical_axis_rules.end(),
                         [&](const LogicalAxisRule& rule) {
                           return std::any_of(rule.axes.begin(),
                                              rule.axes.end(),
                                              [&](const AxisRef& a) {
                                                return a.name == *name;
                                              });
                         })) {
        diags
            .warning("maxtext.renamed-axis",
                     fmt::format("mesh axis {} is written as MaxText's {}, "
                                 "which the logical axis rules name: MaxText "
                                 "will shard over it where this plan, whose "
                                 "rules do not name {}, did not",
                                 quote(axis.name),
                                 quote(*name),
                                 quote(axis.name)),
                     Location::of("--format maxtext"))
            .hint = fmt::format(
            "plan with MaxText's axis names (--mesh {}:{}...) for the specs "
            "MaxText will use",
            *name,
            axis.size);
      }
    }
  }
  if (logical_rules(rules)) {
    // One error per axis, at its first rule.
    std::vector<std::string_view> reported;
    for (const LogicalAxisRule& rule : rules->logical_axis_rules) {
      for (const AxisRef& axis : rule.axes) {
        if (maxtext_name(axis.name)
            || std::find(reported.begin(), reported.end(), axis.name)
                   != reported.end()) {
          continue;
        }
        reported.push_back(axis.name);
        diags.error(
            "maxtext.axis-name",
            fmt::format("logical axis rule {} names mesh axis {}, which "
                        "has no MaxText name",
                        quote(rule.name),
                        quote(axis.name)),
            rules->name.empty() ? Location::at(rules->source, axis.pointer)
                                : Location::of("--rules " + rules->name));
        ok = false;
      }
    }
  }
  return ok;
}

std::string mesh_maxtext(const MeshReport& report) {
  return mesh_yaml(
      report.mesh, report.topology, report.provenance, "the mesh of a plan");
}

std::string plan_maxtext(const CheckReport& report, const Diagnostics& diags) {
  (void)diags;
  std::string out = mesh_yaml(report.mesh,
                              report.topology,
                              report.provenance,
                              "the mesh and rules of a plan");
  if (logical_rules(report.rules)) {
    out += fmt::format(
        "# The logical axis rules of {}, in order.\nlogical_axis_rules: [\n",
        rules_text(*report.rules));
    for (const LogicalAxisRule& rule : report.rules->logical_axis_rules) {
      std::vector<std::string> axes;
      for (const AxisRef& axis : rule.axes) {
        axes.push_back(yaml_str(maxtext_name(axis.name).value_or(axis.name)));
      }
      out += fmt::format(
          "  [{}, [{}]],\n", yaml_str(rule.name), fmt::join(axes, ", "));
    }
    out += "]\n";
  } else if (report.rules != nullptr) {
    out += fmt::format(
        "# The specs come from {}, which decides by tensor name, not\n"
        "# by logical axes: MaxText's logical_axis_rules cannot express them,\n"
        "# so only the mesh is written.\n",
        rules_text(*report.rules));
  } else {
    out +=
        "# The specs come from a specs file, not from logical axis rules: "
        "only\n# the mesh is written.\n";
  }
  if (const ActivationEstimate* act = report.activations) {
    // MaxText's global batch is per_device_batch_size x devices x
    // gradient_accumulation_steps (pyconfig's global_batch_size_to_train_on);
    // a pipeline splits per_device_batch_size x devices into
    // num_pipeline_microbatches instead.
    const int64_t devices = report.mesh.num_devices();
    const bool pipeline = act->stages > 1;
    const int64_t accumulation = pipeline ? 1 : act->microbatches;
    const double per_device = static_cast<double>(act->global_batch)
                              / static_cast<double>(devices * accumulation);
    out += fmt::format(
        "# The workload: {} sequences of {} tokens per step on {} devices.\n",
        act->global_batch,
        act->seq,
        devices);
    out += fmt::format("per_device_batch_size: {}\n", per_device);
    out += fmt::format("max_target_length: {}\n", act->seq);
    if (act->microbatches > 1) {
      out += fmt::format("{}: {}\n",
                         pipeline ? "num_pipeline_microbatches"
                                  : "gradient_accumulation_steps",
                         act->microbatches);
    }
    out += remat_yaml(*act);
    if (act->vocab_tiles > 1) {
      out += fmt::format("num_vocab_tiling: {}\n", act->vocab_tiles);
    }
  }
  out += "# The model, its weights and the training state.\n";
  out += state_yaml(report);
  return out;
}

}  // namespace shardplan::report_detail
