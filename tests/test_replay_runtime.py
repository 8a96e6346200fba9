"""The swap runtime end to end (issue 5): typed handle arrays from the device, the planned
pool serving every residency, recompute callables, stream failures at the use, and the
pool and staging clean after errors."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from cupool.check import validate_plan, validate_swap_plan
from cupool.core.vocabulary import Buffer, RecomputeAction
from cupool.devices import open_device
from cupool.devices.errors import InvalidPointerError, InvalidSizeError, StreamTaskError
from cupool.io import load_plan
from cupool.runtime.pool import PlannedPool
from cupool.runtime.replay import replay
from cupool.swap.copy_engine import CopyEngine
from cupool.swap.engine import EngineSettings, SwapEngine
from cupool.swap.handles import (
    DEVICE,
    FAILED,
    HOST,
    WRITE,
    CopyFailedError,
    HandleError,
    TensorHandle,
)
from cupool.swap.layout import pool_layout
from cupool.swap.staging import PinnedStaging
from tests.swap_cases import resnet_capuchin_plan

SIZE_SCALE = 4096


_planned = resnet_capuchin_plan


def _executor(device, **options):
    _trace, plan, planned = _planned()
    return SwapEngine(planned, plan, device, EngineSettings(size_scale=SIZE_SCALE), **options)


# -- typed arrays from the device ------------------------------------------------------------
def test_handle_arrays_are_typed_views_at_the_planned_address():
    with open_device("emulated", capacity="1MiB") as device:
        memory = device.reserve(4096)
        handle = TensorHandle(Buffer(3, 1024, 0, 2, uses=(0, 1)), dtype="float32",
                              shape=(16, 16))
        array = handle.array_at(device, memory.ptr + 512, 1024)
        handle.move(DEVICE, array, memory.ptr + 512)
        with handle.use(WRITE) as view:
            assert isinstance(view, np.ndarray)
            assert (view.dtype, view.shape) == (np.float32, (16, 16))
            assert view.ctypes.data == memory.ptr + 512
            view[:] = 1.5
        assert (device.device_array(memory)[512:1536].view(np.float32) == 1.5).all()


def test_cupy_arrays_over_emulated_memory_at_the_planned_address():
    cupy = pytest.importorskip("cupy")
    with open_device("emulated", capacity="1MiB", cupy_arrays=True) as device:
        memory = device.reserve(4096)
        flat = TensorHandle(Buffer(4, 4096, 0, 2, uses=(0,)), dtype="float64")
        array = flat.array_at(device, memory.ptr, 1000)  # scaled size: whole items only
        assert isinstance(array, cupy.ndarray)
        assert (array.dtype, array.shape, array.data.ptr) == (np.float64, (125,), memory.ptr)
        flat.move(DEVICE, array, memory.ptr)
        with flat.use() as view:
            assert view is array


def test_array_at_refuses_bad_layouts_and_foreign_bytes():
    with open_device("emulated", capacity="1MiB") as device:
        memory = device.reserve(1024)
        with pytest.raises(InvalidSizeError, match=r"shape=\(300,\)\): shape needs 1200"):
            device.array_at(memory.ptr, 1024, "float32", (300,))
        with pytest.raises(InvalidSizeError, match="must be a multiple of the float32"):
            device.array_at(memory.ptr, 1022, "float32")
        with pytest.raises(InvalidSizeError, match="dtype='no such type'"):
            device.array_at(memory.ptr, 1024, "no such type")
        with pytest.raises(InvalidPointerError, match="not inside one live reservation"):
            device.array_at(memory.ptr + 512, 1024)
    with pytest.raises(HandleError, match=r"needs 4096 bytes of float32, only 64"):
        TensorHandle(Buffer(1, 64, 0, 1), dtype="float32", shape=(32, 32))
    with pytest.raises(HandleError, match=r"recompute .* must be callable"):
        TensorHandle(Buffer(1, 64, 0, 1), recompute="not callable")


def test_an_iteration_with_cupy_arrays_is_byte_exact_and_hands_out_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    with open_device("emulated", cupy_arrays=True) as device, _executor(device) as executor:
        result = executor.run_iteration(0)
        resident = [h for h in executor.handles.values() if h.state == DEVICE]
        assert resident
        for handle in resident:
            with handle.use() as view:
                assert isinstance(view, cupy.ndarray) and view.data.ptr == handle.ptr
    assert result.corrupt_bytes == 0 and result.off_plan == 0


# -- the planned pool serves every residency ---------------------------------------------------
def test_pool_layout_keeps_residencies_disjoint_and_validates():
    _trace, plan, planned = _planned()
    layout = pool_layout(plan, planned, SIZE_SCALE)
    assert len(layout.order) == len(plan.residencies) == len(layout.pool_trace.buffers)
    assert all(size % 512 == 0 for size in layout.block_sizes.values())
    assert validate_plan(layout.pool_trace, layout.pool_plan).valid  # the oracle
    # at full size the map only rounds each stretch between boundaries up to 512 bytes:
    # offsets keep their order, and the arena grows by less than 512 per stretch
    full = pool_layout(plan, planned, 1)
    by_offset = sorted(plan.residencies, key=lambda r: r.offset)
    scaled = [full.offsets[(r.buffer_id, r.start)] for r in by_offset]
    assert scaled == sorted(scaled)
    stretches = len({r.offset for r in plan.residencies}) * 2
    assert plan.arena_bytes <= full.pool_plan.arena_bytes < plan.arena_bytes + 512 * stretches


def test_replay_serves_every_residency_from_the_planned_pool():
    trace, plan, planned = _planned()
    result = replay(trace, "70%", iterations=2, size_scale=SIZE_SCALE, time_scale=1.0,
                    plan=plan, plan_trace=planned, feedback=False)
    pool = result["pool"]
    assert result["corrupt_bytes"] == 0 and result["bytes_checked"] > 0
    assert result["off_plan"] == [0, 0]
    assert pool["planned_hits"] == pool["mallocs"] == 2 * len(plan.residencies)
    assert pool["fallback_allocations"] == 0 and pool["planned_iterations"] == 2
    assert pool["allocated_bytes.current"] == 0
    assert pool["reserved_bytes.current"] == result["arena_reserved_bytes"]
    assert result["peak_device_bytes"] == plan.arena_bytes <= result["budget_bytes"]


def test_install_plan_keeps_the_arena_for_a_plan_of_the_same_size():
    _trace, plan, planned = _planned()
    layout = pool_layout(plan, planned, SIZE_SCALE)
    with open_device("emulated", capacity="64MiB") as device:
        pool = PlannedPool(device)
        pool.install_plan(layout.pool_plan, layout.pool_trace)
        first = pool.arena_ptr
        pool.install_plan(layout.pool_plan, layout.pool_trace)
        assert pool.arena_ptr == first and pool.mode == "planned"
        assert pool.memory_stats()["device_reservations"] == 1
        pool.close()


def test_feedback_replans_the_pool_and_saves_the_adjusted_plan(tmp_path):
    """Adjusted plans pass the swap validator, the pool serves them on the same arena (the
    persistent bytes survive: corrupt 0), and ``plan_out`` holds the last adjusted plan."""
    from test_replay import _mistimed

    trace, plan, planned = _planned()
    mistimed, _late = _mistimed(plan)
    out = tmp_path / "adjusted.json"
    result = replay(trace, "70%", iterations=2, size_scale=SIZE_SCALE, time_scale=40.0,
                    plan=mistimed, plan_trace=planned, plan_out=out)
    assert result["corrupt_bytes"] == 0 and result["off_plan"] == [0, 0]
    assert result["feedback_moves"][0] >= 1 and result["pool"]["plans"] >= 2
    assert result["pool"]["device_reservations"] == 1
    saved = load_plan(out)
    assert validate_swap_plan(planned, saved).valid
    assert saved != mistimed  # the adjusted plan, not the one given


# -- recompute ----------------------------------------------------------------------------------
def _recomputed(plan):
    return sorted({a.buffer_id for a in plan.actions if isinstance(a, RecomputeAction)})


def test_recompute_actions_call_the_handles_callable_and_verify_byte_exact():
    _trace, plan, planned = _planned()
    actions = [a for a in plan.actions if isinstance(a, RecomputeAction)]
    assert actions, "the capuchin plan recomputes nothing"
    with open_device("emulated") as device, _executor(device) as executor:
        calls = []
        for b in _recomputed(plan):
            handle = executor.handles[b]

            def counting(out, *inputs, _b=b, _default=handle.recompute):
                expected = planned.buffer(_b).recompute.inputs
                calls.append((_b, out.ctypes.data, len(inputs) == len(expected)))
                _default(out, *inputs)

            handle.recompute = counting
        result = executor.run_iteration(0)
    assert result.corrupt_bytes == 0 and result.bytes_checked > 0
    assert sorted(b for b, _ptr, _ok in calls) == sorted(a.buffer_id for a in actions)
    assert all(ok for _b, _ptr, ok in calls)


def test_a_wrong_recompute_callable_is_counted_as_corruption():
    _trace, plan, _planned_trace = _planned()
    wrong = {b: (lambda out, *inputs: out.fill(0)) for b in _recomputed(plan)}
    with open_device("emulated") as device, _executor(device, recompute=wrong) as executor:
        result = executor.run_iteration(0)
    assert result.corrupt_bytes > 0


# -- bad input: failures and clean state ---------------------------------------------------
def test_an_error_inside_a_use_leaves_the_pool_and_staging_clean():
    _trace, plan, _planned_trace = _planned()

    def broken(out, *inputs):
        raise RuntimeError("recompute failed inside its use")

    first = _recomputed(plan)[0]
    with open_device("emulated") as device, \
            _executor(device, recompute={first: broken}) as executor:
        with pytest.raises(RuntimeError, match="recompute failed inside its use"):
            executor.run_iteration(0)
        assert executor.pool.used_bytes() == 0
        assert executor.pool.memory_stats()["live_blocks.current"] == 0
        live = executor.staging.stats()["staging.live_slots.current"]
        assert live == len(executor.boundary_slots)  # only the persistent host copies
        assert all(h._readers == 0 and h._writers == 0 for h in executor.handles.values())


def test_a_copy_failing_on_the_stream_fails_the_use_not_the_bytes():
    """The H2D copy fails when the stream runs it: the handle's next use raises
    CopyFailedError naming the copy, the stream reports it at synchronize, and the
    staging area is clean."""
    with open_device("emulated", capacity="1MiB") as device:
        arena = device.reserve(4096)
        staging = PinnedStaging(device, 4096)
        engine = CopyEngine(device, staging)
        handle = TensorHandle(Buffer(5, 1024, 0, 4, uses=(0, 3)))
        handle.move(HOST)
        slot = staging.acquire(1024)

        def failing_copy(dst, src, nbytes, stream):
            def copy():
                raise OSError("DMA engine fault")
            device.host_callback(stream, copy)

        device.copy_h2d_async = failing_copy
        engine.swap_in(handle, slot, 1024, arena.ptr, device.array_at(arena.ptr, 1024), [])
        with pytest.raises(StreamTaskError, match="DMA engine fault"):
            device.synchronize()
        assert handle.state == FAILED
        with pytest.raises(CopyFailedError, match="buffer 5: h2d copy of 1024 bytes failed: "
                                                  "host_callback copy failed"), handle.use():
            pass
        assert staging.is_clean()
        staging.close()


def test_two_threads_with_conflicting_intents_on_a_replayed_handle():
    with open_device("emulated", capacity="1MiB") as device:
        memory = device.reserve(1024)
        handle = TensorHandle(Buffer(2, 1024, 0, 3, uses=(0, 2)))
        handle.move(DEVICE, handle.array_at(device, memory.ptr, 1024), memory.ptr)
        entered, release, errors = threading.Event(), threading.Event(), []

        def writer():
            with handle.use(WRITE):
                entered.set()
                release.wait(5)

        thread = threading.Thread(target=writer)
        thread.start()
        entered.wait(5)
        try:
            with handle.use():
                pass
        except HandleError as exc:
            errors.append(exc)
        release.set()
        thread.join()
        assert len(errors) == 1 and "conflicts with 0 read(s) and 1 write(s)" in str(errors[0])
        with handle.use(WRITE):  # nothing left behind
            pass
