#!/usr/bin/env python3
"""The HTML reports as a user sees them: rendered by headless Chromium.

For each case, runs the real binary twice (--format json and --format html),
then loads the page in Chromium (--dump-dom, after its script ran) and checks
the rendered DOM against the JSON, which is computed independently of the
HTML renderer:

- no URL anywhere in the file (no src=, href other than #..., url(),
  @import, "//", http:, https:), and the page's script ran without error;
- the device grids: one cell per device, ids those of `mesh`'s device_ids,
  each cell's mesh coordinates its place in device_ids, and after
  #axis=NAME each cell labelled with its coordinate along NAME;
- the tensor table: its folded rows, expanded, are every tensor of the JSON
  exactly once, each with the JSON's spec;
- sorting (#sort=col clicks the header) orders the rows by that column, both
  ways; filtering (#filter=text types in the box) hides exactly the rows
  whose name does not contain the text;
- the memory bar's segments add up to the JSON's per-device figures, per
  category and in total; the usable-HBM line is at the JSON's capacity;
- diagnostics link to the row that holds their tensor;
- reshard: rows expanded are the tensors, with their target specs; search:
  one row per candidate, the winner marked in the scatter;
- tensor names with markup and quotes stay text.

A screenshot of each report (1280x800) is written to the output folder;
with --docs DIR (or UPDATE_DOCS=1: docs/images), the main ones also to
DIR/html-<case>.png.
Only the standard library; chromium must be installed (the test fails, it
never skips, when it is not).

usage: check_html.py --shardplan BIN --chromium BIN --source ROOT --out DIR
                     [--docs DIR]
"""

import argparse
import html.parser
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

FAILURES = []
# The cases whose screenshots docs/html.md shows.
DOC_CASES = {"mesh", "plan", "check", "memory", "reshard", "search",
             "topology-list"}


def fail(case, message):
    FAILURES.append(f"{case}: {message}")
    print(f"FAIL {case}: {message}", file=sys.stderr)


# ---------------------------------------------------------------------------
# A small DOM from html.parser.

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link",
        "meta", "param", "source", "track", "wbr"}


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag = tag
        self.attrs = dict(attrs)
        self.parent = parent
        self.children = []  # Nodes and strings

    def text(self):
        return "".join(c if isinstance(c, str) else c.text()
                       for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()

    def find_all(self, tag=None, **attrs):
        out = []
        for n in self.iter():
            if tag is not None and n.tag != tag:
                continue
            if all((n.attrs.get(k.replace("_", "-")) == v) if v is not True
                   else (k.replace("_", "-") in n.attrs)
                   for k, v in attrs.items()):
                out.append(n)
        return out

    def find(self, tag=None, **attrs):
        found = self.find_all(tag, **attrs)
        return found[0] if found else None

    def has_class(self, name):
        return name in self.attrs.get("class", "").split()


class Builder(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", [], None)
        self.at = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.at)
        self.at.children.append(node)
        if tag not in VOID:
            self.at = node

    def handle_startendtag(self, tag, attrs):
        self.at.children.append(Node(tag, attrs, self.at))

    def handle_endtag(self, tag):
        n = self.at
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.at = n.parent

    def handle_data(self, data):
        self.at.children.append(data)


def parse(text):
    b = Builder()
    b.feed(text)
    b.close()
    return b.root


# ---------------------------------------------------------------------------
# Running things.

class Runner:
    def __init__(self, args):
        self.shardplan = args.shardplan
        self.chromium = args.chromium
        self.source = args.source
        self.out = args.out
        self.docs = args.docs
        self.profile = tempfile.mkdtemp(prefix="shardplan-chromium-")

    def run_shardplan(self, case, argv, fmt, codes):
        path = os.path.join(self.out, f"{case}.{fmt}")
        if os.path.exists(path):
            os.remove(path)
        cmd = [self.shardplan] + argv + ["--format", fmt, "-o", path]
        r = subprocess.run(cmd, cwd=self.source, capture_output=True,
                           text=True, timeout=120)
        if r.returncode not in codes:
            fail(case, f"{' '.join(cmd)}: exit {r.returncode}, expected "
                       f"{codes}; stderr: {r.stderr[-2000:]}")
            return None
        with open(path, "rb") as f:
            return f.read()

    def page(self, case, argv, codes=(0,)):
        """The command's JSON and its html page rendered: (doc, path, root),
        or None after a failure. The page is checked for URLs first."""
        doc = self.run_shardplan(case, argv, "json", codes)
        page = self.run_shardplan(case, argv, "html", codes)
        if doc is None or page is None:
            return None
        check_no_url(case, page)
        path = os.path.join(self.out, f"{case}.html")
        root = self.dom(case, path)
        if root is None:
            return None
        return json.loads(doc), path, root

    def chromium_args(self):
        return [self.chromium, "--headless", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-dev-shm-usage",
                "--hide-scrollbars", f"--user-data-dir={self.profile}"]

    def dom(self, case, page, fragment=""):
        url = "file://" + os.path.abspath(page) + fragment
        try:
            r = subprocess.run(self.chromium_args() + ["--dump-dom", url],
                               capture_output=True, text=True, timeout=90)
        except subprocess.TimeoutExpired:
            fail(case, f"chromium --dump-dom {url} timed out")
            return None
        if r.returncode != 0 or "<html" not in r.stdout:
            fail(case, f"chromium --dump-dom {url}: exit {r.returncode}; "
                       f"stderr: {r.stderr[-2000:]}")
            return None
        root = parse(r.stdout)
        body = root.find("body")
        if body is None or body.attrs.get("data-ready") != "1":
            fail(case, f"{fragment or 'page'}: the page's script did not "
                       "finish (no data-ready on <body>)")
        if body is not None and "data-error" in body.attrs:
            fail(case, f"{fragment or 'page'}: script error: "
                       f"{body.attrs['data-error']}")
        return root

    def screenshot(self, case, page):
        png = os.path.join(self.out, f"{case}.png")
        if os.path.exists(png):
            os.remove(png)
        url = "file://" + os.path.abspath(page)
        try:
            subprocess.run(self.chromium_args()
                           + [f"--screenshot={png}", "--window-size=1280,800",
                              url],
                           capture_output=True, timeout=90)
        except subprocess.TimeoutExpired:
            fail(case, "chromium --screenshot timed out")
            return
        if not os.path.exists(png) or os.path.getsize(png) < 5000:
            fail(case, f"no screenshot at {png}")
            return
        if self.docs and case in DOC_CASES:
            shutil.copyfile(png, os.path.join(self.docs, f"html-{case}.png"))


# ---------------------------------------------------------------------------
# Checks.

URL_PATTERNS = [
    (re.compile(rb"(?i)\bsrc\s*="), "src="),
    (re.compile(rb"(?i)\bhref\s*=\s*(?![\"']?#)"), "an href that is not #..."),
    (re.compile(rb"(?i)url\s*\("), "url("),
    (re.compile(rb"(?i)@import"), "@import"),
    (re.compile(rb"//"), "//"),
    (re.compile(rb"(?i)\b(https?|ftp|file|data|javascript):"), "a URL scheme"),
    (re.compile(rb"(?i)<(link|iframe|object|embed|img|base)\b"),
     "an element that loads something"),
    (re.compile(rb"(?i)xlink:href|\bimport\s*\("), "a reference"),
]


def check_no_url(case, page):
    for pattern, what in URL_PATTERNS:
        m = pattern.search(page)
        if m:
            at = m.start()
            context = page[max(0, at - 60):at + 60].decode("utf-8", "replace")
            fail(case, f"the file references {what}: ...{context}...")


def short_spec(spec):
    """A JSON spec as to_short() prints it: fsdp,None  (dp,fsdp),tp  ()."""
    if spec is None:
        return "(invalid)"
    if not spec:
        return "()"
    parts = []
    for entry in spec:
        if entry is None:
            parts.append("None")
        elif isinstance(entry, str):
            parts.append(entry)
        else:
            parts.append("(" + ",".join(entry) + ")")
    return ",".join(parts)


SET = re.compile(r"^\{([0-9.,-]+)\}$")


def expand(folded):
    """The names a folded name stands for: each {a..b,c} component a set."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(folded):
        depth += c == "{"
        depth -= c == "}"
        if c == "." and depth == 0:
            parts.append(folded[start:i])
            start = i + 1
    parts.append(folded[start:])
    choices = []
    for part in parts:
        m = SET.match(part)
        if not m:
            choices.append([part])
            continue
        values = []
        for run in m.group(1).split(","):
            if ".." in run:
                lo, hi = run.split("..")
                values.extend(str(v) for v in range(int(lo), int(hi) + 1))
            else:
                values.append(run)
        choices.append(values)
    return [".".join(p) for p in itertools.product(*choices)]


def table_rows(root, table_id):
    table = root.find("table", id=table_id)
    if table is None:
        return None
    body = table.find("tbody")
    return [r for r in body.children if isinstance(r, Node) and r.tag == "tr"]


def header_index(root, table_id, col):
    table = root.find("table", id=table_id)
    ths = table.find("thead").find_all("th")
    for i, th in enumerate(ths):
        if th.attrs.get("data-col") == col:
            return i, th
    return None, None


def cells(row):
    return [c for c in row.children if isinstance(c, Node) and c.tag == "td"]


def check_rows_cover(case, rows, names_to_spec, spec_attr="data-spec"):
    """Folded rows, expanded, are every tensor once, each with its spec."""
    seen = {}
    for r in rows:
        folded = r.attrs.get("data-tensor")
        if folded is None:
            fail(case, "a tensor row without data-tensor")
            continue
        names = expand(folded)
        if int(r.attrs.get("data-count", "-1")) != len(names):
            fail(case, f"row {folded}: data-count {r.attrs.get('data-count')}"
                       f" != {len(names)} names")
        for name in names:
            seen[name] = seen.get(name, 0) + 1
            if name not in names_to_spec:
                fail(case, f"row {folded} stands for {name}, not a tensor")
            elif names_to_spec[name] != r.attrs.get(spec_attr):
                fail(case, f"{name}: spec {r.attrs.get(spec_attr)!r} in the "
                           f"page, {names_to_spec[name]!r} in the JSON")
    missing = [n for n in names_to_spec if n not in seen]
    twice = [n for n, k in seen.items() if k > 1]
    if missing:
        fail(case, f"{len(missing)} tensors in no row, e.g. {missing[:3]}")
    if twice:
        fail(case, f"{len(twice)} tensors in several rows, e.g. {twice[:3]}")


def sort_value(cell):
    """A numeric cell's sort key, as the page's script reads it: its
    data-sort, -inf without one."""
    v = cell.attrs.get("data-sort")
    return float("-inf") if v is None else float(v)


def check_sorting(run, case, page, table_id, col):
    """#sort=col orders by the column (largest first for a number), and a
    second click reverses it."""
    base = run.dom(case, page)
    if base is None:
        return
    index, th = header_index(base, table_id, col)
    if th is None:
        fail(case, f"no sortable column {col}")
        return
    values = [sort_value(cells(r)[index]) for r in table_rows(base, table_id)]
    for clicks, reverse in ((col, True), (f"{col},{col}", False)):
        root = run.dom(case, page, f"#sort={clicks}")
        if root is None:
            return
        _, th = header_index(root, table_id, col)
        want = "descending" if reverse else "ascending"
        if th.attrs.get("aria-sort") != want:
            fail(case, f"#sort={clicks}: header says "
                       f"{th.attrs.get('aria-sort')}, expected {want}")
        got = [sort_value(cells(r)[index]) for r in table_rows(root, table_id)]
        if got != sorted(values, reverse=reverse):
            fail(case, f"#sort={clicks}: rows not in {want} order of {col}: "
                       f"{got[:8]}...")
        if sorted(got) != sorted(values):
            fail(case, f"#sort={clicks}: rows lost or added")
    if len(set(values)) > 1 and values == sorted(values, reverse=True):
        fail(case, f"{col}: the unsorted table is already sorted; the check "
                   "proves nothing (choose another case)")


def check_filter(run, case, page, table_id, text):
    root = run.dom(case, page, f"#filter={text}")
    if root is None:
        return
    rows = table_rows(root, table_id)
    shown = [r for r in rows if "hidden" not in r.attrs]
    want = [r for r in rows if text.lower() in r.attrs["data-name"].lower()]
    if [id(r) for r in shown] != [id(r) for r in want]:
        fail(case, f"#filter={text}: {len(shown)} rows shown, {len(want)} "
                   "match")
    if not 0 < len(shown) < len(rows):
        fail(case, f"#filter={text}: {len(shown)} of {len(rows)} shown; the "
                   "check needs some of each")
    count = root.find(id=f"{table_id}-count")
    if count is None or count.text() != f"{len(shown)} of {len(rows)} rows":
        fail(case, f"#filter={text}: the count says "
                   f"{count.text() if count else None!r}")


def mesh_coordinates(device_ids):
    """{id: (coordinates)} from nested device_ids."""
    out = {}

    def walk(value, at):
        if isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, at + (i,))
        else:
            out[value] = at
    walk(device_ids, ())
    return out


def check_grids(run, case, page, root, mesh_json, axes, physical,
                prefix=""):
    coords = mesh_coordinates(mesh_json["device_ids"])
    grids = [prefix + "grid-mesh"] + (
        [prefix + "grid-physical"] if physical else [])
    for grid_id in grids:
        svg = root.find("svg", id=grid_id)
        if svg is None:
            fail(case, f"no svg#{grid_id}")
            continue
        cells_ = svg.find_all("g", data_device=True)
        ids = [int(g.attrs["data-device"]) for g in cells_]
        if sorted(ids) != sorted(coords):
            fail(case, f"{grid_id}: {len(ids)} cells, devices "
                       f"{sorted(set(ids))[:5]}..., expected {len(coords)}")
        for g in cells_:
            want = ",".join(str(c) for c in coords.get(int(g.attrs[
                "data-device"]), ()))
            if g.attrs.get("data-c") != want:
                fail(case, f"{grid_id}: device {g.attrs['data-device']} at "
                           f"{g.attrs.get('data-c')}, expected {want}")
                break
        if physical and grid_id == prefix + "grid-physical":
            hosts = mesh_json["hosts"]["count"]
            drawn = {r.attrs["data-host"] for r in svg.find_all(
                "rect", data_host=True)}
            if len(drawn) != hosts:
                fail(case, f"{len(drawn)} hosts outlined, {hosts} hosts")
    # The axis selector: every cell then names its coordinate along it.
    for k, axis in enumerate(axes):
        if axis["size"] == 1:
            continue
        sel = run.dom(case, page, f"#axis={axis['name']}")
        if sel is None:
            return
        for grid_id in grids:
            for g in sel.find("svg", id=grid_id).find_all("g",
                                                          data_device=True):
                label = g.find("text", **{"class": "coord"})
                want = f"{axis['name']} {coords[int(g.attrs['data-device'])][k]}"
                if label is None or label.text() != want:
                    fail(case, f"#axis={axis['name']}: device "
                               f"{g.attrs['data-device']} says "
                               f"{label.text() if label else None!r}, "
                               f"expected {want!r}")
                    break
        break  # one axis other than the default is enough


def check_memory(case, root, memory):
    bar = root.find("g", data_bar="device")
    if bar is None:
        fail(case, "no memory bar")
        return
    sums = {}
    for seg in bar.find_all("rect", data_category=True):
        cat = seg.attrs["data-category"]
        sums[cat] = sums.get(cat, 0) + int(seg.attrs["data-bytes"])
    per = memory["per_device"]
    total = sum(sums.values())
    if total != memory["max_device_total"] or total != per["total"]:
        fail(case, f"memory bar adds up to {total}, the JSON's total is "
                   f"{memory['max_device_total']}")
    for cat in ("params", "grads", "optimizer", "gather_buffer",
                "optimizer_step", "activations"):
        if cat in sums and sums[cat] != per[cat]:
            fail(case, f"memory bar: {cat} {sums[cat]}, JSON {per[cat]}")
    for cat in ("params", "grads", "optimizer"):
        if per[cat] > 0 and cat not in sums:
            fail(case, f"memory bar: no {cat} segment")
    if memory.get("capacity_bytes") is not None:
        line = root.find("g", **{"class": "capacity"})
        if line is None or int(line.attrs["data-bytes"]) != memory[
                "capacity_bytes"]:
            fail(case, "the usable-HBM line is not at the JSON's capacity")
    if memory.get("stages"):
        bars = root.find_all("g", **{"class": "bar"})
        if len(bars) != 1 + len(memory["stages"]):
            fail(case, f"{len(bars)} bars for {len(memory['stages'])} stages")
        for st in memory["stages"]:
            b = root.find("g", data_bar=f"stage {st['stage']}")
            got = sum(int(s.attrs["data-bytes"])
                      for s in b.find_all("rect", data_category=True))
            if b is None or got != st["total"]:
                fail(case, f"stage {st['stage']}: bar {got}, JSON "
                           f"{st['total']}")


def check_diagnostic_links(case, root, doc):
    with_tensor = [d for d in doc["diagnostics"] if d.get("tensor")]
    links = root.find_all("a", **{"class": "tensor-link"})
    rows = {r.attrs.get("id"): r for r in table_rows(root, "tensors")}
    known = {t["name"] for t in doc["tensors"]}
    want = [d["tensor"] for d in with_tensor if d["tensor"] in known]
    if len(links) != len(want) or not want:
        fail(case, f"{len(links)} diagnostic links, {len(want)} diagnostics "
                   "about a tensor of the manifest")
    for a in links:
        target = a.attrs["href"][1:]
        row = rows.get(target)
        if row is None:
            fail(case, f"a diagnostic links to #{target}, no such row")
        elif a.text() not in expand(row.attrs["data-tensor"]):
            fail(case, f"a diagnostic about {a.text()} links to the row of "
                       f"{row.attrs['data-tensor']}")


# ---------------------------------------------------------------------------
# Cases.

def case_mesh(run, case, argv):
    rendered = run.page(case, argv)
    if rendered is None:
        return
    doc, path, root = rendered
    check_grids(run, case, path, root, doc, doc["mesh"]["axes"],
                "topology" in doc)
    links = [r.attrs["data-axis"] for r in root.find_all("tr", data_axis=True)]
    if "topology" in doc and links != [a["axis"] for a in doc["axes_links"]]:
        fail(case, f"links legend lists {links}")
    run.screenshot(case, path)


def case_check(run, case, argv, codes, sort_col, filter_text, diagnostics):
    rendered = run.page(case, argv, codes)
    if rendered is None:
        return
    doc, path, root = rendered
    rows = table_rows(root, "tensors")
    if rows is None:
        fail(case, "no table#tensors")
        return
    check_rows_cover(case, rows, {t["name"]: short_spec(t["spec"])
                                  for t in doc["tensors"]})
    check_memory(case, root, doc["memory"])
    if diagnostics:
        check_diagnostic_links(case, root, doc)
    check_sorting(run, case, path, "tensors", sort_col)
    check_filter(run, case, path, "tensors", filter_text)
    # Without a topology, the mesh's grid of plain ids.
    mesh = {"device_ids": None}
    if "topology" not in doc:
        n = doc["mesh"]["devices"]
        shape = [a["size"] for a in doc["mesh"]["axes"]]

        def nest(ids, dims):
            if not dims:
                return ids[0]
            step = len(ids) // dims[0]
            return [nest(ids[i * step:(i + 1) * step], dims[1:])
                    for i in range(dims[0])]
        mesh["device_ids"] = nest(list(range(n)), shape)
        check_grids(run, case, path, root, mesh, doc["mesh"]["axes"], False)
    else:
        cells_ = root.find("svg", id="grid-physical")
        if cells_ is None or len(cells_.find_all("g", data_device=True)) != \
                doc["mesh"]["devices"]:
            fail(case, "the physical grid lacks devices")
    run.screenshot(case, path)


def case_reshard(run, case, argv):
    rendered = run.page(case, argv)
    if rendered is None:
        return
    doc, path, root = rendered
    rows = table_rows(root, "tensors")
    check_rows_cover(case, rows, {t["name"]: short_spec(t["to_spec"])
                                  for t in doc["tensors"]})
    check_rows_cover(case, rows, {t["name"]: short_spec(t["from_spec"])
                                  for t in doc["tensors"]},
                     "data-from-spec")
    totals = {r.attrs["data-total"]: r for r in root.find_all(
        "tr", data_total=True)}
    for key, figures in (("plan", doc["totals"]),
                         ("naive", doc["naive_totals"])):
        r = totals.get(key)
        if r is None or int(r.attrs["data-bytes"]) != figures[
                "bytes_per_device"] or int(r.attrs["data-peak"]) != figures[
                "peak_bytes_per_device"]:
            fail(case, f"totals: {key} differs from the JSON")
    check_sorting(run, case, path, "tensors", "bytes")
    # Each side's devices, as `mesh` lays that side's mesh out.
    for prefix, side in (("from-", "from"), ("to-", "to")):
        mesh_argv = ["mesh", "--topology", flag(argv, "--topology"),
                     "--mesh", flag(argv, f"--{side}-mesh")]
        mesh_doc = run.run_shardplan(f"{case}-{side}-mesh", mesh_argv,
                                     "json", (0,))
        if mesh_doc is None:
            continue
        mesh_doc = json.loads(mesh_doc)
        check_grids(run, case, path, root, mesh_doc, mesh_doc["mesh"]["axes"],
                    True, prefix)
    run.screenshot(case, path)


def flag(argv, name):
    return argv[argv.index(name) + 1]


def case_search(run, case, argv):
    rendered = run.page(case, argv)
    if rendered is None:
        return
    doc, path, root = rendered
    rows = table_rows(root, "candidates")
    meshes = [r.attrs["data-mesh"] for r in rows]
    if meshes != [c["mesh"] for c in doc["candidates"]]:
        fail(case, f"candidates {meshes}, JSON "
                   f"{[c['mesh'] for c in doc['candidates']]}")
    winner = [c for c in doc["candidates"] if c["rank"] == 1]
    marked = root.find("svg", id="scatter").find_all("text", **{
        "class": "winner"})
    if len(winner) != 1 or len(marked) != 1 or \
            marked[0].parent.attrs.get("data-mesh") != winner[0]["mesh"]:
        fail(case, "the scatter does not mark the JSON's winner")
    drawn = root.find("svg", id="scatter").find_all("g", **{"class": "point"})
    with_step = [c for c in doc["candidates"] if c["step"]]
    if len(drawn) != len(with_step):
        fail(case, f"{len(drawn)} points, {len(with_step)} candidates with a "
                   "step")
    # The usable-HBM line: HBM less the runtime's headroom (none on a TPU),
    # floored as memory computes capacity.
    hbm = next(c["memory"]["hbm_bytes"] for c in doc["candidates"]
               if c["memory"] and c["memory"].get("hbm_bytes"))
    usable = next(c["memory"]["capacity_bytes"] for c in doc["candidates"]
                  if c["memory"] and c["memory"].get("capacity_bytes"))
    line = root.find("svg", id="scatter").find("g", **{"class": "capacity"})
    if usable != math.floor(hbm * (1.0 - 0.0)) or line is None or int(
            line.attrs["data-bytes"]) != usable:
        fail(case, "the scatter's line is not the usable HBM")
    check_sorting(run, case, path, "candidates", "step")
    # The winner's devices, as `mesh` lays its mesh out.
    mesh_argv = ["mesh", "--topology", flag(argv, "--topology"), "--mesh",
                 winner[0]["mesh"]]
    if winner[0]["dcn"]:
        mesh_argv += ["--dcn", winner[0]["dcn"]]
    mesh_doc = run.run_shardplan(f"{case}-winner-mesh", mesh_argv, "json",
                                 (0,))
    if mesh_doc is not None:
        mesh_doc = json.loads(mesh_doc)
        check_grids(run, case, path, root, mesh_doc, mesh_doc["mesh"]["axes"],
                    True)
    run.screenshot(case, path)


def case_tables(run, case, argv, key, first_column):
    """A view of summary lines and tables (topology, manifest): its first
    table has one row per entry of the JSON's `key`, in order."""
    rendered = run.page(case, argv)
    if rendered is None:
        return
    doc, path, root = rendered
    entries = doc[key]
    section = root.find("section", id="sec-table-0")
    if section is None:
        fail(case, "no table section")
        return
    body = section.find("tbody")
    rows = body.find_all("tr") if body is not None else []
    names = [r.find("td").text().strip() for r in rows]
    expected = [e[first_column] for e in entries]
    if names != expected:
        fail(case, f"rows {names[:5]}..., JSON {expected[:5]}...")
    run.screenshot(case, path)


def case_escaping(run, case):
    """Names with markup, quotes and slashes stay text."""
    names = ['w<script>document.body.setAttribute("data-error","x")</script>',
             'q"&\'<b>bold</b>', "s//evil.example/x.js", "a.0.b", "a.1.b"]
    manifest = {"params": [{"name": n, "shape": [8, 8], "dtype": "bf16"}
                           for n in names]}
    path = os.path.join(run.out, f"{case}.manifest.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    argv = ["plan", "--devices", "4", "--mesh", "fsdp:4", "--manifest", path,
            "--rules", "fsdp"]
    page = run.run_shardplan(case, argv, "html", (0, 1))
    if page is None:
        return
    check_no_url(case, page)
    root = run.dom(case, os.path.join(run.out, f"{case}.html"))
    if root is None:
        return
    scripts = root.find_all("script")
    if len(scripts) != 1:
        fail(case, f"{len(scripts)} <script> elements, expected the page's one")
    if root.find("b") is not None:
        fail(case, "a tensor name's markup became an element")
    got = sorted(e for r in table_rows(root, "tensors")
                 for e in expand(r.attrs["data-tensor"]))
    if got != sorted(names):
        fail(case, f"names in the page: {got}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shardplan", required=True)
    p.add_argument("--chromium", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--docs")
    args = p.parse_args()
    if os.environ.get("UPDATE_DOCS") == "1" and not args.docs:
        args.docs = os.path.join(args.source, "docs", "images")
    chromium = shutil.which(args.chromium) or (
        args.chromium if os.access(args.chromium, os.X_OK) else None)
    if chromium is None:
        print(f"check_html: chromium not found ({args.chromium}); "
              "scripts/install-deps.sh installs Debian's chromium",
              file=sys.stderr)
        return 1
    args.chromium = chromium
    os.makedirs(args.out, exist_ok=True)
    if args.docs:
        os.makedirs(args.docs, exist_ok=True)
    run = Runner(args)
    try:
        ex = os.path.join(args.source, "configs", "examples")
        tiny = ["--manifest", os.path.join(ex, "tiny-llama.json")]
        case_mesh(run, "mesh", ["mesh", "--topology", "v5p-128", "--mesh",
                                "fsdp:16,tp:4"])
        case_mesh(run, "mesh-gpu", ["mesh", "--topology", "h100x32", "--mesh",
                                    "dp:2,fsdp:2,tp:8"])
        case_mesh(run, "mesh-multislice", ["mesh", "--topology", "2xv5e-16",
                                           "--mesh", "dp:2,fsdp:4,tp:4",
                                           "--dcn", "dp:2"])
        case_check(run, "plan",
                   ["plan", "--topology", "v5p-128", "--mesh", "fsdp:16,tp:4",
                    "--model", "llama-3-8b", "--rules", "fsdp-tp",
                    "--recipe", "adam", "--seq", "8192", "--batch", "64"],
                   (0,), "group_bytes", "mlp", False)
        case_check(run, "plan-devices",
                   ["plan", "--devices", "8", "--mesh", "fsdp:2,tp:4"] + tiny,
                   (0,), "bytes", "self_attn", False)
        case_check(run, "check",
                   ["check", "--topology", "v5e-8", "--mesh", "fsdp:2,tp:4"]
                   + tiny + ["--specs", os.path.join(
                       args.source, "tests", "data", "check",
                       "tiny-llama.bad-specs.json")],
                   (1,), "bytes", "mlp", True)
        case_check(run, "memory",
                   ["memory", "--topology", "v5p-256", "--mesh",
                    "pp:4,fsdp:8,tp:4", "--model", "llama-3-70b", "--rules",
                    "fsdp-tp", "--recipe", "adam", "--seq", "8192",
                    "--batch", "128", "--microbatches", "8"],
                   (0,), "group_bytes", "o_proj", False)
        case_reshard(run, "reshard",
                     ["reshard", "--topology", "v5p-512", "--model",
                      "llama-3-70b", "--from-mesh", "fsdp:256", "--from-rules",
                      "fsdp", "--to-mesh", "fsdp:64,tp:4", "--to-rules",
                      "fsdp-tp"])
        case_search(run, "search",
                    ["search", "--topology", "v5p-256", "--model",
                     "llama-3-70b", "--seq", "8192", "--batch", "128",
                     "--top", "3"])
        case_tables(run, "topology-list", ["topology", "list"],
                    "topologies", "name")
        case_tables(run, "model-list", ["manifest", "--model", "list"],
                    "models", "name")
        case_escaping(run, "escaping")
    finally:
        shutil.rmtree(run.profile, ignore_errors=True)
    if FAILURES:
        print(f"check_html: {len(FAILURES)} failures", file=sys.stderr)
        return 1
    print(f"check_html: every report checked; pages and screenshots in "
          f"{args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
