"""The one address × time overlap sweep both rule sets use, on hand-made rows, against a
pairwise oracle, and as each rule set words the same clash."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cupool.check import validate_plan
from cupool.check.overlap import Occupancy, first_overlap
from cupool.core.vocabulary import Buffer, Placement, Plan, Residency, SolveStatus
from tests.swap_cases import swap_plan, trace_of


def test_ranges_touching_at_an_address_boundary_do_not_overlap():
    # bytes: buffer 1 [0, 8), buffer 2 [8, 16), both during ops [0, 4)
    assert first_overlap([Occupancy(0, 8, 1, 0, 4), Occupancy(8, 16, 2, 0, 4)]) is None


def test_a_range_may_take_bytes_released_at_the_op_it_arrives():
    # op:  0   1   2   3
    # 1:  [=======)          bytes [0, 8)
    # 2:          [=======)  bytes [0, 8): arrives at op 2, where 1 is released
    assert first_overlap([Occupancy(0, 8, 1, 0, 2), Occupancy(0, 8, 2, 2, 4)]) is None


def test_sharing_one_byte_for_one_op_overlaps():
    # op:  0   1   2   3   4
    # 1:  [===========)          bytes [0, 8)
    # 2:          [===========)  bytes [7, 15): byte 7 is held twice during op 2
    held, arriving = Occupancy(0, 8, 1, 0, 3), Occupancy(7, 15, 2, 2, 5)
    overlap = first_overlap([arriving, held])
    assert overlap is not None
    assert (overlap.op, overlap.held, overlap.arriving) == (2, held, arriving)
    assert (overlap.shared_low, overlap.shared_high) == (7, 8)


def test_a_row_holding_no_op_never_overlaps():
    assert first_overlap([Occupancy(0, 8, 1, 0, 4), Occupancy(0, 8, 2, 3, 3)]) is None


def test_both_rule_sets_word_the_same_clash():
    trace = trace_of([1.0] * 5, Buffer(1, 8, 0, 3, (0, 2)), Buffer(2, 8, 2, 5, (2, 4)))
    static = Plan(trace.name, trace.digest(), "hand", SolveStatus.FEASIBLE, 15, 16,
                  (Placement(1, 0), Placement(2, 7)))
    report = validate_plan(trace, static)
    assert (report.rule, report.buffers) == ("overlap", (1, 2))
    assert report.message == ("buffers 1 and 2 are both live at op 2 and share bytes [7, 8) "
                              "(buffer 1 at [0, 8), buffer 2 at [7, 15))")
    swapping = swap_plan(trace, [Residency(1, 0, 3, 0), Residency(2, 2, 5, 7)], budget=100)
    report = validate_plan(trace, swapping)
    assert (report.rule, report.buffers) == ("overlap", (1, 2))
    assert report.message == ("op 2: buffer 1 (at [0, 8) from op 0) and buffer 2 (at [7, 15) "
                              "from op 2) share bytes [7, 8)")


rows = st.lists(st.tuples(st.integers(0, 12), st.integers(1, 6), st.integers(0, 8),
                          st.integers(1, 5)), min_size=1, max_size=9)


@settings(max_examples=200, deadline=None)
@given(rows)
def test_sweep_agrees_with_pairwise_oracle(spans):
    occupancies = [Occupancy(low, low + size, index, start, start + length)
                   for index, (low, size, start, length) in enumerate(spans)]
    pairwise = any(a.low < b.high and b.low < a.high and a.start < b.end and b.start < a.end
                   for k, a in enumerate(occupancies) for b in occupancies[k + 1:])
    overlap = first_overlap(occupancies)
    assert (overlap is not None) == pairwise
    if overlap is not None:
        held, arriving = overlap.held, overlap.arriving
        assert held.start <= overlap.op == arriving.start < held.end
        assert overlap.shared_low < overlap.shared_high
