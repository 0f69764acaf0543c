# The mesh and partition specs of a plan, written by shardplan {version}.
# Command: shardplan plan --model llama-3-8b --topology v5p-128 --mesh fsdp:16,tensor:4 --rules maxtext --seq 8192 --batch 128 --format jax
# Topology: v5p-128: 64 TPU v5p devices (4x4x4), 95.74 GiB of HBM each
# Mesh: fsdp:16,tensor:4
# Re-run the command to update this file.

import jax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

MESH_SHAPE = (16, 4)
MESH_AXES = ("fsdp", "tensor")
AXIS_TYPES = (AxisType.Auto, AxisType.Auto)
# Device ids in mesh order (row-major), as shardplan laid them out.
DEVICE_IDS = (
    0, 1, 2, 3, 16, 17, 18, 19, 32, 33, 34, 35, 48, 49, 50, 51,
    4, 5, 6, 7, 20, 21, 22, 23, 36, 37, 38, 39, 52, 53, 54, 55,
    8, 9, 10, 11, 24, 25, 26, 27, 40, 41, 42, 43, 56, 57, 58, 59,
    12, 13, 14, 15, 28, 29, 30, 31, 44, 45, 46, 47, 60, 61, 62, 63,
)


def make_mesh(devices=None):
    """The plan's mesh: jax.make_mesh lays it out as shardplan did."""
    return jax.make_mesh(MESH_SHAPE, MESH_AXES, axis_types=AXIS_TYPES,
                         devices=devices)


def check_device_order(mesh):
    """Raises unless `mesh` holds the devices in the order the plan assumed."""
    ids = tuple(d.id for d in mesh.devices.flat)
    if ids != DEVICE_IDS:
        first = next(i for i, (a, b) in enumerate(zip(ids, DEVICE_IDS)) if a != b)
        raise ValueError(
            f"mesh device {first} is id {ids[first]}; the plan assumed "
            f"{DEVICE_IDS[first]}")


# The partition spec of every tensor, by name.
SPECS = {
    "model.embed_tokens.weight": P('tensor', 'fsdp'),
    "model.norm.weight": P('tensor'),
    "lm_head.weight": P('tensor', 'fsdp'),
}

# Tensors of many layers (and experts): a name pattern, the indices
# of each {} in it, and their spec.
_FOLDED = (
    ("model.layers.{}.self_attn.q_proj.weight", (range(0, 32),), P('tensor', 'fsdp')),
    ("model.layers.{}.self_attn.k_proj.weight", (range(0, 32),), P('tensor', 'fsdp')),
    ("model.layers.{}.self_attn.v_proj.weight", (range(0, 32),), P('tensor', 'fsdp')),
    ("model.layers.{}.self_attn.o_proj.weight", (range(0, 32),), P('fsdp', 'tensor')),
    ("model.layers.{}.mlp.gate_proj.weight", (range(0, 32),), P('tensor', 'fsdp')),
    ("model.layers.{}.mlp.up_proj.weight", (range(0, 32),), P('tensor', 'fsdp')),
    ("model.layers.{}.mlp.down_proj.weight", (range(0, 32),), P('fsdp', 'tensor')),
    ("model.layers.{}.input_layernorm.weight", (range(0, 32),), P('tensor')),
    ("model.layers.{}.post_attention_layernorm.weight", (range(0, 32),), P('tensor')),
)


def _names(pattern, sets, index=()):
    if len(index) == len(sets):
        yield pattern.format(*index)
        return
    for i in sets[len(index)]:
        yield from _names(pattern, sets, index + (i,))


for _pattern, _sets, _spec in _FOLDED:
    for _name in _names(_pattern, _sets):
        SPECS[_name] = _spec


def _path_name(path, sep):
    parts = []
    for key in path:
        for field in ("key", "name", "idx"):
            if hasattr(key, field):
                parts.append(str(getattr(key, field)))
                break
        else:
            parts.append(str(key))
    return sep.join(parts)


def named_shardings(mesh, params, sep="."):
    """A NamedSharding for each leaf of `params`, whose path joined with
    `sep` is its tensor's name ("." as in Hugging Face names). Raises
    KeyError naming every path without a spec."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    names = [_path_name(path, sep) for path, _ in leaves]
    missing = [name for name in names if name not in SPECS]
    if missing:
        raise KeyError(
            f"no partition spec for {len(missing)} of {len(names)} parameters: "
            + ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""))
    return jax.tree_util.tree_unflatten(
        treedef, [NamedSharding(mesh, SPECS[name]) for name in names])
