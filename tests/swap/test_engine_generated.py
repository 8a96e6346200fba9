"""The swap engine on generated plans: every valid plan of a random small trace replays
byte exact on the emulated device for two iterations, with the pool empty and no host
slot held between them but the persistent buffers' boundary copies. The plans swap
(early copy-outs among them), drop clean data, recompute (recipes reading other buffers)
and offload persistent state across the iteration boundary; a second strategy makes
reads of a buffer after its copy out began, within the residency that holds it."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cupool.check import validate_swap_plan
from cupool.core.vocabulary import (
    PERSISTENT,
    TEMPORARY,
    Buffer,
    Recompute,
    RecomputeAction,
    Residency,
    SwapIn,
    SwapOut,
)
from cupool.devices import open_device
from cupool.swap.engine import EngineSettings
from cupool.swap.patterns import PatternEngine
from tests.swap_cases import swap_plan, trace_and_plan, trace_of, written_trace_and_plan


@st.composite
def engine_cases(draw):
    """A generated trace and valid plan; each recipe of a buffer the plan recomputes is
    given inputs (other buffers) where the plan keeps them valid for the recompute."""
    trace, plan, _cost = draw(st.one_of(trace_and_plan(), written_trace_and_plan()))
    before = {}  # recomputed buffer -> the ops it is recomputed before
    for a in plan.actions:
        if isinstance(a, RecomputeAction):
            before.setdefault(a.buffer_id, []).append(a.before_op)
    for b, ops in sorted(before.items()):
        # candidates: buffers resident since an earlier op at every recompute of b
        others = [o.id for o in trace.buffers if o.id != b and all(
            any(r.buffer_id == o.id and r.start < e < r.end for r in plan.residencies)
            for e in ops)]
        if not others:
            continue
        inputs = tuple(draw(st.lists(st.sampled_from(others), max_size=2, unique=True)))
        buffers = tuple(dataclasses.replace(o, recompute=Recompute(o.recompute.op, inputs))
                        if o.id == b else o for o in trace.buffers)
        candidate = dataclasses.replace(trace, buffers=buffers)
        if inputs and validate_swap_plan(candidate, plan).valid:
            trace = candidate
            event("a recomputed buffer's recipe reads other buffers")
    return trace, plan


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine_cases())
def test_every_valid_generated_plan_replays_byte_exact(case):
    trace, plan = case
    report = validate_swap_plan(trace, plan)
    assert report.valid, report.message
    # ops of 0 to 3 ms: copies out land long before the reads that follow them
    settings_ = EngineSettings(time_scale=500.0)
    with open_device("emulated") as device, \
            PatternEngine(trace, plan, device, settings_) as engine:
        for iteration in range(2):
            result = engine.run_iteration(iteration)
            assert result.corrupt_bytes == 0
            assert result.off_plan == 0
            assert engine.pool.used_bytes() == 0
            # between iterations the only host slots held are the persistent buffers'
            # boundary copies (offloaded state, read-only state it drops)
            live = engine.staging.stats()["staging.live_slots.current"]
            assert live == len(engine.boundary_slots)


@st.composite
def early_copy_out_cases(draw):
    """A (temporary or persistent) copied out after op ``s`` but resident until op ``e``
    (a held copy-out), back in from the host copy at op ``e``; C recomputed from A before
    op ``k``, ``s < k < e``, so after A's copy out began (and, ops being long, landed)."""
    n = draw(st.integers(5, 9))
    durations = [float(draw(st.integers(1, 8))) for _ in range(n)]
    s = draw(st.integers(1, n - 4))
    k = draw(st.integers(s + 1, n - 3))
    e = draw(st.integers(k + 1, n - 2))
    due = draw(st.integers(e, n - 1))
    last = draw(st.integers(due, n - 1))
    size_a, size_c = 64 * draw(st.integers(1, 4)), 64 * draw(st.integers(1, 4))
    persistent = draw(st.booleans())
    uses_a = tuple(sorted({0, s, last}))
    a = Buffer(0, size_a, 0, n if persistent else last + 1, uses_a,
               PERSISTENT if persistent else TEMPORARY)
    c = Buffer(1, size_c, 0, k + 1, (0, k), recompute=Recompute(0, (0,)))
    trace = trace_of(durations, a, c)
    top = size_a + size_c
    first = top if persistent else 0  # a persistent buffer ends where it starts
    residencies = [Residency(0, 0, e, first), Residency(0, e, a.end, top),
                   Residency(1, 0, 1, size_a), Residency(1, k, k + 1, size_a)]
    actions = [SwapOut(0, s), SwapIn(0, e, due), RecomputeAction(1, k)]
    return trace, swap_plan(trace, residencies, actions)


@settings(max_examples=40, deadline=None)
@given(early_copy_out_cases())
def test_a_buffer_read_after_its_early_copy_out_replays_byte_exact(case):
    test_every_valid_generated_plan_replays_byte_exact.hypothesis.inner_test(case)
