"""A genetic search over placement orders, decoded by the greedy placer.

An individual is an order of the buffers; :class:`~cupool.planning.solvers.greedy.Decoder`
turns it into offsets (each buffer into the best-fitting gap among the time-overlapping
ones placed before it) and its fitness is the arena those offsets need (bytes, lower is
better). Every order decodes to a valid plan, so the search never has to repair anything.

One run, with the fields of :class:`~cupool.planning.solvers.base.SolverParams`:

1. The first population holds the greedy orders — by size (both tie rules of
   ``greedy-size``), by breadth, by area (size × lifetime), by lifetime — then random orders
   up to ``population``. The best individual ever seen is kept, so the result is never worse
   than ``greedy-size``.
2. Each generation keeps the ``elite`` best unchanged, adds ``immigrants`` random orders, and
   breeds the rest: two parents by binary tournament (the fitter of two random individuals;
   ties: the earlier one), order crossover (OX) with probability ``crossover_rate`` (else a
   copy of the first parent), then swap mutation — each position swaps with a random one with
   probability rising linearly from ``mutation_rate_start`` in the first generation to
   ``mutation_rate_end`` in the last, so the search explores more as it stalls.
3. It stops after ``generations`` generations, ``stall_generations`` generations without a
   better arena, at the lower bound (proved optimal), or at ``time_limit_s`` (default 10 s).

All randomness comes from ``numpy.random.default_rng(params.seed)`` in a fixed call order:
same problem and seed → same plan, unless the time limit cuts the run short (``stats`` say
how many generations ran and why it stopped).
"""

from __future__ import annotations

import time

import numpy as np

from cupool import progress
from cupool.core.units import format_bytes
from cupool.planning.problem import StaticProblem
from cupool.planning.solvers.base import SolveResult, SolverParams, heuristic_result
from cupool.planning.solvers.greedy import (
    SIZE_TIES,
    Decoder,
    area_order,
    breadth_order,
    size_order,
)

DEFAULT_TIME_LIMIT_S = 10.0


def solve_genetic(problem: StaticProblem, params: SolverParams) -> SolveResult:
    """Search placement orders with a seeded GA; see the module docstring for the contract."""
    search = _Search(problem, params)
    stop = search.run()
    stats = {"generations": search.generations, "evaluations": search.evaluations,
             "best_generation": search.best_generation, "stop": stop,
             "greedy_arena_bytes": search.greedy_arena, "seed": params.seed,
             "native": search.decoder.native}
    return heuristic_result(problem, search.best_offsets, time.perf_counter() - search.started,
                            stats)


class _Search:
    """The state of one GA run: population, fitness, best so far, counters."""

    def __init__(self, problem: StaticProblem, params: SolverParams) -> None:
        self.started = time.perf_counter()
        self.deadline = self.started + (params.time_limit_s or DEFAULT_TIME_LIMIT_S)
        self.problem, self.params = problem, params
        self.rng = np.random.default_rng(params.seed)
        self.decoder = Decoder(problem, native=params.native)
        self.lower_bound = problem.lower_bound()
        self.generations = self.evaluations = self.best_generation = 0
        self.best_arena = self.greedy_arena = None
        self.best_offsets = np.zeros(problem.n, dtype=np.int64)

    def evaluate(self, order: np.ndarray) -> int:
        offsets = self.decoder.place(order)
        arena = self.problem.arena_of(offsets)
        self.evaluations += 1
        if self.best_arena is None or arena < self.best_arena:
            self.best_arena, self.best_offsets = arena, offsets
            self.best_generation = self.generations
        return arena

    def out_of_time(self) -> bool:
        return time.perf_counter() >= self.deadline

    def run(self) -> str:
        """Evolve until a stop rule fires; return its name."""
        population, fitness = self.first_population()
        self.greedy_arena = self.best_arena
        if self.best_arena == self.lower_bound:
            return "lower_bound"
        if len(population) < self.params.population:
            return "time_limit"
        with progress.bar(self.params.generations, "genetic", "gen") as generations_bar:
            for generation in range(1, self.params.generations + 1):
                rate = mutation_rate(self.params, generation)
                population, fitness = self.next_generation(population, fitness, rate)
                if population is None:
                    return "time_limit"
                self.generations = generation
                generations_bar.update(postfix=f"best {format_bytes(self.best_arena)}")
                if self.best_arena == self.lower_bound:
                    return "lower_bound"
                if generation - self.best_generation >= self.params.stall_generations:
                    return "stall"
        return "generations"

    def first_population(self):
        """Greedy orders (always evaluated, until one reaches the lower bound), then random
        ones while time lasts."""
        p, n = self.problem, self.problem.n
        lifetime_order = np.lexsort((np.arange(n), -p.sizes, p.starts - p.ends))
        candidates = [size_order(p, ties) for ties in SIZE_TIES]
        candidates += [breadth_order(p), area_order(p), lifetime_order]
        population: list[np.ndarray] = []
        for order in candidates:
            if not any(np.array_equal(order, other) for other in population):
                population.append(order)
        population = population[:max(self.params.population, len(SIZE_TIES))]
        fitness = []
        for order in population:
            fitness.append(self.evaluate(order))
            if self.best_arena == self.lower_bound:
                return population[:len(fitness)], fitness
        while (len(population) < self.params.population and not self.out_of_time()
               and self.best_arena != self.lower_bound):
            population.append(self.rng.permutation(n))
            fitness.append(self.evaluate(population[-1]))
        return population, fitness

    def next_generation(self, population, fitness, rate):
        """Elites, immigrants, then children; ``(None, None)`` when time runs out."""
        params, rng, n = self.params, self.rng, self.problem.n
        ranked = np.lexsort((np.arange(len(fitness)), fitness))
        elite = [int(i) for i in ranked[:params.elite]]
        next_population = [population[i] for i in elite]
        next_fitness = [fitness[i] for i in elite]
        immigrants = min(params.immigrants, params.population - len(elite))
        while len(next_population) < params.population:
            if self.out_of_time():
                return None, None
            if immigrants:
                immigrants -= 1
                child = rng.permutation(n)
            else:
                first = population[self.tournament(fitness)]
                if rng.random() < params.crossover_rate:
                    child = order_crossover(first, population[self.tournament(fitness)], rng)
                else:
                    child = first.copy()
                swap_mutation(child, rate, rng)
            next_population.append(child)
            next_fitness.append(self.evaluate(child))
        return next_population, next_fitness

    def tournament(self, fitness) -> int:
        """Binary tournament: the fitter of two random individuals (ties: the earlier)."""
        a, b = (int(i) for i in self.rng.integers(0, len(fitness), size=2))
        return a if (fitness[a], a) <= (fitness[b], b) else b


def mutation_rate(params: SolverParams, generation: int) -> float:
    """Per-position swap probability in ``generation`` (1-based): linear from
    ``mutation_rate_start`` at generation 1 to ``mutation_rate_end`` at the last."""
    progress = (generation - 1) / max(params.generations - 1, 1)
    return params.mutation_rate_start + progress * (params.mutation_rate_end
                                                    - params.mutation_rate_start)


def order_crossover(first: np.ndarray, second: np.ndarray, rng) -> np.ndarray:
    """OX: the child keeps ``first[lo:hi]`` in place and fills the other positions, from
    ``hi`` on (wrapping), with the remaining genes in the order they follow ``hi`` in
    ``second``. Example, ``lo, hi = 2, 4``::

        first   3 1 [4 0] 2 5        second  0 1 2 3 4 5  → from position 4: 4 5 0 1 2 3
        child   2 3 [4 0] 5 1        (4, 0 skipped; 5 1 2 3 written at positions 4 5 0 1)
    """
    n = len(first)
    lo, hi = sorted(int(x) for x in rng.choice(n + 1, size=2, replace=False))
    child = np.empty_like(first)
    child[lo:hi] = first[lo:hi]
    taken = np.zeros(n, dtype=bool)
    taken[first[lo:hi]] = True
    following = np.roll(second, -hi)
    child[(hi + np.arange(n - (hi - lo))) % n] = following[~taken[following]]
    return child


def swap_mutation(order: np.ndarray, rate: float, rng) -> None:
    """Each position, with probability ``rate``, swaps with a uniformly random position
    (in place, in position order)."""
    genes = np.flatnonzero(rng.random(len(order)) < rate)
    partners = rng.integers(0, len(order), size=len(genes))
    for i, j in zip(genes.tolist(), partners.tolist(), strict=True):
        order[i], order[j] = order[j], order[i]


__all__ = ["DEFAULT_TIME_LIMIT_S", "mutation_rate", "order_crossover", "solve_genetic",
           "swap_mutation"]
