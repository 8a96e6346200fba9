"""One way to get a plan for a trace, whoever asks: the CLI, the pictures, the replay, stress.

:func:`make_plan` plans (a static solver, or the budget planner when the budget is below
what any static plan needs or a budget policy is named); :func:`read_plan` reads one from a
file. Both return a :class:`PlannedTrace`: the plan, the trace it is for (with recompute
recipes when it swaps: the validator, the simulator and the engine need those), a line
saying how the plan was obtained, and the validator's report on the pair (made when first
asked for)::

    trace ──► make_plan(budget, policy | solver) ──► PlannedTrace(plan, trace, source, check)
    trace + path ──► read_plan ──────────────────────┘
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from cupool.check import ValidationReport, validate_plan
from cupool.core.trace_rules import check_trace_format
from cupool.core.vocabulary import Plan, SolveStatus, Trace
from cupool.planning.static import plan as static_plan

if TYPE_CHECKING:
    from cupool.planning.budget.result import BudgetResult
    from cupool.planning.solvers import SolverParams

FITTING = (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)
"""The statuses of a plan that fits its capacity or budget."""


@dataclass(frozen=True)
class PlannedTrace:
    """A plan with the trace it is for and how it was obtained.

    plan: the plan, whatever its status (``plan.status`` says whether it fits).
    trace: the trace to validate, simulate and run the plan against: the input trace for a
      static plan, the input trace plus derived recompute recipes for a swapping one.
    source: how the plan was obtained: ``"solver <name>"``, ``"budget <bytes> (<policy>)"``
      or ``"file <path>"``.
    budget: the budget planner's full result when it made the plan (its candidates, the
      member ``auto`` kept, the simulation), else ``None``.
    """

    plan: Plan
    trace: Trace
    source: str
    budget: BudgetResult | None = None

    @cached_property
    def check(self) -> ValidationReport:
        """The independent validator's report on ``(trace, plan)``."""
        return validate_plan(self.trace, self.plan)

    @property
    def fits(self) -> bool:
        """True when the plan fits its capacity or budget."""
        return self.plan.status in FITTING

    @property
    def valid(self) -> bool:
        """True when the plan has a layout (placements or residencies) the validator accepts."""
        laid_out = bool(self.plan.placements or self.plan.residencies)
        return laid_out and self.check.valid

    @property
    def reason(self) -> str | None:
        """Why there is no plan that fits (the budget planner's line), else ``None``."""
        if self.budget is not None:
            return self.budget.reason
        return None if self.fits else f"status {self.plan.status.value}"


def make_plan(trace: Trace, budget_bytes: int | None = None, *, policy: str | None = None,
              solver: str = "auto", cost=None, solver_params: SolverParams | None = None,
              seed: int = 0, workers: int = 1) -> PlannedTrace:
    """Plan ``trace`` within ``budget_bytes`` (``None``: no limit).

    With ``policy`` (a budget policy such as ``"auto"`` or ``"capuchin"``) the budget
    planner plans swaps and recomputation for ``budget_bytes`` (required) on the link
    ``cost`` (a :class:`~cupool.sim.cost.CostModel`, default PCIe Gen5), seeded by
    ``seed``, its ``auto`` members planned in ``workers`` processes
    (:class:`~cupool.planning.budget.BudgetParams`: 1, none; 0, automatic). Without one,
    static ``solver`` places every buffer within ``budget_bytes`` with ``solver_params``;
    except that below the trace's lower bound, where no static plan exists, solver
    ``"auto"`` hands over to the budget planner's ``auto`` policy. A trace that breaks the
    format's rules (built in Python, so no reader checked it) raises
    :class:`~cupool.errors.TraceFormatError` naming the op or buffer.
    """
    check_trace_format(trace)
    below_bound = budget_bytes is not None and budget_bytes < trace.lower_bound_bytes()
    if policy is None and solver == "auto" and below_bound:
        policy = "auto"
    if policy is not None:
        if budget_bytes is None:
            raise ValueError(f"policy (={policy!r}) plans for a budget: give budget_bytes")
        return _budget_plan(trace, budget_bytes, policy, cost, seed, workers)
    static = static_plan(trace, solver, budget_bytes, solver_params)
    return PlannedTrace(static, trace, f"solver {solver}")


def _budget_plan(trace: Trace, budget_bytes: int, policy: str, cost, seed: int,
                 workers: int) -> PlannedTrace:
    from cupool.planning.budget import BudgetParams, plan_with_budget

    result = plan_with_budget(trace, budget_bytes, policy, cost,
                              BudgetParams(seed=seed, workers=workers))
    return PlannedTrace(result.plan, result.trace, f"budget {budget_bytes} ({policy})", result)


def given_plan(trace: Trace, plan: Plan, source: str) -> PlannedTrace:
    """A plan obtained elsewhere (a file, a caller), checked against ``trace`` (with
    derived recompute recipes added when the plan swaps and ``trace`` has none)."""
    if not plan.is_static:
        from cupool.planning.budget.recipes import with_recompute_recipes

        trace = with_recompute_recipes(trace)
    return PlannedTrace(plan, trace, source)


def read_plan(trace: Trace, path) -> PlannedTrace:
    """The plan in ``path`` (plan JSON, or MiniMalloc CSV with offsets) for ``trace``;
    :class:`~cupool.errors.PlanFormatError` when it is unreadable or for another trace."""
    from cupool.errors import PlanFormatError
    from cupool.io import load_plan

    plan = load_plan(path, trace)
    if plan.trace_digest != trace.digest():
        raise PlanFormatError(
            f"the plan is for trace {plan.trace_name!r} (digest {plan.trace_digest}), "
            f"not for {trace.name!r} (digest {trace.digest()})", path=str(path))
    return given_plan(trace, plan, f"file {path}")


__all__ = ["FITTING", "PlannedTrace", "given_plan", "make_plan", "read_plan"]
