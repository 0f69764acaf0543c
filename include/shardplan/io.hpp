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

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// Reads a whole file. A missing or unreadable file is an error naming `path`
// and the system's reason [io.read].
std::optional<std::string> read_file(const std::string& path,
                                     Diagnostics& diags);

// Writes `contents` to `path` atomically: a temporary file in the same folder,
// flushed, then renamed over `path`. On failure nothing is left behind and an
// error names the path [io.write].
bool write_file_atomic(const std::string& path,
                       std::string_view contents,
                       Diagnostics& diags);

// write_file_atomic in pieces, for output too large to hold whole: open(),
// write() as often as needed, then commit() renames the temporary file over
// the path. Destroyed without a successful commit(), it leaves nothing
// behind. Errors are reported as write_file_atomic reports them [io.write]:
// by open(), or for a failed write() by commit().
class AtomicFile {
 public:
  AtomicFile() = default;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  bool open(const std::string& path, Diagnostics& diags);
  // REQUIRES: open() succeeded.
  void write(std::string_view data);
  // REQUIRES: open() succeeded; called once.
  bool commit(Diagnostics& diags);

 private:
  bool fail(int error, Diagnostics& diags);

  std::string m_path;    // as given, for messages
  std::string m_target;  // the file replaced: the path, symlinks resolved
  std::string m_temp;    // the temporary file; empty when writing in place
  int m_fd = -1;
  int m_error = 0;       // the first write's errno
  size_t m_written = 0;  // bytes written so far
  size_t m_flushed = 0;  // bytes whose writeback has been started
  bool m_committed = false;
};

// The hint for a dtype parse_dtype does not know: "did you mean \"bf16\"?"
// (in the text's case: "BF61" gives "BF16"), or the names it knows.
std::string dtype_hint(std::string_view text);

// Reads a manifest given as JSON text, in either form (DESIGN.md 2.3):
//   native:      {"params": [{"name", "shape", "dtype", "logical_axes"?}, ...]}
//   safetensors: {"NAME": {"dtype", "shape", "data_offsets"},
//                 "__metadata__": {...}}
// Tensor order is the file's order. Stops at the first problem.
std::optional<Manifest> read_manifest(std::string_view json,
                                      std::string_view source,
                                      Diagnostics& diags);

// safetensors' own limit on a header's length (MAX_HEADER_SIZE in
// safetensors/src/tensor.rs).
inline constexpr uint64_t k_safetensors_max_header_bytes = 100'000'000;

// A safetensors header (its JSON text) followed in its file by a data
// section of `data_bytes` bytes. Tensors in header order. data_offsets are
// checked as safetensors' loader checks them: each pair spans its tensor's
// bytes and lies within the data section, and sorted by offset the tensors
// cover the data section exactly, with no overlap and no gap.
std::optional<Manifest> read_safetensors_header(std::string_view header,
                                                uint64_t data_bytes,
                                                std::string_view source,
                                                Diagnostics& diags);

// A .safetensors file: its 8-byte little-endian header length, then the
// header, never the tensor data. A header over 100,000,000 bytes, a length
// that runs past the end of the file, and everything read_safetensors_header
// refuses are errors [safetensors.*]. JSON positions (line:column) count
// from the header's first byte, which is byte 8 of the file.
std::optional<Manifest> read_safetensors_file(const std::string& path,
                                              Diagnostics& diags);

// A model.safetensors.index.json (`json`, read from `path`): {"metadata":
// {"total_size": N}, "weight_map": {"NAME": "SHARD.safetensors", ...}}.
// Each shard file (relative to the index's folder) has its header read; the
// manifest holds the tensors in weight_map order, each found in its shard's
// header. A shard that cannot be read and a tensor missing from its shard
// are errors at the index's /weight_map/NAME; tensors a shard holds but the
// index does not map, and a total_size other than the tensors' bytes, are
// warnings.
std::optional<Manifest> read_safetensors_index(std::string_view json,
                                               const std::string& path,
                                               Diagnostics& diags);

// What --manifest accepts: a folder (its model.safetensors.index.json, else
// its model.safetensors), a file ending in ".safetensors", or a JSON file: a
// manifest in either form of read_manifest, or a safetensors index.
std::optional<Manifest> read_manifest_path(const std::string& path,
                                           Diagnostics& diags);

// A manifest of generated tensors (a Hugging Face config.json or a built-in
// model, shardplan/models.hpp), named `source` in diagnostics.
std::optional<Manifest> manifest_from_model(
    const std::vector<ModelTensor>& tensors,
    std::string_view source,
    Diagnostics& diags);

// `--model NAME`: the built-in model's manifest, with "--model NAME" as its
// source; an unknown name is reported at --model with the nearest name.
std::optional<Manifest> read_builtin_model(std::string_view name,
                                           Diagnostics& diags);

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
