"""The last resort's walk (:class:`~cupool.planning.budget.working_sets._Walk`) chooses the
range to free from candidate starts it lays out in address order from its resident columns
(0, each resident's low and high, the highest start) instead of sorting them; traces with
an empty buffer sort them. Both ways must give the same walk, eviction for eviction. The
walk's per-op tables (each needed slot's next need, the slots an op writes, the
temporaries whose last need it is) are built once; they must say what the trace says."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cupool.check import validate_swap_plan
from cupool.core.vocabulary import PERSISTENT
from cupool.planning.budget.working_sets import (
    _Walk,
    kept_persistent,
    needed_ops,
    plan_working_sets,
    required_bytes,
)
from cupool.planning.synthetic import lstm_trace
from cupool.sim import cost_model
from tests.planning.test_always_a_plan import COSTS, QUICK, _budget, any_traces


def _walked(trace, budget, cost, keep, sort_starts):
    needs = needed_ops(trace)
    kept = kept_persistent(trace, budget, cost, needs) if keep else []
    capacity = budget - sum(trace.buffer(b).size for b in kept)
    walk = _Walk(trace, capacity, needs, set(kept), cost)
    walk.any_empty = walk.any_empty or sort_starts
    walk.run()
    return walk


def _same_walk(trace, budget, cost, keep):
    laid_out = _walked(trace, budget, cost, keep, sort_starts=False)
    sorted_ = _walked(trace, budget, cost, keep, sort_starts=True)
    assert laid_out.residencies == sorted_.residencies
    assert laid_out.actions == sorted_.actions
    assert (laid_out.evictions, laid_out.repacks) == (sorted_.evictions, sorted_.repacks)
    return laid_out


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trace=any_traces(), share=st.floats(0.0, 1.0), keep=st.booleans())
def test_laid_out_candidate_starts_walk_as_sorted_ones(trace, share, keep):
    _same_walk(trace, _budget(trace, share), COSTS["gen4 75us"], keep)


def test_an_lstm_walk_evicts_the_same_either_way_and_its_plan_is_valid():
    trace = lstm_trace(12, 2, seed=0)
    cost = cost_model("gen5")
    budget = max(int(required_bytes(trace).max()), int(trace.lower_bound_bytes() * 0.5))
    for keep in (False, True):
        walk = _same_walk(trace, budget, cost, keep)
        assert walk.evictions > 0
        plan = plan_working_sets(trace, budget, cost, QUICK, 0.0, keep).plan
        report = validate_swap_plan(trace, plan)
        assert report.valid, (report.rule, report.message)


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trace=any_traces())
def test_the_per_op_tables_say_what_the_trace_says(trace):
    needs = needed_ops(trace)
    walk = _Walk(trace, int(required_bytes(trace, needs).max()), needs, set(),
                 COSTS["gen5"])
    n = trace.num_ops
    for t in range(n):
        assert walk.needed_index[t].tolist() == walk.needed_at[t]
        expected_next, expected_written, expected_last = [], [], []
        for k in walk.needed_at[t]:
            buffer = trace.buffers[k]
            ops = needs[buffer.id]
            later = [j for j in ops if j > t]
            if later:
                expected_next.append(later[0])
            else:
                expected_next.append(ops[0] + n if buffer.kind == PERSISTENT else 2 * n)
                if buffer.kind != PERSISTENT:
                    expected_last.append(k)
            if not buffer.read_only and t in buffer.write_ops:
                expected_written.append(k)
        assert walk.next_at[t].tolist() == expected_next
        assert walk.written_at[t].tolist() == expected_written
        assert walk.last_at[t] == expected_last
