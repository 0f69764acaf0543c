#pragma once

// Layer 7: readers of input files and the atomic writer of outputs. Only io
// and cli touch the filesystem.
//
// Every reader takes the file's text and its name (for diagnostics), so tests
// need no files. Problems are reported as `file:/json/pointer: error: ...` for
// values, or `file:line:column: error: ...` with an excerpt and caret for JSON
// syntax errors. Every reader reports the faults of JSON itself with the same
// codes and words (src/io/json.hpp; the table is in docs/cli.md, "Error
// codes"): json.syntax (not JSON), json.duplicate-key, json.type (a value of
// the wrong JSON type: "expected ..., got ..."), json.unknown-key,
// json.missing-key; faults of a value's meaning carry the file kind's code
// (manifest.bad-dim, rules.bad-value, ...).
//
// What it offers, by the file that implements it (the readers share
// src/io/json.hpp, the located-JSON toolkit: io/json.cpp, json_input.cpp,
// json_dom.cpp; and src/io/files.hpp: io/files.cpp, mapped.cpp):
//   io/files.cpp
//     InputKind, InputLimit, input_limit   each input kind's size limit
//     read_file, write_file_atomic, AtomicFile
//   io/manifest.cpp
//     read_manifest, dtype_hint   the native and safetensors-header forms
//   io/safetensors.cpp (with io/index.cpp)
//     read_safetensors_header, read_safetensors_file,
//     read_safetensors_index, read_manifest_path   any manifest file
//   io/hf_config.cpp
//     read_hf_config, tensors_from_hf_config   Hugging Face config.json
//     builtin_models, builtin_model_config, tensors_for_builtin_model,
//     manifest_from_model, read_builtin_model   configs/models/
//   io/topology_file.cpp
//     read_topology_file
//   io/specs.cpp
//     read_specs, read_specs_path
//   io/rules_file.cpp
//     read_rules, RulePreset, rule_presets, read_rules_preset
//   io/maxtext_config.cpp
//     MaxTextConfig, read_maxtext_config, read_maxtext_config_text
//     MaxTextAxis, maxtext_key_stem   the ici_/dcn_ keys of each axis
//     maxtext_location         where a value was set, for other layers
//     MaxTextMesh, maxtext_mesh   the mesh MaxText would build

#include <shardplan/diag.hpp>
#include <shardplan/models.hpp>
#include <shardplan/rules.hpp>
#include <shardplan/spec.hpp>
#include <shardplan/tensor.hpp>
#include <shardplan/topology.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// What an input file is, for the size it may have. Every file a command
// reads is one of these, and read as one (docs/cli.md, "Input files and
// their sizes").
enum class InputKind {
  manifest,        // --manifest JSON: native, a safetensors header, an index
  specs,           // --specs, --from-specs, --to-specs (a plan's JSON is one)
  rules,           // --rules FILE, --from-rules FILE, --to-rules FILE
  topology,        // --topology FILE, topology show FILE
  hf_config,       // --from-hf-config: a Hugging Face config.json
  maxtext_config,  // --maxtext-config: a MaxText YAML config (and its
                   // base_config files)
};

// The most bytes an input of one kind may have, and its name in messages.
struct InputLimit {
  std::string_view what;  // "manifest", "specs file", ...
  uint64_t max_bytes = 0;
};

// The limit of `kind`, each derived from the largest real input of its kind
// (docs/cli.md):
//   manifest, specs  1 GiB: DeepSeek-V3, the largest model in the catalogue
//                    (91,991 tensors), has a 12 MB native manifest, a 9 MB
//                    safetensors index and a 30 MB plan (a specs file); a
//                    generated manifest of 1,000,000 tensors has 108 MB
//   rules            64 MiB: one rule per tensor of DeepSeek-V3 is about
//                    10 MB; the presets are under 9 KB
//   topology         1 MiB: a topology file is one object of a few dozen
//                    keys (under 2 KB in configs/topologies/)
//   hf_config        16 MiB: a config.json is a few KB (DeepSeek-V3's is
//                    1.7 KB); some carry label maps or module lists
//   maxtext_config   4 MiB: MaxText's base.yml, the largest config it
//                    ships, is 58 KB
// A safetensors file is read only up to its header, which the format caps
// at 100,000,000 bytes (k_safetensors_max_header_bytes).
InputLimit input_limit(InputKind kind);

// Reads a whole file of kind `kind`. A missing or unreadable file is an error
// naming `path` and the system's reason [io.read]. A file over the kind's
// limit is refused [io.too-large]: a regular file from its size, before
// anything is read; anything else (a pipe, /dev/stdin, /dev/zero, a /proc
// file) after reading one byte past the limit, never more.
std::optional<std::string> read_file(const std::string& path,
                                     InputKind kind,
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

// Reads a manifest given as JSON text, in either form
// (docs/manifest-format.md):
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
// header. A shard path that is absolute or leads out of the index's folder
// ("../x.safetensors"; Hugging Face's loaders read only inside the
// checkpoint) is an error at the index's /weight_map/NAME [index.shard],
// found before any shard is opened; so are a shard that cannot be read and
// a tensor missing from its shard. Tensors a shard holds but the
// index does not map, and a total_size other than the tensors' bytes, are
// warnings.
std::optional<Manifest> read_safetensors_index(std::string_view json,
                                               const std::string& path,
                                               Diagnostics& diags);

// What --manifest accepts: a folder (its model.safetensors.index.json, else
// its model.safetensors), a file ending in ".safetensors", or a JSON file: a
// manifest in either form of read_manifest, or a safetensors index, read
// within the limit of InputKind::manifest.
std::optional<Manifest> read_manifest_path(const std::string& path,
                                           Diagnostics& diags);

// ---------------------------------------------------------------------------
// Hugging Face configs and the built-in models (docs/models.md).

// Reads a Hugging Face config.json: the architecture (the first entry of
// "architectures"), the dtype ("torch_dtype"; bfloat16 when absent, float32
// for GPT2LMHeadModel, whose checkpoints predate the key), a block-wise FP8
// "quantization_config" (quant_method "fp8", "weight_block_size" [bo, bi]),
// and the dims each architecture's configuration class has, with its
// defaults. Stops at the first problem, located at `source` with a JSON
// pointer: the json.* codes (a required key missing or null is
// json.missing-key), an architecture not in supported_architectures()
// [model.unknown-architecture; the message lists the supported ones, the
// hint names one only when misspelt_architecture finds it], an unknown
// torch_dtype
// [model.unknown-dtype], a quantization_config other than block-wise fp8
// [model.unsupported-quantization], a value out of range [model.bad-value].
std::optional<ModelConfig> read_hf_config(std::string_view json,
                                          std::string_view source,
                                          Diagnostics& diags);

// read_hf_config, then checkpoint_tensors (models.hpp).
std::optional<std::vector<ModelTensor>> tensors_from_hf_config(
    std::string_view json, std::string_view source, Diagnostics& diags);

// Every built-in model (configs/models/<name>.json), in name order.
std::vector<BuiltinModel> builtin_models();

// The config.json text of built-in model `name`; nullopt when unknown.
std::optional<std::string_view> builtin_model_config(std::string_view name);

// The tensors of built-in model `name`. An unknown name is reported at
// `source` (the caller's name for the input, e.g. "--model") with the
// nearest name as a hint [model.unknown-model].
std::optional<std::vector<ModelTensor>> tensors_for_builtin_model(
    std::string_view name, std::string_view source, Diagnostics& diags);

// A manifest of generated tensors (a Hugging Face config.json or a built-in
// model), named `source` in diagnostics.
std::optional<Manifest> manifest_from_model(
    const std::vector<ModelTensor>& tensors,
    std::string_view source,
    Diagnostics& diags);

// The built-in model's manifest, with "SOURCE NAME" (e.g. "--model
// llama-3-8b") as its source; an unknown name is reported at `source` with
// the nearest name.
std::optional<Manifest> read_builtin_model(std::string_view name,
                                           std::string_view source,
                                           Diagnostics& diags);

// A user topology file (JSON, the schema of `shardplan topology show
// --format json`; docs/topologies.md), the topology object alone or the whole
// document ({"topology": {...}}). Keys it omits come from its chip's
// catalogue family. Errors carry `source` and a JSON pointer: the json.*
// codes, and topology.bad-value for a value the schema refuses (an unknown
// chip, counts that do not add up).
std::optional<Topology> read_topology_file(std::string_view text,
                                           std::string_view source,
                                           Diagnostics& diags);

// Reads a specs file: {"specs": {"NAME": SPEC, ...}} or the JSON written by
// `plan` ({"tensors": [{"name": ..., "spec": SPEC}, ...]}). A SPEC is a JSON
// array (null | "axis" | ["a", "b"] per dim) or a string in any text form of
// parse_spec ("P('fsdp', None)").
// A problem with the file (not JSON, wrong layout, a repeated name) stops the
// reader: nullopt. A problem inside one spec (a text spec that does not
// parse, a value that is no spec, an empty axis, a nested tuple) is reported
// with the tensor's name and reading goes on, so that every bad spec of the
// file is reported in one run; the reader then returns nullopt, unless every
// such problem is a nested tuple (a JAX error of a well-formed spec): those
// entries are kept with `valid == false` for a checker to report with the
// rest.
std::optional<SpecsFile> read_specs(std::string_view json,
                                    std::string_view source,
                                    Diagnostics& diags);

// read_specs of the file at `path` (named `path` in diagnostics), read in
// place as read_manifest_path reads a manifest: a regular file is mapped,
// not copied; within the limit of InputKind::specs.
std::optional<SpecsFile> read_specs_path(const std::string& path,
                                         Diagnostics& diags);

// ---------------------------------------------------------------------------
// Rules files (the format, key by key, is in docs/rules.md).
//
//   {"rules": [{"pattern": "mlp", "fsdp": {"axis": "fsdp"}}, ...],
//    "logical_axis_rules": [["embed", "fsdp"], ["mlp", ["tp"]]],
//    "min_size": 0, "unmatched": "error"}
//
// Problems stop the reader at the first error, located as
//   rules.json:3:17: error: ...     JSON syntax (an excerpt and a caret)
//   rules.json:/rules/3/pattern: error: ...   a value, by JSON pointer
// Besides the json.* codes of every reader:
//   rules.missing-yield    a rule that yields nothing
//   rules.two-yields       a rule with two yields
//   rules.bad-value        out of range, empty names, an unknown word
//   rules.bad-pattern      RE2 cannot compile the pattern (RE2's message)
//   rules.duplicate-axis   an axis twice in one spec, tuple or axis list
//   rules.duplicate-logical-axis   a logical name twice in one list
// Warnings (reading goes on):
//   rules.unknown-logical-axis     a name no logical_axis_rules entry has
//   rules.useless-fallthrough      fallthrough on a rule that always
//                                  replicates
// Axes are not checked against a mesh here: apply_rules does that.

// Reads a rules file given as JSON text; `source` names it in diagnostics
// and becomes RuleSet::source. The result is a user's RuleSet (preset ==
// false); a caller reading a built-in preset sets `preset` itself.
std::optional<RuleSet> read_rules(std::string_view json,
                                  std::string_view source,
                                  Diagnostics& diags);

// A built-in preset (configs/rules/NAME.json, compiled in).
struct RulePreset {
  std::string name;         // "fsdp-tp"
  std::string description;  // the file's "description"
  size_t rules = 0;         // how many rules it has
};

// The built-in presets, in name order.
std::vector<RulePreset> rule_presets();

// The preset `name`, as a RuleSet with preset == true, that name, and
// source "configs/rules/NAME.json". An unknown name is an error at `where` (the
// caller's name for the input, e.g. "--rules") that lists the presets, with
// the nearest as hint [rules.unknown-preset].
std::optional<RuleSet> read_rules_preset(std::string_view name,
                                         const Location& where,
                                         Diagnostics& diags);

// ---------------------------------------------------------------------------
// MaxText configs (docs/maxtext.md): the mesh, logical_axis_rules and the
// workload of a base.yml-style YAML file, with MaxText's command-line
// overrides (KEY=VALUE, the VALUE read as YAML).

// A value of a MaxText config is a Sourced<T> (diag.hpp) whose `at` is
// where it was set: a file's line and column (with an excerpt and caret),
// or the override on the command line (source "--maxtext-config", the
// override as the excerpt). `at` is empty when no file or override sets the
// key and MaxText's default applies.

// One mesh axis of a MaxText config, in mesh_axes order.
// MaxText's mesh axes in base.yml's mesh_axes order (AI-Hypercomputer/
// maxtext at e591f30c, the snapshot configs/rules/maxtext.json copies
// its logical_axis_rules from): diloco, data, stage, fsdp, ...,
// autoregressive.
const std::vector<std::string>& maxtext_mesh_axes();
// The fields of MaxText's config, name -> type as types.py annotates it
// (configs/maxtext/fields.json, written by scripts/maxtext_fields.py from
// types.py at maxtext_fields_commit()): the keys pyconfig accepts.
const std::map<std::string, std::string, std::less<>>& maxtext_fields();
std::string_view maxtext_fields_commit();
// pyconfig's _merge_logical_axis_rules: every rule of `rules` whose name
// `updates` has is dropped, then `updates` are appended in order.
void merge_logical_axis_rules(std::vector<LogicalAxisRule>& rules,
                              const std::vector<LogicalAxisRule>& updates);
// The stem of an axis's ici_*/dcn_* keys: the axis, but "pipeline" for
// "stage" (ici_pipeline_parallelism).
std::string maxtext_key_stem(std::string_view axis);

struct MaxTextAxis {
  std::string name;      // the mesh axis: "data", "stage", "fsdp", ...
  std::string key;       // its keys' stem: "data", "pipeline", "fsdp"
  Sourced<int64_t> ici;  // ici_<key>_parallelism: >= 1, or -1 (fill)
  Sourced<int64_t> dcn;  // dcn_<key>_parallelism: >= 1, or -1 (fill)
};

// The model a MaxText config describes (docs/maxtext.md, "The model"), as
// MaxText's pyconfig builds it: base.yml's dims, over them
// models/<model_name>.yml (beside the config, else in its folder's parent's
// models/), over those the overrides; then global_parameter_scale, a power
// of two 2^k with k = 3b + r, scales the dims as types.py's
// get_individual_scales does: heads, kv heads and both MLP widths by
// 2^(b + (r > 0)), base_emb_dim by 2^(b + (r > 1)), the layers by 2^b.
// `config` is the Hugging Face config.json of the same
// tensors: decoder_block llama2 -> LlamaForCausalLM, mistral ->
// MistralForCausalLM, mixtral -> MixtralForCausalLM, deepseek ->
// DeepseekV3ForCausalLM, gemma -> GemmaForCausalLM, gemma2 ->
// Gemma2ForCausalLM (MaxText's layer is a local and a global layer: two).
struct MaxTextModel {
  std::string name;  // model_name; "default" when only dims are set
  Location at;       // model_name's key, or the config for base.yml's dims
  std::string file;  // the models/ file read; "" for none
  // With model_name and no models/ file: the built-in model (configs/models/)
  // of the same tensors, or "" when none stands in; `config` is then unset
  // unless `builtin` names one.
  std::string builtin;
  std::optional<ModelConfig> config;
  // Why there is no config (an unsupported decoder_block, a model_name with
  // no file and no built-in), for the error when nothing else gives the
  // architecture.
  std::string missing;
};

// MaxText's model_name for built-in model `builtin` (configs/models/):
// the first of MaxText's models/*.yml with its tensors ("llama-3-8b" ->
// "llama3-8b"); "" for none.
std::string maxtext_model_name(std::string_view builtin);

// What shardplan reads of a MaxText config. Keys neither the files nor the
// overrides set keep MaxText's defaults of base.yml: every ici_* 1 but
// ici_fsdp_parallelism -1, every dcn_* 1 but dcn_data_parallelism -1,
// num_slices -1 (the topology's), allow_split_physical_axes false, and
// base.yml's mesh_axes. The workload keys have no default here: unset, they
// are not given (the command line's flags or nothing).
struct MaxTextConfig {
  std::string source;             // the file, as given
  std::vector<MaxTextAxis> axes;  // mesh_axes' order, one per name
  Location mesh_axes_at;          // empty: base.yml's mesh_axes
  Sourced<int64_t> num_slices{-1, {}};
  Sourced<bool> allow_split_physical_axes;
  bool explicit_axes = false;  // shard_mode: explicit
  // logical_axis_rules, when set: each entry's pointer is
  // "/logical_axis_rules/N", its axes' "/logical_axis_rules/N/1/M".
  std::optional<std::vector<LogicalAxisRule>> logical_axis_rules;
  Location logical_axis_rules_at;
  // Without logical_axis_rules in the files: the rules that
  // models/<model_name>.yml and the overrides give, to merge into base.yml's
  // (merge_logical_axis_rules).
  std::vector<LogicalAxisRule> logical_axis_rule_updates;
  Location logical_axis_rule_updates_at;
  // The workload keys, when set. per_device_batch_size as written ("12.0",
  // "0.5"); weight_dtype as a DType (MaxText's names: float32, bfloat16).
  std::optional<Sourced<std::string>> per_device_batch_size;
  std::optional<Sourced<int64_t>> max_target_length;
  std::optional<Sourced<std::string>> remat_policy;
  // The custom policy's keys set (decoder_layer_input: 'offload', ...;
  // custom_remat_names), each 'remat', 'device' or 'offload', in the
  // config's order.
  std::vector<std::pair<std::string, Sourced<std::string>>> remat_names;
  std::optional<Sourced<DType>> weight_dtype;
  // The optimizer: opt_type (MaxText's OptimizerType: adamw, the default,
  // adam_pax, sgd; muon) and mu_dtype, Adam's first moment's dtype (base.yml
  // "": the weights'), when set.
  std::optional<Sourced<std::string>> opt_type;
  std::optional<Sourced<DType>> mu_dtype;
  // context_parallel_strategy (base.yml: "all_gather"; "ring", "ulysses"),
  // when set.
  std::optional<Sourced<std::string>> context_parallel_strategy;
  // num_vocab_tiling (base.yml: 1), when set above 1.
  std::optional<Sourced<int64_t>> num_vocab_tiling;
  // Routed experts (base.yml): capacity_factor (-1.0: dropless), which
  // MaxText's dense_matmul path applies; sparse_matmul (true: the grouped
  // matmul, whose tokens cross expert axes by ragged_all_to_all into a
  // buffer of ragged_buffer_factor x the balanced share, -1.0: the worst
  // case); each when set.
  std::optional<Sourced<double>> capacity_factor;
  std::optional<Sourced<bool>> sparse_matmul;
  std::optional<Sourced<double>> ragged_buffer_factor;
  // The kernels' tiles (docs/step.md, "Kernel tiles"), base.yml's values
  // unless set: splash attention's sa_block_q, sa_block_kv, sa_block_q_dkv,
  // sa_block_kv_dkv, sa_block_q_dq, sa_block_kv_dq (512 each) and
  // sa_use_fused_bwd_kernel (false); the grouped matmul's
  // use_tokamax_gmm and use_gmm_v2 (false) and its row tiles,
  // wi_tile_{fwd,dlhs,drhs}_batch_seq then wo_tile_..._batch_seq (512
  // each). `splash_at`, `gmm_at`: the first of each's keys set.
  std::array<int64_t, 6> splash_blocks{512, 512, 512, 512, 512, 512};
  bool splash_fused_backward = false;
  bool tokamax_gmm = false;
  bool gmm_v2 = false;
  std::array<int64_t, 6> gmm_tile_rows{512, 512, 512, 512, 512, 512};
  std::optional<Location> splash_at;
  std::optional<Location> gmm_at;
  // optimizer_memory_host_offload and parameter_memory_host_offload
  // (base.yml: false), when set true.
  std::optional<Location> optimizer_host_offload;
  std::optional<Location> parameter_host_offload;
  // Microbatches: gradient_accumulation_steps (the global batch is then
  // per_device_batch_size x devices x steps, pyconfig's
  // global_batch_size_to_train_on) and num_pipeline_microbatches (a
  // pipeline splits per_device_batch_size x devices), when set above 1.
  std::optional<Sourced<int64_t>> gradient_accumulation_steps;
  std::optional<Sourced<int64_t>> num_pipeline_microbatches;
  // mtp_num_layers: the multi-token-prediction modules trained (base.yml:
  // 0, none).
  std::optional<Sourced<int64_t>> mtp_num_layers;
  // dtype, the activations' and the matmuls' (base.yml: bfloat16), when
  // set.
  std::optional<Sourced<DType>> dtype;
  // shard_optimizer_over_data (ZeRO-1 over the data axis), when true.
  std::optional<Location> shard_optimizer_over_data;
  // quantization, when it runs the matmuls in FP8 (fp8, fp8_full, fp8_gpu,
  // fp8_e4m3, fp8_e5m2, nanoo_fp8, fp8_nanoo, te_fp8_*, te_mxfp8): where it
  // is set.
  std::optional<Location> fp8_quantization;
  // Keys shardplan does not read, in file order (noted, never an error).
  std::vector<std::string> ignored_keys;
  // The model, when the config names one (model_name) or sets a model key
  // (base_emb_dim, decoder_block, ...; base.yml sets them all).
  std::optional<MaxTextModel> model;
};

// Where a MaxText value was set, as the diagnostics of other layers (the
// workload, the memory estimate) locate it: the key in its file (line,
// column and excerpt); an override by the flag and the override,
// Location::of("--maxtext-config max_target_length=8192"), as a flag's
// argument is named ("--topology v5p-128"); "--maxtext-config" for a default.
Location maxtext_location(const Location& at);

// Reads the MaxText config at `path` and applies `overrides` (KEY=VALUE,
// later ones win, each over every file). A `base_config` key names a file
// (relative to the naming file's folder) read first, as MaxText's pyconfig
// does; one that cannot be found is noted (info) and base.yml's defaults
// stand in. Stops at the first error, located at file:line:column or at the
// override [maxtext.*]:
//   maxtext.syntax      not YAML, or not a mapping of keys (yaml-cpp's
//                       message and position)
//   maxtext.bad-value   a value of the wrong kind or out of range, e.g.
//                       "ici_fsdp_parallelism must be an integer >= 1 or -1,
//                       got \"x\""
//   maxtext.override    an override that is not KEY=VALUE, or one of a key
//                       models/<model_name>.yml sets, to another value
//                       (pyconfig's "Keys [...] are overridden by both model
//                       config and CLI/kwargs with different values"),
//                       unless override_model_config is true
//   maxtext.base-config a base_config chain too deep or circular
//   maxtext.unknown-key a key that is not a field of MaxText's config
//                       (maxtext_fields), in a file or an override
// Keys shardplan cannot model but that change memory or time are each a
// warning saying what they change [maxtext.unmodelled]: quantization,
// scan_layers false, custom_mesh, custom_mesh_and_rule, megablox false, and
// the custom remat names it does not place (kv_proj, query_wa_proj,
// kv_wa_proj, attention_out, indexer_cutoff_threshold) set to device or
// offload.
// Unknown keys are one info note [maxtext.ignored-keys]: the count and the
// first few. Files are read within InputKind::maxtext_config's limit.
std::optional<MaxTextConfig> read_maxtext_config(
    const std::string& path,
    const std::vector<std::string>& overrides,
    Diagnostics& diags);

// read_maxtext_config of the text `yaml` of a file named `source`, without
// base_config (noted as not followed when set): for tests and the fuzzer.
std::optional<MaxTextConfig> read_maxtext_config_text(
    std::string_view yaml,
    const std::string& source,
    const std::vector<std::string>& overrides,
    Diagnostics& diags);

// The mesh a MaxText config builds on `devices` devices.
struct MaxTextMesh {
  std::string mesh;  // "data:2,fsdp:16,tensor:4": global sizes (ici x dcn)
  std::string dcn;   // "data:2"; "" on one slice
  int64_t num_slices = 1;
  bool allow_split_physical_axes = false;
  std::vector<MaxTextAxis> axes;  // every axis, -1 filled (ici and dcn)
};

// MaxText's mesh (maxtext_utils.create_device_mesh) for `devices` devices in
// `topology_slices` slices (a topology's; nullopt for a bare device count,
// when num_slices, or 1, gives the slices). num_slices -1 takes the slice
// count. ICI values are filled against the devices per slice and, on more
// than one slice, DCN values against the slices, as MaxText's
// fill_unspecified_mesh_axes does, with its messages (without their final
// period) [maxtext.mesh]:
//   "Found unspecified values (-1) for more than one ICI parallelism axis.
//    At most one axis can be unspecified"
//   "Unspecified value unable to be determined with the given ICI
//    parallelism values" (the others do not divide the devices)
//   "Number of devices per slice 64 does not match the product of the ICI
//    parallelism 32" (no -1)
// (DCN: "slices"). On one slice a DCN value above 1 is "DCN parallelism
// requested but only one slice available" [maxtext.dcn]; a num_slices other
// than the topology's, or one that does not divide the devices, is
// maxtext.bad-value. Errors are located at the key that decides them.
// The mesh string lists mesh_axes in order, without axes of size 1 (at least
// one axis stays: the ICI -1 axis, else the first); with shard_mode
// explicit each axis is ":explicit". Example: ici_fsdp_parallelism -1,
// ici_tensor_parallelism 4 on 64 devices gives "fsdp:16,tensor:4".
std::optional<MaxTextMesh> maxtext_mesh(const MaxTextConfig& config,
                                        int64_t devices,
                                        std::optional<int64_t> topology_slices,
                                        Diagnostics& diags);

}  // namespace shardplan
