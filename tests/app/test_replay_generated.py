"""``replay`` of generated plans: the session's runner (synthetic ops filling and checking
every byte, the late-prefetch feedback between iterations) on every valid plan of a random
small trace, and on plans that read a buffer after its early copy out: no byte corrupt."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cupool.app.replay import ReplaySettings, replay
from tests.swap.test_engine_generated import early_copy_out_cases, engine_cases


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(engine_cases(), early_copy_out_cases()))
def test_generated_plans_replay_through_the_runner_byte_exact(case):
    trace, plan = case
    result = replay(trace, plan.capacity_bytes,
                    ReplaySettings(iterations=3, size_scale=1, time_scale=50.0),
                    plan=plan, plan_trace=trace)
    assert result["corrupt_bytes"] == 0
    assert len(result["iteration_us"]) == 3
    assert result["off_plan"] == [0, 0, 0]
