"""The allocator sits above planning and below the swap runtime: its modules import only
from its own package and the layers under it (every import, lazy ones included)."""

from __future__ import annotations

import ast
from pathlib import Path

import cupool.allocator

ALLOWED = ("cupool.allocator", "cupool.core", "cupool.errors", "cupool.progress",
           "cupool.devices", "cupool.io", "cupool.check", "cupool.planning")


def imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_the_allocator_imports_only_from_layers_below():
    package = Path(cupool.allocator.__file__).parent
    wrong = [f"{path.name}: {name}" for path in sorted(package.glob("*.py"))
             for name in imported_modules(path)
             if (name == "cupool" or name.startswith("cupool."))
             and not name.startswith(tuple(f"{allowed}." for allowed in ALLOWED))
             and name not in ALLOWED]
    assert wrong == []
