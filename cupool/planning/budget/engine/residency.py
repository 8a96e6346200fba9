"""From a per-buffer schedule (which idle gaps each buffer spends off the device, and how)
to a plan: residencies, actions and offsets.

Every budget planner decides *which bytes are resident when*; this module turns that
decision into a :class:`~cupool.core.Plan` the same way for all of them:

1. each buffer's uses are split by its :class:`Gap` s into resident runs; a temporary
   buffer is resident from its first use to its last (``[uses[0], uses[-1] + 1)``: nothing
   needs its bytes outside), a persistent one from op 0 to the end unless its *wrap gap*
   (last use → first use of the next iteration) takes it off the device::

       op:        0   1   2   3   4   5   6   7   8
       uses:          u           u       u
       swap gap:      [===)               [=======)   residency [1, 3) then [6, 8)
                        SwapOut after 1   SwapIn trigger 6, due 6... (resident_from = 6)

   a wrap gap whose swap-in is triggered in the iteration's tail, after the last use
   (``resident_from >= resident_until``: a read-only weight prefetched for the next
   iteration) leaves the buffer resident across the boundary: ``[0, resident_until)``
   and ``[resident_from, num_ops)``, one offset, the swap-in due at the last op;

2. chain recomputes (an input of a recompute that was itself dropped) add a one-op
   residency ``[j, j + 1)`` at the op ``j`` the recompute happens before;
3. the residencies are a static offset-assignment problem (each residency a "buffer");
   :mod:`.placement` gives them offsets within the budget.

It also says what no plan can avoid: the bytes each op's own working set needs resident.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from cupool.core.liveness import live_bytes
from cupool.core.vocabulary import (
    PERSISTENT,
    Plan,
    RecomputeAction,
    Residency,
    SolveStatus,
    SwapIn,
    SwapOut,
    Trace,
)
from cupool.planning.budget.engine.drops import mark_drops
from cupool.planning.budget.engine.schedule import RECOMPUTE, SWAP, Schedule, trace_index


class ResidencyInterval(NamedTuple):
    """Buffer ``buffer_id`` is on the device during ops ``[start, end)`` (a residency
    before it has an offset)."""

    buffer_id: int
    start: int
    end: int


def residency_intervals(trace: Trace, schedule: Schedule) -> list[ResidencyInterval]:
    """Every residency the schedule implies, in buffer order."""
    out: list[ResidencyInterval] = []
    transients: dict[int, list[int]] = {}
    for chain in schedule.chains:
        transients.setdefault(chain.buffer_id, []).append(chain.op)
    base, taken = trace_index(trace).base, schedule.gaps
    for b in trace.buffers:
        start, end = base[b.id]
        if not taken.get(b.id) and b.id not in transients:  # resident over its base span
            if end > start:
                out.append(ResidencyInterval(b.id, start, end))
            continue
        gaps = sorted(taken[b.id], key=lambda g: g.prev_use) if b.id in taken else []
        wrap = [g for g in gaps if g.wraps]
        tail = None
        if wrap and wrap[0].head:
            # copied out in the iteration's head: home [0, until), back from ``from``
            # (before the first use) through the buffer's other gaps to its end
            out.append(ResidencyInterval(b.id, start, wrap[0].resident_until))
            start = wrap[0].resident_from
        elif wrap and wrap[0].resident_from >= wrap[0].resident_until:
            # back in the iteration's tail, for the next one: home [0, until), [from, n)
            tail = ResidencyInterval(b.id, wrap[0].resident_from, end)
            end = wrap[0].resident_until
        elif wrap:
            start, end = wrap[0].resident_from, wrap[0].resident_until
        cursor = start
        for g in gaps:
            if g.wraps:
                continue
            out.append(ResidencyInterval(b.id, cursor, g.resident_until))
            cursor = g.resident_from
        out.append(ResidencyInterval(b.id, cursor, end))
        if tail is not None:
            out.append(tail)
        for op in sorted(set(transients.get(b.id, ()))):
            out.append(ResidencyInterval(b.id, op, op + 1))
    return [r for r in out if r.end > r.start]


HEAD_OUT_OP = 0
"""The op after which a wrap gap taken in the iteration's head is copied out
(:attr:`~.schedule.Gap.head`)."""


def actions_of(trace: Trace, schedule: Schedule) -> tuple:
    """The schedule's actions in execution order: before op ``t`` come the swap-outs issued
    after op ``t - 1``, then swap-ins triggered at ``t``, earliest due first (one FIFO
    engine serves them in this order: the copy an earlier op waits for goes first), then
    recomputes due at ``t`` in producer-op order (an input's producer runs before its
    consumer's, so every recompute finds its inputs resident: chain links and gaps cut
    short at a pin alike)."""
    keyed = []
    for gaps in schedule.gaps.values():
        for g in gaps:
            if g.mode == SWAP and g.head:  # out after op 0, in the order they land
                keyed.append(((1, 0, g.resident_until, 0, g.buffer_id),
                              SwapOut(g.buffer_id, HEAD_OUT_OP)))
                keyed.append(((g.resident_from, 1, g.next_use, 0, g.buffer_id),
                              SwapIn(g.buffer_id, g.resident_from, g.next_use)))
            elif g.mode == SWAP:
                keyed.append(((g.prev_use + 1, 0, 0, 0, g.buffer_id),
                              SwapOut(g.buffer_id, g.prev_use)))
                due = g.next_use
                if g.wraps and g.resident_from >= g.resident_until:
                    due = trace.num_ops - 1  # a tail prefetch lands within the iteration
                keyed.append(((g.resident_from, 1, due, 0, g.buffer_id),
                              SwapIn(g.buffer_id, g.resident_from, due)))
            else:  # re-made where its residency resumes: its next use, or a batch's op
                keyed.append(((g.resident_from, 2, _producer(trace, g.buffer_id), 0,
                               g.buffer_id), RecomputeAction(g.buffer_id, g.resident_from)))
    for chain in schedule.chains:
        keyed.append(((chain.op, 2, _producer(trace, chain.buffer_id), -chain.depth,
                       chain.buffer_id), RecomputeAction(chain.buffer_id, chain.op)))
    keyed.sort(key=lambda item: item[0])
    return tuple(action for _key, action in keyed)


def in_execution_order(actions) -> list:
    """``actions`` (a plan's, edited) back in execution order: swap-outs after op ``t - 1``,
    then swap-ins triggered at ``t``, then recomputes before ``t`` (the relative order of
    each kind at an op kept: chains rely on it)."""
    def key(item):
        position, action = item
        if isinstance(action, SwapIn):
            return (action.trigger_op, 1, position)
        if hasattr(action, "after_op"):
            return (action.after_op + 1, 0, position)
        return (action.before_op, 2, position)

    return [a for _p, a in sorted(enumerate(actions), key=key)]


def _producer(trace: Trace, buffer_id: int) -> int:
    """The op a recompute of the buffer re-runs: inputs exist before it, so running the
    recomputes before one op in producer order finds every input already made."""
    return trace.buffer(buffer_id).recompute.op


def resident_bytes(trace: Trace, intervals: list[ResidencyInterval]) -> np.ndarray:
    """Bytes resident during each op."""
    if not intervals:
        return np.zeros(trace.num_ops, dtype=np.int64)
    sizes = [trace.buffer(r.buffer_id).size for r in intervals]
    return live_bytes([r.start for r in intervals], [r.end for r in intervals], sizes,
                      trace.num_ops)


def assemble(trace: Trace, schedule: Schedule, residencies: tuple[Residency, ...],
             arena_bytes: int, budget_bytes: int, policy: str, started: float,
             stats: dict) -> Plan:
    """The plan of a placed schedule (status ``feasible``); ``started`` is when planning
    began (``time.perf_counter()``)."""
    stats = dict(stats)
    stats.setdefault("swap_gaps", schedule.count(SWAP))
    stats.setdefault("recompute_gaps", schedule.count(RECOMPUTE))
    stats.setdefault("chain_recomputes", len(schedule.chains))
    actions = mark_drops(trace, residencies, actions_of(trace, schedule))
    return Plan(trace.name, trace.digest(), policy, SolveStatus.FEASIBLE, int(arena_bytes),
                trace.lower_bound_bytes(), (), time.perf_counter() - started, budget_bytes,
                stats, residencies, actions)


def failed_plan(trace: Trace, budget_bytes: int, policy: str, started: float, status: SolveStatus,
                stats: dict) -> Plan:
    """A plan without residencies: the policy found nothing within the budget."""
    return Plan(trace.name, trace.digest(), policy, status, 0, trace.lower_bound_bytes(), (),
                time.perf_counter() - started, budget_bytes, dict(stats))


def working_set_bytes(trace: Trace) -> np.ndarray:
    """Bytes each op must have resident in every plan: each buffer in its ``uses``, and a
    temporary without recorded uses at its first op (it is produced there)."""
    ws = np.zeros(trace.num_ops, dtype=np.int64)
    for b in trace.buffers:
        if not b.uses and b.kind != PERSISTENT:
            ws[b.start] += b.size
        for u in set(b.uses):
            ws[u] += b.size
    return ws


def check_working_sets(trace: Trace, budget_bytes: int) -> str | None:
    """``"infeasible: op k needs N bytes resident"`` for the largest op over the budget."""
    if trace.num_ops == 0:
        return None
    ws = working_set_bytes(trace)
    k = int(np.argmax(ws))
    if ws[k] > budget_bytes:
        return (f"infeasible: op {k} needs {int(ws[k])} bytes resident "
                f"(budget {budget_bytes} bytes)")
    return None
