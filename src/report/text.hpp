#pragma once

// Internal to report: the text primitives the views' renderers share
// (report/text.cpp): numbers, sizes, rates and times as people read them,
// tables, the verdict, and the lines that several commands print alike.

#include <shardplan/diag.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/topology.hpp>
#include <shardplan/workload.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan::report_detail {

// 16060522496 -> "16,060,522,496"; -1234567 -> "-1,234,567".
// REQUIRES: value > INT64_MIN
std::string with_commas(int64_t value);
// Binary units, as HBM capacities are quoted, with two decimals: 1023 ->
// "1023 B", 1024 -> "1.00 KiB", 16060522496 -> "14.96 GiB".
std::string human_bytes(int64_t bytes);
// HBM as vendors quote it: "80 GB" for a whole number of 1e9 bytes, else
// human_bytes ("95.00 GiB").
std::string capacity_text(double bytes);
// Decimal rates, as link bandwidths are quoted: "180 GB/s", "1.2 TB/s".
std::string rate_text(double bytes_per_s);
// A time in the largest unit of which there is at least one (us, ms, s,
// min, h; us below a microsecond), to three significant digits: 11.7251 ->
// "11.7 s", 9.5e-4 -> "950 us", 0.00235 -> "2.35 ms", 90 -> "1.5 min";
// 999.6 us is "1 ms"; 0 is "0 s"; a negative time has a "-".
std::string seconds_text(double seconds);
// A plain text table: the first row is the header; columns whose cells are
// all numbers (digits, ',' and '.') or empty below the header are
// right-aligned, the others left-aligned; two spaces between columns, no
// trailing spaces, a newline after each row.
// REQUIRES: every row has as many cells as the first
std::string table(const std::vector<std::vector<std::string>>& rows);

// A document of a few summary lines and captioned tables (topology list
// and show, manifest, the model list): their text and HTML renderers
// render the same one.
struct TableDoc {
  std::string title;               // "shardplan topology"
  std::vector<std::string> lines;  // the summary, a line each
  struct Table {
    std::string caption;                         // "" for none
    std::vector<std::vector<std::string>> rows;  // the first is the header
  };
  std::vector<Table> tables;
  std::string note;  // a closing sentence, or ""
};
// The lines, a blank line, each table (a caption as "\ncaption:\n"), the
// note after a blank line.
std::string table_doc_text(const TableDoc& doc);

// The end of a text report: "ok", "ok, 2 warnings", "3 errors, 1 warning".
std::string verdict(const Diagnostics& diags);
// The message and, after "; ", the hint (as JSON, markdown and github give
// it).
std::string message_with_hint(const Diagnostic& d);
// The first sentence of a message, for a one-line table cell: up to its
// first ". " (a layout error quotes JAX's explanation after its first
// sentence); the whole message when it is one sentence.
std::string_view first_sentence(std::string_view message);

// What a plan's specs came from, as headers name it: "rules preset fsdp-tp"
// for a built-in preset, "rules my-rules.json" for a user's file.
std::string rules_text(const RuleSet& rules);

// "mesh fsdp:16,tp:4 (64 devices) on v5p-128" (no " on ..." without a
// topology).
std::string mesh_line(const Mesh& mesh, const Topology* topology);
// A topology's shape: "8x16" or "4x4x8" chips, "2 x 16x16" for two
// slices, "8 x 8 GPUs" for 8 hosts of 8 GPUs.
std::string topology_shape_text(const Topology& topology);
// "v5p-128: 64 TPU v5p devices (4x4x4), 95.00 GiB of HBM each".
std::string topology_summary(const Topology& topology);
// The slices a search ran on: topology_summary of one; of several,
// "3 slices of v5p: v5p-128, v5p-256, v5p-512 (64 to 256 TPU v5p devices),
// 95.74 GiB of HBM each". REQUIRES: not empty.
std::string slices_summary(std::span<const Topology> slices);

// A memory estimate's recipe: "recipe adam with ZeRO-1 over dp (2 devices)".
std::string recipe_text(const MemoryEstimate& memory);
// What the total counts: "weights + grads + optimizer + gather buffer +
// activations (remat full, 8 x 8192 tokens)"; without a workload
// (`activations` null), "...; activations not counted: give --seq and
// --batch".
std::string counted_text(const MemoryEstimate& memory,
                         const ActivationEstimate* activations);
// The total per device against usable HBM, whether it fits, and what it
// counts (counted_text).
std::string capacity_line(const MemoryEstimate& memory,
                          const ActivationEstimate* activations);
// The workload: "seq 8192, global batch 256 (2 per device), 1 microbatch
// of 8 sequences per device, remat full, flash attention".
std::string workload_text(const ActivationEstimate& activations,
                          const Mesh& mesh);
using Rows = std::vector<std::vector<std::string>>;

// The rows the text and the HTML reports both show (the first is the
// header), and their closing lines' contents.
// The activation terms of `stage` (stage_terms): term, bytes, formula,
// source; the symbols they use, "s=8,192, b=4, ...".
Rows activation_rows(const ActivationEstimate& activations, int64_t stage);
std::string activation_symbols(const ActivationEstimate& activations);
// The stage whose activations the memory estimate counts.
int64_t activations_stage(const ActivationEstimate& activations,
                          const MemoryEstimate& memory);
// The training step: compute, memory-bound work, each collective kind, the
// bubble, the step; the assumptions "name value; ...".
Rows step_rows(const StepEstimate& step);
std::string step_assumptions(const StepEstimate& step);
// A mesh's axes: name, size, ici and dcn parts, type.
Rows mesh_axis_rows(const Mesh& mesh);
// Params per device by dtype; the largest tensors per device.
Rows dtype_rows(const MemoryEstimate& memory);
Rows largest_rows(const MemoryEstimate& memory,
                  const Manifest& manifest,
                  const std::vector<TensorSharding>& shardings);

// The activations of the memory estimate's stage as a table: term, bytes,
// formula, source (stage_terms), under a heading line.
std::string activations_table(const ActivationEstimate& activations,
                              const MemoryEstimate& memory);
// The training step as a table: compute, each collective kind (count,
// time, what is exposed), the bubble, the step; then tokens/s, MFU and the
// bottleneck.
std::string step_table(const StepEstimate& step);
// One line: "step 1.23 s: 1,234 tokens/s per device, MFU 61.2%;
// compute-bound: ...".
std::string step_line(const StepEstimate& step);
// The same without "step ": "1.23 s: 1,234 tokens/s per device, ...".
std::string step_summary(const StepEstimate& step);
// The step's bottleneck in words (docs/step.md, "Step"): "compute-bound:
// compute 10.9 s of the 13.8 s step", "comm-bound: 2.24 s of exposed
// communication, most of it fsdp reduce-scatter (gradients) on fsdp over
// ici (669 ms) of the ...", with "; per-slice batch 8192 tokens < 73440"
// after the collective when it has the scaling book's slice test,
// "bubble-bound: pipeline bubble 1.2 s of the ...". Its times to three
// significant digits in s, ms or us.
std::string bottleneck_text(const StepEstimate& step);
// "compute-bound", "comm-bound", "bubble-bound".
std::string_view bottleneck_kind_text(BottleneckKind kind);
// What each device holds, per category (params, grads, optimizer, gather
// buffer, and activations when counted).
struct Category {
  const char* name;
  int64_t bytes;
};
// The optimizer step is the peak: its update exceeds the backward's gather
// buffer and activations (categories then show it instead of them).
bool step_is_peak(const MemoryEstimate& memory);
std::vector<Category> categories(const MemoryEstimate& memory);
// "optimizer step: one tensor's fp32 update, 2.00 GiB, ..."; empty without
// optimizer state.
std::string optimizer_step_line(const MemoryEstimate& memory);
// "peak: the loss: ..." or "peak: a layer's backward: ...": the phase the
// peak is in (docs/memory.md, "The peak").
std::string peak_line(const MemoryEstimate& memory,
                      const ActivationEstimate& activations);
// "host memory per host: 252.00 GiB of 448.00 GB of RAM (56.2%), 4
// devices a host"; empty when nothing is kept in host memory.
std::string host_line(const MemoryEstimate& memory);
// "prefetch: fits only without the next layer's weights prefetched ...";
// empty when the prefetch is counted (MemoryEstimate::prefetch_dropped).
std::string prefetch_line(const MemoryEstimate& memory);
// Where the estimate is with stage or expert axes: "most loaded: stage 1
// of 2 (pp), expert rank 0 of 4 (ep)"; empty without them.
std::string placement_line(const MemoryEstimate& memory);
// One line per pipeline stage (none without a stage axis): "stage 0
// (layers 0-1): params 1.00 MiB, grads ..., optimizer ..., gather buffer
// ..., total ...", with ", expert rank r" after the layers when there are
// expert axes (the stage's most loaded rank).
std::vector<std::string> stage_lines(const MemoryEstimate& memory);
// The gather buffer's units: "model.layers.0 + model.layers.1".
std::string gather_units_text(const MemoryEstimate& memory);

}  // namespace shardplan::report_detail
