"""``boundary``: persistent state that cannot stay on the device, taken off across the
iteration boundary (and between its uses) before the greedy plans the rest.

When the weights and optimizer state alone, with what an op itself uses, exceed the
budget at some op, no on-time swap of a persistent buffer frees enough: the greedy only
takes a gap whose copies land on time, and a large buffer used once per iteration (Adam
state between its updates) leaves no such window. This member takes those gaps anyway,
with the hole stretched over every op of the gap still over the budget, and lets the
copies that cannot land on time stall the step (the simulator charges the waiting)::

    op:          0   1   2   3          buffer w used at op 2 only; ops 0, 1 and 3 over
    w resident           [===)          SwapOut after op 2 (the copy out that ends
                                        iteration i), SwapIn at op 2 of iteration i + 1
    wrap hole    ====)       [====      [3, n) and [0, 2): off the device across the boundary

1. **Which persistent gaps.** Every idle gap of a persistent buffer (between two uses,
   and the wrap gap from its last use to its first of the next iteration), longest
   (in ops) first, then largest: a long idle window costs one copy out and one copy in
   for many op-bytes of relief. A gap is taken while some op it spans is over the
   target (``"working"``: persistent bytes plus what each op uses; ``"live"``: every
   byte the trace keeps resident).
2. **Its hole.** The copy out is issued after the previous use (none for clean data: a
   read-only buffer, or one swapped in and not written since, is dropped) and the bytes
   stay until it has landed, but never past the first op of the gap over the target; the
   copy in is triggered at the latest op whose copy still lands by the next use, but
   never before the last over-target op of the gap has run. For a wrap gap the copy in
   belongs to the next iteration, its copy out to the tail of this one.
3. What still does not fit (temporaries, and persistent gaps on time) is left to the
   cost-aware greedy (:mod:`.engine.greedy`), on top.
4. **Earlier where there is room.** With every decision made, each copy in of step 2
   (earliest due first) is triggered earlier, where the bytes fit the budget at every op
   it is brought forward over: at the latest trigger that lands on time, else as early as
   the room allows (less waiting), and each copy out keeps its bytes until it has landed
   where they fit (no waiting for it). Room is counted against
   :data:`~.stream.PREFETCH_FILL` of the budget, the rest left for packing offsets (or
   all of it: :class:`Variant`).

``auto`` runs it only when :func:`persistent_over` holds, so every trace whose
persistent state fits plans exactly as before.

**In the head** (:data:`HEAD_VARIANT`, which ``auto`` runs where persistent state fits).
Optimizer state is written once per step, by its update at the step's end, and idle
until the next: taken off across the boundary it pays a copy out at the end of the step
that nothing overlaps. Taken in the iteration's *head* instead, it stays on the device
across the boundary, is copied out after op 0 (behind the head copies out already
queued) while the forward pass computes, and comes back in a chain of copies in, each
landing by its first use and before the one taken before it starts::

    op:          0   1   ...              ...  u        m used (updated) at op u only
    m resident   [===)                    [=====]==)    SwapOut after op 0, SwapIn for u
    off                  ================               the step's peak, in between

Only dirty persistent state across the boundary is taken (in the ``live`` target's
order), and only where the hole covers an op over the target; the greedy plans the rest.

**Split** (a :class:`Variant` with ``split``, which ``auto`` runs where persistent state
must leave). The updates at the step's end write the layers' state in turn; while one
update waits for its state to come in, the state an earlier update wrote can be copied
out, into the room the next copy in needs. So the state of every update but the last
leaves across the boundary as in steps 1-2 (earliest update first: its copy out runs
first); the last update's state would leave only after the step's last op, a copy out
nothing overlaps, and is taken in the next iteration's head instead (copied back in no
earlier than the last op of the gap over the target, even when it then lands late)::

    op:           ... u1   u2   u3 | 0  1  ...     u1..u3: the updates of layers 1..3
    state of 1    ==]  out ~~~~~~~~|~~~~~~~~~~      (off across the boundary)
    state of 2      in ==] out ~~~~|~~~~~~~~~~
    state of 3          in ===]====|===] out        (in the head)

Which of the copies in waits for which copy out is then for the offline feedback to
order (:mod:`.reslot`): each plan this variant makes has its late swap-ins re-placed
(:func:`~.feedback.refine_triggers` with ``reslot_only``) before ``auto`` compares it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.planning.budget.engine.copies import QueuedCopy
from cupool.planning.budget.engine.firstfit import place_pairs_first_fit
from cupool.planning.budget.engine.greedy import (
    FullestOp,
    GreedyOptions,
    candidate_gaps,
    cost_pass,
    fullest_op,
)
from cupool.planning.budget.engine.placement import (
    Decision,
    OffsetCache,
    place_schedule,
)
from cupool.planning.budget.engine.records import SwapWindow
from cupool.planning.budget.engine.relief import persistent_floor
from cupool.planning.budget.engine.residency import (
    HEAD_OUT_OP,
    ResidencyInterval,
    residency_intervals,
)
from cupool.planning.budget.engine.schedule import SWAP, Gap, IdleGap, Schedule, trace_index
from cupool.planning.budget.engine.snapshot import copy_state
from cupool.planning.budget.engine.state import PlanState
from cupool.planning.budget.feedback import refine_triggers
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.result import BudgetResult
from cupool.planning.budget.stream import PREFETCH_FILL

TARGETS = ("working", "live")
"""What the persistent gaps are taken against (module docstring, step 1)."""


class Variant(NamedTuple):
    """One way to run the member: the ``target`` (:data:`TARGETS`); whether the bytes
    are released ``eager`` ly, right after the previous use (the next op waits for the
    copy out; residencies then end at uses, which packs into offsets more often), or once
    the copy out has landed; the ``order`` gaps are taken in (:data:`ORDERS`, among gaps
    as long: Adam's moments, one pair per layer, each used once per step, are all as
    long): which state leaves the device decides which copies crowd the last ops, and
    no order wins everywhere; the share of the budget step 4 ``fill`` s (more room for
    copies brought forward, less slack for packing offsets: when they do not pack, the
    member plans with a smaller budget, as for any schedule); whether the dirty state
    across the boundary is all taken in the ``head`` (:data:`HEAD_VARIANT`), or ``split``
    (the last update's in the head, the earlier ones' across the boundary: module
    docstring)."""

    target: str = "working"
    eager: bool = False
    order: str = "largest"
    fill: float = PREFETCH_FILL
    head: bool = False
    split: bool = False

    @property
    def name(self) -> str:
        extra = (", eager release" if self.eager else "") + (
            f", {self.order} first" if self.order != "largest" else "") + (
            f", fill {self.fill:.0%}" if self.fill != PREFETCH_FILL else "") + (
            ", in the head" if self.head else "") + (
            ", last update in the head" if self.split else "")
        return f"boundary(target {self.target}{extra})"


ORDERS = {
    "largest": lambda gap, size: (-size, 0, gap),
    "latest use": lambda gap, size: (-size, -gap.prev_use, gap),
    "earliest use": lambda gap, size: (gap.prev_use, -size, gap),
}
"""Orders of the gaps as long as each other (module docstring, step 1): the largest
first, ties by buffer, or by the latest previous use (the state the last ops update
leaves the device first, whose copies out and in then meet fewest others in those ops),
or the earliest previous use first (the state updated first leaves first: its copy out
runs while the later updates wait for their state to come in)."""


VARIANTS = (Variant("working"), Variant("live"), Variant("working", eager=True),
            Variant("live", eager=True), Variant("working", order="latest use", fill=1.0),
            Variant("working", order="earliest use", fill=0.95, split=True))
"""The variants ``auto`` runs when persistent state must leave the device
(:func:`persistent_over`), in the order that breaks ties."""

FOLLOWS = {VARIANTS[5]: VARIANTS[0]}
"""Variants whose greedy often starts where another's did, each with that other: where
the state updated first is also the largest (an LSTM's layers), the split variant takes
the persistent gaps the first variant takes, so its greedy continues from a copy of that
variant's (:class:`SharedWork`), which only a variant planned in the same process can
do. ``auto`` plans the two in one worker process (:mod:`.parallel`)."""

HEAD_VARIANT = Variant("live", head=True)
"""The variant ``auto`` runs when persistent state fits but the step does not: the state
idle across the boundary (optimizer state between its updates) copied out in the
iteration's head, back in a chain of copies that ends by its updates
(:func:`head_window`), the rest left to the greedy."""


def head_candidates(trace: Trace) -> bool:
    """True when some persistent buffer the step writes (its host copy goes stale: not
    read-only) is first used after op ``HEAD_OUT_OP + 1``: it could be off the device in
    the iteration's head (:attr:`~.engine.schedule.Gap.head`)."""
    return any(b.kind == PERSISTENT and b.uses and not b.read_only
               and min(b.uses) > HEAD_OUT_OP + 1 for b in trace.buffers)


def persistent_over(trace: Trace, budget_bytes: int) -> bool:
    """True when, at some op, the persistent bytes plus the temporaries that op uses do
    not fit ``budget_bytes``: some persistent buffer must leave the device."""
    if trace.num_ops == 0 or not any(b.kind == PERSISTENT for b in trace.buffers):
        return False
    return int(persistent_floor(trace).max()) > budget_bytes


def _idle_count(n: int, gap: IdleGap) -> int:
    """How many ops a gap spans (a wrap gap: the tail and the head)."""
    if gap.wraps:
        return max(0, n - gap.prev_use - 1) + max(0, gap.next_use)
    return max(0, gap.next_use - gap.prev_use - 1)


def _ops_over(measure: np.ndarray, budget: int, n: int, gap: IdleGap) -> list[int]:
    """The ops a gap spans where ``measure`` exceeds ``budget``, in the order they run (a
    wrap gap: the tail, then the head)."""
    start = gap.prev_use + 1
    if gap.wraps:
        tail = np.flatnonzero(measure[start:n] > budget) + start
        return tail.tolist() + np.flatnonzero(measure[:max(0, gap.next_use)] > budget).tolist()
    return (np.flatnonzero(measure[start:gap.next_use] > budget) + start).tolist()


def stretched_window(state: PlanState, gap: IdleGap, over: list[int],
                     eager: bool = False) -> SwapWindow:
    """The swap of ``gap`` whose hole covers every op of ``over`` (ops the gap spans, in
    the order they run), late where it must be (module docstring, step 2); with
    ``eager`` the bytes are released right after the previous use (the next op waits for
    the copy out)."""
    n = state.n
    buffer_id, prev_use, next_use = gap
    size = state.trace.buffer(buffer_id).size
    clean = state.clean_at(buffer_id, prev_use)
    out_len = 0.0 if clean else state.cost.copy_us(size, "d2h")
    in_len = state.cost.copy_us(size, "h2d")
    out_issue = float(state.end_us[prev_use])
    out_done = out_issue if clean else state.d2h.finish_if_added(out_issue, out_len)
    until = prev_use + 1 if eager else min(state.op_at_or_after(out_done, prev_use + 1), n)
    tail_over = [k for k in over if k > prev_use]
    if tail_over:
        until = min(until, tail_over[0])
    head_over = [k for k in over if k < next_use] if gap.wraps else over
    low = 0 if gap.wraps else until
    need = head_over[-1] + 1 if head_over else low
    due = float(state.start_us[next_use])
    trigger = need
    for t in range(next_use, need - 1, -1):  # the latest trigger whose copy lands on time
        if state.h2d.finish_if_added(float(state.start_us[t]), in_len) <= due + 1e-9:
            trigger = t
            break
    issue = float(state.start_us[trigger])
    # a late copy joins its queue due when it lands: later decisions plan around the
    # waiting it costs instead of finding every copy ahead of it late
    landed = max(due, state.h2d.finish_if_added(issue, in_len))
    return SwapWindow(until, trigger, out_issue, out_len, issue, in_len, landed,
                      state.h2d.lateness(issue, in_len, due))


def head_window(state: PlanState, gap: IdleGap, over: list[int],
                land_by_us: float = math.inf, late: bool = False) -> SwapWindow | None:
    """The swap of a wrap gap in the iteration's head (:attr:`~.engine.schedule.Gap.head`):
    copied out after op 0, behind the copies out already queued, its bytes released once
    that copy has landed; copied in at the latest trigger whose copy lands by its first
    use and by ``land_by_us`` (the head swaps taken before it come back after it: their
    copies in queue behind this one). ``None`` when that leaves no op of ``over`` (ops
    over the target the gap spans) off the device. With ``late``, the copy in is never
    triggered before the last op of ``over`` the hole can reach has run, even when it
    then lands late (as :func:`stretched_window` does)."""
    n = state.n
    buffer_id, _prev_use, next_use = gap
    size = state.sizes[buffer_id]
    out_len = state.cost.copy_us(size, "d2h")
    in_len = state.cost.copy_us(size, "h2d")
    out_issue = float(state.end_us[HEAD_OUT_OP])
    out_done = state.d2h.finish_if_added(out_issue, out_len)
    until = min(state.op_at_or_after(out_done, HEAD_OUT_OP + 1), n)
    if until >= next_use:
        return None
    due = float(state.start_us[next_use])
    deadline = min(due, land_by_us)
    low = until
    if late:
        inside = [k for k in over if until <= k < next_use]
        if not inside:
            return None
        low = inside[-1] + 1
    trigger = low
    for t in range(next_use, low - 1, -1):  # the latest trigger whose copy lands on time
        if state.h2d.finish_if_added(float(state.start_us[t]), in_len) <= deadline + 1e-9:
            trigger = t
            break
    if not any(until <= k < trigger for k in over):
        return None
    issue = float(state.start_us[trigger])
    landed = max(due, state.h2d.finish_if_added(issue, in_len))
    return SwapWindow(until, trigger, out_issue, out_len, issue, in_len, landed,
                      state.h2d.lateness(issue, in_len, due))


def _settle_copy_out(state: PlanState, window: SwapWindow) -> None:
    """Re-queue a copy out that :meth:`~.engine.state.PlanState.apply_swap` queued due
    before it lands as due when it lands (see :func:`stretched_window`)."""
    if window.out_us <= 0 or window.resident_until >= state.n:
        return
    due = float(state.start_us[window.resident_until])
    state.d2h.remove(QueuedCopy(window.out_issue_us, window.out_us, due))
    landed = state.d2h.finish_if_added(window.out_issue_us, window.out_us)
    state.d2h.add(window.out_issue_us, window.out_us, max(due, landed))


def offload_persistent(state: PlanState, target: str = "working", eager: bool = False,
                       order: str = "largest", head: bool = False, split: bool = False,
                       applied: list | None = None) -> int:
    """Take persistent gaps off the device until no op is over ``target``
    (:data:`TARGETS`; module docstring, steps 1-2), released ``eager`` ly or once the copy
    out has landed (:func:`stretched_window`), in ``order`` (:data:`ORDERS`,
    :class:`Variant`); with ``head``, only the dirty wrap gaps, each in the iteration's
    head (:func:`head_window`) or not at all; with ``split``, the dirty wrap gaps whose
    previous use is the last of them all in the head (late: :func:`head_window`), the
    others across the boundary (module docstring, *split*). Returns how many were
    taken; ``applied``, when given, gets each swap taken, in order (whether in the head,
    the gap, its window): with the state it started from, what the state is now."""
    trace, n = state.trace, state.n
    if target not in TARGETS:
        raise ValueError(f"target {target!r}: expected one of {TARGETS}")
    floor = persistent_floor(trace) if target == "working" else None
    gaps = [g for g in trace_index(trace).gaps if state.by_id[g.buffer_id].kind == PERSISTENT]
    if order not in ORDERS:
        raise ValueError(f"order {order!r}: expected one of {tuple(ORDERS)}")
    key = ORDERS[order]
    gaps.sort(key=lambda g: (-_idle_count(n, g), *key(g, state.sizes[g.buffer_id])))
    last_update = max((g.prev_use for g in gaps
                       if g.wraps and not state.clean_at(g.buffer_id, g.prev_use)),
                      default=-1) if split else n
    taken = 0
    head_issued = math.inf  # when the earliest copy in of the head swaps taken starts
    for gap in gaps:
        measure = state.live if floor is None else floor
        if int(measure.max()) <= state.budget:
            break
        over = _ops_over(measure, state.budget, n, gap)
        if not over:
            continue
        in_head = head or (gap.wraps and gap.prev_use >= last_update
                           and not state.clean_at(gap.buffer_id, gap.prev_use))
        if in_head:  # only dirty state across the boundary, in the head (or not at all)
            if not gap.wraps or state.clean_at(gap.buffer_id, gap.prev_use):
                continue
            window = head_window(state, gap, over, head_issued, late=split)
            if window is None:
                continue
            state.apply_head_swap(gap.buffer_id, gap.prev_use, gap.next_use, window)
            head_issued = window.in_issue_us
        else:
            window = stretched_window(state, gap, over, eager)
            state.apply_swap(gap.buffer_id, gap.prev_use, gap.next_use, window)
        _settle_copy_out(state, window)
        state.taken.add(gap)
        taken += 1
        if applied is not None:
            applied.append((in_head, gap, window))
        if floor is not None:
            size = trace.buffer(gap.buffer_id).size
            if gap.wraps and not in_head:  # off across the boundary
                floor[window.resident_until:] -= size
                floor[:window.trigger] -= size
            else:  # between uses, or in the head
                floor[window.resident_until:window.trigger] -= size
    return taken


def _earlier_trigger(state: PlanState, gap: Gap, size: int, until: int,
                     fill: float = PREFETCH_FILL) -> int:
    """The trigger step 4 moves ``gap``'s copy in to (its own when none is better), never
    before ``until``, where the bytes of its copy out are released (for a gap across the
    boundary, the copy in is the next iteration's: from op 0)."""
    low = 0 if gap.wraps and not gap.head else until
    room = gap.resident_from
    limit = fill * state.budget
    while room > low and int(state.live[room - 1]) + size <= limit:
        room -= 1
    if room == gap.resident_from:
        return room
    old = state.h2d_copies[(gap.buffer_id, gap.prev_use)]
    due = float(state.start_us[gap.next_use])
    state.h2d.remove(old)
    try:
        for t in range(gap.resident_from - 1, room - 1, -1):
            if state.h2d.finish_if_added(float(state.start_us[t]), old.length_us) \
                    <= due + 1e-9:
                return t
        return room
    finally:
        state.h2d.add(old.issue_us, old.length_us, old.due_us)


def bring_forward(state: PlanState, gaps: list[IdleGap], fill: float = PREFETCH_FILL) -> int:
    """Step 4 for the persistent ``gaps`` taken (module docstring), with room counted
    against ``fill`` of the budget; returns how many copies moved."""
    trace, n = state.trace, state.n
    planned = []
    for idle in gaps:
        gap = next(g for g in state.schedule.gaps[idle.buffer_id]
                   if g.prev_use == idle.prev_use and g.mode == SWAP)
        planned.append(gap)
    moved = 0
    for gap in sorted(planned, key=lambda g: (g.next_use, g.buffer_id)):
        size = trace.buffer(gap.buffer_id).size
        until = gap.resident_until
        copy_out = state.cost.copy_us(size, "d2h")
        landed = float(state.end_us[gap.prev_use]) + copy_out
        end = n if gap.wraps else gap.resident_from
        while (not gap.head and until < end and float(state.start_us[until]) < landed
               and int(state.live[until]) + size <= fill * state.budget
               and not state.clean_at(gap.buffer_id, gap.prev_use)):
            state.hold(size, until, until + 1)
            until += 1
        trigger = _earlier_trigger(state, gap, size, until, fill)
        if trigger < gap.resident_from:
            key = (gap.buffer_id, gap.prev_use)
            old = state.h2d_copies[key]
            state.h2d.remove(old)
            new = QueuedCopy(float(state.start_us[trigger]), old.length_us, old.due_us)
            state.h2d.add(*new)
            state.h2d_copies[key] = new
            state.hold(size, trigger, gap.resident_from)
        if (until, trigger) != (gap.resident_until, gap.resident_from):
            gaps_of_buffer = state.schedule.gaps[gap.buffer_id]
            gaps_of_buffer[gaps_of_buffer.index(gap)] = Gap(
                gap.buffer_id, gap.prev_use, gap.next_use, SWAP, until, trigger)
            moved += 1
    return moved


def _placeable(trace: Trace, state: PlanState, budget_bytes: int,
               params: BudgetParams, cache: OffsetCache) -> list[ResidencyInterval] | None:
    """The schedule's residencies when they get offsets within the budget (the first
    solver, every stay across the boundary tied, then :func:`place_pairs_first_fit`),
    else ``None``. The first solver's offsets are kept in ``cache``: when the schedule is
    kept, placing it asks that solver first, for the same residencies."""
    intervals = residency_intervals(trace, state.schedule)
    first = cache.place_one(trace, intervals, budget_bytes, params.placement.offset_solver)
    if ((first.offsets is not None and not first.untied)
            or place_pairs_first_fit(trace, intervals, budget_bytes).offsets is not None):
        return intervals
    return None


class SharedWork:
    """What the variants of one ``auto`` run (one trace, budget, cost model and params)
    share, so that no variant redoes work another did with the same result: the offsets
    found (:class:`~.engine.placement.OffsetCache`), and the greedy's states. The state
    the greedy starts from in :func:`plan_boundary` is a function of the internal budget
    and the persistent swaps :func:`offload_persistent` applied, in order (what it starts
    from is the same for every variant), and the greedy is deterministic: a variant whose
    persistent swaps are another's continues from a copy of the state that one's greedy
    reached (:func:`~.engine.snapshot.copy_state`)."""

    def __init__(self) -> None:
        self.offsets = OffsetCache()
        self._greedy: dict[tuple, PlanState] = {}

    def greedy_state(self, key: tuple) -> PlanState | None:
        """A copy of the state kept under ``key``, or ``None``."""
        kept = self._greedy.get(key)
        return None if kept is None else copy_state(kept)

    def keep(self, key: tuple, state: PlanState) -> None:
        """Keep a copy of ``state`` (the greedy's, before the variant edits it further)
        under ``key``: (internal budget, greedy options, the swaps applied before)."""
        self._greedy[key] = copy_state(state)


def plan_boundary(trace, budget_bytes, cost, params: BudgetParams, started: float,
                  variant: Variant = VARIANTS[0],
                  shared: SharedWork | None = None) -> BudgetResult:
    """Persistent state off the device by ``variant`` (module docstring), the rest by the
    greedy; ``shared`` with the other variants of the same trace, budget, cost model and
    params (:class:`SharedWork`), when given."""
    options = GreedyOptions(swap_weight=params.checkpoint_swap_weight,
                            max_chain=params.max_chain, late_trigger="covering")
    # what _placeable solved, placed again by place_schedule
    cache = OffsetCache() if shared is None else shared.offsets

    def decide(internal: int) -> Decision:
        state = PlanState(trace, internal, cost, max_chain=options.max_chain,
                          late_trigger=options.late_trigger)
        applied: list = []
        taken = offload_persistent(state, variant.target, variant.eager, variant.order,
                                   variant.head, variant.split, applied)
        persistent_gaps = list(state.taken)
        key = (internal, options, tuple(applied))
        planned = None if shared is None else shared.greedy_state(key)
        if planned is not None:
            state = planned
        else:
            for include_persistent in (False, True):
                if state.live.max() > internal:
                    cost_pass(state, candidate_gaps(trace, include_persistent), options)
            if shared is not None:
                shared.keep(key, state)

        def decision(schedule, fullest: FullestOp, moved: int,
                     intervals: list[ResidencyInterval] | None = None) -> Decision:
            if fullest.resident_bytes > internal:
                return Decision(None, reason=f"boundary: op {fullest.op} still needs "
                                             f"{fullest.resident_bytes} bytes resident "
                                             f"(budget {internal})")
            return Decision(schedule, {"persistent_gaps": taken, "target": variant.target,
                                       "eager_release": variant.eager,
                                       "brought_forward": moved,
                                       "planned_recompute_us": state.recompute_us},
                            intervals=intervals)

        # bring_forward edits the schedule's gap lists in place: keep them as they were
        as_decided = decision(Schedule({b: list(gaps) for b, gaps in state.schedule.gaps.items()},
                                       list(state.schedule.chains)), fullest_op(state), 0)
        moved = bring_forward(state, persistent_gaps, variant.fill)
        intervals = _placeable(trace, state, budget_bytes, params, cache) if moved else None
        if moved and intervals is None:
            # copies brought forward can tie residencies into a knot no offsets untie
            return as_decided
        return decision(state.schedule, fullest_op(state), moved, intervals)

    result = place_schedule(trace, budget_bytes, decide, "boundary", params.placement, started,
                            last_resort=place_pairs_first_fit, cache=cache)
    if not result.feasible or not variant.split:
        return result
    # the split's copies stall the step by design: which waits for which bytes is the
    # feedback's to order (its other moves are auto's, on the plan it keeps)
    refined = refine_triggers(result.trace, result.plan, cost, rounds=1, reslot_only=True)
    return replace(result, plan=refined.plan) if refined.moved_triggers else result
