"""Rules for swapping plans: residencies (a buffer's bytes for a span of ops) and actions.

Naive on purpose, and sharing no code with the planners or the simulator: it reads the
trace's sizes, lifetimes, uses and recompute recipes and the plan's residencies and
actions, and names the first rule broken, with buffers, ops and bytes. The rules, in the
order they are checked (``rule`` of the :class:`ValidationReport` in brackets):

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
from collections import defaultdict

from cupool.check.overlap import Occupancy, first_overlap
from cupool.check.report import VALID, ValidationReport, check_trace, failed
from cupool.core.vocabulary import PERSISTENT, Plan, RecomputeAction, SwapIn, SwapOut, Trace


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
    report = _check_residencies(trace, plan)
    if not report.valid:
        return report
    report = _check_data(trace, plan)
    if not report.valid:
        return report
    return _check_memory(trace, plan, budget)


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


def _check_data(trace, plan):
    """Rules 3 and 4: every residency gets its data, every use sees valid data."""
    spans = defaultdict(list)
    for r in plan.residencies:
        spans[r.buffer_id].append(r)
    for rs in spans.values():
        rs.sort(key=lambda r: r.start)
    entered = {}     # (buffer, residency start) -> action entering it
    swap_outs = defaultdict(list)  # (buffer, index of the residency it leaves) -> SwapOuts
    recompute_rank = {}  # (buffer, before_op) -> position in the action list
    for position, action in enumerate(plan.actions):
        b = action.buffer_id
        if isinstance(action, SwapOut):
            inside = [k for k, r in enumerate(spans[b]) if r.start <= action.after_op < r.end]
            if not inside:
                released = [r for r in spans[b] if r.end <= action.after_op]
                if released and released[-1].end == action.after_op:
                    r = released[-1]
                    return failed("reuse", f"buffer {b}: swap-out after op {action.after_op} is "
                                           f"issued after its residency {_span(r)} released its "
                                           f"bytes at op {r.end}; the residency must extend past "
                                           f"op {action.after_op} until the copy is issued", b)
                return failed("swap_out", f"buffer {b}: swap-out after op {action.after_op}, but "
                                          f"no residency of it covers op {action.after_op}", b)
            swap_outs[(b, inside[0])].append(action)
            continue
        start = action.trigger_op if isinstance(action, SwapIn) else action.before_op
        name = "swap-in triggered at" if isinstance(action, SwapIn) else "recompute before"
        target = [r for r in spans[b] if r.start == start]
        if not target:
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

    for buffer in trace.buffers:
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
        for k, r in enumerate(rs):
            action = entered.get((b, r.start))
            if k > 0 and action is None:
                return failed("entry", f"buffer {b}: residency {_span(r)} is entered by neither a "
                                       f"swap-in nor a recompute at op {r.start}", b)
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
        for u in buffer.uses:
            if not any(r.start <= u < r.end for r in rs):
                return failed("use", f"buffer {b} is used at op {u} but not resident then "
                                     f"(residencies {', '.join(_span(r) for r in rs)})", b)

    read_at = defaultdict(list)  # (input, before_op) -> positions of the recomputes reading it
    for (b, before_op), position in recompute_rank.items():
        recipe = trace.buffer(b).recompute
        for input_id in recipe.inputs:
            read_at[(input_id, before_op)].append(position)
            holder = [r for r in spans[input_id] if r.start <= before_op < r.end
                      or r.start == r.end == before_op]
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
    for b, rs in spans.items():
        for r in rs:
            if r.start == r.end and not any(p > recompute_rank[(b, r.start)]
                                            for p in read_at.get((b, r.start), ())):
                return failed("ephemeral", f"buffer {b}: ephemeral residency {_span(r)} is read "
                                           f"by no later recompute before op {r.start}", b)
    return VALID


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


def _check_memory(trace, plan, budget):
    """Rule 5: bytes per step, address overlap, arena and budget, on the finer clock of the
    module docstring (each op's recomputes, then the op)."""
    sizes = {b.id: b.size for b in trace.buffers}
    steps = defaultdict(list)  # op -> buffers recomputed before it, in plan order
    for action in plan.actions:
        if isinstance(action, RecomputeAction):
            steps[action.before_op].append(action.buffer_id)
    first_step, at = [], 0  # first_step[op]: the step of op's first recompute (or the op)
    for op in range(trace.num_ops + 1):
        first_step.append(at)
        at += len(steps.get(op, ())) + 1

    def op_of(step):
        """The op whose recomputes or run ``step`` is (``first_step`` is sorted)."""
        return max(op for op in range(trace.num_ops + 1) if first_step[op] <= step)

    rows = []
    for r in plan.residencies:
        low, high = r.offset, r.offset + sizes[r.buffer_id]
        recomputed = r.buffer_id in steps.get(r.start, ())
        made = steps[r.start].index(r.buffer_id) if recomputed else 0
        if r.start < r.end:
            rows.append(Occupancy(low, high, r.buffer_id, first_step[r.start] + made,
                                  first_step[r.end]))
            continue
        last = max([k for k, b in enumerate(steps[r.start]) if k > made
                    and r.buffer_id in trace.buffer(b).recompute.inputs], default=made)
        rows.append(Occupancy(low, high, r.buffer_id, first_step[r.start] + made,
                              first_step[r.start] + last + 1))
    resident = [0] * (at + 1)
    top, top_id = 0, None
    for row in rows:
        resident[row.start] += row.high - row.low
        resident[row.end] -= row.high - row.low
        if row.high > top:
            top, top_id = row.high, row.buffer_id
    total = 0
    for step in range(at):
        total += resident[step]
        if total > budget:
            op = op_of(step)
            holders = sorted(row.buffer_id for row in rows if row.start <= step < row.end)
            where = "" if step == first_step[op + 1] - 1 else \
                f" (before it, recompute {step - first_step[op]})"
            return failed("budget", f"op {op}{where}: resident bytes (={total}) exceed the "
                                    f"budget (={budget}); resident buffers {holders}", *holders)
    if top > plan.arena_bytes:
        return failed("arena", f"buffer {top_id} ends at byte {top}, beyond the plan's "
                               f"arena_bytes (={plan.arena_bytes})", top_id)
    if plan.arena_bytes > budget:
        return failed("capacity", f"arena_bytes (={plan.arena_bytes}) exceed the budget "
                                  f"(={budget})")
    overlap = first_overlap(rows)
    if overlap is not None:
        held, arriving = overlap.held, overlap.arriving
        return failed("overlap", f"op {op_of(overlap.op)}: buffer {held.buffer_id} (at "
                                 f"[{held.low}, {held.high}) from op {op_of(held.start)}) and "
                                 f"buffer {arriving.buffer_id} (at [{arriving.low}, "
                                 f"{arriving.high}) from op {op_of(arriving.start)}) share "
                                 f"bytes [{overlap.shared_low}, {overlap.shared_high})",
                      held.buffer_id, arriving.buffer_id)
    return VALID
