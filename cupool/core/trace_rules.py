"""The trace format's rules, checked on a :class:`~cupool.core.vocabulary.Trace` built in
Python.

The readers (:mod:`cupool.io.trace_v1`, the MiniMalloc CSV reader) refuse a document that
breaks a rule, but a trace built from :class:`Op` and :class:`Buffer` directly meets no
reader: a use past the last op or a buffer ending after it would otherwise surface as an
``IndexError`` deep inside a planner. :func:`check_trace_format` raises the same
:class:`~cupool.errors.TraceFormatError` the reader would, naming the op or buffer and the
bad value. It reads every field once: linear in ops, buffers and uses.
"""

from __future__ import annotations

import math
from itertools import pairwise
from numbers import Integral

from cupool.core.vocabulary import BUFFER_KINDS, PERSISTENT, Trace
from cupool.errors import TraceFormatError

MAX_TOTAL_BYTES = (1 << 62) - 1
"""The most bytes a trace's buffers may add up to: any sum of live sizes, any offset and any
offset plus a size then stays below ``2**63`` (numpy's int64 columns would wrap past it)."""


def check_trace_format(trace: Trace) -> None:
    """Raise :class:`TraceFormatError` when ``trace`` breaks a rule of the trace format."""
    num_ops = trace.num_ops
    if num_ops == 0:
        raise TraceFormatError("the trace has no ops (empty trace)")
    if not trace.buffers:
        raise TraceFormatError("the trace has no buffers (empty trace)")
    for index, op in enumerate(trace.ops):
        duration = op.duration_us
        if duration is not None and not (math.isfinite(duration) and duration >= 0):
            raise TraceFormatError(f"'duration_us' (={duration!r}) must be a finite number >= 0",
                                   f"op {index}")
    seen: set[int] = set()
    for b in trace.buffers:
        _check_buffer(b, num_ops)
        if b.id in seen:
            raise TraceFormatError(f"duplicate buffer id (={b.id})", f"buffer {b.id}")
        seen.add(b.id)
    total = sum(b.size for b in trace.buffers)
    if total > MAX_TOTAL_BYTES:
        raise TraceFormatError(f"the buffers' sizes add up to {total} bytes, more than "
                               f"{MAX_TOTAL_BYTES} (2**62 - 1): planners add sizes and "
                               f"offsets in 64-bit integers")
    for b in trace.buffers:
        if b.recompute is not None:
            for input_id in b.recompute.inputs:
                if input_id not in seen:
                    raise TraceFormatError(
                        f"recompute input (={input_id}) is not a buffer of the trace",
                        f"buffer {b.id}")


def _check_buffer(b, num_ops: int) -> None:
    where = f"buffer {b.id}"
    if isinstance(b.id, bool) or not isinstance(b.id, Integral) or b.id < 0:
        raise TraceFormatError(f"'id' (={b.id!r}) must be an integer >= 0", where)
    size = b.size
    if isinstance(size, bool) or not isinstance(size, Integral) or size <= 0:
        raise TraceFormatError(f"size (={size!r}) must be an integer > 0 (bytes)", where)
    start, end = b.start, b.end
    if not 0 <= start < end <= num_ops:
        raise TraceFormatError(f"lifetime [{start}, {end}) must satisfy 0 <= start < end <= "
                               f"the number of ops (={num_ops})", where)
    for previous, use in pairwise(b.uses):
        if use <= previous:
            raise TraceFormatError(f"uses must be strictly increasing; {use} follows {previous}",
                                   where)
    if b.uses and not (start <= b.uses[0] and b.uses[-1] < end):
        outside = next(u for u in b.uses if not start <= u < end)
        raise TraceFormatError(f"use at op {outside} is outside the lifetime [{start}, {end})",
                               where)
    if b.kind not in BUFFER_KINDS:
        raise TraceFormatError(f"kind (={b.kind!r}) must be one of {', '.join(BUFFER_KINDS)}",
                               where)
    if b.kind == PERSISTENT and (start != 0 or end != num_ops):
        raise TraceFormatError(f"a persistent buffer must live [0, {num_ops}), "
                               f"not [{start}, {end})", where)
    if b.writes is not None:
        for previous, op in pairwise(b.writes):
            if op <= previous:
                raise TraceFormatError(
                    f"writes must be strictly increasing; {op} follows {previous}", where)
        used = set(b.uses)
        for op in b.writes:
            if op not in used:
                raise TraceFormatError(f"write at op {op} is not one of its uses", where)
    recipe = b.recompute
    if recipe is not None:
        if not 0 <= recipe.op < num_ops:
            raise TraceFormatError(
                f"recompute op (={recipe.op!r}) must be an op index in [0, {num_ops})", where)
        if b.read_only:
            raise TraceFormatError(f"a read-only persistent buffer (writes []) cannot have a "
                                   f"recompute recipe: re-running op {recipe.op} would write it",
                                   where)
