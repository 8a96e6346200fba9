"""What on-time swaps of persistent state can free at each op (``engine/relief.py``), and
the greedy members that ``auto`` skips because of it: the floor is never above what the
greedy leaves resident, so a member skipped is one that would have ended over the budget."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cupool.core.vocabulary import PERSISTENT, Buffer, Op, Trace
from cupool.planning.budget import BudgetParams
from cupool.planning.budget.auto import greedy_options
from cupool.planning.budget.engine.greedy import (
    GreedyOptions,
    fullest_op,
    out_of_reach,
    run_repaired,
)
from cupool.planning.budget.engine.relief import (
    highest_floor,
    on_time_floor,
    persistent_floor,
    persistent_relief,
)
from cupool.planning.budget.recipes import with_recompute_recipes
from cupool.sim import cost_model

# 1 GB/s and 1 µs per copy: a 4,000-byte copy takes 5 µs
LINK = cost_model(1.0, latency_us=1.0)


def _ops(n: int, duration_us: float = 1.0) -> tuple[Op, ...]:
    return tuple(Op(f"op{i}", duration_us=duration_us) for i in range(n))


def test_a_gap_relieves_only_the_ops_both_copies_reach_in_time():
    # op:      0  1  2  3  4  5  6  7  8  9    ten 1 µs ops; W (4,000 B, written at 0) used
    # W:       u                       u       at 0 and 8: out lands 5 µs after op 0 ends
    #             [out  ) x  x  [in    )       (op 6 on), in takes 5 µs before op 8 starts
    #                                          (triggered at op 3 at the latest)
    w = Buffer(0, 4000, 0, 10, (0, 8), kind=PERSISTENT, writes=(0,))
    t = Buffer(1, 100, 8, 9, (8,))  # a temporary op 8 uses
    trace = Trace("one-gap", _ops(10), (w, t))
    relief = persistent_relief(trace, LINK)
    # between the uses: out lands at 6 µs (op 6 starts at 6), the latest trigger is op 3,
    # so no op is covered; across the boundary (8 -> 0): ops 9 need the out (lands at 14),
    # the head before op 0 has no op: nothing either
    assert relief.tolist() == [0] * 10
    floor = on_time_floor(trace, LINK)
    assert floor.tolist() == [4000] * 8 + [4100, 4000]
    assert persistent_floor(trace).tolist() == floor.tolist()


def test_a_long_gap_and_clean_data_are_relieved():
    # twenty 1 µs ops; W dirty after op 0, next used at 19: out lands by op 6, the copy in
    # can be triggered at op 14 at the latest: ops 6..13 relieved. R read-only, used at 5
    # and 15: dropped, not copied out (ops 6.. reachable at once), in by op 10 at the latest
    w = Buffer(0, 4000, 0, 20, (0, 19), kind=PERSISTENT, writes=(0,))
    r = Buffer(1, 4000, 0, 20, (5, 15), kind=PERSISTENT, writes=())
    trace = Trace("long-gap", _ops(20), (w, r))
    relief = persistent_relief(trace, LINK)
    expected = np.zeros(20, dtype=np.int64)
    expected[6:14] += 4000
    expected[6:10] += 4000
    # R across the boundary (15 -> 5): the tail after 15 at once (clean), the head ops
    # 0..-: a copy in triggered after op k lands by op 5 only for k + 1 <= 0: none
    expected[16:20] += 4000
    assert relief.tolist() == expected.tolist()


def test_ops_a_recompute_may_stretch_count_as_long_enough():
    # W used at 0 and 4 of five 1 µs ops: too short for a 5 µs copy either way, unless an
    # op between reads a temporary (a recompute may run before it and stretch the step)
    w = Buffer(0, 4000, 0, 5, (0, 4), kind=PERSISTENT, writes=(0,))
    short = Trace("short", _ops(5), (w,))
    assert persistent_relief(short, LINK).tolist() == [0] * 5
    t = Buffer(1, 100, 1, 4, (1, 3))  # ops 1 and 3 may wait for a recompute of it
    stretched = Trace("stretched", _ops(5), (w, t))
    assert persistent_relief(stretched, LINK).tolist() == [0, 0, 4000, 0, 0]


@st.composite
def persistent_traces(draw):
    """Steps with persistent state (written, read-only or unknown writes) used once or a
    few times, temporaries in between, op times from short to long against the copies."""
    n = draw(st.integers(3, 12))
    buffers = []
    for i in range(draw(st.integers(0, 5))):
        start = draw(st.integers(0, n - 1))
        end = draw(st.integers(start + 1, n))
        uses = sorted(draw(st.sets(st.integers(start, end - 1), min_size=1, max_size=3)))
        buffers.append(Buffer(i, draw(st.integers(1, 16)) << 10, start, end, tuple(uses)))
    for _k in range(draw(st.integers(1, 5))):
        uses = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=3)))
        writes = draw(st.sampled_from([None, (), tuple(uses[-1:]), tuple(uses[:1])]))
        buffers.append(Buffer(len(buffers), draw(st.integers(2, 24)) << 10, 0, n,
                              tuple(uses), kind=PERSISTENT, writes=writes))
    durations = draw(st.lists(st.sampled_from([0.5, 2.0, 10.0, 40.0]), min_size=n,
                              max_size=n))
    ops = tuple(Op(f"op{i}", duration_us=d) for i, d in enumerate(durations))
    return with_recompute_recipes(Trace("persistent", ops, tuple(buffers)))


ELIGIBLE = [greedy_options(BudgetParams(), w) for w in (0.0, 0.2, float("inf"))] + [
    greedy_options(BudgetParams(), 0.2, late_trigger="latest"),
    greedy_options(BudgetParams(), 0.0, late_trigger="latest", swap_temporaries=False,
                   max_chain=30),
    GreedyOptions(offload_persistent=False),
    greedy_options(BudgetParams(), 0.2, late_trigger="covering"),
    greedy_options(BudgetParams(), 0.05, late_trigger="covering", segments=2,
                   lazy_release=True),
    greedy_options(BudgetParams(), 0.05, late_trigger="covering", segments=3, split="count",
                   lazy_release=True),
    GreedyOptions(order="free-time", swap_weight=0.0, max_chain=BudgetParams().max_chain),
    GreedyOptions(allow_recompute=False, swap_weight=0.0),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True, database=None)
@given(trace=persistent_traces(), fraction=st.sampled_from([0.9, 0.7, 0.5, 0.3]),
       options=st.sampled_from(ELIGIBLE), link=st.sampled_from(["gen5", 2.0]))
def test_the_greedy_never_keeps_less_resident_than_the_floor(trace, fraction, options, link):
    """At every op, the greedy keeps at least the floor resident (its copies in on time, or
    with covering late triggers only its copies out: segment checkpointing included); so
    when the floor is over the budget the member would have failed."""
    cost = cost_model(link, latency_us=1.0)
    budget = max(1, int(fraction * trace.lower_bound_bytes()))
    state = run_repaired(trace, budget, cost, options)
    relief = options.allow_swap and options.offload_persistent
    floor = on_time_floor(trace, cost, relief, late_in=options.late_trigger == "covering")
    assert np.all(state.live >= floor), (state.live.tolist(), floor.tolist())
    if out_of_reach(trace, budget, cost, options) is not None:
        assert fullest_op(state).resident_bytes > budget


def test_out_of_reach_skips_the_greedy_on_a_step_of_mostly_optimizer_state():
    """The LSTM's Adam state comes back for four updates in a row at the end of the step:
    at 50% of its peak no on-time swap frees enough there, and the greedy indeed fails."""
    from cupool.planning.synthetic import lstm_trace

    trace = with_recompute_recipes(lstm_trace(30, 2, seed=0, hidden=512))
    budget = int(trace.lower_bound_bytes() * 0.5)
    cost = cost_model("gen5")
    options = greedy_options(BudgetParams(), 0.02)
    reason = out_of_reach(trace, budget, cost, options)
    assert reason is not None and reason.startswith("greedy: op ")
    assert f"(budget {budget})" in reason
    assert fullest_op(run_repaired(trace, budget, cost, options)).resident_bytes > budget
    # segment checkpointing with covering late triggers (a hole may reach the next use):
    # what the Adam update at the end of the step uses, with the state of the updates
    # just before it (not copied out yet), still exceeds the budget
    checkpointed = greedy_options(BudgetParams(), 0.05, late_trigger="covering", segments=3,
                                  lazy_release=True)
    reason = out_of_reach(trace, budget, cost, checkpointed)
    assert reason is not None and "no swap copied out by then" in reason
    assert fullest_op(run_repaired(trace, budget, cost, checkpointed)).resident_bytes > budget


@pytest.mark.parametrize("fraction", [0.9, 0.7])
def test_out_of_reach_lets_the_greedy_run_where_it_can_fit(fraction):
    from cupool.planning.synthetic import lstm_trace

    # the persistent state is 65% of this step's peak (a shorter one is weights-heavier)
    trace = with_recompute_recipes(lstm_trace(100, 2, seed=0, hidden=512))
    budget = int(trace.lower_bound_bytes() * fraction)
    assert out_of_reach(trace, budget, cost_model("gen5"),
                        greedy_options(BudgetParams(), 0.02)) is None


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True, database=None)
@given(trace=persistent_traces(), fraction=st.sampled_from([0.9, 0.7, 0.5, 0.3]),
       planner=st.sampled_from(["capuchin", "vdnn"]), link=st.sampled_from(["gen5", 2.0]))
def test_capuchin_and_vdnn_fail_wherever_their_floor_is_over_the_budget(trace, fraction,
                                                                        planner, link):
    """``capuchin`` and ``vdnn`` skip planning where the floor of their options is over the
    budget; planned anyway (the check switched off), they end without a plan there."""
    from cupool.planning.budget import capuchin, classic

    cost = cost_model(link, latency_us=1.0)
    budget = max(1, int(fraction * trace.lower_bound_bytes()))
    module, plan, options = (
        (capuchin, capuchin.plan_capuchin,
         GreedyOptions(order="free-time", swap_weight=0.0, max_chain=BudgetParams().max_chain))
        if planner == "capuchin" else
        (classic, classic.plan_vdnn, GreedyOptions(allow_recompute=False, swap_weight=0.0)))
    reason = out_of_reach(trace, budget, cost, options, planner)
    screened = plan(trace, budget, cost, BudgetParams(), 0.0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "out_of_reach", lambda *args: None)
        unscreened = plan(trace, budget, cost, BudgetParams(), 0.0)
    assert screened.feasible == unscreened.feasible
    if reason is not None:
        assert reason.startswith(f"{planner}: op ")
        assert not unscreened.feasible
        assert screened.reason == reason
    else:
        assert (replace(screened.plan, solve_seconds=0.0)
                == replace(unscreened.plan, solve_seconds=0.0))


def test_floors_computed_once_per_trace_are_those_computed_afresh():
    """persistent_floor hands out a new array each time (callers change theirs), and the
    highest floor kept per trace and cost model is the one on_time_floor gives."""
    from cupool.planning.synthetic import lstm_trace

    trace = with_recompute_recipes(lstm_trace(6, 2, seed=4, hidden=64, vocab=256))
    first = persistent_floor(trace)
    first -= 1
    assert np.array_equal(persistent_floor(trace), first + 1)
    for link in ("gen4", "gen5"):
        for relief in (True, False):
            for late_in in (True, False):
                floor = on_time_floor(trace, cost_model(link), relief, late_in)
                expected = (int(np.argmax(floor)), int(floor.max()))
                for _again in range(2):
                    assert highest_floor(trace, cost_model(link), relief, late_in) == expected
