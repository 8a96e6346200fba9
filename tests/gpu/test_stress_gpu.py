"""Several streams and threads, and whole ``cupool stress`` runs, on a real GPU (marked
``gpu``; skipped without one). ``CUPOOL_SOAK_MINUTES=180`` adds an hours-long soak."""

from __future__ import annotations

import json
from io import StringIO

import pytest

from cupool.app.stress import FAULTS, JSON_KEYS, run_streams_scenario, run_stress, summary_lines
from cupool.cli import main

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("seed", range(3))
def test_concurrent_copies_on_distinct_streams_and_threads(cuda_device, seed):
    result = run_streams_scenario(cuda_device, seed)
    assert result.bytes_checked > 0
    assert (result.corrupt_bytes, result.leaked_blocks) == (0, 0)


def test_a_short_stress_run_passes(gpu_usable):
    result = run_stress("cuda", 0.25, seed=1)
    assert result.passed, summary_lines(result)
    assert result.scenarios >= 3 and result.bytes_checked > 0


def test_the_cli_prints_the_documented_json(gpu_usable):
    out, err = StringIO(), StringIO()
    code = main(["stress", "--device", "cuda", "--minutes", "0.1", "--json"], out, err)
    document = json.loads(out.getvalue())
    assert code == 0, err.getvalue()
    assert list(document) == list(JSON_KEYS) and document["device"] == "cuda"
    assert document["corrupt_bytes"] == document["leaked_blocks"] == document["errors"] == 0


def test_injected_faults_are_caught_by_the_gpu_checks(gpu_usable):
    result = run_stress("cuda", 0.001, seed=2, faults=FAULTS)
    assert result.errors == 0, result.messages
    assert result.corrupt_bytes == 3 * 4 and result.leaked_blocks == 1


def test_soak(soak_minutes):
    """Opt-in: ``CUPOOL_SOAK_MINUTES`` minutes of every scenario, zero tolerance."""
    result = run_stress("cuda", soak_minutes, seed=0)
    print("\n".join(summary_lines(result)))
    assert result.passed, summary_lines(result)
