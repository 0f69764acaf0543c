# The mesh and partition specs of a plan, written by shardplan {version}.
# Command: shardplan plan --model deepseek-v3 --topology 2xv5p-1024 --mesh data:2,fsdp:64,expert:8 --dcn data:2 --rules maxtext --seq 4096 --per-device-batch 1 --recipe adam --format jax
# Topology: 2xv5p-1024: 1024 TPU v5p devices (2 x 8x8x8), 95.74 GiB of HBM each
# Mesh: data:2,fsdp:64,expert:8
# Re-run the command to update this file.

import jax
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

MESH_SHAPE = (2, 64, 8)
MESH_AXES = ("data", "fsdp", "expert")
AXIS_TYPES = (AxisType.Auto, AxisType.Auto, AxisType.Auto)
ICI_SHAPE = (1, 64, 8)
DCN_SHAPE = (2, 1, 1)
# Device ids in mesh order (row-major), as shardplan laid them out.
DEVICE_IDS = (
    0, 1, 2, 3, 4, 5, 6, 7, 64, 65, 66, 67, 68, 69, 70, 71,
    128, 129, 130, 131, 132, 133, 134, 135, 192, 193, 194, 195, 196, 197, 198, 199,
    256, 257, 258, 259, 260, 261, 262, 263, 320, 321, 322, 323, 324, 325, 326, 327,
    384, 385, 386, 387, 388, 389, 390, 391, 448, 449, 450, 451, 452, 453, 454, 455,
    8, 9, 10, 11, 12, 13, 14, 15, 72, 73, 74, 75, 76, 77, 78, 79,
    136, 137, 138, 139, 140, 141, 142, 143, 200, 201, 202, 203, 204, 205, 206, 207,
    264, 265, 266, 267, 268, 269, 270, 271, 328, 329, 330, 331, 332, 333, 334, 335,
    392, 393, 394, 395, 396, 397, 398, 399, 456, 457, 458, 459, 460, 461, 462, 463,
    16, 17, 18, 19, 20, 21, 22, 23, 80, 81, 82, 83, 84, 85, 86, 87,
    144, 145, 146, 147, 148, 149, 150, 151, 208, 209, 210, 211, 212, 213, 214, 215,
    272, 273, 274, 275, 276, 277, 278, 279, 336, 337, 338, 339, 340, 341, 342, 343,
    400, 401, 402, 403, 404, 405, 406, 407, 464, 465, 466, 467, 468, 469, 470, 471,
    24, 25, 26, 27, 28, 29, 30, 31, 88, 89, 90, 91, 92, 93, 94, 95,
    152, 153, 154, 155, 156, 157, 158, 159, 216, 217, 218, 219, 220, 221, 222, 223,
    280, 281, 282, 283, 284, 285, 286, 287, 344, 345, 346, 347, 348, 349, 350, 351,
    408, 409, 410, 411, 412, 413, 414, 415, 472, 473, 474, 475, 476, 477, 478, 479,
    32, 33, 34, 35, 36, 37, 38, 39, 96, 97, 98, 99, 100, 101, 102, 103,
    160, 161, 162, 163, 164, 165, 166, 167, 224, 225, 226, 227, 228, 229, 230, 231,
    288, 289, 290, 291, 292, 293, 294, 295, 352, 353, 354, 355, 356, 357, 358, 359,
    416, 417, 418, 419, 420, 421, 422, 423, 480, 481, 482, 483, 484, 485, 486, 487,
    40, 41, 42, 43, 44, 45, 46, 47, 104, 105, 106, 107, 108, 109, 110, 111,
    168, 169, 170, 171, 172, 173, 174, 175, 232, 233, 234, 235, 236, 237, 238, 239,
    296, 297, 298, 299, 300, 301, 302, 303, 360, 361, 362, 363, 364, 365, 366, 367,
    424, 425, 426, 427, 428, 429, 430, 431, 488, 489, 490, 491, 492, 493, 494, 495,
    48, 49, 50, 51, 52, 53, 54, 55, 112, 113, 114, 115, 116, 117, 118, 119,
    176, 177, 178, 179, 180, 181, 182, 183, 240, 241, 242, 243, 244, 245, 246, 247,
    304, 305, 306, 307, 308, 309, 310, 311, 368, 369, 370, 371, 372, 373, 374, 375,
    432, 433, 434, 435, 436, 437, 438, 439, 496, 497, 498, 499, 500, 501, 502, 503,
    56, 57, 58, 59, 60, 61, 62, 63, 120, 121, 122, 123, 124, 125, 126, 127,
    184, 185, 186, 187, 188, 189, 190, 191, 248, 249, 250, 251, 252, 253, 254, 255,
    312, 313, 314, 315, 316, 317, 318, 319, 376, 377, 378, 379, 380, 381, 382, 383,
    440, 441, 442, 443, 444, 445, 446, 447, 504, 505, 506, 507, 508, 509, 510, 511,
    512, 513, 514, 515, 516, 517, 518, 519, 576, 577, 578, 579, 580, 581, 582, 583,
    640, 641, 642, 643, 644, 645, 646, 647, 704, 705, 706, 707, 708, 709, 710, 711,
    768, 769, 770, 771, 772, 773, 774, 775, 832, 833, 834, 835, 836, 837, 838, 839,
    896, 897, 898, 899, 900, 901, 902, 903, 960, 961, 962, 963, 964, 965, 966, 967,
    520, 521, 522, 523, 524, 525, 526, 527, 584, 585, 586, 587, 588, 589, 590, 591,
    648, 649, 650, 651, 652, 653, 654, 655, 712, 713, 714, 715, 716, 717, 718, 719,
    776, 777, 778, 779, 780, 781, 782, 783, 840, 841, 842, 843, 844, 845, 846, 847,
    904, 905, 906, 907, 908, 909, 910, 911, 968, 969, 970, 971, 972, 973, 974, 975,
    528, 529, 530, 531, 532, 533, 534, 535, 592, 593, 594, 595, 596, 597, 598, 599,
    656, 657, 658, 659, 660, 661, 662, 663, 720, 721, 722, 723, 724, 725, 726, 727,
    784, 785, 786, 787, 788, 789, 790, 791, 848, 849, 850, 851, 852, 853, 854, 855,
    912, 913, 914, 915, 916, 917, 918, 919, 976, 977, 978, 979, 980, 981, 982, 983,
    536, 537, 538, 539, 540, 541, 542, 543, 600, 601, 602, 603, 604, 605, 606, 607,
    664, 665, 666, 667, 668, 669, 670, 671, 728, 729, 730, 731, 732, 733, 734, 735,
    792, 793, 794, 795, 796, 797, 798, 799, 856, 857, 858, 859, 860, 861, 862, 863,
    920, 921, 922, 923, 924, 925, 926, 927, 984, 985, 986, 987, 988, 989, 990, 991,
    544, 545, 546, 547, 548, 549, 550, 551, 608, 609, 610, 611, 612, 613, 614, 615,
    672, 673, 674, 675, 676, 677, 678, 679, 736, 737, 738, 739, 740, 741, 742, 743,
    800, 801, 802, 803, 804, 805, 806, 807, 864, 865, 866, 867, 868, 869, 870, 871,
    928, 929, 930, 931, 932, 933, 934, 935, 992, 993, 994, 995, 996, 997, 998, 999,
    552, 553, 554, 555, 556, 557, 558, 559, 616, 617, 618, 619, 620, 621, 622, 623,
    680, 681, 682, 683, 684, 685, 686, 687, 744, 745, 746, 747, 748, 749, 750, 751,
    808, 809, 810, 811, 812, 813, 814, 815, 872, 873, 874, 875, 876, 877, 878, 879,
    936, 937, 938, 939, 940, 941, 942, 943, 1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007,
    560, 561, 562, 563, 564, 565, 566, 567, 624, 625, 626, 627, 628, 629, 630, 631,
    688, 689, 690, 691, 692, 693, 694, 695, 752, 753, 754, 755, 756, 757, 758, 759,
    816, 817, 818, 819, 820, 821, 822, 823, 880, 881, 882, 883, 884, 885, 886, 887,
    944, 945, 946, 947, 948, 949, 950, 951, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 1015,
    568, 569, 570, 571, 572, 573, 574, 575, 632, 633, 634, 635, 636, 637, 638, 639,
    696, 697, 698, 699, 700, 701, 702, 703, 760, 761, 762, 763, 764, 765, 766, 767,
    824, 825, 826, 827, 828, 829, 830, 831, 888, 889, 890, 891, 892, 893, 894, 895,
    952, 953, 954, 955, 956, 957, 958, 959, 1016, 1017, 1018, 1019, 1020, 1021, 1022, 1023,
)


def make_mesh(devices=None):
    """The plan's mesh over 2 slices (make_mesh refuses several)."""
    device_array = mesh_utils.create_hybrid_device_mesh(
        ICI_SHAPE, DCN_SHAPE,
        jax.devices() if devices is None else devices,
        allow_split_physical_axes=False)
    return Mesh(device_array, MESH_AXES, axis_types=AXIS_TYPES)


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
    "model.embed_tokens.weight": P(None, ('fsdp', 'expert')),
    "model.layers.61.embed_tokens.weight": P(None, ('fsdp', 'expert')),
    "model.layers.61.enorm.weight": P(None),
    "model.layers.61.hnorm.weight": P(None),
    "model.layers.61.eh_proj.weight": P(('fsdp', 'expert'), None),
    "model.layers.61.shared_head.norm.weight": P(None),
    "model.layers.61.shared_head.head.weight": P(None, ('fsdp', 'expert')),
    "model.norm.weight": P(None),
    "lm_head.weight": P(None, ('fsdp', 'expert')),
}

# Tensors of many layers (and experts): a name pattern, the indices
# of each {} in it, and their spec.
_FOLDED = (
    ("model.layers.{}.self_attn.q_a_proj.weight", (range(0, 62),), P(None, ('fsdp', 'expert'))),
    ("model.layers.{}.self_attn.q_a_proj.weight_scale_inv", (range(0, 62),), P(None, 'expert')),
    ("model.layers.{}.self_attn.q_a_layernorm.weight", (range(0, 62),), P(None)),
    ("model.layers.{}.self_attn.q_b_proj.weight", (range(0, 62),), P(None, ('fsdp', 'expert'))),
    ("model.layers.{}.self_attn.q_b_proj.weight_scale_inv", (range(0, 62),), P(None, None)),
    ("model.layers.{}.self_attn.kv_a_proj_with_mqa.weight", (range(0, 62),), P(None, ('fsdp', 'expert'))),
    ("model.layers.{}.self_attn.kv_a_proj_with_mqa.weight_scale_inv", (range(0, 62),), P(None, 'expert')),
    ("model.layers.{}.self_attn.kv_a_layernorm.weight", (range(0, 62),), P(None)),
    ("model.layers.{}.self_attn.kv_b_proj.weight", (range(0, 62),), P(None, ('fsdp', 'expert'))),
    ("model.layers.{}.self_attn.kv_b_proj.weight_scale_inv", (range(0, 62),), P(None, None)),
    ("model.layers.{}.self_attn.o_proj.weight", (range(0, 62),), P(('fsdp', 'expert'), None)),
    ("model.layers.{}.self_attn.o_proj.weight_scale_inv", (range(0, 62),), P('expert', None)),
    ("model.layers.{}.mlp.gate_proj.weight", (range(0, 3),), P(None, ('fsdp', 'expert'))),
    ("model.layers.{}.mlp.gate_proj.weight_scale_inv", (range(0, 3),), P(None, 'expert')),
    ("model.layers.{}.mlp.up_proj.weight", (range(0, 3),), P(None, ('fsdp', 'expert'))),
    ("model.layers.{}.mlp.up_proj.weight_scale_inv", (range(0, 3),), P(None, 'expert')),
    ("model.layers.{}.mlp.down_proj.weight", (range(0, 3),), P(('fsdp', 'expert'), None)),
    ("model.layers.{}.mlp.down_proj.weight_scale_inv", (range(0, 3),), P('expert', None)),
    ("model.layers.{}.input_layernorm.weight", (range(0, 62),), P(None)),
    ("model.layers.{}.post_attention_layernorm.weight", (range(0, 62),), P(None)),
    ("model.layers.{}.mlp.experts.{}.gate_proj.weight", (range(3, 62), range(0, 256)), P(None, ('fsdp', 'expert'))),
    ("model.layers.{}.mlp.experts.{}.gate_proj.weight_scale_inv", (range(3, 62), range(0, 256)), P(None, 'expert')),
    ("model.layers.{}.mlp.experts.{}.up_proj.weight", (range(3, 62), range(0, 256)), P(None, ('fsdp', 'expert'))),
    ("model.layers.{}.mlp.experts.{}.up_proj.weight_scale_inv", (range(3, 62), range(0, 256)), P(None, 'expert')),
    ("model.layers.{}.mlp.experts.{}.down_proj.weight", (range(3, 62), range(0, 256)), P(('fsdp', 'expert'), None)),
    ("model.layers.{}.mlp.experts.{}.down_proj.weight_scale_inv", (range(3, 62), range(0, 256)), P('expert', None)),
    ("model.layers.{}.mlp.gate.weight", (range(3, 62),), P(None, ('fsdp', 'expert'))),
    ("model.layers.{}.mlp.gate.e_score_correction_bias", (range(3, 62),), P(None)),
    ("model.layers.{}.mlp.shared_experts.gate_proj.weight", (range(3, 62),), P(None, ('fsdp', 'expert'))),
    ("model.layers.{}.mlp.shared_experts.gate_proj.weight_scale_inv", (range(3, 62),), P(None, 'expert')),
    ("model.layers.{}.mlp.shared_experts.up_proj.weight", (range(3, 62),), P(None, ('fsdp', 'expert'))),
    ("model.layers.{}.mlp.shared_experts.up_proj.weight_scale_inv", (range(3, 62),), P(None, 'expert')),
    ("model.layers.{}.mlp.shared_experts.down_proj.weight", (range(3, 62),), P(('fsdp', 'expert'), None)),
    ("model.layers.{}.mlp.shared_experts.down_proj.weight_scale_inv", (range(3, 62),), P('expert', None)),
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
