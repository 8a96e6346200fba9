"""The best-fit heap sweep compiled (``_bestfit.c``) against its Python loop: the same
offsets on generated problems (crowded, touching, heaps that grow into a free top), on the
residencies of a budget plan, and on the cases the compiled sweep leaves to Python."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cupool.check import validate_offsets
from cupool.planning.problem import StaticProblem
from cupool.planning.solvers import best_fit
from cupool.planning.solvers.base import SolverParams
from cupool.planning.synthetic import lstm_problem, random_problem

pytestmark = pytest.mark.skipif(not best_fit.COMPILED_AVAILABLE,
                                reason="the C extension _bestfit is not built")

COMPILED, PYTHON = SolverParams(native=True), SolverParams(native=False)


@st.composite
def problems(draw):
    """Lifetimes from a few ops and sizes from a few values: ranges that touch and merge,
    free ranges that fit exactly or tie on size, and frees at the heap's top."""
    num_ops = draw(st.integers(1, 30))
    sizes = draw(st.lists(st.integers(1, 48), min_size=1, max_size=5))
    buffers = []
    for _ in range(draw(st.integers(1, 80))):
        start = draw(st.integers(0, num_ops - 1))
        end = draw(st.integers(start + 1, min(num_ops, start + draw(st.integers(1, 12)))))
        buffers.append((start, end, draw(st.sampled_from(sizes))))
    starts, ends, sizes = zip(*buffers, strict=True)
    return StaticProblem.from_arrays(starts, ends, sizes, num_ops=num_ops)


def _same(problem: StaticProblem) -> np.ndarray:
    compiled = best_fit.solve_best_fit(problem, COMPILED).offsets
    python = best_fit.solve_best_fit(problem, PYTHON).offsets
    assert np.array_equal(compiled, python)
    assert validate_offsets(problem.with_capacity(None), compiled).valid
    return compiled


@settings(max_examples=150, deadline=None)
@given(problems())
def test_the_compiled_sweep_places_as_the_python_loop(problem):
    _same(problem)


@pytest.mark.parametrize("seed", range(3))
def test_the_compiled_sweep_places_random_and_lstm_problems_as_python(seed):
    _same(random_problem(2000, seed))
    _same(lstm_problem(steps=20, layers=2, seed=seed))


def test_a_freed_top_is_where_the_heap_grows_from():
    # A [0, 4) and B [4, 8) at op 0; B freed at op 1 leaves [4, 8) free at the top; C (6
    # bytes) fits no free range but grows the heap from 4, not from 8
    problem = StaticProblem.from_arrays([0, 0, 1], [2, 1, 2], [4, 4, 6], num_ops=2)
    assert _same(problem).tolist() == [0, 4, 4]


def test_empty_buffers_and_lifetimes_take_the_python_loop():
    problem = StaticProblem.from_arrays([0, 1, 1], [2, 1, 2], [4, 2, 2], num_ops=2)
    assert not best_fit._compiled(problem, SolverParams())
    problem = StaticProblem.from_arrays([0, 0], [1, 1], [4, 0], num_ops=1)
    assert not best_fit._compiled(problem, SolverParams())
    with pytest.raises(ValueError, match="every size must be > 0"):
        best_fit._bestfit.sweep(problem.starts, problem.ends, problem.sizes,
                                np.arange(2), np.arange(2), np.zeros(2, dtype=np.int64))
