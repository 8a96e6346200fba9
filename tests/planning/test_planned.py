"""The planning front door: make_plan and read_plan give every consumer the same plan, the
trace it is for, how it was obtained and the validator's report."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cupool.check import validate_plan
from cupool.core.vocabulary import PERSISTENT, Buffer, SolveStatus
from cupool.errors import PlanFormatError
from cupool.io import save_plan
from cupool.planning import plan
from cupool.planning.budget import plan_with_budget
from cupool.planning.planned import given_plan, make_plan, read_plan
from cupool.sim import cost_model
from tests.swap_cases import six_op_swap_plan, six_op_trace, trace_of


def chain_trace():
    """Five ops, a persistent weight and a chain of activations the backward half reads:
    its lower bound is above what 60% of it allows, so a budget plan must swap."""
    return trace_of(
        [10.0] * 6,
        Buffer(0, 64, 0, 6, (0, 5), PERSISTENT),
        Buffer(1, 256, 0, 5, (0, 4)),
        Buffer(2, 256, 1, 4, (1, 3)),
        Buffer(3, 256, 2, 3, (2,)),
    )


def timeless(p):
    """``p`` without its solve time (the one field two identical plannings differ in)."""
    return replace(p, solve_seconds=0.0)


def test_without_a_budget_the_static_solver_plans():
    trace = chain_trace()
    planned = make_plan(trace, solver="greedy-size")
    assert planned.source == "solver greedy-size" and planned.budget is None
    assert planned.trace is trace and timeless(planned.plan) == timeless(plan(trace, "greedy-size"))
    assert planned.fits and planned.valid and planned.check.valid
    assert planned.reason is None


def test_a_budget_at_or_above_the_bound_is_a_static_capacity():
    trace = chain_trace()
    planned = make_plan(trace, trace.lower_bound_bytes())
    assert planned.plan.is_static and planned.plan.capacity_bytes == trace.lower_bound_bytes()
    assert planned.source == "solver auto" and planned.fits and planned.valid


def test_below_the_bound_solver_auto_hands_over_to_the_budget_planner():
    trace = chain_trace()
    budget = int(trace.lower_bound_bytes() * 0.7)
    cost = cost_model("gen5")
    planned = make_plan(trace, budget, cost=cost)
    direct = plan_with_budget(trace, budget, "auto", cost)
    assert planned.source == f"budget {budget} (auto)"
    assert timeless(planned.plan) == timeless(direct.plan) and planned.trace == direct.trace
    assert planned.budget is not None and planned.budget.member == direct.member
    assert planned.fits and planned.valid
    assert planned.check == validate_plan(direct.trace, direct.plan)


def test_a_named_static_solver_below_the_bound_stays_static_and_does_not_fit():
    trace = chain_trace()
    planned = make_plan(trace, trace.lower_bound_bytes() - 1, solver="greedy-size")
    assert planned.plan.is_static and not planned.fits
    assert planned.reason == f"status {planned.plan.status.value}"


def test_a_named_policy_plans_for_its_budget_and_needs_one():
    trace = chain_trace()
    budget = int(trace.lower_bound_bytes() * 0.7)
    planned = make_plan(trace, budget, policy="on-demand", seed=3)
    assert planned.source == f"budget {budget} (on-demand)" and planned.budget.policy == "on-demand"
    with pytest.raises(ValueError, match="policy \\(='capuchin'\\) plans for a budget"):
        make_plan(trace, policy="capuchin")


def test_a_budget_below_an_ops_working_set_says_why():
    trace = chain_trace()
    planned = make_plan(trace, 100)
    assert planned.plan.status == SolveStatus.INFEASIBLE and not planned.fits
    assert "op" in planned.reason and "bytes" in planned.reason


def test_read_plan_adds_recipes_to_a_swapping_plan_and_refuses_another_traces(tmp_path):
    trace = six_op_trace()
    swapping = six_op_swap_plan(trace)
    path = tmp_path / "swap.plan.json"
    save_plan(swapping, path, trace)
    planned = read_plan(trace, path)
    assert planned.source == f"file {path}" and planned.check.valid
    assert planned.plan.residencies == swapping.residencies

    other = chain_trace()
    with pytest.raises(PlanFormatError, match="the plan is for trace 'hand'") as caught:
        read_plan(trace_of([1.0], Buffer(0, 8, 0, 1, (0,)), name="other"), path)
    assert str(path) in str(caught.value)
    static = plan(other, "greedy-size")
    assert given_plan(other, static, "caller").trace is other
