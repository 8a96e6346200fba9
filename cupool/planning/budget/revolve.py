"""``revolve``: binomial checkpointing of a trace's chain (Griewank and Walther's revolve,
ACM TOMS Algorithm 799), nested recomputation expressed in the plan itself.

An adjoint or any reverse sweep over a chain ``x₁ … x_l`` (:mod:`.chain`) reads the
states back last first. With ``s`` checkpoint slots (beyond the root ``x₀``), the fewest
forward steps that deliver them all follow the binomial recursion ``R(n, s)``: to deliver
``n`` states above a held one, advance ``k`` steps and keep the state reached (a slot),
deliver the ``n - k`` above it with one slot less, then the ``k - 1`` below it with the
slot back (:func:`~.revolve_tables.revolve_table`; its optimum is revolve's
``r·l - C(s + r, s + 1)`` for ``l = n + 1`` steps and ``s + 1`` checkpoints). The first
advances from the root are the program's own forward sweep, so a schedule re-runs
``R(n, s) - n`` steps. The same recursion over *units* of memory that hold the state
being advanced too (:func:`~.revolve_tables.units_table`: an advance of one step from a
held state holds one state, a longer one two) finds schedules that keep one state more
within the same bytes; where the ops at the turn hold more than a reverse step (the
states after the chain, a loss's inputs), a units schedule whose sweep keeps only the
last state fits where the others do not. Where the states' steps cost differently
(chains of up to 64 states), a recursion over their times (``weighted_table`` of
:mod:`.revolve_tables`) gives each model's schedule of least time. Of all of them the policy
keeps the one whose recomputes take least time on the cost model without re-running more
steps, or that saves a clear share of the time (``stats["revolve_model"]``).

**In the plan.** Every advance runs as recomputes before the op that first reads the
state it delivers (the latest it can: nothing is held early). The states it passes
through are *ephemeral* residencies (``start == end``, rule ``ephemeral`` of
:mod:`cupool.check.swapping`): made among those recomputes, read by the next one, given
back after it; the state it keeps is a residency from there to its last use::

    op (reads x6):   rc x3    rc x4    rc x5    rc x6    op
    x2 checkpoint    ====================================....   (kept since an earlier op)
    x3 ephemeral     [=================]                        given back after rc x4
    x4 ephemeral              [=================]               given back after rc x5
    x5 ephemeral                       [=================]      may take x3's bytes
    x6 kept                                     [===========....  to its last use

A state's freed intermediates (*links*: the rest of a multi-op step) are re-made as
ephemerals before it. Everything off the chain keeps its trace residency.

**Slots from bytes.** The planner tries slot counts (a binary search, then down while the
offsets do not fit) and keeps the largest whose schedule, measured step by step on the
validator's clock (each recompute a step), fits the budget. Below the fewest slots' peak
(one reverse step's working set and the root) no schedule of the policy fits: its plan is
``infeasible``, its reason one line naming the op and the bytes.

**States of several buffers** (:mod:`.chain`: a step that makes a reaction term beside
the state, a misfit per observation, leapfrog's two steps): a state is advanced as one
step; passing through it re-makes only the buffers the states above read, delivering it
re-makes all of them.

**Forced checkpoints.** A state whose op is not recomputable is kept from where it is
made; it splits the chain, each stretch below it reversed from the state under it
(``stats["revolve_forced"]`` names the op). Its stretch's forward sweep keeps nothing.

**Two levels** (``host=``): states at chosen positions are copied to pinned host memory
after their forward use and copied back before their stretch is reversed (H-Revolve /
Disk-Revolve: a slow memory holding checkpoints), the stretches between them reversed
on the device as above (a state back from the host takes a slot there);
:func:`plan_revolve_two_level` tries host checkpoints every ``P`` states and where
:func:`host_positions` (a dynamic program over the copy and step costs) puts them, and
keeps the fastest simulated plan.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np

from cupool.check import validate_plan
from cupool.core.vocabulary import (
    Plan,
    RecomputeAction,
    Residency,
    SolveStatus,
    SwapIn,
    SwapOut,
    Trace,
)
from cupool.planning.budget.chain import Chain, find_chain
from cupool.planning.budget.engine.residency import failed_plan
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.result import BudgetResult
from cupool.planning.budget.revolve_tables import (
    Table,
    forward_steps,
    host_cost_us,
    host_positions,
    least_units,
    revolve_table,
    state_us,
    units_table,
    weighted_for,
)
from cupool.planning.problem import StaticProblem
from cupool.planning.solvers import SolverParams
from cupool.planning.static import solve

POLICY = "revolve"
TWO_LEVELS = "revolve-two-level"
FALLBACK_SOLVERS = ("greedy-size", "best-fit")
"""Offset solvers tried, in order, on a schedule's residencies (after ``params``')."""


@dataclass
class _Entry:
    """One recompute before an op: ``buffer`` re-made, ``kept`` (a residency to its last
    use) or ephemeral, ``last``: position of the last recompute there reading it."""

    buffer: int
    kept: bool
    last: int = -1


@dataclass
class Built:
    """A schedule as residencies (``(buffer, start, end)``, offsets to come) and actions,
    with its peak on the validator's clock and what it re-ran."""

    spans: list
    actions: list
    steps_before: dict
    peak_bytes: int
    peak_op: int
    state_recomputes: int
    link_recomputes: int
    slots: int
    host: tuple = ()
    rows: tuple = field(default=(), repr=False)
    units: bool = False
    light_turn: bool = False
    timed: bool = False


class _Builder:
    """Turns the recursion's choices into batches of recomputes per op."""

    def __init__(self, trace: Trace, chain: Chain) -> None:
        self.trace, self.chain = trace, chain
        self.states = chain.states
        self.batches: dict[int, list[_Entry]] = defaultdict(list)
        self.index: dict[int, dict[int, int]] = defaultdict(dict)  # op -> buffer -> entry
        self.first_end = {b.buffer_id: b.forward_last + 1 for x in chain.states
                          for b in x.buffers}
        self.state_recomputes = self.link_recomputes = 0

    def state(self, position: int):
        return self.states[position - 1]

    def make(self, op: int, buffer: int, kept: bool) -> None:
        """Re-make ``buffer`` before ``op`` (at most once there: a second request keeps or
        reuses the first)."""
        at = self.index[op].get(buffer)
        if at is not None:
            self.batches[op][at].kept |= kept
            return
        batch = self.batches[op]
        for source in self.trace.buffer(buffer).recompute.inputs:
            k = self.index[op].get(source)
            if k is not None:
                batch[k].last = len(batch)
        self.index[op][buffer] = len(batch)
        batch.append(_Entry(buffer, kept))

    def required(self, base: int, target: int) -> dict:
        """For each state ``base + 1 .. target``, the buffers to re-make: all of
        ``target``'s, and below it only what the buffers above read (its carry)."""
        wanted = set(self.state(target).buffer_ids)
        out = {}
        for j in range(target, base, -1):
            chosen = []
            for b in reversed(self.state(j).buffers):
                if b.buffer_id in wanted:
                    chosen.append(b)
                    wanted.update(b.reads)
            out[j] = chosen[::-1]
        return out

    def advance(self, base: int, target: int, op: int) -> None:
        """Recompute states ``base + 1 .. target`` before ``op`` (each buffer's links
        first), keeping ``target``."""
        required = self.required(base, target)
        for j in range(base + 1, target + 1):
            members = required[j]
            if any(b.buffer_id not in self.index[op] for b in members):
                self.state_recomputes += 1
            for b in members:
                for link in b.links:
                    if link not in self.index[op]:
                        self.link_recomputes += 1
                    self.make(op, link, False)
                self.make(op, b.buffer_id, j == target)

    def reverse(self, base: int, top: int, slots: int, forward: bool, table) -> None:
        """Deliver states ``top, top - 1, .., base + 1`` with ``base`` held (``forward``:
        the first advances are the program's own sweep)."""
        stack = [(base, top, slots, forward)]
        while stack:
            a, b, s, fw = stack.pop()
            if b <= a:
                continue
            target = table.advance_to(a, b, s)
            if fw:
                for x in self.state(target).buffers:
                    self.first_end[x.buffer_id] = x.end
            else:
                self.advance(a, target, self.state(b).need)
            if target == b:
                stack.append((a, b - 1, s, False))
            else:  # pushed last, runs first: above the kept state, then below it
                stack.append((a, target - 1, s, False))
                stack.append((target, b, s - 1, fw))


def build(trace: Trace, chain: Chain, slots: int, host: tuple = (), cost=None,
          prefetch: bool = True, units: bool = False, light_turn: bool = False,
          step_us: tuple | None = None) -> Built:
    """The schedule with ``slots`` slots, or with ``units`` that many units of memory
    (:mod:`.revolve_tables`; ``host``: positions copied to the host and back before their
    stretch, two levels; ``cost`` times their copies, each copied back early enough to
    land on time with ``prefetch``, else when its stretch begins), as residencies and
    actions with its peak. With ``light_turn`` the forward sweep keeps only the last
    state (the turn's ops may hold more than a reverse step: the states after the chain,
    a loss's inputs), and the states below it are reversed from the root as a stretch.
    ``step_us`` (each state's re-making time): the schedule of least time, not of fewest
    steps."""
    m = len(chain.states)
    low, high = (least_units(m), m) if units else (0, max(0, m - 1))
    slots = max(low, min(slots, high))
    if step_us is not None:
        table = weighted_for(step_us, units)
    else:
        table = Table(*(units_table if units else revolve_table)(max(1, m), max(1, slots)))
    builder = _Builder(trace, chain)
    host = tuple(sorted(p for p in set(host) if 1 <= p <= m and chain.states[p - 1].recomputable))
    bases = sorted({0, *chain.forced, *host})
    last_base = bases[-1]
    if light_turn and m > last_base:
        for x in chain.states[m - 1].buffers:
            builder.first_end[x.buffer_id] = x.end
        builder.reverse(last_base, m - 1, slots, False, table)
    else:
        builder.reverse(last_base, m, slots, True, table)
    kept_bases = {last_base} | set(chain.forced)
    for i in range(len(bases) - 1, 0, -1):
        builder.reverse(bases[i - 1], bases[i] - 1, slots, False, table)
    for p in kept_bases - {0}:
        for x in chain.states[p - 1].buffers:
            builder.first_end[x.buffer_id] = x.end
    swapped = [p for p in host if p not in kept_bases]
    spans, actions, index = [], [], {}
    for b in trace.buffers:
        end = builder.first_end.get(b.id, b.end)
        index[b.id] = len(spans)
        spans.append((b.id, b.start, end))
    for op in sorted(builder.batches):
        for entry in builder.batches[op]:
            end = trace.buffer(entry.buffer).end if entry.kept else op
            spans.append((entry.buffer, op, end))
            actions.append(RecomputeAction(entry.buffer, op))
    op_us = cost.op_times(trace) if cost is not None and swapped else None
    first_reads = _first_reads(builder) if swapped else {}
    for x in (b for p in swapped for b in chain.states[p - 1].buffers):
        due = min(first_reads.get(x.buffer_id, x.need), x.need)
        trigger = _trigger(trace, builder, due, x, cost if prefetch else None, op_us)
        out_end = _copied_out(trace, x, cost, trigger, op_us)
        spans[index[x.buffer_id]] = (x.buffer_id, x.producer, out_end)
        actions += [SwapOut(x.buffer_id, x.forward_last), SwapIn(x.buffer_id, trigger, due)]
        spans.append((x.buffer_id, trigger, x.end))
    peak, peak_op, rows, steps = _peak(trace, spans, builder.batches)
    return Built(spans, actions, steps, peak, peak_op, builder.state_recomputes,
                 builder.link_recomputes, slots, tuple(swapped), rows, units, light_turn,
                 step_us is not None)


def _first_reads(builder: _Builder) -> dict:
    """For each buffer the recomputes read, the first op whose recomputes read it."""
    first: dict[int, int] = {}
    for op in sorted(builder.batches):
        for entry in builder.batches[op]:
            for source in builder.trace.buffer(entry.buffer).recompute.inputs:
                first.setdefault(source, op)
    return first


def _copied_out(trace: Trace, x, cost, limit: int, op_us) -> int:
    """The end of ``x``'s first residency when it is copied out after its forward use:
    the op by which the copy is done (``cost``; ``op_us`` its op times), so that nothing
    waits to take its bytes, at most ``limit``."""
    end = x.forward_last + 1
    if cost is None:
        return end
    need_us = cost.copy_us(trace.buffer(x.buffer_id).size, "d2h")
    spent = 0.0
    while end < limit and spent < need_us:
        spent += float(op_us[end])
        end += 1
    return end


def _trigger(trace: Trace, builder: _Builder, due: int, x, cost, op_us) -> int:
    """The latest op at which a swap-in of ``x`` lands by ``due`` (ops and recomputes
    timed by ``cost``; ``op_us`` its op times), after the state's forward use."""
    if cost is None:
        return max(x.forward_last + 1, due)
    need_us = cost.copy_us(trace.buffer(x.buffer_id).size, "h2d")
    spent, t = 0.0, due
    while t > x.forward_last + 1 and spent < need_us:
        t -= 1
        spent += float(op_us[t]) + sum(float(op_us[trace.buffer(e.buffer).recompute.op])
                                       for e in builder.batches.get(t, ()))
    return t


def _peak(trace: Trace, spans, batches) -> tuple[int, int, tuple, dict]:
    """The most bytes held at one step of the validator's clock (each op's recomputes a
    step each, then the op), the op of that step, the rows ``(start step, end step, size,
    span index)`` and the steps before each op."""
    n = trace.num_ops
    counts = np.zeros(n + 1, dtype=np.int64)
    for op, batch in batches.items():
        counts[op] = len(batch)
    first_step = np.concatenate(([0], np.cumsum(counts + 1)))[: n + 1]
    total_steps = int(first_step[n])
    position = {}
    for op, batch in batches.items():
        for k, entry in enumerate(batch):
            position[(entry.buffer, op)] = (k, max(k, entry.last))
    size_of = {b.id: b.size for b in trace.buffers}
    count = len(spans)
    start = np.fromiter((x[1] for x in spans), np.int64, count)
    end = np.fromiter((x[2] for x in spans), np.int64, count)
    sizes = np.fromiter((size_of[x[0]] for x in spans), np.int64, count)
    entered = [position.get((x[0], x[1]), (0, 0)) for x in spans]  # (step made, last read)
    made = np.fromiter((m for m, _last in entered), np.int64, count)
    last = np.fromiter((r for _made, r in entered), np.int64, count)
    starts = first_step[start] + made  # held from its recompute's step, when one enters it
    ends = np.where(start < end, first_step[end], first_step[start] + last + 1)
    delta = np.zeros(total_steps + 1, dtype=np.int64)
    np.add.at(delta, starts, sizes)
    np.add.at(delta, ends, -sizes)
    held = np.cumsum(delta)[:total_steps]
    step = int(np.argmax(held)) if total_steps else 0
    peak_op = int(np.searchsorted(first_step, step, side="right") - 1)
    return int(held.max()) if total_steps else 0, peak_op, (starts, ends, sizes), \
        {int(op): int(c) for op, c in enumerate(counts) if c}


def _place(trace: Trace, built: Built, budget_bytes: int, params: BudgetParams):
    """Offsets for ``built``'s residencies on the validator's clock within the budget, or
    ``None``."""
    starts, ends, sizes = built.rows
    problem = StaticProblem.from_arrays(starts, ends, sizes, capacity=budget_bytes,
                                        num_ops=int(ends.max()) if len(ends) else 0,
                                        name=trace.name)
    for solver in dict.fromkeys((params.offset_solver, *FALLBACK_SOLVERS)):
        result = solve(problem, solver, SolverParams(time_limit_s=2.0), validate=False)
        if result.offsets is not None and problem.arena_of(result.offsets) <= budget_bytes:
            return np.asarray(result.offsets, dtype=np.int64)
    return None


def _plan_of(trace: Trace, built: Built, offsets, budget_bytes: int, started: float,
             stats: dict) -> Plan:
    residencies = tuple(sorted(
        (Residency(b, start, end, int(o)) for (b, start, end), o in
         zip(built.spans, offsets, strict=True)), key=lambda r: (r.start, r.buffer_id)))
    arena = max((r.offset + trace.buffer(r.buffer_id).size for r in residencies), default=0)
    return Plan(trace.name, trace.digest(), POLICY, SolveStatus.FEASIBLE, int(arena),
                trace.lower_bound_bytes(), (), time.perf_counter() - started, budget_bytes,
                stats, residencies, tuple(built.actions))


def _stats(chain: Chain, built: Built) -> dict:
    m = len(chain.states)
    forced = [x.reason for x in chain.states if not x.recomputable]
    model = ("units (light turn)" if built.light_turn else "units") if built.units \
        else "slots"
    model += ", timed steps" if built.timed else ""
    return {"revolve_states": m, "revolve_model": model,
            "revolve_slots": None if built.units else built.slots,
            "revolve_units": built.slots if built.units else None,
            "revolve_recomputes": built.state_recomputes,
            "revolve_link_recomputes": built.link_recomputes,
            "revolve_forward_steps": m + built.state_recomputes,
            "revolve_kept": list(chain.kept), "revolve_forced": forced,
            "revolve_host": list(built.host), "revolve_side": list(chain.side),
            "revolve_state_buffers": len(chain.buffer_ids),
            "revolve_notes": list(chain.notes)}


def chain_for(trace: Trace) -> tuple[Chain | None, str | None]:
    """The chain of ``trace`` and ``None``, or ``None`` and why it has none."""
    chain = find_chain(trace)
    if not chain.states:
        return None, (f"{POLICY}: no chain of states read back in reverse order"
                      + (f" ({'; '.join(chain.notes[:3])})" if chain.notes else ""))
    return chain, None


def _floor(trace: Trace, chain: Chain) -> Built:
    """The schedule of least peak: no slot, or the fewest units, whichever holds less."""
    return min(build(trace, chain, 0), build(trace, chain, 0, units=True),
               build(trace, chain, 0, units=True, light_turn=True),
               key=lambda b: b.peak_bytes)


def floor_reason(trace: Trace, chain: Chain, budget_bytes: int) -> str:
    """One line: the op and bytes the fewest slots still need, beyond ``budget_bytes``."""
    built = _floor(trace, chain)
    op = trace.ops[built.peak_op]
    return (f"{POLICY}: op {built.peak_op} ({op.name}) needs {built.peak_bytes} bytes "
            f"with its working set and one checkpoint (the chain's root), the budget is "
            f"{budget_bytes} bytes")


def largest_fitting(trace: Trace, chain: Chain, budget_bytes: int, params: BudgetParams,
                    host: tuple = (), cost=None, prefetch: bool = True, units: bool = False,
                    light_turn: bool = False, step_us: tuple | None = None):
    """``(built, offsets)`` of the most slots (``units``: units) whose schedule fits the
    budget, or ``(None, None)``."""
    m = len(chain.states)
    least = least_units(m) if units else 0
    low, high = least, (m if units else max(0, m - 1))

    def built(count: int) -> Built:
        return build(trace, chain, count, host, cost, prefetch, units, light_turn, step_us)

    if built(low).peak_bytes > budget_bytes:
        return None, None
    while low < high:  # the peak grows with the slots
        middle = (low + high + 1) // 2
        if built(middle).peak_bytes <= budget_bytes:
            low = middle
        else:
            high = middle - 1
    for count in range(low, least - 1, -1):
        schedule = built(count)
        offsets = _place(trace, schedule, budget_bytes, params)
        if offsets is not None:
            return schedule, offsets
    return None, None


TIME_MARGIN = 0.05
"""Share of the recompute time a schedule with more steps must save to be kept."""

HOST_TRIED = 4
"""Periods of :data:`HOST_PERIODS` planned per model: those whose copies and steps cost
least by :func:`~.revolve_tables.host_cost_us` (with the searched placement beside)."""

HOST_PERIODS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
"""States between two host checkpoints that :func:`plan_revolve_two_level` tries."""


def plan_revolve_two_level(trace, budget_bytes, cost, params: BudgetParams, started: float
                           ) -> BudgetResult:
    """Two levels: every ``P``-th state of the chain copied to pinned host memory after
    its forward use and back before its stretch is reversed, each stretch reversed on the
    device with the slots (or units) that fit (module docstring), for each ``P`` of
    :data:`HOST_PERIODS` shorter than the chain, and where :func:`host_positions` puts
    them; the plan of least simulated iteration time (ties: fewer host checkpoints), or
    none where no placement has any."""
    from cupool.sim.simulator import simulate

    chain, reason = chain_for(trace)
    if chain is None:
        return _failed(trace, budget_bytes, started, reason.replace(POLICY, TWO_LEVELS, 1),
                       TWO_LEVELS)
    m = len(chain.states)
    step_us = float(np.mean([cost.op_us(trace, x.producer) for x in chain.states]))
    copy_us = max(cost.copy_us(sum(trace.buffer(b).size for b in x.buffer_ids), d)
                  for x in chain.states for d in ("h2d", "d2h"))
    candidates = []
    for units in (False, True):  # revolve's slots, then units (module docstring)
        model = " (units)" if units else ""
        periods = [(f"every {p}{model}", tuple(range(p, m, p)), True, units)
                   for p in HOST_PERIODS if p < m]
        one_level, _ = largest_fitting(trace, chain, budget_bytes, params, units=units)
        if one_level is None:
            candidates += periods[:HOST_TRIED]
            continue
        count = one_level.slots
        periods.sort(key=lambda c: host_cost_us(m, count, c[1], step_us, copy_us, units))
        candidates += periods[:HOST_TRIED]  # the periods the copies and steps favour
        placed = host_positions(m, count, step_us, copy_us, units)
        if placed:
            candidates += [(f"searched{model}", placed, True, units),
                           (f"searched, copied back late{model}", placed, False, units)]
    tried, reasons = [], []
    for name, host, prefetch, units in candidates:
        built, offsets = largest_fitting(trace, chain, budget_bytes, params, host, cost,
                                         prefetch, units=units)
        if built is None:
            reasons.append(f"{name}: no slot count fits")
            continue
        plan = _plan_of(trace, built, offsets, budget_bytes, started, {
            **_stats(chain, built), "revolve_host_choice": name})
        tried.append(((simulate(trace, plan, cost, validate=False).iteration_us,
                       len(built.host), len(tried)), plan))
    best = next((entry for entry in sorted(tried, key=lambda e: e[0])
                 if validate_plan(trace, entry[1]).valid), None)  # the fastest valid one
    if best is None:
        return _failed(trace, budget_bytes, started, f"{TWO_LEVELS}: "
                       + ("; ".join(reasons) or "the chain is too short for host checkpoints"),
                       TWO_LEVELS)
    return BudgetResult(replace(best[1], solver=TWO_LEVELS), trace, TWO_LEVELS)


def plan_revolve(trace, budget_bytes, cost, params: BudgetParams, started: float
                 ) -> BudgetResult:
    """The ``revolve`` policy: binomial checkpointing of the trace's chain, everything off
    the chain resident (module docstring)."""
    chain, reason = chain_for(trace)
    if chain is None:
        return _failed(trace, budget_bytes, started, reason)
    if _floor(trace, chain).peak_bytes > budget_bytes:  # no schedule of this policy fits
        return _failed(trace, budget_bytes, started, floor_reason(trace, chain, budget_bytes),
                       status=SolveStatus.INFEASIBLE)
    op_us = cost.op_times(trace)

    def better(new: Built, old: Built) -> bool:
        """``new`` re-runs less time on ``cost`` and no more steps, or saves more than
        :data:`TIME_MARGIN` of the time (measured op times are noisy: a schedule with more
        steps needs a clear gain)."""
        (new_us, new_steps), (old_us, old_steps) = (
            (math.fsum(float(op_us[trace.buffer(a.buffer_id).recompute.op])
                       for a in b.actions if isinstance(a, RecomputeAction)),
             b.state_recomputes) for b in (new, old))
        return (new_us < old_us and new_steps <= old_steps) or \
            new_us < (1 - TIME_MARGIN) * old_us

    built, offsets = largest_fitting(trace, chain, budget_bytes, params)
    weights = state_us(trace, chain, cost)
    variants = [(True, False, None), (True, True, None)]  # units, light turn, step times
    if weights is not None:  # steps of unequal cost: the schedules of least time too
        variants += [(False, False, weights), (True, False, weights), (True, True, weights)]
    for units, light_turn, step_us in variants:  # kept where they re-run less
        other = largest_fitting(trace, chain, budget_bytes, params, units=units,
                                light_turn=light_turn, step_us=step_us)
        if other[0] is not None and (built is None or better(other[0], built)):
            built, offsets = other
    if built is None:
        return _failed(trace, budget_bytes, started,
                       f"{POLICY}: no slot count's schedule could be placed within "
                       f"{budget_bytes} bytes (offset solvers {', '.join(FALLBACK_SOLVERS)})")
    plan = _plan_of(trace, built, offsets, budget_bytes, started, _stats(chain, built))
    return _checked(trace, plan, budget_bytes, started)


def _checked(trace, plan, budget_bytes, started) -> BudgetResult:
    report = validate_plan(trace, plan)
    if not report.valid:  # a bug here, said rather than returned
        return _failed(trace, budget_bytes, started,
                       f"{POLICY}: the schedule fails the validator ({report.rule}): "
                       f"{report.message}")
    return BudgetResult(plan, trace, POLICY)


def _failed(trace, budget_bytes, started, reason, solver: str = POLICY,
            status: SolveStatus = SolveStatus.OVER_CAPACITY) -> BudgetResult:
    """No plan: ``over_capacity``, or ``infeasible`` where no schedule of the policy fits
    (below one reverse step's working set and one checkpoint: nothing copied, nothing off
    the chain leaves, so no plan of this policy exists)."""
    plan = failed_plan(trace, budget_bytes, solver, started, status, {"reason": reason})
    return BudgetResult(plan, trace, solver, reason)


__all__ = ["HOST_PERIODS", "POLICY", "TWO_LEVELS", "Built", "build", "chain_for",
           "floor_reason", "forward_steps", "host_positions", "largest_fitting",
           "plan_revolve", "plan_revolve_two_level", "revolve_table"]
