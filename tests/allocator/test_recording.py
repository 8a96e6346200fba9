"""Recorded iterations: the trace of a recording (allocation-index time), the log a
recording iteration writes, and the agreement rule before planning."""

from __future__ import annotations

import pytest

from cupool.allocator.recording import (
    OUTLIVES,
    RecordedIteration,
    Recorder,
    RecordLog,
    from_trace,
    merge,
    to_trace,
)


def test_the_trace_of_a_recording_has_allocation_index_time():
    recording = RecordedIteration((512, 1024, 512), (2, 3, 3), (False, False, True))
    trace = to_trace(recording, "t")
    assert [(b.start, b.end) for b in trace.buffers] == [(0, 2), (1, 3), (0, 3)]
    assert trace.buffers[2].name == OUTLIVES
    assert from_trace(trace) == recording


def test_a_log_ends_each_block_at_the_allocations_made_when_it_was_freed():
    """events: m0 m1 f0 m2 f1 (block 2 still live at the end: it outlives the iteration)"""
    log = RecordLog()
    log.add(512)
    log.add(1024)
    log.free(0)
    log.add(512)
    log.free(1)
    assert log.recording() == RecordedIteration((512, 1024, 512), (2, 3, 3),
                                                (False, False, True))


def record(recorder: Recorder, events: str) -> RecordedIteration | None:
    """Run one recorded iteration: ``"m512"`` allocates 512 bytes, ``"f0"`` frees block 0."""
    recorder.begin()
    for event in events.split():
        if event[0] == "m":
            recorder.log.add(int(event[1:]))
        else:
            recorder.log.free(int(event[1:]))
    return recorder.finish()


def test_the_recorder_plans_after_enough_agreeing_recordings():
    recorder = Recorder(record_iterations=2)
    assert record(recorder, "m512 f0") is None
    assert record(recorder, "m1024 f0") is None  # disagrees: the count starts again
    assert record(recorder, "m1024 m512 f1") is None
    merged = record(recorder, "m1024 f0 m512 f1")
    # agreeing recordings merge: each slot's latest end, outlived if it outlived any
    assert merged == RecordedIteration((1024, 512), (2, 2), (True, False))
    assert record(recorder, "m1024 f0 m512 f1") is None  # counting again after a plan


def test_recordings_with_different_sizes_do_not_merge():
    with pytest.raises(ValueError, match="different sizes"):
        merge([RecordedIteration((512,), (1,), (False,)),
               RecordedIteration((1024,), (1,), (False,))])
