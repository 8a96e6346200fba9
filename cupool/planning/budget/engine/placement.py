"""Offsets for a planner's residencies, and the loop every planner runs through.

A planner is a ``decide(internal_budget)`` callback returning a schedule
(:mod:`.schedule`); :func:`place_schedule` turns its residencies (:mod:`.residency`) into
a static offset problem and solves it within the budget. Fragmentation may make the
offsets need more than the budget although no op has more bytes resident than the budget:
the fallback offset solvers try next, and when none fits the planner decides again for an
internal budget lowered by the overshoot::

    decide(budget) ─► residencies ─► offsets ≤ budget? ─ yes ─► feasible plan
         ▲                                │ no (all solvers)
         └──── decide(budget − overshoot) ┘         (at most ``rounds`` times)

A persistent buffer resident at both ends of the iteration is one stay on the device
across the boundary: its first and last residencies get one offset
(:func:`tie_boundary_pairs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from cupool.check import validate_offsets
from cupool.core.vocabulary import PERSISTENT, Residency, SolveStatus, Trace
from cupool.errors import SolverError
from cupool.planning.budget.engine.residency import (
    ResidencyInterval,
    assemble,
    failed_plan,
    residency_intervals,
    resident_bytes,
)
from cupool.planning.budget.engine.schedule import SWAP, Gap, Schedule, trace_index
from cupool.planning.budget.result import BudgetResult
from cupool.planning.problem import StaticProblem
from cupool.planning.solvers import SolverParams
from cupool.planning.static import solve


@dataclass(frozen=True)
class PlacementParams:
    """How a schedule's residencies get offsets.

    offset_solver: static solver tried first (``"greedy-size"`` is fast; ``"auto"`` tries
      harder when fragmentation matters); :data:`FALLBACK_OFFSET_SOLVERS` try after it.
    rounds: times the planner decides again, for an internal budget lowered by the
      overshoot, when no solver places the residencies within the budget.
    """

    offset_solver: str = "greedy-size"
    rounds: int = 5


@dataclass(frozen=True)
class Decision:
    """What a planner's ``decide(internal_budget)`` returns to :func:`place_schedule`.

    schedule: the gaps taken off the device; ``None`` when the planner found no way to
      bring every op within the internal budget (``reason`` says which op it failed on).
    stats: planner-specific numbers recorded in the plan's ``stats``.
    intervals: the schedule's residencies (:func:`~.residency.residency_intervals`) when
      the planner made them already (``None``: :func:`place_schedule` makes them).
    """

    schedule: Schedule | None
    stats: dict = field(default_factory=dict)
    reason: str | None = None
    intervals: list[ResidencyInterval] | None = None


OFFSET_SOLVER_PARAMS = SolverParams(time_limit_s=2.0)
"""What the static solvers get when they place residencies."""


class PlacedOffsets(NamedTuple):
    """What :func:`place` found: ``offsets[k]`` for ``intervals[k]`` (``None``: no placement
    within the budget) and the arena they need (when ``None``: what the solver needed, 0
    if unknown). ``untied``: the persistent buffers whose stay across the iteration
    boundary kept two offsets (only when asked for, :func:`place`'s ``untie``): the plan
    must copy them out after their last use and in for their first (:func:`untie`)."""

    offsets: np.ndarray | None
    arena_bytes: int
    untied: tuple[int, ...] = ()


class BoundaryPair(NamedTuple):
    """Indices of a persistent buffer's first residency (from op 0) and last one (to the
    end of the iteration): one stay on the device across the iteration boundary."""

    first: int
    last: int


def place(trace: Trace, intervals: list[ResidencyInterval], budget_bytes: int,
          solver: str = "greedy-size", params: SolverParams = OFFSET_SOLVER_PARAMS,
          untie: bool = False) -> PlacedOffsets:
    """Offsets for the residencies within ``budget_bytes`` by the static ``solver`` (with
    ``params``). A stay across the iteration boundary that cannot take one offset fails
    the placement, unless ``untie``: its two residencies then keep the solver's offsets
    and its buffer is listed in ``untied``. The offsets are checked by the validator here
    (:class:`SolverError` when it refuses them), those with stays left apart only where a
    repair keeps them (:func:`repair_placement`: most are discarded)."""
    if not intervals:
        return PlacedOffsets(np.zeros(0, dtype=np.int64), 0)
    problem = _problem(trace, intervals, budget_bytes)
    # most offsets are discarded (over the budget, or pairs not tied): the validator
    # checks those kept, after the tie
    result = solve(problem, solver, params, validate=False)
    if result.offsets is None:
        return PlacedOffsets(None, 0)
    arena = problem.arena_of(result.offsets)
    if arena > budget_bytes:
        return PlacedOffsets(None, arena)
    offsets = np.array(result.offsets, dtype=np.int64)
    loose = tie_pairs(trace, intervals, offsets, budget_bytes)
    if loose and not untie:
        return PlacedOffsets(None, 0)
    if not loose:  # offsets with stays left apart are checked where a repair keeps them
        _check(problem, offsets, f"offsets of solver {solver!r} with boundary pairs tied")
    return PlacedOffsets(offsets, int((offsets + problem.sizes).max()),
                         tuple(sorted(intervals[p.first].buffer_id for p in loose)))


def _problem(trace: Trace, intervals: list[ResidencyInterval],
             budget_bytes: int | None) -> StaticProblem:
    """The static offset problem of the residencies, in their order."""
    sizes = trace_index(trace).sizes
    buffer_ids, starts, ends = zip(*intervals, strict=True)
    return StaticProblem.from_arrays(starts, ends, [sizes[b] for b in buffer_ids],
                                     capacity=budget_bytes, num_ops=trace.num_ops,
                                     name=trace.name)


def _check(problem: StaticProblem, offsets: np.ndarray, what: str) -> None:
    """Raise :class:`SolverError` unless the validator accepts ``offsets`` (``what``
    names them in the message)."""
    report = validate_offsets(problem.with_capacity(None), offsets)
    if not report.valid:
        raise SolverError(f"{what} are invalid: {report.message}")


def boundary_pairs(trace: Trace, intervals: list[ResidencyInterval]) -> list[BoundaryPair]:
    """Every persistent buffer resident across the iteration boundary in two residencies:
    its last one ends at ``num_ops`` and its first starts at 0. Across the boundary the
    two are one stay on the device, so they need one offset: the bytes cannot move between
    iterations."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for k, r in enumerate(intervals):
        if r.start == 0:
            first[r.buffer_id] = k
        if r.end == trace.num_ops:
            last[r.buffer_id] = k
    return [BoundaryPair(k, last[b]) for b, k in first.items()
            if b in last and last[b] != k and trace.buffer(b).kind == PERSISTENT]


def tie_boundary_pairs(trace: Trace, intervals: list[ResidencyInterval], offsets: np.ndarray,
                       budget_bytes: int) -> bool:
    """:func:`tie_pairs`: ``True`` when every pair took one offset."""
    return not tie_pairs(trace, intervals, offsets, budget_bytes)


def tie_pairs(trace: Trace, intervals: list[ResidencyInterval], offsets: np.ndarray,
              budget_bytes: int) -> list[BoundaryPair]:
    """Give both residencies of each :func:`boundary_pairs` pair one offset, in place; the
    pairs that cannot take one keep the solver's two offsets and are returned.

    Where the solver placed them apart, the pair keeps the last residency's offset if that
    is free during the first one, else the first's if free during the last, else the
    lowest offset free during both; none when none fits within ``budget_bytes``::

        bytes ^        [0, 3) at 0 and [7, 10) at 64  ->  both at 64 when [0, 3) is free there
              |  first                last
              +----------------------------> op
    """
    pairs = [p for p in boundary_pairs(trace, intervals) if offsets[p.first] != offsets[p.last]]
    if not pairs:
        return []
    starts = np.array([r.start for r in intervals], dtype=np.int64)
    ends = np.array([r.end for r in intervals], dtype=np.int64)
    by_id = trace_index(trace).sizes
    sizes = np.array([by_id[r.buffer_id] for r in intervals], dtype=np.int64)
    loose = []
    for pair in pairs:
        k, j = pair.first, pair.last
        layout = _Layout(starts, ends, sizes, offsets, pair)
        size = int(sizes[k])
        if layout.free(int(offsets[j]), size, budget_bytes, k):
            offsets[k] = offsets[j]
        elif layout.free(int(offsets[k]), size, budget_bytes, j):
            offsets[j] = offsets[k]
        else:
            lowest = layout.lowest_free(size, k, j)
            if lowest + size > budget_bytes:
                loose.append(pair)
                continue
            offsets[k] = offsets[j] = lowest
    return loose


@dataclass(frozen=True)
class _Layout:
    """The placed residencies as arrays, minus a pair being moved (``moving``)."""

    starts: np.ndarray
    ends: np.ndarray
    sizes: np.ndarray
    offsets: np.ndarray
    moving: BoundaryPair

    def _during(self, *spans: int) -> np.ndarray:
        """Residencies other than the pair that share an op with any of ``spans``."""
        mask = np.zeros(len(self.starts), dtype=bool)
        for a in spans:
            mask |= (self.starts < self.ends[a]) & (self.ends > self.starts[a])
        mask[[self.moving.first, self.moving.last]] = False
        return mask

    def free(self, offset: int, size: int, budget_bytes: int, span: int) -> bool:
        """``[offset, offset + size)`` is within the budget and unused during ``span``."""
        mask = self._during(span)
        return offset + size <= budget_bytes and not bool(np.any(
            mask & (self.offsets < offset + size) & (self.offsets + self.sizes > offset)))

    def lowest_free(self, size: int, *spans: int) -> int:
        """The lowest offset with ``size`` bytes unused during every one of ``spans``."""
        mask = self._during(*spans)
        return lowest_gap(self.offsets[mask], (self.offsets + self.sizes)[mask], size)


def lowest_gap(lows: np.ndarray, highs: np.ndarray, size: int) -> int:
    """The lowest offset ``>= 0`` with ``size`` bytes free of the ranges ``[lows, highs)``:
    walking the ranges by their low end, the first gap between the highest end so far and
    the next range's low end that holds ``size`` bytes, else the highest end of all."""
    if not len(lows):
        return 0
    order = np.argsort(lows, kind="stable")
    lows, highs = lows[order], highs[order]
    reached = np.maximum(np.concatenate(([0], np.maximum.accumulate(highs)[:-1])), 0)
    fits = np.flatnonzero(lows - reached >= size)
    return int(reached[fits[0]]) if len(fits) else max(0, int(highs.max()))


FALLBACK_OFFSET_SOLVERS = ("best-fit", "greedy-breadth")
"""Static solvers tried, in order, when ``PlacementParams.offset_solver`` cannot place the
residencies within the budget, before re-planning for a smaller internal budget."""


def solvers_place(trace: Trace, intervals: list[ResidencyInterval], budget_bytes: int,
                  offset_solver: str) -> bool:
    """Whether ``offset_solver`` or one of :data:`FALLBACK_OFFSET_SOLVERS` (the ladder
    :func:`place_schedule` climbs) places ``intervals`` within ``budget_bytes``; any of
    them placing means the ladder places too, so the quickest are tried first."""
    solvers = dict.fromkeys((offset_solver, *FALLBACK_OFFSET_SOLVERS))
    return any(place(trace, intervals, budget_bytes, solver).offsets is not None
               for solver in sorted(solvers, key=lambda name: name != "greedy-breadth"))


class OffsetCache:
    """Offsets already found for a set of residencies within a budget, so that planners of
    one trace that decide the same schedule (``auto``'s members often do) solve its offset
    problem once. The static solvers are deterministic: a hit is what solving again would
    give."""

    def __init__(self) -> None:
        self._found: dict[tuple, PlacedOffsets] = {}
        # by (residencies, budget): each solver's :func:`place` with ``untie``
        self._by_solver: dict[tuple, dict[str, PlacedOffsets]] = {}

    def place(self, trace: Trace, intervals: list[ResidencyInterval], budget_bytes: int,
              solvers: tuple[str, ...], untie: bool = False) -> PlacedOffsets:
        """:func:`place` by each of ``solvers`` in turn until one fits (the last one's
        answer when none does), or what an earlier call with the same arguments found
        (``untie`` as in :func:`_place_first`); a solver already asked for these
        residencies (:meth:`place_one`) is not asked again."""
        residencies = tuple(intervals)
        key = (residencies, budget_bytes, solvers, untie)
        found = self._found.get(key)
        if found is None:
            found = _place_first(trace, intervals, budget_bytes, solvers, untie,
                                 lambda solver: self._place_one(trace, intervals, residencies,
                                                                budget_bytes, solver))
            self._found[key] = found
        return found

    def place_one(self, trace: Trace, intervals: list[ResidencyInterval], budget_bytes: int,
                  solver: str) -> PlacedOffsets:
        """:func:`place` by ``solver`` with ``untie`` (its offsets with the stays across the
        boundary it could not tie listed in ``untied``), solved once for these residencies
        and budget: what :meth:`place` then asks of that solver."""
        return self._place_one(trace, intervals, tuple(intervals), budget_bytes, solver)

    def _place_one(self, trace: Trace, intervals: list[ResidencyInterval],
                   residencies: tuple, budget_bytes: int, solver: str) -> PlacedOffsets:
        by_solver = self._by_solver.setdefault((residencies, budget_bytes), {})
        placed = by_solver.get(solver)
        if placed is None:
            placed = by_solver[solver] = place(trace, intervals, budget_bytes, solver,
                                               untie=True)
        return placed


def _place_first(trace: Trace, intervals: list[ResidencyInterval], budget_bytes: int,
                 solvers: tuple[str, ...], untie: bool = False,
                 place_by=None) -> PlacedOffsets:
    """The first of ``solvers`` whose offsets fit the budget with every stay across the
    boundary tied; with ``untie``, when none ties them all, the first whose offsets fit
    with some left untied (:attr:`PlacedOffsets.untied`). ``place_by(solver)`` answers
    as :func:`place` with ``untie`` does (default: it)."""
    loose = None
    for solver in solvers:
        placed = (place(trace, intervals, budget_bytes, solver, untie=True)
                  if place_by is None else place_by(solver))
        if placed.offsets is not None:
            if not placed.untied:
                return placed
            loose = loose or placed
            placed = PlacedOffsets(None, 0)  # what a tie that fails answers
    return loose if untie and loose is not None else placed


REPAIR_EXACT = SolverParams(time_limit_s=OFFSET_SOLVER_PARAMS.time_limit_s, max_nodes=1_000)
"""The exact offset solver's limits when it repairs a placement the greedy solvers could
not make (:func:`repair_placement`): a node cap, reached at the same node on every
machine long before the time limit (a safety net): about 0.1 s on 500
residencies. A repair runs once per placement round of every member that needs one."""

REPAIR_EXACT_SMALL = SolverParams(time_limit_s=OFFSET_SOLVER_PARAMS.time_limit_s,
                                  max_nodes=5_000)
"""The same for at most :data:`REPAIR_EXACT_SMALL_RESIDENCIES` residencies, where a node
costs little: on-demand's schedule of 88 residencies at the near-budget shape's largest
working set needs more than 1,000 nodes to place (without it, ``auto`` falls back to a
plan 22 points slower at Gen5)."""

REPAIR_EXACT_SMALL_RESIDENCIES = 200

REPAIR_EXACT_MAX_RESIDENCIES = 1000
"""Residency sets larger than this are not given to the exact solver in a repair (its
preparation is quadratic in the live set: seconds at 10,000 residencies)."""


def untie(trace: Trace, schedule: Schedule, buffers: tuple[int, ...]) -> Schedule | None:
    """``schedule`` with each of ``buffers`` (persistent, staying on the device across the
    iteration boundary) copied out after its last use and back in from op 0 for its first:
    its wrap gap taken by a copy, its residencies unchanged, so that its first and last
    residency may keep two offsets. ``None`` when one of them has no uses, or a wrap gap
    already (a copy in the tail or the head)."""
    gaps = {b: list(g) for b, g in schedule.gaps.items()}
    for buffer_id in buffers:
        buffer = trace.buffer(buffer_id)
        if buffer.kind != PERSISTENT or not buffer.uses or any(
                g.wraps for g in gaps.get(buffer_id, ())):
            return None
        gaps.setdefault(buffer_id, []).append(
            Gap(buffer_id, max(buffer.uses), min(buffer.uses), SWAP, trace.num_ops, 0))
    return Schedule(gaps, list(schedule.chains))


class Repaired(NamedTuple):
    """A placement :func:`repair_placement` found: its offsets and the schedule they place
    (the planner's, or with stays across the boundary split by copies)."""

    placed: PlacedOffsets
    schedule: Schedule
    how: str


def repair_placement(trace: Trace, schedule: Schedule, intervals: list[ResidencyInterval],
                     budget_bytes: int, loose: PlacedOffsets | None,
                     tried_first_fit: bool) -> tuple[Repaired | None, Repaired | None]:
    """Offsets for a schedule whose residencies fit the budget op by op but that the offset
    solvers could not place with every stay across the boundary on one offset: the stays
    placed as one item by first fit (:func:`~.firstfit.place_pairs_first_fit`, unless
    ``tried_first_fit``), else the exact solver (node-capped, up to
    :data:`REPAIR_EXACT_MAX_RESIDENCIES` residencies): ``(repaired, None)``. Else
    ``(None, split)``: the stays no offset ties split by a copy (:func:`untie`), on the
    offsets of the first solver that fits them apart (``loose``, else the exact
    solver's), or ``None``. :func:`place_schedule` uses a repair only when no smaller
    budget places the planner's schedule (on the shared traces, the plans made at a
    smaller budget refine further than the same planner's repaired ones)."""
    from cupool.planning.budget.engine.firstfit import place_pairs_first_fit

    if not tried_first_fit:
        placed = place_pairs_first_fit(trace, intervals, budget_bytes)
        if placed.offsets is not None:
            return Repaired(placed, schedule, "first fit, stays as one item"), None
    exact = None
    if len(intervals) <= REPAIR_EXACT_MAX_RESIDENCIES:
        limits = (REPAIR_EXACT_SMALL if len(intervals) <= REPAIR_EXACT_SMALL_RESIDENCIES
                  else REPAIR_EXACT)
        exact = place(trace, intervals, budget_bytes, "exact", limits, untie=True)
        if exact.offsets is not None and not exact.untied:
            return Repaired(exact, schedule, "exact"), None
    return None, _split(trace, schedule, intervals, (loose, exact))


def _split(trace: Trace, schedule: Schedule, intervals: list[ResidencyInterval],
           candidates: tuple[PlacedOffsets | None, ...]) -> Repaired | None:
    """:func:`repair_placement`'s split, on the first of ``candidates`` that has offsets
    (checked by the validator here: :func:`place` leaves offsets with stays apart to
    whoever keeps them)."""
    for candidate in candidates:
        if candidate is None or candidate.offsets is None:
            continue
        split = untie(trace, schedule, candidate.untied)
        if split is not None:
            _check(_problem(trace, intervals, None), candidate.offsets,
                   "offsets with stays across the boundary split by a copy")
            return Repaired(candidate, split, f"{len(candidate.untied)} stays across the "
                                              f"boundary split by a copy")
    return None


def place_schedule(trace: Trace, budget_bytes: int, decide, policy: str,
                   placement: PlacementParams, started: float,
                   stats: dict | None = None, last_resort=None,
                   cache: OffsetCache | None = None) -> BudgetResult:
    """Run ``decide(internal_budget) -> Decision`` and place its schedule's residencies.

    When the offsets need more than the budget (fragmentation), the fallback offset
    solvers try; if none fits, the planner decides again for an internal budget lowered
    by the overshoot (the plans it made before repairs existed stay as they were), and
    when no round places, the first round's schedule is repaired
    (:func:`repair_placement`: first fit with each stay across the boundary as one item,
    the exact solver, or the stays no offset ties split by copies) rather than lost.
    The plan is ``feasible`` or ``over_capacity`` (``reason`` then says
    why); ``stats`` (the policy's own) come first in its ``stats``, then the decision's.
    ``started`` is when planning began (``time.perf_counter()``; the plan's
    ``solve_seconds`` count from it). ``last_resort(trace, intervals, budget_bytes) ->
    PlacedOffsets``, when given, is tried after every solver. ``cache`` shares the
    solvers' offsets with other planners of the same trace.
    """
    stats = stats or {}
    internal = budget_bytes
    reason = "no schedule"
    first = None  # the first round's schedule, intervals, untied offsets and stats
    for round_ in range(placement.rounds):
        decision = decide(internal)
        if decision.schedule is None:
            reason = decision.reason or "the policy found no schedule within the budget"
            break
        intervals = (decision.intervals if decision.intervals is not None
                     else residency_intervals(trace, decision.schedule))
        peak = int(resident_bytes(trace, intervals).max()) if intervals else 0
        if peak > budget_bytes:
            reason = (f"policy left {peak} bytes resident at some op "
                      f"(budget {budget_bytes})")
            break
        solvers = tuple(dict.fromkeys((placement.offset_solver, *FALLBACK_OFFSET_SOLVERS)))
        placed = (cache.place(trace, intervals, budget_bytes, solvers, untie=True)
                  if cache is not None
                  else _place_first(trace, intervals, budget_bytes, solvers, untie=True))
        loose = placed if placed.untied else None
        if loose is not None:
            placed = PlacedOffsets(None, 0)  # the stays across the boundary not all tied
        if placed.offsets is None and last_resort is not None:
            placed = last_resort(trace, intervals, budget_bytes)
        info = {**stats, **decision.stats, "internal_budget_bytes": internal,
                "placement_rounds": round_ + 1, "resident_peak_bytes": peak}
        if placed.offsets is None and round_ == 0:  # repaired only if no round places
            first = (decision.schedule, intervals, loose, info)
        if placed.offsets is not None:
            return _placed(trace, decision.schedule, intervals, placed, None, info,
                           budget_bytes, policy, started)
        over = max(placed.arena_bytes - budget_bytes, budget_bytes // 100, 1)
        internal = max(1, internal - over)
        reason = (f"offsets of the residencies need {placed.arena_bytes} bytes "
                  f"(budget {budget_bytes})" if placed.arena_bytes else
                  f"no offset solver placed the residencies within the budget "
                  f"({budget_bytes} bytes; tried {', '.join(solvers)})")
    if first is not None:  # no smaller budget placed: the first round repaired, not lost
        from cupool.planning.budget.engine.firstfit import place_pairs_first_fit

        schedule, intervals, loose, info = first
        repaired, split = repair_placement(trace, schedule, intervals, budget_bytes, loose,
                                           last_resort is place_pairs_first_fit)
        repaired = repaired or split
        if repaired is not None:
            return _placed(trace, repaired.schedule, intervals, repaired.placed, repaired,
                           info, budget_bytes, policy, started)
    plan = failed_plan(trace, budget_bytes, policy, started, SolveStatus.OVER_CAPACITY,
                       {**stats, "reason": reason})
    return BudgetResult(plan, trace, policy, reason)


def _placed(trace: Trace, schedule: Schedule, intervals: list[ResidencyInterval],
            placed: PlacedOffsets, repaired: Repaired | None, info: dict, budget_bytes: int,
            policy: str, started: float) -> BudgetResult:
    """The feasible plan of ``schedule`` with ``intervals`` at ``placed``'s offsets."""
    residencies = tuple(Residency(int(r.buffer_id), int(r.start), int(r.end), int(o))
                        for r, o in zip(intervals, placed.offsets, strict=True))
    if repaired is not None:
        info = {**info, "placement_repair": repaired.how}
    plan = assemble(trace, schedule, residencies, placed.arena_bytes, budget_bytes, policy,
                    started, info)
    return BudgetResult(plan, trace, policy)
