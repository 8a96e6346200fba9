"""The greedy's copies across the iteration boundary moved where compute hides them.

A persistent buffer that the step may write (a weight of a trace without ``writes``,
where every use may write it) and that the greedy (:mod:`.engine.greedy`) takes off the
device across the boundary is copied out after its last use and back in before its first
use of the next iteration. Two of those copies often run with no compute to hide them:

- the copy out of a weight used by one of the last ops lands after the last op, and the
  step waits for it (the tail after the last op);
- the copy in of a weight used by one of the first ops is triggered at op 0 and the op
  that uses it waits for it.

:func:`plan_greedy_head` moves them, on the greedy's schedule, before any offset exists
(so the offset solvers and their repairs place the result, stays across the boundary on
one offset)::

    op:          u  ...  n-1 | 0   1  ...  k       t        u     u: the only use
    greedy       ==] out~~~~~|~~~~                 [ in ====]
    in the head  ============|=====] out~~~~       [ in ====]     (late_copies_in_head)

    op:          0  f  ...  o  ...   t  ...  n-1 | 0  f           f: first use
    greedy       [ in]==] out~~~                 | [in=]          the op f waits
    in the tail  ======] out~~~      [ in ========|=====]          (late_copies_in_tail)

1. **Copies out into the head** (:func:`late_copies_in_head`): the copies out queue on
   the FIFO D2H engine(s) in order of issue, on the estimated op times; the wrap gap
   whose copy out lands latest after the last op stays on the device across the boundary
   and is copied out after op 0 instead, where that copy lands before its copy in is
   triggered and the bytes held over the tail and the head fit the budget; again until
   no copy out lands after the last op (or none can move).
2. **Copies in into the tail** (:func:`late_copies_in_tail`): a wrap gap whose copy in
   lands after its use starts (FIFO H2D engine(s)) is copied in during the previous
   iteration's tail instead, from the latest op whose copy still lands by the last op,
   where that lowers the estimated lateness of all the copies in and the schedule still
   packs into offsets.
3. **Gaps that still end the step kept** (:func:`plan_greedy_head`): the wrap gaps whose
   copies out still land after the last op (a move into the head that does not fit or
   pack) stay on the device, and the greedy runs again without them, then steps 1-2
   (:data:`EXCLUDE_ROUNDS`): it frees those bytes with other gaps, whose copies out land
   in time.

Unlike :mod:`.head_copies`, which moves copies out on a placed plan's offsets, this
works on the schedule and places it afresh. ``auto`` runs it (:data:`MEMBER_SUFFIX`) at
each finite weight of ``params.swap_weights`` (and with copies waited for at
:data:`WAIT_SWAP_WEIGHTS`), on traces whose persistent state the
step may write and that is idle across the boundary (:func:`dirty_across_boundary`); it
finds a plan only where it moved a copy and the moved schedule packs.

On the 40-layer forward pass without ``writes`` of ``bench/always_plan.py`` at 70% of its
peak on Gen5, the greedy's copy out of the last layer's weight (8 MB) ended the step
148 µs after its last op (8.5%); that gap kept on the device and the greedy run again
(swap weight 0.2), nothing ends the step and every copy in lands on time (0.1%).
"""

from __future__ import annotations

import heapq

from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.planning.budget.engine.greedy import GreedyOptions, fullest_op, run_repaired
from cupool.planning.budget.engine.placement import (
    Decision,
    PlacedOffsets,
    place_schedule,
    repair_placement,
    solvers_place,
)
from cupool.planning.budget.engine.residency import (
    HEAD_OUT_OP,
    residency_intervals,
    resident_bytes,
)
from cupool.planning.budget.engine.schedule import (
    SWAP,
    Gap,
    IdleGap,
    Schedule,
    leaves_clean,
)
from cupool.planning.budget.engine.state import PlanState
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.result import BudgetResult
from cupool.planning.budget.stream import place_exact

MEMBER_SUFFIX = "boundary copies moved"
"""The last option in the names of ``auto``'s members planned here."""

WAIT_SWAP_WEIGHTS = (0.2,)
"""The weights at which ``auto`` also runs this with the greedy's copies waited for
(:mod:`.engine.waits`). Only one: ``auto`` refines its best plans, and a member whose
plan is best before refining can displace one that refines further (with 0, 0.02 and 1
too, the 40-layer pass without ``writes`` at 70% on Gen4 went from 124.8% to 142.3%;
with 0.2 alone, 50% on Gen5 went from 65.8% to 63.7% and no cell got slower)."""

EXCLUDE_ROUNDS = 2
"""Times :func:`plan_greedy_head` runs the greedy again with the wrap gaps whose copies
out still end the step kept on the device (the greedy then frees those bytes elsewhere,
where a copy out lands in time)."""

TAIL_TRIES = 4
"""Tail ops :func:`late_copies_in_tail` tries per late copy in, latest first: an earlier
one holds the bytes longer, but where the latest does not pack into offsets, one a little
earlier sometimes does."""

TAIL_EVALUATIONS = 12
"""Tail ops whose copies in :func:`late_copies_in_tail` estimates per late copy in (each
estimate queues every copy in of the schedule: on a 450-buffer trace with many late copies,
an unbounded scan cost seconds)."""

TAIL_GAPS = 16
"""Late copies in :func:`late_copies_in_tail` considers, earliest use first."""


def dirty_across_boundary(trace: Trace) -> bool:
    """Whether some persistent buffer that the step may write is idle across the
    iteration boundary (taken off the device there, it is copied out)."""
    n = trace.num_ops
    return any(b.kind == PERSISTENT and not b.read_only and b.uses
               and (n - 1 - b.uses[-1]) + b.uses[0] > 0 for b in trace.buffers)


def _copy(schedule: Schedule, old: Gap, new: Gap) -> Schedule:
    """``schedule`` with ``old`` replaced by ``new`` (the others shared, not copied)."""
    gaps = dict(schedule.gaps)
    gaps[old.buffer_id] = [new if g == old else g for g in gaps[old.buffer_id]]
    return Schedule(gaps, schedule.chains)


def _fits_budget(state: PlanState, schedule: Schedule) -> bool:
    """Whether the bytes resident under ``schedule`` fit ``state``'s budget at every op."""
    intervals = residency_intervals(state.trace, schedule)
    return bool(resident_bytes(state.trace, intervals).max(initial=0) <= state.budget)


def late_copies_in_head(state: PlanState, fits=None) -> Schedule:
    """``state``'s schedule with its copies out that land after the last op moved into
    the next iteration's head (module docstring, step 1), each where the schedule still
    ``fits`` (a predicate; default: the bytes resident fit the budget at every op)."""
    fits = fits or (lambda trial: _fits_budget(state, trial))
    schedule = Schedule(dict(state.schedule.gaps), state.schedule.chains)
    last_end = float(state.end_us[-1])
    tried: set[Gap] = set()
    while True:
        landed = _copies_out(state, schedule)
        late = [(issue, g) for g, (issue, end) in landed.items()
                if g.wraps and not g.head and end > last_end + 1e-9 and g not in tried]
        if not late:
            return schedule
        _issue, gap = max(late, key=lambda item: (item[0], item[1].buffer_id))
        tried.add(gap)
        # a head gap with its bytes held until op 1, to queue its copy out first
        probe = Gap(gap.buffer_id, gap.prev_use, gap.next_use, SWAP, HEAD_OUT_OP + 1,
                    max(gap.resident_from, HEAD_OUT_OP + 1))
        if not probe.head:
            continue
        _issue, end = _copies_out(state, _copy(schedule, gap, probe))[probe]
        until = min(state.op_at_or_after(end, HEAD_OUT_OP + 1), state.n)
        if until > gap.resident_from:
            continue  # its copy out lands after its copy in is due to start
        trial = _copy(schedule, gap, Gap(gap.buffer_id, gap.prev_use, gap.next_use, SWAP,
                                         until, gap.resident_from))
        if fits(trial):
            schedule = trial


def late_copies_in_tail(state: PlanState, schedule: Schedule, fits=None) -> Schedule:
    """``schedule`` with its late copies in across the boundary moved into the previous
    iteration's tail (module docstring, step 2), earliest use first (at most
    :data:`TAIL_GAPS`), each at the latest of at most :data:`TAIL_TRIES` tail ops where
    the schedule still ``fits`` (as in :func:`late_copies_in_head`), among at most
    :data:`TAIL_EVALUATIONS` whose copies in are estimated."""
    fits = fits or (lambda trial: _fits_budget(state, trial))
    n = state.n
    lateness, copies = _copies_in(state, schedule)
    late = sorted((g for g, late_us in copies.items()
                   if late_us > 0 and g.wraps and not g.head
                   and g.resident_from < g.resident_until),
                  key=lambda g: (g.next_use, g.buffer_id))
    last_start = float(state.start_us[n - 1])
    for gap in late[:TAIL_GAPS]:
        tries = evaluations = 0
        in_us = state.copy_times(gap.buffer_id)[1]
        for trigger in range(n - 1, gap.resident_until - 1, -1):
            if last_start - float(state.start_us[trigger]) < in_us - 1e-9:
                continue  # not even an idle link lands it by the last op
            evaluations += 1
            if evaluations > TAIL_EVALUATIONS:
                break
            tail = Gap(gap.buffer_id, gap.prev_use, gap.next_use, SWAP, gap.resident_until,
                       trigger)
            trial = _copy(schedule, gap, tail)
            trial_lateness, trial_copies = _copies_in(state, trial)
            if trial_copies[tail] > 0:
                continue  # lands after the last op starts: an earlier trigger
            if trial_lateness >= lateness - 1e-9 or tries >= TAIL_TRIES:
                break
            tries += 1
            if fits(trial):
                schedule, lateness = trial, trial_lateness
                break
    return schedule


def _copies_out(state: PlanState, schedule: Schedule) -> dict:
    """``(issue, landed)`` (µs, estimated op times) of the copy out of every swapped gap of
    ``schedule`` that copies (is not clean), on the FIFO D2H engine(s) in order of issue:
    a head gap's after op 0, the others' after their previous use."""
    issues = []
    for buffer_id, gaps in schedule.gaps.items():
        buffer = state.by_id[buffer_id]
        for g in gaps:
            if g.mode != SWAP or leaves_clean(buffer, gaps, g.prev_use):
                continue
            op = HEAD_OUT_OP if g.head else g.prev_use
            issues.append((float(state.end_us[op]), buffer_id, g))
    issues.sort(key=lambda item: (item[0], item[1]))
    engines = [0.0] * state.cost.copy_engines_per_direction
    out = {}
    for issue, buffer_id, g in issues:
        end = max(heapq.heappop(engines), issue) + state.copy_times(buffer_id)[0]
        heapq.heappush(engines, end)
        out[g] = (issue, end)
    return out


def _copies_in(state: PlanState, schedule: Schedule) -> tuple[float, dict]:
    """The estimated lateness (µs) of the copy in of every swapped gap of ``schedule``,
    each queued when its trigger op starts on the FIFO H2D engine(s), in the order the
    plan issues them (trigger, then due op), against its due op's start (a tail
    prefetch's: the last op's); and their sum."""
    n = state.n
    issues = []
    for buffer_id, gaps in schedule.gaps.items():
        for g in gaps:
            if g.mode != SWAP:
                continue
            tail = g.wraps and not g.head and g.resident_from >= g.resident_until
            issues.append((g.resident_from, n - 1 if tail else g.next_use, buffer_id, g))
    issues.sort(key=lambda item: item[:3])
    engines = [0.0] * state.cost.copy_engines_per_direction
    out, total = {}, 0.0
    for trigger, due, buffer_id, g in issues:
        end = (max(heapq.heappop(engines), float(state.start_us[trigger]))
               + state.copy_times(buffer_id)[1])
        heapq.heappush(engines, end)
        out[g] = max(0.0, end - float(state.start_us[due]))
        total += out[g]
    return total, out


def _packs(trace, schedule: Schedule, budget_bytes: int, params: BudgetParams) -> bool:
    """Whether ``schedule``'s residencies get offsets within the budget from one of the
    offset solvers :func:`~.engine.placement.place_schedule` tries, or from its repair
    with every stay across the boundary on one offset (first fit, the exact solver)."""
    intervals = residency_intervals(trace, schedule)
    if resident_bytes(trace, intervals).max(initial=0) > budget_bytes:
        return False
    return (solvers_place(trace, intervals, budget_bytes, params.placement.offset_solver)
            or repair_placement(trace, schedule, intervals, budget_bytes, None, False)[0]
            is not None)


def _moved(before: Schedule, after: Schedule) -> int:
    """How many gaps ``after`` takes differently from ``before``."""
    return sum(g not in before.gaps.get(buffer_id, ())
               for buffer_id, gaps in after.gaps.items() for g in gaps)


def plan_greedy_head(trace, budget_bytes, cost, params: BudgetParams, started: float,
                     options: GreedyOptions) -> BudgetResult:
    """The repaired greedy with ``options`` (:func:`~.engine.greedy.run_repaired`), its
    copies across the boundary moved (module docstring) where the moved schedule packs;
    the wrap gaps whose copies out still land after the last op are then kept on the
    device and the greedy runs again without them, up to :data:`EXCLUDE_ROUNDS` times
    (the last schedule whose greedy fits is the plan). No plan where nothing moved and
    nothing was kept (the greedy's own member has that one)."""

    def decide(internal: int) -> Decision:
        def packs(trial: Schedule) -> bool:
            return _packs(trace, trial, internal, params)

        excluded: frozenset = frozenset()
        chosen, reason = None, None
        for _round in range(EXCLUDE_ROUNDS + 1):
            state = run_repaired(trace, internal, cost, options, excluded=excluded)
            fullest = fullest_op(state)
            if fullest.resident_bytes > internal:
                reason = (f"greedy: op {fullest.op} still needs {fullest.resident_bytes} "
                          f"bytes resident (budget {internal})")
                break
            headed = late_copies_in_head(state)
            if _moved(state.schedule, headed) and not packs(headed):
                headed = state.schedule
            schedule = late_copies_in_tail(state, headed, packs)
            chosen = (schedule, _moved(state.schedule, schedule), len(excluded), state)
            last_end = float(state.end_us[-1])
            ending = {IdleGap(g.buffer_id, g.prev_use, g.next_use)
                      for g, (_issue, end) in _copies_out(state, schedule).items()
                      if g.wraps and not g.head and end > last_end + 1e-9}
            if not ending or ending <= excluded:
                break
            excluded = excluded | ending
        if chosen is None or not (chosen[1] or chosen[2]):
            return Decision(None, reason=reason or (
                f"greedy, {MEMBER_SUFFIX}: no copy across the boundary to move where the "
                f"schedule packs"))
        schedule, moved, kept, state = chosen
        return Decision(schedule, {"swap_weight": options.swap_weight,
                                   "boundary_copies_moved": moved,
                                   "boundary_gaps_kept": kept,
                                   "planned_recompute_us": state.recompute_us})

    tried = []

    def exact_once(trace, intervals, budget_bytes):
        """The exact solver as the last resort of the first round that needs one only."""
        if tried:
            return PlacedOffsets(None, 0)
        tried.append(True)
        return place_exact(trace, intervals, budget_bytes)

    return place_schedule(trace, budget_bytes, decide, "greedy", params.placement, started,
                          last_resort=exact_once)
