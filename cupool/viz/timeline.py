"""The simulator's stream timeline: one iteration on the compute, H2D and D2H lanes.

Drawn from :func:`cupool.sim.simulate`'s per-event records (``op_times``, ``copies``,
``recomputes``)::

    compute |op0|op1|▒stall▒|rc|op2|op3|...     ops coloured by phase (fw, bw, opt)
    H2D     |       |swap-in b1 ...|            one bar per copy, [start, end)
    D2H     |   |swap-out b1 ......|

A stall is the time the compute stream sat idle: from op ``i``'s dispatch to the start of
its recomputes (or of the op), and after the last op until the last copy completes. Stalls
are hatched red spans on the compute lane, with a ▼ above each so that short ones stay
visible.
"""

from __future__ import annotations

import os

from cupool.core.units import format_bytes
from cupool.core.vocabulary import Plan, Trace
from cupool.errors import InputError
from cupool.sim.cost import D2H, H2D, CostModel, cost_model
from cupool.sim.simulator import SimReport, simulate
from cupool.viz._render import check_plan, figure, time_unit

PHASE_COLORS = {"fw": "#4c72b0", "bw": "#55a868", "opt": "#8172b3", None: "#7f7f7f"}
"""Colour of an op's bar by its phase (``None``: no phase, or an unknown one)."""
RECOMPUTE_COLOR = "#e78ac3"
STALL_COLOR = "#d62728"
COPY_COLORS = {H2D: "#fc8d62", D2H: "#1f4e9c"}
LANES = {"compute": 2, H2D: 1, D2H: 0}
"""y position of each lane (compute on top)."""


def stall_spans(report: SimReport) -> list[tuple[float, float]]:
    """``[(start_us, end_us)]`` when the compute stream waited (see the module docstring)."""
    first_recompute = {}
    for _buffer, before_op, start, _end in report.recomputes:
        first_recompute.setdefault(before_op, start)
    spans = []
    for op, (dispatch, start, _end) in enumerate(report.op_times):
        busy_from = first_recompute.get(op, start)
        if busy_from > dispatch:
            spans.append((dispatch, busy_from))
    last_op_end = report.op_times[-1][2] if report.op_times else 0.0
    last_copy_end = max((c[5] for c in report.copies), default=0.0)
    if last_copy_end > last_op_end:
        spans.append((last_op_end, last_copy_end))
    return spans


def plot_timeline(trace: Trace, plan: Plan, cost: CostModel | None,
                  path: str | os.PathLike) -> dict:
    """Simulate ``plan`` on ``trace`` under ``cost`` (``None``: the Gen5 preset) and draw the
    stream timeline to ``path`` (``.png`` or ``.svg``); return the report's
    :meth:`~cupool.sim.SimReport.summary`.

    A swapping plan's recomputes need recipes: a trace without any gets the derived ones
    (:func:`~cupool.planning.budget.recipes.with_recompute_recipes`), as the planners did.
    An infeasible plan raises :class:`~cupool.errors.InputError` with the simulator's
    reason; other errors as :func:`cupool.viz.plot_layout`.
    """
    check_plan(trace, plan)
    if not plan.is_static:
        from cupool.planning.budget.recipes import with_recompute_recipes

        trace = with_recompute_recipes(trace)
    cost = cost or cost_model()
    report = simulate(trace, plan, cost)
    if not report.feasible:
        raise InputError(f"cannot draw the timeline: {report.reason}")
    unit, scale = time_unit(report.iteration_us)
    with figure(path, 11.0, 3.8) as (_fig, ax):
        _draw_lanes(ax, trace, report, scale)
        ax.set_xlim(0, max(report.iteration_us, 1e-9) / scale)
        ax.set_ylim(-0.6, 3.1)
        ax.set_yticks([LANES["compute"], LANES[H2D], LANES[D2H]],
                      ["compute", "H2D (swap-in)", "D2H (swap-out)"])
        ax.grid(axis="y", visible=False)
        ax.set_xlabel(f"time ({unit})")
        swapped = format_bytes(report.swapped_bytes)
        ax.set_title(
            f"{trace.name}: {plan.solver} plan, simulated iteration\n"
            f"{report.iteration_us / scale:,.2f} {unit} = ideal "
            f"{report.ideal_us / scale:,.2f} + recompute {report.recompute_us / scale:,.2f} "
            f"+ stall {report.stall_us / scale:,.2f} ({report.overhead:.1%} overhead); "
            f"{len(report.copies)} copies moving {swapped} over a "
            f"{cost.h2d_gbps:g} / {cost.d2h_gbps:g} GB/s (H2D / D2H) link")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), borderaxespad=0.3)
    return report.summary()


def _draw_lanes(ax, trace, report, scale) -> None:
    half = 0.35
    compute_y = (LANES["compute"] - half, 2 * half)
    by_phase = {}
    for op, (_dispatch, start, end) in enumerate(report.op_times):
        phase = trace.ops[op].phase if trace.ops[op].phase in PHASE_COLORS else None
        by_phase.setdefault(phase, []).append((start / scale, (end - start) / scale))
    for phase, color in PHASE_COLORS.items():
        if phase in by_phase:
            ax.broken_barh(by_phase[phase], compute_y, facecolors=color, linewidth=0,
                           label=f"op ({phase})" if phase else "op")
    if report.recomputes:
        spans = [(s / scale, (e - s) / scale) for _b, _op, s, e in report.recomputes]
        ax.broken_barh(spans, compute_y, facecolors=RECOMPUTE_COLOR, linewidth=0,
                       label=f"recompute ({len(spans)})")
    stalls = stall_spans(report)
    if stalls:
        ax.broken_barh([(s / scale, (e - s) / scale) for s, e in stalls], compute_y,
                       facecolors="none", edgecolor=STALL_COLOR, hatch="xxxx", linewidth=0.6,
                       label=f"stall ({len(stalls)})")
        ax.scatter([(s + e) / 2 / scale for s, e in stalls],
                   [LANES["compute"] + half + 0.15] * len(stalls), marker="v", s=14,
                   color=STALL_COLOR, linewidths=0)
    for direction in (H2D, D2H):
        spans = [(c[4] / scale, (c[5] - c[4]) / scale) for c in report.copies
                 if c[1] == direction]
        if spans:
            ax.broken_barh(spans, (LANES[direction] - half, 2 * half),
                           facecolors=COPY_COLORS[direction], edgecolor="white", linewidth=0.2,
                           label=f"{direction.upper()} copy ({len(spans)})")
