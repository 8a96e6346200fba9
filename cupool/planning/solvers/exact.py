"""``exact``: complete search for offsets, after Google's MiniMalloc (ASPLOS 2024).

The Dynamic Storage Allocation decision problem: given buffers (a size over a
half-open lifetime ``[start, end)``) and a capacity, find offsets such that
buffers that overlap in time get disjoint byte ranges and every ``offset + size``
is within the capacity — or prove that none exist. Without a capacity the solver
answers a sequence of decision problems, from the lower bound upward, to find the
smallest arena.

Pipeline (each stage hands plain data to the next)::

    problem ─► stack buffers that overlap everyone ─► split into time components
            ─► sweep each component into sections ─► depth-first search (C or Python)
            ─► compose offsets

**Stacking.** A buffer that overlaps every other buffer in time (weights and
optimizer state live the whole iteration) can always go to the bottom: in any
plan, every other buffer lies wholly below or wholly above it, so moving it to
offset 0 and lifting the ones below it by its size keeps the plan valid and the
arena unchanged::

    op:      0   1   2   3   4   5
    w:       [=======================)    overlaps everyone: stacked at 0
    a:       [=======)                    the rest is solved above w.size
    b:               [===========)

**Components.** When no buffer crosses an op boundary, the two sides share no
byte constraint and are solved separately; the arena is the highest of them::

    op:      0   1   2   3 | 4   5   6
    a:       [=======)     | [=======)  c     component 1: {a, b}
    b:           [=====)   |     [===)  d     component 2: {c, d}
                       cut: nothing live across op 3 → 4

**Sections.** Inside a component the sweep keeps only the live sets that are
maximal: the set just before some buffer ends. A section is such a set; every
buffer spans a contiguous range of sections, and two buffers overlap in time
if and only if they share a section::

    op:      0   1   2   3   4   5
    a:       [===========)            section 0 = {a, b}   (just before a ends)
    b:           [===============)    section 1 = {b, c}   (just before b, c end)
    c:                   [=======)

**Search** (MiniMalloc's ``SearchSolutions``, every pruning rule kept):

- *canonical placements*: an unplaced buffer's only candidate offset is the
  lowest one its placed time-neighbours allow (``min_offset``); buffers are placed
  in nondecreasing ``(min_offset, preorder index)``, so each plan is reached once;
- *dominance*: no buffer may start at or above the lowest top any unplaced buffer
  could reach (that gap could always be filled by it instead);
- *section inference*: in every section, ``max(floor, current offset)`` plus the
  unplaced bytes of the section must fit the capacity, where the floor is the top
  of the section's placed buffers, raised to the smallest ``min_offset`` of its
  unplaced ones;
- *hatless pruning*: a buffer with no unplaced time-neighbour is never tried in
  another position (nothing above it can profit);
- *dynamic decomposition*: once placed buffers cut the component into parts that
  no unplaced buffer crosses, the parts are solved one after the other;
- *static preorder* ``WAT``/``TAW``/``TWA`` (W = lifetime width, A = area
  ``size × width``, T = the largest unplaced total of the buffer's sections, all
  descending), run round-robin with a node budget doubling from ``2 × n``.

The search is written twice with identical logic: ``_exact.c`` (built by
``setup.py``, optional) and :class:`~.exact_search.PySearch`. Both visit the same nodes in the
same order, so they return the same offsets and node counts when they finish.
Nothing is random: ``params.seed`` is not used.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from cupool import progress
from cupool.core.units import format_bytes
from cupool.core.vocabulary import SolveStatus
from cupool.errors import SolverError
from cupool.planning.problem import StaticProblem
from cupool.planning.solvers.base import SolveResult, SolverParams
from cupool.planning.solvers.exact_search import (
    FOUND,
    NOT_FOUND,
    TIMEOUT,
    OutOfTime,
    PySearch,
    Sweep,
    sweep,
)
from cupool.planning.solvers.greedy import solve_greedy_size

try:
    from cupool.planning.solvers import _exact as _native_module
except ImportError:  # no C compiler at install time: the Python search is used
    _native_module = None

DEFAULT_TIME_LIMIT_S = 60.0
"""Seconds an ``exact`` solve may take when ``params.time_limit_s`` is ``None``."""

HEURISTICS = ("WAT", "TAW", "TWA")
"""Static preorders tried round-robin (MiniMalloc's defaults); letters as in the module doc."""


def native_available() -> bool:
    """True when the compiled search (``cupool.planning.solvers._exact``) is importable."""
    return _native_module is not None


@dataclass(frozen=True)
class Decision:
    """The answer to one decision search: ``outcome`` is ``FOUND`` (with ``offsets``),
    ``NOT_FOUND`` (proved: nothing fits) or ``TIMEOUT``; ``nodes`` and ``backtracks``
    count the whole round-robin."""

    outcome: int
    offsets: list | None
    nodes: int
    backtracks: int


def decide(component: Sweep, capacity: int, deadline: float, native: bool,
           max_nodes: int = 0) -> Decision:
    """Does ``component`` fit in ``capacity`` bytes? Search until ``deadline``
    (``time.monotonic()`` seconds), and for at most ``max_nodes`` nodes when it is positive
    (reaching either is a ``TIMEOUT``), with the C search (``native``) or the Python one."""
    if component.n == 0:
        return Decision(FOUND, [], 0, 0)
    budget = max(deadline - time.monotonic(), 0.0)
    if native:
        args = (component.sizes, component.widths, component.section_lo, component.section_hi,
                component.section_ptr, component.section_members, component.overlap_ptr,
                component.overlaps, int(capacity), HEURISTICS, budget, int(max_nodes))
        outcome, offsets, nodes, backtracks = _native_module.search(*args)
    else:
        search = PySearch(component, int(capacity), HEURISTICS, budget, max_nodes)
        outcome, offsets, nodes, backtracks = search.run()
    return Decision(outcome, offsets, nodes, backtracks)


def search_fits(problem: StaticProblem, capacity: int, time_limit_s: float | None = None,
                native: bool | None = None) -> SolveResult:
    """Answer one decision problem: does ``problem`` fit in ``capacity`` bytes?

    A convenience over :func:`solve_exact` for callers holding a problem without a
    capacity (``auto``, benchmarks).
    """
    return solve_exact(problem.with_capacity(int(capacity)),
                       SolverParams(time_limit_s=time_limit_s, native=native))


def solve_exact(problem: StaticProblem, params: SolverParams) -> SolveResult:
    """Offsets by complete search: see the module docstring for the algorithm.

    - ``problem.capacity`` set: ``optimal``/``feasible`` with offsets when a plan fits,
      ``infeasible`` when the search proved none does (at once when the lower bound
      exceeds the capacity), ``timeout`` (no offsets) when time ran out first.
    - no capacity, ``params.minimize``: the smallest arena. ``optimal`` when proved
      (``stats["proved_lower_bytes"] == arena_bytes``), else ``feasible`` with the best plan
      and the proved bound in ``stats["proved_lower_bytes"]``.
    - no capacity, not ``params.minimize``: one decision at the lower bound; if that
      fails, the greedy-by-size plan (``feasible``).

    ``params.time_limit_s`` bounds the whole call (default :data:`DEFAULT_TIME_LIMIT_S`);
    ``params.native`` picks the C or Python search (:class:`SolverError` when C is
    required but not built); ``params.greedy_certificate`` returns greedy-by-size's plan
    when it already meets the goal. Statistics keys: ``nodes``, ``backtracks``, ``decisions``
    (searches run), ``native``, ``lower_bound_bytes``, ``proved_lower_bytes``; when the
    search was prepared, ``components``, ``stacked_buffers``, ``stacked_bytes``; when it
    was skipped, ``certificate`` (``"greedy-size"``, or ``"sweep-timeout"`` when time ran
    out while preparing it).
    """
    started = time.monotonic()
    native = _resolve_native(params.native)
    limit = DEFAULT_TIME_LIMIT_S if params.time_limit_s is None else params.time_limit_s
    deadline = started + limit
    lower_bound = problem.lower_bound()
    stats = {"nodes": 0, "backtracks": 0, "decisions": 0, "native": native,
             "lower_bound_bytes": lower_bound, "proved_lower_bytes": lower_bound}

    def finish(status, offsets):
        arena = None if offsets is None else problem.arena_of(offsets)
        return SolveResult(status, offsets, arena, time.monotonic() - started, stats)

    if problem.capacity is not None and lower_bound > problem.capacity:
        return finish(SolveStatus.INFEASIBLE, None)
    # A cheap certificate first: greedy-by-size often meets the goal outright, and then
    # no search (nor its sweep, quadratic in the live set) is needed.
    goal = lower_bound if problem.capacity is None else problem.capacity
    greedy = solve_greedy_size(problem.with_capacity(None), params).offsets
    if params.greedy_certificate and problem.arena_of(greedy) <= goal:
        stats["certificate"] = "greedy-size"
        return finish(SolveStatus.OPTIMAL if problem.arena_of(greedy) == lower_bound
                      else SolveStatus.FEASIBLE, greedy)
    try:
        layout = _Layout.of(problem, deadline)
    except OutOfTime:
        stats["certificate"] = "sweep-timeout"
        if problem.capacity is not None:
            return finish(SolveStatus.TIMEOUT, None)
        return finish(SolveStatus.FEASIBLE, greedy)
    stats.update({"components": len(layout.components), "stacked_buffers": len(layout.stacked),
                  "stacked_bytes": layout.stacked_bytes})

    if problem.capacity is not None:
        outcome, local = layout.decide_all(problem.capacity - layout.stacked_bytes, None,
                                           deadline, native, stats, params.max_nodes)
        if outcome == NOT_FOUND:
            stats["proved_lower_bytes"] = problem.capacity + 1
            return finish(SolveStatus.INFEASIBLE, None)
        if outcome == TIMEOUT:
            return finish(SolveStatus.TIMEOUT, None)
        offsets = layout.compose(local)
        arena = problem.arena_of(offsets)
        return finish(SolveStatus.OPTIMAL if arena == lower_bound else SolveStatus.FEASIBLE,
                      offsets)
    best = layout.greedy()
    target = lower_bound - layout.stacked_bytes
    proved = target  # every arena (above the stack) below `proved` is impossible
    with progress.bar(None, "exact", "capacity") as capacities_bar:
        while proved < layout.height(best):
            outcome, local = layout.decide_all(target, best, deadline, native, stats,
                                               params.max_nodes)
            if outcome == TIMEOUT:
                break
            if outcome == NOT_FOUND:
                proved = target + 1
            else:
                best = local
            low, high = proved + layout.stacked_bytes, layout.height(best) + layout.stacked_bytes
            capacities_bar.update(postfix=f"arena in [{format_bytes(low)}, {format_bytes(high)}]")
            if not params.minimize:
                break
            target = (proved + layout.height(best)) // 2
    stats["proved_lower_bytes"] = proved + layout.stacked_bytes
    offsets = layout.compose(best)
    arena = problem.arena_of(offsets)
    return finish(SolveStatus.OPTIMAL if arena <= stats["proved_lower_bytes"]
                  else SolveStatus.FEASIBLE, offsets)


def _resolve_native(requested: bool | None) -> bool:
    if requested and _native_module is None:
        raise SolverError("native (=True) requires the C search cupool.planning.solvers._exact, "
                          "which is not built; reinstall with a C compiler or pass native=False")
    return _native_module is not None if requested is None else bool(requested)


@dataclass(frozen=True)
class _Layout:
    """The problem after stacking and splitting: ``stacked`` indices go to the bottom
    (``stacked_bytes`` in total); ``components[c]`` lists the problem indices of one time
    component, ``sweeps[c]`` its search input (local index ``j`` is ``components[c][j]``)."""

    problem: StaticProblem
    stacked: np.ndarray
    stacked_bytes: int
    components: tuple
    sweeps: tuple

    @classmethod
    def of(cls, problem: StaticProblem, deadline: float | None = None) -> _Layout:
        starts, ends, sizes = problem.starts, problem.ends, problem.sizes
        if problem.n == 0:
            return cls(problem, np.zeros(0, np.int64), 0, (), ())
        # i overlaps every j exactly when it starts before the first end and ends after
        # the last start (its own interval is among them and never disqualifies it).
        everlasting = (starts < ends.min()) & (ends > starts.max())
        stacked = np.flatnonzero(everlasting)
        rest = np.flatnonzero(~everlasting)
        rest = rest[np.lexsort((rest, starts[rest]))]
        components, current, reach = [], [], 0
        for i in rest.tolist():
            if current and starts[i] >= reach:  # nothing so far lives past this start
                components.append(np.array(sorted(current), dtype=np.int64))
                current = []
            current.append(i)
            reach = max(reach, int(ends[i]))
        if current:
            components.append(np.array(sorted(current), dtype=np.int64))
        sweeps = tuple(sweep(starts[c].tolist(), ends[c].tolist(), sizes[c].tolist(), deadline)
                       for c in components)
        return cls(problem, stacked, int(sizes[stacked].sum()), tuple(components), sweeps)

    def decide_all(self, capacity: int, best, deadline: float, native: bool, stats: dict,
                   max_nodes: int | None = None):
        """Fit every component into ``capacity`` (components already within it in
        ``best`` are kept): ``(FOUND, local offsets)``, ``(NOT_FOUND, None)`` or
        ``(TIMEOUT, None)``; the searches visit ``max_nodes`` nodes at most in all (counted
        in ``stats["nodes"]``) when it is set."""
        local = []
        for c, component in enumerate(self.sweeps):
            if best is not None and _height(component, best[c]) <= capacity:
                local.append(best[c])
                continue
            remaining = 0
            if max_nodes:
                remaining = max_nodes - stats["nodes"]
                if remaining <= 0:
                    return TIMEOUT, None
            decision = decide(component, capacity, deadline, native, remaining)
            stats["decisions"] += 1
            stats["nodes"] += decision.nodes
            stats["backtracks"] += decision.backtracks
            if decision.outcome != FOUND:
                return decision.outcome, None
            local.append(decision.offsets)
        return FOUND, local

    def greedy(self) -> list:
        """Greedy-by-size offsets of every component: the minimizer's first upper bound."""
        starts, ends, sizes = self.problem.starts, self.problem.ends, self.problem.sizes
        return [solve_greedy_size(StaticProblem.from_arrays(starts[c], ends[c], sizes[c]),
                                  SolverParams()).offsets.tolist()
                for c in self.components]

    def height(self, local) -> int:
        """Highest top over all components (0 without components)."""
        return max((_height(s, o) for s, o in zip(self.sweeps, local, strict=True)), default=0)

    def compose(self, local) -> np.ndarray:
        """Problem-indexed offsets: the stack at the bottom, components above it."""
        offsets = np.zeros(self.problem.n, dtype=np.int64)
        sizes = self.problem.sizes[self.stacked]
        offsets[self.stacked] = np.cumsum(sizes) - sizes
        for indices, component_offsets in zip(self.components, local, strict=True):
            offsets[indices] = np.asarray(component_offsets, dtype=np.int64) + self.stacked_bytes
        return offsets


def _height(component: Sweep, offsets) -> int:
    return max((o + s for o, s in zip(offsets, component.sizes, strict=True)), default=0)
