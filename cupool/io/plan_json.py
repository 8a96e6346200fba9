"""The plan format: one JSON document per plan, versions 1 (static) and 2 (swapping).

Version 1, a static plan (every field required unless marked optional)::

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

Version 2, a swapping plan (made for a budget below the lower bound): the same fields,
except that ``capacity_bytes`` is called ``budget_bytes`` and is required, ``placements``
is optional (and empty in a valid swapping plan), and two lists are added::

    {
      "format": "cupool-plan", "version": 2, ...,
      "budget_bytes": 2000000000,             # = Plan.capacity_bytes: device bytes allowed
      "residencies": [                        # buffer `id` holds [offset, offset+size)
        {"id": 483, "start": 0, "end": 3, "offset": 0},        #   during ops [start, end)
        {"id": 483, "start": 458, "end": 461, "offset": 4096},
        {"id": 512, "start": 300, "end": 300, "offset": 0}     # ephemeral: start == end
      ],
      "actions": [
        {"kind": "swap_out", "id": 483, "after_op": 0},        # D2H after op 0 finishes
        {"kind": "swap_in", "id": 483, "trigger_op": 458, "due_op": 460},  # H2D issued at 458
        {"kind": "recompute", "id": 512, "before_op": 300}     # re-run the producer first
      ]
    }

A residency with ``start == end`` is *ephemeral*: a state a nested recompute passes
through, made among the recomputes before op ``start`` and read only by later ones
there (:mod:`cupool.check.swapping`). A swap-out of clean data says ``"drop": true``:
the host copy the buffer already has is still valid, so nothing is copied
(:class:`~cupool.core.vocabulary.SwapOut`); the writer omits the field otherwise. A
swap may say which host level holds the bytes:
``"level": "pinned"`` (the default, and what a swap without the field means) or
``"pageable"`` (multi-level placement).
The writer omits the field for pinned swaps, so files of plans without pageable swaps are
what they were before levels existed, and older files read unchanged.

The meaning of residencies and actions is defined once, in
:mod:`cupool.core.vocabulary` (:class:`~cupool.core.vocabulary.Residency`,
:class:`~cupool.core.vocabulary.SwapOut`, ...), and checked by
:mod:`cupool.check.swapping`. Actions keep their order (recomputes before the
same op run in list order).

The writer writes version 1 for static plans (so static plan files stay byte-for-byte
what they were) and version 2 for swapping plans; the reader reads both. A plan is only
ever applied to the trace whose digest it carries; the validator checks it.
"""

from __future__ import annotations

import json

from cupool.core.vocabulary import (
    HOST_LEVELS,
    PINNED,
    Placement,
    Plan,
    RecomputeAction,
    Residency,
    SolveStatus,
    SwapIn,
    SwapOut,
)
from cupool.errors import PlanFormatError

FORMAT = "cupool-plan"
VERSION = 1
"""The version written for static plans."""
SWAP_VERSION = 2
"""The version written for swapping plans (residencies and actions)."""
VERSIONS = (1, 2)

ACTION_FIELDS = {
    "swap_out": ("after_op",),
    "swap_in": ("trigger_op", "due_op"),
    "recompute": ("before_op",),
}
"""The op fields of each action ``kind`` (besides ``kind`` and ``id``)."""


def action_to_entry(action) -> dict:
    """The JSON object of one action."""
    if isinstance(action, SwapOut):
        return {"kind": "swap_out", "id": action.buffer_id, "after_op": action.after_op,
                **_level_entry(action), **({"drop": True} if action.drop else {})}
    if isinstance(action, SwapIn):
        return {"kind": "swap_in", "id": action.buffer_id, "trigger_op": action.trigger_op,
                "due_op": action.due_op, **_level_entry(action)}
    if isinstance(action, RecomputeAction):
        return {"kind": "recompute", "id": action.buffer_id, "before_op": action.before_op}
    raise TypeError(f"not a plan action: {action!r}")


def _level_entry(action) -> dict:
    """``{"level": ...}`` for a swap to a host level other than pinned memory, else ``{}``:
    files of pinned-only plans stay what they were before levels existed."""
    return {} if action.level == PINNED else {"level": action.level}


def plan_to_document(plan: Plan) -> dict:
    document = {
        "format": FORMAT,
        "version": VERSION if plan.is_static else SWAP_VERSION,
        "trace": plan.trace_name,
        "trace_digest": plan.trace_digest,
        "solver": plan.solver,
        "status": plan.status.value,
        "arena_bytes": plan.arena_bytes,
        "lower_bound_bytes": plan.lower_bound_bytes,
    }
    if plan.is_static:
        document["capacity_bytes"] = plan.capacity_bytes
    else:
        document["budget_bytes"] = plan.capacity_bytes
    document["solve_seconds"] = round(plan.solve_seconds, 6)
    document["placements"] = [{"id": p.buffer_id, "offset": p.offset} for p in plan.placements]
    if not plan.is_static:
        document["residencies"] = [{"id": r.buffer_id, "start": r.start, "end": r.end,
                                    "offset": r.offset} for r in plan.residencies]
        document["actions"] = [action_to_entry(a) for a in plan.actions]
    document["stats"] = plan.stats
    return document


def plan_json_bytes(plan: Plan) -> bytes:
    return (json.dumps(plan_to_document(plan), separators=(",", ":")) + "\n").encode()


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_plan(document, path: str | None = None) -> Plan:
    """Build a :class:`Plan` from a decoded plan document (version 1 or 2);
    :class:`PlanFormatError` names the field (or placement, residency, action) and the bad
    value."""

    def fail(message, where=None):
        raise PlanFormatError(message, where, path)

    def need_int(key, minimum=0, optional=False):
        value = document.get(key)
        if value is None and optional:
            return None
        if not _is_int(value) or value < minimum:
            fail(f"field {key!r} (={value!r}) must be an integer >= {minimum}")
        return value

    if not isinstance(document, dict):
        fail(f"expected a JSON object at the top level, got {type(document).__name__}")
    if document.get("format") != FORMAT:
        fail(f"field 'format' (={document.get('format')!r}) must be {FORMAT!r}")
    version = document.get("version")
    if not _is_int(version) or version not in VERSIONS:
        fail(f"unknown plan format version (={version!r}); "
             f"this cupool reads versions {', '.join(map(str, VERSIONS))}")
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
    if version == 1:
        capacity = need_int("capacity_bytes", 1, optional=True)
    else:
        capacity = need_int("budget_bytes", 1)
        stated = need_int("capacity_bytes", 1, optional=True)
        if stated is not None and stated != capacity:
            fail(f"field 'capacity_bytes' (={stated}) differs from 'budget_bytes' (={capacity})")
    seconds = document.get("solve_seconds", 0.0)
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds >= 0:
        fail(f"field 'solve_seconds' (={seconds!r}) must be a number >= 0")
    raw = document.get("placements", [] if version == 2 else None)
    if not isinstance(raw, list):
        fail(f"field 'placements' must be a list, got {type(raw).__name__}")
    placements = []
    for index, entry in enumerate(raw):
        if (not isinstance(entry, dict)
                or not all(_is_int(entry.get(k)) for k in ("id", "offset"))):
            fail(f"placement must be {{'id': int, 'offset': int}}, got {entry!r}",
                 f"placements[{index}]")
        if entry["offset"] < 0:
            fail(f"offset (={entry['offset']}) must be >= 0", f"buffer {entry['id']}")
        placements.append(Placement(entry["id"], entry["offset"]))
    residencies, actions = (), ()
    if version == 2:
        residencies = _parse_residencies(document.get("residencies"), fail)
        actions = _parse_actions(document.get("actions"), fail)
    stats = document.get("stats", {})
    if not isinstance(stats, dict):
        fail(f"field 'stats' (={stats!r}) must be an object")
    return Plan(document["trace"], document["trace_digest"], document["solver"], status, arena,
                lower, tuple(placements), float(seconds), capacity, stats, residencies, actions)


def _parse_residencies(raw, fail) -> tuple[Residency, ...]:
    if not isinstance(raw, list):
        fail(f"field 'residencies' must be a list, got {type(raw).__name__}")
    residencies = []
    for index, entry in enumerate(raw):
        where = f"residencies[{index}]"
        if not isinstance(entry, dict):
            fail(f"residency must be an object {{'id', 'start', 'end', 'offset'}}, got {entry!r}",
                 where)
        for key in ("id", "start", "end", "offset"):
            value = entry.get(key)
            if not _is_int(value) or value < 0:
                fail(f"field {key!r} (={value!r}) must be an integer >= 0", where)
        if entry["end"] < entry["start"]:  # end == start: an ephemeral residency
            fail(f"end (={entry['end']}) must be >= start (={entry['start']})",
                 f"{where} (buffer {entry['id']})")
        residencies.append(Residency(entry["id"], entry["start"], entry["end"], entry["offset"]))
    return tuple(residencies)


def _parse_actions(raw, fail) -> tuple:
    if not isinstance(raw, list):
        fail(f"field 'actions' must be a list, got {type(raw).__name__}")
    actions = []
    for index, entry in enumerate(raw):
        where = f"actions[{index}]"
        if not isinstance(entry, dict):
            fail(f"action must be an object with 'kind' and 'id', got {entry!r}", where)
        kind = entry.get("kind")
        if kind not in ACTION_FIELDS:
            fail(f"field 'kind' (={kind!r}) must be one of {', '.join(ACTION_FIELDS)}", where)
        for key in ("id", *ACTION_FIELDS[kind]):
            value = entry.get(key)
            if not _is_int(value) or value < 0:
                fail(f"{kind} field {key!r} (={value!r}) must be an integer >= 0", where)
        level = entry.get("level", PINNED)
        if kind != "recompute" and level not in HOST_LEVELS:
            fail(f"{kind} field 'level' (={level!r}) must be one of {', '.join(HOST_LEVELS)}",
                 where)
        drop = entry.get("drop", False)
        if kind == "swap_out":
            if not isinstance(drop, bool):
                fail(f"swap_out field 'drop' (={drop!r}) must be true or false", where)
            actions.append(SwapOut(entry["id"], entry["after_op"], level, drop))
        elif kind == "swap_in":
            if entry["due_op"] < entry["trigger_op"]:
                fail(f"swap_in of buffer {entry['id']}: due_op (={entry['due_op']}) must be "
                     f">= trigger_op (={entry['trigger_op']})", where)
            actions.append(SwapIn(entry["id"], entry["trigger_op"], entry["due_op"], level))
        else:
            actions.append(RecomputeAction(entry["id"], entry["before_op"]))
    return tuple(actions)
