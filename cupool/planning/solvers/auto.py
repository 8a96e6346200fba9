"""``auto``: the default solver — cheap heuristics first, search only when they fall short.

1. Run ``greedy-size``, ``greedy-breadth`` and ``best-fit`` (each well under a second on
   real traces) and keep the smallest arena. When it equals the lower bound it is
   optimal: stop.
2. Otherwise ask ``exact`` whether the lower bound (or the capacity, when one is given
   and the heuristics miss it) can be met, within 60% of the time limit.
3. If that did not settle it, spend what is left in ``genetic`` seeded with ``params.seed``
   and keep whichever plan is smallest.

The time limit (``params.time_limit_s``, default 20 s) bounds steps 2 and 3 together.
"""

from __future__ import annotations

import time
from dataclasses import replace

from cupool.core.vocabulary import SolveStatus
from cupool.planning.solvers.base import SolveResult, SolverParams, heuristic_result

DEFAULT_TIME_LIMIT_S = 20.0
HEURISTICS = ("greedy-size", "greedy-breadth", "best-fit")


def solve_auto(problem, params: SolverParams) -> SolveResult:
    from cupool.planning.solvers import get_solver

    started = time.perf_counter()
    budget = params.time_limit_s or DEFAULT_TIME_LIMIT_S
    lower = problem.lower_bound()
    if problem.capacity is not None and problem.capacity < lower:
        return SolveResult(SolveStatus.INFEASIBLE, None, None, time.perf_counter() - started,
                           {"winner": "lower-bound", "lower_bound_bytes": lower})
    target = lower if problem.capacity is None else problem.capacity
    tried = {}
    best_name, best = None, None
    for name in HEURISTICS:
        result = get_solver(name)(problem.with_capacity(None), params)
        tried[name] = result.arena_bytes
        if best is None or result.arena_bytes < best.arena_bytes:
            best_name, best = name, result
        if best.arena_bytes <= lower:
            break

    def finish(offsets, winner, proved_minimal=False, extra=None):
        stats = {"winner": winner, "heuristic_arenas": tried, **(extra or {})}
        return heuristic_result(problem, offsets, time.perf_counter() - started, stats,
                                proved_minimal)

    if best.arena_bytes <= target:
        return finish(best.offsets, best_name)

    remaining = budget - (time.perf_counter() - started)
    exact = get_solver("exact")(
        problem.with_capacity(target), replace(params, time_limit_s=max(0.05, 0.6 * remaining)))
    extra = {"exact_status": exact.status.value}
    if exact.offsets is not None:
        return finish(exact.offsets, "exact", proved_minimal=target == lower, extra=extra)
    if exact.status == SolveStatus.INFEASIBLE and problem.capacity is not None:
        return SolveResult(SolveStatus.INFEASIBLE, None, None, time.perf_counter() - started,
                           {"winner": "exact", "heuristic_arenas": tried, **extra})

    remaining = budget - (time.perf_counter() - started)
    if remaining > 0.05:
        genetic = get_solver("genetic")(problem.with_capacity(None),
                                        replace(params, time_limit_s=remaining))
        tried["genetic"] = genetic.arena_bytes
        if genetic.arena_bytes < best.arena_bytes:
            best_name, best = "genetic", genetic
    return finish(best.offsets, best_name, extra=extra)
