"""From a per-buffer schedule (which idle gaps each buffer spends off the device, and how)
to a plan: residencies, actions and offsets.

Every budget planner decides *which bytes are resident when*; this module turns that
decision into a :class:`~cupool.core.Plan` the same way for all of them:

1. each buffer's uses are split by its :class:`Gap` s into resident runs; a temporary
   buffer is resident from its first use to its last (``[uses[0], uses[-1] + 1)``: nothing
   needs its bytes outside), a persistent one from op 0 to the end unless its *wrap gap*
   (last use → first use of the next iteration) takes it off the device::

       op:        0   1   2   3   4   5   6   7   8
       uses:          u           u       u
       swap gap:      [===)               [=======)   residency [1, 3) then [6, 8)
                        SwapOut after 1   SwapIn trigger 6, due 6... (resident_from = 6)

2. chain recomputes (an input of a recompute that was itself dropped) add a one-op
   residency ``[j, j + 1)`` at the op ``j`` the recompute happens before;
3. the residencies are a static offset-assignment problem (each residency a "buffer");
   :func:`cupool.planning.solve` places them within the budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from cupool.core.liveness import live_bytes
from cupool.core.vocabulary import (
    PERSISTENT,
    Plan,
    RecomputeAction,
    Residency,
    SolveStatus,
    SwapIn,
    SwapOut,
    Trace,
)
from cupool.planning.problem import StaticProblem
from cupool.planning.solvers import SolverParams

SWAP = "swap"
RECOMPUTE = "recompute"


@dataclass(frozen=True)
class Gap:
    """Buffer ``buffer_id`` is off the device between uses ``prev_use`` and ``next_use``.

    The residency before the gap ends at ``resident_until`` (exclusive, ``> prev_use``:
    a swap keeps the bytes until its copy out has landed); the one after it starts at
    ``resident_from`` (``<= next_use``: a swap-in's trigger op; a recompute's ``next_use``,
    or the earlier op where a segment's batch re-runs it, :mod:`._checkpoint`).
    A *wrap gap* (persistent buffers only) has ``next_use <= prev_use``: off the device
    from ``resident_until`` to the end of the iteration and from op 0 to ``resident_from``
    (ZeRO-Offload style: swapped out after the last use, back before the first).
    """

    buffer_id: int
    prev_use: int
    next_use: int
    mode: str
    resident_until: int
    resident_from: int

    @property
    def wraps(self) -> bool:
        return self.next_use <= self.prev_use


@dataclass
class Schedule:
    """What a planner decided: gaps per buffer and chain recomputes ``(buffer_id, op, depth)``
    (re-produce the buffer just before ``op``; deeper chain links run first)."""

    gaps: dict[int, list[Gap]] = field(default_factory=dict)
    chains: list[tuple[int, int, int]] = field(default_factory=list)

    def add(self, gap: Gap) -> None:
        self.gaps.setdefault(gap.buffer_id, []).append(gap)

    def count(self, mode: str) -> int:
        return sum(g.mode == mode for gaps in self.gaps.values() for g in gaps)


def base_interval(trace: Trace, buffer) -> tuple[int, int]:
    """The residency a buffer needs with no gap: ``[uses[0], uses[-1] + 1)`` for a temporary
    buffer (its lifetime when it has no uses), ``[0, num_ops)`` for a persistent one."""
    if buffer.kind == PERSISTENT:
        return 0, trace.num_ops
    if not buffer.uses:
        return buffer.start, buffer.end
    return buffer.uses[0], buffer.uses[-1] + 1


def residency_intervals(trace: Trace, schedule: Schedule) -> list[tuple[int, int, int]]:
    """``(buffer_id, start, end)`` for every residency the schedule implies, in buffer order."""
    out: list[tuple[int, int, int]] = []
    transients: dict[int, list[int]] = {}
    for buffer_id, op, _depth in schedule.chains:
        transients.setdefault(buffer_id, []).append(op)
    for b in trace.buffers:
        start, end = base_interval(trace, b)
        gaps = sorted(schedule.gaps.get(b.id, ()), key=lambda g: g.prev_use)
        wrap = [g for g in gaps if g.wraps]
        if wrap:
            start, end = wrap[0].resident_from, wrap[0].resident_until
        cursor = start
        for g in gaps:
            if g.wraps:
                continue
            out.append((b.id, cursor, g.resident_until))
            cursor = g.resident_from
        out.append((b.id, cursor, end))
        for op in sorted(set(transients.get(b.id, ()))):
            out.append((b.id, op, op + 1))
    return [r for r in out if r[2] > r[1]]


def actions_of(trace: Trace, schedule: Schedule) -> tuple:
    """The schedule's actions in execution order: before op ``t`` come the swap-outs issued
    after op ``t - 1``, then swap-ins triggered at ``t``, then recomputes due at ``t``
    in producer-op order (an input's producer runs before its consumer's, so every
    recompute finds its inputs resident: chain links and gaps cut short at a pin alike)."""
    keyed = []
    for gaps in schedule.gaps.values():
        for g in gaps:
            if g.mode == SWAP:
                keyed.append(((g.prev_use + 1, 0, 0, 0, g.buffer_id),
                              SwapOut(g.buffer_id, g.prev_use)))
                keyed.append(((g.resident_from, 1, 0, 0, g.buffer_id),
                              SwapIn(g.buffer_id, g.resident_from, g.next_use)))
            else:  # re-made where its residency resumes: its next use, or a batch's op
                keyed.append(((g.resident_from, 2, _producer(trace, g.buffer_id), 0,
                               g.buffer_id), RecomputeAction(g.buffer_id, g.resident_from)))
    for buffer_id, op, depth in schedule.chains:
        keyed.append(((op, 2, _producer(trace, buffer_id), -depth, buffer_id),
                      RecomputeAction(buffer_id, op)))
    keyed.sort(key=lambda item: item[0])
    return tuple(action for _key, action in keyed)


def _producer(trace: Trace, buffer_id: int) -> int:
    """The op a recompute of the buffer re-runs: inputs exist before it, so running the
    recomputes before one op in producer order finds every input already made."""
    return trace.buffer(buffer_id).recompute.op


def resident_bytes(trace: Trace, intervals) -> np.ndarray:
    """Bytes resident during each op for ``(buffer_id, start, end)`` residencies."""
    if not intervals:
        return np.zeros(trace.num_ops, dtype=np.int64)
    sizes = [trace.buffer(i).size for i, _s, _e in intervals]
    return live_bytes([s for _i, s, _e in intervals], [e for _i, _s, e in intervals], sizes,
                      trace.num_ops)


def place(trace: Trace, intervals, budget_bytes: int, solver: str = "greedy-size",
          params: SolverParams | None = None):
    """Offsets for the residencies within ``budget_bytes``: ``(offsets or None, arena_bytes)``.

    ``offsets[k]`` belongs to ``intervals[k]``. ``None`` when the offset solver found no
    placement within the budget (``arena_bytes`` is then what it needed, 0 if unknown).
    """
    from cupool.planning import solve  # late: planning/__init__ imports the solvers

    if not intervals:
        return np.zeros(0, dtype=np.int64), 0
    problem = StaticProblem.from_arrays(
        [s for _i, s, _e in intervals], [e for _i, _s, e in intervals],
        [trace.buffer(i).size for i, _s, _e in intervals], capacity=budget_bytes,
        num_ops=trace.num_ops, name=trace.name)
    result = solve(problem, solver, params or SolverParams(time_limit_s=2.0))
    if result.offsets is None:
        return None, 0
    arena = problem.arena_of(result.offsets)
    if arena > budget_bytes:
        return None, arena
    offsets = np.asarray(result.offsets, dtype=np.int64)
    if not tie_boundary_pairs(trace, intervals, offsets, budget_bytes):
        return None, 0
    return offsets, int(max(int(o) + trace.buffer(i).size
                            for (i, _s, _e), o in zip(intervals, offsets, strict=True)))


def boundary_pairs(trace: Trace, intervals) -> list[tuple[int, int]]:
    """``(k_first, k_last)`` for every persistent buffer resident across the iteration
    boundary in two residencies: its last one ends at ``num_ops`` and its first starts at
    0 (``intervals[k]``). Across the boundary the two are one stay on the device, so they
    need one offset: the bytes cannot move between iterations."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for k, (b, start, end) in enumerate(intervals):
        if start == 0:
            first[b] = k
        if end == trace.num_ops:
            last[b] = k
    return [(k, last[b]) for b, k in first.items()
            if b in last and last[b] != k and trace.buffer(b).kind == PERSISTENT]


def tie_boundary_pairs(trace: Trace, intervals, offsets: np.ndarray, budget_bytes: int) -> bool:
    """Give both residencies of each :func:`boundary_pairs` pair one offset, in place.

    Where the solver placed them apart, the pair keeps the last residency's offset if that
    is free during the first one, else the first's if free during the last, else the
    lowest offset free during both; ``False`` when none fits within ``budget_bytes``::

        bytes ^        [0, 3) at 0 and [7, 10) at 64  ->  both at 64 when [0, 3) is free there
              |  first                last
              +----------------------------> op
    """
    pairs = [(k, j) for k, j in boundary_pairs(trace, intervals) if offsets[k] != offsets[j]]
    if not pairs:
        return True
    starts = np.array([s for _b, s, _e in intervals], dtype=np.int64)
    ends = np.array([e for _b, _s, e in intervals], dtype=np.int64)
    sizes = np.array([trace.buffer(b).size for b, _s, _e in intervals], dtype=np.int64)
    for k, j in pairs:
        layout = _Layout(starts, ends, sizes, offsets, (k, j))
        size = int(sizes[k])
        if layout.free(int(offsets[j]), size, budget_bytes, k):
            offsets[k] = offsets[j]
        elif layout.free(int(offsets[k]), size, budget_bytes, j):
            offsets[j] = offsets[k]
        else:
            lowest = layout.lowest_free(size, k, j)
            if lowest + size > budget_bytes:
                return False
            offsets[k] = offsets[j] = lowest
    return True


@dataclass(frozen=True)
class _Layout:
    """The placed residencies as arrays, minus a pair being moved (``moving``)."""

    starts: np.ndarray
    ends: np.ndarray
    sizes: np.ndarray
    offsets: np.ndarray
    moving: tuple[int, int]

    def _during(self, *spans: int) -> np.ndarray:
        """Residencies other than the pair that share an op with any of ``spans``."""
        mask = np.zeros(len(self.starts), dtype=bool)
        for a in spans:
            mask |= (self.starts < self.ends[a]) & (self.ends > self.starts[a])
        mask[list(self.moving)] = False
        return mask

    def free(self, offset: int, size: int, budget_bytes: int, span: int) -> bool:
        """``[offset, offset + size)`` is within the budget and unused during ``span``."""
        mask = self._during(span)
        return offset + size <= budget_bytes and not bool(np.any(
            mask & (self.offsets < offset + size) & (self.offsets + self.sizes > offset)))

    def lowest_free(self, size: int, *spans: int) -> int:
        """The lowest offset with ``size`` bytes unused during every one of ``spans``."""
        mask = self._during(*spans)
        cursor = 0
        for low, high in sorted(zip(self.offsets[mask].tolist(),
                                    (self.offsets + self.sizes)[mask].tolist(), strict=True)):
            if low - cursor >= size:
                break
            cursor = max(cursor, high)
        return cursor


def assemble(trace: Trace, schedule: Schedule, intervals, offsets, arena_bytes: int,
             budget_bytes: int, policy: str, started: float, stats: dict) -> Plan:
    """The plan of a placed schedule (status ``feasible``)."""
    residencies = tuple(Residency(int(i), int(s), int(e), int(o))
                        for (i, s, e), o in zip(intervals, offsets, strict=True))
    stats = dict(stats)
    stats.setdefault("swap_gaps", schedule.count(SWAP))
    stats.setdefault("recompute_gaps", schedule.count(RECOMPUTE))
    stats.setdefault("chain_recomputes", len(schedule.chains))
    return Plan(trace.name, trace.digest(), policy, SolveStatus.FEASIBLE, int(arena_bytes),
                trace.lower_bound_bytes(), (), time.perf_counter() - started, budget_bytes,
                stats, residencies, actions_of(trace, schedule))


def failed_plan(trace: Trace, budget_bytes: int, policy: str, started: float, status: SolveStatus,
                stats: dict) -> Plan:
    """A plan without residencies: the policy found nothing within the budget."""
    return Plan(trace.name, trace.digest(), policy, status, 0, trace.lower_bound_bytes(), (),
                time.perf_counter() - started, budget_bytes, dict(stats))
