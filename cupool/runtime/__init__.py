"""The runtime: CuPy's allocator, served from plans.

- :class:`~cupool.runtime.pool.PlannedPool`: a ``cupy.cuda.MemoryPool`` that records
  iterations, plans them, and serves later ones from the plan (:mod:`.pool`);
- :func:`~cupool.runtime.managed.managed`: installs a pool as CuPy's allocator for a
  ``with`` block and restores the previous one (:mod:`.managed`);
- :mod:`.arena` (best fit with split/merge: the persistent and fallback regions),
  :mod:`.record` (recorded iterations → trace v1), :mod:`.stats` (the statistics' key
  grammar), :mod:`.errors`.

This package imports CuPy (the pool *is* a ``cupy.cuda.MemoryPool``); nothing else in
cupool imports it, and ``import cupool`` does not import this package until
``cupool.PlannedPool`` or ``cupool.managed`` is first used.
"""

from __future__ import annotations

from cupool.runtime.errors import (
    AllocationSizeError,
    CapacityError,
    IterationStateError,
    ManagedStateError,
    PoolError,
    PoolOutOfMemoryError,
)
from cupool.runtime.managed import managed
from cupool.runtime.pool import ALLOCATION_UNIT, MODES, PlannedPool

__all__ = ["ALLOCATION_UNIT", "MODES", "AllocationSizeError", "CapacityError",
           "IterationStateError", "ManagedStateError", "PlannedPool", "PoolError",
           "PoolOutOfMemoryError", "managed"]
