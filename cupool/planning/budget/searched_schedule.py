"""A local search over a finished plan's schedule, for small traces only.

The members decide gaps one at a time, each with the timing its planner's estimate
liked best then; on a short step whose excess is a few large buffers and weights that
must take turns on the link, that leaves plans whose copies queue behind each other
(three weights triggered at one op, the last of them waited for two milliseconds) where
one gap taken elsewhere, or a swap-in triggered two ops earlier, would not. This search
works on the plan itself: the plan's :class:`~.engine.schedule.Schedule` (each buffer's
gaps off the device, with the op its bytes are freed at, ``resident_until``, and the op
its swap-in is triggered at, ``resident_from``), read back from its residencies and
actions (:func:`~.read_schedule.schedule_of`), and every candidate placed
(:func:`~.engine.placement.place_schedule`) and simulated: the simulator has the last
word, not an estimate. A *move* changes one gap:

- takes it back onto the device, or takes an idle gap off it (a swap, at each trigger op
  its gap allows; a recompute where the buffer has a recipe);
- moves its swap-in's trigger or the op its bytes are freed at to another op;

and where that leaves ops over the budget, the move is *repaired*: at the fullest op, the
buffer idle there that is used again last (Belady's rule: its copy in has the most time;
ties: one whose bytes cover the excess, the smallest) leaves the device there, by
widening a gap of its already taken or taking its idle gap with a hole over the gap's ops
over the budget, until every op fits::

    op:          13  14  15  16  17  18  19
    move:        weight w's swap-in triggered at 15 instead of 17 (lands before op 19)
    over:            ..  ..  ##  ##            ops 15, 16 over the budget by w's bytes
    repair:      gap of v (idle 13..21) widened to [15, 17): v leaves there instead

The search climbs: moves in a seeded random order, the first that simulates faster is
taken (first improvement); at a local optimum it restarts from its best schedule with
:data:`KICK_MOVES` random moves, and a climb ends after :data:`STALL_PLACEMENTS`
placements without a faster plan; a second climb (:data:`CLIMBS`) starts from the plan's
own schedule again, the moves in another order, and a last one from the best schedule
found, where a wrap gap may also be newly taken in the iteration's head (:func:`_new_gaps`),
within ``BudgetParams.schedule_evaluations`` placed schedules in all (and, capped,
:data:`REPAIRS_PER_PLACEMENT` times as many repaired candidates; deterministic: bounded by
counts, not the clock). Each evaluation is a placement and a simulation, so ``auto`` runs
it only on traces of at most ``BudgetParams.schedule_max_buffers`` buffers.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from cupool.core.vocabulary import Plan, Trace
from cupool.planning.budget.engine.placement import Decision, PlacementParams, place_schedule
from cupool.planning.budget.engine.residency import (
    HEAD_OUT_OP,
    residency_intervals,
    resident_bytes,
)
from cupool.planning.budget.engine.schedule import (
    RECOMPUTE,
    SWAP,
    ChainRecompute,
    Gap,
    IdleGap,
    Schedule,
    trace_index,
)
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.read_schedule import schedule_of
from cupool.planning.budget.result import BudgetResult

POLICY = "schedule-search"
"""The policy name of the plans the search places."""
STALL_PLACEMENTS = 400
"""A climb ends after this many placements without a faster plan (most of the
near-budget shapes' gains come within the first 400 placements), or after
:data:`STALL_PER_MOVE` per move of the plan's schedule when that is fewer (a small trace's
few moves are all tried long before)."""
STALL_PER_MOVE = 2
IDLE_ROUNDS = 3
"""A climb also ends after this many rounds in a row (every move of its schedule, then a
kick) that placed no schedule not placed before: a small trace's neighbourhood is used up."""
REPAIRS_PER_PLACEMENT = 2
"""Candidate schedules a capped search may build and repair, per placement it may make
(:func:`schedule_searched`)."""
MIN_OVERHEAD = 0.01
"""Plans closer to the ideal iteration than this are not searched (on the test suite's
small traces such plans were never made faster, at 1-8 s each)."""
CLIMBS = 2
"""Climbs from the plan's schedule at most (the second in another order of moves: on
near-budget-1 at 70% on Gen5 it found 49.0% where the first stalled at 57.2%)."""
CLIMBS_SHARE = 0.5
"""The part of the placements those climbs may make; the last climb has the rest."""
KICK_MOVES = 3
"""Random moves that restart the climb from the best schedule at a local optimum."""
REPAIR_STEPS = 40
"""Gaps a repair may take or widen before the move is dropped."""
IMPROVEMENT_US = 1e-6
"""A candidate replaces the current schedule only when faster by more than this."""
HEAD_TRIGGERS = 6
"""Swap-in triggers offered for a wrap gap newly taken in the iteration's head: the ops
up to its first use (the search's moves re-time it further)."""


class Searched(NamedTuple):
    """The search's outcome: the fastest plan it placed (``None``: none beat the start),
    its simulation, and the schedules it placed; ``climbed``: the fastest before the last
    climb (with wrap gaps in the head) made it faster, else ``None`` (each may refine
    further than the other)."""

    result: BudgetResult | None
    simulation: object
    evaluations: int
    climbed: Searched | None = None


@dataclass(frozen=True)
class _Move:
    """Replace gap ``old`` (``None``: none) of a buffer by ``new`` (``None``: keep the
    buffer on the device there)."""

    old: Gap | None
    new: Gap | None


class _Evaluator:
    """Places and simulates schedules, each once (keyed by its set of gaps)."""

    def __init__(self, trace: Trace, budget_bytes: int, cost, params: BudgetParams,
                 capped: bool = False) -> None:
        self.trace, self.budget, self.cost = trace, budget_bytes, cost
        self.placement = PlacementParams(params.offset_solver, 1)
        self.seen: dict[frozenset, tuple[float, BudgetResult | None, object]] = {}
        self.max_chain = params.max_chain
        self.repairs = 0
        self.repair_limit = (REPAIRS_PER_PLACEMENT * params.schedule_evaluations if capped
                             else math.inf)

    def repaired(self, schedule: Schedule) -> Schedule | None:
        """:func:`_repaired` of ``schedule`` within the budget, counted."""
        self.repairs += 1
        return _repaired(self.trace, schedule, self.budget, self.max_chain)

    def __call__(self, schedule: Schedule) -> tuple[float, BudgetResult | None, object]:
        from cupool.sim.simulator import simulate

        key = _key(schedule)
        if key not in self.seen:
            result = place_schedule(self.trace, self.budget, self._decide(schedule), POLICY,
                                    self.placement, time.perf_counter())
            if result.feasible:
                sim = simulate(result.trace, result.plan, self.cost, validate=False)
                self.seen[key] = (sim.iteration_us, result, sim)
            else:
                self.seen[key] = (float("inf"), None, None)
        return self.seen[key]

    def _decide(self, schedule: Schedule):
        def decide(internal: int) -> Decision:
            if internal != self.budget:  # the schedule is fixed: no smaller budget helps
                return Decision(None, reason=f"{POLICY}: a fixed schedule")
            return Decision(schedule, {})
        return decide


def _key(schedule: Schedule) -> frozenset:
    return frozenset([*(g for gaps in schedule.gaps.values() for g in gaps),
                      *((c.buffer_id, c.op) for c in schedule.chains)])


def _with(schedule: Schedule, move: _Move) -> Schedule:
    """A copy of ``schedule``'s gaps with ``move`` made (no chain recomputes:
    :func:`_repaired` adds those its recomputes need)."""
    gaps = {b: list(gs) for b, gs in schedule.gaps.items()}
    buffer_id = (move.old or move.new).buffer_id
    held = gaps.setdefault(buffer_id, [])
    if move.old is not None:
        held.remove(move.old)
    if move.new is not None:
        held.append(move.new)
    if not held:
        del gaps[buffer_id]
    return Schedule(gaps)  # the repair chains what the recomputes still need


def _taken(schedule: Schedule) -> dict[tuple[int, int, int], Gap]:
    """The schedule's gaps by ``(buffer_id, prev_use, next_use)``."""
    return {(g.buffer_id, g.prev_use, g.next_use): g
            for gaps in schedule.gaps.values() for g in gaps}


def _moves(trace: Trace, schedule: Schedule, heads: bool = False) -> list[_Move]:
    """Every move of one gap (module docstring), in a fixed order; with ``heads``, also
    wrap gaps newly taken in the iteration's head (:func:`_new_gaps`)."""
    index, taken = trace_index(trace), _taken(schedule)
    out: list[_Move] = []
    for idle in index.gaps:
        out.extend(_gap_moves(trace, idle, taken.get(tuple(idle)), heads))
    return out


def _gap_moves(trace: Trace, idle: IdleGap, gap: Gap | None, heads: bool = False
               ) -> list[_Move]:
    """The moves of one idle gap: taken off the device (``gap`` is ``None``), else put
    back or re-timed."""
    n = trace.num_ops
    if gap is None:
        return [_Move(None, new)
                for new in _new_gaps(idle, n, trace_index(trace).recipes, heads)]
    out = [_Move(gap, None)]
    if gap.mode != SWAP:
        return out
    if gap.head:  # copied out after op 0, back by its first use
        froms = range(gap.resident_until, gap.next_use + 1)
        untils = range(1, gap.resident_from + 1)
    elif gap.wraps and gap.resident_from >= gap.resident_until:  # back in the tail
        froms = range(gap.resident_until, n)
        untils = range(gap.prev_use + 1, gap.resident_from + 1)
    elif gap.wraps:
        froms, untils = range(0, gap.next_use + 1), range(gap.prev_use + 1, n + 1)
    else:
        froms = range(gap.resident_until, gap.next_use + 1)
        untils = range(gap.prev_use + 1, gap.resident_from + 1)
    out.extend(_Move(gap, replace(gap, resident_from=f)) for f in froms
               if f != gap.resident_from)
    out.extend(_Move(gap, replace(gap, resident_until=u)) for u in untils
               if u != gap.resident_until)
    return out


def _new_gaps(idle: IdleGap, n: int, recipes, heads: bool = False) -> list[Gap]:
    """The ways to take an idle gap off the device: a swap whose bytes free after its
    previous use, at each trigger op; a recompute where the buffer has a recipe. Across
    the boundary: copied out after the last use and back at op 0, and with ``heads`` in
    the iteration's head too (copied out after op 0, back at one of the
    :data:`HEAD_TRIGGERS` ops up to its first use). A persistent buffer written by the
    update at the end of the step is dirty when the step begins, so its first gap in the
    step needs a copy out after a forward use, when the link may be busiest; taken in the
    head, its copy runs while the step begins instead and that gap is a drop."""
    buffer_id, prev_use, next_use = idle
    if idle.wraps:
        triggers = range(max(HEAD_OUT_OP + 2, next_use - HEAD_TRIGGERS + 1), next_use + 1)
        return [Gap(buffer_id, prev_use, next_use, SWAP, prev_use + 1, 0),
                *(Gap(buffer_id, prev_use, next_use, SWAP, HEAD_OUT_OP + 1, f)
                  for f in (triggers if heads else ()))]
    out = [Gap(buffer_id, prev_use, next_use, SWAP, prev_use + 1, f)
           for f in range(prev_use + 1, next_use + 1)]
    if buffer_id in recipes:
        out.append(Gap(buffer_id, prev_use, next_use, RECOMPUTE, prev_use + 1, next_use))
    return out


def _covers(gap: Gap, op: int) -> bool:
    """Whether ``gap``'s hole (the ops its bytes are off the device) holds ``op``."""
    if gap.wraps:
        return op >= gap.resident_until or op < gap.resident_from
    return gap.resident_until <= op < gap.resident_from


def _repaired(trace: Trace, schedule: Schedule, budget_bytes: int,
              max_chain: int) -> Schedule | None:
    """``schedule`` with gaps taken or widened until every op fits the budget (module
    docstring), or ``None`` when no idle buffer is left at an op over it."""
    index, n = trace_index(trace), trace.num_ops
    for _step in range(REPAIR_STEPS):
        intervals = residency_intervals(trace, schedule)
        live = resident_bytes(trace, intervals)
        over = np.flatnonzero(live > budget_bytes)
        if not len(over):
            chained = _chained(schedule, intervals, index.recipes, max_chain)
            if chained is None or chained is schedule:
                return chained
            schedule = chained  # the chains' one-op residencies may need room too
            continue
        op = int(over[np.argmax(live[over])])
        excess = int(live[op]) - budget_bytes
        taken = _taken(schedule)
        options = []
        for idle in index.gaps:
            if not idle.idle_at(op):
                continue
            gap = taken.get(tuple(idle))
            new = _widened(gap, op) if gap is not None else _opened(idle, op, over, n)
            if new is not None:
                options.append(_Option(index.sizes[idle.buffer_id], idle.buffer_id,
                                       _Move(gap, new)))
        if not options:
            return None
        chosen = max(options, key=lambda o: (_ops_ahead(o.move.new.next_use, op, n),
                                             o.size >= excess, -o.size, -o.buffer_id))
        schedule = _with(schedule, chosen.move)
    return None


def _chained(schedule: Schedule, intervals, recipes, max_chain: int) -> Schedule | None:
    """``schedule`` with a chain recompute (:class:`~.engine.schedule.ChainRecompute`) for
    each input a recompute does not find resident where it runs, the chains' own inputs
    likewise, up to ``max_chain`` deep; ``schedule`` itself when every recompute finds its
    inputs; ``None`` when an input is not there and cannot be re-made (no recipe, too deep,
    or resident there but still being copied in)."""
    held: dict[int, list] = {}
    for r in intervals:
        held.setdefault(r.buffer_id, []).append(r)
    arriving = {(g.buffer_id, g.resident_from): g.next_use
                for gaps in schedule.gaps.values() for g in gaps if g.mode == SWAP}
    pending = [(g.buffer_id, g.resident_from, 0) for gaps in schedule.gaps.values()
               for g in gaps if g.mode == RECOMPUTE]
    pending += [(c.buffer_id, c.op, c.depth) for c in schedule.chains]
    added: list[ChainRecompute] = []
    made = {(c.buffer_id, c.op) for c in schedule.chains}
    while pending:
        buffer_id, op, depth = pending.pop()
        for source in recipes[buffer_id][1]:
            holder = next((r for r in held.get(source, ()) if r.start <= op < r.end), None)
            if holder is not None:
                if arriving.get((source, holder.start), holder.start) > op:
                    return None  # its copy in has not landed when the recompute runs
                continue
            if (source, op) in made:
                continue
            if source not in recipes or depth + 1 > max_chain:
                return None
            made.add((source, op))
            added.append(ChainRecompute(source, op, depth + 1))
            pending.append((source, op, depth + 1))
    if not added:
        return schedule
    return Schedule({b: list(gs) for b, gs in schedule.gaps.items()},
                    [*schedule.chains, *added])


class _Option(NamedTuple):
    """A way for the repair to free ``size`` bytes of buffer ``buffer_id`` at an op."""

    size: int
    buffer_id: int
    move: _Move


def _ops_ahead(next_use: int, op: int, n: int) -> int:
    """Ops from ``op`` to ``next_use`` (across the iteration boundary when not after it)."""
    return next_use - op if next_use > op else next_use + n - op


def _widened(gap: Gap, op: int) -> Gap | None:
    """A taken swap gap whose hole also covers ``op`` (``None``: it already does, or it is
    a recompute)."""
    if gap.mode != SWAP or _covers(gap, op):
        return None
    if gap.wraps:
        return (replace(gap, resident_until=op) if op > gap.prev_use
                else replace(gap, resident_from=op + 1))
    return replace(gap, resident_until=min(gap.resident_until, op),
                   resident_from=max(gap.resident_from, op + 1))


def _opened(idle: IdleGap, op: int, over: np.ndarray, n: int) -> Gap:
    """``idle`` taken off the device by a swap whose hole spans its ops over the budget
    (from the first to the last; across the boundary, on ``op``'s side of it)."""
    buffer_id, prev_use, next_use = idle
    if idle.wraps:
        if op > prev_use:
            return Gap(buffer_id, prev_use, next_use, SWAP, op, 0)
        return Gap(buffer_id, prev_use, next_use, SWAP, n, op + 1)
    inside = over[(over > prev_use) & (over < next_use)]
    return Gap(buffer_id, prev_use, next_use, SWAP, int(inside[0]), int(inside[-1]) + 1)


def search_schedule(trace: Trace, plan: Plan, iteration_us: float, budget_bytes: int, cost,
                    params: BudgetParams, capped: bool = False) -> Searched:
    """The fastest plan the search finds from ``plan`` (simulated at ``iteration_us``), or
    ``Searched(None, ...)`` when none beats it or no schedule gives ``plan`` back
    (:func:`~.read_schedule.schedule_of`). The plan is placed, not validated: the caller
    validates it."""
    start = schedule_of(trace, plan)
    if start is None:
        return Searched(None, None, 0)
    evaluate = _Evaluator(trace, budget_bytes, cost, params, capped)
    rng = random.Random(params.seed)
    limit = params.schedule_evaluations
    stall = min(STALL_PLACEMENTS, STALL_PER_MOVE * len(_moves(trace, start)))
    value, result, sim = evaluate(start)
    if not value < iteration_us:  # the start is the plan itself, as it was placed
        value, result, sim = iteration_us, None, None
    best = _Best(start, value, result, sim)
    share = math.ceil(CLIMBS_SHARE * limit)
    if capped:
        evaluate.repair_limit = REPAIRS_PER_PLACEMENT * share
    for _climb_run in range(CLIMBS):  # each from the plan's own schedule
        placed = len(evaluate.seen)
        if placed >= share:
            break
        run = _Best(start, value, result, sim)
        _climb(trace, evaluate, run, rng, share, stall)
        best.offer(run.schedule, run.value, run.result, run.simulation)
        if len(evaluate.seen) == placed:
            break
    # then from the best schedule found, wrap gaps may also be taken in the head: a
    # climb of its own, after the others, so that they find what they found without them
    climbed = Searched(best.result, best.simulation, len(evaluate.seen))
    if len(_moves(trace, best.schedule, heads=True)) > len(_moves(trace, best.schedule)):
        if capped:
            evaluate.repair_limit = REPAIRS_PER_PLACEMENT * limit
        _climb(trace, evaluate, best, rng, limit, stall, heads=True)
    if best.result is climbed.result:
        return climbed._replace(evaluations=len(evaluate.seen))
    return Searched(best.result, best.simulation, len(evaluate.seen), climbed)


@dataclass
class _Best:
    """The fastest schedule placed so far, its iteration and its placed plan (``None``
    while it is the start plan itself) and simulation."""

    schedule: Schedule
    value: float
    result: BudgetResult | None
    simulation: object

    def offer(self, schedule: Schedule, value: float, result, simulation) -> bool:
        """Keep ``schedule`` when it is faster; whether it was."""
        if value < self.value - IMPROVEMENT_US:
            self.schedule, self.value = schedule, value
            self.result, self.simulation = result, simulation
            return True
        return False


def _climb(trace: Trace, evaluate: _Evaluator, best: _Best, rng: random.Random, limit: int,
           stall: int, heads: bool = False) -> None:
    """First improvement from the best schedule, every move (``heads``: :func:`_moves`)
    in a seeded random order, restarted by :func:`_kicked` at a local optimum, until
    ``limit`` schedules are placed, ``stall`` without a faster one, or
    :data:`IDLE_ROUNDS` rounds none."""
    current, current_value = best.schedule, best.value
    found_at = len(evaluate.seen)  # placements when the best was last improved

    def spent() -> bool:
        placed = len(evaluate.seen)
        return (placed >= limit or placed - found_at >= stall
                or evaluate.repairs >= evaluate.repair_limit)

    idle = 0  # rounds in a row that placed nothing new
    for _round in range(limit):  # a round that places nothing new still ends
        if spent() or idle >= IDLE_ROUNDS:
            return
        placed = len(evaluate.seen)
        moves = _moves(trace, current, heads)
        rng.shuffle(moves)
        improved = False
        for move in moves:
            if spent():
                return
            candidate = evaluate.repaired(_with(current, move))
            if candidate is None:
                continue
            value, result, sim = evaluate(candidate)
            if value < current_value - IMPROVEMENT_US:
                current, current_value, improved = candidate, value, True
                if best.offer(candidate, value, result, sim):
                    found_at = len(evaluate.seen)
                break
        if improved:
            idle = 0
            continue
        idle = idle + 1 if len(evaluate.seen) == placed else 0
        current = _kicked(trace, best.schedule, evaluate, rng, heads)
        if current is None or spent():
            return
        current_value = evaluate(current)[0]


def _kicked(trace: Trace, schedule: Schedule, evaluate: _Evaluator,
            rng: random.Random, heads: bool = False) -> Schedule | None:
    """``schedule`` after :data:`KICK_MOVES` random moves, each repaired (``None``: no move
    could be repaired)."""
    for _kick in range(KICK_MOVES):
        moves = _moves(trace, schedule, heads)
        rng.shuffle(moves)
        for move in moves:
            candidate = evaluate.repaired(_with(schedule, move))
            if candidate is not None:
                schedule = candidate
                break
        else:
            return None
    return schedule


SCHEDULE_SEARCHED = "schedule searched"
"""What the member's name in ``auto``'s result gets after it when the search made the
chosen plan faster."""


def schedule_searched(trace: Trace, best: BudgetResult, refined, budget_bytes: int, cost,
                      params: BudgetParams, refine,
                      capped: bool = False) -> tuple[BudgetResult, object]:
    """``auto``'s chosen plan (member ``best``'s, as ``refined``: a
    :class:`~.auto.Refined`) improved by the search over its schedule and refined again
    (``refine``: :func:`~.auto.refine`), when that is faster and passes the validator; else
    ``best`` and ``refined`` as they were. Only on traces of at most
    ``params.schedule_max_buffers`` buffers and ``params.schedule_max_gaps`` idle gaps, on
    plans at least :data:`MIN_OVERHEAD` over the ideal iteration (the last resort's
    included: at the near-budget shapes' largest working set it found plans 5-12 points
    faster). ``capped``: the search builds at most :data:`REPAIRS_PER_PLACEMENT` repaired
    candidates per placement it may make (``auto`` caps the searches it makes because of
    the last resort: on a persistent-heavy step's largest working set one rebuilt placed
    candidates for tens of seconds and found nothing; uncapped, the members' plans of an
    inference step without ``writes`` searched 40-75 points faster)."""
    if (len(trace.buffers) > params.schedule_max_buffers or not params.schedule_evaluations
            or refined.simulation.overhead < MIN_OVERHEAD
            or len(trace_index(trace).gaps) > params.schedule_max_gaps):
        return best, refined
    from cupool.check import validate_plan

    searched = search_schedule(trace, refined.plan, refined.simulation.iteration_us,
                               budget_bytes, cost, params, capped)
    chosen = (best, refined)
    for found in (searched.climbed, searched):
        if (found is None or found.result is None
                or not validate_plan(trace, found.result.plan).valid):
            continue
        entry = BudgetResult(found.result.plan, trace, best.policy,
                             simulation=found.simulation,
                             member=f"{best.member}, {SCHEDULE_SEARCHED}")
        again = refine(trace, entry, cost, params)
        if again.simulation.iteration_us < chosen[1].simulation.iteration_us:
            chosen = (entry, again._replace(stats={
                **again.stats, "schedule_evaluations": searched.evaluations}))
    return chosen


__all__ = ["POLICY", "SCHEDULE_SEARCHED", "Searched", "schedule_searched", "search_schedule"]
