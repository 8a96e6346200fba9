"""The plain records of the planning state (:mod:`.state`): a buffer's holes and their
index, a swap's window, and what a recompute takes (its chain, its links, the swap-ins it
moves earlier, and the cached walk over its inputs)."""

from __future__ import annotations

import bisect
import itertools
from typing import NamedTuple

from cupool.planning.budget.engine.schedule import Gap

WRAP = "wrap"
"""The :class:`Hole` kind of a swap across the iteration boundary."""


class Hole(NamedTuple):
    """A buffer's data is not on the device during ops ``[start, end)``, because of a
    ``kind`` (:data:`~.schedule.SWAP` or :data:`~.schedule.RECOMPUTE`) gap. A swap's bytes
    come back at its trigger but its data is valid only from its due op, so the hole runs
    to the due op. A :data:`WRAP` hole is ``[start, num_ops)`` and ``[0, end)``."""

    start: int
    end: int
    kind: str


class HoleIndex(NamedTuple):
    """A buffer's holes as :meth:`~.state.PlanState.resident` reads them: its first
    :data:`WRAP` hole, and the others by start op (``starts``) when no two of them share an
    op (``disjoint``: then at most one holds an op, found by bisection), else in the order
    they were taken, looked through one by one."""

    wrap: Hole | None
    holes: list[Hole]
    starts: list[int]
    disjoint: bool

    @classmethod
    def of(cls, holes: list[Hole]) -> HoleIndex:
        wrap = next((h for h in holes if h.kind == WRAP), None)
        inner = [h for h in holes if h.kind != WRAP]
        ordered = sorted(inner, key=lambda h: (h.start, h.end))
        disjoint = all(h.end > h.start for h in ordered) and all(
            a.end <= b.start for a, b in itertools.pairwise(ordered))
        if disjoint:
            return cls(wrap, ordered, [h.start for h in ordered], True)
        return cls(wrap, inner, [], False)

    def added(self, hole: Hole) -> HoleIndex | None:
        """The index once ``hole`` is taken after the others (``None``: build it afresh,
        :meth:`of`); the lists of this one are reused."""
        if hole.kind == WRAP:
            return self if self.wrap is not None else self._replace(wrap=hole)
        if not self.disjoint:
            self.holes.append(hole)
            return self
        k = bisect.bisect_right(self.starts, hole.start)
        if (hole.end <= hole.start or (k and self.holes[k - 1].end > hole.start)
                or (k < len(self.holes) and hole.end > self.holes[k].start)):
            return None
        self.holes.insert(k, hole)
        self.starts.insert(k, hole.start)
        return self

    def at(self, op: int) -> Hole | None:
        """The first (non-wrap) hole, in the order taken, that holds ``op``."""
        if self.disjoint:
            k = bisect.bisect_right(self.starts, op) - 1
            if k >= 0 and op < self.holes[k].end:
                return self.holes[k]
            return None
        return next((h for h in self.holes if h.start <= op < h.end), None)


class SwapWindow(NamedTuple):
    """One way to swap a gap (:meth:`~.state.PlanState.swap_window`), times in µs.

    The bytes stay resident until op ``resident_until`` and are back from op ``trigger``;
    the copy out is issued at ``out_issue_us`` and takes ``out_us``, the copy in is issued
    at ``in_issue_us`` (the trigger op's start), takes ``in_us`` and is due at ``due_us``
    (the next use's start); ``late_us`` is the estimated waiting a late copy adds (0: on
    time)."""

    resident_until: int
    trigger: int
    out_issue_us: float
    out_us: float
    in_issue_us: float
    in_us: float
    due_us: float
    late_us: float


class ChainLink(NamedTuple):
    """A dropped input re-produced for a recompute, ``depth`` links away from it."""

    buffer_id: int
    depth: int


class SwapAdvance(NamedTuple):
    """Move the swap-in of ``gap`` to ``trigger`` so its data is back for an earlier op."""

    gap: Gap
    trigger: int


class RecomputeChain(NamedTuple):
    """What recomputing a buffer before an op takes (:meth:`~.state.PlanState.chain`): ``cost_us``
    of compute (its producer and every link), the dropped inputs re-made with it
    (``links``), and the swapped-out inputs brought back earlier (``advances``)."""

    cost_us: float
    links: list[ChainLink]
    advances: list[SwapAdvance]


class ChainWalk(NamedTuple):
    """The part of a :class:`RecomputeChain` that depends only on where buffers are
    resident (:meth:`~.state.PlanState._chain_walk`): the swapped-out inputs whose swap-ins must
    move earlier (in the order the walk met them), then ``cost_us`` and ``links``, each
    the fields of a :class:`ChainLink` (``cost_us`` ``None``: some input cannot be re-made
    at the op)."""

    swapped: tuple[int, ...]
    cost_us: float | None
    links: tuple[tuple[int, int], ...]
