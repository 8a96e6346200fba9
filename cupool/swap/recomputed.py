"""Recomputed residencies on the engine: each takes its block at its own recompute.

The recomputes before op ``t`` run in plan order, and each residency one of them enters
takes its pool block right before that recompute, not with the op's other blocks: a
nested recompute then holds only the states it has made so far. A state it only passes
through is an *ephemeral* residency ``[t, t)`` (it holds no op; rule ``ephemeral`` of
:mod:`cupool.check.swapping`): its block is given back right after the last recompute
reading it, so that the next state of the chain may take the same bytes::

    before op 7:  malloc x3 ─ rc x3 ─ malloc x4 ─ rc x4 ─ free x3 ─ malloc x5 ─ rc x5 ─ free x4
                  ─ malloc x6 ─ rc x6 ─ free x5 ─ op 7           (x6's residency is [7, 9))

:func:`recompute_keys` reads a plan once: the pool layout (:mod:`.layout`) serves these
blocks after the op's others, in recompute order, and the schedule keeps per op the
ephemeral ones and where each is given back (:func:`ephemeral_ops`). The handles' books
move with the blocks: a buffer arrives when its block is served, an ephemeral one leaves
(``dropped``) when its block is given back.
"""

from __future__ import annotations

from collections import defaultdict
from functools import partial
from typing import NamedTuple

from cupool.core.vocabulary import Plan, RecomputeAction, Trace
from cupool.swap.handles import DROPPED
from cupool.swap.iteration import split_overlapping
from cupool.swap.plan_copies import resident_ptr


class EphemeralOp(NamedTuple):
    """The ephemeral residencies before one op: ``made`` (their buffers), ``released``
    (position in the op's recompute list -> the buffers given back right after that
    recompute)."""

    made: frozenset
    released: dict


def recompute_keys(plan: Plan, trace: Trace) -> dict:
    """``{(buffer, op): (position, given back after)}`` of every residency a recompute
    enters: its place in the op's recompute list and, for an ephemeral one, that of the
    last recompute reading it (``None`` for the others)."""
    order = defaultdict(list)  # op -> buffers recomputed before it, in plan order
    for action in plan.actions:
        if isinstance(action, RecomputeAction):
            order[action.before_op].append(action.buffer_id)
    ephemeral = {(r.buffer_id, r.start) for r in plan.residencies if r.start == r.end}
    out = {}
    for op, listed in order.items():
        for made, b in enumerate(listed):
            last = None
            if (b, op) in ephemeral:
                last = max([k for k, other in enumerate(listed) if k > made
                            and b in trace.buffer(other).recompute.inputs], default=made)
            out[(b, op)] = (made, last)
    return out


def ephemeral_ops(keys: dict) -> dict:
    """``{op: EphemeralOp}`` for every op with ephemeral residencies before it
    (``keys``: :func:`recompute_keys`)."""
    made, released = defaultdict(set), defaultdict(lambda: defaultdict(list))
    for (b, op), (_position, last) in keys.items():
        if last is not None:
            made[op].add(b)
            released[op][last].append(b)
    return {op: EphemeralOp(frozenset(made[op]),
                            {k: tuple(sorted(v)) for k, v in released[op].items()})
            for op in made}


def wait_for_readers(engine, state, op: int, recomputed) -> None:
    """The compute stream waits for the swap-outs still reading the bytes the residencies
    recomputed before ``op`` will take (their planned addresses)."""
    ranges = []
    for b in recomputed:
        low = state.arena_ptr + engine.schedule.offsets[(b, op)]
        ranges.append((low, low + engine.sizes[b]))
    split = split_overlapping(state.pending, ranges)
    for copy in split.overlapping:
        engine._timing.wait(state, op, copy.copied, None)
    state.pending = split.rest


def arrive(engine, state, op: int, b: int) -> int:
    """Serve buffer ``b``'s block recomputed before ``op``, put the handle there; its
    address."""
    key = (b, op)
    block = state.blocks[key] = engine.pool.malloc(engine.schedule.block_sizes[b])
    ptr = state.ptrs[key] = block.ptr
    if ptr != state.arena_ptr + engine.schedule.offsets[key]:
        engine.off_plan += 1
        state.exact = False
    try:
        engine.handles[b].arrive(engine.array(b, ptr), ptr)
    except Exception as exc:
        state.keep_first_error(exc)
    return ptr


def release(engine, state, op: int, buffers) -> None:
    """Give back the ephemeral blocks of ``buffers`` before ``op``: their last reader ran."""
    for b in buffers:
        state.blocks.pop((b, op), None)  # the block dies: the pool frees it
        try:
            engine.handles[b].leave(DROPPED)
        except Exception as exc:
            state.keep_first_error(exc)


def recompute_before(engine, state, running, step) -> None:
    """The plan's recomputes before the op ``running`` is (its step: ``step``), in plan
    order on ``engine``'s compute stream: each buffer's block taken at its recompute
    (:func:`arrive`), the producer's callable run on its inputs, an ephemeral residency's
    block given back after the last recompute that reads it (:func:`release`); timed
    apart from the op where the iteration times its ops."""
    op, passing = running.op, step.passing  # passing: ephemeral residencies
    if state.pending:  # each block is taken at its recompute
        wait_for_readers(engine, state, op, step.recomputed)
    timing = bool(state.op_wall_s)
    if timing:  # timed apart: not the op's time (the simulator counts them apart)
        began, ended = engine._timing.recomputes(state, op)
        engine.work.mark(began)
    made = passing.made if passing is not None else ()
    for position, b in enumerate(step.recomputed):
        producer = engine.trace.buffer(b).recompute
        out = engine.array(b, arrive(engine, state, op, b))
        inputs = [engine.array(s, state.ptrs[(s, op)] if s in made else
                               resident_ptr(engine.schedule, state, s, op))
                  for s in producer.inputs]
        engine.work.run(partial(_call, engine.handles[b], state, running, out, inputs))
        engine.spend(engine.op_us[producer.op])
        if b not in made:
            engine.handles[b].uses += 1
        if passing is not None and position in passing.released:
            release(engine, state, op, passing.released[position])
    if timing:
        engine.work.mark(ended)


def _call(handle, state, running, out, inputs) -> None:
    """A recompute, on the compute stream: nothing where the op's uses could not be
    taken; an error is the iteration's first."""
    if not running.entered:
        return
    try:
        handle.recompute(out, *inputs)
    except Exception as exc:
        state.keep_first_error(exc)


__all__ = ["EphemeralOp", "arrive", "ephemeral_ops", "recompute_before", "recompute_keys",
           "release", "wait_for_readers"]
