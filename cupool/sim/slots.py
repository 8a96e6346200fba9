"""The slots bound: a short step's whole iteration as one program over the slot each copy
and recompute starts in.

The other parts of the bound (module :mod:`cupool.sim.bounds`) look at one op, a few peaks
or pairs of ops. On a step of a few dozen ops whose excess is a few large buffers and
weights that take turns on the link, what decides the time is how the copies of the
whole iteration share the link's engines and the waits between ops; this program states
all of it at once, with the switches of the copies whole (a mixed-integer program: HiGHS,
extra ``bound``), for traces of at most :data:`MAX_OPS` ops.

**Time.** Op ``i`` runs for ``d_i`` from ``tau_i``; ``g_i >= 0`` is the time the compute
stream spends before op ``i`` on anything but ops (waits and recomputes; ``g_n`` after the
last op, until the last copy has landed), so ``T = ideal + sum g``. *Slot* ``t`` is the
time from the end of op ``t - 1`` (the iteration's start for ``t = 0``) to the end of op
``t``; ``W(t, u) = g_t + d_t + ... + d_(u-1) + g_u`` is the time from the start of slot
``t`` to ``tau_u`` (to the end of the iteration for ``u = n``).

**Memory at the instants tau_i.** At ``tau_i`` the bytes that hold data lie in disjoint
ranges of the arena (:mod:`cupool.sim.memory_time`): a residency's range while its data is
there or being copied in, a range being copied out until that copy has landed (whoever
fills it waits). So the *pending* bytes (module :mod:`cupool.sim.bounds`) not held at
``tau_i`` -- *off* -- cover the excess ``X_i``, and a buffer ``j`` (``s_j`` bytes) off at
``tau_i`` between two of its *points* ``p < i < u`` (its uses; for a temporary also its
start) is

- brought back for ``u`` by a copy in (``a_j``: latency plus bytes over bandwidth at the
  fastest host level) that started after ``tau_i`` -- in slot ``t >= i`` -- and landed by
  ``tau_u``: ``a_j <= W(t, u)``; a copy in holds its range from its start, so one that
  started in a slot ``t < i`` holds it at ``tau_i``, and so does one of slot ``i`` whose
  bytes do not fit beside what op ``i`` uses and makes (it cannot have started while op
  ``i`` ran);
- or by a recompute run in ``g_t``, ``t > i`` (one in ``g_t``, ``t <= i``, holds its
  bytes at ``tau_i``);
- and, when ``p`` writes it (a temporary's start always does), its copy out started after
  op ``p`` ended and landed by ``tau_i``: ``a_out <= W(p + 1, i)`` -- clean data leaves
  by a drop.

A persistent buffer is also off across the iteration boundary, before its first use ``F``
and after its last ``L``: it began the iteration on the host (``h_j``: copied in in a slot
``t <= F``, and copied out after its last write by the iteration's end when any op writes
it), or stayed on the device and, when written, was copied out in the head (started at
the iteration's start, landed by ``tau_i``); off after ``L`` it is copied out after its
last write by ``tau_i`` and either began on the host or comes back in a later slot, by the
iteration's end. A persistent buffer without uses is off for free.

**The link and the compute stream.** Every copy runs on one of the ``k`` engines of its
direction inside its window, so the copies whose windows lie in ``[t1, u2]`` take at most
``k W(t1, u2)``. A recompute of op ``o`` in ``g_t`` runs ``o`` there: the recomputes in
``g_t`` take at most ``g_t``; one run of ``o`` there may make all of its outputs. A
recompute reading a temporary input ``x`` that was freed by then (``x.end <= t``) needs
``x`` re-made by its producer first, and that one the inputs it freed (``y.end <=
x.end``): each producer re-run at least once in the iteration for all of them, counted in
the sum of ``g`` (``C_o >= d_o`` times its runs in each slot, ``>= d_o`` when re-made for
a chain; ``sum C_o <= sum g``).

**A recompute's memory.** Before op ``t`` its recomputes run one step each, and every
residency that holds op ``t`` holds its bytes from the first of those steps, unless a
recompute enters it (then from that recompute's step). So while the producer of ``k``
runs in ``g_t``, the device holds the pending bytes not off at ``tau_t`` less those
recomputed in ``g_t`` (``R_t``, at most all of them, ``k`` included), plus ``k`` itself
and the temporary inputs of its producer freed by then (re-made, or kept from an earlier
re-make: each must be resident at that step), which no pending count includes; with the
recompute switched on that must fit the budget. An input that cannot be re-made there (a
persistent one, or a temporary without a recipe) holds op ``t``: it is not off at
``tau_t``.

Every valid plan gives values in {0, 1} to these switches (off, copy slots, recompute
slots) meeting every row, so the least ``T`` the program admits is a bound; fractions of
the ``off`` switches only lower it. HiGHS' proven bound after at most :data:`NODE_LIMIT`
branch-and-bound nodes (or :data:`SECONDS`) is used, less :data:`TOLERANCE`.

What it ignores (so it may be loose): fragmentation; the memory of a chain's deeper
links while they run, and of a recompute's inputs that are pending but off; copies a
plan makes twice inside one gap (counted once); the order copies queue in on an
engine.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.sim.highs import milp_dual_bound

MAX_OPS = 48
"""Traces with more ops get no slots bound (its rows grow with the square of the ops)."""
MAX_NONZEROS = 80_000
"""No bound (``None``) when the program would have more nonzero coefficients: the node
limit, not the time limit, must end the search, or the bound would depend on the machine.
The 27-op near-budget shapes' programs (38,400-39,700 nonzeros) end within 4.7 s here; a
41-op inference step's (275,000) spent 9 s on its root node alone and stopped at the time
limit after 55-66 nodes."""
NODE_LIMIT = 1000
"""Branch-and-bound nodes HiGHS may explore: the same answer on every machine (the
near-budget shapes' programs finish within 300)."""
SECONDS = 20.0
"""A safety net on HiGHS' time (programs within :data:`MAX_NONZEROS` reach the node limit,
or finish, long before it)."""
TOLERANCE = 1e-6
"""Relative amount taken off HiGHS' bound (it meets its constraints to ~1e-7)."""
BYTE_UNIT = float(2 ** 20)
"""The rows of bytes are stated in MiB: dividing by a power of two is exact in binary
floating point, so the program is the same, but HiGHS, whose tolerances are absolute,
solves it reliably only so. Stated in bytes (up to 1e9 beside coefficients of µs), it
called the slots programs of the near-budget shapes optimal at 8,206 µs of waits (seed 1
at 70% on Gen5) and 59,861 µs (seed 0 at its largest working set on Gen4) where a solution
of 3,775 µs, and one of 57,222 µs, meets every row as stated in bytes, and called two
other programs infeasible that a valid plan meets."""


@dataclass
class _Program:
    """Sparse rows ``sum(coefficient * x) <= bound`` over columns in ``[0, upper]``."""

    upper: list = field(default_factory=list)
    integral: list = field(default_factory=list)
    rows: list = field(default_factory=list)
    bounds: list = field(default_factory=list)

    def column(self, upper: float = 1.0, integral: bool = True) -> int:
        self.upper.append(upper)
        self.integral.append(1 if integral else 0)
        return len(self.upper) - 1

    def row(self, terms: list, bound: float) -> None:
        self.rows.append(terms)
        self.bounds.append(float(bound))

    def nonzeros(self) -> int:
        return sum(len(r) for r in self.rows)


class _Slots:
    """The program of one trace and budget (module docstring), built column by column."""

    def __init__(self, trace: Trace, arrays, op_us, engines: int, budget_bytes: int,
                 excess: np.ndarray):
        self.trace, self.arrays, self.engines = trace, arrays, engines
        self.budget = budget_bytes
        self.must = arrays.must_bytes
        self.n = n = trace.num_ops
        self.d = np.asarray(op_us, dtype=np.float64)
        self.prefix = np.concatenate([[0.0], np.cumsum(self.d)])
        self.p = _Program()
        self.g = [self.p.column(np.inf, False) for _ in range(n + 1)]
        self.excess = np.array(excess, dtype=np.float64)
        self.off: list[list] = [[] for _ in range(n)]   # (column, bytes) off at tau_i
        self.h2d: list[tuple] = []                         # (column, a, first slot, due op)
        self.d2h: list[tuple] = []
        self.runs: dict[tuple[int, int], int] = {}         # (op, slot) -> column
        self.remade: dict[int, int] = {}                   # op -> column (a chain re-run)
        self.needed: dict[int, int] = {}                   # temporary -> column (re-made)
        self.off_of: dict[tuple[int, int], int] = {}       # (buffer index, op) -> column
        # slot -> (column, buffer index, its bytes, its producer's freed inputs' bytes),
        # one per recompute that may run in that slot
        self.recompute_bytes: dict[int, list[tuple[int, int, float, float]]] = {}
        self.index = {b.id: k for k, b in enumerate(trace.buffers)}

    # -- time -------------------------------------------------------------------------
    def timed(self, column: int, us: float, first: int, due: int, copies: list) -> None:
        """``us * x <= W(first, due)``; the copy joins ``copies`` for the engine rows."""
        terms = [(column, us)] + [(self.g[i], -1.0) for i in range(first, due + 1)]
        self.p.row(terms, self.prefix[due] - self.prefix[first])
        copies.append((column, us, first, due))

    def engine_rows(self) -> None:
        for copies in (self.h2d, self.d2h):
            if len(copies) < 2:
                continue
            firsts = np.array([c[2] for c in copies])
            dues = np.array([c[3] for c in copies])
            for t1 in np.unique(firsts):
                for u2 in np.unique(dues[dues >= t1]):
                    inside = np.flatnonzero((firsts >= t1) & (dues <= u2))
                    if len(inside) < 2:
                        continue
                    terms = [(copies[q][0], copies[q][1]) for q in inside]
                    terms += [(self.g[i], -float(self.engines)) for i in range(t1, u2 + 1)]
                    self.p.row(terms, self.engines * (self.prefix[u2] - self.prefix[t1]))

    # -- switches ---------------------------------------------------------------------
    def switches(self, first: int, last: int) -> dict:
        return {t: self.p.column() for t in range(first, last + 1)}

    def one_of(self, *groups: dict, bound: float = 1.0) -> None:
        terms = [(c, 1.0) for group in groups for c in group.values()]
        if terms:
            self.p.row(terms, bound)

    def off_column(self, op: int, k: int) -> int:
        """Buffer ``k`` off at ``tau_op``."""
        column = self.p.column(1.0, False)
        self.off[op].append((column, float(self.arrays.size[k])))
        self.off_of[k, op] = column
        return column

    def link(self, off: int, copies: dict, recomputes: dict, op: int, size: float,
             also: tuple = ()) -> None:
        """``off`` at ``tau_op`` only if the buffer comes back after it (a copy started in
        slot ``>= op``, a recompute in ``g_t``, ``t > op``, or a column of ``also``),
        and not if one started before. A copy of slot ``op`` that started after
        ``tau_op`` would hold its bytes while op ``op`` holds what it uses and makes:
        where the two exceed the budget, it started before ``tau_op``."""
        cut = op + 1 if size + self.must[op] > self.budget else op
        later = [(c, -1.0) for t, c in copies.items() if t >= cut]
        later += [(c, -1.0) for t, c in recomputes.items() if t > op]
        self.p.row([(off, 1.0)] + later + [(c, -1.0) for c in also], 0.0)
        earlier = [(c, 1.0) for t, c in copies.items() if t < cut]
        earlier += [(c, 1.0) for t, c in recomputes.items() if t <= op]
        if earlier:
            self.p.row([(off, 1.0), *earlier], 1.0)

    def saved_by(self, off: int, outs: dict, op: int, also: tuple = ()) -> None:
        """``off`` at ``tau_op`` only if a copy out landed by then (or a column of
        ``also`` holds)."""
        self.p.row([(off, 1.0)] + [(c, -1.0) for e, c in outs.items() if e <= op]
                   + [(c, -1.0) for c in also], 0.0)

    # -- recomputes -------------------------------------------------------------------
    def run(self, op: int, slot: int) -> int:
        if (op, slot) not in self.runs:
            self.runs[op, slot] = self.p.column(1.0, False)
        return self.runs[op, slot]

    def remake(self, k: int) -> int:
        """A column that is 1 when temporary ``k`` (buffer index) must be re-made for a
        chain: its producer re-run, and so every input it freed (capped at 0 when it has
        no recipe)."""
        if k in self.needed:
            return self.needed[k]
        buffer = self.trace.buffers[k]
        if buffer.recompute is None:
            self.needed[k] = self.p.column(0.0, False)
            return self.needed[k]
        self.needed[k] = column = self.p.column(1.0, False)
        op = buffer.recompute.op
        if op not in self.remade:
            self.remade[op] = self.p.column(1.0, False)
        self.p.row([(column, 1.0), (self.remade[op], -1.0)], 0.0)
        for y in self._freed_inputs(buffer, buffer.end):
            self.p.row([(column, 1.0), (self.remake(y), -1.0)], 0.0)
        return column

    def _freed_inputs(self, buffer, by: int) -> list[int]:
        out = []
        for x in set(buffer.recompute.inputs):
            k = self.index[x]
            other = self.trace.buffers[k]
            if x != buffer.id and other.kind != PERSISTENT and other.end <= by:
                out.append(k)
        return out

    def recomputes(self, k: int, first: int, due: int) -> dict:
        """Slots ``first..due`` a recompute of ``k`` may run in (each a run of its producer,
        with the chains of the inputs freed by then)."""
        buffer = self.trace.buffers[k]
        if buffer.recompute is None:
            return {}
        out = {}
        size = float(self.arrays.size[k])
        for t in range(first, due + 1):
            out[t] = column = self.p.column()
            self.p.row([(column, 1.0), (self.run(buffer.recompute.op, t), -1.0)], 0.0)
            freed = self._freed_inputs(buffer, t)
            for x in freed:
                self.p.row([(column, 1.0), (self.remake(x), -1.0)], 0.0)
            inputs = sum(float(self.arrays.size[x]) for x in freed)
            self.recompute_bytes.setdefault(t, []).append((column, k, size, inputs))
        return out

    def held_inputs(self, k: int, t: int) -> list[int]:
        """The inputs of ``k``'s producer that must hold op ``t`` when it runs in ``g_t``:
        persistent ones, and temporaries pending at ``t`` without a recipe (a recompute
        reads an input resident at its op, or re-made just before it, which only a
        temporary with a recipe can be)."""
        out = []
        for x in set(self.trace.buffers[k].recompute.inputs):
            j = self.index[x]
            other = self.trace.buffers[j]
            if j != k and (other.kind == PERSISTENT or (
                    other.recompute is None and other.start <= t < other.end)):
                out.append(j)
        return out

    def recompute_memory_rows(self) -> None:
        """A recompute in ``g_t`` reads inputs that hold op ``t`` (:meth:`held_inputs`:
        none of them off at ``tau_t``) and fits beside what is resident then (module
        docstring, *A recompute's memory*): ``Y_t`` is at most the bytes off at
        ``tau_t``, ``R_t`` at most those recomputed in ``g_t``, and ``pending_t - Y_t -
        R_t + (size + freed inputs) * switch <= budget`` for each recompute that reads a
        freed input."""
        for t, recomputes in sorted(self.recompute_bytes.items()):
            if t >= self.n:
                continue
            for column, k, _size, _inputs in recomputes:
                for j in self.held_inputs(k, t):
                    if (j, t) in self.off_of:  # not off where the recompute reads it
                        self.p.row([(self.off_of[j, t], 1.0), (column, 1.0)], 1.0)
            if not any(inputs > 0 for _c, _k, _s, inputs in recomputes):
                continue
            # bounded by what they can add up to: left unbounded, HiGHS called programs
            # infeasible that a valid plan meets
            # in MiB (:data:`BYTE_UNIT`), as every row of bytes
            off = self.p.column(sum(s for _c, s in self.off[t]) / BYTE_UNIT, False)
            self.p.row([(off, 1.0)] + [(c, -s / BYTE_UNIT) for c, s in self.off[t]], 0.0)
            remade = self.p.column(sum(s for _c, _k, s, _inputs in recomputes) / BYTE_UNIT,
                                   False)
            self.p.row([(remade, 1.0)] + [(c, -s / BYTE_UNIT)
                                          for c, _k, s, _inputs in recomputes], 0.0)
            for column, _k, size, inputs in recomputes:
                if inputs > 0:
                    self.p.row([(off, -1.0), (remade, -1.0),
                                (column, (size + inputs) / BYTE_UNIT)],
                               -float(self.excess[t]) / BYTE_UNIT)

    def compute_rows(self) -> None:
        by_slot: dict[int, list] = {}
        by_op: dict[int, list] = {}
        for (op, slot), column in self.runs.items():
            by_slot.setdefault(slot, []).append((column, float(self.d[op])))
            by_op.setdefault(op, []).append((column, float(self.d[op])))
        for slot, terms in by_slot.items():
            self.p.row([*terms, (self.g[slot], -1.0)], 0.0)
        charges = []
        for op in set(by_op) | set(self.remade):
            charge = self.p.column(np.inf, False)
            charges.append((charge, 1.0))
            if op in by_op:
                self.p.row(by_op[op] + [(charge, -1.0)], 0.0)
            if op in self.remade:
                self.p.row([(self.remade[op], float(self.d[op])), (charge, -1.0)], 0.0)
        if charges:
            self.p.row(charges + [(g, -1.0) for g in self.g], 0.0)

    # -- buffers ----------------------------------------------------------------------
    def between(self, k: int, p: int, u: int, dirty: bool) -> None:
        """Buffer ``k`` off at ops strictly between its points ``p`` and ``u``."""
        a_in, a_out, size = self._costs(k)
        copies = self.switches(p + 1, u)
        for t, column in copies.items():
            self.timed(column, a_in, t, u, self.h2d)
        recomputes = self.recomputes(k, p + 2, u)
        self.one_of(copies, recomputes)
        outs = {}
        if dirty:
            outs = self.switches(p + 1, u - 1)
            for e, column in outs.items():
                self.timed(column, a_out, p + 1, e, self.d2h)
            self.one_of(outs)
        for i in range(p + 1, u):
            off = self.off_column(i, k)
            self.link(off, copies, recomputes, i, size)
            if dirty:
                self.saved_by(off, outs, i, tuple(recomputes.values()))

    def boundary(self, k: int, first: int, last: int, written: list[int]) -> None:
        """Persistent buffer ``k`` off before its first use or after its last."""
        n = self.n
        a_in, a_out, size = self._costs(k)
        began = self.p.column()  # on the host at the iteration's start
        head_in = self.switches(0, first) if first > 0 else {}
        for t, column in head_in.items():
            self.timed(column, a_in, t, first, self.h2d)
        if head_in:
            self.one_of(head_in)
            self.p.row([(began, 1.0)] + [(c, -1.0) for c in head_in.values()], 0.0)
        tail_in = self.switches(last + 1, n)
        for t, column in tail_in.items():
            self.timed(column, a_in, t, n, self.h2d)
        self.one_of(tail_in, {0: began})
        last_write = max(written) if written else None
        tail_out = {}
        if last_write is not None:
            tail_out = self.switches(last + 1, n)
            for e, column in tail_out.items():
                self.timed(column, a_out, last_write + 1, e, self.d2h)
            self.one_of(tail_out)
            self.p.row([(began, 1.0)] + [(c, -1.0) for c in tail_out.values()], 0.0)
        head_out = {}
        if written and first > 0:
            head_out = self.switches(0, first - 1)
            for e, column in head_out.items():
                self.timed(column, a_out, 0, e, self.d2h)
            self.one_of(head_out)
        for i in range(first):
            off = self.off_column(i, k)
            self.link(off, head_in, {}, i, size)
            if written:
                self.saved_by(off, head_out, i, (began,))
        for i in range(last + 1, n):
            off = self.off_column(i, k)
            self.link(off, tail_in, {}, i, size, (began,))
            if last_write is not None:
                self.saved_by(off, tail_out, i)

    def _costs(self, k: int) -> tuple[float, float, float]:
        size = float(self.arrays.size[k])
        return (float(self.arrays.copy_per_byte[k]) * size,
                float(self.arrays.out_per_byte[k]) * size, size)

    def build(self) -> bool:
        """State every row; ``False`` when the program is not one this bound handles."""
        for k, buffer in enumerate(self.trace.buffers):
            written = sorted(set(buffer.write_ops))
            if buffer.kind == PERSISTENT:
                if buffer.recompute is not None:
                    return False
                points = sorted(set(buffer.uses))
                if not points:
                    self.excess -= float(self.arrays.size[k])
                    continue
                if points[0] > 0 or points[-1] < self.n - 1:
                    self.boundary(k, points[0], points[-1], written)
            else:
                points = sorted({buffer.start, *buffer.uses})
            for p, u in itertools.pairwise(points):
                if u - p >= 2:
                    dirty = p in written or (buffer.kind != PERSISTENT and p == buffer.start)
                    self.between(k, p, u, dirty)
            if self.p.nonzeros() > MAX_NONZEROS:
                return False
        for i in np.flatnonzero(self.excess > 0):
            self.p.row([(c, -s / BYTE_UNIT) for c, s in self.off[i]],
                       -float(self.excess[i]) / BYTE_UNIT)
        self.recompute_memory_rows()
        self.compute_rows()
        self.engine_rows()
        return self.p.nonzeros() <= MAX_NONZEROS

    def solve(self) -> float | None:
        """The proven lower bound on ``sum g`` (µs), or ``None``."""
        rows, cols, vals = [], [], []
        for r, terms in enumerate(self.p.rows):
            for column, value in terms:
                rows.append(r)
                cols.append(column)
                vals.append(value)
        from scipy.sparse import csr_matrix

        count = len(self.p.upper)
        matrix = csr_matrix((vals, (rows, cols)), shape=(len(self.p.rows), count))
        objective = np.zeros(count)
        objective[self.g] = 1.0
        return milp_dual_bound(objective, matrix, self.p.bounds, np.zeros(count),
                               np.array(self.p.upper, dtype=np.float64), self.p.integral,
                               SECONDS, node_limit=NODE_LIMIT)


def slots_bound_us(trace: Trace, arrays, op_us, engines: int, budget_bytes: int,
                   excess) -> float | None:
    """A lower bound on the iteration time (µs) of every valid plan (module docstring), or
    ``None`` when the trace is longer than :data:`MAX_OPS` ops, its program too large,
    SciPy missing or HiGHS proves nothing. ``arrays``: the trace's
    :class:`~cupool.sim.bound_inputs.BufferArrays`; ``excess``: the pending bytes beyond
    the budget at each op."""
    if trace.num_ops > MAX_OPS or not np.any(np.asarray(excess) > 0):
        return None
    try:
        import scipy  # noqa: F401
    except ImportError:
        return None
    program = _Slots(trace, arrays, op_us, engines, budget_bytes, excess)
    if not program.build():
        return None
    waits = program.solve()
    if waits is None:
        return None
    return float(np.sum(op_us)) + max(0.0, waits) * (1.0 - TOLERANCE)


__all__ = ["BYTE_UNIT", "MAX_NONZEROS", "MAX_OPS", "NODE_LIMIT", "SECONDS", "TOLERANCE",
           "slots_bound_us"]
