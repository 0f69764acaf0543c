// Placement of tensors on pipeline stages and of whole experts on expert
// ranks (DESIGN.md 8; docs/memory.md, "Pipeline stages and expert
// placement"): name_facts, place_tensors.

#include <shardplan/memory.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

namespace {

__extension__ typedef __int128 int128;  // GCC and clang

constexpr std::array<std::string_view, 5> k_layer_words{
    "layers", "layer", "h", "blocks", "block"};

bool is_layer_word(std::string_view component) {
  return std::find(k_layer_words.begin(), k_layer_words.end(), component)
         != k_layer_words.end();
}

// A component of digits only, at most 18 of them.
std::optional<int64_t> parse_index(std::string_view text) {
  if (text.empty() || text.size() > 18) {
    return std::nullopt;
  }
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    value = value * 10 + (c - '0');
  }
  return value;
}

// Whether `spec` splits some dim over one of `axes`.
bool splits_over(const PartitionSpec* spec,
                 const std::vector<std::string>& axes) {
  if (spec == nullptr) {
    return false;
  }
  for (const DimSharding& dim : spec->dims) {
    for (const std::string& axis : dim.axes) {
      if (std::find(axes.begin(), axes.end(), axis) != axes.end()) {
        return true;
      }
    }
  }
  return false;
}

// "stage axis "pp" (4 stages)", "stage axes "pp" x "stage" (8 stages)".
std::string axes_text(std::string_view role,
                      const std::vector<std::string>& axes,
                      int64_t size,
                      std::string_view unit) {
  std::vector<std::string> names;
  names.reserve(axes.size());
  for (const std::string& a : axes) {
    names.push_back(quote(a));
  }
  return fmt::format("{} ax{}s {} ({} {}{})",
                     role,
                     axes.size() == 1 ? "i" : "e",
                     fmt::join(names, " x "),
                     size,
                     unit,
                     size == 1 ? "" : "s");
}

// The stages divide L, and the expert ranks are at most N; each reported
// at its source. L and N are the manifest's largest layer and expert
// indices plus 1 unless the options say more.
bool check_counts(const Placement& out,
                  const PlacementOptions& options,
                  int64_t largest_layer,
                  int64_t largest_expert,
                  Diagnostics& diags) {
  if (out.stages > 1 && out.layers > 0 && out.layers % out.stages != 0) {
    const std::string axes =
        axes_text("stage", out.stage_axes, out.stages, "stage");
    diags
        .error("memory.stage-indivisible",
               fmt::format("{} {} not divide the {} decoder layers ({})",
                           axes,
                           out.stage_axes.size() == 1 ? "does" : "do",
                           out.layers,
                           out.layers_from_config
                               ? std::string("of the model config")
                               : fmt::format("the manifest's largest layer "
                                             "index {}, plus 1",
                                             largest_layer)),
               Location::of(options.stage_source))
        .hint = fmt::format(
        "a stage holds L / S whole layers: use stages that divide {}",
        out.layers);
    return false;
  }
  if (out.expert_ranks > 1 && out.experts > 0
      && out.expert_ranks > out.experts) {
    const std::string axes =
        axes_text("expert", out.expert_axes, out.expert_ranks, "rank");
    diags
        .error("memory.expert-axis-too-large",
               fmt::format("{} {} larger than the {} experts ({})",
                           axes,
                           out.expert_axes.size() == 1 ? "is" : "are",
                           out.experts,
                           options.experts && *options.experts >= out.experts
                               ? std::string("of the model config")
                               : fmt::format("the manifest's largest expert "
                                             "index {}, plus 1",
                                             largest_expert)),
               Location::of(options.expert_source))
        .hint = fmt::format(
        "a rank holds whole experts: use at most {} expert ranks", out.experts);
    return false;
  }
  return true;
}

// The stage and expert rank of each tensor (place_tensors).
void place_each(Placement& out,
                const std::vector<TensorSharding>& shardings,
                std::span<const NameFacts> facts) {
  out.tensors.resize(shardings.size());
  for (size_t t = 0; t < shardings.size(); ++t) {
    const PartitionSpec* spec = shardings[t].spec();
    TensorPlacement& p = out.tensors[t];
    const NameFacts& name = facts[t];
    if (out.stages > 1 && !splits_over(spec, out.stage_axes)) {
      if (const std::optional<int64_t>& i = name.layer) {
        // floor(i x S / L) for i < L; S <= devices and i < L <= 10^18: use
        // the quotient form, exact since S divides L.
        p.stage =
            *i < out.layers ? *i / (out.layers / out.stages) : out.stages - 1;
      } else if (name.embedding) {
        p.stage = 0;
      } else if (!name.stacked) {
        p.stage = out.stages - 1;
      }
    }
    if (out.expert_ranks > 1 && !splits_over(spec, out.expert_axes)) {
      if (const std::optional<int64_t>& e = name.expert) {
        p.expert_rank = expert_rank_of(*e, out.expert_ranks, out.experts);
      }
    }
  }
}

}  // namespace

NameFacts name_facts(std::string_view name) {
  NameFacts out;
  bool layer_word = false;  // a layer word that no number followed
  bool after_layer_word = false;
  bool after_experts = false;
  // Components end at '.' or '/'; most names have no '/', and a search
  // for one character is fast (memchr).
  const bool slashes = name.find('/') != std::string_view::npos;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end =
        slashes ? name.find_first_of("./", start) : name.find('.', start);
    end = end == std::string_view::npos ? name.size() : end;
    const std::string_view component = name.substr(start, end - start);
    if (after_layer_word && !out.layer) {
      out.layer = parse_index(component);
      if (out.layer) {
        out.layer_prefix_end = end;
      } else {
        layer_word = true;
      }
    }
    if (after_experts && !out.expert) {
      out.expert = parse_index(component);
    }
    // Most components are none of these: test their first and last
    // characters before the words (a plan may have a million names).
    const char first = component.empty() ? '\0' : component.front();
    const char last = component.empty() ? '\0' : component.back();
    after_layer_word = (first == 'l' || first == 'h' || first == 'b')
                       && is_layer_word(component);
    after_experts = first == 'e' && component == "experts";
    out.embedding =
        out.embedding
        || (first == 'e' && component.starts_with("embed")
            && component != "embed_out")
        || ((last == 's' || last == 'g')
            && (component.ends_with("_embeddings")
                || component.ends_with("_embedding")))
        || (first == 'w' && (component == "wte" || component == "wpe"));
    start = end + 1;
  }
  // A layer word at the very end is followed by no number either.
  out.stacked = !out.layer && (layer_word || after_layer_word);
  return out;
}

std::optional<int64_t> layer_index(std::string_view name, size_t* prefix_end) {
  const NameFacts facts = name_facts(name);
  if (facts.layer && prefix_end != nullptr) {
    *prefix_end = facts.layer_prefix_end;
  }
  return facts.layer;
}

bool is_stacked_layers_name(std::string_view name) {
  return name_facts(name).stacked;
}

std::optional<int64_t> expert_index(std::string_view name) {
  return name_facts(name).expert;
}

bool is_embedding_name(std::string_view name) {
  return name_facts(name).embedding;
}

int64_t expert_rank_of(int64_t expert, int64_t ranks, int64_t experts) {
  assert(0 <= expert && expert < experts && ranks >= 1);
  // E < N and R, both int64, so the product fits in 128 bits; the quotient
  // is below R.
  return static_cast<int64_t>(static_cast<int128>(expert) * ranks / experts);
}

std::optional<Placement> place_tensors(
    const Manifest& manifest,
    const Mesh& mesh,
    const std::vector<TensorSharding>& shardings,
    const PlacementOptions& options,
    Diagnostics& diags) {
  return place_tensors(manifest, mesh, shardings, options, {}, diags);
}

std::optional<Placement> place_tensors(
    const Manifest& manifest,
    const Mesh& mesh,
    const std::vector<TensorSharding>& shardings,
    const PlacementOptions& options,
    std::span<const NameFacts> facts,
    Diagnostics& diags) {
  assert(shardings.size() == manifest.size());
  assert(facts.empty() || facts.size() == manifest.size());
  Placement out;
  // The axes in mesh order, and their sizes' product (it divides the
  // device count: no overflow).
  for (const MeshAxis& axis : mesh.axes) {
    auto listed = [&](const std::vector<std::string>& names) {
      return std::find(names.begin(), names.end(), axis.name) != names.end();
    };
    if (listed(options.stage_axes)) {
      out.stage_axes.push_back(axis.name);
      out.stages *= axis.size;
    } else if (listed(options.expert_axes)) {
      out.expert_axes.push_back(axis.name);
      out.expert_ranks *= axis.size;
    }
  }

  if (out.stages == 1 && out.expert_ranks == 1) {
    return out;  // nothing to place: L and N are not needed
  }
  // L and N: from the options, or from the names.
  const std::vector<Tensor>& tensors = manifest.tensors();
  std::vector<NameFacts> own;
  if (facts.empty()) {
    own.reserve(tensors.size());
    for (const Tensor& tensor : tensors) {
      own.push_back(name_facts(tensor.name));
    }
    facts = own;
  }
  int64_t largest_layer = -1;
  int64_t largest_expert = -1;
  for (const NameFacts& name : facts) {
    largest_layer = std::max(largest_layer, name.layer.value_or(-1));
    largest_expert = std::max(largest_expert, name.expert.value_or(-1));
  }
  out.layers_from_config = options.layers.has_value();
  out.layers = options.layers ? *options.layers : largest_layer + 1;
  out.experts = std::max(options.experts.value_or(0), largest_expert + 1);

  if (!check_counts(out, options, largest_layer, largest_expert, diags)) {
    return std::nullopt;
  }
  place_each(out, shardings, facts);
  return out;
}

}  // namespace shardplan
