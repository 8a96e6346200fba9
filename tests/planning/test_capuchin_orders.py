"""Capuchin's two orders on a hand case: free time first, and the on-time swaps of the
largest buffers first."""

from __future__ import annotations

import time

import pytest

from cupool.check import validate_swap_plan
from cupool.core.vocabulary import Buffer, Op, Recompute, RecomputeAction, SwapOut, Trace
from cupool.planning.budget.capuchin import plan_capuchin
from cupool.planning.budget.engine.greedy import LARGEST_SWAPS
from cupool.planning.budget.params import BudgetParams
from cupool.sim import cost_model, simulate

# 4 us per copy plus 0.5 us per 1000 bytes: B's copies take 9 us, a small one's 4.05 us
LINK = cost_model(2.0, latency_us=4.0)


def _trace() -> Trace:
    """op:  0    1    2    3    4    5     (10 us each), budget 11500 bytes
    B:  [=========================)  10000 B, uses 0 and 5, recomputable by op 0
    S:  [=========================)  five of 100 B, uses 0 and 5
    P:            [==)               2000 B at op 2: op 2 is 1000 bytes over the budget
    A copy out issued after op 0 relieves op 2 only if it lands by 20 us. By free time
    the small buffers go first; only two of their copies land by then (200 bytes), and
    B's copy out, queued behind them, lands at 27 us: B is recomputed (10 us). Largest
    first, B's own copy lands at 19 us and relieves op 2 alone: no overhead."""
    smalls = tuple(Buffer(1 + k, 100, 0, 6, (0, 5)) for k in range(5))
    return Trace("capuchin-orders", tuple(Op(f"op{i}", 10.0) for i in range(6)),
                 (Buffer(0, 10000, 0, 6, (0, 5), recompute=Recompute(0)), *smalls,
                  Buffer(6, 2000, 2, 3, (2,))))


@pytest.mark.parametrize(("order", "recomputed", "overhead"),
                         [("free-time", True, 10.0 / 60.0), (LARGEST_SWAPS, False, 0.0)])
def test_largest_swaps_first_swaps_the_buffer_free_time_order_recomputes(
        order, recomputed, overhead):
    trace = _trace()
    result = plan_capuchin(trace, 11500, LINK, BudgetParams(), time.perf_counter(), order)
    assert result.feasible, result.reason
    report = validate_swap_plan(trace, result.plan)
    assert report.valid, report.message
    actions = result.plan.actions
    assert any(isinstance(a, RecomputeAction) and a.buffer_id == 0 for a in actions) \
        == recomputed
    assert any(isinstance(a, SwapOut) and a.buffer_id == 0 for a in actions) != recomputed
    assert simulate(trace, result.plan, LINK).overhead == pytest.approx(overhead)


def test_an_unknown_order_is_named():
    with pytest.raises(ValueError, match="order 'biggest'"):
        plan_capuchin(_trace(), 11500, LINK, BudgetParams(), time.perf_counter(), "biggest")
