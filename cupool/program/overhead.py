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
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from cupool.program.errors import ProgramError

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
    ``input_us`` (the input op's passive duration, median of both recordings)."""

    per_op_us: float
    per_iteration_us: float
    short_ops: int
    long_ops: int
    short_iteration_us: tuple
    long_iteration_us: tuple
    call_us: float
    input_us: float

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


def _run(device, ops: int, iterations: int) -> _Run | None:
    """Run a program of an input op and ``ops`` no-op ops on ``device``: recorded, planned
    (budget 100%), then planned iterations; ``None`` if it was not planned."""
    from cupool.program.session import Session  # the session measures with this module

    x0 = np.ones(16, np.float32)
    with Session("100%", device=device, measure_link=False, measure_overhead=False) as s:
        w = s.register("w", x0)
        for _ in range(iterations + 2):
            with s.iteration() as it:
                x = it.input(x0, name="x")
                for k in range(ops):
                    it.op(_noop, x, w, out=((4,), "float32"), name=f"noop{k}", recompute=False)
            if s.plan is None:
                return None
        durations = s.recording.durations_us
        planned = [r.iteration_us for r in s.reports if r.mode == "planned"]
    return _Run(tuple(planned[1:]), tuple(durations[1:]), durations[0])


def measure_engine_overhead(device, *, short_ops: int = SHORT_OPS, long_ops: int = LONG_OPS,
                            iterations: int = ITERATIONS) -> EngineOverhead | None:
    """Measure :class:`EngineOverhead` on ``device`` (module docstring; the caller keeps
    owning the device). ``None`` when the measuring program could not be planned."""
    if not 0 < short_ops < long_ops:
        raise ProgramError(f"short_ops (={short_ops}) must be > 0 and < long_ops "
                         f"(={long_ops})")
    short = _run(device, short_ops, iterations)
    long = _run(device, long_ops, iterations) if short is not None else None
    if long is None:
        return None
    short_us, long_us = statistics.median(short.iteration_us), statistics.median(long.iteration_us)
    slope = (long_us - short_us) / (long_ops - short_ops)
    call_us = statistics.median(short.call_us + long.call_us)
    input_us = statistics.median((short.input_us, long.input_us))
    per_op = max(0.0, slope - call_us)
    per_iteration = max(0.0, short_us - short_ops * slope - input_us - per_op)
    return EngineOverhead(per_op, per_iteration, short_ops, long_ops, short.iteration_us,
                          long.iteration_us, call_us, input_us)


__all__ = ["EngineOverhead", "measure_engine_overhead"]
