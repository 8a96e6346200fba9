"""Pausing the cyclic garbage collector: restored as it was, around planning too."""

from __future__ import annotations

import gc

import pytest

from cupool.core.collector import collector_paused
from cupool.planning.budget import plan_with_budget
from tests.swap_cases import six_op_trace


@pytest.fixture
def enabled_after():
    yield
    gc.enable()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_inside_and_as_it_was_after(enabled, enabled_after):
    (gc.enable if enabled else gc.disable)()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled() is enabled


def test_the_collector_is_resumed_after_an_error(enabled_after):
    gc.enable()
    with pytest.raises(RuntimeError, match="inside"), collector_paused():
        raise RuntimeError("inside")
    assert gc.isenabled()


def test_planning_pauses_the_collector_and_resumes_it(monkeypatch, enabled_after):
    import cupool.planning.budget as budget

    seen = []
    policy = budget.get_policy("auto")

    def recording(*args):
        seen.append(gc.isenabled())
        return policy(*args)

    monkeypatch.setattr(budget, "get_policy", lambda name: recording)
    gc.enable()
    trace = six_op_trace()
    result = plan_with_budget(trace, int(trace.lower_bound_bytes() * 0.7), "auto")
    assert result.feasible
    assert seen == [False]
    assert gc.isenabled()
