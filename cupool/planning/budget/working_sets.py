"""``auto``'s last resort: at each op only that op's working set, copies waited for.

A plan exists whenever every op's own working set (:func:`required_bytes`: what it uses,
and a temporary it produces without a recorded use) fits the budget: bring in what the op
needs, put it back after. This member builds such a plan by walking the ops once with
the device memory as a cache of byte ranges::

    op t:   close the temporaries t no longer needs (dead: nothing copied)
            for each buffer op t needs and the device lacks, largest first:
              a free range that holds it (best fit, lowest address)
              else the range whose residents are cheapest to evict (their copy back in,
                and out unless clean, over how soon they are needed; nothing op t needs
                may be evicted): each evicted one is copied out after its last use (a
                drop when clean) and back at its next use
              else, fragmentation: every resident leaves and op t's working set is packed
                from address 0 (what op t needs that was resident is copied out and in)
            enter it: produced by op t (a temporary's first op) or copied in, due at t

Whatever op ``t`` needs then fits (its bytes are at most the cache's size), so the walk
cannot fail, and every residency lies inside ``[0, cache bytes)``: offsets never need
more than the budget. A buffer stays on the device until its bytes are wanted (or it
dies), so what fits is never copied. Persistent state begins the iteration on the host
(copied in at its first use, out after its last), except, in the *kept* variant
(:data:`KEPT_MEMBER`), the persistent buffers that fit above the cache beside every op's
working set, chosen by copy time saved per byte: they stay on the device.

Then each copy in starts earlier where its bytes are already free (at most about twice
its own copy time ahead of its use; earlier copies would queue ahead of more urgent ones
on the FIFO engine): the copies that the walk made wait are overlapped with the ops
before them where the memory allows.

The repacks copy buffers out and back in only to move their bytes, and at a budget as
small as the largest working set they come at the tightest op. So on traces of at most
:data:`PLACED_MAX_BUFFERS` buffers the ops are also walked counting bytes alone, by each
of a few eviction rules, and those walks' residencies placed afterwards by the static
offset solvers (:mod:`.working_sets_placed`); the plan that simulates fastest is the
member's (``stats["byte_walk"]`` names the rules of a byte walk's). ``auto`` validates
and simulates the plan like any member's, refines it the same way, and keeps it only when
it is the fastest.
"""

from __future__ import annotations

import bisect
import itertools
import time

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Plan, Residency, SolveStatus, SwapIn, SwapOut, Trace
from cupool.planning.budget.engine.drops import mark_drops
from cupool.planning.budget.engine.residency import failed_plan, in_execution_order
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.result import BudgetResult
from cupool.planning.budget.working_set_needs import (  # the walk's inputs, also read here
    idle_persistent_shortfall,
    kept_persistent,
    needed_ops,
    required_bytes,
)

POLICY = "working-sets"
"""The plans' ``solver``."""

MEMBER = "working sets (copies waited for)"
"""The variant whose persistent state all begins the iteration on the host."""

KEPT_MEMBER = "working sets (persistent state kept where it fits)"
"""The variant that keeps the persistent buffers that fit beside every working set."""

PLACED_MAX_BUFFERS = 200
"""Traces of at most this many buffers are also walked counting bytes alone, their
residencies placed afterwards (:mod:`.working_sets_placed`): a static offset problem of
every residency, a few milliseconds on a trace of 70 buffers and 90 residencies, where
the exact search grows far faster on large ones."""

PREFETCH_LEAD = 2.0
"""A copy in may start up to this many times its own copy time before its use."""


class _Gaps:
    """The free ranges of ``[0, capacity)``: the smallest that holds a size (lowest
    address on ties), taken at a given offset, given back merged with its neighbours."""

    def __init__(self, capacity: int) -> None:
        self.by_size: list[tuple[int, int]] = []  # (size, start), ascending
        self.end_of: dict[int, int] = {}
        self.start_of: dict[int, int] = {}
        if capacity > 0:
            self._add(0, capacity)

    def _add(self, start: int, end: int) -> None:
        bisect.insort(self.by_size, (end - start, start))
        self.end_of[start], self.start_of[end] = end, start

    def _remove(self, start: int) -> int:
        end = self.end_of.pop(start)
        del self.start_of[end]
        del self.by_size[bisect.bisect_left(self.by_size, (end - start, start))]
        return end

    def best(self, size: int) -> int | None:
        i = bisect.bisect_left(self.by_size, (size, -1))
        return self.by_size[i][1] if i < len(self.by_size) else None

    def take(self, offset: int, size: int, start: int | None = None) -> None:
        """Mark ``[offset, offset + size)``, inside one free range, used: the one starting
        at ``start`` when given (the caller knows it), else the last starting by ``offset``."""
        if start is None:
            starts = sorted(self.end_of)
            start = starts[bisect.bisect_right(starts, offset) - 1]
        end = self._remove(start)
        if start < offset:
            self._add(start, offset)
        if offset + size < end:
            self._add(offset + size, end)

    def give(self, offset: int, size: int) -> None:
        """Mark ``[offset, offset + size)`` free again."""
        start, end = offset, offset + size
        if end in self.end_of:
            end = self._remove(end)
        left = self.start_of.get(start)
        if left is not None:
            self._remove(left)
            start = left
        self._add(start, end)


class _Walk:
    """The device as a cache of byte ranges ``[0, capacity)``, walked op by op (module
    docstring); what it decides accumulates in ``residencies`` and ``actions``.

    The residents are kept in address order as the first ``resident_count`` entries of
    three arrays (``low_column``, ``high_column``, ``slot_column``: offsets, ends, slots),
    shifted in place through memoryviews of them as residents come and go; per-buffer
    numbers are arrays indexed by a buffer's slot (its index in the trace), so that
    choosing a range to free is a few array operations on views."""

    def __init__(self, trace: Trace, capacity: int, needs: dict[int, tuple[int, ...]],
                 skipped: set[int], cost) -> None:
        self.trace, self.capacity, self.needs = trace, capacity, needs
        n = self.num_ops = trace.num_ops
        self.dead = 2 * n  # next_need of a temporary past its last need
        self.op_start = np.concatenate(([0.0], np.cumsum(cost.op_times(trace))))
        buffers = trace.buffers
        self.ids = [b.id for b in buffers]
        self.size = np.array([b.size for b in buffers], dtype=np.int64)
        self.sizes = self.size.tolist()
        # an empty buffer may sit at the offset of another resident: its ends break the
        # interleaved order _evict_for relies on, so such traces sort the candidate starts
        self.any_empty = bool(np.any(self.size == 0))
        distinct = set(self.sizes)  # a copy's time depends on its bytes alone
        copy_in = {size: cost.copy_us(size, "h2d") for size in distinct}
        copy_out = {size: cost.copy_us(size, "d2h") for size in distinct}
        self.copy_in_us = np.array([copy_in[size] for size in self.sizes], dtype=np.float64)
        self.copy_out_us = np.array([copy_out[size] for size in self.sizes], dtype=np.float64)
        self.persistent = np.array([b.kind == PERSISTENT for b in buffers], dtype=bool)
        self.is_persistent = self.persistent.tolist()
        self.start_op = [b.start for b in buffers]
        write_ops = [frozenset(() if b.read_only else b.write_ops) for b in buffers]
        self.need_ops = [needs[b.id] for b in buffers]
        # the op each buffer is needed at next (from the op being walked on); a persistent
        # buffer past its last need this iteration: its first need in the next one
        self.next_need = np.array([ops[0] for ops in self.need_ops], dtype=np.int64)
        # what evicting each costs: its copy back in, and out when its host copy is stale
        # (or absent: dirty), as it is from when it is written or produced until it leaves
        self.dirty_evict_us = self.copy_in_us + self.copy_out_us
        self.evict_us = self.copy_in_us.copy()
        self.pinned = np.zeros(len(buffers), dtype=bool)  # needed by the op being walked
        self.needed_at: list[list[int]] = [[] for _ in range(n)]  # slots
        self.last_at: list[list[int]] = [[] for _ in range(n)]  # temporaries' last needs
        # prefetch_from[t]: (due op, slot) whose copy in should start by op t
        self.prefetch_from: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        lead = PREFETCH_LEAD * self.copy_in_us
        walked = [k for k, b in enumerate(buffers) if b.id not in skipped]
        slots = [k for k in walked for _j in self.need_ops[k]]
        ops = [j for k in walked for j in self.need_ops[k]]
        # the last op that starts at least ``lead`` before each need, all at once
        latest = np.searchsorted(self.op_start, self.op_start[ops] - lead[slots],
                                 side="right") - 1
        made = np.array(self.start_op, dtype=np.int64)[slots] + 1
        latest = np.maximum(latest, np.where(self.persistent[slots], 0, made))  # once made
        after = np.where(self.persistent[slots], self.next_need[slots] + n, self.dead)
        same = np.flatnonzero(np.diff(slots) == 0)  # ops lists each slot's needs in order
        after[same] = np.asarray(ops, dtype=np.int64)[same + 1]
        written = np.zeros(len(slots), dtype=bool)
        for i, (k, j, t, next_op) in enumerate(zip(slots, ops, latest.tolist(), after.tolist(),
                                                   strict=True)):
            self.needed_at[j].append(k)
            if next_op == self.dead:
                self.last_at[j].append(k)
            if j in write_ops[k]:
                written[i] = True
            if t < j:
                self.prefetch_from[t].append((j, k))
        # the same per op as array views, for the walk's assignments: needed_at's slots;
        # the next need of each after it (this iteration or, persistent, the next; 2 *
        # num_ops for a temporary past its last); the slots it may write
        by_op = np.argsort(np.asarray(ops, dtype=np.int64), kind="stable")
        bounds = np.searchsorted(np.asarray(ops, dtype=np.int64)[by_op], np.arange(n + 1))
        needed_slots = np.asarray(slots, dtype=np.int64)[by_op]
        next_ops, written = after[by_op], written[by_op]
        written_slots = needed_slots[written]
        written_bounds = np.concatenate(([0], np.cumsum(written)))[bounds].tolist()
        bounds = bounds.tolist()
        self.needed_index = [needed_slots[a:b] for a, b in itertools.pairwise(bounds)]
        self.next_at = [next_ops[a:b] for a, b in itertools.pairwise(bounds)]
        self.written_at = [written_slots[a:b] for a, b in itertools.pairwise(written_bounds)]
        self.pending: list[tuple[int, int]] = []
        self.gaps = _Gaps(capacity)
        self.low_column, self.high_column, self.slot_column = (
            np.zeros(len(buffers) + 1, dtype=np.int64) for _ in range(3))
        # the same bytes as sequences: a slice assignment is a memmove, an item a C long
        self.columns = (memoryview(self.low_column), memoryview(self.high_column),
                        memoryview(self.slot_column))
        self.resident_count = 0
        self.lows: list[int] = []  # low_column[:resident_count] as a list, to bisect
        self.halves = np.arange(2 * len(buffers) + 2, dtype=np.int64) // 2
        self.offset: dict[int, int] = {}  # resident slot -> offset
        self.since: dict[int, int] = {}   # resident slot -> op its residency began
        self.entry: dict[int, int] = {}   # resident slot -> index of its SwapIn in actions
        self.residencies: list[Residency] = []
        self.actions: list = []           # None: a swap-in cancelled
        self.evictions = self.repacks = 0

    def run(self) -> None:
        n = self.num_ops
        for t in range(n):
            self._close_dead(t)
            needed = self.needed_index[t]
            self.pinned[needed] = True  # op t's: neither evicted for it nor for later ops
            self._serve(t)
            written = self.written_at[t]
            self.evict_us[written] = self.dirty_evict_us[written]
            self.next_need[needed] = self.next_at[t]
            self._prefetch(t)
            self.pinned[needed] = False
        for k in list(self.offset):
            self._leave(k, n, final=True)
        self.actions = [a for a in self.actions if a is not None]

    def _last_need_before(self, k: int, t: int) -> int:
        ops = self.need_ops[k]
        i = bisect.bisect_left(ops, t)
        return ops[i - 1] if i else -1

    def _close_dead(self, t: int) -> None:
        for k in self.last_at[t - 1] if t else ():
            if k in self.offset:
                self._leave(k, t)

    def _unlist(self, k: int) -> tuple[int, int]:
        """Take slot ``k`` off the residents; its residency's first op and offset."""
        offset = self.offset.pop(k)
        m = self.resident_count
        i = bisect.bisect_left(self.lows, offset)
        del self.lows[i]
        for column in self.columns:
            column[i:m - 1] = column[i + 1:m]
        self.resident_count = m - 1
        self.gaps.give(offset, self.sizes[k])
        self.evict_us[k] = self.copy_in_us[k]  # clean again
        return self.since.pop(k), offset

    def _leave(self, k: int, t: int, final: bool = False) -> None:
        """End slot ``k``'s residency at op ``t``; copy it out after its last use when it
        is needed later (this iteration, or, persistent, the next)."""
        begun, offset = self._unlist(k)
        entry = self.entry.pop(k, None)
        last = self._last_need_before(k, t)
        if last < begun:  # prefetched, and leaving before its use: as if never copied in
            self.actions[entry] = None
            return
        end = last + 1 if final else t
        buffer_id = self.ids[k]
        self.residencies.append(Residency(buffer_id, begun, end, offset))
        if self.is_persistent[k] or self.next_need[k] < self.dead:
            self.actions.append(SwapOut(buffer_id, last))

    def _enter(self, k: int, t: int, offset: int, due: int | None = None) -> None:
        self.offset[k], self.since[k] = offset, t
        m = self.resident_count
        lows, highs, slots = self.columns
        i = bisect.bisect_left(self.lows, offset)
        # the free range holding it begins where the resident before it ends (or at 0);
        # an empty resident may break that, so with one the range is looked up
        start = None if self.any_empty else highs[i - 1] if i else 0
        self.lows.insert(i, offset)
        for column in self.columns:
            column[i + 1:m + 1] = column[i:m]
        size = self.sizes[k]
        lows[i], highs[i], slots[i] = offset, offset + size, k
        self.resident_count = m + 1
        self.gaps.take(offset, size, start)
        if not self.is_persistent[k] and self.start_op[k] == t:  # produced here
            self.evict_us[k] = self.dirty_evict_us[k]
        else:
            self.entry[k] = len(self.actions)
            self.actions.append(SwapIn(self.ids[k], t, t if due is None else due))

    def _prefetch(self, t: int) -> None:
        """Copy in now what a later op ``j`` needs when waiting one more op would leave its
        copy less than its lead (:data:`PREFETCH_LEAD` copy times), or when that moment
        passed without room: into free bytes, or evicting only residents needed after ``j``
        (Belady's rule)."""
        waiting = []
        sizes = self.sizes
        for j, k in sorted([*self.pending, *self.prefetch_from[t]],
                           key=lambda item: (item[0], -sizes[item[1]], item[1])):
            if j <= t or k in self.offset or self.next_need[k] != j:
                continue  # come, resident, or needed sooner (its own entry serves that)
            offset = self._room(sizes[k], t, before=j)
            if offset is None:
                waiting.append((j, k))
            else:
                self._enter(k, t, offset, due=j)
        self.pending = waiting

    def _serve(self, t: int) -> None:
        needed = self.needed_at[t]
        sizes = self.sizes
        missing = sorted((k for k in needed if k not in self.offset),
                         key=lambda k: (-sizes[k], k))
        for k in missing:
            offset = self._room(sizes[k], t)
            if offset is None:
                self._repack(t, needed)
                return
            self._enter(k, t, offset)

    def _room(self, size: int, t: int, before: int | None = None) -> int | None:
        """The offset of ``size`` free bytes for op ``t`` (or, with ``before``, a copy in
        due at op ``before``): the smallest free range, lowest on ties, else one freed by
        :meth:`_evict_for`; ``None`` when none can be."""
        offset = self.gaps.best(size)
        return self._evict_for(size, t, before) if offset is None else offset

    def _evict_for(self, size: int, t: int, before: int | None = None) -> int | None:
        """Evict the cheapest residents from a range of ``size`` bytes holding nothing the
        op being walked needs (nor, with ``before``, anything needed at or before op
        ``before``); its offset, or ``None`` when every such range holds one."""
        limit = self.capacity - size  # the highest start
        if limit < 0:
            return None
        m = self.resident_count
        lows, highs, slots = self.low_column[:m], self.high_column[:m], self.slot_column[:m]
        blocked = self.pinned[slots]
        if before is not None:
            blocked = blocked | (self.next_need[slots] <= before)
        weight = self.evict_us[slots] / np.maximum(1, self.next_need[slots] - t)
        # candidate starts a, ascending: 0, each resident's ends, the highest start; with
        # the residents ending at or before each (those the range starting there spares)
        if self.any_empty:
            starts = np.sort(np.concatenate(([0, limit], lows, highs)))
            starts = starts[starts <= limit]
            first = np.searchsorted(highs, starts, side="right")
        else:  # disjoint and not empty: 0 <= low < high <= next low, ..., and a low or a
            # high at 2i + 1 or 2i + 2 in that order has i or i + 1 residents ending by it
            below = int(highs.searchsorted(limit, side="right"))
            cut = 1 + bisect.bisect_right(self.lows, limit) + below
            starts = np.empty(2 * m + 2, dtype=np.int64)
            starts[0] = 0
            starts[1:-1:2], starts[2::2] = lows, highs
            starts[cut] = limit
            starts = starts[:cut + 1]
            first = self.halves[:cut + 1].copy()
            first[cut] = below
        past = lows.searchsorted(starts + size)  # ... and those starting before a + size
        blocked_sum = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(blocked, out=blocked_sum[1:])
        weight_sum = np.zeros(m + 1, dtype=np.float64)
        np.cumsum(weight, out=weight_sum[1:])
        ok = blocked_sum[past] == blocked_sum[first]
        if not ok.any():
            return None
        costs = np.where(ok, weight_sum[past] - weight_sum[first], np.inf)
        best = int(costs.argmin())  # lowest address on ties
        for k in slots[int(first[best]):int(past[best])].tolist():
            self._leave(k, t)
            self.evictions += 1
        return int(starts[best])

    def _repack(self, t: int, needed: list[int]) -> None:
        """Every resident leaves (those entered at ``t`` without a trace); op ``t``'s
        working set is packed from address 0, largest first."""
        self.repacks += 1
        for k in list(self.offset):
            if self.since[k] == t:  # entered at t: nothing of it to keep
                self._unlist(k)
                entry = self.entry.pop(k, None)
                if entry is not None:
                    self.actions[entry] = None
            else:
                self._leave(k, t)
        cursor = 0
        sizes = self.sizes
        for k in sorted(needed, key=lambda k: (-sizes[k], k)):
            self._enter(k, t, cursor)
            cursor += sizes[k]


def prefetch_earlier(trace: Trace, cost, residencies: list[Residency], actions: list
                     ) -> tuple[list[Residency], list]:
    """Each swap-in starts earlier where it can: its residency begins at the latest of the
    op its bytes are free from, its buffer's previous residency's end, and the op
    :data:`PREFETCH_LEAD` copy times before its due op.

    The last two bounds are known for every swap-in at once; only those they leave room
    for look, in trigger order, at what the swap-ins moved before them left in their bytes.
    A residency is found by its buffer and first op (unique: a buffer's residencies are
    disjoint and not empty)."""
    swap_ins = sorted((a for a in actions if isinstance(a, SwapIn)), key=lambda a: a.trigger_op)
    if not swap_ins or not residencies:
        return residencies, actions
    op_end = np.concatenate(([0.0], np.cumsum(cost.op_times(trace))))  # op k starts at [k]
    size = {b.id: b.size for b in trace.buffers}
    span = trace.num_ops + 1  # a residency's key: buffer id * span + first op
    buffer_ids = np.array([r.buffer_id for r in residencies], dtype=np.int64)
    lows = np.array([r.offset for r in residencies], dtype=np.int64)
    highs = lows + np.array([size[r.buffer_id] for r in residencies], dtype=np.int64)
    starts = np.array([r.start for r in residencies], dtype=np.int64)
    ends = np.array([r.end for r in residencies], dtype=np.int64)
    order = np.argsort(buffer_ids * span + starts, kind="stable")
    keys = (buffer_ids * span + starts)[order]
    # each residency's buffer's previous residency's end (0 for its first)
    previous_end = np.zeros(len(residencies), dtype=np.int64)
    same = buffer_ids[order[1:]] == buffer_ids[order[:-1]]
    previous_end[order[1:][same]] = ends[order[:-1][same]]
    entering = np.array([a.buffer_id for a in swap_ins], dtype=np.int64)
    trigger = np.array([a.trigger_op for a in swap_ins], dtype=np.int64)
    due = np.array([a.due_op for a in swap_ins], dtype=np.int64)
    index = order[np.searchsorted(keys, entering * span + trigger)]
    copy_in = {s: cost.copy_us(s, "h2d") for s in {size[b] for b in entering.tolist()}}
    lead = PREFETCH_LEAD * np.array([copy_in[size[b]] for b in entering.tolist()],
                                    dtype=np.float64)
    earliest = np.searchsorted(op_end, op_end[due] - lead, side="right") - 1
    floors = np.maximum(np.maximum(earliest, previous_end[index]), 0)
    moved = {}
    for i in np.flatnonzero(floors < trigger).tolist():
        k, t, floor = int(index[i]), int(trigger[i]), int(floors[i])
        clash = (lows < highs[k]) & (highs > lows[k]) & (starts < t)
        clash[k] = False
        floor = max(floor, int(ends[clash].max()) if np.any(clash) else 0)
        if floor < t:
            starts[k] = floor
            moved[k] = floor
    if not moved:
        return residencies, actions
    out_residencies = list(residencies)
    new_trigger = {}
    for k, start in moved.items():
        r = residencies[k]
        out_residencies[k] = Residency(r.buffer_id, start, r.end, r.offset)
        new_trigger[(r.buffer_id, r.start)] = start
    out_actions = []
    for a in actions:
        if isinstance(a, SwapIn):
            start = new_trigger.get((a.buffer_id, a.trigger_op))
            if start is not None:
                a = SwapIn(a.buffer_id, start, a.due_op, a.level)
        out_actions.append(a)
    return out_residencies, out_actions


def plan_working_sets(trace: Trace, budget_bytes: int, cost, params: BudgetParams,
                      started: float, keep_persistent: bool = False) -> BudgetResult:
    """The last resort (module docstring): ``feasible`` whenever every op's working set
    fits the budget (else ``infeasible``, naming the op), persistent state kept where it
    fits when ``keep_persistent``."""
    del params  # nothing to tune: the walk is deterministic
    needs = needed_ops(trace)
    required = required_bytes(trace, needs)
    if trace.num_ops and int(required.max()) > budget_bytes:
        op = int(np.argmax(required))
        reason = (f"infeasible: op {op} needs {int(required[op])} bytes resident "
                  f"(budget {budget_bytes} bytes)")
        plan = failed_plan(trace, budget_bytes, POLICY, started, SolveStatus.INFEASIBLE,
                           {"reason": reason})
        return BudgetResult(plan, trace, POLICY, reason)
    kept = kept_persistent(trace, budget_bytes, cost, needs) if keep_persistent else []
    kept_bytes = sum(trace.buffer(b).size for b in kept)
    walk = _Walk(trace, budget_bytes - kept_bytes, needs, set(kept), cost)
    walk.run()
    stats = {"evictions": walk.evictions, "repacks": walk.repacks,
             "kept_persistent": len(kept), "kept_persistent_bytes": kept_bytes}
    plan = _plan(trace, budget_bytes, cost, kept, walk.residencies, walk.actions, started,
                 stats)
    if len(trace.buffers) <= PLACED_MAX_BUFFERS:
        plan = _fastest_byte_walk(trace, budget_bytes, cost, kept, needs, plan, started, stats)
    return BudgetResult(plan, trace, POLICY)


def _fastest_byte_walk(trace: Trace, budget_bytes: int, cost, kept: list[int],
                       needs: dict[int, tuple[int, ...]], plan: Plan, started: float,
                       stats: dict) -> Plan:
    """The fastest of ``plan`` (the range walk's) and the byte walks' plans by each of
    :data:`~.working_sets_placed.RULES`, their residencies placed afterwards
    (:mod:`.working_sets_placed`: no repacks), on the simulator's clock."""
    from cupool.planning.budget.working_sets_placed import RULES, placed_walk
    from cupool.sim.simulator import time_iteration

    fastest = time_iteration(trace, plan, cost).iteration_us
    capacity = budget_bytes - stats["kept_persistent_bytes"]
    for rules in RULES:
        placed = placed_walk(trace, capacity, needs, set(kept), cost, rules)
        if placed is None:
            continue
        other = _plan(trace, budget_bytes, cost, kept, placed.residencies, placed.actions,
                      started, {**stats, "evictions": placed.evictions, "repacks": 0,
                                "byte_walk": rules.label()})
        iteration_us = time_iteration(trace, other, cost).iteration_us
        if iteration_us < fastest:
            plan, fastest = other, iteration_us
    return plan


def _plan(trace: Trace, budget_bytes: int, cost, kept: list[int],
          walked: list[Residency], walked_actions: list, started: float,
          stats: dict) -> Plan:
    """The plan of a walk's residencies and actions within the cache's bytes, the ``kept``
    persistent buffers above them, copies in started earlier where their bytes are free."""
    top = budget_bytes - sum(trace.buffer(b).size for b in kept)
    residencies = list(walked)
    for buffer_id in kept:
        residencies.append(Residency(buffer_id, 0, trace.num_ops, top))
        top += trace.buffer(buffer_id).size
    residencies, actions = prefetch_earlier(trace, cost, residencies, walked_actions)
    residencies.sort(key=lambda r: (r.buffer_id, r.start))
    actions = mark_drops(trace, residencies, in_execution_order(actions))
    size = {b.id: b.size for b in trace.buffers}
    arena = max((r.offset + size[r.buffer_id] for r in residencies), default=0)
    return Plan(trace.name, trace.digest(), POLICY, SolveStatus.FEASIBLE, int(arena),
                trace.lower_bound_bytes(), (), time.perf_counter() - started, budget_bytes,
                stats, tuple(residencies), tuple(actions))


__all__ = ["KEPT_MEMBER", "MEMBER", "PLACED_MAX_BUFFERS", "POLICY", "PREFETCH_LEAD",
           "idle_persistent_shortfall", "kept_persistent", "needed_ops", "plan_working_sets",
           "prefetch_earlier", "required_bytes"]
