"""The pool's arenas: where the bytes of its blocks come from.

- :class:`PlannedArena`: a plan made executable. Slot k of a planned iteration is served
  at ``arena base + offset_k`` in O(1), unless a block that outlived its planned lifetime
  still holds bytes of it.
- :class:`BestFitArena`: best fit with split and merge over device segments (CuPy's
  policy, in Python). The pool uses one for its **persistent region** (allocations
  outside any iteration) and one for its **fallback region** (allocations while
  recording, and allocations a plan cannot serve).

Neither talks to the device itself: the pool reserves memory and hands it over (the
planned arena's one reservation; a best-fit arena's segments with
:meth:`BestFitArena.add_segment`, taken back with :meth:`BestFitArena.take_empty_segments`).
So the bookkeeping is tested with exact pointer arithmetic and no device.

Best-fit words:

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
adds no rounding. The free list is :class:`~cupool.core.free_ranges.FreeRanges`, the one
every best-fit user in cupool shares. Not thread-safe: the pool's lock guards every call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from cupool.allocator.recording import RecordedIteration
from cupool.allocator.tickets import PLANNED_BLOCK, Ticket
from cupool.core.free_ranges import FreeRanges
from cupool.core.vocabulary import Plan, Trace

__all__ = ["ALLOCATION_UNIT", "ArenaStats", "BestFitArena", "LiveBlock", "PlannedArena",
           "PlannedSlot"]

ALLOCATION_UNIT = 512
"""Every pool request is rounded up to a multiple of this many bytes (as CuPy's pool does)."""


class LiveBlock(NamedTuple):
    """One live block: ``kind`` (``"planned"``, ``"fallback"`` or ``"persistent"``: the
    region), its address, its rounded size and its plan slot (-1 outside plans)."""

    kind: str
    ptr: int
    size: int
    slot: int


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
    """Best-fit over any number of segments (see the module docstring): the shared
    :class:`~cupool.core.free_ranges.FreeRanges` (best fit, no rounding), one region per
    segment.

    ``segment`` objects are opaque to the arena except for ``ptr`` and ``size``
    (the pool passes :class:`~cupool.devices.memory.Memory`).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._segments: dict[int, object] = {}  # base ptr -> segment
        self._ranges = FreeRanges()

    # -- segments -------------------------------------------------------------------
    def add_segment(self, segment) -> None:
        """Make ``[segment.ptr, segment.ptr + segment.size)`` available, as one free range."""
        base, size = segment.ptr, segment.size
        if base in self._segments:
            raise ValueError(f"arena {self.name!r}: segment at {base:#x} added twice")
        self._ranges.add_region(base, size)
        self._segments[base] = segment

    def take_empty_segments(self) -> list:
        """Remove and return every segment with no live block (for the pool to release)."""
        taken = []
        ranges = self._ranges
        for base, segment in list(self._segments.items()):
            if ranges.region_is_free(base):
                ranges.remove_region(base)
                del self._segments[base]
                taken.append(segment)
        return taken

    # -- blocks ---------------------------------------------------------------------
    def alloc(self, size: int) -> int | None:
        """The address of a new block of ``size`` bytes (``> 0``), or ``None`` when no
        free range fits (the caller then adds a segment and retries)."""
        return self._ranges.allocate(size)

    def free(self, ptr: int) -> int:
        """Return block ``ptr`` and merge it with its free neighbours; its size. A ``ptr``
        that is not a live block of this arena (a bug in the caller) raises
        :class:`~cupool.core.free_ranges.DoubleFreeError` or
        :class:`~cupool.core.free_ranges.UnknownOffsetError`."""
        return self._ranges.free(ptr)

    @property
    def live_count(self) -> int:
        """The number of live blocks."""
        return self._ranges.live_count

    def owns(self, ptr: int) -> bool:
        """True when ``ptr`` is a live block of this arena."""
        return self._ranges.is_live(ptr)

    def live_blocks(self) -> list[LiveBlock]:
        """Every live block (``kind``: the arena's name; ``slot`` -1), by address."""
        return [LiveBlock(self.name, block.start, block.size, -1)
                for block in self._ranges.live_blocks()]

    def segments(self) -> list:
        return list(self._segments.values())

    def stats(self) -> ArenaStats:
        ranges = self._ranges.stats()
        return ArenaStats(ranges.region_bytes, ranges.allocated_bytes, ranges.free_bytes,
                          ranges.regions, ranges.live_blocks, ranges.free_ranges,
                          ranges.largest_free_range)

    @property
    def allocated_bytes(self) -> int:
        return self._ranges.allocated_bytes

    @property
    def segment_bytes(self) -> int:
        return self._ranges.region_bytes

    def check(self) -> None:
        """Check the arena's invariants (tests): free ranges and live blocks tile every
        segment exactly, with no two free ranges adjacent in one segment
        (:meth:`FreeRanges.check <cupool.core.free_ranges.FreeRanges.check>` raises)."""
        self._ranges.check()


class PlannedSlot:
    """What the planned path reads for allocation k of an iteration (read-only).

    ``serves``: the request size the slot serves, its rounded size while the slot is open
    and 0 while it is blocked (0 matches no request, so the planned path tests one size,
    not the size and a flag); ``ticket``: the ticket of the slot's blocks; ``due``: the
    slots whose blocks should be freed before allocation k (:class:`PlannedArena`).
    """

    __slots__ = ("due", "serves", "ticket")

    def __init__(self, serves: int, ticket: Ticket, due: tuple[int, ...]) -> None:
        self.serves = serves
        self.ticket = ticket
        self.due = due


class PlannedArena:
    """A plan made executable: slot k is ``ptrs[k]`` for ``sizes[k]`` bytes.

    ``slots[k]`` is the :class:`PlannedSlot` of slot k: ``open_slots[k]`` while the slot
    is not blocked (below), ``blocked_slots[k]`` while it is. Slot k's ticket is made
    once, here. ``live[j]`` is 1 while the block of slot j allocated in the current
    iteration is live and not overdue.

    Overdue blocks. A planned block of slot j should be freed before allocation
    ``end_j`` of its iteration (its trace end; ``due[end_j]`` lists j). One still live
    then, or still live when its iteration ends, is *overdue*: it may sit on bytes the
    plan gives to later slots. Each overdue block adds 1 to ``blocked[k]`` for every slot
    k whose bytes intersect its own (:meth:`overlaps`, computed once per slot), and takes
    it back when freed. So slot k may be served when ``blocked[k] == 0``: the live blocks
    that are not overdue overlap k in time, and the plan keeps those apart in address::

        slot:      0    1    2          plan: slot 2 reuses slot 0's bytes (0 ends at 2)
        iter 5:   [0=====)              block of slot 0 freed late: live at malloc 2
                       [1=======)       -> overdue: blocked[0] and blocked[2] become 1
                            [2==        -> slot 2 is served by the fallback (a collision)

    Hence **at most one block per slot is live**: a block of slot j from an earlier
    iteration is overdue, so ``blocked[j] >= 1`` (its bytes intersect its own) and slot
    j is not served from the plan until it is freed. A freed planned block is therefore
    the current iteration's when ``live[j]`` is 1, else the overdue block of slot j
    (``overdue`` and ``remaining`` are sets of slots).

    A *retired* arena (the pool re-planned) serves nothing; it is released when
    ``remaining`` (its live blocks at retirement) empties.

    ``memory`` is the arena's reservation (``None`` for a plan of 0 bytes), whose
    ``ptr`` is the base of every offset; ``release`` is what the tickets call when their
    blocks die (the pool's free queue). Not thread-safe: the pool's lock guards it.
    """

    def __init__(self, plan: Plan, trace: Trace, recording: RecordedIteration, memory,
                 release) -> None:
        n = recording.allocations
        self.plan = plan
        self.trace = trace
        self.recording = recording
        self.memory = memory
        self.n = n
        base = memory.ptr if memory is not None else 0
        offsets = plan.offsets()
        self.offsets = np.array([offsets[k] for k in range(n)], dtype=np.int64)
        self.ends = self.offsets + np.array(recording.sizes, dtype=np.int64)
        self.sizes = list(recording.sizes)
        self.ptrs = [base + int(o) for o in self.offsets]
        due: list[list[int]] = [[] for _ in range(n)]
        for j, (end, outlived) in enumerate(zip(recording.ends, recording.outlived,
                                                strict=True)):
            if not outlived and end < n:
                due[end].append(j)
        self.due = [tuple(d) for d in due]
        # A ticket refers to its arena (a cycle, broken by close_tickets()).
        tickets = [Ticket(release, PLANNED_BLOCK, size, k, self, ptr)
                   for k, (size, ptr) in enumerate(zip(self.sizes, self.ptrs, strict=True))]
        self.open_slots = [PlannedSlot(size, ticket, due)
                           for size, ticket, due in zip(self.sizes, tickets, self.due,
                                                        strict=True)]
        self.blocked_slots = [PlannedSlot(0, slot.ticket, slot.due) for slot in self.open_slots]
        self.slots = list(self.open_slots)
        self.live = [0] * n
        self.blocked = [0] * n
        self.overdue: set[int] = set()
        self._overlaps: dict[int, list[int]] = {}
        self.cursor = 0  # allocations made in the current iteration
        self.off_plan = 0  # of those, served by the fallback region
        self.diverged = False  # the current iteration had a divergent allocation
        self.retired = False
        self.remaining: set[int] = set()

    @property
    def reserved_bytes(self) -> int:
        return self.memory.size if self.memory is not None else 0

    def overlaps(self, j: int) -> list[int]:
        """Slots whose planned bytes intersect slot j's (j included)."""
        found = self._overlaps.get(j)
        if found is None:
            hit = (self.offsets < self.ends[j]) & (self.ends > self.offsets[j])
            found = self._overlaps[j] = np.flatnonzero(hit).tolist()
        return found

    def make_overdue(self, j: int) -> None:
        self.overdue.add(j)
        blocked, slots = self.blocked, self.slots
        for k in self.overlaps(j):
            blocked[k] += 1
            if blocked[k] == 1:
                slots[k] = self.blocked_slots[k]

    def end_overdue(self, j: int) -> None:
        self.overdue.remove(j)
        blocked, slots = self.blocked, self.slots
        for k in self.overlaps(j):
            blocked[k] -= 1
            if blocked[k] == 0:
                slots[k] = self.open_slots[k]

    def serve(self, size: int) -> Ticket | None:
        """The iteration's next allocation, of ``size`` rounded bytes: the slot's ticket
        when the plan serves it (the slot's size, and not blocked), else ``None`` (the
        caller serves it elsewhere; ``cursor - 1`` is its slot). The pool's fast
        ``malloc`` inlines these steps."""
        k = self.cursor
        self.cursor = k + 1
        if k < self.n:
            live = self.live
            for j in self.due[k]:
                if live[j]:
                    live[j] = 0
                    self.make_overdue(j)
            slot = self.slots[k]
            if slot.serves == size:
                live[k] = 1
                return slot.ticket
        return None

    def free(self, j: int) -> bool:
        """The block of slot j was freed. True when that was the last live block of a
        retired arena: the caller releases its memory and :meth:`close_tickets`."""
        if self.retired:
            self.remaining.discard(j)
            return not self.remaining
        if self.live[j]:
            self.live[j] = 0
        else:
            self.end_overdue(j)
        return False

    def begin_iteration(self) -> None:
        self.cursor = 0
        self.off_plan = 0
        self.diverged = False

    def end_iteration(self) -> None:
        """Every block of the iteration still live becomes overdue."""
        live = self.live
        for j in [j for j, flag in enumerate(live) if flag]:
            live[j] = 0
            self.make_overdue(j)

    def retire(self) -> bool:
        """Stop serving; True when no block is live (the caller releases the memory now)."""
        self.end_iteration()
        self.retired = True
        self.remaining, self.overdue = self.overdue, set()
        return not self.remaining

    def close_tickets(self) -> None:
        """Drop the tickets (the arena is released: no block of it is live or will be)."""
        self.slots, self.open_slots, self.blocked_slots = [], [], []

    def live_count(self) -> int:
        """The number of live blocks."""
        return len(self.remaining) if self.retired else sum(self.live) + len(self.overdue)

    def live_blocks(self) -> list[LiveBlock]:
        """Every live block (kind ``"planned"``)."""
        slots = sorted(self.remaining) if self.retired else [
            *(j for j, flag in enumerate(self.live) if flag), *self.overdue]
        return [LiveBlock("planned", self.ptrs[j], self.sizes[j], j) for j in slots]
