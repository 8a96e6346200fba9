"""The executor: one iteration of a trace under a swapping plan, on a device, checked.

It runs the real runtime: every residency's device bytes come from a
:class:`~cupool.runtime.pool.PlannedPool` serving the plan's layout, every buffer is a
:class:`~cupool.swap.handles.TensorHandle` whose uses are marked, swaps go through the
:class:`~cupool.swap.copy_engine.CopyEngine` (D2H and H2D streams, events) and pinned
staging, and the op work goes on a compute stream through
:class:`~cupool.swap.checks.StreamWork` (NumPy twins in host callbacks on the emulated
device, CUDA kernels on a GPU). For every op ``i`` the executor enqueues, in this order
(nothing blocks the caller until the iteration's final ``synchronize``)::

    pool    free the blocks of residencies ending at i; malloc those starting at i
            (allocation k of the pool's iteration is served at its planned offset)
    H2D     swap-ins triggered at i: wait(done[i-1], copies out of the landing bytes,
            the buffer's own swap-out) ─ copy ─ [device] ─ record(in_b)
    compute timed waits for the swap-ins due at i (a wait is a *late prefetch*); waits
            for copies still reading bytes a buffer is produced or recomputed in at i
            ─ [begin: enter the op's uses] ─ recomputes (the handle's ``recompute``
            callable, then the producing op's duration) ─ fill buffers produced at i with
            the pattern of (buffer, iteration) ─ verify every other use ─ op i's
            duration ─ [end: exit the uses; residencies ending at i+1 drop or retire]
            ─ record(done[i])
    D2H     swap-outs after i: wait(done[i]) ─ [to_host] ─ copy ─ record(out_b) ─ [host]

``[...]`` are host callbacks (pure Python, so allowed on both backends).

**Pool.** The plan's layout is installed in a ``PlannedPool`` as a static plan over its
residencies (:func:`pool_layout`): residency ``k`` in order of start (ties by buffer id)
is allocation ``k`` of the pool's iteration, freed before the first allocation that
starts at or after its end. Each replayed iteration is one ``pool.iteration()``; a block
served anywhere but its planned offset is counted (``off_plan``) and whatever it breaks
shows up as corrupt bytes. Scaled sizes keep the pool's 512-byte allocation unit: every
stretch between two residency boundaries is scaled (rounded up) and rounded up to 512, a
monotone map, so ranges disjoint at full size stay disjoint; a buffer's copies and checks
use its scaled size (``size // size_scale``), its pool block that rounded to 512.

**Time.** On the emulated device op ``i`` takes ``duration_us × time_scale`` of wall
time on the compute stream (a worker thread), measured on a clock that advances by
exactly that much per op and by the measured waits: op ``i`` ends at ``clock +=
duration`` (sleeping until then); a wait that ends at ``t`` sets ``clock = max(clock,
t)``. Filling and verifying run inside the op's time; an op whose checks overrun it
borrows from later ops' slack instead of delaying the whole iteration (checking is
instrumentation, not the workload). The emulated device's stream threads share the
interpreter (and its lock) with the thread enqueuing the iteration, which a GPU's streams
do not; so there the whole iteration is enqueued behind a gate on the three streams,
then released, and timed from the release. On a GPU (whose launch queues are bounded, so
nothing is gated) an op is its checks plus a spin kernel of its duration, and the
iteration is timed from the start of its enqueuing.

**Patterns.** A temporary buffer is produced at its first residency with the pattern of
``(buffer id, iteration)``; a persistent buffer (weights) holds the pattern of
``(buffer id, 0)``, written once, in the first iteration where its first residency is
served (timed as setup, not as iteration time: it stands for uploading the weights).
Every use compares every byte; mismatches are counted (``corrupt_bytes``), never raised.

**Recompute.** A recompute action before op ``i`` calls the handle's ``recompute(out,
*inputs)`` with the arrays of the buffer's new residency and of its producer's inputs
(held for read: they must be resident). By default it regenerates the pattern; a callable
given per buffer (``recompute=``) replaces it, and whatever it writes is verified at the
buffer's next use like any other byte.

**Feedback** (:func:`adjust_triggers`): a swap-in that made its due op wait ``w`` µs has
its trigger moved earlier, for the next iteration, by the fewest ops whose observed
durations (this iteration, in trace µs) sum to at least ``FEEDBACK_MARGIN × w`` (1.25);
never before the end of the buffer's previous residency (so after its swap-out point),
nor before op 0. The residency it enters starts at the new trigger. Each move is kept
only if the whole plan still passes
:func:`~cupool.check.validate_swap_plan` (budget and address overlap
included); otherwise the earliest valid trigger between the target and the old place is
found by bisection (a later trigger holds fewer bytes).

Measured waits alone converge slowly: the H2D engine is FIFO, so while a due op waits
for one large copy the copies queued behind it land during that wait and measure as
on time, and a move can queue a small swap-in behind a large one that is now issued
first. So the feedback then asks the simulator (``predict``, the same copy model) which
swap-ins of the adjusted plan would still be late, moves those by the same rule, and
repeats (at most :data:`PREDICTED_ROUNDS` times) until none is predicted late or none can
move. A late swap-in that cannot move (its residency would break the budget or overlap
another one a step earlier, or it already starts where its bytes left) is late because
the FIFO engine was busy with copies enqueued ahead of it: those *blockers* (H2D copies
that started before it and were still running when it was enqueued) move earlier instead,
by the same rule for its wait, so it starts as soon as it is enqueued. What stays late is
the floor the simulator predicts for the plan.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

from cupool.check import validate_plan
from cupool.core.vocabulary import (
    PERSISTENT,
    Buffer,
    Op,
    Placement,
    Plan,
    RecomputeAction,
    SolveStatus,
    SwapIn,
    SwapOut,
    Trace,
)
from cupool.devices.protocol import host_view
from cupool.errors import CupoolError
from cupool.runtime.arena import ALLOCATION_UNIT
from cupool.swap.checks import StreamWork
from cupool.swap.copy_engine import CopyEngine
from cupool.swap.errors import CopyFailedError, ReplayError
from cupool.swap.handles import (
    DEVICE,
    DROPPED,
    HOST,
    READ,
    RETIRED,
    WRITE,
    TensorHandle,
)
from cupool.swap.staging import PinnedStaging

LATE_THRESHOLD_WALL_US = 400.0
"""A wait shorter than this much *wall* time is the emulation's timer noise (sleep and
thread wake-up jitter), not a late prefetch or a stall."""


@dataclass(frozen=True)
class Layout:
    """A swapping plan's layout at a size scale, as the pool serves it (module docstring).

    ``sizes[b]``: bytes copied and checked for buffer ``b`` (``size // size_scale``);
    ``block_sizes[b]``: its pool block (scaled, rounded up to 512); ``offsets[(b, start)]``:
    the scaled offset of the residency starting at ``start``; ``order``: the residencies
    ``(b, start)`` in pool allocation order; ``pool_trace`` and ``pool_plan``: the static
    plan over them that the pool installs (validated)."""

    sizes: dict
    block_sizes: dict
    offsets: dict
    order: tuple
    pool_trace: Trace
    pool_plan: Plan


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def pool_layout(plan: Plan, trace: Trace, size_scale: int) -> Layout:
    """The :class:`Layout` of swapping ``plan`` for ``trace`` at ``size_scale``.

    Raises :class:`ReplayError` if the static plan over the residencies fails the
    validator (it cannot when ``plan`` passes the swap validator)."""
    unit = ALLOCATION_UNIT
    full = {b.id: b.size for b in trace.buffers}
    sizes = {b: n // size_scale for b, n in full.items()}
    block_sizes = {b: _round_up(max(1, -(-n // size_scale)), unit) for b, n in full.items()}
    residencies = sorted(plan.residencies, key=lambda r: (r.start, r.buffer_id))
    points = sorted({0, *(r.offset for r in residencies),
                     *(r.offset + full[r.buffer_id] for r in residencies)})
    scaled, at, previous = {}, 0, 0
    for point in points:
        at += _round_up(-(-(point - previous) // size_scale), unit)
        scaled[point], previous = at, point
    offsets = {(r.buffer_id, r.start): scaled[r.offset] for r in residencies}
    starts = [r.start for r in residencies]
    n = len(residencies)
    buffers = []
    for k, r in enumerate(residencies):
        end = next((j for j in range(k + 1, n) if starts[j] >= r.end), n)
        buffers.append(Buffer(k, block_sizes[r.buffer_id], k, end,
                              name=f"buffer {r.buffer_id} [{r.start}, {r.end})"))
    pool_trace = Trace(f"{trace.name} residencies", tuple(Op(f"malloc {k}") for k in range(n)),
                       tuple(buffers), source="cupool.runtime.executor.pool_layout")
    placements = tuple(Placement(k, offsets[(r.buffer_id, r.start)])
                       for k, r in enumerate(residencies))
    arena = max([p.offset + b.size for p, b in zip(placements, buffers, strict=True)] + [0])
    pool_plan = Plan(pool_trace.name, pool_trace.digest(), "replay-layout",
                     SolveStatus.FEASIBLE, arena, pool_trace.lower_bound_bytes(), placements)
    report = validate_plan(pool_trace, pool_plan)
    if not report.valid:
        raise ReplayError(f"the pool layout of the plan is invalid ({report.rule}): "
                          f"{report.message}")
    return Layout(sizes, block_sizes, offsets,
                  tuple((r.buffer_id, r.start) for r in residencies), pool_trace, pool_plan)


def _address(array) -> int:
    """The address of an array's first byte (NumPy or CuPy)."""
    data = getattr(array, "data", None)
    ptr = getattr(data, "ptr", None)
    return int(ptr) if ptr is not None else int(array.ctypes.data)


class Executor:
    """Runs iterations of ``trace`` under swapping ``plan`` on ``device`` (``emulated`` or
    ``cuda``), serving its layout from a :class:`~cupool.runtime.pool.PlannedPool`.

    ``size_scale`` (int >= 1) divides every size and offset; ``time_scale`` multiplies every
    op duration (see :mod:`.replay` for how the link is paced to match). ``seed`` seeds
    the patterns. ``recompute`` maps buffer ids to ``recompute(out, *inputs)`` callables
    that replace the default regeneration (module docstring). Call :meth:`close` (or use
    as a context manager) to return the pool's arena and the staging reservation.
    """

    def __init__(self, trace: Trace, plan: Plan, device, *, size_scale: int = 1,
                 time_scale: float = 1.0, seed: int = 0, staging_bytes: int | None = None,
                 op_us=None, recompute: dict | None = None) -> None:
        try:
            from cupool.runtime.pool import PlannedPool
        except ImportError as exc:  # PlannedPool is a cupy.cuda.MemoryPool
            raise ReplayError(f"the swap runtime serves every buffer from PlannedPool, a "
                              f"CuPy memory pool, and CuPy is not installed ({exc}): pip "
                              f"install 'cupool[cuda13]' (or 'cupool[cuda12]')") from None
        if getattr(device, "kind", "") not in ("emulated", "cuda"):
            raise ReplayError(f"device (={device!r}): the executor runs on an 'emulated' or "
                              f"'cuda' device")
        if plan.is_static:
            raise ReplayError("the executor needs a swapping plan (residencies and actions)")
        unknown = sorted(set(recompute or ()) - {b.id for b in trace.buffers})
        if unknown:
            raise ReplayError(f"recompute callables for buffers {unknown}, which trace "
                              f"{trace.name!r} does not have")
        self.trace, self.device = trace, device
        self.size_scale, self.time_scale, self.seed = size_scale, time_scale, seed
        self.gpu = device.kind == "cuda"
        self.op_us = list(op_us) if op_us is not None else [
            10.0 if op.duration_us is None else float(op.duration_us) for op in trace.ops]
        layout = pool_layout(plan, trace, size_scale)
        self.sizes = layout.sizes
        self.pool = PlannedPool(device, name=f"replay {trace.name}")
        self.pool.install_plan(layout.pool_plan, layout.pool_trace)
        self.arena_bytes = layout.pool_plan.arena_bytes
        swapped = {a.buffer_id for a in plan.actions if isinstance(a, SwapOut)}
        if staging_bytes is None:
            staging_bytes = sum(_round_up(max(1, self.sizes[b]), 256) for b in swapped)
        self.staging = PinnedStaging(device, staging_bytes)
        self.engine = CopyEngine(device, self.staging)
        self.compute = device.create_stream("compute")
        self.work = StreamWork(device, self.compute, seed)
        self.iteration = 0
        self.handles = {}
        for b in trace.buffers:
            given = (recompute or {}).get(b.id)
            self.handles[b.id] = TensorHandle(
                b, given or (self._regenerate(b.id) if b.recompute is not None else None))
        self.off_plan = 0  # residencies the pool served away from their planned offset
        self._arrays = {}  # (buffer, ptr) -> the handle's array there (made once)
        self._boundary_slots = {}
        self._persistent_ready = set()  # persistent buffers whose pattern is on the device
        self.plan = None
        self.set_plan(plan, layout)
        self._setup_persistent()

    # -- plan ---------------------------------------------------------------------------
    def set_plan(self, plan: Plan, layout: Layout | None = None) -> None:
        """Use ``plan`` from the next iteration on (same trace, same arena size: the pool
        keeps its reservation, so persistent bytes stay where they are)."""
        if layout is None:
            layout = pool_layout(plan, self.trace, self.size_scale)
            if layout.pool_plan.arena_bytes != self.arena_bytes:
                raise ReplayError(f"plan needs {layout.pool_plan.arena_bytes} scaled arena "
                                  f"bytes, the pool's arena has {self.arena_bytes}")
            self.pool.install_plan(layout.pool_plan, layout.pool_trace)
        self.plan = plan
        by_buffer = defaultdict(list)
        for r in plan.residencies:
            by_buffer[r.buffer_id].append(r)
        for spans in by_buffer.values():
            spans.sort(key=lambda r: r.start)
        self.residencies = by_buffer
        self._holding = {}  # (buffer, op) -> start of the residency holding it (memo)
        self._persistent = {b.id for b in self.trace.buffers if b.kind == PERSISTENT}
        self.offsets = layout.offsets
        self.block_sizes = layout.block_sizes
        self.alloc_at, self.free_at = defaultdict(list), defaultdict(list)
        for b, start in layout.order:
            self.alloc_at[start].append((b, start))
        for r in plan.residencies:
            self.free_at[r.end].append((r.buffer_id, r.start))
        entered = {}
        self.swap_ins, self.due = defaultdict(list), defaultdict(list)
        self.recomputes, self.swap_outs = defaultdict(list), defaultdict(list)
        self.out_levels = {}  # (buffer, after op) -> host level of that swap-out
        for action in plan.actions:
            b = action.buffer_id
            if isinstance(action, SwapIn):
                self.swap_ins[action.trigger_op].append(action)
                self.due[action.due_op].append(action)
                entered[(b, action.trigger_op)] = action
            elif isinstance(action, RecomputeAction):
                self.recomputes[action.before_op].append(b)
                entered[(b, action.before_op)] = action
            elif isinstance(action, SwapOut):
                self.swap_outs[action.after_op].append(b)
                self.out_levels[(b, action.after_op)] = action.level
        self.produced, self.ends = defaultdict(list), defaultdict(list)
        self.home = {}  # persistent buffer -> start of the residency it starts the iteration in
        self.left_by_swap = {(b, r.start) for b, spans in by_buffer.items() for r in spans
                             for a in plan.actions if isinstance(a, SwapOut)
                             and a.buffer_id == b and r.start <= a.after_op < r.end}
        for b, spans in by_buffer.items():
            buffer = self.trace.buffer(b)
            first = spans[0]
            if (b, first.start) not in entered:
                if buffer.kind != PERSISTENT:
                    self.produced[first.start].append(b)
                else:
                    if spans[-1].offset != first.offset:
                        raise ReplayError(f"persistent buffer {b} ends the iteration at offset "
                                          f"{spans[-1].offset}, starts it at {first.offset}: "
                                          f"moving it across the boundary is not supported")
                    self.home[b] = first.start
            for k, r in enumerate(spans):
                if (b, r.start) in self.left_by_swap:
                    continue
                if k + 1 < len(spans):
                    self.ends[r.end].append((b, DROPPED))
                elif buffer.kind != PERSISTENT:
                    self.ends[r.end].append((b, RETIRED))
        self.uses = defaultdict(list)
        for buffer in self.trace.buffers:
            for i in buffer.uses:
                self.uses[i].append(buffer.id)
        self.entered = entered

    def _array(self, b: int, ptr: int):
        """Buffer ``b``'s handle array at ``ptr`` (made once per address: CuPy's
        constructor costs microseconds)."""
        key = (b, ptr)
        array = self._arrays.get(key)
        if array is None:
            array = self._arrays[key] = self.handles[b].array_at(self.device, ptr,
                                                                 self.sizes[b])
        return array

    def _expected(self, b: int) -> int:
        return 0 if b in self._persistent else self.iteration

    def _regenerate(self, b: int):
        """The default ``recompute`` of buffer ``b``: its pattern for the running iteration,
        written in stream order (called by :class:`StreamWork` ``run``)."""
        def regenerate(out, *inputs) -> None:
            ptr, nbytes, seed = _address(out), self.sizes[b], self.seed
            if self.gpu:
                from cupool.kernels import fill_pattern

                fill_pattern(self.device, ptr, nbytes, seed=seed, buffer_id=b,
                             iteration=self._expected(b), stream=self.compute)
            else:
                from cupool.kernels.reference import fill

                fill(host_view(ptr, nbytes), seed, b, self._expected(b))

        regenerate.__name__ = f"regenerate_buffer_{b}"
        return regenerate

    def _setup_persistent(self) -> None:
        from cupool.kernels.reference import fill

        for b, spans in self.residencies.items():
            if self.trace.buffer(b).kind != PERSISTENT:
                continue
            if isinstance(self.entered.get((b, spans[0].start)), SwapIn):
                level = self.out_levels[max(k for k in self.out_levels if k[0] == b)]
                slot = self.staging.acquire(max(1, self.sizes[b]), level)
                fill(slot.array[:self.sizes[b]], self.seed, b, 0)
                self._boundary_slots[b] = slot
                self.handles[b].move(HOST)

    # -- one iteration -------------------------------------------------------------------
    def run_iteration(self, iteration: int) -> dict:
        """Run one iteration; returns ``{"wall_us", "iteration_us", "late": {buffer: wait
        trace µs}, "stall_us", "op_us": [observed trace µs per op], "bytes_checked",
        "corrupt_bytes", "off_plan"}`` (``iteration_us`` and the waits in trace µs: wall /
        time_scale). The first error of the iteration (a use the handle refuses, a failed
        copy, a recompute callable raising) is raised after the streams finished; the pool
        and the staging area are clean then either way."""
        self.iteration = iteration
        device, work = self.device, self.work
        ts, gpu = self.time_scale, self.gpu
        for b, h in self.handles.items():
            if self.trace.buffer(b).kind != PERSISTENT:
                h.reset()
        work.begin_iteration()
        state = {"clock": 0.0, "late": {}, "stall": 0.0, "setup": 0.0,
                 "op_wall": [0.0] * self.trace.num_ops, "error": None}
        done = [device.create_event() for _ in range(self.trace.num_ops)]
        pending = []  # (low, high, out event) of swap-outs issued so far
        landed_at = {}  # (buffer, trigger op) -> event recorded after the swap-in landed
        last_out, host_slot, blocks, ptrs = {}, {}, {}, {}
        handles, trace = self.handles, self.trace
        off_plan_before = self.off_plan

        def failed(exc) -> None:
            if state["error"] is None:
                state["error"] = exc

        def waited(late_buffer):
            def measure(began: float, ended: float) -> None:
                wait_us = (ended - began) * 1e6 / ts
                if wait_us * ts > LATE_THRESHOLD_WALL_US:
                    state["stall"] += wait_us
                    if late_buffer is not None:
                        state["late"][late_buffer] = state["late"].get(late_buffer, 0) + wait_us
                state["clock"] = max(state["clock"], ended)
            return measure

        def spend(duration_us: float) -> None:
            if gpu:
                work.spin(duration_us * ts * 1e-6)
                return

            def run() -> None:
                state["clock"] += duration_us * ts * 1e-6
                remaining = state["clock"] - time.perf_counter()
                if remaining > 0:
                    time.sleep(remaining)
            work.callback(run)

        def begin(i, arrivals, intents, op):
            def run() -> None:
                state["op_began"] = time.perf_counter()
                try:
                    for b, ptr, view in arrivals:
                        handles[b].move(DEVICE, view, ptr)
                    for b, intent in intents.items():
                        use = handles[b].use(intent)
                        use.__enter__()
                        op["uses"].append(use)
                    op["ok"] = True
                except Exception as exc:
                    failed(exc)
            return run

        def end(i, op, ends):
            def run() -> None:
                try:
                    for use in op["uses"]:
                        use.__exit__(None, None, None)
                    for b, where in ends:
                        handles[b].move(where)
                except Exception as exc:
                    failed(exc)
                state["op_wall"][i] = time.perf_counter() - state["op_began"]
            return run

        def recompute_call(b, out, inputs, op):
            def run() -> None:
                if not gpu and not op["ok"]:  # begin() could not take the uses
                    return
                try:
                    handles[b].recompute(out, *inputs)
                except Exception as exc:
                    failed(exc)
            return run

        gate = None if gpu else threading.Event()  # emulated: enqueue first (docstring)
        if gate is not None:
            for stream in (self.compute, self.engine.d2h_stream, self.engine.h2d_stream):
                device.host_callback(stream, gate.wait)
        started = time.perf_counter()
        state["clock"] = started
        try:
            with self.pool.iteration():
                base = self.pool.arena_ptr
                try:
                    for i in range(trace.num_ops + 1):
                        for key in self.free_at[i]:
                            blocks.pop(key, None)  # the block dies: the pool frees it
                        if i == trace.num_ops:
                            break
                        for key in self.alloc_at[i]:  # no local holds a block: a free
                            blocks[key] = self.pool.malloc(self.block_sizes[key[0]])  # is a pop
                            ptrs[key] = blocks[key].ptr
                            if ptrs[key] != base + self.offsets[key]:
                                self.off_plan += 1
                        self._enqueue_op(i, state, done, pending, landed_at, last_out,
                                         host_slot, ptrs, begin, end, recompute_call, spend,
                                         waited)
                finally:
                    blocks.clear()  # stream-ordered frees: nothing else allocates meanwhile
                    if gate is not None:
                        started = time.perf_counter()
                        state["clock"] = started
                        gate.set()
            try:
                device.synchronize()
            except CupoolError as exc:
                raise CopyFailedError(-1, "stream", 0, str(exc)) from exc
        except BaseException:
            if gate is not None:
                gate.set()
            self._quiesce()
            raise
        finally:
            for slot in host_slot.values():  # swapped out and never swapped back (failure)
                self.staging.release(slot)
        wall = time.perf_counter() - started - state["setup"]
        if state["error"] is not None:
            raise state["error"]
        checked, corrupt = work.results()
        return {"wall_us": wall * 1e6, "iteration_us": wall * 1e6 / ts,
                "late": dict(state["late"]), "stall_us": state["stall"],
                "op_us": [w * 1e6 / ts for w in state["op_wall"]],
                "bytes_checked": checked, "corrupt_bytes": corrupt,
                "off_plan": self.off_plan - off_plan_before}

    def _quiesce(self) -> None:
        """Wait for every stream (errors were already reported or will be)."""
        with contextlib.suppress(CupoolError):
            self.device.synchronize()

    def _enqueue_op(self, i, state, done, pending, landed_at, last_out, host_slot, ptrs,
                    begin, end, recompute_call, spend, waited) -> None:
        compute, engine, work, handles = self.compute, self.engine, self.work, self.handles
        sizes, trace = self.sizes, self.trace
        for action in self.swap_ins[i]:
            b = action.buffer_id
            ptr = ptrs[(b, i)]
            low, high = ptr, ptr + sizes[b]
            waits = [e for lo, hi, e in pending if lo < high and low < hi]
            if b in last_out:
                waits.append(last_out[b])
            if i > 0:
                waits.append(done[i - 1])
            boundary = b in self._boundary_slots
            slot = self._boundary_slots[b] if boundary else host_slot.pop(b)
            landed_at[(b, i)] = engine.swap_in(handles[b], slot, sizes[b], ptr,
                                               self._array(b, ptr), waits, keep_slot=boundary)
        work.begin_batch()
        for action in self.due[i]:
            work.timed_wait(landed_at[(action.buffer_id, action.trigger_op)],
                            waited(action.buffer_id))
        persistent_new = [b for b, start in self.home.items()
                          if start == i and b not in self._persistent_ready]
        produced = [*self.produced[i], *persistent_new]
        recomputed = self.recomputes[i]
        for b in [*produced, *recomputed]:
            ptr = ptrs[(b, i)]
            for lo, hi, event in pending:
                if lo < ptr + sizes[b] and ptr < hi:
                    work.timed_wait(event, waited(None))
        arrivals = [(b, ptrs[(b, i)], self._array(b, ptrs[(b, i)]))
                    for b in [*produced, *recomputed]]
        intents = {}
        for b in recomputed:
            for source in trace.buffer(b).recompute.inputs:
                intents.setdefault(source, READ)
        for b in self.uses[i]:
            intents.setdefault(b, READ)
        for b in [*produced, *recomputed]:
            intents[b] = WRITE
        op = {"uses": [], "ok": False}
        work.callback(begin(i, arrivals, intents, op))
        for b in recomputed:
            producer = trace.buffer(b).recompute
            inputs = [self._current_array(s, i, ptrs) for s in producer.inputs]
            work.run(recompute_call(b, self._array(b, ptrs[(b, i)]), inputs, op))
            spend(self.op_us[producer.op])
        expected = self._expected
        for b in produced:
            if b in persistent_new and not self.gpu:
                work.callback(self._initial_fill(ptrs[(b, i)], sizes[b], b, state))
            else:
                work.fill(ptrs[(b, i)], sizes[b], b, expected(b))
        self._persistent_ready.update(persistent_new)
        for b in self.uses[i]:
            if b not in produced:
                work.verify(self._resident_ptr(b, i, ptrs), sizes[b], b, expected(b))
        spend(self.op_us[i])
        work.callback(end(i, op, self.ends[i + 1]))
        work.end_batch()
        done[i].record(compute)
        for b in self.swap_outs[i]:
            ptr = self._resident_ptr(b, i, ptrs)
            slot, out = engine.swap_out(handles[b], ptr, sizes[b], done[i],
                                        self._boundary_slots.get(b), self.out_levels[(b, i)])
            if b not in self._boundary_slots:
                host_slot[b] = slot
            pending.append((ptr, ptr + sizes[b], out))
            last_out[b] = out

    def _initial_fill(self, ptr: int, nbytes: int, b: int, state: dict):
        """Emulated: write persistent buffer ``b``'s pattern once (the weights' upload
        before training), timed as setup, not as the iteration's work."""
        seed = self.seed

        def initial_fill() -> None:
            from cupool.kernels.reference import fill

            began = time.perf_counter()
            fill(host_view(ptr, nbytes), seed, b, 0)
            spent = time.perf_counter() - began
            state["setup"] += spent
            state["clock"] += spent

        return initial_fill

    def _resident_ptr(self, b: int, i: int, ptrs) -> int:
        """Where buffer ``b``'s residency holding op ``i`` was served this iteration."""
        start = self._holding.get((b, i))
        if start is None:
            start = next((r.start for r in self.residencies[b] if r.start <= i < r.end), None)
            self._holding[(b, i)] = start
        if start is None or (b, start) not in ptrs:
            raise ReplayError(f"buffer {b} is used at op {i} but has no residency there")
        return ptrs[(b, start)]

    def _current_array(self, b: int, i: int, ptrs):
        return self._array(b, self._resident_ptr(b, i, ptrs))

    def close(self) -> None:
        """Return the pool's arena and the staging reservation (after the streams
        finished)."""
        if self.device.closed:
            return
        self.device.synchronize()
        for slot in self._boundary_slots.values():
            self.staging.release(slot)
        self._boundary_slots = {}
        self._arrays = {}
        for h in self.handles.values():
            h.view = None
        self.staging.close()
        self.pool.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


__all__ = ["LATE_THRESHOLD_WALL_US", "Executor", "ReplayError"]
