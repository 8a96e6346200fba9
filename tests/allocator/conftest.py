"""Fixtures of the allocator tests: an emulated device, and a pool on it installed as
CuPy's allocator (tests that need CuPy skip without it; the arena, recording and lock
tests run without it)."""

from __future__ import annotations

import pytest

from cupool.devices import open_device


@pytest.fixture
def device():
    with open_device("emulated", capacity="256MiB") as dev:
        yield dev


@pytest.fixture
def pool(device):
    cupy = pytest.importorskip("cupy")
    from cupool.allocator import PlannedPool

    pool = PlannedPool(device)
    previous = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(pool.malloc)
    try:
        yield pool
    finally:
        cupy.cuda.set_allocator(previous)
