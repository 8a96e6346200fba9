"""The copy engines as the planners model them: one FIFO queue per direction (D2H, H2D).

A planner asks a queue when a copy issued at some time would finish behind the copies
already queued, whether adding it keeps every queued copy on time (each has a due time:
the op that needs its bytes), and how late things get when it does not. Times are µs on
the planners' estimated op timeline (:class:`~.state.PlanState`); the simulator has the
last word on the real schedule::

    issue:   t0        t1   t2
    queue:   [copy a   ][copy b][copy c]     FIFO in issue order, one copy at a time
    due:                  ^a        ^b   ^c  a copy's delay propagates to those behind it

Two implementations answer identically, bit for bit: :class:`PythonCopyEngine`, and
:class:`CompiledCopyEngine` over the optional C extension ``_copyq`` (built by ``pip
install``, see ``setup.py``), which runs the same floating-point operations in the same
order without Python's per-copy cost. :data:`CopyEngine` names the compiled one when it is
built, else the Python one; :class:`~.state.PlanState` makes its queues with whatever
``copies.CopyEngine`` names when it starts, so tests and benchmarks may assign it.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple


class QueuedCopy(NamedTuple):
    """A copy issued at ``issue_us`` that runs ``length_us`` and must land by ``due_us``."""

    issue_us: float
    length_us: float
    due_us: float


class SetAside(NamedTuple):
    """A copy ``set_aside`` took out of the queue: the copy, the index it had, and what
    ``put_back`` needs to leave the caches as they were (:class:`PythonCopyEngine`: the
    cached finishes, tolerances and absorbed delays from before; :class:`CompiledCopyEngine`:
    which of them were computed, 0, 1 or 2)."""

    copy: QueuedCopy
    index: int
    saved: object


class QueueCaches(NamedTuple):
    """What a queue has cached, each in queue order (``None``: not computed): the finish
    times, the tolerances and the delays the copies behind each one absorb."""

    finishes: list[float] | None
    tolerances: list[float] | None
    absorbed: list[float] | None


class PythonCopyEngine:
    """One FIFO copy engine: its copies kept in issue order (copies issued at the same time
    in the order they were added)."""

    def __init__(self) -> None:
        self.issues: list[float] = []
        self.lengths: list[float] = []
        self.dues: list[float] = []
        self._finishes: list[float] | None = []
        self._tol: list[float] | None = []
        self._after: list[float] = []   # the delay copies from j + 1 on absorb (inf at the end)

    @classmethod
    def from_queue(cls, issues: list[float], lengths: list[float],
                   dues: list[float]) -> PythonCopyEngine:
        """A queue holding these copies (in this order, issue times ascending), its caches
        computed when first asked."""
        engine = cls()
        engine.issues, engine.lengths, engine.dues = list(issues), list(lengths), list(dues)
        engine._finishes = engine._tol = None
        return engine

    def caches(self) -> QueueCaches:
        """The caches as they are, computing nothing."""
        tol = self._tol
        return QueueCaches(self._finishes, tol, None if tol is None else self._after)

    def finishes(self) -> list[float]:
        """Finish time of every queued copy (FIFO in issue order); the cached list, not to
        be changed."""
        if self._finishes is None:
            out, free = [], 0.0
            for issue, length in zip(self.issues, self.lengths, strict=True):
                free = max(free, issue) + length
                out.append(free)
            self._finishes = out
        return self._finishes

    def finish_if_added(self, issue: float, length: float) -> float:
        """When a copy issued at ``issue`` would finish (copies issued at the same time
        earlier stay ahead of it)."""
        k = bisect.bisect_right(self.issues, issue)
        free = self.finishes()[k - 1] if k else 0.0
        return max(free, issue) + length

    def tolerances(self) -> list[float]:
        """``tol[j]``: how much later copy ``j`` may finish without any copy from ``j`` on
        missing its due time (delays are absorbed by idle time between copies); the cached
        list, not to be changed."""
        if self._tol is None:
            n = len(self.issues)
            self._tol, self._after = [0.0] * n, [0.0] * n
            self._tolerance_down(n - 1, float("inf"), None, 0)
        return self._tol

    def _tolerance_down(self, j: int, after: float, old_after: list[float] | None,
                        stop_below: int) -> None:
        """Fill ``tol`` and ``after`` from copy ``j`` down to copy 0 (``after``: what the
        copies behind ``j`` absorb). Below ``stop_below`` the copies are those of
        ``old_after`` (same issue, length, due and finish), so the walk stops as soon as
        what reaches them is what reached them before: the rest is already right."""
        finishes, tol, afters = self.finishes(), self._tol, self._after
        while j >= 0:
            if j < stop_below and old_after is not None and old_after[j] == after:
                return
            afters[j] = after
            tol[j] = min(self.dues[j] - finishes[j], after)
            start = max(finishes[j - 1] if j else 0.0, self.issues[j])
            idle = start - (finishes[j - 1] if j else 0.0)
            after = idle + tol[j] if j else after
            j -= 1

    def _changed(self, k: int, inserted: bool) -> None:
        """Bring the cached finishes and tolerances up to date after copy ``k`` was
        inserted (or the copy at ``k`` removed), with the same arithmetic as computing
        them afresh: finishes before ``k`` stay; from ``k`` on they are recomputed until
        one equals the old finish of the same copy (the queue caught up with itself), after
        which they all stay; tolerances are recomputed from there down."""
        old_f, old_tol, old_after = self._finishes, self._tol, self._after
        if old_f is None:
            self._tol = None
            return
        shift = 1 if inserted else -1
        n = len(self.issues)
        f = old_f[:k]
        free = f[-1] if k else 0.0
        resync = n
        for j in range(k, n):
            free = max(free, self.issues[j]) + self.lengths[j]
            old = j - shift
            if (j > k or not inserted) and old_f[old] == free:
                resync = j
                f.extend(old_f[old:])
                break
            f.append(free)
        self._finishes = f
        if old_tol is None:
            return
        if resync < n:
            tol = old_tol[:k] + [0.0] * (resync - k) + old_tol[resync - shift:]
            after = old_after[:k] + [0.0] * (resync - k) + old_after[resync - shift:]
        else:
            tol, after = old_tol[:k] + [0.0] * (n - k), old_after[:k] + [0.0] * (n - k)
        self._tol, self._after = tol, after
        j = resync - 1
        if resync < n:
            idle = max(f[j], self.issues[resync]) - f[j]
            incoming = idle + tol[resync]
        else:
            incoming = float("inf")
        self._tolerance_down(j, incoming, old_after, k)

    def fits(self, issue: float, length: float, due: float) -> bool:
        """True when adding the copy keeps it and every later-issued copy on time."""
        k = bisect.bisect_right(self.issues, issue)
        finishes = self.finishes()
        finish = max(finishes[k - 1] if k else 0.0, issue) + length
        if finish > due + 1e-9:  # µs sums: tolerate rounding, as the later-copy check does
            return False
        if k == len(self.issues):
            return True
        old_start = max(finishes[k - 1] if k else 0.0, self.issues[k])
        delay = max(0.0, max(finish, self.issues[k]) - old_start)
        return delay <= self.tolerances()[k] + 1e-9

    def lateness(self, issue: float, length: float, due: float) -> float:
        """Estimated µs of waiting a copy that does not fit on time adds: its own delay
        past ``due`` plus the delay it pushes onto later copies past their tolerance."""
        k = bisect.bisect_right(self.issues, issue)
        finishes = self.finishes()
        finish = max(finishes[k - 1] if k else 0.0, issue) + length
        late = max(0.0, finish - due)
        if k < len(self.issues):
            old_start = max(finishes[k - 1] if k else 0.0, self.issues[k])
            delay = max(0.0, max(finish, self.issues[k]) - old_start)
            late += max(0.0, delay - max(self.tolerances()[k], 0.0))
        return late

    def add(self, issue: float, length: float, due: float = float("inf")) -> None:
        k = bisect.bisect_right(self.issues, issue)
        self.issues.insert(k, issue)
        self.lengths.insert(k, length)
        self.dues.insert(k, due)
        self._changed(k, inserted=True)

    def remove(self, copy: QueuedCopy) -> None:
        """Take back a copy added with these numbers."""
        issue, length, due = copy.issue_us, copy.length_us, copy.due_us
        for k in range(bisect.bisect_left(self.issues, issue), len(self.issues)):
            if self.lengths[k] == length and self.dues[k] == due:
                del self.issues[k], self.lengths[k], self.dues[k]
                self._changed(k, inserted=False)
                return
        raise ValueError(f"no copy issued at {issue} us for {length} us due {due} us")

    def set_aside(self, copy: QueuedCopy) -> SetAside:
        """:meth:`remove` a copy for a while (to ask the queue without it), keeping what
        :meth:`put_back` needs to restore the queue exactly as it was; only queries may run
        until then."""
        saved = (self._finishes, self._tol, self._after)
        k = bisect.bisect_left(self.issues, copy.issue_us)
        while not (self.lengths[k] == copy.length_us and self.dues[k] == copy.due_us):
            k += 1
        self.remove(copy)
        return SetAside(copy, k, saved)

    def put_back(self, aside: SetAside) -> None:
        """Add a copy :meth:`set_aside` took out again. When it goes back to the place it
        left (no copy issued at the same time behind it), the queue and its cached finishes
        and tolerances are what they were before; otherwise it is :meth:`add` ed behind
        the copies issued at the same time, as ``remove`` then ``add`` would."""
        copy, k = aside.copy, aside.index
        issue = copy.issue_us
        if k < len(self.issues) and self.issues[k] == issue:
            self.add(issue, copy.length_us, copy.due_us)
            return
        self.issues.insert(k, issue)
        self.lengths.insert(k, copy.length_us)
        self.dues.insert(k, copy.due_us)
        self._finishes, self._tol, self._after = aside.saved

    def end_growth(self, issue: float, length: float, end: float) -> float:
        """How much later than ``end`` (or than the queue's last finish, if later) the
        queue's last copy would finish with this copy added."""
        finishes = self.finishes()
        before = max(end, finishes[-1] if finishes else 0.0)
        free = self.finish_if_added(issue, length)
        for j in range(bisect.bisect_right(self.issues, issue), len(self.issues)):
            free = max(free, self.issues[j]) + self.lengths[j]
        return max(0.0, free - before)

    def first_late(self, starts: list[float], lo: int, hi: int, length: float,
                   due: float) -> int:
        """The first ``i`` in ``[lo, hi)`` whose copy, issued at ``starts[i]``, would finish
        after ``due`` (+ 1e-9 of rounding), else ``hi``. A bisection: with ``starts``
        ascending, a copy issued later never finishes earlier behind a FIFO queue."""
        issues, finishes = self.issues, self.finishes()
        while lo < hi:
            mid = (lo + hi) // 2
            issue = starts[mid]
            k = bisect.bisect_right(issues, issue)
            if max(finishes[k - 1] if k else 0.0, issue) + length <= due + 1e-9:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def latest_fitting(self, starts: list[float], low: int, top: int, length: float,
                       due: float) -> int | None:
        """The largest ``i`` in ``[low, top]`` whose copy, issued at ``starts[i]``,
        :meth:`fits`, else ``None``."""
        for i in range(top, low - 1, -1):
            if self.fits(starts[i], length, due):
                return i
        return None


try:
    from cupool.planning.budget.engine import _copyq
except ImportError:  # the optional C extension is not built
    _copyq = None

if _copyq is not None:
    class CompiledCopyEngine(_copyq.CopyQueue):
        """:class:`PythonCopyEngine` compiled: the same methods and answers (``issues``,
        ``lengths``, ``dues``, ``finishes()`` and ``tolerances()`` return new lists).
        ``set_aside``/``put_back`` put the copy back with ``add``'s incremental update,
        which gives the cached values Python restores, and then forgets the caches that were
        not computed before, as Python's restore does; where both caches were computed and
        the copy goes back to the place it left, the values ``set_aside`` overwrote are
        written back from its log instead (the same values, without the walk). Only
        queries may run between them."""

        __slots__ = ()

        @classmethod
        def from_queue(cls, issues: list[float], lengths: list[float],
                       dues: list[float]) -> CompiledCopyEngine:
            """A queue holding these copies (in this order, issue times ascending), its
            caches computed when first asked."""
            engine = cls()
            engine.__setstate__((list(issues), list(lengths), list(dues), None, None, None))
            return engine

        def caches(self) -> QueueCaches:
            """The caches as they are, computing nothing."""
            return QueueCaches(*self.__getstate__()[3:])

        def set_aside(self, copy: QueuedCopy) -> SetAside:
            """:meth:`remove` a copy for a while (to ask the queue without it), keeping what
            :meth:`put_back` needs to restore the queue exactly as it was."""
            index, saved = self._set_aside(copy)
            return SetAside(copy, index, saved)

        def put_back(self, aside: SetAside) -> None:
            """Add a copy :meth:`set_aside` took out again, as
            :meth:`PythonCopyEngine.put_back` does."""
            self._put_back(aside.copy, aside.index, aside.saved)
else:
    CompiledCopyEngine = None

COMPILED_AVAILABLE = CompiledCopyEngine is not None
"""Whether the C extension ``_copyq`` is built (and :data:`CopyEngine` is compiled)."""

CopyEngine = CompiledCopyEngine if COMPILED_AVAILABLE else PythonCopyEngine
"""The copy queue the planners use: compiled when built, else pure Python."""
