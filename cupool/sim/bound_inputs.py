"""The per-buffer numbers every part of the overhead lower bound reads (module
:mod:`cupool.sim.bounds`): sizes, lifetimes, uses and writes as arrays, the cost per byte
of a copy each way (at the fastest host level: a plan names the level of each swap, and
a pageable copy's fixed cost may undercut a pinned one's), and a lower bound on the
compute time of recomputing each buffer.

A recompute's time ``r_j`` counts its producer plus a share of the inputs the program had
already freed (:func:`recompute_us`: those must be rematerialized too). At one op ``i``
the bound knows more: a buffer off the device there and recomputed before its next use
is recomputed after op ``i``, so every input freed by op ``i + 1`` must be rematerialized
for it (:meth:`BufferArrays.chain_us`), each rematerialization shared only among the
recomputes that can charge it at that op (:mod:`cupool.sim.chain_shares`; priced over
every reader, as :func:`remat_us` does, it would be sound but looser).
"""

from __future__ import annotations

import numpy as np

from cupool.core.vocabulary import HOST_LEVELS, PERSISTENT, TEMPORARY, Trace
from cupool.sim.chain_shares import OuterPrices, RecipeGraph, local_chains, outer_chains
from cupool.sim.cost import D2H, H2D


class BufferArrays:
    """Per-buffer arrays of ``trace`` under ``cost``, by buffer index (the order of
    ``trace.buffers``): sizes, kinds, lifetimes, first and last uses and writes, the copy
    costs per byte each way, each buffer's recompute time (:func:`recompute_us`), the
    buffers each op uses and those it must hold (``must``: what it uses and the
    temporaries it makes, ``must_bytes`` their bytes); :meth:`next_uses` looks up next
    uses for many at once."""

    def __init__(self, trace, cost):
        n = trace.num_ops
        buffers = trace.buffers
        self.size = np.array([b.size for b in buffers], dtype=np.float64)
        self.persistent = np.array([b.kind == PERSISTENT for b in buffers])
        self.start = np.array([b.start for b in buffers])
        last_use = np.array([b.uses[-1] if b.uses else -1 for b in buffers])
        self.last_use = last_use
        self.first_use = np.array([min(b.uses) if b.uses else -1 for b in buffers])
        # the ops that may write each buffer (every use when unknown): clean data leaves
        # the device without a copy out
        self.first_write = np.array([min(b.write_ops) if b.write_ops else -1 for b in buffers])
        self.last_write = np.array([max(b.write_ops) if b.write_ops else -1 for b in buffers])
        self.pend_first = np.where(self.persistent, 0, self.start)
        self.pend_last = np.where(self.persistent, n - 1, np.maximum(self.start, last_use))
        self.copy_per_byte = _fastest_per_byte(cost, H2D, self.size)
        self.out_per_byte = _fastest_per_byte(cost, D2H, self.size)
        op_us = cost.op_times(trace)
        self.recompute = recompute_us(trace, op_us)
        self.recompute_per_byte = self.recompute / self.size
        self.producer_us = np.array([float(op_us[b.recompute.op]) if b.recompute is not None
                                     else np.inf for b in buffers])
        self.used_at = [[] for _ in range(n)]
        for index, b in enumerate(buffers):
            for u in b.uses:
                self.used_at[u].append(index)
        # every (buffer, use) as one sorted key, for vectorized next-use lookups
        self.n = n
        self._chains(trace, op_us)
        owners = np.repeat(np.arange(len(buffers), dtype=np.int64),
                           [len(b.uses) for b in buffers])
        uses = np.fromiter((u for b in buffers for u in b.uses), dtype=np.int64,
                           count=len(owners))
        self.use_keys = owners * (n + 1) + uses
        self.born_temporary = [[] for _ in range(n)]
        for index, b in enumerate(buffers):
            if b.kind == TEMPORARY:
                self.born_temporary[b.start].append(index)
        # what each op itself holds: the buffers it uses and the temporaries it makes
        self.must = [set(self.used_at[i]) | set(self.born_temporary[i]) for i in range(n)]
        self.must_bytes = np.array([int(sum(self.size[j] for j in held)) for held in self.must],
                                   dtype=np.int64)

    def _chains(self, trace, op_us) -> None:
        """Every (buffer, temporary recipe input) pair, sorted by ``owner * (n + 2) + input
        end`` (``chain_keys``), with the input and its end and size; and the recipes as a
        :class:`~cupool.sim.chain_shares.RecipeGraph`, which prices the chains at one op."""
        buffers, stride = trace.buffers, self.n + 2
        index = {b.id: k for k, b in enumerate(buffers)}
        owners, inputs = [], []
        for k, b in enumerate(buffers):
            if b.recompute is None:
                continue
            for x in set(b.recompute.inputs):
                if x != b.id and trace.buffer(x).kind != PERSISTENT:
                    owners.append(k)
                    inputs.append(index[x])
        by_reader: list[list[int]] = [[] for _ in buffers]
        for owner, x in zip(owners, inputs, strict=True):
            by_reader[owner].append(x)
        rank = np.empty(len(buffers), dtype=np.int64)
        rank[sorted(range(len(buffers)), key=lambda k: (buffers[k].start, k))] = np.arange(
            len(buffers))
        self.graph = RecipeGraph(by_reader, [b.end for b in buffers], rank.tolist(),
                                 self.producer_us.tolist())
        owners = np.array(owners, dtype=np.int64)
        inputs = np.array(inputs, dtype=np.int64)
        ends = np.array([buffers[x].end for x in inputs], dtype=np.int64)
        keys = owners * stride + np.minimum(ends, self.n + 1)
        order = np.argsort(keys, kind="stable")
        self.chain_keys, inputs, ends = keys[order], inputs[order], ends[order]
        self.chain_input, self.chain_end, self.chain_size = inputs, ends, self.size[inputs]
        reader_ends = np.array([buffers[r].end for r in owners[order]], dtype=np.int64)
        self.outer = OuterPrices(np.sort(inputs * stride + np.minimum(reader_ends, self.n + 1)),
                                 remat_us(trace, op_us), self.producer_us, self.n)

    def chain_us(self, candidates, i: int, room: float) -> tuple[np.ndarray, np.ndarray]:
        """Each candidate's chain at op ``i``: its share of rematerializing the temporary
        inputs of its recipe that the program freed by op ``i + 1`` (``end <= i + 1``): a
        recompute after op ``i`` reads them after their lifetime, so each comes back only
        by a recompute of its own, shared only among the readers that charge it there
        (:func:`~cupool.sim.chain_shares.local_chains`; ``candidates`` are buffers pending
        at op ``i``, neither used there nor born there). Returned as ``(late, anywhere)``:
        ``late`` the producers of the inputs whose rematerialization runs after op ``i``
        -- alive at op ``i`` (``end == i + 1``, so rematerialized at op ``i + 1`` or later)
        or larger than ``room`` (the budget beyond what op ``i`` must hold: rematerialized
        before op ``i`` and read after it, it would be resident at op ``i``) --,
        ``anywhere`` the rest (``inf`` in both when an input has no recipe)."""
        stride = self.n + 2
        candidates = np.asarray(candidates, dtype=np.int64)
        low = np.searchsorted(self.chain_keys, candidates * stride, side="left")
        high = np.searchsorted(self.chain_keys, candidates * stride + i + 1, side="right")
        counts = high - low
        late = np.zeros(len(candidates))
        anywhere = np.zeros(len(candidates))
        if not counts.any():
            return late, anywhere
        owner = np.repeat(np.arange(len(candidates)), counts)
        pair = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        pair += np.repeat(low, counts)
        after = (self.chain_end[pair] == i + 1) | (self.chain_size[pair] > room)
        local = (local_chains(self.graph, self.chain_input[pair])
                 or outer_chains(self.outer, self.chain_input[pair], i))
        blocked = np.bincount(owner, local.blocked, len(candidates)) > 0
        late = np.bincount(owner, np.where(after, local.producer, 0.0), len(candidates))
        anywhere = np.bincount(owner, np.where(after, 0.0, local.producer) + local.rest,
                               len(candidates))
        return np.where(blocked, np.inf, late), np.where(blocked, np.inf, anywhere)

    def pending_bytes(self) -> np.ndarray:
        """The bytes pending at each op: every persistent buffer, and each temporary one
        from its start to its last use (module :mod:`cupool.sim.bounds`)."""
        pending = np.zeros(self.n + 1)
        np.add.at(pending, self.pend_first, self.size)
        np.add.at(pending, self.pend_last + 1, -self.size)
        return np.cumsum(pending)[:self.n]

    def candidates_at(self, i: int) -> np.ndarray:
        """The buffers that may be off the device at op ``i``: pending there, neither used
        nor born there (``must``)."""
        alive = (self.pend_first <= i) & (i <= self.pend_last)
        alive[list(self.must[i])] = False
        return np.flatnonzero(alive)

    def next_uses(self, candidates, i: int) -> np.ndarray:
        """Each candidate's first use after op ``i`` (``n`` when none)."""
        stride = self.n + 1
        candidates = np.asarray(candidates, dtype=np.int64)
        if not len(self.use_keys):
            return np.full(len(candidates), self.n, dtype=np.int64)
        at = np.searchsorted(self.use_keys, candidates * stride + i, side="right")
        found = self.use_keys[np.minimum(at, len(self.use_keys) - 1)]
        mine = (at < len(self.use_keys)) & (found // stride == candidates)
        return np.where(mine, found % stride, self.n)


def _fastest_per_byte(cost, direction: str, sizes) -> np.ndarray:
    """Each buffer's fastest copy in ``direction`` over the host levels, per byte (µs)."""
    return np.min([cost.level_latency_us(level) / sizes
                   + 1.0 / (cost.level_gbps(direction, level) * 1e3)
                   for level in HOST_LEVELS], axis=0)


def _readers(trace: Trace) -> dict[int, int]:
    """How many recipes read each buffer."""
    readers: dict[int, int] = {}
    for b in trace.buffers:
        if b.recompute is not None:
            for x in set(b.recompute.inputs):
                readers[x] = readers.get(x, 0) + 1
    return readers


def remat_us(trace: Trace, op_us) -> np.ndarray:
    """A lower bound on the compute time of *rematerializing* each buffer (recomputing it
    after its lifetime ended, to feed a later recompute; ``inf``: no recipe).

    A rematerialization of ``x`` runs before an op ``r' >= x.end``, so every temporary
    input ``y`` of the recipe with ``y.end <= x.end`` is dead then and must be
    rematerialized too; ``x`` is charged its producer plus each such ``y``'s charge split
    over ``y``'s readers, as in :func:`recompute_us` (an input the recursion has not
    priced yet -- produced by the same op -- is charged nothing). At least
    :func:`recompute_us` (``x.end >= x.start + 1``)."""
    return _chained_us(trace, op_us, lambda b: b.end, unpriced=0.0)


def recompute_us(trace: Trace, op_us) -> np.ndarray:
    """A lower bound on the compute time of recomputing each buffer (``inf``: no recipe).

    Recomputing ``j`` re-runs its producer; an input ``x`` of the recipe that the program
    freed by the time ``j`` exists (temporary, ``x.end <= j.start + 1``: dead at every op a
    recompute of ``j`` can run, which is after ``j``'s start) cannot be resident then
    except by a rematerialization -- a recompute of ``x`` itself (the validator's
    [lifetime] rule). So ``j`` is charged its producer's time plus, for each such ``x``,
    ``x``'s own charge split evenly among the recipes that read ``x`` (one recompute of
    ``x`` may feed several: splitting keeps the sum over any set of buffers at or below
    the compute they really need, so the knapsack stays a relaxation). A freed input
    without a recipe makes ``j`` impossible to recompute (``inf``), and so does one not
    priced yet (produced by the same op)."""
    return _chained_us(trace, op_us, lambda b: b.start + 1, unpriced=np.inf)


def _chained_us(trace: Trace, op_us, freed_by, unpriced: float) -> np.ndarray:
    """Each buffer's producer time plus, for each temporary input ``x`` of its recipe with
    ``x.end <= freed_by(buffer)``, ``x``'s own charge split over ``x``'s readers; buffers
    are priced in order of start, and an input not priced yet is charged ``unpriced``
    (``inf`` for every buffer without a recipe)."""
    buffers = trace.buffers
    readers = _readers(trace)
    out = np.full(len(buffers), np.inf)
    done = np.zeros(len(buffers), dtype=bool)
    index = {b.id: k for k, b in enumerate(buffers)}
    for k in sorted(range(len(buffers)), key=lambda k: (buffers[k].start, k)):
        b = buffers[k]
        done[k] = True
        if b.recompute is None:
            continue
        total = float(op_us[b.recompute.op])
        limit = freed_by(b)
        for x in set(b.recompute.inputs):
            buf = trace.buffer(x)
            if x == b.id or buf.kind == PERSISTENT or buf.end > limit:
                continue
            ix = index[x]
            total += (out[ix] if done[ix] else unpriced) / readers[x]
        out[k] = total
    return out


__all__ = ["BufferArrays", "recompute_us", "remat_us"]
