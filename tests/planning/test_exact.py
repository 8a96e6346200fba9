"""The ``exact`` solver: named scenarios with exact expectations, a brute-force oracle,
and the C search against its Python twin. Every plan goes through the validator."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cupool.check import validate_offsets
from cupool.core.vocabulary import SolveStatus
from cupool.errors import SolverError
from cupool.io import load_trace
from cupool.planning.problem import StaticProblem
from cupool.planning.solvers import exact
from cupool.planning.solvers.base import SolverParams
from cupool.planning.solvers.exact import search_fits, solve_exact

DSA = Path(exact.__file__).resolve().parents[2] / "data" / "dsa"
NATIVE = [False, pytest.param(True, marks=pytest.mark.skipif(
    not exact.native_available(), reason="C search not built"))]
both_paths = pytest.mark.parametrize("native", NATIVE)


def problem_of(buffers, capacity=None):
    """``buffers``: ``(start, end, size)`` tuples."""
    starts, ends, sizes = zip(*buffers, strict=True) if buffers else ((), (), ())
    return StaticProblem.from_arrays(starts, ends, sizes, capacity=capacity)


def solve(problem, native, **params):
    """The search itself: the greedy certificate is off unless a test asks for it."""
    params.setdefault("greedy_certificate", False)
    result = solve_exact(problem, SolverParams(native=native, **params))
    if result.offsets is not None:
        report = validate_offsets(problem.with_capacity(None), result.offsets)
        assert report.valid, report.message
        assert result.arena_bytes == problem.arena_of(result.offsets)
        assert problem.capacity is None or result.arena_bytes <= problem.capacity
    return result


def brute_force_arena(problem) -> int:
    """The smallest arena, by trying every placement order.

    Some optimal plan is reached this way: list an optimal plan's buffers by offset and
    drop each, in that order, onto the highest top among the earlier time-neighbours;
    nothing moves up and every overlapping pair stays ordered, so the plan stays valid.
    """
    n = problem.n
    starts, ends, sizes = problem.starts.tolist(), problem.ends.tolist(), problem.sizes.tolist()
    best = sum(sizes)
    for order in itertools.permutations(range(n)):
        tops = {}
        for i in order:
            tops[i] = sizes[i] + max((tops[j] for j in tops
                                      if starts[i] < ends[j] and starts[j] < ends[i]), default=0)
        best = min(best, max(tops.values(), default=0))
    return best


tiny_problems = st.lists(
    st.tuples(st.integers(0, 5), st.integers(1, 4), st.integers(1, 5)).map(
        lambda t: (t[0], t[0] + t[1], t[2])),
    min_size=1, max_size=7).map(problem_of)


# ---------------------------------------------------------------- named scenarios

@both_paths
def test_minimalloc_example_fits_12_with_exact_offsets(native):
    problem = StaticProblem.from_trace(load_trace(DSA / "example.12.csv"), capacity=12)
    result = solve(problem, native)
    assert result.status is SolveStatus.OPTIMAL
    assert result.offsets.tolist() == [8, 8, 4, 4, 0]  # b5 (lives throughout) stacked at 0
    assert result.stats["stacked_buffers"] == 1 and result.stats["components"] == 2


@both_paths
def test_minimalloc_example_does_not_fit_11(native):
    problem = StaticProblem.from_trace(load_trace(DSA / "example.12.csv"), capacity=11)
    result = solve(problem, native)
    assert result.status is SolveStatus.INFEASIBLE
    assert result.offsets is None and result.arena_bytes is None
    assert result.stats["nodes"] == 0  # the lower bound (12) already says so


# op:  0  1  2  3  4  5  6  7  8
# a:   [==)                          3 bytes
# b:   [==========)                  3
# c:            [=====)              2
# d:            [===========)        2
# e:               [========)        1
# f:                     [========)  3
# g:                           [==)  4
# Live bytes peak at 7 (ops 3 and 8), yet every plan needs 8 (checked by brute force).
GAPPED = [(0, 1, 3), (0, 4, 3), (3, 5, 2), (3, 7, 2), (4, 7, 1), (6, 9, 3), (8, 9, 4)]


@both_paths
def test_search_proves_infeasible_above_the_lower_bound(native):
    problem = problem_of(GAPPED)
    assert problem.lower_bound() == 7
    assert brute_force_arena(problem) == 8
    infeasible = solve(problem.with_capacity(7), native)
    assert infeasible.status is SolveStatus.INFEASIBLE
    assert infeasible.stats["proved_lower_bytes"] == 8
    assert infeasible.stats["nodes"] > 0
    minimum = solve(problem, native)
    assert minimum.status is SolveStatus.OPTIMAL and minimum.arena_bytes == 8
    assert minimum.stats["proved_lower_bytes"] == 8
    assert solve(problem.with_capacity(8), native).status is SolveStatus.FEASIBLE


@both_paths
def test_buffers_overlapping_everyone_are_stacked_at_the_bottom(native):
    # op:   0  1  2  3
    # w:    [===========)    size 5, lives throughout → offset 0
    # v:       [=====)       size 2, overlaps everyone too → offset 5
    # a:    [=====)          size 3 ┐ two components above 7,
    # b:          [=====)    size 1 ┘ sharing offset 7
    problem = problem_of([(0, 4, 5), (1, 3, 2), (0, 2, 3), (2, 4, 1)], capacity=10)
    result = solve(problem, native)
    assert result.status is SolveStatus.OPTIMAL
    assert result.offsets.tolist() == [0, 5, 7, 7]
    assert result.stats["stacked_bytes"] == 7 and result.stats["components"] == 2


@both_paths
def test_independent_time_components_share_bytes(native):
    # op:   0  1 | 2  3
    # a:    [==) | [==)  c      a and c may share offset 0,
    # b:    [==) | [==)  d      b and d offset 4
    problem = problem_of([(0, 1, 4), (0, 1, 4), (2, 3, 4), (2, 3, 4)], capacity=8)
    result = solve(problem, native)
    assert result.status is SolveStatus.OPTIMAL
    assert sorted(result.offsets.tolist()) == [0, 0, 4, 4]
    assert result.stats["components"] == 2


@both_paths
def test_empty_and_single_buffer_problems(native):
    assert solve(problem_of([], capacity=0), native).status is SolveStatus.OPTIMAL
    single = solve(problem_of([(0, 1, 7)]), native)
    assert single.status is SolveStatus.OPTIMAL and single.offsets.tolist() == [0]


@both_paths
def test_lower_bound_above_capacity_is_infeasible_at_once(native):
    problem = problem_of([(0, 4, 6), (1, 3, 6)], capacity=11)
    result = solve(problem, native)
    assert result.status is SolveStatus.INFEASIBLE and result.stats["nodes"] == 0
    assert result.stats["proved_lower_bytes"] == 12


@both_paths
def test_decision_only_mode_falls_back_to_greedy(native):
    result = solve(problem_of(GAPPED), native, minimize=False)
    assert result.status in (SolveStatus.FEASIBLE, SolveStatus.OPTIMAL)  # greedy's plan
    assert result.stats["proved_lower_bytes"] == 8 and result.arena_bytes >= 8
    assert result.stats["decisions"] == 1


@both_paths
def test_timeout_returns_no_plan(native):
    problem = StaticProblem.from_trace(load_trace(DSA / "challenging-A.1048576.csv"),
                                       capacity=1048576)
    result = solve(problem, native, time_limit_s=0.05)
    assert result.status is SolveStatus.TIMEOUT
    assert result.offsets is None and result.arena_bytes is None
    assert result.solve_seconds < 2.0


@both_paths
def test_minimize_timeout_keeps_the_best_plan_and_what_was_proved(native):
    problem = StaticProblem.from_trace(load_trace(DSA / "challenging-A.1048576.csv"))
    result = solve(problem, native, time_limit_s=0.05)
    assert result.status is SolveStatus.FEASIBLE
    assert result.arena_bytes > problem.lower_bound()
    assert result.stats["proved_lower_bytes"] == problem.lower_bound()


@both_paths
def test_node_limit_stops_the_search_at_the_same_node_everywhere(native):
    """A node cap ends the search like the time limit, but after exactly that many nodes
    (one more is visited to notice it): the same answer on any machine, C or Python."""
    problem = StaticProblem.from_trace(load_trace(DSA / "challenging-A.1048576.csv"),
                                       capacity=1048576)
    result = solve(problem, native, max_nodes=2000, time_limit_s=60.0)
    assert result.status is SolveStatus.TIMEOUT and result.offsets is None
    assert result.stats["nodes"] == 2001
    minimized = solve(problem.with_capacity(None), native, max_nodes=2000, time_limit_s=60.0)
    assert minimized.status is SolveStatus.FEASIBLE
    assert minimized.stats["nodes"] <= 2001
    with pytest.raises(SolverError, match="max_nodes"):
        SolverParams(max_nodes=0)


def test_search_fits_answers_one_decision():
    problem = StaticProblem.from_trace(load_trace(DSA / "example.12.csv"))
    assert search_fits(problem, 12).status is SolveStatus.OPTIMAL
    assert search_fits(problem, 11).status is SolveStatus.INFEASIBLE


def test_native_required_but_missing_raises(monkeypatch):
    monkeypatch.setattr(exact, "_native_module", None)
    with pytest.raises(SolverError, match=r"native \(=True\)"):
        solve_exact(problem_of([(0, 1, 1)]), SolverParams(native=True))
    assert solve_exact(problem_of([(0, 1, 1)]), SolverParams()).stats["native"] is False


# ---------------------------------------------------------------- properties

@settings(max_examples=80, deadline=None)
@given(tiny_problems)
@example(problem_of(GAPPED))
def test_minimum_arena_matches_brute_force(problem):
    expected = brute_force_arena(problem)
    result = solve(problem, native=None)
    assert result.status is SolveStatus.OPTIMAL
    assert result.arena_bytes == expected
    assert solve(problem.with_capacity(expected), None).status in (
        SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)
    if expected > problem.lower_bound():
        below = solve(problem.with_capacity(expected - 1), None)
        assert below.status is SolveStatus.INFEASIBLE


medium_problems = st.lists(
    st.tuples(st.integers(0, 30), st.integers(1, 12), st.integers(1, 40)).map(
        lambda t: (t[0], t[0] + t[1], t[2])),
    min_size=1, max_size=40).map(problem_of)


@pytest.mark.skipif(not exact.native_available(), reason="C search not built")
@settings(max_examples=40, deadline=None)
@given(medium_problems, st.integers(-3, 3), st.integers(1, 80))
def test_c_and_python_searches_are_identical(problem, slack, max_nodes):
    """Same outcome, offsets, node and backtrack counts (capacities below the lower
    bound too: they exercise the failing branches), with a node cap as well."""
    component = exact.sweep(problem.starts.tolist(), problem.ends.tolist(),
                            problem.sizes.tolist())
    capacity = problem.lower_bound() + slack
    results = [exact.decide(component, capacity, float("inf"), native)
               for native in (False, True)]
    assert results[0] == results[1]
    assert results[0].outcome in (exact.FOUND, exact.NOT_FOUND)
    capped = [exact.decide(component, capacity, float("inf"), native, max_nodes)
              for native in (False, True)]
    assert capped[0] == capped[1]
    assert capped[0].outcome in (exact.FOUND, exact.NOT_FOUND, exact.TIMEOUT)
    assert capped[0].nodes <= max_nodes + 1
    for native in (False, True):
        whole = solve(problem, native)
        assert whole.status is SolveStatus.OPTIMAL
    assert np.array_equal(solve(problem, False).offsets, solve(problem, True).offsets)


def test_greedy_certificate_skips_the_search_when_greedy_meets_the_bound():
    problem = StaticProblem.from_trace(load_trace(DSA / "example.12.csv"))
    result = solve_exact(problem, SolverParams())
    assert result.status is SolveStatus.OPTIMAL and result.arena_bytes == 12
    assert result.stats["certificate"] == "greedy-size" and result.stats["nodes"] == 0


def test_time_running_out_while_preparing_the_search_is_a_timeout(monkeypatch):
    import cupool.planning.solvers.exact as exact

    problem = StaticProblem.from_trace(load_trace(DSA / "challenging-K.1048576.csv"),
                                       capacity=1048576)

    def too_slow(*args):
        raise exact.OutOfTime

    monkeypatch.setattr(exact, "sweep", too_slow)
    result = solve_exact(problem, SolverParams(time_limit_s=1))
    assert result.status is SolveStatus.TIMEOUT and result.offsets is None
    assert result.stats["certificate"] == "sweep-timeout"
    minimized = solve_exact(problem.with_capacity(None), SolverParams(time_limit_s=1))
    assert minimized.status is SolveStatus.FEASIBLE and minimized.offsets is not None
