"""Pinned staging: host slots for swapped-out bytes, carved from one pinned reservation.

Pinned (page-locked) memory is what DMA copies run at full speed from, and allocating it
is slow (``cudaHostAlloc`` maps and locks pages) — so the runtime never allocates it per
tensor. :class:`PinnedStaging` takes *one* pinned block of ``capacity_bytes`` from the
device when it is made and suballocates slots from it, best fit (the smallest free
range that holds the request; ties go to the lowest address), splitting ranges and
merging freed neighbours (the shared :class:`~cupool.core.free_ranges.FreeRanges`). The
same reservation serves every iteration.

When no free range is large enough, the slot comes from *pageable* host memory instead
(a plain NumPy array): the swap still happens, more slowly (a pageable copy is not
asynchronous on a real GPU), and ``stats()`` says so. Slots are 256-byte aligned.

Statistics (one flat dict, ``<quantity>.<qualifier>``):

=================================  ====================================================
``staging.capacity_bytes``         size of the pinned reservation
``staging.in_use_bytes.current``   pinned bytes held by slots now
``staging.in_use_bytes.peak``      maximum of the above
``staging.pinned_slots.count``     slots served from the reservation (ever)
``staging.pageable_slots.count``   slots that fell back to pageable memory (ever)
``staging.planned_pageable_slots.count``  slots the plan put on the pageable level (ever)
``staging.pageable_bytes.total``   bytes of all pageable slots (ever)
``staging.live_slots.current``     slots acquired and not released (both kinds)
=================================  ====================================================

Thread-safe: ``_lock`` guards the free ranges, the live set and the counters (the swap
engine acquires and releases slots on its own thread; other callers may use others).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from cupool.core.free_ranges import FreeRanges
from cupool.core.vocabulary import PAGEABLE, PINNED
from cupool.swap.errors import StagingError

ALIGNMENT = 256
"""Every slot starts at a multiple of this many bytes from the reservation's start."""


@dataclass(frozen=True, eq=False)
class Slot:
    """``nbytes`` host bytes at ``ptr``. ``pinned`` is False for a pageable fallback slot;
    ``array`` is a ``uint8`` view of the bytes (and keeps a pageable slot alive)."""

    ptr: int
    nbytes: int
    pinned: bool
    offset: int = -1  # offset in the reservation (pinned slots)
    array: np.ndarray = field(default=None, repr=False)


class PinnedStaging:
    """Best-fit suballocation of one pinned reservation (see the module docstring).

    ``device`` is a :class:`~cupool.devices.protocol.Device`; ``capacity_bytes`` may be 0
    (every slot is then pageable). Call :meth:`close` to return the reservation.
    """

    def __init__(self, device, capacity_bytes: int) -> None:
        if not isinstance(capacity_bytes, int) or capacity_bytes < 0:
            raise StagingError(f"capacity_bytes (={capacity_bytes!r}) must be an int >= 0")
        self.device = device
        self.capacity_bytes = capacity_bytes
        self._memory = device.alloc_pinned(capacity_bytes) if capacity_bytes else None
        self._array = device.pinned_array(self._memory) if self._memory else None
        self._lock = threading.Lock()
        self._ranges = FreeRanges(alignment=ALIGNMENT)  # offsets in the reservation
        if capacity_bytes:
            self._ranges.add_region(0, capacity_bytes)
        self._live: set[int] = set()  # id() of live slots
        self._stats = {"staging.capacity_bytes": capacity_bytes,
                       "staging.in_use_bytes.current": 0, "staging.in_use_bytes.peak": 0,
                       "staging.pinned_slots.count": 0, "staging.pageable_slots.count": 0,
                       "staging.planned_pageable_slots.count": 0,
                       "staging.pageable_bytes.total": 0, "staging.live_slots.current": 0}

    def acquire(self, nbytes: int, level: str = PINNED) -> Slot:
        """A slot of ``nbytes`` (> 0). ``level="pinned"``: pinned if a free range fits,
        else pageable (a fallback, counted); ``"pageable"``: pageable memory, as a plan that
        put this swap on the pageable level asked (counted apart)."""
        if not isinstance(nbytes, int) or nbytes <= 0:
            raise StagingError(f"acquire(nbytes={nbytes!r}): nbytes must be an int > 0")
        if level not in (PINNED, PAGEABLE):
            raise StagingError(f"acquire(level={level!r}): level must be {PINNED!r} or "
                               f"{PAGEABLE!r}")
        with self._lock:
            best = self._ranges.allocate(nbytes) if level == PINNED else None
            if best is not None:
                rounded = self._ranges.block_size(best)
                slot = Slot(self._memory.ptr + best, nbytes, True, best,
                            self._array[best:best + nbytes])
                stats = self._stats
                stats["staging.pinned_slots.count"] += 1
                current = stats["staging.in_use_bytes.current"] + rounded
                stats["staging.in_use_bytes.current"] = current
                stats["staging.in_use_bytes.peak"] = max(stats["staging.in_use_bytes.peak"],
                                                         current)
            else:
                raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
                skip = -raw.ctypes.data % ALIGNMENT
                array = raw[skip:skip + nbytes]
                slot = Slot(array.ctypes.data, nbytes, False, -1, array)
                kind = "pageable_slots" if level == PINNED else "planned_pageable_slots"
                self._stats[f"staging.{kind}.count"] += 1
                self._stats["staging.pageable_bytes.total"] += nbytes
            self._live.add(id(slot))
            self._stats["staging.live_slots.current"] += 1
        return slot

    def release(self, slot: Slot) -> None:
        """Return a slot; its bytes may be handed out again at once."""
        with self._lock:
            if id(slot) not in self._live:
                raise StagingError(f"release of slot at {slot.ptr:#x} ({slot.nbytes} bytes): "
                                   f"not live in this staging area (released twice?)")
            self._live.discard(id(slot))
            self._stats["staging.live_slots.current"] -= 1
            if slot.pinned:
                self._stats["staging.in_use_bytes.current"] -= self._ranges.free(slot.offset)

    def is_clean(self) -> bool:
        """True when no slot is live and the reservation is one free range again."""
        with self._lock:
            whole = (not self.capacity_bytes) or self._ranges.region_is_free(0)
            return not self._live and whole

    def stats(self) -> dict[str, int]:
        """A snapshot of the counters (key grammar in the module docstring)."""
        with self._lock:
            return dict(self._stats)

    def close(self) -> None:
        """Return the pinned reservation to the device (idempotent)."""
        memory, self._memory, self._array = self._memory, None, None
        if memory is not None and not self.device.closed:
            self.device.free_pinned(memory)
