"""The pool under threads: concurrent mallocs and frees, and threads interleaving inside
the planned path.
"""

from __future__ import annotations

import gc
import sys
import threading

import pytest

cupy = pytest.importorskip("cupy")

import numpy as np  # noqa: E402

from tests.allocator.helpers import empty, fill, holds  # noqa: E402


def test_threads_malloc_and_free_concurrently(pool):
    failures = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        live = []
        try:
            for i in range(300):
                a = empty(int(rng.integers(1, 20000)))
                fill(a, seed)
                live.append(a)
                if len(live) > 4:
                    old = live.pop(int(rng.integers(0, len(live))))
                    if not holds(old, seed):
                        failures.append(f"thread {seed}: bytes changed at iteration {i}")
                    del old
        except Exception as exc:  # reported below
            failures.append(repr(exc))
        if not all(holds(a, seed) for a in live):
            failures.append(f"thread {seed}: final bytes changed")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(1, 5)]
    for t in threads:
        t.start()
    iterations = 0
    while any(t.is_alive() for t in threads):
        with pool.iteration():
            tmp = [empty(4096) for _ in range(3)]
            for array in tmp:
                fill(array, 0xAB)
            assert all(holds(array, 0xAB) for array in tmp)
            del tmp, array
        iterations += 1
    for t in threads:
        t.join()
    assert failures == []
    assert iterations > 0
    gc.collect()
    assert pool.used_bytes() == 0
    stats = pool.memory_stats()
    assert stats["mallocs"] == stats["frees"]


def test_threads_contend_on_the_planned_path(pool):
    """Several threads allocate inside planned iterations with a tiny GIL switch interval,
    so they interleave inside the pool: blocks stay disjoint and intact, none is lost."""
    with pool.iteration():
        tmp = [empty(4096) for _ in range(8)]
        del tmp
    assert pool.mode == "planned"
    failures = []
    start = threading.Barrier(3)

    def worker(seed):
        try:
            start.wait()
            for _ in range(200):
                arrays = [empty(4096), empty(4096)]
                for array in arrays:
                    fill(array, seed)
                if not all(holds(array, seed) for array in arrays):
                    failures.append(f"thread {seed}: bytes changed")
                del arrays, array
        except Exception as exc:  # reported below
            failures.append(repr(exc))

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with pool.iteration():
            threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
            for t in threads:
                t.start()
            start.wait()
            for t in threads:
                t.join(timeout=60)
    finally:
        sys.setswitchinterval(previous)
    assert failures == []
    gc.collect()
    stats = pool.memory_stats()
    assert pool.used_bytes() == 0 and stats["mallocs"] == stats["frees"]
    assert stats["planned_hits"] > 0 and stats["fallback_allocations"] > 0
