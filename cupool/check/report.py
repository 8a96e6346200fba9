"""What a validator returns: valid, or the first broken rule with the buffers and numbers.

Infeasible or broken plans are a normal result here, never an exception: every rule set
returns a :class:`ValidationReport`, and the caller decides what a broken rule means (a
solver bug, a candidate to drop, an exit code).
"""

from __future__ import annotations

from dataclasses import dataclass

from cupool.core.vocabulary import Plan, Trace


@dataclass(frozen=True)
class ValidationReport:
    """``valid`` and, when not, the first broken ``rule`` and a one-line ``message``
    that names the buffers and the numbers (``buffers`` lists the ids involved)."""

    valid: bool
    rule: str = ""
    message: str = ""
    buffers: tuple = ()

    def __bool__(self) -> bool:
        return self.valid


VALID = ValidationReport(True)
"""The report of a plan that breaks no rule."""


def failed(rule: str, message: str, *buffers: int) -> ValidationReport:
    """The report of a plan that breaks ``rule``: ``message`` names the ``buffers`` involved."""
    return ValidationReport(False, rule, message, tuple(buffers))


def check_trace(trace: Trace, plan: Plan) -> ValidationReport:
    """Rule [trace], first in every rule set: the plan carries ``trace``'s digest."""
    if plan.trace_digest != trace.digest():
        return failed("trace", f"plan is for trace {plan.trace_name!r} (digest "
                               f"{plan.trace_digest}), not {trace.name!r} (digest "
                               f"{trace.digest()})")
    return VALID
