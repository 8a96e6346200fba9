"""Replay end to end: byte exact at 70% of the lower bound, every residency served by the
planned pool, the feedback improving a mis-timed plan and saving the adjusted one,
recompute chains and pageable swaps, and the error without CuPy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cupool.app.replay import ReplaySettings, replay
from cupool.check import validate_swap_plan
from cupool.io import load_plan
from tests.swap_cases import mistimed, resnet_capuchin_plan, swap_plan, trace_of

SIZE_SCALE = 4096
TIME_SCALE = 40.0


_planned = resnet_capuchin_plan


def test_replay_at_70_percent_is_byte_exact():
    trace, plan, planned = _planned()
    result = replay(trace, "70%", ReplaySettings(iterations=2, size_scale=SIZE_SCALE,
                                                 time_scale=TIME_SCALE),
                    plan=plan, plan_trace=planned)
    assert result["corrupt_bytes"] == 0
    assert result["bytes_checked"] > 0
    assert result["copies"]["copies.h2d"] == result["copies"]["copies.d2h"] > 0
    assert result["staging"]["staging.live_slots.current"] == 0
    assert result["peak_device_bytes"] <= result["budget_bytes"]
    assert len(result["late_prefetches"]) == 2


def test_mistimed_plan_improves_after_feedback():
    """From triggers moved to their due ops, the first iteration is late; the feedback moves
    triggers and the later iterations have fewer late prefetches and less stall. (Whether
    they reach the simulator's floor within 3 iterations is a timing target measured by
    bench/replay.py: emulated waits near the noise threshold depend on the
    machine's load, so a test does not assert it.)"""
    trace, plan, planned = _planned()
    late_plan, _late = mistimed(plan)
    result = replay(trace, "70%", ReplaySettings(iterations=4, size_scale=SIZE_SCALE,
                                                 time_scale=TIME_SCALE),
                    plan=late_plan, plan_trace=planned)
    late, stall = result["late_prefetches"], result["stall_us"]
    assert late[0] >= 1 and stall[0] > 0 and result["feedback_moves"][0] >= 1
    assert min(late[1:]) < late[0] and min(stall[1:]) < stall[0], (late, stall)
    assert result["corrupt_bytes"] == 0


def test_replay_serves_every_residency_from_the_planned_pool():
    trace, plan, planned = _planned()
    result = replay(trace, "70%", ReplaySettings(iterations=2, size_scale=SIZE_SCALE,
                                                 time_scale=1.0, feedback=False),
                    plan=plan, plan_trace=planned)
    pool = result["pool"]
    assert result["corrupt_bytes"] == 0 and result["bytes_checked"] > 0
    assert result["off_plan"] == [0, 0]
    assert pool["planned_hits"] == pool["mallocs"] == 2 * len(plan.residencies)
    assert pool["fallback_allocations"] == 0 and pool["planned_iterations"] == 2
    assert pool["allocated_bytes.current"] == 0
    assert pool["reserved_bytes.current"] == result["arena_reserved_bytes"]
    assert result["peak_device_bytes"] == plan.arena_bytes <= result["budget_bytes"]


def test_feedback_replans_the_pool_and_saves_the_adjusted_plan(tmp_path):
    """Adjusted plans pass the swap validator, the pool serves them on the same arena (the
    persistent bytes survive: corrupt 0), and ``plan_out`` holds the last adjusted plan."""
    trace, plan, planned = _planned()
    late_plan, _late = mistimed(plan)
    out = tmp_path / "adjusted.json"
    result = replay(trace, "70%", ReplaySettings(iterations=2, size_scale=SIZE_SCALE,
                                                 time_scale=40.0),
                    plan=late_plan, plan_trace=planned, plan_out=out)
    assert result["corrupt_bytes"] == 0 and result["off_plan"] == [0, 0]
    assert result["feedback_moves"][0] >= 1 and result["pool"]["plans"] >= 2
    assert result["pool"]["device_reservations"] == 1
    saved = load_plan(out)
    assert validate_swap_plan(planned, saved).valid
    assert saved != late_plan  # the adjusted plan, not the one given


def test_a_rematerialized_intermediate_feeds_a_recompute_byte_exact():
    """A chain through an intermediate the program freed: X (freed after op 1) is recomputed
    after its lifetime to recompute A before op 3; A verifies byte-exact at its use, and a
    wrong recompute of A is counted."""
    from cupool.check import validate_plan
    from cupool.core.vocabulary import Buffer, Recompute, RecomputeAction, Residency

    trace = trace_of([20.0] * 4, Buffer(0, 4096, 0, 2, (0, 1), recompute=Recompute(0)),
                     Buffer(1, 4096, 1, 4, (1, 3), recompute=Recompute(1, (0,))),
                     Buffer(2, 8192, 2, 3, (2,)))
    plan = swap_plan(trace, [Residency(0, 0, 2, 0), Residency(0, 3, 4, 4096),
                             Residency(1, 1, 2, 4096), Residency(1, 3, 4, 0),
                             Residency(2, 2, 3, 0)],
                     [RecomputeAction(0, 3), RecomputeAction(1, 3)], budget=8192)
    assert validate_plan(trace, plan).valid
    unscaled = ReplaySettings(iterations=2, size_scale=1, time_scale=1.0, feedback=False)
    result = replay(trace, 8192, unscaled, plan=plan, plan_trace=trace)
    assert result["corrupt_bytes"] == 0 and result["bytes_checked"] > 0

    def wrong(out, *inputs):
        out[...] = 0

    result = replay(trace, 8192, replace(unscaled, iterations=1), plan=plan, plan_trace=trace,
                    recompute={1: wrong})
    assert result["corrupt_bytes"] > 0


def test_a_plan_that_swaps_to_pageable_memory_gets_pageable_slots():
    """Multi-level plans: a swap the plan puts on the pageable level is staged in
    pageable host memory, counted apart from pinned slots, and its bytes come back intact."""
    from tests.swap_cases import six_op_swap_plan, six_op_trace

    trace = six_op_trace()
    plan = six_op_swap_plan(trace)
    pageable = replace(plan, actions=tuple(replace(a, level="pageable") for a in plan.actions))
    results = {}
    for name, chosen in (("pinned", plan), ("pageable", pageable)):
        results[name] = replay(trace, plan.capacity_bytes,
                               ReplaySettings(iterations=2, size_scale=1, time_scale=1.0,
                                              feedback=False),
                               plan=chosen, plan_trace=trace)
        assert results[name]["corrupt_bytes"] == 0 and results[name]["bytes_checked"] > 0
    assert results["pinned"]["staging"]["staging.planned_pageable_slots.count"] == 0
    assert results["pageable"]["staging"]["staging.planned_pageable_slots.count"] == 2
    assert results["pageable"]["staging"]["staging.pinned_slots.count"] == 0


def test_without_cupy_the_runtime_says_what_to_install(monkeypatch):
    """PlannedPool is a CuPy memory pool: without CuPy the engine refuses with a clear
    error (the CLI's exit 2), never an ImportError traceback."""
    import sys

    from cupool.program.errors import ReplayError
    from tests.swap_cases import six_op_swap_plan, six_op_trace

    for name in [m for m in sys.modules if m == "cupy" or m.startswith("cupy.")] or ["cupy"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "cupool.allocator.pool", raising=False)
    trace = six_op_trace()
    plan = six_op_swap_plan(trace)
    with pytest.raises(ReplayError, match=r"pip install 'cupool\[cuda13\]'"):
        replay(trace, plan.capacity_bytes, ReplaySettings(iterations=1, size_scale=1,
                                                          time_scale=1.0),
               plan=plan, plan_trace=trace)
