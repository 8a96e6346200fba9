"""Shared pieces of the budget planners: parameters, input checks, and the loop that turns
a planner's residency decision into a placed plan within the budget."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from cupool.core.vocabulary import SolveStatus, Trace
from cupool.errors import SolverError
from cupool.planning.budget._residency import (
    assemble,
    failed_plan,
    place,
    residency_intervals,
    resident_bytes,
)
from cupool.planning.budget.recipes import DERIVED_RULE, has_recipes


@dataclass(frozen=True)
class BudgetParams:
    """Knobs of the budget planners (each reads the fields it needs).

    seed: seed of every random choice (``segments-ga``); same seed → same plan.
    time_limit_s: wall-clock seconds for ``segments-ga``'s GA (5 s; counted from the
      start of planning; ``auto`` does not run the GA).
    swap_weights: ``auto``'s greedy runs once per weight: µs of cost charged per µs of
      link time a swap uses (0 spends the link first-come; ``inf`` never swaps).
    refine_evaluations: simulations ``auto``'s final local search (:mod:`.multilevel`) may
      run on the best plan (0: none).
    late_swap_weights: ``auto`` also runs the greedy at each of these weights with late
      swaps triggered at the latest op whose own copy lands on time (more bytes off the
      device when the link is saturated, paid in lateness).
    max_chain: longest chain of dropped inputs a recompute may re-produce.
    recompute_chain: the same for ``auto``'s member that never swaps a temporary buffer
      (it recomputes every activation it drops, so it needs longer chains).
    checkpoint_segments: ``auto`` also runs the greedy after segment checkpointing
      (:mod:`._checkpoint`) with each of these segment counts (empty: never).
    checkpoint_swap_weight: the swap weight of those runs.
    offset_solver: static solver placing the residencies (``"greedy-size"`` is fast;
      ``"auto"`` tries harder when fragmentation matters).
    placement_rounds: times a planner re-plans for a smaller internal budget when the
      offsets of its residencies need more than the budget (fragmentation).
    population, generations, stall_generations, elite, immigrants,
    mutation_rate_start, mutation_rate_end, crossover_rate: ``segments-ga``'s GA
      (DESIGN.md idea 1); the mutation rate grows linearly over the generations.
    small_fraction: ``segments-ga`` merges the smallest buffers into one static region
      whose peak is at most this fraction of the budget.
    """

    seed: int = 0
    time_limit_s: float = 5.0
    swap_weights: tuple[float, ...] = (0.0, 0.02, 0.2, 1.0, float("inf"))
    late_swap_weights: tuple[float, ...] = (0.2,)
    refine_evaluations: int = 240
    max_chain: int = 6
    recompute_chain: int = 30
    checkpoint_segments: tuple[int, ...] = (3, 4, 6)
    checkpoint_swap_weight: float = 0.2
    offset_solver: str = "greedy-size"
    placement_rounds: int = 5
    population: int = 16
    generations: int = 60
    stall_generations: int = 15
    elite: int = 2
    immigrants: int = 2
    mutation_rate_start: float = 0.02
    mutation_rate_end: float = 0.2
    crossover_rate: float = 0.9
    small_fraction: float = 0.3

    def __post_init__(self) -> None:
        if (isinstance(self.refine_evaluations, bool) or not isinstance(
                self.refine_evaluations, int) or self.refine_evaluations < 0):
            raise SolverError(f"refine_evaluations (={self.refine_evaluations!r}) must be an "
                              f"integer >= 0")
        if not self.time_limit_s > 0:
            raise SolverError(f"time_limit_s (={self.time_limit_s}) must be > 0 seconds")
        if self.population < 2 or self.generations < 1:
            raise SolverError(f"population (={self.population}) must be >= 2 and "
                              f"generations (={self.generations}) >= 1")
        if not 0 < self.small_fraction < 1:
            raise SolverError(f"small_fraction (={self.small_fraction}) must be in (0, 1)")
        if any(isinstance(k, bool) or not isinstance(k, int) or k < 1
               for k in self.checkpoint_segments):
            raise SolverError(f"checkpoint_segments (={self.checkpoint_segments!r}) must be "
                              f"integers >= 1")
        if self.placement_rounds < 1 or self.max_chain < 0 or self.recompute_chain < 0:
            raise SolverError(f"placement_rounds (={self.placement_rounds}) must be >= 1, "
                              f"max_chain (={self.max_chain}) and recompute_chain "
                              f"(={self.recompute_chain}) >= 0")


def working_set_bytes(trace: Trace) -> np.ndarray:
    """Bytes each op uses (every buffer in its ``uses``): they must all be resident."""
    ws = np.zeros(trace.num_ops, dtype=np.int64)
    for b in trace.buffers:
        for u in set(b.uses):
            ws[u] += b.size
    return ws


def check_working_sets(trace: Trace, budget_bytes: int) -> str | None:
    """``"infeasible: op k needs N bytes resident"`` for the largest op over the budget."""
    if trace.num_ops == 0:
        return None
    ws = working_set_bytes(trace)
    k = int(np.argmax(ws))
    if ws[k] > budget_bytes:
        return (f"infeasible: op {k} needs {int(ws[k])} bytes resident "
                f"(budget {budget_bytes} bytes)")
    return None


def recipe_note(trace: Trace, original: Trace) -> str:
    return "from the trace" if has_recipes(original) else DERIVED_RULE


FALLBACK_OFFSET_SOLVERS = ("best-fit", "greedy-breadth")
"""Static solvers tried, in order, when ``params.offset_solver`` cannot place the
residencies within the budget, before re-planning for a smaller internal budget."""


def place_schedule(trace: Trace, budget_bytes: int, decide, policy: str, params: BudgetParams,
                   started: float, stats: dict):
    """Run ``decide(internal_budget) -> (Schedule | None, stats)`` and place its residencies.

    When the offsets need more than the budget (fragmentation), the fallback offset
    solvers try; if none fits, the planner runs again for an internal budget lowered by
    the overshoot. Returns the plan (``feasible`` or
    ``over_capacity``) and the last failure reason (``None`` on success).
    """
    internal = budget_bytes
    reason = "no schedule"
    for round_ in range(params.placement_rounds):
        schedule, more = decide(internal)
        if schedule is None:
            reason = more.get("reason", "the policy found no schedule within the budget")
            break
        intervals = residency_intervals(trace, schedule)
        peak = int(resident_bytes(trace, intervals).max()) if intervals else 0
        if peak > budget_bytes:
            reason = (f"policy left {peak} bytes resident at some op "
                      f"(budget {budget_bytes})")
            break
        for solver in dict.fromkeys((params.offset_solver, *FALLBACK_OFFSET_SOLVERS)):
            offsets, arena = place(trace, intervals, budget_bytes, solver)
            if offsets is not None:
                break
        if offsets is not None:
            info = {**stats, **more, "internal_budget_bytes": internal,
                    "placement_rounds": round_ + 1, "resident_peak_bytes": peak}
            return assemble(trace, schedule, intervals, offsets, arena, budget_bytes, policy,
                            started, info), None
        over = max(arena - budget_bytes, budget_bytes // 100, 1)
        internal = max(1, internal - over)
        reason = f"offsets of the residencies need {arena} bytes (budget {budget_bytes})"
    return failed_plan(trace, budget_bytes, policy, started, SolveStatus.OVER_CAPACITY,
                       {**stats, "reason": reason}), reason


def now() -> float:
    return time.perf_counter()
