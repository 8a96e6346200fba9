"""A plan as a PyTorch memory snapshot, to open in the viewer users already know
(``pytorch.org/memory_viz``, ``python -m torch.cuda._memory_viz trace_plot|segment_plot|stats``).

The arena is one segment; every buffer's residency (a static plan: its whole lifetime at
its offset) is a block at ``base_address + offset``. The snapshot (the layout documented
in :mod:`cupool.io.torch_snapshot`) is::

    {"segments": [{"device": 0, "address": base_address, "total_size": arena_bytes,
                   "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                   "allocated_size": ..., "active_size": ..., "requested_size": ...,
                   "frames": [], "blocks": [...]}],      # blocks tile the segment
     "device_traces": [[{"action": "alloc" | "free_requested" | "free_completed",
                         "addr": int, "size": int, "stream": 0, "frames": []}, ...]]}

Events, in op order: at the boundary before op ``k`` (``k = 0 .. n``), first the frees of
the residencies that end at ``k`` (a ``free_requested`` then a ``free_completed``, which
the viewer shows as one free), then the allocs of those that start at ``k``, both in
offset order. So a free always precedes the alloc that reuses its bytes, and two
residencies overlap in time exactly when their events interleave::

    op:         0     1     2          boundary:  0        1        2         3 = n
    buf 0 @0:  [===========)           events:    alloc 0  alloc 1  free 0    free 1
    buf 1 @64:       [===========)                                  alloc 2
    buf 2 @0:              [=====)                                            free 2

A persistent buffer resident for the whole iteration (``[0, n)``) was allocated before
the trace began: it is an allocated block of the segment and has no events, as in a real
snapshot of a training job's weights. ``segments`` shows the state after the events
(the viewer replays the events backwards from it): by default after the last one, or,
with ``at_op=k``, the snapshot is "taken" during op ``k`` (events up to boundary ``k``,
blocks = what is resident during op ``k``).

Importing the result with :func:`cupool.io.torch_snapshot.snapshot_to_trace` gives back
the buffers (residencies) with their sizes, kinds and overlaps; the time axis becomes
the event index.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from cupool.core.vocabulary import PERSISTENT, Plan, Trace, plan_residencies
from cupool.errors import InputError, PlanFormatError
from cupool.io._files import write_atomic

DEFAULT_BASE_ADDRESS = 0x7F00_0000_0000
"""Where the arena's segment starts (a typical CUDA address; any value >= 0 works)."""
PICKLE_PROTOCOL = 4


def _event(action: str, addr: int, size: int) -> dict:
    return {"action": action, "addr": addr, "size": size, "stream": 0, "frames": []}


def _block(addr: int, size: int, state: str) -> dict:
    return {"address": addr, "size": size, "requested_size": 0 if state == "inactive" else size,
            "state": state, "frames": []}


def plan_to_snapshot(trace: Trace, plan: Plan, *, at_op: int | None = None,
                     base_address: int = DEFAULT_BASE_ADDRESS, device: int = 0) -> dict:
    """The snapshot dict of ``plan`` (static or swapping) for ``trace`` (module docstring)."""
    if plan.trace_digest != trace.digest():
        raise PlanFormatError(f"the plan is for trace {plan.trace_name!r} (digest "
                              f"{plan.trace_digest}), not {trace.name!r} ({trace.digest()})")
    n = trace.num_ops
    if at_op is not None and not 0 <= at_op < n:
        raise InputError(f"at_op (={at_op!r}) must be an op index in [0, {n})")
    if base_address < 0 or device < 0:
        raise InputError(f"base_address (={base_address}) and device (={device}) must be >= 0")
    last_boundary = n if at_op is None else at_op
    before_trace, frees, allocs = [], {}, {}
    for r in plan_residencies(trace, plan):
        buffer = trace.buffer(r.buffer_id)
        entry = (r.offset, r.buffer_id, buffer.size)
        if buffer.kind == PERSISTENT and r.start == 0 and r.end == n:
            before_trace.append(entry)
            continue
        allocs.setdefault(r.start, []).append(entry)
        frees.setdefault(r.end, []).append(entry)
    events, resident = [], {entry[:2]: entry for entry in before_trace}
    for boundary in range(last_boundary + 1):
        for offset, buffer_id, size in sorted(frees.get(boundary, ())):
            events.append(_event("free_requested", base_address + offset, size))
            events.append(_event("free_completed", base_address + offset, size))
            del resident[(offset, buffer_id)]
        for offset, buffer_id, size in sorted(allocs.get(boundary, ())):
            events.append(_event("alloc", base_address + offset, size))
            resident[(offset, buffer_id)] = (offset, buffer_id, size)
    arena = max([plan.arena_bytes] + [o + s for entries in allocs.values()
                                      for o, _, s in entries]
                + [o + s for o, _, s in before_trace])
    blocks, cursor = [], 0
    for offset, buffer_id, size in sorted(resident.values()):
        if offset < cursor:
            when = "before the trace" if at_op is None else f"during op {at_op}"
            raise PlanFormatError(f"buffer {buffer_id} at offset {offset} overlaps the "
                                  f"buffer below it (which ends at byte {cursor}) {when}")
        if offset > cursor:
            blocks.append(_block(base_address + cursor, offset - cursor, "inactive"))
        blocks.append(_block(base_address + offset, size, "active_allocated"))
        cursor = offset + size
    if cursor < arena:
        blocks.append(_block(base_address + cursor, arena - cursor, "inactive"))
    allocated = sum(size for _, _, size in resident.values())
    segment = {"device": device, "address": base_address, "total_size": arena, "stream": 0,
               "segment_type": "large", "segment_pool_id": (0, 0),
               "allocated_size": allocated, "active_size": allocated,
               "requested_size": allocated, "frames": [], "blocks": blocks}
    device_traces = [[] for _ in range(device)] + [events]
    return {"segments": [segment], "device_traces": device_traces}


def snapshot_bytes(snapshot: dict) -> bytes:
    """The snapshot pickled the way ``torch.cuda.memory._dump_snapshot`` does (plain data)."""
    return pickle.dumps(snapshot, protocol=PICKLE_PROTOCOL)


def save_memviz(trace: Trace, plan: Plan, path: str | os.PathLike, **options) -> None:
    """Write ``plan`` as a snapshot pickle (``options``: those of :func:`plan_to_snapshot`).
    Use a plain name such as ``plan.pickle``: the viewers do not read gzip."""
    write_atomic(Path(path), snapshot_bytes(plan_to_snapshot(trace, plan, **options)))
