"""Copies out across the iteration boundary moved into the next iteration's head.

A persistent buffer that a plan takes off the device across the iteration boundary is
copied out after its last use of the step. When that use is one of the step's last ops
(gradients zeroed, weights updated), the copy runs after them with nothing to overlap,
and several such copies queue on the D2H engine past the last op: the step pays for
them. Kept on the device across the boundary instead, the buffer can be copied out
after op 0 of the next iteration, while the forward pass computes, and come back by the
same swap-in as before; it then holds its bytes over the tail and the head, where they
must be free (the two stays are one, at one offset)::

    op:          u   ...  n-1 | 0   1  ...  k       t        f      u: last use (written)
    before       ==] out~~~~~~|~~~                  [ in ====]      t: swap-in trigger
    after        =============|======] out~~~~      [ in ====]      f: first use
                 (last residency to n; home [0, k) at the same offset, k <= t)

:func:`copies_out_in_head` makes that change to a finished plan, one buffer at a time,
latest copy out first, at up to three offsets free over the tail and op 0 (the last
residency's, the lowest, and the one free in the head the longest: the longer the bytes
are held there, the less the next resident waits for the copy out), the fastest kept. A
change is kept only when the plan still passes the independent validator and simulates
faster, so a plan is never made slower. ``auto`` runs it last of all, on the plan it
keeps (after the schedule search of :mod:`.searched_schedule`, whose moves re-time a
wrap gap within its form but never move a copy out that ends the step into the head), on
traces of at most
:data:`MAX_BUFFERS` buffers.

On the 4-layer recurrent step of ``bench/always_plan.py`` (gradients zeroed by the last
four ops, every copy 50-100 µs) it takes 0.6-2 points of simulated overhead off ``auto``'s
plans at 70-30% of the lower bound, in 10-200 ms a plan.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Plan, Residency, SwapOut, Trace
from cupool.planning.budget.engine.residency import HEAD_OUT_OP, in_execution_order

MAX_BUFFERS = 2000
"""Traces with more buffers than this are left as they are: each change tried is
validated and simulated in full (tens of milliseconds on a 300-buffer trace)."""

MAX_TRIES = 16
"""Buffers tried per plan, latest copy out first (the copies at the end of the queue
lengthen the tail; the earlier ones often land before the last op)."""


class HeadCopies(NamedTuple):
    """A plan with some copies out moved into the head, its simulation, and how many."""

    plan: Plan
    simulation: object
    moved: int


class _Spans:
    """A plan's residencies as columns (buffer, start, end, offset, size) for the
    free-range questions of one candidate."""

    def __init__(self, trace: Trace, plan: Plan) -> None:
        rows = plan.residencies
        self.buffer = np.fromiter((r.buffer_id for r in rows), np.int64, len(rows))
        self.start = np.fromiter((r.start for r in rows), np.int64, len(rows))
        self.end = np.fromiter((r.end for r in rows), np.int64, len(rows))
        self.offset = np.fromiter((r.offset for r in rows), np.int64, len(rows))
        sizes = {b.id: b.size for b in trace.buffers}
        self.size = np.fromiter((sizes[r.buffer_id] for r in rows), np.int64, len(rows))

    def head_offsets(self, buffer_id: int, size: int, tail_from: int, capacity: int,
                     preferred: int, first_start: int) -> list[tuple[int, int]]:
        """``(offset, until)`` pairs: offsets whose ``size`` bytes below ``capacity`` no
        other residency holds during ``[tail_from, n)`` nor at op 0 -- ``preferred`` when
        it is one, the lowest, and the one free in the head the longest (at most three) --,
        each with ``until``, the first op at which another residency takes any of its
        bytes (at most ``first_start``)."""
        others = self.buffer != buffer_id
        taken = others & ((self.end > tail_from) | (self.start == 0))
        later = others & (self.start >= 1) & (self.start < first_start)
        lows, highs = self.offset[taken], self.offset[taken] + self.size[taken]
        offsets = _free_offsets(lows, highs, size, capacity)
        if preferred + size <= capacity and not np.any((lows < preferred + size)
                                                       & (preferred < highs)):
            offsets.insert(0, preferred)
        found = []
        for offset in offsets:
            blocking = later & (self.offset < offset + size) & (offset < self.offset + self.size)
            until = int(self.start[blocking].min()) if blocking.any() else first_start
            found.append((offset, until))
        if not found:
            return []
        longest = max(found, key=lambda pair: pair[1])  # ties: the first found
        lowest = min(found)
        return list(dict.fromkeys([found[0], lowest, longest]))


def _free_offsets(lows: np.ndarray, highs: np.ndarray, size: int, capacity: int) -> list[int]:
    """The lowest offset of each range below ``capacity`` that misses every
    ``[low, high)`` and holds ``size`` bytes, ascending."""
    out, cursor = [], 0
    for low, high in sorted(zip(lows.tolist(), highs.tolist(), strict=True)):
        if low - cursor >= size:
            out.append(cursor)
        cursor = max(cursor, high)
    if capacity - cursor >= size:
        out.append(cursor)
    return out


def copies_out_in_head(trace: Trace, plan: Plan, cost, simulation) -> HeadCopies:
    """``plan`` (for ``trace``, simulated as ``simulation`` under ``cost``) with the copies
    out across the boundary that end the step moved into the next iteration's head where
    that is faster (module docstring); the plan itself when none is, or when the trace has
    more than :data:`MAX_BUFFERS` buffers."""
    from cupool.check import validate_plan
    from cupool.sim.simulator import simulate

    unchanged = HeadCopies(plan, simulation, 0)
    if len(trace.buffers) > MAX_BUFFERS or not plan.residencies or not simulation.feasible:
        return unchanged
    persistent = {b.id for b in trace.buffers if b.kind == PERSISTENT}
    best, tried = unchanged, set()
    while True:  # again while a move was kept: the queue behind it is shorter now
        offloaded = _offloaded(best.plan, persistent)
        order = [b for b in _tail_copies(best.simulation) if b in offloaded and b not in tried]
        before = best.moved
        for buffer_id in order[:MAX_TRIES - len(tried)]:
            tried.add(buffer_id)
            base = best
            for changed in _in_head(trace, base.plan, buffer_id):
                if not validate_plan(trace, changed).valid:
                    continue
                run = simulate(trace, changed, cost, validate=False)
                if run.feasible and run.iteration_us < best.simulation.iteration_us:
                    best = HeadCopies(changed, run, base.moved + 1)
        if best.moved == before or len(tried) >= MAX_TRIES:
            return best


def _tail_copies(simulation) -> list[int]:
    """The buffers copied out, the one whose last copy out ends latest first."""
    ends: dict[int, float] = {}
    for buffer_id, direction, _nbytes, _enqueued, _start, end in simulation.copies:
        if direction == "d2h":
            ends[buffer_id] = max(end, ends.get(buffer_id, 0.0))
    return sorted(ends, key=lambda b: (-ends[b], b))


def _offloaded(plan: Plan, persistent: set[int]) -> set[int]:
    """The ``persistent`` buffers that begin the iteration on the host (no residency
    starts at op 0)."""
    at_zero = {r.buffer_id for r in plan.residencies if r.start == 0}
    return {r.buffer_id for r in plan.residencies
            if r.buffer_id in persistent and r.buffer_id not in at_zero}


def _in_head(trace: Trace, plan: Plan, buffer_id: int) -> list[Plan]:
    """``plan`` with ``buffer_id`` kept on the device across the boundary and copied out
    after op :data:`~.engine.residency.HEAD_OUT_OP` instead of after its last use, at each
    offset :meth:`_Spans.head_offsets` offers; none when it is not offloaded across the
    boundary by a copy."""
    stays = sorted((r for r in plan.residencies if r.buffer_id == buffer_id),
                   key=lambda r: r.start)
    if not stays or stays[0].start == 0:
        return []  # already on the device across the boundary
    first, last = stays[0], stays[-1]
    outs = [a for a in plan.actions if isinstance(a, SwapOut) and a.buffer_id == buffer_id
            and last.start <= a.after_op < last.end]
    if len(outs) != 1 or outs[0].drop:
        return []
    n, size = trace.num_ops, trace.buffer(buffer_id).size
    capacity = plan.capacity_bytes if plan.capacity_bytes is not None else plan.arena_bytes
    others = [r for r in plan.residencies if r.buffer_id != buffer_id]
    actions = [a for a in plan.actions if a is not outs[0]]
    actions = tuple(in_execution_order([*actions, SwapOut(buffer_id, HEAD_OUT_OP,
                                                          level=outs[0].level)]))
    out = []
    for offset, until in _Spans(trace, plan).head_offsets(buffer_id, size, last.start,
                                                          capacity, last.offset, first.start):
        residencies = [*others, Residency(buffer_id, 0, until, offset),
                       *(r if r is not last else Residency(buffer_id, last.start, n, offset)
                         for r in stays)]
        out.append(replace(plan, residencies=tuple(residencies), actions=actions,
                           arena_bytes=max(plan.arena_bytes, offset + size)))
    return out
