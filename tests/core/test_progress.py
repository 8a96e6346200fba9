"""Progress bars: silent unless enabled on a terminal with tqdm, never changing a result."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

from cupool import progress
from cupool.planning.solvers.base import SolverParams
from cupool.planning.solvers.exact import solve_exact
from cupool.planning.solvers.genetic import solve_genetic
from cupool.planning.synthetic import small_problem
from tests.conftest import tiny_document

# Seed 9 of small_problem(n=12) is one where greedy misses the lower bound, so the exact
# minimizer takes a capacity step and the GA breeds generations.
PROBLEM = dict(seed=9, n=12, num_ops=10)
GA = SolverParams(population=6, generations=5, stall_generations=5, time_limit_s=60.0)
EXACT = SolverParams(greedy_certificate=False, time_limit_s=60.0)


class _Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _loop(steps=3):
    with progress.bar(steps, "work", "step") as work:
        for _ in range(steps):
            work.update(postfix="ok")


@pytest.fixture
def no_delay(monkeypatch):
    pytest.importorskip("tqdm")
    monkeypatch.setattr(progress, "DELAY_S", 0.0)


def test_off_by_default_and_silent_off_a_terminal(capfd, no_delay):
    _loop()
    with progress.enabled():  # pytest's stderr is not a terminal
        _loop()
    stream = io.StringIO()
    with progress.enabled(stream=stream):
        _loop()
    assert capfd.readouterr() == ("", "")
    assert stream.getvalue() == ""


def test_a_terminal_gets_a_bar_unless_quiet(no_delay):
    terminal = _Terminal()
    with progress.enabled(stream=terminal):
        _loop()
    assert "work" in terminal.getvalue() and "step" in terminal.getvalue()
    quiet = _Terminal()
    with progress.enabled(quiet=True, stream=quiet):
        _loop()
    assert quiet.getvalue() == ""


def test_without_tqdm_a_bar_is_a_no_op(monkeypatch):
    monkeypatch.setattr(progress, "_tqdm", lambda: None)
    terminal, events = _Terminal(), []
    with progress.enabled(stream=terminal, callback=lambda *e: events.append(e)):
        _loop(2)
    assert terminal.getvalue() == ""
    assert events == [("work", 1, 2), ("work", 2, 2)]  # callbacks still report


def test_callback_reports_even_when_quiet_and_iterate_yields_unchanged():
    events = []
    with progress.enabled(quiet=True, callback=lambda *e: events.append(e)):
        assert list(progress.iterate("abc", "letters")) == ["a", "b", "c"]
    assert events == [("letters", 1, 3), ("letters", 2, 3), ("letters", 3, 3)]


def test_contexts_nest_restore_and_refuse_reuse():
    assert not progress.is_enabled()
    outer = progress.enabled()
    with outer:
        with progress.enabled(quiet=True):
            assert progress.is_enabled()
        assert progress.is_enabled()
    assert not progress.is_enabled()
    with pytest.raises(progress.ProgressError, match="entered twice"), outer:
        pass
    with pytest.raises(progress.ProgressError, match="exited"):
        progress.enabled().__exit__(None, None, None)
    error = pickle.loads(pickle.dumps(progress.ProgressError("x")))
    assert isinstance(error, progress.ProgressError) and str(error) == "x"


def _same(a, b):
    assert a.status == b.status and a.arena_bytes == b.arena_bytes
    assert np.array_equal(a.offsets, b.offsets)
    assert a.stats == b.stats  # counters, stop rule, certificate: no timing in stats


@pytest.mark.parametrize("solver, params, desc", [(solve_genetic, GA, "genetic"),
                                                  (solve_exact, EXACT, "exact")])
def test_solver_results_identical_with_and_without_progress(solver, params, desc, no_delay):
    problem = small_problem(**PROBLEM)
    plain = solver(problem, params)
    events, terminal = [], _Terminal()
    with progress.enabled(stream=terminal, callback=lambda *e: events.append(e)):
        shown = solver(problem, params)
    _same(plain, shown)
    assert events and {e[0] for e in events} == {desc}
    assert desc in terminal.getvalue()


def test_replay_reports_each_iteration(tmp_path):
    import json

    from cupool.app.replay import ReplaySettings, replay
    from cupool.io import load_trace

    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(tiny_document()))
    events = []
    with progress.enabled(callback=lambda *e: events.append(e)):
        replay(load_trace(path), "100%", ReplaySettings(iterations=2, size_scale=1, time_scale=1))
    assert events == [("replay", 1, 2), ("replay", 2, 2)]
