"""Swap-ins re-placed where their bytes free up first.

The offsets of a budget plan are chosen op by op: a residency that begins at op ``t``
fits wherever no other residency holds the bytes during its ops. Which of several freed
ranges it takes does not matter to the arena, but it does to the copies: bytes a copy out
is still reading are only reusable once that copy has landed, so a copy in placed over
them waits for it. When several copies out free ranges one after the other (the engine
is FIFO), the copy in due first should take the range that frees first::

    ops:            1700 | 1701  1702  1703        (short ops; copies take longer)
    range A  m1 ====)  copy out lands at 0.7 ms
    range B  m2 ====)  copy out lands at 1.4 ms
    as planned:  A <- x (due 1703), B <- y (due 1701) then z (due 1702): y waits 1.4 ms
    re-placed:   A <- y then x (triggered at 1702), B <- z: y waits 0.7 ms

:func:`reslot_late` takes each swap-in whose copy landed after its due op was dispatched
(``L``, due at op ``d``) together with the other swap-ins holding bytes at ``d`` before
their first use (trigger at or before ``d``, due at or after it): all of them are lifted
out and placed again, the earliest due first, each at the start and offset where its
copy can begin soonest, as the simulation says: no sooner than its trigger op is
dispatched, nor than the copies out (or the last ops) of the residencies that held those
bytes have finished. A swap-in may start later than planned (its trigger moves towards
its due op; a later trigger only shortens the residency), never earlier. Offsets tried
are the original one and the edges of the ranges freed just before (or by the swap-ins
placed first); the last residency of a buffer that stays on the device across the
boundary keeps its offset (it must share it with its first). The simulation's times are
corrected as the group is placed: a swap-in whose copy can begin sooner than it did
leaves its bytes that much sooner, and the ops after its due op are dispatched that much
sooner. The caller keeps the result only when it simulates faster and passes the
validator.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from cupool.core.vocabulary import Plan, Residency, SwapIn, SwapOut
from cupool.planning.budget.engine.residency import in_execution_order
from cupool.sim.cost import D2H

RECENT_OPS = 8
"""Ranges freed at most this many ops before a swap-in's trigger are offered to it (older
ones were free long before: their bytes give no earlier start than its own)."""


class Reslotted(NamedTuple):
    """A plan with some swap-ins re-placed, and how many moved (offset or trigger)."""

    plan: Plan
    moved: int


class Spans:
    """Residencies as arrays: ops ``[start, end)`` and bytes ``[low, high)`` (``sizes``:
    bytes by buffer id). A moved residency is edited in place."""

    def __init__(self, residencies, sizes) -> None:
        self.start = np.array([r.start for r in residencies], dtype=np.int64)
        self.end = np.array([r.end for r in residencies], dtype=np.int64)
        self.low = np.array([r.offset for r in residencies], dtype=np.int64)
        self.high = self.low + np.array([sizes[r.buffer_id] for r in residencies],
                                        dtype=np.int64)

    def free(self, offset: int, size: int, op: int) -> bool:
        """Whether no residency holds any of ``[offset, offset + size)`` during ``op``."""
        return not ((self.start <= op) & (op < self.end) & (self.low < offset + size)
                    & (offset < self.high)).any()


class _Arena(Spans):
    """:class:`Spans`, with when each residency's bytes are free again (µs) and which are
    lifted out (``active`` False)."""

    def __init__(self, residencies, sizes, release) -> None:
        super().__init__(residencies, sizes)
        self.release = np.asarray(release, dtype=np.float64)
        self.active = np.ones(len(residencies), dtype=bool)

    def view(self, trigger: int, due: int, end: int, since_us: float) -> _View:
        """What placing a residency that starts between ops ``trigger`` and ``due`` and
        ends at ``end`` depends on (:class:`_View`)."""
        near = np.flatnonzero(self.active & (self.start < end) & (self.end >= trigger
                                                                    - RECENT_OPS))
        pending = np.flatnonzero(self.active & (self.end <= due) & (self.release > since_us))
        return _View(self, near, pending)


class _View:
    """The residencies that may be in the way of a swap-in (``near``: they hold bytes
    during its ops, or were freed just before its trigger) and those whose bytes were
    not free yet when its trigger was dispatched (``pending``)."""

    def __init__(self, arena: _Arena, near: np.ndarray, pending: np.ndarray) -> None:
        self.start, self.end = arena.start[near], arena.end[near]
        self.low, self.high = arena.low[near], arena.high[near]
        self.p_end, self.p_low = arena.end[pending], arena.low[pending]
        self.p_high, self.p_release = arena.high[pending], arena.release[pending]

    def fitting(self, offsets: np.ndarray, size: int, start: int, end: int) -> np.ndarray:
        """Which ``offsets`` leave ``size`` bytes free during ops ``[start, end)``."""
        during = (self.start < end) & (start < self.end)
        low, high = self.low[during], self.high[during]
        hit = (low[None, :] < offsets[:, None] + size) & (offsets[:, None] < high[None, :])
        return ~hit.any(axis=1)

    def free_at(self, offsets: np.ndarray, size: int, start: int) -> np.ndarray:
        """When the bytes ``[offset, offset + size)`` of each of ``offsets`` are free of
        every residency that ended by op ``start`` (0 when none was still pending)."""
        ended = self.p_end <= start
        low, high, release = self.p_low[ended], self.p_high[ended], self.p_release[ended]
        held = (low[None, :] < offsets[:, None] + size) & (offsets[:, None] < high[None, :])
        return np.where(held, release[None, :], 0.0).max(axis=1, initial=0.0)

    def freed(self, low_op: int, start: int) -> np.ndarray:
        """Which ``near`` residencies ended during ops ``[low_op, start]``."""
        return (self.end >= low_op) & (self.end <= start)


def _releases(plan: Plan, report, sizes) -> list[float]:
    """When each residency's bytes are free again in ``report`` (µs): the end of the copy
    out that leaves it (a buffer's D2H copies, in the order the engine served them, belong
    to its copying swap-outs in op order), else the end of its last op."""
    op_end = [times[2] for times in report.op_times]
    copies = defaultdict(list)
    for buffer_id, direction, _nbytes, _enqueued, _start, end in report.copies:
        if direction == D2H:
            copies[buffer_id].append(end)
    outs = defaultdict(list)
    for a in plan.actions:
        if isinstance(a, SwapOut) and not a.drop:
            outs[a.buffer_id].append(a.after_op)
    copied = {b: list(zip(sorted(after_ops), copies[b], strict=True))
              for b, after_ops in outs.items() if len(copies[b]) == len(after_ops)}
    release = []
    for r in plan.residencies:
        free = op_end[r.end - 1] if r.end >= 1 else 0.0
        for op, end in copied.get(r.buffer_id, ()):
            if r.start <= op < r.end:
                free = max(free, end)
        release.append(free)
    return release


def _place(arena: _Arena, r: Residency, size: int, swap_in: SwapIn, dispatch,
           budget: int, keep_offset: bool, sooner: list) -> tuple[int, int, float] | None:
    """The start and offset where the copy of ``swap_in`` (entering ``r``) can begin
    soonest (ties: its own start, then its own offset, then the lowest), and when, or
    ``None`` when nothing fits; with ``keep_offset`` only its start may change.
    ``sooner``: ``(due op, µs)`` of the swap-ins re-placed before it, each of whose
    copies can begin that much sooner: the ops after its due op are dispatched sooner."""
    trigger, due = swap_in.trigger_op, swap_in.due_op

    def dispatched(op: int) -> float:
        gain = max((us for d, us in sooner if d < op), default=0.0)
        return max(dispatch[trigger], dispatch[op] - gain)

    view = arena.view(trigger, due, r.end, dispatch[trigger])
    starts = sorted({trigger, *view.end[(view.end > trigger) & (view.end <= due)].tolist()})
    best_key, best = None, None
    for start in starts:
        if best_key is not None and dispatched(start) > best_key[0]:
            break  # dispatched later than the best can begin
        offsets = {r.offset}
        if not keep_offset:
            freed = view.freed(trigger - RECENT_OPS, start)
            offsets |= set(view.low[freed].tolist()) | set((view.high[freed] - size).tolist())
        candidates = np.array(sorted(o for o in offsets if o >= 0 and o + size <= budget),
                              dtype=np.int64)
        if not len(candidates):
            continue
        ready = np.maximum(dispatched(start), view.free_at(candidates, size, start))
        fits = view.fitting(candidates, size, start, r.end)
        for offset, at in zip(candidates[fits].tolist(), ready[fits].tolist(), strict=True):
            key = (at, start != trigger, offset != r.offset, start, offset)
            if best_key is None or key < best_key:
                best_key, best = key, (start, offset, at)
    return best


def reslot_late(trace, plan: Plan, report, copies_in: dict) -> Reslotted:
    """``plan`` with its late swap-ins and the swap-ins holding bytes at their due ops
    re-placed (module docstring). ``report`` is ``plan``'s simulation and ``copies_in``
    maps each swap-in's ``(buffer, trigger_op)`` to its H2D copy there (``(start_us,
    end_us)``); a swap-in is late when its copy ends after its due op was dispatched."""
    dispatch = [times[0] for times in report.op_times]
    swap_ins = [a for a in plan.actions if isinstance(a, SwapIn)]
    late = {(a.buffer_id, a.trigger_op) for a in swap_ins
            if (a.buffer_id, a.trigger_op) in copies_in
            and copies_in[(a.buffer_id, a.trigger_op)][1] > dispatch[a.due_op] + 1e-9}
    if not late:
        return Reslotted(plan, 0)
    sizes = {b.id: b.size for b in trace.buffers}
    residencies = list(plan.residencies)
    index = {(r.buffer_id, r.start): k for k, r in enumerate(residencies)}
    arena = _Arena(residencies, sizes, _releases(plan, report, sizes))
    planned_release = arena.release.copy()
    # a buffer on the device across the boundary keeps one offset at both ends
    entered_at_0 = {a.buffer_id for a in swap_ins if a.trigger_op == 0}
    n = trace.num_ops
    across = {r.buffer_id for r in residencies if r.start == 0} - entered_at_0
    trigger_of = {}  # (buffer, trigger as planned) -> the new trigger
    done = set()
    late_dues = sorted({a.due_op for a in swap_ins if (a.buffer_id, a.trigger_op) in late})
    for due in late_dues:
        group = sorted((a for a in swap_ins
                        if a.trigger_op <= due <= a.due_op and (a.buffer_id, a.trigger_op)
                        in index and index[(a.buffer_id, a.trigger_op)] not in done),
                       key=lambda a: (a.due_op, -sizes[a.buffer_id], a.buffer_id))
        if not any((a.buffer_id, a.trigger_op) in late and a.due_op == due for a in group):
            continue
        ks = [index[(a.buffer_id, a.trigger_op)] for a in group]
        arena.active[ks] = False
        sooner = []
        for a, k in zip(group, ks, strict=True):
            r = residencies[k]
            placed = _place(arena, r, sizes[a.buffer_id], a, dispatch, plan.capacity_bytes,
                            keep_offset=r.end == n and r.buffer_id in across, sooner=sooner)
            if placed is None:  # its own place is taken by one placed before it: give up
                for other in ks:
                    r = residencies[other]
                    arena.start[other], arena.low[other] = r.start, r.offset
                    arena.high[other] = r.offset + sizes[r.buffer_id]
                arena.release[ks] = planned_release[ks]
                arena.active[ks] = True
                break
            start, offset, ready = placed
            arena.start[k], arena.low[k] = start, offset
            arena.high[k] = offset + sizes[a.buffer_id]
            arena.active[k] = True
            copy = copies_in.get((a.buffer_id, a.trigger_op))
            if copy is not None and (start, offset) != (r.start, r.offset):
                # re-placed, its copy in may begin sooner: it leaves sooner, and the
                # ops after its due op are dispatched sooner
                gain = max(0.0, copy[0] - ready)
                arena.release[k] -= gain
                sooner.append((a.due_op, gain))
        else:
            done.update(ks)
    moved = 0
    new_residencies = []
    for k, r in enumerate(residencies):
        start, offset = int(arena.start[k]), int(arena.low[k])
        if (start, offset) != (r.start, r.offset):
            moved += 1
            if start != r.start:
                trigger_of[(r.buffer_id, r.start)] = start
            r = Residency(r.buffer_id, start, r.end, offset)
        new_residencies.append(r)
    if not moved:
        return Reslotted(plan, 0)
    actions = [replace(a, trigger_op=trigger_of[(a.buffer_id, a.trigger_op)])
               if isinstance(a, SwapIn) and (a.buffer_id, a.trigger_op) in trigger_of else a
               for a in plan.actions]
    return Reslotted(replace(plan, residencies=tuple(new_residencies),
                             actions=tuple(in_execution_order(actions))), moved)
