"""The greedy's cost pass (scores of every candidate gap at once) and the offsets a
schedule gets once per ``auto`` run."""

from __future__ import annotations

import random

import numpy as np
import pytest

from cupool.planning.budget.auto import greedy_options
from cupool.planning.budget.engine import greedy as greedy_module
from cupool.planning.budget.engine import placement as placement_module
from cupool.planning.budget.engine.greedy import (
    GapOption,
    _take_cheapest,
    apply_option,
    candidate_gaps,
    evaluate,
    run_greedy,
)
from cupool.planning.budget.engine.placement import OffsetCache
from cupool.planning.budget.engine.residency import residency_intervals
from cupool.planning.budget.engine.schedule import SWAP, IdleGap, OpSpan
from cupool.planning.budget.engine.scores import ScoreTable, option_score
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
    return entries, ScoreTable(state, list(entries))


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


def _full_scores(table, state) -> np.ndarray:
    """Every score of ``table`` computed afresh from its arrays, as the table did before
    it kept them up to date: the holes' over-budget ops counted with a prefix sum."""
    over_before = np.concatenate(([0], np.cumsum(state.live > state.budget)))
    s1, e1, s2, e2 = table._hole_bounds
    covered = (over_before[e1] - over_before[s1]) + (over_before[e2] - over_before[s2])
    with np.errstate(divide="ignore", invalid="ignore"):
        out = table.cost / (table.size * np.maximum(covered, 1))
    out[covered == 0] = table.last_score[covered == 0]
    out[~table.active] = np.inf
    return out


@pytest.mark.parametrize(("fraction", "weight"), [(0.6, 0.02), (0.5, 0.2), (0.45, 1.0)])
@pytest.mark.parametrize(("few_flips", "few_rows"), [(4, 48), (0, 48), (4, 0), (0, 0)])
def test_scores_kept_up_to_date_equal_scores_computed_afresh(lstm, monkeypatch, fraction,
                                                             weight, few_flips, few_rows):
    """After every choice (and every compaction of the table) the scores the table keeps
    up to date are bit for bit those computed afresh from its rows, and the rows left are
    the active ones, in gap order; with the ops that crossed the budget matched one by
    one or by their span, and the rows rescored one by one or with NumPy."""
    monkeypatch.setattr(ScoreTable, "FEW_FLIPS", few_flips)
    monkeypatch.setattr(ScoreTable, "FEW_ROWS", few_rows)
    cost = cost_model("gen5")
    options = greedy_options(BudgetParams(), weight)
    state = PlanState(lstm, int(lstm.lower_bound_bytes() * fraction), cost)
    _entries, table = _table(lstm, state, options)
    rows = len(table.gaps)
    picks = compacted = 0
    while state.over_budget_ops() and _take_cheapest(state, table, options):
        picks += 1
        before = len(table.gaps)
        table.compact()
        compacted += len(table.gaps) < before
        assert table.gaps == sorted(table.gaps)
        kept = table.scores(state)
        assert np.array_equal(kept, _full_scores(table, state))
    assert picks > 5 and compacted >= 1 and len(table.gaps) < rows, (picks, compacted)


def test_a_table_read_from_a_stream_of_candidates_is_the_table_of_their_list(lstm):
    """The table reads each option as it comes: built from a generator it holds what it
    holds when built from the same candidates in a list, sorted by gap."""
    cost = cost_model("gen5")
    options = greedy_options(BudgetParams(), 0.02)
    state = PlanState(lstm, int(lstm.lower_bound_bytes() * 0.6), cost)
    entries, listed = _table(lstm, state, options)
    streamed = ScoreTable(state, (entry for entry in reversed(entries)))
    assert streamed.gaps == listed.gaps
    for name in ("cost", "size", "last_score", "active"):
        assert np.array_equal(getattr(streamed, name), getattr(listed, name))
    for mine, theirs in zip(streamed._hole_bounds, listed._hole_bounds, strict=True):
        assert np.array_equal(mine, theirs)
    assert np.array_equal(streamed.scores(state), listed.scores(state))


class _OpsOverBudget:
    """What a score table reads of a planning state: bytes resident per op, the budget,
    buffer sizes, the over-budget ops and count of a span, and a version of the over-budget
    ops that changes when they do (here the ops themselves: ``live`` is changed directly)."""

    def __init__(self, live: np.ndarray, budget: int, sizes: dict[int, int]) -> None:
        self.live, self.budget, self.sizes = live, budget, sizes

    def over_budget_ops(self) -> list[int]:
        return np.flatnonzero(self.live > self.budget).tolist()

    @property
    def over_version(self) -> bytes:
        return (self.live > self.budget).tobytes()

    def over_budget_count(self, start: int, end: int) -> int:
        return int((self.live[start:end] > self.budget).sum())


def _random_option(rng: random.Random, n: int) -> GapOption:
    """An option with one hole, or two (across the boundary), some of them empty."""
    def hole() -> OpSpan:
        start = rng.randrange(n)
        return OpSpan(start, min(n, start + rng.choice([0, 1, 3, 10, 40])))

    holes = [hole()] if rng.random() < 0.6 else [hole(), hole()]
    return GapOption(rng.uniform(0.5, 50.0), SWAP, holes, n - 1)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("few_flips", "few_rows"), [(4, 48), (0, 48), (4, 0), (1000, 1000)])
def test_random_changes_keep_scores_equal_to_scores_computed_afresh(monkeypatch, seed,
                                                                    few_flips, few_rows):
    """Ops going over and under the budget (one, a few or many at a time), options
    replaced, rows leaving and the table compacted, in random order and asked for between
    any number of them: the scores kept up to date stay bit for bit those computed
    afresh."""
    monkeypatch.setattr(ScoreTable, "FEW_FLIPS", few_flips)
    monkeypatch.setattr(ScoreTable, "FEW_ROWS", few_rows)
    rng = random.Random(seed)
    n, budget = 120, 1000
    sizes = {b: rng.choice([64, 256, 4096]) for b in range(40)}
    state = _OpsOverBudget(np.array([rng.randrange(700, 1300) for _ in range(n)]), budget,
                           sizes)
    gaps = sorted({IdleGap(rng.randrange(40), rng.randrange(n), rng.randrange(n))
                   for _ in range(150)})
    table = ScoreTable(state, [(gap, _random_option(rng, n)) for gap in gaps])
    assert np.array_equal(table.scores(state), _full_scores(table, state))
    for _step in range(300):
        action = rng.random()
        if action < 0.35:  # a few ops cross the budget, or many
            for op in rng.sample(range(n), rng.choice([1, 2, 3, 9, 30])):
                state.live[op] = rng.randrange(700, 1300)
        elif action < 0.5 and table.active.any():
            i = rng.choice(np.flatnonzero(table.active).tolist())
            table.update(i, _random_option(rng, n))
            table.last_score[i] = rng.uniform(0.0, 1.0)
        elif action < 0.8 and table.active.any():
            table.deactivate(rng.choice(np.flatnonzero(table.active).tolist()))
        else:
            table.compact()
        if rng.random() < 0.35:  # else more changes pile up before the scores are asked
            assert np.array_equal(table.scores(state), _full_scores(table, state))
    assert np.array_equal(table.scores(state), _full_scores(table, state))
    assert len(table.gaps) < len(gaps)
