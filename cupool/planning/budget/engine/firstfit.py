"""``firstfit``: offsets for residencies by first fit, a persistent buffer's stay across
the iteration boundary placed as one item.

The last resort of the budget planners' placement (:func:`~.placement.place_schedule`):
the static solvers place the two halves of such a stay (its first residency, from op 0,
and its last, to the end of the iteration) apart and then tie them, which fails when the
budget is tight. Here each *item* (one residency, or the two halves of a stay) goes to the
lowest offset free during every op it spans::

    bytes ^
          |  [== first ==)                  [=== last ===)   one item: one offset, free
          |        [===== a =====)   [== b ==)               at ops [0, 3) and [9, 12)
          +-------------------------------------------------> op

Items are tried in three orders, the first whose placement fits the budget kept
(:func:`place_pairs_first_fit`). One order is placed by the C extension ``_firstfit``
when it is built (``pip install -e .`` with a C compiler: a segment tree over time slots
finds the placed residencies an item overlaps at about the cost of their number), else by
NumPy masks over every residency; both give the same offsets and the same arena, on
success and on failure.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from cupool.core.vocabulary import Trace
from cupool.errors import SolverError
from cupool.planning.budget.engine.placement import PlacedOffsets, boundary_pairs, lowest_gap

try:
    from cupool.planning.budget.engine import _firstfit
except ImportError:  # the optional C extension is not built
    _firstfit = None

COMPILED_AVAILABLE = _firstfit is not None
"""Whether the C extension ``_firstfit`` is built (``native=True`` requires it)."""

_INT64 = np.iinfo(np.int64)


def _require_compiled(native: bool | None) -> None:
    if native and _firstfit is None:
        raise SolverError("native=True but the C extension "
                          "cupool.planning.budget.engine._firstfit is not built "
                          "(pip install -e . with a C compiler)")


class Layout(NamedTuple):
    """The residencies as arrays, by index: op ranges ``[starts, ends)`` and ``sizes`` in
    bytes; the same ranges in *slots* (the gaps between consecutive distinct endpoints,
    ``[first, last)`` of ``num_slots``), where two residencies overlap exactly when their
    op ranges do."""

    starts: np.ndarray
    ends: np.ndarray
    sizes: np.ndarray
    first: np.ndarray
    last: np.ndarray
    num_slots: int

    @classmethod
    def of(cls, trace: Trace, intervals: list) -> Layout:
        """The layout of ``intervals`` (:class:`~.residency.ResidencyInterval` s of
        ``trace``)."""
        starts = np.array([r.start for r in intervals], dtype=np.int64)
        ends = np.array([r.end for r in intervals], dtype=np.int64)
        sizes = np.array([trace.buffer(r.buffer_id).size for r in intervals], dtype=np.int64)
        times = np.unique(np.concatenate([starts, ends]))
        first = np.searchsorted(times, starts).astype(np.int64)
        last = np.searchsorted(times, ends).astype(np.int64)
        return cls(starts, ends, sizes, first, last, max(len(times) - 1, 0))


def place_pairs_first_fit(trace: Trace, intervals: list, budget_bytes: int,
                          native: bool | None = None) -> PlacedOffsets:
    """Offsets for the residencies, each persistent buffer's stay across the iteration
    boundary (:func:`~.placement.boundary_pairs`) placed as one item at the lowest
    offset free during every op it spans: largest first, else longest (in ops) first, else
    earliest first (longest of those first).
    The static solvers place the two halves of such a stay apart and then tie them,
    which fails when the budget is tight; placing them together does not.

    ``native``: ``None`` places with the C extension when it is built, ``True`` requires
    it (:class:`~cupool.errors.SolverError` if not), ``False`` uses NumPy; the offsets and
    the arena are the same."""
    _require_compiled(native)
    if not intervals:
        return PlacedOffsets(np.zeros(0, dtype=np.int64), 0)
    layout = Layout.of(trace, intervals)
    items = Items.of(trace, intervals, layout)
    compiled = _compiled(layout, native)
    placed = PlacedOffsets(None, 0)
    for order in items.orders():
        if compiled:
            placed = _first_fit_compiled(layout, items.packed(order), budget_bytes)
        else:
            placed = _first_fit_numpy(layout, items.in_order(order), budget_bytes)
        if placed.offsets is not None:
            break
    return placed


class PackedItems(NamedTuple):
    """Items in order, packed for the C extension: item ``i`` is the residencies
    ``members[ptr[i]:ptr[i + 1]]`` (``int64`` arrays)."""

    ptr: np.ndarray
    members: np.ndarray

    @classmethod
    def of(cls, items: list[tuple[int, ...]]) -> PackedItems:
        ptr = np.zeros(len(items) + 1, dtype=np.int64)
        ptr[1:] = np.cumsum([len(ks) for ks in items])
        members = np.fromiter((k for ks in items for k in ks), dtype=np.int64,
                              count=int(ptr[-1]))
        return cls(ptr, members)


class Items(NamedTuple):
    """The items of :func:`place_pairs_first_fit`, by their first member (``heads``,
    ascending): the second member of each (a stay's last residency; ``-1`` for an item of
    one residency), its size (of its first member), the ops its members span together
    (``spans``) and the first op of any of them (``firsts``)."""

    heads: np.ndarray
    seconds: np.ndarray
    sizes: np.ndarray
    spans: np.ndarray
    firsts: np.ndarray

    @classmethod
    def of(cls, trace: Trace, intervals: list, layout: Layout) -> Items:
        """Each :func:`~.placement.boundary_pairs` pair one item, every other residency
        one."""
        m = len(intervals)
        second_of = np.full(m, -1, dtype=np.int64)
        is_second = np.zeros(m, dtype=bool)
        for pair in boundary_pairs(trace, intervals):
            second_of[pair.first] = pair.last
            is_second[pair.last] = True
        heads = np.flatnonzero(~is_second)
        seconds = second_of[heads]
        paired = seconds >= 0
        other = np.where(paired, seconds, heads)
        lengths = layout.ends - layout.starts
        return cls(heads, seconds, layout.sizes[heads],
                   lengths[heads] + np.where(paired, lengths[other], 0),
                   np.minimum(layout.starts[heads], layout.starts[other]))

    def orders(self) -> tuple[np.ndarray, ...]:
        """The item orders tried, in turn: largest first, else longest (in ops) first,
        else earliest first (longest of those first); ties by head."""
        index = np.arange(len(self.heads))
        return (np.lexsort((index, -self.sizes)),
                np.lexsort((index, -self.sizes, -self.spans)),
                np.lexsort((index, -self.sizes, -self.spans, self.firsts)))

    def in_order(self, order: np.ndarray) -> list[tuple[int, ...]]:
        """The items in ``order`` as tuples of residency indices."""
        return [(head,) if second < 0 else (head, second)
                for head, second in zip(self.heads[order].tolist(),
                                        self.seconds[order].tolist(), strict=True)]

    def packed(self, order: np.ndarray) -> PackedItems:
        """The items in ``order``, packed: :meth:`in_order` without the tuples."""
        heads, seconds = self.heads[order], self.seconds[order]
        paired = seconds >= 0
        ptr = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(1 + paired, out=ptr[1:])
        members = np.empty(int(ptr[-1]), dtype=np.int64)
        members[ptr[:-1]] = heads
        members[ptr[:-1][paired] + 1] = seconds[paired]
        return PackedItems(ptr, members)


def first_fit(layout: Layout, items: list[tuple[int, ...]], budget_bytes: int,
              native: bool | None = None) -> PlacedOffsets:
    """:func:`place_pairs_first_fit` for one order of its ``items`` (tuples of residency
    indices, each residency in one item, the members of an item of one size): each at the
    lowest offset free during every op its members span (:func:`~.placement.lowest_gap`), or
    ``PlacedOffsets(None, cursor + size)`` for the first item that would end above
    ``budget_bytes``. ``native`` as in :func:`place_pairs_first_fit`; an empty op range
    (``start >= end``), which the slots cannot express, or a size ``<= 0``, where the
    walk of :func:`~.placement.lowest_gap` is not the lowest free offset the extension finds (or
    sizes that could add up past ``int64``), is placed by NumPy unless ``native`` is
    ``True`` (then the extension refuses it)."""
    if _compiled(layout, native):
        return _first_fit_compiled(layout, PackedItems.of(items), budget_bytes)
    return _first_fit_numpy(layout, items, budget_bytes)


def _compiled(layout: Layout, native: bool | None) -> bool:
    """Whether :func:`first_fit` places by the C extension (its docstring)."""
    _require_compiled(native)
    sizes = layout.sizes
    return _firstfit is not None and (native or (
        native is None and bool((layout.starts < layout.ends).all())
        and bool((sizes > 0).all())
        and (not len(sizes) or int(sizes.max()) <= _INT64.max // (2 * len(sizes)))))


def _first_fit_compiled(layout: Layout, items: PackedItems,
                        budget_bytes: int) -> PlacedOffsets:
    """:func:`first_fit` by the C extension."""
    offsets = np.full(len(layout.sizes), -1, dtype=np.int64)
    # an integer end is above the budget exactly when it is above its floor
    budget = (_INT64.max if budget_bytes >= _INT64.max else
              _INT64.min if budget_bytes <= _INT64.min else math.floor(budget_bytes))
    placed, arena = _firstfit.place(layout.first, layout.last, layout.sizes, items.ptr,
                                    items.members, layout.num_slots, budget, offsets)
    return PlacedOffsets(offsets if placed else None, int(arena))


def _first_fit_numpy(layout: Layout, items: list[tuple[int, ...]],
                     budget_bytes: int) -> PlacedOffsets:
    """:func:`first_fit` by NumPy masks over every residency."""
    starts, ends, sizes = layout.starts, layout.ends, layout.sizes
    m = len(sizes)
    offsets = np.full(m, -1, dtype=np.int64)
    for ks in items:
        busy = np.zeros(m, dtype=bool)
        for k in ks:
            busy |= (starts < ends[k]) & (ends > starts[k])
        busy &= offsets >= 0
        size = int(sizes[ks[0]])
        cursor = lowest_gap(offsets[busy], (offsets + sizes)[busy], size)
        if cursor + size > budget_bytes:
            return PlacedOffsets(None, cursor + size)
        offsets[list(ks)] = cursor
    return PlacedOffsets(offsets, int((offsets + sizes).max()))
