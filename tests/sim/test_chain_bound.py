"""The lower bound on the recomputation a budget forces on a chain: revolve's count for
the most states any copy-free plan can hold, never above what the revolve policy plans."""

from __future__ import annotations

import time

import pytest

from cupool.errors import InputError
from cupool.planning.budget import BudgetParams
from cupool.planning.budget.chain import find_chain
from cupool.planning.budget.chain_traces import adjoint_trace
from cupool.planning.budget.revolve import build, plan_revolve
from cupool.sim.chain_bound import chain_recompute_bound, revolve_steps
from cupool.sim.cost import cost_model


def test_revolves_counts():
    assert [revolve_steps(48, c) for c in (13, 8, 5, 3)] == [81, 89, 116, 170]
    assert revolve_steps(5, 1) == 10 and revolve_steps(5, 5) == 4
    with pytest.raises(InputError, match=r"checkpoints \(=0\)"):
        revolve_steps(5, 0)


@pytest.mark.parametrize("slots", [0, 2, 5, 12, 30])
def test_bound_is_below_the_plan(slots):
    trace = adjoint_trace(48, 1 << 20)
    chain = find_chain(trace)
    budget = build(trace, chain, slots).peak_bytes
    planned = plan_revolve(trace, budget, cost_model("gen5"), BudgetParams(),
                           time.perf_counter())
    bound = chain_recompute_bound(trace, [x.buffer_ids for x in chain.states], budget)
    assert bound.states == 47 and bound.slots >= slots
    assert 0 <= bound.recomputes <= planned.plan.stats["revolve_recomputes"]
    assert bound.recompute_us == pytest.approx(10.0 * bound.recomputes)


def test_a_budget_below_the_reading_op_has_no_slots():
    trace = adjoint_trace(8, 4096)
    states = [x.buffer_ids for x in find_chain(trace).states]
    bound = chain_recompute_bound(trace, states, 4096)
    assert bound.slots is None and bound.recomputes is None
