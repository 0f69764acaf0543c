#include "report/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

// report's text primitives (report/text.hpp).

namespace shardplan::report_detail {

std::string with_commas(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) {
      out += ',';
    }
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

std::string human_bytes(int64_t bytes) {
  constexpr std::array<const char*, 6> k_units = {
      "B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  auto value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < k_units.size()) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) {
    return fmt::format("{} B", bytes);
  }
  return fmt::format("{:.2f} {}", value, k_units[unit]);
}

std::string table_doc_text(const TableDoc& doc) {
  std::string out;
  for (const std::string& line : doc.lines) {
    out += line;
    out += '\n';
  }
  if (!doc.lines.empty()) {
    out += '\n';
  }
  for (size_t i = 0; i < doc.tables.size(); ++i) {
    const TableDoc::Table& t = doc.tables[i];
    if (!t.caption.empty()) {
      out += i > 0 ? "\n" : "";
      out += t.caption;
      out += ":\n";
    }
    out += table(t.rows);
  }
  if (!doc.note.empty()) {
    out += '\n';
    out += doc.note;
    out += '\n';
  }
  return out;
}

std::string table(const std::vector<std::vector<std::string>>& rows) {
  if (rows.empty()) {
    return "";
  }
  size_t cols = rows.front().size();
  std::vector<size_t> width(cols, 0);
  std::vector<bool> numeric(cols, true);
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t c = 0; c < cols; ++c) {
      width[c] = std::max(width[c], rows[r][c].size());
      if (r > 0 && !rows[r][c].empty()
          && rows[r][c].find_first_not_of("0123456789,.")
                 != std::string::npos) {
        numeric[c] = false;
      }
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < cols; ++c) {
      const std::string& cell = row[c];
      std::string pad(width[c] - cell.size(), ' ');
      line += (c ? "  " : "") + (numeric[c] ? pad + cell : cell + pad);
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }
  return out;
}

std::string capacity_text(double bytes) {
  if (bytes > 0 && std::fmod(bytes, 1e9) == 0) {
    return fmt::format("{:g} GB", bytes / 1e9);
  }
  return human_bytes(static_cast<int64_t>(bytes));
}

std::string rate_text(double bytes_per_s) {
  if (bytes_per_s >= 1e12) {
    return fmt::format("{:g} TB/s", bytes_per_s / 1e12);
  }
  if (bytes_per_s >= 1e9) {
    return fmt::format("{:g} GB/s", bytes_per_s / 1e9);
  }
  return fmt::format("{:g} MB/s", bytes_per_s / 1e6);
}

std::string seconds_text(double seconds) {
  if (seconds < 0) {
    return fmt::format("-{}", seconds_text(-seconds));
  }
  if (seconds == 0 || !std::isfinite(seconds)) {
    return fmt::format("{:g} s", seconds);
  }
  struct Unit {
    const char* name;
    double seconds;  // one of this unit, in seconds
    double next;     // how many of it make the next unit
  };
  constexpr std::array<Unit, 5> k_units{{{"us", 1e-6, 1000},
                                         {"ms", 1e-3, 1000},
                                         {"s", 1, 60},
                                         {"min", 60, 60},
                                         {"h", 3600, 0}}};
  // The largest unit of which there is at least one (us below a
  // microsecond), then the value to three significant digits.
  size_t u = 0;
  while (u + 1 < k_units.size() && seconds >= k_units[u + 1].seconds) {
    ++u;
  }
  const double value = seconds / k_units[u].seconds;
  if (u + 1 == k_units.size() && value >= 1000) {
    return fmt::format("{:.0f} h", value);  // no exponent
  }
  const std::string digits = fmt::format("{:.3g}", value);
  double shown = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), shown);
  // 999.6 us rounds to 1000 us and 59.97 s to 60 s: one of the next unit.
  if (u + 1 < k_units.size() && shown >= k_units[u].next) {
    return fmt::format("1 {}", k_units[u + 1].name);
  }
  return fmt::format("{} {}", digits, k_units[u].name);
}

std::string verdict(const Diagnostics& diags) {
  if (diags.error_count() == 0) {
    return diags.warning_count() == 0
               ? "ok"
               : fmt::format("ok, {} warning{}",
                             diags.warning_count(),
                             diags.warning_count() == 1 ? "" : "s");
  }
  return fmt::format("{} error{}, {} warning{}",
                     diags.error_count(),
                     diags.error_count() == 1 ? "" : "s",
                     diags.warning_count(),
                     diags.warning_count() == 1 ? "" : "s");
}

std::string rules_text(const RuleSet& rules) {
  return rules.name.empty() ? fmt::format("rules {}", rules.source)
                            : fmt::format("rules preset {}", rules.name);
}

std::string mesh_line(const Mesh& mesh, const Topology* topology) {
  std::string out =
      fmt::format("mesh {} ({} devices)", to_string(mesh), mesh.num_devices());
  if (topology != nullptr) {
    out += fmt::format(" on {}", topology->name);
  }
  return out;
}

std::string message_with_hint(const Diagnostic& d) {
  return d.hint.empty() ? d.message : d.message + "; " + d.hint;
}

std::string_view first_sentence(std::string_view message) {
  return message.substr(0, message.find(". "));
}

std::string topology_shape_text(const Topology& t) {
  if (t.kind == TopologyKind::gpu) {
    const int64_t hosts = t.num_hosts();
    return fmt::format("{} x {} GPUs", hosts, t.devices_per_host());
  }
  const auto& c = t.tpu.chips;
  std::string shape = is_2d(t.tpu.chip)
                          ? fmt::format("{}x{}", c[0], c[1])
                          : fmt::format("{}x{}x{}", c[0], c[1], c[2]);
  return t.num_slices() > 1 ? fmt::format("{} x {}", t.num_slices(), shape)
                            : shape;
}

std::string topology_summary(const Topology& t) {
  return fmt::format("{}: {} {} devices ({}), {} of HBM each",
                     t.name,
                     t.devices(),
                     t.device_kind,
                     topology_shape_text(t),
                     capacity_text(t.figures.hbm_bytes_per_device.value));
}

std::string slices_summary(std::span<const Topology> slices) {
  assert(!slices.empty());
  if (slices.size() == 1) {
    return topology_summary(slices.front());
  }
  std::vector<std::string> names;
  for (const Topology& t : slices) {
    names.push_back(t.name);
  }
  const Topology& first = slices.front();
  return fmt::format(
      "{} slices of {}: {} ({} to {} {} devices), {} of HBM each",
      slices.size(),
      first.chip,
      fmt::join(names, ", "),
      first.devices(),
      slices.back().devices(),
      first.device_kind,
      capacity_text(first.figures.hbm_bytes_per_device.value));
}

// The optimizer state when it is not the recipe's (adamw, f32 moments, an
// f32 master but with scaling-book): "; adamw moments like the params, no
// master copy".
std::string optimizer_text(const MemoryEstimate& m) {
  if (m.recipe == Recipe::params_only) {
    return {};
  }
  const bool usual = m.optimizer == Optimizer::adamw
                     && m.first_moment_dtype == DType::f32
                     && m.second_moment_dtype == DType::f32
                     && m.master == (m.recipe != Recipe::scaling_book);
  if (usual) {
    return {};
  }
  const auto dtype = [](std::optional<DType> d) {
    return d ? std::string(to_string(*d)) : std::string("the params' dtype");
  };
  std::string moments;
  switch (m.optimizer) {
    case Optimizer::sgd:
      moments = "no moments";
      break;
    case Optimizer::adafactor:
      moments = fmt::format("a factored second moment in {}",
                            dtype(m.second_moment_dtype));
      break;
    case Optimizer::adamw:
    case Optimizer::muon:
      moments = m.first_moment_dtype == m.second_moment_dtype
                    ? fmt::format("moments in {}", dtype(m.first_moment_dtype))
                    : fmt::format("mu in {}, nu in {}",
                                  dtype(m.first_moment_dtype),
                                  dtype(m.second_moment_dtype));
      break;
  }
  return fmt::format("; {} {}, {}",
                     to_string(m.optimizer),
                     moments,
                     m.master ? "an f32 master copy" : "no master copy");
}

std::string recipe_text(const MemoryEstimate& m) {
  std::string out = fmt::format("recipe {}", to_string(m.recipe));
  if (m.zero > 0) {
    out += fmt::format(" with ZeRO-{} over {} ({} devices)",
                       m.zero,
                       m.data_axes.empty()
                           ? std::string("no data axes")
                           : fmt::format("{}", fmt::join(m.data_axes, ",")),
                       m.zero_shards);
  }
  // The assumptions that change the count (docs/memory.md): the dtype the
  // weights are held in, the gradients' when not the recipe's, the scales.
  if (m.param_dtype) {
    out += fmt::format("; weights in {}", to_string(*m.param_dtype));
  } else if (m.fp8_param_dtype && *m.fp8_param_dtype == DType::bf16) {
    out += "; FP8 weights trained in bf16";
  }
  if (m.grads_counted && m.grad_dtype
      && !(m.recipe == Recipe::adam_fp32_grads
           && *m.grad_dtype == DType::f32)) {
    out += fmt::format("; grads in {}", to_string(*m.grad_dtype));
  }
  out += optimizer_text(m);
  if (m.untrained_tensors > 0) {
    out += fmt::format("; {} tensors of MTP modules not trained, not held",
                       with_commas(m.untrained_tensors));
  }
  if (m.dropped_scale_tensors > 0) {
    out += fmt::format("; {} FP8 scale tensors folded into their weights",
                       with_commas(m.dropped_scale_tensors));
  }
  return out;
}

std::string counted_text(const MemoryEstimate& m, const ActivationEstimate* a) {
  std::vector<std::string> parts = {"weights"};
  if (m.per_device.grads > 0 || m.grads_counted) {
    parts.emplace_back("grads");
  }
  if (m.per_device.optimizer > 0) {
    parts.emplace_back("optimizer");
  }
  if (step_is_peak(m)) {
    parts.emplace_back("optimizer step");
  } else if (m.gather_buffer > 0) {
    parts.emplace_back("gather buffer");
  }
  if (a == nullptr || !m.activations_counted) {
    return fmt::format("{}; activations not counted: give --seq and --batch",
                       fmt::join(parts, " + "));
  }
  const StageActivations& st = a->per_stage[static_cast<size_t>(
      std::min<int64_t>(m.stage, std::ssize(a->per_stage) - 1))];
  std::string what = fmt::format("remat {}, {} x {} tokens",
                                 to_string(a->remat),
                                 a->microbatch_size,
                                 a->tokens / a->microbatch_size);
  if (st.in_flight != 1) {
    what += fmt::format(", {:g} microbatches in flight", st.in_flight);
  }
  if (!step_is_peak(m)) {
    parts.push_back(fmt::format("activations ({})", what));
  } else {
    parts.push_back(fmt::format("activations freed ({})", what));
  }
  return fmt::format("{}", fmt::join(parts, " + "));
}

std::string capacity_line(const MemoryEstimate& m,
                          const ActivationEstimate* a) {
  if (!m.hbm_bytes) {
    return fmt::format(
        "total {} per device (HBM unknown: give --topology or --hbm); counts "
        "{}",
        human_bytes(m.max_device_total),
        counted_text(m, a));
  }
  const std::string reserved = m.reserve > 0 ? fmt::format(
                                   " allocated, {} reserved by {}'s allocator "
                                   "(+{:g}%, {})",
                                   human_bytes(m.reserved_total),
                                   to_string(m.runtime),
                                   m.reserve * 100,
                                   m.reserve_source)
                                             : std::string();
  const std::string left =
      *m.headroom_left >= 0
          ? fmt::format("{} left", human_bytes(*m.headroom_left))
          : fmt::format("{} over", human_bytes(-*m.headroom_left));
  return fmt::format(
      "total {} per device{} of {} usable ({} HBM, {:g}% kept free, {}): "
      "{:.1f}% of HBM, {} (counts {}); {}",
      human_bytes(m.max_device_total),
      reserved,
      human_bytes(*m.capacity_bytes),
      human_bytes(*m.hbm_bytes),
      m.headroom * 100,
      m.headroom_source,
      *m.utilization * 100,
      *m.fits ? "fits" : "DOES NOT FIT",
      counted_text(m, a),
      left);
}

std::string workload_text(const ActivationEstimate& a, const Mesh& mesh) {
  const int64_t devices = mesh.num_devices();
  std::string per_device =
      a.global_batch % devices == 0
          ? fmt::format("{}", a.global_batch / devices)
          : fmt::format("{:g}",
                        static_cast<double>(a.global_batch)
                            / static_cast<double>(devices));
  std::string out = fmt::format(
      "seq {}, global batch {} ({} per device), {} microbatch{} of {} "
      "sequence{} per batch shard, remat {}, {} attention",
      a.seq,
      a.global_batch,
      per_device,
      a.microbatches,
      a.microbatches == 1 ? "" : "es",
      a.microbatch_size,
      a.microbatch_size == 1 ? "" : "s",
      describe_remat(a.remat, a.custom_remat),
      to_string(a.attention));
  switch (a.residual) {
    case ResidualLayout::replicated:
      break;
    case ResidualLayout::sequence:
      out += ", sequence parallel";
      break;
    case ResidualLayout::embed:
      out += fmt::format(
          ", residual stream's embed split over the tensor "
          "axes ({})",
          a.residual_source);
      break;
  }
  if (a.stage_interleave > 1) {
    out += fmt::format(", {} virtual stages", a.stage_interleave);
  }
  if (a.activation_dtype != DType::bf16) {
    out += fmt::format(", activations in {}", to_string(a.activation_dtype));
  }
  return out;
}

int64_t activations_stage(const ActivationEstimate& a,
                          const MemoryEstimate& m) {
  return std::min<int64_t>(m.stage, std::ssize(a.per_stage) - 1);
}

Rows activation_rows(const ActivationEstimate& a, int64_t stage) {
  Rows rows = {{"term", "bytes", "", "formula", "source"}};
  for (const ActivationTerm& t : stage_terms(a, stage)) {
    rows.push_back({t.name,
                    with_commas(t.bytes),
                    human_bytes(t.bytes),
                    t.formula,
                    t.source});
  }
  return rows;
}

std::string activation_symbols(const ActivationEstimate& a) {
  std::vector<std::string> symbols;
  for (const auto& [name, value] : a.symbols) {
    symbols.push_back(fmt::format("{}={}", name, with_commas(value)));
  }
  return fmt::format("{}", fmt::join(symbols, ", "));
}

std::string activations_table(const ActivationEstimate& a,
                              const MemoryEstimate& m) {
  const int64_t stage = activations_stage(a, m);
  std::string out =
      a.stages > 1 ? fmt::format(
          "activations per device, stage {} of {}:\n", stage, a.stages)
                   : std::string("activations per device:\n");
  out += table(activation_rows(a, stage));
  out += fmt::format("symbols: {} (docs/memory.md, \"Activations\")\n",
                     activation_symbols(a));
  return out;
}

std::string step_line(const StepEstimate& step) {
  return "step " + step_summary(step);
}

std::string step_summary(const StepEstimate& step) {
  // The band when there is one: "3.47 s (3.31-3.65 s)".
  const std::string band =
      step.step_seconds_high > step.step_seconds_low
          ? fmt::format(" ({}-{})",
                        seconds_text(step.step_seconds_low),
                        seconds_text(step.step_seconds_high))
          : std::string();
  // MFU's band follows the step's (a slower step, a lower MFU).
  const std::string mfu_band =
      step.step_seconds_high > step.step_seconds_low
          ? fmt::format(" ({:.1f}-{:.1f}%)",
                        step.mfu_at(step.step_seconds_high) * 100,
                        step.mfu_at(step.step_seconds_low) * 100)
          : std::string();
  return fmt::format("{}{}: {} tokens/s per device, MFU {:.1f}%{}; {}",
                     seconds_text(step.step_seconds),
                     band,
                     with_commas(static_cast<int64_t>(
                         std::llround(step.tokens_per_second_per_device))),
                     step.mfu * 100,
                     mfu_band,
                     bottleneck_text(step));
}

std::string_view bottleneck_kind_text(BottleneckKind kind) {
  switch (kind) {
    case BottleneckKind::compute:
      return "compute-bound";
    case BottleneckKind::communication:
      return "comm-bound";
    case BottleneckKind::bubble:
      return "bubble-bound";
  }
  return "compute-bound";
}

namespace {

// The bottleneck's times: three significant digits in s, ms or us.
std::string short_seconds(double s) {
  return s >= 1      ? fmt::format("{:.3g} s", s)
         : s >= 1e-3 ? fmt::format("{:.3g} ms", s * 1e3)
                     : fmt::format("{:.3g} us", s * 1e6);
}

}  // namespace

std::string bottleneck_text(const StepEstimate& step) {
  const StepBottleneck& b = step.bottleneck;
  std::string what;
  switch (b.kind) {
    case BottleneckKind::compute:
      what = fmt::format("compute {}", short_seconds(b.seconds));
      break;
    case BottleneckKind::communication: {
      assert(b.collective && *b.collective < step.collectives.size());
      const StepCollective& c = step.collectives[*b.collective];
      what = fmt::format(
          "{} of exposed communication, most of it {} on {} over {} ({})",
          short_seconds(b.seconds),
          collective_label(c),
          fmt::join(c.mesh_axes, ","),
          to_string(c.link),
          short_seconds(c.exposed_seconds));
      if (b.slice_batch) {
        what += fmt::format(
            "; per-slice batch {:.0f} tokens {} {:.0f}",
            b.slice_batch->tokens,
            b.slice_batch->tokens < b.slice_batch->critical ? "<" : ">=",
            b.slice_batch->critical);
      }
      break;
    }
    case BottleneckKind::bubble:
      what = fmt::format("pipeline bubble {}", short_seconds(b.seconds));
      break;
  }
  return fmt::format("{}: {} of the {} step",
                     bottleneck_kind_text(b.kind),
                     what,
                     short_seconds(step.step_seconds));
}

Rows step_rows(const StepEstimate& step) {
  Rows rows = {{"part", "axes", "link", "count", "time", "exposed"}};
  // A part that is exposed whole: no axes, link or count.
  auto whole = [&](std::string part, double seconds) {
    rows.push_back({std::move(part),
                    "",
                    "",
                    "",
                    seconds_text(seconds),
                    seconds_text(seconds)});
  };
  whole(fmt::format("matmuls ({:.4g} TFLOP)", step.flops_per_device / 1e12),
        step.matmul_seconds);
  whole("memory-bound work", step.memory_seconds);
  for (const StepCollective& c : step.collectives) {
    rows.push_back({collective_label(c),
                    fmt::format("{}", fmt::join(c.mesh_axes, ",")),
                    std::string(to_string(c.link)),
                    with_commas(c.count),
                    seconds_text(c.seconds),
                    seconds_text(c.exposed_seconds)});
  }
  if (step.bubble_seconds > 0) {
    whole("pipeline bubble", step.bubble_seconds);
  }
  rows.push_back({"step", "", "", "", "", seconds_text(step.step_seconds)});
  return rows;
}

std::string step_assumptions(const StepEstimate& step) {
  std::vector<std::string> assumed;
  for (const StepEstimate::Assumption& a : step.assumptions) {
    assumed.push_back(fmt::format("{} {}", a.name, a.value));
  }
  return fmt::format("{}", fmt::join(assumed, "; "));
}

std::string step_table(const StepEstimate& step) {
  std::string out = "training step per device (docs/step.md):\n";
  out += table(step_rows(step));
  out += step_line(step) + "\n";
  out += fmt::format("assumed: {}\n", step_assumptions(step));
  return out;
}

Rows mesh_axis_rows(const Mesh& mesh) {
  Rows rows = {{"axis", "size", "ici", "dcn", "type"}};
  for (const MeshAxis& a : mesh.axes) {
    rows.push_back({a.name,
                    std::to_string(a.size),
                    std::to_string(a.ici),
                    std::to_string(a.dcn),
                    std::string(to_string(a.type))});
  }
  return rows;
}

Rows dtype_rows(const MemoryEstimate& m) {
  Rows rows = {{"dtype", "tensors", "bytes", ""}};
  for (const DtypeMemory& d : m.by_dtype) {
    rows.push_back({std::string(to_string(d.dtype)),
                    with_commas(d.tensors),
                    with_commas(d.params_per_device),
                    human_bytes(d.params_per_device)});
  }
  return rows;
}

Rows largest_rows(const MemoryEstimate& m,
                  const Manifest& manifest,
                  const std::vector<TensorSharding>& shardings) {
  Rows rows = {{"tensor", "shape", "dtype", "spec", "params", "with state"}};
  for (const TensorMemory& t : m.largest) {
    const Tensor& tensor = manifest.tensors()[t.tensor];
    const TensorSharding& s = shardings[t.tensor];
    rows.push_back({std::string(tensor.name),
                    shape_text(tensor.shape),
                    std::string(to_string(tensor.dtype)),
                    s.spec() ? to_short(*s.spec()) : "-",
                    human_bytes(t.per_device.params),
                    human_bytes(t.per_device.model_states())});
  }
  return rows;
}

bool step_is_peak(const MemoryEstimate& m) {
  return m.optimizer_step + m.hosted_params + m.hosted_optimizer
         > m.gather_buffer + m.activations;
}

std::vector<Category> categories(const MemoryEstimate& m) {
  // At the backward's peak the states kept in host memory are not in HBM.
  const bool step = step_is_peak(m);
  std::vector<Category> out = {
      {"params", m.per_device.params - (step ? 0 : m.hosted_params)},
      {"grads", m.per_device.grads},
      {"optimizer", m.per_device.optimizer - (step ? 0 : m.hosted_optimizer)}};
  if (step) {
    out.push_back({"optimizer step", m.optimizer_step});
    return out;
  }
  out.push_back({"gather buffer", m.gather_buffer});
  if (m.activations_counted) {
    out.push_back({"activations", m.activations});
  }
  return out;
}

std::string optimizer_step_line(const MemoryEstimate& m) {
  if (m.optimizer_step == 0) {
    return {};
  }
  return step_is_peak(m) ? fmt::format(
             "optimizer step: one tensor's fp32 update, {}, "
             "is the peak: more than the backward's gather buffer "
             "and activations ({}), freed before it",
             human_bytes(m.optimizer_step),
             human_bytes(m.gather_buffer + m.activations))
                         : fmt::format(
                             "optimizer step: one tensor's fp32 update, {}, "
                             "below the backward's gather buffer and "
                             "activations",
                             human_bytes(m.optimizer_step));
}

std::string peak_line(const MemoryEstimate& m, const ActivationEstimate& a) {
  const bool prefetch = m.prefetch_dropped == 0;
  switch (m.peak_phase) {
    case MemoryPhase::loss:
      return fmt::format(
          "peak: the loss: every layer's saved activations, the head's "
          "logits ({} cross-entropy), the head's weights gathered{}",
          to_string(a.cross_entropy),
          prefetch ? " and the last layer's prefetched" : "");
    case MemoryPhase::layer_backward:
      return fmt::format(
          "peak: a layer's backward: every layer's saved activations, its "
          "recompute, its weights and gradients gathered{}",
          prefetch ? " and the next one's weights prefetched" : "");
    case MemoryPhase::optimizer_step:
      break;
  }
  return "peak: the optimizer step";
}

std::string host_line(const MemoryEstimate& m) {
  if (m.host_bytes_per_host == 0) {
    return {};
  }
  const std::string devices = fmt::format("{} device{} a host",
                                          m.devices_per_host,
                                          m.devices_per_host == 1 ? "" : "s");
  if (!m.host_memory_bytes) {
    return fmt::format(
        "host memory per host: {}, {} (the topology gives no host RAM)",
        human_bytes(m.host_bytes_per_host),
        devices);
  }
  return fmt::format(
      "host memory per host: {} of {} of RAM ({:.1f}%), {}{}",
      human_bytes(m.host_bytes_per_host),
      human_bytes(*m.host_memory_bytes),
      100.0 * static_cast<double>(m.host_bytes_per_host)
          / static_cast<double>(*m.host_memory_bytes),
      devices,
      m.host_fits.value_or(true) ? "" : ": DOES NOT FIT in the host's RAM");
}

std::string prefetch_line(const MemoryEstimate& m) {
  if (m.prefetch_dropped == 0) {
    return {};
  }
  return fmt::format(
      "prefetch: fits only without the next layer's weights prefetched ({}): "
      "XLA schedules under its memory limit and gathers them after this "
      "layer's buffers are freed, an exposed all-gather",
      human_bytes(m.prefetch_dropped));
}

std::string placement_line(const MemoryEstimate& m) {
  const Placement& p = m.placement;
  if (!p.placed()) {
    return {};
  }
  std::vector<std::string> parts;
  if (p.stages > 1) {
    parts.push_back(fmt::format("stage {} of {} ({})",
                                m.stage,
                                p.stages,
                                fmt::join(p.stage_axes, ",")));
  }
  if (p.expert_ranks > 1) {
    parts.push_back(fmt::format("expert rank {} of {} ({})",
                                m.expert_rank,
                                p.expert_ranks,
                                fmt::join(p.expert_axes, ",")));
  }
  return fmt::format("most loaded: {}", fmt::join(parts, ", "));
}

std::vector<std::string> stage_lines(const MemoryEstimate& m) {
  const Placement& p = m.placement;
  std::vector<std::string> out;
  if (p.stages <= 1) {
    return out;
  }
  const int64_t per_stage = p.layers / p.stages;  // S divides L
  for (const GroupMemory& g : m.stages) {
    std::string what = fmt::format("stage {}", g.stage);
    if (per_stage > 0) {
      what += fmt::format(
          " ({}{})",
          per_stage == 1 ? fmt::format("layer {}", g.stage)
                         : fmt::format("layers {}-{}",
                                       g.stage * per_stage,
                                       (g.stage + 1) * per_stage - 1),
          p.expert_ranks > 1 ? fmt::format(", expert rank {}", g.expert_rank)
                             : std::string());
    } else if (p.expert_ranks > 1) {
      what += fmt::format(" (expert rank {})", g.expert_rank);
    }
    out.push_back(fmt::format(
        "{}: params {}, grads {}, optimizer {}, gather buffer {}, {}total {}",
        what,
        human_bytes(g.per_device.params),
        human_bytes(g.per_device.grads),
        human_bytes(g.per_device.optimizer),
        human_bytes(g.gather_buffer),
        m.activations_counted
            ? fmt::format("activations {}, ", human_bytes(g.activations))
            : std::string(),
        human_bytes(g.total)));
  }
  return out;
}

std::string gather_units_text(const MemoryEstimate& m) {
  std::vector<std::string> names;
  for (const GatherUnit& u : m.gather_units) {
    names.push_back(u.name);
  }
  return fmt::format("{}", fmt::join(names, " + "));
}

}  // namespace shardplan::report_detail
