"""Simulator, event core and cost model: hand-computed timelines, compared exactly (each
test with the compiled flat replay and with the Python one: ``replay_loop``)."""

from __future__ import annotations

import dataclasses
import math
import pickle

import pytest

from cupool.core.vocabulary import (
    PERSISTENT,
    Buffer,
    Op,
    Recompute,
    RecomputeAction,
    Residency,
    SolveStatus,
    SwapIn,
    SwapOut,
    Trace,
)
from cupool.errors import InputError
from cupool.io import load_trace
from cupool.planning import plan
from cupool.sim import LINK_PRESETS, CostModel, cost_model, link_gbps, simulate
from cupool.sim.events import Environment, SimulationError, Store
from tests.conftest import TRACES
from tests.swap_cases import swap_plan, trace_of

# 0.1 GB/s = 100 bytes/us: a 1000-byte copy takes 3 + 10 = 13 us
SLOW = cost_model(0.1)

pytestmark = pytest.mark.usefixtures("replay_loop")


# -- the event core -------------------------------------------------------------------

def test_engine_orders_events_by_time_priority_and_sequence():
    env = Environment()
    log = []

    def worker(name, delay, store):
        yield env.timeout(delay)
        log.append((env.now, name, "put"))
        store.put(name)

    def consumer(store):
        for _ in range(2):
            item = yield store.get()
            log.append((env.now, "got", item))
            yield env.timeout(1.5)
            log.append((env.now, "served", item))

    store = Store(env)
    env.process(consumer(store))
    env.process(worker("a", 2.0, store))
    env.process(worker("b", 2.0, store))
    env.run()
    assert log == [(2.0, "a", "put"), (2.0, "got", "a"), (2.0, "b", "put"),
                   (3.5, "served", "a"), (3.5, "got", "b"), (5.0, "served", "b")]


def test_engine_all_of_and_process_values():
    env = Environment()

    def child(delay):
        yield env.timeout(delay)
        return delay * 10

    def parent(out):
        values = yield env.all_of([env.process(child(1.0)), env.process(child(3.0))])
        out.append((env.now, values))

    out = []
    env.process(parent(out))
    env.run()
    assert out == [(3.0, [10.0, 30.0])]
    event = env.event().succeed(1)
    with pytest.raises(SimulationError, match="already been triggered"):
        event.succeed(2)
    with pytest.raises(SimulationError, match=r"delay \(=-1\)"):
        env.timeout(-1)


def test_engine_run_until():
    env = Environment()
    env.timeout(5.0)
    env.run(until=2.0)
    assert env.now == 2.0 and env.peek() == 5.0
    env.run()
    assert env.now == 5.0 and math.isinf(env.peek())


# -- the cost model -------------------------------------------------------------------

def test_cost_model_presets_and_overrides():
    assert LINK_PRESETS == {"gen4": 25.0, "gen5": 55.0}
    gen5 = cost_model()
    assert (gen5.h2d_gbps, gen5.d2h_gbps, gen5.latency_us) == (55.0, 55.0, 3.0)
    assert gen5.copy_us(1_000_000, "h2d") == pytest.approx(3.0 + 1e6 / 55e3)
    custom = cost_model("gen4", d2h_gbps=12.5, latency_us=0.0)
    assert (custom.h2d_gbps, custom.d2h_gbps) == (25.0, 12.5)
    assert custom.copy_us(25_000, "h2d") == 1.0 and custom.copy_us(25_000, "d2h") == 2.0
    assert link_gbps("40") == 40.0 and link_gbps(" GEN4 ") == 25.0
    trace = trace_of([None, 2.5], Buffer(0, 8, 0, 2, (0, 1)))
    assert [gen5.op_us(trace, i) for i in range(2)] == [10.0, 2.5]


@pytest.mark.parametrize(("call", "words"), [
    (lambda: cost_model("gen9"), "link (='gen9') must be one of gen4, gen5"),
    (lambda: cost_model(-3), "link (=-3)"),
    (lambda: cost_model(float("nan")), "link (=nan)"),
    (lambda: cost_model(h2d_gbps=0), "h2d_gbps (=0)"),
    (lambda: cost_model(latency_us=-1.0), "latency_us (=-1.0)"),
    (lambda: cost_model(copy_engines_per_direction=0), "copy_engines_per_direction (=0)"),
    (lambda: cost_model(default_op_us=float("inf")), "default_op_us (=inf)"),
    (lambda: cost_model().copy_us(8, "sideways"), "direction (='sideways')"),
])
def test_cost_model_rejects_bad_values(call, words):
    with pytest.raises(InputError) as info:
        call()
    assert words in str(info.value)
    assert pickle.loads(pickle.dumps(info.value)).message == info.value.message


# -- hand-computed replays ------------------------------------------------------------

def test_prefetch_hides_the_copies():
    """op:  0       1       2       3        (20 us each)
    A:  [===)            [=======)          out after op 0 (20-33), in at op 2 (40-53), due 3
    """
    trace = trace_of([20.0] * 4, Buffer(1, 1000, 0, 4, (0, 3)))
    plan_ = swap_plan(trace, [Residency(1, 0, 1, 0), Residency(1, 2, 4, 0)],
                      [SwapOut(1, 0), SwapIn(1, 2, 3)])
    report = simulate(trace, plan_, SLOW, log=True)
    assert report.log == (
        (0.0, "op_start", 0), (20.0, "op_end", 0), (20.0, "op_start", 1),
        (20.0, "d2h_queued", 1), (20.0, "d2h_start", 1), (33.0, "d2h_end", 1),
        (40.0, "op_end", 1), (40.0, "op_start", 2), (40.0, "h2d_queued", 1),
        (40.0, "h2d_start", 1), (53.0, "h2d_end", 1), (60.0, "op_end", 2),
        (60.0, "op_start", 3), (80.0, "op_end", 3))
    assert report.copies == ((1, "d2h", 1000, 20.0, 20.0, 33.0),
                             (1, "h2d", 1000, 40.0, 40.0, 53.0))
    assert (report.iteration_us, report.ideal_us, report.overhead, report.stall_us) == \
        (80.0, 80.0, 0.0, 0.0)
    assert report.swapped_bytes == 2000 and report.peak_bytes == 1000


def test_reused_bytes_wait_for_the_copy_out():
    """B lands in A's bytes at op 1, so op 1 waits for A's D2H (done at 33); A's swap-in at
    op 2 (53-66) makes op 3 wait... no: op 3 is dispatched at 73, after it landed."""
    trace = trace_of([20.0] * 4, Buffer(1, 1000, 0, 4, (0, 3)), Buffer(2, 1000, 1, 2, (1,)))
    plan_ = swap_plan(trace, [Residency(1, 0, 1, 0), Residency(1, 2, 4, 0),
                              Residency(2, 1, 2, 0)], [SwapOut(1, 0), SwapIn(1, 2, 3)])
    report = simulate(trace, plan_, SLOW, log=True)
    assert report.op_times == ((0.0, 0.0, 20.0), (20.0, 33.0, 53.0), (53.0, 53.0, 73.0),
                               (73.0, 73.0, 93.0))
    assert report.copies == ((1, "d2h", 1000, 20.0, 20.0, 33.0),
                             (1, "h2d", 1000, 53.0, 53.0, 66.0))
    assert report.iteration_us == 93.0 and report.stall_us == 13.0
    assert report.overhead == pytest.approx(13.0 / 80.0)
    assert report.peak_bytes == 1000  # B's op waited: A's bytes were free when it ran


def test_late_swap_in_stalls_the_due_op():
    """Synchronous swap-in: triggered and due at op 2; it waits for the D2H (10-23) first."""
    trace = trace_of([10.0] * 3, Buffer(1, 1000, 0, 3, (0, 2)))
    plan_ = swap_plan(trace, [Residency(1, 0, 1, 0), Residency(1, 2, 3, 0)],
                      [SwapOut(1, 0), SwapIn(1, 2, 2)])
    report = simulate(trace, plan_, SLOW)
    assert report.copies == ((1, "d2h", 1000, 10.0, 10.0, 23.0),
                             (1, "h2d", 1000, 23.0, 23.0, 36.0))
    assert report.op_times[2] == (20.0, 36.0, 46.0)
    assert (report.iteration_us, report.stall_us) == (46.0, 16.0)


def test_fifo_engine_and_two_engines():
    """Two swap-outs after op 0 share one D2H engine (FIFO) or run side by side on two."""
    trace = trace_of([10.0, 50.0, 10.0], Buffer(1, 1000, 0, 3, (0, 2)),
                     Buffer(2, 1000, 0, 3, (0, 2)))
    plan_ = swap_plan(trace, [Residency(1, 0, 1, 0), Residency(1, 1, 3, 0),
                              Residency(2, 0, 1, 1000), Residency(2, 1, 3, 1000)],
                      [SwapOut(1, 0), SwapOut(2, 0), SwapIn(1, 1, 2), SwapIn(2, 1, 2)])
    one = simulate(trace, plan_, SLOW)
    assert [c[:1] + c[3:] for c in one.copies] == [
        (1, 10.0, 10.0, 23.0), (2, 10.0, 23.0, 36.0), (1, 23.0, 23.0, 36.0),
        (2, 36.0, 36.0, 49.0)]
    assert one.overhead == 0.0
    two = simulate(trace, plan_, dataclasses.replace(SLOW, copy_engines_per_direction=2))
    assert sorted(c[5] for c in two.copies) == [23.0, 23.0, 36.0, 36.0]


def test_recompute_runs_on_the_compute_stream():
    trace = trace_of([5.0, 7.0, 11.0], Buffer(0, 10, 0, 3, (0, 2), PERSISTENT),
                     Buffer(1, 100, 0, 3, (0, 2), recompute=Recompute(0, (0,))))
    plan_ = swap_plan(trace, [Residency(0, 0, 3, 0), Residency(1, 0, 1, 16),
                              Residency(1, 2, 3, 16)], [RecomputeAction(1, 2)])
    report = simulate(trace, plan_, SLOW, log=True)
    assert report.log == ((0.0, "op_start", 0), (5.0, "op_end", 0), (5.0, "op_start", 1),
                          (12.0, "op_end", 1), (12.0, "recompute_start", 1),
                          (17.0, "op_start", 2), (28.0, "op_end", 2))
    assert report.recomputes == ((1, 2, 12.0, 17.0),)
    assert (report.iteration_us, report.recompute_us, report.stall_us) == (28.0, 5.0, 0.0)
    assert report.overhead == pytest.approx(5.0 / 23.0)
    assert report.peak_bytes == 110 and report.swapped_bytes == 0


def test_copies_after_the_last_op_count_as_stall():
    """A persistent buffer offloaded across the boundary: its swap-out ends the iteration."""
    trace = trace_of([10.0, 10.0], Buffer(0, 1000, 0, 2, (1,), PERSISTENT))
    plan_ = swap_plan(trace, [Residency(0, 0, 2, 0)], [SwapIn(0, 0, 1), SwapOut(0, 1)])
    report = simulate(trace, plan_, SLOW)
    assert report.copies == ((0, "h2d", 1000, 0.0, 0.0, 13.0),
                             (0, "d2h", 1000, 23.0, 23.0, 36.0))
    assert report.op_times == ((0.0, 0.0, 10.0), (10.0, 13.0, 23.0))
    assert (report.iteration_us, report.stall_us) == (36.0, 16.0)
    assert report.iteration_us == report.ideal_us + report.recompute_us + report.stall_us


# -- static plans, infeasible plans, defaults -----------------------------------------

def test_static_plans_run_at_ideal_time():
    trace = load_trace(TRACES[0])
    static = plan(trace, "greedy-size")
    report = simulate(trace, static, cost_model("gen4"))
    assert report.feasible and report.overhead == 0.0 and report.stall_us == 0.0
    assert report.iteration_us == report.ideal_us == pytest.approx(
        sum(op.duration_us for op in trace.ops))
    assert report.peak_bytes == trace.lower_bound_bytes()
    assert report.swapped_bytes == 0 and report.copies == ()


def test_infeasible_and_invalid_plans_are_reported_not_simulated():
    trace = trace_of([1.0, 1.0], Buffer(0, 8, 0, 2, (0, 1)), Buffer(1, 8, 0, 1, (0,)))
    nothing = plan(trace, "auto", capacity=8)
    assert nothing.status == SolveStatus.INFEASIBLE
    report = simulate(trace, nothing)
    assert not report.feasible and math.isinf(report.overhead)
    assert report.summary()["iteration_us"] is None and report.ideal_us == 2.0
    bad = swap_plan(trace, [Residency(0, 0, 2, 0), Residency(1, 0, 1, 0)], budget=16)
    report = simulate(trace, bad)
    assert not report.feasible and report.reason.startswith("invalid plan (overlap)")


def test_unknown_durations_use_the_default_and_say_so():
    trace = Trace("t", (Op("a"), Op("b", 4.0)), (Buffer(0, 8, 0, 2, (0, 1)),))
    report = simulate(trace, plan(trace), cost_model(default_op_us=6.0))
    assert report.ideal_us == 10.0 and report.ops_without_duration == 1
    assert set(report.summary()) == {"feasible", "iteration_us", "ideal_us", "overhead",
                                     "peak_bytes", "swapped_bytes", "recompute_us", "stall_us",
                                     "reason", "ops_without_duration"}


def test_cost_model_is_a_plain_value():
    assert CostModel(1.0, 2.0) == cost_model(1.0, d2h_gbps=2.0)
