"""The swap runtime: handles, staging, copy engine, executor and replay (issue 5)."""

from __future__ import annotations

import pickle
import threading
from dataclasses import replace

import numpy as np
import pytest

from cupool.check import validate_swap_plan
from cupool.core.vocabulary import Buffer, Residency, SwapIn, SwapOut
from cupool.devices import open_device
from cupool.devices.protocol import host_view
from cupool.planning.budget.feedback import (
    FEEDBACK_MARGIN,
    adjust_triggers,
    delay_swap_ins,
    move_swap_in,
    predicted_waits,
    queued_ahead,
)
from cupool.runtime.replay import replay
from cupool.sim.cost import cost_model
from cupool.sim.simulator import simulate
from cupool.swap.copy_engine import CopyEngine
from cupool.swap.handles import (
    DEVICE,
    HOST,
    RETIRED,
    WRITE,
    ConflictingUseError,
    CopyFailedError,
    HandleLifetimeError,
    HandleStateError,
    TensorHandle,
)
from cupool.swap.staging import PinnedStaging, StagingError
from tests.swap_cases import resnet_capuchin_plan, swap_plan, trace_of

SIZE_SCALE = 4096
TIME_SCALE = 40.0


_planned = resnet_capuchin_plan


def _resident_handle(size=64):
    handle = TensorHandle(Buffer(7, size, 2, 5, uses=(2, 4)))
    array = np.zeros(size, dtype=np.uint8)
    handle.move(DEVICE, array, array.ctypes.data)
    return handle


def test_replay_at_70_percent_is_byte_exact():
    trace, plan, planned = _planned()
    result = replay(trace, "70%", iterations=2, size_scale=SIZE_SCALE, time_scale=TIME_SCALE,
                    plan=plan, plan_trace=planned)
    assert result["corrupt_bytes"] == 0
    assert result["bytes_checked"] > 0
    assert result["copies"]["copies.h2d"] == result["copies"]["copies.d2h"] > 0
    assert result["staging"]["staging.live_slots.current"] == 0
    assert result["peak_device_bytes"] <= result["budget_bytes"]
    assert len(result["late_prefetches"]) == 2


def _mistimed(plan):
    """``plan`` with every swap-in issued only when its due op is dispatched, and the
    swap-ins that moved."""
    late = [a for a in plan.actions if isinstance(a, SwapIn) and a.due_op > a.trigger_op]
    return delay_swap_ins(plan), late


def test_feedback_moves_late_triggers_earlier_and_keeps_the_plan_valid():
    _trace, plan, planned = _planned()
    mistimed, late = _mistimed(plan)
    assert late and validate_swap_plan(planned, mistimed).valid
    op_us = [op.duration_us or 10.0 for op in planned.ops]
    waits = {a.buffer_id: 200.0 for a in late[:5]}
    result = adjust_triggers(planned, mistimed, waits, op_us, validate_swap_plan)
    adjusted, moves = result.plan, result.moves
    assert validate_swap_plan(planned, adjusted).valid
    assert moves and all(new < old for old, new in moves.values())
    for b, (old, new) in moves.items():
        # the rule: far enough to cover 1.25 x the wait, unless bounded by the end of the
        # buffer's previous residency (its swap-out point) or by the validator
        covered = sum(op_us[new:old])
        spans = sorted((r for r in adjusted.residencies if r.buffer_id == b),
                       key=lambda r: r.start)
        k = next(k for k, r in enumerate(spans) if r.start == new)
        floor = spans[k - 1].end if k > 0 else 0
        action = next(a for a in adjusted.actions
                      if isinstance(a, SwapIn) and a.buffer_id == b and a.trigger_op == new)
        bounded = new == floor or not validate_swap_plan(
            planned, move_swap_in(adjusted, action, new - 1)).valid
        assert covered >= FEEDBACK_MARGIN * 200.0 or bounded, (b, old, new)


def test_mistimed_plan_improves_after_feedback():
    """From triggers moved to their due ops, the first iteration is late; the feedback moves
    triggers and the later iterations have fewer late prefetches and less stall. (Whether
    they reach the simulator's floor within 3 iterations is issue 5's timing target,
    measured by bench/replay.py: emulated waits near the noise threshold depend on the
    machine's load, so a test does not assert it.)"""
    trace, plan, planned = _planned()
    mistimed, _late = _mistimed(plan)
    result = replay(trace, "70%", iterations=4, size_scale=SIZE_SCALE, time_scale=TIME_SCALE,
                    plan=mistimed, plan_trace=planned)
    late, stall = result["late_prefetches"], result["stall_us"]
    assert late[0] >= 1 and stall[0] > 0 and result["feedback_moves"][0] >= 1
    assert min(late[1:]) < late[0] and min(stall[1:]) < stall[0], (late, stall)
    assert result["corrupt_bytes"] == 0


def test_predicted_waits_match_the_simulated_copies():
    _trace, plan, planned = _planned()
    mistimed, late = _mistimed(plan)
    report = simulate(planned, mistimed, cost_model("gen5"), validate=False)
    waits = predicted_waits(report, mistimed)
    assert set(waits) <= {a.buffer_id for a in late} and waits
    b = max(waits, key=waits.get)
    action = next(a for a in mistimed.actions if isinstance(a, SwapIn) and a.buffer_id == b)
    end = max(c[5] for c in report.copies if c[0] == b and c[1] == "h2d")
    assert waits[b] == pytest.approx(end - report.op_times[action.due_op][0])


def _blocked_plan():
    """op:        0    1    2    3    4    5    6    7    8    9   (20 µs each, 1 GB/s, 3 µs)
    X 0 (30 kB): [=)  out after 0 (D2H 20..53)   in at 4, due 8 (H2D 80..113)
    Y 1 (1 kB):  [==============)  out after 3 (D2H 80..84)
                                   in at 4, due 5: queued behind X (H2D 113..117), op 5
                                   dispatched at 100 waits 17 µs, and Y cannot move: it
                                   re-enters at 4, where its bytes left."""
    trace = trace_of([20.0] * 10, Buffer(0, 30000, 0, 9, (0, 8)),
                     Buffer(1, 1000, 0, 6, (0, 3, 5)))
    plan = swap_plan(trace, [Residency(0, 0, 1, 0), Residency(0, 4, 9, 0),
                             Residency(1, 0, 4, 30000), Residency(1, 4, 6, 30000)],
                     [SwapOut(0, 0), SwapOut(1, 3), SwapIn(0, 4, 8), SwapIn(1, 4, 5)])
    return trace, plan, cost_model(1.0, latency_us=3.0)


def test_a_stuck_late_swap_in_moves_the_copy_queued_ahead_of_it():
    trace, plan, cost = _blocked_plan()
    assert validate_swap_plan(trace, plan).valid
    report = simulate(trace, plan, cost, validate=False)
    waits = predicted_waits(report, plan)
    assert waits == {1: pytest.approx(17.0)}
    assert queued_ahead(report, plan, waits) == {0: pytest.approx(17.0)}
    assert predicted_waits(report, plan, guard_us=5.0) == {1: pytest.approx(22.0)}

    def predict(candidate):
        return simulate(trace, candidate, cost, validate=False)

    result = adjust_triggers(trace, plan, waits, [20.0] * 10, validate_swap_plan, predict)
    adjusted, moves = result.plan, result.moves
    # X moves by the rule for Y's wait: 1.25 x 17 µs needs two 20 µs ops, so 4 -> 2; its
    # copy then runs 53..86 and Y's 86..90, before op 5 at 100
    assert moves == {0: (4, 2)}
    assert validate_swap_plan(trace, adjusted).valid
    assert predicted_waits(predict(adjusted), adjusted) == {}
    # without the simulator, Y's measured wait alone cannot move anything
    assert adjust_triggers(trace, plan, waits, [20.0] * 10, validate_swap_plan).moves == {}


def test_feedback_on_the_simulator_reaches_a_late_free_plan():
    """From the mis-timed ResNet-50 plan, the rule applied to the simulator's own waits
    (with a 10 µs guard band) ends with no swap-in the simulator predicts late."""
    _trace, plan, planned = _planned()
    mistimed, _late = _mistimed(plan)
    cost = cost_model("gen5")

    def predict(candidate):
        return simulate(planned, candidate, cost, validate=False)

    op_us = cost.op_times(planned)
    result = adjust_triggers(planned, mistimed, predicted_waits(predict(mistimed), mistimed),
                             op_us, validate_swap_plan, predict, guard_us=10.0)
    adjusted, moves = result.plan, result.moves
    assert moves and validate_swap_plan(planned, adjusted).valid
    assert predicted_waits(predict(adjusted), adjusted) == {}


def test_use_after_lifetime_raises():
    handle = _resident_handle()
    handle.move(RETIRED)
    expected = r"buffer 7: used after its lifetime \[2, 5\)"
    with pytest.raises(HandleLifetimeError, match=expected), handle.use():
        pass
    error = pickle.loads(pickle.dumps(HandleLifetimeError(7, 2, 5)))
    assert (error.buffer_id, error.start, error.end) == (7, 2, 5)


def test_conflicting_intents_raise_and_leave_the_handle_clean():
    handle = _resident_handle()
    with handle.use(WRITE):
        errors = []

        def other():
            try:
                with handle.use():
                    pass
            except ConflictingUseError as exc:
                errors.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert len(errors) == 1 and errors[0].writers == 1
    with handle.use(), handle.use():  # reads share
        pass
    with handle.use(WRITE) as view:
        assert view.size == 64


def test_not_resident_use_raises_state_error():
    handle = TensorHandle(Buffer(3, 8, 0, 2))
    with pytest.raises(HandleStateError, match="state is 'unborn'"), handle.use():
        pass


def test_failing_copy_surfaces_at_the_use():
    with open_device("emulated", capacity="1MiB") as device:
        staging = PinnedStaging(device, 4096)
        engine = CopyEngine(device, staging)
        handle = TensorHandle(Buffer(9, 1024, 0, 4, uses=(0, 3)))
        handle.move(HOST)
        slot = staging.acquire(1024)
        bogus = 0x10  # not inside any reservation: the device refuses the copy
        engine.swap_in(handle, slot, 1024, bogus, None, [])
        device.synchronize()
        failed = "buffer 9: h2d copy of 1024 bytes failed"
        with pytest.raises(CopyFailedError, match=failed), handle.use():
            pass
        assert engine.stats()["failed.count"] == 1
        assert staging.is_clean()
        staging.close()


def test_swap_round_trip_keeps_bytes_and_staging_is_clean_after_an_exception():
    with open_device("emulated", capacity="1MiB") as device:
        arena = device.reserve(4096)
        staging = PinnedStaging(device, 8192)
        engine = CopyEngine(device, staging)
        handle = TensorHandle(Buffer(1, 1024, 0, 4, uses=(0, 3)))
        view = host_view(arena.ptr, 1024)
        handle.move(DEVICE, view, arena.ptr)
        view[:] = np.arange(1024) % 251
        done = device.create_event()
        done.record(device.default_stream)
        slot, out = engine.swap_out(handle, arena.ptr, 1024, done)
        landing = host_view(arena.ptr + 2048, 1024)
        engine.swap_in(handle, slot, 1024, arena.ptr + 2048, landing, [out])
        device.synchronize()
        assert handle.state == DEVICE and handle.ptr == arena.ptr + 2048
        with pytest.raises(RuntimeError, match="inside use"), handle.use(WRITE) as data:
            assert np.array_equal(data, np.arange(1024) % 251)
            raise RuntimeError("inside use")
        with handle.use(WRITE):  # no use left behind by the exception
            pass
        assert staging.is_clean()
        assert staging.stats()["staging.pinned_slots.count"] == 1
        staging.close()


def test_staging_best_fit_merges_and_falls_back_to_pageable():
    with open_device("emulated", capacity="1MiB") as device:
        staging = PinnedStaging(device, 1024)
        a, b, c = staging.acquire(256), staging.acquire(512), staging.acquire(256)
        staging.release(b)
        small = staging.acquire(200)  # best fit: the 512-byte hole
        assert small.offset == 256
        staging.release(a)
        overflow = staging.acquire(600)
        assert not overflow.pinned
        stats = staging.stats()
        assert stats["staging.pageable_slots.count"] == 1
        assert stats["staging.pageable_bytes.total"] == 600
        planned = staging.acquire(64, level="pageable")  # room left, but the plan said so
        assert not planned.pinned
        stats = staging.stats()
        assert stats["staging.planned_pageable_slots.count"] == 1
        assert stats["staging.pageable_slots.count"] == 1
        with pytest.raises(StagingError, match="level must be 'pinned' or 'pageable'"):
            staging.acquire(64, level="disk")
        for slot in (small, c, overflow, planned):
            staging.release(slot)
        assert staging.is_clean()
        with pytest.raises(StagingError, match="released twice"):
            staging.release(c)
        staging.close()


def test_resident_use_takes_the_fast_path():
    """A use of a resident handle is the fast path the module promises: it hands back the
    handle's own view (no new array), takes the handle's lock once to enter and once to
    leave, and never looks at the landing event, so it cannot wait. How fast that is
    depends on the machine and is measured by ``bench/replay.py`` (``use_median_us``)."""

    class CountingLock:
        def __init__(self, lock) -> None:
            self.lock, self.acquired = lock, 0

        def acquire(self, *args) -> bool:
            self.acquired += 1
            return self.lock.acquire(*args)

        def release(self) -> None:
            self.lock.release()

        def __enter__(self) -> bool:
            return self.acquire()

        def __exit__(self, *exc_info) -> None:
            self.release()

    class NoLanding:
        def wait(self, timeout=None):
            raise AssertionError("a use of a resident handle waited for a swap-in")

        is_set = wait

    handle = _resident_handle()
    view = handle.view
    handle._lock = lock = CountingLock(handle._lock)
    handle._landed = NoLanding()
    for intent in ("read", WRITE) * 500:
        with handle.use(intent) as got:
            assert got is view
    assert lock.acquired == 2 * 1000
    assert (handle.uses, handle.waited_us, handle.state) == (1000, 0.0, DEVICE)
    assert (handle._readers, handle._writers) == (0, 0)


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
    result = replay(trace, 8192, iterations=2, size_scale=1, time_scale=1.0, plan=plan,
                    plan_trace=trace, feedback=False)
    assert result["corrupt_bytes"] == 0 and result["bytes_checked"] > 0

    def wrong(out, *inputs):
        out[...] = 0

    result = replay(trace, 8192, iterations=1, size_scale=1, time_scale=1.0, plan=plan,
                    plan_trace=trace, feedback=False, recompute={1: wrong})
    assert result["corrupt_bytes"] > 0


def test_a_plan_that_swaps_to_pageable_memory_gets_pageable_slots():
    """Multi-level plans (issue 7): a swap the plan puts on the pageable level is staged in
    pageable host memory, counted apart from pinned slots, and its bytes come back intact."""
    from tests.swap_cases import six_op_swap_plan, six_op_trace

    trace = six_op_trace()
    plan = six_op_swap_plan(trace)
    pageable = replace(plan, actions=tuple(replace(a, level="pageable") for a in plan.actions))
    results = {}
    for name, chosen in (("pinned", plan), ("pageable", pageable)):
        results[name] = replay(trace, plan.capacity_bytes, iterations=2, size_scale=1,
                               time_scale=1.0, plan=chosen, plan_trace=trace, feedback=False)
        assert results[name]["corrupt_bytes"] == 0 and results[name]["bytes_checked"] > 0
    assert results["pinned"]["staging"]["staging.planned_pageable_slots.count"] == 0
    assert results["pageable"]["staging"]["staging.planned_pageable_slots.count"] == 2
    assert results["pageable"]["staging"]["staging.pinned_slots.count"] == 0


def test_without_cupy_the_runtime_says_what_to_install(monkeypatch):
    """PlannedPool is a CuPy memory pool: without CuPy the executor refuses with a clear
    error (the CLI's exit 2), never an ImportError traceback."""
    import sys

    from cupool.swap.errors import ReplayError
    from tests.swap_cases import six_op_swap_plan, six_op_trace

    for name in [m for m in sys.modules if m == "cupy" or m.startswith("cupy.")] or ["cupy"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "cupool.runtime.pool", raising=False)
    trace = six_op_trace()
    plan = six_op_swap_plan(trace)
    with pytest.raises(ReplayError, match=r"pip install 'cupool\[cuda13\]'"):
        replay(trace, plan.capacity_bytes, iterations=1, size_scale=1, time_scale=1.0,
               plan=plan, plan_trace=trace)
