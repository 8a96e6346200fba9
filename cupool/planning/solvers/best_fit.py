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

The free ranges are the shared :class:`~cupool.core.free_ranges.FreeRanges` (best fit, one
region from 0 that :meth:`~cupool.core.free_ranges.FreeRanges.allocate` grows at its top).
It is the baseline that shows what planning buys over an allocator run in program order,
and it is linear-logarithmic: ``O(n log n)`` plus ``O(f)`` list shifts per event for ``f``
free ranges. The sweep runs compiled (``_bestfit.c``) where the optional extension is built,
with the same offsets: the budget planner's placements try this solver on every schedule
the first one cannot place (thousands of residencies, several times a plan).
"""

from __future__ import annotations

import time

import numpy as np

from cupool.core.free_ranges import FreeRanges
from cupool.errors import SolverError
from cupool.planning.problem import StaticProblem
from cupool.planning.solvers.base import SolveResult, SolverParams, heuristic_result

try:
    from cupool.planning.solvers import _bestfit
except ImportError:  # the optional C extension is not built
    _bestfit = None

COMPILED_AVAILABLE = _bestfit is not None
"""Whether the C extension ``_bestfit`` is built (the sweep then runs compiled)."""


def solve_best_fit(problem: StaticProblem, params: SolverParams) -> SolveResult:
    """Sweep time with a best-fit free list; of ``params`` only ``native`` is read (the
    compiled sweep when built and ``native`` is not ``False``: the same offsets)."""
    started = time.perf_counter()
    index = np.arange(problem.n)
    allocations = np.lexsort((index, problem.starts - problem.ends, -problem.sizes,
                              problem.starts))
    frees = np.argsort(problem.ends, kind="stable")
    if params.native and _bestfit is None:
        raise SolverError("native=True but the C extension cupool.planning.solvers._bestfit "
                          "is not built (pip install -e . with a C compiler)")
    if _compiled(problem, params):
        offsets = np.zeros(problem.n, dtype=np.int64)
        _bestfit.sweep(problem.starts, problem.ends, problem.sizes, allocations, frees, offsets)
    else:
        offsets = np.array(_sweep(problem, allocations.tolist(), frees.tolist()),
                           dtype=np.int64)
    stats = {"allocation_order": "start, larger, longer, index"}
    return heuristic_result(problem, offsets, time.perf_counter() - started, stats)


def _compiled(problem: StaticProblem, params: SolverParams) -> bool:
    """Whether the compiled sweep runs: built, not declined, and every buffer with bytes
    and ops (the Python loop is the reference for the rest)."""
    return (_bestfit is not None and params.native is not False and problem.n > 0
            and int(problem.sizes.min()) > 0 and bool(np.all(problem.starts < problem.ends)))


def _sweep(problem: StaticProblem, allocations: list[int], frees: list[int]) -> list[int]:
    """The sweep in Python: the reference the compiled one is tested against."""
    starts, ends, sizes = (a.tolist() for a in (problem.starts, problem.ends, problem.sizes))
    heap = FreeRanges()
    heap.add_region(0, 0)  # the heap: [0, top), grown at the top when nothing fits
    offsets = [0] * problem.n
    freed = 0
    for j in allocations:
        while freed < len(frees) and ends[frees[freed]] <= starts[j]:
            heap.free(offsets[frees[freed]])
            freed += 1
        offsets[j] = heap.allocate(sizes[j], grow=0)
    return offsets


__all__ = ["solve_best_fit"]
