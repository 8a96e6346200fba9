"""What CuPy's pool and PyTorch's caching allocator share: segments cut into blocks.

Both frameworks cudaMalloc *segments* (CuPy: "memory blocks"), cut them into *blocks*
(CuPy: "chunks"), hand out the smallest free block that fits (the lowest address among
equal sizes), split it (head handed out, tail back to the free set), and on free merge a
block with its free neighbours in the same segment. That is exactly the policy of
:class:`~cupool.core.free_ranges.FreeRanges` (best fit, one region per segment, never
merged across segments), so each free set here is one. The frameworks differ in rounding,
in which free set a request searches, in segment sizes and in when to split (a free set's
``min_split``); those live in the two policy modules, which override one hook,
:meth:`SegmentAllocator._take`, built on :meth:`SegmentAllocator._take_from`.

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

from cupool.core.free_ranges import FreeRanges
from cupool.errors import InputError

#: First model device address (so that 0 is never a valid handle).
DEVICE_BASE_ADDRESS = 1 << 40
#: Alignment of model cudaMalloc results (drivers align large allocations to 2 MiB).
DEVICE_ALIGNMENT = 2 << 20


def _show(address) -> str:
    return f"0x{address:x}" if isinstance(address, int) else repr(address)


class SegmentAllocator:
    """Bookkeeping shared by both policies: validation, handles, statistics; the blocks of
    each free set are a :class:`~cupool.core.free_ranges.FreeRanges`.

    Subclasses implement ``_take(size) -> address``: round ``size``, pick the free set the
    request searches and the segment size nothing cached fits, and call
    :meth:`_take_from`. Statistics (plain attributes, also :meth:`stats`):
    ``reserved_bytes`` (sum of segment sizes), ``allocated_bytes`` (sum of handed-out block
    sizes), their ``peak_*`` and ``num_device_mallocs``; ``reserved >= allocated`` always.
    """

    name = "segments"

    def __init__(self) -> None:
        self._in_use: dict[int, FreeRanges] = {}  # live block address -> its free set
        self._freed: set[int] = set()  # addresses whose last event was a free (double-free check)
        self._segments: list[tuple[int, int, FreeRanges]] = []  # (address, size, free set)
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
        address = self._take(size)
        self._freed.discard(address)
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        return address

    def free(self, address: int) -> None:
        """Give back the block at ``address``; it merges with free neighbours in its segment."""
        free_set = self._in_use.pop(address, None)
        if free_set is None:
            where = f"{self.name} free({_show(address)})"
            if address in self._freed:
                raise InputError("double free: the block there was already freed", where=where)
            raise InputError(f"unknown handle: none of the {len(self._in_use)} live blocks "
                             "starts there", where=where)
        self._freed.add(address)
        self.allocated_bytes -= free_set.free(address)

    def block_size(self, address: int) -> int:
        """Bytes of the live block at ``address`` (the rounded size it was given)."""
        return self._in_use[address].block_size(address)

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
        for address, size, free_set in self._segments:
            segments.append({"address": address, "size": size,
                             "blocks": [(piece.start, piece.size, piece.live)
                                        for piece in free_set.region_layout(address)]})
        return segments

    def _take_from(self, free_set: FreeRanges, size: int, segment_bytes: int) -> int:
        """The address of a block for ``size`` (rounded) bytes from ``free_set``: its best
        fit, split by its ``min_split``; when nothing fits, the model's cudaMalloc first
        adds a segment of ``segment_bytes`` to it (then the only free block that fits).
        The block is booked (handle and ``allocated_bytes``)."""
        address = free_set.allocate(size)
        if address is None:
            self._device_malloc(segment_bytes, free_set)
            address = free_set.allocate(size)
        self._in_use[address] = free_set
        self.allocated_bytes += free_set.block_size(address)
        return address

    def _device_malloc(self, size: int, free_set: FreeRanges) -> None:
        """The model's cudaMalloc: a new segment of ``size`` bytes, a region of ``free_set``."""
        address = self._next_device_address
        self._next_device_address += -(-size // DEVICE_ALIGNMENT) * DEVICE_ALIGNMENT
        free_set.add_region(address, size)
        self._segments.append((address, size, free_set))
        self.num_device_mallocs += 1
        self.reserved_bytes += size
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)

    def _take(self, size: int) -> int:
        raise NotImplementedError
