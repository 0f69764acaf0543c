// The remat policies (include/shardplan/workload.hpp; docs/memory.md,
// "Remat policies"; docs/step.md, "FLOPs"): one row each. What a
// policy keeps of a layer (estimate_activations), where (the device or the
// host), and what its backward recomputes (estimate_step) all follow from
// its row, so the two estimates cannot disagree.

#include "workload/internal.hpp"

#include <shardplan/workload.hpp>

#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

namespace {

using workload_detail::LayerFlops;
using workload_detail::Tag;

// What a policy keeps of a decoder layer.
enum class Keeps {
  needed,           // everything the backward needs: nothing recomputed
  needed_but_core,  // that less the attention core, which is recomputed
  layer_input,      // the layer input only: the whole forward again
  names,            // the layer input plus the checkpoint names below
};

// MaxText's checkpoint names a policy keeps, a bit per forward part whose
// output they are: q/k/v (query_proj, key_proj, value_proj; MaxText's fused
// "qkv_proj" is the three), the attention core's (context), the output
// projection's (out_proj), the MLP's input matmuls' (mlpwi_0, mlpwi_1, or
// mlpwi) and its output's (mlpwo).
constexpr unsigned k_qkv = 1U << 0U;
constexpr unsigned k_context = 1U << 1U;
constexpr unsigned k_out_proj = 1U << 2U;
constexpr unsigned k_mlpwi = 1U << 3U;
constexpr unsigned k_mlpwo = 1U << 4U;
constexpr unsigned k_minimal = k_qkv | k_out_proj | k_mlpwi | k_mlpwo;

enum class Where { device, host };

struct RematRow {
  RematPolicy policy;
  std::string_view name;
  std::string_view alias;  // another name parse_remat_policy accepts
  Keeps keeps;
  unsigned names;  // Keeps::names: the checkpoint names kept
  Where where;     // where the names are kept (the layer input: the device)
};

// Korthikanti et al.'s three, then MaxText's policies (layers/decoders.py
// get_remat_policy: save_only_these_names or, offloaded,
// save_and_offload_only_these_names; the scan keeps every layer's input).
constexpr RematRow k_policies[] = {
    {RematPolicy::none, "none", "", Keeps::needed, 0, Where::device},
    {RematPolicy::full, "full", "", Keeps::layer_input, 0, Where::device},
    {RematPolicy::selective,
     "selective",
     "",
     Keeps::needed_but_core,
     0,
     Where::device},
    {RematPolicy::minimal,
     "minimal",
     "",
     Keeps::names,
     k_minimal,
     Where::device},
    {RematPolicy::minimal_with_context,
     "minimal_with_context",
     "minimal_flash",
     Keeps::names,
     k_minimal | k_context,
     Where::device},
    {RematPolicy::save_dot_except_mlp,
     "save_dot_except_mlp",
     "",
     Keeps::names,
     k_qkv | k_out_proj,
     Where::device},
    {RematPolicy::save_dot_except_mlpwi,
     "save_dot_except_mlpwi",
     "",
     Keeps::names,
     k_qkv | k_out_proj | k_mlpwo,
     Where::device},
    {RematPolicy::save_dot_with_context_except_mlp,
     "save_dot_with_context_except_mlp",
     "",
     Keeps::names,
     k_qkv | k_context | k_out_proj,
     Where::device},
    {RematPolicy::save_qkv_proj,
     "save_qkv_proj",
     "",
     Keeps::names,
     k_qkv,
     Where::device},
    {RematPolicy::save_out_proj,
     "save_out_proj",
     "",
     Keeps::names,
     k_out_proj,
     Where::device},
    {RematPolicy::qkv_proj_offloaded,
     "qkv_proj_offloaded",
     "",
     Keeps::names,
     k_qkv,
     Where::host},
    {RematPolicy::minimal_offloaded,
     "minimal_offloaded",
     "",
     Keeps::names,
     k_minimal,
     Where::host},
};

const RematRow& row_of(RematPolicy policy) {
  for (const RematRow& row : k_policies) {
    if (row.policy == policy) {
      return row;
    }
  }
  return k_policies[0];
}

// The checkpoint-name bit of `tag` (0: no policy names it).
unsigned name_bit(Tag tag) {
  switch (tag) {
    case Tag::query_proj:
    case Tag::key_proj:
    case Tag::value_proj:
      return k_qkv;
    case Tag::context:
      return k_context;
    case Tag::out_proj:
      return k_out_proj;
    case Tag::mlpwi_0:
    case Tag::mlpwi_1:
    case Tag::mlpwi:
      return k_mlpwi;
    case Tag::mlpwo:
      return k_mlpwo;
    case Tag::other:
    case Tag::decoder_layer_input:
      return 0;
  }
  return 0;
}

}  // namespace

namespace workload_detail {

Kept kept(RematPolicy policy, Tag tag, bool needed, bool core) {
  const RematRow& row = row_of(policy);
  switch (row.keeps) {
    case Keeps::needed:
      return {needed, false};
    case Keeps::needed_but_core:
      return {needed && !core, false};
    case Keeps::layer_input:
      return {tag == Tag::decoder_layer_input, false};
    case Keeps::names:
      break;
  }
  if (tag == Tag::decoder_layer_input) {
    return {true, false};
  }
  const bool named = (row.names & name_bit(tag)) != 0;
  return row.where == Where::host ? Kept{false, named} : Kept{named, false};
}

double recomputed(RematPolicy policy, const LayerFlops& f) {
  const RematRow& row = row_of(policy);
  switch (row.keeps) {
    case Keeps::needed:
      return 0;
    case Keeps::needed_but_core:
      return f.attention;
    case Keeps::layer_input:
      return f.forward();
    case Keeps::names:
      break;
  }
  // The matmuls whose outputs the policy does not keep, and the attention
  // core unless it keeps the context; the router with the MLP's input,
  // which needs its routing. Offloaded tensors come back: not recomputed.
  const auto dropped = [&](unsigned name) { return (row.names & name) == 0; };
  double sum = 0;
  if (dropped(k_qkv)) {
    sum += f.qkv;
  }
  if (dropped(k_context)) {
    sum += f.attention;
  }
  if (dropped(k_out_proj)) {
    sum += f.out;
  }
  if (dropped(k_mlpwi)) {
    sum += f.mlp_in;
  }
  if (dropped(k_mlpwo)) {
    sum += f.mlp_out;
  }
  if (dropped(k_mlpwi)) {
    sum += f.router;
  }
  return sum;
}

bool reruns_forward(RematPolicy policy) {
  return row_of(policy).keeps == Keeps::layer_input;
}

}  // namespace workload_detail

std::string_view to_string(RematPolicy policy) {
  for (const RematRow& row : k_policies) {
    if (row.policy == policy) {
      return row.name;
    }
  }
  return "?";
}

std::optional<RematPolicy> parse_remat_policy(std::string_view text) {
  for (const RematRow& row : k_policies) {
    if (row.name == text || (!row.alias.empty() && row.alias == text)) {
      return row.policy;
    }
  }
  return std::nullopt;
}

std::vector<std::string> remat_policy_names() {
  std::vector<std::string> out;
  for (const RematRow& row : k_policies) {
    out.emplace_back(row.name);
  }
  return out;
}

std::optional<RematPolicy> read_remat_policy(std::string_view text,
                                             std::string_view source,
                                             Diagnostics& diags) {
  std::optional<RematPolicy> remat = parse_remat_policy(text);
  if (!remat) {
    const std::vector<std::string> names = remat_policy_names();
    Diagnostic& d =
        diags.error("workload.unknown-remat",
                    fmt::format("unknown remat policy {}; expected one of {}",
                                quote(text),
                                fmt::join(names, ", ")),
                    Location::of(std::string(source)));
    const std::string near = closest_match(text, names);
    if (!near.empty()) {
      d.hint = fmt::format("did you mean {}?", quote(near));
    }
  }
  return remat;
}

}  // namespace shardplan
