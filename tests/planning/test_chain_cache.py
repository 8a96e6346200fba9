"""The planning state's caches: after any sequence of swaps, recomputes and segment
batches, every cached recompute-chain walk equals the walk computed afresh,
:meth:`PlanState.chain` answers as a state without caches does and the cached
over-budget ops are those of ``live``; a copy set aside in a planner's copy queue goes
back as ``remove`` then ``add`` would put it."""

from __future__ import annotations

import copy as copy_module
import random

import numpy as np
import pytest

from cupool.core.vocabulary import PERSISTENT
from cupool.planning.budget.engine.checkpoint import apply_batches
from cupool.planning.budget.engine.copies import CopyEngine, QueuedCopy
from cupool.planning.budget.engine.greedy import GreedyOptions, apply_option, evaluate
from cupool.planning.budget.engine.greedy import candidate_gaps as all_gaps
from cupool.planning.budget.engine.records import WRAP, ChainWalk, Hole, HoleIndex
from cupool.planning.budget.engine.schedule import (
    RECOMPUTE,
    SWAP,
    base_interval,
    gaps_of,
    trace_index,
)
from cupool.planning.budget.engine.state import PlanState
from cupool.planning.budget.engine.walks import walk_python
from cupool.planning.budget.recipes import with_recompute_recipes
from cupool.planning.synthetic import lstm_trace
from cupool.sim import cost_model

GEN5 = cost_model("gen5")


def fresh_walk(state: PlanState, buffer_id: int, op: int) -> ChainWalk:
    """The walk as an uncached state computes it."""
    swapped, cost, links, _read = walk_python(state, buffer_id, op)
    return ChainWalk(swapped, cost, links)


def uncached_chain(state: PlanState, buffer_id: int, op: int):
    """:meth:`PlanState.chain` with the caches emptied first (restored afterwards)."""
    walks, reading = state._walks, state._walks_reading
    state._walks, state._walks_reading = {}, {}
    try:
        return state.chain(buffer_id, op)
    finally:
        state._walks, state._walks_reading = walks, reading


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("segments", [0, 2])
def test_cached_walks_match_fresh_ones_after_random_changes(seed, segments):
    trace = with_recompute_recipes(lstm_trace(4, 2, seed=seed, hidden=64, vocab=128))
    budget = int(trace.lower_bound_bytes() * 0.5)
    state = PlanState(trace, budget, GEN5, max_chain=4, lazy_release=bool(segments))
    if segments:
        apply_batches(state, segments)
    options = GreedyOptions(swap_weight=[0.0, 0.2, 1.0][seed % 3], max_chain=4)
    rng = random.Random(seed)
    gaps = [g for g in all_gaps(trace) if g not in state.taken]
    rng.shuffle(gaps)
    applied = compared = 0
    for gap in gaps:
        option = evaluate(state, gap, options)  # fills the cache on the current state
        if option is not None and rng.random() < 0.5:
            apply_option(state, gap, option)
            state.taken.add(gap)
            applied += 1
        over = [int(op) for op in np.flatnonzero(state.live > budget)]
        assert state.over_budget_ops() == over
        low, high = sorted((gap.prev_use, gap.next_use))
        assert state.over_budget_count(low, high) == sum(low <= op < high for op in over)
        for (buffer_id, op), walk in list(state._walks.items()):
            assert walk == fresh_walk(state, buffer_id, op), (buffer_id, op)
            compared += 1
        for probe in rng.sample(gaps, 3):
            if probe.next_use > probe.prev_use:
                assert (state.chain(probe.buffer_id, probe.next_use)
                        == uncached_chain(state, probe.buffer_id, probe.next_use))
    assert applied > 5 and compared > 100, (applied, compared)


@pytest.mark.parametrize("seed", range(6))
def test_a_copy_set_aside_and_put_back_leaves_the_queue_as_remove_then_add(seed):
    """Issue times from a few values, so that copies issued at the same time are common:
    putting one back where it was restores the cached finishes and tolerances, and one with
    a copy of the same issue time behind it goes behind that copy, as ``add`` puts it."""
    rng = random.Random(seed)
    engine = CopyEngine()
    copies = []
    for _ in range(30):
        copy = QueuedCopy(float(rng.choice([0, 5, 10, 15, 40])), float(rng.randint(1, 9)),
                          float(rng.randint(20, 120)))
        engine.add(*copy)
        copies.append(copy)
        engine.fits(float(rng.randint(0, 50)), 3.0, 200.0)  # the tolerances are cached

    def queue(e: CopyEngine):
        return e.issues, e.lengths, e.dues, e.finishes(), e.tolerances()

    for copy in copies:
        expected = copy_module.deepcopy(engine)
        expected.remove(copy)
        asked = [expected.fits(t, 4.0, 90.0) for t in (0.0, 12.0, 30.0)]
        expected.add(*copy)
        aside = engine.set_aside(copy)
        assert [engine.fits(t, 4.0, 90.0) for t in (0.0, 12.0, 30.0)] == asked
        engine.put_back(aside)
        assert queue(engine) == queue(expected)
        fresh = CopyEngine()
        for issue, length, due in zip(engine.issues, engine.lengths, engine.dues, strict=True):
            fresh.add(issue, length, due)
        assert queue(engine) == queue(fresh)


@pytest.mark.parametrize("seed", range(12))
def test_a_hole_index_kept_up_to_date_is_the_index_made_afresh(seed):
    """Holes added one at a time (wrap holes, empty ones and overlapping ones among them,
    late or never): the index updated in place answers every op as the index made from
    all of them, and equals it."""
    rng = random.Random(seed)
    ops = 300
    kinds = [SWAP, RECOMPUTE, SWAP, WRAP] if seed % 2 else [SWAP, RECOMPUTE]
    empty = [0.0, 0.02, 0.1][seed % 3]
    holes: list[Hole] = []
    index = None
    for _ in range(60):
        start = rng.randrange(ops - 10)
        length = 0 if rng.random() < empty else rng.choice([1, 2, 3, 5, 8])
        hole = Hole(start, start + length, rng.choice(kinds))
        holes.append(hole)
        index = HoleIndex.of(holes) if index is None else index.added(hole)
        if index is None:
            index = HoleIndex.of(holes)
        fresh = HoleIndex.of(holes)
        assert index == fresh
        assert [index.at(op) for op in range(ops)] == [fresh.at(op) for op in range(ops)]


def test_pins_answer_as_the_pinned_sets_do():
    """The first pin after an op and whether a hole would be blocked, read from the sorted
    pins, are what the pinned sets give."""
    trace = with_recompute_recipes(lstm_trace(4, 2, seed=1, hidden=64, vocab=128))
    state = PlanState(trace, int(trace.lower_bound_bytes() * 0.5), GEN5, max_chain=4)
    options = GreedyOptions(swap_weight=1.0, max_chain=4)
    for gap in all_gaps(trace):
        option = evaluate(state, gap, options)
        if option is not None and option.mode == RECOMPUTE:
            apply_option(state, gap, option)
            state.taken.add(gap)
    assert state.pinned
    n = state.n
    for buffer_id, pins in state.pinned.items():
        for op in range(-1, n + 1):
            after = [p for p in pins if p > op]
            assert state.first_pin_after(buffer_id, op) == (min(after) if after else None)
        for a in range(n + 1):
            for b in range(n + 1):
                expected = (any(p >= a or p < b for p in pins) if b <= a
                            else any(a <= p < b for p in pins))
                assert state.hole_blocked(buffer_id, a, b) == expected


def test_a_trace_index_is_made_once_and_holds_what_the_trace_gives():
    trace = with_recompute_recipes(lstm_trace(4, 2, seed=2, hidden=64, vocab=128))
    index = trace_index(trace)
    assert trace_index(trace) is index
    assert list(index.gaps) == [g for b in trace.buffers for g in gaps_of(trace, b)]
    assert list(index.temporary_gaps) == [g for b in trace.buffers if b.kind != PERSISTENT
                                          for g in gaps_of(trace, b)]
    live = np.zeros(trace.num_ops, dtype=np.int64)
    for b in trace.buffers:
        start, end = base_interval(trace, b)
        assert index.base[b.id] == (start, end)
        live[start:end] += b.size
    assert np.array_equal(index.base_live, live)
    assert not index.base_live.flags.writeable
    assert index.sizes == {b.id: b.size for b in trace.buffers}
    assert index.recipes == {b.id: (b.recompute.op, b.recompute.inputs)
                             for b in trace.buffers if b.recompute is not None}
