"""What on-time swaps of persistent state can ever free at each op: a floor under the
bytes any on-time plan keeps resident there.

Every op needs its own working set resident, and every persistent buffer it does not use
stays resident too unless a swap of one of its idle gaps has a *hole* over the op: the
copy out (after the previous use) has landed before the op starts, and the copy in (due
at the next use) is triggered after it and still lands on time. On the ideal timeline
with idle copy engines a gap ``(p, q)`` can cover op ``k`` only when::

    end(p) + copy_out <= start(k)          (nothing to copy for clean data)
    start(k + 1) + copy_in <= start(q)

A planner that inserts recomputations stretches the timeline only at ops that read a
temporary buffer (a recompute runs before the op that needs its bytes), so a span holding
such an op is counted as long enough. Summing, per op, the sizes of the persistent buffers
some gap of which can cover it (:func:`persistent_relief`) gives an upper bound on what
such swaps free there, and :func:`on_time_floor` the bytes no plan with only on-time swaps
and recomputations brings that op under::

    floor(k) = every persistent byte + the temporaries op k uses - relief(k)

The cost-aware greedy with swaps that are on time or triggered no later than their
latest on-time trigger is such a planner: when the floor is over the budget at some op, it
cannot end within the budget there. With late triggers that may stretch a hole up to the
next use (``"covering"``), only the copy out bounds a hole. Segment checkpointing re-runs
a segment before the first backward op that reads one of its activations, a temporary
buffer: it stretches the timeline where a recompute may.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.planning.budget.engine.schedule import gaps_of, trace_index

ROUNDING_US = 1e-9
"""Slack on µs comparisons, as the copy queue allows (sums of µs round)."""


def persistent_floor(trace: Trace) -> np.ndarray:
    """Bytes each op cannot do without while persistent state stays resident: every
    persistent byte plus the temporaries the op uses (a new array; computed once per
    trace)."""
    derived = trace_index(trace).derived
    floor = derived.get("persistent_floor")
    if floor is None:
        persistent = sum(b.size for b in trace.buffers if b.kind == PERSISTENT)
        used = np.zeros(trace.num_ops, dtype=np.int64)
        for b in trace.buffers:
            if b.kind != PERSISTENT:
                for u in set(b.uses):
                    used[u] += b.size
        floor = derived["persistent_floor"] = used + persistent
    return floor.copy()


class _Timeline(NamedTuple):
    """The ideal timeline (``start[k]``, ``start[n]`` the end) and, per op, how many ops
    before it may be stretched by a recompute (``stretchable_before[k]``: ops ``< k``
    that read a temporary buffer)."""

    start: np.ndarray
    stretchable_before: np.ndarray

    def long_enough(self, first: int, last: int, need_us: float) -> bool:
        """Whether ops ``[first, last)`` take at least ``need_us`` (or may be stretched)."""
        if last <= first:
            return need_us <= ROUNDING_US
        if self.stretchable_before[last] > self.stretchable_before[first]:
            return True
        return float(self.start[last] - self.start[first]) + ROUNDING_US >= need_us


def _timeline(trace: Trace, cost) -> _Timeline:
    n = trace.num_ops
    durations = np.array(cost.op_times(trace), dtype=float)
    start = np.concatenate(([0.0], np.cumsum(durations)))
    reads_temporary = np.zeros(n, dtype=bool)
    for b in trace.buffers:
        if b.kind != PERSISTENT and b.uses:
            reads_temporary[list(set(b.uses))] = True
    stretchable = np.concatenate(([0], np.cumsum(reads_temporary)))
    return _Timeline(start, stretchable)


def _first_reached(timeline: _Timeline, first: int, last: int, since: int,
                   need_us: float) -> int:
    """The first op of ``[first, last)`` whose start is at least ``need_us`` after op
    ``since`` starts (``last`` if none): a copy issued then has landed by that op."""
    return bisect.bisect_left(range(first, last), True,
                              key=lambda k: timeline.long_enough(since, k, need_us)) + first


def _last_in_time(timeline: _Timeline, first: int, last: int, due_op: int,
                  need_us: float) -> int:
    """One past the last op ``k`` of ``[first, last)`` after which a copy of ``need_us``,
    triggered when op ``k + 1`` starts, still lands by op ``due_op`` (``first`` if none)."""
    return bisect.bisect_left(range(first, last), True,
                              key=lambda k: not timeline.long_enough(k + 1, due_op,
                                                                     need_us)) + first


def persistent_relief(trace: Trace, cost, late_in: bool = False) -> np.ndarray:
    """Per op, the bytes of persistent buffers it does not use that an on-time swap could
    have off the device during it (module docstring): an upper bound on what swapping
    persistent state frees there. With ``late_in`` a copy in may land late (a hole may
    reach up to the next use): only the copy out bounds the ops a gap covers."""
    n = trace.num_ops
    timeline = _timeline(trace, cost)
    relief = np.zeros(n + 1, dtype=np.int64)
    for b in trace.buffers:
        if b.kind != PERSISTENT or not b.uses:
            continue
        covered = np.zeros(n + 1, dtype=np.int64)
        in_us = cost.copy_us(b.size, "h2d")
        for gap in gaps_of(trace, b):
            p, q = gap.prev_use, gap.next_use
            dirty = b.writes is None or p in b.write_ops
            out_us = cost.copy_us(b.size, "d2h") if dirty else 0.0
            if q > p:  # between two uses: ops after the copy out, before the copy in
                spans = [(_first_reached(timeline, p + 1, q, p + 1, out_us),
                          q if late_in else _last_in_time(timeline, p + 1, q, q, in_us))]
            elif q == 0:
                continue  # across the boundary to op 0: no op to trigger the copy in at
            else:  # across the boundary: the tail after the copy out, the head before the in
                spans = [(_first_reached(timeline, p + 1, n, p + 1, out_us), n),
                         (0, q if late_in else _last_in_time(timeline, 0, q, q, in_us))]
            for lo, hi in spans:
                if hi > lo:
                    covered[lo] += 1
                    covered[hi] -= 1
        relief += np.where(np.cumsum(covered) > 0, b.size, 0)
    return relief[:n]


def on_time_floor(trace: Trace, cost, relief: bool = True,
                  late_in: bool = False) -> np.ndarray:
    """Per op, the bytes resident under any plan whose swaps of persistent buffers are on
    time (module docstring; ``late_in``: whose copies out are, see
    :func:`persistent_relief`); without ``relief``, under any plan that keeps persistent
    state on the device."""
    floor = persistent_floor(trace)
    return floor - persistent_relief(trace, cost, late_in) if relief else floor


class FloorOver(NamedTuple):
    """The op whose :func:`on_time_floor` is highest, and that floor in bytes."""

    op: int
    floor_bytes: int


def highest_floor(trace: Trace, cost, relief: bool = True,
                  late_in: bool = False) -> FloorOver | None:
    """The op with the highest :func:`on_time_floor` (the first of ties); ``None`` for a
    trace without ops. Computed once per trace and (hashable) cost model."""
    if trace.num_ops == 0:
        return None
    key = ("highest_floor", cost, relief, late_in)
    try:
        hash(key)
    except TypeError:  # a cost model that is not hashable: asked afresh each time
        key = None
    derived = trace_index(trace).derived
    found = None if key is None else derived.get(key)
    if found is None:
        floor = on_time_floor(trace, cost, relief, late_in)
        k = int(np.argmax(floor))
        found = FloorOver(k, int(floor[k]))
        if key is not None:
            derived[key] = found
    return found
