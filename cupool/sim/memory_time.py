"""The memory-time bound: the arena holds at most ``budget × T`` byte-microseconds.

A lower bound on the iteration time ``T`` of any valid plan that sees what the per-op
bound of :mod:`cupool.sim.bounds` cannot: a copy holds its whole buffer for as long as it
runs. Streaming weights through a tight budget pays for the copy in flight as well as
for the bytes the step must not hold; copies of large buffers cost more device memory
than small ones of the same total.

**The argument.** At any time of the simulated iteration (:mod:`cupool.sim.simulator`:
one iteration, from idle engines to the last op and the last copy), the bytes that hold
some buffer's data lie in disjoint ranges of the arena: a residency's range is its own
while it lasts, and a range being copied out is written again (by an op or a copy in)
only once that copy completed. So, with ``P_b`` the time buffer ``b``'s data is on the
device, summed over the iteration::

    sum over buffers of size_b * P_b  <=  budget * T

and each ``P_b`` has a lower bound whatever the plan does with ``b``:

- kept (on the device all along its life): a persistent buffer for all of ``T``; a
  temporary one from its producer's run to its last use's, at least the op times from
  its ``start`` to its last use (``span``);
- swapped: during its uses' runs (and its producer's), during the copy in that brings it
  back (the op due waits for it) and, when the step writes it, during the copy out that
  saved it (its bytes stay held until the copy completed; a copy out starts after the
  residency's last use): ``uses + copy in + copy out`` (a read-only buffer's host copy is
  always valid, so it has no copy out);
- recomputed: during its uses' runs, its producer's and the recompute's:
  ``uses + recompute``.

Each buffer is one of these (one copy in at least once it is off the device at all,
otherwise only recomputes), and a copy or a recompute uses a resource::

    T >= (copy in times) / k      T >= (copy out times) / k      T >= ideal + (recomputes)

(``k`` copy engines per direction). For a given ``T`` the largest total of
``size_b * (kept time - P_b)`` that those resources allow, relaxed to fractions of each
choice, is a linear program (HiGHS, extra ``bound``); when it falls short of what the
inequality above needs (``persistent bytes * T + sum of size_b * span_b - budget * T``),
no plan runs in ``T``. Feasibility only grows with ``T`` (whatever is feasible at ``T`` is
at ``T' > T``: every resource grows, and what is saved grows at least as fast as what is
needed), so bisection finds the least ``T`` the relaxation allows; the bound is the
largest ``T`` proved infeasible.

What it ignores (so it may be loose): when each byte is needed (the budget holds at every
instant, the bound only on average over the iteration: a brief peak counts for its
duration), and the order of the copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.sim.cost import D2H, H2D, CostModel

BISECTION_STEPS = 20
"""Halvings of the interval between an infeasible and a feasible ``T`` (it starts at most a
factor 2 wide: the bound is then within 1e-6 of the relaxation's, below it)."""

TOLERANCE = 1e-6
"""Relative margin by which the LP's best saving must fall short before a ``T`` counts as
infeasible (HiGHS meets its constraints to ~1e-7)."""

MAX_DOUBLINGS = 60
"""Doublings of ``T`` tried to find a feasible one (the bound is sound without one)."""


@dataclass(frozen=True)
class _Choices:
    """Per buffer: ``size``; ``persistent``; ``span`` (µs a kept temporary is at least on
    the device); the least time on the device when swapped (``swap_on``) or recomputed
    (``redo_on``, ``inf`` without a recipe); the copy times ``copy_in``, ``copy_out`` and
    the recompute's compute time ``redo``."""

    size: np.ndarray
    persistent: np.ndarray
    span: np.ndarray
    swap_on: np.ndarray
    redo_on: np.ndarray
    copy_in: np.ndarray
    copy_out: np.ndarray
    redo: np.ndarray


def _choices(trace: Trace, cost: CostModel, op_us: np.ndarray, redo_us: np.ndarray) -> _Choices:
    prefix = np.concatenate([[0.0], np.cumsum(op_us)])
    rows = []
    for index, b in enumerate(trace.buffers):
        persistent = b.kind == PERSISTENT
        on = set(b.uses) if persistent else set(b.uses) | {b.start}
        runs = math.fsum(float(op_us[u]) for u in on)
        last = max(on) if on else b.start
        span = math.inf if persistent else float(prefix[last + 1] - prefix[b.start])
        if persistent and not b.uses:  # never needed on the device: off at no cost
            rows.append((b.size, persistent, span, 0.0, math.inf, 0.0, 0.0, 0.0))
            continue
        written = not persistent or bool(b.write_ops)
        copy_in = cost.fastest_copy_us(b.size, H2D)
        copy_out = cost.fastest_copy_us(b.size, D2H) if written else 0.0
        redo_on = (runs + float(op_us[b.recompute.op]) if b.recompute is not None
                   and math.isfinite(redo_us[index]) else math.inf)
        rows.append((b.size, persistent, span, runs + copy_in + copy_out, redo_on,
                     copy_in, copy_out, float(redo_us[index])))
    table = np.array(rows, dtype=np.float64).reshape(-1, 8)
    return _Choices(table[:, 0], table[:, 1] > 0, *table[:, 2:].T)


def _best_saving(ch: _Choices, t_us: float, ideal_us: float, engines: int) -> float | None:
    """The most byte-µs the relaxation keeps off the device in an iteration of ``t_us``
    (``None``: HiGHS reported no optimum)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    kept = np.where(ch.persistent, t_us, ch.span)
    swap_gain = ch.size * np.maximum(kept - ch.swap_on, 0.0)
    redo_gain = ch.size * np.maximum(kept - ch.redo_on, 0.0)  # 0 without a recipe (inf)
    swaps = np.flatnonzero(swap_gain > 0)
    redos = np.flatnonzero(redo_gain > 0)
    if not len(swaps) and not len(redos):
        return 0.0
    ns, nr = len(swaps), len(redos)
    rows, cols, vals = [], [], []

    def add(row, columns, values):
        rows.extend([row] * len(columns))
        cols.extend(columns)
        vals.extend(values)

    add(0, range(ns), ch.copy_in[swaps])
    add(1, range(ns), ch.copy_out[swaps])
    add(2, range(ns, ns + nr), ch.redo[redos])
    rhs = [engines * t_us, engines * t_us, t_us - ideal_us]
    both = np.intersect1d(swaps, redos, assume_unique=True)
    swap_col = np.searchsorted(swaps, both)
    redo_col = ns + np.searchsorted(redos, both)
    for k, (a, b) in enumerate(zip(swap_col.tolist(), redo_col.tolist(), strict=True)):
        add(3 + k, [a, b], [1.0, 1.0])  # one choice per buffer
    rhs.extend([1.0] * len(both))
    matrix = coo_matrix((vals, (rows, cols)), shape=(len(rhs), ns + nr)).tocsr()
    gain = np.concatenate([swap_gain[swaps], redo_gain[redos]])
    result = linprog(-gain, A_ub=matrix, b_ub=np.array(rhs), bounds=(0.0, 1.0),
                     method="highs")
    if result.status != 0:
        return None
    return -float(result.fun)


def memory_time_bound_us(trace: Trace, budget_bytes: int, cost: CostModel, op_us,
                         redo_us: np.ndarray, above_us: float) -> float | None:
    """The largest iteration time above ``above_us`` that the memory-time argument (module
    docstring) proves no valid plan within ``budget_bytes`` reaches, or ``None`` when it
    proves none (or SciPy is missing). ``redo_us``: each buffer's recompute time
    (:func:`cupool.sim.bound_inputs.recompute_us`, ``inf`` without a recipe)."""
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        return None
    op_us = np.asarray(op_us, dtype=np.float64)
    ideal = math.fsum(op_us)
    ch = _choices(trace, cost, op_us, redo_us)
    persistent_bytes = float(ch.size[ch.persistent].sum())
    kept_temporary = float(np.dot(ch.size[~ch.persistent], ch.span[~ch.persistent]))
    engines = cost.copy_engines_per_direction

    def infeasible(t_us: float) -> bool:
        need = (persistent_bytes - budget_bytes) * t_us + kept_temporary
        saving = _best_saving(ch, t_us, ideal, engines)
        return saving is not None and saving * (1.0 + TOLERANCE) < need

    low = max(above_us, ideal)
    if low <= 0 or not infeasible(low):
        return None
    high = 2.0 * low
    for _ in range(MAX_DOUBLINGS):
        if not infeasible(high):
            break
        low, high = high, 2.0 * high
    else:
        return low
    for _ in range(BISECTION_STEPS):
        middle = 0.5 * (low + high)
        if infeasible(middle):
            low = middle
        else:
            high = middle
    return low
