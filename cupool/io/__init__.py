"""Reading and writing traces and plans; formats are detected by content, not by name.

- trace v1 JSON (``.json`` / ``.json.gz``): :mod:`.trace_v1`
- MiniMalloc CSV (``id,lower,upper,size[,offset]``): :mod:`.minimalloc_csv`
- plan JSON v1 (static) and v2 (swapping: residencies and actions): :mod:`.plan_json`
- PyTorch memory snapshot pickles (read only; detected by the pickle magic ``\\x80``):
  :mod:`.torch_snapshot`; a plan exported as one: :mod:`.memviz`
- CuPy ``DebugPrintHook`` JSON lines (read only; the first line is an object whose first
  key is ``"hook"``): :mod:`.cupy_hook`

:func:`convert` turns any readable trace into trace v1 JSON or MiniMalloc CSV.

Readers raise :class:`~cupool.errors.TraceFormatError` / :class:`~cupool.errors.PlanFormatError`
naming the file, the item and the value; writers write atomically and only whole files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cupool.core.read_only import ReadOnlyStateError
from cupool.core.read_only import read_only_state as declare_read_only
from cupool.core.vocabulary import Placement, Plan, SolveStatus, Trace
from cupool.errors import InputError, PlanFormatError, TraceFormatError
from cupool.io._files import is_regular_output, read_bytes, write_atomic
from cupool.io.cupy_hook import looks_like_hook_log, parse_hook_log
from cupool.io.minimalloc_csv import csv_text, parse_csv
from cupool.io.plan_json import parse_plan, plan_json_bytes
from cupool.io.torch_snapshot import looks_like_pickle, parse_torch_snapshot
from cupool.io.trace_v1 import decode_json, parse_trace, trace_to_document

TRACE_OUTPUT_SUFFIXES = (".json", ".json.gz", ".csv")
"""What :func:`convert` writes: trace v1 JSON (gzipped for ``.gz``) or MiniMalloc CSV."""


def _trace_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".json", ".jsonl", ".csv", ".pickle", ".pkl", ".trace"):
        name = name.removesuffix(suffix)
    return name


def _looks_like_json(data: bytes) -> bool:
    return data.lstrip()[:1] in (b"{", b"[")


def load_trace_and_offsets(path: str | os.PathLike, device: int | None = None):
    """Read a trace file of any supported format: ``(trace, offsets or None)``.

    ``device`` picks the device of a PyTorch snapshot or CuPy hook log (default: the one
    with the most allocations); the other formats hold one device and ignore it.
    """
    path = Path(path)
    data = read_bytes(path)
    if not data.strip():
        raise TraceFormatError("the file is empty (empty trace)", path=str(path))
    if looks_like_pickle(data):
        return parse_torch_snapshot(data, _trace_name(path), str(path), device), None
    if looks_like_hook_log(data):
        return parse_hook_log(data.decode("utf-8", errors="replace"), _trace_name(path),
                              str(path), device), None
    if _looks_like_json(data):
        return parse_trace(decode_json(data, str(path)), str(path)), None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(
            f"neither trace v1 JSON nor MiniMalloc CSV (byte {exc.start} is not UTF-8 text)",
            path=str(path)) from None
    return parse_csv(text, _trace_name(path), str(path))


def load_trace(path: str | os.PathLike, device: int | None = None,
               read_only_state: bool = False) -> Trace:
    """Read a trace: trace v1 JSON or MiniMalloc CSV, a PyTorch memory snapshot or a CuPy
    DebugPrintHook log (any of them optionally gzipped); formats are told by content.

    ``read_only_state``: the step never writes its persistent buffers (inference), so those
    whose ``writes`` are unknown become read-only
    (:func:`cupool.core.read_only.read_only_state`); a trace whose ``writes`` say one is
    written raises :class:`~cupool.core.read_only.ReadOnlyStateError` (naming the buffer,
    the op and the file)."""
    trace = load_trace_and_offsets(path, device)[0]
    if not read_only_state:
        return trace
    try:
        return declare_read_only(trace)
    except ReadOnlyStateError as error:
        raise ReadOnlyStateError(error.detail, error.where, str(path)) from None


def convert(in_path: str | os.PathLike, out_path: str | os.PathLike,
            device: int | None = None) -> Trace:
    """Read any trace ``in_path`` (format detected by content) and write it to ``out_path``:
    MiniMalloc CSV for ``*.csv``, else trace v1 JSON (``*.json``, gzipped for ``*.json.gz``).
    Returns the trace; ``device`` as in :func:`load_trace`."""
    out_path = Path(out_path)
    if not out_path.name.endswith(TRACE_OUTPUT_SUFFIXES):
        raise InputError(f"cannot tell the output format from the name; use one of "
                         f"{', '.join(TRACE_OUTPUT_SUFFIXES)}", path=str(out_path))
    trace = load_trace(in_path, device)
    save_trace(trace, out_path)
    return trace


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


_PLAN_FORMATS = "plan JSON or a MiniMalloc CSV with an 'offset' column"


def load_plan(path: str | os.PathLike, trace: Trace | None = None) -> Plan:
    """Read a plan: plan JSON, or MiniMalloc CSV with an ``offset`` column (needs ``trace``,
    and is checked to describe the same buffers)."""
    path = Path(path)
    data = read_bytes(path)
    if not data.strip():
        raise PlanFormatError(f"the file is empty, expected {_PLAN_FORMATS}", path=str(path))
    if _looks_like_json(data):
        return parse_plan(decode_json(data, str(path), PlanFormatError), str(path))
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanFormatError(f"not a plan: byte {exc.start} is not UTF-8 text, expected "
                              f"{_PLAN_FORMATS}", path=str(path)) from None
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


__all__ = ["convert", "is_regular_output", "load_plan", "load_trace", "load_trace_and_offsets",
           "save_plan", "save_trace", "write_atomic"]
