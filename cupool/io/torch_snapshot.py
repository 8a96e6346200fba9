"""PyTorch CUDA memory snapshots (``torch.cuda.memory._dump_snapshot`` pickles) → trace v1.

A snapshot is plain data (dicts, lists, tuples, str, int, float), so it is loaded with an
unpickler that refuses every global: a pickle naming any class or function (``os.system``,
``torch.Tensor``...) is rejected with :class:`~cupool.errors.TraceFormatError` before
anything runs.

Layouts read (field names from ``torch/cuda/memory.py``, ``_snapshot`` docstring, and the
readers in ``torch/cuda/_memory_viz.py`` and ``torch/utils/viz/MemoryViz.js``)::

    # torch >= 2.0: a dict
    {"segments": [Segment], "device_traces": [[TraceEntry] per device]}
    # torch 1.x (``memory_snapshot()``): only the list of segments
    [Segment]

    Segment = {"device": int (absent in old layouts: device 0), "address": int,
               "total_size": int, "stream": int, "segment_type": "small" | "large",
               "allocated_size": int, "active_size": int, "blocks": [Block]}
    Block   = {"size": int, "requested_size": int, "state": "active_allocated"
               | "active_awaiting_free" | "active_pending_free" (older name) | "inactive",
               "address": int (absent in old layouts: the segment's address plus the
               sizes of the blocks before it), "frames": [...],
               "history": [...] (old layouts)}
    TraceEntry = {"action": "alloc" | "free_requested" | "free_completed"
                  | "segment_alloc" | "segment_free" | "segment_map" | "segment_unmap"
                  | "snapshot" | "oom" | "annotate",
                  "addr": int (not for oom), "size": int, "stream": int,
                  "frames": [...], "time_us": int (new), "compile_context": str (new),
                  "device_free": int (oom only)}

Conversion (one device; :func:`snapshot_to_trace`)::

    entry:  alloc A   alloc B   free_requested A   free_completed A   alloc C   (snapshot)
    op:     0         1         -                  2                  3
    A:      [=====================================)                            start 0, end 2
    B:                [==========================================================)  end 4 = n
    C:                                                                [=====)  start 3, end 4

- **Time** is the index of the allocation events: every ``alloc`` and ``free_completed``
  entry is one op, named after its action; a ``free_requested`` is an op only when no
  ``free_completed`` of that block follows (the snapshot ended while the free waited
  for its stream). ``segment_*``, ``snapshot``, ``oom`` and ``annotate`` entries say how
  the caching allocator got memory from CUDA, not what the program used: they are checked
  and skipped.
- **A buffer per block**: ``alloc`` opens it (``size`` = the entry's size, the allocator's
  rounded block size); its ``free_completed`` (else its ``free_requested``) closes it:
  ``[alloc op, free op)``. A block still allocated at the end lives to the end. A block
  freed but never allocated in the trace (allocated before recording began) lives from
  op 0 (to at least op 1). A block that ``segments`` shows allocated (``active_*`` state)
  and that the trace never touched is a *persistent* buffer ``[0, n)`` (weights and other
  state made before recording); without any trace the snapshot is one op, ``snapshot``.
- **Uses** are unknown in a snapshot: ``uses = [start, end - 1]`` (the lifetime's ends).
- **Devices**: one trace per device. ``device=None`` picks the device with the most
  allocation events plus allocated blocks (the lowest index on a tie); naming a device
  without any raises an error listing those that have some.

Every malformed entry raises :class:`TraceFormatError` naming the entry
(``device_traces[0][17]``, ``segments[2].blocks[5]``) and quoting the bad value.
"""

from __future__ import annotations

import io
import pickle

from cupool.core.vocabulary import PERSISTENT, TEMPORARY, Buffer, Op, Trace
from cupool.errors import TraceFormatError
from cupool.io._files import choose_device

PICKLE_PROTOCOLS = range(2, 6)
"""Pickle protocols that start with the ``\\x80 <protocol>`` magic (torch writes 4 or 5)."""

ALLOCATION_ACTIONS = ("alloc", "free_requested", "free_completed")
OTHER_ACTIONS = ("segment_alloc", "segment_free", "segment_map", "segment_unmap", "snapshot",
                 "oom", "annotate")
ACTIONS = ALLOCATION_ACTIONS + OTHER_ACTIONS
ACTIVE_STATES = ("active_allocated", "active_awaiting_free", "active_pending_free")
BLOCK_STATES = (*ACTIVE_STATES, "inactive")
SOURCE = "pytorch memory snapshot"


def looks_like_pickle(data: bytes) -> bool:
    """True when ``data`` starts with the magic of pickle protocol 2 to 5."""
    return len(data) >= 2 and data[0] == 0x80 and data[1] in PICKLE_PROTOCOLS


class _PlainDataUnpickler(pickle.Unpickler):
    """An unpickler for plain data: every global (class, function) is refused."""

    def find_class(self, module, name):
        raise TraceFormatError(
            f"the pickle refers to the global {module}.{name}; a memory snapshot is plain "
            f"data, so no global is loaded (nothing was run)")


def load_snapshot(data: bytes, path: str | None = None):
    """Unpickle snapshot bytes without loading any global; truncated or corrupt pickles
    raise :class:`TraceFormatError`."""
    try:
        return _PlainDataUnpickler(io.BytesIO(data)).load()
    except TraceFormatError as exc:
        raise TraceFormatError(exc.detail, exc.where, path) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, OverflowError, MemoryError, RecursionError) as exc:
        raise TraceFormatError(f"not a readable pickle ({type(exc).__name__}: {exc})",
                               path=path) from None


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _need_int(entry: dict, key: str, where: str, fail, minimum: int = 0) -> int:
    value = entry.get(key)
    if not _is_int(value) or value < minimum:
        fail(f"field {key!r} (={value!r}) must be an integer >= {minimum}", where)
    return value


def _active_blocks(segments, fail) -> dict[int, dict[int, tuple[int, str]]]:
    """``{device: {address: (size, where)}}`` of the allocated blocks of ``segments``."""
    if not isinstance(segments, list):
        fail(f"field 'segments' must be a list, got {type(segments).__name__}")
    active: dict[int, dict[int, tuple[int, str]]] = {}
    for s, segment in enumerate(segments):
        where = f"segments[{s}]"
        if not isinstance(segment, dict):
            fail(f"expected a segment dict, got {segment!r}", where)
        device = segment.get("device", 0)
        if not _is_int(device) or device < 0:
            fail(f"field 'device' (={device!r}) must be an integer >= 0", where)
        address = _need_int(segment, "address", where, fail)
        blocks = segment.get("blocks")
        if not isinstance(blocks, list):
            fail(f"field 'blocks' (={blocks!r}) must be a list", where)
        for b, block in enumerate(blocks):
            block_where = f"{where}.blocks[{b}]"
            if not isinstance(block, dict):
                fail(f"expected a block dict, got {block!r}", block_where)
            size = _need_int(block, "size", block_where, fail)
            state = block.get("state")
            if state not in BLOCK_STATES:
                fail(f"field 'state' (={state!r}) must be one of {', '.join(BLOCK_STATES)}",
                     block_where)
            block_address = block.get("address", address)
            if not _is_int(block_address) or block_address < 0:
                fail(f"field 'address' (={block_address!r}) must be an integer >= 0",
                     block_where)
            if state in ACTIVE_STATES and size > 0:
                active.setdefault(device, {})[block_address] = (size, block_where)
            address = block_address + size
    return active


def _split(document, fail):
    """``(segments, device_traces)`` of either layout."""
    if isinstance(document, list):
        return document, []
    if not isinstance(document, dict):
        fail(f"expected a snapshot dict or a list of segments, got {type(document).__name__}")
    if "segments" not in document:
        fail(f"the snapshot has no 'segments' (keys: {', '.join(map(repr, document))})")
    traces = document.get("device_traces", [])
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        fail("field 'device_traces' must be a list of per-device lists of trace entries")
    return document["segments"], traces


def _check_entries(entries: list, device: int, fail) -> int:
    """Validate one device's trace entries; the number of allocation events."""
    count = 0
    for i, entry in enumerate(entries):
        where = f"device_traces[{device}][{i}]"
        if not isinstance(entry, dict):
            fail(f"expected a trace entry dict, got {entry!r}", where)
        action = entry.get("action")
        if action not in ACTIONS:
            fail(f"field 'action' (={action!r}) must be one of {', '.join(ACTIONS)}", where)
        if action in ALLOCATION_ACTIONS:
            _need_int(entry, "addr", where, fail)
            _need_int(entry, "size", where, fail)
            count += 1
    return count


def snapshot_to_trace(document, name: str = "snapshot", path: str | None = None,
                      device: int | None = None) -> Trace:
    """The trace v1 :class:`Trace` of one device of an unpickled snapshot (either layout)."""

    def fail(message, where=None):
        raise TraceFormatError(message, where, path)

    segments, device_traces = _split(document, fail)
    active = _active_blocks(segments, fail)
    weights: dict[int, int] = {}
    for index, entries in enumerate(device_traces):
        events = _check_entries(entries, index, fail)
        if events:
            weights[index] = events
    for index, blocks in active.items():
        weights[index] = weights.get(index, 0) + len(blocks)
    if not weights:
        fail("the snapshot has no allocations on any device (empty trace)")
    device = choose_device(weights, device, fail, "allocations in the snapshot",
                           "allocations")
    entries = device_traces[device] if device < len(device_traces) else []
    return _device_trace(entries, active.get(device, {}), device, name, fail)


def _device_trace(entries: list, active: dict, device: int, name: str, fail) -> Trace:
    # Pass 1: match allocs with frees, in entry indices. A record is
    # [size, alloc entry or None (before the trace), closing entry or None (live at end), label].
    records: list[list] = []
    live: dict[int, int] = {}  # addr -> record, allocated
    pending: dict[int, int] = {}  # addr -> record, free requested, not completed
    for i, entry in enumerate(entries):
        action = entry["action"]
        if action not in ALLOCATION_ACTIONS:
            continue
        where = f"device_traces[{device}][{i}]"
        addr, size = entry["addr"], entry["size"]
        if action == "alloc":
            if addr in live or addr in pending:
                other = records[live.get(addr, pending.get(addr))][1]
                fail(f"alloc at addr (={addr:#x}) that is still allocated "
                     f"(by entry {other})", where)
            live[addr] = len(records)
            records.append([size, i, None, f"alloc #{i} at {addr:#x}"])
            continue
        if addr in pending:
            record = pending.pop(addr)
            if action == "free_requested":
                fail(f"second free_requested of addr (={addr:#x}) (first: entry "
                     f"{records[record][2]})", where)
        elif addr in live:
            record = live.pop(addr)
        else:  # allocated before recording began
            record = len(records)
            records.append([size, None, None, f"block at {addr:#x} (allocated before the trace)"])
        if records[record][0] != size:
            fail(f"{action} of addr (={addr:#x}) with size (={size}) differs from the "
                 f"allocated size (={records[record][0]})", where)
        records[record][2] = i
        if action == "free_requested":
            pending[addr] = record
    # Pass 2: ops are allocs, free_completed, and free_requested left pending at the end.
    unmatched = {records[r][2] for r in pending.values()}
    op_of: dict[int, int] = {}
    ops: list[Op] = []
    for i, entry in enumerate(entries):
        action = entry["action"]
        if action in ("alloc", "free_completed") or (action == "free_requested"
                                                     and i in unmatched):
            op_of[i] = len(ops)
            ops.append(Op(action))
    persistent = [(addr, size) for addr, (size, _) in sorted(active.items())
                  if addr not in live and addr not in pending]
    if not ops:
        ops.append(Op("snapshot"))
    n = len(ops)
    spans = []
    for size, opened, closed, label in records:
        start = 0 if opened is None else op_of[opened]
        end = n if closed is None else max(op_of[closed], start + 1)
        spans.append((start, end, size, TEMPORARY, label))
    spans.sort(key=lambda s: s[0])  # stable: creation order within an op
    spans += [(0, n, size, PERSISTENT, f"block at {addr:#x} (allocated before the trace)")
              for addr, size in persistent]
    buffers = tuple(Buffer(k, size, start, end, tuple(sorted({start, end - 1})), kind, label)
                    for k, (start, end, size, kind, label) in enumerate(
                        s for s in spans if s[2] > 0))
    if not buffers:
        fail(f"device {device} has no allocations of more than 0 bytes (empty trace)")
    return Trace(name, tuple(ops), buffers, f"{SOURCE} (device {device})")


def parse_torch_snapshot(data: bytes, name: str = "snapshot", path: str | None = None,
                         device: int | None = None) -> Trace:
    """Pickled snapshot bytes → :class:`Trace` (see the module docstring)."""
    return snapshot_to_trace(load_snapshot(data, path), name, path, device)
