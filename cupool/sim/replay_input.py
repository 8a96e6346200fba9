"""What the flat replay (:mod:`cupool.sim.timeline`) reads: a plan's actions sorted by op.

The event replay looks each action's residency up by scanning the buffer's residencies
(``next(r for r in spans[b] if ...)``) and sorts actions into per-op lists in plan order;
:func:`replay_input` gives the same lists. It looks residencies up by NumPy columns: a
residency's key is ``buffer_id * (num_ops + 1) + start``, a swap-in's residency the first
(in plan order) with its key, a swap-out's the one whose span holds its op. Where those
lookups cannot stand in for the scan (a key out of range, one buffer's residencies
overlapping in time, a lookup that finds nothing, a swap-in and a recompute entering the
same residency), the actions go through a loop that does the event replay's scans, so the
same plans give the same lists and the same plans fail the same way.
"""

from __future__ import annotations

import itertools
import weakref
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from cupool.core.vocabulary import RecomputeAction, Residency, SwapIn, SwapOut
from cupool.sim.cost import D2H, H2D, CostModel, ops_without_duration


@dataclass(frozen=True)
class ResidencyArrays:
    """The residencies of a plan as columns (NumPy ``int64``, plan order): ``buffer_ids``,
    ``starts``, ``ends``, ``lows`` (offsets), ``highs`` (offset + size) and ``sizes``."""

    buffer_ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    lows: np.ndarray
    highs: np.ndarray
    sizes: np.ndarray

    @classmethod
    def of(cls, residencies, sizes: dict) -> ResidencyArrays:
        count = len(residencies)
        ids, starts, ends, lows = (np.fromiter(map(attrgetter(name), residencies), np.int64,
                                               count)
                                   for name in ("buffer_id", "start", "end", "offset"))
        held = np.fromiter(map(sizes.__getitem__, ids.tolist()), np.int64, count)
        return cls(ids, starts, ends, lows, lows + held, held)


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


def replay_input(trace, residencies: tuple[Residency, ...], actions,
                 cost: CostModel) -> ReplayInput:
    """Sort ``actions`` by op the way the event replay does (same lookups, same ties)."""
    sizes, op_us, ops_without_duration = _trace_facts(trace, cost)
    arrays = ResidencyArrays.of(residencies, sizes)
    by_op = _by_op_columns(trace.num_ops, residencies, arrays, actions, cost)
    if by_op is None:
        by_op = _by_op_loop(residencies, actions, sizes, cost)
    recomputes = defaultdict(list)
    for action in by_op.recomputes:
        recomputes[action.before_op].append((action.buffer_id,
                                             op_us[trace.buffer(action.buffer_id).recompute.op]))
    filled = np.flatnonzero(by_op.filled)
    filled = filled[np.argsort(arrays.starts[filled], kind="stable")]
    first = np.searchsorted(arrays.starts[filled], np.arange(trace.num_ops + 1), "left")
    return ReplayInput(sizes, op_us, residencies, arrays, by_op.swap_ins, by_op.due,
                       dict(recomputes), by_op.swap_outs, first.tolist(),
                       arrays.lows[filled].tolist(), arrays.highs[filled].tolist(),
                       by_op.widest_swap_out, by_op.shortest_copy_us, ops_without_duration)


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
class _ByOp:
    """Actions sorted by op (the lists of :class:`ReplayInput`), the recomputes in plan
    order, and ``filled``: which residencies compute fills (no swap-in enters them)."""

    swap_ins: dict
    due: dict
    swap_outs: dict
    recomputes: list
    filled: np.ndarray
    widest_swap_out: int
    shortest_copy_us: float


def _by_op_loop(residencies, actions, sizes, cost) -> _ByOp:
    """Any plan: each action's residency found by the event replay's scan."""
    spans = _Spans(residencies, {action.buffer_id for action in actions})
    times = _CopyTimes(cost)
    entered = {}
    swap_ins, due, swap_outs = defaultdict(list), defaultdict(list), defaultdict(list)
    recomputes = []
    widest = 0
    for action in actions:
        b = action.buffer_id
        if isinstance(action, SwapIn):
            trigger = action.trigger_op
            r = spans.starting(b, trigger)
            nbytes = sizes[b]
            swap_ins[trigger].append((b, r.offset, r.offset + nbytes, nbytes,
                                      times.of(nbytes, H2D, action.level), trigger))
            due[action.due_op].append((b, trigger))
            entered[(b, r.start)] = action
        elif isinstance(action, RecomputeAction):
            recomputes.append(action)
            entered[(b, action.before_op)] = action
        elif isinstance(action, SwapOut):
            r = spans.covering(b, action.after_op)
            if not action.drop:
                nbytes = sizes[b]
                swap_outs[action.after_op].append((b, r, nbytes,
                                                   times.of(nbytes, D2H, action.level),
                                                   r.offset, r.offset + nbytes))
                widest = max(widest, nbytes)
    swapped_in = {key for key, action in entered.items() if isinstance(action, SwapIn)}
    filled = np.fromiter(((r.buffer_id, r.start) not in swapped_in for r in residencies),
                         bool, len(residencies))
    return _ByOp(dict(swap_ins), dict(due), dict(swap_outs), recomputes, filled, widest,
                 times.shortest())


def _by_op_columns(num_ops, residencies, arrays: ResidencyArrays, actions, cost):
    """The same as :func:`_by_op_loop` by NumPy lookups, or None where they cannot stand in
    for the scans (see the module docstring)."""
    if not set(map(type, actions)) <= {SwapIn, SwapOut, RecomputeAction}:
        return None
    ins = [a for a in actions if type(a) is SwapIn]
    outs = [a for a in actions if type(a) is SwapOut]
    recomputes = [a for a in actions if type(a) is RecomputeAction]
    width = num_ops + 1
    ids, starts, ends = arrays.buffer_ids, arrays.starts, arrays.ends
    column = _columns(ins, ("buffer_id", "trigger_op", "due_op"))
    in_ids, triggers, dues = column
    out_ids, afters = _columns(outs, ("buffer_id", "after_op"))
    every_id = np.concatenate([ids, in_ids, out_ids])
    every_op = np.concatenate([starts, ends, triggers, afters])
    if every_id.size and (every_id.min() < 0 or every_id.max() >= (1 << 62) // width):
        return None
    if every_op.size and (every_op.min() < 0 or every_op.max() > num_ops):
        return None
    if not len(ids):
        return None
    keys = ids * width + starts
    order = np.argsort(keys, kind="stable")  # equal keys stay in plan order
    sorted_keys = keys[order]
    same_buffer = ids[order][1:] == ids[order][:-1]
    if np.any(same_buffer & (ends[order][:-1] > starts[order][1:])):
        return None  # a buffer's residencies overlap: more than one may hold an op
    in_keys = in_ids * width + triggers
    at = np.searchsorted(sorted_keys, in_keys, "left")
    if np.any(at >= len(keys)) or np.any(sorted_keys[np.minimum(at, len(keys) - 1)] != in_keys):
        return None
    entering = order[at]
    if recomputes:
        recompute_keys = [a.buffer_id * width + a.before_op for a in recomputes]
        if not set(recompute_keys).isdisjoint(in_keys.tolist()):
            return None
    at = np.searchsorted(sorted_keys, out_ids * width + afters, "right") - 1
    leaving = order[np.maximum(at, 0)]
    if np.any(at < 0) or np.any(ids[leaving] != out_ids) or np.any(afters >= ends[leaving]):
        return None
    times = _CopyTimes(cost)
    swap_ins, due, swap_outs = defaultdict(list), defaultdict(list), defaultdict(list)
    nbytes = arrays.sizes[entering].tolist()
    lows = arrays.lows[entering].tolist()
    in_us = times.each(nbytes, H2D, [a.level for a in ins])
    for row in zip(in_ids.tolist(), lows, arrays.highs[entering].tolist(), nbytes, in_us,
                   triggers.tolist(), strict=True):
        swap_ins[row[5]].append(row)
    for b, trigger, due_op in zip(in_ids.tolist(), triggers.tolist(), dues.tolist(),
                                  strict=True):
        due[due_op].append((b, trigger))
    kept = [k for k, a in enumerate(outs) if not a.drop]
    leaving = leaving[kept]
    nbytes = arrays.sizes[leaving].tolist()
    out_us = times.each(nbytes, D2H, [outs[k].level for k in kept])
    for row in zip(out_ids[kept].tolist(), [residencies[k] for k in leaving.tolist()],
                   nbytes, out_us, arrays.lows[leaving].tolist(),
                   arrays.highs[leaving].tolist(), afters[kept].tolist(), strict=True):
        swap_outs[row[6]].append(row[:6])
    filled = ~np.isin(keys, in_keys)
    return _ByOp(dict(swap_ins), dict(due), dict(swap_outs), recomputes, filled,
                 max(nbytes, default=0), times.shortest())


def _columns(actions, names):
    return [np.fromiter(map(attrgetter(name), actions), np.int64, len(actions))
            for name in names]


class _CopyTimes:
    """``cost.copy_us`` once per (nbytes, direction, level)."""

    def __init__(self, cost):
        self.cost, self.times = cost, {}

    def of(self, nbytes, direction, level):
        key = (nbytes, direction, level)
        if key not in self.times:
            self.times[key] = self.cost.copy_us(nbytes, direction, level)
        return self.times[key]

    def each(self, nbytes, direction, levels):
        return [self.of(n, direction, level) for n, level in zip(nbytes, levels, strict=True)]

    def shortest(self):
        return min(self.times.values(), default=0.0)
