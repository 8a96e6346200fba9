"""``segments-ga``: segment reuse, the assignment of buffers to segments searched by a genetic
algorithm.

The device memory is cut into a *static region* and *K segments*:

1. merge small objects: the smallest buffers (ascending size) join one static region,
   always resident, while its peak live bytes stay within ``small_fraction`` of the
   budget (small objects whose accesses are contiguous never migrate);
2. the K largest remaining buffers whose sizes sum to at most what the region leaves
   define K segments (segment ``k`` is as large as its defining buffer);
3. every other large buffer is assigned to a segment it fits in. Objects sharing a
   segment reuse it over time; an object's idle gap that contains another object's
   access to the same segment must *migrate* (swap or recompute). Consecutive accesses
   of one object with nothing between them (an idle gap no other object touches) keep
   it resident::

       segment 0:  a a . . b b . a        a's gap between its uses holds b's uses:
                       [migrated )        a migrates there; b's gaps hold none: b stays

A GA searches the assignment: segment-wise crossover (a child takes one segment's
objects from the other parent), size-respecting swap mutation (two objects of different
segments trade places when each fits the other's segment) with a rate growing linearly
over the generations, elitism plus fresh random members; it stops on generations, the
time limit, or ``stall_generations`` without improvement. The objective is (accesses of
two objects of one segment at the same op, migrated bytes), lexicographically; the best
few assignments become plans and the least simulated time wins.

From assignment to plan: every migrated gap goes off the device, by the cheaper of swap
and recompute (:func:`~.engine.greedy.evaluate`, ``params.swap_weights[2]``-style weight);
because copies take time (a swapped gap frees less than the whole gap) the cost-aware
greedy then fixes whatever excess remains. Seeded: ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import bisect
import time
from typing import NamedTuple

import numpy as np

from cupool.check import validate_plan
from cupool.core.vocabulary import PERSISTENT, SolveStatus
from cupool.planning.budget.engine.greedy import (
    GreedyOptions,
    apply_option,
    candidate_gaps,
    cost_pass,
    evaluate,
)
from cupool.planning.budget.engine.placement import Decision, place_schedule
from cupool.planning.budget.engine.residency import failed_plan
from cupool.planning.budget.engine.schedule import IdleGap, base_interval, gaps_of
from cupool.planning.budget.engine.state import PlanState
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.result import BudgetResult

SWAP_WEIGHT = 0.2
"""µs of cost per µs of link time when a migrated gap chooses between swap and recompute."""

FINALISTS = 3
"""Distinct best assignments turned into plans and simulated."""


class Fitness(NamedTuple):
    """How good an assignment is (lower is better, compared in this order): accesses of
    two objects of one segment at the same op, then bytes of the gaps it migrates."""

    clashes: int
    migrated_bytes: int


class Ranked(NamedTuple):
    """An assignment (segment per large object) and its fitness."""

    fitness: Fitness
    assignment: np.ndarray


class SegmentProblem:
    """The static region, the segments, and per large object its uses and idle gaps."""

    def __init__(self, trace, budget_bytes: int, small_fraction: float) -> None:
        self.trace = trace
        n = trace.num_ops
        useful = [b for b in trace.buffers if b.uses or b.kind == PERSISTENT]
        by_size = sorted(useful, key=lambda b: (b.size, b.id))
        region = np.zeros(n, dtype=np.int64)
        small = 0
        limit = small_fraction * budget_bytes
        for b in by_size:
            span = base_interval(trace, b)
            if region[span.start:span.end].max(initial=0) + b.size > limit:
                break
            region[span.start:span.end] += b.size
            small += 1
        self.region_bytes = int(region.max(initial=0))
        large = sorted(by_size[small:], key=lambda b: (-b.size, b.id))
        room = budget_bytes - self.region_bytes
        seg_sizes = []
        for b in large:
            if sum(seg_sizes) + b.size > room:
                break
            seg_sizes.append(b.size)
        self.objects = large
        self.segment_bytes = np.array(seg_sizes, dtype=np.int64)
        self.k = len(seg_sizes)
        # object i may use segments 0 .. fits[i] - 1 (segments are sorted by size, desc)
        self.fits = np.array([int(np.sum(self.segment_bytes >= b.size)) for b in large])
        self.uses = [sorted(set(b.uses)) for b in large]
        self.gaps = [gaps_of(trace, b) for b in large]
        self.sizes = np.array([b.size for b in large], dtype=np.int64)
        self.n = n

    @property
    def solvable(self) -> bool:
        return self.k > 0 and bool(np.all(self.fits > 0))

    def random_assignment(self, rng) -> np.ndarray:
        return np.array([rng.integers(0, f) for f in self.fits], dtype=np.int64)

    def fitness(self, assignment) -> Fitness:
        """How many same-op clashes and migrated bytes an assignment has."""
        clashes = 0
        migrated = 0
        for seg in range(self.k):
            members = np.flatnonzero(assignment == seg)
            if not len(members):
                continue
            ops = sorted(u for i in members for u in self.uses[i])
            clashes += len(ops) - len(set(ops))
            for i in members:
                for gap in self.gaps[i]:
                    if _any_between(ops, gap.prev_use, gap.next_use, self.n):
                        migrated += int(self.sizes[i])
        return Fitness(clashes, migrated)

    def migrated_gaps(self, assignment) -> list[IdleGap]:
        """Every gap the assignment migrates."""
        out = []
        for seg in range(self.k):
            members = np.flatnonzero(assignment == seg)
            ops = sorted(u for i in members for u in self.uses[i])
            for i in members:
                for gap in self.gaps[i]:
                    if _any_between(ops, gap.prev_use, gap.next_use, self.n):
                        out.append(gap)
        return out


def _any_between(ops, p: int, q: int, n: int) -> bool:
    """Any op of the sorted list strictly inside the gap ``(p, q)`` (a wrap when ``q <= p``)."""
    if q > p:
        k = bisect.bisect_right(ops, p)
        return k < len(ops) and ops[k] < q
    return bisect.bisect_right(ops, p) < len(ops) or (bool(ops) and ops[0] < q)


def search(problem: SegmentProblem, params: BudgetParams, started: float) -> list[Ranked]:
    """The GA: the final population, best first."""
    rng = np.random.default_rng(params.seed)
    pop = [problem.random_assignment(rng) for _ in range(params.population)]
    # one greedy seed: every object in the largest segment it fits, spread by use order
    pop[0] = np.minimum(np.arange(len(problem.objects)) % max(problem.k, 1), problem.fits - 1)
    scores = [problem.fitness(a) for a in pop]
    best = min(scores)
    stall = 0
    for gen in range(params.generations):
        if time.perf_counter() - started > params.time_limit_s or stall >= params.stall_generations:
            break
        rate = params.mutation_rate_start + (params.mutation_rate_end
                                             - params.mutation_rate_start) * (
            gen / max(params.generations - 1, 1))
        order = sorted(range(len(pop)), key=lambda i: scores[i])
        nxt = [pop[i].copy() for i in order[:params.elite]]
        while len(nxt) < params.population - params.immigrants:
            a, b = (pop[min(rng.choice(len(pop), 2, replace=False), key=lambda i: scores[i])]
                    for _ in range(2))
            child = a.copy()
            if rng.random() < params.crossover_rate:
                child = _crossover(child, b, int(rng.integers(0, problem.k)))
            _mutate(problem, child, rate, rng)
            nxt.append(child)
        while len(nxt) < params.population:
            nxt.append(problem.random_assignment(rng))
        pop = nxt
        scores = [problem.fitness(a) for a in pop]
        if min(scores) < best:
            best, stall = min(scores), 0
        else:
            stall += 1
    order = sorted(range(len(pop)), key=lambda i: scores[i])
    return [Ranked(scores[i], pop[i]) for i in order]


def _crossover(child, other, seg: int):
    """The child takes ``other``'s objects of segment ``seg``; objects the child had there
    and ``other`` did not go where ``other`` has them (valid: ``other`` is)."""
    into = other == seg
    out = (child == seg) & ~into
    child[into] = seg
    child[out] = other[out]
    return child


def _mutate(problem, child, rate: float, rng) -> None:
    """Swap mutation: ``rate`` × objects pairs of different segments trade segments when
    each fits the other's."""
    m = len(child)
    for _ in range(rng.binomial(m, rate)):
        i, j = rng.integers(0, m, size=2)
        si, sj = child[i], child[j]
        if si != sj and sj < problem.fits[i] and si < problem.fits[j]:
            child[i], child[j] = sj, si


def build_state(trace, budget_bytes: int, cost, gaps: list[IdleGap], max_chain: int) -> PlanState:
    """Take the migrated gaps off the device (cheaper of swap and recompute each), then let
    the cost-aware greedy remove whatever excess the copies' timing leaves."""
    state = PlanState(trace, budget_bytes, cost, max_chain=max_chain)
    options = GreedyOptions(swap_weight=SWAP_WEIGHT)
    for gap in sorted(gaps, key=lambda g: (g.prev_use, g.buffer_id)):
        if gap in state.taken:
            continue
        option = evaluate(state, gap, options)
        if option is not None:
            apply_option(state, gap, option)
            state.taken.add(gap)
    for include_persistent in (False, True):
        if state.live.max() > budget_bytes:
            cost_pass(state, candidate_gaps(trace, include_persistent), options)
    return state


def plan_segments_ga(trace, budget_bytes, cost, params: BudgetParams,
                     started: float) -> BudgetResult:
    from cupool.sim.simulator import simulate

    problem = SegmentProblem(trace, budget_bytes, params.small_fraction)
    if not problem.solvable:
        gaps_sets = [[]]
        ga = {"segments": problem.k, "generations_run": 0}
    else:
        ranked = search(problem, params, started)
        seen, gaps_sets = set(), []
        for candidate in ranked:
            key = candidate.assignment.tobytes()
            if key not in seen:
                seen.add(key)
                gaps_sets.append(problem.migrated_gaps(candidate.assignment))
            if len(gaps_sets) >= FINALISTS:
                break
        ga = {"segments": problem.k, "best_clashes": ranked[0].fitness.clashes,
              "best_migrated_bytes": ranked[0].fitness.migrated_bytes}
    ga["static_region_bytes"] = problem.region_bytes
    best, best_us = None, float("inf")
    for gaps in gaps_sets:
        def decide(internal, gaps=gaps):
            state = build_state(trace, internal, cost, gaps, params.max_chain)
            op = int(np.argmax(state.live))
            if state.live[op] > internal:
                return Decision(None, reason=f"segments-ga: op {op} still needs "
                                             f"{int(state.live[op])} bytes resident (budget "
                                             f"{internal})")
            return Decision(state.schedule, {"migrated_gaps": len(gaps)})

        last = place_schedule(trace, budget_bytes, decide, "segments-ga", params.placement,
                              started, dict(ga))
        if not last.feasible or not validate_plan(trace, last.plan).valid:
            continue
        iteration_us = simulate(trace, last.plan, cost, validate=False).iteration_us
        if best is None or iteration_us < best_us:
            best, best_us = last, iteration_us
    if best is not None:
        return best
    if last.feasible:  # placed, but not valid: never returned
        reason = "segments-ga: no finalist passed the validator"
        return BudgetResult(failed_plan(trace, budget_bytes, "segments-ga", started,
                                        SolveStatus.OVER_CAPACITY, {**ga, "reason": reason}),
                            trace, "segments-ga", reason)
    return last
