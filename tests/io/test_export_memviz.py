"""Plans exported as PyTorch memory snapshots: exact events, the viewer's invariants, and
the round trip through our own importer."""

from __future__ import annotations

import pickle

import pytest

from cupool.core.vocabulary import Buffer, Op, Placement, Plan, Residency, SolveStatus, Trace
from cupool.errors import InputError, PlanFormatError
from cupool.io import load_trace
from cupool.io.memviz import plan_to_snapshot, save_memviz
from cupool.planning import plan as make_plan
from cupool.planning import validate_plan
from tests.conftest import TRACES

BASE = 0x1000

# op:        0   1   2   3
# w  @0:    [===============)   persistent 8 B
# b1 @8:    [=======)           16 B
# b2 @24:       [=======)       32 B
# b3 @8:            [=======)   16 B, reuses b1's bytes
TRACE = Trace("tiny", tuple(Op(f"op{i}") for i in range(4)), (
    Buffer(0, 8, 0, 4, (0, 3), "persistent"), Buffer(1, 16, 0, 2, (0, 1)),
    Buffer(2, 32, 1, 3, (1, 2)), Buffer(3, 16, 2, 4, (2, 3))))


def static_plan(offsets, trace=TRACE):
    arena = max(offsets[b.id] + b.size for b in trace.buffers)
    return Plan(trace.name, trace.digest(), "hand", SolveStatus.FEASIBLE, arena,
                trace.lower_bound_bytes(), tuple(Placement(i, o) for i, o in offsets.items()))


PLAN = static_plan({0: 0, 1: 8, 2: 24, 3: 8})


def test_exact_events_and_segment():
    snapshot = plan_to_snapshot(TRACE, PLAN, base_address=BASE)
    events = [(e["action"], e["addr"] - BASE, e["size"]) for e in snapshot["device_traces"][0]]
    assert events == [("alloc", 8, 16), ("alloc", 24, 32),
                      ("free_requested", 8, 16), ("free_completed", 8, 16), ("alloc", 8, 16),
                      ("free_requested", 24, 32), ("free_completed", 24, 32),
                      ("free_requested", 8, 16), ("free_completed", 8, 16)]
    assert all(e["frames"] == [] and e["stream"] == 0 for e in snapshot["device_traces"][0])
    (segment,) = snapshot["segments"]
    assert segment["address"] == BASE and segment["total_size"] == 56
    assert [(b["address"] - BASE, b["size"], b["state"]) for b in segment["blocks"]] == [
        (0, 8, "active_allocated"), (8, 48, "inactive")]


def test_at_op_takes_the_snapshot_during_that_op():
    snapshot = plan_to_snapshot(TRACE, PLAN, at_op=2, base_address=BASE)
    assert [e["action"] for e in snapshot["device_traces"][0]] == [
        "alloc", "alloc", "free_requested", "free_completed", "alloc"]
    blocks = snapshot["segments"][0]["blocks"]
    assert [(b["address"] - BASE, b["size"], b["state"]) for b in blocks] == [
        (0, 8, "active_allocated"), (8, 16, "active_allocated"), (24, 32, "active_allocated")]
    with pytest.raises(InputError, match=r"at_op \(=4\)"):
        plan_to_snapshot(TRACE, PLAN, at_op=4)


def _viewer_invariants(snapshot):
    # torch/cuda/_memory_viz.py segsum: blocks tile each segment; MemoryViz.js computes
    # block addresses as the segment's address plus the sizes before them.
    for segment in snapshot["segments"]:
        address = segment["address"]
        for block in segment["blocks"]:
            assert block["address"] == address
            address += block["size"]
        assert address == segment["address"] + segment["total_size"]


def _interval_order(trace):
    """Sizes, kinds and the overlap relation, in buffer order (time relabelled)."""
    buffers = trace.buffers
    return ([(b.size, b.kind) for b in buffers],
            {(i, j) for i, a in enumerate(buffers) for j, b in enumerate(buffers)
             if i < j and a.overlaps(b)})


def test_round_trip_tiny(tmp_path):
    save_memviz(TRACE, PLAN, tmp_path / "plan.pickle")
    snapshot = pickle.loads((tmp_path / "plan.pickle").read_bytes())
    _viewer_invariants(snapshot)
    again = load_trace(tmp_path / "plan.pickle")
    # importer order: temporaries by alloc time, then the persistent block
    assert [(b.size, b.start, b.end, b.kind) for b in again.buffers] == [
        (16, 0, 2, "temporary"), (32, 1, 4, "temporary"), (16, 3, 5, "temporary"),
        (8, 0, 6, "persistent")]
    assert _interval_order(again) == _interval_order(Trace("t", TRACE.ops, (
        TRACE.buffers[1], TRACE.buffers[2], TRACE.buffers[3], TRACE.buffers[0])))
    assert again.lower_bound_bytes() == TRACE.lower_bound_bytes()


def test_round_trip_real_trace_keeps_the_plan_valid(tmp_path):
    trace = load_trace(TRACES[0])
    plan = make_plan(trace, "greedy-size")
    save_memviz(trace, plan, tmp_path / "plan.pickle", base_address=BASE)
    snapshot = pickle.loads((tmp_path / "plan.pickle").read_bytes())
    _viewer_invariants(snapshot)
    again = load_trace(tmp_path / "plan.pickle")
    assert sorted((b.size, b.kind) for b in again.buffers) == sorted(
        (b.size, b.kind) for b in trace.buffers)
    assert again.lower_bound_bytes() == trace.lower_bound_bytes()
    # the exported addresses are a valid plan of the imported trace
    offsets = {}
    for b in again.buffers:
        address = int(b.name.split(" at ")[1].split()[0], 16)
        offsets[b.id] = address - BASE
    assert validate_plan(again, static_plan(offsets, again))


def test_swapping_plan_residencies():
    residencies = (Residency(0, 0, 4, 0), Residency(1, 0, 1, 8), Residency(1, 3, 4, 40),
                   Residency(2, 1, 3, 8), Residency(3, 2, 4, 24))
    swap = Plan(TRACE.name, TRACE.digest(), "hand", SolveStatus.FEASIBLE, 56, 56, (),
                capacity_bytes=56, residencies=residencies, actions=())
    # not a valid swapping plan (no actions), but the export only draws residencies
    snapshot = plan_to_snapshot(TRACE, swap, base_address=BASE)
    events = [(e["action"], e["addr"] - BASE) for e in snapshot["device_traces"][0]
              if e["action"] != "free_requested"]
    assert events == [("alloc", 8), ("free_completed", 8), ("alloc", 8),
                      ("alloc", 24), ("free_completed", 8), ("alloc", 40),
                      ("free_completed", 24), ("free_completed", 40)]


def test_bad_plans():
    with pytest.raises(PlanFormatError, match="overlaps"):
        plan_to_snapshot(TRACE, static_plan({0: 0, 1: 8, 2: 16, 3: 8}), at_op=1)
    other = Trace("other", TRACE.ops, TRACE.buffers[:2])
    with pytest.raises(PlanFormatError, match="not 'other'"):
        plan_to_snapshot(other, PLAN)
