"""Planning a recorded program: the budget planner's ``auto`` policy on the program's trace.

The trace carries its own recompute recipes (:meth:`~cupool.program.program.Program.to_trace`
gives one only where re-running the op reproduces the bytes), so the planner must not derive
others. :func:`~cupool.planning.budget.plan_with_budget` derives recipes only for a trace
that has none; a program with no recomputable output is therefore planned by the ``auto``
policy directly, on the trace as it is, so that no buffer is ever planned to be recomputed
by an op that would not reproduce it.
"""

from __future__ import annotations

import time

from cupool.core.trace_rules import check_trace_format
from cupool.core.vocabulary import RecomputeAction, Trace
from cupool.planning import PlannedTrace
from cupool.planning.budget import BudgetParams, get_policy, plan_with_budget
from cupool.planning.budget.recipes import has_recipes
from cupool.program.errors import ProgramError

POLICY = "auto"


def plan_program(trace: Trace, budget_bytes: int, cost,
                 params: BudgetParams | None = None) -> PlannedTrace:
    """The ``auto`` policy's plan of ``trace`` (a program's) within ``budget_bytes`` on the
    link ``cost``, with the planner's ``params`` (default :class:`BudgetParams`); ``fits``
    and ``reason`` say whether there is one."""
    if params is None:
        params = BudgetParams()
    if has_recipes(trace):
        check_trace_format(trace)
        result = plan_with_budget(trace, budget_bytes, POLICY, cost, params)
    else:
        result = get_policy(POLICY)(trace, budget_bytes, cost, params, time.perf_counter())
    planned = PlannedTrace(result.plan, result.trace, f"budget {budget_bytes} ({POLICY})",
                           result)
    allowed = {b.id for b in trace.buffers if b.recompute is not None}
    stray = [a.buffer_id for a in planned.plan.actions
             if isinstance(a, RecomputeAction) and a.buffer_id not in allowed]
    if stray:  # a planner bug: never run a recompute the program cannot do
        raise ProgramError(f"the {POLICY} policy planned to recompute buffers {stray}, "
                           f"which have no recompute recipe in the program's trace")
    return planned


__all__ = ["POLICY", "plan_program"]
