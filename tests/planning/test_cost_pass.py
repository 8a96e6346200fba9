"""The greedy's cost pass (scores of every candidate gap at once) and the offsets a
schedule gets once per ``auto`` run."""

from __future__ import annotations

import numpy as np
import pytest

from cupool.planning.budget.auto import greedy_options
from cupool.planning.budget.engine import greedy as greedy_module
from cupool.planning.budget.engine import placement as placement_module
from cupool.planning.budget.engine.greedy import (
    _Scores,
    _take_cheapest,
    apply_option,
    candidate_gaps,
    evaluate,
    option_score,
    run_greedy,
)
from cupool.planning.budget.engine.placement import OffsetCache
from cupool.planning.budget.engine.residency import residency_intervals
from cupool.planning.budget.engine.state import PlanState
from cupool.planning.budget.params import BudgetParams
from cupool.planning.synthetic import lstm_trace
from cupool.sim import cost_model


@pytest.fixture(scope="module")
def lstm():
    return lstm_trace(12, 2, seed=3)


def _table(trace, state, options):
    entries = []
    for gap in candidate_gaps(trace, True):
        option = evaluate(state, gap, options)
        if option is not None and greedy_module._helps(state, option.holes):
            entries.append((gap, option))
    return entries, _Scores(state, list(entries))


def test_scores_are_each_last_options_score_against_the_ops_over_the_budget_now(lstm):
    """After choices change which ops are over the budget, every score is what
    :func:`option_score` gives the gap's last option; a gap whose last option frees nothing
    over the budget any more keeps its last score (it is evaluated again when cheapest)."""
    cost = cost_model("gen5")
    options = greedy_options(BudgetParams(), 0.02)
    state = PlanState(lstm, int(lstm.lower_bound_bytes() * 0.6), cost)
    entries, table = _table(lstm, state, options)
    assert len(entries) > 10
    assert table.gaps == sorted(table.gaps)
    for gap, option in entries[:3]:
        apply_option(state, gap, option)
        state.taken.add(gap)
        table.deactivate(table.gaps.index(gap))
    scores = table.scores(state)
    by_gap = dict(entries)
    stale = 0
    for i, gap in enumerate(table.gaps):
        option = by_gap[gap]
        if not table.active[i]:
            assert scores[i] == np.inf
        elif greedy_module._helps(state, option.holes):
            assert scores[i] == pytest.approx(option_score(state, gap, option), rel=1e-12)
        else:
            stale += 1
            assert scores[i] == table.last_score[i]
    assert stale < len(entries)


def test_the_gap_taken_ranks_first_by_its_fresh_score(lstm):
    """The gap :func:`_take_cheapest` takes has a fresh score no higher than any other
    gap's score in the table."""
    cost = cost_model("gen5")
    options = greedy_options(BudgetParams(), 0.2)
    state = PlanState(lstm, int(lstm.lower_bound_bytes() * 0.6), cost)
    _entries, table = _table(lstm, state, options)
    taken_before = set(state.taken)
    assert _take_cheapest(state, table, options)
    (gap,) = state.taken - taken_before
    i = table.gaps.index(gap)
    fresh = table.last_score[i]
    others = table.scores(state)
    others[i] = np.inf
    assert fresh <= others.min() * (1 + 1e-9) + 1e-15


def test_an_offset_cache_solves_a_schedule_once_and_answers_as_the_solvers_do(
        lstm, monkeypatch):
    cost = cost_model("gen5")
    budget = int(lstm.lower_bound_bytes() * 0.7)
    state = run_greedy(lstm, budget, cost, greedy_options(BudgetParams(), 0.02))
    intervals = residency_intervals(lstm, state.schedule)
    solvers = ("greedy-size", "best-fit")
    fresh = placement_module._place_first(lstm, intervals, budget, solvers)
    calls = []
    real = placement_module.place

    def counting(*args, **kwargs):
        calls.append(args[-1])
        return real(*args, **kwargs)

    monkeypatch.setattr(placement_module, "place", counting)
    cache = OffsetCache()
    first = cache.place(lstm, list(intervals), budget, solvers)
    solved = len(calls)
    again = cache.place(lstm, list(intervals), budget, solvers)
    assert 1 <= solved <= len(solvers) and len(calls) == solved
    assert again is first
    assert first.arena_bytes == fresh.arena_bytes
    assert np.array_equal(first.offsets, fresh.offsets)
    cache.place(lstm, list(intervals), budget - 1, solvers)  # another budget: solved again
    assert len(calls) > solved
