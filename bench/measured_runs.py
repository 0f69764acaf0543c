#!/usr/bin/env python3
"""The calibration set of published, measured training runs through shardplan.

Each run is expressed as its users write it (a MaxText config in
bench/measured/, or the flags of a PyTorch run) and run through
`shardplan memory --format json`; the table printed compares shardplan's
verdict, peak and step with what the run measured. docs/memory.md keeps the
table ("Measured runs"); rerun this script to regenerate it.

Usage: bench/measured_runs.py [SHARDPLAN]   (default build/release/shardplan,
       else build/dev/shardplan)

Sources of the rows (every run ran, so each must fit):
  v6e-*  AI-Hypercomputer/tpu-recipes training/trillium/*/README.md logs;
         configs in AI-Hypercomputer/maxtext benchmarks/
         maxtext_trillium_model_configs.py
  7x-*   AI-Hypercomputer/tpu-recipes training/ironwood/README.md
  v5p-a  AI-Hypercomputer/maxtext docs/reference/models/tiering.md (Gold)
  v5p-405b  AI-Hypercomputer/tpu-recipes training/v5p/Llama3.1-405B-MaxText/
         README.md (not in the calibration set: a check, nothing fitted)
  tt-a   pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEASURED = os.path.join("bench", "measured")

# id, model, shardplan arguments, measured step seconds (or None), measured
# peak GiB (or None), measured tokens/s/device (or None).
RUNS = [
    ("v6e-a", "Llama 3.1 8B", "--topology v6e-8", 3.443, None, None),
    ("v6e-b", "Llama 3.1 8B", "--topology v6e-32", 3.495, None, None),
    ("v6e-c", "Llama 3.1 8B", "--topology v6e-128", 4.602, None, None),
    ("v6e-d", "Llama 3.1 70B", "--topology v6e-32", 17.790, None, None),
    ("v6e-e", "Llama 3.1 70B", "--topology v6e-128", 34.786, None, None),
    ("7x-a", "Llama 3.1 70B", "--topology tpu7x-512", 12.27, None, None),
    ("7x-b", "DeepSeek-V3", "--topology tpu7x-512", 26.79, None, None),
    ("v5p-405b", "Llama 3.1 405B", "--topology v5p-1024", 131.474, None, None),
    ("v5p-a", "Llama 2 70B", "--topology v5p-1024", None, None, 692.0),
    ("tt-a", "Llama 3.1 8B",
     "--topology h100x8 --hbm 96GiB --model llama-3-8b --mesh fsdp:8 "
     "--rules fsdp --recipe adam --param-dtype f32 --seq 8192 --batch 16 "
     "--remat selective_op --cross-entropy eager",
     None, 82.4, 5762.0),
]

GIB = float(1 << 30)


def binary():
    if len(sys.argv) > 1:
        return sys.argv[1]
    for build in ("release", "dev"):
        path = os.path.join(ROOT, "build", build, "shardplan")
        if os.path.exists(path):
            return path
    sys.exit("measured_runs: build shardplan first (make build)")


def run(shardplan, run_id, args):
    config = os.path.join(MEASURED, run_id + ".yml")
    # A MaxText row is its config alone (model_name, its keys): the model,
    # the mesh, the workload and the training state come from it.
    command = [shardplan, "memory", "--format", "json"]
    command += args.split()
    if os.path.exists(os.path.join(ROOT, config)):
        command += ["--maxtext-config", config]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          check=False)
    if done.returncode not in (0, 1):
        return None, done.stderr.strip().splitlines()[-1]
    return json.loads(done.stdout), None


def ratio(estimate, measured):
    if estimate is None or measured is None:
        return ""
    return f"{estimate / measured:.2f}"


def main():
    shardplan = binary()
    print("| run | model | fits | peak GiB | HBM GiB | measured peak GiB |"
          " step s | measured step s | step ratio | tokens/s/dev |"
          " measured tokens/s/dev |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
          " ---: |")
    for run_id, model, args, step_s, peak_gib, tokens in RUNS:
        doc, error = run(shardplan, run_id, args)
        if doc is None:
            print(f"| {run_id} | {model} | error: {error} | | | | | | | | |")
            continue
        memory = doc["memory"]
        step = doc.get("step") or {}
        peak = memory["reserved_bytes"] / GIB
        hbm = (memory["hbm_bytes"] or 0) / GIB
        est_step = step.get("step_seconds")
        est_tokens = step.get("tokens_per_second_per_device")
        print(f"| {run_id} | {model} | {'yes' if memory['fits'] else 'NO'} |"
              f" {peak:.1f} | {hbm:.2f} |"
              f" {'' if peak_gib is None else peak_gib} |"
              f" {'' if est_step is None else f'{est_step:.2f}'} |"
              f" {'' if step_s is None else step_s} |"
              f" {ratio(est_step, step_s)} |"
              f" {'' if est_tokens is None else f'{est_tokens:,.0f}'} |"
              f" {'' if tokens is None else f'{tokens:,.0f}'} |")


if __name__ == "__main__":
    main()
