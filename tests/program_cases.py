"""Programs the program-session tests run: the examples' models, loaded from examples/."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@cache
def example(name: str):
    """The module ``examples/<name>.py`` (loaded once, not run as a script)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
