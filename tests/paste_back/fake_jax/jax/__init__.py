"""A stand-in for jax that records what a paste-back module calls.

No real JAX is installed where the tests run: this package has the names
`shardplan --format jax` modules use (make_mesh, devices, tree_util,
sharding, experimental.mesh_utils), each recording its call in CALLS.
"""

from . import experimental, sharding, tree_util

CALLS = []
DEVICE_COUNT = 0


class Device:
    def __init__(self, id):
        self.id = id

    def __repr__(self):
        return f"Device({self.id})"


class DeviceArray:
    """What mesh_utils returns: devices with a shape, row-major."""

    def __init__(self, shape, devices):
        self.shape = tuple(shape)
        self.flat = list(devices)


def devices():
    return [Device(i) for i in range(DEVICE_COUNT)]


def make_mesh(axis_shapes, axis_names, axis_types=None, *, devices=None):
    CALLS.append(("make_mesh", tuple(axis_shapes), tuple(axis_names),
                  axis_types, devices))
    found = devices if devices is not None else globals()["devices"]()
    return sharding.Mesh(DeviceArray(axis_shapes, found), axis_names,
                         axis_types=axis_types)
