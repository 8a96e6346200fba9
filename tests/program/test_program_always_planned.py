"""Every budget that each op's working set fits gets planned steps: a generated recurrent
program (hundreds of ops of tens of µs, copies of 50-90 µs on the emulated device) at its
tightest budget trains bitwise like the program without cupool; a budget below one op's
working set is refused before anything runs; a planning failure is a typed error, never a
silent fall-back to passive steps."""

from __future__ import annotations

import numpy as np
import pytest

import cupool
from cupool.program import BudgetTooSmallError, PlanningFailedError
from cupool.program import session as session_module

STEPS = 3


def _cell(x, h, wx, wh, out):
    xp = cupool.array_module(x)
    xp.matmul(x, wx, out=out)
    out += h @ wh
    xp.tanh(out, out=out)


def _first_cell(x, wx, out):
    cupool.array_module(x).tanh(x @ wx, out=out)


def _loss(h, out):
    out[...] = (h * h).sum() / (2 * h.shape[0])


def _loss_grad(h, out):
    cupool.array_module(h).divide(h, h.shape[0], out=out)


def _tanh_grad(dh, h, out):
    cupool.array_module(dh).multiply(dh, 1 - h * h, out=out)


def _accumulate(a, dz, grad):
    grad += a.T @ dz


def _through_time(dz, wh, out):
    cupool.array_module(dz).matmul(dz, wh.T, out=out)


def _zero(grad):
    grad[...] = 0


def _sgd(grad, param):
    param -= np.float32(0.05) * grad


class Recurrent:
    """An Elman network over ``time`` steps (back-propagation through time, SGD), its
    sizes drawn from ``seed``: ``4 * time + 3`` ops of small matrix products."""

    def __init__(self, seed: int, time: int = 24) -> None:
        rng = np.random.default_rng(seed)
        self.time = time
        self.batch, self.features, self.hidden = (int(rng.integers(8, 24)),
                                                  int(rng.integers(16, 48)),
                                                  int(rng.integers(32, 96)))
        f, h = self.features, self.hidden
        self.initial = {"wx": (rng.standard_normal((f, h)) / np.sqrt(f)).astype(np.float32),
                        "wh": (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32),
                        "gwx": np.zeros((f, h), np.float32),
                        "gwh": np.zeros((h, h), np.float32)}
        self.batches = [rng.standard_normal((time, self.batch, f)).astype(np.float32)
                        for _ in range(STEPS)]

    def step(self, it, p: dict, xs):
        f32, state = "float32", (self.batch, self.hidden)
        inputs = [it.input(xs[t], name=f"x{t}") for t in range(self.time)]
        hs = [it.op(_first_cell, inputs[0], p["wx"], out=(state, f32), name="cell0")]
        for t in range(1, self.time):
            hs.append(it.op(_cell, inputs[t], hs[-1], p["wx"], p["wh"], out=(state, f32),
                            name="cell"))
        loss = it.op(_loss, hs[-1], out=((), f32), name="loss")
        dh = it.op(_loss_grad, hs[-1], out=(state, f32), name="dloss")
        it.op(_zero, updates=[p["gwx"]], name="zero_gwx")
        it.op(_zero, updates=[p["gwh"]], name="zero_gwh")
        for t in reversed(range(self.time)):
            dz = it.op(_tanh_grad, dh, hs[t], out=(state, f32), name="dtanh")
            it.op(_accumulate, inputs[t], dz, updates=[p["gwx"]], name="acc_wx")
            if t > 0:
                it.op(_accumulate, hs[t - 1], dz, updates=[p["gwh"]], name="acc_wh")
                dh = it.op(_through_time, dz, p["wh"], out=(state, f32), name="dh")
        it.op(_sgd, p["gwx"], updates=[p["wx"]], name="sgd_wx")
        it.op(_sgd, p["gwh"], updates=[p["wh"]], name="sgd_wh")
        return it.fetch(loss)

    def train(self, session, steps: int = STEPS):
        """Losses and final parameters after ``steps`` steps on ``session``."""
        p = {name: session.register(name, value) for name, value in self.initial.items()}
        losses = []
        for xs in self.batches[:steps]:
            with session.iteration() as it:
                loss = self.step(it, p, xs)
            losses.append(float(loss.value))
        return losses, {name: session.read(t) for name, t in p.items()}


def _largest_working_set(model: Recurrent) -> int:
    """The tightest budget the program can run in: its largest op's working set."""
    with cupool.Session("100%", device="emulated", measure_link=False) as session:
        model.train(session, 1)
        program = session.recorded_program
        return max(program.working_set(op) for op in program.ops)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_recurrent_program_at_its_tightest_budget_runs_planned_steps_bitwise(seed):
    model = Recurrent(seed)
    with cupool.EagerSession() as eager:
        reference = model.train(eager)
    tightest = _largest_working_set(model)
    with cupool.Session(tightest, device="emulated") as session:
        losses, params = model.train(session)
        reports = session.reports
        peak = session.peak_bytes
    assert tightest < peak / 4  # far below the program's peak
    assert [r.mode for r in reports] == ["passive"] + ["planned"] * (STEPS - 1)
    assert all(r.device_peak_bytes <= tightest for r in reports)
    assert losses == reference[0]
    for name, value in reference[1].items():
        assert np.array_equal(params[name], value), name


def test_a_budget_below_one_ops_working_set_is_refused_before_anything_runs():
    model = Recurrent(0)
    tightest = _largest_working_set(model)
    with cupool.Session(tightest - 1, device="emulated") as session:
        with pytest.raises(BudgetTooSmallError) as caught:
            model.train(session, 1)
        assert session.reports == []
    error = caught.value
    assert (error.needed_bytes, error.budget_bytes) == (tightest, tightest - 1)
    assert error.op.startswith("cell")


def test_a_planning_failure_raises_and_never_falls_back_to_passive_steps(monkeypatch):
    """Where planning fails though every working set fits (a bug), the recording step's
    results stand and each step that records says why; none runs passively in silence."""
    def failing(trace, budget_bytes, cost):
        raise cupool.errors.SolverError("no solver today")

    model = Recurrent(0, time=4)
    with cupool.EagerSession() as eager:
        reference = model.train(eager, 1)
    with cupool.Session("50%", device="emulated") as session:
        monkeypatch.setattr(session_module, "plan_program", failing)  # after its measuring
        p = {name: session.register(name, value) for name, value in model.initial.items()}
        for step in range(2):
            with pytest.raises(PlanningFailedError) as caught, session.iteration() as it:
                loss = model.step(it, p, model.batches[step])
            assert (caught.value.iteration, caught.value.budget_bytes) == (
                step, session.budget_bytes)
            assert caught.value.reason == "the planner raised SolverError: no solver today"
            assert session.plan_reason == caught.value.reason
            if step == 0:  # the recording step ran: its loss and its updates stand
                assert float(loss.value) == reference[0][0]
                assert np.array_equal(session.read(p["wx"]), reference[1]["wx"])
        assert [(r.mode, r.recorded) for r in session.reports] == [("passive", True)] * 2
        assert session.plan is None
