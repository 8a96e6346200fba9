"""The planned pool on a real GPU (marked ``gpu``; skipped without one): random workloads
recorded, planned and served from the plan with every block filled and verified by the
CUDA kernels, and CuPy computing on arrays the pool serves. Zero corrupt bytes, zero
leaked blocks."""

from __future__ import annotations

import numpy as np
import pytest

from cupool.allocator.pool import PlannedPool
from cupool.app.stress import run_pool_scenario

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("seed", range(6))
def test_random_workloads_are_byte_exact_and_leak_nothing(cuda_device, seed):
    result = run_pool_scenario(cuda_device, seed)
    assert result.bytes_checked > 0
    assert (result.corrupt_bytes, result.leaked_blocks) == (0, 0)
    assert result.notes["mode"] == "planned" and result.notes["planned_hits"] > 0
    assert cuda_device.stats()["reservations.current"] == 0


def test_the_kernels_see_a_corrupted_block(cuda_device):
    result = run_pool_scenario(cuda_device, 1, faults=("pool-corrupt",))
    assert result.corrupt_bytes == 4 and result.leaked_blocks == 0


def test_a_kept_block_is_measured_as_a_leak(cuda_device):
    kept = []
    result = run_pool_scenario(cuda_device, 2, faults=("pool-leak",), keep=kept)
    assert result.leaked_blocks == 1 and result.corrupt_bytes == 0
    kept.clear()


def test_cupy_computes_correctly_on_arrays_the_pool_serves(cuda_device):
    cupy = pytest.importorskip("cupy")
    pool = PlannedPool(cuda_device, name="gpu-cupy")
    base = np.arange(4096, dtype=np.float32)
    with cupy.cuda.using_allocator(pool.malloc):
        weights = cupy.arange(1000, dtype=cupy.float32)  # persistent: outside iterations
        for step in range(5):
            with pool.iteration():
                x = cupy.arange(4096, dtype=cupy.float32) * (step + 1)
                y = x + weights.sum()
                z = cupy.concatenate([y, x])
                expected = base * (step + 1) + np.float32(499500.0)
                assert np.array_equal(cupy.asnumpy(z[:4096]), expected)
                assert np.array_equal(cupy.asnumpy(z[4096:]), base * (step + 1))
                del x, y, z
        del weights
    cupy.cuda.Stream.null.synchronize()
    assert pool.memory_stats()["planned_hits"] > 0
    assert pool.used_bytes() == 0 and pool.live_blocks() == []
    pool.close()
    assert cuda_device.stats()["reservations.current"] == 0
