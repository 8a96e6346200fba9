"""``cupool stress`` on the emulated device: clean runs, exact JSON, bad input, and
injected faults that prove every check can fail."""

from __future__ import annotations

import functools
import importlib
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import cupool.app.stress as stress
import cupool.app.stress.runner as runner
from cupool.app.stress import (
    FAULTS,
    JSON_KEYS,
    StressError,
    WalkError,
    WalkSettings,
    open_stress_device,
    random_workload,
    run_pool_scenario,
    run_streams_scenario,
    run_stress,
    swap_case,
    training_trace,
    walk_plan,
)
from cupool.app.stress.independent_walker import plan_walk
from cupool.check import validate_swap_plan
from cupool.cli import main
from cupool.core.vocabulary import Residency, SwapIn
from cupool.devices import probe_cuda
from cupool.errors import InputError
from cupool.kernels.errors import KernelToolchainError
from tests.swap_cases import six_op_recompute_plan, six_op_swap_plan, six_op_trace, swap_plan

GPU_TESTS = Path(__file__).resolve().parents[1] / "gpu"


@pytest.fixture
def device():
    with open_stress_device("emulated") as opened:
        yield opened


def _run(argv):
    from io import StringIO

    out, err = StringIO(), StringIO()
    code = main(argv, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_short_emulated_run_is_clean_and_prints_exactly_the_documented_keys():
    code, out, err = _run(["stress", "--device", "emulated", "--minutes", "0.01", "--json"])
    document = json.loads(out)
    assert list(document) == list(JSON_KEYS) == [
        "device", "seconds", "scenarios", "bytes_checked", "corrupt_bytes", "leaked_blocks",
        "late_prefetches", "errors"]
    assert (code, err) == (0, "")
    assert document["device"] == "emulated"
    assert document["scenarios"] >= 3  # the first round always runs every scenario
    assert document["bytes_checked"] > 1_000_000
    assert document["corrupt_bytes"] == document["leaked_blocks"] == document["errors"] == 0
    assert document["seconds"] > 0


def test_human_summary_names_the_verdict_and_counts():
    code, out, _err = _run(["stress", "--device", "emulated", "--minutes", "0.001",
                            "--seed", "3"])
    assert code == 0
    assert out.startswith("cupool stress on emulated: PASS")
    for word in ("bytes checked", "corrupt bytes    0", "leaked blocks    0", "errors           0"):
        assert word in out


@pytest.mark.parametrize(("argv", "needle"), [
    (["--minutes", "0"], "(='0') must be a number of minutes > 0"),
    (["--minutes", "-2"], "(='-2') must be a number of minutes > 0"),
    (["--minutes", "abc"], "(='abc') is not a number of minutes"),
    (["--minutes", "nan"], "(='nan') must be a number of minutes > 0"),
    (["--minutes", "inf"], "(='inf') must be a number of minutes > 0"),
    ([], "the following arguments are required: --minutes"),
])
def test_bad_minutes_exit_2_with_one_line(argv, needle):
    code, out, err = _run(["stress", "--device", "emulated", *argv])
    assert code == 2 and out == ""
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_unknown_device_exits_2():
    code, _out, err = _run(["stress", "--device", "tpu", "--minutes", "1"])
    assert code == 2 and "invalid choice: 'tpu'" in err and err.count("\n") == 1


@pytest.mark.skipif(probe_cuda()[0], reason="a GPU is usable here")
def test_cuda_without_a_gpu_says_what_is_missing():
    code, out, err = _run(["stress", "--device", "cuda", "--minutes", "1", "--json"])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--device cuda needs a usable GPU" in err
    assert "nvidia-smi" in err and "--device emulated" in err


def test_missing_nvrtc_says_what_to_install(monkeypatch):
    closed = []

    class FakeGpu:
        kind = "cuda"

        def close(self):
            closed.append(True)

    def no_nvrtc(device, name):
        raise KernelToolchainError("NVRTC", "cupy-cuda13x[ctk]",
                                   "OSError: libnvrtc.so.13:\ncannot open shared object file")

    monkeypatch.setattr("cupool.devices.probe_cuda", lambda: (True, "fake GPU"))
    monkeypatch.setattr("cupool.devices.open_device", lambda kind: FakeGpu())
    monkeypatch.setattr("cupool.kernels.loader.get_function", no_nvrtc)
    code, _out, err = _run(["stress", "--device", "cuda", "--minutes", "1"])
    assert code == 2 and err.count("\n") == 1 and closed == [True]
    assert "NVRTC is not available" in err and "install cupy-cuda13x[ctk]" in err


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"minutes": 0}, "minutes (=0)"), ({"minutes": "x"}, "minutes (='x')"),
    ({"minutes": True}, "minutes (=True)"), ({"seed": -1}, "seed (=-1)"),
    ({"scenarios": ("pool", "nope")}, "scenarios"), ({"faults": ("boom",)}, "faults"),
    ({"device": "auto"}, "device (='auto')"),
])
def test_library_bad_input_is_typed(kwargs, needle):
    arguments = {"device": "emulated", "minutes": 0.001} | kwargs
    with pytest.raises((StressError, InputError)) as caught:
        run_stress(**arguments)
    assert needle in str(caught.value)


def test_injected_faults_are_counted_exactly():
    """One round with every fault: each corrupting fault changes exactly 4 bytes where its
    scenario checks them, and the leak fault keeps exactly one pool block alive."""
    result = run_stress("emulated", 0.001, seed=1, faults=FAULTS)
    assert result.scenarios == 3 and result.errors == 0, result.messages
    assert result.corrupt_bytes == 3 * 4
    assert result.leaked_blocks == 1
    assert not result.passed


def test_cli_exits_1_when_the_checker_finds_corruption(monkeypatch):
    monkeypatch.setattr(stress, "run_stress",
                        functools.partial(stress.run_stress, faults=("pool-corrupt",)))
    code, out, _err = _run(["stress", "--device", "emulated", "--minutes", "0.001", "--json"])
    assert code == 1 and json.loads(out)["corrupt_bytes"] == 4


def test_a_failing_scenario_is_an_error_not_a_crash(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("scenario exploded")

    monkeypatch.setattr(runner, "run_streams_scenario", broken)
    code, out, _err = _run(["stress", "--device", "emulated", "--minutes", "0.001", "--json"])
    assert code == 1 and json.loads(out)["errors"] == 1
    # with --json the messages go to the process's stderr, one line each
    assert capsys.readouterr().err == ("cupool stress: streams (round 0): RuntimeError: "
                                       "scenario exploded\n")


def test_pool_scenario_serves_from_the_plan_and_detects_a_leak(device):
    clean = run_pool_scenario(device, 5)
    assert (clean.corrupt_bytes, clean.leaked_blocks) == (0, 0)
    assert clean.notes["mode"] == "planned" and clean.notes["planned_hits"] > 0
    kept = []
    leaky = run_pool_scenario(device, 5, faults=("pool-leak",), keep=kept)
    assert leaky.leaked_blocks == 1 and len(kept) == 1
    assert leaky.bytes_checked == clean.bytes_checked


def test_streams_scenario_checks_every_round_of_every_thread(device):
    result = run_streams_scenario(device, 2, rounds=3)
    sizes = [int(np.random.default_rng([2, k]).integers(1, 1 << 20))
             for k in range(stress.THREADS)]
    assert result.bytes_checked == 2 * 3 * sum(sizes)
    assert (result.corrupt_bytes, result.leaked_blocks) == (0, 0)
    assert device.stats()["reservations.current"] == 0


@pytest.mark.parametrize("make_plan", [six_op_swap_plan, six_op_recompute_plan])
def test_walk_plan_checks_every_use_exactly(device, make_plan):
    """six_op_trace: W (8 B) used at ops 0 and 5, A (16 B) produced at 0 and used at 4
    after a swap or a recompute, B (16 B) produced at 1 and used at 2: 48 bytes checked
    per iteration."""
    trace = six_op_trace()
    plan = make_plan(trace)
    assert validate_swap_plan(trace, plan).valid
    before = device.stats()
    result = walk_plan(device, trace, plan, WalkSettings(iterations=3, seed=9))
    assert (result.bytes_checked, result.corrupt_bytes) == (3 * 48, 0)
    after = device.stats()
    assert after["reservations.current"] == after["pinned_bytes.current"] == 0
    swapped = make_plan is six_op_swap_plan
    assert after["copy_count.h2d"] - before["copy_count.h2d"] == (3 if swapped else 0)


def test_walk_plan_catches_a_corrupted_host_copy(device):
    trace = six_op_trace()
    result = walk_plan(device, trace, six_op_swap_plan(trace),
                       WalkSettings(iterations=2, faults=("swap-corrupt",)))
    assert result.corrupt_bytes == 4  # iteration 0's copy of A; iteration 1 is clean


def test_walk_plan_refuses_a_persistent_buffer_that_moves(device):
    """W is persistent and not swapped: the walker fills it once, so it must end the
    iteration where it started; a plan moving it is refused before anything is reserved."""
    trace = six_op_trace()
    moving = swap_plan(trace, [Residency(0, 0, 3, 0), Residency(0, 3, 6, 32),
                               Residency(1, 0, 5, 8), Residency(2, 1, 3, 24)])
    with pytest.raises(WalkError, match="persistent buffer 0 ends the iteration at offset 32"):
        walk_plan(device, trace, moving)
    assert device.stats()["reservations.current"] == 0
    with pytest.raises(WalkError, match="needs a swapping plan"):
        plan_walk(trace, swap_plan(trace, []))


def test_training_trace_is_seeded_and_swaps_at_half_budget():
    assert training_trace(4) == training_trace(4) != training_trace(5)
    case = swap_case(training_trace(4), 1)
    assert case is not None
    assert validate_swap_plan(case.plan_trace, case.plan).valid
    assert case.plan.arena_bytes <= training_trace(4).lower_bound_bytes() // 2
    assert any(isinstance(a, SwapIn) for a in case.plan.actions)


def test_random_workload_frees_every_block_once_except_the_carried_one():
    steps, carried, persistent = random_workload(np.random.default_rng(11))
    allocated = [s[1] for s in steps if s[0] == "alloc"]
    freed = Counter(s[1] for s in steps if s[0] == "free")
    assert sorted(allocated) == list(range(len(allocated)))
    assert set(freed) | {carried} == set(allocated) and carried not in freed
    assert max(freed.values()) == 1
    position = {(s[0], s[1]): i for i, s in enumerate(steps)}
    assert all(position[("alloc", k)] < position[("free", k)] for k in freed)
    assert 1 <= len(persistent) <= 3


def _cupy_names_in_gpu_tests() -> set[str]:
    names = set()
    for path in GPU_TESTS.glob("*.py"):
        names |= set(re.findall(r"\bcupy(?:\.[A-Za-z_]\w*)+", path.read_text()))
    return names


def test_every_cupy_name_the_gpu_tests_use_exists_in_the_installed_cupy():
    """The GPU tests cannot run here; at least every CuPy name they touch must exist."""
    cupy = pytest.importorskip("cupy")
    names = _cupy_names_in_gpu_tests()
    assert "cupy.cuda.using_allocator" in names
    for name in sorted(names):
        target = cupy
        for part in name.split(".")[1:]:
            if not hasattr(target, part):  # a submodule not imported by ``import cupy``
                target = importlib.import_module(f"{target.__name__}.{part}")
            else:
                target = getattr(target, part)
        assert target is not None, name
