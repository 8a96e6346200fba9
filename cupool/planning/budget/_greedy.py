"""The greedy core of the swap/recompute planners (``capuchin`` and ``auto``'s greedy).

Candidates are idle gaps of buffers (:func:`~._state.gaps_of`). Each is evaluated two
ways, against the current :class:`~._state.PlanState`:

- *recompute* (temporary buffers with a recipe): re-run the producer just before the next
  use; cost = the producer's duration plus the chain of dropped inputs recomputed too;
  the bytes are free over ``[prev_use + 1, next_use)``;
- *swap*: copy out after the last use, back in with the latest trigger whose copy lands in
  time behind the copies already queued; cost = ``swap_weight`` × link time (the link is
  the scarce resource: a weight of 0 spends it first-come, a large one keeps it for
  buffers that are expensive to recompute); free over ``[copy out landed, trigger)``.

Two orders: ``"cost"`` (a lazy heap on cost per byte, DTR-like: cheapest bytes first) and
``"free-time"`` (Capuchin: largest ``FT = swap_in_start − swap_out_end`` first, then swap
or recompute by cost). A candidate is applied only while it frees bytes at an op still
over the budget.
"""

from __future__ import annotations

import heapq

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.planning.budget._residency import RECOMPUTE, SWAP
from cupool.planning.budget._state import PlanState, gaps_of


def evaluate(state: PlanState, buffer_id: int, prev_use: int, next_use: int, *,
             allow_swap: bool, allow_recompute: bool, swap_weight: float):
    """The cheaper option for this gap: ``(cost_us, mode, detail, holes)`` or ``None``."""
    wraps = next_use <= prev_use
    size = state.trace.buffer(buffer_id).size
    options = []
    if (allow_recompute and not wraps and next_use - prev_use > 1
            and not state.hole_blocked(buffer_id, prev_use + 1, next_use)):
        chain = state.chain(buffer_id, next_use)
        extra = 0 if chain is None else sum(state.trace.buffer(x).size for x, _d in chain[1])
        # the chain's inputs are resident at next_use too: never push that op over budget
        if chain is not None and (not extra or state.live[next_use] + extra <= state.budget):
            options.append((chain[0], RECOMPUTE, chain, [(prev_use + 1, next_use)]))
    if allow_swap:
        window = state.swap_window(buffer_id, prev_use, next_use, wraps)
        if window is not None:
            until, trigger = window[0], window[1]
            holes = [(until, state.n), (0, trigger)] if wraps else [(until, trigger)]
            holes = [(a, b) for a, b in holes if b > a]
            invalid = (until, next_use)  # the data is back only at the due op
            if holes and not state.hole_blocked(buffer_id, *invalid):
                link = window[3] + window[5]
                options.append((swap_weight * link + window[7] + 1e-9 * size, SWAP, window,
                                holes))
    if not options:
        return None
    return min(options, key=lambda option: option[0])


def _helps(state: PlanState, holes) -> bool:
    return any(b > a and int(state.live[a:b].max()) > state.budget for a, b in holes)


def _apply(state: PlanState, buffer_id, prev_use, next_use, option) -> None:
    _cost, mode, detail, _holes = option
    if mode == RECOMPUTE:
        state.apply_recompute(buffer_id, prev_use, next_use, detail)
    else:
        state.apply_swap(buffer_id, prev_use, next_use, detail)


def candidates(trace: Trace, offload_persistent: bool = True):
    out = []
    for b in trace.buffers:
        if b.kind == PERSISTENT and not offload_persistent:
            continue
        for p, q in gaps_of(trace, b):
            out.append((b.id, p, q))
    return out


def free_time(state: PlanState, buffer_id: int, prev_use: int, next_use: int) -> float:
    """Capuchin's ``FT = swap_in_start − swap_out_end`` (µs, ideal times, idle link)."""
    size = state.trace.buffer(buffer_id).size
    out_end = state.end_us[prev_use] + state.cost.copy_us(size, "d2h")
    in_start = state.start_us[next_use] - state.cost.copy_us(size, "h2d")
    if next_use <= prev_use:
        in_start += state.end_us[-1]
    return float(in_start - out_end)


def run_greedy(trace: Trace, budget_bytes: int, cost, *, order: str = "cost",
               allow_swap: bool = True, allow_recompute: bool = True,
               swap_weight: float = 0.05, offload_persistent: bool = True,
               max_chain: int = 6) -> PlanState:
    """Take gaps off the device until every op fits ``budget_bytes`` (or nothing helps).

    Temporary buffers first; persistent ones (their gaps between uses and across the
    iteration boundary, swap only) only if the budget still does not hold, because a
    weight on the host also blocks recomputing the activations it produces.
    """
    state = PlanState(trace, budget_bytes, cost, max_chain=max_chain)
    kw = {"allow_swap": allow_swap, "allow_recompute": allow_recompute,
          "swap_weight": swap_weight}
    passes = [candidates(trace, False)]
    if offload_persistent:
        passes.append(candidates(trace, True))
    for cands in passes:
        if state.live.max() <= budget_bytes:
            break
        if order == "free-time":
            _free_time_pass(state, cands, budget_bytes, kw)
        else:
            _cost_pass(state, cands, budget_bytes, kw)
    return state


def _free_time_pass(state, cands, budget_bytes, kw) -> None:
    cands = sorted(cands, key=lambda c: (-free_time(state, *c), c))
    for c in cands:
        if state.live.max() <= budget_bytes:
            break
        if c in state.taken:
            continue
        option = evaluate(state, *c, **kw)
        if option is not None and _helps(state, option[3]):
            _apply(state, *c, option)
            state.taken.add(c)


def _cost_pass(state, cands, budget_bytes, kw) -> None:
    trace = state.trace
    for _round in range(3):
        if state.live.max() <= budget_bytes:
            break
        heap = []
        for c in cands:
            if c in state.taken:
                continue
            option = evaluate(state, *c, **kw)
            if option is not None and _helps(state, option[3]):
                heapq.heappush(heap, (option[0] / trace.buffer(c[0]).size, c))
        while heap and state.live.max() > budget_bytes:
            _score, c = heapq.heappop(heap)
            option = evaluate(state, *c, **kw)
            if option is None or not _helps(state, option[3]):
                continue
            score = option[0] / trace.buffer(c[0]).size
            if heap and score > heap[0][0] * (1 + 1e-9) + 1e-15:
                heapq.heappush(heap, (score, c))
                continue
            _apply(state, *c, option)
            state.taken.add(c)


def over_budget_op(state: PlanState) -> tuple[int, int]:
    """``(op, resident bytes)`` of the op furthest over the budget."""
    k = int(np.argmax(state.live))
    return k, int(state.live[k])
