// Name classification for the rules engine (src/rules/names.hpp): the
// patterns of a RuleSet compiled into one RE2::Set (each pattern alone as
// the fallback), the digit templates that let names differing only in digits
// no pattern tells apart share one scan (detail::digit_use,
// distinguished_digits, digit_oblivious in include/shardplan/rules.hpp), and
// the memo of classes. Also pattern_error().
//
// Speed (docs/performance.md; docs/rules.md, "Speed"): one RE2::Set scan per
// name, and none for a name whose digit template was seen before (in a
// DeepSeek-like manifest, every layer and expert number of a name shares one
// template).

#include "rules/names.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <utility>

namespace shardplan {

std::optional<std::string> pattern_error(std::string_view pattern,
                                         std::string* hint) {
  RE2 re(re2::StringPiece(pattern.data(), pattern.size()),
         rules_detail::pattern_options());
  if (re.ok()) {
    return std::nullopt;
  }
  if (hint != nullptr) {
    const std::string& e = re.error();
    if (e.find("invalid perl operator: (?=") != std::string::npos
        || e.find("invalid perl operator: (?!") != std::string::npos
        || e.find("invalid perl operator: (?<") != std::string::npos) {
      *hint = "RE2 has no lookahead or lookbehind (Python's re has)";
    } else if (e.find("invalid escape sequence: \\") != std::string::npos
               && pattern.find('\\') != std::string_view::npos) {
      const size_t at = e.find('\\');
      if (at + 1 < e.size() && e[at + 1] >= '1' && e[at + 1] <= '9') {
        *hint = "RE2 has no backreferences (Python's re has)";
      }
    }
  }
  return re.error();
}

namespace detail {

namespace {

constexpr unsigned k_all_digits = 0x3FFU;

// The digits a POSIX class ([:name:] or [:^name:]) holds: all, none, or
// nullopt for a name we do not know.
std::optional<unsigned> posix_digits(std::string_view name) {
  bool negated = false;
  if (name.starts_with('^')) {
    negated = true;
    name.remove_prefix(1);
  }
  std::optional<unsigned> digits;
  for (std::string_view all :
       {"alnum", "digit", "xdigit", "word", "graph", "print", "ascii"}) {
    digits = name == all ? std::optional<unsigned>(k_all_digits) : digits;
  }
  for (std::string_view none :
       {"alpha", "upper", "lower", "space", "punct", "cntrl", "blank"}) {
    digits = name == none ? std::optional<unsigned>(0) : digits;
  }
  if (digits && negated) {
    digits = k_all_digits & ~*digits;
  }
  return digits;
}

// At p[at] == '[': the end of the class after it, or npos for a construct
// we do not know. When the class holds some digits but not all, adds to
// `distinguished` the digits it holds or those it lacks, the fewer.
size_t class_end(std::string_view p, size_t at, unsigned& distinguished) {
  size_t j = at + 1;
  bool negated = false;
  if (j < p.size() && p[j] == '^') {
    negated = true;
    ++j;
  }
  unsigned digits = 0;
  bool first = true;
  // One member: a character (its byte), or a class escape (nullopt).
  auto member = [&](size_t& k) -> std::optional<int> {
    if (p[k] != '\\') {
      return static_cast<unsigned char>(p[k++]);
    }
    if (k + 1 >= p.size()) {
      k = std::string_view::npos;
      return std::nullopt;
    }
    const char e = p[k + 1];
    k += 2;
    if (e == 'd' || e == 'w' || e == 'S') {
      digits = k_all_digits;
      return std::nullopt;
    }
    if (e == 'D' || e == 'W' || e == 's') {
      return std::nullopt;
    }
    if (!is_alnum(e)) {
      return static_cast<unsigned char>(e);
    }
    if (e == 'n' || e == 't' || e == 'r' || e == 'f' || e == 'v' || e == 'a') {
      return 1;  // a control character: no digit
    }
    k = std::string_view::npos;  // \x, \p, octal, ...: unknown
    return std::nullopt;
  };
  while (true) {
    if (j >= p.size()) {
      return std::string_view::npos;
    }
    if (p[j] == ']' && !first) {
      ++j;
      break;
    }
    first = false;
    if (p[j] == '[' && j + 1 < p.size() && p[j + 1] == ':') {
      const size_t end = p.find(":]", j + 2);
      if (end == std::string_view::npos) {
        return end;
      }
      std::optional<unsigned> d = posix_digits(p.substr(j + 2, end - j - 2));
      if (!d) {
        return std::string_view::npos;
      }
      digits |= *d;
      j = end + 2;
      continue;
    }
    std::optional<int> lo = member(j);
    if (j == std::string_view::npos) {
      return j;
    }
    if (!lo) {
      continue;
    }
    int hi = *lo;
    if (j + 1 < p.size() && p[j] == '-' && p[j + 1] != ']') {
      ++j;
      std::optional<int> end = member(j);
      if (j == std::string_view::npos || !end) {
        return std::string_view::npos;
      }
      hi = *end;
    }
    // A multi-byte character counts by its first byte, >= 0x80 like the
    // character itself: the digits a range covers are the same.
    for (int d = '0'; d <= '9'; ++d) {
      if (*lo <= d && d <= hi) {
        digits |= 1U << static_cast<unsigned>(d - '0');
      }
    }
  }
  if (negated) {
    digits = k_all_digits & ~digits;
  }
  // Digits on one side of the class must be told from those on the other:
  // marking the smaller side leaves the rest alike (all inside the class, or
  // all outside it).
  if (digits != 0 && digits != k_all_digits) {
    distinguished |=
        std::popcount(digits) <= 5 ? digits : k_all_digits & ~digits;
  }
  return j;
}

}  // namespace

std::optional<DigitUse> digit_use(std::string_view p) {
  DigitUse use;
  // What the token before the current one was, as far as anchoring goes: a
  // literal ASCII non-digit character (its value), an anchored digit
  // literal, or anything else.
  constexpr int k_other = -1;
  constexpr int k_anchored_digit = -2;
  int before = k_other;
  size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    int token = k_other;
    if (c == '\\') {
      if (i + 1 >= p.size()) {
        return std::nullopt;
      }
      const char e = p[i + 1];
      const bool known =
          !is_alnum(e)  // escaped punctuation: one non-digit character
          || std::string_view("dDwWsSbBAzntrfva").find(e)
                 != std::string_view::npos;
      if (!known) {
        return std::nullopt;
      }
      if (!is_alnum(e) && static_cast<unsigned char>(e) < 0x80) {
        token = static_cast<unsigned char>(e);  // \. is the character '.'
      }
      i += 2;
    } else if (c == '[') {
      i = class_end(p, i, use.anywhere);
      if (i == std::string_view::npos) {
        return std::nullopt;
      }
    } else if (c == '{') {
      // {n}, {n,}, {n,m}: counts, not characters; else a literal '{'.
      size_t j = i + 1;
      while (j < p.size() && is_digit(p[j])) {
        ++j;
      }
      if (j > i + 1 && j < p.size() && p[j] == ',') {
        ++j;
        while (j < p.size() && is_digit(p[j])) {
          ++j;
        }
      }
      const bool count = j > i + 1 && j < p.size() && p[j] == '}';
      token = count ? k_other : '{';
      i = count ? j + 1 : i + 1;
    } else if (c == '(' && i + 1 < p.size() && p[i + 1] == '?') {
      size_t j = i + 2;
      if (j + 1 < p.size() && p[j] == 'P' && p[j + 1] == '<') {
        const size_t end = p.find('>', j + 2);  // a group name
        if (end == std::string_view::npos) {
          return std::nullopt;
        }
        i = end + 1;
        before = k_other;
        continue;
      }
      while (j < p.size()
             && std::string_view("imsU-").find(p[j])
                    != std::string_view::npos) {
        ++j;
      }
      if (j >= p.size() || (p[j] != ')' && p[j] != ':')) {
        return std::nullopt;
      }
      i = j + 1;
    } else if (is_digit(c)) {
      const unsigned bit = 1U << static_cast<unsigned>(c - '0');
      if (before >= 0 || before == k_anchored_digit) {
        // Right after a literal character: it matches only a digit that
        // follows that character in the name.
        use.anchored |= bit;
        if (before >= 0) {
          const auto a = static_cast<unsigned char>(before);
          use.anchors[a] = true;
          // (?i) would let a letter match its other case too.
          if (is_alpha(static_cast<char>(a))) {
            use.anchors[a ^ 0x20U] = true;
          }
        }
        token = k_anchored_digit;
      } else {
        use.anywhere |= bit;
      }
      ++i;
    } else {
      // . | ( ) * + ? ^ $ are not characters; the rest are literals.
      const bool meta =
          std::string_view(".|()*+?^$").find(c) != std::string_view::npos;
      if (!meta && static_cast<unsigned char>(c) < 0x80) {
        token = static_cast<unsigned char>(c);
      }
      ++i;
    }
    before = token;
  }
  return use;
}

std::optional<unsigned> distinguished_digits(std::string_view pattern) {
  std::optional<DigitUse> use = digit_use(pattern);
  if (!use) {
    return std::nullopt;
  }
  return use->anywhere | use->anchored;
}

bool digit_oblivious(std::string_view pattern) {
  return distinguished_digits(pattern) == 0U;
}

}  // namespace detail

namespace rules_detail {

RE2::Options pattern_options() {
  RE2::Options options;
  options.set_log_errors(false);  // RE2 would print to stderr
  options.set_max_mem(int64_t{64} << 20);
  return options;
}

size_t NameClassifier::MatchesHash::operator()(
    const std::vector<int>& v) const noexcept {
  // Used only with more than k_mask_patterns patterned rules.
  uint64_t h = v.size();
  for (int i : v) {
    h = mix(h, static_cast<uint64_t>(i));
  }
  return static_cast<size_t>(h);
}

bool NameClassifier::compile(Diagnostics& diags) {
  bool ok = true;
  m_set = std::make_unique<RE2::Set>(pattern_options(), RE2::UNANCHORED);
  for (size_t i = 0; i < m_rules.rules.size(); ++i) {
    const Rule& rule = m_rules.rules[i];
    if (!rule.pattern) {
      continue;
    }
    const re2::StringPiece text(rule.pattern->data(), rule.pattern->size());
    std::string error;
    if (m_set->Add(text, &error) < 0) {
      std::string hint;
      std::optional<std::string> why = pattern_error(*rule.pattern, &hint);
      Diagnostic& d =
          diags.error("rules.bad-pattern",
                      fmt::format("pattern {} does not compile: {}",
                                  quote(*rule.pattern),
                                  why.value_or(error)),
                      Location::at(m_rules.source, rule.pointer + "/pattern"));
      d.hint = hint;
      ok = false;
      continue;
    }
    m_rule_of_pattern.push_back(static_cast<int>(i));
  }
  if (!ok) {
    return false;
  }
  if (m_rule_of_pattern.empty() || !m_set->Compile()) {
    m_set.reset();  // no patterns, or the set is too large: one at a time
  }
  plan_memo();
  return true;
}

void NameClassifier::plan_memo() {
  // Digits that no pattern tells apart match alike: names that differ only
  // in them share a class (detail::digit_use says where each applies).
  std::optional<detail::DigitUse> use = detail::DigitUse{};
  for (const Rule& r : m_rules.rules) {
    if (r.pattern) {
      std::optional<detail::DigitUse> u = detail::digit_use(*r.pattern);
      if (!u) {
        use.reset();
        break;
      }
      *use |= *u;
    }
  }
  // Alike in a run of digits after an anchor, and in any other run.
  const unsigned alike_anchored =
      use ? ~(use->anywhere | use->anchored) & 0x3FFU : 0U;
  const unsigned alike_free = use ? ~use->anywhere & 0x3FFU : 0U;
  m_memo = !m_rule_of_pattern.empty() && std::popcount(alike_free) >= 2;
  if (m_memo) {
    auto fill = [](std::array<char, 10>& map, unsigned alike) {
      const char first =
          static_cast<char>('0' + (alike == 0 ? 0 : std::countr_zero(alike)));
      for (unsigned d = 0; d < 10; ++d) {
        map[d] = (alike >> d & 1U) != 0 ? first : static_cast<char>('0' + d);
      }
    };
    fill(m_anchored_map, alike_anchored);
    fill(m_free_map, alike_free);
    m_anchors = use->anchors;
  }
}

void NameClassifier::match(std::string_view name, std::vector<int>& out) const {
  out.clear();
  if (m_rule_of_pattern.empty()) {
    return;
  }
  const re2::StringPiece text(name.data(), name.size());
  RE2::Set::ErrorInfo info{RE2::Set::kNoError};
  if (m_set
      && (m_set->Match(text, &out, &info) || info.kind == RE2::Set::kNoError)) {
    return;
  }
  // No set, or its DFA ran out of memory on this name: one pattern at a time.
  out.clear();
  if (m_single.empty()) {
    for (int rule : m_rule_of_pattern) {
      const std::string& pattern =
          *m_rules.rules[static_cast<size_t>(rule)].pattern;
      m_single.push_back(std::make_unique<RE2>(
          re2::StringPiece(pattern.data(), pattern.size()), pattern_options()));
    }
  }
  for (size_t p = 0; p < m_single.size(); ++p) {
    if (RE2::PartialMatch(text, *m_single[p])) {
      out.push_back(static_cast<int>(p));
    }
  }
}

uint64_t NameClassifier::classify(std::string_view name) {
  if (!m_memo) {
    return scan(name);
  }
  m_normalised.assign(name);
  const std::array<char, 10>* map = &m_free_map;
  for (size_t i = 0; i < m_normalised.size(); ++i) {
    const char c = m_normalised[i];
    if (!is_digit(c)) {
      continue;
    }
    if (i == 0 || !is_digit(m_normalised[i - 1])) {
      // A run of digits starts: after an anchor, or after anything else.
      map = i > 0 && m_anchors[static_cast<unsigned char>(name[i - 1])]
                ? &m_anchored_map
                : &m_free_map;
    }
    m_normalised[i] = (*map)[static_cast<unsigned>(c - '0')];
  }
  if (auto it = m_memo_classes.find(std::string_view(m_normalised));
      it != m_memo_classes.end()) {
    return it->second;
  }
  const uint64_t cls = scan(m_normalised);
  if (m_memo_classes.size() < k_memo_names) {
    m_memo_classes.emplace(m_normalised, cls);
  } else {
    // Names that share no template: the lookups cost more than they save.
    m_memo = false;
    m_memo_classes = {};
  }
  return cls;
}

uint64_t NameClassifier::scan(std::string_view name) {
  match(name, m_matches);
  if (m_rule_of_pattern.size() <= k_mask_patterns) {
    uint64_t mask = 0;
    for (int p : m_matches) {
      mask |= uint64_t{1} << static_cast<unsigned>(p);
    }
    return mask;
  }
  std::sort(m_matches.begin(), m_matches.end());
  auto it = m_class_ids.find(m_matches);
  if (it != m_class_ids.end()) {
    return it->second;
  }
  const uint64_t id = m_classes.size();
  std::vector<char> flags(m_rules.rules.size(), 0);
  for (int p : m_matches) {
    flags[static_cast<size_t>(m_rule_of_pattern[static_cast<size_t>(p)])] = 1;
  }
  m_classes.push_back(std::move(flags));
  m_class_ids.emplace(m_matches, id);
  return id;
}

std::vector<char> NameClassifier::flags_of(uint64_t cls) const {
  if (m_rule_of_pattern.size() > k_mask_patterns) {
    assert(cls < m_classes.size());
    return m_classes[cls];
  }
  std::vector<char> flags(m_rules.rules.size(), 0);
  for (size_t p = 0; p < m_rule_of_pattern.size(); ++p) {
    if ((cls >> p & 1U) != 0) {
      flags[static_cast<size_t>(m_rule_of_pattern[p])] = 1;
    }
  }
  return flags;
}

}  // namespace rules_detail

}  // namespace shardplan
