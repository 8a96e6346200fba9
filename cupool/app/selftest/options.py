"""What a self-test runs (:class:`SelftestOptions`) and the names every step module shares:
the steps, the devices, the defaults, the emulated link's scale."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cupool.errors import InputError

STEP_NAMES = ("environment", "link", "pool", "ops", "replay", "programs", "stress",
              "gpu_tests")
DEVICES = ("cuda", "emulated")
DEFAULT_REPLAY_TRACES = ("resnet50_train_b32_fp32", "gpt2_train_b8_s1024_bf16")
DEFAULT_BUDGETS = ("70%", "50%")
EMULATED_LINK_SCALE = 1024
"""The emulated link step paces the device at a preset / this, and copies sizes / this."""


@dataclass(frozen=True)
class SelftestOptions:
    """What :func:`run_selftest` runs. ``replay_traces`` and ``pool_traces`` are bundled
    trace names (substrings of the file names; ``pool_traces=None``: every bundled trace);
    ``op_model`` is ``(model, mode, batch)`` for the ``ops`` step (``None``: ResNet-50
    training at batch 32 on a GPU, its small configuration at batch 2 on the CPU);
    ``tests_dir`` the test suite for ``gpu_tests`` (``None``: the checkout's ``tests/``);
    ``program_steps`` the training steps of each example in the ``programs`` step (it runs
    them at ``replay_budgets``)."""

    device: str = "cuda"
    out_dir: Path = Path("bench/results/gpu")
    steps: tuple[str, ...] = STEP_NAMES
    stress_minutes: float = 3.0
    replay_traces: tuple[str, ...] = DEFAULT_REPLAY_TRACES
    replay_budgets: tuple[str, ...] = DEFAULT_BUDGETS
    replay_iterations: int = 5
    program_steps: int = 6
    pool_traces: tuple[str, ...] | None = None
    pool_rounds: int = 9
    op_model: tuple[str, str, int] | None = None
    tests_dir: Path | None = None
    test_timeout_s: float = 240.0
    seed: int = 0

    def __post_init__(self):
        if self.device not in DEVICES:
            raise InputError(f"device (={self.device!r}) must be one of {', '.join(DEVICES)}")
        unknown = [s for s in self.steps if s not in STEP_NAMES]
        if unknown or not self.steps:
            raise InputError(f"steps (={list(self.steps)!r}) must be a non-empty subset of "
                             f"{', '.join(STEP_NAMES)}")
        if not self.stress_minutes > 0:
            raise InputError(f"stress_minutes (={self.stress_minutes!r}) must be > 0")
        if isinstance(self.pool_rounds, bool) or not isinstance(self.pool_rounds, int) \
                or self.pool_rounds < 1:
            raise InputError(f"pool_rounds (={self.pool_rounds!r}) must be an int >= 1")
        if isinstance(self.program_steps, bool) or not isinstance(self.program_steps, int) \
                or self.program_steps < 2:
            raise InputError(f"program_steps (={self.program_steps!r}) must be an int >= 2")


__all__ = ["DEFAULT_BUDGETS", "DEFAULT_REPLAY_TRACES", "DEVICES", "EMULATED_LINK_SCALE",
           "STEP_NAMES", "SelftestOptions"]
