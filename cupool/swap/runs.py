"""Resident runs: consecutive resident ops of a planned iteration, run as one piece of
host work.

A *resident* op (:class:`~cupool.swap.steps.PlannedOp`) has nothing but pool blocks and
the handles' books around its call: no copy, wait, recompute or event. Consecutive
resident ops form a :class:`ResidentRun` when no buffer's residency ends in it before a
later op of it uses the buffer or begins it again. Within such a run the books do not
depend on the order of its ops, so per iteration the engine

1. serves the pool blocks of its ops in program order (as each op would, in one call of
   the pool's ``serve_ops``), checking each address against the plan,
2. checks once every handle the run uses before one of its ops makes the handle arrive
   (on the device, or being copied out for a read),
3. makes the arrivals, counts the uses, hands the ops' calls to the stream work in one
   call and ends the residencies that end in the run, in bulk.

Where a block lands off the plan or a handle check fails, the engine runs the run's ops
one by one instead, so that the op at fault reports as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass

from cupool.swap.handles import DEVICE, DROPPED, HOST, RETIRED, TO_HOST, UNBORN
from cupool.swap.iteration import NO_FILLS, RunningOp
from cupool.swap.steps import end_residencies, take_uses


@dataclass(frozen=True)
class ResidentRun:
    """Ops ``start`` to ``stop - 1``, each resident: ``frames`` (their op frames, what the
    op body's prepared calls were made for), ``pool`` (per op: ``(frees, allocs)`` as its
    :class:`~cupool.swap.steps.PlannedOp` has them), ``entering`` (``(handle, write)`` of
    the handles the run uses before any of its ops makes them arrive; ``write``: one of
    those uses writes), ``arrivals`` (``(handle, view, ptr)``), ``counts`` (``(handle,
    uses)``), ``ends`` (``(handle, state)`` of the residencies ending after an op of the
    run), ``written`` (the byte ranges of the arrivals) and ``transient`` (the keys of the
    blocks served and freed within the run: the pool makes no ``MemoryPointer`` for
    them)."""

    start: int
    stop: int
    frames: tuple
    pool: tuple
    entering: tuple
    arrivals: tuple
    counts: tuple
    ends: tuple
    written: tuple
    transient: frozenset


@dataclass(frozen=True)
class RunScan:
    """What :func:`compile_run` found from an op: the ``run`` (``None`` under two ops) and
    whether it is ``final`` (it stopped at an op that is not resident or at the end, not
    at an op whose planned frame is not made yet)."""

    run: ResidentRun | None
    final: bool


def compile_run(frames: list, start: int, handles: dict) -> RunScan:
    """The longest :class:`ResidentRun` from op ``start`` over ``frames`` (per op its
    :class:`~cupool.swap.steps.PlannedOp` or ``None``); ``handles``: buffer -> handle."""
    arrived, ended = set(), set()
    entering: dict = {}
    counts: dict = {}
    pool, run_frames, arrivals, ends, written = [], [], [], [], []
    final, stop = True, start
    for planned in frames[start:]:
        if planned is None:
            final = False
            break
        if not planned.resident:
            break
        op_ends = tuple((handles[b], where) for b, where in planned.step.ends)
        if any(h in ended for h, _, _ in planned.arrivals) or \
                any(h in ended for h, _ in planned.uses):
            break  # a residency ended in the run begins again, or a use follows its end
        for handle, _, _ in planned.arrivals:
            arrived.add(handle)
        for handle, write in planned.uses:
            if handle not in arrived:
                entering[handle] = entering.get(handle, False) or write
            counts[handle] = counts.get(handle, 0) + 1
        ended.update(h for h, _ in op_ends)
        run_frames.append(planned.frame)
        pool.append((planned.step.frees, planned.allocs))
        arrivals += planned.arrivals
        ends += op_ends
        written += planned.written
        stop += 1
    if stop - start < 2:
        return RunScan(None, final)
    return RunScan(ResidentRun(start, stop, tuple(run_frames), tuple(pool),
                               tuple(entering.items()), tuple(arrivals),
                               tuple(counts.items()), tuple(ends), tuple(written),
                               _transient(pool)), final)


def _transient(pool: list) -> frozenset:
    """The keys of the blocks that an op of the run serves and a later one frees."""
    served, transient = set(), set()
    for frees, allocs in pool:
        transient.update(key for key in frees if key in served)
        served.update(key for key, _, _ in allocs)
    return frozenset(transient)


def serve_planned(state, malloc, allocs, frees) -> int:
    """An op's pool work at its planned addresses (``frees``: the keys of the blocks that
    die before it, a pop each; ``allocs``: ``(key, bytes, planned address)``, served by
    ``malloc`` in order). Returns how many blocks landed elsewhere."""
    blocks, ptrs, missed = state.blocks, state.ptrs, 0
    for key in frees:
        blocks.pop(key, None)
    for key, nbytes, ptr in allocs:
        blocks[key] = malloc(nbytes)  # (no local keeps it: its free is a pop)
        served = ptrs[key] = blocks[key].ptr
        if served != ptr:
            missed += 1
    return missed


def handles_ready(run: ResidentRun) -> bool:
    """Whether every handle the run uses before making it arrive can be used as the run
    uses it (on the device; or being copied out, where the run only reads it)."""
    for handle, write in run.entering:
        state = handle.state
        if state is not DEVICE and (write or state is not TO_HOST):
            return False
    return True


def books_in_bulk(state, run: ResidentRun) -> None:
    """The arrivals and use counts of ``run`` on the handles' books (before its calls);
    an error is the iteration's first (``state.keep_first_error``). An arrival at an
    ``unborn`` or ``dropped`` handle with no use in progress is
    :meth:`~cupool.swap.handles.TensorHandle.arrive`'s own fast path, inlined."""
    for handle, view, ptr in run.arrivals:
        was = handle.state
        if (was is UNBORN or was is DROPPED) and not (handle._readers or handle._writers):
            handle.view, handle.ptr, handle.state = view, ptr, DEVICE
            continue
        try:
            handle.arrive(view, ptr)
        except Exception as exc:
            state.keep_first_error(exc)
    for handle, uses in run.counts:
        handle.uses += uses


def ends_in_bulk(state, run: ResidentRun) -> None:
    """The residencies ending in ``run`` leave the device (after its calls): dropped,
    retired, or, after a held swap-out, to the host copy."""
    for handle, where in run.ends:
        if handle.state is DEVICE and (where is RETIRED or where is DROPPED) \
                and not (handle._readers or handle._writers):  # leave()'s fast path
            handle.state, handle.view = where, None
            continue
        try:
            if where is HOST:
                handle.residency_ended()
            else:
                handle.leave(where)
        except Exception as exc:
            state.keep_first_error(exc)


class ResidentRuns:
    """The resident path of :class:`~cupool.swap.engine.SwapEngine` (a base class of it,
    working on its pool, books and stream work): a resident op run flat, and a
    :class:`ResidentRun` as one piece of host work."""

    def _serve_planned(self, state, allocs, frees) -> bool:
        """:func:`~cupool.swap.runs.serve_planned` for an op; ``False`` once the iteration
        is off the plan."""
        missed = serve_planned(state, self.pool.malloc, allocs, frees)
        if missed:
            self.off_plan += missed
            state.exact = False
        return state.exact

    def _resident_op(self, state, i: int, planned, body,
                     timing: bool) -> None:
        """A resident op whose blocks are served: its books, its call, its ends."""
        running = RunningOp(i, NO_FILLS)
        take_uses(state, running, planned.arrivals, planned.uses)
        state.running, state.next_op = running, i
        body(self, planned.frame)
        if timing:
            self._timing.mark_op(i)
        if planned.step.ends:
            end_residencies(state, self.handles, planned.step.ends)
        self.work.commit()
        state.running = None
        state.next_op = i + 1

    def _run_resident(self, state, run, calls, body,
                      timing: bool) -> int:
        """``run`` (a :class:`~cupool.swap.runs.ResidentRun`) with ``calls``, its ops'
        prepared calls; returns the next op. Its ops run one by one where a block lands
        off the plan (from that op on, the general path) or a handle check fails."""
        frames = self._frames
        served = self.pool.serve_ops(state.blocks, state.ptrs, run.pool, run.transient)
        if served.missed:  # ops before: one by one; the op off the plan: the general path
            self.off_plan += served.missed
            state.exact = False
            for i in range(run.start, run.start + served.ops):
                self._resident_op(state, i, frames[i], body, timing)
            op = run.start + served.ops
            frame = self._before_op_rest(state, op, self._steps[op])
            body(self, frame)
            self.after_op(op)
            return op + 1
        if not handles_ready(run):  # the op whose use is refused reports it
            for i in range(run.start, run.stop):
                self._resident_op(state, i, frames[i], body, timing)
            return run.stop
        books_in_bulk(state, run)
        work = self.work
        if timing and not self.gpu and None not in calls:  # each call, then its stamp
            stampers = self._timing.stampers[run.start + 1:run.stop + 1]
            work.run_all([c for pair in zip(calls, stampers, strict=True) for c in pair])
        elif timing or None in calls:
            mark = self._timing.mark_op
            for i, call in enumerate(calls, run.start):
                if call is None:
                    body(self, frames[i].frame)
                else:
                    work.run(call)
                if timing:
                    mark(i)
        else:
            work.run_all(calls)
        ends_in_bulk(state, run)
        work.commit()
        state.next_op = run.stop
        return run.stop


__all__ = [
    "ResidentRun",
    "ResidentRuns",
    "RunScan",
    "books_in_bulk",
    "compile_run",
    "ends_in_bulk",
    "handles_ready",
    "serve_planned",
]
