#!/usr/bin/env python3
"""Measure on one GPU what no datasheet gives (issue 31).

One prepared run, a few minutes long, in four parts, each its own process so
that one part's failure or memory leaves the others alone:

  ceilings  a device-to-device copy (bytes read + written), pinned host
            copies both ways, one 8192^3 bf16 matmul;
  gemm      bf16 and fp8 (e4m3, per-tensor scales, torch._scaled_mm) matmul
            rates over m, n, k in 256..8192 (powers of two), each the median
            of triton.testing.do_bench, L2 flushed between repeats, random
            operands;
  torch     training steps of two small Llama models in eager PyTorch, with
            fp32 master weights: bf16 compute copies as FSDP2's
            MixedPrecisionPolicy(param_dtype=bf16) makes them, or autocast
            (torchtitan's one-GPU path); AdamW (fused); remat none or full;
            the step's median time, forward / backward / optimizer split,
            and the allocator's peak;
  jax       the smaller model as MaxText builds it: fp32 weights cast to
            bf16 at each matmul, bf16 activations, layers under lax.scan,
            cuDNN flash attention, optax AdamW; remat none or full; median
            step and XLA's peak.

Usage: measure.py OUTDIR [--dry] [--only PART,...] [--summary]
  --dry      a CPU run on tiny shapes, to check the script where no GPU is
  --only     run these parts (default: all)
  --summary  print the summary of OUTDIR's data, measuring nothing
  --part  run one part in this process (used by the driver)

Writes OUTDIR/<part>.json and prints a summary; bench/gpu/README.md says
what was measured where and how the numbers enter the catalogue.
"""

import collections
import itertools
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback

PARTS = ("ceilings", "gemm", "torch", "jax", "attention", "profile",
         "compiled", "elementwise", "saved", "fsdp", "grouped",
         "grouped_jax", "grouped_loop", "sustained")
TIMEOUT_S = {"ceilings": 45, "gemm": 120, "torch": 140, "jax": 160,
             "attention": 60, "profile": 90, "compiled": 150,
             "elementwise": 60, "saved": 90, "fsdp": 120, "grouped": 150,
             "grouped_jax": 120, "grouped_loop": 120, "sustained": 90}

# Routed experts' grouped matmuls: (name, local experts, k, n) at each
# tokens-per-expert count. DeepSeek-V3's experts with 8-way expert
# parallelism (32 of 256 a GPU), its down projection, Mixtral 8x7B's
# (8 experts, no EP), Qwen3-30B-A3B's (128 experts, no EP).
GROUPED_SHAPES = [
    ("deepseek-v3-up", 32, 7168, 2048),
    ("deepseek-v3-down", 32, 2048, 7168),
    ("mixtral-up", 8, 4096, 14336),
    ("qwen3-30b-a3b-up", 128, 2048, 768),
]
GROUPED_TOKENS = [128, 256, 512, 1024, 2048, 4096]

# The models: Llama 3 layout (RMSNorm, RoPE, GQA, SwiGLU), untied head.
MODELS = {
    "llama-1b": dict(hidden=2048, layers=16, heads=16, kv_heads=8,
                     head_dim=128, ffn=8192, vocab=32768),
    "llama-3b": dict(hidden=4096, layers=12, heads=32, kv_heads=8,
                     head_dim=128, ffn=14336, vocab=32768),
}
DRY_MODEL = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16,
                 ffn=128, vocab=256)

# (model, weights, remat, seq, batch)
TORCH_RUNS = [
    ("llama-1b", "bf16-copies", "none", 4096, 4),
    ("llama-1b", "bf16-copies", "full", 4096, 16),
    ("llama-1b", "autocast", "none", 4096, 4),
    ("llama-3b", "bf16-copies", "none", 4096, 2),
]
JAX_RUNS = [
    ("llama-1b", "none", 4096, 4),
    ("llama-1b", "full", 4096, 16),
]


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def write(outdir, name, data):
    path = os.path.join(outdir, name + ".json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def param_count(m):
    h, d = m["hidden"], m["head_dim"]
    layer = (h * m["heads"] * d * 2 + h * m["kv_heads"] * d * 2
             + 3 * h * m["ffn"] + 2 * h)
    return m["layers"] * layer + 2 * m["vocab"] * h + h


def model_flops(m, seq, batch):
    """6 N D over the weights' matmuls (embedding excluded) plus causal
    flash attention's 6 * 2 * s^2 * heads * head_dim / 2 per layer and
    sequence (the MFU convention: no recompute counted)."""
    n = param_count(m) - m["vocab"] * m["hidden"]
    attention = 6 * seq * seq * m["heads"] * m["head_dim"] * m["layers"]
    return 6 * n * seq * batch + attention * batch


# ---------------------------------------------------------------- torch


def timer(torch, dry):
    """(median seconds of fn) by do_bench on a GPU, by wall clock on CPU."""
    if dry:
        def bench(fn):
            fn()
            t = time.perf_counter()
            for _ in range(3):
                fn()
            return (time.perf_counter() - t) / 3
        return bench
    import triton.testing

    def bench(fn):
        return triton.testing.do_bench(fn, warmup=5, rep=25,
                                       return_mode="median") / 1e3
    return bench


def part_ceilings(outdir, dry):
    import torch
    dev = "cpu" if dry else "cuda"
    bench = timer(torch, dry)
    out = {}
    n = (1 << 20) if dry else (1 << 30)
    a = torch.randn(n // 2, device=dev, dtype=torch.bfloat16)
    b = torch.empty_like(a)
    t = bench(lambda: b.copy_(a))
    out["copy_bytes"] = 2 * n
    out["copy_s"] = t
    out["copy_bytes_per_s"] = 2 * n / t
    if not dry:
        host = torch.empty(n // 2, dtype=torch.bfloat16, pin_memory=True)
        for name, fn in (("h2d", lambda: a.copy_(host, non_blocking=True)),
                         ("d2h", lambda: host.copy_(a, non_blocking=True))):
            t = bench(fn)
            out[name + "_bytes_per_s"] = n / t
    k = 256 if dry else 8192
    x = torch.randn(k, k, device=dev, dtype=torch.bfloat16)
    y = torch.randn(k, k, device=dev, dtype=torch.bfloat16)
    t = bench(lambda: x @ y)
    out["matmul_8192_flops_per_s"] = 2 * k**3 / t
    write(outdir, "ceilings", out)
    return out


def fp8_matmul(torch):
    """A function (a, b) -> a @ b in fp8 with unit scales, or None."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch,
                                                        "float8_e4m3fn"):
        return None
    one = None

    def mm(a, bt, fast):
        nonlocal one
        if one is None:
            one = torch.tensor(1.0, device=a.device, dtype=torch.float32)
        return torch._scaled_mm(a, bt.t(), scale_a=one, scale_b=one,
                                out_dtype=torch.bfloat16,
                                use_fast_accum=fast)
    return mm


def part_gemm(outdir, dry):
    import torch
    dev = "cpu" if dry else "cuda"
    bench = timer(torch, dry)
    dims = [64, 128] if dry else [256, 512, 1024, 2048, 4096, 8192]
    out = {"dims": dims, "order": "m-major, then n, then k",
           "bf16": [], "fp8": [], "fp8_fast_accum": []}
    fp8 = None if dry else fp8_matmul(torch)
    big = max(dims)
    # One pool of random operands, sliced per shape.
    a16 = torch.randn(big, big, device=dev, dtype=torch.bfloat16)
    b16 = torch.randn(big, big, device=dev, dtype=torch.bfloat16)
    if fp8 is not None:
        a8 = (a16 * 0.5).to(torch.float8_e4m3fn)
        b8 = (b16 * 0.5).to(torch.float8_e4m3fn)
    start = time.time()
    for m in dims:
        for n in dims:
            for k in dims:
                flops = 2.0 * m * n * k
                a = a16[:m, :k].contiguous()
                b = b16[:k, :n].contiguous()
                out["bf16"].append(flops / bench(lambda: a @ b))
                if fp8 is None:
                    continue
                a_ = a8[:m, :k].contiguous()
                bt = b8[:n, :k].contiguous()  # column-major k x n
                try:
                    out["fp8"].append(
                        flops / bench(lambda: fp8(a_, bt, False)))
                    out["fp8_fast_accum"].append(
                        flops / bench(lambda: fp8(a_, bt, True)))
                except RuntimeError as e:
                    out["fp8_error"] = str(e)[:300]
                    fp8 = None
        log(f"gemm: m={m} done, {time.time() - start:.0f} s")
    write(outdir, "gemm", out)
    return out


def rope_tables(torch, seq, dim, dev):
    freqs = 1.0 / (500000.0 ** (torch.arange(0, dim, 2, device=dev).float()
                                / dim))
    angles = torch.outer(torch.arange(seq, device=dev).float(), freqs)
    return torch.polar(torch.ones_like(angles), angles)  # complex64


def build_torch_model(torch, cfg, seq, dev, remat, cast):
    """torchtitan's Llama 3; with `cast` (bf16) every weight is cast at its
    use, as FSDP2's MixedPrecisionPolicy(param_dtype=bf16) computes on bf16
    copies of the fp32 weights (the copy is re-made when a checkpointed
    layer recomputes); the gradient flows back through the cast."""
    nn = torch.nn
    F = torch.nn.functional
    from torch.utils.checkpoint import checkpoint

    def use(weight):
        return weight if cast is None else weight.to(cast)

    class Linear(nn.Linear):
        def forward(self, x):
            return F.linear(x, use(self.weight))

    def rope(x, cis):
        # torchtitan's apply_rotary_emb: complex multiply in fp32.
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * cis[None, :, None, :]).flatten(
            3).type_as(x)

    class RMSNorm(nn.Module):
        # torchtitan's "rmsnorm" norm_type: fp32 statistics, cast back.
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
            return y.type_as(x) * use(self.weight)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            h, d = cfg["hidden"], cfg["head_dim"]
            self.nh, self.nkv, self.d = cfg["heads"], cfg["kv_heads"], d
            self.wq = Linear(h, self.nh * d, bias=False)
            self.wk = Linear(h, self.nkv * d, bias=False)
            self.wv = Linear(h, self.nkv * d, bias=False)
            self.wo = Linear(self.nh * d, h, bias=False)

        def forward(self, x, cis):
            b, s, _ = x.shape
            q = rope(self.wq(x).view(b, s, self.nh, self.d), cis)
            k = rope(self.wk(x).view(b, s, self.nkv, self.d), cis)
            v = self.wv(x).view(b, s, self.nkv, self.d)
            rep = self.nh // self.nkv  # torchtitan's repeat_kv
            k = k.repeat_interleave(rep, dim=2)
            v = v.repeat_interleave(rep, dim=2)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            if hasattr(F, "scaled_dot_product_attention"):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # the dry run's old torch
                w = (q @ k.transpose(-1, -2)) / math.sqrt(self.d)
                mask = torch.ones(s, s, dtype=torch.bool,
                                  device=x.device).triu(1)
                o = w.masked_fill(mask, float("-inf")).softmax(-1) @ v
            return self.wo(o.transpose(1, 2).reshape(b, s, -1))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            h = cfg["hidden"]
            self.attention_norm = RMSNorm(h)
            self.attention = Attention()
            self.ffn_norm = RMSNorm(h)
            self.w1 = Linear(h, cfg["ffn"], bias=False)
            self.w3 = Linear(h, cfg["ffn"], bias=False)
            self.w2 = Linear(cfg["ffn"], h, bias=False)

        def body(self, x, cis):
            x = x + self.attention(self.attention_norm(x), cis)
            y = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(y)) * self.w3(y))

        def forward(self, x, cis):
            if remat == "full":
                return checkpoint(self.body, x, cis, use_reentrant=False)
            return self.body(x, cis)

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            h = cfg["hidden"]
            self.tok_embeddings = nn.Embedding(cfg["vocab"], h)
            self.layers = nn.ModuleList(Block() for _ in range(cfg["layers"]))
            self.norm = RMSNorm(h)
            self.output = Linear(h, cfg["vocab"], bias=False)
            self.register_buffer("cis", rope_tables(torch, seq,
                                                    cfg["head_dim"], dev),
                                 persistent=False)

        def forward(self, tokens):
            x = F.embedding(tokens, use(self.tok_embeddings.weight))
            for layer in self.layers:
                x = layer(x, self.cis)
            return self.output(self.norm(x))

    with torch.device(dev) if hasattr(torch, "device") and hasattr(
            torch.device, "__enter__") else _null():
        model = Llama()
    return model.to(dev)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def torch_step_fn(torch, model, weights):
    """The forward and the loss, given the tokens."""
    F = torch.nn.functional

    def loss_fn(tokens, labels):
        if weights == "autocast":
            with torch.autocast(tokens.device.type, dtype=torch.bfloat16):
                logits = model(tokens)
        else:
            logits = model(tokens)
        # torchtitan's cross_entropy_loss: the logits upcast to fp32.
        return F.cross_entropy(logits.flatten(0, 1).float(),
                               labels.flatten(0, 1))
    return loss_fn


def adamw(torch, model, dry):
    """torchtitan's optimizer: AdamW, its fused CUDA kernel."""
    if dry:
        return torch.optim.AdamW(model.parameters(), lr=1e-4)
    return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)


def shape_of(dry, name, seq, batch):
    """A run's model config, seq and batch: the dry run's tiny ones on a
    CPU."""
    if dry:
        return DRY_MODEL, 32, 2
    return MODELS[name], seq, batch


TorchSetup = collections.namedtuple(
    "TorchSetup", "cfg seq batch model opt loss_fn tokens")


def torch_setup(torch, dev, dry, run, wrap=None):
    """A torch run (name, weights, remat, seq, batch) built: its model
    (`wrap` applied before the optimizer sees it: compile, fully_shard),
    AdamW, the forward and loss, and random tokens."""
    name, weights, remat, seq, batch = run
    cfg, seq, batch = shape_of(dry, name, seq, batch)
    cast = torch.bfloat16 if weights == "bf16-copies" else None
    model = build_torch_model(torch, cfg, seq, dev, remat, cast)
    if wrap is not None:
        wrap(model)
    tokens = torch.randint(0, cfg["vocab"], (batch, seq), device=dev)
    return TorchSetup(cfg, seq, batch, model, adamw(torch, model, dry),
                      torch_step_fn(torch, model, weights), tokens)


def torch_run(torch, dev, dry, name, weights, remat, seq, batch):
    torch.manual_seed(0)
    if not dry:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    run = torch_setup(torch, dev, dry, (name, weights, remat, seq, batch))
    cfg, seq, batch = run.cfg, run.seq, run.batch
    model, opt, loss_fn, tokens = run.model, run.opt, run.loss_fn, run.tokens
    labels = torch.randint(0, cfg["vocab"], (batch, seq), device=dev)
    steps, warmup = (2, 1) if dry else (8, 3)
    times = {"forward": [], "backward": [], "optimizer": [], "step": []}
    for i in range(warmup + steps):
        if dry:
            marks = [time.perf_counter()]
        else:
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            ev[0].record()
        loss = loss_fn(tokens, labels)
        (marks.append(time.perf_counter()) if dry else ev[1].record())
        loss.backward()
        (marks.append(time.perf_counter()) if dry else ev[2].record())
        opt.step()
        opt.zero_grad(set_to_none=True)
        (marks.append(time.perf_counter()) if dry else ev[3].record())
        if not dry:
            torch.cuda.synchronize()
            marks = [0.0] + [ev[0].elapsed_time(e) / 1e3 for e in ev[1:]]
        if i >= warmup:
            times["forward"].append(marks[1] - marks[0])
            times["backward"].append(marks[2] - marks[1])
            times["optimizer"].append(marks[3] - marks[2])
            times["step"].append(marks[3] - marks[0])
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    row = {"model": name, "config": cfg, "weights": weights, "remat": remat,
           "seq": seq, "batch": batch, "params": param_count(cfg),
           "loss": float(loss), "seconds": med, "steps_timed": steps,
           "step_s_all": times["step"],
           "model_flops": model_flops(cfg, seq, batch)}
    row["model_flops_per_s"] = row["model_flops"] / med["step"]
    row["tokens_per_s"] = seq * batch / med["step"]
    if not dry:
        row["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        row["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    del model, opt, loss
    return row


def part_torch(outdir, dry):
    import torch
    dev = "cpu" if dry else "cuda"
    if not dry:
        torch.backends.cuda.matmul.allow_tf32 = True
    out = {"torch": torch.__version__, "runs": []}
    for name, weights, remat, seq, batch in TORCH_RUNS:
        start = time.time()
        try:
            row = torch_run(torch, dev, dry, name, weights, remat, seq,
                            batch)
        except Exception as e:  # keep the other runs
            row = {"model": name, "weights": weights, "remat": remat,
                   "seq": seq, "batch": batch,
                   "error": traceback.format_exc()[-1500:]}
            log(f"torch: {name} {weights} {remat}: {e}")
        row["wall_s"] = time.time() - start
        out["runs"].append(row)
        write(outdir, "torch", out)
        if not dry:
            torch.cuda.empty_cache()
    return out


def part_elementwise(outdir, dry):
    """Eager PyTorch's elementwise kernels at the first run's shapes: the
    bytes each reads and writes over its median time."""
    import torch
    dev = "cpu" if dry else "cuda"
    bench = timer(torch, dry)
    name, _, _, seq, batch = TORCH_RUNS[0]
    cfg, seq, batch = shape_of(dry, name, seq, batch)
    t, h, w = seq * batch, cfg["hidden"], cfg["ffn"]
    nh, nkv, d = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    bf, f32 = torch.bfloat16, torch.float32

    def r(*shape, dtype=bf):
        return torch.randn(*shape, device=dev, dtype=dtype)
    x, y = r(t, h), r(t, h)
    xf = r(t, h, dtype=f32)
    scale = r(t, 1, dtype=f32)
    g, u = r(t, w), r(t, w)
    q = r(batch, seq, nh, d)
    kv = r(batch, seq, nkv, d)
    heads = r(batch, nh, seq, d)
    cis = torch.polar(torch.ones(seq, d // 2, device=dev),
                      r(seq, d // 2, dtype=f32))
    qc = torch.view_as_complex(q.float().reshape(batch, seq, nh, -1, 2))
    ops = {  # name: (fn, bytes read + written)
        "copy bf16": (lambda: x.clone(), 4 * t * h),
        "add bf16": (lambda: x + y, 6 * t * h),
        "cast bf16 to f32": (lambda: x.float(), 6 * t * h),
        "cast f32 to bf16": (lambda: xf.to(bf), 6 * t * h),
        "mul f32 by row": (lambda: xf * scale, 8 * t * h),
        "pow f32": (lambda: xf.pow(2), 8 * t * h),
        "mean f32 rows": (lambda: xf.mean(-1, keepdim=True), 4 * t * h),
        "complex mul (rope)": (lambda: qc * cis[None, :, None, :],
                               16 * batch * seq * nh * d // 2),
        "repeat_interleave kv": (lambda: kv.repeat_interleave(nh // nkv,
                                                              dim=2),
                                 2 * batch * seq * (nkv + nh) * d),
        "transpose copy": (lambda: heads.transpose(1, 2).reshape(t, -1),
                           4 * t * nh * d),
        "silu bf16": (lambda: torch.nn.functional.silu(g), 4 * t * w),
        "mul bf16": (lambda: g * u, 6 * t * w),
    }
    out = {"shape": {"tokens": t, "hidden": h, "ffn": w}, "ops": {}}
    for op, (fn, nbytes) in ops.items():
        seconds = bench(fn)
        out["ops"][op] = {"bytes": nbytes, "seconds": seconds,
                          "bytes_per_s": nbytes / seconds}
    total = sum(o["bytes"] for o in out["ops"].values())
    out["all_bytes_per_s"] = total / sum(
        o["seconds"] for o in out["ops"].values())
    write(outdir, "elementwise", out)


def is_kernel(name):
    """A device kernel or copy, not a CPU-side op the profiler credits
    with its kernels' time (aten::mm, Optimizer.step, ...) nor the
    runtime's own events ("Command Buffer Full")."""
    cpu = ("aten::", "Optimizer.", "autograd::", "cuda", "ProfilerStep",
           "Command Buffer Full")
    return not name.startswith(cpu)


def saved_per_layer(torch, dev, dry, weights):
    """The bytes a layer's autograd graph saves per token: the saved
    tensors of a 2-layer model less a 1-layer model's (weights and their
    bf16 copies left out), by dtype and shape."""
    cfg = dict(DRY_MODEL if dry else MODELS["llama-1b"])
    seq = 32 if dry else 4096
    cast = torch.bfloat16 if weights == "bf16-copies" else None

    def saved(layers):
        cfg["layers"] = layers
        model = build_torch_model(torch, cfg, seq, dev, "none", cast)
        shapes = {tuple(p.shape) for p in model.parameters()}
        shapes |= {tuple(reversed(p.shape)) for p in model.parameters()}
        loss_fn = torch_step_fn(torch, model, weights)
        tokens = torch.randint(0, cfg["vocab"], (1, seq), device=dev)
        seen = {}

        def pack(t):
            if tuple(t.shape) not in shapes:
                key = (t.untyped_storage().data_ptr() if hasattr(
                    t, "untyped_storage") else t.data_ptr())
                name = f"{str(t.dtype).replace('torch.', '')} " \
                       f"{list(t.shape)}"
                seen[key] = (name, t.untyped_storage().nbytes() if hasattr(
                    t, "untyped_storage") else t.numel() * t.element_size())
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = loss_fn(tokens, tokens)
        del loss, model
        out = {}
        for name, nbytes in seen.values():
            out[name] = out.get(name, 0) + nbytes
        return out
    one, two = saved(1), saved(2)
    layer = {k: (two.get(k, 0) - one.get(k, 0)) / seq
             for k in set(one) | set(two) if two.get(k, 0) != one.get(k, 0)}
    return {"hidden": cfg["hidden"], "seq": seq,
            "bytes_per_token": sum(layer.values()),
            "by_tensor_bytes_per_token": layer}


def part_saved(outdir, dry):
    """What eager PyTorch's autograd keeps: a layer's saved tensors, and
    the first torch run's memory at the step's phases."""
    import torch
    dev = "cpu" if dry else "cuda"
    out = {"per_layer": {w: saved_per_layer(torch, dev, dry, w)
                         for w in ("bf16-copies", "autocast")}}
    write(outdir, "saved", out)
    if dry:
        return
    torch.cuda.empty_cache()
    run = torch_setup(torch, dev, dry, TORCH_RUNS[0])
    opt, loss_fn, tokens = run.opt, run.loss_fn, run.tokens
    phases = {}
    for step in range(2):
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss = loss_fn(tokens, tokens)
        torch.cuda.synchronize()
        after_forward = torch.cuda.memory_allocated()
        forward_peak = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        backward_peak = torch.cuda.max_memory_allocated()
        after_backward = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        phases = {"step": step, "start": start,
                  "after_forward": after_forward,
                  "forward_peak": forward_peak,
                  "backward_peak": backward_peak,
                  "after_backward": after_backward,
                  "optimizer_peak": torch.cuda.max_memory_allocated(),
                  "end": torch.cuda.memory_allocated()}
        del loss
    out["phases_first_run"] = phases
    write(outdir, "saved", out)


def part_fsdp(outdir, dry):
    """The first two torch runs under FSDP2 on one rank, as torchtitan
    wraps them (fully_shard per layer and the root, bf16 params, f32
    reduce): its per-layer gather and free cycle on the caching allocator
    (reserved over allocated), and the memory at the step's phases."""
    import torch
    import torch.distributed as dist
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except Exception as e:  # old torch: no FSDP2, or a broken import
        write(outdir, "fsdp", {"error": f"no FSDP2: {e}"})
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    dev = "cpu" if dry else "cuda"
    dist.init_process_group("gloo" if dry else "nccl", rank=0, world_size=1)
    out = {"runs": []}
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                  reduce_dtype=torch.float32)

    def shard(model):
        for layer in model.layers:
            fully_shard(layer, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
    for name, _, remat, seq, batch in TORCH_RUNS[:2]:
        _, seq, batch = shape_of(dry, name, seq, batch)
        row = {"model": name, "remat": remat, "seq": seq, "batch": batch}
        try:
            if not dry:
                torch.cuda.empty_cache()
            run = torch_setup(torch, dev, dry,
                              (name, "fsdp2", remat, seq, batch), shard)
            model, opt, loss_fn, tokens = (run.model, run.opt, run.loss_fn,
                                           run.tokens)
            times = []
            for step in range(6 if not dry else 2):
                if not dry:
                    torch.cuda.synchronize()
                    start = torch.cuda.memory_allocated()
                    torch.cuda.reset_peak_memory_stats()
                t = time.perf_counter()
                loss = loss_fn(tokens, tokens)
                if not dry:
                    torch.cuda.synchronize()
                    after_forward = torch.cuda.memory_allocated()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if not dry:
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t)
                del loss
            row["step_s_all"] = times
            row["step_s"] = sorted(times[2:])[len(times[2:]) // 2]
            if not dry:
                row.update({
                    "start": start, "after_forward": after_forward,
                    "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                    "peak_reserved_bytes": torch.cuda.max_memory_reserved()})
            del model, opt
        except Exception:
            row["error"] = traceback.format_exc()[-1500:]
        out["runs"].append(row)
        write(outdir, "fsdp", out)
    dist.destroy_process_group()


def group_sizes(rng, groups, tokens, routing, align):
    """`groups` sizes summing to groups x tokens: equal, or a random
    routing's multinomial counts; each a multiple of `align` (the
    kernel's row alignment, as torchtitan pads them)."""
    total = groups * tokens
    if routing == "balanced":
        return [tokens] * groups
    counts = [0] * groups
    for _ in range(total // align):
        counts[rng.randrange(groups)] += align
    return counts


def grouped_cases(dry):
    """The expert shapes and tokens-per-expert counts the grouped parts
    sweep (tiny ones on a CPU)."""
    if dry:
        return [("dry", 4, 64, 32)], [16, 32]
    return GROUPED_SHAPES, GROUPED_TOKENS


def grouped_row(shape, tokens, routing):
    """A grouped part's row: the expert shape and the routing."""
    name, groups, k, n = shape
    return {"shape": name, "groups": groups, "k": k, "n": n,
            "tokens_per_expert": tokens, "routing": routing}


def time_grouped_mm(torch, bench, x, w, sizes, dy, row):
    """torch._grouped_mm on the rows of `x` grouped by `sizes` against the
    experts' weights `w` (groups, n, k): its forward and its forward and
    backward into `row` (TFLOP/s of the forward's FLOPs, x3 for both), or
    the error it raised; nothing on a torch without it."""
    grouped = getattr(torch, "_grouped_mm", None)
    if grouped is None:
        return
    offs = torch.tensor(list(itertools.accumulate(sizes)), device=x.device,
                        dtype=torch.int32)
    flops = 2.0 * x.shape[0] * w.shape[1] * w.shape[2]
    xg = x.detach().requires_grad_()
    wg = w.detach().requires_grad_()

    def step():
        grouped(xg, wg.transpose(-2, -1), offs=offs).backward(dy)
    try:
        row["grouped_mm_flops_per_s"] = flops / bench(
            lambda: grouped(x, w.transpose(-2, -1), offs=offs))
        row["grouped_mm_fwd_bwd_flops_per_s"] = 3 * flops / bench(step)
    except RuntimeError as e:
        row["grouped_mm_error"] = str(e)[:300]


def part_grouped(outdir, dry):
    """Routed experts' grouped matmuls in PyTorch: torch._grouped_mm (the
    grouped GEMM torchtitan calls), a loop of one matmul per expert (the
    fallback without it), and one dense matmul of the same rows (the
    ceiling), at each tokens-per-expert count, with equal and random
    routing; _grouped_mm's forward and backward too."""
    import random
    import torch
    dev = "cpu" if dry else "cuda"
    bench = timer(torch, dry)
    rng = random.Random(0)
    shapes, counts = grouped_cases(dry)
    out = {"align": 16, "runs": [],
           "grouped_mm": hasattr(torch, "_grouped_mm")}
    for shape in shapes:
        name, groups, k, n = shape
        w = torch.randn(groups, n, k, device=dev, dtype=torch.bfloat16)
        wt = w.transpose(-2, -1)  # (groups, k, n), column-major
        for tokens in counts:
            for routing in ("balanced", "random"):
                sizes = group_sizes(rng, groups, tokens, routing, 16)
                m = sum(sizes)
                x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                flops = 2.0 * m * k * n
                row = grouped_row(shape, tokens, routing)
                row["largest_group"] = max(sizes)
                dense = wt[0]
                row["dense_flops_per_s"] = flops / bench(lambda: x @ dense)

                parts = x.split(sizes)

                def loop():
                    for part, expert in zip(parts, wt):
                        part @ expert
                row["loop_flops_per_s"] = flops / bench(loop)
                dy = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
                time_grouped_mm(torch, bench, x, w, sizes, dy, row)
                out["runs"].append(row)
        log(f"grouped: {name} done")
        write(outdir, "grouped", out)
    write(outdir, "grouped", out)


def part_grouped_loop(outdir, dry):
    """A GEMM an expert, forward and backward (each expert's input and
    weight leaf tensors of their own, so no slice's gradient spans the
    rest): what Transformer Engine's GroupedLinear runs, one stream here,
    against torch._grouped_mm's forward and backward on the same rows;
    random routing."""
    import random
    import torch
    dev = "cpu" if dry else "cuda"
    bench = timer(torch, dry)
    rng = random.Random(0)
    shapes, counts = grouped_cases(dry)
    out = {"runs": []}
    for shape in shapes:
        name, groups, k, n = shape
        w = torch.randn(groups, n, k, device=dev, dtype=torch.bfloat16)
        for tokens in counts:
            sizes = group_sizes(rng, groups, tokens, "random", 16)
            m = sum(sizes)
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            dy = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
            row = grouped_row(shape, tokens, "random")
            xs = [part.detach().requires_grad_() for part in x.split(sizes)]
            dys = dy.split(sizes)
            ws = [w[g].detach().requires_grad_() for g in range(groups)]

            def loop():
                for g in range(groups):
                    if sizes[g]:
                        (xs[g] @ ws[g].t()).backward(dys[g])
            row["loop_fwd_bwd_flops_per_s"] = 3 * 2.0 * m * k * n / bench(
                loop)
            time_grouped_mm(torch, bench, x, w, sizes, dy, row)
            out["runs"].append(row)
        log(f"grouped_loop: {name} done")
        write(outdir, "grouped_loop", out)
    write(outdir, "grouped_loop", out)


def part_sustained(outdir, dry):
    """bf16 GEMMs run back to back for 12 s a shape, as a training step
    keeps the GPU busy: the rate over each second (against the sweep's
    short bursts), with the SM clock and the power drawn, sampled by
    nvidia-smi every 200 ms."""
    import torch
    dev = "cpu" if dry else "cuda"
    shapes = [(64, 64, 64)] if dry else [
        (8192, 8192, 8192), (16384, 4096, 14336), (4096, 2048, 8192)]
    seconds = 1 if dry else 12
    out = {"seconds_per_shape": seconds, "runs": []}
    sampler = None
    samples = os.path.join(outdir, "sustained-smi.csv")
    if not dry:
        sampler = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,"
             "temperature.gpu,clocks_throttle_reasons.active",
             "--format=csv,noheader", "-lms", "200"],
            stdout=open(samples, "w", encoding="utf-8"),
            stderr=subprocess.DEVNULL)
    try:
        for m, n, k in shapes:
            a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
            flops = 2.0 * m * n * k
            row = {"m": m, "n": n, "k": k, "start": time.time(),
                   "per_second": []}
            done, calls, t0 = 0.0, 0, time.perf_counter()
            window = t0
            while done < seconds:
                for _ in range(8):
                    a @ b
                calls += 8
                if not dry:
                    torch.cuda.synchronize()
                now = time.perf_counter()
                if now - window >= 1.0:
                    row["per_second"].append(calls * flops / (now - window))
                    calls, window = 0, now
                done = now - t0
            row["end"] = time.time()
            out["runs"].append(row)
            log(f"sustained: {m}x{n}x{k} first "
                f"{row['per_second'][0] / 1e12 if row['per_second'] else 0:.0f}"
                f" last {row['per_second'][-1] / 1e12 if row['per_second'] else 0:.0f}"
                " TFLOP/s")
            write(outdir, "sustained", out)
    finally:
        if sampler is not None:
            sampler.terminate()
    write(outdir, "sustained", out)


def part_grouped_jax(outdir, dry):
    """The same grouped matmuls through jax.lax.ragged_dot (what MaxText's
    sparse_matmul calls on a GPU, megablox being TPU-only)."""
    if dry:
        os.environ["JAX_PLATFORMS"] = "cpu"
    import random
    import jax
    import jax.numpy as jnp
    rng = random.Random(0)
    shapes, counts = grouped_cases(dry)
    out = {"jax": jax.__version__, "runs": []}

    def median_s(fn, *args):
        fn(*args).block_until_ready()
        times = []
        for _ in range(3 if dry else 10):
            t = time.perf_counter()
            fn(*args).block_until_ready()
            times.append(time.perf_counter() - t)
        return sorted(times)[len(times) // 2]
    ragged = jax.jit(jax.lax.ragged_dot)
    dense = jax.jit(lambda a, b: a @ b)
    for shape in shapes:
        name, groups, k, n = shape
        key = jax.random.PRNGKey(0)
        w = jax.random.normal(key, (groups, k, n), jnp.bfloat16)
        for tokens in counts:
            for routing in ("balanced", "random"):
                sizes = group_sizes(rng, groups, tokens, routing, 16)
                m = sum(sizes)
                x = jax.random.normal(key, (m, k), jnp.bfloat16)
                gs = jnp.array(sizes, jnp.int32)
                flops = 2.0 * m * k * n
                row = grouped_row(shape, tokens, routing)
                try:
                    row["ragged_dot_flops_per_s"] = flops / median_s(
                        ragged, x, w, gs)
                    row["dense_flops_per_s"] = flops / median_s(
                        dense, x, w[0])
                except Exception as e:  # a lowering the backend lacks
                    row["error"] = str(e)[:300]
                out["runs"].append(row)
        log(f"grouped_jax: {name} done")
        write(outdir, "grouped_jax", out)
    write(outdir, "grouped_jax", out)


def kernel_class(name):
    """A CUDA kernel's part of the step, by its name."""
    n = name.lower()
    if "flash" in n or "fmha" in n or "attention" in n:
        return "attention"
    if any(k in n for k in ("gemm", "xmma", "cutlass", "nvjet", "cublas",
                            "sm90_", "wgmma")):
        return "matmul"
    if "adam" in n:
        return "optimizer"
    return "elementwise"


def part_profile(outdir, dry):
    """One eager step of the first torch run under torch.profiler: each
    kernel's device time, by class (matmul, attention, optimizer,
    elementwise), against the step's wall time."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    dev = "cpu" if dry else "cuda"
    run = torch_setup(torch, dev, dry, TORCH_RUNS[0])
    opt, loss_fn, tokens = run.opt, run.loss_fn, run.tokens

    def step():
        loss_fn(tokens, tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    for _ in range(3):
        step()
    sync = (lambda: None) if dry else torch.cuda.synchronize
    sync()
    activities = [ProfilerActivity.CPU] + (
        [] if dry else [ProfilerActivity.CUDA])
    steps = 2
    with profile(activities=activities) as prof:
        t = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        wall = (time.perf_counter() - t) / steps
    kernels = []
    for e in prof.key_averages():
        device = getattr(e, "self_device_time_total", None)
        if device is None:
            device = getattr(e, "self_cuda_time_total", 0)
        if device and device > 0 and is_kernel(e.key):
            kernels.append({"name": e.key[:160], "count": e.count // steps,
                            "seconds": device / 1e6 / steps,
                            "class": kernel_class(e.key)})
    kernels.sort(key=lambda k: -k["seconds"])
    by_class = {}
    for k in kernels:
        by_class[k["class"]] = by_class.get(k["class"], 0) + k["seconds"]
    out = {"run": TORCH_RUNS[0], "step_wall_s": wall,
           "device_busy_s": sum(k["seconds"] for k in kernels),
           "by_class_s": by_class, "kernels": kernels[:60],
           "kernel_launches": sum(k["count"] for k in kernels)}
    write(outdir, "profile", out)


def part_attention(outdir, dry):
    """Flash attention alone: PyTorch's SDPA and JAX's cuDNN kernel,
    causal, forward and forward + backward, at the first run's shape."""
    import torch
    F = torch.nn.functional
    dev = "cpu" if dry else "cuda"
    bench = timer(torch, dry)
    name, _, _, seq, batch = TORCH_RUNS[0]
    cfg, seq, batch = shape_of(dry, name, seq, batch)
    b, h, s, d = batch, cfg["heads"], seq, cfg["head_dim"]
    # FLOPs: the two matmuls, causal half: 2 * 2 * b h s^2 d / 2; the
    # backward's five matmuls 2.5 times that (FlashAttention-2's count).
    fwd_flops = 2 * b * h * s * s * d
    out = {"shape": [b, h, s, d], "causal": True,
           "forward_flops": fwd_flops, "backward_flops": 2.5 * fwd_flops}
    q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    if hasattr(F, "scaled_dot_product_attention"):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        g = torch.randn_like(o)
        fwd = bench(lambda: F.scaled_dot_product_attention(
            q, k, v, is_causal=True))
        both = bench(lambda: torch.autograd.grad(
            F.scaled_dot_product_attention(q, k, v, is_causal=True),
            (q, k, v), g))
        out["torch_sdpa"] = {
            "forward_s": fwd, "forward_backward_s": both,
            "forward_flops_per_s": fwd_flops / fwd,
            "backward_flops_per_s": 2.5 * fwd_flops / (both - fwd)}
    write(outdir, "attention", out)
    del q, k, v
    if not dry:
        torch.cuda.empty_cache()
    command = [sys.executable, os.path.abspath(__file__), outdir, "--part",
               "attention-jax"] + (["--dry"] if dry else [])
    subprocess.run(command, timeout=45, check=False)


def part_attention_jax(outdir, dry):
    if dry:
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import jax.numpy as jnp
    with open(os.path.join(outdir, "attention.json"), encoding="utf-8") as f:
        out = json.load(f)
    b, h, s, d = out["shape"]
    fwd_flops = out["forward_flops"]
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q, k, v = (jax.random.normal(kk, (b, s, h, d), jnp.bfloat16)
               for kk in keys)
    implementation = None if dry else "cudnn"

    def attend(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True,
                                            implementation=implementation)
    fwd = jax.jit(attend)
    both = jax.jit(jax.grad(lambda q, k, v: attend(q, k, v).astype(
        jnp.float32).sum(), argnums=(0, 1, 2)))

    def median(fn):
        jax.block_until_ready(fn(q, k, v))
        times = []
        for _ in range(20):
            t = time.perf_counter()
            jax.block_until_ready(fn(q, k, v))
            times.append(time.perf_counter() - t)
        return sorted(times)[10]
    try:
        tf, tb = median(fwd), median(both)
        out["jax_cudnn"] = {"forward_s": tf, "forward_backward_s": tb,
                            "forward_flops_per_s": fwd_flops / tf,
                            "backward_flops_per_s":
                                2.5 * fwd_flops / (tb - tf)}
    except Exception:
        out["jax_cudnn"] = {"error": traceback.format_exc()[-800:]}
    write(outdir, "attention", out)


def part_compiled(outdir, dry):
    """The first torch run with each layer under torch.compile (fused
    elementwise kernels, as torchtitan's --compile.enable)."""
    import torch
    dev = "cpu" if dry else "cuda"

    def compile_layers(model):
        for layer in model.layers:
            if hasattr(layer, "compile"):  # not in the dry run's old torch
                layer.compile()
    run = torch_setup(torch, dev, dry, TORCH_RUNS[0], compile_layers)
    cfg, seq, batch = run.cfg, run.seq, run.batch
    opt, loss_fn, tokens = run.opt, run.loss_fn, run.tokens
    sync = (lambda: None) if dry else torch.cuda.synchronize
    if not dry:
        torch.cuda.reset_peak_memory_stats()
    t = time.time()
    times = []
    for i in range(11):
        sync()
        t0 = time.perf_counter()
        loss_fn(tokens, tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        if i == 0:
            first = time.time() - t
        if i >= 3:
            times.append(time.perf_counter() - t0)
    med = sorted(times)[len(times) // 2]
    out = {"run": TORCH_RUNS[0], "compile": "each layer, torch.compile",
           "first_step_s": first, "step_s": med, "step_s_all": times,
           "model_flops": model_flops(cfg, seq, batch),
           "tokens_per_s": seq * batch / med}
    out["model_flops_per_s"] = out["model_flops"] / med
    if not dry:
        out["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        out["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    write(outdir, "compiled", out)


# ------------------------------------------------------------------ jax


def part_jax(outdir, dry):
    """Each run in its own process: XLA's peak is the process's."""
    out = {"runs": []}
    for index in range(len(JAX_RUNS)):
        command = [sys.executable, os.path.abspath(__file__), outdir,
                   "--part", "jax-one", "--index", str(index)]
        command += ["--dry"] if dry else []
        subprocess.run(command, timeout=75, check=False)
        try:
            with open(os.path.join(outdir, f"jax-{index}.json"),
                      encoding="utf-8") as f:
                one = json.load(f)
            os.remove(os.path.join(outdir, f"jax-{index}.json"))
        except (OSError, ValueError) as e:
            one = {"runs": [{"model": JAX_RUNS[index][0],
                             "remat": JAX_RUNS[index][1],
                             "batch": JAX_RUNS[index][3],
                             "error": f"no result: {e}"}]}
        out.update({k: v for k, v in one.items() if k != "runs"})
        out["runs"] += one["runs"]
        write(outdir, "jax", out)
    return out


def part_jax_one(outdir, dry, index):
    if dry:
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import jax.numpy as jnp
    import optax
    name, remat, seq, batch = JAX_RUNS[index]
    out = {"jax": jax.__version__, "devices": str(jax.devices())}
    start = time.time()
    try:
        row = jax_run(jax, jnp, optax, dry, name, remat, seq, batch)
    except Exception as e:
        row = {"model": name, "remat": remat, "seq": seq, "batch": batch,
               "error": traceback.format_exc()[-1500:]}
        log(f"jax: {name} {remat}: {e}")
    row["wall_s"] = time.time() - start
    out["runs"] = [row]
    write(outdir, f"jax-{index}", out)


def jax_init(jax, jnp, cfg):
    key = jax.random.PRNGKey(0)
    h, d, L = cfg["hidden"], cfg["head_dim"], cfg["layers"]

    def w(key, *shape):
        return jax.random.normal(key, shape, jnp.float32) * 0.02
    ks = jax.random.split(key, 10)
    layers = {
        "wq": w(ks[0], L, h, cfg["heads"] * d),
        "wk": w(ks[1], L, h, cfg["kv_heads"] * d),
        "wv": w(ks[2], L, h, cfg["kv_heads"] * d),
        "wo": w(ks[3], L, cfg["heads"] * d, h),
        "w1": w(ks[4], L, h, cfg["ffn"]),
        "w3": w(ks[5], L, h, cfg["ffn"]),
        "w2": w(ks[6], L, cfg["ffn"], h),
        "attention_norm": jnp.ones((L, h), jnp.float32),
        "ffn_norm": jnp.ones((L, h), jnp.float32),
    }
    return {"embed": w(ks[7], cfg["vocab"], h), "layers": layers,
            "norm": jnp.ones((h,), jnp.float32),
            "output": w(ks[8], h, cfg["vocab"])}


def jax_run(jax, jnp, optax, dry, name, remat, seq, batch):
    cfg, seq, batch = shape_of(dry, name, seq, batch)
    bf16 = jnp.bfloat16
    nh, nkv, d = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    freqs = 1.0 / (500000.0 ** (jnp.arange(0, d, 2) / d))
    angles = jnp.outer(jnp.arange(seq), freqs)
    cos, sin = jnp.cos(angles), jnp.sin(angles)

    def rms(x, wt):
        xf = x.astype(jnp.float32)
        y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + 1e-5)
        return (y * wt).astype(bf16)

    def rope(x):
        x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s],
                               -1).astype(bf16)

    def dense(x, wt):  # MaxText: fp32 weights cast to the bf16 dtype
        return jnp.einsum("bsh,hf->bsf", x, wt.astype(bf16))

    def layer(x, p, implementation):
        b, s, _ = x.shape
        y = rms(x, p["attention_norm"])
        q = rope(dense(y, p["wq"]).reshape(b, s, nh, d))
        k = rope(dense(y, p["wk"]).reshape(b, s, nkv, d))
        v = dense(y, p["wv"]).reshape(b, s, nkv, d)
        o = jax.nn.dot_product_attention(q, k, v, is_causal=True,
                                         implementation=implementation)
        x = x + dense(o.reshape(b, s, nh * d), p["wo"])
        y = rms(x, p["ffn_norm"])
        return x + dense(jax.nn.silu(dense(y, p["w1"])) * dense(y, p["w3"]),
                         p["w2"])

    def make_step(implementation):
        def one_layer(x, p):
            return layer(x, p, implementation)
        if remat == "full":
            one_layer = jax.checkpoint(
                one_layer, policy=jax.checkpoint_policies.nothing_saveable)

        def loss_fn(params, tokens, labels):
            x = params["embed"].astype(bf16)[tokens]

            def body(x, p):
                return one_layer(x, p), None
            x, _ = jax.lax.scan(body, x, params["layers"])
            x = rms(x, params["norm"])
            logits = dense(x, params["output"]).astype(jnp.float32)
            return optax.softmax_cross_entropy_with_integer_labels(
                logits, labels).mean()

        def step(params, state, tokens, labels):
            loss, grads = jax.value_and_grad(loss_fn)(params, tokens,
                                                      labels)
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state, loss
        return step

    opt = optax.adamw(1e-4)

    params = jax_init(jax, jnp, cfg)
    state = opt.init(params)
    key = jax.random.PRNGKey(1)
    tokens = jax.random.randint(key, (batch, seq), 0, cfg["vocab"])
    labels = jax.random.randint(jax.random.PRNGKey(2), (batch, seq), 0,
                                cfg["vocab"])
    row = {"model": name, "config": cfg, "remat": remat, "seq": seq,
           "batch": batch, "params": param_count(cfg)}
    compiled = None
    for candidate in ([None] if dry else ["cudnn", None]):
        try:
            t = time.time()
            step = make_step(candidate)
            compiled = jax.jit(step, donate_argnums=(0, 1)).lower(
                params, state, tokens, labels).compile()
            row["compile_s"] = time.time() - t
            row["attention_implementation"] = candidate or "xla"
            break
        except Exception as e:
            row.setdefault("attention_errors", []).append(str(e)[:300])
    if compiled is None:
        raise RuntimeError("no attention implementation compiled")
    try:
        ma = compiled.memory_analysis()
        row["memory_analysis"] = {
            k: getattr(ma, k) for k in (
                "temp_size_in_bytes", "argument_size_in_bytes",
                "output_size_in_bytes", "alias_size_in_bytes",
                "generated_code_size_in_bytes")
            if hasattr(ma, k)}
    except Exception as e:
        row["memory_analysis_error"] = str(e)[:300]
    steps, warmup = (2, 1) if dry else (8, 3)
    times = []
    for i in range(warmup + steps):
        t = time.perf_counter()
        params, state, loss = compiled(params, state, tokens, labels)
        loss.block_until_ready()
        if i >= warmup:
            times.append(time.perf_counter() - t)
    med = sorted(times)[len(times) // 2]
    row.update({"loss": float(loss), "step_s": med, "step_s_all": times,
                "model_flops": model_flops(cfg, seq, batch)})
    row["model_flops_per_s"] = row["model_flops"] / med
    row["tokens_per_s"] = seq * batch / med
    try:
        stats = jax.devices()[0].memory_stats() or {}
        row["peak_bytes_in_use"] = stats.get("peak_bytes_in_use")
        row["bytes_limit"] = stats.get("bytes_limit")
    except Exception as e:
        row["memory_stats_error"] = str(e)[:300]
    del params, state
    return row


# --------------------------------------------------------------- driver


def environment(dry):
    env = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "host": platform.node(), "python": platform.python_version()}
    if not dry:
        query = ("name,memory.total,driver_version,clocks.sm,clocks.max.sm,"
                 "clocks.mem,power.limit,temperature.gpu")
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=" + query, "--format=csv"],
            capture_output=True, text=True, check=False)
        env["nvidia_smi"] = done.stdout.strip()
    return env


def summary(outdir):
    def load(name):
        try:
            with open(os.path.join(outdir, name + ".json"),
                      encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None
    c = load("ceilings")
    if c:
        print("ceilings:", {k: f"{v:.4g}" for k, v in c.items()})
    g = load("gemm")
    if g:
        for dtype in ("bf16", "fp8", "fp8_fast_accum"):
            if g.get(dtype):
                print(f"gemm {dtype}: best {max(g[dtype]) / 1e12:.0f} "
                      f"TFLOP/s, 8192^3 {g[dtype][-1] / 1e12:.0f}, "
                      f"256^3 {g[dtype][0] / 1e12:.1f}")
        if g.get("fp8_error"):
            print("gemm fp8 error:", g["fp8_error"])
    a = load("attention") or {}
    for kernel in ("torch_sdpa", "jax_cudnn"):
        if kernel in a:
            print(f"attention {kernel}:", {k: f"{v:.4g}" if isinstance(
                v, float) else v for k, v in a[kernel].items()})
    p = load("profile")
    if p:
        # The kernels alone (the 2026-11-28 data also list CPU-side ops).
        p["kernels"] = [k for k in p["kernels"] if is_kernel(k["name"])]
        p["by_class_s"] = {}
        for k in p["kernels"]:
            p["by_class_s"][k["class"]] = p["by_class_s"].get(
                k["class"], 0) + k["seconds"]
        p["device_busy_s"] = sum(p["by_class_s"].values())
        print(f"profile: wall {p['step_wall_s'] * 1e3:.1f} ms, busy "
              f"{p['device_busy_s'] * 1e3:.1f} ms, launches "
              f"{p['kernel_launches']}:",
              {k: f"{v * 1e3:.1f} ms" for k, v in p["by_class_s"].items()})
        for k in p["kernels"][:12]:
            print(f"  {k['seconds'] * 1e3:7.2f} ms {k['count']:5d}x "
                  f"{k['class']:11s} {k['name'][:90]}")
    e = load("elementwise")
    if e:
        for op, o in e["ops"].items():
            print(f"elementwise {op}: {o['bytes_per_s'] / 1e12:.2f} TB/s")
        print(f"elementwise all: {e['all_bytes_per_s'] / 1e12:.2f} TB/s")
    sv = load("saved")
    if sv:
        for w, layer in sv["per_layer"].items():
            print(f"saved per layer, {w}: "
                  f"{layer['bytes_per_token'] / layer['hidden']:.2f} x h "
                  "bytes a token")
            for k, v in sorted(layer["by_tensor_bytes_per_token"].items()):
                print(f"  {k}: {v / layer['hidden']:.2f} x h")
        if "phases_first_run" in sv:
            print("phases (GiB):", {k: round(v / 2**30, 2) for k, v in
                                    sv["phases_first_run"].items()})
    fs = load("fsdp")
    if fs:
        for r in fs.get("runs", []):
            if "error" in r:
                print(f"fsdp {r['model']} remat {r['remat']} ERROR",
                      r["error"].splitlines()[-1])
                continue
            print(f"fsdp {r['model']} remat {r['remat']} b{r['batch']}: "
                  f"step {r['step_s'] * 1e3:.1f} ms", {
                      k: round(r[k] / 2**30, 2) for k in (
                          "start", "after_forward", "peak_allocated_bytes",
                          "peak_reserved_bytes") if k in r})
        if "error" in fs:
            print("fsdp:", fs["error"])
    for part, keys in (("grouped", ("grouped_mm", "grouped_mm_fwd_bwd",
                                    "loop", "dense")),
                       ("grouped_jax", ("ragged_dot", "dense")),
                       ("grouped_loop", ("loop_fwd_bwd",
                                         "grouped_mm_fwd_bwd"))):
        for r in (load(part) or {"runs": []})["runs"]:
            rates = {key: round(r[key + "_flops_per_s"] / 1e12) for key in
                     keys if key + "_flops_per_s" in r}
            print(f"{part} {r['shape']} {r['tokens_per_expert']}/expert "
                  f"{r['routing']}: TFLOP/s", rates,
                  r.get("error") or r.get("grouped_mm_error") or "")
    su = load("sustained")
    if su:
        for r in su["runs"]:
            rates = [round(x / 1e12) for x in r["per_second"]]
            print(f"sustained {r['m']}x{r['n']}x{r['k']}: TFLOP/s a second",
                  rates)
    c = load("compiled")
    if c:
        print(f"compiled: step {c['step_s'] * 1e3:.1f} ms, first "
              f"{c['first_step_s']:.0f} s, "
              f"{c['model_flops_per_s'] / 1e12:.0f} TFLOP/s model, peak "
              f"{(c.get('peak_allocated_bytes') or 0) / 2**30:.2f} GiB")
    for part in ("torch", "jax"):
        data = load(part) or {"runs": []}
        for r in data["runs"]:
            tag = (f"{part} {r['model']} {r.get('weights', 'maxtext')} "
                   f"remat {r['remat']} b{r['batch']}")
            if "error" in r:
                print(tag, "ERROR", r["error"].splitlines()[-1])
                continue
            step = r["seconds"]["step"] if part == "torch" else r["step_s"]
            peak = r.get("peak_allocated_bytes") or r.get(
                "peak_bytes_in_use") or 0
            print(f"{tag}: step {step * 1e3:.1f} ms, "
                  f"{r['model_flops_per_s'] / 1e12:.0f} TFLOP/s model, "
                  f"peak {peak / 2**30:.2f} GiB")


def main(argv):
    args = [a for a in argv[1:2] if not a.startswith("--")]
    dry = "--dry" in argv
    outdir = args[0] if args else "."
    os.makedirs(outdir, exist_ok=True)
    if "--summary" in argv:
        summary(outdir)
        return 0
    if "--part" in argv:
        part = argv[argv.index("--part") + 1]
        if part == "jax-one":
            part_jax_one(outdir, dry, int(argv[argv.index("--index") + 1]))
            return 0
        if part == "attention-jax":
            part_attention_jax(outdir, dry)
            return 0
        {"ceilings": part_ceilings, "gemm": part_gemm, "torch": part_torch,
         "jax": part_jax, "attention": part_attention,
         "profile": part_profile, "compiled": part_compiled,
         "elementwise": part_elementwise, "saved": part_saved,
         "fsdp": part_fsdp, "grouped": part_grouped,
         "grouped_jax": part_grouped_jax,
         "grouped_loop": part_grouped_loop,
         "sustained": part_sustained}[part](outdir, dry)
        return 0
    write(outdir, "environment", environment(dry))
    only = PARTS
    if "--only" in argv:
        only = argv[argv.index("--only") + 1].split(",")
    for part in only:
        start = time.time()
        command = [sys.executable, os.path.abspath(__file__), outdir,
                   "--part", part] + (["--dry"] if dry else [])
        try:
            done = subprocess.run(command, timeout=TIMEOUT_S[part],
                                  check=False)
            log(f"{part}: exit {done.returncode}, "
                f"{time.time() - start:.0f} s")
        except subprocess.TimeoutExpired:
            log(f"{part}: timed out after {TIMEOUT_S[part]} s")
    summary(outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
