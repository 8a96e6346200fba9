"""The overhead lower bound: hand cases, infeasibility, and soundness against the simulator
on random small traces with random valid plans (Hypothesis)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, target

from cupool.check import validate_plan
from cupool.core.vocabulary import (
    PAGEABLE,
    PERSISTENT,
    PINNED,
    Buffer,
    Recompute,
    RecomputeAction,
    Residency,
    SwapIn,
    SwapOut,
)
from cupool.errors import InputError
from cupool.io import load_trace
from cupool.planning import plan
from cupool.sim import cost_model, overhead_lower_bound, simulate
from cupool.sim.refill import Refill
from tests.conftest import TRACES
from tests.swap_cases import (
    streaming_trace_and_plan,
    swap_plan,
    trace_and_plan,
    trace_of,
    written_trace_and_plan,
)

SLOW = cost_model(0.1)  # 1000 bytes: 13 us per copy


def test_budget_at_the_lower_bound_costs_nothing():
    trace = load_trace(TRACES[0])
    bound = overhead_lower_bound(trace, trace.lower_bound_bytes(), cost_model("gen4"))
    assert bound.feasible and bound.overhead == 0.0 and "static plan" in bound.reason
    assert simulate(trace, plan(trace, "greedy-size"), cost_model("gen4")).overhead == 0.0


def test_op_working_set_above_budget_is_infeasible():
    trace = trace_of([1.0] * 3, Buffer(0, 600, 0, 3, (0, 2)), Buffer(1, 500, 1, 2, (1,)),
                     Buffer(2, 700, 1, 3, (1, 2)))
    bound = overhead_lower_bound(trace, 1100)
    assert not bound.feasible and math.isinf(bound.overhead)
    assert bound.reason == "infeasible: op 1 needs 1200 bytes resident (budget 1100)"
    assert bound.details["must_resident_bytes"] == 1200
    assert not overhead_lower_bound(trace, 1299).feasible  # op 2 needs A and C: 1300
    assert overhead_lower_bound(trace, 1300).feasible


def test_hand_case_one_swap_after_the_peak():
    """op:  0    1    2      (10 us each), budget 1000 bytes
    A:  [==============)  uses 0 and 2, 1000 B
    C:       [==)         use 1, 1000 B: at op 1 A must be off the device
    A's copy out (13 us) starts when op 0 has produced it (10 us) and must finish before op
    1 starts (C fills the same bytes): op 1 starts at 23 at the earliest. After op 1 ends
    the H2D link needs 13 us for A, and op 2, which reads it, runs after that:
    T >= 23 + 10 + 13 + 10 = 56 us (the plan below). The windows see it too: the copy out
    between the end of op 0 and the start of op 1, the copy in between op 1 and op 2."""
    trace = trace_of([10.0] * 3, Buffer(1, 1000, 0, 3, (0, 2)), Buffer(2, 1000, 1, 2, (1,)))
    bound = overhead_lower_bound(trace, 1000, SLOW)
    assert bound.feasible
    assert bound.details["method"] in ("lp", "windows")
    assert bound.overhead == pytest.approx(26.0 / 30.0, rel=1e-5)
    if bound.details["method"] == "lp":
        assert bound.details["op"] == 1 and bound.details["excess_bytes"] == 1000
    else:
        assert bound.details["windows"] == [(0, 1, "out"), (1, 2, "in")]
    swap = swap_plan(trace, [Residency(1, 0, 1, 0), Residency(1, 2, 3, 0),
                             Residency(2, 1, 2, 0)], [SwapOut(1, 0), SwapIn(1, 2, 2)])
    report = simulate(trace, swap, SLOW)
    assert report.feasible and report.overhead >= bound.overhead
    assert report.overhead == pytest.approx(26.0 / 30.0)


def test_copies_are_priced_at_the_fastest_host_level():
    """The step above on a link whose pinned copies cost 100 us each and pageable ones 10
    us (stated: by default a pageable copy costs at least a pinned one) at half the
    bandwidth: A copied out and back through pageable memory runs at 50.07 us, far below
    the pinned plan's 230 us; the bound must not exceed it."""
    assert cost_model(55.0, latency_us=100.0).level_latency_us(PAGEABLE) == 100.0
    assert cost_model(55.0, latency_us=3.0).level_latency_us(PAGEABLE) == 10.0
    link = cost_model(55.0, latency_us=100.0, pageable_latency_us=10.0)
    trace = trace_of([10.0] * 3, Buffer(1, 1000, 0, 3, (0, 2)), Buffer(2, 1000, 1, 2, (1,)))
    runs = {}
    for level in (PINNED, PAGEABLE):
        swap = swap_plan(trace, [Residency(1, 0, 1, 0), Residency(1, 2, 3, 0),
                                 Residency(2, 1, 2, 0)],
                         [SwapOut(1, 0, level=level), SwapIn(1, 2, 2, level=level)])
        assert validate_plan(trace, swap).valid
        runs[level] = simulate(trace, swap, link).iteration_us
    assert runs[PAGEABLE] == pytest.approx(50.0 + 2 * 1000 / 27.5e3)
    assert runs[PINNED] > 200.0
    bound = overhead_lower_bound(trace, 1000, link)
    assert bound.details["bound_us"] <= runs[PAGEABLE] + 1e-9
    assert bound.details["bound_us"] == pytest.approx(runs[PAGEABLE], rel=1e-5)


def test_recompute_makes_the_bound_cheaper():
    """Same trace, A recomputable (op 0, 10 us). Swapping a fraction x of A costs 13x of
    copy out before op 1 and 13x of copy in after it; recomputing the rest costs 10(1-x)
    after op 1: T >= (10 + 13x) + 10 + max(10 + 10(1 - x), 13x) = 40 + 3x for x <= 20/23,
    least at x = 0: recomputing all of A (40 us) is optimal, and the bound finds it."""
    trace = trace_of([10.0, 10.0, 10.0], Buffer(1, 1000, 0, 3, (0, 2), recompute=Recompute(0)),
                     Buffer(2, 1000, 1, 2, (1,)))
    bound = overhead_lower_bound(trace, 1000, SLOW)
    redo = swap_plan(trace, [Residency(1, 0, 1, 0), Residency(1, 2, 3, 0),
                             Residency(2, 1, 2, 0)], [RecomputeAction(1, 2)])
    report = simulate(trace, redo, SLOW)
    assert report.overhead == pytest.approx(10.0 / 30.0)
    assert bound.overhead == pytest.approx(10.0 / 30.0, rel=1e-6)  # the dual search converged
    assert bound.overhead <= report.overhead + 1e-12


def test_freed_inputs_are_charged_to_a_recompute(monkeypatch):
    """op:  0    1    2    3      (10 us each), budget 2000 bytes
    X:  [=======)              op 0 makes X (1000 B), freed after op 1
    A:       [==============)  op 1 makes A from X (recipe: op 1, inputs X), uses 1 and 3
    C:            [===)        2000 B, use 2: A must be off the device at op 2
    Recomputing A before op 3 needs X, which the program freed: X is rematerialized first
    (op 0 again), so a recompute of A costs 20 us, not 10. Swapping a fraction x of A
    instead costs 13x out (after op 1, before op 2) and 13x in (after op 2, before op 3,
    which then runs): T >= 20 + 13x + 10 + max(10 + 20(1 - x), 13x + 10), least at
    x = 20/33: 1840/33 us. A moves whole, though: x = 0 (60 us, the plan's) or 1 (66 us)."""
    trace = trace_of([10.0] * 4, Buffer(0, 1000, 0, 2, (0, 1), recompute=Recompute(0)),
                     Buffer(1, 1000, 1, 4, (1, 3), recompute=Recompute(1, (0,))),
                     Buffer(2, 2000, 2, 3, (2,)))
    from cupool.sim.bounds import recompute_us
    assert list(recompute_us(trace, [10.0] * 4)) == [10.0, 20.0, math.inf]
    remat = swap_plan(trace, [Residency(0, 0, 2, 0), Residency(0, 3, 4, 1000),
                              Residency(1, 1, 2, 1000), Residency(1, 3, 4, 0),
                              Residency(2, 2, 3, 0)],
                      [RecomputeAction(0, 3), RecomputeAction(1, 3)], budget=2000)
    report = validate_plan(trace, remat)
    assert report.valid, report.message
    simulated = simulate(trace, remat, SLOW)
    assert simulated.recompute_us == 20.0 and simulated.overhead == pytest.approx(0.5)
    # the whole iteration's program finds the plan's 60 us: A moves whole
    assert overhead_lower_bound(trace, 2000, SLOW).details["bound_us"] == pytest.approx(
        60.0, rel=1e-5)
    import cupool.sim.bounds as bounds
    monkeypatch.setattr(bounds, "slots_bound_us", lambda *args: None)
    bound = overhead_lower_bound(trace, 2000, SLOW)
    assert bound.overhead <= simulated.overhead
    if bound.details["method"] == "lp":
        assert bound.details["bound_us"] == pytest.approx(60.0, rel=1e-4)
        monkeypatch.setattr(bounds, "WHOLE_BUFFERS", 0)
        fractions = overhead_lower_bound(trace, 2000, SLOW)
        assert fractions.details["bound_us"] == pytest.approx(1840.0 / 33.0, rel=1e-4)
    else:  # the dual search charges the copy in against op 3 (590/11 us)
        assert bound.details["bound_us"] == pytest.approx(590.0 / 11.0, rel=1e-4)
    # a rematerialization must be entered by a recompute, never by nothing or a swap-in
    lost = dataclasses.replace(remat, actions=(RecomputeAction(1, 3),))
    assert validate_plan(trace, lost).rule == "entry"


def test_inputs_freed_by_the_op_after_the_peak_are_charged_to_a_recompute():
    """op:  0    1    2    3    4      (10 us each), budget 3000 bytes
    X:  [============)             op 0 makes X (1000 B), last used by op 2
    A:       [===================) op 1 makes A (2000 B) from X, uses 1 and 4
    C:                 [===)       3000 B, use 3: A is off the device at op 3
    X is alive when A is made, so A's price per buffer is its producer's 10 us (at most
    10 / 50 = 0.2 overhead); but a recompute of A after op 3 reads X after X's lifetime,
    and X (1000 B) cannot be rematerialized before op 3 and held across it (op 3 fills
    the budget): recomputing A costs 20 us there. Copies of A take 26 us each way."""
    trace = trace_of([10.0] * 5, Buffer(0, 1000, 0, 3, (0, 2), recompute=Recompute(0)),
                     Buffer(1, 2000, 1, 5, (1, 4), recompute=Recompute(1, (0,))),
                     Buffer(2, 3000, 3, 4, (3,)))
    from cupool.sim.bounds import recompute_us
    assert list(recompute_us(trace, [10.0] * 5)) == [10.0, 10.0, math.inf]
    remat = swap_plan(trace, [Residency(0, 0, 3, 2000), Residency(0, 4, 5, 2000),
                              Residency(1, 1, 3, 0), Residency(1, 4, 5, 0),
                              Residency(2, 3, 4, 0)],
                      [RecomputeAction(0, 4), RecomputeAction(1, 4)], budget=3000)
    report = validate_plan(trace, remat)
    assert report.valid, report.message
    simulated = simulate(trace, remat, SLOW)
    assert simulated.recompute_us == 20.0 and simulated.overhead == pytest.approx(0.4)
    bound = overhead_lower_bound(trace, 3000, SLOW)
    assert 0.2 < bound.overhead <= simulated.overhead


def test_a_rematerialization_is_shared_only_among_the_recomputes_that_charge_it():
    """op:  0    1    2    3    4      (10 us each), budget 3100 bytes
    X:  [============)             op 0 makes X (1000 B), last used by op 2
    A:       [===================) op 1 makes A (2000 B) from X, uses 1 and 4
    D:            [==)             op 2 makes D (100 B) from X, used there only
    C:                 [===)       3000 B, use 3: A is off the device at op 3
    Two recipes read X, so each is charged half of X's rematerialization per buffer. At
    op 3 only A can be recomputed (D is dead, and no chain reaches it): A's recompute
    after op 3 pays X's rematerialization whole, 20 us. Copies take 100 us per 1000 B."""
    link = cost_model(0.01)
    trace = trace_of([10.0] * 5, Buffer(0, 1000, 0, 3, (0, 2), recompute=Recompute(0)),
                     Buffer(1, 2000, 1, 5, (1, 4), recompute=Recompute(1, (0,))),
                     Buffer(2, 3000, 3, 4, (3,)),
                     Buffer(3, 100, 2, 3, (2,), recompute=Recompute(2, (0,))))
    from cupool.sim.bound_inputs import BufferArrays, recompute_us
    assert list(recompute_us(trace, [10.0] * 5)) == [10.0, 10.0, math.inf, 15.0]
    arrays = BufferArrays(trace, link)
    late, anywhere = arrays.chain_us(np.array([1]), 3, 100.0)
    assert (list(late), list(anywhere)) == ([10.0], [0.0])  # all of X, after op 3
    remat = swap_plan(trace, [Residency(0, 0, 3, 2000), Residency(0, 4, 5, 2000),
                              Residency(1, 1, 3, 0), Residency(1, 4, 5, 0),
                              Residency(2, 3, 4, 0), Residency(3, 2, 3, 3000)],
                      [RecomputeAction(0, 4), RecomputeAction(1, 4)], budget=3100)
    report = validate_plan(trace, remat)
    assert report.valid, report.message
    simulated = simulate(trace, remat, link)
    assert simulated.overhead == pytest.approx(0.4)
    bound = overhead_lower_bound(trace, 3100, link)
    # halving X's price (10 + 5 us for 1900 of A's 2000 bytes) would stay below 0.29
    assert 0.35 < bound.overhead <= simulated.overhead


def test_a_buffer_off_the_device_moves_whole(monkeypatch):
    """The hand trace above at 0.1 GB/s (2000 B copies in 23 us). At op 3, 1900 of A's 2000
    bytes must be off the device. In fractions, the cheapest mix copies part of A out while
    op 2 runs and back while op 4 does, and recomputes the rest (50 + 10.3 us); a plan has
    A off whole, recomputed (20 us after op 3: the plan's 0.4) or swapped (out after op 1
    ends, 23 us: op 3 starts at 43; in after op 3, 23 us: op 4 at 76)."""
    from cupool.sim.bound_inputs import BufferArrays
    from cupool.sim.op_alone import OpBound
    from cupool.sim.op_alone_lp import lp_value
    link = cost_model(0.1)
    trace = trace_of([10.0] * 5, Buffer(0, 1000, 0, 3, (0, 2), recompute=Recompute(0)),
                     Buffer(1, 2000, 1, 5, (1, 4), recompute=Recompute(1, (0,))),
                     Buffer(2, 3000, 3, 4, (3,)),
                     Buffer(3, 100, 2, 3, (2,), recompute=Recompute(2, (0,))))
    arrays = BufferArrays(trace, link)
    prefix = np.concatenate([[0.0], np.cumsum(link.op_times(trace))])
    candidates = np.array([1])
    op = OpBound(arrays, prefix, link.op_times(trace), 1, 3, candidates, 1900.0,
                 arrays.next_uses(candidates, 3), 0.0, 100.0)
    assert lp_value(op, prefix) == pytest.approx(60.3, abs=0.01)
    assert lp_value(op, prefix, whole=1) == pytest.approx(70.0, rel=1e-5)
    remat = swap_plan(trace, [Residency(0, 0, 3, 2000), Residency(0, 4, 5, 2000),
                              Residency(1, 1, 3, 0), Residency(1, 4, 5, 0),
                              Residency(2, 3, 4, 0), Residency(3, 2, 3, 3000)],
                      [RecomputeAction(0, 4), RecomputeAction(1, 4)], budget=3100)
    assert validate_plan(trace, remat).valid
    assert simulate(trace, remat, link).overhead == pytest.approx(0.4)
    assert overhead_lower_bound(trace, 3100, link).overhead == pytest.approx(0.4, rel=1e-5)
    import cupool.sim.bounds as bounds
    monkeypatch.setattr(bounds, "slots_bound_us", lambda *args: None)  # the op alone's
    bound = overhead_lower_bound(trace, 3100, link)
    assert bound.overhead == pytest.approx(0.4, rel=1e-5) and bound.details["method"] == "lp"


def test_a_recompute_at_an_op_is_priced_at_least_per_buffer():
    """At every op, each candidate's recompute (producer, chain rematerialized after the
    op, chain anywhere) costs at least its per-buffer price: the inputs freed by op
    ``i + 1`` include those freed by the candidate's start + 1, each priced at least as
    a recompute."""
    from cupool.planning.budget.recipes import with_recompute_recipes
    from cupool.planning.shapes import near_budget_trace
    from cupool.sim.bound_inputs import BufferArrays
    stricter = 0
    for trace in [near_budget_trace(0), *(load_trace(path) for path in TRACES[:3])]:
        trace = with_recompute_recipes(trace)
        arrays = BufferArrays(trace, SLOW)
        for i in range(0, trace.num_ops, max(1, trace.num_ops // 12)):
            alive = (arrays.pend_first <= i) & (i <= arrays.pend_last) & ~arrays.persistent
            alive[arrays.used_at[i] + arrays.born_temporary[i]] = False  # the candidates
            alive = np.flatnonzero(alive)
            late, anywhere = arrays.chain_us(alive, i, 0.0)
            per_op = arrays.producer_us[alive] + late + anywhere
            old = arrays.recompute[alive]
            assert np.all((per_op >= old * (1 - 1e-12)) | np.isinf(per_op)), trace.name
            stricter += int((per_op > old * (1 + 1e-9)).sum())
            # nothing fits beside the op: every freed input's producer runs after it
            late_all, rest = arrays.chain_us(alive, i, -1.0)
            assert np.allclose(np.nan_to_num(late_all + rest, posinf=-1.0),
                               np.nan_to_num(late + anywhere, posinf=-1.0))
    assert stricter > 0


def test_a_chain_at_an_op_costs_at_least_its_share_over_every_reader():
    """At every op, each (candidate, freed input) pair's price: shared among the readers
    that charge the input there (the chains walked) >= shared over the candidates and the
    readers freed by then (the chains not walked) >= shared over every reader."""
    from cupool.planning.budget.recipes import with_recompute_recipes
    from cupool.planning.shapes import near_budget_trace
    from cupool.sim.bound_inputs import BufferArrays, _readers, remat_us
    from cupool.sim.chain_shares import local_chains, outer_chains
    stricter = [0, 0]
    for trace in [near_budget_trace(0), near_budget_trace(1),
                  *(load_trace(path) for path in TRACES[:2])]:
        trace = with_recompute_recipes(trace)
        arrays = BufferArrays(trace, SLOW)
        remat = remat_us(trace, SLOW.op_times(trace))
        readers = _readers(trace)
        ids = [b.id for b in trace.buffers]
        for i in range(0, trace.num_ops, max(1, trace.num_ops // 10)):
            alive = (arrays.pend_first <= i) & (i <= arrays.pend_last)
            alive[arrays.used_at[i] + arrays.born_temporary[i]] = False
            inputs = np.array([x for j in np.flatnonzero(alive) for x in arrays.graph.inputs[j]
                               if arrays.graph.end[x] <= i + 1], dtype=np.int64)
            if not len(inputs):
                continue
            every = np.array([remat[x] / readers[ids[x]] for x in inputs])
            outer = outer_chains(arrays.outer, inputs, i)
            local = local_chains(arrays.graph, inputs, limit=len(trace.buffers))
            prices = [np.where(c.blocked, np.inf, c.producer + c.rest) for c in (outer, local)]
            for lower, higher, k in ((every, prices[0], 0), (prices[0], prices[1], 1)):
                assert np.all((higher >= lower * (1 - 1e-12)) | np.isinf(higher)), trace.name
                stricter[k] += int((higher > lower * (1 + 1e-9)).sum())
            assert local_chains(arrays.graph, inputs, limit=0) is None
    assert min(stricter) > 0


def test_bad_budget_is_named():
    trace = trace_of([1.0], Buffer(0, 8, 0, 1, (0,)))
    with pytest.raises(InputError, match=r"budget_bytes \(=0\)"):
        overhead_lower_bound(trace, 0)


def test_bundled_traces_bound_is_fast_and_monotone():
    for path in TRACES[:3]:
        trace = load_trace(path)
        lower = trace.lower_bound_bytes()
        previous = math.inf
        for fraction in (0.5, 0.7, 0.9, 1.0):
            bound = overhead_lower_bound(trace, int(lower * fraction))
            assert bound.overhead <= previous + 1e-12
            previous = bound.overhead


# -- soundness: random traces, random valid plans, the simulator as the judge ---------

def _bound_below_the_plan(trace, plan_, cost):
    """The plan is valid, the bound feasible and no higher than the plan's simulated
    overhead; returns the simulation."""
    report = validate_plan(trace, plan_)
    assert report.valid, report.message
    simulated = simulate(trace, plan_, cost, validate=False)
    bound = overhead_lower_bound(trace, plan_.capacity_bytes, cost)
    assert bound.feasible, bound.reason
    target(float(bound.overhead))  # steer the search toward plans where the bound bites
    assert bound.overhead <= simulated.overhead + 1e-9, (bound, simulated.summary())
    return simulated


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace_and_plan())
def test_bound_never_exceeds_a_valid_plans_overhead(case):
    simulated = _bound_below_the_plan(*case)
    plan_ = case[1]
    assert simulated.iteration_us == pytest.approx(
        simulated.ideal_us + simulated.recompute_us + simulated.stall_us)
    assert simulated.peak_bytes <= plan_.capacity_bytes


def test_recomputes_before_the_last_use_delay_the_copy_out_of_offloaded_state(monkeypatch):
    """op:  0    1    2    3    4      (2, then 10 us each: ideal 42 us), budget 1000 B,
    26 us per 1000-byte copy
    W:  persistent 1000 B used only at op 4 (optimizer state): off the device at ops 1
        and 2 since the iteration began (op 0 has no room for it), so copied out after op
        4: T >= 42 + 26 + R
    A:  [=============)   1000 B, uses 0 and 2; a fraction x is copied out after op 0 and
        back, the rest recomputed before op 2 (R = 2 (1 - x) us, before op 4)
    B:       [==)         1000 B, used at op 1
    At op 1: op 1 starts after A's copy out, the tail after every recompute, so
    T >= 2 + 26x + 10 + (26 + 26x) and T >= 42 + 26 + 2 (1 - x) (without charging R
    before op 4 the tail row would allow 68 us); and W's copy in, issued after op 1,
    precedes op 4, which its copy out follows: T >= 2 + 10 + 26 + 10 + 26 = 74 us. At
    op 2, which A fills, that chain starts at 12: T >= 84 us, the LP's bound.
    The memory-time bound finds the plan's 86 us: the 1000-byte arena holds A for ops 0-2
    (22 us, less 8 while recomputed: 2 us of extra compute) and B for op 1 (10 us) and W
    for its copies and op 4 (62 us): 1000 T >= 1000 (22 - 8 + 10 + 62)."""
    pytest.importorskip("scipy")
    link = cost_model(0.04, latency_us=1.0)
    trace = trace_of([2.0, 10.0, 10.0, 10.0, 10.0], Buffer(0, 1000, 0, 5, (4,), PERSISTENT),
                     Buffer(1, 1000, 0, 3, (0, 2), recompute=Recompute(0)),
                     Buffer(2, 1000, 1, 2, (1,)))
    assert overhead_lower_bound(trace, 1000, link).details["bound_us"] == pytest.approx(
        86.0, rel=1e-5)  # the whole iteration's program finds the plan's time too
    import cupool.sim.bounds as bounds
    monkeypatch.setattr(bounds, "slots_bound_us", lambda *args: None)
    bound = overhead_lower_bound(trace, 1000, link)
    assert bound.details["method"] == "memory-time"
    assert bound.details["bound_us"] == pytest.approx(86.0, rel=1e-5)
    from cupool.sim.bound_inputs import BufferArrays
    from cupool.sim.op_alone import OpBound
    from cupool.sim.op_alone_lp import lp_value
    arrays = BufferArrays(trace, link)
    prefix = [0.0, 2.0, 12.0, 22.0, 32.0, 42.0]
    # each op holds 1000 bytes of its own: no copy in fits beside it while it runs
    at_op_2 = OpBound(arrays, prefix, [2.0, 10.0, 10.0, 10.0, 10.0], 1, 2, [0], 1000.0,
                       arrays.next_uses([0], 2), room=0.0)
    assert lp_value(at_op_2, prefix) == pytest.approx(84.0, rel=1e-5)
    at_op_1 = OpBound(arrays, prefix, [2.0, 10.0, 10.0, 10.0, 10.0], 1, 1, [0, 1], 2000.0,
                       arrays.next_uses([0, 1], 1), room=0.0)
    assert lp_value(at_op_1, prefix) == pytest.approx(74.0, rel=1e-5)
    plan_ = swap_plan(trace, [Residency(0, 3, 5, 0), Residency(1, 0, 1, 0),
                              Residency(1, 2, 3, 0), Residency(2, 1, 2, 0)],
                      [RecomputeAction(1, 2), SwapIn(0, 3, 4), SwapOut(0, 4)], budget=1000)
    assert validate_plan(trace, plan_).valid
    assert simulate(trace, plan_, link).iteration_us == pytest.approx(86.0)


def test_offloaded_persistent_state_is_copied_out_after_its_last_use():
    """op:  0    1    2    3      (10 us each), budget 1000 bytes
    W:  persistent 1000 B used only at op 3 (like optimizer state in the step)
    A:  [==============)       1000 B, uses 0 and 2: W cannot be on the device at op 0
    W is off the device since the iteration began, so it is offloaded across the boundary
    and copied out again after op 3; at op 2 its copy in follows op 2 and op 3 that copy:
    the iteration cannot end before 30 + 13 + 10 + 13 us (the dual search: 40 + 13)."""
    trace = trace_of([10.0] * 4, Buffer(0, 1000, 0, 4, (3,), PERSISTENT),
                     Buffer(1, 1000, 0, 3, (0, 2)))
    offload = swap_plan(trace, [Residency(0, 3, 4, 0), Residency(1, 0, 3, 0)],
                        [SwapIn(0, 3, 3), SwapOut(0, 3)], budget=1000)
    report = validate_plan(trace, offload)
    assert report.valid, report.message
    simulated = simulate(trace, offload, SLOW)
    assert simulated.overhead == pytest.approx(26.0 / 40.0)  # 13 us in before op 3, 13 out
    bound = overhead_lower_bound(trace, 1000, SLOW)
    # the memory-time bound sees it too: W on the device for its copies and op 3 (36 us)
    # and A for ops 0-2 (30 us) leave T >= 66 in a 1000-byte arena
    expected = 13.0 if bound.details["method"] == "dual" else 26.0
    assert bound.overhead == pytest.approx(expected / 40.0, rel=1e-5)
    assert bound.overhead <= simulated.overhead


def _state_copied_out_after_op_0(op_us: float):
    """Five ops of ``op_us``, persistent W (1000 B) used only at op 4 and A (1000 B) at op
    2, budget 1000 B; and the valid plan that keeps W on the device across the boundary,
    copies it out after op 0 and back for op 4."""
    trace = trace_of([op_us] * 5, Buffer(0, 1000, 0, 5, (4,), PERSISTENT),
                     Buffer(1, 1000, 2, 3, (2,)))
    head = swap_plan(trace, [Residency(0, 0, 2, 0), Residency(1, 2, 3, 0),
                             Residency(0, 3, 5, 0)],
                     [SwapOut(0, 0), SwapIn(0, 3, 4)], budget=1000)
    report = validate_plan(trace, head)
    assert report.valid, report.message
    return trace, head


def test_state_kept_across_the_boundary_may_be_copied_out_early_in_the_iteration():
    """op:  0    1    2    3    4      (100 us each), budget 1000 bytes, 13 us per copy
    W:  persistent 1000 B used (written) only at op 4
    A:            [==)                1000 B, used at op 2: W is off the device there
    W need not be offloaded across the boundary (copied out after op 4, a tail nothing
    hides): it stays on the device from op 4 into the next iteration, is copied out
    after op 0 (hidden by op 1) and back after op 2 (hidden by op 3): no overhead. The
    bound must allow that plan; it once charged the tail copy (13 us) regardless."""
    trace, head = _state_copied_out_after_op_0(100.0)
    assert simulate(trace, head, SLOW).overhead == 0.0
    assert overhead_lower_bound(trace, 1000, SLOW).overhead == 0.0
    # when op 0 has no room for it, W did begin the iteration on the host: the tail binds
    crowded = trace_of([100.0] * 5, Buffer(0, 1000, 0, 5, (4,), PERSISTENT),
                       Buffer(1, 1000, 0, 3, (0, 2)))
    assert overhead_lower_bound(crowded, 1000, SLOW).overhead == pytest.approx(
        13.0 / 500.0, abs=1e-5)


def test_state_off_the_device_mid_step_is_copied_out_and_in_in_turn():
    """op:  0    1    2    3    4      (10 us each: ideal 50 us), budget 1000 bytes, 13 us
    per copy
    W:  persistent 1000 B used (written) only at op 4
    A:            [==)                1000 B, used at op 2: W is off the device there
    W's copy out lands before op 2 starts and its copy in, issued after op 2 ended, before
    op 4 starts: kept across the boundary, out after op 0 (op 2 starts at 23) and in after
    op 2 (op 4 starts at 46): 56 us. Offloaded across the boundary instead, its copy in
    precedes op 4 and its copy out follows it: 20 + 10 + 13 + 10 + 13 = 66 us. The bound
    once charged the copies in after op 2 against the whole rest of the step, not in
    front of op 4 (53 us)."""
    pytest.importorskip("scipy")
    trace, head = _state_copied_out_after_op_0(10.0)
    simulated = simulate(trace, head, SLOW)
    assert simulated.iteration_us == pytest.approx(56.0)
    bound = overhead_lower_bound(trace, 1000, SLOW)
    assert bound.details["method"] == "lp"
    assert bound.details["bound_us"] == pytest.approx(56.0, rel=1e-5)
    assert bound.overhead <= simulated.overhead


def test_no_copy_out_runs_before_op_0():
    """op 0 holds A and P; Q (used at op 1 only, like P) is off the device there, so it
    began the iteration on the host: the copy before op 0 that a head swap would need
    cannot exist, and the bound charges nothing for it (it once forced op 0 to start
    after op 1 had, 20 us against this plan's 18.1)."""
    trace = trace_of([5.0] * 3, Buffer(0, 4096, 0, 1, (0,)),
                     Buffer(1, 4096, 0, 3, (1,), PERSISTENT),
                     Buffer(2, 4096, 0, 3, (1,), PERSISTENT))
    offload = swap_plan(trace, [Residency(0, 0, 1, 4096), Residency(1, 1, 3, 4096),
                                Residency(2, 0, 3, 0)],
                        [SwapIn(1, 1, 1), SwapOut(1, 1)], budget=11059)
    report = validate_plan(trace, offload)
    assert report.valid, report.message
    cost = cost_model("gen5")
    assert overhead_lower_bound(trace, 11059, cost).overhead <= simulate(
        trace, offload, cost).overhead


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(written_trace_and_plan())
def test_with_writes_the_bound_never_exceeds_a_valid_plans_overhead(case):
    _bound_below_the_plan(*case)


def test_a_copy_in_flight_holds_its_whole_buffer(monkeypatch):
    """op:  0    1    2    3      (10 us each: ideal 40 us), budget 2000 bytes, 20 us per
    1000-byte copy
    W0..W3: read-only weights of 1000 B, Wi used at op i only: 2000 B are off the device
    at every op. Per op, those copies may overlap the other ops (the per-op bound: 60 us).
    But a weight being copied in holds its 1000 B for the whole copy: streamed, it is on
    the device for its copy and its op (30 us), kept for all of T. The arena holds
    2000 T byte-us; streaming Y weights (the relaxation allows fractions) needs
    1000 (4 T - Y (T - 30)) <= 2000 T with 20 Y <= T: T >= 70 us (Y = 3.5)."""
    pytest.importorskip("scipy")
    import cupool.sim.bounds as bounds

    link = cost_model(0.05, latency_us=0.0)
    trace = trace_of([10.0] * 4, *[Buffer(i, 1000, 0, 4, (i,), PERSISTENT, writes=())
                                   for i in range(4)])
    bound = overhead_lower_bound(trace, 2000, link)
    assert bound.details["method"] == "memory-time"
    assert bound.details["bound_us"] == pytest.approx(70.0, rel=1e-5)
    # every weight streamed, each copied in while the op before it runs
    streamed = swap_plan(trace, [Residency(0, 0, 1, 0), Residency(0, 3, 4, 0),
                                 Residency(1, 0, 2, 1000), Residency(2, 1, 3, 0),
                                 Residency(3, 2, 4, 1000)],
                         [SwapOut(0, 0, drop=True), SwapIn(0, 3, 3), SwapIn(1, 0, 1),
                          SwapOut(1, 1, drop=True), SwapIn(2, 1, 2), SwapOut(2, 2, drop=True),
                          SwapIn(3, 2, 3), SwapOut(3, 3, drop=True)], budget=2000)
    report = validate_plan(trace, streamed)
    assert report.valid, report.message
    assert bound.overhead <= simulate(trace, streamed, link).overhead
    monkeypatch.setattr(bounds, "memory_time_bound_us", lambda *args: None)
    monkeypatch.setattr(bounds, "several_peaks_bound_us", lambda *args: None)
    assert overhead_lower_bound(trace, 2000, link).details["bound_us"] == pytest.approx(
        60.0, rel=1e-5)


# -- several peaks: whole buffers, windows after each peak ----------------------------

def test_a_whole_copy_waits_where_a_fraction_would_fit(monkeypatch):
    """op:  0 (peak)  1   2 (uses W)      10 us each: ideal 30 us
    P: a 1500-byte temporary born and used at op 0; W: a read-only weight of 1500 bytes
    (30 us per copy), used at op 2; budget 2250 bytes: 750 bytes of W off the device at
    op 0. Per op, half of W's copy fits the 10 us of op 1 but for 5 us: 35 us. W is off
    whole, though: its copy starts after op 0 and op 2 waits 20 us for it (50 us). The
    several-peaks program states the wait per unit of W off (20 us x 1/2): 40 us; the
    op's own program with W moved whole, the plan's 50 us."""
    pytest.importorskip("scipy")
    import cupool.sim.bounds as bounds

    link = cost_model(0.05, latency_us=0.0)
    trace = trace_of([10.0] * 3, Buffer(0, 1500, 0, 3, (2,), PERSISTENT, writes=()),
                     Buffer(1, 1500, 0, 1, (0,)), Buffer(2, 100, 1, 2, (1,)))
    # the whole iteration's program finds the plan's 50 us too: W's copy cannot start
    # while op 0 holds P (the two exceed the budget), so it starts after op 0
    assert overhead_lower_bound(trace, 2250, link).details["bound_us"] == pytest.approx(
        50.0, rel=1e-5)
    monkeypatch.setattr(bounds, "slots_bound_us", lambda *args: None)
    # W is off the device at op 0 and comes back whole after it: the refill finds it too
    refill = overhead_lower_bound(trace, 2250, link)
    assert refill.details["method"] == "refill"
    assert refill.details["bound_us"] == pytest.approx(50.0, rel=1e-5)
    monkeypatch.setattr(bounds, "refill_bound", lambda *args: Refill(0.0))
    whole = overhead_lower_bound(trace, 2250, link)
    assert whole.details["method"] == "lp"
    assert whole.details["bound_us"] == pytest.approx(50.0, rel=1e-5)
    monkeypatch.setattr(bounds, "WHOLE_BUFFERS", 0)
    bound = overhead_lower_bound(trace, 2250, link)
    assert bound.details["method"] == "several-peaks"
    assert bound.details["bound_us"] == pytest.approx(40.0, rel=1e-5)
    assert "whole buffers" in bound.reason
    streamed = swap_plan(trace, [Residency(0, 1, 3, 0), Residency(1, 0, 1, 0),
                                 Residency(2, 1, 2, 1500)],
                         [SwapIn(0, 1, 2), SwapOut(0, 2, drop=True)], budget=2250)
    report = validate_plan(trace, streamed)
    assert report.valid, report.message
    simulated = simulate(trace, streamed, link)
    assert simulated.iteration_us == pytest.approx(50.0)
    assert bound.overhead <= whole.overhead <= simulated.overhead
    monkeypatch.setattr(bounds, "several_peaks_bound_us", lambda *args: None)
    assert overhead_lower_bound(trace, 2250, link).details["bound_us"] == pytest.approx(
        35.0, rel=1e-5)


def test_weights_streamed_through_several_peaks_are_copied_once_each(monkeypatch):
    """Three blocks, 10 us per op: op 2b reads weight b (read-only, 1000 bytes, 25 us per
    copy), op 2b + 1 is a peak with a 3000-byte temporary; budget 4000 bytes: two of the
    three weights are off the device at every peak. Per op, the 50 us of copies a peak
    needs overlap the other ops but for 5 us (65 us). Across the peaks, the weight the
    next op reads is off only if that op waits for its copy, so every weight is off at
    some peak and copied in once: 75 us of link, or waits. The relaxation of the several
    peaks' program lies between (70 us), and so does one op's program with whole weights
    (70 us); the planner's plan is no faster than it."""
    pytest.importorskip("scipy")
    import cupool.sim.bounds as bounds

    link = cost_model(0.04, latency_us=0.0)
    weights = [Buffer(b, 1000, 0, 6, (2 * b,), PERSISTENT, writes=()) for b in range(3)]
    peaks = [Buffer(3 + b, 3000, 2 * b + 1, 2 * b + 2, (2 * b + 1,)) for b in range(3)]
    trace = trace_of([10.0] * 6, *weights, *peaks)
    assert overhead_lower_bound(trace, 4000, link).details["bound_us"] == pytest.approx(
        70.0, rel=1e-5)
    monkeypatch.setattr(bounds, "WHOLE_BUFFERS", 0)
    bound = overhead_lower_bound(trace, 4000, link)
    assert bound.details["method"] == "several-peaks"
    assert bound.details["bound_us"] == pytest.approx(70.0, rel=1e-5)
    from cupool.planning.budget import plan_with_budget

    result = plan_with_budget(trace, 4000, "auto", link)
    report = validate_plan(result.trace, result.plan)
    assert report.valid, report.message
    assert bound.overhead <= simulate(result.trace, result.plan, link).overhead + 1e-9
    monkeypatch.setattr(bounds, "several_peaks_bound_us", lambda *args: None)
    assert overhead_lower_bound(trace, 4000, link).details["bound_us"] == pytest.approx(
        65.0, rel=1e-5)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streaming_trace_and_plan())
def test_with_weights_streamed_through_peaks_the_bound_never_exceeds_a_valid_plan(case):
    _bound_below_the_plan(*case)
