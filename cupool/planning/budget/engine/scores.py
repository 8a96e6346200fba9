"""How the cost-ordered greedy ranks its options (:func:`~.greedy.cost_pass`): a score per
option, µs of cost per byte per op over the budget its holes cover, and the table of every
candidate's last score, kept up to date as ops go over or under the budget."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import numpy as np

from cupool.planning.budget.engine.schedule import IdleGap, OpSpan
from cupool.planning.budget.engine.state import PlanState


class Scored(Protocol):
    """What a score reads of an option (:class:`~.greedy.GapOption`)."""

    cost_us: float
    holes: list[OpSpan]


def covered_count(state: PlanState, holes: list[OpSpan]) -> int:
    """How many ops over the budget the holes cover (each hole counted)."""
    covered = 0
    for start, end in holes:
        if end > start:
            covered += state.over_budget_count(start, end)
    return covered


def option_score(state: PlanState, gap: IdleGap, option: Scored) -> float:
    """µs per byte-op of excess removed: the option's cost over its size times the number
    of over-budget ops its holes cover (only grows as other choices fix ops, so a lazy
    heap stays exact)."""
    covered = covered_count(state, option.holes)
    return option.cost_us / (state.sizes[gap.buffer_id] * max(covered, 1))


class ScoreTable:
    """The gaps a :func:`~.greedy.cost_pass` round may still take, with each one's last evaluated
    option in arrays (its cost and its holes: one, or two for a gap across the iteration
    boundary), sorted by gap (ties go to the smaller gap), and every score against the
    ops over the budget when :meth:`scores` was last asked.

    A score changes only where its gap's option changed (:meth:`update`), where the gap
    left the table (:meth:`deactivate`), or where one of its holes holds an op that went
    over or under the budget since: :meth:`scores` recomputes those rows alone, with the
    same arithmetic as all of them at once. :meth:`compact` drops the rows that left."""

    FEW_FLIPS = 4
    """Up to this many ops crossing the budget are matched against the holes one by one;
    more, and every row whose holes meet their span is recomputed."""

    FEW_ROWS = 48
    """Up to this many rows are recomputed one by one, more with NumPy."""

    def __init__(self, state: PlanState,
                 entries: Iterable[tuple[IdleGap, Scored]]) -> None:
        # each option is read as it comes (and may be dropped then): its cost, its first
        # two holes (0, 0: none) and its score against ``state``, which must not change
        # while ``entries`` is read
        gaps, costs, scores = [], [], []
        bounds: list[list[int]] = [[], [], [], []]
        for gap, option in entries:
            gaps.append(gap)
            costs.append(option.cost_us)
            scores.append(option_score(state, gap, option))
            holes = [(h.start, h.end) if h.end > h.start else (0, 0)
                     for h in option.holes[:2]]
            holes += [(0, 0)] * (2 - len(holes))
            for k, (start, end) in enumerate(holes):
                bounds[2 * k].append(start)
                bounds[2 * k + 1].append(end)
        order = sorted(range(len(gaps)), key=gaps.__getitem__)  # by gap
        self.gaps = [gaps[i] for i in order]
        n = len(order)
        self.cost = np.array([costs[i] for i in order], dtype=np.float64)
        self.size = np.array([state.sizes[gap.buffer_id] for gap in self.gaps],
                             dtype=np.float64)
        # start, end of the first hole, then of the second, one array each
        self._hole_bounds = [np.array([bound[i] for i in order], dtype=np.int64)
                             for bound in bounds]
        self.last_score = np.array([scores[i] for i in order], dtype=np.float64)
        self.active = np.ones(n, dtype=bool)
        self._left = 0  # rows no longer active
        self._scores = np.full(n, np.inf)
        self._over: np.ndarray | None = None  # which ops the scores count as over
        self._version = -1  # the state's over_version when _over was taken
        self._dirty: set[int] = set()  # rows changed since

    def update(self, i: int, option: Scored) -> None:
        """Row ``i`` now holds ``option`` (its score is recomputed when next asked)."""
        self.cost[i] = option.cost_us
        bounds = self._hole_bounds
        for k in range(4):
            bounds[k][i] = 0
        for k, hole in enumerate(option.holes[:2]):
            if hole.end > hole.start:
                bounds[2 * k][i], bounds[2 * k + 1][i] = hole.start, hole.end
        if self._over is not None:
            self._dirty.add(i)

    def deactivate(self, i: int) -> None:
        """Row ``i`` leaves the table: its score is ``inf`` from now on."""
        if self.active[i]:
            self.active[i] = False
            self._left += 1
        if self._over is not None:
            self._dirty.add(i)

    def compact(self) -> None:
        """Drop the rows that left the table, once they are half of it or more (the others
        keep their order, so ties still go to the smaller gap; row numbers change)."""
        if not self._left or 2 * self._left < len(self.gaps):
            return
        keep = np.flatnonzero(self.active)
        renumbered = np.cumsum(self.active) - 1
        self._dirty = {int(renumbered[i]) for i in self._dirty if self.active[i]}
        self.gaps = [self.gaps[i] for i in keep.tolist()]
        self.cost, self.size = self.cost[keep], self.size[keep]
        self._hole_bounds = [bound[keep] for bound in self._hole_bounds]
        self.active = self.active[keep]
        self.last_score, self._scores = self.last_score[keep], self._scores[keep]
        self._left = 0

    def scores(self, state: PlanState) -> np.ndarray:
        """:func:`option_score` of every active gap's last option (``inf``: inactive or
        freeing nothing at an op over the budget), as a new array."""
        state.over_budget_ops()  # kept up to date from now on, with over_version
        if self._over is not None and state.over_version == self._version:
            # no op went over or under the budget since: only the rows changed since
            if self._dirty:
                rows = np.array(sorted(self._dirty), dtype=np.int64)
                self._dirty.clear()
                if len(rows) <= self.FEW_ROWS:
                    self._rescore_few(state, rows.tolist())
                else:
                    self._rescore(self._over, rows)
            return self._scores.copy()
        over = state.live > state.budget
        self._version = state.over_version
        if self._over is None:
            rows = None
        else:
            changed = np.flatnonzero(over != self._over)
            if len(changed):
                s1, e1, s2, e2 = self._hole_bounds
                if len(changed) <= self.FEW_FLIPS:
                    touched = np.zeros(len(self.gaps), dtype=bool)
                    for k in changed.tolist():
                        touched |= ((s1 <= k) & (e1 > k)) | ((s2 <= k) & (e2 > k))
                else:
                    first, last = int(changed[0]), int(changed[-1])
                    touched = ((s1 <= last) & (e1 > first)) | ((s2 <= last) & (e2 > first))
                touched &= self.active  # the others stay at inf
                if self._dirty:
                    touched[list(self._dirty)] = True
                rows = np.flatnonzero(touched)
            elif self._dirty:
                rows = np.array(sorted(self._dirty), dtype=np.int64)
            else:
                return self._scores.copy()
        self._over = over
        self._dirty.clear()
        if rows is not None and len(rows) <= self.FEW_ROWS:
            self._rescore_few(state, rows.tolist())
        else:
            self._rescore(over, rows)
        return self._scores.copy()

    def _rescore_few(self, state: PlanState, rows: list[int]) -> None:
        """:meth:`_rescore` of a few rows, one by one (the same operations on the same
        float64 values, without NumPy's cost per call)."""
        count = state.over_budget_count
        if len(rows) <= 2:  # the usual case: a row or two, read one value at a time
            s1, e1, s2, e2 = ([int(bound[i]) for i in rows] for bound in self._hole_bounds)
        else:
            s1, e1, s2, e2 = (bound[rows].tolist() for bound in self._hole_bounds)
        for k, i in enumerate(rows):
            if not self.active[i]:
                self._scores[i] = np.inf
                continue
            covered = count(s1[k], e1[k]) + count(s2[k], e2[k])
            if covered:
                self._scores[i] = float(self.cost[i]) / (float(self.size[i]) * covered)
            else:
                self._scores[i] = self.last_score[i]

    def _rescore(self, over: np.ndarray, rows: np.ndarray | None) -> None:
        """Recompute the scores of ``rows`` (``None``: every row) against ``over``."""
        over_before = np.zeros(len(over) + 1, dtype=np.int64)  # over-budget ops before op k
        np.cumsum(over, out=over_before[1:])
        s1, e1, s2, e2 = self._hole_bounds
        if rows is not None:
            s1, e1, s2, e2 = s1[rows], e1[rows], s2[rows], e2[rows]
        covered = ((over_before[e1] - over_before[s1])
                   + (over_before[e2] - over_before[s2]))
        cost = self.cost if rows is None else self.cost[rows]
        size = self.size if rows is None else self.size[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            out = cost / (size * np.maximum(covered, 1))
        # a last option that frees nothing over the budget now may be stale (its swap's
        # window moved): such a gap keeps its last score until it is evaluated again
        stale = covered == 0
        out[stale] = (self.last_score if rows is None else self.last_score[rows])[stale]
        out[~(self.active if rows is None else self.active[rows])] = np.inf
        if rows is None:
            self._scores = out
        else:
            self._scores[rows] = out
