"""What ``auto`` keeps of its members (:class:`~cupool.planning.budget.auto.Selection`):
the best plan, the best but the searched member's, and the runner-up among those, a plan
of its own (variants often make the same one), refined too on a near tie."""

from __future__ import annotations

from dataclasses import replace

from cupool.check import validate_plan
from cupool.planning.budget import BudgetParams, plan_with_budget
from cupool.planning.budget.auto import SEARCHED_MEMBER, Selection
from cupool.planning.budget.parallel import judge
from cupool.planning.budget.recipes import with_recompute_recipes
from cupool.planning.synthetic import lstm_trace
from cupool.sim import cost_model


def test_the_runner_up_is_the_second_best_distinct_plan():
    trace = with_recompute_recipes(lstm_trace(20, 1, seed=0, hidden=64))
    budget = int(trace.lower_bound_bytes() * 0.7)
    cost = cost_model("gen5")
    judged = {}
    greedy, capuchin, vdnn = (
        judge(trace, name, plan_with_budget(trace, budget, name, cost), cost, judged)
        for name in ("greedy", "capuchin", "vdnn"))
    for outcome in (greedy, capuchin, vdnn):
        assert outcome.simulation is not None, outcome.name
    ranked = sorted((greedy, capuchin, vdnn),
                    key=lambda o: (o.simulation.iteration_us, o.simulation.swapped_bytes))
    assert len({o.simulation.iteration_us for o in ranked}) == 3  # three distinct plans
    best, second, third = ranked
    selection = Selection(trace)
    for rank, outcome in enumerate([third, best, replace(best, name="twin"), second]):
        selection.add(rank, outcome)
    assert selection.best.member == best.name
    assert selection.others.member == best.name
    assert selection.runner_up.member == second.name  # not the twin: the same plan
    # the searched member is never the runner-up (it is refined as the best or not at all)
    searched = Selection(trace)
    for rank, outcome in enumerate([best, replace(second, name=SEARCHED_MEMBER)]):
        searched.add(rank, outcome)
    assert searched.runner_up is None


def _overlapping(plan):
    """``plan`` with every residency at offset 0: co-resident buffers overlap (invalid)."""
    return replace(plan, residencies=tuple(replace(r, offset=0) for r in plan.residencies))


def test_plans_are_validated_when_relied_on():
    """Outcomes are simulated, not validated; the best plan is validated when asked for,
    and an invalid one is excluded then as if it had been checked when it came."""
    trace = with_recompute_recipes(lstm_trace(20, 1, seed=0, hidden=64))
    budget = int(trace.lower_bound_bytes() * 0.7)
    cost = cost_model("gen5")
    judged = {}
    greedy, capuchin = (judge(trace, name, plan_with_budget(trace, budget, name, cost), cost,
                              judged) for name in ("greedy", "capuchin"))
    assert greedy.check is None and greedy.simulation is not None  # simulated only
    # an invalid plan as fast as the greedy's, ranked first
    bad = replace(greedy, name="bad", plan=_overlapping(greedy.plan))
    assert not validate_plan(trace, bad.plan).valid
    selection = Selection(trace, judged)
    for rank, outcome in enumerate([bad, greedy, capuchin]):
        selection.add(rank, outcome)
    assert selection.best.member == "bad"
    assert selection.unvalidated == ["bad", "greedy", "capuchin"]
    best = selection.confirmed_best()
    expected = min((greedy, capuchin), key=lambda o: (o.simulation.iteration_us,
                                                      o.simulation.swapped_bytes))
    assert best.member == expected.name
    assert selection.report["bad"].startswith("invalid (")
    assert expected.name not in selection.unvalidated and "bad" not in selection.unvalidated
    assert validate_plan(trace, best.plan).valid


def test_auto_excludes_an_invalid_member_plan(monkeypatch):
    """A member whose plan is invalid and faster than every other changes nothing but its
    ``candidates`` entry: ``auto`` validates the plans it relies on."""
    from cupool.planning.budget import auto

    trace = lstm_trace(20, 1, seed=0, hidden=64)
    budget = int(trace.lower_bound_bytes() * 0.5)
    cost = cost_model("gen5")
    params = BudgetParams(workers=1)
    plain = plan_with_budget(trace, budget, "auto", cost, params)
    members, judged_as = auto.members, auto.judge

    def with_bad(*args, **kwargs):  # first, a member that returns auto's own plan...
        return [auto.Member("bad", lambda started: plain), *members(*args, **kwargs)]

    def judge(trace, name, result, cost, judged):  # ...simulated, then made invalid
        outcome = judged_as(trace, name, result, cost, judged)
        return replace(outcome, plan=_overlapping(outcome.plan)) if name == "bad" else outcome

    monkeypatch.setattr(auto, "members", with_bad)
    monkeypatch.setattr(auto, "judge", judge)
    guarded = plan_with_budget(trace, budget, "auto", cost, params)
    assert guarded.candidates["bad"].startswith("invalid (")
    assert guarded.member == plain.member
    assert guarded.plan.residencies == plain.plan.residencies
    assert guarded.plan.actions == plain.plan.actions
    assert validate_plan(guarded.trace, guarded.plan).valid
    assert guarded.member not in guarded.plan.stats["unvalidated"]
