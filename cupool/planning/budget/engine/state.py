"""The planning state of the planners that take gaps off the device one at a time (the
greedy, capuchin, vdnn, segments-ga): estimated op times, the two FIFO copy queues, what is
resident when, and what taking a gap off the device would take: a swap's
:class:`SwapWindow` or a recompute's :class:`RecomputeChain`.

Times are estimates for *decisions* (the simulator has the last word): op ``i`` starts at
``start_us[i]`` = the sum of the durations before it plus the recomputes planned so far.
A copy is issued at an op boundary and served FIFO by its direction's engine::

    compute   |op 3|op 4      |op 5|op 6          |op 7|
    D2H            [swap-out b ]                         issued after op 3 (b's last use)
    H2D                          [swap-in b    ]         trigger op 5, due op 7
    b resident [........)                       [....)   hole [5, 6): the bytes are free
"""

from __future__ import annotations

import bisect

import numpy as np

from cupool.core.vocabulary import Trace
from cupool.planning.budget.engine import copies, walks
from cupool.planning.budget.engine.copies import QueuedCopy
from cupool.planning.budget.engine.records import (
    WRAP,
    ChainLink,
    Hole,
    HoleIndex,
    RecomputeChain,
    SwapAdvance,
    SwapWindow,
)
from cupool.planning.budget.engine.schedule import (
    RECOMPUTE,
    SWAP,
    ChainRecompute,
    Gap,
    IdleGap,
    Schedule,
    leaves_clean,
    trace_index,
)

TRIGGER_SCAN = 48
"""Triggers a swap tries below the latest one whose own copy lands on time (looking for
one that also leaves every later copy on time) before it settles for a late swap; also
the most triggers ``late_trigger="covering"`` compares."""

LATE_TRIGGERS = ("earliest", "latest", "covering")
"""Where a swap whose copy in cannot land on time is triggered (:meth:`PlanState.swap_window`)."""

class PlanState:
    """Mutable state of a greedy planner over one trace (with recipes) and budget."""

    def __init__(self, trace: Trace, budget_bytes: int, cost, max_chain: int = 6,
                 late_trigger: str = "earliest",
                 lazy_release: bool = False) -> None:
        if late_trigger not in LATE_TRIGGERS:
            raise ValueError(f"late_trigger {late_trigger!r}: expected one of {LATE_TRIGGERS}")
        self.late_trigger = late_trigger
        self.lazy_release = lazy_release
        self.trace = trace
        self.cost = cost
        self.budget = budget_bytes
        self.max_chain = max_chain
        self.n = trace.num_ops
        self.durations = np.array(cost.op_times(trace), dtype=float)
        self._op_us = self.durations.tolist()
        self.extra = np.zeros(self.n, dtype=float)
        self._times()
        self.schedule = Schedule()
        self.holes: dict[int, list[Hole]] = {}  # edit through _add_hole / _set_hole
        self._hole_index: dict[int, HoleIndex] = {}  # by buffer, until its holes change
        self.transient: dict[int, set[int]] = {}
        self.pinned: dict[int, set[int]] = {}
        self._pin_ops: dict[int, list[int]] = {}  # pinned, each buffer's ops ascending
        index = trace_index(trace)
        # read only, shared by every state of the trace
        self.base, self.by_id, self.sizes = index.base, index.by_id, index.sizes
        self._recipes = index.recipes  # (op, inputs), read by every chain walk
        self._walk_tables = walks.walk_tables(trace)  # the compiled walk's, or None
        self._copy_times: dict[int, tuple[float, float]] = {}  # by buffer: d2h, h2d µs
        self.live = index.base_live.copy()
        self._over: list[int] | None = None  # over_budget_ops(), once asked
        self.over_version = 0  # changes whenever _over does (an op crossed the budget)
        self._over_mask = np.zeros(0, dtype=bool)  # live > budget, with _over
        self.d2h = copies.CopyEngine()
        self.h2d = copies.CopyEngine()
        self.h2d_copies: dict[tuple[int, int], QueuedCopy] = {}  # by (buffer, prev_use)
        self.recompute_us = 0.0
        self.taken: set[IdleGap] = set()
        self._walks: dict[tuple[int, int], tuple] = {}  # ChainWalk fields, by (buffer, op)
        # buffer -> the keys of the walks that read it (a dict of keys, as a set whose
        # entries the garbage collector need not track)
        self._walks_reading: dict[int, dict[tuple[int, int], None]] = {}

    # -- time ----------------------------------------------------------------------------
    def _times(self) -> None:
        total = self.durations + self.extra
        self.start_us = np.concatenate(([0.0], np.cumsum(total)[:-1]))
        self.end_us = self.start_us + total
        self._starts_list: list[float] | None = None  # start_us as a list, made when read

    @property
    def _starts(self) -> list[float]:
        """``start_us`` as a list (reading one op's start in a loop), made when first read
        after the timeline changed."""
        if self._starts_list is None:
            self._starts_list = self.start_us.tolist()
        return self._starts_list

    def op_at_or_after(self, t_us: float, low: int) -> int:
        """The first op ``>= low`` that starts at or after ``t_us`` (``n`` if none)."""
        k = bisect.bisect_left(self._starts, t_us - 1e-9)
        return max(k, low)

    # -- the budget ----------------------------------------------------------------------
    def over_budget_ops(self) -> list[int]:
        """The ops with more bytes resident than the budget, ascending (kept up to date as
        ``live`` changes: change it only through this state's methods; the list is the
        state's own, not to be changed or kept)."""
        if self._over is None:
            self._over_mask = self.live > self.budget
            self._over = np.flatnonzero(self._over_mask).tolist()
            self.over_version += 1
        return self._over

    def _live_changed(self, start: int, end: int) -> None:
        """``live`` changed at ops ``[start, end)`` only: bring the over-budget ops up to
        date where an op went over or under the budget."""
        over = self._over
        if over is None:
            return
        now = self.live[start:end] > self.budget
        mask = self._over_mask[start:end]
        flipped = np.flatnonzero(now != mask)
        if not len(flipped):
            return
        self.over_version += 1
        mask[:] = now
        if len(flipped) > 8:
            lo = bisect.bisect_left(over, start)
            hi = bisect.bisect_left(over, end, lo)
            over[lo:hi] = (np.flatnonzero(now) + start).tolist()
            return
        for k in (flipped + start).tolist():
            i = bisect.bisect_left(over, k)
            if i < len(over) and over[i] == k:
                del over[i]
            else:
                over.insert(i, k)

    def over_budget_count(self, start: int, end: int) -> int:
        """How many ops of ``[start, end)`` have more bytes resident than the budget."""
        over = self.over_budget_ops()
        return bisect.bisect_left(over, end) - bisect.bisect_left(over, start)

    # -- residency -----------------------------------------------------------------------
    def resident(self, buffer_id: int, op: int) -> bool:
        """Is the buffer resident (with data) during ``op`` under the current schedule?"""
        transient = self.transient.get(buffer_id)
        if transient and op in transient:
            return True
        s, e = self.base[buffer_id]
        holes = self.holes.get(buffer_id)
        if not holes:
            return s <= op < e
        index = self._holes_of(buffer_id)
        if index.wrap is not None:  # resident [wrap.end, wrap.start) inside the iteration
            if op >= index.wrap.start or op < index.wrap.end:
                return False
        elif not s <= op < e:
            return False
        return index.at(op) is None

    def hole_kind(self, buffer_id: int, op: int) -> str | None:
        """The kind of the (non-wrap) hole the buffer has at ``op``, if any."""
        if not self.holes.get(buffer_id):
            return None
        hole = self._holes_of(buffer_id).at(op)
        return None if hole is None else hole.kind

    def _holes_of(self, buffer_id: int) -> HoleIndex:
        index = self._hole_index.get(buffer_id)
        if index is None:
            index = self._hole_index[buffer_id] = HoleIndex.of(self.holes[buffer_id])
        return index

    def _add_hole(self, buffer_id: int, hole: Hole) -> None:
        self.holes.setdefault(buffer_id, []).append(hole)
        index = self._hole_index.get(buffer_id)
        if index is not None:
            index = index.added(hole)
            if index is None:
                del self._hole_index[buffer_id]
            else:
                self._hole_index[buffer_id] = index

    def _set_hole(self, buffer_id: int, old: Hole, new: Hole) -> None:
        holes = self.holes[buffer_id]
        holes[holes.index(old)] = new
        self._hole_index.pop(buffer_id, None)

    # -- recompute -----------------------------------------------------------------------
    def chain(self, buffer_id: int, op: int) -> RecomputeChain | None:
        """What recomputing ``buffer_id`` just before ``op`` takes: its producer plus every
        dropped input that must be recomputed too (``links``), and the swapped-out inputs
        whose swap-in must land by ``op`` instead of their next use (``advances``, see
        :meth:`advance_swap`). ``None`` when some input cannot be made resident there.

        The walk over the inputs (:meth:`_chain_walk`) depends only on where the buffers
        it reads are resident at ``op``, so it is cached until one of them gains or changes
        a hole or a transient residency there; the advances depend on the copy queue and
        the timeline, so they are asked for afresh, in the walk's order (asking also moves
        the old copy behind the copies issued at the same time, which later answers see)."""
        walk = self._walks.get((buffer_id, op))
        if walk is None:
            walk = self._chain_walk(buffer_id, op)
        swapped, cost_us, links = walk
        advances: list[SwapAdvance] = []
        for x in swapped:
            advance = self.advance_swap(x, op)
            if advance is None:
                return None
            advances.append(advance)
        if cost_us is None:
            return None
        return RecomputeChain(cost_us, [ChainLink(x, depth) for x, depth in links], advances)

    def _chain_walk(self, buffer_id: int, op: int) -> tuple:
        """Walk the inputs of ``buffer_id``'s recipe at ``op`` (:mod:`.walks`) and
        cache the result under every buffer whose residency it read. The walk is kept as a
        plain tuple with the fields of :class:`~.records.ChainWalk` (its links as plain
        ``(buffer_id, depth)`` tuples): nothing in it is tracked by the garbage collector,
        which otherwise walks thousands of cached walks at every full collection."""
        tables = self._walk_tables
        if tables is not None:  # compiled: walked and kept in one call
            return tables.walk_into(self._walks, self._walks_reading, self._op_us,
                                    self.transient, self.holes, self._hole_index,
                                    walks.hole_status, self, buffer_id, op, self.max_chain)
        swapped, cost, links, read = walks.walk_python(self, buffer_id, op)
        walk = (swapped, cost, links)
        key = (buffer_id, op)
        self._walks[key] = walk
        reading = self._walks_reading
        for x in read:
            keys = reading.get(x)
            if keys is None:
                reading[x] = {key: None}
            else:
                keys[key] = None
        return walk

    def _residency_changed(self, buffer_id: int, start: int, end: int) -> None:
        """Whether ``buffer_id`` is resident (and the kind of its hole) changed at ops
        ``[start, end)`` only: forget the cached chain walks at those ops that read it (a
        walk at ``op`` reads only what is resident at ``op``)."""
        keys = self._walks_reading.get(buffer_id)
        if not keys:
            return
        stale = [key for key in keys if start <= key[1] < end]
        for key in stale:
            del keys[key]
            self._walks.pop(key, None)

    def advance_swap(self, buffer_id: int, op: int) -> SwapAdvance | None:
        """How to make a swapped-out buffer valid again by ``op`` (its swap-in due there
        instead of at its next use): its gap and the new trigger, or ``None`` when no
        trigger lands the copy on time behind the queued ones, or its bytes would push an
        op over the budget while they wait on the device."""
        for gap in self.schedule.gaps.get(buffer_id, ()):
            if gap.resident_until <= op < gap.next_use and gap.mode == SWAP and not gap.wraps:
                break
        else:
            return None
        size = self.sizes[buffer_id]
        in_len = self.copy_times(buffer_id)[1]
        old = self.h2d_copies[(buffer_id, gap.prev_use)]
        due = float(self.start_us[op])
        aside = self.h2d.set_aside(old)
        try:
            trigger = self._fitting_trigger(op, gap.resident_until, in_len, due)
        finally:
            self.h2d.put_back(aside)
        if trigger is None:
            return None
        if trigger < gap.resident_from and (
                int(self.live[trigger:gap.resident_from].max()) + size > self.budget):
            return None
        return SwapAdvance(gap, trigger)

    def _apply_advance(self, advance: SwapAdvance, op: int) -> None:
        gap, trigger = advance.gap, advance.trigger
        size = self.sizes[gap.buffer_id]
        key = (gap.buffer_id, gap.prev_use)
        old = self.h2d_copies[key]
        self.h2d.remove(old)
        new = QueuedCopy(float(self.start_us[trigger]), old.length_us, float(self.start_us[op]))
        self.h2d_copies[key] = new
        self.h2d.add(new.issue_us, new.length_us, new.due_us)
        if trigger < gap.resident_from:
            self.live[trigger:gap.resident_from] += size
            self._live_changed(trigger, gap.resident_from)
        else:
            self.live[gap.resident_from:trigger] -= size
            self._live_changed(gap.resident_from, trigger)
        gaps = self.schedule.gaps[gap.buffer_id]
        gaps[gaps.index(gap)] = Gap(gap.buffer_id, gap.prev_use, op, SWAP, gap.resident_until,
                                    trigger)
        self._set_hole(gap.buffer_id, Hole(gap.resident_until, gap.next_use, SWAP),
                       Hole(gap.resident_until, op, SWAP))
        self._residency_changed(gap.buffer_id, op, gap.next_use)

    # -- applying decisions --------------------------------------------------------------
    def _free(self, size: int, a: int, b: int) -> None:
        self.hold(-size, a, b)

    def hold(self, size: int, a: int, b: int) -> None:
        """``size`` more bytes resident during ops ``[a, b)`` (fewer when negative), the
        over-budget ops kept up to date."""
        if b > a:
            self.live[a:b] += size
            self._live_changed(a, b)

    def apply_recompute(self, buffer_id: int, prev_use: int, next_use: int,
                        chain: RecomputeChain) -> None:
        """Drop the buffer after ``prev_use`` and recompute it before ``next_use`` by
        ``chain`` (:meth:`chain`)."""
        for advance in chain.advances:
            self._apply_advance(advance, next_use)
        self._drop(buffer_id, prev_use, next_use, next_use)
        self._remake(next_use, [buffer_id], chain.links, chain.cost_us)

    def apply_batch(self, op: int, gaps: list[IdleGap], links: list[int]) -> None:
        """Drop each gap and re-make all of them before ``op`` (at or before each
        ``next_use``), with the freed intermediates ``links`` re-made there for that op (a
        segment's batch, :mod:`.checkpoint`)."""
        for g in gaps:
            self._drop(g.buffer_id, g.prev_use, g.next_use, op)
        dropped = [g.buffer_id for g in gaps]
        made = dropped + list(links)
        self._remake(op, dropped, [ChainLink(x, 1) for x in links],
                     sum(float(self.durations[self.trace.buffer(y).recompute.op]) for y in made))

    def _drop(self, buffer_id: int, prev_use: int, next_use: int, remade_at: int) -> None:
        """The buffer leaves the device after ``prev_use`` and is recomputed before
        ``remade_at`` (<= ``next_use``)."""
        self.schedule.add(Gap(buffer_id, prev_use, next_use, RECOMPUTE, prev_use + 1,
                              remade_at))
        self._add_hole(buffer_id, Hole(prev_use + 1, remade_at, RECOMPUTE))
        self._residency_changed(buffer_id, prev_use + 1, remade_at)
        self._free(self.sizes[buffer_id], prev_use + 1, remade_at)

    def _remake(self, op: int, dropped: list[int], links: list[ChainLink], cost: float) -> None:
        """Recomputes before ``op``: of the ``dropped`` buffers, and of the chain ``links``
        (resident for that op only); every input they read is pinned at ``op``; ``cost`` µs
        is charged there."""
        for link in links:
            self.schedule.chains.append(ChainRecompute(link.buffer_id, op, link.depth))
            self.transient.setdefault(link.buffer_id, set()).add(op)
            self._residency_changed(link.buffer_id, op, op + 1)
            self.live[op] += self.sizes[link.buffer_id]
            self._live_changed(op, op + 1)
        for y in [*dropped, *(link.buffer_id for link in links)]:
            for x in self.trace.buffer(y).recompute.inputs:
                pins = self.pinned.setdefault(x, set())
                if op not in pins:
                    pins.add(op)
                    bisect.insort(self._pin_ops.setdefault(x, []), op)
        self.extra[op] += cost
        self.recompute_us += cost
        self._times()

    def swap_window(self, buffer_id: int, prev_use: int, next_use: int,
                    wraps: bool = False) -> SwapWindow | None:
        """The latest swap of this gap that lands on time (``late_us == 0``), else a late
        one with its estimated lateness: triggered as early as the copy out allows
        (``late_trigger="earliest"``: least lateness, smallest hole), at the latest op
        whose own copy lands on time (``"latest"``: largest hole, delaying the copies
        queued behind it), or (``"covering"``) at the trigger with the least lateness among
        those whose hole still covers every op of the gap now over the budget; ``None``
        when the gap leaves no room for a copy.

        With ``lazy_release`` the bytes stay on the device after the copy out has landed
        until the first op of the gap that is over the budget (they are resident there
        already, so no op gets fuller): the copy out is due then, which leaves the D2H
        queue slack for other copies out."""
        clean = self.clean_at(buffer_id, prev_use)
        out_us, in_len = self.copy_times(buffer_id)
        out_len = 0.0 if clean else out_us
        out_issue = float(self.end_us[prev_use])
        out_done = out_issue if clean else self.d2h.finish_if_added(out_issue, out_len)
        resident_until = min(self.op_at_or_after(out_done, prev_use + 1), self.n)
        if self.lazy_release and not wraps and resident_until < next_use:
            over = np.flatnonzero(self.live[resident_until:next_use] > self.budget)
            if len(over):
                resident_until += int(over[0])
        # the bytes are reused from ``resident_until`` on: the copy out, and every copy out
        # queued behind it, must have landed by then
        out_due = (float(self.start_us[resident_until]) if resident_until < self.n
                   else float("inf"))
        if not clean and not self.d2h.fits(out_issue, out_len, out_due):
            return None
        due = float(self.start_us[next_use])
        low = 0 if wraps else resident_until
        # triggers in [earliest, next_use]: the copy in starts after the copy out landed
        earliest = low if wraps else max(low, self.op_at_or_after(out_done, low))
        if earliest > next_use:
            return None
        # the latest trigger whose own copy lands by ``due`` (monotone: FIFO engine), found
        # by bisection; below it, scan a bounded number of triggers for one that also keeps
        # every later copy on time
        lo = self.h2d.first_late(self._starts, earliest, next_use + 1, in_len, due)
        trigger = self._fitting_trigger(lo - 1, earliest, in_len, due)
        if trigger is not None:
            issue = float(self.start_us[trigger])
            return SwapWindow(resident_until, trigger, out_issue, out_len, issue, in_len, due,
                              0.0)
        if earliest >= next_use:
            return None
        trigger = earliest if self.late_trigger == "earliest" else max(earliest, lo - 1)
        if self.late_trigger == "covering":
            trigger = self._covering_trigger(earliest, next_use, lo - 1, in_len, due, wraps)
        issue = float(self.start_us[trigger])
        return SwapWindow(resident_until, trigger, out_issue, out_len, issue, in_len, due,
                          self.h2d.lateness(issue, in_len, due))

    def _covering_trigger(self, earliest: int, next_use: int, top: int, in_len: float,
                          due: float, wraps: bool) -> int:
        """The late trigger with the least estimated lateness (ties: the latest) among
        ``[last over-budget op + 1, max(that, top)]``: the hole still covers every op of the
        gap now over the budget (from op 0 for a wrap gap). At most ``TRIGGER_SCAN + 1``
        triggers are compared, evenly spaced."""
        first = 0 if wraps else earliest
        over = np.flatnonzero(self.live[first:next_use] > self.budget)
        if not len(over):
            return max(earliest, top)
        low = max(earliest, first + int(over[-1]) + 1)
        top = max(low, top)
        step = max(1, (top - low) // TRIGGER_SCAN)
        best_late, best_trigger = float("inf"), top
        for trigger in range(top, low - 1, -step):
            late = self.h2d.lateness(float(self.start_us[trigger]), in_len, due)
            if late < best_late - 1e-9:
                best_late, best_trigger = late, trigger
        return best_trigger

    def _fitting_trigger(self, top: int, low: int, in_len: float, due: float) -> int | None:
        """The latest trigger in ``[max(low, top - TRIGGER_SCAN), top]`` whose copy in
        keeps itself and every later-issued copy on time (``None``: none does)."""
        return self.h2d.latest_fitting(self._starts, max(low, top - TRIGGER_SCAN), top, in_len,
                                       due)

    def apply_swap(self, buffer_id: int, prev_use: int, next_use: int,
                   window: SwapWindow) -> None:
        """Swap the buffer out after ``prev_use`` and back for ``next_use`` by ``window``
        (:meth:`swap_window`): both copies join their queues."""
        until, trigger = window.resident_until, window.trigger
        size = self.sizes[buffer_id]
        gap = Gap(buffer_id, prev_use, next_use, SWAP, until, trigger)
        self.schedule.add(gap)
        if gap.wraps:
            self._add_hole(buffer_id, Hole(until, next_use, WRAP))
            self._free(size, until, self.n)
            self._free(size, 0, trigger)
            self._residency_changed(buffer_id, until, self.n)
            self._residency_changed(buffer_id, 0, next_use)
        else:
            self._add_hole(buffer_id, Hole(until, next_use, SWAP))
            self._free(size, until, trigger)
            self._residency_changed(buffer_id, until, next_use)
        if window.out_us > 0:  # clean data is dropped: nothing joins the D2H queue
            self.d2h.add(window.out_issue_us, window.out_us, float(self.start_us[until])
                         if until < self.n else float("inf"))
        self.h2d.add(window.in_issue_us, window.in_us, window.due_us)
        self.h2d_copies[(buffer_id, prev_use)] = QueuedCopy(window.in_issue_us, window.in_us,
                                                            window.due_us)

    def apply_head_swap(self, buffer_id: int, last_use: int, first_use: int,
                        window: SwapWindow) -> None:
        """Take a persistent buffer's wrap gap in the iteration's head
        (:attr:`~.schedule.Gap.head`): it stays on the device across the boundary, is
        copied out after op 0 (``window.out_issue_us``) with its bytes held until op
        ``window.resident_until`` and copied back from op ``window.trigger`` for its first
        use; both copies join their queues."""
        until, trigger = window.resident_until, window.trigger
        size = self.sizes[buffer_id]
        self.schedule.add(Gap(buffer_id, last_use, first_use, SWAP, until, trigger))
        self._add_hole(buffer_id, Hole(until, first_use, SWAP))
        self._free(size, until, trigger)
        self._residency_changed(buffer_id, until, first_use)
        self.d2h.add(window.out_issue_us, window.out_us, float(self.start_us[until]))
        copy = QueuedCopy(window.in_issue_us, window.in_us, window.due_us)
        self.h2d.add(*copy)
        self.h2d_copies[(buffer_id, last_use)] = copy

    def apply_tail_prefetch(self, buffer_id: int, last_use: int, first_use: int,
                            trigger: int) -> None:
        """Drop a read-only buffer after its last use and copy it back from op ``trigger``
        (after the last use) for the next iteration: its wrap gap taken with the swap-in
        in the iteration's tail, due at the last op. It stays resident across the
        boundary (:mod:`.residency`), off the device only during ``[last_use + 1,
        trigger)``; nothing is copied out."""
        size = self.sizes[buffer_id]
        due = self.n - 1
        self.schedule.add(Gap(buffer_id, last_use, first_use, SWAP, last_use + 1, trigger))
        self._add_hole(buffer_id, Hole(last_use + 1, due, SWAP))
        self._free(size, last_use + 1, trigger)
        self._residency_changed(buffer_id, last_use + 1, trigger)
        copy = QueuedCopy(float(self.start_us[trigger]), self.cost.copy_us(size, "h2d"),
                          float(self.start_us[due]))
        self.h2d.add(*copy)
        self.h2d_copies[(buffer_id, last_use)] = copy

    def clean_at(self, buffer_id: int, prev_use: int) -> bool:
        """:func:`~.schedule.leaves_clean`: whether the buffer leaves the device after
        ``prev_use`` with a valid host copy, under the gaps taken so far."""
        return leaves_clean(self.by_id[buffer_id], self.schedule.gaps.get(buffer_id, ()),
                            prev_use)

    def hole_blocked(self, buffer_id: int, a: int, b: int) -> bool:
        """True when the data would be invalid during ``[a, b)`` while a planned recompute
        reads it there (``b <= a``: a wrap, invalid on ``[a, n)`` and ``[0, b)``)."""
        pins = self._pin_ops.get(buffer_id)
        if not pins:
            return False
        if b <= a:
            return pins[-1] >= a or pins[0] < b
        k = bisect.bisect_left(pins, a)
        return k < len(pins) and pins[k] < b

    def first_pin_after(self, buffer_id: int, op: int) -> int | None:
        """The first op after ``op`` where a planned recompute reads the buffer (``None``:
        none)."""
        pins = self._pin_ops.get(buffer_id)
        if not pins:
            return None
        k = bisect.bisect_right(pins, op)
        return pins[k] if k < len(pins) else None

    def copy_times(self, buffer_id: int) -> tuple[float, float]:
        """µs of the buffer's copy out and copy in on a free link (``cost.copy_us``, asked
        once per buffer)."""
        times = self._copy_times.get(buffer_id)
        if times is None:
            size = self.sizes[buffer_id]
            times = self._copy_times[buffer_id] = (self.cost.copy_us(size, "d2h"),
                                                   self.cost.copy_us(size, "h2d"))
        return times
