"""Static planning: one solver's offsets for every buffer, checked by the validator.

:func:`solve` runs a solver on a :class:`~cupool.planning.problem.StaticProblem` and checks
what it returns (its offsets by the independent validator, its status and arena against
its offsets); :func:`plan` does it for a whole trace and returns a
:class:`~cupool.core.vocabulary.Plan`::

    trace ──► StaticProblem ──► solver(problem, params) ──► SolveResult ──► Plan ──► validator

Everything in :mod:`cupool.planning` that needs static offsets (the front door
:mod:`cupool.planning.planned`, the budget planner's placement, size-class blocks) comes
here, below the package's ``__init__``.
"""

from __future__ import annotations

import time

from cupool.check import validate_offsets
from cupool.core.vocabulary import Placement, Plan, SolveStatus, Trace
from cupool.errors import SolverError
from cupool.planning.problem import StaticProblem
from cupool.planning.solvers import SolveResult, SolverParams, get_solver


def solve(problem: StaticProblem, solver: str = "auto", params: SolverParams | None = None,
          *, validate: bool = True) -> SolveResult:
    """Run the solver named ``solver`` on ``problem`` and check its offsets with the validator.

    A solver whose offsets fail the validator is a bug: :class:`SolverError` says which rule.
    A solver whose status or arena does not match its offsets is one too. ``validate=False``
    leaves the validator to the caller, for the offsets it keeps (on large problems it
    costs more than the solve, and a caller may discard most results).
    """
    function = get_solver(solver)
    started = time.perf_counter()
    result = function(problem, params or SolverParams())
    if result.offsets is not None:
        if validate:
            check_solver_offsets(problem, solver, result.offsets)
        _check_claims(problem, solver, result)
    if result.solve_seconds <= 0:
        seconds = time.perf_counter() - started
        result = SolveResult(result.status, result.offsets, result.arena_bytes, seconds,
                             result.stats)
    return result


def check_solver_offsets(problem: StaticProblem, solver: str, offsets) -> None:
    """Raise :class:`SolverError` when ``offsets`` (of ``problem``, by ``solver``) fail the
    validator."""
    report = validate_offsets(problem.with_capacity(None), offsets)
    if not report.valid:
        raise SolverError(f"solver {solver!r} returned an invalid plan: {report.message}")


def _check_claims(problem: StaticProblem, solver: str, result: SolveResult) -> None:
    fits = problem.capacity is None or result.arena_bytes <= problem.capacity
    claimed = result.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)
    if claimed != fits or result.arena_bytes != problem.arena_of(result.offsets):
        raise SolverError(
            f"solver {solver!r} says {result.status.value} with arena_bytes "
            f"(={result.arena_bytes}) but its offsets need {problem.arena_of(result.offsets)} "
            f"bytes for capacity (={problem.capacity})")


def plan(trace: Trace, solver: str = "auto", capacity: int | None = None,
         params: SolverParams | None = None) -> Plan:
    """Plan offsets for every buffer of ``trace`` with ``solver``.

    Returns a plan whatever the status; ``plan.status`` says whether it fits ``capacity``
    (``over_capacity``, ``infeasible`` and ``timeout`` plans have no placements when the
    solver found none).
    """
    problem = StaticProblem.from_trace(trace, capacity)
    result = solve(problem, solver, params)
    placements = ()
    arena = 0
    if result.offsets is not None:
        placements = tuple(Placement(int(i), int(o))
                           for i, o in zip(problem.ids, result.offsets, strict=True))
        arena = int(result.arena_bytes)
    return Plan(trace.name, trace.digest(), solver, SolveStatus(result.status), arena,
                problem.lower_bound(), placements, result.solve_seconds, capacity,
                dict(result.stats))


__all__ = ["check_solver_offsets", "plan", "solve"]
