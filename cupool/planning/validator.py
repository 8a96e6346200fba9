"""The independent validator: proves a static plan or names the first rule it breaks.

It shares no code with the solvers on purpose (MiniMalloc's validator is the model):
it reads plain sizes, lifetimes and offsets and checks, naively,

1. every buffer has exactly one offset, an integer >= 0, and no unknown buffer has one;
2. no two buffers that are live at the same op share a byte;
3. the plan's stated arena covers every buffer (``offset + size <= arena_bytes``), and
   the arena fits the capacity when one is given.

Rule 2 is a sweep over time: at each op, frees (``end == op``) come before allocations
(``start == op``), and the live buffers are kept sorted by offset, so a new buffer only
has to be compared with its two address neighbours. That is exact, not a heuristic:
while no overlap has been found, the live ranges are disjoint, and a new range overlaps
some live range if and only if it overlaps one of its neighbours in address order::

    offset
      12 |        [b5............]
       8 |  [b3.....)   [b4......]
       4 |  [b1...)[b2....]
       0 +--0-----3-----------9----> op
    b2 starts at op 3, where b1 has just been freed: they may share bytes.
"""

from __future__ import annotations

import bisect
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


_OK = ValidationReport(True)


def check_offsets(buffers, offsets, capacity=None, arena_bytes=None) -> ValidationReport:
    """Validate ``offsets`` (``{id: offset}``) for ``buffers``: ``(id, start, end, size)`` tuples.

    ``arena_bytes``, when given, must cover every buffer; ``capacity``, when given, must
    hold the highest byte used.
    """
    ids = set()
    for buffer_id, _start, _end, _size in buffers:
        if buffer_id in ids:
            return ValidationReport(False, "unique", f"buffer {buffer_id} appears twice",
                                    (buffer_id,))
        ids.add(buffer_id)
        if buffer_id not in offsets:
            return ValidationReport(False, "placed", f"buffer {buffer_id} has no offset",
                                    (buffer_id,))
        offset = offsets[buffer_id]
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            return ValidationReport(
                False, "offset",
                f"buffer {buffer_id}: offset (={offset!r}) must be an integer >= 0",
                (buffer_id,))
    for buffer_id in offsets:
        if buffer_id not in ids:
            return ValidationReport(False, "known",
                                    f"offset given for buffer {buffer_id}, which the trace lacks",
                                    (buffer_id,))

    top = 0
    top_id = None
    for buffer_id, _start, _end, size in buffers:
        if offsets[buffer_id] + size > top:
            top, top_id = offsets[buffer_id] + size, buffer_id
    if arena_bytes is not None and top > arena_bytes:
        return ValidationReport(
            False, "arena",
            f"buffer {top_id} ends at byte {top}, beyond the plan's arena_bytes (={arena_bytes})",
            (top_id,))
    if capacity is not None and top > capacity:
        return ValidationReport(
            False, "capacity",
            f"buffer {top_id} ends at byte {top}, beyond the capacity (={capacity})", (top_id,))

    events = []
    for buffer_id, start, end, size in buffers:
        events.append((end, 0, buffer_id, size))
        events.append((start, 1, buffer_id, size))
    events.sort(key=lambda e: (e[0], e[1]))
    live = []  # sorted (offset, end_byte, id)
    for op, is_start, buffer_id, size in events:
        low = offsets[buffer_id]
        if not is_start:
            live.remove((low, low + size, buffer_id))
            continue
        high = low + size
        pos = bisect.bisect_left(live, (low, high, buffer_id))
        for neighbour in live[max(0, pos - 1):pos + 1]:
            n_low, n_high, n_id = neighbour
            if low < n_high and n_low < high:
                lo, hi = max(low, n_low), min(high, n_high)
                return ValidationReport(
                    False, "overlap",
                    f"buffers {n_id} and {buffer_id} are both live at op {op} and share bytes "
                    f"[{lo}, {hi}) (buffer {n_id} at [{n_low}, {n_high}), "
                    f"buffer {buffer_id} at [{low}, {high}))",
                    (n_id, buffer_id))
        live.insert(pos, (low, high, buffer_id))
    return _OK


def validate_plan(trace: Trace, plan: Plan) -> ValidationReport:
    """Validate a :class:`~cupool.core.Plan` against the trace it claims to be for
    (a swapping plan goes to :func:`~cupool.planning.swap_validator.validate_swap_plan`)."""
    if not plan.is_static:
        from cupool.planning.swap_validator import validate_swap_plan

        return validate_swap_plan(trace, plan)
    if plan.trace_digest != trace.digest():
        return ValidationReport(
            False, "trace",
            f"plan is for trace {plan.trace_name!r} (digest {plan.trace_digest}), "
            f"not {trace.name!r} (digest {trace.digest()})")
    offsets = {}
    for placement in plan.placements:
        if placement.buffer_id in offsets:
            return ValidationReport(False, "unique",
                                    f"buffer {placement.buffer_id} is placed twice",
                                    (placement.buffer_id,))
        offsets[placement.buffer_id] = placement.offset
    buffers = [(b.id, b.start, b.end, b.size) for b in trace.buffers]
    return check_offsets(buffers, offsets, plan.capacity_bytes, plan.arena_bytes)


def validate_offsets(problem, offsets) -> ValidationReport:
    """Validate solver output in index space: ``offsets[i]`` for buffer ``problem.ids[i]``."""
    if offsets is None or len(offsets) != problem.n:
        got = None if offsets is None else len(offsets)
        return ValidationReport(False, "placed",
                                f"expected {problem.n} offsets, got {got}")
    ids = [int(i) for i in problem.ids]
    buffers = list(zip(ids, problem.starts.tolist(), problem.ends.tolist(),
                       problem.sizes.tolist(), strict=True))
    return check_offsets(buffers, dict(zip(ids, [int(o) for o in offsets], strict=True)),
                         problem.capacity)
