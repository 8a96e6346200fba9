"""The ``pool`` scenario: a :class:`~cupool.allocator.pool.PlannedPool` serves a random
workload, recorded once and then served from its plan, every block's bytes checked."""

from __future__ import annotations

import numpy as np

from cupool.app.stress.config import CORRUPT_BYTES, POOL_ITERATIONS
from cupool.app.stress.device import baseline, measure_leaks
from cupool.app.stress.errors import StressError
from cupool.app.stress.result import ScenarioResult
from cupool.app.stress.workloads import random_workload
from cupool.check import validate_plan


def run_pool_scenario(device, seed: int, stream=None, *, faults=(),
                      iterations: int = POOL_ITERATIONS, keep=None) -> ScenarioResult:
    """The ``pool`` scenario (:mod:`cupool.app.stress`) on ``device``; ``stream`` carries the
    kernels (default: a new stream). ``keep`` (a list) receives blocks a ``"pool-leak"``
    fault keeps alive."""
    from cupool.allocator.pool import PlannedPool
    from cupool.kernels import fill_pattern, verify_pattern

    rng = np.random.default_rng(seed)
    steps, carried, persistent_sizes = random_workload(rng)
    stream = stream or device.create_stream("stress-pool")
    result = ScenarioResult()
    before = baseline(device)
    pool = PlannedPool(device, name=f"stress-pool-{seed}", solve_time_limit=1.0)
    live: dict = {}  # key -> (MemoryPointer, size, buffer id, iteration)
    pattern_seed = seed & ((1 << 64) - 1)

    def allocate(key, size, buffer_id, iteration):
        memory = pool.malloc(size)
        fill_pattern(device, memory.ptr, size, seed=pattern_seed, buffer_id=buffer_id,
                     iteration=iteration, stream=stream)
        if "pool-corrupt" in faults and not result.notes.get("corrupted"):
            result.notes["corrupted"] = True
            fill_pattern(device, memory.ptr, min(size, CORRUPT_BYTES), seed=pattern_seed,
                         buffer_id=buffer_id + 1, iteration=iteration, stream=stream)
        live[key] = (memory, size, buffer_id, iteration)

    def release(key):
        memory, size, buffer_id, iteration = live.pop(key)
        check = verify_pattern(device, memory.ptr, size, seed=pattern_seed,
                               buffer_id=buffer_id, iteration=iteration, stream=stream)
        result.bytes_checked += size
        result.corrupt_bytes += check.mismatches

    try:
        for j, size in enumerate(persistent_sizes):
            allocate(("persistent", j), size, 1_000_000 + j, 0)
        for iteration in range(iterations):
            allocations = 0
            with pool.iteration():
                for step in steps:
                    if step[0] == "alloc":
                        allocate(("block", iteration, step[1]), step[2], step[1], iteration)
                        allocations += 1
                        if allocations == 2 and ("block", iteration - 1, carried) in live:
                            release(("block", iteration - 1, carried))
                    else:
                        release(("block", iteration, step[1]))
        for key in [key for key in live if key[0] == "block"]:
            release(key)
        stats = pool.memory_stats()
        result.notes.update(planned_hits=stats["planned_hits"], mode=pool.mode,
                            collisions=stats["collisions"])
        if pool.plan is not None and not validate_plan(pool.trace, pool.plan).valid:
            raise StressError(f"pool scenario (seed {seed}): the pool's plan fails the "
                              f"validator: {validate_plan(pool.trace, pool.plan).message}")
        if stats["planned_hits"] == 0:
            raise StressError(f"pool scenario (seed {seed}): no allocation was served from "
                              f"a plan (mode {pool.mode!r}, plans {stats['plans']})")
        for key in list(live):
            release(key)
        if "pool-leak" in faults and keep is not None:
            keep.append(pool.malloc(512))
    finally:
        try:  # no kernel may still write a block when its bytes go back to the pool
            stream.synchronize()
        finally:
            live.clear()
            result.leaked_blocks = measure_leaks(device, pool, before)
    return result
