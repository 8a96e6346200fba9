"""Trace format version 1: strict reader and writer.

The reader checks every rule of the format and raises :class:`TraceFormatError` naming
the first broken one with the buffer id (or op index) and the bad value, e.g.
``buffer 17: end (=4) must be > start (=9)``.
"""

from __future__ import annotations

import itertools
import json
import math
import sys

from cupool.core.vocabulary import (
    BUFFER_KINDS,
    PERSISTENT,
    Buffer,
    Device,
    Op,
    Recompute,
    Trace,
)
from cupool.errors import TraceFormatError

FORMAT = "cupool-trace"
VERSION = 1


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_trace(document, path: str | None = None) -> Trace:
    """Build a :class:`Trace` from a decoded trace-v1 JSON document."""

    def fail(message, where=None):
        raise TraceFormatError(message, where, path)

    if not isinstance(document, dict):
        fail(f"expected a JSON object at the top level, got {type(document).__name__}")
    if document.get("format") != FORMAT:
        fail(f"field 'format' (={document.get('format')!r}) must be {FORMAT!r}")
    version = document.get("version")
    if version != VERSION:
        fail(f"unknown trace format version (={version!r}); this cupool reads version {VERSION}")
    name = document.get("name", "")
    if not isinstance(name, str):
        fail(f"field 'name' (={name!r}) must be a string")
    source = document.get("source", "")
    if not isinstance(source, str):
        fail(f"field 'source' (={source!r}) must be a string")

    ops = _parse_ops(document.get("ops"), fail)
    device = _parse_device(document.get("device"), fail)
    raw_buffers = document.get("buffers")
    if not isinstance(raw_buffers, list):
        fail(f"field 'buffers' must be a list, got {type(raw_buffers).__name__}")
    if not raw_buffers:
        fail("the trace has no buffers (empty trace)")
    buffers = []
    seen = set()
    for index, raw in enumerate(raw_buffers):
        buffer = _parse_buffer(raw, index, len(ops), fail)
        if buffer.id in seen:
            fail(f"duplicate buffer id (={buffer.id})", f"buffer {buffer.id}")
        seen.add(buffer.id)
        buffers.append(buffer)
    for buffer in buffers:
        if buffer.recompute is not None:
            for input_id in buffer.recompute.inputs:
                if input_id not in seen:
                    fail(f"recompute input (={input_id}) is not a buffer of the trace",
                         f"buffer {buffer.id}")
    return Trace(name, tuple(ops), tuple(buffers), source, device)


def _parse_ops(raw_ops, fail) -> list[Op]:
    if not isinstance(raw_ops, list):
        fail(f"field 'ops' must be a list, got {type(raw_ops).__name__}")
    if not raw_ops:
        fail("the trace has no ops (empty trace)")
    ops = []
    for index, raw in enumerate(raw_ops):
        where = f"op {index}"
        if not isinstance(raw, dict):
            fail(f"expected an object, got {raw!r}", where)
        name = raw.get("name")
        if not isinstance(name, str):
            fail(f"'name' (={name!r}) must be a string", where)
        duration = raw.get("duration_us")
        if duration is not None and (
            not _is_number(duration) or not math.isfinite(duration) or duration < 0
        ):
            fail(f"'duration_us' (={duration!r}) must be a finite number >= 0", where)
        flops = raw.get("flops")
        if flops is not None and (not _is_int(flops) or flops < 0):
            fail(f"'flops' (={flops!r}) must be an integer >= 0", where)
        phase = raw.get("phase")
        if phase is not None and not isinstance(phase, str):
            fail(f"'phase' (={phase!r}) must be a string", where)
        ops.append(Op(name, None if duration is None else float(duration), flops, phase))
    return ops


def _parse_device(raw, fail) -> Device | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        fail(f"field 'device' (={raw!r}) must be an object with a string 'name'")
    values = {}
    for key in ("hbm_gbps", "h2d_gbps", "d2h_gbps"):
        value = raw.get(key)
        if value is not None and (not _is_number(value) or not math.isfinite(value) or value <= 0):
            fail(f"device '{key}' (={value!r}) must be a finite number > 0")
        values[key] = None if value is None else float(value)
    engines = raw.get("copy_engines")
    if engines is not None and (not _is_int(engines) or engines < 1):
        fail(f"device 'copy_engines' (={engines!r}) must be an integer >= 1")
    return Device(raw["name"], copy_engines=engines, **values)


def _parse_buffer(raw, index: int, num_ops: int, fail) -> Buffer:
    if not isinstance(raw, dict):
        fail(f"expected an object, got {raw!r}", f"buffers[{index}]")
    buffer_id = raw.get("id")
    if not _is_int(buffer_id) or buffer_id < 0:
        fail(f"'id' (={buffer_id!r}) must be an integer >= 0", f"buffers[{index}]")
    where = f"buffer {buffer_id}"
    size = raw.get("size")
    if not _is_int(size) or size <= 0:
        fail(f"size (={size!r}) must be an integer > 0 (bytes)", where)
    start, end = raw.get("start"), raw.get("end")
    if not _is_int(start) or start < 0:
        fail(f"start (={start!r}) must be an integer >= 0", where)
    if not _is_int(end):
        fail(f"end (={end!r}) must be an integer", where)
    if end <= start:
        fail(f"end (={end}) must be > start (={start})", where)
    if end > num_ops:
        fail(f"end (={end}) must be <= the number of ops (={num_ops})", where)
    uses = raw.get("uses", [])
    if not isinstance(uses, list) or not all(_is_int(u) for u in uses):
        fail(f"uses (={uses!r}) must be a list of op indices", where)
    for previous, use in itertools.pairwise(uses):
        if use <= previous:
            fail(f"uses must be strictly increasing; {use} follows {previous}", where)
    for use in uses:
        if not start <= use < end:
            fail(f"use at op {use} is outside the lifetime [{start}, {end})", where)
    kind = raw.get("kind", "temporary")
    if kind not in BUFFER_KINDS:
        fail(f"kind (={kind!r}) must be one of {', '.join(BUFFER_KINDS)}", where)
    if kind == PERSISTENT and (start != 0 or end != num_ops):
        fail(f"a persistent buffer must live [0, {num_ops}), not [{start}, {end})", where)
    name = raw.get("name", "")
    if not isinstance(name, str):
        fail(f"name (={name!r}) must be a string", where)
    recompute = None
    raw_recompute = raw.get("recompute")
    if raw_recompute is not None:
        if not isinstance(raw_recompute, dict):
            fail(f"recompute (={raw_recompute!r}) must be an object", where)
        op = raw_recompute.get("op")
        if not _is_int(op) or not 0 <= op < num_ops:
            fail(f"recompute op (={op!r}) must be an op index in [0, {num_ops})", where)
        inputs = raw_recompute.get("inputs", [])
        if not isinstance(inputs, list) or not all(_is_int(i) for i in inputs):
            fail(f"recompute inputs (={inputs!r}) must be a list of buffer ids", where)
        recompute = Recompute(op, tuple(inputs))
    writes = _parse_writes(raw, start, end, uses, kind, where, fail)
    if writes == () and kind == PERSISTENT and recompute is not None:
        fail(f"a read-only persistent buffer (writes []) cannot have a recompute recipe: "
             f"re-running op {recompute.op} would write it", where)
    return Buffer(buffer_id, size, start, end, tuple(uses), kind, name, recompute, writes)


def _parse_writes(raw, start: int, end: int, uses, kind: str, where: str,
                  fail) -> tuple[int, ...] | None:
    """The optional ``writes`` list: sorted, unique op indices inside ``[start, end)`` and
    inside ``uses`` (a temporary's ``start`` counts as a use: its producer writes it)."""
    if "writes" not in raw or raw["writes"] is None:
        return None
    writes = raw["writes"]
    if not isinstance(writes, list) or not all(_is_int(w) for w in writes):
        fail(f"writes (={writes!r}) must be a list of op indices", where)
    for previous, op in itertools.pairwise(writes):
        if op <= previous:
            fail(f"writes must be strictly increasing; {op} follows {previous}", where)
    used = set(uses)
    if kind != PERSISTENT and uses:
        used.add(start)
    for op in writes:
        if not start <= op < end:
            fail(f"write at op {op} is outside the lifetime [{start}, {end})", where)
        if op not in used:
            fail(f"write at op {op} is not one of its uses", where)
    return tuple(writes)


def trace_to_document(trace: Trace) -> dict:
    """The trace as a trace-v1 JSON document (optional fields omitted when unknown)."""
    ops = []
    for op in trace.ops:
        entry = {"name": op.name}
        if op.duration_us is not None:
            entry["duration_us"] = op.duration_us
        if op.flops is not None:
            entry["flops"] = op.flops
        if op.phase is not None:
            entry["phase"] = op.phase
        ops.append(entry)
    buffers = []
    for b in trace.buffers:
        entry = {"id": b.id, "size": b.size, "start": b.start, "end": b.end,
                 "uses": list(b.uses), "kind": b.kind, "name": b.name}
        if b.recompute is not None:
            entry["recompute"] = {"op": b.recompute.op, "inputs": list(b.recompute.inputs)}
        if b.writes is not None:
            entry["writes"] = list(b.writes)
        buffers.append(entry)
    document = {"format": FORMAT, "version": VERSION, "name": trace.name, "source": trace.source}
    if trace.device is not None:
        d = trace.device
        document["device"] = {k: v for k, v in (
            ("name", d.name), ("hbm_gbps", d.hbm_gbps), ("h2d_gbps", d.h2d_gbps),
            ("d2h_gbps", d.d2h_gbps), ("copy_engines", d.copy_engines)) if v is not None}
    document["ops"] = ops
    document["buffers"] = buffers
    return document


def decode_json(data: bytes, path: str | None, error=TraceFormatError):
    """Decode JSON bytes, turning syntax errors into ``error``. ``NaN``/``Infinity`` literals
    decode to floats so that the field checks can name the op or buffer that holds them."""
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text (byte {exc.start})", path=path) from None
    except json.JSONDecodeError as exc:
        raise error(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                    path=path) from None
    except RecursionError:
        raise error("JSON nested too deeply to read (deeper than Python's recursion limit "
                    f"of {sys.getrecursionlimit()})", path=path) from None
