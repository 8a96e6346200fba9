"""What a budget planner decides, before any offset exists: which idle gaps of which
buffers are spent off the device, and how (swap or recompute).

A buffer is *idle* between two consecutive uses; a persistent buffer is also idle across
the iteration boundary, from its last use to its first use of the next iteration (a *wrap
gap*). A planner takes some idle gaps off the device (:class:`Gap`) and may re-produce a
dropped input for one op so a recompute can read it (a chain recompute); together they
are a :class:`Schedule`, which :mod:`.residency` turns into residencies and actions::

    op:        0   1   2   3   4   5   6   7
    uses of b:     u           u       u
    idle gaps:     (1 ─────── 4)(4 ── 6)         candidates: (b, 1, 4) and (b, 4, 6)
    Gap(b, 1, 4, swap, resident_until=2, resident_from=3): the copy out has landed by
    op 2, the swap-in is triggered at op 3 and due at op 4
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Buffer, Trace

SWAP = "swap"
RECOMPUTE = "recompute"


class OpSpan(NamedTuple):
    """Ops ``[start, end)``."""

    start: int
    end: int


class IdleGap(NamedTuple):
    """Buffer ``buffer_id`` is not used between ``prev_use`` and ``next_use`` (two
    consecutive uses; ``next_use <= prev_use``: across the iteration boundary, from the
    last use to the first). A candidate for taking the buffer off the device."""

    buffer_id: int
    prev_use: int
    next_use: int

    @property
    def wraps(self) -> bool:
        return self.next_use <= self.prev_use

    def idle_at(self, op: int) -> bool:
        """Whether ``op`` lies strictly between the two uses (across the iteration
        boundary for a wrap gap)."""
        p, q = self.prev_use, self.next_use
        return p < op < q if q > p else (op > p or op < q)


@dataclass(frozen=True)
class Gap:
    """Buffer ``buffer_id`` is off the device between uses ``prev_use`` and ``next_use``
    (an :class:`IdleGap` taken, by ``mode``: :data:`SWAP` or :data:`RECOMPUTE`).

    The residency before the gap ends at ``resident_until`` (exclusive, ``> prev_use``:
    a swap keeps the bytes until its copy out has landed); the one after it starts at
    ``resident_from`` (``<= next_use``: a swap-in's trigger op; a recompute's ``next_use``,
    or the earlier op where a segment's batch re-runs it, :mod:`.checkpoint`).
    A *wrap gap* (persistent buffers only) has ``next_use <= prev_use``: off the device
    from ``resident_until`` to the end of the iteration and from op 0 to ``resident_from``
    (ZeRO-Offload style: swapped out after the last use, back before the first). A wrap
    gap with ``resident_from >= resident_until`` is brought back in the iteration's tail,
    for the next one (a read-only weight streamed across the boundary): off the device
    only during ``[resident_until, resident_from)``. A wrap gap taken in the iteration's
    *head* (:attr:`head`: ``resident_until <= resident_from <= next_use``) stays on the
    device across the boundary, is copied out after op 0 (its bytes held until the copy
    has landed, by ``resident_until``) and back for its first use: off the device only
    during ``[resident_until, resident_from)``, with no copy at the iteration's end.
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

    @property
    def head(self) -> bool:
        """A wrap gap taken in the iteration's head (copied out after op 0)."""
        return self.wraps and self.resident_until <= self.resident_from <= self.next_use


class ChainRecompute(NamedTuple):
    """Re-produce ``buffer_id`` just before ``op``, resident for that op only: an input a
    recompute reads there that was itself dropped. ``depth`` is its distance from the
    recompute that needs it (deeper links run first)."""

    buffer_id: int
    op: int
    depth: int


@dataclass
class Schedule:
    """What a planner decided: the gaps taken, per buffer, and the chain recomputes."""

    gaps: dict[int, list[Gap]] = field(default_factory=dict)
    chains: list[ChainRecompute] = field(default_factory=list)

    def add(self, gap: Gap) -> None:
        self.gaps.setdefault(gap.buffer_id, []).append(gap)

    def count(self, mode: str) -> int:
        return sum(g.mode == mode for gaps in self.gaps.values() for g in gaps)


def base_interval(trace: Trace, buffer) -> OpSpan:
    """The residency a buffer needs with no gap: ``[uses[0], uses[-1] + 1)`` for a temporary
    buffer (its lifetime when it has no uses), ``[0, num_ops)`` for a persistent one."""
    if buffer.kind == PERSISTENT:
        return OpSpan(0, trace.num_ops)
    if not buffer.uses:
        return OpSpan(buffer.start, buffer.end)
    return OpSpan(buffer.uses[0], buffer.uses[-1] + 1)


def gaps_of(trace: Trace, buffer) -> list[IdleGap]:
    """The idle gaps of a buffer: between consecutive uses with at least one op between
    them; for a persistent buffer also the wrap gap (last use, first use) when it spans at
    least one op."""
    uses = sorted(set(buffer.uses))
    out = [IdleGap(buffer.id, p, q) for p, q in itertools.pairwise(uses) if q - p > 1]
    if buffer.kind == PERSISTENT and uses and (trace.num_ops - 1 - uses[-1]) + uses[0] > 0:
        out.append(IdleGap(buffer.id, uses[-1], uses[0]))
    return out



def leaves_clean(buffer: Buffer, gaps: list[Gap], prev_use: int) -> bool:
    """True when ``buffer`` leaves the device after ``prev_use`` with a valid host copy
    (so it is dropped, not copied out), ``gaps`` being its gaps taken so far: it is
    read-only (its host copy never goes stale), or its residency holding ``prev_use`` is
    entered by a swap-in (one already planned, or, leaving by the wrap gap of a persistent
    buffer without an earlier one, the wrap gap's own swap-in) and no op has written it
    since. A read-only weight used once per iteration is thus streamed: in before its use,
    dropped after it. Unknown ``writes`` are never clean here, so traces without them plan
    as before."""
    if buffer.writes is None:
        return False
    if buffer.read_only:
        return True
    entry = None  # the gap before prev_use that ends last (the first of ties)
    for g in gaps:
        if (g.next_use <= prev_use and not g.wraps
                and (entry is None or g.next_use > entry.next_use)):
            entry = g
    if entry is not None:
        if entry.mode != SWAP:
            return False
        return not buffer.written_in(entry.resident_from, prev_use)
    if buffer.kind != PERSISTENT:
        return False  # its first residency, where it is produced
    wrap = next((g for g in gaps if g.wraps), None)
    if wrap is not None:
        return wrap.mode == SWAP and not buffer.written_in(wrap.resident_from, prev_use)
    if buffer.uses[-1] != prev_use:
        return False  # kept since op 0: no host copy yet
    return not buffer.written_in(buffer.uses[0], prev_use)

@dataclass(frozen=True)
class TraceIndex:
    """What the planners read of a trace in every run, made once per trace
    (:func:`trace_index`; read only): every idle gap (:func:`gaps_of`, in buffer order),
    those of temporary buffers alone, each buffer's :func:`base_interval`, the buffers,
    their sizes and their recipes (``(op, inputs)``, buffers with one only) by id, and the
    bytes resident at each op with no gap taken (``base_live``). ``derived`` holds what
    other modules compute from the trace (and immutable arguments) once, each under a key
    of its own."""

    gaps: tuple[IdleGap, ...]
    temporary_gaps: tuple[IdleGap, ...]
    base: dict[int, OpSpan]
    by_id: dict[int, Buffer]
    sizes: dict[int, int]
    recipes: dict[int, tuple[int, tuple[int, ...]]]
    base_live: np.ndarray
    derived: dict = field(default_factory=dict)


_TRACE_INDEX: dict = {}  # id(trace) -> (weak reference, TraceIndex)


def trace_index(trace: Trace) -> TraceIndex:
    """The :class:`TraceIndex` of ``trace``, kept while the trace lives (traces are
    immutable; a planner runs its greedy many times on one)."""
    entry = _TRACE_INDEX.get(id(trace))
    if entry is None or entry[0]() is not trace:
        if len(_TRACE_INDEX) >= 8:
            _TRACE_INDEX.clear()
        entry = _TRACE_INDEX[id(trace)] = (weakref.ref(trace), _index(trace))
    return entry[1]


def _index(trace: Trace) -> TraceIndex:
    gaps, temporary = [], []
    for b in trace.buffers:
        found = gaps_of(trace, b)
        gaps.extend(found)
        if b.kind != PERSISTENT:
            temporary.extend(found)
    base = {b.id: base_interval(trace, b) for b in trace.buffers}
    change = np.zeros(trace.num_ops + 1, dtype=np.int64)
    for b in trace.buffers:
        start, end = base[b.id]
        change[start] += b.size
        change[end] -= b.size
    live = np.cumsum(change[:-1])
    live.flags.writeable = False
    return TraceIndex(tuple(gaps), tuple(temporary), base, {b.id: b for b in trace.buffers},
                      {b.id: b.size for b in trace.buffers},
                      {b.id: (b.recompute.op, b.recompute.inputs) for b in trace.buffers
                       if b.recompute is not None}, live)
