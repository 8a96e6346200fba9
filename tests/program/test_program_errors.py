"""Bad input to a program session: each case a specific, picklable error naming the op and
the tensor, and the session still correct afterwards."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import cupool
from cupool import program as errors
from tests.program_cases import example


def _train(session, mlp, batches, fail_at=(), monkeypatch=None):
    """Train on ``batches``; the ``dlogits`` op raises in the steps of ``fail_at`` (before
    any update of the step). Returns the parameters' handles and the errors raised."""
    params = {name: session.register(name, value)
              for name, value in mlp.initial_parameters(0).items()}
    raised = []
    for step, (x, labels) in enumerate(batches):
        if step in fail_at:
            def broken(logits, labels, out):
                raise FloatingPointError("the gradient overflowed")

            monkeypatch.setattr(mlp, "cross_entropy_grad", broken)
        try:
            with session.iteration() as it:
                mlp.train_step(it, params, x, labels)
        except errors.OpFailedError as exc:
            raised.append(exc)
        finally:
            monkeypatch.undo()
    return params, raised


@pytest.mark.parametrize("fail_at", [0, 2], ids=["recording", "planned"])
def test_an_op_that_raises_aborts_its_iteration_and_the_next_ones_run_correctly(
        fail_at, monkeypatch):
    mlp = example("mlp_sgd")
    batches = mlp.batches(5)
    with cupool.EagerSession() as eager:
        _losses, reference = mlp.train(eager, 0)
        params = {n: eager.register(n, v) for n, v in mlp.initial_parameters(0).items()}
        for step, (x, labels) in enumerate(batches):
            if step != fail_at:
                with eager.iteration() as it:
                    mlp.train_step(it, params, x, labels)
        reference = {n: eager.read(t) for n, t in params.items()}
    with cupool.Session("50%", device="emulated") as session:
        params, raised = _train(session, mlp, batches, {fail_at}, monkeypatch)
        got = {n: session.read(t) for n, t in params.items()}
        modes = [r.mode for r in session.reports]
        engine = session._runner.engine
        assert engine.state is None and engine.pool.used_bytes() == 0
        live = engine.staging.stats()["staging.live_slots.current"]
        assert live == len(engine.boundary_slots)
    assert len(raised) == 1
    error = raised[0]
    assert (error.op, error.iteration) == ("dlogits", fail_at)
    assert "FloatingPointError('the gradient overflowed')" in str(error)
    assert all(np.array_equal(got[n], v) for n, v in reference.items())
    assert modes == ["passive", "planned", "planned", "planned"]  # the failed one has none


def test_a_budget_below_one_ops_working_set_names_the_op_and_its_bytes():
    mlp = example("mlp_sgd")
    with cupool.Session(200_000, device="emulated") as session, \
            pytest.raises(errors.BudgetTooSmallError) as caught:
        mlp.train(session, 1)
    error = caught.value
    assert (error.op, error.op_index, error.budget_bytes) == ("fc0", 2, 200_000)
    assert error.needed_bytes == 65536 + 65536 + 1024 + 262144  # x, w0, b0, out (rounded)
    assert str(error) == ("op 2 'fc0' needs 394240 bytes resident (its inputs, updates and "
                          "outputs), the budget is 200000 bytes")


def _copy(x, out):
    out[...] = x


def _step(session, w):
    with session.iteration() as it:
        x = it.input(np.ones(4, np.float32), name="x")
        return it.op(_copy, w, out=x, name="copy_w"), it


def test_a_released_tensor_and_a_closed_session_are_refused_by_name():
    session = cupool.Session(1 << 20, device="emulated")
    w = session.register("w", np.arange(4, dtype=np.float32))
    _step(session, w)
    session.release(w)
    with pytest.raises(errors.TensorReleasedError) as caught:
        _step(session, w)
    assert (caught.value.tensor, caught.value.operation) == ("w", "op 1 'copy_w'")
    with pytest.raises(errors.TensorReleasedError, match="read\\('w'\\): tensor 'w' was"):
        session.read(w)
    v = session.register("v", np.zeros(4, np.float32))
    session.close()
    with pytest.raises(errors.SessionClosedError, match=r"^iteration\(\): the session is"):
        session.iteration()
    with pytest.raises(errors.SessionClosedError, match=r"^read\('v'\): the session is"):
        session.read(v)
    session.close()  # idempotent
    other = cupool.Session(1 << 20, device="emulated")
    w = other.register("w", np.arange(4, dtype=np.float32))
    with pytest.raises(errors.SessionClosedError, match=r"^iteration 0: the session is"), \
            other.iteration() as it:
        x = it.input(np.ones(4, np.float32), name="x")
        it.op(_copy, w, out=x, name="copy_w")
        other.close()  # closed while the step was being declared: nothing runs


def _sometimes_wrong(mistake: str):
    """An op body that copies ``a`` into ``out``, and makes ``mistake`` when it is given:
    ``"write"`` writes into its input ``b``, ``"return"`` returns its result instead."""
    def body(a, b, out):
        if mistake == "return":
            return a * 2
        out[...] = a
        if mistake == "write":
            b += 1  # b is declared as an input only
        return None

    return body


def _mistaken_step(session, w, mistake: str = ""):
    with session.iteration() as it:
        x = it.input(np.ones(4, np.float32), name="x")
        it.op(_sometimes_wrong(mistake), x, w, out=x, name="sneaky")


@pytest.mark.parametrize("iterations", [1, 3], ids=["recording", "planned"])
def test_an_undeclared_write_and_a_returned_result_name_the_op_and_the_tensor(iterations):
    with cupool.Session(1 << 20, device="emulated") as session:
        w = session.register("w", np.arange(4, dtype=np.float32))
        for _ in range(iterations - 1):
            _mistaken_step(session, w)
        with pytest.raises(errors.UndeclaredWriteError) as caught:
            _mistaken_step(session, w, "write")
        assert (caught.value.op, caught.value.op_index, caught.value.tensor) == \
            ("sneaky", 1, "w")
        assert session.read(w).tolist() == [0, 1, 2, 3]  # the write was refused
        with pytest.raises(errors.OpResultError, match="op 1 'sneaky' returned a ndarray"):
            _mistaken_step(session, w, "return")
        _mistaken_step(session, w)
        modes = [r.mode for r in session.reports]
    assert modes == ["passive"] + ["planned"] * (iterations - 1)  # failed ones have none


def test_tensors_outside_their_scope_and_misuse_of_the_iteration_are_refused():
    with cupool.Session(1 << 20, device="emulated") as session, \
            cupool.Session(1 << 20, device="emulated") as other:
        w = session.register("w", np.zeros(4, np.float32))
        old, it = _step(session, w)
        with pytest.raises(errors.TensorScopeError, match="'copy_w' is an output of "
                                                         "iteration 0, which has ended"):
            _step(session, old)
        with pytest.raises(errors.ProgramError, match="declared outside"):
            it.op(_copy, w, out=w)
        with pytest.raises(errors.TensorScopeError, match="belongs to another session"):
            _step(other, w)
        with session.iteration() as it:
            with pytest.raises(errors.ProgramError, match="do not nest"):
                session.iteration()
            x = it.input(np.ones(4, np.float32))
            fetched = it.fetch(it.op(_copy, x, out=x))
            with pytest.raises(errors.NotReadyError):
                fetched.value  # noqa: B018 - the property raises
        assert fetched.value.tolist() == [1.0] * 4
        with pytest.raises(errors.ProgramError, match="declared no ops"), session.iteration():
            pass
        with pytest.raises(errors.SpecError, match="shape"), session.iteration() as it:
            it.op(_copy, w, out=((-1,), "float32"))


ERRORS = [
    errors.SessionClosedError("read('w')"),
    errors.TensorReleasedError("w", "op 3 'fc0'"),
    errors.TensorScopeError("h", "op 2 'relu'", "belongs to another session"),
    errors.SpecError("fc0", "shape (=(-1,)) must not be negative"),
    errors.BudgetTooSmallError("fc0", 2, 394240, 200000),
    errors.PlanningFailedError(0, 109516, "the planner raised SolverError: no solver"),
    errors.ProgramChangedError(4, 0, "x", "x", "output 0 is (128,) float32"),
    errors.OpFailedError("dlogits", 12, 3, "FloatingPointError('overflow')"),
    errors.UndeclaredWriteError("sneaky", 1, "w"),
    errors.OpResultError("lazy", 1, "ndarray"),
    errors.NotReadyError("loss"),
    errors.ProgramError("iteration 3 declared no ops"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_every_error_pickles_with_its_fields(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert vars(copy) == vars(error)
    assert isinstance(error, cupool.errors.CupoolError)
