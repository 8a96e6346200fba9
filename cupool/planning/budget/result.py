"""What every budget policy returns: one frozen :class:`BudgetResult`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cupool.core.vocabulary import Plan, SolveStatus, Trace

if TYPE_CHECKING:
    from cupool.sim.simulator import SimReport


@dataclass(frozen=True)
class BudgetResult:
    """A budget policy's plan and what it is for.

    plan: ``plan.status`` is ``feasible`` (residencies, actions and offsets within the
      budget), ``infeasible`` (no plan can exist: an op's own working set exceeds the
      budget) or ``over_capacity`` (this policy found none).
    trace: the trace the plan is for: the planned trace plus derived recompute recipes
      (:mod:`.recipes`). Give this one, not the input trace, to the validator, the
      simulator and the runtime.
    policy: the policy that made the plan.
    reason: ``None`` for a feasible plan, else one line saying why there is none, such as
      ``"infeasible: op 12 needs 805306368 bytes resident (budget 536870912 bytes)"``.
    candidates: ``auto`` only (else ``None``): per member, its plan's simulated overhead
      (a fraction of the iteration without swaps) or why it has none (the plans ``auto``
      did not rely on are not validated: ``plan.stats["unvalidated"]`` names them).
    member: ``auto`` only: the member whose plan was kept (``None`` when none was).
    simulation: ``auto`` only: the simulator's report of the returned plan.
    """

    plan: Plan
    trace: Trace
    policy: str
    reason: str | None = None
    candidates: Mapping[str, float | str] | None = None
    member: str | None = None
    simulation: SimReport | None = None

    @property
    def feasible(self) -> bool:
        """True when the plan keeps every op within the budget."""
        return self.plan.status == SolveStatus.FEASIBLE
