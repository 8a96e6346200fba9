"""The pool's statistics: one flat ``dict[str, int]`` with a documented key grammar.

:meth:`PlannedPool.memory_stats() <cupool.allocator.pool.PlannedPool.memory_stats>` returns
it (the grammar follows PyTorch's ``allocated_bytes.all.peak`` and the device layer's
``<quantity>.<qualifier>``):

- **gauges** are ``<quantity>.current`` and ``<quantity>.peak`` (the largest ``current``
  since the pool was made or :meth:`PoolCounters.reset_peaks` ran);
- **counters** are bare ``<event>`` names and only grow.

Gauges (bytes are rounded sizes, multiples of 512):

==============================  ==================================================================
``allocated_bytes``             bytes handed out and not yet freed (all regions)
``fallback_bytes``              of those, served by the best-fit fallback region
``persistent_bytes``            of those, allocated outside any iteration (persistent region)
``planned_bytes``               of those, served at a planned offset (``.current`` only: it is
                                ``allocated - fallback - persistent``, to keep the planned path
                                short)
``reserved_bytes``              bytes actually reserved from the device (all regions), as in
                                PyTorch: what other programs on the GPU cannot use
``arena_bytes``                 of those, the active plan's arena (0 while recording)
``live_blocks``                 blocks handed out and not yet freed (``.current`` only)
==============================  ==================================================================

Counters:

==============================  ==================================================================
``mallocs`` / ``frees``         blocks handed out / freed (``malloc(0)`` is not a block;
                                ``frees`` is ``mallocs - live_blocks.current``, the live
                                blocks being counted in the regions when the stats are read)
``planned_hits``                allocations served at their planned offset (O(1))
``fallback_allocations``        allocations inside a planned iteration served by the fallback
                                region (``divergent_allocations + collisions``)
``divergent_allocations``       of those, off-plan: the size differs from the plan's, or the
                                iteration allocates more blocks than the plan has
``collisions``                  of those, on-plan but the planned bytes were still held by a
                                block that outlived its planned lifetime (never overlapped)
``recorded_allocations``        allocations logged while recording
``persistent_allocations``      allocations outside any iteration
``zero_size_allocations``       ``malloc(0)`` calls (null pointer, no bytes)
``recorded_iterations``         iterations recorded (completed without an exception)
``planned_iterations``          iterations run from a plan
``divergent_iterations``        planned iterations with at least one divergent allocation, or
                                fewer allocations than the plan
``plans``                       plans installed (solved, or loaded with ``load_plan``)
``replans``                     times the pool dropped a plan after ``divergence_limit``
                                divergent iterations in a row and went back to recording
``plan_failures``               plans that could not be installed (arena over the limit)
``device_reservations``         reservations made on the device
``device_releases``             reservations returned to the device
``oom_errors``                  ``OutOfMemoryError`` raised
==============================  ==================================================================
"""

from __future__ import annotations

GAUGES = ("allocated_bytes", "fallback_bytes", "persistent_bytes", "reserved_bytes",
          "arena_bytes")
"""Gauges with a ``.current`` and a ``.peak``."""

COUNTERS = ("mallocs", "frees", "planned_hits", "fallback_allocations",
            "divergent_allocations", "collisions", "recorded_allocations",
            "persistent_allocations", "zero_size_allocations", "recorded_iterations",
            "planned_iterations", "divergent_iterations", "plans", "replans", "plan_failures",
            "device_reservations", "device_releases", "oom_errors")

KEYS = (*(f"{g}.{q}" for g in GAUGES for q in ("current", "peak")), "planned_bytes.current",
        "live_blocks.current", *COUNTERS)
"""Every key of :meth:`PoolCounters.snapshot`, in a stable order."""

_STORED = (*(c for c in COUNTERS if c not in ("mallocs", "frees")), "fallback_mallocs")
_GAUGE_ATTRIBUTES = {gauge: (f"{gauge}_current", f"{gauge}_peak") for gauge in GAUGES}


class PoolCounters:
    """The mutable numbers behind the stats dict: one plain attribute per counter and two
    per gauge (``<gauge>_current``, ``<gauge>_peak``), because the planned path updates
    them on every allocation. Whoever raises a ``_current`` raises its ``_peak`` too
    (:meth:`add` does both).

    Not thread-safe by itself: the pool's lock guards it.
    """

    __slots__ = (*_STORED, *(f"{g}_{q}" for g in GAUGES for q in ("current", "peak")))

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def add(self, gauge: str, amount: int) -> None:
        """Change gauge ``gauge`` by ``amount`` bytes (or blocks) and keep its peak."""
        current, peak = _GAUGE_ATTRIBUTES[gauge]  # names made once: this runs per block
        value = getattr(self, current) + amount
        setattr(self, current, value)
        if value > getattr(self, peak):
            setattr(self, peak, value)

    def reset_peaks(self) -> None:
        """Set every peak to its current value (like ``torch.cuda.reset_peak_memory_stats``)."""
        for gauge in GAUGES:
            setattr(self, f"{gauge}_peak", getattr(self, f"{gauge}_current"))

    def snapshot(self, live_blocks: int, running_planned_hits: int = 0) -> dict[str, int]:
        """The flat stats dict (keys: :data:`KEYS`, in that order).

        ``live_blocks`` is the number of blocks handed out and not freed, counted by the
        pool in its regions (the free path does not count frees: ``frees`` is
        ``mallocs - live_blocks``). ``planned_hits`` is added up at the end of each
        planned iteration (the planned path does not count); ``running_planned_hits``
        is the running iteration's share.
        """
        planned_hits = self.planned_hits + running_planned_hits
        mallocs = planned_hits + self.fallback_mallocs + self.persistent_allocations
        derived = {
            "planned_hits": planned_hits,
            "planned_bytes.current": (self.allocated_bytes_current - self.fallback_bytes_current
                                      - self.persistent_bytes_current),
            "live_blocks.current": live_blocks,
            "mallocs": mallocs,
            "frees": mallocs - live_blocks,
        }
        return {key: derived[key] if key in derived else getattr(self, key.replace(".", "_"))
                for key in KEYS}
