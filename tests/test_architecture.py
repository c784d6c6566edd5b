"""The house's rules, checked on the source: who may import whom, and where argparse lives.

The package's imports are read with ``ast`` (every ``import`` / ``from ... import``
naming a ``goodput_jax`` module, at any depth, including imports inside functions),
giving a module graph. The rules (see docs/architecture.md):

1. no import cycles among goodput_jax modules (imports under ``if TYPE_CHECKING:``
   are not run and do not count);
2. ``goodput_jax.model`` imports only ``goodput_jax.model`` (pure JAX, the bottom);
3. ``goodput_jax.measure`` imports only ``goodput_jax.measure`` (the light core);
4. ``goodput_jax.sched`` imports only ``sched``, ``model`` and the shared ``_progress``;
   ``goodput_jax.report`` only ``report``, ``measure`` and ``model``;
5. nothing outside ``goodput_jax.cli`` imports ``goodput_jax.cli``;
6. ``argparse.Namespace`` appears only in ``goodput_jax/cli/`` and
   ``goodput_jax/sched/sim/cli.py`` (library functions take keyword arguments);
7. every room has a layer rule (``ROOM_RULES``): runtime, integrations, adaptive, the
   Google/MaxText drop-ins (``compat``: ``goodput_jax.compat`` and the thin top-level
   modules), cluster, cli and report import only the rooms listed for them;
8. no module imports a private (``_name``) name or module of another room, nor reads,
   writes or ``getattr``s a private attribute that only another room defines (rooms meet
   at public, typed seams).

Known violations in code that other issues are reshaping are listed in the
allowlists below, each naming its issue; any NEW violation fails, and an entry
that no longer matches anything fails too (so the list only shrinks).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = "goodput_jax"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

#: Import edges (importer, imported) that break a rule today, with the issue fixing them.
ALLOWED_EDGES: dict[tuple[str, str], str] = {}
#: package-private leaf utilities every room may import (they import nothing from the package)
SHARED_LEAVES: tuple[str, ...] = ("goodput_jax._lazy",)

#: Files that still use argparse.Namespace outside the CLI, with the issue fixing them.
ALLOWED_NAMESPACE: dict[str, str] = {}

NAMESPACE_OK = ("goodput_jax/cli/", "goodput_jax/sched/sim/cli.py")

#: the thin top-level modules at Google's and MaxText's import paths belong to compat
COMPAT_TOP = ("goodput", "goodput_elastic", "goodput_utils", "monitoring", "monitoring_elastic")
#: the demo job's top-level modules (the job, its summary text) are one room
DEMO_TOP = ("demo", "demo_summary")

#: room -> the rooms it may import (besides itself and the shared leaves)
ROOM_RULES: dict[str, tuple[str, ...]] = {
    "runtime": ("measure",),
    "integrations": ("measure", "model", "runtime"),
    "adaptive": ("integrations", "measure", "model", "runtime"),
    "compat": ("measure", "runtime", "integrations"),
    "cluster": ("adaptive", "integrations", "measure", "model", "report", "runtime", "sched",
                "_progress"),
    "report": ("measure", "model"),
    "demo": ("adaptive", "integrations", "measure", "model", "report", "runtime", "_progress"),
    "cli": ("adaptive", "cluster", "compat", "demo", "integrations", "measure", "model",
            "report", "root", "runtime", "sched", "_progress"),
}

#: Private reaches across rooms that another issue is removing: "module:name" -> issue.
ALLOWED_PRIVATE: dict[str, str] = {
}


# ----------------------------------------------------------------------------- the graph
def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Imports(ast.NodeVisitor):
    """(imported name, runs at import/call time) for every goodput_jax import in a module."""

    def __init__(self, module: str, is_package: bool):
        self.package = module if is_package else module.rpartition(".")[0]
        self.found: list[tuple[str, bool]] = []
        self._typing_only = 0

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._typing_only += 1
            for child in node.body:
                self.visit(child)
            self._typing_only -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                self.found.append((alias.name, not self._typing_only))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            parts = self.package.split(".")
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        if base != PACKAGE and not base.startswith(PACKAGE + "."):
            return
        for alias in node.names:  # "from a.b import c": a.b.c if it is a module, else a.b
            self.found.append((f"{base}.{alias.name}", not self._typing_only))


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(all edges, runtime edges): module -> the goodput_jax modules it imports."""
    sources = _sources()
    modules = set(sources)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    every: dict[str, set[str]] = {}
    runtime: dict[str, set[str]] = {}
    for module, path in sources.items():
        visitor = _Imports(module, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        every[module], runtime[module] = set(), set()
        for name, runs in visitor.found:
            target = resolve(name)
            if target is None or target == module:
                continue
            every[module].add(target)
            if runs:
                runtime[module].add(target)
    return every, runtime


EVERY, RUNTIME = _graph()


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _is_in(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def _violations(importer_room: str, allowed_rooms: tuple[str, ...]) -> list[str]:
    bad = []
    for src, targets in EVERY.items():
        if not _is_in(src, importer_room):
            continue
        for dst in sorted(targets):
            if any(_is_in(dst, r) for r in allowed_rooms + SHARED_LEAVES) \
                    or (src, dst) in ALLOWED_EDGES:
                continue
            bad.append(f"{src} imports {dst}")
    return bad


# ----------------------------------------------------------------------------- the rules
def test_the_graph_sees_the_package():
    assert len(EVERY) > 40
    assert "goodput_jax.measure.stores.base" in EVERY["goodput_jax.measure.stores.sqlite"]
    # imports inside functions count (the CLI's heavy imports are lazy)
    assert "goodput_jax.report.text" in EVERY["goodput_jax.cli.report"]


def test_no_import_cycles():
    edges = {src: {dst for dst in dsts if (src, dst) not in ALLOWED_EDGES}
             for src, dsts in RUNTIME.items()}
    assert _cycles(edges) == [], "import cycles (break them; see docs/architecture.md)"


def test_model_imports_only_model():
    assert _violations("goodput_jax.model", ("goodput_jax.model",)) == []


def test_measure_imports_only_measure():
    assert _violations("goodput_jax.measure", ("goodput_jax.measure",)) == []


def test_sched_imports_only_sched_and_model():
    assert _violations("goodput_jax.sched", ("goodput_jax.sched", "goodput_jax.model",
                                              "goodput_jax._progress")) == []


def test_report_imports_only_report_measure_and_model():
    assert _violations("goodput_jax.report", ("goodput_jax.report", "goodput_jax.measure",
                                               "goodput_jax.model")) == []


def test_shared_leaves_import_nothing_from_the_package():
    for leaf in SHARED_LEAVES:
        assert [m for m in EVERY[leaf] if _is_in(m, "goodput_jax")] == [], leaf


def test_nothing_imports_the_cli():
    bad = [f"{src} imports {dst}" for src, dsts in EVERY.items() for dst in sorted(dsts)
           if _is_in(dst, "goodput_jax.cli") and not _is_in(src, "goodput_jax.cli")]
    assert bad == []


def _namespace_uses(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "Namespace" and \
                isinstance(node.value, ast.Name) and node.value.id == "argparse":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "argparse" and \
                any(a.name == "Namespace" for a in node.names):
            lines.append(node.lineno)
    return lines


def _namespace_files() -> dict[str, list[int]]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).as_posix()
        if rel.startswith(NAMESPACE_OK[0]) or rel == NAMESPACE_OK[1]:
            continue
        lines = _namespace_uses(path)
        if lines:
            found[rel] = lines
    return found


def test_argparse_namespace_only_in_the_cli():
    bad = {f: lines for f, lines in _namespace_files().items() if f not in ALLOWED_NAMESPACE}
    assert bad == {}, "library functions take keyword arguments; the CLI converts"


def test_allowlists_hold_no_stale_entries():
    """When another issue fixes an allowlisted violation, delete its entry here."""
    stale = [f"{a} -> {b}" for (a, b) in ALLOWED_EDGES if b not in EVERY.get(a, ())]
    found = _namespace_files()
    stale += [f for f in ALLOWED_NAMESPACE if f not in found]
    reaches = {r.split(" ", 1)[0] for r in _private_reaches()}
    stale += [k for k in ALLOWED_PRIVATE if k not in reaches]
    assert stale == []


# ----------------------------------------------------------------------------- rooms
def room_of(module: str) -> str:
    """The room a module lives in: ``goodput_jax.<room>...``; the drop-ins are ``compat``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "root"
    if parts[1] in DEMO_TOP:
        return "demo"
    return "compat" if parts[1] in COMPAT_TOP else parts[1]


def test_every_room_has_a_layer_rule():
    rooms = {room_of(m) for m in EVERY} - {"root", "model", "measure", "sched"}
    rooms -= {room_of(leaf) for leaf in SHARED_LEAVES} | {"_progress"}
    assert sorted(rooms - set(ROOM_RULES)) == []


@pytest.mark.parametrize("room", sorted(ROOM_RULES))
def test_room_imports_only_its_layers(room):
    bad = []
    for src, targets in EVERY.items():
        if room_of(src) != room:
            continue
        for dst in sorted(targets):
            other = room_of(dst)
            if other == room or other in ROOM_RULES[room] or dst in SHARED_LEAVES \
                    or (src, dst) in ALLOWED_EDGES:
                continue
            bad.append(f"{src} imports {dst}")
    assert bad == []


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _on_self(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def _private_definitions(sources: dict[str, Path]) -> dict[str, set[str]]:
    """room -> the private names it defines: functions, classes, module and class
    variables, and attributes it sets on ``self``/``cls``."""
    defs: dict[str, set[str]] = {}
    for module, path in sources.items():
        names = defs.setdefault(room_of(module), set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = node.name
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                name = node.id
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and _on_self(node):
                name = node.attr
            elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
                names.update(c.value for c in ast.walk(node.value)
                             if isinstance(c, ast.Constant) and isinstance(c.value, str)
                             and _is_private(c.value))
                continue
            else:
                continue
            if _is_private(name):
                names.add(name)
    return defs


def _private_reaches(sources: dict[str, Path] | None = None) -> list[str]:
    """``module:name what`` for every reach into another room's private names."""
    sources = _sources() if sources is None else sources
    defs = _private_definitions(sources)
    found = []
    for module, path in sources.items():
        room = room_of(module)
        own = defs.get(room, set())
        foreign = set().union(*(n for r, n in defs.items() if r != room))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                if base != PACKAGE and not base.startswith(PACKAGE + "."):
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    target = full if full in sources else base
                    if target in SHARED_LEAVES or room_of(target) in (room, "_progress"):
                        continue
                    if _is_private(alias.name) or any(map(_is_private, target.split("."))):
                        found.append(f"{module}:{alias.name} imported from {base}")
            elif isinstance(node, ast.Attribute) and _is_private(node.attr) \
                    and not _on_self(node) and node.attr in foreign and node.attr not in own:
                found.append(f"{module}:{node.attr} read or set (line {node.lineno})")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr", "setattr", "delattr") \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                    and isinstance(node.args[1].value, str) \
                    and _is_private(node.args[1].value) \
                    and node.args[1].value in foreign \
                    and not (isinstance(node.args[0], ast.Name)
                             and node.args[0].id in ("self", "cls")
                             and node.args[1].value in own):
                found.append(f"{module}:{node.args[1].value} via {node.func.id} "
                             f"(line {node.lineno})")
    return sorted(set(found))


def test_the_private_reach_scan_sees_each_kind_of_reach(tmp_path):
    assert room_of("goodput_jax.goodput") == "compat"
    assert room_of("goodput_jax.measure.engine") == "measure"
    owner = tmp_path / "owner.py"
    owner.write_text("_SECRET = 1\nclass Rec:\n    def __init__(self):\n"
                     "        self._sink = None\n        self._own = 2\n")
    user = tmp_path / "user.py"
    user.write_text("from goodput_jax.measure.owner import _SECRET, Rec\n"
                    "r = Rec()\nr._sink\ngetattr(r, '_sink', None)\n"
                    "class Mine:\n    def __init__(self):\n        self._mine = 1\n"
                    "    def same(self, other):\n        return other._mine\n")
    sources = {"goodput_jax.measure.owner": owner, "goodput_jax.runtime.user": user}
    found = _private_reaches(sources)
    assert [f.split(" ", 1)[0] for f in found] == [
        "goodput_jax.runtime.user:_SECRET", "goodput_jax.runtime.user:_sink",
        "goodput_jax.runtime.user:_sink"], found
    # the same module inside one room is not a reach
    assert _private_reaches({"goodput_jax.measure.owner": owner,
                             "goodput_jax.measure.user": user}) == []


def test_no_room_reaches_into_another_rooms_private_names():
    bad = [r for r in _private_reaches() if r.split(" ", 1)[0] not in ALLOWED_PRIVATE]
    assert bad == [], "add a public, tested API in the room that owns the name"


# ----------------------------------------------------------------------------- public API
@pytest.mark.parametrize("module", ["goodput_jax", "goodput_jax.model"])
def test_curated_exports_resolve(module):
    import importlib

    mod = importlib.import_module(module)
    assert mod.__all__ == sorted(mod.__all__) or module == "goodput_jax"
    for name in mod.__all__:
        assert getattr(mod, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        getattr(mod, "nope")


def test_light_imports_start_no_jax_and_need_no_extras():
    """The public package, the model's API object, the CLI, and the light core's modules."""
    code = (
        "import sys\n"
        "import goodput_jax, goodput_jax.model, goodput_jax.model.types, goodput_jax.model.hints\n"
        "import goodput_jax.cli\n"
        "import goodput_jax.measure.recorder, goodput_jax.measure.calculator\n"
        "import goodput_jax.measure.stores.sqlite\n"
        "heavy = ('jax', 'flax', 'optax', 'matplotlib', 'scipy')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT.parent)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_no_package_file_is_over_600_lines():
    """Small rooms (issue 43): each file does one job; split along a seam you can name in
    one line (the split files say which in their docstrings)."""
    long = {str(p.relative_to(ROOT.parent)): n for p in sorted(ROOT.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert long == {}, long


def test_no_public_definition_outside_compat_takes_more_than_ten_parameters():
    """Options objects, not long keyword lists (issue 43): only the drop-ins in compat/ keep
    Google's and MaxText's long signatures."""
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "compat" or rel.stem in COMPAT_TOP:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def walk(node: ast.AST, prefix: str) -> None:
            for n in ast.iter_child_nodes(node):
                if isinstance(n, ast.ClassDef) and not n.name.startswith("_"):
                    walk(n, f"{prefix}{n.name}.")
                elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        not n.name.startswith("_") or n.name == "__init__"):
                    a = n.args
                    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
                    count = len([x for x in names if x not in ("self", "cls")])
                    if count > 10:
                        long.append(f"{rel}:{prefix}{n.name} ({count})")

        walk(tree, "")
    assert long == [], long
