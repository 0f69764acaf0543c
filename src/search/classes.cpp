// A manifest's tensors folded into classes that every mesh with as many
// expert ranks plans alike (fold_tensor_classes; include/shardplan/search.hpp).

#include <shardplan/memory.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/search.hpp>
#include <shardplan/tensor.hpp>

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace shardplan {

namespace {

// What makes tensors of one layer a class (fold_tensor_classes).
struct ClassKey {
  uint32_t key = 0;  // RuleKeys::key_of
  MemoryFacts::Kind kind = MemoryFacts::Kind::weight;
  std::optional<DType> scaled;
  int64_t layer = 0;
  int64_t expert_rank = -1;  // -1: not a per-expert tensor

  bool operator==(const ClassKey&) const = default;
};

struct ClassKeyHash {
  size_t operator()(const ClassKey& k) const noexcept {
    // Each field mixed in (boost's hash_combine, then splitmix64's
    // finalizer steps).
    auto mix = [](uint64_t h, uint64_t v) {
      h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6U) + (h >> 2U);
      h ^= h >> 30U;
      h *= 0xbf58476d1ce4e5b9ULL;
      h ^= h >> 27U;
      return h;
    };
    uint64_t h = mix(0, k.key);
    h = mix(h, static_cast<uint64_t>(k.kind));
    h = mix(h, k.scaled ? static_cast<uint64_t>(*k.scaled) + 1 : 0);
    h = mix(h, static_cast<uint64_t>(k.layer));
    h = mix(h, static_cast<uint64_t>(k.expert_rank));
    return static_cast<size_t>(h);
  }
};

}  // namespace

TensorClasses fold_tensor_classes(const Manifest& manifest,
                                  const RuleKeys& keys,
                                  const MemoryFacts& facts,
                                  int64_t expert_ranks,
                                  int64_t config_experts) {
  assert(expert_ranks >= 1);
  assert(keys.key_of.size() == manifest.size());
  assert(facts.names.size() == manifest.size());
  TensorClasses out;
  int64_t largest_expert = -1;
  for (const NameFacts& name : facts.names) {
    largest_expert = std::max(largest_expert, name.expert.value_or(-1));
  }
  out.experts = std::max(config_experts, largest_expert + 1);
  std::vector<size_t> members;  // each class's first tensor
  std::vector<int64_t> counts;
  std::unordered_map<ClassKey, size_t, ClassKeyHash> class_of;
  for (size_t t = 0; t < manifest.size(); ++t) {
    const NameFacts& name = facts.names[t];
    if (!name.layer) {
      members.push_back(t);
      counts.push_back(facts.count(t));
      continue;
    }
    ClassKey key{keys.key_of[t],
                 facts.kinds[t],
                 facts.scaled_dtype[t],
                 *name.layer,
                 name.expert
                     ? expert_rank_of(*name.expert, expert_ranks, out.experts)
                     : -1};
    auto [it, added] = class_of.try_emplace(key, members.size());
    if (added) {
      members.push_back(t);
      counts.push_back(0);
    }
    counts[it->second] += facts.count(t);
  }
  out.representatives = manifest.subset(members);
  out.keys.matches = keys.matches;
  out.keys.key_of.reserve(members.size());
  out.facts.names.reserve(members.size());
  out.facts.kinds.reserve(members.size());
  out.facts.scaled_dtype.reserve(members.size());
  for (size_t t : members) {
    out.keys.key_of.push_back(keys.key_of[t]);
    out.facts.names.push_back(facts.names[t]);
    out.facts.kinds.push_back(facts.kinds[t]);
    out.facts.scaled_dtype.push_back(facts.scaled_dtype[t]);
  }
  out.facts.counts = std::move(counts);
  return out;
}

}  // namespace shardplan
