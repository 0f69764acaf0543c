// MaxText configs (include/shardplan/io.hpp, docs/maxtext.md): a
// base.yml-style YAML file read with yaml-cpp, its base_config files, and
// MaxText's KEY=VALUE overrides; then the mesh MaxText builds from the
// ici_*/dcn_* parallelism keys (maxtext_utils.create_device_mesh and
// fill_unspecified_mesh_axes).

#include "embedded.hpp"
#include "io/internal.hpp"

#include <shardplan/io.hpp>
#include <shardplan/workload.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace shardplan {

// base.yml's mesh_axes (AI-Hypercomputer/maxtext at e591f30c, the
// version configs/rules/maxtext.json copies its logical_axis_rules from).
const std::vector<std::string>& maxtext_mesh_axes() {
  static const std::vector<std::string> axes = {"diloco",
                                                "data",
                                                "stage",
                                                "fsdp",
                                                "fsdp_transpose",
                                                "context",
                                                "context_usp_ulysses",
                                                "context_autoregressive",
                                                "tensor",
                                                "tensor_sequence",
                                                "expert",
                                                "autoregressive"};
  return axes;
}

namespace {

struct Fields {
  std::string commit;
  std::map<std::string, std::string, std::less<>> types;
};

const Fields& fields() {
  static const Fields f = [] {
    Fields out;
    const std::string_view text = embedded::maxtext_files().front().text;
    const nlohmann::json doc = nlohmann::json::parse(text);
    out.commit = doc.at("commit").get<std::string>();
    for (const auto& [name, type] : doc.at("fields").items()) {
      out.types.emplace(name, type.get<std::string>());
    }
    return out;
  }();
  return f;
}

}  // namespace

const std::map<std::string, std::string, std::less<>>& maxtext_fields() {
  return fields().types;
}

std::string_view maxtext_fields_commit() {
  return fields().commit;
}

void merge_logical_axis_rules(std::vector<LogicalAxisRule>& rules,
                              const std::vector<LogicalAxisRule>& updates) {
  std::erase_if(rules, [&](const LogicalAxisRule& rule) {
    return std::any_of(
        updates.begin(), updates.end(), [&](const LogicalAxisRule& u) {
          return u.name == rule.name;
        });
  });
  rules.insert(rules.end(), updates.begin(), updates.end());
}

std::string maxtext_key_stem(std::string_view axis) {
  return axis == "stage" ? std::string("pipeline") : std::string(axis);
}

namespace {

// "ici_X_parallelism" or "dcn_X_parallelism": X; else empty.
std::string_view parallelism_stem(std::string_view key) {
  constexpr std::string_view k_suffix = "_parallelism";
  if (key.size() <= 4 + k_suffix.size()
      || (!key.starts_with("ici_") && !key.starts_with("dcn_"))
      || !key.ends_with(k_suffix)) {
    return {};
  }
  return key.substr(4, key.size() - 4 - k_suffix.size());
}

// The text a value was read from: a file, or one override argument (the
// value's YAML starts at `offset`).
struct Origin {
  std::string name;  // the file, or "--maxtext-config"
  std::string text;
  size_t offset = 0;
  bool is_override = false;
};

// A key's winning setting. Its implicit assignment may throw
// (YAML::Node's allocates); std::bad_alloc ends the run like any other.
struct Setting {  // NOLINT(bugprone-exception-escape)
  YAML::Node value;
  YAML::Mark key_mark;
  const Origin* origin = nullptr;
};

// A plain scalar as PyYAML (YAML 1.1) resolves it; quoted scalars are
// strings.
enum class ScalarKind { null, boolean, integer, floating, string, other };

struct Scalar {
  ScalarKind kind = ScalarKind::other;
  std::string text;  // the scalar as written (empty for non-scalars)
  bool boolean = false;
  int64_t integer = 0;
  bool overflow = false;  // an integer beyond int64_t
  double floating = 0;
};

bool is_one_of(std::string_view s, std::initializer_list<std::string_view> l) {
  return std::find(l.begin(), l.end(), s) != l.end();
}

// Digits of `base` with '_' separators (at least one digit) into `out`.
bool parse_digits(std::string_view s, int base, int64_t& out, bool& overflow) {
  out = 0;
  overflow = false;
  bool any = false;
  for (char c : s) {
    if (c == '_') {
      continue;
    }
    int digit = 0;
    if (is_digit(c)) {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return false;
    }
    if (digit >= base) {
      return false;
    }
    any = true;
    std::optional<int64_t> next = checked_mul(out, base);
    if (next) {
      next = checked_add(*next, digit);
    }
    if (!next) {
      overflow = true;
      out = 0;
    } else if (!overflow) {
      out = *next;
    }
  }
  return any;
}

bool parse_yaml_int(std::string_view s, Scalar& out) {
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty() || !is_digit(s[0])) {
    return false;
  }
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'b')) {
    base = s[1] == 'x' ? 16 : 2;
    s.remove_prefix(2);
  } else if (s.size() > 1 && s[0] == '0') {
    base = 8;
    s.remove_prefix(1);
  }
  int64_t value = 0;
  bool overflow = false;
  if (!parse_digits(s, base, value, overflow)) {
    return false;
  }
  out.kind = ScalarKind::integer;
  out.integer = negative ? -value : value;
  out.overflow = overflow;
  return true;
}

// PyYAML's float: [-+]?([0-9][0-9_]*)?\.[0-9_]*([eE][-+][0-9]+)?, .inf, .nan.
bool parse_yaml_float(std::string_view s, Scalar& out) {
  std::string_view body = s;
  bool negative = false;
  if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (is_one_of(body, {".inf", ".Inf", ".INF"})) {
    out.kind = ScalarKind::floating;
    out.floating = negative ? -std::numeric_limits<double>::infinity()
                            : std::numeric_limits<double>::infinity();
    return true;
  }
  if (is_one_of(s, {".nan", ".NaN", ".NAN"})) {
    out.kind = ScalarKind::floating;
    out.floating = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  std::string clean;
  size_t i = 0;
  bool digits = false;
  while (i < body.size() && (is_digit(body[i]) || body[i] == '_')) {
    if (body[i] != '_') {
      clean += body[i];
      digits = true;
    }
    ++i;
  }
  if (i == body.size() || body[i] != '.') {
    return false;
  }
  clean += body[i++];
  while (i < body.size() && (is_digit(body[i]) || body[i] == '_')) {
    if (body[i] != '_') {
      clean += body[i];
      digits = true;
    }
    ++i;
  }
  if (!digits) {
    return false;
  }
  if (i < body.size()) {
    if ((body[i] != 'e' && body[i] != 'E') || i + 2 >= body.size()
        || (body[i + 1] != '-' && body[i + 1] != '+')) {
      return false;
    }
    clean += 'e';
    clean += body[i + 1];
    i += 2;
    if (i == body.size()) {
      return false;
    }
    for (; i < body.size(); ++i) {
      if (!is_digit(body[i])) {
        return false;
      }
      clean += body[i];
    }
  }
  if (clean.front() == '.') {
    clean.insert(clean.begin(), '0');
  }
  out.kind = ScalarKind::floating;
  out.floating = std::strtod(clean.c_str(), nullptr);
  if (negative) {
    out.floating = -out.floating;
  }
  return true;
}

Scalar classify(const YAML::Node& node) {
  Scalar out;
  if (!node.IsDefined() || node.IsNull()) {
    out.kind = ScalarKind::null;
    return out;
  }
  if (!node.IsScalar()) {
    return out;
  }
  out.text = node.Scalar();
  if (node.Tag() == "!") {  // quoted: a string
    out.kind = ScalarKind::string;
    return out;
  }
  const std::string& s = out.text;
  if (is_one_of(s, {"", "~", "null", "Null", "NULL"})) {
    out.kind = ScalarKind::null;
  } else if (is_one_of(s,
                       {"yes",
                        "Yes",
                        "YES",
                        "true",
                        "True",
                        "TRUE",
                        "on",
                        "On",
                        "ON"})) {
    out.kind = ScalarKind::boolean;
    out.boolean = true;
  } else if (is_one_of(s,
                       {"no",
                        "No",
                        "NO",
                        "false",
                        "False",
                        "FALSE",
                        "off",
                        "Off",
                        "OFF"})) {
    out.kind = ScalarKind::boolean;
  } else if (!parse_yaml_int(s, out) && !parse_yaml_float(s, out)) {
    out.kind = ScalarKind::string;
  }
  return out;
}

// What a value is, for "got ..." in messages.
std::string describe(const YAML::Node& node) {
  if (node.IsSequence()) {
    return "a list";
  }
  if (node.IsMap()) {
    return "a mapping";
  }
  const Scalar s = classify(node);
  switch (s.kind) {
    case ScalarKind::null:
      return "nothing (null)";
    case ScalarKind::string:
      return node.Tag() == "!" ? fmt::format("the string {}", quote(s.text))
                               : quote(s.text);
    default:
      return quote(s.text);
  }
}

constexpr size_t k_max_base_configs = 8;
constexpr size_t k_ignored_shown = 5;

class Reader {
 public:
  Reader(const std::vector<std::string>& overrides, Diagnostics& diags)
      : m_overrides(overrides), m_diags(diags) {}

  // Reads the file at `path`, its base_config chain first.
  bool load_path(const std::string& path) {
    std::vector<std::string> chain;
    return load_chain(path, chain);
  }

  // A file's text, base_config not followed.
  bool load_text(std::string_view text, const std::string& source) {
    m_from_text = true;
    return load_file(std::string(text), source, nullptr);
  }

  std::optional<MaxTextConfig> finish(const std::string& source) {
    m_config.source = source;
    if (!parse_overrides() || !load_model() || !apply_overrides()) {
      return std::nullopt;
    }
    if (!read_mesh() || !read_rules() || !read_workload() || !read_model()) {
      return std::nullopt;
    }
    note_ignored();
    return std::move(m_config);
  }

 private:
  // ---- files and overrides ----------------------------------------------

  bool load_chain(const std::string& path, std::vector<std::string>& chain) {
    if (std::find(chain.begin(), chain.end(), path) != chain.end()) {
      m_diags.error("maxtext.base-config",
                    fmt::format("base_config {} names a file of its own chain",
                                quote(path)),
                    Location::of(chain.back()));
      return false;
    }
    if (chain.size() >= k_max_base_configs) {
      m_diags.error("maxtext.base-config",
                    fmt::format("base_config chain deeper than {} files",
                                k_max_base_configs),
                    Location::of(chain.back()));
      return false;
    }
    chain.push_back(path);
    std::optional<std::string> text =
        read_file(path, InputKind::maxtext_config, m_diags);
    if (!text) {
      return false;
    }
    return load_file(std::move(*text), path, &chain);
  }

  Location location(const Origin& origin, const YAML::Mark& mark) const {
    if (mark.is_null() || mark.pos < 0) {
      return Location::of(origin.name);
    }
    const size_t pos = std::min(origin.offset + static_cast<size_t>(mark.pos),
                                origin.text.size());
    return location_in_text(origin.name, origin.text, pos);
  }

  Location at(const Setting& s, const YAML::Node& node) const {
    YAML::Mark mark = node.IsDefined() ? node.Mark() : YAML::Mark::null_mark();
    if (mark.is_null() || node.IsNull()) {
      mark = s.key_mark;
    }
    return location(*s.origin, mark);
  }

  // Parses `yaml` (the text of `origin` from its offset), reporting a syntax
  // error as maxtext.syntax.
  std::optional<YAML::Node> parse(const Origin& origin, std::string_view yaml) {
    try {
      return YAML::Load(std::string(yaml));
    } catch (const YAML::Exception& e) {
      Location loc = location(origin, e.mark);
      m_diags.error("maxtext.syntax",
                    fmt::format("not valid YAML: {}", e.msg),
                    std::move(loc));
    } catch (const std::exception& e) {
      m_diags.error("maxtext.syntax",
                    fmt::format("not valid YAML: {}", e.what()),
                    Location::of(origin.name));
    }
    return std::nullopt;
  }

  // A file's text as a mapping of keys, kept as `origin`; nullopt after
  // a maxtext.syntax error.
  std::optional<YAML::Node> parse_mapping(std::string text,
                                          const std::string& source,
                                          const Origin*& origin_out) {
    Origin& origin = m_origins.emplace_back();
    origin.name = source;
    origin.text = std::move(text);
    origin_out = &origin;
    std::optional<YAML::Node> root = parse(origin, origin.text);
    if (!root) {
      return std::nullopt;
    }
    if (!root->IsMap()) {
      m_diags.error(
          "maxtext.syntax",
          fmt::format("expected a mapping of keys (\"key: value\" lines), "
                      "got {}",
                      root->IsNull() ? std::string("an empty document")
                                     : describe(*root)),
          root->IsNull() ? Location::of(source)
                         : location(origin, root->Mark()));
      return std::nullopt;
    }
    return root;
  }

  // An entry's key: a scalar that is a field of MaxText's config; nullopt
  // after an error at it.
  std::optional<std::string> key_of_entry(const YAML::Node& key,
                                          const Origin& origin) {
    if (!key.IsScalar()) {
      m_diags.error("maxtext.syntax",
                    fmt::format("expected a key name, got {}", describe(key)),
                    location(origin, key.Mark()));
      return std::nullopt;
    }
    std::string name = key.Scalar();
    if (!known_key(name, location(origin, key.Mark()))) {
      return std::nullopt;
    }
    return name;
  }

  bool load_file(std::string text,
                 const std::string& source,
                 std::vector<std::string>* chain) {
    const Origin* parsed = nullptr;
    std::optional<YAML::Node> root =
        parse_mapping(std::move(text), source, parsed);
    if (!root) {
      return false;
    }
    const Origin& origin = *parsed;
    // base_config first: this file's keys win over its base's.
    for (const auto& entry : *root) {
      const Scalar key = classify(entry.first);
      if (key.kind == ScalarKind::string && key.text == "base_config") {
        const Setting base{entry.second, entry.first.Mark(), &origin};
        if (!load_base(base, source, chain)) {
          return false;
        }
      }
    }
    for (const auto& entry : *root) {
      const std::optional<std::string> key = key_of_entry(entry.first, origin);
      if (!key) {
        return false;
      }
      const std::string& name = *key;
      if (!m_settings.contains(name)) {
        m_order.push_back(name);
      }
      m_settings[name] = Setting{entry.second, entry.first.Mark(), &origin};
    }
    return true;
  }

  bool load_base(const Setting& base,
                 const std::string& source,
                 std::vector<std::string>* chain) {
    const Scalar value = classify(base.value);
    if (value.kind == ScalarKind::null
        || (value.kind == ScalarKind::string && value.text.empty())) {
      return true;
    }
    if (value.kind != ScalarKind::string) {
      return bad_value(base,
                       base.value,
                       fmt::format("base_config must be a file name, got {}",
                                   describe(base.value)));
    }
    if (chain == nullptr) {
      note_base(base, value.text, "base_config is not followed here");
      return true;
    }
    std::filesystem::path path(value.text);
    if (path.is_relative()) {
      path = std::filesystem::path(source).parent_path() / path;
    }
    std::error_code error;
    if (!std::filesystem::exists(path, error)) {
      note_base(base,
                value.text,
                fmt::format("{} does not exist", quote(path.string())));
      return true;
    }
    return load_chain(path.string(), *chain);
  }

  void note_base(const Setting& base,
                 const std::string& name,
                 const std::string& why) {
    Diagnostic d;
    d.severity = Severity::info;
    d.code = "maxtext.base-config";
    d.message = fmt::format(
        "base_config {} not read ({}): base.yml's defaults stand in for "
        "the keys it would set",
        quote(name),
        why);
    d.location = at(base, base.value);
    d.hint =
        "put the base file beside the config, or give the keys in the "
        "config or as KEY=VALUE";
    m_diags.add(std::move(d));
  }

  bool override_error(const Origin& origin,
                      size_t column,
                      std::string message,
                      std::string hint = {}) {
    Location loc = location_in_text(origin.name, origin.text, column);
    m_diags.error("maxtext.override", std::move(message), std::move(loc)).hint =
        std::move(hint);
    return false;
  }

  // Whether `key` is a field of MaxText's config; else an error at `where`:
  // pyconfig refuses it ("'key' not in ...") [maxtext.unknown-key].
  bool known_key(const std::string& key, Location where) {
    const auto& known = maxtext_fields();
    if (known.contains(key)) {
      return true;
    }
    std::vector<std::string> names;
    names.reserve(known.size());
    for (const auto& entry : known) {
      names.push_back(entry.first);
    }
    const std::string near = closest_match(key, names);
    m_diags
        .error("maxtext.unknown-key",
               fmt::format("{} is not a key of MaxText's config (types.py at "
                           "{}), so MaxText's pyconfig refuses it",
                           quote(key),
                           maxtext_fields_commit().substr(0, 8)),
               std::move(where))
        .hint = near.empty() ? std::string("docs/maxtext.md, \"Unknown keys\"")
                             : fmt::format("did you mean {}?", quote(near));
    return false;
  }

  // Each KEY=VALUE into m_pending.
  bool parse_overrides() {
    for (const std::string& arg : m_overrides) {
      Origin& origin = m_origins.emplace_back();
      origin.name = "--maxtext-config";
      origin.text = arg;
      origin.is_override = true;
      const size_t eq = arg.find('=');
      if (eq == std::string::npos || eq == 0) {
        return override_error(
            origin,
            0,
            fmt::format("expected KEY=VALUE, got {}", quote(arg)),
            "e.g. --maxtext-config my.yml ici_tensor_parallelism=4");
      }
      const std::string key = arg.substr(0, eq);
      origin.offset = eq + 1;
      std::optional<YAML::Node> value =
          parse(origin, std::string_view(arg).substr(eq + 1));
      if (!value) {
        return false;
      }
      // The override's own mark: its value's first character.
      YAML::Mark mark;
      mark.pos = 0;
      m_pending.emplace_back(key, Setting{*value, mark, &origin});
    }
    return true;
  }

  // The overrides over the files and the model's file: a key the model's
  // file sets may be overridden to the same value only, unless
  // override_model_config is true (pyconfig's
  // validate_no_keys_overridden_twice).
  bool apply_overrides() {
    for (const auto& [key, setting] : m_pending) {
      const Origin& origin = *setting.origin;
      if (!known_key(key, location_in_text(origin.name, origin.text, 0))) {
        return false;
      }
      if (!m_settings.contains(key)) {
        m_order.push_back(key);
      } else if (m_model_keys.contains(key) && !override_model_config()
                 && !same_value(m_settings.at(key).value, setting.value)) {
        return override_error(
            origin,
            0,
            fmt::format("Keys ['{}'] are overridden by both model config and "
                        "CLI/kwargs with different values",
                        key),
            fmt::format("{} sets {}; MaxText allows the override with "
                        "override_model_config=True",
                        m_config.model ? m_config.model->file : "the model",
                        key));
      }
      if (key == "logical_axis_rules") {
        m_override_rules = setting;
        continue;
      }
      m_settings[key] = setting;
    }
    return true;
  }

  // Whether two YAML values are the same value as PyYAML reads them.
  static bool same_value(const YAML::Node& a, const YAML::Node& b) {
    if (a.IsScalar() && b.IsScalar()) {
      const Scalar x = classify(a);
      const Scalar y = classify(b);
      if (x.kind != y.kind) {
        return (x.kind == ScalarKind::integer && y.kind == ScalarKind::floating
                && static_cast<double>(x.integer) == y.floating)
               || (y.kind == ScalarKind::integer
                   && x.kind == ScalarKind::floating
                   && static_cast<double>(y.integer) == x.floating);
      }
      switch (x.kind) {
        case ScalarKind::integer:
          return x.integer == y.integer;
        case ScalarKind::floating:
          return x.floating == y.floating;
        case ScalarKind::boolean:
          return x.boolean == y.boolean;
        default:
          return x.text == y.text;
      }
    }
    return YAML::Dump(a) == YAML::Dump(b);
  }

  // The winning setting of `key`: an override's, else the files'.
  const Setting* pending_or_set(const std::string& key) const {
    for (auto it = m_pending.rbegin(); it != m_pending.rend(); ++it) {
      if (it->first == key) {
        return &it->second;
      }
    }
    auto it = m_settings.find(key);
    return it == m_settings.end() ? nullptr : &it->second;
  }

  bool override_model_config() const {
    const Setting* s = pending_or_set("override_model_config");
    if (s == nullptr) {
      return false;
    }
    const Scalar v = classify(s->value);
    return v.kind == ScalarKind::boolean && v.boolean;
  }

  // ---- the model ------------------------------------------------------------

  // model_name's file, models/<model_name>.yml beside the config or in its
  // folder's parent's models/ (pyconfig's search, without MaxText's own
  // package folder), over the files' keys; its logical_axis_rules merge by
  // name.
  bool load_model() {
    const Setting* s = pending_or_set("model_name");
    if (s == nullptr) {
      return true;
    }
    const Scalar v = classify(s->value);
    if (v.kind != ScalarKind::string) {
      return bad_value(*s,
                       s->value,
                       fmt::format("model_name must be a model's name, got {}",
                                   describe(s->value)));
    }
    m_used.insert("model_name");
    std::string name = v.text;
    // pyconfig: "-Instruct" models have their base model's architecture.
    if (const size_t at = name.find("-Instruct"); at != std::string::npos) {
      name.erase(at, std::string_view("-Instruct").size());
    }
    if (name == "default") {
      return true;
    }
    MaxTextModel& model = m_config.model.emplace();
    model.name = name;
    model.at = at(*s, s->value);
    if (m_from_text) {
      return true;
    }
    const std::filesystem::path folder =
        std::filesystem::path(m_config.source).parent_path();
    for (const std::filesystem::path& path :
         {folder / "models" / (name + ".yml"),
          folder.parent_path() / "models" / (name + ".yml")}) {
      std::error_code error;
      if (std::filesystem::is_regular_file(path, error)) {
        model.file = path.lexically_normal().string();
        return load_model_file(model.file);
      }
    }
    return true;
  }

  bool load_model_file(const std::string& path) {
    std::optional<std::string> text =
        read_file(path, InputKind::maxtext_config, m_diags);
    if (!text) {
      return false;
    }
    const Origin* origin = nullptr;
    std::optional<YAML::Node> root =
        parse_mapping(std::move(*text), path, origin);
    if (!root) {
      return false;
    }
    for (const auto& entry : *root) {
      const std::optional<std::string> name =
          key_of_entry(entry.first, *origin);
      if (!name) {
        return false;
      }
      const std::string& key = *name;
      const Setting setting{entry.second, entry.first.Mark(), origin};
      m_model_keys.insert(key);
      if (key == "logical_axis_rules") {
        m_model_rules = setting;
        continue;
      }
      if (!m_settings.contains(key)) {
        m_order.push_back(key);
      }
      m_settings[key] = setting;
    }
    return true;
  }

  // The model keys (base.yml's defaults where unset) and what they build:
  // m_config.model, when model_name names one or a model key is set.
  bool read_model() {
    io_detail::MaxTextModelKeys k;
    bool any = false;
    auto count = [&](const auto& value) {
      if (value.set() && !any) {
        any = true;
        if (!m_config.model) {
          m_config.model.emplace().name = "default";
          m_config.model->at = Location::of(m_config.source);
        }
      }
    };
    if (!read_model_keys(k, count)) {
      return false;
    }
    if (!any && !m_config.model) {
      return true;
    }
    MaxTextModel& model = *m_config.model;
    if (model.name != "default" && model.file.empty()) {
      return stand_in(model);
    }
    const std::vector<std::string> blocks = io_detail::maxtext_decoder_blocks();
    if (std::find(blocks.begin(), blocks.end(), k.decoder_block.value)
        == blocks.end()) {
      model.missing = fmt::format(
          "decoder_block {} ({}) is not one shardplan builds; it builds {}",
          quote(k.decoder_block.value),
          to_string(maxtext_location(k.decoder_block.at)),
          fmt::join(blocks, ", "));
      return true;
    }
    std::string failure;
    std::optional<std::string> json = io_detail::maxtext_hf_config(k, failure);
    if (!json) {
      model.missing = failure;
      return true;
    }
    const std::string source =
        model.file.empty() ? m_config.source : model.file;
    model.config = read_hf_config(*json, source, m_diags);
    return model.config.has_value();
  }

  // model_name without its models/ file: the built-in model of the same
  // tensors, when there is one.
  bool stand_in(MaxTextModel& model) {
    model.builtin = io_detail::maxtext_stand_in(model.name);
    if (model.builtin.empty()) {
      model.missing = fmt::format(
          "model_name {} has no models/{}.yml beside {} (or in its folder's "
          "parent's models/), and no built-in model has its tensors",
          quote(model.name),
          model.name,
          m_config.source);
      return true;
    }
    std::optional<std::string_view> text = builtin_model_config(model.builtin);
    if (!text) {  // the table names a model the catalogue has
      model.missing = fmt::format("no built-in model {}", model.builtin);
      return true;
    }
    model.config = read_hf_config(*text, model.builtin + ".json", m_diags);
    if (!model.config) {
      return false;
    }
    // MaxText trains its own weights: no FP8 checkpoint scales.
    model.config->fp8_block.reset();
    Diagnostic d;
    d.severity = Severity::info;
    d.code = "maxtext.model";
    d.message = fmt::format(
        "model_name {}: no models/{}.yml beside the config, so shardplan's "
        "built-in {} (the same tensors) stands in",
        quote(model.name),
        model.name,
        model.builtin);
    d.location = model.at;
    d.hint =
        "put MaxText's configs/models/ beside the config to read the "
        "model's own file";
    m_diags.add(std::move(d));
    return true;
  }

  template <typename Count>
  bool read_model_keys(io_detail::MaxTextModelKeys& k, Count count) {
    struct Int {
      const char* key;
      Sourced<int64_t>* out;
      int64_t min;
    };
    const Int ints[] = {{"global_parameter_scale", &k.scale, 1},
                        {"base_emb_dim", &k.emb, 1},
                        {"base_num_query_heads", &k.heads, 1},
                        {"base_num_kv_heads", &k.kv_heads, 1},
                        {"base_mlp_dim", &k.mlp, 1},
                        {"base_num_decoder_layers", &k.layers, 1},
                        {"head_dim", &k.head_dim, 1},
                        {"vocab_size", &k.vocab, 1},
                        {"num_experts", &k.experts, 1},
                        {"num_experts_per_tok", &k.experts_per_token, 1},
                        {"base_moe_mlp_dim", &k.moe_mlp, -1},
                        {"shared_experts", &k.shared_experts, 0},
                        {"first_num_dense_layers", &k.first_dense, 0},
                        {"q_lora_rank", &k.q_lora, 0},
                        {"kv_lora_rank", &k.kv_lora, 0},
                        {"qk_nope_head_dim", &k.qk_nope, 0},
                        {"qk_rope_head_dim", &k.qk_rope, 0},
                        {"v_head_dim", &k.v_head, 0}};
    for (const Int& i : ints) {
      std::optional<Sourced<int64_t>> v = integer(i.key, i.min, false);
      if (!v) {
        return false;
      }
      if (v->set()) {
        *i.out = std::move(*v);
        count(*i.out);
      }
    }
    if (!io_detail::valid_parameter_scale(k.scale.value)) {
      m_diags.error("maxtext.bad-value",
                    fmt::format("global_parameter_scale {}: Global parameter "
                                "scale should be a power of two",
                                k.scale.value),
                    k.scale.at);
      return false;
    }
    if (k.experts_per_token.value > k.experts.value) {
      m_diags.error("maxtext.bad-value",
                    fmt::format("num_experts_per_tok {} is more than "
                                "num_experts {}",
                                k.experts_per_token.value,
                                k.experts.value),
                    k.experts_per_token.at);
      return false;
    }
    std::optional<Sourced<std::string>> block =
        string("decoder_block", "a decoder block name such as \"llama2\"");
    if (!block) {
      return false;
    }
    if (block->set()) {
      k.decoder_block = std::move(*block);
      count(k.decoder_block);
    }
    for (auto [key, out] : {std::pair{"logits_via_embedding", &k.tied},
                            std::pair{"attention_bias", &k.attention_bias},
                            std::pair{"routed_bias", &k.routed_bias}}) {
      std::optional<Sourced<bool>> v = boolean(key);
      if (!v) {
        return false;
      }
      if (v->set()) {
        *out = std::move(*v);
        count(*out);
      }
    }
    if (const Setting* s = find("mlp_activations")) {
      if (!non_empty_list(*s, "mlp_activations", "activation names")) {
        return false;
      }
      k.mlp_activations = {static_cast<int64_t>(s->value.size()),
                           at(*s, s->value)};
      count(k.mlp_activations);
    }
    for (auto [key, out] :
         {std::pair{"attn_logits_soft_cap", &k.attention_softcap},
          std::pair{"final_logits_soft_cap", &k.final_softcap}}) {
      const Setting* s = find(key);
      if (s != nullptr && classify(s->value).kind == ScalarKind::null) {
        continue;  // None: no cap
      }
      std::optional<Sourced<double>> v = number(key, 0, 1e9);
      if (!v) {
        return false;
      }
      if (v->set()) {
        *out = std::move(*v);
      }
    }
    return true;
  }

  // ---- values ---------------------------------------------------------------

  // true or false at `key`.
  std::optional<Sourced<bool>> boolean(const std::string& key) {
    const Setting* s = find(key);
    if (s == nullptr) {
      return Sourced<bool>{};
    }
    const Scalar v = classify(s->value);
    if (v.kind != ScalarKind::boolean) {
      bad_value(
          *s,
          s->value,
          fmt::format(
              "{} must be true or false, got {}", key, describe(s->value)));
      return std::nullopt;
    }
    return Sourced<bool>{v.boolean, at(*s, s->value)};
  }

  const Setting* find(const std::string& key) {
    auto it = m_settings.find(key);
    if (it == m_settings.end()) {
      return nullptr;
    }
    m_used.insert(key);
    return &it->second;
  }

  bool bad_value(const Setting& s,
                 const YAML::Node& node,
                 std::string message) {
    m_diags.error("maxtext.bad-value", std::move(message), at(s, node));
    return false;
  }

  // `s` holds a list of at least one entry, else maxtext.bad-value: "KEY
  // must be a list of WHAT, got ...".
  bool non_empty_list(const Setting& s,
                      std::string_view key,
                      std::string_view what) {
    if (s.value.IsSequence() && s.value.size() > 0) {
      return true;
    }
    return bad_value(
        s,
        s.value,
        fmt::format(
            "{} must be a list of {}, got {}", key, what, describe(s.value)));
  }

  // An integer >= `min` (or -1 when `fill`) at `key`.
  std::optional<Sourced<int64_t>> integer(const std::string& key,
                                          int64_t min,
                                          bool fill) {
    const Setting* s = find(key);
    if (s == nullptr) {
      return Sourced<int64_t>{};
    }
    const Scalar v = classify(s->value);
    const bool ok = v.kind == ScalarKind::integer && !v.overflow
                    && (v.integer >= min || (fill && v.integer == -1));
    if (!ok) {
      const std::string expected =
          fill ? fmt::format("an integer >= {} or -1", min)
               : fmt::format("an integer >= {}", min);
      bad_value(*s,
                s->value,
                fmt::format("{} must be {}, got {}",
                            key,
                            expected,
                            v.overflow ? quote(v.text) + " (out of range)"
                                       : describe(s->value)));
      return std::nullopt;
    }
    return Sourced<int64_t>{v.integer, at(*s, s->value)};
  }

  // A number (an integer or a float, as PyYAML gives them) in [min, max]
  // at `key`.
  std::optional<Sourced<double>> number(const std::string& key,
                                        double min,
                                        double max) {
    const Setting* s = find(key);
    if (s == nullptr) {
      return Sourced<double>{};
    }
    const Scalar v = classify(s->value);
    double value = 0;
    bool ok = false;
    if (v.kind == ScalarKind::integer && !v.overflow) {
      value = static_cast<double>(v.integer);
      ok = true;
    } else if (v.kind == ScalarKind::floating && std::isfinite(v.floating)) {
      value = v.floating;
      ok = true;
    }
    if (!ok || value < min || value > max) {
      bad_value(*s,
                s->value,
                fmt::format("{} must be a number from {:g} to {:g}, got {}",
                            key,
                            min,
                            max,
                            describe(s->value)));
      return std::nullopt;
    }
    return Sourced<double>{value, at(*s, s->value)};
  }

  // A string at `key` (quoted or plain, as PyYAML would give a str).
  std::optional<Sourced<std::string>> string(const std::string& key,
                                             std::string_view expected) {
    const Setting* s = find(key);
    if (s == nullptr) {
      return Sourced<std::string>{};
    }
    const Scalar v = classify(s->value);
    if (v.kind != ScalarKind::string) {
      bad_value(
          *s,
          s->value,
          fmt::format(
              "{} must be {}, got {}", key, expected, describe(s->value)));
      return std::nullopt;
    }
    return Sourced<std::string>{v.text, at(*s, s->value)};
  }

  // A list of axis names: ["data", "fsdp"] or a single name.
  bool axis_list(const Setting& s,
                 const YAML::Node& node,
                 const std::string& what,
                 std::vector<std::string>& out,
                 std::vector<Location>& where) {
    auto one = [&](const YAML::Node& item) {
      const Scalar v = classify(item);
      if (v.kind != ScalarKind::string || v.text.empty()
          || !is_name_start(v.text[0])
          || !std::all_of(v.text.begin(), v.text.end(), is_name_char)) {
        return bad_value(s,
                         item,
                         fmt::format("{} must name mesh axes "
                                     "([A-Za-z_][A-Za-z0-9_]*), got {}",
                                     what,
                                     describe(item)));
      }
      if (std::find(out.begin(), out.end(), v.text) != out.end()) {
        return bad_value(
            s,
            item,
            fmt::format("{} names axis {} twice", what, quote(v.text)));
      }
      out.push_back(v.text);
      where.push_back(at(s, item));
      return true;
    };
    if (node.IsSequence()) {
      for (const YAML::Node& item : node) {
        if (!one(item)) {
          return false;
        }
      }
      return true;
    }
    return one(node);
  }

  bool read_mesh() {
    std::vector<std::string> names = maxtext_mesh_axes();
    if (const Setting* s = find("mesh_axes")) {
      names.clear();
      std::vector<Location> where;
      if (!non_empty_list(*s, "mesh_axes", "axis names")) {
        return false;
      }
      if (!axis_list(*s, s->value, "mesh_axes", names, where)) {
        return false;
      }
      m_config.mesh_axes_at = at(*s, s->value);
    }
    if (const Setting* s = find("shard_mode")) {
      const Scalar v = classify(s->value);
      if (v.kind != ScalarKind::string
          || (v.text != "auto" && v.text != "explicit")) {
        return bad_value(
            *s,
            s->value,
            fmt::format("shard_mode must be \"auto\" or \"explicit\", got {}",
                        describe(s->value)));
      }
      m_config.explicit_axes = v.text == "explicit";
    }
    std::set<std::string> stems;
    for (const std::string& name : names) {
      MaxTextAxis axis;
      axis.name = name;
      axis.key = maxtext_key_stem(name);
      stems.insert(axis.key);
      axis.ici.value = axis.key == "fsdp" ? -1 : 1;
      axis.dcn.value = axis.key == "data" ? -1 : 1;
      for (auto [prefix, value] :
           {std::pair{"ici", &axis.ici}, std::pair{"dcn", &axis.dcn}}) {
        const std::string key =
            fmt::format("{}_{}_parallelism", prefix, axis.key);
        std::optional<Sourced<int64_t>> v = integer(key, 1, true);
        if (!v) {
          return false;
        }
        if (v->set()) {
          *value = std::move(*v);
        }
      }
      m_config.axes.push_back(std::move(axis));
    }
    // Parallelism keys of axes mesh_axes lacks: MaxText does not use them.
    for (const std::string& key : m_order) {
      const std::string_view stem = parallelism_stem(key);
      if (stem.empty() || stems.contains(std::string(stem))) {
        continue;
      }
      const Setting& s = m_settings.at(key);
      m_used.insert(key);
      const Scalar v = classify(s.value);
      if (v.kind == ScalarKind::integer && v.integer > 1) {
        const std::string axis =
            stem == "pipeline" ? std::string("stage") : std::string(stem);
        m_diags.warning(
            "maxtext.unused-axis",
            fmt::format("{} is {}, but mesh_axes has no axis {}: MaxText "
                        "does not use it",
                        key,
                        v.integer,
                        quote(axis)),
            at(s, s.value));
      }
    }
    std::optional<Sourced<int64_t>> slices = integer("num_slices", 1, true);
    if (!slices) {
      return false;
    }
    if (slices->set()) {
      m_config.num_slices = std::move(*slices);
    }
    if (const Setting* s = find("allow_split_physical_axes")) {
      const Scalar v = classify(s->value);
      if (v.kind != ScalarKind::boolean) {
        return bad_value(*s,
                         s->value,
                         fmt::format("allow_split_physical_axes must be true "
                                     "or false, got {}",
                                     describe(s->value)));
      }
      m_config.allow_split_physical_axes = {v.boolean, at(*s, s->value)};
    }
    for (const char* key :
         {"optimizer_memory_host_offload", "parameter_memory_host_offload"}) {
      const Setting* s = find(key);
      if (s == nullptr) {
        continue;
      }
      const Scalar v = classify(s->value);
      if (v.kind != ScalarKind::boolean) {
        return bad_value(
            *s,
            s->value,
            fmt::format(
                "{} must be true or false, got {}", key, describe(s->value)));
      }
      if (v.boolean) {
        std::optional<Location>& offload =
            std::string_view(key) == "optimizer_memory_host_offload"
                ? m_config.optimizer_host_offload
                : m_config.parameter_host_offload;
        offload = at(*s, s->value);
      }
    }
    return true;
  }

  // The files' logical_axis_rules, then the model's and the overrides',
  // each merged by name (pyconfig's _merge_logical_axis_rules: a rule of
  // the new list replaces every rule of its name; new names are appended).
  bool read_rules() {
    std::optional<std::vector<LogicalAxisRule>> base;
    if (const Setting* s = find("logical_axis_rules")) {
      base.emplace();
      if (!parse_rules(*s, *base)) {
        return false;
      }
      m_config.logical_axis_rules_at = at(*s, s->value);
    }
    std::vector<LogicalAxisRule> updates;
    for (const std::optional<Setting>* s :
         {&m_model_rules, &m_override_rules}) {
      if (!s->has_value()) {
        continue;
      }
      std::vector<LogicalAxisRule> rules;
      if (!parse_rules(**s, rules)) {
        return false;
      }
      merge_logical_axis_rules(updates, rules);
      m_config.logical_axis_rule_updates_at = at(**s, (*s)->value);
    }
    if (base) {
      merge_logical_axis_rules(*base, updates);
      m_config.logical_axis_rules = std::move(base);
    } else {
      m_config.logical_axis_rule_updates = std::move(updates);
    }
    return true;
  }

  bool parse_rules(const Setting& setting,
                   std::vector<LogicalAxisRule>& rules) {
    const Setting* s = &setting;
    const YAML::Node& list = s->value;
    if (!list.IsSequence()) {
      return bad_value(*s,
                       list,
                       fmt::format("logical_axis_rules must be a list of "
                                   "[logical_name, mesh_axes] pairs, got {}",
                                   describe(list)));
    }
    std::vector<std::string> mesh_names;
    for (const MaxTextAxis& axis : m_config.axes) {
      mesh_names.push_back(axis.name);
    }
    size_t index = 0;
    for (const YAML::Node& entry : list) {
      const std::string pointer = fmt::format("/logical_axis_rules/{}", index);
      const std::string what = fmt::format("logical_axis_rules[{}]", index);
      ++index;
      if (!entry.IsSequence() || entry.size() != 2) {
        return bad_value(*s,
                         entry,
                         fmt::format("{} must be a pair [logical_name, "
                                     "mesh_axes], got {}",
                                     what,
                                     entry.IsSequence() ? fmt::format(
                                         "a list of {} items", entry.size())
                                                        : describe(entry)));
      }
      const Scalar name = classify(entry[0]);
      if (name.kind != ScalarKind::string || name.text.empty()) {
        return bad_value(
            *s,
            entry[0],
            fmt::format("{} must start with a logical axis name, got {}",
                        what,
                        describe(entry[0])));
      }
      LogicalAxisRule rule;
      rule.name = name.text;
      rule.pointer = pointer;
      std::vector<std::string> axes;
      std::vector<Location> where;
      const YAML::Node value = entry[1];
      if (!value.IsNull() && !axis_list(*s, value, what, axes, where)) {
        return false;
      }
      for (size_t i = 0; i < axes.size(); ++i) {
        if (std::find(mesh_names.begin(), mesh_names.end(), axes[i])
            == mesh_names.end()) {
          const std::string near = closest_match(axes[i], mesh_names);
          m_diags
              .error("maxtext.bad-value",
                     fmt::format("{} names {}, which is not in mesh_axes",
                                 what,
                                 quote(axes[i])),
                     where[i])
              .hint =
              near.empty()
                  ? fmt::format("mesh_axes: {}", fmt::join(mesh_names, ", "))
                  : fmt::format("did you mean {}?", quote(near));
          return false;
        }
        rule.axes.push_back(
            AxisRef{axes[i], fmt::format("{}/1/{}", pointer, i)});
      }
      rules.push_back(std::move(rule));
    }
    return true;
  }

  bool read_workload() {
    if (const Setting* s = find("per_device_batch_size")) {
      const Scalar v = classify(s->value);
      std::string text;
      if (v.kind == ScalarKind::integer && !v.overflow && v.integer > 0) {
        text = std::to_string(v.integer);
      } else if (v.kind == ScalarKind::floating && std::isfinite(v.floating)
                 && v.floating > 0) {
        text = v.text;
        text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
        if (!text.empty() && text.front() == '+') {
          text.erase(text.begin());
        }
        if (!text.empty() && text.back() == '.') {
          text += '0';
        }
        if (!text.empty() && text.front() == '.') {
          text.insert(text.begin(), '0');
        }
      } else {
        return bad_value(*s,
                         s->value,
                         fmt::format("per_device_batch_size must be a number "
                                     "> 0, got {}",
                                     describe(s->value)));
      }
      m_config.per_device_batch_size =
          Sourced<std::string>{text, at(*s, s->value)};
    }
    std::optional<Sourced<int64_t>> seq =
        integer("max_target_length", 1, false);
    if (!seq) {
      return false;
    }
    if (seq->set()) {
      m_config.max_target_length = std::move(*seq);
    }
    std::optional<Sourced<int64_t>> mtp = integer("mtp_num_layers", 0, false);
    std::optional<Sourced<int64_t>> tiles =
        integer("num_vocab_tiling", 1, false);
    if (!mtp || !tiles) {
      return false;
    }
    if (tiles->set() && tiles->value > 1) {
      m_config.num_vocab_tiling = std::move(*tiles);
    }
    if (mtp->set()) {
      m_config.mtp_num_layers = std::move(*mtp);
    }
    for (const char* key :
         {"gradient_accumulation_steps", "num_pipeline_microbatches"}) {
      const bool pipeline =
          std::string_view(key) == "num_pipeline_microbatches";
      std::optional<Sourced<int64_t>> steps = integer(key, 1, pipeline);
      if (!steps) {
        return false;
      }
      if (steps->set() && steps->value == -1) {
        // base.yml's -1: "defaults to num_stages" (types.py), the stage
        // axis's ici x dcn parallelism when both are given.
        steps->value = pipeline_stages();
      }
      if (steps->set() && steps->value > 1) {
        (std::string_view(key) == "gradient_accumulation_steps"
             ? m_config.gradient_accumulation_steps
             : m_config.num_pipeline_microbatches) = std::move(*steps);
      }
    }
    std::optional<Sourced<std::string>> remat =
        string("remat_policy", "a remat policy name");
    if (!remat) {
      return false;
    }
    if (remat->set()) {
      if (!parse_remat_policy(remat->value)
          || remat->value.find(':') != std::string::npos) {
        const std::vector<std::string> names = remat_policy_names();
        const std::string near = closest_match(remat->value, names);
        Diagnostic& d =
            m_diags.error("maxtext.bad-value",
                          fmt::format("remat_policy {} is not one shardplan "
                                      "estimates; known: {}",
                                      quote(remat->value),
                                      fmt::join(names, ", ")),
                          remat->at);
        if (!near.empty()) {
          d.hint = fmt::format("did you mean {}?", quote(near));
        }
        return false;
      }
      m_config.remat_policy = std::move(*remat);
    }
    if (!read_remat_names()) {
      return false;
    }
    return read_dtype("weight_dtype", false, m_config.weight_dtype)
           && read_dtype("dtype", false, m_config.dtype) && read_optimizer()
           && read_context_strategy() && read_experts() && read_kernels()
           && read_unmodelled();
  }

  void unmodelled(const Sourced<std::string>& value, std::string what) {
    m_diags.warning("maxtext.unmodelled", std::move(what), value.at).hint =
        "docs/maxtext.md, \"Keys shardplan does not model\"";
  }

  // The keys that change memory or time and that shardplan does not
  // model: each a warning saying what it changes.
  bool read_unmodelled() {
    std::optional<Sourced<std::string>> quantization =
        string("quantization", "a quantization name, or \"\"");
    std::optional<Sourced<std::string>> mesh =
        string("custom_mesh", "a custom mesh name, or \"\"");
    std::optional<Sourced<std::string>> mesh_and_rule =
        string("custom_mesh_and_rule", "a custom mesh and rule name, or \"\"");
    std::optional<Sourced<bool>> scan = boolean("scan_layers");
    std::optional<Sourced<bool>> megablox = boolean("megablox");
    std::optional<Sourced<bool>> zero1 = boolean("shard_optimizer_over_data");
    if (!quantization || !mesh || !mesh_and_rule || !scan || !megablox
        || !zero1) {
      return false;
    }
    if (zero1->set() && zero1->value) {
      m_config.shard_optimizer_over_data = zero1->at;
    }
    const std::string& q = quantization->value;
    if (q.starts_with("fp8") || q.starts_with("te_fp8") || q == "te_mxfp8"
        || q == "nanoo_fp8") {
      m_config.fp8_quantization = quantization->at;
    } else if (!q.empty()) {
      unmodelled(*quantization,
                 fmt::format("quantization {} is not modelled: MaxText runs "
                             "the matmuls in it (shorter steps) and keeps "
                             "its scales; shardplan estimates them in the "
                             "weights' and activations' dtypes",
                             quote(quantization->value)));
    }
    if (!mesh->value.empty()) {
      unmodelled(*mesh,
                 fmt::format("custom_mesh {} is not modelled: it changes the "
                             "order MaxText lays the devices out in, and so "
                             "which links each axis crosses; shardplan lays "
                             "them out as create_device_mesh does",
                             quote(mesh->value)));
    }
    if (!mesh_and_rule->value.empty()) {
      unmodelled(*mesh_and_rule,
                 fmt::format("custom_mesh_and_rule {} is not modelled: it "
                             "replaces the mesh axes and the logical axis "
                             "rules with MaxText's configs/mesh_and_rule/"
                             "file; shardplan plans with the config's own",
                             quote(mesh_and_rule->value)));
    }
    if (scan->set() && !scan->value) {
      unmodelled(Sourced<std::string>{"false", scan->at},
                 "scan_layers false is not modelled: unscanned layers let "
                 "XLA schedule across layer boundaries, which can hold more "
                 "than one layer's buffers; shardplan estimates a scanned "
                 "stack");
    }
    if (megablox->set() && !megablox->value) {
      unmodelled(Sourced<std::string>{"false", megablox->at},
                 "megablox false is not modelled: the experts' grouped "
                 "matmul runs as jax.lax.ragged_dot, with its own buffers "
                 "and speed; shardplan estimates the Megablox kernel's");
    }
    for (const char* name : {"kv_proj",
                             "query_wa_proj",
                             "kv_wa_proj",
                             "attention_out",
                             "indexer_cutoff_threshold"}) {
      std::optional<Sourced<std::string>> place =
          string(name, "'remat', 'device' or 'offload'");
      if (!place) {
        return false;
      }
      if (place->set() && place->value != "remat") {
        unmodelled(*place,
                   fmt::format("{}: {} is not modelled: shardplan's custom "
                               "policy does not place {}, and counts it "
                               "rematerialized",
                               name,
                               quote(place->value),
                               name));
      }
    }
    return true;
  }

  // capacity_factor, sparse_matmul and ragged_buffer_factor (base.yml:
  // -1.0, true, -1.0).
  bool read_experts() {
    std::optional<Sourced<double>> capacity = number("capacity_factor", -1, 64);
    std::optional<Sourced<double>> ragged =
        number("ragged_buffer_factor", -1, 1024);
    if (!capacity || !ragged) {
      return false;
    }
    if (const Setting* s = find("sparse_matmul")) {
      const Scalar v = classify(s->value);
      if (v.kind != ScalarKind::boolean) {
        return bad_value(*s,
                         s->value,
                         fmt::format("sparse_matmul must be true or false, "
                                     "got {}",
                                     describe(s->value)));
      }
      m_config.sparse_matmul = Sourced<bool>{v.boolean, at(*s, s->value)};
    }
    if (capacity->set()) {
      m_config.capacity_factor = std::move(*capacity);
    }
    if (ragged->set()) {
      m_config.ragged_buffer_factor = std::move(*ragged);
    }
    return true;
  }

  // The kernels' tiles: splash attention's blocks and the grouped
  // matmul's row tiles (MaxTextConfig::splash_blocks, gmm_tile_rows).
  bool read_kernels() {
    const auto note = [](std::optional<Location>& first, const Location& at) {
      if (!first) {
        first = at;
      }
    };
    const auto sizes = [&](const std::array<const char*, 6>& keys,
                           std::array<int64_t, 6>& out,
                           std::optional<Location>& first) {
      for (size_t i = 0; i < keys.size(); ++i) {
        std::optional<Sourced<int64_t>> v = integer(keys[i], 1, false);
        if (!v) {
          return false;
        }
        if (v->set()) {
          out[i] = v->value;
          note(first, v->at);
        }
      }
      return true;
    };
    const auto flag =
        [&](const char* key, bool& out, std::optional<Location>& first) {
          std::optional<Sourced<bool>> v = boolean(key);
          if (v && v->set()) {
            out = v->value;
            note(first, v->at);
          }
          return v.has_value();
        };
    MaxTextConfig& c = m_config;
    return sizes({"sa_block_q",
                  "sa_block_kv",
                  "sa_block_q_dkv",
                  "sa_block_kv_dkv",
                  "sa_block_q_dq",
                  "sa_block_kv_dq"},
                 c.splash_blocks,
                 c.splash_at)
           && flag(
               "sa_use_fused_bwd_kernel", c.splash_fused_backward, c.splash_at)
           && flag("use_tokamax_gmm", c.tokamax_gmm, c.gmm_at)
           && flag("use_gmm_v2", c.gmm_v2, c.gmm_at)
           && sizes({"wi_tile_fwd_batch_seq",
                     "wi_tile_dlhs_batch_seq",
                     "wi_tile_drhs_batch_seq",
                     "wo_tile_fwd_batch_seq",
                     "wo_tile_dlhs_batch_seq",
                     "wo_tile_drhs_batch_seq"},
                    c.gmm_tile_rows,
                    c.gmm_at);
  }

  // context_parallel_strategy: all_gather, ring or ulysses (MaxText's
  // "usp", ulysses within ring, is not modelled).
  bool read_context_strategy() {
    std::optional<Sourced<std::string>> strategy =
        string("context_parallel_strategy", "all_gather, ring or ulysses");
    if (!strategy) {
      return false;
    }
    if (!strategy->set()) {
      return true;
    }
    if (!one_of(*strategy,
                {"all_gather", "ring", "ulysses"},
                fmt::format("context_parallel_strategy {} is not one "
                            "shardplan models; expected all_gather, ring or "
                            "ulysses",
                            quote(strategy->value)))) {
      return false;
    }
    m_config.context_parallel_strategy = std::move(*strategy);
    return true;
  }

  // The pipeline's stages, ici_pipeline_parallelism x
  // dcn_pipeline_parallelism; 1 when either is -1 (filled from the device
  // count, unknown here).
  int64_t pipeline_stages() const {
    for (const MaxTextAxis& axis : m_config.axes) {
      if (axis.name == "stage") {
        return axis.ici.value >= 1 && axis.dcn.value >= 1
                   ? axis.ici.value * axis.dcn.value
                   : 1;
      }
    }
    return 1;
  }

  // Whether `value` is one of `known`; else reports `message` at it, with
  // the nearest as a hint.
  bool one_of(const Sourced<std::string>& value,
              const std::vector<std::string>& known,
              std::string message) {
    if (std::find(known.begin(), known.end(), value.value) != known.end()) {
      return true;
    }
    Diagnostic& d =
        m_diags.error("maxtext.bad-value", std::move(message), value.at);
    const std::string near = closest_match(value.value, known);
    if (!near.empty()) {
      d.hint = fmt::format("did you mean {}?", quote(near));
    }
    return false;
  }

  // A dtype key's value into `out`; with `optional_floating` (mu_dtype) ""
  // leaves it unset and the dtype must be floating point. False after an
  // error at the key.
  bool read_dtype(const char* key,
                  bool optional_floating,
                  std::optional<Sourced<DType>>& out) {
    std::optional<Sourced<std::string>> text =
        string(key,
               optional_floating ? "a dtype name such as \"float32\", or \"\""
                                 : "a dtype name such as \"float32\"");
    if (!text) {
      return false;
    }
    if (!text->set() || (optional_floating && text->value.empty())) {
      return true;
    }
    std::optional<DType> parsed = parse_dtype(text->value);
    if (!parsed || (optional_floating && !is_floating(*parsed))) {
      m_diags
          .error("maxtext.bad-value",
                 fmt::format("{} {} is not a{} dtype",
                             key,
                             quote(text->value),
                             optional_floating ? " floating-point" : ""),
                 text->at)
          .hint = dtype_hint(text->value);
      return false;
    }
    out = Sourced<DType>{*parsed, text->at};
    return true;
  }

  // opt_type and mu_dtype (base.yml: "adamw", "": the weights' dtype).
  bool read_optimizer() {
    std::optional<Sourced<std::string>> opt =
        string("opt_type", "an optimizer: adamw, adam_pax, sgd or muon");
    if (!opt) {
      return false;
    }
    if (opt->set()) {
      if (!one_of(*opt,
                  {"adamw", "adam_pax", "sgd", "muon"},
                  fmt::format("opt_type {} is not an optimizer MaxText "
                              "builds; expected adamw, adam_pax, sgd or muon",
                              quote(opt->value)))) {
        return false;
      }
      m_config.opt_type = std::move(*opt);
    }
    return read_dtype("mu_dtype", true, m_config.mu_dtype);
  }

  // The custom policy's keys: each 'remat', 'device' or 'offload'.
  bool read_remat_names() {
    for (const std::string& name : custom_remat_names()) {
      std::optional<Sourced<std::string>> place =
          string(name, "'remat', 'device' or 'offload'");
      if (!place) {
        return false;
      }
      if (!place->set()) {
        continue;
      }
      if (!parse_remat_placement(place->value)) {
        m_diags
            .error("maxtext.bad-value",
                   fmt::format("{} must be 'remat', 'device' or 'offload', "
                               "got {}",
                               name,
                               quote(place->value)),
                   place->at)
            .hint =
            "MaxText's custom remat_policy places each named "
            "tensor: rematerialized, kept on the device, or "
            "offloaded to host memory";
        return false;
      }
      m_config.remat_names.emplace_back(name, std::move(*place));
    }
    return true;
  }

  void note_ignored() {
    for (const std::string& key : m_order) {
      if (!m_used.contains(key) && key != "base_config") {
        m_config.ignored_keys.push_back(key);
      }
    }
    const std::vector<std::string>& ignored = m_config.ignored_keys;
    if (ignored.empty()) {
      return;
    }
    std::vector<std::string> shown;
    for (size_t i = 0; i < ignored.size() && i < k_ignored_shown; ++i) {
      shown.push_back(ignored[i]);
    }
    Diagnostic d;
    d.severity = Severity::info;
    d.code = "maxtext.ignored-keys";
    d.message = fmt::format("{} key{} shardplan does not read {} ignored: {}{}",
                            ignored.size(),
                            ignored.size() == 1 ? "" : "s",
                            ignored.size() == 1 ? "was" : "were",
                            fmt::join(shown, ", "),
                            ignored.size() > shown.size() ? ", ..." : "");
    d.location = Location::of(m_config.source);
    d.hint = "docs/maxtext.md lists the keys shardplan reads";
    m_diags.add(std::move(d));
  }

  const std::vector<std::string>& m_overrides;
  // The overrides parsed, in order, before the model's file is read.
  std::vector<std::pair<std::string, Setting>> m_pending;
  // The keys models/<model_name>.yml sets; its logical_axis_rules and the
  // overrides', which merge by name into the files' (pyconfig).
  std::set<std::string> m_model_keys;
  std::optional<Setting> m_model_rules;
  std::optional<Setting> m_override_rules;
  bool m_from_text = false;
  Diagnostics& m_diags;
  std::deque<Origin> m_origins;  // stable addresses for Setting::origin
  std::map<std::string, Setting> m_settings;
  std::vector<std::string> m_order;  // first-seen order of the keys
  std::set<std::string> m_used;
  MaxTextConfig m_config;
};

// A value's key for messages: "ici_fsdp_parallelism".
std::string key_of(const MaxTextAxis& axis, bool dcn) {
  return fmt::format("{}_{}_parallelism", dcn ? "dcn" : "ici", axis.key);
}

// "ici_fsdp_parallelism -1 (cfg.yml:3:23)" or "... (MaxText's default)".
std::string term(const MaxTextAxis& axis, bool dcn, int64_t value) {
  const Sourced<int64_t>& v = dcn ? axis.dcn : axis.ici;
  return fmt::format("{} {} ({})",
                     key_of(axis, dcn),
                     value,
                     v.set() ? to_string(maxtext_location(v.at))
                             : std::string("MaxText's default"));
}

// fill_unspecified_mesh_axes for the ICI (dcn false) or DCN values of
// `axes` against `target`; fills `values`.
bool fill(std::vector<MaxTextAxis>& axes,
          bool dcn,
          int64_t target,
          const std::string& source,
          Diagnostics& diags) {
  const std::string type = dcn ? "DCN" : "ICI";
  auto value = [&](size_t i) -> Sourced<int64_t>& {
    return dcn ? axes[i].dcn : axes[i].ici;
  };
  auto where = [&](size_t i) {
    return value(i).set() ? value(i).at : Location::of(source);
  };
  std::vector<size_t> unspecified;
  int64_t product = 1;
  bool overflow = false;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (value(i).value == -1) {
      unspecified.push_back(i);
      continue;
    }
    std::optional<int64_t> p = checked_mul(product, value(i).value);
    overflow = overflow || !p;
    product = p.value_or(product);
  }
  std::vector<std::string> terms;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (value(i).value != 1) {
      terms.push_back(term(axes[i], dcn, value(i).value));
    }
  }
  const std::string listed = fmt::format("{}", fmt::join(terms, ", "));
  if (unspecified.size() > 1) {
    diags
        .error("maxtext.mesh",
               fmt::format("Found unspecified values (-1) for more than one {} "
                           "parallelism axis. At most one axis can be "
                           "unspecified",
                           type),
               where(unspecified[1]))
        .hint = fmt::format("-1: {}", listed);
    return false;
  }
  const std::string target_type = dcn ? "slices" : "devices per slice";
  if (overflow) {
    diags
        .error("maxtext.mesh",
               fmt::format("Number of {} {} does not match the product of the "
                           "{} parallelism (beyond 2^63)",
                           target_type,
                           target,
                           type),
               Location::of(source))
        .hint = listed;
    return false;
  }
  if (unspecified.size() == 1) {
    const size_t i = unspecified[0];
    // max_utils.fill_unspecified_mesh_axes: the value must come out a
    // whole number >= 1.
    if (product > target || target % product != 0) {
      diags
          .error("maxtext.mesh",
                 fmt::format("Unspecified value unable to be determined with "
                             "the given {} parallelism values",
                             type),
                 where(i))
          .hint = fmt::format(
          "the other {} values multiply to {}, which does not divide the {} "
          "{}: {}",
          type,
          product,
          target,
          target_type,
          listed);
      return false;
    }
    value(i).value = target / product;
    product *= value(i).value;
  }
  if (product != target) {
    size_t culprit = axes.size();
    if (unspecified.size() == 1) {
      culprit = unspecified[0];
    } else {
      for (size_t i = 0; i < axes.size(); ++i) {
        if (value(i).value != 1 && value(i).set()) {
          culprit = i;
        }
      }
    }
    diags
        .error("maxtext.mesh",
               fmt::format("Number of {} {} does not match the product of the "
                           "{} parallelism {}",
                           target_type,
                           target,
                           type,
                           product),
               culprit < axes.size() ? where(culprit) : Location::of(source))
        .hint = terms.empty() ? std::string("every value is 1") : listed;
    return false;
  }
  return true;
}

}  // namespace

Location maxtext_location(const Location& at) {
  if (at.line > 0 && at.source == "--maxtext-config") {
    return Location::of(fmt::format("--maxtext-config {}", at.excerpt));
  }
  return at.empty() ? Location::of("--maxtext-config") : at;
}

std::optional<MaxTextConfig> read_maxtext_config(
    const std::string& path,
    const std::vector<std::string>& overrides,
    Diagnostics& diags) {
  try {
    Reader reader(overrides, diags);
    if (!reader.load_path(path)) {
      return std::nullopt;
    }
    return reader.finish(path);
  } catch (const std::exception& e) {
    diags.error("maxtext.syntax",
                fmt::format("cannot read the config: {}", e.what()),
                Location::of(path));
    return std::nullopt;
  }
}

std::optional<MaxTextConfig> read_maxtext_config_text(
    std::string_view yaml,
    const std::string& source,
    const std::vector<std::string>& overrides,
    Diagnostics& diags) {
  try {
    Reader reader(overrides, diags);
    if (!reader.load_text(yaml, source)) {
      return std::nullopt;
    }
    return reader.finish(source);
  } catch (const std::exception& e) {
    diags.error("maxtext.syntax",
                fmt::format("cannot read the config: {}", e.what()),
                Location::of(source));
    return std::nullopt;
  }
}

std::optional<MaxTextMesh> maxtext_mesh(const MaxTextConfig& config,
                                        int64_t devices,
                                        std::optional<int64_t> topology_slices,
                                        Diagnostics& diags) {
  MaxTextMesh out;
  out.axes = config.axes;
  out.allow_split_physical_axes = config.allow_split_physical_axes.value;
  int64_t slices = topology_slices.value_or(1);
  if (config.num_slices.value > 0) {
    if (topology_slices && *topology_slices != config.num_slices.value) {
      diags
          .error("maxtext.bad-value",
                 fmt::format("num_slices is {}, but the topology has {} "
                             "slice{}",
                             config.num_slices.value,
                             *topology_slices,
                             *topology_slices == 1 ? "" : "s"),
                 config.num_slices.at)
          .hint =
          "set num_slices to -1 (the topology's), or give the "
          "topology the config is for";
      return std::nullopt;
    }
    slices = config.num_slices.value;
  }
  if (slices < 1 || devices < slices || devices % slices != 0) {
    diags.error(
        "maxtext.bad-value",
        fmt::format("{} slices do not divide the {} devices", slices, devices),
        config.num_slices.set() ? config.num_slices.at
                                : Location::of(config.source));
    return std::nullopt;
  }
  out.num_slices = slices;
  if (slices == 1) {
    for (const MaxTextAxis& axis : out.axes) {
      if (axis.dcn.value > 1) {
        diags
            .error("maxtext.dcn",
                   "DCN parallelism requested but only one slice available",
                   axis.dcn.set() ? axis.dcn.at : Location::of(config.source))
            .hint = fmt::format(
            "{} is {}; one slice has no DCN axes: set it to 1, or give a "
            "multi-slice topology (2xv5p-128)",
            key_of(axis, true),
            axis.dcn.value);
        return std::nullopt;
      }
    }
    for (MaxTextAxis& axis : out.axes) {
      axis.dcn.value = 1;
    }
  }
  if (!fill(out.axes, false, devices / slices, config.source, diags)) {
    return std::nullopt;
  }
  if (slices > 1 && !fill(out.axes, true, slices, config.source, diags)) {
    return std::nullopt;
  }
  std::vector<std::string> mesh;
  std::vector<std::string> dcn;
  const std::string type = config.explicit_axes ? ":explicit" : "";
  size_t keep = 0;
  for (size_t i = 0; i < config.axes.size(); ++i) {
    if (config.axes[i].ici.value == -1) {
      keep = i;
    }
  }
  for (size_t i = 0; i < out.axes.size(); ++i) {
    const MaxTextAxis& axis = out.axes[i];
    const int64_t size = axis.ici.value * axis.dcn.value;
    if (size > 1) {
      mesh.push_back(fmt::format("{}:{}{}", axis.name, size, type));
    }
    if (axis.dcn.value > 1) {
      dcn.push_back(fmt::format("{}:{}", axis.name, axis.dcn.value));
    }
  }
  if (mesh.empty() && !out.axes.empty()) {
    mesh.push_back(fmt::format("{}:1{}", out.axes[keep].name, type));
  }
  out.mesh = fmt::format("{}", fmt::join(mesh, ","));
  out.dcn = fmt::format("{}", fmt::join(dcn, ","));
  return out;
}

}  // namespace shardplan
