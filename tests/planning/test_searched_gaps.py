"""The searched-gaps member (:mod:`cupool.planning.budget.searched_gaps`): on a short
training step whose weights the update writes, copying a weight out early makes its later
gap a drop, which the greedy members do not see; the search finds a plan at the ideal
time where they wait. ``auto`` runs it only on traces of few idle gaps."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from cupool.check import validate_plan
from cupool.planning.budget import BudgetParams, plan_with_budget
from cupool.planning.budget.auto import members
from cupool.planning.budget.recipes import with_recompute_recipes
from cupool.planning.budget.searched_gaps import MEMBER, decode, plan_searched_gaps, searchable
from cupool.planning.shapes import near_budget_trace
from cupool.sim import cost_model, overhead_lower_bound, simulate

GEN5 = cost_model("gen5")


@pytest.fixture(scope="module")
def step():
    """near-budget-0 (27 ops, 34 idle gaps) at 90% of its lower bound."""
    trace = with_recompute_recipes(near_budget_trace(0))
    return trace, int(0.9 * trace.lower_bound_bytes())


def test_the_search_finds_the_plan_at_the_ideal_time(step):
    trace, budget = step
    result = plan_searched_gaps(trace, budget, GEN5, BudgetParams(), time.perf_counter())
    assert result.feasible, result.reason
    report = validate_plan(result.trace, result.plan)
    assert report.valid, report.message
    assert simulate(result.trace, result.plan, GEN5).overhead == pytest.approx(0.0, abs=1e-9)
    assert 1 < result.plan.stats["searched_decodings"] <= BudgetParams().search_evaluations
    # weight 67 (read at ops 4, 12, 13, 21, written by the update) leaves after op 13 by a
    # drop: its copy out ran between ops 4 and 12
    drops = [a for a in result.plan.actions
             if type(a).__name__ == "SwapOut" and a.buffer_id == 67 and a.drop]
    assert drops


def test_auto_keeps_it_where_the_greedy_members_wait(step):
    trace, budget = step
    result = plan_with_budget(trace, budget, "auto", GEN5)
    assert result.member == MEMBER
    assert result.simulation.overhead == pytest.approx(0.0, abs=1e-9)
    waited = result.candidates["greedy(swap_weight=0, copies waited for)"]
    assert isinstance(waited, float) and waited > 0.1
    assert overhead_lower_bound(result.trace, budget, GEN5).overhead <= 1e-9


def test_auto_runs_it_only_on_traces_of_few_idle_gaps(step):
    trace, budget = step
    assert searchable(trace, BudgetParams())
    assert MEMBER in [m.name for m in members(trace, budget, GEN5, BudgetParams())]
    fewer = replace(BudgetParams(), search_max_gaps=33)
    assert not searchable(trace, fewer)
    assert MEMBER not in [m.name for m in members(trace, budget, GEN5, fewer)]


def test_a_forced_set_the_budget_cannot_hold_decodes_to_none(step):
    trace, _budget = step
    from cupool.planning.budget.engine.greedy import GreedyOptions

    tiny = int(0.3 * trace.lower_bound_bytes())
    assert decode(trace, tiny, GEN5, (), GreedyOptions(wait_for_copies=True)) is None
