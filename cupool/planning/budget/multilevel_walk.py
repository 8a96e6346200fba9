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
    once per op."""

    def __init__(self, state: TierState) -> None:
        self.actions: dict[int, list] = defaultdict(list)
        for a in state.actions:
            kind = type(a)  # the exact types first: a subclass takes the isinstance tests
            if kind is SwapOut:
                self.actions[a.after_op].append(a)
            elif kind is SwapIn:
                self.actions[a.due_op].append(a)
            elif kind is RecomputeAction:
                self.actions[a.before_op].append(a)
            elif isinstance(a, SwapOut):
                self.actions[a.after_op].append(a)
            elif isinstance(a, RecomputeAction):
                self.actions[a.before_op].append(a)
            elif isinstance(a, SwapIn):
                self.actions[a.due_op].append(a)
        self._state = state
        self._spans: dict[int, list[SpanRef]] | None = None

    @property
    def spans(self) -> dict[int, list[SpanRef]]:
        """The residencies by start op, made on first use (only ops that waited read them)."""
        if self._spans is None:
            self._spans = defaultdict(list)
            for b, spans in self._state.spans.items():
                for k, span in enumerate(spans):
                    self._spans[span.start].append(SpanRef(b, k))
        return self._spans


def moves_at(state: TierState, op: int, report, waited: np.ndarray, link_moves: bool,
             level_moves: bool = True, anchors: Anchors | None = None) -> list[Move]:
    """Moves anchored at ``op``; ``link_moves`` adds those that only relieve the link
    (cancel a swap, change its level): useless while nothing waits for a copy, so the
    first pass skips them then. ``anchors``: ``Anchors(state)``, when the caller keeps
    one."""
    anchors = anchors or Anchors(state)
    out = []
    for a in anchors.actions.get(op, ()):
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
