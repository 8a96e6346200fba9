"""The independent validators: prove a plan or name the first rule it breaks.

Naive on purpose and sharing no code with the planners or the simulator (MiniMalloc's
validator is the model): they read plain sizes, lifetimes, offsets, residencies and
actions from :mod:`cupool.core` and return a :class:`ValidationReport`, never raise for a
broken plan. Every solver, budget planner, the simulator, the runtime and the CLI accept
a plan only through them.

- :mod:`~cupool.check.static`: rules for static plans (one offset per buffer);
- :mod:`~cupool.check.swapping`: rules for swapping plans (residencies and actions);
- :mod:`~cupool.check.overlap`: the one address × time overlap sweep both use;
- :mod:`~cupool.check.columns`, :mod:`~cupool.check.quiet`, :mod:`~cupool.check.memory`:
  a swapping plan as NumPy columns, and the sound screens that clear most of a large plan
  at once (the rules one by one word every failure);
- :mod:`~cupool.check.report`: the report and the helper that builds a failed one.
"""

from __future__ import annotations

from cupool.check.report import ValidationReport
from cupool.check.static import Lifetime, check_offsets, validate_offsets, validate_static_plan
from cupool.check.swapping import validate_swap_plan
from cupool.core.vocabulary import Plan, Trace


def validate_plan(trace: Trace, plan: Plan) -> ValidationReport:
    """Validate a :class:`~cupool.core.Plan` against the trace it claims to be for: a
    static plan by the rules of :mod:`~cupool.check.static`, a swapping plan by those of
    :mod:`~cupool.check.swapping`."""
    if plan.is_static:
        return validate_static_plan(trace, plan)
    return validate_swap_plan(trace, plan)


__all__ = ["Lifetime", "ValidationReport", "check_offsets", "validate_offsets", "validate_plan",
           "validate_static_plan", "validate_swap_plan"]
