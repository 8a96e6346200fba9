"""Discrete-event replay of a plan: iteration time, stalls, copies, peak device bytes.

The machine (one iteration, starting with every swap engine idle)::

    compute  |op0|op1|..wait..|rc|op2|op3|...      one stream, ops in order
    D2H      |   |swap-out b1 ........|            FIFO, copy_engines_per_direction servers
    H2D               |swap-in b1 .......|         FIFO, likewise

- op ``i`` is *dispatched* when op ``i - 1`` finishes (op 0 at time 0), and not before
  the host has enqueued it where the cost model prices the host
  (:class:`~cupool.sim.cost.CostModel` ``host_us_per_op``: the compute stream cannot
  run ahead of the host; that wait is a stall too). At dispatch,
  every :class:`SwapIn` triggered at ``i`` is handed to the H2D engine, once the device
  range it lands in is free (any D2H copy out of overlapping bytes completed) and once the
  buffer's own swap-out copy completed (its host copy exists).
- op ``i`` then waits for: every swap-in due at ``i`` to have landed, and, for every
  residency starting at ``i`` that compute fills (the buffer's first residency, or a
  recomputed one), any D2H copy still reading overlapping bytes. Then the recomputes
  before ``i`` run on the compute stream in plan order, each for its producing op's
  duration; then op ``i`` runs for its duration.
- every :class:`SwapOut` after op ``i`` is handed to the D2H engine when op ``i``
  finishes; its bytes stay held until the copy completes. A swap-out with ``drop``
  (clean data, its host copy still valid) copies nothing: its bytes are free at its
  residency's end, and a later swap-in of the buffer waits for nothing it issued.
- a copy of ``n`` bytes takes ``latency_us + n / bandwidth`` on an engine, both those of
  the host level the swap names (pinned unless said; :mod:`cupool.sim.cost`); each
  direction serves requests in the order they were handed over.

The iteration ends when the last op has finished and every copy has completed.
``iteration_us = ideal_us + recompute_us + stall_us`` exactly: ``stall_us`` is the time
the compute stream sat idle (waiting for the host's enqueue, for copies or bytes, and for
copies still running after the last op). A static plan has no actions, so it runs at ``ideal_us``.

``peak_bytes`` is the most device bytes held while an op runs: the plan's residencies
covering it, plus the ranges of swap-outs whose residency has ended but whose copy is
still running when the op starts (unless a residency covering the op already claims
those bytes: the same bytes are not counted twice).

Two replays of this machine give identical reports, every float bit for bit:
:class:`_Replay`, generators on the event core of :mod:`cupool.sim.events` (the
reference, and the one that can log every event), and :mod:`cupool.sim.timeline`, one
flat loop that keeps the event core's order of simultaneous events and runs several
times faster (the budget planner replays hundreds of plans per plan). A search that
compares many plans by their time alone asks :func:`time_iteration`: the flat loop's
times, bit for bit, without the records of each copy or the peak bytes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from operator import itemgetter

import numpy as np

from cupool.check import validate_plan
from cupool.core.collector import collector_paused
from cupool.core.vocabulary import (
    PINNED,
    Plan,
    RecomputeAction,
    SolveStatus,
    SwapIn,
    SwapOut,
    Trace,
    plan_residencies,
)
from cupool.sim.cost import D2H, H2D, CostModel, cost_model, ops_without_duration
from cupool.sim.events import Environment, Store
from cupool.sim.replay_input import replay_input
from cupool.sim.timeline import peak_bytes, replay, replay_times


@dataclass(frozen=True)
class SimReport:
    """What a replay of one iteration measured (times in µs, sizes in bytes).

    ``feasible`` is False when the plan has no placement, or breaks a validator rule
    (``reason`` says which); times are then ``inf``. ``ops_without_duration`` counts ops
    that ran for the cost model's ``default_op_us``.

    Per-event records, plain tuples for pictures and tests:

    - ``op_times[i] = (dispatch_us, start_us, end_us)``; ``start_us`` is after op ``i``'s
      waits and recomputes;
    - ``copies``: ``(buffer_id, direction, nbytes, enqueued_us, start_us, end_us)`` in the
      order they completed;
    - ``recomputes``: ``(buffer_id, before_op, start_us, end_us)``;
    - ``log`` (only with ``simulate(..., log=True)``): ``(time_us, what, subject)`` with
      ``what`` one of ``op_start``, ``op_end``, ``recompute_start``, ``d2h_queued``,
      ``d2h_start``, ``d2h_end``, ``h2d_queued``, ``h2d_start``, ``h2d_end`` and
      ``subject`` the op index (``op_*``) or the buffer id.
    """

    feasible: bool
    iteration_us: float
    ideal_us: float
    overhead: float
    peak_bytes: int
    swapped_bytes: int
    recompute_us: float
    stall_us: float
    reason: str = ""
    ops_without_duration: int = 0
    op_times: tuple = ()
    copies: tuple = ()
    recomputes: tuple = ()
    log: tuple = ()

    def summary(self) -> dict:
        """The scalar fields as a flat dict (``inf`` becomes ``None``, for JSON)."""
        keep = ("feasible", "iteration_us", "ideal_us", "overhead", "peak_bytes",
                "swapped_bytes", "recompute_us", "stall_us", "reason", "ops_without_duration")
        values = {k: v for k, v in asdict(self).items() if k in keep}
        return {k: (None if isinstance(v, float) and math.isinf(v) else v)
                for k, v in values.items()}


@dataclass(frozen=True)
class IterationTimes:
    """The times :func:`simulate` reports for a plan, without its records of each copy and
    its peak bytes: what a search comparing many plans by their iteration reads.

    ``iteration_us`` and ``stall_us`` are the report's; ``op_times`` its ``op_times`` as
    ``num_ops`` rows of ``float64`` (dispatch, start, end); ``recomputes`` its
    ``recomputes``; ``copying_us`` the time the copies spent on their engines (``end -
    start`` of each, added up in the order they completed; ``0`` without copies).
    """

    iteration_us: float
    stall_us: float
    copying_us: float
    op_times: np.ndarray
    recomputes: tuple

    @classmethod
    def of(cls, report: SimReport) -> IterationTimes:
        return cls(report.iteration_us, report.stall_us,
                   sum(c[5] - c[4] for c in report.copies),
                   np.array(report.op_times, np.float64).reshape(-1, 3), report.recomputes)


def time_iteration(trace: Trace, plan: Plan, cost: CostModel | None = None) -> IterationTimes:
    """:func:`simulate` ``(trace, plan, cost, validate=False)``'s times (the same numbers,
    bit for bit), made without a Python object per op or copy where the replay runs
    compiled: what a search replaying hundreds of plans of one trace compares."""
    cost = cost or cost_model()
    if (not plan.placements and not plan.residencies) or plan.status in (
            SolveStatus.INFEASIBLE, SolveStatus.TIMEOUT):
        return IterationTimes.of(simulate(trace, plan, cost, validate=False))
    with collector_paused():  # the replay makes no reference cycles
        data = replay_input(trace, plan_residencies(trace, plan), plan.actions, cost)
        if data.shortest_copy_us < 0 or not data.op_us_nonnegative:
            return IterationTimes.of(_Replay(trace, plan, cost, False).run())
        times = replay_times(data, trace.num_ops, cost.copy_engines_per_direction)
        op_times, spans = times.op_times, times.copy_spans
        last_op = float(op_times[-1, 2]) if len(op_times) else 0.0
        last_copy = float(spans[:, 1].max()) if len(spans) else last_op
        clock = _Clock.of_ends(data.op_us, times.recompute_us, last_op, last_copy,
                               times.waited, data.ideal_us)
        # added up one after the other, as ``sum`` adds the copies' times
        copying = (float(np.add.accumulate(spans[:, 1] - spans[:, 0])[-1]) if len(spans)
                   else 0)
        return IterationTimes(clock.iteration_us, clock.stall_us, copying, op_times,
                              tuple(times.recomputes))


def ideal_us(trace: Trace, cost: CostModel) -> float:
    """Sum of op durations: the iteration with infinite memory."""
    return math.fsum(cost.op_times(trace))


def _infeasible(trace, cost, reason) -> SimReport:
    inf = math.inf
    return SimReport(False, inf, ideal_us(trace, cost), inf, 0, 0, 0.0, inf, reason,
                     ops_without_duration(trace))


def simulate(trace: Trace, plan: Plan, cost: CostModel | None = None, *,
             validate: bool = True, log: bool = False, reference: bool = False) -> SimReport:
    """Replay ``plan`` for ``trace`` under ``cost`` (default: :func:`cost_model` ``("gen5")``).

    The plan is checked with the independent validator first (``validate=False`` skips
    that, for callers that just validated it); an invalid plan is reported infeasible,
    never simulated.

    The replay runs as one flat loop (:mod:`cupool.sim.timeline`). With ``log`` (which
    records every event in order) or ``reference``, it runs on the event core instead,
    generators and all: the reference the flat loop is tested against, with bit-identical
    reports.
    """
    cost = cost or cost_model()
    if not plan.placements and not plan.residencies:
        return _infeasible(trace, cost, f"the plan has no placement (status "
                                        f"{plan.status.value})")
    if plan.status in (SolveStatus.INFEASIBLE, SolveStatus.TIMEOUT):
        return _infeasible(trace, cost, f"the plan's status is {plan.status.value}")
    if validate:
        report = validate_plan(trace, plan)
        if not report.valid:
            return _infeasible(trace, cost, f"invalid plan ({report.rule}): {report.message}")
    if log or reference:
        return _Replay(trace, plan, cost, log).run()
    with collector_paused():  # the replay makes no reference cycles
        return _direct(trace, plan, cost)


def _direct(trace: Trace, plan: Plan, cost: CostModel) -> SimReport:
    """The replay as one flat loop; the report is computed as :meth:`_Replay.run` does."""
    residencies = plan_residencies(trace, plan)
    data = replay_input(trace, residencies, plan.actions, cost)
    if data.shortest_copy_us < 0 or not data.op_us_nonnegative:
        # a negative delay: the event core says which
        return _Replay(trace, plan, cost, False).run()
    timeline = replay(data, trace.num_ops, cost.copy_engines_per_direction)
    clock = _Clock.of(data.op_us, timeline.recompute_us, timeline.op_times, timeline.copies,
                      timeline.waited, data.ideal_us)
    return SimReport(
        feasible=True, iteration_us=clock.iteration_us, ideal_us=clock.ideal_us,
        overhead=clock.overhead,
        peak_bytes=peak_bytes(trace.num_ops, data, timeline),
        swapped_bytes=sum(map(_NBYTES, timeline.copies)), recompute_us=clock.recompute_us,
        stall_us=clock.stall_us, ops_without_duration=data.ops_without_duration,
        op_times=tuple(timeline.op_times), copies=tuple(timeline.copies),
        recomputes=tuple(timeline.recomputes))


_NBYTES, _END = itemgetter(2), itemgetter(5)  # of a copy record


@dataclass(frozen=True)
class _Clock:
    """An iteration's times from what a replay recorded, computed one way for both replays
    (so that their reports agree bit for bit): ``iteration_us = ideal_us + recompute_us +
    stall_us`` exactly, the stall being the ops' waits plus the copies still running after
    the last op."""

    ideal_us: float
    recompute_us: float
    stall_us: float
    iteration_us: float
    overhead: float

    @classmethod
    def of(cls, op_us, recompute_us, op_times, copies, waited,
           ideal: float | None = None) -> _Clock:
        """From the ops' durations, each recompute's duration, ``(dispatch, start, end)``
        per op, the copies (their end at index 5) and each wait (``ideal``: the durations
        added up with ``math.fsum`` already, else None)."""
        last_op = op_times[-1][2] if op_times else 0.0
        return cls.of_ends(op_us, recompute_us, last_op,
                           max(map(_END, copies), default=last_op), waited, ideal)

    @classmethod
    def of_ends(cls, op_us, recompute_us, last_op: float, last_copy: float,
                waited, ideal: float | None = None) -> _Clock:
        """:meth:`of` given the end of the last op and the latest end of a copy (that of
        the last op where no copy ends later)."""
        ideal = math.fsum(op_us) if ideal is None else ideal
        recompute = math.fsum(recompute_us)
        # the latest end less last_op: subtracting one number keeps the order of the ends
        tail = max(0.0, last_copy - last_op)
        stall = math.fsum(waited) + tail
        overhead = (recompute + stall) / ideal if ideal > 0 else 0.0
        return cls(ideal, recompute, stall, ideal + recompute + stall, overhead)


class _Replay:
    def __init__(self, trace, plan, cost, log):
        self.trace, self.cost = trace, cost
        self.env = Environment()
        self.log = [] if log else None
        self.sizes = {b.id: b.size for b in trace.buffers}
        self.op_us = cost.op_times(trace)
        self.residencies = plan_residencies(trace, plan)
        self.host_ready = cost.host_ready(trace.num_ops, plan.actions)
        entered = {}
        self.swap_ins = defaultdict(list)    # trigger op -> [(SwapIn, residency)]
        self.due = defaultdict(list)         # due op -> [(buffer, trigger op)]
        self.recomputes = defaultdict(list)  # before op -> [buffer] in plan order
        self.swap_outs = defaultdict(list)   # after op -> [(buffer, residency)]
        spans = defaultdict(list)
        for r in self.residencies:
            spans[r.buffer_id].append(r)
        for action in plan.actions:
            b = action.buffer_id
            if isinstance(action, SwapIn):
                r = next(r for r in spans[b] if r.start == action.trigger_op)
                self.swap_ins[action.trigger_op].append((action, r))
                self.due[action.due_op].append((b, action.trigger_op))
                entered[(b, r.start)] = action
            elif isinstance(action, RecomputeAction):
                self.recomputes[action.before_op].append(b)
                entered[(b, action.before_op)] = action
            elif isinstance(action, SwapOut):
                r = next(r for r in spans[b] if r.start <= action.after_op < r.end)
                if not action.drop:  # clean data is dropped: nothing to copy
                    self.swap_outs[action.after_op].append((b, r, action.level))
        self.filled = defaultdict(list)  # op -> residencies compute fills starting there
        for r in self.residencies:
            if not isinstance(entered.get((r.buffer_id, r.start)), SwapIn):
                self.filled[r.start].append(r)
        self.queues = {H2D: Store(self.env), D2H: Store(self.env)}
        self.op_times, self.copies, self.recompute_records = [], [], []
        self.held_after = []  # (residency, copy finished event) of swap-outs
        self.waited = []  # how long ops waited for copies or bytes

    def record(self, what, subject):
        if self.log is not None:
            self.log.append((self.env.now, what, subject))

    def engine(self, direction):
        while True:
            buffer_id, nbytes, enqueued, done, level = yield self.queues[direction].get()
            started = self.env.now
            self.record(f"{direction}_start", buffer_id)
            yield self.env.timeout(self.cost.copy_us(nbytes, direction, level))
            self.record(f"{direction}_end", buffer_id)
            self.copies.append((buffer_id, direction, nbytes, enqueued, started, self.env.now))
            done.succeed(self.env.now)  # its value is the completion time

    def copy(self, direction, buffer_id, waits, level=PINNED):
        """Hand a copy from or to host ``level`` to ``direction``'s engine once ``waits``
        are done; the returned event triggers when the copy completed."""
        done = self.env.event()

        def hand_over():
            if waits:
                yield self.env.all_of(waits)
            self.record(f"{direction}_queued", buffer_id)
            self.queues[direction].put((buffer_id, self.sizes[buffer_id], self.env.now, done,
                                        level))

        self.env.process(hand_over())
        return done

    def compute(self):
        env = self.env
        pending = []  # [(low, high, done)] D2H copies that may still read device bytes
        last_out = {}  # buffer -> done event of its latest swap-out
        landed = {}
        host_ready = self.host_ready
        for i in range(self.trace.num_ops):
            if host_ready and host_ready[i] > env.now:  # ahead of the host's enqueue
                ready_wait = env.now
                yield env.timeout(host_ready[i] - env.now)
                self.waited.append(env.now - ready_wait)
            dispatch = env.now
            pending = [p for p in pending if not p[2].processed]
            for swap_in, r in self.swap_ins[i]:
                b = r.buffer_id
                low, high = r.offset, r.offset + self.sizes[b]
                waits = [done for lo, hi, done in pending if lo < high and low < hi]
                if b in last_out and not last_out[b].processed:
                    waits.append(last_out[b])
                landed[(b, swap_in.trigger_op)] = self.copy(H2D, b, waits, swap_in.level)
            waits = [landed[key] for key in self.due[i]]
            for r in self.filled[i]:
                low, high = r.offset, r.offset + self.sizes[r.buffer_id]
                waits += [done for lo, hi, done in pending if lo < high and low < hi]
            waits = [w for w in waits if not w.processed]
            if waits:
                yield env.all_of(waits)
                self.waited.append(env.now - dispatch)
            for b in self.recomputes[i]:
                begun = env.now
                self.record("recompute_start", b)
                yield env.timeout(self.op_us[self.trace.buffer(b).recompute.op])
                self.recompute_records.append((b, i, begun, env.now))
            start = env.now
            self.record("op_start", i)
            yield env.timeout(self.op_us[i])
            self.record("op_end", i)
            self.op_times.append((dispatch, start, env.now))
            for b, r, level in self.swap_outs[i]:
                done = self.copy(D2H, b, [], level)
                pending.append((r.offset, r.offset + self.sizes[b], done))
                last_out[b] = done
                self.held_after.append((r, done))

    def run(self) -> SimReport:
        for direction in (D2H, H2D):
            for _ in range(self.cost.copy_engines_per_direction):
                self.env.process(self.engine(direction))
        self.env.process(self.compute())
        self.env.run()
        n = self.trace.num_ops
        clock = _Clock.of(self.op_us, [self.op_us[self.trace.buffer(b).recompute.op]
                                       for b, _i, _begin, _end in self.recompute_records],
                          self.op_times, self.copies, self.waited)
        held = [0] * (n + 1)
        for r in self.residencies:
            held[r.start] += self.sizes[r.buffer_id]
            held[r.end] -= self.sizes[r.buffer_id]
        per_op, total = [], 0
        for i in range(n):
            total += held[i]
            per_op.append(total)
        if self.held_after:
            low = np.array([q.offset for q in self.residencies])
            high = low + np.array([self.sizes[q.buffer_id] for q in self.residencies])
            starts = np.array([q.start for q in self.residencies])
            ends = np.array([q.end for q in self.residencies])
        for r, done in self.held_after:
            size = self.sizes[r.buffer_id]
            later = np.flatnonzero((low < r.offset + size) & (r.offset < high) & (ends > r.end))
            later_starts, later_ends = starts[later], ends[later]
            i = r.end
            while i < n and self.op_times[i][1] < done.value:
                if not np.any((later_starts <= i) & (i < later_ends)):
                    per_op[i] += size
                i += 1
        return SimReport(
            feasible=True, iteration_us=clock.iteration_us, ideal_us=clock.ideal_us,
            overhead=clock.overhead, peak_bytes=max(per_op, default=0),
            swapped_bytes=sum(c[2] for c in self.copies), recompute_us=clock.recompute_us,
            stall_us=clock.stall_us, ops_without_duration=ops_without_duration(self.trace),
            op_times=tuple(self.op_times), copies=tuple(self.copies),
            recomputes=tuple(self.recompute_records),
            log=tuple(self.log) if self.log is not None else ())
