"""The overhead lower bound against the fastest plan of tiny traces, found by trying them
all (:mod:`cupool.sim.exhaustive`).

Random valid plans (``test_bounds``) and the planners' plans (``test_windows_bound``)
are seldom the best a trace admits, and a bound that is too high shows only below the
best: here it must stay under the fastest plan of every on/off choice of a tiny trace's
buffers, at every budget from its largest working set up.
"""

from __future__ import annotations

import pytest

from cupool.core.vocabulary import PERSISTENT, Buffer, Op, Trace
from cupool.errors import InputError
from cupool.planning.budget.working_sets import required_bytes
from cupool.planning.shapes import TINY_BYTES, tiny_trace
from cupool.sim import cost_model, overhead_lower_bound
from cupool.sim.exhaustive import MAX_CHOICES, fastest_plan

LINK = cost_model(0.05, latency_us=0.0)
"""A tiny trace's buffer (1000 bytes) takes 20 us each way."""
SEEDS = (*range(24), 93)
"""The first 24 generated traces, and seed 93: the one of the first 200 where the bound of
each op alone once claimed more than the fastest plan (125 us against 115: a copy in that
waits for the copy out of the bytes it lands in runs while the op does)."""


def _budgets(trace: Trace) -> range:
    """Every whole number of buffers from the largest working set to one short of all."""
    return range(int(required_bytes(trace).max()) // TINY_BYTES * TINY_BYTES,
                 len(trace.buffers) * TINY_BYTES, TINY_BYTES)


@pytest.mark.parametrize("seed", SEEDS)
def test_no_plan_of_a_tiny_trace_runs_below_the_bound(seed):
    trace = tiny_trace(seed)
    ideal = sum(op.duration_us for op in trace.ops)
    for budget in _budgets(trace):
        fastest = fastest_plan(trace, budget, LINK)
        if fastest.plan is None:
            continue
        bound = overhead_lower_bound(trace, budget, LINK)
        assert bound.feasible, bound.reason
        assert ideal * (1 + bound.overhead) <= fastest.iteration_us + 1e-6, (
            bound, fastest.iteration_us, trace)


def _weights(durations, *uses_and_writes):
    return Trace("hand", tuple(Op(f"op{i}", d) for i, d in enumerate(durations)),
                 tuple(Buffer(j, TINY_BYTES, 0, len(durations), uses, PERSISTENT,
                              writes=writes)
                       for j, (uses, writes) in enumerate(uses_and_writes)))


def test_a_clean_buffer_stays_for_its_use_and_makes_room_after_it():
    """ops 20/10/10/10 us; P read at op 3, Q read at ops 1 and 2, one slot: the fastest
    plan copies Q in behind op 0, keeps it for ops 1 and 2, drops it and copies P in
    (20 us of stall), and P's stay ends with the iteration's (dropped, read-only): 70 us."""
    trace = _weights([20.0, 10.0, 10.0, 10.0], ((3,), ()), ((1, 2), ()))
    fastest = fastest_plan(trace, TINY_BYTES, LINK)
    assert fastest.iteration_us == pytest.approx(70.0)
    assert fastest.valid >= 1
    assert 50.0 * (1 + overhead_lower_bound(trace, TINY_BYTES, LINK).overhead) <= 70.0 + 1e-6


def test_buffers_of_several_sizes_or_too_many_choices_are_refused():
    mixed = Trace("mixed", (Op("op0", 1.0),),
                  (Buffer(0, 1000, 0, 1, (0,), PERSISTENT), Buffer(1, 2000, 0, 1, (0,),
                                                                    PERSISTENT)))
    with pytest.raises(InputError, match="2 sizes"):
        fastest_plan(mixed, 3000, LINK)
    wide = _weights([1.0] * 8, *[((0,), ())] * 3)  # 3 buffers x 7 free ops
    assert MAX_CHOICES < 3 * 7
    with pytest.raises(InputError, match="21 free"):
        fastest_plan(wide, 2 * TINY_BYTES, LINK)
