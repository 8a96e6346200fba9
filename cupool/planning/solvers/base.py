"""The one interface every offset solver implements, its parameters and its result.

A solver is a function ``solve(problem: StaticProblem, params: SolverParams) -> SolveResult``
registered under a name in :mod:`cupool.planning.solvers`. It never raises for an
infeasible or unsolved instance: it returns a status. Offsets are aligned with the
problem's index (``offsets[i]`` is buffer ``problem.ids[i]``'s offset).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cupool.core.vocabulary import SolveStatus
from cupool.errors import SolverError


@dataclass(frozen=True)
class SolverParams:
    """Knobs of the solvers; each solver reads the fields it needs and ignores the rest.

    General:
      time_limit_s: wall-clock seconds a search may spend (``None``: the solver's default:
        60 s for ``exact``, 10 s for ``genetic``, 10 s in total for ``auto``'s searches).
        Greedy solvers ignore it: they always finish.
      seed: seed of every random choice; same seed, same problem → same plan.
      native: use the compiled C search when it is built (``None``: if available;
        ``False``: always the pure-Python path; ``True``: require it). Both give
        identical results.
    Genetic (``genetic``):
      population: individuals per generation (>= 2).
      generations: maximum number of generations.
      crossover_rate: probability that a child is bred by crossover rather than copied.
      mutation_rate_start, mutation_rate_end: per-gene swap probability, growing
        linearly from the first to the last generation.
      elite: best individuals copied unchanged into the next generation.
      immigrants: random individuals added every generation (diversity).
      stall_generations: stop after this many generations without improvement.
    Exact (``exact``):
      minimize: with no capacity, search the smallest arena (capacities from the lower
        bound upward) instead of answering one decision problem.
      greedy_certificate: first try greedy-by-size and return its plan when it already
        meets the goal (the lower bound, or the capacity), skipping the search and its
        sweep, which is quadratic in the live set. ``False`` always searches.
      max_nodes: search nodes a call may visit in all (``None``: no limit); reaching it
        ends the search like the time limit, but at the same point on every machine.
    """

    time_limit_s: float | None = None
    seed: int = 0
    native: bool | None = None
    population: int = 24
    generations: int = 300
    crossover_rate: float = 0.9
    mutation_rate_start: float = 0.01
    mutation_rate_end: float = 0.10
    elite: int = 2
    immigrants: int = 2
    stall_generations: int = 60
    minimize: bool = True
    greedy_certificate: bool = True
    max_nodes: int | None = None

    def __post_init__(self) -> None:
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise SolverError(f"time_limit_s (={self.time_limit_s}) must be > 0 seconds")
        if self.max_nodes is not None and (isinstance(self.max_nodes, bool)
                                           or not isinstance(self.max_nodes, int)
                                           or self.max_nodes < 1):
            raise SolverError(f"max_nodes (={self.max_nodes!r}) must be an integer >= 1")
        if self.population < 2:
            raise SolverError(f"population (={self.population}) must be >= 2")
        if self.generations < 1:
            raise SolverError(f"generations (={self.generations}) must be >= 1")
        for name in ("crossover_rate", "mutation_rate_start", "mutation_rate_end"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise SolverError(f"{name} (={value}) must be in [0, 1]")
        if not 0 <= self.elite < self.population:
            raise SolverError(f"elite (={self.elite}) must be in [0, population={self.population})")
        if self.immigrants < 0 or self.stall_generations < 1:
            raise SolverError(
                f"immigrants (={self.immigrants}) must be >= 0 and "
                f"stall_generations (={self.stall_generations}) >= 1"
            )


@dataclass(frozen=True, eq=False)
class SolveResult:
    """What a solver returns: a status, the offsets (``None`` when it has no plan), the
    arena they need, wall-clock seconds, and solver-specific statistics (plain values)."""

    status: SolveStatus
    offsets: np.ndarray | None
    arena_bytes: int | None
    solve_seconds: float
    stats: dict = field(default_factory=dict)


def heuristic_result(problem, offsets: np.ndarray, seconds: float, stats: dict | None = None,
                     proved_minimal: bool = False) -> SolveResult:
    """Wrap a heuristic's offsets with the right status: ``optimal`` when the arena equals
    the lower bound (or the caller proved it minimal), else ``feasible`` or ``over_capacity``."""
    offsets = np.asarray(offsets, dtype=np.int64)
    arena = problem.arena_of(offsets)
    if problem.capacity is not None and arena > problem.capacity:
        status = SolveStatus.OVER_CAPACITY
    elif proved_minimal or arena == problem.lower_bound():
        status = SolveStatus.OPTIMAL
    else:
        status = SolveStatus.FEASIBLE
    return SolveResult(status, offsets, arena, seconds, dict(stats or {}))
