// The remat policies (include/shardplan/workload.hpp; docs/memory.md,
// "Remat policies"; docs/step.md, "FLOPs"): one row each. What a
// policy keeps of a layer (estimate_activations), where (the device or the
// host), and what its backward recomputes (estimate_step) all follow from
// its row, so the two estimates cannot disagree.

#include "workload/internal.hpp"

#include <shardplan/workload.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
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
  custom,           // each name where a CustomRemat puts it
  every_other_mm,   // torchtitan's op SAC: the attention kernel's outputs
                    // and every other matmul's (the 1st, 3rd, ... of a
                    // layer: q, v, gate, down in a Llama layer)
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
    {RematPolicy::custom, "custom", "", Keeps::custom, 0, Where::device},
    {RematPolicy::selective_op,
     "selective_op",
     "torchtitan_op",
     Keeps::every_other_mm,
     0,
     Where::device},
};

// The last policy: a new RematPolicy is a -Wswitch error here until it says
// whether it is the last, and k_policies must then hold one row per policy,
// in the enum's order, so that row_of indexes it.
constexpr bool is_last(RematPolicy policy) {
  switch (policy) {
    case RematPolicy::none:
    case RematPolicy::full:
    case RematPolicy::selective:
    case RematPolicy::minimal:
    case RematPolicy::minimal_with_context:
    case RematPolicy::save_dot_except_mlp:
    case RematPolicy::save_dot_except_mlpwi:
    case RematPolicy::save_dot_with_context_except_mlp:
    case RematPolicy::save_qkv_proj:
    case RematPolicy::save_out_proj:
    case RematPolicy::qkv_proj_offloaded:
    case RematPolicy::minimal_offloaded:
    case RematPolicy::custom:
      return false;
    case RematPolicy::selective_op:
      return true;
  }
  return false;
}
constexpr bool one_row_per_policy() {
  for (size_t i = 0; i < std::size(k_policies); ++i) {
    if (k_policies[i].policy != static_cast<RematPolicy>(i)) {
      return false;
    }
  }
  return is_last(k_policies[std::size(k_policies) - 1].policy);
}
static_assert(one_row_per_policy(),
              "k_policies holds one row per RematPolicy, in order");

const RematRow& row_of(RematPolicy policy) {
  return k_policies[static_cast<size_t>(policy)];
}

// What each checkpoint name is to the policies, one row per Tag in the
// enum's order: its name (custom policies place it by name; "" for
// other), the bit MaxText's named policies keep it by (0: none names it),
// and whether torchtitan's op SAC saves it. Op SAC saves the attention
// kernel's outputs (its context, and the core's tensors: flash's
// logsumexp, Tag::other with `core`) and the odd matmuls of a layer in call
// order: wq (1), wv (3), w1 (5, the gate) and w2 (7, down) of a gated
// layer; wk, wo and w3 are recomputed (torchtitan's
// distributed/activation_checkpoint.py, _get_custom_policy).
struct TagRow {
  Tag tag;
  std::string_view name;
  unsigned bit;
  bool op_sac;
};

constexpr TagRow k_tags[] = {
    {Tag::other, "", 0, false},
    {Tag::decoder_layer_input, "decoder_layer_input", 0, true},
    {Tag::query_proj, "query_proj", k_qkv, true},
    {Tag::key_proj, "key_proj", k_qkv, false},
    {Tag::value_proj, "value_proj", k_qkv, true},
    {Tag::context, "context", k_context, true},
    {Tag::out_proj, "out_proj", k_out_proj, false},
    {Tag::mlpwi_0, "mlpwi_0", k_mlpwi, true},
    {Tag::mlpwi_1, "mlpwi_1", k_mlpwi, false},
    {Tag::moe_mlpwi_1, "moe_mlpwi_1", 0, false},
    {Tag::mlpwi, "mlpwi", k_mlpwi, true},
    {Tag::mlpwo, "mlpwo", k_mlpwo, true},
    {Tag::mla_q, "mla_q", 0, false},
    {Tag::mla_kv, "mla_kv", 0, false},
    {Tag::moe_mlpwi_0, "moe_mlpwi_0", k_mlpwi, true},
    {Tag::moe_mlpwo, "moe_mlpwo", k_mlpwo, true},
};

// The last Tag: a new one is a -Wswitch error here until it says whether it
// is the last, and k_tags must then hold its row (as is_last above).
constexpr bool is_last(Tag tag) {
  switch (tag) {
    case Tag::other:
    case Tag::decoder_layer_input:
    case Tag::query_proj:
    case Tag::key_proj:
    case Tag::value_proj:
    case Tag::context:
    case Tag::out_proj:
    case Tag::mlpwi_0:
    case Tag::mlpwi_1:
    case Tag::moe_mlpwi_1:
    case Tag::mlpwi:
    case Tag::mlpwo:
    case Tag::mla_q:
    case Tag::mla_kv:
    case Tag::moe_mlpwi_0:
      return false;
    case Tag::moe_mlpwo:
      return true;
  }
  return false;
}
constexpr bool one_row_per_tag() {
  for (size_t i = 0; i < std::size(k_tags); ++i) {
    if (k_tags[i].tag != static_cast<Tag>(i)) {
      return false;
    }
  }
  return is_last(k_tags[std::size(k_tags) - 1].tag);
}
static_assert(one_row_per_tag(), "k_tags holds one row per Tag, in order");

const TagRow& row_of(Tag tag) {
  return k_tags[static_cast<size_t>(tag)];
}

bool saved_by_op_sac(Tag tag, bool core) {
  return tag == Tag::other ? core : row_of(tag).op_sac;
}

constexpr std::array<Named<RematPlacement>, 3> k_placements{{
    {RematPlacement::remat, "remat"},
    {RematPlacement::device, "device"},
    {RematPlacement::offload, "offload"},
}};

// The checkpoint-name bits a custom policy keeps (on the device or the
// host): a part's bit when each of its names is kept.
unsigned custom_bits(const CustomRemat& custom) {
  const auto kept = [&](std::string_view name) {
    return custom.of(name) != RematPlacement::remat;
  };
  unsigned bits = 0;
  if (kept("query_proj") && kept("key_proj") && kept("value_proj")) {
    bits |= k_qkv;
  }
  if (kept("context")) {
    bits |= k_context;
  }
  if (kept("out_proj")) {
    bits |= k_out_proj;
  }
  if ((kept("mlpwi_0") && kept("mlpwi_1")) || kept("mlpwi")) {
    bits |= k_mlpwi;
  }
  if (kept("mlpwo")) {
    bits |= k_mlpwo;
  }
  return bits;
}

// Reads "NAME=PLACE,..." after "custom:" into `custom`.
bool read_custom_names(std::string_view list,
                       const Location& at,
                       CustomRemat& custom,
                       Diagnostics& diags) {
  const std::vector<std::string>& names = custom_remat_names();
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string_view item = list.substr(start, comma - start);
    const size_t eq = item.find('=');
    const std::string_view name = item.substr(0, eq);
    const std::string_view place =
        eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      Diagnostic& d = diags.error(
          "workload.bad-remat",
          fmt::format("custom remat: {} is not a checkpoint name; expected "
                      "one of {}",
                      quote(name),
                      fmt::join(names, ", ")),
          at);
      const std::string near = closest_match(name, names);
      if (!near.empty()) {
        d.hint = fmt::format("did you mean {}?", quote(near));
      }
      return false;
    }
    const std::optional<RematPlacement> placement =
        parse_remat_placement(place);
    if (!placement) {
      diags
          .error("workload.bad-remat",
                 fmt::format("custom remat: {}={} places it nowhere; "
                             "expected remat, device or offload",
                             name,
                             place),
                 at)
          .hint = "e.g. custom:decoder_layer_input=offload,query_proj=device";
      return false;
    }
    custom.names.emplace_back(name, *placement);
    start = comma + 1;
  }
  return true;
}

}  // namespace

namespace workload_detail {

Kept kept(RematPolicy policy,
          const CustomRemat& custom,
          Tag tag,
          bool needed,
          bool core) {
  const RematRow& row = row_of(policy);
  switch (row.keeps) {
    case Keeps::needed:
      return {needed, false};
    case Keeps::needed_but_core:
      return {needed && !core, false};
    case Keeps::layer_input:
      return {tag == Tag::decoder_layer_input, false};
    case Keeps::custom: {
      if (tag == Tag::other) {
        return {false, false};
      }
      RematPlacement p = custom.of(row_of(tag).name);
      // The experts' gate and down are also mlpwi_0 and mlpwo: kept on
      // the device if either name says so, else offloaded if either does.
      const std::string_view inner = tag == Tag::moe_mlpwi_0 ? "mlpwi_0"
                                     : tag == Tag::moe_mlpwo ? "mlpwo"
                                                             : "";
      if (!inner.empty()) {
        const RematPlacement q = custom.of(inner);
        if (p == RematPlacement::device || q == RematPlacement::device) {
          p = RematPlacement::device;
        } else if (q == RematPlacement::offload) {
          p = RematPlacement::offload;
        }
      }
      return {p == RematPlacement::device, p == RematPlacement::offload};
    }
    case Keeps::every_other_mm:
      return {saved_by_op_sac(tag, core), false};
    case Keeps::names:
      break;
  }
  if (tag == Tag::decoder_layer_input) {
    return {true, false};
  }
  const bool named = (row.names & row_of(tag).bit) != 0;
  return row.where == Where::host ? Kept{false, named} : Kept{named, false};
}

double recomputed(RematPolicy policy,
                  const CustomRemat& custom,
                  const LayerFlops& f) {
  const RematRow& row = row_of(policy);
  unsigned names = row.names;
  switch (row.keeps) {
    case Keeps::needed:
      return 0;
    case Keeps::needed_but_core:
      return f.attention;
    case Keeps::layer_input:
      return f.forward();
    case Keeps::custom:
      names = custom_bits(custom);
      break;
    case Keeps::every_other_mm:
      // The even matmuls: k, the output projection and up (gated).
      return f.key + f.out + (f.gated ? f.mlp_in / 2 : 0);
    case Keeps::names:
      break;
  }
  // The matmuls whose outputs the policy does not keep, and the attention
  // core unless it keeps the context; the router with the MLP's input,
  // which needs its routing. Offloaded tensors come back: not recomputed.
  const auto dropped = [&](unsigned name) { return (names & name) == 0; };
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
  if (text.starts_with("custom:")) {
    return RematPolicy::custom;
  }
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
                                             const Location& at,
                                             Diagnostics& diags) {
  CustomRemat custom;
  return read_remat(text, at, custom, diags);
}

std::optional<RematPolicy> read_remat(std::string_view text,
                                      const Location& at,
                                      CustomRemat& custom,
                                      Diagnostics& diags) {
  std::optional<RematPolicy> remat = parse_remat_policy(text);
  if (remat == RematPolicy::custom) {
    custom = {};
    constexpr std::string_view k_prefix = "custom:";
    if (text.size() > k_prefix.size()
        && !read_custom_names(
            text.substr(k_prefix.size()), at, custom, diags)) {
      return std::nullopt;
    }
    return remat;
  }
  if (!remat) {
    const std::vector<std::string> names = remat_policy_names();
    Diagnostic& d =
        diags.error("workload.unknown-remat",
                    fmt::format("unknown remat policy {}; expected one of {}",
                                quote(text),
                                fmt::join(names, ", ")),
                    at);
    const std::string near = closest_match(text, names);
    if (!near.empty()) {
      d.hint = fmt::format("did you mean {}?", quote(near));
    }
  }
  return remat;
}

std::string_view to_string(RematPlacement placement) {
  return name_in(k_placements, placement);
}

std::optional<RematPlacement> parse_remat_placement(std::string_view text) {
  return value_in(k_placements, text);
}

const std::vector<std::string>& custom_remat_names() {
  static const std::vector<std::string> names = {"decoder_layer_input",
                                                 "context",
                                                 "mlpwi",
                                                 "mlpwi_0",
                                                 "mlpwi_1",
                                                 "mlpwo",
                                                 "query_proj",
                                                 "key_proj",
                                                 "value_proj",
                                                 "qkv_proj",
                                                 "out_proj",
                                                 "mla_q",
                                                 "mla_kv",
                                                 "moe_mlpwi_0",
                                                 "moe_mlpwi_1",
                                                 "moe_mlpwo"};
  return names;
}

RematPlacement CustomRemat::of(std::string_view name) const {
  // The last word on a name wins, as a later key overrides an earlier one.
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    if (it->first == name) {
      return it->second;
    }
  }
  return name == "decoder_layer_input" ? RematPlacement::device
                                       : RematPlacement::remat;
}

std::string describe_remat(RematPolicy policy, const CustomRemat& custom) {
  if (policy != RematPolicy::custom) {
    return std::string(to_string(policy));
  }
  std::vector<std::string> kept;
  for (const std::string& name : custom_remat_names()) {
    const RematPlacement p = custom.of(name);
    if (p != RematPlacement::remat) {
      kept.push_back(fmt::format("{}={}", name, to_string(p)));
    }
  }
  return kept.empty() ? std::string("custom (every name rematerialized)")
                      : fmt::format("custom: {}", fmt::join(kept, ", "));
}

}  // namespace shardplan
