"""``segments-ga`` (segment reuse searched by a genetic algorithm): segments, migration
rule, GA operators, seeded determinism, and validated plans on a real trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cupool.check import validate_plan
from cupool.core.vocabulary import TEMPORARY, Buffer, Op, SolveStatus, Trace
from cupool.io import load_trace
from cupool.planning.budget import BudgetParams, plan_with_budget
from cupool.planning.budget.segments_ga import SegmentProblem, _crossover, _mutate
from cupool.sim import cost_model, simulate

TRACES = Path(__file__).resolve().parents[2] / "cupool" / "data" / "traces"
GEN5 = cost_model("gen5")
FAST = BudgetParams(population=6, generations=6, stall_generations=3, time_limit_s=5.0)


def _tiny():
    """Two big buffers and one smaller one, each with an idle gap::

        op:      0   1   2   3   4   5   6   7
        a (400)  u           u                      gap (0, 3)
        b (400)          u           u              gap (2, 5)
        c (300)      u                       u      gap (1, 7)
        s (8)    u   u   u   u   u   u   u   u      small: static region
    """
    ops = tuple(Op(f"op{i}", 10.0) for i in range(8))
    buffers = (Buffer(0, 400, 0, 4, (0, 3), TEMPORARY),
               Buffer(1, 400, 2, 6, (2, 5), TEMPORARY),
               Buffer(2, 300, 1, 8, (1, 7), TEMPORARY),
               Buffer(3, 8, 0, 8, tuple(range(8)), TEMPORARY))
    return Trace("tiny", ops, buffers)


def test_segments_come_from_the_largest_objects_within_the_budget():
    problem = SegmentProblem(_tiny(), 900, small_fraction=0.05)
    assert problem.region_bytes == 8  # s alone: 8 <= 0.05 * 900
    assert [b.id for b in problem.objects] == [0, 1, 2]
    assert problem.segment_bytes.tolist() == [400, 400]  # 400 + 400 + 300 > 892
    assert problem.fits.tolist() == [2, 2, 2]


def test_a_gap_migrates_when_another_object_of_its_segment_is_accessed_inside_it():
    problem = SegmentProblem(_tiny(), 900, small_fraction=0.05)
    # a and b share segment 0: b's use at 2 lies in a's gap (0, 3); a's use at 3 in b's (2, 5)
    together = np.array([0, 0, 1])
    assert problem.fitness(together) == (0, 800)
    assert sorted(problem.migrated_gaps(together)) == [(0, 0, 3), (1, 2, 5)]
    # a and c share segment 0: c's use at 1 is inside a's gap; a's uses inside c's gap
    assert problem.fitness(np.array([0, 1, 0])) == (0, 700)


def test_two_objects_accessed_at_the_same_op_clash():
    trace = _tiny()
    buffers = (*trace.buffers[:2], Buffer(2, 300, 0, 8, (0, 7), TEMPORARY), trace.buffers[3])
    problem = SegmentProblem(Trace("clash", trace.ops, buffers), 900, small_fraction=0.05)
    clashes, _migrated = problem.fitness(np.array([0, 1, 0]))
    assert clashes == 1  # a and c both use op 0 in segment 0


def test_crossover_and_mutation_respect_segment_sizes():
    rng = np.random.default_rng(3)
    problem = SegmentProblem(load_trace(TRACES / "resnet50_train_b32_bf16.trace.json.gz"),
                             600 * 2**20, small_fraction=0.3)
    assert problem.solvable
    parents = [problem.random_assignment(rng) for _ in range(2)]
    for _ in range(20):
        child = _crossover(parents[0].copy(), parents[1], int(rng.integers(0, problem.k)))
        _mutate(problem, child, 0.3, rng)
        assert np.all(child < problem.fits) and np.all(child >= 0)


@pytest.fixture(scope="module")
def resnet_ga():
    trace = load_trace(TRACES / "resnet50_train_b32_bf16.trace.json.gz")
    budget = int(trace.lower_bound_bytes() * 0.7)
    return trace, budget, plan_with_budget(trace, budget, "segments-ga", GEN5, FAST)


def test_real_trace_plan_is_valid(resnet_ga):
    _trace, budget, result = resnet_ga
    plan = result.plan
    assert plan.status == SolveStatus.FEASIBLE, result.reason
    assert validate_plan(result.trace, plan).valid
    assert plan.arena_bytes <= budget
    assert simulate(result.trace, plan, GEN5).feasible
    assert plan.stats["segments"] > 0


def test_same_seed_same_plan(resnet_ga):
    trace, budget, result = resnet_ga
    plan = result.plan
    again = plan_with_budget(trace, budget, "segments-ga", GEN5, FAST).plan
    assert again.residencies == plan.residencies and again.actions == plan.actions
