"""The genetic solver: exact operators, every stop rule, determinism per seed, and never
worse than greedy-size (named instances and a Hypothesis property)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_greedy import dsa_problem, problems

from cupool.check import validate_offsets
from cupool.core.vocabulary import SolveStatus
from cupool.io import load_trace
from cupool.planning.problem import StaticProblem
from cupool.planning.solvers.base import SolverParams
from cupool.planning.solvers.genetic import (
    mutation_rate,
    order_crossover,
    solve_genetic,
    swap_mutation,
)
from cupool.planning.solvers.greedy import solve_greedy_size
from cupool.planning.synthetic import small_problem
from tests.conftest import DSA, TRACES

QUICK = dict(population=8, generations=15, stall_generations=15, time_limit_s=60.0)


class _Cuts:
    """A stand-in generator whose ``choice`` returns fixed crossover cut points."""

    def __init__(self, *cuts):
        self.cuts = list(cuts)

    def choice(self, n, size, replace):
        return np.array(self.cuts)


def test_order_crossover_keeps_a_slice_and_fills_in_the_other_parents_order():
    first = np.array([3, 1, 4, 0, 2, 5])
    second = np.array([0, 1, 2, 3, 4, 5])
    assert order_crossover(first, second, _Cuts(4, 2)).tolist() == [2, 3, 4, 0, 5, 1]
    assert order_crossover(first, second, _Cuts(0, 6)).tolist() == first.tolist()
    assert order_crossover(first, second, _Cuts(3, 3)).tolist() == second.tolist()


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_order_crossover_and_swap_mutation_keep_a_permutation(n, seed):
    rng = np.random.default_rng(seed)
    child = order_crossover(rng.permutation(n), rng.permutation(n), rng)
    swap_mutation(child, 0.3, rng)
    assert sorted(child.tolist()) == list(range(n))


def test_swap_mutation_at_rate_zero_changes_nothing():
    order = np.arange(10)
    swap_mutation(order, 0.0, np.random.default_rng(0))
    assert order.tolist() == list(range(10))


def test_mutation_rate_grows_linearly_over_the_generations():
    params = SolverParams(generations=5, mutation_rate_start=0.02, mutation_rate_end=0.10)
    assert [round(mutation_rate(params, g), 6) for g in range(1, 6)] == [
        0.02, 0.04, 0.06, 0.08, 0.10]
    assert mutation_rate(SolverParams(generations=1), 1) == SolverParams().mutation_rate_start


@pytest.mark.parametrize("name", ["A", "E"])
def test_same_seed_same_plan_and_never_worse_than_greedy_size(name):
    p = dsa_problem(DSA / f"challenging-{name}.1048576.csv")
    params = SolverParams(seed=7, **QUICK)
    first, again = solve_genetic(p, params), solve_genetic(p, params)
    assert np.array_equal(first.offsets, again.offsets)
    assert first.stats["generations"] == again.stats["generations"] == 15
    assert first.stats["stop"] == "generations"
    greedy = solve_greedy_size(p, params)
    assert first.stats["greedy_arena_bytes"] == greedy.arena_bytes
    assert first.arena_bytes < greedy.arena_bytes
    assert validate_offsets(p.with_capacity(None), first.offsets).valid


def test_stops_at_the_lower_bound_without_breeding():
    p = StaticProblem.from_trace(load_trace(TRACES[3]))      # mobilenetv2: greedy is optimal
    result = solve_genetic(p, SolverParams())
    assert result.status == SolveStatus.OPTIMAL
    assert (result.stats["stop"], result.stats["generations"]) == ("lower_bound", 0)
    assert result.stats["evaluations"] <= 5


def test_stops_after_stall_generations_without_improvement():
    p = dsa_problem(DSA / "challenging-A.1048576.csv")
    result = solve_genetic(p, SolverParams(population=6, generations=300, stall_generations=3,
                                           time_limit_s=60.0))
    assert result.stats["stop"] == "stall"
    assert result.stats["generations"] == result.stats["best_generation"] + 3


def test_time_limit_cuts_the_run_short_and_still_returns_the_greedy_plan_or_better():
    p = dsa_problem(DSA / "challenging-K.1048576.csv")
    result = solve_genetic(p, SolverParams(time_limit_s=0.05))
    assert result.stats["stop"] == "time_limit"
    assert result.solve_seconds < 1.0
    assert result.arena_bytes <= solve_greedy_size(p, SolverParams()).arena_bytes


@pytest.mark.parametrize("n", [0, 1])
def test_no_buffers_and_one_buffer(n):
    p = small_problem(seed=3, n=n)
    result = solve_genetic(p, SolverParams())
    assert result.offsets.tolist() == [0] * n
    assert result.status == SolveStatus.OPTIMAL


@settings(max_examples=40, deadline=None)
@given(problems(max_buffers=14), st.integers(0, 1000))
def test_valid_and_never_worse_than_greedy_size(p, seed):
    params = SolverParams(seed=seed, population=6, generations=4, stall_generations=4,
                          time_limit_s=60.0)
    result = solve_genetic(p, params)
    assert validate_offsets(p, result.offsets).valid
    assert p.lower_bound() <= result.arena_bytes <= solve_greedy_size(p, params).arena_bytes
    assert np.array_equal(result.offsets, solve_genetic(p, params).offsets)
