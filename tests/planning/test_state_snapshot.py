"""A copy of the greedy's planning state (:func:`~cupool.planning.budget.engine.snapshot.
copy_state`) plans on as the state itself would, and the boundary variants that share their
greedy states (:class:`~cupool.planning.budget.boundary.SharedWork`) plan as they do alone."""

from __future__ import annotations

import time

import numpy as np
import pytest

from cupool.check import validate_plan
from cupool.planning.budget import with_recompute_recipes
from cupool.planning.budget.boundary import (
    VARIANTS,
    SharedWork,
    offload_persistent,
    persistent_over,
    plan_boundary,
)
from cupool.planning.budget.engine import copies
from cupool.planning.budget.engine.greedy import GreedyOptions, candidate_gaps, cost_pass
from cupool.planning.budget.engine.snapshot import copy_state
from cupool.planning.budget.engine.state import PlanState
from cupool.planning.budget.params import BudgetParams
from cupool.planning.synthetic import lstm_trace
from cupool.sim.cost import cost_model


def _lstm(fraction: float):
    trace = with_recompute_recipes(lstm_trace(6, 2, seed=1, hidden=256, vocab=1024))
    return trace, int(trace.lower_bound_bytes() * fraction)


def _fingerprint(state: PlanState) -> tuple:
    """What a state's decisions and answers are made of."""
    queues = tuple((q.issues, q.lengths, q.dues, q.caches()) for q in (state.d2h, state.h2d))
    return (state.schedule, state.live.tobytes(), state.extra.tobytes(), queues,
            sorted(state.h2d_copies.items()),
            sorted(state.taken), state.recompute_us,
            {b: sorted(h) for b, h in state.holes.items()},
            {b: sorted(p) for b, p in state.pinned.items()})


def _greedy(state: PlanState, options: GreedyOptions) -> None:
    for include_persistent in (False, True):
        if state.live.max() > state.budget:
            cost_pass(state, candidate_gaps(state.trace, include_persistent), options)


@pytest.mark.parametrize("fraction", [0.5, 0.7])
@pytest.mark.parametrize("queue", ["compiled", "python"])
def test_a_copy_plans_on_as_the_state_and_leaves_it_alone(fraction, queue, monkeypatch):
    if queue == "python":  # the states' copy queues in Python (the compiled ones by default)
        monkeypatch.setattr(copies, "CopyEngine", copies.PythonCopyEngine)
    elif not copies.COMPILED_AVAILABLE:
        pytest.skip("_copyq is not built")
    trace, budget = _lstm(fraction)
    options = GreedyOptions(swap_weight=0.05, late_trigger="covering")
    state = PlanState(trace, budget, cost_model("gen5"), late_trigger="covering")
    offload_persistent(state, "working")
    half = copy_state(state)
    _greedy(state, options)
    _greedy(half, options)  # copied before the greedy: the same decisions
    assert _fingerprint(half) == _fingerprint(state)
    assert state.schedule.gaps, "the greedy took nothing: the case tests nothing"
    before = _fingerprint(state)
    again = copy_state(state)
    assert _fingerprint(again) == before
    # edits to the copy leave the original as it was
    gap = next(g for g in candidate_gaps(trace) if g not in again.taken and not g.wraps)
    again.hold(1, gap.prev_use, gap.next_use)
    again.h2d.add(0.0, 1.0, 2.0)
    again.taken.add(gap)
    assert _fingerprint(state) == before
    assert not np.array_equal(again.live, state.live)


def test_shared_variants_plan_as_alone():
    trace, budget = _lstm(0.6)
    assert persistent_over(trace, budget)
    cost, params = cost_model("gen5"), BudgetParams()
    shared = SharedWork()
    for variant in VARIANTS:
        alone = plan_boundary(trace, budget, cost, params, time.perf_counter(), variant)
        together = plan_boundary(trace, budget, cost, params, time.perf_counter(), variant,
                                 shared)
        assert together.plan.status == alone.plan.status
        assert together.plan.residencies == alone.plan.residencies
        assert together.plan.actions == alone.plan.actions
        assert {k: v for k, v in together.plan.stats.items() if k != "solve_seconds"} == {
            k: v for k, v in alone.plan.stats.items() if k != "solve_seconds"}
        if together.feasible:
            assert validate_plan(trace, together.plan).valid
    # one decision per variant here, and some variants take the same persistent swaps
    assert len(shared._greedy) < len(VARIANTS), "no variant reused another's greedy state"
