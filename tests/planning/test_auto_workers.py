"""``auto`` with its members in worker processes plans exactly what it plans in process."""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import Future

import pytest

from cupool.data import bundled_traces
from cupool.errors import SolverError
from cupool.io import load_trace
from cupool.io.plan_json import plan_to_document
from cupool.planning.budget import BudgetParams, plan_with_budget
from cupool.planning.budget.auto import Member, boundary_members
from cupool.planning.budget.parallel import (
    PARALLEL_MIN_BUFFERS,
    PlanningInputs,
    Raised,
    WorkerStopped,
    WorkerTraceback,
    _settle,
    member_tasks,
    outcomes_in_order,
    plan_in_workers,
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


def test_member_raising_with_two_processes_raises_the_same_error():
    """The first member raises (it runs in the calling process with two as with one);
    a member raising in a worker: :func:`test_member_raising_after_the_one_it_follows`."""
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
    futures = [_future("first"), _future(error=WorkerStopped("terminated abruptly")),
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


def test_members_that_follow_another_share_its_task():
    names = ["a", "b", "c", "d"]
    assert member_tasks([None, None, "a", "c"], names) == [[0, 2, 3], [1]]
    assert member_tasks([None] * 4, names) == [[0], [1], [2], [3]]
    with pytest.raises(SolverError, match="member 'b' follows 'c', which is not a member "
                                          "listed before it"):
        member_tasks([None, "c", None, None], names)


def test_the_split_boundary_variant_follows_the_first():
    """The one pair of variants whose greedy state is shared on the large LSTM traces is
    planned in one worker: the split variant after the first variant."""
    from cupool.planning.budget.boundary import VARIANTS
    from cupool.sim import cost_model

    trace = lstm_trace(20, 2, seed=0)
    listed = boundary_members(trace, int(trace.lower_bound_bytes() * 0.5),
                              cost_model("gen5"), BudgetParams())
    follows = {member.name: member.follows for member in listed}
    split = next(v for v in VARIANTS if v.split)
    assert follows[split.name] == VARIANTS[0].name
    assert [f for name, f in follows.items() if name != split.name] == [None] * 5


def test_a_task_hands_each_member_its_own_outcome_or_error():
    futures = [Future(), Future(), Future()]
    outcomes = ["first's", Raised(ValueError("second's"), "Traceback: in the worker"),
                Raised(ValueError("second's"), "Traceback: in the worker")]
    futures[2].cancel()  # the caller stopped before the third
    _settle([0, 1, 2], futures, outcomes)
    assert futures[0].result() == "first's"
    error = futures[1].exception()
    assert isinstance(error, ValueError) and str(error) == "second's"
    assert isinstance(error.__cause__, WorkerTraceback)
    assert "in the worker" in str(error.__cause__)
    assert futures[2].cancelled()
    dead = [Future(), Future()]
    _settle([0, 1], dead, WorkerStopped("terminated abruptly"))
    assert all(isinstance(f.exception(), WorkerStopped) for f in dead)


def _planned_or_raising(trace, budget_bytes, cost, params, cache):
    """Members for :func:`test_member_raising_after_the_one_it_follows`: ``a`` and ``b``
    plan on demand, ``c`` (after ``a``, in its worker) raises."""
    def on_demand(started):
        return plan_with_budget(trace, budget_bytes, "on-demand", cost)

    def raising(started):
        raise ValueError("c cannot plan")

    return [Member("a", on_demand), Member("b", on_demand),
            Member("c", raising, follows="a")]


def test_member_raising_after_the_one_it_follows():
    """In a worker a member that follows another raises after that one planned: the other
    keeps its outcome, and the error is raised at the member that raised."""
    from cupool.sim import cost_model

    trace = lstm_trace(4, 1, seed=0)
    inputs = PlanningInputs(trace, trace.lower_bound_bytes(), cost_model("gen5"),
                            BudgetParams())
    outcomes = plan_in_workers(_planned_or_raising, inputs, ["a", "b", "c"], 2,
                               [None, None, "a"])
    assert [next(outcomes).name, next(outcomes).name] == ["a", "b"]
    with pytest.raises(ValueError, match="c cannot plan") as raised:
        next(outcomes)
    assert isinstance(raised.value.__cause__, WorkerTraceback)
    assert "raising" in str(raised.value.__cause__)


def _on_demand_members(trace, budget_bytes, cost, params, cache):
    """Four members planning on demand, for :func:`test_this_process_plans_beside_a_worker`."""
    def on_demand(started):
        return plan_with_budget(trace, budget_bytes, "on-demand", cost)

    return [Member(name, on_demand) for name in "abcd"]


def test_this_process_plans_beside_a_worker():
    """With ``local``, the tasks are shared between this process and one spawned worker,
    each taking the next task when free; the outcomes still come in member order, those
    before ``start`` left out, and an error this process hits is raised at its member."""
    import time as clock

    from cupool.planning.budget.parallel import judge
    from cupool.sim import cost_model

    trace = lstm_trace(4, 1, seed=0)
    cost = cost_model("gen5")
    budget = trace.lower_bound_bytes()
    inputs = PlanningInputs(trace, budget, cost, BudgetParams())
    listed = _on_demand_members(trace, budget, cost, BudgetParams(), None)
    here = []

    def local(index):
        here.append(index)
        clock.sleep(0.2)  # the worker takes tasks meanwhile
        member = listed[index]
        return judge(trace, member.name, member.run(0.0), cost, {})

    outcomes = list(plan_in_workers(_on_demand_members, inputs, list("abcd"), 2, None, 1,
                                    local))
    assert [outcome.name for outcome in outcomes] == ["b", "c", "d"]
    assert all(outcome.feasible for outcome in outcomes)
    assert here and set(here) < {1, 2, 3}  # some planned here, the others in the worker

    def failing(index):
        if index == 2:
            raise ValueError("c cannot plan here")
        return local(index)

    outcomes = plan_in_workers(_on_demand_members, inputs, list("abcd"), 2, None, 0, failing)
    assert [next(outcomes).name, next(outcomes).name] == ["a", "b"]
    with pytest.raises(ValueError, match="c cannot plan here"):
        next(outcomes)


def test_members_ranked_first_are_planned_in_the_calling_process(monkeypatch):
    """``auto``'s ranked members (:func:`~cupool.planning.budget.auto.members`) are planned
    in the calling process, one by one; workers plan only the members after them, starting
    once they are planned, or at once where persistent state must leave the device."""
    from cupool.planning.budget import auto
    from cupool.planning.budget.recipes import with_recompute_recipes
    from cupool.sim import cost_model

    calls = []
    real = auto.plan_in_workers

    def spy(build, inputs, names, workers, follows, start, local, first=None):
        calls.append((len(names), workers, start, local is not None, first))
        return real(build, inputs, names, workers, follows, start, local, first)

    monkeypatch.setattr(auto, "plan_in_workers", spy)
    cost = cost_model("gen5")
    path = next(p for p in bundled_traces() if p.name.startswith("resnet50_train_b32_fp32"))
    trace = load_trace(path)  # persistent state fits: no boundary variant
    budget = int(trace.lower_bound_bytes() * 0.7)
    assert not auto.boundary_members(trace, budget, cost, BudgetParams())
    assert planned(trace, 0.7, 2)["status"] == "feasible"
    ranked = auto.members(with_recompute_recipes(trace), budget, cost, BudgetParams(), None)
    assert len(calls) == 1  # the workers start once the ranked members are planned
    total, workers, start, local, first = calls[0]
    # from the first member after the ranked ones: those were planned before it started
    assert (workers, start, local, first) == (2, len(ranked), True, len(ranked))
    assert total > start
    calls.clear()
    trace = lstm_trace(20, 2, seed=0)  # persistent state must leave: at once
    budget = int(trace.lower_bound_bytes() * 0.5)
    assert auto.boundary_members(trace, budget, cost, BudgetParams())
    assert planned(trace, 0.5, 2)["status"] == "feasible"
    ranked = auto.members(with_recompute_recipes(trace), budget, cost, BudgetParams(), None)
    assert len(calls) == 1
    total, workers, start, local, first = calls[0]
    assert (workers, start, local, first) == (2, len(ranked), True, 0) and total > start


def _sleeping_members(trace, budget_bytes, cost, params, cache):
    """Members for :func:`test_stopping_early_kills_a_busy_worker`: ``b`` sleeps 60 s, then
    writes the file ``CUPOOL_TEST_MARKER`` names."""
    def on_demand(started):
        return plan_with_budget(trace, budget_bytes, "on-demand", cost)

    def sleeping(started):
        import os
        import time as clock

        clock.sleep(60)
        with open(os.environ["CUPOOL_TEST_MARKER"], "w") as marker:
            marker.write("b finished")
        return on_demand(started)

    return [Member("a", on_demand), Member("b", sleeping), Member("c", on_demand)]


def test_stopping_early_kills_a_busy_worker(tmp_path, monkeypatch):
    """Closing the outcomes (``auto`` found a plan at the ideal iteration) does not wait for
    a member a worker is still planning: the worker is killed, and the member never ends."""
    import time as clock

    import psutil

    marker = tmp_path / "b-finished"
    monkeypatch.setenv("CUPOOL_TEST_MARKER", str(marker))

    from cupool.planning.budget.parallel import judge
    from cupool.sim import cost_model

    trace = lstm_trace(4, 1, seed=0)
    cost = cost_model("gen5")
    inputs = PlanningInputs(trace, trace.lower_bound_bytes(), cost, BudgetParams())
    listed = _sleeping_members(trace, trace.lower_bound_bytes(), cost, BudgetParams(), None)

    def local(index):
        clock.sleep(3.0)  # the worker starts "b" meanwhile
        member = listed[index]
        return judge(trace, member.name, member.run(0.0), cost, {})

    outcomes = plan_in_workers(_sleeping_members, inputs, ["a", "b", "c"], 2, None, 1,
                               local, 0)
    assert next(outcomes).name == "a"  # planned here, "b" went to the worker
    outcomes.close()  # had it waited for "b", "b" would have written its marker by now
    assert not marker.exists()
    assert not any("worker_process" in " ".join(child.cmdline())
                   for child in psutil.Process().children(recursive=True))


def _dying_members(trace, budget_bytes, cost, params, cache):
    """A member whose worker process ends while planning it."""
    def dying(started):
        import os

        os._exit(3)

    return [Member("a", dying), Member("b", dying)]


def test_a_worker_that_dies_names_its_member():
    from cupool.sim import cost_model

    trace = lstm_trace(4, 1, seed=0)
    inputs = PlanningInputs(trace, trace.lower_bound_bytes(), cost_model("gen5"),
                            BudgetParams())
    with pytest.raises(SolverError, match=r"member 'a' stopped before it finished \(the "
                                          r"worker process stopped before it finished "
                                          r"\(exit code 3\)\)"):
        list(plan_in_workers(_dying_members, inputs, ["a", "b"], 1))


def test_no_worker_to_be_had_plans_here(monkeypatch):
    """Where the system refuses a process, the calling process plans every member."""
    from cupool.planning.budget import parallel
    from cupool.planning.budget.parallel import judge
    from cupool.sim import cost_model

    def refused(self, inputs_path):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(parallel.Worker, "__init__", refused)
    trace = lstm_trace(4, 1, seed=0)
    cost = cost_model("gen5")
    inputs = PlanningInputs(trace, trace.lower_bound_bytes(), cost, BudgetParams())
    listed = _on_demand_members(trace, trace.lower_bound_bytes(), cost, BudgetParams(), None)
    here = []

    def local(index):
        here.append(index)
        return judge(trace, listed[index].name, listed[index].run(0.0), cost, {})

    outcomes = list(plan_in_workers(_on_demand_members, inputs, list("abcd"), 2, None, 0,
                                    local))
    assert [o.name for o in outcomes] == list("abcd") and here == [0, 1, 2, 3]
    with pytest.raises(OSError, match="temporarily unavailable"):  # none may plan here
        list(plan_in_workers(_on_demand_members, inputs, list("abcd"), 2))


def test_a_worker_does_not_run_the_calling_script(tmp_path):
    """A script without the ``__main__`` guard that plans with two processes runs once:
    the workers import cupool, not the script."""
    import subprocess
    import sys

    marker = tmp_path / "runs.txt"
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from cupool.planning.budget import BudgetParams, plan_with_budget\n"
        "from cupool.planning.synthetic import lstm_trace\n"
        f"open({str(marker)!r}, 'a').write('run\\n')\n"
        "trace = lstm_trace(20, 2, seed=0)\n"
        "result = plan_with_budget(trace, int(trace.lower_bound_bytes() * 0.5), 'auto', "
        "None, BudgetParams(workers=2))\n"
        "print(result.plan.status.value)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "feasible"
    assert marker.read_text() == "run\n"
