#include "support/json_schema.hpp"

#include <shardplan/diag.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>

namespace shardplan::test {

namespace {

using Json = nlohmann::json;

constexpr std::string_view k_draft =
    "https://json-schema.org/draft/2020-12/schema";
// Deeper than any real schema nests; stops a $ref cycle that makes no
// progress ({"$ref": "#"}).
constexpr int k_max_depth = 200;

// A place in a schema document: its file name and a JSON pointer into it.
struct Where {
  std::string doc;
  std::string pointer;

  Where child(std::string_view token) const {
    return {doc, json_pointer_child(pointer, token)};
  }
  Where child(size_t index) const { return child(std::to_string(index)); }
  std::string path() const { return doc + "#" + pointer; }
};

bool is_type_name(const Json& j) {
  static const std::set<std::string> names = {
      "null", "boolean", "object", "array", "number", "string", "integer"};
  return j.is_string() && names.count(j.get<std::string>()) > 0;
}

bool has_type(const Json& instance, const std::string& type) {
  if (type == "null") {
    return instance.is_null();
  }
  if (type == "boolean") {
    return instance.is_boolean();
  }
  if (type == "object") {
    return instance.is_object();
  }
  if (type == "array") {
    return instance.is_array();
  }
  if (type == "number") {
    return instance.is_number();
  }
  if (type == "string") {
    return instance.is_string();
  }
  // "integer": written as a JSON integer (stricter than the draft, which
  // also counts 6.0).
  return instance.is_number_integer();
}

std::string type_of(const Json& instance) {
  if (instance.is_number_integer()) {
    return "integer";
  }
  if (instance.is_number()) {
    return "number";
  }
  return instance.type_name();
}

// A value for a message: short JSON, long ones cut.
std::string show(const Json& j) {
  std::string text = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 60) {
    text = text.substr(0, 57) + "...";
  }
  return text;
}

size_t code_points(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0U) != 0x80U;
  }));
}

// Checks the value of one keyword; returns an empty string when it is well
// formed, else what is wrong. Unknown keywords are reported here.
std::string keyword_problem(const std::string& key, const Json& value) {
  auto is_schema = [](const Json& j) {
    return j.is_object() || j.is_boolean();
  };
  auto non_negative_integer = [](const Json& j) {
    return j.is_number_integer() && j.get<int64_t>() >= 0;
  };
  if (key == "type") {
    if (is_type_name(value)
        || (value.is_array() && !value.empty()
            && std::all_of(value.begin(), value.end(), is_type_name))) {
      return "";
    }
    return "expected a type name or a list of them";
  }
  if (key == "enum" || key == "prefixItems" || key == "allOf" || key == "anyOf"
      || key == "oneOf") {
    if (!value.is_array() || value.empty()) {
      return "expected a non-empty array";
    }
    if (key != "enum" && !std::all_of(value.begin(), value.end(), is_schema)) {
      return "expected an array of schemas";
    }
    return "";
  }
  if (key == "const") {
    return "";
  }
  if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum") {
    return value.is_number() ? "" : "expected a number";
  }
  if (key == "minItems" || key == "maxItems" || key == "minLength") {
    return non_negative_integer(value) ? "" : "expected an integer >= 0";
  }
  if (key == "required") {
    if (value.is_array()
        && std::all_of(value.begin(), value.end(), [](const Json& j) {
             return j.is_string();
           })) {
      return "";
    }
    return "expected an array of strings";
  }
  if (key == "properties" || key == "$defs") {
    if (value.is_object()
        && std::all_of(value.begin(), value.end(), is_schema)) {
      return "";
    }
    return "expected an object of schemas";
  }
  if (key == "additionalProperties" || key == "items" || key == "not") {
    return is_schema(value) ? "" : "expected a schema";
  }
  if (key == "$ref") {
    return value.is_string() ? "" : "expected a string";
  }
  if (key == "$schema") {
    return value == k_draft ? "" : fmt::format("only {} is supported", k_draft);
  }
  if (key == "title" || key == "description" || key == "$comment") {
    return value.is_string() ? "" : "expected a string";
  }
  return "unsupported keyword";
}

class Evaluator {
 public:
  explicit Evaluator(SchemaValidator& validator) : m_validator(validator) {}

  void run(const Json& schema,
           const Where& where,
           const Json& instance,
           const std::string& at,
           std::vector<SchemaError>& out) {
    if (m_depth >= k_max_depth) {
      schema_error(out, where, "$ref", "schemas nest too deep (a $ref cycle?)");
      return;
    }
    ++m_depth;
    evaluate(schema, where, instance, at, out);
    --m_depth;
  }

  // Resolves "FILE#POINTER" or "#POINTER" seen in document `doc`.
  const Json* resolve(const std::string& ref,
                      const std::string& doc,
                      Where& target,
                      std::vector<SchemaError>& errors,
                      const Where& where) {
    size_t hash = ref.find('#');
    std::string file = ref.substr(0, hash);
    std::string fragment =
        hash == std::string::npos ? "" : ref.substr(hash + 1);
    if (file.empty()) {
      file = doc;
    }
    if (file.find('/') != std::string::npos
        || file.find(':') != std::string::npos
        || fragment.find('%') != std::string::npos
        || (!fragment.empty() && fragment[0] != '/')) {
      schema_error(errors,
                   where,
                   "$ref",
                   fmt::format("unsupported $ref \"{}\": only \"#/...\" and "
                               "\"FILE#/...\" for a file beside this one",
                               ref));
      return nullptr;
    }
    const Json* root = m_validator.document(file, errors);
    if (root == nullptr) {
      return nullptr;
    }
    try {
      const Json& found = root->at(Json::json_pointer(fragment));
      target = {file, fragment};
      return &found;
    } catch (const Json::exception&) {
      schema_error(errors,
                   where,
                   "$ref",
                   fmt::format("$ref \"{}\" does not resolve", ref));
      return nullptr;
    }
  }

  static void schema_error(std::vector<SchemaError>& out,
                           const Where& where,
                           std::string keyword,
                           std::string message) {
    out.push_back(
        {"", std::move(keyword), where.path(), std::move(message), true});
  }

 private:
  static void fail(std::vector<SchemaError>& out,
                   const std::string& at,
                   std::string keyword,
                   const Where& where,
                   std::string message) {
    out.push_back(
        {at, std::move(keyword), where.path(), std::move(message), false});
  }

  // Runs `schema` on `instance` into a list of its own; schema errors still
  // go to `out`, so a broken branch of anyOf is not mistaken for a miss.
  std::vector<SchemaError> trial(const Json& schema,
                                 const Where& where,
                                 const Json& instance,
                                 const std::string& at,
                                 std::vector<SchemaError>& out) {
    std::vector<SchemaError> local;
    run(schema, where, instance, at, local);
    std::vector<SchemaError> value_errors;
    for (SchemaError& e : local) {
      (e.in_schema ? out : value_errors).push_back(std::move(e));
    }
    return value_errors;
  }

  static std::string summary(
      const std::vector<std::vector<SchemaError>>& branches) {
    std::string text;
    for (size_t i = 0; i < branches.size(); ++i) {
      if (branches[i].empty()) {
        continue;
      }
      const SchemaError& first = branches[i].front();
      text += fmt::format("; [{}] {}: {}: {}",
                          i,
                          first.pointer.empty() ? "(root)" : first.pointer,
                          first.keyword,
                          first.message);
      if (branches[i].size() > 1) {
        text += fmt::format(" (+{} more)", branches[i].size() - 1);
      }
    }
    return text;
  }

  void evaluate(const Json& schema,
                const Where& where,
                const Json& instance,
                const std::string& at,
                std::vector<SchemaError>& out) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) {
        fail(out, at, "false", where, "no value is allowed here");
      }
      return;
    }
    if (!schema.is_object()) {
      schema_error(out, where, "$schema", "a schema is an object or a boolean");
      return;
    }
    for (const auto& [key, value] : schema.items()) {
      const Where here = where.child(key);
      if (std::string problem = keyword_problem(key, value); !problem.empty()) {
        schema_error(
            out, here, key, fmt::format("keyword \"{}\": {}", key, problem));
        continue;
      }
      apply(key, value, schema, where, here, instance, at, out);
    }
  }

  void apply(const std::string& key,
             const Json& value,
             const Json& schema,
             const Where& where,
             const Where& here,
             const Json& instance,
             const std::string& at,
             std::vector<SchemaError>& out) {
    if (key == "type") {
      std::vector<std::string> types;
      if (value.is_string()) {
        types.push_back(value.get<std::string>());
      } else {
        types = value.get<std::vector<std::string>>();
      }
      if (std::none_of(types.begin(), types.end(), [&](const std::string& t) {
            return has_type(instance, t);
          })) {
        fail(out,
             at,
             key,
             here,
             fmt::format("expected {}, got {} {}",
                         fmt::join(types, " or "),
                         type_of(instance),
                         show(instance)));
      }
    } else if (key == "enum") {
      if (std::find(value.begin(), value.end(), instance) == value.end()) {
        fail(out,
             at,
             key,
             here,
             fmt::format(
                 "got {}, expected one of {}", show(instance), show(value)));
      }
    } else if (key == "const") {
      if (instance != value) {
        fail(out,
             at,
             key,
             here,
             fmt::format("got {}, expected {}", show(instance), show(value)));
      }
    } else if (key == "minimum" || key == "maximum"
               || key == "exclusiveMinimum") {
      if (!instance.is_number()) {
        return;
      }
      const bool ok = compare(key, instance, value);
      if (!ok) {
        fail(out,
             at,
             key,
             here,
             fmt::format("got {}, expected {} {}",
                         show(instance),
                         key == "minimum"   ? ">="
                         : key == "maximum" ? "<="
                                            : ">",
                         show(value)));
      }
    } else if (key == "minItems" || key == "maxItems") {
      if (!instance.is_array()) {
        return;
      }
      const auto limit = value.get<size_t>();
      if (key == "minItems" ? instance.size() < limit
                            : instance.size() > limit) {
        fail(out,
             at,
             key,
             here,
             fmt::format("{} items, expected {} {}",
                         instance.size(),
                         key == "minItems" ? "at least" : "at most",
                         limit));
      }
    } else if (key == "minLength") {
      if (instance.is_string()
          && code_points(instance.get<std::string>()) < value.get<size_t>()) {
        fail(out,
             at,
             key,
             here,
             fmt::format("string {} is shorter than {}",
                         show(instance),
                         value.get<size_t>()));
      }
    } else if (key == "required") {
      if (!instance.is_object()) {
        return;
      }
      for (const Json& name : value) {
        if (!instance.contains(name.get<std::string>())) {
          fail(out, at, key, here, fmt::format("missing key {}", show(name)));
        }
      }
    } else if (key == "properties") {
      if (!instance.is_object()) {
        return;
      }
      for (const auto& [name, sub] : value.items()) {
        if (instance.contains(name)) {
          run(sub,
              here.child(name),
              instance.at(name),
              json_pointer_child(at, name),
              out);
        }
      }
    } else if (key == "additionalProperties") {
      if (!instance.is_object()) {
        return;
      }
      const Json* known =
          schema.contains("properties") ? &schema.at("properties") : nullptr;
      for (const auto& [name, sub] : instance.items()) {
        if (known != nullptr && known->contains(name)) {
          continue;
        }
        const std::string child = json_pointer_child(at, name);
        if (value.is_boolean() && !value.get<bool>()) {
          fail(out,
               child,
               key,
               here,
               fmt::format("unexpected key {}", show(Json(name))));
        } else {
          run(value, here, sub, child, out);
        }
      }
    } else if (key == "prefixItems") {
      if (!instance.is_array()) {
        return;
      }
      for (size_t i = 0; i < std::min(instance.size(), value.size()); ++i) {
        run(value[i],
            here.child(i),
            instance[i],
            json_pointer_child(at, std::to_string(i)),
            out);
      }
    } else if (key == "items") {
      if (!instance.is_array()) {
        return;
      }
      size_t start = 0;
      if (schema.contains("prefixItems")
          && schema.at("prefixItems").is_array()) {
        start = schema.at("prefixItems").size();
      }
      for (size_t i = start; i < instance.size(); ++i) {
        run(value,
            here,
            instance[i],
            json_pointer_child(at, std::to_string(i)),
            out);
      }
    } else if (key == "allOf") {
      for (size_t i = 0; i < value.size(); ++i) {
        run(value[i], here.child(i), instance, at, out);
      }
    } else if (key == "anyOf" || key == "oneOf") {
      std::vector<std::vector<SchemaError>> branches;
      std::vector<size_t> matched;
      for (size_t i = 0; i < value.size(); ++i) {
        branches.push_back(trial(value[i], here.child(i), instance, at, out));
        if (branches.back().empty()) {
          matched.push_back(i);
        }
      }
      if (matched.empty()) {
        fail(out,
             at,
             key,
             here,
             fmt::format("matches none of the {} subschemas{}",
                         value.size(),
                         summary(branches)));
      } else if (key == "oneOf" && matched.size() > 1) {
        fail(out,
             at,
             key,
             here,
             fmt::format("matches subschemas {}; exactly one must match",
                         fmt::join(matched, " and ")));
      }
    } else if (key == "not") {
      if (trial(value, here, instance, at, out).empty()) {
        fail(out, at, key, here, "matches a schema it must not match");
      }
    } else if (key == "$ref") {
      Where target;
      if (const Json* sub =
              resolve(value.get<std::string>(), where.doc, target, out, here)) {
        run(*sub, target, instance, at, out);
      }
    }
    // $defs, $schema, title, description, $comment: nothing to check.
  }

  // Numbers compared as long double: exact for every int64 and uint64 on
  // x86-64 (a 64-bit mantissa), and for every double.
  static long double number(const Json& j) {
    if (j.is_number_unsigned()) {
      return static_cast<long double>(j.get<uint64_t>());
    }
    if (j.is_number_integer()) {
      return static_cast<long double>(j.get<int64_t>());
    }
    return static_cast<long double>(j.get<double>());
  }

  static bool compare(const std::string& key,
                      const Json& instance,
                      const Json& limit) {
    const long double a = number(instance);
    const long double b = number(limit);
    return key == "minimum" ? a >= b : key == "maximum" ? a <= b : a > b;
  }

  SchemaValidator& m_validator;
  int m_depth = 0;
};

// Every subschema of `schema`, checked for well-formed keywords and $refs
// that resolve.
void walk(Evaluator& evaluator,
          const Json& schema,
          const Where& where,
          std::vector<SchemaError>& out) {
  if (schema.is_boolean()) {
    return;
  }
  if (!schema.is_object()) {
    Evaluator::schema_error(
        out, where, "$schema", "a schema is an object or a boolean");
    return;
  }
  for (const auto& [key, value] : schema.items()) {
    const Where here = where.child(key);
    if (std::string problem = keyword_problem(key, value); !problem.empty()) {
      Evaluator::schema_error(
          out, here, key, fmt::format("keyword \"{}\": {}", key, problem));
      continue;
    }
    if (key == "properties" || key == "$defs") {
      for (const auto& [name, sub] : value.items()) {
        walk(evaluator, sub, here.child(name), out);
      }
    } else if (key == "additionalProperties" || key == "items"
               || key == "not") {
      walk(evaluator, value, here, out);
    } else if (key == "prefixItems" || key == "allOf" || key == "anyOf"
               || key == "oneOf") {
      for (size_t i = 0; i < value.size(); ++i) {
        walk(evaluator, value[i], here.child(i), out);
      }
    } else if (key == "$ref") {
      Where target;
      evaluator.resolve(value.get<std::string>(), where.doc, target, out, here);
    }
  }
}

}  // namespace

std::string to_string(const SchemaError& error) {
  return fmt::format("{}: {}: {} (at {})",
                     error.pointer.empty() ? "(root)" : error.pointer,
                     error.keyword,
                     error.message,
                     error.schema_path);
}

std::string to_string(const std::vector<SchemaError>& errors) {
  std::string out;
  for (const SchemaError& e : errors) {
    out += to_string(e) + "\n";
  }
  return out;
}

SchemaValidator::SchemaValidator(std::string directory)
    : m_directory(std::move(directory)) {}

void SchemaValidator::add(const std::string& name, nlohmann::json schema) {
  m_documents[name] = std::move(schema);
}

const nlohmann::json* SchemaValidator::document(
    const std::string& name, std::vector<SchemaError>& errors) {
  if (auto it = m_documents.find(name); it != m_documents.end()) {
    return &it->second;
  }
  const std::string path = m_directory + "/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    errors.push_back(
        {"", "$ref", name, "cannot read schema file " + path, true});
    return nullptr;
  }
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return &(m_documents[name] = Json::parse(text.str()));
  } catch (const Json::exception& e) {
    errors.push_back(
        {"", "$ref", name, fmt::format("{}: {}", path, e.what()), true});
    return nullptr;
  }
}

std::vector<SchemaError> SchemaValidator::validate(
    const nlohmann::json& instance, const std::string& ref) {
  std::vector<SchemaError> errors;
  Evaluator evaluator(*this);
  Where target;
  const std::string full = ref.find('#') == std::string::npos ? ref + "#" : ref;
  const Where origin{full.substr(0, full.find('#')), ""};
  if (const Json* schema =
          evaluator.resolve(full, origin.doc, target, errors, origin)) {
    evaluator.run(*schema, target, instance, "", errors);
  }
  return errors;
}

std::vector<SchemaError> SchemaValidator::check_schema(
    const std::string& name) {
  std::vector<SchemaError> errors;
  const Json* root = document(name, errors);
  if (root == nullptr) {
    return errors;
  }
  if (!root->is_object() || !root->contains("$schema")) {
    errors.push_back(
        {"",
         "$schema",
         name + "#",
         fmt::format("a schema file starts with \"$schema\": \"{}\"", k_draft),
         true});
  }
  Evaluator evaluator(*this);
  walk(evaluator, *root, Where{name, ""}, errors);
  return errors;
}

}  // namespace shardplan::test
