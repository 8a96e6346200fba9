"""A checking workload for time-shared devices: real job processes that verify every byte.

Each job (:class:`JobSpec`) is its own process. In its first slice it fills its persistent
slot with a seeded pattern; in every iteration it checks that the slot still holds exactly
that pattern (a switch, eviction or another job must never change it), at the start of
every slice that its temporary bytes are all zero (the previous holder's data was
cleared; under the ``naive`` policy: that they hold the job's own last contents, swapped
back in), and then it dirties its temporary bytes as a real iteration would. It reports
what it saw as a plain dict; :func:`run_jobs` runs several jobs and collects the reports.

Timestamps are ``time.perf_counter()`` values, which on Linux are ``CLOCK_MONOTONIC`` and
so comparable between processes: the benchmark derives the client-visible switch latency
(one job's last ``iteration_done`` to the next job's grant) from them.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from cupool.sharing.errors import SharingArgumentError, SharingError
from cupool.sharing.layout import NAIVE


@dataclass(frozen=True)
class JobSpec:
    """One checking job: ``iterations`` iterations with the given needs, ``seed`` for its
    persistent pattern; ``device`` / ``runtime_dir`` find the broker. ``die_after``: exit
    abruptly (``os._exit``) inside that iteration while holding the slice (tests).
    ``wait_for_jobs``: before the first iteration, wait (up to ``acquire_timeout_s``) until
    the broker has admitted that many jobs, and inside the first slice until the others
    are all queued, so that the jobs really take turns from the first switch on."""

    job: str
    persistent_bytes: int
    temporary_bytes: int
    iterations: int
    seed: int = 0
    device: str = "emulated:0"
    runtime_dir: str | None = None
    die_after: int | None = None
    acquire_timeout_s: float | None = 60.0
    wait_for_jobs: int = 0


def pattern(nbytes: int, seed: int) -> np.ndarray:
    """``nbytes`` seeded random bytes (the persistent contents a job expects)."""
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def run_job(spec: JobSpec) -> dict:
    """Run one checking job in this process; returns its report (see :func:`run_jobs`)."""
    import os

    from cupool.sharing.client import SharingClient

    expected = pattern(spec.persistent_bytes, spec.seed)
    report = {"job": spec.job, "iterations": 0, "slices": [], "persistent_corrupt_bytes": 0,
              "temporary_dirty_bytes": 0, "bytes_checked": 0, "error": None}
    try:
        with SharingClient(spec.job, spec.persistent_bytes, spec.temporary_bytes,
                           device=spec.device, runtime_dir=spec.runtime_dir) as client:
            deadline = time.monotonic() + (spec.acquire_timeout_s or 60.0)
            while (client.stats()["stats"]["jobs.admitted"] < spec.wait_for_jobs
                   and time.monotonic() < deadline):
                time.sleep(0.01)
            written = False
            current = None
            fill = 1 + spec.seed % 255
            promised = 0  # what the temporary bytes must hold at the start of a slice
            for iteration in range(spec.iterations):
                with client.iteration(spec.acquire_timeout_s) as grant:
                    if current is None or current["grant"] != grant.grant:
                        current = {"grant": grant.grant, "granted": time.perf_counter(),
                                   "ended": None, "iterations": 0}
                        report["slices"].append(current)
                        temporary = np.frombuffer(grant.temporary.read(), dtype=np.uint8)
                        report["temporary_dirty_bytes"] += int(
                            np.count_nonzero(temporary != promised))
                        report["bytes_checked"] += temporary.size
                        if len(report["slices"]) == 1:
                            _wait_for_queue(client, spec.wait_for_jobs - 1, deadline)
                    if not written:
                        grant.persistent.write(0, expected)
                        written = True
                    persistent = np.frombuffer(grant.persistent.read(), dtype=np.uint8)
                    report["persistent_corrupt_bytes"] += int(
                        np.count_nonzero(persistent != expected))
                    report["bytes_checked"] += persistent.size
                    grant.temporary.fill(fill)
                    if client.policy == NAIVE:  # the naive scheme keeps it for the next slice
                        promised = fill
                    current["iterations"] += 1
                    if spec.die_after is not None and iteration >= spec.die_after:
                        os._exit(3)
                    current["ended"] = time.perf_counter()
                report["iterations"] += 1
    except SharingError as error:
        report["error"] = {"type": type(error).__name__, "message": str(error)}
    return report


def _wait_for_queue(client, waiting: int, deadline: float) -> None:
    while (sum(job["waiting"] for job in client.stats()["jobs"]) < waiting
           and time.monotonic() < deadline):
        time.sleep(0.005)


def _job_main(spec: JobSpec, conn) -> None:
    conn.send(run_job(spec))
    conn.close()


def run_jobs(specs, timeout_s: float = 60.0) -> list[dict]:
    """Run each :class:`JobSpec` in its own (spawned) process, concurrently; returns their
    reports in order. A job that dies reports ``{"job", "exitcode"}`` only; a job that does
    not finish within ``timeout_s`` is killed and reported the same way (never a hang)."""
    import multiprocessing

    specs = list(specs)
    if not specs:
        raise SharingArgumentError("run_jobs", "specs", specs, "must name at least one job")
    context = multiprocessing.get_context("spawn")
    running = []
    for spec in specs:
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(target=_job_main, args=(spec, sender), daemon=True,
                                  name=f"cupool-job-{spec.job}")
        process.start()
        sender.close()
        running.append((spec, process, receiver))
    deadline = time.monotonic() + timeout_s
    reports = []
    for spec, process, receiver in running:
        report = None
        if receiver.poll(max(0.0, deadline - time.monotonic())):
            try:
                report = receiver.recv()
            except EOFError:
                report = None
        process.join(max(0.1, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join(5.0)
        reports.append(report or {"job": spec.job, "exitcode": process.exitcode,
                                  "spec": asdict(spec)})
    return reports
