"""mesh_utils' two builders, recording their arguments."""

import jax


def create_device_mesh(mesh_shape, devices=None, *, contiguous_submeshes=False,
                       allow_split_physical_axes=False):
    jax.CALLS.append(("create_device_mesh", tuple(mesh_shape),
                      allow_split_physical_axes))
    return jax.DeviceArray(mesh_shape, devices or jax.devices())


def create_hybrid_device_mesh(mesh_shape, dcn_mesh_shape, devices=None, *,
                              process_is_granule=False,
                              should_sort_granules_by_key=True,
                              allow_split_physical_axes=False):
    jax.CALLS.append(("create_hybrid_device_mesh", tuple(mesh_shape),
                      tuple(dcn_mesh_shape), allow_split_physical_axes))
    shape = tuple(i * d for i, d in zip(mesh_shape, dcn_mesh_shape))
    return jax.DeviceArray(shape, devices or jax.devices())
