"""Small hand-made traces and swapping plans shared by the swap, simulator and bound tests."""

from __future__ import annotations

import dataclasses
import itertools
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
from cupool.sim import cost_model


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


def _place(spans, buffers, n):
    """First-fit offsets for ``(buffer id, start, end)`` residencies; a persistent buffer
    resident at both ends of the iteration keeps one offset across the boundary (both
    residencies on top of everything). Returns ``(buffer id, start, end, offset)``."""
    sizes = {b.id: b.size for b in buffers}
    placed = []
    for buffer_id, begin, stop in sorted(spans, key=lambda s: (s[1], s[0])):
        offset = 0
        for other, o_begin, o_stop, o_offset in sorted(placed, key=lambda p: p[3]):
            if o_begin < stop and begin < o_stop and offset < o_offset + sizes[other] \
                    and o_offset < offset + sizes[buffer_id]:
                offset = o_offset + sizes[other]
        clash = any(o_begin < stop and begin < o_stop and offset < o_off + sizes[o]
                    and o_off < offset + sizes[buffer_id] for o, o_begin, o_stop, o_off in placed)
        if clash:  # first fit by one pass can miss: put it on top of everything
            offset = max(o_off + sizes[o] for o, *_rest, o_off in placed)
        placed.append((buffer_id, begin, stop, offset))
    # a persistent buffer resident at both ends stays at one address across the boundary:
    # its first and last residencies move together to the top, free at every op
    for buffer in buffers:
        ends = [k for k, (b, begin, stop, _o) in enumerate(placed)
                if b == buffer.id and (begin == 0 or stop == n)]
        if buffer.kind == PERSISTENT and len(ends) == 2:
            top = max(o_off + sizes[o] for o, *_rest, o_off in placed)
            for k in ends:
                placed[k] = (*placed[k][:3], top)
    return placed


@st.composite
def trace_and_plan(draw):
    """A random small trace, and a random valid plan that evicts every buffer idle at the
    op with the most live bytes (so that its arena, the budget, is often below the trace's
    lower bound), with random swap/recompute choices and trigger/due ops elsewhere."""
    n = draw(st.integers(3, 7))
    durations = [float(draw(st.integers(0, 6))) for _ in range(n)]
    buffers = []
    for buffer_id in range(draw(st.integers(1, 6))):
        size = 100 * draw(st.integers(1, 5))
        persistent = draw(st.booleans()) and buffer_id == 0
        start = 0 if persistent else draw(st.integers(0, n - 1))
        end = n if persistent else draw(st.integers(start + 1, n))
        uses = sorted(set(draw(st.lists(st.integers(start, end - 1), max_size=4))) | {start})
        if persistent and draw(st.booleans()):  # state first used later (optimizer-like)
            uses = sorted(set(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))))
        recipe = Recompute(start) if draw(st.booleans()) and not persistent else None
        kind = PERSISTENT if persistent else TEMPORARY
        buffers.append(Buffer(buffer_id, size, start, end, tuple(uses), kind, "", recipe))
    live = [sum(b.size for b in buffers if b.start <= i < b.end) for i in range(n)]
    peak = max(range(n), key=lambda i: (live[i], -i))
    pieces = []
    for buffer in buffers:
        buffer_id, uses, begin, actions = buffer.id, buffer.uses, buffer.start, []
        # persistent state may be offloaded across the iteration boundary: it enters by a
        # swap-in due at its first use and leaves by a copy out after its last use
        wraps = buffer.kind == PERSISTENT and uses[0] > 0 and draw(st.booleans())
        if wraps:
            begin = draw(st.integers(0, uses[0]))
            actions.append(SwapIn(buffer_id, begin, uses[0]))
        elif buffer.kind == PERSISTENT and uses[0] > 0 and draw(st.booleans()):
            # or kept on the device across the boundary and copied out early in the
            # iteration, before its first use (its data is the previous iteration's)
            stop = draw(st.integers(1, uses[0]))
            begin = draw(st.integers(stop, uses[0]))
            pieces.append((buffer_id, 0, stop))
            actions.append(SwapOut(buffer_id, draw(st.integers(0, stop - 1))))
            actions.append(SwapIn(buffer_id, begin, draw(st.integers(begin, uses[0]))))
        for before, after in itertools.pairwise(uses):
            across = before < peak < after  # evict everything idle at the peak op
            options = ["swap", "recompute"] if across else ["keep", "swap", "recompute"]
            choice = draw(st.sampled_from(options))
            if choice == "recompute" and buffer.recompute is None:
                choice = "swap" if across else "keep"
            if choice == "keep":
                continue
            if across:
                stop = draw(st.integers(before + 1, peak))
                entry = draw(st.integers(peak + 1, after))
            else:
                stop = draw(st.integers(before + 1, after))
                entry = draw(st.integers(stop, after))
            pieces.append((buffer_id, begin, stop))
            if choice == "swap":
                actions.append(SwapOut(buffer_id, draw(st.integers(before, stop - 1))))
                actions.append(SwapIn(buffer_id, entry, draw(st.integers(entry, after))))
            else:
                actions.append(RecomputeAction(buffer_id, entry))
            begin = entry
        persistent = buffer.kind == PERSISTENT
        last = n if persistent else draw(st.sampled_from([uses[-1] + 1, buffer.end]))
        if wraps:
            last = draw(st.integers(max(begin, uses[-1]) + 1, n))
            actions.append(SwapOut(buffer_id, draw(st.integers(max(begin, uses[-1]),
                                                               last - 1))))
        pieces.append((buffer_id, begin, last))
        pieces.extend(actions)
    spans = [p for p in pieces if isinstance(p, tuple)]
    actions = [p for p in pieces if not isinstance(p, tuple)]
    placed = _place(spans, buffers, n)
    trace = trace_of(durations, *buffers)
    residencies = [Residency(b, s, e, o) for b, s, e, o in placed]
    link = draw(st.sampled_from([0.02, 0.05, 1.0]))
    return trace, swap_plan(trace, residencies, actions), cost_model(link, latency_us=1.0)


@st.composite
def written_trace_and_plan(draw):
    """:func:`trace_and_plan` with random ``writes`` (unknown, none, some of the uses) and
    every swap-out of clean data a drop (the planners' rule, :func:`mark_drops`)."""
    from cupool.planning.budget.engine.drops import mark_drops

    trace, plan_, cost = draw(trace_and_plan())
    buffers = []
    for b in trace.buffers:
        mode = draw(st.sampled_from(["unknown", "none", "some"]))
        writes = None if mode == "unknown" else () if mode == "none" else tuple(
            sorted(draw(st.sets(st.sampled_from(b.uses), max_size=len(b.uses)))))
        buffers.append(dataclasses.replace(b, writes=writes))
    trace = dataclasses.replace(trace, buffers=tuple(buffers))
    return trace, dataclasses.replace(plan_, actions=mark_drops(trace, plan_.residencies,
                                                    plan_.actions)), cost


@st.composite
def streaming_trace_and_plan(draw):
    """Weights streamed through several peaks: block ``b`` is op ``2b``, which reads the
    read-only weight ``b``, then op ``2b + 1``, the peak, whose temporary is born and dies
    there. Each weight is kept on the device, streamed from the host (in by a swap-in
    before its use, dropped after it: off the device across the boundary), or dropped
    after its use and back in by a later swap-in before the iteration ends (on the device
    across the boundary); the budget is the arena that leaves."""
    blocks = draw(st.integers(2, 4))
    n = 2 * blocks
    durations = [float(draw(st.integers(1, 8))) for _ in range(n)]
    buffers = [Buffer(b, 100 * draw(st.integers(1, 5)), 0, n, (2 * b,), PERSISTENT,
                      writes=()) for b in range(blocks)]
    buffers += [Buffer(blocks + b, 100 * draw(st.integers(1, 5)), 2 * b + 1, 2 * b + 2,
                       (2 * b + 1,)) for b in range(blocks)]
    spans = [(blocks + b, 2 * b + 1, 2 * b + 2) for b in range(blocks)]
    actions = []
    for b in range(blocks):
        use = 2 * b
        choice = draw(st.sampled_from(["keep", "stream", "back"]))
        if choice == "keep":
            spans.append((b, 0, n))
        elif choice == "stream":
            trigger = draw(st.integers(0, use))
            spans.append((b, trigger, use + 1))
            actions += [SwapIn(b, trigger, draw(st.integers(trigger, use))),
                        SwapOut(b, use, drop=True)]
        else:
            back = draw(st.integers(use + 1, n - 1))
            spans += [(b, 0, use + 1), (b, back, n)]
            actions += [SwapOut(b, use, drop=True), SwapIn(b, back, back)]
    placed = _place(spans, buffers, n)
    trace = trace_of(durations, *buffers)
    residencies = [Residency(b, s, e, o) for b, s, e, o in placed]
    link = draw(st.sampled_from([0.02, 0.05, 1.0]))
    return trace, swap_plan(trace, residencies, actions), cost_model(link, latency_us=1.0)


def replay_on_emulated(trace, plan, iterations: int = 3, size_scale: int = 1):
    """Run ``plan`` for ``iterations`` on the emulated device (CuPy needed: the caller skips
    without it); every iteration's bytes are checked against the trace's data. Returns the
    iterations' results and the copy engine's stats."""
    from cupool.devices import open_device
    from cupool.swap.engine import EngineSettings
    from cupool.swap.patterns import PatternEngine

    with open_device("emulated") as device, PatternEngine(
            trace, plan, device, EngineSettings(size_scale=size_scale)) as engine:
        results = [engine.run_iteration(i) for i in range(iterations)]
        stats = engine.copy_engine.stats()
    assert all(r.corrupt_bytes == 0 and r.bytes_checked > 0 for r in results)
    return results, stats
