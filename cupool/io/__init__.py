"""Reading and writing traces and plans; formats are detected by content, not by name.

- trace v1 JSON (``.json`` / ``.json.gz``): :mod:`.trace_v1`
- MiniMalloc CSV (``id,lower,upper,size[,offset]``): :mod:`.minimalloc_csv`
- plan JSON v1 (static) and v2 (swapping: residencies and actions): :mod:`.plan_json`

Readers raise :class:`~cupool.errors.TraceFormatError` / :class:`~cupool.errors.PlanFormatError`
naming the file, the item and the value; writers write atomically and only whole files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cupool.core.vocabulary import Placement, Plan, SolveStatus, Trace
from cupool.errors import InputError, PlanFormatError, TraceFormatError
from cupool.io._files import read_bytes, write_atomic
from cupool.io.minimalloc_csv import csv_text, parse_csv
from cupool.io.plan_json import parse_plan, plan_json_bytes
from cupool.io.trace_v1 import decode_json, parse_trace, trace_to_document


def _trace_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".json", ".csv", ".trace"):
        name = name.removesuffix(suffix)
    return name


def _looks_like_json(data: bytes) -> bool:
    return data.lstrip()[:1] in (b"{", b"[")


def load_trace_and_offsets(path: str | os.PathLike):
    """Read a trace file of any supported format: ``(trace, offsets or None)``."""
    path = Path(path)
    data = read_bytes(path)
    if not data.strip():
        raise TraceFormatError("the file is empty (empty trace)", path=str(path))
    if _looks_like_json(data):
        return parse_trace(decode_json(data, str(path)), str(path)), None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(
            f"neither trace v1 JSON nor MiniMalloc CSV (byte {exc.start} is not UTF-8 text)",
            path=str(path)) from None
    return parse_csv(text, _trace_name(path), str(path))


def load_trace(path: str | os.PathLike) -> Trace:
    """Read a trace: trace v1 JSON (optionally gzipped) or MiniMalloc CSV."""
    return load_trace_and_offsets(path)[0]


def save_trace(trace: Trace, path: str | os.PathLike) -> None:
    """Write ``trace``: MiniMalloc CSV for ``*.csv``, else trace v1 JSON (gzipped for ``.gz``)."""
    path = Path(path)
    if path.name.endswith(".csv"):
        write_atomic(path, csv_text(trace).encode())
    else:
        write_atomic(path, (json.dumps(trace_to_document(trace)) + "\n").encode())


def save_plan(plan: Plan, path: str | os.PathLike, trace: Trace | None = None) -> None:
    """Write ``plan``: plan JSON, or MiniMalloc CSV with offsets for ``*.csv`` (needs ``trace``)."""
    path = Path(path)
    if path.name.endswith(".csv"):
        if trace is None:
            raise InputError("writing a plan as CSV needs its trace", path=str(path))
        write_atomic(path, csv_text(trace, plan.offsets()).encode())
    else:
        write_atomic(path, plan_json_bytes(plan))


def load_plan(path: str | os.PathLike, trace: Trace | None = None) -> Plan:
    """Read a plan: plan JSON, or MiniMalloc CSV with an ``offset`` column (needs ``trace``,
    and is checked to describe the same buffers)."""
    path = Path(path)
    data = read_bytes(path)
    if _looks_like_json(data):
        return parse_plan(decode_json(data, str(path), PlanFormatError), str(path))
    if trace is None:
        raise PlanFormatError("a CSV plan can only be read with its trace", path=str(path))
    csv_trace, offsets = load_trace_and_offsets(path)
    if offsets is None:
        raise PlanFormatError("the CSV has no 'offset' column, so it is not a plan",
                              path=str(path))
    if csv_trace.digest() != trace.digest():
        raise PlanFormatError(f"the CSV plan's buffers differ from trace {trace.name!r}",
                              path=str(path))
    arena = max(offsets[b.id] + b.size for b in csv_trace.buffers)
    return Plan(trace.name, trace.digest(), "csv", SolveStatus.FEASIBLE, arena,
                trace.lower_bound_bytes(),
                tuple(Placement(b.id, offsets[b.id]) for b in csv_trace.buffers))


__all__ = ["load_plan", "load_trace", "load_trace_and_offsets", "save_plan", "save_trace"]
