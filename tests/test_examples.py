"""The examples run as users run them, and print exactly what they should."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ONE_BLAS_THREAD = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
"""The program examples' matmuls are small: on a loaded machine BLAS threads only get in
each other's way (the examples' results do not depend on it; their speed does)."""


def run_example(name: str, *args: str) -> list[str]:
    result = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args],
                            capture_output=True, text=True, check=False, cwd=ROOT, timeout=120,
                            env=ONE_BLAS_THREAD)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_plan_example_draws_the_optimal_layout():
    assert run_example("plan_example.py") == [
        "example.12: 5 buffers, lower bound 12 B, arena 12 B (optimal)",
        " 11 111222222............",
        " 10 111222222............",
        "  9 111222222............",
        "  8 111222222............",
        "  7 333333333444444444444",
        "  6 333333333444444444444",
        "  5 333333333444444444444",
        "  4 333333333444444444444",
        "  3 555555555555555555555",
        "  2 555555555555555555555",
        "  1 555555555555555555555",
        "  0 555555555555555555555",
        "    012345678901234567890  <- op",
    ]


def test_plan_real_trace_reaches_the_lower_bound_with_auto():
    lines = run_example("plan_real_trace.py")
    assert lines[0] == ("resnet50_train_b32_bf16: 1329 buffers over 578 ops, "
                        "lower bound 1692105232 B")
    assert [line.split()[0] for line in lines[1:]] == [
        "greedy-size", "greedy-breadth", "best-fit", "auto"]
    ratios = [float(line.split()[-1]) for line in lines[1:]]
    assert all(ratio >= 1.0 for ratio in ratios)
    assert lines[-1] == "auto            arena  1692105232 B  ratio 1.0000"


STEP = re.compile(r"^step (\d+): loss (\d+\.\d+) \((passive|planned), device peak (\d+) B of "
                  r"(\d+) B, late prefetches (\d+)\)$")


@pytest.mark.parametrize("name", ["mlp_sgd.py", "gpt_decoder.py"])
def test_a_program_example_trains_within_half_its_peak_bitwise_as_without_cupool(name):
    lines = run_example(name, "--steps", "6")
    steps = [STEP.match(line) for line in lines[:6]]
    assert all(steps), lines
    assert [int(m.group(1)) for m in steps] == list(range(6))
    assert [m.group(3) for m in steps] == ["passive"] + ["planned"] * 5
    for m in steps:
        assert int(m.group(4)) <= int(m.group(5))  # the device peak within the budget
    losses = [float(m.group(2)) for m in steps]
    assert losses[-1] < losses[0]
    peak, budget = re.match(r"^program peak (\d+) B, budget (\d+) B, plan: \d+ swap",
                            lines[6]).groups()
    assert int(budget) == int(peak) // 2 - int(peak) // 2 % 512  # whole 512-byte units
    assert lines[7:] == ["loss decreased: yes",
                         "parameters bitwise identical to the run without cupool: yes"]


def test_the_readmes_first_python_runs_as_written():
    """The program in the README's first Python block trains within 50% of its peak."""
    import numpy as np

    code = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    assert "cupool.Session(" in code
    batches = [np.random.default_rng(i).random((64, 256), dtype=np.float32) for i in range(3)]
    printed = []
    namespace = {"batches": batches, "print": lambda *args: printed.append(args)}
    exec(compile(code, "README.md", "exec"), namespace)  # the README's own code
    assert [mode for _mean, mode in printed] == ["passive", "planned", "planned"]
    assert namespace["trained"].shape == (256, 256)


@pytest.mark.parametrize("name", ["mlp_arrays.py", "decoder_arrays.py"])
def test_an_array_code_example_runs_one_step_function_with_and_without_cupool(name):
    lines = run_example(name, "--steps", "3", "--budget", "50%")
    assert re.match(r"^budget 50%: program peak (\d+) B, budget (\d+) B, \d+ ops$", lines[0])
    modes = [re.match(r"^  step \d: loss \d+\.\d+ \((passive|planned), device peak \d+ B, "
                      r"late prefetches \d+\)$", line).group(1) for line in lines[1:4]]
    assert modes == ["passive", "planned", "planned"]
    assert lines[4:] == ["  parameters bitwise identical to the function run on plain "
                         "arrays: yes"]
