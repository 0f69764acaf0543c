from . import mesh_utils
