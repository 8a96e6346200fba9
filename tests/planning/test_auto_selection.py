"""What ``auto`` keeps of its members (:class:`~cupool.planning.budget.auto.Selection`):
the best plan, the best but the searched member's, and the runner-up among those, a plan
of its own (variants often make the same one), refined too on a near tie."""

from __future__ import annotations

from dataclasses import replace

from cupool.planning.budget import plan_with_budget
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
