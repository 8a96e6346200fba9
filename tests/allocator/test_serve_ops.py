"""``pool.serve_ops`` serves several ops' blocks in one call exactly as ``pool.malloc``
does them one by one: the same addresses, the same answer about the plan, the same
statistics, for scripts of frees and allocations that follow the plan or leave it, with
or without blocks said to be transient (freed later in the same call); through the
compiled loop and through the Python one."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cupool.allocator import PlannedPool, fastpath
from cupool.allocator.fastpath import Served
from cupool.devices import open_device

SIZES = (0, 1, 512, 513, 4096, 70000)


def one_by_one(pool, blocks, ptrs, ops) -> Served:
    """What ``serve_ops`` promises, with ``pool.malloc``."""
    for j, (frees, allocs) in enumerate(ops):
        missed = 0
        for key in frees:
            blocks.pop(key, None)
        for key, nbytes, planned in allocs:
            blocks[key] = pool.malloc(nbytes)
            ptrs[key] = blocks[key].ptr
            missed += ptrs[key] != planned
        if missed:
            return Served(j, missed)
    return Served(len(ops), 0)


def every_block(pool, blocks, ptrs, ops) -> None:
    """Each op's frees and blocks, off the plan or not (a recording step)."""
    for frees, allocs in ops:
        for key in frees:
            blocks.pop(key, None)
        for key, nbytes, _ in allocs:
            blocks[key] = pool.malloc(nbytes)
            ptrs[key] = blocks[key].ptr


def _ops(sizes: list, lives: list, planned: dict) -> list:
    """Op i allocates block i of ``sizes[i]`` bytes, freed before op ``i + lives[i]``
    (never, past the end)."""
    ends: dict = {}
    for i, life in enumerate(lives):
        ends.setdefault(i + life, []).append(i)
    return [(tuple(ends.get(i, ())), ((i, size, planned.get(i, -1)),))
            for i, size in enumerate(sizes)]


def _step(pool, serve, ops) -> tuple:
    blocks, ptrs = {}, {}
    with pool.iteration():
        served = serve(pool, blocks, ptrs, ops)
        blocks.clear()
    return served, ptrs


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_serve_ops_does_what_malloc_does_one_by_one(data):
    n = data.draw(st.integers(1, 12))
    sizes = data.draw(st.lists(st.sampled_from(SIZES), min_size=n, max_size=n))
    lives = data.draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    changed = data.draw(st.lists(st.sampled_from(SIZES), min_size=n, max_size=n))
    split = data.draw(st.integers(0, n))
    # transient: some keys, freed later in the call or not (those must become blocks)
    transient = frozenset(data.draw(st.sets(st.integers(0, n - 1))))
    results = []
    loops = [None] if fastpath.serve_loop is None else [fastpath.serve_loop, None]
    serves = [(one_by_one, None)] + [
        (serve, loop) for loop in loops
        for serve in (lambda pool, b, p, ops: pool.serve_ops(b, p, ops),
                      lambda pool, b, p, ops: pool.serve_ops(b, p, ops, transient))]
    for serve, loop in serves:
        with open_device("emulated", capacity="64MiB") as device, \
                _serve_loop(loop):
            pool = PlannedPool(device)
            _step(pool, every_block, _ops(sizes, lives, {}))  # recorded
            _, ptrs = _step(pool, every_block, _ops(sizes, lives, {}))  # planned
            base = pool.arena_ptr or 0
            planned = {k: p - base for k, p in ptrs.items()}
            again = _ops(sizes, lives, ptrs)
            other = _ops(sizes[:split] + changed[split:], lives, ptrs)  # off the plan
            steps, peaks = [], []
            for ops in (again, other, again):  # each step's own peak, from a reset
                pool.reset_peak_stats()
                steps.append(_step(pool, serve, ops))
                peaks.append(pool.memory_stats())
            results.append(([(s, {k: p and p - base for k, p in q.items()
                                  if planned.get(k) == p - base}) for s, q in steps], peaks,
                            pool.memory_stats(), pool.used_bytes(), pool.mode))
            pool.close()
    assert all(result == results[0] for result in results[1:])


@contextlib.contextmanager
def _serve_loop(loop):
    """``pool.serve_ops`` through ``loop`` (``None``: the Python loop)."""
    kept = fastpath.serve_loop
    fastpath.serve_loop = loop
    try:
        yield
    finally:
        fastpath.serve_loop = kept


def test_serve_ops_under_memory_hooks_calls_them_for_every_block():
    cupy = pytest.importorskip("cupy")
    from cupy.cuda.memory_hooks import DebugPrintHook

    with open_device("emulated", capacity="64MiB") as device:
        pool = PlannedPool(device)
        ops = _ops([512, 4096, 512], [1, 2, 1], {})
        _step(pool, every_block, ops)
        _, ptrs = _step(pool, every_block, ops)
        lines = []

        class Log:
            def write(self, text):
                lines.append(text)

            def flush(self):
                pass

        with DebugPrintHook(file=Log()):
            served, again = _step(pool, lambda pool, b, p, o: pool.serve_ops(b, p, o),
                                  _ops([512, 4096, 512], [1, 2, 1], ptrs))
        assert served == Served(3, 0) and again == ptrs
        assert sum('"hook":"malloc"' in line for line in lines) == 3
        del cupy
        pool.close()
