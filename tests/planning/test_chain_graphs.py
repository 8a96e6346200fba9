"""Chains inside larger graphs: states of several buffers, side inputs, a temporary root,
and what stays off the chain, each a hand-written program; revolve plans them, the
validator checks every plan, and the engine runs one byte exact."""

from __future__ import annotations

import time

import numpy as np
import pytest

from cupool.check import validate_plan
from cupool.core.vocabulary import PERSISTENT, Buffer, Op, Recompute, RecomputeAction, Trace
from cupool.planning.budget import BudgetParams
from cupool.planning.budget.chain import find_chain
from cupool.planning.budget.chain_traces import adjoint_trace
from cupool.planning.budget.revolve import build, plan_revolve
from cupool.sim.chain_bound import chain_recompute_bound, revolve_steps
from cupool.sim.cost import cost_model
from tests.planning.test_revolve import planned_optimum

S = 4096


def program(ops, buffers, name="hand"):
    """A trace from ``ops`` (``(name, phase)``) and ``buffers``: ``(name, made by, read by,
    recipe inputs or None, kind)``, op and buffer names; a temporary is made by its first
    op and lives to its last; a persistent one lives through every op. Every buffer is
    ``S`` bytes, every op 10 µs."""
    index = {op: i for i, (op, _phase) in enumerate(ops)}
    ids = {b[0]: i for i, b in enumerate(buffers)}
    n = len(ops)
    out = []
    for i, (name_, made, read, inputs, kind) in enumerate(buffers):
        uses = sorted({index[made], *(index[r] for r in read)})
        recipe = None if inputs is None else Recompute(index[made],
                                                       tuple(ids[x] for x in inputs))
        start, end = (0, n) if kind == PERSISTENT else (uses[0], uses[-1] + 1)
        out.append(Buffer(i, S, start, end, tuple(uses), kind, name_, recompute=recipe))
    return Trace(name, tuple(Op(op, 10.0, phase=phase) for op, phase in ops), tuple(out))


def reaction_program(length):
    """Each step makes a reaction term ``r_j`` from ``x_{j-1}`` and the state ``x_j`` from
    both; the adjoint step ``b_j`` reads ``x_{j-1}`` and ``r_j``: states of two buffers."""
    ops = []
    for j in range(1, length + 1):
        ops += [(f"r{j}", "fw"), (f"f{j}", "fw")]
    ops += [("loss", "fw"), ("dloss", "bw")] + [(f"b{j}", "bw") for j in range(length, 0, -1)]
    ops += [("update", "opt")]
    buffers = [("x0", "f1", ["r1", "b1", "update"], None, PERSISTENT)]
    for j in range(1, length + 1):
        after = [f"r{j + 1}", f"f{j + 1}", f"b{j + 1}"] if j < length else ["loss", "dloss"]
        buffers += [(f"r{j}", f"r{j}", [f"f{j}", f"b{j}"], [f"x{j - 1}"], "temporary"),
                    (f"x{j}", f"f{j}", after, [f"x{j - 1}", f"r{j}"], "temporary")]
    buffers += [(f"lam{length}", "dloss", [f"b{length}"], [f"x{length}"], "temporary")]
    for j in range(length, 0, -1):
        reader = f"b{j - 1}" if j > 1 else "update"
        buffers += [(f"lam{j - 1}", f"b{j}", [reader], [f"lam{j}", f"x{j - 1}", f"r{j}"],
                     "temporary")]
    return program(ops, buffers, "reaction")


def leapfrog_program(length):
    """``x_{j+1}`` from ``x_j`` and ``x_{j-1}`` (a second-order scheme); ``b_j`` reads both."""
    ops = [(f"f{j}", "fw") for j in range(1, length + 1)]
    ops += [("dloss", "bw")] + [(f"b{j}", "bw") for j in range(length, 0, -1)]
    ops += [("update", "opt")]
    buffers = [("x0", "f1", ["f2", "b1", "b2", "update"], None, PERSISTENT)]
    for j in range(1, length + 1):
        reads = [f"f{k}" for k in (j + 1, j + 2) if k <= length]
        reads += [f"b{k}" for k in (j + 1, j + 2) if k <= length] or ["dloss"]
        inputs = [f"x{j - 1}"] + ([f"x{j - 2}"] if j >= 2 else [])
        buffers += [(f"x{j}", f"f{j}", reads, inputs, "temporary")]
    buffers += [(f"lam{length}", "dloss", [f"b{length}"], [f"x{length}"], "temporary")]
    for j in range(length, 0, -1):
        reader = f"b{j - 1}" if j > 1 else "update"
        inputs = [f"lam{j}", f"x{j - 1}"] + ([f"x{j - 2}"] if j >= 2 else [])
        buffers += [(f"lam{j - 1}", f"b{j}", [reader], inputs, "temporary")]
    return program(ops, buffers, "leapfrog")


def _revolve(trace, slots):
    chain = find_chain(trace)
    budget = build(trace, chain, slots).peak_bytes
    result = plan_revolve(trace, budget, cost_model("gen5"), BudgetParams(),
                          time.perf_counter())
    assert result.feasible, result.reason
    assert validate_plan(result.trace, result.plan).valid
    return chain, result


def _names(trace, chain):
    return [tuple(trace.buffer(b).name for b in x.buffer_ids) for x in chain.states]


def test_a_step_of_two_buffers_is_one_state():
    trace = reaction_program(8)
    chain = find_chain(trace)
    names = _names(trace, chain)
    # x1 reads only r1 (x0 is persistent): it opens a state; then each step is one
    assert names[:4] == [("r1",), ("x1",), ("r2", "x2"), ("r3", "x3")]
    assert names[-1] == ("r8",) and len(names) == 9 and not chain.kept
    for slots in (0, 2):
        chain, result = _revolve(trace, slots)
        stats = result.plan.stats
        assert stats["revolve_recomputes"] == planned_optimum(stats, len(chain.states))


def observed_program(length):
    """4D-Var with an observation at every step: ``o_j`` makes the misfit ``d_j`` from
    ``x_j``; the adjoint step ``b_j`` reads ``x_{j-1}`` and ``d_j``."""
    ops = []
    for j in range(1, length + 1):
        ops += [(f"f{j}", "fw"), (f"o{j}", "fw")]
    ops += [("dloss", "bw")] + [(f"b{j}", "bw") for j in range(length, 0, -1)]
    ops += [("update", "opt")]
    buffers = [("x0", "f1", ["b1", "update"], None, PERSISTENT)]
    for j in range(1, length + 1):
        after = [f"f{j + 1}", f"b{j + 1}"] if j < length else ["dloss"]
        buffers += [(f"x{j}", f"f{j}", [f"o{j}", *after], [f"x{j - 1}"], "temporary"),
                    (f"d{j}", f"o{j}", [f"b{j}"], [f"x{j}"], "temporary")]
    buffers += [(f"lam{length}", "dloss", [f"b{length}"], [f"x{length}"], "temporary")]
    for j in range(length, 0, -1):
        reader = f"b{j - 1}" if j > 1 else "update"
        buffers += [(f"lam{j - 1}", f"b{j}", [reader], [f"lam{j}", f"x{j - 1}", f"d{j}"],
                     "temporary")]
    return program(ops, buffers, "observed")


def test_passing_through_a_state_remakes_only_what_the_next_reads():
    trace = observed_program(6)
    chain = find_chain(trace)
    assert _names(trace, chain)[:2] == [("x1", "d1"), ("x2", "d2")]
    _chain, result = _revolve(trace, 0)
    b2 = next(i for i, op in enumerate(trace.ops) if op.name == "b2")
    recomputed = [trace.buffer(a.buffer_id).name for a in result.plan.actions
                  if isinstance(a, RecomputeAction) and a.before_op == b2]
    # b2 reads x1 and d2: from x0, x1 delivered whole; d2 is x2's state, delivered at b3
    assert recomputed == ["x1", "d1"]
    b4 = next(i for i, op in enumerate(trace.ops) if op.name == "b4")
    recomputed = [trace.buffer(a.buffer_id).name for a in result.plan.actions
                  if isinstance(a, RecomputeAction) and a.before_op == b4]
    assert recomputed == ["x1", "x2", "x3", "d3"]  # no d1, d2 on the way


def test_leapfrog_states_hold_two_steps():
    trace = leapfrog_program(9)
    chain = find_chain(trace)
    assert _names(trace, chain) == [("x1",), ("x2", "x3"), ("x4", "x5"), ("x6", "x7"),
                                    ("x8",)]
    assert not chain.kept
    for slots in (0, 1):
        _revolve(trace, slots)


def test_a_side_input_and_a_temporary_root():
    trace = adjoint_trace(12, S, side_input=True, temporary_root=True)
    chain = find_chain(trace)
    assert [trace.buffer(b).name for b in chain.side] == ["c"]
    assert _names(trace, chain) == [(f"x{j}",) for j in range(12)]  # x0 re-made from u
    for slots in (0, 3):
        chain, result = _revolve(trace, slots)
        stats = result.plan.stats
        assert stats["revolve_recomputes"] == planned_optimum(stats, 12)
        assert stats["revolve_recomputes"] <= revolve_steps(13, slots + 1) - 12
        assert "x0" in {trace.buffer(a.buffer_id).name for a in result.plan.actions}
        bound = chain_recompute_bound(trace, [x.buffer_ids for x in chain.states],
                                      result.plan.capacity_bytes)
        assert bound.recomputes <= result.plan.stats["revolve_recomputes"]


def test_a_buffer_read_from_far_back_stays_off_the_chain():
    """``avg`` reads ``x1`` and ``x7`` and is read at the end: kept, the chain intact."""
    base = adjoint_trace(8, S)
    n = base.num_ops
    avg = Buffer(len(base.buffers), S, 7, n, (7, n - 1), name="avg",
                 recompute=Recompute(7, (1, 7)))
    ops = list(base.ops)
    trace = Trace("far", tuple(ops), (*base.buffers, avg))
    chain = find_chain(trace)
    assert avg.id in chain.kept and len(chain.states) == 7
    assert any("two states back" in note for note in chain.notes)
    _revolve(trace, 1)


def test_a_buffer_two_far_readers_read_is_moved_off():
    """Two diagnostics read ``x2`` and a late state: ``x2`` leaves the chain (resident),
    the diagnostics, read late, stay off it too."""
    base = adjoint_trace(8, S, temporary_root=True)  # u, x0, x1, x2 = buffers 0..3
    n = base.num_ops
    extra = [Buffer(len(base.buffers) + k, S, 8, n, (8, n - 1), name=f"avg{k}",
                    recompute=Recompute(8, (3, 9 - k))) for k in (0, 1)]
    trace = Trace("far twice", base.ops, (*base.buffers, *extra))
    chain = find_chain(trace)
    assert chain.kept[0] == 3 and "several states apart" in chain.notes[0]
    assert _names(trace, chain)[:4] == [("x0",), ("x1",), ("x3",), ("x4",)]
    _revolve(trace, 1)


def test_a_field_every_step_reads_is_a_side_input():
    base = adjoint_trace(8, S)
    buffers = list(base.buffers)
    for j in range(3, 9):
        b = buffers[j]
        buffers[j] = Buffer(b.id, b.size, b.start, b.end, b.uses, name=b.name,
                            recompute=Recompute(b.recompute.op, (j - 1, 1)))
    x1 = buffers[1]
    uses = tuple(sorted({*x1.uses, *range(2, 8)}))
    buffers[1] = Buffer(1, S, x1.start, x1.end, uses, name="x1", recompute=x1.recompute)
    trace = Trace("side", base.ops, tuple(buffers))
    chain = find_chain(trace)
    assert chain.side == (1,)
    assert chain.buffer_ids == (2, 3, 4, 5, 6, 7)
    _revolve(trace, 0)


def test_the_engine_runs_states_of_two_buffers_byte_exact():
    from cupool.devices import open_device
    from cupool.swap.engine import EngineSettings
    from cupool.swap.patterns import PatternEngine

    trace = reaction_program(5)
    _chain, result = _revolve(trace, 1)
    with open_device("emulated") as device, PatternEngine(
            result.trace, result.plan, device, EngineSettings(size_scale=4)) as engine:
        run = engine.run_iteration(0)
        assert (run.corrupt_bytes, run.off_plan) == (0, 0)
        assert run.bytes_checked > 0


@pytest.mark.parametrize("shape", ["reaction", "leapfrog", "observed"])
def test_auto_keeps_a_validated_plan(shape):
    from dataclasses import replace

    from cupool.planning.budget import plan_with_budget

    trace = {"reaction": reaction_program, "leapfrog": leapfrog_program,
             "observed": observed_program}[shape](6)
    cost = replace(cost_model("gen5"), h2d_gbps=0.001, d2h_gbps=0.001)
    budget = build(trace, find_chain(trace), 1).peak_bytes
    result = plan_with_budget(trace, budget, "auto", cost)
    assert result.feasible and validate_plan(result.trace, result.plan).valid
    assert isinstance(result.candidates["revolve"], float)


def random_program(seed: int):
    """A chain program with random extras: each step may read a random earlier state too
    and make a term the adjoint reads; each adjoint step reads its state and, at random,
    another one."""
    rng = np.random.default_rng(seed)
    length = int(rng.integers(3, 9))
    ops = [(f"f{j}", "fw") for j in range(1, length + 1)]
    ops += [("dloss", "bw")] + [(f"b{j}", "bw") for j in range(length, 0, -1)]
    ops += [("update", "opt")]
    readers = {f"x{j}": [] for j in range(length + 1)}
    steps = []
    for j in range(1, length + 1):
        inputs = [f"x{j - 1}"]
        if j >= 3 and rng.random() < 0.3:
            inputs.append(f"x{int(rng.integers(0, j - 1))}")
        steps.append(inputs)
        for name in inputs:
            readers[name].append(f"f{j}")
    extra = {j for j in range(1, length + 1) if rng.random() < 0.3}
    adjoint_reads = {}
    for j in range(length, 0, -1):
        reads = [f"x{j - 1}"] + ([f"x{int(rng.integers(0, j))}"] if rng.random() < 0.3
                                 else [])
        adjoint_reads[j] = sorted(set(reads))
        for name in adjoint_reads[j]:
            readers[name].append(f"b{j}")
    readers[f"x{length}"].append("dloss")
    buffers = [("x0", "f1", readers["x0"] + ["update"], None, PERSISTENT)]
    for j in range(1, length + 1):
        buffers.append((f"x{j}", f"f{j}", readers[f"x{j}"], steps[j - 1], "temporary"))
        if j in extra:
            buffers.append((f"r{j}", f"f{j}", [f"b{j}"], [f"x{j - 1}"], "temporary"))
    buffers.append((f"lam{length}", "dloss", [f"b{length}"], [f"x{length}"], "temporary"))
    for j in range(length, 0, -1):
        reader = f"b{j - 1}" if j > 1 else "update"
        inputs = [f"lam{j}", *adjoint_reads[j]] + ([f"r{j}"] if j in extra else [])
        buffers.append((f"lam{j - 1}", f"b{j}", [reader], inputs, "temporary"))
    return program(ops, buffers, f"random {seed}")


@pytest.mark.parametrize("seed", range(12))
def test_random_extras_plan_validated_or_say_why(seed):
    trace = random_program(seed)
    chain = find_chain(trace)
    cost = cost_model("gen5")
    peak = trace.lower_bound_bytes()
    for share in (0.5, 0.7, 1.0):
        result = plan_revolve(trace, int(peak * share), cost, BudgetParams(),
                              time.perf_counter())
        if result.feasible:
            assert validate_plan(result.trace, result.plan).valid
        else:
            assert "validator" not in result.reason and "\n" not in result.reason
    if chain.states:
        floor = min(build(trace, chain, 0).peak_bytes,
                    build(trace, chain, 0, units=True).peak_bytes)
        result = plan_revolve(trace, floor, cost, BudgetParams(), time.perf_counter())
        assert result.feasible and validate_plan(result.trace, result.plan).valid
