"""The swap runtime on a real GPU: replay through the device protocol with the
CUDA kernels checking every byte, the planned pool serving every residency, and
``h.use()`` yielding ``cupy.ndarray`` objects at the planned addresses. Marked ``gpu``;
skipped without a usable device (``cuda_device`` of ``tests/gpu/conftest.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from cupool.app.replay import ReplaySettings, replay
from cupool.core.vocabulary import Buffer, RecomputeAction
from cupool.swap.engine import EngineSettings
from cupool.swap.handles import DEVICE, RETIRED, WRITE, TensorHandle
from cupool.swap.patterns import PatternEngine

pytestmark = pytest.mark.gpu

from tests.swap_cases import resnet_capuchin_plan  # noqa: E402

SIZE_SCALE = 4096


_planned = resnet_capuchin_plan


def test_typed_array_at_a_device_address(cuda_device):
    import cupy

    memory = cuda_device.reserve(1 << 16)
    handle = TensorHandle(Buffer(0, 4096, 0, 2, uses=(0, 1)), dtype="float32", shape=(32, 32))
    array = handle.array_at(cuda_device, memory.ptr + 1024, 4096)
    handle.move(DEVICE, array, memory.ptr + 1024)
    with handle.use(WRITE) as view:
        assert isinstance(view, cupy.ndarray) and view.data.ptr == memory.ptr + 1024
        assert (view.dtype, view.shape) == (np.float32, (32, 32))
        view[:] = 2.5
    cuda_device.synchronize()
    assert (cupy.asnumpy(array) == 2.5).all()
    del array, view
    handle.move(RETIRED)
    cuda_device.release(memory)


def test_replay_on_cuda_is_byte_exact_and_served_by_the_pool(cuda_device):
    trace, plan, planned = _planned()
    result = replay(trace, "70%", ReplaySettings(iterations=2, size_scale=SIZE_SCALE,
                                                 time_scale=1.0),
                    device=cuda_device, plan=plan, plan_trace=planned)
    assert result["corrupt_bytes"] == 0 and result["bytes_checked"] > 0
    assert result["off_plan"] == [0, 0]
    assert result["pool"]["planned_hits"] == 2 * len(plan.residencies)
    assert result["copies"]["copies.h2d"] == result["copies"]["copies.d2h"] > 0
    assert result["staging"]["staging.live_slots.current"] == 0
    assert len(result["late_prefetches"]) == 2


def test_uses_on_cuda_yield_cupy_arrays_at_the_planned_address(cuda_device):
    import cupy

    _trace, plan, planned = _planned()
    with PatternEngine(planned, plan, cuda_device, EngineSettings(size_scale=SIZE_SCALE)) as engine:
        result = engine.run_iteration(0)
        resident = [h for h in engine.handles.values() if h.state == DEVICE]
        assert resident and result.corrupt_bytes == 0
        for handle in resident:
            with handle.use() as view:
                assert isinstance(view, cupy.ndarray) and view.data.ptr == handle.ptr


def test_a_wrong_recompute_callable_is_caught_on_cuda(cuda_device):
    _trace, plan, planned = _planned()
    recomputed = {a.buffer_id for a in plan.actions if isinstance(a, RecomputeAction)}
    assert recomputed
    wrong = {b: (lambda out, *inputs: out.fill(0)) for b in recomputed}  # on the stream
    with PatternEngine(planned, plan, cuda_device, EngineSettings(size_scale=SIZE_SCALE),
                    recompute=wrong) as engine:
        assert engine.run_iteration(0).corrupt_bytes > 0
