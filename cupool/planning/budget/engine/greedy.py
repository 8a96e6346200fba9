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

Three orders: ``"cost"`` (a lazy heap on cost per byte per over-budget op the holes
cover, DTR-like: cheapest relief first), ``"free-time"`` (Capuchin: largest
``FT = swap_in_start − swap_out_end`` first, then swap or recompute by cost) and
``"largest swaps"`` (the swaps that land on time taken largest buffer first, then
Capuchin's order: a copy's fixed latency makes many small copies slow per byte, so
small activations taken first by free time can fill the link before the large ones
that would relieve the same ops, and those are then recomputed). A candidate
is applied only while it frees bytes at an op still over the budget.

A gap that a planned recompute reads inside (a *pin*: the buffer is that recompute's
input) is cut short at the first pin: the buffer is back by then. Ops a run cannot bring
under the budget are served first in a re-run (:func:`run_repaired`), before the link and
the recompute inputs are spent on easier ops.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.planning.budget.engine.checkpoint import apply_batches
from cupool.planning.budget.engine.records import RecomputeChain, SwapWindow
from cupool.planning.budget.engine.relief import highest_floor
from cupool.planning.budget.engine.schedule import (
    RECOMPUTE,
    SWAP,
    IdleGap,
    OpSpan,
    trace_index,
)
from cupool.planning.budget.engine.scores import ScoreTable, covered_count
from cupool.planning.budget.engine.state import PlanState
from cupool.planning.budget.engine.waits import WaitedWindow, apply_waited, waited_window

LARGEST_SWAPS = "largest swaps"
"""The order that takes the on-time swaps of the largest buffers first
(:func:`largest_swaps_pass`), then follows Capuchin's."""


@dataclass(frozen=True)
class GreedyOptions:
    """How :func:`run_greedy` takes gaps off the device.

    order: ``"cost"`` (cheapest relief first), ``"free-time"`` (Capuchin's order) or
      ``"largest swaps"`` (:func:`largest_swaps_pass`, then Capuchin's order).
    allow_swap, allow_recompute: which ways a gap may leave the device.
    swap_temporaries: ``False`` swaps persistent buffers only (temporaries are recomputed).
    swap_weight: µs of cost charged per µs of link time a swap uses.
    offload_persistent: whether persistent buffers may leave the device at all.
    max_chain: longest chain of dropped inputs a recompute may re-produce.
    late_trigger: where a swap that cannot land on time is triggered
      (:data:`~.state.LATE_TRIGGERS`, :meth:`~.state.PlanState.swap_window`).
    segments, split: segment checkpointing first (:mod:`.checkpoint`; 0: none).
    lazy_release: see :meth:`~.state.PlanState.swap_window`.
    wait_for_copies: a gap that neither a swap nor a recompute can take off where it
      frees bytes at an op over the budget is offered as a swap whose copies are waited
      for (:mod:`.waits`).
    """

    order: str = "cost"
    allow_swap: bool = True
    allow_recompute: bool = True
    swap_temporaries: bool = True
    swap_weight: float = 0.05
    offload_persistent: bool = True
    max_chain: int = 6
    late_trigger: str = "earliest"
    segments: int = 0
    split: str = "bytes"
    lazy_release: bool = False
    wait_for_copies: bool = False


class GapOption(NamedTuple):
    """One way to take a gap off the device (:func:`evaluate`): its cost in µs, ``mode``
    (:data:`~.schedule.SWAP` or :data:`~.schedule.RECOMPUTE`), the ops whose bytes it frees
    (``holes``), the use it ends at (``next_use``: the gap's, or the first op where a
    planned recompute reads the buffer), and the swap's window (``waited``: a swap whose
    copies are waited for) or the recompute's chain."""

    cost_us: float
    mode: str
    holes: list[OpSpan]
    next_use: int
    swap: SwapWindow | None = None
    chain: RecomputeChain | None = None
    waited: WaitedWindow | None = None


def evaluate(state: PlanState, gap: IdleGap, options: GreedyOptions) -> GapOption | None:
    """The cheaper way to take ``gap`` off the device (``None``: neither works; ties: the
    recompute). When a planned recompute reads the buffer inside the gap (a *pin*), the
    gap is cut short there: the buffer is back (swapped in or recomputed) by the first
    pin, and the option's ``next_use`` is that op."""
    buffer_id, prev_use, next_use = gap
    wraps = next_use <= prev_use
    if not wraps:
        pin = state.first_pin_after(buffer_id, prev_use)
        if pin is not None and pin < next_use:
            next_use = pin
            if next_use - prev_use <= 1:
                return None
    recompute = None
    if (options.allow_recompute and not wraps and next_use - prev_use > 1
            and not state.hole_blocked(buffer_id, prev_use + 1, next_use)):
        chain = state.chain(buffer_id, next_use)
        if chain is not None:
            extra = 0
            for link in chain.links:
                extra += state.sizes[link.buffer_id]
            # the chain's inputs are resident at next_use too: never push that op over
            # budget
            if not extra or state.live[next_use] + extra <= state.budget:
                recompute = GapOption(chain.cost_us, RECOMPUTE, [OpSpan(prev_use + 1, next_use)],
                                      next_use, chain=chain)
    if options.allow_swap and (options.swap_temporaries
                               or state.by_id[buffer_id].kind == PERSISTENT):
        window = state.swap_window(buffer_id, prev_use, next_use, wraps)
        if window is not None:
            until, trigger = window.resident_until, window.trigger
            if wraps:
                holes = [h for h in (OpSpan(until, state.n), OpSpan(0, trigger))
                         if h.end > h.start]
            else:
                holes = [OpSpan(until, trigger)] if trigger > until else []
            # the data is back only at the due op
            if holes and not state.hole_blocked(buffer_id, until, next_use):
                link = window.out_us + window.in_us
                # across the boundary the copy out follows the last use: what it adds to
                # the D2H queue past the last op lengthens the iteration
                tail = (state.d2h.end_growth(window.out_issue_us, window.out_us,
                                             float(state.end_us[-1]))
                        if wraps and window.out_us > 0 else 0.0)
                cost_us = (options.swap_weight * link + window.late_us + tail
                           + 1e-9 * state.sizes[buffer_id])
                if recompute is None or cost_us < recompute.cost_us:
                    return GapOption(cost_us, SWAP, holes, next_use, swap=window)
    if options.wait_for_copies and (recompute is None or not _helps(state, recompute.holes)):
        return _waited_option(state, buffer_id, prev_use, next_use, wraps, options) or recompute
    return recompute


def _waited_option(state: PlanState, buffer_id: int, prev_use: int, next_use: int,
                   wraps: bool, options: GreedyOptions) -> GapOption | None:
    """The gap's swap with its copies waited for (:func:`~.waits.waited_window`), costed
    as a swap plus its waits."""
    waited = waited_window(state, buffer_id, prev_use, next_use, wraps)
    if waited is None:
        return None
    window = waited.window
    holes = ([h for h in (OpSpan(window.resident_until, state.n), OpSpan(0, window.trigger))
              if h.end > h.start] if wraps else [OpSpan(window.resident_until, window.trigger)])
    cost_us = (options.swap_weight * (window.out_us + window.in_us) + waited.wait_us
               + 1e-9 * state.sizes[buffer_id])
    return GapOption(cost_us, SWAP, holes, next_use, swap=window, waited=waited)


def _helps(state: PlanState, holes: list[OpSpan]) -> bool:
    return covered_count(state, holes) > 0


def _spans_over(state: PlanState, gap: IdleGap) -> bool:
    """Whether some op strictly inside ``gap`` (across the boundary: after the last use or
    before the first) is over the budget: every hole of every option of the gap lies
    there, so a gap without one cannot free bytes where they are missing."""
    if gap.wraps:
        return bool(state.over_budget_count(gap.prev_use + 1, state.n)
                    or state.over_budget_count(0, gap.next_use))
    return bool(state.over_budget_count(gap.prev_use + 1, gap.next_use))


def apply_option(state: PlanState, gap: IdleGap, option: GapOption) -> None:
    """Take ``gap`` off the device the way ``option`` (:func:`evaluate`) says."""
    if option.mode == RECOMPUTE:
        state.apply_recompute(gap.buffer_id, gap.prev_use, option.next_use, option.chain)
    elif option.waited is not None:
        apply_waited(state, gap.buffer_id, gap.prev_use, option.next_use, option.waited)
    else:
        state.apply_swap(gap.buffer_id, gap.prev_use, option.next_use, option.swap)


def candidate_gaps(trace: Trace, include_persistent: bool = True) -> list[IdleGap]:
    """Every idle gap of every buffer (of temporary buffers only, unless
    ``include_persistent``), in buffer order."""
    index = trace_index(trace)
    return list(index.gaps if include_persistent else index.temporary_gaps)


def free_time(state: PlanState, gap: IdleGap) -> float:
    """Capuchin's ``FT = swap_in_start − swap_out_end`` (µs, ideal times, idle link)."""
    size = state.sizes[gap.buffer_id]
    out_end = state.end_us[gap.prev_use] + state.cost.copy_us(size, "d2h")
    in_start = state.start_us[gap.next_use] - state.cost.copy_us(size, "h2d")
    if gap.wraps:
        in_start += state.end_us[-1]
    return float(in_start - out_end)


def run_greedy(trace: Trace, budget_bytes: int, cost, options: GreedyOptions,
               hot_ops: tuple[int, ...] = (), excluded: frozenset = frozenset()) -> PlanState:
    """Take gaps off the device until every op fits ``budget_bytes`` (or nothing helps).

    Temporary buffers first; persistent ones (their gaps between uses and across the
    iteration boundary, swap only) only if the budget still does not hold, because a
    weight on the host also blocks recomputing the activations it produces. With
    ``options.wait_for_copies``, all of them in one pass (:mod:`.waits`).

    ``options.segments > 0`` first drops every saved activation and re-runs the forward
    in that many segments, each once at the start of its backward (:mod:`.checkpoint`);
    the greedy then takes off what still does not fit (checkpoints, persistent buffers).

    ``hot_ops`` (ops a previous run could not bring under the budget) are served first,
    in the given order, each by the cheapest gaps that free bytes *at that op*, before the
    link and the recompute inputs are spent on easier ops (:func:`run_repaired`).
    The idle gaps in ``excluded`` (:class:`~.schedule.IdleGap` s) stay on the device.
    """

    def gaps(include_persistent: bool) -> list[IdleGap]:
        found = candidate_gaps(trace, include_persistent)
        return [g for g in found if g not in excluded] if excluded else found

    state = PlanState(trace, budget_bytes, cost, max_chain=options.max_chain,
                      late_trigger=options.late_trigger, lazy_release=options.lazy_release)
    if options.segments:
        apply_batches(state, options.segments, options.split)
    if hot_ops:
        everything = gaps(options.offload_persistent)
        for op in hot_ops:
            hot_op_pass(state, op, everything, options)
    passes = [gaps(False)]
    if options.offload_persistent:
        passes.append(gaps(True))
    if options.wait_for_copies:
        # one pass over every gap: a persistent gap's swap on time is taken before a
        # temporary's waited one
        passes = passes[-1:]
    for gaps in passes:
        if state.live.max() <= budget_bytes:
            break
        if options.order == LARGEST_SWAPS:
            largest_swaps_pass(state, gaps, options)
        if options.order in ("free-time", LARGEST_SWAPS):
            free_time_pass(state, gaps, options)
        else:
            cost_pass(state, gaps, options)
    return state


def run_repaired(trace: Trace, budget_bytes: int, cost, options: GreedyOptions,
                 rounds: int = 2, max_hot: int = 8,
                 excluded: frozenset = frozenset()) -> PlanState:
    """:func:`run_greedy`, repaired: while some op stays over the budget, run again with
    the ops left over (most excess first, accumulated over the rounds) as ``hot_ops``.
    Returns the first state that fits, else the last one. ``excluded``: as in
    :func:`run_greedy`."""
    hot: list[int] = []
    state = run_greedy(trace, budget_bytes, cost, options, excluded=excluded)
    for _round in range(rounds):
        over = np.flatnonzero(state.live > budget_bytes)
        if not len(over):
            break
        worst = over[np.argsort(-state.live[over], kind="stable")]
        hot += [int(op) for op in worst if int(op) not in hot][:max_hot]
        state = run_greedy(trace, budget_bytes, cost, options, hot_ops=tuple(hot),
                           excluded=excluded)
    return state


def hot_op_pass(state: PlanState, op: int, gaps: list[IdleGap], options: GreedyOptions) -> None:
    """Cheapest bytes first (lazy heap) among the gaps whose holes cover ``op``, until it
    fits."""
    if state.live[op] <= state.budget:
        return

    def option_at_op(gap: IdleGap) -> GapOption | None:
        option = evaluate(state, gap, options)
        if option is None or not any(h.start <= op < h.end for h in option.holes):
            return None
        return option

    heap = []
    for gap in gaps:
        if gap not in state.taken and gap.idle_at(op):
            option = option_at_op(gap)
            if option is not None:
                heap.append((option.cost_us / state.sizes[gap.buffer_id], gap))
    heapq.heapify(heap)
    while heap and state.live[op] > state.budget:
        _score, gap = heapq.heappop(heap)
        option = option_at_op(gap)
        if option is None:
            continue
        score = option.cost_us / state.sizes[gap.buffer_id]
        if heap and score > heap[0][0] * (1 + 1e-9) + 1e-15:
            heapq.heappush(heap, (score, gap))
            continue
        apply_option(state, gap, option)
        state.taken.add(gap)


def _ordered_pass(state: PlanState, gaps: list[IdleGap], options: GreedyOptions, key,
                  accepts=lambda option: True) -> None:
    """The ``gaps`` in the order of ``key``, each taken the way :func:`evaluate` says when
    ``accepts`` that option and it frees bytes at an op still over the budget, until no op
    is over it."""
    for gap in sorted(gaps, key=key):
        if not state.over_budget_ops():
            break
        if gap in state.taken:
            continue
        option = evaluate(state, gap, options)
        if option is not None and accepts(option) and _helps(state, option.holes):
            apply_option(state, gap, option)
            state.taken.add(gap)


def largest_swaps_pass(state: PlanState, gaps: list[IdleGap], options: GreedyOptions) -> None:
    """The swaps whose copies land on time, largest buffer first (then largest free
    time), each taken while it frees bytes at an op still over the budget; gaps across
    the iteration boundary (whose copy out may lengthen the tail) are left to the next
    pass."""
    _ordered_pass(state, [g for g in gaps if not g.wraps], options,
                  key=lambda g: (-int(state.sizes[g.buffer_id]), -free_time(state, g), g),
                  accepts=lambda option: option.mode == SWAP and option.swap.late_us <= 0)


def free_time_pass(state: PlanState, gaps: list[IdleGap], options: GreedyOptions) -> None:
    """Capuchin's order: largest free time first, each gap taken while it frees bytes at
    an op still over the budget."""
    _ordered_pass(state, gaps, options, key=lambda g: (-free_time(state, g), g))


def cost_pass(state: PlanState, gaps: list[IdleGap], options: GreedyOptions) -> None:
    """Cheapest relief first (:func:`option_score`), up to three rounds.

    Each gap keeps its last evaluated option; after every choice the scores are brought
    up to date from those options against the ops still over the budget
    (:class:`~.scores.ScoreTable`: those that can have changed), and only the cheapest gap
    is evaluated afresh (:func:`evaluate`, the costly part): see :func:`_take_cheapest`.
    """
    for _round in range(3):
        if state.live.max() <= state.budget:
            break
        table = ScoreTable(state, _candidates(state, gaps, options))
        while state.over_budget_ops() and _take_cheapest(state, table, options):
            table.compact()


def _candidates(state: PlanState, gaps: list[IdleGap],
                options: GreedyOptions) -> Iterator[tuple[IdleGap, GapOption]]:
    """Each gap not taken yet with its option (:func:`evaluate`), where the option frees
    bytes at an op over the budget."""
    for gap in gaps:
        if gap in state.taken or not _spans_over(state, gap):
            continue
        option = evaluate(state, gap, options)
        if option is not None and _helps(state, option.holes):
            yield gap, option


def _take_cheapest(state: PlanState, table: ScoreTable, options: GreedyOptions) -> bool:
    """Take the gap of ``table`` with the least score: the cheapest is evaluated afresh and
    taken when its fresh score still ranks first (within ``1e-9``; ties: the smaller gap);
    otherwise its new option is kept and the next cheapest is looked at. False when no gap
    left frees bytes at an op over the budget."""
    scores = table.scores(state)
    while len(scores):
        i = int(np.argmin(scores))
        if not np.isfinite(scores[i]):
            return False
        gap = table.gaps[i]
        option = evaluate(state, gap, options)
        covered = 0 if option is None else covered_count(state, option.holes)
        if not covered:  # frees nothing over the budget (:func:`_helps`)
            table.deactivate(i)
            scores[i] = np.inf
            continue
        table.update(i, option)
        # option_score, with the count just taken
        score = option.cost_us / (state.sizes[gap.buffer_id] * covered)
        table.last_score[i] = score
        scores[i] = np.inf
        if score > scores.min() * (1 + 1e-9) + 1e-15:
            scores[i] = score
            continue
        apply_option(state, gap, option)
        state.taken.add(gap)
        table.deactivate(i)
        return True
    return False


ON_TIME_TRIGGERS = ("earliest", "latest")
"""Late triggers under which every hole of a swap ends at or before the latest trigger
whose copy in lands on time (``"covering"`` may stretch a hole up to the next use)."""


def out_of_reach(trace: Trace, budget_bytes: int, cost, options: GreedyOptions,
                 planner: str = "greedy") -> str | None:
    """Why :func:`run_greedy` with ``options`` cannot end within ``budget_bytes``, known
    without running it, or ``None``: at some op the persistent bytes that no swap can take
    off the device, with what the op uses, exceed the budget
    (:func:`~.relief.on_time_floor`: copies in on time under :data:`ON_TIME_TRIGGERS`, only
    copies out otherwise); without swaps of persistent buffers, all persistent state
    counts. The same holds for any planner whose persistent swaps are windows of
    :class:`~.state.PlanState` under ``options`` (``capuchin``, ``vdnn``); ``planner``
    names it in the reason."""
    relief = options.allow_swap and options.offload_persistent
    late_in = options.late_trigger not in ON_TIME_TRIGGERS
    over = highest_floor(trace, cost, relief, late_in)
    if over is None or over.floor_bytes <= budget_bytes:
        return None
    how = "copied out by then" if late_in else "landing on time"
    return (f"{planner}: op {over.op} needs at least {over.floor_bytes} bytes resident "
            f"(budget {budget_bytes}): what it uses and the persistent bytes no swap "
            f"{how} can take off the device there")


class FullestOp(NamedTuple):
    """The op with the most bytes resident, and how many."""

    op: int
    resident_bytes: int


def fullest_op(state: PlanState) -> FullestOp:
    """The op with the most bytes resident under the current schedule (the first of ties)."""
    k = int(np.argmax(state.live))
    return FullestOp(k, int(state.live[k]))
