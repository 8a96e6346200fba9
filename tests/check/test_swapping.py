"""Rules for swapping plans: one good and one bad case per rule."""

from __future__ import annotations

import dataclasses

import pytest

from cupool.check import validate_plan, validate_swap_plan
from cupool.core.vocabulary import (
    PERSISTENT,
    Buffer,
    Placement,
    RecomputeAction,
    Residency,
    SwapIn,
    SwapOut,
)
from tests.swap_cases import (
    six_op_recompute_plan,
    six_op_swap_plan,
    six_op_trace,
    swap_plan,
    trace_of,
)

W0 = Residency(0, 0, 6, 0)
B = Residency(2, 1, 3, 8)


def check(residencies, actions=(), budget=None, arena=None, trace=None):
    trace = trace or six_op_trace()
    return validate_plan(trace, swap_plan(trace, residencies, actions, budget, arena))


def test_good_plans_are_valid():
    trace = six_op_trace()
    assert validate_swap_plan(trace, six_op_swap_plan(trace))
    assert validate_plan(trace, six_op_recompute_plan(trace))
    # synchronous swap-in: triggered and due at the use
    assert check([W0, Residency(1, 0, 1, 8), Residency(1, 4, 5, 8), B],
                 [SwapOut(1, 0), SwapIn(1, 4, 4)])
    # persistent W offloaded across the iteration boundary: in before op 0, out after op 5
    assert check([Residency(0, 0, 1, 0), Residency(0, 5, 6, 0), Residency(1, 0, 5, 8),
                  Residency(2, 1, 3, 24)],
                 [SwapIn(0, 0, 0), SwapOut(0, 0), SwapIn(0, 5, 5), SwapOut(0, 5)])
    # persistent W swapped out between its uses but resident at both ends of the iteration
    assert check([Residency(0, 0, 1, 0), Residency(0, 3, 6, 0), Residency(1, 0, 5, 8),
                  Residency(2, 1, 3, 24)], [SwapOut(0, 0), SwapIn(0, 3, 5)])


@pytest.mark.parametrize(("residencies", "actions", "rule", "words"), [
    ([W0, Residency(1, 0, 2, 8), Residency(1, 1, 5, 8), B], [], "order", "overlap in time"),
    ([W0, Residency(1, 0, 6, 8), B], [], "lifetime", "[0, 6) must lie inside"),
    ([W0, B], [], "placed", "buffer 1 has no residency"),
    ([W0, Residency(1, 1, 5, 8), B], [], "entry", "must start at op 0"),
    ([W0, Residency(1, 0, 1, 8), Residency(1, 3, 5, 8), B], [], "entry",
     "entered by neither"),
    ([W0, Residency(1, 0, 1, 8), Residency(1, 3, 5, 8), B], [SwapIn(1, 2, 4)], "entry",
     "no residency of it starts at op 2"),
    ([W0, Residency(1, 0, 1, 8), Residency(1, 3, 5, 8), B],
     [SwapOut(1, 0), SwapIn(1, 3, 4), RecomputeAction(1, 3)], "entry", "two actions"),
    ([W0, Residency(1, 0, 1, 8), Residency(1, 3, 5, 8), B], [SwapIn(1, 3, 4)], "swap_in",
     "exactly one swap-out"),
    ([W0, Residency(1, 0, 1, 8), Residency(1, 3, 5, 8), B], [SwapOut(1, 0), SwapIn(1, 3, 5)],
     "swap_in", "due at op 5"),
    ([W0, Residency(1, 0, 1, 8), Residency(1, 3, 5, 8), B], [SwapOut(1, 1), SwapIn(1, 3, 4)],
     "reuse", "released its bytes at op 1"),
    ([W0, Residency(1, 0, 1, 8), Residency(1, 3, 5, 8), B], [SwapOut(1, 2), SwapIn(1, 3, 4)],
     "swap_out", "no residency of it covers op 2"),
    ([W0, Residency(1, 0, 1, 8), Residency(1, 3, 5, 8), B], [SwapOut(1, 0)], "swap_out",
     "not followed by a swap-in"),
    ([W0, Residency(1, 0, 1, 8), Residency(1, 3, 4, 8), B], [SwapOut(1, 0), SwapIn(1, 3, 3)],
     "use", "used at op 4 but not resident"),
    ([W0, Residency(1, 0, 1, 8), Residency(1, 2, 5, 8), Residency(2, 1, 3, 24)],
     [SwapOut(1, 0), SwapIn(1, 2, 3), SwapOut(1, 3), SwapIn(1, 4, 4)], "entry",
     "no residency of it starts at op 4"),
    ([W0, Residency(1, 0, 1, 8), Residency(1, 4, 5, 8), Residency(2, 1, 2, 8),
      Residency(2, 2, 3, 24)], [RecomputeAction(1, 4), RecomputeAction(2, 2)], "recompute",
     "buffer 2 has no recompute recipe"),
    ([W0, Residency(1, 0, 1, 8), Residency(1, 4, 5, 8), B], [RecomputeAction(1, 4),
                                                            SwapOut(1, 0)],
     "swap_out", "not followed by a swap-in"),
    # persistent W resident at both ends of the iteration, but at two addresses
    ([Residency(0, 0, 1, 0), Residency(0, 3, 6, 40), Residency(1, 0, 5, 8),
      Residency(2, 1, 3, 24)], [SwapOut(0, 0), SwapIn(0, 3, 5)], "boundary",
     "must share one offset"),
])
def test_broken_rules_are_named(residencies, actions, rule, words):
    report = check(residencies, actions)
    assert not report.valid
    assert report.rule == rule, report.message
    assert words in report.message


def test_swap_out_before_a_later_use_loses_writes():
    trace = trace_of([1.0] * 4, Buffer(1, 16, 0, 4, (0, 1, 3)))
    plan = swap_plan(trace, [Residency(1, 0, 2, 0), Residency(1, 2, 4, 0)],
                     [SwapOut(1, 0), SwapIn(1, 2, 3)])
    report = validate_plan(trace, plan)
    assert report.rule == "swap_out" and "use at op 1" in report.message


def test_use_before_the_swap_in_lands():
    trace = trace_of([1.0] * 5, Buffer(1, 16, 0, 5, (0, 3, 4)))
    plan = swap_plan(trace, [Residency(1, 0, 1, 0), Residency(1, 2, 5, 0)],
                     [SwapOut(1, 0), SwapIn(1, 2, 4)])
    report = validate_plan(trace, plan)
    assert report.rule == "swap_in" and "due at op 4" in report.message
    trace = trace_of([1.0] * 5, Buffer(1, 16, 0, 5, (0, 4)), Buffer(2, 4, 0, 5, (2,)))
    ok = swap_plan(trace, [Residency(1, 0, 1, 0), Residency(1, 2, 5, 0), Residency(2, 0, 5, 16)],
                   [SwapOut(1, 0), SwapIn(1, 2, 4)])
    assert validate_plan(trace, ok)


def test_swap_out_of_data_not_yet_landed():
    trace = trace_of([1.0] * 6, Buffer(1, 16, 0, 6, (0, 5)))
    plan = swap_plan(trace, [Residency(1, 0, 1, 0), Residency(1, 2, 4, 0), Residency(1, 5, 6, 0)],
                     [SwapOut(1, 0), SwapIn(1, 2, 3), SwapOut(1, 2), SwapIn(1, 5, 5)])
    report = validate_plan(trace, plan)
    assert report.rule == "swap_out" and "before its data is valid" in report.message


def test_recompute_inputs_must_be_resident_and_valid():
    trace = six_op_trace()
    # W offloaded at op 4: A's recipe cannot run there
    plan = swap_plan(trace, [Residency(0, 0, 1, 0), Residency(0, 5, 6, 0), Residency(1, 0, 1, 8),
                             Residency(1, 4, 5, 8), B],
                     [SwapOut(0, 0), SwapIn(0, 5, 5), RecomputeAction(1, 4)])
    report = validate_plan(trace, plan)
    assert report.rule == "recompute" and "input buffer 0 is not resident" in report.message
    # W swapped in at op 3 but only due at op 5: not valid before op 4 either
    plan = swap_plan(trace, [Residency(0, 0, 1, 0), Residency(0, 3, 6, 0), Residency(1, 0, 1, 8),
                             Residency(1, 4, 5, 8), Residency(2, 1, 3, 8)],
                     [SwapOut(0, 0), SwapIn(0, 3, 5), RecomputeAction(1, 4)])
    report = validate_plan(trace, plan)
    assert report.rule == "recompute" and "due at op 5" in report.message


def test_recompute_chain_runs_in_plan_order():
    from cupool.core.vocabulary import Recompute
    trace = trace_of([1.0] * 4, Buffer(1, 8, 0, 4, (0, 3), recompute=Recompute(0, ())),
                     Buffer(2, 8, 1, 4, (1, 3), recompute=Recompute(1, (1,))))
    residencies = [Residency(1, 0, 2, 0), Residency(1, 3, 4, 0), Residency(2, 1, 2, 8),
                   Residency(2, 3, 4, 8)]
    good = swap_plan(trace, residencies, [RecomputeAction(1, 3), RecomputeAction(2, 3)])
    assert validate_plan(trace, good)
    bad = swap_plan(trace, residencies, [RecomputeAction(2, 3), RecomputeAction(1, 3)])
    report = validate_plan(trace, bad)
    assert report.rule == "recompute" and "recomputed later" in report.message


def test_boundary_rules_for_persistent_buffers():
    assert check([Residency(0, 0, 1, 0), Residency(0, 5, 6, 0), Residency(1, 0, 5, 8),
                  Residency(2, 1, 3, 24)],
                 [SwapIn(0, 0, 0), SwapOut(0, 0), SwapIn(0, 5, 5)]).rule == "boundary"
    report = check([Residency(0, 0, 1, 0), Residency(0, 5, 6, 0), Residency(1, 0, 5, 8),
                    Residency(2, 1, 3, 24)], [SwapIn(0, 0, 0), SwapOut(0, 0), SwapOut(0, 5)])
    assert report.rule == "swap_out" and "not followed by a swap-in" in report.message
    report = check([Residency(0, 0, 6, 0), Residency(1, 0, 5, 8), Residency(2, 1, 3, 24)],
                   [SwapIn(1, 0, 0)])
    assert report.rule == "entry" and "only a persistent buffer" in report.message
    trace = trace_of([1.0] * 3, Buffer(0, 8, 0, 3, (0,), PERSISTENT))
    report = validate_plan(trace, swap_plan(trace, [Residency(0, 0, 1, 0)], [SwapOut(0, 0)]))
    assert report.rule == "boundary" and "must end at op 3" in report.message
    plan = swap_plan(trace, [Residency(0, 0, 1, 0)])
    report = validate_plan(trace, dataclasses.replace(plan, actions=(RecomputeAction(0, 0),)))
    assert report.rule in ("entry", "recompute")


def test_overlap_names_both_buffers_and_bytes():
    report = check([W0, Residency(1, 0, 5, 8), Residency(2, 1, 3, 16)], [], budget=40, arena=40)
    assert report.rule == "overlap"
    assert report.message == ("op 1: buffer 1 (at [8, 24) from op 0) and buffer 2 (at [16, 32) "
                              "from op 1) share bytes [16, 24)")
    assert report.buffers == (1, 2)


def test_memory_rules():
    trace = six_op_trace()
    plan = six_op_swap_plan(trace)
    report = validate_plan(trace, dataclasses.replace(plan, capacity_bytes=20))
    assert report.rule == "budget" and "resident bytes (=24) exceed the budget (=20)" in \
        report.message
    report = validate_plan(trace, dataclasses.replace(plan, arena_bytes=20))
    assert report.rule == "arena" and "beyond the plan's arena_bytes (=20)" in report.message
    spread = swap_plan(trace, [Residency(0, 0, 6, 0), Residency(1, 0, 1, 100),
                               Residency(1, 3, 5, 100), Residency(2, 1, 3, 8)],
                       [SwapOut(1, 0), SwapIn(1, 3, 4)], budget=24)
    report = validate_plan(trace, spread)
    assert report.rule == "capacity" and "arena_bytes (=116) exceed the budget (=24)" in \
        report.message


def test_plan_level_rules():
    trace = six_op_trace()
    plan = six_op_swap_plan(trace)
    assert validate_plan(trace, dataclasses.replace(plan, trace_digest="x")).rule == "trace"
    assert validate_plan(trace, dataclasses.replace(plan, capacity_bytes=None)).rule == "budget"
    report = validate_plan(trace, dataclasses.replace(plan, placements=(Placement(0, 0),)))
    assert report.rule == "placements"
    extra = dataclasses.replace(plan, residencies=(*plan.residencies, Residency(9, 0, 1, 0)))
    assert validate_plan(trace, extra).rule == "known"
    extra = dataclasses.replace(plan, actions=(*plan.actions, SwapOut(9, 0)))
    assert validate_plan(trace, extra).rule == "known"
    negative = dataclasses.replace(plan, residencies=(Residency(0, 0, 6, -8),
                                                      *plan.residencies[1:]))
    assert validate_plan(trace, negative).rule == "offset"


def test_rematerialization_after_the_lifetime():
    """A freed intermediate may come back after its lifetime only by a recompute."""
    from cupool.core.vocabulary import Recompute
    trace = trace_of([1.0] * 4, Buffer(0, 8, 0, 2, (0, 1), recompute=Recompute(0)),
                     Buffer(1, 8, 1, 4, (1, 3), recompute=Recompute(1, (0,))),
                     Buffer(2, 8, 0, 2, (0, 1)))
    spans = [Residency(0, 0, 2, 0), Residency(1, 1, 2, 8), Residency(1, 3, 4, 8),
             Residency(2, 0, 2, 16)]
    good = swap_plan(trace, [*spans, Residency(0, 3, 4, 0)],
                     [RecomputeAction(0, 3), RecomputeAction(1, 3)])
    assert validate_plan(trace, good).valid
    swapped = swap_plan(trace, [Residency(0, 0, 1, 0), Residency(0, 1, 2, 0), *spans[1:],
                                Residency(0, 3, 4, 0)],
                        [SwapOut(0, 0), SwapIn(0, 1, 1), SwapIn(0, 3, 3),
                         RecomputeAction(1, 3)])
    report = validate_plan(trace, swapped)
    assert not report.valid
    no_recipe = swap_plan(trace, [*spans, Residency(2, 3, 4, 0)],
                          [RecomputeAction(2, 3)])
    report = validate_plan(trace, no_recipe)
    assert report.rule == "lifetime" and "recompute recipe" in report.message
    missing_input = swap_plan(trace, spans, [RecomputeAction(1, 3)])
    report = validate_plan(trace, missing_input)
    assert report.rule == "recompute" and "input buffer 0 is not resident" in report.message


def _chain_trace():
    """op:   0    1    2    3    4
    W 0: [========================)   persistent, 8 B, read by op 0
    x1:  [====)                       made by op 0 from W, read by op 1
    x2:       [====)         [=)      made by op 1 from x1, read again by op 4
    T:             [=========)        32 B, ops 2-3 (the pressure)
    Y:                       [=)      8 B, made by op 4
    """
    from cupool.core.vocabulary import Recompute

    return trace_of([10.0] * 5, Buffer(0, 8, 0, 5, (0,), PERSISTENT),
                    Buffer(1, 16, 0, 2, (0, 1), recompute=Recompute(0, (0,))),
                    Buffer(2, 16, 1, 5, (1, 4), recompute=Recompute(1, (1,))),
                    Buffer(3, 32, 2, 4, (2, 3)), Buffer(4, 8, 4, 5, (4,)))


def _chain_plan(trace, residencies=None, actions=None, budget=None):
    residencies = residencies or [
        Residency(0, 0, 5, 0), Residency(1, 0, 2, 8), Residency(2, 1, 2, 24),
        Residency(3, 2, 4, 8), Residency(1, 4, 4, 8), Residency(2, 4, 5, 24),
        Residency(4, 4, 5, 40)]
    actions = actions or [RecomputeAction(1, 4), RecomputeAction(2, 4)]
    return swap_plan(trace, residencies, actions, budget)


def test_a_nested_recompute_passes_through_an_ephemeral_residency():
    trace = _chain_trace()
    assert validate_plan(trace, _chain_plan(trace))
    # the bytes: x1 (ephemeral) and x2 are held together during x2's recompute only
    assert validate_plan(trace, _chain_plan(trace, budget=48))


@pytest.mark.parametrize(("change", "rule", "words"), [
    ({"actions": [RecomputeAction(2, 4), RecomputeAction(1, 4)]}, "recompute",
     "input buffer 1 is recomputed later"),
    ({"actions": [RecomputeAction(1, 4)], "residencies": [
        Residency(0, 0, 5, 0), Residency(1, 0, 2, 8), Residency(2, 1, 5, 24),
        Residency(3, 2, 4, 40), Residency(1, 4, 4, 8), Residency(4, 4, 5, 72)]},
     "ephemeral", "read by no later"),
    ({"residencies": [
        Residency(0, 0, 5, 0), Residency(1, 0, 2, 8), Residency(2, 1, 2, 24),
        Residency(3, 2, 4, 8), Residency(1, 4, 4, 8), Residency(2, 4, 5, 8),
        Residency(4, 4, 5, 40)]}, "overlap",
     "op 4: buffer 1"),
    ({"budget": 47}, "budget", "op 4 (before it, recompute 1)"),
    ({"residencies": [
        Residency(0, 0, 5, 0), Residency(1, 0, 2, 8), Residency(2, 1, 2, 24),
        Residency(3, 2, 4, 8), Residency(1, 0, 0, 8), Residency(2, 4, 5, 24),
        Residency(4, 4, 5, 40)]}, "lifetime",
     "ephemeral"),
])
def test_ephemeral_rules(change, rule, words):
    trace = _chain_trace()
    report = validate_plan(trace, _chain_plan(trace, **change))
    assert not report.valid and report.rule == rule, report
    assert words in report.message
