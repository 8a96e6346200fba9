"""The overhead lower bound over windows of ops: bytes that must cross the link between two
ops, for several disjoint windows at once.

Each op alone (:mod:`cupool.sim.op_alone`) lets its copies overlap every other op of the
iteration; but the bytes off the device at op ``k`` that are used again by op ``m`` must
come back *between* them. For ops ``k < m`` the window is the time from the end of op ``k``
to the start of op ``m``; it holds ops ``k+1 .. m-1`` (``C(k, m)`` µs of compute) and
whatever stalls and recomputes the plan puts there::

    op:      k | k+1 ... m-1 | m
    compute  ##|#############|##
    H2D        |<-- copies in of buffers off at k, next used by m -->|

**Copies in.** At op ``k``, at least ``X_k`` bytes (the excess: pending bytes beyond the
budget, :mod:`cupool.sim.bounds`) belong to buffers that no residency of the plan covers
at ``k``: the validator holds the resident bytes within the budget. A candidate ``j`` (pending
at ``k``, neither used at ``k`` nor born there) off the device at ``k`` whose next use
``u_j`` is at most ``m`` is resident with its data at ``u_j`` only through a swap-in
triggered at an op ``t`` in ``(k, u_j]`` (or a recompute, below): the simulator hands it
to an H2D engine at ``t``'s dispatch, when op ``t - 1`` (so op ``k`` or later) has
finished, and op ``u_j`` (so op ``m``) cannot start before it landed. So the candidates
with a next use after ``m`` cover at most their own bytes ``F`` and the others at least
``X_k - F`` bytes, all copied in (or recomputed) within the window.

**Copies out.** At op ``m``, the bytes really off the device (their copy out completed
before op ``m`` starts, or clean, or recomputed later) are at least ``X_m``
(:mod:`cupool.sim.op_alone` states why: the simulator makes every op and every swap-in
that fills bytes a copy out still reads wait for it). A candidate at ``m`` last written by
op ``w`` with ``k <= w < m`` (a temporary is written by its producer), without a recipe,
holds data on the host only through a copy out issued after op ``w`` finished. So the
candidates with a recipe or last written before ``k`` (never, in this iteration) cover at
most ``F`` bytes and the others at least ``X_m - F``, all copied out within the window.

Either way ``B`` bytes cross one direction's ``e`` copy engines in the window, a copy of
``s`` bytes taking ``latency + s / bandwidth``. Copies move whole buffers, so there are
at least ``c`` of them, ``c`` the fewest of the candidates (the largest) that hold ``B``
bytes: the engines are busy at least ``L = c latency + B / bandwidth``, and the window
lasts at least ``L / e``. Its ops run
``C(k, m)``, so the plan stalls or recomputes at least ``L / e - C(k, m)`` within it.

**Recomputes.** A candidate with a recipe needs no copy out (it is re-produced after
``m``: free for the copies out), and may come back for its use by ``m`` by a recompute
instead of a copy in: ``r_j`` µs (:func:`~cupool.sim.bound_inputs.recompute_us`) on the
compute stream, before its use and after op ``k`` ended, so within the window. With
``R`` µs of recomputes the window lasts at least ``max(C + R, L / e)``: its stall and
recompute time ``s`` is at least the least ``s`` for which ``C + s`` µs of copies and
``s`` µs of recomputes cover ``B`` bytes (``k`` copies carry at most the ``k`` largest
buffers; recomputes relaxed to fractions of buffers; each buffer counted by both at once:
a relaxation, found by bisection).

The windows of a set that do not overlap in time (``m <= k'`` for consecutive ones) hold
disjoint stalls and recomputes, so their deficits add up: ``T >= ideal + max over such
sets of the sum``, found by a dynamic program over the ops (weighted interval
scheduling). The copies in and the copies out of one window use different engines, so a
window counts the larger of the two, not their sum.

What it leaves out (so it may be loose): the bytes of whole buffers (a copy carries
``B`` bytes, not the candidates' sizes), recomputes as an alternative to copies out (free
here), copies that several ops' excesses share, and copies forced into overlapping
windows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cupool.core.vocabulary import HOST_LEVELS, Trace
from cupool.sim.bound_inputs import BufferArrays
from cupool.sim.cost import D2H, H2D

H2D_WINDOW = "in"
D2H_WINDOW = "out"


@dataclass(frozen=True)
class Window:
    """A window from the end of op ``first_op`` to the start of op ``last_op``: for the
    copies one direction (``"in"``: host to device, ``"out"``: device to host) must carry
    in it (and the recomputes that may stand in for copies in) it lasts at least
    ``least_us``, while its ops run ``compute_us``; ``deficit_us`` (the difference) is what
    the plan stalls or recomputes within it."""

    first_op: int
    last_op: int
    direction: str
    least_us: float
    compute_us: float

    @property
    def deficit_us(self) -> float:
        return self.least_us - self.compute_us


@dataclass(frozen=True)
class WindowsBound:
    """``stall_us``: the least stall and recompute time of any valid plan, from the
    ``windows`` chosen (disjoint in time, in op order)."""

    stall_us: float
    windows: tuple[Window, ...]


@dataclass(frozen=True)
class CopyLink:
    """One direction's copies as the windows price them, on ``e`` engines (every time
    divided by ``e``): no copy costs less than ``latency_us`` (the least of the host
    levels') plus ``byte_us`` a byte (the fastest level's), and buffer ``j``'s copy no
    less than ``fastest_pb[j]`` µs a byte (its fastest level's whole copy)."""

    byte_us: float
    latency_us: float
    fastest_pb: np.ndarray

    @classmethod
    def of(cls, cost, direction: str, sizes) -> CopyLink:
        engines = cost.copy_engines_per_direction
        fastest = np.min([cost.level_latency_us(level)
                          + sizes / (cost.level_gbps(direction, level) * 1e3)
                          for level in HOST_LEVELS], axis=0)
        return cls(1.0 / (max(cost.level_gbps(direction, level) for level in HOST_LEVELS)
                          * 1e3) / engines,
                   min(cost.level_latency_us(level) for level in HOST_LEVELS) / engines,
                   fastest / sizes / engines)


def _cheapest_bytes_us(per_byte, sizes, member, need) -> np.ndarray:
    """Fractional knapsacks, one per row of ``member`` (windows x buffers): the least time
    of ``need[w]`` bytes taken from the buffers of row ``w``, costing ``per_byte`` µs each
    byte (sorted ascending), ``sizes`` bytes each (the rows' buffers always hold
    ``need``)."""
    taken = np.where(member, sizes, 0.0)
    held = np.cumsum(taken, axis=1)
    spent = np.cumsum(taken * per_byte, axis=1)
    last = np.argmax(held >= need[:, None] * (1 - 1e-12), axis=1)  # taken in part
    rows = np.arange(len(need))
    before = held[rows, last] - taken[rows, last]
    return (spent[rows, last] - taken[rows, last] * per_byte[last]
            + (need - before) * per_byte[last])


def _copies_us(byte_us: float, latency_us: float, sizes, member, need) -> np.ndarray:
    """The least engine time of copies of ``need[w]`` bytes of the buffers of row ``w`` of
    ``member`` (windows x buffers, ``sizes`` sorted largest first; the rows' buffers always
    hold ``need``): at least as many copies as the largest of them need to hold it, each
    ``latency_us``, and ``byte_us`` per byte."""
    taken = np.where(member, sizes, 0.0)
    held = np.cumsum(taken, axis=1)
    last = np.argmax(held >= need[:, None] * (1 - 1e-12), axis=1)
    copies = np.cumsum(member, axis=1)[np.arange(len(need)), last]
    return copies * latency_us + need * byte_us


class LastWrites:
    """Every (buffer, write) of the trace as one sorted key, for each candidate's last
    write before an op (a temporary's producer writes it)."""

    def __init__(self, trace: Trace, arrays: BufferArrays):
        n = trace.num_ops
        self.stride = n + 1
        owners, ops = [], []
        for index, b in enumerate(trace.buffers):
            for w in b.write_ops:
                owners.append(index)
                ops.append(w)
        self.keys = np.sort(np.asarray(owners, dtype=np.int64) * self.stride
                            + np.asarray(ops, dtype=np.int64))
        self.produced = np.where(arrays.persistent, -1, arrays.start)

    def last_before(self, candidates, op: int) -> np.ndarray:
        """Each candidate's last write before ``op`` (-1: none in this iteration)."""
        out = np.where(self.produced[candidates] < op, self.produced[candidates], -1)
        if not len(self.keys):
            return out
        at = np.searchsorted(self.keys, candidates * self.stride + op, side="left") - 1
        found = self.keys[np.maximum(at, 0)]
        mine = (at >= 0) & (found // self.stride == candidates)
        return np.maximum(out, np.where(mine, found % self.stride, -1))


class _Covered:
    """The most bytes a spend of µs buys from buffers costing ``per_byte`` µs each byte
    (sorted ascending), ``sizes`` bytes each, fractions allowed; the running sums are
    made once for the many spends a bisection asks about."""

    def __init__(self, per_byte, sizes):
        self.per_byte, self.sizes = per_byte, sizes
        self.spent = np.cumsum(sizes * per_byte)
        self.held = np.cumsum(sizes)  # whole numbers of bytes: exact in any order

    def __call__(self, spend: float) -> float:
        if spend <= 0 or not len(self.sizes):
            return 0.0
        whole = int(np.searchsorted(self.spent, spend, side="right"))
        if whole >= len(self.sizes):
            return float(self.held[-1])
        before = float(self.spent[whole - 1]) if whole else 0.0
        held = float(self.held[whole - 1]) if whole else 0.0
        return held + (spend - before) / float(self.per_byte[whole])


class _Copied:
    """The most bytes copies of a spend of µs can carry: ``k`` copies carry at most the
    ``k`` largest buffers (``held[k - 1]``, their running sum) and ``(spend - k latency) /
    byte_us`` bytes."""

    def __init__(self, byte_us: float, latency_us: float, held):
        self.byte_us, self.held = byte_us, held
        self.latencies = np.arange(1, len(held) + 1) * latency_us

    def __call__(self, spend: float) -> float:
        if spend <= 0 or not len(self.held):
            return 0.0
        carried = np.minimum(self.held, (spend - self.latencies) / self.byte_us)
        return float(max(0.0, np.max(carried)))


def _with_recomputes(link: CopyLink, fastest_pb, recompute_pb, sizes, need: float,
                     compute: float, stall: float) -> float:
    """The least ``s`` in ``[0, stall]`` such that copies in of ``compute + s`` µs and
    recomputes of ``s`` µs (on the compute stream, within the window) cover ``need``
    bytes, a buffer counted by both at once (a relaxation: only lowers ``s``); ``stall``
    is the answer with copies alone. ``sizes`` are sorted largest first; the copies carry
    no more than :class:`_Copied` nor than a fractional knapsack of each buffer's fastest
    copy (``fastest_pb`` µs a byte, :class:`_Covered`) would."""
    copied = _Copied(link.byte_us, link.latency_us, np.cumsum(sizes))
    fast_order = np.argsort(fastest_pb, kind="stable")
    fastest = _Covered(fastest_pb[fast_order], sizes[fast_order])
    can = np.isfinite(recompute_pb)
    rec_order = np.argsort(recompute_pb[can], kind="stable")
    recomputed = _Covered(recompute_pb[can][rec_order], sizes[can][rec_order])
    low, high = 0.0, stall
    for _ in range(40):  # bisection to 1e-12 of the copies-alone stall
        mid = 0.5 * (low + high)
        if min(copied(compute + mid), fastest(compute + mid)) + recomputed(mid) >= need:
            high = mid
        else:
            low = mid
    return low


def _forced_windows(bounds_at, sizes, fastest_pb, link: CopyLink, slack: float, compute_of,
                    direction: str, fixed_op: int, other_first: bool,
                    recompute_pb=None) -> list[Window]:
    """The windows of one op's candidates: ``bounds_at`` is each forcible candidate's far
    end (its next use, for copies in; its last write, for copies out), sorted nearest
    first; a window reaching ``bound`` forces those up to it, and ``compute_of(bounds)``
    is the windows' compute. The copies take at least :func:`_copies_us` (one per whole
    buffer, ``link``) and at least a fractional knapsack of each buffer's fastest copy
    (``fastest_pb`` µs a byte); only windows whose copies could outlast their compute are
    costed. ``recompute_pb`` (copies in only): each candidate's recompute time per byte
    (``inf``: no recipe), an alternative to its copy that runs on the compute stream
    within the window."""
    if not len(sizes):
        return []
    cum = np.cumsum(sizes)
    ends = np.flatnonzero(np.append(bounds_at[1:] != bounds_at[:-1], True))
    need = cum[ends] - slack
    compute = compute_of(bounds_at[ends])
    upper = np.maximum(need * np.maximum.accumulate(fastest_pb)[ends],
                       need * link.byte_us + (ends + 1) * link.latency_us)
    tried = np.flatnonzero((need > 0) & (upper > compute))
    if not len(tried):
        return []
    largest = np.argsort(-sizes, kind="stable")
    cheapest = np.argsort(fastest_pb, kind="stable")
    copies = np.maximum(
        _copies_us(link.byte_us, link.latency_us, sizes[largest],
                   largest[None, :] <= ends[tried][:, None], need[tried]),
        _cheapest_bytes_us(fastest_pb[cheapest], sizes[cheapest],
                           cheapest[None, :] <= ends[tried][:, None], need[tried]))
    recomputable = (np.zeros(len(sizes), dtype=bool) if recompute_pb is None
                    else np.isfinite(recompute_pb))
    out = []
    for at, us in zip(tried, copies, strict=True):
        if us <= compute[at]:
            continue
        last = int(ends[at])
        stall = float(us - compute[at])
        if recomputable[:last + 1].any():
            mine = largest[largest <= last]
            stall = _with_recomputes(link, fastest_pb[mine], recompute_pb[mine], sizes[mine],
                                     float(need[at]), float(compute[at]), stall)
            if stall <= 0:
                continue
        bound = int(bounds_at[last])
        first, end = (bound, fixed_op) if other_first else (fixed_op, bound)
        out.append(Window(first, end, direction, float(compute[at]) + stall,
                          float(compute[at])))
    return out


def _windows_in(arrays, prefix, excess, candidates, k, link):
    """The deficit windows of the copies in after op ``k``, one per next use that grows
    the forced set (the shortest window holding that set has the largest deficit)."""
    next_use = arrays.next_uses(candidates, k)
    forcible = next_use < arrays.n
    slack = float(arrays.size[candidates].sum()) - float(excess[k])
    chosen = candidates[forcible]
    order = np.argsort(next_use[forcible], kind="stable")
    return _forced_windows(next_use[forcible][order], arrays.size[chosen][order],
                           link.fastest_pb[chosen][order], link, slack,
                           lambda m: prefix[m] - prefix[k + 1], H2D_WINDOW, k, False,
                           arrays.recompute_per_byte[chosen][order])


def _windows_out(writes, arrays, prefix, excess, candidates, m, link, free_recipe):
    """The deficit windows of the copies out before op ``m``, one per last write that
    grows the forced set."""
    last_write = writes.last_before(candidates, m)
    forcible = (last_write >= 0) & ~free_recipe[candidates]
    slack = float(arrays.size[candidates].sum()) - float(excess[m])
    chosen = candidates[forcible]
    order = np.argsort(-last_write[forcible], kind="stable")
    return _forced_windows(last_write[forcible][order], arrays.size[chosen][order],
                           link.fastest_pb[chosen][order], link, slack,
                           lambda k: prefix[m] - prefix[k + 1], D2H_WINDOW, m, True)


def windows_bound(trace: Trace, arrays: BufferArrays, op_us, excess, cost) -> WindowsBound:
    """The least stall and recompute time (µs) every valid plan has within disjoint
    windows of ops (see the module docstring). ``excess[i]`` is op ``i``'s excess in bytes,
    the buffers that may be off the device at ``i`` are ``arrays.candidates_at(i)``; ``cost``
    the :class:`~cupool.sim.cost.CostModel` (copies priced at the fastest host level's
    latency and bandwidth)."""
    n = trace.num_ops
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(op_us, dtype=np.float64))])
    copy_in, copy_out = CopyLink.of(cost, H2D, arrays.size), CopyLink.of(cost, D2H, arrays.size)
    free_recipe = np.isfinite(arrays.recompute)
    writes = LastWrites(trace, arrays)
    ending: dict[int, list[Window]] = {}
    for i in range(n):
        if excess[i] <= 0:
            continue
        candidates = arrays.candidates_at(i)
        if not len(candidates):
            continue
        for window in (_windows_in(arrays, prefix, excess, candidates, i, copy_in)
                       + _windows_out(writes, arrays, prefix, excess, candidates, i, copy_out,
                                      free_recipe)):
            ending.setdefault(window.last_op, []).append(window)
    # best[i]: the largest sum of deficits of disjoint windows whose last op is before i; a
    # window from op k may follow windows whose last op is k or earlier
    best = np.zeros(n + 1)
    chosen: list[tuple[Window, ...]] = [()] * (n + 1)
    for m in range(n):
        best[m + 1], chosen[m + 1] = best[m], chosen[m]
        for window in ending.get(m, ()):
            total = best[window.first_op + 1] + window.deficit_us
            if total > best[m + 1]:
                best[m + 1] = total
                chosen[m + 1] = (*chosen[window.first_op + 1], window)
    return WindowsBound(float(best[n]), chosen[n])


__all__ = ["D2H_WINDOW", "H2D_WINDOW", "CopyLink", "LastWrites", "Window", "WindowsBound",
           "windows_bound"]
