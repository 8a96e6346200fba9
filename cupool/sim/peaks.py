"""The several-peaks bound: whole buffers, off at several ops at once, one link.

A lower bound on the iteration time ``T`` of any valid plan that sees what the per-op bound
of :mod:`cupool.sim.bounds` cannot, because it bounds each op alone and relaxes buffers to
fractions: a copy in holds its whole buffer from its start, so a buffer off the device at
an op waits for all of its copy after that op; and a buffer kept off the device at one op
but needed soon after another is copied in once per iteration, counted once for both. A
step that streams its weights through several equal peaks (a transformer's MLP
activations, block after block) keeps the weights it needs right after each peak on the
device there, or waits for them; the other peaks pay for streaming those.

**The argument.** Take a set of ops ``i`` with excess ``X_i > 0`` (pending bytes above the
budget, :mod:`cupool.sim.bounds`). At each, the candidates (pending, neither used by ``i``
nor born at it) off the device hold at least ``X_i`` bytes, each entirely (a copy still in
flight at ``i`` holds its bytes). In one simulated iteration, let ``g_t >= 0`` be the time
the compute stream spends before op ``t`` on anything but ops (waiting, or recomputing),
so ``T >= ideal + sum g``. Write ``z_ij = 1`` when candidate ``j`` is off the device at
``i`` and comes back by a copy in, ``w_ij = 1`` when by a recompute. If ``j``'s next use
``u`` comes later in the iteration, it is back before op ``u`` starts:

- a copy in, issued after op ``i`` ended, runs on one of the ``k`` H2D engines for ``a_j``
  at least (latency plus bytes over bandwidth) inside the window from the end of op ``i``
  to the start of op ``u``: the op time between them (``span``) plus the gaps ``g_t``,
  ``i < t <= u``. All the copies due by ``u`` fit ``k`` windows, and each one window, so
  the gaps hold ``(a_j - span) * z_ij`` (true for ``z_ij`` in {0, 1});
- a recompute runs in the gaps of that window.

If ``j`` is not used again in the iteration (a persistent buffer after its last use), it
began the iteration off the device (``h_j = 1``: its copy in landed before its first use
``f``, on engines that start the iteration idle, so all such copies due by ``f`` fit ``k``
times the time to the start of op ``f``), or its copy in runs after op ``i`` and before
the iteration ends. A buffer off anywhere is copied in (``y_j = 1``) or recomputed
(``v_j = 1``) at least once in the iteration, however many peaks it is off at; a temporary
one copied in was copied out first (its producer wrote it in this iteration). So the H2D
copies take at most ``k T``, the D2H ones at most ``k T``, the recomputes at most the gaps.

Every valid plan gives values in {0, 1} meeting all these rows; allowing fractions only
lowers the least ``T`` they admit, which is a linear program (HiGHS, extra ``bound``), taken
off by the relative :data:`TOLERANCE` for HiGHS' feasibility tolerance. The rows above are
what make it tighter than the per-op relaxation: a candidate whose copy does not fit its
window pays its wait in proportion to how much of it is off, where a fraction of a copy
would fit for free.

What it ignores (so it may be loose): ops outside the chosen set; when each copy out runs;
copies in before the chosen ops; a buffer off twice with a use between (counted once);
fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.sim.cost import D2H, H2D, CostModel

PEAK_OPS = 12
"""Ops the program states its rows for (:func:`choose_peaks`)."""

MAX_COLUMNS = 20_000
"""No bound (``None``) when the candidates at the chosen ops would need more columns."""

METHOD = "highs-ipm"
"""HiGHS' interior point method (with crossover): several times faster than its simplex
on the larger programs, the same optimum."""

TOLERANCE = 1e-6
"""Relative amount taken off the program's optimum (HiGHS meets its constraints to ~1e-7)."""


@dataclass(frozen=True)
class Peak:
    """One chosen op: ``op``; ``excess`` bytes that must be off the device there; the
    ``candidates`` (buffer indices) that may be, and each one's ``next_use`` after ``op``
    (the number of ops when none)."""

    op: int
    excess: float
    candidates: np.ndarray
    next_use: np.ndarray


def choose_peaks(excess: np.ndarray) -> list[int]:
    """The ops to state rows for: those with positive excess at least their neighbours'
    (a run of ops under one peak adds little but columns), most excess first (earliest
    first among equals), :data:`PEAK_OPS` at most."""
    excess = np.asarray(excess, dtype=np.float64)
    padded = np.concatenate([[-np.inf], excess, [-np.inf]])
    top = (excess > 0) & (excess >= padded[:-2]) & (excess >= padded[2:])
    ops = np.flatnonzero(top)
    order = np.argsort(-excess[ops], kind="stable")
    return [int(i) for i in ops[order][:PEAK_OPS]]


class _Rows:
    """Sparse rows ``sum(values * x[columns]) <= bound``, columns allocated in blocks, each
    column in ``[0, its upper bound]``."""

    def __init__(self):
        self.upper: list[np.ndarray] = []
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []
        self.bounds: list[float] = []
        self.columns = 0

    def block(self, count: int, upper=np.inf) -> int:
        """The first of ``count`` new columns, bounded above by ``upper`` (a scalar or an
        array of ``count``)."""
        first = self.columns
        self.columns += count
        self.upper.append(np.broadcast_to(np.asarray(upper, dtype=np.float64), count))
        return first

    def add(self, columns, values, bound: float) -> None:
        columns = np.asarray(columns, dtype=np.int64)
        values = np.broadcast_to(np.asarray(values, dtype=np.float64), columns.shape)
        self.rows.append(np.full(len(columns), len(self.bounds), dtype=np.int64))
        self.cols.append(columns)
        self.vals.append(values)
        self.bounds.append(float(bound))

    def each(self, columns: list, values: list, bound) -> None:
        """One row per element: ``sum over c of values[c] * x[columns[c]] <= bound``
        (``columns`` arrays of equal length, ``values`` scalars or arrays like them)."""
        count = len(columns[0])
        start = len(self.bounds)
        index = np.arange(start, start + count, dtype=np.int64)
        self.rows.append(np.repeat(index, len(columns)))
        self.cols.append(np.column_stack([np.asarray(c, dtype=np.int64) for c in columns])
                         .ravel())
        self.vals.append(np.column_stack([np.broadcast_to(np.asarray(v, dtype=np.float64),
                                                          count) for v in values]).ravel())
        self.bounds.extend(np.broadcast_to(np.asarray(bound, dtype=np.float64), count))

    def running(self, group, columns, values, totals) -> None:
        """One row per running total ``r``: ``totals[r - 1] + sum over group == r of
        values * x[columns] <= totals[r]`` (``totals[-1]`` is 0)."""
        count = len(totals)
        start = len(self.bounds)
        totals = np.asarray(totals, dtype=np.int64)
        self.rows.append(np.concatenate([start + np.asarray(group, dtype=np.int64),
                                         start + np.arange(count),
                                         start + np.arange(1, count)]))
        self.cols.append(np.concatenate([np.asarray(columns, dtype=np.int64), totals,
                                         totals[:-1]]))
        self.vals.append(np.concatenate([
            np.broadcast_to(np.asarray(values, dtype=np.float64), len(group)),
            -np.ones(count), np.ones(count - 1)]))
        self.bounds.extend([0.0] * count)

    def matrix(self):
        from scipy.sparse import coo_matrix
        return coo_matrix((np.concatenate(self.vals),
                           (np.concatenate(self.rows), np.concatenate(self.cols))),
                          shape=(len(self.bounds), self.columns)).tocsr()


def several_peaks_bound_us(trace: Trace, cost: CostModel, op_us, redo_us: np.ndarray,
                           peaks: list[Peak], above_us: float) -> float | None:
    """The least iteration time the program of the module docstring allows, when it is
    above ``above_us``; ``None`` when it proves nothing more (or SciPy is missing, or the
    program would have more than :data:`MAX_COLUMNS` columns). ``redo_us``: each buffer's
    recompute time (``inf`` without a recipe)."""
    try:
        from scipy.optimize import linprog
    except ImportError:
        return None
    peaks = [p for p in peaks if p.excess > 0 and len(p.candidates)]
    if not peaks or sum(3 * len(p.candidates) for p in peaks) > MAX_COLUMNS:
        return None
    op_us = np.asarray(op_us, dtype=np.float64)
    n = len(op_us)
    prefix = np.concatenate([[0.0], np.cumsum(op_us)])
    ideal = float(prefix[-1])
    k = cost.copy_engines_per_direction
    buffers = trace.buffers
    involved = np.unique(np.concatenate([p.candidates for p in peaks]))
    count = len(involved)
    sizes = np.array([buffers[j].size for j in involved], dtype=np.int64)
    copy_in = np.array([cost.fastest_copy_us(int(s), H2D) for s in sizes])
    temporary = np.array([buffers[j].kind != PERSISTENT for j in involved])
    copy_out = np.array([cost.fastest_copy_us(int(s), D2H) if t else 0.0
                         for s, t in zip(sizes, temporary, strict=True)])
    redo = np.asarray(redo_us, dtype=np.float64)[involved]
    # a persistent buffer without uses is never needed on the device: off for free
    needed = np.array([bool(buffers[j].uses) or buffers[j].kind != PERSISTENT
                       for j in involved])
    first_use = np.array([min(buffers[j].uses) if buffers[j].uses else n for j in involved])

    # the gaps as running totals: G[c] is the time the compute stream spent off ops
    # before op cuts[c] started; the gaps before ops a .. b are G[b + 1] - G[a]
    cuts = {0, n}
    for p in peaks:
        cuts.add(p.op + 1)
        cuts.update((np.asarray(p.next_use)[np.asarray(p.next_use) < n] + 1).tolist())
    cuts.update((first_use[first_use < n] + 1).tolist())
    cuts = np.array(sorted(cuts), dtype=np.int64)
    rows = _Rows()
    t_col = rows.block(1)
    g0 = rows.block(len(cuts), np.concatenate([[0.0], np.full(len(cuts) - 1, np.inf)]))
    steps = g0 + np.arange(len(cuts))
    rows.each([steps[:-1], steps[1:]], [1.0, -1.0], 0.0)  # every gap >= 0

    def total(op) -> np.ndarray:
        """The running-total columns at ``op`` (the gaps before ops ``0 .. op - 1``)."""
        return g0 + np.searchsorted(cuts, op)

    y0 = rows.block(count, 1.0)  # copied in at least once
    v0 = rows.block(count, 1.0)  # recomputed at least once
    h0 = rows.block(count, 1.0)  # began the iteration off the device

    def in_order(columns, values, due, window_columns, scale, windows):
        """Rows ``sum over due <= u of values * x[columns] <= scale * (windows[u] + the
        gaps of window u)`` for every distinct ``due`` op ``u``, through running totals
        (``window_columns``: the start and end gap totals of each window)."""
        ops = np.unique(due)
        run0 = rows.block(len(ops))
        rows.running(np.searchsorted(ops, due), columns, values, run0 + np.arange(len(ops)))
        start, end = window_columns(ops)
        rows.each([run0 + np.arange(len(ops)), end, start], [1.0, -scale, scale],
                  scale * windows(ops))

    for p in peaks:
        m = len(p.candidates)
        local = np.searchsorted(involved, p.candidates)
        nxt = np.asarray(p.next_use)
        later = nxt < n
        can_redo = later & np.isfinite(redo[local])
        z0 = rows.block(m, 1.0)
        w0 = rows.block(m, can_redo.astype(np.float64))
        t0 = rows.block(m, (~later).astype(np.float64))
        z, w, t = z0 + np.arange(m), w0 + np.arange(m), t0 + np.arange(m)
        # X bytes off the device, each candidate by one means
        rows.add(np.concatenate([z, w]), -np.concatenate([sizes[local], sizes[local]]),
                 -p.excess)
        rows.each([z, w], [1.0, 1.0], 1.0)
        copied = needed[local]
        rows.each([z[copied], y0 + local[copied]], [1.0, -1.0], 0.0)
        rows.each([w, v0 + local], [1.0, -1.0], 0.0)
        # not used again: began the iteration off the device, or copied in after op i
        # and before the iteration ends
        done = np.flatnonzero(~later & copied)
        rows.each([z[done], h0 + local[done], t[done]], [1.0, -1.0, -1.0], 0.0)
        rows.add(np.concatenate([t[~later], [total(p.op + 1), t_col]]),
                 np.concatenate([copy_in[local[~later]], [k, -k]]),
                 -k * float(prefix[p.op + 1]))
        # the window from the end of op i to the start of each next use u
        ended = total(p.op + 1)

        def window_columns(ops, ended=ended):
            return np.full(len(ops), ended), total(ops + 1)

        def windows(ops, op=p.op):
            return prefix[ops] - prefix[op + 1]

        due = np.flatnonzero(later)
        if len(due):
            in_order(z[due], copy_in[local[due]], nxt[due], window_columns, float(k), windows)
        redo_due = np.flatnonzero(can_redo)
        if len(redo_due):
            in_order(w[redo_due], redo[local[redo_due]], nxt[redo_due], window_columns, 1.0,
                     lambda ops: np.zeros(len(ops)))
        # a copy that does not fit its window: the gaps hold the rest, per unit of z
        span = prefix[np.minimum(nxt, n)] - prefix[p.op + 1]
        short = np.flatnonzero(later & (copy_in[local] > span))
        rows.each([z[short], total(nxt[short] + 1), np.full(len(short), ended)],
                  [copy_in[local[short]] - span[short], -1.0, 1.0], 0.0)
    # copies in of buffers that began the iteration off the device, before first uses
    heads = np.flatnonzero(first_use < n)
    if len(heads):
        in_order(h0 + heads, copy_in[heads], first_use[heads],
                 lambda ops: (np.full(len(ops), g0), total(ops + 1)), float(k),
                 lambda ops: prefix[ops])
    ys = y0 + np.arange(count)
    rows.add(np.concatenate([ys, [t_col]]), np.concatenate([copy_in, [-k]]), 0.0)
    rows.add(np.concatenate([ys, [t_col]]), np.concatenate([copy_out, [-k]]), 0.0)
    rows.add(np.concatenate([v0 + np.arange(count), [g0 + len(cuts) - 1]]),
             np.concatenate([np.where(np.isfinite(redo), redo, 0.0), [-1.0]]), 0.0)
    rows.add(np.array([g0 + len(cuts) - 1, t_col]), np.array([1.0, -1.0]), -ideal)
    objective = np.zeros(rows.columns)
    objective[t_col] = 1.0
    bounds = np.column_stack([np.zeros(rows.columns), np.concatenate(rows.upper)])
    result = linprog(objective, A_ub=rows.matrix(), b_ub=np.array(rows.bounds), bounds=bounds,
                     method=METHOD)
    if result.status != 0:
        return None
    value = float(result.fun) * (1.0 - TOLERANCE)
    return value if value > above_us else None
