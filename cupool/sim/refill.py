"""The overhead lower bound of refilling a peak: the buffers off the device at op ``k`` come
back whole, one link, after op ``k`` ended, and the first of them needs room to land in.

At op ``k`` at least ``X_k`` bytes (its excess, :mod:`cupool.sim.bounds`) belong to
buffers ``S`` that no residency covers at ``k``. A candidate ``j`` of ``S`` (pending at
``k``, not used or born there) without a recipe and used again in this iteration, at op
``u_j``, is *charged*: its data comes back only by a swap-in triggered at an op in ``(k,
u_j]``, handed to an H2D engine no earlier than op ``k``'s end, landed before op ``u_j``
starts. For a horizon ``H`` (the next use of a charged candidate), the candidates not
charged or used after ``H`` hold ``U`` bytes at most, so the charged ones used by ``H``
that are off hold ``R = X_k - U`` bytes or more, copied in within the window from op
``k``'s end to op ``H``'s start, which holds ``C`` µs of ops (as in
:mod:`cupool.sim.windows`). Whole buffers: at least ``c = ceil(R / largest)`` copies,
carrying at least ``max(R, c * smallest)`` bytes of those candidates.

**Room.** Let ``f`` be the first of those copies handed over, ``Z`` the bytes it lands
in. At op ``k`` the resident buffers fit the budget, and the simulator hands ``f`` over
only once nothing still holds ``Z`` (no residency, no copy out still reading it). So
either

- ``A``: no resident buffer overlaps ``Z`` at ``k`` (or only one whose data is dead there
  and that a plan kept): the budget held ``|Z|`` bytes beside the residents, so ``S``
  holds ``X_k + |Z|`` bytes and the charged copies carry ``R + s`` (``s`` the smallest
  such size);
- ``B``: a resident buffer ``b`` overlapping ``Z`` leaves without a copy out after op
  ``k``: it dies (a temporary after its last use ``l``: ``f`` waits for op ``l``'s end), it
  has a recipe (dropped, made again later: no wait), or it is clean: not written at ``k``
  and, where an op ``w`` before ``k`` wrote it, entered by a copy in since, after the copy
  out of ``w``'s data. Used at ``k``, ``b`` had that copy in land before op ``k`` started:
  a stall before op ``k`` of ``end(w) + out + in - start(k)`` where positive (a window
  before this one: the two add up); not used there, what of that copy ran after op ``k``
  ended is engine time in the window. A clean ``b`` used again by ``H``, at op ``v``
  first, either leaves before ``v`` and comes back (one more copy in: ``c + 1`` copies,
  ``s`` more bytes) or stays for ``v`` (``f`` waits for op ``v``'s end, and for a copy
  out after it where ``v`` writes ``b``); one not used again by ``H`` leaves when op ``k``
  ends. A ``b`` not used at ``k`` is held there only where the other candidates can hold
  the excess;
- ``C``: every resident buffer overlapping ``Z`` leaves by a copy out issued after op
  ``k`` ended: ``f`` waits for one whole copy out of at least the smallest pending buffer.

The plan stalls or recomputes at least the least of these (the delay before ``f``, plus
the copies' engine time, less ``C``), in one period; the bound is the largest over the ops
of most excess and their horizons. Candidates without a later use in this iteration
(offloaded across the boundary) and those with a recipe are never charged, which can only
lower the bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cupool.core.vocabulary import Trace
from cupool.sim.bound_inputs import BufferArrays
from cupool.sim.cost import D2H, H2D
from cupool.sim.windows import CopyLink, LastWrites

REFILL_OPS = 512
"""The ops of most excess the refill bound examines (every op with an excess on traces of
at most this many)."""

ROUNDING = 1e-9
"""Each deficit is lowered by this share of the times it compares, so that a plan which
meets the bound exactly (the sums taken in another order) is not found below it."""

ROOM_SLACK = "slack"
ROOM_CLEAN = "clean"
ROOM_FREE = "free"
ROOM_COPY_OUT = "copy out"


@dataclass(frozen=True)
class Refill:
    """``stall_us``: the least stall and recompute time every valid plan has after op
    ``op`` (``None``: no op forces any) and before op ``until_op``, its charged buffers
    copied in; ``room`` names the way of making room for the first copy that was
    cheapest there (:data:`ROOM_SLACK`, :data:`ROOM_CLEAN`, :data:`ROOM_FREE`,
    :data:`ROOM_COPY_OUT`)."""

    stall_us: float
    op: int | None = None
    until_op: int | None = None
    room: str | None = None


class _Context:
    """What every op's refill reads: the arrays, op times, the links both ways, each
    buffer's last write before an op, which buffers each op writes."""

    def __init__(self, trace: Trace, arrays: BufferArrays, op_us, cost):
        self.arrays = arrays
        self.n = trace.num_ops
        self.prefix = np.concatenate([[0.0], np.cumsum(np.asarray(op_us, dtype=np.float64))])
        self.engines = cost.copy_engines_per_direction
        self.copy_in = CopyLink.of(cost, H2D, arrays.size)
        # each buffer's whole copy at its fastest level, on one engine, each way
        self.in_us = self.copy_in.fastest_pb * arrays.size * self.engines
        self.out_us = CopyLink.of(cost, D2H, arrays.size).fastest_pb * arrays.size * self.engines
        self.writes = LastWrites(trace, arrays)
        self.recipe = np.isfinite(arrays.recompute)
        self.written_at = [set() for _ in range(self.n)]
        for index, b in enumerate(trace.buffers):
            for w in b.write_ops:
                self.written_at[w].add(index)


@dataclass(frozen=True)
class _Kept:
    """What op ``k`` holds (``must``: the buffers it uses and makes) and writes
    (``written``), as index arrays, with the buffers of ``ctx`` that have a recipe."""

    must: np.ndarray
    written: np.ndarray
    recipe: np.ndarray

    @classmethod
    def at(cls, ctx: _Context, k: int) -> _Kept:
        must, written = ctx.arrays.must[k], ctx.written_at[k]
        return cls(np.fromiter(must, dtype=np.int64, count=len(must)),
                   np.fromiter(written, dtype=np.int64, count=len(written)), ctx.recipe)

    def clean(self, buffers) -> np.ndarray:
        """Which of ``buffers`` can leave op ``k`` clean: no recipe, not written there."""
        return ~self.recipe[buffers] & ~np.isin(buffers, self.written)


def _room_free_us(ctx: _Context, k: int, excess: float, candidate_bytes: float, held,
                  kept: _Kept, next_use_of) -> tuple[np.ndarray, np.ndarray]:
    """The ways room for the first copy in after op ``k`` frees without a copy out of a
    buffer left dirty there and without coming back: per way a buffer of ``held`` (those
    pending at ``k``) leaves, the op its horizon must end before (``inf``: any) and what it
    costs: µs of delay after op ``k`` (or of stall before it) plus the engine time of the
    copies it adds to the window (over the engines). ``next_use_of(held)`` is each one's
    next use after ``k`` (``inf``: none in this iteration); ``kept`` what op ``k`` holds
    and writes."""
    a, prefix = ctx.arrays, ctx.prefix
    # a candidate held at op k leaves the others to hold the excess
    held = held[np.isin(held, kept.must)
                | (excess + a.size[held] <= candidate_bytes * (1 + 1e-12))]
    used_here = np.isin(held, kept.must)
    recipe = ctx.recipe[held]
    # a temporary dies after its last use: free then, nothing to copy in
    dying = ~a.persistent[held]
    dies = prefix[a.pend_last[held[dying]] + 1] - prefix[k + 1]
    # a buffer with a recipe is dropped and made again: free at op k's end
    remade = np.zeros(int(recipe.sum()))
    # a clean buffer: not written at op k, entered by a copy in since its last write before
    # it (if any in this iteration), after that write's copy out: both ran before op k
    # (used there: a stall before it), or the copy in ran partly in the window (what of
    # it ends after op k ends, at most the whole copy, is engine time there)
    is_clean = kept.clean(held)
    clean, clean_here = held[is_clean], used_here[is_clean]
    last_write = ctx.writes.last_before(clean, k)
    landed = np.where(last_write >= 0, prefix[np.maximum(last_write, 0) + 1]
                      + ctx.out_us[clean] + ctx.in_us[clean], -np.inf)
    before = np.where(clean_here, np.maximum(landed - prefix[k], 0.0), 0.0)
    inside = np.where(clean_here, 0.0, np.minimum(np.maximum(landed - prefix[k + 1], 0.0),
                                                  ctx.in_us[clean]))
    cleaned = before + inside / ctx.engines
    # not used again by the horizon: it leaves at op k's end
    next_use = next_use_of(clean)
    # used again by the horizon, at op v, and staying for it: it leaves after v (copied out
    # then if v writes it)
    later = np.isfinite(next_use)
    v = next_use[later].astype(np.int64)
    after_v = prefix[v + 1] - prefix[k + 1]
    rewritten = np.array([j in ctx.written_at[u] for j, u in zip(clean[later], v, strict=True)],
                         dtype=bool)
    stays = cleaned[later] + after_v + np.where(rewritten, ctx.out_us[clean[later]],
                                                0.0)
    horizon = np.concatenate([np.full(len(dies) + len(remade), np.inf), next_use,
                              np.full(len(stays), np.inf)])
    return horizon, np.concatenate([dies, remade, cleaned, stays])


def _op_refill(ctx: _Context, k: int, excess: float, candidates) -> Refill:
    """The refill bound after op ``k`` (see the module docstring)."""
    a, prefix, n = ctx.arrays, ctx.prefix, ctx.n
    candidates = np.asarray(candidates, dtype=np.int64)
    if not len(candidates):
        return Refill(0.0)
    next_use = a.next_uses(candidates, k)
    charged = (next_use < n) & ~ctx.recipe[candidates]
    uncharged_bytes = float(a.size[candidates[~charged]].sum())
    chosen = candidates[charged]
    if not len(chosen):
        return Refill(0.0)
    order = np.argsort(next_use[charged], kind="stable")
    chosen, uses = chosen[order], next_use[charged][order]
    sizes = a.size[chosen]
    cum = np.cumsum(sizes)
    ends = np.flatnonzero(np.append(uses[1:] != uses[:-1], True))
    need = excess - uncharged_bytes - (cum[-1] - cum[ends])
    compute = prefix[uses[ends]] - prefix[k + 1]
    largest = np.maximum.accumulate(sizes)[ends]
    smallest = np.minimum.accumulate(sizes)[ends]
    tried = need > 0
    if not tried.any():
        return Refill(0.0)
    ends, need, compute = ends[tried], need[tried], compute[tried]
    largest, smallest = largest[tried], smallest[tried]
    # room held off the device beside the excess must come from the candidates too
    spare = need + smallest <= cum[ends] * (1 + 1e-12)
    lat, byte = ctx.copy_in.latency_us, ctx.copy_in.byte_us
    copies = np.ceil(need / largest * (1 - 1e-12))
    carried = np.maximum(need, copies * smallest)
    engine_us = copies * lat + carried * byte
    pending = np.flatnonzero((a.pend_first <= k) & (k <= a.pend_last))
    # A: the room was free at op k (or held by dead data): the charged copies carry more
    slack_copies = np.ceil((need + smallest) / largest * (1 - 1e-12))
    slack = np.where(spare, slack_copies * lat
                     + np.maximum(need + smallest, slack_copies * smallest) * byte, np.inf)
    # B: a clean buffer used again by the horizon leaves and comes back: one copy more
    kept = _Kept.at(ctx, k)
    must_clean = kept.must[kept.clean(kept.must)]
    clean_size = float(a.size[must_clean].min()) if len(must_clean) else np.inf
    clean = (copies + 1) * lat + (carried + np.where(spare, np.minimum(smallest, clean_size),
                                                      clean_size)) * byte

    def next_use_of(held):
        uses_after = a.next_uses(held, k)
        return np.where(uses_after < n, uses_after.astype(np.float64), np.inf)

    # B: room freed by a death, a recipe or a clean buffer not needed by the horizon (its
    # next use after the horizon's op)
    horizon, free_cost = _room_free_us(ctx, k, excess, float(a.size[candidates].sum()),
                                       pending, kept, next_use_of)
    by_horizon = np.argsort(horizon, kind="stable")
    suffix_min = np.append(np.minimum.accumulate(free_cost[by_horizon][::-1])[::-1], np.inf)
    free = suffix_min[np.searchsorted(horizon[by_horizon], uses[ends], side="right")]
    # C: a copy out of a pending buffer frees it
    copy_out = float(ctx.out_us[pending].min()) if len(pending) else np.inf
    ways = np.stack([slack, clean, free + engine_us, copy_out + engine_us])
    least = ways.min(axis=0)
    deficit = least - compute - ROUNDING * (least + compute)
    best = int(np.argmax(deficit))
    if deficit[best] <= 0:
        return Refill(0.0)
    names = (ROOM_SLACK, ROOM_CLEAN, ROOM_FREE, ROOM_COPY_OUT)
    return Refill(float(deficit[best]), k, int(uses[ends[best]]),
                  names[int(np.argmin(ways[:, best]))])


def refill_bound(trace: Trace, arrays: BufferArrays, op_us, excess, cost) -> Refill:
    """The largest refill stall (µs) over the :data:`REFILL_OPS` ops of most excess (see
    the module docstring); the buffers that may be off the device at op ``k`` are
    ``arrays.candidates_at(k)``."""
    ctx = _Context(trace, arrays, op_us, cost)
    ops = [int(i) for i in np.argsort(-np.asarray(excess), kind="stable")[:REFILL_OPS]
           if excess[i] > 0]
    best = Refill(0.0)
    for k in ops:
        found = _op_refill(ctx, k, float(excess[k]), arrays.candidates_at(k))
        if found.stall_us > best.stall_us:
            best = found
    return best


__all__ = ["REFILL_OPS", "ROOM_CLEAN", "ROOM_COPY_OUT", "ROOM_FREE", "ROOM_SLACK", "Refill",
           "refill_bound"]
