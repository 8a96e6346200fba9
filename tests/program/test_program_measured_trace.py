"""The measured trace: each op's observed duration, the recomputes before it left out (the
simulator adds a recompute's cost itself, so counting it in the op too would count it
twice), typical over the planned iterations (medians scaled to the median total)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import cupool
from cupool.core.vocabulary import RecomputeAction
from cupool.program.errors import ProgramError
from cupool.program.runner import typical_op_us
from cupool.sim.simulator import simulate

SLOW_S = 0.02
N = 16 * 1024


def _slow_spread(seed, out):
    time.sleep(SLOW_S)
    out[...] = seed[0]


def _fill(seed, out):
    out[...] = seed[1]


def _add(a, b, out):
    np.add(a, b, out=out)


def test_an_op_after_a_recompute_is_measured_without_the_recompute():
    """On a very slow link the plan recomputes the slow op's output before its last use
    instead of swapping it; that op's measured duration must not hold the 20 ms."""
    with cupool.Session("80%", device="emulated", link=0.001) as session:
        seed = session.register("seed", np.arange(4, dtype=np.float32))
        for _ in range(4):
            with session.iteration() as it:
                y = it.op(_slow_spread, seed, out=((N,), "float32"), name="slow")
                z = it.op(_fill, seed, out=((N,), "float32"), name="z")
                w = it.op(_add, z, z, out=((N,), "float32"), name="w")
                u = it.op(_add, w, z, out=((N,), "float32"), name="u")
                v = it.op(_add, u, y, out=((N,), "float32"), name="v")
                total = it.fetch(v)
            assert np.all(total.value == 3.0)
        plan, cost = session.plan, session.cost
        measured = session.measured_trace()
    recomputes = [a for a in plan.actions if isinstance(a, RecomputeAction)]
    assert [a.before_op for a in recomputes] == [4]
    durations = [op.duration_us for op in measured.ops]
    assert durations[0] >= SLOW_S * 1e6  # the slow op itself
    assert durations[4] < SLOW_S * 1e6 / 2  # the op after its recompute: not the recompute
    # the simulator counts the recompute once: about two slow ops, not three
    assert simulate(measured, plan, cost, validate=False).iteration_us < 2.5 * SLOW_S * 1e6


def test_typical_op_times_are_the_medians_scaled_to_the_median_iterations_total():
    """Three iterations, each with one slow op (a different one each time): the medians
    (10, 20, 30) add up to 60, the iterations to 160, 70 and 65 (median 70)."""
    runs = [(110.0, 20.0, 30.0), (10.0, 30.0, 30.0), (10.0, 20.0, 35.0)]
    typical = typical_op_us(runs)
    assert typical == pytest.approx((10 * 70 / 60, 20 * 70 / 60, 30 * 70 / 60))
    assert sum(typical) == pytest.approx(70.0)
    assert typical_op_us([(1.0, 2.0)]) == (1.0, 2.0)
    assert typical_op_us([(0.0, 0.0), (0.0, 0.0)]) == (0.0, 0.0)
    with pytest.raises(ProgramError, match="no iteration"):
        typical_op_us([])
