"""cupool/program sits beside capture, sharing and viz (floor 7): it imports the swap engine
and everything below it, never the applications (cupool.app, the CLI, stress) nor the other
packages of its own floor."""

from __future__ import annotations

import ast
from pathlib import Path

CUPOOL = Path(__file__).resolve().parents[2] / "cupool"
NOT_BELOW = ("cupool.app", "cupool.cli", "cupool.stress", "cupool.capture", "cupool.sharing",
             "cupool.viz")


def _imported(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module


def test_program_imports_only_the_floors_below_it():
    modules = sorted((CUPOOL / "program").glob("*.py"))
    assert len(modules) >= 8
    for path in modules:
        for name in _imported(path):
            assert name != "cupool", f"program/{path.name} imports the package root"
            assert not any(name == p or name.startswith(p + ".") for p in NOT_BELOW), \
                f"program/{path.name} imports {name}"


def test_nothing_below_program_imports_it():
    for path in sorted(CUPOOL.rglob("*.py")):
        relative = path.relative_to(CUPOOL).parts
        if relative[0] in ("program", "app", "cli.py", "__init__.py"):
            continue
        for name in _imported(path):
            assert not (name or "").startswith("cupool.program"), f"{path} imports {name}"
