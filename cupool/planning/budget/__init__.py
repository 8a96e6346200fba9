"""Planning under a memory budget below the trace's lower bound: swaps and recomputation.

:func:`plan_with_budget` is the front door; it returns a :class:`BudgetResult`::

    trace (+ recompute recipes) ──► policy(budget, cost model) ──► residencies + actions
          ──► offsets (static solver over residencies) ──► Plan ──► swap validator

Layout: the policies are the modules here (:mod:`.auto` with ``greedy``, :mod:`.capuchin`,
:mod:`.segments_ga`, :mod:`.classic` with ``vdnn`` and ``on-demand``, and the
unregistered multi-level search :mod:`.multilevel`); what they share is the engine in
:mod:`.engine` (plan state, copy queues, greedy, checkpointing, residencies, placement);
:mod:`.params` and :mod:`.result` hold the plain types of the front door, :mod:`.recipes`
the recompute recipes and :mod:`.feedback` Capuchin's trigger feedback.

==============  ===========================================================================
policy          what it does
==============  ===========================================================================
``auto``        (default) runs the planners below (several swap/recompute mixes of the
                cost-aware greedy, capuchin, vdnn, on-demand) and keeps the validated plan
                with the least simulated time
``greedy``      cost-aware greedy: cheapest bytes first (recompute chains or swaps that
                fit the link), DTR/Checkmate-style mixing per tensor
``capuchin``    largest free time first, swap when the link has room, else recompute
``segments-ga`` K segments from the largest buffers, the others assigned to segments by a
                genetic algorithm; gaps that share a segment with another buffer's
                access migrate (swap or recompute), least migrated bytes first
``vdnn``        offload every forward activation backward uses, prefetch one layer ahead
``on-demand``   swap out least-recently-used on pressure, swap in synchronously at use
``revolve``     binomial checkpointing (revolve) of the trace's chain of states read back
                in reverse order (a state may be several buffers, made from its own and
                the state before; side inputs and other extras stay resident): nested
                recomputes from kept states, the states passed through ephemeral,
                revolve's slots or units that count the state being advanced too,
                whichever re-runs fewer steps; everything off the chain resident; with
                ``revolve-two-level`` some states also go to pinned host memory and
                back (H-Revolve / Disk-Revolve), where chosen by simulation
==============  ===========================================================================

Recompute recipes: traces that carry none get derived ones
(:func:`~cupool.planning.budget.recipes.with_recompute_recipes`); the plan is made, and
must be validated and simulated, against that trace (``BudgetResult.trace``), and its
``stats["recompute_recipes"]`` says which rule made them.

Traces without op durations: every op without ``duration_us`` takes the cost model's
``default_op_us`` (10 µs unless set); ``stats["ops_without_duration"]`` counts them.
"""

from __future__ import annotations

import time
from dataclasses import replace
from importlib import import_module

from cupool.core.collector import collector_paused
from cupool.core.trace_rules import check_trace_format
from cupool.core.vocabulary import SolveStatus, Trace
from cupool.errors import SolverError
from cupool.planning.budget.engine.residency import check_working_sets, failed_plan
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.recipes import DERIVED_RULE, has_recipes, with_recompute_recipes
from cupool.planning.budget.result import BudgetResult
from cupool.planning.budget.working_sets import idle_persistent_shortfall

_REGISTRY = {
    "auto": ("cupool.planning.budget.auto", "plan_auto"),
    "greedy": ("cupool.planning.budget.auto", "plan_greedy"),
    "capuchin": ("cupool.planning.budget.capuchin", "plan_capuchin"),
    "segments-ga": ("cupool.planning.budget.segments_ga", "plan_segments_ga"),
    "vdnn": ("cupool.planning.budget.classic", "plan_vdnn"),
    "on-demand": ("cupool.planning.budget.classic", "plan_on_demand"),
    "revolve": ("cupool.planning.budget.revolve", "plan_revolve"),
    "revolve-two-level": ("cupool.planning.budget.revolve", "plan_revolve_two_level"),
}

POLICY_NAMES = tuple(_REGISTRY)
"""Every budget policy, in the order the benchmark prints them."""


def get_policy(name: str):
    """The planner registered as ``name``; :class:`SolverError` lists the known ones."""
    try:
        module_name, function_name = _REGISTRY[name]
    except KeyError:
        raise SolverError(f"unknown policy {name!r}; expected one of: "
                          f"{', '.join(POLICY_NAMES)}") from None
    return getattr(import_module(module_name), function_name)


def plan_with_budget(trace: Trace, budget_bytes: int, policy: str = "auto", cost=None,
                     params: BudgetParams | None = None) -> BudgetResult:
    """Plan ``trace`` to run with at most ``budget_bytes`` resident, with ``policy``.

    Returns a :class:`BudgetResult`: its ``plan`` is ``feasible`` (residencies, actions
    and offsets within the budget), ``infeasible`` (no plan can exist: an op's own working
    set exceeds the budget; ``reason`` names the op) or ``over_capacity`` (this policy
    found none; ``reason`` says why). Validate and simulate the plan against
    ``result.trace`` (``trace`` plus derived recompute recipes), not ``trace``.

    ``cost`` is a :class:`cupool.sim.cost.CostModel` (default: the Gen5 preset). Python's
    cyclic garbage collector is paused while the policy plans
    (:func:`~cupool.core.collector.collector_paused`), and resumed after.
    """
    function = get_policy(policy)
    if not isinstance(budget_bytes, int) or isinstance(budget_bytes, bool) or budget_bytes <= 0:
        raise SolverError(f"budget_bytes (={budget_bytes!r}) must be an integer > 0")
    check_trace_format(trace)  # a trace built in Python met no reader: refuse what one would
    if cost is None:
        from cupool.sim.cost import cost_model

        cost = cost_model("gen5")
    params = params or BudgetParams()
    started = time.perf_counter()
    planned = with_recompute_recipes(trace)
    from cupool.sim.cost import ops_without_duration

    stats = {"recompute_recipes": "from the trace" if has_recipes(trace) else DERIVED_RULE,
             "ops_without_duration": ops_without_duration(trace)}
    reason = (check_working_sets(trace, budget_bytes)
              or idle_persistent_shortfall(trace, budget_bytes))
    if reason is not None:
        plan = failed_plan(planned, budget_bytes, policy, started, SolveStatus.INFEASIBLE,
                           {**stats, "reason": reason})
        return BudgetResult(plan, planned, policy, reason)
    with collector_paused():  # planners make many objects and almost no cycles
        result = function(planned, budget_bytes, cost, params, started)
    result.plan.stats.update({k: v for k, v in stats.items() if k not in result.plan.stats})
    return replace(result, policy=policy)


__all__ = ["POLICY_NAMES", "BudgetParams", "BudgetResult", "get_policy", "plan_with_budget"]
