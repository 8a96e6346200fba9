"""Resident runs: consecutive resident ops run as one piece of host work give the same
stream work, books and errors as the same ops run one by one."""

from __future__ import annotations

from functools import partial

import pytest

from cupool.allocator.fastpath import Served
from cupool.check import validate_swap_plan
from cupool.core.vocabulary import PERSISTENT, Buffer, Residency, SwapIn, SwapOut
from cupool.devices import open_device
from cupool.swap.engine import EngineSettings, SwapEngine
from cupool.swap.errors import CopyFailedError
from cupool.swap.runs import ResidentRun, compile_run
from tests.swap_cases import swap_plan, trace_of

OPS = 8


def _chain_trace():
    """W persistent, used by every op; T_i produced at op i and read at op i + 1."""
    buffers = [Buffer(0, 64, 0, OPS, tuple(range(OPS)), PERSISTENT)]
    buffers += [Buffer(1 + i, 32, i, min(i + 2, OPS), tuple(range(i, min(i + 2, OPS))))
                for i in range(OPS)]
    return trace_of([10.0] * OPS, *buffers)


def _resident_plan(trace):
    residencies = [Residency(0, 0, OPS, 0)]
    residencies += [Residency(b.id, b.start, b.end, 64 + 32 * (b.id % 2)) for b in
                    trace.buffers[1:]]
    plan = swap_plan(trace, residencies)
    report = validate_swap_plan(trace, plan)
    assert report.valid, report.message
    return plan


def _swapping_plan(trace):
    """W (read at ops 0, 1, 6, 7) swapped out after op 1 and back in at op 5 for op 6:
    ops 2 to 3 form a resident run between the copies (op 4 ends where the swap-in waits
    for it)."""
    residencies = [Residency(0, 0, 2, 0), Residency(0, 5, OPS, 0)]
    residencies += [Residency(b.id, b.start, b.end, 64 + 32 * (b.id % 2)) for b in
                    trace.buffers[1:]]
    w = Buffer(0, 64, 0, OPS, (0, 1, 6, 7), PERSISTENT)
    trace = trace_of([10.0] * OPS, w, *trace.buffers[1:])
    plan = swap_plan(trace, residencies, [SwapOut(0, 1), SwapIn(0, 5, 6)])
    report = validate_swap_plan(trace, plan)
    assert report.valid, report.message
    return trace, plan


class _Program:
    """An op body whose calls are made once per frame, and the ``prepared`` the engine asks
    for runs of them; ``log`` holds the ops in the order the stream ran them."""

    def __init__(self) -> None:
        self.log: list[int] = []
        self.made: dict = {}
        self.body_calls = 0

    def _call(self, op: int) -> None:
        self.log.append(op)

    def body(self, engine, frame) -> None:
        self.body_calls += 1
        call = self.made.get(frame.op)
        if call is None or call[0] is not frame:
            call = self.made[frame.op] = (frame, partial(self._call, frame.op))
        engine.work.run(call[1])

    def prepared(self, start, stop, frames):
        out = []
        for op, frame in zip(range(start, stop), frames, strict=True):
            made = self.made.get(op)
            out.append(made[1] if made is not None and made[0] is frame else None)
        return out


def _run(trace, plan, iterations, *, runs: bool):
    program = _Program()
    logs, books, body_calls = [], [], []
    with open_device("emulated", capacity="1MiB") as device, \
            SwapEngine(trace, plan, device, EngineSettings(time_ops_every=4),
                       recompute={}) as engine:
        for iteration in range(iterations):
            program.log.clear()
            result = engine.run_iteration(iteration, program.body,
                                          program.prepared if runs else None)
            assert result.off_plan == 0
            logs.append(list(program.log))
            body_calls.append(program.body_calls)
            books.append({b: (h.state, h.uses) for b, h in engine.handles.items()})
        compiled = {r.start: r for r in engine._runs if r}
    return logs, books, compiled, body_calls


def test_a_resident_step_runs_as_one_run_with_the_same_work_and_books():
    trace = _chain_trace()
    plan = _resident_plan(trace)
    logs, books, compiled, body_calls = _run(trace, plan, 6, runs=True)
    one_by_one = _run(trace, plan, 6, runs=False)
    assert logs == one_by_one[0] == [list(range(OPS))] * 6
    assert books == one_by_one[1]  # every handle's state and use count, every iteration
    assert (compiled[0].start, compiled[0].stop) == (0, OPS)
    # the body is called for every op of the first iteration and for op 0 of the second
    # (W's first fill keeps op 0 off the plan's made frames until then); from the third
    # iteration on the run hands the calls it was given over itself
    assert body_calls == [OPS, OPS + 1, OPS + 1, OPS + 1, OPS + 1, OPS + 1]
    assert one_by_one[3] == [OPS * k for k in range(1, 7)]


def test_runs_stop_at_the_copies_and_the_copies_stay_in_place():
    trace, plan = _swapping_plan(_chain_trace())
    logs, books, compiled, _ = _run(trace, plan, 6, runs=True)
    one_by_one = _run(trace, plan, 6, runs=False)
    assert logs == one_by_one[0] == [list(range(OPS))] * 6
    assert books == one_by_one[1]
    spans = [(r.start, r.stop) for r in compiled.values()]
    assert (2, 4) in spans  # between W's swap-out after op 1 and its swap-in at op 5
    assert all(not (r.start <= op < r.stop) for r in compiled.values() for op in (1, 4, 5, 6))


def test_a_failed_handle_is_reported_as_one_by_one():
    """W's copy failed before the step: the run's check sends its ops one by one, and the
    first use of W reports the failure, as without runs."""
    trace = _chain_trace()
    plan = _resident_plan(trace)
    for runs in (True, False):
        program = _Program()
        with open_device("emulated", capacity="1MiB") as device, \
                SwapEngine(trace, plan, device, recompute={}) as engine:
            for iteration in range(3):
                engine.run_iteration(iteration, program.body,
                                     program.prepared if runs else None)
            failure = CopyFailedError(0, "d2h", 64, "the link went away")
            engine.handles[0].fail(failure)
            with pytest.raises(CopyFailedError, match="the link went away"):
                engine.run_iteration(3, program.body, program.prepared if runs else None)
            assert engine.state is None and engine.pool.used_bytes() == 0
            assert engine.ops_enqueued == OPS


def test_a_block_off_the_plan_sends_the_rest_of_the_step_to_the_general_path():
    trace = _chain_trace()
    plan = _resident_plan(trace)
    program = _Program()
    with open_device("emulated", capacity="1MiB") as device, \
            SwapEngine(trace, plan, device, recompute={}) as engine:
        for iteration in range(3):
            engine.run_iteration(iteration, program.body, program.prepared)
        serve_ops, extra = engine.pool.serve_ops, []

        def shifted(blocks, ptrs, ops, transient):  # another block before the third op's
            first = serve_ops(blocks, ptrs, ops[:2], transient)
            extra.append(engine.pool.malloc(512))
            rest = serve_ops(blocks, ptrs, ops[2:], transient)
            return Served(first.ops + rest.ops, first.missed + rest.missed)

        engine.pool.serve_ops = shifted
        program.log.clear()
        result = engine.run_iteration(3, program.body, program.prepared)
        del engine.pool.serve_ops
        extra.clear()
        assert result.off_plan > 0 and program.log == list(range(OPS))
        assert engine.pool.used_bytes() == 0


def test_a_run_stops_where_a_residency_ended_in_it_would_begin_again():
    class _Planned:  # the fields compile_run reads
        def __init__(self, arrivals, uses, ends):
            self.resident, self.frame, self.allocs, self.written = True, object(), (), ()
            self.arrivals = tuple((h, None, 0) for h in arrivals)
            self.uses = tuple((h, False) for h in uses)
            self.step = type("S", (), {"ends": tuple((b, "dropped") for b in ends),
                                       "frees": ()})()

    handles = {0: "h0", 1: "h1"}
    frames = [_Planned(["h0"], ["h0"], []), _Planned([], ["h0"], [0]),
              _Planned(["h0"], ["h0"], []), _Planned([], ["h1"], [])]
    scan = compile_run(frames, 0, handles)
    assert isinstance(scan.run, ResidentRun) and (scan.run.start, scan.run.stop) == (0, 2)
    assert scan.final
    assert dict(scan.run.counts) == {"h0": 2} and scan.run.entering == ()
    frames[3] = None  # a frame not made yet: the run from op 2 is not final
    later = compile_run(frames, 2, handles)
    assert later.run is None and not later.final
