"""The pool's settings: one frozen dataclass, checked when it is made.

``PlannedPool(device, capacity, **options)`` and ``managed(**options)`` pass their keyword
options here, so ``PlannedPool(device, record_iterations=2, name="train")`` makes
``PoolOptions(record_iterations=2, name="train")``.
"""

from __future__ import annotations

from dataclasses import dataclass

from cupool.allocator.errors import PoolError

__all__ = ["PoolOptions"]


@dataclass(frozen=True)
class PoolOptions:
    """How a :class:`~cupool.allocator.pool.PlannedPool` records, plans and names things.

    Args:
        solver: offset solver name (``cupool.planning.SOLVER_NAMES``).
        solver_params: :class:`~cupool.planning.solvers.SolverParams`; default: the
            solver's defaults with ``time_limit_s=solve_time_limit``.
        solve_time_limit: seconds a search may spend planning (default 5).
        divergence_limit: divergent planned iterations in a row before re-recording (>= 1).
        record_iterations: agreeing recorded iterations needed before planning (>= 1).
        name: the name of recorded traces and plans.
        device_options: options for ``open_device`` when the pool opens its device.

    :class:`~cupool.allocator.errors.PoolError` quotes the first bad value.
    """

    solver: str = "auto"
    solver_params: object = None
    solve_time_limit: float = 5.0
    divergence_limit: int = 2
    record_iterations: int = 1
    name: str = "pool"
    device_options: dict | None = None

    def __post_init__(self) -> None:
        for field, value in (("divergence_limit", self.divergence_limit),
                             ("record_iterations", self.record_iterations)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PoolError(f"{field} (={value!r}) must be an int >= 1")
        from cupool.planning.solvers import SOLVER_NAMES

        if self.solver not in SOLVER_NAMES:
            raise PoolError(f"solver (={self.solver!r}) must be one of "
                            f"{', '.join(SOLVER_NAMES)}")

    def resolved_solver_params(self):
        """``solver_params``, or the solver's defaults with ``time_limit_s`` set to
        ``solve_time_limit``."""
        from cupool.planning.solvers import SolverParams

        return self.solver_params or SolverParams(time_limit_s=self.solve_time_limit)
