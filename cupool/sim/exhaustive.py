"""The fastest plan of a tiny trace in a family that can be tried whole: a reference the
overhead lower bound (:mod:`cupool.sim.bounds`) must stay under and the planners can be
measured against.

The trace's buffers all have one size, so the budget is a number of *slots*. A plan of
the family is a choice, for each buffer, of the ops it is on the device for (its uses
always, a temporary's first op always, any others of its lifetime at will)::

    op:        0   1   2   3
    P (uses 1, 3)  . # # #     one stay [1, 4): copied in at op 1 (due at its first use)
    Q (uses 0, 2)  # . # .     stays [0, 1) and [2, 3), each copied in and out

Each stay is entered by a copy in triggered at its first op and due at its first use (a
temporary's first stay by its producer), and left by a copy out after its last op (a drop
when nothing wrote it since it came in; a temporary's last stay ends with it); a
persistent buffer on the device at both ends of the iteration stays across the boundary
(the two stays are one, neither copied). Stays get slots first fit, in order of their
first op; every plan is checked by the validator and simulated, and the fastest is kept.

Recomputation, copies triggered before a stay's first op, and other slot choices are not
tried, so a planner may beat the family's best; a bound above it is wrong all the same.
Tiny means at most :data:`MAX_CHOICES` free (buffer, op) choices.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from cupool.check import validate_plan
from cupool.core.vocabulary import (
    PERSISTENT,
    Plan,
    Residency,
    SolveStatus,
    SwapIn,
    SwapOut,
    Trace,
)
from cupool.errors import InputError
from cupool.sim.simulator import simulate

MAX_CHOICES = 18
"""The most free (buffer, op) choices tried: 2**18 plans at most."""
SOLVER = "exhaustive"


@dataclass(frozen=True)
class Fastest:
    """The fastest plan of the family (module docstring) within the budget: ``plan`` and
    its simulated ``iteration_us`` (``None`` where no plan of the family fits), out of
    ``tried`` choices of which ``valid`` gave plans the validator accepts."""

    plan: Plan | None
    iteration_us: float | None
    tried: int
    valid: int


def _stretches(on: list[bool]) -> list[tuple[int, int]]:
    """The maximal runs ``[start, end)`` of ops where ``on`` holds."""
    out, i = [], 0
    while i < len(on):
        if on[i]:
            j = i
            while j < len(on) and on[j]:
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


def _plan(trace: Trace, held: list[list[bool]], slots: int, size: int) -> Plan | None:
    """The plan holding each buffer on the ops of its row of ``held`` (module docstring);
    ``None`` where a stay has no use to be copied in for, or the slots run out."""
    n = trace.num_ops
    stays, actions = [], []
    for b, on in zip(trace.buffers, held, strict=True):
        runs = _stretches(on)
        wraps = b.kind == PERSISTENT and on[0] and on[-1]
        uses, writes = set(b.uses), set(b.write_ops)
        for start, end in runs:
            inside = [u for u in range(start, end) if u in uses]
            head, tail = wraps and start == 0, wraps and end == n
            produced = b.kind != PERSISTENT and start == b.start
            if not (head or produced):
                if not inside:
                    return None
                actions.append(SwapIn(b.id, start, inside[0]))
            if not tail and not (b.kind != PERSISTENT and end == b.end):
                spans = [(start, end)] + ([runs[-1]] if head else [])
                dirty = produced or any(u in writes for s, e in spans for u in range(s, e))
                actions.append(SwapOut(b.id, end - 1, drop=not dirty))
            stays.append((start, b.id, end, head or tail))
    taken: dict[int, list[tuple[int, int]]] = {}
    wrap_slot: dict[int, int] = {}
    residencies = []
    for start, buffer_id, end, wrapping in sorted(stays):
        preferred = [wrap_slot[buffer_id]] if wrapping and buffer_id in wrap_slot else []
        for slot in preferred + list(range(slots)):
            if all(e <= start or end <= s for s, e in taken.get(slot, [])):
                taken.setdefault(slot, []).append((start, end))
                if wrapping:
                    wrap_slot[buffer_id] = slot
                residencies.append(Residency(buffer_id, start, end, slot * size))
                break
        else:
            return None
    return Plan(trace.name, trace.digest(), SOLVER, SolveStatus.FEASIBLE, slots * size,
                trace.lower_bound_bytes(), (), 0.0, slots * size, {}, tuple(residencies),
                tuple(actions))


def fastest_plan(trace: Trace, budget_bytes: int, cost) -> Fastest:
    """The fastest plan of ``trace``'s family (module docstring) within ``budget_bytes``
    under ``cost``. Raises :class:`~cupool.errors.InputError` when the buffers differ in
    size or the trace has more than :data:`MAX_CHOICES` free choices."""
    sizes = {b.size for b in trace.buffers}
    if len(sizes) != 1:
        raise InputError(f"fastest_plan: the buffers of {trace.name!r} have {len(sizes)} "
                         f"sizes ({sorted(sizes)[:4]}...); expected one")
    size = sizes.pop()
    slots = budget_bytes // size
    n = trace.num_ops
    free = [[i for i in range(b.start, b.end) if i not in b.uses
             and not (b.kind != PERSISTENT and i == b.start)] for b in trace.buffers]
    choices = sum(len(f) for f in free)
    if choices > MAX_CHOICES:
        raise InputError(f"fastest_plan: {trace.name!r} has {choices} free (buffer, op) "
                         f"choices; at most {MAX_CHOICES} are tried")
    best, tried, valid = None, 0, 0
    for picked in itertools.product((False, True), repeat=choices):
        tried += 1
        held, at = [], 0
        for b, ops in zip(trace.buffers, free, strict=True):
            on = [i in b.uses or (b.kind != PERSISTENT and i == b.start) for i in range(n)]
            for i in ops:
                on[i] = picked[at]
                at += 1
            held.append(on)
        if any(sum(row[i] for row in held) > slots for i in range(n)):
            continue
        plan = _plan(trace, held, slots, size)
        if plan is None or not validate_plan(trace, plan).valid:
            continue
        valid += 1
        iteration = simulate(trace, plan, cost, validate=False).iteration_us
        if best is None or iteration < best[0]:
            best = (iteration, plan)
    if best is None:
        return Fastest(None, None, tried, valid)
    return Fastest(best[1], best[0], tried, valid)


__all__ = ["MAX_CHOICES", "Fastest", "fastest_plan"]
