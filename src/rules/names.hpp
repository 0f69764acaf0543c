#pragma once

// Layer 4, internal: name classification for the rules engine
// (rules/names.cpp). A NameClassifier matches a name against every pattern
// of a RuleSet in one RE2::Set scan and gives the name's class: names of one
// class match the same patterns. Names that differ only in digits no pattern
// tells apart (detail::digit_use) are classified once.

#include <shardplan/diag.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/tensor.hpp>

#include <re2/re2.h>
#include <re2/set.h>

#include <array>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace shardplan::rules_detail {

// The options every pattern compiles with (no logging to stderr, 64 MiB).
RE2::Options pattern_options();

// splitmix64's finaliser over the running hash `h` and the next value.
inline uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t z = h ^ (v + 0x9E3779B97F4A7C15ULL + (h << 6U) + (h >> 2U));
  z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31U);
}

class NameClassifier {
 public:
  // The class of tensors that reach no rule (scalars and tensors under
  // min_size, decided by their shape alone); classify() never gives it.
  static constexpr uint64_t k_no_scan_class = ~uint64_t{0};

  // REQUIRES: `rules` outlives the classifier.
  explicit NameClassifier(const RuleSet& rules) : m_rules(rules) {}

  // Compiles the patterns of the rules: false when one does not compile,
  // reported as rules.bad-pattern at the rule's "/pattern".
  bool compile(Diagnostics& diags);

  // The class of the patterns `name` matches. When the patterns leave some
  // digits alike, remembered per name with those digits made one.
  // REQUIRES: compile() returned true.
  uint64_t classify(std::string_view name);

  // Per rule (index in RuleSet::rules), whether its pattern matches the
  // names of class `cls` (0 for a rule without a pattern).
  // REQUIRES: `cls` came from classify().
  std::vector<char> flags_of(uint64_t cls) const;

 private:
  // Up to this many patterned rules, the class of a name is the bitmask of
  // the patterns that match it (no lookup); beyond, an interned id.
  static constexpr size_t k_mask_patterns = 63;
  // At most this many digit-normalised names are remembered.
  static constexpr size_t k_memo_names = size_t{1} << 16;

  struct MatchesHash {
    size_t operator()(const std::vector<int>& v) const noexcept;
  };

  // Sets up the memo of classes from the digits the patterns use.
  void plan_memo();
  // The class of `name`, from one scan.
  uint64_t scan(std::string_view name);
  // The set indices of the patterns `name` matches, unsorted, into `out`.
  void match(std::string_view name, std::vector<int>& out) const;

  const RuleSet& m_rules;
  // Patterns: the set, the rule of each set index, and each pattern alone,
  // compiled on first need (a set too large to compile, or a name the set's
  // DFA runs out of memory on).
  std::unique_ptr<RE2::Set> m_set;
  std::vector<int> m_rule_of_pattern;
  mutable std::vector<std::unique_ptr<RE2>> m_single;
  // The set indices of the patterns the last name matched.
  std::vector<int> m_matches;
  // Classes by digit-normalised name (see detail::digit_use), while the
  // patterns leave at least two digits alike and it stays below
  // k_memo_names names. In a run of digits that follows one of m_anchors,
  // m_anchored_map maps each digit no pattern tells apart to the smallest
  // of them, and the others to themselves; in any other run, m_free_map
  // does the same for the digits no pattern tells apart but right after an
  // anchor.
  bool m_memo = false;
  std::array<char, 10> m_anchored_map{};
  std::array<char, 10> m_free_map{};
  std::bitset<256> m_anchors;
  std::string m_normalised;
  std::unordered_map<std::string, uint64_t, detail::StringHash, std::equal_to<>>
      m_memo_classes;
  // With more than k_mask_patterns patterns: interned sorted lists of
  // matching patterns, and the per-rule flags of each class id.
  std::unordered_map<std::vector<int>, uint64_t, MatchesHash> m_class_ids;
  std::vector<std::vector<char>> m_classes;
};

}  // namespace shardplan::rules_detail
