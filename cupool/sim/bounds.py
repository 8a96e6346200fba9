"""A sound lower bound on the overhead of any valid plan for a budget.

Sound means: no plan that passes :func:`cupool.check.validate_plan` for this
budget simulates (:func:`cupool.sim.simulate`, same cost model) with a smaller overhead.

*Pending* buffers at ``i`` are those whose data must exist then: a persistent buffer
always (it carries data across iterations), a temporary one from its ``start`` to its
last use. A pending buffer must be *resident* at ``i`` when ``i`` uses it, or when it is
a temporary buffer born at ``i`` (its first residency starts there); if those bytes alone
exceed the budget, no plan exists: ``infeasible: op i needs N bytes resident``. Otherwise
``X = pending bytes - budget`` bytes (if positive) belong to buffers that are off the
device at ``i``.

Each part below bounds the iteration's time ``T`` soundly by itself, in its own module; the
highest is taken (``details["method"]`` names it) and the overhead bound is
``max(ideal, T) / ideal - 1``:

- each op alone (:mod:`cupool.sim.op_alone`, ``"dual"``): its excess taken off the device
  by copies in, copies out and recomputes, relaxed to fractions of buffers, bounded by a
  dual search over how the start of the op, the time after it and the copy engines delay
  the iteration;
- the same relaxation solved exactly for the ops of most excess
  (:mod:`cupool.sim.op_alone_lp`, ``"lp"``, with SciPy), with what happens after the op
  stated in order, and the largest candidates moved whole where few are large;
- the whole iteration's memory-time (:mod:`cupool.sim.memory_time`, ``"memory-time"``,
  with SciPy): the arena holds ``budget * T`` byte-µs, and a copy in flight holds its whole
  buffer for as long as it runs (streamed weights pay for their copies' memory as well as
  for the deficit);
- several peaks at once (:mod:`cupool.sim.peaks`, ``"several-peaks"``, with SciPy): a
  buffer off the device at one of the ops of most excess is off whole and waits for all of
  its copy after it, and one off at several is copied in once for all of them;
- windows of ops (:mod:`cupool.sim.windows`, ``"windows"``): the bytes off the device at op
  ``k`` and used again by op ``m`` cross the link between the two ops (those written after
  ``k`` and off the device at ``m`` likewise), what the ops between cannot hide of it is
  stalled, and the stalls of disjoint windows add up;
- refilling a peak (:mod:`cupool.sim.refill`, ``"refill"``): the buffers off the device at
  one op come back whole over one link after it, the first only once room frees for it
  (a copy out, a death, a clean buffer leaving, or more bytes off the device);
- on short steps, the whole iteration at once (:mod:`cupool.sim.slots`, ``"slots"``, with
  SciPy): the slot between two ops each copy and recompute starts in, whole, the copies
  sharing the engines and the waits between ops.

They read the same per-buffer numbers (:class:`~cupool.sim.bound_inputs.BufferArrays`; a
recompute's cost :func:`~cupool.sim.bound_inputs.recompute_us`).

What the bound ignores (so it may be loose): fragmentation (the arena must also pack),
when each copy out can start (beyond the windows), chains through inputs that
are alive but dropped by the plan, and most interactions between different ops'
evictions (each op is bounded alone, but for the few the several-peaks program states
together). A budget at or above the trace's lower bound gives 0: a
static plan fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from cupool.core.vocabulary import Trace
from cupool.errors import InputError
from cupool.sim.bound_inputs import BufferArrays, recompute_us
from cupool.sim.cost import CostModel, cost_model
from cupool.sim.memory_time import memory_time_bound_us
from cupool.sim.op_alone import TAIL_QUANTILES, THRESHOLD_QUANTILES, OpBound
from cupool.sim.op_alone_lp import (
    LP_DUE_OPS,
    LP_OPS,
    LP_THRESHOLDS,
    LP_TOLERANCE,
    WHOLE_BUFFERS,
    lp_value,
)
from cupool.sim.peaks import Peak, choose_peaks, several_peaks_bound_us
from cupool.sim.refill import refill_bound
from cupool.sim.slots import slots_bound_us
from cupool.sim.windows import windows_bound


@dataclass(frozen=True)
class Bound:
    """``feasible`` is False only when no plan can exist (``overhead`` is then ``inf``);
    ``overhead`` is the lower bound (a fraction: 0.05 = 5%); ``reason`` says which op
    decided it; ``details`` holds the numbers (``op``, ``excess_bytes``,
    ``must_resident_bytes``, ``ideal_us``, ``bound_us``, ``mu``, ``lam``, ``ops_examined``)."""

    feasible: bool
    overhead: float
    reason: str
    details: dict = field(default_factory=dict, compare=False)


def overhead_lower_bound(trace: Trace, budget_bytes: int, cost: CostModel | None = None,
                         max_ops: int | None = None) -> Bound:
    """A lower bound on the simulated overhead of every valid plan of ``trace`` within
    ``budget_bytes`` under ``cost`` (default Gen5); see the module docstring.

    ``max_ops`` limits how many ops (those with the largest excess first) get the full
    dual search; the bound stays sound (it is a maximum of valid bounds), only maybe looser.
    """
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 1:
        raise InputError(f"budget_bytes (={budget_bytes!r}) must be an integer >= 1")
    cost = cost or cost_model()
    n = trace.num_ops
    op_us = cost.op_times(trace)
    ideal = math.fsum(op_us)
    details = {"ideal_us": ideal, "budget_bytes": budget_bytes,
               "lower_bound_bytes": trace.lower_bound_bytes()}
    if budget_bytes >= details["lower_bound_bytes"]:
        return Bound(True, 0.0, f"the budget holds the trace's lower bound "
                                f"({details['lower_bound_bytes']} bytes): a static plan has "
                                f"no overhead", details)
    arrays = BufferArrays(trace, cost)
    pending = arrays.pending_bytes()
    for i in range(n):
        needed = int(arrays.must_bytes[i])
        if needed > budget_bytes:
            details.update(op=i, must_resident_bytes=needed)
            return Bound(False, math.inf, f"infeasible: op {i} needs {needed} bytes resident "
                                          f"(budget {budget_bytes})", details)
    excess = pending - budget_bytes
    # a persistent buffer kept on the device across the boundary is resident at op 0
    head_room = budget_bytes - float(arrays.must_bytes[0]) if n else 0.0
    ops = [i for i in np.argsort(-excess, kind="stable") if excess[i] > 0]
    if max_ops is not None:
        ops = ops[:max_ops]
    prefix = np.concatenate([[0.0], np.cumsum(op_us)])
    best = (ideal, None, 1.0, 0.5, 0.0)

    def op_bound(i):
        candidates = arrays.candidates_at(i)
        return OpBound(arrays, prefix, op_us, cost.copy_engines_per_direction, i,
                        candidates, float(excess[i]), arrays.next_uses(candidates, i),
                        head_room, float(budget_bytes - arrays.must_bytes[i]))

    for i in ops:
        i = int(i)
        bound = op_bound(i)
        if bound.primal(best[2], best[3], best[4]) <= best[0]:
            continue  # even a feasible choice here is no worse than the best bound so far
        value, mu, lam, split, _threshold = bound.search()
        if value > best[0]:
            best = (value, i, mu, lam, split)
    method = "dual"
    lp_ops = list(dict.fromkeys([int(i) for i in ops[:LP_OPS]]
                                + ([best[1]] if best[1] is not None else [])))
    for i in lp_ops:
        value = lp_value(op_bound(i), prefix, WHOLE_BUFFERS)
        if value is None:
            break
        method = "lp"
        if value > best[0]:
            best = (value, i, None, None, None)
    memory_time = memory_time_bound_us(trace, budget_bytes, cost, op_us,
                                       arrays.recompute, best[0])
    if memory_time is not None and memory_time > best[0]:
        best = (memory_time, None, None, None, None)
        method = "memory-time"
    peaks = []
    for i in choose_peaks(excess):
        candidates = arrays.candidates_at(i)
        peaks.append(Peak(int(i), float(excess[i]), candidates,
                          arrays.next_uses(candidates, int(i))))
    several = several_peaks_bound_us(trace, cost, op_us, arrays.recompute, peaks, best[0])
    if several is not None and several > best[0]:
        best = (several, None, None, None, None)
        method = "several-peaks"
    windows = windows_bound(trace, arrays, op_us, excess, cost)
    if ideal + windows.stall_us > best[0]:
        best = (ideal + windows.stall_us, None, None, None, None)
        method = "windows"
    refill = refill_bound(trace, arrays, op_us, excess, cost)
    if ideal + refill.stall_us > best[0]:
        best = (ideal + refill.stall_us, None, None, None, None)
        method = "refill"
    slots = slots_bound_us(trace, arrays, op_us, cost.copy_engines_per_direction,
                           budget_bytes, excess)
    if slots is not None and slots > best[0]:
        best = (slots, None, None, None, None)
        method = "slots"
    bound_us, op, mu, lam, _split = best
    overhead = max(0.0, bound_us / ideal - 1.0) if ideal > 0 else 0.0
    details.update(bound_us=bound_us, op=op, mu=mu, lam=lam, ops_examined=len(ops),
                   method=method, lp_ops=len(lp_ops) if method == "lp" else 0,
                   excess_bytes=None if op is None else int(excess[op]),
                   windows=[(w.first_op, w.last_op, w.direction) for w in windows.windows])
    if method == "memory-time":
        reason = (f"the arena holds {budget_bytes} bytes for the whole iteration: keeping "
                  f"what must be on the device there (copies in flight included) takes at "
                  f"least {bound_us - ideal:.1f} us beyond the ideal {ideal:.1f} us")
    elif method == "several-peaks":
        reason = (f"the {len(peaks)} ops with the most excess must each have whole buffers "
                  f"off the device, copied back after them over one link: at least "
                  f"{bound_us - ideal:.1f} us beyond the ideal {ideal:.1f} us")
    elif method == "windows":
        reason = (f"between {len(windows.windows)} pairs of ops, bytes off the device at one "
                  f"and used by the other (or written by one and off at the other) must "
                  f"cross the link: at least {bound_us - ideal:.1f} us beyond the ideal "
                  f"{ideal:.1f} us")
    elif method == "refill":
        reason = (f"the buffers off the device at op {refill.op} come back whole over one "
                  f"link before op {refill.until_op}, the first once it has room "
                  f"({refill.room}): at least {bound_us - ideal:.1f} us beyond the ideal "
                  f"{ideal:.1f} us")
    elif method == "slots":
        reason = (f"the {n} ops' copies and recomputes, each started in one slot between two "
                  f"ops and sharing the link's engines, leave at least "
                  f"{bound_us - ideal:.1f} us beyond the ideal {ideal:.1f} us")
    elif op is None:
        reason = "no op forces copies or recomputation beyond what overlaps compute"
    else:
        reason = (f"op {op} must have {int(excess[op])} bytes off the device; moving them "
                  f"back (link) or recomputing them takes at least {bound_us - ideal:.1f} us "
                  f"beyond the ideal {ideal:.1f} us")
    return Bound(True, overhead, reason, details)


__all__ = ["LP_DUE_OPS", "LP_OPS", "LP_THRESHOLDS", "LP_TOLERANCE", "TAIL_QUANTILES",
           "THRESHOLD_QUANTILES", "Bound", "overhead_lower_bound", "recompute_us"]
