"""The address × time picture of a plan: where every buffer lives, op by op.

Every residency is a rectangle ``x = [start, end)`` (ops, half-open as everywhere) by
``y = [offset, offset + size)`` (bytes of the arena)::

    offset ▲
           │        ┌───────┐
           │ ┌──────┤ buf 2 │        ─ ─ ─ lower bound (peak live bytes)
           │ │buf 1 ├───────┴──┐     ───── arena
           │ ├──────┴──────────┤
           │ │ buf 0 (persistent)
           └─┴─────────────────┴──► op

A static plan draws one rectangle per buffer (SVG group id ``buffer-<id>``). A swapping
plan draws one per residency (id ``residency-<buffer id>-<start>``), coloured by how it
gets its data (produced, swapped in, recomputed); a swap-out is a ▼ where its D2H copy is
issued (after op ``after_op``), a swap-in a ▲ where its H2D copy is issued (op
``trigger_op``). A second panel below shows the bytes that are off the device at each
op, hatched: on the host (swapped out) or dropped (to be recomputed).
"""

from __future__ import annotations

import os
from collections import defaultdict

from cupool.core.units import format_bytes
from cupool.core.vocabulary import (
    PERSISTENT,
    Plan,
    RecomputeAction,
    SwapIn,
    SwapOut,
    Trace,
    plan_residencies,
)
from cupool.viz._render import byte_unit, check_plan, figure

COLORS = {"persistent": "#8da0cb", "temporary": "#66c2a5", "swapped in": "#fc8d62",
          "recomputed": "#e78ac3"}
"""Fill colour of a rectangle by what it holds / how the residency gets its data."""
LOWER_BOUND_COLOR = "#d62728"
BUDGET_COLOR = "#9467bd"


def _entered_by(plan: Plan) -> dict[tuple[int, int], str]:
    """``{(buffer id, residency start): "swapped in" | "recomputed"}`` from the actions."""
    entered = {}
    for action in plan.actions:
        if isinstance(action, SwapIn):
            entered[(action.buffer_id, action.trigger_op)] = "swapped in"
        elif isinstance(action, RecomputeAction):
            entered[(action.buffer_id, action.before_op)] = "recomputed"
    return entered


def off_device_bytes(trace: Trace, plan: Plan) -> tuple[list[int], list[int]]:
    """Per op, the bytes of live buffers that are not resident: ``(on_host, dropped)``.

    A gap before a residency entered by a recompute is dropped; every other gap (before
    a swapped-in residency, or after the last residency of a persistent buffer offloaded
    across the iteration boundary) is on the host.
    """
    on_host, dropped = [0] * trace.num_ops, [0] * trace.num_ops
    entered = _entered_by(plan)
    spans = defaultdict(list)
    for r in plan_residencies(trace, plan):
        spans[r.buffer_id].append(r)
    for buffer_id, residencies in spans.items():
        buffer = trace.buffer(buffer_id)
        residencies.sort(key=lambda r: r.start)
        covered_until = buffer.start
        for r in [*residencies, None]:
            gap_end = buffer.end if r is None else r.start
            how = "swapped in" if r is None else entered.get((buffer_id, r.start), "swapped in")
            target = dropped if how == "recomputed" else on_host
            for op in range(covered_until, gap_end):
                target[op] += buffer.size
            if r is not None:
                covered_until = r.end
    return on_host, dropped


def plot_layout(trace: Trace, plan: Plan, path: str | os.PathLike) -> None:
    """Draw ``plan``'s address × time layout of ``trace`` to ``path`` (``.png`` or ``.svg``).

    A pure function of the two objects (nothing is planned or simulated). Raises
    :class:`~cupool.viz.VizFormatError` for another extension,
    :class:`~cupool.viz.MissingExtraError` without matplotlib, and
    :class:`~cupool.errors.InputError` for a plan of another trace or without placements.
    """
    check_plan(trace, plan)
    residencies = plan_residencies(trace, plan)
    lower_bound = trace.lower_bound_bytes()
    top = max(plan.arena_bytes, lower_bound, plan.capacity_bytes or 0, 1)
    unit, scale = byte_unit(top)
    entered = _entered_by(plan)
    swapping = not plan.is_static
    panels = {"nrows": 2, "sharex": True, "height_ratios": [4, 1]} if swapping else {}
    with figure(path, 11.0, 6.5 if swapping else 5.5, **panels) as (_fig, axes):
        from matplotlib.patches import Patch, Rectangle

        ax = axes[0] if swapping else axes
        used = set()
        for r in residencies:
            buffer = trace.buffer(r.buffer_id)
            what = entered.get((r.buffer_id, r.start),
                               PERSISTENT if buffer.kind == PERSISTENT else "temporary")
            used.add(what)
            rect = Rectangle((r.start, r.offset / scale), r.end - r.start, buffer.size / scale,
                             facecolor=COLORS[what], edgecolor="#333333", linewidth=0.15)
            rect.set_gid(f"residency-{r.buffer_id}-{r.start}" if swapping
                         else f"buffer-{r.buffer_id}")
            ax.add_artist(rect)  # not add_patch: the limits are set below, once
        handles = [Patch(facecolor=COLORS[w], edgecolor="#333333", label=w)
                   for w in COLORS if w in used]
        handles.append(ax.axhline(plan.arena_bytes / scale, color="black", linewidth=1.0,
                                  label=f"arena {format_bytes(plan.arena_bytes)}"))
        handles.append(ax.axhline(lower_bound / scale, color=LOWER_BOUND_COLOR, linestyle="--",
                                  linewidth=1.2,
                                  label=f"lower bound (peak live) {format_bytes(lower_bound)}"))
        if plan.capacity_bytes is not None:
            handles.append(ax.axhline(plan.capacity_bytes / scale, color=BUDGET_COLOR,
                                      linestyle=":", linewidth=1.5,
                                      label=f"budget {format_bytes(plan.capacity_bytes)}"))
        if swapping:
            handles += _swap_markers(ax, trace, plan, residencies, scale)
        ax.set_xlim(0, max(trace.num_ops, 1))
        ax.set_ylim(0, top * 1.04 / scale)
        ax.set_ylabel(f"arena offset ({unit})")
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0),
                  borderaxespad=0.0)
        kind = "swapping" if swapping else "static"
        ax.set_title(f"{trace.name}: {kind} {plan.solver} plan, {len(trace.buffers)} buffers, "
                     f"{trace.num_ops} ops; arena {format_bytes(plan.arena_bytes)} = "
                     f"{plan.ratio:.3f} × lower bound")
        if swapping:
            _off_device_panel(axes[1], trace, plan, scale, unit)
            axes[1].set_xlabel("op index (time →)")
        else:
            ax.set_xlabel("op index (time →)")


def _swap_markers(ax, trace, plan, residencies, scale) -> list:
    """▼ at each swap-out's issue, ▲ at each swap-in's issue, mid-height of the residency."""
    spans = defaultdict(list)
    for r in residencies:
        spans[r.buffer_id].append(r)
    outs, ins = ([], []), ([], [])
    for action in plan.actions:
        size = trace.buffer(action.buffer_id).size
        if isinstance(action, SwapOut):
            r = next(r for r in spans[action.buffer_id] if r.start <= action.after_op < r.end)
            outs[0].append(action.after_op + 1)
            outs[1].append((r.offset + size / 2) / scale)
        elif isinstance(action, SwapIn):
            r = next(r for r in spans[action.buffer_id] if r.start == action.trigger_op)
            ins[0].append(action.trigger_op)
            ins[1].append((r.offset + size / 2) / scale)
    handles = []
    if outs[0]:
        handles.append(ax.scatter(*outs, marker="v", s=12, color="#1f4e9c", zorder=3,
                                  linewidths=0, label=f"swap-out issued ({len(outs[0])})"))
    if ins[0]:
        handles.append(ax.scatter(*ins, marker="^", s=12, color="#b3400f", zorder=3,
                                  linewidths=0, label=f"swap-in issued ({len(ins[0])})"))
    return handles


def _off_device_panel(ax, trace, plan, scale, unit) -> None:
    """Stacked, hatched areas of the bytes on the host and dropped, per op."""
    on_host, dropped = off_device_bytes(trace, plan)
    xs = list(range(trace.num_ops + 1))
    host = [v / scale for v in [*on_host, on_host[-1] if on_host else 0]]
    both = [h + d / scale for h, d in zip(host, [*dropped, dropped[-1] if dropped else 0],
                                          strict=True)]
    ax.fill_between(xs, 0, host, step="post", facecolor="none", edgecolor=COLORS["swapped in"],
                    hatch="////", linewidth=0.8, label="on host (swapped out)")
    ax.fill_between(xs, host, both, step="post", facecolor="none",
                    edgecolor=COLORS["recomputed"], hatch="\\\\\\\\", linewidth=0.8,
                    label="dropped (recomputed later)")
    ax.set_ylim(0, max(max(both, default=0) * 1.15, 1 / scale))
    ax.set_ylabel(f"off device\n({unit})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0.0)
