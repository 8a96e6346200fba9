"""The dual search of each op alone runs its settings (``theta``, ``split``, release
threshold) side by side; each must find, to the last bit, what a golden section of that
setting alone finds."""

from __future__ import annotations

import numpy as np

from cupool.planning.shapes import (
    TINY_BYTES,
    near_budget_trace,
    persistent_heavy,
    recurrent_trace,
    tiny_trace,
)
from cupool.sim import cost_model, overhead_lower_bound
from cupool.sim.op_alone import OpBound, _golden_max, _knapsack, _knapsacks


def _one_setting(bound: OpBound, lane) -> tuple[float, float, float]:
    """``(value, mu, lam)`` of one setting, searched alone with :meth:`OpBound.value`."""
    bound.theta, bound.threshold = lane.theta, lane.threshold

    def over_lam(mu, evaluations=12):
        return _golden_max(lambda lam: bound.value(mu, lam, lane.split), evaluations)

    value, mu = _golden_max(lambda mu: over_lam(mu)[0], 12)
    more, lam = over_lam(mu, 40)
    return float(max(value, more)), float(mu), float(lam)


CASES = [
    (tiny_trace(5), 3 * TINY_BYTES, cost_model(0.05, latency_us=0.0)),
    (recurrent_trace(6, layers=2, batch=16, inputs=256, hidden=256), 0.3,
     cost_model(55.0, latency_us=50.0, pageable_latency_us=50.0)),
    (near_budget_trace(0), 0.7, cost_model("gen4")),
    (persistent_heavy(), 0.5, cost_model("gen5")),
]


def test_settings_searched_side_by_side_find_what_each_finds_alone(monkeypatch):
    searched = OpBound._search
    seen = []

    def checked(bound, lanes):
        found = searched(bound, lanes)
        assert found == [_one_setting(bound, lane) for lane in lanes]
        seen.extend(lanes)
        return found

    monkeypatch.setattr(OpBound, "_search", checked)
    for trace, budget, cost in CASES:
        budget_bytes = budget if isinstance(budget, int) else int(
            budget * trace.lower_bound_bytes())
        assert overhead_lower_bound(trace, budget_bytes, cost).feasible
    # the cases reach both weights of the copies during the op, both splits, and
    # several release thresholds
    assert {lane.theta for lane in seen} == {0.0, 1.0}
    assert {lane.split for lane in seen} == {0.0, 1.0}
    assert len({lane.threshold for lane in seen}) > 1


def test_knapsacks_of_rows_are_each_rows_knapsack():
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 50, 40).astype(np.float64)
    costs = rng.choice([0.5, 1.0, 2.0, 3.25], size=(6, 40))  # ties: the order is stable
    for need in (0.0, 1.0, 37.5, float(sizes.sum()) - 0.5, float(sizes.sum()) + 10):
        rows = _knapsacks(costs, sizes, need)
        assert list(rows) == [_knapsack(row, sizes, need) for row in costs]
    assert list(_knapsacks(np.zeros((3, 0)), np.zeros(0), 5.0)) == [0.0, 0.0, 0.0]
