"""The replay of :mod:`cupool.sim.simulator` without generators: one flat loop, plain records.

:func:`replay` runs the machine that :mod:`cupool.sim.simulator` defines (one compute
stream, FIFO copy engines per direction, swap-ins handed over once the bytes they land in
and their own host copy are ready) and gives the same numbers as the event replay, bit for
bit: the copies, op and recompute times, and their order. The loop runs compiled
(``_timeline.c``, where the optional extension is built) or as :func:`python_replay`: the
same timeline either way, every float bit for bit (the C code does the same double
operations in the same order, and its heap is heapq's, over the same key).

Equal numbers need equal order, not just equal times. Several copies handed over at one
instant are served in the order the event core hands them over, and copies ending at one
instant complete in the order the event core processes them; both follow the core's heap
key ``(time, priority, seq)``. So this loop keeps the same key: every step the event
replay schedules and that anything waits on (a copy handed over, an engine taking a copy,
a copy ending, its completion, the compute stream resuming) is one heap entry here, pushed
at the moment and with the priority the event replay pushes it. Steps that nothing waits
on (a finished hand-over process) are left out: they only take up sequence numbers, which
do not change the relative order of the others. Where nothing else is due before it, the
compute stream moves on without a heap entry at all (its timeout would be the next event).

Copy engines of one direction are identical and served in FIFO order, so which engine
takes a copy changes nothing observable; the loop keeps a count of idle engines.

The rest is bookkeeping the event replay does with a list scan or a Python loop per
residency, done here with an index: the D2H copies that may still read bytes are kept
sorted by offset (an overlap query is a bisection), the residencies as NumPy columns
(:class:`~cupool.sim.replay_input.ResidencyArrays`: the ranges compute fills at each op,
and the bytes of copies still running when later ops start, in :func:`peak_bytes`). The
actions come sorted by op from :mod:`cupool.sim.replay_input`.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from cupool.sim.cost import D2H, H2D
from cupool.sim.replay_input import ReplayInput

try:
    from cupool.sim import _timeline
except ImportError:  # the optional C extension is not built: the Python loop runs
    _timeline = None

COMPILED_AVAILABLE = _timeline is not None
"""Whether the C extension ``_timeline`` is built (and :func:`replay` runs compiled)."""

URGENT = 0
NORMAL = 1

# heap entry kinds
_HAND_OVER = 0   # a copy's hand-over begins (its waits are registered, or it is queued)
_WAITED = 1      # every wait of a waiter completed: it resumes
_TAKEN = 2       # an idle engine takes a queued copy
_ENDED = 3       # a copy's transfer time is over
_COMPLETED = 4   # a copy's completion is processed (those waiting on it are told)
_COMPUTE = 5     # the compute stream's timeout (a recompute or an op) is over


# fields of a copy: [buffer_id, direction name, nbytes, copy_us, enqueued_us, started_us,
# waits (copies to complete before its hand-over), completion_us once processed (else None),
# waiters to tell at completion (None or [[copies left, copy or None]]), direction]
_US, _ENQUEUED, _STARTED, _WAITS, _DONE, _WAITERS, _DIRECTION = range(3, 10)

# stages of the compute stream
_IDLE = 0         # waiting for an event
_DISPATCH = 1     # op ``i`` is dispatched: hand over its swap-ins, find its waits
_WAITED_DONE = 2  # its waits are over
_NEXT_STEP = 3    # run the next recompute before op ``i``, or op ``i`` itself
_RECOMPUTED = 4   # recompute ``j`` before op ``i`` is over
_RAN = 5          # op ``i`` is over: issue its swap-outs, dispatch the next op
_ENQUEUED = 6     # the host has enqueued op ``i``: dispatch it


@dataclass(frozen=True)
class Timeline:
    """What one replay produced, in the event replay's record order.

    ``op_times``, ``copies`` and ``recomputes`` are :class:`SimReport`'s fields;
    ``waited`` the wait of each op that waited for copies or bytes (µs);
    ``recompute_us`` the duration of each recompute, in the order of ``recomputes``;
    ``held_after`` ``(residency, completion_us)`` of every swap-out copy, in issue order.
    """

    op_times: list
    copies: list
    recomputes: list
    recompute_us: list
    waited: list
    held_after: list


def replay(data: ReplayInput, num_ops: int, engines: int) -> Timeline:
    """Run one iteration of the machine on ``engines`` copy engines per direction; see the
    module docstring for the order kept. Compiled (``_timeline``) where built, else
    :func:`python_replay`: the same timeline."""
    if _timeline is not None and not data.host_ready:  # the host's time: the Python loop
        records = _timeline.replay(data, num_ops, engines, D2H, H2D)
        if records is not None:  # None: an input the compiled loop leaves to Python
            return Timeline(*records)
    return python_replay(data, num_ops, engines)


@dataclass(frozen=True)
class Times:
    """A replay's times without its per-copy records: ``op_times`` (``num_ops`` rows of
    dispatch, start and end, ``float64``), ``copy_spans`` (start and end of each copy on its
    engine, in completion order), and ``recomputes``, ``recompute_us`` and ``waited`` as in
    :class:`Timeline` (the same numbers, bit for bit)."""

    op_times: np.ndarray
    copy_spans: np.ndarray
    recomputes: list
    recompute_us: list
    waited: list

    @classmethod
    def of(cls, timeline: Timeline) -> Times:
        spans = [(c[4], c[5]) for c in timeline.copies]
        return cls(np.array(timeline.op_times, np.float64).reshape(-1, 3),
                   np.array(spans, np.float64).reshape(-1, 2), timeline.recomputes,
                   timeline.recompute_us, timeline.waited)


def replay_times(data: ReplayInput, num_ops: int, engines: int) -> Times:
    """:func:`replay`'s times alone (compiled, they are made without a Python object per op
    or copy)."""
    if _timeline is not None and not data.host_ready:
        records = _timeline.replay(data, num_ops, engines, D2H, H2D, True)
        if records is not None:
            op_times, spans, recomputes, recompute_us, waited, _held = records
            return Times(np.frombuffer(op_times, np.float64).reshape(-1, 3),
                         np.frombuffer(spans, np.float64).reshape(-1, 2), recomputes,
                         recompute_us, waited)
    return Times.of(python_replay(data, num_ops, engines))


def python_replay(data: ReplayInput, num_ops: int, engines: int) -> Timeline:
    """:func:`replay` in Python."""
    heap: list = []
    push, pop, seq = heapq.heappush, heapq.heappop, itertools.count().__next__
    now = 0.0
    op_us, widest = data.op_us, data.widest_swap_out
    swap_ins, due, recomputes, swap_outs = _rows_by_op(data)
    filled_first, filled_lows, filled_highs = (data.filled.first.tolist(),
                                               data.filled.lows.tolist(),
                                               data.filled.highs.tolist())
    idle = [engines, engines]  # idle engines per direction: 0 = D2H, 1 = H2D
    queued = ([], [])          # per direction, copies handed over in order ...
    taken = [0, 0]             # ... of which this many were taken by an engine
    op_times, copies, recompute_records, recompute_us = [], [], [], []
    waited, held_after = [], []
    # D2H copies that may still read device bytes: their lows, sorted, and ``(high, copy)``
    # in the same order; those completed since (``dead`` of them) are skipped in queries
    # and dropped now and then
    lows: list = []
    pending: list = []
    dead = 0
    last_out: dict = {}
    landed: dict = {}

    # the compute stream, resumable: at op ``i``, in ``stage``, at recompute ``j``
    i, j, stage = 0, 0, _DISPATCH if num_ops else _IDLE
    dispatch = start = begun = ready_wait = 0.0
    steps = ()
    host_ready = data.host_ready
    while True:
        while stage != _IDLE:  # the compute stream runs until it waits
            if stage == _DISPATCH and host_ready and host_ready[i] > now:
                ready_wait = now  # the stream is ahead of the host: wait for op i's enqueue
                until, stage = now + (host_ready[i] - now), _ENQUEUED
                if heap and heap[0][0] <= until:
                    push(heap, (until, NORMAL, seq(), _COMPUTE, stage))
                    stage = _IDLE
                else:
                    now = until
                continue
            if stage == _ENQUEUED:
                waited.append(now - ready_wait)
                stage = _DISPATCH
            if stage == _DISPATCH:
                dispatch = now
                if dead and 2 * dead >= len(pending):
                    kept = [k for k, p in enumerate(pending) if p[1][_DONE] is None]
                    lows = [lows[k] for k in kept]
                    pending = [pending[k] for k in kept]
                    dead = 0
                if i in swap_ins:
                    for b, low, high, nbytes, copy_us, trigger in swap_ins[i]:
                        waits = _reading(lows, pending, low, high, widest) if lows else []
                        own = last_out.get(b)
                        if own is not None and own[_DONE] is None:
                            waits.append(own)
                        copy = [b, H2D, nbytes, copy_us, 0.0, 0.0, waits, None, None, 1]
                        push(heap, (now, URGENT, seq(), _HAND_OVER, copy))
                        landed[(b, trigger)] = copy
                waits = [landed[key] for key in due[i]] if i in due else []
                if lows:
                    for k in range(filled_first[i], filled_first[i + 1]):
                        low = filled_lows[k]
                        top = bisect_left(lows, low - widest + 1)
                        if top < len(lows) and lows[top] < filled_highs[k]:
                            waits += _reading(lows, pending, low, filled_highs[k], widest)
                steps, j = recomputes.get(i, ()), 0
                if waits:
                    waits = [c for c in waits if c[_DONE] is None]
                    if waits:
                        waiter = [len(waits), None]
                        for c in waits:
                            if c[_WAITERS] is None:
                                c[_WAITERS] = [waiter]
                            else:
                                c[_WAITERS].append(waiter)
                        stage = _IDLE
                        break
                stage = _NEXT_STEP
            elif stage == _RAN:
                op_times.append((dispatch, start, now))
                if i in swap_outs:
                    for b, r, nbytes, copy_us, low, high in swap_outs[i]:
                        copy = [b, D2H, nbytes, copy_us, 0.0, 0.0, (), None, None, 0]
                        push(heap, (now, URGENT, seq(), _HAND_OVER, copy))
                        k = bisect_right(lows, low)
                        lows.insert(k, low)
                        pending.insert(k, (high, copy))
                        last_out[b] = copy
                        held_after.append((r, copy))
                i += 1
                stage = _DISPATCH if i < num_ops else _IDLE
                continue
            elif stage == _WAITED_DONE:
                waited.append(now - dispatch)
                stage = _NEXT_STEP
            elif stage == _RECOMPUTED:
                recompute_records.append((steps[j][0], i, begun, now))
                recompute_us.append(steps[j][1])
                j += 1
                stage = _NEXT_STEP
            if stage == _NEXT_STEP:
                if j < len(steps):
                    begun = now
                    until, stage = now + steps[j][1], _RECOMPUTED
                else:
                    start = now
                    until, stage = now + op_us[i], _RAN
                if heap and heap[0][0] <= until:
                    push(heap, (until, NORMAL, seq(), _COMPUTE, stage))
                    stage = _IDLE
                else:
                    now = until  # nothing else is due first: the timeout is the next event
        if not heap:
            break
        now, _priority, _seq, kind, subject = pop(heap)
        if kind == _TAKEN:
            subject[_STARTED] = now
            push(heap, (now + subject[_US], NORMAL, seq(), _ENDED, subject))
            continue
        if kind == _ENDED:
            copies.append((subject[0], subject[1], subject[2], subject[_ENQUEUED],
                           subject[_STARTED], now))
            push(heap, (now, NORMAL, seq(), _COMPLETED, subject))
            direction = subject[_DIRECTION]
            waiting = queued[direction]
            head = taken[direction]
            if head < len(waiting):
                taken[direction] = head + 1
                push(heap, (now, URGENT, seq(), _TAKEN, waiting[head]))
            else:
                idle[direction] += 1
            continue
        if kind == _COMPLETED:
            subject[_DONE] = now
            if not subject[_DIRECTION]:
                dead += 1
            if subject[_WAITERS] is not None:
                for waiter in subject[_WAITERS]:
                    waiter[0] -= 1
                    if not waiter[0]:
                        push(heap, (now, URGENT, seq(), _WAITED, waiter))
            continue
        if kind == _COMPUTE:
            stage = subject
            continue
        if kind == _HAND_OVER:
            waits = subject[_WAITS]
            if waits:
                waiter = [0, subject]
                for c in waits:
                    if c[_DONE] is None:
                        waiter[0] += 1
                        if c[_WAITERS] is None:
                            c[_WAITERS] = [waiter]
                        else:
                            c[_WAITERS].append(waiter)
                if not waiter[0]:
                    push(heap, (now, URGENT, seq(), _WAITED, waiter))
                continue
        else:  # _WAITED
            subject = subject[1]
            if subject is None:  # the compute stream's waits are over
                stage = _WAITED_DONE
                continue
        subject[_ENQUEUED] = now  # hand the copy over to its direction's engines
        direction = subject[_DIRECTION]
        if idle[direction]:
            idle[direction] -= 1
            push(heap, (now, URGENT, seq(), _TAKEN, subject))
        else:
            queued[direction].append(subject)
    return Timeline(op_times, copies, recompute_records, recompute_us, waited,
                    [(r, copy[_DONE]) for r, copy in held_after])


def _rows_by_op(data: ReplayInput) -> tuple[dict, dict, dict, dict]:
    """``data``'s rows as :func:`python_replay` reads them: per op (only those with any), a
    list of tuples -- swap-ins ``(buffer_id, low, high, nbytes, copy_us, trigger_op)``, dues
    ``(buffer_id, trigger_op)``, recomputes ``(buffer_id, duration_us)`` and copies out
    ``(buffer_id, residency, nbytes, copy_us, low, high)``."""
    ins, due, recomputes, outs = data.swap_ins, data.due, data.recomputes, data.swap_outs
    residencies = data.residencies
    return (
        _by_op(ins.first, zip(ins.buffer_ids.tolist(), ins.lows.tolist(), ins.highs.tolist(),
                              ins.nbytes.tolist(), ins.copy_us.tolist(),
                              ins.triggers.tolist(), strict=True)),
        _by_op(due.first, zip(due.buffer_ids.tolist(), due.triggers.tolist(), strict=True)),
        _by_op(recomputes.first, zip(recomputes.buffer_ids.tolist(),
                                     recomputes.duration_us.tolist(), strict=True)),
        _by_op(outs.first, zip(outs.buffer_ids.tolist(),
                               [residencies[k] for k in outs.residencies.tolist()],
                               outs.nbytes.tolist(), outs.copy_us.tolist(),
                               outs.lows.tolist(), outs.highs.tolist(), strict=True)))


def _by_op(first: np.ndarray, rows) -> dict:
    rows, bounds = list(rows), first.tolist()
    return {i: rows[bounds[i]:bounds[i + 1]] for i in np.flatnonzero(np.diff(first)).tolist()}


def _reading(lows, pending, low, high, widest):
    """The copies of ``pending`` (``(high, copy)`` by ``lows``) still reading bytes of
    ``[low, high)``: those from ``low - widest`` up (narrower ranges below cannot reach
    ``low``) and below ``high``."""
    top = bisect_left(lows, high)
    bottom = bisect_left(lows, low - widest + 1, 0, top)
    return [p[1] for p in pending[bottom:top] if low < p[0] and p[1][_DONE] is None]


def peak_bytes(num_ops: int, data: ReplayInput, timeline: Timeline) -> int:
    """The most device bytes held while an op runs (the rule of :mod:`cupool.sim.simulator`):
    residencies covering the op, plus each swapped-out range whose copy is still running
    when the op starts, unless a residency over those bytes covers the op."""
    if num_ops == 0:
        return 0
    arrays = data.arrays
    starts, ends = arrays.starts, arrays.ends
    held = np.zeros(num_ops + 1, np.int64)
    np.add.at(held, starts, arrays.sizes)
    np.add.at(held, ends, -arrays.sizes)
    per_op = np.cumsum(held[:num_ops])
    count = len(timeline.held_after)
    if count:
        op_starts = np.fromiter(map(_START, timeline.op_times), np.float64, num_ops)
        done = np.fromiter(map(_DONE_US, timeline.held_after), np.float64, count)
        # copies out are issued in row order: held_after[k] leaves row k's residency
        leaving = data.swap_outs.residencies[:count]
        stops = np.searchsorted(op_starts, done, "left")  # ops [end, stop) start before
        late = np.flatnonzero(stops > ends[leaving])
        if late.size:
            _add_late_copies(per_op, arrays, leaving[late], stops[late])
    return int(per_op.max())


def _add_late_copies(per_op, arrays, gone, stops) -> None:
    """Add to ``per_op`` the bytes of each copy out still running when ops
    ``[end, stops[k])`` start (``end`` that of residency ``gone[k]``), at the ops no
    residency over those bytes covers."""
    by_start = np.argsort(arrays.starts, kind="stable")
    starts, ends, lows, highs = (arrays.starts[by_start], arrays.ends[by_start],
                                 arrays.lows[by_start], arrays.highs[by_start])
    prefix = np.searchsorted(starts, stops, "left").tolist()
    for near, first, stop, size, low, high in zip(
            prefix, arrays.ends[gone].tolist(), stops.tolist(), arrays.sizes[gone].tolist(),
            arrays.lows[gone].tolist(), arrays.highs[gone].tolist(), strict=True):
        # of the first ``near`` residencies by start (those starting before op ``stop``),
        # those ending after op ``first`` over the copy's bytes
        near = np.flatnonzero((ends[:near] > first) & (lows[:near] < high)
                              & (low < highs[:near]))
        window = per_op[first:stop]
        if not near.size:
            window += size
            continue
        covered = np.zeros(stop - first + 1, np.int64)
        np.add.at(covered, np.clip(starts[near] - first, 0, stop - first), 1)
        np.add.at(covered, ends[near].clip(max=stop) - first, -1)
        window[np.cumsum(covered[:-1]) == 0] += size


_START = itemgetter(1)
_DONE_US = itemgetter(1)
