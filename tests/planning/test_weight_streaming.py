"""Clean data is dropped, not copied: read-only weights stream through an inference step
(in ahead of their use on the copy stream, dropped after it), a dirty buffer is copied,
and with random ``writes`` every plan ``auto`` returns is valid and simulates at or above
the bound."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cupool.check import validate_swap_plan
from cupool.core.vocabulary import PERSISTENT, Buffer, Op, SwapIn, SwapOut, Trace
from cupool.planning import make_plan
from cupool.sim import simulate
from cupool.sim.bounds import overhead_lower_bound
from tests.swap_cases import replay_on_emulated

MB = 1 << 20


def layered_inference(writes, layers: int = 6) -> Trace:
    """``layers`` layers of 100 µs, each reading its 2 MiB weight (``writes`` of every
    weight) and the 0.5 MiB activation of the layer before (a 2 MiB copy takes about
    40 µs on Gen5)::

        op:        0       1       2     ...
        w0, w1, w2 r       r       r          (persistent; read-only when writes == ())
        a0         [w======r)
        a1                 [w======r)
    """
    ops = tuple(Op(f"layer{i}", duration_us=100.0) for i in range(layers))
    weights = [Buffer(i, 2 * MB, 0, layers, (i,), PERSISTENT, f"w{i}", writes=writes)
               for i in range(layers)]
    activations = [Buffer(100 + i, MB // 2, i, min(i + 2, layers),
                          tuple(range(i, min(i + 2, layers))), name=f"a{i}")
                   for i in range(layers)]
    return Trace("layered-inference", ops, tuple(weights + activations))


BUDGET = 8 * MB  # of a 13 MiB peak: about half the weights must be off the device


def _plan(trace, budget):
    planned = make_plan(trace, budget, policy="auto")
    assert planned.fits, planned.reason
    report = validate_swap_plan(planned.trace, planned.plan)
    assert report.valid, (report.rule, report.message)
    return planned


def test_read_only_weights_stream_with_no_copy_out():
    trace = layered_inference(writes=())
    budget = BUDGET
    planned = _plan(trace, budget)
    outs = [a for a in planned.plan.actions if isinstance(a, SwapOut)]
    assert outs and all(a.drop for a in outs)
    sim = simulate(planned.trace, planned.plan)
    assert all(direction == "h2d" for _b, direction, *_ in sim.copies)
    bound = overhead_lower_bound(planned.trace, budget)
    assert bound.feasible and sim.overhead >= bound.overhead - 1e-9
    assert sim.overhead <= 2 * bound.overhead + 0.05
    unknown = _plan(layered_inference(writes=None), budget)
    assert not any(a.drop for a in unknown.plan.actions if isinstance(a, SwapOut))
    assert sim.overhead < simulate(unknown.trace, unknown.plan).overhead


def test_a_streamed_plan_runs_byte_exact_without_a_copy_out():
    pytest.importorskip("cupy")
    trace = layered_inference(writes=())
    planned = _plan(trace, BUDGET)
    _results, stats = replay_on_emulated(planned.trace, planned.plan, size_scale=4096)
    assert stats["bytes.d2h"] == 0 and stats["bytes.h2d"] > 0


def test_an_early_weight_is_prefetched_in_the_previous_iterations_tail():
    pytest.importorskip("cupy")
    trace = layered_inference(writes=())
    planned = _plan(trace, 6 * MB)  # little room: the first layers' weights stream too
    n = trace.num_ops
    tails = [a for a in planned.plan.actions if isinstance(a, SwapIn)
             and a.trigger_op > trace.buffer(a.buffer_id).uses[-1]]
    assert tails and all(a.due_op == n - 1 for a in tails)
    for a in tails:  # resident across the boundary: from op 0 and again from the trigger
        spans = sorted((r.start, r.end) for r in planned.plan.residencies
                       if r.buffer_id == a.buffer_id)
        assert spans[0][0] == 0 and spans[-1] == (a.trigger_op, n)
    sim = simulate(planned.trace, planned.plan)
    assert all(direction == "h2d" for _b, direction, *_ in sim.copies)
    _results, stats = replay_on_emulated(planned.trace, planned.plan, size_scale=4096)
    assert stats["bytes.d2h"] == 0


def test_a_buffer_written_after_its_swap_in_is_copied_not_dropped():
    trace = layered_inference(writes=())
    planned = _plan(trace, BUDGET)
    dropped = sorted(a.buffer_id for a in planned.plan.actions
                     if isinstance(a, SwapOut) and a.drop)
    assert dropped
    w = dropped[0]
    # that weight is now written at its use: its drop would lose the write
    dirty = replace(trace, buffers=tuple(replace(b, writes=b.uses) if b.id == w else b
                                         for b in trace.buffers))
    report = validate_swap_plan(dirty, planned.plan)
    assert not report.valid and report.rule == "drop"
    assert f"buffer {w}" in report.message and f"op {w} writes it" in report.message
    replanned = _plan(dirty, BUDGET)
    outs = {a.buffer_id: a.drop for a in replanned.plan.actions if isinstance(a, SwapOut)}
    assert outs.get(w) is not True


def test_a_drop_without_a_host_copy_is_refused():
    trace = layered_inference(writes=())
    planned = _plan(trace, BUDGET)
    # a temporary's first residency is where it is produced: there is no host copy to keep
    a0 = trace.buffer(100)
    residencies = [r for r in planned.plan.residencies if r.buffer_id == 100]
    assert len(residencies) == 1
    bogus = replace(planned.plan, actions=(*planned.plan.actions,
                                           SwapOut(100, a0.uses[-1], drop=True)))
    report = validate_swap_plan(planned.trace, bogus)
    assert not report.valid and "buffer 100" in report.message


@st.composite
def written_traces(draw):
    """Small traces with random ``writes`` (unknown, none, some of the uses), persistent
    state from none to most of the memory."""
    n = draw(st.integers(3, 9))
    buffers = []

    def writes_of(uses):
        mode = draw(st.sampled_from(["unknown", "none", "some"]))
        if mode == "unknown":
            return None
        if mode == "none":
            return ()
        return tuple(sorted(draw(st.sets(st.sampled_from(uses), max_size=len(uses)))))

    for i in range(draw(st.integers(1, 7))):
        start = draw(st.integers(0, n - 1))
        end = draw(st.integers(start + 1, n))
        uses = sorted(draw(st.sets(st.sampled_from(range(start, end)), min_size=1,
                                   max_size=4)))
        buffers.append(Buffer(i, draw(st.integers(1, 64)) << 12, start, end, tuple(uses),
                              writes=writes_of(uses)))
    for k in range(draw(st.integers(0, 4))):
        uses = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=3)))
        buffers.append(Buffer(100 + k, draw(st.integers(1, 96)) << 12, 0, n, tuple(uses),
                              PERSISTENT, writes=writes_of(uses)))
    durations = draw(st.sampled_from([5.0, 50.0, 500.0]))
    return Trace("written", tuple(Op(f"op{i}", durations) for i in range(n)), tuple(buffers))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True, database=None)
@given(trace=written_traces(), fraction=st.sampled_from([0.9, 0.7, 0.5]))
def test_with_random_writes_auto_is_valid_and_never_beats_the_bound(trace, fraction):
    budget = max(1, int(fraction * trace.lower_bound_bytes()))
    bound = overhead_lower_bound(trace, budget)
    if not bound.feasible:
        return
    planned = make_plan(trace, budget, policy="auto")
    if not planned.fits:
        return  # a feasible bound does not promise a plan (see test_auto_shapes)
    report = validate_swap_plan(planned.trace, planned.plan)
    assert report.valid, (report.rule, report.message)
    sim = simulate(planned.trace, planned.plan)
    # the bound of the trace the plan runs: auto adds recompute recipes
    assert sim.overhead >= overhead_lower_bound(planned.trace, budget).overhead - 1e-9
