"""The swap engine: iterations byte exact with typed arrays, recompute callables called in
stream order (a wrong one counted as corruption), the pool and staging clean after an
error, and the op-boundary API driven directly with an op body of the test's own."""

from __future__ import annotations

import pytest

from cupool.core.vocabulary import RecomputeAction
from cupool.devices import open_device
from cupool.swap.engine import EngineSettings, SwapEngine
from cupool.swap.handles import DEVICE
from tests.swap_cases import resnet_capuchin_plan

SIZE_SCALE = 4096


_planned = resnet_capuchin_plan


def _engine(device, **options):
    _trace, plan, planned = _planned()
    return SwapEngine(planned, plan, device, EngineSettings(size_scale=SIZE_SCALE), **options)


def _recomputed(plan):
    return sorted({a.buffer_id for a in plan.actions if isinstance(a, RecomputeAction)})


def test_an_iteration_with_cupy_arrays_is_byte_exact_and_hands_out_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    with open_device("emulated", cupy_arrays=True) as device, _engine(device) as engine:
        result = engine.run_iteration(0)
        resident = [h for h in engine.handles.values() if h.state == DEVICE]
        assert resident
        for handle in resident:
            with handle.use() as view:
                assert isinstance(view, cupy.ndarray) and view.data.ptr == handle.ptr
    assert result.corrupt_bytes == 0 and result.off_plan == 0


def test_recompute_actions_call_the_handles_callable_and_verify_byte_exact():
    _trace, plan, planned = _planned()
    actions = [a for a in plan.actions if isinstance(a, RecomputeAction)]
    assert actions, "the capuchin plan recomputes nothing"
    with open_device("emulated") as device, _engine(device) as engine:
        calls = []
        for b in _recomputed(plan):
            handle = engine.handles[b]

            def counting(out, *inputs, _b=b, _default=handle.recompute):
                expected = planned.buffer(_b).recompute.inputs
                calls.append((_b, out.ctypes.data, len(inputs) == len(expected)))
                _default(out, *inputs)

            handle.recompute = counting
        result = engine.run_iteration(0)
    assert result.corrupt_bytes == 0 and result.bytes_checked > 0
    assert sorted(b for b, _ptr, _ok in calls) == sorted(a.buffer_id for a in actions)
    assert all(ok for _b, _ptr, ok in calls)


def test_a_wrong_recompute_callable_is_counted_as_corruption():
    _trace, plan, _planned_trace = _planned()
    wrong = {b: (lambda out, *inputs: out.fill(0)) for b in _recomputed(plan)}
    with open_device("emulated") as device, _engine(device, recompute=wrong) as engine:
        result = engine.run_iteration(0)
    assert result.corrupt_bytes > 0


def test_an_error_inside_a_use_leaves_the_pool_and_staging_clean():
    _trace, plan, _planned_trace = _planned()

    def broken(out, *inputs):
        raise RuntimeError("recompute failed inside its use")

    first = _recomputed(plan)[0]
    with open_device("emulated") as device, \
            _engine(device, recompute={first: broken}) as engine:
        with pytest.raises(RuntimeError, match="recompute failed inside its use"):
            engine.run_iteration(0)
        assert engine.pool.used_bytes() == 0
        assert engine.pool.memory_stats()["live_blocks.current"] == 0
        live = engine.staging.stats()["staging.live_slots.current"]
        assert live == len(engine.boundary_slots)  # only the persistent host copies
        assert all(h._readers == 0 and h._writers == 0 for h in engine.handles.values())
