#pragma once

// Layer 6: readers of input files. Only io and cli touch the filesystem.
//
// Every reader takes the file's text and its name (for diagnostics), so tests
// need no files. Problems are reported as `file:/json/pointer: error: ...` for
// values, or `file:line:column: error: ...` with an excerpt and caret for JSON
// syntax errors.

#include <shardplan/diag.hpp>
#include <shardplan/models.hpp>
#include <shardplan/spec.hpp>
#include <shardplan/tensor.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// Reads a whole file. A missing or unreadable file is an error naming `path`
// and the system's reason [io.read].
std::optional<std::string> read_file(const std::string& path, Diagnostics& diags);

// Writes `contents` to `path` atomically: a temporary file in the same folder,
// flushed, then renamed over `path`. On failure nothing is left behind and an
// error names the path [io.write].
bool write_file_atomic(const std::string& path, std::string_view contents,
                       Diagnostics& diags);

// Reads a manifest given as JSON text, in either form (DESIGN.md 2.3):
//   native:      {"params": [{"name", "shape", "dtype", "logical_axes"?}, ...]}
//   safetensors: {"NAME": {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}
// Tensor order is the file's order. Stops at the first problem.
std::optional<Manifest> read_manifest(std::string_view json,
                                      std::string_view source,
                                      Diagnostics& diags);

// A manifest of generated tensors (a Hugging Face config.json or a built-in
// model, shardplan/models.hpp), named `source` in diagnostics.
std::optional<Manifest> manifest_from_model(const std::vector<ModelTensor>& tensors,
                                            std::string_view source, Diagnostics& diags);

// `--model NAME`: the built-in model's manifest, with "--model NAME" as its
// source; an unknown name is reported at --model with the nearest name.
std::optional<Manifest> read_builtin_model(std::string_view name, Diagnostics& diags);

// Reads a specs file: {"specs": {"NAME": SPEC, ...}} or the JSON written by
// `plan` ({"tensors": [{"name": ..., "spec": SPEC}, ...]}). A SPEC is a JSON
// array (null | "axis" | ["a", "b"] per dim) or a string in any text form of
// parse_spec ("P('fsdp', None)").
// A problem with the file (not JSON, wrong layout, a repeated name) stops the
// reader: nullopt. A problem inside one spec (a nested tuple, a text spec that
// does not parse) is reported as an error and the entry is kept with
// `valid == false`, so a checker sees every bad spec of the file in one run.
std::optional<SpecsFile> read_specs(std::string_view json,
                                    std::string_view source,
                                    Diagnostics& diags);

}  // namespace shardplan
