"""The CUDA kernels on a real GPU, each held against its NumPy twin (marked ``gpu``;
skipped without a usable device, by the probe ``open_device("auto")`` uses)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from cupool.devices import probe_cuda
from cupool.kernels import fill_pattern, gather, spin, verify_pattern
from cupool.kernels import reference as ref

pytestmark = pytest.mark.gpu


@pytest.fixture
def cuda_device():
    usable, reason = probe_cuda()
    if not usable:
        pytest.skip(f"needs a usable GPU: {reason}")
    from cupool.devices.cuda import CudaDevice
    with CudaDevice() as device:
        yield device


def _read(device, ptr: int, nbytes: int) -> np.ndarray:
    host = device.alloc_pinned(nbytes)
    try:
        device.copy_d2h_async(host.ptr, ptr, nbytes, device.default_stream)
        device.default_stream.synchronize()
        return device.pinned_array(host).copy()
    finally:
        device.free_pinned(host)


def _write(device, ptr: int, data: np.ndarray) -> None:
    host = device.alloc_pinned(data.size)
    try:
        device.pinned_array(host)[:] = data
        device.copy_h2d_async(ptr, host.ptr, data.size, device.default_stream)
        device.default_stream.synchronize()
    finally:
        device.free_pinned(host)


@pytest.mark.parametrize(("offset", "nbytes", "start"),
                         [(0, 1 << 20, 0), (3, 100_001, 5), (8, 7, 13), (1, 1, 0)])
def test_fill_matches_the_twin(cuda_device, offset, nbytes, start):
    memory = cuda_device.reserve(nbytes + 64)
    stream = cuda_device.create_stream()
    fill_pattern(cuda_device, memory.ptr + offset, nbytes, seed=11, buffer_id=7, iteration=3,
                 start=start, stream=stream)
    stream.synchronize()
    assert (_read(cuda_device, memory.ptr + offset, nbytes)
            == ref.pattern(11, 7, 3, nbytes, start=start)).all()
    cuda_device.release(memory)


def test_verify_counts_flipped_bytes_like_the_twin(cuda_device):
    nbytes = (1 << 22) + 5
    memory = cuda_device.reserve(nbytes)
    data = ref.pattern(1, 2, 3, nbytes)
    rng = np.random.default_rng(0)
    where = rng.choice(nbytes, size=1000, replace=False)
    data[where] ^= 0x80
    _write(cuda_device, memory.ptr, data)
    check = verify_pattern(cuda_device, memory.ptr, nbytes, seed=1, buffer_id=2, iteration=3)
    assert check.mismatches == ref.count_mismatches(data, 1, 2, 3) == 1000
    assert check.first_mismatch == ref.first_mismatch(data, 1, 2, 3) == int(where.min())
    fill_pattern(cuda_device, memory.ptr, nbytes, seed=1, buffer_id=2, iteration=3)
    assert verify_pattern(cuda_device, memory.ptr, nbytes, seed=1, buffer_id=2,
                          iteration=3) == (0, None)
    cuda_device.release(memory)


def test_gather_matches_the_twin(cuda_device):
    arena_bytes = 1 << 16
    memory = cuda_device.reserve(arena_bytes)
    data = np.random.default_rng(2).integers(0, 256, arena_bytes, dtype=np.uint8)
    _write(cuda_device, memory.ptr, data)
    segments = [(4096, 0, 4096), (9000, 12000, 333), (20000, 16000, 8), (30001, 17001, 1)]
    gather(cuda_device, memory.ptr, arena_bytes, segments)
    cuda_device.default_stream.synchronize()
    expected = data.copy()
    ref.gather(expected, segments)
    assert (_read(cuda_device, memory.ptr, arena_bytes) == expected).all()
    cuda_device.release(memory)


@pytest.mark.parametrize("clock", ["globaltimer", "cycles"])
def test_spin_keeps_the_stream_busy(cuda_device, clock):
    stream = cuda_device.create_stream()
    spin(cuda_device, 1000, stream=stream, clock=clock)  # compile and warm up
    stream.synchronize()
    begin = time.perf_counter_ns()
    spin(cuda_device, 20_000_000, stream=stream, clock=clock)
    stream.synchronize()
    elapsed = time.perf_counter_ns() - begin
    # globaltimer is exact up to a tick; cycles assume the nominal clock (boost runs faster)
    assert elapsed >= (19_000_000 if clock == "globaltimer" else 5_000_000)
