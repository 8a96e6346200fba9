"""``greedy`` and ``auto``.

``greedy`` is the cost-aware greedy (:mod:`.engine.greedy`, order ``"cost"``, repaired:
ops a run leaves over the budget are served first in a re-run): cheapest bytes first (per
byte and per over-budget op a hole covers), where a recompute costs its producer plus its
chain of dropped inputs and a swap costs ``swap_weight`` µs per µs of link time it
occupies (plus any lateness). Mixing per tensor is what closes the gap on a link-bound
machine: activations of cheap (memory-bound) ops are recomputed, those of expensive ops
ride the link while it has room, and weights and optimizer state leave the device between
uses / across the iteration boundary only when the budget still does not hold.

``auto`` (the default policy) plans with every member (:func:`members`):

- ``greedy`` at each of ``params.swap_weights``;
- on traces of at most ``params.wait_max_buffers`` buffers, ``greedy`` at each of
  ``params.wait_swap_weights`` in one pass over every gap, taking swaps whose copies are
  waited for where no copy landing on time and no recompute frees the bytes an op over the
  budget misses (:mod:`.engine.waits`): plans that stall by design, where the others stall
  more or find none (a plan that waits loses ties);
- ``greedy`` with late swaps triggered as late as their own copy allows (a large hole, the
  lateness paid by the copies behind it) at each of ``params.late_swap_weights``;
- ``greedy`` that only recomputes temporary buffers and swaps only persistent ones, chains
  up to ``params.recompute_chain`` (when the link is the scarce resource, activations are
  re-made and the link carries weights and optimizer state);
- ``greedy`` after segment checkpointing (:mod:`.engine.checkpoint`: the forward re-run
  once per segment at the start of its backward), for each of
  ``params.checkpoint_segments``, segments of equal saved bytes and of equal numbers of
  saved activations; the greedy then swaps checkpoints and persistent buffers with lazy
  release and covering late triggers (:meth:`~.engine.state.PlanState.swap_window`);
- when the trace has read-only weights (``writes == []``), weight streaming
  (:mod:`.stream`) at each of ``params.stream_headrooms`` and with a searched kept set
  (:data:`SEARCHED_MEMBER`), and, last but one, with one searched from whole size
  classes streamed (:data:`CLASSES_MEMBER`) and one that searches from them longer
  (:data:`LONGER_MEMBER`);
- when the trace has a chain of states read back in reverse order (:mod:`.chain`) and at
  most ``params.revolve_max_buffers`` buffers, ``revolve`` (binomial checkpointing with
  nested recomputes, :mod:`.revolve`) on the device alone and with checkpoints on the
  host (two levels);
- ``capuchin`` (in Capuchin's order, and with the on-time swaps of the largest buffers
  taken first), ``vdnn`` and ``on-demand``;
- when persistent state fits the budget beside what each op uses but some of it is idle
  across the boundary and written by the step (optimizer state between its updates),
  :data:`~.boundary.HEAD_VARIANT`: that state stays on the device across the boundary,
  is copied out after op 0 and back in a chain of copies that ends by its updates, and
  the greedy plans the rest;
- on traces of at most ``params.wait_max_buffers`` buffers whose persistent state the step
  may write and is idle across the boundary, ``greedy`` at each finite weight of
  ``params.swap_weights`` with its copies across the boundary moved where compute hides
  them (:mod:`.boundary_copies`: copies out that end the step into the next iteration's
  head, late copies in into the previous one's tail, the gaps whose copies out still
  end the step kept on the device and the greedy run again), only where that changed
  the greedy's schedule; and so with copies waited for, at
  :data:`~.boundary_copies.WAIT_SWAP_WEIGHTS`;
- after those, on traces of at most ``params.search_max_gaps`` idle gaps, a local
  search over the gaps the greedy must take (:mod:`.searched_gaps`: persistent state
  copied out early is dropped later, clean);
- :func:`fallbacks`: when persistent state with what an op uses does not fit the budget at
  some op, the persistent gaps taken off the device first, late where they must be
  (:mod:`.boundary`, each of its variants); and, only when nothing found a plan, the
  default greedy placed first-fit;
- last of all, the last resort (:func:`working_set_members`, :mod:`.working_sets`), which
  cannot fail where every op's own working set fits the budget: at each op only what the
  op needs must be resident, copies waited for where they cannot land on time, placed as
  a cache of byte ranges (fragmentation cannot refuse it), with all persistent state off
  the device between uses and with what fits kept on it. Its plans are kept aside: the
  best of them is refined too when it beats the best of the other members before
  refining, and wins only when faster refined (so it never makes ``auto`` slower, and a
  plan exists wherever one can).

It simulates each plan and keeps the one with the least simulated iteration time (ties:
fewer swapped bytes, then member order) that passes the independent validator: a plan is
validated when ``auto`` relies on it (:mod:`.selection`: before it ends the search, counts
as found or is refined), and one that fails is excluded as if every plan had been checked
(``stats["unvalidated"]`` lists the members whose plans were not). A plan
whose simulated iteration is the ideal one (overhead 0: no stall, no recompute) cannot be
beaten on time, so the members after it are not planned (``candidates`` says so); among
plans at the ideal, the first in member order is kept. A greedy member does not run where
it cannot fit: where, at some op, what the op uses and the persistent bytes no swap can
take off the device there (copies in landing on time, or, with covering late triggers,
copies out landed) exceed the budget (:func:`~.engine.greedy.out_of_reach`; its reason in
``candidates`` says so). The
members (all but the first-fit last resort) are planned, checked and simulated in
``params.workers`` processes on a large trace (:mod:`.parallel`: the members of
:func:`members` in the calling process first, the rest in it and the workers it spawns);
their outcomes are combined in member order (:class:`Selection`), so the plan is the same
for any count. Then
it applies Capuchin's feedback to it (:mod:`.feedback`: late swap-ins triggered earlier,
re-validated, kept only when faster), and finally improves it by the local search of
:mod:`.multilevel` without its pageable level (``params.refine_evaluations`` simulations;
never worse: only faster plans that pass the validator are kept; deterministic: bounded by
the count, not the clock). When the searched streaming member wins, the best of the other
members is refined too and the faster refined plan kept (ties: the other's), so that member
can only make ``auto`` faster. So is the best plan of another family of members (greedy,
capuchin, stream, boundary, ...) when it comes within :data:`NEAR_TIE` of the best of the
others: which of two plans that close but made differently refines further is not known
before refining both (ties: the one refined first). Last, on traces of at most
``params.schedule_max_buffers`` buffers, the plan kept is searched further over its
schedule (:mod:`.searched_schedule`: each gap's free and trigger ops re-chosen, gaps taken
or put back, every candidate placed and simulated), validated and refined again, and kept
only when faster (the member's name then ends in ``, schedule searched``). The last
resort's plan is searched where no member found a plan; where it beat the members' best
plan only once refined, that plan is searched instead and the faster of the two kept
(ties: the last resort's): on the near-budget shapes of ``bench/always_plan.py`` the
members' plans searched further, and one search keeps ``auto``'s time. Last of all, the
copies out across the boundary that end the step move into the next iteration's head
where that is faster (:mod:`.head_copies`; after the search, whose moves re-time a wrap
gap within its form but never turn a copy out that ends the step into one in the head).
``BudgetResult.candidates`` lists every member's overhead or why it has none.

``segments-ga`` is not a member: on the shared traces it never beat the greedy (it migrates
whole gaps a segment forces off, not only the bytes over the budget).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import NamedTuple

from cupool.planning.budget.engine.greedy import (
    LARGEST_SWAPS,
    GreedyOptions,
    fullest_op,
    out_of_reach,
    run_repaired,
)
from cupool.planning.budget.engine.placement import Decision, OffsetCache, place_schedule
from cupool.planning.budget.engine.waits import waited_us
from cupool.planning.budget.feedback import refine_triggers
from cupool.planning.budget.head_copies import copies_out_in_head
from cupool.planning.budget.parallel import (
    MemberOutcome,
    PlanningInputs,
    judge,
    plan_in_workers,
    worker_count,
)
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.result import BudgetResult
from cupool.planning.budget.searched_schedule import schedule_searched
from cupool.planning.budget.selection import SEARCHED_MEMBER, Selection
from cupool.planning.budget.working_sets import KEPT_MEMBER, MEMBER, plan_working_sets

NEAR_TIE = 0.01
"""The runner-up (the best plan of another family than the best member's, the searched
member aside) is refined too when its simulated iteration is within this fraction of the
best one's."""

REFINE_TIME_LIMIT_S = 600.0
"""A safety cap on the refining search's wall time; ``refine_evaluations`` ends it first
on any reasonable machine (so the plan does not depend on the machine's speed)."""


def greedy_options(params: BudgetParams, swap_weight: float, **changes) -> GreedyOptions:
    """The greedy's options at ``swap_weight`` (an infinite weight never swaps), chains up to
    ``params.max_chain``, with ``changes`` on top."""
    return GreedyOptions(**{"swap_weight": swap_weight, "allow_swap": math.isfinite(swap_weight),
                            "max_chain": params.max_chain, **changes})


def plan_greedy_with(trace, budget_bytes, cost, params: BudgetParams, started: float,
                     options: GreedyOptions, last_resort=None,
                     cache: OffsetCache | None = None) -> BudgetResult:
    """The cost-aware greedy with ``options``, repaired (:func:`~.engine.greedy.run_repaired`)
    and placed (``last_resort``, ``cache``: :func:`~.engine.placement.place_schedule`'s):
    one ``auto`` member. With ``options.wait_for_copies`` (:mod:`.engine.waits`) no op is
    out of reach of swaps, and where a smaller internal budget placed the schedule, the
    schedule planned at the budget itself, repaired, is kept instead when it simulates
    faster (it waits less; the repair may fragment less than the smaller budget)."""
    decided: dict[int, Decision] = {}

    def decide(internal: int) -> Decision:
        if internal in decided:
            return decided[internal]
        if not options.wait_for_copies:
            unreachable = out_of_reach(trace, internal, cost, options)
            if unreachable is not None:  # known without running the greedy
                return Decision(None, reason=unreachable)
        decided[internal] = decision = _greedy_decision(trace, internal, cost, options)
        return decision

    result = place_schedule(trace, budget_bytes, decide, "greedy", params.placement, started,
                            last_resort=last_resort, cache=cache)
    if (options.wait_for_copies and result.feasible
            and result.plan.stats.get("placement_rounds", 1) > 1):
        from cupool.sim.simulator import simulate

        at_budget = place_schedule(trace, budget_bytes, decide, "greedy",
                                   replace(params.placement, rounds=1), started,
                                   last_resort=last_resort, cache=cache)
        if at_budget.feasible and (
                simulate(at_budget.trace, at_budget.plan, cost, validate=False).iteration_us
                < simulate(result.trace, result.plan, cost, validate=False).iteration_us):
            return at_budget
    return result


def _greedy_decision(trace, internal: int, cost, options: GreedyOptions) -> Decision:
    """The repaired greedy's schedule within ``internal`` bytes, or why it has none."""
    state = run_repaired(trace, internal, cost, options)
    fullest = fullest_op(state)
    if fullest.resident_bytes > internal:
        return Decision(None, reason=f"greedy: op {fullest.op} still needs "
                                     f"{fullest.resident_bytes} bytes resident "
                                     f"(budget {internal})")
    stats = {"swap_weight": options.swap_weight, "late_trigger": options.late_trigger,
             "planned_recompute_us": state.recompute_us}
    if options.wait_for_copies:
        stats["planned_wait_us"] = waited_us(state)
    return Decision(state.schedule, stats)


def plan_greedy(trace, budget_bytes, cost, params: BudgetParams, started: float) -> BudgetResult:
    weight = params.swap_weights[1] if len(params.swap_weights) > 1 else params.swap_weights[0]
    return plan_greedy_with(trace, budget_bytes, cost, params, started,
                            greedy_options(params, weight))


class Member(NamedTuple):
    """One of ``auto``'s planners: its name in ``candidates``, how to run it (given the
    time its planning starts) and the member it ``follows``, if any: one listed before it
    whose work, left in the process, it often continues from; in worker processes
    (:mod:`.parallel`) it is planned right after that one, in the same worker. Either
    way its plan is the same: ``follows`` only saves time."""

    name: str
    run: Callable[[float], BudgetResult]
    follows: str | None = None


def members(trace, budget_bytes, cost, params: BudgetParams,
            cache: OffsetCache | None = None) -> list[Member]:
    """``auto``'s members, in the order that breaks ties (the greedy ones share ``cache``)."""
    from cupool.planning.budget.boundary import (
        HEAD_VARIANT,
        head_candidates,
        persistent_over,
        plan_boundary,
    )
    from cupool.planning.budget.boundary_copies import (
        MEMBER_SUFFIX,
        WAIT_SWAP_WEIGHTS,
        dirty_across_boundary,
        plan_greedy_head,
    )
    from cupool.planning.budget.capuchin import plan_capuchin
    from cupool.planning.budget.chain import find_chain
    from cupool.planning.budget.classic import plan_on_demand, plan_vdnn
    from cupool.planning.budget.revolve import plan_revolve, plan_revolve_two_level
    from cupool.planning.budget.searched_gaps import MEMBER as SEARCHED_GAPS_MEMBER
    from cupool.planning.budget.searched_gaps import plan_searched_gaps, searchable
    from cupool.planning.budget.stream import (
        KEEP_ORDERS,
        SEARCHED,
        SEARCHED_CLASSES,
        SEARCHED_LONGER,
        plan_stream,
        streamable,
    )

    def greedy(options: GreedyOptions) -> Callable[[float], BudgetResult]:
        return lambda started: plan_greedy_with(trace, budget_bytes, cost, params, started,
                                                options, cache=cache)

    def policy(function) -> Callable[[float], BudgetResult]:
        return lambda started: function(trace, budget_bytes, cost, params, started)

    out = [Member(f"greedy(swap_weight={w:g})", greedy(greedy_options(params, w)))
           for w in params.swap_weights]
    if len(trace.buffers) <= params.wait_max_buffers:
        out += [Member(f"greedy(swap_weight={w:g}, copies waited for)",
                       greedy(greedy_options(params, w, wait_for_copies=True)))
                for w in params.wait_swap_weights]
    out += [Member(f"greedy(swap_weight={w:g}, late=latest)",
                   greedy(greedy_options(params, w, late_trigger="latest")))
            for w in params.late_swap_weights]
    out += [Member(f"greedy(recompute temporaries, chains {params.recompute_chain})",
                   greedy(greedy_options(params, 0.0, late_trigger="latest",
                                         swap_temporaries=False,
                                         max_chain=params.recompute_chain)))]
    out += [Member(f"greedy(checkpoint {k} segments of equal {split})",
                   greedy(greedy_options(params, params.checkpoint_swap_weight,
                                         late_trigger="covering", segments=k, split=split,
                                         lazy_release=True)))
            for k in params.checkpoint_segments for split in ("bytes", "count")]
    streams = bool(streamable(trace))  # read-only weights (traces without writes: none)
    if streams:
        out += [Member(f"stream(headroom {h:g}, keep {order} first)",
                       lambda started, h=h, order=order: plan_stream(
                           trace, budget_bytes, cost, params, started, h, order))
                for h in params.stream_headrooms for order in KEEP_ORDERS]
        out += [Member(SEARCHED_MEMBER, lambda started: plan_stream(
            trace, budget_bytes, cost, params, started, 0.0, SEARCHED))]
    if len(trace.buffers) <= params.revolve_max_buffers and find_chain(trace).states:
        out += [Member("revolve", policy(plan_revolve)),
                Member("revolve(two levels)", policy(plan_revolve_two_level))]
    out += [Member("capuchin", policy(plan_capuchin)),
            Member(f"capuchin({LARGEST_SWAPS} first)", lambda started: plan_capuchin(
                trace, budget_bytes, cost, params, started, LARGEST_SWAPS)),
            Member("vdnn", policy(plan_vdnn)), Member("on-demand", policy(plan_on_demand))]
    if head_candidates(trace) and not persistent_over(trace, budget_bytes):
        out += [Member(HEAD_VARIANT.name, lambda started: plan_boundary(
            trace, budget_bytes, cost, params, started, HEAD_VARIANT))]
    if streams:
        out += [Member(CLASSES_MEMBER, lambda started: plan_stream(
            trace, budget_bytes, cost, params, started, 0.0, SEARCHED_CLASSES)),
                Member(LONGER_MEMBER, lambda started: plan_stream(
                    trace, budget_bytes, cost, params, started, 0.0, SEARCHED_LONGER))]
    if len(trace.buffers) <= params.wait_max_buffers and dirty_across_boundary(trace):
        variants = ([(w, False) for w in params.swap_weights if math.isfinite(w)]
                    + [(w, True) for w in WAIT_SWAP_WEIGHTS])
        out += [Member(f"greedy(swap_weight={w:g}, {'copies waited for, ' if wait else ''}"
                       f"{MEMBER_SUFFIX})",
                       lambda started, w=w, wait=wait: plan_greedy_head(
                           trace, budget_bytes, cost, params, started,
                           greedy_options(params, w, wait_for_copies=wait)))
                for w, wait in variants]
    if searchable(trace, params):  # small traces only: a local search of greedy runs
        out += [Member(SEARCHED_GAPS_MEMBER, policy(plan_searched_gaps))]
    return out


def fallbacks(trace, budget_bytes, cost, params: BudgetParams, found: bool,
              cache: OffsetCache | None = None) -> list[Member]:
    """What ``auto`` runs after its members (``found``: one of them found a plan; ``cache``:
    the members' offsets, for the default greedy's schedule). When
    persistent state must leave the device (:func:`~.boundary.persistent_over`: then
    only a member that takes it off across the iteration boundary can do well, and most
    find nothing or fall back to on-demand), :mod:`.boundary` in each of its variants
    (:func:`boundary_members`); and only when no plan was found, the default greedy whose
    residencies, when no offset solver packs them within the budget, are placed first-fit
    (:func:`first_fit_member`). Where persistent state fits, a plan a member finds is kept
    as it was."""
    out = boundary_members(trace, budget_bytes, cost, params)
    if found:
        return out
    return [*out, first_fit_member(trace, budget_bytes, cost, params, cache)]


def boundary_members(trace, budget_bytes, cost, params: BudgetParams) -> list[Member]:
    """:mod:`.boundary` in each of its variants when persistent state with what an op uses
    does not fit the budget at some op (:func:`~.boundary.persistent_over`), else none."""
    from cupool.planning.budget.boundary import (
        FOLLOWS,
        VARIANTS,
        SharedWork,
        persistent_over,
        plan_boundary,
    )

    if not persistent_over(trace, budget_bytes):
        return []
    shared = SharedWork()  # the variants' offsets and greedy states
    return [Member(variant.name, lambda started, variant=variant: plan_boundary(
                trace, budget_bytes, cost, params, started, variant, shared),
                   None if variant not in FOLLOWS else FOLLOWS[variant].name)
            for variant in VARIANTS]


def first_fit_member(trace, budget_bytes, cost, params: BudgetParams,
                     cache: OffsetCache | None = None) -> Member:
    """The default greedy whose residencies, when no offset solver packs them within the
    budget, are placed first-fit with each stay across the iteration boundary as one item
    (:func:`~.boundary.place_pairs_first_fit`) before the budget is lowered: ``auto``'s
    last resort."""
    from cupool.planning.budget.boundary import place_pairs_first_fit

    weight = params.swap_weights[1] if len(params.swap_weights) > 1 else params.swap_weights[0]
    return Member(f"greedy(swap_weight={weight:g}, first-fit placement)",
                  lambda started: plan_greedy_with(trace, budget_bytes, cost, params, started,
                                                   greedy_options(params, weight),
                                                   last_resort=place_pairs_first_fit,
                                                   cache=cache))


def batch(trace, budget_bytes, cost, params: BudgetParams,
          cache: OffsetCache | None = None) -> list[Member]:
    """What ``auto`` plans whatever the others find, in rank order: :func:`members`, then
    :func:`boundary_members`. Module-level: worker processes list them with it
    (:mod:`.parallel`)."""
    return [*members(trace, budget_bytes, cost, params, cache),
            *boundary_members(trace, budget_bytes, cost, params),
            *working_set_members(trace, budget_bytes, cost, params)]


def working_set_members(trace, budget_bytes, cost, params: BudgetParams) -> list[Member]:
    """The last resort that cannot fail where every op's working set fits
    (:mod:`.working_sets`), with all persistent state off the device between uses and with
    what fits kept on it; ranked last, so it wins only when strictly faster."""
    return [Member(name, lambda started, keep=keep: plan_working_sets(
                trace, budget_bytes, cost, params, started, keep))
            for name, keep in ((MEMBER, False), (KEPT_MEMBER, True))]


CLASSES_MEMBER = "stream(searched keep set, from size classes)"
"""The streaming member whose kept set is searched from whole size classes streamed."""

LONGER_MEMBER = "stream(searched keep set, from size classes, longer)"
"""The streaming member that searches from the same sets with a slower cooling."""

class Refined(NamedTuple):
    """A member's plan after feedback and the local search, its simulation and the search's
    numbers for ``stats``."""

    plan: object
    simulation: object
    stats: dict


def refine(trace, best: BudgetResult, cost, params: BudgetParams) -> Refined:
    """Capuchin's feedback, then (``params.refine_evaluations``) the local search of
    :mod:`.multilevel`, on a member's plan; never slower than it."""
    from cupool.sim.simulator import simulate

    refined_triggers = refine_triggers(trace, best.plan, cost, best.simulation)
    plan, sim = refined_triggers.plan, refined_triggers.simulation
    refined = {}
    if params.refine_evaluations:
        from cupool.planning.budget.multilevel import TierParams, search_tiers

        searched = search_tiers(trace, plan, cost, TierParams(
            seed=params.seed, time_limit_s=REFINE_TIME_LIMIT_S,
            max_evaluations=params.refine_evaluations, pageable=False))
        tier_stats = searched.stats
        if tier_stats["iteration_us"] < sim.iteration_us:
            plan = replace(searched, stats={**plan.stats})
            sim = simulate(trace, plan, cost, validate=False)
        refined = {"refine_evaluations": tier_stats["evaluations"],
                   "refine_moves": tier_stats["moves_accepted"],
                   "refine_gain_us": tier_stats["seed_iteration_us"] - tier_stats["iteration_us"]}
    return Refined(plan, sim, refined)


def _headed(trace, refined: Refined, cost) -> Refined:
    """``refined`` with the copies out that end the step moved into the next iteration's
    head (:mod:`.head_copies`), where that is faster; last of all, on the plan ``auto``
    keeps (the schedule search re-times a wrap gap within its form, never into the
    head)."""
    headed = copies_out_in_head(trace, refined.plan, cost, refined.simulation)
    if not headed.moved:
        return refined
    return Refined(replace(headed.plan, stats={**refined.plan.stats}), headed.simulation,
                   {**refined.stats, "copies_out_in_head": headed.moved})


def member_outcomes(trace, budget_bytes, cost, params: BudgetParams, listed: list[Member],
                    judged: dict, in_process: int = 0,
                    workers_at_once: bool = False) -> Iterator[MemberOutcome]:
    """The outcomes of ``listed`` (:func:`batch`'s members), in rank order (``judged``:
    :func:`~.parallel.judge`'s): the first ``in_process`` planned here one by one, the rest
    by :func:`~.parallel.worker_count` processes when that is over 1 (this one and workers
    it spawns), else here too. The members ``auto`` ranks first often reach the ideal
    iteration, which ends the search, in less time than a worker takes to start: the
    workers start once those are planned, or with ``workers_at_once`` while they are."""

    def here(index: int) -> MemberOutcome:
        member = listed[index]
        return judge(trace, member.name, member.run(time.perf_counter()), cost, judged)

    workers = worker_count(params, trace, len(listed) - in_process)
    if workers <= 1:
        for index in range(len(listed)):
            yield here(index)
        return
    first = 0 if workers_at_once else in_process  # planned here by plan_in_workers from it
    for index in range(first):
        yield here(index)
    yield from plan_in_workers(batch, PlanningInputs(trace, budget_bytes, cost, params),
                               [member.name for member in listed], workers,
                               [member.follows for member in listed], in_process, here, first)


def plan_auto(trace, budget_bytes, cost, params: BudgetParams, started: float) -> BudgetResult:
    cache = OffsetCache()
    judged = {}  # what a plan the members already made got: its simulation (and check)
    selection = Selection(trace, judged)
    ranked_members = members(trace, budget_bytes, cost, params, cache)
    ranked = len(ranked_members)  # the boundary variants and the last resort follow
    # what the workers list (:func:`batch`), the members made once: listing them looks
    # for the trace's chain (:func:`~.chain.find_chain`), seconds on a 13k-buffer trace
    boundary = boundary_members(trace, budget_bytes, cost, params)
    listed = [*ranked_members, *boundary, *working_set_members(trace, budget_bytes, cost, params)]
    found = False
    # where persistent state must leave the device (boundary variants), the members ranked
    # first seldom reach the ideal iteration and the variants take longest
    outcomes = member_outcomes(trace, budget_bytes, cost, params, listed, judged, ranked,
                               bool(boundary))
    for rank, outcome in enumerate(outcomes):
        selection.add(rank, outcome)
        if rank == ranked - 1:
            found = selection.confirmed_best() is not None
        if selection.at_ideal() and selection.confirmed_best() is not None \
                and selection.at_ideal():
            outcomes.close()  # workers: the members not started are cancelled
            selection.skip([member.name for member in listed[rank + 1:]])
            found = True
            break
    if not found:  # no member found a plan (whatever the boundary variants did)
        member = first_fit_member(trace, budget_bytes, cost, params, cache)
        selection.add(len(listed), judge(trace, member.name, member.run(time.perf_counter()),
                                         cost, judged))
    while True:  # again whenever a plan relied on fails the validator (none should)
        result = _choose(trace, selection, budget_bytes, cost, params, started)
        if result is not None:
            return result


def _choose(trace, selection: Selection, budget_bytes, cost, params: BudgetParams,
            started: float) -> BudgetResult | None:
    """``auto``'s result from its members' plans (:func:`plan_auto`), each validated before
    it is refined; ``None`` when one fails the validator (``selection`` is then made again
    without it)."""
    confirm = selection.confirm
    report, best, others = selection.report, selection.best, selection.others
    last_resort = selection.last_resort
    if best is None and last_resort is not None:
        if not confirm(last_resort):
            return None
        refined = refine(trace, last_resort, cost, params)
        best, refined = schedule_searched(trace, last_resort, refined, budget_bytes, cost,
                                          params, refine, capped=True)
        return _chosen(trace, best, refined, selection, started, cost, params)
    if best is None:
        reason = ("auto: no member found a plan within the budget ("
                  + "; ".join(selection.reasons) + ")")
        plan = selection.last_plan
        plan = replace(plan, solver="auto", stats={**plan.stats, "reason": reason})
        return BudgetResult(plan, trace, "auto", reason, candidates=report)
    if not confirm(best):
        return None
    refined = refine(trace, best, cost, params)
    if others is not None and others is not best:
        # refined, the best of the other members may still win (ties: it does)
        if not confirm(others):
            return None
        other = refine(trace, others, cost, params)
        if other.simulation.iteration_us <= refined.simulation.iteration_us:
            best, refined = others, other
    runner_up = selection.runner_up
    if runner_up is not None and refined.simulation.overhead > 0 and (
            runner_up.simulation.iteration_us
            <= others.simulation.iteration_us * (1.0 + NEAR_TIE)):
        # as close as that, it may refine further than the best of the others did
        if not confirm(runner_up):
            return None
        other = refine(trace, runner_up, cost, params)
        if other.simulation.iteration_us < refined.simulation.iteration_us:
            best, refined = runner_up, other
    unrepaired = selection.unrepaired
    if (unrepaired is not None and "placement_repair" in best.plan.stats
            and unrepaired is not best and unrepaired is not others):
        # a plan placed by a repair is the best before refining: the best placed
        # without one may refine further (a planner's plan at a smaller budget often does)
        if not confirm(unrepaired):
            return None
        other = refine(trace, unrepaired, cost, params)
        if other.simulation.iteration_us < refined.simulation.iteration_us:
            best, refined = unrepaired, other
    beaten = None  # the members' best and its refined plan, when the last resort beat it
    if last_resort is not None and (last_resort.simulation.iteration_us
                                    < selection.best.simulation.iteration_us):
        # the last resort beat every member before refining: refined, it may still
        if not confirm(last_resort):
            return None
        other = refine(trace, last_resort, cost, params)
        if other.simulation.iteration_us < refined.simulation.iteration_us:
            beaten = (best, refined)
            best, refined = last_resort, other
    if beaten is None:
        best, refined = schedule_searched(trace, best, refined, budget_bytes, cost, params,
                                          refine)
    else:  # the members' best searched, the last resort's refined plan where still faster
        searched = schedule_searched(trace, *beaten, budget_bytes, cost, params, refine,
                                     capped=True)
        if searched[1].simulation.iteration_us < refined.simulation.iteration_us:
            best, refined = searched
    return _chosen(trace, best, refined, selection, started, cost, params)


def _chosen(trace, best: BudgetResult, refined: Refined, selection: Selection,
            started: float, cost, params: BudgetParams) -> BudgetResult:
    """``auto``'s result: member ``best``'s plan as refined, its copies out that end the
    step moved into the next iteration's head where that is faster."""
    if params.refine_evaluations:
        refined = _headed(trace, refined, cost)
    plan, sim = refined.plan, refined.simulation
    report = selection.report
    stats = {**plan.stats, "member": best.member, "simulated_overhead": sim.overhead,
             "candidates": report, "unvalidated": selection.unvalidated, **refined.stats}
    plan = replace(plan, solver="auto", stats=stats, solve_seconds=time.perf_counter() - started)
    return BudgetResult(plan, trace, "auto", candidates=report, member=best.member,
                        simulation=sim)
