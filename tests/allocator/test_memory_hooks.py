"""The pool and CuPy's memory hooks, and the block finaliser: hooks see each malloc and
free (those of the freeing thread, as in CuPy's pool), and blocks kept alive only by
reference cycles are freed by the collector.
"""

from __future__ import annotations

import gc
import io
import json
import threading

import pytest

cupy = pytest.importorskip("cupy")

from cupy.cuda import memory_hook  # noqa: E402

from tests.allocator.helpers import empty  # noqa: E402


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
