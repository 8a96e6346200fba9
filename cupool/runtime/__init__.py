"""The runtime: CuPy's allocator, served from plans.

- :class:`~cupool.runtime.pool.PlannedPool`: a ``cupy.cuda.MemoryPool`` that records
  iterations, plans them, and serves later ones from the plan (:mod:`.pool`);
- :func:`~cupool.runtime.context.managed`: installs a pool as CuPy's allocator for a
  ``with`` block and restores the previous one (:mod:`.context`);
- :mod:`.arena` (best fit with split/merge: the persistent and fallback regions),
  :mod:`.record` (recorded iterations → trace v1), :mod:`.stats` (the statistics' key
  grammar), :mod:`.errors` (the pool's errors).

The swap engine that serves swapping plans from a ``PlannedPool`` is :mod:`cupool.swap`;
the replay built on it is :mod:`cupool.app.replay`.

The pool imports CuPy (it *is* a ``cupy.cuda.MemoryPool``), on first use of
``cupool.PlannedPool``/``cupool.managed``.
"""

from __future__ import annotations

from importlib import import_module

_EXPORTS = {
    "AllocationSizeError": "cupool.runtime.errors", "CapacityError": "cupool.runtime.errors",
    "IterationStateError": "cupool.runtime.errors", "ManagedStateError": "cupool.runtime.errors",
    "PoolError": "cupool.runtime.errors", "PoolOutOfMemoryError": "cupool.runtime.errors",
    "managed": "cupool.runtime.context", "ALLOCATION_UNIT": "cupool.runtime.arena",
    "MODES": "cupool.runtime.pool", "PlannedPool": "cupool.runtime.pool",
}


def __getattr__(name):
    # Lazy, so that importing the package (and the arena, which the swap engine's layout
    # uses) needs no CuPy; the pool and its errors import it on first use.
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'cupool.runtime' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
