"""The replay of :mod:`cupool.sim.simulator` without generators: one flat loop, plain records.

:func:`replay` runs the machine that :mod:`cupool.sim.simulator` defines (one compute
stream, FIFO copy engines per direction, swap-ins handed over once the bytes they land in
and their own host copy are ready) and gives the same numbers as the event replay, bit for
bit: the copies, op and recompute times, and their order.

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
(:class:`ResidencyArrays`: the ranges compute fills at each op, and the bytes of copies
still running when later ops start, in :func:`peak_bytes`).
"""

from __future__ import annotations

import heapq
import itertools
import weakref
from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass
from operator import attrgetter, itemgetter

import numpy as np

from cupool.core.vocabulary import RecomputeAction, Residency, SwapIn, SwapOut
from cupool.sim.cost import D2H, H2D, CostModel, ops_without_duration

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


@dataclass(frozen=True)
class ResidencyArrays:
    """The residencies of a plan as columns (NumPy ``int64``, plan order): ``starts``,
    ``ends``, ``lows`` (offsets), ``highs`` (offset + size) and ``sizes``."""

    starts: np.ndarray
    ends: np.ndarray
    lows: np.ndarray
    highs: np.ndarray
    sizes: np.ndarray

    @classmethod
    def of(cls, residencies, sizes: dict) -> ResidencyArrays:
        count = len(residencies)
        column = [np.fromiter(map(attrgetter(name), residencies), np.int64, count)
                  for name in ("start", "end", "offset")]
        held = np.fromiter(map(sizes.__getitem__, map(_BUFFER_ID, residencies)), np.int64,
                           count)
        return cls(column[0], column[1], column[2], column[2] + held, held)


@dataclass(frozen=True)
class ReplayInput:
    """A plan's actions sorted by op, as the replay reads them.

    - ``swap_ins[i]``: ``(buffer_id, low, high, nbytes, copy_us, trigger_op)`` of each
      swap-in triggered at op ``i``, in plan order; ``[low, high)`` are the bytes it lands
      in, ``copy_us`` its time on an engine;
    - ``due[i]``: ``(buffer_id, trigger_op)`` of each swap-in op ``i`` waits for;
    - ``recomputes[i]``: ``(buffer_id, duration_us)`` run before op ``i``, in plan order;
    - ``swap_outs[i]``: ``(buffer_id, residency, nbytes, copy_us, low, high)`` of each copy
      out after op ``i``, in plan order;
    - the residencies compute fills (those no swap-in enters), by start op: those starting
      at op ``i`` hold bytes ``[filled_lows[k], filled_highs[k])`` for ``k`` in
      ``range(filled_first[i], filled_first[i + 1])``;
    - ``widest_swap_out``: the most bytes one swap-out copies; ``shortest_copy_us`` the
      shortest copy time (0 when there is no copy); ``ops_without_duration`` how many ops
      took the cost model's default duration.
    """

    sizes: dict
    op_us: list
    residencies: tuple
    arrays: ResidencyArrays
    swap_ins: dict
    due: dict
    recomputes: dict
    swap_outs: dict
    filled_first: list
    filled_lows: list
    filled_highs: list
    widest_swap_out: int
    shortest_copy_us: float
    ops_without_duration: int


_BUFFER_ID = attrgetter("buffer_id")


def replay_input(trace, residencies: tuple[Residency, ...], actions,
                 cost: CostModel) -> ReplayInput:
    """Sort ``actions`` by op the way the event replay does (same lookups, same ties)."""
    sizes, op_us, ops_without_duration = _trace_facts(trace, cost)
    spans = _Spans(residencies, {action.buffer_id for action in actions})
    times: dict = {}  # (nbytes, direction, level) -> copy time

    def copy_us(nbytes, direction, level):
        key = (nbytes, direction, level)
        if key not in times:
            times[key] = cost.copy_us(nbytes, direction, level)
        return times[key]

    entered = {}
    swap_ins, due = defaultdict(list), defaultdict(list)
    recomputes, swap_outs = defaultdict(list), defaultdict(list)
    widest = 0
    for action in actions:
        b = action.buffer_id
        kind = type(action)
        if kind is SwapIn or (kind is not SwapOut and isinstance(action, SwapIn)):
            trigger = action.trigger_op
            r = spans.starting(b, trigger)
            nbytes = sizes[b]
            swap_ins[trigger].append((b, r.offset, r.offset + nbytes, nbytes,
                                      copy_us(nbytes, H2D, action.level), trigger))
            due[action.due_op].append((b, trigger))
            entered[(b, r.start)] = action
        elif kind is SwapOut or isinstance(action, SwapOut):
            r = spans.covering(b, action.after_op)
            if not action.drop:
                nbytes = sizes[b]
                swap_outs[action.after_op].append((b, r, nbytes,
                                                   copy_us(nbytes, D2H, action.level),
                                                   r.offset, r.offset + nbytes))
                widest = max(widest, nbytes)
        elif isinstance(action, RecomputeAction):
            recomputes[action.before_op].append((b, op_us[trace.buffer(b).recompute.op]))
            entered[(b, action.before_op)] = action
    arrays = ResidencyArrays.of(residencies, sizes)
    swapped_in = {key for key, action in entered.items() if isinstance(action, SwapIn)}
    filled = np.arange(len(residencies))
    if swapped_in:
        filled = filled[np.fromiter(((r.buffer_id, r.start) not in swapped_in
                                     for r in residencies), bool, len(residencies))]
    filled = filled[np.argsort(arrays.starts[filled], kind="stable")]
    first = np.searchsorted(arrays.starts[filled], np.arange(trace.num_ops + 1), "left")
    return ReplayInput(sizes, op_us, residencies, arrays, dict(swap_ins), dict(due),
                       dict(recomputes), dict(swap_outs), first.tolist(),
                       arrays.lows[filled].tolist(), arrays.highs[filled].tolist(), widest,
                       min(times.values(), default=0.0), ops_without_duration)


_TRACE_FACTS: dict = {}  # id(trace) -> (weak reference, sizes, ops without duration,
#                                        {default_op_us: op_us})


def _trace_facts(trace, cost: CostModel) -> tuple[dict, list, int]:
    """Buffer sizes by id, op durations and the number of ops without a duration of
    ``trace``, kept while the trace lives (a planner replays hundreds of plans of one
    trace; traces are immutable). Read only."""
    entry = _TRACE_FACTS.get(id(trace))
    if entry is None or entry[0]() is not trace:
        if len(_TRACE_FACTS) >= 8:
            _TRACE_FACTS.clear()
        entry = (weakref.ref(trace), {b.id: b.size for b in trace.buffers},
                 ops_without_duration(trace), {})
        _TRACE_FACTS[id(trace)] = entry
    op_us = entry[3].get(cost.default_op_us)
    if op_us is None:
        op_us = entry[3][cost.default_op_us] = cost.op_times(trace)
    return entry[1], op_us, entry[2]


_SHORT = 8  # a buffer with at most this many residencies is searched in plan order


class _Spans:
    """The residencies of the buffers some action names, looked up as the event replay does:
    the first residency (in plan order) of a buffer that starts at, or covers, an op."""

    def __init__(self, residencies, buffer_ids):
        self.by_buffer = defaultdict(list)
        for r in residencies:
            if r.buffer_id in buffer_ids:
                self.by_buffer[r.buffer_id].append(r)
        self.indexed = {}

    def _index(self, buffer_id):
        """For a buffer with many residencies: the first one starting at each op, and
        (when no two overlap, so that at most one covers an op) all sorted by start."""
        index = self.indexed.get(buffer_id)
        if index is None:
            spans = self.by_buffer[buffer_id]
            by_start = {}
            for r in spans:
                by_start.setdefault(r.start, r)
            ordered = sorted(spans, key=attrgetter("start"))
            disjoint = all(x.end <= y.start for x, y in itertools.pairwise(ordered))
            index = (by_start, [r.start for r in ordered] if disjoint else None, ordered)
            self.indexed[buffer_id] = index
        return index

    def starting(self, buffer_id, op):
        spans = self.by_buffer[buffer_id]
        if len(spans) > _SHORT:
            r = self._index(buffer_id)[0].get(op)
            if r is not None:
                return r
        else:
            for r in spans:
                if r.start == op:
                    return r
        raise StopIteration  # the event replay's ``next(...)`` fails the same way

    def covering(self, buffer_id, op):
        spans = self.by_buffer[buffer_id]
        if len(spans) > _SHORT and self._index(buffer_id)[1] is not None:
            _by_start, starts, ordered = self._index(buffer_id)
            k = bisect_right(starts, op) - 1
            if k >= 0 and op < ordered[k].end:
                return ordered[k]
            raise StopIteration
        for r in spans:
            if r.start <= op < r.end:
                return r
        raise StopIteration


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
    module docstring for the order kept."""
    heap: list = []
    push, pop, seq = heapq.heappush, heapq.heappop, itertools.count().__next__
    now = 0.0
    op_us, swap_ins, due, recomputes = data.op_us, data.swap_ins, data.due, data.recomputes
    swap_outs, widest = data.swap_outs, data.widest_swap_out
    filled_first, filled_lows, filled_highs = (data.filled_first, data.filled_lows,
                                               data.filled_highs)
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
    dispatch = start = begun = 0.0
    steps = ()
    while True:
        while stage != _IDLE:  # the compute stream runs until it waits
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
    starts, ends, lows, highs = arrays.starts, arrays.ends, arrays.lows, arrays.highs
    held = np.zeros(num_ops + 1, np.int64)
    np.add.at(held, starts, arrays.sizes)
    np.add.at(held, ends, -arrays.sizes)
    per_op = np.cumsum(held[:num_ops])
    held_after = timeline.held_after
    if held_after:
        op_starts = np.fromiter(map(_START, timeline.op_times), np.float64, num_ops)
        count = len(held_after)
        after = np.fromiter((r.end for r, _done in held_after), np.int64, count)
        done = np.fromiter((d for _r, d in held_after), np.float64, count)
        stops = np.searchsorted(op_starts, done, "left")  # ops [end, stop) start before
        late = np.flatnonzero(stops > after)
        if late.size:
            by_start = np.argsort(starts, kind="stable")
            prefix = np.searchsorted(starts[by_start], stops[late], "left").tolist()
        for k, q in enumerate(late.tolist()):
            r = held_after[q][0]
            first, stop = r.end, int(stops[q])
            size = data.sizes[r.buffer_id]
            low, high = r.offset, r.offset + size
            near = by_start[:prefix[k]]  # residencies starting before op ``stop``
            near = near[(ends[near] > first) & (lows[near] < high) & (low < highs[near])]
            window = per_op[first:stop]
            if not near.size:
                window += size
                continue
            covered = np.zeros(stop - first + 1, np.int64)
            np.add.at(covered, np.clip(starts[near] - first, 0, stop - first), 1)
            np.add.at(covered, ends[near].clip(max=stop) - first, -1)
            window[np.cumsum(covered[:-1]) == 0] += size
    return int(per_op.max())


_START = itemgetter(1)
