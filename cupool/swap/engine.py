"""The swap engine: iterations of a trace under a swapping plan, on a device, driven at op
boundaries.

Every residency's device bytes come from a :class:`~cupool.allocator.pool.PlannedPool`
serving the plan's layout (:mod:`.layout`), every buffer is a
:class:`~cupool.swap.handles.TensorHandle` whose uses are marked, swaps go through the
:class:`~cupool.swap.copy_engine.CopyEngine` (D2H and H2D streams, events) and pinned
staging (what each copy waits for: :mod:`.plan_copies`), and the op work goes on a
compute stream through :class:`~cupool.swap.checks.StreamWork` (launched host functions on
the emulated device, CUDA kernels on a GPU). A client drives one iteration as::

    engine.begin_iteration(k)
    for i in range(trace.num_ops):
        frame = engine.before_op(i)   # pool, swap-ins, waits, the op's uses, recomputes
        body(engine, frame)           # the op itself: enqueue its work, spend its time
        engine.after_op(i)            # residencies ended, record done[i], swap-outs
    result = engine.end_iteration()   # synchronize, clean up, IterationResult

(:meth:`SwapEngine.run_iteration` is that loop, with the client's body: a program's ops, or
the replay's pattern instrument, :class:`~cupool.swap.patterns.PatternEngine`;
:meth:`SwapEngine.abort_iteration`
closes an iteration something raised in). For op ``i`` the engine enqueues, in this order
(nothing blocks the caller until the final ``synchronize``)::

    pool    free the blocks of residencies ending at i; malloc those starting at i
            (allocation k of the pool's iteration is served at its planned offset)
    H2D     swap-ins triggered at i: wait(done[i-1], copies out of the landing bytes,
            the buffer's own swap-out) ─ copy ─ record(in_b)
    compute timed waits for the swap-ins due at i (a wait is a *late prefetch*); timed
            waits for copies still reading bytes a buffer is produced or recomputed in at
            i ─ recomputes (the handle's ``recompute`` callable, then the producing op's
            duration) ─ the op body's work ─ [timing mark] ─ record(done[i])
    D2H     swap-outs after i: wait(done[i]) ─ copy ─ record(out_b)

Only kernels, copies, event records and stream waits go on the streams: no Python runs on
the device's timeline. The books (each handle's state, the uses an op takes, residencies
ending) are kept on the host, in program order, as the op is enqueued; stream order
already guarantees what they describe (a swap-in's handle is ``to_device`` from its
trigger and ``device`` once its due op waits for it). Waits and op times are read from
timing events after the final synchronize (:mod:`.timing`; ``[timing mark]``: in the
engine's first three iterations and every ``time_ops_every``-th after them). An op served
at its planned addresses is made once (:class:`~cupool.swap.steps.PlannedOp`), and a
resident one then runs flat in :meth:`SwapEngine.run_iteration`. ``done[i]`` is
recorded only after an op that something waits for (a swap-out after it, a swap-in
triggered at ``i + 1``). The engine only measures: a due op's wait over
:data:`LATE_THRESHOLD_WALL_US` is a late prefetch, reported per buffer; moving triggers for
the next iteration is the feedback's job
(:func:`~cupool.planning.budget.feedback.adjust_triggers`, then :meth:`SwapEngine.set_plan`).

**Time.** On the emulated device an op spends ``duration_us × time_scale`` of wall time
on the compute stream (:meth:`SwapEngine.spend`), measured on a clock that advances by
exactly that much per op and by the measured waits: an op ends at ``clock += duration``
(sleeping until then, launched on the compute stream); a wait whose end mark the stream
reached at ``t`` sets ``clock = max(clock, t)`` first. Work the
body enqueues runs inside the op's time; an op whose checks overrun it borrows from later
ops' slack instead of delaying the whole iteration (checking is instrumentation, not the
workload). The emulated device's stream threads share the interpreter (and its lock) with
the thread enqueuing the iteration, which a GPU's streams do not; so there the whole
iteration is enqueued behind a gate on the three streams, released by
:meth:`SwapEngine.end_iteration`, and timed from the release. On a GPU (whose launch
queues are bounded, so nothing is gated) ``spend`` is a spin kernel of the duration, and
the iteration is timed from the start of its enqueuing.

**Recompute.** A recompute action before op ``i`` calls the handle's ``recompute(out,
*inputs)`` with the arrays of the buffer's new residency and of its producer's inputs
(held for read: they must be resident): the callable the client gave for the buffer
(``recompute=``); a plan that recomputes a buffer without one is refused. A state a
nested recompute only passes through (an ephemeral residency) takes its block among the
recomputes and gives it back after the last one reading it; every recomputed residency
takes its block at its own recompute (:mod:`.recomputed`). The engine holds
no defaults of a replay's: the op body, the recompute callables and the first contents of
the persistent buffers' host copies (``boundary_slots``) are the client's.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from functools import partial

from cupool.core.vocabulary import Plan, SwapIn, SwapOut, Trace
from cupool.errors import CupoolError
from cupool.swap import recomputed
from cupool.swap.checks import StreamWork
from cupool.swap.copy_engine import CopyEngine
from cupool.swap.errors import EngineError, EngineStateError, StreamWorkError
from cupool.swap.handles import HOST, TensorHandle
from cupool.swap.iteration import (
    LATE_THRESHOLD_WALL_US,
    NO_FILLS,
    IterationResult,
    IterationState,
    OpFrame,
    RunningOp,
    order_problem,
)
from cupool.swap.layout import Layout, pool_layout, round_up
from cupool.swap.plan_copies import PlanCopies, resident_ptr
from cupool.swap.runs import ResidentRuns, compile_run
from cupool.swap.schedule import build_schedule
from cupool.swap.settings import EngineSettings
from cupool.swap.staging import ALIGNMENT, PinnedStaging
from cupool.swap.steps import (
    end_residencies,
    intents_of,
    op_steps,
    planned_op,
    reads_any,
    take_uses,
)
from cupool.swap.timing import StepTiming

OpBody = Callable[["SwapEngine", OpFrame], object]
"""``body(engine, frame)``: the work of op ``frame.op``, enqueued between ``before_op`` and
``after_op`` (for example :func:`~cupool.swap.patterns.pattern_body`)."""
PreparedCalls = Callable[[int, int, tuple], "list | None"]
"""``prepared(start, stop, frames)``: per op of a resident run, the call the body would
hand the stream work at its frame, or ``None`` (:meth:`SwapEngine.run_iteration`)."""


class SwapEngine(ResidentRuns):
    """Runs iterations of ``trace`` under swapping ``plan`` on ``device`` (``emulated`` or
    ``cuda``), serving its layout from a :class:`~cupool.allocator.pool.PlannedPool`.

    ``settings`` (:class:`EngineSettings`) scales sizes and times; ``op_us`` are the op
    durations to spend (trace µs; default: the trace's, 10 µs where it has none);
    ``recompute`` maps buffer ids to ``recompute(out, *inputs)`` callables, one for every
    buffer the plan recomputes (module docstring); ``layouts`` maps buffer ids to ``(dtype,
    shape)``, the arrays :meth:`array` and the handles give for them (default: flat
    ``uint8``; a program's op bodies get typed arrays). Call :meth:`close` (or use as a
    context manager) to return the pool's arena and the staging reservation.

    Public state: ``handles`` (buffer id → :class:`~cupool.swap.handles.TensorHandle`),
    ``sizes`` (scaled bytes per buffer), ``schedule`` (the plan indexed by op),
    ``work`` (the compute stream's :class:`~cupool.swap.checks.StreamWork`), ``pool``,
    ``staging``, ``copy_engine``, ``boundary_slots`` (host copies of persistent buffers the
    plan starts each iteration swapped out, kept across iterations), ``off_plan`` (blocks
    served away from their planned offset, all iterations), ``state`` (the running
    iteration's :class:`~cupool.swap.iteration.IterationState`, ``None`` between them).
    """

    def __init__(self, trace: Trace, plan: Plan, device, settings: EngineSettings | None = None,
                 *, op_us=None, recompute: dict | None = None,
                 layouts: dict | None = None) -> None:
        settings = settings or EngineSettings()
        try:
            from cupool.allocator.pool import PlannedPool
        except ImportError as exc:  # PlannedPool is a cupy.cuda.MemoryPool
            raise EngineError(f"the swap runtime serves every buffer from PlannedPool, a "
                              f"CuPy memory pool, and CuPy is not installed ({exc}): pip "
                              f"install 'cupool[cuda13]' (or 'cupool[cuda12]')") from None
        if getattr(device, "kind", "") not in ("emulated", "cuda"):
            raise EngineError(f"device (={device!r}): the executor runs on an 'emulated' or "
                              f"'cuda' device")
        if plan.is_static:
            raise EngineError("the executor needs a swapping plan (residencies and actions)")
        unknown = sorted(set(recompute or ()) - {b.id for b in trace.buffers})
        if unknown:
            raise EngineError(f"recompute callables for buffers {unknown}, which trace "
                              f"{trace.name!r} does not have")
        self.trace, self.device, self.settings = trace, device, settings
        self.size_scale, self.time_scale = settings.size_scale, settings.time_scale
        self.seed = settings.seed
        self.gpu = device.kind == "cuda"
        self.op_us = list(op_us) if op_us is not None else [
            10.0 if op.duration_us is None else float(op.duration_us) for op in trace.ops]
        layout = pool_layout(plan, trace, self.size_scale)
        self.sizes = layout.sizes
        self.pool = PlannedPool(device, name=f"replay {trace.name}")
        # what a failure while making the engine (pinned memory refused, a stream not
        # made) leaves would hold device and pinned memory forever: give it back
        with contextlib.ExitStack() as undo:
            undo.callback(self.pool.close)
            self.pool.install_plan(layout.pool_plan, layout.pool_trace)
            self.arena_bytes = layout.pool_plan.arena_bytes
            staging_bytes = settings.staging_bytes
            if staging_bytes is None:
                swapped = {a.buffer_id for a in plan.actions if isinstance(a, SwapOut)}
                staging_bytes = sum(round_up(max(1, self.sizes[b]), ALIGNMENT)
                                    for b in swapped)
            self.staging = PinnedStaging(device, staging_bytes)
            undo.callback(self.staging.close)
            self.copy_engine = CopyEngine(device, self.staging)
            self.compute = device.create_stream("compute")
            self.work = StreamWork(device, self.compute, self.seed)
            self.iteration = 0
            self.ops_enqueued = 0  # ops of the last iteration whose work was enqueued
            self.handles = {}
            for b in trace.buffers:
                given = (recompute or {}).get(b.id)
                dtype, shape = (layouts or {}).get(b.id, ("uint8", None))
                self.handles[b.id] = TensorHandle(b, given, dtype=dtype, shape=shape)
            self.off_plan = 0
            self.boundary_slots = {}
            self._arrays = {}  # (buffer, ptr) -> the handle's array there (made once)
            self._persistent_ready = set()  # persistent buffers with first contents written
            self._state: IterationState | None = None
            self._timing = StepTiming(device, self.work, trace.num_ops,
                                      settings.time_ops_every, self.gpu)
            self._copies = PlanCopies(device, self.copy_engine, self.sizes, self.handles,
                                      self.boundary_slots, self._timing)
            self._frames_arena = None  # the arena address the planned frames were made for
            self.schedule = None
            self.set_plan(plan, layout)
            self._setup_persistent()
            undo.pop_all()

    # -- plan ---------------------------------------------------------------------------
    @property
    def plan(self) -> Plan:
        """The plan the next iteration runs."""
        return self.schedule.plan

    @property
    def state(self) -> IterationState | None:
        """The running iteration's state (``None`` between iterations)."""
        return self._state

    def set_plan(self, plan: Plan, layout: Layout | None = None) -> None:
        """Use ``plan`` from the next iteration on (same trace, same arena size: the pool
        keeps its reservation, so persistent bytes stay where they are)."""
        if self._state is not None:
            raise EngineStateError(f"set_plan during iteration {self._state.iteration}: "
                                   f"a plan changes between iterations only")
        if layout is None:
            layout = pool_layout(plan, self.trace, self.size_scale)
            if layout.pool_plan.arena_bytes != self.arena_bytes:
                raise EngineError(f"plan needs {layout.pool_plan.arena_bytes} scaled arena "
                                  f"bytes, the pool's arena has {self.arena_bytes}")
            self.pool.install_plan(layout.pool_plan, layout.pool_trace)
        self.schedule = build_schedule(plan, self.trace, layout)
        self._home_at = {}  # op -> persistent buffers whose home residency starts there
        for b, start in self.schedule.home.items():
            self._home_at.setdefault(start, []).append(b)
        schedule = self.schedule
        missing = sorted({b for recomputed in schedule.recomputes.values() for b in recomputed
                          if self.handles[b].recompute is None})
        if missing:
            raise EngineError(f"the plan recomputes buffers {missing} and no recompute "
                              f"callable was given for them (recompute=)")
        self._steps = op_steps(schedule, self.trace)
        handles = self.handles
        self._temporary = tuple(handle for b, handle in handles.items()
                                if b not in schedule.persistent)  # reset every iteration
        self._op_uses = [tuple((handles[b], write) for b, write in step.intents)
                         for step in self._steps]  # per op: (handle, write) of its uses
        self._frames = [None] * self.trace.num_ops  # per op: its PlannedOp, once made
        self._runs = [None] * self.trace.num_ops  # per op: the ResidentRun from it, or False
        self._waited_ops = frozenset([*(i for i, outs in schedule.swap_outs.items() if outs),
                                      *(i - 1 for i, ins in schedule.swap_ins.items()
                                        if ins and i > 0)])

    def _setup_persistent(self) -> None:
        """Persistent buffers the plan starts the iteration with on the host, or drops, get
        a host copy, kept across iterations (``boundary_slots``), into which the client
        writes their first contents."""
        schedule = self.schedule
        for b, spans in schedule.residencies.items():
            offloaded = isinstance(schedule.entered.get((b, spans[0].start)), SwapIn)
            if b in schedule.persistent and (offloaded or b in schedule.dropped):
                level = schedule.out_levels[max(k for k in schedule.out_levels if k[0] == b)]
                slot = self.staging.acquire(max(1, self.sizes[b]), level)
                self.boundary_slots[b] = slot
                if offloaded:
                    self.handles[b].move(HOST)

    def array(self, b: int, ptr: int):
        """Buffer ``b``'s handle array at device address ``ptr`` (made once per address:
        CuPy's constructor costs microseconds). On the emulated device a NumPy view of the
        bytes, on a GPU a ``cupy.ndarray``: what an op body reads and writes in stream
        order."""
        key = (b, ptr)
        array = self._arrays.get(key)
        if array is None:
            array = self._arrays[key] = self.handles[b].array_at(self.device, ptr, self.sizes[b])
        return array

    # -- one iteration, op by op ---------------------------------------------------------
    def run_iteration(self, iteration: int, body: OpBody,
                      prepared: PreparedCalls | None = None) -> IterationResult:
        """Run iteration ``iteration``: every op between :meth:`before_op` and
        :meth:`after_op`, with ``body(engine, frame)`` as the op; where ``prepared``
        (:data:`PreparedCalls`) is given, each :class:`~cupool.swap.runs.ResidentRun` as
        one piece of host work. The iteration's first error (a refused use, a failed copy,
        a recompute raising) is raised after the streams finished; the pool and the
        staging area are clean then either way."""
        state = self.begin_iteration(iteration)
        try:
            frames, runs, handles = self._frames, self._runs, self.handles
            timing, n, i = bool(state.op_wall_s), self.trace.num_ops, 0
            while i < n:
                planned = frames[i]
                if planned is None or not planned.resident or not state.exact or (
                        state.pending and planned.written
                        and reads_any(state.pending, planned.written)):
                    frame = self.before_op(i)
                    body(self, frame)
                    self.after_op(i)
                    i += 1
                    continue
                if prepared is not None:
                    run = runs[i]
                    if run is None:
                        scan = compile_run(frames, i, handles)
                        run = scan.run or False
                        if scan.final:
                            runs[i] = run
                    if run and not (state.pending and reads_any(state.pending, run.written)):
                        calls = prepared(run.start, run.stop, run.frames)
                        if calls is not None:
                            i = self._run_resident(state, run, calls, body, timing)
                            continue
                if self._serve_planned(state, planned.allocs, planned.step.frees):
                    self._resident_op(state, i, planned, body, timing)
                else:  # its frame is elsewhere: the general path from here
                    frame = self._before_op_rest(state, i, planned.step)
                    body(self, frame)
                    self.after_op(i)
                i += 1
        except BaseException as exc:
            self.abort_iteration(exc)
            raise
        return self.end_iteration()

    def begin_iteration(self, iteration: int) -> IterationState:
        """Start iteration ``iteration``: reset the temporary buffers' handles and the
        checks, enter the pool's iteration; on the emulated device, close the gate."""
        if self._state is not None:
            raise EngineStateError(f"begin_iteration({iteration}): iteration "
                                   f"{self._state.iteration} is still running (end or "
                                   f"abort it first)")
        self.iteration, self.ops_enqueued = iteration, 0
        for handle in self._temporary:
            handle.reset()
        self.work.begin_iteration()
        device, n = self.device, self.trace.num_ops
        timing = self._timing.begin()
        done = [None] * n  # recorded where something waits for it (after_op)
        gate = None if self.gpu else device.hold_streams(  # emulated: enqueue first
            (self.compute, self.copy_engine.d2h_stream, self.copy_engine.h2d_stream))
        self.work.begin_batch()
        state = IterationState(iteration, done, gate, self.off_plan, self.time_scale,
                               op_wall_s=[0.0] * n if timing else [])
        state.started = state.clock = state.enqueue_began = time.perf_counter()
        try:
            state.pool_iteration.enter_context(self.pool.iteration())
        except BaseException:
            self._open_gate(state)
            self._quiesce()
            raise
        state.arena_ptr = self.pool.arena_ptr
        if state.arena_ptr != self._frames_arena:  # frames point into the arena as it is
            self._frames = [None] * n
            self._runs = [None] * n
            self._frames_arena = state.arena_ptr
        if timing:
            self._timing.mark_start()
        self._state = state
        return state

    def before_op(self, op: int) -> OpFrame:
        """Everything before op ``op``'s own work: its residencies' pool blocks, the
        swap-ins the plan triggers here, the waits for what it needs (swap-ins due here,
        copies still reading bytes it writes), its uses taken, the plan's recomputes.
        Returns the :class:`~cupool.swap.iteration.OpFrame` the op body works on."""
        state = self._state
        if state is None or state.running is not None or op != state.next_op:
            raise EngineStateError(self._order_problem("before_op", op))
        step, blocks = self._steps[op], state.blocks
        for key in step.frees:
            blocks.pop(key, None)  # the block dies: the pool frees it
        if step.allocs:
            self._serve(state, step.allocs)
        return self._before_op_rest(state, op, step)

    def _before_op_rest(self, state: IterationState, op: int, step) -> OpFrame:
        """:meth:`before_op` once the op's pool blocks are served."""
        ptrs = state.ptrs
        if step.swap_ins:
            self._copies.swap_ins(self.schedule, state, op)
        for action in step.due:
            b, trigger = action.buffer_id, action.trigger_op
            self._timing.wait(state, op, state.landed_at[(b, trigger)], b)
            ptr = ptrs[(b, trigger)]
            self.copy_engine.arrived(self.handles[b], self.array(b, ptr), ptr)
        first_fills = [b for b in self._home_at[op] if b not in self._persistent_ready] \
            if op in self._home_at else ()
        produced, written, frame = step.produced, step.written, step.frame
        uses = self._op_uses[op]
        if first_fills:  # the first iteration that serves these persistent buffers
            produced = (*produced, *first_fills)
            written = produced
            handles = self.handles
            uses = tuple((handles[b], write) for b, write in
                         intents_of(self.trace, step.uses, written, step.recomputed))
            frame = (*((b, op) for b in first_fills), *frame)
        if state.pending and written:
            self._copies.wait_for_readers(state, op, written)
        running = RunningOp(op, frozenset(first_fills) if first_fills else NO_FILLS)
        planned = self._frames[op] if state.exact and not first_fills else None
        arrivals = planned.arrivals if planned is not None else [
            (self.handles[b], self.array(b, ptrs[(b, op)]), ptrs[(b, op)]) for b in written]
        take_uses(state, running, arrivals, uses)
        if step.recomputed:
            recomputed.recompute_before(self, state, running, step)
        if planned is not None:
            state.running = running
            return planned.frame
        try:
            frame_ptrs = {b: ptrs[(b, start)] for b, start in frame}
        except KeyError:  # a use the plan holds in no residency served this iteration
            frame_ptrs = {b: resident_ptr(self.schedule, state, b, op) for b, _ in frame}
        frame = OpFrame(op, produced, running.first_fills, step.recomputed, step.uses,
                        frame_ptrs)
        if state.exact and not first_fills:  # the same every iteration from now
            self._frames[op] = planned_op(step, frame, arrivals, self._op_uses[op],
                                          self.schedule, state.arena_ptr,
                                          op in self._waited_ops, self.sizes)
        state.running = running
        return frame

    def _serve(self, state: IterationState, allocs) -> None:
        """Pool blocks for the residencies starting at an op (``allocs``: their keys, in
        the pool's order)."""
        schedule, base = self.schedule, state.arena_ptr
        self._serve_planned(state, [(key, schedule.block_sizes[key[0]],
                                     base + schedule.offsets[key]) for key in allocs], ())

    def after_op(self, op: int) -> None:
        """Everything after op ``op``'s work: residencies ending after it dropped or
        retired (on the host, in program order), ``done[op]`` recorded where a copy waits
        for it, the swap-outs the plan issues after it."""
        state = self._state
        running = state.running if state is not None else None
        if running is None or running.op != op:
            raise EngineStateError(self._order_problem("after_op", op))
        if running.first_fills:
            self._persistent_ready.update(running.first_fills)
        work, step = self.work, self._steps[op]
        if state.op_wall_s:  # this iteration times its ops: a mark at the op's end
            self._timing.mark_op(op)
        if step.ends:
            end_residencies(state, self.handles, step.ends)
        work.commit()
        if op in self._waited_ops:  # a swap-out after op, or a swap-in triggered at op + 1
            work.flush()
            self._copies.record_done(state, op, self.compute)
        if step.swap_outs:
            self._copies.swap_outs(self.schedule, state, op)
        state.running = None
        state.next_op = op + 1

    def end_iteration(self) -> IterationResult:
        """Finish the iteration after its last op: free the last blocks, leave the pool's
        iteration, release the gate, wait for every stream, read the timing events.
        Raises the iteration's first error (after the streams finished); the pool and
        staging are clean either way."""
        enqueued = time.perf_counter()
        state = self._state
        n = self.trace.num_ops
        if state is None or state.running is not None or state.next_op != n:
            raise EngineStateError(self._order_problem("end_iteration", n))
        self._state, self.ops_enqueued = None, n
        try:
            try:
                self.work.end_batch()
                for key in self.schedule.free_at[n]:
                    state.blocks.pop(key, None)
            finally:
                state.blocks.clear()  # stream-ordered frees: nothing else allocates meanwhile
                self._open_gate(state, here=True)
            state.pool_iteration.close()
            try:
                self._synchronize()
            except CupoolError as exc:
                raise StreamWorkError(state.iteration, str(exc)) from exc
        except BaseException as exc:
            state.pool_iteration.__exit__(type(exc), exc, exc.__traceback__)
            self._open_gate(state)
            self._quiesce()
            raise
        finally:
            state.release_host_slots(self.staging)
        wall = time.perf_counter() - state.started - state.setup_s
        if state.error is not None:
            raise state.error
        self._timing.read(state)
        checked, corrupt = self.work.results()
        ts = self.time_scale
        return IterationResult(
            iteration=state.iteration, wall_us=wall * 1e6, iteration_us=wall * 1e6 / ts,
            late_us=dict(state.late_us), stall_us=state.stall_us,
            op_us=tuple(w * 1e6 / ts for w in state.op_wall_s), bytes_checked=checked,
            corrupt_bytes=corrupt, off_plan=self.off_plan - state.off_plan_before,
            host_us=(enqueued - state.enqueue_began) * 1e6)

    def abort_iteration(self, error: BaseException | None = None) -> None:
        """Close an iteration that ``error`` interrupted between :meth:`begin_iteration`
        and :meth:`end_iteration`: free its blocks, leave the pool's iteration as failed,
        release the gate, wait for the streams, return its host slots. Does nothing
        between iterations."""
        state, self._state = self._state, None
        if state is None:
            return
        self.ops_enqueued = state.next_op  # their work is enqueued below, the rest dropped
        error = error or EngineStateError(f"iteration {state.iteration} aborted")
        try:
            self.work.end_batch(complete=False)  # the interrupted op's work is dropped
            state.blocks.clear()
            self._open_gate(state)
            state.pool_iteration.__exit__(type(error), error, error.__traceback__)
        finally:
            self._open_gate(state)
            self._quiesce()
            state.release_host_slots(self.staging)

    def spend(self, duration_us: float) -> None:
        """Enqueue ``duration_us`` trace µs of op time on the compute stream (module
        docstring): the emulated op clock, or a spin kernel on a GPU."""
        seconds = duration_us * self.time_scale * 1e-6
        if self.gpu:
            self.work.spin(seconds)
            return
        state = self._state
        waits, state.unclocked = state.unclocked, []
        self.work.run(partial(state.advance_clock, seconds, waits))

    # -- housekeeping -------------------------------------------------------------------
    def _order_problem(self, method: str, op: int) -> str:
        return order_problem(self._state, method, op, self.trace.num_ops)

    @staticmethod
    def _open_gate(state: IterationState, here: bool = False) -> None:
        """Release the emulated streams (once), starting the iteration's timing; ``here``:
        the work of a single held stream runs on this thread (the caller waits for it
        next)."""
        if state.gate is not None and not state.gate.released:
            state.started = state.clock = time.perf_counter()
            state.gate.release(here, state.started)

    def _synchronize(self) -> None:
        """Wait for the iteration's work: the whole GPU (CuPy may put an op's work on
        another stream), the engine's own three streams on the emulated device (the
        streams that other engines on it left behind are not this iteration's, and each
        costs a look)."""
        if self.gpu:
            self.device.synchronize()
            return
        for stream in (self.compute, self.copy_engine.d2h_stream, self.copy_engine.h2d_stream):
            stream.synchronize()

    def _quiesce(self) -> None:
        """Wait for every stream (errors were already reported or will be)."""
        with contextlib.suppress(CupoolError):
            self.device.synchronize()

    def close(self) -> None:
        """Return the pool's arena and the staging reservation (after the streams
        finished); an iteration still open is aborted first."""
        if self.device.closed:
            return
        self.abort_iteration()
        self.device.synchronize()
        for slot in self.boundary_slots.values():
            self.staging.release(slot)
        self.boundary_slots.clear()
        self._arrays = {}
        for h in self.handles.values():
            h.view = None
        self.staging.close()
        self.pool.close()

    def __enter__(self) -> SwapEngine:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


__all__ = ["LATE_THRESHOLD_WALL_US", "EngineSettings", "OpBody", "PreparedCalls", "SwapEngine"]
