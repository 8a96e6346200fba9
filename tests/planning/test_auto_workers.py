"""``auto`` with its members in worker processes plans exactly what it plans in process."""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

import pytest

from cupool.data import bundled_traces
from cupool.errors import SolverError
from cupool.io import load_trace
from cupool.io.plan_json import plan_to_document
from cupool.planning.budget import BudgetParams, plan_with_budget
from cupool.planning.budget.parallel import (
    PARALLEL_MIN_BUFFERS,
    outcomes_in_order,
    worker_count,
)
from cupool.planning.synthetic import lstm_trace


def planned(trace, fraction: float, workers: int) -> dict:
    """What must not depend on ``workers``: the plan (less its wall time), ``candidates`` in
    order and the member kept."""
    result = plan_with_budget(trace, int(trace.lower_bound_bytes() * fraction), "auto",
                              None, BudgetParams(workers=workers))
    document = plan_to_document(result.plan)
    del document["solve_seconds"]
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return {"plan": hashlib.sha256(text.encode()).hexdigest(),
            "candidates": list(result.candidates.items()), "member": result.member,
            "status": result.plan.status.value}


@pytest.mark.parametrize("fraction", [0.5, 0.7])
def test_small_lstm_same_plan_with_two_workers(fraction):
    trace = lstm_trace(20, 2, seed=0)
    assert planned(trace, fraction, 2) == planned(trace, fraction, 1)


def test_bundled_trace_same_plan_with_two_workers():
    path = next(p for p in bundled_traces() if p.name.startswith("resnet50_train_b32_fp32"))
    trace = load_trace(path)
    sequential = planned(trace, 0.7, 1)
    assert sequential["status"] == "feasible"
    assert planned(trace, 0.7, 2) == sequential


@pytest.mark.parametrize("bad", [-1, True, 1.5, "2", None])
def test_bad_workers_rejected(bad):
    with pytest.raises(SolverError, match=r"workers \(=.*\) must be an integer >= 0"):
        BudgetParams(workers=bad)


def test_worker_count():
    small = lstm_trace(20, 2, seed=0)
    assert len(small.buffers) < PARALLEL_MIN_BUFFERS
    assert BudgetParams().workers == 1  # in process unless asked
    assert worker_count(BudgetParams(workers=0), small, 20) == 1  # automatic: too small
    assert worker_count(BudgetParams(workers=1), small, 20) == 1
    assert worker_count(BudgetParams(workers=8), small, 3) == 3  # at most one per member


def test_member_raising_in_a_worker_raises_the_same_error():
    trace = lstm_trace(20, 2, seed=0)
    budget = int(trace.lower_bound_bytes() * 0.7)
    messages = []
    for workers in (1, 2):
        with pytest.raises(SolverError, match="unknown solver 'no-such-solver'") as raised:
            plan_with_budget(trace, budget, "auto", None,
                             BudgetParams(offset_solver="no-such-solver", workers=workers))
        messages.append(str(raised.value))
    assert messages[0] == messages[1]


def _future(result=None, error: BaseException | None = None) -> Future:
    future = Future()
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
    return future


def test_dead_worker_names_its_member_and_cancels_the_rest():
    pending = Future()
    futures = [_future("first"), _future(error=BrokenProcessPool("terminated abruptly")),
               pending]
    with pytest.raises(SolverError, match=r"member 'second' stopped before it finished"):
        list(outcomes_in_order(futures, ["first", "second", "third"]))
    assert pending.cancelled()


def test_first_error_in_member_order_is_raised():
    futures = [_future("a"), _future(error=ValueError("second's")),
               _future(error=KeyError("third's"))]
    with pytest.raises(ValueError, match="second's"):
        list(outcomes_in_order(futures, ["a", "b", "c"]))
    assert list(outcomes_in_order([_future("a"), _future("b")], ["a", "b"])) == ["a", "b"]


def test_stopping_early_cancels_the_members_not_started():
    pending = Future()
    outcomes = outcomes_in_order([_future("a"), pending], ["a", "b"])
    assert next(outcomes) == "a"
    outcomes.close()
    assert pending.cancelled()


def test_a_plan_at_the_ideal_iteration_ends_the_search():
    """Once a member's plan runs the ideal iteration (overhead 0) nothing can be faster: the
    members after it are reported as not planned, with one worker or two."""
    from cupool.planning.budget.auto import batch
    from cupool.planning.budget.recipes import with_recompute_recipes
    from cupool.sim import cost_model

    path = next(p for p in bundled_traces() if p.name.startswith("resnet50_infer_b8"))
    trace = load_trace(path)
    sequential = planned(trace, 0.9, 1)
    assert sequential["status"] == "feasible"
    members = [name for name, _value in sequential["candidates"]]
    budget = int(trace.lower_bound_bytes() * 0.9)
    derived = with_recompute_recipes(trace)  # what auto plans: the trace with recipes
    listed = [m.name for m in batch(derived, budget, cost_model("gen5"), BudgetParams())]
    assert members == listed  # every member is reported, in order
    kept = members.index(sequential["member"])
    assert kept < len(members) - 1  # the case tests something: members follow the kept one
    report = dict(sequential["candidates"])
    assert report[sequential["member"]] == 0.0
    assert all(not (isinstance(report[m], float) and report[m] <= 0.0) for m in members[:kept])
    assert all(report[m] == f"not planned: {sequential['member']} already runs the ideal "
               f"iteration (overhead 0)" for m in members[kept + 1:])
    assert planned(trace, 0.9, 2) == sequential
