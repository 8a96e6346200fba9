"""Classic swap-only policies from other systems: ``vdnn`` and ``on-demand`` (no recompute).

``vdnn`` (vDNN, offload-all): every forward activation that backward uses is swapped out
after its last forward use and prefetched one layer ahead: its swap-in is triggered at the
previous backward op that has a prefetch due (the layer before it in backward order)::

    backward ops:   ...  40        41        42  ...
    prefetch of a:        trigger ──────────► due      (a is due at 42; 40 was the last due op)

When that alone does not fit the budget, the remaining excess is swapped in free-time
order (as capuchin, without recomputation); ``stats["vdnn_extra_swaps"]`` counts those.

``on-demand`` (a passive runtime, what Capuchin runs in its first iteration): ops in order;
when the resident bytes of op ``t`` exceed the budget, the least recently used buffers not
used by ``t`` are swapped out (issued after op ``t - 1``) and swapped back synchronously
at their next use (trigger = due = that use). Persistent buffers with no later use this
iteration go across the iteration boundary, and so do those not used yet this iteration
(they start it on the host, copied out after their last use, back at their first use).
"""

from __future__ import annotations

import bisect

import numpy as np

from cupool.core.vocabulary import PERSISTENT
from cupool.planning.budget.engine.greedy import (
    GreedyOptions,
    candidate_gaps,
    free_time_pass,
    fullest_op,
    out_of_reach,
)
from cupool.planning.budget.engine.placement import Decision, place_schedule
from cupool.planning.budget.engine.records import SwapWindow
from cupool.planning.budget.engine.schedule import SWAP, Gap, IdleGap, Schedule
from cupool.planning.budget.engine.state import PlanState
from cupool.planning.budget.params import BudgetParams
from cupool.planning.budget.result import BudgetResult


def _forward_activations(trace) -> list[IdleGap]:
    """The gap from the last forward use to the first backward use of every activation
    backward reads."""
    phase = [op.phase for op in trace.ops]
    out = []
    for b in trace.buffers:
        if b.kind == PERSISTENT:
            continue
        fw = [u for u in b.uses if phase[u] == "fw"]
        bw = [u for u in b.uses if phase[u] == "bw"]
        if fw and bw and bw[0] > fw[-1] + 1:
            out.append(IdleGap(b.id, fw[-1], bw[0]))
    return out


def plan_vdnn(trace, budget_bytes, cost, params: BudgetParams, started: float) -> BudgetResult:
    acts = _forward_activations(trace)
    dues = sorted({a.next_use for a in acts})
    swaps_only = GreedyOptions(allow_recompute=False, swap_weight=0.0)

    def decide(internal):
        unreachable = out_of_reach(trace, internal, cost, swaps_only, "vdnn")
        if unreachable is not None:  # known without planning the swaps
            return Decision(None, reason=unreachable)
        state = PlanState(trace, internal, cost, max_chain=0)
        for gap in sorted(acts, key=lambda a: a.next_use):
            p, q = gap.prev_use, gap.next_use
            k = int(np.searchsorted(dues, q))
            trigger = max(dues[k - 1] if k else p + 1, p + 1)
            size = trace.buffer(gap.buffer_id).size
            out_len, in_len = cost.copy_us(size, "d2h"), cost.copy_us(size, "h2d")
            window = SwapWindow(p + 1, trigger, float(state.end_us[p]), out_len,
                                float(state.start_us[trigger]), in_len,
                                float(state.start_us[q]), 0.0)
            state.apply_swap(gap.buffer_id, p, q, window)
            state.taken.add(gap)
        vdnn_swaps = len(acts)
        for include_persistent in (False, True):
            if state.live.max() > internal:
                free_time_pass(state, candidate_gaps(trace, include_persistent), swaps_only)
        fullest = fullest_op(state)
        if fullest.resident_bytes > internal:
            return Decision(None, reason=f"vdnn: op {fullest.op} still needs "
                                         f"{fullest.resident_bytes} bytes resident "
                                         f"(budget {internal})")
        extra = state.schedule.count(SWAP) - vdnn_swaps
        return Decision(state.schedule, {"vdnn_swaps": vdnn_swaps, "vdnn_extra_swaps": extra})

    return place_schedule(trace, budget_bytes, decide, "vdnn", params.placement, started)


def plan_on_demand(trace, budget_bytes, cost, params: BudgetParams,
                   started: float) -> BudgetResult:
    n = trace.num_ops
    uses = {b.id: sorted(set(b.uses)) for b in trace.buffers}
    ids = sorted(uses)
    used_at: list[list[int]] = [[] for _ in range(n)]  # the buffers each op uses, by id
    for i in ids:
        for u in uses[i]:
            used_at[u].append(i)

    def decide(internal):
        state = PlanState(trace, internal, cost, max_chain=0)
        live = state.live.copy()  # its own: updated in place as buffers leave
        schedule = Schedule()
        wrapped = {}  # persistent buffer -> its gap across the boundary, while open-ended
        # least recently used first, as (last use before op t, id): persistent buffers not
        # used yet this iteration first of all (they may start it on the host), then each
        # buffer moved to the end after each use; a buffer leaves while it is away
        recency = dict.fromkeys(i for i in ids if trace.buffer(i).kind == PERSISTENT and uses[i])
        for t in range(n):
            for x in used_at[t - 1] if t else ():
                recency.pop(x, None)
                recency[x] = None
            if live[t] <= internal:
                continue
            now, gone = set(used_at[t]), []
            for buffer_id in recency:
                if live[t] <= internal:
                    break
                start, end = state.base[buffer_id]
                if end <= t:
                    gone.append(buffer_id)
                    continue
                if start > t or buffer_id in now:
                    continue
                u = uses[buffer_id]
                k = bisect.bisect_right(u, t)
                last = u[k - 1] if k else -1
                buf = trace.buffer(buffer_id)
                gone.append(buffer_id)  # away (or dead): back in the order at its next use
                if last < 0:  # across the boundary: back at its first use
                    gap = Gap(buffer_id, u[-1], u[0], SWAP, n, u[0])
                    wrapped[buffer_id] = gap
                    live[:u[0]] -= buf.size
                elif k < len(u):
                    gap = Gap(buffer_id, last, u[k], SWAP, t, u[k])
                    live[t:u[k]] -= buf.size
                elif buf.kind == PERSISTENT:
                    gap = Gap(buffer_id, last, u[0], SWAP, t, u[0])
                    early = wrapped.pop(buffer_id, None)
                    if early is not None:  # it began the iteration on the host already
                        schedule.gaps[buffer_id].remove(early)
                        live[:u[0]] += buf.size
                    live[t:] -= buf.size
                    live[:u[0]] -= buf.size
                else:
                    continue  # dead temporaries are not resident in the first place
                schedule.add(gap)
            for x in gone:
                recency.pop(x, None)
            if live[t] > internal:
                return Decision(None, reason=f"on-demand: op {t} still needs {int(live[t])} "
                                             f"bytes resident (budget {internal})")
        if live.max() > internal:
            op = int(np.argmax(live))
            return Decision(None, reason=f"on-demand: op {op} still needs {int(live[op])} "
                                         f"bytes resident (budget {internal})")
        return Decision(schedule)

    return place_schedule(trace, budget_bytes, decide, "on-demand", params.placement, started)
