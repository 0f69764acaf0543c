#!/bin/sh
# Benchmarks the manifest reader and the rules engine against bare simdjson
# parses (docs/performance.md), times the reshard planner, then the manifest
# read (read_once) and `plan` end to end against parse_once (a whole process
# that loads the file and parses it once); what each measures is described at
# the top of bench_read.cpp, bench_rules.cpp, bench_reshard.cpp,
# read_once.cpp and parse_once.cpp. Last, `check` and `memory` with a specs
# file against `plan` on DeepSeek-V3 (issue 17: within 1.5x of plan).
# Builds nothing: `make bench` builds build/release first, then runs this.
#
#   BENCH_TENSORS=100000 BENCH_REPS=11 BENCH_RULES_TENSORS="10000 100000 1000000" bench/run.sh
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/build/release/bench"
for tool in gen_manifest bench_read bench_index bench_rules bench_reshard parse_once read_once; do
  if [ ! -x "$bin/$tool" ]; then
    echo "bench/run.sh: $bin/$tool is missing; run 'make bench'" >&2
    exit 1
  fi
done

n=${BENCH_TENSORS:-100000}
reps=${BENCH_REPS:-11}
tmp=${TMPDIR:-/tmp}
native="$tmp/shardplan-bench-$n.json"
header="$tmp/shardplan-bench-$n.safetensors.json"

"$bin/gen_manifest" "$n" --seed 0 -o "$native"
"$bin/gen_manifest" "$n" --seed 0 --form safetensors -o "$header"

echo "== native manifest, $n tensors (DeepSeek-like, seed 0)"
"$bin/bench_read" "$native" --reps "$reps"
echo
echo "== safetensors header, $n tensors"
"$bin/bench_read" "$header" --reps "$reps"
echo
echo "== safetensors index of 163 shards (DeepSeek-V3's layout)"
"$bin/bench_index" --shards 163 --reps 5
echo
echo "== rules engine, 20 rules (fsdp-tp style), DeepSeek-like manifests"
# One process per size: apply_rules leaves glibc's heap in a state that slows
# a later read_manifest (bench_rules.cpp says why).
for k in ${BENCH_RULES_TENSORS:-10000 100000 1000000}; do
  f="$tmp/shardplan-bench-$k.json"
  "$bin/gen_manifest" "$k" --seed 0 -o "$f"
  "$bin/bench_rules" "$f" --reps "$reps"
done
echo
echo "== reshard planner, fsdp -> fsdp-tp on v5p-128 (fsdp:16,tp:4), DeepSeek-like manifests"
for k in ${BENCH_RULES_TENSORS:-10000 100000 1000000}; do
  "$bin/bench_reshard" "$tmp/shardplan-bench-$k.json" --reps 5
done
echo
if [ ! -x /usr/bin/time ]; then
  echo "(whole-process timings skipped: /usr/bin/time is missing)"
  exit 0
fi
# Prints the median wall seconds (date's nanoseconds: /usr/bin/time's %e
# has 10 ms steps) and peak RSS (KiB) of 5 runs of "$@".
median_run() {
  i=0
  while [ $i -lt 5 ]; do
    start=$(date +%s%N)
    /usr/bin/time -f '%M' -o "$tmp/shardplan-bench-time" "$@" >/dev/null
    end=$(date +%s%N)
    echo "$(( (end - start) / 1000 )) $(cat "$tmp/shardplan-bench-time")"
    i=$((i + 1))
  done | sort -n | sed -n 3p | awk '{ printf "%.4f %s", $1 / 1e6, $2 }'
}
# "A B" (seconds) -> A / B to two places.
ratio() {
  echo "$1 $2" | awk '{ if ($2 > 0) printf "%.2f", $1 / $2; else print "n/a" }'
}
echo "== manifest read end to end against a bare DOM parse, $n tensors (whole"
echo "   processes, median of 5: read_once reads the file as the CLI does and"
echo "   builds the Manifest; parse_once loads it and parses it with simdjson)"
for file in "$native" "$header"; do
  base=$(median_run "$bin/parse_once" "$file")
  read=$(median_run "$bin/read_once" "$file")
  echo "$(basename "$file"): parse_once $base, read_once $read (s, KiB):" \
    "ratio $(ratio "${read%% *}" "${base%% *}") (target <= 2)"
done
echo
echo "== plan end to end against a bare DOM parse, $n tensors (whole processes,"
echo "   median of 5; docs/performance.md has the targets; peak RSS under 10x the file)"
shardplan="$root/build/release/shardplan"
echo "file: $(wc -c <"$native") bytes"
base=$(median_run "$bin/parse_once" "$native")
echo "parse_once:          $base (s, KiB)"
# The issue's command as a user runs it (text on stdout, here /dev/null),
# then each format written with -o (atomically: a temporary file, fsync,
# rename over the last run's output).
run=$(median_run "$shardplan" plan --devices 64 --mesh fsdp:16,tp:4 \
  --manifest "$native" --rules fsdp-tp)
echo "plan (text on stdout): $run (s, KiB): ratio $(ratio "${run%% *}" "${base%% *}")" \
  "(target <= 3)"
for format in json text; do
  run=$(median_run "$shardplan" plan --devices 64 --mesh fsdp:16,tp:4 \
    --manifest "$native" --rules fsdp-tp --format "$format" \
    -o "$tmp/shardplan-bench-plan.$format")
  echo "plan --format $format -o FILE: $run (s, KiB): ratio $(ratio "${run%% *}" "${base%% *}")" \
    "(target <= 3)"
done
echo
echo "== check and memory --specs against plan, --model deepseek-v3 on fsdp:64,tp:4"
echo "   (whole processes, median of 5; the specs are plan's own; target <= 1.5)"
set -- --devices 256 --mesh fsdp:64,tp:4 --model deepseek-v3
plan_json="$tmp/shardplan-bench-deepseek-plan.json"
specs_json="$tmp/shardplan-bench-deepseek.specs.json"
"$shardplan" plan "$@" --format json -o "$plan_json"
# The same specs as {"specs": {NAME: SPEC}}: plan's JSON writes a tensor a
# line, its spec before its rule (DeepSeek-V3's names need no escapes).
{
  echo '{"specs": {'
  sed -n 's/^ *{"name": \("[^"]*"\), .*, "spec": \(.*\), "rule": .*$/\1: \2/p' \
    "$plan_json" | sed '$!s/$/,/'
  echo '}}'
} >"$specs_json"
for file in "$specs_json" "$plan_json"; do
  if ! "$shardplan" check "$@" --specs "$file" >/dev/null; then
    echo "bench/run.sh: check --specs $file does not pass" >&2
    exit 1
  fi
done
plan=$(median_run "$shardplan" plan "$@")
echo "plan:                $plan (s, KiB)"
for file in "$specs_json" "$plan_json"; do
  case $file in
    "$specs_json") what='{"specs": ...}' ;;
    *) what="plan's JSON" ;;
  esac
  echo "specs file: $what, $(wc -c <"$file") bytes"
  for command in check memory; do
    run=$(median_run "$shardplan" "$command" "$@" --specs "$file")
    printf '%-20s %s (s, KiB): ratio %s\n' "$command --specs:" "$run" \
      "$(ratio "${run%% *}" "${plan%% *}")"
  done
done
echo
echo "== plan with a training workload (activations and the step's time)"
echo "   against plan without, --model deepseek-v3 on v5p-512 as fsdp:64,tp:4"
echo "   (whole processes, median of 5; docs/performance.md: a workload adds"
echo "   at most 20%, the step estimate under 10%: both per layer kind)"
set -- --topology v5p-512 --mesh fsdp:64,tp:4 --model deepseek-v3 --recipe adam
plain=$(median_run "$shardplan" plan "$@")
workload=$(median_run "$shardplan" plan "$@" --seq 4096 --batch 64 \
  --remat full)
echo "plan:                       $plain (s, KiB)"
echo "plan --seq 4096 --batch 64: $workload (s, KiB): ratio" \
  "$(ratio "${workload%% *}" "${plain%% *}") (target <= 1.2)"
echo
echo "== search: deepseek-v3 on 2xv5p-1024 over fsdp, ep, tp with three remat"
echo "   policies (whole process, median of 5; docs/performance.md: under 2 s)"
search=$(median_run "$shardplan" search --topology 2xv5p-1024 --model deepseek-v3 \
  --seq 4096 --per-device-batch 1 --remat full,minimal,save_qkv_proj)
echo "search:                       $search (s, KiB)"
search_split=$(median_run "$shardplan" search --topology 2xv5p-1024 \
  --model deepseek-v3 --seq 4096 --per-device-batch 1 \
  --remat full,minimal,save_qkv_proj --allow-split-physical-axes)
echo "search, split physical axes:  $search_split (s, KiB)"
search_one=$(median_run "$shardplan" search --topology 2xv5p-1024 \
  --model deepseek-v3 --seq 4096 --per-device-batch 1 --remat full \
  --allow-split-physical-axes)
echo "the same, one remat policy:   $search_one (s, KiB): three policies cost" \
  "$(ratio "${search_split%% *}" "${search_one%% *}")x of one (the model state is"
echo "   estimated once per mesh; target ~1)"
echo "   shared work (-v):"
"$shardplan" search --topology 2xv5p-1024 --model deepseek-v3 --seq 4096 \
  --per-device-batch 1 --remat full,minimal,save_qkv_proj \
  --allow-split-physical-axes -v 2>&1 >/dev/null |
  sed -n 's/.*search: \([0-9]* of\|the meshes walked\)/     \1/p'
echo
echo "== search time against tensors: DeepSeek-V3 with its 256 experts a layer"
echo "   (91,991 tensors) and with 32 (12,695), over fsdp, sp, tp (104 meshes,"
echo "   no expert axis: both fold into the same 1,414 tensor classes); the"
echo "   search's own time (-v), median of 5. Tensors x meshes would make the"
echo "   ratio ~7.2: names are read once per search (linear in tensors), and"
echo "   each mesh walks the classes, so it stays far below that."
few="$tmp/shardplan-bench-deepseek-32-experts.json"
sed 's/"n_routed_experts": 256/"n_routed_experts": 32/' \
  "$root/configs/models/deepseek-v3.json" >"$few"
# The median of 5 runs of the search's own time (ms) as -v prints it.
search_ms() {
  for _ in 1 2 3 4 5; do
    "$shardplan" search --topology 2xv5p-1024 --from-hf-config "$1" --seq 4096 \
      --per-device-batch 1 --remat full,minimal,save_qkv_proj \
      --allow-split-physical-axes --axes fsdp,sp,tp -v 2>&1 >/dev/null |
      sed -n 's/.*debug: search: \([0-9.]*\) ms.*/\1/p'
  done | sort -n | sed -n 3p
}
many_ms=$(search_ms "$root/configs/models/deepseek-v3.json")
few_ms=$(search_ms "$few")
echo "91,991 tensors: $many_ms ms; 12,695 tensors: $few_ms ms; ratio" \
  "$(ratio "$many_ms" "$few_ms")"
echo
echo "== plan --format html against plan's text, --model deepseek-v3 on"
echo "   v5p-512 as fsdp:64,tp:4 with a workload (whole processes, median of"
echo "   5; the page folds layers: ~92k tensors in a few dozen rows)"
set -- --topology v5p-512 --mesh fsdp:64,tp:4 --model deepseek-v3 --recipe adam \
  --seq 4096 --batch 64
text=$(median_run "$shardplan" plan "$@")
page="$tmp/shardplan-bench-deepseek.html"
html=$(median_run "$shardplan" plan "$@" --format html -o "$page")
echo "plan (text):          $text (s, KiB)"
echo "plan --format html:   $html (s, KiB): ratio" \
  "$(ratio "${html%% *}" "${text%% *}"), page $(wc -c <"$page") bytes"
