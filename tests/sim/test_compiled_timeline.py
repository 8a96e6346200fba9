"""The compiled flat replay (``cupool.sim._timeline``) against the Python one
(:func:`cupool.sim.timeline.python_replay`): the same :class:`Timeline` -- every list, every
record, in the same order, floats bit for bit (compared by ``repr``, which tells every two
doubles apart, ``0.0`` from ``-0.0`` included, and an ``int`` from a ``float``) -- on the
inputs of generated valid plans and on generated replay inputs no plan would make (deep
queues, copies over each other's bytes, many events at one instant, no engine at all).
And the compiled reading of attributes as columns (``cupool.sim._columns``) against NumPy's.
Skipped when the extensions are not built."""

from __future__ import annotations

import bisect
import dataclasses
import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cupool.core.vocabulary import (
    RecomputeAction,
    Residency,
    SwapIn,
    SwapOut,
    plan_residencies,
)
from cupool.planning.synthetic import lstm_trace
from cupool.sim import cost_model
from cupool.sim import replay_input as replay_input_module
from cupool.sim.cost import D2H, H2D
from cupool.sim.replay_input import (
    DueRows,
    FilledRows,
    RecomputeRows,
    ReplayInput,
    ResidencyArrays,
    SwapInRows,
    SwapOutRows,
    replay_input,
)
from cupool.sim.timeline import COMPILED_AVAILABLE, Timeline, Times, python_replay
from tests.sim.test_timeline import varied
from tests.swap_cases import written_trace_and_plan

BUILT = COMPILED_AVAILABLE and replay_input_module._columns is not None
pytestmark = pytest.mark.skipif(not BUILT, reason="the C extensions of cupool.sim are not built")

if BUILT:
    from cupool.sim import _columns, _timeline


def outcome(replay, data, num_ops, engines):
    """``repr`` of the timeline ``replay`` gives, or of the error it raises."""
    try:
        return repr(replay(data, num_ops, engines))
    except KeyError as error:
        return f"KeyError{error.args!r}"


def compiled(data, num_ops, engines) -> Timeline:
    records = _timeline.replay(data, num_ops, engines, D2H, H2D)
    assert records is not None, "the compiled loop left a modelled input to Python"
    return Timeline(*records)


def times_outcome(replay, data, num_ops, engines):
    """The bytes of the times ``replay`` gives (a :class:`Times`), and ``repr`` of the rest,
    or of the error it raises."""
    try:
        times = replay(data, num_ops, engines)
    except KeyError as error:
        return f"KeyError{error.args!r}"
    return (times.op_times.tobytes(), times.copy_spans.tobytes(),
            repr((times.recomputes, times.recompute_us, times.waited)))


def compiled_times(data, num_ops, engines) -> Times:
    records = _timeline.replay(data, num_ops, engines, D2H, H2D, True)
    assert records is not None, "the compiled loop left a modelled input to Python"
    op_times, spans, recomputes, recompute_us, waited, held_after = records
    assert held_after is None
    return Times(np.frombuffer(op_times).reshape(-1, 3), np.frombuffer(spans).reshape(-1, 2),
                 recomputes, recompute_us, waited)


def assert_same_timeline(data, num_ops, engines):
    """The same timeline, and the same times alone (``columns``) as the Python timeline's."""
    python = outcome(python_replay, data, num_ops, engines)
    assert outcome(compiled, data, num_ops, engines) == python
    python_times = times_outcome(lambda *args: Times.of(python_replay(*args)), data, num_ops,
                                 engines)
    assert times_outcome(compiled_times, data, num_ops, engines) == python_times
    return python


# -- inputs of valid plans ---------------------------------------------------------------

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(varied(written_trace_and_plan()), st.sampled_from([1, 2, 3]))
def test_generated_plans_give_the_python_timeline(case, engines):
    """Swaps (pinned and pageable), recomputes, drops of clean data, 0 µs ops and whole-number
    copy times (ties), on 1 to 3 engines per direction."""
    trace, plan, cost = case
    cost = dataclasses.replace(cost, host_us_per_op=0.0,  # the host's time: Python's alone
                               host_us_per_action=0.0)
    data = replay_input(trace, plan_residencies(trace, plan), plan.actions, cost)
    assert not assert_same_timeline(data, trace.num_ops, engines).startswith("KeyError")


@pytest.mark.parametrize("engines", [1, 2, 4])
def test_a_planned_lstm_gives_the_python_timeline(engines):
    """A budget plan of thousands of copies (swaps, recomputes, drops)."""
    from cupool.planning.budget import plan_with_budget
    from cupool.planning.budget.recipes import with_recompute_recipes

    trace = with_recompute_recipes(lstm_trace(40, 2, seed=1))
    # planned for one engine per direction (on four, auto's best plan has no recompute),
    # replayed on ``engines``
    result = plan_with_budget(trace, int(trace.lower_bound_bytes() * 0.5), "auto",
                              cost=cost_model("gen5"))
    cost = cost_model("gen5", copy_engines_per_direction=engines)
    plan = result.plan
    data = replay_input(result.trace, plan_residencies(result.trace, plan), plan.actions, cost)
    assert len(data.swap_outs.buffer_ids) > 100 and len(data.recomputes.buffer_ids) > 10
    assert_same_timeline(data, result.trace.num_ops, engines)


# -- inputs no plan would make --------------------------------------------------------------

def grouped(rows, num_ops, columns):
    """``rows`` (an op and ``columns`` values each) ordered by op, plan order within an op:
    the columns after the op, and ``first``."""
    rows = sorted(rows, key=lambda row: row[0])
    first = np.array([bisect.bisect_left([row[0] for row in rows], i)
                      for i in range(num_ops + 1)], np.int64)
    return [[row[k] for row in rows] for k in range(1, columns + 1)], first


TIMES = st.sampled_from([0.0, 0.0, 0.5, 1.0, 1.0, 2.0, 3.0, 0.1, -0.0, math.inf])


@st.composite
def replay_inputs(draw):
    """``(input, num_ops)``: ops of a few whole durations (0 often), copies of a few byte
    ranges (over each other) and times, swap-ins of a few buffers with dues (some naming a
    swap-in not landed by then: Python's ``KeyError``), recomputes, filled ranges."""
    n = draw(st.integers(1, 9))
    op = st.integers(0, n - 1)
    buffer = st.integers(0, 4)
    low = st.integers(0, 6).map(lambda k: 100 * k)
    size = st.integers(0, 3).map(lambda k: 100 * k)
    outs = draw(st.lists(st.tuples(op, buffer, low, size, TIMES), max_size=14))
    ins = draw(st.lists(st.tuples(op, buffer, low, size, TIMES), max_size=14))
    dues = []
    for trigger, b, *_rest in ins:
        for _ in range(draw(st.integers(0, 2))):
            late = draw(st.integers(0, 9)) == 0  # rarely due before it is triggered
            due = draw(st.integers(0, n - 1) if late else st.integers(trigger, n - 1))
            dues.append((due, b, trigger))
    recomputes = draw(st.lists(st.tuples(op, buffer, TIMES), max_size=5))
    filled = draw(st.lists(st.tuples(op, low, size), max_size=10))
    residencies = tuple(Residency(b, 0, after + 1, offset) for after, b, offset, _s, _t in outs)
    sizes = dict.fromkeys(range(5), 100)
    ints = lambda values: np.array(values, np.int64)  # noqa: E731
    floats = lambda values: np.array(values, np.float64)  # noqa: E731
    (ids, lows, nbytes, us), first = grouped(ins, n, 4)
    swap_ins = SwapInRows(first, ints(ids), ints(lows), ints(lows) + ints(nbytes), ints(nbytes),
                          floats(us), ints(sorted(row[0] for row in ins)))
    (ids, triggers), first = grouped(dues, n, 2)
    due = DueRows(first, ints(ids), ints(triggers))
    (ids, us), first = grouped(recomputes, n, 2)
    recompute_rows = RecomputeRows(first, ints(ids), floats(us))
    (ids, lows, nbytes, us, index), first = grouped(
        [(*row, k) for k, row in enumerate(outs)], n, 5)
    swap_outs = SwapOutRows(first, ints(ids), ints(index), ints(nbytes), floats(us), ints(lows),
                            ints(lows) + ints(nbytes))
    (lows, nbytes), first = grouped(filled, n, 2)
    filled_rows = FilledRows(first, ints(lows), ints(lows) + ints(nbytes))
    op_us = [draw(TIMES) for _ in range(n)]
    widest = max((row[3] for row in outs), default=0)
    data = ReplayInput(sizes, op_us, residencies, ResidencyArrays.of(residencies, sizes),
                       swap_ins, due, recompute_rows, swap_outs, filled_rows, widest,
                       0.0, 0, all(d >= 0 for d in op_us))
    return data, n


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replay_inputs(), st.sampled_from([0, 1, 1, 2, 3]))
def test_generated_replay_inputs_give_the_python_timeline(case, engines):
    """With no engine nothing is copied: both stop where the compute stream waits for ever
    (copies out not done are held ``None``)."""
    data, num_ops = case
    assert_same_timeline(data, num_ops, engines)


def test_an_input_with_a_nan_time_is_left_to_python():
    """Python orders heap tuples holding NaN by identity as well: the compiled loop does not
    model that and answers None; :func:`replay` then runs the Python loop."""
    from cupool.sim.timeline import replay

    trace = lstm_trace(3, 1, seed=0)
    residencies = tuple(Residency(b.id, b.start, b.end, 0) for b in trace.buffers)
    data = replay_input(trace, residencies, (), cost_model())
    odd = dataclasses.replace(data, op_us=[math.nan, *data.op_us[1:]])
    assert _timeline.replay(odd, trace.num_ops, 1, D2H, H2D) is None
    assert repr(replay(odd, trace.num_ops, 1)) == repr(python_replay(odd, trace.num_ops, 1))
    assert _timeline.replay(data, trace.num_ops, 1, D2H, H2D) is not None


def test_malformed_input_is_an_error_not_a_crash():
    trace = lstm_trace(3, 1, seed=0)
    residencies = tuple(Residency(b.id, b.start, b.end, 0) for b in trace.buffers)
    data = replay_input(trace, residencies, (), cost_model())
    assert len(data.filled.lows) == len(residencies)
    ungrouped = dataclasses.replace(data, filled=dataclasses.replace(
        data.filled, first=np.zeros_like(data.filled.first)))
    with pytest.raises(ValueError, match="filled: first does not group"):
        _timeline.replay(ungrouped, trace.num_ops, 1, D2H, H2D)
    wrong = dataclasses.replace(data, due=dataclasses.replace(
        data.due, buffer_ids=data.due.buffer_ids.astype(np.float64)))
    with pytest.raises(TypeError, match="buffer_ids must be a 1-d int64 array"):
        _timeline.replay(wrong, trace.num_ops, 1, D2H, H2D)


# -- attributes as columns --------------------------------------------------------------------

class Row:
    def __init__(self, **values):
        self.__dict__.update(values)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2 ** 63), 2 ** 63 - 1), st.booleans()), max_size=20))
def test_int_columns_are_numpys(rows):
    objects = [Row(a=a, b=b) for a, b in rows]
    block = _columns.int_columns(objects, ("a", "b"))
    expected = [np.fromiter((getattr(o, name) for o in objects), np.int64, len(objects))
                for name in ("a", "b")]
    assert np.frombuffer(block, np.int64).reshape(2, len(objects)).tolist() == [
        column.tolist() for column in expected]


@pytest.mark.parametrize("odd", [2 ** 63, -(2 ** 63) - 1, 1.0, np.int64(3), None, "a"])
def test_int_columns_leave_other_values_to_python(odd):
    """A value past 64 bits or not an int: None (``numpy.fromiter`` converts or raises)."""
    assert _columns.int_columns([Row(a=1), Row(a=odd)], ("a",)) is None
    assert _columns.int_columns([Row(a=1), Row(b=1)], ("a",)) is None  # missing
    assert _columns.int_columns([Row(a=1)], ("a",)) is not None


@dataclasses.dataclass(frozen=True, slots=True)
class SlotRow:
    a: object
    b: object = 0


class Shadowed(SlotRow):
    """A subclass whose ``a`` is a property: read through it, not the slot."""

    __slots__ = ()

    @property
    def a(self):
        return 7


class Unset:
    __slots__ = ("a",)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["slots", "dict", "shadowed"]),
                          st.integers(-(2 ** 63), 2 ** 63 - 1), st.booleans()), max_size=20))
def test_int_columns_read_slots_as_attribute_lookup_does(rows):
    """Slotted objects (the plan vocabulary), mixed with others, read as ``getattr`` does."""
    objects = []
    for kind, a, b in rows:
        if kind == "shadowed":  # its own a; b in the slot
            obj = object.__new__(Shadowed)
            object.__setattr__(obj, "b", b)
        else:
            obj = (SlotRow if kind == "slots" else Row)(a=a, b=b)
        objects.append(obj)
    block = _columns.int_columns(objects, ("a", "b"))
    expected = [[int(getattr(o, name)) for o in objects] for name in ("a", "b")]
    assert np.frombuffer(block, np.int64).reshape(2, len(objects)).tolist() == expected


def test_int_columns_leave_an_unset_slot_to_python():
    assert _columns.int_columns([SlotRow(a=1), Unset()], ("a",)) is None
    assert _columns.int_columns([SlotRow(a=1), SlotRow(a=1.5)], ("a",)) is None


def test_int_columns_read_the_plan_vocabulary():
    from cupool.core.vocabulary import SwapIn

    rows = [Residency(3, 1, 4, 64), Residency(5, 0, 2, 0)]
    block = _columns.int_columns(rows, ("buffer_id", "start", "end", "offset"))
    assert np.frombuffer(block, np.int64).reshape(4, 2).tolist() == [[3, 5], [1, 0], [4, 2],
                                                                     [64, 0]]
    block = _columns.int_columns([SwapIn(2, 5, 7)], ("buffer_id", "trigger_op", "due_op"))
    assert np.frombuffer(block, np.int64).tolist() == [2, 5, 7]


class ShadowIn(SwapIn):
    """A subclass: not a :class:`SwapIn` to the split by exact type."""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["in", "out", "recompute", "subclass", "other"]), max_size=30))
def test_by_type_splits_as_a_dict_of_lists_by_type_does(kinds):
    make = {"in": lambda k: SwapIn(k, 0, 1), "out": lambda k: SwapOut(k, 0),
            "recompute": lambda k: RecomputeAction(k, 1), "subclass": lambda k: ShadowIn(k, 0, 1),
            "other": lambda k: Residency(k, 0, 1, 0)}
    actions = [make[kind](k) for k, kind in enumerate(kinds)]
    with mock.patch.object(replay_input_module, "_columns", None):
        python = replay_input_module.by_kind(actions)
    found = _columns.by_type(actions, (SwapIn, SwapOut, RecomputeAction))
    assert found == (None if python is None else tuple(python))
    if python is not None:  # the same objects, in order
        assert all(a is b for x, y in zip(found, python, strict=True)
                   for a, b in zip(x, y, strict=True))
    assert python is None or not {"subclass", "other"} & set(kinds)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 12), max_size=40), st.integers(0, 10))
def test_grouped_counts_as_a_stable_argsort_sorts(ops, num_ops):
    column = np.array(ops, np.int64)
    rows, first = replay_input_module._grouped(column, num_ops)
    sorted_rows, sorted_first = replay_input_module._grouped_by_sorting(column, num_ops)
    assert rows.dtype == sorted_rows.dtype == first.dtype == sorted_first.dtype == np.int64
    assert rows.tolist() == sorted_rows.tolist()
    assert first.tolist() == sorted_first.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["pinned", "pageable", "copy", "missing"]), max_size=12))
def test_same_is_one_object_throughout(levels):
    """``(value,)`` exactly where every level is the one object; None where they differ,
    where one is missing, and for no objects."""
    copied = "".join(["pin", "ned"])  # equal to "pinned", another object
    objects = [Row() if k == "missing" else Row(level=copied if k == "copy" else k)
               for k in levels]
    ids = {id(o.level) for o in objects if hasattr(o, "level")}
    expected = ((objects[0].level,) if objects and len(ids) == 1 and "missing" not in levels
                else None)
    assert _columns.same(objects, "level") == expected
    assert _columns.same([SwapIn(1, 0, 1), SwapIn(2, 0, 1)], "level") == ("pinned",)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 6)), min_size=1, max_size=12,
                unique=True),
       st.lists(st.booleans(), max_size=12),
       st.lists(st.tuples(st.integers(-3, 2 ** 62), st.integers(-(2 ** 63), 2 ** 63 - 1)),
                max_size=6),
       st.lists(st.tuples(st.integers(0, 4), st.integers(-2, 8)), max_size=6))
def test_recomputes_meet_swap_ins_as_the_set_of_keys_says(spans, entered, far, near):
    """A recompute's key among the swap-ins' keys: the lookup in the sorted residency keys
    says what a set of Python ints says (keys past 63 bits included)."""
    width = 7
    keys = np.array(sorted(b * width + s for b, s in spans), np.int64)
    chosen = [k for k, e in zip(keys.tolist(), entered, strict=False) if e]
    in_keys = np.array(chosen, np.int64)
    filled = ~np.isin(keys, in_keys)
    recomputes = [RecomputeAction(b, op) for b, op in far + near]
    found = replay_input_module._swapped_in_recomputed(recomputes, width, in_keys, keys,
                                                        filled)
    expected = not {a.buffer_id * width + a.before_op for a in recomputes}.isdisjoint(chosen)
    assert found == expected


def test_dense_buffer_ids_are_looked_up_as_rows():
    sizes = replay_input_module.BufferSizes.of({1: 10, 0: 30, 2: 20})
    assert sizes.dense
    assert sizes.each(np.array([2, 0, 0, 1])).tolist() == [20, 30, 30, 10]
    with pytest.raises(KeyError, match="3"):  # an unknown id, as the dict says it
        sizes.each(np.array([1, 3]))
    assert not replay_input_module.BufferSizes.of({1: 10, 2: 20}).dense


def test_swap_outs_are_read_in_one_pass_where_every_drop_is_an_int():
    outs = [SwapOut(3, 1), SwapOut(5, 2, drop=True), SwapOut(4, 0)]
    ids, afters, kept = replay_input_module._out_columns(outs)
    assert (ids.tolist(), afters.tolist(), kept.tolist()) == ([3, 5, 4], [1, 2, 0],
                                                              [True, False, True])
    assert kept.tolist() == replay_input_module._copied(outs).tolist()
    odd = [SwapOut(3, 1), dataclasses.replace(SwapOut(5, 2), drop=None)]  # left to _copied
    ids, afters, kept = replay_input_module._out_columns(odd)
    assert (ids.tolist(), afters.tolist(), kept) == ([3, 5], [1, 2], None)
    assert replay_input_module._copied(odd).tolist() == [True, True]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2 ** 40), max_size=30))
def test_copy_times_per_size_are_those_of_numpys_unique_sizes(sizes):
    """Each row's copy time, asked once per distinct size in ascending order."""
    cost = cost_model(0.1)
    nbytes = np.array(sizes, np.int64)
    times = replay_input_module._CopyTimes(cost)
    found = times._one_level(nbytes, D2H, "pinned")
    unique = np.unique(nbytes)
    expected = np.array([cost.copy_us(n, D2H) for n in unique.tolist()],
                        np.float64)[np.searchsorted(unique, nbytes)]
    assert found.dtype == np.float64 and found.tolist() == expected.tolist()
    assert [key[0] for key in times.times] == unique.tolist()
