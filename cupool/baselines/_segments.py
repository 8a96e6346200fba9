"""What CuPy's pool and PyTorch's caching allocator share: segments cut into blocks.

Both frameworks cudaMalloc *segments* (CuPy: "memory blocks"), cut them into *blocks*
(CuPy: "chunks") kept in a doubly linked list per segment, hand out the smallest free
block that fits, split it (head handed out, tail back to the free set), and on free
merge a block with its free neighbours in the same segment. They differ in rounding,
in which free set a request searches, in segment sizes and in when to split; those
live in the two policy modules, which override one hook, :meth:`SegmentAllocator._take`.

::

    segment at 0x10000000000, 2 MiB          (torch small pool after malloc(1), malloc(600))
    [ 512 used | 1024 used | 2096640 free ]
      head       split        tail back in the free set

Addresses are model addresses: the fake cudaMalloc hands out ``DEVICE_ALIGNMENT``-aligned
addresses from ``DEVICE_BASE_ADDRESS`` upwards and never reuses them (nothing is ever
cudaFree'd: neither ``free_all_blocks`` nor ``empty_cache`` is modelled). A handle is the
block's address. Sizes are bytes; ``allocated_bytes`` counts rounded block sizes, as both
frameworks' own statistics do.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from cupool.errors import InputError

#: First model device address (so that 0 is never a valid handle).
DEVICE_BASE_ADDRESS = 1 << 40
#: Alignment of model cudaMalloc results (drivers align large allocations to 2 MiB).
DEVICE_ALIGNMENT = 2 << 20


@dataclass(slots=True, eq=False)
class Block:
    """``size`` bytes at ``address``; ``prev``/``next`` are the neighbours in its segment
    (``None`` at the segment's ends); ``pool`` is the free set it returns to."""

    address: int
    size: int
    pool: FreeBlocks
    prev: Block | None = None
    next: Block | None = None
    is_free: bool = False


class FreeBlocks:
    """Free blocks ordered by ``(size, address)``, like PyTorch's ``BlockComparatorSize``.

    :meth:`pop_best_fit` returns the smallest block of at least ``size`` bytes, the lowest
    address among equal sizes.
    """

    def __init__(self) -> None:
        self._keys: list[tuple[int, int]] = []
        self._blocks: dict[int, Block] = {}

    def push(self, block: Block) -> None:
        block.is_free = True
        self._blocks[block.address] = block
        bisect.insort(self._keys, (block.size, block.address))

    def remove(self, block: Block) -> None:
        block.is_free = False
        del self._blocks[block.address]
        del self._keys[bisect.bisect_left(self._keys, (block.size, block.address))]

    def pop_best_fit(self, size: int) -> Block | None:
        index = bisect.bisect_left(self._keys, (size, 0))
        if index == len(self._keys):
            return None
        block = self._blocks.pop(self._keys.pop(index)[1])
        block.is_free = False
        return block


def split(block: Block, size: int) -> Block:
    """Keep the first ``size`` bytes in ``block``; return the rest as a new (unlisted) block."""
    tail = Block(block.address + size, block.size - size, block.pool, prev=block, next=block.next)
    if block.next is not None:
        block.next.prev = tail
    block.next = tail
    block.size = size
    return tail


def _show(address) -> str:
    return f"0x{address:x}" if isinstance(address, int) else repr(address)


def _merge(head: Block, tail: Block) -> None:
    head.size += tail.size
    head.next = tail.next
    if tail.next is not None:
        tail.next.prev = head


class SegmentAllocator:
    """Bookkeeping shared by both policies: validation, handles, merge on free, statistics.

    Subclasses implement ``_take(size) -> Block``: round ``size``, find or cudaMalloc a
    block (:meth:`_device_malloc`), split it as their rules say, and return the block to
    hand out (not in any free set). Statistics (plain attributes, also :meth:`stats`):
    ``reserved_bytes`` (sum of segment sizes), ``allocated_bytes`` (sum of handed-out block
    sizes), their ``peak_*`` and ``num_device_mallocs``; ``reserved >= allocated`` always.
    """

    name = "segments"

    def __init__(self) -> None:
        self._in_use: dict[int, Block] = {}
        self._freed: set[int] = set()  # addresses whose last event was a free (double-free check)
        self._segments: list[tuple[int, Block]] = []  # (size, head block) per cudaMalloc
        self._next_device_address = DEVICE_BASE_ADDRESS
        self.reserved_bytes = 0
        self.peak_reserved_bytes = 0
        self.allocated_bytes = 0
        self.peak_allocated_bytes = 0
        self.num_device_mallocs = 0

    def malloc(self, size: int) -> int:
        """Allocate at least ``size`` bytes (``size > 0``); return the block's address."""
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise InputError(f"size (={size!r}) must be an integer > 0",
                             where=f"{self.name} malloc")
        block = self._take(size)
        self._in_use[block.address] = block
        self._freed.discard(block.address)
        self.allocated_bytes += block.size
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        return block.address

    def free(self, address: int) -> None:
        """Give back the block at ``address``; it merges with free neighbours in its segment."""
        block = self._in_use.pop(address, None)
        if block is None:
            where = f"{self.name} free({_show(address)})"
            if address in self._freed:
                raise InputError("double free: the block there was already freed", where=where)
            raise InputError(f"unknown handle: none of the {len(self._in_use)} live blocks "
                             "starts there", where=where)
        self._freed.add(address)
        self.allocated_bytes -= block.size
        following, previous = block.next, block.prev
        if following is not None and following.is_free:
            block.pool.remove(following)
            _merge(block, following)
        if previous is not None and previous.is_free:
            block.pool.remove(previous)
            _merge(previous, block)
            block = previous
        block.pool.push(block)

    def block_size(self, address: int) -> int:
        """Bytes of the live block at ``address`` (the rounded size it was given)."""
        return self._in_use[address].size

    def stats(self) -> dict:
        """The statistics as one flat dict, keyed by the attribute names."""
        return {"reserved_bytes": self.reserved_bytes,
                "peak_reserved_bytes": self.peak_reserved_bytes,
                "allocated_bytes": self.allocated_bytes,
                "peak_allocated_bytes": self.peak_allocated_bytes,
                "num_device_mallocs": self.num_device_mallocs}

    def snapshot(self) -> list[dict]:
        """Every segment in cudaMalloc order: ``{"address", "size", "blocks"}``, ``blocks``
        being ``(address, size, allocated)`` in address order (plain data, for tests/plots)."""
        segments = []
        for size, head in self._segments:
            blocks, block = [], head
            while block is not None:
                blocks.append((block.address, block.size, not block.is_free))
                block = block.next
            segments.append({"address": head.address, "size": size, "blocks": blocks})
        return segments

    def _device_malloc(self, size: int, pool: FreeBlocks) -> Block:
        """The model's cudaMalloc: a new segment of ``size`` bytes whose blocks return to
        ``pool``."""
        address = self._next_device_address
        self._next_device_address += -(-size // DEVICE_ALIGNMENT) * DEVICE_ALIGNMENT
        head = Block(address, size, pool)
        self._segments.append((size, head))
        self.num_device_mallocs += 1
        self.reserved_bytes += size
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        return head

    def _take(self, size: int) -> Block:
        raise NotImplementedError
