"""Replay: run N iterations of a trace under a budget with the real swap runtime, checked.

:func:`replay` runs a trace the way the session runs a user's program: it plans the trace
for the budget (:func:`~cupool.planning.make_plan`), validates the plan, turns the trace
into a synthetic program (:func:`~cupool.program.synthetic.synthetic_program`: one
declared op per trace op, whose callable fills the buffers it produces with byte patterns
and verifies every other buffer it uses, then spends the op's duration) and runs the
iterations with the session's own :class:`~cupool.program.runner.PlannedRunner`: its
:class:`~cupool.swap.engine.SwapEngine` (a :class:`~cupool.allocator.pool.PlannedPool`
serving every residency at its planned offset, handles, copy streams, pinned staging), its
op calls (an op callable that raises is the session's
:class:`~cupool.program.errors.OpFailedError`) and its feedback between iterations (the
late prefetches the engine measured, to
:func:`~cupool.planning.budget.feedback.adjust_triggers`, whose adjusted plan runs next).
What differs from a user's program: no passive step (the trace and its plan are given,
with the trace's own buffer ids, sizes and recompute recipes) and the scales below. It
reports one flat dict (the ``cupool replay --json`` object).

**Devices.** ``"emulated"`` opens an emulated device paced like the link (below).
``"cuda"`` opens the GPU (:class:`~cupool.devices.errors.DeviceUnavailableError` without
one): patterns are filled and verified by the CUDA kernels, op durations are spin kernels,
and copies run at the GPU's own link speed, unpaced — so only ``size_scale=1`` keeps the
timing comparable with the simulator there (``time_scale`` still stretches the ops).

**Scaling** (so a multi-GB trace replays in a few MB and a few hundred ms, with timing
comparable to the simulator; both are fields of :class:`ReplaySettings`):

- ``size_scale`` (int >= 1): every size is divided by it (rounded down; offsets rounded
  up, so disjoint ranges stay disjoint). Bytes in the report are *trace* bytes except
  ``bytes_checked``/``corrupt_bytes``, which count the bytes really compared.
- ``time_scale`` (>= 1): every op duration is multiplied by it, so the per-op Python
  overhead (callbacks, pattern checks) is small next to the op's time.
- The link is paced so that a copy takes ``time_scale`` times what the simulator says for
  the *full-size* buffer: bandwidth ``link_gbps / (size_scale × time_scale)`` and latency
  ``latency_us × time_scale``. The reported times are wall time divided by ``time_scale``,
  in trace µs, directly comparable with :func:`cupool.sim.simulate` for the same plan.

Result keys: ``iterations``, ``mean_iteration_us`` (trace µs, mean over iterations),
``iteration_us`` (per iteration), ``late_prefetches`` (per iteration: swap-ins whose due op
waited), ``stall_us`` (per iteration), ``peak_device_bytes`` (the arena of the plan the
pool serves, in trace bytes),
``arena_reserved_bytes`` (what the pool reserved at the scale used: stretches between
residency boundaries rounded up to its 512-byte unit), ``pool`` (the pool's statistics;
``planned_hits`` counts residencies served at their planned offset), ``off_plan`` (per
iteration, residencies served elsewhere), ``bytes_checked``,
``corrupt_bytes``, ``sim_iteration_us`` (the simulator's prediction for the first plan),
``feedback_moves`` (per iteration, triggers moved), ``sim_late_floor`` (swap-ins the
simulator predicts late, by more than the timer-noise threshold, for the plan as the
feedback left it: the floor late prefetches can fall to), ``sim_late_floor_planned`` (the
same for the plan as first planned), ``staging`` and ``copies`` (stats),
``size_scale``, ``time_scale``, ``link_gbps``, ``budget_bytes``, ``policy``, ``trace``,
and ``plan_out`` when the adjusted plan was written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from cupool.check import validate_swap_plan
from cupool.core.units import parse_budget
from cupool.core.vocabulary import Plan, Trace
from cupool.devices.errors import DeviceUnavailableError
from cupool.errors import InputError
from cupool.planning.budget.feedback import predicted_waits
from cupool.planning.planned import make_plan
from cupool.program.calls import OpCaller
from cupool.program.errors import ReplayError
from cupool.program.runner import PlannedRunner, RunnerOptions
from cupool.program.synthetic import synthetic_program
from cupool.progress import iterate
from cupool.sim.cost import cost_model, link_gbps
from cupool.sim.simulator import simulate
from cupool.swap.engine import LATE_THRESHOLD_WALL_US, EngineSettings
from cupool.swap.errors import EngineError

DEFAULT_SIZE_SCALE = 1024
DEFAULT_TIME_SCALE = 50.0


@dataclass(frozen=True)
class ReplaySettings:
    """How a replay runs: ``iterations`` (int >= 1); ``link`` (a preset name such as
    ``"gen5"`` or GB/s: the cost model the plan and the simulator use, and the pace of an
    emulated device's copies); ``size_scale`` (int >= 1) and ``time_scale`` (>= 1), see
    the module docstring; ``policy`` (the budget planner's policy, when no plan is
    given); ``feedback`` (move late swap-ins' triggers between iterations); ``seed``
    (the patterns'). Bad values raise :class:`~cupool.errors.InputError`."""

    iterations: int = 3
    link: str | float = "gen5"
    size_scale: int = DEFAULT_SIZE_SCALE
    time_scale: float = DEFAULT_TIME_SCALE
    policy: str = "auto"
    feedback: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        iterations, size_scale = self.iterations, self.size_scale
        if not isinstance(iterations, int) or iterations < 1:
            raise InputError(f"iterations (={iterations!r}) must be an int >= 1")
        if not isinstance(size_scale, int) or isinstance(size_scale, bool) or size_scale < 1:
            raise InputError(f"size_scale (={size_scale!r}) must be an int >= 1")
        if not self.time_scale >= 1:
            raise InputError(f"time_scale (={self.time_scale!r}) must be >= 1")


class _PlanFor(NamedTuple):
    """A swapping ``plan`` and the ``trace`` it was made for (the planner may derive one)."""

    plan: Plan
    trace: Trace


def open_paced_device(link="gen5", size_scale: int = DEFAULT_SIZE_SCALE,
                      time_scale: float = DEFAULT_TIME_SCALE, latency_us: float | None = None):
    """An emulated device paced like ``link`` at the given scales (module docstring)."""
    from cupool.devices import open_device

    cost = cost_model(link, latency_us=latency_us)
    return open_device("emulated", h2d_gbps=cost.h2d_gbps / (size_scale * time_scale),
                       d2h_gbps=cost.d2h_gbps / (size_scale * time_scale),
                       latency_us=cost.latency_us * time_scale)


def replay(trace: Trace, budget, settings: ReplaySettings | None = None, *,
           device="emulated", plan: Plan | None = None, plan_trace: Trace | None = None,
           plan_out=None, recompute: dict | None = None) -> dict:
    """Replay ``trace`` under ``budget`` (bytes, ``"4GiB"`` or ``"70%"`` of the lower bound)
    as ``settings`` say (default :class:`ReplaySettings()`) on ``device`` (``"emulated"``
    opens a paced one, ``"cuda"`` the GPU, and closes it after; a device object is used as
    is and must be paced by the caller, see :func:`open_paced_device`). ``plan`` (with
    ``plan_trace``, the trace it was made for) replays a given swapping plan instead of
    planning. ``plan_out`` (a path) receives the plan as adjusted by the late-prefetch
    feedback (plan JSON, via ``save_plan``). ``recompute`` maps buffer ids to
    ``recompute(out, *inputs)`` callables replacing the default regeneration of
    recomputed buffers (their pattern written again). Raises :class:`ReplayError` when no
    valid swapping plan exists, :class:`~cupool.devices.errors.DeviceUnavailableError` for
    ``"cuda"`` without a GPU, :class:`~cupool.errors.InputError` for bad arguments,
    :class:`~cupool.program.errors.OpFailedError` when an op's callable or a recompute
    callable raised (after the iteration closed, as the session does).
    """
    settings = settings or ReplaySettings()
    budget_bytes = parse_budget(budget, trace.lower_bound_bytes())
    cost = cost_model(settings.link)
    if device == "cuda":  # no GPU: said before planning, which can take seconds
        from cupool.devices import probe_cuda

        usable, why = probe_cuda()
        if not usable:
            raise DeviceUnavailableError("cuda", why)
    given = _swapping_plan(trace, budget_bytes, settings.policy, cost,
                           plan, plan_trace)
    plan, plan_trace = given.plan, given.trace
    predicted = simulate(plan_trace, plan, cost, validate=False)
    synthetic = synthetic_program(plan_trace, plan, cost.op_times(plan_trace),
                                  settings.size_scale, settings.seed, recompute)
    options = RunnerOptions(cost, settings.feedback,
                            EngineSettings(settings.size_scale, settings.time_scale,
                                           settings.seed),
                            op_us=synthetic.op_us, recompute=synthetic.recompute)
    own_device = isinstance(device, str)
    if own_device:
        device = _open_device(device, settings)
    runs, checked = [], []
    try:
        gpu = getattr(device, "kind", "") == "cuda"
        try:
            runner = PlannedRunner(synthetic.program, given, device,
                                   OpCaller(gpu, check_writes=False), synthetic.parked, options)
        except EngineError as exc:  # the engine cannot run this plan on this device
            raise ReplayError(str(exc)) from exc
        try:
            synthetic.checks.bind(runner.engine)
            for iteration in iterate(range(settings.iterations), "replay", "iter"):
                runs.append(runner.run(synthetic.program, iteration))
                checked.append(synthetic.checks.take())
            engine, plan = runner.engine, runner.plan
            reserved = engine.arena_bytes
            staging, copies = engine.staging.stats(), engine.copy_engine.stats()
            pool = engine.pool.memory_stats()
        finally:
            runner.close()
    finally:
        if own_device:
            device.close()
    noise_us = LATE_THRESHOLD_WALL_US / settings.time_scale
    results = [run.result for run in runs]
    times = [r.iteration_us for r in results]
    # the plan the feedback left, simulated again only when it moved something
    final = predicted if plan is given.plan else simulate(plan_trace, plan, cost,
                                                           validate=False)
    return {
        "trace": trace.name, "policy": settings.policy, "budget_bytes": budget_bytes,
        "link_gbps": link_gbps(settings.link), "size_scale": settings.size_scale,
        "time_scale": settings.time_scale, "iterations": settings.iterations,
        "mean_iteration_us": sum(times) / len(times),
        "iteration_us": times, "sim_iteration_us": predicted.iteration_us,
        "late_prefetches": [r.late_prefetches for r in results],
        "stall_us": [r.stall_us for r in results],
        "feedback_moves": [run.moved_triggers for run in runs],
        "sim_late_floor": _late_floor(final, plan, noise_us),
        "sim_late_floor_planned": _late_floor(predicted, given.plan, noise_us),
        "peak_device_bytes": plan.arena_bytes, "arena_reserved_bytes": reserved,
        "off_plan": [r.off_plan for r in results], "pool": pool,
        "bytes_checked": sum(r.bytes_checked for r in results)
        + sum(c.bytes_checked for c in checked),
        "corrupt_bytes": sum(r.corrupt_bytes for r in results)
        + sum(c.corrupt_bytes for c in checked),
        "staging": staging, "copies": copies,
    } | _saved(plan, plan_trace, plan_out)


def _late_floor(report, plan: Plan, noise_us: float) -> int:
    """The swap-ins of ``plan`` that ``report`` (its simulation) predicts late by more
    than ``noise_us``: the floor late prefetches can fall to."""
    return sum(1 for wait in predicted_waits(report, plan).values() if wait > noise_us)


def _swapping_plan(trace: Trace, budget_bytes: int, policy: str, cost, plan: Plan | None,
                   plan_trace: Trace | None) -> _PlanFor:
    """The plan to replay: ``plan`` (for ``plan_trace``, default ``trace``) if given, else
    the budget planner's for ``budget_bytes`` with ``policy``; either way checked by the
    swap validator. Raises :class:`ReplayError` when there is none or it is invalid."""
    if plan is None:
        planned = make_plan(trace, budget_bytes, policy=policy, cost=cost)
        if not planned.fits:
            raise ReplayError(f"no plan within {budget_bytes} bytes: {planned.reason}")
        plan, plan_trace = planned.plan, planned.trace
    plan_trace = plan_trace or trace
    report = validate_swap_plan(plan_trace, plan)
    if not report.valid:
        raise ReplayError(f"invalid plan ({report.rule}): {report.message}")
    return _PlanFor(plan, plan_trace)


def _open_device(kind: str, settings: ReplaySettings):
    """The device ``kind`` names: the GPU for ``"cuda"``, a paced emulated device for
    ``"emulated"``."""
    if kind not in ("emulated", "cuda"):
        raise InputError(f"device (={kind!r}) must be 'emulated' or 'cuda'")
    if kind == "cuda":
        from cupool.devices import open_device

        return open_device("cuda")
    return open_paced_device(settings.link, settings.size_scale, settings.time_scale)


def _saved(plan, plan_trace, plan_out) -> dict:
    """Write the feedback-adjusted plan to ``plan_out`` (if given); the key saying where."""
    if plan_out is None:
        return {}
    from cupool.io import save_plan

    save_plan(plan, plan_out, plan_trace)
    return {"plan_out": str(plan_out)}
