"""A swapping plan and its trace as NumPy columns, and the screens that read them.

The rules of :mod:`cupool.check.swapping` are written per residency, per action and per
buffer, in plain Python; on a plan with tens of thousands of residencies that loop is
the whole cost of validating. A *screen* evaluates a rule set on whole columns at once
and answers only "passes" or "may fail". Screens are sound: wherever the plain rules
would name a failure, the screen says "may fail" (it may also say so of a plan that
passes), and the plain rules then run and word the failure. A report is never made by a
screen, so it is the same report, word for word, that the plain rules alone give.

A trace's columns depend on the trace alone (it is frozen), and a planner validates many
plans for one trace: they are kept for the last few traces seen, by identity.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from itertools import chain, repeat
from operator import attrgetter

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Plan, RecomputeAction, SwapIn, SwapOut, Trace

_KEPT_TRACES = 4
_kept: list[tuple[weakref.ref, TraceColumns | None]] = []  # most recent last
_kept_lock = threading.Lock()


@dataclass(frozen=True)
class Uses:
    """Every buffer's uses in one column, buffer by buffer in trace order: buffer ``i``'s
    are ``flat[begin[i]:begin[i] + count[i]]``, ascending, so that ``key`` (``i * (num_ops
    + 1) + use``) is ascending over the whole column."""

    flat: np.ndarray
    key: np.ndarray
    count: np.ndarray
    begin: np.ndarray
    span: int

    def inside(self, buffer: np.ndarray, start: np.ndarray,
               end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For ops ``[start, end)`` of buffers ``buffer`` (positions in the trace): how many
        uses lie there, the first and the last (0 where none)."""
        low = np.searchsorted(self.key, buffer * self.span + start)
        high = np.searchsorted(self.key, buffer * self.span + end)
        count = high - low
        some = count > 0
        first, last = np.zeros_like(count), np.zeros_like(count)
        first[some], last[some] = self.flat[low[some]], self.flat[high[some] - 1]
        return count, first, last


@dataclass(frozen=True)
class TraceColumns:
    """The trace's buffers (in trace order) as columns. ``position`` maps a buffer id to
    its place in ``trace.buffers``; ``uses`` is ``None`` when some buffer's uses are not
    ascending ops of the trace (the trace's contract; the screens rely on it)."""

    num_ops: int
    ids: np.ndarray
    sorted_ids: np.ndarray
    by_id: np.ndarray  # trace positions in order of id
    size: np.ndarray
    start: np.ndarray
    end: np.ndarray
    persistent: np.ndarray
    recipe: np.ndarray  # it has a recompute recipe
    position: dict
    uses: Uses | None

    def positions(self, ids: np.ndarray) -> np.ndarray | None:
        """The trace positions of buffer ``ids``, or ``None`` if one is not in the trace."""
        slot = np.minimum(np.searchsorted(self.sorted_ids, ids), self.ids.size - 1)
        if not np.array_equal(self.sorted_ids[slot], ids):
            return None
        return self.by_id[slot]


@dataclass(frozen=True)
class ActionColumns:
    """The plan's actions as columns, in plan order. ``kind``: 0 a :class:`SwapOut`, 1 a
    :class:`SwapIn`, 2 a :class:`RecomputeAction` (exactly; anything else 3). ``op``: the
    op an action is keyed on (``after_op``, ``trigger_op``, ``before_op``); ``due``: a
    swap-in's ``due_op``; ``drop``: a swap-out's ``drop``; ``buffer``: its buffer's
    position in the trace."""

    kind: np.ndarray
    buffer: np.ndarray
    op: np.ndarray
    due: np.ndarray
    drop: np.ndarray


@dataclass(frozen=True)
class Columns:
    """The residencies of a plan (in plan order) as columns, with its actions' and its
    trace's; ``buffer`` maps each residency to its buffer's position in the trace."""

    trace: TraceColumns
    actions: ActionColumns | None  # None: an action the columns cannot hold
    buffer_id: np.ndarray
    buffer: np.ndarray
    start: np.ndarray
    end: np.ndarray
    offset: np.ndarray

    @property
    def num_ops(self) -> int:
        return self.trace.num_ops


def trace_columns(trace: Trace) -> TraceColumns | None:
    """The :class:`TraceColumns` of ``trace``, or ``None`` when its ids repeat, a number
    is not read as an int64 by NumPy, or a lifetime leaves ``[0, num_ops]`` (then the
    plain rules see the trace as it is)."""
    with _kept_lock:
        for at, (ref, kept) in enumerate(_kept):
            if ref() is trace:
                _kept.append(_kept.pop(at))
                return kept
    made = _trace_columns(trace)
    try:
        ref = weakref.ref(trace)
    except TypeError:  # not a Trace but something like one: nothing to keep it by
        return made
    with _kept_lock:
        _kept.append((ref, made))
        del _kept[:-_KEPT_TRACES]
    return made


def _int64(values) -> np.ndarray | None:
    """``values`` (a list) as an int64 column, or ``None`` if NumPy reads them otherwise
    (a float, a string, an int beyond int64). A bool is the int it equals, as it is in the
    plain rules' comparisons."""
    try:
        column = np.array(values)
    except (TypeError, ValueError, OverflowError):
        return None
    if column.ndim != 1 or not (column.size == 0 or column.dtype.kind in "ib"):
        return None  # a signed int or a bool: not a float, an object, an unsigned int
    return column.astype(np.int64)


def _trace_columns(trace):
    buffers = trace.buffers
    fields = [_int64(list(map(attrgetter(name), buffers))) for name in ("id", "size", "start",
                                                                        "end")]
    if not buffers or any(f is None for f in fields):
        return None
    ids, size, start, end = fields
    if np.abs(size).max() >= 2 ** 40:  # no sum of sizes or offsets leaves int64
        return None
    if start.min() < 0 or end.max() > trace.num_ops:  # ops index columns of num_ops + 1
        return None
    by_id = np.argsort(ids, kind="stable")
    sorted_ids = ids[by_id]
    if np.any(sorted_ids[1:] == sorted_ids[:-1]):
        return None
    return TraceColumns(
        num_ops=trace.num_ops, ids=ids, sorted_ids=sorted_ids, by_id=by_id, size=size,
        start=start, end=end,
        persistent=np.array([b.kind == PERSISTENT for b in buffers], dtype=bool),
        recipe=np.array([b.recompute is not None for b in buffers], dtype=bool),
        position={b.id: i for i, b in enumerate(buffers)}, uses=_uses(trace))


def _uses(trace):
    count = np.array([len(b.uses) for b in trace.buffers], dtype=np.int64)
    flat = _int64(list(chain.from_iterable(b.uses for b in trace.buffers)))
    if flat is None:
        return None
    begin = np.cumsum(count) - count
    span = trace.num_ops + 1
    falls = np.flatnonzero(flat[1:] < flat[:-1]) + 1  # where a use is below the one before
    if (flat.size and (flat.min() < 0 or flat.max() >= span)) \
            or not np.all(np.isin(falls, begin)):
        return None
    key = np.repeat(np.arange(count.size, dtype=np.int64), count) * span + flat
    return Uses(flat, key, count, begin, span)


def plan_columns(trace: Trace, plan: Plan) -> Columns | None:
    """The columns of ``plan`` and ``trace``, or ``None`` where the plain rules must see
    the plan as it is: the trace's columns are ``None``, a residency is of an unknown
    buffer, a number is not read as an int64, or an offset is not a plain ``int`` or
    beyond 2**40."""
    of_trace = trace_columns(trace)
    if of_trace is None:
        return None
    residencies = plan.residencies
    offsets = list(map(attrgetter("offset"), residencies))
    if set(map(type, offsets)) - {int}:
        return None
    fields = [_int64(list(map(attrgetter(name), residencies)))
              for name in ("buffer_id", "start", "end")] + [_int64(offsets)]
    if any(f is None for f in fields):
        return None
    buffer_id, start, end, offset = fields
    if offset.size and np.abs(offset).max() >= 2 ** 40:
        return None
    buffer = of_trace.positions(buffer_id)
    if buffer is None:
        return None
    return Columns(of_trace, _action_columns(of_trace, plan.actions), buffer_id, buffer,
                   start, end, offset)


def _action_columns(of_trace, actions):
    code = {SwapOut: 0, SwapIn: 1, RecomputeAction: 2}
    kind = np.array(list(map(code.get, map(type, actions), repeat(3))), dtype=np.int64)
    if np.any(kind == 3):
        return None
    ids = _int64(list(map(attrgetter("buffer_id"), actions)))
    if ids is None:
        return None
    buffer = of_trace.positions(ids)
    if buffer is None:
        return None
    op, due = np.zeros(kind.size, dtype=np.int64), np.zeros(kind.size, dtype=np.int64)
    drop = np.zeros(kind.size, dtype=bool)
    for value, name in enumerate(("after_op", "trigger_op", "before_op")):
        at = np.flatnonzero(kind == value)
        group = list(map(actions.__getitem__, at.tolist()))
        column = _int64(list(map(attrgetter(name), group)))
        if column is None:
            return None
        op[at] = column
        if value == 0:
            drop[at] = np.array(list(map(attrgetter("drop"), group)), dtype=bool)
        if value == 1:
            column = _int64(list(map(attrgetter("due_op"), group)))
            if column is None:
                return None
            due[at] = column
    return ActionColumns(kind, buffer, op, due, drop)


def residencies_pass(columns: Columns) -> bool:
    """Screen of rules [known], [offset], [lifetime], [placed] and [order] (see
    :mod:`cupool.check.swapping`): True when they all hold."""
    c, t = columns, columns.trace
    b = c.buffer
    temporary_recipe = ~t.persistent[b] & t.recipe[b]
    inside = (t.start[b] <= c.start) & (c.start < c.end) & (c.end <= t.end[b])
    remat = temporary_recipe & (t.end[b] <= c.start) & (c.start < c.end) \
        & (c.end <= c.num_ops)
    ephemeral = temporary_recipe & (c.start == c.end) & (t.start[b] < c.start) \
        & (c.start < c.num_ops)
    if not (c.actions is not None and np.all(c.offset >= 0)
            and np.all(inside | remat | ephemeral)):
        return False
    if np.bincount(b, minlength=t.size.size).min(initial=1) == 0:
        return False
    order = np.lexsort((c.start, b))
    same = b[order][1:] == b[order][:-1]
    before_start, before_end = c.start[order][:-1], c.end[order][:-1]
    after_start = c.start[order][1:]
    return not np.any(same & ((after_start < before_end) | (after_start == before_start)))


def sorted_spans(columns: Columns) -> tuple[np.ndarray, np.ndarray]:
    """The residency positions ordered by (buffer, start), and where each buffer's run
    begins in that order (``bounds[i]:bounds[i + 1]`` for buffer ``i``)."""
    order = np.lexsort((columns.start, columns.buffer))
    counts = np.bincount(columns.buffer, minlength=columns.trace.size.size)
    bounds = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    return order, bounds
