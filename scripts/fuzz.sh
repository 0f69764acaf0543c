#!/usr/bin/env bash
# Runs the libFuzzer targets of build/asan (the asan preset, clang) for a bounded
# time each, a few at a time, from seeds gathered from tests/data, configs/,
# the docs' examples and tests/fuzz/seeds/. `make fuzz` and `make test` call
# it after building the preset (docs/contributing.md, "Fuzzing").
#
#   scripts/fuzz.sh [-t SECONDS] [-j JOBS] [TARGET...]
#
# -t: seconds per target (default 60); -j: targets run at once (default 2).
# Prints one line per target (runs, coverage, corpus). Exits 1 if a target
# crashed, leaked, timed out or ran out of memory, printing its log's end,
# the input that did it and the command that replays it.
#
# Under build/asan/: corpus/TARGET/ keeps what each run found (the next run
# starts from it), seeds/TARGET/ is gathered anew each run, crashes/TARGET/
# holds failing inputs, logs/TARGET.log the last run's output.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/asan
seconds=60
jobs=2
while getopts "t:j:" opt; do
  case $opt in
    t) seconds=$OPTARG ;;
    j) jobs=$OPTARG ;;
    *) echo "usage: $0 [-t SECONDS] [-j JOBS] [TARGET...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if ! [[ $seconds =~ ^[0-9]+$ && $seconds -ge 1 && $jobs =~ ^[0-9]+$ && $jobs -ge 1 ]]; then
  echo "fuzz: -t and -j take whole numbers from 1" >&2
  exit 2
fi

# TARGET  dictionary  max_len  seed sources (below)
targets=(
  "fuzz_mesh          mesh.dict      1024"
  "fuzz_spec          spec.dict      1024"
  "fuzz_topology_name topology.dict  256"
  "fuzz_manifest      json.dict      32768"
  "fuzz_safetensors   json.dict      32768"
  "fuzz_index         json.dict      32768"
  "fuzz_specs         json.dict      32768"
  "fuzz_rules         json.dict      32768"
  "fuzz_topology      json.dict      32768"
  "fuzz_hf_config     json.dict      32768"
  "fuzz_maxtext_config yaml.dict     32768"
)

# Seed sources, relative to the source tree:
#   FILE or GLOB       the files themselves
#   cases:FILE         each case of a tests/data/*_errors.txt table (the text
#                      after its "# expect:" line; a mesh case's dcn= after a
#                      newline, as fuzz_mesh reads it)
#   flag:--NAME        each value given to --NAME in the `$ shardplan` lines
#                      of README.md and docs/*.md
seeds_of() {
  case $1 in
    fuzz_mesh)
      echo "tests/data/bad_inputs/mesh/* cases:tests/data/mesh_errors.txt"
      echo "flag:--mesh flag:--from-mesh flag:--to-mesh" ;;
    fuzz_spec)
      echo "cases:tests/data/spec_errors.txt"
      echo "flag:--spec flag:--from-spec flag:--to-spec" ;;
    fuzz_topology_name)
      echo "tests/data/bad_inputs/topology_name/*"
      echo "flag:--topology flag:--from-topology flag:--to-topology" ;;
    fuzz_manifest)
      echo "tests/data/bad_inputs/manifest/* tests/data/manifests/*.json"
      echo "configs/examples/tiny-llama.json cases:tests/data/manifest_errors.txt"
      echo "tests/data/bad_inputs/plan/*"
      echo "tests/fuzz/seeds/safetensors/* tests/fuzz/seeds/index/*" ;;
    fuzz_safetensors)
      echo "tests/fuzz/seeds/safetensors/* tests/data/bad_inputs/manifest/*"
      echo "cases:tests/data/manifest_errors.txt" ;;
    fuzz_index)
      echo "tests/fuzz/seeds/index/* tests/data/manifests/*.json" ;;
    fuzz_specs)
      echo "tests/data/bad_inputs/specs/* configs/examples/*.specs.json"
      echo "tests/data/check/* tests/data/invalid_specs/*"
      echo "cases:tests/data/specs_errors.txt" ;;
    fuzz_rules)
      echo "configs/rules/*.json tests/data/bad_rules/*.json" ;;
    fuzz_topology)
      echo "tests/fuzz/seeds/topology/* tests/data/bad_inputs/topology/*"
      echo "configs/topologies/*.json" ;;
    fuzz_hf_config)
      echo "configs/models/*.json" ;;
    fuzz_maxtext_config)
      echo "tests/fuzz/seeds/maxtext/* tests/data/maxtext/*.yml" ;;
    *) echo "fuzz: no seeds for $1" >&2; return 1 ;;
  esac
}

# Writes each case of a case table into $2 as case-N.
split_cases() {
  awk -v dir="$2" '
    function flush() {
      if (in_body) {
        n++
        file = dir "/case-" n
        printf "%s", body > file
        if (dcn != "") printf "\n%s", dcn > file
        close(file)
      }
      in_body = 0; body = ""; dcn = ""
    }
    /^# -----/ { flush(); next }
    /^# args:/ {
      for (i = 3; i <= NF; i++) if ($i ~ /^dcn=/) dcn = substr($i, 5)
      next
    }
    /^# expect:/ { in_body = 1; first = 1; next }
    in_body && /^# / { next }
    in_body { body = first ? $0 : body "\n" $0; first = 0 }
    END { flush() }
  ' "$1"
}

# Writes the values of flag $1 in the docs' `$ shardplan` lines into $2.
flag_values() {
  local flag=$1 dir=$2 n=0 line word take
  while IFS= read -r line; do
    take=0
    # xargs splits as a shell does, quotes included; a line it cannot split
    # gives no seeds.
    while IFS= read -r word; do
      if [ $take = 1 ]; then
        n=$((n + 1))
        printf '%s' "$word" > "$dir/${flag#--}-$n"
        take=0
      elif [ "$word" = "$flag" ]; then
        take=1
      elif [[ $word == "$flag="* ]]; then
        n=$((n + 1))
        printf '%s' "${word#"$flag="}" > "$dir/${flag#--}-$n"
      fi
    done < <(printf '%s\n' "${line#\$ }" | xargs -n1 printf '%s\n' 2>/dev/null || true)
  done < <(grep -h '^\$ shardplan ' "$root/README.md" "$root"/docs/*.md)
}

gather_seeds() {
  local target=$1 dir=$build/seeds/$1 source n=0 file
  rm -rf "$dir"
  mkdir -p "$dir"
  local -a sources
  set -f  # the globs are expanded below, from the source tree
  sources=($(seeds_of "$target"))
  set +f
  for source in "${sources[@]}"; do
    case $source in
      cases:*) mkdir -p "$dir/${source##*/}"
               split_cases "$root/${source#cases:}" "$dir/${source##*/}" ;;
      flag:*) flag_values "${source#flag:}" "$dir" ;;
      *) for file in "$root"/$source; do
           [ -f "$file" ] || continue
           n=$((n + 1))
           cp "$file" "$dir/file-$n-${file##*/}"
         done ;;
    esac
  done
  if [ -z "$(find "$dir" -type f -print -quit)" ]; then
    echo "fuzz: no seeds for $target (scripts/fuzz.sh, seeds_of)" >&2
    return 1
  fi
}

# Runs one target; its summary line goes to logs/TARGET.summary.
run_target() {
  local target=$1 dict=$2 max_len=$3 binary=$build/tests/fuzz/$1
  local log=$build/logs/$target.log corpus=$build/corpus/$target
  local crashes=$build/crashes/$target/ status=0
  mkdir -p "$corpus" "$crashes"
  gather_seeds "$target"
  # -timeout: one input taking 20 s under the sanitizers is a hang.
  # -rss_limit_mb: 2 GiB, libFuzzer's default, written down.
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ASAN_OPTIONS=detect_leaks=1 \
    "$binary" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
      -max_len="$max_len" -dict="$root/tests/fuzz/$dict" \
      -artifact_prefix="$crashes" -print_final_stats=1 \
      "$corpus" "$build/seeds/$target" > "$log" 2>&1 || status=$?
  local done_line runs cov ft corp
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  runs=$(grep -oE '^stat::number_of_executed_units: [0-9]+' "$log" | awk '{print $2}' || true)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<< "$done_line")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<< "$done_line")
  corp=$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<< "$done_line")
  if [ $status = 0 ]; then
    printf '%-20s ok    %4s s  %10s runs  cov %5s  ft %6s  corpus %5s\n' \
      "$target" "$seconds" "${runs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" \
      > "$build/logs/$target.summary"
    return 0
  fi
  local unit
  unit=$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "$log" | tail -1)
  {
    printf '%-20s FAIL  exit %s; the log: %s\n' "$target" "$status" "$log"
    grep -E '^==[0-9]+==ERROR|^SUMMARY|^fuzz: broken promise|runtime error|ALARM|out-of-memory' "$log" | head -5 || true
    tail -n 40 "$log" | sed 's/^/  | /'
    if [ -n "$unit" ]; then
      printf 'input:  %s\nreplay: %s %s\n' "$unit" "$binary" "$unit"
      printf 'minimise it (%s -minimize_crash=1 -runs=10000 %s), add it to tests/data/bad_inputs/, fix the bug\n' \
        "$binary" "$unit"
    fi
  } > "$build/logs/$target.summary"
  return 1
}

if [ $# -gt 0 ]; then
  selected=("$@")
else
  selected=()
  for row in "${targets[@]}"; do
    read -r name _ <<< "$row"
    selected+=("$name")
  done
fi

mkdir -p "$build/logs"
failed=0
running=0
for target in "${selected[@]}"; do
  row=""
  for r in "${targets[@]}"; do
    read -r name _ <<< "$r"
    [ "$name" = "$target" ] && row=$r
  done
  if [ -z "$row" ]; then
    echo "fuzz: unknown target $target" >&2
    exit 2
  fi
  if [ ! -x "$build/tests/fuzz/$target" ]; then
    echo "fuzz: $build/tests/fuzz/$target is not built: cmake --preset asan && cmake --build --preset fuzz" >&2
    exit 2
  fi
  read -r name dict max_len <<< "$row"
  rm -f "$build/logs/$target.summary"
  run_target "$name" "$dict" "$max_len" &
  running=$((running + 1))
  if [ $running -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
done
while [ $running -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done

for target in "${selected[@]}"; do
  cat "$build/logs/$target.summary" 2>/dev/null \
    || { echo "$target: no summary (the runner itself failed)"; failed=1; }
done
exit $failed
