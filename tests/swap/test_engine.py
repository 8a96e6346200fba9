"""The swap engine: iterations byte exact with typed arrays, recompute callables called in
stream order (a wrong one counted as corruption), the pool and staging clean after an
error, and the op-boundary API driven directly with an op body of the test's own."""

from __future__ import annotations

import pytest

from cupool.check import validate_swap_plan
from cupool.core.vocabulary import (
    PERSISTENT,
    Buffer,
    Recompute,
    RecomputeAction,
    Residency,
    SwapIn,
    SwapOut,
)
from cupool.devices import open_device
from cupool.swap.engine import EngineSettings, SwapEngine
from cupool.swap.errors import EngineError, EngineStateError
from cupool.swap.handles import DEVICE, RETIRED
from cupool.swap.patterns import PatternEngine, pattern_body
from tests.swap_cases import (
    resnet_capuchin_plan,
    six_op_recompute_plan,
    six_op_swap_plan,
    six_op_trace,
    swap_plan,
    trace_of,
)

SIZE_SCALE = 4096


_planned = resnet_capuchin_plan


def _engine(device, **options):
    _trace, plan, planned = _planned()
    return PatternEngine(planned, plan, device, EngineSettings(size_scale=SIZE_SCALE), **options)


def _recomputed(plan):
    return sorted({a.buffer_id for a in plan.actions if isinstance(a, RecomputeAction)})


def test_an_iteration_with_cupy_arrays_is_byte_exact_and_hands_out_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    with open_device("emulated", cupy_arrays=True) as device, _engine(device) as engine:
        result = engine.run_iteration(0)
        resident = [h for h in engine.handles.values() if h.state == DEVICE]
        assert resident
        for handle in resident:
            with handle.use() as view:
                assert isinstance(view, cupy.ndarray) and view.data.ptr == handle.ptr
    assert result.corrupt_bytes == 0 and result.off_plan == 0


def test_recompute_actions_call_the_handles_callable_and_verify_byte_exact():
    _trace, plan, planned = _planned()
    actions = [a for a in plan.actions if isinstance(a, RecomputeAction)]
    assert actions, "the capuchin plan recomputes nothing"
    with open_device("emulated") as device, _engine(device) as engine:
        calls = []
        for b in _recomputed(plan):
            handle = engine.handles[b]

            def counting(out, *inputs, _b=b, _default=handle.recompute):
                expected = planned.buffer(_b).recompute.inputs
                calls.append((_b, out.ctypes.data, len(inputs) == len(expected)))
                _default(out, *inputs)

            handle.recompute = counting
        result = engine.run_iteration(0)
    assert result.corrupt_bytes == 0 and result.bytes_checked > 0
    assert sorted(b for b, _ptr, _ok in calls) == sorted(a.buffer_id for a in actions)
    assert all(ok for _b, _ptr, ok in calls)


def test_a_wrong_recompute_callable_is_counted_as_corruption():
    _trace, plan, _planned_trace = _planned()
    wrong = {b: (lambda out, *inputs: out.fill(0)) for b in _recomputed(plan)}
    with open_device("emulated") as device, _engine(device, recompute=wrong) as engine:
        result = engine.run_iteration(0)
    assert result.corrupt_bytes > 0


def test_an_error_inside_a_use_leaves_the_pool_and_staging_clean():
    _trace, plan, _planned_trace = _planned()

    def broken(out, *inputs):
        raise RuntimeError("recompute failed inside its use")

    first = _recomputed(plan)[0]
    with open_device("emulated") as device, \
            _engine(device, recompute={first: broken}) as engine:
        with pytest.raises(RuntimeError, match="recompute failed inside its use"):
            engine.run_iteration(0)
        assert engine.pool.used_bytes() == 0
        assert engine.pool.memory_stats()["live_blocks.current"] == 0
        live = engine.staging.stats()["staging.live_slots.current"]
        assert live == len(engine.boundary_slots)  # only the persistent host copies
        assert all(h._readers == 0 and h._writers == 0 for h in engine.handles.values())


# -- the op-boundary API, driven directly --------------------------------------------------
VALUES = {0: 3, 1: 7, 2: 9}
"""What the test's op body writes into each buffer of the six-op trace (W, A, B)."""


def _recompute_a_from_w(out, w) -> None:
    out[:] = w[0] + 4  # A's value (7) from W's (3)


def _writing_and_reading_body(reads: list):
    """An op body of the test's own: in stream order, each op writes ``VALUES[b]`` into
    every buffer ``b`` it produces and logs ``(op, b, values)`` for every other buffer it
    uses, after checking the engine holds each of them on the device (the handles' books
    are kept on the host, in program order, as the op is enqueued)."""

    def body(engine, frame) -> None:
        arrays = {b: engine.array(b, ptr) for b, ptr in frame.ptrs.items()}
        handles = engine.handles
        assert all(handles[b].state == DEVICE for b in arrays)

        def compute() -> None:
            for b in frame.produced:
                arrays[b][:] = VALUES[b]
            for b in frame.uses:
                if b not in frame.produced:
                    reads.append((frame.op, b, sorted(set(arrays[b].tolist()))))

        engine.work.run(compute)
        engine.spend(engine.op_us[frame.op])

    return body


@pytest.mark.parametrize("make_plan, recompute", [(six_op_swap_plan, None),
                                                  (six_op_recompute_plan,
                                                   {1: _recompute_a_from_w})],
                         ids=["swap", "recompute"])
def test_the_op_boundaries_run_an_op_body_of_the_callers_own(make_plan, recompute):
    """Op by op with the body above: A (7) comes back for op 4 — swapped out after op 0 and
    in again, or dropped and recomputed from W — though B (9) took its bytes meanwhile; W
    (3) is written once, in the first iteration, and keeps its contents in the next."""
    trace = six_op_trace()
    plan = make_plan(trace)
    with open_device("emulated") as device, \
            PatternEngine(trace, plan, device, recompute=recompute) as engine:
        for iteration in range(2):
            reads = []
            body = _writing_and_reading_body(reads)
            engine.begin_iteration(iteration)
            for i in range(trace.num_ops):
                frame = engine.before_op(i)
                assert frame.op == i
                body(engine, frame)
                engine.after_op(i)
            result = engine.end_iteration()
            first = [(0, 0, [3])] if iteration else []  # W is produced in the first iteration
            assert reads == [*first, (2, 2, [9]), (4, 1, [7]), (5, 0, [3])]
            assert result.iteration == iteration and result.off_plan == 0
            assert (result.bytes_checked, result.corrupt_bytes) == (0, 0)  # no pattern checks
            assert len(result.op_us) == trace.num_ops
            assert set(result.as_dict()) == {"wall_us", "iteration_us", "late", "stall_us",
                                             "op_us", "bytes_checked", "corrupt_bytes",
                                             "off_plan"}
        assert engine.state is None and engine.pool.used_bytes() == 0
        assert engine.staging.is_clean()


def test_op_boundaries_out_of_order_raise_and_an_abort_leaves_the_engine_usable():
    trace = six_op_trace()
    plan = six_op_swap_plan(trace)
    with open_device("emulated") as device, PatternEngine(trace, plan, device) as engine:
        with pytest.raises(EngineStateError, match=r"before_op\(0\): no iteration is running"):
            engine.before_op(0)
        engine.begin_iteration(0)
        with pytest.raises(EngineStateError,
                           match=r"before_op\(1\): iteration 0 expects before_op\(0\) next"):
            engine.before_op(1)
        with pytest.raises(EngineStateError, match=r"after_op\(0\): iteration 0 expects"):
            engine.after_op(0)
        engine.before_op(0)
        with pytest.raises(EngineStateError, match=r"op 0 is still running"):
            engine.end_iteration()
        with pytest.raises(EngineStateError, match=r"begin_iteration\(1\): iteration 0 is "
                                                   r"still running"):
            engine.begin_iteration(1)
        with pytest.raises(EngineStateError, match="a plan changes between iterations only"):
            engine.set_plan(plan)
        engine.abort_iteration(RuntimeError("the op body failed"))
        assert engine.state is None and engine.pool.used_bytes() == 0
        assert engine.pool.memory_stats()["live_blocks.current"] == 0

        def failing_body(engine, frame) -> None:
            if frame.op == 3:
                raise RuntimeError("op 3's body failed")
            pattern_body(engine, frame)

        with pytest.raises(RuntimeError, match="op 3's body failed"):
            engine.run_iteration(1, failing_body)
        assert engine.state is None and engine.pool.used_bytes() == 0
        assert engine.staging.stats()["staging.live_slots.current"] == 0
        result = engine.run_iteration(2)  # the engine runs on after aborted iterations
        assert result.corrupt_bytes == 0 and result.bytes_checked > 0
        assert result.late_prefetches == len(result.late_us)


def test_a_planned_iteration_puts_no_python_on_the_streams_timeline():
    """40 ops, A swapped out after op 0 and in at op 37 (due 39), W used by every op. An
    iteration that does not time its ops (the fourth: the first three do, then every
    fourth) enqueues no host callback at all; the compute stream's op work goes out in one
    launch per stretch of ops between the events another stream waits for (done[0],
    done[36]) and the end, the timed wait before op 39 inside the last; events are
    recorded and waited for only
    where the plan has a copy: done[0], done[36], the copies' own two, and the two timing
    marks around the due op's wait; D2H waits for done[0], H2D for done[36] and A's
    swap-out, the compute stream for A's landing. Ops 37 and 38 spend 50 ms each, so A's
    16-byte copy in lands before op 39 on a machine under any load."""
    ops = 40
    trace = trace_of([10.0] * ops, Buffer(0, 8, 0, ops, tuple(range(ops)), PERSISTENT),
                     Buffer(1, 16, 0, ops, (0, ops - 1)))
    plan = swap_plan(trace, [Residency(0, 0, ops, 0), Residency(1, 0, 1, 8),
                             Residency(1, ops - 3, ops, 8)],
                     [SwapOut(1, 0), SwapIn(1, ops - 3, ops - 1)])
    keys = ("host_callbacks.count", "launches.count", "event_records.count",
            "stream_waits.count", "copy_count.h2d", "copy_count.d2h")
    with open_device("emulated", capacity="1MiB") as device, \
            PatternEngine(trace, plan, device, EngineSettings(time_ops_every=4),
                          op_us=[10.0] * (ops - 3) + [50_000.0, 50_000.0, 10.0]) as engine:
        for iteration in range(3):
            timed = engine.run_iteration(iteration)
            assert len(timed.op_us) == ops
        before = device.stats()
        result = engine.run_iteration(3)
        after = device.stats()
    calls = {key: after[key] - before[key] for key in keys}
    assert (result.corrupt_bytes, result.late_prefetches) == (0, 0)
    assert result.bytes_checked == 8 * ops + 16  # W at every op, A where it lands
    assert result.op_us == ()  # not timed: no event after each op
    assert calls == {"host_callbacks.count": 0, "launches.count": 3,
                     "event_records.count": 6, "stream_waits.count": 4,
                     "copy_count.h2d": 1, "copy_count.d2h": 1}


def test_an_ops_observed_time_leaves_out_the_recomputes_before_it():
    """A is recomputed before op 4 from op 0, whose duration (20 ms) the recompute spends;
    op 4 spends nothing itself, so its observed time holds no recompute (the simulator
    counts the recompute apart), while the iteration does."""
    trace = six_op_trace()
    op_us = [20_000.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    with open_device("emulated") as device, \
            PatternEngine(trace, six_op_recompute_plan(trace), device, op_us=op_us,
                       recompute={1: _recompute_a_from_w}) as engine:
        result = engine.run_iteration(0, pattern_body)
    assert result.op_us[0] >= 20_000
    assert result.op_us[4] < 10_000
    assert result.iteration_us >= 40_000


def early_copy_out_case():
    """op:   0   1   2   3   4   5
    A 0: [=======================)  16 B, uses 0, 1 and 5
    C 1: [===================)      16 B, uses 0 and 4, recompute: op 0 from A

    A is copied out after op 1 but keeps its device bytes until op 5 (its residency
    [0, 5)), where it comes back from the host copy at another offset; before op 4, C is
    recomputed from A's device bytes, long (ops 2 and 3: 20 ms each) after A's copy out
    completed."""
    trace = trace_of([10.0, 10.0, 20000.0, 20000.0, 10.0, 10.0], Buffer(0, 16, 0, 6, (0, 1, 5)),
                     Buffer(1, 16, 0, 5, (0, 4), recompute=Recompute(0, (0,))))
    plan = swap_plan(trace, [Residency(0, 0, 5, 0), Residency(0, 5, 6, 32),
                             Residency(1, 0, 1, 16), Residency(1, 4, 5, 16)],
                     [SwapOut(0, 1), SwapIn(0, 5, 5), RecomputeAction(1, 4)])
    return trace, plan


def test_a_buffer_copied_out_early_stays_readable_until_its_residency_ends():
    trace, plan = early_copy_out_case()
    assert validate_swap_plan(trace, plan).valid
    with open_device("emulated") as device, PatternEngine(trace, plan, device) as engine:
        for iteration in range(2):
            engine.begin_iteration(iteration)
            for i in range(trace.num_ops):
                frame = engine.before_op(i)
                pattern_body(engine, frame)
                engine.after_op(i)
            result = engine.end_iteration()
            assert result.corrupt_bytes == 0 and result.bytes_checked > 0
            assert engine.handles[0].state == RETIRED
        assert engine.pool.used_bytes() == 0 and engine.staging.is_clean()


def test_the_engine_holds_no_replay_defaults():
    """A plan that recomputes a buffer needs the client's recompute callable: the engine
    has no pattern regeneration of its own, and refuses such a plan by naming the buffer;
    the op body is the client's too."""
    trace = six_op_trace()
    with open_device("emulated") as device:
        with pytest.raises(EngineError, match=r"recomputes buffers \[1\] and no recompute "
                                              r"callable was given"):
            SwapEngine(trace, six_op_recompute_plan(trace), device)
        with SwapEngine(trace, six_op_swap_plan(trace), device) as engine, \
                pytest.raises(TypeError):
            engine.run_iteration(0)  # no body: nothing of a replay's runs by default
