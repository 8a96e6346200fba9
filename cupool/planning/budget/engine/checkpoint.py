"""Segment checkpointing (Chen et al. 2016, as PyTorch's ``checkpoint_sequential`` does it):
re-run a whole stretch of the forward once, at the start of its backward, instead of
re-producing each dropped activation separately before each of its uses.

The forward is cut into ``segments`` stretches of producer ops holding equal bytes (or
equal numbers) of *saved activations* (temporary buffers with a recompute recipe, produced in the
forward, idle from their last forward use to their first backward use)::

    op:        forward ─────────────────────────► | backward ───────────────────────►
    segment:   [ 0 ........ ][ 1 ........ ][ 2 ... ]
    saved a:     a──────────────────────────────────────────────────────────────a
    saved c:                      c──────────────────────────c    (gap [c₀ + 1, r₁))
    batch:                                          r₂ (re-run 2)  r₁ (re-run 1)  r₀

Every saved activation of segment ``s`` is dropped after its last forward use and
re-produced at ``r_s`` — the first backward use of any of them — by re-running its
producer; all of the segment's recomputes run there in producer order, so an
intermediate is made once and read by every recompute after it. Inputs of a recompute
are then persistent buffers, activations of the same batch, buffers still resident at
``r_s`` (the *checkpoints*: a segment's buffers another segment's batch reads stay
resident, and may be swapped by the greedy that runs next), or intermediates the program
had freed, re-produced at ``r_s`` too for one op (a chain link). A buffer whose batch
would need another batch's dropped buffer is kept as a checkpoint instead (repeated
until no batch needs one).

Which stretch is "the forward": ops' ``phase`` (``"fw"`` producers whose gap ends in a
``"bw"`` op) when the trace has phases, else the op with the most live bytes as the turn.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from cupool.core.liveness import live_bytes
from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.planning.budget.engine.schedule import RECOMPUTE, IdleGap, gaps_of
from cupool.planning.budget.engine.state import PlanState

MIN_GAP = 2
"""Ops a saved activation must be idle between its last forward and first backward use
(a shorter gap frees too little to be worth a re-run)."""


class SavedActivation(NamedTuple):
    """A temporary buffer with a recipe, made in the forward by ``producer_op`` and idle
    from ``last_forward_use`` to ``first_backward_use``."""

    producer_op: int
    buffer_id: int
    last_forward_use: int
    first_backward_use: int

    @property
    def gap(self) -> IdleGap:
        return IdleGap(self.buffer_id, self.last_forward_use, self.first_backward_use)


class Batch(NamedTuple):
    """A segment's re-run: its ``members`` re-made before op ``point``, with the freed
    intermediates ``links`` (buffer ids, producer order) re-made there for that op."""

    point: int
    members: list[SavedActivation]
    links: list[int]


class BatchInputs(NamedTuple):
    """What re-running a batch at its op needs (:func:`_closure`): the freed intermediates
    to re-make there too (``links``), and the buffers it would read that are not there
    (``missing``)."""

    links: list[int]
    missing: set[int]


def saved_activations(trace: Trace) -> list[SavedActivation]:
    """Every saved activation with a recipe, in producer order (ties: buffer id)."""
    phases = [op.phase for op in trace.ops]
    if "fw" in phases and "bw" in phases:
        def crosses(producer, p, q):
            return phases[producer] == "fw" and phases[p] == "fw" and phases[q] == "bw"
    else:
        turn = _turn(trace)

        def crosses(producer, p, q):
            return producer < turn and p < turn <= q
    out = []
    for b in trace.buffers:
        if b.kind == PERSISTENT or b.recompute is None:
            continue
        gaps = [(g.next_use - g.prev_use, g.prev_use, g.next_use)
                for g in gaps_of(trace, b) if not g.wraps]
        if not gaps:
            continue
        _length, p, q = max(gaps)  # the longest (ties: the latest)
        if q - p > MIN_GAP and crosses(b.recompute.op, p, q):
            out.append(SavedActivation(b.recompute.op, b.id, p, q))
    out.sort()
    return out


def _turn(trace: Trace) -> int:
    """The op with the most bytes alive (the forward/backward turn of a training step)."""
    if trace.num_ops == 0:
        return 0
    live = live_bytes([b.start for b in trace.buffers], [b.end for b in trace.buffers],
                      [b.size for b in trace.buffers], trace.num_ops)
    return int(np.argmax(live))


SPLITS = ("bytes", "count")
"""How :func:`split_segments` weighs a saved activation: by its size, or one each."""


def split_segments(trace: Trace, saved: list[SavedActivation], segments: int,
                   split: str = "bytes") -> list[list[SavedActivation]]:
    """``saved`` (in producer order) cut into at most ``segments`` runs of equal weight
    (``split``: equal bytes, or equal numbers of saved activations); the saved activations
    of one producer op stay in one segment."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: expected one of {SPLITS}")
    weights = [trace.buffer(s.buffer_id).size if split == "bytes" else 1 for s in saved]
    total = sum(weights)
    out: list[list[SavedActivation]] = [[] for _ in range(max(1, segments))]
    acc = 0
    current = 0
    last_op = None
    for item, weight in zip(saved, weights, strict=True):
        if item.producer_op != last_op and total:
            current = max(current, min(len(out) - 1, acc * len(out) // total))
        out[current].append(item)
        acc += weight
        last_op = item.producer_op
    return [seg for seg in out if seg]


def _closure(state: PlanState, members: list[SavedActivation], point: int,
             dropped_elsewhere: set[int]) -> BatchInputs:
    """What re-running ``members`` at ``point`` needs: the freed intermediates to
    re-produce there too (producer order), and the buffers it would read that are not
    there (another batch's members, which must become checkpoints, or buffers nothing can
    re-make at ``point``)."""
    trace = state.trace
    own = {m.buffer_id for m in members}
    links: list[int] = []
    needs: set[int] = set()

    def available(x: int, depth: int) -> bool:
        if x in own or x in links:
            return True
        buf = trace.buffer(x)
        if x in dropped_elsewhere:
            needs.add(x)
            return False
        if buf.kind == PERSISTENT or state.resident(x, point):
            return True
        # a freed intermediate (or one inside a recompute hole) is made again for one op
        if (buf.recompute is None or depth > state.max_chain
                or (point < buf.end and (state.hole_kind(x, point) not in (RECOMPUTE, None)
                                         or point < state.base[x].start))):
            needs.add(x)
            return False
        if not all([available(y, depth + 1) for y in buf.recompute.inputs]):
            return False
        links.append(x)
        return True

    for m in members:
        for x in trace.buffer(m.buffer_id).recompute.inputs:
            available(x, 0)
    links.sort(key=lambda x: (trace.buffer(x).recompute.op, x))
    return BatchInputs(links, needs)


def _point(seg: list[SavedActivation]) -> int:
    """A batch's op: the first backward use of any of its members."""
    return min(m.first_backward_use for m in seg)


def _resolve_once(state: PlanState, segs: list[list[SavedActivation]]) -> bool:
    """One repair of the segments (False: none needed). A member still used at or after
    its batch's op is no gap and leaves the batch; the members of other batches a batch
    would read leave theirs (checkpoints); a batch that needs what no batch can make is
    dropped. Each repair removes at least one member, so repeating ends."""
    owner = {m.buffer_id: s for s, seg in enumerate(segs) for m in seg}
    for s, seg in enumerate(segs):
        if not seg:
            continue
        point = _point(seg)
        kept = [m for m in seg if m.last_forward_use < point - 1]
        if len(kept) != len(seg):
            segs[s] = kept
            return True
        missing = _closure(state, seg, point, {b for b, o in owner.items() if o != s}).missing
        if not missing:
            continue
        moved = [b for b in missing if b in owner]
        for b in moved:
            segs[owner[b]] = [m for m in segs[owner[b]] if m.buffer_id != b]
        if not moved:
            segs[s] = []
        return True
    return False


def plan_batches(state: PlanState, segments: int, split: str = "bytes") -> list[Batch]:
    """Every segment's batch, checkpoints resolved."""
    segs = split_segments(state.trace, saved_activations(state.trace), segments, split)
    while _resolve_once(state, segs):
        pass
    out = []
    for seg in segs:
        if seg:
            point = _point(seg)
            out.append(Batch(point, seg, _closure(state, seg, point, set()).links))
    return out


def apply_batches(state: PlanState, segments: int, split: str = "bytes") -> None:
    """Drop every saved activation of ``segments`` segments and re-produce each segment's
    at its batch point (:func:`plan_batches`)."""
    for batch in plan_batches(state, segments, split):
        gaps = [m.gap for m in batch.members]
        state.apply_batch(batch.point, gaps, batch.links)
        state.taken.update(gaps)
