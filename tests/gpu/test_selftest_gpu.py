"""The self-test's own measurements on a real GPU: the link fit over pinned copies, the pool
beside CuPy's ``MemoryPool``, op timing with CUDA events, and a full-size replay. Marked
``gpu``; skipped without a usable device (``cuda_device`` of ``tests/gpu/conftest.py``)."""

from __future__ import annotations

import math

import pytest

from cupool.app.selftest.allocators import compare_pools
from cupool.app.selftest.link import measure_link
from cupool.app.selftest.steps import replay_step
from cupool.app.stress import training_trace

pytestmark = pytest.mark.gpu


def test_link_fit_on_pinned_copies_returns_what_it_took(cuda_device):
    before = cuda_device.stats()
    measured = measure_link(cuda_device, sizes=(64 << 10, 4 << 20, 32 << 20), repeats=2)
    after = cuda_device.stats()
    for direction in ("h2d", "d2h"):
        fit = measured[direction].fit
        assert fit.gbps > 1.0 and math.isfinite(fit.latency_us)
    assert after["reserved_bytes.current"] == before["reserved_bytes.current"]
    assert after["pinned_bytes.current"] == before["pinned_bytes.current"]


def test_pool_beside_cupy_memory_pool(cuda_device):
    trace = training_trace(2)
    row = compare_pools(trace, cuda_device, rounds=3, warmup=1)
    temporaries = sum(1 for b in trace.buffers if b.kind != "persistent")
    assert row["planned_hits"] == temporaries * 4 and row["fallback_allocations"] == 0
    assert row["cupy_us"] > 0 and row["cupy_reserved_bytes"] >= trace.lower_bound_bytes()
    assert row["planned_over_cupy_us"] == row["planned_us"] / row["cupy_us"]


def test_op_timing_with_cuda_events():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} sees no GPU")
    from cupool.app.selftest.ops import measure_model

    result = measure_model("resnet50", "train", 2, device="cuda", small=True)
    assert result["matched_ops"] > 0 and result["measured_total_us"] > 0


def test_full_size_replay_on_the_gpu_checks_every_byte(gpu_usable):
    row = replay_step(training_trace(4), "50%", "cuda", iterations=3)
    assert row["corrupt_bytes"] == 0 and row["bytes_checked"] > 0
    assert row["size_scale"] == 1 and row["time_scale"] == 1.0
