"""The arrays behind the local search's placement answer as the loop over every residency
that they replaced: the same best-fit hole and edge, the same free/taken verdict."""

from __future__ import annotations

import random

import numpy as np
import pytest

from cupool.core.vocabulary import Residency
from cupool.planning.budget import span_table
from cupool.planning.budget.multilevel_state import Span
from cupool.planning.budget.span_table import Residencies, SpanTable


def loop_best_fit(spans, sizes, skip, size, start, end, budget):
    """The allocation rule written as a loop: best-fit smallest hole, at the edge next to
    the neighbour that dies later."""
    taken = []
    for b, spans_of_b in spans.items():
        for span in spans_of_b:
            if span.start < end and start < span.end and id(span) not in skip:
                taken.append((span.offset, span.offset + sizes[b], span.end))
    taken.sort()
    taken.append((budget, budget, -1))
    best_hole, best_offset = None, None
    cursor, below_end = 0, -1
    for low, high, end_op in taken:
        if low - cursor >= size:
            hole = low - cursor
            offset = cursor if below_end >= end_op else low - size
            if best_hole is None or hole < best_hole:
                best_hole, best_offset = hole, offset
        if high > cursor:
            cursor, below_end = high, end_op
    return best_offset


def loop_fits(spans, sizes, skip, offset, size, start, end, budget):
    if offset < 0 or offset + size > budget:
        return False
    for b, spans_of_b in spans.items():
        for span in spans_of_b:
            if (span.start < end and start < span.end and id(span) not in skip
                    and span.offset < offset + size and offset < span.offset + sizes[b]):
                return False
    return True


def random_layout(rng: random.Random):
    budget = rng.choice([64, 100, 256])
    sizes, spans = {}, {}
    for b in range(rng.randint(0, 12)):
        sizes[b] = rng.choice([4, 8, 16, 24, 32])
        spans[b] = []
        for _ in range(rng.randint(1, 3)):
            start = rng.randint(0, 18)
            spans[b].append(Span(start, start + rng.randint(1, 6),
                                 rng.randrange(0, budget - sizes[b] + 1, 4)))
    return budget, sizes, spans


@pytest.mark.parametrize("seed", range(8))
def test_span_table_answers_as_the_loop(seed):
    """The compiled best fit (where built) and the NumPy one answer as the loop."""
    rng = random.Random(seed)
    for _ in range(150):
        budget, sizes, spans = random_layout(rng)
        every = [s for spans_of_b in spans.values() for s in spans_of_b]
        skip = {id(s) for s in rng.sample(every, min(len(every), rng.randint(0, 2)))}
        table = SpanTable(spans, sizes, skip)
        for _ in range(5):
            size = rng.choice([4, 8, 12, 40, 300])
            start = rng.randint(0, 20)
            end = start + rng.randint(1, 8)
            expected = loop_best_fit(spans, sizes, skip, size, start, end, budget)
            assert table.best_fit(size, start, end, budget) == expected
            assert table.best_fit_numpy(size, start, end, budget) == expected
            offset = rng.randrange(-4, budget, 4)
            assert table.fits(offset, size, start, end, budget) == loop_fits(
                spans, sizes, skip, offset, size, start, end, budget)


def test_added_spans_count_as_placed():
    """A residency added after the table was made takes its bytes from later answers."""
    sizes = {0: 16}
    spans = {0: [Span(0, 4, 0)]}
    table = SpanTable(spans, sizes, set())
    assert table.best_fit(16, 0, 4, 64) == 16  # beside buffer 0, which outlives the end
    table.add(0, 4, 16, 16)
    assert table.best_fit(16, 0, 4, 64) == 32
    assert not table.fits(16, 16, 2, 3, 64)
    assert table.fits(48, 16, 2, 3, 64)


@pytest.mark.parametrize("seed", range(4))
def test_added_rows_answer_as_rows_it_was_made_with(seed):
    """Residencies added one by one (past the room the arrays start with), between queries
    (the compiled best fit sorts the rows once, before the first: those added later are
    not in order), answer as a table made with them from the start."""
    rng = random.Random(seed)
    for _ in range(60):
        budget, sizes, spans = random_layout(rng)
        grown = SpanTable(spans, sizes, set())
        every = {b: list(spans_of_b) for b, spans_of_b in spans.items()}
        for k in range(rng.randint(0, 30)):
            start = rng.randint(0, 18)
            span = Span(start, start + rng.randint(1, 6), rng.randrange(0, budget, 4))
            size = rng.choice([4, 8, 16])
            grown.add(span.start, span.end, span.offset, size)
            every[1000 + k], sizes[1000 + k] = [span], size
            if rng.random() < 0.3:
                _same_answers(rng, grown, SpanTable(every, sizes, set()), budget)
        _same_answers(rng, grown, SpanTable(every, sizes, set()), budget)


def _same_answers(rng, grown: SpanTable, made: SpanTable, budget: int) -> None:
    for _ in range(5):
        size = rng.choice([4, 8, 12, 40])
        start = rng.randint(0, 20)
        end = start + rng.randint(1, 8)
        expected = made.best_fit_numpy(size, start, end, budget)
        assert grown.best_fit(size, start, end, budget) == expected
        assert grown.best_fit_numpy(size, start, end, budget) == expected
        assert made.best_fit(size, start, end, budget) == expected
        offset = rng.randrange(-4, budget, 4)
        assert grown.fits(offset, size, start, end, budget) == made.fits(
            offset, size, start, end, budget)


@pytest.mark.parametrize("seed", range(4))
def test_a_table_of_the_rows_during_some_ops_answers_within_them_as_the_whole(seed):
    """``Residencies.table(skip, during)`` leaves out the rows sharing no op with
    ``during``: asked about ops within it, best fit and fits answer as the table of every
    row (but those of ``skip``)."""
    rng = random.Random(seed)
    for _ in range(60):
        budget, sizes, spans = random_layout(rng)
        order = sorted(spans)
        parts = [tuple(Residency(b, s.start, s.end, s.offset) for s in spans[b])
                 for b in order]
        columns = Residencies.of(order, {b: i for i, b in enumerate(order)}, parts, sizes)
        skip = rng.sample(range(len(columns.starts)), min(len(columns.starts), 2))
        low = rng.randint(0, 18)
        high = low + rng.randint(1, 8)
        within = columns.table(skip, (low, high))
        whole = columns.table(skip)
        for _ in range(5):
            start = rng.randint(low, high - 1)
            end = rng.randint(start + 1, high)
            size = rng.choice([4, 8, 12, 40])
            expected = whole.best_fit_numpy(size, start, end, budget)
            assert within.best_fit(size, start, end, budget) == expected
            assert within.best_fit_numpy(size, start, end, budget) == expected
            offset = rng.randrange(-4, budget, 4)
            assert within.fits(offset, size, start, end, budget) == whole.fits(
                offset, size, start, end, budget)
            within.add(start, end, expected if expected is not None else 0, size)
            whole.add(start, end, expected if expected is not None else 0, size)


@pytest.mark.skipif(not span_table.COMPILED_AVAILABLE, reason="_spanfit is not built")
def test_the_compiled_best_fit_checks_its_columns():
    """The C extension reads C-contiguous int64 columns of one length, and a row count
    within them; it says which argument is wrong."""
    from cupool.planning.budget.engine import _spanfit

    column = np.zeros(4, dtype=np.int64)
    with pytest.raises(TypeError, match="lows"):
        _spanfit.best_fit(column, column, column.astype(np.int32), column, 4, 0, 8, 0, 1, 64)
    with pytest.raises(ValueError, match="count"):
        _spanfit.best_fit(column, column, column, column, 5, 0, 8, 0, 1, 64)
    with pytest.raises(ValueError, match="sorted_count"):
        _spanfit.best_fit(column, column, column, column, 2, 3, 8, 0, 1, 64)
    assert _spanfit.best_fit(column, column, column, column, 0, 0, 8, 0, 1, 64) == 0
