#pragma once

// A small JSON Schema (draft 2020-12) validator for the tests: it checks
// shardplan's JSON output and topology files against docs/schema/.
//
// It supports the subset docs/schema/ uses, and nothing silently:
//   type (with "integer" stricter than the draft: a JSON integer, so 6.0 is
//   a number but not an integer; byte counts must be written as integers),
//   properties, required, additionalProperties (a boolean or a schema),
//   items, prefixItems, minItems, maxItems, enum, const, minimum, maximum,
//   exclusiveMinimum, minLength, allOf, anyOf, oneOf, not, boolean schemas,
//   $defs, and $ref to "#/..." (the same file) or "FILE#/..." (a file in the
//   schema directory); $schema (draft 2020-12 only), title, description and
//   $comment are annotations.
// Any other keyword in a schema is reported as an error (in_schema, the
// keyword, "unsupported keyword"), so a schema cannot lean on a check that is
// not made.

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace shardplan::test {

struct SchemaError {
  std::string pointer;      // RFC 6901 pointer of the failing value ("" = root)
  std::string keyword;      // the schema keyword that failed, e.g. "required"
  std::string schema_path;  // "mesh.schema.json#/properties/mesh/required"
  std::string message;
  // True when the schema itself is at fault (unsupported keyword, bad $ref,
  // unreadable file) rather than the value.
  bool in_schema = false;
};

// "/mesh/axes/0: required: missing key \"ici\" (at mesh.schema.json#/...)".
std::string to_string(const SchemaError& error);
// Every error on its own line, for INFO().
std::string to_string(const std::vector<SchemaError>& errors);

class SchemaValidator {
 public:
  // Schemas are read from `directory` (e.g. docs/schema) on first use.
  explicit SchemaValidator(std::string directory);

  // Registers an in-memory schema document under `name` (used instead of a
  // file of that name), for tests of the validator itself.
  void add(const std::string& name, nlohmann::json schema);

  // Validates `instance` against `ref`: a file name ("mesh.schema.json") or
  // a file and a fragment ("topology.schema.json#/$defs/catalogue_family").
  // Returns every error found; empty when the instance is valid.
  std::vector<SchemaError> validate(const nlohmann::json& instance,
                                    const std::string& ref);

  // Walks the whole schema document `name` (every subschema, used or not)
  // and reports unsupported keywords, malformed keyword values and $refs
  // that do not resolve.
  std::vector<SchemaError> check_schema(const std::string& name);

  // Implementation details, public for the helpers in json_schema.cpp.
  const nlohmann::json* document(const std::string& name,
                                 std::vector<SchemaError>& errors);

 private:
  std::string m_directory;
  std::map<std::string, nlohmann::json> m_documents;
};

}  // namespace shardplan::test
