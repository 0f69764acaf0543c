// The loaders the commands share (cli/inputs.hpp): a manifest, a topology
// or a rule set from its flag, the rules plan and search plan with, what
// check, memory and plan read before they differ (load_inputs), and what
// search reads (load_search_inputs).

#include "cli/inputs.hpp"

#include "cli/maxtext.hpp"
#include "cli/session.hpp"
#include "cli/workload.hpp"

#include <shardplan/diag.hpp>
#include <shardplan/io.hpp>
#include <shardplan/memory.hpp>
#include <shardplan/mesh.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/search.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/topology.hpp>
#include <shardplan/validate.hpp>
#include <shardplan/workload.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <string_view>
#include <system_error>

namespace shardplan::cli {

std::vector<CLI::Option*> add_manifest_options(CLI::App& app,
                                               ManifestSource& source) {
  CLI::Option* manifest =
      app.add_option("--manifest",
                     source.manifest,
                     "the tensors: a manifest {\"params\": [...]}, a "
                     "safetensors header JSON object, a .safetensors file, a "
                     "model.safetensors.index.json or a checkpoint folder")
          ->type_name("PATH");
  CLI::Option* model =
      app.add_option("--model",
                     source.model,
                     "a built-in model instead (gpt2, llama-3-8b, "
                     "deepseek-v3, ...; `shardplan manifest --model list`)")
          ->type_name("NAME")
          ->excludes(manifest);
  CLI::Option* hf_config = app.add_option("--from-hf-config",
                                          source.hf_config,
                                          "a Hugging Face config.json instead: "
                                          "the tensors of its checkpoint")
                               ->type_name("FILE")
                               ->excludes(manifest)
                               ->excludes(model);
  return {manifest, model, hf_config};
}

std::optional<Manifest> load_manifest(const ManifestSource& source,
                                      Diagnostics& diags) {
  if (!source.model.empty()) {
    return read_builtin_model(source.model, "--model", diags);
  }
  if (!source.hf_config.empty()) {
    std::optional<std::vector<ModelTensor>> tensors = read_path(
        source.hf_config, InputKind::hf_config, diags, tensors_from_hf_config);
    if (!tensors) {
      return std::nullopt;
    }
    return manifest_from_model(*tensors, source.hf_config, diags);
  }
  if (source.manifest.empty()) {
    diags
        .error("cli.no-manifest",
               "no parameters to read: give --manifest PATH, --model NAME or "
               "--from-hf-config FILE",
               Location::of("shardplan"))
        .hint = "shardplan manifest --model list shows the built-in models";
    return std::nullopt;
  }
  return read_manifest_path(source.manifest, diags);
}

bool names_a_file(const std::string& arg) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(arg, ec);
  return arg.ends_with(".json")
         || (std::filesystem::exists(status)
             && !std::filesystem::is_directory(status));
}

std::optional<Topology> load_topology(const std::string& arg,
                                      const std::string& flag,
                                      Diagnostics& diags) {
  if (names_a_file(arg)) {
    return read_path(arg, InputKind::topology, diags, read_topology_file);
  }
  return resolve_topology(arg, Location::of(flag), diags);
}

MeshSources mesh_flags() {
  return MeshSources{"--mesh",
                     "--dcn",
                     "--axis-names",
                     "--devices",
                     "--topology",
                     "--allow-split-physical-axes"};
}

std::optional<RuleSet> load_rules(const std::string& arg,
                                  const std::string& flag,
                                  Diagnostics& diags) {
  if (names_a_file(arg)) {
    return read_path(arg, InputKind::rules, diags, read_rules);
  }
  return read_rules_preset(arg, Location::of(flag), diags);
}

std::optional<RuleSet> load_plan_rules(
    const std::string& arg,
    bool given,
    const std::optional<MaxTextConfig>& maxtext,
    Diagnostics& diags) {
  if (maxtext && !given) {
    return maxtext_rules(*maxtext, diags);
  }
  if (maxtext) {
    note_maxtext_rules_unused(*maxtext, "--rules", diags);
  }
  return load_rules(arg, "--rules", diags);
}

namespace {

// What the memory estimate takes of the activations: each stage's.
std::vector<ActivationLoad> activation_loads(const ActivationEstimate& a) {
  std::vector<ActivationLoad> out;
  out.reserve(a.per_stage.size());
  for (const StageActivations& stage : a.per_stage) {
    out.push_back(activation_load(stage));
  }
  return out;
}

// A byte size: "1073741824", "80GB", "95GiB", "64 MiB", "1.5e9". Decimal
// units (kB, MB, GB, TB) are powers of 1000, binary ones (KiB, MiB, GiB,
// TiB) of 1024; case does not matter; rounded to whole bytes. With
// `positive`, a size that is 0 bytes is refused as well (--hbm: a device
// holds something). Reports at `flag`.
std::optional<int64_t> parse_size(std::string_view text,
                                  std::string_view flag,
                                  Diagnostics& diags,
                                  bool positive = false) {
  std::string trimmed;
  for (char c : text) {
    if (c != ' ') {
      trimmed += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  struct Unit {
    std::string_view suffix;
    double factor;
  };
  constexpr std::array<Unit, 9> k_units{{{"kib", 1024.0},
                                         {"mib", 1048576.0},
                                         {"gib", 1073741824.0},
                                         {"tib", 1099511627776.0},
                                         {"kb", 1e3},
                                         {"mb", 1e6},
                                         {"gb", 1e9},
                                         {"tb", 1e12},
                                         {"b", 1.0}}};
  double factor = 1.0;
  std::string_view number = trimmed;
  for (const Unit& u : k_units) {
    if (number.ends_with(u.suffix)) {
      number.remove_suffix(u.suffix.size());
      factor = u.factor;
      break;
    }
  }
  double value = 0;
  auto [end, ec] =
      std::from_chars(number.data(), number.data() + number.size(), value);
  const double bytes = value * factor;
  if (number.empty() || ec != std::errc()
      || end != number.data() + number.size() || !(bytes >= 0)
      || bytes >= 9.2e18) {
    diags.error(
        "cli.size",
        fmt::format(
            "expected a byte size such as 80GB, 95GiB or 1073741824, got {}",
            quote(text)),
        Location::of(std::string(flag)));
    return std::nullopt;
  }
  const auto rounded = static_cast<int64_t>(std::llround(bytes));
  if (positive && rounded == 0) {
    diags
        .error("cli.size",
               fmt::format("expected a byte size above 0, got {}", quote(text)),
               Location::of(std::string(flag)))
        .hint = "give the device's memory, such as 80GB or 95GiB";
    return std::nullopt;
  }
  return rounded;
}

// Reads what check, memory and plan share, phase by phase (load_inputs):
// the topology and the MaxText config, the mesh, the options of the memory
// estimator and the validator, the manifest and the training workload.
class InputReader {
 public:
  InputReader(const CheckCommand& cmd, Diagnostics& diags, Inputs& in)
      : m_cmd(cmd), m_diags(diags), m_in(in) {}

  // False after an input error (reported).
  bool run() {
    return read_files() && read_mesh_text() && read_mesh() && read_options()
           && read_model();
  }

 private:
  // --topology and --maxtext-config.
  bool read_files() {
    if (!m_cmd.topology.empty()) {
      m_in.topology = load_topology(m_cmd.topology, "--topology", m_diags);
      if (!m_in.topology) {
        return false;
      }
    }
    m_in.mesh_text = m_cmd.mesh;
    m_in.dcn_text = m_cmd.dcn;
    m_in.allow_split_physical_axes = m_cmd.allow_split_physical_axes;
    if (!m_cmd.maxtext.empty()) {
      m_in.maxtext = load_maxtext_config(m_cmd.maxtext, m_diags);
      if (!m_in.maxtext) {
        return false;
      }
    }
    return true;
  }

  // The mesh's text: --mesh and --dcn, or the mesh MaxText builds from the
  // config on the devices (search's winner gives its own --mesh with the
  // config's rules and workload).
  bool read_mesh_text() {
    const std::optional<Topology>& topology = m_in.topology;
    if (!m_cmd.maxtext.empty() && m_cmd.mesh.empty()) {
      if (!topology && !m_cmd.devices) {
        m_diags
            .error(
                "cli.usage",
                "--maxtext-config needs the devices: --topology or --devices",
                Location::of("--maxtext-config"))
            .hint = "e.g. --topology v5p-128 --maxtext-config my.yml";
        return false;
      }
      std::optional<MaxTextMesh> built =
          maxtext_mesh(*m_in.maxtext,
                       topology ? topology->devices() : *m_cmd.devices,
                       topology ? std::optional<int64_t>(topology->num_slices())
                                : std::nullopt,
                       m_diags);
      if (!built) {
        return false;
      }
      spdlog::debug(
          "--maxtext-config: mesh {} dcn \"{}\"", built->mesh, built->dcn);
      m_in.mesh_text = built->mesh;
      m_in.dcn_text = built->dcn;
      m_in.allow_split_physical_axes =
          m_in.allow_split_physical_axes || built->allow_split_physical_axes;
      m_sources = maxtext_flags();
    } else if (m_cmd.mesh.empty()) {
      m_diags
          .error("cli.usage",
                 "--mesh is required (or --maxtext-config FILE)",
                 Location::of("--mesh"))
          .hint = "e.g. --topology v5p-128 --mesh fsdp:-1,tp:4";
      return false;
    }
    return true;
  }

  // The mesh, laid out on the topology as `mesh` lays it out: a mesh JAX
  // cannot place on the topology is refused with the same error. With a
  // topology, a mesh of another device count is a plan error that the
  // validator reports with the others.
  bool read_mesh() {
    const std::optional<Topology>& topology = m_in.topology;
    const MeshInput input{m_in.mesh_text,
                          m_in.dcn_text,
                          m_cmd.axis_names,
                          topology ? &*topology : nullptr,
                          m_cmd.devices,
                          false,
                          m_sources};
    m_in.mesh = resolve_mesh(input, topology.has_value(), m_diags);
    if (!m_in.mesh) {
      return false;
    }
    if (topology && m_in.mesh->num_devices() == topology->devices()) {
      m_in.layout = layout_mesh(
          *topology,
          *m_in.mesh,
          LayoutOptions{
              m_in.allow_split_physical_axes, m_sources, m_in.mesh_text, false},
          m_diags);
      if (!m_in.layout || m_diags.has_errors()) {
        return false;
      }
    }
    return true;
  }

  // --param-dtype, --grad-dtype: a dtype name, at its flag; whether it is
  // one the estimate can train in is estimate_memory's to say.
  Sourced<std::optional<DType>> read_dtype(const std::string& text,
                                           const std::string& flag) {
    Sourced<std::optional<DType>> dtype{{}, Location::of(flag)};
    if (text.empty()) {
      return dtype;
    }
    dtype.value = parse_dtype(text);
    if (!dtype.value) {
      m_diags
          .error("cli.dtype",
                 fmt::format("unknown dtype {}", quote(text)),
                 dtype.at)
          .hint = dtype_hint(text);
    }
    return dtype;
  }

  // The optimizer's state: the flags, else a MaxText config's defaults
  // (optax adamw: moments like the params, no master copy), else the
  // recipe's.
  void read_optimizer(MemoryOptions& memory) {
    if (!m_cmd.optimizer.empty()) {
      memory.optimizer = {parse_optimizer(m_cmd.optimizer),
                          Location::of("--optimizer")};
    }
    memory.moment_dtype = read_dtype(m_cmd.moment_dtype, "--moment-dtype");
    if (!m_cmd.master.empty()) {
      memory.master = {m_cmd.master == "f32", Location::of("--master-weights")};
    }
    apply_maxtext_optimizer(m_in.maxtext, memory, &*m_in.mesh);
  }

  // The options of the memory estimator and of the validator.
  bool read_options() {
    const std::optional<Topology>& topology = m_in.topology;
    MemoryOptions& memory = m_in.memory;
    // A MaxText config is a training run: its optimizer's state
    // (apply_maxtext_optimizer) unless --recipe says otherwise.
    std::optional<Recipe> recipe =
        parse_recipe(!m_cmd.recipe.empty() ? m_cmd.recipe
                     : m_in.maxtext        ? std::string("adam")
                                           : std::string("params-only"));
    assert(recipe);  // CLI11 checked the name
    memory.recipe = *recipe;
    memory.zero = {m_cmd.zero, Location::of("--zero")};
    memory.data_axes = {m_cmd.data_axes, Location::of("--data-axes")};
    apply_host_offload(m_cmd.host_offload, memory);
    apply_runtime(m_cmd.runtime,
                  m_cmd.headroom,
                  topology ? &*topology : nullptr,
                  m_in.maxtext.has_value(),
                  memory);
    apply_host_memory(topology ? &*topology : nullptr, memory);
    memory.largest = m_cmd.largest;
    memory.param_dtype = read_dtype(m_cmd.param_dtype, "--param-dtype");
    apply_maxtext_param_dtype(m_in.maxtext, memory.param_dtype);
    memory.grad_dtype = read_dtype(m_cmd.grad_dtype, "--grad-dtype");
    read_optimizer(memory);
    if (m_cmd.hbm) {
      memory.hbm_bytes = {parse_size(*m_cmd.hbm, "--hbm", m_diags, true),
                          Location::of("--hbm")};
    } else if (topology) {
      memory.hbm_bytes = {
          static_cast<int64_t>(topology->figures.hbm_bytes_per_device.value),
          Location::of("--topology " + topology->name)};
    }
    std::optional<int64_t> warn =
        parse_size(m_cmd.warn_replicated, "--warn-replicated", m_diags);
    if (m_diags.has_errors()) {
      return false;
    }
    ValidateOptions& validate = m_in.validate;
    validate.replicated_warning_bytes = {*warn,
                                         Location::of("--warn-replicated")};
    validate.mesh_at = Location::of(m_sources.mesh);
    if (topology) {
      validate.topology_devices = {
          topology->devices(), Location::of("--topology " + topology->name)};
    }
    return true;
  }

  // The manifest, the architecture and the workload's activations, and
  // what the memory estimate and the step take from them.
  bool read_model() {
    Stopwatch watch;
    m_in.manifest = load_model_manifest(m_cmd.source, m_in.maxtext, m_diags);
    watch.lap("read the manifest");
    if (!m_in.manifest) {
      return false;
    }
    const std::optional<MaxTextConfig>& mt = m_in.maxtext;
    m_in.maxtext_model = mt && mt->model && mt->model->name != "default"
                             ? mt->model->name
                             : maxtext_model_name(m_cmd.source.model);
    WorkloadFlags workload = m_cmd.workload;
    const bool has_architecture =
        !m_cmd.source.model.empty() || !m_cmd.source.hf_config.empty()
        || !m_cmd.workload.config.empty()
        || maxtext_model_config(m_in.maxtext) != nullptr;
    apply_maxtext_workload(m_in.maxtext, has_architecture, workload, m_diags);
    workload.residuals_only = m_in.memory.runtime == Runtime::xla;
    workload.eager_kernels = m_cmd.kernel.kernels == "eager";
    if (!load_training(workload,
                       m_cmd.source,
                       m_cmd.data_axes,
                       *m_in.mesh,
                       m_diags,
                       m_in.training)) {
      return false;
    }
    watch.lap("estimate activations");
    set_step_options();
    const Training& t = m_in.training;
    m_in.memory.roles = t.roles;
    m_in.memory.stage_axes_at = t.role_sources.stage;
    m_in.memory.expert_axes_at = t.role_sources.expert;
    if (t.model) {
      m_in.memory.layers = t.model->layers;
      m_in.memory.mtp_layers = t.model->mtp_layers;
      m_in.memory.experts = t.model->experts;
    }
    if (t.activations) {
      m_in.memory.activations = activation_loads(*t.activations);
    }
    note_params_only();
    return true;
  }

  // A workload trains: without --recipe only the weights are counted, and
  // the note says so [memory.params-only].
  void note_params_only() {
    if (!m_cmd.recipe.empty() || m_in.maxtext || !m_in.training.workload) {
      return;
    }
    Diagnostic d;
    d.severity = Severity::info;
    d.code = "memory.params-only";
    d.message =
        "the workload's activations are counted, but no gradients or "
        "optimizer state: the recipe is params-only, the default";
    d.location = Location::of("--recipe");
    d.hint =
        "give --recipe adam (or the recipe your run trains with) to count "
        "the training state";
    m_diags.add(std::move(d));
  }

  void set_step_options() {
    StepOptions& step = m_in.step_options;
    apply_efficiencies(m_cmd.matmul_efficiency,
                       m_cmd.attention_efficiency,
                       m_in.topology ? &*m_in.topology : nullptr,
                       m_in.memory.runtime,
                       step);
    auto overlaps = [&](std::string_view kind) {
      return std::find(m_cmd.overlap.begin(), m_cmd.overlap.end(), kind)
             != m_cmd.overlap.end();
    };
    step.overlap_fsdp = overlaps("fsdp");
    step.overlap_grad_reduce = overlaps("grads");
    step.overlap_tensor = overlaps("tensor");
    step.overlap_expert = overlaps("expert");
    apply_kernel_options(m_cmd.kernel, m_in.maxtext, step);
  }

  const CheckCommand& m_cmd;
  Diagnostics& m_diags;
  Inputs& m_in;
  // Where the mesh's inputs are reported: their flags, or with a mesh
  // built from --maxtext-config, the config's.
  MeshSources m_sources = mesh_flags();
};

}  // namespace

bool apply_rules_layout(const RuleSet& rules, Inputs& in, Diagnostics& diags) {
  Training& t = in.training;
  if (!t.workload || !t.model) {
    return true;
  }
  Sourced<ResidualLayout> layout =
      residual_layout(t.workload->residual, rules, *in.mesh, t.roles);
  if (layout.value == t.workload->residual.value) {
    return true;
  }
  t.workload->residual = std::move(layout);
  t.activations =
      estimate_activations(*t.model, *in.mesh, t.roles, *t.workload, diags);
  if (!t.activations) {
    return false;
  }
  in.memory.activations = activation_loads(*t.activations);
  return true;
}

bool load_inputs(const CheckCommand& cmd, Diagnostics& diags, Inputs& in) {
  return InputReader(cmd, diags, in).run();
}

bool load_search_inputs(const SearchCommand& cmd,
                        const MeshSources& sources,
                        Diagnostics& diags,
                        SearchInputs& in) {
  in.topology = load_topology(cmd.topology, "--topology", diags);
  if (!in.topology) {
    return false;
  }
  in.slices = {*in.topology};
  if (!cmd.devices.empty()) {
    std::optional<std::vector<Topology>> chosen =
        device_slices(*in.topology, cmd.devices, sources, diags);
    if (!chosen) {
      return false;
    }
    in.slices = std::move(*chosen);
  }
  // --maxtext-config: the rules, the workload and allow_split of a MaxText
  // config, and its model when no flag gives one; the meshes are still
  // search's, named as MaxText names axes.
  if (!cmd.maxtext.empty()) {
    in.maxtext = load_maxtext_config(cmd.maxtext, diags);
    if (!in.maxtext) {
      return false;
    }
  }
  in.manifest = load_model_manifest(cmd.source, in.maxtext, diags);
  bool failed = !in.manifest;
  if (!failed) {
    const ModelConfig* model = maxtext_model_config(in.maxtext);
    in.model = read_architecture(
        cmd.config,
        cmd.source,
        diags,
        failed,
        model ? std::optional<ModelConfig>(*model) : std::nullopt);
  }
  if (!failed && !in.model) {
    diags
        .error("workload.no-architecture",
               "search needs the model's architecture, which a manifest's "
               "tensors alone do not give",
               Location::of("--manifest"))
        .hint = "give --config FILE beside --manifest, or --model NAME";
    failed = true;
  }
  if (failed) {
    return false;
  }
  // The MTP modules trained: --mtp-layers, mtp_num_layers, else none.
  const auto& mtp = in.maxtext ? in.maxtext->mtp_num_layers : std::nullopt;
  in.model->mtp_layers = cmd.mtp_layers.value_or(mtp ? mtp->value : int64_t{0});
  in.rules = load_plan_rules(cmd.rules, cmd.rules_given, in.maxtext, diags);
  return in.rules.has_value();
}

// PyTorch's caching allocator reserves this fraction more than the peak it
// allocates: fitted by bench/fit_allocator.py to torchtitan's Llama 3.1 8B
// run on H100 (82.4 GiB max_reserved, measured-runs tt-a), the one
// published PyTorch peak; it also holds what torchtitan keeps that
// shardplan does not count (FSDP2's root module gathered through the step).
constexpr double k_pytorch_reserve = 0.143;
constexpr std::string_view k_pytorch_reserve_source =
    "fitted to torchtitan's Llama 3.1 8B H100 run (bench/fit_allocator.py)";
// JAX preallocates 75% of a GPU's memory (XLA_PYTHON_CLIENT_MEM_FRACTION,
// JAX's "GPU memory allocation").
constexpr double k_jax_gpu_headroom = 0.25;

void apply_host_offload(const std::vector<std::string>& states,
                        MemoryOptions& memory) {
  for (const std::string& state : states) {
    Sourced<bool>& offload = state == "optimizer"
                                 ? memory.optimizer_host_offload
                                 : memory.parameter_host_offload;
    offload.value = true;
    offload.at = Location::of("--host-offload");
  }
}

std::vector<CLI::Option*> add_kernel_options(CLI::App& app,
                                             KernelFlags& flags) {
  const auto choice = [&](const char* name,
                          std::string& value,
                          const char* help,
                          std::vector<std::string> choices,
                          const char* type) {
    return app.add_option(name, value, help)
        ->check(CLI::IsMember(std::move(choices)))
        ->type_name(type);
  };
  return {choice("--kernels",
                 flags.kernels,
                 "fused (XLA, torch.compile, Transformer Engine; the "
                 "default) or eager (PyTorch without torch.compile: each "
                 "elementwise op its own kernel; docs/step.md)",
                 {"fused", "eager"},
                 "MODE"),
          choice("--matmul-dtype",
                 flags.matmul_dtype,
                 "the weights' matmuls' dtype: bf16 (the default) or fp8 "
                 "(at the chip's FP8 peak; MaxText's fp8 quantization sets "
                 "it; docs/step.md)",
                 {"bf16", "fp8"},
                 "DTYPE"),
          choice("--grouped-gemm",
                 flags.grouped_gemm,
                 "the routed experts' GEMMs on a GPU: per-expert (a GEMM an "
                 "expert, as Transformer Engine's GroupedLinear runs them; "
                 "the default) or grouped (one grouped GEMM, "
                 "torch._grouped_mm as torchtitan calls it, at the chip's "
                 "measured grouped rate; docs/step.md)",
                 {"per-expert", "grouped"},
                 "KERNEL")};
}

void apply_kernel_options(const KernelFlags& flags,
                          const std::optional<MaxTextConfig>& maxtext,
                          StepOptions& step) {
  step.eager_kernels = flags.kernels == "eager";
  step.grouped_gemm = flags.grouped_gemm == "grouped";
  if (!flags.matmul_dtype.empty()) {
    step.fp8_matmuls = {flags.matmul_dtype == "fp8",
                        Location::of("--matmul-dtype")};
  }
  apply_maxtext_matmul_dtype(maxtext, !flags.matmul_dtype.empty(), step);
  apply_maxtext_kernels(maxtext, step);
}

void apply_efficiencies(std::optional<double> matmul,
                        std::optional<double> attention,
                        const Topology* topology,
                        Runtime runtime,
                        StepOptions& step) {
  const auto one = [&](std::optional<double> flag,
                       const char* name,
                       const Figure TopologyFigures::*figure,
                       Sourced<double>& out) {
    if (flag) {
      out = {*flag, Location::of(name)};
    } else if (topology != nullptr && (topology->figures.*figure).value > 0) {
      const Figure& f = topology->figures.*figure;
      out = {f.value, Location::of(f.source)};
    }
  };
  one(matmul,
      "--matmul-efficiency",
      &TopologyFigures::matmul_efficiency,
      step.matmul_efficiency);
  const bool jax = runtime == Runtime::xla && topology != nullptr
                   && topology->figures.xla_attention_efficiency.value > 0;
  one(attention,
      "--attention-efficiency",
      jax ? &TopologyFigures::xla_attention_efficiency
          : &TopologyFigures::attention_efficiency,
      step.attention_efficiency);
  // The band: none when a flag gives an efficiency; the fit's spread; the
  // roofline's, a matmul anywhere from 0.3 of the peak to all of it.
  if (matmul || attention) {
    step.efficiency_spread = {0, Location::of("the efficiencies are given")};
  } else if (topology != nullptr
             && topology->figures.efficiency_spread.value > 0) {
    const Figure& f = topology->figures.efficiency_spread;
    step.efficiency_spread = {f.value, Location::of(f.source)};
  } else {
    step.efficiency_spread = {
        0.7,
        Location::of("no fitted efficiency for this chip: a matmul anywhere "
                     "from 0.3 of the peak to the roofline")};
  }
}

void apply_host_memory(const Topology* topology, MemoryOptions& memory) {
  if (!topology) {
    return;
  }
  const double per_chip = topology->figures.host_memory_bytes_per_chip.value;
  const int64_t devices = topology->devices_per_host();
  const int64_t per_chip_devices =
      topology->kind == TopologyKind::tpu ? topology->tpu.cores_per_chip : 1;
  if (per_chip < 1 || devices < 1 || per_chip_devices < 1) {
    return;
  }
  // At most 1 PB a chip (figure_fields) x a host's chips: exact in double.
  const int64_t chips = devices / per_chip_devices;  // whole chips a host
  memory.host_memory_bytes = {
      static_cast<int64_t>(per_chip * static_cast<double>(chips)),
      Location::of("--topology " + topology->name)};
  memory.devices_per_host = devices;
}

void apply_runtime(const std::string& runtime,
                   std::optional<double> headroom,
                   const Topology* topology,
                   bool maxtext,
                   MemoryOptions& memory) {
  const bool gpu = topology && topology->kind == TopologyKind::gpu;
  memory.runtime =
      !runtime.empty()
          ? parse_runtime(runtime).value_or(Runtime::xla)  // CLI11 checked it
      : gpu && !maxtext ? Runtime::pytorch
                        : Runtime::xla;
  if (memory.runtime == Runtime::pytorch) {
    memory.reserve = k_pytorch_reserve;
    memory.reserve_source = std::string(k_pytorch_reserve_source);
  }
  if (headroom) {
    memory.headroom = *headroom;
    memory.headroom_source = "--headroom";
  } else if (!topology) {
    memory.headroom = 0.1;
    memory.headroom_source = "no topology: for the runtime";
  } else if (memory.runtime == Runtime::pytorch) {
    memory.headroom = 0.1;
    memory.headroom_source =
        "for the CUDA context, NCCL's and cuBLAS's buffers";
  } else if (gpu) {
    memory.headroom = k_jax_gpu_headroom;
    memory.headroom_source =
        "JAX preallocates 75% (XLA_PYTHON_CLIENT_MEM_FRACTION)";
  } else {
    memory.headroom = 0;
    memory.headroom_source =
        "the TPU's HBM is the runtime's limit; XLA plans the buffers when "
        "it compiles";
  }
}

}  // namespace shardplan::cli
