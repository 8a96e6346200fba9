"""The allocator: :class:`PlannedPool`, CuPy's memory pool served from plans, and its parts.

- :class:`~cupool.allocator.pool.PlannedPool`: a ``cupy.cuda.MemoryPool`` that records
  iterations, plans them, and serves later ones from the plan (:mod:`.pool`);
- :func:`~cupool.allocator.context.managed`: installs a pool as CuPy's allocator for a
  ``with`` block and restores the previous one (:mod:`.context`);
- :mod:`.errors`: the pool's typed, picklable errors.

The pool imports CuPy (it *is* a ``cupy.cuda.MemoryPool``); this package imports it on
first use of one of the names above, so that ``import cupool.allocator`` and the parts that
do not need CuPy (:data:`ALLOCATION_UNIT` and the arenas) work without it.
"""

from __future__ import annotations

from importlib import import_module

_EXPORTS = {
    "AllocationSizeError": "cupool.allocator.errors",
    "CapacityError": "cupool.allocator.errors",
    "IterationStateError": "cupool.allocator.errors",
    "ManagedStateError": "cupool.allocator.errors",
    "PoolError": "cupool.allocator.errors",
    "PoolOutOfMemoryError": "cupool.allocator.errors",
    "managed": "cupool.allocator.context",
    "ALLOCATION_UNIT": "cupool.allocator.arena",
    "MODES": "cupool.allocator.modes",
    "PlannedPool": "cupool.allocator.pool",
    "PoolOptions": "cupool.allocator.options",
}


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'cupool.allocator' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
