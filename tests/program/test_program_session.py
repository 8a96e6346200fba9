"""A program under a budget: parameters bitwise identical to the run without cupool, the
pool's device high-water mark within the budget in every iteration, recompute by re-running
the op, re-recording a changed program, persistent state read and released."""

from __future__ import annotations

import numpy as np
import pytest

import cupool
from cupool.core.vocabulary import RecomputeAction, SwapIn
from cupool.program import ProgramChangedError
from tests.program_cases import example

STEPS = 5


@pytest.fixture(scope="module")
def reference():
    """The MLP trained without cupool: losses and parameters."""
    with cupool.EagerSession() as eager:
        return example("mlp_sgd").train(eager, STEPS)


@pytest.mark.parametrize("budget", ["90%", "70%", "50%"])
def test_parameters_are_bitwise_those_of_the_run_without_cupool(budget, reference):
    mlp = example("mlp_sgd")
    with cupool.Session(budget, device="emulated") as session:
        losses, params = mlp.train(session, STEPS)
        reports = session.reports
        exact = int(session.peak_bytes * int(budget[:-1]) / 100)
        assert session.budget_bytes == exact - exact % 512  # the pool's whole units
        plan, recording, trace = session.plan, session.recording, session.trace
    assert losses == reference[0]
    assert params.keys() == reference[1].keys()
    for name, value in reference[1].items():
        assert np.array_equal(params[name], value), name
    assert [r.mode for r in reports] == ["passive"] + ["planned"] * (STEPS - 1)
    assert any(isinstance(a, SwapIn) for a in plan.actions)  # below the peak: it swaps
    assert [a.tensor for a in recording.accesses[:4]] == ["x", "labels", "x", "w0"]
    assert {a.intent for a in recording.accesses} == {"read", "write", "update"}
    assert len(recording.durations_us) == len(trace.ops)
    assert recording.peak_bytes <= reports[0].budget_bytes
    assert recording.swap_outs > 0 or budget == "90%"
    for report in reports:
        assert 0 < report.device_peak_bytes <= report.budget_bytes
        assert report.off_plan == 0


def test_recompute_re_runs_the_ops_and_keeps_the_bits(reference):
    """On a slow link the plan recomputes activations by re-running their ops."""
    mlp = example("mlp_sgd")
    with cupool.Session("70%", device="emulated", link=0.01) as session:
        losses, params = mlp.train(session, STEPS)
        recomputed = [a for a in session.plan.actions if isinstance(a, RecomputeAction)]
    assert recomputed
    assert losses == reference[0]
    assert all(np.array_equal(params[k], v) for k, v in reference[1].items())


def _scale(x, out):
    cupool.array_module(x).multiply(x, 2, out=out)


def _accumulate(y, total):
    total += y.sum()


def _run(session, total, shape, steps=1):
    for _ in range(steps):
        with session.iteration() as it:
            x = it.input(np.ones(shape, np.float32), name="x")
            y = it.op(_scale, x, out=x, name="scale")
            it.op(_accumulate, y, updates=[total], name="accumulate")


def test_a_changed_program_is_recorded_again_and_keeps_its_state():
    with cupool.Session(1 << 20, device="emulated") as session:
        total = session.register("total", np.zeros(1, np.float64))
        _run(session, total, (64,), steps=3)
        _run(session, total, (128,), steps=2)  # another shape: recorded again
        reports = session.reports
        assert session.read(total)[0] == 3 * 128 + 2 * 256
    assert [(r.mode, r.recorded) for r in reports] == [
        ("passive", True), ("planned", False), ("planned", False),
        ("passive", True), ("planned", False)]
    assert reports[3].change == ("op 0 'x' (tensor 'x'): output 0 is (128,) float32, "
                                 "recorded as (64,) float32")


def test_on_change_raise_refuses_a_changed_program_and_runs_nothing():
    with cupool.Session(1 << 20, device="emulated", on_change="raise") as session:
        total = session.register("total", np.zeros(1, np.float64))
        _run(session, total, (64,), steps=2)
        with pytest.raises(ProgramChangedError) as caught:
            _run(session, total, (32,))
        assert (caught.value.op_index, caught.value.op, caught.value.tensor) == (0, "x", "x")
        assert session.read(total)[0] == 2 * 128  # nothing of the refused iteration ran
        _run(session, total, (64,))  # the recorded program still runs from its plan
        assert session.read(total)[0] == 3 * 128
        assert session.reports[-1].mode == "planned"


def test_persistent_state_is_read_between_iterations_and_fetches_are_values():
    with cupool.Session("100%", device="emulated") as session:
        total = session.register("total", np.zeros(1, np.float64))
        values = []
        for step in range(3):
            with session.iteration() as it:
                x = it.input(np.full(8, step, np.float32))
                y = it.op(_scale, x, out=x)
                it.op(_accumulate, y, updates=[total])
                fetched = it.fetch(y)
            values.append(fetched.value.tolist())
            assert session.read(total)[0] == sum(16 * s for s in range(step + 1))
        assert values == [[0.0] * 8, [2.0] * 8, [4.0] * 8]
        assert session.xp is np


def test_array_module_is_numpy_for_numpy_and_cupy_for_cupy_arrays():
    assert cupool.array_module(np.zeros(2)) is np
    cupy = pytest.importorskip("cupy")
    with cupool.devices.open_device("emulated", cupy_arrays=True) as device:
        memory = device.reserve(512)
        array = device.array_at(memory.ptr, 64, "float32")
        assert cupool.array_module(np.zeros(2), array) is cupy


def test_the_session_plans_with_the_devices_measured_copy_cost():
    from cupool.devices import open_device
    from cupool.sim.cost import cost_model

    preset = cost_model("gen5")
    with cupool.Session("70%", device="emulated", measure_link=False) as session:
        assert session.cost == preset and session.link_round_trip is None
        assert session.swap_round_trip is None
    # a device whose every copy costs 1.5 ms: the plan must lead its prefetches by that much
    with open_device("emulated", h2d_gbps=55, d2h_gbps=55, latency_us=1500.0) as slow:
        with cupool.Session("70%", device=slow, measure_overhead=False) as session:
            measured = session.link_round_trip
            assert len(measured.round_trips_us) > 0 and measured.latency_us >= 1500.0
            assert session.cost.latency_us == measured.latency_us
            assert session.swap_round_trip is None
        # with the engine's overhead measured, a swap-in through the engine is priced too:
        # the largest of the two round trips
        with cupool.Session("70%", device=slow) as session:
            engine = session.swap_round_trip
            assert engine.latency_us >= 1500.0 - 50.0  # the copy itself, less timer slack
            assert session.cost.latency_us == max(session.link_round_trip.latency_us,
                                                  engine.latency_us)
        assert session.cost.h2d_gbps == preset.h2d_gbps
    with cupool.Session("70%", device="emulated") as session:  # never below the preset's
        assert session.cost.latency_us == max(preset.latency_us,
                                              session.link_round_trip.latency_us,
                                              session.swap_round_trip.latency_us)


def test_warmup_iterations_run_passively_before_the_recorded_one(reference):
    """``warmup=2``: two passive iterations that are not recorded (a GPU's first one
    compiles kernels), the third recorded and planned from; training is unchanged."""
    with cupool.Session("50%", device="emulated", warmup=2) as session:
        losses, params = example("mlp_sgd").train(session, STEPS)
        reports = session.reports
        assert session.plan is not None and session.plan_reason is None
    assert [r.mode for r in reports] == ["passive"] * 3 + ["planned"] * (STEPS - 3)
    assert [r.recorded for r in reports] == [False, False, True] + [False] * (STEPS - 3)
    assert losses == reference[0]
    for name, value in reference[1].items():
        assert np.array_equal(params[name], value), name


@pytest.mark.parametrize("warmup", [-1, 1.0, True, "1"])
def test_a_bad_warmup_is_refused(warmup):
    with pytest.raises(cupool.program.ProgramError, match="warmup"):
        cupool.Session("50%", device="emulated", warmup=warmup)


def test_the_emulated_device_records_its_first_iteration_by_default():
    with cupool.Session("70%", device="emulated") as session:
        example("mlp_sgd").train(session, 2)
        assert [r.recorded for r in session.reports] == [True, False]


def test_the_budget_is_whole_units_of_the_pool():
    """A budget between two 512-byte units is the lower one: tensors take whole units, and
    the pool reserves whole units, so a plan whose arena is the whole budget is reserved
    within it (at 70% of a peak, the budget ended 359 bytes short of a unit and every
    planned step's reservation was 359 bytes over it)."""
    with cupool.Session(1_000_000, device="emulated") as session:
        example("mlp_sgd").train(session, 2)
        reports = session.reports
    assert session.budget_bytes == 1_000_000 - 1_000_000 % 512
    assert all(0 < r.device_peak_bytes <= r.budget_bytes == session.budget_bytes
               for r in reports)


def test_the_planner_takes_the_sessions_plan_params(reference):
    """``plan_params`` reach ``auto``: without refining (``refine_evaluations=0``) the plan
    says nothing of a refine, which the default plan does; training is unchanged."""
    from cupool.planning.budget import BudgetParams

    plain = BudgetParams(refine_evaluations=0, schedule_evaluations=0)
    stats = {}
    for name, params in (("default", None), ("plain", plain)):
        with cupool.Session("50%", device="emulated", plan_params=params) as session:
            losses, trained = example("mlp_sgd").train(session, STEPS)
            stats[name] = session.planned.plan.stats
        assert losses == reference[0]
        assert all(np.array_equal(trained[k], v) for k, v in reference[1].items())
    assert "refine_evaluations" in stats["default"]
    assert "refine_evaluations" not in stats["plain"]


@pytest.mark.parametrize("bad", [{"workers": 2}, "auto", 0])
def test_bad_plan_params_are_refused(bad):
    with pytest.raises(cupool.program.ProgramError, match=r"plan_params \(=.*\) must be a "):
        cupool.Session("50%", device="emulated", plan_params=bad)
