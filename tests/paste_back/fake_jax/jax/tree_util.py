"""tree_flatten_with_path and tree_unflatten over dicts and lists."""


class DictKey:
    def __init__(self, key):
        self.key = key


class SequenceKey:
    def __init__(self, idx):
        self.idx = idx


def tree_flatten_with_path(tree, path=()):
    """Leaves as (path, leaf) in key order, and the tree to rebuild."""
    if isinstance(tree, dict):
        leaves = []
        for key in tree:
            leaves += tree_flatten_with_path(tree[key], path + (DictKey(key),))[0]
        return leaves, tree
    if isinstance(tree, (list, tuple)):
        leaves = []
        for i, item in enumerate(tree):
            leaves += tree_flatten_with_path(item, path + (SequenceKey(i),))[0]
        return leaves, tree
    return [(path, tree)], tree


def tree_unflatten(treedef, leaves):
    leaves = iter(leaves)

    def build(tree):
        if isinstance(tree, dict):
            return {key: build(value) for key, value in tree.items()}
        if isinstance(tree, (list, tuple)):
            return type(tree)(build(item) for item in tree)
        return next(leaves)

    return build(treedef)
