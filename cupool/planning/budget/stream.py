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
   its last use); then, in order of first use (an early weight has the least time to be
   prefetched), a weight is kept when the step still fits ``(1 - headroom)`` of the budget
   everywhere with it resident: ``headroom`` is the share left to prefetch into.
2. **When each streamed weight comes in.** In order of first use, each prefetch starts at
   the earliest op (not before the previous one's: the H2D engine is FIFO) from which its
   bytes fit the budget until its use. The link then runs ahead of compute as far as the
   memory allows.
3. What still does not fit (activations) is left to the cost-aware greedy
   (:mod:`.engine.greedy`), on top.

``auto`` runs it at each of ``params.stream_headrooms``, and only for traces with
read-only weights (traces without ``writes`` plan exactly as before).
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
"""Share of the budget prefetches may fill: the rest is slack for packing the
residencies into offsets (a budget filled to the byte rarely packs)."""


def streamable(trace: Trace) -> list:
    """Read-only weights with a gap across the iteration boundary to stream through."""
    n = trace.num_ops
    return [b for b in trace.buffers
            if b.read_only and b.uses and (n - 1 - b.uses[-1]) + b.uses[0] > 0]


def _kept(state: PlanState, weights, limit: float) -> set[int]:
    """Which weights stay resident (module docstring, step 1)."""
    live = state.live.astype(np.float64)
    for b in weights:  # every weight streamed: resident from its first use to its last
        live -= b.size
        live[b.uses[0]:b.uses[-1] + 1] += b.size
    kept = set()
    for b in sorted(weights, key=lambda b: (b.size, b.uses[0], b.id)):
        trial = live + b.size
        trial[b.uses[0]:b.uses[-1] + 1] -= b.size
        if trial.max() <= limit:
            live = trial
            kept.add(b.id)
    return kept


def stream_weights(state: PlanState, headroom: float, fill: float = PREFETCH_FILL) -> int:
    """Stream the read-only weights of ``state``'s trace (module docstring, steps 1-2),
    prefetching into at most ``fill`` of the budget; returns how many are streamed."""
    weights = streamable(state.trace)
    if not weights:
        return 0
    kept = _kept(state, weights, (1.0 - headroom) * state.budget)
    streamed = sorted((b for b in weights if b.id not in kept),
                      key=lambda b: (b.uses[0], b.id))
    live = state.live.astype(np.float64)
    for b in streamed:
        live -= b.size
        live[b.uses[0]:b.uses[-1] + 1] += b.size
    floor = 0
    for b in streamed:
        first, last = b.uses[0], b.uses[-1]
        trigger = first
        while trigger > floor and live[trigger - 1] + b.size <= fill * state.budget:
            trigger -= 1
        live[trigger:first] += b.size
        floor = trigger
        until = last + 1
        window = SwapWindow(until, trigger, float(state.end_us[last]), 0.0,
                            float(state.start_us[trigger]),
                            state.cost.copy_us(b.size, "h2d"),
                            float(state.start_us[first]), 0.0)
        state.apply_swap(b.id, last, first, window)
        state.taken.add(IdleGap(b.id, last, first))
    return len(streamed)


def plan_stream(trace, budget_bytes, cost, params: BudgetParams, started: float,
                headroom: float = 0.25) -> BudgetResult:
    """Weight streaming at ``headroom`` (module docstring), the rest by the greedy."""
    options = GreedyOptions(swap_weight=params.checkpoint_swap_weight,
                            max_chain=params.max_chain)

    def decide(internal: int) -> Decision:
        state = PlanState(trace, internal, cost, max_chain=options.max_chain)
        streamed = stream_weights(state, headroom)
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
                                         "planned_recompute_us": state.recompute_us})

    return place_schedule(trace, budget_bytes, decide, "stream", params.placement, started)
