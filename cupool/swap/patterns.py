"""The engine's pattern op body: patterns written where buffers are produced and checked at
every use, and each op's duration spent — the instrument that proves the engine loses no
byte.

A temporary buffer is produced at its first residency with the pattern of ``(buffer id,
iteration)``; a persistent buffer (weights) holds the pattern of ``(buffer id, 0)``,
written once, in the first iteration where its first residency is served (timed as setup,
not as iteration time: it stands for uploading the weights), or into its host copy when
the plan starts the iteration with it swapped out. Every use compares every byte;
mismatches are counted (``corrupt_bytes``), never raised. A recomputed buffer gets its
pattern again from :func:`regenerate`, unless the caller gave its own ``recompute``
callable, whose bytes are then checked like any other.

:class:`PatternEngine` is the swap engine with this instrument: :func:`pattern_body` as its
op body, :func:`regenerate` as the recompute of every buffer the caller gave none for, and
the patterns written into the persistent buffers' host copies (the engine itself holds
none of a replay's defaults).

``cupool replay`` writes and checks the same patterns through the program runner instead
(:mod:`cupool.program.synthetic`: each trace op a declared op, the session's path; there a
persistent buffer is also checked at the use that first fills it). :class:`PatternEngine`
runs a plan on the engine alone (tests, the stress walker's twin). Any other op body
has its shape: ``body(engine, frame)``, called between ``engine.before_op(i)`` and
``engine.after_op(i)``, enqueues the op's work on ``engine.work`` (a
:class:`~cupool.swap.checks.StreamWork`) and its time with ``engine.spend``.
"""

from __future__ import annotations

import time
from functools import partial

from cupool.devices.memory import host_view
from cupool.swap.engine import EngineSettings, SwapEngine


def pattern_iteration(engine, b: int) -> int:
    """The iteration whose pattern buffer ``b`` holds while ``engine`` runs its current
    one: 0 for a persistent buffer, the running iteration for the others."""
    return 0 if b in engine.schedule.persistent else engine.iteration


def pattern_body(engine, frame) -> None:
    """Op ``frame.op`` of a trace replay: fill what it produces with the pattern, verify
    every other buffer it uses, then spend its duration (module docstring)."""
    work, sizes = engine.work, engine.sizes
    for b in frame.produced:
        if b in frame.first_fills and not engine.gpu:
            work.run(partial(_first_fill, engine, engine.state, frame.ptrs[b], b))
        else:
            work.fill(frame.ptrs[b], sizes[b], b, pattern_iteration(engine, b))
    for b in frame.uses:
        if b not in frame.produced:
            work.verify(frame.ptrs[b], sizes[b], b, pattern_iteration(engine, b))
    engine.spend(engine.op_us[frame.op])


def _first_fill(engine, state, ptr: int, b: int) -> None:
    """Emulated, on the compute stream: write persistent buffer ``b``'s pattern once (the
    weights' upload before training), timed as setup, not as the iteration's work."""
    from cupool.kernels.reference import fill

    began = time.perf_counter()
    fill(host_view(ptr, engine.sizes[b]), engine.seed, b, 0)
    spent = time.perf_counter() - began
    state.setup_s += spent
    state.clock += spent


def fill_host_copy(engine, slot, b: int) -> None:
    """Write persistent buffer ``b``'s pattern into its host copy ``slot`` (the plan
    starts the iteration with it swapped out)."""
    from cupool.kernels.reference import fill

    fill(slot.array[:engine.sizes[b]], engine.seed, b, 0)


class PatternEngine(SwapEngine):
    """A :class:`~cupool.swap.engine.SwapEngine` running the pattern instrument (module
    docstring); the arguments are the engine's. :meth:`run_iteration` runs
    :func:`pattern_body` unless given another body."""

    def __init__(self, trace, plan, device, settings: EngineSettings | None = None, *,
                 op_us=None, recompute: dict | None = None, layouts: dict | None = None) -> None:
        made: list = []  # the engine, once made (the recompute callables need it)
        given = dict(recompute or {})
        for b in trace.buffers:
            if b.recompute is not None and b.id not in given:
                given[b.id] = regenerate(made, b.id)
        super().__init__(trace, plan, device, settings, op_us=op_us, recompute=given,
                         layouts=layouts)
        made.append(self)
        for b, slot in self.boundary_slots.items():
            fill_host_copy(self, slot, b)

    def run_iteration(self, iteration: int, body=None):
        return super().run_iteration(iteration, pattern_body if body is None else body)


def regenerate(made: list, b: int):
    """A ``recompute(out, *inputs)`` for buffer ``b`` of the engine ``made[0]``: writes its
    pattern for the running iteration into ``out``, in stream order (``StreamWork.run``
    calls it)."""
    def regenerate(out, *inputs) -> None:
        engine = made[0]
        ptr, nbytes, seed = _address(out), engine.sizes[b], engine.seed
        if engine.gpu:
            from cupool.kernels import fill_pattern

            fill_pattern(engine.device, ptr, nbytes, seed=seed, buffer_id=b,
                         iteration=pattern_iteration(engine, b), stream=engine.compute)
        else:
            from cupool.kernels.reference import fill

            fill(host_view(ptr, nbytes), seed, b, pattern_iteration(engine, b))

    regenerate.__name__ = f"regenerate_buffer_{b}"
    return regenerate


def _address(array) -> int:
    """The address of an array's first byte (NumPy or CuPy)."""
    data = getattr(array, "data", None)
    ptr = getattr(data, "ptr", None)
    return int(ptr) if ptr is not None else int(array.ctypes.data)
