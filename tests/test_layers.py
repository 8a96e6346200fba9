"""cupool is a stack of floors: a module never imports from a floor above its own.

Every module of the package is parsed with :mod:`ast`; every ``import`` and ``from ...
import`` counts, at module level or inside a function (lazy imports are imports too), inside
``if TYPE_CHECKING:`` as well, relative ones resolved against the module's package. A
``from package import name`` counts as importing ``package.name`` when that is a module,
else ``package``.

The floors, lowest first (:data:`LAYERS`; a top-level package or module of ``cupool`` is a
*unit*, and every unit must be listed)::

    L0 errors core progress data    L1 check    L2 io devices    L3 sim kernels baselines
    L4 planning    L5 allocator    L6 swap    L7 capture sharing viz program    L8 app
    L9 cli __main__

Within one floor, units may import each other, but the unit-level import graph has no
cycle (:func:`test_no_import_cycle_between_units`).

**The package front** (``cupool/__init__.py``, the module ``cupool``) re-exports the public
names. It sits between ``app`` and ``cli``: it may import any floor below ``cli``, and no
module below ``cli`` may import it (``import cupool`` or ``from cupool import X`` where
``X`` is not a module) — a floor reaching the front reaches everything the front imports.
What ``import cupool`` runs stays light: the front's module-level imports reach only floors
up to ``planning`` (:data:`FRONT_EAGER_MAX`); the allocator and above (which import CuPy)
only inside functions, on first use. ``cupool/__main__.py`` (``python -m cupool``) is the
CLI's entry point and sits on the CLI's floor.
"""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cupool"
FRONT = "cupool"

LAYERS = {
    "errors": 0, "core": 0, "progress": 0, "data": 0,
    "check": 1,
    "io": 2, "devices": 2,
    "sim": 3, "kernels": 3, "baselines": 3,
    "planning": 4,
    "allocator": 5,
    "swap": 6,
    "capture": 7, "sharing": 7, "viz": 7, "program": 7,
    "app": 8,
    "cli": 9, "__main__": 9,
}
"""Top-level unit of ``cupool`` -> its floor."""
FRONT_LAYER = 8.5
"""The front sits above ``app`` and below ``cli``."""
FRONT_EAGER_MAX = LAYERS["planning"]
"""The highest floor the front may import at module level (the allocator imports CuPy)."""


@dataclass(frozen=True)
class ImportEdge:
    """``module`` imports ``target`` (both dotted names inside ``cupool``) on ``line``;
    ``lazy`` when the import statement is inside a function."""

    module: str
    target: str
    line: int
    lazy: bool


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_sources(root: Path = PACKAGE) -> dict[str, str]:
    """Every module of the package: dotted name -> source text."""
    return {module_name(path, root): path.read_text() for path in sorted(root.rglob("*.py"))}


def _lazy_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside a function (or lambda) body."""
    lazy = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            lazy |= {id(inner) for inner in ast.walk(node)
                     if isinstance(inner, ast.Import | ast.ImportFrom)}
    return lazy


def imports_of(module: str, source: str, modules: set[str], packages: set[str]):
    """The :class:`ImportEdge` of every import statement of ``module`` that names a module
    of ``cupool`` (``modules``: every module's dotted name; ``packages``: those that are
    packages, for resolving relative imports)."""
    tree = ast.parse(source)
    lazy = _lazy_nodes(tree)
    here = module if module in packages else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[:len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules
                       else origin for alias in node.names]
        else:
            continue
        for target in dict.fromkeys(targets):
            if target == FRONT or target.startswith(FRONT + "."):
                yield ImportEdge(module, target, node.lineno, id(node) in lazy)


def unit_of(name: str) -> str:
    """The top-level unit a dotted name inside ``cupool`` belongs to (``cupool`` itself:
    the front)."""
    return FRONT if name == FRONT else name.split(".")[1]


def layer_of(name: str) -> float:
    unit = unit_of(name)
    return FRONT_LAYER if unit == FRONT else LAYERS[unit]


def layer_label(name: str) -> str:
    unit = unit_of(name)
    if unit == FRONT:
        return "the front (cupool/__init__.py, between L8 and L9)"
    return f"L{LAYERS[unit]} {unit}"


def packages_of(sources: dict[str, str]) -> set[str]:
    """The modules that are packages (others sit inside them)."""
    return {name for name in sources if any(m.startswith(name + ".") for m in sources)}


def all_edges(sources: dict[str, str]) -> list[ImportEdge]:
    modules, packages = set(sources), packages_of(sources)
    return [edge for name, text in sources.items()
            for edge in imports_of(name, text, modules, packages)]


def unknown_units(sources: dict[str, str]) -> list[str]:
    return sorted({unit_of(name) for name in sources} - set(LAYERS) - {FRONT})


def upward_imports(edges: list[ImportEdge]) -> list[str]:
    """One line per import that runs up a floor (or that the front makes eagerly above
    :data:`FRONT_EAGER_MAX`), naming both modules and both floors."""
    problems = []
    for edge in edges:
        low, high = layer_of(edge.module), layer_of(edge.target)
        where = f"{edge.module} (line {edge.line})"
        if high > low:
            problems.append(f"{where}, on {layer_label(edge.module)}, imports {edge.target}, "
                            f"on {layer_label(edge.target)} above it")
        elif edge.module == FRONT and not edge.lazy and high > FRONT_EAGER_MAX:
            problems.append(f"{where}, the front, imports {edge.target}, on "
                            f"{layer_label(edge.target)}, at module level: above "
                            f"L{FRONT_EAGER_MAX} only inside a function")
    return problems


def unit_graph(edges: list[ImportEdge]) -> dict[str, dict[str, ImportEdge]]:
    """unit -> {imported unit -> one import making that edge (the first)}."""
    graph: dict[str, dict[str, ImportEdge]] = {}
    for edge in edges:
        source, target = unit_of(edge.module), unit_of(edge.target)
        if source != target:
            graph.setdefault(source, {}).setdefault(target, edge)
    return graph


def package_graph(edges: list[ImportEdge],
                  packages: set[str]) -> dict[str, dict[str, ImportEdge]]:
    """package -> {imported package -> one import making that edge}, at every depth: a
    module belongs to the package it sits in. Edges between a package and its own
    ancestors are left out (a package's ``__init__`` re-exports its subpackages, which
    use their parent's modules); the unit graph covers the top level."""
    def package_of(module: str) -> str:
        return module if module in packages else module.rpartition(".")[0]

    graph: dict[str, dict[str, ImportEdge]] = {}
    for edge in edges:
        source, target = package_of(edge.module), package_of(edge.target)
        if source == target or source.startswith(target + ".") \
                or target.startswith(source + "."):
            continue
        graph.setdefault(source, {}).setdefault(target, edge)
    return graph


def find_cycle(graph: dict[str, dict]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or ``None`` when it is acyclic."""
    state: dict[str, str] = {}  # "open" while on the path, "done" after
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def describe_cycle(cycle: list[str], graph: dict[str, dict[str, ImportEdge]]) -> str:
    steps = [f"{graph[a][b].module} imports {graph[a][b].target}"
             for a, b in itertools.pairwise(cycle)]
    return " -> ".join(cycle) + " (" + "; ".join(steps) + ")"


# -- the tests --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return package_sources()


@pytest.fixture(scope="module")
def edges(sources) -> list[ImportEdge]:
    return all_edges(sources)


def test_every_unit_has_a_floor(sources):
    assert unknown_units(sources) == [], "add these units of cupool to LAYERS"


def test_no_module_imports_from_a_floor_above_its_own(edges):
    assert len(edges) > 300  # the scan sees the package's imports at all
    assert upward_imports(edges) == []


def test_no_import_cycle_between_units(edges):
    graph = unit_graph(edges)
    assert "planning" in graph["allocator"]  # the graph holds the package's real edges
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {describe_cycle(cycle, graph)}"


def test_no_import_cycle_between_packages_at_any_depth(sources, edges):
    """Sibling packages deeper down (``planning.budget`` and ``planning.solvers``,
    ``app.selftest`` and ``app.stress``, ...) do not import each other in a circle."""
    graph = package_graph(edges, packages_of(sources))
    assert "cupool.app.stress" in graph["cupool.app.selftest"]  # the real edges are there
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {describe_cycle(cycle, graph)}"


def test_import_cupool_loads_nothing_above_planning_and_no_cupy():
    code = ("import sys, cupool; loaded = sorted(m for m in sys.modules if m == 'cupy' or "
            "m.split('.')[:2] in (['cupool', u] for u in ('allocator', 'swap', 'capture', "
            "'sharing', 'viz', 'program', 'app', 'cli'))); print(loaded)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_the_scan_reports_upward_imports_front_imports_and_cycles():
    """The checks can fail: fake modules with an upward import (lazy and relative), an
    import of the front from below, an eager front import of the allocator, and a cycle
    between two units of one floor."""
    fake = {
        "cupool": "def later():\n    from cupool import app\nfrom cupool.allocator import pool\n",
        "cupool.core": "", "cupool.core.units": "",
        "cupool.core.fake": "def f():\n    from ..app import replay\n",
        "cupool.io": "", "cupool.io.fake": "import cupool\n",
        "cupool.app": "", "cupool.app.replay": "", "cupool.allocator": "",
        "cupool.allocator.pool": "",
        "cupool.sim": "", "cupool.sim.a": "from cupool.kernels import b\n",
        "cupool.kernels": "", "cupool.kernels.b": "from cupool.sim import a\n",
        "cupool.app.x": "", "cupool.app.x.m": "from ..y import n\n",
        "cupool.app.y": "", "cupool.app.y.n": "from cupool.app.x.m import f\n",
    }
    edges = all_edges(fake)
    problems = upward_imports(edges)
    assert problems == [
        "cupool (line 3), the front, imports cupool.allocator.pool, on L5 allocator, at "
        "module level: above L4 only inside a function",
        "cupool.core.fake (line 2), on L0 core, imports cupool.app.replay, on L8 app above it",
        "cupool.io.fake (line 1), on L2 io, imports cupool, on the front "
        "(cupool/__init__.py, between L8 and L9) above it",
    ]
    graph = unit_graph(edges)
    assert describe_cycle(find_cycle(graph), graph) == (
        "kernels -> sim -> kernels (cupool.kernels.b imports cupool.sim.a; "
        "cupool.sim.a imports cupool.kernels.b)")
    packages = package_graph(edges, packages_of(fake))
    assert describe_cycle(find_cycle(packages), packages) == (
        "cupool.app.x -> cupool.app.y -> cupool.app.x (cupool.app.x.m imports cupool.app.y.n; "
        "cupool.app.y.n imports cupool.app.x.m)")
    assert unknown_units({"cupool.newthing.x": ""}) == ["newthing"]


# -- specific rules, beyond the floors ---------------------------------------------------
def test_the_allocator_reaches_only_core_io_devices_check_and_planning(edges):
    """The pool needs the vocabulary, the device, plan files, the validator and the
    solvers; not the simulator, the kernels, the baseline models or the bundled data."""
    allowed = {"allocator", "core", "errors", "progress", "devices", "io", "check",
               "planning"}
    wrong = [f"{e.module} imports {e.target}" for e in edges
             if unit_of(e.module) == "allocator" and unit_of(e.target) not in allowed]
    assert wrong == []


def test_app_replay_uses_the_engine_and_the_feedback(edges):
    targets = {e.target for e in edges if e.module == "cupool.app.replay"}
    assert "cupool.swap.engine" in targets
    assert "cupool.planning.budget.feedback" in targets
