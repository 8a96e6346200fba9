"""A job's persistent and temporary needs, measured from its recorded trace.

- *persistent*: the trace's persistent buffers (``kind == "persistent"``: weights, optimizer
  state; they live across the iteration boundary), laid side by side, so their sum;
- *temporary*: the arena of a static plan for every other buffer (solver ``auto`` by
  default), checked by the independent validator. That is what the job needs in the shared
  temporary region during one iteration.
"""

from __future__ import annotations

from dataclasses import replace

from cupool.check import validate_plan
from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.errors import SolverError
from cupool.sharing.layout import JobNeeds


def needs_from_trace(trace: Trace, job: str | None = None, solver: str = "auto",
                     params=None) -> JobNeeds:
    """:class:`JobNeeds` for ``trace`` (named ``job``, default the trace's name)."""
    from cupool.planning import plan

    persistent = sum(b.size for b in trace.buffers if b.kind == PERSISTENT)
    temporary_trace = replace(trace, buffers=tuple(b for b in trace.buffers
                                                   if b.kind != PERSISTENT))
    temporary = 0
    if temporary_trace.buffers:
        temporary_plan = plan(temporary_trace, solver, params=params)
        report = validate_plan(temporary_trace, temporary_plan)
        if not report.valid:
            raise SolverError(f"solver {solver!r} gave an invalid temporary plan for "
                              f"{trace.name!r}: {report.message}")
        temporary = temporary_plan.arena_bytes
    return JobNeeds(job or trace.name, persistent, temporary)
