"""The mutable plan the multi-level search (:mod:`.multilevel`) edits, and what reads it.

A :class:`TierState` is a plan taken apart: per buffer its residencies (:class:`Span`:
ops and offset, mutable) and the action list, with what the moves of
:mod:`.multilevel_moves` ask of it kept between copies: the bytes live at each op, the
residencies as arrays (:mod:`.span_table`) for the best-fit placement, the plan it makes.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from cupool.core.vocabulary import PINNED, Plan, Residency, SwapIn, SwapOut, Trace
from cupool.planning.budget.engine.drops import mark_drops
from cupool.planning.budget.span_table import Residencies, SpanTable, order_sizes
from cupool.sim.replay_input import int_columns


@dataclass(slots=True)
class Span:
    """A residency being edited: on the device during ops ``[start, end)`` at ``offset``.
    Spans are compared by identity where a search must skip the one it moves."""

    start: int
    end: int
    offset: int


class HostHold(NamedTuple):
    """``nbytes`` held in host memory from op ``from_op`` to op ``to_op`` (exclusive)."""

    from_op: int
    to_op: int
    nbytes: int


class _Made(NamedTuple):
    """A buffer's residencies as :meth:`TierState.plan` made them from ``spans`` (that
    list object), and the arena bytes they reach."""

    spans: list
    residencies: tuple
    arena_bytes: int


class _Parts(NamedTuple):
    """The residencies :meth:`TierState.plan` made, per buffer of its order (``parts``, and
    the arena bytes each reaches, ``arenas``) and all of them in plan order (``flat``; those
    of buffer ``order[i]`` from row ``first[i]``). Shared with copies, never edited."""

    parts: list
    arenas: np.ndarray
    flat: list
    first: np.ndarray


class TierState:
    """A mutable plan: ``spans[b]``, buffer ``b``'s residencies in op order, and
    ``actions`` in plan order. ``template`` is the plan it came from (its other fields).

    Copies share their buffers' span lists and :class:`Span` objects until one is edited:
    a move takes :meth:`own` of a buffer's spans before it changes any of them (after a
    copy, neither state owns a shared list). :meth:`plan` keeps each buffer's residencies
    while its span list is the same object (``own`` forgets them). :meth:`live` is kept
    until a buffer is owned; a copy's is its original's plus the change of the buffers it
    owned since (their ops as they were then are kept)."""

    def __init__(self, trace: Trace, plan: Plan):
        self.trace = trace
        self.n = trace.num_ops
        self.budget = plan.capacity_bytes
        self.sizes = {b.id: b.size for b in trace.buffers}
        self.spans: dict[int, list[Span]] = defaultdict(list)
        for r in plan.residencies:
            self.spans[r.buffer_id].append(Span(r.start, r.end, r.offset))
        for spans in self.spans.values():
            spans.sort(key=lambda s: (s.start, s.end, s.offset))
        self.actions = list(plan.actions)
        self.template = plan
        self._owned: set[int] = set(self.spans)
        # by buffer: its residencies, made by plan(); one dict for a state and its copies
        # (an entry holds for the span list it was made of: ``own`` drops it before an edit)
        self._made: dict[int, _Made] = {}
        self._order: list[int] | None = None  # the buffers of spans, sorted, made by plan()
        self._position: dict[int, int] = {}  # each buffer's index in _order
        self._order_sizes: tuple[list, np.ndarray] | None = None  # an order, its sizes
        # plan()'s residencies (shared with copies, never edited), and the buffers owned
        # since they were made
        self._parts: _Parts | None = None
        self._stale: set[int] = set()
        self._live: np.ndarray | None = None  # live(), while no buffer was owned since
        self._live_base: np.ndarray | None = None  # the original's live() at the copy
        self._owned_ops: dict[int, list[tuple[int, int]]] = {}  # by buffer owned since
        self._listed: dict[int, int] | None = None  # listed(), shared with copies
        # columns(): the order and columns made last (shared with copies), and the
        # buffers owned since (their rows are made again)
        self._columns: tuple[list[int], Residencies] | None = None
        self._columns_since: set[int] = set()

    def copy(self) -> TierState:
        other = object.__new__(TierState)
        other.trace, other.n, other.budget, other.sizes = (self.trace, self.n, self.budget,
                                                           self.sizes)
        other.spans = defaultdict(list, self.spans)
        other.actions = list(self.actions)
        other.template = self.template
        other._owned = set()
        other._made = self._made
        other._order, other._position = self._order, self._position
        other._order_sizes = self._order_sizes
        other._parts, other._stale = self._parts, set(self._stale)
        other._live, other._live_base, other._owned_ops = None, self.live(), {}
        other._listed = self._listed
        other._columns, other._columns_since = self._columns, set(self._columns_since)
        self._owned = set()  # the lists are shared now: either state copies before editing
        return other

    def own(self, b: int) -> list[Span]:
        """Buffer ``b``'s spans, copied first if this state still shares them."""
        self._made.pop(b, None)
        self._stale.add(b)
        self._columns_since.add(b)
        self._live = None
        if self._live_base is not None and b not in self._owned_ops:
            self._owned_ops[b] = [(s.start, s.end) for s in self.spans[b]]
        if b not in self._owned:
            self.spans[b] = [Span(s.start, s.end, s.offset) for s in self.spans[b]]
            self._owned.add(b)
        return self.spans[b]

    def _residencies_of(self, b: int) -> _Made:
        spans = self.spans[b]
        made = self._made.get(b)
        if made is None or made.spans is not spans:
            size = self.sizes[b]
            made = _Made(spans, tuple(Residency(b, s.start, s.end, s.offset) for s in spans),
                         max((s.offset + size for s in spans), default=0))
            self._made[b] = made
        return made

    def plan(self, solver: str = "tiers") -> Plan:
        spans, cached = self.spans, self._made
        # buffers are never removed from ``spans``: the same count means the same buffers
        if self._order is None or len(self._order) != len(spans):
            self._order = sorted(spans)
            self._position = {b: i for i, b in enumerate(self._order)}
            self._parts = None
        if self._parts is None:
            parts, arenas = [], []
            for b in self._order:
                made = cached.get(b)
                if made is None or made.spans is not spans[b]:
                    made = self._residencies_of(b)
                parts.append(made.residencies)
                arenas.append(made.arena_bytes)
            counts = np.fromiter(map(len, parts), np.int64, len(parts))
            self._parts = _Parts(parts, np.array(arenas, dtype=np.int64),
                                 list(itertools.chain.from_iterable(parts)),
                                 np.cumsum(counts) - counts)
        elif self._stale:  # the buffers owned since: the others' residencies are as made
            kept = self._parts
            parts, arenas, flat, first = (list(kept.parts), kept.arenas.copy(), list(kept.flat),
                                          kept.first)
            for b in self._stale:
                made = self._residencies_of(b)
                i = self._position[b]
                low, count = int(first[i]), len(parts[i])
                parts[i], arenas[i] = made.residencies, made.arena_bytes
                flat[low:low + count] = made.residencies
                if len(made.residencies) != count:  # the later buffers' rows move
                    first = first.copy() if first is kept.first else first
                    first[i + 1:] += len(made.residencies) - count
            self._parts = _Parts(parts, arenas, flat, first)
        self._stale = set()
        residencies = tuple(self._parts.flat)
        arenas = self._parts.arenas
        return replace(self.template, solver=solver, residencies=residencies,
                       actions=mark_drops(self.trace, residencies, self.actions),
                       arena_bytes=int(arenas.max()) if len(arenas) else 0)

    def live(self) -> np.ndarray:
        """Bytes resident at each op (read only: the state keeps it)."""
        if self._live is not None:
            return self._live
        if self._live_base is None:  # every residency
            changed = [(self.sizes[b], spans, ()) for b, spans in self.spans.items()]
        else:  # the buffers owned since the copy: in with their ops now, out with the old
            changed = [(self.sizes[b], self.spans[b], old)
                       for b, old in self._owned_ops.items()]
        starts, ends, sizes = [], [], []
        for size, spans, old in changed:
            for span in spans:
                starts.append(span.start)
                ends.append(span.end)
                sizes.append(size)
            for start, end in old:
                starts.append(start)
                ends.append(end)
                sizes.append(-size)
        delta = np.zeros(self.n + 1, dtype=np.int64)
        held = np.array(sizes, dtype=np.int64)
        np.add.at(delta, np.array(starts, dtype=np.int64), held)
        np.subtract.at(delta, np.array(ends, dtype=np.int64), held)
        live = np.cumsum(delta[:-1])
        if self._live_base is not None:
            live += self._live_base
        live.flags.writeable = False
        self._live = live
        return live

    def listed(self) -> dict[int, int]:
        """Each buffer's index in ``spans`` as it lists them (read only; shared with the
        copies while they list the same buffers: a buffer is never removed, and a new
        one is listed last)."""
        if self._listed is None or len(self._listed) != len(self.spans):
            self._listed = {b: i for i, b in enumerate(self.spans)}
        return self._listed

    def index_at(self, b: int, start: int | None = None,
                 containing: int | None = None) -> int | None:
        """Index of ``b``'s residency that begins at ``start`` or holds op ``containing``."""
        for k, s in enumerate(self.spans.get(b, ())):
            if start is not None and s.start == start:
                return k
            if containing is not None and s.start <= containing < s.end:
                return k
        return None

    # -- placement: best-fit smallest hole, at the edge next to the later-dying neighbour --
    def fits_at(self, offset: int, size: int, start: int, end: int,
                skip: list[tuple[int, Span]]) -> bool:
        """``[offset, offset + size)`` is within the budget and free during ops
        ``[start, end)`` of every residency but those of ``skip`` (buffer, span)."""
        return self.table(skip).fits(offset, size, start, end, self.budget)

    def best_fit(self, size: int, start: int, end: int,
                 skip: list[tuple[int, Span]]) -> int | None:
        """Best-fit smallest hole in ``[0, budget)`` free during ``[start, end)`` (of every
        residency but those of ``skip``); inside it, the edge next to the neighbour that
        dies later (``None`` if no hole fits)."""
        return self.table(skip).best_fit(size, start, end, self.budget)

    def table(self, skip: list[tuple[int, Span]]) -> SpanTable:
        """Every residency but those of ``skip`` (``(buffer, span)`` pairs), as arrays."""
        columns = self.columns()
        return columns.table([self.row(columns, b, span) for b, span in skip])

    def columns(self) -> Residencies:
        """The residencies as columns (read only): those made last (by this state or the
        one it was copied from) with the buffers owned since put in again, or made from
        those :meth:`plan` keeps."""
        made = self._columns
        if (made is not None and made[0] is self._order
                and len(self._order) == len(self.spans)):
            order, columns = made
            if self._columns_since:
                columns = self._patched(columns, self._columns_since)
        else:
            order, parts = self._parts_now()
            position = (self._position if order is self._order
                        else {b: i for i, b in enumerate(order)})
            if self._order_sizes is None or self._order_sizes[0] is not order:
                self._order_sizes = (order, order_sizes(order, self.sizes))
            columns = Residencies.of(order, position, parts, self._order_sizes[1])
        # the buffers this state owns may still be edited without notice: put in again
        self._columns, self._columns_since = (order, columns), set(self._owned)
        return columns

    def _patched(self, columns: Residencies, buffers: set[int]) -> Residencies:
        """``columns`` with the rows of ``buffers`` made again from their spans."""
        first, position = columns.first, columns.position
        total, last = len(columns.starts), len(first) - 1
        rows, values, resized = [], [], []
        for b in buffers:
            i = position[b]
            low = int(first[i])
            high = int(first[i + 1]) if i < last else total
            spans, size = self.spans[b], self.sizes[b]
            if len(spans) != high - low:
                resized.append((i, b, low, high))
                continue
            for k, span in enumerate(spans):
                rows.append(low + k)
                values.append((span.start, span.end, span.offset, span.offset + size))
        ids, starts, ends, lows, highs = (columns.buffer_ids, columns.starts.copy(),
                                          columns.ends.copy(), columns.lows.copy(),
                                          columns.highs.copy())
        if rows:
            block = np.array(values, dtype=np.int64)
            for column, k in ((starts, 0), (ends, 1), (lows, 2), (highs, 3)):
                column[rows] = block[:, k]
        for i, b, low, high in sorted(resized, reverse=True):  # later rows first
            spans, size = self.spans[b], self.sizes[b]
            block = np.array([(b, s.start, s.end, s.offset, s.offset + size) for s in spans],
                             dtype=np.int64).reshape(-1, 5)
            ids, starts, ends, lows, highs = (
                np.concatenate((column[:low], block[:, k], column[high:]))
                for k, column in enumerate((ids, starts, ends, lows, highs)))
            first = first.copy()
            first[i + 1:] += len(spans) - (high - low)
        return Residencies(position, first, ids, starts, ends, lows, highs)

    def row(self, columns: Residencies, b: int, span: Span) -> int:
        """The row of ``columns`` (:meth:`columns`) holding ``span`` of buffer ``b``."""
        return columns.row(b, next(k for k, s in enumerate(self.spans[b]) if s is span))

    def _parts_now(self) -> tuple[list[int], list[tuple]]:
        """The buffers in order and each one's residencies as its spans are now, kept
        nowhere (a move may still edit the spans it owns): :meth:`plan`'s with the buffers
        owned since made afresh."""
        if self._parts is None or self._order is None or len(self._order) != len(self.spans):
            order = sorted(self.spans)
            return order, [self._fresh(b) for b in order]
        parts = self._parts.parts
        if self._stale:
            parts = list(parts)
            for b in self._stale:
                parts[self._position[b]] = self._fresh(b)
        return self._order, parts

    def _fresh(self, b: int) -> tuple:
        return tuple(Residency(b, s.start, s.end, s.offset) for s in self.spans[b])

    def actions_of(self, b: int) -> list:
        """The actions naming buffer ``b``, in plan order."""
        rows = naming(self.actions, (b,))
        if rows is None:
            return [a for a in self.actions if a.buffer_id == b]
        return [a for a in map(self.actions.__getitem__, rows) if a.buffer_id == b]

    def paired_swap_in(self, out: SwapOut) -> SwapIn | None:
        """The swap-in that reads what ``out`` wrote: the buffer's first swap-in triggered
        after it, else (across the iteration boundary) its earliest swap-in."""
        b = out.buffer_id
        ins = sorted((a for a in self.actions_of(b) if isinstance(a, SwapIn)),
                     key=lambda a: a.trigger_op)
        later = [a for a in ins if a.trigger_op > out.after_op]
        return later[0] if later else (ins[0] if ins else None)

    def host_holds(self, level: str) -> list[HostHold]:
        """Host copies at ``level``: from the swap-out's op to the swap-in's due op; a wrap
        pair holds across the iteration boundary."""
        outs: dict[int, list] = defaultdict(list)
        ins: dict[int, list] = defaultdict(list)
        for a in self.actions:
            if isinstance(a, SwapOut) and a.level == level:
                outs[a.buffer_id].append(a.after_op)
            elif isinstance(a, SwapIn) and a.level == level:
                ins[a.buffer_id].append(a.due_op)
        out = []
        for b, after_ops in outs.items():
            dues = sorted(ins.get(b, ()))
            for after in sorted(after_ops):
                later = [d for d in dues if d > after]
                if later:
                    out.append(HostHold(after, later[0] + 1, self.sizes[b]))
                else:  # wraps: held to the end and from op 0 to the first swap-in
                    out.append(HostHold(after, self.n, self.sizes[b]))
                    if dues:
                        out.append(HostHold(0, dues[0] + 1, self.sizes[b]))
        return out

    def pinned_peak_bytes(self) -> int:
        """Most bytes held in pinned host memory at one op."""
        delta = np.zeros(self.n + 2, dtype=np.int64)
        for hold in self.host_holds(PINNED):
            delta[hold.from_op] += hold.nbytes
            delta[min(hold.to_op, self.n + 1)] -= hold.nbytes
        return int(np.cumsum(delta).max(initial=0))


def op_times(report) -> np.ndarray:
    """``report.op_times`` (a :class:`~cupool.sim.simulator.SimReport`'s or an
    :class:`~cupool.sim.simulator.IterationTimes`') as ``num_ops`` rows of ``float64``:
    dispatch, start, end."""
    times = report.op_times
    if isinstance(times, np.ndarray):
        return times
    return np.fromiter(itertools.chain.from_iterable(times), np.float64,
                       3 * len(times)).reshape(len(times), 3)


def naming(actions: list, buffer_ids) -> list[int] | None:
    """The indices of the ``actions`` that name one of ``buffer_ids`` (ints), in order,
    found on a column of their buffer ids (an action equal to another names the same
    buffer, so only these need comparing); ``None`` where the ids are no ``int64`` column."""
    if not all(type(b) is int and -(1 << 63) <= b < (1 << 63) for b in buffer_ids):
        return None
    try:
        ids = int_columns(actions, ("buffer_id",))[0]
    except (OverflowError, TypeError, ValueError):
        return None
    hits = functools.reduce(operator.or_, [ids == b for b in buffer_ids],
                            np.zeros(len(ids), dtype=bool))
    return np.flatnonzero(hits).tolist()
