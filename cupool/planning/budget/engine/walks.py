"""The walk over a recipe's inputs that :meth:`~.state.PlanState.chain` caches
(:meth:`~.state.PlanState._chain_walk`): which inputs of a buffer's recipe must be
re-made (recursively) or brought back earlier for it to be recomputed just before an op.

It reads only where the inputs are resident at that op. Two paths give the same answer:
the C extension ``_chainwalk`` (the trace's recipes, lifetimes and base intervals in flat
arrays, :func:`walk_tables`, made once per trace; an input with holes is asked of
:func:`hole_status`) and the pure-Python :func:`walk_python`, used where the extension
is not built or the trace's buffer ids are not ``0 .. n - 1``.
tests/planning/test_chain_walk.py compares the two.
"""

from __future__ import annotations

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Trace
from cupool.planning.budget.engine.schedule import RECOMPUTE, SWAP, trace_index

try:
    from cupool.planning.budget.engine import _chainwalk
except ImportError:  # no C compiler at install: the Python walk
    _chainwalk = None

COMPILED_AVAILABLE = _chainwalk is not None
"""Whether the C extension ``_chainwalk`` is built."""

RESIDENT, AWAY, IN_SWAP, IN_RECOMPUTE, IN_OTHER = range(5)
"""Where an input is at an op (:func:`hole_status`): resident; off the device with no
hole there (outside its base interval, or across the boundary); in a swap hole, a
recompute hole, or a hole of another kind."""

_KIND_CODES = {SWAP: IN_SWAP, RECOMPUTE: IN_RECOMPUTE}

_TABLES_KEY = "chain walk tables"  # under TraceIndex.derived


def walk_tables(trace: Trace):
    """The compiled walk's arrays of ``trace`` (``_chainwalk.Tables``), made once per trace;
    ``None`` where the extension is not built or the buffer ids are not ``0 .. n - 1``."""
    if _chainwalk is None:
        return None
    index = trace_index(trace)
    derived = index.derived
    if _TABLES_KEY not in derived:
        derived[_TABLES_KEY] = _make_tables(index)
    return derived[_TABLES_KEY]


def _make_tables(index):
    count = len(index.by_id)
    if sorted(index.by_id) != list(range(count)):
        return None
    recipe_op = np.full(count, -1, dtype=np.int64)
    input_start = np.zeros(count + 1, dtype=np.int64)
    inputs: list[int] = []
    for b in range(count):
        recipe = index.recipes.get(b)
        if recipe is not None:
            recipe_op[b] = recipe[0]
            inputs.extend(recipe[1])
        input_start[b + 1] = len(inputs)
    buffers = [index.by_id[b] for b in range(count)]
    bases = [index.base[b] for b in range(count)]
    return _chainwalk.Tables(
        recipe_op, input_start, np.array(inputs, dtype=np.int64),
        np.array([b.kind == PERSISTENT for b in buffers], dtype=np.int64),
        np.array([b.start for b in buffers], dtype=np.int64),
        np.array([b.end for b in buffers], dtype=np.int64),
        np.array([s for s, _e in bases], dtype=np.int64),
        np.array([e for _s, e in bases], dtype=np.int64))


def hole_status(state, buffer_id: int, op: int) -> int:
    """Where a buffer with holes is at ``op`` (:data:`RESIDENT` ... :data:`IN_OTHER`), as
    :meth:`~.state.PlanState.resident` and :meth:`~.state.PlanState.hole_kind` see it."""
    index = state._holes_of(buffer_id)
    hole = index.at(op)
    if hole is not None:
        return _KIND_CODES.get(hole.kind, IN_OTHER)
    wrap = index.wrap
    if wrap is not None:
        away = op >= wrap.start or op < wrap.end
    else:
        start, end = state.base[buffer_id]
        away = not start <= op < end
    return AWAY if away else RESIDENT


def walk(state, tables, buffer_id: int, op: int) -> tuple:
    """``(swapped, cost_us, links, read)`` of the walk at ``op`` (:func:`walk_python`),
    compiled when ``tables`` (:func:`walk_tables`) is given."""
    if tables is not None:
        return tables.walk(state._op_us, state.transient, state.holes, state._hole_index,
                           hole_status, state, buffer_id, op, state.max_chain)
    return walk_python(state, buffer_id, op)


def walk_python(state, buffer_id: int, op: int) -> tuple:
    """The walk over the inputs of ``buffer_id``'s recipe at ``op``: the swapped-out inputs
    to bring back earlier (in the order met), the µs of the recompute with every input
    re-made (``None``: some input cannot be re-made there), the links (``(buffer, depth)``,
    deeper first), and every buffer whose residency it read (in the order first read)."""
    links: list[tuple[int, int]] = []
    swapped: list[int] = []
    read: dict[int, None] = {}
    cost = _chain_cost(state, buffer_id, op, 0, set(), links, swapped, read)
    return tuple(swapped), cost, tuple(links), tuple(read)


def _chain_cost(state, buffer_id: int, op: int, depth: int, seen: set[int],
                links: list[tuple[int, int]], swapped: list[int],
                read: dict[int, None]) -> float | None:
    """µs of the walk for ``buffer_id`` at ``depth``, ``None`` when an input cannot be
    re-made there; its links and the swapped-out inputs to bring back earlier are appended
    to the caller's lists (deeper links first, swapped inputs in the order met), and every
    buffer whose residency it reads is added to ``read``. A swapped input counts as brought
    back: whether its swap-in can move is :meth:`~.state.PlanState.chain`'s question."""
    recipe = state._recipes.get(buffer_id)
    if recipe is None or depth > state.max_chain:
        return None
    recipe_op, inputs = recipe
    cost = state._op_us[recipe_op]
    holes, transient, base = state.holes, state.transient, state.base
    for x in inputs:
        read[x] = None
        if x in seen:
            continue
        # is x resident at ``op`` (:meth:`resident`), and else the kind of its hole
        # there (:meth:`hole_kind`)
        ops = transient.get(x)
        if ops and op in ops:
            continue
        if holes.get(x):
            status = hole_status(state, x, op)
            if status == RESIDENT:
                continue
        else:  # no hole: resident over its base interval
            start, end = base[x]
            if start <= op < end:
                continue
            status = AWAY
        buf = state.by_id[x]
        if buf.kind != PERSISTENT and status == IN_SWAP:
            # swapped out: bring it back by ``op`` instead (an earlier swap-in)
            seen.add(x)
            swapped.append(x)
            continue
        # a dropped input is re-produced inside a recompute hole of its lifetime (a
        # transient residency before a swap-in would break the swap), or after its
        # lifetime ended (a rematerialization of an intermediate the program freed)
        if buf.kind == PERSISTENT or op < buf.start:
            return None
        if op < buf.end and (status not in (IN_RECOMPUTE, AWAY) or op < base[x].start):
            return None
        sub = _chain_cost(state, x, op, depth + 1, seen, links, swapped, read)
        if sub is None:
            return None
        seen.add(x)
        cost += sub
        links.append((x, depth + 1))
    return cost
