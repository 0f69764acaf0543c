#pragma once

// What every fuzz target asserts of a reader (docs/architecture.md: core
// code returns data and appends located, coded diagnostics): a result and no
// error, or no result and at least one error; every diagnostic has a code, a
// message and a location in one of the sources the caller named (or inside
// one), and renders.
// A broken promise aborts with a line saying which, so libFuzzer keeps the
// input as a crash.

#include <shardplan/diag.hpp>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string_view>

namespace fuzz {

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz: broken promise: %s\n", what);
  std::abort();
}

inline void check_outcome(bool has_result,
                          const shardplan::Diagnostics& diags,
                          std::initializer_list<std::string_view> sources) {
  if (has_result && diags.has_errors()) {
    fail("a result together with an error");
  }
  if (!has_result && !diags.has_errors()) {
    fail("no result and no error");
  }
  for (const shardplan::Diagnostic& d : diags.items()) {
    if (d.code.empty() || d.message.empty()) {
      fail("a diagnostic without a code or a message");
    }
    // The source itself, or a place inside it: a spec written as a string
    // in a specs file is "specs.json:/specs/w", parsed as its own text.
    const std::string_view at = d.location.source;
    bool known = false;
    for (std::string_view source : sources) {
      known = known || at == source
              || (at.starts_with(source) && at.size() > source.size()
                  && at[source.size()] == ':');
    }
    if (!known) {
      fail("a diagnostic located in no source the caller named");
    }
    if (shardplan::render(d).empty()) {
      fail("a diagnostic that renders to nothing");
    }
  }
}

inline void check_outcome(bool has_result,
                          const shardplan::Diagnostics& diags,
                          std::string_view source) {
  check_outcome(has_result, diags, {source});
}

}  // namespace fuzz
