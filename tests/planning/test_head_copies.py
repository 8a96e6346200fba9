"""Copies out across the iteration boundary moved into the next iteration's head
(:mod:`cupool.planning.budget.head_copies`): gradients zeroed by the step's last ops stay
on the device across the boundary and leave after op 0, so their copies out no longer end
the step; a change is kept only when the plan validates and simulates faster."""

from __future__ import annotations

import pytest

from cupool.check import validate_plan
from cupool.core.vocabulary import PERSISTENT, SwapOut
from cupool.planning.budget import BudgetParams, plan_with_budget
from cupool.planning.budget.engine.residency import HEAD_OUT_OP
from cupool.planning.budget.head_copies import copies_out_in_head
from cupool.planning.shapes import recurrent_trace
from cupool.sim import cost_model, simulate

LATENCY_BOUND = cost_model(55.0, latency_us=100.0, pageable_latency_us=100.0)
"""Every copy costs about 100 µs, more than any op of the recurrent step."""


def small_recurrent(steps: int = 4, layers: int = 2):
    return recurrent_trace(steps, layers=layers, batch=16, inputs=64, hidden=64)


def test_a_gradient_copied_out_at_the_step_end_leaves_in_the_head_instead():
    trace = small_recurrent()
    budget = trace.lower_bound_bytes() // 2
    # the plan as auto makes it before any of its refining (which would move the copy)
    member = plan_with_budget(trace, budget, "auto", LATENCY_BOUND,
                              BudgetParams(refine_evaluations=0))
    before = simulate(member.trace, member.plan, LATENCY_BOUND)
    headed = copies_out_in_head(member.trace, member.plan, LATENCY_BOUND, before)
    assert headed.moved >= 1
    assert validate_plan(member.trace, headed.plan).valid
    assert headed.simulation.iteration_us < before.iteration_us
    assert headed.simulation.iteration_us == simulate(member.trace, headed.plan,
                                                      LATENCY_BOUND).iteration_us
    n = trace.num_ops
    for action in headed.plan.actions:
        if isinstance(action, SwapOut) and action not in member.plan.actions:
            assert action.after_op == HEAD_OUT_OP and not action.drop
            buffer = member.trace.buffer(action.buffer_id)
            assert buffer.kind == PERSISTENT
            stays = sorted((r for r in headed.plan.residencies
                            if r.buffer_id == buffer.id), key=lambda r: r.start)
            # one stay across the boundary: home [0, k) and the last to n, one offset
            assert stays[0].start == 0 and stays[-1].end == n
            assert stays[0].offset == stays[-1].offset
            assert stays[0].end <= buffer.uses[0]


def test_a_plan_that_keeps_its_persistent_state_is_left_as_it_is():
    trace = small_recurrent()
    result = plan_with_budget(trace, int(trace.lower_bound_bytes() * 0.95), "auto",
                              LATENCY_BOUND, BudgetParams(refine_evaluations=0))
    sim = simulate(result.trace, result.plan, LATENCY_BOUND)
    offloaded = {r.buffer_id for r in result.plan.residencies if r.start > 0} & {
        b.id for b in trace.buffers if b.kind == PERSISTENT}
    headed = copies_out_in_head(result.trace, result.plan, LATENCY_BOUND, sim)
    if not offloaded:
        assert headed.moved == 0 and headed.plan is result.plan
    assert headed.simulation.iteration_us <= sim.iteration_us


@pytest.mark.parametrize(("steps", "layers", "fraction"), [(4, 2, 0.5), (6, 2, 0.5),
                                                           (4, 3, 0.7)])
def test_auto_on_a_small_recurrent_step_gives_a_validated_plan_no_slower(steps, layers,
                                                                          fraction):
    trace = small_recurrent(steps, layers)
    budget = int(trace.lower_bound_bytes() * fraction)
    result = plan_with_budget(trace, budget, "auto", LATENCY_BOUND)
    assert result.feasible
    assert validate_plan(result.trace, result.plan).valid
    sim = simulate(result.trace, result.plan, LATENCY_BOUND)
    assert sim.overhead == pytest.approx(result.plan.stats["simulated_overhead"])
    again = copies_out_in_head(result.trace, result.plan, LATENCY_BOUND, sim)
    assert again.simulation.iteration_us <= sim.iteration_us
