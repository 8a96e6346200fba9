"""The greedy's copies across the iteration boundary moved (``boundary_copies``)."""

from __future__ import annotations

import time

from cupool.check import validate_plan
from cupool.core.read_only import read_only_state
from cupool.planning.budget import plan_with_budget
from cupool.planning.budget.auto import plan_greedy_with
from cupool.planning.budget.boundary_copies import (
    MEMBER_SUFFIX,
    WAIT_SWAP_WEIGHTS,
    _copies_in,
    _copies_out,
    dirty_across_boundary,
    late_copies_in_head,
    late_copies_in_tail,
    plan_greedy_head,
)
from cupool.planning.budget.engine.greedy import GreedyOptions, run_repaired
from cupool.planning.budget.engine.residency import residency_intervals, resident_bytes
from cupool.planning.budget.params import BudgetParams
from cupool.planning.shapes import inference_trace
from cupool.sim import cost_model, simulate

GEN5 = cost_model("gen5")


def _small(layers: int = 32, fraction: float = 0.8):
    """A forward pass without ``writes`` below its peak: at 32 layers and 80%, the
    greedy's copy out of a late layer's weight ends the step; at 12 layers and 90%, an
    early layer's copy in is late."""
    trace = inference_trace(layers=layers)
    return trace, int(fraction * trace.lower_bound_bytes())


def test_only_state_the_step_may_write_is_moved():
    trace = inference_trace(layers=12)
    assert dirty_across_boundary(trace)
    assert not dirty_across_boundary(read_only_state(trace))


def test_copies_out_that_end_the_step_move_into_the_head_within_the_budget():
    trace, budget = _small()
    state = run_repaired(trace, budget, GEN5, GreedyOptions(swap_weight=1.0))
    last_end = float(state.end_us[-1])
    before = _copies_out(state, state.schedule)
    assert any(end > last_end for _issue, end in before.values())
    headed = late_copies_in_head(state)
    heads = [g for gaps in headed.gaps.values() for g in gaps if g.head]
    assert heads
    for g in heads:  # copied out after op 0, back by the greedy's trigger
        assert 1 <= g.resident_until <= g.resident_from <= g.next_use
    peak = resident_bytes(trace, residency_intervals(trace, headed)).max()
    assert peak <= budget
    # the state's own schedule is left as the greedy made it
    assert not any(g.head for gaps in state.schedule.gaps.values() for g in gaps)


def test_late_copies_in_move_into_the_tail_within_the_budget():
    trace, budget = _small(12, 0.9)
    state = run_repaired(trace, budget, GEN5, GreedyOptions(swap_weight=1.0))
    lateness, _copies = _copies_in(state, state.schedule)
    assert lateness > 0
    tailed = late_copies_in_tail(state, state.schedule)
    tails = [g for gaps in tailed.gaps.values() for g in gaps
             if g.wraps and not g.head and g.resident_from >= g.resident_until]
    assert tails
    for g in tails:  # copied in after the copy out, in the tail
        assert g.prev_use < g.resident_until <= g.resident_from < trace.num_ops
    assert _copies_in(state, tailed)[0] < lateness
    assert resident_bytes(trace, residency_intervals(trace, tailed)).max() <= budget


def test_the_member_plan_is_valid_deterministic_and_has_no_tail():
    trace, budget = _small()
    params = BudgetParams()
    options = GreedyOptions(swap_weight=1.0)
    first = plan_greedy_head(trace, budget, GEN5, params, time.perf_counter(), options)
    again = plan_greedy_head(trace, budget, GEN5, params, time.perf_counter(), options)
    assert first.feasible and first.plan.stats["boundary_copies_moved"] >= 1
    assert validate_plan(trace, first.plan).valid
    assert first.plan.residencies == again.plan.residencies
    assert first.plan.actions == again.plan.actions
    moved = simulate(trace, first.plan, GEN5)
    greedy = plan_greedy_with(trace, budget, GEN5, params, time.perf_counter(), options)
    plain = simulate(trace, greedy.plan, GEN5)
    assert plain.iteration_us - plain.op_times[-1][2] > 0  # the greedy's tail
    assert moved.iteration_us - moved.op_times[-1][2] < plain.iteration_us - plain.op_times[-1][2]


def test_no_plan_where_nothing_moves():
    trace = read_only_state(inference_trace(layers=12))
    budget = int(0.9 * trace.lower_bound_bytes())
    result = plan_greedy_head(trace, budget, GEN5, BudgetParams(), time.perf_counter(),
                              GreedyOptions(swap_weight=1.0))
    assert not result.feasible and MEMBER_SUFFIX in result.reason


def test_auto_lists_the_members_and_returns_a_valid_plan():
    trace, budget = _small(12, 0.9)
    result = plan_with_budget(trace, budget, "auto", GEN5)
    assert result.feasible and validate_plan(trace, result.plan).valid
    assert any(MEMBER_SUFFIX in name for name in result.plan.stats["candidates"])


def test_gaps_whose_copies_out_still_end_the_step_are_kept_and_planned_around():
    trace, budget = _small()
    params = BudgetParams()
    options = GreedyOptions(swap_weight=0.2)
    result = plan_greedy_head(trace, budget, GEN5, params, time.perf_counter(), options)
    assert result.feasible and result.plan.stats["boundary_gaps_kept"] >= 1
    assert validate_plan(trace, result.plan).valid
    kept = simulate(trace, result.plan, GEN5)
    greedy = plan_greedy_with(trace, budget, GEN5, params, time.perf_counter(), options)
    plain = simulate(trace, greedy.plan, GEN5)
    assert kept.iteration_us - kept.op_times[-1][2] <= 1e-6  # no copy out ends the step
    assert kept.iteration_us < plain.iteration_us


def test_with_copies_waited_for_the_plan_is_valid():
    trace, budget = _small(40, 0.5)
    options = GreedyOptions(swap_weight=WAIT_SWAP_WEIGHTS[0], wait_for_copies=True)
    result = plan_greedy_head(trace, budget, GEN5, BudgetParams(), time.perf_counter(),
                              options)
    assert result.feasible and validate_plan(trace, result.plan).valid
    stats = result.plan.stats
    assert stats["boundary_copies_moved"] + stats["boundary_gaps_kept"] >= 1
