"""Free address ranges with best fit: the one free list behind cupool's suballocators.

A :class:`FreeRanges` hands out *blocks* from *regions* of address space and takes them
back. It is bookkeeping only: it never touches memory, so its numbers are whatever the
caller means (device pointers, offsets in a pinned reservation, offsets of a static plan).
The pool's best-fit regions, the pinned staging area, the passive run's arena, the
``best-fit`` static solver and the CuPy / PyTorch allocator models all use it.

Words (half-open ranges, bytes):

- a **region** is ``[base, base + size)``, made available by :meth:`~FreeRanges.add_region`.
  Regions never overlap, and two regions that touch in address stay two: a free range
  never spans a region boundary (a device reservation is given back whole, so its bytes
  must not merge with its neighbour's);
- a **free range** is a maximal run of free bytes inside one region: free neighbours are
  merged as soon as they touch;
- a **block** is ``[offset, offset + size)`` handed out by :meth:`~FreeRanges.allocate`,
  live until :meth:`~FreeRanges.free`.

The rules, which plans depend on byte for byte:

- **Rounding**: a request of ``n`` bytes (an int ``> 0``) takes ``aligned(n)``, ``n``
  rounded up to a multiple of ``alignment`` (default 1: no rounding). Blocks are carved
  from the front of free ranges, so every block starts at ``base + k * alignment`` of its
  region, whatever the region's size while ``min_split`` is 1 and the region never grows,
  and always when the region's size is a multiple of ``alignment``.
- **Fit**: ``fit="best"`` (default) takes the *smallest* free range that holds the block;
  among free ranges of that size, the *lowest address* wins. ``fit="first"`` takes the
  lowest-addressed free range that holds it.
- **Split**: the block takes the front of the range and the rest stays free, unless the
  rest is under ``min_split`` bytes (default 1: always split): then the block takes the
  whole range, and :meth:`~FreeRanges.block_size` is more than was asked.
- **Merge**: a freed block merges with the free ranges touching it in its region.
- **Miss**: :meth:`~FreeRanges.allocate` returns ``None`` when no free range holds the
  block (the caller adds a region and retries), or, asked to ``grow`` a region, puts the
  block at that region's end and grows it (a heap that grows at its top).
- **Errors** (typed, with the numbers): :class:`DoubleFreeError` when the offset freed lies
  in a free range, :class:`UnknownOffsetError` when it is no block's start,
  :class:`FreeRangeArgumentError` for a bad size or option, :class:`FreeRangeError` for a
  region that overlaps another, or that is removed while it holds blocks.

A worked example, two touching regions (best fit)::

    add_region(0, 16), add_region(16, 8)   [0 ........ 16)[16 .... 24)   two free ranges
    allocate(6)  -> 16                     8 is the smallest range >= 6   free [22, 24)
    allocate(2)  -> 22                     [22, 24) fits exactly          no split left
    allocate(4)  -> 0                      only [0, 16) holds 4           free [4, 16)
    free(16)     -> 6                      [16, 22) free; [4, 16) is in the other region,
                                           so it stays two ranges: [4, 16) and [16, 22)

Cost: with ``f`` free ranges, :meth:`~FreeRanges.allocate` is a binary search over the
ranges sorted by ``(size, start)`` plus one list insertion and deletion (``O(log f)``
compares and an ``O(f)`` memory move; ``fit="first"`` also scans the ranges that fit);
:meth:`~FreeRanges.free` finds its neighbours in two dict lookups. Not thread-safe: the
caller's lock guards every call.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass
from itertools import pairwise
from typing import NamedTuple

from cupool.errors import ArgumentError, CupoolError

__all__ = ["BEST_FIT", "FIRST_FIT", "DoubleFreeError", "FreeRangeArgumentError",
           "FreeRangeError", "FreeRangeStats", "FreeRanges", "Piece", "UnknownOffsetError"]

BEST_FIT = "best"
"""The smallest free range that holds the block; the lowest address among equal sizes."""
FIRST_FIT = "first"
"""The lowest-addressed free range that holds the block."""


class FreeRangeError(CupoolError):
    """A free-range call broke a rule: a region that overlaps another, a region removed
    while it holds live blocks, a region that does not exist."""


class FreeRangeArgumentError(FreeRangeError, ArgumentError):
    """A bad argument: ``"allocate(size=0): size must be an int > 0"``."""


class DoubleFreeError(FreeRangeError):
    """``free(offset)`` where the byte at ``offset`` is already free: it lies in the free
    range ``[range_start, range_end)`` (the block there was freed before)."""

    def __init__(self, offset: int, range_start: int, range_end: int) -> None:
        self.offset, self.range_start, self.range_end = offset, range_start, range_end
        super().__init__(f"free(offset={offset}): the bytes there are already free (free "
                         f"range [{range_start}, {range_end}); freed twice?)")


class UnknownOffsetError(FreeRangeError):
    """``free(offset)`` (or a query) where no live block starts at ``offset``; ``live`` is
    the number of live blocks and ``inside`` says where the offset lies instead."""

    def __init__(self, offset: int, live: int, inside: str) -> None:
        self.offset, self.live, self.inside = offset, live, inside
        super().__init__(f"offset {offset}: none of the {live} live blocks starts there "
                         f"({inside})")


class Piece(NamedTuple):
    """A piece of a region, ``[start, end)``: a live block (``live``) or a free range."""

    start: int
    end: int
    live: bool

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class FreeRangeStats:
    """Plain numbers: bytes in regions, in live blocks and free; counts of regions, live
    blocks and free ranges; the size of the largest free range (0 when none)."""

    region_bytes: int
    allocated_bytes: int
    free_bytes: int
    regions: int
    live_blocks: int
    free_ranges: int
    largest_free_range: int


class FreeRanges:
    """Blocks from free address ranges, best (or first) fit; see the module docstring.

    ``alignment`` (int ``>= 1``): block sizes are rounded up to a multiple of it.
    ``fit``: :data:`BEST_FIT` or :data:`FIRST_FIT`. ``min_split`` (int ``>= 1``): a range
    is split only when at least this many bytes would stay free. Addresses are ints
    ``>= 0``.
    """

    def __init__(self, alignment: int = 1, fit: str = BEST_FIT, min_split: int = 1) -> None:
        for name, value in (("alignment", alignment), ("min_split", min_split)):
            if type(value) is not int or value < 1:
                raise FreeRangeArgumentError("FreeRanges", name, value, "must be an int >= 1")
        if fit not in (BEST_FIT, FIRST_FIT):
            raise FreeRangeArgumentError("FreeRanges", "fit", fit,
                                         f"must be {BEST_FIT!r} or {FIRST_FIT!r}")
        self.alignment = alignment
        self.fit = fit
        self.min_split = min_split
        self._first_fit = fit == FIRST_FIT
        self._by_size: list[tuple[int, int]] = []  # (size, start) of every free range, sorted
        self._end_of: dict[int, int] = {}  # free range start -> its end
        self._start_of: dict[int, int] = {}  # free range end -> its start
        self._live: dict[int, int] = {}  # block offset -> its (rounded) size
        self._regions: dict[int, int] = {}  # region base -> its size
        self._bases: list[int] = []  # region bases, sorted

    # -- regions ------------------------------------------------------------------------
    def add_region(self, base: int, size: int) -> None:
        """Make ``[base, base + size)`` available as one free range (``size`` may be 0:
        an empty region, for :meth:`allocate` to ``grow``)."""
        if type(base) is not int or base < 0:
            raise FreeRangeArgumentError("add_region", "base", base, "must be an int >= 0")
        if type(size) is not int or size < 0:
            raise FreeRangeArgumentError("add_region", "size", size, "must be an int >= 0")
        at = bisect_right(self._bases, base)
        below = self._bases[at - 1] if at else None
        if below is not None and (below == base or below + self._regions[below] > base):
            raise FreeRangeError(f"add_region(base={base}, size={size}): overlaps region "
                                 f"[{below}, {below + self._regions[below]})")
        if at < len(self._bases) and self._bases[at] < base + size:
            above = self._bases[at]
            raise FreeRangeError(f"add_region(base={base}, size={size}): overlaps region "
                                 f"[{above}, {above + self._regions[above]})")
        self._bases.insert(at, base)
        self._regions[base] = size
        if size:
            self._insert(base, base + size)

    def region_is_free(self, base: int) -> bool:
        """True when region ``base`` holds no live block."""
        size = self._region_size(base, "region_is_free")
        return size == 0 or self._end_of.get(base) == base + size

    def remove_region(self, base: int) -> int:
        """Take region ``base`` away (it must hold no live block); its size."""
        size = self._region_size(base, "remove_region")
        if not self.region_is_free(base):
            live = sum(1 for piece in self.region_layout(base) if piece.live)
            raise FreeRangeError(f"remove_region(base={base}): region [{base}, {base + size}) "
                                 f"still holds {live} live blocks")
        if size:
            self._remove(base)
        del self._regions[base]
        del self._bases[bisect_left(self._bases, base)]
        return size

    def region_layout(self, base: int) -> list[Piece]:
        """Region ``base`` from its start to its end: its live blocks and free ranges."""
        end = base + self._region_size(base, "region_layout")
        pieces, cursor = [], base
        live, end_of = self._live, self._end_of
        while cursor < end:
            if cursor in live:
                piece = Piece(cursor, cursor + live[cursor], True)
            elif cursor in end_of:
                piece = Piece(cursor, end_of[cursor], False)
            else:
                raise FreeRangeError(f"region [{base}, {end}): no block or free range "
                                     f"starts at {cursor} (corrupt bookkeeping)")
            pieces.append(piece)
            cursor = piece.end
        return pieces

    def regions(self) -> list[Piece]:
        """Every region as ``[base, base + size)`` (``live`` False), by address."""
        return [Piece(base, base + self._regions[base], False) for base in self._bases]

    # -- blocks -------------------------------------------------------------------------
    def aligned(self, size: int) -> int:
        """``size`` rounded up to a multiple of ``alignment``: the bytes a request takes."""
        alignment = self.alignment
        return -(-size // alignment) * alignment

    def allocate(self, size: int, grow: int | None = None) -> int | None:
        """The offset of a new block of ``aligned(size)`` bytes (``size``: an int ``> 0``).

        When no free range holds it: ``None``; or, with ``grow=base``, the block goes at
        the end of region ``base``, which grows to hold it (a heap that grows at its top):
        it starts at the free range touching the region's end when there is one, else at
        the region's end, and the region then ends where the block does. Growing into the
        next region raises :class:`FreeRangeError`."""
        if type(size) is not int or size <= 0:
            raise FreeRangeArgumentError("allocate", "size", size, "must be an int > 0")
        alignment = self.alignment
        if alignment != 1:
            size = -(-size // alignment) * alignment
        by_size = self._by_size
        i = bisect_left(by_size, (size, -1))
        if i == len(by_size):
            if grow is None:
                return None
            region_size = self._regions.get(grow)
            if region_size is None:
                region_size = self._region_size(grow, "allocate")  # raises
            region_end = grow + region_size
            # a free range ending at the end of an empty region belongs to the region below
            start = self._start_of.get(region_end, region_end) if region_size else grow
            if self._bases[-1] != grow:  # a region above: the grown one must stay below it
                self._check_growth(grow, start, size)
            if start != region_end:
                self._remove(start)
            self._regions[grow] = start + size - grow
            self._live[start] = size
            return start
        if self._first_fit:
            start = min(entry[1] for entry in by_size[i:])
            i = bisect_left(by_size, (self._end_of[start] - start, start))
        range_size, start = by_size.pop(i)
        end = self._end_of.pop(start)
        del self._start_of[end]
        if range_size - size >= self.min_split:
            self._insert(start + size, end)
        else:
            size = range_size
        self._live[start] = size
        return start

    def free(self, offset: int) -> int:
        """Return the block at ``offset`` and merge it with the free ranges touching it in
        its region; its size. :class:`DoubleFreeError` when the bytes there are free
        already, :class:`UnknownOffsetError` when no block starts there."""
        size = self._live.pop(offset, None)
        if size is None:
            raise self._not_live(offset, freeing=True)
        start, end = offset, offset + size
        regions, end_of, start_of, by_size = (self._regions, self._end_of, self._start_of,
                                              self._by_size)
        if end not in regions:  # a region starting at ``end`` is another region
            right_end = end_of.pop(end, None)
            if right_end is not None:
                del start_of[right_end]
                del by_size[bisect_left(by_size, (right_end - end, end))]
                end = right_end
        if start not in regions:
            left = start_of.pop(start, None)
            if left is not None:
                del end_of[left]
                del by_size[bisect_left(by_size, (start - left, left))]
                start = left
        end_of[start] = end
        start_of[end] = start
        insort(by_size, (end - start, start))
        return size

    def is_live(self, offset: int) -> bool:
        """True when a live block starts at ``offset``."""
        return offset in self._live

    def block_size(self, offset: int) -> int:
        """The size of the live block at ``offset`` (:class:`UnknownOffsetError` if none)."""
        size = self._live.get(offset)
        if size is None:
            raise self._not_live(offset, freeing=False)
        return size

    # -- numbers --------------------------------------------------------------------------
    @property
    def live_count(self) -> int:
        """The number of live blocks."""
        return len(self._live)

    @property
    def allocated_bytes(self) -> int:
        """Bytes in live blocks (rounded sizes)."""
        return sum(self._live.values())

    @property
    def region_bytes(self) -> int:
        """Bytes in all regions."""
        return sum(self._regions.values())

    def live_blocks(self) -> list[Piece]:
        """Every live block (``live`` True), by address."""
        return [Piece(offset, offset + self._live[offset], True) for offset in sorted(self._live)]

    def free_ranges(self) -> list[Piece]:
        """Every free range (``live`` False), by address."""
        return [Piece(start, self._end_of[start], False) for start in sorted(self._end_of)]

    def stats(self) -> FreeRangeStats:
        region_bytes, allocated = self.region_bytes, self.allocated_bytes
        return FreeRangeStats(region_bytes, allocated, region_bytes - allocated,
                              len(self._regions), len(self._live), len(self._by_size),
                              self._by_size[-1][0] if self._by_size else 0)

    def check(self) -> None:
        """Raise :class:`FreeRangeError` unless the invariants hold (for tests): live blocks
        and free ranges tile every region exactly, no two free ranges touch inside one
        region, and the three indexes of the free ranges agree."""
        pieces = 0
        for base in self._bases:
            layout = self.region_layout(base)
            pieces += len(layout)
            for left, right in pairwise(layout):
                if not (left.live or right.live):
                    raise FreeRangeError(f"free ranges [{left.start}, {left.end}) and "
                                         f"[{right.start}, {right.end}) touch but were not merged")
            if layout and layout[-1].end != base + self._regions[base]:
                raise FreeRangeError(f"region at {base}: its pieces end at {layout[-1].end}, "
                                     f"not at {base + self._regions[base]}")
        indexed = sorted((end - start, start) for start, end in self._end_of.items())
        if (pieces != len(self._live) + len(self._end_of) or indexed != self._by_size
                or self._start_of != {end: start for start, end in self._end_of.items()}):
            raise FreeRangeError("the free-range indexes disagree (corrupt bookkeeping)")

    # -- internals ------------------------------------------------------------------------
    def _check_growth(self, base: int, start: int, size: int) -> None:
        """Raise :class:`FreeRangeError` if region ``base``, grown for ``size`` bytes at
        ``start``, would overlap the next region."""
        above = self._bases[bisect_right(self._bases, base)]
        if above < start + size:
            raise FreeRangeError(f"allocate(size={size}, grow={base}): region [{base}, "
                                 f"{start + size}) would overlap the region at {above}")

    def _insert(self, start: int, end: int) -> None:
        self._end_of[start] = end
        self._start_of[end] = start
        insort(self._by_size, (end - start, start))

    def _remove(self, start: int) -> None:
        end = self._end_of.pop(start)
        del self._start_of[end]
        del self._by_size[bisect_left(self._by_size, (end - start, start))]

    def _region_size(self, base: int, operation: str) -> int:
        size = self._regions.get(base)
        if size is None:
            raise FreeRangeError(f"{operation}(base={base}): no region starts there "
                                 f"({len(self._regions)} regions)")
        return size

    def _not_live(self, offset: int, freeing: bool) -> FreeRangeError:
        """The error for an offset where no live block starts: which piece holds it."""
        starts = sorted(self._end_of)
        at = bisect_right(starts, offset) - 1
        if at >= 0 and offset < self._end_of[starts[at]]:
            start, end = starts[at], self._end_of[starts[at]]
            if freeing:
                return DoubleFreeError(offset, start, end)
            return UnknownOffsetError(offset, len(self._live),
                                      f"it is inside the free range [{start}, {end})")
        for start, size in self._live.items():
            if start < offset < start + size:
                return UnknownOffsetError(offset, len(self._live),
                                          f"it is inside the block [{start}, {start + size})")
        return UnknownOffsetError(offset, len(self._live), "it is in no region")
