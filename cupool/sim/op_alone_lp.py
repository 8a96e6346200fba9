"""The overhead lower bound of one op alone, solved exactly: the relaxation of
:mod:`cupool.sim.op_alone` as a linear program (SciPy's HiGHS).

With SciPy installed (extra ``bound``), the relaxation of the :data:`LP_OPS` ops with the
most excess (and of the op the dual search chose) is also solved as a linear program
(HiGHS): every inequality of :mod:`cupool.sim.op_alone` at once -- the start of op ``i``
after ``P``, after the copies in before it and after each release threshold's copies out;
the time after op ``i`` after ``S + R`` and after ``Ha``, a recompute's chain
(:mod:`cupool.sim.op_alone`) split between the start of op ``i`` and the time after it;
``T`` after both plus ``d`` and after each tail row -- with the fractional choice of
options per candidate as variables.
Its optimum is the relaxation's least ``T``, so at least every dual value; it is taken off
by ``LP_TOLERANCE`` (relative) for HiGHS' feasibility tolerance, and the bound is the best
of both (``details["method"]``: ``"lp"`` or ``"dual"``).

The LP also states what happens after op ``i`` *in order*. A copy in issued after op ``i``
ended lands before the op that uses the buffer next starts, and the ops from there on run
after it; a copy out in the tail is issued only once the buffer's last write ended::

    start(u) >= end(i) + (H2D time of the copies in after op i due at u or before) / k
    T        >= start(u) + (op time from u to the end)
    end(t-1) >= start(u) + (op time from u to t - 1)                 for u < t
    end(t-1) >= end(i) + (op time from i + 1 to t - 1) + (recomputes due before t)
    T        >= end(t-1) + (tail D2H time released at t or later) / k

(a copy in whose bytes fit beside what op ``i`` holds may start while op ``i`` runs: it
is left out of the rows from ``end(i)`` and counted in the same rows from ``start(i)``)

for ``u`` among :data:`LP_DUE_OPS` byte quantiles of the candidates' next uses (of those
offloaded across the boundary, and of all) and ``t`` among the tail copies' releases
after ``i``. Optimizer state used once per step is the case it is for: off the device at
a mid-step peak, it is copied in after the peak, updated, and copied out after the update
(or copied out before the peak, when it stayed on the device across the boundary): the
step runs both copies in turn, where the dual search's weighted sums let them overlap.

**Whole buffers.** A plan moves whole buffers: one off the device at op ``i`` is off
entirely, and its next residency is entered one way (a swap-in or a recompute), so of its
options exactly one holds all of its bytes, or none does. Fractions let the program copy
part of a large buffer while the compute before op ``i`` hides it and recompute the rest
after, a plan no schedule has. Where one of at most :data:`MILP_CANDIDATES` candidates
holds a tenth of the excess or more, the :data:`WHOLE_BUFFERS` largest take their options
whole (a mixed-integer program, HiGHS' branch and bound, at most :data:`MILP_SECONDS`);
it states only what every plan satisfies, so its optimum is still a bound, and the
solver's proven bound on it is used (:mod:`cupool.sim.highs`).
"""

from __future__ import annotations

import numpy as np

from cupool.sim.highs import milp_dual_bound
from cupool.sim.op_alone import OpBound

LP_OPS = 12
"""Ops (most excess first, plus the one the dual search chose) whose relaxation is also
solved exactly as a linear program when SciPy is installed."""
LP_TOLERANCE = 1e-6
"""Relative amount taken off an LP optimum (HiGHS meets its constraints to ~1e-7)."""
LP_THRESHOLDS = 8
"""Release thresholds (byte quantiles) the LP states its copy-out rows for."""
LP_DUE_OPS = 8
"""Ops (byte quantiles of next uses) the LP states its in-order rows for, per kind."""


WHOLE_BUFFERS = 12
"""The largest candidates whose options the program takes whole (0 or 1 of the buffer)."""
MILP_CANDIDATES = 200
"""Ops with more candidates keep the fractional program (the integral one gained nothing on
the training traces of over a thousand buffers, and cost seconds there)."""
MILP_SECONDS = 2.0
"""HiGHS' time limit for one op's program with whole buffers; past it, its proven bound."""


def _whole_candidates(sizes, need: float, whole: int) -> np.ndarray:
    """The ``whole`` largest candidates, when there are at most :data:`MILP_CANDIDATES`
    and the largest holds a tenth of ``need`` or more (smaller ones barely move the
    fractional optimum)."""
    if (whole <= 0 or not len(sizes) or len(sizes) > MILP_CANDIDATES
            or sizes.max() < 0.1 * need):
        return np.zeros(0, dtype=np.int64)
    return np.argsort(-sizes, kind="stable")[:whole]


def _due_ops(next_use, sizes, tail) -> list[int]:
    """The ops ``u`` the LP states "op ``u`` starts after the copies in due by it" for
    (any set is sound; more only tightens): the next uses of the candidates offloaded
    across the boundary (``tail``), whose copies in and out the step runs in turn, and
    byte quantiles of every candidate's next use, :data:`LP_DUE_OPS` of each at most."""
    if not len(next_use):
        return []
    ops = set()
    for chosen, weights in ((next_use[tail], sizes[tail]), (next_use, sizes)):
        if not len(chosen):
            continue
        order = np.argsort(chosen, kind="stable")
        cumulative = np.cumsum(weights[order])
        picks = np.searchsorted(cumulative, cumulative[-1] * np.linspace(0, 1, LP_DUE_OPS))
        ops |= {int(chosen[order][min(k, len(order) - 1)]) for k in picks}
    return sorted(ops)


def lp_value(ob: OpBound, prefix, whole: int = 0) -> float | None:
    """The exact minimum of op ``ob.i``'s relaxation (module docstring: every inequality
    at once, instead of the weighted sums the dual search mixes them by), or ``None`` when
    SciPy is missing or HiGHS does not report an optimum. Variables: bytes of each
    candidate recomputed (``r``), copied in before op i (``e``), copied in after it
    (``l``), copied in after it having been copied out in this iteration's head (``h``:
    a persistent buffer kept across the boundary, charged before op i instead of in the
    tail); ``A`` the start of op i, ``B`` the time after it, ``T`` the iteration."""
    try:
        from scipy.optimize import linprog
        from scipy.sparse import coo_matrix, diags
    except ImportError:
        return None
    m = len(ob.sizes)
    if m == 0:
        return None
    r_, e_, l_, h_ = 0, m, 2 * m, 3 * m
    a_col, b_col, t_col = 4 * m, 4 * m + 1, 4 * m + 2
    redo_ok = ob.used_later & ob.can_redo
    early_ok = ~ob.used_later
    tails = ob.tail > 0
    rec = np.where(redo_ok, ob.recompute_own, 0.0)
    chain = np.where(redo_ok, ob.recompute_chain, 0.0)
    rec_all = rec + chain
    j = np.arange(m)
    rows, cols, vals, rhs = [], [], [], []

    def add(columns, values, bound):
        row = len(rhs)
        rows.extend([row] * len(columns))
        cols.extend(columns)
        vals.extend(values)
        rhs.append(bound)

    add(list(range(4 * m)), [-1.0] * (4 * m), -ob.need)  # X bytes off the device
    first = len(rhs)  # each byte once: r_k + e_k + l_k + h_k <= s_k, one row per candidate
    rows.extend(np.repeat(np.arange(first, first + m), 4).tolist())
    cols.extend(np.column_stack([r_ + j, e_ + j, l_ + j, h_ + j]).ravel().tolist())
    vals.extend([1.0] * (4 * m))
    rhs.extend(ob.sizes.astype(float).tolist())
    add([*(e_ + j), a_col], [*ob.copy, -1.0], 0.0)  # copies landed before op i
    out = ob.out > 0
    released = ob.released[out]
    thresholds = {0}
    if out.any():
        thresholds |= {int(x) for x in np.quantile(released, np.linspace(0, 1, LP_THRESHOLDS),
                                                   method="lower")}
    heads = ob.head_ok
    if heads.any():
        thresholds.add(1)
        add([*(h_ + j[heads])], [1.0] * int(heads.sum()), ob.head_room)  # resident at op 0
    for th in sorted(thresholds):  # copies out released at th or later, before op i
        sel = j[out & (ob.released >= th)]
        head = j[heads] if th <= 1 else j[:0]  # a head copy out starts after op 0
        add([*(e_ + sel), *(l_ + sel), *(h_ + head), a_col],
            [*ob.out[sel], *ob.out[sel], *ob.tail[head], -1.0], -float(prefix[th]))
    # the recomputes' chains run before op i (cb) or after it (ca)
    cb_col, ca_col = 4 * m + 3, 4 * m + 4
    add([*j, cb_col, ca_col], [*chain, -1.0, -1.0], 0.0)
    add([cb_col, a_col], [1.0, -1.0], -ob.before)  # compute before op i
    add([*j, ca_col, b_col], [*rec, 1.0, -1.0], -ob.after)  # compute after op i
    # copies in after op i: those that cannot start while it runs wait for its end, the
    # others (their bytes fit beside what op i holds) for its start
    after = j[~ob.during]
    add([*(l_ + after), *(h_ + after), b_col], [*ob.copy[after], *ob.copy[after], -1.0], 0.0)
    if ob.during.any():
        add([*(l_ + j), *(h_ + j), b_col], [*ob.copy, *ob.copy, -1.0], ob.here)
    add([a_col, b_col, t_col], [1.0, 1.0, -1.0], -ob.here)
    # after op i, in order: op u starts (F_u) only once the copies in that ops up to u
    # wait for have landed, issued after op i ended; the ops from u on follow it
    later = ob.used_later
    dues = _due_ops(ob.next_use[later], ob.sizes[later], ob.tail[later] > 0)
    extra = 2
    f_cols = {}
    for u in dues:
        f_cols[u] = 4 * m + 3 + extra
        extra += 1
        due = j[later & (ob.next_use <= u)]
        waiting = due[~ob.during[due]]
        add([*(l_ + waiting), *(h_ + waiting), a_col, f_cols[u]],
            [*ob.copy[waiting], *ob.copy[waiting], 1.0, -1.0], -ob.here)
        if ob.during[due].any():
            add([*(l_ + due), *(h_ + due), a_col, f_cols[u]],
                [*ob.copy[due], *ob.copy[due], 1.0, -1.0], 0.0)
        add([f_cols[u], t_col], [1.0, -1.0], -float(prefix[-1] - prefix[u]))
    for t in sorted({int(x) for x in ob.tail_released[tails]}):
        sel = j[tails & (ob.tail_released >= t)]
        if t <= ob.i:
            add([*(e_ + sel), *(l_ + sel), t_col],
                [*ob.tail[sel], *ob.tail[sel], -1.0], -float(prefix[t]))
            continue
        # op t - 1 ends (E_t) after op i, the ops between and the recomputes due before
        # t, and after op u (u < t) started and the ops from u ran; the tail copies out
        # released at t or later follow it
        e_col = 4 * m + 3 + extra
        extra += 1
        redo = j[redo_ok & (ob.next_use < t)]
        add([*redo, a_col, e_col], [*rec[redo], 1.0, -1.0],
            -(ob.here + float(prefix[t] - prefix[ob.i + 1])))
        # and after every op and recompute before t, the chains included
        add([*redo, e_col], [*rec_all[redo], -1.0], -float(prefix[t]))
        for u, f_col in f_cols.items():
            if u < t:
                add([f_col, e_col], [1.0, -1.0], -float(prefix[t] - prefix[u]))
        add([*(e_ + sel), *(l_ + sel), e_col, t_col],
            [*ob.tail[sel], *ob.tail[sel], 1.0, -1.0], 0.0)
    columns = 4 * m + 3 + extra
    upper = np.concatenate([np.where(redo_ok, ob.sizes, 0.0),
                            np.where(early_ok, ob.sizes, 0.0), ob.sizes,
                            np.where(heads, ob.sizes, 0.0),
                            np.full(3 + extra, np.inf)])
    lower = np.zeros(columns)
    lower[a_col] = ob.before
    lower[b_col] = ob.after
    objective = np.zeros(columns)
    objective[t_col] = 1.0
    matrix = coo_matrix((vals, (rows, cols)), shape=(len(rhs), columns)).tocsr()
    chosen = _whole_candidates(ob.sizes, ob.need, whole)
    if not len(chosen):
        result = linprog(objective, A_ub=matrix, b_ub=np.array(rhs),
                         bounds=np.column_stack([lower, upper]), method="highs")
        if result.status != 0:
            return None
        return float(result.fun) * (1.0 - LP_TOLERANCE)
    # each chosen candidate's options as whole-buffer switches: its columns rescaled from
    # bytes to the fraction of the buffer, and that fraction 0 or 1
    scale = np.ones(columns)
    integral = np.zeros(columns)
    for offset in (r_, e_, l_, h_):
        scale[offset + chosen] = ob.sizes[chosen]
        integral[offset + chosen] = 1
    matrix = matrix @ diags(scale)
    upper = np.where(integral > 0, np.minimum(upper / scale, 1.0), upper)
    dual = milp_dual_bound(objective, matrix, rhs, lower, upper, integral, MILP_SECONDS)
    if dual is None:
        return None
    return float(dual) * (1.0 - LP_TOLERANCE)


__all__ = ["LP_DUE_OPS", "LP_OPS", "LP_THRESHOLDS", "LP_TOLERANCE", "lp_value"]
