"""CuPy ``DebugPrintHook`` logs (JSON lines) → trace v1.

``cupy.cuda.memory_hooks.DebugPrintHook(file=...)`` writes one JSON object per line, at
the post-processing point of each hooked call (format from the hook's source, CuPy 13)::

    {"hook":"alloc","device_id":0,"mem_size":512,"mem_ptr":150496608256}
    {"hook":"malloc","device_id":0,"size":24,"mem_size":512,"mem_ptr":150496608256,"pmem_id":"0x7f39200c5278"}
    {"hook":"free","device_id":0,"mem_size":512,"mem_ptr":150496608256,"pmem_id":"0x7f39200c5278"}

- ``malloc`` / ``free``: the *pool* handed a block to the program / got it back. These are
  the program's allocations, so they make the buffers. ``size`` is the requested size,
  ``mem_size`` the pool's rounded size (what the block occupies: the buffer's size),
  ``pmem_id`` the pooled block's ``id()`` (unique while the block is out, reused later).
- ``alloc``: the pool took memory from the device (``cudaMalloc``): that is the pool's
  cache growing, not the program's lifetime, so it is checked and skipped (like PyTorch's
  ``segment_alloc``).

Conversion, as for PyTorch snapshots (:mod:`cupool.io.torch_snapshot`): every ``malloc``
and ``free`` line is one op (named ``malloc`` / ``free``); a buffer lives from its
``malloc``'s op to its ``free``'s op (half-open), pairs matched by ``pmem_id`` (or
``mem_ptr`` when a line has no ``pmem_id``); a block never freed lives to the end; a free
without a malloc (the block was out before logging began) lives from op 0;
``uses = [start, end - 1]``. Zero-byte blocks occupy nothing and are dropped. Lines for
several devices: pick one with ``device=`` (default: the one with the most lines).

Malformed lines raise :class:`~cupool.errors.TraceFormatError` naming the line and value.
"""

from __future__ import annotations

import json
import re

from cupool.core.vocabulary import Buffer, Op, Trace
from cupool.errors import TraceFormatError
from cupool.io._files import choose_device

HOOKS = ("alloc", "malloc", "free")
FIELDS = {
    "alloc": ("device_id", "mem_size", "mem_ptr"),
    "malloc": ("device_id", "size", "mem_size", "mem_ptr"),
    "free": ("device_id", "mem_size", "mem_ptr"),
}
"""The integer fields each hook line must carry (``pmem_id``, a hex string, is optional)."""
SOURCE = "cupy DebugPrintHook log"
_FIRST_KEY_IS_HOOK = re.compile(rb'\s*\{\s*"hook"\s*:')


def looks_like_hook_log(data: bytes) -> bool:
    """True when the first non-blank line is a JSON object whose first key is ``"hook"``
    (cheap: a trace v1 document on one line is not parsed twice)."""
    for line in data.splitlines():
        if line.strip():
            return _FIRST_KEY_IS_HOOK.match(line) is not None
    return False


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_lines(text: str, fail) -> list[tuple[int, dict]]:
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            fail(f"invalid JSON at column {exc.colno}: {exc.msg}: {line[:80]!r}", where)
        if not isinstance(entry, dict):
            fail(f"expected a JSON object, got {line[:80]!r}", where)
        hook = entry.get("hook")
        if hook not in HOOKS:
            fail(f"field 'hook' (={hook!r}) must be one of {', '.join(HOOKS)}", where)
        for key in FIELDS[hook]:
            value = entry.get(key)
            if not _is_int(value) or value < 0:
                fail(f"{hook} field {key!r} (={value!r}) must be an integer >= 0", where)
        pmem_id = entry.get("pmem_id")
        if pmem_id is not None and not isinstance(pmem_id, str):
            fail(f"field 'pmem_id' (={pmem_id!r}) must be a string", where)
        records.append((number, entry))
    return records


def parse_hook_log(text: str, name: str = "cupy", path: str | None = None,
                   device: int | None = None) -> Trace:
    """DebugPrintHook JSON lines → :class:`Trace` (see the module docstring)."""

    def fail(message, where=None):
        raise TraceFormatError(message, where, path)

    lines = _parse_lines(text, fail)
    counts: dict[int, int] = {}
    for _, entry in lines:
        if entry["hook"] != "alloc":
            counts[entry["device_id"]] = counts.get(entry["device_id"], 0) + 1
    if not counts:
        fail("the log has no malloc or free lines (empty trace)")
    device = choose_device(counts, device, fail, "malloc or free lines", "some")

    ops: list[Op] = []
    spans: list[list] = []  # [start op, end op or None, size, label]
    out: dict = {}  # key -> span index, for blocks currently out of the pool
    for number, entry in lines:
        hook = entry["hook"]
        if hook == "alloc" or entry["device_id"] != device:
            continue
        key = entry.get("pmem_id") or entry["mem_ptr"]
        size = entry["mem_size"]
        op = len(ops)
        ops.append(Op(hook))
        if hook == "malloc":
            if key in out:
                fail(f"malloc of block {key!r} that is still out (malloc on line "
                     f"{spans[out[key]][3]})", f"line {number}")
            out[key] = len(spans)
            spans.append([op, None, size, number])
            continue
        if key in out:
            span = spans[out.pop(key)]
            if span[2] != size:
                fail(f"free of block {key!r} with mem_size (={size}) differs from its "
                     f"malloc's (={span[2]}, line {span[3]})", f"line {number}")
            span[1] = op
        else:  # out before logging began
            spans.append([0, max(op, 1), size, number])
    n = len(ops)
    buffers = []
    for start, end, size, number in sorted(spans, key=lambda s: s[0]):
        if size == 0:
            continue
        end = n if end is None else end
        buffers.append(Buffer(len(buffers), size, start, end, tuple(sorted({start, end - 1})),
                              name=f"line {number}"))
    if not buffers:
        fail(f"device {device} has no blocks of more than 0 bytes (empty trace)")
    return Trace(name, tuple(ops), tuple(buffers), f"{SOURCE} (device {device})")
