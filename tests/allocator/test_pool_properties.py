"""Properties of PlannedPool under random interleavings of malloc, free, views and iteration
boundaries: live blocks never overlap, their bytes never change, no block is ever lost.

The oracle is the test's own bookkeeping: every array it holds has a pattern written into
its bytes; after each step the held blocks must be disjoint, hold their patterns, and
account exactly for ``used_bytes()`` and ``live_blocks()``.
"""

from __future__ import annotations

import gc
import itertools

import pytest

cupy = pytest.importorskip("cupy")

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, event, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from cupool.allocator import PlannedPool  # noqa: E402
from cupool.devices import open_device  # noqa: E402
from cupool.devices.memory import host_view  # noqa: E402

SIZES = (1, 512, 513, 4096, 10000, 70000)
SCRIPT = (4096, 10000, 3000, 100, 70000, 512)  # a repeating iteration body

_DEVICE = None


def device():
    global _DEVICE
    if _DEVICE is None or _DEVICE.closed:
        _DEVICE = open_device("emulated", capacity="64MiB")
    return _DEVICE


class PoolMachine(RuleBasedStateMachine):
    @initialize(divergence_limit=st.integers(1, 3), record_iterations=st.integers(1, 2),
                solver=st.sampled_from(["greedy-size", "best-fit"]))
    def start(self, divergence_limit, record_iterations, solver):
        self.pool = PlannedPool(device(), divergence_limit=divergence_limit,
                                record_iterations=record_iterations, solver=solver)
        self.previous = cupy.cuda.get_allocator()
        cupy.cuda.set_allocator(self.pool.malloc)
        self.held = []  # (array, pattern byte, base pointer of its block)
        self.scope = None
        self.script = itertools.cycle(SCRIPT)
        self.patterns = itertools.count(1)

    def _hold(self, nbytes: int) -> tuple:
        array = cupy.empty(nbytes, dtype=np.uint8)
        pattern = next(self.patterns) % 251 + 1
        host_view(array.data.ptr, array.nbytes)[:] = pattern
        item = (array, pattern, array.data.mem.ptr)
        self.held.append(item)
        return item

    def _drop(self, *items) -> None:
        self.held = [h for h in self.held if all(h is not i for i in items)]

    @precondition(lambda self: self.scope is None)
    @rule(variant=st.sampled_from(["same", "same", "extra", "short", "resize"]),
          keep_output=st.booleans(), free_late=st.booleans())
    def script_iteration(self, variant, keep_output, free_late):
        """One iteration of a repeating body (so plans get made and used), with the
        usual ways to leave the plan: one allocation more or fewer, another size, an
        output kept for the next iteration, a temporary freed after its planned end."""
        with self.pool.iteration():
            late = None
            first = self._hold(4096)
            self._hold(10000 if variant != "resize" else 20000)
            if free_late:
                late = first
            del first  # the machine's list holds the arrays; locals must not
            self._drop_last(1 if late is not None else 2)
            self._hold(3000)
            if variant == "extra":
                self._hold(513)
            self.blocks_are_disjoint_intact_and_accounted()
            output = self._hold(100)
            self._drop_last(3 if variant == "extra" else 2, keep=output)
            if variant != "short":
                self._hold(70000)
                self._drop_last(1)
            if late is not None:
                self._drop(late)
                del late
            if not keep_output:
                self._drop(output)
            del output

    def _drop_last(self, count: int, keep=None) -> None:
        """Drop the last ``count`` held items other than ``keep``."""
        others = [h for h in self.held if h is not keep]
        self._drop(*others[len(others) - count:])

    @rule(size=st.sampled_from(SIZES))
    def malloc(self, size):
        self._hold(size)

    @rule()
    def script_malloc(self):
        self._hold(next(self.script))

    @precondition(lambda self: self.held)
    @rule(index=st.integers(0, 10**6))
    def free(self, index):
        del self.held[index % len(self.held)]

    @precondition(lambda self: self.held)
    @rule(index=st.integers(0, 10**6))
    def keep_only_a_view(self, index):
        array, pattern, base = self.held[index % len(self.held)]
        if array.nbytes > 1:
            self.held[index % len(self.held)] = (array[1:], pattern, base)

    @precondition(lambda self: self.scope is None)
    @rule()
    def begin(self):
        self.scope = self.pool.iteration()
        self.scope.__enter__()
        self.script = itertools.cycle(SCRIPT)

    @precondition(lambda self: self.scope is not None)
    @rule(free_script_blocks=st.booleans())
    def end(self, free_script_blocks):
        if free_script_blocks:  # a well-behaved iteration frees its temporaries
            self.held = self.held[:1]
        self.scope.__exit__(None, None, None)
        self.scope = None

    @precondition(lambda self: self.scope is None)
    @rule()
    def replan(self):
        self.pool.replan()

    @rule()
    def free_all_blocks(self):
        self.pool.free_all_blocks()

    @invariant()
    def blocks_are_disjoint_intact_and_accounted(self):
        if not hasattr(self, "pool"):
            return
        blocks = {}
        for array, pattern, base in self.held:
            assert bool((host_view(array.data.ptr, array.nbytes) == pattern).all()), \
                f"bytes of the block at {base:#x} changed"
            blocks[base] = array.data.mem.size
        ranges = sorted(blocks.items())
        for (p, n), (q, _m) in itertools.pairwise(ranges):
            assert p + n <= q, f"live blocks overlap: {p:#x}+{n} and {q:#x}"
        assert self.pool.used_bytes() == sum(blocks.values())
        assert sorted((ptr, size) for _k, ptr, size, _s in self.pool.live_blocks()) == ranges
        stats = self.pool.memory_stats()
        assert stats["live_blocks.current"] == len(blocks)
        assert stats["allocated_bytes.current"] == sum(blocks.values())
        assert stats["reserved_bytes.current"] == self.pool.total_bytes() >= sum(blocks.values())
        for region in (self.pool._regions.fallback, self.pool._regions.persistent):
            region.check()

    def teardown(self):
        if not hasattr(self, "pool"):
            return
        try:
            if self.scope is not None:
                self.scope.__exit__(None, None, None)
            self.held.clear()
            gc.collect()
            stats = self.pool.memory_stats()
            for name in ("planned_hits", "collisions", "divergent_allocations", "replans"):
                event(f"{name} > 0: {stats[name] > 0}")
            assert stats["mallocs"] == stats["frees"]
            assert self.pool.used_bytes() == 0
            self.pool.close()  # refuses if any block were still live
            assert self.pool.total_bytes() == 0
        finally:
            cupy.cuda.set_allocator(self.previous)


PoolMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestPoolMachine = PoolMachine.TestCase


def test_device_gets_everything_back():
    """Run after the machine: every reservation of every pool was returned."""
    dev = device()
    assert dev.stats()["reserved_bytes.current"] == 0
    dev.close()
