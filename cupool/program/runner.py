"""Planned iterations of a program: the swap engine runs the plan, the ops are the program's.

:class:`PlannedRunner` holds one :class:`~cupool.swap.engine.SwapEngine` for the recorded
program and its plan, and runs each later iteration of the same program through it, op by
op, with :meth:`~cupool.swap.engine.SwapEngine.run_iteration` (the one loop that runs a
user's planned iterations and ``cupool replay``'s)::

    engine.before_op(i)      residencies served by the pool at their planned offsets,
                             swap-ins triggered at i on the H2D stream, waits for those due,
                             recomputes before i (re-running the producing op's callable)
    body                     op i's callable over typed arrays of its tensors, in stream
                             order on the compute stream (the fetch op copies values out)
    engine.after_op(i)       swap-outs after i on the D2H stream

and, between iterations, hands the late prefetches the engine measured to the feedback
(:func:`~cupool.planning.budget.feedback.adjust_triggers`), whose adjusted plan runs next.
With the feedback on, the plan's swap-ins that the simulator predicts on time but within
the timer noise of their due op are triggered earlier before the first iteration, by the
same rule (where the budget, the addresses and the simulated iteration allow).

**Two kinds of program run here**, on the same path. A user's program (the session's):
its recorded trace and ``auto`` plan, the engine unscaled, ops that take the time their
callables take, recompute by re-running the producing op. A recorded trace turned into a
program (:mod:`cupool.program.synthetic`, what ``cupool replay`` runs): the trace's own
buffer ids and plan, sizes and times scaled (:class:`RunnerOptions` ``settings``), ops
whose callables fill and verify byte patterns and that then spend the trace's duration
(``op_us``: on the engine's op clock, emulated, or a spin kernel, GPU), recompute by the
program's own callables (``recompute``). The ops of both are called through the same
:class:`~cupool.program.calls.OpCaller`, and an op or a recompute that raises is an
:class:`~cupool.program.errors.OpFailedError` naming the op either way.

**Persistent tensors** enter the engine once: those the plan keeps on the device are
written into their home residency by op 0 of the first planned iteration (timed as setup,
as uploading weights is); those it keeps on the host across iterations have their host
copy (the engine's ``boundary_slots``) filled when the runner is made. :meth:`read` finds a
persistent tensor's current value wherever the plan keeps it, :meth:`park` all of them.

**A failure in the engine or the device** (a copy, a launch, a stream; not an op) can
leave persistent state the plan was moving partly updated: the runner gives its device
memory back and refuses later iterations and reads with
:class:`~cupool.program.errors.EngineFailedError` naming what failed (as does an interrupt
while the step is being enqueued; one while its streams finish leaves the state of the
whole step).

**An op that raises** does not abort the engine's iteration: the ops after it (and the
recomputes) are skipped, but every swap of the plan still runs, so each persistent tensor
is back where the plan keeps it between iterations; the error is raised once the streams
finished, and the next iteration runs normally. The updates made before the failing op
stay (as a run without cupool would keep them).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from operator import is_
from typing import NamedTuple

import numpy as np

from cupool.check import validate_swap_plan
from cupool.core.vocabulary import Trace
from cupool.errors import CupoolError
from cupool.planning.budget.feedback import adjust_triggers
from cupool.program.calls import OpCaller
from cupool.program.errors import EngineFailedError, OpFailedError, ProgramError
from cupool.program.program import FETCH, Program
from cupool.program.transfer import host_copy, upload
from cupool.sim.simulator import simulate
from cupool.swap.engine import LATE_THRESHOLD_WALL_US, EngineSettings, SwapEngine
from cupool.swap.iteration import IterationResult

OBSERVED_ITERATIONS = 64
"""How many iterations' observed op durations a runner keeps (the latest ones)."""


def typical_op_us(runs) -> tuple[float, ...]:
    """Typical op durations from several iterations' observed ones (``runs``: one sequence
    per iteration, µs per op): each op's median, scaled so that they add up to the median
    iteration's total. On a busy machine every iteration has a few slow ops, each time
    others: the medians alone drop all of them and add up to less than any iteration
    took, the scale puts back what a typical iteration loses to them."""
    runs = [tuple(run) for run in runs]
    if not runs:
        raise ProgramError("typical_op_us: no iteration's durations given")
    medians = [statistics.median(run[i] for run in runs) for i in range(len(runs[0]))]
    total = sum(medians)
    scale = statistics.median(sum(run) for run in runs) / total if total > 0 else 1.0
    return tuple(m * scale for m in medians)


@dataclass(frozen=True)
class RunnerOptions:
    """How a :class:`PlannedRunner` runs: ``cost`` (the link's cost model: the feedback's
    simulator); ``feedback`` (move late swap-ins' triggers between iterations);
    ``settings`` (the engine's scales and pattern seed); ``op_us`` (trace µs each op
    spends after its callable, per op; ``None``: none, the callable's own time is the
    op's); ``recompute`` (buffer id → ``recompute(out, *inputs)`` run instead of re-running
    the producing op; ``None``: re-run it)."""

    cost: object
    feedback: bool = True
    settings: EngineSettings = field(default_factory=EngineSettings)
    op_us: tuple | None = None
    recompute: dict | None = None


class _Prepared(NamedTuple):
    """Op ``op``'s call over the arrays of ``frame`` (the engine hands the same frame
    again while every block sits at its planned address)."""

    op: object
    frame: object
    call: object


class _RunCalls(NamedTuple):
    """The prepared calls handed for a resident run: for its ``frames`` and ``ops``, while
    no op's call was made again since (``made``: the runner's count of calls made)."""

    frames: tuple
    ops: tuple
    made: int
    calls: list


@dataclass(frozen=True)
class PlannedRun:
    """One planned iteration: the engine's ``result``, the ``fetched`` values (key → host
    array), the pool's high-water marks during it (``reserved_peak_bytes``: device bytes
    the pool held; ``allocated_peak_bytes``: of those, in use) and ``moved_triggers`` (swap-in
    triggers the feedback moved for the next iteration)."""

    result: IterationResult
    fetched: dict
    reserved_peak_bytes: int
    allocated_peak_bytes: int
    moved_triggers: int


class PlannedRunner:
    """Runs iterations of ``program`` under ``planned.plan`` (for ``planned.trace``: the
    program's trace with measured durations, or the recorded trace the program was made
    from) on ``device`` (module docstring). ``parked`` holds the persistent tensors'
    current values (key → host array); ``options`` (:class:`RunnerOptions`) the link's
    cost model, the feedback switch, the engine's scales, the ops' durations and the
    recompute callables."""

    def __init__(self, program: Program, planned, device, caller: OpCaller, parked: dict,
                 options: RunnerOptions) -> None:
        self.program, self.device, self.caller = program, device, caller
        self.cost, self.feedback = options.cost, options.feedback
        self.trace: Trace = planned.trace
        ids = program.buffer_ids
        layouts = {b: (program.specs[k].dtype, program.specs[k].shape) for k, b in ids.items()}
        recipes = [b for b in self.trace.buffers if b.recompute is not None]
        if options.recompute is None:
            recompute = {b.id: self._recompute(program.key_of(b.id), b.recompute.op)
                         for b in recipes}
        else:
            recompute = {b.id: self._recompute_with(options.recompute[b.id], b.recompute.op)
                         for b in recipes if b.id in options.recompute}
        n = self.trace.num_ops
        self._spends = options.op_us is not None
        self._guard_us = LATE_THRESHOLD_WALL_US / options.settings.time_scale
        plan = self._guarded(planned.plan) if self.feedback else planned.plan
        self.engine = SwapEngine(self.trace, plan, device, options.settings,
                                 op_us=list(options.op_us) if self._spends else [0.0] * n,
                                 recompute=recompute, layouts=layouts)
        try:
            self.engine.pool.set_limit(size=max(self.engine.arena_bytes, 1))
            self._first = {}  # buffer id -> value written by its first residency
            for key in program.persistent_keys:
                b = ids[key]
                slot = self.engine.boundary_slots.get(b)
                if slot is None or b in self.engine.schedule.home:  # its home residency
                    self._first[b] = parked[key]
                if slot is not None:  # and its host copy (offloaded, or read-only, dropped)
                    raw = np.require(parked[key], requirements="C").reshape(-1).view(np.uint8)
                    slot.array[:raw.size] = raw
        except BaseException:
            self.engine.close()
            raise
        self.broken: EngineFailedError | None = None
        """Set when an iteration failed in the engine (not in an op): the runner refuses
        to run or read from then on (:class:`EngineFailedError`)."""
        self._touched = tuple(tuple((k, ids[k]) for k in op.touched) for op in program.ops)
        """Per op: ``(tensor key, buffer id)`` of every tensor it touches (the same in
        every iteration of the program)."""
        self._prepared = [None] * n  # per op: its call at the addresses of the last frame
        self._made = 0  # calls made into _prepared so far
        self._run_calls: dict = {}  # a run's first op -> its _RunCalls
        self.current = program
        self.failed: ProgramError | None = None
        self.iteration = 0
        self.op_us = deque(maxlen=OBSERVED_ITERATIONS)  # observed op durations, per iteration

    @property
    def plan(self):
        """The plan the next iteration runs (the feedback may have moved triggers)."""
        return self.engine.plan

    # -- one iteration -------------------------------------------------------------------
    def run(self, program: Program, iteration: int) -> PlannedRun:
        """Run ``program`` (the same program as recorded: checked by the caller) as
        iteration ``iteration``. Raises the first op error, after the iteration closed."""
        if self.broken is not None:
            raise self.broken
        engine = self.engine
        self.current, self.failed, self.iteration = program, None, iteration
        self.caller.iteration = iteration
        self._fetched = {}
        engine.pool.reset_peak_stats()
        copies_failed = engine.copy_engine.stats()["failed.count"]
        try:
            result = engine.run_iteration(iteration, self._body, self._prepared_calls)
        except KeyboardInterrupt:
            if engine.ops_enqueued < len(program.ops):  # interrupted while enqueuing:
                # the plan ran in part
                self._break(iteration, "interrupted (KeyboardInterrupt) while the step was "
                                       "being enqueued")
            raise
        except CupoolError as exc:
            raise self._break(iteration, f"{type(exc).__name__}: {exc}") from exc
        if engine.copy_engine.stats()["failed.count"] > copies_failed:
            # a swap that failed where no later use of its buffer noticed it
            lost = [h.failure for h in engine.handles.values() if h.failure is not None]
            raise self._break(iteration, f"{type(lost[0]).__name__}: {lost[0]}" if lost
                              else "a swap copy failed")
        stats = engine.pool.memory_stats()
        self._first.clear()  # every home residency starts at op 0: all were written
        if self.failed is not None:
            raise self.failed
        if result.op_us:  # an iteration that timed its ops
            self.op_us.append(result.op_us)
        moved = self._feedback(result) if self.feedback else 0
        return PlannedRun(result, self._fetched, stats["reserved_bytes.peak"],
                          stats["allocated_bytes.peak"], moved)

    def _break(self, iteration: int, cause: str) -> EngineFailedError:
        """Refuse from now on (:attr:`broken`) and give the engine's device memory back."""
        self.broken = EngineFailedError(iteration, cause)
        with contextlib.suppress(CupoolError):
            self.engine.close()
        return self.broken

    def _body(self, engine, frame) -> None:
        index = frame.op
        op = self.current.ops[index]
        ptrs = frame.ptrs
        prepared = self._prepared[index]
        if prepared is not None and prepared.frame is frame and prepared.op is op:
            engine.work.run(prepared.call)  # the op at the same addresses: made once
        else:
            for b in frame.first_fills:
                value = self._first.get(b)
                if value is not None:
                    self._first_fill(engine, engine.array(b, ptrs[b]), value)
            array = engine.array
            arrays = {k: array(b, ptrs[b]) for k, b in self._touched[index]}
            if op.kind == FETCH:
                call = partial(self._fetch, op, arrays)
            else:
                call = self.caller.prepared(op, self.caller.arguments(op, arrays), arrays,
                                            self.current.names, self)
            if not frame.first_fills:
                self._prepared[index] = _Prepared(op, frame, call)
                self._made += 1
            engine.work.run(call)
        if self._spends:
            engine.spend(engine.op_us[frame.op])

    def _prepared_calls(self, start: int, stop: int, frames) -> list | None:
        """The engine's ``prepared``: per op from ``start`` to ``stop - 1``, the call made
        once for it at its frame in ``frames`` while the op is the one it was made for,
        else ``None`` (the engine then calls :meth:`_body` for it); ``None`` for all where
        the ops spend time of their own."""
        if self._spends:
            return None
        ops = self.current.ops[start:stop]
        cached = self._run_calls.get(start)
        if cached is not None and cached.frames is frames and cached.made == self._made \
                and all(map(is_, cached.ops, ops)):  # the run's calls of the last step
            return cached.calls
        prepared, calls = self._prepared, []
        for index, frame, op in zip(range(start, stop), frames, ops, strict=True):
            made = prepared[index]
            calls.append(made.call if made is not None and made.frame is frame
                         and made.op is op else None)
        self._run_calls[start] = _RunCalls(frames, ops, self._made, calls)
        return calls

    def _first_fill(self, engine, view, value) -> None:
        if engine.gpu:
            engine.work.run(partial(upload, view, value))
            return
        state = engine.state

        def first_fill() -> None:  # timed as setup, not as the iteration's work
            began = time.perf_counter()
            upload(view, value)
            spent = time.perf_counter() - began
            state.setup_s += spent
            state.clock += spent

        engine.work.run(first_fill)

    def _fetch(self, op, arrays) -> None:
        if self.failed is None:
            self._fetched = {k: host_copy(arrays[k]) for k in op.inputs}

    def _recompute(self, key, producer: int):
        """The engine's ``recompute(out, *inputs)`` for ``key``: the producing op of the
        running iteration, re-run over the recipe's input arrays (in the op's order)."""
        def recompute(out, *inputs) -> None:
            if self.failed is not None:
                return
            op = self.current.ops[producer]
            arrays = dict(zip(dict.fromkeys(op.inputs), inputs, strict=True))
            arrays[key] = out
            try:
                self.caller.call(op, arrays, self.current.names)
            except OpFailedError as exc:
                self.failed = OpFailedError(exc.op, exc.op_index, exc.iteration,
                                            f"{exc.cause} (re-run to recompute it)")
            except ProgramError as exc:
                self.failed = exc

        recompute.__name__ = f"recompute_{'_'.join(map(str, key))}"
        return recompute

    def _recompute_with(self, given, producer: int):
        """The engine's ``recompute(out, *inputs)``: ``given`` (the program's own callable
        for the buffer), its failure an :class:`OpFailedError` of the producing op."""
        def recompute(out, *inputs) -> None:
            if self.failed is not None:
                return
            try:
                given(out, *inputs)
            except Exception as exc:
                self.failed = OpFailedError(self.trace.ops[producer].name, producer,
                                            self.iteration,
                                            f"{exc!r} (re-run to recompute it)")

        recompute.__name__ = getattr(given, "__name__", "recompute")
        return recompute

    def _predict(self, candidate):
        return simulate(self.trace, candidate, self.cost, validate=False)

    def _guarded(self, plan):
        """``plan`` with the swap-ins the simulator predicts on time but landing less than
        the timer noise before their due op triggered earlier, where the budget, the
        addresses and the simulated iteration allow (the feedback's rule, before the first
        iteration: a copy planned to land just in time is late at the first jitter). The
        ones it predicts late stay as planned: the feedback moves those it measures."""
        return adjust_triggers(self.trace, plan, {}, self.cost.op_times(self.trace),
                               validate_swap_plan, self._predict,
                               guard_us=self._guard_us, near_misses_only=True).plan

    def _feedback(self, result: IterationResult) -> int:
        if not result.late_us:
            return 0
        op_us = result.op_us or (self.op_us[-1] if self.op_us else
                                 self.cost.op_times(self.trace))
        adjusted = adjust_triggers(self.trace, self.engine.plan, result.late_us, op_us,
                                   validate_swap_plan, self._predict, guard_us=self._guard_us)
        if adjusted.moves:
            self.engine.set_plan(adjusted.plan)
        return len(adjusted.moves)

    # -- persistent state ------------------------------------------------------------------
    def read(self, key) -> np.ndarray:
        """Persistent tensor ``key``'s current value (a host copy), between iterations."""
        if self.broken is not None:
            raise self.broken
        b = self.program.buffer_ids[key]
        spec = self.program.specs[key]
        if b in self._first:
            return np.array(self._first[b], copy=True)
        slot = self.engine.boundary_slots.get(b)
        if slot is not None:
            raw = np.array(slot.array[:spec.nbytes], copy=True)
            return raw.view(spec.dtype).reshape(spec.shape)
        self.device.synchronize()
        return host_copy(self.engine.handles[b].view)

    def park(self) -> dict:
        """Every persistent tensor's current value (key → host array)."""
        return {key: self.read(key) for key in self.program.persistent_keys}

    def close(self) -> None:
        self.engine.close()


__all__ = ["PlannedRun", "PlannedRunner", "RunnerOptions", "typical_op_us"]
