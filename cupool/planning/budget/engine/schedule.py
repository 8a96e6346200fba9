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
    Gap:           [1 swapped off: resident until 2, back from trigger 3, due 4]
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from cupool.core.vocabulary import PERSISTENT, Trace

SWAP = "swap"
RECOMPUTE = "recompute"


@dataclass(frozen=True)
class Gap:
    """Buffer ``buffer_id`` is off the device between uses ``prev_use`` and ``next_use``.

    The residency before the gap ends at ``resident_until`` (exclusive, ``> prev_use``:
    a swap keeps the bytes until its copy out has landed); the one after it starts at
    ``resident_from`` (``<= next_use``: a swap-in's trigger op; a recompute's ``next_use``,
    or the earlier op where a segment's batch re-runs it, :mod:`.checkpoint`).
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


def gaps_of(trace: Trace, buffer, min_hole: int = 1):
    """Candidate idle gaps ``(prev_use, next_use)`` of a buffer: between consecutive uses
    with at least ``min_hole`` ops between them; for a persistent buffer also the wrap gap
    ``(last use, first use)`` when it spans at least ``min_hole`` ops."""
    uses = sorted(set(buffer.uses))
    out = [(p, q) for p, q in itertools.pairwise(uses) if q - p - 1 >= min_hole]
    if buffer.kind == PERSISTENT and uses and (trace.num_ops - 1 - uses[-1]) + uses[0] >= min_hole:
        out.append((uses[-1], uses[0]))
    return out
