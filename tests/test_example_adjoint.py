"""The 4D-Var example: a chain trained within the smallest budget a recompute schedule
needs, its control bitwise the one computed without cupool, revolve's count of
recomputes; a smaller budget refused with the op and the bytes."""

from __future__ import annotations

from math import comb

from tests.test_examples import run_example


def revolve_recomputes(steps: int, checkpoints: int) -> int:
    r = 1
    while comb(checkpoints + r, checkpoints) < steps:
        r += 1
    return r * steps - comb(checkpoints + r, checkpoints + 1) - (steps - 1)


def test_adjoint_chain_at_the_floor_is_bitwise_and_revolves():
    # the link priced so slow that no copy can beat recomputing (whatever the op times)
    lines = run_example("adjoint_chain.py", "--length", "12", "--steps", "2", "--link", "0.001")
    assert lines[0].startswith("step 0: loss ") and lines[1].startswith("step 1: loss ")
    # the bytes of one checkpoint (the control) and a step's two states: the sweep keeps
    # the last state, the 10 below it are reversed from the control in 2 units (a state
    # kept, the next re-made from it): 30 recomputes where revolve's 1 slot re-makes 55
    from tests.planning.test_revolve import units_optimum

    assert revolve_recomputes(12, 1) == 55
    assert lines[3] == f"plan: revolve, {int(units_optimum(10, 2))} recomputes, 0 swaps"
    assert lines[-2:] == ["loss decreased: yes",
                          "control bitwise identical to the run without cupool: yes"]


def test_a_budget_below_the_floor_names_the_op_and_bytes():
    import subprocess
    import sys

    from tests.test_examples import ROOT

    result = subprocess.run([sys.executable, str(ROOT / "examples" / "adjoint_chain.py"),
                             "--length", "12", "--budget", "100KiB"], capture_output=True,
                            text=True, check=False, cwd=ROOT, timeout=120)
    assert result.returncode == 2
    assert result.stdout == ("error: op 15 'adjoint12' needs 655872 bytes resident (its "
                             "inputs, updates and outputs), the budget is 102400 bytes\n")


def test_a_step_not_recomputable_is_kept_and_named():
    lines = run_example("adjoint_chain.py", "--length", "12", "--steps", "2", "--budget",
                        "800000", "--not-recomputable", "6", "--link", "0.001")
    assert lines[3].startswith("plan: revolve, ") and lines[3].endswith(" 0 swaps")
    assert lines[4] == "kept, not recomputed: op 5 (step6) is not recomputable"
    assert lines[-1] == "control bitwise identical to the run without cupool: yes"
