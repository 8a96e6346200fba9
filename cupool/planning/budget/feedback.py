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
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np

from cupool.core.vocabulary import Residency, SwapIn
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


def refine_triggers(trace, plan, cost, sim=None, rounds: int = ROUNDS):
    """``(plan, report, moved)``: the fastest plan found (``plan`` itself when nothing
    helped), its simulation and how many triggers moved in total."""
    from cupool.planning.validator import validate_plan
    from cupool.sim.simulator import simulate

    if sim is None:
        sim = simulate(trace, plan, cost, validate=False)
    moved_total = 0
    for _round in range(rounds):
        candidate, moved = _move_late_triggers(trace, plan, sim)
        if not moved or not validate_plan(trace, candidate).valid:
            break
        report = simulate(trace, candidate, cost, validate=False)
        if not report.iteration_us < sim.iteration_us - 1e-9:
            break
        plan, sim, moved_total = candidate, report, moved_total + moved
    if moved_total:
        plan = replace(plan, stats={**plan.stats, "feedback_moved_triggers": moved_total})
    return plan, sim, moved_total


def _move_late_triggers(trace, plan, sim):
    dispatch = np.array([t[0] for t in sim.op_times], dtype=float)
    landed = defaultdict(list)  # buffer -> H2D copy end times, in enqueue order
    for b, direction, _nbytes, _enqueued, _start, end in sorted(sim.copies,
                                                                  key=lambda c: c[3]):
        if direction == H2D:
            landed[b].append(end)
    swap_ins = defaultdict(list)
    for action in plan.actions:
        if isinstance(action, SwapIn):
            swap_ins[action.buffer_id].append(action)
    residencies = list(plan.residencies)
    sizes = {b.id: b.size for b in trace.buffers}
    resident = np.zeros(trace.num_ops + 1, dtype=np.int64)
    for r in residencies:
        resident[r.start] += sizes[r.buffer_id]
        resident[r.end] -= sizes[r.buffer_id]
    resident = np.cumsum(resident[:-1])
    index = {(r.buffer_id, r.start): k for k, r in enumerate(residencies)}
    new_trigger = {}
    for b, actions in swap_ins.items():
        ends = landed.get(b, [])
        for action, end in zip(sorted(actions, key=lambda a: a.trigger_op), ends, strict=False):
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
