"""Imports point one way, checked over the whole tree.

Every module of the broker (``natsbroker/``, the drop-in factories in
``plugins/`` installed as ``natsbroker.plugins``, and ``spark/`` installed as
``natsbroker.spark``) is read with :mod:`ast`, never imported, and its imports
become edges of one graph. The tests then say:

* no import cycles between modules;
* no private name (``_x``) is imported from another module, neither with
  ``from m import _x`` nor as ``m._x`` on an imported module (tools/ aside);
* the sans-IO protocol modules import only the standard library and each other;
* packages are layered, and every import points to the same layer or below.

An import inside a function counts exactly like one at the top of the module.
Lazy imports have legitimate uses (a drop-in factory that keeps plugin scanning
cheap, an optional dependency), but a lazy import that only exists to dodge a
circular import is still a circular dependency: it makes the two modules one
unit that cannot be read, tested or loaded apart. ``if TYPE_CHECKING:`` imports
count too. The private-name and layering rules have no allowances today; if
one is ever needed, add it here with the reason.
"""

import ast
import os
import sys

import attrs
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# source directory -> the package it is installed as
PACKAGES = {"natsbroker": "natsbroker", "plugins": "natsbroker.plugins", "spark": "natsbroker.spark",
            "tools": "tools"}

# Lowest first. A module belongs to the layer of the longest entry that names it
# or one of its packages; it may import its own layer and the layers below.
LAYERS = [
    ("foundation: no broker concepts", [
        "natsbroker", "natsbroker._build", "natsbroker.fatal", "natsbroker.private",
        "natsbroker.jsonbound", "natsbroker.nuid", "natsbroker.identity", "natsbroker.netaddrs",
        "natsbroker.ratelog", "natsbroker.gctune", "natsbroker.interfaces",
    ]),
    ("Go compatibility helpers", ["natsbroker.gocompat"]),
    ("sans-IO protocol", ["natsbroker.protocol"]),
    ("subjects", ["natsbroker.subjects"]),
    ("configuration model and syntax", ["natsbroker.config", "natsbroker.config.model",
                                        "natsbroker.config.syntax"]),
    ("accounts", ["natsbroker.accounts"]),
    # the formats, not the runtime: nkeys, the JWT codec, which keys are trusted
    ("credential formats", ["natsbroker.auth.nkey", "natsbroker.auth.jwt.claims",
                            "natsbroker.auth.jwt.trust"]),
    # contexts built from a tls { } block, which the loader checks as nats-server does
    ("TLS contexts", ["natsbroker.connection.tls"]),
    # config.load checks what nats-server checks at load time, below every runtime
    # (config.load's top level, and a module per block on config.blocks and config.values)
    ("configuration loader", ["natsbroker.config.load", "natsbroker.config.operator",
                              "natsbroker.config.values", "natsbroker.config.blocks",
                              "natsbroker.config.authorization", "natsbroker.config.accounts",
                              "natsbroker.config.mappings", "natsbroker.config.operator",
                              "natsbroker.config.tls", "natsbroker.config.cluster",
                              "natsbroker.config.websocket", "natsbroker.config.jetstream",
                              "natsbroker.config.changefeed"]),
    ("authentication", ["natsbroker.auth"]),
    ("message stores", ["natsbroker.store"]),
    ("connections", ["natsbroker.connection"]),
    ("cluster", ["natsbroker.cluster"]),
    # The monitor reads the broker's state by its attributes and imports none
    # of it: the broker hands plugins its documents (IBroker.monitor).
    ("monitoring", ["natsbroker.monitoring"]),
    ("broker", ["natsbroker.broker"]),
    ("built-in features", ["natsbroker.pubsub", "natsbroker.jetstream", "natsbroker.system",
                           "natsbroker.changefeed", "natsbroker.objstore"]),
    ("drop-in factories and their loader", ["natsbroker.plugins", "natsbroker.discovery"]),
    ("assembly and entry points", [
        "natsbroker.server", "natsbroker.lameduck", "natsbroker.logs", "natsbroker.signals",
        "natsbroker.cli", "natsbroker.tap", "natsbroker.embed", "natsbroker.launch",
        "natsbroker.admin", "natsbroker.__main__", "natsbroker.pytest_plugin",
    ]),
    ("change-feed ingest (PySpark)", ["natsbroker.spark"]),
    ("benchmarks, soak and chaos tools", ["tools"]),
]

PROTOCOL = "natsbroker.protocol"

# The layers below accounts know no feature's subjects ($JS., $KV., $O., $SYS.)
# but for these, each with its reason.
FEATURE_SUBJECT_PREFIXES = ("$JS.", "$KV.", "$O.", "$SYS.")
FEATURE_SUBJECT_ALLOWANCES = {
    # Sublist.match does not cache ack subjects: each names one delivery and
    # never comes again. Decided on every cache miss of every publish, before
    # the match result is known (see the comment there).
    ("natsbroker.subjects.sublist", "$JS.ACK."),
}
BELOW_FEATURES = "accounts"


@attrs.frozen
class Import:
    """One import statement's target, as seen from the importing module."""

    module: str  # the broker module that is imported (or whose name is)
    name: str  # the name imported from it, "" for the module itself
    line: int


def _modules(root=ROOT):
    """Installed module name -> source path."""
    found = {}
    for directory, package in PACKAGES.items():
        top = os.path.join(root, directory)
        for dirpath, dirnames, filenames in os.walk(top):
            # natsbroker/plugins and natsbroker/spark are links to the top-level folders
            dirnames[:] = [d for d in dirnames
                           if d != "__pycache__" and not os.path.islink(os.path.join(dirpath, d))]
            for filename in filenames:
                if not filename.endswith(".py"):
                    continue
                parts = os.path.relpath(os.path.join(dirpath, filename), top)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                found[".".join([package] + parts)] = os.path.join(dirpath, filename)
    return found


MODULES = _modules()
TREES = {name: ast.parse(open(path).read(), path) for name, path in MODULES.items()}


def _package(module):
    return module if os.path.basename(MODULES[module]) == "__init__.py" else module.rpartition(".")[0]


def _absolute(module, node):
    if not node.level:
        return node.module
    base = _package(module)
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    return base + ("." + node.module if node.module else "")


def _imports(module):
    """Every import of a broker module in ``module``, at any depth."""
    out = []
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    out.append(Import(alias.name, "", node.lineno))
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            if source not in MODULES:
                continue
            for alias in node.names:
                full = source + "." + alias.name
                if full in MODULES:
                    out.append(Import(full, "", node.lineno))
                else:
                    out.append(Import(source, alias.name, node.lineno))
    return out


def _edges():
    return {m: sorted({i.module for i in _imports(m) if i.module != m}) for m in MODULES}


def _load(root):
    """Point the walk at another tree (the checker's own tests)."""
    MODULES.clear()
    MODULES.update(_modules(root))
    TREES.clear()
    TREES.update({name: ast.parse(open(path).read(), path) for name, path in MODULES.items()})


def _cycles(edges):
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _cycle_path(edges, component, start=None):
    """A shortest closed path from ``start`` through a cycle's modules, for the
    failure message."""
    members = set(component)
    start = start or component[0]
    previous = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in edges[v]:
            if w == start:
                path = [v]
                while previous[path[-1]] is not None:
                    path.append(previous[path[-1]])
                return " -> ".join(list(reversed(path)) + [start])
            if w in members and w not in previous:
                previous[w] = v
                queue.append(w)
    return " ".join(component)


def _line(module, lineno):
    return "%s:%d" % (os.path.relpath(MODULES[module], ROOT), lineno)


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _may_use_private(user, owner):
    """A module's private names are its own; a private *module* (``natsbroker._build``)
    belongs to its package and may be imported from inside that package."""
    return user == owner


def _private_module_ok(user, module):
    parent = module.rpartition(".")[0]
    return user == parent or user.startswith(parent + ".")


def _module_aliases(module):
    """Local names bound to a broker module by this module's imports."""
    aliases = {}
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in MODULES:
                    aliases[alias.asname] = alias.name
                elif not alias.asname:
                    top = alias.name.partition(".")[0]
                    if top in MODULES:
                        aliases[top] = top
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            for alias in node.names:
                full = "%s.%s" % (source, alias.name)
                if full in MODULES:
                    aliases[alias.asname or alias.name] = full
    return aliases


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + list(reversed(parts))


def _private_uses(module):
    found = []
    for imp in _imports(module):
        if imp.name and _private(imp.name) and not _may_use_private(module, imp.module):
            found.append("%s: from %s import %s" % (_line(module, imp.line), imp.module, imp.name))
        last = imp.module.rpartition(".")[2]
        if not imp.name and _private(last) and not _private_module_ok(module, imp.module):
            found.append("%s: import of private module %s" % (_line(module, imp.line), imp.module))
    aliases = _module_aliases(module)
    for node in ast.walk(TREES[module]):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        dotted = _dotted(node.value)
        if not dotted or dotted[0] not in aliases:
            continue
        owner = ".".join([aliases[dotted[0]]] + dotted[1:])
        if owner in MODULES and not _may_use_private(module, owner):
            found.append("%s: %s.%s" % (_line(module, node.lineno), owner, node.attr))
    return found


def _layer(module):
    best, best_len = None, -1
    for number, (_, names) in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best_len:
                best, best_len = number, len(name)
    return best


def test_the_walk_sees_the_tree():
    # a walk that found nothing would pass every test below
    assert "natsbroker.broker" in MODULES
    assert "natsbroker.plugins.pubsub" in MODULES
    assert "natsbroker.spark.ingest" in MODULES
    assert "natsbroker.protocol.parser" in MODULES
    assert len(MODULES) > 100
    assert "natsbroker.subjects.sublist" in _edges()["natsbroker.pubsub"]


def test_cycle_finder_finds_a_lazy_cycle(tmp_path, monkeypatch):
    # The checker itself: a cycle closed by an import inside a function is one,
    # and relative imports resolve.
    pkg = tmp_path / "natsbroker" / "jetstream"
    pkg.mkdir(parents=True)
    (tmp_path / "natsbroker" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "api.py").write_text("from natsbroker.jetstream import snapshot\n")
    (pkg / "snapshot.py").write_text(
        "def state():\n    from natsbroker.jetstream import api\n    return api\n")
    (pkg / "leaf.py").write_text("from . import api\nfrom .api import _hidden\napi._other\n")
    monkeypatch.setattr(sys.modules[__name__], "MODULES", {})
    monkeypatch.setattr(sys.modules[__name__], "TREES", {})
    _load(str(tmp_path))
    edges = _edges()
    assert edges["natsbroker.jetstream.leaf"] == ["natsbroker.jetstream.api"]
    [component] = _cycles(edges)
    assert _cycle_path(edges, component) == (
        "natsbroker.jetstream.api -> natsbroker.jetstream.snapshot -> natsbroker.jetstream.api")
    assert [use.partition(": ")[2] for use in _private_uses("natsbroker.jetstream.leaf")] == [
        "from natsbroker.jetstream.api import _hidden", "natsbroker.jetstream.api._other"]
    (pkg / "snapshot.py").write_text("def state():\n    return 1\n")
    _load(str(tmp_path))
    assert _cycles(_edges()) == []


def test_no_import_cycles():
    edges = _edges()
    # every member's shortest way round, so a knot of three shows all its loops
    cycles = sorted({_cycle_path(edges, c, m) for c in _cycles(edges) for m in c})
    assert not cycles, "import cycles (function-level imports included):\n" + "\n".join(cycles)


def test_no_private_names_across_modules():
    # tools/ (benchmarks, soak) are scripts outside the installed package: they
    # are in the cycle and layer checks, but may read internals (a benchmark
    # prints natsbroker._build.info()).
    found = sorted({use for module in MODULES if not module.startswith("tools.")
                    for use in _private_uses(module)})
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_protocol_is_sans_io():
    stdlib = sys.stdlib_module_names
    found = []
    for module in sorted(MODULES):
        if not module.startswith(PROTOCOL + ".") and module != PROTOCOL:
            continue
        for node in ast.walk(TREES[module]):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                targets = [_absolute(module, node)]
            else:
                continue
            for target in targets:
                if target == PROTOCOL or target.startswith(PROTOCOL + "."):
                    continue
                if target.partition(".")[0] in stdlib:
                    continue
                found.append("%s: imports %s" % (_line(module, node.lineno), target))
    assert not found, "the sans-IO protocol modules import only stdlib and each other:\n" + "\n".join(found)


def test_low_layers_name_no_feature_subjects():
    ceiling = next(i for i, (name, _) in enumerate(LAYERS) if name == BELOW_FEATURES)
    found = []
    for module in sorted(MODULES):
        if _layer(module) >= ceiling:
            continue
        docstrings = {id(n.body[0].value) for n in ast.walk(TREES[module])
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(TREES[module]):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))):
                continue
            if id(node) in docstrings:
                continue
            value = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
            if value.startswith(FEATURE_SUBJECT_PREFIXES) and (module, value) not in FEATURE_SUBJECT_ALLOWANCES:
                found.append("%s: %r" % (_line(module, node.lineno), value))
    assert not found, "a feature's subjects below the accounts layer:\n" + "\n".join(found)


def test_every_module_has_a_layer():
    assert not [m for m in MODULES if _layer(m) is None]


def test_imports_point_down():
    found = []
    for module in sorted(MODULES):
        mine = _layer(module)
        for imp in _imports(module):
            theirs = _layer(imp.module)
            if theirs > mine:
                found.append("%s: %s (%s) imports %s (%s)" % (
                    _line(module, imp.line), module, LAYERS[mine][0], imp.module, LAYERS[theirs][0]))
    assert not found, "imports that point up the layers:\n" + "\n".join(sorted(set(found)))


@pytest.mark.parametrize("layer", LAYERS, ids=[name for name, _ in LAYERS])
def test_layers_name_real_modules(layer):
    # a renamed package must not silently fall out of its layer
    _, names = layer
    assert all(name in MODULES for name in names)
