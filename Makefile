# The two commands README.md promises, plus the inner loop.
#   make demo   install missing packages, build, run shardplan on built-in defaults
#   make test   install missing packages, build (warnings are errors), run every
#               test in the dev build, clang-tidy over src/, every test again
#               under ASan+UBSan, run each libFuzzer target for 20 s, and
#               build the release binary make demo runs
#   make fuzz   build the libFuzzer targets (clang) and run each for
#               FUZZ_SECONDS (default 60)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 60
# Fuzz targets run at once, each on one core for FUZZ_SECONDS.
FUZZ_JOBS ?= $(JOBS)

.PHONY: all deps build demo test test-dev test-asan test-fuzz fuzz bench format check-format tidy clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

# The main job on built-in defaults: a built-in model (Llama 3 8B), topology
# (a v5p-128 slice) and rule preset (fsdp-tp), with Adam's training state.
demo: build
	@echo '$$ shardplan plan --topology v5p-128 --mesh fsdp:-1,tp:4 --model llama-3-8b --rules fsdp-tp --recipe adam --seq 8192 --batch 64' >&2
	@build/release/shardplan plan --topology v5p-128 --mesh fsdp:-1,tp:4 --model llama-3-8b --rules fsdp-tp --recipe adam --seq 8192 --batch 64

# The release build too: `make demo` uses it, and GCC's -O3 warns where -O0
# does not. Every fuzz target runs 20 s so that none of them rots; the
# sanitizer build (clang) holds them beside the tests, one build for both.
# The whole run stays under CI's 30 minutes on 2 cores: the sanitizer pass
# leaves out the browser test, which drives the same HTML the dev pass
# checks in chromium.
test: deps test-dev tidy test-asan test-fuzz build

test-dev: deps
	@cmake --preset dev >/dev/null
	@cmake --build --preset dev -j $(JOBS)
	@ctest --preset dev -j $(JOBS)

test-asan: deps
	@cmake --preset asan >/dev/null
	@cmake --build --preset asan -j $(JOBS)
	@ctest --preset asan -j $(JOBS) -E '^browser\.'

# clang-tidy over src/ with .clang-tidy's checks (a function over 200 lines
# among them), on the dev build's compile commands.
tidy: deps
	@cmake --preset dev >/dev/null
	@cmake --build --preset dev -j $(JOBS) --target shardplan_core shardplan_cli
	@scripts/tidy.sh -j $(JOBS)

test-fuzz: deps
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=20

# The libFuzzer targets (tests/fuzz/, built in the asan preset), each for
# FUZZ_SECONDS; a crash, leak or timeout fails the run and prints the input
# (docs/contributing.md).
fuzz: deps
	@cmake --preset asan >/dev/null
	@cmake --build --preset fuzz -j $(JOBS)
	@scripts/fuzz.sh -t $(FUZZ_SECONDS) -j $(FUZZ_JOBS)

bench: build
	@bench/run.sh

format check-format: deps
	@cmake --preset dev >/dev/null
	@cmake --build --preset dev --target $@

clean:
	rm -rf build
