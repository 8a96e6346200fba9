"""Broken copies of valid plans: the validator names the first broken rule, word for word.

Each test breaks a valid plan in one way (a planner's plan for a small LSTM, or a plan
written by hand) and states the report it must give: its rule, its message and its
buffers. A large plan is checked mostly by screens over columns
(:mod:`cupool.check.columns`, :mod:`cupool.check.quiet`, :func:`cupool.check.memory
.may_overlap`); each case is validated with the screens and without them, so that
whatever a screen clears, the report of a broken plan is the one the rules write.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cupool.check import swapping, validate_swap_plan
from cupool.check.memory import may_overlap
from cupool.check.overlap import Occupancy, first_overlap
from cupool.core.vocabulary import (
    PERSISTENT,
    Buffer,
    RecomputeAction,
    Residency,
    SwapIn,
    SwapOut,
)
from tests.swap_cases import (
    six_op_swap_plan,
    six_op_trace,
    swap_plan,
    trace_and_plan,
    trace_of,
)


@lru_cache(maxsize=1)
def _lstm():
    """A planner's valid plan for a small LSTM at half its lower bound: plain buffers,
    round trips (swapped out and in once), recomputes and persistent weights."""
    from cupool.planning.budget import BudgetParams, plan_with_budget
    from cupool.planning.synthetic import lstm_trace

    trace = lstm_trace(6, 2, seed=0)
    result = plan_with_budget(trace, int(trace.lower_bound_bytes() * 0.5), "auto", None,
                              BudgetParams())
    return result.trace, result.plan


def _spans(plan, buffer_id):
    return sorted((r for r in plan.residencies if r.buffer_id == buffer_id),
                  key=lambda r: r.start)


def _actions(plan, buffer_id):
    return [a for a in plan.actions if a.buffer_id == buffer_id]


def _round_trips(trace, plan):
    """Temporary buffers with two residencies, one swap-out and one swap-in, in trace
    order: ``(buffer, first, second, swap_out, swap_in)``."""
    found = []
    for buffer in trace.buffers:
        actions = _actions(plan, buffer.id)
        kinds = sorted(type(a).__name__ for a in actions)
        spans = _spans(plan, buffer.id)
        if buffer.kind != PERSISTENT and kinds == ["SwapIn", "SwapOut"] and len(spans) == 2:
            out = next(a for a in actions if isinstance(a, SwapOut))
            back = next(a for a in actions if isinstance(a, SwapIn))
            found.append((buffer, spans[0], spans[1], out, back))
    return found


def _plain(trace, plan, kind="temporary"):
    """Buffers of ``kind`` with one residency and no action, in trace order."""
    return [(b, _spans(plan, b.id)[0]) for b in trace.buffers
            if b.kind == kind and len(_spans(plan, b.id)) == 1 and not _actions(plan, b.id)]


def _without(items, *gone):
    return tuple(x for x in items if all(x is not g for g in gone))


def _replaced(items, old, new):
    return tuple(new if x is old else x for x in items)


def _validate(trace, plan):
    """The report, which must be the same with the screens (a plan of any size) and
    without them (every rule one by one)."""
    saved = swapping.SCREEN_FROM
    try:
        swapping.SCREEN_FROM = 0
        screened = validate_swap_plan(trace, plan)
        swapping.SCREEN_FROM = 10 ** 9
        assert validate_swap_plan(trace, plan) == screened
    finally:
        swapping.SCREEN_FROM = saved
    return screened


def _report(trace, plan, **change):
    return _validate(trace, dataclasses.replace(plan, **change))


def _expect(report, rule, message, *buffers):
    assert (report.valid, report.rule, report.message, report.buffers) == \
        (False, rule, message, buffers)


def test_the_lstm_plan_is_valid_and_has_every_shape():
    trace, plan = _lstm()
    assert _validate(trace, plan)
    assert len(_round_trips(trace, plan)) >= 10 and len(_plain(trace, plan)) >= 10
    assert _plain(trace, plan, PERSISTENT)
    assert any(isinstance(a, RecomputeAction) for a in plan.actions)


def test_a_residency_past_its_lifetime_or_over_another():
    trace, plan = _lstm()
    n = trace.num_ops
    buffer, only = next((b, r) for b, r in _plain(trace, plan)[4:]
                        if b.end < n)
    longer = dataclasses.replace(only, end=buffer.end + 1)
    _expect(_report(trace, plan, residencies=_replaced(plan.residencies, only, longer)),
            "lifetime", f"buffer {buffer.id}: residency [{only.start}, {buffer.end + 1}) must "
            f"lie inside its lifetime [{buffer.start}, {buffer.end}) with start < end (only a "
            f"temporary buffer with a recompute recipe may come back after it, or be "
            f"ephemeral: start == end, after its first op and before op {n})", buffer.id)
    buffer, first, second, _out, _back = _round_trips(trace, plan)[2]
    early = dataclasses.replace(second, start=first.end - 1)
    _expect(_report(trace, plan, residencies=_replaced(plan.residencies, second, early)),
            "order", f"buffer {buffer.id}: residencies [{first.start}, {first.end}) and "
            f"[{first.end - 1}, {second.end}) overlap in time or start at one op", buffer.id)
    below = dataclasses.replace(second, offset=-8)
    _expect(_report(trace, plan, residencies=_replaced(plan.residencies, second, below)),
            "offset", f"buffer {buffer.id}: residency [{second.start}, {second.end}) offset "
            f"(=-8) must be an integer >= 0", buffer.id)


def test_a_dropped_residency():
    trace, plan = _lstm()
    buffer, _first, second, _out, back = _round_trips(trace, plan)[3]
    _expect(_report(trace, plan, residencies=_without(plan.residencies, second)), "entry",
            f"buffer {buffer.id}: swap-in triggered at op {back.trigger_op}, but no residency "
            f"of it starts at op {back.trigger_op}", buffer.id)
    buffer, only = _plain(trace, plan)[5]
    _expect(_report(trace, plan, residencies=_without(plan.residencies, only)), "placed",
            f"buffer {buffer.id} has no residency", buffer.id)


def test_a_removed_swap_out():
    trace, plan = _lstm()
    buffer, first, second, out, _back = _round_trips(trace, plan)[4]
    _expect(_report(trace, plan, actions=_without(plan.actions, out)), "swap_in",
            f"buffer {buffer.id}: swap-in at op {second.start} needs exactly one swap-out "
            f"from residency [{first.start}, {first.end}), found 0", buffer.id)


def test_a_swap_in_due_outside_its_window():
    trace, plan = _lstm()
    trips = [t for t in _round_trips(trace, plan)
             if any(t[2].start <= u < t[2].end - 1 for u in t[0].uses)]
    buffer, _first, second, _out, back = trips[2]
    use = next(u for u in buffer.uses if second.start <= u < second.end)
    late = dataclasses.replace(back, due_op=use + 1)
    _expect(_report(trace, plan, actions=_replaced(plan.actions, back, late)), "swap_in",
            f"buffer {buffer.id}: swap-in due at op {use + 1} must lie in "
            f"[{back.trigger_op}, {use}] (residency [{second.start}, {second.end}), first use "
            f"[{use}])", buffer.id)
    # due before it is triggered
    buffer, _first, second, _out, back = trips[3]
    use = next(u for u in buffer.uses if second.start <= u < second.end)
    early = dataclasses.replace(back, due_op=back.trigger_op - 1)
    _expect(_report(trace, plan, actions=_replaced(plan.actions, back, early)), "swap_in",
            f"buffer {buffer.id}: swap-in due at op {back.trigger_op - 1} must lie in "
            f"[{back.trigger_op}, {min(use, second.end - 1)}] (residency [{second.start}, "
            f"{second.end}), first use [{use}])", buffer.id)


def test_a_swap_out_before_the_last_use_or_dropping_dirty_data():
    trace, plan = _lstm()
    trips = [t for t in _round_trips(trace, plan)
             if any(t[1].start < u < t[1].end for u in t[0].uses)]
    buffer, first, _second, out, _back = trips[0]
    last = max(u for u in buffer.uses if first.start <= u < first.end)
    early = dataclasses.replace(out, after_op=first.start)
    _expect(_report(trace, plan, actions=_replaced(plan.actions, out, early)), "swap_out",
            f"buffer {buffer.id}: swap-out after op {first.start} comes before its use at op "
            f"{last} in residency [{first.start}, {first.end}); that use's writes would be lost",
            buffer.id)
    buffer, first, _second, out, _back = _round_trips(trace, plan)[1]
    dropped = dataclasses.replace(out, drop=True)
    _expect(_report(trace, plan, actions=_replaced(plan.actions, out, dropped)), "drop",
            f"buffer {buffer.id}: swap-out after op {out.after_op} drops residency "
            f"[{first.start}, {first.end}) without a copy, but that residency has no host copy "
            f"(it is not entered by a swap-in)", buffer.id)


def test_an_extra_action_on_a_round_trip():
    trace, plan = _lstm()
    buffer, first, _second, _out, _back = next(t for t in _round_trips(trace, plan)
                                              if t[0].recompute is not None)
    again = RecomputeAction(buffer.id, first.start)
    _expect(_report(trace, plan, actions=(*plan.actions, again)), "entry",
            f"buffer {buffer.id}: its first residency [{first.start}, {first.end}) is where it "
            f"is produced; it cannot be recomputed there", buffer.id)
    buffer, first, second, out, _back = _round_trips(trace, plan)[5]
    twice = dataclasses.replace(out, after_op=first.end - 1)
    _expect(_report(trace, plan, actions=(*plan.actions, twice)), "swap_in",
            f"buffer {buffer.id}: swap-in at op {second.start} needs exactly one swap-out "
            f"from residency [{first.start}, {first.end}), found 2", buffer.id)


def test_a_round_trip_entered_or_produced_elsewhere():
    trace, plan = _lstm()
    trips = _round_trips(trace, plan)
    buffer, first, _second, out, back = trips[6]
    early = dataclasses.replace(back, trigger_op=first.start, due_op=first.start)
    _expect(_report(trace, plan, actions=_replaced(plan.actions, back, early)), "entry",
            f"buffer {buffer.id}: only a persistent buffer can begin the iteration on the "
            f"host; its first residency [{first.start}, {first.end}) is entered by a swap-in",
            buffer.id)
    made = RecomputeAction(buffer.id, first.start)
    _expect(_report(trace, plan, actions=_replaced(plan.actions, out, made)), "entry",
            f"buffer {buffer.id}: its first residency [{first.start}, {first.end}) is where it "
            f"is produced; it cannot be recomputed there", buffer.id)
    buffer, first, _second, out, _back = next(t for t in trips if t[3].after_op > t[1].start)
    late = dataclasses.replace(first, start=first.start + 1)
    _expect(_report(trace, plan, residencies=_replaced(plan.residencies, first, late)),
            "entry", f"buffer {buffer.id}: its first residency [{first.start + 1}, "
            f"{first.end}) must start at op {buffer.start}, where the buffer is produced",
            buffer.id)
    buffer, _first, second, _out, _back = next(
        t for t in trips if t[0].recompute is not None and t[2].start < trace.num_ops)
    empty = dataclasses.replace(second, end=second.start)
    _expect(_report(trace, plan, residencies=_replaced(plan.residencies, second, empty)),
            "entry", f"buffer {buffer.id}: ephemeral residency [{second.start}, {second.start})"
            f" holds no op; only a recompute can enter it", buffer.id)


def test_a_use_left_uncovered_and_a_broken_boundary():
    trace, plan = _lstm()
    buffer, only = next((b, r) for b, r in _plain(trace, plan)[7:]
                        if max(b.uses) > r.start)
    last = max(buffer.uses)
    short = dataclasses.replace(only, end=last)
    _expect(_report(trace, plan, residencies=_replaced(plan.residencies, only, short)), "use",
            f"buffer {buffer.id} is used at op {last} but not resident then (residencies "
            f"[{only.start}, {last}))", buffer.id)
    weight, only = _plain(trace, plan, PERSISTENT)[0]
    n = trace.num_ops
    short = dataclasses.replace(only, end=n - 1)
    _expect(_report(trace, plan, residencies=_replaced(plan.residencies, only, short)),
            "boundary", f"persistent buffer {weight.id} stays on the device across "
            f"iterations, so its last residency [0, {n - 1}) must end at op {n}", weight.id)


def test_the_first_broken_buffer_in_trace_order_is_named():
    trace, plan = _lstm()
    trips = _round_trips(trace, plan)
    early, late = trips[2], trips[-2]
    # late's swap-out removed (a swap_in failure), early's swap-in due after its end
    # (a swap_in failure of another wording): whichever comes first in the trace is named
    back = early[4]
    bad_due = dataclasses.replace(back, due_op=early[2].end)
    actions = _replaced(_without(plan.actions, late[3]), back, bad_due)
    report = _report(trace, plan, actions=actions)
    assert report.rule == "swap_in" and report.buffers == (early[0].id,)
    assert report.message.startswith(f"buffer {early[0].id}: swap-in due at op "
                                     f"{early[2].end} must lie in")
    # a plain buffer broken after the round trip in trace order is not reached
    # (its residency starts after the op that produces it)
    only = next(r for b, r in _plain(trace, plan)
                if trace.buffers.index(b) > trace.buffers.index(late[0]) and r.end - r.start > 1)
    moved = dataclasses.replace(only, start=only.start + 1)
    actions = _without(plan.actions, late[3])
    report = _report(trace, plan, actions=actions,
                     residencies=_replaced(plan.residencies, only, moved))
    assert report.rule == "swap_in" and report.buffers == (late[0].id,)


def test_an_offset_shifted_onto_another_residency():
    trace, plan = _lstm()
    sizes = {b.id: b.size for b in trace.buffers}
    buffer, only = _plain(trace, plan)[9]
    other = next(r for r in plan.residencies
                 if r.buffer_id != buffer.id and r.start < only.end and only.start < r.end
                 and r.start < r.end and r.offset + sizes[buffer.id] <= plan.arena_bytes
                 and r.offset != only.offset)
    moved = dataclasses.replace(only, offset=other.offset)
    report = _report(trace, plan, residencies=_replaced(plan.residencies, only, moved))
    assert report.rule == "overlap" and buffer.id in report.buffers, report
    assert " share bytes [" in report.message


def test_a_recompute_reading_a_round_trip_before_it_lands():
    """op:  0   1   2   3   4   5   6   7
    X 0: [=======)       [===============)  out after op 0, in at op 4 (due 6 or 5)
    Y 1:     [=======)       [===========)  recomputed before op 5 from X
    """
    from cupool.core.vocabulary import Recompute

    trace = trace_of([1.0] * 8, Buffer(0, 8, 0, 8, (0, 6)),
                     Buffer(1, 8, 1, 8, (1, 7), recompute=Recompute(1, (0,))))
    plan = swap_plan(trace, [Residency(0, 0, 2, 0), Residency(0, 4, 8, 0),
                             Residency(1, 1, 3, 8), Residency(1, 5, 8, 8)],
                     [SwapOut(0, 0), SwapIn(0, 4, 5), RecomputeAction(1, 5)])
    assert _validate(trace, plan)
    late = _replaced(plan.actions, plan.actions[1], SwapIn(0, 4, 6))
    _expect(_report(trace, plan, actions=late), "recompute",
            "buffer 1: recompute before op 5 re-runs op 1, whose input buffer 0 is swapped in "
            "due at op 6, after op 5", 1, 0)


def test_a_recompute_chain_on_the_finer_clock():
    """The chain of ``tests/check/test_swapping.py``: x1 recomputed (ephemeral) then x2
    from it, before op 4; x2 put at x1's bytes clashes during x2's own recompute."""
    from tests.check.test_swapping import _chain_plan, _chain_trace

    trace = _chain_trace()
    plan = _chain_plan(trace)
    assert _validate(trace, plan)
    x2 = next(r for r in plan.residencies if r.buffer_id == 2 and r.start == 4)
    moved = _replaced(plan.residencies, x2, dataclasses.replace(x2, offset=8))
    _expect(_report(trace, plan, residencies=moved), "overlap",
            "op 4: buffer 1 (at [8, 24) from op 4) and buffer 2 (at [8, 24) from op 4) share "
            "bytes [8, 24)", 1, 2)


def test_overlap_and_budget_on_a_hand_plan():
    trace = six_op_trace()
    plan = six_op_swap_plan(trace)
    b_at_zero = _replaced(plan.residencies, plan.residencies[3], Residency(2, 1, 3, 0))
    _expect(_report(trace, plan, residencies=b_at_zero), "overlap",
            "op 1: buffer 0 (at [0, 8) from op 0) and buffer 2 (at [0, 16) from op 1) share "
            "bytes [0, 8)", 0, 2)
    _expect(_report(trace, plan, capacity_bytes=23), "budget",
            "op 0: resident bytes (=24) exceed the budget (=23); resident buffers [0, 1]", 0, 1)
    _expect(_report(trace, plan, arena_bytes=20), "arena",
            "buffer 1 ends at byte 24, beyond the plan's arena_bytes (=20)", 1)


def test_plans_the_columns_cannot_hold_go_through_the_plain_rules():
    trace = six_op_trace()
    plan = six_op_swap_plan(trace)

    class Offset(int):
        pass

    odd = _replaced(plan.residencies, plan.residencies[3], Residency(2, 1, 3, Offset(8)))
    assert _report(trace, plan, residencies=odd).valid
    flag = _replaced(plan.residencies, plan.residencies[3], Residency(2, 1, 3, True))
    _expect(_report(trace, plan, residencies=flag), "offset",
            "buffer 2: residency [1, 3) offset (=True) must be an integer >= 0", 2)
    # uses out of order (against the trace's contract): looked up one by one
    unsorted = trace_of([10.0] * 6, *trace.buffers[:2], Buffer(2, 16, 1, 3, (2, 1)))
    again = dataclasses.replace(plan, trace_digest=unsorted.digest())
    assert _validate(unsorted, again).valid
    shrunk = _replaced(again.residencies, again.residencies[3], Residency(2, 1, 2, 8))
    _expect(_report(unsorted, again, residencies=shrunk), "use",
            "buffer 2 is used at op 2 but not resident then (residencies [1, 2))", 2)


@settings(max_examples=60, deadline=None)
@given(trace_and_plan(), st.randoms(use_true_random=False))
def test_random_plans_broken_by_a_removed_swap_out(case, rng):
    trace, plan, _cost = case
    assert _validate(trace, plan)
    outs = [a for a in plan.actions if isinstance(a, SwapOut)]
    if not outs:
        return
    out = rng.choice(outs)
    spans = _spans(plan, out.buffer_id)
    k = next(k for k, r in enumerate(spans) if r.start <= out.after_op < r.end)
    entry = {a.trigger_op: a for a in _actions(plan, out.buffer_id) if isinstance(a, SwapIn)}
    offloaded = spans[0].start in entry
    report = _report(trace, plan, actions=_without(plan.actions, out))
    b = out.buffer_id
    if offloaded and k == len(spans) - 1:
        _expect(report, "boundary", f"persistent buffer {b} begins the iteration on the "
                f"host, so its last residency [{spans[k].start}, {spans[k].end}) must end "
                f"with a swap-out", b)
        return
    following = k + 1 if k + 1 < len(spans) else 0
    r = spans[k]
    _expect(report, "swap_in", f"buffer {b}: swap-in at op {spans[following].start} needs "
            f"exactly one swap-out from residency [{r.start}, {r.end}), found 0", b)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(0, 5),
                          st.integers(0, 3)), max_size=12))
def test_the_overlap_screen_clears_only_what_the_sweep_clears(rows):
    occupancies = [Occupancy(low, low + size, index, start, start + length)
                   for index, (low, size, start, length) in enumerate(rows)]
    columns = [np.array([getattr(o, name) for o in occupancies], dtype=np.int64)
               for name in ("low", "high", "start", "end")]
    if not may_overlap(*columns):
        assert first_overlap(occupancies) is None
    pairs = [(a, b) for a in occupancies for b in occupancies if a is not b
             and a.start < a.end and b.start < b.end and a.start < b.end and b.start < a.end
             and a.low < b.high and b.low < a.high]
    assert may_overlap(*columns) == bool(pairs) or any(o.low == o.high for o in occupancies)
