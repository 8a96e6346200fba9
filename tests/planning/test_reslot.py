"""Late swap-ins re-placed where their bytes free up first (``reslot_late``), on hand-made
plans whose timings are worked out in the docstrings, and through the offline feedback
(``refine_triggers``)."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cupool.check import validate_swap_plan
from cupool.core.vocabulary import PERSISTENT, Buffer, Residency, SwapIn, SwapOut
from cupool.planning.budget.feedback import predicted_waits, refine_triggers, swap_in_copies
from cupool.planning.budget.reslot import reslot_late
from cupool.sim.cost import cost_model
from cupool.sim.simulator import simulate
from tests.planning.test_auto_shapes import persistent_heavy_traces
from tests.swap_cases import swap_plan, trace_of

S = 30000  # a copy of S bytes takes 33 µs at 1 GB/s with 3 µs latency


def _state(buffer_id: int, use: int) -> Buffer:
    return Buffer(buffer_id, S, 0, 3, (use,), kind=PERSISTENT)


def _crossed_plan(keep_q_across: bool = False):
    """op:       0      1      2          (10 µs each; every copy takes 33 µs)
    e 0, f 1:  copied in for op 0 (H2D 0..33, 33..66) at A = 0 and B = S, copied out
               after it (D2H 76..109, 109..142): A is free at 109, B at 142
    p 2:       due at op 1, placed at B: its copy waits for B (H2D 142..175), op 1 at 175
    q 3:       due at op 2, triggered at op 1, placed at A: its copy takes A first (109..142)

    Placed by when the bytes free up, p takes A (H2D 109..142, op 1 at 142) and q B
    (142..175): the copies out of p and q end at 185 and 218 instead of 218 and 251.

    With ``keep_q_across``, q stays on the device across the boundary at C = 2 S instead
    (copied out after op 0, behind e and f: C is free at 175): its offset must stay."""
    trace = trace_of([10.0] * 3, _state(0, 0), _state(1, 0), _state(2, 1), _state(3, 2))
    residencies = [Residency(0, 0, 1, 0), Residency(1, 0, 1, S), Residency(2, 1, 2, S)]
    actions = [SwapIn(0, 0, 0), SwapIn(1, 0, 0), SwapOut(0, 0), SwapOut(1, 0)]
    if keep_q_across:
        residencies += [Residency(3, 0, 1, 2 * S), Residency(3, 1, 3, 2 * S)]
        actions += [SwapOut(3, 0), SwapIn(3, 1, 2), SwapIn(2, 1, 1), SwapOut(2, 1)]
    else:
        residencies += [Residency(3, 1, 3, 0)]
        actions += [SwapIn(3, 1, 2), SwapIn(2, 1, 1), SwapOut(2, 1), SwapOut(3, 2)]
    plan = swap_plan(trace, residencies, actions, budget=(3 if keep_q_across else 2) * S)
    return trace, plan, cost_model(1.0, latency_us=3.0)


def _offsets(plan) -> dict:
    return {(r.buffer_id, r.end): (r.start, r.offset) for r in plan.residencies}


def test_the_swap_in_due_first_takes_the_bytes_freed_first():
    trace, plan, cost = _crossed_plan()
    assert validate_swap_plan(trace, plan).valid
    before = simulate(trace, plan, cost, validate=False)
    assert before.iteration_us == pytest.approx(251.0)
    # e and f are late too (op 0 waits for them: nothing runs before it), where they are
    assert predicted_waits(before, plan) == {0: pytest.approx(33.0), 1: pytest.approx(66.0),
                                             2: pytest.approx(175.0 - before.op_times[1][0])}
    moved = reslot_late(trace, plan, before, swap_in_copies(before, plan))
    assert moved.moved == 2
    assert _offsets(moved.plan)[(2, 2)] == (1, 0)  # p at A
    assert _offsets(moved.plan)[(3, 3)] == (1, S)  # q at B
    assert _offsets(moved.plan)[(0, 1)] == (0, 0)  # e and f stay
    assert _offsets(moved.plan)[(1, 1)] == (0, S)
    assert validate_swap_plan(trace, moved.plan).valid
    after = simulate(trace, moved.plan, cost, validate=False)
    assert after.iteration_us == pytest.approx(218.0)
    assert after.op_times[1][1] == pytest.approx(142.0)


def test_nothing_late_nothing_moved():
    trace, plan, cost = _crossed_plan()
    report = simulate(trace, plan, cost, validate=False)
        # re-placed once, p is no longer late waiting for bytes: placing again changes nothing
    moved = reslot_late(trace, plan, report, swap_in_copies(report, plan)).plan
    again = simulate(trace, moved, cost, validate=False)
    assert reslot_late(trace, moved, again, swap_in_copies(again, moved)).moved == 0


def test_a_buffer_on_the_device_across_the_boundary_keeps_its_offset():
    trace, plan, cost = _crossed_plan(keep_q_across=True)
    assert validate_swap_plan(trace, plan).valid
    report = simulate(trace, plan, cost, validate=False)
    moved = reslot_late(trace, plan, report, swap_in_copies(report, plan))
    # p moves to A (freed first); q would begin sooner at B, but it holds C at op 0
    assert _offsets(moved.plan)[(2, 2)] == (1, 0)
    assert _offsets(moved.plan)[(3, 3)][1] == 2 * S
    assert validate_swap_plan(trace, moved.plan).valid
    # q's own copy out (behind e's and f's) bounds the step either way
    assert (simulate(trace, moved.plan, cost, validate=False).iteration_us
            <= report.iteration_us)


def test_a_later_trigger_lets_a_swap_in_follow_the_one_due_first():
    """Two copy engines each way. f is 10 times larger: e and f come in side by side (H2D
    0..33, 0..303; op 0 at 303) and go out side by side (D2H 313..346, 313..616), so
    only A is free early. As planned, q (due 2) takes A from op 1 (H2D 346..379) and p
    (due 1) waits for B until 616: op 1 at 649, the copies out end at 702. Re-placed, p
    takes A (H2D 346..379, op 1 at 379, out 389..422) and q follows it there from op 2
    (its trigger moves from 1 to 2: H2D 422..455) rather than wait for f's long copy
    out: the step ends with f's copy out, at 616."""
    trace = trace_of([10.0] * 3, _state(0, 0), Buffer(1, 10 * S, 0, 3, (0,), kind=PERSISTENT),
                     _state(2, 1), _state(3, 2))
    plan = swap_plan(trace, [Residency(0, 0, 1, 0), Residency(1, 0, 1, S),
                             Residency(2, 1, 2, S), Residency(3, 1, 3, 0)],
                     [SwapIn(0, 0, 0), SwapIn(1, 0, 0), SwapOut(0, 0), SwapOut(1, 0),
                      SwapIn(3, 1, 2), SwapIn(2, 1, 1), SwapOut(2, 1), SwapOut(3, 2)],
                     budget=11 * S)
    cost = cost_model(1.0, latency_us=3.0, copy_engines_per_direction=2)
    assert validate_swap_plan(trace, plan).valid
    report = simulate(trace, plan, cost, validate=False)
    moved = reslot_late(trace, plan, report, swap_in_copies(report, plan)).plan
    assert _offsets(moved)[(2, 2)] == (1, 0)
    assert _offsets(moved)[(3, 3)] == (2, 0)
    swap_in_q = next(a for a in moved.actions if isinstance(a, SwapIn) and a.buffer_id == 3)
    assert swap_in_q.trigger_op == 2
    assert validate_swap_plan(trace, moved).valid
    assert report.iteration_us == pytest.approx(702.0)
    assert simulate(trace, moved, cost, validate=False).iteration_us == pytest.approx(616.0)


def test_the_offline_feedback_keeps_a_faster_re_placement():
    trace, plan, cost = _crossed_plan()
    refined = refine_triggers(trace, plan, cost)
    assert refined.moved_triggers >= 2
    assert validate_swap_plan(trace, refined.plan).valid
    assert refined.simulation.iteration_us <= 218.0 + 1e-6


@st.composite
def update_phase_traces(draw):
    """Steps that end with one update op per layer, each writing that layer's state (one
    to three persistent buffers of MBs, copied for tens of µs) after a few short ops whose
    temporaries are also MBs: copies dominate, as in an Adam phase below the budget."""
    layers = draw(st.integers(2, 5))
    head = draw(st.integers(2, 6))
    n = head + layers
    op_us = draw(st.sampled_from([2.0, 10.0, 40.0]))
    buffers = []
    for _i in range(draw(st.integers(0, 4))):
        start = draw(st.integers(0, head - 1))
        end = draw(st.integers(start + 1, head))
        buffers.append(Buffer(len(buffers), draw(st.integers(1, 8)) << 20, start, end,
                              tuple(range(start, end))))
    for layer in range(layers):
        forward = draw(st.sets(st.integers(0, head - 1), max_size=2))
        for _k in range(draw(st.integers(1, 3))):
            uses = (*sorted(forward), head + layer)
            buffers.append(Buffer(len(buffers), draw(st.integers(1, 8)) << 20, 0, n, uses,
                                  kind=PERSISTENT))
    return trace_of([op_us] * n, *buffers, name="update-phase")


@settings(max_examples=80, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(trace=st.one_of(update_phase_traces(), persistent_heavy_traces()),
       fraction=st.sampled_from([0.8, 0.7, 0.5, 0.4]), link=st.sampled_from(["gen4", "gen5"]))
def test_re_placement_on_generated_traces_moves_only_starts_later_and_offsets(trace, fraction,
                                                                              link):
    """On plans of the boundary member for generated persistent-heavy steps: the
    re-placed plan keeps every residency's buffer and end, starts a residency no earlier
    than planned and no later than its swap-in's due op, triggers each swap-in where its
    residency starts; what the feedback keeps of it is valid and no slower."""
    from cupool.planning.budget.boundary import VARIANTS, persistent_over, plan_boundary
    from cupool.planning.budget.params import BudgetParams

    budget = max(1, int(fraction * trace.lower_bound_bytes()))
    assume(persistent_over(trace, budget))
    cost = cost_model(link)
    variant = VARIANTS[int(fraction * 10) % len(VARIANTS)]
    planned = plan_boundary(trace, budget, cost, BudgetParams(), time.perf_counter(), variant)
    assume(planned.feasible)
    plan, planned_trace = planned.plan, planned.trace
    report = simulate(planned_trace, plan, cost, validate=False)
    moved = reslot_late(planned_trace, plan, report, swap_in_copies(report, plan))
    before = sorted(plan.residencies, key=lambda r: (r.buffer_id, r.end))
    after = sorted(moved.plan.residencies, key=lambda r: (r.buffer_id, r.end))
    assert [(r.buffer_id, r.end) for r in before] == [(r.buffer_id, r.end) for r in after]
    assert sum(a != b for a, b in zip(before, after, strict=True)) == moved.moved
    starts = {(r.buffer_id, r.start) for r in moved.plan.residencies}
    for old, new in zip(before, after, strict=True):
        assert new.start >= old.start
    for action in moved.plan.actions:
        if isinstance(action, SwapIn):
            assert action.trigger_op <= action.due_op
            assert (action.buffer_id, action.trigger_op) in starts
    refined = refine_triggers(planned_trace, plan, cost, reslot_only=True)
    assert validate_swap_plan(planned_trace, refined.plan).valid
    assert refined.simulation.iteration_us <= report.iteration_us + 1e-9
