"""Rules for static plans: one offset per buffer for its whole lifetime.

The rules, in the order they are checked (``rule`` of the report in brackets):

1. [trace] the plan carries the trace's digest; [unique] no buffer is placed twice (nor
   appears twice in the trace); [placed] every buffer has an offset; [offset] each offset
   is an integer >= 0; [known] no unknown buffer has one;
2. [arena] the plan's stated arena covers every buffer (``offset + size <= arena_bytes``);
   [capacity] the arena fits the capacity when one is given;
3. [overlap] no two buffers that are live at the same op share a byte (the sweep of
   :mod:`cupool.check.overlap`; a buffer may take bytes freed at the op it starts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from cupool.check.overlap import Occupancy, first_overlap
from cupool.check.report import VALID, ValidationReport, check_trace, failed
from cupool.core.vocabulary import Buffer, Plan, Trace


class Lifetime(NamedTuple):
    """Buffer ``id`` of ``size`` bytes, live during ops ``[start, end)``: the fields of a
    :class:`~cupool.core.Buffer` the static rules read."""

    id: int
    start: int
    end: int
    size: int


def check_offsets(buffers: Sequence[Lifetime | Buffer], offsets: dict[int, int],
                  capacity: int | None = None,
                  arena_bytes: int | None = None) -> ValidationReport:
    """Validate ``offsets`` (``{id: offset}``) for ``buffers`` (lifetimes or trace buffers).

    ``arena_bytes``, when given, must cover every buffer; ``capacity``, when given, must
    hold the highest byte used.
    """
    ids = set()
    for buffer in buffers:
        buffer_id = buffer.id
        if buffer_id in ids:
            return failed("unique", f"buffer {buffer_id} appears twice", buffer_id)
        ids.add(buffer_id)
        if buffer_id not in offsets:
            return failed("placed", f"buffer {buffer_id} has no offset", buffer_id)
        offset = offsets[buffer_id]
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            return failed("offset", f"buffer {buffer_id}: offset (={offset!r}) must be an "
                                    f"integer >= 0", buffer_id)
    for buffer_id in offsets:
        if buffer_id not in ids:
            return failed("known", f"offset given for buffer {buffer_id}, which the trace "
                                   f"lacks", buffer_id)

    rows = [Occupancy(offsets[b.id], offsets[b.id] + b.size, b.id, b.start, b.end)
            for b in buffers]
    top, top_id = 0, None
    for row in rows:
        if row.high > top:
            top, top_id = row.high, row.buffer_id
    if arena_bytes is not None and top > arena_bytes:
        return failed("arena", f"buffer {top_id} ends at byte {top}, beyond the plan's "
                               f"arena_bytes (={arena_bytes})", top_id)
    if capacity is not None and top > capacity:
        return failed("capacity", f"buffer {top_id} ends at byte {top}, beyond the capacity "
                                  f"(={capacity})", top_id)

    overlap = first_overlap(rows)
    if overlap is not None:
        held, arriving = overlap.held, overlap.arriving
        return failed(
            "overlap",
            f"buffers {held.buffer_id} and {arriving.buffer_id} are both live at op "
            f"{overlap.op} and share bytes [{overlap.shared_low}, {overlap.shared_high}) "
            f"(buffer {held.buffer_id} at [{held.low}, {held.high}), "
            f"buffer {arriving.buffer_id} at [{arriving.low}, {arriving.high}))",
            held.buffer_id, arriving.buffer_id)
    return VALID


def validate_static_plan(trace: Trace, plan: Plan) -> ValidationReport:
    """Validate a static plan (placements) against the trace it claims to be for."""
    report = check_trace(trace, plan)
    if not report.valid:
        return report
    offsets = {}
    for placement in plan.placements:
        if placement.buffer_id in offsets:
            return failed("unique", f"buffer {placement.buffer_id} is placed twice",
                          placement.buffer_id)
        offsets[placement.buffer_id] = placement.offset
    return check_offsets(trace.buffers, offsets, plan.capacity_bytes, plan.arena_bytes)


def validate_offsets(problem, offsets) -> ValidationReport:
    """Validate solver output in index space: ``offsets[i]`` for buffer ``problem.ids[i]``.

    ``problem`` is read, not imported: anything with ``n``, ``ids``, ``starts``, ``ends``,
    ``sizes`` (arrays) and ``capacity``, as a static planning problem has.
    """
    if offsets is None or len(offsets) != problem.n:
        got = None if offsets is None else len(offsets)
        return failed("placed", f"expected {problem.n} offsets, got {got}")
    ids = [int(i) for i in problem.ids]
    buffers = list(map(Lifetime, ids, problem.starts.tolist(), problem.ends.tolist(),
                       problem.sizes.tolist()))
    return check_offsets(buffers, dict(zip(ids, [int(o) for o in offsets], strict=True)),
                         problem.capacity)
