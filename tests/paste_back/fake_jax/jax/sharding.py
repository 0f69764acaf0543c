"""jax.sharding's names, recording what they are built with."""


class AxisType:
    Auto = "Auto"
    Explicit = "Explicit"
    Manual = "Manual"


class PartitionSpec(tuple):
    """P('fsdp', None): a tuple of its entries, as JAX's is."""

    def __new__(cls, *entries):
        return super().__new__(cls, entries)


class Mesh:
    def __init__(self, devices, axis_names, axis_types=None):
        self.devices = devices
        self.axis_names = tuple(axis_names)
        self.axis_types = axis_types


class NamedSharding:
    def __init__(self, mesh, spec):
        self.mesh = mesh
        self.spec = spec
