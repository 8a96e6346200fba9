"""The example programs on a real GPU (marked ``gpu``; skipped without one): the MLP with
SGD and the GPT-style decoder with AdamW trained through ``cupool.Session`` on ``cuda`` at
90%, 70% and 50% of their peak — CuPy arrays at planned offsets of the planned pool, swaps
on their own CUDA streams, recompute by re-running ops — with every parameter and every
loss bitwise those of the same program run by ``cupool.EagerSession`` on CuPy (no cupool),
and the pool's device high-water mark within the budget in every step."""

from __future__ import annotations

import os

import numpy as np
import pytest

import cupool
from tests.program_cases import example

pytestmark = pytest.mark.gpu

STEPS = 5


@pytest.fixture(scope="module", autouse=True)
def reproducible_cublas():
    """cuBLAS gives bitwise-reproducible results across streams with a fixed workspace."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


@pytest.mark.parametrize("budget", ["90%", "70%", "50%"])
@pytest.mark.parametrize("name", ["mlp_sgd", "gpt_decoder"])
def test_an_example_trains_on_the_gpu_bitwise_as_without_cupool(gpu_usable, name, budget):
    cupy = pytest.importorskip("cupy")
    module = example(name)
    with cupool.Session(budget, device="cuda") as session:
        assert session.device.kind == "cuda" and session.xp is cupy
        losses, params = module.train(session, STEPS)
        reports = session.reports
        assert session.plan is not None, session.plan_reason
    with cupool.EagerSession(cupy) as eager:
        reference_losses, reference = module.train(eager, STEPS)
    assert losses == reference_losses
    assert losses[-1] < losses[0]
    for key, value in reference.items():
        assert np.array_equal(params[key], value), key
    # the first step warms up (kernels compile), the second is recorded and planned from
    assert [r.mode for r in reports] == ["passive"] * 2 + ["planned"] * (STEPS - 2)
    assert [r.recorded for r in reports[:2]] == [False, True]
    for report in reports:
        assert 0 < report.device_peak_bytes <= report.budget_bytes
        assert report.off_plan == 0


def test_an_op_that_raises_on_the_gpu_leaves_the_session_correct(gpu_usable, monkeypatch):
    cupy = pytest.importorskip("cupy")
    mlp = example("mlp_sgd")
    batches = mlp.batches(4)
    with cupool.Session("50%", device="cuda") as session:
        state = mlp.register(session)
        for step, (x, labels) in enumerate(batches):
            if step == 2:
                def broken(logits, labels, out):
                    raise FloatingPointError("overflow")

                monkeypatch.setattr(mlp, "cross_entropy_grad", broken)
            try:
                with pytest.raises(cupool.program.OpFailedError) if step == 2 else \
                        _nothing(), session.iteration() as it:
                    mlp.train_step(it, state, x, labels)
            finally:
                monkeypatch.undo()
        got = {k: session.read(t) for k, t in state.items()}
    with cupool.EagerSession(cupy) as eager:
        state = mlp.register(eager)
        for step, (x, labels) in enumerate(batches):
            if step != 2:
                with eager.iteration() as it:
                    mlp.train_step(it, state, x, labels)
        reference = {k: eager.read(t) for k, t in state.items()}
    assert all(np.array_equal(got[k], v) for k, v in reference.items())


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def test_the_copy_round_trip_on_the_gpu_is_microseconds(cuda_device):
    """A tiny copy between two streams costs the GPU a few microseconds beyond its bytes
    (event waits and the copy's start), far below the emulated device's thread hand-offs."""
    from cupool.devices.calibrate import measure_copy_round_trip

    result = measure_copy_round_trip(cuda_device, 55.0, repeats=31)
    assert len(result.round_trips_us) == 31
    assert 0.0 <= result.latency_us < 200.0
