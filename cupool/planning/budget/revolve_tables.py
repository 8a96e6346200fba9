"""The dynamic programs behind :mod:`.revolve`: the fewest forward steps that deliver a
chain's states in reverse, and the advance that achieves them, in two models of memory.

**Slots** (Griewank and Walther's revolve, ACM TOMS Algorithm 799): ``s`` checkpoint
slots beside the state being advanced. To deliver ``n`` states above a held one, advance
``k`` steps and keep the state reached (a slot), deliver the ``n - k`` above it with one
slot less, then the ``k - 1`` below it with the slot back::

    R(0, s) = 0        R(n, 0) = n + R(n - 1, 0)
    R(n, s) = min over 1 <= k <= n of  k + R(n - k, s - 1) + R(k - 1, s)   (k = n: no slot)

its optimum is ``r·l - C(s + r, s + 1)`` for ``l = n + 1`` steps and ``s + 1``
checkpoints.

**Units**: ``u`` states' worth of memory for everything of the chain but the held base,
the state being advanced included. A step reads one state and writes the next, so an
advance of two steps or more holds two states besides the checkpoints (the one it reads,
given back after, and the one it writes), and one of a single step from a held state
only the one it writes. The recursion is the same with other edges::

    U(0, u) = 0        U(n, 0) = inf (n >= 1)        U(1, 1) = 1, U(n, 1) = inf (n >= 2)
    U(n, u) = min over 1 <= k <= n of  k + U(n - k, u - 1) + U(k - 1, u)   (u >= 2)

A slots schedule with ``s`` slots is a units schedule with ``u = s + 2``, so
``U(n, s + 2) <= R(n, s)``; where the last checkpoint is one step below the state it
feeds, no pair is ever held above it, and the units schedule keeps one state more. At the
smallest budget (``u = 2``: a checkpoint and the state one step above it) it halves the
``n²/2`` forward steps of re-running everything from the root.

**Steps of unequal cost.** Both recursions count steps; :func:`weighted_table` solves them
over the steps' times instead (``W(a, b, c)``: where a stretch starts matters then, so the
table has a dimension more and is solved for chains of up to
:data:`WEIGHTED_MAX_STATES` states). :func:`host_positions` places host checkpoints for
two levels over the slots table.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

UNREACHABLE = 1 << 40
"""``U(n, u)`` where no schedule fits ``u`` units."""

_TABLES: dict = {}  # (model, "largest"): (cost, advance) for the most states solved so far


def _largest(model: str, solve, states: int) -> tuple[np.ndarray, np.ndarray]:
    """``model``'s table solved so far, solved again by ``solve`` for at least ``states``
    states (twice the states it had) where it has fewer."""
    cost, advance = _TABLES.get((model, "largest"), (None, None))
    if cost is None or cost.shape[0] <= states:
        cost, advance = solve(max(states, 2 * (cost.shape[0] - 1) if cost is not None
                                  else states))
        _TABLES[(model, "largest")] = (cost, advance)
    return cost, advance


def revolve_table(states: int, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """``(R, K)``: ``R[n, s]`` the fewest forward steps that deliver ``n`` states above a
    held one with ``s`` free slots, ``K[n, s]`` the advance that achieves it (module
    docstring), for ``0 <= n <= states`` and ``0 <= s <= slots`` (read-only views of one
    table per process, solved for every slot count up to the most states asked for)."""
    cost, advance = _largest("slots", _solve, states)
    wide = min(slots, cost.shape[1] - 1)
    r, k = cost[: states + 1, : wide + 1], advance[: states + 1, : wide + 1]
    if wide < slots:  # as many slots as states: every state above the first is kept
        extra = np.arange(states + 1, dtype=np.int64)[:, None].repeat(slots - wide, axis=1)
        r = np.concatenate([r, extra], axis=1)
        k = np.concatenate([k, np.minimum(extra, 1)], axis=1)
    return r, k


def _solve(states: int) -> tuple[np.ndarray, np.ndarray]:
    """The recursion of the module docstring for ``n <= states`` and ``s < states``
    (``s >= n - 1`` keeps every state: ``R = n``)."""
    slots = max(1, states)
    n_all = np.arange(states + 1, dtype=np.int64)
    cost = np.zeros((states + 1, slots + 1), dtype=np.int64)
    advance = np.zeros((states + 1, slots + 1), dtype=np.int64)
    cost[:, 0] = n_all * (n_all + 1) // 2
    advance[:, 0] = n_all
    for s in range(1, slots + 1):
        few = n_all[: min(states, s + 1) + 1]  # a slot for each state below the last
        cost[few, s] = few
        advance[few, s] = np.minimum(few, 1)
        for n in range(len(few), states + 1):
            k = np.arange(1, n + 1)
            total = k + cost[k - 1, s]
            total[:-1] += cost[n - k[:-1], s - 1]
            best = int(np.argmin(total))
            cost[n, s], advance[n, s] = total[best], best + 1
    cost.setflags(write=False)
    advance.setflags(write=False)
    return cost, advance


def forward_steps(states: int, slots: int) -> int:
    """Forward steps of the optimal schedule delivering ``states`` states with ``slots``
    slots (the program's own sweep included)."""
    return int(revolve_table(states, max(0, slots))[0][states, max(0, slots)])




def least_units(states: int) -> int:
    """The fewest units any units schedule of ``states`` states needs."""
    return min(states, 2)


def units_table(states: int, units: int) -> tuple[np.ndarray, np.ndarray]:
    """``(U, K)`` of the units model (module docstring) for ``0 <= n <= states`` and
    ``0 <= u <= units`` (``U`` is :data:`UNREACHABLE` where no schedule fits; read-only
    views of one table per process)."""
    cost, advance = _largest("units", _solve_units, states)
    wide = min(units, cost.shape[1] - 1)
    u, k = cost[: states + 1, : wide + 1], advance[: states + 1, : wide + 1]
    if wide < units:  # as many units as states: every state is kept
        extra = np.arange(states + 1, dtype=np.int64)[:, None].repeat(units - wide, axis=1)
        u = np.concatenate([u, extra], axis=1)
        k = np.concatenate([k, np.minimum(extra, 1)], axis=1)
    return u, k


def _solve_units(states: int) -> tuple[np.ndarray, np.ndarray]:
    """The units recursion for ``n <= states`` and ``u <= states`` (``u >= n`` keeps every
    state: ``U = n``)."""
    units = max(2, states)
    n_all = np.arange(states + 1, dtype=np.int64)
    cost = np.full((states + 1, units + 1), UNREACHABLE, dtype=np.int64)
    advance = np.zeros((states + 1, units + 1), dtype=np.int64)
    cost[0, :] = 0
    if states >= 1:
        cost[1, 1], advance[1, 1] = 1, 1
    for u in range(2, units + 1):
        few = n_all[: min(states, u) + 1]  # a unit for each state
        cost[few, u] = few
        advance[few, u] = np.minimum(few, 1)
        for n in range(len(few), states + 1):
            k = np.arange(1, n + 1)
            total = k + cost[k - 1, u]
            total[:-1] += cost[n - k[:-1], u - 1]
            best = int(np.argmin(total))
            cost[n, u], advance[n, u] = min(int(total[best]), UNREACHABLE), best + 1
    cost.setflags(write=False)
    advance.setflags(write=False)
    return cost, advance




WEIGHTED_MAX_STATES = 64
"""Longest chain whose steps of unequal cost get a table of their own (its size grows with
the cube of the states)."""


TIMED_SPREAD = 2.0
"""How many times the cheapest step's time the dearest must take for the steps' times to
be planned by (:func:`state_us`)."""


class Table:
    """A solved recursion as the builder reads it: :meth:`advance_to` the state to keep
    next, delivering ``a + 1 .. b`` above a held ``a`` with ``count`` slots or units."""

    def __init__(self, cost: np.ndarray, advance: np.ndarray, weighted: bool = False):
        self.cost, self.advance, self.weighted = cost, advance, weighted

    def advance_to(self, a: int, b: int, count: int) -> int:
        if self.weighted:
            return int(self.advance[a, b, count])
        return a + int(self.advance[b - a, count])


def weighted_table(step_us, count: int, units: bool) -> Table:
    """The recursion of either model (module docstring) when the steps cost ``step_us``
    (``step_us[j - 1]``: making state ``j``): ``W[a, b, c]`` the least time of the forward
    steps delivering ``a + 1 .. b`` above a held ``a`` with ``c`` slots or units, the
    sweep's own steps counted (they are the same in every schedule)::

        W(a, b, c) = min over a < k <= b of  w(a, k) + W(k, b, c - 1) + W(a, k - 1, c)
                                        (k = b: w(a, b) + W(a, b - 1, c))

    with ``w(a, k)`` the time of steps ``a + 1 .. k``; slots: keeping ``k < b`` needs a
    slot; units: a single step needs one unit, a longer advance two."""
    n = len(step_us)
    prefix = np.concatenate(([0.0], np.cumsum(np.asarray(step_us, dtype=np.float64))))
    inf = np.inf
    cost = np.full((n + 1, n + 1, count + 1), inf)
    advance = np.zeros((n + 1, n + 1, count + 1), dtype=np.int32)
    idx = np.arange(n + 1)
    cost[idx, idx, :] = 0.0
    for length in range(1, n + 1):
        a = np.arange(0, n - length + 1)[:, None]
        j = np.arange(1, length + 1)[None, :]
        k, b = a + j, a + length
        steps = prefix[k] - prefix[a]
        for c in range(count + 1):
            below = cost[a, k - 1, c]
            above = cost[k, b, c - 1] if c >= 1 else np.full(k.shape, inf)
            total = steps + np.where(j == length, cost[a, b - 1, c], above + below)
            if units:  # a single step needs a unit, a longer advance two
                total = np.where((j == 1) & (c < 1) | (j >= 2) & (c < 2), inf, total)
            best = np.argmin(total, axis=1)
            rows = np.arange(len(best))
            cost[a[:, 0], a[:, 0] + length, c] = total[rows, best]
            advance[a[:, 0], a[:, 0] + length, c] = a[:, 0] + best + 1
    return Table(cost, advance, weighted=True)


def host_positions(states: int, slots: int, step_us: float, copy_us: float,
                   units: bool = False) -> tuple:
    """Host checkpoints for a chain of ``states`` states with ``slots`` device slots (with
    ``units``: that many units) when a step takes ``step_us`` and a copy ``copy_us``
    (each way, not overlapped): the
    positions ``q`` minimising the copies (``2·copy_us`` each) and each stretch's forward
    steps reversed from the checkpoint below it (which takes a slot; the root does not),
    the last stretch's first advance being the sweep. A dynamic program over the last
    host checkpoint below each position; ``()`` when none pays."""
    inf = float("inf")
    table = (units_table if units else revolve_table)(states, max(1, slots))[0]

    def steps(n: int, base: int) -> float:
        free = slots if base == 0 else slots - 1
        return inf if free < 0 or table[n, free] >= UNREACHABLE else float(table[n, free])

    best = [0.0] * (states + 1)  # best[p]: states 1..p-1 delivered below checkpoint p
    below = [0] * (states + 1)
    for p in range(1, states + 1):
        options = [(best[q] + (2 * copy_us if q else 0.0) + steps(p - q - 1, q) * step_us, q)
                   for q in range(p)]
        best[p], below[p] = min(options)
    total, last = min((best[q] + (2 * copy_us if q else 0.0)
                       + (steps(states - q, q) - (states - q)) * step_us, q)
                      for q in range(states + 1))
    placed = []
    while last:
        placed.append(last)
        last = below[last]
    return tuple(sorted(placed)) if total < inf else ()


def host_cost_us(states: int, slots: int, host: tuple, step_us: float, copy_us: float,
                 units: bool = False) -> float:
    """The time :func:`host_positions` minimises, for the host checkpoints ``host``: their
    copies and each stretch's forward steps (the last stretch's first advance, the sweep,
    free)."""
    table = (units_table if units else revolve_table)(states, max(1, slots))[0]
    bases = [0, *sorted(host)]
    total = 2 * copy_us * len(host)
    for i, base in enumerate(bases):
        top = bases[i + 1] - 1 if i + 1 < len(bases) else states
        free = slots if base == 0 else slots - 1
        n = top - base
        if n and (free < 0 or table[n, free] >= UNREACHABLE):
            return float("inf")
        steps = float(table[n, free]) if n else 0.0
        total += (steps - n if i + 1 == len(bases) else steps) * step_us
    return total


@lru_cache(maxsize=4)
def weighted_for(step_us: tuple, units: bool) -> Table:
    """The weighted table of every count up to the chain's length (solved once per
    schedule search: its builds ask for it again and again)."""
    return weighted_table(step_us, len(step_us), units)


def state_us(trace, chain, cost) -> tuple | None:
    """Each state of ``chain`` (:class:`~.chain.Chain`): the time its buffers' and links' ops
    take on ``cost``; ``None`` when the chain is longer than :data:`WEIGHTED_MAX_STATES` or
    no step takes :data:`TIMED_SPREAD` times another's (measured op times are noisy: steps
    nearer than that are taken as alike)."""
    if not 2 <= len(chain.states) <= WEIGHTED_MAX_STATES:
        return None
    op_us = cost.op_times(trace)
    times = tuple(math.fsum(float(op_us[trace.buffer(y).recompute.op])
                            for b in x.buffers if x.recomputable
                            for y in (*b.links, b.buffer_id)) for x in chain.states)
    return times if max(times) >= TIMED_SPREAD * min(times) else None


__all__ = ["TIMED_SPREAD", "UNREACHABLE", "WEIGHTED_MAX_STATES", "Table", "forward_steps",
           "host_cost_us", "host_positions", "least_units", "revolve_table", "state_us",
           "units_table", "weighted_for", "weighted_table"]
