"""Budget planners: every plan passes the independent validator; determinism;
infeasible budgets; auto is never worse than its members."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cupool.check import validate_plan
from cupool.core.vocabulary import PERSISTENT, TEMPORARY, Buffer, Op, SolveStatus, Trace
from cupool.errors import SolverError
from cupool.io import load_trace
from cupool.planning.budget import POLICY_NAMES, plan_with_budget
from cupool.planning.budget.engine.copies import CopyEngine
from cupool.planning.budget.engine.placement import (
    BoundaryPair,
    boundary_pairs,
    tie_boundary_pairs,
)
from cupool.planning.budget.engine.residency import ResidencyInterval
from cupool.planning.budget.recipes import with_recompute_recipes
from cupool.sim import cost_model, simulate
from tests.swap_cases import small_traces

TRACES = Path(__file__).resolve().parents[2] / "cupool" / "data" / "traces"
GEN5 = cost_model("gen5")


@pytest.fixture(scope="module")
def resnet():
    return load_trace(TRACES / "resnet50_train_b32_bf16.trace.json.gz")


@pytest.fixture(scope="module")
def resnet_plans(resnet):
    budget = int(resnet.lower_bound_bytes() * 0.7)
    return budget, {p: plan_with_budget(resnet, budget, p, GEN5) for p in POLICY_NAMES}


CHAIN_ONLY = {"revolve", "revolve-two-level"}
"""Policies that plan a trace's chain and keep the rest resident: no plan is an answer."""


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_real_trace_at_70_percent_is_valid(resnet_plans, policy):
    budget, plans = resnet_plans
    result = plans[policy]
    plan = result.plan
    if policy in CHAIN_ONLY and not result.feasible:
        assert result.reason.startswith(f"{policy}: ") and "\n" not in result.reason
        return
    assert plan.status == SolveStatus.FEASIBLE, result.reason
    report = validate_plan(result.trace, plan)
    assert report.valid, report.message
    assert plan.capacity_bytes == budget and plan.arena_bytes <= budget
    assert simulate(result.trace, plan, GEN5).feasible


def test_auto_is_never_worse_than_any_policy(resnet_plans):
    _budget, plans = resnet_plans
    times = {}
    for policy, result in plans.items():
        if result.feasible:
            times[policy] = simulate(result.trace, result.plan, GEN5).iteration_us
    assert all(times["auto"] <= t + 1e-6 for t in times.values()), times


def test_auto_is_within_twice_the_bound_plus_5_points_on_resnet_at_70_percent(resnet_plans, resnet):
    from cupool.sim import overhead_lower_bound

    budget, plans = resnet_plans
    result = plans["auto"]
    bound = overhead_lower_bound(result.trace, budget, GEN5)
    overhead = simulate(result.trace, result.plan, GEN5).overhead
    assert overhead <= 2 * bound.overhead + 0.05


def test_auto_has_a_member_that_never_swaps_a_temporary_buffer(resnet):
    """The recompute-only member's plan (if valid) swaps persistent buffers only; auto lists
    it among its candidates and keeps the fastest."""
    from cupool.core.vocabulary import SwapOut
    from cupool.planning.budget import BudgetParams
    from cupool.planning.budget.auto import greedy_options, plan_greedy_with

    planned = with_recompute_recipes(resnet)
    budget = int(resnet.lower_bound_bytes() * 0.7)
    params = BudgetParams()
    options = greedy_options(params, 0.0, late_trigger="latest", swap_temporaries=False,
                             max_chain=params.recompute_chain)
    plan = plan_greedy_with(planned, budget, GEN5, params, 0.0, options).plan
    assert plan.status == SolveStatus.FEASIBLE and validate_plan(planned, plan).valid
    swapped = {a.buffer_id for a in plan.actions if isinstance(a, SwapOut)}
    assert all(planned.buffer(b).kind == PERSISTENT for b in swapped)
    auto = plan_with_budget(resnet, budget, "auto", GEN5).plan
    member = "greedy(recompute temporaries, chains 30)"
    assert member in auto.stats["candidates"]
    assert auto.stats["simulated_overhead"] <= auto.stats["candidates"][member] + 1e-12
    with pytest.raises(SolverError, match=r"recompute_chain \(=-1\)"):
        BudgetParams(recompute_chain=-1)


def test_auto_reports_its_members_and_the_simulation_of_the_kept_plan(resnet_plans):
    """``auto``'s result names every member with its overhead (or why it has none), the one
    it kept, and that plan's simulation; the other policies leave those empty."""
    _budget, plans = resnet_plans
    auto = plans["auto"]
    assert auto.policy == "auto" and auto.reason is None and auto.trace is not None
    assert auto.member in auto.candidates and auto.candidates == auto.plan.stats["candidates"]
    assert auto.plan.stats["member"] == auto.member
    assert auto.simulation.overhead == auto.plan.stats["simulated_overhead"]
    assert auto.simulation.iteration_us == simulate(auto.trace, auto.plan, GEN5).iteration_us
    for policy in set(POLICY_NAMES) - {"auto"}:
        other = plans[policy]
        assert other.policy == policy
        assert other.candidates is None and other.member is None and other.simulation is None


def test_same_inputs_same_plan(resnet):
    budget = int(resnet.lower_bound_bytes() * 0.7)
    a = plan_with_budget(resnet, budget, "greedy", GEN5).plan
    b = plan_with_budget(resnet, budget, "greedy", GEN5).plan
    assert a.residencies == b.residencies and a.actions == b.actions


def test_budget_below_an_ops_working_set_is_infeasible(resnet):
    result = plan_with_budget(resnet, 1 << 20, "auto", GEN5)
    assert result.plan.status == SolveStatus.INFEASIBLE and result.policy == "auto"
    assert re.fullmatch(r"infeasible: op \d+ needs \d+ bytes resident \(budget 1048576 bytes\)",
                        result.reason)
    assert result.plan.stats["reason"] == result.reason and result.candidates is None


def test_unknown_policy_lists_the_known_ones(resnet):
    with pytest.raises(SolverError, match="expected one of: auto, greedy, capuchin"):
        plan_with_budget(resnet, 1 << 30, "nope")


def test_derived_recipes_name_the_producer_and_earlier_inputs(resnet):
    trace = with_recompute_recipes(resnet)
    for b in trace.buffers:
        if b.recompute is not None:
            assert b.kind == TEMPORARY and b.recompute.op == b.start == b.uses[0]
            assert all(trace.buffer(x).start < b.start for x in b.recompute.inputs)


def _brute_fits(copies, issue, length, due):
    queue = sorted([*copies, (issue, length, due)], key=lambda c: c[0])
    free = 0.0
    for i, ln, d in queue:
        free = max(free, i) + ln
        if free > d + 1e-9:
            return False
    return True


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 20), st.integers(0, 40)),
                max_size=6),
       st.integers(0, 50), st.integers(1, 20), st.integers(0, 40))
def test_engine_fits_matches_a_brute_force_queue(copies, issue, length, slack):
    engine = CopyEngine()
    accepted = []
    for i, ln, s in sorted(copies, key=lambda c: c[0]):
        if engine.fits(i, ln, i + ln + s):
            engine.add(i, ln, i + ln + s)
            accepted.append((i, ln, i + ln + s))
    # a new copy issued after the others (ties: behind them) is FIFO-last among equals
    due = issue + length + slack
    expected = _brute_fits([(i + 0.0, ln, d) for i, ln, d in accepted],
                           issue + 1e-7, length, due + 1e-7)
    assert engine.fits(issue + 1e-7, length, due + 1e-7) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 20)), max_size=6),
       st.integers(0, 60), st.integers(1, 20), st.integers(0, 80))
def test_engine_end_growth_matches_the_queue_with_the_copy_added(copies, issue, length, end):
    engine = CopyEngine()
    for i, ln in sorted(copies):
        engine.add(float(i), float(ln))
    before = max([end, *engine.finishes()])
    engine.add(float(issue), float(length))
    after = max([end, *engine.finishes()])
    growth = CopyEngine()
    for i, ln in sorted(copies):
        growth.add(float(i), float(ln))
    assert growth.end_growth(float(issue), float(length), float(end)) == \
        pytest.approx(after - before)


def test_a_swap_across_the_boundary_costs_what_its_copy_out_adds_past_the_last_op():
    """W (10 kB, persistent) used only at op 4 of six 10 µs ops, 1 GB/s and 3 µs per copy:
    across the boundary its copy out runs 50..63 µs, 3 µs past the last op's end (60)."""
    from cupool.planning.budget.engine.greedy import GreedyOptions, evaluate
    from cupool.planning.budget.engine.schedule import IdleGap, OpSpan
    from cupool.planning.budget.engine.state import PlanState

    trace = Trace("wrap", tuple(Op(f"op{i}", 10.0) for i in range(6)),
                  (Buffer(0, 10000, 0, 6, (4,), PERSISTENT),
                   Buffer(1, 1000, 0, 6, tuple(range(6)), PERSISTENT)))
    state = PlanState(trace, 1000, cost_model(1.0, latency_us=3.0))
    option = evaluate(state, IdleGap(0, 4, 4),
                      GreedyOptions(allow_recompute=False, swap_weight=0.0))
    assert option.mode == "swap" and option.holes == [OpSpan(0, 2)]
    assert (option.swap.out_issue_us, option.swap.out_us) == (50.0, 13.0)
    assert option.cost_us == pytest.approx(3.0, abs=1e-4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_traces(), st.sampled_from((0.5, 0.7, 0.9)), st.sampled_from(POLICY_NAMES))
def test_small_traces_plans_are_valid_or_say_why(trace, fraction, policy):
    budget = max(1, int(trace.lower_bound_bytes() * fraction))
    result = plan_with_budget(trace, budget, policy, GEN5)
    assert result.policy == policy
    if result.feasible:
        assert result.reason is None
        report = validate_plan(result.trace, result.plan)
        assert report.valid, report.message
        assert simulate(result.trace, result.plan, GEN5, validate=False).feasible
    else:
        assert result.reason and result.plan.stats["reason"] == result.reason


def test_feedback_moves_a_late_swap_in_earlier():
    """A synchronous swap-in (trigger = due = op 5) makes op 5 wait for the copy; the
    feedback triggers it at op 4 instead, whose 100 µs cover the copy::

        op:   0    1    2    3    4    5
        a     u    .    .    .    .    u     swap out after 0, in at 5 → at 4
    """
    from cupool.core.vocabulary import Plan, Residency, SwapIn, SwapOut
    from cupool.planning.budget.feedback import refine_triggers

    ops = tuple(Op(f"op{i}", 100.0) for i in range(6))
    trace = Trace("late", ops, (Buffer(0, 2**20, 0, 6, (0, 5), TEMPORARY),))
    plan = Plan("late", trace.digest(), "hand", SolveStatus.FEASIBLE, 2**20, 2**20, (),
                capacity_bytes=2**20,
                residencies=(Residency(0, 0, 1, 0), Residency(0, 5, 6, 0)),
                actions=(SwapOut(0, 0), SwapIn(0, 5, 5)))
    assert validate_plan(trace, plan).valid
    before = simulate(trace, plan, GEN5)
    assert before.stall_us > 0
    refined = refine_triggers(trace, plan, GEN5)
    better, report = refined.plan, refined.simulation
    assert refined.moved_triggers == 1 and better.stats["feedback_moved_triggers"] == 1
    assert SwapIn(0, 4, 5) in better.actions and Residency(0, 4, 6, 0) in better.residencies
    assert validate_plan(trace, better).valid
    assert report.stall_us == 0 and report.iteration_us < before.iteration_us


def test_a_copy_with_slack_queued_ahead_of_a_late_one_is_postponed_behind_it():
    """op:          0    1    2    3    4    5 ...  9   (20 µs each, 1 GB/s, 3 µs a copy)
    X (30 kB):   out after 0; in at 3 (H2D 60..93), due 9 (at 180+): lots of slack
    Y (1 kB):    out after 2; in at 4, due 4: queued behind X, lands at 97, op 4 waits
    Postponed to op 5, X runs 104..137, still before op 9; Y lands at 84."""
    from cupool.core.vocabulary import Residency, SwapIn, SwapOut
    from cupool.planning.budget.feedback import _postpone_blockers
    from tests.swap_cases import swap_plan, trace_of

    trace = trace_of([20.0] * 10, Buffer(0, 30000, 0, 10, (0, 9)),
                     Buffer(1, 1000, 0, 5, (0, 2, 4)))
    plan = swap_plan(trace, [Residency(0, 0, 1, 0), Residency(0, 3, 10, 0),
                             Residency(1, 0, 3, 30000), Residency(1, 4, 5, 30000)],
                     [SwapOut(0, 0), SwapOut(1, 2), SwapIn(0, 3, 9), SwapIn(1, 4, 4)])
    link = cost_model(1.0, latency_us=3.0)
    before = simulate(trace, plan, link)
    assert before.iteration_us == pytest.approx(217.0)
    result = _postpone_blockers(trace, plan, before)
    postponed = result.plan
    assert result.moved == 1 and SwapIn(0, 5, 9) in postponed.actions
    assert Residency(0, 5, 10, 0) in postponed.residencies
    assert validate_plan(trace, postponed).valid
    after = simulate(trace, postponed, link)
    assert [c[5] for c in after.copies if c[1] == "h2d"] == pytest.approx([84.0, 137.0])
    assert after.iteration_us == pytest.approx(204.0)


def test_a_recompute_brings_a_swapped_input_back_earlier():
    """A is recomputed before op 5 from X, which is swapped out until its own use at op 6:
    the planner moves X's swap-in due to op 5 (an earlier trigger) instead of giving up."""
    from cupool.core.vocabulary import Recompute, SwapIn
    from cupool.planning.budget import BudgetParams
    from cupool.planning.budget.engine.placement import Decision, place_schedule
    from cupool.planning.budget.engine.state import PlanState

    trace = Trace("advance", tuple(Op(f"op{i}", 10.0) for i in range(8)), (
        Buffer(0, 1000, 0, 8, (0, 6)),
        Buffer(1, 1000, 1, 8, (1, 5), recompute=Recompute(1, (0,)))))
    cost = cost_model(1.0)
    state = PlanState(trace, 10_000, cost)
    state.apply_swap(0, 0, 6, state.swap_window(0, 0, 6))
    assert not state.resident(0, 5)
    chain = state.chain(1, 5)
    assert chain is not None and chain.advances, chain  # X's swap-in moves, no recompute
    state.apply_recompute(1, 1, 5, chain)
    assert state.resident(0, 5)
    result = place_schedule(trace, 10_000, lambda _budget: Decision(state.schedule), "test",
                            BudgetParams().placement, 0.0)
    plan = result.plan
    assert result.reason is None
    assert validate_plan(trace, plan).valid
    swap_in = next(a for a in plan.actions if isinstance(a, SwapIn))
    assert swap_in.buffer_id == 0 and swap_in.due_op == 5 and swap_in.trigger_op <= 5
    assert simulate(trace, plan, cost).feasible


# op:        0   1   2   3   4   5
# W 0:      [=)         [=========)   persistent, 8 B: resident at both ends, off in between
# X 1:      [=====)                   8 B
# Y 2:                  [=========)   8 B
BOUNDARY_TRACE = Trace("boundary", tuple(Op(f"op{i}", 1.0) for i in range(6)), (
    Buffer(0, 8, 0, 6, (0, 5), PERSISTENT),
    Buffer(1, 8, 0, 2, (0, 1)),
    Buffer(2, 8, 3, 6, (3, 5)),
))
BOUNDARY_INTERVALS = [ResidencyInterval(0, 0, 1), ResidencyInterval(0, 3, 6),
                      ResidencyInterval(1, 0, 2), ResidencyInterval(2, 3, 6)]


@pytest.mark.parametrize(("offsets", "budget", "tied"), [
    ([0, 8, 16, 0], 24, 8),     # the last residency's offset is free during the first one
    ([0, 8, 8, 16], 24, 0),     # only the first's offset is free during the last one
    ([0, 8, 8, 0], 24, 16),     # neither: the lowest offset free during both
    ([0, 8, 8, 0], 16, None),   # neither, and nothing free within the budget
])
def test_a_persistent_buffer_keeps_one_offset_across_the_iteration_boundary(offsets, budget,
                                                                             tied):
    assert boundary_pairs(BOUNDARY_TRACE, BOUNDARY_INTERVALS) == [BoundaryPair(first=0, last=1)]
    placed = np.array(offsets, dtype=np.int64)
    assert tie_boundary_pairs(BOUNDARY_TRACE, BOUNDARY_INTERVALS, placed, budget) is (
        tied is not None)
    if tied is not None:
        assert placed.tolist() == [tied, tied, *offsets[2:]]


def test_on_demand_without_offsets_says_which_solvers_failed(monkeypatch):
    """When no offset solver packs a schedule and no repair does either (here: the
    repair is switched off, so a persistent buffer's stay across the iteration boundary
    cannot take one offset), the reason names the solvers tried, not an arena of 0
    bytes."""
    from cupool.planning.budget.engine import placement
    from cupool.planning.synthetic import lstm_trace

    monkeypatch.setattr(placement, "repair_placement", lambda *args: (None, None))
    trace = lstm_trace(10, 2, seed=0)
    budget = int(trace.lower_bound_bytes() * 0.7)
    result = plan_with_budget(trace, budget, "on-demand")
    assert result.plan.status == SolveStatus.OVER_CAPACITY
    assert result.reason == (f"no offset solver placed the residencies within the budget "
                             f"({budget} bytes; tried greedy-size, best-fit, greedy-breadth)")


def test_swap_ins_triggered_at_one_op_go_earliest_due_first():
    """Two swap-ins triggered at op 2: the one due at op 4 is issued before the one due at
    op 7 whatever their buffer ids, so op 4 does not wait behind the other copy."""
    from cupool.core.vocabulary import SwapIn
    from cupool.planning.budget.engine.residency import actions_of
    from cupool.planning.budget.engine.schedule import SWAP, Gap, Schedule

    ops = tuple(Op(f"op{i}", duration_us=10.0) for i in range(9))
    trace = Trace("edf", ops, (Buffer(0, 4000, 0, 9, (0, 7)), Buffer(1, 4000, 0, 9, (0, 4))))
    schedule = Schedule()
    schedule.add(Gap(0, 0, 7, SWAP, 1, 2))
    schedule.add(Gap(1, 0, 4, SWAP, 1, 2))
    swap_ins = [a for a in actions_of(trace, schedule) if isinstance(a, SwapIn)]
    assert [(a.buffer_id, a.trigger_op, a.due_op) for a in swap_ins] == [(1, 2, 4), (0, 2, 7)]
