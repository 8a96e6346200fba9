"""The refill part of the overhead lower bound (:mod:`cupool.sim.refill`): hand cases for
each way the first copy in after a peak finds room, each checked against a valid plan that
the simulator runs, and the persistent-heavy shape whose Adam phase it bounds."""

from __future__ import annotations

import pytest

from cupool.check import validate_plan
from cupool.core.vocabulary import PERSISTENT, Buffer, Residency, SwapIn, SwapOut
from cupool.planning.budget.recipes import with_recompute_recipes
from cupool.planning.shapes import persistent_heavy
from cupool.sim import cost_model, overhead_lower_bound, simulate
from cupool.sim.bound_inputs import BufferArrays
from cupool.sim.refill import ROOM_COPY_OUT, ROOM_FREE, refill_bound
from tests.swap_cases import swap_plan, trace_of

LINK = cost_model(0.05, latency_us=0.0)
"""1000 bytes take 20 us each way."""


def _refill(trace, budget, cost=LINK):
    arrays = BufferArrays(trace, cost)
    excess = arrays.pending_bytes() - budget
    return refill_bound(trace, arrays, cost.op_times(trace), excess, cost)


def _two_weights(writes):
    """op:  0    1       (10 us each: ideal 20 us), budget 1000 bytes
    P0: 1000 B, persistent, used at op 0 (``writes``: written there, or read-only)
    P1: 1000 B, persistent, read at op 1: off the device at op 0."""
    return trace_of([10.0, 10.0], Buffer(0, 1000, 0, 2, (0,), PERSISTENT, writes=writes),
                    Buffer(1, 1000, 0, 2, (1,), PERSISTENT, writes=()))


def _swap_through(trace, drop: bool):
    """P0 and P1 take turns at offset 0: P0 comes in for op 0 (a copy before it, in every
    iteration) and leaves after it (copied out, or dropped when clean), P1 comes in for op
    1 and leaves after it (read-only: dropped)."""
    return swap_plan(trace, [Residency(0, 0, 1, 0), Residency(1, 1, 2, 0)],
                     [SwapIn(0, 0, 0), SwapOut(0, 0, drop=drop), SwapIn(1, 1, 1),
                      SwapOut(1, 1, drop=True)], budget=1000)


def test_the_first_copy_in_waits_for_the_copy_out_that_makes_room():
    """P0 is written at op 0 and fills the budget: P1's copy in lands where P0 was, so it
    waits for P0's copy out (20 us) and then takes 20 us, all between op 0 and op 1:
    40 us of stall. Per op and per window the link carries only P1's 20 us."""
    trace = _two_weights(writes=(0,))
    refill = _refill(trace, 1000)
    assert refill.stall_us == pytest.approx(40.0)
    assert (refill.op, refill.until_op, refill.room) == (0, 1, ROOM_COPY_OUT)
    plan = _swap_through(trace, drop=False)
    report = validate_plan(trace, plan)
    assert report.valid, report.message
    simulated = simulate(trace, plan, LINK)
    # the plan also copies P0 in before op 0: 20 + 10 + 40 + 10 us
    assert simulated.iteration_us == pytest.approx(80.0)
    bound = overhead_lower_bound(trace, 1000, LINK)
    assert 60.0 - 1e-6 <= bound.details["bound_us"] <= simulated.iteration_us + 1e-9


def test_a_clean_buffer_leaves_at_once():
    """The same with P0 read-only: it leaves after op 0 without a copy, so P1's copy in
    starts when op 0 ends: 20 us, which this plan runs between the two ops."""
    trace = _two_weights(writes=())
    refill = _refill(trace, 1000)
    assert refill.stall_us == pytest.approx(20.0)
    assert refill.room == ROOM_FREE
    plan = _swap_through(trace, drop=True)
    report = validate_plan(trace, plan)
    assert report.valid, report.message
    simulated = simulate(trace, plan, LINK)
    assert simulated.stall_us >= refill.stall_us - 1e-9
    assert overhead_lower_bound(trace, 1000, LINK).overhead <= simulated.overhead + 1e-9


def test_a_buffer_that_dies_makes_room_when_it_does():
    """op 0 makes and reads T (1000 B), op 1 reads T, op 2 reads P (1000 B, persistent,
    read-only), budget 1000: at op 1 P is off and T held; T dies when op 1 ends, and P's
    20 us copy runs before op 2: 20 us (from op 0, P waits for T's death, op 1's 10 us,
    then copies in 20 us against op 1's 10 us: the same)."""
    trace = trace_of([10.0] * 3, Buffer(0, 1000, 0, 2, (0, 1)),
                     Buffer(1, 1000, 0, 3, (2,), PERSISTENT, writes=()))
    refill = _refill(trace, 1000)
    assert refill.stall_us == pytest.approx(20.0)
    assert (refill.op, refill.until_op, refill.room) == (1, 2, ROOM_FREE)
    plan = swap_plan(trace, [Residency(0, 0, 2, 0), Residency(1, 2, 3, 0)],
                     [SwapIn(1, 2, 2), SwapOut(1, 2, drop=True)], budget=1000)
    report = validate_plan(trace, plan)
    assert report.valid, report.message
    assert simulate(trace, plan, LINK).stall_us == pytest.approx(20.0)


def test_room_held_beside_the_excess_costs_a_whole_copy_more():
    """Three read-write weights of 1000 B, W1 read at op 1, W2 at op 2, W0 written at op
    0; budget 1000: W1 and W2 are off at op 0. Room for the first of them after op 0 is a
    copy out of W0 (20 us) or, had the budget held it, a third copy in -- none: the
    candidates hold no more than the excess, so only the copy out remains: 20 + 20 + 20 us
    of copies before op 2, which starts 10 us after op 0 ends."""
    trace = trace_of([10.0] * 3, Buffer(0, 1000, 0, 3, (0,), PERSISTENT),
                     Buffer(1, 1000, 0, 3, (1,), PERSISTENT),
                     Buffer(2, 1000, 0, 3, (2,), PERSISTENT))
    refill = _refill(trace, 1000)
    assert refill.room == ROOM_COPY_OUT
    assert refill.stall_us == pytest.approx(60.0 - 10.0)


def test_room_beside_the_excess_is_one_whole_buffer_more():
    """Four 1000-B read-only weights, Wi used at op i only (10 us each); budget 2000: at
    op 0 two of W1..W3 are off. W0, read-only, leaves clean when op 0 ends, so the copies
    in of the two start then: 40 us against ops 1 and 2 (20 us)."""
    trace = trace_of([10.0] * 4, *(Buffer(j, 1000, 0, 4, (j,), PERSISTENT, writes=())
                                   for j in range(4)))
    refill = _refill(trace, 2000)
    assert refill.stall_us == pytest.approx(20.0)
    written = trace_of([10.0] * 4, Buffer(0, 1000, 0, 4, (0,), PERSISTENT),
                       *(Buffer(j, 1000, 0, 4, (j,), PERSISTENT, writes=())
                         for j in range(1, 4)))
    # W0 written at op 0: its room comes by a copy out (20 us), but W1 may be held at op
    # 0, clean, and leave after op 1: W2's copy starts when op 1 ends, W3's once W0's copy
    # out is done, one after the other: 10 + 40 us against ops 1 and 2 (20 us)
    refill = _refill(written, 2000)
    assert refill.stall_us == pytest.approx(30.0)
    assert refill.room == ROOM_FREE
    plan = swap_plan(written, [Residency(0, 0, 1, 0), Residency(1, 0, 2, 1000),
                               Residency(2, 2, 3, 1000), Residency(3, 2, 4, 0)],
                     [SwapIn(0, 0, 0), SwapIn(1, 0, 1), SwapOut(0, 0), SwapOut(1, 1, drop=True),
                      SwapIn(2, 2, 2), SwapIn(3, 2, 3), SwapOut(2, 2, drop=True),
                      SwapOut(3, 3, drop=True)], budget=2000)
    report = validate_plan(written, plan)
    assert report.valid, report.message
    simulated = simulate(written, plan, LINK)
    assert overhead_lower_bound(written, 2000, LINK).overhead <= simulated.overhead + 1e-9


def test_persistent_heavy_adam_phase():
    """The persistent-heavy step at 90% of its lower bound on Gen4: at the first Adam op
    every layer's four 16 MiB tensors are pending and four are off; the first copy in waits
    for a copy out (or five come in): five whole copies after ``adam[0]`` against the
    other Adam ops before ``adam[11]``."""
    trace = with_recompute_recipes(persistent_heavy())
    budget = int(0.9 * trace.lower_bound_bytes())
    cost = cost_model("gen4")
    refill = _refill(trace, budget, cost)
    names = [op.name for op in trace.ops]
    assert (names[refill.op], names[refill.until_op]) == ("adam[0]", "adam[11]")
    op_us = cost.op_times(trace)
    copy = cost.copy_us(16 * 2**20, "h2d")
    between = sum(op_us[refill.op + 1:refill.until_op])
    assert refill.stall_us == pytest.approx(5 * copy - between, rel=1e-6)


def test_a_clean_buffer_used_after_the_horizon_frees_room_even_across_empty_ops():
    """op:  0 (10 us)  1 (0 us)  2 (0 us)  3 (10 us); P, Q: read-only weights of 1000 B,
    P used at ops 0 and 3, Q at op 2; budget 1000. Q is off at op 0 and P leaves clean
    after it, used again only after Q's op: Q's 20 us copy starts when op 0 ends. Ops 1
    and 2 take no time, so P's next use and Q's lie at the same instant; the refill tells
    them apart by op, not by time (P is not needed by op 2)."""
    trace = trace_of([10.0, 0.0, 0.0, 10.0],
                     Buffer(0, 1000, 0, 4, (0, 3), PERSISTENT, writes=()),
                     Buffer(1, 1000, 0, 4, (2,), PERSISTENT, writes=()))
    refill = _refill(trace, 1000)
    assert refill.room == ROOM_FREE
    assert refill.stall_us == pytest.approx(20.0)


def test_a_clean_buffer_used_again_may_stay_for_that_use_and_leave_after_it():
    """op:  0 (20 us)  1  2  3 (10 us each); P: read-only weight of 1000 B used at op 3, Q
    one used at ops 1 and 2; budget 1000. At op 1, Q is held and P off. Room for P's copy
    comes from Q, which stays for its use at op 2 and leaves clean after it: 20 us of copy
    after op 2 ends, the plan's 20 us of stall (Q's copy hides behind op 0). Were Q to
    leave after op 1 it would come back for op 2: a second copy, not the only way."""
    trace = trace_of([20.0, 10.0, 10.0, 10.0], Buffer(0, 1000, 0, 4, (3,), PERSISTENT, writes=()),
                     Buffer(1, 1000, 0, 4, (1, 2), PERSISTENT, writes=()))
    plan = swap_plan(trace, [Residency(1, 0, 3, 0), Residency(0, 3, 4, 0)],
                     [SwapIn(1, 0, 1), SwapOut(1, 2, drop=True), SwapIn(0, 3, 3),
                      SwapOut(0, 3, drop=True)], budget=1000)
    report = validate_plan(trace, plan)
    assert report.valid, report.message
    simulated = simulate(trace, plan, LINK)
    assert simulated.stall_us == pytest.approx(20.0)
    assert _refill(trace, 1000).stall_us == pytest.approx(20.0)
    assert overhead_lower_bound(trace, 1000, LINK).overhead <= simulated.overhead + 1e-9
