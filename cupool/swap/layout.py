"""A swapping plan's layout as the planned pool serves it, at a size scale.

The engine serves every residency's device bytes from a
:class:`~cupool.allocator.pool.PlannedPool`. The pool serves *static* plans, so the
swapping plan is turned into one over its residencies: residency ``k`` in order of start
(ties by buffer id; those a recompute enters after the op's others, in recompute order:
:mod:`.recomputed`) is allocation ``k`` of the pool's iteration, freed before the first
allocation that starts at or after its end (an ephemeral one: after the last recompute
reading it). A block served anywhere but its planned
offset is counted by the engine (``off_plan``) and whatever it breaks shows up as corrupt
bytes.

Scaled sizes keep the pool's 512-byte allocation unit: every stretch between two
residency boundaries is scaled (rounded up) and rounded up to 512, a monotone map, so
ranges disjoint at full size stay disjoint::

    full offsets:    0        a           b                 c
                     |--------|-----------|-----------------|
    scaled offsets:  0        ⌈a/s⌉₅₁₂    +⌈(b-a)/s⌉₅₁₂     +⌈(c-b)/s⌉₅₁₂

A buffer's copies and checks use its scaled size (``size // size_scale``), its pool block
that rounded up to 512.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from cupool.allocator.arena import ALLOCATION_UNIT
from cupool.check import validate_plan
from cupool.core.vocabulary import Buffer, Op, Placement, Plan, SolveStatus, Trace
from cupool.swap.errors import EngineError
from cupool.swap.recomputed import recompute_keys


@dataclass(frozen=True)
class Layout:
    """A swapping plan's layout at a size scale, as the pool serves it (module docstring).

    ``sizes[b]``: bytes copied and checked for buffer ``b`` (``size // size_scale``);
    ``block_sizes[b]``: its pool block (scaled, rounded up to 512); ``offsets[(b, start)]``:
    the scaled offset of the residency starting at ``start``; ``order``: the residencies
    ``(b, start)`` in pool allocation order; ``pool_trace`` and ``pool_plan``: the static
    plan over them that the pool installs (validated)."""

    sizes: dict
    block_sizes: dict
    offsets: dict
    order: tuple
    pool_trace: Trace
    pool_plan: Plan


def round_up(value: int, unit: int) -> int:
    """``value`` rounded up to a multiple of ``unit``."""
    return -(-value // unit) * unit


def pool_layout(plan: Plan, trace: Trace, size_scale: int) -> Layout:
    """The :class:`Layout` of swapping ``plan`` for ``trace`` at ``size_scale``.

    Raises :class:`~cupool.swap.errors.EngineError` if the static plan over the
    residencies fails the validator (it cannot when ``plan`` passes the swap validator)."""
    unit = ALLOCATION_UNIT
    full = {b.id: b.size for b in trace.buffers}
    sizes = {b: n // size_scale for b, n in full.items()}
    block_sizes = {b: round_up(max(1, -(-n // size_scale)), unit) for b, n in full.items()}
    remade = recompute_keys(plan, trace)  # served after the op's others, in recompute order

    def served(r):
        key = remade.get((r.buffer_id, r.start))
        return (r.start, 0, r.buffer_id) if key is None else (r.start, 1, key[0])

    def given_back(r):
        key = remade.get((r.buffer_id, r.start))
        return (r.end, -1, 0) if key is None or key[1] is None else (r.start, 1, key[1] + 0.5)

    residencies = sorted(plan.residencies, key=served)
    points = sorted({0, *(r.offset for r in residencies),
                     *(r.offset + full[r.buffer_id] for r in residencies)})
    scaled, at, previous = {}, 0, 0
    for point in points:
        at += round_up(-(-(point - previous) // size_scale), unit)
        scaled[point], previous = at, point
    offsets = {(r.buffer_id, r.start): scaled[r.offset] for r in residencies}
    keys = [served(r) for r in residencies]
    n = len(residencies)
    buffers = []
    for k, r in enumerate(residencies):
        end = bisect.bisect_left(keys, given_back(r), k + 1)
        buffers.append(Buffer(k, block_sizes[r.buffer_id], k, end,
                              name=f"buffer {r.buffer_id} [{r.start}, {r.end})"))
    pool_trace = Trace(f"{trace.name} residencies", tuple(Op(f"malloc {k}") for k in range(n)),
                       tuple(buffers), source="cupool.swap.layout.pool_layout")
    placements = tuple(Placement(k, offsets[(r.buffer_id, r.start)])
                       for k, r in enumerate(residencies))
    arena = max([p.offset + b.size for p, b in zip(placements, buffers, strict=True)] + [0])
    pool_plan = Plan(pool_trace.name, pool_trace.digest(), "replay-layout",
                     SolveStatus.FEASIBLE, arena, pool_trace.lower_bound_bytes(), placements)
    report = validate_plan(pool_trace, pool_plan)
    if not report.valid:
        raise EngineError(f"the pool layout of the plan is invalid ({report.rule}): "
                          f"{report.message}")
    return Layout(sizes, block_sizes, offsets,
                  tuple((r.buffer_id, r.start) for r in residencies), pool_trace, pool_plan)
