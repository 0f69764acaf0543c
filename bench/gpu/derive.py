#!/usr/bin/env python3
"""The H200's measured constants, from bench/gpu/measure.py's data.

Reads bench/gpu/h200-2026-11-28/ (three runs of measure.py on one NVIDIA
H200 SXM, driver 580.159.04, PyTorch 2.11, JAX 0.11.2: README.md beside
this) and prints the catalogue figures they give; --write puts them into
configs/topologies/h200.json. Nothing here is fitted: each figure is one
measurement over the datasheet figure it qualifies.

  matmul_curve             the bf16 GEMM sweep, m, n, k over 256-8192
  matmul_efficiency        the sweep's best rate over the bf16 peak
  attention_efficiency     PyTorch SDPA (cuDNN flash), causal, forward +
                           backward, at the small Llama's shape, counted as
                           the step counts attention (3x the forward's
                           FLOPs), over the bf16 peak
  xla_attention_efficiency the same, JAX's cuDNN flash attention (the
                           step's under runtime xla)
  memory_efficiency        a device-to-device copy (bytes read + written)
                           over the HBM datasheet rate (both runs' mean)
  eager_memory_efficiency  eager PyTorch's elementwise kernels at the small
                           Llama's shapes (12 ops: bytes over time, summed)
                           over the HBM datasheet rate
  fp8_efficiency_ratio     the best FP8 GEMMs' fraction of the FP8 peak
                           over the best bf16 GEMM's of the bf16 peak
  host_bytes_per_s_per_chip  pinned host copies, the slower direction
  grouped_matmul_curve     torch._grouped_mm's forward and backward by
                           tokens an expert (random routing), the mean of
                           runs 5 and 6 over the four expert shapes, over
                           the sweep's best;
                           written to the H100's file too (the same GH100
                           die: SMs, clocks and tensor cores)

Usage: bench/gpu/derive.py [--write | --check]
  --write  put the figures into configs/topologies/h200.json (and the
           grouped curve into h100.json)
  --check  exit 1 when the catalogue's figures differ from the data's
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(HERE, "h200-2026-11-28")
FAMILY = os.path.join(ROOT, "configs", "topologies", "h200.json")
SAME_DIE = os.path.join(ROOT, "configs", "topologies", "h100.json")
CURVES = ("matmul_curve", "grouped_matmul_curve")
WHERE = ("measured on one NVIDIA H200 SXM (141 GB, driver 580.159.04, "
         "PyTorch 2.11, 2026-11-28) by bench/gpu/measure.py, derived by "
         "bench/gpu/derive.py (docs/sources.md#h200-measured)")


def load(run, part):
    with open(os.path.join(DATA, str(run), part + ".json"),
              encoding="utf-8") as f:
        return json.load(f)


def figures(doc):
    peak = doc["figures"]["bf16_flops_per_s_per_device"]["value"]
    hbm = doc["figures"]["hbm_bytes_per_s_per_device"]["value"]
    gemm = load(1, "gemm")
    best = max(gemm["bf16"])
    attention = load(2, "attention")
    sdpa = attention["torch_sdpa"]
    attention_rate = 3 * attention["forward_flops"] / sdpa[
        "forward_backward_s"]
    jax_rate = 3 * attention["forward_flops"] / attention["jax_cudnn"][
        "forward_backward_s"]
    copies = [load(run, "ceilings") for run in (1, 3)]
    copy = sum(c["copy_bytes_per_s"] for c in copies) / len(copies)
    host = min(min(c["h2d_bytes_per_s"], c["d2h_bytes_per_s"])
               for c in copies)
    eager = load(3, "elementwise")["all_bytes_per_s"]
    fp8_peak = doc["figures"]["fp8_flops_per_s_per_device"]["value"]
    fp8_rate = 1 / (1 / 3 / max(gemm["fp8_fast_accum"])
                    + 2 / 3 / max(gemm["fp8"]))
    b, h, s, d = attention["shape"]
    # Both runs' forward and backward of torch._grouped_mm, random
    # routing (run 5's grouped part, run 6's beside the per-expert loop).
    grouped = [r for r in load(5, "grouped")["runs"]
               if r["routing"] == "random"]
    grouped += load(6, "grouped_loop")["runs"]
    tokens = sorted({r["tokens_per_expert"] for r in grouped})
    shapes = sorted({r["shape"] for r in grouped})
    fractions = []
    for t in tokens:
        rates = [r["grouped_mm_fwd_bwd_flops_per_s"] for r in grouped
                 if r["tokens_per_expert"] == t]
        fractions.append(round(sum(rates) / len(rates) / best, 3))
    return {
        "grouped_matmul_curve": {
            "source": "torch._grouped_mm (the grouped GEMM torchtitan "
                      "calls), forward and backward, bf16, random routing, "
                      f"the mean of two runs over {', '.join(shapes)}, "
                      "over the bf16 sweep's best "
                      f"({best / 1e12:.0f} TFLOP/s): {WHERE}",
            "tokens_per_expert": tokens,
            "fractions": fractions,
        },
        "matmul_curve": {
            "source": "bf16 x bf16 -> bf16 GEMMs (torch.matmul, cuBLAS), "
                      "random operands, each the median of "
                      "triton.testing.do_bench with L2 flushed, m, n, k "
                      f"over 256-8192: {WHERE}",
            "dims": gemm["dims"],
            "rates": [int(round(r)) for r in gemm["bf16"]],
        },
        "matmul_efficiency": {
            "value": round(best / peak, 3),
            "source": f"the bf16 GEMM sweep's best, {best / 1e12:.0f} "
                      f"TFLOP/s, over the {peak / 1e12:.0f} TFLOP/s "
                      f"peak: {WHERE}"},
        "attention_efficiency": {
            "value": round(attention_rate / peak, 3),
            "source": "PyTorch SDPA (cuDNN flash attention), causal, "
                      f"batch {b}, {h} heads, seq {s}, head dim {d}: "
                      "forward + backward in "
                      f"{sdpa['forward_backward_s'] * 1e3:.3f} ms, counted "
                      "as 3x the forward's FLOPs as the step counts "
                      f"attention, over the peak: {WHERE}"},
        "xla_attention_efficiency": {
            "value": round(jax_rate / peak, 3),
            "source": "JAX's jax.nn.dot_product_attention (cuDNN flash "
                      "attention, JAX 0.11.2), at the same shape and count: "
                      f"{attention['jax_cudnn']['forward_backward_s'] * 1e3:.3f}"
                      f" ms, over the peak: {WHERE}"},
        "memory_efficiency": {
            "value": round(copy / hbm, 3),
            "source": "a 1 GiB device-to-device copy, "
                      f"{copy / 1e12:.2f} TB/s counting bytes read and "
                      f"written, over the {hbm / 1e12:.1f} TB/s "
                      f"datasheet: {WHERE}"},
        "eager_memory_efficiency": {
            "value": round(eager / hbm, 3),
            "source": "eager PyTorch's elementwise kernels at a Llama "
                      "layer's shapes (casts, adds, products, RMSNorm's "
                      "reduction, the rotary product, repeat_interleave, a "
                      "transposing copy, SiLU): their bytes over their "
                      f"time, {eager / 1e12:.2f} TB/s, over the "
                      f"datasheet: {WHERE}"},
        "fp8_efficiency_ratio": {
            "value": round(fp8_rate / fp8_peak / (best / peak), 3),
            "source": "the best FP8 GEMMs (e4m3, torch._scaled_mm) of the "
                      "sweep, a third at fast accumulation (the forward's, "
                      "as Transformer Engine and torchao run it) and two "
                      "thirds split (the backward's): "
                      f"{fp8_rate / 1e12:.0f} of {fp8_peak / 1e12:.0f} "
                      f"TFLOP/s, {fp8_rate / fp8_peak:.3f} of the FP8 "
                      f"peak against bf16's {best / peak:.3f}: {WHERE}"},
        "host_bytes_per_s_per_chip": {
            "value": float(round(host, -8)),
            "source": "pinned host-to-device and device-to-host copies of "
                      f"1 GiB, the slower {host / 1e9:.1f} GB/s (PCIe Gen5 "
                      f"x16, 64 GB/s a direction by the datasheet): {WHERE}"},
    }


def main():
    with open(FAMILY, encoding="utf-8") as f:
        doc = json.load(f)
    new = figures(doc)
    with open(SAME_DIE, encoding="utf-8") as f:
        same_die = json.load(f)
    grouped = new["grouped_matmul_curve"]
    die = dict(grouped, source="measured on the H200, the same GH100 die "
               "(132 SMs at the same clocks): " + grouped["source"])
    for name, figure in new.items():
        if name == "matmul_curve":
            print(f"matmul_curve: {len(figure['dims'])}^3 rates, best "
                  f"{max(figure['rates']) / 1e12:.0f} TFLOP/s")
        elif name == "grouped_matmul_curve":
            print("grouped_matmul_curve:", dict(zip(
                figure["tokens_per_expert"], figure["fractions"])))
        else:
            print(f"{name}: {figure['value']:g}")
    if "--check" in sys.argv:
        stale = [name for name, figure in new.items()
                 if (doc.get(name) if name in CURVES
                     else doc["figures"].get(name)) != figure]
        if same_die.get("grouped_matmul_curve") != die:
            stale.append("the H100's grouped_matmul_curve")
        for name in stale:
            print(f"FAILED: {name} in configs/topologies/ is not what the "
                  "data give: run bench/gpu/derive.py --write")
        sys.exit(1 if stale else 0)
    if "--write" not in sys.argv:
        return
    for name in CURVES:
        doc[name] = new.pop(name)
    doc["figures"].update(new)
    same_die["grouped_matmul_curve"] = die
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import fit_step  # the catalogue's own layout
    fit_step.dump_family(FAMILY, doc)
    fit_step.dump_family(SAME_DIE, same_die)
    print(f"wrote {os.path.relpath(FAMILY, ROOT)}, "
          f"{os.path.relpath(SAME_DIE, ROOT)}")


if __name__ == "__main__":
    main()
