"""``stream``: weight streaming for steps whose read-only weights do not fit (inference).

A read-only persistent buffer (``writes == []``: a weight nothing in the step writes) has
a valid host copy for ever, so taking it off the device costs no copy out: it is dropped
after its last use and copied in again, on the H2D stream, ahead of its first use in the
next iteration -- the way FlexGen, ZeRO-Inference and accelerate's offload serve models
larger than the device. This policy decides which weights stay resident and when each
streamed one is prefetched::

    op:          0   1   2   3   4   5   6   7
    kept w0      [===============================)   resident across iterations
    streamed w3          [===========)               prefetched from op 1, used at 3-4,
                          ^ swap-in   ^ drop         dropped after 4 (no copy out)
    streamed w5                  [===========)       its copy queued behind w3's

1. **Which weights stay.** Every weight starts streamed (resident only from its first to
   its last use); then, smallest first (a small copy is mostly the link's latency), a
   weight is kept when the step still fits ``(1 - headroom)`` of the budget everywhere
   with it resident: ``headroom`` is the share left to prefetch into.
2. **When each streamed weight comes in.** In order of first use, each prefetch starts at
   the earliest op (not before the previous one's: the H2D engine is FIFO) from which its
   bytes fit the budget until its use. The link then runs ahead of compute as far as the
   memory allows.
3. **Across the boundary.** A weight used so early that its prefetch would be shorter
   than its copy is copied in during the previous iteration's tail instead (after every
   other copy, in order of use), when its bytes fit from there to its use: the link keeps
   streaming across the boundary.
4. What still does not fit (activations) is left to the cost-aware greedy
   (:mod:`.engine.greedy`), on top.

**The searched kept set** (:data:`SEARCHED`). No fixed order of step 1 knows where the
copies will queue: keeping the small weights streams the large ones, often bunched at the
end of the step, one copy waiting for the memory the previous one frees. The searched
member replays steps 2-3 for a kept set on the estimated op times exactly as the simulator
would (:func:`layout_iteration_us`: the FIFO link, each op waiting for its prefetches) and
anneals over kept sets from the fixed orders' (:func:`searched_kept`, seeded, a bounded
number of evaluations), which spreads the streamed weights so their copies overlap
compute. From the fixed orders' sets it seldom reaches one that streams a whole class
of equal weights, one per layer (one toggle at a time, through sets that overflow); so a
second searched member (:data:`SEARCHED_CLASSES`) anneals from such sets
(:func:`size_class_seeds`), and a third from the same sets, cooling more slowly
(:data:`SEARCHED_LONGER`). A copy in flight holds its whole weight, so the search runs
with the prefetches filling all of the budget left over as well as :data:`PREFETCH_FILL`
of it (:data:`SEARCH_FILLS`): the fuller, the fewer bytes stream. The search counts
bytes, not offsets, so its best kept sets (of both) are tried in order until one's
residencies pack within the budget, by the greedy offset solvers or else the exact one
(:func:`place_exact`).

``auto`` runs it at each of ``params.stream_headrooms`` and :data:`KEEP_ORDERS`, and with
the searched kept set, only for traces with read-only weights (traces without ``writes``
plan exactly as before).
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass

import numpy as np

from cupool.core.vocabulary import Trace
from cupool.planning.budget.engine.greedy import (
    GreedyOptions,
    candidate_gaps,
    cost_pass,
    fullest_op,
)
from cupool.planning.budget.engine.placement import (
    OFFSET_SOLVER_PARAMS,
    Decision,
    PlacedOffsets,
    place,
    place_schedule,
    solvers_place,
)
from cupool.planning.budget.engine.records import SwapWindow
from cupool.planning.budget.engine.residency import residency_intervals, resident_bytes
from cupool.planning.budget.engine.schedule import IdleGap
from cupool.planning.budget.engine.state import PlanState
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.result import BudgetResult
from cupool.planning.solvers import SolverParams

try:
    from cupool.planning.budget.engine import _stream
except ImportError:  # the optional C extension is not built: the Python estimate
    _stream = None

PREFETCH_FILL = 0.9
"""Share of the budget left over by what is resident at every op that prefetches may
fill: the rest is slack for packing the residencies into offsets (a budget filled to the
byte rarely packs)."""


def streamable(trace: Trace) -> list:
    """Read-only weights with a gap across the iteration boundary to stream through."""
    n = trace.num_ops
    return [b for b in trace.buffers
            if b.read_only and b.uses and (n - 1 - b.uses[-1]) + b.uses[0] > 0]


KEEP_ORDERS = ("small", "fit", "timely")
"""How the weights that stay are chosen (step 1): ``"small"`` offers a place smallest
first (a small weight's copy is mostly latency); ``"fit"`` streams, while some op is over,
the smallest weight that covers its overflow, else the largest (few bytes in few copies);
``"timely"`` does the same among the weights whose copy fits between that op and their
next use, when there are any."""


def _kept(state: PlanState, weights, limit: float, order: str) -> set[int]:
    """Which weights stay resident (module docstring, step 1)."""
    live = state.live.astype(np.float64)
    for b in weights:  # every weight streamed: resident from its first use to its last
        live -= b.size
        live[b.uses[0]:b.uses[-1] + 1] += b.size
    kept = set()
    if order in ("fit", "timely"):
        return _kept_by_fit(state, weights, limit, order == "timely")
    for b in sorted(weights, key=lambda b: (b.size, b.uses[0], b.id)):
        trial = live + b.size
        trial[b.uses[0]:b.uses[-1] + 1] -= b.size
        if trial.max() <= limit:
            live = trial
            kept.add(b.id)
    return kept


def _window_us(state: PlanState, b, op: int) -> float:
    """Time from the end of ``op`` to ``b``'s next first use (µs, estimated op times)."""
    ahead = float(state.start_us[b.uses[0]] - state.end_us[op])
    return ahead if ahead >= 0 else ahead + float(state.end_us[-1])


def _kept_by_fit(state: PlanState, weights, limit: float, timely: bool) -> set[int]:
    """Stream best-fitting weights until every op fits ``limit`` (``"fit"``, ``"timely"``)."""
    live = state.live.astype(np.float64)
    left = sorted(weights, key=lambda b: (b.size, b.uses[0], b.id))
    while left:
        op = int(np.argmax(live))
        over = live[op] - limit
        if over <= 0:
            break
        free = [b for b in left if not b.uses[0] <= op <= b.uses[-1]]
        if not free:
            break
        # a weight whose copy fits between this op and its next use (after the iteration's
        # end for one used before it) streams without stalling
        pool = free
        if timely:
            pool = [b for b in free
                    if _window_us(state, b, op) >= state.cost.copy_us(b.size, "h2d")] \
                or sorted(free, key=lambda b: (_window_us(state, b, op), b.size))
        pick = next((b for b in pool if b.size >= over), pool[-1])
        live -= pick.size
        live[pick.uses[0]:pick.uses[-1] + 1] += pick.size
        left.remove(pick)
    return {b.id for b in left}


@dataclass(frozen=True)
class StreamLayout:
    """Which weights stream and when each comes in (module docstring, steps 2-3).

    streamed: the streamed weights in order of first use; ``triggers[id]`` the op whose
    dispatch issues a weight's prefetch inside the iteration; ``tails[id]`` the tail op
    from which a weight used early is prefetched for the next iteration instead;
    ``overflow_bytes`` how far the weights alone leave some op over the budget (the
    greedy's share, on top)."""

    streamed: tuple
    triggers: dict
    tails: dict
    overflow_bytes: float


def _streamed_live(state: PlanState, streamed) -> np.ndarray:
    """The bytes resident at each op with every ``streamed`` weight resident only from
    its first use to its last (exact: byte counts are integers well inside float64)."""
    delta = np.zeros(state.n + 1)
    for b in streamed:
        delta[b.uses[0]] += b.size
        delta[b.uses[-1] + 1] -= b.size
    return (state.live.astype(np.float64) - sum(b.size for b in streamed)
            + np.cumsum(delta[:-1]))


def _earliest_fit(live: np.ndarray, low: int, high: int, size: int, limit: float) -> int:
    """The earliest op ``t`` in ``[low, high]`` from which ``size`` more bytes fit
    ``limit`` at every op of ``[t, high)``."""
    over = np.flatnonzero(live[low:high] + size > limit)
    return low + int(over[-1]) + 1 if len(over) else low


def weight_layout(state: PlanState, weights, kept: set[int], fill: float = PREFETCH_FILL,
                  tails: bool = True) -> StreamLayout:
    """The streamed weights (``weights`` not in ``kept``) and their prefetch triggers,
    filling at most ``fill`` of the budget left over by what is always resident."""
    streamed = sorted((b for b in weights if b.id not in kept),
                      key=lambda b: (b.uses[0], b.id))
    live = _streamed_live(state, streamed)
    overflow = max(0.0, float(live.max()) - state.budget)
    # the bytes resident at every op (kept weights) pack as one block: the slack is kept
    # in the rest
    base = float(live.min())
    limit = base + fill * (state.budget - base)
    triggers, floor = {}, 0
    for b in streamed:
        first = b.uses[0]
        trigger = _earliest_fit(live, floor, first, b.size, limit)
        live[trigger:first] += b.size
        triggers[b.id] = floor = trigger
    across = _tail_prefetches(state, streamed, triggers, live, limit) if tails else {}
    return StreamLayout(tuple(streamed), triggers, across, overflow)


def apply_layout(state: PlanState, layout: StreamLayout) -> None:
    """Take every streamed weight's wrap gap off the device as ``layout`` says."""
    for b in sorted(layout.streamed, key=lambda b: (layout.triggers[b.id], b.uses[0], b.id)):
        first, last = b.uses[0], b.uses[-1]
        if b.id in layout.tails:
            state.apply_tail_prefetch(b.id, last, first, layout.tails[b.id])
        else:
            trigger = layout.triggers[b.id]
            state.apply_swap(b.id, last, first, SwapWindow(
                last + 1, trigger, float(state.end_us[last]), 0.0,
                float(state.start_us[trigger]), state.cost.copy_us(b.size, "h2d"),
                float(state.start_us[first]), 0.0))
        state.taken.add(IdleGap(b.id, last, first))


def stream_weights(state: PlanState, headroom: float, order: str = "small",
                   fill: float = PREFETCH_FILL, tails: bool = True,
                   kept: set[int] | None = None) -> int:
    """Stream the read-only weights of ``state``'s trace (module docstring, steps 1-3;
    step 3 only with ``tails``), keeping weights in ``order`` (:data:`KEEP_ORDERS`), or
    those of ``kept`` when given, and prefetching into at most ``fill`` of the budget;
    returns how many are streamed."""
    weights = streamable(state.trace)
    if not weights:
        return 0
    if kept is None:
        kept = _kept(state, weights, (1.0 - headroom) * state.budget, order)
    layout = weight_layout(state, weights, kept, fill, tails)
    apply_layout(state, layout)
    return len(layout.streamed)


def _tail_prefetches(state: PlanState, streamed, triggers: dict, live: np.ndarray,
                     limit: float) -> dict[int, int]:
    """Step 3: weights whose prefetch inside the iteration is shorter than their copy
    (used early) are copied in during the previous iteration's tail instead, when the
    bytes fit: resident from op 0 to their use and from the tail trigger on; the tail
    copies queue behind every other one, in order of use. ``live`` is updated."""
    n = state.n
    tails: dict[int, int] = {}
    floor = max(triggers.values(), default=0) + 1
    for b in streamed:
        first, last, trigger = b.uses[0], b.uses[-1], triggers[b.id]
        ahead_us = float(state.start_us[first] - state.start_us[trigger])
        if ahead_us >= state.cost.copy_us(b.size, "h2d"):
            continue
        live[trigger:first] -= b.size
        start = _earliest_fit(live, min(max(last + 2, floor), n), n, b.size, limit)
        if start < n and float(live[:first].max(initial=0.0)) + b.size <= limit:
            live[:first] += b.size
            live[start:] += b.size
            tails[b.id] = floor = start
        else:
            live[trigger:first] += b.size
    return tails


SEARCHED = "searched"
"""The keep order of the member whose kept set is searched (:func:`searched_kept`)."""

SEARCHED_CLASSES = "searched from size classes"
"""The keep order of the member whose kept set is searched from whole size classes
streamed (:func:`size_class_seeds`) instead of the fixed orders' sets."""

SEARCHED_LONGER = "searched from size classes, longer"
"""The keep order of the member that searches from the same sets as
:data:`SEARCHED_CLASSES` with :data:`LONGER_SEARCH_EVALUATIONS` evaluations."""

SEARCH_EVALUATIONS = 3000
"""Kept sets :func:`searched_kept` evaluates (deterministic: bounded by the count)."""

LONGER_SEARCH_EVALUATIONS = 10_000
"""Kept sets the :data:`SEARCHED_LONGER` member evaluates per fill: a slower cooling
than :data:`SEARCH_EVALUATIONS`' reaches sets that stream fewer bytes where the link is
nearly saturated (ViT-B/16 at batch 8, 70% on Gen4: 9.4% against 12.9%), and lands
elsewhere in others, which the shorter search's member keeps (``auto`` takes the best)."""

SEARCH_SMALLEST = 0.01
"""Weights smaller than this share of the largest streamable one are never moved by the
search (their copy is mostly the link's latency and frees almost nothing)."""

SEARCH_PLACEMENT_TRIES = 32
"""Kept sets per fill, best first, whose residencies the searched member tries to place
before it settles for the best one (and a lowered internal budget)."""

SEARCH_FILLS = (1.0, PREFETCH_FILL)
"""Shares of the budget left over by what is always resident that the searched member's
prefetches may fill, each searched: all of it streams the fewest bytes (a copy in flight
holds its whole buffer, so every byte of slack spares a larger weight's copy), but
residencies that fill the budget at many ops pack less often (the exact offset solver
places them, :data:`EXACT_PLACEMENT`); :data:`PREFETCH_FILL` leaves slack for packing."""

EXACT_PLACEMENT = SolverParams(time_limit_s=OFFSET_SOLVER_PARAMS.time_limit_s,
                               max_nodes=50_000)
"""The exact offset solver's limits when it places streaming's residencies (a node cap:
the same offsets on every machine, as long as the time limit, a safety net, is not
reached first; a search of 300-400 residencies that runs to the cap takes about 0.15 s
on a 2-core machine of 2026)."""

EXACT_PLACEMENT_MAX_RESIDENCIES = 2500
"""Residency sets larger than this are not given to the exact solver: its preparation
(quadratic in the live set) then costs seconds per try (4 s for 10,000 residencies), and
the searched member may try 64 kept sets."""

SEARCH_TEMPERATURE = 0.05
"""The search's starting temperature, as a share of the ideal iteration time: a move that
lengthens the estimated iteration by that much is taken with probability 1/e at first,
never at the end."""


def layout_iteration_us(state: PlanState, layout: StreamLayout) -> float:
    """The iteration time of ``layout`` alone on the estimated op times, replayed the way
    the simulator runs a plan of swap-ins and drops: op ``i`` is dispatched when op
    ``i - 1`` ends, the prefetches triggered at ``i`` join the FIFO H2D engines then (in
    buffer order, as the plan lists them), op ``i`` waits for the copies due at it, and
    the iteration ends when the last op and the last copy have."""
    n = state.n
    by_trigger: dict[int, list] = {}
    for b in layout.streamed:
        if b.id in layout.tails:
            trigger, due = layout.tails[b.id], n - 1
        else:
            trigger, due = layout.triggers[b.id], b.uses[0]
        by_trigger.setdefault(trigger, []).append((b.id, due, b.size))
    engines = [0.0] * state.cost.copy_engines_per_direction
    landed: dict[int, float] = {}
    now = last_copy = 0.0
    for i in range(n):
        for _id, due, size in sorted(by_trigger.get(i, ())):
            end = max(heapq.heappop(engines), now) + state.cost.copy_us(size, "h2d")
            heapq.heappush(engines, end)
            landed[due] = max(landed.get(due, 0.0), end)
            last_copy = max(last_copy, end)
        now = max(now, landed.get(i, 0.0)) + float(state.durations[i])
    return max(now, last_copy)


def estimate_kept(state: PlanState, weights, kept: set[int], fill: float) -> float:
    """The searched member's estimate of streaming the ``weights`` not in ``kept`` at
    ``fill``: :func:`layout_iteration_us` of their :func:`weight_layout`, or infinity when
    the streamed weights alone leave an op over the budget (no triggers needed)."""
    streamed = [b for b in weights if b.id not in kept]
    if _streamed_live(state, streamed).max(initial=0.0) > state.budget:
        return math.inf
    return layout_iteration_us(state, weight_layout(state, weights, kept, fill))


def compiled_estimate(state: PlanState, weights, fill: float):
    """:func:`estimate_kept` for ``state``, ``weights`` and ``fill`` by the C extension
    ``_stream`` (the same doubles in the same order: equal estimates), as a function of
    the kept set; ``None`` when the extension is not built."""
    if _stream is None:
        return None
    ordered = sorted(weights, key=lambda b: (b.uses[0], b.id))
    index = {b.id: k for k, b in enumerate(ordered)}
    columns = [np.array(values, dtype=np.int64) for values in (
        [b.size for b in ordered], [b.uses[0] for b in ordered],
        [b.uses[-1] for b in ordered], [b.id for b in ordered])]
    live = np.ascontiguousarray(state.live, dtype=np.int64)
    start_us = np.ascontiguousarray(state.start_us, dtype=np.float64)
    durations = np.ascontiguousarray(state.durations, dtype=np.float64)
    cost = state.cost
    fixed = (int(state.budget), float(fill), float(cost.latency_us),
             float(cost.gbps("h2d") * 1e3), int(cost.copy_engines_per_direction), True)

    def estimate(kept: set[int]) -> float:
        streamed = np.ones(len(ordered), dtype=np.int64)
        for b in kept:
            if b in index:
                streamed[index[b]] = 0
        return _stream.estimate(live, *columns, streamed, start_us, durations, *fixed)

    return estimate


def searched_kept(state: PlanState, weights, seeds: list[set[int]], fill: float,
                  evaluations: int = SEARCH_EVALUATIONS, seed: int = 0,
                  count: int = 1) -> list[set[int]]:
    """The ``count`` kept sets with the least estimated iteration time
    (:func:`layout_iteration_us`) that simulated annealing meets on its way from the best
    of ``seeds``, best first: each move keeps or streams one or two weights at random
    (``seed``); a kept set whose weights alone leave an op over the budget is never taken.
    Which weights to stream is a knapsack over their idle windows and bytes that no fixed
    order solves: spread over the iteration, the copies overlap compute; bunched, they
    queue."""
    return [c.kept for c in _searched(state, weights, seeds, fill, evaluations, seed, count)]


@dataclass(frozen=True)
class KeptCandidate:
    """A kept set the search met, with its estimated iteration time (µs) at ``fill``."""

    iteration_us: float
    fill: float
    kept: set


def _searched(state: PlanState, weights, seeds: list[set[int]], fill: float,
              evaluations: int, seed: int, count: int) -> list[KeptCandidate]:
    """:func:`searched_kept` with each set's estimate."""
    seen: dict[frozenset, float] = {}
    estimate = compiled_estimate(state, weights, fill) or (
        lambda kept: estimate_kept(state, weights, kept, fill))

    def value(kept: set[int]) -> float:
        key = frozenset(kept)
        if key not in seen:
            seen[key] = estimate(kept)
        return seen[key]

    current_value, rank = min((value(k), rank) for rank, k in enumerate(seeds))
    current = set(seeds[rank])
    top = max(b.size for b in weights)
    movable = [b.id for b in weights if b.size >= SEARCH_SMALLEST * top]
    if movable and math.isfinite(current_value):
        rng = random.Random(seed)
        start_temperature = SEARCH_TEMPERATURE * float(state.end_us[-1])
        for step in range(evaluations):
            temperature = start_temperature * (1.0 - step / evaluations) + 1e-9
            moved = {rng.choice(movable)}
            if rng.random() < 0.5:
                moved.add(rng.choice(movable))
            trial = current ^ moved
            trial_value = value(trial)
            if trial_value <= current_value or (math.isfinite(trial_value) and rng.random()
                                                < math.exp((current_value - trial_value)
                                                           / temperature)):
                current, current_value = trial, trial_value
    ranked = sorted(((v, sorted(k)) for k, v in seen.items() if math.isfinite(v)))
    return ([KeptCandidate(v, fill, set(k)) for v, k in ranked[:count]]
            or [KeptCandidate(current_value, fill, current)])


def size_class_seeds(state: PlanState, weights) -> list[set[int]]:
    """Kept sets that stream whole size classes: for each size among the weights the
    search moves, smallest first, every weight that small streams and, while the streamed
    weights alone leave an op over the budget, the larger ones too, in order of first use
    (the first ones' copies can run in the previous iteration's tail); the rest stays.
    Sets whose weights alone still overflow are left out. Layers repeat: a class of equal
    weights, one per layer, spreads its copies over the step, a set that annealing from a
    mixed one rarely reaches one toggle at a time."""
    top = max((b.size for b in weights), default=0)
    movable = [b for b in weights if b.size >= SEARCH_SMALLEST * top]
    out = []
    for size in sorted({b.size for b in movable}):
        streamed = [b for b in movable if b.size <= size]
        larger = sorted((b for b in movable if b.size > size), key=lambda b: (b.uses[0], b.id))
        fits = _streamed_live(state, streamed).max(initial=0.0) <= state.budget
        while not fits and larger:
            streamed.append(larger.pop(0))
            fits = _streamed_live(state, streamed).max(initial=0.0) <= state.budget
        if fits:
            out.append({b.id for b in weights} - {b.id for b in streamed})
    return out


def searched_candidates(state: PlanState, weights, seeds: list[set[int]],
                        seed: int = 0,
                        evaluations: int = SEARCH_EVALUATIONS) -> list[KeptCandidate]:
    """The searched member's kept sets to try, best estimate first (ties: the larger
    fill): the best :data:`SEARCH_PLACEMENT_TRIES` searched (``evaluations`` each) at
    each of :data:`SEARCH_FILLS` (the fuller fill's estimates are better, the other's pack
    more often: both are tried)."""
    found = [c for fill in SEARCH_FILLS
             for c in _searched(state, weights, seeds, fill, evaluations, seed,
                                SEARCH_PLACEMENT_TRIES)]
    found.sort(key=lambda c: (c.iteration_us, -c.fill, sorted(c.kept)))
    return found


def _packs(trace, state: PlanState, budget_bytes: int, params: BudgetParams) -> bool:
    """Whether the residencies of ``state``'s schedule get offsets within the budget (by
    the solvers :func:`~.engine.placement.place_schedule` tries, in its order, then
    :func:`place_exact`)."""
    intervals = residency_intervals(trace, state.schedule)
    if resident_bytes(trace, intervals).max(initial=0) > budget_bytes:
        return False
    return (solvers_place(trace, intervals, budget_bytes, params.placement.offset_solver)
            or place_exact(trace, intervals, budget_bytes).offsets is not None)


def place_exact(trace, intervals, budget_bytes: int) -> PlacedOffsets:
    """Offsets by the exact solver within :data:`EXACT_PLACEMENT`'s limits: streaming's
    last resort when the greedy solvers leave gaps (none for more than
    :data:`EXACT_PLACEMENT_MAX_RESIDENCIES` residencies)."""
    if len(intervals) > EXACT_PLACEMENT_MAX_RESIDENCIES:
        return PlacedOffsets(None, 0)
    return place(trace, intervals, budget_bytes, "exact", EXACT_PLACEMENT)


def plan_stream(trace, budget_bytes, cost, params: BudgetParams, started: float,
                headroom: float = 0.25, order: str = "small") -> BudgetResult:
    """Weight streaming at ``headroom``, keeping weights in ``order`` (module docstring;
    :data:`SEARCHED`, :data:`SEARCHED_CLASSES`, :data:`SEARCHED_LONGER`: a kept set
    :func:`searched_kept` finds,
    ``headroom`` unused), the rest by the greedy."""
    options = GreedyOptions(swap_weight=params.checkpoint_swap_weight,
                            max_chain=params.max_chain)

    def streamed_state(internal: int, tails: bool, kept: KeptCandidate | None):
        state = PlanState(trace, internal, cost, max_chain=options.max_chain)
        streamed = stream_weights(state, headroom, order,
                                  PREFETCH_FILL if kept is None else kept.fill, tails,
                                  None if kept is None else kept.kept)
        if state.live.max() > internal:
            cost_pass(state, candidate_gaps(trace, False), options)
        return state, streamed

    def decide(internal: int, tails: bool = True) -> Decision:
        candidates: list = [None]
        if order in (SEARCHED, SEARCHED_CLASSES, SEARCHED_LONGER):
            state = PlanState(trace, internal, cost)
            weights = streamable(trace)
            seeds = [_kept(state, weights, internal, keep) for keep in KEEP_ORDERS]
            if order != SEARCHED:
                seeds = size_class_seeds(state, weights) or seeds
            candidates = searched_candidates(
                state, weights, seeds, seed=params.seed,
                evaluations=(LONGER_SEARCH_EVALUATIONS if order == SEARCHED_LONGER
                             else SEARCH_EVALUATIONS))
        # the best kept set whose residencies pack within the budget (the search sees
        # bytes, not offsets); when none does, the best one at the lowest fill (placement
        # then lowers the internal budget)
        for kept in candidates:
            state, streamed = streamed_state(internal, tails, kept)
            if len(candidates) == 1 or _packs(trace, state, budget_bytes, params):
                break
        else:
            state, streamed = streamed_state(internal, tails, min(
                candidates, key=lambda c: (c.fill, c.iteration_us)))
        # a lowered internal budget (fragmentation) shrinks what is kept and prefetched;
        # the working set needs only the real budget
        fullest = fullest_op(state)
        if fullest.resident_bytes > budget_bytes:
            return Decision(None, reason=f"stream: op {fullest.op} still needs "
                                         f"{fullest.resident_bytes} bytes resident "
                                         f"(budget {budget_bytes})")
        return Decision(state.schedule, {"streamed_weights": streamed, "headroom": headroom,
                                         "keep_order": order,
                                         "planned_recompute_us": state.recompute_us})

    result = place_schedule(trace, budget_bytes, decide, "stream", params.placement, started,
                            last_resort=place_exact)
    if not result.feasible:  # a weight resident across the boundary in two stays may not
        # get one offset for both: stream without prefetching across the boundary
        result = place_schedule(trace, budget_bytes, lambda internal: decide(internal, False),
                                "stream", params.placement, started, last_resort=place_exact)
    return result
