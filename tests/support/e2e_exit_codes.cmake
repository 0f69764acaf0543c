cmake_minimum_required(VERSION 3.25)
# Runs the real binary and checks exit codes (docs/cli.md, "Exit codes") and that
# stdout stays empty when input is bad in text mode (exit 1 still prints the
# result: the plan has errors, the input was read); json, github and
# markdown write the document of bad input.
# A sanitizer report (SANITIZER_REPORT, a regex) fails a run whatever its
# exit code: UBSan would otherwise exit 1, as a plan with errors does.
# cmake -DSHARDPLAN=<binary> -DDATA=<tests/data> -DEXAMPLES=<configs/examples>
#       -DSANITIZER_REPORT=<regex> -P e2e_exit_codes.cmake

set(_failures "")

function(expect_exit code)
  execute_process(COMMAND ${SHARDPLAN} ${ARGN}
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  string(REPLACE ";" " " _args "${ARGN}")
  set(_f "${_failures}")
  if(NOT _rc STREQUAL "${code}")
    string(APPEND _f "\n  shardplan ${_args}: exit ${_rc}, expected ${code}; stderr: ${_err}")
  endif()
  if(SANITIZER_REPORT AND "${_out}${_err}" MATCHES "${SANITIZER_REPORT}")
    string(APPEND _f "\n  shardplan ${_args}: a sanitizer report: ${_err}")
  endif()
  set(_documented FALSE)
  foreach(_format json github markdown)
    if(_format IN_LIST ARGN)
      set(_documented TRUE)
    endif()
  endforeach()
  if(code STREQUAL "2" AND NOT _documented AND NOT _out STREQUAL "")
    string(APPEND _f "\n  shardplan ${_args}: wrote to stdout on failure: ${_out}")
  endif()
  set(_failures "${_f}" PARENT_SCOPE)
endfunction()

expect_exit(0 --help)
expect_exit(0 --version)
expect_exit(0 mesh --help)
expect_exit(0 mesh --mesh dp:2,fsdp:-1,tp:4 --devices 64)
expect_exit(0 mesh --mesh dp:2,tp:4 --format json)
expect_exit(2)
expect_exit(2 nonsense)
expect_exit(2 mesh)
expect_exit(2 mesh --mesh dp:2,tp:x --devices 8)
expect_exit(2 mesh --mesh dp:2,tp:4 --devices 7)
expect_exit(2 mesh --mesh dp:2 --format yaml)
expect_exit(2 mesh --mesh dp:2,tp:x --format json)
# html: bad input writes nothing to stdout (checked below for exit 2).
expect_exit(0 mesh --mesh dp:2,tp:4 --devices 8 --format html)
expect_exit(2 mesh --mesh dp:2,tp:x --devices 8 --format html)
expect_exit(2 mesh --mesh dp:2,tp:4 --topology v5e-16 --format html)
expect_exit(2 manifest --manifest ${DATA}/does-not-exist.json)
expect_exit(2 manifest --manifest ${DATA})

set(_check check --mesh fsdp:2,tp:4 --manifest ${EXAMPLES}/tiny-llama.json)
expect_exit(0 ${_check} --topology v5e-8 --specs ${EXAMPLES}/tiny-llama.specs.json)
expect_exit(0 memory --mesh fsdp:2,tp:4 --manifest ${EXAMPLES}/tiny-llama.json
            --devices 8 --specs ${EXAMPLES}/tiny-llama.specs.json)
expect_exit(1 ${_check} --topology v5e-8 --specs ${DATA}/check/tiny-llama.bad-specs.json)
expect_exit(1 ${_check} --topology v5e-8 --specs ${DATA}/check/tiny-llama.bad-specs.json
            --format github)
expect_exit(1 ${_check} --devices 8 --hbm 1MB --recipe adam
            --specs ${EXAMPLES}/tiny-llama.specs.json)
expect_exit(1 ${_check} --topology v5e-16 --specs ${EXAMPLES}/tiny-llama.specs.json)
expect_exit(2 ${_check} --topology v5e-8 --specs ${DATA}/does-not-exist.json)
expect_exit(2 ${_check} --topology v5e-8 --specs ${EXAMPLES}/tiny-llama.specs.json --hbm 12XB)
expect_exit(2 ${_check} --topology v5e-8 --specs ${EXAMPLES}/tiny-llama.specs.json --hbm 0)
expect_exit(2 ${_check} --topology v5e-8 --specs ${DATA}/bad_inputs/specs/missing_comma.json
            --format github)
expect_exit(2 ${_check} --topology v5e-8 --specs ${DATA}/bad_inputs/specs/missing_comma.json
            --format markdown)
expect_exit(2 ${_check} --topology v5e-8 --specs ${EXAMPLES}/tiny-llama.specs.json --data-axes dq)
expect_exit(2 ${_check} --topology v5e-8 --specs ${EXAMPLES}/tiny-llama.specs.json --zero 4)
expect_exit(2 ${_check} --topology v5e-8 --specs ${EXAMPLES}/tiny-llama.specs.json --recipe sgd)
expect_exit(2 ${_check} --topology v5e-8 --devices 8 --specs ${EXAMPLES}/tiny-llama.specs.json)
expect_exit(2 ${_check} --topology v5e-8 --specs ${EXAMPLES}/tiny-llama.json)
# The training workload (docs/memory.md, "Activations"): fits, over capacity, and
# workload flags without an architecture or with an unknown remat policy.
expect_exit(0 plan --model llama-3-70b --topology v5p-256 --mesh fsdp:32,tp:4
            --recipe adam --seq 8192 --batch 128)
expect_exit(1 plan --model llama-3-70b --topology v5p-256 --mesh fsdp:32,tp:4
            --recipe adam --seq 8192 --batch 256)
expect_exit(2 ${_check} --topology v5e-8 --specs ${EXAMPLES}/tiny-llama.specs.json --seq 512
            --batch 8)
# search: some mesh fits (0), none does (1), bad input (2).
expect_exit(0 search --topology v5p-256 --model llama-3-70b --seq 8192 --batch 128)
expect_exit(1 search --topology v5p-8 --model llama-3-70b --seq 8192 --batch 4)
expect_exit(2 search --topology v5p-8 --model llama-3-8b --seq 1024 --batch 8 --remat ful)
# --maxtext-config (docs/maxtext.md): a config, a bad override, a YAML
# syntax error (the file is not YAML), a missing file, --mesh beside it.
set(_maxtext ${DATA}/maxtext/small.yml)
expect_exit(0 plan --topology v5p-128 --model llama-3-8b --maxtext-config ${_maxtext})
expect_exit(0 memory --topology 2xv5p-128 --model llama-3-8b --maxtext-config ${_maxtext} ici_tensor_parallelism=8 allow_split_physical_axes=true)
expect_exit(2 plan --topology v5p-128 --model llama-3-8b --maxtext-config ${_maxtext} ici_tensor_parallelism=3)
expect_exit(2 plan --topology v5p-128 --model llama-3-8b --maxtext-config ${_maxtext} dcn_fsdp_parallelism=2)
expect_exit(2 plan --topology v5p-128 --model llama-3-8b --maxtext-config ${_maxtext} "logical_axis_rules=[[a, b")
expect_exit(2 plan --topology v5p-128 --model llama-3-8b --maxtext-config ${DATA}/maxtext/does-not-exist.yml)
expect_exit(2 plan --topology v5p-128 --model llama-3-8b --maxtext-config ${_maxtext} --mesh fsdp:64)
expect_exit(2 plan --topology v5p-128 --model llama-3-8b --maxtext-config ${_maxtext} ici_tensor_parallelism=3 --format json)
expect_exit(2 memory --model gpt2 --devices 8 --mesh fsdp:8 --rules fsdp
            --seq 1024 --batch 8 --remat ful)

# Pipes (docs/cli.md, "Input files and their sizes"): a manifest through
# /dev/stdin is read; `yes` never ends, and is read one byte past a topology
# file's limit (1 MiB), then refused.
execute_process(COMMAND cat ${EXAMPLES}/tiny-llama.json
                COMMAND ${SHARDPLAN} manifest --manifest /dev/stdin
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc STREQUAL "0" OR NOT _out MATCHES "tensors")
  string(APPEND _failures "\n  cat | shardplan manifest --manifest /dev/stdin: exit ${_rc}; ${_err}")
endif()
execute_process(COMMAND yes COMMAND ${SHARDPLAN} topology show /dev/stdin
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc STREQUAL "2" OR NOT _out STREQUAL ""
   OR NOT _err MATCHES "/dev/stdin: error: the input has more than 1048576 bytes; a topology file may have at most 1 MiB")
  string(APPEND _failures "\n  yes | shardplan topology show /dev/stdin: exit ${_rc}, expected 2; stderr: ${_err}")
endif()
if(SANITIZER_REPORT AND "${_err}" MATCHES "${SANITIZER_REPORT}")
  string(APPEND _failures "\n  yes | shardplan topology show /dev/stdin: a sanitizer report: ${_err}")
endif()

if(_failures)
  message(FATAL_ERROR "exit-code checks failed:${_failures}")
endif()
message(STATUS "exit codes as documented")
