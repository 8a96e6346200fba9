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
"""

from __future__ import annotations

import numpy as np

UNREACHABLE = 1 << 40
"""``U(n, u)`` where no schedule fits ``u`` units."""

_TABLES: dict = {}  # (model, "largest"): (cost, advance) for the most states solved so far


def revolve_table(states: int, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """``(R, K)``: ``R[n, s]`` the fewest forward steps that deliver ``n`` states above a
    held one with ``s`` free slots, ``K[n, s]`` the advance that achieves it (module
    docstring), for ``0 <= n <= states`` and ``0 <= s <= slots`` (read-only views of one
    table per process, solved for every slot count up to the most states asked for)."""
    cost, advance = _TABLES.get(("slots", "largest"), (None, None))
    if cost is None or cost.shape[0] <= states:
        cost, advance = _solve(max(states, 2 * (cost.shape[0] - 1) if cost is not None
                                   else states))
        _TABLES[("slots", "largest")] = (cost, advance)
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
    cost, advance = _TABLES.get(("units", "largest"), (None, None))
    if cost is None or cost.shape[0] <= states:
        cost, advance = _solve_units(max(states, 2 * (cost.shape[0] - 1) if cost is not None
                                         else states))
        _TABLES[("units", "largest")] = (cost, advance)
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


__all__ = ["UNREACHABLE", "forward_steps", "least_units", "revolve_table", "units_table"]
