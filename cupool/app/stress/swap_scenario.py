"""The ``swap`` scenario: a trace planned at half its lower bound, run twice — by the
independent walker (:func:`~cupool.app.stress.independent_walker.walk_plan`) and by the swap
engine, through :func:`cupool.app.replay.replay` (planned pool, handles, copy engine, pinned
staging, late-prefetch feedback)."""

from __future__ import annotations

from dataclasses import dataclass

from cupool.app.stress.config import (
    BUNDLED_SIZE_SCALE,
    BUNDLED_TRACE,
    SWAP_BUDGET,
    SWAP_ITERATIONS,
    SWAP_POLICIES,
)
from cupool.app.stress.device import baseline, measure_leaks
from cupool.app.stress.errors import StressError, WalkError
from cupool.app.stress.independent_walker import WalkSettings, plan_walk, walk_plan
from cupool.app.stress.result import ScenarioResult
from cupool.app.stress.workloads import training_trace
from cupool.check import validate_swap_plan
from cupool.core.vocabulary import Plan, SwapIn, Trace


@dataclass(frozen=True)
class SwapCase:
    """A ``trace``, its swapping ``plan`` at the scenario's budget (found by ``policy``),
    the trace the plan is for (``plan_trace``: the planner may derive one) and the size
    scale both runs use."""

    trace: Trace
    plan: Plan
    plan_trace: Trace
    size_scale: int
    policy: str


def swap_case(trace: Trace, size_scale: int) -> SwapCase | None:
    """Plan ``trace`` at :data:`SWAP_BUDGET` with the first policy of
    :data:`SWAP_POLICIES` whose plan swaps, passes the swap validator and suits
    :func:`walk_plan`; ``None`` if none does."""
    from cupool.planning.budget import plan_with_budget

    budget = max(1, int(trace.lower_bound_bytes() * SWAP_BUDGET))
    for policy in SWAP_POLICIES:
        result = plan_with_budget(trace, budget, policy)
        plan = result.plan
        if not result.feasible:
            continue
        if not any(isinstance(a, SwapIn) for a in plan.actions):
            continue
        if not validate_swap_plan(result.trace, plan).valid:
            raise StressError(f"swap scenario: the {policy} plan for {trace.name} at "
                              f"{budget} bytes fails the validator")
        case = SwapCase(trace, plan, result.trace, size_scale, policy)
        if _walkable(case):
            return case
    return None


def _walkable(case: SwapCase) -> bool:
    """Whether the walker can index ``case``'s plan (its persistent buffers keep one
    offset across the iteration boundary, or start it swapped out)."""
    try:
        plan_walk(case.plan_trace, case.plan, case.size_scale)
    except WalkError:
        return False
    return True


def _bundled_case(cache: dict) -> SwapCase | None:
    if "bundled" not in cache:
        from cupool.data import bundled_traces
        from cupool.io import load_trace

        path = next(p for p in bundled_traces() if p.name.startswith(BUNDLED_TRACE))
        cache["bundled"] = swap_case(load_trace(path), BUNDLED_SIZE_SCALE)
    return cache["bundled"]


def run_swap_scenario(device, seed: int, *, bundled: bool = False, streams=None,
                      faults=(), runtime_replay: bool = True,
                      cache: dict | None = None) -> ScenarioResult:
    """The ``swap`` scenario (:mod:`cupool.app.stress`): plan a small trace at 50% of its
    lower bound and run it with :func:`walk_plan` on ``device``; with ``runtime_replay``
    replay the same plan with the swap engine too. ``bundled`` uses the bundled ResNet-50
    trace instead of :func:`training_trace`. ``cache`` keeps the bundled trace's plan
    between calls."""
    cache = {} if cache is None else cache
    if bundled:
        case = _bundled_case(cache)
    else:
        case = None
        for attempt in range(20):
            case = swap_case(training_trace(seed + attempt * 7919), 1)
            if case is not None:
                break
    if case is None:
        raise StressError(f"swap scenario (seed {seed}): no policy of {SWAP_POLICIES} gave a "
                          f"swapping plan at {SWAP_BUDGET:.0%} of the lower bound")
    before = baseline(device)
    try:
        result = walk_plan(device, case.plan_trace, case.plan,
                           WalkSettings(size_scale=case.size_scale, seed=seed,
                                        faults=tuple(faults)),
                           streams=streams)
    finally:
        leaked = measure_leaks(device, None, before)
    result.leaked_blocks += leaked
    result.notes.update(trace=case.trace.name, policy=case.policy)
    if runtime_replay:
        result.add(_engine_replay(case, seed, device))
    return result


def _engine_replay(case: SwapCase, seed: int, device) -> ScenarioResult:
    """The same plan through the swap engine (:func:`cupool.app.replay.replay`): on a
    paced emulated device of its own when ``device`` is emulated (leaks: what that device
    still holds after the replay returned), on ``device`` itself on a GPU (leaks: what it
    holds beyond what it held before)."""
    from cupool.app.replay import ReplaySettings, open_paced_device, replay

    own = getattr(device, "kind", "") == "emulated"
    target = open_paced_device("gen5", case.size_scale, 1.0) if own else device
    before = baseline(target)
    try:
        settings = ReplaySettings(iterations=SWAP_ITERATIONS, size_scale=case.size_scale,
                                  time_scale=1.0, seed=seed)
        report = replay(case.trace, case.plan.capacity_bytes or case.plan.arena_bytes,
                        settings, device=target, plan=case.plan, plan_trace=case.plan_trace)
        leaked = measure_leaks(target, None, before)
    finally:
        if own:
            target.close()
    return ScenarioResult(bytes_checked=report["bytes_checked"],
                          corrupt_bytes=report["corrupt_bytes"], leaked_blocks=leaked,
                          late_prefetches=sum(report["late_prefetches"]))
