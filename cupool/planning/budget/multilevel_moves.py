"""The moves of the multi-level search (:mod:`.multilevel`) and the mutable plan they edit.

A :class:`TierState` is a plan taken apart: per buffer its residencies (:class:`Span`:
ops and offset, mutable) and the action list. Each move of :class:`TierMoves` returns a
changed copy of a state, or ``None`` when it does not apply or does not fit::

    cancel_swap        swapped buffer stays on the device through its gap
    cancel_recompute   recomputed buffer stays on the device through its gap
    recompute_to_swap  a recompute becomes a swap to pinned host memory
    swap_to_recompute  a swap becomes a recompute (no host copy at all)
    earlier_trigger    a swap-in that made its op wait is triggered earlier
    level              a swap moves between pinned and pageable host memory
    reoffset           a residency moves to the best-fit free offset
    overwrite          a residency takes the offset of one that ends where it begins

When a move changes when a buffer is resident and its offset range is not free over the
new ops, it and the residencies in its way that begin at or after the change are placed
again by the allocation rules (:meth:`TierState.best_fit`, over the arrays of
:mod:`.span_table`), in start order.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from cupool.core.vocabulary import (
    PAGEABLE,
    PINNED,
    Plan,
    RecomputeAction,
    Residency,
    SwapIn,
    SwapOut,
    Trace,
)
from cupool.planning.budget.engine.drops import mark_drops
from cupool.planning.budget.span_table import Residencies, SpanTable, order_sizes


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
        self._made: dict[int, _Made] = {}  # by buffer: its residencies, made by plan()
        self._order: list[int] | None = None  # the buffers of spans, sorted, made by plan()
        self._position: dict[int, int] = {}  # each buffer's index in _order
        self._order_sizes: tuple[list, np.ndarray] | None = None  # an order, its sizes
        # plan()'s residencies and arena bytes per buffer of _order (lists shared with
        # copies, never edited), and the buffers owned since they were made
        self._parts: tuple[list, list] | None = None
        self._stale: set[int] = set()
        self._live: np.ndarray | None = None  # live(), while no buffer was owned since
        self._live_base: np.ndarray | None = None  # the original's live() at the copy
        self._owned_ops: dict[int, list[tuple[int, int]]] = {}  # by buffer owned since

    def copy(self) -> TierState:
        other = object.__new__(TierState)
        other.trace, other.n, other.budget, other.sizes = (self.trace, self.n, self.budget,
                                                           self.sizes)
        other.spans = defaultdict(list, self.spans)
        other.actions = list(self.actions)
        other.template = self.template
        other._owned = set()
        other._made = dict(self._made)
        other._order, other._position = self._order, self._position
        other._order_sizes = self._order_sizes
        other._parts, other._stale = self._parts, set(self._stale)
        other._live, other._live_base, other._owned_ops = None, self.live(), {}
        self._owned = set()  # the lists are shared now: either state copies before editing
        return other

    def own(self, b: int) -> list[Span]:
        """Buffer ``b``'s spans, copied first if this state still shares them."""
        self._made.pop(b, None)
        self._stale.add(b)
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
            self._parts = (parts, arenas)
        elif self._stale:  # the buffers owned since: the others' residencies are as made
            parts, arenas = list(self._parts[0]), list(self._parts[1])
            for b in self._stale:
                made = self._residencies_of(b)
                i = self._position[b]
                parts[i], arenas[i] = made.residencies, made.arena_bytes
            self._parts = (parts, arenas)
        self._stale = set()
        parts, arenas = self._parts
        residencies = tuple(itertools.chain.from_iterable(parts))
        return replace(self.template, solver=solver, residencies=residencies,
                       actions=mark_drops(self.trace, residencies, self.actions),
                       arena_bytes=int(max(arenas, default=0)))

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
        """The residencies as columns, from those :meth:`plan` keeps."""
        order, parts = self._parts_now()
        position = (self._position if order is self._order
                    else {b: i for i, b in enumerate(order)})
        if self._order_sizes is None or self._order_sizes[0] is not order:
            self._order_sizes = (order, order_sizes(order, self.sizes))
        return Residencies.of(order, position, parts, self._order_sizes[1])

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
        parts = self._parts[0]
        if self._stale:
            parts = list(parts)
            for b in self._stale:
                parts[self._position[b]] = self._fresh(b)
        return self._order, parts

    def _fresh(self, b: int) -> tuple:
        return tuple(Residency(b, s.start, s.end, s.offset) for s in self.spans[b])

    def paired_swap_in(self, out: SwapOut) -> SwapIn | None:
        """The swap-in that reads what ``out`` wrote: the buffer's first swap-in triggered
        after it, else (across the iteration boundary) its earliest swap-in."""
        b = out.buffer_id
        ins = sorted((a for a in self.actions if a.buffer_id == b and isinstance(a, SwapIn)),
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


def _without(actions: list, gone) -> list:
    """``actions`` without those equal to one of ``gone`` (compared field by field only
    where the kind and buffer match)."""
    buffers = {g.buffer_id for g in gone}
    keys = {(type(g), g.buffer_id) for g in gone}
    return [a for a in actions if a.buffer_id not in buffers
            or (type(a), a.buffer_id) not in keys or a not in gone]


class SpanRef(NamedTuple):
    """Residency ``index`` of buffer ``buffer_id`` in a :class:`TierState`."""

    buffer_id: int
    index: int


class Move(NamedTuple):
    """A move of ``kind`` (see the module) on ``subject``: an action, or for ``reoffset``
    and ``overwrite`` a :class:`SpanRef`."""

    kind: str
    subject: SwapOut | SwapIn | RecomputeAction | SpanRef


class TierMoves:
    """The moves, for one trace and cost model."""

    def __init__(self, trace: Trace, cost) -> None:
        self.trace, self.cost = trace, cost

    def replace_span(self, state: TierState, b: int, index: int, new_start: int, new_end: int,
                     remove=(), add=()) -> TierState | None:
        """``state`` with residency ``index`` of ``b`` spanning ``[new_start, new_end)``
        (the following one merged into it when ``new_end`` reaches past it), actions in
        ``remove`` dropped and ``add`` appended; the residency keeps its offset when free,
        else it and the residencies in its way that begin at or after ``new_start`` are
        re-placed. ``None`` when the budget or the arena does not hold."""
        new = state.copy()
        spans = new.own(b)
        span = spans[index]
        merged = [s for s in spans if s is not span and s.start < new_end and new_start < s.end]
        for s in merged:
            spans.remove(s)
        span.start, span.end = new_start, new_end
        size = new.sizes[b]
        live = new.live()
        if live[new_start:new_end].max(initial=0) > new.budget:
            return None
        new.actions = _without(new.actions, remove) + list(add)
        columns = new.columns()
        own_row = new.row(columns, b, span)
        table = columns.table([own_row])
        if table.fits(span.offset, size, new_start, new_end, new.budget):
            return new
        # re-place: the moved residency and those in its way that begin at or after it,
        # buffer by buffer as ``spans`` lists them
        moving = [(span, size, own_row)]
        starts = columns.starts
        in_way = np.flatnonzero((starts >= new_start) & (starts < new_end)
                                & (new_start < columns.ends)
                                & (columns.lows < span.offset + size)
                                & (span.offset < columns.highs))
        rows: dict[int, list[int]] = {}
        for row, other_b in zip(in_way.tolist(), columns.buffer_ids[in_way].tolist(),
                                strict=True):
            if row != own_row:
                rows.setdefault(other_b, []).append(row)
        for other_b in list(new.spans) if rows else ():
            if other_b in rows:
                others, first = new.own(other_b), columns.row(other_b, 0)
                moving += [(others[row - first], new.sizes[other_b], row)
                           for row in rows[other_b]]
        moving.sort(key=lambda item: (item[0].start, -item[1]))
        # the others stay where they are (their copies hold the same numbers); each moved
        # one joins them once placed
        table = columns.table([row for _s, _size, row in moving])
        for s, s_size, _row in moving:
            offset = table.best_fit(s_size, s.start, s.end, new.budget)
            if offset is None:
                return None
            s.offset = offset
            table.add(s.start, s.end, offset, s_size)
        return new

    def cancel_swap(self, state: TierState, out: SwapOut) -> TierState | None:
        b = out.buffer_id
        swap_in = state.paired_swap_in(out)
        k = state.index_at(b, containing=out.after_op)
        if swap_in is None or k is None:
            return None
        nxt = state.index_at(b, start=swap_in.trigger_op)
        if nxt is None:
            return None
        if swap_in.trigger_op < out.after_op:  # across the iteration boundary
            if nxt != 0:
                return None
            new = self.replace_span(state, b, 0, 0, state.spans[b][0].end, (swap_in,))
            if new is None:
                return None
            last = len(new.spans[b]) - 1
            return self.replace_span(new, b, last, new.spans[b][last].start, new.n, (out,))
        if nxt != k + 1:
            return None
        end = state.spans[b][nxt].end
        return self.replace_span(state, b, k, state.spans[b][k].start, end, (out, swap_in))

    def cancel_recompute(self, state: TierState, action: RecomputeAction) -> TierState | None:
        b = action.buffer_id
        nxt = state.index_at(b, start=action.before_op)
        if not nxt:
            return None
        k = nxt - 1
        prev = state.spans[b][k]
        if any(isinstance(a, SwapOut) and a.buffer_id == b and prev.start <= a.after_op < prev.end
               for a in state.actions):
            return None
        return self.replace_span(state, b, k, prev.start, state.spans[b][nxt].end, (action,))

    def recompute_to_swap(self, state: TierState, action: RecomputeAction,
                          report) -> TierState | None:
        b = action.buffer_id
        nxt = state.index_at(b, start=action.before_op)
        if not nxt:
            return None
        prev = state.spans[b][nxt - 1]
        if any(isinstance(a, (SwapOut, SwapIn)) and a.buffer_id == b for a in state.actions):
            return None  # one kind of move per buffer keeps the pairing simple
        uses = [u for u in self.trace.buffer(b).uses if prev.start <= u < prev.end]
        after = max(uses) if uses else prev.end - 1
        if after >= prev.end:
            return None
        due = action.before_op
        size = state.sizes[b]
        # trigger: the latest op that leaves the copy time to land before ``due`` starts
        starts = [start for _dispatch, start, _end in report.op_times]
        need = self.cost.copy_us(size, "h2d")
        trigger = due
        while trigger - 1 >= prev.end and starts[due] - starts[trigger] < need:
            trigger -= 1
        out, swap_in = SwapOut(b, after), SwapIn(b, trigger, due)
        new = self.replace_span(state, b, nxt, trigger, state.spans[b][nxt].end, (action,))
        if new is None:
            return None
        new.actions.append(out)
        new.actions.append(swap_in)
        return new

    def swap_to_recompute(self, state: TierState, out: SwapOut) -> TierState | None:
        """Drop the host copy: re-run the producer before the use the swap-in served (the
        residency before the gap ends after its last use; the one after starts at the
        swap-in's due op)."""
        b = out.buffer_id
        swap_in = state.paired_swap_in(out)
        if (swap_in is None or swap_in.trigger_op < out.after_op
                or self.trace.buffer(b).recompute is None):
            return None
        k = state.index_at(b, containing=out.after_op)
        nxt = state.index_at(b, start=swap_in.trigger_op)
        if k is None or nxt != k + 1:
            return None
        new = state.copy()
        spans = new.own(b)
        uses = [u for u in self.trace.buffer(b).uses if spans[k].start <= u < spans[k].end]
        if uses:
            spans[k].end = max(uses) + 1
        spans[nxt].start = swap_in.due_op
        new.actions = _without(new.actions, (out, swap_in))
        new.actions.append(RecomputeAction(b, swap_in.due_op))
        return new

    def earlier_trigger(self, state: TierState, swap_in: SwapIn,
                        waited_ops: int) -> TierState | None:
        b = swap_in.buffer_id
        k = state.index_at(b, start=swap_in.trigger_op)
        if k is None:
            return None
        low = state.spans[b][k - 1].end if k > 0 else 0
        trigger = max(low, swap_in.trigger_op - max(1, waited_ops))
        if trigger >= swap_in.trigger_op:
            return None
        moved = SwapIn(b, trigger, swap_in.due_op, swap_in.level)
        new = self.replace_span(state, b, k, trigger, state.spans[b][k].end, (swap_in,))
        if new is None:
            return None
        new.actions.append(moved)
        return new

    def flip_level(self, state: TierState, out: SwapOut) -> TierState | None:
        swap_in = state.paired_swap_in(out)
        if swap_in is None or swap_in.level != out.level:
            return None
        level = PAGEABLE if out.level == PINNED else PINNED
        new = state.copy()
        new.actions = [replace(a, level=level) if a in (out, swap_in) else a
                       for a in new.actions]
        return new

    def reoffset(self, state: TierState, ref: SpanRef, overwrite: bool) -> TierState | None:
        b = ref.buffer_id
        new = state.copy()
        span = new.own(b)[ref.index]
        size = new.sizes[b]
        if overwrite:
            targets = sorted({s.offset for other, spans in new.spans.items() if other != b
                              for s in spans if s.end == span.start and new.sizes[other] >= size})
            offset = next((o for o in targets if o != span.offset
                           and new.fits_at(o, size, span.start, span.end, [(b, span)])), None)
        else:
            offset = new.best_fit(size, span.start, span.end, [(b, span)])
        if offset is None or offset == span.offset:
            return None
        span.offset = offset
        return new
