"""Multi-level placement: host levels in the cost model, the simulator and the plan format,
and the ``tiers`` local search (never worse than its two-level seed, validated, seeded)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cupool.check import validate_plan
from cupool.core.vocabulary import (
    PAGEABLE,
    PERSISTENT,
    PINNED,
    Buffer,
    RecomputeAction,
    Residency,
    SwapIn,
    SwapOut,
)
from cupool.errors import InputError, PlanFormatError, SolverError
from cupool.io import load_plan, save_plan
from cupool.io.plan_json import parse_plan, plan_to_document
from cupool.planning.budget import BudgetParams, plan_with_budget
from cupool.planning.budget.multilevel import (
    TierParams,
    pinned_peak_bytes,
    plan_tiers,
    search_tiers,
)
from cupool.planning.budget.multilevel_moves import Move, SpanRef, TierMoves
from cupool.planning.budget.multilevel_state import TierState
from cupool.planning.budget.multilevel_walk import Anchors, apply_move, moves_at
from cupool.planning.budget.recipes import with_recompute_recipes
from cupool.planning.budget.working_sets import KEPT_MEMBER
from cupool.sim import cost_model, simulate
from cupool.sim.cost import DEFAULT_PAGEABLE_LATENCY_US, PAGEABLE_FRACTION, CostModel
from tests.swap_cases import six_op_swap_plan, six_op_trace, trace_of

GEN5 = cost_model("gen5")


# -- levels in the cost model ------------------------------------------------------------

def test_pageable_copies_are_slower_by_the_documented_defaults():
    assert GEN5.copy_us(1_000_000, "h2d", PINNED) == GEN5.copy_us(1_000_000, "h2d")
    expected = DEFAULT_PAGEABLE_LATENCY_US + 1e6 / (55.0 * PAGEABLE_FRACTION * 1e3)
    assert GEN5.copy_us(1_000_000, "h2d", PAGEABLE) == pytest.approx(expected)
    assert GEN5.copy_us(1_000_000, "d2h", PAGEABLE) == pytest.approx(46.3636, abs=1e-3)


def test_pageable_numbers_are_overridable():
    custom = cost_model("gen4", pageable_gbps=5.0, pageable_latency_us=0.0)
    assert custom.copy_us(5_000, "h2d", PAGEABLE) == pytest.approx(1.0)
    assert custom.level_gbps("d2h", PAGEABLE) == 5.0 and custom.level_gbps("d2h") == 25.0
    assert CostModel(10.0, 10.0, pageable_d2h_gbps=2.0).level_gbps("d2h", PAGEABLE) == 2.0


@pytest.mark.parametrize("make, text", [
    (lambda: GEN5.copy_us(8, "h2d", "floppy"), "level (='floppy')"),
    (lambda: cost_model(pageable_gbps=0.0), "pageable_h2d_gbps (=0.0)"),
    (lambda: cost_model(pageable_latency_us=-1.0), "pageable_latency_us (=-1.0)"),
])
def test_bad_levels_and_pageable_numbers_are_input_errors(make, text):
    with pytest.raises(InputError) as info:
        make()
    assert text in str(info.value)


# -- levels in the simulator and the plan format -----------------------------------------

def _leveled(plan, level):
    return replace(plan, actions=tuple(replace(a, level=level) for a in plan.actions))


def test_the_simulator_charges_each_copy_at_its_level():
    trace = six_op_trace()
    plan = six_op_swap_plan(trace)
    cost = cost_model(1.0, latency_us=0.0, pageable_gbps=0.5, pageable_latency_us=0.0)
    pinned = simulate(trace, plan, cost)
    pageable = simulate(trace, _leveled(plan, PAGEABLE), cost)
    assert pinned.feasible and pageable.feasible
    pinned_times = sorted(c[5] - c[4] for c in pinned.copies)
    pageable_times = sorted(c[5] - c[4] for c in pageable.copies)
    assert pinned_times == pytest.approx([16 / 1e3] * 2)   # 16 B at 1 GB/s
    assert pageable_times == pytest.approx([32 / 1e3] * 2)  # at 0.5 GB/s


def test_plan_json_writes_level_only_when_not_pinned_and_reads_it_back(tmp_path):
    trace = six_op_trace()
    plan = six_op_swap_plan(trace)
    document = plan_to_document(plan)
    assert all("level" not in a for a in document["actions"])  # old files unchanged
    leveled = _leveled(plan, PAGEABLE)
    document = plan_to_document(leveled)
    assert [a.get("level") for a in document["actions"]] == [PAGEABLE, PAGEABLE]
    path = tmp_path / "plan.json"
    save_plan(leveled, path, trace)
    again = load_plan(path, trace)
    assert again.actions == leveled.actions
    assert again.actions[0] == SwapOut(1, 0, PAGEABLE) and again.actions[1] == SwapIn(1, 3, 4,
                                                                                    PAGEABLE)


def test_plan_json_without_level_reads_as_pinned_and_a_bad_level_is_named():
    trace = six_op_trace()
    document = json.loads(json.dumps(plan_to_document(six_op_swap_plan(trace))))
    plan = parse_plan(document)
    assert all(a.level == PINNED for a in plan.actions)
    document["actions"][1]["level"] = "tape"
    with pytest.raises(PlanFormatError) as info:
        parse_plan(document)
    assert "actions[1]" in str(info.value) and "'tape'" in str(info.value)


# -- the search ----------------------------------------------------------------------------

UNREFINED = BudgetParams(refine_evaluations=0)  # auto without its final local search


def _seeded(trace, budget, cost=GEN5, params=None):
    result = plan_with_budget(trace, budget, "auto", cost, params)
    return result.plan, result.trace


def test_plan_tiers_and_the_last_resort_find_the_swap_the_greedy_misses_on_the_six_op_trace():
    trace = six_op_trace()
    auto, planned = _seeded(trace, 24, params=UNREFINED)
    result = plan_tiers(planned, 24, GEN5, UNREFINED, 0.0)
    tiers = result.plan
    assert result.reason is None and validate_plan(planned, tiers).valid
    auto_us = simulate(planned, auto, GEN5).iteration_us
    ideal_us = 60.0
    greedy_us = ideal_us * (1 + auto.stats["candidates"]["greedy(swap_weight=inf)"])
    tiers_us = simulate(planned, tiers, GEN5).iteration_us
    # the greedy recomputes A (10 µs, op 0 again); a swap of 16 B lands in time for ~0 µs
    assert greedy_us == pytest.approx(70.0)
    assert tiers_us < greedy_us - 5
    # the last resort keeps W on the device and swaps A: that swap, before any refining
    assert auto.stats["member"] == KEPT_MEMBER and auto_us == pytest.approx(tiers_us)
    assert tiers.solver == "tiers" and tiers.stats["seed_iteration_us"] == pytest.approx(auto_us)
    # auto's own final refinement (the same search, pinned level only) finds it from the
    # greedy's plan too
    refined, _planned = _seeded(trace, 24)
    assert simulate(planned, refined, GEN5).iteration_us == pytest.approx(tiers_us)
    assert refined.solver == "auto" and refined.stats["refine_gain_us"] > 5


def _small_trace(seed: int):
    import random

    rng = random.Random(seed)
    n = 12
    buffers = [Buffer(0, 64, 0, n, (0, n - 1), PERSISTENT)]
    for i in range(1, 9):
        start = rng.randrange(0, n - 2)
        end = rng.randrange(start + 2, n + 1)
        uses = tuple(sorted({start, end - 1, rng.randrange(start, end)}))
        buffers.append(Buffer(i, rng.choice((32, 48, 64, 96)), start, end, uses))
    return with_recompute_recipes(trace_of([rng.choice((5.0, 20.0, 50.0)) for _ in range(n)],
                                           *buffers, name=f"small{seed}"))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from((0.6, 0.75, 0.9)), st.sampled_from((None, 0)))
def test_the_search_is_valid_and_never_slower_than_its_start(seed, fraction, pinned):
    trace = _small_trace(seed)
    budget = max(1, int(trace.lower_bound_bytes() * fraction))
    plan, planned = _seeded(trace, budget)
    if plan.status.value != "feasible":
        return
    params = TierParams(time_limit_s=1.0, pinned_host_bytes=pinned)
    tiers = search_tiers(planned, plan, GEN5, params)
    stats = tiers.stats
    assert validate_plan(planned, tiers).valid
    start = search_tiers(planned, plan, GEN5, replace(params, max_evaluations=1))
    start_us = simulate(planned, start, GEN5).iteration_us
    tiers_us = simulate(planned, tiers, GEN5).iteration_us
    assert tiers_us <= start_us + 1e-9
    assert stats["iteration_us"] == pytest.approx(tiers_us)
    if pinned is None:
        assert start_us == pytest.approx(simulate(planned, plan, GEN5).iteration_us)
    else:
        assert stats["pinned_peak_bytes"] == 0


def test_same_seed_same_plan_and_the_search_improves_the_seed():
    trace = _small_trace(14)
    budget = int(trace.lower_bound_bytes() * 0.6)
    # seeded by on-demand (auto's own plan here, its last resort's, is one the search
    # cannot improve)
    seed = plan_with_budget(trace, budget, "on-demand", GEN5, UNREFINED)
    plan, planned = seed.plan, seed.trace
    params = TierParams(seed=1, time_limit_s=30.0, max_evaluations=200)
    one = search_tiers(planned, plan, GEN5, params)
    stats = one.stats
    two = search_tiers(planned, plan, GEN5, params)
    assert one.residencies == two.residencies and one.actions == two.actions
    assert sum(stats["moves_accepted"].values()) >= 1
    assert stats["iteration_us"] < stats["seed_iteration_us"] - 1
    assert validate_plan(planned, one).valid


def test_max_evaluations_bounds_the_search():
    trace = _small_trace(14)
    plan, planned = _seeded(trace, int(trace.lower_bound_bytes() * 0.6))
    searched = search_tiers(planned, plan, GEN5, TierParams(max_evaluations=3))
    assert searched.stats["evaluations"] == 3


def test_a_pinned_limit_moves_swaps_to_pageable_memory():
    trace = six_op_trace()
    plan = six_op_swap_plan(trace)
    assert pinned_peak_bytes(trace, plan) == 16
    # the repair alone (one evaluation: no move is tried)
    repaired = search_tiers(trace, plan, GEN5, TierParams(pinned_host_bytes=0,
                                                          max_evaluations=1))
    stats = repaired.stats
    assert validate_plan(trace, repaired).valid
    swaps = [a for a in repaired.actions if isinstance(a, (SwapOut, SwapIn))]
    assert swaps and all(a.level == PAGEABLE for a in swaps)
    assert stats["pinned_peak_bytes"] == 0 and stats["pageable_swaps"] == len(swaps) // 2
    copies = simulate(trace, repaired, GEN5).copies
    assert all(c[5] - c[4] == pytest.approx(GEN5.copy_us(16, c[1], PAGEABLE)) for c in copies)
    # the search keeps the limit and does not get slower than the repaired start
    searched = search_tiers(trace, plan, GEN5, TierParams(pinned_host_bytes=0,
                                                          time_limit_s=5.0))
    assert validate_plan(trace, searched).valid and searched.stats["pinned_peak_bytes"] == 0
    assert (simulate(trace, searched, GEN5).iteration_us
            <= simulate(trace, repaired, GEN5).iteration_us + 1e-9)


def test_plan_tiers_reports_when_no_seed_policy_found_a_plan():
    trace = six_op_trace()
    result = plan_tiers(with_recompute_recipes(trace), 1, GEN5, BudgetParams(), 0.0)
    assert not result.feasible and result.reason.startswith("tiers: no seed policy")
    assert result.plan.stats["reason"] == result.reason


def test_a_move_listed_for_an_earlier_state_does_not_apply():
    """Moves are listed once per op and tried against the state the accepted ones left: a
    residency index or an action that is gone makes the move not apply (it used to raise
    IndexError deep in a long search)."""
    trace = six_op_trace()
    state = TierState(trace, six_op_swap_plan(trace))
    moves = TierMoves(trace, cost_model("gen5"))
    report = simulate(trace, state.plan(), cost_model("gen5"), validate=False)
    waited = [0.0] * trace.num_ops
    assert apply_move(moves, state, Move("reoffset", SpanRef(1, 5)), report, waited) is None
    assert apply_move(moves, state, Move("cancel_swap", SwapOut(1, 2)), report, waited) is None
    assert apply_move(moves, state, Move("level", SwapOut(1, 0)), report, waited) is not None


@pytest.mark.parametrize("kwargs, text", [
    ({"time_limit_s": 0}, "time_limit_s"), ({"checkpoint_ops": 0}, "checkpoint_ops"),
    ({"tolerance": 1.5}, "tolerance"), ({"pinned_host_bytes": -1}, "pinned_host_bytes"),
    ({"seed_policies": ("tiers",)}, "seed_policies"), ({"max_passes": 0}, "max_passes"),
    ({"max_evaluations": 0}, "max_evaluations"),
])
def test_bad_tier_params_are_solver_errors(kwargs, text):
    with pytest.raises(SolverError, match=text):
        TierParams(**kwargs)


def test_search_needs_a_feasible_swapping_plan():
    from cupool.planning import plan as static_plan

    trace = six_op_trace()
    with pytest.raises(SolverError, match="feasible swapping plan"):
        search_tiers(trace, static_plan(trace, "greedy-size"), GEN5)


def _moves_by_scanning(state, op, waited, link_moves, level_moves):
    """The moves at ``op``, found by walking every action and residency in plan order."""
    out = []
    for a in state.actions:
        if isinstance(a, SwapOut) and a.after_op == op and link_moves:
            out += [Move("cancel_swap", a)] + ([Move("level", a)] if level_moves else [])
            out.append(Move("swap_to_recompute", a))
        elif isinstance(a, RecomputeAction) and a.before_op == op:
            out += [Move("cancel_recompute", a), Move("recompute_to_swap", a)]
        elif isinstance(a, SwapIn) and a.due_op == op and waited[op] > 0:
            out.append(Move("earlier_trigger", a))
    if waited[op] > 0:
        for b, spans in state.spans.items():
            for k, span in enumerate(spans):
                if span.start == op:
                    out += [Move("reoffset", SpanRef(b, k)), Move("overwrite", SpanRef(b, k))]
    return out


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from((0.6, 0.75)), st.booleans(), st.booleans())
def test_moves_by_anchor_are_the_moves_of_a_walk_over_the_whole_plan(seed, fraction, link,
                                                                      level):
    import numpy as np

    trace = _small_trace(seed)
    plan, planned = _seeded(trace, max(1, int(trace.lower_bound_bytes() * fraction)),
                            params=UNREFINED)
    if not plan.residencies:
        return
    state = TierState(planned, plan)
    anchors = Anchors(state)
    waited = np.array([float(i % 2) for i in range(planned.num_ops)])
    for op in range(planned.num_ops):
        expected = _moves_by_scanning(state, op, waited, link, level)
        assert moves_at(state, op, None, waited, link, level, anchors) == expected
        assert moves_at(state, op, None, waited, link, level) == expected


def _recounted_live(state) -> list[int]:
    live = [0] * state.n
    for b, spans in state.spans.items():
        for span in spans:
            for op in range(span.start, span.end):
                live[op] += state.sizes[b]
    return live


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from((0.6, 0.75)), st.integers(0, 2 ** 32 - 1))
def test_live_bytes_kept_across_copies_and_moves_are_those_of_the_spans(seed, fraction, walk):
    """A state's ``live`` (its original's plus what it changed) and its residency columns
    are what its spans hold, along random chains of moves, and the original's are unchanged
    by its copies' moves."""
    import random

    import numpy as np

    trace = _small_trace(seed)
    plan, planned = _seeded(trace, max(1, int(trace.lower_bound_bytes() * fraction)),
                            params=UNREFINED)
    if not plan.residencies:
        return
    rng = random.Random(walk)
    cost = GEN5
    moves = TierMoves(planned, cost)
    state = TierState(planned, plan)
    report = simulate(planned, state.plan(), cost, validate=False)
    waited = np.ones(planned.num_ops)
    states = [state]
    for _ in range(30):
        parent = rng.choice(states)
        before = parent.live().tolist()
        listed = [m for op in range(planned.num_ops)
                  for m in moves_at(parent, op, report, waited, True, True)]
        if not listed:
            break
        child = apply_move(moves, parent, rng.choice(listed), report, waited)
        assert parent.live().tolist() == before == _recounted_live(parent)
        _assert_columns_of_the_spans(parent)
        if child is not None:
            assert child.live().tolist() == _recounted_live(child)
            _assert_columns_of_the_spans(child)
            states.append(child)


def _assert_columns_of_the_spans(state) -> None:
    """``state.columns()`` and ``state.plan()`` (kept across copies, the buffers owned since
    made again) hold the residencies made afresh from its spans."""
    from cupool.planning.budget.span_table import Residencies

    order = sorted(state.spans)
    parts = [tuple(Residency(b, s.start, s.end, s.offset) for s in state.spans[b])
             for b in order]
    fresh = Residencies.of(order, {b: i for i, b in enumerate(order)}, parts, state.sizes)
    kept = state.columns()
    assert kept.position == fresh.position
    for name in ("first", "buffer_ids", "starts", "ends", "lows", "highs"):
        assert getattr(kept, name).tolist() == getattr(fresh, name).tolist(), name
    plan = state.plan()  # its residencies kept across copies too
    assert plan.residencies == tuple(r for part in parts for r in part)
    assert plan.arena_bytes == max((r.offset + state.sizes[r.buffer_id]
                                    for r in plan.residencies), default=0)


def test_residency_columns_kept_across_copies_follow_merged_and_moved_spans():
    """A copy's columns are its original's with the buffers it owned made again: one whose
    residencies merged (fewer rows, the later buffers' rows move up), one moved."""
    trace = six_op_trace()
    state = TierState(trace, six_op_swap_plan(trace))
    state.plan()
    _assert_columns_of_the_spans(state)
    child = state.copy()
    merged = child.own(1)
    merged[0].end = merged[1].end
    del merged[1]
    child.own(2)[0].offset = 24
    _assert_columns_of_the_spans(child)
    assert child.columns().starts.tolist() == [0, 0, 1]
    _assert_columns_of_the_spans(state)
    grandchild = child.copy()  # the merged columns, kept, and one more edit on top
    grandchild.own(0)[0].end = 5
    _assert_columns_of_the_spans(grandchild)
    _assert_columns_of_the_spans(child)


_ACTIONS = st.lists(st.one_of(
    st.builds(SwapOut, st.integers(0, 3), st.integers(0, 2)),
    st.builds(SwapIn, st.integers(0, 3), st.integers(0, 2), st.integers(0, 2)),
    st.builds(RecomputeAction, st.integers(0, 3), st.integers(0, 2))), max_size=12)


@settings(max_examples=100, deadline=None)
@given(_ACTIONS, _ACTIONS, st.booleans())
def test_actions_are_found_and_dropped_as_list_scans_do(actions, others, huge):
    """``_holds`` is ``in`` and ``_without`` drops what ``==`` matches, on the column of
    buffer ids or (an id past 64 bits) by the scans: equal actions made apart, the same
    object twice, kinds and buffers mixed."""
    from cupool.planning.budget.multilevel_moves import _without
    from cupool.planning.budget.multilevel_walk import _holds

    if huge:
        others = [*others, SwapOut(2 ** 64, 0)]
    actions = actions + actions[:2] + [replace(a) for a in others[:3]]
    for probe in [*actions, *others]:
        assert _holds(actions, probe) == (probe in actions)
    for k in range(len(others) + 1):
        gone = tuple(others[:k]) + tuple(actions[k:k + 1])
        assert _without(actions, gone) == [a for a in actions if a not in gone]
        kept = _without(actions, gone)
        assert all(any(a is b for b in actions) for a in kept)


class _OtherOut(SwapOut):
    """A subclass: anchored by its ``isinstance`` test."""


@settings(max_examples=100, deadline=None)
@given(_ACTIONS, st.booleans())
def test_anchors_list_each_ops_actions_in_plan_order(actions, subclass):
    """``Anchors.at`` (on columns of anchor ops) lists what the loop over every action
    lists: the same objects, in plan order, an object listed twice as often as it occurs."""
    from types import SimpleNamespace

    from cupool.planning.budget.multilevel_walk import _by_anchor_op

    actions = actions + actions[:2]
    if subclass:
        actions.append(_OtherOut(1, 1))
    anchors = Anchors(SimpleNamespace(actions=actions))
    by_op = _by_anchor_op(actions)
    for op in range(-1, 4):
        listed = anchors.at(op)
        assert len(listed) == len(by_op.get(op, []))
        assert all(a is b for a, b in zip(listed, by_op.get(op, []), strict=True))
