"""Capuchin's feedback (DESIGN.md idea 3), offline: simulate a plan, and where a swap-in
landed after its due op was dispatched (the op waited ``w`` µs), move its trigger earlier
by enough ops to cover ``w`` at the simulated op times::

    op:        10    11    12    13          due 13 waited w
    before:                [trigger 12 ─────►] late
    after:     [trigger 10 ───────────────►]     ops 10..11 take >= w

The new trigger never goes before the end of the buffer's previous residency (the bytes
must have left first) and only as far as the moved residency keeps the budget at every
op and its offset range free of every other residency it would now overlap in time; the
plan is checked by the independent validator and kept only when it simulates faster.

The H2D engine is FIFO, so a swap-in can also be late behind copies with time to spare:
those are then triggered one op after it (*postponed*, which only shortens their
residencies), kept on the same terms. The helpers that pair a plan's swap-ins with a
simulation's copies (:func:`predicted_waits`, :func:`queued_ahead`) also serve the
runtime's feedback (:mod:`cupool.runtime.executor`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np

from cupool.check import validate_plan
from cupool.core.vocabulary import Plan, Residency, SwapIn
from cupool.sim.cost import H2D

ROUNDS = 3
"""Simulate → move → re-validate rounds."""


def move_swap_in(plan, action: SwapIn, trigger: int):
    """``plan`` with the swap-in ``action`` triggered at ``trigger`` instead: the residency
    it enters starts there too (nothing else is checked: validate the result)."""
    residencies = tuple(replace(r, start=trigger)
                        if r.buffer_id == action.buffer_id and r.start == action.trigger_op
                        else r for r in plan.residencies)
    actions = tuple(replace(a, trigger_op=trigger) if a == action else a for a in plan.actions)
    return replace(plan, residencies=residencies, actions=actions)


def delay_swap_ins(plan):
    """``plan`` mis-timed on purpose: every swap-in triggered only at its due op (the data
    is asked for when it is needed), to exercise the feedback."""
    for action in [a for a in plan.actions if isinstance(a, SwapIn) and a.due_op > a.trigger_op]:
        plan = move_swap_in(plan, action, action.due_op)
    return plan


def _h2d_copies(report, plan: Plan):
    """``[(swap-in, (buffer, direction, nbytes, enqueued, start, end))]``: each swap-in of
    ``plan`` with its H2D copy in ``report`` (a :class:`~cupool.sim.simulator.SimReport` of
    ``plan``). A buffer's H2D copies, in the order the engine served them, belong to its
    swap-ins in trigger order (one engine is FIFO, and a buffer's swap-ins are ordered by
    its residencies)."""
    copies = defaultdict(list)
    for copy in report.copies:
        if copy[1] == H2D:
            copies[copy[0]].append(copy)
    seen = defaultdict(int)
    pairs = []
    for action in sorted((a for a in plan.actions if isinstance(a, SwapIn)),
                         key=lambda a: a.trigger_op):
        b = action.buffer_id
        pairs.append((action, copies[b][seen[b]]))
        seen[b] += 1
    return pairs


def _held_engine(pairs, copy):
    """The ``(swap-in, copy)`` of ``pairs`` whose copies held the FIFO H2D engine while
    ``copy`` waited in its queue: started before it, still running when it was enqueued."""
    return [(other, ahead) for other, ahead in pairs
            if ahead[4] < copy[4] and ahead[5] > copy[3]]


def predicted_waits(report, plan: Plan, guard_us: float = 0.0) -> dict:
    """``{buffer: µs}`` that each swap-in of ``plan`` made its due op wait in ``report``
    (a :class:`~cupool.sim.simulator.SimReport` of ``plan``): its H2D copy's end minus
    the due op's dispatch, plus ``guard_us``, where positive (the largest, for a buffer
    swapped in twice)."""
    waits = {}
    for action, copy in _h2d_copies(report, plan):
        wait = copy[5] - report.op_times[action.due_op][0] + guard_us
        if wait > 0:
            b = action.buffer_id
            waits[b] = max(waits.get(b, 0.0), wait)
    return waits


def queued_ahead(report, plan: Plan, late: dict, guard_us: float = 0.0) -> dict:
    """``{buffer: µs}``: for each buffer of ``late`` (``{buffer: wait µs}``) whose copy lands
    in ``report`` less than ``guard_us`` before its due op, the swap-ins whose H2D copies
    held the engine while its copy waited in the queue (started before it and ended after
    it was enqueued), each with that wait to cover (the largest, for a copy ahead of
    several)."""
    pairs = _h2d_copies(report, plan)
    blockers = {}
    for action, copy in pairs:
        b = action.buffer_id
        if b not in late or report.op_times[action.due_op][0] - copy[5] >= guard_us:
            continue
        for other, _ahead in _held_engine(pairs, copy):
            if other.buffer_id != b:
                blockers[other.buffer_id] = max(blockers.get(other.buffer_id, 0.0), late[b])
    return blockers


def refine_triggers(trace, plan, cost, sim=None, rounds: int = ROUNDS):
    """``(plan, report, moved)``: the fastest plan found (``plan`` itself when nothing
    helped), its simulation and how many triggers moved in total. Each round tries the
    late swap-ins' triggers earlier, then the copies queued ahead of late ones later
    (:func:`_postpone_blockers`); a candidate is kept when it passes the validator and
    simulates faster."""
    from cupool.sim.simulator import simulate

    if sim is None:
        sim = simulate(trace, plan, cost, validate=False)
    moved_total = 0
    for _round in range(rounds):
        improved = False
        for mover in (_move_late_triggers, _postpone_blockers):
            candidate, moved = mover(trace, plan, sim)
            if not moved or not validate_plan(trace, candidate).valid:
                continue
            report = simulate(trace, candidate, cost, validate=False)
            if report.iteration_us < sim.iteration_us - 1e-9:
                plan, sim, moved_total = candidate, report, moved_total + moved
                improved = True
        if not improved:
            break
    if moved_total:
        plan = replace(plan, stats={**plan.stats, "feedback_moved_triggers": moved_total})
    return plan, sim, moved_total


def _postpone_blockers(trace, plan, sim):
    """``(plan, moved)``: the swap-ins whose copies held the FIFO H2D engine while a late
    one waited behind them, and that had more slack before their own due op than the late
    copy takes, triggered one op after the late one instead (queued behind it). A later
    trigger only shortens a residency, so budget and addresses still hold; the simulator
    judges the rest."""
    pairs = _h2d_copies(sim, plan)
    dispatch = [times[0] for times in sim.op_times]
    new_trigger = {}
    for action, copy in sorted(pairs, key=lambda p: p[1][4]):
        if copy[5] <= dispatch[action.due_op] + 1e-9 or action in new_trigger:
            continue
        length = copy[5] - copy[4]
        target = action.trigger_op + 1
        for other, ahead in _held_engine(pairs, copy):
            if (other is not action and other not in new_trigger
                    and other.trigger_op < target <= other.due_op
                    and dispatch[other.due_op] - ahead[5] > length):
                new_trigger[other] = target
    if not new_trigger:
        return plan, 0
    for other, target in new_trigger.items():
        plan = move_swap_in(plan, other, target)
    return replace(plan, actions=tuple(_in_execution_order(list(plan.actions)))), \
        len(new_trigger)


def _move_late_triggers(trace, plan, sim):
    dispatch = np.array([t[0] for t in sim.op_times], dtype=float)
    landed = defaultdict(list)  # buffer -> (swap-in, its H2D copy's end), in trigger order
    for action, copy in _h2d_copies(sim, plan):
        landed[action.buffer_id].append((action, copy[5]))
    # buffers in the order their first swap-in appears in the plan
    swap_ins = dict.fromkeys(a.buffer_id for a in plan.actions if isinstance(a, SwapIn))
    residencies = list(plan.residencies)
    sizes = {b.id: b.size for b in trace.buffers}
    resident = np.zeros(trace.num_ops + 1, dtype=np.int64)
    for r in residencies:
        resident[r.start] += sizes[r.buffer_id]
        resident[r.end] -= sizes[r.buffer_id]
    resident = np.cumsum(resident[:-1])
    index = {(r.buffer_id, r.start): k for k, r in enumerate(residencies)}
    new_trigger = {}
    for b in swap_ins:
        for action, end in landed[b]:
            wait = end - dispatch[action.due_op]
            if wait <= 1e-9:
                continue
            k = index[(b, action.trigger_op)]
            r = residencies[k]
            floor = max((q.end for q in residencies
                         if q.buffer_id == b and q.end <= r.start), default=r.start)
            target = action.trigger_op
            while (target > floor and dispatch[action.trigger_op] - dispatch[target] < wait
                   and _free(residencies, sizes, r, target - 1, resident, plan.capacity_bytes)):
                target -= 1
                resident[target] += sizes[b]
            if target < action.trigger_op:
                residencies[k] = Residency(b, target, r.end, r.offset)
                new_trigger[(b, action.trigger_op)] = target
    if not new_trigger:
        return plan, 0
    actions = []
    for action in plan.actions:
        key = (action.buffer_id, getattr(action, "trigger_op", None))
        if isinstance(action, SwapIn) and key in new_trigger:
            action = replace(action, trigger_op=new_trigger[key])  # keeps its level
        actions.append(action)
    actions = _in_execution_order(actions)
    return replace(plan, residencies=tuple(residencies), actions=tuple(actions)), \
        len(new_trigger)


def _free(residencies, sizes, r, op: int, resident, budget: int) -> bool:
    """Can residency ``r`` also hold its bytes during ``op``?"""
    size = sizes[r.buffer_id]
    if resident[op] + size > budget:
        return False
    low, high = r.offset, r.offset + size
    for q in residencies:
        if q.start <= op < q.end and q.offset < high and low < q.offset + sizes[q.buffer_id]:
            return False
    return True


def _in_execution_order(actions):
    """Swap-outs after op ``t - 1``, then swap-ins triggered at ``t``, then recomputes before
    ``t`` (their relative order kept: chains rely on it)."""
    def key(item):
        position, action = item
        if isinstance(action, SwapIn):
            return (action.trigger_op, 1, position)
        if hasattr(action, "after_op"):
            return (action.after_op + 1, 0, position)
        return (action.before_op, 2, position)

    return [a for _p, a in sorted(enumerate(actions), key=key)]
