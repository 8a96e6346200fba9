"""Plans on disk and plans installed from outside: ``save_plan``/``load_plan``,
``install_plan``, and the one set of checks both go through.
"""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

cupy = pytest.importorskip("cupy")

from cupool.allocator import PlannedPool, PoolError  # noqa: E402
from cupool.allocator.recording import RecordedIteration, to_trace  # noqa: E402
from cupool.core.vocabulary import Op, Placement, Plan, SolveStatus  # noqa: E402
from cupool.errors import PlanFormatError  # noqa: E402
from cupool.io import save_plan, save_trace  # noqa: E402
from cupool.planning import validate_plan  # noqa: E402
from cupool.planning.budget import plan_with_budget  # noqa: E402
from tests.allocator.helpers import empty, offsets_of, step  # noqa: E402


def test_save_and_load_plan(pool, device, tmp_path):
    with pytest.raises(PoolError, match="no plan yet"):
        pool.save_plan(tmp_path / "p.json")
    out = None
    with pool.iteration():
        out = step()
    del out
    plan_path, trace_path = pool.save_plan(tmp_path / "p.json")
    assert trace_path.name == "p.trace.json"
    first = offsets_of(pool, step)
    first = [p - pool.arena_ptr for p in first]

    other = PlannedPool(device)
    other.load_plan(plan_path)
    assert other.mode == "planned" and other.memory_stats()["recorded_iterations"] == 0
    seen = offsets_of(other, step)
    assert [p - other.arena_ptr for p in seen] == first
    assert other.memory_stats()["planned_hits"] == 4


def test_a_plan_for_another_trace_is_refused(pool, device, tmp_path):
    with pool.iteration():
        x = empty(4096)
        del x
    pool.save_plan(tmp_path / "a.json")
    other = PlannedPool(device)
    cupy.cuda.set_allocator(other.malloc)
    with other.iteration():
        y = empty(8192)
        del y
    with pytest.raises(PlanFormatError, match="a plan for another trace"):
        other.load_plan(tmp_path / "a.json")
    # A plan file paired with the wrong trace file is refused as well.
    other.save_plan(tmp_path / "b.json")
    with pytest.raises(PlanFormatError, match="a plan for another trace"):
        PlannedPool(device).load_plan(tmp_path / "a.json", tmp_path / "b.trace.json")


# -- the checks load_plan and install_plan share ----------------------------------------------
def recording_trace():
    """A pool recording of eight 1 MiB blocks (each op 1 ms, so swaps can hide)."""
    recording = RecordedIteration(tuple([1 << 20] * 8), (3, 4, 5, 6, 7, 8, 8, 8), (False,) * 8)
    trace = to_trace(recording, "eight")
    return replace(trace, ops=tuple(Op(op.name, 1000.0) for op in trace.ops))


def static_plan(trace, offsets):
    return Plan(trace.name, trace.digest(), "hand", SolveStatus.FEASIBLE,
                max(o + (1 << 20) for o in offsets), trace.lower_bound_bytes(),
                tuple(Placement(k, o) for k, o in enumerate(offsets)))


def refusals(device, tmp_path, plan, trace):
    """The messages install_plan and load_plan refuse ``plan`` for ``trace`` with (and the
    load_plan error's path), checking that each error survives pickling."""
    save_plan(plan, tmp_path / "p.json")
    save_trace(trace, tmp_path / "p.trace.json")
    pool = PlannedPool(device)
    errors = []
    for call in (lambda: pool.install_plan(plan, trace),
                 lambda: pool.load_plan(tmp_path / "p.json")):
        with pytest.raises(PlanFormatError) as info:
            call()
        again = pickle.loads(pickle.dumps(info.value))
        assert str(again) == str(info.value) and again.path == info.value.path
        errors.append(info.value)
    assert pool.mode == "record" and pool.memory_stats()["plans"] == 0
    pool.close()
    return [(e.detail, e.path) for e in errors]


def test_a_swapping_plan_is_refused_by_both(device, tmp_path):
    trace = recording_trace()
    plan = plan_with_budget(trace, 3 << 20).plan
    assert not plan.is_static and validate_plan(trace, plan).valid
    rest = ("takes a static plan (placements only); the swap runtime serves swapping plans "
            "through one")
    assert refusals(device, tmp_path, plan, trace) == [
        (f"install_plan() {rest}", None), (f"load_plan() {rest}", str(tmp_path / "p.json"))]


def test_an_invalid_plan_is_refused_by_both(device, tmp_path):
    trace = recording_trace()
    plan = static_plan(trace, [0] * 8)  # every block at offset 0
    (install, _none), (load, path) = refusals(device, tmp_path, plan, trace)
    assert install == load and install.startswith("the plan is invalid for its trace: ")
    assert path == str(tmp_path / "p.json")


def test_a_trace_that_is_not_a_pool_recording_is_refused_by_both(device, tmp_path):
    trace = recording_trace()
    trace = replace(trace, ops=(*trace.ops, Op("one more", 1.0)))  # 9 ops, 8 buffers
    plan = static_plan(trace, [k << 20 for k in range(8)])
    (install, none), (load, path) = refusals(device, tmp_path, plan, trace)
    assert install == load and "is not a pool recording" in install and none is None
    assert path == str(tmp_path / "p.trace.json")  # the trace file is the culprit


def test_sizes_off_the_allocation_unit_are_refused_by_both(device, tmp_path):
    recording = RecordedIteration((1000, 512), (2, 2), (False, False))
    trace = to_trace(recording, "odd")
    plan = Plan(trace.name, trace.digest(), "hand", SolveStatus.OPTIMAL, 1512, 1512,
                (Placement(0, 0), Placement(1, 1000)))
    (install, _none), (load, _path) = refusals(device, tmp_path, plan, trace)
    assert install == load == ("buffer size (=1000) is not a multiple of 512: not a pool "
                               "recording")


def test_install_plan_keeps_an_idle_arena_of_the_same_size(pool):
    trace = recording_trace()
    pool.install_plan(static_plan(trace, [k << 20 for k in range(8)]), trace)
    base, reservations = pool.arena_ptr, pool.memory_stats()["device_reservations"]
    reversed_plan = static_plan(trace, [(7 - k) << 20 for k in range(8)])
    assert pool.install_plan(reversed_plan, trace) is reversed_plan
    assert pool.arena_ptr == base and pool.plan is reversed_plan
    stats = pool.memory_stats()
    assert stats["device_reservations"] == reservations and stats["plans"] == 2
    with pool.iteration():
        first = empty(1 << 20)
        assert first.data.ptr == base + (7 << 20)
        del first
    assert pool.mode == "planned"
