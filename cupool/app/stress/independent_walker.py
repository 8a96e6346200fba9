"""An independent executor of swapping plans: the device protocol and the kernels only.

:func:`walk_plan` runs a swapping plan without the swap engine
(:class:`~cupool.swap.engine.SwapEngine`): no :class:`~cupool.allocator.pool.PlannedPool`,
no handles, no copy engine, no pinned staging — one device reservation for the arena, one
pinned slab for the host copies, three streams and events, patterns written and verified
by :mod:`cupool.kernels`. It deliberately does not use the engine: the swap scenario runs
every plan twice, here and through the engine (:func:`cupool.app.replay.replay`), so that a
fault in the engine's runtime and a fault in the device or the kernels show up separately.
Made a client of the engine, the walker would check the engine against itself, and a bug in
the engine's schedule or staging would pass both runs. What it shares with the engine is
only the plan vocabulary and the device protocol.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

from cupool.app.stress.config import CORRUPT_BYTES, SWAP_ITERATIONS
from cupool.app.stress.errors import WalkError
from cupool.app.stress.result import ScenarioResult
from cupool.core.vocabulary import PERSISTENT, Plan, SwapIn, SwapOut, Trace
from cupool.kernels import fill_pattern, spin, verify_pattern
from cupool.kernels.reference import fill as host_fill


@dataclass(frozen=True)
class WalkSettings:
    """How :func:`walk_plan` runs a plan: ``iterations`` of it; ``size_scale`` (int >= 1)
    divides every size (rounded down) and offset (rounded up, so disjoint stays disjoint)
    as in :mod:`cupool.app.replay`; ``seed`` seeds the patterns; every op spins for its
    trace duration × ``spin_scale`` (0: no spin); ``faults`` may hold ``"swap-corrupt"``
    (flip the first bytes of the first host copy a swap-out wrote)."""

    iterations: int = SWAP_ITERATIONS
    size_scale: int = 1
    seed: int = 0
    spin_scale: float = 0.0
    faults: tuple = ()


@dataclass(frozen=True)
class WalkSchedule:
    """A swapping plan indexed by op for the walker, at one size scale.

    Per buffer: ``sizes`` (scaled bytes), ``spans`` (its residencies by start), ``slot``
    (where its host copy sits in the pinned slab of ``slab_bytes``). Per residency
    ``(buffer, start)``: ``offsets`` (scaled), in an arena of ``arena_bytes``. Per op:
    ``swap_ins`` (the :class:`SwapIn` actions triggered there), ``due`` (those due there),
    ``recomputes`` and ``produced`` (buffers whose pattern is written there: recomputed,
    or temporary and first made there), ``uses`` (buffers the op reads), ``swap_outs``
    (buffers copied out after it). Persistent buffers: ``persistent_fill`` (filled in the
    arena once, before the first iteration), ``host_init`` (start every iteration swapped
    out: their host copy is filled once)."""

    sizes: dict
    offsets: dict
    arena_bytes: int
    spans: dict
    swap_ins: dict
    due: dict
    recomputes: dict
    swap_outs: dict
    produced: dict
    uses: dict
    persistent_fill: list
    host_init: list
    slot: dict
    slab_bytes: int


def _scaled(trace: Trace, plan: Plan, size_scale: int) -> tuple[dict, dict, int]:
    """Scaled sizes and offsets (sizes round down, offsets up: disjoint stays disjoint)
    and the arena bytes they need."""
    sizes = {b.id: b.size // size_scale for b in trace.buffers}
    offsets = {(r.buffer_id, r.start): -(-r.offset // size_scale) for r in plan.residencies}
    arena = max([offsets[(r.buffer_id, r.start)] + sizes[r.buffer_id]
                 for r in plan.residencies] + [1])
    return sizes, offsets, arena


def plan_walk(trace: Trace, plan: Plan, size_scale: int = 1) -> WalkSchedule:
    """Index ``plan`` for ``trace`` by op (:class:`WalkSchedule`). Raises
    :class:`~cupool.app.stress.errors.WalkError` for a static plan, and for a persistent
    buffer that neither starts and ends the iteration at one offset nor starts it swapped
    out (the walker fills persistent buffers once)."""
    if plan.is_static:
        raise WalkError("walk_plan needs a swapping plan (residencies and actions)")
    sizes, offsets, arena_bytes = _scaled(trace, plan, size_scale)
    spans = defaultdict(list)
    for r in plan.residencies:
        spans[r.buffer_id].append(r)
    for rs in spans.values():
        rs.sort(key=lambda r: r.start)
    swap_ins, due, recomputes, swap_outs, entered = (defaultdict(list) for _ in range(5))
    for action in plan.actions:
        b = action.buffer_id
        if isinstance(action, SwapIn):
            swap_ins[action.trigger_op].append(action)
            due[action.due_op].append(action)
            entered[(b, action.trigger_op)] = action
        elif isinstance(action, SwapOut):
            swap_outs[action.after_op].append(b)
        else:
            recomputes[action.before_op].append(b)
            entered[(b, action.before_op)] = action
    produced = defaultdict(list)
    persistent_fill, host_init = [], []
    for b, rs in spans.items():
        buffer = trace.buffer(b)
        first = rs[0]
        if buffer.kind != PERSISTENT:
            if (b, first.start) not in entered:
                produced[first.start].append(b)
        elif isinstance(entered.get((b, first.start)), SwapIn):
            host_init.append(b)
        elif rs[-1].offset != first.offset:
            raise WalkError(f"persistent buffer {b} ends the iteration at offset "
                            f"{rs[-1].offset}, starts it at {first.offset}")
        else:
            persistent_fill.append(b)
    uses = defaultdict(list)
    for buffer in trace.buffers:
        for i in buffer.uses:
            uses[i].append(buffer.id)
    swapped = sorted({a.buffer_id for a in plan.actions if isinstance(a, SwapIn | SwapOut)})
    slot, slab_bytes = {}, 0
    for b in swapped:
        slot[b] = slab_bytes
        slab_bytes += -(-max(1, sizes[b]) // 256) * 256
    return WalkSchedule(sizes, offsets, arena_bytes, spans, swap_ins, due, recomputes,
                        swap_outs, produced, uses, persistent_fill, host_init, slot,
                        slab_bytes)


def walk_plan(device, trace: Trace, plan: Plan, settings: WalkSettings | None = None, *,
              streams=None) -> ScenarioResult:
    """Run ``settings.iterations`` of swapping ``plan`` for ``trace`` on ``device`` with the
    device protocol and the kernels only (so it runs on a GPU), checking every use.

    Per op ``i``, in order: swap-ins triggered at ``i`` on the H2D stream (after op
    ``i - 1``, after copies out of the bytes they land in, after the buffer's own swap-out);
    the compute stream waits for swap-ins due at ``i`` (one whose copy has not landed when
    the compute stream gets there is a late prefetch); recomputes and first productions
    fill the pattern of ``(buffer, iteration)`` (persistent buffers: ``(buffer, 0)``, filled
    once); every other use is verified; optionally a spin of the op's duration
    × ``settings.spin_scale``; then swap-outs after ``i`` on the D2H stream. ``streams`` is
    ``(compute, h2d, d2h)`` (default: three new streams). A persistent buffer must start
    and end the iteration at one offset, or start it swapped out (:class:`WalkError`, see
    :func:`plan_walk`). The arena and the pinned host slab are returned before this
    function returns."""
    settings = settings or WalkSettings()
    schedule = plan_walk(trace, plan, settings.size_scale)
    streams = streams or tuple(device.create_stream(f"walk-{name}")
                               for name in ("compute", "h2d", "d2h"))
    return _Walk(device, trace, schedule, settings, streams).run()


class _PendingCopy(NamedTuple):
    """A swap-out still reading device bytes ``[low, high)`` until ``event``."""

    low: int
    high: int
    event: object


class _Walk:
    """One :func:`walk_plan` call: the arena, the slab, the events and the counts."""

    def __init__(self, device, trace: Trace, schedule: WalkSchedule, settings: WalkSettings,
                 streams) -> None:
        self.device, self.trace, self.schedule, self.settings = device, trace, schedule, settings
        self.compute, self.h2d, self.d2h = streams
        self.pattern_seed = settings.seed & ((1 << 64) - 1)
        self.result = ScenarioResult()
        self.arena = self.slab = None
        self.done, self.landed = [], {}
        self.corrupted = False

    def run(self) -> ScenarioResult:
        device, s = self.device, self.schedule
        self.arena = device.reserve(s.arena_bytes)
        try:
            self.slab = device.alloc_pinned(max(1, s.slab_bytes))
            host = device.pinned_array(self.slab)
            for b in s.host_init:
                host_fill(host[s.slot[b]:s.slot[b] + s.sizes[b]], self.pattern_seed, b, 0)
            del host
            for b in s.persistent_fill:
                fill_pattern(device, self.arena.ptr + s.offsets[(b, s.spans[b][0].start)],
                             s.sizes[b], seed=self.pattern_seed, buffer_id=b, iteration=0,
                             stream=self.compute)
            self.done = [device.create_event() for _ in range(self.trace.num_ops)]
            self.landed = {(a.buffer_id, a.trigger_op): device.create_event()
                           for actions in list(s.swap_ins.values()) for a in actions}
            for iteration in range(self.settings.iterations):
                self._iteration(iteration)
                device.synchronize()
        finally:
            try:
                device.synchronize()
            finally:
                if self.slab is not None:
                    device.free_pinned(self.slab)
                device.release(self.arena)
        return self.result

    def _iteration(self, iteration: int) -> None:
        pending, last_out = [], {}  # swap-outs in flight; buffer -> its last swap-out's event
        for i in range(self.trace.num_ops):
            self._swap_in(i, pending, last_out)
            self._wait_due(i)
            self._fill(i, iteration, pending)
            self._verify(i, iteration)
            duration_us = self.trace.ops[i].duration_us
            if self.settings.spin_scale > 0 and duration_us:
                spin(self.device, int(duration_us * 1000 * self.settings.spin_scale),
                     stream=self.compute)
            self.done[i].record(self.compute)
            self._swap_out(i, pending, last_out)

    def _ptr_at(self, b: int, i: int) -> int:
        for r in self.schedule.spans[b]:
            if r.start <= i < r.end:
                return self.arena.ptr + self.schedule.offsets[(b, r.start)]
        raise WalkError(f"buffer {b} is used at op {i} but not resident there")

    def _expected(self, b: int, iteration: int) -> int:
        return 0 if self.trace.buffer(b).kind == PERSISTENT else iteration

    def _swap_in(self, i: int, pending: list, last_out: dict) -> None:
        s, h2d = self.schedule, self.h2d
        for action in s.swap_ins[i]:
            b = action.buffer_id
            ptr = self.arena.ptr + s.offsets[(b, i)]
            for copy in pending:
                if copy.low < ptr + s.sizes[b] and ptr < copy.high:
                    h2d.wait_event(copy.event)
            if b in last_out:
                h2d.wait_event(last_out[b])
            if i > 0:
                h2d.wait_event(self.done[i - 1])
            self.device.copy_h2d_async(ptr, self.slab.ptr + s.slot[b], s.sizes[b], h2d)
            self.landed[(b, i)].record(h2d)

    def _wait_due(self, i: int) -> None:
        for action in self.schedule.due[i]:
            event = self.landed[(action.buffer_id, action.trigger_op)]
            self.compute.synchronize()
            if not event.query():
                self.result.late_prefetches += 1
            self.compute.wait_event(event)

    def _fill(self, i: int, iteration: int, pending: list) -> None:
        s = self.schedule
        for b in [*s.recomputes[i], *s.produced[i]]:
            ptr = self._ptr_at(b, i)
            for copy in pending:
                if copy.low < ptr + s.sizes[b] and ptr < copy.high:
                    self.compute.wait_event(copy.event)
            fill_pattern(self.device, ptr, s.sizes[b], seed=self.pattern_seed, buffer_id=b,
                         iteration=self._expected(b, iteration), stream=self.compute)

    def _verify(self, i: int, iteration: int) -> None:
        s = self.schedule
        for b in s.uses[i]:
            if b in s.produced[i] or s.sizes[b] == 0:
                continue
            check = verify_pattern(self.device, self._ptr_at(b, i), s.sizes[b],
                                   seed=self.pattern_seed, buffer_id=b,
                                   iteration=self._expected(b, iteration), stream=self.compute)
            self.result.bytes_checked += s.sizes[b]
            self.result.corrupt_bytes += check.mismatches

    def _swap_out(self, i: int, pending: list, last_out: dict) -> None:
        s, d2h, device = self.schedule, self.d2h, self.device
        for b in s.swap_outs[i]:
            ptr = self._ptr_at(b, i)
            d2h.wait_event(self.done[i])
            device.copy_d2h_async(self.slab.ptr + s.slot[b], ptr, s.sizes[b], d2h)
            out = device.create_event()
            out.record(d2h)
            pending.append(_PendingCopy(ptr, ptr + s.sizes[b], out))
            last_out[b] = out
            if "swap-corrupt" in self.settings.faults and not self.corrupted and s.sizes[b]:
                self.corrupted = True
                d2h.synchronize()
                host = device.pinned_array(self.slab)
                host[s.slot[b]:s.slot[b] + min(s.sizes[b], CORRUPT_BYTES)] ^= 0xFF
                del host
