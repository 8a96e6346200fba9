"""Helpers of the pool tests: CuPy arrays through the current allocator, their bytes read
and written with NumPy at the pointers (the emulated device's memory is host memory), and
a small repeating iteration."""

from __future__ import annotations

import itertools

import cupy
import numpy as np

from cupool.devices.memory import host_view


def empty(nbytes: int):
    return cupy.empty(nbytes, dtype=np.uint8)


def fill(array, value: int) -> None:
    host_view(array.data.ptr, array.nbytes)[:] = value


def holds(array, value: int) -> bool:
    return bool((host_view(array.data.ptr, array.nbytes) == value).all())


def assert_disjoint(arrays) -> None:
    ranges = sorted((a.data.ptr, a.nbytes) for a in arrays if a.nbytes)
    for (p, n), (q, _m) in itertools.pairwise(ranges):
        assert p + n <= q, f"live blocks overlap: {p:#x}+{n} and {q:#x}"


def step(out_bytes: int = 100):
    """A small iteration: 4 allocations, one of which (the output) outlives it."""
    a = empty(4096)
    b = empty(10000)
    del a
    c = empty(3000)
    out = empty(out_bytes)
    del b, c
    return out


def offsets_of(pool, body) -> list[int]:
    """Run ``body`` in an iteration and return the pointers it allocated, in order, by
    wrapping ``pool.malloc``."""
    seen = []
    original = pool.malloc

    def spy(size):
        pointer = original(size)
        seen.append(pointer.ptr)
        return pointer

    cupy.cuda.set_allocator(spy)
    try:
        with pool.iteration():
            kept = body()
    finally:
        cupy.cuda.set_allocator(original)
    del kept
    return seen
