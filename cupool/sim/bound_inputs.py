"""The per-buffer numbers every part of the overhead lower bound reads (module
:mod:`cupool.sim.bounds`): sizes, lifetimes, uses and writes as arrays, the cost per byte
of a copy each way (at the fastest host level: a plan names the level of each swap, and
a pageable copy's fixed cost may undercut a pinned one's), and a lower bound on the
compute time of recomputing each buffer.

A recompute's time ``r_j`` counts its producer plus a share of the inputs the program had
already freed (:func:`recompute_us`: those must be rematerialized too).
"""

from __future__ import annotations

import numpy as np

from cupool.core.vocabulary import HOST_LEVELS, PERSISTENT, TEMPORARY, Trace
from cupool.sim.cost import D2H, H2D


class BufferArrays:
    """Per-buffer arrays of ``trace`` under ``cost``, by buffer index (the order of
    ``trace.buffers``): sizes, kinds, lifetimes, first and last uses and writes, the copy
    costs per byte each way, each buffer's recompute time (:func:`recompute_us`) and the
    buffers each op uses; :meth:`next_uses` looks up next uses for many at once."""

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
        self.used_at = [[] for _ in range(n)]
        for index, b in enumerate(buffers):
            for u in b.uses:
                self.used_at[u].append(index)
        # every (buffer, use) as one sorted key, for vectorized next-use lookups
        self.n = n
        owners = np.repeat(np.arange(len(buffers), dtype=np.int64),
                           [len(b.uses) for b in buffers])
        uses = np.fromiter((u for b in buffers for u in b.uses), dtype=np.int64,
                           count=len(owners))
        self.use_keys = owners * (n + 1) + uses
        self.born_temporary = [[] for _ in range(n)]
        for index, b in enumerate(buffers):
            if b.kind == TEMPORARY:
                self.born_temporary[b.start].append(index)

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
    without a recipe makes ``j`` impossible to recompute (``inf``)."""
    buffers = trace.buffers
    readers: dict[int, int] = {}
    for b in buffers:
        if b.recompute is not None:
            for x in set(b.recompute.inputs):
                readers[x] = readers.get(x, 0) + 1
    out = np.full(len(buffers), np.inf)
    index = {b.id: k for k, b in enumerate(buffers)}
    for k in sorted(range(len(buffers)), key=lambda k: (buffers[k].start, k)):
        b = buffers[k]
        if b.recompute is None:
            continue
        total = float(op_us[b.recompute.op])
        for x in set(b.recompute.inputs):
            buf = trace.buffer(x)
            if x == b.id or buf.kind == PERSISTENT or buf.end > b.start + 1:
                continue
            # inputs start no later than b: already computed (inf: no recipe, so b cannot
            # be recomputed at all)
            total += out[index[x]] / readers[x]
        out[k] = total
    return out


__all__ = ["BufferArrays", "recompute_us"]
