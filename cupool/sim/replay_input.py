"""What the flat replay (:mod:`cupool.sim.timeline`) reads: a plan's actions sorted by op.

The event replay looks each action's residency up by scanning the buffer's residencies
(``next(r for r in spans[b] if ...)``) and sorts actions into per-op lists in plan order;
:func:`replay_input` gives the same lists, as NumPy columns grouped by op (what the
compiled replay reads without a Python object per row). It looks residencies up by
NumPy columns too (the attributes read by ``_columns.c`` where built): a
residency's key is ``buffer_id * (num_ops + 1) + start``, a swap-in's residency the first
(in plan order) with its key, a swap-out's the one whose span holds its op. Where those
lookups cannot stand in for the scan (a key out of range, one buffer's residencies
overlapping in time, a lookup that finds nothing, a swap-in and a recompute entering the
same residency), the actions go through a loop that does the event replay's scans, so the
same plans give the same lists and the same plans fail the same way.
"""

from __future__ import annotations

import itertools
import math
import weakref
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from cupool.core.vocabulary import RecomputeAction, Residency, SwapIn, SwapOut
from cupool.sim.cost import D2H, H2D, CostModel, ops_without_duration

try:
    from cupool.sim import _columns
except ImportError:  # the optional C extension is not built: NumPy reads the columns
    _columns = None


@dataclass(frozen=True)
class BufferSizes:
    """Buffer sizes by id: ``by_id``, and the same as two ``int64`` columns sorted by id
    (``ids``, ``sizes``; None when a size is past 64 bits), to look many ids up at once."""

    by_id: dict
    ids: np.ndarray | None
    sizes: np.ndarray | None
    dense: bool = False  # ``ids`` are 0, 1, ..., so that id ``i``'s size is ``sizes[i]``

    @classmethod
    def of(cls, by_id: dict) -> BufferSizes:
        try:
            ids = np.array(list(by_id), np.int64)
            sizes = np.array(list(by_id.values()), np.int64)
        except (OverflowError, TypeError, ValueError):
            return cls(by_id, None, None)
        order = np.argsort(ids, kind="stable")
        ids = ids[order]
        return cls(by_id, ids, sizes[order],
                   bool(np.array_equal(ids, np.arange(len(ids), dtype=np.int64))))

    def each(self, ids: np.ndarray) -> np.ndarray:
        """The size of each buffer of ``ids`` (``by_id[id]``: a ``KeyError`` names an
        unknown one)."""
        if self.dense and len(ids) and ids.min() >= 0 and ids.max() < len(self.sizes):
            return self.sizes[ids]  # each id is its own row
        if self.ids is not None and len(self.ids):
            at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
            if np.array_equal(self.ids[at], ids):
                return self.sizes[at]
        return np.fromiter(map(self.by_id.__getitem__, ids.tolist()), np.int64, len(ids))


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
    def of(cls, residencies, sizes: dict | BufferSizes) -> ResidencyArrays:
        if not isinstance(sizes, BufferSizes):
            sizes = BufferSizes.of(sizes)
        ids, starts, ends, lows = int_columns(residencies, ("buffer_id", "start", "end",
                                                           "offset"))
        held = sizes.each(ids)
        return cls(ids, starts, ends, lows, lows + held, held)


def int_columns(objects, names: tuple[str, ...]) -> list[np.ndarray]:
    """Attribute ``names[k]`` of every object as an ``int64`` column, for each ``k``: what
    ``numpy.fromiter`` gives (compiled where built: ``_columns``)."""
    count = len(objects)
    if _columns is not None:
        block = _columns.int_columns(objects, names)
        if block is not None:  # None: a value only Python converts (or fails on) alike
            return list(np.frombuffer(block, np.int64).reshape(len(names), count))
    return [np.fromiter(map(attrgetter(name), objects), np.int64, count) for name in names]


_KINDS = (SwapIn, SwapOut, RecomputeAction)


def by_kind(actions) -> tuple[list, list, list] | None:
    """The swap-ins, swap-outs and recomputes of ``actions`` (of exactly those types; each
    list in plan order), or None when an action is of another type (compiled where built:
    ``_columns``)."""
    if _columns is not None:
        return _columns.by_type(actions, _KINDS)
    kinds = {kind: [] for kind in _KINDS}
    try:
        for action in actions:
            kinds[type(action)].append(action)
    except KeyError:
        return None
    return kinds[SwapIn], kinds[SwapOut], kinds[RecomputeAction]


@dataclass(frozen=True)
class SwapInRows:
    """The swap-ins triggered at some op of the iteration, by trigger op (plan order within
    an op): those of op ``i`` are rows ``first[i]:first[i + 1]``. Each lands in bytes
    ``[lows, highs)`` (``nbytes`` of them) and takes ``copy_us`` on an engine."""

    first: np.ndarray
    buffer_ids: np.ndarray
    lows: np.ndarray
    highs: np.ndarray
    nbytes: np.ndarray
    copy_us: np.ndarray
    triggers: np.ndarray


@dataclass(frozen=True)
class DueRows:
    """What each op waits for, by op: op ``i`` waits for the swap-ins named by
    ``(buffer_ids[k], triggers[k])`` for ``k`` in ``range(first[i], first[i + 1])``."""

    first: np.ndarray
    buffer_ids: np.ndarray
    triggers: np.ndarray


@dataclass(frozen=True)
class RecomputeRows:
    """The recomputes run before each op (plan order): before op ``i``, rows
    ``first[i]:first[i + 1]``, each re-running its buffer's producer for ``duration_us``."""

    first: np.ndarray
    buffer_ids: np.ndarray
    duration_us: np.ndarray


@dataclass(frozen=True)
class SwapOutRows:
    """The copies out (swap-outs that are not drops) issued after each op (plan order):
    after op ``i``, rows ``first[i]:first[i + 1]``. Each copies ``nbytes`` from bytes
    ``[lows, highs)`` of the residency it leaves (``residencies``: its index in
    :attr:`ReplayInput.residencies`) and takes ``copy_us`` on an engine."""

    first: np.ndarray
    buffer_ids: np.ndarray
    residencies: np.ndarray
    nbytes: np.ndarray
    copy_us: np.ndarray
    lows: np.ndarray
    highs: np.ndarray


@dataclass(frozen=True)
class FilledRows:
    """The residencies compute fills (those no swap-in enters), by start op: those starting
    at op ``i`` hold bytes ``[lows[k], highs[k])`` for ``k`` in
    ``range(first[i], first[i + 1])`` (plan order within an op)."""

    first: np.ndarray
    lows: np.ndarray
    highs: np.ndarray


@dataclass(frozen=True)
class ReplayInput:
    """A plan's actions sorted by op, as the replay reads them: NumPy columns (``int64``
    counts, bytes and ops, ``float64`` times), each kind of row grouped by op with a
    ``first`` column of ``num_ops + 1`` bounds. Rows at ops outside the iteration
    (``[0, num_ops)``) are left out: the replay never reaches them.

    ``op_us`` is each op's duration (``op_us_nonnegative``: every one ``>= 0``);
    ``host_ready`` when the host has enqueued each op (empty: the host is left out, see
    :class:`~cupool.sim.cost.CostModel` ``host_us_per_op``);
    ``widest_swap_out`` the most bytes one copy out copies; ``shortest_copy_us`` the
    shortest copy time (0 when there is no copy); ``ops_without_duration`` how many ops took
    the cost model's default duration; ``ideal_us`` ``math.fsum(op_us)`` (None: not
    added up yet).
    """

    sizes: dict
    op_us: list
    residencies: tuple
    arrays: ResidencyArrays
    swap_ins: SwapInRows
    due: DueRows
    recomputes: RecomputeRows
    swap_outs: SwapOutRows
    filled: FilledRows
    widest_swap_out: int
    shortest_copy_us: float
    ops_without_duration: int
    op_us_nonnegative: bool
    host_ready: tuple = ()
    ideal_us: float | None = None


def replay_input(trace, residencies: tuple[Residency, ...], actions,
                 cost: CostModel) -> ReplayInput:
    """Sort ``actions`` by op the way the event replay does (same lookups, same ties)."""
    facts = _trace_facts(trace)
    op_us, op_us_nonnegative, ideal = facts.op_us(trace, cost)
    recompute_ops, sizes = facts.recompute_ops, facts.sizes.by_id
    arrays = ResidencyArrays.of(residencies, facts.sizes)
    by_op = _by_op_columns(trace.num_ops, residencies, arrays, actions, cost)
    if by_op is None:
        by_op = _by_op_loop(trace.num_ops, residencies, actions, sizes, cost)
    n = trace.num_ops
    rows, first = _grouped(by_op.triggers, n)
    entering = by_op.entering[rows]
    swap_ins = SwapInRows(first, by_op.in_ids[rows], arrays.lows[entering],
                          arrays.highs[entering], arrays.sizes[entering], by_op.in_us[rows],
                          by_op.triggers[rows])
    rows, first = _grouped(by_op.dues, n)
    due = DueRows(first, by_op.in_ids[rows], by_op.triggers[rows])
    rows, first = _grouped(by_op.afters, n)
    leaving = by_op.leaving[rows]
    swap_outs = SwapOutRows(first, by_op.out_ids[rows], leaving, arrays.sizes[leaving],
                            by_op.out_us[rows], arrays.lows[leaving], arrays.highs[leaving])
    columns = _recompute_columns(by_op.recomputes, n)
    recompute_ids = columns[0].tolist() if columns else [a.buffer_id for a in by_op.recomputes]
    durations = [op_us[recompute_ops[b]] if b in recompute_ops
                 else op_us[trace.buffer(b).recompute.op] for b in recompute_ids]
    if columns is None:
        columns = (np.array(recompute_ids, np.int64),
                   np.array([a.before_op if a.before_op in range(n) else -1
                             for a in by_op.recomputes], np.int64))
    rows, first = _grouped(columns[1], n)
    recomputes = RecomputeRows(first, columns[0][rows], np.array(durations, np.float64)[rows])
    rows, first = _grouped(np.where(by_op.filled, arrays.starts, -1), n)
    filled = FilledRows(first, arrays.lows[rows], arrays.highs[rows])
    host_ready = cost.host_ready(n, actions)
    return ReplayInput(sizes, op_us, residencies, arrays, swap_ins, due, recomputes,
                       swap_outs, filled, by_op.widest_swap_out, by_op.shortest_copy_us,
                       facts.ops_without_duration, op_us_nonnegative, host_ready, ideal)


def _recompute_columns(recomputes: list, num_ops: int) -> tuple | None:
    """The buffer of each recompute and the op it runs before (-1 outside ``[0,
    num_ops)``), as ``int64`` columns read by ``_columns``; None where it is not built or
    a value is not a 64-bit int (Python reads them, converting or raising as it does)."""
    block = _columns.int_columns(recomputes, ("buffer_id", "before_op")) if _columns else None
    if block is None:
        return None
    ids, befores = np.frombuffer(block, np.int64).reshape(2, len(recomputes))
    return ids, np.where((befores >= 0) & (befores < num_ops), befores, -1)


def _grouped(ops: np.ndarray, num_ops: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows whose op is in ``[0, num_ops)``, ordered by op (stable: plan order within
    an op), and ``first``: op ``i``'s rows are ``rows[first[i]:first[i + 1]]`` (a counting
    sort where ``_columns`` is built, else :func:`_grouped_by_sorting`: the same rows)."""
    if _columns is not None:
        rows, first = _columns.grouped(np.ascontiguousarray(ops, np.int64), num_ops)
        return np.frombuffer(rows, np.int64), np.frombuffer(first, np.int64)
    return _grouped_by_sorting(ops, num_ops)


def _grouped_by_sorting(ops: np.ndarray, num_ops: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_grouped` by a stable ``argsort``."""
    order = np.argsort(ops, kind="stable")
    first = np.zeros(num_ops + 1, np.int64)  # the rows before op i's: those of ops [0, i)
    np.cumsum(np.bincount(ops[(ops >= 0) & (ops < num_ops)], minlength=num_ops),
              out=first[1:])
    below = int(np.count_nonzero(ops < 0))
    return order[below:below + int(first[-1])], first


@dataclass(frozen=True)
class _TraceFacts:
    """What every replay of one trace reads: buffer sizes, the number of ops without a
    duration, the producing op of each buffer with a recompute recipe, and per cost
    model default op duration: the ops' durations, whether each is ``>= 0`` and their sum
    (``math.fsum``)."""

    sizes: BufferSizes
    ops_without_duration: int
    recompute_ops: dict
    durations: dict

    def op_us(self, trace, cost: CostModel) -> tuple[list, bool, float]:
        found = self.durations.get(cost.default_op_us)
        if found is None:
            op_us = cost.op_times(trace)
            found = self.durations[cost.default_op_us] = (op_us, all(d >= 0 for d in op_us),
                                                          math.fsum(op_us))
        return found


_TRACE_FACTS: dict = {}  # id(trace) -> (weak reference, _TraceFacts)


def _trace_facts(trace) -> _TraceFacts:
    """The facts of ``trace``, kept while the trace lives (a planner replays hundreds of
    plans of one trace; traces are immutable). Read only."""
    entry = _TRACE_FACTS.get(id(trace))
    if entry is None or entry[0]() is not trace:
        if len(_TRACE_FACTS) >= 8:
            _TRACE_FACTS.clear()
        by_id = {b.id: b for b in trace.buffers}
        facts = _TraceFacts(BufferSizes.of({b.id: b.size for b in trace.buffers}),
                            ops_without_duration(trace),
                            {i: b.recompute.op for i, b in by_id.items()
                             if b.recompute is not None}, {})
        entry = _TRACE_FACTS[id(trace)] = (weakref.ref(trace), facts)
    return entry[1]


_SHORT = 8  # a buffer with at most this many residencies is searched in plan order


class _Spans:
    """The residencies of the buffers some action names, looked up as the event replay does:
    the first residency (in plan order) of a buffer that starts at, or covers, an op. Each
    lookup gives the residency's index in plan order."""

    def __init__(self, residencies, buffer_ids):
        self.residencies = residencies
        self.by_buffer = defaultdict(list)
        for k, r in enumerate(residencies):
            if r.buffer_id in buffer_ids:
                self.by_buffer[r.buffer_id].append(k)
        self.indexed = {}

    def _index(self, buffer_id):
        """For a buffer with many residencies: the first one starting at each op, and
        (when no two overlap, so that at most one covers an op) all sorted by start."""
        index = self.indexed.get(buffer_id)
        if index is None:
            residencies = self.residencies
            spans = self.by_buffer[buffer_id]
            by_start = {}
            for k in spans:
                by_start.setdefault(residencies[k].start, k)
            ordered = sorted(spans, key=lambda k: residencies[k].start)
            disjoint = all(residencies[x].end <= residencies[y].start
                           for x, y in itertools.pairwise(ordered))
            index = (by_start, [residencies[k].start for k in ordered] if disjoint else None,
                     ordered)
            self.indexed[buffer_id] = index
        return index

    def starting(self, buffer_id, op) -> int:
        spans = self.by_buffer[buffer_id]
        if len(spans) > _SHORT:
            k = self._index(buffer_id)[0].get(op)
            if k is not None:
                return k
        else:
            for k in spans:
                if self.residencies[k].start == op:
                    return k
        raise StopIteration  # the event replay's ``next(...)`` fails the same way

    def covering(self, buffer_id, op) -> int:
        spans = self.by_buffer[buffer_id]
        if len(spans) > _SHORT and self._index(buffer_id)[1] is not None:
            _by_start, starts, ordered = self._index(buffer_id)
            k = bisect_right(starts, op) - 1
            if k >= 0 and op < self.residencies[ordered[k]].end:
                return ordered[k]
            raise StopIteration
        for k in spans:
            r = self.residencies[k]
            if r.start <= op < r.end:
                return k
        raise StopIteration


@dataclass(frozen=True)
class _ByOp:
    """A plan's actions in plan order, each with the residency it enters or leaves (its
    index in plan order), as NumPy columns: the swap-ins (``in_ids``, ``triggers``,
    ``dues``, ``entering``, ``in_us``), the copies out (swap-outs that are not drops:
    ``out_ids``, ``afters``, ``leaving``, ``out_us``); the recomputes; ``filled``: which
    residencies compute fills (no swap-in enters them). Ops outside ``[0, num_ops)`` may
    read -1 (no row of the replay)."""

    in_ids: np.ndarray
    triggers: np.ndarray
    dues: np.ndarray
    entering: np.ndarray
    in_us: np.ndarray
    out_ids: np.ndarray
    afters: np.ndarray
    leaving: np.ndarray
    out_us: np.ndarray
    recomputes: list
    filled: np.ndarray
    widest_swap_out: int
    shortest_copy_us: float


def _by_op_loop(num_ops, residencies, actions, sizes, cost) -> _ByOp:
    """Any plan: each action's residency found by the event replay's scan."""
    spans = _Spans(residencies, {action.buffer_id for action in actions})
    times = _CopyTimes(cost)
    entered = {}
    ins, outs, recomputes = [], [], []
    widest = 0
    iteration = range(num_ops)  # ``in`` finds what a dict keyed by op finds
    for action in actions:
        b = action.buffer_id
        if isinstance(action, SwapIn):
            trigger = action.trigger_op
            k = spans.starting(b, trigger)
            nbytes = sizes[b]
            due = action.due_op
            ins.append((b, trigger, due if due in iteration else -1, k,
                        times.of(nbytes, H2D, action.level)))
            entered[(b, residencies[k].start)] = action
        elif isinstance(action, RecomputeAction):
            recomputes.append(action)
            entered[(b, action.before_op)] = action
        elif isinstance(action, SwapOut):
            k = spans.covering(b, action.after_op)
            if not action.drop:
                nbytes = sizes[b]
                after = action.after_op
                outs.append((b, after if after in iteration else -1, k,
                             times.of(nbytes, D2H, action.level)))
                widest = max(widest, nbytes)
    swapped_in = {key for key, action in entered.items() if isinstance(action, SwapIn)}
    filled = np.fromiter(((r.buffer_id, r.start) not in swapped_in for r in residencies),
                         bool, len(residencies))
    in_ids, triggers, dues, entering, in_us = _rows(ins, 5)
    out_ids, afters, leaving, out_us = _rows(outs, 4)
    return _ByOp(in_ids, triggers, dues, entering, in_us, out_ids, afters, leaving, out_us,
                 recomputes, filled, widest, times.shortest())


def _rows(rows, width):
    """Columns of ``rows`` (tuples of ints, a float last)."""
    columns = list(zip(*rows, strict=True)) or [()] * width
    return ([np.array(c, np.int64) for c in columns[:-1]]
            + [np.array(columns[-1], np.float64)])


def _by_op_columns(num_ops, residencies, arrays: ResidencyArrays, actions, cost):
    """The same as :func:`_by_op_loop` by NumPy lookups, or None where they cannot stand in
    for the scans (see the module docstring)."""
    kinds = by_kind(actions)
    if kinds is None:  # an action of another type
        return None
    ins, outs, recomputes = kinds
    width = num_ops + 1
    ids, starts, ends = arrays.buffer_ids, arrays.starts, arrays.ends
    in_ids, triggers, dues = int_columns(ins, ("buffer_id", "trigger_op", "due_op"))
    out_ids, afters, kept = _out_columns(outs)
    if not (_within((ids, in_ids, out_ids), (1 << 62) // width)
            and _within((starts, ends, triggers, afters), width)):
        return None
    if not len(ids):
        return None
    keys = ids * width + starts
    order = np.argsort(keys, kind="stable")  # equal keys stay in plan order
    sorted_keys = keys[order]
    sorted_ids = ids[order]
    same_buffer = sorted_ids[1:] == sorted_ids[:-1]
    if np.any(same_buffer & (ends[order][:-1] > starts[order][1:])):
        return None  # a buffer's residencies overlap: more than one may hold an op
    in_keys = in_ids * width + triggers
    at = np.searchsorted(sorted_keys, in_keys, "left")
    if np.any(at >= len(keys)) or np.any(sorted_keys[np.minimum(at, len(keys) - 1)] != in_keys):
        return None
    entering = order[at]
    if np.any(sorted_keys[1:] == sorted_keys[:-1]):  # a key twice: every one of them
        filled = ~np.isin(keys, in_keys)
    else:  # each key once: the residencies the swap-ins enter are those of their keys
        filled = np.ones(len(keys), dtype=bool)
        filled[entering] = False
    if recomputes and _swapped_in_recomputed(recomputes, width, in_keys, sorted_keys,
                                             filled[order]):
        return None
    at = np.searchsorted(sorted_keys, out_ids * width + afters, "right") - 1
    leaving = order[np.maximum(at, 0)]
    if np.any(at < 0) or np.any(ids[leaving] != out_ids) or np.any(afters >= ends[leaving]):
        return None
    times = _CopyTimes(cost)
    in_us = times.each(arrays.sizes[entering], H2D, ins)
    kept = _copied(outs) if kept is None else kept
    leaving = leaving[kept]
    nbytes = arrays.sizes[leaving]
    out_us = times.each(nbytes, D2H, outs, kept)
    dues = np.where((dues >= 0) & (dues < num_ops), dues, -1)
    return _ByOp(in_ids, triggers, dues, entering, in_us, out_ids[kept], afters[kept],
                 leaving, out_us, recomputes, filled, int(nbytes.max(initial=0)),
                 times.shortest())


def _within(columns, high) -> bool:
    """Whether every value of every column is in ``[0, high)``."""
    return all(not len(c) or (c.min() >= 0 and c.max() < high) for c in columns)


def _swapped_in_recomputed(recomputes, width, in_keys, sorted_keys, sorted_filled) -> bool:
    """Whether a recompute enters a residency a swap-in enters: a recompute's key
    ``buffer_id * width + before_op`` among ``in_keys`` (all of them keys of residencies,
    ``sorted_keys``; a residency's key is among them where it is not filled:
    ``sorted_filled``, in the order of ``sorted_keys``). Looked up in the sorted keys where
    ``_columns`` reads the recomputes as ints whose keys fit 63 bits, else by a set of
    Python ints."""
    block = _columns.int_columns(recomputes, ("buffer_id", "before_op")) if _columns else None
    if block is not None:
        ids, befores = np.frombuffer(block, np.int64).reshape(2, len(recomputes))
        limit = (1 << 62) // width
        if (np.all((-limit < ids) & (ids < limit))
                and np.all((befores > -(1 << 62)) & (befores < 1 << 62))):
            keys = ids * width + befores  # exact: each below 2 ** 63 in size
            at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
            return bool(np.any((sorted_keys[at] == keys) & ~sorted_filled[at]))
    recompute_keys = [a.buffer_id * width + a.before_op for a in recomputes]
    return not set(recompute_keys).isdisjoint(in_keys.tolist())


_LEVEL = attrgetter("level")


def _out_columns(outs) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Each swap-out's buffer and op as ``int64`` columns, and which copy (:func:`_copied`;
    read in the same pass by ``_columns`` where every drop is an int, else None)."""
    if _columns is not None:
        block = _columns.int_columns(outs, ("buffer_id", "after_op", "drop"))
        if block is not None:
            ids, afters, drops = np.frombuffer(block, np.int64).reshape(3, len(outs))
            return ids, afters, drops == 0
    out_ids, afters = int_columns(outs, ("buffer_id", "after_op"))
    return out_ids, afters, None


def _copied(outs) -> np.ndarray:
    """Which swap-outs copy (``not drop``), as a ``bool`` column."""
    if _columns is not None:
        block = _columns.int_columns(outs, ("drop",))
        if block is not None:  # every drop an int (a bool)
            return np.frombuffer(block, np.int64) == 0
    return np.fromiter((not a.drop for a in outs), bool, len(outs))


class _CopyTimes:
    """``cost.copy_us`` once per (nbytes, direction, level)."""

    def __init__(self, cost):
        self.cost, self.times = cost, {}

    def of(self, nbytes, direction, level):
        key = (nbytes, direction, level)
        if key not in self.times:
            self.times[key] = self.cost.copy_us(nbytes, direction, level)
        return self.times[key]

    def each(self, nbytes: np.ndarray, direction, actions: list,
             kept: np.ndarray | None = None) -> np.ndarray:
        """The copy time of each ``(nbytes[k], levels[k])``, as a ``float64`` column:
        ``levels`` those of ``actions``, or of those ``kept`` marks (one per row)."""
        common = _columns.same(actions, "level") if _columns is not None else None
        if common is not None:  # every action's level one object (the usual case)
            return self._one_level(nbytes, direction, *common)
        distinct = set(map(_LEVEL, actions))
        if len(distinct) == 1:  # one level (the usual case; every kept row's too)
            return self._one_level(nbytes, direction, *distinct)
        levels = list(map(_LEVEL, actions))
        if kept is not None:
            levels = list(itertools.compress(levels, kept.tolist()))
        distinct = set(levels)
        if len(distinct) == 1:
            return self._one_level(nbytes, direction, *distinct)
        keys = list(zip(nbytes.tolist(), levels, strict=True))
        times = {key: self.of(key[0], direction, key[1]) for key in dict.fromkeys(keys)}
        return np.array([times[key] for key in keys], np.float64)

    def _one_level(self, nbytes: np.ndarray, direction, level) -> np.ndarray:
        """Each row's copy time at ``level``: once per size."""
        unique = np.sort(nbytes, kind="stable")  # its distinct sizes (np.unique's, faster)
        unique = unique[np.append(True, unique[1:] != unique[:-1])] if len(unique) else unique
        times = [self.of(n, direction, level) for n in unique.tolist()]
        return np.array(times, np.float64)[np.searchsorted(unique, nbytes)]

    def shortest(self):
        return min(self.times.values(), default=0.0)
