"""A sound lower bound on the overhead of any valid plan for a budget.

Sound means: no plan that passes :func:`cupool.check.validate_plan` for this
budget simulates (:func:`cupool.sim.simulate`, same cost model) with a smaller overhead.
The argument, for one op ``i`` (the bound is the best over all ops):

*Pending* buffers at ``i`` are those whose data must exist then: a persistent buffer
always (it carries data across iterations), a temporary one from its ``start`` to its
last use. A pending buffer must be *resident* at ``i`` when ``i`` uses it, or when it is
a temporary buffer born at ``i`` (its first residency starts there); if those bytes alone
exceed the budget, no plan exists: ``infeasible: op i needs N bytes resident``. Otherwise
``X = pending bytes - budget`` bytes (if positive) belong to buffers that are off the
device at ``i``. A buffer ``j`` (``s_j`` bytes) off the device at ``i`` is

- used again after ``i``: then its residency holding that use starts after ``i`` and is
  entered by a swap-in (an H2D copy of ``s_j`` bytes, issued at a dispatch after op ``i``
  ended) or a recompute (``r_j`` = its producer's duration on the compute stream, run
  after op ``i`` ended);
- not used again (only a persistent buffer offloaded across the iteration boundary, or
  one swapped back into a residency without uses): its H2D copy landed before its first
  use, so before op ``i`` started, or is issued after op ``i`` ended.

A temporary buffer off the device at ``i`` that comes back by a swap-in had its bytes
copied out *before op i started*: the simulator makes every op or swap-in that fills
overlapping bytes wait for that copy, so a copy still running at op ``i`` leaves its
bytes held (inside the arena, within the budget); only bytes whose copy completed (or
that are recomputed) are really off the device. The same holds for a persistent buffer
off the device after its first use. One that is off the device at ``i`` before its first
use either began the iteration on the host (offloaded across the boundary), so it is
copied out again after its last use ``l``, and the iteration cannot end before that copy
has::

    T >= start(t) + (D2H time of such copies issued after op t - 1) / k     for any op t

(a second bound, mixed in with a weight ``kappa``: ``T >= kappa * (the bound below) +
(1 - kappa) * this``, ``t`` at a few quantiles of the last uses), or it stayed on the
device across the boundary -- resident at op 0 beside the bytes op 0 must hold, so these
buffers fit ``budget - must(0)`` together -- and was copied out after op 0 and before op
``i``: a copy ``Db`` below pays for, and the tail does not.

With ``P`` and ``S`` the op time before and after ``i``, ``d`` op ``i``'s, ``k`` copy
engines per direction, ``Hb`` the H2D time before op ``i`` starts, ``Ha`` after it ends,
``Db`` the D2H time before op ``i`` starts and ``R`` the recompute time after it::

    T >= max(P, Hb / k, Db / k) + d + max(S + R, Ha / k)

(the compute stream cannot start op ``i`` before its predecessors ran nor before copies
that had to finish earlier -- every engine starts the iteration idle; after op ``i`` the
compute stream still has ``S + R`` to run and the H2D engines ``Ha``). A copy of ``s``
bytes costs ``a = latency + s / bandwidth``, so ``Ha``, ``Hb`` and ``Db`` are sums of
``a_j`` over the chosen buffers, ``R`` a sum of ``r_j``, and the chosen buffers must cover
``X`` bytes. The minimum of the right-hand side over all such choices, relaxed to
fractions of buffers (a relaxation only lowers the minimum), is a linear program; by weak
duality, for any ``mu, lam, split`` in ``[0, 1]``, with ``nu = (1-mu) split`` and
``rho = (1-mu)(1-split)``::

    T >= mu P + d + lam S + min over choices of (nu Hb / k + rho Db / k + lam R
                                                  + (1-lam) Ha / k)

because ``max(u, v, w) >= mu u + nu v + rho w``. For fixed weights the minimum is a
fractional knapsack (each byte of buffer ``j`` costs the cheapest of its options per
byte; take the cheapest ``X`` bytes), computed exactly. Every choice of weights gives a
valid bound, so searching them (golden section over ``mu`` and ``lam``, the dual is
concave; ``split`` 0, and 1 when some option lands before op ``i``) only tightens it and
never breaks soundness. The overhead bound is ``max(ideal, T_i) / ideal - 1``.

The tail rows also count recomputation: a buffer recomputed after op ``i`` runs on the
compute stream before its next use ``u_j``, so ``start(t) >= prefix(t) + sum of r_j over
u_j < t`` (for ``t > i``), and the copies out after op ``t`` come on top of that.

**Exact relaxation.** With SciPy installed (extra ``bound``), the relaxation of the
:data:`LP_OPS` ops with the most excess (and of the op the dual search chose) is also
solved as a linear program (HiGHS): every inequality above at once -- the start of op
``i`` after ``P``, after the copies in before it and after each release threshold's copies
out; the time after op ``i`` after ``S + R`` and after ``Ha``; ``T`` after both plus
``d`` and after each tail row -- with the fractional choice of options per candidate as
variables. Its optimum is the relaxation's least ``T``, so at least every dual value; it
is taken off by ``LP_TOLERANCE`` (relative) for HiGHS' feasibility tolerance, and the bound
is the best of both (``details["method"]``: ``"lp"`` or ``"dual"``).

The LP also states what happens after op ``i`` *in order*. A copy in issued after op ``i``
ended lands before the op that uses the buffer next starts, and the ops from there on run
after it; a copy out in the tail is issued only once the buffer's last write ended::

    start(u) >= end(i) + (H2D time of the copies in after op i due at u or before) / k
    T        >= start(u) + (op time from u to the end)
    end(t-1) >= start(u) + (op time from u to t - 1)                 for u < t
    end(t-1) >= end(i) + (op time from i + 1 to t - 1) + (recomputes due before t)
    T        >= end(t-1) + (tail D2H time released at t or later) / k

for ``u`` among :data:`LP_DUE_OPS` byte quantiles of the candidates' next uses (of those
offloaded across the boundary, and of all) and ``t`` among the tail copies' releases
after ``i``. Optimizer state used once per step is the case it is for: off the device at
a mid-step peak, it is copied in after the peak, updated, and copied out after the update
(or copied out before the peak, when it stayed on the device across the boundary): the
step runs both copies in turn, where the weighted sums above let them overlap.

A recompute's time ``r_j`` counts its producer plus a share of the inputs the program had
already freed (:func:`recompute_us`: those must be rematerialized too).

**Clean data.** Only a write makes a copy out necessary: a buffer's host copy stays valid
until the next op in its ``writes`` (every use when unknown), and clean data leaves the
device by a drop, without a copy. So the copies out above are charged for a temporary
buffer (its producer writes it) and for a persistent one written before op ``i`` (its
first write releases the copy); the tail copy for a persistent buffer offloaded across
the boundary is released by its last write, and a read-only persistent buffer
(``writes == []``) is charged no copy out at all. Without ``writes`` these are the uses,
as above.

**Memory-time.** Every op is bounded alone above, and a copy's bytes count only where
the copied buffer is off the device. :mod:`cupool.sim.memory_time` adds the whole
iteration's view: the arena holds ``budget * T`` byte-µs, and a copy in flight holds its
whole buffer for as long as it runs (streamed weights pay for their copies' memory as
well as for the deficit). With SciPy, its bound is taken when it is higher
(``details["method"] == "memory-time"``).

**Several peaks.** Each op is bounded alone above, with buffers relaxed to fractions.
:mod:`cupool.sim.peaks` states the ops of most excess together: a buffer off the device at
one of them is off whole and waits for all of its copy after it, and one off at several
is copied in once for all of them (a step streaming its weights through equal peaks keeps
the weights needed right after each peak there, and the other peaks pay for streaming
those). With SciPy, its bound is taken when it is higher (``details["method"] ==
"several-peaks"``).

What the bound ignores (so it may be loose): fragmentation (the arena must also pack),
when each copy out can start (after its buffer is produced), chains through inputs that
are alive but dropped by the plan, and most interactions between different ops'
evictions (each op is bounded alone, but for the few the several-peaks program states
together). A budget at or above the trace's lower bound gives 0: a
static plan fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from cupool.core.vocabulary import PERSISTENT, TEMPORARY, Trace
from cupool.errors import InputError
from cupool.sim.cost import D2H, H2D, CostModel, cost_model
from cupool.sim.memory_time import memory_time_bound_us
from cupool.sim.peaks import Peak, choose_peaks, several_peaks_bound_us

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0

THRESHOLD_QUANTILES = (0.25, 0.5, 0.75)
TAIL_QUANTILES = (0.0, 0.5, 0.9)
"""Release thresholds tried for the copies out (byte quantiles of when the candidates were
produced, besides op 0): each gives a valid bound, the best is kept."""


@dataclass(frozen=True)
class Bound:
    """``feasible`` is False only when no plan can exist (``overhead`` is then ``inf``);
    ``overhead`` is the lower bound (a fraction: 0.05 = 5%); ``reason`` says which op
    decided it; ``details`` holds the numbers (``op``, ``excess_bytes``,
    ``must_resident_bytes``, ``ideal_us``, ``bound_us``, ``mu``, ``lam``, ``ops_examined``)."""

    feasible: bool
    overhead: float
    reason: str
    details: dict = field(default_factory=dict, compare=False)


class _Buffers:
    """Per-buffer arrays for the per-op knapsacks."""

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
        per_byte_copy = 1.0 / (cost.gbps(H2D) * 1e3)
        self.copy_per_byte = per_byte_copy + cost.latency_us / self.size
        self.out_per_byte = 1.0 / (cost.gbps(D2H) * 1e3) + cost.latency_us / self.size
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


def _knapsack(costs, sizes, need):
    """Cheapest way to cover ``need`` bytes with fractions of items at ``costs`` per byte."""
    order = np.argsort(costs, kind="stable")
    c, s = costs[order], sizes[order]
    filled = np.cumsum(s)
    whole = int(np.searchsorted(filled, need, side="left"))
    total = float(np.dot(c[:whole], s[:whole])) if whole else 0.0
    before = float(filled[whole - 1]) if whole else 0.0
    if whole < len(c) and need > before:
        total += (need - before) * float(c[whole])
    return total


def _golden_max(function, evaluations=40):
    """Maximise a concave function on [0, 1]; returns the best ``(value, argument)`` seen
    (every value seen is a valid bound, so the search never needs to converge)."""
    best = max((function(0.0), 0.0), (function(1.0), 1.0))
    low, high = 0.0, 1.0
    a, b = high - _GOLDEN * (high - low), low + _GOLDEN * (high - low)
    fa, fb = function(a), function(b)
    for _ in range(evaluations):
        best = max(best, (fa, a), (fb, b))
        if fa < fb:
            low, a, fa = a, b, fb
            b = low + _GOLDEN * (high - low)
            fb = function(b)
        else:
            high, b, fb = b, a, fa
            a = high - _GOLDEN * (high - low)
            fa = function(a)
    return max(best, (fa, a), (fb, b))


class _OpBound:
    """The dual bound of one op ``i`` (module docstring) as a function of ``(mu, lam)``,
    and the primal value of the choice it makes (an upper bound on the best dual value,
    used to skip ops that cannot beat the best bound found so far)."""

    def __init__(self, arrays, prefix, op_us, engines, i, candidates, need, next_use=None,
                 head_room=0.0):
        self.i = i
        self.sizes = arrays.size[candidates]
        # the op before which a candidate recomputed after op i is back (its next use)
        self.next_use = (np.full(len(candidates), len(op_us)) if next_use is None
                         else np.asarray(next_use))
        self.copy = arrays.copy_per_byte[candidates] / engines
        # bytes off the device at op i that held data on the device earlier in the
        # iteration (a temporary buffer after it was produced, a persistent one after its
        # first use) were copied out before op i started; the copy starts after op
        # ``start`` (first use) ended
        persistent = arrays.persistent[candidates]
        first = arrays.first_use[candidates]
        written = arrays.first_write[candidates]
        out = arrays.out_per_byte[candidates] / engines
        written_before = ~persistent | ((written >= 0) & (written < i))
        self.out = np.where(written_before, out, 0.0)
        self.released = np.where(persistent, written + 1, arrays.start[candidates] + 1)
        # a persistent buffer off the device before its first write either began the
        # iteration on the host (offloaded across the boundary: it is copied out again
        # after its last write, and the iteration cannot end before that copy does) or
        # stayed on the device across the boundary and was copied out after op 0, before
        # op i (a copy the start of op i waits for); one never written -- read-only -- is
        # never copied out
        self.tail = np.where(persistent & (first > i) & (written > i), out, 0.0)
        # kept across the boundary, it was resident at op 0 beside what op 0 must hold,
        # and its copy out ran after op 0, so op i is a later one
        self.head_room = float(head_room)
        self.head_ok = (self.tail > 0) & (self.sizes <= self.head_room) & (i >= 1)
        self.tail_released = arrays.last_write[candidates] + 1
        tails = self.tail > 0
        self.tail_thresholds = sorted({int(t) for t in np.quantile(
            self.tail_released[tails], TAIL_QUANTILES, method="lower")}) if tails.any() else []
        self.prefix = prefix
        temporary = self.out > 0
        if temporary.any():
            order = np.argsort(self.released[temporary], kind="stable")
            weights = np.cumsum(self.sizes[temporary][order])
            picks = np.searchsorted(weights, weights[-1] * np.array(THRESHOLD_QUANTILES))
            picks = np.minimum(picks, len(order) - 1)
            self.thresholds = sorted({0, *(int(self.released[temporary][order][k])
                                           for k in picks)})
        else:
            self.thresholds = [0]
        self.threshold = 0
        self.kappa, self.tail_threshold = 1.0, 0
        recompute = arrays.recompute_per_byte[candidates]
        self.can_redo = ~np.isinf(recompute)
        self.recompute = np.where(self.can_redo, recompute, 0.0)
        self.used_later = arrays.last_use[candidates] > i
        self.has_early = bool((~self.used_later).any())
        self.before, self.here = prefix[i], op_us[i]
        self.after = prefix[-1] - prefix[i + 1]
        self.need = need

    def _costs(self, mu, lam, split=1.0):
        """Per-byte cost of each option: recompute after, copy before, copy after. The
        ``1 - mu`` weight of the start of op i is split between the H2D engines
        (``split``) and the D2H engines (the rest)."""
        nu, rho = (1.0 - mu) * split, (1.0 - mu) * (1.0 - split)
        out = np.where(self.released >= self.threshold, rho * self.out, 0.0)
        redo = np.where(self.used_later & self.can_redo, lam * self.recompute, np.inf)
        early = np.where(self.used_later, np.inf, nu * self.copy + out)
        late = (1.0 - lam) * self.copy + out
        return redo, early, late

    def value(self, mu, lam, split=1.0):
        redo, early, late = self._costs(mu, lam, split)
        rho = (1.0 - mu) * (1.0 - split)
        main = (mu * self.before + self.here + lam * self.after
                + rho * self.prefix[self.threshold])
        kappa = self.kappa
        if kappa == 1.0:
            costs = np.minimum.reduce((redo, early, late))
            return main + _knapsack(costs, self.sizes, self.need)
        # T >= kappa * (the bound above) + (1 - kappa) * (tail: op t's start plus the
        # copies out released at or after it)
        tail = (1.0 - kappa) * np.where(self.tail_released >= self.tail_threshold,
                                        self.tail, 0.0)
        # op t starts after the recomputes that bring buffers back before it
        before_t = (1.0 - kappa) * np.where(
            (self.next_use < self.tail_threshold) & (self.tail_threshold > self.i),
            self.recompute, 0.0)
        with np.errstate(invalid="ignore"):  # kappa 0 times an impossible option
            options = [np.where(np.isinf(c), np.inf, kappa * c) for c in (redo, early, late)]
        # or it stayed on the device across the boundary and was copied out in this
        # iteration, after op 0 and before op i: the start of op i pays, the tail does not
        rho = (1.0 - mu) * (1.0 - split)
        head_out = rho * self.tail if self.threshold <= 1 else 0.0
        head = np.where(self.head_ok, kappa * ((1.0 - lam) * self.copy + head_out), np.inf)
        costs = np.minimum.reduce((options[0] + before_t, options[1] + tail,
                                   options[2] + tail, head))
        return (kappa * main + (1.0 - kappa) * self.prefix[self.tail_threshold]
                + _knapsack(costs, self.sizes, self.need))

    def primal(self, mu, lam, split=1.0):
        """The iteration-time bound of the fractional choice the knapsack at (mu, lam,
        split) makes: an upper bound on every dual value of this op."""
        options = np.stack(self._costs(mu, lam, split))
        choice = np.argmin(options, axis=0)
        order = np.argsort(options.min(axis=0), kind="stable")
        taken = np.zeros_like(self.sizes)
        left = self.need
        for j in order:
            if left <= 0:
                break
            taken[j] = min(self.sizes[j], left)
            left -= taken[j]
        redo = float(np.dot(taken * self.recompute, choice == 0))
        early = float(np.dot(taken * self.copy, choice == 1))
        late = float(np.dot(taken * self.copy, choice == 2))
        late_out = (choice != 0) & (self.released >= self.threshold)
        out = self.prefix[self.threshold] + float(np.dot(taken * self.out, late_out))
        return max(self.before, early, out) + self.here + max(self.after + redo, late)

    def search(self):
        """The best ``(value, mu, lam, split)`` found: ``split`` 0 charges the start of op
        i to the D2H engines only, 1 to the H2D ones only (each a valid bound)."""
        best = (-np.inf, 1.0, 0.5, 0.0, 0)
        tries = [(0.0, t) for t in self.thresholds] + ([(1.0, 0)] if self.has_early else [])
        for split, threshold in tries:
            self.threshold = threshold
            best = max(best, (*self._search(split), split, threshold))
        self.threshold = best[4]
        _value, mu, lam, split, _threshold = best
        for tail_threshold in self.tail_thresholds:
            self.tail_threshold = tail_threshold

            def weighted(kappa, mu=mu, lam=lam, split=split):
                self.kappa = kappa
                return self.value(mu, lam, split)

            value, _kappa = _golden_max(weighted, 20)
            best = max(best, (value, mu, lam, split, self.threshold))
        self.kappa = 1.0
        return best

    def _search(self, split):
        """``(value, mu, lam)``: nested golden sections over ``mu`` and ``lam``."""
        def over_lam(mu, evaluations=12):
            return _golden_max(lambda lam: self.value(mu, lam, split), evaluations)

        value, mu = _golden_max(lambda mu: over_lam(mu)[0], 12)
        more, lam = over_lam(mu, 40)
        return max(value, more), mu, lam


LP_OPS = 12
"""Ops (most excess first, plus the one the dual search chose) whose relaxation is also
solved exactly as a linear program when SciPy is installed."""
LP_TOLERANCE = 1e-6
"""Relative amount taken off an LP optimum (HiGHS meets its constraints to ~1e-7)."""
LP_THRESHOLDS = 8
"""Release thresholds (byte quantiles) the LP states its copy-out rows for."""
LP_DUE_OPS = 8
"""Ops (byte quantiles of next uses) the LP states its in-order rows for, per kind."""


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


def _lp_value(ob: _OpBound, prefix) -> float | None:
    """The exact minimum of op ``ob.i``'s relaxation (module docstring: every inequality
    at once, instead of the weighted sums the dual search mixes them by), or ``None`` when
    SciPy is missing or HiGHS does not report an optimum. Variables: bytes of each
    candidate recomputed (``r``), copied in before op i (``e``), copied in after it
    (``l``), copied in after it having been copied out in this iteration's head (``h``:
    a persistent buffer kept across the boundary, charged before op i instead of in the
    tail); ``A`` the start of op i, ``B`` the time after it, ``T`` the iteration."""
    try:
        from scipy.optimize import linprog
        from scipy.sparse import coo_matrix
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
    rec = np.where(redo_ok, ob.recompute, 0.0)
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
    add([*j, b_col], [*rec, -1.0], -ob.after)  # compute after op i
    add([*(l_ + j), *(h_ + j), b_col], [*ob.copy, *ob.copy, -1.0], 0.0)  # copies in after op i
    add([a_col, b_col, t_col], [1.0, 1.0, -1.0], -ob.here)
    # after op i, in order: op u starts (F_u) only once the copies in that ops up to u
    # wait for have landed, issued after op i ended; the ops from u on follow it
    later = ob.used_later
    dues = _due_ops(ob.next_use[later], ob.sizes[later], ob.tail[later] > 0)
    extra = 0
    f_cols = {}
    for u in dues:
        f_cols[u] = 4 * m + 3 + extra
        extra += 1
        due = j[later & (ob.next_use <= u)]
        add([*(l_ + due), *(h_ + due), a_col, f_cols[u]],
            [*ob.copy[due], *ob.copy[due], 1.0, -1.0], -ob.here)
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
    result = linprog(objective, A_ub=matrix, b_ub=np.array(rhs),
                     bounds=np.column_stack([lower, upper]), method="highs")
    if result.status != 0:
        return None
    return float(result.fun) * (1.0 - LP_TOLERANCE)


def overhead_lower_bound(trace: Trace, budget_bytes: int, cost: CostModel | None = None,
                         max_ops: int | None = None) -> Bound:
    """A lower bound on the simulated overhead of every valid plan of ``trace`` within
    ``budget_bytes`` under ``cost`` (default Gen5); see the module docstring.

    ``max_ops`` limits how many ops (those with the largest excess first) get the full
    dual search; the bound stays sound (it is a maximum of valid bounds), only maybe looser.
    """
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 1:
        raise InputError(f"budget_bytes (={budget_bytes!r}) must be an integer >= 1")
    cost = cost or cost_model()
    n = trace.num_ops
    op_us = cost.op_times(trace)
    ideal = math.fsum(op_us)
    details = {"ideal_us": ideal, "budget_bytes": budget_bytes,
               "lower_bound_bytes": trace.lower_bound_bytes()}
    if budget_bytes >= details["lower_bound_bytes"]:
        return Bound(True, 0.0, f"the budget holds the trace's lower bound "
                                f"({details['lower_bound_bytes']} bytes): a static plan has "
                                f"no overhead", details)
    arrays = _Buffers(trace, cost)
    pending = np.zeros(n + 1)
    np.add.at(pending, arrays.pend_first, arrays.size)
    np.add.at(pending, arrays.pend_last + 1, -arrays.size)
    pending = np.cumsum(pending)[:n]
    must = [set(arrays.used_at[i]) | set(arrays.born_temporary[i]) for i in range(n)]
    for i in range(n):
        needed = int(sum(arrays.size[j] for j in must[i]))
        if needed > budget_bytes:
            details.update(op=i, must_resident_bytes=needed)
            return Bound(False, math.inf, f"infeasible: op {i} needs {needed} bytes resident "
                                          f"(budget {budget_bytes})", details)
    excess = pending - budget_bytes
    # a persistent buffer kept on the device across the boundary is resident at op 0
    head_room = budget_bytes - sum(float(arrays.size[j]) for j in must[0]) if n else 0.0
    ops = [i for i in np.argsort(-excess, kind="stable") if excess[i] > 0]
    if max_ops is not None:
        ops = ops[:max_ops]
    prefix = np.concatenate([[0.0], np.cumsum(op_us)])
    best = (ideal, None, 1.0, 0.5, 0.0)

    def candidates_at(i):
        """The buffers that may be off the device at op ``i``: pending, not needed there."""
        alive = (arrays.pend_first <= i) & (i <= arrays.pend_last)
        alive[list(must[i])] = False
        return np.flatnonzero(alive)

    def op_bound(i):
        candidates = candidates_at(i)
        return _OpBound(arrays, prefix, op_us, cost.copy_engines_per_direction, i,
                        candidates, float(excess[i]), arrays.next_uses(candidates, i),
                        head_room)

    for i in ops:
        i = int(i)
        bound = op_bound(i)
        if bound.primal(best[2], best[3], best[4]) <= best[0]:
            continue  # even a feasible choice here is no worse than the best bound so far
        value, mu, lam, split, _threshold = bound.search()
        if value > best[0]:
            best = (value, i, mu, lam, split)
    method = "dual"
    lp_ops = list(dict.fromkeys([int(i) for i in ops[:LP_OPS]]
                                + ([best[1]] if best[1] is not None else [])))
    for i in lp_ops:
        value = _lp_value(op_bound(i), prefix)
        if value is None:
            break
        method = "lp"
        if value > best[0]:
            best = (value, i, None, None, None)
    memory_time = memory_time_bound_us(trace, budget_bytes, cost, op_us,
                                       arrays.recompute, best[0])
    if memory_time is not None and memory_time > best[0]:
        best = (memory_time, None, None, None, None)
        method = "memory-time"
    peaks = []
    for i in choose_peaks(excess):
        candidates = candidates_at(i)
        peaks.append(Peak(int(i), float(excess[i]), candidates,
                          arrays.next_uses(candidates, int(i))))
    several = several_peaks_bound_us(trace, cost, op_us, arrays.recompute, peaks, best[0])
    if several is not None and several > best[0]:
        best = (several, None, None, None, None)
        method = "several-peaks"
    bound_us, op, mu, lam, _split = best
    overhead = max(0.0, bound_us / ideal - 1.0) if ideal > 0 else 0.0
    details.update(bound_us=bound_us, op=op, mu=mu, lam=lam, ops_examined=len(ops),
                   method=method, lp_ops=len(lp_ops) if method == "lp" else 0,
                   excess_bytes=None if op is None else int(excess[op]))
    if method == "memory-time":
        reason = (f"the arena holds {budget_bytes} bytes for the whole iteration: keeping "
                  f"what must be on the device there (copies in flight included) takes at "
                  f"least {bound_us - ideal:.1f} us beyond the ideal {ideal:.1f} us")
    elif method == "several-peaks":
        reason = (f"the {len(peaks)} ops with the most excess must each have whole buffers "
                  f"off the device, copied back after them over one link: at least "
                  f"{bound_us - ideal:.1f} us beyond the ideal {ideal:.1f} us")
    elif op is None:
        reason = "no op forces copies or recomputation beyond what overlaps compute"
    else:
        reason = (f"op {op} must have {int(excess[op])} bytes off the device; moving them "
                  f"back (link) or recomputing them takes at least {bound_us - ideal:.1f} us "
                  f"beyond the ideal {ideal:.1f} us")
    return Bound(True, overhead, reason, details)
