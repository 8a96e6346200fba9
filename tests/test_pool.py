"""PlannedPool with real CuPy objects on the emulated device.

Only what runs without a GPU is used: ``cupy.empty`` (it calls the allocator), pointers,
views and slices; bytes are read and written with NumPy at the pointers.
"""

from __future__ import annotations

import gc
import io
import itertools
import json
import pickle
import sys
import threading
import time

import pytest

cupy = pytest.importorskip("cupy")

import numpy as np  # noqa: E402
from cupy.cuda import memory_hook  # noqa: E402
from cupy.cuda.memory import OutOfMemoryError  # noqa: E402

from cupool.allocator import (  # noqa: E402
    AllocationSizeError,
    CapacityError,
    IterationStateError,
    ManagedStateError,
    PlannedPool,
    PoolError,
    PoolOutOfMemoryError,
    managed,
)
from cupool.allocator.arena import BestFitArena  # noqa: E402
from cupool.allocator.recording import OUTLIVES, RecordedIteration, from_trace, to_trace  # noqa: E402
from cupool.devices import open_device  # noqa: E402
from cupool.devices.protocol import host_view  # noqa: E402
from cupool.errors import PlanFormatError  # noqa: E402


@pytest.fixture
def device():
    with open_device("emulated", capacity="256MiB") as dev:
        yield dev


@pytest.fixture
def pool(device):
    pool = PlannedPool(device)
    previous = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(pool.malloc)
    try:
        yield pool
    finally:
        cupy.cuda.set_allocator(previous)


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
    """Run ``body`` in an iteration and return the offsets (from the arena base) of the
    pointers it allocated, in order, by wrapping ``pool.malloc``."""
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


def test_the_trace_of_a_recording_has_allocation_index_time():
    recording = RecordedIteration((512, 1024, 512), (2, 3, 3), (False, False, True))
    trace = to_trace(recording, "t")
    assert [(b.start, b.end) for b in trace.buffers] == [(0, 2), (1, 3), (0, 3)]
    assert trace.buffers[2].name == OUTLIVES
    assert from_trace(trace) == recording


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


class Recorder(memory_hook.MemoryHook):
    name = "recorder"

    def __init__(self):
        self.calls = []

    def alloc_preprocess(self, **kw):
        self.calls.append(("alloc_pre", kw["mem_size"]))

    def alloc_postprocess(self, **kw):
        self.calls.append(("alloc_post", kw["mem_size"]))

    def malloc_preprocess(self, **kw):
        self.calls.append(("malloc_pre", kw["size"], kw["mem_size"]))

    def malloc_postprocess(self, **kw):
        self.calls.append(("malloc_post", kw["size"], kw["mem_size"], kw["pmem_id"] != 0))
        self.last_pmem = kw["pmem_id"]

    def free_preprocess(self, **kw):
        self.calls.append(("free_pre", kw["mem_size"], kw["pmem_id"] == self.last_pmem))

    def free_postprocess(self, **kw):
        self.calls.append(("free_post", kw["mem_size"]))


def test_memory_hooks_see_mallocs_and_frees(pool):
    hook = Recorder()
    with hook:
        a = empty(100)
        del a
    assert hook.calls == [("malloc_pre", 100, 512), ("alloc_pre", 512), ("alloc_post", 512),
                          ("malloc_post", 100, 512, True), ("free_pre", 512, True),
                          ("free_post", 512)]
    assert pool.used_bytes() == 0


def test_memory_hooks_in_planned_mode(pool):
    for _ in range(2):
        with pool.iteration():
            x = empty(2048)
            del x
    hook = Recorder()
    with hook, pool.iteration():
        x = empty(2048)
        del x
    assert [c[0] for c in hook.calls] == ["malloc_pre", "malloc_post", "free_pre", "free_post"]
    assert pool.memory_stats()["planned_hits"] == 2


def test_debug_print_hook_sees_one_malloc_and_one_free(pool):
    from cupy.cuda.memory_hooks import DebugPrintHook

    printed = io.StringIO()
    with DebugPrintHook(file=printed):
        a = empty(100)
        del a
    hooks = [json.loads(line)["hook"] for line in printed.getvalue().splitlines()]
    assert hooks == ["alloc", "malloc", "free"]


class FreeRecorder(memory_hook.MemoryHook):
    name = "free-recorder"

    def __init__(self):
        self.frees = []

    def free_preprocess(self, **kw):
        self.frees.append(("free_pre", kw["mem_size"], kw["mem_ptr"], kw["pmem_id"]))

    def free_postprocess(self, **kw):
        self.frees.append(("free_post", kw["mem_size"], kw["mem_ptr"], kw["pmem_id"]))


def test_a_free_under_a_hook_is_seen_even_if_the_malloc_was_not(pool):
    """As in CuPy's pool, the free hooks are those of the thread that frees, when it frees
    (the pool caches each thread's hook dict; a hook entered later is still seen)."""
    a = empty(100)  # no hook installed: not seen
    ptr, pmem_id = a.data.ptr, id(a.data.mem)
    hook = FreeRecorder()
    with hook:
        del a
    assert hook.frees == [("free_pre", 512, ptr, pmem_id), ("free_post", 512, ptr, pmem_id)]
    b = empty(100)
    del b  # the hook has exited: not seen
    assert len(hook.frees) == 2
    assert pool.used_bytes() == 0


def test_free_hooks_of_another_thread_see_its_frees(pool):
    arrays = [empty(4096), empty(4096)]
    hook = FreeRecorder()
    main_hook = FreeRecorder()
    seen = []

    def free_one_under_a_hook():
        with hook:
            arrays.pop()
        seen.append(list(hook.frees))

    with main_hook:  # the main thread's hooks do not see the other thread's frees
        thread = threading.Thread(target=free_one_under_a_hook)
        thread.start()
        thread.join()
    assert [f[0] for f in seen[0]] == ["free_pre", "free_post"]
    assert main_hook.frees == []
    del arrays[:]
    assert pool.used_bytes() == 0


def test_blocks_in_reference_cycles_are_freed_by_the_collector(pool):
    class Holder:
        pass

    gc.collect()
    gc.disable()
    try:
        holder = Holder()
        holder.array, holder.self = empty(4096), holder
        view = holder.array[10:]
        holder.view = view
        del holder, view
        assert pool.used_bytes() == 4096
        gc.collect()
        assert pool.used_bytes() == 0
    finally:
        gc.enable()
    assert pool.memory_stats()["frees"] == pool.memory_stats()["mallocs"] == 1


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


def test_managed_restores_the_allocator_even_when_the_body_raises(device):
    before = cupy.cuda.get_allocator()
    with pytest.raises(KeyError), managed(device=device) as pool:
        assert cupy.cuda.get_allocator() == pool.malloc
        x = empty(512)
        raise KeyError("body failed")
    assert cupy.cuda.get_allocator() == before
    assert pool.used_bytes() == 512
    del x
    assert pool.used_bytes() == 0


def test_managed_is_one_shot(device):
    scope = managed(device=device)
    with scope:
        pass
    with pytest.raises(ManagedStateError, match="entered twice"):
        scope.__enter__()
    with pytest.raises(ManagedStateError, match="without being entered"):
        managed(device=device).__exit__(None, None, None)
    with pytest.raises(ManagedStateError, match="either a pool or options"):
        managed(PlannedPool(device), capacity="1MiB")


def test_close_refuses_while_blocks_live(device):
    pool = PlannedPool(device)
    pointer = pool.malloc(512)
    with pytest.raises(PoolError, match="1 blocks holding 512 bytes are still live"):
        pool.close()
    del pointer
    pool.close()
    assert device.stats()["reserved_bytes.current"] == 0


# -- plans on disk ----------------------------------------------------------------------------
def test_save_and_load_plan(pool, device, tmp_path):
    with pytest.raises(PoolError, match="no plan yet"):
        pool.save_plan(tmp_path / "p.json")
    out = None
    with pool.iteration():
        out = step()
    del out
    plan_path, trace_path = pool.save_plan(tmp_path / "p.json")
    assert trace_path.name == "p.trace.json"
    first = offsets_of(pool, step)
    first = [p - pool.arena_ptr for p in first]

    other = PlannedPool(device)
    other.load_plan(plan_path)
    assert other.mode == "planned" and other.memory_stats()["recorded_iterations"] == 0
    seen = offsets_of(other, step)
    assert [p - other.arena_ptr for p in seen] == first
    assert other.memory_stats()["planned_hits"] == 4


def test_a_plan_for_another_trace_is_refused(pool, device, tmp_path):
    with pool.iteration():
        x = empty(4096)
        del x
    pool.save_plan(tmp_path / "a.json")
    other = PlannedPool(device)
    cupy.cuda.set_allocator(other.malloc)
    with other.iteration():
        y = empty(8192)
        del y
    with pytest.raises(PlanFormatError, match="a plan for another trace"):
        other.load_plan(tmp_path / "a.json")
    # A plan file paired with the wrong trace file is refused as well.
    other.save_plan(tmp_path / "b.json")
    with pytest.raises(PlanFormatError, match="a plan for another trace"):
        PlannedPool(device).load_plan(tmp_path / "a.json", tmp_path / "b.trace.json")


# -- the arena ----------------------------------------------------------------------------------
class Segment:
    def __init__(self, ptr, size):
        self.ptr, self.size = ptr, size


def test_best_fit_arena_splits_and_merges_exactly():
    arena = BestFitArena("t")
    arena.add_segment(Segment(1000, 100))
    arena.add_segment(Segment(1100, 20))  # adjacent in address, but another segment
    a = arena.alloc(30)
    b = arena.alloc(20)
    assert (a, b) == (1000, 1100)  # b: the 20-byte segment is the best fit
    c = arena.alloc(60)
    assert c == 1030
    assert arena.alloc(11) is None
    arena.free(a)
    arena.free(c)
    arena.check()
    assert arena.stats().largest_free_range == 100
    assert [s.ptr for s in arena.take_empty_segments()] == [1000]
    arena.free(b)
    assert [s.ptr for s in arena.take_empty_segments()] == [1100]
    arena.check()


# -- threads ------------------------------------------------------------------------------------
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



def test_pool_lock_excludes_and_wakes_waiters_under_contention():
    from cupool.allocator.lock import PoolLock

    class CountingLock(PoolLock):
        __slots__ = ("waits",)

        def wait_for(self):
            self.waits += 1
            super().wait_for()

    lock = CountingLock()
    lock.waits = 0
    state = {"count": 0, "inside": 0, "overlaps": 0}

    def worker():
        for _ in range(300):
            with lock:
                state["inside"] += 1
                if state["inside"] != 1:
                    state["overlaps"] += 1
                count = state["count"]
                time.sleep(0)  # give the GIL away while holding the lock
                state["count"] = count + 1
                state["inside"] -= 1

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        sys.setswitchinterval(previous)
    assert not any(t.is_alive() for t in threads)
    assert state == {"count": 1200, "inside": 0, "overlaps": 0}
    assert lock.waits > 0  # the contended path ran
    assert lock.waiters == 0 and not lock.locked()


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
