"""The windows part of the overhead lower bound (:mod:`cupool.sim.windows`): a hand case
where it is tight, and soundness against every plan ``auto`` and each of its members make
on generated traces (Hypothesis), the simulator as the judge."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cupool.check import validate_plan
from cupool.core.vocabulary import (
    PERSISTENT,
    Buffer,
    RecomputeAction,
    Residency,
    SwapIn,
    SwapOut,
)
from cupool.planning.budget import BudgetParams, plan_with_budget
from cupool.planning.budget.auto import batch
from cupool.planning.budget.recipes import with_recompute_recipes
from cupool.sim import cost_model, overhead_lower_bound, simulate
from cupool.sim.bound_inputs import BufferArrays
from cupool.sim.windows import windows_bound
from tests.planning.test_always_a_plan import COSTS, _budget, any_traces
from tests.swap_cases import swap_plan, trace_of


def _windows_stall_us(trace, budget, cost):
    """The windows part alone: its stall (µs) and its windows."""
    arrays = BufferArrays(trace, cost)
    excess = arrays.pending_bytes() - budget
    return windows_bound(trace, arrays, cost.op_times(trace), excess, cost)


def test_two_windows_of_a_short_step_add_up_and_are_tight():
    """op:   0     1     2     3     4     (10 us each: ideal 50 us), 1000 B per 20 us copy
    W: a read-only weight of 1000 B read at ops 0, 2 and 4; P1, P2: 1000-B temporaries
    made and used by ops 1 and 3; budget 1000 B: W is off the device at ops 1 and 3.
    Each op alone may hide W's copy in behind the ops after it; but W leaves at no cost (a
    drop) and must come back between op 1 and op 2 (20 us of link, no op between) and
    between op 3 and op 4 (20 us again): T >= 90 us, and the plan below runs that."""
    link = cost_model(0.05, latency_us=0.0)
    trace = trace_of([10.0] * 5, Buffer(0, 1000, 0, 5, (0, 2, 4), PERSISTENT, writes=()),
                     Buffer(1, 1000, 1, 2, (1,)), Buffer(2, 1000, 3, 4, (3,)))
    windows = _windows_stall_us(trace, 1000, link)
    assert windows.stall_us == pytest.approx(40.0)
    assert [(w.first_op, w.last_op, w.direction) for w in windows.windows] == [
        (1, 2, "in"), (3, 4, "in")]
    bound = overhead_lower_bound(trace, 1000, link)
    assert bound.details["bound_us"] == pytest.approx(90.0)
    assert bound.details["method"] == "windows"
    streamed = swap_plan(trace, [Residency(0, 0, 1, 0), Residency(0, 2, 3, 0),
                                 Residency(0, 4, 5, 0), Residency(1, 1, 2, 0),
                                 Residency(2, 3, 4, 0)],
                         [SwapOut(0, 0, drop=True), SwapIn(0, 2, 2), SwapOut(0, 2, drop=True),
                          SwapIn(0, 4, 4)], budget=1000)
    report = validate_plan(trace, streamed)
    assert report.valid, report.message
    simulated = simulate(trace, streamed, link)
    assert simulated.iteration_us == pytest.approx(90.0)
    assert bound.overhead == pytest.approx(simulated.overhead)


def test_a_window_counts_the_copy_out_after_a_write_and_before_the_peak():
    """op:   0 (writes T)   1 (peak: P)   2 (reads T)     (10 us each), 1000 B per 20 us
    T is written at op 0 and off the device at op 1: its copy out runs after op 0 and
    before op 1 (20 us, no op between), its copy in after op 1 and before op 2 (20 us)."""
    link = cost_model(0.05, latency_us=0.0)
    trace = trace_of([10.0] * 3, Buffer(0, 1000, 0, 3, (0, 2)), Buffer(1, 1000, 1, 2, (1,)))
    windows = _windows_stall_us(trace, 1000, link)
    assert windows.stall_us == pytest.approx(40.0)
    assert [(w.first_op, w.last_op, w.direction) for w in windows.windows] == [
        (0, 1, "out"), (1, 2, "in")]


def test_a_recipe_stands_in_for_the_copy_in_and_spares_the_copy_out():
    """The same step with T recomputable (its producer, op 0, takes 10 us): T needs no
    copy out, and comes back for op 2 by 20 us of copy or 10 us of recompute within the
    window. Counted by both at once, ``s`` us of copy and ``s`` us of recompute cover
    1000 B when s / 0.02 + s / 0.01 >= 1000: s = 6.67 us (a plan recomputes for 10)."""
    from cupool.core.vocabulary import Recompute

    link = cost_model(0.05, latency_us=0.0)
    trace = trace_of([10.0] * 3, Buffer(0, 1000, 0, 3, (0, 2), recompute=Recompute(0, ())),
                     Buffer(1, 1000, 1, 2, (1,)))
    windows = _windows_stall_us(trace, 1000, link)
    assert windows.stall_us == pytest.approx(20.0 / 3.0)
    assert [(w.first_op, w.last_op, w.direction) for w in windows.windows] == [(1, 2, "in")]
    recomputed = swap_plan(trace, [Residency(0, 0, 1, 0), Residency(0, 2, 3, 0),
                                   Residency(1, 1, 2, 0)], [RecomputeAction(0, 2)],
                           budget=1000)
    report = validate_plan(trace, recomputed)
    assert report.valid, report.message
    simulated = simulate(trace, recomputed, link)
    assert simulated.iteration_us == pytest.approx(40.0)
    assert overhead_lower_bound(trace, 1000, link).overhead <= simulated.overhead


QUICK = BudgetParams(refine_evaluations=10)


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trace=any_traces(), share=st.sampled_from([0.0, 0.3, 0.7]),
       link=st.sampled_from(sorted(COSTS)))
def test_no_plan_of_auto_or_of_any_member_runs_below_the_bound(trace, share, link):
    cost = COSTS[link]
    budget = _budget(trace, share)
    result = plan_with_budget(trace, budget, "auto", cost, QUICK)
    assert result.feasible, result.reason
    plans = [result]
    derived = with_recompute_recipes(trace)
    plans += [member.run(time.perf_counter())
              for member in batch(derived, budget, cost, QUICK)]
    for planned in plans:
        if not planned.feasible:
            continue
        assert validate_plan(planned.trace, planned.plan).valid
        bound = overhead_lower_bound(planned.trace, budget, cost)
        simulated = simulate(planned.trace, planned.plan, cost, validate=False)
        assert bound.overhead <= simulated.overhead + 1e-9, (bound, simulated.summary())
