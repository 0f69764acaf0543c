#!/usr/bin/env python3
"""Fits PyTorch's caching-allocator reserve to the measured torchtitan run.

torchtitan logs the peak *reserved* memory (torch.cuda.max_memory_reserved,
`memory: 82.40GiB` in benchmarks/llama3_h100_202412_torchtitan.md); shardplan
estimates the peak the step *allocates*. The caching allocator keeps cached
blocks, rounds allocations and fragments its segments, so it reserves more:

    reserve = measured reserved / shardplan's allocated peak - 1

This is one of at most three fitted constants for NVIDIA GPUs
(docs/memory.md, "Per device, capacity, fits"); src/cli/inputs.cpp holds it
as k_pytorch_reserve. Rerun this after a change to the memory model and
update the constant to the printed value (three decimals).

Usage: bench/fit_allocator.py [SHARDPLAN]   (default build/release/shardplan,
       else build/dev/shardplan)
"""

import os
import re
import sys

from measured_runs import binary, estimate, load_runs  # the same rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = float(1 << 30)

# measured-runs tt-a (bench/measured_runs.json): Llama 3.1 8B, FSDP 8 on
# H100 96 GB, local batch 2, seq 8192, op-level selective AC, fp32 master
# weights in FSDP2, AdamW, eager kernels; torchtitan logs 82.4 GiB reserved.
RUN = "tt-a"


def main():
    run = next(r for r in load_runs() if r["id"] == RUN)
    doc, error = estimate(binary(sys.argv), run)  # a GPU: runtime pytorch
    if doc is None:
        sys.exit("fit_allocator: " + error)
    memory = doc["memory"]
    allocated = memory["max_device_total"]
    measured = run["peak_gib"]
    reserve = measured * GIB / allocated - 1
    source = open(os.path.join(ROOT, "src", "cli", "inputs.cpp")).read()
    current = re.search(r"k_pytorch_reserve = ([0-9.]+);", source)
    print(f"allocated peak {allocated / GIB:.2f} GiB, measured reserved "
          f"{measured} GiB: reserve {reserve:.3f}")
    if current:
        print(f"k_pytorch_reserve in src/cli/inputs.cpp: {current.group(1)}")
        if abs(float(current.group(1)) - round(reserve, 3)) > 0.0005:
            sys.exit("fit_allocator: the constant is out of date")


if __name__ == "__main__":
    main()
