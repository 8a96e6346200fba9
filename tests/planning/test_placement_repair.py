"""Placement that does not lose plans (:func:`~cupool.planning.budget.engine.placement.
repair_placement`): a schedule that fits the budget op by op but whose residencies the
greedy offset solvers cannot place is repaired (the exact solver) before its planner is
asked for a smaller budget, and rather than lost, its stays across the iteration boundary
split by copies."""

from __future__ import annotations

import numpy as np

from cupool.check import validate_plan
from cupool.core.vocabulary import (
    PERSISTENT,
    TEMPORARY,
    Buffer,
    Op,
    Residency,
    SolveStatus,
    SwapIn,
    SwapOut,
    Trace,
)
from cupool.planning.budget import plan_with_budget
from cupool.planning.budget.engine.placement import (
    BoundaryPair,
    place,
    tie_pairs,
    untie,
)
from cupool.planning.budget.engine.residency import (
    ResidencyInterval,
    assemble,
    residency_intervals,
)
from cupool.planning.budget.engine.schedule import SWAP, Gap, Schedule
from cupool.sim import cost_model, simulate

MIB = 1 << 20

# op:      0    1    2
# C 0:    [=========)        3 MiB
# A 1:         [=========)   2 MiB
# B 2:         [====)        2 MiB
# D 3:              [====)   4 MiB
# 7 MiB at op 1 and 6 at op 2: the greedy offset solvers need 9 MiB (C and A, or B and A,
# cannot both sit under D), the exact solver places them in 7 (C over B, A under D)
FRAGMENTING = Trace("fragmenting", tuple(Op(f"op{i}", 100.0) for i in range(3)), (
    Buffer(0, 3 * MIB, 0, 2, (0, 1), TEMPORARY),
    Buffer(1, 2 * MIB, 1, 3, (1, 2), TEMPORARY),
    Buffer(2, 2 * MIB, 1, 2, (1,), TEMPORARY),
    Buffer(3, 4 * MIB, 2, 3, (2,), TEMPORARY),
))


def test_the_greedy_solvers_fragment_the_hand_written_trace():
    intervals = [ResidencyInterval(b.id, b.start, b.end) for b in FRAGMENTING.buffers]
    for solver in ("greedy-size", "best-fit", "greedy-breadth"):
        assert place(FRAGMENTING, intervals, 7 * MIB, solver).offsets is None
    assert place(FRAGMENTING, intervals, 7 * MIB, "exact").offsets is not None


def test_a_fragmenting_schedule_is_placed_by_the_exact_solver_not_by_copies():
    """Every op fits 7 MiB: the plan needs no copy at all, whatever the greedy solvers
    leave between the buffers."""
    for policy in ("on-demand", "auto"):
        result = plan_with_budget(FRAGMENTING, 7 * MIB, policy)
        assert result.feasible, result.reason
        assert not result.plan.actions
        assert validate_plan(result.trace, result.plan).valid
        assert simulate(result.trace, result.plan, cost_model("gen5")).overhead == 0.0
    assert plan_with_budget(FRAGMENTING, 7 * MIB, "on-demand").plan.stats[
        "placement_repair"] == "exact"


# op:       0   1   2   3   4   5
# W 0:     [=)         [=========)   persistent, 8 B, swapped out between its uses
# X 1:     [=====)                   8 B
# Y 2:                 [=========)   8 B
STAY = Trace("stay", tuple(Op(f"op{i}", 1.0) for i in range(6)), (
    Buffer(0, 8, 0, 6, (0, 5), PERSISTENT, writes=(5,)),
    Buffer(1, 8, 0, 2, (0, 1), TEMPORARY),
    Buffer(2, 8, 3, 6, (3, 5), TEMPORARY),
))
STAY_SCHEDULE = Schedule({0: [Gap(0, 0, 5, SWAP, 1, 3)]})


def test_a_stay_no_offset_ties_is_split_by_a_copy():
    """W's first residency at 0 and its last at 8 (where the solver put them), X at 8
    and Y at 0, within 16 bytes: no offset free during both of W's residencies, so the
    tie fails; split by a copy (out after its last use, in from op 0 for its first), the
    plan is valid with W at two offsets."""
    intervals = residency_intervals(STAY, STAY_SCHEDULE)
    assert intervals == [ResidencyInterval(0, 0, 1), ResidencyInterval(0, 3, 6),
                         ResidencyInterval(1, 0, 2), ResidencyInterval(2, 3, 6)]
    offsets = np.array([0, 8, 8, 0], dtype=np.int64)
    assert tie_pairs(STAY, intervals, offsets, 16) == [BoundaryPair(0, 1)]
    split = untie(STAY, STAY_SCHEDULE, (0,))
    assert residency_intervals(STAY, split) == intervals  # the same residencies
    residencies = tuple(Residency(r.buffer_id, r.start, r.end, int(o))
                        for r, o in zip(intervals, offsets, strict=True))
    plan = assemble(STAY, split, residencies, 16, 16, "test", 0.0, {})
    assert SwapOut(0, 5) in plan.actions and SwapIn(0, 0, 0) in plan.actions
    assert validate_plan(STAY, plan).valid
    # without the split, the same offsets break the boundary rule
    kept = assemble(STAY, STAY_SCHEDULE, residencies, 16, 16, "test", 0.0, {})
    assert validate_plan(STAY, kept).rule == "boundary"


def test_a_stay_with_a_wrap_gap_is_not_split_again():
    wrapped = Schedule({0: [Gap(0, 5, 0, SWAP, 6, 0)]})
    assert untie(STAY, wrapped, (0,)) is None
    assert untie(STAY, STAY_SCHEDULE, (1,)) is None  # a temporary has no stay to split


def test_on_demand_splits_the_stays_it_cannot_tie():
    """The synthetic LSTM at 70%: on-demand's residencies fit the budget op by op, but
    two persistent buffers' stays across the boundary take no single offset; they are
    split by copies instead of on-demand giving up."""
    from cupool.planning.synthetic import lstm_trace

    trace = lstm_trace(10, 2, seed=0)
    result = plan_with_budget(trace, int(trace.lower_bound_bytes() * 0.7), "on-demand")
    assert result.plan.status == SolveStatus.FEASIBLE
    assert "split by a copy" in result.plan.stats["placement_repair"]
    assert validate_plan(result.trace, result.plan).valid
