#!/usr/bin/env bash
# Runs clang-tidy (the checks in .clang-tidy, every one an error) over every
# .cpp file under src/, with the dev build's compile_commands.json, on
# JOBS cores. Prints only the findings; exits 1 when there is one.
# Usage: scripts/tidy.sh [-j JOBS] [BUILD_DIR]   (default build/dev)
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc 2>/dev/null || echo 2)
if [ "${1:-}" = "-j" ]; then
  jobs=$2
  shift 2
fi
build=${1:-build/dev}
if [ ! -f "$build/compile_commands.json" ]; then
  echo "tidy: $build/compile_commands.json is missing (configure the dev preset first)" >&2
  exit 2
fi
tidy=$(command -v clang-tidy || command -v clang-tidy-14 || true)
if [ -z "$tidy" ]; then
  echo "tidy: clang-tidy not found (scripts/install-deps.sh installs it)" >&2
  exit 2
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# GCC-only warning flags in the compile commands (-Wlogical-op) are unknown
# to clang: tell it to ignore them rather than report them.
git ls-files 'src/*.cpp' \
  | xargs -P "$jobs" -n 4 "$tidy" -p "$build" --quiet \
      --extra-arg=-Wno-unknown-warning-option >"$log" 2>/dev/null || true
if grep -q ': error: ' "$log"; then
  grep -A3 ': error: ' "$log" >&2
  echo "tidy: $(grep -c ': error: ' "$log") finding(s); see .clang-tidy" >&2
  exit 1
fi
echo "tidy: $(git ls-files 'src/*.cpp' | wc -l) files clean" >&2
