"""The compiled chain walk (``_chainwalk``) answers as the pure-Python one
(:func:`~cupool.planning.budget.engine.walks.walk_python`): the same swapped inputs, cost,
links and reads, at every op of every buffer with a recipe, on states a random sequence
of swaps, recomputes and segment batches left behind."""

from __future__ import annotations

import random

import pytest

from cupool.planning.budget.engine import walks
from cupool.planning.budget.engine.checkpoint import apply_batches
from cupool.planning.budget.engine.greedy import GreedyOptions, apply_option, evaluate
from cupool.planning.budget.engine.greedy import candidate_gaps as all_gaps
from cupool.planning.budget.engine.records import WRAP, Hole
from cupool.planning.budget.engine.schedule import RECOMPUTE, SWAP
from cupool.planning.budget.engine.state import PlanState
from cupool.planning.budget.recipes import with_recompute_recipes
from cupool.planning.synthetic import lstm_trace
from cupool.sim import cost_model

GEN5 = cost_model("gen5")

pytestmark = pytest.mark.skipif(not walks.COMPILED_AVAILABLE, reason="_chainwalk is not built")


def assert_walks_agree(state: PlanState, tables, rng: random.Random, samples: int) -> int:
    """Compare both walks at ``samples`` random (buffer with a recipe, op) pairs, and at
    every op of one such buffer; returns how many pairs had a walk that reads something."""
    recipes = sorted(state._recipes)
    pairs = [(rng.choice(recipes), rng.randrange(state.n)) for _ in range(samples)]
    one = rng.choice(recipes)
    pairs += [(one, op) for op in range(state.n)]
    read = 0
    for buffer_id, op in pairs:
        compiled = walks.walk(state, tables, buffer_id, op)
        assert compiled == walks.walk_python(state, buffer_id, op), (buffer_id, op)
        read += bool(compiled[3])
    # where a buffer has no hole index yet, the compiled walk asks walks.hole_status
    indices = state._hole_index
    state._hole_index = {}
    try:
        for buffer_id, op in pairs[:20]:
            assert walks.walk(state, tables, buffer_id, op) == walks.walk_python(
                state, buffer_id, op), (buffer_id, op)
    finally:
        state._hole_index = indices
    return read


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("segments", [0, 2])
def test_compiled_walk_matches_python_after_random_changes(seed, segments):
    trace = with_recompute_recipes(lstm_trace(4, 2, seed=seed, hidden=64, vocab=128))
    budget = int(trace.lower_bound_bytes() * 0.5)
    state = PlanState(trace, budget, GEN5, max_chain=[2, 4, 6][seed],
                      lazy_release=bool(segments))
    tables = walks.walk_tables(trace)
    assert tables is not None and state._walk_tables is tables
    if segments:
        apply_batches(state, segments)
    options = GreedyOptions(swap_weight=[0.0, 0.2, 1.0][seed], max_chain=state.max_chain)
    rng = random.Random(seed)
    gaps = [g for g in all_gaps(trace) if g not in state.taken]
    rng.shuffle(gaps)
    compared = assert_walks_agree(state, tables, rng, 200)
    applied = 0
    for k, gap in enumerate(gaps):
        option = evaluate(state, gap, options)
        if option is not None and rng.random() < 0.5:
            apply_option(state, gap, option)
            state.taken.add(gap)
            applied += 1
        if k % 8 == 0:
            compared += assert_walks_agree(state, tables, rng, 60)
    assert applied and compared
    assert any(state.holes.values()) and (segments == 0 or any(state.transient.values()))


def test_tables_refuse_ids_outside_the_arrays():
    import numpy as np

    ints = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    with pytest.raises(ValueError, match="no buffer id"):
        walks._chainwalk.Tables(ints(0, -1), ints(0, 1, 1), ints(5), ints(0, 0), ints(0, 0),
                                ints(1, 1), ints(0, 0), ints(1, 1))
    tables = walks._chainwalk.Tables(ints(0, -1), ints(0, 1, 1), ints(1), ints(0, 0),
                                     ints(0, 0), ints(1, 1), ints(0, 0), ints(1, 1))
    with pytest.raises(KeyError):
        tables.walk([1.0], {}, {}, {}, walks.hole_status, None, 7, 0, 3)
    # buffer 0 is re-made from buffer 1, which is away at op 2 (past its lifetime) and
    # has no recipe
    assert tables.walk([1.5], {}, {}, {}, walks.hole_status, None, 0, 2, 3) == ((), None, (), (1,))


@pytest.mark.parametrize("kinds", [(SWAP, RECOMPUTE), (RECOMPUTE, WRAP), ("other", SWAP)])
def test_compiled_walk_reads_overlapping_and_wrap_holes(kinds):
    """Holes sharing ops (a :class:`~.records.HoleIndex` that is not disjoint), a wrap
    hole and a hole of another kind, on every input of every recipe, at every op."""
    trace = with_recompute_recipes(lstm_trace(3, 2, seed=4, hidden=64, vocab=128))
    state = PlanState(trace, int(trace.lower_bound_bytes() * 0.5), GEN5, max_chain=4)
    tables = walks.walk_tables(trace)
    rng = random.Random(len(kinds[0]))
    inputs = sorted({x for _op, xs in state._recipes.values() for x in xs})
    for x in rng.sample(inputs, min(12, len(inputs))):
        a = rng.randrange(state.n)
        b = rng.randrange(a, state.n) + 1
        state._add_hole(x, Hole(a, b, kinds[0]))
        state._add_hole(x, Hole(max(0, a - 2), max(0, a - 2) + (b - a) // 2 + 1, kinds[1]))
        state._residency_changed(x, 0, state.n)
    indices = [state._holes_of(x) for x, holes in state.holes.items() if holes]
    if WRAP in kinds:
        assert any(index.wrap is not None for index in indices)
    else:
        assert any(not index.disjoint for index in indices)
    for buffer_id in sorted(state._recipes):
        for op in range(0, state.n, 3):
            assert walks.walk(state, tables, buffer_id, op) == walks.walk_python(
                state, buffer_id, op), (buffer_id, op)


@pytest.mark.parametrize("seed", [0, 1])
def test_compiled_state_caches_what_a_python_state_caches(seed):
    """Two states, one walking in C (kept by ``walk_into``) and one in Python, through the
    same evaluations and decisions: the same options, and the same walks cached under the
    same keys of the same buffers."""
    trace = with_recompute_recipes(lstm_trace(4, 2, seed=seed, hidden=64, vocab=128))
    budget = int(trace.lower_bound_bytes() * 0.5)
    compiled, python = (PlanState(trace, budget, GEN5, max_chain=4) for _ in range(2))
    python._walk_tables = None
    options = GreedyOptions(swap_weight=0.2, max_chain=4)
    rng = random.Random(seed)
    gaps = list(all_gaps(trace))
    rng.shuffle(gaps)
    for gap in gaps:
        option = evaluate(compiled, gap, options)
        assert option == evaluate(python, gap, options)
        if option is not None and rng.random() < 0.5:
            for state in (compiled, python):
                apply_option(state, gap, option)
                state.taken.add(gap)
        assert compiled._walks == python._walks
        assert compiled._walks_reading == python._walks_reading
    assert compiled._walks and compiled.schedule.gaps
