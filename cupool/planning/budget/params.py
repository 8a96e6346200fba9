"""The knobs of the budget planners, one frozen dataclass shared by every policy."""

from __future__ import annotations

from dataclasses import dataclass

from cupool.errors import SolverError
from cupool.planning.budget.engine.placement import PlacementParams


@dataclass(frozen=True)
class BudgetParams:
    """Knobs of the budget planners (each reads the fields it needs).

    seed: seed of every random choice (``segments-ga``); same seed → same plan.
    time_limit_s: wall-clock seconds for ``segments-ga``'s GA (5 s; counted from the
      start of planning; ``auto`` does not run the GA).
    swap_weights: ``auto``'s greedy runs once per weight: µs of cost charged per µs of
      link time a swap uses (0 spends the link first-come; ``inf`` never swaps).
    wait_swap_weights: ``auto`` also runs the greedy at each of these weights taking swaps
      whose copies are waited for where nothing else frees the bytes an op over the budget
      misses (:mod:`.engine.waits`): stalls, where the others stall more or find no plan.
    wait_max_buffers: traces with more buffers than this get no such member: each costs
      a greedy run, a placement and a simulation, which on the 1,200-1,700-buffer training
      traces made ``auto`` about a fifth slower for one better plan in 15 (BERT at 50%:
      7.5% instead of 8.0%), and on the 13k-buffer LSTM at 50% more than twice as slow
      (4.1% instead of 6.4%).
    revolve_max_buffers: traces with more buffers than this get no ``revolve`` members in
      ``auto`` (the policies themselves stay): on the 13k-buffer LSTM at 50% they took
      about 20 s to find a chain of states whose schedules no placement took.
    search_max_gaps: traces with more idle gaps than this get no searched-gaps member in
      ``auto`` (:mod:`.searched_gaps`: each of its decodings is a greedy run, a placement
      and a simulation; on the 27-op near-budget shapes, 34 gaps, it takes 0.1-0.6 s; on
      a 41-op inference step of 50 gaps 1-3 s, for one plan 7% faster in ten; a 400-op
      recurrent step has 793).
    search_evaluations: decodings that member may run.
    schedule_max_buffers, schedule_max_gaps: traces with more buffers, or more idle gaps,
      than these get no search over the chosen plan's schedule (:mod:`.searched_schedule`:
      each of its evaluations is a placement and a simulation, 2-15 ms on the shapes of
      ``bench/always_plan.py``, 34-94 idle gaps, where it takes 1-10 s; on a 149-op
      recurrent program of 101 buffers 30 ms).
    schedule_evaluations: schedules that search may place and simulate (0: none).
    refine_evaluations: simulations ``auto``'s final local search (:mod:`.multilevel`) may
      run on the best plan (0: none).
    late_swap_weights: ``auto`` also runs the greedy at each of these weights with late
      swaps triggered at the latest op whose own copy lands on time (more bytes off the
      device when the link is saturated, paid in lateness).
    max_chain: longest chain of dropped inputs a recompute may re-produce.
    recompute_chain: the same for ``auto``'s member that never swaps a temporary buffer
      (it recomputes every activation it drops, so it needs longer chains).
    checkpoint_segments: ``auto`` also runs the greedy after segment checkpointing
      (:mod:`.engine.checkpoint`) with each of these segment counts (empty: never).
    checkpoint_swap_weight: the swap weight of those runs.
    stream_headrooms: ``auto`` also streams read-only weights (:mod:`.stream`), when the
      trace has any, leaving each of these shares of the budget to prefetch into.
    offset_solver: static solver placing the residencies (``"greedy-size"`` is fast;
      ``"auto"`` tries harder when fragmentation matters).
    placement_rounds: times a planner re-plans for a smaller internal budget when the
      offsets of its residencies need more than the budget (fragmentation).
    population, generations, stall_generations, elite, immigrants,
    mutation_rate_start, mutation_rate_end, crossover_rate: ``segments-ga``'s genetic
      algorithm; the mutation rate grows linearly over the generations.
    small_fraction: ``segments-ga`` merges the smallest buffers into one static region
      whose peak is at most this fraction of the budget.
    workers: processes ``auto`` plans its members in (:mod:`.parallel`): the calling
      process and ``workers - 1`` it spawns; the plan is the same for any count. 1 (the
      default): every member in the calling process; 0: automatic, one per usable CPU (at
      most one per member) when the trace has at least
      :data:`~.parallel.PARALLEL_MIN_BUFFERS` buffers, else 1; more: that many. The
      members ranked first are planned in the calling process before any worker starts
      (they often end the search at once); the rest, where the search goes on, go to
      whichever process is free first. Workers pay on large traces with idle cores (each
      costs about a second to start and redoes the placements the members would share in
      one process). Each is a fresh interpreter that imports cupool, not the calling
      program (safe in a CUDA program, and a script without the ``__main__`` guard is not
      run again); the default stays 1, as a library should not start processes unasked.
    """

    seed: int = 0
    time_limit_s: float = 5.0
    swap_weights: tuple[float, ...] = (0.0, 0.02, 0.2, 1.0, float("inf"))
    late_swap_weights: tuple[float, ...] = (0.2,)
    wait_swap_weights: tuple[float, ...] = (0.0, 0.02, 0.2, 1.0)
    wait_max_buffers: int = 1000
    revolve_max_buffers: int = 5000
    search_max_gaps: int = 48
    search_evaluations: int = 160
    schedule_max_buffers: int = 200
    schedule_max_gaps: int = 100
    schedule_evaluations: int = 2000
    refine_evaluations: int = 240
    max_chain: int = 6
    recompute_chain: int = 30
    checkpoint_segments: tuple[int, ...] = (3, 4, 6)
    checkpoint_swap_weight: float = 0.2
    stream_headrooms: tuple[float, ...] = (0.0, 0.1, 0.25)
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
    workers: int = 1

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
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 0:
            raise SolverError(f"workers (={self.workers!r}) must be an integer >= 0 "
                              f"(0: automatic, 1: no worker processes)")
        if self.placement_rounds < 1 or self.max_chain < 0 or self.recompute_chain < 0:
            raise SolverError(f"placement_rounds (={self.placement_rounds}) must be >= 1, "
                              f"max_chain (={self.max_chain}) and recompute_chain "
                              f"(={self.recompute_chain}) >= 0")

    @property
    def placement(self) -> PlacementParams:
        """The fields :func:`~.engine.placement.place_schedule` reads."""
        return PlacementParams(self.offset_solver, self.placement_rounds)
