"""The vocabulary of cupool: every word the rest of the package speaks, defined once.

Time is the op index. Op ``i`` is the i-th op of one iteration of a repeating
workload. Every interval in cupool is **half-open**: a buffer with
``start = 2, end = 5`` must be allocated while ops 2, 3 and 4 run and is free
again before op 5::

    op:      0   1   2   3   4   5   6
    buf 7:           [=========)            start=2, end=5
    buf 8:                   [=====)        start=4, end=6  (overlaps 7 at op 4)
    buf 9:                       [=====)    start=5, end=7  (may share 7's bytes)

Two buffers *overlap in time* when ``a.start < b.end and b.start < a.end``; a
static plan must then give them disjoint byte ranges ``[offset, offset + size)``.

All objects here are frozen dataclasses of plain values: they cross every
boundary (reader → solver → validator → writer) unchanged.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import Enum

from cupool.core.liveness import peak_live_bytes

PERSISTENT = "persistent"
TEMPORARY = "temporary"
BUFFER_KINDS = (PERSISTENT, TEMPORARY)


@dataclass(frozen=True)
class Op:
    """One step of the iteration. ``duration_us`` is compute time on the trace's device
    (``None`` = unknown); ``flops`` and ``phase`` (``"fw"``, ``"bw"``, ``"opt"``...) are
    optional."""

    name: str
    duration_us: float | None = None
    flops: int | None = None
    phase: str | None = None


@dataclass(frozen=True)
class Recompute:
    """How a buffer can be produced again: re-run op ``op`` from buffers ``inputs``."""

    op: int
    inputs: tuple[int, ...] = ()


@dataclass(frozen=True)
class Buffer:
    """One allocation of the iteration: ``size`` bytes live during ops ``[start, end)``.

    ``uses`` are the sorted op indices that read or write it (all inside the lifetime);
    between uses its bytes may live elsewhere. ``kind`` is ``"persistent"`` (lives across
    iterations: weights, optimizer state) or ``"temporary"``.

    A temporary buffer is produced (written) by its ``start`` op, whether or not the
    recorded uses list it: traces from other systems often list only reads. So when a
    temporary has uses and the first is after ``start``, ``start`` is put in front, and
    every planner, the simulator and the validators see the producer as a use::

        Buffer(7, 64, start=2, end=9, uses=(5, 8)).uses == (2, 5, 8)

    (A buffer with no uses at all, as in a MiniMalloc CSV, stays without: its uses are
    unknown, not empty.)

    ``writes`` are the uses that write it (sorted, a subset of ``uses``); ``None`` means
    unknown: every use may write (so :attr:`write_ops` is ``uses``). A temporary's producer
    writes it, so its ``start`` is put in front of known writes as it is of uses. A
    persistent buffer with ``writes == ()`` is *read-only* (weights during inference): its
    host copy, where it was loaded from, stays valid for ever, so evicting it never copies
    (:class:`SwapOut` with ``drop``). Any buffer not written since its last copy to the
    host is *clean* and is dropped the same way.
    """

    id: int
    size: int
    start: int
    end: int
    uses: tuple[int, ...] = ()
    kind: str = TEMPORARY
    name: str = ""
    recompute: Recompute | None = None
    writes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        uses = self.uses
        if self.kind != PERSISTENT and uses and uses[0] > self.start:
            object.__setattr__(self, "uses", (self.start, *uses))
        writes = self.writes
        if (writes is not None and self.kind != PERSISTENT and self.uses
                and self.uses[0] == self.start and (not writes or writes[0] > self.start)):
            object.__setattr__(self, "writes", (self.start, *writes))

    @property
    def write_ops(self) -> tuple[int, ...]:
        """The ops that may write the buffer: ``writes`` when known, else every use."""
        return self.uses if self.writes is None else self.writes

    @property
    def read_only(self) -> bool:
        """A persistent buffer no op writes (``writes == ()``): its host copy is always
        valid."""
        return self.kind == PERSISTENT and self.writes == ()

    def written_in(self, first_op: int, last_op: int) -> bool:
        """True when an op in ``[first_op, last_op]`` (inclusive) may write the buffer."""
        return any(first_op <= w <= last_op for w in self.write_ops)

    @property
    def lifetime(self) -> int:
        """Number of ops the buffer is allocated for (``end - start``)."""
        return self.end - self.start

    def overlaps(self, other: Buffer) -> bool:
        """True when the two lifetimes share at least one op."""
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True)
class Device:
    """The device a trace's op durations refer to (bandwidths in GB/s)."""

    name: str
    hbm_gbps: float | None = None
    h2d_gbps: float | None = None
    d2h_gbps: float | None = None
    copy_engines: int | None = None


@dataclass(frozen=True)
class Trace:
    """One recorded iteration: its ops (the time axis) and its buffers.

    ``num_ops`` is ``len(ops)``; every buffer satisfies ``0 <= start < end <= num_ops``
    (the readers enforce it). ``source`` says where the trace came from.
    """

    name: str
    ops: tuple[Op, ...]
    buffers: tuple[Buffer, ...]
    source: str = ""
    device: Device | None = None

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    def buffer(self, buffer_id: int) -> Buffer:
        """The buffer with this id (``KeyError`` if absent)."""
        return self._by_id[buffer_id]

    @property
    def _by_id(self) -> dict[int, Buffer]:
        cache = self.__dict__.get("_by_id_cache")
        if cache is None:
            cache = {b.id: b for b in self.buffers}
            object.__setattr__(self, "_by_id_cache", cache)
        return cache

    def ids_with_writes(self) -> frozenset[int]:
        """The ids of the buffers whose ``writes`` are known (not ``None``)."""
        cache = self.__dict__.get("_with_writes_cache")
        if cache is None:
            cache = frozenset(b.id for b in self.buffers if b.writes is not None)
            object.__setattr__(self, "_with_writes_cache", cache)
        return cache

    def lower_bound_bytes(self) -> int:
        """Peak live bytes over the ops: the smallest arena any static plan can have."""
        b = self.buffers
        return peak_live_bytes([x.start for x in b], [x.end for x in b], [x.size for x in b],
                               self.num_ops)

    def digest(self) -> str:
        """A fingerprint of the allocation problem (ids, sizes, lifetimes, op count).

        Plans record it so that a plan is never applied to another trace.
        """
        cached = self.__dict__.get("_digest_cache")
        if cached is None:
            h = hashlib.sha256(f"ops={self.num_ops};".encode())
            for b in self.buffers:
                h.update(f"{b.id},{b.size},{b.start},{b.end};".encode())
            cached = h.hexdigest()[:16]
            object.__setattr__(self, "_digest_cache", cached)
        return cached


class SolveStatus(str, Enum):
    """What a solver proved about its plan.

    - ``optimal``: the arena is proved minimal (it equals the lower bound, or an
      exhaustive search found nothing smaller).
    - ``feasible``: a plan was found (within the capacity, if one was given), not proved minimal.
    - ``over_capacity``: a heuristic plan was found but needs more than the capacity;
      nothing is proved about whether a fitting plan exists.
    - ``infeasible``: proved that no plan fits the capacity.
    - ``timeout``: the time limit ran out before any plan within the capacity was found.
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    OVER_CAPACITY = "over_capacity"
    INFEASIBLE = "infeasible"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class Placement:
    """Buffer ``buffer_id`` occupies bytes ``[offset, offset + size)`` of the arena for its
    whole lifetime."""

    buffer_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class Residency:
    """Buffer ``buffer_id`` holds arena bytes ``[offset, offset + size)`` during ops
    ``[start, end)``. A swapping plan gives a buffer one or more residencies inside its
    lifetime (possibly at different offsets); between them its bytes are on the host
    (after a :class:`SwapOut`) or gone (to be recomputed)::

        op:        0   1   2   3   4   5   6   7
        buffer 4:  [=======)           [=======)     residencies [0, 2) at 0 and [4, 6) at 64
                     ^ SwapOut(4, after_op=0): D2H copy issued when op 0 finishes
                                   ^ SwapIn(4, trigger_op=4, due_op=5): H2D issued when
                                     op 4 is dispatched; op 5 waits for it to land

    How a residency gets its data (checked by :mod:`cupool.check.swapping`):

    - the *first* residency starts at the buffer's ``start``: the buffer is produced there
      by normal execution. Exception: a persistent buffer offloaded across the iteration
      boundary starts the iteration on the host, so its first residency is entered by a
      :class:`SwapIn`, and its last residency must end with a :class:`SwapOut`;
    - every later residency is entered by exactly one :class:`SwapIn` (paired with a
      :class:`SwapOut` from the residency before it) or one :class:`RecomputeAction`,
      at the residency's ``start``.

    The range is *held* from ``start``; it is *released* at ``end``, except that a range
    being copied out by a :class:`SwapOut` is only reusable once that copy has completed:
    whatever lands next in those bytes waits for the copy (the plan orders it: the
    swap-out is issued after an op inside the residency, so before ``end``).
    """

    buffer_id: int
    start: int
    end: int
    offset: int


PINNED = "pinned"
PAGEABLE = "pageable"
HOST_LEVELS = (PINNED, PAGEABLE)
"""Host memory levels a swap may use: page-locked (``pinned``, the default: copies run at
link speed) or ordinary ``pageable`` memory (copies staged by the driver: slower, more
latency; see :mod:`cupool.sim.cost`). A swap-in reads the level its swap-out wrote."""


@dataclass(frozen=True, slots=True)
class SwapOut:
    """Copy the buffer to host memory (``level``: pinned unless said) on the D2H stream,
    issued right after op
    ``after_op`` finishes. ``after_op`` lies inside the residency it leaves
    (``start <= after_op < end``) and at or after that residency's last use (uses may
    write: a write after the copy started would be lost). The residency's device bytes
    may be reused only once the copy completed.

    With ``drop`` the buffer is *clean* (its host copy on ``level`` is still valid: a
    read-only persistent buffer, or a residency entered by a :class:`SwapIn` that no op
    has written since, see :attr:`Buffer.writes`): nothing is copied, no link time is
    spent, and the device bytes are free at the residency's end."""

    buffer_id: int
    after_op: int
    level: str = PINNED
    drop: bool = False


@dataclass(frozen=True, slots=True)
class SwapIn:
    """Copy the buffer back on the H2D stream into the residency that begins at
    ``trigger_op``, issued when op ``trigger_op`` is dispatched (its predecessor finished),
    or later when the bytes it lands in are still being copied out. Op ``due_op``
    (``trigger_op <= due_op <=`` the residency's first use) waits for it; uses in
    ``[trigger_op, due_op)`` are invalid (the data is not there yet). ``level`` is the
    host level the bytes come from (that of the paired :class:`SwapOut`)."""

    buffer_id: int
    trigger_op: int
    due_op: int
    level: str = PINNED


@dataclass(frozen=True, slots=True)
class RecomputeAction:
    """Produce the buffer again just before op ``before_op`` (the start of the residency
    it fills) by re-running its producing op (the trace's ``recompute.op``), on the compute
    stream, for that op's duration. The producer's inputs must be resident with valid
    data at ``before_op``; several recomputes before the same op run in plan order, so a
    chain recomputes the inputs first."""

    buffer_id: int
    before_op: int


Action = SwapOut | SwapIn | RecomputeAction
"""Anything a plan tells the runtime to do besides allocating: swaps and recomputation."""


@dataclass(frozen=True)
class Plan:
    """A plan for one trace: where every buffer lives in an arena of ``arena_bytes``.

    A *static* plan has one :class:`Placement` per buffer for its whole lifetime and no
    residencies or actions. A *swapping* plan (made for a ``capacity_bytes`` budget below
    the lower bound) has ``residencies`` instead of placements, and ``actions``.
    ``trace_digest`` ties the plan to its trace (:meth:`Trace.digest`). ``arena_bytes`` is
    the highest byte any placement or residency reaches (``max(offset + size)``).
    """

    trace_name: str
    trace_digest: str
    solver: str
    status: SolveStatus
    arena_bytes: int
    lower_bound_bytes: int
    placements: tuple[Placement, ...]
    solve_seconds: float = 0.0
    capacity_bytes: int | None = None
    stats: dict = field(default_factory=dict, compare=False)
    residencies: tuple[Residency, ...] = ()
    actions: tuple[Action, ...] = ()

    @property
    def is_static(self) -> bool:
        """True for a plan of placements only (no residencies, no actions)."""
        return not self.residencies and not self.actions

    def offsets(self) -> dict[int, int]:
        """``{buffer_id: offset}``."""
        return {p.buffer_id: p.offset for p in self.placements}

    @property
    def ratio(self) -> float:
        """``arena_bytes / lower_bound_bytes`` (1.0 is optimal; 1.0 for an empty trace)."""
        return self.arena_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0


def plan_residencies(trace: Trace, plan: Plan) -> tuple[Residency, ...]:
    """The residencies of ``plan``: its own for a swapping plan; for a static plan, one
    per placed buffer covering the buffer's whole lifetime."""
    if not plan.is_static:
        return plan.residencies
    return tuple(Residency(p.buffer_id, trace.buffer(p.buffer_id).start,
                           trace.buffer(p.buffer_id).end, p.offset) for p in plan.placements)
