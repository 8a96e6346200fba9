"""The overhead lower bound of one op alone: a dual search over the ways op ``i``'s
excess delays the iteration.

At op ``i``, ``X`` bytes (its excess: pending bytes beyond the budget, module
:mod:`cupool.sim.bounds`) belong to buffers whose data is off the device when op ``i``
starts (neither there nor being copied in). A buffer ``j`` (``s_j`` bytes) off the device
then is

- used again after ``i``: then its data comes back by a swap-in (an H2D copy of ``s_j``
  bytes that starts after op ``i`` started; while op ``i`` runs only where ``s_j`` fits
  beside what op ``i`` holds, ``room``: a swap-in whose residency began at op ``i`` may
  have waited for the copy out of the bytes it lands in, which is how its data can be
  off the device then, else after op ``i`` ended) or a recompute (``r_j`` = its
  producer's duration on the compute stream, run after op ``i`` ended);
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
compute stream still has ``S + R`` to run and the H2D engines ``Ha``; where a copy in may
start while op ``i`` runs, ``T - start(i) >= max(d + S + R, d + Ha' / k, (Ha' + Hd) /
k)``, ``Ha'`` the copies that cannot and ``Hd`` those that do, weighted ``lam``, ``(1 -
lam)(1 - theta)`` and ``(1 - lam) theta`` below, ``theta`` in :data:`THETAS`). A copy of ``s``
bytes costs ``a = latency + s / bandwidth``, so ``Ha``, ``Hb`` and ``Db`` are sums of
``a_j`` over the chosen buffers, ``R`` a sum of ``r_j``, and the chosen buffers must cover
``X`` bytes. The minimum of the right-hand side over all such choices, relaxed to
fractions of buffers (a relaxation only lowers the minimum), is a linear program; by weak
duality, for any ``mu, lam, split`` in ``[0, 1]``, with ``nu = (1-mu) split`` and
``rho = (1-mu)(1-split)``::

    T >= mu P + d + lam S + min over choices of (nu Hb / k + rho Db / k + lam R
                                                  + (1-lam) Ha / k)

(a recompute's chain below is weighted ``min(mu, lam)`` instead of ``lam``)
because ``max(u, v, w) >= mu u + nu v + rho w``. For fixed weights the minimum is a
fractional knapsack (each byte of buffer ``j`` costs the cheapest of its options per
byte; take the cheapest ``X`` bytes), computed exactly. Every choice of weights gives a
valid bound, so searching them (golden section over ``mu`` and ``lam``, the dual is
concave; ``split`` 0, and 1 when some option lands before op ``i``) only tightens it and
never breaks soundness. The bound of the trace is the best ``T_i`` over the ops
examined.

**Recompute chains.** ``r_j`` is ``j``'s producer's time ``p_j`` plus a chain ``c_j``
(:meth:`~cupool.sim.bound_inputs.BufferArrays.chain_us`). A candidate recomputed for its
next use is recomputed before an op ``r >= i + 1``; each temporary input ``x`` of its
recipe with ``x.end <= i + 1`` is dead at ``r``, so the validator's [recompute] rule finds
it only in a rematerialization (a residency starting at ``r' >= x.end``, or ephemeral at
``r``), entered by a recompute of ``x`` before op ``r'``, whose own freed inputs recurse
(:func:`~cupool.sim.bound_inputs.remat_us`: those with ``y.end <= x.end``). ``c_j`` is
the sum of these inputs' charges, each split over its readers that charge it at op ``i``
(the candidates and the chains' rematerializations that read it,
:mod:`cupool.sim.chain_shares`): no chain buffer is a candidate (a candidate is alive and
unused at ``i``, so its ``end >= i + 2``), so over any
set of recomputed candidates the charges sum to at most the compute of the distinct
rematerializations they force. But ``r'`` may lie at or before ``i``: then that
rematerialization delays the start of op ``i`` instead of the time after it, and its
residency covers op ``i`` beside the pending bytes (a bound that ignores those bytes
stays sound). So the chain is weighted ``min(mu, lam)``, except the producer of an input
that cannot be rematerialized before op ``i``: one alive at op ``i`` (``x.end == i + 1``)
or one that does not fit beside what op ``i`` must hold (``room``); those run after op
``i``, like ``p_j``, and are weighted ``lam``. Every chain recompute precedes ``j``'s, so
the tail rows count all of ``r_j`` before ``u_j``.

The tail rows also count recomputation: a buffer recomputed after op ``i`` runs on the
compute stream before its next use ``u_j``, so ``start(t) >= prefix(t) + sum of r_j over
u_j < t`` (for ``t > i``), and the copies out after op ``t`` come on top of that.

**Clean data.** Only a write makes a copy out necessary: a buffer's host copy stays valid
until the next op in its ``writes`` (every use when unknown), and clean data leaves the
device by a drop, without a copy. So the copies out above are charged for a temporary
buffer (its producer writes it) and for a persistent one written before op ``i`` (its
first write releases the copy); the tail copy for a persistent buffer offloaded across
the boundary is released by its last write, and a read-only persistent buffer
(``writes == []``) is charged no copy out at all. Without ``writes`` these are the uses,
as above.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0

THETAS = (0.0, 1.0)
"""Weights tried for the copies in that may start while op ``i`` runs (each a valid
bound, :meth:`OpBound._parts`)."""
THRESHOLD_QUANTILES = (0.25, 0.5, 0.75)
TAIL_QUANTILES = (0.0, 0.5, 0.9)
"""Release thresholds tried for the copies out (byte quantiles of when the candidates were
produced, besides op 0): each gives a valid bound, the best is kept."""


def _knapsack(costs, sizes, need):
    """Cheapest way to cover ``need`` bytes with fractions of items at ``costs`` per byte
    (the costs of the whole items taken summed in order, as :func:`_knapsacks` does)."""
    order = np.argsort(costs, kind="stable")
    c, s = costs[order], sizes[order]
    filled = np.cumsum(s)
    whole = int(np.searchsorted(filled, need, side="left"))
    total = float(np.cumsum(c[:whole] * s[:whole])[-1]) if whole else 0.0
    before = float(filled[whole - 1]) if whole else 0.0
    if whole < len(c) and need > before:
        total += (need - before) * float(c[whole])
    return total


def _knapsacks(costs, sizes, need):
    """:func:`_knapsack` of each row of ``costs`` (lanes by items), to the last bit."""
    lanes, items = costs.shape
    if items == 0:
        return np.zeros(lanes)
    order = np.argsort(costs, axis=1, kind="stable")
    c, s = np.take_along_axis(costs, order, axis=1), sizes[order]
    filled = np.cumsum(s, axis=1)
    whole = (filled < need).sum(axis=1)
    rows, last = np.arange(lanes), np.maximum(whole - 1, 0)
    some = whole > 0
    total = np.where(some, np.cumsum(c * s, axis=1)[rows, last], 0.0)
    before = np.where(some, filled[rows, last], 0.0)
    partial = (whole < items) & (need > before)
    rest = (need - before) * c[rows, np.minimum(whole, items - 1)]
    return np.where(partial, total + rest, total)


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


def _golden_max_lanes(function, lanes, evaluations=40):
    """:func:`_golden_max` of ``lanes`` functions at once: ``function`` maps one argument
    per lane to one value per lane; each lane visits the points and keeps the best
    ``(value, argument)`` that :func:`_golden_max` would, to the last bit."""
    def keep(best_f, best_x, f, x):
        better = (f > best_f) | ((f == best_f) & (x > best_x))
        return np.where(better, f, best_f), np.where(better, x, best_x)

    zero, one = np.zeros(lanes), np.ones(lanes)
    best_f, best_x = keep(function(zero), zero, function(one), one)
    low, high = zero.copy(), one.copy()
    a, b = high - _GOLDEN * (high - low), low + _GOLDEN * (high - low)
    fa, fb = function(a), function(b)
    for _ in range(evaluations):
        best_f, best_x = keep(best_f, best_x, fa, a)
        best_f, best_x = keep(best_f, best_x, fb, b)
        up = fa < fb
        low, high = np.where(up, a, low), np.where(up, high, b)
        # the better inner point moves to the other's place; a fresh one fills the gap
        kept_x, kept_f = np.where(up, b, a), np.where(up, fb, fa)
        fresh = np.where(up, low + _GOLDEN * (high - low), high - _GOLDEN * (high - low))
        f_fresh = function(fresh)
        a, fa = np.where(up, kept_x, fresh), np.where(up, kept_f, f_fresh)
        b, fb = np.where(up, fresh, kept_x), np.where(up, f_fresh, kept_f)
    best_f, best_x = keep(best_f, best_x, fa, a)
    return keep(best_f, best_x, fb, b)


class OpBound:
    """The dual bound of one op ``i`` (module docstring) as a function of ``(mu, lam)``,
    and the primal value of the choice it makes (an upper bound on the best dual value,
    used to skip ops that cannot beat the best bound found so far)."""

    def __init__(self, arrays, prefix, op_us, engines, i, candidates, need, next_use=None,
                 head_room=0.0, room=np.inf):
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
        # a recompute after op i re-runs the producer (after op i) and rematerializes the
        # inputs freed by op i + 1 (before or after op i: the chain)
        late, chain = arrays.chain_us(candidates, i, room)
        own = arrays.producer_us[candidates] + late
        self.can_redo = ~np.isinf(own) & ~np.isinf(chain)
        self.recompute_own = np.where(self.can_redo, own, 0.0) / self.sizes
        self.recompute_chain = np.where(self.can_redo, chain, 0.0) / self.sizes
        self.recompute = self.recompute_own + self.recompute_chain
        self.used_later = arrays.last_use[candidates] > i
        self.has_early = bool((~self.used_later).any())
        # a copy in of a buffer whose bytes fit beside what op i holds may start while op
        # i runs (its data off the device when op i started: the copy started after)
        self.during = self.sizes <= room
        self.theta = 0.0
        self.before, self.here = prefix[i], op_us[i]
        self.after = prefix[-1] - prefix[i + 1]
        self.need = need

    def _parts(self, mu, lam, theta, split, threshold):
        """For lanes of weights (one ``mu``, ``lam``, ``theta``, ``split`` and release
        ``threshold`` each): the weighted op time of each, and each candidate's per-byte
        cost of each option -- recompute after, copy before, copy after. The ``1 - mu``
        weight of the start of op i is split between the H2D engines (``split``) and the
        D2H engines (the rest)."""
        nu, rho = (1.0 - mu) * split, (1.0 - mu) * (1.0 - split)
        out = np.where(self.released[None, :] >= threshold[:, None],
                       rho[:, None] * self.out, 0.0)
        redo = np.where(self.used_later & self.can_redo, lam[:, None] * self.recompute_own
                        + np.minimum(mu, lam)[:, None] * self.recompute_chain, np.inf)
        early = np.where(self.used_later, np.inf, nu[:, None] * self.copy + out)
        late = self._late(lam, theta) * self.copy + out
        # op i's weight: all of it, unless some copy in may start while it runs: then
        # 1 - theta (1 - lam) (T - start(i) >= max(d + S + R, d + Ha_after / k,
        # (Ha_after + Ha_during) / k), weighted lam, (1 - lam)(1 - theta), (1 - lam) theta)
        here = 1.0 - theta * (1.0 - lam) if self.during.any() else 1.0
        main = (mu * self.before + here * self.here + lam * self.after
                + rho * self.prefix[threshold])
        return main, redo, early, late

    def _one_lane(self, mu, lam, split=1.0):
        """:meth:`_parts` of one lane, at this op's ``theta`` and ``threshold``."""
        return tuple(part[0] for part in self._parts(
            np.array([mu]), np.array([lam]), np.array([self.theta]), np.array([split]),
            np.array([self.threshold])))

    def _late(self, lam, theta):
        """Each candidate's weight on its copy in after op i starts, per lane: ``1 - lam``
        where it cannot start before op i ends; ``theta (1 - lam)`` where it may start
        while op i runs (the weight ``(1 - lam)(1 - theta)`` of those copies is moved onto
        op i's own time, :meth:`_parts`)."""
        return np.where(self.during, (theta * (1.0 - lam))[:, None], (1.0 - lam)[:, None])

    def value(self, mu, lam, split=1.0):
        main, redo, early, late = self._one_lane(mu, lam, split)
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
        late_in = self._late(np.array([lam]), np.array([self.theta]))[0]
        head = np.where(self.head_ok, kappa * (late_in * self.copy + head_out), np.inf)
        costs = np.minimum.reduce((options[0] + before_t, options[1] + tail,
                                   options[2] + tail, head))
        return (kappa * main + (1.0 - kappa) * self.prefix[self.tail_threshold]
                + _knapsack(costs, self.sizes, self.need))

    def primal(self, mu, lam, split=1.0):
        """The iteration-time bound of the fractional choice the knapsack at (mu, lam,
        split) makes: an upper bound on every dual value of this op."""
        options = np.stack(self._one_lane(mu, lam, split)[1:])
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
        best = (-np.inf, 1.0, 0.5, 0.0, 0, 0.0)
        tries = [(0.0, t) for t in self.thresholds] + ([(1.0, 0)] if self.has_early else [])
        lanes = [_Lane(theta, split, threshold)
                 for theta in (THETAS if self.during.any() else (0.0,))
                 for split, threshold in tries]
        for lane, (value, mu, lam) in zip(lanes, self._search(lanes), strict=True):
            best = max(best, (value, mu, lam, lane.split, lane.threshold, lane.theta))
        self.threshold, self.theta = best[4], best[5]
        _value, mu, lam, split, _threshold, _theta = best
        for tail_threshold in self.tail_thresholds:
            self.tail_threshold = tail_threshold

            def weighted(kappa, mu=mu, lam=lam, split=split):
                self.kappa = kappa
                return self.value(mu, lam, split)

            value, _kappa = _golden_max(weighted, 20)
            best = max(best, (value, mu, lam, split, self.threshold, self.theta))
        self.kappa = 1.0
        return best[:5]

    def _search(self, lanes):
        """``(value, mu, lam)`` of each lane: nested golden sections over ``mu`` and
        ``lam``, all lanes at once."""
        values = self._lane_values(lanes)
        count = len(lanes)

        def over_lam(mu, evaluations=12):
            return _golden_max_lanes(lambda lam: values(mu, lam), count, evaluations)

        value, mu = _golden_max_lanes(lambda mu: over_lam(mu)[0], count, 12)
        more, lam = over_lam(mu, 40)
        value = np.where(more > value, more, value)
        return [(float(v), float(m), float(x)) for v, m, x in zip(value, mu, lam, strict=True)]

    def _lane_values(self, lanes):
        """The function ``(mu, lam) -> value`` of every lane at once (one ``mu`` and one
        ``lam`` per lane): :meth:`value` at ``kappa`` 1 with the lane's ``theta``, ``split``
        and ``threshold``, to the last bit."""
        theta = np.array([lane.theta for lane in lanes])
        split = np.array([lane.split for lane in lanes])
        threshold = np.array([lane.threshold for lane in lanes], dtype=np.int64)

        def values(mu, lam):
            main, redo, early, late = self._parts(mu, lam, theta, split, threshold)
            costs = np.minimum(np.minimum(redo, early), late)
            return main + _knapsacks(costs, self.sizes, self.need)

        return values


class _Lane(NamedTuple):
    """One setting of the dual search's discrete choices (:meth:`OpBound.search`)."""

    theta: float
    split: float
    threshold: int


__all__ = ["TAIL_QUANTILES", "THRESHOLD_QUANTILES", "OpBound"]
