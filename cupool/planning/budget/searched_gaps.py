"""A local search over which idle gaps a greedy must take, for small traces only.

The greedy members choose gaps one at a time by cost per byte; they cannot see that a
copy out in an early, idle stretch of the link makes a persistent buffer *clean*, so that
its later gaps (where the excess is) leave the device by a drop, with nothing to copy
(:func:`~.engine.schedule.leaves_clean`). On a short training step whose weights are all
written by the update, that is the difference between a plan at the ideal time and one
that waits 20% of it::

    op:        0   ...   4  ...  12 13 14 ...  21 ... 26 (update writes w)
    uses of w:           u        u  u          u
    greedy:                          [drop? no: w is dirty -> copy out, waited for]
    searched:   [copy out ... copy in] [drop ......... copy in]   (w clean after op 12)

A *forced set* is a set of idle gaps (:class:`~.engine.schedule.IdleGap`). Decoding it
takes each forced gap in the order of its first op, the way the greedy would
(:func:`~.engine.greedy.evaluate`: a swap landing on time, else a late one, or a recompute
when cheaper; a gap with neither is left), then lets the greedy with copies waited for
(:mod:`.engine.waits`) bring what still exceeds the budget under it, and places the
schedule (:func:`~.engine.placement.place_schedule`: at the budget with its repairs,
else at smaller internal budgets). The search starts from every gap of a written
persistent buffer between two uses (most weights are then cleaned early) and moves to the
forced set one gap added or removed makes, the best of them, while the simulated
iteration gets faster (ties: the earlier gap), within ``BudgetParams.search_evaluations``
decodings. Each decoding costs a greedy run, a placement and a simulation, so ``auto`` runs
the member only on traces with at most ``BudgetParams.search_max_gaps`` idle gaps.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.planning.budget.engine.greedy import (
    GreedyOptions,
    apply_option,
    candidate_gaps,
    cost_pass,
    evaluate,
    hot_op_pass,
)
from cupool.planning.budget.engine.placement import Decision, PlacementParams, place_schedule
from cupool.planning.budget.engine.schedule import IdleGap
from cupool.planning.budget.engine.state import PlanState
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.result import BudgetResult

MEMBER = "greedy(gaps searched, copies waited for)"
"""The member's name in ``auto``'s ``candidates``."""
REPAIR_ROUNDS = 2
"""Rounds of the greedy's repair (the ops still over the budget served first) after the
forced gaps and the greedy's pass."""


def decode(trace: Trace, budget_bytes: int, cost, forced: tuple[IdleGap, ...],
           options: GreedyOptions) -> PlanState | None:
    """The greedy's state after the ``forced`` gaps (in the order of their first op) and
    the greedy with copies waited for (``options``); ``None`` when an op stays over
    ``budget_bytes``."""
    state = PlanState(trace, budget_bytes, cost, max_chain=options.max_chain)
    on_time = replace(options, wait_for_copies=False)
    for gap in sorted(forced, key=lambda g: (g.prev_use, g.buffer_id, g.next_use)):
        option = evaluate(state, gap, on_time)
        if option is not None:
            apply_option(state, gap, option)
            state.taken.add(gap)
    gaps = candidate_gaps(trace, True)
    if state.live.max() > budget_bytes:
        cost_pass(state, gaps, on_time)
    if state.live.max() > budget_bytes:
        cost_pass(state, gaps, options)
    for _round in range(REPAIR_ROUNDS):
        over = np.flatnonzero(state.live > budget_bytes)
        if not len(over):
            break
        for op in over[np.argsort(-state.live[over], kind="stable")]:
            hot_op_pass(state, int(op), gaps, options)
        cost_pass(state, gaps, options)
    return None if state.live.max() > budget_bytes else state


def searchable(trace: Trace, params: BudgetParams) -> bool:
    """Whether ``auto`` runs the member on ``trace``: few enough idle gaps, and a written
    persistent buffer idle between two uses to start from."""
    gaps = candidate_gaps(trace, True)
    return len(gaps) <= params.search_max_gaps and bool(_start(trace, gaps))


def _start(trace: Trace, gaps: list[IdleGap]) -> tuple[IdleGap, ...]:
    return tuple(g for g in gaps if not g.wraps
                 and trace.buffer(g.buffer_id).kind == PERSISTENT
                 and not trace.buffer(g.buffer_id).read_only)


def plan_searched_gaps(trace: Trace, budget_bytes: int, cost, params: BudgetParams,
                       started: float) -> BudgetResult:
    """The fastest plan the search over forced sets found (module docstring)."""
    from cupool.sim.simulator import simulate

    options = GreedyOptions(swap_weight=0.0, max_chain=params.max_chain,
                            wait_for_copies=True)
    gaps = candidate_gaps(trace, True)
    seen: dict[frozenset, tuple[float, BudgetResult]] = {}

    def placed(forced: tuple[IdleGap, ...]) -> tuple[float, BudgetResult]:
        key = frozenset(forced)
        if key not in seen:
            def decide(internal: int) -> Decision:
                state = decode(trace, internal, cost, forced, options)
                if state is None:
                    return Decision(None, reason=f"{MEMBER}: an op stays over {internal} "
                                                 f"bytes")
                return Decision(state.schedule, {"forced_gaps": len(forced)})

            for rounds in (1, params.placement_rounds):
                result = place_schedule(trace, budget_bytes, decide, "greedy",
                                        PlacementParams(params.offset_solver, rounds),
                                        time.perf_counter())
                if result.feasible:
                    break
            value = (simulate(result.trace, result.plan, cost, validate=False).iteration_us
                     if result.feasible else float("inf"))
            seen[key] = (value, result)
        return seen[key]

    current = _start(trace, gaps)
    best_value, best = placed(current)
    while len(seen) < params.search_evaluations:
        moves = []
        for gap in gaps:
            if len(seen) >= params.search_evaluations:
                break
            forced = (tuple(g for g in current if g != gap) if gap in current
                      else (*current, gap))
            moves.append((*placed(forced), forced))
        better = [move for move in moves if move[0] < best_value]
        if not better:
            break
        best_value, best, current = min(better, key=lambda move: move[0])
    if not best.feasible:
        return best
    stats = {**best.plan.stats, "searched_decodings": len(seen)}
    return replace(best, plan=replace(best.plan, stats=stats,
                                      solve_seconds=time.perf_counter() - started))


__all__ = ["MEMBER", "decode", "plan_searched_gaps", "searchable"]
