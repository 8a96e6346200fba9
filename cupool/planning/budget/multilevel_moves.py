"""The moves of the multi-level search (:mod:`.multilevel`) on the mutable plan of
:mod:`.multilevel_state` (a :class:`~.multilevel_state.TierState`). Each move of
:class:`TierMoves` returns a changed copy of a state, or ``None`` when it does not apply or
does not fit::

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
again by the allocation rules (:meth:`~.multilevel_state.TierState.best_fit`, over the arrays of
:mod:`.span_table`), in start order.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from cupool.core.vocabulary import PAGEABLE, PINNED, RecomputeAction, SwapIn, SwapOut, Trace
from cupool.planning.budget.multilevel_state import TierState, naming, op_times


def _without(actions: list, gone) -> list:
    """``actions`` without those equal to one of ``gone`` (compared field by field only
    where the kind and buffer match)."""
    buffers = {g.buffer_id for g in gone}
    keys = {(type(g), g.buffer_id) for g in gone}
    rows = naming(actions, buffers)
    if rows is None:
        return [a for a in actions if a.buffer_id not in buffers
                or (type(a), a.buffer_id) not in keys or a not in gone]
    dropped = [k for k in rows if (type(actions[k]), actions[k].buffer_id) in keys
               and actions[k] in gone]
    kept, begin = [], 0
    for k in dropped:  # the runs between the dropped ones, copied as slices
        kept += actions[begin:k]
        begin = k + 1
    kept += actions[begin:]
    return kept


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
        for other_b in sorted(rows, key=new.listed().__getitem__):
            others, first = new.own(other_b), columns.row(other_b, 0)
            moving += [(others[row - first], new.sizes[other_b], row)
                       for row in rows[other_b]]
        moving.sort(key=lambda item: (item[0].start, -item[1]))
        # the others stay where they are (their copies hold the same numbers); each moved
        # one joins them once placed; the table holds those sharing an op with a moved one
        during = (min(s.start for s, _size, _row in moving),
                  max(s.end for s, _size, _row in moving))
        table = columns.table([row for _s, _size, row in moving], during)
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
        if any(isinstance(a, SwapOut) and prev.start <= a.after_op < prev.end
               for a in state.actions_of(b)):
            return None
        return self.replace_span(state, b, k, prev.start, state.spans[b][nxt].end, (action,))

    def recompute_to_swap(self, state: TierState, action: RecomputeAction,
                          report) -> TierState | None:
        b = action.buffer_id
        nxt = state.index_at(b, start=action.before_op)
        if not nxt:
            return None
        prev = state.spans[b][nxt - 1]
        if any(isinstance(a, (SwapOut, SwapIn)) for a in state.actions_of(b)):
            return None  # one kind of move per buffer keeps the pairing simple
        uses = [u for u in self.trace.buffer(b).uses if prev.start <= u < prev.end]
        after = max(uses) if uses else prev.end - 1
        if after >= prev.end:
            return None
        due = action.before_op
        size = state.sizes[b]
        # trigger: the latest op that leaves the copy time to land before ``due`` starts
        starts = op_times(report)[:, 1].tolist()
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
