"""Memory over time: what the plan holds, op by op, against what the framework allocators
would reserve for the same iteration.

Curves (bytes while op ``t`` runs; op ``t`` covers ``[t, t + 1)`` on the x axis):

- *planned resident*: the sum of the sizes of the plan's residencies covering ``t`` (for
  a static plan, the live bytes of the trace);
- *cupool arena*: ``plan.arena_bytes``, flat: what a planned pool reserves once;
- *CuPy pool model* and *PyTorch caching allocator model*: ``reserved_bytes_per_op`` of
  :func:`cupool.baselines.allocate_trace` (``"cupy"``, ``"torch"``) on the whole trace, without
  swapping;
- *lower bound*: the trace's peak live bytes (the smallest arena of any static plan), and
  the plan's budget when it has one.
"""

from __future__ import annotations

import os

from cupool.baselines import allocate_trace
from cupool.core.units import format_bytes
from cupool.core.vocabulary import Plan, Trace, plan_residencies
from cupool.viz._render import byte_unit, check_plan, figure

POLICY_LABELS = {"cupy": "CuPy MemoryPool model (reserved)",
                 "torch": "PyTorch caching allocator model (reserved)"}
"""Legend label of each baseline policy's curve."""
_STYLE = {"cupy": {"color": "#ff7f0e"}, "torch": {"color": "#1f77b4"}}


def resident_bytes_per_op(trace: Trace, plan: Plan) -> list[int]:
    """Bytes of ``plan``'s residencies covering each op (``trace.num_ops`` ints)."""
    delta = [0] * (trace.num_ops + 1)
    for r in plan_residencies(trace, plan):
        size = trace.buffer(r.buffer_id).size
        delta[r.start] += size
        delta[r.end] -= size
    per_op, total = [], 0
    for op in range(trace.num_ops):
        total += delta[op]
        per_op.append(total)
    return per_op


def _step(values: list) -> list:
    """``values`` with its last value repeated, for a ``where="post"`` step over
    ``range(len(values) + 1)``."""
    return [*values, values[-1]] if values else [0]


def plot_memory(trace: Trace, plan: Plan, path: str | os.PathLike,
                policies: tuple[str, ...] = ("cupy", "torch")) -> dict:
    """Draw memory-over-time curves of ``plan`` vs the ``policies``' allocator models to
    ``path`` (``.png`` or ``.svg``); return the peaks drawn, in bytes (a flat dict:
    ``planned_resident_peak_bytes``, ``arena_bytes``, ``lower_bound_bytes``,
    ``<policy>_peak_reserved_bytes``).

    A pure function of the two objects (the baselines are replayed from ``trace``). Errors
    as :func:`cupool.viz.plot_layout`.
    """
    check_plan(trace, plan)
    resident = resident_bytes_per_op(trace, plan)
    baselines = {policy: allocate_trace(trace, policy) for policy in policies}
    lower_bound = trace.lower_bound_bytes()
    peaks = {"planned_resident_peak_bytes": max(resident, default=0),
             "arena_bytes": plan.arena_bytes, "lower_bound_bytes": lower_bound}
    peaks |= {f"{p}_peak_reserved_bytes": b["peak_reserved_bytes"] for p, b in baselines.items()}
    unit, scale = byte_unit(max([*peaks.values(), plan.capacity_bytes or 0, 1]))
    xs = list(range(trace.num_ops + 1))
    with figure(path, 11.0, 5.0) as (_fig, ax):
        for policy, result in baselines.items():
            curve = [v / scale for v in _step(result["reserved_bytes_per_op"])]
            ax.step(xs, curve, where="post", linewidth=1.4, **_STYLE.get(policy, {}),
                    label=f"{POLICY_LABELS.get(policy, policy)}, peak "
                          f"{format_bytes(result['peak_reserved_bytes'])}")
        ax.axhline(plan.arena_bytes / scale, color="black", linewidth=1.4,
                   label=f"cupool arena ({plan.solver} plan) {format_bytes(plan.arena_bytes)}")
        ax.step(xs, [v / scale for v in _step(resident)], where="post", color="#2ca02c",
                linewidth=1.0, label=f"cupool planned resident, peak "
                                     f"{format_bytes(peaks['planned_resident_peak_bytes'])}")
        ax.fill_between(xs, 0, [v / scale for v in _step(resident)], step="post",
                        color="#2ca02c", alpha=0.15, linewidth=0)
        ax.axhline(lower_bound / scale, color="#d62728", linestyle="--", linewidth=1.2,
                   label=f"lower bound (peak live) {format_bytes(lower_bound)}")
        if plan.capacity_bytes is not None:
            ax.axhline(plan.capacity_bytes / scale, color="#9467bd", linestyle=":",
                       linewidth=1.5, label=f"budget {format_bytes(plan.capacity_bytes)}")
        ax.set_xlim(0, max(trace.num_ops, 1))
        ax.set_ylim(0, max(*peaks.values(), plan.capacity_bytes or 0, 1) * 1.25 / scale)
        ax.set_xlabel("op index (time →)")
        ax.set_ylabel(f"device memory ({unit})")
        ax.set_title(f"{trace.name}: device memory per op, cupool plan vs allocator models")
        ax.legend(loc="upper left", ncols=2)
    return peaks
