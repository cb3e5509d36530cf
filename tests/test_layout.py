"""Imports point one way: no module of plugins/jetstream or tools/bench is part
of an import cycle.

The graph is read from the source with ``ast``: every ``import`` counts,
module-level or inside a function (an import moved into a function still
makes a cycle, only a later one).  Edges go between the project's own modules
(natsbroker, plugins, tools), so a cycle through the core counts too.
"""

import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# {directory: the package it is installed as}: plugins/ and spark/ are
# natsbroker.plugins and natsbroker.spark (links under natsbroker/, skipped there).
PACKAGES = {"natsbroker": "natsbroker", "plugins": "natsbroker.plugins",
            "spark": "natsbroker.spark", "tools": "tools"}
CHECKED = ("natsbroker.jetstream", "tools.bench")


def module_files(root):
    """{dotted module name: path} of the project's own packages under ``root``."""
    out = {}
    for pkg, installed in PACKAGES.items():
        if not (root / pkg).is_dir():
            continue
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root / pkg).with_suffix("").parts)
            if any((root / pkg / Path(*parts[:i + 1])).is_symlink() for i in range(len(parts))):
                continue  # natsbroker/plugins, natsbroker/spark: read from their own directories
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([installed] + parts)] = path
    return out


def _resolve(name, modules):
    """The longest known module ``name`` starts with (``a.b.C`` -> ``a.b``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name, path, modules):
    """The project modules ``name`` (at ``path``) imports, anywhere in its source."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[:len(base) - node.level + (1 if is_pkg else 0)]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module
            # "from pkg import mod" imports the submodule pkg.mod, else names of base
            targets = [base + "." + alias.name if base + "." + alias.name in modules else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            mod = _resolve(target, modules)
            if mod is not None and mod != name:
                out.add(mod)
    # Importing a.b.c also runs a/__init__ and a/b/__init__; those are not
    # edges here (only the module named), so an __init__ must not import down.
    return out


def import_graph(root=ROOT):
    modules = module_files(root)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycle_through(graph, start):
    """An import cycle ``[start, ..., start]``, or None."""
    parent = {}
    queue = collections.deque()
    for nxt in sorted(graph.get(start, ())):
        parent.setdefault(nxt, start)
        queue.append(nxt)
    while queue:
        node = queue.popleft()
        if node == start:
            path = [start]
            node = parent[start]
            while node != start:
                path.append(node)
                node = parent[node]
            return [start] + path[:0:-1] + [start]
        for nxt in sorted(graph.get(node, ())):
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return None


def cycles(graph, prefixes=CHECKED):
    found = []
    for name in sorted(graph):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            cycle = cycle_through(graph, name)
            if cycle is not None:
                found.append(" -> ".join(cycle))
    return found


def test_jetstream_and_bench_imports_point_one_way():
    graph = import_graph()
    assert any(n.startswith("natsbroker.jetstream.") for n in graph)
    assert any(n.startswith("tools.bench.") for n in graph)
    assert cycles(graph) == []


def test_the_graph_sees_imports_inside_functions(tmp_path):
    # The checker itself: a cycle closed by an import inside a function is one.
    pkg = tmp_path / "plugins" / "jetstream"
    pkg.mkdir(parents=True)
    (tmp_path / "plugins" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "api.py").write_text("from natsbroker.jetstream import snapshot\n")
    (pkg / "snapshot.py").write_text(
        "def state():\n    from natsbroker.jetstream import api\n    return api\n")
    (pkg / "leaf.py").write_text("from . import api\n")
    graph = import_graph(tmp_path)
    assert graph["natsbroker.jetstream.leaf"] == {"natsbroker.jetstream.api"}
    assert cycles(graph) == [
        "natsbroker.jetstream.api -> natsbroker.jetstream.snapshot -> natsbroker.jetstream.api",
        "natsbroker.jetstream.snapshot -> natsbroker.jetstream.api -> natsbroker.jetstream.snapshot",
    ]
    (pkg / "snapshot.py").write_text("def state():\n    return 1\n")
    assert cycles(import_graph(tmp_path)) == []
