"""Odd traces: ``auto`` plans every budget from the largest working set up on traces at the
edges of the format (one op, ops without a duration or of 0 µs, persistent buffers never
used or used once, buffers of one op, recipes given by the trace), and refuses a trace
built in Python that breaks a rule of the format with a :class:`TraceFormatError` naming
the op or buffer, before any planner reads it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cupool.check import validate_plan
from cupool.core.vocabulary import PERSISTENT, Buffer, Op, Recompute, SolveStatus, Trace
from cupool.errors import TraceFormatError
from cupool.planning import make_plan
from cupool.planning.budget import BudgetParams, plan_with_budget
from cupool.planning.budget.working_sets import required_bytes
from cupool.sim import cost_model

QUICK = BudgetParams(refine_evaluations=20)
COSTS = [cost_model("gen5"), cost_model("gen4"), cost_model(55.0, latency_us=100.0)]


def _plans_from_the_floor_up(trace: Trace) -> None:
    floor = int(required_bytes(trace).max())
    below = plan_with_budget(trace, floor - 1, "auto", COSTS[0], QUICK) if floor > 1 else None
    assert below is None or below.plan.status == SolveStatus.INFEASIBLE
    for cost in COSTS:
        for budget in (floor, floor + 1, max(floor, trace.lower_bound_bytes() - 1)):
            result = plan_with_budget(trace, budget, "auto", cost, QUICK)
            assert result.feasible, result.reason
            report = validate_plan(result.trace, result.plan)
            assert report.valid, (report.rule, report.message)


def test_one_op_with_a_persistent_buffer_never_used():
    trace = Trace("one", (Op("a"),), (Buffer(0, 64, 0, 1, (0,)),
                                      Buffer(1, 4096, 0, 1, (), PERSISTENT)))
    _plans_from_the_floor_up(trace)


def test_ops_without_duration_or_of_zero_and_buffers_of_one_op():
    ops = (Op("a"), Op("b", 0.0), Op("c"), Op("d", 0.0), Op("e", 10.0))
    trace = Trace("zero", ops, (
        Buffer(0, 1 << 20, 0, 5, (0, 4)), Buffer(1, 1 << 20, 1, 2, (1,)),
        Buffer(2, 1 << 20, 2, 5, (2,)), Buffer(3, 3, 3, 4, (3,)),
        Buffer(4, 1 << 20, 0, 5, (4,), PERSISTENT, writes=()),
        Buffer(5, 7, 0, 5, (4,), PERSISTENT, writes=(4,))))
    _plans_from_the_floor_up(trace)


def test_recipes_whose_inputs_are_persistent_or_recomputable():
    ops = tuple(Op(f"op{i}", 50.0) for i in range(6))
    weight = Buffer(0, 4096, 0, 6, (1, 2, 5), PERSISTENT, writes=())
    x = Buffer(1, 8192, 0, 6, (0, 1, 5), recompute=Recompute(0, ()))
    y = Buffer(2, 8192, 1, 6, (1, 2, 4), recompute=Recompute(1, (0, 1)))
    z = Buffer(3, 8192, 2, 5, (2, 3, 4), recompute=Recompute(2, (0, 2)), writes=(2,))
    trace = Trace("recipes", ops, (weight, x, y, z, Buffer(4, 8192, 3, 4, (3,))))
    _plans_from_the_floor_up(trace)


OPS = tuple(Op(f"op{i}", 10.0) for i in range(3))
MALFORMED = {
    "use past the last op": (Trace("t", OPS, (Buffer(0, 100, 0, 3, (0, 5)),)),
                             "buffer 0: use at op 5 is outside the lifetime [0, 3)"),
    "end past the last op": (Trace("t", OPS, (Buffer(0, 100, 0, 5, (0,)),)),
                             "buffer 0: lifetime [0, 5) must satisfy"),
    "empty lifetime": (Trace("t", OPS, (Buffer(0, 100, 2, 2),)),
                       "buffer 0: lifetime [2, 2) must satisfy"),
    "uses out of order": (Trace("t", OPS, (Buffer(0, 100, 0, 3, (2, 1)),)),
                          "buffer 0: uses must be strictly increasing; 1 follows 2"),
    "duplicate ids": (Trace("t", OPS, (Buffer(4, 100, 0, 2, (0,)), Buffer(4, 50, 1, 3, (1,)))),
                      "buffer 4: duplicate buffer id (=4)"),
    "short persistent": (Trace("t", OPS, (Buffer(0, 100, 1, 2, (1,), PERSISTENT),)),
                         "buffer 0: a persistent buffer must live [0, 3), not [1, 2)"),
    "missing recipe input": (
        Trace("t", OPS, (Buffer(0, 100, 0, 3, (0, 2), recompute=Recompute(0, (9,))),)),
        "buffer 0: recompute input (=9) is not a buffer of the trace"),
    "recipe op past the last op": (
        Trace("t", OPS, (Buffer(0, 100, 0, 3, (0, 2), recompute=Recompute(3, ())),)),
        "buffer 0: recompute op (=3) must be an op index in [0, 3)"),
    "write not a use": (Trace("t", OPS, (Buffer(0, 100, 0, 3, (0, 2), writes=(1,)),)),
                        "buffer 0: write at op 1 is not one of its uses"),
    "NaN duration": (Trace("t", (Op("a", math.nan),), (Buffer(0, 100, 0, 1, (0,)),)),
                     "op 0: 'duration_us' (=nan) must be a finite number >= 0"),
    "sizes past 64 bits": (Trace("t", OPS, (Buffer(0, 1 << 62, 0, 3, (0, 2)),
                                             Buffer(1, 1 << 62, 1, 2, (1,)))),
                           "the buffers' sizes add up to 9223372036854775808 bytes, more than"),
    "0-byte buffer": (Trace("t", OPS, (Buffer(0, 100, 0, 3, (0, 2)), Buffer(1, 0, 1, 2, (1,)))),
                      "buffer 1: size (=0) must be an integer > 0 (bytes)"),
    "fractional size": (Trace("t", OPS, (Buffer(0, 2.5, 0, 3, (0, 2)),)),
                        "buffer 0: size (=2.5) must be an integer > 0 (bytes)"),
    "no ops": (Trace("t", (), ()), "the trace has no ops"),
    "no buffers": (Trace("t", OPS, ()), "the trace has no buffers"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_trace_built_in_python_breaking_the_format_is_refused_by_name(case):
    trace, message = MALFORMED[case]
    with pytest.raises(TraceFormatError) as error:
        plan_with_budget(trace, 1000, "auto", COSTS[0], QUICK)
    assert str(error.value).startswith(message)


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_make_plan_refuses_it_too_without_a_budget(case):
    trace, message = MALFORMED[case]
    with pytest.raises(TraceFormatError) as error:
        make_plan(trace)  # a static plan: no budget planner is asked
    assert str(error.value).startswith(message)


def test_a_persistent_buffer_no_op_uses_counts_beside_the_lightest_op():
    # one op: the 4096 unused bytes must be resident there beside the 64 it uses
    trace = Trace("idle", (Op("a", 5.0),), (Buffer(0, 64, 0, 1, (0,)),
                                            Buffer(1, 4096, 0, 1, (), PERSISTENT)))
    assert int(required_bytes(trace).max()) == 4160
    for policy in ("auto", "greedy"):
        result = plan_with_budget(trace, 4159, policy, COSTS[0], QUICK)
        assert result.plan.status == SolveStatus.INFEASIBLE
        assert result.reason.startswith(
            "infeasible: op 0 needs 4160 bytes resident (budget 4159 bytes): its uses' 64 "
            "bytes, the fewest of any op, and persistent buffer 1 (4096 bytes)")


def test_numpy_integers_are_ids_and_op_indices_as_python_ones_are():
    trace = Trace("numpy", (Op("a", 1.0), Op("b", 2.0)),
                  (Buffer(np.int64(3), 100, np.int64(0), np.int64(2), (0, 1)),
                   Buffer(np.int32(4), 10, 1, 2, (1,))))
    result = plan_with_budget(trace, 110, "auto", COSTS[0], QUICK)
    assert result.feasible and validate_plan(result.trace, result.plan).valid
    with pytest.raises(TraceFormatError, match=r"^buffer True: 'id' \(=True\) must be"):
        plan_with_budget(Trace("bool", trace.ops, (Buffer(True, 10, 0, 2, (1,)),)), 110)


def test_one_op_holds_every_persistent_buffer_no_op_uses():
    trace = Trace("idle2", (Op("a"),), (Buffer(0, 64, 0, 1, (0,)),
                                        Buffer(1, 1000, 0, 1, (), PERSISTENT),
                                        Buffer(2, 3000, 0, 1, (), PERSISTENT, writes=())))
    assert int(required_bytes(trace).max()) == 4064
    result = plan_with_budget(trace, 4063, "auto", COSTS[2], QUICK)
    assert result.plan.status == SolveStatus.INFEASIBLE
    assert result.reason.startswith("infeasible: op 0 needs 4064 bytes resident (budget 4063 "
                                    "bytes): the ops' uses (64 bytes over all ops) and the 2 ")
    _plans_from_the_floor_up(trace)


def test_unused_persistent_buffers_are_spread_largest_first():
    # two ops using 10 bytes each; unused persistent buffers of 5, 5 and 10 bytes: 10 on
    # one op and 5 + 5 on the other is a floor of 20 (in the trace's order it was 25, and
    # budgets 20-24 got no plan)
    trace = Trace("idle3", (Op("a", 10.0), Op("b", 10.0)),
                  (Buffer(0, 10, 0, 1, (0,)), Buffer(1, 10, 1, 2, (1,)),
                   Buffer(2, 5, 0, 2, (), PERSISTENT), Buffer(3, 5, 0, 2, (), PERSISTENT),
                   Buffer(4, 10, 0, 2, (), PERSISTENT)))
    assert required_bytes(trace).tolist() == [20, 20]
    assert plan_with_budget(trace, 19, "auto", COSTS[0], QUICK).plan.status == \
        SolveStatus.INFEASIBLE
    _plans_from_the_floor_up(trace)
