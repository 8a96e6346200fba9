"""Pictures of traces and plans: pure functions of saved data, drawn offline.

Three pictures, each a function of plain objects that writes one file (PNG or SVG, told
by the extension; anything else raises :class:`VizFormatError`):

- :func:`plot_layout` ``(trace, plan, path)``: address × time layout of a plan (buffers as
  rectangles; swapped and recomputed intervals of swapping plans marked; lower bound);
- :func:`plot_memory` ``(trace, plan, path)``: bytes per op, the plan vs the CuPy-pool and
  PyTorch-allocator models vs the lower bound;
- :func:`plot_timeline` ``(trace, plan, cost, path)``: the simulator's compute / H2D / D2H
  lanes with recomputes and stalls.

:func:`viz` is what ``cupool viz TRACE [PLAN] --out FILE.png|.svg [--kind ...]`` runs: it
reads the files (any trace format :func:`cupool.io.load_trace` reads), plans the trace
itself when no plan is given, and draws one picture.

matplotlib is the optional extra ``pip install 'cupool[viz]'``; without it the functions
raise :class:`MissingExtraError` saying so. Output is deterministic: the same inputs and
versions give byte-identical files (see :mod:`cupool.viz._render`).
"""

from __future__ import annotations

import os

from cupool.viz._render import FORMATS, MissingExtraError, VizFormatError, output_format
from cupool.viz.layout import plot_layout
from cupool.viz.memory import plot_memory
from cupool.viz.timeline import plot_timeline

KINDS = ("layout", "memory", "timeline")
"""The pictures :func:`viz` draws."""


def viz(trace_path: str | os.PathLike, plan_path: str | os.PathLike | None = None, *,
        out: str | os.PathLike, kind: str = "layout", solver: str = "auto",
        budget: str | int | None = None, link: str = "gen5") -> dict:
    """Draw picture ``kind`` of the trace at ``trace_path`` to ``out`` (``.png``/``.svg``).

    The plan is read from ``plan_path`` (plan JSON, or MiniMalloc CSV with offsets); without
    one the trace is planned here: with the budget planner (policy ``auto``) when ``budget``
    is given (bytes, ``"4GiB"`` or ``"70%"`` of the lower bound), else with static solver
    ``solver``. ``link`` is the cost model's link preset (``"gen4"``, ``"gen5"``) for the
    budget planner and the timeline.

    Returns a flat dict for the CLI to print: ``out``, ``kind``, ``format``, ``trace``,
    ``plan`` (``"file"``, ``"solver <name>"`` or ``"budget <bytes>"``), ``status``,
    ``arena_bytes``, ``lower_bound_bytes``. The kind and the extension are checked before
    anything is read or planned; :class:`~cupool.errors.InputError` for a bad kind or when
    no plan within the budget exists.
    """
    from cupool.errors import InputError

    if kind not in KINDS:
        raise InputError(f"kind (={kind!r}) must be one of: {', '.join(KINDS)}")
    fmt = output_format(out)
    from cupool.core.units import parse_budget
    from cupool.io import load_trace
    from cupool.planning.planned import make_plan, read_plan
    from cupool.sim.cost import cost_model

    trace = load_trace(trace_path)
    cost = cost_model(link)
    if plan_path is not None:
        planned = read_plan(trace, plan_path)
        source = "file"
    elif budget is not None:
        budget_bytes = parse_budget(budget, trace.lower_bound_bytes())
        planned = make_plan(trace, budget_bytes, policy="auto", cost=cost)
        if not planned.fits:
            raise InputError(f"no plan within budget (={budget_bytes} bytes): {planned.reason}")
        source = f"budget {budget_bytes}"
    else:
        planned = make_plan(trace, solver=solver)
        source = f"solver {solver}"
    plan, trace = planned.plan, planned.trace
    if kind == "layout":
        plot_layout(trace, plan, out)
    elif kind == "memory":
        plot_memory(trace, plan, out)
    else:
        plot_timeline(trace, plan, cost, out)
    return {"out": str(out), "kind": kind, "format": fmt, "trace": trace.name, "plan": source,
            "status": plan.status.value, "arena_bytes": plan.arena_bytes,
            "lower_bound_bytes": plan.lower_bound_bytes}


__all__ = ["FORMATS", "KINDS", "MissingExtraError", "VizFormatError", "plot_layout",
           "plot_memory", "plot_timeline", "viz"]
