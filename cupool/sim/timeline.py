"""The replay of :mod:`cupool.sim.simulator` without generators: one flat loop over plain tuples.

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
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from dataclasses import dataclass
from operator import attrgetter, itemgetter

import numpy as np

from cupool.core.vocabulary import RecomputeAction, Residency, SwapIn, SwapOut
from cupool.sim.cost import D2H, H2D, CostModel

URGENT = 0
NORMAL = 1

# heap entry kinds
_HAND_OVER = 0   # a copy's hand-over begins (its waits are registered, or it is queued)
_WAITED = 1      # every wait of a waiter completed: it resumes
_TAKEN = 2       # an idle engine takes a queued copy
_ENDED = 3       # a copy's transfer time is over
_COMPLETED = 4   # a copy's completion is processed (those waiting on it are told)
_COMPUTE = 5     # the compute stream's timeout (a recompute or an op) is over

_COMPUTE_WAITER = -1

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

    - ``swap_ins[i]``: ``(buffer_id, low, high, level, trigger_op)`` of each swap-in
      triggered at op ``i``, in plan order; ``[low, high)`` are the bytes it lands in;
    - ``due[i]``: ``(buffer_id, trigger_op)`` of each swap-in op ``i`` waits for;
    - ``recomputes[i]``: ``(buffer_id, duration_us)`` run before op ``i``, in plan order;
    - ``swap_outs[i]``: ``(buffer_id, residency, level)`` copied out after op ``i``;
    - the residencies compute fills (those no swap-in enters), by start op: those starting
      at op ``i`` hold bytes ``[filled_lows[k], filled_highs[k])`` for ``k`` in
      ``range(filled_first[i], filled_first[i + 1])``.
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


_BUFFER_ID = attrgetter("buffer_id")


def replay_input(trace, residencies: tuple[Residency, ...], actions,
                 cost: CostModel) -> ReplayInput:
    """Sort ``actions`` by op the way the event replay does (same lookups, same ties)."""
    sizes = {b.id: b.size for b in trace.buffers}
    op_us = cost.op_times(trace)
    acting = {action.buffer_id for action in actions}
    spans = defaultdict(list)
    for r in residencies:
        if r.buffer_id in acting:
            spans[r.buffer_id].append(r)
    entered = {}
    swap_ins, due = defaultdict(list), defaultdict(list)
    recomputes, swap_outs = defaultdict(list), defaultdict(list)
    by_id = None
    for action in actions:
        b = action.buffer_id
        if isinstance(action, SwapIn):
            trigger = action.trigger_op
            r = _first(spans[b], lambda r, t=trigger: r.start == t)
            swap_ins[trigger].append((b, r.offset, r.offset + sizes[b], action.level, trigger))
            due[action.due_op].append((b, trigger))
            entered[(b, r.start)] = action
        elif isinstance(action, RecomputeAction):
            if by_id is None:
                by_id = {x.id: x for x in trace.buffers}
            recomputes[action.before_op].append((b, op_us[by_id[b].recompute.op]))
            entered[(b, action.before_op)] = action
        elif isinstance(action, SwapOut):
            after = action.after_op
            r = _first(spans[b], lambda r, a=after: r.start <= a < r.end)
            if not action.drop:
                swap_outs[after].append((b, r, action.level))
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
                       arrays.lows[filled].tolist(), arrays.highs[filled].tolist())


def _first(items, accept):
    for item in items:
        if accept(item):
            return item
    raise StopIteration  # the event replay's ``next(...)`` fails the same way


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


def replay(data: ReplayInput, num_ops: int, cost: CostModel) -> Timeline:
    """Run one iteration of the machine; see the module docstring for the order kept."""
    heap: list = []
    push, pop, seq = heapq.heappush, heapq.heappop, itertools.count().__next__
    now = 0.0
    sizes, op_us = data.sizes, data.op_us
    swap_ins, due, recomputes = data.swap_ins, data.due, data.recomputes
    swap_outs = data.swap_outs
    filled_first, filled_lows, filled_highs = data.filled_first, data.filled_lows, \
        data.filled_highs
    engines = cost.copy_engines_per_direction
    idle = [engines, engines]          # idle engines per direction: 0 = D2H, 1 = H2D
    queued = ([], [])                  # per direction, copies handed over in order ...
    taken = [0, 0]                     # ... of which this many were taken by an engine
    names = (D2H, H2D)
    # per copy (index = copy id)
    c_buffer, c_direction, c_nbytes, c_us = [], [], [], []
    c_enqueued, c_started, c_waits = [], [], []
    c_done: list = []                  # completion time once processed, else None
    c_waiters: list = []               # waiters to tell at completion
    # per waiter (an all-of over copies): copies still to complete, and who resumes
    w_left: list = []
    w_target: list = []
    op_times, copies, recompute_records, recompute_us = [], [], [], []
    waited, held_after = [], []
    pending: list = []                 # [(low, high, copy)] D2H copies still reading bytes
    last_out: dict = {}
    landed: dict = {}

    def new_copy(direction, buffer_id, level, waits):
        nbytes = sizes[buffer_id]
        c_buffer.append(buffer_id)
        c_direction.append(direction)
        c_nbytes.append(nbytes)
        c_us.append(cost.copy_us(nbytes, names[direction], level))
        c_enqueued.append(0.0)
        c_started.append(0.0)
        c_waits.append(waits)
        c_done.append(None)
        c_waiters.append([])
        push(heap, (now, URGENT, seq(), _HAND_OVER, len(c_buffer) - 1))
        return len(c_buffer) - 1

    def new_waiter(waits, target):
        waiter = len(w_left)
        left = 0
        for c in waits:
            if c_done[c] is None:
                left += 1
                c_waiters[c].append(waiter)
        w_left.append(left)
        w_target.append(target)
        if left == 0:
            push(heap, (now, URGENT, seq(), _WAITED, waiter))

    def hand_over(c):
        direction = c_direction[c]
        c_enqueued[c] = now
        if idle[direction]:
            idle[direction] -= 1
            push(heap, (now, URGENT, seq(), _TAKEN, c))
        else:
            queued[direction].append(c)

    # the compute stream, resumable: at op ``i``, in ``stage``, at recompute ``j``
    i, j, stage = 0, 0, _DISPATCH
    dispatch = start = begun = 0.0
    steps = ()
    while True:
        while stage != _IDLE:  # the compute stream runs until it waits
            if stage == _DISPATCH:
                dispatch = now
                if pending:
                    pending = [p for p in pending if c_done[p[2]] is None]
                if i in swap_ins:
                    for b, low, high, level, trigger in swap_ins[i]:
                        waits = [c for lo, hi, c in pending if lo < high and low < hi]
                        own = last_out.get(b)
                        if own is not None and c_done[own] is None:
                            waits.append(own)
                        landed[(b, trigger)] = new_copy(1, b, level, waits)
                waits = [landed[key] for key in due[i]] if i in due else []
                if pending:
                    for k in range(filled_first[i], filled_first[i + 1]):
                        low, high = filled_lows[k], filled_highs[k]
                        waits += [c for lo, hi, c in pending if lo < high and low < hi]
                steps, j = recomputes.get(i, ()), 0
                if waits:
                    waits = [c for c in waits if c_done[c] is None]
                    if waits:
                        new_waiter(waits, _COMPUTE_WAITER)
                        stage = _IDLE
                        break
                stage = _NEXT_STEP
            elif stage == _WAITED_DONE:
                waited.append(now - dispatch)
                stage = _NEXT_STEP
            elif stage == _RECOMPUTED:
                recompute_records.append((steps[j][0], i, begun, now))
                recompute_us.append(steps[j][1])
                j += 1
                stage = _NEXT_STEP
            elif stage == _RAN:
                op_times.append((dispatch, start, now))
                for b, r, level in swap_outs.get(i, ()):
                    c = new_copy(0, b, level, ())
                    pending.append((r.offset, r.offset + sizes[b], c))
                    last_out[b] = c
                    held_after.append((r, c))
                i += 1
                stage = _DISPATCH if i < num_ops else _IDLE
                continue
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
        if kind == _COMPUTE:
            stage = subject
        elif kind == _HAND_OVER:
            waits = c_waits[subject]
            if waits:
                new_waiter(waits, subject)
            else:
                hand_over(subject)
        elif kind == _WAITED:
            target = w_target[subject]
            if target == _COMPUTE_WAITER:
                stage = _WAITED_DONE
            else:
                hand_over(target)
        elif kind == _TAKEN:
            c_started[subject] = now
            push(heap, (now + c_us[subject], NORMAL, seq(), _ENDED, subject))
        elif kind == _ENDED:
            direction = c_direction[subject]
            copies.append((c_buffer[subject], names[direction], c_nbytes[subject],
                           c_enqueued[subject], c_started[subject], now))
            push(heap, (now, NORMAL, seq(), _COMPLETED, subject))
            waiting = queued[direction]
            head = taken[direction]
            if head < len(waiting):
                taken[direction] = head + 1
                push(heap, (now, URGENT, seq(), _TAKEN, waiting[head]))
            else:
                idle[direction] += 1
        else:  # _COMPLETED
            c_done[subject] = now
            for waiter in c_waiters[subject]:
                w_left[waiter] -= 1
                if w_left[waiter] == 0:
                    push(heap, (now, URGENT, seq(), _WAITED, waiter))
    return Timeline(op_times, copies, recompute_records, recompute_us, waited,
                    [(r, c_done[c]) for r, c in held_after])


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
