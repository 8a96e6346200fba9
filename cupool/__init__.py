"""cupool: planned GPU memory for repeating CuPy workloads.

``import cupool`` stays free of CuPy: the pool (which subclasses ``cupy.cuda.MemoryPool``)
is imported on first use of ``cupool.PlannedPool`` or ``cupool.managed``; the program
session (``cupool.Session``, ``cupool.array_module``: :mod:`cupool.program`) on first use
of its names.
"""

from cupool.check import validate_plan
from cupool.core.version import __version__ as __version__
from cupool.io import load_plan, load_trace, save_plan, save_trace
from cupool.planning import SolverParams, plan

_ALLOCATOR = ("PlannedPool", "managed")
_PROGRAM = ("EagerSession", "Session", "Spec", "Tensor", "array_module", "spec")


def __getattr__(name):
    if name in _ALLOCATOR:
        from cupool import allocator as home
    elif name in _PROGRAM:
        from cupool import program as home
    else:
        raise AttributeError(f"module 'cupool' has no attribute {name!r}")
    value = globals()[name] = getattr(home, name)  # found once: later reads are plain
    return value


__all__ = ["EagerSession", "PlannedPool", "Session", "SolverParams", "Spec", "Tensor",
           "array_module", "load_plan", "load_trace", "managed", "plan", "save_plan",
           "save_trace", "spec", "validate_plan"]
