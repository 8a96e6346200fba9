"""The checkout's example programs (``examples/``), loaded as modules by the commands that
run them (``cupool demo``, the self-test's ``programs`` step).

They are files of the repository, not of the installed package: :func:`load_example`
raises :class:`ExampleMissingError` where there is no ``examples/`` beside ``cupool/`` (an
installed wheel), and the commands then say they skipped them.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from cupool.errors import CupoolError

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


class ExampleMissingError(CupoolError):
    """Example ``name`` is not in ``directory`` (not a checkout)."""

    def __init__(self, name: str, directory: str) -> None:
        self.name, self.directory = name, directory
        super().__init__(f"example {name!r} is not in {directory} (run from a checkout of "
                         f"cupool to use the example programs)")

    def __reduce__(self):
        return (self.__class__, (self.name, self.directory))


def load_example(name: str, directory: Path = EXAMPLES_DIR):
    """The module ``<directory>/<name>.py``, loaded (not run as a script)."""
    path = directory / f"{name}.py"
    if not path.is_file():
        raise ExampleMissingError(name, str(directory))
    spec = importlib.util.spec_from_file_location(f"cupool_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


__all__ = ["EXAMPLES_DIR", "ExampleMissingError", "load_example"]
