"""A recorded trace as a program: ops that fill and verify byte patterns, run by the same
runner as a user's program (what ``cupool replay`` runs).

:func:`synthetic_program` turns a trace and the swapping plan it is replayed under into a
:class:`~cupool.program.program.Program` that :class:`~cupool.program.runner.PlannedRunner`
runs exactly as it runs a user's planned iterations: each op a declared op called through
the session's :class:`~cupool.program.calls.OpCaller`, over the arrays the plan serves::

    trace op i     a declared op named like it; outputs: the temporary buffers whose first
                   residency starts at i (it produces them); inputs: every other buffer the
                   trace says it uses
    its callable   fills each output with the pattern of (seed, buffer, iteration) and
                   verifies every byte of each input against its pattern (persistent
                   buffers hold iteration 0's); then the runner spends the op's duration
                   (``RunnerOptions.op_us``)
    persistent     its first contents are its pattern, uploaded once by the runner
    recompute      the pattern written again (the producing op's output, made again), or
                   the callable given for that buffer

Unlike a user's program, the trace is the one given (its own buffer ids, sizes divided by
``size_scale`` as the engine's layout divides them, its own recompute recipes, no passive
step): the plan was made for it before the program existed. A mismatch is counted, never
raised (:class:`PatternChecks`); an op callable that raises is the runner's
:class:`~cupool.program.errors.OpFailedError`, as for a user's op.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from cupool.core.vocabulary import PERSISTENT, Plan, Trace
from cupool.kernels import reference
from cupool.program.errors import ReplayError
from cupool.program.program import OP, DeclaredOp, Program
from cupool.program.tensors import Spec
from cupool.swap.checks import CheckCounts
from cupool.swap.layout import pool_layout
from cupool.swap.patterns import pattern_iteration
from cupool.swap.schedule import build_schedule

_BYTES = np.dtype(np.uint8)


class PatternChecks:
    """Pattern fills and checks for a synthetic program's callables, on the engine
    :meth:`bind` gave it. They run where the runner calls the op (in stream order): on
    the emulated device in a host callback of the compute stream, so the NumPy twin
    fills and compares there and the counts are kept here (``_lock`` guards them: the
    stream's thread adds, the caller's thread takes); on a GPU the pattern kernels are
    launched on the compute stream and the engine's stream work counts (the iteration
    result's ``bytes_checked`` and ``corrupt_bytes``)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.engine = None
        self._lock = threading.Lock()
        self._checked = self._corrupt = 0

    def bind(self, engine) -> None:
        """Check on ``engine`` (the runner's swap engine), from now on."""
        self.engine = engine

    def fill(self, array, b: int) -> None:
        """Write buffer ``b``'s pattern for the running iteration into ``array``."""
        engine = self.engine
        iteration = pattern_iteration(engine, b)
        if engine.gpu:
            engine.work.fill(int(array.data.ptr), array.nbytes, b, iteration)
        elif array.size:
            reference.fill(array, self.seed, b, iteration)

    def verify(self, array, b: int) -> None:
        """Count the bytes of ``array`` that differ from buffer ``b``'s pattern."""
        engine = self.engine
        iteration = pattern_iteration(engine, b)
        if engine.gpu:
            engine.work.verify(int(array.data.ptr), array.nbytes, b, iteration)
            return
        if not array.size:
            return
        wrong = reference.count_mismatches(array, self.seed, b, iteration)
        with self._lock:
            self._checked += array.size
            self._corrupt += wrong

    def take(self) -> CheckCounts:
        """The counts kept here since the last call (emulated; zero on a GPU), reset."""
        with self._lock:
            counts = CheckCounts(self._checked, self._corrupt)
            self._checked = self._corrupt = 0
        return counts


@dataclass(frozen=True)
class SyntheticProgram:
    """A trace as a program (module docstring): ``program`` (its ops, the trace's buffer
    ids), ``parked`` (persistent key → the host bytes of its first contents),
    ``recompute`` (buffer id → ``recompute(out, *inputs)`` for every buffer with a recipe),
    ``op_us`` (the duration each op spends, trace µs) and ``checks`` (bind it to the
    runner's engine before the first iteration)."""

    program: Program
    parked: dict
    recompute: dict
    op_us: tuple
    checks: PatternChecks


def synthetic_program(trace: Trace, plan: Plan, op_us, size_scale: int = 1, seed: int = 0,
                      recompute: dict | None = None) -> SyntheticProgram:
    """``trace`` under swapping ``plan`` as a program (module docstring), its ops spending
    ``op_us`` (trace µs per op), sizes divided by ``size_scale``, patterns seeded with
    ``seed``; ``recompute`` maps buffer ids to callables replacing the pattern's
    regeneration. Raises :class:`~cupool.program.errors.ReplayError` for a ``recompute`` key
    the trace has no buffer for."""
    unknown = sorted(set(recompute or ()) - {b.id for b in trace.buffers})
    if unknown:
        raise ReplayError(f"recompute callables for buffers {unknown}, which trace "
                          f"{trace.name!r} does not have")
    layout = pool_layout(plan, trace, size_scale)
    schedule = build_schedule(plan, trace, layout)
    sizes = layout.sizes
    keys, names = {}, {}
    for b in trace.buffers:
        if b.kind == PERSISTENT:
            keys[b.id] = ("p", b.id)
        names[b.id] = b.name or f"buffer {b.id}"
    for i in range(trace.num_ops):
        for k, b in enumerate(schedule.produced.get(i, ())):
            keys[b] = ("t", i, k)
    for b in trace.buffers:  # a temporary no op produces (a plan that brings it in first)
        keys.setdefault(b.id, ("x", b.id))
    checks = PatternChecks(seed)
    ops = []
    for i, op in enumerate(trace.ops):
        writes = tuple(schedule.produced.get(i, ()))
        reads = tuple(b for b in schedule.uses.get(i, ()) if b not in writes)
        outputs = tuple(Spec((sizes[b],), _BYTES, names[b]) for b in writes)
        ops.append(DeclaredOp(i, op.name, OP, pattern_op(checks, reads, writes),
                              tuple(keys[b] for b in reads), (), outputs))
    specs = {keys[b.id]: Spec((sizes[b.id],), _BYTES, names[b.id]) for b in trace.buffers}
    program = Program(tuple(ops), specs, {keys[b]: names[b] for b in keys},
                      {key: b for b, key in keys.items()})
    parked = {keys[b.id]: _pattern(sizes[b.id], seed, b.id) for b in trace.buffers
              if b.kind == PERSISTENT}
    given = recompute or {}
    recomputes = {b.id: given.get(b.id) or regenerate(checks, b.id) for b in trace.buffers
                  if b.recompute is not None}
    return SyntheticProgram(program, parked, recomputes, tuple(float(t) for t in op_us),
                            checks)


def pattern_op(checks: PatternChecks, reads: tuple, writes: tuple):
    """The callable of a synthetic op: ``op(*inputs, *outputs)`` fills the outputs (buffers
    ``writes``) and verifies the inputs (buffers ``reads``)."""
    count = len(reads)

    def pattern(*arrays) -> None:
        for b, array in zip(writes, arrays[count:], strict=True):
            checks.fill(array, b)
        for b, array in zip(reads, arrays[:count], strict=True):
            checks.verify(array, b)

    return pattern


def regenerate(checks: PatternChecks, b: int):
    """Buffer ``b``'s recompute: its pattern for the running iteration, written again."""
    def regenerate(out, *inputs) -> None:
        checks.fill(out, b)

    regenerate.__name__ = f"regenerate_buffer_{b}"
    return regenerate


def _pattern(nbytes: int, seed: int, b: int) -> np.ndarray:
    """Host bytes holding buffer ``b``'s pattern of iteration 0 (a persistent buffer's)."""
    host = np.empty(nbytes, np.uint8)
    if nbytes:
        reference.fill(host, seed, b, 0)
    return host


__all__ = ["PatternChecks", "SyntheticProgram", "pattern_op", "regenerate",
           "synthetic_program"]
