"""The passive iteration of a program: run it under the budget with no plan, and measure it.

Before there is a plan the session still runs the iteration, within the budget, to learn
what the planners need: every op's duration. The tensors live in one device arena of
``budget_bytes``, placed first fit; when a tensor an op touches does not fit, the *least
recently used* resident tensors the op does not touch are swapped out to the host until it
does (when even that leaves the op's tensors fragmented, every resident tensor of the op is
swapped out too and they are placed again, side by side: an op's working set always fits,
the session checked it). A tensor used while on the host is swapped back in first::

    op i:  [swap out LRU][swap in x][ fn(*inputs, *updates, *outputs) ]
            \\___ synchronous, not timed ___/\\____ duration_us of op i ___/

Swaps are synchronous (with no plan there is nothing to overlap them with); an op's
duration is its callable alone: wall time on the emulated device, CUDA events around it on a
GPU (the views it is called with are made before the clock starts, as a planned step makes
them once). Persistent tensors start on the host (``parked``: their current values, updated in
place when they are swapped out and at the end), so the arena holds only what the ops
touch. An op that raises ends the iteration there: the resident persistent tensors are
copied back to ``parked`` first (the updates made before the failing op are kept, as a run
without cupool would keep them), then the error propagates.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from cupool.core.free_ranges import FIRST_FIT, FreeRanges
from cupool.program.calls import OpCaller
from cupool.program.program import FETCH, Program
from cupool.program.transfer import OpClock, download, host_copy, upload


@dataclass(frozen=True)
class Access:
    """One logged access: op ``op`` touched ``tensor`` (its name) with ``intent``
    (``"read"``, ``"update"`` or ``"write"``, an output) after ``swap_us`` µs of swapping
    (and evicting) to bring its tensors in (logged on the op's first access)."""

    op: int
    tensor: str
    intent: str
    swap_us: float


@dataclass(frozen=True)
class Recording:
    """What a passive iteration measured: ``durations_us`` (per op), ``accesses`` (every
    access, in order), ``peak_bytes`` (the most arena bytes in use at once),
    ``swap_outs``/``swap_ins`` (LRU swaps), ``wall_us`` (the whole iteration, swaps
    included) and ``fetched`` (key → host value of every fetched tensor)."""

    durations_us: tuple[float, ...]
    accesses: tuple[Access, ...]
    peak_bytes: int
    swap_outs: int
    swap_ins: int
    wall_us: float
    fetched: dict


class _Passive:
    """One passive iteration's state (see the module docstring)."""

    def __init__(self, program: Program, device, budget_bytes: int, parked: dict) -> None:
        self.program, self.device, self.parked = program, device, parked
        self.arena = device.reserve(budget_bytes)
        # touched once before any op runs: first-touch page faults of fresh (emulated,
        # host-backed) memory are not the ops' time
        device.array_at(self.arena.ptr, budget_bytes).fill(0)
        self.ranges = FreeRanges(fit=FIRST_FIT)  # offsets in the arena, lowest first
        self.ranges.add_region(0, budget_bytes)
        self.in_use = 0
        self.offset: dict = {}       # key -> arena offset of a resident tensor
        self.views: dict = {}        # key -> its device array there
        self.host: dict = {}         # temporary key -> host copy while swapped out
        self.last_access: dict = {}  # key -> op index
        self.swap_outs = self.swap_ins = self.peak = 0

    def view(self, key, at: int):
        spec = self.program.specs[key]
        return self.device.array_at(self.arena.ptr + at, max(spec.nbytes, 0), spec.dtype,
                                    spec.shape)

    def make_room(self, i: int, keys, born) -> None:
        """Make every tensor of ``keys`` resident for op ``i`` (``born``: its outputs)."""
        while True:
            missing = [k for k in keys if k not in self.offset]
            if all(self._place(k, keys, born) for k in missing):
                return
            for k in keys:  # fragmented: take the op's own tensors out and start again
                if k in self.offset:
                    self._evict(k)

    def _place(self, key, keys, born) -> bool:
        size = self.program.size(key)
        while (at := self.ranges.allocate(size)) is None:
            victims = [v for v in self.offset if v not in keys]
            if not victims:
                return False
            self._evict(min(victims, key=lambda v: (self.last_access.get(v, -1), v)))
        self.offset[key] = at
        self.views[key] = view = self.view(key, at)
        self.in_use += size
        self.peak = max(self.peak, self.in_use)
        if key not in born:
            source = self.parked[key] if key[0] == "p" else self.host.pop(key)
            upload(view, source)
            self.swap_ins += 1
        return True

    def _evict(self, key) -> None:
        view = self.views.pop(key)
        if key[0] == "p":
            download(self.parked[key], view)
        else:
            self.host[key] = host_copy(view)
        self.in_use -= self.ranges.free(self.offset.pop(key))
        self.swap_outs += 1

    def free(self, key) -> None:
        self.views.pop(key, None)
        if key in self.offset:
            self.in_use -= self.ranges.free(self.offset.pop(key))
        self.host.pop(key, None)

    def park_all(self) -> None:
        """Copy every resident persistent tensor back to ``parked``."""
        for key in [k for k in self.offset if k[0] == "p"]:
            download(self.parked[key], self.views[key])

    def close(self) -> None:
        self.views.clear()
        self.device.synchronize()
        self.device.release(self.arena)


def record(program: Program, device, budget_bytes: int, parked: dict,
           caller: OpCaller) -> Recording:
    """Run ``program`` once under ``budget_bytes`` on ``device`` with no plan (module
    docstring). ``parked`` (persistent key → host array) holds the persistent tensors'
    values and receives their new ones. Raises what ``caller`` raises for a failing op."""
    run = _Passive(program, device, budget_bytes, parked)
    clock = OpClock(device)
    last_use = {k: used[-1] for k, used in program.uses().items()}
    ending: dict = {}
    for k, i in last_use.items():
        if k[0] == "t":
            ending.setdefault(i, []).append(k)
    marks, fetched, accesses = [], {}, []
    began = time.perf_counter()
    try:
        with _current(device):
            for op in program.ops:
                keys = op.touched
                swapping = time.perf_counter()
                run.make_room(op.index, keys, set(op.output_keys))
                swap_us = (time.perf_counter() - swapping) * 1e6
                for k in keys:
                    run.last_access[k] = op.index
                    intent = "write" if k in op.output_keys else (
                        "update" if k in op.updates else "read")
                    accesses.append(Access(op.index, program.names[k], intent, swap_us))
                    swap_us = 0.0
                if op.kind == FETCH:
                    clock.start()
                    fetched = {k: host_copy(run.views[k]) for k in op.inputs}
                else:  # the arguments made first: a planned step makes them once, not per op
                    arrays = {k: run.views[k] for k in keys}
                    args = caller.arguments(op, arrays)
                    clock.start()
                    caller.call_prepared(op, args, arrays, program.names)
                marks.append(clock.stop())
                for k in ending.get(op.index, ()):
                    run.free(k)
            durations = tuple(clock.elapsed_us(mark) for mark in marks)
            run.park_all()
    except BaseException:
        with _current(device):
            run.park_all()
        raise
    finally:
        run.close()
    return Recording(durations, tuple(accesses), run.peak, run.swap_outs, run.swap_ins,
                     (time.perf_counter() - began) * 1e6, fetched)


def _current(device):
    """A context: on a GPU, the device current and CuPy's default pool the allocator for
    the ops' scratch arrays; nothing on the emulated device."""
    import contextlib

    stack = contextlib.ExitStack()
    if device.kind == "cuda":
        cupy = device.cupy
        stack.enter_context(cupy.cuda.Device(device.device_id))
        stack.enter_context(cupy.cuda.using_allocator(cupy.get_default_memory_pool().malloc))
    return stack


__all__ = ["Access", "Recording", "record"]

