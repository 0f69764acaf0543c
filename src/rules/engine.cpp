// The rules engine: selectors, yields, fallthrough, the decision cache and
// explain (include/shardplan/rules.hpp, docs/rules.md). The seed algorithms
// are in rules/algorithms.cpp.
//
// Speed (DESIGN.md 7). Per tensor: one RE2::Set scan of the name gives every
// rule whose pattern matches; those rules, the shape, the dtype and (when a
// rule reads them) the logical axes form the key of a decision, computed
// once and shared by every tensor with the same key. A DeepSeek-like
// manifest of 100k tensors has a few hundred keys.

#include <shardplan/rules.hpp>

#include <fmt/format.h>
#include <re2/re2.h>
#include <re2/set.h>

#include <algorithm>
#include <array>
#include <bit>
#include <bitset>
#include <cassert>
#include <cmath>
#include <memory>
#include <unordered_map>
#include <utility>

namespace shardplan {

namespace {

constexpr size_t k_description_pattern_bytes = 40;

RE2::Options pattern_options() {
  RE2::Options options;
  options.set_log_errors(false);  // RE2 would print to stderr
  options.set_max_mem(int64_t{64} << 20);
  return options;
}

// At most `limit` bytes of `s`, cut on a UTF-8 code point boundary.
std::string clip(std::string_view s, size_t limit) {
  if (s.size() <= limit) {
    return std::string(s);
  }
  size_t n = limit;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0U) == 0x80U) {
    --n;
  }
  return std::string(s.substr(0, n)) + "...";
}

std::string shape_pattern_text(const ShapePattern& pattern) {
  std::vector<std::string> parts;
  parts.reserve(pattern.size());
  for (const std::optional<int64_t>& d : pattern) {
    parts.push_back(d ? std::to_string(*d) : "null");
  }
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

Location at(const std::string& source, std::string pointer) {
  Location loc;
  loc.source = source;
  loc.pointer = std::move(pointer);
  return loc;
}

}  // namespace

std::string_view yield_name(const RuleYield& yield) {
  return yield_names()[yield.index()];
}

const std::vector<std::string>& yield_names() {
  // The order of the RuleYield alternatives.
  static const std::vector<std::string> names = {"spec",
                                                 "replicate",
                                                 "logical_axes",
                                                 "fsdp",
                                                 "auto",
                                                 "memory",
                                                 "mesh_helper",
                                                 "shape_patterns"};
  return names;
}

std::optional<std::string> pattern_error(std::string_view pattern,
                                         std::string* hint) {
  RE2 re(re2::StringPiece(pattern.data(), pattern.size()), pattern_options());
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
      const size_t at = e.find("\\");
      if (at + 1 < e.size() && e[at + 1] >= '1' && e[at + 1] <= '9') {
        *hint = "RE2 has no backreferences (Python's re has)";
      }
    }
  }
  return re.error();
}

namespace detail {

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_alpha(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_alnum(char c) {
  return is_digit(c) || is_alpha(c);
}

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
          if (is_alpha(before)) {
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

std::string describe_rule(const RuleSet& rules, size_t index) {
  assert(index < rules.rules.size());
  const Rule& rule = rules.rules[index];
  std::string out = fmt::format("#{}", index);
  if (rule.pattern) {
    out +=
        " pattern " + quote(clip(*rule.pattern, k_description_pattern_bytes));
  }
  if (rule.shape) {
    out += " shape " + shape_pattern_text(*rule.shape);
  }
  if (rule.min_elements) {
    out += fmt::format(" min_elements {}", *rule.min_elements);
  }
  out += ' ';
  out += yield_name(rule.yield);
  return out;
}

std::string_view to_string(RuleOutcome outcome) {
  switch (outcome) {
    case RuleOutcome::no_match:
      return "no_match";
    case RuleOutcome::not_applicable:
      return "not_applicable";
    case RuleOutcome::fell_through:
      return "fell_through";
    case RuleOutcome::decided:
      return "decided";
    case RuleOutcome::error:
      return "error";
    case RuleOutcome::not_tried:
      return "not_tried";
  }
  return "no_match";
}

namespace {

// What the engine needs of a tensor.
struct TensorFacts {
  ShapeView shape;
  DType dtype = DType::f32;
  int64_t num_elements = 0;
  const LogicalAxes* logical_axes = nullptr;
};

// A problem a decision causes for every tensor that has it.
enum class Problem { none, unmatched, rank, duplicate_logical, conflict };

struct Outcome {
  RuleDecision decision;
  Problem problem = Problem::none;
  std::string detail;   // what the message needs besides the tensor
  std::string pointer;  // where in the rules file (rank), or the logical
                        // name (duplicate_logical)
  bool memory_unmet = false;
};

// What a yield gave for one tensor.
struct YieldResult {
  enum class Status { ok, not_applicable, error } status = Status::ok;
  PartitionSpec spec;
  std::string reason;  // not_applicable / error
  Problem problem = Problem::none;
  std::string detail;
  std::string pointer;
  bool memory_unmet = false;
};

// Key of a decision: the class of pattern matches, dtype, shape and (when a
// rule reads them) logical axes.
struct KeyView {
  uint64_t match_class = 0;
  DType dtype = DType::f32;
  ShapeView shape;
  const LogicalAxes* logical_axes = nullptr;
};

struct Key {
  uint64_t match_class = 0;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::optional<LogicalAxes> logical_axes;

  explicit Key(const KeyView& v)
      : match_class(v.match_class),
        dtype(v.dtype),
        shape(v.shape.begin(), v.shape.end()) {
    if (v.logical_axes != nullptr) {
      logical_axes = *v.logical_axes;
    }
  }
  KeyView view() const {
    return KeyView{match_class,
                   dtype,
                   ShapeView(shape),
                   logical_axes ? &*logical_axes : nullptr};
  }
};

uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix64's finaliser over the running hash and the next value.
  uint64_t z = h ^ (v + 0x9E3779B97F4A7C15ULL + (h << 6U) + (h >> 2U));
  z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31U);
}

struct KeyHash {
  using is_transparent = void;
  size_t operator()(const KeyView& k) const noexcept {
    uint64_t h = mix(k.match_class, static_cast<uint64_t>(k.dtype));
    h = mix(h, k.shape.size());
    for (int64_t d : k.shape) {
      h = mix(h, static_cast<uint64_t>(d));
    }
    if (k.logical_axes != nullptr) {
      for (const std::optional<std::string>& name : *k.logical_axes) {
        h = mix(h, name ? std::hash<std::string>{}(*name) : 0x51ULL);
      }
    }
    return static_cast<size_t>(h);
  }
  size_t operator()(const Key& k) const noexcept { return (*this)(k.view()); }
};

struct KeyEqual {
  using is_transparent = void;
  static bool same(const KeyView& a, const KeyView& b) {
    if (a.match_class != b.match_class || a.dtype != b.dtype
        || !(a.shape == b.shape)
        || (a.logical_axes == nullptr) != (b.logical_axes == nullptr)) {
      return false;
    }
    return a.logical_axes == nullptr || *a.logical_axes == *b.logical_axes;
  }
  bool operator()(const Key& a, const Key& b) const {
    return same(a.view(), b.view());
  }
  bool operator()(const KeyView& a, const Key& b) const {
    return same(a, b.view());
  }
  bool operator()(const Key& a, const KeyView& b) const {
    return same(a.view(), b);
  }
};

struct MatchesHash {
  // Used only with more than k_mask_patterns patterned rules.
  size_t operator()(const std::vector<int>& v) const noexcept {
    uint64_t h = v.size();
    for (int i : v) {
      h = mix(h, static_cast<uint64_t>(i));
    }
    return static_cast<size_t>(h);
  }
};

// The class of pattern matches of tensors that reach no rule (scalars and
// tensors under min_size, decided by their shape alone).
constexpr uint64_t k_no_scan_class = ~uint64_t{0};

// Up to this many patterned rules, the class of a name is the bitmask of the
// patterns that match it (no lookup); beyond, an interned id.
constexpr size_t k_mask_patterns = 63;

class Engine {
 public:
  Engine(const Mesh& mesh, const RuleSet& rules, Diagnostics& diags)
      : m_mesh(mesh), m_rules(rules), m_diags(diags) {}

  // Checks the rules against the mesh and compiles the patterns; false
  // (reported) on an input error.
  bool prepare();

  // Whether any rule reads the tensor's own logical axes.
  bool reads_logical_axes() const { return m_reads_logical_axes; }

  // The class of the patterns `name` matches: tensors of one class, shape,
  // dtype (and logical axes) share a decision. When every pattern is
  // digit-oblivious, remembered per name with its digits made '0'.
  uint64_t classify(std::string_view name);

  // Decides a tensor whose pattern matches are class `cls`.
  Outcome decide(const TensorFacts& t, uint64_t cls, RuleTrace* trace) const;

 private:
  bool check_axes(const std::vector<AxisRef>& axes,
                  std::string_view what,
                  bool report_unknown);
  bool check_spec(const RuleSpec& spec);
  RuleRef ref(size_t index) const {
    return RuleRef{Decider::rule, index, describe_rule(m_rules, index)};
  }
  // The names of `axes`; in a preset without those the mesh lacks.
  std::vector<std::string> names_of(const std::vector<AxisRef>& axes,
                                    Trace* trace) const;
  bool selectors_match(size_t index,
                       const TensorFacts& t,
                       const std::vector<char>& matched,
                       std::string* why_not) const;
  YieldResult apply_yield(const Rule& rule,
                          const TensorFacts& t,
                          Trace* trace) const;
  YieldResult apply_spec(const RuleSpec& spec,
                         const TensorFacts& t,
                         Trace* trace) const;

  const Mesh& m_mesh;
  const RuleSet& m_rules;
  Diagnostics& m_diags;
  bool m_reads_logical_axes = false;
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
  static constexpr size_t k_memo_names = size_t{1} << 16;
  uint64_t scan(std::string_view name);
  // With more than k_mask_patterns patterns: interned sorted lists of
  // matching rules, and the per-rule flags of each class id.
  std::unordered_map<std::vector<int>, uint64_t, MatchesHash> m_class_ids;
  std::vector<std::vector<char>> m_classes;

  // The set indices of the patterns `name` matches, unsorted, into `out`.
  void match(std::string_view name, std::vector<int>& out) const;
  // Per rule, whether its pattern is in class `cls`.
  std::vector<char> flags_of(uint64_t cls) const;
};

bool Engine::check_axes(const std::vector<AxisRef>& axes,
                        std::string_view what,
                        bool report_unknown) {
  bool ok = true;
  for (size_t i = 0; i < axes.size(); ++i) {
    const AxisRef& a = axes[i];
    for (size_t j = 0; j < i; ++j) {
      if (axes[j].name == a.name) {
        m_diags.error(
            "rules.duplicate-axis",
            fmt::format("axis {} appears twice in {}", quote(a.name), what),
            at(m_rules.source, a.pointer));
        ok = false;
      }
    }
    if (report_unknown && m_mesh.find(a.name) == nullptr) {
      Diagnostic& d =
          m_diags.error("rules.unknown-axis",
                        fmt::format("unknown axis {}", quote(a.name)),
                        at(m_rules.source, a.pointer));
      const std::vector<std::string> names = m_mesh.axis_names();
      std::string near = closest_match(a.name, names);
      if (!near.empty()) {
        d.hint = fmt::format("did you mean {}?", quote(near));
      } else {
        std::vector<std::string> quoted;
        for (const std::string& n : names) {
          quoted.push_back(quote(n));
        }
        d.hint = fmt::format("the mesh's axes are {}", fmt::join(quoted, ", "));
      }
      ok = false;
    }
  }
  return ok;
}

bool Engine::check_spec(const RuleSpec& spec) {
  std::vector<AxisRef> all;
  for (const std::vector<AxisRef>& dim : spec.dims) {
    all.insert(all.end(), dim.begin(), dim.end());
  }
  return check_axes(all, "one spec", !m_rules.preset);
}

bool Engine::prepare() {
  const bool strict = !m_rules.preset;
  bool ok = true;
  auto bad_value = [&](const std::string& pointer, std::string message) {
    m_diags.error(
        "rules.bad-value", std::move(message), at(m_rules.source, pointer));
    ok = false;
  };
  if (m_rules.min_size < 0) {
    bad_value("/min_size",
              fmt::format("min_size must be >= 0, got {}", m_rules.min_size));
  }
  for (const Rule& rule : m_rules.rules) {
    if (rule.min_elements && *rule.min_elements < 0) {
      bad_value(
          rule.pointer + "/min_elements",
          fmt::format("min_elements must be >= 0, got {}", *rule.min_elements));
    }
    if (const auto* s = std::get_if<SpecYield>(&rule.yield)) {
      ok = check_spec(s->spec) && ok;
    } else if (const auto* l = std::get_if<LogicalAxesYield>(&rule.yield)) {
      m_reads_logical_axes = m_reads_logical_axes || l->from_manifest;
    } else if (const auto* f = std::get_if<FsdpYield>(&rule.yield)) {
      ok = check_axes(f->axes, "the fsdp axis", strict) && ok;
      if (f->axes.empty()) {
        bad_value(rule.pointer + "/fsdp/axis", "fsdp needs an axis");
      }
      if (!(f->min_size_mb >= 0) || !std::isfinite(f->min_size_mb)) {
        bad_value(rule.pointer + "/fsdp/min_size_mb",
                  fmt::format("min_size_mb must be a number >= 0, got {}",
                              f->min_size_mb));
      }
    } else if (const auto* a = std::get_if<AutoYield>(&rule.yield)) {
      if (a->axes) {
        ok = check_axes(*a->axes, "the axes of auto", strict) && ok;
      }
      if (a->min_shard_size && *a->min_shard_size < 0) {
        bad_value(rule.pointer + "/auto/min_shard_size",
                  "min_shard_size must be >= 0");
      }
    } else if (const auto* m = std::get_if<MemoryYield>(&rule.yield)) {
      if (m->axes) {
        ok = check_axes(*m->axes, "the axes of memory", strict) && ok;
      }
      if (m->max_bytes_per_device < 0) {
        bad_value(rule.pointer + "/memory/max_bytes_per_device",
                  "max_bytes_per_device must be >= 0");
      }
    } else if (const auto* h = std::get_if<MeshHelperYield>(&rule.yield)) {
      if (h->min_shard_size < 0) {
        bad_value(rule.pointer + "/mesh_helper/min_shard_size",
                  "min_shard_size must be >= 0");
      }
    } else if (const auto* p = std::get_if<ShapePatternsYield>(&rule.yield)) {
      for (const ShapePatternsYield::Entry& e : p->patterns) {
        ok = check_spec(e.spec) && ok;
      }
    }
  }
  for (const LogicalAxisRule& rule : m_rules.logical_axis_rules) {
    ok = check_axes(rule.axes, "one logical axis rule", strict) && ok;
  }

  // Patterns: one set.
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
          m_diags.error("rules.bad-pattern",
                        fmt::format("pattern {} does not compile: {}",
                                    quote(*rule.pattern),
                                    why.value_or(error)),
                        at(m_rules.source, rule.pointer + "/pattern"));
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
  return true;
}

void Engine::match(std::string_view name, std::vector<int>& out) const {
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

uint64_t Engine::classify(std::string_view name) {
  if (!m_memo) {
    return scan(name);
  }
  m_normalised.assign(name);
  const std::array<char, 10>* map = &m_free_map;
  for (size_t i = 0; i < m_normalised.size(); ++i) {
    const char c = m_normalised[i];
    if (c < '0' || c > '9') {
      continue;
    }
    if (i == 0 || !detail::is_digit(m_normalised[i - 1])) {
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

uint64_t Engine::scan(std::string_view name) {
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

std::vector<char> Engine::flags_of(uint64_t cls) const {
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

std::vector<std::string> Engine::names_of(const std::vector<AxisRef>& axes,
                                          Trace* trace) const {
  std::vector<std::string> out;
  out.reserve(axes.size());
  for (const AxisRef& a : axes) {
    if (m_rules.preset && m_mesh.find(a.name) == nullptr) {
      if (trace != nullptr) {
        trace->push_back(TraceStep{
            fmt::format("axis {} is not in the mesh: dropped (preset)", a.name),
            std::nullopt,
            {a.name},
            false,
            false});
      }
      continue;
    }
    out.push_back(a.name);
  }
  return out;
}

bool Engine::selectors_match(size_t index,
                             const TensorFacts& t,
                             const std::vector<char>& matched,
                             std::string* why_not) const {
  const Rule& rule = m_rules.rules[index];
  if (rule.pattern && matched[index] == 0) {
    if (why_not != nullptr) {
      *why_not = fmt::format("pattern {} does not match", quote(*rule.pattern));
    }
    return false;
  }
  if (rule.shape) {
    std::string why;
    if (!shape_matches(
            t.shape, *rule.shape, why_not != nullptr ? &why : nullptr)) {
      if (why_not != nullptr) {
        *why_not =
            fmt::format("shape {}: {}", shape_pattern_text(*rule.shape), why);
      }
      return false;
    }
  }
  if (rule.min_elements && t.num_elements < *rule.min_elements) {
    if (why_not != nullptr) {
      *why_not = fmt::format(
          "{} elements < min_elements {}", t.num_elements, *rule.min_elements);
    }
    return false;
  }
  return true;
}

YieldResult Engine::apply_spec(const RuleSpec& spec,
                               const TensorFacts& t,
                               Trace* trace) const {
  YieldResult out;
  const size_t rank = t.shape.size();
  if (spec.dims.size() > rank) {
    PartitionSpec written;
    for (const std::vector<AxisRef>& dim : spec.dims) {
      DimSharding d;
      for (const AxisRef& a : dim) {
        d.axes.push_back(a.name);
      }
      written.dims.push_back(std::move(d));
    }
    const std::string text =
        fmt::format("sharding {} is only valid for values of rank at least {}",
                    to_python(written),
                    spec.dims.size());
    if (m_rules.preset) {
      out.status = YieldResult::Status::not_applicable;
      out.reason = fmt::format("{}; the tensor's rank is {}", text, rank);
    } else {
      // eformer's match_partition_rules cuts such a spec to the rank; JAX
      // refuses it, and so do we.
      out.status = YieldResult::Status::error;
      out.problem = Problem::rank;
      out.detail = text + ", but was applied to";
      out.pointer = spec.pointer;
      out.reason = fmt::format("{}, but the tensor's rank is {}", text, rank);
    }
    return out;
  }
  out.spec = PartitionSpec::replicated_of(rank);
  for (size_t d = 0; d < spec.dims.size(); ++d) {
    std::vector<std::string> axes = names_of(spec.dims[d], trace);
    if (m_rules.preset) {
      // Presets adapt: size-1 axes dropped, then any axis whose size (times
      // those kept before it) does not divide the dim.
      std::vector<std::string> kept;
      int64_t product = 1;
      for (const std::string& a : axes) {
        const int64_t size = m_mesh.find(a)->size;
        if (size == 1) {
          if (trace != nullptr) {
            trace->push_back(TraceStep{
                fmt::format(
                    "dim {}: axis {} has size 1: dropped (preset)", d, a),
                static_cast<int64_t>(d),
                {a},
                std::nullopt,
                false});
          }
          continue;
        }
        const bool divides = t.shape[d] % (product * size) == 0;
        if (trace != nullptr) {
          trace->push_back(TraceStep{
              fmt::format("dim {} ({}): {} ({}) {}",
                          d,
                          t.shape[d],
                          a,
                          size,
                          divides ? "divides it"
                                  : "does not divide it: dropped (preset)"),
              static_cast<int64_t>(d),
              {a},
              divides,
              divides});
        }
        if (divides) {
          product *= size;
          kept.push_back(a);
        }
      }
      axes = std::move(kept);
    }
    out.spec.dims[d].axes = std::move(axes);
  }
  return out;
}

YieldResult Engine::apply_yield(const Rule& rule,
                                const TensorFacts& t,
                                Trace* trace) const {
  const size_t rank = t.shape.size();
  YieldResult out;
  if (const auto* s = std::get_if<SpecYield>(&rule.yield)) {
    return apply_spec(s->spec, t, trace);
  }
  if (std::holds_alternative<ReplicateYield>(rule.yield)) {
    // A tensor reaches a rule unsplit, so nnx's conflict cannot arise here.
    std::optional<PartitionSpec> spec =
        replicate_tactic(PartitionSpec::replicated_of(rank), rank);
    if (!spec) {
      out.status = YieldResult::Status::error;
      out.problem = Problem::conflict;
      out.pointer = rule.pointer;
      out.spec = PartitionSpec::replicated_of(rank);
      return out;
    }
    out.spec = std::move(*spec);
    return out;
  }
  if (const auto* l = std::get_if<LogicalAxesYield>(&rule.yield)) {
    LogicalAxes names;
    if (l->from_manifest) {
      if (t.logical_axes == nullptr) {
        out.status = YieldResult::Status::not_applicable;
        out.reason = "the tensor has no logical_axes in the manifest";
        return out;
      }
      names = *t.logical_axes;
    } else {
      if (l->names.size() > rank) {
        out.status = m_rules.preset ? YieldResult::Status::not_applicable
                                    : YieldResult::Status::error;
        out.problem = m_rules.preset ? Problem::none : Problem::rank;
        out.detail = fmt::format(
            "{} logical axis names are only valid for values of rank at "
            "least {}, but were applied to",
            l->names.size(),
            l->names.size());
        out.pointer = l->pointer;
        out.reason = fmt::format(
            "{} logical axis names, but the tensor's "
            "rank is {}",
            l->names.size(),
            rank);
        out.spec = PartitionSpec::replicated_of(rank);
        return out;
      }
      names = l->names;
      names.resize(rank);
    }
    // Flax refuses a name on two dims ("Dimensions ... occur more than once").
    for (size_t i = 0; i < names.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (names[i] && names[j] && *names[i] == *names[j]) {
          out.status = YieldResult::Status::error;
          out.problem = Problem::duplicate_logical;
          out.detail = fmt::format("dims {} and {}", j, i);
          out.pointer = *names[i];
          out.reason = fmt::format(
              "logical axis {} names dims {} and {}", quote(*names[i]), j, i);
          out.spec = PartitionSpec::replicated_of(rank);
          return out;
        }
      }
    }
    out.spec = resolve_logical_axes(names,
                                    t.shape,
                                    m_rules.logical_axis_rules,
                                    m_mesh,
                                    m_rules.preset,
                                    trace);
    return out;
  }
  if (const auto* f = std::get_if<FsdpYield>(&rule.yield)) {
    std::vector<std::string> axes = names_of(f->axes, trace);
    out.spec = fsdp_tactic(t.shape,
                           t.dtype,
                           PartitionSpec::replicated_of(rank),
                           axes,
                           f->min_size_mb,
                           m_mesh,
                           trace);
    return out;
  }
  auto axes_or_mesh = [&](const std::optional<std::vector<AxisRef>>& axes) {
    return axes ? names_of(*axes, trace) : m_mesh.axis_names();
  };
  if (const auto* a = std::get_if<AutoYield>(&rule.yield)) {
    out.spec = auto_spec(t.shape,
                         axes_or_mesh(a->axes),
                         a->min_shard_size.value_or(m_mesh.num_devices()),
                         a->reverse,
                         m_mesh,
                         trace);
    return out;
  }
  if (const auto* m = std::get_if<MemoryYield>(&rule.yield)) {
    bool fits = true;
    out.spec = memory_spec(t.shape,
                           t.dtype,
                           m->max_bytes_per_device,
                           axes_or_mesh(m->axes),
                           m_mesh,
                           &fits,
                           trace);
    out.memory_unmet = !fits;
    return out;
  }
  if (const auto* h = std::get_if<MeshHelperYield>(&rule.yield)) {
    out.spec = mesh_helper_spec(t.shape,
                                suggest_methods(t.shape, m_mesh),
                                h->min_shard_size,
                                m_mesh,
                                trace);
    return out;
  }
  const auto& patterns = std::get<ShapePatternsYield>(rule.yield);
  for (size_t k = 0; k < patterns.patterns.size(); ++k) {
    const ShapePatternsYield::Entry& e = patterns.patterns[k];
    std::string why;
    if (shape_matches(t.shape, e.shape, &why)) {
      if (trace != nullptr) {
        trace->push_back(TraceStep{
            fmt::format(
                "shape pattern {} {} matches", k, shape_pattern_text(e.shape)),
            std::nullopt,
            {},
            true,
            false});
      }
      return apply_spec(e.spec, t, trace);
    }
    if (trace != nullptr) {
      trace->push_back(TraceStep{
          fmt::format(
              "shape pattern {} {}: {}", k, shape_pattern_text(e.shape), why),
          std::nullopt,
          {},
          false,
          false});
    }
  }
  if (trace != nullptr) {
    trace->push_back(TraceStep{"no shape pattern matches: replicated",
                               std::nullopt,
                               {},
                               std::nullopt,
                               false});
  }
  out.spec = PartitionSpec::replicated_of(rank);
  return out;
}

Outcome Engine::decide(const TensorFacts& t,
                       uint64_t cls,
                       RuleTrace* trace) const {
  Outcome out;
  const size_t rank = t.shape.size();
  if (rank == 0) {
    out.decision =
        RuleDecision{PartitionSpec{}, RuleRef{Decider::scalar, 0, "scalar"}};
    if (trace != nullptr) {
      trace->before.push_back(TraceStep{"a scalar: replicated before any rule",
                                        std::nullopt,
                                        {},
                                        true,
                                        false});
    }
    return out;
  }
  if (t.num_elements < m_rules.min_size) {
    out.decision = RuleDecision{PartitionSpec::replicated_of(rank),
                                RuleRef{Decider::min_size, 0, "min_size"}};
    if (trace != nullptr) {
      trace->before.push_back(TraceStep{
          fmt::format("{} elements < min_size {}: replicated before any rule",
                      t.num_elements,
                      m_rules.min_size),
          std::nullopt,
          {},
          true,
          false});
    }
    return out;
  }
  // Every tensor that reaches the rules had its name scanned.
  assert(cls != k_no_scan_class);
  const std::vector<char> flags = flags_of(cls);

  bool decided = false;
  std::optional<size_t> last_fallthrough;
  for (size_t i = 0; i < m_rules.rules.size(); ++i) {
    RuleStep* step = nullptr;
    if (trace != nullptr) {
      step = &trace->rules.emplace_back();
      step->index = i;
      step->description = describe_rule(m_rules, i);
    }
    std::string why;
    const bool selected =
        selectors_match(i, t, flags, step != nullptr ? &why : nullptr);
    if (step != nullptr) {
      step->matched = selected;
      step->reason = why;
      step->outcome = decided ? RuleOutcome::not_tried : RuleOutcome::no_match;
    }
    if (decided || !selected) {
      continue;
    }
    const Rule& rule = m_rules.rules[i];
    YieldResult y =
        apply_yield(rule, t, step != nullptr ? &step->steps : nullptr);
    if (step != nullptr) {
      step->reason = y.reason;
      if (y.status != YieldResult::Status::not_applicable) {
        step->spec = y.spec;
      }
    }
    if (y.status == YieldResult::Status::not_applicable) {
      if (step != nullptr) {
        step->outcome = RuleOutcome::not_applicable;
      }
      continue;
    }
    if (y.status == YieldResult::Status::error) {
      out.decision = RuleDecision{PartitionSpec::replicated_of(rank), ref(i)};
      out.problem = y.problem;
      out.detail = std::move(y.detail);
      out.pointer = std::move(y.pointer);
      decided = true;
      if (step != nullptr) {
        step->outcome = RuleOutcome::error;
      }
    } else if (rule.fallthrough && y.spec.replicated()) {
      last_fallthrough = i;
      if (step != nullptr) {
        step->outcome = RuleOutcome::fell_through;
      }
      continue;
    } else {
      out.decision = RuleDecision{std::move(y.spec), ref(i)};
      out.memory_unmet = y.memory_unmet;
      decided = true;
      if (step != nullptr) {
        step->outcome = RuleOutcome::decided;
      }
    }
    if (trace == nullptr) {
      break;
    }
  }
  if (decided) {
    return out;
  }
  if (last_fallthrough) {
    // Only fallthrough rules matched, each leaving the tensor replicated:
    // replicated, as eformer's CompositeShardingRule gives P() when every
    // rule does; the last of them decided.
    out.decision = RuleDecision{PartitionSpec::replicated_of(rank),
                                ref(*last_fallthrough)};
    if (trace != nullptr) {
      RuleStep& step = trace->rules[*last_fallthrough];
      step.outcome = RuleOutcome::decided;
      step.reason = "fell through, and no later rule decided: replicated";
    }
    return out;
  }
  out.decision = RuleDecision{PartitionSpec::replicated_of(rank),
                              RuleRef{Decider::unmatched, 0, "unmatched"}};
  if (m_rules.unmatched == Unmatched::error) {
    out.problem = Problem::unmatched;
  }
  return out;
}

TensorFacts facts_of(const Tensor& t) {
  return TensorFacts{t.shape,
                     t.dtype,
                     t.num_elements,
                     t.logical_axes ? &*t.logical_axes : nullptr};
}

// Reports the problem of `outcome` for `tensor`.
void report(const Outcome& outcome,
            const Tensor& tensor,
            const Manifest& manifest,
            const RuleSet& rules,
            Diagnostics& diags) {
  Diagnostic d;
  d.severity = Severity::error;
  d.tensor = std::string(tensor.name);
  switch (outcome.problem) {
    case Problem::none:
      return;
    case Problem::unmatched:
      d.code = "rules.unmatched";
      d.message = fmt::format("no rule matches tensor {}", quote(tensor.name));
      d.location = at(manifest.source, tensor.pointer());
      d.hint = "add a rule for it, or set \"unmatched\": \"replicate\"";
      break;
    case Problem::rank:
      d.code = "rules.rank";
      d.message = fmt::format("{} {} of rank {}",
                              outcome.detail,
                              quote(tensor.name),
                              tensor.rank());
      d.location = at(rules.source, outcome.pointer);
      d.hint =
          fmt::format("the tensor's shape is {}", python_tuple(tensor.shape));
      break;
    case Problem::duplicate_logical:
      d.code = "rules.duplicate-logical-axis";
      d.message = fmt::format("logical axis {} names {} of {}",
                              quote(outcome.pointer),
                              outcome.detail,
                              quote(tensor.name));
      d.location =
          at(manifest.source,
             tensor.pointer().empty() ? std::string()
                                      : tensor.pointer() + "/logical_axes");
      d.hint =
          "a logical axis may name one dim (Flax: \"Unsupported: "
          "Dimensions ... occur more than once\")";
      break;
    case Problem::conflict:
      d.code = "rules.conflict";
      d.message = fmt::format(
          "conflict: {} already has a sharding spec, "
          "cannot replicate ({})",
          quote(tensor.name),
          outcome.decision.rule.description);
      d.location = at(rules.source, outcome.pointer);
      break;
  }
  diags.add(std::move(d));
}

// Elements per device of `spec` over `shape` (every dim divides).
int64_t elements_per_device(ShapeView shape,
                            const PartitionSpec& spec,
                            const Mesh& mesh) {
  int64_t elements = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t shards = 1;
    for (const std::string& a : spec.dims[d].axes) {
      shards *= mesh.find(a)->size;
    }
    elements = checked_mul(elements, ceil_div(shape[d], shards))
                   .value_or(std::numeric_limits<int64_t>::max());
  }
  return elements;
}

}  // namespace

std::optional<RulePlan> apply_rules(const Manifest& manifest,
                                    const Mesh& mesh,
                                    const RuleSet& rules,
                                    Diagnostics& diags) {
  Engine engine(mesh, rules, diags);
  if (!engine.prepare()) {
    return std::nullopt;
  }
  const std::vector<Tensor>& tensors = manifest.tensors();
  RulePlan plan;
  // reserve + push_back: GCC 12 -O3 warns (-Wnull-dereference, a false
  // positive) on resize() of a vector<uint32_t>.
  plan.decision_of.reserve(tensors.size());
  std::vector<Outcome> outcomes;  // parallel to plan.decisions
  std::unordered_map<Key, uint32_t, KeyHash, KeyEqual> cache;
  const bool logical = engine.reads_logical_axes();
  // Per memory rule: tensors over the limit, and the largest of them.
  struct Unmet {
    size_t tensors = 0;
    size_t largest = 0;
    int64_t largest_bytes = -1;
  };
  std::unordered_map<size_t, Unmet> unmet;

  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    uint64_t cls = k_no_scan_class;
    if (t.rank() > 0 && t.num_elements >= rules.min_size) {
      cls = engine.classify(t.name);
    }
    const KeyView key{cls,
                      t.dtype,
                      t.shape,
                      logical && t.logical_axes ? &*t.logical_axes : nullptr};
    uint32_t index = 0;
    if (auto it = cache.find(key); it != cache.end()) {
      index = it->second;
    } else {
      Outcome outcome = engine.decide(facts_of(t), cls, nullptr);
      index = static_cast<uint32_t>(plan.decisions.size());
      plan.decisions.push_back(outcome.decision);
      outcomes.push_back(std::move(outcome));
      cache.emplace(Key(key), index);
    }
    plan.decision_of.push_back(index);
    const Outcome& outcome = outcomes[index];
    if (outcome.problem != Problem::none) {
      report(outcome, t, manifest, rules, diags);
    }
    if (outcome.memory_unmet) {
      const int64_t bytes =
          bytes_for(elements_per_device(t.shape, outcome.decision.spec, mesh),
                    t.dtype)
              .value_or(std::numeric_limits<int64_t>::max());
      Unmet& u = unmet[outcome.decision.rule.index];
      ++u.tensors;
      if (bytes > u.largest_bytes) {
        u.largest_bytes = bytes;
        u.largest = i;
      }
    }
  }

  std::vector<size_t> unmet_rules;
  for (const auto& [rule, u] : unmet) {
    unmet_rules.push_back(rule);
  }
  std::sort(unmet_rules.begin(), unmet_rules.end());
  for (size_t r : unmet_rules) {
    const Unmet& u = unmet[r];
    const auto& m = std::get<MemoryYield>(rules.rules[r].yield);
    Diagnostic& d = diags.warning(
        "rules.memory-unmet",
        fmt::format("{} tensor{} still exceed{} max_bytes_per_device {} "
                    "with every axis that divides spent ({}); the largest, "
                    "{}, holds {} bytes per device",
                    u.tensors,
                    u.tensors == 1 ? "" : "s",
                    u.tensors == 1 ? "s" : "",
                    m.max_bytes_per_device,
                    describe_rule(rules, r),
                    quote(tensors[u.largest].name),
                    u.largest_bytes),
        at(rules.source,
           rules.rules[r].pointer + "/memory/max_bytes_per_device"));
    d.tensor = std::string(tensors[u.largest].name);
  }
  return plan;
}

std::optional<RuleTrace> explain_rules(const Manifest& manifest,
                                       const Mesh& mesh,
                                       const RuleSet& rules,
                                       std::string_view name,
                                       Diagnostics& diags) {
  const Tensor* tensor = manifest.find(name);
  if (tensor == nullptr) {
    Diagnostic& d = diags.error(
        "rules.unknown-tensor",
        manifest.source.empty()
            ? fmt::format("no tensor {} in the manifest", quote(name))
            : fmt::format("no tensor {} in {}", quote(name), manifest.source),
        Location::of("--explain"));
    std::vector<std::string> names;
    names.reserve(manifest.size());
    for (const Tensor& t : manifest.tensors()) {
      names.emplace_back(t.name);
    }
    std::string near = closest_match(name, names);
    if (!near.empty()) {
      d.hint = fmt::format("did you mean {}?", quote(near));
    }
    return std::nullopt;
  }
  Engine engine(mesh, rules, diags);
  if (!engine.prepare()) {
    return std::nullopt;
  }
  RuleTrace trace;
  trace.tensor = std::string(tensor->name);
  trace.shape.assign(tensor->shape.begin(), tensor->shape.end());
  trace.dtype = tensor->dtype;
  trace.num_elements = tensor->num_elements;
  trace.num_bytes = tensor->num_bytes;
  if (tensor->logical_axes) {
    trace.logical_axes = *tensor->logical_axes;
  }
  const uint64_t cls = engine.classify(tensor->name);
  Outcome outcome = engine.decide(facts_of(*tensor), cls, &trace);
  trace.result = outcome.decision;
  return trace;
}

}  // namespace shardplan
