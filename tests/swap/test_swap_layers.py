"""The swap engine sits between the allocator and the applications: cupool/swap imports no
application (cupool.app, the CLI, stress, selftest) and nothing above it (capture, sharing,
viz); planning, below it, imports neither the engine nor the applications."""

from __future__ import annotations

import ast
from pathlib import Path

CUPOOL = Path(__file__).resolve().parents[2] / "cupool"
ABOVE_SWAP = ("cupool.app", "cupool.cli", "cupool.stress", "cupool.app.selftest",
              "cupool.capture", "cupool.sharing", "cupool.viz")


def _imported(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module


def _is_under(name: str, packages) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_swap_imports_nothing_above_it():
    for path in sorted((CUPOOL / "swap").glob("*.py")):
        for name in _imported(path):
            assert name != "cupool", f"swap/{path.name} imports the package root"
            assert not _is_under(name, ABOVE_SWAP), f"swap/{path.name} imports {name}"


def test_planning_imports_neither_the_engine_nor_the_applications():
    for path in sorted((CUPOOL / "planning").rglob("*.py")):
        for name in _imported(path):
            assert not _is_under(name, ("cupool.swap", *ABOVE_SWAP)), \
                f"{path.relative_to(CUPOOL)} imports {name}"


def test_app_replay_uses_the_engine_and_the_feedback():
    names = set(_imported(CUPOOL / "app" / "replay.py"))
    assert "cupool.swap.engine" in names
    assert "cupool.planning.budget.feedback" in names
