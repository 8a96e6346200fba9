"""The compiled declaring of the recorded op again (``cupool/program/_declare.c``) gives
what the Python path gives, for every way ``it.op`` can be called again."""

from __future__ import annotations

import numpy as np
import pytest

import cupool
from cupool import program as errors
from cupool.program import iteration as iteration_module


def _bump(x, w, out):
    out[...] = x + w


def _scale(x, out):
    out[...] = 2 * x


def _add(g, w):
    w += g


def _named(x, out):
    out[...] = x - 1


_named.__name__ = "renamed"  # an op named by its callable, whose __name__ changed


def _step(session, w, g, variant: dict, stale=None):
    with session.iteration() as it:
        x = it.input(np.arange(4, dtype=np.float32), name="x")
        y = it.op(_bump, x, w, out=variant.get("out", ((4,), "float32")),
                  name=variant.get("name", "y"), recompute=variant.get("recompute", True))
        z = it.op(_scale, y if stale is None else stale, out=((4,), np.float32))
        u = it.op(_named, z, out=((4,), "float32"))
        it.op(_scale, u, out=variant.get("like", z), name="v")  # out= as a tensor's layout
        updates = [w]
        it.op(_add, g, updates=(t for t in updates) if variant.get("generator")
              else (tuple(updates) if variant.get("tuple") else updates))
        it.fetch(u)
    return it, y, z


VARIANTS = [{}, {"name": "y2"}, {"name": "y2"}, {}, {"tuple": True}, {"generator": True},
            {"recompute": False}, {"out": ((4,), np.dtype("float32"))}, {"name": ""}, {}, {}]


def _outcome(monkeypatch, compiled: bool) -> list:
    if not compiled:
        monkeypatch.setattr(iteration_module, "again", None)
    found = []
    with cupool.Session("100%", device="emulated") as session:
        w = session.register("w", np.ones(4, np.float32))
        g = session.register("g", np.full(4, 0.5, np.float32))
        wide = session.register("wide", np.ones(4, np.float64))
        _, old_y, _ = _step(session, w, g, {})
        for variant in [*VARIANTS, {"like": w}, {"like": wide}, {"like": wide}, {}]:
            recorded = session.recorded_program.ops
            it, y, z = _step(session, w, g, variant)
            ops = it.program().ops
            report = session.reports[-1]
            found.append(([op is rec for op, rec in zip(ops, recorded, strict=False)],
                          y.name, z.name, report.mode, report.change is None))
        with pytest.raises(errors.TensorScopeError) as raised:
            _step(session, w, g, {}, stale=old_y)
        found.append(str(raised.value))
        found.append(session.read(w).tolist())
    monkeypatch.undo()
    return found


def test_the_compiled_path_gives_what_the_python_path_gives(monkeypatch):
    if iteration_module.again is None:
        pytest.skip("the compiled declaring (cupool/program/_declare.c) is not built")
    compiled = _outcome(monkeypatch, compiled=True)
    python = _outcome(monkeypatch, compiled=False)
    assert compiled == python
    assert all(compiled[0][0]) and compiled[0][1:] == ("y", "_scale", "planned", True)
    assert compiled[1][0][1] is False and compiled[1][4] is False  # renamed: a change
    assert all(compiled[2][0])  # the renamed program, recorded again, is shared
    assert "ended" in compiled[-2]
    assert compiled[-1] == [1.0 + 0.5 * (len(VARIANTS) + 5)] * 4
    like_w, like_wide = compiled[len(VARIANTS)], compiled[len(VARIANTS) + 1]
    assert all(like_w[0]) and like_w[4] is True  # the same layout: the recorded op
    assert not like_wide[0][4] and like_wide[4] is False  # another dtype: a change


def test_a_tensor_made_by_the_compiled_path_is_the_one_the_class_makes():
    if iteration_module.again is None:
        pytest.skip("the compiled declaring (cupool/program/_declare.c) is not built")
    from cupool.program.tensors import Tensor

    with cupool.Session("100%", device="emulated") as session:
        w = session.register("w", np.ones(4, np.float32))
        g = session.register("g", np.full(4, 0.5, np.float32))
        for _ in range(3):
            _, y, z = _step(session, w, g, {})
        for made in (y, z):
            again = Tensor(made.owner, made.key, made.spec, made.name, made.iteration)
            assert type(made) is Tensor
            assert [getattr(made, slot) for slot in Tensor.__slots__] == \
                [getattr(again, slot) for slot in Tensor.__slots__]
            assert made.persistent is False and made.released is False
