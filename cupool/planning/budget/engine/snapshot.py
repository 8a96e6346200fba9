"""An independent copy of a :class:`~.state.PlanState`: the same answers to every question,
and decisions applied to the copy leave the original as it was.

A planner that reaches the same state twice (two variants of :mod:`..boundary` whose
persistent swaps are the same) copies the state the first one planned instead of planning
it again. The copy shares what every state of a trace shares read-only (the trace, the cost
model, the trace's index: base intervals, buffers, sizes, recipes; the op durations) and
copies what decisions change, down to immutable leaves (gaps, holes and copies are
immutable tuples; their containers are copied), and starts its caches (chain walks, hole
indices) empty. An attribute this module does not know is deep-copied: slower, never
shared by mistake.
"""

from __future__ import annotations

import copy

import numpy as np

from cupool.planning.budget.engine import copies
from cupool.planning.budget.engine.schedule import Schedule
from cupool.planning.budget.engine.state import PlanState

SHARED = frozenset({"trace", "cost", "base", "by_id", "sizes", "_recipes", "durations",
                    "_op_us", "_walk_tables", "late_trigger", "lazy_release", "budget",
                    "max_chain", "n", "recompute_us"})
"""Attributes read only (or immutable) in every state of a trace: the copy shares them."""

_FLAT = frozenset({"_copy_times", "h2d_copies", "taken", "_starts_list", "_over"})
"""Containers of immutable values (or ``None``): copied one level deep."""

_OF_CONTAINERS = frozenset({"holes", "transient", "pinned", "_pin_ops"})
"""Dicts of containers of immutable values: the dict and each container copied."""

_CACHES = frozenset({"_walks", "_walks_reading", "_hole_index"})
"""The chain walks cached by (buffer, op), their keys by buffer read, and each buffer's
:class:`~.records.HoleIndex`: the copy starts them empty. Each is a function of the holes
and residencies the copy does copy, made again when asked, so the copy answers as the
original does; copying the thousands a greedy caches took most of a copy's time."""


def copy_state(state: PlanState) -> PlanState:
    """An independent copy of ``state`` (module docstring)."""
    new = object.__new__(type(state))
    for name, value in vars(state).items():
        if name in SHARED or value is None:
            copied = value
        elif name in _CACHES:
            copied = {}
        elif isinstance(value, np.ndarray) or name in _FLAT:  # an array, list, dict, set
            copied = value.copy()
        elif name in _OF_CONTAINERS:  # of lists, dicts or sets
            copied = {key: inner.copy() for key, inner in value.items()}
        elif name == "schedule" and type(value) is Schedule:
            copied = Schedule({b: list(gaps) for b, gaps in value.gaps.items()},
                              list(value.chains))
        elif copies.COMPILED_AVAILABLE and type(value) is copies.CompiledCopyEngine:
            copied = copy.copy(value)  # a new queue made from the old one's state
        else:  # Python's copy queues, and whatever a later version adds
            copied = copy.deepcopy(value)
        setattr(new, name, copied)
    return new
