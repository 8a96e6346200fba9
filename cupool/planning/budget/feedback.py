"""Capuchin's feedback, offline and at run time.

Offline (:func:`refine_triggers`): simulate a plan, and where a swap-in landed after its due op
was dispatched (the op waited ``w`` µs), move its trigger earlier by enough ops to cover
``w`` at the simulated op times::

    op:        10    11    12    13          due 13 waited w
    before:                [trigger 12 ─────►] late
    after:     [trigger 10 ───────────────►]     ops 10..11 take >= w

The new trigger never goes before the end of the buffer's previous residency (the bytes
must have left first) and only as far as the moved residency keeps the budget at every
op and its offset range free of every other residency it would now overlap in time; the
plan is checked by the independent validator and kept only when it simulates faster.

The H2D engine is FIFO, so a swap-in can also be late behind copies with time to spare:
those are then triggered one op after it (*postponed*, which only shortens their
residencies), kept on the same terms. And a swap-in can wait for its bytes: the copy out
of what held them has not landed. The late ones, with the swap-ins holding bytes at their
due ops, are then placed again where their bytes free up first (:mod:`.reslot`), kept on
the same terms. The helpers that pair a plan's swap-ins with a
simulation's copies (:func:`predicted_waits`, :func:`queued_ahead`) also serve the
run-time feedback.

At run time (:func:`adjust_triggers`): between iterations of the swap engine
(:mod:`cupool.swap.engine`), the swap-ins measured late move their triggers earlier by the
observed op durations, and the simulator is asked which would still be late.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from cupool.check import validate_plan
from cupool.core.vocabulary import Plan, Residency, SwapIn
from cupool.planning.budget.engine.residency import in_execution_order
from cupool.planning.budget.reslot import Spans, reslot_late
from cupool.sim.cost import H2D

if TYPE_CHECKING:
    from cupool.sim.simulator import SimReport

ROUNDS = 3
"""Simulate → move → re-validate rounds."""


class ServedSwapIn(NamedTuple):
    """A swap-in of a plan and the H2D copy that served it in a simulation (µs)."""

    action: SwapIn
    enqueued_us: float
    start_us: float
    end_us: float


class MovedTriggers(NamedTuple):
    """A plan with some swap-in triggers moved, and how many."""

    plan: Plan
    moved: int


class RefinedPlan(NamedTuple):
    """What :func:`refine_triggers` found: the fastest plan, its simulation, and how many
    triggers moved in total (0: the plan it was given)."""

    plan: Plan
    simulation: SimReport
    moved_triggers: int


def move_swap_in(plan, action: SwapIn, trigger: int):
    """``plan`` with the swap-in ``action`` triggered at ``trigger`` instead: the residency
    it enters starts there too (nothing else is checked: validate the result)."""
    residencies = tuple(replace(r, start=trigger)
                        if r.buffer_id == action.buffer_id and r.start == action.trigger_op
                        else r for r in plan.residencies)
    actions = tuple(replace(a, trigger_op=trigger) if a == action else a for a in plan.actions)
    return replace(plan, residencies=residencies, actions=actions)


def delay_swap_ins(plan):
    """``plan`` mis-timed on purpose: every swap-in triggered only at its due op (the data
    is asked for when it is needed), to exercise the feedback."""
    for action in [a for a in plan.actions if isinstance(a, SwapIn) and a.due_op > a.trigger_op]:
        plan = move_swap_in(plan, action, action.due_op)
    return plan


def _served(report, plan: Plan) -> list[ServedSwapIn]:
    """Each swap-in of ``plan`` with its H2D copy in ``report`` (a
    :class:`~cupool.sim.simulator.SimReport` of ``plan``), in trigger order. A buffer's H2D
    copies, in the order the engine served them, belong to its swap-ins in trigger order
    (one engine is FIFO, and a buffer's swap-ins are ordered by its residencies)."""
    copies = defaultdict(list)
    for buffer_id, direction, _nbytes, enqueued, start, end in report.copies:
        if direction == H2D:
            copies[buffer_id].append((enqueued, start, end))
    seen = defaultdict(int)
    served = []
    for action in sorted((a for a in plan.actions if isinstance(a, SwapIn)),
                         key=lambda a: a.trigger_op):
        b = action.buffer_id
        served.append(ServedSwapIn(action, *copies[b][seen[b]]))
        seen[b] += 1
    return served


def swap_in_copies(report, plan: Plan) -> dict:
    """``{(buffer, trigger_op): (start_us, end_us)}``: each swap-in of ``plan`` and its H2D
    copy in ``report`` (a :class:`~cupool.sim.simulator.SimReport` of ``plan``)."""
    return {(s.action.buffer_id, s.action.trigger_op): (s.start_us, s.end_us)
            for s in _served(report, plan)}


def _held_engine(served: list[ServedSwapIn], waiting: ServedSwapIn) -> list[ServedSwapIn]:
    """The swap-ins of ``served`` whose copies held the FIFO H2D engine while ``waiting``'s
    waited in its queue: started before it, still running when it was enqueued."""
    return [ahead for ahead in served
            if ahead.start_us < waiting.start_us and ahead.end_us > waiting.enqueued_us]


def predicted_waits(report, plan: Plan, guard_us: float = 0.0) -> dict:
    """``{buffer: µs}`` that each swap-in of ``plan`` made its due op wait in ``report``
    (a :class:`~cupool.sim.simulator.SimReport` of ``plan``): its H2D copy's end minus
    the due op's dispatch, plus ``guard_us``, where positive (the largest, for a buffer
    swapped in twice)."""
    waits = {}
    for swap_in in _served(report, plan):
        dispatch = report.op_times[swap_in.action.due_op][0]
        wait = swap_in.end_us - dispatch + guard_us
        if wait > 0:
            b = swap_in.action.buffer_id
            waits[b] = max(waits.get(b, 0.0), wait)
    return waits


def queued_ahead(report, plan: Plan, late: dict, guard_us: float = 0.0) -> dict:
    """``{buffer: µs}``: for each buffer of ``late`` (``{buffer: wait µs}``) whose copy lands
    in ``report`` less than ``guard_us`` before its due op, the swap-ins whose H2D copies
    held the engine while its copy waited in the queue (started before it and ended after
    it was enqueued), each with that wait to cover (the largest, for a copy ahead of
    several)."""
    served = _served(report, plan)
    blockers = {}
    for swap_in in served:
        b = swap_in.action.buffer_id
        dispatch = report.op_times[swap_in.action.due_op][0]
        if b not in late or dispatch - swap_in.end_us >= guard_us:
            continue
        for ahead in _held_engine(served, swap_in):
            other = ahead.action.buffer_id
            if other != b:
                blockers[other] = max(blockers.get(other, 0.0), late[b])
    return blockers


def refine_triggers(trace, plan, cost, sim=None, rounds: int = ROUNDS,
                    reslot_only: bool = False) -> RefinedPlan:
    """The fastest plan found (``plan`` itself when nothing helped). Each round tries the
    late swap-ins' triggers earlier, then the copies queued ahead of late ones later
    (:func:`_postpone_blockers`), then the late swap-ins re-placed where their bytes free
    up first (:func:`_reslot`; with ``reslot_only``, only that); a candidate is kept when
    it simulates faster and passes the validator. ``sim``: ``plan``'s simulation, when the
    caller has it."""
    from cupool.sim.simulator import simulate

    if sim is None:
        sim = simulate(trace, plan, cost, validate=False)
    moved_total = 0
    movers = (_reslot,) if reslot_only else (_move_late_triggers, _postpone_blockers, _reslot)
    for _round in range(rounds):
        improved = False
        for mover in movers:
            candidate = mover(trace, plan, sim)
            if not candidate.moved:
                continue
            # the validator costs more than the simulation: it judges only a faster plan
            report = simulate(trace, candidate.plan, cost, validate=False)
            if (report.iteration_us < sim.iteration_us - 1e-9
                    and validate_plan(trace, candidate.plan).valid):
                plan, sim = candidate.plan, report
                moved_total += candidate.moved
                improved = True
        if not improved:
            break
    if moved_total:
        plan = replace(plan, stats={**plan.stats, "feedback_moved_triggers": moved_total})
    return RefinedPlan(plan, sim, moved_total)


def _reslot(trace, plan, sim) -> MovedTriggers:
    """The late swap-ins, with those holding bytes at their due ops, placed again where
    their bytes free up first (:func:`~.reslot.reslot_late`)."""
    moved = reslot_late(trace, plan, sim, swap_in_copies(sim, plan))
    return MovedTriggers(moved.plan, moved.moved)


def _postpone_blockers(trace, plan, sim) -> MovedTriggers:
    """The swap-ins whose copies held the FIFO H2D engine while a late one waited behind
    them, and that had more slack before their own due op than the late copy takes,
    triggered one op after the late one instead (queued behind it). A later trigger only
    shortens a residency, so budget and addresses still hold; the simulator judges the
    rest."""
    served = _served(sim, plan)
    dispatch = [times[0] for times in sim.op_times]
    new_trigger = {}
    for late in sorted(served, key=lambda s: s.start_us):
        action = late.action
        if late.end_us <= dispatch[action.due_op] + 1e-9 or action in new_trigger:
            continue
        length = late.end_us - late.start_us
        target = action.trigger_op + 1
        for ahead in _held_engine(served, late):
            other = ahead.action
            if (other is not action and other not in new_trigger
                    and other.trigger_op < target <= other.due_op
                    and dispatch[other.due_op] - ahead.end_us > length):
                new_trigger[other] = target
    if not new_trigger:
        return MovedTriggers(plan, 0)
    for other, target in new_trigger.items():
        plan = move_swap_in(plan, other, target)
    return MovedTriggers(replace(plan, actions=tuple(in_execution_order(list(plan.actions)))),
                         len(new_trigger))


def _resident_bytes(num_ops: int, residencies, sizes: dict) -> np.ndarray:
    """The bytes ``residencies`` hold during each op (``sizes``: bytes by buffer id)."""
    resident = np.zeros(num_ops + 1, dtype=np.int64)
    for r in residencies:
        resident[r.start] += sizes[r.buffer_id]
        resident[r.end] -= sizes[r.buffer_id]
    return np.cumsum(resident[:-1])


def _move_late_triggers(trace, plan, sim) -> MovedTriggers:
    """Each swap-in whose copy landed after its due op was dispatched, triggered earlier by
    enough ops (at simulated times) to cover the wait, as far as the residency it enters
    keeps the budget and its offset range free."""
    dispatch = np.array([t[0] for t in sim.op_times], dtype=float)
    landed = defaultdict(list)  # buffer -> its swap-ins with their copies, in trigger order
    for swap_in in _served(sim, plan):
        landed[swap_in.action.buffer_id].append(swap_in)
    # buffers in the order their first swap-in appears in the plan
    swap_ins = dict.fromkeys(a.buffer_id for a in plan.actions if isinstance(a, SwapIn))
    residencies = list(plan.residencies)
    sizes = {b.id: b.size for b in trace.buffers}
    resident = _resident_bytes(trace.num_ops, residencies, sizes)
    index = {(r.buffer_id, r.start): k for k, r in enumerate(residencies)}
    ends = defaultdict(list)  # buffer -> its residencies' ends (moves change only starts)
    for r in residencies:
        ends[r.buffer_id].append(r.end)
    held = Spans(residencies, sizes)
    new_trigger = {}
    for b in swap_ins:
        for swap_in in landed[b]:
            action = swap_in.action
            wait = swap_in.end_us - dispatch[action.due_op]
            if wait <= 1e-9:
                continue
            k = index[(b, action.trigger_op)]
            r = residencies[k]
            floor = max((end for end in ends[b] if end <= r.start), default=r.start)
            target = action.trigger_op
            while (target > floor and dispatch[action.trigger_op] - dispatch[target] < wait
                   and resident[target - 1] + sizes[b] <= plan.capacity_bytes
                   and held.free(r.offset, sizes[b], target - 1)):
                target -= 1
                resident[target] += sizes[b]
            if target < action.trigger_op:
                residencies[k] = Residency(b, target, r.end, r.offset)
                held.start[k] = target
                new_trigger[(b, action.trigger_op)] = target
    if not new_trigger:
        return MovedTriggers(plan, 0)
    actions = []
    for action in plan.actions:
        key = (action.buffer_id, getattr(action, "trigger_op", None))
        if isinstance(action, SwapIn) and key in new_trigger:
            action = replace(action, trigger_op=new_trigger[key])  # keeps its level
        actions.append(action)
    actions = in_execution_order(actions)
    return MovedTriggers(replace(plan, residencies=tuple(residencies), actions=tuple(actions)),
                         len(new_trigger))


# -- the runtime's feedback: measured late prefetches move triggers between iterations -------
FEEDBACK_MARGIN = 1.25
"""A late swap-in's trigger moves earlier to cover this multiple of its measured wait."""
PREDICTED_ROUNDS = 8
"""How many times :func:`adjust_triggers` asks the simulator about the adjusted plan."""


class AdjustedPlan:
    """What :func:`adjust_triggers` returns: ``plan``, the adjusted plan (``plan`` itself
    when nothing moved), and ``moves``, ``{buffer: (first old trigger, last new trigger)}``
    for the moves kept."""

    __slots__ = ("moves", "plan")

    def __init__(self, plan: Plan, moves: dict) -> None:
        self.plan = plan
        self.moves = moves


class _TriggerMove:
    """One swap-in to move: buffer ``buffer_id``'s ``action``, triggered at ``old`` now,
    at ``target`` if the plan allows it."""

    __slots__ = ("action", "buffer_id", "old", "target")

    def __init__(self, buffer_id: int, action: SwapIn, old: int, target: int) -> None:
        self.buffer_id, self.action, self.old, self.target = buffer_id, action, old, target


def adjust_triggers(trace, plan: Plan, late: dict, op_us, validate, predict=None,
                    rounds: int = PREDICTED_ROUNDS, guard_us: float = 0.0,
                    near_misses_only: bool = False) -> AdjustedPlan:
    """Move the triggers of late swap-ins earlier, for the next iteration of a run.

    The rule: a swap-in that made its due op wait ``w`` µs has its trigger moved earlier
    by the fewest ops whose observed durations sum to at least ``FEEDBACK_MARGIN × w``
    (1.25); never before the end of the buffer's previous residency (so after its
    swap-out point), nor before op 0. The residency it enters starts at the new trigger.
    Each move is kept only if the whole plan still passes ``validate`` (budget and address
    overlap included); otherwise the earliest valid trigger between the target and the
    old place is found by bisection (a later trigger holds fewer bytes).

    Measured waits alone converge slowly: the H2D engine is FIFO, so while a due op waits
    for one large copy the copies queued behind it land during that wait and measure as
    on time, and a move can queue a small swap-in behind a large one that is now issued
    first. So ``predict`` (optional, ``predict(plan) -> SimReport``, e.g.
    :func:`~cupool.sim.simulate` with the plan's cost model) is then asked, up to
    ``rounds`` times, which swap-ins of the adjusted plan would still be late, and those
    move by the same rule. A late swap-in that cannot move (its residency would break the
    budget or overlap another one a step earlier, or it already starts where its bytes
    left) is late because the engine was busy with copies enqueued ahead of it: those
    (:func:`queued_ahead`) move earlier instead, by the same rule for its wait. What stays
    late is the floor the simulator predicts for the plan.

    With ``predict``, every move is also judged by the simulator: the measured moves are
    kept only where the simulated iteration is not slower after them (together, or by
    halves, see :func:`_keep_not_slower`), and a predicted round only when it is not
    slower either. A measured wait may be timing noise that the model does not have, and
    a plan the model predicts slower is not a correction of it.

    ``late`` maps buffer ids to measured waits (trace µs); ``op_us`` are observed op
    durations (trace µs); ``validate(trace, plan)`` is the swap validator. A predicted
    copy counts as late when it lands less than ``guard_us`` before its due op (a guard
    band against copy-time jitter the model does not have; the replay uses its
    timer-noise threshold). ``near_misses_only``: of the predicted swap-ins, move only
    those the simulator predicts on time but within ``guard_us`` of their due op (widen
    the slack of a plan before it runs, leaving the ones it predicts late as they are)."""
    stuck = set()
    if predict is None:
        return _move_late(trace, plan, late, op_us, validate, stuck)
    judged = _Judged(plan, predict(plan))
    moves = _keep_not_slower(trace, judged, late, op_us, validate, stuck, predict)
    for _round in range(rounds):
        waits = predicted_waits(judged.report, judged.plan, guard_us)
        if near_misses_only:
            waits = {b: wait for b, wait in waits.items() if wait <= guard_us}
        step = _move_late(trace, judged.plan, waits, op_us, validate, stuck)
        if not step.moves:
            # every swap-in still late (measured or predicted) is stuck: move what is
            # queued ahead of it
            blockers = queued_ahead(judged.report, judged.plan, {**late, **waits}, guard_us)
            step = _move_late(trace, judged.plan, blockers, op_us, validate, stuck)
        if not step.moves:
            break
        report = predict(step.plan)
        if report.iteration_us > judged.report.iteration_us + SLOWER_US:
            break
        judged.plan, judged.report = step.plan, report
        for b, (old, new) in step.moves.items():
            moves[b] = (moves.get(b, (old, new))[0], new)
    return AdjustedPlan(judged.plan, moves)


SLOWER_US = 1e-6
"""A simulated iteration longer than the one before a move by more than this (µs) is
slower: the move is not kept."""


class _Judged:
    """The plan :func:`adjust_triggers` holds so far and its simulation."""

    __slots__ = ("plan", "report")

    def __init__(self, plan: Plan, report) -> None:
        self.plan, self.report = plan, report


def _keep_not_slower(trace, judged: _Judged, late: dict, op_us, validate, stuck: set,
                     predict) -> dict:
    """Apply the rule to the measured waits ``late``, keeping only moves after which the
    simulated iteration is not slower: all of them together when that holds, else the
    waits split in halves, each half judged on the plan the other left (a measured wait
    can be timing noise the model does not have, and the move it asks for can queue a
    copy that was on time behind one now issued first). Updates ``judged``; returns the
    moves kept."""
    step = _move_late(trace, judged.plan, late, op_us, validate, stuck)
    if not step.moves:
        return {}
    report = predict(step.plan)
    if report.iteration_us <= judged.report.iteration_us + SLOWER_US:
        judged.plan, judged.report = step.plan, report
        return dict(step.moves)
    if len(late) == 1:
        return {}
    ordered = sorted(late.items())
    half = len(ordered) // 2
    moves = _keep_not_slower(trace, judged, dict(ordered[:half]), op_us, validate, stuck,
                             predict)
    moves.update(_keep_not_slower(trace, judged, dict(ordered[half:]), op_us, validate,
                                  stuck, predict))
    return moves


def _move_late(trace, plan: Plan, late: dict, op_us, validate,
               stuck: set | None = None) -> AdjustedPlan:
    """One application of :func:`adjust_triggers`'s rule to the waits ``late``. Each move
    goes as far toward its target as the budget and its offset range allow, op by op
    (:func:`_checked_moves`: none where none can move a single op), and the plan with
    every move is validated once; where the validator refuses it (a rule the op-by-op
    check does not see), the moves are tried together, then by halves, and a single move
    that breaks the plan bisects for the earliest valid trigger between its target and
    its old place. ``stuck`` collects
    ``(buffer, trigger)`` that cannot move, so later rounds skip them."""
    stuck = set() if stuck is None else stuck
    targets = []
    for b, waited in sorted(late.items()):
        spans = sorted((r for r in plan.residencies if r.buffer_id == b), key=lambda r: r.start)
        for action in plan.actions:
            if not (isinstance(action, SwapIn) and action.buffer_id == b):
                continue
            old = action.trigger_op
            k = next(k for k, r in enumerate(spans) if r.start == old)
            floor = spans[k - 1].end if k > 0 else 0
            target, covered = old, 0.0
            while target > floor and covered < FEEDBACK_MARGIN * waited:
                target -= 1
                covered += op_us[target]
            if target < old and (b, old) not in stuck:
                targets.append(_TriggerMove(b, action, old, target))
    if not targets:
        return AdjustedPlan(plan, {})
    checked = _checked_moves(trace, plan, targets)
    if not checked.plan.moves or validate(trace, checked.plan.plan).valid:
        stuck.update(checked.stuck)
        return checked.plan
    moves = {}

    def apply(plan, batch):
        together = plan
        for move in batch:
            together = move_swap_in(together, move.action, move.target)
        if validate(trace, together).valid:
            moves.update({move.buffer_id: (move.old, move.target) for move in batch})
            return together
        if len(batch) > 1:
            half = len(batch) // 2
            return apply(apply(plan, batch[:half]), batch[half:])
        move = batch[0]
        low, high = move.target + 1, move.old  # the earliest valid trigger is in [low, high]
        while low < high:
            middle = (low + high) // 2
            if validate(trace, move_swap_in(plan, move.action, middle)).valid:
                high = middle
            else:
                low = middle + 1
        if high == move.old:
            stuck.add((move.buffer_id, move.old))
            return plan
        moves[move.buffer_id] = (move.old, high)
        return move_swap_in(plan, move.action, high)

    return AdjustedPlan(apply(plan, targets), moves)


class _Checked(NamedTuple):
    """What :func:`_checked_moves` found: the ``plan`` with its moves, and the ``stuck``
    swap-ins, ``(buffer, trigger)``, that could not move a single op."""

    plan: AdjustedPlan
    stuck: set


def _checked_moves(trace, plan: Plan, targets) -> _Checked:
    """Each move of ``targets`` (:class:`_TriggerMove`, in order) as far toward its target
    as the plan allows op by op: the resident bytes at each op it adds stay within the
    plan's capacity and no other residency holds its offset range then (the check
    :func:`_move_late_triggers` makes)."""
    sizes = {b.id: b.size for b in trace.buffers}
    residencies = list(plan.residencies)
    resident = _resident_bytes(trace.num_ops, residencies, sizes)
    index = {(r.buffer_id, r.start): k for k, r in enumerate(residencies)}
    held = Spans(residencies, sizes)
    moves, stuck = {}, set()
    for move in targets:
        b, k = move.buffer_id, index[(move.buffer_id, move.old)]
        offset, size = residencies[k].offset, sizes[move.buffer_id]
        trigger = move.old
        while trigger > move.target and resident[trigger - 1] + size <= plan.capacity_bytes \
                and held.free(offset, size, trigger - 1):
            trigger -= 1
            resident[trigger] += size
        if trigger == move.old:
            stuck.add((b, move.old))
            continue
        held.start[k] = trigger
        plan = move_swap_in(plan, move.action, trigger)
        moves[b] = (move.old, trigger)
    return _Checked(AdjustedPlan(plan, moves), stuck)
