"""The engine's overhead on the compute stream, measured when a session opens: non-negative,
added to every op of the recorded trace (and the per-iteration part to the first op), and
absent when switched off."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

import cupool
from cupool.devices import open_device
from cupool.program.errors import ProgramError
from cupool.program.overhead import (
    EngineOverhead,
    measure_engine_overhead,
    measure_swap_round_trip,
)
from tests.program_cases import example


def _overhead(per_op: float, per_iteration: float) -> EngineOverhead:
    return EngineOverhead(per_op, per_iteration, 4, 68, (), (), 0.0, 0.0)


def test_apply_adds_the_per_op_cost_to_every_op_and_the_per_iteration_cost_to_the_first():
    assert _overhead(3.0, 100.0).apply([10.0, 0.0, 5.5]) == (113.0, 3.0, 8.5)
    assert _overhead(0.0, 0.0).apply((1, 2)) == (1.0, 2.0)
    assert _overhead(3.0, 100.0).apply(()) == ()


def test_the_measurement_follows_from_its_raw_timings():
    with open_device("emulated") as device:
        measured = measure_engine_overhead(cupool.Session, device, short_ops=2, long_ops=12,
                                           iterations=4)
    assert (measured.short_ops, measured.long_ops) == (2, 12)
    assert len(measured.short_iteration_us) == len(measured.long_iteration_us) == 4
    assert measured.per_op_us >= 0 and measured.per_iteration_us >= 0
    assert measured.call_us > 0 and measured.input_us > 0
    short = statistics.median(measured.short_iteration_us)
    long = statistics.median(measured.long_iteration_us)
    slope = (long - short) / 10
    per_op = max(0.0, slope - measured.call_us)
    assert measured.per_op_us == pytest.approx(per_op)
    assert measured.per_iteration_us == pytest.approx(
        max(0.0, short - 2 * slope - measured.input_us - per_op))


def test_program_lengths_must_be_ordered():
    with open_device("emulated") as device, pytest.raises(ProgramError, match="short_ops"):
        measure_engine_overhead(cupool.Session, device, short_ops=8, long_ops=8)


def _recorded(**options):
    mlp = example("mlp_sgd")
    with cupool.Session("70%", device="emulated", **options) as session:
        mlp.train(session, 2)
        return session.op_overhead, session.recording.durations_us, session.trace


def test_the_recorded_trace_holds_every_op_plus_the_engines_measured_cost():
    overhead, durations, trace = _recorded()
    assert overhead is not None
    assert overhead.per_op_us >= 0 and overhead.per_iteration_us >= 0
    expected = [d + overhead.per_op_us for d in durations]
    expected[0] += overhead.per_iteration_us
    assert [op.duration_us for op in trace.ops] == pytest.approx(expected)
    assert len(trace.ops) == len(durations) > 1


def test_without_the_measurement_the_trace_holds_the_callables_times():
    overhead, durations, trace = _recorded(measure_overhead=False)
    assert overhead is None
    assert [op.duration_us for op in trace.ops] == pytest.approx(list(durations))


def test_a_session_on_a_given_device_measures_on_it_and_leaves_it_open():
    with open_device("emulated") as device:
        with cupool.Session("100%", device=device, measure_link=False) as session:
            assert session.op_overhead is not None
        assert not device.closed
        assert device.mem_info()[0] == device.mem_info()[1]  # everything returned


def test_a_swap_in_needed_at_once_costs_at_least_its_copy():
    """On a device whose every copy takes 2 ms, the round trip through the engine holds the
    copy (its bytes' share at the link's bandwidth left out); with the buffer resident
    nothing waits."""
    with open_device("emulated", h2d_gbps=55, d2h_gbps=55, latency_us=2000.0) as device:
        trip = measure_swap_round_trip(device, 55.0, lead_us=5000.0, nbytes=4096,
                                       iterations=3)
    assert len(trip.swap_us) == len(trip.resident_us) == 3 and trip.nbytes == 4096
    assert trip.latency_us >= 2000.0 - 50.0  # less timer slack


def test_every_iteration_of_the_round_trip_is_less_its_ops_own_time():
    """Each measured iteration counts only what its ops' observed times leave out: the
    engines time the ops of every one of them (not only the first three and every fourth,
    whose others report no op times and would count op 1's lead as the round trip)."""
    with open_device("emulated") as device:
        trip = measure_swap_round_trip(device, 55.0, lead_us=100.0, nbytes=4096,
                                       iterations=6)
    assert len(trip.swap_us) == len(trip.resident_us) == 6
    assert statistics.median(trip.resident_us) < 2000.0
    assert trip.latency_us == pytest.approx(max(
        0.0, statistics.median(trip.swap_us) - statistics.median(trip.resident_us)
        - 4096 / 55e3))


def test_the_step_prediction_holds_the_hosts_measured_enqueue():
    """A session on the emulated device measures what each op and each action of a plan
    cost the host to enqueue, and its step prediction is the simulator's with them: the
    device waits for the whole enqueue (gated), so the prediction is the one without the
    host plus at least the ops' share of it."""
    import dataclasses

    from cupool.sim.simulator import simulate

    def scale(x, out):
        out[...] = 2 * x

    with cupool.Session("100%", device="emulated") as session:
        w = session.register("w", np.ones(64, np.float32))
        assert session.predict_step() is None  # no plan yet
        for _ in range(3):
            with session.iteration() as it:
                h = w
                for _k in range(20):
                    h = it.op(scale, h, out=((64,), "float32"))
        overhead, trip = session.op_overhead, session.swap_round_trip
        assert overhead.host_per_op_us > 0 and trip.host_per_action_us >= 0
        assert len(overhead.short_host_us) == len(overhead.long_host_us) > 0
        predicted = session.predict_step()
        without = simulate(session.planned.trace, session.plan,
                           dataclasses.replace(session.cost, host_us_per_op=0.0),
                           validate=False)
        ops = session.planned.trace.num_ops
        assert predicted.iteration_us >= without.iteration_us + ops * overhead.host_per_op_us \
            - 1e-6
