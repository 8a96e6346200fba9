"""The checkout's example programs (``examples/``), loaded as modules by the commands that
run them (``cupool demo``, the self-test's ``programs`` step).

They are files of the repository, not of the installed package: :func:`load_example`
looks in the ``examples/`` beside ``cupool/`` (a checkout, or an editable install), then in
the ``examples/`` of the working directory (a checkout installed with ``pip install .`` and
run from its root, as the README does), and raises :class:`ExampleMissingError` naming both
where neither holds the example; the commands then say they skipped it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from cupool.errors import CupoolError

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


def example_dirs() -> tuple[Path, ...]:
    """Where examples are looked for, in order: beside the package, then the working
    directory's ``examples/``."""
    here = Path.cwd() / "examples"
    return (EXAMPLES_DIR,) if here.resolve() == EXAMPLES_DIR else (EXAMPLES_DIR, here)


def find_example(name: str) -> Path | None:
    """The file of example ``name``, or ``None`` where no :func:`example_dirs` holds it."""
    for directory in example_dirs():
        if (directory / f"{name}.py").is_file():
            return directory / f"{name}.py"
    return None


class ExampleMissingError(CupoolError):
    """Example ``name`` is not in ``directory`` (not a checkout)."""

    def __init__(self, name: str, directory: str) -> None:
        self.name, self.directory = name, directory
        super().__init__(f"example {name!r} is not in {directory} (run from a checkout of "
                         f"cupool to use the example programs)")


def load_example(name: str, directory: Path | None = None):
    """The module ``<directory>/<name>.py`` (default: the first of :func:`example_dirs`
    that holds it), loaded (not run as a script)."""
    if directory is None:
        path = find_example(name)
        if path is None:
            raise ExampleMissingError(name, " or ".join(str(d) for d in example_dirs()))
    else:
        path = directory / f"{name}.py"
        if not path.is_file():
            raise ExampleMissingError(name, str(directory))
    spec = importlib.util.spec_from_file_location(f"cupool_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


__all__ = ["EXAMPLES_DIR", "ExampleMissingError", "example_dirs", "find_example", "load_example"]
