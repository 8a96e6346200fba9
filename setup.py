"""Builds cupool's optional C accelerators: one per ``cupool/allocator/_*.c``,
``cupool/program/_*.c``, ``cupool/planning/solvers/_*.c``,
``cupool/planning/budget/engine/_*.c`` and ``cupool/sim/_*.c``, named after its path (the
``_*.h`` headers next to a source, or in a folder above it inside ``cupool/``, are its
dependencies: a change rebuilds it, and an sdist carries them).

Each extension is ``optional``: when no C compiler is present the install still
succeeds and the pool, the iterations, the solvers, the budget planner and the simulator
use their pure-Python paths, which give identical results. No fused multiply-add
(``-ffp-contract=off``): a compiled path rounds every operation as Python does.
"""

from glob import glob
from pathlib import Path

from setuptools import Extension, setup

SOURCES = ("cupool/allocator/_*.c", "cupool/program/_*.c", "cupool/planning/solvers/_*.c",
           "cupool/planning/budget/engine/_*.c", "cupool/sim/_*.c")

def headers(source: str) -> list[str]:
    """The ``_*.h`` headers in the source's folder and in every folder above it inside
    ``cupool/`` (shared by the extensions below them)."""
    found = []
    folder = Path(source).parent
    while folder.parts and folder.parts[0] == "cupool":
        found += sorted(glob(str(folder / "_*.h")))
        folder = folder.parent
    return found


extensions = [
    Extension(
        ".".join(Path(source).with_suffix("").parts),
        [source],
        depends=headers(source),
        extra_compile_args=["-O3", "-ffp-contract=off"],
        optional=True,
    )
    for pattern in SOURCES
    for source in sorted(glob(pattern))
]

setup(ext_modules=extensions)
