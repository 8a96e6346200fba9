"""Segment checkpointing (:mod:`cupool.planning.budget.engine.checkpoint`): a segment's saved
activations are re-made once, at the first backward use of any of them, in producer order;
a buffer another segment's batch reads stays a checkpoint; plans pass the validator."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cupool.check import validate_plan
from cupool.core.vocabulary import PERSISTENT, Buffer, Op, RecomputeAction, SolveStatus, Trace
from cupool.io import load_trace
from cupool.planning.budget import BudgetParams
from cupool.planning.budget.auto import greedy_options, plan_greedy_with
from cupool.planning.budget.engine.checkpoint import (
    SavedActivation,
    plan_batches,
    saved_activations,
    split_segments,
)
from cupool.planning.budget.engine.greedy import GreedyOptions
from cupool.planning.budget.engine.state import PlanState
from cupool.planning.budget.recipes import with_recompute_recipes
from cupool.sim import cost_model, simulate
from tests.swap_cases import small_traces

GEN5 = cost_model("gen5")
TRACES = Path(__file__).resolve().parents[2] / "cupool" / "data" / "traces"


def chain_trace():
    """op:    0 fw   1 fw   2 fw   3 fw   4 bw   5 bw   6 bw
    X 0  persistent, uses 0 and 6
    A 1  [==========================================)   uses 0, 1, 6   (made by op 0 from X)
    B 2         [========================)              uses 1, 2, 5   (made by op 1 from A)
    C 3                [=========)                      uses 2, 3, 4   (gap of one op: kept)
    L 4                       [=====)                   uses 3, 4
    """
    ops = tuple(Op(f"op{i}", 10.0 * (i + 1), phase="fw" if i < 4 else "bw") for i in range(7))
    return with_recompute_recipes(Trace("chain", ops, (
        Buffer(0, 100, 0, 7, (0, 6), PERSISTENT),
        Buffer(1, 100, 0, 7, (0, 1, 6)),
        Buffer(2, 100, 1, 6, (1, 2, 5)),
        Buffer(3, 100, 2, 5, (2, 3, 4)),
        Buffer(4, 10, 3, 5, (3, 4)),
    )))


def _checkpointed(trace, budget, segments):
    """``auto``'s checkpoint member: ``segments`` segments, then the greedy at weight 0.2."""
    params = BudgetParams()
    options = greedy_options(params, 0.2, late_trigger="covering", segments=segments,
                             lazy_release=True)
    assert isinstance(options, GreedyOptions)
    return plan_greedy_with(trace, budget, GEN5, params, 0.0, options)


def test_one_segment_is_remade_once_at_its_first_backward_use():
    trace = chain_trace()
    assert saved_activations(trace) == [
        SavedActivation(producer_op=0, buffer_id=1, last_forward_use=1, first_backward_use=6),
        SavedActivation(producer_op=1, buffer_id=2, last_forward_use=2, first_backward_use=5)]
    batches = plan_batches(PlanState(trace, 10**6, GEN5), 1)
    assert [(b.point, [m.buffer_id for m in b.members], b.links) for b in batches] == [
        (5, [1, 2], [])]
    result = _checkpointed(trace, trace.lower_bound_bytes(), segments=1)
    plan = result.plan
    assert result.reason is None and plan.status == SolveStatus.FEASIBLE
    assert [a for a in plan.actions if isinstance(a, RecomputeAction)] == [
        RecomputeAction(1, 5), RecomputeAction(2, 5)]  # A before B: B is made from A
    assert validate_plan(trace, plan).valid
    # ops 0 and 1 run again, once each: 10 + 20 µs
    assert simulate(trace, plan, GEN5).recompute_us == pytest.approx(30.0)


def test_without_phases_the_forward_ends_at_the_op_with_most_bytes_alive():
    """The same trace with no op phases: ops 3 and 4 hold the most bytes (410), the turn is
    op 3, and the same two buffers are saved activations."""
    from dataclasses import replace

    trace = chain_trace()
    bare = replace(trace, ops=tuple(replace(op, phase=None) for op in trace.ops))
    assert saved_activations(bare) == saved_activations(trace)


def test_a_buffer_another_segments_batch_reads_stays_a_checkpoint():
    """Two segments: A alone would be re-made at op 6, but B's batch at op 5 reads A, so A
    stays resident (a checkpoint) and only B is re-made."""
    trace = chain_trace()
    batches = plan_batches(PlanState(trace, 10**6, GEN5), 2)
    assert [(b.point, [m.buffer_id for m in b.members]) for b in batches] == [(5, [2])]


def test_segments_hold_equal_bytes_or_equal_counts_and_keep_a_producer_whole():
    """Saved activations 1 (400 B, op 0), 2 and 3 (100 B each, both made by op 1), 4 (100 B,
    op 2), in two segments: equal bytes cut after 1; equal counts would cut between 2 and 3,
    but one op's outputs stay together, so the cut comes after 3."""
    saved = [SavedActivation(0, 1, 0, 9), SavedActivation(1, 2, 1, 9),
             SavedActivation(1, 3, 1, 9), SavedActivation(2, 4, 2, 9)]
    sizes = {1: 400}

    class Sized:
        @staticmethod
        def buffer(b):
            return Buffer(b, sizes.get(b, 100), 0, 1)

    assert [[m.buffer_id for m in seg] for seg in split_segments(Sized, saved, 2, "bytes")] == [
        [1], [2, 3, 4]]
    assert [[m.buffer_id for m in seg] for seg in split_segments(Sized, saved, 2, "count")] == [
        [1, 2, 3], [4]]
    with pytest.raises(ValueError, match="split 'flops'"):
        split_segments(Sized, saved, 2, "flops")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_traces(), st.sampled_from((0.5, 0.7, 0.9)), st.integers(1, 3))
def test_checkpointed_plans_of_small_traces_are_valid(trace, fraction, segments):
    planned = with_recompute_recipes(trace)
    budget = max(1, int(trace.lower_bound_bytes() * fraction))
    result = _checkpointed(planned, budget, segments)
    if result.feasible:
        report = validate_plan(planned, result.plan)
        assert report.valid, report.message
        assert simulate(planned, result.plan, GEN5, validate=False).feasible
    else:
        assert result.reason


def test_gpt2_at_half_its_peak_re_runs_each_segment_once():
    """GPT-2 bf16 at 50%: every saved activation of a segment is re-made at one op, the
    plan validates, and its recompute time is about one forward (not one per consumer)."""
    trace = with_recompute_recipes(load_trace(TRACES / "gpt2_train_b8_s1024_bf16.trace.json.gz"))
    budget = int(trace.lower_bound_bytes() * 0.5)
    result = _checkpointed(trace, budget, segments=4)
    plan = result.plan
    assert result.reason is None, result.reason
    assert validate_plan(trace, plan).valid
    points = {}
    for batch in plan_batches(PlanState(trace, budget, GEN5), 4):
        for m in batch.members:
            points[m.buffer_id] = batch.point
    assert len(set(points.values())) == 4
    remade = {a.buffer_id: a.before_op for a in plan.actions if isinstance(a, RecomputeAction)}
    assert all(remade.get(b) == point for b, point in points.items())
    sim = simulate(trace, plan, GEN5)
    forward = sum(op.duration_us for op in trace.ops if op.phase == "fw")
    assert sim.recompute_us < 1.0 * forward
