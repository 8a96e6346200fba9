"""The flat replay (``cupool.sim.timeline``) against the event replay it stands in for
(``simulate(..., reference=True)``): every report field equal, floats bit for bit, records
in the same order -- on the bundled traces' plans, random plans and hand-made corner cases.
Every test runs twice: with the compiled loop and with the Python one (``replay_loop``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cupool.check import validate_plan
from cupool.core.vocabulary import (
    PAGEABLE,
    PERSISTENT,
    Buffer,
    Recompute,
    RecomputeAction,
    Residency,
    SolveStatus,
    SwapIn,
    SwapOut,
    plan_residencies,
)
from cupool.io import load_trace
from cupool.planning import make_plan
from cupool.sim import SimReport, cost_model, simulate, timeline
from cupool.sim.events import SimulationError
from cupool.sim.replay_input import (
    BufferSizes,
    ResidencyArrays,
    _by_op_columns,
    _by_op_loop,
)
from cupool.sim.simulator import IterationTimes, time_iteration
from tests.conftest import TRACES
from tests.swap_cases import (
    resnet_capuchin_plan,
    swap_plan,
    trace_and_plan,
    trace_of,
    written_trace_and_plan,
)

BENCH_TRACES = sorted((Path(__file__).resolve().parents[2] / "bench" / "data" / "traces")
                      .glob("*.trace.json.gz"))
ENGINES = (1, 2)

pytestmark = pytest.mark.usefixtures("replay_loop")


def test_the_loop_asked_for_runs(replay_loop):
    trace = overlap_trace()
    plan = overlap_plan(trace)
    with mock.patch.object(timeline, "python_replay", wraps=timeline.python_replay) as python:
        simulate(trace, plan, cost_model(0.1), validate=False)
    assert python.called == (replay_loop == "python")


def assert_same(trace, plan, cost, valid=True) -> SimReport:
    """``plan`` is valid (unless ``valid`` is False) and both replays of it agree on every
    field (``repr`` tells ``-0.0`` from ``0.0`` and a NumPy integer from an ``int``);
    returns the report."""
    if valid:
        report = validate_plan(trace, plan)
        assert report.valid, report.message
    fast = simulate(trace, plan, cost, validate=False)
    reference = simulate(trace, plan, cost, validate=False, reference=True)
    for field in dataclasses.fields(SimReport):
        assert getattr(fast, field.name) == getattr(reference, field.name), field.name
    assert repr(fast) == repr(reference)
    assert_same_times(time_iteration(trace, plan, cost), fast)
    return fast


def assert_same_times(times: IterationTimes, report: SimReport) -> None:
    """``times`` are ``report``'s, bit for bit (``repr`` tells ``-0.0`` from ``0.0``, and the
    ``int`` 0 of no copies from a ``float``)."""
    assert repr(times.iteration_us) == repr(report.iteration_us)
    assert repr(times.stall_us) == repr(report.stall_us)
    assert repr(times.copying_us) == repr(sum(c[5] - c[4] for c in report.copies))
    assert times.op_times.dtype == np.float64
    assert times.op_times.shape == (len(report.op_times), 3)
    assert times.op_times.tobytes() == np.array(report.op_times, np.float64).tobytes()
    assert repr(times.recomputes) == repr(report.recomputes)


# -- bundled traces: the plans the budget planner makes -----------------------------------

_AUTO_PLANS: dict = {}


def _auto_plan(path: Path, fraction: float):
    """``auto``'s plan for ``path`` at ``fraction`` of its lower bound (made once)."""
    if (path, fraction) not in _AUTO_PLANS:
        trace = load_trace(path)
        _AUTO_PLANS[path, fraction] = make_plan(
            trace, int(trace.lower_bound_bytes() * fraction), policy="auto")
    return _AUTO_PLANS[path, fraction]


@pytest.mark.slow
@pytest.mark.parametrize("path", TRACES + BENCH_TRACES,
                         ids=lambda p: f"{p.parent.parent.name}-{p.name.split('.')[0]}")
def test_bundled_traces_auto_plans_replay_identically(path):
    """At 90% and 70% of the lower bound (some inference traces have no plan there: their
    infeasible reports are compared too). The plans are made once for both loops."""
    for fraction in (0.9, 0.7):
        planned = _auto_plan(path, fraction)
        found = planned.plan.status not in (SolveStatus.INFEASIBLE, SolveStatus.TIMEOUT)
        for engines in ENGINES:
            report = assert_same(planned.trace, planned.plan, cost_model(
                "gen5", copy_engines_per_direction=engines), valid=found)
            assert report.feasible == found


@pytest.mark.slow
def test_every_plan_the_budget_planner_replays_replays_identically(monkeypatch):
    """``auto`` replays each candidate it weighs: every one of those replays, through the
    event core as well, gives the same report."""
    import cupool.sim.simulator as simulator

    flat = simulator.simulate
    replayed = []

    def both(trace, plan, cost=None, **options):
        report = flat(trace, plan, cost, **options)
        assert repr(report) == repr(flat(trace, plan, cost, reference=True, **options))
        replayed.append(report.feasible)
        return report

    monkeypatch.setattr(simulator, "simulate", both)
    trace = load_trace(next(p for p in TRACES if p.name.startswith("gpt2_train_b8_s1024_fp32")))
    make_plan(trace, int(trace.lower_bound_bytes() * 0.7), policy="auto")
    assert sum(replayed) >= 20


def test_capuchin_plan_with_swaps_and_recomputes_replays_identically():
    _trace, plan, planned = resnet_capuchin_plan()
    for link in ("gen4", "gen5", 2.0):
        for engines in ENGINES:
            report = assert_same(planned, plan, cost_model(link,
                                                           copy_engines_per_direction=engines))
            assert report.copies and report.recomputes


# -- random small traces and valid plans ----------------------------------------------------

@st.composite
def varied(draw, plans):
    """A case of ``plans`` on a varied machine: 1 or 2 engines per direction, a latency of
    0 or 1 µs, a link that makes copy times whole numbers (ties with the whole-number op
    durations) or not, every swap of some buffers from or to pageable memory, and a host
    whose enqueue of each op takes 0, 0.7 or 3 µs and of each action 0 or 2.5 µs more,
    gated or not."""
    trace, plan, cost = draw(plans)
    pageable = draw(st.sets(st.sampled_from([b.id for b in trace.buffers])))
    actions = tuple(dataclasses.replace(a, level=PAGEABLE)
                    if isinstance(a, (SwapIn, SwapOut)) and a.buffer_id in pageable else a
                    for a in plan.actions)
    cost = cost_model(draw(st.sampled_from([0.1, 0.05, 1.0, 0.02])),
                      latency_us=draw(st.sampled_from([0.0, 1.0])),
                      copy_engines_per_direction=draw(st.sampled_from(ENGINES)),
                      pageable_gbps=draw(st.sampled_from([None, 0.1])),
                      pageable_latency_us=draw(st.sampled_from([None, 0.0, 2.0])))
    cost = dataclasses.replace(cost, host_us_per_op=draw(st.sampled_from([0.0, 0.0, 0.7, 3.0])),
                               host_us_per_action=draw(st.sampled_from([0.0, 0.0, 2.5])),
                               host_gated=draw(st.booleans()))
    return trace, dataclasses.replace(plan, actions=actions), cost


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(varied(trace_and_plan()))
def test_random_plans_replay_identically(case):
    assert_same(*case)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(varied(written_trace_and_plan()))
def test_random_plans_with_drops_replay_identically(case):
    assert_same(*case)


# -- corner cases ---------------------------------------------------------------------------

def overlap_trace():
    """op:   0    1    2    3    4    5      (durations below)
    A 0: [====)              [=======)     1000 B at 0, out after op 0, in at 3 (due 4)
    B 1:      [=========)                  600 B at 0: lands in A's bytes
    C 2:      [=========)                  400 B at 600: lands in A's bytes too
    D 3: [====)              [============)  persistent, read-only, 500 B at 1000: out after
                                           op 0 (or dropped), in at 3 (due 4)
    P 4:                     [============)  persistent 300 B at 1500, offloaded: in at 3
                                           (due 4), out after op 5, past the last op
    B and C start at op 1 (filled by compute) and wait for A's copy out; the three swap-ins
    at op 3 are handed over together, A's after its own copy out."""
    return trace_of(
        [2.0, 0.0, 3.0, 0.0, 5.0, 1.0],
        Buffer(0, 1000, 0, 5, (0, 4)),
        Buffer(1, 600, 1, 3, (1, 2)),
        Buffer(2, 400, 1, 3, (1, 2)),
        Buffer(3, 500, 0, 6, (0, 4), PERSISTENT, writes=()),
        Buffer(4, 300, 0, 6, (4, 5), PERSISTENT),
    )


def overlap_plan(trace, drop=False):
    return swap_plan(trace, [
        Residency(0, 0, 1, 0), Residency(0, 3, 5, 0), Residency(1, 1, 3, 0),
        Residency(2, 1, 3, 600), Residency(3, 0, 1, 1000), Residency(3, 3, 6, 1000),
        Residency(4, 3, 6, 1500),
    ], [SwapOut(0, 0), SwapOut(3, 0, drop=drop), SwapIn(0, 3, 4), SwapIn(3, 3, 4),
        SwapIn(4, 3, 4), SwapOut(4, 5)])


@pytest.mark.parametrize("engines", ENGINES)
@pytest.mark.parametrize("latency", [0.0, 1.0])
@pytest.mark.parametrize("drop", [False, True])
def test_copies_handed_over_together_waiting_on_bytes_and_after_the_last_op(engines, latency,
                                                                            drop):
    trace = overlap_trace()
    report = assert_same(trace, overlap_plan(trace, drop), cost_model(
        0.1, latency_us=latency, copy_engines_per_direction=engines))
    assert report.copies[-1][5] > report.op_times[-1][2]  # P's copy out ends after op 5
    assert report.stall_us > 0


def test_ties_keep_the_event_cores_order():
    """op:   0     1     2   3        10, 10, 0, 10 us; 100 B/us, no latency, 2 engines
    A 0: [=====)     [=======)     1000 B: out after op 0, in at 2 (due 3)
    B 1: [=====)     [=======)     1000 B: likewise
    D 2:             [=======)     persistent 500 B, offloaded: in at 2 (due 2), out after 3
    A's and B's copies out run side by side, 10-20, and end as op 1 does. Op 1's timeout
    was scheduled first, so op 2 is dispatched while both copies are still running: the
    swap-ins of A and B wait for them and D's, listed last, is handed over first. A's then
    takes the second engine at 20, B's waits for D's to end at 25."""
    trace = trace_of([10.0, 10.0, 0.0, 10.0], Buffer(0, 1000, 0, 4, (0, 3)),
                     Buffer(1, 1000, 0, 4, (0, 3)), Buffer(2, 500, 0, 4, (2, 3), PERSISTENT))
    plan = swap_plan(trace, [Residency(0, 0, 1, 0), Residency(0, 2, 4, 2000),
                             Residency(1, 0, 1, 1000), Residency(1, 2, 4, 3000),
                             Residency(2, 2, 4, 4000)],
                     [SwapOut(0, 0), SwapOut(1, 0), SwapIn(0, 2, 3), SwapIn(1, 2, 3),
                      SwapIn(2, 2, 2), SwapOut(2, 3)])
    report = assert_same(trace, plan, cost_model(0.1, latency_us=0.0,
                                                 copy_engines_per_direction=2))
    assert report.copies == ((0, "d2h", 1000, 10.0, 10.0, 20.0),
                             (1, "d2h", 1000, 10.0, 10.0, 20.0),
                             (2, "h2d", 500, 20.0, 20.0, 25.0),
                             (0, "h2d", 1000, 20.0, 20.0, 30.0),
                             (1, "h2d", 1000, 20.0, 25.0, 35.0),
                             (2, "d2h", 500, 45.0, 45.0, 50.0))
    assert report.op_times == ((0.0, 0.0, 10.0), (10.0, 10.0, 20.0), (20.0, 25.0, 25.0),
                               (25.0, 35.0, 45.0))
    assert report.stall_us == 20.0  # 5 before op 2, 10 before op 3, 5 after op 3
    assert_same(trace, plan, cost_model(0.1, latency_us=0.0))


def test_zero_time_copies_and_ops():
    """A 0-byte buffer at 0 µs latency copies in no time; 0 µs ops dispatch at once."""
    trace = trace_of([0.0, 0.0, 1.0, 0.0],
                     Buffer(0, 0, 0, 4, (0, 3)), Buffer(1, 100, 0, 4, (0, 3)),
                     Buffer(2, 200, 1, 3, (1, 2)))
    plan = swap_plan(trace, [Residency(0, 0, 1, 0), Residency(0, 2, 4, 300),
                             Residency(1, 0, 1, 0), Residency(1, 2, 4, 200),
                             Residency(2, 1, 3, 0)],
                     [SwapOut(0, 0), SwapOut(1, 0), SwapIn(0, 2, 3), SwapIn(1, 2, 2)])
    for engines in ENGINES:
        report = assert_same(trace, plan, cost_model(0.1, latency_us=0.0,
                                                     copy_engines_per_direction=engines))
        assert report.copies[0][4] == report.copies[0][5]


def test_recomputes_and_pageable_swaps():
    trace = trace_of([4.0, 1.0, 2.0, 3.0, 1.0],
                     Buffer(0, 300, 0, 5, (0, 4), PERSISTENT),
                     Buffer(1, 400, 0, 4, (0, 3), recompute=Recompute(0, (0,))),
                     Buffer(2, 500, 1, 4, (1, 3)),
                     Buffer(3, 400, 1, 3, (1, 2)))
    plan = swap_plan(trace, [Residency(0, 0, 5, 0), Residency(1, 0, 1, 300),
                             Residency(1, 3, 4, 300), Residency(2, 1, 2, 700),
                             Residency(2, 2, 4, 700), Residency(3, 1, 3, 300)],
                     [SwapOut(2, 1, PAGEABLE), SwapIn(2, 2, 3, PAGEABLE),
                      RecomputeAction(1, 3)])
    for engines in ENGINES:
        report = assert_same(trace, plan, cost_model(0.1, copy_engines_per_direction=engines))
        assert report.recomputes and len(report.copies) == 2


def test_the_times_of_plans_the_flat_loop_leaves_to_the_event_core():
    """No placement, an infeasible status, or a negative delay: the times are those of
    :func:`simulate`'s report (infinite, or the event core's error)."""
    trace = overlap_trace()
    plan = overlap_plan(trace)
    for odd in (dataclasses.replace(plan, residencies=(), placements=()),
                dataclasses.replace(plan, status=SolveStatus.INFEASIBLE)):
        assert_same_times(time_iteration(trace, odd), simulate(trace, odd, validate=False))
    negative = trace_of([1.0, -2.0], Buffer(0, 100, 0, 2, (0, 1)))
    with pytest.raises(SimulationError, match=r"delay \(=-2.0\) must be >= 0"):
        time_iteration(negative, swap_plan(negative, [Residency(0, 0, 2, 0)]))


def test_log_and_reference_run_the_event_replay():
    trace = overlap_trace()
    plan, cost = overlap_plan(trace), cost_model(0.1)
    logged = simulate(trace, plan, cost, log=True)
    assert logged.log
    assert dataclasses.replace(logged, log=()) == simulate(trace, plan, cost)


def test_a_negative_duration_is_named_by_the_event_core():
    trace = trace_of([1.0, -2.0], Buffer(0, 100, 0, 2, (0, 1)))
    plan = swap_plan(trace, [Residency(0, 0, 2, 0)])
    with pytest.raises(SimulationError, match=r"delay \(=-2.0\) must be >= 0"):
        simulate(trace, plan, cost_model(), validate=False)


# -- the two ways of sorting actions by op ----------------------------------------------------

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(varied(written_trace_and_plan()))
def test_column_lookups_sort_a_valid_plans_actions_as_the_scans_do(case):
    trace, plan, cost = case
    residencies = plan_residencies(trace, plan)
    sizes = {b.id: b.size for b in trace.buffers}
    arrays = ResidencyArrays.of(residencies, sizes)
    columns = _by_op_columns(trace.num_ops, residencies, arrays, plan.actions, cost)
    assert columns is not None  # a valid plan never needs the scans
    scans = _by_op_loop(trace.num_ops, residencies, plan.actions, sizes, cost)
    for field in dataclasses.fields(scans):
        left, right = getattr(columns, field.name), getattr(scans, field.name)
        if isinstance(left, np.ndarray):
            assert left.dtype == right.dtype, field.name
            left, right = left.tolist(), right.tolist()
        assert repr(left) == repr(right), field.name


def test_buffer_sizes_are_looked_up_by_sorted_ids():
    sizes = BufferSizes.of({7: 100, 2: 300, 5: 0})
    assert sizes.each(np.array([5, 7, 2, 7])).tolist() == [0, 100, 300, 100]
    with pytest.raises(KeyError, match="3"):  # as the dict says it
        sizes.each(np.array([2, 3]))
    assert BufferSizes.of({}).each(np.array([], np.int64)).tolist() == []
    huge = BufferSizes.of({1: 2 ** 70})  # past 64 bits: the dict alone, which overflows
    assert huge.ids is None
    with pytest.raises(OverflowError):
        huge.each(np.array([1]))


def test_plans_the_column_lookups_leave_to_the_scans():
    """A buffer's residencies overlapping in time, a swap-in and a recompute entering the
    same residency, a swap-in with no residency to enter: the scans decide, as the event
    replay would (the last is a ``StopIteration``, from both)."""
    trace = overlap_trace()
    plan = overlap_plan(trace)
    cost = cost_model(0.1)
    overlapping = dataclasses.replace(plan, residencies=(*plan.residencies,
                                                         Residency(0, 2, 4, 3000)))
    both = dataclasses.replace(plan, actions=(*plan.actions, RecomputeAction(0, 3)))
    lost = dataclasses.replace(plan, actions=(*plan.actions, SwapIn(1, 4, 4)))
    trace = dataclasses.replace(trace, buffers=(
        dataclasses.replace(trace.buffers[0], recompute=Recompute(0)), *trace.buffers[1:]))
    for odd in (overlapping, both):
        residencies = plan_residencies(trace, odd)
        sizes = {b.id: b.size for b in trace.buffers}
        arrays = ResidencyArrays.of(residencies, sizes)
        assert _by_op_columns(trace.num_ops, residencies, arrays, odd.actions, cost) is None
        assert_same(trace, odd, cost, valid=False)
    for replay in (False, True):
        with pytest.raises(StopIteration):
            simulate(trace, lost, cost, validate=False, reference=replay)


@pytest.mark.parametrize("engines", ENGINES)
def test_the_scans_alone_replay_identically(engines):
    """With the column lookups switched off, every hand-made case and the capuchin plan
    replay as on the event core."""
    _trace, capuchin, planned = resnet_capuchin_plan()
    cases = [(overlap_trace(), overlap_plan(overlap_trace(), drop)) for drop in (False, True)]
    cases.append((planned, capuchin))
    with mock.patch("cupool.sim.replay_input._by_op_columns", lambda *args: None):
        for trace, plan in cases:
            assert_same(trace, plan, cost_model(0.1, copy_engines_per_direction=engines),
                        valid=False)


@pytest.mark.parametrize("gated", [False, True])
def test_a_launch_bound_program_is_predicted_launch_bound(gated):
    """Ten 1 µs ops whose enqueue costs the host 3 µs each: op i starts once the host has
    enqueued it, at 3 (i + 1) µs (gated: all of them after the host's 30 µs), so the
    iteration takes 31 µs (gated: 40), its waits for the host counted as stalls; without
    the host the same program takes 10 µs."""
    from cupool.core.vocabulary import Buffer, Op, Residency, Trace

    trace = Trace("launch-bound", tuple(Op(f"op{i}", 1.0) for i in range(10)),
                  (Buffer(0, 512, 0, 10, tuple(range(10))),))
    plan = swap_plan(trace, [Residency(0, 0, 10, 0)])
    free = assert_same(trace, plan, cost_model(0.1))
    host = dataclasses.replace(cost_model(0.1), host_us_per_op=3.0, host_gated=gated)
    bound = assert_same(trace, plan, host)
    assert free.iteration_us == 10.0
    assert bound.iteration_us == (40.0 if gated else 31.0)
    assert bound.stall_us == bound.iteration_us - 10.0
    assert [start for _dispatch, start, _end in bound.op_times] == (
        [30.0 + i for i in range(10)] if gated else [3.0 * (i + 1) for i in range(10)])


def test_the_host_enqueues_a_plans_actions_with_their_ops():
    """Four 10 µs ops; A swapped out after op 0, in at op 2 for op 3. The host spends 1 µs
    an op and 4 µs an action: op 0 at 1, op 1 at 2 + 4 (the swap-out after op 0), op 2 at
    3 + 8 (and the swap-in it triggers), op 3 at 4 + 12 (the wait for it). The ops run
    back to back from op 0's enqueue (1 µs): the host is never behind them again."""
    from cupool.core.vocabulary import Buffer, Op, Residency, SwapIn, SwapOut, Trace

    trace = Trace("actions", tuple(Op(f"op{i}", 10.0) for i in range(4)),
                  (Buffer(0, 512, 0, 4, (0, 3)),))
    plan = swap_plan(trace, [Residency(0, 0, 1, 0), Residency(0, 2, 4, 0)],
                     [SwapOut(0, 0), SwapIn(0, 2, 3)])
    host = dataclasses.replace(cost_model(1000.0, latency_us=0.0), host_us_per_op=1.0,
                               host_us_per_action=4.0)
    assert host.host_ready(4, plan.actions) == (1.0, 6.0, 11.0, 16.0)
    report = assert_same(trace, plan, host)
    assert report.op_times[0][1] == 1.0 and report.iteration_us == 41.0
    gated = dataclasses.replace(host, host_gated=True)
    assert gated.host_ready(4, plan.actions) == (16.0,) * 4
    assert assert_same(trace, plan, gated).iteration_us == 56.0
