#include <shardplan/validate.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <map>
#include <span>
#include <string_view>
#include <unordered_map>

namespace shardplan {

namespace {

std::string python_names(const std::vector<std::string>& names) {
  std::vector<std::string> quoted;
  quoted.reserve(names.size());
  for (const std::string& n : names) {
    quoted.push_back("'" + n + "'");
  }
  if (quoted.size() == 1) {
    return fmt::format("({},)", quoted[0]);
  }
  return fmt::format("({})", fmt::join(quoted, ", "));
}

Location spec_location(const SpecsFile& specs, const NamedSpec& entry) {
  Location loc;
  loc.source = specs.source;
  loc.pointer = entry.pointer;
  loc.line = entry.line;
  loc.column = entry.column;
  return loc;
}

// Past this many unknown names, no nearest-name hint: each costs a pass over
// the manifest's names.
constexpr size_t k_max_name_hints = 20;

// The hint of an indivisible dim: the mesh axes whose size divides it (those
// free in this spec, or already on this dim) and the padded size that the
// requested split would accept.
std::string indivisible_hint(int64_t size,
                             int64_t shards,
                             size_t dim,
                             const PartitionSpec& spec,
                             const Mesh& mesh) {
  std::vector<std::string> dividing;
  for (const MeshAxis& axis : mesh.axes) {
    if (axis.size <= 1 || size % axis.size != 0) {
      continue;
    }
    bool used_elsewhere = false;
    for (size_t d = 0; d < spec.dims.size(); ++d) {
      if (d != dim
          && std::find(
                 spec.dims[d].axes.begin(), spec.dims[d].axes.end(), axis.name)
                 != spec.dims[d].axes.end()) {
        used_elsewhere = true;
      }
    }
    if (!used_elsewhere) {
      dividing.push_back(fmt::format("{} ({})", axis.name, axis.size));
    }
  }
  std::string out =
      dividing.empty()
          ? fmt::format("no free mesh axis divides {}", size)
          : fmt::format(
              "mesh axes that divide {}: {}", size, fmt::join(dividing, ", "));
  if (std::optional<int64_t> padded =
          checked_mul(ceil_div(size, shards), shards)) {
    out += fmt::format(
        "; or pad the dim to {} (a multiple of {})", *padded, shards);
  }
  return out;
}

}  // namespace

namespace {

// Axes of size 1 named in specs: how many tensors name each, and the first.
using TrivialAxes = std::map<std::string, std::pair<size_t, std::string>>;

void check_device_count(const Mesh& mesh,
                        const ValidateOptions& options,
                        Diagnostics& diags) {
  const Sourced<std::optional<int64_t>>& devices = options.topology_devices;
  if (devices.value && *devices.value != mesh.num_devices()) {
    Diagnostic& d = diags.error(
        "mesh.device-count",
        fmt::format("number of devices {} must equal the product of mesh_shape "
                    "{} = {}",
                    *devices.value,
                    python_tuple(mesh.shape()),
                    mesh.num_devices()),
        options.mesh_at);
    d.hint =
        fmt::format("{} has {} devices", to_string(devices.at), *devices.value);
  }
}

void report_trivial_axes(const TrivialAxes& trivial,
                         const Location& at,
                         Diagnostics& diags) {
  for (const auto& [axis, use] : trivial) {
    Diagnostic& d = diags.warning(
        "spec.trivial-axis",
        fmt::format("mesh axis {} has size 1, yet {} {} it (first: {}); it "
                    "splits nothing",
                    quote(axis, '\''),
                    use.first,
                    use.first == 1 ? "spec names" : "specs name",
                    quote(use.second)),
        at);
    d.tensor = use.second;
  }
}

// A tensor without a usable spec: replicated for the memory totals, with a
// layout of its own.
TensorSharding unusable_sharding(const Tensor& tensor, const Mesh& mesh) {
  std::shared_ptr<ShardLayout> layout =
      make_layout(tensor, PartitionSpec{}, mesh);
  assert(layout);  // replicated: the tensor's own size, which fits in int64
  layout->valid = false;
  layout->spec.reset();
  return TensorSharding{std::move(layout)};
}

// Checks `spec` (as given: not padded) for tensor `t`, reporting each
// problem at where(), in JAX's order: unknown axes, repeated axes, then
// rank, then divisibility. The result has a layout of its own; whether it is
// valid follows from the spec, the tensor's shape and the mesh alone (the
// warnings do not change it), so a caller may share it between tensors of
// the same spec, shape and dtype.
template <typename WhereFn>
TensorSharding check_tensor(const Manifest& manifest,
                            size_t t,
                            const PartitionSpec& spec,
                            const Mesh& mesh,
                            const std::vector<std::string>& mesh_names,
                            const ValidateOptions& options,
                            TrivialAxes& trivial,
                            const WhereFn& where,
                            Diagnostics& diags) {
  const Tensor& tensor = manifest.tensors()[t];
  // The spec's text and the location are built only when there is
  // something to report: this runs once per tensor.
  auto report = [&](Severity severity,
                    const char* code,
                    std::string message,
                    std::optional<size_t> dim = std::nullopt) -> Diagnostic& {
    Diagnostic d;
    d.severity = severity;
    d.code = code;
    d.message = std::move(message);
    d.location = where();
    d.tensor = std::string(tensor.name);
    if (dim) {
      d.dim = static_cast<int64_t>(*dim);
    }
    return diags.add(std::move(d));
  };
  auto shown = [&] { return to_python(spec); };
  bool ok = true;

  std::vector<std::string_view> seen;
  for (size_t d = 0; d < spec.dims.size(); ++d) {
    for (const std::string& axis : spec.dims[d].axes) {
      const MeshAxis* mesh_axis = mesh.find(axis);
      if (mesh_axis == nullptr) {
        Diagnostic& diag = report(
            Severity::error,
            "spec.unknown-axis",
            fmt::format("resource axis: {} of {} is not found in mesh: {}",
                        axis,
                        shown(),
                        python_names(mesh_names)),
            d);
        std::string best = closest_match(axis, mesh_names);
        if (!best.empty()) {
          diag.hint = fmt::format("did you mean {}?", quote(best, '\''));
        }
        ok = false;
        continue;
      }
      if (std::find(seen.begin(), seen.end(), axis) != seen.end()) {
        report(
            Severity::error,
            "spec.duplicate-axis",
            fmt::format(
                "a single NamedSharding spec specification can map every mesh "
                "axis to at most one positional dimension, but {} has "
                "duplicate "
                "entries for `{}`",
                shown(),
                axis),
            d);
        ok = false;
        continue;
      }
      seen.push_back(axis);
      if (mesh_axis->size == 1) {
        auto [it, inserted] = trivial.try_emplace(axis, 0, tensor.name);
        ++it->second.first;
      }
    }
  }
  if (spec.size() > static_cast<size_t>(tensor.rank())) {
    report(
        Severity::error,
        "spec.rank",
        fmt::format(
            "sharding {} is only valid for values of rank at least {}, but was "
            "applied to a value of rank {}",
            shown(),
            spec.size(),
            tensor.rank()))
        .hint = tensor.rank() == 0
                    ? "for scalars the PartitionSpec should be P()"
                    : fmt::format("the tensor's shape is {}",
                                  python_tuple(tensor.shape));
    ok = false;
  }
  if (!ok) {
    return unusable_sharding(tensor, mesh);
  }

  std::shared_ptr<ShardLayout> laid = make_layout(tensor, spec, mesh);
  assert(laid);  // shards of a tensor whose size fits in int64
  const ShapeView shards = laid->shards();
  for (size_t d = 0; d < shards.size(); ++d) {
    const int64_t size = tensor.shape[d];
    if (size % shards[d] == 0) {
      continue;
    }
    report(Severity::error,
           "spec.indivisible",
           fmt::format(
               "{} implies that array axis {} is partitioned {} times, but the "
               "dimension size is {} (full shape: {}, per-dimension tiling "
               "factors: {} should evenly divide the shape)",
               shown(),
               d,
               shards[d],
               size,
               python_tuple(tensor.shape),
               python_tuple(shards)),
           d)
        .hint = indivisible_hint(size, shards[d], d, *laid->spec, mesh);
    laid->valid = false;
  }
  if (laid->valid && options.replicated_warning_bytes.value > 0
      && mesh.num_devices() > 1 && laid->replicas == mesh.num_devices()
      && tensor.num_bytes >= options.replicated_warning_bytes.value) {
    report(Severity::warning,
           "spec.replicated-large",
           fmt::format(
               "tensor {} ({} bytes) is fully replicated on all {} devices",
               quote(tensor.name),
               tensor.num_bytes,
               mesh.num_devices()))
        .hint = fmt::format("the warning starts at {} bytes ({})",
                            options.replicated_warning_bytes.value,
                            to_string(options.replicated_warning_bytes.at));
  }
  return TensorSharding{std::move(laid)};
}

// What makes two tensors' checks equal: the same spec object, shape and
// dtype.
struct CheckKey {
  const PartitionSpec* spec;
  ShapeView shape;
  DType dtype;
  bool operator==(const CheckKey& o) const {
    return spec == o.spec && dtype == o.dtype && shape == o.shape;
  }
};

struct CheckKeyHash {
  size_t operator()(const CheckKey& k) const noexcept {
    size_t h =
        std::hash<const void*>{}(k.spec) ^ (static_cast<size_t>(k.dtype) << 1U);
    for (int64_t d : k.shape) {
      h = h * 1099511628211ULL ^ static_cast<size_t>(d);
    }
    return h;
  }
};

// check_tensor for each tensor in manifest order, done once per key: a
// check that reported nothing and named no size-1 axis (each use of one is
// counted) is reused for the later tensors of its key, which share its
// layout (its figures and validity are functions of the key and the mesh).
// Specs that are equal but not the same object are checked apart.
class Checks {
 public:
  Checks(const Manifest& manifest,
         const Mesh& mesh,
         const ValidateOptions& options,
         Diagnostics& diags)
      : m_manifest(manifest),
        m_mesh(mesh),
        m_mesh_names(mesh.axis_names()),
        m_options(options),
        m_diags(diags) {
    m_out.reserve(manifest.size());
  }

  // Tensor `t`'s sharding under `spec`; problems are reported at where().
  // REQUIRES: t == the number of tensors added so far.
  template <typename WhereFn>
  void check(size_t t, const PartitionSpec& spec, const WhereFn& where) {
    assert(t == m_out.size());
    const Tensor& tensor = m_manifest.tensors()[t];
    const CheckKey key{&spec, tensor.shape, tensor.dtype};
    if (auto hit = m_quiet.find(key); hit != m_quiet.end()) {
      m_out.push_back(m_out[hit->second]);
      return;
    }
    const size_t reported = m_diags.items().size() + m_diags.dropped();
    m_out.push_back(check_tensor(m_manifest,
                                 t,
                                 spec,
                                 m_mesh,
                                 m_mesh_names,
                                 m_options,
                                 m_trivial,
                                 where,
                                 m_diags));
    const std::vector<std::string> axes = spec.axes();
    const bool trivial_use =
        std::any_of(axes.begin(), axes.end(), [&](const std::string& a) {
          const MeshAxis* axis = m_mesh.find(a);
          return axis != nullptr && axis->size == 1;
        });
    if (m_diags.items().size() + m_diags.dropped() == reported
        && !trivial_use) {
      m_quiet.emplace(key, t);
    }
  }

  // A tensor without a usable spec (reported by the caller).
  void unusable(size_t t) {
    assert(t == m_out.size());
    m_out.push_back(unusable_sharding(m_manifest.tensors()[t], m_mesh));
  }

  // The shardings, after the size-1 axes the specs named are reported at
  // `at`.
  std::vector<TensorSharding> finish(const Location& at) {
    report_trivial_axes(m_trivial, at, m_diags);
    return std::move(m_out);
  }

 private:
  const Manifest& m_manifest;
  const Mesh& m_mesh;
  const std::vector<std::string> m_mesh_names;
  const ValidateOptions& m_options;
  Diagnostics& m_diags;
  TrivialAxes m_trivial;
  std::unordered_map<CheckKey, size_t, CheckKeyHash> m_quiet;
  std::vector<TensorSharding> m_out;
};

}  // namespace

std::vector<TensorSharding> validate_specs(const Manifest& manifest,
                                           const Mesh& mesh,
                                           const SpecsFile& specs,
                                           const ValidateOptions& options,
                                           Diagnostics& diags) {
  const std::vector<Tensor>& tensors = manifest.tensors();
  check_device_count(mesh, options, diags);

  // Which spec each tensor has; specs for unknown tensors are reported here,
  // in file order.
  constexpr size_t none = static_cast<size_t>(-1);
  std::vector<size_t> spec_of(tensors.size(), none);
  std::vector<std::string> names;  // for hints, built on first need
  size_t hints_given = 0;
  for (size_t i = 0; i < specs.specs.size(); ++i) {
    const NamedSpec& entry = specs.specs[i];
    const Tensor* tensor = manifest.find(entry.name);
    if (tensor != nullptr) {
      spec_of[static_cast<size_t>(tensor - tensors.data())] = i;
      continue;
    }
    Diagnostic& d = diags.error(
        "spec.unknown-tensor",
        fmt::format("spec for tensor {}, which the manifest {} does not have",
                    quote(entry.name),
                    manifest.source),
        spec_location(specs, entry));
    d.tensor = entry.name;
    if (hints_given < k_max_name_hints) {
      ++hints_given;
      if (names.empty()) {
        names.reserve(tensors.size());
        for (const Tensor& t : tensors) {
          names.push_back(std::string(t.name));
        }
      }
      std::string best = closest_match(entry.name, names);
      if (!best.empty()) {
        d.hint = fmt::format("did you mean {}?", quote(best));
      }
    }
  }

  // Checked once per spec object, shape and dtype: the reader gives
  // entries with equal specs one object.
  Checks checks(manifest, mesh, options, diags);
  for (size_t t = 0; t < tensors.size(); ++t) {
    const Tensor& tensor = tensors[t];
    if (spec_of[t] == none) {
      Diagnostic& d = diags.error(
          "spec.missing",
          fmt::format(
              "tensor {} has no spec in {}", quote(tensor.name), specs.source),
          Location::of(specs.source));
      d.tensor = std::string(tensor.name);
      d.hint = "add it to the specs file; P() replicates it";
      checks.unusable(t);
      continue;
    }
    const NamedSpec& entry = specs.specs[spec_of[t]];
    if (!entry.valid) {
      checks.unusable(t);  // the reader reported it
      continue;
    }
    assert(entry.spec);
    checks.check(t, *entry.spec, [&] { return spec_location(specs, entry); });
  }
  return checks.finish(Location::of(specs.source));
}

std::vector<TensorSharding> validate_planned(
    const Manifest& manifest,
    const Mesh& mesh,
    std::span<const PartitionSpec* const> specs,
    const Location& plan_at,
    const ValidateOptions& options,
    Diagnostics& diags) {
  assert(specs.size() == manifest.size());
  check_device_count(mesh, options, diags);
  Checks checks(manifest, mesh, options, diags);
  for (size_t t = 0; t < specs.size(); ++t) {
    const Tensor& tensor = manifest.tensors()[t];
    checks.check(t, *specs[t], [&] {
      Location where = Location::of(manifest.source);
      where.pointer = tensor.pointer();
      return where;
    });
  }
  return checks.finish(plan_at);
}

}  // namespace shardplan
