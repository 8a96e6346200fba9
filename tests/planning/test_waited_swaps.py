"""Swaps whose copies are waited for (:mod:`cupool.planning.budget.engine.waits`): where no
copy can land on time, the greedy waits for them, and its plans pass the independent
validator."""

from __future__ import annotations

import time
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_always_a_plan import _budget, any_traces

from cupool.check import validate_swap_plan
from cupool.planning.budget import BudgetParams
from cupool.planning.budget.auto import greedy_options, plan_greedy_with
from cupool.planning.budget.engine.greedy import run_greedy
from cupool.planning.budget.engine.waits import waited_us
from cupool.planning.shapes import recurrent_trace
from cupool.sim import cost_model, simulate

SLOW_COPIES = cost_model(55.0, latency_us=50.0)  # every copy costs more than an op
PARAMS = BudgetParams(refine_evaluations=0)


def test_the_greedy_waits_for_copies_where_none_can_land_on_time():
    """A recurrent program at 70% of its bound with copies of 50 µs: the greedy alone
    leaves an op over the budget; waiting for copies it plans, with the waits on its
    timeline, and the plan validates."""
    trace = recurrent_trace(4, layers=4, batch=16, inputs=256, hidden=256)
    budget = int(0.7 * trace.lower_bound_bytes())
    options = greedy_options(PARAMS, 0.0)
    alone = plan_greedy_with(trace, budget, SLOW_COPIES, PARAMS, time.perf_counter(), options)
    assert not alone.feasible
    assert "still needs" in alone.reason
    waited = plan_greedy_with(trace, budget, SLOW_COPIES, PARAMS, time.perf_counter(),
                              replace(options, wait_for_copies=True))
    assert waited.feasible, waited.reason
    assert waited.plan.stats["planned_wait_us"] > 0
    report = validate_swap_plan(waited.trace, waited.plan)
    assert report.valid, (report.rule, report.message)
    assert waited.plan.arena_bytes <= budget
    sim = simulate(waited.trace, waited.plan, SLOW_COPIES)
    assert sim.feasible and sim.stall_us > 0


def test_a_waited_run_brings_every_op_within_the_budget_and_counts_its_waits():
    trace = recurrent_trace(4, layers=4, batch=16, inputs=256, hidden=256)
    budget = int(0.7 * trace.lower_bound_bytes())
    options = greedy_options(PARAMS, 0.0)
    assert run_greedy(trace, budget, SLOW_COPIES, options).live.max() > budget
    state = run_greedy(trace, budget, SLOW_COPIES, replace(options, wait_for_copies=True))
    assert state.live.max() <= budget
    assert waited_us(state) > 0
    # the waits are on the planner's timeline: its iteration is longer by them
    assert state.end_us[-1] >= float(state.durations.sum()) + waited_us(state) - 1e-6


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trace=any_traces(), share=st.sampled_from([0.0, 0.05, 0.3, 0.7]),
       weight=st.sampled_from([0.0, 1.0]))
def test_waited_plans_pass_the_validator(trace, share, weight):
    budget = _budget(trace, share)
    result = plan_greedy_with(trace, budget, SLOW_COPIES, PARAMS, time.perf_counter(),
                              greedy_options(PARAMS, weight, wait_for_copies=True))
    if not result.feasible:
        return  # the greedy may still find none: auto's last resort plans there
    report = validate_swap_plan(result.trace, result.plan)
    assert report.valid, (report.rule, report.message)
    assert result.plan.arena_bytes <= budget
