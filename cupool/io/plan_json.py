"""The plan format, version 1: a static plan as one JSON document.

Schema (every field required unless marked optional)::

    {
      "format": "cupool-plan",
      "version": 1,
      "trace": "resnet50_train_b32_fp32",     # the trace's name (for people)
      "trace_digest": "3f0c9a1be2d47a10",     # Trace.digest(): ids, sizes, lifetimes, op count
      "solver": "auto",
      "status": "optimal",                    # a SolveStatus value
      "arena_bytes": 2987610000,              # max(offset + size)
      "lower_bound_bytes": 2987610000,        # max live bytes at one op
      "capacity_bytes": null,                 # optional: the capacity it was solved for
      "solve_seconds": 0.41,                  # optional
      "placements": [{"id": 483, "offset": 0}, ...],   # one per buffer
      "stats": {}                             # optional: solver statistics (plain values)
    }

A plan is only ever applied to the trace whose digest it carries; the validator checks it.
"""

from __future__ import annotations

import json

from cupool.core.vocabulary import Placement, Plan, SolveStatus
from cupool.errors import PlanFormatError

FORMAT = "cupool-plan"
VERSION = 1


def plan_to_document(plan: Plan) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        "trace": plan.trace_name,
        "trace_digest": plan.trace_digest,
        "solver": plan.solver,
        "status": plan.status.value,
        "arena_bytes": plan.arena_bytes,
        "lower_bound_bytes": plan.lower_bound_bytes,
        "capacity_bytes": plan.capacity_bytes,
        "solve_seconds": round(plan.solve_seconds, 6),
        "placements": [{"id": p.buffer_id, "offset": p.offset} for p in plan.placements],
        "stats": plan.stats,
    }


def plan_json_bytes(plan: Plan) -> bytes:
    return (json.dumps(plan_to_document(plan), separators=(",", ":")) + "\n").encode()


def parse_plan(document, path: str | None = None) -> Plan:
    """Build a :class:`Plan` from a decoded plan document; :class:`PlanFormatError` names
    the field (or placement) and the bad value."""

    def fail(message, where=None):
        raise PlanFormatError(message, where, path)

    def need_int(key, minimum=0, optional=False):
        value = document.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            fail(f"field {key!r} (={value!r}) must be an integer >= {minimum}")
        return value

    if not isinstance(document, dict):
        fail(f"expected a JSON object at the top level, got {type(document).__name__}")
    if document.get("format") != FORMAT:
        fail(f"field 'format' (={document.get('format')!r}) must be {FORMAT!r}")
    if document.get("version") != VERSION:
        fail(f"unknown plan format version (={document.get('version')!r}); "
             f"this cupool reads version {VERSION}")
    for key in ("trace", "trace_digest", "solver"):
        if not isinstance(document.get(key), str):
            fail(f"field {key!r} (={document.get(key)!r}) must be a string")
    try:
        status = SolveStatus(document.get("status"))
    except ValueError:
        fail(f"field 'status' (={document.get('status')!r}) must be one of "
             f"{', '.join(s.value for s in SolveStatus)}")
    arena = need_int("arena_bytes")
    lower = need_int("lower_bound_bytes")
    capacity = need_int("capacity_bytes", 1, optional=True)
    seconds = document.get("solve_seconds", 0.0)
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds >= 0:
        fail(f"field 'solve_seconds' (={seconds!r}) must be a number >= 0")
    raw = document.get("placements")
    if not isinstance(raw, list):
        fail(f"field 'placements' must be a list, got {type(raw).__name__}")
    placements = []
    for index, entry in enumerate(raw):
        if (not isinstance(entry, dict)
                or not all(isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool)
                           for k in ("id", "offset"))):
            fail(f"placement must be {{'id': int, 'offset': int}}, got {entry!r}",
                 f"placements[{index}]")
        if entry["offset"] < 0:
            fail(f"offset (={entry['offset']}) must be >= 0", f"buffer {entry['id']}")
        placements.append(Placement(entry["id"], entry["offset"]))
    stats = document.get("stats", {})
    if not isinstance(stats, dict):
        fail(f"field 'stats' (={stats!r}) must be an object")
    return Plan(document["trace"], document["trace_digest"], document["solver"], status, arena,
                lower, tuple(placements), float(seconds), capacity, stats)
