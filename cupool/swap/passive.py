"""The passive first iteration: run a trace with no plan, swapping on demand, and measure it.

Before any plan exists, the runtime still has to run one
iteration under the budget to learn the op durations the planners need. It does so
passively: buffers live in a device arena of ``budget_bytes``; when a buffer produced or
used by op ``i`` does not fit (out of memory), the *least recently used* resident
buffers that op ``i`` does not touch are swapped out to host staging until it does; a
buffer used while on the host is swapped back in first. Every access is logged, and the
time spent swapping is removed from the op it delayed::

    op i:  [swap out LRU][swap in b][fill / verify][compute ........]
            \\_____ swap_us (removed) _/\\_ checks _/\\_ duration_us ____/

so the measured ``duration_us`` of op ``i`` is the compute alone (here: the emulated
op, ``duration_us × time_scale`` of wall time, divided back by ``time_scale``). Pattern
fills and checks are instrumentation and are not counted either.

Swaps are synchronous (the iteration waits for each copy): with no plan there is
nothing to overlap them with, and the measurement would not be cleaner for it. Bytes are
checked as in replay: each buffer is filled with the pattern of ``(buffer id, 0)`` when
produced and every use compares every byte (``corrupt_bytes`` counts mismatches).

Placement is first fit over the arena (256-byte aligned: the shared
:class:`~cupool.core.free_ranges.FreeRanges` with ``fit="first"``); sizes may be divided by
``size_scale`` as in a replay (the budget too). A working set of one op that does
not fit even after evicting everything else raises :class:`PassiveOutOfMemoryError`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from cupool.core.free_ranges import FIRST_FIT, FreeRanges
from cupool.core.vocabulary import Trace
from cupool.devices.memory import host_view
from cupool.swap.copy_engine import CopyEngine
from cupool.swap.errors import PassiveOutOfMemoryError
from cupool.swap.handles import DEVICE, RETIRED, WRITE, TensorHandle
from cupool.swap.staging import PinnedStaging

ALIGNMENT = 256
DEFAULT_OP_US = 10.0
"""Emulated duration of an op whose trace gives none (as :mod:`cupool.sim.cost`)."""


@dataclass(frozen=True)
class Access:
    """One logged access: op ``op`` used buffer ``buffer_id`` with ``intent`` and spent
    ``swap_us`` (trace µs) swapping for it (evictions to make room included)."""

    op: int
    buffer_id: int
    intent: str
    swap_us: float


@dataclass(frozen=True)
class PassiveRun:
    """What a passive iteration produced: ``trace`` (the input's buffers and uses, each op's
    ``duration_us`` as measured without swap time), the ``accesses`` in order, counts of
    ``swap_outs``/``swap_ins``, ``swap_us`` (trace µs spent swapping, removed from the
    durations), ``peak_device_bytes`` (scaled), ``bytes_checked`` and ``corrupt_bytes``."""

    trace: Trace
    accesses: tuple[Access, ...]
    swap_outs: int
    swap_ins: int
    swap_us: float
    peak_device_bytes: int
    bytes_checked: int
    corrupt_bytes: int


def passive_iteration(trace: Trace, budget_bytes: int, device, *, size_scale: int = 1,
                      time_scale: float = 1.0, seed: int = 0) -> PassiveRun:
    """Run ``trace`` once under ``budget_bytes`` (trace bytes) on ``device`` (the emulated
    device) with no plan, evicting least-recently-used buffers on out-of-memory, and
    return the measured trace (module docstring). The caller owns ``device``."""
    from cupool.kernels.reference import count_mismatches, fill

    sizes = {b.id: b.size // size_scale for b in trace.buffers}
    capacity = budget_bytes // size_scale
    arena = device.reserve(max(ALIGNMENT, capacity))
    staging = PinnedStaging(device, sum(-(-max(1, n) // ALIGNMENT) * ALIGNMENT
                                        for n in sizes.values()))
    engine = CopyEngine(device, staging)
    ranges = FreeRanges(alignment=ALIGNMENT, fit=FIRST_FIT)  # offsets in the arena
    ranges.add_region(0, capacity)
    handles = {b.id: TensorHandle(b) for b in trace.buffers}
    offset, slot, last_access = {}, {}, {}  # buffer -> arena offset / host slot / op
    produced, needed, ending = {}, {}, {}
    for b in trace.buffers:
        produced.setdefault(b.start, []).append(b.id)
        ending.setdefault(b.end - 1, []).append(b.id)
        for i in {b.start, *b.uses}:
            needed.setdefault(i, []).append(b.id)
    accesses, durations = [], []
    counts = {"out": 0, "in": 0, "swap": 0.0, "checked": 0, "corrupt": 0, "peak": 0}

    def place(i, b, keep):
        while (at := ranges.allocate(max(1, sizes[b]))) is None:
            victims = [v for v in offset if v not in keep]
            if not victims:
                raise PassiveOutOfMemoryError(i, b, sizes[b], capacity)
            evict(min(victims, key=lambda v: (last_access[v], v)))
        offset[b] = at
        counts["peak"] = max(counts["peak"], ranges.allocated_bytes)
        return arena.ptr + at

    def evict(v):
        ptr = arena.ptr + offset.pop(v)
        slot[v] = engine.swap_out(handles[v], ptr, sizes[v], None).slot
        engine.d2h_stream.synchronize()
        ranges.free(ptr - arena.ptr)
        counts["out"] += 1

    try:
        for i, op in enumerate(trace.ops):
            keep = set(needed.get(i, ()))
            born = set(produced.get(i, ()))
            began = time.perf_counter()
            swap = checks = 0.0
            for b in sorted(keep):
                swapped_at = time.perf_counter()
                if b in born:
                    ptr = place(i, b, keep)
                    handles[b].move(DEVICE, handles[b].array_at(device, ptr, sizes[b]), ptr)
                elif b not in offset:
                    ptr = place(i, b, keep)
                    engine.swap_in(handles[b], slot.pop(b), sizes[b], ptr,
                                   handles[b].array_at(device, ptr, sizes[b]), [])
                    engine.h2d_stream.synchronize()
                    counts["in"] += 1
                spent = time.perf_counter() - swapped_at
                swap += spent
                checked_at = time.perf_counter()
                intent = WRITE if b in born else "read"
                with handles[b].use(intent):  # the host-backed bytes at the handle's address
                    view = host_view(handles[b].ptr, sizes[b])
                    if b in born:
                        fill(view, seed, b, 0)
                    else:
                        counts["corrupt"] += count_mismatches(view, seed, b, 0)
                        counts["checked"] += len(view)
                checks += time.perf_counter() - checked_at
                last_access[b] = i
                accesses.append(Access(i, b, intent, spent * 1e6 / time_scale))
            duration = DEFAULT_OP_US if op.duration_us is None else op.duration_us
            deadline = time.perf_counter() + duration * time_scale * 1e-6
            while (remaining := deadline - time.perf_counter()) > 0:
                time.sleep(remaining)
            wall = time.perf_counter() - began - swap - checks
            durations.append(wall * 1e6 / time_scale)
            counts["swap"] += swap * 1e6 / time_scale
            for b in ending.get(i, ()):
                if b in offset:
                    ranges.free(offset.pop(b))
                elif b in slot:
                    staging.release(slot.pop(b))
                handles[b].move(RETIRED)
    finally:
        device.synchronize()
        for leftover in slot.values():
            staging.release(leftover)
        staging.close()
        device.release(arena)
    ops = tuple(replace(op, duration_us=d) for op, d in zip(trace.ops, durations, strict=True))
    return PassiveRun(replace(trace, ops=ops, source=f"passive run of {trace.name}"),
                      tuple(accesses), counts["out"], counts["in"], counts["swap"],
                      counts["peak"] * size_scale, counts["checked"], counts["corrupt"])


__all__ = ["Access", "PassiveOutOfMemoryError", "PassiveRun", "passive_iteration"]
