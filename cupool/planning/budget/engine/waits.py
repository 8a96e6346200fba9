"""Swaps whose copies are waited for: what a greedy planner falls back to where no swap
landing on time, and no recompute, can free the bytes an op over the budget is missing.

A *waited* swap takes the buffer off the device exactly over the ops of its idle gap that
are over the budget, whether its copies can keep up or not: the op that reuses its bytes
first waits for the copy out, its next use waits for the copy in::

    compute   |prev|op a|op b |op c|op d|.........|next|
    D2H            [copy out .......]                      issued after ``prev``
    H2D                               [copy in .........]  issued at op d
    resident  [....)                  [..................  hole [b, d): b and c over budget
    waits                   ^ b waits for the copy out     ^ ``next`` waits for the copy in

Both waits are added to the planner's timeline (:attr:`~.state.PlanState.extra`, at the
op that waits), so later decisions see the stalls; the copies join their queues due when
they land, so a later copy queued ahead of them counts the delay it adds as lateness.
A plan says nothing more than a swap's residencies and copies: the validator and the
runtime already let bytes being copied out be reused only once the copy has landed, and
a use wait for its copy in.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

from cupool.planning.budget.engine.copies import QueuedCopy
from cupool.planning.budget.engine.records import SwapWindow


class WaitedWindow(NamedTuple):
    """A waited swap of one gap (:func:`waited_window`): its window (bytes free during
    ``[resident_until, trigger)``, across the boundary ``[resident_until, n)`` and
    ``[0, trigger)``; ``due_us`` is when the copy in lands), the µs the op at
    ``resident_until`` waits for the copy out (``out_wait_us``, for a copy out that lands
    after the last op: what it adds to the iteration's tail) and the µs the next use waits
    for the copy in (``in_wait_us``), each counting the delay it pushes onto the copies
    queued behind it past their tolerance."""

    window: SwapWindow
    out_wait_us: float
    in_wait_us: float
    out_finish_us: float

    @property
    def wait_us(self) -> float:
        return self.out_wait_us + self.in_wait_us


def waited_window(state, buffer_id: int, prev_use: int, next_use: int,
                  wraps: bool) -> WaitedWindow | None:
    """The waited swap of the gap ``(prev_use, next_use)`` of ``buffer_id`` whose hole
    spans the gap's ops over the budget, from the first to the last (across the
    boundary: from the first after the last use, to the last before the first use);
    ``None`` when none of its ops is over the budget, or a planned recompute reads the
    buffer inside the hole."""
    over = state.over_budget_ops()
    n = state.n
    if wraps:
        lo = bisect.bisect_right(over, prev_use)
        until = over[lo] if lo < len(over) else n
        hi = bisect.bisect_left(over, next_use)
        trigger = over[hi - 1] + 1 if hi else 0
        if until >= n and trigger <= 0:
            return None
    else:
        lo = bisect.bisect_right(over, prev_use)
        hi = bisect.bisect_left(over, next_use)
        if hi <= lo:
            return None
        until, trigger = over[lo], over[hi - 1] + 1
    if state.hole_blocked(buffer_id, until, next_use):
        return None
    clean = state.clean_at(buffer_id, prev_use)
    out_us, in_us = state.copy_times(buffer_id)
    out_len = 0.0 if clean else out_us
    out_issue = float(state.end_us[prev_use])
    out_finish = out_issue if clean else state.d2h.finish_if_added(out_issue, out_len)
    if clean:
        out_wait = 0.0
    elif until < n:
        out_wait = state.d2h.lateness(out_issue, out_len, float(state.start_us[until]))
    else:  # copied out after the last op: the iteration's tail grows
        out_wait = state.d2h.end_growth(out_issue, out_len, float(state.end_us[-1]))
    in_issue = float(state.start_us[trigger])
    due = float(state.start_us[next_use])
    in_wait = state.h2d.lateness(in_issue, in_us, due)
    window = SwapWindow(until, trigger, out_issue, out_len, in_issue, in_us,
                        max(due, state.h2d.finish_if_added(in_issue, in_us)),
                        out_wait + in_wait)
    return WaitedWindow(window, out_wait, in_wait, out_finish)


def apply_waited(state, buffer_id: int, prev_use: int, next_use: int,
                 waited: WaitedWindow) -> None:
    """Take the gap off the device by ``waited`` (:func:`waited_window`): the swap's
    holes and copies as :meth:`~.state.PlanState.apply_swap` takes them, the copy out
    due when it lands, and both waits added to the timeline."""
    window = waited.window
    state.apply_swap(buffer_id, prev_use, next_use, window)
    until = window.resident_until
    if window.out_us > 0 and until < state.n:
        # apply_swap queued the copy out due at the reusing op's start: it is due when it
        # lands instead (that op waits for it)
        state.d2h.remove(QueuedCopy(window.out_issue_us, window.out_us,
                                    float(state.start_us[until])))
        state.d2h.add(window.out_issue_us, window.out_us,
                      max(waited.out_finish_us, float(state.start_us[until])))
    waits = ((min(until, state.n - 1), waited.out_wait_us),
             (next_use, waited.in_wait_us))
    if any(wait > 0 for _op, wait in waits):
        for op, wait in waits:
            state.extra[op] += wait
        state._times()


def waited_us(state) -> float:
    """µs of waiting for copies the planner added to its timeline (:func:`apply_waited`):
    what it added beyond the recomputes."""
    return max(0.0, float(state.extra.sum()) - state.recompute_us)
