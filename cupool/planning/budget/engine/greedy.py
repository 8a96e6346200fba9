"""The greedy core of the swap/recompute planners (``capuchin`` and ``auto``'s greedy).

Candidates are idle gaps of buffers (:func:`~.schedule.gaps_of`). Each is evaluated two
ways, against the current :class:`~.state.PlanState`:

- *recompute* (temporary buffers with a recipe): re-run the producer just before the next
  use; cost = the producer's duration plus the chain of dropped inputs recomputed too;
  the bytes are free over ``[prev_use + 1, next_use)``;
- *swap*: copy out after the last use, back in with the latest trigger whose copy lands in
  time behind the copies already queued; cost = ``swap_weight`` × link time (the link is
  the scarce resource: a weight of 0 spends it first-come, a large one keeps it for
  buffers that are expensive to recompute); free over ``[copy out landed, trigger)``.

Two orders: ``"cost"`` (a lazy heap on cost per byte per over-budget op the holes
cover, DTR-like: cheapest relief first) and ``"free-time"`` (Capuchin: largest
``FT = swap_in_start − swap_out_end`` first, then swap or recompute by cost). A candidate
is applied only while it frees bytes at an op still over the budget.

A gap that a planned recompute reads inside (a *pin*: the buffer is that recompute's
input) is cut short at the first pin: the buffer is back by then. Ops a run cannot bring
under the budget are served first in a re-run (:func:`run_repaired`), before the link and
the recompute inputs are spent on easier ops.
"""

from __future__ import annotations

import heapq

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.planning.budget.engine.checkpoint import apply_batches
from cupool.planning.budget.engine.schedule import RECOMPUTE, SWAP, gaps_of
from cupool.planning.budget.engine.state import PlanState


def evaluate(state: PlanState, buffer_id: int, prev_use: int, next_use: int, *,
             allow_swap: bool, allow_recompute: bool, swap_weight: float,
             swap_temporaries: bool = True):
    """The cheaper option for this gap: ``(cost_us, mode, detail, holes, next_use)`` or
    ``None``. When a planned recompute reads the buffer inside the gap (a *pin*), the gap
    is cut short there: the buffer is back (swapped in or recomputed) by the first pin,
    and the returned ``next_use`` is that op."""
    wraps = next_use <= prev_use
    if not wraps:
        pins = [op for op in state.pinned.get(buffer_id, ()) if prev_use < op < next_use]
        if pins:
            next_use = min(pins)
            if next_use - prev_use <= 1:
                return None
    size = state.trace.buffer(buffer_id).size
    options = []
    if (allow_recompute and not wraps and next_use - prev_use > 1
            and not state.hole_blocked(buffer_id, prev_use + 1, next_use)):
        chain = state.chain(buffer_id, next_use)
        extra = 0 if chain is None else sum(state.trace.buffer(x).size for x, _d in chain[1])
        # the chain's inputs are resident at next_use too: never push that op over budget
        if chain is not None and (not extra or state.live[next_use] + extra <= state.budget):
            options.append((chain[0], RECOMPUTE, chain, [(prev_use + 1, next_use)], next_use))
    if allow_swap and (swap_temporaries or state.trace.buffer(buffer_id).kind == PERSISTENT):
        window = state.swap_window(buffer_id, prev_use, next_use, wraps)
        if window is not None:
            until, trigger = window[0], window[1]
            holes = [(until, state.n), (0, trigger)] if wraps else [(until, trigger)]
            holes = [(a, b) for a, b in holes if b > a]
            invalid = (until, next_use)  # the data is back only at the due op
            if holes and not state.hole_blocked(buffer_id, *invalid):
                link = window[3] + window[5]
                # across the boundary the copy out follows the last use: what it adds to
                # the D2H queue past the last op lengthens the iteration
                tail = (state.d2h.end_growth(window[2], window[3], float(state.end_us[-1]))
                        if wraps else 0.0)
                options.append((swap_weight * link + window[7] + tail + 1e-9 * size, SWAP,
                                window, holes, next_use))
    if not options:
        return None
    return min(options, key=lambda option: option[0])


def _helps(state: PlanState, holes) -> bool:
    return any(b > a and int(state.live[a:b].max()) > state.budget for a, b in holes)


def option_score(state: PlanState, c, option) -> float:
    """µs per byte-op of excess removed: the option's cost over its size times the number
    of over-budget ops its holes cover (only grows as other choices fix ops, so a lazy
    heap stays exact)."""
    over = state.live > state.budget
    covered = sum(int(over[a:b].sum()) for a, b in option[3] if b > a)
    return option[0] / (state.trace.buffer(c[0]).size * max(covered, 1))


def _apply(state: PlanState, buffer_id, prev_use, option) -> None:
    _cost, mode, detail, _holes, next_use = option
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
               swap_temporaries: bool = True,
               swap_weight: float = 0.05, offload_persistent: bool = True,
               max_chain: int = 6, hot_ops=(), late_trigger: str = "earliest",
               segments: int = 0, split: str = "bytes",
               lazy_release: bool = False) -> PlanState:
    """Take gaps off the device until every op fits ``budget_bytes`` (or nothing helps).

    Temporary buffers first; persistent ones (their gaps between uses and across the
    iteration boundary, swap only) only if the budget still does not hold, because a
    weight on the host also blocks recomputing the activations it produces.

    ``late_trigger`` says where a swap that cannot land on time is triggered
    (:meth:`PlanState.swap_window`).

    ``segments > 0`` first drops every saved activation and re-runs the forward in that
    many segments (cut by ``split``), each once at the start of its backward
    (:mod:`.checkpoint`); the greedy then takes off what still does not fit (checkpoints,
    persistent buffers).
    ``lazy_release``: see :meth:`PlanState.swap_window`.

    ``hot_ops`` (ops a previous run could not bring under the budget) are served first,
    in the given order, each by the cheapest gaps that free bytes *at that op*, before the
    link and the recompute inputs are spent on easier ops (:func:`run_repaired`).
    """
    state = PlanState(trace, budget_bytes, cost, max_chain=max_chain,
                      late_trigger=late_trigger, lazy_release=lazy_release)
    if segments:
        apply_batches(state, segments, split)
    kw = {"allow_swap": allow_swap, "allow_recompute": allow_recompute,
          "swap_weight": swap_weight, "swap_temporaries": swap_temporaries}
    if hot_ops:
        everything = candidates(trace, offload_persistent)
        for op in hot_ops:
            _hot_op_pass(state, op, everything, budget_bytes, kw)
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


def run_repaired(trace: Trace, budget_bytes: int, cost, rounds: int = 2, max_hot: int = 8,
                 **kw) -> PlanState:
    """:func:`run_greedy`, repaired: while some op stays over the budget, run again with
    the ops left over (most excess first, accumulated over the rounds) as ``hot_ops``.
    Returns the first state that fits, else the last one."""
    hot: list[int] = []
    state = run_greedy(trace, budget_bytes, cost, **kw)
    for _round in range(rounds):
        over = np.flatnonzero(state.live > budget_bytes)
        if not len(over):
            break
        worst = over[np.argsort(-state.live[over], kind="stable")]
        hot += [int(op) for op in worst if int(op) not in hot][:max_hot]
        state = run_greedy(trace, budget_bytes, cost, hot_ops=tuple(hot), **kw)
    return state


def _covers(gap, op: int) -> bool:
    _b, p, q = gap
    return p < op < q if q > p else (op > p or op < q)


def _hot_op_pass(state, op, cands, budget_bytes, kw) -> None:
    """Cheapest bytes first (lazy heap) among the gaps whose holes cover ``op``, until it
    fits."""
    trace = state.trace
    if state.live[op] <= budget_bytes:
        return

    def scored(c):
        option = evaluate(state, *c, **kw)
        if option is None or not any(a <= op < b for a, b in option[3]):
            return None, None
        return option[0] / trace.buffer(c[0]).size, option

    heap = []
    for c in cands:
        if c not in state.taken and _covers(c, op):
            score, _option = scored(c)
            if score is not None:
                heap.append((score, c))
    heapq.heapify(heap)
    while heap and state.live[op] > budget_bytes:
        _score, c = heapq.heappop(heap)
        score, option = scored(c)
        if score is None:
            continue
        if heap and score > heap[0][0] * (1 + 1e-9) + 1e-15:
            heapq.heappush(heap, (score, c))
            continue
        _apply(state, c[0], c[1], option)
        state.taken.add(c)


def _free_time_pass(state, cands, budget_bytes, kw) -> None:
    cands = sorted(cands, key=lambda c: (-free_time(state, *c), c))
    for c in cands:
        if state.live.max() <= budget_bytes:
            break
        if c in state.taken:
            continue
        option = evaluate(state, *c, **kw)
        if option is not None and _helps(state, option[3]):
            _apply(state, c[0], c[1], option)
            state.taken.add(c)


def _cost_pass(state, cands, budget_bytes, kw) -> None:
    for _round in range(3):
        if state.live.max() <= budget_bytes:
            break
        heap = []
        for c in cands:
            if c in state.taken:
                continue
            option = evaluate(state, *c, **kw)
            if option is not None and _helps(state, option[3]):
                heapq.heappush(heap, (option_score(state, c, option), c))
        while heap and state.live.max() > budget_bytes:
            _score, c = heapq.heappop(heap)
            option = evaluate(state, *c, **kw)
            if option is None or not _helps(state, option[3]):
                continue
            score = option_score(state, c, option)
            if heap and score > heap[0][0] * (1 + 1e-9) + 1e-15:
                heapq.heappush(heap, (score, c))
                continue
            _apply(state, c[0], c[1], option)
            state.taken.add(c)


def over_budget_op(state: PlanState) -> tuple[int, int]:
    """``(op, resident bytes)`` of the op furthest over the budget."""
    k = int(np.argmax(state.live))
    return k, int(state.live[k])
