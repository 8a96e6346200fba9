"""Planning: lower bounds, the offset solvers, and (in :mod:`.budget`) swaps and recompute.

The front door for every consumer is :func:`make_plan` (or :func:`read_plan` for a plan
file): a trace and a budget in, a :class:`PlannedTrace` out (the plan, the trace it is for,
how it was obtained, the validator's report); see :mod:`.planned`. Below it, :func:`plan`
places every buffer with one static solver (:mod:`.static`)::

    trace ──► StaticProblem ──► solver(problem, params) ──► SolveResult ──► Plan ──► validator

The validator lives below planning, in :mod:`cupool.check`; ``validate_plan``,
``validate_offsets`` and ``ValidationReport`` are re-exported here for callers that plan
and validate in one import.
"""

from __future__ import annotations

from cupool.check import ValidationReport, validate_offsets, validate_plan
from cupool.planning.planned import PlannedTrace, given_plan, make_plan, read_plan
from cupool.planning.problem import StaticProblem
from cupool.planning.solvers import SOLVER_NAMES, SolveResult, SolverParams
from cupool.planning.static import check_solver_offsets, plan, solve

__all__ = ["SOLVER_NAMES", "PlannedTrace", "SolveResult", "SolverParams", "StaticProblem",
           "ValidationReport", "check_solver_offsets", "given_plan", "make_plan", "plan",
           "read_plan", "solve", "validate_offsets", "validate_plan"]
