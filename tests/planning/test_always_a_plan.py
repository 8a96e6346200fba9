"""Always a plan: wherever every op's own working set fits the budget, ``auto`` returns a
plan the independent validator accepts, and its last resort (:mod:`.working_sets`) alone
does too. Traces are drawn with every freedom of the trace format: persistent buffers
(written, read-only, writes unknown, unused), temporaries with and without recorded uses,
recompute recipes given by the trace, many tiny ops, and a few buffers near the budget;
budgets from the largest working set up; copies with a fixed cost of 3 to 100 µs."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cupool.check import validate_swap_plan
from cupool.core.vocabulary import PERSISTENT, Buffer, Op, Recompute, SolveStatus, Trace
from cupool.planning.budget import BudgetParams, plan_with_budget
from cupool.planning.budget.working_sets import (
    KEPT_MEMBER,
    MEMBER,
    plan_working_sets,
    required_bytes,
)
from cupool.planning.shapes import recurrent_trace
from cupool.sim import cost_model, simulate


@st.composite
def any_traces(draw):
    """Small traces using every freedom of the format (module docstring)."""
    n = draw(st.integers(2, 24))
    tiny = draw(st.booleans())  # many ops far shorter than one copy
    durations = [draw(st.sampled_from([0.5, 2.0, 5.0] if tiny else [5.0, 50.0, 500.0]))
                 for _ in range(n)]
    ops = tuple(Op(f"op{i}", d, phase="fw" if i < n // 2 else "bw")
                for i, d in enumerate(durations))
    buffers: list[Buffer] = []
    big = draw(st.integers(0, 2))  # buffers near the budget: a few, each used alone
    for _ in range(big):
        at = draw(st.integers(0, n - 1))
        end = draw(st.integers(at + 1, n))
        buffers.append(Buffer(len(buffers), 64 << 10, at, end, (at,)))
    for _ in range(draw(st.integers(1, 10))):
        start = draw(st.integers(0, n - 1))
        end = draw(st.integers(start + 1, n))
        unknown_uses = draw(st.integers(0, 9)) == 0  # as in a MiniMalloc CSV
        uses = () if unknown_uses else tuple(sorted(draw(st.sets(
            st.integers(start, end - 1), min_size=1, max_size=4))))
        recipe = None
        if uses and draw(st.booleans()):
            inputs = [b.id for b in buffers if b.start < start < b.end]
            recipe = Recompute(start, tuple(draw(st.sets(st.sampled_from(inputs), max_size=2)))
                               if inputs else ())
        writes = draw(st.sampled_from([None, "some"])) if uses else None
        if writes == "some":
            writes = tuple(sorted(draw(st.sets(st.sampled_from(uses), max_size=len(uses)))))
        buffers.append(Buffer(len(buffers), draw(st.integers(1, 32)) << 10, start, end, uses,
                              recompute=recipe, writes=writes))
    for _ in range(draw(st.integers(0, 4))):
        uses = tuple(sorted(draw(st.sets(st.integers(0, n - 1), max_size=3))))
        writes = draw(st.sampled_from([None, (), "last"]))
        if writes == "last":
            writes = uses[-1:]
        buffers.append(Buffer(len(buffers), draw(st.integers(1, 48)) << 10, 0, n, uses,
                              kind=PERSISTENT, writes=writes))
    return Trace("any", ops, tuple(buffers))


def _budget(trace: Trace, share: float) -> int:
    """A budget ``share`` of the way from the largest working set to the lower bound."""
    floor = int(required_bytes(trace).max())
    ceiling = max(floor, trace.lower_bound_bytes())
    return max(1, floor + int(share * (ceiling - floor)))


COSTS = {"gen5": cost_model("gen5"), "gen4 75us": cost_model("gen4", latency_us=75.0),
         "5GBps 100us": cost_model(5.0, latency_us=100.0)}
QUICK = BudgetParams(refine_evaluations=20)


@settings(max_examples=50, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trace=any_traces(), share=st.sampled_from([0.0, 0.05, 0.3, 0.7, 1.0]),
       link=st.sampled_from(sorted(COSTS)))
def test_auto_plans_every_budget_from_the_largest_working_set_up(trace, share, link):
    cost = COSTS[link]
    budget = _budget(trace, share)
    result = plan_with_budget(trace, budget, "auto", cost, QUICK)
    assert result.feasible, result.reason
    report = validate_swap_plan(result.trace, result.plan)
    assert report.valid, (report.rule, report.message)
    assert simulate(result.trace, result.plan, cost).feasible


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trace=any_traces(), share=st.floats(0.0, 1.0), keep=st.booleans())
def test_the_last_resort_alone_plans_every_budget_from_the_largest_working_set_up(
        trace, share, keep):
    budget = _budget(trace, share)
    result = plan_working_sets(trace, budget, COSTS["gen4 75us"], QUICK, time.perf_counter(),
                               keep)
    assert result.feasible, result.reason
    plan = result.plan
    report = validate_swap_plan(trace, plan)
    assert report.valid, (report.rule, report.message)
    assert plan.arena_bytes <= budget


def test_a_budget_below_one_working_set_names_the_op_its_bytes_and_the_budget():
    trace = Trace("two", (Op("a", 1.0), Op("b", 1.0)),
                  (Buffer(0, 3000, 0, 2, (0, 1)), Buffer(1, 2000, 1, 2, (1,))))
    for planner in ("auto", "greedy"):
        result = plan_with_budget(trace, 4999, planner)
        assert result.plan.status == SolveStatus.INFEASIBLE
        assert result.reason == "infeasible: op 1 needs 5000 bytes resident (budget 4999 bytes)"
    result = plan_working_sets(trace, 4999, cost_model("gen5"), QUICK, time.perf_counter())
    assert result.plan.status == SolveStatus.INFEASIBLE
    assert result.reason == "infeasible: op 1 needs 5000 bytes resident (budget 4999 bytes)"


def test_a_temporary_without_recorded_uses_counts_at_the_op_that_makes_it():
    trace = Trace("csv-like", (Op("a", 1.0), Op("b", 1.0), Op("c", 1.0)),
                  (Buffer(0, 100, 0, 3), Buffer(1, 50, 1, 3), Buffer(2, 70, 2, 3, (2,))))
    assert required_bytes(trace).tolist() == [100, 50, 70]
    assert plan_with_budget(trace, 99, "auto").plan.status == SolveStatus.INFEASIBLE
    result = plan_with_budget(trace, 100, "auto")
    assert result.feasible and validate_swap_plan(result.trace, result.plan).valid


def test_the_exact_working_set_budget_runs_each_op_alone():
    # three persistent buffers used pairwise at ops 0, 1 and 2: no op holds more than two,
    # but kept on the device they would need all three sizes at once
    ops = tuple(Op(f"op{i}", 50.0) for i in range(3))
    trace = Trace("pairs", ops, (Buffer(0, 4096, 0, 3, (0, 1), PERSISTENT),
                                 Buffer(1, 4096, 0, 3, (0, 2), PERSISTENT),
                                 Buffer(2, 4096, 0, 3, (1, 2), PERSISTENT)))
    result = plan_with_budget(trace, 8192, "auto")
    assert result.feasible and validate_swap_plan(result.trace, result.plan).valid


@pytest.mark.parametrize("latency_us", [50.0, 100.0])
def test_a_recurrent_program_of_tiny_ops_plans_at_30_percent(latency_us):
    # 400 ops of 15-60 µs, each copy costing more than an op on its fixed cost alone
    trace = recurrent_trace(14, layers=4, batch=16, inputs=256, hidden=256)
    assert 400 <= trace.num_ops <= 450
    cost = cost_model(55.0, latency_us=latency_us)
    budget = int(0.3 * trace.lower_bound_bytes())
    result = plan_with_budget(trace, budget, "auto", cost, QUICK)
    assert result.feasible, result.reason
    assert validate_swap_plan(result.trace, result.plan).valid
    for member in (MEMBER, KEPT_MEMBER):
        assert isinstance(result.candidates[member], float)
