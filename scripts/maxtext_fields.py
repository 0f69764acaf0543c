#!/usr/bin/env python3
"""The fields of MaxText's config, read from its types.py.

MaxText's pyconfig refuses a key that is not a field of
types.MaxTextConfig (or of a model nested in one): "'key' not in ...".
shardplan refuses the same keys (docs/maxtext.md, "Unknown keys") and
writes only fields with `--format maxtext`, so it carries the list:
configs/maxtext/fields.json, {"commit", "source", "fields": {name: type}},
where type is the field's annotation as written.

Usage: scripts/maxtext_fields.py TYPES_PY COMMIT > configs/maxtext/fields.json

TYPES_PY is src/maxtext/configs/types.py of AI-Hypercomputer/maxtext at
COMMIT (https://github.com/AI-Hypercomputer/maxtext).
"""

import ast
import json
import sys


def classes(tree):
    return {node.name: node for node in tree.body
            if isinstance(node, ast.ClassDef)}


def fields_of(name, by_name, out, seen):
    """Adds the annotated fields of class `name` and its bases to `out`."""
    if name in seen or name not in by_name:
        return
    seen.add(name)
    node = by_name[name]
    for base in node.bases:
        if isinstance(base, ast.Name):
            fields_of(base.id, by_name, out, seen)
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target,
                                                          ast.Name):
            field = item.target.id
            if field.startswith("_") or field == "model_config":
                continue
            out[field] = ast.unparse(item.annotation)
            # A field whose type is a model nests that model's fields
            # (pyconfig's _check_for_invalid_keys).
            for sub in ast.walk(item.annotation):
                if isinstance(sub, ast.Name) and sub.id in by_name:
                    fields_of(sub.id, by_name, out, seen)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        tree = ast.parse(f.read())
    by_name = classes(tree)
    out = {}
    fields_of("MaxTextConfig", by_name, out, set())
    json.dump({"commit": sys.argv[2],
               "source": "AI-Hypercomputer/maxtext "
                         "src/maxtext/configs/types.py",
               "fields": dict(sorted(out.items()))},
              sys.stdout, indent=0, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
