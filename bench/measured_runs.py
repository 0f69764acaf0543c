#!/usr/bin/env python3
"""The calibration set of published, measured training runs through shardplan.

The rows are bench/measured_runs.json: each run as its users configure it (a
MaxText config in bench/measured/ alone, or a PyTorch run's flags), what it
measured and where that was published. Each is run through `shardplan
memory --format json`; the table printed compares shardplan's verdict,
peak and step with the measurement. docs/fidelity.md and docs/memory.md
("Measured runs") keep the table; rerun this script to regenerate it.

Usage: bench/measured_runs.py [--write] [--check] [SHARDPLAN]
       (default build/release/shardplan, else build/dev/shardplan)
  --write   put the table into docs/fidelity.md and docs/memory.md
  --check   exit 1 when a run does not fit, a fitted row's step is off by
            more than 15% (a row with "within": by more than that), a
            measured peak by more than 5%, or the measured step lies
            inside the band on under 90% of the rows; a row's
            "known_miss" (or, for its peak, "memory_miss") is printed, not
            failed
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = float(1 << 30)


def load_runs():
    with open(os.path.join(ROOT, "bench", "measured_runs.json"),
              encoding="utf-8") as f:
        return json.load(f)["runs"]


def binary(argv):
    if len(argv) > 1:
        return argv[1]
    for build in ("release", "dev"):
        path = os.path.join(ROOT, "build", build, "shardplan")
        if os.path.exists(path):
            return path
    sys.exit("measured_runs: build shardplan first (make build)")


def estimate(shardplan, run, extra=()):
    """shardplan's JSON for `run`, or (None, the error's last line)."""
    command = [shardplan, "memory", "--format", "json",
               "--topology", run["topology"]]
    command += run.get("flags", "").split()
    if "config" in run:
        command += ["--maxtext-config", run["config"]]
    command += list(extra)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          check=False)
    if done.returncode not in (0, 1):
        return None, done.stderr.strip().splitlines()[-1]
    return json.loads(done.stdout), None


def step_ratio(run, step):
    """The estimated step over the measured one (tokens/s: measured over
    estimated, the same ratio); None without a measurement."""
    if not step:
        return None
    if run.get("step_s"):
        return step["step_seconds"] / run["step_s"]
    if run.get("tokens_per_s_per_device"):
        return run["tokens_per_s_per_device"] / step[
            "tokens_per_second_per_device"]
    return None


# The documents that keep the table, between these markers.
DOCS = ("docs/fidelity.md", "docs/memory.md")
BEGIN = "<!-- table: bench/measured_runs.py --write -->"
END = "<!-- end table -->"


def table(shardplan, failures):
    """The table's lines; each row outside the bounds into `failures`."""
    lines = [
        "| run | model | fits | peak GiB | HBM GiB | measured peak GiB |"
        " step s | band s | measured step s | tokens/s/dev |"
        " measured tokens/s/dev | step ratio | in band | fitted |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        " ---: | ---: | --- | --- |"]
    inside = []
    held_out = {}  # group: the errors of rows nothing is fitted to
    for run in load_runs():
        # A known miss (the row's "known_miss", with its reason) is shown
        # and printed, not failed.
        missed = []
        checked = failures
        if run.get("known_miss"):
            checked = missed
        doc, error = estimate(shardplan, run)
        if doc is None:
            lines.append(f"| {run['id']} | {run['model']} | error: {error} |"
                         " | | | | | | | | | | |")
            checked.append(f"{run['id']}: {error}")
            continue
        memory = doc["memory"]
        step = doc.get("step") or {}
        peak = memory["reserved_bytes"] / GIB
        hbm = (memory["hbm_bytes"] or 0) / GIB
        est_step = step.get("step_seconds")
        est_tokens = step.get("tokens_per_second_per_device")
        r = step_ratio(run, step)
        # The measured step inside the band: the ratio within the band's
        # ratios to the point estimate.
        band = ""
        within = None
        if r is not None and step:
            low = step["step_seconds_low"] / step["step_seconds"]
            high = step["step_seconds_high"] / step["step_seconds"]
            band = (f"{step['step_seconds_low']:.2f}-"
                    f"{step['step_seconds_high']:.2f}")
            within = low <= 1 / r <= high
            inside.append(within)
        if r is not None and not run.get("fit"):
            group = "the other rows"
            if run["id"].startswith("t5-"):
                group = "Korthikanti et al. 2022 Table 5 (A100)"
            elif run["id"].startswith("gpu-"):
                group = "measured here on an H200 (bench/gpu)"
            held_out.setdefault(group, []).append(abs(r - 1))
        if not memory["fits"]:
            checked.append(f"{run['id']}: does not fit, but it ran")
        if run.get("fit") and (r is None or abs(r - 1) > 0.15):
            checked.append(f"{run['id']}: step ratio {r:.3f}, a fitted row")
        if run.get("within") and r is not None and abs(r - 1) > run[
                "within"]:
            checked.append(f"{run['id']}: step ratio {r:.3f}, beyond the "
                           f"row's {run['within']:.0%}")
        for miss in missed:
            print(f"known miss: {miss} ({run['known_miss']})",
                  file=sys.stderr)
        if run.get("peak_gib") and abs(peak / run["peak_gib"] - 1) > 0.05:
            miss = (f"{run['id']}: peak {peak:.1f} GiB, measured "
                    f"{run['peak_gib']}")
            # A known memory miss (the row's "memory_miss") is printed.
            if run.get("memory_miss"):
                print(f"known miss: {miss} ({run['memory_miss']})",
                      file=sys.stderr)
            else:
                checked.append(miss)
        lines.append(f"| {run['id']} | {run['model']} |"
              f" {'yes' if memory['fits'] else 'NO'} |"
              f" {peak:.1f} | {hbm:.2f} |"
              f" {run.get('peak_gib', '')} |"
              f" {'' if est_step is None else f'{est_step:.2f}'} |"
              f" {band} |"
              f" {run.get('step_s', '')} |"
              f" {'' if est_tokens is None else f'{est_tokens:,.0f}'} |"
              f" {format(run['tokens_per_s_per_device'], ',.0f') if run.get('tokens_per_s_per_device') else ''} |"
              f" {'' if r is None else f'{r:.2f}'} |"
              f" {'' if within is None else ('yes' if within else 'NO')} |"
              f" {'yes' if run.get('fit') else 'no'} |")
    if inside and sum(inside) < 0.9 * len(inside):
        failures.append(f"the measured step is inside the band on "
                        f"{sum(inside)} of {len(inside)} rows, under 90%")
    lines.append("")
    lines.append(f"The measured step lies inside the band on {sum(inside)} "
                 f"of {len(inside)} rows.")
    for group, errors in sorted(held_out.items()):
        lines.append("")
        lines.append(f"Held out (nothing fitted to them), {group}: mean "
                     f"step error {100 * sum(errors) / len(errors):.1f}%, "
                     f"largest {100 * max(errors):.1f}%, over {len(errors)} "
                     "rows.")
    return lines


def write(lines):
    for doc in DOCS:
        path = os.path.join(ROOT, doc)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        begin = text.index(BEGIN) + len(BEGIN)
        end = text.index(END)
        text = text[:begin] + "\n" + "\n".join(lines) + "\n" + text[end:]
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    shardplan = binary([sys.argv[0]] + args)
    failures = []
    lines = table(shardplan, failures)
    if "--write" in sys.argv:
        write(lines)
    print("\n".join(lines))
    if "--check" in sys.argv and failures:
        for failure in failures:
            print(f"FAILED: {failure}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
