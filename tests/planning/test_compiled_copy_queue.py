"""The compiled copy queue (``_copyq``) against the Python one: driven by the same random
calls (adds at equal issue times, zero lengths, infinite dues, removals from the middle,
copies set aside and put back, every query), both give the same answers and hold the same
queue and caches, compared bit for bit (as IEEE bytes: stricter than ``==``, which would
let 0.0 and -0.0 pass). Skipped when the extension is not built."""

from __future__ import annotations

import copy
import math
import struct

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cupool.planning import make_plan
from cupool.planning.budget.engine import copies
from cupool.planning.budget.engine.copies import COMPILED_AVAILABLE, PythonCopyEngine, QueuedCopy
from cupool.planning.synthetic import lstm_trace

pytestmark = pytest.mark.skipif(not COMPILED_AVAILABLE,
                                reason="the C extension cupool.planning.budget.engine._copyq "
                                       "is not built")

# small whole numbers make equal issue times (and resyncing queues) common; any float
# brings rounding into the sums
times = st.one_of(st.integers(0, 12).map(float),
                  st.floats(0.0, 60.0, allow_nan=False, allow_infinity=False))
lengths = st.one_of(st.sampled_from([0.0, 0.5, 1.25, 3.0]),
                    st.floats(0.0, 10.0, allow_nan=False, allow_infinity=False))
dues = st.one_of(st.just(math.inf), times.map(lambda t: t * 1.5))
probes = st.lists(st.tuples(times, lengths, dues), min_size=1, max_size=4)


def bits(value):
    """Floats as their IEEE bytes, inside lists and tuples too; anything else as it is."""
    if isinstance(value, float):
        return struct.pack("<d", value)
    if isinstance(value, (list, tuple)):
        return [bits(item) for item in value]
    return value


def outcome(call):
    """What a call gives: its value as :func:`bits`, or the error it raised."""
    try:
        return "value", bits(call())
    except (ValueError, IndexError) as error:
        return "error", type(error).__name__, str(error)


class BothQueues(RuleBasedStateMachine):
    """One Python and one compiled queue, always asked the same."""

    def __init__(self) -> None:
        super().__init__()
        self.python = PythonCopyEngine()
        self.compiled = copies.CompiledCopyEngine()

    def same(self, ask):
        expected, got = outcome(lambda: ask(self.python)), outcome(lambda: ask(self.compiled))
        assert got == expected
        return expected

    def queued(self, pick: int) -> QueuedCopy:
        q = self.python
        k = pick % len(q.issues)
        return QueuedCopy(q.issues[k], q.lengths[k], q.dues[k])

    def ask_everything(self, asked: list[tuple[float, float, float]]) -> None:
        for issue, length, due in asked:
            self.same(lambda q, i=issue, n=length, d=due: q.fits(i, n, d))
            self.same(lambda q, i=issue, n=length, d=due: q.lateness(i, n, d))
            self.same(lambda q, i=issue, n=length: q.finish_if_added(i, n))
            self.same(lambda q, i=issue, n=length, d=due: q.end_growth(i, n, d))

    @rule(issue=times, length=lengths, due=dues)
    def add(self, issue, length, due):
        self.same(lambda q: q.add(issue, length, due))

    @rule(issue=times, length=lengths)
    def add_due_never(self, issue, length):
        self.same(lambda q: q.add(issue, length))

    @precondition(lambda self: self.python.issues)
    @rule(pick=st.integers(0, 10**6))
    def remove(self, pick):
        taken = self.queued(pick)
        self.same(lambda q: q.remove(taken))

    @rule(issue=times, length=lengths, due=dues)
    def remove_maybe_absent(self, issue, length, due):
        """A copy that may not be queued: both raise the same error, or both take the same
        copy (the first later one with its length and due)."""
        self.same(lambda q: q.remove(QueuedCopy(issue, length, due)))

    @precondition(lambda self: self.python.issues)
    @rule(pick=st.integers(0, 10**6), asked=probes)
    def set_aside_ask_put_back(self, pick, asked):
        taken = self.queued(pick)
        aside_python, aside_compiled = (self.python.set_aside(taken),
                                        self.compiled.set_aside(taken))
        assert (aside_compiled.copy, aside_compiled.index) == (aside_python.copy,
                                                               aside_python.index)
        self.same(lambda q: q.caches())
        self.ask_everything(asked)
        self.same(lambda q: q.caches())
        self.python.put_back(aside_python)
        self.compiled.put_back(aside_compiled)

    @rule(asked=probes)
    def ask(self, asked):
        self.ask_everything(asked)

    @rule(starts=st.lists(times, min_size=1, max_size=12), length=lengths, due=dues,
          ends=st.tuples(st.integers(0, 12), st.integers(0, 12)))
    def scan_triggers(self, starts, length, due, ends):
        starts = sorted(starts)
        lo, hi = sorted(min(end, len(starts)) for end in ends)
        self.same(lambda q: q.first_late(starts, lo, hi, length, due))
        self.same(lambda q: q.latest_fitting(starts, lo, max(lo, hi - 1), length, due))

    @rule()
    def compute_caches(self):
        self.same(lambda q: (q.finishes(), q.tolerances()))

    @rule()
    def forget_caches(self):
        """Both queues afresh with the same copies, nothing cached yet."""
        q = self.python
        self.python = PythonCopyEngine.from_queue(q.issues, q.lengths, q.dues)
        self.compiled = copies.CompiledCopyEngine.from_queue(q.issues, q.lengths, q.dues)

    @rule()
    def deep_copy(self):
        self.compiled = copy.deepcopy(self.compiled)

    @invariant()
    def same_queue_and_caches(self):
        self.same(lambda q: (q.issues, q.lengths, q.dues, q.caches()))


TestBothQueues = BothQueues.TestCase
TestBothQueues.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)


def test_remove_and_set_aside_raise_as_python_does_for_a_copy_not_queued():
    python, compiled = PythonCopyEngine(), copies.CompiledCopyEngine()
    for queue in (python, compiled):
        queue.add(1.0, 2.0, 9.0)
    absent = QueuedCopy(1.0, 3.0, math.inf)
    for queue in (python, compiled):
        with pytest.raises(ValueError, match=r"no copy issued at 1\.0 us for 3\.0 us due inf us"):
            queue.remove(absent)
        with pytest.raises(IndexError):
            queue.set_aside(absent)


@pytest.mark.parametrize("fraction", [0.5, 0.7])
def test_the_budget_planner_makes_the_same_plan_with_either_queue(monkeypatch, fraction):
    trace = lstm_trace(6, 2, seed=0)
    budget = int(trace.lower_bound_bytes() * fraction)
    plans = []
    for engine in (PythonCopyEngine, copies.CompiledCopyEngine):
        monkeypatch.setattr(copies, "CopyEngine", engine)
        plan = make_plan(trace, budget, policy="auto").plan
        plans.append((plan.status, plan.arena_bytes, plan.placements, plan.residencies,
                      plan.actions))
    assert plans[0][1] > 0 and plans[0][4]  # a swapping plan, so the queues were used
    assert plans[0] == plans[1]
