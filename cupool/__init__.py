"""cupool: planned GPU memory for repeating CuPy workloads.

``import cupool`` stays free of CuPy: the pool (which subclasses ``cupy.cuda.MemoryPool``)
is imported on first use of ``cupool.PlannedPool`` or ``cupool.managed``.
"""

from cupool.check import validate_plan
from cupool.core.version import __version__ as __version__
from cupool.io import load_plan, load_trace, save_plan, save_trace
from cupool.planning import SolverParams, plan

_ALLOCATOR = ("PlannedPool", "managed")


def __getattr__(name):
    if name in _ALLOCATOR:
        from cupool import allocator

        return getattr(allocator, name)
    raise AttributeError(f"module 'cupool' has no attribute {name!r}")


__all__ = ["PlannedPool", "SolverParams", "load_plan", "load_trace", "managed", "plan",
           "save_plan", "save_trace", "validate_plan"]
