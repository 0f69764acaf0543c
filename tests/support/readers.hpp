#pragma once

// The readers the tests of src/io/ share: a manifest or a specs file read
// from text that must read, or must be refused, and the first line of a
// diagnostic.

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/tensor.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace shardplan::test {

// The manifest `text` read as "m.json"; fails the current test on any
// diagnostic but `empty` warnings about tensors with no elements
// [manifest.empty-tensor].
Manifest manifest_ok(std::string_view text, size_t empty = 0);

// The first diagnostic of the manifest `text` read as "m.json", which must
// not read.
Diagnostic manifest_error(std::string_view text);

// The specs file `text` read as "s.json"; fails the current test on any
// diagnostic.
SpecsFile specs_ok(std::string_view text);

// Whether the reader refused the file, or kept a spec of it as invalid (a
// nested tuple: a fault of the spec, not of the file).
bool refused(const std::optional<SpecsFile>& specs);

// The first diagnostic of the specs file `text` read as "s.json", which
// must be refused.
Diagnostic specs_error(std::string_view text);

// first_line_without_code(d).
std::string first_line(const Diagnostic& d);

}  // namespace shardplan::test
