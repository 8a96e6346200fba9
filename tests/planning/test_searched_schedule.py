"""The search over a chosen plan's schedule (:mod:`cupool.planning.budget.searched_schedule`):
a plan's residencies and actions are read back as a schedule, and the search returns only
placed plans that simulate no slower than where it started and pass the validator; ``auto``
runs it only on small traces."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cupool.check import validate_plan
from cupool.planning.budget import BudgetParams, plan_with_budget
from cupool.planning.budget.engine.residency import residency_intervals
from cupool.planning.budget.read_schedule import schedule_of
from cupool.planning.budget.searched_schedule import SCHEDULE_SEARCHED, search_schedule
from cupool.planning.shapes import near_budget_trace
from cupool.sim import cost_model, simulate

GEN4 = cost_model("gen4")
SMALL = BudgetParams(refine_evaluations=0, schedule_evaluations=0)


def small_step(seed: int):
    """A 12-op near-budget step (2 large buffers, 12 temporaries, 4 weights)."""
    return near_budget_trace(seed, ops=12, big=2, big_bytes=96 << 20, small=12, weights=4)


@pytest.mark.parametrize(("seed", "fraction"), [(0, 0.75), (2, 0.9), (3, 0.75)])
def test_the_search_returns_validated_plans_no_slower_than_its_start(seed, fraction):
    trace = small_step(seed)
    budget = int(fraction * trace.lower_bound_bytes())
    start = plan_with_budget(trace, budget, "auto", GEN4, SMALL)
    assert start.feasible, start.reason
    assert schedule_of(start.trace, start.plan) is not None
    params = replace(SMALL, seed=seed, schedule_evaluations=40)
    searched = search_schedule(start.trace, start.plan, start.simulation.iteration_us, budget,
                               GEN4, params)
    assert 0 < searched.evaluations <= params.schedule_evaluations
    if searched.result is None:
        return
    report = validate_plan(start.trace, searched.result.plan)
    assert report.valid, report.message
    again = simulate(start.trace, searched.result.plan, GEN4)
    assert again.iteration_us == pytest.approx(searched.simulation.iteration_us)
    assert again.iteration_us < start.simulation.iteration_us


def test_the_search_finds_a_faster_plan_on_a_small_step():
    trace = small_step(5)
    budget = int(0.75 * trace.lower_bound_bytes())
    start = plan_with_budget(trace, budget, "auto", GEN4, SMALL)  # the last resort's plan
    searched = search_schedule(start.trace, start.plan, start.simulation.iteration_us, budget,
                               GEN4, replace(SMALL, schedule_evaluations=100))
    assert searched.result is not None
    assert validate_plan(start.trace, searched.result.plan).valid
    assert searched.simulation.iteration_us < start.simulation.iteration_us


@pytest.mark.parametrize(("seed", "fraction"), [(0, 0.9), (2, 0.8)])
def test_a_greedy_plan_reads_back_as_the_schedule_that_makes_it(seed, fraction):
    trace = small_step(seed)
    budget = int(fraction * trace.lower_bound_bytes())
    result = plan_with_budget(trace, budget, "greedy", GEN4)
    assert result.feasible, result.reason
    schedule = schedule_of(result.trace, result.plan)
    assert schedule is not None
    assert sorted(residency_intervals(result.trace, schedule)) == sorted(
        (r.buffer_id, r.start, r.end) for r in result.plan.residencies)


def test_the_search_is_deterministic():
    trace = small_step(0)
    budget = int(0.75 * trace.lower_bound_bytes())
    start = plan_with_budget(trace, budget, "auto", GEN4, SMALL)
    params = replace(SMALL, schedule_evaluations=30)
    runs = [search_schedule(start.trace, start.plan, start.simulation.iteration_us, budget,
                            GEN4, params)
            for _ in range(2)]
    plans = [None if r.result is None else (r.result.plan.residencies, r.result.plan.actions)
             for r in runs]
    assert plans[0] == plans[1]


def test_auto_runs_it_only_on_small_traces():
    trace = near_budget_trace(1)
    budget = int(0.9 * trace.lower_bound_bytes())
    params = BudgetParams(refine_evaluations=20, schedule_evaluations=150)
    searched = plan_with_budget(trace, budget, "auto", GEN4, params)
    assert validate_plan(searched.trace, searched.plan).valid
    skipped = plan_with_budget(trace, budget, "auto", GEN4,
                               replace(params, schedule_max_buffers=len(trace.buffers) - 1))
    assert SCHEDULE_SEARCHED not in skipped.member
    assert "schedule_evaluations" not in skipped.plan.stats
    assert searched.simulation.iteration_us <= skipped.simulation.iteration_us


def test_state_copied_out_in_the_head_or_back_in_the_tail_reads_back_and_is_searched():
    """A 7-op inference pass: weight 1 (used by op 1 only) leaves after op 1 and comes back
    from op 6, for the next iteration (brought back in the tail); weight 11 (op 6) leaves
    after op 0 and comes back from op 4 (taken in the head). Both read back as the wrap
    gaps that make them, so the search can move them (within their forms: a move that
    turned one into the other would leave a copy out without a residency to copy)."""
    from cupool.planning.budget.engine.placement import Decision, PlacementParams, place_schedule
    from cupool.planning.budget.engine.schedule import SWAP, Gap, Schedule
    from cupool.planning.shapes import inference_trace

    trace = inference_trace(0, layers=6)
    budget = trace.lower_bound_bytes()
    gaps = [Gap(1, 1, 1, SWAP, 2, 6), Gap(11, 6, 6, SWAP, 1, 4)]
    assert not gaps[0].head and gaps[1].head
    schedule = Schedule({1: [gaps[0]], 11: [gaps[1]]})
    placed = place_schedule(trace, budget, lambda internal: Decision(schedule),
                            "hand", PlacementParams(), 0.0)
    assert placed.feasible and "placement_repair" not in placed.plan.stats
    assert validate_plan(trace, placed.plan).valid
    again = schedule_of(trace, placed.plan)
    assert again is not None and again.gaps == schedule.gaps
    start = simulate(trace, placed.plan, GEN4)
    searched = search_schedule(trace, placed.plan, start.iteration_us, budget, GEN4,
                               replace(SMALL, schedule_evaluations=60))
    assert searched.evaluations > 0
    if searched.result is not None:
        assert validate_plan(trace, searched.result.plan).valid
        assert searched.simulation.iteration_us < start.iteration_us


def test_a_wrap_gap_is_offered_in_the_head_and_makes_the_later_gap_a_drop():
    """A weight written by the update is dirty when the step begins: its wrap gap taken in
    the head (copied out after op 0, back by a trigger up to its first use) is offered
    beside the one copied out at the end; with it, the weight's next gap leaves clean."""
    from cupool.core.vocabulary import SwapOut
    from cupool.planning.budget.engine.placement import Decision, PlacementParams, place_schedule
    from cupool.planning.budget.engine.schedule import SWAP, Gap, IdleGap, Schedule
    from cupool.planning.budget.searched_schedule import HEAD_TRIGGERS, _new_gaps

    trace = near_budget_trace(1)
    weight = trace.buffer(70)  # used by ops 7, 18 and the update, 26
    assert weight.uses == (7, 18, 26)
    offered = _new_gaps(IdleGap(70, 26, 7), trace.num_ops, {}, heads=True)
    assert not any(g.head for g in _new_gaps(IdleGap(70, 26, 7), trace.num_ops, {}))
    heads = [g for g in offered if g.head]
    assert [g.resident_from for g in heads] == list(range(8 - HEAD_TRIGGERS, 8))
    assert all(g.resident_until == 1 for g in heads)
    assert [g for g in offered if not g.head] == [Gap(70, 26, 7, SWAP, 27, 0)]
    schedule = Schedule({70: [Gap(70, 26, 7, SWAP, 1, 5), Gap(70, 7, 18, SWAP, 8, 16)]})
    placed = place_schedule(trace, trace.lower_bound_bytes(),
                            lambda internal: Decision(schedule), "hand", PlacementParams(), 0.0)
    assert placed.feasible and validate_plan(trace, placed.plan).valid
    outs = [a for a in placed.plan.actions if isinstance(a, SwapOut)]
    assert [(a.after_op, a.drop) for a in outs] == [(0, False), (7, True)]


def test_auto_takes_a_weight_off_in_the_head_where_a_forward_copy_out_stalls():
    """near-budget-1 at 90% on Gen4: without head gaps every weight's first gap is copied
    out after its forward use, queued on the one D2H engine, and the last of them (weight
    70, 44 MiB after op 7) lands after op 9 must start (the bytes op 9 writes are its).
    With them, a weight is copied out while the step begins and its later gap is a drop
    (weight 70: out after op 0, back from op 4)."""
    from cupool.planning.budget import searched_schedule

    trace = near_budget_trace(1)
    budget = int(0.9 * trace.lower_bound_bytes())
    result = plan_with_budget(trace, budget, "auto", GEN4)
    assert validate_plan(result.trace, result.plan).valid
    schedule = schedule_of(result.trace, result.plan)
    assert any(g.head for gaps in schedule.gaps.values() for g in gaps)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(searched_schedule, "HEAD_TRIGGERS", 0)
        without = plan_with_budget(trace, budget, "auto", GEN4)
    assert result.simulation.iteration_us < without.simulation.iteration_us


@pytest.mark.parametrize(("climbed_us", "last_us", "kept"), [
    (90.0, 95.0, "climbed"), (95.0, 90.0, "last"), (101.0, 102.0, "start")])
def test_the_climbs_best_and_the_last_climbs_are_both_refined_and_the_faster_kept(
        monkeypatch, climbed_us, last_us, kept):
    """The last climb (wrap gaps in the head) starts from the climbs' best and only keeps
    a faster schedule, but refined, the climbs' best may still be faster: both are
    refined and the fastest of them and the plan searched from is kept."""
    from types import SimpleNamespace

    from cupool.planning.budget import searched_schedule
    from cupool.planning.budget.auto import Refined
    from cupool.planning.budget.searched_schedule import Searched, schedule_searched

    trace = small_step(0)
    budget = int(0.75 * trace.lower_bound_bytes())
    start = plan_with_budget(trace, budget, "auto", GEN4, SMALL)
    climbed, last = replace(start.plan, solver="climbed"), replace(start.plan, solver="last")
    searched = Searched(replace(start, plan=last), start.simulation, 9,
                        Searched(replace(start, plan=climbed), start.simulation, 5))
    monkeypatch.setattr(searched_schedule, "search_schedule", lambda *a, **k: searched)
    times = {"climbed": climbed_us, "last": last_us}

    def refine(trace_, entry, cost, params):
        return Refined(entry.plan, SimpleNamespace(iteration_us=times[entry.plan.solver]), {})

    refined = Refined(start.plan, SimpleNamespace(iteration_us=100.0, overhead=0.5), {})
    best, chosen = schedule_searched(start.trace, start, refined, budget, GEN4,
                                     BudgetParams(), refine)
    if kept == "start":
        assert (best, chosen) == (start, refined)
    else:
        assert chosen.plan.solver == kept and best.plan.solver == kept
        assert chosen.simulation.iteration_us == times[kept]
        assert SCHEDULE_SEARCHED in best.member and chosen.stats["schedule_evaluations"] == 9
