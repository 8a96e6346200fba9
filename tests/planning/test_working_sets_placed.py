"""The last resort's byte walk (:mod:`cupool.planning.budget.working_sets_placed`): it keeps
at most the cache's bytes resident at every op whatever its rules, its placed residencies
make validated plans, a buffer evicted before its next use is copied in early again
where the rules say so, and at the largest working set of the near-budget shape (where the
range walk repacks at the tightest op) the member's plan is a byte walk's and faster than
the range walk's alone."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cupool.check import validate_plan
from cupool.core.vocabulary import SwapIn
from cupool.planning.budget import working_sets
from cupool.planning.budget.working_sets import (
    kept_persistent,
    needed_ops,
    plan_working_sets,
    required_bytes,
)
from cupool.planning.budget.working_sets_placed import RULES, ByteRules, ByteWalk, placed_walk
from cupool.planning.shapes import near_budget_trace
from cupool.sim import cost_model, simulate
from tests.planning.test_always_a_plan import COSTS, QUICK, _budget, any_traces

GEN5 = cost_model("gen5")


def _resident_bytes(trace, residencies) -> np.ndarray:
    load = np.zeros(trace.num_ops, dtype=np.int64)
    for r in residencies:
        load[r.start:r.end] += trace.buffer(r.buffer_id).size
    return load


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trace=any_traces(), share=st.floats(0.0, 1.0), rules=st.sampled_from(RULES))
def test_the_byte_walk_keeps_at_most_the_cache_resident(trace, share, rules):
    needs = needed_ops(trace)
    capacity = _budget(trace, share)
    walk = ByteWalk(trace, capacity, needs, set(), COSTS["gen4 75us"], rules)
    walk.run()
    assert int(_resident_bytes(trace, walk.residencies).max()) <= capacity
    held = {(r.buffer_id, op) for r in walk.residencies for op in range(r.start, r.end)}
    assert all((b, op) in held for b, ops in needs.items() for op in ops)


@pytest.mark.parametrize("keep", [False, True])
def test_placed_byte_walks_at_the_largest_working_set_make_valid_plans(keep):
    trace = near_budget_trace(1, ops=12, big=2, big_bytes=96 << 20, small=12, weights=4)
    budget = int(required_bytes(trace).max())
    needs = needed_ops(trace)
    kept = kept_persistent(trace, budget, GEN5, needs) if keep else []
    capacity = budget - sum(trace.buffer(b).size for b in kept)
    placed = [placed_walk(trace, capacity, needs, set(kept), GEN5, rules) for rules in RULES]
    assert any(p is not None for p in placed)
    for p in placed:
        if p is not None:
            assert all(r.offset + trace.buffer(r.buffer_id).size <= capacity
                       for r in p.residencies)
    result = plan_working_sets(trace, budget, GEN5, QUICK, time.perf_counter(), keep)
    report = validate_plan(trace, result.plan)
    assert report.valid, (report.rule, report.message)


def test_at_the_tightest_op_the_byte_walk_beats_the_range_walk(monkeypatch):
    trace = near_budget_trace(1)
    budget = int(required_bytes(trace).max())  # op 9's working set, to the byte
    result = plan_working_sets(trace, budget, GEN5, QUICK, time.perf_counter())
    report = validate_plan(trace, result.plan)
    assert report.valid, (report.rule, report.message)
    assert result.plan.stats["repacks"] == 0 and "byte_walk" in result.plan.stats
    monkeypatch.setattr(working_sets, "PLACED_MAX_BUFFERS", 0)  # the range walk alone
    ranges = plan_working_sets(trace, budget, GEN5, QUICK, time.perf_counter())
    assert ranges.plan.stats["repacks"] > 0
    assert (simulate(trace, result.plan, GEN5).iteration_us
            < simulate(trace, ranges.plan, GEN5).iteration_us)


def test_a_buffer_evicted_before_its_next_use_is_copied_in_early_when_requeued():
    # near-budget-1 at half its lower bound: buffer 0 (312 MiB) is resident when its copy
    # in would have been due to start, and leaves after; op 19 reads it again
    trace = near_budget_trace(1)
    budget = int(0.5 * trace.lower_bound_bytes())
    needs = needed_ops(trace)
    triggers = {}
    for requeue in (False, True):
        walk = ByteWalk(trace, budget, needs, set(), cost_model("gen4"),
                        ByteRules(1.0, False, requeue))
        walk.run()
        triggers[requeue] = [a.trigger_op for a in walk.actions
                             if isinstance(a, SwapIn) and a.buffer_id == 0]
    assert triggers[False] == [19]
    assert len(triggers[True]) == 1 and triggers[True][0] < 19
