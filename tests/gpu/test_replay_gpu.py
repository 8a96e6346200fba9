"""Swaps under pressure on a real GPU (marked ``gpu``; skipped without one): plans at 50%
of the lower bound run by the swap runtime (``cupool.app.replay.replay``: planned pool,
handles, copy engine, pinned staging) and by ``cupool.app.stress.walk_plan`` (the device
protocol and the kernels only) — swap-ins and swap-outs on their own CUDA streams, patterns
written and verified by the CUDA kernels at every use. Zero corrupt bytes, zero leaked
blocks."""

from __future__ import annotations

import pytest

from cupool.app.replay import ReplaySettings, replay
from cupool.app.stress import (
    SWAP_POLICIES,
    WalkSettings,
    run_swap_scenario,
    swap_case,
    training_trace,
    walk_plan,
)
from cupool.check import validate_swap_plan
from cupool.data import bundled_traces
from cupool.io import load_trace
from tests.swap_cases import six_op_recompute_plan, six_op_swap_plan, six_op_trace

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("seed", range(4))
def test_synthetic_training_steps_at_half_budget_are_byte_exact(cuda_device, seed):
    result = run_swap_scenario(cuda_device, seed)
    assert result.notes["policy"] in SWAP_POLICIES
    assert result.bytes_checked > 0
    assert (result.corrupt_bytes, result.leaked_blocks) == (0, 0)
    assert cuda_device.stats()["copy_count.h2d"] > 0


def test_the_bundled_resnet50_step_at_half_budget_is_byte_exact(cuda_device):
    result = run_swap_scenario(cuda_device, 0, bundled=True)
    assert result.bytes_checked > 0
    assert (result.corrupt_bytes, result.leaked_blocks) == (0, 0)


@pytest.mark.parametrize("make_plan", [six_op_swap_plan, six_op_recompute_plan])
def test_every_use_is_checked_exactly(cuda_device, make_plan):
    trace = six_op_trace()
    result = walk_plan(cuda_device, trace, make_plan(trace), WalkSettings(iterations=3, seed=9))
    assert (result.bytes_checked, result.corrupt_bytes) == (3 * 48, 0)
    stats = cuda_device.stats()
    assert stats["reservations.current"] == stats["pinned_bytes.current"] == 0


def test_spinning_ops_overlap_the_copies_and_stay_exact(cuda_device):
    """Ops take their traced durations (the spin kernel), so swap-ins really race compute."""
    case = swap_case(training_trace(3), 1)
    assert case is not None and validate_swap_plan(case.plan_trace, case.plan).valid
    result = walk_plan(cuda_device, case.plan_trace, case.plan,
                       WalkSettings(iterations=3, seed=3, spin_scale=1.0))
    assert result.bytes_checked > 0 and result.corrupt_bytes == 0


def test_a_corrupted_host_copy_is_caught(cuda_device):
    trace = six_op_trace()
    result = walk_plan(cuda_device, trace, six_op_swap_plan(trace),
                       WalkSettings(iterations=2, faults=("swap-corrupt",)))
    assert result.corrupt_bytes == 4


@pytest.mark.parametrize("policy", ["capuchin", "greedy"])
def test_the_runtime_replays_resnet50_at_half_budget_on_the_gpu(cuda_device, policy):
    path = next(p for p in bundled_traces() if p.name.startswith("resnet50_train_b32_fp32"))
    before = cuda_device.stats()
    settings = ReplaySettings(iterations=3, size_scale=1024, time_scale=1.0, policy=policy,
                              seed=4)
    result = replay(load_trace(path), "50%", settings, device=cuda_device)
    assert result["bytes_checked"] > 0 and result["corrupt_bytes"] == 0
    assert len(result["late_prefetches"]) == 3
    after = cuda_device.stats()
    assert after["reservations.current"] == before["reservations.current"]
    assert after["pinned_bytes.current"] == before["pinned_bytes.current"]
