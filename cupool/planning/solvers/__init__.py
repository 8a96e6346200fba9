"""Offset solvers behind one interface, by name.

======================  =====================================================================
name                    what it does
======================  =====================================================================
``greedy-size``         largest buffer first, best-fitting gap among the time-overlapping
                        placed buffers (TensorFlow Lite's strategy)
``greedy-breadth``      ops by live bytes, largest first; at each op its unplaced buffers,
                        largest first, into the best-fitting gap
``best-fit``            sweep time (XLA heap-simulator style): at each allocation, the
                        best-fitting free address range of the current heap
``genetic``             a seeded GA over buffer orderings, decoded by a greedy placer
``exact``               complete search (MiniMalloc-style pruning) with proof of optimality
``auto``                fast heuristics, stop at the lower bound, else bounded exact/genetic
======================  =====================================================================

Every solver is ``solve(problem, params) -> SolveResult`` (see :mod:`.base`).
"""

from __future__ import annotations

from importlib import import_module

from cupool.errors import SolverError
from cupool.planning.solvers.base import SolveResult, SolverParams

_REGISTRY = {
    "greedy-size": ("cupool.planning.solvers.greedy", "solve_greedy_size"),
    "greedy-breadth": ("cupool.planning.solvers.greedy", "solve_greedy_breadth"),
    "best-fit": ("cupool.planning.solvers.best_fit", "solve_best_fit"),
    "genetic": ("cupool.planning.solvers.genetic", "solve_genetic"),
    "exact": ("cupool.planning.solvers.exact", "solve_exact"),
    "auto": ("cupool.planning.solvers.auto", "solve_auto"),
}

SOLVER_NAMES = tuple(_REGISTRY)
"""Every registered solver name, in the order the demo and benchmarks list them."""


def get_solver(name: str):
    """The solve function registered as ``name``; :class:`SolverError` names the choices."""
    try:
        module_name, function_name = _REGISTRY[name]
    except KeyError:
        raise SolverError(
            f"unknown solver {name!r}; expected one of: {', '.join(SOLVER_NAMES)}"
        ) from None
    return getattr(import_module(module_name), function_name)


__all__ = ["SOLVER_NAMES", "SolveResult", "SolverParams", "get_solver"]
