"""A best-fit allocator with split and merge over device segments (CuPy's policy, in Python).

The pool uses one of these for its **persistent region** (allocations outside any
iteration) and one for its **fallback region** (allocations while recording, and
allocations a plan cannot serve). It never talks to the device itself: the pool
reserves a segment and hands it over with :meth:`BestFitArena.add_segment`, and takes
fully free segments back with :meth:`BestFitArena.take_empty_segments`. So the
bookkeeping is tested with exact pointer arithmetic and no device.

Words:

- a **segment** is one device reservation ``[base, base + size)``; blocks never span
  two segments, even when two segments happen to be adjacent in address;
- a **free range** is a maximal run of free bytes inside one segment;
- :meth:`~BestFitArena.alloc` takes the *smallest* free range that fits (ties: lowest
  address) and splits off the rest; :meth:`~BestFitArena.free` merges the block with
  its free neighbours in the same segment::

      segment  [..A..][....free: 8....][..B..][free: 5]
      alloc(4) [..A..][....free: 8....][..B..][.C.][1]   5 is the smallest range >= 4
      free(A)  [free ][....free: 8....]...               merged: one 13-byte range
      free(C)  ...[..B..][free: 5]                       merged back with the 1-byte tail

Sizes are whatever the caller passes (the pool passes multiples of 512); the arena
adds no rounding. Not thread-safe: the pool's lock guards every call.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

ALLOCATION_UNIT = 512
"""Every pool request is rounded up to a multiple of this many bytes (as CuPy's pool does)."""


@dataclass(frozen=True)
class ArenaStats:
    """Plain numbers about one arena: bytes in segments, bytes handed out, free bytes,
    and counts of segments, live blocks and free ranges."""

    segment_bytes: int
    allocated_bytes: int
    free_bytes: int
    segments: int
    live_blocks: int
    free_ranges: int
    largest_free_range: int


class BestFitArena:
    """Best-fit over any number of segments (see the module docstring).

    ``segment`` objects are opaque to the arena except for ``ptr`` and ``size``
    (the pool passes :class:`~cupool.devices.protocol.Memory`).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._segments: dict[int, object] = {}  # base ptr -> segment
        self._by_size: list[tuple[int, int]] = []  # sorted (size, start) of free ranges
        self._free_start: dict[int, tuple[int, int]] = {}  # start -> (end, segment base)
        self._free_end: dict[int, int] = {}  # end -> start
        self._live: dict[int, tuple[int, int]] = {}  # ptr -> (size, segment base)
        self._allocated = 0

    # -- segments -------------------------------------------------------------------
    def add_segment(self, segment) -> None:
        """Make ``[segment.ptr, segment.ptr + segment.size)`` available, as one free range."""
        base, size = segment.ptr, segment.size
        if base in self._segments:
            raise ValueError(f"arena {self.name!r}: segment at {base:#x} added twice")
        self._segments[base] = segment
        self._insert_free(base, base + size, base)

    def take_empty_segments(self) -> list:
        """Remove and return every segment with no live block (for the pool to release)."""
        taken = []
        for base, segment in list(self._segments.items()):
            entry = self._free_start.get(base)
            if entry is not None and entry[0] == base + segment.size:
                self._remove_free(base)
                del self._segments[base]
                taken.append(segment)
        return taken

    # -- blocks ---------------------------------------------------------------------
    def alloc(self, size: int) -> int | None:
        """The address of a new block of ``size`` bytes (``> 0``), or ``None`` when no
        free range fits (the caller then adds a segment and retries)."""
        i = bisect.bisect_left(self._by_size, (size, -1))
        if i == len(self._by_size):
            return None
        free_size, start = self._by_size.pop(i)
        end, base = self._free_start.pop(start)
        del self._free_end[end]
        if free_size > size:
            self._insert_free(start + size, end, base)
        self._live[start] = (size, base)
        self._allocated += size
        return start

    def free(self, ptr: int) -> int:
        """Return block ``ptr`` and merge it with its free neighbours; its size.
        ``KeyError`` if ``ptr`` is not a live block of this arena (a bug in the caller)."""
        size, base = self._live.pop(ptr)
        self._allocated -= size
        start, end = ptr, ptr + size
        right = self._free_start.get(end)
        if right is not None and right[1] == base:
            end = right[0]
            self._remove_free(ptr + size)
        left = self._free_end.get(start)
        if left is not None and self._free_start[left][1] == base:
            self._remove_free(left)
            start = left
        self._insert_free(start, end, base)
        return size

    @property
    def live_count(self) -> int:
        """The number of live blocks."""
        return len(self._live)

    def owns(self, ptr: int) -> bool:
        """True when ``ptr`` is a live block of this arena."""
        return ptr in self._live

    def live_blocks(self) -> list[tuple[int, int]]:
        """``(ptr, size)`` of every live block, by address."""
        return sorted((ptr, size) for ptr, (size, _base) in self._live.items())

    def segments(self) -> list:
        return list(self._segments.values())

    def stats(self) -> ArenaStats:
        segment_bytes = sum(s.size for s in self._segments.values())
        return ArenaStats(segment_bytes, self._allocated, segment_bytes - self._allocated,
                          len(self._segments), len(self._live), len(self._by_size),
                          self._by_size[-1][0] if self._by_size else 0)

    @property
    def allocated_bytes(self) -> int:
        return self._allocated

    @property
    def segment_bytes(self) -> int:
        return sum(s.size for s in self._segments.values())

    # -- free ranges --------------------------------------------------------------------
    def _insert_free(self, start: int, end: int, base: int) -> None:
        bisect.insort(self._by_size, (end - start, start))
        self._free_start[start] = (end, base)
        self._free_end[end] = start

    def _remove_free(self, start: int) -> None:
        end, _base = self._free_start.pop(start)
        del self._free_end[end]
        del self._by_size[bisect.bisect_left(self._by_size, (end - start, start))]

    def check(self) -> None:
        """Assert the arena's invariants (tests): free ranges and live blocks tile every
        segment exactly, with no two free ranges adjacent in one segment."""
        for base, segment in self._segments.items():
            pieces = sorted([(s, e, "free") for s, (e, b) in self._free_start.items() if b == base]
                            + [(p, p + sz, "live") for p, (sz, b) in self._live.items()
                               if b == base])
            cursor = base
            previous = None
            for start, end, kind in pieces:
                assert start == cursor, f"{self.name}: gap or overlap at {start:#x}"
                assert not (kind == previous == "free"), f"{self.name}: unmerged at {start:#x}"
                cursor, previous = end, kind
            assert cursor == base + segment.size, f"{self.name}: segment {base:#x} not tiled"
        assert len(self._by_size) == len(self._free_start) == len(self._free_end)
