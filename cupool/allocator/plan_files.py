"""Plans the pool installs from outside: the checks they pass, and the files they live in.

A pool plan is a static plan over a *pool recording*: a trace whose buffer ``k`` is the
k-th allocation of an iteration (ids ``0..n-1`` for ``n`` ops, sizes multiples of
:data:`~cupool.allocator.arena.ALLOCATION_UNIT`), as
:func:`~cupool.allocator.recording.to_trace` makes it. ``PlannedPool.save_plan`` writes
one as two files, the plan JSON and the trace (trace v1) beside it; ``load_plan`` reads
them back (:func:`read_pool_plan`) and ``install_plan`` takes them as objects. Both
install through :func:`check_pool_plan`, so every plan the pool runs that it did not
solve itself passes the same checks, in this order:

1. the plan is static (placements only; the swap runtime serves swapping plans through a
   pool, as a static plan over their residencies);
2. the validator accepts it for the trace (:func:`cupool.planning.validate_plan`);
3. the trace is a pool recording (:func:`~cupool.allocator.recording.from_trace`);
4. every size is a multiple of the allocation unit.

Each refusal is a :class:`~cupool.errors.PlanFormatError` naming the plan file, or the
trace file for a trace that is not a recording, when there are files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cupool.allocator.arena import ALLOCATION_UNIT
from cupool.allocator.recording import RecordedIteration, from_trace
from cupool.core.vocabulary import Plan, Trace
from cupool.errors import PlanFormatError

__all__ = ["PoolPlan", "check_pool_plan", "companion_trace_path", "read_pool_plan",
           "write_pool_plan"]


@dataclass(frozen=True)
class PoolPlan:
    """A plan the pool can install: ``plan``, its ``trace`` (a pool recording) and the
    ``recording`` that trace describes (slot ``k``'s size and planned lifetime)."""

    plan: Plan
    trace: Trace
    recording: RecordedIteration


def check_pool_plan(plan: Plan, trace: Trace, method: str,
                    plan_path: str | os.PathLike | None = None,
                    trace_path: str | os.PathLike | None = None) -> PoolPlan:
    """``plan`` for ``trace`` as the pool installs it, after the checks of the module
    docstring; ``method`` (``"load_plan"``, ``"install_plan"``) names the caller in the
    first check's message. :class:`~cupool.errors.PlanFormatError` on the first that
    fails, with ``path`` the plan file (the trace file for a trace that is not a pool
    recording), when given."""
    from cupool.check import validate_plan

    plan_file = None if plan_path is None else str(plan_path)
    trace_file = None if trace_path is None else str(trace_path)
    if not plan.is_static:
        raise PlanFormatError(f"{method}() takes a static plan (placements only); the swap "
                              f"runtime serves swapping plans through one", path=plan_file)
    report = validate_plan(trace, plan)
    if not report.valid:
        raise PlanFormatError(f"the plan is invalid for its trace: {report.message}",
                              path=plan_file)
    try:
        recording = from_trace(trace)
    except ValueError as exc:
        raise PlanFormatError(str(exc), path=trace_file) from None
    odd = [s for s in recording.sizes if s % ALLOCATION_UNIT]
    if odd:
        raise PlanFormatError(f"buffer size (={odd[0]}) is not a multiple of "
                              f"{ALLOCATION_UNIT}: not a pool recording", path=plan_file)
    return PoolPlan(plan, trace, recording)


def companion_trace_path(path: str | os.PathLike) -> Path:
    """Where a plan file's trace lives by default: ``x.json`` -> ``x.trace.json``."""
    path = Path(path)
    name = path.name.removesuffix(".json")
    return path.with_name(f"{name}.trace.json")


def write_pool_plan(plan: Plan, trace: Trace, path: str | os.PathLike,
                    trace_path: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Write ``plan`` as plan JSON at ``path`` and ``trace`` (trace v1) at ``trace_path``
    (default: :func:`companion_trace_path`); both paths."""
    from cupool.io import save_plan, save_trace

    path = Path(path)
    trace_path = Path(trace_path) if trace_path is not None else companion_trace_path(path)
    save_trace(trace, trace_path)
    save_plan(plan, path)
    return path, trace_path


def read_pool_plan(path: str | os.PathLike,
                   trace_path: str | os.PathLike | None = None) -> PoolPlan:
    """Read a plan written by :func:`write_pool_plan` and check it
    (:func:`check_pool_plan`). The plan must carry its trace's digest first:
    :class:`~cupool.errors.PlanFormatError` names both digests otherwise."""
    from cupool.io import load_plan, load_trace

    path = Path(path)
    trace_path = Path(trace_path) if trace_path is not None else companion_trace_path(path)
    plan = load_plan(path)
    trace = load_trace(trace_path)
    if plan.trace_digest != trace.digest():
        raise PlanFormatError(
            f"the plan is for trace digest {plan.trace_digest!r} ({plan.trace_name!r}), "
            f"but {trace_path} has digest {trace.digest()!r}: a plan for another trace",
            path=str(path))
    return check_pool_plan(plan, trace, "load_plan", path, trace_path)
