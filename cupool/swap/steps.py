"""What the engine does at each op boundary that is the same in every iteration.

:func:`op_steps` reads a :class:`~cupool.swap.schedule.Schedule` once per plan (the engine
calls it from ``set_plan``) and gives, per op, an :class:`OpStep`: the buffers it writes,
the uses it takes on the books and the residencies its frame points into, as tuples,
so that ``before_op`` and ``after_op`` only read them on an op where nothing moves (a
*resident* op: no pool work, no swap, no wait, no recompute, no first fill).

Only a persistent buffer's first fill (once, in the first iteration that serves its home
residency) changes an op from iteration to iteration; the engine then builds that op's
intents with :func:`intents_of`. Once an op was served with every block at its planned
address, :func:`planned_op` keeps what it took (:class:`PlannedOp`), and a resident op
runs from that alone in later iterations.

The handles' books at an op boundary are kept on the host, in program order, by
:func:`take_uses` and :func:`end_residencies` (stream order already guarantees what they
describe).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from cupool.core.vocabulary import Trace
from cupool.swap.handles import DEVICE, HOST, TO_HOST
from cupool.swap.schedule import Schedule


@dataclass(frozen=True)
class OpStep:
    """Op ``op`` of a schedule (tuples of buffer ids unless said otherwise):

    ``produced`` / ``recomputed``: the buffers whose residency starts at the op without a
    copy (made by the op, or by a recompute before it); ``written``: ``produced``;
    ``uses``: the trace's uses of the op;
    ``intents``: ``(buffer, write)`` pairs of the uses the op takes, in order (read
    for the uses and the recomputes' inputs, write for ``written``); ``frame``:
    ``(buffer, residency start)`` for every buffer of its frame (``written`` first, then
    the other uses; the start is ``None`` where the plan has no residency holding the use,
    which the engine reports); ``allocs`` / ``frees``: the pool's residencies starting and
    ending there; ``swap_ins`` / ``due`` / ``swap_outs``: the schedule's actions at the op;
    ``ends``: ``(buffer, state)`` of the residencies ending right after it;
    ``passing``: the :class:`~cupool.swap.recomputed.EphemeralOp` of the ephemeral
    residencies among its recomputes (``None``: none). The recomputed buffers are in
    neither ``written`` nor ``intents``: each arrives at its own recompute
    (:mod:`.recomputed`)."""

    op: int
    produced: tuple
    recomputed: tuple
    written: tuple
    uses: tuple
    intents: tuple
    frame: tuple
    allocs: tuple
    frees: tuple
    swap_ins: tuple
    due: tuple
    swap_outs: tuple
    ends: tuple
    passing: object = None


def intents_of(trace: Trace, uses, written, recomputed) -> tuple:
    """``(buffer, write)`` pairs of an op's uses: read for ``uses`` and the inputs of the
    ``recomputed`` buffers' producers, write for ``written`` (a buffer once, at its first
    mention); the ``recomputed`` buffers themselves are left out (each arrives at its
    recompute)."""
    intents = {}
    for b in recomputed:
        for source in trace.buffer(b).recompute.inputs:
            if source not in recomputed:
                intents.setdefault(source, False)
    for b in uses:
        if b not in recomputed:
            intents.setdefault(b, False)
    for b in written:
        intents[b] = True
    return tuple(intents.items())


def op_steps(schedule: Schedule, trace: Trace) -> tuple[OpStep, ...]:
    """Every op's :class:`OpStep` (module docstring)."""
    steps = []
    for op in range(trace.num_ops):
        produced = tuple(schedule.produced.get(op, ()))
        recomputed = tuple(schedule.recomputes.get(op, ()))
        written = produced
        uses = tuple(schedule.uses.get(op, ()))
        frame = [(b, op) for b in written]
        frame += [(b, schedule.holding(b, op)) for b in uses if b not in written]
        steps.append(OpStep(
            op=op, produced=produced, recomputed=recomputed, written=written, uses=uses,
            intents=intents_of(trace, uses, written, recomputed),
            frame=tuple(dict(frame).items()), allocs=tuple(schedule.alloc_at.get(op, ())),
            frees=tuple(schedule.free_at.get(op, ())),
            swap_ins=tuple(schedule.swap_ins.get(op, ())), due=tuple(schedule.due.get(op, ())),
            swap_outs=tuple(schedule.swap_outs.get(op, ())),
            ends=tuple(schedule.ends.get(op + 1, ())),
            passing=schedule.ephemeral.get(op)))
    return tuple(steps)


class PlannedOp(NamedTuple):
    """Op ``step.op`` as ``before_op`` made it with every block at its planned address: the
    ``frame`` (an :class:`~cupool.swap.iteration.OpFrame`) handed to the op body, the
    ``arrivals`` (``(handle, view, ptr)`` of the residencies it begins) and ``uses``
    (``(handle, write)``), the same in every iteration while the blocks stay there;
    ``allocs``: ``(key, block bytes, planned address)`` of the residencies starting there;
    ``written``: the device byte ranges ``(low, high)`` of its arrivals (a swap-out still
    reading one of them must be waited for first). ``resident`` says that nothing but pool
    blocks and the handles' books happens at the op (no copy, wait, recompute or event
    another stream waits for): the engine then runs it from this alone, without the
    general path's checks, unless a pending swap-out reads bytes it writes."""

    step: OpStep
    frame: object
    arrivals: tuple
    uses: tuple
    allocs: tuple
    written: tuple
    resident: bool


def planned_op(step: OpStep, frame, arrivals, uses, schedule: Schedule, arena_ptr: int,
               waited: bool, sizes: dict) -> PlannedOp:
    """The :class:`PlannedOp` of ``step`` in an arena at ``arena_ptr`` (``waited``: another
    stream waits for the op's end; ``sizes``: each buffer's bytes on the device)."""
    resident = not (step.swap_ins or step.due or step.recomputed or step.swap_outs or waited)
    allocs = tuple((key, schedule.block_sizes[key[0]], arena_ptr + schedule.offsets[key])
                   for key in step.allocs)
    written = tuple((ptr, ptr + sizes[handle.buffer.id]) for handle, _, ptr in arrivals)
    return PlannedOp(step, frame, tuple(arrivals), uses, allocs, written, resident)


def reads_any(pending, written) -> bool:
    """Whether a pending swap-out (``.low``, ``.high``) reads any of the ``written`` byte
    ranges."""
    for copy in pending:
        low, high = copy.low, copy.high
        for start, end in written:
            if low < end and start < high:
                return True
    return False


def take_uses(state, running, arrivals, uses) -> None:
    """The op's new residencies (``arrivals``: ``(handle, view, ptr)``) are on the device,
    and every use it makes (``uses``: ``(handle, write)``) finds its handle where the plan
    says. A refused use is the iteration's first error (``state.keep_first_error``);
    ``running.entered`` says they were all taken."""
    try:
        for handle, view, ptr in arrivals:
            handle.arrive(view, ptr)
        for handle, write in uses:
            state_now = handle.state
            if state_now is not DEVICE and (write or state_now is not TO_HOST):
                handle.refuse(write)
            handle.uses += 1
        running.entered = True
    except Exception as exc:
        state.keep_first_error(exc)


def end_residencies(state, handles: dict, ends) -> None:
    """Residencies ending after an op (``ends``: ``(buffer, state)``) leave the device:
    dropped, retired, or, after a held swap-out, to the host copy."""
    try:
        for b, where in ends:
            if where is HOST:  # a held swap-out's residency ended
                handles[b].residency_ended()
            else:
                handles[b].leave(where)
    except Exception as exc:
        state.keep_first_error(exc)


__all__ = ["OpStep", "PlannedOp", "end_residencies", "intents_of", "op_steps", "planned_op",
           "reads_any", "take_uses"]
