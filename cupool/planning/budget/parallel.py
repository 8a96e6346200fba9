"""``auto``'s members in worker processes: the same plan, sooner on a large trace.

Each worker (:class:`Worker`) gets the planning inputs once (:class:`PlanningInputs`, with
the function that lists the members, pickled once to a temporary file it reads when it
starts); it lists the members itself (a member is a closure, which does not pickle) and
plans and simulates the members it is sent over its socket, each named by its index in that
list. What comes back is plain data (:class:`MemberOutcome`: the plan, why there is none
and the simulation; not the trace, which the parent already holds), and the parent combines
the outcomes in member order exactly as it combines those of members planned in its own
process, validating the plans it relies on: the plan, ``candidates`` and the member chosen
do not depend on the number of workers. The greedy members a worker
plans share that worker's :class:`~.engine.placement.OffsetCache` (an exact cache: a member
planned in another worker solves its offsets again, which costs time only). A member that
``follows`` another (it continues from work that one leaves in its process) is planned
right after it, in the same process: the two are one task (:func:`member_tasks`).

The parent plans too: the tasks are handed out in member order to whichever process is free
first (:class:`TaskQueue`), the parent taking one whenever the next outcome it needs is not
done yet, and a thread per worker keeping that worker busy. A worker is sent one task at a
time, so none waits in a worker's queue while another process is idle.

Workers are fresh interpreters (:class:`Worker`), never forks (``fork`` is unsafe in a
process that uses CUDA, and the planner runs inside such programs), and they import cupool,
not the program that plans: a script without the ``if __name__ == "__main__":`` guard is
not run again in them, as it would be by ``multiprocessing``'s ``spawn``. Where no worker
can be started (the system refuses a process), the calling process plans every member. An
exception a member raises in a worker is raised again in the parent (same class and
message; the first in member order, as in process); a worker that dies (killed, out of
memory) raises a :class:`~cupool.errors.SolverError` naming the member. The workers
always end with the search, killed: when it ends early (a plan at the ideal iteration, an
error), a member a worker still plans is not waited for.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from cupool.check import validate_plan
from cupool.core.collector import collector_paused
from cupool.core.vocabulary import Plan, SolveStatus, Trace
from cupool.errors import SolverError
from cupool.planning.budget.engine.placement import OffsetCache
from cupool.planning.budget.params import BudgetParams

if TYPE_CHECKING:
    from cupool.check.report import ValidationReport
    from cupool.planning.budget.result import BudgetResult
    from cupool.sim.cost import CostModel
    from cupool.sim.simulator import SimReport

PARALLEL_MIN_BUFFERS = 2000
"""Fewest buffers for which ``workers=0`` (automatic) plans in worker processes. Starting a
worker (a fresh interpreter importing cupool and NumPy, then reading the inputs) costs
about a second, and each worker re-derives what the members share; a 576-buffer LSTM
(``lstm_trace(20, 2)``, members a few CPU seconds in all) planned slower with two workers
than without, a 2,104-buffer one (``lstm_trace(40, 4)``, 17 CPU s) faster, its members
costing about 3 CPU s more in all."""


@dataclass(frozen=True)
class PlanningInputs:
    """What every member plans from; sent to each worker once."""

    trace: Trace
    budget_bytes: int
    cost: CostModel
    params: BudgetParams


@dataclass(frozen=True)
class MemberOutcome:
    """One member's plan, judged.

    name: the member's name in ``candidates``.
    plan: its plan (any status); ``policy`` and ``reason``: its :class:`BudgetResult`'s.
    check: the validator's report of a feasible plan once checked (``None``: not checked
      yet, :class:`~.selection.Selection` checks the plans ``auto`` relies on; or not
      feasible).
    simulation: the simulator's report of a feasible plan (``None``: not feasible, or
      found invalid).
    """

    name: str
    plan: Plan
    policy: str
    reason: str | None
    check: ValidationReport | None
    simulation: SimReport | None

    @property
    def feasible(self) -> bool:
        return self.plan.status == SolveStatus.FEASIBLE


def judged_key(plan: Plan) -> tuple:
    """What makes two members' plans the same plan (judged once)."""
    return (plan.status, plan.arena_bytes, plan.capacity_bytes, plan.placements,
            plan.residencies, plan.actions)


def judge(trace: Trace, name: str, result: BudgetResult, cost, judged: dict) -> MemberOutcome:
    """``result`` (member ``name``'s) simulated when feasible; ``judged`` holds what plans
    already seen got (a plan made twice is simulated once). The validator checks it only
    when the simulator cannot replay it (an invalid plan is then reported as such, a valid
    one's error raised): ``auto`` validates the plans it relies on
    (:class:`~.selection.Selection`)."""
    from cupool.sim.simulator import simulate

    plan = result.plan
    check = sim = None
    if result.feasible:
        key = judged_key(plan)
        if key not in judged:
            try:
                judged[key] = (None, simulate(trace, plan, cost, validate=False))
            except Exception:
                check = validate_plan(trace, plan)
                if check.valid:
                    raise
                judged[key] = (check, None)
        check, sim = judged[key]
    return MemberOutcome(name, plan, result.policy, result.reason, check, sim)


def worker_count(params: BudgetParams, trace: Trace, members: int) -> int:
    """Processes to plan ``members`` members in: ``params.workers`` (at most one per member),
    or when it is 0, one per CPU this process may use on a trace of at least
    :data:`PARALLEL_MIN_BUFFERS` buffers, else 1 (and 1 in a daemonic process, such as a
    ``multiprocessing.Pool`` worker, which may not start processes)."""
    if params.workers:
        return max(1, min(params.workers, members))
    if len(trace.buffers) < PARALLEL_MIN_BUFFERS or multiprocessing.current_process().daemon:
        return 1  # too small to pay for starting workers, or in a process that may have none
    usable = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
              else os.cpu_count() or 1)
    return max(1, min(usable, members))


Build = Callable[..., Sequence]
"""Lists the members: ``build(trace, budget_bytes, cost, params, cache)`` -> objects with
``name`` and ``run(started) -> BudgetResult``; a module-level function (it is pickled by
name)."""

_worker: dict = {}
"""A worker's state: the inputs, the function listing the members and, once listed, the
members and the plans already judged."""


def _start_worker(inputs_path: str) -> None:
    with open(inputs_path, "rb") as file:
        build, inputs = pickle.load(file)
    _worker.clear()
    _worker.update(build=build, inputs=inputs, members=None, judged={})


def _plan_member(index: int) -> MemberOutcome:
    inputs: PlanningInputs = _worker["inputs"]
    if _worker["members"] is None:
        _worker["members"] = _worker["build"](inputs.trace, inputs.budget_bytes, inputs.cost,
                                              inputs.params, OffsetCache())
    member = _worker["members"][index]
    with collector_paused():  # as in the calling process (plan_with_budget)
        return judge(inputs.trace, member.name, member.run(time.perf_counter()), inputs.cost,
                     _worker["judged"])


def serve(connection, inputs_path: str) -> None:
    """A worker process (:mod:`.worker_process`): plans each task it receives
    (:func:`_plan_task`) and sends back its outcomes, until it is killed or the parent's
    end of the connection closes."""
    _start_worker(inputs_path)
    while True:
        try:
            task = connection.recv()
        except EOFError:  # the parent has gone
            return
        out = _plan_task(task)
        try:
            connection.send(out)
        except (BrokenPipeError, ConnectionResetError):  # the parent has gone
            return
        except Exception as exc:  # an outcome or error that does not pickle
            error = SolverError(f"auto: the outcome of members {task} could not be sent "
                                f"back from their worker process ({exc})")
            connection.send([Raised(error, traceback.format_exc())] * len(task))


class WorkerStopped(Exception):
    """A worker process ended (was killed, ran out of memory, could not start) before it
    sent back the outcomes of the task it was planning."""


class Worker:
    """One worker process planning the tasks it is sent, one at a time: a fresh interpreter
    running :mod:`.worker_process` (:func:`serve`) over a socket, with this process's
    ``sys.path``. It imports cupool, never the program that started it, so a script
    without the ``if __name__ == "__main__":`` guard is not run again."""

    def __init__(self, inputs_path: str) -> None:
        if not sys.executable:  # an embedded interpreter may not know its own
            raise OSError("no Python executable to start a worker process with "
                          "(sys.executable is empty)")
        ours, theirs = socket.socketpair()
        path = os.pathsep.join(entry for entry in sys.path if entry)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cupool.planning.budget.worker_process",
                 str(theirs.fileno()), inputs_path], pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": path})
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._connection = Connection(ours.detach())

    def plan(self, task: list[int]) -> list[MemberOutcome | Raised]:
        """The outcomes of ``task``'s members, planned in this worker (:func:`_plan_task`);
        :class:`WorkerStopped` when the process ends first."""
        try:
            self._connection.send(task)
            return self._connection.recv()
        except (EOFError, OSError) as exc:
            try:
                code = self.process.wait(1.0)
            except subprocess.TimeoutExpired:
                code = None
            raise WorkerStopped(f"the worker process stopped before it finished (exit "
                                f"code {code})") from exc

    def stop(self) -> None:
        """End the process, killed whatever it does (planning a member the search no
        longer needs, waiting for a task, or still starting)."""
        self.process.terminate()
        self.process.wait()
        self._connection.close()


class WorkerTraceback(Exception):
    """The traceback, in the worker, of an exception a member raised there: the
    exception raised again in the parent has it as its cause."""


@dataclass(frozen=True)
class Raised:
    """What a task returns for a member that raised: the exception and its traceback in
    the worker (formatted)."""

    error: Exception
    traceback: str


def _plan_task(indices: list[int]) -> list[MemberOutcome | Raised]:
    """The members ``indices`` planned in turn: each one's outcome, or once one raises,
    what it raised, for it and for every member after it (none of those is read: the
    parent raises at the first member in order that raised)."""
    out: list[MemberOutcome | Raised] = []
    for index in indices:
        try:
            out.append(_plan_member(index))
        except Exception as exc:
            raised = Raised(exc, traceback.format_exc())
            return out + [raised] * (len(indices) - len(out))
    return out


def member_tasks(follows: Sequence[str | None], names: Sequence[str]) -> list[list[int]]:
    """The members grouped into tasks, in member order: a member whose ``follows`` names
    an earlier member joins that member's task, after it; every other member is a task of
    its own. A ``follows`` naming no earlier member is refused."""
    task_of: dict[str, list[int]] = {}
    tasks: list[list[int]] = []
    for index, (name, leader) in enumerate(zip(names, follows, strict=True)):
        if leader is None:
            task = [index]
            tasks.append(task)
        elif leader in task_of:
            task = task_of[leader]
            task.append(index)
        else:
            raise SolverError(f"auto: member {name!r} follows {leader!r}, which is not a "
                              f"member listed before it")
        task_of[name] = task
    return tasks


def _settle(task: list[int], futures: Sequence[Future],
            outcomes: list[MemberOutcome | Raised] | WorkerStopped) -> None:
    """Hand the ``outcomes`` of ``task`` (a worker's, or the :class:`WorkerStopped` of one
    that died planning it) to its members' ``futures``, those not cancelled meanwhile (the
    caller stopped early)."""
    if isinstance(outcomes, WorkerStopped):  # the worker died: the task's fate
        outcomes = [outcomes] * len(task)
    for index, outcome in zip(task, outcomes, strict=True):
        member = futures[index]
        try:
            if isinstance(outcome, BaseException):
                member.set_exception(outcome)
            elif isinstance(outcome, Raised):
                outcome.error.__cause__ = WorkerTraceback(outcome.traceback)
                member.set_exception(outcome.error)
            else:
                member.set_result(outcome)
        except InvalidStateError:  # cancelled by the caller
            pass


def outcomes_in_order(futures: Sequence[Future], names: Sequence[str],
                      meanwhile: Callable[[int], None] | None = None,
                      ) -> Iterator[MemberOutcome]:
    """The outcomes of ``futures`` (member ``names[i]``'s is ``futures[i]``), in member order,
    each as soon as it and those before it are done (``meanwhile(i)``, when given, is
    called before waiting for ``futures[i]``: work this process does until it is done). The
    first member in order that raised raises its exception again; one whose worker died
    raises a :class:`SolverError` naming it. Either way, and when the caller stops early
    (closes the generator), the futures not yet started are cancelled."""
    try:
        for position, (name, future) in enumerate(zip(names, futures, strict=True)):
            if meanwhile is not None:
                meanwhile(position)
            try:
                yield future.result()
            except WorkerStopped as exc:
                raise SolverError(f"auto: the worker process planning member {name!r} stopped "
                                  f"before it finished ({exc}); workers=1 plans every "
                                  f"member in the calling process") from exc
    except BaseException:
        for future in futures:
            future.cancel()
        raise


class TaskQueue:
    """The tasks (:func:`member_tasks`) not taken yet, handed out in member order to
    whichever process is free first; once closed, none."""

    def __init__(self, tasks: Sequence[list[int]]) -> None:
        self._tasks = list(tasks)
        self._next = 0
        self._lock = threading.Lock()

    def take(self) -> list[int] | None:
        """The next task, or ``None``: none left, or the queue is closed."""
        with self._lock:
            if self._next >= len(self._tasks):
                return None
            self._next += 1
            return self._tasks[self._next - 1]

    def close(self) -> None:
        """Hand out no more tasks."""
        with self._lock:
            self._next = len(self._tasks)


def _feed(worker: Worker, queue: TaskQueue, futures: Sequence[Future]) -> None:
    """Keep ``worker`` busy: each task taken from ``queue`` is planned there, and its
    outcomes handed to its members' ``futures``, until none is left or the worker stopped
    (the members of the task it was planning then fail with :class:`WorkerStopped`)."""
    while (task := queue.take()) is not None:
        try:
            outcomes = worker.plan(task)
        except WorkerStopped as exc:
            _settle(task, futures, exc)
            return
        _settle(task, futures, outcomes)


def plan_here(task: list[int], futures: Sequence[Future],
              local: Callable[[int], MemberOutcome]) -> None:
    """The members of ``task`` planned in this process (``local(i)``: member ``i``'s
    outcome), in turn, as :func:`_plan_task` plans them in a worker: once one raises, its
    error is every later member's of the task too."""
    for k, index in enumerate(task):
        try:
            outcome = local(index)
        except Exception as exc:
            for rest in task[k:]:
                futures[rest].set_exception(exc)
            return
        futures[index].set_result(outcome)


def plan_in_workers(build: Build, inputs: PlanningInputs, names: Sequence[str],
                    workers: int, follows: Sequence[str | None] | None = None,
                    start: int = 0, local: Callable[[int], MemberOutcome] | None = None,
                    first: int | None = None) -> Iterator[MemberOutcome]:
    """The members ``build`` lists (named ``names``, in that order) from ``start`` on, each
    planned and judged by one of ``workers`` processes: spawned ones, and this process too
    when ``local`` is given (``local(i)``: member ``i``'s outcome, planned here;
    ``workers - 1`` are spawned then). Whichever process is free first takes the next task
    in member order (:class:`TaskQueue`); a member that follows another (``follows[i]``:
    the name of the member member ``i`` follows, or ``None``) is planned right after it in
    its process (:func:`member_tasks`; one following a member before ``start`` starts its
    own task). With ``first`` (below ``start``; ``local`` then required), the members from
    ``first`` to ``start`` are planned here first, one by one, while the workers start on
    the others; those before ``first`` are planned elsewhere. The outcomes from ``first``
    (else ``start``) on come in member order (:func:`outcomes_in_order`, this process
    planning while the next outcome is not done). Once they have all come, or this
    generator is closed, no more tasks are handed out and the workers are killed: a member
    still planning is not waited for."""
    first = start if first is None else first
    if first < start and local is None:
        raise ValueError(f"members {first} to {start} are to be planned here: local is needed")
    tasks = [[index for index in task if index >= start] for task in
             member_tasks([None] * len(names) if follows is None else follows, names)]
    queue = TaskQueue([task for task in tasks if task])
    spawned = max(1, workers - 1 if local is not None else workers)
    futures: list[Future] = [Future() for _ in names]

    def meanwhile(position: int) -> None:
        index = first + position
        if index < start:  # one of this process's own, in order
            plan_here([index], futures, local)
            return
        while local is not None and not futures[index].done():
            task = queue.take()
            if task is None:
                return
            plan_here(task, futures, local)

    # the inputs go through a file that each worker reads when it starts: nothing it
    # needs waits in a pipe that a worker dying while starting would never read
    with tempfile.TemporaryDirectory(prefix="cupool-auto-") as folder:
        inputs_path = os.path.join(folder, "inputs.pickle")
        with open(inputs_path, "wb") as file:
            pickle.dump((build, inputs), file, protocol=pickle.HIGHEST_PROTOCOL)
        workers_started: list[Worker] = []
        feeders: list[threading.Thread] = []
        try:
            for k in range(spawned):
                try:
                    worker = Worker(inputs_path)
                except OSError:  # no process to be had: this one plans what is left
                    if local is None and not workers_started:
                        raise
                    break
                workers_started.append(worker)
                feeders.append(threading.Thread(target=_feed, args=(worker, queue, futures),
                                                name=f"cupool-auto-feed-{k}", daemon=True))
                feeders[-1].start()
            yield from outcomes_in_order(futures[first:], names[first:], meanwhile)
        finally:
            queue.close()
            for worker in workers_started:  # none is waited for
                worker.stop()
            for feeder in feeders:
                feeder.join()
