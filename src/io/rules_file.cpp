// The rules-file reader (include/shardplan/io.hpp, docs/rules.md). Rules
// files are small: the located-JSON toolkit's DOM reader (io/json.hpp) reads
// them whole, ordered, so that the first problem reported is the first in the
// file.

#include "embedded.hpp"
#include "io/json.hpp"

#include <shardplan/io.hpp>
#include <shardplan/spec.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace shardplan {

namespace {

using io_detail::DomReader;
using io_detail::Json;

const std::vector<std::string>& top_keys() {
  static const std::vector<std::string> keys = {
      "rules", "logical_axis_rules", "min_size", "unmatched", "description"};
  return keys;
}

const std::vector<std::string>& selector_keys() {
  static const std::vector<std::string> keys = {
      "pattern", "shape", "min_elements", "fallthrough"};
  return keys;
}

std::vector<std::string> rule_keys() {
  std::vector<std::string> keys = selector_keys();
  keys.insert(keys.end(), yield_names().begin(), yield_names().end());
  return keys;
}

std::string quoted_list(const std::vector<std::string>& words) {
  std::vector<std::string> quoted;
  quoted.reserve(words.size());
  for (const std::string& w : words) {
    quoted.push_back(quote(w));
  }
  return fmt::format("{}", fmt::join(quoted, ", "));
}

class RulesReader : public DomReader {
 public:
  RulesReader(std::string_view text,
              std::string_view source,
              Diagnostics& diags)
      : DomReader(text, source, "rules", diags) {}

  std::optional<RuleSet> run() {
    std::optional<Json> doc = parse();
    if (!doc) {
      return std::nullopt;
    }
    RuleSet out;
    out.source = m_source;
    bool have_rules = false;
    for (const auto& [key, value] : doc->items()) {
      const std::string pointer = json_pointer_child("", key);
      bool ok = true;
      if (key == "rules") {
        have_rules = true;
        ok = read_rules(value, pointer, out.rules);
      } else if (key == "logical_axis_rules") {
        ok = read_logical_axis_rules(value, pointer, out.logical_axis_rules);
      } else if (key == "min_size") {
        std::optional<int64_t> v = get_int(value, pointer, 0);
        ok = v.has_value();
        out.min_size = v.value_or(0);
      } else if (key == "unmatched") {
        ok = read_unmatched(value, pointer, out.unmatched);
      } else if (key == "description") {
        const std::string* text =
            get_string(value, pointer, "a description string");
        ok = text != nullptr;
        out.description = ok ? *text : std::string();
      } else {
        ok = unknown_rule_key(key, pointer, top_keys(), "");
      }
      if (!ok) {
        return std::nullopt;
      }
    }
    if (!have_rules) {
      fail_at_start("json.missing-key",
                    "missing key \"rules\"",
                    "a rules file is {\"rules\": [...]}");
      return std::nullopt;
    }
    warn_unknown_logical_names(out);
    return out;
  }

 private:
  // An unknown key of the object `where` names ("a rule", "fsdp"; empty for
  // the top level), with the keys it has as hint when none is close.
  bool unknown_rule_key(const std::string& key,
                        const std::string& pointer,
                        const std::vector<std::string>& known,
                        std::string_view where) {
    std::string otherwise;
    if (where == "a rule") {
      otherwise = fmt::format(
          "a rule has selectors {}, one yield of {}, and \"fallthrough\"",
          quoted_list({"pattern", "shape", "min_elements"}),
          quoted_list(yield_names()));
    } else {
      otherwise = fmt::format("{} has the keys {}",
                              where.empty() ? "a rules file" : where,
                              quoted_list(known));
    }
    return unknown_key(key, pointer, known, std::move(otherwise));
  }

  // A non-empty name (an axis or a logical axis).
  std::optional<std::string> get_name(const Json& j,
                                      const std::string& pointer,
                                      std::string_view expected,
                                      std::string_view empty_message) {
    const std::string* s = get_string(j, pointer, expected);
    if (s == nullptr) {
      return std::nullopt;
    }
    if (s->empty()) {
      bad_value(pointer, std::string(empty_message));
      return std::nullopt;
    }
    return *s;
  }

  // ---- axes and specs

  // An axis name or an array of them (unique, non-empty).
  bool read_axes(const Json& j,
                 const std::string& pointer,
                 std::vector<AxisRef>& out,
                 bool allow_single,
                 std::string_view what) {
    out.clear();
    if (allow_single && j.is_string()) {
      std::optional<std::string> name =
          get_name(j, pointer, "an axis name", "axis name is empty");
      if (!name) {
        return false;
      }
      out.push_back(AxisRef{std::move(*name), pointer});
      return true;
    }
    if (!j.is_array()) {
      return type_error(j,
                        pointer,
                        allow_single ? "an axis name or an array of axis names"
                                     : "an array of axis names");
    }
    for (size_t i = 0; i < j.size(); ++i) {
      const std::string p = fmt::format("{}/{}", pointer, i);
      std::optional<std::string> name =
          get_name(j[i], p, "an axis name", "axis name is empty");
      if (!name) {
        return false;
      }
      out.push_back(AxisRef{std::move(*name), p});
    }
    return unique_axes(out, what);
  }

  bool unique_axes(const std::vector<AxisRef>& axes, std::string_view what) {
    for (size_t i = 0; i < axes.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (axes[i].name == axes[j].name) {
          return fail(
              axes[i].pointer,
              "rules.duplicate-axis",
              fmt::format(
                  "axis {} appears twice in {}", quote(axes[i].name), what),
              fmt::format("first at {}", axes[j].pointer));
        }
      }
    }
    return true;
  }

  // SPEC: [null | "axis" | ["a", "b"], ...], or a string parse_spec reads
  // ("P('fsdp', None)").
  bool read_spec(const Json& j, const std::string& pointer, RuleSpec& out) {
    out = RuleSpec{};
    out.pointer = pointer;
    if (j.is_string()) {
      Diagnostics scratch;
      const std::string text_source = fmt::format("{}:{}", m_source, pointer);
      std::optional<PartitionSpec> parsed =
          parse_spec(j.get_ref<const std::string&>(), text_source, scratch);
      if (!parsed || scratch.has_errors()) {
        // Located in the file, at the spec (the DOM keeps no lines): the
        // spec's text with its caret stays the excerpt.
        for (Diagnostic d : scratch.items()) {
          if (d.location.source == text_source) {
            d.location.source = m_source;
            d.location.pointer = pointer;
            d.location.line = 0;
            d.location.column = 0;
          }
          m_diags.add(std::move(d));
        }
        return false;
      }
      for (const DimSharding& dim : parsed->dims) {
        std::vector<AxisRef> axes;
        for (const std::string& a : dim.axes) {
          axes.push_back(AxisRef{a, pointer});
        }
        out.dims.push_back(std::move(axes));
      }
    } else if (j.is_array()) {
      for (size_t k = 0; k < j.size(); ++k) {
        const std::string p = fmt::format("{}/{}", pointer, k);
        const Json& entry = j[k];
        std::vector<AxisRef> axes;
        if (entry.is_string()) {
          std::optional<std::string> name =
              get_name(entry, p, "an axis name", "axis name is empty");
          if (!name) {
            return false;
          }
          axes.push_back(AxisRef{std::move(*name), p});
        } else if (entry.is_array()) {
          for (size_t i = 0; i < entry.size(); ++i) {
            const std::string q = fmt::format("{}/{}", p, i);
            if (entry[i].is_array()) {
              return fail(q,
                          "rules.bad-value",
                          "a tuple inside a PartitionSpec cannot contain a "
                          "nested tuple");
            }
            std::optional<std::string> name =
                get_name(entry[i],
                         q,
                         "an axis name inside a tuple",
                         "axis name is empty");
            if (!name) {
              return false;
            }
            axes.push_back(AxisRef{std::move(*name), q});
          }
        } else if (!entry.is_null()) {
          return type_error(
              entry, p, "null, an axis name or an array of axis names");
        }
        out.dims.push_back(std::move(axes));
      }
    } else {
      return type_error(j,
                        pointer,
                        "a spec: an array of null, \"axis\" or [\"a\", \"b\"] "
                        "per dim");
    }
    std::vector<AxisRef> all;
    for (const auto& dim : out.dims) {
      all.insert(all.end(), dim.begin(), dim.end());
    }
    return unique_axes(all, "one spec");
  }

  bool read_shape(const Json& j,
                  const std::string& pointer,
                  ShapePattern& out) {
    out.clear();
    if (!j.is_array()) {
      return type_error(
          j, pointer, "an array of dim sizes (null matches any size)");
    }
    for (size_t d = 0; d < j.size(); ++d) {
      const std::string p = fmt::format("{}/{}", pointer, d);
      if (j[d].is_null()) {
        out.emplace_back();
        continue;
      }
      if (!j[d].is_number()) {
        return type_error(j[d], p, "a dim size or null");
      }
      std::optional<int64_t> v = get_int(j[d], p, 0);
      if (!v) {
        return false;
      }
      out.emplace_back(*v);
    }
    return true;
  }

  // ---- objects

  // Iterates the keys of object `j`, each through `read(key, value,
  // pointer)`; an unknown key (not in `known`) fails.
  template <typename F>
  bool read_object(const Json& j,
                   const std::string& pointer,
                   std::string_view expected,
                   const std::vector<std::string>& known,
                   std::string_view where,
                   F&& read) {
    if (!j.is_object()) {
      return type_error(j, pointer, expected);
    }
    for (const auto& [key, value] : j.items()) {
      const std::string p = json_pointer_child(pointer, key);
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        return unknown_rule_key(key, p, known, where);
      }
      if (!read(key, value, p)) {
        return false;
      }
    }
    return true;
  }

  bool require(const Json& j,
               const std::string& pointer,
               std::string_view key) {
    if (j.contains(std::string(key))) {
      return true;
    }
    return fail(
        pointer, "json.missing-key", fmt::format("missing key {}", quote(key)));
  }

  bool read_rules(const Json& j,
                  const std::string& pointer,
                  std::vector<Rule>& out) {
    if (!j.is_array()) {
      return type_error(j, pointer, "an array of rule objects");
    }
    out.reserve(j.size());
    for (size_t i = 0; i < j.size(); ++i) {
      Rule rule;
      rule.pointer = fmt::format("{}/{}", pointer, i);
      if (!read_rule(j[i], rule)) {
        return false;
      }
      out.push_back(std::move(rule));
    }
    return true;
  }

  bool read_rule(const Json& j, Rule& rule) {
    const std::string& base = rule.pointer;
    std::string yield_key;
    const std::vector<std::string> known = rule_keys();
    const bool ok = read_object(
        j,
        base,
        "a rule object",
        known,
        "a rule",
        [&](const std::string& key, const Json& v, const std::string& p) {
          if (key == "pattern") {
            if (!v.is_string()) {
              return type_error(v, p, "a regular expression string");
            }
            rule.pattern = v.get<std::string>();
            std::string hint;
            if (std::optional<std::string> e =
                    pattern_error(*rule.pattern, &hint)) {
              return fail(p,
                          "rules.bad-pattern",
                          fmt::format("pattern {} does not compile: {}",
                                      quote(*rule.pattern),
                                      *e),
                          hint);
            }
            return true;
          }
          if (key == "shape") {
            rule.shape.emplace();
            return read_shape(v, p, *rule.shape);
          }
          if (key == "min_elements") {
            std::optional<int64_t> n = get_int(v, p, 0);
            rule.min_elements = n;
            return n.has_value();
          }
          if (key == "fallthrough") {
            std::optional<bool> b = get_bool(v, p);
            rule.fallthrough = b.value_or(false);
            return b.has_value();
          }
          // A yield.
          if (!yield_key.empty()) {
            return fail(p,
                        "rules.two-yields",
                        fmt::format("a rule yields one thing, got {} and {}",
                                    quote(yield_key),
                                    quote(key)),
                        "split it into two rules; the first that matches "
                        "decides");
          }
          yield_key = key;
          return read_yield(key, v, p, rule);
        });
    if (!ok) {
      return false;
    }
    if (yield_key.empty()) {
      return fail(base,
                  "rules.missing-yield",
                  "the rule yields nothing",
                  fmt::format("give it one of {}", quoted_list(yield_names())));
    }
    if (rule.fallthrough
        && std::holds_alternative<ReplicateYield>(rule.yield)) {
      warn(base + "/fallthrough",
           "rules.useless-fallthrough",
           "a replicate rule with fallthrough never decides a tensor",
           "remove \"fallthrough\" or the rule");
    }
    return true;
  }

  // The yield of key `key` (one of yield_names()): each kind is read by its
  // own overload of read(), picked by std::visit, so a yield kind added to
  // RuleYield without a reader does not compile.
  bool read_yield(const std::string& key,
                  const Json& v,
                  const std::string& p,
                  Rule& rule) {
    std::optional<RuleYield> yield = make_yield(key);
    assert(yield);  // read_rule checked the key against rule_keys()
    const bool ok = std::visit([&](auto& y) { return read(y, v, p); }, *yield);
    rule.yield = std::move(*yield);
    return ok;
  }

  bool read(SpecYield& y, const Json& v, const std::string& p) {
    return read_spec(v, p, y.spec);
  }

  bool read(ReplicateYield& /*y*/, const Json& v, const std::string& p) {
    if (!v.is_boolean()) {
      return type_error(v, p, "true");
    }
    if (!v.get<bool>()) {
      return fail(p,
                  "rules.bad-value",
                  "expected true, got boolean false",
                  "to let later rules decide, remove the rule");
    }
    return true;
  }

  bool read(LogicalAxesYield& y, const Json& v, const std::string& p) {
    y.pointer = p;
    return read_logical_names(v, p, y);
  }

  bool read(FsdpYield& y, const Json& v, const std::string& p) {
    const bool ok = read_object(
        v,
        p,
        "an fsdp object {\"axis\": ..., \"min_size_mb\": ...}",
        {"axis", "min_size_mb"},
        "fsdp",
        [&](const std::string& k, const Json& x, const std::string& q) {
          if (k == "axis") {
            if (!read_axes(x, q, y.axes, true, "the fsdp axis")) {
              return false;
            }
            if (y.axes.empty()) {
              return fail(q,
                          "rules.bad-value",
                          "expected at least one axis, got an empty array");
            }
            return true;
          }
          if (!x.is_number()) {
            return type_error(x, q, "a number of MiB >= 0");
          }
          y.min_size_mb = x.get<double>();
          if (!(y.min_size_mb >= 0) || !std::isfinite(y.min_size_mb)) {
            return fail(q,
                        "rules.bad-value",
                        fmt::format("expected a number of MiB >= 0, got {}",
                                    describe(x)));
          }
          return true;
        });
    return ok && require(v, p, "axis");
  }

  bool read(AutoYield& y, const Json& v, const std::string& p) {
    return read_object(
        v,
        p,
        "an auto object",
        {"axes", "min_shard_size", "reverse"},
        "auto",
        [&](const std::string& k, const Json& x, const std::string& q) {
          if (k == "axes") {
            y.axes.emplace();
            return read_axes(x, q, *y.axes, false, "the axes of auto");
          }
          if (k == "min_shard_size") {
            y.min_shard_size = get_int(x, q, 0);
            return y.min_shard_size.has_value();
          }
          std::optional<bool> b = get_bool(x, q);
          y.reverse = b.value_or(false);
          return b.has_value();
        });
  }

  bool read(MemoryYield& y, const Json& v, const std::string& p) {
    const bool ok = read_object(
        v,
        p,
        "a memory object",
        {"max_bytes_per_device", "axes"},
        "memory",
        [&](const std::string& k, const Json& x, const std::string& q) {
          if (k == "axes") {
            y.axes.emplace();
            return read_axes(x, q, *y.axes, false, "the axes of memory");
          }
          std::optional<int64_t> n = get_int(x, q, 0);
          y.max_bytes_per_device = n.value_or(0);
          return n.has_value();
        });
    return ok && require(v, p, "max_bytes_per_device");
  }

  bool read(MeshHelperYield& y, const Json& v, const std::string& p) {
    return read_object(
        v,
        p,
        "a mesh_helper object",
        {"min_shard_size"},
        "mesh_helper",
        [&](const std::string& /*k*/, const Json& x, const std::string& q) {
          std::optional<int64_t> n = get_int(x, q, 0);
          y.min_shard_size = n.value_or(0);
          return n.has_value();
        });
  }

  bool read(ShapePatternsYield& y, const Json& v, const std::string& p) {
    if (!v.is_array()) {
      return type_error(v,
                        p,
                        "an array of {\"shape\": [...], \"spec\": [...]} "
                        "objects");
    }
    for (size_t i = 0; i < v.size(); ++i) {
      ShapePatternsYield::Entry e;
      e.pointer = fmt::format("{}/{}", p, i);
      bool ok = read_object(
          v[i],
          e.pointer,
          "a {\"shape\": [...], \"spec\": [...]} object",
          {"shape", "spec"},
          "a shape pattern",
          [&](const std::string& k, const Json& x, const std::string& q) {
            return k == "shape" ? read_shape(x, q, e.shape)
                                : read_spec(x, q, e.spec);
          });
      if (!ok || !require(v[i], e.pointer, "shape")
          || !require(v[i], e.pointer, "spec")) {
        return false;
      }
      y.patterns.push_back(std::move(e));
    }
    return true;
  }

  bool read_logical_names(const Json& v,
                          const std::string& p,
                          LogicalAxesYield& y) {
    if (v.is_string()) {
      if (v.get_ref<const std::string&>() == "manifest") {
        y.from_manifest = true;
        return true;
      }
      std::string hint;
      if (edit_distance(v.get_ref<const std::string&>(), "manifest") <= 3) {
        hint = "did you mean \"manifest\"?";
      }
      return fail(p,
                  "rules.bad-value",
                  fmt::format("expected \"manifest\" or an array of logical "
                              "axis names, got {}",
                              describe(v)),
                  hint);
    }
    if (!v.is_array()) {
      return type_error(v, p, "\"manifest\" or an array of logical axis names");
    }
    for (size_t d = 0; d < v.size(); ++d) {
      const std::string q = fmt::format("{}/{}", p, d);
      if (v[d].is_null()) {
        y.names.emplace_back();
        continue;
      }
      std::optional<std::string> name = get_name(
          v[d],
          q,
          "a logical axis name or null",
          "logical axis name is empty; use null for a dim without one");
      if (!name) {
        return false;
      }
      for (size_t e = 0; e < y.names.size(); ++e) {
        if (y.names[e] && *y.names[e] == *name) {
          return fail(
              q,
              "rules.duplicate-logical-axis",
              fmt::format(
                  "logical axis {} names dims {} and {}", quote(*name), e, d),
              "a logical axis may name one dim (Flax refuses this "
              "too)");
        }
      }
      y.names.emplace_back(std::move(*name));
    }
    return true;
  }

  bool read_logical_axis_rules(const Json& j,
                               const std::string& pointer,
                               std::vector<LogicalAxisRule>& out) {
    if (!j.is_array()) {
      return type_error(
          j, pointer, "an array of [logical name, mesh axes] pairs");
    }
    for (size_t i = 0; i < j.size(); ++i) {
      LogicalAxisRule rule;
      rule.pointer = fmt::format("{}/{}", pointer, i);
      const Json& e = j[i];
      if (!e.is_array() || e.size() != 2) {
        return type_error(e,
                          rule.pointer,
                          "a pair [logical name, mesh axis | [mesh axes] | []]",
                          e.is_array()
                              ? fmt::format("this one has {} entries", e.size())
                              : std::string());
      }
      std::optional<std::string> name = get_name(e[0],
                                                 rule.pointer + "/0",
                                                 "a logical axis name",
                                                 "logical axis name is empty");
      if (!name) {
        return false;
      }
      rule.name = std::move(*name);
      const std::string q = rule.pointer + "/1";
      if (!e[1].is_null()
          && !read_axes(e[1], q, rule.axes, true, "one logical axis rule")) {
        return false;
      }
      out.push_back(std::move(rule));
    }
    return true;
  }

  bool read_unmatched(const Json& j,
                      const std::string& pointer,
                      Unmatched& out) {
    if (!j.is_string()) {
      return type_error(j, pointer, "\"error\" or \"replicate\"");
    }
    const auto& s = j.get_ref<const std::string&>();
    if (s == "error") {
      out = Unmatched::error;
      return true;
    }
    if (s == "replicate") {
      out = Unmatched::replicate;
      return true;
    }
    std::string near = closest_match(s, {"error", "replicate"});
    return fail(
        pointer,
        "rules.bad-value",
        fmt::format("expected \"error\" or \"replicate\", got {}", describe(j)),
        near.empty() ? std::string()
                     : fmt::format("did you mean {}?", quote(near)));
  }

  // A logical name of an explicit list that no logical_axis_rules entry
  // has leaves its dim replicated: likely a typo.
  void warn_unknown_logical_names(const RuleSet& rules) {
    std::vector<std::string> known;
    for (const LogicalAxisRule& r : rules.logical_axis_rules) {
      if (std::find(known.begin(), known.end(), r.name) == known.end()) {
        known.push_back(r.name);
      }
    }
    for (const Rule& rule : rules.rules) {
      const auto* l = std::get_if<LogicalAxesYield>(&rule.yield);
      if (l == nullptr || l->from_manifest) {
        continue;
      }
      for (size_t d = 0; d < l->names.size(); ++d) {
        const std::optional<std::string>& name = l->names[d];
        if (!name
            || std::find(known.begin(), known.end(), *name) != known.end()) {
          continue;
        }
        std::string near = closest_match(*name, known);
        warn(fmt::format("{}/{}", l->pointer, d),
             "rules.unknown-logical-axis",
             fmt::format("no logical_axis_rules entry for {}: its dim stays "
                         "replicated",
                         quote(*name)),
             near.empty() ? std::string()
                          : fmt::format("did you mean {}?", quote(near)));
      }
    }
  }
};

}  // namespace

std::optional<RuleSet> read_rules(std::string_view json,
                                  std::string_view source,
                                  Diagnostics& diags) {
  return RulesReader(json, source, diags).run();
}

namespace {

// The embedded presets: name (file name without ".json") and text.
// In name order ("fsdp" before "fsdp-tp", unlike their file names).
std::vector<std::pair<std::string, std::string_view>> preset_files() {
  std::vector<std::pair<std::string, std::string_view>> out;
  for (const embedded::EmbeddedFile& file : embedded::rule_files()) {
    std::string_view name = file.name;
    if (name.ends_with(".json")) {
      name.remove_suffix(5);
    }
    out.emplace_back(std::string(name), file.text);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<RulePreset> rule_presets() {
  std::vector<RulePreset> out;
  for (const auto& [name, text] : preset_files()) {
    Diagnostics diags;
    std::optional<RuleSet> rules =
        read_rules_preset(name, Location::of("rule_presets"), diags);
    out.push_back({name,
                   rules ? rules->description : std::string(),
                   rules ? rules->rules.size() : 0});
  }
  return out;
}

std::optional<RuleSet> read_rules_preset(std::string_view name,
                                         const Location& where,
                                         Diagnostics& diags) {
  std::vector<std::string> names;
  for (const auto& [preset, text] : preset_files()) {
    if (preset == name) {
      std::optional<RuleSet> rules =
          read_rules(text, fmt::format("configs/rules/{}.json", preset), diags);
      if (rules) {
        rules->preset = true;
        rules->name = preset;
      }
      return rules;
    }
    names.push_back(preset);
  }
  Diagnostic& d =
      diags.error("rules.unknown-preset",
                  fmt::format("unknown rule preset {}; the presets are {}",
                              quote(name),
                              fmt::join(names, ", ")),
                  where);
  if (std::string best = closest_match(name, names); !best.empty()) {
    d.hint = fmt::format("did you mean {}?", quote(best));
  } else {
    d.hint = "a rules file is given by its path (ending in .json)";
  }
  return std::nullopt;
}

}  // namespace shardplan
