"""The last resort's walk counting bytes alone, its residencies placed afterwards.

:mod:`.working_sets` walks the ops with the device as a cache of byte ranges: where no
range holds what an op needs, every resident leaves and the op's working set is packed
from address 0 (a *repack*: what the op needs that was resident is copied out and back
in). At a budget as small as the largest working set that happens at the tightest op,
and copies that only move bytes stall the ops around it. Here the same walk decides what
is resident from bytes alone (the bytes an op needs always fit beside nothing else), and
the residencies then get their offsets at once from the static offset solvers, which see
every residency's whole span (the tightest op's residencies packed with foresight)::

    op t:   close the temporaries t no longer needs
            for each buffer op t needs and the device lacks, largest first:
              evict the residents cheapest to evict until its bytes are free
            enter it (produced by op t, or copied in, due at t)
            copy in early what later ops need where the bytes are free, or freed from
              residents needed after them (as the range walk does)
    then:   offsets for every residency within the cache's bytes: the heuristic static
            solvers, then the exact search with a bounded number of nodes

A resident's cost of eviction is the range walk's (its copy back in, and out unless
clean, over the ops until it is needed), per byte it frees; the :class:`ByteRules` add
what the range walk does not see: a dirty resident whose copy out (after its last use,
behind the copies out before it on the link) would not be done when the op runs stalls
that op, so that stall may count too; copies in ahead of their ops may be kept from
evicting dirty residents at all (they then wait for bytes freed otherwise); a buffer
evicted before its next use may be copied in early again (the range walk lets the moment
pass while it was resident); and the copies in waiting may be served by the latest time
each can start, in that order, as the FIFO copy engine will. Which rules give the fastest
plan depends on the trace and the link, so
:func:`~.working_sets.plan_working_sets` walks with each of :data:`RULES` and keeps the
fastest plan.

The placement may find no offsets within the budget (fragmentation the solvers cannot
pack away): then that walk has no plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from cupool.core.vocabulary import Residency, SwapIn, Trace
from cupool.planning.budget.engine.placement import place
from cupool.planning.budget.engine.residency import ResidencyInterval
from cupool.planning.budget.working_sets import _Walk
from cupool.planning.solvers import SolverParams

OFFSET_SOLVERS = ("greedy-size", "best-fit", "greedy-breadth", "exact")
"""The static solvers tried in turn on the byte walk's residencies."""

EXACT_PARAMS = SolverParams(time_limit_s=2.0, max_nodes=20_000)
"""What the exact search gets: bounded by nodes (the same answer on any machine) and, as
a safety cap, by the clock."""


@dataclass(frozen=True)
class ByteRules:
    """How the byte walk chooses residents to evict and copies in to start early.

    stall_weight: µs of eviction cost per µs the op being walked would wait for a dirty
      resident's copy out (estimated on the ideal timeline, copies out one after another
      on the link); 0: not counted.
    prefetch_evicts_dirty: whether a copy in ahead of its op may evict a dirty resident
      (``False``: only clean ones, whose bytes are free at once).
    requeue: a buffer evicted before its next use is copied in early for it like any
      other (``False``: only where its lead falls after the eviction; the range walk's
      rule).
    latest_start_first: the copies in waiting to start early are taken by the latest time
      each may start on the ideal timeline (its op's start less its copy), and one that
      finds no room holds back those after it (a FIFO copy engine serves them in that
      order); ``False``: by their ops, the largest first, each into the room it finds.
    """

    stall_weight: float = 0.0
    prefetch_evicts_dirty: bool = True
    requeue: bool = False
    latest_start_first: bool = False

    def label(self) -> str:
        return (f"stall weight {self.stall_weight:g}, prefetch evicts "
                f"{'any' if self.prefetch_evicts_dirty else 'clean'}"
                f"{', requeued' if self.requeue else ''}"
                f"{', latest start first' if self.latest_start_first else ''}")


RULES = (ByteRules(), ByteRules(0.0, True, True, True), ByteRules(1.0, True, False, True),
         ByteRules(1.0, False, True, False))
"""The rules the byte walks run with: of the 24 mixes of these rules (stall weight 0, 1
or 3), the four whose fastest plan was closest to the fastest of all on the near-budget
shapes of ``bench/always_plan.py`` at every fraction and on both links (raw plans,
before ``auto`` refines them: 0.03 of the ideal iteration short in all, over 14 cells)."""


class ByteWalk(_Walk):
    """:class:`~.working_sets._Walk` keeping only the bytes in use: every residency's
    offset is 0 until :func:`placed_walk` places them."""

    def __init__(self, trace: Trace, capacity: int, needs: dict[int, tuple[int, ...]],
                 skipped: set[int], cost, rules: ByteRules) -> None:
        super().__init__(trace, capacity, needs, skipped, cost)
        self.rules = rules
        self.used = 0
        self.link_free_us = 0.0  # when the copies out the walk issued are done (estimated)
        self.requeued: list[tuple[int, int]] = []

    def _leave(self, k: int, t: int, final: bool = False) -> None:
        if not final and self._dirty(k) and self.next_need[k] < self.dead:
            self.link_free_us = self._copied_out_us(k, t)
        super()._leave(k, t, final)
        if self.rules.requeue and not final and t < self.next_need[k] < self.num_ops:
            self.requeued.append((int(self.next_need[k]), k))

    def _dirty(self, k: int) -> bool:
        return bool(self.evict_us[k] > self.copy_in_us[k])

    def _copied_out_us(self, k: int, t: int) -> float:
        """When resident ``k``'s copy out would be done were it evicted at op ``t``: after
        its last use before ``t``, behind the copies out issued before it."""
        last = self._last_need_before(k, t)
        return max(self.op_start[last + 1], self.link_free_us) + self.copy_out_us[k]

    def _unlist(self, k: int) -> tuple[int, int]:
        del self.offset[k]
        self.used -= self.sizes[k]
        self.evict_us[k] = self.copy_in_us[k]  # clean again
        return self.since.pop(k), 0

    def _enter(self, k: int, t: int, offset: int = 0, due: int | None = None) -> None:
        self.offset[k], self.since[k] = offset, t
        self.used += self.sizes[k]
        if not self.is_persistent[k] and self.start_op[k] == t:  # produced here
            self.evict_us[k] = self.dirty_evict_us[k]
        else:
            self.entry[k] = len(self.actions)
            self.actions.append(SwapIn(self.ids[k], t, t if due is None else due))

    def _evict_for(self, size: int, t: int, before: int | None = None) -> int | None:
        """Free ``size`` bytes by evicting the cheapest residents (per byte; then those
        not needed for the bytes they free given back, the dearest first), none that op
        ``t`` needs (nor, with ``before``, any needed at or before op ``before``, nor,
        unless the rules allow, a dirty one); 0, or ``None`` when those residents hold
        too few bytes."""
        missing = size - (self.capacity - self.used)
        if missing <= 0:
            return 0
        sizes, pinned, next_need = self.sizes, self.pinned, self.next_need
        rules = self.rules
        clean_only = before is not None and not rules.prefetch_evicts_dirty
        movable = [k for k in self.offset if not pinned[k]
                   and (before is None or next_need[k] > before)
                   and not (clean_only and self._dirty(k))]
        if sum(sizes[k] for k in movable) < missing:
            return None

        def weight(k: int) -> float:
            cost = float(self.evict_us[k]) / max(1, int(next_need[k]) - t)
            if rules.stall_weight and self._dirty(k):
                late = self._copied_out_us(k, t) - self.op_start[t]
                cost += rules.stall_weight * max(0.0, late)
            return cost

        weights = {k: weight(k) for k in movable}
        chosen = _cheapest(movable, weights, sizes, missing)
        if rules.stall_weight:
            # a stall is paid once whatever the bytes: per byte, a large dirty resident
            # looks cheap; the residents that stall no op may be cheaper in all
            prompt = [k for k in movable if not (self._dirty(k) and self._copied_out_us(k, t)
                                                 > self.op_start[t])]
            if sum(sizes[k] for k in prompt) >= missing:
                other = _cheapest(prompt, weights, sizes, missing)
                if sum(weights[k] for k in other) < sum(weights[k] for k in chosen):
                    chosen = other
        for k in chosen:
            self._leave(k, t)
            self.evictions += 1
        return 0

    _room = _evict_for  # no ranges: free bytes are all there is

    def _prefetch(self, t: int) -> None:
        self.pending += self.requeued
        self.requeued = []
        if not self.rules.latest_start_first:
            super()._prefetch(t)
            return
        latest = {(j, k): self.op_start[j] - self.copy_in_us[k]
                  for j, k in [*self.pending, *self.prefetch_from[t]]}
        waiting, held_back = [], False
        for j, k in sorted(latest, key=lambda item: (latest[item], item[0], item[1])):
            if j <= t or k in self.offset or self.next_need[k] != j:
                continue  # come, resident, or needed sooner (its own entry serves that)
            offset = None if held_back else self._room(self.sizes[k], t, before=j)
            if offset is None:
                waiting.append((j, k))
                held_back = True
            else:
                self._enter(k, t, offset, due=j)
        self.pending = waiting


def _cheapest(movable: list[int], weights: dict[int, float], sizes: list[int],
              missing: int) -> list[int]:
    """Residents of ``movable`` holding ``missing`` bytes at least, the cheapest per byte
    first, then those not needed for the bytes given back (the dearest first)."""
    chosen, freed = [], 0
    for k in sorted(movable, key=lambda k: (weights[k] / max(1, sizes[k]), k)):
        if freed >= missing:
            break
        chosen.append(k)
        freed += sizes[k]
    for k in sorted(chosen, key=lambda k: (-weights[k], k)):
        if freed - sizes[k] >= missing:
            chosen.remove(k)
            freed -= sizes[k]
    return chosen


class PlacedWalk(NamedTuple):
    """The byte walk's residencies with their offsets, its actions (swap-ins cancelled
    removed) and how many residents it evicted."""

    residencies: list[Residency]
    actions: list
    evictions: int


def placed_walk(trace: Trace, capacity: int, needs: dict[int, tuple[int, ...]],
                skipped: set[int], cost, rules: ByteRules) -> PlacedWalk | None:
    """The byte walk of every buffer but ``skipped`` within ``capacity`` bytes by
    ``rules``, its residencies placed within ``[0, capacity)``; ``None`` when no solver
    places them."""
    walk = ByteWalk(trace, capacity, needs, skipped, cost, rules)
    walk.run()
    intervals = [ResidencyInterval(r.buffer_id, r.start, r.end) for r in walk.residencies]
    for solver in OFFSET_SOLVERS:
        params = EXACT_PARAMS if solver == "exact" else SolverParams()
        # copied in at the start and out at the end, a persistent buffer may take two
        # offsets (the plan copies it in and out)
        placed = place(trace, intervals, capacity, solver, params, untie=True)
        if placed.offsets is not None:
            residencies = [Residency(r.buffer_id, r.start, r.end, int(offset))
                           for r, offset in zip(intervals, placed.offsets.tolist(),
                                                strict=True)]
            return PlacedWalk(residencies, walk.actions, walk.evictions)
    return None

