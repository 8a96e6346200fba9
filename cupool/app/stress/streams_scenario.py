"""The ``streams`` scenario: several threads, each with its own stream, blocks from one
shared pool and pinned buffers, copying patterns host → device → device → host."""

from __future__ import annotations

import threading

import numpy as np

from cupool.app.stress.config import CORRUPT_BYTES, STREAM_ROUNDS, THREADS
from cupool.app.stress.device import baseline, measure_leaks
from cupool.app.stress.result import ScenarioResult


def run_streams_scenario(device, seed: int, streams=None, *, faults=(),
                         rounds: int = STREAM_ROUNDS) -> ScenarioResult:
    """The ``streams`` scenario (:mod:`cupool.app.stress`): one thread per stream of ``streams``
    (default: :data:`THREADS` new streams), blocks from one shared pool."""
    from cupool.allocator.pool import PlannedPool
    from cupool.kernels import fill_pattern, verify_pattern
    from cupool.kernels.reference import count_mismatches
    from cupool.kernels.reference import fill as host_fill

    streams = streams or [device.create_stream(f"stress-{k}") for k in range(THREADS)]
    before = baseline(device)
    pool = PlannedPool(device, name=f"stress-streams-{seed}")
    pattern_seed = seed & ((1 << 64) - 1)
    totals = [ScenarioResult() for _ in streams]
    failures: list[BaseException] = []
    start = threading.Barrier(len(streams))

    def worker(index: int, stream) -> None:
        tally = totals[index]
        rng = np.random.default_rng([seed, index])
        size = int(rng.integers(1, 1 << 20))
        blocks, pinned = [], []
        try:
            start.wait()
            # the pool's pointers live only in ``blocks``, so clearing it frees them
            blocks = [pool.malloc(size), pool.malloc(size)]
            pinned = [device.alloc_pinned(size), device.alloc_pinned(size)]
            a, b = (memory.ptr for memory in blocks)
            src, dst = (memory.ptr for memory in pinned)
            for repeat in range(rounds):
                buffer_id = 100 * index + repeat
                view = device.pinned_array(pinned[0])
                host_fill(view, pattern_seed, buffer_id, repeat)
                del view
                device.copy_h2d_async(a, src, size, stream)
                device.copy_d2d_async(b, a, size, stream)
                if "streams-corrupt" in faults and index == 0 and repeat == 0:
                    fill_pattern(device, b, min(size, CORRUPT_BYTES), seed=pattern_seed,
                                 buffer_id=buffer_id + 1, iteration=repeat, stream=stream)
                check = verify_pattern(device, b, size, seed=pattern_seed,
                                       buffer_id=buffer_id, iteration=repeat, stream=stream)
                tally.bytes_checked += size
                tally.corrupt_bytes += check.mismatches
                fill_pattern(device, a, size, seed=pattern_seed, buffer_id=buffer_id,
                             iteration=repeat + rounds, stream=stream)
                device.copy_d2h_async(dst, a, size, stream)
                stream.synchronize()
                view = device.pinned_array(pinned[1])
                tally.bytes_checked += size
                tally.corrupt_bytes += count_mismatches(view, pattern_seed, buffer_id,
                                                        repeat + rounds)
                del view
        except BaseException as exc:  # reported by the caller, after every thread joined
            failures.append(exc)
            start.abort()
        finally:
            try:
                stream.synchronize()
            except BaseException as exc:
                failures.append(exc)
            for memory in pinned:
                device.free_pinned(memory)
            blocks.clear()

    threads = [threading.Thread(target=worker, args=(k, s), name=f"stress-streams-{k}")
               for k, s in enumerate(streams)]
    result = ScenarioResult()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for tally in totals:
            result.add(tally)
        result.leaked_blocks = measure_leaks(device, pool, before)
    real = [f for f in failures if not isinstance(f, threading.BrokenBarrierError)]
    if real:
        raise real[0]
    return result
