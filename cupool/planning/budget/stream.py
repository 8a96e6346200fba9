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

``auto`` runs it at each of ``params.stream_headrooms`` and :data:`KEEP_ORDERS`, and
only for traces with read-only weights (traces without ``writes`` plan exactly as before).
"""

from __future__ import annotations

import numpy as np

from cupool.core.vocabulary import Trace
from cupool.planning.budget.engine.greedy import (
    GreedyOptions,
    candidate_gaps,
    cost_pass,
    fullest_op,
)
from cupool.planning.budget.engine.placement import Decision, place_schedule
from cupool.planning.budget.engine.schedule import IdleGap
from cupool.planning.budget.engine.state import PlanState, SwapWindow
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.result import BudgetResult

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


def stream_weights(state: PlanState, headroom: float, order: str = "small",
                   fill: float = PREFETCH_FILL, tails: bool = True) -> int:
    """Stream the read-only weights of ``state``'s trace (module docstring, steps 1-3;
    step 3 only with ``tails``), keeping weights in ``order`` (:data:`KEEP_ORDERS`) and
    prefetching into at most ``fill`` of the budget; returns how many are streamed."""
    weights = streamable(state.trace)
    if not weights:
        return 0
    kept = _kept(state, weights, (1.0 - headroom) * state.budget, order)
    streamed = sorted((b for b in weights if b.id not in kept),
                      key=lambda b: (b.uses[0], b.id))
    live = state.live.astype(np.float64)
    for b in streamed:
        live -= b.size
        live[b.uses[0]:b.uses[-1] + 1] += b.size
    # the bytes resident at every op (kept weights) pack as one block: the slack is kept
    # in the rest
    base = float(live.min())
    limit = base + fill * (state.budget - base)
    triggers, floor = {}, 0
    for b in streamed:
        first = b.uses[0]
        trigger = first
        while trigger > floor and live[trigger - 1] + b.size <= limit:
            trigger -= 1
        live[trigger:first] += b.size
        triggers[b.id] = floor = trigger
    across = _tail_prefetches(state, streamed, triggers, live, limit) if tails else {}
    for b in sorted(streamed, key=lambda b: (triggers[b.id], b.uses[0], b.id)):
        first, last = b.uses[0], b.uses[-1]
        if b.id in across:
            state.apply_tail_prefetch(b.id, last, first, across[b.id])
        else:
            trigger = triggers[b.id]
            state.apply_swap(b.id, last, first, SwapWindow(
                last + 1, trigger, float(state.end_us[last]), 0.0,
                float(state.start_us[trigger]), state.cost.copy_us(b.size, "h2d"),
                float(state.start_us[first]), 0.0))
        state.taken.add(IdleGap(b.id, last, first))
    return len(streamed)


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
        start = n
        low = max(last + 2, floor)
        while start - 1 >= low and live[start - 1] + b.size <= limit:
            start -= 1
        if start < n and float(live[:first].max(initial=0.0)) + b.size <= limit:
            live[:first] += b.size
            live[start:] += b.size
            tails[b.id] = floor = start
        else:
            live[trigger:first] += b.size
    return tails


def plan_stream(trace, budget_bytes, cost, params: BudgetParams, started: float,
                headroom: float = 0.25, order: str = "small") -> BudgetResult:
    """Weight streaming at ``headroom``, keeping weights in ``order`` (module docstring),
    the rest by the greedy."""
    options = GreedyOptions(swap_weight=params.checkpoint_swap_weight,
                            max_chain=params.max_chain)

    def decide(internal: int, tails: bool = True) -> Decision:
        state = PlanState(trace, internal, cost, max_chain=options.max_chain)
        streamed = stream_weights(state, headroom, order, tails=tails)
        if state.live.max() > internal:
            cost_pass(state, candidate_gaps(trace, False), options)
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

    result = place_schedule(trace, budget_bytes, decide, "stream", params.placement, started)
    if not result.feasible:  # a weight resident across the boundary in two stays may not
        # get one offset for both: stream without prefetching across the boundary
        result = place_schedule(trace, budget_bytes, lambda internal: decide(internal, False),
                                "stream", params.placement, started)
    return result
