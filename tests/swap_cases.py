"""Small hand-made traces and swapping plans shared by the swap, simulator and bound tests."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from hypothesis import strategies as st

from cupool.core.vocabulary import (
    PERSISTENT,
    TEMPORARY,
    Buffer,
    Op,
    Plan,
    Recompute,
    RecomputeAction,
    Residency,
    SolveStatus,
    SwapIn,
    SwapOut,
    Trace,
)


def trace_of(durations, *buffers, name="hand"):
    return Trace(name, tuple(Op(f"op{i}", d) for i, d in enumerate(durations)), tuple(buffers))


def swap_plan(trace, residencies, actions=(), budget=None, arena=None):
    sizes = {b.id: b.size for b in trace.buffers}
    top = max((r.offset + sizes.get(r.buffer_id, 0) for r in residencies), default=0)
    arena = top if arena is None else arena
    return Plan(trace.name, trace.digest(), "hand", SolveStatus.FEASIBLE, arena,
                trace.lower_bound_bytes(), (), 0.0, arena if budget is None else budget, {},
                tuple(residencies), tuple(actions))


def six_op_trace():
    """op:   0   1   2   3   4   5
    W 0: [=======================)  persistent, 8 B, uses 0 and 5
    A 1: [===================)      16 B, uses 0 and 4, recompute: op 0 from W
    B 2:     [=======)              16 B, uses 1 and 2
    """
    return trace_of(
        [10.0] * 6,
        Buffer(0, 8, 0, 6, (0, 5), PERSISTENT),
        Buffer(1, 16, 0, 5, (0, 4), recompute=Recompute(0, (0,))),
        Buffer(2, 16, 1, 3, (1, 2)),
    )


def six_op_swap_plan(trace):
    """A swapped out after op 0, back in at op 3 (due 4); B reuses A's bytes meanwhile."""
    return swap_plan(trace, [Residency(0, 0, 6, 0), Residency(1, 0, 1, 8),
                             Residency(1, 3, 5, 8), Residency(2, 1, 3, 8)],
                     [SwapOut(1, 0), SwapIn(1, 3, 4)])


def six_op_recompute_plan(trace):
    """A dropped after op 0 and recomputed before op 4 from W."""
    return swap_plan(trace, [Residency(0, 0, 6, 0), Residency(1, 0, 1, 8),
                             Residency(1, 4, 5, 8), Residency(2, 1, 3, 8)],
                     [RecomputeAction(1, 4)])


TRACE_DIR = Path(__file__).resolve().parents[1] / "cupool" / "data" / "traces"


@lru_cache(maxsize=1)
def resnet_capuchin_plan():
    """``(trace, plan, planned trace)``: a capuchin plan at 70% of ResNet-50 (fp32)
    training's lower bound (swaps and recomputes), shared by the runtime tests."""
    from cupool.io import load_trace
    from cupool.planning.budget import plan_with_budget

    trace = load_trace(TRACE_DIR / "resnet50_train_b32_fp32.trace.json.gz")
    result = plan_with_budget(trace, int(trace.lower_bound_bytes() * 0.7), "capuchin")
    return trace, result.plan, result.trace


def mistimed(plan):
    """``(plan, late)``: ``plan`` with every swap-in issued only when its due op is
    dispatched (the data asked for when it is needed), and the swap-ins that moved."""
    from cupool.planning.budget.feedback import delay_swap_ins

    late = [a for a in plan.actions if isinstance(a, SwapIn) and a.due_op > a.trigger_op]
    return delay_swap_ins(plan), late


@st.composite
def small_traces(draw):
    n = draw(st.integers(3, 10))
    ops = tuple(Op(f"op{i}", draw(st.floats(1.0, 50.0)), phase="fw" if i < n // 2 else "bw")
                for i in range(n))
    buffers = []
    for k in range(draw(st.integers(1, 7))):
        size = draw(st.integers(1, 16)) * 256
        if draw(st.booleans()) and k % 3 == 0:
            uses = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=3)))
            buffers.append(Buffer(k, size, 0, n, tuple(uses), PERSISTENT))
            continue
        start = draw(st.integers(0, n - 1))
        end = draw(st.integers(start + 1, n))
        extra = draw(st.sets(st.integers(start, end - 1), max_size=3))
        buffers.append(Buffer(k, size, start, end, tuple(sorted({start} | extra)), TEMPORARY))
    return Trace("small", ops, tuple(buffers))
