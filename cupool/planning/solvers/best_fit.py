"""Best-fit heap simulation (XLA's heap-simulator style): replay the iteration in time order.

Unlike the greedy solvers, which see every lifetime at once, this one behaves like an online
allocator that knows nothing of the future: it sweeps the ops, and at op ``t`` first frees
the buffers ending at ``t`` (half-open lifetimes: a buffer with ``end = t`` is gone before op
``t`` runs) and then allocates the buffers starting at ``t`` — larger first, ties longer
lifetime first, then lower index. The free address ranges below the heap top are kept
coalesced; an allocation takes the smallest free range it fits (ties: lowest offset) at
that range's start, and otherwise grows the heap: from the start of the free range touching
the top if there is one, else from the top itself::

    op:      0   1   2   3
    A 4B     [===)                 op 0: A at 0, B at 4              heap top 6
    B 2B     [===========)         op 1: A freed → free [0, 4)
    C 3B         [===)             op 1: C best fit [0, 4) → at 0, free [3, 4)
    D 2B             [===)         op 2: C freed → free [0, 4); D at 0

It is the baseline that shows what planning buys over an allocator run in program order,
and it is linear-logarithmic: ``O(n log n)`` plus ``O(f)`` list shifts per event for ``f``
free ranges.
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right, insort

import numpy as np

from cupool.planning.problem import StaticProblem
from cupool.planning.solvers.base import SolveResult, SolverParams, heuristic_result


def solve_best_fit(problem: StaticProblem, params: SolverParams) -> SolveResult:
    """Sweep time with a best-fit free list; ``params`` is not used (it always finishes)."""
    started = time.perf_counter()
    index = np.arange(problem.n)
    allocations = np.lexsort((index, problem.starts - problem.ends, -problem.sizes,
                              problem.starts)).tolist()
    frees = np.argsort(problem.ends, kind="stable").tolist()
    starts, ends, sizes = (a.tolist() for a in (problem.starts, problem.ends, problem.sizes))
    heap = _FreeList()
    offsets = [0] * problem.n
    freed = 0
    for j in allocations:
        while freed < len(frees) and ends[frees[freed]] <= starts[j]:
            k = frees[freed]
            heap.free(offsets[k], sizes[k])
            freed += 1
        offsets[j] = heap.allocate(sizes[j])
    stats = {"allocation_order": "start, larger, longer, index"}
    return heuristic_result(problem, np.array(offsets, dtype=np.int64),
                            time.perf_counter() - started, stats)


class _FreeList:
    """Coalesced free byte ranges below ``top``, by offset and by (size, offset)."""

    def __init__(self) -> None:
        self.top = 0
        self.starts: list[int] = []
        self.end_of: dict[int, int] = {}
        self.by_size: list[tuple[int, int]] = []

    def _add(self, start: int, end: int) -> None:
        insort(self.starts, start)
        self.end_of[start] = end
        insort(self.by_size, (end - start, start))

    def _remove(self, start: int) -> int:
        end = self.end_of.pop(start)
        del self.starts[bisect_left(self.starts, start)]
        del self.by_size[bisect_left(self.by_size, (end - start, start))]
        return end

    def allocate(self, size: int) -> int:
        """The offset of ``size`` new bytes: best-fitting free range, else grow the top."""
        fit = bisect_left(self.by_size, (size, -1))
        if fit < len(self.by_size):
            start = self.by_size[fit][1]
            end = self._remove(start)
            if end > start + size:
                self._add(start + size, end)
            return start
        start = self.top
        if self.starts and self.end_of[self.starts[-1]] == self.top:
            start = self.starts[-1]
            self._remove(start)
        self.top = start + size
        return start

    def free(self, start: int, size: int) -> None:
        """Return ``[start, start + size)``, merged with free neighbours on either side."""
        end = start + size
        at = bisect_right(self.starts, start)
        if at < len(self.starts) and self.starts[at] == end:
            end = self._remove(end)
        if at > 0 and self.end_of[self.starts[at - 1]] == start:
            start = self.starts[at - 1]
            self._remove(start)
        self._add(start, end)


__all__ = ["solve_best_fit"]
