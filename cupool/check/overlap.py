"""The address × time overlap sweep both rule sets use: the first two byte ranges held
during a common op.

A static plan holds each buffer's bytes for its whole lifetime; a swapping plan holds a
residency's bytes for the residency's ops. Both are :class:`Occupancy` rows, bytes
``[low, high)`` during ops ``[start, end)``, and two rows clash when both ranges
intersect. :func:`first_overlap` sweeps over ops: at each op, releases (``end == op``)
come before arrivals (``start == op``), so a range may take bytes released at the same
op. The held ranges are kept sorted by address, and an arriving range is compared only
with its two address neighbours. That is exact, not a heuristic: while no clash has been
found the held ranges are disjoint, and a new range intersects some held range if and
only if it intersects one of its neighbours in address order::

    offset
      12 |        [b5............]
       8 |  [b3.....)   [b4......]
       4 |  [b1...)[b2....]
       0 +--0-----3-----------9----> op
    b2 arrives at op 3, where b1 has just been released: they may share bytes.

The sweep is deterministic, so each rule set words the same clash the same way every
time: arrivals at one op are taken in the order the rows were given, and the lower
address neighbour is compared first.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

_RELEASE, _ARRIVE = 0, 1  # at one op, releases sort before arrivals


class Occupancy(NamedTuple):
    """Buffer ``buffer_id`` holds bytes ``[low, high)`` during ops ``[start, end)``.

    Rows compare as tuples (``low``, then ``high``, ``buffer_id``, ``start``): the sweep
    keeps held rows in that order, and no two rows of one plan compare equal.
    """

    low: int
    high: int
    buffer_id: int
    start: int
    end: int


@dataclass(frozen=True)
class Overlap:
    """``arriving`` takes its bytes at op ``op`` while ``held`` (an earlier arrival) still
    holds bytes ``[shared_low, shared_high)`` of them."""

    op: int
    held: Occupancy
    arriving: Occupancy

    @property
    def shared_low(self) -> int:
        return max(self.held.low, self.arriving.low)

    @property
    def shared_high(self) -> int:
        return min(self.held.high, self.arriving.high)


def first_overlap(rows: Sequence[Occupancy]) -> Overlap | None:
    """The first clash of the sweep over ``rows``, or ``None`` when no two rows held
    during a common op share a byte. A row with ``start >= end`` holds no op."""
    events = []
    for index, row in enumerate(rows):
        if row.start < row.end:
            events.append((row.end, _RELEASE, index))
            events.append((row.start, _ARRIVE, index))
    events.sort()
    held: list[Occupancy] = []  # sorted by address
    for op, kind, index in events:
        row = rows[index]
        position = bisect.bisect_left(held, row)
        if kind == _RELEASE:
            del held[position]
            continue
        for neighbour in held[max(0, position - 1):position + 1]:
            if row.low < neighbour.high and neighbour.low < row.high:
                return Overlap(op, neighbour, row)
        held.insert(position, row)
    return None
