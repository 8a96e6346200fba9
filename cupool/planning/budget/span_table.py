"""Where a residency may go in the arena of a plan being edited (:mod:`.multilevel_moves`):
the other residencies as arrays, asked whether a byte range is free over some ops and for
the best-fit hole, without a Python loop over every residency of the plan.

A move that re-places several residencies asks once per residency; the table is made once
for the move and the residencies it has placed are added as it goes (:meth:`add`).
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np

from cupool.sim.replay_input import int_columns

try:
    from cupool.planning.budget.engine import _spanfit
except ImportError:  # the optional C extension is not built: NumPy answers the same
    _spanfit = None

COMPILED_AVAILABLE = _spanfit is not None
"""Whether the C extension ``_spanfit`` is built (:meth:`SpanTable.best_fit` then uses it)."""


class SpanTable:
    """Residencies ``[start, end)`` (ops) holding bytes ``[low, high)``: those of ``spans``
    (per buffer, objects with ``start``, ``end``, ``offset``; a buffer's size from
    ``sizes``) but those whose ``id()`` is in ``skip``, then those :meth:`add` gives."""

    def __init__(self, spans: dict, sizes: dict[int, int], skip: set[int]) -> None:
        starts, ends, lows, highs = [], [], [], []
        for b, spans_of_b in spans.items():
            size = sizes[b]
            for span in spans_of_b:
                if id(span) not in skip:
                    starts.append(span.start)
                    ends.append(span.end)
                    lows.append(span.offset)
                    highs.append(span.offset + size)
        self._set_rows([np.array(column, dtype=np.int64)
                        for column in (starts, ends, lows, highs)])

    def _set_rows(self, columns: list[np.ndarray]) -> None:
        # the rows in columns with room to grow: rows [0, _count) are the residencies, the
        # first _sorted of them in address order (sorted for the compiled best fit)
        self._columns = columns
        self._count = len(columns[0])
        self._sorted = 0

    @classmethod
    def of_columns(cls, starts: np.ndarray, ends: np.ndarray, lows: np.ndarray,
                   highs: np.ndarray) -> SpanTable:
        """The table of the residencies given as ``int64`` columns (ops ``[starts, ends)``,
        bytes ``[lows, highs)``; the table does not change them)."""
        table = object.__new__(cls)
        table._set_rows([starts, ends, lows, highs])
        return table

    def add(self, start: int, end: int, offset: int, size: int) -> None:
        """A residency placed since: ops ``[start, end)``, bytes ``[offset, offset + size)``."""
        count = self._count
        if count == len(self._columns[0]):  # full: room for as many again (a new array)
            self._columns = [np.concatenate((column, np.zeros(max(count, 8), np.int64)))
                             for column in self._columns]
        for column, value in zip(self._columns, (start, end, offset, offset + size),
                                 strict=True):
            column[count] = value
        self._count = count + 1

    def _during(self, start: int, end: int) -> tuple[np.ndarray, ...]:
        """Low byte, high byte and end op of every residency sharing an op with
        ``[start, end)``."""
        starts, ends, lows, highs = (column[:self._count] for column in self._columns)
        during = (starts < end) & (start < ends)
        return lows[during], highs[during], ends[during]

    def fits(self, offset: int, size: int, start: int, end: int, budget: int) -> bool:
        """``[offset, offset + size)`` lies within ``budget`` and no residency holds a byte
        of it during ops ``[start, end)``."""
        if offset < 0 or offset + size > budget:
            return False
        lows, highs, _ends = self._during(start, end)
        return not bool(np.any((lows < offset + size) & (highs > offset)))

    def best_fit(self, size: int, start: int, end: int, budget: int) -> int | None:
        """The best-fit smallest hole in ``[0, budget)`` free during ``[start, end)``; inside
        it, the edge next to the neighbour below when that one dies at or after the one
        above, else the upper edge (``None``: no hole fits). Holes are scanned in address
        order (residencies sorted by low byte, high byte, end op; a residency raises the
        scan's cursor only where it reaches above it); ties: the lowest hole."""
        if _spanfit is not None:
            if not self._sorted and self._count:  # once, before the first query
                self._sort_rows()
            return _spanfit.best_fit(*self._columns, self._count, self._sorted, size, start,
                                     end, budget)
        return self.best_fit_numpy(size, start, end, budget)

    def _sort_rows(self) -> None:
        """Put the rows in address order (low byte, high byte, end op): the compiled best
        fit then scans the rows a query meets without sorting them (those added later are
        sorted per query, fewer)."""
        starts, ends, lows, highs = (column[:self._count] for column in self._columns)
        order = np.lexsort((ends, highs, lows))
        self._columns = [column[order] for column in (starts, ends, lows, highs)]
        self._sorted = self._count

    def best_fit_numpy(self, size: int, start: int, end: int, budget: int) -> int | None:
        """:meth:`best_fit` in NumPy (where the C extension ``_spanfit`` is not built; the
        same answers)."""
        lows, highs, ends = self._during(start, end)
        order = np.lexsort((ends, highs, lows))
        lows = np.append(lows[order], budget)
        highs = np.append(highs[order], budget)
        ends = np.append(ends[order], -1)
        count = len(lows)
        reach = np.maximum.accumulate(highs)
        cursor = np.zeros(count, dtype=np.int64)  # the scan's cursor before each row
        cursor[1:] = np.maximum(reach[:-1], 0)
        raises = highs > cursor  # the rows that move the cursor up
        setter = np.maximum.accumulate(np.where(raises, np.arange(count), -1))
        last = np.full(count, -1, dtype=np.int64)  # the last row that moved it, before each
        last[1:] = setter[:-1]
        below_end = np.where(last >= 0, ends[np.maximum(last, 0)], -1)
        holes = lows - cursor
        fitting = np.flatnonzero(holes >= size)
        if not len(fitting):
            return None
        k = int(fitting[np.argmin(holes[fitting])])
        return int(cursor[k]) if below_end[k] >= ends[k] else int(lows[k] - size)


def order_sizes(order: list[int], sizes: dict[int, int]) -> np.ndarray:
    """The size of each buffer of ``order``, as an ``int64`` column."""
    return np.fromiter((sizes[b] for b in order), np.int64, len(order))


class Residencies(NamedTuple):
    """A plan's residencies as ``int64`` columns, buffer after buffer in ``order``: buffer
    ``b``'s residency ``k`` is row ``first[position[b]] + k``."""

    position: dict[int, int]
    first: np.ndarray
    buffer_ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    lows: np.ndarray
    highs: np.ndarray

    @classmethod
    def of(cls, order: list[int], position: dict[int, int], parts: list[tuple],
           sizes: dict[int, int] | np.ndarray) -> Residencies:
        """From ``parts[i]``, the residencies (``buffer_id``, ``start``, ``end``,
        ``offset``) of buffer ``order[i]``; ``position[b]``: ``b``'s index in ``order``;
        ``sizes``: by buffer id, or already as :func:`order_sizes` of ``order``."""
        counts = np.fromiter(map(len, parts), np.int64, len(parts))
        rows = tuple(itertools.chain.from_iterable(parts))
        ids, starts, ends, lows = int_columns(rows, ("buffer_id", "start", "end", "offset"))
        if not isinstance(sizes, np.ndarray):
            sizes = order_sizes(order, sizes)
        size = np.repeat(sizes, counts)
        return cls(position, np.cumsum(counts) - counts, ids, starts, ends, lows, lows + size)

    def row(self, buffer_id: int, index: int) -> int:
        return int(self.first[self.position[buffer_id]]) + index

    def table(self, skip: list[int], during: tuple[int, int] | None = None) -> SpanTable:
        """The :class:`SpanTable` of every row but those of ``skip`` (a table answers the
        same for its rows in any order); with ``during`` (ops ``[start, end)``), of those
        sharing an op with it alone: a table asked only about ops within ``during`` answers
        the same without the others."""
        columns = (self.starts, self.ends, self.lows, self.highs)
        if skip or during is not None:
            keep = np.ones(len(self.starts), dtype=bool)
            keep[skip] = False
            if during is not None:
                keep &= (self.starts < during[1]) & (during[0] < self.ends)
            columns = tuple(column[keep] for column in columns)
        return SpanTable.of_columns(*columns)
