"""A model of PyTorch's CUDA caching allocator, in pure Python, with its default settings.

The rules, each from ``c10/cuda/CUDACachingAllocator.cpp`` (``DeviceCachingAllocator``)
and the defaults of ``c10/cuda/CUDAAllocatorConfig.cpp`` (``max_split_size`` unlimited,
``roundup_power2_divisions`` off, ``expandable_segments`` off):

- **Rounding** (``round_size``): up to a multiple of ``kMinBlockSize`` = 512 B, at least 512.
- **Two pools** (``get_pool``): requests of at most ``kSmallSize`` = 1 MiB (after rounding)
  use the small pool, larger ones the large pool. A pool only reuses its own segments.
- **Segment sizes** (``get_allocation_size``): small requests get a ``kSmallBuffer`` = 2 MiB
  segment; large requests under ``kMinLargeAlloc`` = 10 MiB get a ``kLargeBuffer`` = 20 MiB
  segment; larger ones get their size rounded up to ``kRoundLarge`` = 2 MiB.
- **Best fit** (``get_free_block``): ``lower_bound`` in the pool's free set ordered by
  (stream, size, address) (``BlockComparatorSize``): the smallest block that fits, lowest
  address among equals. With ``max_split_size`` unlimited the oversize checks never fire.
- **cudaMalloc when nothing fits** (``alloc_block``): a new segment of the allocation size.
- **Split** (``should_split``, ``alloc_found_block``): the found or new block is split, the
  request taking its head, when the remainder is ``>= kMinBlockSize`` (small pool) or
  ``> kSmallSize`` (large pool); otherwise the whole block is handed out and counted as
  allocated (an 11 MiB request takes a whole 12 MiB segment).
- **Merge on free** (``free_block`` → ``try_merge_blocks``): with the free ``prev`` and
  ``next`` blocks of the same segment.
- **Nothing is released**: no ``empty_cache`` and no OOM retries during the iteration,
  so reserved bytes only grow.

Statistics mean what ``torch.cuda.memory_stats()`` reports: ``allocated_bytes.all`` counts
block sizes (rounded, including unsplit remainders), ``reserved_bytes.all`` segment sizes,
``num_device_alloc`` the cudaMallocs. One stream is modelled (the traces have one).
"""

from __future__ import annotations

from cupool.baselines._segments import SegmentAllocator
from cupool.core.free_ranges import FreeRanges

MIB = 1 << 20
#: all sizes are rounded to at least 512 bytes
K_MIN_BLOCK_SIZE = 512
#: largest "small" allocation is 1 MiB
K_SMALL_SIZE = MIB
#: "small" allocations are packed in 2 MiB blocks
K_SMALL_BUFFER = 2 * MIB
#: "large" allocations may be packed in 20 MiB blocks
K_LARGE_BUFFER = 20 * MIB
#: allocations between 1 and 10 MiB may use kLargeBuffer
K_MIN_LARGE_ALLOC = 10 * MIB
#: round up large allocations to 2 MiB
K_ROUND_LARGE = 2 * MIB


def round_size(size: int) -> int:
    """``round_size`` with ``roundup_power2_divisions`` off: a multiple of 512, at least 512."""
    return -(-size // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE


def allocation_size(size: int) -> int:
    """``get_allocation_size``: bytes to cudaMalloc for a rounded request nothing cached fits."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


def should_split(remaining: int, is_small: bool) -> bool:
    """``should_split`` (``max_split_size`` unlimited): split off ``remaining`` bytes?
    (The pools' free sets apply it as their ``min_split``: :data:`SMALL_MIN_SPLIT`,
    :data:`LARGE_MIN_SPLIT`.)"""
    return remaining >= K_MIN_BLOCK_SIZE if is_small else remaining > K_SMALL_SIZE


#: ``should_split(remaining, is_small=True)`` is ``remaining >= SMALL_MIN_SPLIT``.
SMALL_MIN_SPLIT = K_MIN_BLOCK_SIZE
#: ``should_split(remaining, is_small=False)`` is ``remaining >= LARGE_MIN_SPLIT``.
LARGE_MIN_SPLIT = K_SMALL_SIZE + 1


class TorchCachingAllocator(SegmentAllocator):
    """PyTorch's ``DeviceCachingAllocator`` on one stream: ``malloc(size) -> address``, ``free``.

    >>> allocator = TorchCachingAllocator()
    >>> address = allocator.malloc(1)
    >>> allocator.reserved_bytes, allocator.allocated_bytes
    (2097152, 512)
    """

    name = "torch"

    def __init__(self) -> None:
        super().__init__()
        self._small_blocks = FreeRanges(min_split=SMALL_MIN_SPLIT)
        self._large_blocks = FreeRanges(min_split=LARGE_MIN_SPLIT)

    def _take(self, size: int) -> int:
        size = round_size(size)
        pool = self._small_blocks if size <= K_SMALL_SIZE else self._large_blocks
        return self._take_from(pool, size, allocation_size(size))
