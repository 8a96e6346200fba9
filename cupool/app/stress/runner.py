"""The stress run: a device opened once, the scenarios in rounds until the time is used,
every scenario's failure counted, never raised."""

from __future__ import annotations

import time

import numpy as np

from cupool import progress
from cupool.app.stress.config import FAULTS, MAX_MESSAGES, SCENARIOS, THREADS
from cupool.app.stress.device import one_line, open_stress_device
from cupool.app.stress.pool_scenario import run_pool_scenario
from cupool.app.stress.result import StressResult
from cupool.app.stress.streams_scenario import run_streams_scenario
from cupool.app.stress.swap_scenario import run_swap_scenario
from cupool.errors import InputError


class _Context:
    """What a stress run keeps between rounds: the device, its streams, cached plans, and
    blocks a leak fault keeps alive."""

    def __init__(self, device) -> None:
        self.device = device
        self.pool_stream = device.create_stream("stress-pool")
        self.walk_streams = tuple(device.create_stream(f"stress-walk-{name}")
                                  for name in ("compute", "h2d", "d2h"))
        self.thread_streams = [device.create_stream(f"stress-thread-{k}")
                               for k in range(THREADS)]
        self.cache: dict = {}
        self.kept: list = []


def _check_minutes(minutes) -> float:
    if isinstance(minutes, bool):
        raise InputError(f"minutes (={minutes!r}) must be a number > 0")
    try:
        value = float(minutes)
    except (TypeError, ValueError):
        raise InputError(f"minutes (={minutes!r}) must be a number > 0") from None
    if not np.isfinite(value) or value <= 0:
        raise InputError(f"minutes (={minutes!r}) must be a finite number > 0")
    return value


def run_stress(device: str = "emulated", minutes: float = 2.0, seed: int = 0, *,
               scenarios=SCENARIOS, faults=()) -> StressResult:
    """Run the stress scenarios on a new ``device`` (``"emulated"`` or ``"cuda"``) for
    ``minutes`` (fractions allowed) and return the totals (:mod:`cupool.app.stress`).

    Raises :class:`StressError` / :class:`~cupool.errors.InputError` for bad arguments or
    a device that cannot run (before any scenario starts); failures inside a scenario are
    counted in ``errors``, never raised."""
    minutes = _check_minutes(minutes)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed (={seed!r}) must be an int >= 0")
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown or not scenarios:
        raise InputError(f"scenarios (={list(scenarios)!r}) must be a non-empty subset of "
                         f"{list(SCENARIOS)}")
    bad_faults = [f for f in faults if f not in FAULTS]
    if bad_faults:
        raise InputError(f"faults (={list(faults)!r}) must be among {list(FAULTS)}")
    opened = open_stress_device(device)
    result = StressResult(device=device)
    started = time.perf_counter()
    deadline = started + minutes * 60.0
    context = None
    try:
        context = _Context(opened)
        with progress.bar(None, "stress", "scenario") as bar:
            round_index = 0
            while round_index == 0 or time.perf_counter() < deadline:
                for name in SCENARIOS:
                    if name not in scenarios:
                        continue
                    if round_index > 0 and time.perf_counter() >= deadline:
                        break
                    _run_one(context, name, seed, round_index, faults, result)
                    bar.update(postfix=f"corrupt {result.corrupt_bytes}, leaked "
                                       f"{result.leaked_blocks}, errors {result.errors}")
                round_index += 1
            result.rounds = round_index
    finally:
        if context is not None:
            context.kept.clear()  # blocks a leak fault kept: the device returns their bytes
        opened.close()
    result.seconds = time.perf_counter() - started
    return result


def _run_one(context: _Context, name: str, seed: int, round_index: int, faults,
             result: StressResult) -> None:
    scenario_seed = int(np.random.SeedSequence([seed, round_index, SCENARIOS.index(name)])
                        .generate_state(1, dtype=np.uint64)[0] >> 1)
    device = context.device
    try:
        if name == "pool":
            outcome = run_pool_scenario(device, scenario_seed, context.pool_stream,
                                        faults=faults, keep=context.kept)
        elif name == "swap":
            outcome = run_swap_scenario(device, scenario_seed, bundled=round_index % 2 == 1,
                                        streams=context.walk_streams, faults=faults,
                                        cache=context.cache)
        else:
            outcome = run_streams_scenario(device, scenario_seed, context.thread_streams,
                                           faults=faults)
    except Exception as exc:  # counted and reported, the run goes on
        result.errors += 1
        if len(result.messages) < MAX_MESSAGES:
            result.messages.append(f"{name} (round {round_index}): {type(exc).__name__}: "
                                   f"{one_line(str(exc))}")
        outcome = None
    result.scenarios += 1
    result.by_scenario[name] += 1
    if outcome is not None:
        result.bytes_checked += outcome.bytes_checked
        result.corrupt_bytes += outcome.corrupt_bytes
        result.leaked_blocks += outcome.leaked_blocks
        result.late_prefetches += outcome.late_prefetches
