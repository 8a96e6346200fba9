"""``tiers``: multi-level placement by local search (DESIGN.md idea 2, issue 7 item 3).

Levels: the device (the budget), pinned host memory and pageable host memory, each with
its bandwidth and latency in the cost model (:mod:`cupool.sim.cost`: pageable copies are
slower and cost more per copy). Pinned memory may be limited (``pinned_host_bytes``);
pageable memory is not.

The search starts from the best two-level plan (device + pinned host) that
:func:`~cupool.planning.budget.plan_with_budget` makes (``seed_policies``, ``auto`` by
default) and only ever keeps a plan that simulates faster, so it is never worse than that
plan *by construction*. It walks the ops; at op ``t`` it tries, for the buffers whose
decision sits at ``t``, in a seeded random order:

- **move to another level**: keep a swapped buffer on the device through its gap
  (*device*: the swap disappears), keep a recomputed one (the recompute disappears), turn
  a recompute into a swap to pinned host memory (when the link has room) or a swap into a
  recompute (no host level at all), take the swap-in earlier (the bytes come back to the
  device sooner when it waited), or move a swap between pinned and pageable memory;
- **move within the level**: place a residency (a buffer's stay on the device) at another
  free offset: best-fit smallest hole, at the hole's edge next to the neighbour that dies
  later (DESIGN.md's allocation rules);
- **overwrite**: place a residency that begins at op ``t`` at the offset of one that ends
  at ``t`` (an op's output reuses its dying input's space).

A move that changes when a buffer is resident *re-places the later steps*: when its range
is not free over the new span, it and the residencies in its way that begin at or after
the step are placed again by the allocation rules (in start order); the move is dropped
when they do not fit the budget. Each candidate plan is simulated
(:func:`cupool.sim.simulate`); the cost of a state is ``(iteration_us, read_write_us)``
where ``read_write_us`` is the total time of its copies at their levels' bandwidths.
Between checkpoints (every ``checkpoint_ops`` ops) a move is accepted when it lowers the
cost, or when it lowers the read/write time while the iteration stays within
``tolerance`` (a sideways step that frees the link); at every checkpoint the walk resumes
from the least-cost state seen. Accepted states are checked by the independent swap
validator; the search stops after ``time_limit_s`` or a pass without improvement.

With a pinned-memory limit the seed plan is first made to respect it: swaps whose host
copies would exceed the pinned bytes go to pageable memory, those with the most slack
(longest idle gap per byte) first; that repaired plan is the start of the search (the
comparison with the unlimited two-level plan is then not like for like, and the stats
say so).
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from cupool.core.vocabulary import (
    PAGEABLE,
    PINNED,
    Plan,
    RecomputeAction,
    Residency,
    SolveStatus,
    SwapIn,
    SwapOut,
    Trace,
)
from cupool.errors import SolverError
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.result import BudgetResult


@dataclass(frozen=True)
class TierParams:
    """Knobs of the ``tiers`` search.

    seed: seed of the move order; same seed, same inputs → same plan.
    time_limit_s: wall-clock seconds for the search (after the seed plan is made).
    checkpoint_ops: ops between checkpoints, where the walk resumes from the best state.
    tolerance: sideways moves may lengthen the iteration by this fraction at most.
    pinned_host_bytes: pinned host memory available for swaps (``None``: unlimited).
    seed_policies: two-level policies whose best simulated plan seeds the search.
    max_passes: walks over the ops at most (each pass stops early when time is up).
    pageable: whether moves may put swaps on the pageable level (``False``: a two-level
      search, as ``auto``'s final refinement runs it).
    max_evaluations: simulations the search may run (``None``: no limit but the time).
      The search is deterministic for a seed when it ends before ``time_limit_s``: give
      a generous time and a ``max_evaluations`` for runs that must repeat exactly.
    """

    seed: int = 0
    time_limit_s: float = 2.0
    checkpoint_ops: int = 32
    tolerance: float = 0.002
    pinned_host_bytes: int | None = None
    seed_policies: tuple[str, ...] = ("auto",)
    max_passes: int = 3
    max_evaluations: int | None = None
    pageable: bool = True

    def __post_init__(self) -> None:
        if not self.time_limit_s > 0:
            raise SolverError(f"time_limit_s (={self.time_limit_s}) must be > 0 seconds")
        if not isinstance(self.checkpoint_ops, int) or self.checkpoint_ops < 1:
            raise SolverError(f"checkpoint_ops (={self.checkpoint_ops!r}) must be an "
                              f"integer >= 1")
        if not 0 <= self.tolerance < 1:
            raise SolverError(f"tolerance (={self.tolerance}) must be in [0, 1)")
        if self.pinned_host_bytes is not None and (
                not isinstance(self.pinned_host_bytes, int) or self.pinned_host_bytes < 0):
            raise SolverError(f"pinned_host_bytes (={self.pinned_host_bytes!r}) must be an "
                              f"integer >= 0 or None")
        if not self.seed_policies or "tiers" in self.seed_policies:
            raise SolverError(f"seed_policies (={self.seed_policies!r}) must name two-level "
                              f"policies (not 'tiers')")
        if self.max_passes < 1:
            raise SolverError(f"max_passes (={self.max_passes}) must be >= 1")
        if self.max_evaluations is not None and self.max_evaluations < 1:
            raise SolverError(f"max_evaluations (={self.max_evaluations}) must be >= 1")


# -- the state: residencies per buffer and the action list ------------------------------


class _State:
    """A mutable plan: ``spans[b]`` = sorted ``[start, end, offset]`` lists, ``actions``
    in plan order."""

    def __init__(self, trace: Trace, plan: Plan):
        self.trace = trace
        self.n = trace.num_ops
        self.budget = plan.capacity_bytes
        self.sizes = {b.id: b.size for b in trace.buffers}
        self.spans: dict[int, list[list[int]]] = defaultdict(list)
        for r in plan.residencies:
            self.spans[r.buffer_id].append([r.start, r.end, r.offset])
        for spans in self.spans.values():
            spans.sort()
        self.actions = list(plan.actions)
        self.template = plan

    def copy(self) -> _State:
        other = object.__new__(_State)
        other.trace, other.n, other.budget, other.sizes = (self.trace, self.n, self.budget,
                                                           self.sizes)
        other.spans = defaultdict(list, {b: [list(s) for s in v] for b, v in self.spans.items()})
        other.actions = list(self.actions)
        other.template = self.template
        return other

    def plan(self, solver: str = "tiers") -> Plan:
        residencies = tuple(Residency(b, s, e, o) for b in sorted(self.spans)
                            for s, e, o in self.spans[b])
        arena = max((o + self.sizes[b] for b in self.spans for _s, _e, o in self.spans[b]),
                    default=0)
        return replace(self.template, solver=solver, residencies=residencies,
                       actions=tuple(self.actions), arena_bytes=int(arena))

    def live(self) -> np.ndarray:
        delta = np.zeros(self.n + 1, dtype=np.int64)
        for b, spans in self.spans.items():
            for s, e, _o in spans:
                delta[s] += self.sizes[b]
                delta[e] -= self.sizes[b]
        return np.cumsum(delta[:-1])

    # -- placement (DESIGN.md idea 2's allocation rules) -------------------------------
    def occupied(self, start: int, end: int, skip) -> list[tuple[int, int, int]]:
        """``(low, high, end_op)`` of every placed residency overlapping ``[start, end)`` in
        time, except those whose ``id()`` is in ``skip``."""
        out = []
        for b, spans in self.spans.items():
            size = self.sizes[b]
            for span in spans:
                if span[0] < end and start < span[1] and id(span) not in skip:
                    out.append((span[2], span[2] + size, span[1]))
        out.sort()
        return out

    def fits_at(self, offset: int, size: int, start: int, end: int, skip) -> bool:
        if offset < 0 or offset + size > self.budget:
            return False
        return all(not (low < offset + size and offset < high)
                   for low, high, _e in self.occupied(start, end, skip))

    def best_fit(self, size: int, start: int, end: int, skip) -> int | None:
        """Best-fit smallest hole in ``[0, budget)`` free during ``[start, end)``; inside
        it, the edge next to the neighbour that dies later (``None`` if no hole fits)."""
        best = None
        cursor, below_end = 0, -1
        ranges = [*self.occupied(start, end, skip), (self.budget, self.budget, -1)]
        for low, high, end_op in ranges:
            if low - cursor >= size:
                hole = low - cursor
                above_end = end_op
                offset = cursor if below_end >= above_end else low - size
                if best is None or hole < best[0]:
                    best = (hole, offset)
            if high > cursor:
                cursor, below_end = high, end_op
        return None if best is None else best[1]


def _pair(state: _State, out: SwapOut) -> SwapIn | None:
    """The swap-in that reads what ``out`` wrote: the buffer's first swap-in triggered
    after it, else (across the iteration boundary) its earliest swap-in."""
    ins = sorted((a for a in state.actions if isinstance(a, SwapIn)
                  and a.buffer_id == out.buffer_id), key=lambda a: a.trigger_op)
    later = [a for a in ins if a.trigger_op > out.after_op]
    return later[0] if later else (ins[0] if ins else None)


def _sim_key(report) -> tuple[float, float]:
    read_write = sum(c[5] - c[4] for c in report.copies)
    return report.iteration_us, read_write


def _host_intervals(state: _State, level: str) -> list[tuple[int, int, int]]:
    """``(from_op, to_op, bytes)``: host copies at ``level`` (from the swap-out's op to the
    swap-in's due op; a wrap pair holds across the iteration boundary)."""
    outs: dict[int, list] = defaultdict(list)
    ins: dict[int, list] = defaultdict(list)
    for a in state.actions:
        if isinstance(a, SwapOut) and a.level == level:
            outs[a.buffer_id].append(a.after_op)
        elif isinstance(a, SwapIn) and a.level == level:
            ins[a.buffer_id].append(a.due_op)
    out = []
    for b, after_ops in outs.items():
        dues = sorted(ins.get(b, ()))
        for after in sorted(after_ops):
            later = [d for d in dues if d > after]
            if later:
                out.append((after, later[0] + 1, state.sizes[b]))
            else:  # wraps: held to the end and from op 0 to the first swap-in
                out.append((after, state.n, state.sizes[b]))
                if dues:
                    out.append((0, dues[0] + 1, state.sizes[b]))
    return out


def pinned_peak_bytes(trace: Trace, plan: Plan) -> int:
    """Most bytes held in pinned host memory at one op by ``plan``'s swaps."""
    state = _State(trace, plan)
    delta = np.zeros(trace.num_ops + 2, dtype=np.int64)
    for a, b, size in _host_intervals(state, PINNED):
        delta[a] += size
        delta[min(b, trace.num_ops + 1)] -= size
    return int(np.cumsum(delta).max()) if trace.num_ops else 0


# -- moves ------------------------------------------------------------------------------


class _Search:
    def __init__(self, trace, cost, params: TierParams):
        from cupool.planning.validator import validate_plan
        from cupool.sim.simulator import simulate

        self.trace, self.cost, self.params = trace, cost, params
        self._simulate, self._validate = simulate, validate_plan
        self.rng = random.Random(params.seed)
        self.tried = defaultdict(int)
        self.accepted = defaultdict(int)
        self.evaluations = 0
        self.rejected_invalid = 0

    def evaluate(self, state: _State):
        self.evaluations += 1
        report = self._simulate(self.trace, state.plan(), self.cost, validate=False)
        return _sim_key(report), report

    # each move returns a changed copy of the state, or None when it does not apply/fit
    def replace_span(self, state, b, index, new_start, new_end, remove=(), add=()):
        """``state`` with residency ``index`` of ``b`` spanning ``[new_start, new_end)``
        (the following one merged into it when ``new_end`` reaches past it), actions in
        ``remove`` dropped and ``add`` appended; the residency keeps its offset when free,
        else it and the residencies in its way that begin at or after ``new_start`` are
        re-placed. ``None`` when the budget or the arena does not hold."""
        new = state.copy()
        spans = new.spans[b]
        span = spans[index]
        merged = [s for s in spans if s is not span and s[0] < new_end and new_start < s[1]]
        for s in merged:
            spans.remove(s)
        span[0], span[1] = new_start, new_end
        size = new.sizes[b]
        live = new.live()
        if live[new_start:new_end].max(initial=0) > new.budget:
            return None
        new.actions = [a for a in new.actions if a not in remove] + list(add)
        if new.fits_at(span[2], size, new_start, new_end, {id(span)}):
            return new
        # re-place: the moved residency and those in its way that begin at or after it
        blockers = []
        for other_b, others in new.spans.items():
            other_size = new.sizes[other_b]
            for o in others:
                if (o is not span and o[0] >= new_start and o[0] < new_end
                        and new_start < o[1] and o[2] < span[2] + size
                        and span[2] < o[2] + other_size):
                    blockers.append((o, other_size))
        moving = [(span, size), *blockers]
        skip = {id(s) for s, _z in moving}
        moving.sort(key=lambda item: (item[0][0], -item[1]))
        for s, z in moving:
            offset = new.best_fit(z, s[0], s[1], skip)
            if offset is None:
                return None
            s[2] = offset
            skip.discard(id(s))
        return new

    def _index_at(self, state, b, start=None, containing=None):
        for k, s in enumerate(state.spans.get(b, ())):
            if start is not None and s[0] == start:
                return k
            if containing is not None and s[0] <= containing < s[1]:
                return k
        return None

    def cancel_swap(self, state, out: SwapOut):
        b = out.buffer_id
        swap_in = _pair(state, out)
        k = self._index_at(state, b, containing=out.after_op)
        if swap_in is None or k is None:
            return None
        nxt = self._index_at(state, b, start=swap_in.trigger_op)
        if nxt is None:
            return None
        if swap_in.trigger_op < out.after_op:  # across the iteration boundary
            if nxt != 0:
                return None
            new = self.replace_span(state, b, 0, 0, state.spans[b][0][1], (swap_in,))
            if new is None:
                return None
            last = len(new.spans[b]) - 1
            return self.replace_span(new, b, last, new.spans[b][last][0], new.n, (out,))
        if nxt != k + 1:
            return None
        end = state.spans[b][nxt][1]
        return self.replace_span(state, b, k, state.spans[b][k][0], end, (out, swap_in))

    def cancel_recompute(self, state, action: RecomputeAction):
        b = action.buffer_id
        nxt = self._index_at(state, b, start=action.before_op)
        if not nxt:
            return None
        k = nxt - 1
        prev = state.spans[b][k]
        if any(isinstance(a, SwapOut) and a.buffer_id == b and prev[0] <= a.after_op < prev[1]
               for a in state.actions):
            return None
        return self.replace_span(state, b, k, prev[0], state.spans[b][nxt][1], (action,))

    def recompute_to_swap(self, state, action: RecomputeAction, report):
        b = action.buffer_id
        nxt = self._index_at(state, b, start=action.before_op)
        if not nxt:
            return None
        prev = state.spans[b][nxt - 1]
        if any(isinstance(a, (SwapOut, SwapIn)) and a.buffer_id == b for a in state.actions):
            return None  # one kind of move per buffer keeps the pairing simple
        uses = [u for u in self.trace.buffer(b).uses if prev[0] <= u < prev[1]]
        after = max(uses) if uses else prev[1] - 1
        if after >= prev[1]:
            return None
        due = action.before_op
        size = state.sizes[b]
        # trigger: the latest op that leaves the copy time to land before ``due`` starts
        starts = [t[1] for t in report.op_times]
        need = self.cost.copy_us(size, "h2d")
        trigger = due
        while trigger - 1 >= prev[1] and starts[due] - starts[trigger] < need:
            trigger -= 1
        out, swap_in = SwapOut(b, after), SwapIn(b, trigger, due)
        new = self.replace_span(state, b, nxt, trigger, state.spans[b][nxt][1], (action,))
        if new is None:
            return None
        new.actions.append(out)
        new.actions.append(swap_in)
        return new

    def swap_to_recompute(self, state, out: SwapOut):
        """Drop the host copy: re-run the producer before the use the swap-in served (the
        residency before the gap ends after its last use; the one after starts at the
        swap-in's due op)."""
        b = out.buffer_id
        swap_in = _pair(state, out)
        if (swap_in is None or swap_in.trigger_op < out.after_op
                or self.trace.buffer(b).recompute is None):
            return None
        k = self._index_at(state, b, containing=out.after_op)
        nxt = self._index_at(state, b, start=swap_in.trigger_op)
        if k is None or nxt != k + 1:
            return None
        new = state.copy()
        spans = new.spans[b]
        uses = [u for u in self.trace.buffer(b).uses if spans[k][0] <= u < spans[k][1]]
        if uses:
            spans[k][1] = max(uses) + 1
        spans[nxt][0] = swap_in.due_op
        new.actions = [a for a in new.actions if a not in (out, swap_in)]
        new.actions.append(RecomputeAction(b, swap_in.due_op))
        return new

    def earlier_trigger(self, state, swap_in: SwapIn, waited_ops: int):
        b = swap_in.buffer_id
        k = self._index_at(state, b, start=swap_in.trigger_op)
        if k is None:
            return None
        low = state.spans[b][k - 1][1] if k > 0 else 0
        trigger = max(low, swap_in.trigger_op - max(1, waited_ops))
        if trigger >= swap_in.trigger_op:
            return None
        moved = SwapIn(b, trigger, swap_in.due_op, swap_in.level)
        new = self.replace_span(state, b, k, trigger, state.spans[b][k][1], (swap_in,))
        if new is None:
            return None
        new.actions.append(moved)
        return new

    def flip_level(self, state, out: SwapOut):
        swap_in = _pair(state, out)
        if swap_in is None or swap_in.level != out.level:
            return None
        level = PAGEABLE if out.level == PINNED else PINNED
        new = state.copy()
        new.actions = [replace(a, level=level) if a in (out, swap_in) else a
                       for a in new.actions]
        return new

    def reoffset(self, state, b, k, overwrite: bool):
        new = state.copy()
        span = new.spans[b][k]
        size = new.sizes[b]
        if overwrite:
            targets = sorted({s[2] for other, spans in new.spans.items() if other != b
                              for s in spans if s[1] == span[0] and new.sizes[other] >= size})
            offset = next((o for o in targets if o != span[2]
                           and new.fits_at(o, size, span[0], span[1], {id(span)})), None)
        else:
            offset = new.best_fit(size, span[0], span[1], {id(span)})
        if offset is None or offset == span[2]:
            return None
        span[2] = offset
        return new


def _waits(report) -> np.ndarray:
    """µs each op waited (for copies or bytes) after its dispatch, recomputes excluded."""
    n = len(report.op_times)
    waited = np.zeros(n)
    recompute = np.zeros(n)
    for _b, i, start, end in report.recomputes:
        recompute[i] += end - start
    for i, (dispatch, start, _end) in enumerate(report.op_times):
        waited[i] = max(0.0, start - dispatch - recompute[i])
    return waited


def _ops_covering(report, op: int, wait_us: float) -> int:
    """How many ops before ``op`` it takes (at simulated op times) to cover ``wait_us``."""
    k, covered = op, 0.0
    while k > 0 and covered < wait_us:
        k -= 1
        covered += report.op_times[k][2] - report.op_times[k][0]
    return op - k


def _candidates(state: _State, op: int, report, waited, link_moves: bool,
                level_moves: bool = True):
    """Moves anchored at ``op``; ``link_moves`` adds those that only relieve the link
    (cancel a swap, change its level): useless while nothing waits for a copy, so the
    first pass skips them then."""
    out = []
    for a in state.actions:
        if isinstance(a, SwapOut) and a.after_op == op and link_moves:
            out.append(("cancel_swap", a))
            if level_moves:
                out.append(("level", a))
            out.append(("swap_to_recompute", a))
        elif isinstance(a, RecomputeAction) and a.before_op == op:
            out.append(("cancel_recompute", a))
            out.append(("recompute_to_swap", a))
        elif isinstance(a, SwapIn) and a.due_op == op and waited[op] > 0:
            out.append(("earlier_trigger", a))
    if waited[op] > 0:
        for b, spans in state.spans.items():
            for k, s in enumerate(spans):
                if s[0] == op:
                    out.append(("reoffset", (b, k)))
                    out.append(("overwrite", (b, k)))
    return out


def _apply(search: _Search, state, move, report, waited):
    """The state after ``move``, or ``None`` when it does not apply. Moves are listed for
    the state at the start of an op's turn and tried in turn, each against the state
    the accepted ones left: a move whose action is gone, or whose residency index no
    longer exists, does not apply."""
    kind, subject = move
    if kind in ("reoffset", "overwrite"):
        b, k = subject
        if k >= len(state.spans.get(b, ())):
            return None
    elif subject not in state.actions:
        return None
    if kind == "cancel_swap":
        return search.cancel_swap(state, subject)
    if kind == "level":
        return search.flip_level(state, subject)
    if kind == "swap_to_recompute":
        return search.swap_to_recompute(state, subject)
    if kind == "cancel_recompute":
        return search.cancel_recompute(state, subject)
    if kind == "recompute_to_swap":
        return search.recompute_to_swap(state, subject, report)
    if kind == "earlier_trigger":
        return search.earlier_trigger(state, subject,
                                      _ops_covering(report, subject.due_op, waited[subject.due_op]))
    b, k = subject
    return search.reoffset(state, b, k, overwrite=kind == "overwrite")


def _pinned_ok(state: _State, limit: int | None) -> bool:
    if limit is None:
        return True
    delta = np.zeros(state.n + 2, dtype=np.int64)
    for a, b, size in _host_intervals(state, PINNED):
        delta[a] += size
        delta[min(b, state.n + 1)] -= size
    return int(np.cumsum(delta).max(initial=0)) <= limit


def _respect_pinned(search: _Search, state: _State, limit: int) -> _State:
    """Move swaps to pageable memory until the pinned copies fit ``limit``: the longest
    idle gap per byte first (it can best afford the slower copies)."""
    pairs = []
    for a in state.actions:
        if isinstance(a, SwapOut):
            swap_in = _pair(state, a)
            if swap_in is not None:
                gap = (swap_in.due_op - a.after_op) % max(state.n, 1)
                pairs.append((-gap / state.sizes[a.buffer_id], a.buffer_id, a.after_op, a,
                              swap_in))
    pairs.sort(key=lambda p: p[:3])
    for _slack, _b, _op, out, swap_in in pairs:
        if _pinned_ok(state, limit):
            break
        state.actions = [replace(x, level=PAGEABLE) if x in (out, swap_in) else x
                         for x in state.actions]
    return state


def search_tiers(trace: Trace, seed_plan: Plan, cost, params: TierParams | None = None):
    """Improve a validated swapping plan by the multi-level local search; returns
    ``(plan, stats)``. The plan is ``seed_plan`` (re-labelled ``tiers``) when no move
    helped; with ``pinned_host_bytes`` it is the seed moved to pageable memory as far as
    the limit needs, then searched."""
    params = params or TierParams()
    if seed_plan.status != SolveStatus.FEASIBLE or not seed_plan.residencies:
        raise SolverError(f"search_tiers needs a feasible swapping plan (residencies) to start "
                          f"from; got status {seed_plan.status.value} with "
                          f"{len(seed_plan.residencies)} residencies")
    started = time.perf_counter()
    search = _Search(trace, cost, params)
    state = _State(trace, seed_plan)
    seed_key, report = search.evaluate(state)
    limit = params.pinned_host_bytes
    if limit is not None and not _pinned_ok(state, limit):
        state = _respect_pinned(search, state, limit)
        key, report = search.evaluate(state)
    else:
        key = seed_key
    current = (key, state, report)
    best = current
    deadline = started + params.time_limit_s
    evaluations = params.max_evaluations or float("inf")

    def out_of_budget() -> bool:
        return time.perf_counter() > deadline or search.evaluations >= evaluations

    passes = 0
    for pass_ in range(params.max_passes):
        passes += 1
        improved_in_pass = False
        for op in range(trace.num_ops):
            if out_of_budget():
                break
            if op % params.checkpoint_ops == 0 and best[0] < current[0]:
                current = best
            key, state, report = current
            waited = _waits(report)
            moves = _candidates(state, op, report, waited,
                                link_moves=pass_ > 0 or report.stall_us > 0,
                                level_moves=params.pageable)
            search.rng.shuffle(moves)
            for move in moves:
                if out_of_budget():
                    break
                search.tried[move[0]] += 1
                candidate = _apply(search, state, move, report, waited)
                if candidate is None or not _pinned_ok(candidate, limit):
                    continue
                new_key, new_report = search.evaluate(candidate)
                better = new_key < key and new_key[0] <= key[0]
                sideways = (new_key[1] < key[1]
                            and new_key[0] <= key[0] * (1 + params.tolerance))
                if not (better or sideways):
                    continue
                if new_key < best[0]:  # a new best must pass the validator
                    if not search._validate(trace, candidate.plan()).valid:
                        search.rejected_invalid += 1
                        current = best
                        key, state, report = current
                        waited = _waits(report)
                        continue
                    best = (new_key, candidate, new_report)
                    improved_in_pass = True
                search.accepted[move[0]] += 1
                current = (new_key, candidate, new_report)
                key, state, report = current
                waited = _waits(report)
        if best[0] < current[0]:
            current = best
        if not improved_in_pass or out_of_budget():
            break
    key, state, report = best
    plan = state.plan()
    stats = {**seed_plan.stats, "seed_solver": seed_plan.solver,
             "seed_iteration_us": seed_key[0], "seed_read_write_us": seed_key[1],
             "iteration_us": key[0], "read_write_us": key[1],
             "moves_tried": dict(search.tried), "moves_accepted": dict(search.accepted),
             "evaluations": search.evaluations, "rejected_invalid": search.rejected_invalid,
             "passes": passes, "search_seconds": time.perf_counter() - started,
             "pinned_host_bytes": limit, "pinned_peak_bytes": pinned_peak_bytes(trace, plan),
             "pageable_swaps": sum(isinstance(a, SwapOut) and a.level == PAGEABLE
                                   for a in plan.actions)}
    return replace(plan, stats=stats), stats


def plan_tiers(trace, budget_bytes, cost, params: BudgetParams, started: float,
               tier_params: TierParams | None = None) -> BudgetResult:
    """The ``tiers`` policy: the best plan of ``seed_policies`` (simulated), improved by
    :func:`search_tiers` (``tier_params``; default: :class:`TierParams` with ``params.seed``:
    2 s of search after the seed plans). It has the signature of a budget policy
    (:mod:`cupool.planning.budget`'s registry) but is not registered: ``auto`` is the
    registry's fastest policy by contract, and ``tiers`` is faster by construction."""
    from cupool.planning.budget import get_policy
    from cupool.planning.validator import validate_plan
    from cupool.sim.simulator import simulate

    tier_params = tier_params or TierParams(seed=params.seed)
    best, reasons = None, []
    for name in tier_params.seed_policies:
        result = get_policy(name)(trace, budget_bytes, cost, params, time.perf_counter())
        plan = result.plan
        if not result.feasible or not validate_plan(trace, plan).valid:
            reasons.append(f"{name}: {result.reason or 'invalid plan'}")
            continue
        sim = simulate(trace, plan, cost, validate=False)
        if best is None or sim.iteration_us < best[0]:
            best = (sim.iteration_us, plan)
    if best is None:
        reason = "tiers: no seed policy found a plan (" + "; ".join(reasons) + ")"
        plan = replace(plan, solver="tiers", stats={**plan.stats, "reason": reason})
        return BudgetResult(plan, trace, "tiers", reason)
    plan, _stats = search_tiers(trace, best[1], cost, tier_params)
    return BudgetResult(replace(plan, solve_seconds=time.perf_counter() - started), trace,
                        "tiers")


__all__ = ["TierParams", "pinned_peak_bytes", "plan_tiers", "search_tiers"]
