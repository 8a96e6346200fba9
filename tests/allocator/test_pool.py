"""PlannedPool with real CuPy objects on the emulated device: CuPy's allocator protocol,
record, plan and planned iterations, CuPy's conventions (limits, out of memory, sizes) and
misuse.

Only what runs without a GPU is used: ``cupy.empty`` (it calls the allocator), pointers,
views and slices; bytes are read and written with NumPy at the pointers.
"""

from __future__ import annotations

import gc
import pickle

import pytest

cupy = pytest.importorskip("cupy")

import numpy as np  # noqa: E402
from cupy.cuda.memory import OutOfMemoryError  # noqa: E402

from cupool.allocator import (  # noqa: E402
    AllocationSizeError,
    CapacityError,
    IterationStateError,
    PlannedPool,
    PoolError,
    PoolOutOfMemoryError,
)
from tests.allocator.helpers import (  # noqa: E402
    assert_disjoint,
    empty,
    fill,
    holds,
    offsets_of,
    step,
)


# -- the allocator protocol ----------------------------------------------------------------
def test_cupy_empty_goes_through_the_pool(pool, device):
    a = empty(1000)
    assert pool.used_bytes() == 1024  # rounded up to 512 bytes
    assert pool.total_bytes() == device.stats()["reserved_bytes.current"] == 1024
    assert pool.memory_stats()["persistent_bytes.current"] == 1024
    assert a.data.mem.size == 1024
    del a
    assert pool.used_bytes() == 0
    assert pool.free_bytes() == 1024
    pool.free_all_blocks()
    assert pool.total_bytes() == 0
    assert device.stats()["reserved_bytes.current"] == 0


def test_bytes_written_through_the_arena_survive_while_the_array_lives(pool):
    weights = empty(8192)
    fill(weights, 7)
    kept = []
    for i in range(6):
        with pool.iteration():
            x = empty(4096)
            fill(x, i)
            y = empty(4096)
            fill(y, 100 + i)
            assert holds(x, i)
            kept.append(y)  # lives on across iterations
            del x
    assert pool.mode == "planned"
    assert holds(weights, 7)
    assert [holds(y, 100 + i) for i, y in enumerate(kept)] == [True] * 6
    assert_disjoint([weights, *kept])


def test_views_keep_blocks_alive(pool):
    a = empty(4096)
    fill(a, 3)
    view = a[1024:2048]
    reshaped = a.reshape(64, 64)
    del a
    gc.collect()
    assert pool.memory_stats()["live_blocks.current"] == 1
    b = empty(4096)  # may not reuse a's bytes
    assert_disjoint([view, b])
    assert holds(view, 3) and holds(reshaped, 3)
    del view
    assert pool.used_bytes() == 8192
    del reshaped
    assert pool.used_bytes() == 4096


def test_zero_size_allocation_is_a_null_pointer(pool):
    a = empty(0)
    assert a.data.ptr == 0
    assert pool.used_bytes() == 0
    assert pool.memory_stats()["zero_size_allocations"] == 1


def test_the_fast_and_the_general_malloc_agree(pool):
    """pool.malloc (the inlined planned path) and PlannedPool.malloc (the general path,
    also used under memory hooks) serve the same offsets and count the same events,
    including a collision (a block kept past its planned end)."""
    general = PlannedPool.malloc.__get__(pool)
    assert pool.malloc is not general and pool.malloc.__doc__ == PlannedPool.malloc.__doc__

    def body(keep):
        a = empty(4096)
        b = empty(10000)
        kept = a if keep else None
        del a
        c = empty(3000)  # planned over a's bytes: a collision when a is kept
        pointers = [b.data.ptr, c.data.ptr]
        del b, c
        return pointers, kept

    with pool.iteration():
        body(False)
    results = {}
    for name, malloc in (("fast", pool.malloc), ("general", general)):
        cupy.cuda.set_allocator(malloc)
        before = pool.memory_stats()
        runs = []
        for keep in (False, True, False):
            with pool.iteration():
                pointers, kept = body(keep)
            del kept
            runs.append(pointers)
        after = pool.memory_stats()
        results[name] = runs, {k: after[k] - before[k] for k in
                               ("planned_hits", "collisions", "fallback_allocations",
                                "mallocs", "frees")}
    assert results["fast"] == results["general"]
    runs, counts = results["fast"]
    assert runs[0] == runs[2] and runs[1][1] != runs[0][1]  # the collision went elsewhere
    assert counts == {"planned_hits": 8, "collisions": 1, "fallback_allocations": 1,
                      "mallocs": 9, "frees": 9}


# -- record, plan, planned -------------------------------------------------------------------
def test_record_then_plan_then_identical_offsets(pool):
    out = None
    with pool.iteration():
        out = step()
    assert pool.mode == "planned"
    stats = pool.memory_stats()
    assert stats["recorded_iterations"] == 1 and stats["recorded_allocations"] == 4
    assert stats["plans"] == 1 and pool.plan.status.value == "optimal"
    base = pool.arena_ptr
    del out
    runs = [[p - base for p in offsets_of(pool, step)] for _ in range(4)]
    assert runs[0] == runs[1] == runs[2] == runs[3]
    assert all(0 <= o < pool.plan.arena_bytes for o in runs[0])
    stats = pool.memory_stats()
    assert stats["planned_hits"] == 16 and stats["fallback_allocations"] == 0
    assert stats["divergent_iterations"] == 0


def test_an_output_kept_across_iterations_is_never_overlapped(pool):
    out = None
    for _ in range(8):
        with pool.iteration():
            new = step(out_bytes=2048)
            fill(new, 9)
            if out is not None:
                assert holds(out, 9)
                assert_disjoint([out, new])
            out = new  # the previous output dies after the new one exists
    stats = pool.memory_stats()
    assert stats["divergent_iterations"] == 0
    assert stats["collisions"] >= 1  # the output's slot was busy, never overlapped
    assert stats["planned_hits"] + stats["fallback_allocations"] == 7 * 4


def test_record_iterations_must_agree_before_planning(device):
    pool = PlannedPool(device, record_iterations=2)
    cupy.cuda.set_allocator(pool.malloc)
    try:
        for nbytes, mode in [(512, "record"), (1024, "record"), (1024, "planned")]:
            with pool.iteration():
                x = empty(nbytes)
                del x
            assert pool.mode == mode
    finally:
        cupy.cuda.set_allocator(None)


def test_divergence_then_replanning(pool):
    def body(sizes):
        def run():
            arrays = [empty(n) for n in sizes]
            del arrays

        return run

    offsets_of(pool, body([4096, 8192]))
    assert pool.mode == "planned"
    offsets_of(pool, body([4096, 8192, 512]))  # one allocation more than the plan
    stats = pool.memory_stats()
    assert stats["divergent_allocations"] == 1 and stats["divergent_iterations"] == 1
    assert pool.mode == "planned"
    offsets_of(pool, body([4096, 8192]))  # on plan again: the streak resets
    offsets_of(pool, body([4096, 1024]))  # wrong size
    offsets_of(pool, body([4096]))  # too few
    stats = pool.memory_stats()
    assert stats["divergent_iterations"] == 3 and stats["replans"] == 1
    assert pool.mode == "record"
    offsets_of(pool, body([4096]))
    assert pool.mode == "planned" and pool.memory_stats()["plans"] == 2
    assert pool.plan.arena_bytes == 4096
    assert pool.used_bytes() == 0


def test_a_failed_iteration_is_not_recorded(pool):
    with pytest.raises(RuntimeError, match="boom"), pool.iteration():
        x = empty(512)
        del x
        raise RuntimeError("boom")
    assert pool.mode == "record"
    assert pool.memory_stats()["recorded_iterations"] == 0


def test_persistent_region_is_not_disturbed_by_iterations(pool):
    params = [empty(3000 + i) for i in range(5)]
    for i, p in enumerate(params):
        fill(p, i + 1)
    for _ in range(4):
        with pool.iteration():
            tmp = [empty(5000) for _ in range(3)]
            for t in tmp:
                fill(t, 0xEE)
            del tmp
    assert all(holds(p, i + 1) for i, p in enumerate(params))
    assert pool.memory_stats()["persistent_bytes.current"] == sum(
        (3000 + i + 511) // 512 * 512 for i in range(5))


def test_reserved_bytes_are_what_the_plan_needs(pool, device):
    with pool.iteration():
        a = empty(1 << 20)
        b = empty(1 << 20)
        del a
        c = empty(1 << 20)  # reuses a's bytes while recording (best fit)
        del b, c
    stats = pool.memory_stats()
    assert stats["arena_bytes.current"] == 2 << 20
    # The recording's fallback segments were released when the plan was installed.
    assert stats["reserved_bytes.current"] == 2 << 20
    assert device.stats()["reserved_bytes.current"] == 2 << 20


# -- CuPy conventions --------------------------------------------------------------------------
def test_limits_follow_cupy(pool, device):
    assert pool.get_limit() == 0
    pool.set_limit(size=1 << 20)
    assert pool.get_limit() == 1 << 20
    pool.set_limit(fraction=0.5)
    assert pool.get_limit() == device.mem_info()[1] // 2
    pool.set_limit()
    assert pool.get_limit() == 0
    with pytest.raises(ValueError, match="cannot be specified"):
        pool.set_limit(size=1, fraction=0.5)
    with pytest.raises(ValueError, match="out of range"):
        pool.set_limit(fraction=1.5)
    with pytest.raises(CapacityError, match=r"limit \(=536870912\) is larger"):
        pool.set_limit(size=512 << 20)


def test_out_of_memory_raises_cupys_error_with_a_report(device):
    pool = PlannedPool(device, capacity="1MiB")
    cupy.cuda.set_allocator(pool.malloc)
    try:
        keep = empty(600 << 10)
        with pytest.raises(OutOfMemoryError) as info:
            empty(600 << 10)
    finally:
        cupy.cuda.set_allocator(None)
    error = info.value
    assert isinstance(error, PoolOutOfMemoryError)
    assert (error.size, error.total, error.limit) == (614400, 614400, 1 << 20)
    assert "Out of memory allocating 614,400 bytes" in str(error)
    assert "live blocks: 1 holding 614400 bytes" in error.report
    assert "persistent" in error.report
    again = pickle.loads(pickle.dumps(error))
    assert isinstance(again, PoolOutOfMemoryError) and again.report == error.report
    assert pool.memory_stats()["oom_errors"] == 1
    del keep
    assert pool.used_bytes() == 0  # nothing leaked


def test_absurd_size_is_out_of_memory_and_leaks_nothing(pool, device):
    with pytest.raises(OutOfMemoryError):
        pool.malloc(1 << 60)
    assert pool.used_bytes() == 0
    assert device.stats()["reserved_bytes.current"] == 0


@pytest.mark.parametrize("size", [-3, 1.5, "12", True, None])
def test_bad_sizes_are_refused_with_the_value(pool, size):
    with pytest.raises(AllocationSizeError, match="malloc\\(size="):
        pool.malloc(size)
    assert pool.used_bytes() == 0


def test_numpy_integer_sizes_are_accepted(pool):
    pointer = pool.malloc(np.int64(100))
    assert pointer.mem.size == 512


def test_capacity_larger_than_the_device_is_refused(device):
    with pytest.raises(CapacityError, match=r"capacity \(=1073741824\) is larger than device"):
        PlannedPool(device, capacity="1GiB")


# -- misuse -----------------------------------------------------------------------------------
def test_nested_iteration_is_refused_and_the_outer_one_continues(pool):
    with pool.iteration():
        x = empty(512)
        with pytest.raises(IterationStateError, match=r"nested.*1 allocations so far"), \
                pool.iteration():
            pass
        del x
    assert pool.mode == "planned"


def test_iteration_exited_twice_is_refused(pool):
    scope = pool.iteration()
    scope.__enter__()
    scope.__exit__(None, None, None)
    with pytest.raises(IterationStateError, match="exited twice"):
        scope.__exit__(None, None, None)
    with pytest.raises(IterationStateError, match="already entered"):
        scope.__enter__()
    with pytest.raises(IterationStateError, match="without being entered"):
        pool.iteration().__exit__(None, None, None)


def test_close_refuses_while_blocks_live(device):
    pool = PlannedPool(device)
    pointer = pool.malloc(512)
    with pytest.raises(PoolError, match="1 blocks holding 512 bytes are still live"):
        pool.close()
    del pointer
    pool.close()
    assert device.stats()["reserved_bytes.current"] == 0
