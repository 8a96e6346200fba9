"""Recompute chains priced at one op: each rematerialization shared only among the
recomputes that can charge it there.

A candidate ``j`` off the device at op ``i`` and recomputed before its next use reads the
temporary inputs of its recipe that the program freed by op ``i + 1``; each comes back
only by a rematerialization (a recompute of its own), whose freed inputs (``end`` at or
before its own) recurse (:func:`~cupool.sim.bound_inputs.remat_us`). One rematerialization
may feed several recomputes, so a chain charges each input only a share of its price.

Sharing over *every* recipe that reads the input (:func:`~cupool.sim.bound_inputs.recompute_us`)
is sound everywhere but loose at one op: most of those readers are neither candidates at
``i`` nor reached by a candidate's chain there, so they never take their share. Here the
share is split only over the readers that charge the input at op ``i``: candidates whose
chain reads it (the input freed by op ``i + 1``) and rematerializations in those chains
that read it (the input freed by the reader's own end). Soundness, by induction from the
candidates down the chains: give each candidate a weight of at most 1 (the fraction of it
recomputed) and each rematerialization the sum of its charging readers' weights divided
by their count; every weight stays at most 1, so the charges of one rematerialization
add up to at most its price once, and the plan runs it at least once when any reader is
recomputed. An input not priced yet when its reader is (produced by the same op) is
charged nothing, and one without a recipe blocks the candidate (``inf``), as in
:func:`~cupool.sim.bound_inputs.remat_us`.

Walking the chains costs up to their size at every op; where they reach more than
:data:`CLOSURE_LIMIT` rematerializations (long recurrent traces: a chain through every
time step), :func:`outer_chains` prices the op instead, sound by the same induction: each
input shared over the candidates that read it and over every reader that could be a
rematerialization in a chain there (a temporary one freed by op ``i + 1``: every chain
buffer is), each deeper input priced over all its readers
(:func:`~cupool.sim.bound_inputs.remat_us`). An input read at the top by ``c`` candidates
and by rematerializations gets at most ``c`` candidates' weight plus one per such reader,
over a count at least as large; deeper inputs are shared over every reader. It lies
between the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RecipeGraph:
    """Each buffer's temporary recipe inputs (by buffer index, the reader itself left out)
    with their ends, the order the chains are priced in (by start, then index), and each
    buffer's producer time (``inf``: no recipe)."""

    inputs: list[list[int]]
    end: list[int]
    rank: list[int]
    producer_us: list[float]


CLOSURE_LIMIT = 500
"""The most rematerializations :func:`local_chains` walks at one op before it leaves the op
to :func:`outer_chains`."""


@dataclass(frozen=True)
class OuterPrices:
    """What :func:`outer_chains` reads: every (input, reader) pair keyed
    ``input * (n + 2) + min(reader end, n + 1)`` and sorted, each buffer's rematerialization
    priced over every reader (:func:`~cupool.sim.bound_inputs.remat_us`) and its producer's
    time, and the trace's op count ``n``."""

    reader_keys: np.ndarray
    remat: np.ndarray
    producer_us: np.ndarray
    n: int


@dataclass(frozen=True)
class LocalChains:
    """One op's chain prices: for every (candidate, input) pair of
    :class:`~cupool.sim.bound_inputs.BufferArrays`'s chain table, the input's share of its
    producer (``producer``) and of the rest of its rematerialization (``rest``), and
    whether it cannot be rematerialized (``blocked``)."""

    producer: np.ndarray
    rest: np.ndarray
    blocked: np.ndarray


def local_chains(graph: RecipeGraph, pair_input,
                 limit: int = CLOSURE_LIMIT) -> LocalChains | None:
    """The chain prices at one op ``i`` of the (candidate, input) pairs whose inputs are
    ``pair_input`` (each freed by op ``i + 1``, one pair per candidate reading it there;
    module docstring); ``None`` when the chains reach more than ``limit`` buffers."""
    pair_input = np.asarray(pair_input, dtype=np.int64)
    top, counts = np.unique(pair_input, return_counts=True)
    if len(top) > limit:
        return None
    # input -> how many readers charge it at op i
    charging: dict[int, int] = dict(zip(top.tolist(), counts.tolist(), strict=True))
    closure: set[int] = set(charging)
    frontier: list[int] = list(charging)
    end, rank, inputs = graph.end, graph.rank, graph.inputs
    while frontier:
        x = frontier.pop()
        freed_by = end[x]
        for y in inputs[x]:
            if end[y] > freed_by:
                continue
            charging[y] = charging.get(y, 0) + 1
            if y not in closure:
                closure.add(y)
                frontier.append(y)
        if len(closure) > limit:
            return None
    remat: dict[int, float] = {}
    for x in sorted(closure, key=rank.__getitem__):
        total = graph.producer_us[x]
        if total != math.inf:
            freed_by, order = end[x], rank[x]
            for y in inputs[x]:
                # priced earlier in the order (an input produced by the same op is not yet,
                # and is charged nothing)
                if end[y] <= freed_by and rank[y] < order:
                    total += remat[y] / charging[y]
        remat[x] = total
    pairs = pair_input.tolist()
    share = np.array([1.0 / charging[x] for x in pairs])
    price = np.array([remat[x] for x in pairs])
    own = np.array([graph.producer_us[x] for x in pairs])
    blocked = ~np.isfinite(price)
    with np.errstate(invalid="ignore"):
        rest = np.where(blocked, 0.0, (price - own) * share)
    return LocalChains(np.where(blocked, 0.0, own * share), rest, blocked)


def outer_chains(prices: OuterPrices, pair_input, i: int) -> LocalChains:
    """The chain prices at op ``i`` of the pairs whose inputs are ``pair_input``, each
    input shared over the candidates reading it and its readers freed by op ``i + 1``
    (module docstring): looser than :func:`local_chains`, in a few array operations."""
    pair_input = np.asarray(pair_input, dtype=np.int64)
    stride = prices.n + 2
    candidates = np.bincount(pair_input)[pair_input]
    low = np.searchsorted(prices.reader_keys, pair_input * stride, side="left")
    high = np.searchsorted(prices.reader_keys, pair_input * stride + i + 1, side="right")
    share = 1.0 / (candidates + high - low)
    price = prices.remat[pair_input]
    own = prices.producer_us[pair_input]
    blocked = ~np.isfinite(price)
    with np.errstate(invalid="ignore"):
        rest = np.where(blocked, 0.0, (price - own) * share)
    return LocalChains(np.where(blocked, 0.0, own * share), rest, blocked)


__all__ = ["CLOSURE_LIMIT", "LocalChains", "OuterPrices", "RecipeGraph", "local_chains",
           "outer_chains"]
