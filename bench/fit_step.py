#!/usr/bin/env python3
"""Fits the step's per-chip efficiencies to the calibration set.

For each chip family with rows marked "fit" in bench/measured_runs.json, it
finds the fraction of the bf16 peak the weights' matmuls reach
(matmul_efficiency) and, with three or more rows, the fraction the
attention kernel reaches (attention_efficiency), minimising the squared
log error of the step time (or tokens/s) over those rows, with each run as
its users configure it. With fewer rows, or where measured_runs.json's
"one_constant" names the family (with its reason), one constant is fitted,
and the attention kernel takes the same efficiency. These are shardplan's fitted
constants: at most two per chip family, each named in the step's
assumptions with its source (docs/fidelity.md).

Usage: bench/fit_step.py [--write] [--leave-one-out] [SHARDPLAN]
  --write          put the fitted figures into configs/topologies/<family>.json
  --leave-one-out  for each family of three or more rows, fit without each
                   row in turn and print that row's error: the held-out
                   figure (docs/fidelity.md keeps it; with --write, there)
"""

import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measured_runs  # noqa: E402

ROOT = measured_runs.ROOT
GOLDEN = (math.sqrt(5) - 1) / 2


def loss(shardplan, rows, matmul, attention):
    total = 0.0
    for run in rows:
        doc, error = measured_runs.estimate(
            shardplan, run, ["--matmul-efficiency", f"{matmul:.4f}",
                             "--attention-efficiency", f"{attention:.4f}"])
        if doc is None:
            sys.exit(f"fit_step: {run['id']}: {error}")
        r = measured_runs.step_ratio(run, doc.get("step"))
        total += math.log(r) ** 2
    return total


def golden(f, lo, hi, steps=14):
    """The minimum of a unimodal f on [lo, hi]."""
    a, b = lo, hi
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(steps):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = f(d)
    return (a + b) / 2


def nelder_mead(f, start, step=0.1, iterations=60):
    """The minimum of f near `start` (Nelder and Mead 1965), in 2 dims."""
    points = [list(start), [start[0] + step, start[1]],
              [start[0], start[1] + step]]
    values = [f(p) for p in points]
    for _ in range(iterations):
        order = sorted(range(3), key=lambda i: values[i])
        points = [points[i] for i in order]
        values = [values[i] for i in order]
        centre = [(points[0][k] + points[1][k]) / 2 for k in range(2)]
        worst = points[2]
        reflect = [centre[k] + (centre[k] - worst[k]) for k in range(2)]
        fr = f(reflect)
        if fr < values[0]:
            expand = [centre[k] + 2 * (centre[k] - worst[k]) for k in range(2)]
            fe = f(expand)
            points[2], values[2] = (expand, fe) if fe < fr else (reflect, fr)
        elif fr < values[1]:
            points[2], values[2] = reflect, fr
        else:
            inner = [centre[k] + (worst[k] - centre[k]) / 2 for k in range(2)]
            fi = f(inner)
            if fi < values[2]:
                points[2], values[2] = inner, fi
            else:
                for i in (1, 2):
                    points[i] = [(points[0][k] + points[i][k]) / 2
                                 for k in range(2)]
                    values[i] = f(points[i])
    return points[min(range(3), key=lambda i: values[i])]


def fit(shardplan, rows, one_constant):
    if len(rows) < 3 or one_constant:
        m = golden(lambda x: loss(shardplan, rows, x, x), 0.2, 1.0)
        return m, m

    def bounded(p):
        m, a = p
        if not (0.05 <= m <= 1.0 and 0.05 <= a <= 1.0):
            return float("inf")
        return loss(shardplan, rows, m, a)

    m, a = nelder_mead(bounded, [0.6, 0.5])
    return m, a


def dump_family(path, doc):
    """Writes a catalogue family file, its matmul_curve's numbers on a few
    lines (five rates a line) as the catalogue keeps them."""
    text = json.dumps(doc, indent=2)
    curve = doc.get("matmul_curve")
    if curve:
        rates = curve["rates"]
        rows = ["      " + ", ".join(str(x) for x in rates[i:i + 5])
                for i in range(0, len(rates), 5)]
        text = re.sub(r'"rates": \[\n.*?\n\s*\]',
                      lambda _: '"rates": [\n' + ",\n".join(rows)
                      + "\n    ]", text, count=1, flags=re.S)
        text = re.sub(r'"dims": \[\n.*?\n\s*\]',
                      lambda _: '"dims": ['
                      + ", ".join(str(x) for x in curve["dims"]) + "]",
                      text, count=1, flags=re.S)
    assert json.loads(text) == doc
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def write(family, ids, matmul, attention, spread, one_constant=None):
    path = os.path.join(ROOT, "configs", "topologies", f"{family}.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    runs = ", ".join(ids)
    shared = matmul == attention
    doc["figures"]["matmul_efficiency"] = {
        "value": round(matmul, 3),
        "source": f"fitted to {len(ids)} published run"
                  f"{'s' if len(ids) > 1 else ''} ({runs}) by "
                  "bench/fit_step.py (docs/fidelity.md)"}
    doc["figures"]["attention_efficiency"] = {
        "value": round(attention, 3),
        "source": ("the same fitted constant as matmul_efficiency: "
                   + (f"{one_constant} " if one_constant else
                      "too few runs to fit the attention kernel's apart ")
                   + "(bench/fit_step.py, docs/fidelity.md)") if shared else
                  f"fitted to {len(ids)} published runs ({runs}) by "
                  "bench/fit_step.py (docs/fidelity.md)"}
    doc["figures"]["efficiency_spread"] = {
        "value": round(spread, 3),
        "source": f"the fit's largest step error on its {len(ids)} runs, "
                  "at least 0.05 (bench/fit_step.py, docs/fidelity.md)"
                  if len(ids) >= 3 else
                  f"{len(ids)} run{'s' if len(ids) > 1 else ''} cannot say "
                  "how far another run is off: 0.25 (bench/fit_step.py, "
                  "docs/fidelity.md)"}
    dump_family(path, doc)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    shardplan = measured_runs.binary([sys.argv[0]] + args)
    families = {}
    with open(os.path.join(ROOT, "bench", "measured_runs.json"),
              encoding="utf-8") as f:
        one_constant = json.load(f).get("one_constant", {})
    for run in measured_runs.load_runs():
        if run.get("fit"):
            families.setdefault(run["family"], []).append(run)
    fitted = {}
    for family, rows in sorted(families.items()):
        matmul, attention = fit(shardplan, rows, family in one_constant)
        fitted[family] = matmul
        print(f"{family}: matmul_efficiency {matmul:.3f}, "
              f"attention_efficiency {attention:.3f} "
              f"({len(rows)} runs: {', '.join(r['id'] for r in rows)})")
        worst = 0.0
        for run in rows:
            doc, _ = measured_runs.estimate(
                shardplan, run, ["--matmul-efficiency", f"{matmul:.4f}",
                                 "--attention-efficiency", f"{attention:.4f}"])
            r = measured_runs.step_ratio(run, doc.get("step"))
            worst = max(worst, abs(r - 1))
            print(f"  {run['id']}: step ratio {r:.3f}")
        # The band: the fit's largest error, at least 5%; a fit to fewer
        # than three runs says nothing of another run's error: 25%.
        spread = max(worst, 0.05) if len(rows) >= 3 else 0.25
        print(f"  efficiency_spread {spread:.3f}")
        if "--write" in sys.argv:
            write(family, [r["id"] for r in rows], matmul, attention, spread,
                  one_constant.get(family))
    write_measured_spread(fitted)
    if "--leave-one-out" in sys.argv:
        lines = leave_one_out(shardplan, families, one_constant)
        print("\n".join(lines))
        if "--write" in sys.argv:
            write_leave_one_out(lines)


def leave_one_out(shardplan, families, one_constant):
    """Each row's step ratio from a fit to its family's other rows."""
    lines = ["| run | family | step ratio, fitted without it |",
             "| --- | --- | ---: |"]
    errors = []
    for family, rows in sorted(families.items()):
        if len(rows) < 3:
            continue
        for held in rows:
            others = [r for r in rows if r is not held]
            matmul, attention = fit(shardplan, others,
                                    family in one_constant)
            doc, _ = measured_runs.estimate(
                shardplan, held, ["--matmul-efficiency", f"{matmul:.4f}",
                                  "--attention-efficiency",
                                  f"{attention:.4f}"])
            r = measured_runs.step_ratio(held, doc.get("step"))
            errors.append(abs(r - 1))
            lines.append(f"| {held['id']} | {family} | {r:.2f} |")
    if errors:
        lines.append("")
        lines.append(f"Held out this way, the mean error is "
                     f"{100 * sum(errors) / len(errors):.1f}% and the "
                     f"largest {100 * max(errors):.1f}% over "
                     f"{len(errors)} rows.")
    return lines


LOO_BEGIN = "<!-- table: bench/fit_step.py --leave-one-out --write -->"


def write_leave_one_out(lines):
    path = os.path.join(ROOT, "docs", "fidelity.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    begin = text.index(LOO_BEGIN) + len(LOO_BEGIN)
    end = text.index(measured_runs.END, begin)
    text = text[:begin] + "\n" + "\n".join(lines) + "\n" + text[end:]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


# Chips with no calibration run whose efficiency is the measured maximum
# achievable matmul rate (docs/sources.md#mamf), and the GPU family whose
# fit says how far below that maximum training runs reach: the band's
# spread is 1 - fitted / maximum of that family (the H100 MAMF: 792.1 of
# 989 TFLOP/s, the same source).
MEASURED_ONLY = {"a100": ("h100", 792.1 / 989),
                 "h200": ("h100", 792.1 / 989)}


def write_measured_spread(fitted):
    for family, (donor, maximum) in MEASURED_ONLY.items():
        if donor not in fitted:
            continue
        spread = 1 - fitted[donor] / maximum
        print(f"{family}: efficiency_spread {spread:.3f} (1 - {donor}'s "
              f"fitted {fitted[donor]:.3f} / its measured maximum "
              f"{maximum:.3f})")
        if "--write" not in sys.argv:
            continue
        path = os.path.join(ROOT, "configs", "topologies", f"{family}.json")
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        doc["figures"]["efficiency_spread"] = {
            "value": round(spread, 3),
            "source": f"no calibration run on this chip: training on the "
                      f"{donor.upper()} reaches {fitted[donor]:.3f} of the "
                      f"peak where its measured maximum is {maximum:.3f}, "
                      f"so the band reaches {spread:.3f} below the measured "
                      "maximum (bench/fit_step.py, docs/fidelity.md)"}
        dump_family(path, doc)


if __name__ == "__main__":
    main()
