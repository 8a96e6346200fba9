"""A swapping plan indexed by op: what the engine does at each op boundary.

:func:`build_schedule` reads a plan once (and again whenever the feedback replaces it)
and answers, for op ``i``, the questions the engine asks at every op of every
iteration, without scanning the plan:

=====================  ===================================================================
``free_at[i]``         residencies ``(buffer, start)`` whose pool blocks are freed before
                       op ``i`` (they ended at ``i``)
``alloc_at[i]``        residencies starting at ``i``, in pool allocation order
``swap_ins[i]``        swap-ins *triggered* at ``i`` (their copies are issued then)
``due[i]``             swap-ins *due* at ``i`` (op ``i`` waits for their landing)
``recomputes[i]``      buffers recomputed just before op ``i``
``swap_outs[i]``       buffers swapped out just after op ``i``; ``out_levels[(b, i)]`` is
                       the host level (pinned or pageable) of that swap-out; ``(b, i)`` in
                       ``drops`` when it is a drop (clean data: nothing is copied, the
                       host copy kept since its swap-in serves the next one; ``dropped``
                       holds every such buffer)
``produced[i]``        temporary buffers whose first residency starts at ``i`` without an
                       action bringing them (op ``i`` produces them)
``ends[i]``            ``(buffer, state)``: residencies ending at ``i`` without a swap-out,
                       the handle's state after them (``dropped`` until a later residency
                       recomputes it, ``retired`` at the end of a temporary's lifetime);
                       ``host`` for a residency ending after a *held* swap-out: one
                       issued before the residency's last op, whose bytes stay readable
                       on the device until ``i`` (``held`` holds ``(b, after_op)`` of
                       each)
``uses[i]``            buffers the trace says op ``i`` uses
``ephemeral[i]``       the ephemeral residencies among the recomputes before op ``i``
                       (:class:`~cupool.swap.recomputed.EphemeralOp`: served and given back
                       there, in none of the other tables; every residency a recompute
                       enters is served at its recompute, not in ``alloc_at``)
=====================  ===================================================================

and, for the whole iteration: ``residencies[b]`` (buffer ``b``'s, by start), ``home[b]``
(the start of the residency a persistent buffer begins the iteration in, when no action
brings it there), ``entered[(b, start)]`` (the action that begins a residency) and
:meth:`Schedule.holding` (which residency holds a buffer at an op).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from cupool.core.vocabulary import PERSISTENT, Plan, RecomputeAction, SwapIn, SwapOut, Trace
from cupool.swap.errors import EngineError
from cupool.swap.handles import DROPPED, HOST, RETIRED
from cupool.swap.layout import Layout
from cupool.swap.recomputed import ephemeral_ops, recompute_keys


@dataclass(frozen=True)
class Schedule:
    """``plan`` indexed by op (module docstring); ``offsets`` and ``block_sizes`` are the
    :class:`~cupool.swap.layout.Layout`'s. Read-only once built, except the memo behind
    :meth:`holding`."""

    plan: Plan
    offsets: dict
    block_sizes: dict
    residencies: dict
    alloc_at: dict
    free_at: dict
    swap_ins: dict
    due: dict
    recomputes: dict
    swap_outs: dict
    out_levels: dict
    produced: dict
    ends: dict
    home: dict
    entered: dict
    uses: dict
    persistent: frozenset
    drops: frozenset = frozenset()
    dropped: frozenset = frozenset()
    held: frozenset = frozenset()
    ephemeral: dict = field(default_factory=dict)
    _holding: dict = field(default_factory=dict, repr=False, compare=False)

    def holding(self, b: int, i: int) -> int | None:
        """The start of buffer ``b``'s residency that holds op ``i`` (``None``: none)."""
        start = self._holding.get((b, i))
        if start is None:
            start = next((r.start for r in self.residencies[b] if r.start <= i < r.end), None)
            self._holding[(b, i)] = start
        return start


def build_schedule(plan: Plan, trace: Trace, layout: Layout) -> Schedule:
    """Index ``plan`` (a swapping plan for ``trace``) by op. Raises
    :class:`~cupool.swap.errors.EngineError` for a persistent buffer that would end the
    iteration at another offset than it starts it (moving weights across the iteration
    boundary is not supported)."""
    by_buffer = defaultdict(list)
    for r in plan.residencies:
        by_buffer[r.buffer_id].append(r)
    for spans in by_buffer.values():
        spans.sort(key=lambda r: r.start)
    alloc_at, free_at = defaultdict(list), defaultdict(list)
    remade = recompute_keys(plan, trace)  # served among the recomputes (.recomputed)
    passing = ephemeral_ops(remade)
    for b, start in layout.order:
        if (b, start) not in remade:
            alloc_at[start].append((b, start))
    for r in plan.residencies:
        if r.start < r.end:
            free_at[r.end].append((r.buffer_id, r.start))
    entered = {}
    swap_ins, due = defaultdict(list), defaultdict(list)
    recomputes, swap_outs = defaultdict(list), defaultdict(list)
    out_levels, drops = {}, set()
    for action in plan.actions:
        b = action.buffer_id
        if isinstance(action, SwapIn):
            swap_ins[action.trigger_op].append(action)
            due[action.due_op].append(action)
            entered[(b, action.trigger_op)] = action
        elif isinstance(action, RecomputeAction):
            recomputes[action.before_op].append(b)
            entered[(b, action.before_op)] = action
        elif isinstance(action, SwapOut):
            swap_outs[action.after_op].append(b)
            out_levels[(b, action.after_op)] = action.level
            if action.drop:
                drops.add((b, action.after_op))
    produced, ends, home = defaultdict(list), defaultdict(list), {}
    left_by_swap, held = set(), set()
    for action in plan.actions:
        if isinstance(action, SwapOut):
            b = action.buffer_id
            for r in by_buffer.get(b, ()):
                if r.start <= action.after_op < r.end:
                    left_by_swap.add((b, r.start))
                    if action.after_op + 1 < r.end:  # copied out early, bytes kept
                        held.add((b, action.after_op))
                        ends[r.end].append((b, HOST))
    for b, spans in by_buffer.items():
        buffer = trace.buffer(b)
        first = spans[0]
        if (b, first.start) not in entered:
            if buffer.kind != PERSISTENT:
                produced[first.start].append(b)
            else:
                if spans[-1].offset != first.offset:
                    raise EngineError(f"persistent buffer {b} ends the iteration at offset "
                                      f"{spans[-1].offset}, starts it at {first.offset}: "
                                      f"moving it across the boundary is not supported")
                home[b] = first.start
        for k, r in enumerate(spans):
            if (b, r.start) in left_by_swap or r.start == r.end:
                continue
            if k + 1 < len(spans):
                ends[r.end].append((b, DROPPED))
            elif buffer.kind != PERSISTENT:
                ends[r.end].append((b, RETIRED))
    uses = defaultdict(list)
    for buffer in trace.buffers:
        for i in buffer.uses:
            uses[i].append(buffer.id)
    persistent = frozenset(b.id for b in trace.buffers if b.kind == PERSISTENT)
    return Schedule(plan=plan, offsets=layout.offsets, block_sizes=layout.block_sizes,
                    residencies=by_buffer, alloc_at=alloc_at, free_at=free_at,
                    swap_ins=swap_ins, due=due, recomputes=recomputes, swap_outs=swap_outs,
                    out_levels=out_levels, produced=produced, ends=ends, home=home,
                    entered=entered, uses=uses, persistent=persistent, drops=frozenset(drops),
                    dropped=frozenset(b for b, _op in drops), held=frozenset(held),
                    ephemeral=passing)
