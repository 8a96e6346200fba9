"""The runtime's feedback (``adjust_triggers``): late swap-ins' triggers move earlier by the
rule, the plan stays valid, a stuck swap-in moves the copy queued ahead of it, and the
simulator's own waits converge to a plan it predicts on time."""

from __future__ import annotations

import pytest

from cupool.check import validate_swap_plan
from cupool.core.vocabulary import Buffer, Residency, SwapIn, SwapOut
from cupool.planning.budget.feedback import (
    FEEDBACK_MARGIN,
    adjust_triggers,
    move_swap_in,
    predicted_waits,
    queued_ahead,
)
from cupool.sim.cost import cost_model
from cupool.sim.simulator import simulate
from tests.swap_cases import mistimed, resnet_capuchin_plan, swap_plan, trace_of

_planned = resnet_capuchin_plan


def test_feedback_moves_late_triggers_earlier_and_keeps_the_plan_valid():
    _trace, plan, planned = _planned()
    late_plan, late = mistimed(plan)
    assert late and validate_swap_plan(planned, late_plan).valid
    op_us = [op.duration_us or 10.0 for op in planned.ops]
    waits = {a.buffer_id: 200.0 for a in late[:5]}
    result = adjust_triggers(planned, late_plan, waits, op_us, validate_swap_plan)
    adjusted, moves = result.plan, result.moves
    assert validate_swap_plan(planned, adjusted).valid
    assert moves and all(new < old for old, new in moves.values())
    for b, (old, new) in moves.items():
        # the rule: far enough to cover 1.25 x the wait, unless bounded by the end of the
        # buffer's previous residency (its swap-out point) or by the validator
        covered = sum(op_us[new:old])
        spans = sorted((r for r in adjusted.residencies if r.buffer_id == b),
                       key=lambda r: r.start)
        k = next(k for k, r in enumerate(spans) if r.start == new)
        floor = spans[k - 1].end if k > 0 else 0
        action = next(a for a in adjusted.actions
                      if isinstance(a, SwapIn) and a.buffer_id == b and a.trigger_op == new)
        bounded = new == floor or not validate_swap_plan(
            planned, move_swap_in(adjusted, action, new - 1)).valid
        assert covered >= FEEDBACK_MARGIN * 200.0 or bounded, (b, old, new)


def test_predicted_waits_match_the_simulated_copies():
    _trace, plan, planned = _planned()
    late_plan, late = mistimed(plan)
    report = simulate(planned, late_plan, cost_model("gen5"), validate=False)
    waits = predicted_waits(report, late_plan)
    assert set(waits) <= {a.buffer_id for a in late} and waits
    b = max(waits, key=waits.get)
    action = next(a for a in late_plan.actions if isinstance(a, SwapIn) and a.buffer_id == b)
    end = max(c[5] for c in report.copies if c[0] == b and c[1] == "h2d")
    assert waits[b] == pytest.approx(end - report.op_times[action.due_op][0])


def _blocked_plan():
    """op:        0    1    2    3    4    5    6    7    8    9   (20 µs each, 1 GB/s, 3 µs)
    X 0 (30 kB): [=)  out after 0 (D2H 20..53)   in at 4, due 8 (H2D 80..113)
    Y 1 (1 kB):  [==============)  out after 3 (D2H 80..84)
                                   in at 4, due 5: queued behind X (H2D 113..117), op 5
                                   dispatched at 100 waits 17 µs, and Y cannot move: it
                                   re-enters at 4, where its bytes left."""
    trace = trace_of([20.0] * 10, Buffer(0, 30000, 0, 9, (0, 8)),
                     Buffer(1, 1000, 0, 6, (0, 3, 5)))
    plan = swap_plan(trace, [Residency(0, 0, 1, 0), Residency(0, 4, 9, 0),
                             Residency(1, 0, 4, 30000), Residency(1, 4, 6, 30000)],
                     [SwapOut(0, 0), SwapOut(1, 3), SwapIn(0, 4, 8), SwapIn(1, 4, 5)])
    return trace, plan, cost_model(1.0, latency_us=3.0)


def test_a_stuck_late_swap_in_moves_the_copy_queued_ahead_of_it():
    trace, plan, cost = _blocked_plan()
    assert validate_swap_plan(trace, plan).valid
    report = simulate(trace, plan, cost, validate=False)
    waits = predicted_waits(report, plan)
    assert waits == {1: pytest.approx(17.0)}
    assert queued_ahead(report, plan, waits) == {0: pytest.approx(17.0)}
    assert predicted_waits(report, plan, guard_us=5.0) == {1: pytest.approx(22.0)}

    def predict(candidate):
        return simulate(trace, candidate, cost, validate=False)

    result = adjust_triggers(trace, plan, waits, [20.0] * 10, validate_swap_plan, predict)
    adjusted, moves = result.plan, result.moves
    # X moves by the rule for Y's wait: 1.25 x 17 µs needs two 20 µs ops, so 4 -> 2; its
    # copy then runs 53..86 and Y's 86..90, before op 5 at 100
    assert moves == {0: (4, 2)}
    assert validate_swap_plan(trace, adjusted).valid
    assert predicted_waits(predict(adjusted), adjusted) == {}
    # without the simulator, Y's measured wait alone cannot move anything
    assert adjust_triggers(trace, plan, waits, [20.0] * 10, validate_swap_plan).moves == {}


def test_feedback_on_the_simulator_reaches_a_late_free_plan():
    """From the mis-timed ResNet-50 plan, the rule applied to the simulator's own waits
    (with a 10 µs guard band) ends with no swap-in the simulator predicts late."""
    _trace, plan, planned = _planned()
    late_plan, _late = mistimed(plan)
    cost = cost_model("gen5")

    def predict(candidate):
        return simulate(planned, candidate, cost, validate=False)

    op_us = cost.op_times(planned)
    result = adjust_triggers(planned, late_plan, predicted_waits(predict(late_plan), late_plan),
                             op_us, validate_swap_plan, predict, guard_us=10.0)
    adjusted, moves = result.plan, result.moves
    assert moves and validate_swap_plan(planned, adjusted).valid
    assert predicted_waits(predict(adjusted), adjusted) == {}


def _noise_prone_plan():
    """op:        0    1    2    3    4    5    6    7    8    9   (20 µs each, 1 GB/s, 3 µs)
    X 0 (30 kB): [=)  out after 0 (D2H 20..53)        in at 4, due 8 (H2D 80..113)
    Y 1 (1 kB):  [======)  out after 1            in at 3, due 4 (H2D 60..64)
    Both on time. A measured wait on X (noise: the model predicts it 47 µs early) asks
    for X's trigger at 1: its copy then runs 53..86 and Y's, queued behind it, lands at
    90, 10 µs after op 4 is dispatched."""
    trace = trace_of([20.0] * 10, Buffer(0, 30000, 0, 9, (0, 8)),
                     Buffer(1, 1000, 0, 6, (0, 1, 4)))
    plan = swap_plan(trace, [Residency(0, 0, 1, 0), Residency(0, 4, 9, 0),
                             Residency(1, 0, 2, 30000), Residency(1, 3, 6, 30000)],
                     [SwapOut(0, 0), SwapOut(1, 1), SwapIn(1, 3, 4), SwapIn(0, 4, 8)])
    return trace, plan, cost_model(1.0, latency_us=3.0)


def test_a_measured_move_the_simulator_predicts_slower_is_not_kept():
    trace, plan, cost = _noise_prone_plan()
    assert validate_swap_plan(trace, plan).valid

    def predict(candidate):
        return simulate(trace, candidate, cost, validate=False)

    before = predict(plan)
    assert predicted_waits(before, plan) == {} and before.iteration_us == pytest.approx(200.0)
    op_us = [20.0] * 10
    # the rule alone moves X to 1, and the simulator predicts that plan 10 µs slower
    blind = adjust_triggers(trace, plan, {0: 50.0}, op_us, validate_swap_plan)
    assert blind.moves == {0: (4, 1)}
    assert predict(blind.plan).iteration_us == pytest.approx(210.0)
    # judged by the simulator, the move is dropped and the plan is the one given
    judged = adjust_triggers(trace, plan, {0: 50.0}, op_us, validate_swap_plan, predict)
    assert judged.moves == {} and judged.plan == plan
    # with Y measured late too, the two moves together are slower: Y's (3 -> 2, no slower)
    # is kept on its own and X's is not
    both = adjust_triggers(trace, plan, {0: 50.0, 1: 5.0}, op_us, validate_swap_plan, predict)
    assert both.moves == {1: (3, 2)}
    assert validate_swap_plan(trace, both.plan).valid
    assert predict(both.plan).iteration_us <= before.iteration_us + 1e-6


def test_near_misses_only_widens_slack_and_leaves_late_swap_ins():
    """Before a run, only the swap-ins predicted on time but within the guard band move."""
    trace, plan, cost = _noise_prone_plan()

    def predict(candidate):
        return simulate(trace, candidate, cost, validate=False)

    # Y lands 16 µs before op 4 is dispatched: inside a 20 µs guard band; X (47 µs) is not
    widened = adjust_triggers(trace, plan, {}, [20.0] * 10, validate_swap_plan, predict,
                              guard_us=20.0, near_misses_only=True)
    assert predicted_waits(predict(plan), plan, guard_us=20.0) == {1: pytest.approx(4.0)}
    assert widened.moves == {1: (3, 2)}  # as far as it can go: its bytes leave after op 1
    # Y's copy now waits for its own copy out (D2H 53..57), and lands 19 µs early
    after = predict(widened.plan)
    assert predicted_waits(after, widened.plan, guard_us=20.0) == {1: pytest.approx(1.0)}
    assert after.iteration_us <= predict(plan).iteration_us + 1e-6
    # a swap-in the simulator predicts late (Y behind X, 17 µs) is not a near miss: the
    # plan is left as it is
    blocked, blocked_plan, blocked_cost = _blocked_plan()

    def predict_blocked(candidate):
        return simulate(blocked, candidate, blocked_cost, validate=False)

    kept = adjust_triggers(blocked, blocked_plan, {}, [20.0] * 10, validate_swap_plan,
                           predict_blocked, guard_us=5.0, near_misses_only=True)
    assert kept.moves == {} and kept.plan == blocked_plan


def test_the_moves_are_checked_op_by_op_and_validated_once():
    """The moves go as far as the budget and their bytes allow, op by op, and the plan
    with all of them is validated once; a plan the validator refuses sends the moves to
    the validator one by one (the same rule, more validations)."""
    _trace, plan, planned = _planned()
    late_plan, late = mistimed(plan)
    op_us = [op.duration_us or 10.0 for op in planned.ops]
    waits = {a.buffer_id: 200.0 for a in late[:5]}
    calls = []

    def counting(trace, candidate):
        calls.append(candidate)
        return validate_swap_plan(trace, candidate)

    result = adjust_triggers(planned, late_plan, waits, op_us, counting)
    assert result.moves and len(calls) == 1 and calls[0] is result.plan
    refusals = []

    class _Refused:
        valid = False
        message = "refused by the test"

    def refusing_once(trace, candidate):  # the plan with every move: refused
        if not refusals:
            refusals.append(candidate)
            return _Refused()
        return validate_swap_plan(trace, candidate)

    slow = adjust_triggers(planned, late_plan, waits, op_us, refusing_once)
    assert refusals and validate_swap_plan(planned, slow.plan).valid
    assert slow.moves and all(new < old for old, new in slow.moves.values())
