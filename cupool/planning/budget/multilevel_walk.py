"""Where the multi-level search (:mod:`.multilevel`) walks: the moves it tries at an op
(:func:`moves_at`, anchored by :class:`Anchors`: a swap-out after its op, a recompute and
a swap-in at the op they are for, a residency at its start), how long each op waited in a
simulation (:func:`waits`, which the link moves read) and how a listed move is applied to
the state the accepted ones left (:func:`apply_move`, by :class:`~.multilevel_moves.TierMoves`).
"""

from __future__ import annotations

import itertools
import operator
from collections import defaultdict

import numpy as np

from cupool.core.vocabulary import RecomputeAction, SwapIn, SwapOut
from cupool.planning.budget.multilevel_moves import Move, SpanRef, TierMoves
from cupool.planning.budget.multilevel_state import TierState, naming, op_times
from cupool.sim.replay_input import by_kind, int_columns


def waits(report) -> np.ndarray:
    """µs each op waited (for copies or bytes) after its dispatch, recomputes excluded."""
    times = op_times(report)
    recompute = np.zeros(len(times))
    count = len(report.recomputes)
    if count:  # summed per op in report order, as one loop would
        np.add.at(recompute, np.fromiter((r[1] for r in report.recomputes), np.int64, count),
                  np.fromiter((r[3] - r[2] for r in report.recomputes), np.float64, count))
    return np.maximum(times[:, 1] - times[:, 0] - recompute, 0.0)


def _ops_covering(report, op: int, wait_us: float) -> int:
    """How many ops before ``op`` it takes (at simulated op times) to cover ``wait_us``."""
    times = op_times(report)
    k, covered = op, 0.0
    while k > 0 and covered < wait_us:
        k -= 1
        covered += float(times[k, 2]) - float(times[k, 0])
    return op - k


def _holds(actions: list, action) -> bool:
    """``action in actions``: among the actions naming its buffer (:func:`naming`), else
    the same object looked for first (a scan that calls no ``__eq__``), then an equal one."""
    rows = naming(actions, (action.buffer_id,))
    if rows is not None:
        return any(actions[k] is action or actions[k] == action for k in rows)
    return any(map(operator.is_, actions, itertools.repeat(action))) or action in actions


class Anchors:
    """A :class:`TierState`'s actions and residencies by the op :func:`moves_at` anchors
    their moves at (a swap-out after its op, a recompute and a swap-in at the op they are
    for, a residency at its start), each list in plan order: made once per state, not
    once per op. The actions of the plan vocabulary's exact types are looked up on a
    column of their anchor ops (:meth:`at`); a plan with other types is sorted by a loop."""

    def __init__(self, state: TierState) -> None:
        self._state = state
        self._actions = list(state.actions)  # as they are now
        self._spans: dict[int, list[SpanRef]] | None = None
        self._columns: list[tuple[list, np.ndarray]] | None = None
        self._by_op: dict[int, list] | None = None
        kinds = by_kind(self._actions)  # swap-ins, swap-outs, recomputes
        if kinds is not None:
            try:
                self._columns = [(objects, int_columns(objects, (name,))[0]) for objects, name
                                 in zip(kinds, _ANCHOR_OPS, strict=True)]
            except (OverflowError, TypeError, ValueError):  # an op past 64 bits
                self._columns = None
        if self._columns is None:
            self._by_op = _by_anchor_op(self._actions)

    def at(self, op: int) -> list:
        """The actions anchored at ``op``, in plan order."""
        if self._by_op is not None:
            return self._by_op.get(op, [])
        buffers = {objects[k].buffer_id for objects, ops in self._columns
                   for k in np.flatnonzero(ops == op).tolist()}
        if not buffers:
            return []
        actions = self._actions
        rows = naming(actions, buffers)
        if rows is None:
            return _by_anchor_op(actions).get(op, [])
        return [a for a in map(actions.__getitem__, rows)
                if getattr(a, _ANCHOR_OP[type(a)]) == op]

    @property
    def spans(self) -> dict[int, list[SpanRef]]:
        """The residencies by start op, made on first use (only ops that waited read them)."""
        if self._spans is None:
            self._spans = defaultdict(list)
            for b, spans in self._state.spans.items():
                for k, span in enumerate(spans):
                    self._spans[span.start].append(SpanRef(b, k))
        return self._spans


_ANCHOR_OPS = ("due_op", "after_op", "before_op")  # of a swap-in, swap-out, recompute
_ANCHOR_OP = {SwapIn: "due_op", SwapOut: "after_op", RecomputeAction: "before_op"}


def _by_anchor_op(actions) -> dict[int, list]:
    """``actions`` by anchor op, each list in plan order (a subclass of a kind by its
    ``isinstance`` test)."""
    by_op: dict[int, list] = defaultdict(list)
    for a in actions:
        kind = type(a)  # the exact types first: a subclass takes the isinstance tests
        if kind is SwapOut:
            by_op[a.after_op].append(a)
        elif kind is SwapIn:
            by_op[a.due_op].append(a)
        elif kind is RecomputeAction:
            by_op[a.before_op].append(a)
        elif isinstance(a, SwapOut):
            by_op[a.after_op].append(a)
        elif isinstance(a, RecomputeAction):
            by_op[a.before_op].append(a)
        elif isinstance(a, SwapIn):
            by_op[a.due_op].append(a)
    return by_op


def moves_at(state: TierState, op: int, report, waited: np.ndarray, link_moves: bool,
             level_moves: bool = True, anchors: Anchors | None = None) -> list[Move]:
    """Moves anchored at ``op``; ``link_moves`` adds those that only relieve the link
    (cancel a swap, change its level): useless while nothing waits for a copy, so the
    first pass skips them then. ``anchors``: ``Anchors(state)``, when the caller keeps
    one."""
    anchors = anchors or Anchors(state)
    out = []
    for a in anchors.at(op):
        if isinstance(a, SwapOut):
            if link_moves:
                out.append(Move("cancel_swap", a))
                if level_moves:
                    out.append(Move("level", a))
                out.append(Move("swap_to_recompute", a))
        elif isinstance(a, RecomputeAction):
            out.append(Move("cancel_recompute", a))
            out.append(Move("recompute_to_swap", a))
        elif waited[op] > 0:
            out.append(Move("earlier_trigger", a))
    if waited[op] > 0:
        for ref in anchors.spans.get(op, ()):
            out.append(Move("reoffset", ref))
            out.append(Move("overwrite", ref))
    return out


def apply_move(moves: TierMoves, state: TierState, move: Move, report,
               waited: np.ndarray) -> TierState | None:
    """The state after ``move``, or ``None`` when it does not apply. Moves are listed for
    the state at the start of an op's turn and tried in turn, each against the state
    the accepted ones left: a move whose action is gone, or whose residency index no
    longer exists, does not apply."""
    kind, subject = move.kind, move.subject
    if kind in ("reoffset", "overwrite"):
        if subject.index >= len(state.spans.get(subject.buffer_id, ())):
            return None
        return moves.reoffset(state, subject, overwrite=kind == "overwrite")
    if not _holds(state.actions, subject):
        return None
    if kind == "cancel_swap":
        return moves.cancel_swap(state, subject)
    if kind == "level":
        return moves.flip_level(state, subject)
    if kind == "swap_to_recompute":
        return moves.swap_to_recompute(state, subject)
    if kind == "cancel_recompute":
        return moves.cancel_recompute(state, subject)
    if kind == "recompute_to_swap":
        return moves.recompute_to_swap(state, subject, report)
    return moves.earlier_trigger(state, subject,
                                 _ops_covering(report, subject.due_op, waited[subject.due_op]))
