"""Replay runs through the session's runner: a trace becomes a synthetic program (one
declared op per trace op, the trace's own buffer ids), and what a user's program gets on
failure, a replayed trace gets too: an op or a recompute that raises is the session's
OpFailedError, and the iteration after it runs byte exact."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest

import cupool.program.synthetic as synthetic
from cupool.app.replay import ReplaySettings, open_paced_device, replay
from cupool.program import OpFailedError
from cupool.program.calls import OpCaller
from cupool.program.errors import ReplayError
from cupool.program.runner import PlannedRunner, RunnerOptions
from cupool.program.synthetic import synthetic_program
from cupool.sim.cost import cost_model
from cupool.swap.engine import EngineSettings
from tests.swap_cases import six_op_recompute_plan, six_op_swap_plan, six_op_trace

UNSCALED = ReplaySettings(iterations=2, size_scale=1, time_scale=1.0, feedback=False)


def test_a_trace_becomes_a_program_over_its_own_buffers():
    trace = six_op_trace()
    made = synthetic_program(trace, six_op_swap_plan(trace), [10.0] * 6)
    program = made.program
    assert [op.name for op in program.ops] == [op.name for op in trace.ops]
    assert sorted(program.buffer_ids.values()) == [0, 1, 2]
    ids = program.buffer_ids
    # op 0 produces A (buffer 1) and reads W (persistent, uploaded by the runner first)
    assert [ids[k] for k in program.ops[0].output_keys] == [1]
    assert [ids[k] for k in program.ops[0].inputs] == [0]
    assert [ids[k] for k in program.ops[1].output_keys] == [2]
    assert [ids[k] for k in program.ops[2].inputs] == [2]
    assert [ids[k] for k in program.ops[4].inputs] == [1]
    assert program.persistent_keys == (("p", 0),)
    assert made.parked[("p", 0)].nbytes == 8
    assert made.op_us == (10.0,) * 6
    assert list(made.recompute) == [1]  # A has a recipe: its pattern, written again


def test_sizes_are_the_engines_scaled_sizes():
    trace = six_op_trace()
    made = synthetic_program(trace, six_op_swap_plan(trace), [10.0] * 6, size_scale=8)
    sizes = {made.program.buffer_ids[k]: spec.nbytes for k, spec in made.program.specs.items()}
    assert sizes == {0: 1, 1: 2, 2: 2}


def test_a_recompute_callable_for_an_unknown_buffer_is_refused():
    trace = six_op_trace()
    with pytest.raises(ReplayError, match=r"buffers \[7\]"):
        synthetic_program(trace, six_op_swap_plan(trace), [10.0] * 6,
                          recompute={7: lambda out, *inputs: None})


def _failing(op_reads: tuple, monkeypatch, times: int | None = None):
    """Make the synthetic op that reads exactly ``op_reads`` raise (``times`` times, or
    always)."""
    made = synthetic.pattern_op
    left = [times]

    def pattern_op(checks, reads, writes):
        body = made(checks, reads, writes)
        if reads != op_reads:
            return body

        def failing(*arrays):
            if left[0] is None or left[0] > 0:
                if left[0] is not None:
                    left[0] -= 1
                raise RuntimeError("the op body broke")
            body(*arrays)

        return failing

    monkeypatch.setattr(synthetic, "pattern_op", pattern_op)


def test_a_failing_op_of_a_replayed_trace_is_the_sessions_op_failed_error(monkeypatch):
    trace = six_op_trace()
    _failing((2,), monkeypatch)  # op 2 reads B (buffer 2) and nothing else
    with open_paced_device("gen5", 1, 1.0) as device:
        with pytest.raises(OpFailedError) as failed:
            replay(trace, 40, UNSCALED, device=device, plan=six_op_swap_plan(trace),
                   plan_trace=trace)
        monkeypatch.undo()
        result = replay(trace, 40, UNSCALED, device=device, plan=six_op_swap_plan(trace),
                        plan_trace=trace)  # the device is left clean: it replays again
    error = failed.value
    assert (error.op, error.op_index, error.iteration) == ("op2", 2, 0)
    assert "the op body broke" in str(error)
    assert pickle.loads(pickle.dumps(error)).op_index == 2
    assert result["corrupt_bytes"] == 0 and result["bytes_checked"] > 0


def test_a_raising_recompute_names_the_producing_op():
    trace = six_op_trace()

    def broken(out, *inputs):
        raise ValueError("no")

    with pytest.raises(OpFailedError) as failed:
        replay(trace, 40, UNSCALED, plan=six_op_recompute_plan(trace), plan_trace=trace,
               recompute={1: broken})
    assert (failed.value.op, failed.value.op_index) == ("op0", 0)
    assert "re-run to recompute it" in str(failed.value)


def test_after_a_failed_iteration_the_next_one_runs_byte_exact(monkeypatch):
    """The session's rule, on a replayed trace: the ops after the failing one are skipped,
    every swap still runs, and the next iteration is correct."""
    trace = six_op_trace()
    plan = six_op_swap_plan(trace)
    _failing((2,), monkeypatch, times=1)
    made = synthetic_program(trace, plan, [10.0] * 6)
    options = RunnerOptions(cost_model("gen5"), False, EngineSettings(), op_us=made.op_us,
                            recompute=made.recompute)
    planned = SimpleNamespace(plan=plan, trace=trace)
    with open_paced_device("gen5", 1, 1.0) as device:
        runner = PlannedRunner(made.program, planned, device, OpCaller(False, False),
                               made.parked, options)
        try:
            made.checks.bind(runner.engine)
            with pytest.raises(OpFailedError):
                runner.run(made.program, 0)
            made.checks.take()
            runner.run(made.program, 1)
            counts = made.checks.take()
            staging = runner.engine.staging.stats()
        finally:
            runner.close()
    # op 0 verifies W (8 B), ops 2 and 4 verify B and A (16 B each), op 5 verifies W again
    assert (counts.bytes_checked, counts.corrupt_bytes) == (8 + 16 + 16 + 8, 0)
    assert staging["staging.live_slots.current"] == 0


@pytest.mark.parametrize("make_plan", [six_op_swap_plan, six_op_recompute_plan])
def test_replay_checks_every_use_as_the_independent_walker_does(make_plan):
    """Every use of every buffer is verified, the persistent W's first use (right after
    its upload) included: 48 bytes an iteration, the count the stress walker gets for the
    same plans."""
    trace = six_op_trace()
    settings = ReplaySettings(iterations=3, size_scale=1, time_scale=1.0)
    result = replay(trace, 40, settings, plan=make_plan(trace), plan_trace=trace)
    assert (result["bytes_checked"], result["corrupt_bytes"]) == (3 * 48, 0)
