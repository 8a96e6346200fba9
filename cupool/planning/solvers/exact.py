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
``setup.py``, optional) and :class:`_PySearch`. Both visit the same nodes in the
same order, so they return the same offsets and node counts when they finish.
Nothing is random: ``params.seed`` is not used.
"""

from __future__ import annotations

import itertools
import sys
import time
from dataclasses import dataclass

import numpy as np

from cupool import progress
from cupool.core.units import format_bytes
from cupool.core.vocabulary import SolveStatus
from cupool.errors import SolverError
from cupool.planning.problem import StaticProblem
from cupool.planning.solvers.base import SolveResult, SolverParams
from cupool.planning.solvers.greedy import solve_greedy_size

try:
    from cupool.planning.solvers import _exact as _native_module
except ImportError:  # no C compiler at install time: the Python search is used
    _native_module = None

DEFAULT_TIME_LIMIT_S = 60.0
"""Seconds an ``exact`` solve may take when ``params.time_limit_s`` is ``None``."""

HEURISTICS = ("WAT", "TAW", "TWA")
"""Static preorders tried round-robin (MiniMalloc's defaults); letters as in the module doc."""

# Search outcomes, shared with _exact.c.
FOUND, NOT_FOUND, ABORTED, TIMEOUT = 0, 1, 2, 3
_CLOCK_EVERY = 256  # nodes between two looks at the clock (both implementations)


def native_available() -> bool:
    """True when the compiled search (``cupool.planning.solvers._exact``) is importable."""
    return _native_module is not None


@dataclass(frozen=True)
class Sweep:
    """One time component, ready for the search: buffer ``i`` of the component has
    ``sizes[i]`` bytes and spans sections ``[section_lo[i], section_hi[i])``.

    Sections and overlaps are in CSR form: section ``s`` holds buffers
    ``section_members[section_ptr[s]:section_ptr[s + 1]]``, buffer ``i`` overlaps
    ``overlaps[overlap_ptr[i]:overlap_ptr[i + 1]]`` (ascending). ``widths`` are
    lifetimes in ops (the ``W`` preorder key). All plain lists of ints.
    """

    sizes: list
    widths: list
    section_lo: list
    section_hi: list
    section_ptr: list
    section_members: list
    overlap_ptr: list
    overlaps: list

    @property
    def n(self) -> int:
        return len(self.sizes)


@dataclass(frozen=True)
class Decision:
    """The answer to one decision search: ``outcome`` is ``FOUND`` (with ``offsets``),
    ``NOT_FOUND`` (proved: nothing fits) or ``TIMEOUT``; ``nodes`` and ``backtracks``
    count the whole round-robin."""

    outcome: int
    offsets: list | None
    nodes: int
    backtracks: int


class _OutOfTime(Exception):
    """The deadline passed while preparing the search (the sweep is quadratic in the
    number of simultaneously live buffers, so on huge traces it can take a while)."""


def sweep(starts, ends, sizes, deadline: float | None = None) -> Sweep:
    """Sections, section ranges and overlaps of one component (lists of equal length).

    Ends are processed before starts at the same op (half-open lifetimes); a section
    is recorded at the first end after the live set last grew. Raises :class:`_OutOfTime`
    when ``deadline`` (``time.monotonic()`` seconds) passes first.
    """
    n = len(sizes)
    points = sorted([(end, 0, i) for i, end in enumerate(ends)]
                    + [(start, 1, i) for i, start in enumerate(starts)])
    live: set[int] = set()
    sections: list[list[int]] = []
    section_lo = [0] * n
    section_hi = [0] * n
    last_time = points[0][0] if points else 0
    overlap_sets: list[list[int]] = [[] for _ in range(n)]
    for step, (time_value, is_start, i) in enumerate(points):
        if deadline is not None and step % 1024 == 0 and time.monotonic() > deadline:
            raise _OutOfTime
        if is_start:
            for other in live:
                overlap_sets[other].append(i)
                overlap_sets[i].append(other)
            live.add(i)
            section_lo[i] = len(sections)
        else:
            if last_time < time_value:
                last_time = time_value
                sections.append(sorted(live))
            live.remove(i)
            section_hi[i] = len(sections)
    section_ptr = [0]
    members: list[int] = []
    for section in sections:
        members.extend(section)
        section_ptr.append(len(members))
    overlap_ptr = [0]
    overlaps: list[int] = []
    for others in overlap_sets:
        overlaps.extend(sorted(others))
        overlap_ptr.append(len(overlaps))
    widths = [int(e) - int(s) for s, e in zip(starts, ends, strict=True)]
    return Sweep([int(x) for x in sizes], widths, section_lo, section_hi, section_ptr, members,
                 overlap_ptr, overlaps)


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
        search = _PySearch(component, int(capacity), HEURISTICS, budget, max_nodes)
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
    except _OutOfTime:
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


@dataclass(frozen=True, slots=True)
class _Part:
    """One subproblem of the search: the ``buffers`` (component indices) living in sections
    ``[lo, hi)``, placed in the static ``preorder`` of ``heuristic``. The whole component
    is the first part; dynamic decomposition makes smaller ones."""

    buffers: list
    lo: int
    hi: int
    heuristic: str
    preorder: list


@dataclass(frozen=True, slots=True)
class _Placed:
    """The placement a search node just made: buffer ``i`` (position ``p`` of the part's
    preorder) at ``offset``. ``ordering`` is that node's ``(min_offset, p)`` list, which the
    child node filters; the child's placement must not precede ``(offset, p)`` in it, so
    that each plan is reached once (canonical placements)."""

    i: int
    p: int
    offset: int
    ordering: list


class _PySearch:
    """The pure-Python twin of ``_exact.c``: same state, same order, same counts.

    State (MiniMalloc's names): ``assigned[i]`` offset or -1; ``min_offset[i]`` the
    lowest offset buffer ``i`` may take given its placed neighbours; ``floor[s]`` and
    ``total[s]`` per section (top of the placed part, unplaced bytes); ``cuts[s]``
    buffers spanning the boundary between sections ``s`` and ``s + 1``.

    ``component`` is the sweep to place within ``capacity`` bytes, trying ``heuristics``
    round-robin for at most ``time_limit_s`` seconds and ``max_nodes`` nodes when it is
    positive (the arguments of ``_exact.search``).
    """

    def __init__(self, component: Sweep, capacity: int, heuristics, time_limit_s: float,
                 max_nodes: int = 0):
        sizes, section_ptr, section_members = (component.sizes, component.section_ptr,
                                               component.section_members)
        overlap_ptr, overlaps = component.overlap_ptr, component.overlaps
        section_lo, section_hi = component.section_lo, component.section_hi
        self.sizes, self.widths = sizes, component.widths
        self.section_lo, self.section_hi = section_lo, section_hi
        n, num_sections = len(sizes), len(section_ptr) - 1
        self.members = [section_members[section_ptr[s]:section_ptr[s + 1]]
                        for s in range(num_sections)]
        self.neighbours = [overlaps[overlap_ptr[i]:overlap_ptr[i + 1]] for i in range(n)]
        self.capacity, self.heuristics = capacity, heuristics
        self.deadline = time.monotonic() + time_limit_s
        self.assigned = [-1] * n
        self.solution = [-1] * n
        self.min_offset = [0] * n
        self.floor = [0] * num_sections
        self.witness = [-1] * num_sections  # a member last found at or below the floor
        self.total = [sum(sizes[i] for i in members) for members in self.members]
        self.cuts = [0] * max(num_sections - 1, 0)
        for i in range(n):
            for s in range(section_lo[i], section_hi[i] - 1):
                self.cuts[s] += 1
        self.nodes = self.backtracks = 0
        self.nodes_remaining = 0
        self.max_nodes = max_nodes

    def run(self):
        """Round-robin over the preorders with a doubling node budget:
        ``(outcome, offsets or None, nodes, backtracks)`` like ``_exact.search``.

        The search recurses about three frames per placed buffer, so the interpreter's
        recursion limit is raised for the call and restored afterwards."""
        n = len(self.sizes)
        limit = max(n, 1)
        old_limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old_limit, 4 * n + 1000))
        try:
            while True:
                limit *= 2
                for heuristic in self.heuristics:
                    self.nodes_remaining = limit
                    outcome = self.sub_solve(list(range(n)), 0, len(self.members), heuristic)
                    if outcome != ABORTED:
                        offsets = list(self.solution) if outcome == FOUND else None
                        return outcome, offsets, self.nodes, self.backtracks
        finally:
            sys.setrecursionlimit(old_limit)

    def preorder_key(self, heuristic, i):
        area = self.sizes[i] * self.widths[i]
        total = max(self.total[self.section_lo[i]:self.section_hi[i]])
        values = {"W": self.widths[i], "A": area, "T": total, "Z": self.sizes[i]}
        return (*(-values[letter] for letter in heuristic), i)

    def sub_solve(self, buffers, lo, hi, heuristic):
        preorder = sorted(buffers, key=lambda i: self.preorder_key(heuristic, i))
        ordering = [(0, p) for p in range(len(preorder))]
        return self.search(_Part(buffers, lo, hi, heuristic, preorder), ordering, 0, 0)

    def search(self, part: _Part, parent_ordering, min_offset, min_p):
        if self.nodes_remaining <= 0:
            return ABORTED
        self.nodes_remaining -= 1
        self.nodes += 1
        if 0 < self.max_nodes < self.nodes:
            return TIMEOUT
        if self.nodes % _CLOCK_EVERY == 0 and time.monotonic() > self.deadline:
            return TIMEOUT
        assigned, sizes, preorder = self.assigned, self.sizes, part.preorder
        ordering = sorted((self.min_offset[preorder[p]], p)
                          for _, p in parent_ordering if assigned[preorder[p]] < 0)
        if not ordering:
            for i in part.buffers:
                self.solution[i] = assigned[i]
            return FOUND
        min_height = min(offset + sizes[preorder[p]] for offset, p in ordering)
        for offset, p in ordering:
            if offset < min_offset or (offset == min_offset and p < min_p):
                continue  # not canonical
            if offset >= min_height:
                continue  # dominated: an unplaced buffer fits below
            i = preorder[p]
            assigned[i] = offset
            hatless, offset_log, section_log = self.place(i, offset)
            outcome = NOT_FOUND
            if self.check(part.lo, part.hi, offset):
                outcome = self.decompose(part, _Placed(i, p, offset, ordering))
            self.unplace(i, offset_log, section_log)
            if outcome != NOT_FOUND:
                return outcome
            if hatless:
                break
        self.backtracks += 1
        return NOT_FOUND

    def place(self, i, offset):
        """Raise the neighbours' minimum offsets and the sections' floors for buffer ``i``
        at ``offset``; return ``(hatless, offset_log, section_log)`` for :meth:`unplace`."""
        top = offset + self.sizes[i]
        hatless = True
        offset_log, section_log = [], []
        affected = set()
        for j in self.neighbours[i]:
            if self.assigned[j] >= 0:
                continue
            hatless = False
            if self.min_offset[j] >= top:
                continue
            offset_log.append((j, self.min_offset[j]))
            self.min_offset[j] = top
            affected.update(range(self.section_lo[j], self.section_hi[j]))
        for s in range(self.section_lo[i], self.section_hi[i]):
            section_log.append((s, self.floor[s]))
            self.floor[s] = top
            self.total[s] -= self.sizes[i]
        for s in affected:
            lowest = self._raised_floor(s)
            if lowest is not None:
                section_log.append((s, self.floor[s]))
                self.floor[s] = lowest
        return hatless, offset_log, section_log

    def _raised_floor(self, s):
        """Section ``s``'s floor raised to the lowest min offset of its unplaced members,
        or ``None`` when that is not above the floor (a member at or below it settles
        that: the scan stops there, and the member found is tried first next time) or
        every member is placed."""
        floor, lowest = self.floor[s], None
        w = self.witness[s]
        if w >= 0 and self.assigned[w] < 0 and self.min_offset[w] <= floor:
            return None
        for j in self.members[s]:
            if self.assigned[j] >= 0:
                continue
            if self.min_offset[j] <= floor:
                self.witness[s] = j
                return None
            if lowest is None or self.min_offset[j] < lowest:
                lowest = self.min_offset[j]
        return lowest

    def unplace(self, i, offset_log, section_log):
        for s, floor in reversed(section_log):
            self.floor[s] = floor
        for s in range(self.section_lo[i], self.section_hi[i]):
            self.total[s] += self.sizes[i]
        for j, value in reversed(offset_log):
            self.min_offset[j] = value
        self.assigned[i] = -1

    def check(self, lo, hi, offset):
        capacity, floor, total = self.capacity, self.floor, self.total
        return all(max(offset, floor[s]) + total[s] <= capacity for s in range(lo, hi))

    def decompose(self, part: _Part, placed: _Placed):
        """Continue after the ``placed`` buffer; if that left no buffer across some section
        boundaries, solve the parts between them one after the other."""
        i = placed.i
        self.solution[i] = self.assigned[i]
        cutpoints = [part.lo]
        for s in range(self.section_lo[i], self.section_hi[i] - 1):
            self.cuts[s] -= 1
            if self.cuts[s] == 0:
                cutpoints.append(s + 1)
        if len(cutpoints) == 1:
            outcome = self.search(part, placed.ordering, placed.offset, placed.p)
        else:
            cutpoints.append(part.hi)
            outcome = FOUND
            for part_lo, part_hi in itertools.pairwise(cutpoints):
                inside = [j for j in part.buffers if self.assigned[j] < 0
                          and self.section_hi[j] > part_lo and part_hi > self.section_lo[j]]
                if inside:
                    outcome = self.sub_solve(inside, part_lo, part_hi, part.heuristic)
                    if outcome != FOUND:
                        break
        for s in range(self.section_lo[i], self.section_hi[i] - 1):
            self.cuts[s] += 1
        return outcome
