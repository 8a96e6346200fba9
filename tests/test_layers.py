"""The layers of the package: a module imports only from its own layer or the layers below.

Lowest first; every import of ``cupool.<package>`` is checked, lazy ones inside functions
too (a lazy import still depends on what it imports). ``cupool/__init__.py``, the public
face, is exempt: it re-exports names lazily from wherever they live.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cupool"

LAYERS = (
    ("errors", "core", "progress", "data"),
    ("check",),
    ("io", "devices"),
    ("sim", "kernels", "baselines"),
    ("planning",),
    ("allocator",),
    ("swap",),
    ("capture", "sharing", "viz"),
    ("app",),
    ("cli", "__main__"),
)
"""Top-level modules and packages of ``cupool``, lowest layer first."""

LEVEL = {name: level for level, names in enumerate(LAYERS) for name in names}


def _unit(path: Path) -> str:
    """The top-level module or package of ``cupool`` that ``path`` belongs to."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, top-level unit)`` of every ``cupool.*`` import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "cupool" else [
                f"cupool.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "cupool" and len(parts) > 1:
                found.append((node.lineno, parts[1]))
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py")


def test_every_unit_has_a_layer():
    units = {_unit(path) for path in MODULES}
    assert units <= set(LEVEL), f"give these a layer: {sorted(units - set(LEVEL))}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_runs_up_a_layer(path):
    mine = LEVEL[_unit(path)]
    upward = [f"line {line}: cupool.{unit} (layer {LEVEL.get(unit)})"
              for line, unit in _imports(path) if LEVEL.get(unit, -1) > mine]
    assert not upward, (f"{path.relative_to(PACKAGE)} (layer {mine}: {_unit(path)}) imports "
                        f"from above: {'; '.join(upward)}")
