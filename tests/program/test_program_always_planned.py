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
from tests.bench_modules import load_bench

STEPS = 3


rnn = load_bench("rnn_program")  # its ops and step, at the sizes drawn below


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
        return rnn.train_step(it, p, xs)

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
    def failing(trace, budget_bytes, cost, params=None):
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
