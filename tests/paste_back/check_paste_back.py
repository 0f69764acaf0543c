#!/usr/bin/env python3
"""Round trip of the paste-back formats (docs/paste-back.md; issue 21).

    check_paste_back.py SHARDPLAN SOURCE_DIR plan|check ARGS...

Runs `SHARDPLAN plan|check ARGS` three times: --format json (the reference),
--format jax and --format maxtext. The Python module is imported with the
stand-in jax package of fake_jax/ (no real JAX here), which records the
calls: the mesh shape, names, axis types, the builder and its arguments and
every spec must be the JSON's, named_shardings must give each parameter its
spec and name the paths without one. The YAML is read with PyYAML: its
parallelism keys must multiply to the devices per slice and the slices,
each mesh axis's MaxText keys must hold its ICI and DCN parts, the logical
axis rules must be the preset's, and the workload keys the workload's.
Exit 0 when every check holds; else each failure on stderr and exit 1.
"""

import ast
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile

import yaml

FAILURES = []

# MaxText's mesh axes (base.yml's mesh_axes at the commit of
# configs/maxtext/fields.json) and their key words.
MAXTEXT_KEYS = {
    "diloco": "diloco", "data": "data", "stage": "pipeline", "fsdp": "fsdp",
    "fsdp_transpose": "fsdp_transpose", "context": "context",
    "context_usp_ulysses": "context_usp_ulysses",
    "context_autoregressive": "context_autoregressive",
    "tensor": "tensor", "tensor_sequence": "tensor_sequence",
    "expert": "expert", "autoregressive": "autoregressive",
}


def typed(value, annotation):
    """Whether a YAML value has the type types.py's annotation gives."""
    kinds = [a.strip() for a in annotation.split("|")]
    for kind in kinds:
        if kind == "Any":
            return True
        if kind == "None" and value is None:
            return True
        if kind in ("int", "PositiveInt", "NonNegativeInt") \
                and isinstance(value, int) and not isinstance(value, bool):
            return True
        if kind in ("float", "NonNegativeFloat", "PositiveFloat") \
                and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            return True
        if kind == "bool" and isinstance(value, bool):
            return True
        if kind.startswith("list") and isinstance(value, list):
            return True
        # str, the enums (DType, OptimizerType, RematLocation, ModelName,
        # RematPolicy...) take strings.
        if kind not in ("int", "float", "bool") and isinstance(value, str):
            return True
    return False
ALIASES = {"dp": "data", "tp": "tensor", "ep": "expert", "sp": "context",
           "cp": "context", "pp": "stage", "pipeline": "stage"}


def check(condition, what):
    if not condition:
        FAILURES.append(what)


def run(shardplan, args, fmt):
    done = subprocess.run([shardplan] + args + ["--format", fmt],
                          capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(args)} --format {fmt}: exit {done.returncode}\n"
                 f"{done.stderr}")
    return done.stdout


def flag(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def spec_of(entries):
    """A JSON spec's entries as the fake PartitionSpec's tuple."""
    return tuple(tuple(e) if isinstance(e, list) else e for e in entries)


def check_jax(shardplan, source_dir, args, plan):
    text = run(shardplan, args, "jax")
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module]
        else:
            continue
        check(all(n == "jax" or n.startswith("jax.") for n in names),
              f"imports {names}: only jax is allowed")

    sys.path.insert(0, os.path.join(source_dir, "tests", "paste_back",
                                    "fake_jax"))
    import jax  # the stand-in
    jax.CALLS.clear()
    jax.DEVICE_COUNT = plan["mesh"]["devices"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "paste.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        spec = importlib.util.spec_from_file_location("paste", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

    axes = plan["mesh"]["axes"]
    check(module.MESH_SHAPE == tuple(a["size"] for a in axes), "MESH_SHAPE")
    check(module.MESH_AXES == tuple(a["name"] for a in axes), "MESH_AXES")
    types = {"auto": "Auto", "explicit": "Explicit", "manual": "Manual"}
    check(module.AXIS_TYPES == tuple(types[a["type"]] for a in axes),
          "AXIS_TYPES")

    mesh = module.make_mesh()
    call = jax.CALLS[-1]
    split = "--allow-split-physical-axes" in args
    slices = plan["mesh"]["slices"]
    topology = plan.get("topology")
    if slices > 1:
        check(call == ("create_hybrid_device_mesh",
                       tuple(a["ici"] for a in axes),
                       tuple(a["dcn"] for a in axes), split),
              f"several slices: create_hybrid_device_mesh, not {call}")
    elif split and topology and topology["kind"] == "tpu" \
            and topology["device_kind"] not in ("TPU v5 lite", "TPU v5e"):
        check(call == ("create_device_mesh", module.MESH_SHAPE, True),
              f"split axes: create_device_mesh, not {call}")
    else:
        check(call[:3] == ("make_mesh", module.MESH_SHAPE, module.MESH_AXES)
              and call[3] == module.AXIS_TYPES,
              f"one slice: make_mesh with the axis types, not {call}")
    check(mesh.axis_names == module.MESH_AXES, "the mesh's axis names")

    # The device order: `mesh` lays the same mesh out.
    if topology:
        mesh_args = ["mesh", "--topology", flag(args, "--topology"),
                     "--mesh", flag(args, "--mesh")]
        if flag(args, "--dcn"):
            mesh_args += ["--dcn", flag(args, "--dcn")]
        if split:
            mesh_args.append("--allow-split-physical-axes")
        ids = json.loads(run(shardplan, mesh_args, "json"))["device_ids"]
        flat = []

        def walk(x):
            if isinstance(x, list):
                for y in x:
                    walk(y)
            else:
                flat.append(x)

        walk(ids)
        check(module.DEVICE_IDS == tuple(flat), "DEVICE_IDS")
        # check_device_order accepts that order and refuses another.
        fake = jax.sharding.Mesh(jax.DeviceArray(
            module.MESH_SHAPE, [jax.Device(i) for i in flat]),
            module.MESH_AXES)
        module.check_device_order(fake)
        if len(flat) > 1:
            swapped = [jax.Device(i) for i in flat]
            swapped[0], swapped[1] = swapped[1], swapped[0]
            try:
                module.check_device_order(jax.sharding.Mesh(
                    jax.DeviceArray(module.MESH_SHAPE, swapped),
                    module.MESH_AXES))
                check(False, "check_device_order took a wrong order")
            except ValueError:
                pass

    # Every valid tensor's spec, and no other name.
    expected = {t["name"]: spec_of(t["spec"]) for t in plan["tensors"]
                if t["valid"]}
    check(len(module.SPECS) == len(expected),
          f"SPECS has {len(module.SPECS)} names, the plan {len(expected)}")
    wrong = [n for n, s in expected.items() if module.SPECS.get(n) != s]
    check(not wrong, f"specs differ for {wrong[:5]}")

    # named_shardings over the params pytree of the names.
    params = {}
    for name in expected:
        node = params
        parts = name.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if isinstance(node, dict):
            node[parts[-1]] = name
    shardings = module.named_shardings(mesh, params)

    def leaves(tree, path=()):
        if isinstance(tree, dict):
            for k, v in tree.items():
                yield from leaves(v, path + (k,))
        else:
            yield ".".join(path), tree

    for name, sharding in leaves(shardings):
        check(sharding.spec == expected[name] and sharding.mesh is mesh,
              f"named_shardings: {name}")
    params["not_a_tensor"] = {"weight": 0}
    try:
        module.named_shardings(mesh, params)
        check(False, "named_shardings took a path without a spec")
    except KeyError as e:
        check("not_a_tensor.weight" in str(e),
              f"the KeyError names the path: {e}")


def check_maxtext(shardplan, source_dir, args, plan):
    text = run(shardplan, args, "maxtext")
    doc = yaml.safe_load(text)
    check_read_back(shardplan, args, plan, text)
    # Every key is a field of MaxText's config, with its type.
    with open(os.path.join(source_dir, "configs", "maxtext", "fields.json"),
              encoding="utf-8") as f:
        fields = json.load(f)["fields"]
    for key, value in doc.items():
        check(key in fields, f"{key} is not a field of MaxText's config")
        if key in fields:
            check(typed(value, fields[key]),
                  f"{key}: {value!r} is not {fields[key]}")
    mesh_axes_used = doc.get("mesh_axes", list(MAXTEXT_KEYS))
    for name, axes in doc.get("logical_axis_rules", []):
        for axis in [axes] if isinstance(axes, str) else axes:
            check(axis in mesh_axes_used,
                  f"rule {name} names {axis}, not in mesh_axes")
    axes = plan["mesh"]["axes"]
    slices = plan["mesh"]["slices"]
    devices = plan["mesh"]["devices"]
    ici = [doc[f"ici_{k}_parallelism"] for k in MAXTEXT_KEYS.values()]
    dcn = [doc[f"dcn_{k}_parallelism"] for k in MAXTEXT_KEYS.values()]
    check(math.prod(ici) == devices // slices,
          f"ici_* multiply to {math.prod(ici)}, not {devices // slices}")
    check(math.prod(dcn) == slices, f"dcn_* multiply to {math.prod(dcn)}")
    check(doc["num_slices"] == slices, "num_slices")
    check(doc["allow_split_physical_axes"]
          == ("--allow-split-physical-axes" in args),
          "allow_split_physical_axes")
    order = []
    for a in axes:
        name = ALIASES.get(a["name"], a["name"])
        key = MAXTEXT_KEYS[name]
        check(doc[f"ici_{key}_parallelism"] == a["ici"], f"ici_{key}")
        check(doc[f"dcn_{key}_parallelism"] == a["dcn"], f"dcn_{key}")
        if a["size"] > 1:
            order.append(name)
    mesh_axes = doc.get("mesh_axes", list(MAXTEXT_KEYS))
    check([n for n in mesh_axes if n in order] == order,
          f"mesh_axes {mesh_axes} keeps the plan's order {order}")

    rules = plan.get("rules")
    if rules and rules.get("name") == "maxtext":
        with open(os.path.join(source_dir, "configs", "rules",
                               "maxtext.json"), encoding="utf-8") as f:
            preset = json.load(f)["logical_axis_rules"]
        # MaxText takes an axis or a list of axes: a lone one is a list of one.
        preset = [[name, [axes] if isinstance(axes, str) else axes]
                  for name, axes in preset]
        check(doc["logical_axis_rules"] == preset,
              "logical_axis_rules are the preset's")
    else:
        check("logical_axis_rules" not in doc,
              "no logical_axis_rules for rules that are not logical")

    workload = plan.get("workload")
    if workload:
        check(doc["max_target_length"] == workload["seq"], "max_target_length")
        accumulation = doc.get("gradient_accumulation_steps", 1)
        check(doc["per_device_batch_size"] * devices * accumulation
              == workload["global_batch"], "per_device_batch_size")
        check(doc["remat_policy"] == workload["remat"], "remat_policy")
    else:
        check("per_device_batch_size" not in doc, "no workload keys")


# Flags --maxtext-config replaces (with a value, and without).
REPLACED = {"--mesh", "--dcn", "--rules", "--seq", "--batch",
            "--per-device-batch", "--microbatches", "--remat"}


def check_read_back(shardplan, args, plan, text):
    """--maxtext-config reads the YAML back to the same mesh, rules and
    workload: the same command with the flags the config gives left out."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "overrides.yml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        kept = []
        i = 0
        while i < len(args):
            if args[i] in REPLACED:
                i += 2
            elif args[i] == "--allow-split-physical-axes":
                i += 1
            else:
                kept.append(args[i])
                i += 1
        back = json.loads(run(shardplan, kept + ["--maxtext-config", path],
                              "json"))
    def split_axes(mesh):
        return [(ALIASES.get(a["name"], a["name"]), a["size"], a["ici"],
                 a["dcn"]) for a in mesh["axes"] if a["size"] > 1]
    check(split_axes(back["mesh"]) == split_axes(plan["mesh"]),
          f"read back: mesh {back['mesh']['canonical']}, "
          f"not {plan['mesh']['canonical']}")
    check(back["mesh"]["slices"] == plan["mesh"]["slices"], "read back: slices")
    rules = plan.get("rules")
    if rules and rules.get("name") == "maxtext":
        def named(spec):
            return [[ALIASES.get(a, a) for a in e] if isinstance(e, list)
                    else ALIASES.get(e, e) if e else e for e in spec]
        wrong = [t["name"] for t, u in zip(plan["tensors"], back["tensors"])
                 if named(t["spec"]) != named(u["spec"])]
        check(not wrong, f"read back: specs differ for {wrong[:5]}")
    workload = plan.get("workload")
    if workload:
        got = back.get("workload") or {}
        for key in ("seq", "global_batch", "microbatches"):
            check(got.get(key) == workload[key], f"read back: workload {key}")
        if workload["remat"] not in ("none", "selective"):
            check(got.get("remat") == workload["remat"], "read back: remat")
    # The same weights, and the same training state where MaxText can
    # hold the plan's (a training recipe, no f32 master, nu like the
    # weights), when the specs are MaxText's (its rules, its axis names).
    memory = plan["memory"]
    # (Not for an FP8 checkpoint: its scales and f32 router biases are not
    # MaxText's, which holds every weight in weight_dtype.)
    maxtext_specs = rules and rules.get("name") == "maxtext" and all(
        a["name"] in MAXTEXT_KEYS for a in plan["mesh"]["axes"]) \
        and not memory.get("scale_tensors")
    keys = ["params"] if maxtext_specs else []
    optimizer = memory.get("optimizer") or {}
    if maxtext_specs and memory["recipe"] != "params-only" \
            and not optimizer.get("master") \
            and optimizer.get("second_moment_dtype") in (
                None, memory.get("param_dtype")):
        keys += ["grads", "optimizer"]
    for key in keys:
        check(back["memory"]["per_device"][key]
              == memory["per_device"][key],
              f"read back: {key} {back['memory']['per_device'][key]}, not "
              f"{memory['per_device'][key]}")


def main():
    shardplan, source_dir, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    plan = json.loads(run(shardplan, args, "json"))
    check_jax(shardplan, source_dir, args, plan)
    check_maxtext(shardplan, source_dir, args, plan)
    for failure in FAILURES:
        print(f"FAILED: {failure}", file=sys.stderr)
    if not FAILURES:
        print(f"ok: {len(plan['tensors'])} tensors, mesh "
              f"{plan['mesh']['canonical']}")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
