"""``cupool stress``: the pool and the swap runtime under random load, every byte checked.

:func:`run_stress` opens a device (``"emulated"`` or ``"cuda"``) and runs three scenarios
in rounds until the time is used, then reports one flat dict (the ``--json`` object)::

    {"device", "seconds", "scenarios", "bytes_checked", "corrupt_bytes",
     "leaked_blocks", "late_prefetches", "errors"}

Scenarios (each round runs them in this order, with seeds derived from ``(seed, round)``):

``pool`` (:mod:`.pool_scenario`)
    A :class:`~cupool.allocator.pool.PlannedPool` on the device serves a random workload
    (:func:`random_workload`: random sizes from 1 byte to 512 KiB, random free order, one
    block carried across the iteration boundary, a few persistent blocks) for
    :data:`POOL_ITERATIONS` iterations: the first is recorded and planned, the rest are
    served from the plan (the plan is checked by the independent validator). Every block
    is filled with the pattern of ``(block, iteration)`` when allocated and verified when
    freed, so two live blocks sharing a byte are caught.
``swap`` (:mod:`.swap_scenario`)
    Swaps under pressure: a small trace (:func:`training_trace`, a seeded synthetic
    training step; from the second round on, every other round the bundled ResNet-50
    training trace with sizes divided by :data:`BUNDLED_SIZE_SCALE`) is planned at 50%
    of its lower bound (:data:`SWAP_BUDGET`) by a policy that swaps, validated, and run
    by :func:`walk_plan` (swap-ins and swap-outs on their own streams, patterns filled
    and verified by the kernels at every use); then the same plan is replayed by the
    swap engine (:func:`cupool.app.replay.replay`: planned pool, handles, copy engine,
    pinned staging, late-prefetch feedback), on a paced emulated device of its own when
    the run is emulated, on the GPU itself otherwise.
``streams`` (:mod:`.streams_scenario`)
    :data:`THREADS` threads, each with its own stream and its own blocks (taken from one
    shared pool, concurrently) and pinned buffers, copy patterns host → device →
    device → host :data:`STREAM_ROUNDS` times; the kernels verify the device copy and
    the host checks what came back.

The first round always runs all three scenarios, so even a very short run checks each
once; later rounds start only while time is left (a round may end after the deadline).

**Counting.** ``bytes_checked`` / ``corrupt_bytes`` count bytes compared with their
pattern and those that differed. ``late_prefetches`` counts swap-ins whose data had not
landed when the op that needs it was reached (both the walker's and the engine's).
``leaked_blocks`` is *measured* after each scenario's teardown (every array and pointer
dropped): pool blocks still live, plus device reservations still held beyond what the
device held before the scenario (after the pool is closed), plus one for a scenario that
leaves pinned host bytes allocated (the device counts pinned bytes, not blocks).
``errors`` counts scenarios that raised; their messages are kept in
:attr:`StressResult.messages`.

**Kernels.** ``fill_pattern`` / ``verify_pattern`` / ``spin`` from :mod:`cupool.kernels`
dispatch on the device: the NumPy twins on the emulated device, the CUDA kernels (compiled
once with NVRTC by the loader) on a GPU. :func:`open_stress_device` compiles every kernel
before anything runs, so a missing NVRTC or an unsupported GPU is one clear error.

**Fault injection** (``faults``, for tests that prove the checks can fail): ``"pool-corrupt"``
overwrites the first bytes of one pool block after its fill, ``"pool-leak"`` keeps one
pool block alive past the teardown, ``"swap-corrupt"`` flips bytes of the first host copy a
swap-out of the walker wrote, ``"streams-corrupt"`` overwrites device bytes before they are
checked.

**Two executors.** :func:`walk_plan` (:mod:`.independent_walker`) is a second, independent
way to run a swapping plan — the device protocol and the kernels only, no pool, handles or
staging — so a fault in the swap engine and a fault in the device or the kernels show up
separately; that is why it is not a client of :class:`~cupool.swap.engine.SwapEngine`,
while the scenario's replay is.

Modules: :mod:`.config` (the names and numbers), :mod:`.errors`, :mod:`.result` (counts, the
``--json`` object, the summary lines), :mod:`.device` (opening it, measuring leaks),
:mod:`.workloads`, the three scenarios, :mod:`.independent_walker`, :mod:`.runner`
(:func:`run_stress`).
"""

from __future__ import annotations

from cupool.app.stress.config import (
    BUNDLED_SIZE_SCALE,
    DEVICES,
    FAULTS,
    POOL_ITERATIONS,
    SCENARIOS,
    STREAM_ROUNDS,
    SWAP_BUDGET,
    SWAP_POLICIES,
    THREADS,
)
from cupool.app.stress.device import open_stress_device
from cupool.app.stress.errors import StressError, WalkError
from cupool.app.stress.independent_walker import WalkSettings, walk_plan
from cupool.app.stress.pool_scenario import run_pool_scenario
from cupool.app.stress.result import JSON_KEYS, ScenarioResult, StressResult, summary_lines
from cupool.app.stress.runner import run_stress
from cupool.app.stress.streams_scenario import run_streams_scenario
from cupool.app.stress.swap_scenario import SwapCase, run_swap_scenario, swap_case
from cupool.app.stress.workloads import Workload, random_workload, training_trace

__all__ = ["BUNDLED_SIZE_SCALE", "DEVICES", "FAULTS", "JSON_KEYS", "POOL_ITERATIONS",
           "SCENARIOS", "STREAM_ROUNDS", "SWAP_BUDGET", "SWAP_POLICIES", "THREADS",
           "ScenarioResult", "StressError", "StressResult", "SwapCase", "WalkError",
           "WalkSettings", "Workload", "open_stress_device", "random_workload",
           "run_pool_scenario", "run_streams_scenario", "run_stress", "run_swap_scenario",
           "summary_lines", "swap_case", "training_trace", "walk_plan"]
