"""A model of CuPy's default memory pool (``cupy.cuda.MemoryPool``), in pure Python.

The rules, each from ``cupy/cuda/memory.pyx`` (CuPy v13, ``SingleDeviceMemoryPool``):

- **Rounding** (``_round_size``): every request is rounded up to a multiple of
  ``ALLOCATION_UNIT_SIZE`` = 512 B ("cudaMalloc() is aligned to at least 512 bytes").
  ``malloc(1)`` hands out, and counts, 512 B.
- **One arena per stream** (``_arena``): free chunks sit in bins, one bin per rounded
  size (``_bin_index_from_size(size) = (size - 1) // 512``). The traces have one compute
  stream, so the model has one arena.
- **Best fit** (``_get_chunk``): the first non-empty bin at or above the request's bin,
  i.e. the smallest free chunk that fits. CuPy pops an arbitrary chunk of that bin (a
  Python ``set``); the model takes the **lowest address**, so every run is deterministic.
- **Split** (``_Chunk.split``): the chunk keeps its first ``size`` bytes and the tail,
  however small (512 B is enough), goes back to the bins.
- **cudaMalloc when nothing fits** (``_malloc`` → ``_try_malloc``): a new memory block of
  exactly the rounded size, so nothing is split off it.
- **Merge on free** (``free``): the chunk merges with its free ``next`` chunk, then with
  its free ``prev`` chunk. Chunks only link to chunks of the same cudaMalloc'd block, so
  merging never crosses blocks.
- **Nothing is released**: ``free_all_blocks`` is not called during the iteration, so
  reserved bytes (CuPy's ``total_bytes()``) only grow.

Statistics mean what CuPy's do: ``allocated_bytes`` is ``used_bytes()`` (rounded chunk
sizes in use), ``reserved_bytes`` is ``total_bytes()`` (sum of cudaMalloc'd blocks).
"""

from __future__ import annotations

from cupool.baselines._segments import SegmentAllocator
from cupool.core.free_ranges import FreeRanges

#: ``ALLOCATION_UNIT_SIZE`` of memory.pyx.
ALLOCATION_UNIT_SIZE = 512


def round_size(size: int) -> int:
    """``_round_size``: ``size`` rounded up to a multiple of 512 B."""
    return -(-size // ALLOCATION_UNIT_SIZE) * ALLOCATION_UNIT_SIZE


class CupyMemoryPool(SegmentAllocator):
    """CuPy's ``SingleDeviceMemoryPool`` on one stream: ``malloc(size) -> address``, ``free``.

    >>> pool = CupyMemoryPool()
    >>> address = pool.malloc(1)
    >>> pool.reserved_bytes, pool.allocated_bytes
    (512, 512)
    """

    name = "cupy"

    def __init__(self) -> None:
        super().__init__()
        self._arena = FreeRanges()  # best fit, split anything (min_split 1)

    def _take(self, size: int) -> int:
        size = round_size(size)
        return self._take_from(self._arena, size, size)
