"""Device faults and Ctrl-C in a session's steps: a typed error naming what failed, no device
or pinned bytes or stream work left behind, never above the budget, and the next steps
either bitwise as the program without cupool stopped at the same place, or refused."""

from __future__ import annotations

import signal
import threading
import traceback

import numpy as np
import pytest

import cupool
from cupool.devices.faults import Fault, FaultyDevice
from cupool.planning.budget import BudgetParams
from cupool.program import EngineFailedError
from tests.bench_modules import load_bench

faults = load_bench("faults")


@pytest.fixture(scope="module")
def matrix_programs():
    return faults.programs(quick=True)


@pytest.mark.parametrize("name", ["mlp_sgd", "generated"])
def test_every_cell_of_the_fault_matrix_meets_its_targets(matrix_programs, name, monkeypatch):
    # what a fault leaves behind does not depend on how fast the plan is: planned without
    # the schedule search, each cell takes about a sixth of the time
    monkeypatch.setattr(faults, "PLAN_PARAMS", BudgetParams(schedule_evaluations=0))
    program = matrix_programs[name]
    counts = faults.clean_counts(program)
    references = {0: faults.reference_states(program, 0),
                  faults.FAILED_STEP: faults.reference_states(program, faults.FAILED_STEP)}
    points = faults.points(counts, faults.SEED)
    assert {p.operation for p in points} >= {"reserve", "alloc_pinned", "copy_h2d",
                                             "copy_d2h", "launch", "wait_event",
                                             "stream_synchronize"}
    fired = set()
    for point in points:
        cell = faults.run_cell(name, program, point, references[point.step])
        if cell.outcome == "continued (not hit)":
            # the plan follows the recording's measured op times, so this run's plan can
            # make fewer such calls than the counting run's: a correct continuation still
            assert cell.leaked_device_bytes == cell.leaked_pinned_bytes == 0, cell
            continue
        fired.add(point.operation)
        assert faults.good(cell), cell
        if not point.occupy:
            assert "injected fault" in (cell.error or "") or cell.outcome == "continued", cell
        if cell.outcome == "refused":
            assert all("EngineFailedError" in e for e in cell.later_errors), cell
    assert fired >= {"copy_h2d", "copy_d2h", "launch", "wait_event"}, fired


def test_a_failed_planned_step_is_refused_afterwards_by_name():
    mlp = faults.Example("mlp_sgd")
    with FaultyDevice(capacity=1 << 30) as device, faults._session(device, mlp) as session:
        params = mlp.register(session)
        batches = mlp.batches(3)
        for batch in batches[:2]:
            with session.iteration() as it:
                mlp.train_step(it, params, *batch)
        device.arm(Fault("copy_d2h", 1))
        with pytest.raises(EngineFailedError) as caught, session.iteration() as it:
            mlp.train_step(it, params, *batches[2])
        error = caught.value
        assert error.iteration == 2 and "injected fault (copy_d2h call 1" in str(error)
        assert device.stats()["reserved_bytes.current"] == 0  # the engine gave it back
        with pytest.raises(EngineFailedError):
            session.read(params["w0"])
        with pytest.raises(EngineFailedError), session.iteration() as it:
            mlp.train_step(it, params, *batches[0])
    assert device.closed


# -- Ctrl-C -----------------------------------------------------------------------------------
def _interrupting(body, hits: list):
    """``body`` that also sends SIGINT to the main thread the first time it runs."""
    def op(*arrays):
        body(*arrays)
        if not hits:
            hits.append(threading.current_thread() is threading.main_thread())
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            if not hits[0]:  # on a stream's thread: let the main thread take it first
                threading.Event().wait(0.2)

    return op


def _eager_params(mlp, steps: int) -> dict:
    with cupool.EagerSession() as eager:
        params = mlp.register(eager)
        for batch in mlp.batches(steps):
            with eager.iteration() as it:
                mlp.train_step(it, params, *batch)
        return {n: eager.read(t) for n, t in params.items()}


@pytest.mark.parametrize("step", [0, 2], ids=["in an op (recording)", "in the engine's wait"])
def test_ctrl_c_leaves_the_session_usable_and_its_state_whole(step, monkeypatch):
    mlp = faults.Example("mlp_sgd")
    module = mlp.module
    hits = []
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with FaultyDevice(capacity=1 << 30) as device, faults._session(device, mlp) as session:
            params = mlp.register(session)
            batches = mlp.batches(5)
            interrupted = None
            for k, batch in enumerate(batches[:4]):
                if k == step:
                    monkeypatch.setattr(module, "relu", _interrupting(module.relu, hits))
                try:
                    with session.iteration() as it:
                        mlp.train_step(it, params, *batch)
                except KeyboardInterrupt as exc:
                    interrupted = exc
                monkeypatch.undo()
            got = {n: session.read(t) for n, t in params.items()}
            assert device.pending_work() == 0
        assert device.stats()["reserved_bytes.current"] == 0
        assert device.stats()["pinned_bytes.current"] == 0
    finally:
        signal.signal(signal.SIGINT, previous)
    assert interrupted is not None and hits == [step == 0]
    where = "".join(traceback.format_tb(interrupted.__traceback__))
    if step == 0:
        assert "in op" in where or "relu" in where  # raised inside the op's own frame
        expected = _eager_params_skipping(mlp, 4, step)
    else:
        assert "synchronize" in where  # the main thread was waiting for the streams
        expected = _eager_params(mlp, 4)  # the step's work had all been enqueued: it ran
    assert all(np.array_equal(got[n], expected[n]) for n in expected)


def _eager_params_skipping(mlp, steps: int, skipped: int) -> dict:
    """The parameters after ``steps`` steps without cupool, step ``skipped`` stopped in its
    first relu (no update of that step ran: the updates come after the forward pass)."""
    with cupool.EagerSession() as eager:
        params = mlp.register(eager)
        for k, batch in enumerate(mlp.batches(steps)):
            if k == skipped:
                continue
            with eager.iteration() as it:
                mlp.train_step(it, params, *batch)
        return {n: eager.read(t) for n, t in params.items()}
