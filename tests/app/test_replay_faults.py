"""Device faults under a replay (the fault matrix's replay cells): the arena or the pinned
staging refused at the start, a copy, a launch, an event record or a stream's wait failing
in the second iteration, when enqueued or on its stream. After each: a typed error naming the failed
call, no device or pinned byte and no stream work left, never above the clean run's
reservation, and a second replay on the same device byte exact."""

from __future__ import annotations

import pytest

from tests.bench_modules import load_bench

clients = load_bench("fault_clients")


@pytest.fixture(scope="module")
def replay_matrix():
    setup = clients._replay_setup()
    points, clean = clients.replay_points(setup)
    return setup, points, clean


def test_every_replay_cell_meets_the_targets(replay_matrix):
    setup, points, clean = replay_matrix
    assert {p.operation for p in points} == {"reserve", "alloc_pinned", "copy_h2d",
                                             "copy_d2h", "launch", "record", "wait_event"}
    for point in points:
        cell = clients.replay_cell(point, setup, clean)
        assert clients.good(cell), cell
        assert cell.outcome == "continued" and cell.later_errors == [], cell
        if point.operation == "reserve":
            assert "cannot reserve" in cell.error and "arena" in cell.error, cell
        elif point.operation == "alloc_pinned":
            assert cell.error.startswith("DeviceOutOfMemoryError: alloc_pinned("), cell
        else:
            # the engine's error, naming the call and where it failed
            assert cell.error.startswith("EngineFailedError: iteration 1 failed"), cell
            assert f"injected fault ({point.operation} call {point.nth}, at " \
                   f"{point.stage})" in cell.error, cell


def test_the_independent_walker_names_a_failed_stream_wait_and_synchronize(replay_matrix):
    """The stress test's walker (device protocol and kernels only) synchronizes a stream for
    each pattern check: a stream wait or a stream synchronize failing in its second
    iteration is raised naming the stream, and it gives back its arena and slab."""
    setup, _points, _clean = replay_matrix
    points, clean = clients.replay_points(setup, "walker")
    assert [p.operation for p in points] == ["wait_event", "stream_synchronize"]
    for point in points:
        cell = clients.replay_cell(point, setup, clean, "walker")
        assert clients.good(cell) and cell.outcome == "continued", cell
        what = "wait_event" if point.operation == "wait_event" else "synchronize"
        assert cell.error == (f"DeviceError: stream 'walk-compute'.{what}() on 'faulty': "
                              f"injected fault ({point.operation} call {point.nth}, at "
                              f"enqueue)"), cell
