"""``PlannedPool`` beside CuPy's own ``MemoryPool`` on the same ``cupy.empty`` loop.

For one trace, the allocations of one iteration are replayed as ``cupy.empty(size, uint8)``
arrays and dropped again, in this order: the persistent buffers once, outside the
iteration; then at each op the frees of the buffers ending there and the allocations of
the buffers starting there (id order). The two allocators take turns, one iteration
each per round, so a change of machine speed hits both alike:

- ``planned``: a :class:`~cupool.allocator.PlannedPool` on the device, after its recorded
  iteration (every later allocation is served from the plan);
- ``cupy``: ``cupy.cuda.MemoryPool()`` (``cudaMalloc`` underneath), on a GPU only: without
  a driver it cannot allocate at all.

Measured per trace: the median over rounds of the loop's wall time per allocation
(malloc + free through ``cupy.empty``, µs; the garbage collector paused) and each pool's
reserved bytes at its peak (``reserved_bytes.peak`` of the planned pool over its planned
iterations, the recorded one excluded;
``total_bytes()`` of CuPy's pool, which keeps what it reserved until
``free_all_blocks``). Beside them: the trace's lower bound and the reserved bytes that
:mod:`cupool.baselines`' model of CuPy's pool predicts, so a GPU run also checks that model.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass

import numpy as np

from cupool.baselines import allocate_trace
from cupool.core.vocabulary import PERSISTENT, Trace

ALLOCATE, FREE = 1, -1


@dataclass(frozen=True)
class AllocationLoop:
    """One iteration of a trace as ``cupy.empty`` calls: the persistent sizes (allocated
    once, before the iterations) and ``events``, each ``(ALLOCATE, buffer id, size)`` or
    ``(FREE, buffer id, 0)`` in replay order (tuples, read in the timed loop)."""

    persistent_sizes: tuple[int, ...]
    events: tuple[tuple[int, int, int], ...]

    @property
    def allocations(self) -> int:
        return sum(1 for sign, _, _ in self.events if sign == ALLOCATE)


def allocation_loop(trace: Trace) -> AllocationLoop:
    """The ``cupy.empty`` loop of ``trace`` (module docstring)."""
    allocations = [[] for _ in range(trace.num_ops + 1)]
    frees = [[] for _ in range(trace.num_ops + 1)]
    persistent = []
    for buffer in sorted(trace.buffers, key=lambda b: (b.start, b.id)):
        if buffer.kind == PERSISTENT:
            persistent.append(buffer.size)
        else:
            allocations[buffer.start].append(buffer)
            frees[buffer.end].append(buffer)
    events = []
    for op in range(trace.num_ops + 1):
        events += [(FREE, b.id, 0) for b in frees[op]]
        events += [(ALLOCATE, b.id, b.size) for b in allocations[op]]
    return AllocationLoop(tuple(persistent), tuple(events))


def run_loop(loop: AllocationLoop) -> float:
    """Replay ``loop.events`` through the current CuPy allocator; wall seconds of the loop
    (the ``cupy.empty`` calls, the array drops and the loop itself, nothing else)."""
    import cupy

    live = {}
    empty, uint8 = cupy.empty, np.uint8
    started = time.perf_counter()
    for sign, buffer_id, size in loop.events:
        if sign > 0:
            live[buffer_id] = empty(size, uint8)
        else:
            del live[buffer_id]
    live.clear()
    return time.perf_counter() - started


def compare_pools(trace: Trace, device, *, rounds: int = 9, warmup: int = 2) -> dict:
    """Time ``trace``'s loop on a planned pool over ``device`` and, when ``device`` is a
    GPU, on CuPy's ``MemoryPool`` (module docstring); one flat dict per trace."""
    import cupy

    from cupool.allocator import PlannedPool

    loop = allocation_loop(trace)
    on_gpu = device.kind == "cuda"
    planned = PlannedPool(device, name=trace.name)
    cupy_pool = cupy.cuda.MemoryPool() if on_gpu else None
    pools = {"planned": planned} | ({"cupy": cupy_pool} if on_gpu else {})
    persistent, seconds = {}, {name: [] for name in pools}
    try:
        for name, pool in pools.items():
            cupy.cuda.set_allocator(pool.malloc)
            persistent[name] = [cupy.empty(size, np.uint8) for size in loop.persistent_sizes]
        cupy.cuda.set_allocator(planned.malloc)
        with planned.iteration():  # the recorded iteration; the plan serves every later one
            run_loop(loop)
        planned.reset_peak_stats()  # the peak of the planned iterations, not the recording's
        gc.collect()
        gc.disable()
        try:
            for round_index in range(warmup + rounds):
                for name, pool in pools.items():
                    cupy.cuda.set_allocator(pool.malloc)
                    if name == "planned":
                        with planned.iteration():
                            elapsed = run_loop(loop)
                    else:
                        elapsed = run_loop(loop)
                    if round_index >= warmup:
                        seconds[name].append(elapsed)
        finally:
            gc.enable()
            cupy.cuda.set_allocator(None)
        stats = planned.memory_stats()
        cupy_reserved = cupy_pool.total_bytes() if on_gpu else None
    finally:
        persistent.clear()
        if cupy_pool is not None:
            cupy_pool.free_all_blocks()
        planned.close()
    us = {name: statistics.median(s / loop.allocations * 1e6 for s in samples)
          for name, samples in seconds.items()}
    planned_reserved = stats["reserved_bytes.peak"]
    row = {
        "trace": trace.name, "allocations": loop.allocations, "rounds": rounds,
        "lower_bound_bytes": trace.lower_bound_bytes(),
        "planned_us": us["planned"], "planned_reserved_bytes": planned_reserved,
        "planned_hits": stats["planned_hits"],
        "fallback_allocations": stats["fallback_allocations"],
        "cupy_us": us.get("cupy"), "cupy_reserved_bytes": cupy_reserved,
        "cupy_model_reserved_bytes": allocate_trace(trace, "cupy")["peak_reserved_bytes"],
    }
    if on_gpu:
        row["planned_over_cupy_us"] = us["planned"] / us["cupy"]
        row["cost_within_1_5x"] = row["planned_over_cupy_us"] <= 1.5
        row["reserved_below_cupy"] = planned_reserved < cupy_reserved
    return row
