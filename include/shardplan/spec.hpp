#pragma once

// Layer 2: partition specs (docs/partition-specs.md), with JAX's
// PartitionSpec semantics (docs/sources.md#jax-partitionspec).
//
// A spec has one entry per tensor dim: replicated (None), one mesh axis, or a
// tuple of axes split over their product with the first axis major.
// Trailing dims may be omitted on input; normalised specs have full rank.
//
// Text forms accepted (what users paste from Python or write by hand):
//   P('fsdp', None)   PartitionSpec(('dp', 'fsdp'), 'tp')   jax.sharding.P()
//   fsdp,None         (dp,fsdp),tp   ["fsdp", null]   [["dp","fsdp"],"tp"]
// Canonicalisation follows jaxlib: None, () and [] become None; a 1-tuple
// becomes its element; a tuple inside a tuple is an error.
//
// What it offers (src/spec.cpp implements all of it):
//   DimSharding, PartitionSpec the axes that split each dim
//   parse_spec                 every text form above, canonicalised
//   to_python, to_short        P('fsdp', None) and fsdp,None
//   NamedSpec, SpecsFile       what a specs file holds (io reads it)

#include <shardplan/diag.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// How one dim is split: the mesh axes, major to minor; empty = replicated.
struct DimSharding {
  std::vector<std::string> axes;

  bool replicated() const { return axes.empty(); }
  bool operator==(const DimSharding&) const = default;
};

struct PartitionSpec {
  std::vector<DimSharding> dims;

  size_t size() const { return dims.size(); }
  // True when no dim is split (P(), P(None, None), ...).
  bool replicated() const;
  // A copy padded with replicated dims to `rank`.
  // REQUIRES: size() <= rank.
  PartitionSpec padded(size_t rank) const;
  // Every axis named, in order of appearance (duplicates kept).
  std::vector<std::string> axes() const;
  // P(None, ..., None) of `rank` dims.
  static PartitionSpec replicated_of(size_t rank);

  bool operator==(const PartitionSpec&) const = default;
};

// A spec for one tensor as given in a specs file (docs/manifest-format.md,
// "Specs files"), with where
// it was found.
struct NamedSpec {
  std::string name;
  // As written: not padded to the tensor's rank. Never null. The reader
  // gives entries with equal valid specs one shared object (a plan's
  // hundred thousand tensors have a handful of specs), so a checker may
  // key the work it does per spec by this pointer.
  std::shared_ptr<const PartitionSpec> spec;
  std::string pointer;  // JSON pointer of the spec value
  int64_t line = 0;     // where the spec value starts, 1-based; 0 unknown
  int64_t column = 0;
  bool valid = true;  // false: the spec could not be read (reported)
};

struct SpecsFile {
  std::string source;
  std::vector<NamedSpec> specs;  // file order; names unique
};

// Parses any of the text forms above. `source` names the input in
// diagnostics ("--from-spec"); problems carry a column and a caret line. A
// reader of a file that holds the text as a string relocates them into the
// file (io: at the spec's JSON pointer, and where it can, the character's
// line and column).
std::optional<PartitionSpec> parse_spec(std::string_view text,
                                        std::string_view source,
                                        Diagnostics& diags);

// Python form: P('fsdp', None), P(('dp', 'fsdp'), 'tp'), P().
std::string to_python(const PartitionSpec& spec);
// Short form, as in text output: fsdp,None   (dp,fsdp),tp   and "()" for a
// spec with no entries.
std::string to_short(const PartitionSpec& spec);

}  // namespace shardplan
