"""The validators sit low: cupool/check imports only cupool.core, cupool.errors, the
standard library and NumPy, and the simulator reaches the validator without planning."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CUPOOL = Path(__file__).resolve().parents[2] / "cupool"


def _imported(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module


def test_check_imports_only_core_errors_stdlib_and_numpy():
    allowed = ("cupool.check", "cupool.core", "cupool.errors", "numpy")
    for path in sorted((CUPOOL / "check").glob("*.py")):
        for name in _imported(path):
            top = name.split(".")[0]
            assert (name == "__future__" or top in sys.stdlib_module_names
                    or any(name == a or name.startswith(a + ".") for a in allowed)), \
                f"{path.name} imports {name}"


def test_sim_does_not_import_planning():
    for path in sorted((CUPOOL / "sim").glob("*.py")):
        for name in _imported(path):
            assert not name.startswith("cupool.planning"), f"sim/{path.name} imports {name}"
