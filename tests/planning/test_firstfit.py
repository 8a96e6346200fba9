"""The pair first-fit placement (:mod:`cupool.planning.budget.engine.firstfit`): the
compiled path (``_firstfit.c``) and the NumPy path give the same offsets and the same arena,
on success and on failure, and both equal a naive reference written with plain loops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cupool.core.vocabulary import PERSISTENT, TEMPORARY, Buffer, Op, Trace
from cupool.errors import SolverError
from cupool.planning.budget.engine import firstfit
from cupool.planning.budget.engine.firstfit import (
    COMPILED_AVAILABLE,
    Items,
    Layout,
    PackedItems,
    first_fit,
    place_pairs_first_fit,
)
from cupool.planning.budget.engine.residency import ResidencyInterval as R

needs_compiled = pytest.mark.skipif(
    not COMPILED_AVAILABLE,
    reason="the C extension cupool.planning.budget.engine._firstfit is not built")
NATIVE_MODES = [False, pytest.param(True, marks=needs_compiled)]


def make_trace(num_ops: int, buffers: list[tuple[int, bool]]) -> Trace:
    """``buffers``: (size, persistent) by id; every buffer lives through the iteration
    (the placement reads only sizes, kinds and the residencies it is given)."""
    return Trace("firstfit", tuple(Op(f"op{i}") for i in range(num_ops)), tuple(
        Buffer(b, size, 0, num_ops, kind=PERSISTENT if persistent else TEMPORARY)
        for b, (size, persistent) in enumerate(buffers)))


def reference_orders(trace: Trace, intervals: list[R]) -> list[list[tuple[int, ...]]]:
    """The items (a persistent buffer's residency from op 0 and its last one to the end as
    one, every other residency alone) in the three orders tried: largest first, longest
    first, earliest first; ties in the order of the items' tuples."""
    m, n = len(intervals), trace.num_ops
    first, last = {}, {}
    for k, r in enumerate(intervals):
        if r.start == 0:
            first[r.buffer_id] = k
        if r.end == n:
            last[r.buffer_id] = k
    pair_of = {}
    for b, k in first.items():
        if b in last and last[b] != k and trace.buffer(b).kind == PERSISTENT:
            pair_of[k] = pair_of[last[b]] = (k, last[b])
    items = sorted({pair_of.get(k, (k,)) for k in range(m)})

    def size(ks):
        return trace.buffer(intervals[ks[0]].buffer_id).size

    def span(ks):
        return sum(intervals[k].end - intervals[k].start for k in ks)

    keys = (lambda ks: -size(ks), lambda ks: (-span(ks), -size(ks)),
            lambda ks: (min(intervals[k].start for k in ks), -span(ks), -size(ks)))
    return [sorted(items, key=key) for key in keys]  # sorted() is stable


def reference(trace: Trace, intervals: list[R], budget: int) -> tuple[list | None, int]:
    """The rule in plain loops: the first of :func:`reference_orders` that fits, each item
    at the first gap of the walk over the byte ranges of the placed residencies sharing an
    op with it."""
    m = len(intervals)
    if m == 0:
        return [], 0

    def size(k):
        return trace.buffer(intervals[k].buffer_id).size

    result: tuple[list | None, int] = (None, 0)
    for order in reference_orders(trace, intervals):
        offsets: list = [None] * m
        for ks in order:
            busy = sorted((offsets[j], offsets[j] + size(j)) for j in range(m)
                          if offsets[j] is not None and any(
                              intervals[j].start < intervals[k].end
                              and intervals[j].end > intervals[k].start for k in ks))
            cursor = 0
            for low, high in busy:
                if low - cursor >= size(ks[0]):
                    break
                cursor = max(cursor, high)
            if cursor + size(ks[0]) > budget:
                result = (None, cursor + size(ks[0]))
                break
            for k in ks:
                offsets[k] = cursor
        else:
            return offsets, max(offsets[k] + size(k) for k in range(m))
    return result


def same(placed, expected: tuple[list | None, int]) -> bool:
    offsets, arena = expected
    if placed.arena_bytes != arena or (placed.offsets is None) != (offsets is None):
        return False
    return offsets is None or placed.offsets.tolist() == offsets


@st.composite
def residencies(draw, min_size: int = 1):
    """A trace and its residencies: temporaries anywhere, persistent buffers resident
    through the iteration, across the boundary in two halves (overlapping, touching or
    apart), or in pieces; few distinct sizes (ties), short iterations (shared ends)."""
    n = draw(st.integers(1, 9))
    span = st.tuples(st.integers(0, n - 1), st.integers(1, n)).map(
        lambda t: (min(t[0], t[1] - 1), max(t[1], min(t[0], t[1] - 1) + 1)))
    buffers, intervals = [], []
    for b in range(draw(st.integers(1, 12))):
        size = draw(st.sampled_from([min_size, 1, 2, 3, 4, 8]) | st.integers(min_size, 40))
        persistent = draw(st.booleans())
        buffers.append((size, persistent))
        shape = draw(st.sampled_from(["pieces", "everything", "pair"] if persistent
                                     else ["pieces"]))
        if shape == "everything":
            intervals.append(R(b, 0, n))
        elif shape == "pair":
            intervals += [R(b, 0, draw(st.integers(1, n))), R(b, draw(st.integers(0, n - 1)), n)]
        for _ in range(draw(st.integers(1 if shape == "pieces" else 0, 2))):
            start, end = draw(span)
            intervals.append(R(b, start, end))
    order = draw(st.permutations(range(len(intervals))))
    trace = make_trace(n, buffers)
    total = sum(size for size, _persistent in buffers) * 2
    return trace, [intervals[k] for k in order], draw(st.integers(0, total))


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(residencies())
def test_compiled_and_numpy_paths_place_alike_and_as_the_reference(case):
    trace, intervals, budget = case
    assert firstfit._firstfit is not None  # the compiled path really runs
    expected = reference(trace, intervals, budget)
    compiled = place_pairs_first_fit(trace, intervals, budget, native=True)
    numpy_path = place_pairs_first_fit(trace, intervals, budget, native=False)
    assert same(numpy_path, expected), (numpy_path, expected)
    assert same(compiled, expected), (compiled, expected)
    assert same(place_pairs_first_fit(trace, intervals, budget), expected)


@settings(max_examples=300, deadline=None)
@given(residencies())
def test_the_three_orders_are_the_reference_orders(case):
    trace, intervals, _budget = case
    items = Items.of(trace, intervals, Layout.of(trace, intervals))
    assert [items.in_order(order) for order in items.orders()] == \
        reference_orders(trace, intervals)
    for order in items.orders():  # the packed form the C extension gets: the same items
        packed, expected = items.packed(order), PackedItems.of(items.in_order(order))
        assert packed.ptr.tolist() == expected.ptr.tolist()
        assert packed.members.tolist() == expected.members.tolist()


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(residencies(), st.randoms(use_true_random=False))
def test_one_order_fails_at_the_same_item_with_the_same_arena(case, rng):
    """Any order of single residencies, any budget: the first item over it and what it
    would need are the same (the failure value is the first misfit's end)."""
    trace, intervals, budget = case
    layout = Layout.of(trace, intervals)
    items = [(k,) for k in range(len(intervals))]
    rng.shuffle(items)
    compiled = first_fit(layout, items, budget, native=True)
    numpy_path = first_fit(layout, items, budget, native=False)
    assert compiled.arena_bytes == numpy_path.arena_bytes
    assert (compiled.offsets is None) == (numpy_path.offsets is None)
    if compiled.offsets is not None:
        assert compiled.offsets.tolist() == numpy_path.offsets.tolist()


@settings(max_examples=150, deadline=None)
@given(residencies(min_size=0))
def test_zero_sizes_are_placed_by_numpy_as_the_reference_does(case):
    """The walk is the lowest free offset only for positive sizes: with a size 0 the
    default path places by NumPy, and the compiled one refuses."""
    trace, intervals, budget = case
    assert same(place_pairs_first_fit(trace, intervals, budget),
                reference(trace, intervals, budget))
    if COMPILED_AVAILABLE and any(trace.buffer(r.buffer_id).size == 0 for r in intervals):
        with pytest.raises(ValueError, match="size"):
            place_pairs_first_fit(trace, intervals, budget, native=True)


# ops:   0   1   2   3        interval 0: 4 bytes, op 0         -> 0
#        [0)                  interval 1: 8 bytes, ops 0-2      -> 4 (above 0)
#        [=====1=====)        interval 2: 4 bytes, op 1         -> 0 (0 is gone)
#            [2) [3)          interval 3: 2 bytes, op 2         -> 0 (2 ended at op 2)
GAPS = [R(0, 0, 1), R(1, 0, 3), R(2, 1, 2), R(3, 2, 3)]


@pytest.mark.parametrize("native", NATIVE_MODES)
def test_an_item_takes_the_lowest_offset_free_during_its_ops(native):
    trace = make_trace(3, [(4, False), (8, False), (4, False), (2, False)])
    layout = Layout.of(trace, GAPS)
    placed = first_fit(layout, [(0,), (1,), (2,), (3,)], 100, native)
    assert placed.offsets.tolist() == [0, 4, 0, 0]
    assert placed.arena_bytes == 12
    assert first_fit(layout, [(0,), (1,), (2,), (3,)], 11, native)[:2] == (None, 12)


@pytest.mark.parametrize("native", NATIVE_MODES)
def test_the_first_gap_that_holds_the_item_not_the_best_fitting_one(native):
    # after 0-3, op 1 has [0, 4) and [6, 9) free: 4 (3 bytes) takes the first, [0, 3), not
    # the exact [6, 9); 5 (3 bytes) then [6, 9); 6 (2 bytes) finds no gap below 18
    trace = make_trace(2, [(4, False), (2, False), (3, False), (9, False), (3, False),
                           (3, False), (2, False)])
    intervals = [R(0, 0, 1), R(1, 0, 2), R(2, 0, 1), R(3, 0, 2), R(4, 1, 2), R(5, 1, 2),
                 R(6, 1, 2)]
    layout = Layout.of(trace, intervals)
    items = [(k,) for k in range(7)]
    placed = first_fit(layout, items, 100, native)
    assert placed.offsets.tolist() == [0, 4, 6, 9, 0, 6, 18]
    assert placed.arena_bytes == 20
    assert first_fit(layout, items, 19, native)[:2] == (None, 20)


@pytest.mark.parametrize("native", NATIVE_MODES)
def test_a_stay_across_the_boundary_goes_where_both_halves_are_free(native):
    # buffer 0 (persistent, 4 bytes): [0, 1) and [3, 4), one item; buffer 1 (8 bytes,
    # placed first) holds [0, 8) at op 3, so the stay goes to 8 although 0 is free at op 0
    trace = make_trace(4, [(4, True), (8, False)])
    intervals = [R(0, 0, 1), R(1, 3, 4), R(0, 3, 4)]
    placed = place_pairs_first_fit(trace, intervals, 100, native)
    assert placed.offsets.tolist() == [8, 0, 8]
    assert placed.arena_bytes == 12
    assert place_pairs_first_fit(trace, intervals, 11, native)[:2] == (None, 12)


@pytest.mark.parametrize("native", NATIVE_MODES)
def test_residencies_through_the_iteration_stack_and_others_fit_beside_them(native):
    trace = make_trace(3, [(8, True), (4, True), (2, False), (2, False), (6, False)])
    intervals = [R(0, 0, 3), R(1, 0, 3), R(2, 0, 1), R(3, 1, 3), R(4, 2, 3)]
    placed = place_pairs_first_fit(trace, intervals, 100, native)
    # largest first: 0 at 0, 4 above it at op 2, 1 (all ops) above both, 2 in the gap
    # at op 0 between 0 and 1, 3 on top
    assert placed.offsets.tolist() == [0, 14, 8, 18, 8]
    assert placed.arena_bytes == 20


@pytest.mark.parametrize("native", NATIVE_MODES)
def test_no_residencies_need_no_bytes(native):
    placed = place_pairs_first_fit(make_trace(2, [(4, False)]), [], 0, native)
    assert placed.offsets.tolist() == [] and placed.arena_bytes == 0


def test_native_without_the_extension_is_an_error(monkeypatch):
    monkeypatch.setattr(firstfit, "_firstfit", None)
    trace = make_trace(1, [(4, False)])
    with pytest.raises(SolverError, match="_firstfit is not built"):
        place_pairs_first_fit(trace, [R(0, 0, 1)], 10, native=True)
    assert place_pairs_first_fit(trace, [R(0, 0, 1)], 10).offsets.tolist() == [0]


@needs_compiled
def test_the_extension_checks_its_arguments():
    place = firstfit._firstfit.place
    one = np.array([0], dtype=np.int64)
    ends = np.array([1], dtype=np.int64)
    sizes = np.array([4], dtype=np.int64)
    ptr = np.array([0, 1], dtype=np.int64)
    offsets = np.full(1, -1, dtype=np.int64)
    assert place(one, ends, sizes, ptr, one, 1, 10, offsets) == (True, 4)
    with pytest.raises(TypeError, match="sizes must be a C-contiguous int64 array"):
        place(one, ends, sizes.astype(np.int32), ptr, one, 1, 10, offsets)
    with pytest.raises(ValueError, match="listed once"):
        place(np.zeros(2, dtype=np.int64), np.ones(2, dtype=np.int64),
              np.full(2, 4, dtype=np.int64), np.array([0, 1, 2], dtype=np.int64),
              np.zeros(2, dtype=np.int64), 1, 10, np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="slots"):
        place(one, one, sizes, ptr, one, 1, 10, offsets)
    with pytest.raises(ValueError, match="item_ptr"):
        place(one, ends, sizes, np.array([0, 2], dtype=np.int64), one, 1, 10, offsets)
    with pytest.raises(ValueError, match="every interval must be in one"):
        place(np.zeros(2, dtype=np.int64), np.ones(2, dtype=np.int64),
              np.full(2, 4, dtype=np.int64), ptr, one, 1, 10, np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="sizes add up past"):
        place(np.zeros(2, dtype=np.int64), np.ones(2, dtype=np.int64),
              np.full(2, 2**61, dtype=np.int64), np.array([0, 1, 2], dtype=np.int64),
              np.arange(2, dtype=np.int64), 1, 10, np.zeros(2, dtype=np.int64))
