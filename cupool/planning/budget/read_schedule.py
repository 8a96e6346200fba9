"""A finished plan read back as the schedule that makes it.

The planners build a plan from a :class:`~.engine.schedule.Schedule` (each buffer's gaps
off the device: where its bytes are freed, ``resident_until``, and where its swap-in is
triggered, ``resident_from``). :func:`schedule_of` reverses that for a plan whatever made
it, so a search over schedules (:mod:`.searched_schedule`) can start from any member's
plan: the residencies of each buffer give its gaps, the swap-ins their triggers, the
recomputes which gaps are re-made, and a persistent buffer's stay at either end of the
iteration the form of its wrap gap.
"""

from __future__ import annotations

from cupool.core.vocabulary import (
    PERSISTENT,
    PINNED,
    Plan,
    RecomputeAction,
    SwapIn,
    SwapOut,
    Trace,
)
from cupool.planning.budget.engine.residency import residency_intervals
from cupool.planning.budget.engine.schedule import (
    RECOMPUTE,
    SWAP,
    ChainRecompute,
    Gap,
    Schedule,
)


def schedule_of(trace: Trace, plan: Plan) -> Schedule | None:
    """The schedule that gives ``plan``'s residencies and actions back
    (:func:`~.engine.residency.residency_intervals`, the triggers of its swap-ins), or
    ``None`` for a plan no schedule makes here: a static plan, copies through another host
    level than pinned memory, ephemeral residencies. Persistent state taken off in the
    iteration's head or brought back in its tail is a wrap gap of those forms
    (:class:`~.engine.schedule.Gap`)."""
    if not plan.residencies or any(getattr(a, "level", PINNED) != PINNED for a in plan.actions):
        return None
    if any(r.end <= r.start for r in plan.residencies):
        return None
    spans: dict[int, list] = {}
    for r in plan.residencies:
        spans.setdefault(r.buffer_id, []).append(r)
    remade = {(a.buffer_id, a.before_op) for a in plan.actions
              if isinstance(a, RecomputeAction)}
    triggered = {(a.buffer_id, a.trigger_op) for a in plan.actions if isinstance(a, SwapIn)}
    schedule = Schedule()
    for buffer_id, held in spans.items():
        buffer = trace.buffer(buffer_id)
        held.sort(key=lambda r: r.start)
        uses = [[u for u in buffer.uses if r.start <= u < r.end] for r in held]
        boundary = _boundary_form(trace, buffer, held, uses)
        if boundary is not None:  # its unused stay at either end is the wrap gap's
            gap, keep = boundary
            schedule.add(gap)
            held, uses = [held[k] for k in keep], [uses[k] for k in keep]
        for r, used in zip(held, uses, strict=True):
            if not used:  # a chain recompute: re-made for one op that reads it
                if r.end - r.start != 1 or (buffer_id, r.start) not in remade:
                    return None
                schedule.chains.append(ChainRecompute(buffer_id, r.start, 1))
        held = [r for r, used in zip(held, uses, strict=True) if used]
        uses = [used for used in uses if used]
        if not held:
            continue
        if buffer.kind == PERSISTENT and boundary is None and (
                held[0].start > 0 or (buffer_id, 0) in triggered):
            schedule.add(Gap(buffer_id, uses[-1][-1], uses[0][0], SWAP, held[-1].end,
                             held[0].start))
        for k in range(1, len(held)):
            mode = RECOMPUTE if (buffer_id, held[k].start) in remade else SWAP
            schedule.add(Gap(buffer_id, uses[k - 1][-1], uses[k][0], mode, held[k - 1].end,
                             held[k].start))
    rebuilt = sorted(residency_intervals(trace, schedule))
    if rebuilt != sorted((r.buffer_id, r.start, r.end) for r in plan.residencies):
        return None
    triggers = {(g.buffer_id, g.resident_from) for gaps in schedule.gaps.values()
                for g in gaps if g.mode == SWAP}
    outs = sum(isinstance(a, SwapOut) for a in plan.actions)
    if (triggers != triggered or outs != len(triggered)
            or len(remade) != schedule.count(RECOMPUTE) + len(schedule.chains)):
        return None
    return schedule


def _boundary_form(trace: Trace, buffer, held: list, uses: list) -> tuple[Gap, list] | None:
    """A persistent buffer's wrap gap taken in the iteration's head (a first stay from op 0
    without uses: copied out after op 0, back for its first use) or brought back in its
    tail (a last stay to the iteration's end without uses), with the indices of the stays
    that remain; ``None`` for neither."""
    if buffer.kind != PERSISTENT or len(held) < 2 or not buffer.uses:
        return None
    first, last = min(buffer.uses), max(buffer.uses)
    if not uses[0] and held[0].start == 0 and uses[1]:  # the head
        return (Gap(buffer.id, last, first, SWAP, held[0].end, held[1].start),
                list(range(1, len(held))))
    if not uses[-1] and held[-1].end == trace.num_ops and uses[-2]:  # the tail
        return (Gap(buffer.id, last, first, SWAP, held[-2].end, held[-1].start),
                list(range(len(held) - 1)))
    return None


__all__ = ["schedule_of"]
