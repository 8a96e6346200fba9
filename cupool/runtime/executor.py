"""The executor: one iteration of a trace under a swapping plan, on a device, checked.

For every op ``i`` the executor enqueues, in this order (nothing blocks the caller until
the iteration's final ``synchronize``)::

    H2D     swap-ins triggered at i: wait(done[i-1], copies out of the landing bytes,
            the buffer's own swap-out) ─ copy ─ record(in_b)
    compute waits: swap-ins due at i (measured: a wait is a *late prefetch*), copies
            still reading bytes a buffer is produced or recomputed in at i
            recomputes before i (the handle's ``recompute`` regenerates the pattern,
            inputs must be resident; takes the producing op's duration)
            op i: fill buffers produced at i with the pattern of (buffer, iteration),
            verify every use with ``count_mismatches``, then wait out the op's duration
            ─ record(done[i]); residencies ending at i+1 drop (recompute later) or retire
    D2H     swap-outs after i: wait(done[i]) ─ copy ─ record(out_b)

**Time.** Op ``i`` takes ``duration_us × time_scale`` of wall time on the compute
stream (a worker thread), measured on a clock that advances by exactly that much per op
and by the measured waits: op ``i`` ends at ``clock += duration`` (sleeping until then);
a wait that ends at ``t`` sets ``clock = max(clock, t)``. Filling and verifying run inside
the op's time; an op whose checks overrun it borrows from later ops' slack instead of
delaying the whole iteration (checking is instrumentation, not the workload).

**Patterns.** A temporary buffer is produced at its first residency with the pattern of
``(buffer id, iteration)``; a persistent buffer (weights) holds the pattern of
``(buffer id, 0)``, written once before the first iteration. Every use compares every
byte; mismatches are counted (``corrupt_bytes``), never raised.

**Feedback** (:func:`adjust_triggers`): a swap-in that made its due op wait ``w`` µs has
its trigger moved earlier, for the next iteration, by the fewest ops whose observed
durations (this iteration, in trace µs) sum to at least ``1.25 × w``; never before the
end of the buffer's previous residency (so after its swap-out point), nor before op 0.
The residency it enters starts at the new trigger. Each move is kept only if the whole
plan still passes :func:`~cupool.planning.swap_validator.validate_swap_plan` (budget and
address overlap included); otherwise the earliest valid trigger between the target and
the old place is found by bisection (a later trigger holds fewer bytes).

Measured waits alone converge slowly: the H2D engine is FIFO, so while a due op waits
for one large copy the copies queued behind it land during that wait and measure as
on time, and a move can queue a small swap-in behind a large one that is now issued
first. So the feedback then asks the simulator (``predict``, the same copy model) which
swap-ins of the adjusted plan would still be late, moves those by the same rule, and
repeats (at most :data:`PREDICTED_ROUNDS` times) until none is predicted late or none can
move; what stays late is the floor the simulator predicts for the plan.

The executor runs on devices whose host callbacks may wait on events (the emulated
device); the CUDA backend forbids CUDA calls in host callbacks, so it is not supported
here yet (:class:`ReplayError`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import replace

from cupool.core.vocabulary import (
    PERSISTENT,
    Plan,
    RecomputeAction,
    Residency,
    SwapIn,
    SwapOut,
    Trace,
)
from cupool.devices.protocol import host_view
from cupool.errors import CupoolError
from cupool.runtime.copy_engine import CopyEngine
from cupool.runtime.handles import (
    DEVICE,
    DROPPED,
    HOST,
    RETIRED,
    WRITE,
    CopyFailedError,
    TensorHandle,
)
from cupool.runtime.staging import PinnedStaging

FEEDBACK_MARGIN = 1.25
"""A late swap-in's trigger moves earlier to cover this multiple of its measured wait."""
LATE_THRESHOLD_WALL_US = 400.0
"""A wait shorter than this much *wall* time is the emulation's timer noise (sleep and
thread wake-up jitter), not a late prefetch or a stall."""
PREDICTED_ROUNDS = 8
"""How many times :func:`adjust_triggers` asks the simulator about the adjusted plan."""


class ReplayError(CupoolError):
    """The executor cannot run this plan or device (reason in the message)."""


def _scaled(plan: Plan, trace: Trace, size_scale: int):
    """``{buffer: scaled size}``, ``{(buffer, start): scaled offset}``, scaled arena bytes.

    Sizes round down and offsets up, so ranges disjoint at full size stay disjoint:
    ``ceil(a / s) + floor(n / s) <= ceil((a + n) / s)``."""
    sizes = {b.id: b.size // size_scale for b in trace.buffers}
    offsets = {(r.buffer_id, r.start): -(-r.offset // size_scale) for r in plan.residencies}
    arena = max([offsets[(r.buffer_id, r.start)] + sizes[r.buffer_id]
                 for r in plan.residencies] + [1])
    return sizes, offsets, arena


class Executor:
    """Runs iterations of ``trace`` under swapping ``plan`` on ``device``.

    ``size_scale`` (int >= 1) divides every size and offset; ``time_scale`` multiplies every
    op duration (see :mod:`.replay` for how the link is paced to match). ``seed`` seeds
    the patterns. Call :meth:`close` (or use as a context manager) to return the arena
    and the staging reservation.
    """

    def __init__(self, trace: Trace, plan: Plan, device, *, size_scale: int = 1,
                 time_scale: float = 1.0, seed: int = 0, staging_bytes: int | None = None,
                 op_us=None) -> None:
        from cupool.kernels.reference import count_mismatches, fill

        if getattr(device, "kind", "") != "emulated":
            raise ReplayError(f"device kind {getattr(device, 'kind', device)!r}: the executor "
                              f"runs on the emulated device only")
        if plan.is_static:
            raise ReplayError("the executor needs a swapping plan (residencies and actions)")
        self.trace, self.device = trace, device
        self.size_scale, self.time_scale, self.seed = size_scale, time_scale, seed
        self._fill, self._count = fill, count_mismatches
        self.op_us = list(op_us) if op_us is not None else [
            10.0 if op.duration_us is None else float(op.duration_us) for op in trace.ops]
        self.sizes, offsets, arena = _scaled(plan, trace, size_scale)
        self.arena = device.reserve(arena)
        swapped = {a.buffer_id for a in plan.actions if isinstance(a, SwapOut)}
        if staging_bytes is None:
            staging_bytes = sum(-(-max(1, self.sizes[b]) // 256) * 256 for b in swapped)
        self.staging = PinnedStaging(device, staging_bytes)
        self.engine = CopyEngine(device, self.staging)
        self.compute = device.create_stream("compute")
        self.handles = {b.id: TensorHandle(b) for b in trace.buffers}
        self._boundary_slots = {}
        self._persistent_home = {}
        self.plan = None
        self.set_plan(plan, offsets)
        self._setup_persistent()

    # -- plan ---------------------------------------------------------------------------
    def set_plan(self, plan: Plan, offsets=None) -> None:
        """Use ``plan`` from the next iteration on (same trace, same arena)."""
        if offsets is None:
            _sizes, offsets, arena = _scaled(plan, self.trace, self.size_scale)
            if arena > self.arena.size:
                raise ReplayError(f"plan needs {arena} scaled arena bytes, the arena has "
                                  f"{self.arena.size}")
        self.plan = plan
        by_buffer = defaultdict(list)
        for r in plan.residencies:
            by_buffer[r.buffer_id].append(r)
        for spans in by_buffer.values():
            spans.sort(key=lambda r: r.start)
        self.residencies = by_buffer
        self.ptr = {key: self.arena.ptr + value for key, value in offsets.items()}
        entered = {}
        self.swap_ins, self.due = defaultdict(list), defaultdict(list)
        self.recomputes, self.swap_outs = defaultdict(list), defaultdict(list)
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
        self.produced, self.ends = defaultdict(list), defaultdict(list)
        self.left_by_swap = {(b, r.start) for b, spans in by_buffer.items() for r in spans
                             for a in plan.actions if isinstance(a, SwapOut)
                             and a.buffer_id == b and r.start <= a.after_op < r.end}
        for b, spans in by_buffer.items():
            buffer = self.trace.buffer(b)
            first = spans[0]
            if buffer.kind != PERSISTENT and (b, first.start) not in entered:
                self.produced[first.start].append(b)
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

    def _view(self, b: int, start: int):
        ptr = self.ptr[(b, start)]
        return ptr, host_view(ptr, self.sizes[b])

    def _setup_persistent(self) -> None:
        for b, spans in self.residencies.items():
            if self.trace.buffer(b).kind != PERSISTENT:
                continue
            first = spans[0]
            if isinstance(self.entered.get((b, first.start)), SwapIn):
                slot = self.staging.acquire(max(1, self.sizes[b]))
                self._fill(slot.array[:self.sizes[b]], self.seed, b, 0)
                self._boundary_slots[b] = slot
                self.handles[b].move(HOST)
            else:
                if spans[-1].offset != first.offset:
                    raise ReplayError(f"persistent buffer {b} ends the iteration at offset "
                                      f"{spans[-1].offset}, starts it at {first.offset}: "
                                      f"moving it across the boundary is not supported")
                ptr, view = self._view(b, first.start)
                self._fill(view, self.seed, b, 0)
                self.handles[b].move(DEVICE, view, ptr)
                self._persistent_home[b] = first.start

    # -- one iteration -------------------------------------------------------------------
    def run_iteration(self, iteration: int) -> dict:
        """Run one iteration; returns ``{"wall_us", "iteration_us", "late": {buffer: wait
        trace µs}, "stall_us", "op_us": [observed trace µs per op], "bytes_checked",
        "corrupt_bytes"}`` (``iteration_us`` and the waits in trace µs: wall / time_scale)."""
        device, compute, engine, ts = self.device, self.compute, self.engine, self.time_scale
        for b, h in self.handles.items():
            if self.trace.buffer(b).kind != PERSISTENT:
                h.reset()
        state = {"clock": 0.0, "late": {}, "stall": 0.0, "checked": 0, "corrupt": 0,
                 "op_wall": [0.0] * self.trace.num_ops, "error": None}
        done = [device.create_event() for _ in range(self.trace.num_ops)]
        pending = []  # (low, high, out event) of swap-outs issued so far
        landed_at = {}  # (buffer, trigger op) -> event recorded after the swap-in copy
        last_out, host_slot = {}, {}
        seed, fill, count = self.seed, self._fill, self._count
        handles, sizes, persistent = self.handles, self.sizes, PERSISTENT

        def wait(event, late_buffer=None):
            def run():
                began = time.perf_counter()
                if not event.query():
                    event.synchronize()
                ended = time.perf_counter()
                waited = (ended - began) * 1e6 / ts
                if waited * ts > LATE_THRESHOLD_WALL_US:
                    state["stall"] += waited
                    if late_buffer is not None:
                        state["late"][late_buffer] = state["late"].get(late_buffer, 0) + waited
                state["clock"] = max(state["clock"], ended)
            device.host_callback(compute, run)

        def spend(duration_us):
            state["clock"] += duration_us * ts * 1e-6
            remaining = state["clock"] - time.perf_counter()
            if remaining > 0:
                time.sleep(remaining)

        def expected(b):
            return 0 if self.trace.buffer(b).kind == persistent else iteration

        def run_op(i, produced, used, ends, recomputed):
            def run():
                began = time.perf_counter()
                try:
                    for b in recomputed:
                        h = handles[b]
                        for source in self.trace.buffer(b).recompute.inputs:
                            with handles[source].use():
                                pass
                        ptr, view = self._view(b, i)
                        h.move(DEVICE, view, ptr)
                        with h.use(WRITE) as out:
                            fill(out, seed, b, expected(b))
                        spend(self.op_us[self.trace.buffer(b).recompute.op])
                    for b in produced:
                        ptr, view = self._view(b, i)
                        handles[b].move(DEVICE, view, ptr)
                        with handles[b].use(WRITE) as out:
                            fill(out, seed, b, expected(b))
                    for b in used:
                        with handles[b].use() as view:
                            state["corrupt"] += count(view, seed, b, expected(b))
                            state["checked"] += len(view)
                except Exception as exc:
                    if state["error"] is None:
                        state["error"] = exc
                spend(self.op_us[i])
                for b, where in ends:
                    handles[b].move(where)
                state["op_wall"][i] = time.perf_counter() - began
            device.host_callback(compute, run)

        started = time.perf_counter()
        state["clock"] = started
        for i in range(self.trace.num_ops):
            for action in self.swap_ins[i]:
                b = action.buffer_id
                ptr, view = self._view(b, i)
                low, high = ptr, ptr + sizes[b]
                waits = [e for lo, hi, e in pending if lo < high and low < hi]
                if b in last_out:
                    waits.append(last_out[b])
                if i > 0:
                    waits.append(done[i - 1])
                boundary = b in self._boundary_slots
                slot = self._boundary_slots[b] if boundary else host_slot.pop(b)
                landed = engine.swap_in(handles[b], slot, sizes[b], ptr, view, waits,
                                        keep_slot=boundary)
                landed_at[(b, i)] = landed
            for action in self.due[i]:
                wait(landed_at[(action.buffer_id, action.trigger_op)], action.buffer_id)
            fills = [*self.produced[i], *self.recomputes[i]]
            for b in fills:
                ptr = self.ptr[(b, i)]
                for lo, hi, e in pending:
                    if lo < ptr + sizes[b] and ptr < hi:
                        wait(e)
            produced = self.produced[i]
            used = [b for b in self.uses[i] if b not in produced]
            run_op(i, produced, used, self.ends[i + 1], self.recomputes[i])
            done[i].record(compute)
            for b in self.swap_outs[i]:
                start = next(r.start for r in self.residencies[b] if r.start <= i < r.end)
                ptr = self.ptr[(b, start)]
                slot, out = engine.swap_out(handles[b], ptr, sizes[b], done[i],
                                            self._boundary_slots.get(b))
                if b not in self._boundary_slots:
                    host_slot[b] = slot
                pending.append((ptr, ptr + sizes[b], out))
                last_out[b] = out
        try:
            device.synchronize()
        except CupoolError as exc:
            raise CopyFailedError(-1, "stream", 0, str(exc)) from exc
        finally:
            for slot in host_slot.values():  # swapped out and never swapped back (failure)
                self.staging.release(slot)
        wall = time.perf_counter() - started
        if state["error"] is not None:
            raise state["error"]
        return {"wall_us": wall * 1e6, "iteration_us": wall * 1e6 / ts,
                "late": dict(state["late"]), "stall_us": state["stall"],
                "op_us": [w * 1e6 / ts for w in state["op_wall"]],
                "bytes_checked": state["checked"], "corrupt_bytes": state["corrupt"]}

    def close(self) -> None:
        """Return the arena and the staging reservation (after the streams finished)."""
        if self.device.closed:
            return
        self.device.synchronize()
        for slot in self._boundary_slots.values():
            self.staging.release(slot)
        self._boundary_slots = {}
        self.staging.close()
        self.device.release(self.arena)

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def adjust_triggers(trace: Trace, plan: Plan, late: dict, op_us, validate,
                    predict=None, rounds: int = PREDICTED_ROUNDS) -> tuple[Plan, dict]:
    """Move the triggers of late swap-ins earlier (rule in the module docstring).

    ``late`` maps buffer ids to measured waits (trace µs); ``op_us`` are observed op
    durations (trace µs); ``validate(trace, plan)`` is the swap validator. ``predict``
    (optional, ``predict(plan) -> {buffer: wait µs}``, e.g. :func:`predicted_waits` over
    :func:`~cupool.sim.simulate`) is then asked, up to ``rounds`` times, which swap-ins of
    the adjusted plan would still be late — those hidden behind a measured wait, and those
    a move queued behind a large copy — and they move by the same rule. Returns the new
    plan and ``{buffer: (first old trigger, last new trigger)}`` for the moves kept."""
    stuck = set()
    plan, moves = _move_late(trace, plan, late, op_us, validate, stuck)
    for _round in range(rounds if predict is not None else 0):
        plan, moved = _move_late(trace, plan, predict(plan), op_us, validate, stuck)
        if not moved:
            break
        for b, (old, new) in moved.items():
            moves[b] = (moves.get(b, (old, new))[0], new)
    return plan, moves


def predicted_waits(report, plan: Plan) -> dict:
    """``{buffer: µs}`` that each swap-in of ``plan`` made its due op wait in ``report``
    (a :class:`~cupool.sim.simulator.SimReport` of ``plan``): its H2D copy's end minus
    the due op's dispatch, where positive. A buffer's H2D copies, in the order the engine
    served them, belong to its swap-ins in trigger order (one engine is FIFO, and a
    buffer's swap-ins are ordered by its residencies)."""
    landed = defaultdict(list)
    for b, direction, _nbytes, _enqueued, _start, end in report.copies:
        if direction == "h2d":
            landed[b].append(end)
    waits = {}
    swap_ins = sorted((a for a in plan.actions if isinstance(a, SwapIn)),
                      key=lambda a: a.trigger_op)
    seen = defaultdict(int)
    for action in swap_ins:
        b = action.buffer_id
        end = landed[b][seen[b]]
        seen[b] += 1
        wait = end - report.op_times[action.due_op][0]
        if wait > 0:
            waits[b] = max(waits.get(b, 0.0), wait)
    return waits


def _move_late(trace: Trace, plan: Plan, late: dict, op_us, validate,
               stuck: set | None = None) -> tuple[Plan, dict]:
    """One application of the rule to the waits ``late``. The moves are tried together,
    then by halves where the plan would break (one validation in the common case); a
    single move that breaks it bisects for the earliest valid trigger between its target
    and its old place. ``stuck`` collects ``(buffer, trigger)`` that cannot move, so later
    rounds skip them."""
    stuck = set() if stuck is None else stuck
    targets = []  # (buffer, action, residency, old trigger, target trigger)
    for b, waited in sorted(late.items()):
        spans = sorted((r for r in plan.residencies if r.buffer_id == b), key=lambda r: r.start)
        for action in plan.actions:
            if not (isinstance(action, SwapIn) and action.buffer_id == b):
                continue
            old = action.trigger_op
            k = next(k for k, r in enumerate(spans) if r.start == old)
            floor = spans[k - 1].end if k > 0 else 0
            target, covered = old, 0.0
            while target > floor and covered < FEEDBACK_MARGIN * waited:
                target -= 1
                covered += op_us[target]
            if target < old and (b, old) not in stuck:
                targets.append((b, action, spans[k], old, target))
    moves = {}

    def apply(plan, batch):
        together = plan
        for _b, action, residency, _old, target in batch:
            together = _moved(together, residency, action, target)
        if validate(trace, together).valid:
            moves.update({b: (old, target) for b, _a, _r, old, target in batch})
            return together
        if len(batch) > 1:
            half = len(batch) // 2
            return apply(apply(plan, batch[:half]), batch[half:])
        b, action, residency, old, target = batch[0]
        low, high = target + 1, old  # the earliest valid trigger is in [low, high]
        while low < high:
            middle = (low + high) // 2
            if validate(trace, _moved(plan, residency, action, middle)).valid:
                high = middle
            else:
                low = middle + 1
        if high == old:
            stuck.add((b, old))
            return plan
        moves[b] = (old, high)
        return _moved(plan, residency, action, high)

    return (apply(plan, targets) if targets else plan), moves


def _moved(plan: Plan, residency: Residency, action: SwapIn, trigger: int) -> Plan:
    residencies = tuple(replace(r, start=trigger) if r == residency else r
                        for r in plan.residencies)
    actions = tuple(replace(a, trigger_op=trigger) if a == action else a for a in plan.actions)
    return replace(plan, residencies=residencies, actions=actions)


__all__ = ["FEEDBACK_MARGIN", "LATE_THRESHOLD_WALL_US", "PREDICTED_ROUNDS", "Executor",
           "ReplayError", "adjust_triggers", "predicted_waits"]
