"""A lower bound on the recomputation a budget forces on a chain, when nothing is copied.

A reverse sweep reads a chain's states ``x₁ … x_n`` back last first (each recomputed from
the one before it; ``x₀`` is resident). With at most ``s`` of them held besides the one
the sweep reads, no schedule delivers them in fewer forward steps than Griewank and
Walther's optimum for ``l = n + 1`` steps and ``s + 1`` checkpoints (revolve, ACM TOMS
Algorithm 799)::

    t(l, c) = r·l - C(c + r, c + 1),    r the least integer with C(c + r, c) >= l

of which the program's own sweep runs ``n``: the rest, ``t - n``, are recomputes. The
count is exact for a chain (revolve attains it); the bound is sound for any plan that
copies nothing, because ``s`` here is the most states any plan can hold: at the op that
reads state ``x_j`` the bytes that must be resident there anyway (what the op uses, and
every pending buffer without a recompute recipe: without copies it cannot leave) take
their share of the budget, and the rest holds at most ``free // smallest state`` states,
the one the op reads among them. (A plan also holds the state a step writes while it
reads the one before: the bound leaves that out, so it stays below.)

A state may be several buffers (a step that makes a reaction term beside the state): then
a checkpoint holds at least one of them that some recompute reads (a buffer no recipe
reads re-makes nothing), so ``free`` counts slots of the smallest such buffer, and each
recompute is priced as the cheapest of their ops.

The chain is given (its states' buffer ids, in order); the budget planner finds one
(:mod:`cupool.planning.budget.chain`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import comb

from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.errors import InputError
from cupool.sim.cost import CostModel, cost_model


def revolve_steps(steps: int, checkpoints: int) -> int:
    """Griewank and Walther's fewest forward steps reversing ``steps`` steps with
    ``checkpoints`` checkpoints (one holds the initial state)."""
    if steps < 1 or checkpoints < 1:
        raise InputError(f"steps (={steps}) and checkpoints (={checkpoints}) must be >= 1")
    r = 1
    while comb(checkpoints + r, checkpoints) < steps:
        r += 1
    return r * steps - comb(checkpoints + r, checkpoints + 1)


def _read_back_at(uses) -> int:
    """The first use after a state's longest idle stretch (its first use in the reverse
    sweep); its last use when it never idles."""
    gaps = [(b - a, b) for a, b in itertools.pairwise(uses)]
    return max(gaps)[1] if gaps else uses[-1]


@dataclass(frozen=True)
class ChainBound:
    """What a budget forces on a chain of ``states`` states: at most ``slots`` held besides
    the one read (``None``: the op reading ``tightest_op``'s state cannot hold it),
    at least ``recomputes`` forward steps beyond the sweep, ``recompute_us`` of them
    (each priced as the cheapest state's op), ``overhead`` of the ideal iteration."""

    states: int
    slots: int | None
    recomputes: int | None
    recompute_us: float | None
    overhead: float | None
    tightest_op: int


def chain_recompute_bound(trace: Trace, states, budget_bytes: int,
                          cost: CostModel | None = None) -> ChainBound:
    """The :class:`ChainBound` of the chain ``states`` (``x₁ … x_n`` in order, each a
    buffer id or a tuple of the buffer ids of a state of several) under ``budget_bytes``
    (module docstring)."""
    states = [(x,) if isinstance(x, int) else tuple(x) for x in states]
    if not states or not all(states):
        raise InputError("states: the chain needs at least one state, each of one buffer "
                         "or more")
    cost = cost or cost_model("gen5")
    members = [b for x in states for b in x]
    ids = set(members)
    read = {y for b in trace.buffers if b.recompute is not None for y in b.recompute.inputs}
    smallest = min((trace.buffer(b).size for b in members if b in read),
                   default=min(trace.buffer(b).size for b in members))
    op_us = cost.op_times(trace)
    pending_from = {}
    for b in trace.buffers:  # buffers that cannot leave the device without a copy
        if b.id in ids or (b.kind != PERSISTENT and b.recompute is not None):
            continue
        last = b.end if b.kind == PERSISTENT else (max(b.uses) + 1 if b.uses else b.end)
        pending_from[b.id] = (b.start if b.kind != PERSISTENT else 0, last)
    slots, tightest = None, -1
    for x in members:
        buffer = trace.buffer(x)
        op = _read_back_at(buffer.uses)
        used = {b.id for b in trace.buffers if op in b.uses and b.id not in ids}
        held = sum(trace.buffer(b).size for b in used)
        held += sum(trace.buffer(b).size for b, (lo, hi) in pending_from.items()
                    if lo <= op < hi and b not in used)
        free = budget_bytes - held - buffer.size
        count = free // smallest if free >= 0 else -1
        if slots is None or count < slots:
            slots, tightest = count, op
    n = len(states)
    if slots < 0:
        return ChainBound(n, None, None, None, None, tightest)
    forward = revolve_steps(n + 1, min(slots, n) + 1)
    recomputes = max(0, forward - n)
    priced = [b for b in members if b in read] or members
    cheapest = min(float(op_us[trace.buffer(b).recompute.op]) if trace.buffer(b).recompute
                   else float("inf") for b in priced)
    cheapest = 0.0 if cheapest == float("inf") else cheapest
    ideal = float(sum(op_us))
    us = recomputes * cheapest
    return ChainBound(n, slots, recomputes, us, us / ideal if ideal > 0 else 0.0, tightest)


__all__ = ["ChainBound", "chain_recompute_bound", "revolve_steps"]
