"""``capuchin``: Capuchin's policy (Peng et al., ASPLOS 2020) planned offline from the trace.

Candidates are buffers' idle gaps; they are taken in order of largest free time
``FT = swap_in_start − swap_out_end`` (ideal op times, idle link), and only while they
free bytes at an op still over the budget. Per gap the cheaper way wins: a swap whose
copies fit the link on time costs nothing, otherwise the gap is recomputed (the producer's
duration plus every dropped input recomputed with it: chains). Each swap-in's trigger is
the latest op whose copy still lands before the next use *behind the copies already
queued on the H2D engine* (FIFO), so the queue never makes an earlier decision late.

With ``order`` :data:`~.engine.greedy.LARGEST_SWAPS` (a variant ``auto`` also runs), the
swaps that land on time are taken largest buffer first before that order: a copy pays a
fixed latency, so many small activations taken first by free time can fill the link
before the large ones that would relieve the same ops, which are then recomputed.

Then Capuchin's feedback (:mod:`.feedback`): the plan is simulated, and every swap-in
that still arrived late gets its trigger moved earlier by enough ops to cover the measured
wait (bounded by the swap-out point, the budget and the offsets); the moved plan is
re-validated and kept only when it simulates faster.
"""

from __future__ import annotations

from dataclasses import replace

from cupool.planning.budget.engine.greedy import (
    LARGEST_SWAPS,
    GreedyOptions,
    fullest_op,
    out_of_reach,
    run_greedy,
)
from cupool.planning.budget.engine.placement import Decision, place_schedule
from cupool.planning.budget.feedback import refine_triggers
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.result import BudgetResult

ORDERS = ("free-time", LARGEST_SWAPS)
"""The orders :func:`plan_capuchin` takes gaps in (module docstring)."""


def plan_capuchin(trace, budget_bytes, cost, params: BudgetParams,
                  started: float, order: str = "free-time") -> BudgetResult:
    if order not in ORDERS:
        raise ValueError(f"order {order!r}: expected one of {ORDERS}")
    options = GreedyOptions(order=order, swap_weight=0.0, max_chain=params.max_chain)

    def decide(internal):
        unreachable = out_of_reach(trace, internal, cost, options, "capuchin")
        if unreachable is not None:  # known without running the greedy
            return Decision(None, reason=unreachable)
        state = run_greedy(trace, internal, cost, options)
        fullest = fullest_op(state)
        if fullest.resident_bytes > internal:
            return Decision(None, reason=f"capuchin: op {fullest.op} still needs "
                                         f"{fullest.resident_bytes} bytes resident after "
                                         f"every candidate (budget {internal})")
        return Decision(state.schedule, {"planned_recompute_us": state.recompute_us})

    result = place_schedule(trace, budget_bytes, decide, "capuchin", params.placement, started)
    if not result.feasible:
        return result
    return replace(result, plan=refine_triggers(trace, result.plan, cost).plan)
