"""MiniMalloc / TelaMalloc CSV: ``id,lower,upper,size[,offset]``, one buffer per row.

Lifetimes are half-open ``[lower, upper)`` like cupool's ``[start, end)``. Ids may be
integers (kept as buffer ids) or any other labels (``b1``, ``b2``...): then buffers are
numbered 0, 1, ... in row order and the label is kept as the buffer's ``name``, which
the writer puts back. The time axis has ``max(upper)`` anonymous ops.

An ``offset`` column makes the file a static plan: :func:`parse_csv` returns the
offsets too, and :func:`csv_text` writes them, so other tools can check our plans.
"""

from __future__ import annotations

import csv
import io

from cupool.core.vocabulary import Buffer, Op, Trace
from cupool.errors import TraceFormatError

REQUIRED = ("id", "lower", "upper", "size")
OPTIONAL = ("offset",)
SOURCE = "minimalloc-csv"


def parse_csv(text: str, name: str = "", path: str | None = None):
    """Parse CSV text into ``(trace, offsets)``; ``offsets`` is ``{id: offset}`` or ``None``."""

    def fail(message, where=None):
        raise TraceFormatError(message, where, path)

    rows = list(csv.reader(io.StringIO(text)))
    while rows and not any(cell.strip() for cell in rows[-1]):
        rows.pop()
    if not rows:
        fail("empty CSV: expected a header 'id,lower,upper,size' and one row per buffer")
    header = [cell.strip().lower() for cell in rows[0]]
    missing = [column for column in REQUIRED if column not in header]
    if missing:
        fail(f"CSV header {','.join(rows[0])!r} lacks column(s) {', '.join(missing)}; "
             f"expected {','.join(REQUIRED)}[,offset]", "line 1")
    unknown = [column for column in header if column not in REQUIRED + OPTIONAL]
    if unknown:
        fail(f"unsupported CSV column(s) {', '.join(map(repr, unknown))}; "
             f"expected {','.join(REQUIRED)}[,offset]", "line 1")
    if len(set(header)) != len(header):
        fail(f"CSV header {','.join(rows[0])!r} repeats a column", "line 1")
    if len(rows) == 1:
        fail("the CSV has a header but no buffers (empty trace)")
    column = {key: header.index(key) for key in header}

    labels, records, offsets = [], [], {}
    for line_number, row in enumerate(rows[1:], start=2):
        where = f"line {line_number}"
        if len(row) != len(header):
            fail(f"expected {len(header)} fields, got {len(row)}: {','.join(row)!r}", where)
        label = row[column["id"]].strip()
        if not label:
            fail("empty id", where)
        numbers = {}
        for key in ("lower", "upper", "size") + (("offset",) if "offset" in column else ()):
            cell = row[column[key]].strip()
            try:
                numbers[key] = int(cell)
            except ValueError:
                fail(f"buffer {label}: {key} (={cell!r}) must be an integer", where)
        lower, upper, size = numbers["lower"], numbers["upper"], numbers["size"]
        if size <= 0:
            fail(f"buffer {label}: size (={size}) must be > 0", where)
        if lower < 0:
            fail(f"buffer {label}: lower (={lower}) must be >= 0", where)
        if upper <= lower:
            fail(f"buffer {label}: upper (={upper}) must be > lower (={lower})", where)
        if numbers.get("offset", 0) < 0:
            fail(f"buffer {label}: offset (={numbers['offset']}) must be >= 0", where)
        labels.append((label, where))
        records.append((lower, upper, size, numbers.get("offset")))

    numeric = all(label.isdigit() for label, _ in labels)
    seen = {}
    buffers = []
    for index, ((label, where), (lower, upper, size, offset)) in enumerate(
            zip(labels, records, strict=True)):
        if label in seen:
            fail(f"duplicate id {label!r} (first on {seen[label]})", where)
        seen[label] = where
        buffer_id = int(label) if numeric else index
        buffers.append(Buffer(buffer_id, size, lower, upper, name=label))
        if offset is not None:
            offsets[buffer_id] = offset
    num_ops = max(b.end for b in buffers)
    ops = (Op(""),) * num_ops  # anonymous and immutable: one shared object
    trace = Trace(name, ops, tuple(buffers), SOURCE)
    return trace, (offsets if "offset" in column else None)


def csv_text(trace: Trace, offsets: dict[int, int] | None = None) -> str:
    """The trace (and, given ``offsets``, a static plan) as MiniMalloc CSV text.

    The id column carries each buffer's CSV label when the trace came from CSV with
    labels, else its numeric id.
    """
    use_names = trace.source == SOURCE and all(b.name for b in trace.buffers)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(REQUIRED + (("offset",) if offsets is not None else ()))
    for b in trace.buffers:
        row = [b.name if use_names else b.id, b.start, b.end, b.size]
        if offsets is not None:
            row.append(offsets[b.id])
        writer.writerow(row)
    return out.getvalue()
