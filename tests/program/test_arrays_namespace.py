"""The array namespace (``it.xp``, the tensors' operators): one step function run with NumPy
and under a session gives the same bytes; each call is one op named after its function and
source line; views are no ops and write through to their base; recompute sees through it;
bad input is a typed error naming the function, the operands' shapes and the call's line,
raised when the call is made."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import cupool
from cupool.core.vocabulary import RecomputeAction
from cupool.program import SessionClosedError, TensorScopeError
from cupool.program.arrays import (
    ArrayDtypeError,
    ArrayReleasedError,
    ArrayScopeError,
    ArraySessionClosedError,
    ArrayValueError,
    MissingFunctionError,
    ReadOnlyWriteError,
    ShapeMismatchError,
    UnsupportedFunctionError,
    View,
)

HERE = "test_arrays_namespace.py"


def _session(budget="100%", **options):
    return cupool.Session(budget, device="emulated", measure_link=False,
                          measure_overhead=False, **options)


def _step(xp, params, batch):
    """A small regression step written once: NumPy arrays or a session's tensors."""
    x, y = xp.asarray(batch[0]), xp.asarray(batch[1])
    w, b = params["w"], params["b"]
    h = xp.tanh(x @ w + b)
    err = h[:, :2] - y
    loss = xp.mean(err * err)
    dh = xp.zeros_like(h)
    dh[:, :2] = err * (2.0 / err.size)
    dz = dh * (1 - h ** 2)
    w -= 0.5 * (x.T @ dz)
    b -= 0.5 * xp.sum(dz, axis=0)
    return loss


def _data(seed=0):
    rng = np.random.default_rng(seed)
    params = {"w": (rng.standard_normal((6, 5)) * 0.3).astype(np.float32),
              "b": np.zeros(5, np.float32)}
    batches = [(rng.standard_normal((16, 6)).astype(np.float32),
                rng.standard_normal((16, 2)).astype(np.float32)) for _ in range(4)]
    return params, batches


def _run_numpy():
    params, batches = _data()
    losses = [float(_step(np, params, batch)) for batch in batches]
    return losses, params


def _run_session(session):
    params0, batches = _data()
    params = {k: session.register(k, v) for k, v in params0.items()}
    losses = []
    for batch in batches:
        with session.iteration() as it:
            loss = it.fetch(_step(it.xp, params, batch))
        losses.append(float(loss.value))
    return losses, {k: session.read(t) for k, t in params.items()}


@pytest.mark.parametrize("budget", ["100%", "60%"])
def test_one_step_function_with_numpy_and_under_a_session_gives_the_same_bytes(budget):
    losses, params = _run_numpy()
    with _session(budget) as session:
        got_losses, got = _run_session(session)
        modes = [r.mode for r in session.reports]
        trace = session.trace
        assert all(r.device_peak_bytes <= r.budget_bytes for r in session.reports)
    assert modes == ["passive", "planned", "planned", "planned"]
    assert got_losses == losses
    for name, value in params.items():
        assert got[name].tobytes() == value.tobytes(), name
    names = [op.name for op in trace.ops]
    assert names[:4] == [f"asarray@{HERE}:40", f"asarray@{HERE}:40", f"matmul@{HERE}:42",
                         f"add@{HERE}:42"]
    assert f"subtract_inplace@{HERE}:48" in names  # w -= ...: an update of w
    assert f"__setitem__@{HERE}:46" in names       # dh[:, :2] = ...: an update of dh
    assert not any(name.startswith(("T@", "__getitem__@")) for name in names)  # views


def test_the_eager_session_runs_the_same_namespace_at_once():
    losses, params = _run_numpy()
    with cupool.EagerSession() as eager:
        got_losses, got = _run_session(eager)
    assert got_losses == losses
    assert all(got[k].tobytes() == v.tobytes() for k, v in params.items())


def test_namespace_ops_are_recomputed_by_re_running_them():
    """On a slow link the plan recomputes namespace outputs; the bits stay."""
    losses, params = _run_numpy()
    with _session("50%", link=0.001) as session:
        got_losses, got = _run_session(session)
        recomputes = [a for a in session.plan.actions if isinstance(a, RecomputeAction)]
        recipes = [b for b in session.trace.buffers if b.recompute is not None]
    assert recipes and recomputes
    assert got_losses == losses
    assert all(got[k].tobytes() == v.tobytes() for k, v in params.items())


def test_views_are_no_ops_and_writes_through_them_reach_their_base():
    with _session() as session:
        w = session.register("w", np.arange(12, dtype=np.float32).reshape(3, 4))
        with session.iteration() as it:
            xp = it.xp
            t = w.T
            assert isinstance(t, View) and t.shape == (4, 3) and t.base is w
            row = w[1]
            assert isinstance(row, View) and row.shape == (4,)
            col = w[:, 1:3].reshape(6)  # not contiguous: NumPy copies, so does the namespace
            assert isinstance(col, cupool.Tensor) and col.shape == (6,)
            flat = w.reshape(2, 6)      # contiguous: a view
            assert isinstance(flat, View)
            w.T[0] += 100               # through two views into w
            w[2] = xp.zeros(4, dtype=xp.float32)
            seen = it.fetch(t + 0)
            column = it.fetch(col + 0)
        names = [op.name for op in session.trace.ops]
    expected = np.arange(12, dtype=np.float32).reshape(3, 4)
    expected.T[0] += 100
    expected[2] = 0
    assert np.array_equal(session_value := seen.value, expected.T), session_value
    assert np.array_equal(column.value, np.arange(12, dtype=np.float32).reshape(3, 4)
                          [:, 1:3].reshape(6))
    assert len(names) == 7  # reshape copy, add.inplace, zeros, setitem, two adds, fetch


def test_host_arrays_come_in_by_asarray_and_read_only_ones_stay_read_only():
    data = np.ones((2, 3), np.float32)
    data.flags.writeable = False
    with _session() as session, session.iteration() as it:
        xp = it.xp
        x = xp.asarray(data)
        with pytest.raises(ReadOnlyWriteError, match=rf"{HERE}:\d+: add_inplace\(\(3,\), 1\)"):
            x[0] += 1
        with pytest.raises(ReadOnlyWriteError, match="broadcast view"):
            xp.broadcast_to(xp.asarray(np.ones(3)), (2, 3))[...] = 0
        with pytest.raises(UnsupportedFunctionError, match=r"xp\.asarray"):
            x + np.ones((2, 3), np.float32)
        copy = xp.asarray(x, copy=True)
        copy += 1  # a copy is writable
        it.fetch(copy)


def _raises(error, call, function, shapes):
    """``call()`` raises ``error`` naming ``function``, ``shapes`` and this file's line."""
    with pytest.raises(error) as caught:
        call()
    exc = caught.value
    assert exc.function == function
    assert exc.shapes == shapes
    assert exc.where.rsplit("/", 1)[-1].startswith(f"{HERE}:")
    assert pickle.loads(pickle.dumps(exc)).message == exc.message
    return exc


def test_bad_input_is_a_typed_error_naming_the_function_the_shapes_and_the_line():
    with _session() as session:
        w = session.register("w", np.ones((4, 3), np.float32))
        with session.iteration() as it:
            xp = it.xp
            x = xp.asarray(np.ones((2, 4), np.float32))
            ops = len(it._ops)
            _raises(ShapeMismatchError, lambda: x + w, "add", ((2, 4), (4, 3)))
            error = _raises(ShapeMismatchError, lambda: w @ x, "matmul", ((4, 3), (2, 4)))
            assert "inner sizes differ: 3" in str(error)
            _raises(ShapeMismatchError, lambda: xp.sum(x, axis=2), "sum", ((2, 4),))
            _raises(ShapeMismatchError, lambda: xp.reshape(x, (3, 3)), "reshape", ((2, 4),))
            _raises(ArrayDtypeError, lambda: xp.asarray(np.array(["a", "b"])), "asarray",
                    ("host array (2,)",))
            _raises(ArrayDtypeError, lambda: x.astype(np.longdouble), "astype", ((2, 4),))
            _raises(ArrayDtypeError, lambda: x.astype(object), "astype", ((2, 4),))
            _raises(MissingFunctionError, lambda: xp.fft, "fft", ())
            error = _raises(MissingFunctionError, lambda: x.cumsum, "ndarray.cumsum",
                            ((2, 4),))
            assert "it.op(" in str(error) and isinstance(error, AttributeError)
            _raises(UnsupportedFunctionError, lambda: xp.einsum("ij,jk,kl", x, w, w),
                    "einsum", ((2, 4), (4, 3), (4, 3)))
            _raises(UnsupportedFunctionError, lambda: x[x > 0], "__getitem__",
                    ((2, 4), (2, 4)))
            _raises(UnsupportedFunctionError, lambda: xp.exp(x, out=x), "exp", ((2, 4),))
            _raises(ArrayValueError, lambda: float(xp.sum(x)), "float", ((),))
            _raises(ArrayValueError, lambda: bool(x[0, 0] > 0), "bool", ((),))
            with pytest.raises(ArrayValueError):
                np.asarray(x)
            assert len(it._ops) == ops + 3  # only the sum, the comparisons' ops were made
            y = x * 2
            it.fetch(y)
        with session.iteration() as it:
            error = _raises(ArrayScopeError, lambda: y + 1, "add", ((2, 4), "1"))
            assert isinstance(error, TensorScopeError) and "iteration 0" in str(error)
            with _session() as other:
                alien = other.register("alien", np.ones(3, np.float32))
                _raises(ArrayScopeError, lambda: it.xp.exp(alien), "exp", ((3,),))
            _raises(ArraySessionClosedError, lambda: it.xp.exp(alien), "exp", ((3,),))
            it.fetch(w + 1)
        session.release(w)
        with session.iteration() as it:
            _raises(ArrayReleasedError, lambda: it.xp.sum(w), "sum", ((4, 3),))
            it.fetch(it.xp.zeros(3))
        later = it.xp
        _raises(ArrayScopeError, lambda: later.zeros(3), "zeros", ())
    error = _raises(ArraySessionClosedError, lambda: later.zeros(3), "zeros", ())
    assert isinstance(error, SessionClosedError)


def test_tensors_keep_identity_hashing_and_elementwise_equality():
    with _session() as session, session.iteration() as it:
        x = it.xp.asarray(np.ones(3, np.float32))
        table = {x: "x"}
        assert table[x] == "x" and x in table
        equal = x == x
        assert isinstance(equal, cupool.Tensor) and equal.dtype == np.bool_
        assert (x == (1, 2, 3)) is False  # not an operand: Python's identity
        assert x.__array_namespace__() is it.xp
        assert (np.float32(2) * x).dtype == np.float32  # NumPy defers to the tensor
        it.fetch(equal)


def _double(t):
    return t * 2.0


def _accumulate(target, value):
    target += value


def test_a_call_site_seen_before_still_refuses_a_tensor_out_of_scope_by_its_typed_error():
    """The second call from one site with operands of the same layout takes the cached path,
    which leaves the tensors' scope to the iteration: the error is still the namespace's."""
    with _session() as session:
        w = session.register("w", np.ones(3, np.float32))
        v = session.register("v", np.ones(3, np.float32))
        with session.iteration() as it:
            stale = _double(w)
            it.fetch(stale)
        with session.iteration() as it:
            it.fetch(_double(w))  # the site's entry is cached now
            ops = len(it._ops)
            error = _raises(ArrayScopeError, lambda: _double(stale), "multiply", ((3,), "2.0"))
            assert "iteration 0" in str(error)
            _accumulate(v, w)
            assert len(it._ops) == ops + 1
        session.release(w)
        with session.iteration() as it:
            _raises(ArrayReleasedError, lambda: _double(w), "multiply", ((3,), "2.0"))
            _raises(ArrayReleasedError, lambda: _accumulate(v, w), "add_inplace", ((3,),))
            _raises(ArrayReleasedError, lambda: _accumulate(w, v), "add_inplace",
                    ((3,), (3,)))
            it.fetch(_double(v))


def test_the_quick_signature_is_the_checked_one_wherever_it_is_given():
    """The cache key read without the scope checks equals the checked path's for every mix
    of operands it takes (tensors, views, Python and NumPy numbers, one tensor twice), and
    it declines the rest (a bool, a host array, a third tensor)."""
    from cupool.program.arrays.operands import quick_signature

    with _session() as session:
        w = session.register("w", np.ones((3, 4), np.float32))
        with session.iteration() as it:
            xp = it.xp
            x = xp.asarray(np.ones((3, 4), np.float32))
            y = x + 1
            views = [w.T, w[1:], x.reshape(12)]
            operands = [x, w, *views, 0.5, -0.0, 2, np.float32(3), np.int64(-1), True,
                        np.ones(2)]
            taken = 0
            for args in [(a,) for a in operands] + [(a, b) for a in operands for b in
                                                   operands] + [(x, w, 1.5), (x, w, y)]:
                quick = quick_signature(args, session)
                if quick is None:
                    continue
                taken += 1
                bases, sig = xp._operands("add", args)
                assert (quick[0], quick[1]) == (bases, sig), args
            assert taken > 80
            assert quick_signature((x, w, y), session) is None
            assert quick_signature((x, True), session) is None
            it.fetch(y)
