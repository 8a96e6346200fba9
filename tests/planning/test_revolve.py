"""The ``revolve`` policy: binomial checkpointing of a chain, nested recomputes in the plan
(ephemeral residencies), checked by the validator, the simulator and the swap engine."""

from __future__ import annotations

import heapq
import time
from dataclasses import replace
from math import comb

import numpy as np
import pytest

from cupool.check import validate_plan
from cupool.core.vocabulary import RecomputeAction, SolveStatus
from cupool.planning.budget import BudgetParams, plan_with_budget
from cupool.planning.budget.chain import find_chain
from cupool.planning.budget.chain_traces import adjoint_trace
from cupool.planning.budget.revolve import build, largest_fitting, plan_revolve, revolve_table
from cupool.planning.budget.revolve_tables import UNREACHABLE, units_table, weighted_table
from cupool.planning.budget.searched_schedule import SCHEDULE_SEARCHED
from cupool.sim.cost import cost_model
from cupool.sim.simulator import simulate
from tests.bench_modules import load_bench

MIB = 1 << 20


def revolve_formula(steps: int, checkpoints: int) -> int:
    """Griewank and Walther's fewest forward steps: r·l − C(s + r, s + 1), r least with
    C(s + r, s) >= l."""
    r = 1
    while comb(checkpoints + r, checkpoints) < steps:
        r += 1
    return r * steps - comb(checkpoints + r, checkpoints + 1)


units_optimum = load_bench("chains").units_optimum  # the benchmark's own plain recursion


def planned_optimum(stats: dict, states: int) -> int:
    """The fewest recomputes of the model the plan chose, with its slots or units."""
    if stats["revolve_model"] == "units":
        return int(units_optimum(states, stats["revolve_units"])) - states
    if stats["revolve_model"] == "units (light turn)":  # the sweep keeps the last state only
        return int(units_optimum(states - 1, stats["revolve_units"]))
    return revolve_formula(states + 1, stats["revolve_slots"] + 1) - states


def test_table_is_revolves_optimum():
    cost, _advance = revolve_table(60, 20)
    for states in range(1, 61):
        for slots in range(0, 21):
            assert cost[states, slots] == revolve_formula(states + 1, slots + 1)
    assert revolve_formula(48, 13) == 81 and revolve_formula(48, 3) == 170
    in_units, _advance = units_table(40, 12)
    for states in range(0, 41):
        for units in range(0, 13):
            expected = units_optimum(states, units)
            assert (in_units[states, units] >= UNREACHABLE if expected == float("inf")
                    else in_units[states, units] == expected)
            if units >= 2:
                assert in_units[states, units] <= cost[states, units - 2] if units - 2 <= 20 \
                    else True


def exhaustive_units_optimum(states: int, units: int, step_us=None) -> float:
    """The fewest steps (with ``step_us``: the least time) of any schedule at all in the
    units model, by a shortest-path search over (states held, next state the reverse sweep
    reads): a step makes ``x_t`` from a held ``x_{t-1}`` (the root is always there) when
    ``t`` fits beside what is held; a held state may be dropped or, when it is next,
    read."""
    step_us = step_us or [1] * states
    start = (frozenset(), states)
    best = {start: 0}
    queue = [(0, 0, start)]
    pushed = 0
    while queue:
        steps, _, (held, reading) = heapq.heappop(queue)
        if best[(held, reading)] < steps:
            continue
        if reading == 0:
            return steps
        moves = [(steps, (held - {h}, reading)) for h in held]
        if reading in held:
            moves.append((steps, (held - {reading}, reading - 1)))
        moves += [(steps + step_us[a], (held | {a + 1}, reading)) for a in (0, *held)
                  if a + 1 <= reading and a + 1 not in held and len(held) < units]
        for cost, state in moves:
            if cost < best.get(state, float("inf")):
                best[state] = cost
                pushed += 1
                heapq.heappush(queue, (cost, pushed, state))
    return float("inf")


def test_the_units_recursion_is_the_optimum_of_every_schedule_on_short_chains():
    in_units, _advance = units_table(8, 5)
    for states in range(1, 9):
        for units in range(1, 6):
            found = exhaustive_units_optimum(states, units)
            table = in_units[states, units]
            assert (table >= UNREACHABLE) if found == float("inf") else table == found


def test_the_weighted_recursion_is_the_optimum_of_every_schedule_on_short_chains():
    rng = np.random.default_rng(7)
    for states in range(2, 8):
        step_us = [float(w) for w in rng.integers(1, 9, states)]
        table = weighted_table(step_us, 5, True)
        for units in range(1, 6):
            found = exhaustive_units_optimum(states, units, step_us)
            assert table.cost[0, states, units] == pytest.approx(found)


def test_steps_of_unequal_cost_get_the_schedule_of_least_time():
    base = adjoint_trace(16, MIB)
    ops = tuple(replace(op, duration_us=100.0) if op.name in {"f4", "f8", "f12"} else op
                for op in base.ops)  # three forward steps cost ten of the others
    trace = replace(base, ops=ops)
    cost = cost_model("gen5")
    chain = find_chain(trace)
    for slots in (1, 2):  # (at the floor the fewest steps are also the least time)
        budget = _budget_for(trace, slots)
        result = plan_revolve(trace, budget, cost, BudgetParams(), time.perf_counter())
        assert result.feasible and validate_plan(result.trace, result.plan).valid
        op_us = cost.op_times(trace)
        spent = sum(op_us[trace.buffer(a.buffer_id).recompute.op]
                    for a in result.plan.actions if isinstance(a, RecomputeAction))
        uniform = [largest_fitting(trace, chain, budget, BudgetParams(), units=units)[0]
                   for units in (False, True)]
        least = min(sum(op_us[trace.buffer(a.buffer_id).recompute.op] for a in b.actions
                        if isinstance(a, RecomputeAction)) for b in uniform if b is not None)
        assert spent < 0.9 * least  # the fewest steps re-run an expensive one more often
        assert simulate(result.trace, result.plan, cost).recompute_us == pytest.approx(spent)


def _budget_for(trace, slots):
    """The budget the schedule with ``slots`` slots needs (its peak on the validator's
    clock)."""
    return build(trace, find_chain(trace), slots).peak_bytes


@pytest.mark.parametrize("slots", [0, 2, 4, 7, 12])
def test_forward_steps_are_revolves_at_every_budget(slots):
    trace = adjoint_trace(48, MIB)
    result = plan_revolve(trace, _budget_for(trace, slots), cost_model("gen5"),
                          BudgetParams(), time.perf_counter())
    assert result.feasible, result.reason
    assert validate_plan(result.trace, result.plan).valid
    stats = result.plan.stats
    # 47 states read back (x1 .. x47); the sweep's 48th step (x48) is no state
    assert stats["revolve_recomputes"] == planned_optimum(stats, 47)
    # never more steps than revolve's with the slots the budget was made for; at the
    # smaller budgets (`slots` slots' bytes hold slots + 2 units) a units schedule re-runs
    # fewer
    forward = 47 + stats["revolve_recomputes"]
    assert forward <= revolve_formula(48, slots + 1)
    if slots < 7:
        assert stats["revolve_model"] == "units"
        assert forward == units_optimum(47, slots + 2) < revolve_formula(48, slots + 1)
    recomputes = sum(isinstance(a, RecomputeAction) for a in result.plan.actions)
    assert recomputes == stats["revolve_recomputes"]
    ephemeral = [r for r in result.plan.residencies if r.start == r.end]
    assert (len(ephemeral) > 0) == (stats["revolve_recomputes"] > 47 - slots - 1)
    report = simulate(result.trace, result.plan, cost_model("gen5"))
    assert report.recompute_us == pytest.approx(10.0 * stats["revolve_recomputes"])


def test_auto_keeps_revolve_when_the_link_is_slow():
    trace = adjoint_trace(32, MIB, step_us=200.0)
    cost = replace(cost_model("gen5"), h2d_gbps=0.5, d2h_gbps=0.5)  # a copy: ~10 steps
    result = plan_with_budget(trace, int(trace.lower_bound_bytes() * 0.3), "auto", cost)
    # revolve's plan, or that plan made faster by the search over its schedule
    assert result.member in ("revolve", f"revolve, {SCHEDULE_SEARCHED}")
    assert validate_plan(result.trace, result.plan).valid
    assert isinstance(result.candidates["on-demand"], float)
    assert result.candidates["revolve"] < result.candidates["on-demand"]


def test_auto_weighs_revolve_only_on_traces_up_to_its_buffer_limit():
    from cupool.planning.budget.auto import members

    trace = adjoint_trace(16, MIB)
    budget, cost = int(trace.lower_bound_bytes() * 0.5), cost_model("gen5")
    names = [m.name for m in members(trace, budget, cost, BudgetParams())]
    assert {"revolve", "revolve(two levels)"} <= set(names)
    small = BudgetParams(revolve_max_buffers=len(trace.buffers) - 1)
    assert not any(m.name.startswith("revolve") for m in members(trace, budget, cost, small))


def test_an_op_not_recomputable_splits_the_chain():
    trace = adjoint_trace(24, MIB, not_recomputable=(10,))
    result = plan_revolve(trace, _budget_for(trace, 3) + 2 * MIB, cost_model("gen5"),
                          BudgetParams(), time.perf_counter())
    assert result.feasible, result.reason
    assert validate_plan(result.trace, result.plan).valid
    assert result.plan.stats["revolve_forced"] == ["op 9 (f10) is not recomputable"]
    assert 10 not in {a.buffer_id for a in result.plan.actions
                      if isinstance(a, RecomputeAction)}


def test_a_budget_below_one_checkpoint_names_the_op_and_bytes():
    trace = adjoint_trace(16, MIB)
    floor = _budget_for(trace, 0)
    result = plan_revolve(trace, floor - 1, cost_model("gen5"), BudgetParams(),
                          time.perf_counter())
    assert not result.feasible and result.plan.status == SolveStatus.INFEASIBLE
    assert "\n" not in result.reason
    assert result.reason.startswith("revolve: op ") and f"needs {floor} bytes" in result.reason
    assert f"the budget is {floor - 1} bytes" in result.reason
    assert plan_revolve(trace, floor, cost_model("gen5"), BudgetParams(),
                        time.perf_counter()).feasible


def _cli(*argv):
    import io

    from cupool.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main([str(a) for a in argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_the_cli_refuses_a_budget_below_one_checkpoint_with_one_line(tmp_path):
    from cupool.io import save_trace

    trace = adjoint_trace(8, 4096)
    save_trace(trace, tmp_path / "chain.json")
    floor = _budget_for(trace, 0)
    code, out, err = _cli("simulate", tmp_path / "chain.json", "--policy", "revolve",
                          "--budget", floor - 1)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"needs {floor} bytes" in err and f"the budget is {floor - 1} bytes" in err
    assert err.startswith("cupool: error: revolve: op ") and "(b" in err  # an adjoint op
    code, out, _ = _cli("simulate", tmp_path / "chain.json", "--policy", "revolve",
                        "--budget", floor)
    assert code == 0 and "revolve" in out


def test_the_cli_says_why_two_levels_found_nothing(tmp_path):
    from cupool.io import save_trace

    trace = adjoint_trace(8, 4096)
    save_trace(trace, tmp_path / "chain.json")
    code, out, _ = _cli("simulate", tmp_path / "chain.json", "--policy",
                        "revolve-two-level", "--budget", _budget_for(trace, 0) - 1)
    assert code == 1 and "no slot count fits" in out and len(out.strip().splitlines()) == 1


def test_a_trace_without_a_chain_has_no_plan():
    from cupool.core.vocabulary import Buffer
    from tests.swap_cases import trace_of

    trace = trace_of([10.0] * 4, Buffer(0, 64, 0, 2, (0, 1)), Buffer(1, 64, 1, 4, (1, 2, 3)))
    result = plan_revolve(trace, 128, cost_model("gen5"), BudgetParams(), time.perf_counter())
    assert not result.feasible and "no chain" in result.reason


def test_plan_round_trips_through_json(tmp_path):
    from cupool.io import load_plan, save_plan

    trace = adjoint_trace(12, 4096)
    result = plan_revolve(trace, _budget_for(trace, 1), cost_model("gen5"), BudgetParams(),
                          time.perf_counter())
    save_plan(result.plan, tmp_path / "plan.json", result.trace)
    loaded = load_plan(tmp_path / "plan.json", result.trace)
    assert loaded.residencies == result.plan.residencies
    assert loaded.actions == result.plan.actions


@pytest.mark.parametrize("slots", [0, 2])
def test_the_engine_runs_nested_recomputes_byte_exact(slots):
    from cupool.devices import open_device
    from cupool.swap.engine import EngineSettings
    from cupool.swap.patterns import PatternEngine

    trace = adjoint_trace(10, 64 * 1024, step_us=20.0)
    result = plan_revolve(trace, _budget_for(trace, slots), cost_model("gen5"),
                          BudgetParams(), time.perf_counter())
    assert result.plan.stats["revolve_recomputes"] == planned_optimum(result.plan.stats, 9)
    with open_device("emulated") as device, PatternEngine(
            result.trace, result.plan, device, EngineSettings(size_scale=64)) as engine:
        for iteration in range(2):
            run = engine.run_iteration(iteration)
            assert (run.corrupt_bytes, run.off_plan) == (0, 0)
            assert run.bytes_checked > 0


def test_two_levels_copy_checkpoints_when_the_link_keeps_up():
    from cupool.core.vocabulary import SwapOut
    from cupool.planning.budget.revolve import plan_revolve_two_level

    cost = cost_model("gen5")
    step_us = cost.copy_us(MIB, "h2d")  # a copy of a state takes one step
    trace = adjoint_trace(32, MIB, step_us=step_us)
    budget = _budget_for(trace, 1)
    one = plan_revolve(trace, budget, cost, BudgetParams(), time.perf_counter())
    two = plan_revolve_two_level(trace, budget, cost, BudgetParams(), time.perf_counter())
    assert two.feasible, two.reason
    assert validate_plan(two.trace, two.plan).valid
    assert any(isinstance(a, SwapOut) for a in two.plan.actions)
    assert (simulate(two.trace, two.plan, cost).iteration_us
            < simulate(one.trace, one.plan, cost).iteration_us)


def test_the_engine_runs_two_levels_byte_exact():
    from cupool.devices import open_device
    from cupool.planning.budget.revolve import plan_revolve_two_level
    from cupool.swap.engine import EngineSettings
    from cupool.swap.patterns import PatternEngine

    cost = cost_model("gen5")
    trace = adjoint_trace(12, 64 * 1024, step_us=cost.copy_us(64 * 1024, "h2d") / 3)
    result = plan_revolve_two_level(trace, _budget_for(trace, 2), cost, BudgetParams(),
                                    time.perf_counter())
    assert result.feasible and result.plan.stats["revolve_host"]
    with open_device("emulated") as device, PatternEngine(
            result.trace, result.plan, device, EngineSettings(size_scale=64)) as engine:
        for iteration in range(2):
            run = engine.run_iteration(iteration)
            assert (run.corrupt_bytes, run.off_plan) == (0, 0)
