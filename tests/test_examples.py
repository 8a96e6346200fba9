"""The examples run as users run them, and print exactly what they should."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str) -> list[str]:
    result = subprocess.run([sys.executable, str(ROOT / "examples" / name)], capture_output=True,
                            text=True, check=False, cwd=ROOT, timeout=120)
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
