"""Rules for swapping plans: residencies (a buffer's bytes for a span of ops) and actions.

Plain on purpose, and sharing no code with the planners or the simulator: it reads the
trace's sizes, lifetimes, uses and recompute recipes and the plan's residencies and
actions, and names the first rule broken, with buffers, ops and bytes. On a large plan,
screens over NumPy columns (:mod:`~cupool.check.columns`, :mod:`~cupool.check.quiet`,
:mod:`~cupool.check.memory`) clear what passes, and the rules written here one by one
word every failure. The rules, in the order they are checked (``rule`` of the
:class:`ValidationReport` in brackets):

1. [trace] the plan carries the trace's digest; [budget] it states ``capacity_bytes``
   (the budget); [placements] it has no placements (a swapping plan places residencies).
2. [known] residencies and actions name buffers of the trace; [offset] offsets are
   integers >= 0; [lifetime] every residency ``[start, end)`` lies inside its buffer's
   lifetime with ``start < end``, except a *rematerialization*: a temporary buffer with
   a recompute recipe may be resident again after its lifetime ended (``start >=`` its
   ``end``), entered by a ``RecomputeAction`` (rule 3), to feed a later recompute (a
   chain through an intermediate the program had already freed: it holds no use);
   an *ephemeral* residency (``start == end``: it holds no op) is one of a temporary
   buffer with a recompute recipe, after its first, before an op of the trace
   (``buffer.start < start < num_ops``): the buffer is recomputed among the recomputes
   before op ``start`` and only read by later ones there (a state a nested recompute
   passes through);
   [placed] every buffer has at least one residency;
   [order] a buffer's residencies are disjoint (``previous.end <= next.start``) and no
   two start at one op.
3. How each residency gets its data:

   - [entry] the first residency starts at the buffer's ``start`` (it is produced there)
     and is entered by no action, except for a **persistent** buffer *offloaded across
     the iteration boundary*: it begins the iteration on the host, so its first residency
     is entered by a ``SwapIn`` (anywhere in the iteration), and [boundary] its last
     residency ends with a ``SwapOut`` (the host copy the next iteration swaps in). A
     persistent buffer that is not offloaded must be resident at op 0 and at the last op
     ([boundary]): its first residency starts at 0 and its last ends at ``num_ops``, at
     the first residency's offset (across the boundary the two are one stay: the bytes
     cannot move between iterations);
   - [entry] every later residency is entered by exactly one action at its ``start``:
     a ``SwapIn`` with ``trigger_op == start`` or a ``RecomputeAction`` with
     ``before_op == start`` (a rematerialization only by a ``RecomputeAction``);
   - [swap_in] a ``SwapIn`` has ``trigger_op <= due_op < end`` and ``due_op <=`` the
     residency's first use; it needs exactly one ``SwapOut`` from the residency before it
     (for a boundary swap-in: from the buffer's last residency);
   - [swap_out] a ``SwapOut`` lies inside the residency it leaves
     (``start <= after_op < end``), at or after that residency's last use (uses may
     write: a write after the copy started would be lost), and after its data is valid
     (after the first use for the produced residency, at or after ``due_op`` for a
     swapped-in one); it must be followed by a swap-in (or be the boundary swap-out);
     [reuse] a swap-out issued after the residency already released its bytes
     (``after_op >= end``) would copy a range that may be reused: in the plan's own
     ordering the range is reused only after the copy, because the copy is issued after
     op ``after_op < end`` and whatever lands in the range next starts at ``end`` or
     later, and waits for the copy (the simulator and the runtime enforce the wait);
   - [drop] a ``SwapOut`` with ``drop`` copies nothing, so the buffer must be clean:
     its residency entered by a ``SwapIn`` on the same host level (the host copy it holds
     stays valid) with no op of the buffer's ``writes`` (every use, when unknown) from
     the residency's start through ``after_op``; a persistent buffer kept on the device
     across iterations has no host copy in its first residency, unless it is read-only
     (``writes == []``: its host copy is where it was loaded from, so it is clean
     everywhere);
   - [recompute] only a buffer with a trace ``recompute`` recipe can be recomputed, and
     every input of the recipe is resident with valid data just before ``before_op``
     (produced by an earlier op -- a persistent buffer kept on the device is valid from
     op 0 --, landed by ``due_op <= before_op``, or recomputed earlier: before an earlier
     op, or before the same op by an action earlier in the plan's list, an ephemeral
     residency included);
   - [ephemeral] an ephemeral residency is entered by a ``RecomputeAction`` and read by
     at least one later recompute before the same op (its bytes are released after the
     last of them).
4. [use] every use of a buffer lies in one of its residencies, with valid data: not in
   ``[trigger_op, due_op)`` of a swap-in (the data is not there yet).
5. [budget] at every op the resident bytes (sizes of the residencies covering it) fit
   the budget; [arena] every residency ends at or below ``arena_bytes``; [capacity] the
   arena fits the budget; [overlap] residencies covering the same op share no byte (the
   sweep of :mod:`cupool.check.overlap`: a residency may take bytes released at the op
   it starts).

   Both are checked on a finer clock than the ops: before op ``t`` come its recomputes,
   one step each, in plan order, then the op. A residency ``[s, e)`` holds its bytes to
   the last step of op ``e - 1`` from the first step before op ``s`` (its bytes are taken
   before the recomputes run), or, when a recompute enters it, from that recompute's
   step; an ephemeral residency before op ``t`` from the step of its own recompute to that
   of the last recompute reading it::

       op 7's steps:  rc x3    rc x4    rc x5    rc x6    op 7
       x3 ephemeral   [=================]                          read by rc x4
       x4 ephemeral            [=================]                 read by rc x5
       x5 ephemeral                     [=================]        may take x3's bytes
       x6 [7, 9)                                 [====================...
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections import defaultdict

import numpy as np

from cupool.check.columns import plan_columns, residencies_pass, sorted_spans
from cupool.check.memory import check_memory
from cupool.check.quiet import quiet_buffers
from cupool.check.report import VALID, ValidationReport, check_trace, failed
from cupool.core.vocabulary import PERSISTENT, Plan, RecomputeAction, SwapIn, SwapOut, Trace

SCREEN_FROM = 64
"""Plans with at least this many residencies are screened (:mod:`cupool.check.columns`);
smaller ones are checked one by one, which is faster for them (tens of microseconds)."""


def _span(r):
    return f"[{r.start}, {r.end})"


def validate_swap_plan(trace: Trace, plan: Plan) -> ValidationReport:
    """Validate a swapping plan (residencies and actions) against its trace; see the module
    docstring for the rules."""
    report = check_trace(trace, plan)
    if not report.valid:
        return report
    budget = plan.capacity_bytes
    if budget is None:
        return failed("budget", "a swapping plan must state its budget (capacity_bytes)")
    if plan.placements:
        return failed("placements", f"a swapping plan has residencies, not placements "
                                    f"(got {len(plan.placements)} placements)")
    columns = plan_columns(trace, plan) if len(plan.residencies) >= SCREEN_FROM else None
    if columns is None or not residencies_pass(columns):
        report = _check_residencies(trace, plan)
        if not report.valid:
            return report
    report = _check_data(trace, plan, columns)
    if not report.valid:
        return report
    return check_memory(trace, plan, budget, columns)


def _check_residencies(trace, plan):
    by_id = {b.id: b for b in trace.buffers}
    per_buffer = defaultdict(list)
    for r in plan.residencies:
        buffer = by_id.get(r.buffer_id)
        if buffer is None:
            return failed("known", f"residency {_span(r)} is for buffer {r.buffer_id}, "
                                   f"which the trace lacks", r.buffer_id)
        if isinstance(r.offset, bool) or not isinstance(r.offset, int) or r.offset < 0:
            return failed("offset", f"buffer {r.buffer_id}: residency {_span(r)} offset "
                                    f"(={r.offset!r}) must be an integer >= 0", r.buffer_id)
        remat = (buffer.kind != PERSISTENT and buffer.recompute is not None
                 and buffer.end <= r.start < r.end <= trace.num_ops)
        ephemeral = (r.start == r.end and buffer.kind != PERSISTENT
                     and buffer.recompute is not None
                     and buffer.start < r.start < trace.num_ops)
        if not (buffer.start <= r.start < r.end <= buffer.end) and not remat \
                and not ephemeral:
            return failed("lifetime", f"buffer {r.buffer_id}: residency {_span(r)} must lie "
                                      f"inside its lifetime [{buffer.start}, {buffer.end}) "
                                      f"with start < end (only a temporary buffer with a "
                                      f"recompute recipe may come back after it, or be "
                                      f"ephemeral: start == end, after its first op and "
                                      f"before op {trace.num_ops})", r.buffer_id)
        per_buffer[r.buffer_id].append(r)
    for buffer in trace.buffers:
        spans = sorted(per_buffer.get(buffer.id, ()), key=lambda r: r.start)
        if not spans:
            return failed("placed", f"buffer {buffer.id} has no residency", buffer.id)
        for before, after in itertools.pairwise(spans):
            if after.start < before.end or after.start == before.start:
                return failed("order", f"buffer {buffer.id}: residencies {_span(before)} and "
                                       f"{_span(after)} overlap in time or start at one op",
                              buffer.id)
    for action in plan.actions:
        if action.buffer_id not in by_id:
            return failed("known", f"{type(action).__name__} names buffer {action.buffer_id}, "
                                   f"which the trace lacks", action.buffer_id)
    return VALID


def _check_data(trace, plan, columns):
    """Rules 3 and 4: every residency gets its data, every use sees valid data.

    A buffer's residencies are in order of ``start`` and disjoint (rule 2), and its
    ``uses`` ascending where :class:`~cupool.check.columns.TraceColumns` says so:
    the residency holding an op, or starting at one, and the uses inside a residency are
    found by bisection. With the plan in columns, buffers that
    :func:`~cupool.check.quiet.quiet_buffers` clears are not looked at one by one, nor
    their actions (they pass the action rules) unless a recompute reads the buffer: the
    first failure, in plan order, is among the actions walked."""
    spans, loud, walk = _screened(trace, plan, columns)
    ordered = columns is not None and columns.trace.uses is not None
    starts = {}  # buffer -> starts of its residencies, for bisection (filled when needed)

    entered = {}     # (buffer, residency start) -> action entering it
    swap_outs = defaultdict(list)  # (buffer, index of the residency it leaves) -> SwapOuts
    recompute_rank = {}  # (buffer, before_op) -> position in the action list
    actions = plan.actions
    for position in walk:
        action = actions[position]
        b = action.buffer_id
        b_starts = starts.get(b)
        if b_starts is None:
            b_starts = starts[b] = [r.start for r in spans[b]]
        if isinstance(action, SwapOut):
            op = action.after_op
            k = bisect_right(b_starts, op) - 1  # the one residency that may hold op
            if k < 0 or op >= spans[b][k].end:
                released = [r for r in spans[b] if r.end <= op]
                if released and released[-1].end == op:
                    r = released[-1]
                    return failed("reuse", f"buffer {b}: swap-out after op {op} is "
                                           f"issued after its residency {_span(r)} released its "
                                           f"bytes at op {r.end}; the residency must extend past "
                                           f"op {op} until the copy is issued", b)
                return failed("swap_out", f"buffer {b}: swap-out after op {op}, but "
                                          f"no residency of it covers op {op}", b)
            swap_outs[(b, k)].append(action)
            continue
        start = action.trigger_op if isinstance(action, SwapIn) else action.before_op
        name = "swap-in triggered at" if isinstance(action, SwapIn) else "recompute before"
        k = bisect_left(b_starts, start)
        if k == len(b_starts) or b_starts[k] != start:
            return failed("entry", f"buffer {b}: {name} op {start}, but no residency of it "
                                   f"starts at op {start}", b)
        if (b, start) in entered:
            return failed("entry", f"buffer {b}: residency starting at op {start} is entered by "
                                   f"two actions", b)
        entered[(b, start)] = action
        if isinstance(action, RecomputeAction):
            recompute_rank[(b, start)] = position

    def valid_after(b, r):
        """Data of residency ``r`` is valid once op ``valid_after(b, r)`` has run (-1: on
        entry; for a swap-in: once op ``due_op`` may start, i.e. after ``due_op - 1``)."""
        action = entered.get((b, r.start))
        if isinstance(action, SwapIn):
            return action.due_op - 1
        if isinstance(action, RecomputeAction):
            return r.start - 1
        buffer = trace.buffer(b)
        if buffer.kind == PERSISTENT:
            return -1  # kept on the device since the previous iteration
        return buffer.uses[0] if buffer.uses else r.start

    buffers = trace.buffers
    for i in range(len(buffers)) if loud is None else loud:
        buffer = buffers[i]
        b, rs = buffer.id, spans[buffer.id]
        first_entry = entered.get((b, rs[0].start))
        offloaded = isinstance(first_entry, SwapIn)
        if offloaded and buffer.kind != PERSISTENT:
            return failed("entry", f"buffer {b}: only a persistent buffer can begin the iteration "
                                   f"on the host; its first residency {_span(rs[0])} is entered "
                                   f"by a swap-in", b)
        if isinstance(first_entry, RecomputeAction):
            return failed("entry", f"buffer {b}: its first residency {_span(rs[0])} is where it "
                                   f"is produced; it cannot be recomputed there", b)
        if not offloaded and rs[0].start != buffer.start:
            return failed("entry", f"buffer {b}: its first residency {_span(rs[0])} must start at "
                                   f"op {buffer.start}, where the buffer is produced", b)
        if buffer.kind == PERSISTENT:
            last_out = swap_outs.get((b, len(rs) - 1))
            if offloaded and not last_out:
                return failed("boundary", f"persistent buffer {b} begins the iteration on the "
                                          f"host, so its last residency {_span(rs[-1])} must end "
                                          f"with a swap-out", b)
            if not offloaded and rs[-1].end != trace.num_ops:
                return failed("boundary", f"persistent buffer {b} stays on the device across "
                                          f"iterations, so its last residency {_span(rs[-1])} "
                                          f"must end at op {trace.num_ops}", b)
            if not offloaded and rs[-1].offset != rs[0].offset:
                return failed("boundary", f"persistent buffer {b} stays on the device across "
                                          f"iterations, so its last residency {_span(rs[-1])} "
                                          f"at offset {rs[-1].offset} and its first "
                                          f"{_span(rs[0])} at offset {rs[0].offset} must share "
                                          f"one offset", b)
        covered = 0  # uses inside the residencies so far
        for k, r in enumerate(rs):
            action = entered.get((b, r.start))
            if k > 0 and action is None:
                return failed("entry", f"buffer {b}: residency {_span(r)} is entered by neither a "
                                       f"swap-in nor a recompute at op {r.start}", b)
            if ordered:
                low, high = bisect_left(buffer.uses, r.start), bisect_left(buffer.uses, r.end)
                uses_in, covered = list(buffer.uses[low:high]), covered + high - low
            else:
                uses_in = [u for u in buffer.uses if r.start <= u < r.end]
            if r.start == r.end and not isinstance(action, RecomputeAction):
                return failed("entry", f"buffer {b}: ephemeral residency {_span(r)} holds no "
                                       f"op; only a recompute can enter it", b)
            if isinstance(action, SwapIn):
                limit = min(uses_in[0] if uses_in else r.end - 1, r.end - 1)
                if not action.trigger_op <= action.due_op <= limit:
                    return failed("swap_in", f"buffer {b}: swap-in due at op {action.due_op} must "
                                             f"lie in [{action.trigger_op}, {limit}] (residency "
                                             f"{_span(r)}, first use {uses_in[:1]})", b)
                source = len(rs) - 1 if k == 0 else k - 1
                if len(swap_outs.get((b, source), ())) != 1:
                    return failed("swap_in", f"buffer {b}: swap-in at op {r.start} needs exactly "
                                             f"one swap-out from residency {_span(rs[source])}, "
                                             f"found {len(swap_outs.get((b, source), ()))}", b)
            if r.start >= buffer.end and not isinstance(action, RecomputeAction):
                return failed("entry", f"buffer {b}: residency {_span(r)} lies after its "
                                       f"lifetime [{buffer.start}, {buffer.end}); only a "
                                       f"recompute can bring it back there", b)
            if isinstance(action, RecomputeAction) and buffer.recompute is None:
                return failed("recompute", f"buffer {b} has no recompute recipe in the trace, so "
                                           f"it cannot be recomputed before op {r.start}", b)
            ready = valid_after(b, r)
            for out in swap_outs.get((b, k), ()):
                following = entered.get((b, rs[k + 1].start)) if k + 1 < len(rs) else None
                boundary = offloaded and k == len(rs) - 1
                if not isinstance(following, SwapIn) and not boundary:
                    return failed("swap_out", f"buffer {b}: swap-out after op {out.after_op} is "
                                              f"not followed by a swap-in of the next residency",
                                              b)
                if uses_in and out.after_op < uses_in[-1]:
                    return failed("swap_out", f"buffer {b}: swap-out after op {out.after_op} comes "
                                              f"before its use at op {uses_in[-1]} in residency "
                                              f"{_span(r)}; that use's writes would be lost", b)
                if out.after_op < ready or (isinstance(action, SwapIn)
                                            and out.after_op < action.due_op):
                    return failed("swap_out", f"buffer {b}: swap-out after op {out.after_op} "
                                              f"copies residency {_span(r)} before its data is "
                                              f"valid (after op {max(ready, 0)})", b)
                if out.drop:
                    report = _check_drop(buffer, r, action, out)
                    if not report.valid:
                        return report
            if isinstance(action, SwapIn):
                for u in uses_in:
                    if u < action.due_op:
                        return failed("use", f"buffer {b}: use at op {u} comes before its data "
                                             f"lands (swap-in triggered at op {action.trigger_op}, "
                                             f"due at op {action.due_op})", b)
        if ordered and covered == len(buffer.uses):
            continue  # the residencies are disjoint: each use was counted once
        for u in buffer.uses:
            if not any(r.start <= u < r.end for r in rs):
                return failed("use", f"buffer {b} is used at op {u} but not resident then "
                                     f"(residencies {', '.join(_span(r) for r in rs)})", b)

    read_at = defaultdict(list)  # (input, before_op) -> positions of the recomputes reading it
    for (b, before_op), position in recompute_rank.items():
        recipe = trace.buffer(b).recompute
        for input_id in recipe.inputs:
            read_at[(input_id, before_op)].append(position)
            holder = _holder(spans.get(input_id, ()), before_op)
            problem = None
            if input_id == b:
                problem = "is the buffer itself"
            elif not holder:
                problem = "is not resident"
            else:
                r = holder[0]
                action = entered.get((input_id, r.start))
                if isinstance(action, RecomputeAction) and r.start == before_op:
                    if recompute_rank[(input_id, before_op)] > position:
                        problem = "is recomputed later, before the same op"
                elif isinstance(action, SwapIn) and action.due_op > before_op:
                    problem = f"is swapped in due at op {action.due_op}, after op {before_op}"
                elif action is None and valid_after(input_id, r) >= before_op:
                    problem = f"is only produced by op {valid_after(input_id, r)}"
            if problem:
                return failed("recompute", f"buffer {b}: recompute before op {before_op} re-runs "
                                           f"op {recipe.op}, whose input buffer {input_id} "
                                           f"{problem}", b, input_id)
    for r in _ephemeral_in_order(plan):
        b = r.buffer_id
        if not any(p > recompute_rank[(b, r.start)] for p in read_at.get((b, r.start), ())):
            return failed("ephemeral", f"buffer {b}: ephemeral residency {_span(r)} is read "
                                       f"by no later recompute before op {r.start}", b)
    return VALID


def _screened(trace, plan, columns):
    """Each buffer's residencies in order of start (``{id: [Residency]}``); the trace
    positions of the buffers the per-buffer rules must look at (``None``: all); the
    positions of the actions the action rules must walk."""
    walk = range(len(plan.actions))
    if columns is None:
        spans = defaultdict(list)
        for r in plan.residencies:
            spans[r.buffer_id].append(r)
        for rs in spans.values():
            rs.sort(key=lambda r: r.start)
        return spans, None, walk
    order, bounds = sorted_spans(columns)
    spans = _Spans(plan, order, bounds, columns.trace.position)
    a, of_trace = columns.actions, columns.trace
    if a is None or of_trace.uses is None:
        return spans, None, walk
    looked_at = ~quiet_buffers(columns, order, bounds)
    recipes = [trace.buffers[b].recompute for b in a.buffer[a.kind == 2].tolist()]
    read = {i for recipe in recipes if recipe is not None for i in recipe.inputs}
    needed = looked_at.copy()  # and the buffers recomputes read: the data rules see them
    needed[[of_trace.position[i] for i in read if i in of_trace.position]] = True
    walk = np.flatnonzero(needed[a.buffer]).tolist()
    return spans, np.flatnonzero(looked_at).tolist(), walk


class _Spans(dict):
    """``{buffer id: [Residency]}`` of :func:`_screened`, each list made when first
    asked for; ``in`` says whether the trace has the buffer."""

    def __init__(self, plan, order, bounds, position):
        super().__init__()
        residencies = plan.residencies
        self._in_order = [residencies[at] for at in order.tolist()]
        self._cuts = bounds.tolist()
        self._position = position

    def __missing__(self, b):
        i = self._position[b]
        rs = self[b] = self._in_order[self._cuts[i]:self._cuts[i + 1]]
        return rs

    def __contains__(self, b):
        return b in self._position

    def get(self, b, default=None):
        return self[b] if b in self._position else default


def _holder(rs, op):
    """The residency of ``rs`` (in order of start, disjoint) that holds op ``op``, or is
    ephemeral at it, as a list of at most one."""
    k = bisect_right([r.start for r in rs], op) - 1
    if k >= 0 and (rs[k].start <= op < rs[k].end or rs[k].start == rs[k].end == op):
        return [rs[k]]
    return []


def _ephemeral_in_order(plan):
    """The ephemeral residencies (``start == end``), buffer by buffer in order of the
    buffer's first residency in the plan, each buffer's in order of start."""
    ephemeral = [r for r in plan.residencies if r.start == r.end]
    if not ephemeral:
        return []
    first = {}
    for r in plan.residencies:
        first.setdefault(r.buffer_id, len(first))
    return sorted(ephemeral, key=lambda r: (first[r.buffer_id], r.start))


def _check_drop(buffer, r, entry, out):
    """Rule [drop]: a swap-out that copies nothing leaves clean data, whose host copy is
    still valid: the residency was entered by a swap-in (whose host copy it holds; for a
    persistent buffer offloaded across the boundary, the host copy it begins the iteration
    with) and no op has written it since it began. A read-only persistent buffer
    (``writes == []``) is clean everywhere: its host copy, where it was loaded from, never
    goes stale."""
    b = buffer.id
    if buffer.read_only:
        return VALID
    if not isinstance(entry, SwapIn):
        return failed("drop", f"buffer {b}: swap-out after op {out.after_op} drops residency "
                              f"{_span(r)} without a copy, but that residency has no host "
                              f"copy (it is not entered by a swap-in)", b)
    written = [w for w in buffer.write_ops if r.start <= w <= out.after_op]
    if written:
        return failed("drop", f"buffer {b}: swap-out after op {out.after_op} drops dirty "
                              f"data without a copy: op {written[0]} writes it after its host "
                              f"copy was swapped in at op {r.start}", b)
    if out.level != entry.level:
        return failed("drop", f"buffer {b}: swap-out after op {out.after_op} drops to host "
                              f"level {out.level}, but its host copy is on {entry.level}", b)
    return VALID
