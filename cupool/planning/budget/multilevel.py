"""``tiers``: multi-level placement (device, pinned host, pageable host) by local search.

Levels: the device (the budget), pinned host memory and pageable host memory, each with
its bandwidth and latency in the cost model (:mod:`cupool.sim.cost`: pageable copies are
slower and cost more per copy). Pinned memory may be limited (``pinned_host_bytes``);
pageable memory is not.

The search starts from the best two-level plan (device + pinned host) that
:func:`~cupool.planning.budget.plan_with_budget` makes (``seed_policies``, ``auto`` by
default) and only ever keeps a plan that simulates faster, so it is never worse than that
plan *by construction*. It walks the ops; at op ``t`` it tries, for the buffers whose
decision sits at ``t``, in a seeded random order:

- **move to another level**: keep a swapped buffer on the device through its gap
  (*device*: the swap disappears), keep a recomputed one (the recompute disappears), turn
  a recompute into a swap to pinned host memory (when the link has room) or a swap into a
  recompute (no host level at all), take the swap-in earlier (the bytes come back to the
  device sooner when it waited), or move a swap between pinned and pageable memory;
- **move within the level**: place a residency (a buffer's stay on the device) at another
  free offset: best-fit smallest hole, at the hole's edge next to the neighbour that dies
  later (the allocation rules of :meth:`~.multilevel_moves.TierState.best_fit`);
- **overwrite**: place a residency that begins at op ``t`` at the offset of one that ends
  at ``t`` (an op's output reuses its dying input's space).

A move that changes when a buffer is resident *re-places the later steps*: when its range
is not free over the new span, it and the residencies in its way that begin at or after
the step are placed again by the allocation rules (in start order); the move is dropped
when they do not fit the budget. Each candidate plan is simulated
(:func:`cupool.sim.simulator.time_iteration`: the times :func:`cupool.sim.simulate`
reports); the cost of a state is ``(iteration_us, read_write_us)``
where ``read_write_us`` is the total time of its copies at their levels' bandwidths.
Between checkpoints (every ``checkpoint_ops`` ops) a move is accepted when it lowers the
cost, or when it lowers the read/write time while the iteration stays within
``tolerance`` (a sideways step that frees the link); at every checkpoint the walk resumes
from the least-cost state seen. Accepted states are checked by the independent swap
validator; the search stops after ``time_limit_s`` or a pass without improvement.

With a pinned-memory limit the seed plan is first made to respect it: swaps whose host
copies would exceed the pinned bytes go to pageable memory, those with the most slack
(longest idle gap per byte) first; that repaired plan is the start of the search (the
comparison with the unlimited two-level plan is then not like for like, and the stats
say so).
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

from cupool.check import validate_plan
from cupool.core.vocabulary import PAGEABLE, Plan, SolveStatus, SwapOut, Trace
from cupool.errors import SolverError
from cupool.planning.budget.multilevel_moves import TierMoves
from cupool.planning.budget.multilevel_state import TierState
from cupool.planning.budget.multilevel_walk import Anchors, apply_move, moves_at, waits
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.result import BudgetResult

if TYPE_CHECKING:
    from cupool.sim.simulator import IterationTimes


@dataclass(frozen=True)
class TierParams:
    """Knobs of the ``tiers`` search.

    seed: seed of the move order; same seed, same inputs → same plan.
    time_limit_s: wall-clock seconds for the search (after the seed plan is made).
    checkpoint_ops: ops between checkpoints, where the walk resumes from the best state.
    tolerance: sideways moves may lengthen the iteration by this fraction at most.
    pinned_host_bytes: pinned host memory available for swaps (``None``: unlimited).
    seed_policies: two-level policies whose best simulated plan seeds the search.
    max_passes: walks over the ops at most (each pass stops early when time is up).
    pageable: whether moves may put swaps on the pageable level (``False``: a two-level
      search, as ``auto``'s final refinement runs it).
    max_evaluations: simulations the search may run (``None``: no limit but the time).
      The search is deterministic for a seed when it ends before ``time_limit_s``: give
      a generous time and a ``max_evaluations`` for runs that must repeat exactly.
    """

    seed: int = 0
    time_limit_s: float = 2.0
    checkpoint_ops: int = 32
    tolerance: float = 0.002
    pinned_host_bytes: int | None = None
    seed_policies: tuple[str, ...] = ("auto",)
    max_passes: int = 3
    max_evaluations: int | None = None
    pageable: bool = True

    def __post_init__(self) -> None:
        if not self.time_limit_s > 0:
            raise SolverError(f"time_limit_s (={self.time_limit_s}) must be > 0 seconds")
        if not isinstance(self.checkpoint_ops, int) or self.checkpoint_ops < 1:
            raise SolverError(f"checkpoint_ops (={self.checkpoint_ops!r}) must be an "
                              f"integer >= 1")
        if not 0 <= self.tolerance < 1:
            raise SolverError(f"tolerance (={self.tolerance}) must be in [0, 1)")
        if self.pinned_host_bytes is not None and (
                not isinstance(self.pinned_host_bytes, int) or self.pinned_host_bytes < 0):
            raise SolverError(f"pinned_host_bytes (={self.pinned_host_bytes!r}) must be an "
                              f"integer >= 0 or None")
        if not self.seed_policies or "tiers" in self.seed_policies:
            raise SolverError(f"seed_policies (={self.seed_policies!r}) must name two-level "
                              f"policies (not 'tiers')")
        if self.max_passes < 1:
            raise SolverError(f"max_passes (={self.max_passes}) must be >= 1")
        if self.max_evaluations is not None and self.max_evaluations < 1:
            raise SolverError(f"max_evaluations (={self.max_evaluations}) must be >= 1")


class TierCost(NamedTuple):
    """What the search minimises, compared in this order: the simulated iteration, then
    the time the copies spend at their levels' bandwidths."""

    iteration_us: float
    read_write_us: float


class Visited(NamedTuple):
    """A state the search reached, with its cost and simulated times."""

    cost: TierCost
    state: TierState
    report: IterationTimes


class _Search:
    """The search's bookkeeping: simulations, validation, seeded move order, counters."""

    def __init__(self, trace: Trace, cost, params: TierParams):
        from cupool.sim.simulator import time_iteration

        self.trace, self.cost, self.params = trace, cost, params
        self._time, self.validate = time_iteration, validate_plan
        self.moves = TierMoves(trace, cost)
        self.rng = random.Random(params.seed)
        self.tried = defaultdict(int)
        self.accepted = defaultdict(int)
        self.evaluations = 0
        self.rejected_invalid = 0

    def visit(self, state: TierState) -> Visited:
        self.evaluations += 1
        times = self._time(self.trace, state.plan(), self.cost)
        return Visited(TierCost(times.iteration_us, times.copying_us), state, times)


def pinned_peak_bytes(trace: Trace, plan: Plan) -> int:
    """Most bytes held in pinned host memory at one op by ``plan``'s swaps."""
    return TierState(trace, plan).pinned_peak_bytes()


def _pinned_ok(state: TierState, limit: int | None) -> bool:
    return limit is None or state.pinned_peak_bytes() <= limit


def _respect_pinned(state: TierState, limit: int) -> TierState:
    """Move swaps to pageable memory until the pinned copies fit ``limit``: the longest
    idle gap per byte first (it can best afford the slower copies)."""
    pairs = []
    for a in state.actions:
        if isinstance(a, SwapOut):
            swap_in = state.paired_swap_in(a)
            if swap_in is not None:
                gap = (swap_in.due_op - a.after_op) % max(state.n, 1)
                pairs.append((-gap / state.sizes[a.buffer_id], a.buffer_id, a.after_op, a,
                              swap_in))
    pairs.sort(key=lambda p: p[:3])
    for _slack, _b, _op, out, swap_in in pairs:
        if _pinned_ok(state, limit):
            break
        state.actions = [replace(x, level=PAGEABLE) if x in (out, swap_in) else x
                         for x in state.actions]
    return state


def _unsearched(trace: Trace, seed_plan: Plan, search, started: float) -> Plan:
    """``seed_plan`` as it is, with the search's ``stats``: a plan with ephemeral
    residencies (nested recomputes) is not searched, the moves edit residencies op by op
    and would cut a chain of recomputes."""
    us = search._time(trace, seed_plan, search.cost).iteration_us
    stats = {**seed_plan.stats, "seed_solver": seed_plan.solver, "seed_iteration_us": us,
             "iteration_us": us, "moves_tried": {}, "moves_accepted": {}, "evaluations": 0,
             "rejected_invalid": 0, "passes": 0,
             "search_seconds": time.perf_counter() - started,
             "pinned_peak_bytes": pinned_peak_bytes(trace, seed_plan)}
    return replace(seed_plan, stats=stats)


def search_tiers(trace: Trace, seed_plan: Plan, cost, params: TierParams | None = None) -> Plan:
    """Improve a validated swapping plan by the multi-level local search. The plan is
    ``seed_plan`` (re-labelled ``tiers``) when no move helped; with ``pinned_host_bytes``
    it is the seed moved to pageable memory as far as the limit needs, then searched. Its
    ``stats`` say how the search went (``seed_iteration_us``, ``iteration_us``,
    ``moves_tried``, ``moves_accepted``, ``evaluations``, ``pinned_peak_bytes``, ...)."""
    params = params or TierParams()
    if seed_plan.status != SolveStatus.FEASIBLE or not seed_plan.residencies:
        raise SolverError(f"search_tiers needs a feasible swapping plan (residencies) to start "
                          f"from; got status {seed_plan.status.value} with "
                          f"{len(seed_plan.residencies)} residencies")
    started = time.perf_counter()
    search = _Search(trace, cost, params)
    if any(r.start == r.end for r in seed_plan.residencies):
        return _unsearched(trace, seed_plan, search, started)
    seed = search.visit(TierState(trace, seed_plan))
    limit = params.pinned_host_bytes
    current = seed
    if limit is not None and not _pinned_ok(seed.state, limit):
        current = search.visit(_respect_pinned(seed.state, limit))
    best = current
    deadline = started + params.time_limit_s
    evaluations = params.max_evaluations or float("inf")

    def out_of_budget() -> bool:
        return time.perf_counter() > deadline or search.evaluations >= evaluations

    passes = 0
    waited, waited_report = None, None
    anchors, anchors_of = None, None  # the anchors of current.state, made when it changes
    for pass_ in range(params.max_passes):
        passes += 1
        improved_in_pass = False
        for op in range(trace.num_ops):
            if out_of_budget():
                break
            if op % params.checkpoint_ops == 0 and best.cost < current.cost:
                current = best
            if waited_report is not current.report:  # a pure function of the report
                waited, waited_report = waits(current.report), current.report
            if anchors_of is not current.state:
                anchors, anchors_of = Anchors(current.state), current.state
            moves = moves_at(current.state, op, current.report, waited,
                             link_moves=pass_ > 0 or current.report.stall_us > 0,
                             level_moves=params.pageable, anchors=anchors)
            search.rng.shuffle(moves)
            for move in moves:
                if out_of_budget():
                    break
                search.tried[move.kind] += 1
                candidate = apply_move(search.moves, current.state, move, current.report,
                                       waited)
                if candidate is None or not _pinned_ok(candidate, limit):
                    continue
                visited = search.visit(candidate)
                new, old = visited.cost, current.cost
                better = new < old and new.iteration_us <= old.iteration_us
                sideways = (new.read_write_us < old.read_write_us
                            and new.iteration_us <= old.iteration_us * (1 + params.tolerance))
                if not (better or sideways):
                    continue
                if new < best.cost:  # a new best must pass the validator
                    if not search.validate(trace, candidate.plan()).valid:
                        search.rejected_invalid += 1
                        current = best
                        waited, waited_report = waits(current.report), current.report
                        continue
                    best = visited
                    improved_in_pass = True
                search.accepted[move.kind] += 1
                current = visited
                waited, waited_report = waits(current.report), current.report
        if best.cost < current.cost:
            current = best
        if not improved_in_pass or out_of_budget():
            break
    plan = best.state.plan()
    stats = {**seed_plan.stats, "seed_solver": seed_plan.solver,
             "seed_iteration_us": seed.cost.iteration_us,
             "seed_read_write_us": seed.cost.read_write_us,
             "iteration_us": best.cost.iteration_us, "read_write_us": best.cost.read_write_us,
             "moves_tried": dict(search.tried), "moves_accepted": dict(search.accepted),
             "evaluations": search.evaluations, "rejected_invalid": search.rejected_invalid,
             "passes": passes, "search_seconds": time.perf_counter() - started,
             "pinned_host_bytes": limit, "pinned_peak_bytes": pinned_peak_bytes(trace, plan),
             "pageable_swaps": sum(isinstance(a, SwapOut) and a.level == PAGEABLE
                                   for a in plan.actions)}
    return replace(plan, stats=stats)


def plan_tiers(trace, budget_bytes, cost, params: BudgetParams, started: float,
               tier_params: TierParams | None = None) -> BudgetResult:
    """The ``tiers`` policy: the best plan of ``seed_policies`` (simulated), improved by
    :func:`search_tiers` (``tier_params``; default: :class:`TierParams` with ``params.seed``:
    2 s of search after the seed plans). It has the signature of a budget policy
    (:mod:`cupool.planning.budget`'s registry) but is not registered: ``auto`` is the
    registry's fastest policy by contract, and ``tiers`` is faster by construction."""
    from cupool.planning.budget import get_policy
    from cupool.sim.simulator import simulate

    tier_params = tier_params or TierParams(seed=params.seed)
    best, best_us, reasons = None, float("inf"), []
    for name in tier_params.seed_policies:
        result = get_policy(name)(trace, budget_bytes, cost, params, time.perf_counter())
        plan = result.plan
        if not result.feasible or not validate_plan(trace, plan).valid:
            reasons.append(f"{name}: {result.reason or 'invalid plan'}")
            continue
        iteration_us = simulate(trace, plan, cost, validate=False).iteration_us
        if best is None or iteration_us < best_us:
            best, best_us = plan, iteration_us
    if best is None:
        reason = "tiers: no seed policy found a plan (" + "; ".join(reasons) + ")"
        plan = replace(plan, solver="tiers", stats={**plan.stats, "reason": reason})
        return BudgetResult(plan, trace, "tiers", reason)
    plan = search_tiers(trace, best, cost, tier_params)
    return BudgetResult(replace(plan, solve_seconds=time.perf_counter() - started), trace,
                        "tiers")


__all__ = ["TierParams", "pinned_peak_bytes", "plan_tiers", "search_tiers"]
