"""What a planned iteration costs beyond its ops' callables, measured on the device.

The passive iteration times each op's callable alone (:mod:`.recorder`). A planned
iteration runs the same callables on the swap engine's compute stream, and the engine adds
work of its own there: per op, the begin and end callbacks that move handles and enter and
exit their uses, the batch hand-off and the op's call through the runner; per iteration,
the streams starting (the gate's release) and the final synchronize. On ops of a few tens of
µs that is a share of the iteration the simulator would never see if the recorded trace held
the callables' times alone. So the session measures it once, when it opens, and adds it to
the recorded durations it plans and predicts with::

    measured iteration_us(K) of a program of K no-op ops  =  a + b·K   (two K, medians)
    per_op_us        = b - call_us          (call_us: what the passive iteration records
                                             for one of those no-op ops)
    per_iteration_us = a - (the program's one input op: its passive duration + per_op_us)

It is a measurement of this device and this engine, run through the same path as the user's
program (a passive recording, the ``auto`` plan, planned iterations on the swap engine),
with a no-op op of two inputs and one output. Both numbers are clamped at zero (a
measurement on a busy machine can come out slightly negative).

A swap-in the plan needs at once (triggered at the op that uses it) costs the compute stream
a whole round trip through the engine: the op before it recorded and handed over, the copy
stream waking up, the handle's transitions around the copy, the compute stream waking up
again. :func:`measure_swap_round_trip` times that on the engine itself (a four-op trace
whose one buffer is swapped out after op 0 and in again at op 3, against the same trace
with the buffer resident), so the session can price every copy with it::

    op:       0        1 (long)      2        3
    swap:   [ A ]─D2H─────────────────────H2D─[ A ]     the wait before op 3 is the round trip
    resident[ A ==================================]
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from cupool.program.errors import ProgramError

ROUND_TRIP_BYTES = 64 * 1024
"""Bytes of the buffer :func:`measure_swap_round_trip` swaps."""
SHORT_OPS = 4
LONG_OPS = 68
ITERATIONS = 8
"""Planned iterations measured per program length (the first planned one is not used)."""


@dataclass(frozen=True)
class EngineOverhead:
    """The engine's cost on the compute stream beyond the ops' callables (module
    docstring), trace µs: ``per_op_us`` (every op) and ``per_iteration_us`` (once per
    iteration); the raw measurement: ``short_ops``/``long_ops`` (the two program lengths),
    ``short_iteration_us``/``long_iteration_us`` (their planned iterations, as the engine
    timed them), ``call_us`` (median passive duration of one no-op op) and
    ``input_us`` (the input op's passive duration, median of both recordings).

    ``host_per_op_us`` is what each op costs the host to enqueue (wall µs: matching the
    step with the recorded one, the engine's op boundaries, the op's call handed to its
    stream), the slope of the planned steps' host time (``StepReport.wall_us`` less
    ``iteration_us``: the time the step took beyond the engine's iteration; of the steps
    that did not time their ops) over the two program lengths
    (``short_host_us``/``long_host_us``): what
    :class:`~cupool.sim.cost.CostModel` ``host_us_per_op`` prices."""

    per_op_us: float
    per_iteration_us: float
    short_ops: int
    long_ops: int
    short_iteration_us: tuple
    long_iteration_us: tuple
    call_us: float
    input_us: float
    host_per_op_us: float = 0.0
    short_host_us: tuple = ()
    long_host_us: tuple = ()

    def apply(self, durations_us) -> tuple[float, ...]:
        """``durations_us`` (a passive iteration's, per op) with ``per_op_us`` added to every
        op and ``per_iteration_us`` to the first (where the iteration's start waits)."""
        out = [float(d) + self.per_op_us for d in durations_us]
        if out:
            out[0] += self.per_iteration_us
        return tuple(out)


def _noop(x, w, out) -> None:
    """An op that does nothing (its output is never read)."""


@dataclass(frozen=True)
class _Run:
    iteration_us: tuple  # the planned iterations used
    call_us: tuple       # the passive durations of the no-op ops
    input_us: float      # the passive duration of the input op
    host_us: tuple       # each planned iteration's step time beyond the engine's iteration


def _run(session_type, device, ops: int, iterations: int) -> _Run | None:
    """Run a program of an input op and ``ops`` no-op ops on ``device`` in a
    ``session_type`` session: recorded, planned (budget 100%), then planned iterations;
    ``None`` if it was not planned."""
    x0 = np.ones(16, np.float32)
    with session_type("100%", device=device, measure_link=False,
                      measure_overhead=False) as s:
        w = s.register("w", x0)
        for _ in range(iterations + 2):
            with s.iteration() as it:
                x = it.input(x0, name="x")
                for k in range(ops):
                    it.op(_noop, x, w, out=((4,), "float32"), name=f"noop{k}", recompute=False)
            if s.plan is None:
                return None
        durations = s.recording.durations_us
        planned = [r for r in s.reports if r.mode == "planned"][1:]
    steady = [r for r in planned if not r.ops_timed] or planned  # the marks cost the host
    return _Run(tuple(r.iteration_us for r in planned), tuple(durations[1:]), durations[0],
                tuple(r.wall_us - r.iteration_us for r in steady))


def measure_engine_overhead(session_type, device, *, short_ops: int = SHORT_OPS,
                            long_ops: int = LONG_OPS,
                            iterations: int = ITERATIONS) -> EngineOverhead | None:
    """Measure :class:`EngineOverhead` on ``device`` through sessions of ``session_type``
    (:class:`~cupool.program.session.Session`, which measures itself with this module when
    it opens, and passes its own type: this module imports nothing above it) (module
    docstring; the caller keeps owning the device). ``None`` when the measuring program
    could not be planned."""
    if not 0 < short_ops < long_ops:
        raise ProgramError(f"short_ops (={short_ops}) must be > 0 and < long_ops "
                         f"(={long_ops})")
    short = _run(session_type, device, short_ops, iterations)
    long = _run(session_type, device, long_ops, iterations) if short is not None else None
    if long is None:
        return None
    short_us, long_us = statistics.median(short.iteration_us), statistics.median(long.iteration_us)
    slope = (long_us - short_us) / (long_ops - short_ops)
    call_us = statistics.median(short.call_us + long.call_us)
    input_us = statistics.median((short.input_us, long.input_us))
    per_op = max(0.0, slope - call_us)
    per_iteration = max(0.0, short_us - short_ops * slope - input_us - per_op)
    host = (statistics.median(long.host_us) - statistics.median(short.host_us)) \
        / (long_ops - short_ops)
    return EngineOverhead(per_op, per_iteration, short_ops, long_ops, short.iteration_us,
                          long.iteration_us, call_us, input_us, max(0.0, host),
                          short.host_us, long.host_us)


@dataclass(frozen=True)
class SwapRoundTrip:
    """An on-demand swap-in through the engine (module docstring): ``latency_us`` (its fixed
    cost: the median extra time of an iteration with the swap over one without, less the
    bytes' time at the link's bandwidth; clamped at zero), ``swap_us`` and
    ``resident_us`` (per iteration, the iteration's time beyond its ops' observed times,
    with and without the swap), ``nbytes``; ``host_per_action_us``, what each action of a
    plan costs the host to enqueue (wall µs: the median extra enqueue of an iteration with
    the swap's three, a swap-out, its swap-in and the due op's wait, over one without;
    :class:`~cupool.sim.cost.CostModel` ``host_us_per_action``)."""

    latency_us: float
    swap_us: tuple
    resident_us: tuple
    nbytes: int
    host_per_action_us: float = 0.0


def _round_trip_plans(nbytes: int):
    from cupool.core.vocabulary import (
        Buffer,
        Op,
        Plan,
        Residency,
        SolveStatus,
        SwapIn,
        SwapOut,
        Trace,
    )

    trace = Trace("swap round trip", tuple(Op(f"op{i}", 0.0) for i in range(4)),
                  (Buffer(0, nbytes, 0, 4, (0, 3)),))

    def plan(residencies, actions):
        return Plan(trace.name, trace.digest(), "round trip", SolveStatus.FEASIBLE, nbytes,
                    nbytes, (), 0.0, nbytes, {}, tuple(residencies), tuple(actions))

    swapping = plan([Residency(0, 0, 1, 0), Residency(0, 3, 4, 0)],
                    [SwapOut(0, 0), SwapIn(0, 3, 3)])
    return trace, swapping, plan([Residency(0, 0, 4, 0)], [])


def _spend(engine, frame) -> None:
    engine.spend(engine.op_us[frame.op])


def measure_swap_round_trip(device, gbps: float, *, lead_us: float = 1000.0,
                            nbytes: int = ROUND_TRIP_BYTES,
                            iterations: int = 2 * ITERATIONS) -> SwapRoundTrip:
    """Measure :class:`SwapRoundTrip` on ``device`` (module docstring) for a link of
    ``gbps`` GB/s (the bytes' share of the copy). Op 1 spends ``lead_us``: give it enough
    for the swap-out to land before the swap-in starts."""
    from cupool.swap.engine import EngineSettings, SwapEngine

    trace, swapping, resident = _round_trip_plans(nbytes)
    beyond, host = {}, {}
    every = EngineSettings(time_ops_every=1)  # every iteration's op times are needed
    for name, plan in (("swap", swapping), ("resident", resident)):
        with SwapEngine(trace, plan, device, every, op_us=[0.0, lead_us, 0.0, 0.0]) as engine:
            results = [engine.run_iteration(k, _spend) for k in range(iterations + 1)][1:]
        timed = [r for r in results if r.op_us]  # (every one, at time_ops_every=1)
        beyond[name] = tuple(r.iteration_us - sum(r.op_us) for r in timed)
        host[name] = statistics.median(r.host_us for r in results)
    extra = statistics.median(beyond["swap"]) - statistics.median(beyond["resident"])
    latency = max(0.0, extra - nbytes / (gbps * 1e3))
    per_action = max(0.0, (host["swap"] - host["resident"]) / 3)
    return SwapRoundTrip(latency, beyond["swap"], beyond["resident"], nbytes, per_action)


__all__ = ["EngineOverhead", "SwapRoundTrip", "measure_engine_overhead",
           "measure_swap_round_trip"]
