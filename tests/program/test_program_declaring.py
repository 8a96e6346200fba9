"""Declaring ops after the recording: ops equal to the recorded program's are shared with
it, any difference declares a new op, and output specs made from tuples are checked the
same however often they repeat."""

from __future__ import annotations

import numpy as np
import pytest

import cupool
from cupool import program as errors
from cupool.program import iteration as iteration_module
from cupool.program.tensors import make_spec


@pytest.fixture(autouse=True, params=["compiled", "python"])
def declaring_path(request, monkeypatch):
    """Every test here runs with the compiled declaring of the recorded op again and with
    the Python one (the compiled one where it was built)."""
    if request.param == "python":
        monkeypatch.setattr(iteration_module, "again", None)
    elif iteration_module.again is None:
        pytest.skip("the compiled declaring (cupool/program/_declare.c) is not built")
    return request.param


def _scale(x, out):
    out[...] = 2 * x


def _shift(x, out):
    out[...] = x + 1


def _total(x, out):
    out[...] = x.sum()


def _declare(session, fn=_scale, shape=(4,), start=0):
    with session.iteration() as it:
        y = it.op(fn, it.input(np.arange(start, start + 4, dtype=np.float32), name="x"),
                  out=(shape, "float32"), name="y")
        fetched = it.fetch(y)
    return it, fetched


def test_an_op_equal_to_the_recorded_one_is_shared_and_a_changed_one_is_not():
    with cupool.Session("100%", device="emulated") as session:
        _declare(session)
        recorded = session.recorded_program
        it, fetched = _declare(session, start=10)
        shared = it.program().ops
        assert shared[1] is recorded.ops[1]
        assert shared[0] is recorded.ops[0]  # the input op too: its uploader holds new data
        np.testing.assert_array_equal(fetched.value, 2 * np.arange(10, 14, dtype=np.float32))
        for start in (20, 30):  # planned steps run the call made once, with each step's data
            it, fetched = _declare(session, start=start)
            assert session.reports[-1].mode == "planned"
            np.testing.assert_array_equal(fetched.value,
                                          2 * np.arange(start, start + 4, dtype=np.float32))

        it, fetched = _declare(session, fn=_shift)  # another callable: a new op, same shape
        assert it.program().ops[1] is not recorded.ops[1]
        np.testing.assert_array_equal(fetched.value, np.arange(4, dtype=np.float32) + 1)
        assert session.reports[-1].mode == "planned"

        it, fetched = _declare(session, fn=_total, shape=(2, 2))  # a changed program
        assert session.reports[-1].change is not None
        assert it.program().ops[1].outputs[0].shape == (2, 2)
        np.testing.assert_array_equal(fetched.value, np.full((2, 2), 6, np.float32))


def test_a_repeated_output_spec_is_checked_as_the_first_time():
    assert make_spec("op", ((3,), "float32")) is make_spec("op", ((3,), "float32"))
    made = make_spec("op", ((3,), "float32", "named"))
    assert (made.shape, made.dtype, made.name) == ((3,), np.dtype("float32"), "named")
    with pytest.raises(errors.SpecError, match=r"shape \(=\(3\.0,\)\) must be a tuple of "
                                               r"ints"):
        make_spec("op", ((3.0,), "float32"))  # equal to (3,), but not an int
    with pytest.raises(errors.SpecError, match="must not be negative"):
        make_spec("op", ((-1,), "float32"))
    assert make_spec("op", ((True,), "float32")).shape == (1,)


def test_an_op_declared_again_is_compared_field_by_field_before_it_is_shared():
    """The same callable and an equal ``out=`` tuple share the recorded op only when its
    name, recompute flag and tensors are the recorded ones too; otherwise the op is made
    again, and a difference the plan cannot serve is a change of the program."""
    w0 = np.ones(4, np.float32)

    def declare(session, w, v, name="y", recompute=True, first=None):
        with session.iteration() as it:
            y = it.op(_scale, first if first is not None else w, out=((4,), "float32"),
                      name=name, recompute=recompute)
            it.op(_shift, y, out=((4,), "float32"), name="z")
        return it.program().ops

    with cupool.Session("100%", device="emulated") as session:
        w = session.register("w", w0)
        v = session.register("v", w0 * 3)
        declare(session, w, v)
        recorded = session.recorded_program.ops
        again = declare(session, w, v)
        assert again[0] is recorded[0] and again[1] is recorded[1]
        renamed = declare(session, w, v, name="y2")
        assert renamed[0] is not recorded[0] and session.reports[-1].change is not None
        recorded = session.recorded_program.ops
        flagged = declare(session, w, v, name="y2", recompute=False)
        assert flagged[0] is not recorded[0] and session.reports[-1].change is not None
        recorded = session.recorded_program.ops
        other = declare(session, w, v, name="y2", recompute=False, first=v)
        assert other[0] is not recorded[0] and session.reports[-1].change is not None
        with pytest.raises(errors.TensorReleasedError):
            session.release(v)
            declare(session, w, v, name="y2", recompute=False, first=v)


def test_a_tensor_released_while_the_step_is_declared_is_refused_at_its_next_use():
    """A persistent tensor an op of the step used is released before a later op uses it:
    that op raises, though the tensor was found valid earlier in the same step."""
    w0 = np.arange(4, dtype=np.float32)
    with cupool.Session("100%", device="emulated") as session:
        w = session.register("w", w0)
        for _ in range(2):  # recorded, then planned: later steps compare with the recording
            with session.iteration() as it:
                y = it.op(_scale, w, out=((4,), "float32"), name="y")
                it.op(_shift, w, out=((4,), "float32"), name="z")
                it.fetch(y)
        with pytest.raises(errors.TensorReleasedError), session.iteration() as it:
            it.op(_scale, w, out=((4,), "float32"), name="y")
            session.release(w)
            it.op(_shift, w, out=((4,), "float32"), name="z")

