"""A user's own program, run repeatedly within a device-memory budget.

::

    import numpy as np, cupool

    def linear(x, w, out):                      # an op: writes into the output it is given
        xp = cupool.array_module(x)             # numpy on the emulated device, cupy on a GPU
        xp.matmul(x, w, out=out)

    with cupool.Session(budget="50%", device="auto") as session:
        w = session.register("w", np.ones((512, 512), np.float32))   # persistent state
        for step in range(100):
            with session.iteration() as it:                           # one iteration
                x = it.input(batch(step))                             # host data, uploaded
                y = it.op(linear, x, w, out=((64, 512), "float32"))   # declared op
                loss = it.fetch(y)                                    # copied back at the end
            print(loss.value.sum())
        final_w = session.read(w)

**What happens.** The ``with session.iteration()`` block *declares* the iteration: each
``it.op`` records the callable, its input tensors, the tensors it updates in place
(``updates=``) and its output specs, and returns handles (:class:`~cupool.program.tensors.
Tensor`) for the outputs, which cupool allocates. When the block ends the session runs the
whole iteration (an op's callable runs then, not when it is declared, so its values are
read with ``it.fetch`` and, for persistent state, ``session.read``):

1. the first iteration runs *passively*: with no plan, in an arena of the budget, evicting
   least-recently-used tensors to the host when one does not fit, each op's duration
   measured (wall time on the emulated device, CUDA events on a GPU); on a GPU the first
   iteration only warms up (CuPy compiles its kernels on first use, which its op times
   would hold) and the second is the one recorded (``warmup``);
2. the recorded program becomes a trace (one buffer per tensor) and the budget planner's
   ``auto`` policy plans it: swaps to pinned host memory, recomputation (re-running an
   op's own callable), offsets in one arena within the budget;
3. every later iteration runs from the plan on the swap engine (copies on their own
   streams, triggered at the plan's ops; a pool serving every tensor at its planned
   offset), and swap-ins that landed late have their triggers moved for the next one.

An iteration that differs from the recorded one (another op sequence, another shape) is
recorded again and re-planned (``on_change="record"``, the default) or refused with
:class:`~cupool.program.errors.ProgramChangedError` (``on_change="raise"``); it never runs
against a stale plan.

**Always a plan.** Only the recording iteration (and the warm-up before it on a GPU) runs
passively. A budget below one op's own working set (its inputs, updates and outputs) is
refused before anything runs with :class:`~cupool.program.errors.BudgetTooSmallError`,
naming the op; every other budget has a plan (at worst each op's working set brought in and
put back around it, the budget planner's last resort). Planning that fails there anyway is
a bug: the recording iteration's results are delivered and
:class:`~cupool.program.errors.PlanningFailedError` says why (``session.plan_reason`` too);
the session never runs later iterations passively in silence.

**Budget.** Bytes (``6 << 30``), a size (``"6GiB"``) or a percentage of the program's peak
(``"70%"``: of the most bytes its tensors hold at once, each rounded up to the pool's 512-byte
unit; resolved when the program is recorded), rounded down to whole 512-byte units (what
tensors can use of it). The pool's reservation never exceeds it (its limit is set to the
plan's arena, and the pool reserves whole units). Scratch arrays an op's body makes for itself
(``x @ w`` without ``out=``) are the array library's, outside the budget: on a GPU they come
from CuPy's default pool, so write into outputs where it matters.

**Devices and link.** ``device`` is ``"auto"`` (a GPU when CuPy sees one, else emulated),
``"emulated"`` (host memory; its copies paced like ``link``) or ``"cuda"``; ``link`` is a
cost-model preset (``"gen4"``, ``"gen5"``) or GB/s, what the planner and the simulator
assume. Each copy also has a fixed cost beyond its bytes (the copy stream noticing its
trigger, the compute stream noticing its end): a few microseconds on a GPU, tens on the
emulated device, whose streams are threads. With ``measure_link=True`` (the default) the
session measures it once when it opens (:func:`cupool.devices.calibrate.measure_copy_round_trip`,
about a millisecond) and plans with the larger of it and the link's own latency, so
prefetches lead by what the device really needs and the simulator predicts what it does;
``session.cost`` is the cost model used, ``session.link_round_trip`` the measurement.
Where the engine's overhead is measured too (``measure_overhead``, below), so is a swap-in
needed at once through the swap engine itself
(:func:`cupool.program.overhead.measure_swap_round_trip`: the copy stream's and the
handles' own work around the copy, some tens of milliseconds to measure), and the session
plans with the largest of the three (``session.swap_round_trip``).

**Engine overhead.** The passive iteration times each op's callable alone; a planned one
also pays the swap engine's own work on the compute stream (each op's begin and end
bookkeeping, the streams starting and the final synchronize). With ``measure_overhead``
(default: on for the emulated device, whose compute stream is a thread running that
bookkeeping in line with the ops; off on a GPU, where it runs batched and kernels run
asynchronously of the host) the session measures it once when it opens
(:func:`cupool.program.overhead.measure_engine_overhead`, a few tens of milliseconds) and
the recorded trace it plans with holds each op's measured duration plus the engine's cost
per op, and the first op also its cost per iteration: what a planned iteration really
takes, so the simulator predicts it. ``session.op_overhead`` is the measurement
(``None``: not measured), ``session.recording`` keeps the callables' own times.

**Contract of an op.** ``fn(*inputs, *updates, *outputs)``: it must write every element of
each output, may modify its ``updates`` in place, must not write into its inputs (caught:
:class:`~cupool.program.errors.UndeclaredWriteError`) and must not keep the arrays it is
given (they are views of memory the plan reuses). An op declared ``recompute=True`` (the
default) must be deterministic: the plan may run it again to produce its output instead of
keeping it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from cupool.core.units import parse_budget
from cupool.errors import CupoolError
from cupool.planning.budget import BudgetParams
from cupool.program.calls import OpCaller
from cupool.program.errors import (
    PlanningFailedError,
    ProgramChangedError,
    ProgramError,
    SessionClosedError,
    TensorScopeError,
)
from cupool.program.iteration import Iteration
from cupool.program.planner import plan_program
from cupool.program.program import Program, whole_units
from cupool.program.recorder import record
from cupool.program.runner import PlannedRunner, RunnerOptions, typical_op_us
from cupool.program.tensors import Spec, Tensor, to_host
from cupool.sim.cost import cost_model

ON_CHANGE = ("record", "raise")


@dataclass(frozen=True)
class StepReport:
    """One iteration as the session ran it.

    ``mode``: ``"passive"`` (no plan: the warm-up and the recording run) or
    ``"planned"``; ``recorded``: this iteration recorded the program; ``change``: why it
    was recorded again (``None``: it was not); ``wall_us``: from the end of the ``with``
    block to the results being ready, planning excluded (``plan_seconds``);
    ``iteration_us``: the iteration as the engine timed it (planned: from its start on the
    streams to their end; passive: the passive run's wall time); ``late_us``: buffer → µs
    its due op waited for a swap-in (the *late prefetches*); ``stall_us``: every wait of the
    compute stream; ``moved_triggers``: triggers the feedback moved for the next iteration;
    ``device_peak_bytes``: the most device bytes the session held for tensors during the
    iteration (the pool's reservation; passive: the arena bytes in use);
    ``budget_bytes``; ``off_plan``: tensors served away from their planned offset;
    ``ops_timed``: the engine timed each op of this planned iteration (its first three,
    then every fourth: a timing mark after each op costs the host a little)."""

    iteration: int
    mode: str
    recorded: bool
    change: str | None
    wall_us: float
    iteration_us: float
    late_us: dict
    stall_us: float
    moved_triggers: int
    device_peak_bytes: int
    budget_bytes: int
    off_plan: int = 0
    plan_seconds: float = 0.0
    ops_timed: bool = False

    @property
    def late_prefetches(self) -> int:
        return len(self.late_us)


class Session:
    """Runs a repeating program within ``budget`` on ``device`` (module docstring).

    ``link``: the cost model's link (preset or GB/s); ``on_change``: ``"record"`` or
    ``"raise"``; ``check_writes``: catch writes into undeclared tensors (default: on for
    the emulated device, where it is free; on a GPU it costs two reductions per input);
    ``feedback``: move late swap-ins' triggers between iterations; ``measure_link``: plan
    with the device's measured fixed cost per copy where it exceeds the link's latency
    (module docstring); ``measure_overhead``: add the engine's measured cost per op and
    per iteration to the recorded durations, and with ``measure_link`` price copies with
    an on-demand swap-in's round trip through the engine where it is larger (module
    docstring; default: on for the emulated device, off on a GPU); ``warmup``: how many
    first iterations run passively before the one that is recorded and planned from
    (default: 1 on a GPU, whose first iteration compiles kernels and starts libraries, so
    its op durations hold one-off costs up to seconds; 0 on the emulated device);
    ``plan_params``: the ``auto`` planner's :class:`~cupool.planning.budget.BudgetParams`
    (default: its defaults; e.g. ``workers=0`` plans a large program's members in parallel,
    ``schedule_evaluations=0`` skips the search over the chosen plan's schedule, which on a
    small program takes most of the planning time). A device object may be given instead
    of a kind (the caller keeps owning it). Use as a context manager or call
    :meth:`close`.

    State: ``reports`` (a :class:`StepReport` per iteration run), ``budget_bytes`` (once
    resolved), ``peak_bytes`` (the recorded program's peak), ``trace`` (the recorded trace,
    with measured op durations, the engine's overhead included), ``op_overhead`` (the
    :class:`~cupool.program.overhead.EngineOverhead` measured, or ``None``),
    ``swap_round_trip`` (the :class:`~cupool.program.overhead.SwapRoundTrip`, or ``None``),
    ``planned``
    (its :class:`~cupool.planning.PlannedTrace`, ``None`` without a plan), ``plan`` (the
    plan the next iteration runs, after feedback), ``plan_reason`` (why there is no plan:
    warming up, or the planning failure raised),
    ``recording`` (the last passive iteration's :class:`~cupool.program.recorder.Recording`:
    durations, every access, swaps), ``cost`` (the link's cost model), ``xp`` (the array
    module of the device's arrays).
    """

    def __init__(self, budget, *, device="auto", link="gen5", on_change: str = "record",
                 check_writes: bool | None = None, feedback: bool = True,
                 measure_link: bool = True, measure_overhead: bool | None = None,
                 warmup: int | None = None, plan_params: BudgetParams | None = None) -> None:
        if on_change not in ON_CHANGE:
            raise ProgramError(f"on_change (={on_change!r}) must be one of {ON_CHANGE}")
        if warmup is not None and (isinstance(warmup, bool) or not isinstance(warmup, int)
                                   or warmup < 0):
            raise ProgramError(f"warmup (={warmup!r}) must be an int >= 0 or None")
        if plan_params is not None and not isinstance(plan_params, BudgetParams):
            raise ProgramError(f"plan_params (={plan_params!r}) must be a "
                               f"cupool.planning.budget.BudgetParams or None")
        self._plan_params = plan_params
        self.cost = cost_model(link)
        self._budget = budget
        if not (isinstance(budget, str) and budget.strip().endswith("%")):
            parse_budget(budget, 1)  # a bad size raises now, not at the first iteration
        self.on_change, self.feedback = on_change, feedback
        self.device, self._owns_device = self._open(device)
        self.link_round_trip = None
        gpu = self.device.kind == "cuda"
        self._warmup = (1 if gpu else 0) if warmup is None else warmup
        self._caller = OpCaller(gpu, (not gpu) if check_writes is None else check_writes)
        self.xp = self.device.cupy if gpu else np
        self.reports: list[StepReport] = []
        self.budget_bytes: int | None = None
        self.peak_bytes: int | None = None
        self.trace = self.planned = self.recording = None
        self.plan_reason: str | None = None
        self._persistent: dict = {}  # key -> Tensor (registered, not released)
        self._parked: dict = {}      # key -> host value of a persistent tensor outside the engine
        self._next_key = 0
        self._recorded: Program | None = None
        self._runner: PlannedRunner | None = None
        self._open_iteration: Iteration | None = None
        self._count = 0
        self._closed = False
        overhead = (not gpu) if measure_overhead is None else measure_overhead
        self.swap_round_trip = self.op_overhead = None
        if measure_link:
            self._measure_link(through_engine=overhead)
        if overhead:
            self._measure_overhead()

    def _open(self, device):
        if not isinstance(device, str):
            return device, False
        from cupool.devices import open_device

        if device not in ("auto", "emulated", "cuda"):
            raise ProgramError(f"device (={device!r}) must be 'auto', 'emulated' or 'cuda'")
        if device == "cuda":
            return open_device("cuda"), True
        cost = self.cost
        return open_device(device, h2d_gbps=cost.h2d_gbps, d2h_gbps=cost.d2h_gbps,
                           latency_us=cost.latency_us), True

    def _measure_link(self, through_engine: bool) -> None:
        """Measure the device's fixed cost per copy (``through_engine``: also an on-demand
        swap-in's through the swap engine); plan with the largest."""
        from dataclasses import replace as replaced

        from cupool.devices.calibrate import measure_copy_round_trip
        from cupool.program.overhead import measure_swap_round_trip

        cost = self.cost
        try:
            measured = measure_copy_round_trip(self.device, cost.h2d_gbps)
            if through_engine:
                self.swap_round_trip = measure_swap_round_trip(
                    self.device, cost.h2d_gbps, lead_us=1000.0 + 2 * measured.latency_us)
        except BaseException:
            self.close()
            raise
        self.link_round_trip = measured
        latency = max(measured.latency_us, getattr(self.swap_round_trip, "latency_us", 0.0))
        if latency > cost.latency_us:
            self.cost = replaced(cost, latency_us=latency)

    def _measure_overhead(self) -> None:
        """Measure what the engine adds per op and per iteration (module docstring)."""
        from cupool.program.overhead import measure_engine_overhead

        try:
            self.op_overhead = measure_engine_overhead(Session, self.device)
        except BaseException:
            self.close()
            raise

    # -- persistent state ----------------------------------------------------------------
    def register(self, name: str, value) -> Tensor:
        """Register persistent state (weights, optimizer state) under ``name`` with initial
        ``value`` (a NumPy or CuPy array, copied); returns its handle. Ops read it as an
        input and modify it in place through ``updates=``."""
        self._check_open(f"register({name!r})")
        if any(t.name == name for t in self._persistent.values()):
            raise ProgramError(f"register({name!r}): a persistent tensor of that name is "
                               f"already registered")
        host = to_host(value)
        key = ("p", self._next_key)
        self._next_key += 1
        tensor = Tensor(self, key, Spec(tuple(host.shape), host.dtype, name), name, None)
        self._persistent[key] = tensor
        self._parked[key] = host
        return tensor

    def read(self, tensor: Tensor) -> np.ndarray:
        """The current value of persistent ``tensor`` (a NumPy copy), between iterations."""
        self._check_open(f"read({getattr(tensor, 'name', tensor)!r})")
        self.check_tensor(tensor, f"read({tensor.name!r})")
        if not tensor.persistent:
            raise TensorScopeError(tensor.name, f"read({tensor.name!r})",
                                   "is an op's output: fetch it inside its iteration "
                                   "(it.fetch)")
        if self._open_iteration is not None:
            raise ProgramError(f"read({tensor.name!r}) inside an iteration: persistent "
                               f"values are read between iterations")
        if tensor.key in self._parked:
            return np.array(self._parked[tensor.key], copy=True)
        return self._runner.read(tensor.key)

    def release(self, tensor: Tensor) -> None:
        """Forget persistent ``tensor``: later uses raise
        :class:`~cupool.program.errors.TensorReleasedError`; a program that used it is
        recorded again (it changed)."""
        self._check_open(f"release({getattr(tensor, 'name', tensor)!r})")
        self.check_tensor(tensor, f"release({tensor.name!r})")
        if not tensor.persistent:
            raise TensorScopeError(tensor.name, f"release({tensor.name!r})",
                                   "is an op's output; only persistent tensors are released")
        tensor.released = True
        if self._open_iteration is not None:
            self._open_iteration.forget(tensor.key)
        self._persistent.pop(tensor.key, None)
        self._parked.pop(tensor.key, None)

    def check_tensor(self, tensor, operation: str) -> None:
        """Raise the typed error for a ``tensor`` this session cannot use in ``operation``."""
        from cupool.program.errors import TensorReleasedError

        if not isinstance(tensor, Tensor):
            raise ProgramError(f"{operation}: {tensor!r} is not a cupool tensor (declare "
                               f"host data with it.input)")
        if tensor.owner is not self:
            raise TensorScopeError(tensor.name, operation, "belongs to another session")
        if tensor.released:
            raise TensorReleasedError(tensor.name, operation)

    # -- iterations -------------------------------------------------------------------
    def iteration(self) -> Iteration:
        """A context manager declaring one iteration (module docstring)."""
        self._check_open("iteration()")
        if self._open_iteration is not None:
            raise ProgramError(f"iteration(): iteration {self._open_iteration.number} is "
                               f"still being declared (iterations do not nest)")
        self._open_iteration = Iteration(self, self._count)
        self._count += 1  # numbers are never reused: an output names its iteration
        return self._open_iteration

    def _close_iteration(self, iteration: Iteration, program: Program | None) -> None:
        """Called by the iteration's ``__exit__``: run ``program`` (``None``: the block
        raised, nothing runs)."""
        self._open_iteration = None
        if program is None:
            return
        self._check_open(f"iteration {iteration.number}")
        began = time.perf_counter()
        change = None
        if self._recorded is not None:
            change = self._recorded.first_change(program)
            if change is not None and self.on_change == "raise":
                raise ProgramChangedError(iteration.number, change.op_index, change.op,
                                          change.tensor, change.detail)
        budget, peak = self.budget_bytes, self.peak_bytes
        if self._recorded is None or change is not None:  # else: the checked program again
            peak = program.peak_bytes()
            budget = parse_budget(self._budget, peak)
            program.check_budget(budget)  # its error quotes the budget as given
            budget = whole_units(budget)
        self.budget_bytes, self.peak_bytes = budget, peak
        if change is not None:
            self._retire()
        failure = None
        if self._runner is None:
            report, fetched, failure = self._record(iteration.number, program, budget, began)
            if change is not None:
                from dataclasses import replace

                tensor = f" (tensor {change.tensor!r})" if change.tensor else ""
                report = replace(report, change=f"op {change.op_index} {change.op!r}"
                                                f"{tensor}: {change.detail}")
        else:
            report, fetched = self._run_planned(iteration.number, program, budget, began)
        self.reports.append(report)
        iteration.deliver(fetched)
        if failure is not None:  # the iteration ran and its results stand: say why no plan
            raise failure

    def _record(self, number: int, program: Program, budget: int, began: float):
        self._caller.iteration = number
        recording = record(program, self.device, budget, self._parked, self._caller)
        wall = (time.perf_counter() - began) * 1e6
        self.recording = recording
        self._recorded = program
        durations = recording.durations_us
        if self.op_overhead is not None:
            durations = self.op_overhead.apply(durations)
        self.trace = program.to_trace(durations, name=f"program@{number}")
        planning = time.perf_counter()
        warming = self._warmup > 0
        failure = None
        if warming:  # its durations hold one-off costs: record the next one
            self._warmup -= 1
            self.plan_reason = (f"warming up: iteration {number} ran passively to compile "
                                f"kernels and start libraries; the next one is recorded")
        else:
            failure = self._plan(number, program)
        report = StepReport(number, "passive", not warming, None, wall, recording.wall_us, {},
                            0.0, 0, recording.peak_bytes, budget,
                            plan_seconds=0.0 if warming else time.perf_counter() - planning)
        return report, recording.fetched, failure

    def _plan(self, number: int, program: Program) -> PlanningFailedError | None:
        """Plan the recorded ``program`` and open its runner; the error to raise once the
        recording iteration's results are delivered where that fails (every op's working
        set fits the budget: the program checked it before running)."""
        self.planned = None
        try:
            planned = plan_program(self.trace, self.budget_bytes, self.cost,
                                   self._plan_params)
            reason = (None if planned.fits and planned.check.valid else
                      planned.reason or f"invalid plan: {planned.check.message}")
        except CupoolError as exc:
            reason = f"the planner raised {type(exc).__name__}: {exc}"
        if reason is None:
            try:
                self._runner = PlannedRunner(program, planned, self.device, self._caller,
                                             self._parked, RunnerOptions(self.cost, self.feedback))
            except CupoolError as exc:
                reason = f"the swap engine cannot run the plan: {type(exc).__name__}: {exc}"
        self.plan_reason = reason
        if reason is not None:
            return PlanningFailedError(number, self.budget_bytes, reason)
        for key in program.persistent_keys:  # the runner holds their values now
            self._parked.pop(key, None)
        self.planned = planned
        return None

    def _run_planned(self, number: int, program: Program, budget: int, began: float):
        run = self._runner.run(program, number)
        result = run.result
        report = StepReport(number, "planned", False, None, (time.perf_counter() - began) * 1e6,
                            result.iteration_us, dict(result.late_us), result.stall_us,
                            run.moved_triggers, run.reserved_peak_bytes, budget,
                            off_plan=result.off_plan, ops_timed=bool(result.op_us))
        return report, run.fetched

    def predict_step(self, trace=None):
        """The simulator's prediction for a planned step as the session runs it (a
        :class:`~cupool.sim.simulator.SimReport`; ``None`` before there is a plan): the plan
        the next step runs, for ``trace`` (default: the recorded trace, the passive step's op
        times plus the engine's measured cost; or :meth:`measured_trace`), on the session's
        cost model with the host's measured cost per op to enqueue
        (``op_overhead.host_per_op_us``) and per action of the plan
        (``swap_round_trip.host_per_action_us``; 0 where not measured). On the emulated
        device the streams start once the whole step is enqueued (``host_gated``); on a GPU
        each op as soon as it is. Compare its ``iteration_us`` with
        :class:`StepReport` ``wall_us`` (both from the ``with`` block's end)."""
        if self._runner is None or self.planned is None:
            return None
        from dataclasses import replace as replaced

        from cupool.sim.simulator import simulate

        host = self.op_overhead.host_per_op_us if self.op_overhead is not None else 0.0
        action = getattr(self.swap_round_trip, "host_per_action_us", 0.0)
        cost = replaced(self.cost, host_us_per_op=host, host_us_per_action=action,
                        host_gated=self.device.kind == "emulated")
        return simulate(trace or self.planned.trace, self.plan, cost, validate=False)

    def measured_trace(self, skip: int = 1):
        """The recorded trace with each op's duration what the planned iterations
        observed (after the first ``skip`` of them; the recomputes before an op are not its
        time: the simulator adds them itself), typically
        (:func:`~cupool.program.runner.typical_op_us`: per-op medians scaled to the median
        iteration's total), or ``None`` before there are any: what the simulator should be
        given when the one passive measurement was noisy."""
        runs = list(self._runner.op_us)[skip:] if self._runner is not None else []
        if not runs:
            return None
        from dataclasses import replace as replaced

        ops = tuple(replaced(op, duration_us=d) for op, d in zip(self.planned.trace.ops,
                                                                typical_op_us(runs),
                                                                strict=True))
        return replaced(self.planned.trace, ops=ops)

    @property
    def plan(self):
        """The plan the next iteration runs (``None`` without one)."""
        return self._runner.plan if self._runner is not None else None

    def _retire(self) -> None:
        """Take the persistent values out of the engine and drop it and the recording."""
        if self._runner is not None:
            self._parked.update(self._runner.park())
            self._runner.close()
            self._runner = None
        self._recorded = self.planned = None

    # -- lifetime -------------------------------------------------------------------------
    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise SessionClosedError(operation)

    @property
    def recorded_program(self) -> Program | None:
        """The program the plan was made for (``None`` before the recording): the next
        iteration's ops that equal its ops are shared with it."""
        return self._recorded

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Return every device resource (idempotent). Persistent values are gone after it:
        read them first."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._runner is not None:
                self._runner.close()
                self._runner = None
        finally:
            if self._owns_device:
                self.device.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


__all__ = ["ON_CHANGE", "Session", "StepReport"]
