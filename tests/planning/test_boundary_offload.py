"""Persistent state that cannot stay on the device (:mod:`cupool.planning.budget.boundary`):
taken off across the iteration boundary and between its uses, validated, simulated no
better than the bound, and replayed byte-exact."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cupool.check import validate_swap_plan
from cupool.core.vocabulary import PERSISTENT, Buffer, Op, SwapIn, SwapOut, Trace
from cupool.planning import make_plan
from cupool.planning.budget.auto import fallbacks, members
from cupool.planning.budget.boundary import (
    VARIANTS,
    persistent_over,
    place_pairs_first_fit,
    plan_boundary,
)
from cupool.planning.budget.engine.residency import ResidencyInterval
from cupool.planning.budget.params import BudgetParams
from cupool.planning.synthetic import lstm_trace
from cupool.sim.bounds import overhead_lower_bound
from cupool.sim.cost import cost_model
from cupool.sim.simulator import simulate
from tests.swap_cases import replay_on_emulated

BUDGET = 62804


def across_the_boundary(writes: bool = False) -> Trace:
    """4 ops, persistent state 84% of the peak: at op 1 only buffer 6 fits, so 7 (used at
    op 2 only) spends ops 3, 0 and 1 on the host and 8 (used at 0 and 2) leaves for op 1.
    With ``writes``: 7 is read-only (dropped, never copied out), 6 and 8 are written at
    their last use (copied out)."""
    def w(*ops):
        return tuple(ops) if writes else None

    buffers = [Buffer(i, 4096, 0, 1, (0,), writes=w()) for i in (0, 2, 3, 4, 5)]
    buffers += [Buffer(1, 4096, 3, 4, (3,), writes=w()),
                Buffer(6, 57343, 0, 4, (1,), kind=PERSISTENT, writes=w(1)),
                Buffer(7, 28671, 0, 4, (2,), kind=PERSISTENT, writes=w()),
                Buffer(8, 19114, 0, 4, (0, 2), kind=PERSISTENT, writes=w(2))]
    return Trace("persistent-across-boundary", tuple(Op(f"op{i}", duration_us=5.0)
                                                     for i in range(4)),
                 tuple(sorted(buffers, key=lambda b: b.id)))


def test_the_member_runs_only_when_persistent_state_cannot_stay():
    trace = across_the_boundary()
    cost = cost_model()
    assert persistent_over(trace, BUDGET)
    assert not persistent_over(trace, trace.lower_bound_bytes())
    for found in (False, True):  # whether or not a member found a plan
        names = [m.name for m in fallbacks(trace, BUDGET, cost, BudgetParams(), found)]
        assert "boundary(target working)" in names
        first_fit = [n for n in names if "first-fit" in n]
        assert first_fit == ([] if found else first_fit) and (found or first_fit)
    assert not any(m.name.startswith("boundary")
                   for m in members(trace, BUDGET, cost, BudgetParams()))
    roomy = [m.name for m in fallbacks(trace, trace.lower_bound_bytes(), cost,
                                       BudgetParams(), True)]
    assert roomy == []  # persistent state fits and a plan was found: nothing more runs


@pytest.mark.parametrize("writes", [False, True])
def test_persistent_state_leaves_across_the_boundary_and_validates(writes):
    trace = across_the_boundary(writes)
    cost = cost_model()
    result = plan_boundary(trace, BUDGET, cost, BudgetParams(), time.perf_counter())
    assert result.feasible, result.reason
    plan = result.plan
    report = validate_swap_plan(trace, plan)
    assert report.valid, (report.rule, report.message)
    # 7 is off the device at ops 3, 0 and 1: out after its use at op 2, in for op 2
    spans = sorted((r.start, r.end) for r in plan.residencies if r.buffer_id == 7)
    assert spans == ([(2, 3)] if writes else [(2, 4)])  # a drop frees its bytes at once
    outs = [a for a in plan.actions if isinstance(a, SwapOut) and a.buffer_id == 7]
    ins = [a for a in plan.actions if isinstance(a, SwapIn) and a.buffer_id == 7]
    assert [a.after_op for a in outs] == [2] and [a.due_op for a in ins] == [2]
    assert outs[0].drop == writes  # read-only: dropped; unknown writes: copied out
    dirty = [a for a in plan.actions if isinstance(a, SwapOut) and a.buffer_id in (6, 8)]
    assert dirty and not any(a.drop for a in dirty)
    bound = overhead_lower_bound(trace, BUDGET)
    sim = simulate(trace, plan, cost)
    assert bound.feasible and sim.overhead >= bound.overhead - 1e-9
    assert sim.peak_bytes <= BUDGET


def test_auto_picks_the_member_and_its_plan_replays_byte_exact():
    pytest.importorskip("cupy")
    trace = across_the_boundary(writes=True)
    planned = make_plan(trace, BUDGET, policy="auto")
    assert planned.fits, planned.reason
    # on-demand (its stays across the boundary placed as one item by the placement
    # repair) plans as fast as the boundary member, and ranks first
    assert planned.plan.stats["member"].startswith(("boundary", "on-demand"))
    candidates = planned.plan.stats["candidates"]
    assert candidates["boundary(target working)"] == candidates[planned.plan.stats["member"]]
    assert validate_swap_plan(planned.trace, planned.plan).valid
    _results, stats = replay_on_emulated(planned.trace, planned.plan)
    assert stats["bytes.d2h"] > 0 and stats["bytes.h2d"] > 0


def test_a_stay_across_the_boundary_is_placed_as_one_item():
    trace = across_the_boundary()
    intervals = [ResidencyInterval(6, 1, 2), ResidencyInterval(7, 2, 4),
                 ResidencyInterval(8, 0, 1), ResidencyInterval(8, 2, 4),
                 ResidencyInterval(0, 0, 1), ResidencyInterval(1, 3, 4)]
    placed = place_pairs_first_fit(trace, intervals, BUDGET)
    assert placed.offsets is not None and placed.arena_bytes <= BUDGET
    assert placed.offsets[2] == placed.offsets[3]  # 8's two residencies: one stay
    assert place_pairs_first_fit(trace, intervals, 57342).offsets is None  # 6 alone is over


def test_a_small_lstm_below_its_persistent_state_gets_a_validated_plan():
    # weights, gradients and Adam moments are 4/3 of the budget: the greedy members all
    # stop at the Adam ops
    trace = lstm_trace(6, 2, hidden=64, vocab=256)
    budget = trace.lower_bound_bytes() // 2
    assert sum(b.size for b in trace.buffers if b.kind == PERSISTENT) > budget
    bound = overhead_lower_bound(trace, budget)
    assert bound.feasible
    planned = make_plan(trace, budget, policy="auto")
    assert planned.fits, planned.reason
    report = validate_swap_plan(planned.trace, planned.plan)
    assert report.valid, (report.rule, report.message)
    assert planned.plan.stats["simulated_overhead"] >= bound.overhead - 1e-9


def test_copies_brought_forward_never_knot_the_residencies_past_packing():
    # Brought forward, 4's copy in and 3's copy out tie 2, 3 and 4 into residencies that
    # pairwise share an op (188416 bytes of offsets); the member then keeps them where
    # step 2 put them, which packs.
    p = PERSISTENT
    trace = Trace("knot", tuple(Op(f"op{i}", duration_us=5.0) for i in range(8)), (
        Buffer(0, 32768, 4, 6, (4, 5)), Buffer(1, 32768, 0, 8, (7,), kind=p, writes=()),
        Buffer(2, 65536, 0, 8, (1, 6), kind=p, writes=()),
        Buffer(3, 40960, 0, 8, (5,), kind=p, writes=(5,)),
        Buffer(4, 81920, 0, 8, (3, 5), kind=p, writes=()),
        Buffer(5, 20480, 0, 8, (4,), kind=p, writes=(4,)),
        Buffer(6, 61440, 0, 8, (3,), kind=p, writes=())))
    budget = trace.lower_bound_bytes() // 2
    assert overhead_lower_bound(trace, budget).feasible
    result = plan_boundary(trace, budget, cost_model(), BudgetParams(), time.perf_counter())
    assert result.feasible, result.reason
    assert result.plan.stats["internal_budget_bytes"] == budget  # placed at the first try
    assert validate_swap_plan(trace, result.plan).valid


def test_the_last_update_s_state_stays_across_the_boundary_the_earlier_ones_leave():
    """Adam updates the layers in turn at the end of the step. With ``split``, the state
    the earlier updates write leaves the device across the boundary (its copies out run
    while the later updates wait for their own state to come in), and the state only the
    last update writes is copied out in the next iteration's head instead of after the
    step's last op. On this trace that plans the fastest step of the variants."""
    from cupool.planning.budget.boundary import Variant
    from cupool.planning.budget.engine.residency import HEAD_OUT_OP
    from cupool.planning.budget.recipes import with_recompute_recipes

    trace = with_recompute_recipes(lstm_trace(20, 2, hidden=256, vocab=2048))
    budget, cost = trace.lower_bound_bytes() // 2, cost_model("gen4")
    split = next(v for v in VARIANTS if v.split)
    assert split == Variant("working", order="earliest use", fill=0.95, split=True)
    result = plan_boundary(trace, budget, cost, BudgetParams(), time.perf_counter(), split)
    assert result.feasible, result.reason
    assert validate_swap_plan(result.trace, result.plan).valid
    persistent = {b.id: b for b in trace.buffers if b.kind == PERSISTENT}
    last_update = max(max(b.uses) for b in persistent.values())
    outs = [a for a in result.plan.actions if isinstance(a, SwapOut) and a.buffer_id in persistent]
    head = {a.buffer_id for a in outs if a.after_op == HEAD_OUT_OP}
    across = {a.buffer_id for a in outs if a.after_op == max(persistent[a.buffer_id].uses)}
    assert head and all(max(persistent[b].uses) == last_update for b in head)
    assert across and any(max(persistent[b].uses) < last_update for b in across)
    step = simulate(result.trace, result.plan, cost).iteration_us
    for variant in VARIANTS:
        if variant.split:
            continue
        other = plan_boundary(trace, budget, cost, BudgetParams(), time.perf_counter(), variant)
        if other.feasible:
            assert simulate(other.trace, other.plan, cost).iteration_us > step, variant.name


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_a_copy_in_brought_forward_never_starts_before_its_copy_out_releases_the_bytes(
        variant):
    """Bringing a copy in forward (step 4) stops where the bytes of the same gap's copy
    out are released, also when that release was itself moved later to let the copy out
    land: the two residencies around the gap never overlap."""
    from cupool.planning.budget.recipes import with_recompute_recipes

    trace = with_recompute_recipes(lstm_trace(40, 1, seed=0, hidden=128))
    budget = int(trace.lower_bound_bytes() * 0.6)
    result = plan_boundary(trace, budget, cost_model("gen5"), BudgetParams(),
                           time.perf_counter(), variant)
    assert result.feasible, result.reason
    report = validate_swap_plan(trace, result.plan)
    assert report.valid, report.message


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 20)), max_size=10),
       st.integers(1, 30))
def test_the_lowest_gap_is_the_first_fit_of_a_walk_over_the_ranges(ranges, size):
    """The first-fit search over placed ranges equals walking them in order of their low
    ends, keeping the highest end reached, until a gap holds ``size`` bytes."""
    from cupool.planning.budget.engine.placement import lowest_gap

    cursor = 0
    for low, high in sorted((low, low + length) for low, length in ranges):
        if low - cursor >= size:
            break
        cursor = max(cursor, high)
    lows = np.array([low for low, _length in ranges], dtype=np.int64)
    highs = lows + np.array([length for _low, length in ranges], dtype=np.int64)
    assert lowest_gap(lows, highs, size) == cursor



@pytest.mark.parametrize(("order", "taken"), [("largest", 0), ("latest use", 1)])
def test_gaps_as_long_and_as_large_are_taken_in_the_variant_s_order(order, taken):
    """Two moments of one size, each used once (at ops 1 and 3), and an op 2 whose
    temporary leaves room for one of them only: either may go. By buffer, the first goes;
    latest use first, the one the later op updates."""
    from cupool.planning.budget.boundary import offload_persistent
    from cupool.planning.budget.engine.state import PlanState

    trace = Trace("order", tuple(Op(f"op{i}", 10.0) for i in range(5)),
                  (Buffer(0, 1000, 0, 5, (1,), PERSISTENT),
                   Buffer(1, 1000, 0, 5, (3,), PERSISTENT), Buffer(2, 500, 2, 3, (2,))))
    state = PlanState(trace, 2000, cost_model(0.1))
    assert offload_persistent(state, "working", order=order) == 1
    assert [gap.buffer_id for gap in state.taken] == [taken]
    with pytest.raises(ValueError, match="order 'newest'"):
        offload_persistent(PlanState(trace, 2000, cost_model(0.1)), order="newest")


@pytest.mark.parametrize(("fill", "trigger"), [(0.9, 3), (1.0, 2)])
def test_copies_in_are_brought_forward_into_the_variant_s_fill_of_the_budget(fill, trigger):
    """W (used at op 5 only) must be off the device at op 1; its copy in (13 us, ops of 10
    us) is triggered at op 3 to land on time. Ops 2 to 4 hold 850 bytes: with W, 1850 of
    the 1900-byte budget, above 90% of it: only a variant that fills the whole budget
    brings the copy forward to op 2."""
    from cupool.planning.budget.boundary import bring_forward, offload_persistent
    from cupool.planning.budget.engine.state import PlanState

    trace = Trace("fill", tuple(Op(f"op{i}", 10.0) for i in range(6)),
                  (Buffer(0, 1000, 0, 6, (5,), PERSISTENT), Buffer(1, 1000, 1, 2, (1,)),
                   Buffer(2, 850, 2, 5, (2, 4))))
    state = PlanState(trace, 1900, cost_model(0.1))
    assert offload_persistent(state, "working") == 1
    taken = list(state.taken)
    [before] = state.schedule.gaps[0]
    assert before.resident_from == 3
    bring_forward(state, taken, fill)
    [after] = state.schedule.gaps[0]
    assert after.resident_from == trigger
