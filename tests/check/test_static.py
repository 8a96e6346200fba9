"""Rules for static plans on hand-made good and bad plans, and against a pairwise oracle."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cupool.check import Lifetime, check_offsets, validate_plan
from cupool.core.vocabulary import Buffer, Op, Placement, Plan, SolveStatus, Trace

# op:   0   1   2   3   4
# b10 [=======)              8 B
# b11         [===========)  8 B  (may share b10's bytes)
# b12 [===================)  4 B
TRACE = Trace("hand", tuple(Op(f"o{i}") for i in range(5)), (
    Buffer(10, 8, 0, 2), Buffer(11, 8, 2, 5), Buffer(12, 4, 0, 5)))


def make_plan(offsets, arena=None, capacity=None, trace=TRACE):
    top = max(offsets[b.id] + b.size for b in trace.buffers if b.id in offsets)
    return Plan(trace.name, trace.digest(), "hand", SolveStatus.FEASIBLE,
                top if arena is None else arena, 12,
                tuple(Placement(i, o) for i, o in offsets.items()), capacity_bytes=capacity)


def test_good_plan_reusing_freed_bytes_is_valid():
    report = validate_plan(TRACE, make_plan({10: 0, 11: 0, 12: 8}))
    assert report.valid and bool(report)


def test_overlap_names_both_buffers_the_op_and_the_bytes():
    report = validate_plan(TRACE, make_plan({10: 0, 11: 0, 12: 6}))
    assert not report.valid and report.rule == "overlap"
    assert report.buffers == (10, 12)
    assert report.message == ("buffers 10 and 12 are both live at op 0 and share bytes [6, 8) "
                              "(buffer 10 at [0, 8), buffer 12 at [6, 10))")


def test_touching_ranges_and_touching_lifetimes_are_fine():
    assert validate_plan(TRACE, make_plan({10: 4, 11: 4, 12: 0})).valid


def test_missing_unknown_negative_and_duplicate_placements():
    assert validate_plan(TRACE, make_plan({10: 0, 11: 0})).rule == "placed"
    assert validate_plan(TRACE, make_plan({10: 0, 11: 0, 12: 8, 99: 0})).rule == "known"
    assert validate_plan(TRACE, make_plan({10: 0, 11: 0, 12: -8}, arena=12)).rule == "offset"
    plan = make_plan({10: 0, 11: 0, 12: 8})
    twice = Plan(plan.trace_name, plan.trace_digest, "hand", plan.status, 12, 12,
                 (*plan.placements, Placement(10, 0)))
    assert validate_plan(TRACE, twice).rule == "unique"


def test_arena_and_capacity_are_checked():
    assert validate_plan(TRACE, make_plan({10: 0, 11: 0, 12: 8}, arena=11)).rule == "arena"
    report = validate_plan(TRACE, make_plan({10: 0, 11: 0, 12: 8}, capacity=10))
    assert report.rule == "capacity" and "capacity (=10)" in report.message


def test_plan_for_another_trace_is_refused():
    other = Trace("other", TRACE.ops,
                  (Buffer(10, 8, 0, 2), Buffer(11, 8, 2, 5), Buffer(12, 4, 0, 4)))
    report = validate_plan(other, make_plan({10: 0, 11: 0, 12: 8}))
    assert report.rule == "trace" and "'hand'" in report.message


problems = st.lists(
    st.tuples(st.integers(0, 8), st.integers(1, 5), st.integers(1, 6), st.integers(0, 12)),
    min_size=1, max_size=9)


@settings(max_examples=300, deadline=None)
@given(problems)
def test_sweep_agrees_with_pairwise_oracle(rows):
    buffers = [Lifetime(i, s, s + length, size) for i, (s, length, size, _) in enumerate(rows)]
    offsets = {i: off for i, (_, _, _, off) in enumerate(rows)}
    pairwise_overlap = any(
        a.start < b.end and b.start < a.end
        and offsets[a.id] < offsets[b.id] + b.size and offsets[b.id] < offsets[a.id] + a.size
        for k, a in enumerate(buffers) for b in buffers[k + 1:])
    report = check_offsets(buffers, offsets)
    assert report.valid == (not pairwise_overlap)
    if not report.valid:
        first, second = (b for b in buffers if b.id in report.buffers)
        assert first.start < second.end and second.start < first.end
