"""Rule 5 of :mod:`cupool.check.swapping`: bytes per step, arena, budget and address
overlap, on the finer clock of that module's docstring (each op's recomputes, then the op).

The residencies become :class:`~cupool.check.overlap.Occupancy` rows on that clock. With
the plan in :mod:`~cupool.check.columns` the rows are columns: the budget is a running
sum over steps, and the overlap sweep runs only where :func:`may_overlap` (a sound screen)
cannot rule a clash out. The sweep and the rows built one by one name every failure, so
the report is the one the plain rules give.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from cupool.check.columns import Columns
from cupool.check.overlap import Occupancy, first_overlap
from cupool.check.report import VALID, ValidationReport, failed
from cupool.core.vocabulary import Plan, RecomputeAction, Trace

_MAX_CELLS_PER_ROW = 64  # beyond this many (row, address slot) cells per row, just sweep


def check_memory(trace: Trace, plan: Plan, budget: int,
                 columns: Columns | None) -> ValidationReport:
    """Rule 5 for ``plan`` (whose residencies and data already passed rules 1-4)."""
    actions = None if columns is None else columns.actions
    recomputes = [] if actions is None else np.flatnonzero(actions.kind == 2).tolist()
    steps = defaultdict(list)  # op -> buffers recomputed before it, in plan order
    if actions is None:
        for action in plan.actions:
            if isinstance(action, RecomputeAction):
                steps[action.before_op].append(action.buffer_id)
    for position in recomputes:
        action = plan.actions[position]
        steps[action.before_op].append(action.buffer_id)
    made = np.array([len(steps.get(op, ())) for op in range(trace.num_ops + 1)],
                    dtype=np.int64)  # recomputes before each op
    first_step = np.arange(trace.num_ops + 1) + np.cumsum(made) - made
    # first_step[op]: the step of op's first recompute (or the op); at: the steps
    clock = _Clock(steps, first_step.tolist(), trace.num_ops + 1 + int(made.sum()))
    if actions is None:
        return _check_rows(plan, budget, clock, _rows(trace, plan, clock))
    low = columns.offset
    high = low + columns.trace.size[columns.buffer]
    start, end = _step_columns(trace, columns, first_step, clock, recomputes)
    resident = np.zeros(clock.at + 1, dtype=np.int64)
    np.add.at(resident, start, high - low)
    np.add.at(resident, end, low - high)
    top = int(high.max(initial=0))
    if (np.cumsum(resident[:clock.at]) > budget).any() or top > plan.arena_bytes \
            or plan.arena_bytes > budget or may_overlap(low, high, start, end):
        return _check_rows(plan, budget, clock, _rows(trace, plan, clock))
    return VALID


class _Clock:
    """The finer clock: ``steps[op]`` (the buffers recomputed before op, in plan order),
    ``first_step[op]`` (the step of op's first recompute, or of the op) and ``at`` (the
    number of steps)."""

    def __init__(self, steps, first_step, at):
        self.steps, self.first_step, self.at = steps, first_step, at

    def op_of(self, step):
        """The op whose recomputes or run ``step`` is (``first_step`` is sorted)."""
        return max(op for op in range(len(self.first_step)) if self.first_step[op] <= step)


def _rows(trace, plan, clock):
    """Each residency's :class:`Occupancy` on the finer clock, in plan order."""
    sizes = {b.id: b.size for b in trace.buffers}
    steps, first_step = clock.steps, clock.first_step
    rows = []
    for r in plan.residencies:
        low, high = r.offset, r.offset + sizes[r.buffer_id]
        recomputed = r.buffer_id in steps.get(r.start, ())
        made = steps[r.start].index(r.buffer_id) if recomputed else 0
        if r.start < r.end:
            rows.append(Occupancy(low, high, r.buffer_id, first_step[r.start] + made,
                                  first_step[r.end]))
            continue
        last = max([k for k, b in enumerate(steps[r.start]) if k > made
                    and r.buffer_id in trace.buffer(b).recompute.inputs], default=made)
        rows.append(Occupancy(low, high, r.buffer_id, first_step[r.start] + made,
                              first_step[r.start] + last + 1))
    return rows


def _step_columns(trace, columns, first_step, clock, recomputes):
    """The rows' first and end steps as columns: those of :func:`_rows`."""
    start = first_step[columns.start]
    end = first_step[columns.end]
    span = trace.num_ops + 1
    keys = columns.buffer * span + columns.start  # one per residency (rule [order])
    by_key = np.argsort(keys, kind="stable")
    made = {}  # residency -> its recompute's place among those before its op
    count = defaultdict(int)  # op -> recomputes met so far before it
    actions = columns.actions
    ops = actions.op[recomputes]
    query = actions.buffer[recomputes] * span + ops
    found = by_key[np.minimum(np.searchsorted(keys, query, sorter=by_key), keys.size - 1)]
    for at, hit, op in zip(found.tolist(), (keys[found] == query).tolist(), ops.tolist(),
                           strict=True):
        if hit:
            made.setdefault(at, count[op])  # the first, as list.index
        count[op] += 1
    for at, k in made.items():
        start[at] += k
    for at in np.flatnonzero(columns.start == columns.end).tolist():
        b, op = int(columns.buffer_id[at]), int(columns.start[at])
        own = made.get(at, 0)
        last = max([k for k, reader in enumerate(clock.steps[op]) if k > own
                    and b in trace.buffer(reader).recompute.inputs], default=own)
        end[at] = clock.first_step[op] + last + 1
    return start, end


def may_overlap(low, high, start, end) -> bool:
    """Sound screen for :func:`~cupool.check.overlap.first_overlap` on rows given as
    columns: False only when no two rows held during a common step (``start < end``)
    share a byte. Cut the address axis at every row's ``low`` and ``high``: two ranges
    share a byte exactly when they cover a common slot between two cuts. Within one slot,
    in order of ``start``, the rows are disjoint in time exactly when each ends by the next
    one's start. A held row of no bytes, or a layout whose cells would be too many, is
    left to the sweep (True)."""
    held = start < end
    low, high, start, end = low[held], high[held], start[held], end[held]
    if not low.size:
        return False
    if np.any(high <= low):
        return True
    by_start = np.argsort(start, kind="stable")
    low, high, start, end = low[by_start], high[by_start], start[by_start], end[by_start]
    cuts = np.unique(np.concatenate([low, high]))
    first, last = np.searchsorted(cuts, low), np.searchsorted(cuts, high)
    counts = last - first
    cells = int(counts.sum())
    if cells > _MAX_CELLS_PER_ROW * low.size:
        return True
    row = np.repeat(np.arange(low.size), counts)
    slot = np.arange(cells) - np.repeat(np.cumsum(counts) - counts - first, counts)
    if cuts.size <= 2 ** 16:
        slot = slot.astype(np.uint16)  # a stable sort of 16-bit keys is a radix sort
    in_slot = np.argsort(slot, kind="stable")  # by slot, then by start
    slot, row = slot[in_slot], row[in_slot]
    same = slot[1:] == slot[:-1]
    return bool(np.any(same & (end[row[:-1]] > start[row[1:]])))


def _check_rows(plan, budget, clock, rows):
    """Rule 5 on the rows, one by one: names the first failure."""
    at, first_step = clock.at, clock.first_step
    resident = [0] * (at + 1)
    top, top_id = 0, None
    for row in rows:
        resident[row.start] += row.high - row.low
        resident[row.end] -= row.high - row.low
        if row.high > top:
            top, top_id = row.high, row.buffer_id
    total = 0
    for step in range(at):
        total += resident[step]
        if total > budget:
            op = clock.op_of(step)
            holders = sorted(row.buffer_id for row in rows if row.start <= step < row.end)
            where = "" if step == first_step[op + 1] - 1 else \
                f" (before it, recompute {step - first_step[op]})"
            return failed("budget", f"op {op}{where}: resident bytes (={total}) exceed the "
                                    f"budget (={budget}); resident buffers {holders}", *holders)
    if top > plan.arena_bytes:
        return failed("arena", f"buffer {top_id} ends at byte {top}, beyond the plan's "
                               f"arena_bytes (={plan.arena_bytes})", top_id)
    if plan.arena_bytes > budget:
        return failed("capacity", f"arena_bytes (={plan.arena_bytes}) exceed the budget "
                                  f"(={budget})")
    overlap = first_overlap(rows)
    if overlap is not None:
        held, arriving = overlap.held, overlap.arriving
        op_of = clock.op_of
        return failed("overlap", f"op {op_of(overlap.op)}: buffer {held.buffer_id} (at "
                                 f"[{held.low}, {held.high}) from op {op_of(held.start)}) and "
                                 f"buffer {arriving.buffer_id} (at [{arriving.low}, "
                                 f"{arriving.high}) from op {op_of(arriving.start)}) share "
                                 f"bytes [{overlap.shared_low}, {overlap.shared_high})",
                      held.buffer_id, arriving.buffer_id)
    return VALID
