"""The input of ``exact``'s depth-first search and the search in pure Python.

:func:`sweep` turns one time component (buffers with a size over a half-open lifetime)
into sections and overlaps (:class:`Sweep`); :class:`PySearch` places it within a capacity
with MiniMalloc's pruning rules (see :mod:`cupool.planning.solvers.exact`, which calls it
when the compiled twin ``_exact.c`` is not built). Both searches visit the same nodes in the
same order, so they return the same offsets and node counts when they finish.
"""

from __future__ import annotations

import itertools
import sys
import time
from dataclasses import dataclass

# Search outcomes, shared with _exact.c.
FOUND, NOT_FOUND, ABORTED, TIMEOUT = 0, 1, 2, 3
CLOCK_EVERY = 256  # nodes between two looks at the clock (both implementations)


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


class OutOfTime(Exception):
    """The deadline passed while preparing the search (the sweep is quadratic in the
    number of simultaneously live buffers, so on huge traces it can take a while)."""


def sweep(starts, ends, sizes, deadline: float | None = None) -> Sweep:
    """Sections, section ranges and overlaps of one component (lists of equal length).

    Ends are processed before starts at the same op (half-open lifetimes); a section
    is recorded at the first end after the live set last grew. Raises :class:`OutOfTime`
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
            raise OutOfTime
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


class PySearch:
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
        if self.nodes % CLOCK_EVERY == 0 and time.monotonic() > self.deadline:
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
