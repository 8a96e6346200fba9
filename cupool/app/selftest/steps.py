"""The self-test's checks that run other parts of cupool: the GPU test suite, the stress
run and trace replay. Each returns one flat dict; none raises for a failing check (a
failure is a count in the dict), only for bad arguments.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from cupool.errors import InputError

STEADY_FROM = 2
"""Index of the first iteration counted as steady (the third: the first runs the plan as
planned, the second the first feedback's correction)."""
SIM_TOLERANCE = 0.15
"""Replay targets: measured steady iteration time within this fraction of the simulator."""


def junit_counts(path: Path) -> dict:
    """``{"tests", "passed", "failed", "errors", "skipped", "failures", "skip_reasons"}``
    of a pytest ``--junitxml`` file; ``failures`` names the first 20 failed or erroring
    tests, ``skip_reasons`` counts the skips by message."""
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures, skip_reasons = [], {}
    for suite in suites:
        for case in suite.iter("testcase"):
            counts["tests"] += 1
            child = next((child for child in case
                          if child.tag in ("failure", "error", "skipped")), None)
            if child is None:
                continue
            outcome = child.tag
            if outcome == "skipped":
                reason = " ".join((child.get("message") or "").split())
                skip_reasons[reason] = skip_reasons.get(reason, 0) + 1
            key = {"failure": "failed", "error": "errors", "skipped": "skipped"}[outcome]
            counts[key] += 1
            if outcome != "skipped" and len(failures) < 20:
                failures.append(f"{case.get('classname')}::{case.get('name')}")
    counts["passed"] = counts["tests"] - counts["failed"] - counts["errors"] - counts["skipped"]
    return counts | {"failures": failures, "skip_reasons": skip_reasons}


def run_test_suite(tests: Path, *, marker: str = "gpu", timeout_s: float = 240.0,
                   junit_out: Path | None = None) -> dict:
    """Run ``pytest -m marker`` on ``tests`` in a child process; its counts (``passed``,
    ``failed``, ``errors``, ``skipped``), seconds and return code. A run past ``timeout_s``
    is killed and counted as one error (``timed_out``)."""
    tests = Path(tests)
    if not tests.exists():
        return {"ran": False, "reason": f"no test directory at {tests} (run the self-test "
                                        f"from a checkout of cupool)"}
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(junit_out) if junit_out else Path(scratch) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
                   marker, "-rs", f"--junitxml={junit}", str(tests)]
        started = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                                  cwd=tests.parent, env=os.environ.copy(), check=False)
        except subprocess.TimeoutExpired as expired:
            tail = (expired.stdout or b"")[-2000:]
            return {"ran": True, "timed_out": True, "seconds": timeout_s, "returncode": None,
                    "tests": 0, "passed": 0, "failed": 0, "errors": 1, "skipped": 0,
                    "failures": [f"pytest ran past {timeout_s:.0f} s"],
                    "output_tail": tail.decode(errors="replace") if isinstance(tail, bytes)
                    else str(tail)}
        seconds = time.perf_counter() - started
        if not junit.exists():
            return {"ran": True, "timed_out": False, "seconds": seconds,
                    "returncode": done.returncode, "tests": 0, "passed": 0, "failed": 0,
                    "errors": 1, "skipped": 0, "failures": ["pytest wrote no report"],
                    "output_tail": (done.stdout + done.stderr)[-2000:]}
        counts = junit_counts(junit)
    return {"ran": True, "timed_out": False, "seconds": seconds,
            "returncode": done.returncode, **counts,
            "output_tail": (done.stdout + done.stderr)[-2000:]}


def run_stress_step(device_kind: str, minutes: float, seed: int = 0) -> dict:
    """``cupool stress`` on ``device_kind`` for ``minutes``: its summary and messages."""
    from cupool.app.stress import run_stress

    result = run_stress(device_kind, minutes, seed)
    return {**result.summary(), "rounds": result.rounds, "passed": result.passed,
            "by_scenario": dict(result.by_scenario), "messages": list(result.messages)}


def replay_step(trace, budget: str, device_kind: str, *, iterations: int = 5,
                link: str = "gen5") -> dict:
    """Replay ``trace`` at ``budget`` on ``device_kind``: measured against the simulator.

    On ``cuda`` at full size (``size_scale=1``, ``time_scale=1``: ops are spin kernels of
    their trace durations, copies run at the GPU's own link speed); on ``emulated`` at
    replay's default scales on a device paced like ``link``. ``steady_us`` is the mean
    iteration time from the third iteration on, ``steady_over_sim`` its ratio to the
    simulator's prediction for the plan."""
    from cupool.app.replay import ReplaySettings, replay

    if iterations <= STEADY_FROM:
        raise InputError(f"iterations (={iterations!r}) must be > {STEADY_FROM} to measure "
                         f"steady iterations")
    scales = {"size_scale": 1, "time_scale": 1.0} if device_kind == "cuda" else {}
    result = replay(trace, budget, ReplaySettings(iterations=iterations, link=link, **scales),
                    device=device_kind)
    steady = result["iteration_us"][STEADY_FROM:]
    steady_us = statistics.fmean(steady)
    ratio = steady_us / result["sim_iteration_us"]
    late = result["late_prefetches"]
    return {
        "trace": trace.name, "budget": budget, "budget_bytes": result["budget_bytes"],
        "device": device_kind, "link_gbps": result["link_gbps"],
        "size_scale": result["size_scale"], "time_scale": result["time_scale"],
        "iterations": iterations, "iteration_us": result["iteration_us"],
        "sim_iteration_us": result["sim_iteration_us"], "steady_us": steady_us,
        "steady_over_sim": ratio, "within_tolerance": abs(ratio - 1.0) <= SIM_TOLERANCE,
        "late_prefetches": late, "sim_late_floor": result["sim_late_floor"],
        "sim_late_floor_planned": result["sim_late_floor_planned"],
        "late_at_floor": all(n <= result["sim_late_floor_planned"]
                             for n in late[STEADY_FROM:])
        and result["sim_late_floor"] <= result["sim_late_floor_planned"],
        "stall_us": result["stall_us"], "bytes_checked": result["bytes_checked"],
        "corrupt_bytes": result["corrupt_bytes"], "off_plan": result["off_plan"],
    }
