"""Builds cupool's optional C accelerators (one per ``cupool/planning/solvers/_*.c``).

Each extension is ``optional``: when no C compiler is present the install still
succeeds and the solvers use their pure-Python paths, which give identical results.
"""

from glob import glob
from pathlib import Path

from setuptools import Extension, setup

extensions = [
    Extension(
        "cupool.planning.solvers." + Path(source).stem,
        [source],
        extra_compile_args=["-O3"],
        optional=True,
    )
    for source in sorted(glob("cupool/planning/solvers/_*.c"))
]

setup(ext_modules=extensions)
